/* Loading cuDNN for --attention (ops/cuda/attention_cudnn_load.c), and cuDNN's SDPA graphs,
 * without a GPU:
 *  - FP8RUN_CUDNN_LIBRARY pointing nowhere (set before anything loads cuDNN): the loader fails
 *    cleanly, naming the path; --attention auto keeps fp8run's kernels and says why; --attention
 *    cudnn is an error saying why; fp8run_cudnn_info and `fp8run info --attention ...` say it;
 *  - fr_cudnn_open on a missing file and on a library that is not cuDNN;
 *  - where a cuDNN 9 is installed (fr_cudnn_default_paths; skipped, saying so, where none is):
 *    its version, and the forward and backward operation graphs (bf16 and fp16, causal or not,
 *    MHA, GQA and MQA, T with and without the backward's padding workaround, Tq != Tk, packed
 *    sequences as variable-length sequences with ragged offsets, head dims 64, 128, 256, plain
 *    and deterministic backward) build: every tensor and operation descriptor finalizes, as does
 *    the operation graph where cuDNN allows that without a device, with the number of
 *    operations the pattern has; likewise the FP8 graphs (forward and backward, plain and
 *    causal, MHA and GQA), and what those do not take is refused;
 *  - the host reference of packed ids into cuDNN's sequences (fr_cudnn_ragged_reference): runs
 *    of equal ids per window (length-1 examples, a window that is one example, the padding
 *    run), int32 and int64 ids, ids shared by all windows, more sequences than slots.
 * Without the CUDA backend fp8run_cudnn_info says so, and --attention is accepted (a CPU run
 * has no fused attention kernels to choose). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/cli_runner.h"
#ifdef FP8RUN_HAVE_CUDA
#include <dlfcn.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_cudnn_ragged.h"
#include "runtime/io/sft_data.h"
#endif

#define MISSING "/nonexistent/libcudnn.so.9"

static void test_missing_library(void)
{
    int version = -1;
    const char *info = fp8run_cudnn_info(&version);
    CU_ASSERT_EQUAL(version, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info);
    CU_ASSERT_STRING_EQUAL(fp8run_cudnn_attention_support(), ""); /* nothing is handed to a missing cuDNN */
#ifdef FP8RUN_HAVE_CUDA
    CU_ASSERT_PTR_NOT_NULL(strstr(info, "cuDNN unavailable: FP8RUN_CUDNN_LIBRARY='" MISSING "' does not load"));
    const char *why = NULL;
    CU_ASSERT_PTR_NULL(fr_cudnn(&why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, MISSING));
    CU_ASSERT_EQUAL(fr_cudnn_version(), 0);
    /* the choice on a context (no device needed for it): auto falls back, cudnn refuses */
    fr_cuda_ctx c;
    memset(&c, 0, sizeof c);
    c.cc_major = 9;
    snprintf(c.name, sizeof c.name, "a GPU");
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(&c, "auto"));
    CU_ASSERT_EQUAL(c.attention, FR_CUDA_ATTN_FP8RUN);
    CU_ASSERT_PTR_NOT_NULL(strstr(c.attn_note, MISSING));
    char rep[512];
    fr_cuda_attention_report(&c, rep, sizeof rep);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep, "fp8run kernels (FP8RUN_CUDNN_LIBRARY='" MISSING "'"));
    CU_ASSERT_EQUAL(fr_cuda_ctx_set_attention(&c, "cudnn"), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--attention cudnn: FP8RUN_CUDNN_LIBRARY='" MISSING "'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--attention auto falls back"));
    CU_ASSERT_EQUAL(fr_cuda_ctx_set_attention(&c, "flash"), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "use fp8run, cudnn or auto"));
    /* no choice is auto: here, without cuDNN, fp8run's kernels, saying why */
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(&c, NULL));
    CU_ASSERT_EQUAL(c.attention, FR_CUDA_ATTN_FP8RUN);
    fr_cuda_attention_report(&c, rep, sizeof rep);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep, "fp8run kernels (FP8RUN_CUDNN_LIBRARY='" MISSING "'"));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(&c, "fp8run"));
    fr_cuda_attention_report(&c, rep, sizeof rep);
    CU_ASSERT_STRING_EQUAL(rep, "fp8run kernels (--attention fp8run)");
    c.attn_runs_own = 3, c.attn_runs_wgmma = 2; /* two of them on the Hopper kernels */
    fr_cuda_attention_report(&c, rep, sizeof rep);
    CU_ASSERT_STRING_EQUAL(rep, "fp8run kernels (--attention fp8run; wgmma kernels for 2 of its 3 runs)");
    c.attn_runs_own = 0, c.attn_runs_wgmma = 0;
    CU_ASSERT_EQUAL(fr_cuda_attention_parse("cudnn"), FR_CUDA_ATTN_CUDNN);
    CU_ASSERT_EQUAL(fr_cuda_attention_parse("auto"), FR_CUDA_ATTN_AUTO);
    CU_ASSERT_EQUAL(fr_cuda_attention_parse("x"), -1);
    /* `fp8run info` says what --attention will run (the CLI inherits the environment) */
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx --attention auto", FR_FIXTURES), 0, cli_out,
               "attention      fp8run's kernels (--attention auto: cuDNN unavailable: FP8RUN_CUDNN_LIBRARY='" MISSING);
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx --attention cudnn", FR_FIXTURES), 0, cli_out,
               "attention      --attention cudnn will fail on a GPU: cuDNN unavailable");
#else
    CU_ASSERT_PTR_NOT_NULL(strstr(info, "without the CUDA backend"));
#endif
    /* the default is auto (cuDNN unavailable here: no CUDA backend, or a missing library) */
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx", FR_FIXTURES), 0, cli_out,
               "attention      fp8run's kernels (--attention auto: ");
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx --attention fp8run", FR_FIXTURES), 0, cli_out,
               "attention      fp8run's kernels (--attention fp8run)");
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx --attention flash", FR_FIXTURES), 2, cli_err,
               "--attention: 'flash' is not one of fp8run, cudnn, auto");
}

#ifdef FP8RUN_HAVE_CUDA
static void test_open(void)
{
    frdnn_api api;
    void *lib = NULL;
    size_t version = 7;
    CU_ASSERT_EQUAL(fr_cudnn_open("/nonexistent/dir/libcudnn.so.9", &api, &lib, &version), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "/nonexistent/dir/libcudnn.so.9"));
    CU_ASSERT_PTR_NULL(lib);
    CU_ASSERT_EQUAL(version, 0);
    /* a library that is there but is not cuDNN */
    CU_ASSERT_EQUAL(fr_cudnn_open("libm.so.6", &api, &lib, &version), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "libm.so.6 lacks cudnnGetVersion"));
    CU_ASSERT_PTR_NULL(lib);
}

/* The first cuDNN 9 of the default paths, or NULL. */
static void *open_real(frdnn_api *api, size_t *version, const char **where)
{
    void *lib = NULL;
    for (int i = 0; fr_cudnn_default_paths[i]; i++)
        if (fr_cudnn_open(fr_cudnn_default_paths[i], api, &lib, version) == FR_OK) {
            *where = fr_cudnn_default_paths[i];
            return lib;
        }
    return NULL;
}

/* open_real, saying which cuDNN it opened, or why the graphs are skipped (NULL). */
static void *open_or_skip(frdnn_api *api, size_t *version)
{
    const char *where = NULL;
    void *lib = open_real(api, version, &where);
    if (!lib)
        printf("\n    SKIP: no cuDNN 9 at the default paths (%s): the graphs are checked where one is\n",
               fr_last_error());
    else
        printf("\n    cuDNN %zu from %s\n", *version, where);
    return lib;
}

/* Packed strides of [b, h, t, d]. */
static void packed(int64_t h, int64_t t, int64_t d, int64_t *s)
{
    s[0] = h * t * d, s[1] = t * d, s[2] = d, s[3] = 1;
}

static fr_cudnn_sdpa problem(int64_t b, int64_t hq, int64_t hk, int64_t tq, int64_t tk, int64_t d, int causal,
                             int half, int backward)
{
    fr_cudnn_sdpa p;
    memset(&p, 0, sizeof p);
    p.b = b, p.hq = hq, p.hk = hk, p.tq = tq, p.tk = tk, p.d = d, p.dv = d;
    packed(hq, tq, d, p.sq);
    packed(hk, tk, d, p.sk);
    packed(hk, tk, d, p.sv);
    packed(hq, tq, d, p.so);
    p.causal = causal, p.half = half, p.backward = backward;
    return p;
}

static void test_graphs(void)
{
    frdnn_api api;
    size_t version = 0;
    void *lib = open_or_skip(&api, &version);
    if (!lib) return;
    CU_ASSERT(version >= 90000 && version < 100000);
    static const struct {
        int64_t b, hq, hk, tq, tk, d, dv;
        int causal, half;
        int64_t window;
        float softcap;
        int padded; /* 2: segment ids (document mask) instead; 3: packed sequences (ragged) */
    } cases[] = {
        {2, 3, 3, 64, 64, 64, 64, 1, 0, 0, 0, 0},       {2, 3, 3, 65, 65, 128, 128, 0, 0, 0, 0, 0},
        {2, 4, 2, 256, 256, 128, 128, 1, 0, 0, 0, 0},   {1, 4, 1, 7, 7, 64, 64, 1, 1, 0, 0, 0},
        {2, 3, 3, 33, 70, 64, 64, 0, 0, 0, 0, 0},       {8, 16, 8, 2048, 2048, 128, 128, 1, 0, 0, 0, 0},
        {16, 12, 4, 1024, 1024, 64, 64, 1, 0, 0, 0, 0},
        /* head dim 256 (and D != Dv), sliding window, softcap, key padding, and all at once */
        {2, 4, 2, 256, 256, 256, 256, 1, 0, 0, 0, 0},   {2, 2, 2, 130, 130, 192, 128, 1, 0, 0, 0, 0},
        {2, 4, 2, 256, 256, 128, 128, 1, 0, 64, 0, 0},  {2, 4, 4, 200, 200, 64, 64, 0, 0, 0, 30.0f, 0},
        {2, 4, 2, 256, 256, 128, 128, 0, 0, 0, 0, 1},   {2, 8, 4, 384, 384, 256, 256, 1, 0, 100, 50.0f, 1},
        {2, 4, 2, 200, 200, 64, 64, 1, 0, 0, 0, 2},     {2, 8, 4, 384, 384, 256, 256, 1, 0, 100, 50.0f, 2},
        /* packed sequences (b: windows here, made slots below): D 64, 128, 256, GQA, MQA, T not
           a multiple of 128, the Llama 1B shape */
        {2, 4, 4, 200, 200, 64, 64, 1, 0, 0, 0, 3},     {3, 8, 2, 256, 256, 128, 128, 1, 0, 0, 0, 3},
        {2, 4, 1, 130, 130, 256, 256, 1, 0, 0, 0, 3},   {8, 32, 8, 2048, 2048, 64, 64, 1, 0, 0, 0, 3},
        {2, 4, 2, 256, 256, 128, 128, 1, 0, 64, 0, 3},
    };
    int graphs = 0, graphs_final = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int variant = 0; variant < 3; variant++) { /* forward, backward, deterministic backward */
            const int backward = variant > 0;
            fr_cudnn_sdpa p = problem(cases[i].b, cases[i].hq, cases[i].hk, cases[i].tq, cases[i].tk, cases[i].d,
                                      cases[i].causal, cases[i].half, backward);
            p.dv = cases[i].dv;
            packed(p.hk, p.tk, p.dv, p.sv);
            packed(p.hq, p.tq, p.dv, p.so);
            p.window = cases[i].window, p.softcap = cases[i].softcap;
            p.padded = cases[i].padded == 1 || cases[i].padded == 3, p.segments = cases[i].padded == 2;
            p.deterministic = variant == 2;
            if (cases[i].padded == 3) { /* token-major [windows, T, heads, D], one sequence a slot */
                p.ragged = p.b * p.tq;
                p.b = fr_cudnn_ragged_slots(p.b, p.tq, 0);
                const int64_t sq[4] = {p.tq * p.hq * p.d, p.d, p.hq * p.d, 1}, sk[4] = {p.tk * p.hk * p.d, p.d, p.hk * p.d, 1};
                const int64_t sv[4] = {p.tk * p.hk * p.dv, p.dv, p.hk * p.dv, 1};
                const int64_t so[4] = {p.tq * p.hq * p.dv, p.dv, p.hq * p.dv, 1};
                memcpy(p.sq, sq, sizeof sq), memcpy(p.sk, sk, sizeof sk), memcpy(p.sv, sv, sizeof sv);
                memcpy(p.so, so, sizeof so);
                if (version < 90600) continue; /* refused there (checked below) */
                if (backward && p.d > 128) { /* refused: seen wrong on a GPU (attention_cudnn_graph.c) */
                    char why[256];
                    CU_ASSERT_EQUAL(fr_cudnn_sdpa_supported(&p, version, 9, why, sizeof why), 0);
                    CU_ASSERT_PTR_NOT_NULL(strstr(why, "head dims over 128"));
                    continue;
                }
            }
            if (p.segments && backward) p.segments = 0; /* the document mask's backward is refused */
            int finalized = -1, n_ops = 0;
            const fr_status st = fr_cudnn_sdpa_check_graph(&api, version, &p, &finalized, &n_ops);
            if (st != FR_OK) fprintf(stderr, "\n    case %zu backward %d: %s\n", i, backward, fr_last_error());
            FR_ASSERT_OK(st);
            CU_ASSERT(finalized == 0 || finalized == 1);
            graphs++;
            graphs_final += finalized == 1;
            /* forward: 2 GEMMs, scale, 2 reductions, SUB, EXP, LOG, ADD, DIV (+4 causal, +5
               window, +3 softcap, +6 padding mask, +6 segment mask: both graphs);
               backward: 5 GEMMs, 3 reshapes (P, dS, K), 9 pointwise (dQ's copy included), 1
               reduction (+4 causal, +5 window, +6 softcap and its derivative, +6 per padding
               mask, +2 K/V-head reductions with GQA);
               deterministic backward: dQ written by its GEMM, no float32 accumulator and copy */
            const int pad_bwd = p.padded || (p.tk % 128 != 0 && version <= 91500);
            const int pad = backward && pad_bwd ? (version < 91000 ? 2 : 1) : 0;
            const int extra = 4 * p.causal + 5 * (p.window > 0) + 6 * p.segments;
            const int want = backward ? 18 + extra + 6 * (p.softcap > 0) + 6 * pad + 2 * (p.hq != p.hk) -
                                            p.deterministic
                                      : 10 + extra + 3 * (p.softcap > 0) + 6 * p.padded;
            CU_ASSERT_EQUAL(n_ops, want);
        }
    printf("    %d graphs built, %d operation graphs finalized without a device\n", graphs, graphs_final);
    /* what cuDNN's flash attention does not take is refused before any descriptor */
    fr_cudnn_sdpa big = problem(1, 2, 2, 16, 16, 264, 0, 0, 0);
    int finalized = 0, n_ops = 0;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &big, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "head dims 264, 264"));
    fr_cudnn_sdpa odd = problem(1, 2, 2, 16, 16, 100, 1, 0, 0);
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &odd, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "multiples of 8 up to 256"));
    fr_cudnn_sdpa win = problem(1, 2, 2, 16, 16, 64, 0, 0, 0);
    win.window = 4; /* the contract's window comes with the causal mask only */
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &win, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "without the causal mask"));
    char text[512];
    fr_cudnn_sdpa_describe_support(version, 9, text, sizeof text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "up to 256"));
    CU_ASSERT(version < 90400 || strstr(text, "softcap") != NULL);
    fr_cudnn_sdpa_describe_support(version, 8, text, sizeof text);
    CU_ASSERT_PTR_NULL(strstr(text, "softcap"));
    fr_cudnn_sdpa one = problem(1, 2, 2, 1, 1, 64, 0, 0, 1);
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &one, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "s_q = s_kv = 1"));
    fr_cudnn_sdpa groups = problem(1, 3, 2, 8, 8, 64, 0, 0, 0);
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &groups, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    /* packed sequences: head dims multiples of 16, lengths required, said by describe_support */
    fr_cudnn_sdpa rag = problem(4, 2, 2, 64, 64, 72, 1, 0, 1);
    rag.ragged = 2 * 64, rag.padded = 1;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &rag, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), version < 90600 ? "cuDNN 9.6 or newer" : "multiples of 16"));
    rag.d = rag.dv = 64, rag.padded = 0;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &rag, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    fr_cudnn_sdpa_describe_support(version, 9, text, sizeof text);
    CU_ASSERT((version >= 90600) == (strstr(text, "packed sequences") != NULL));
    CU_ASSERT(version < 90600 || strstr(text, "not on the fused Q/K/V projection)") != NULL); /* whole */
    fr_cudnn_sdpa_describe_support(version, 8, text, sizeof text);
    CU_ASSERT_PTR_NULL(strstr(text, "packed sequences"));
    dlclose(lib);
}

/* The FP8 graphs (E4M3 Q, K, V, O; E5M2 dO, dQ, dK, dV; per-tensor descales, scales and amaxes
 * in device memory): forward and backward, plain and causal, MHA and GQA, the Llama 1B shape,
 * with the operations cudnn-frontend's FP8 nodes make; what they do not take is refused first. */
static void test_graphs_fp8(void)
{
    frdnn_api api;
    size_t version = 0;
    void *lib = open_or_skip(&api, &version);
    if (!lib) return;
    static const struct {
        int64_t b, hq, hk, t, d;
        int causal;
    } cases[] = {{2, 4, 4, 64, 128, 0}, {2, 4, 2, 256, 128, 1}, {8, 16, 8, 2048, 128, 1}, {1, 8, 1, 130, 128, 1}};
    int finalized_all = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int backward = 0; backward < 2; backward++) {
            fr_cudnn_sdpa p = problem(cases[i].b, cases[i].hq, cases[i].hk, cases[i].t, cases[i].t, cases[i].d,
                                      cases[i].causal, 0, backward);
            p.fp8 = 1;
            int finalized = -1, n_ops = 0;
            const fr_status st = fr_cudnn_sdpa_check_graph(&api, version, &p, &finalized, &n_ops);
            if (version < 90100) { /* refused before any descriptor */
                CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
                continue;
            }
            if (st != FR_OK) fprintf(stderr, "\n    fp8 case %zu backward %d: %s\n", i, backward, fr_last_error());
            FR_ASSERT_OK(st);
            finalized_all &= finalized == 1;
            /* forward: Q K^T, 3 scales, softmax (7), amax and scale of P, P V with 3 scales and
               the amax (+4 causal); backward: the row sums (4), Q K^T and 3 scales, SUB, EXP,
               P's codes, 2 transposes, dV (5), dO V^T (3 with scales), SUB, MUL, the softmax
               scale, dS's amax and codes, K's view, dQ (5), dK (5) (+4 causal, +2 head sums) */
            const int want =
                backward ? 37 + 4 * cases[i].causal + 2 * (cases[i].hq != cases[i].hk) : 18 + 4 * cases[i].causal;
            CU_ASSERT_EQUAL(n_ops, want);
        }
    if (version >= 90100)
        printf("\n    FP8 graphs: operation graphs %s without a device\n",
               finalized_all ? "all finalized" : "not all finalized");
    fr_cudnn_sdpa p = problem(2, 4, 2, 64, 64, 64, 1, 0, 1);
    p.fp8 = 1;
    int finalized = 0, n_ops = 0;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &p, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), version < 90100 ? "9.1 or newer" : "128 only on Hopper"));
    p.backward = 0, p.window = 16;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_check_graph(&api, version, &p, &finalized, &n_ops), FR_ERR_UNSUPPORTED);
    char why[256];
    p.window = 0;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_supported(&p, version, 8, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "compute capability 9.0"));
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_supported(&p, version, 9, why, sizeof why), version >= 90100);
    /* the bf16-I/O variant and the engine choice: only where they mean something */
    p.fp8 = 0, p.fp8_bf16_io = 1;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_supported(&p, version, 9, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "without fp8"));
    p.fp8_bf16_io = 0, p.engine_skip = -1;
    CU_ASSERT_EQUAL(fr_cudnn_sdpa_supported(&p, version, 9, why, sizeof why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "engine_skip"));
    p.fp8 = 1, p.fp8_bf16_io = 1, p.engine_skip = 0; /* built as a graph (whether an engine takes it: the GPU's) */
    if (version >= 90100) {
        FR_ASSERT_OK(fr_cudnn_sdpa_check_graph(&api, version, &p, &finalized, &n_ops));
        CU_ASSERT_EQUAL(n_ops, 18 + 4);
    }
    dlclose(lib);
}

/* Packed ids of `windows` rows of T into sequences: the host reference of the device kernel. */
static void test_ragged_reference(void)
{
    enum { W = 3, T = 10 };
    /* window 0: examples of 3, 1 (length 1), 4, then 2 padding; window 1: one example filling
       it; window 2: ten examples of length 1 */
    const int32_t ids[W * T] = {1, 1, 1, 2, 3, 3, 3, 3, 0, 0, /**/ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int64_t ids64[W * T];
    for (int i = 0; i < W * T; i++) ids64[i] = ids[i];
    const int32_t want_start[15] = {0, 3, 4, 8, 10, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
    const int32_t want_len[15] = {3, 1, 4, 2, 10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    CU_ASSERT_EQUAL(fr_cudnn_ragged_slots(W, T, 0), W * T); /* T below the bound: a slot per token */
    CU_ASSERT_EQUAL(fr_cudnn_ragged_slots(8, 2048, 0), 8 * FR_CUDNN_RAGGED_PER_WINDOW);
    CU_ASSERT_EQUAL(fr_cudnn_ragged_slots(8, 2048, 5), 8 * 5); /* sized to the data */
    CU_ASSERT_EQUAL(fr_cudnn_ragged_slots(2, 3, 5), 2 * 3);
    /* fp8run's packer: a window's examples and its padding run fit its slots */
    CU_ASSERT(FR_SFT_MAX_EXAMPLES + 1 <= FR_CUDNN_RAGGED_PER_WINDOW);
    int32_t start[W * T], len[W * T];
    for (int wide = 0; wide < 2; wide++) {
        const int64_t n = fr_cudnn_ragged_reference(wide ? (const void *)ids64 : (const void *)ids, wide, W, T, 4, 4,
                                                    W * T, start, len);
        CU_ASSERT_EQUAL(n, 15);
        int64_t covered = 0;
        for (int k = 0; k < W * T; k++) {
            CU_ASSERT_EQUAL(start[k], k < 15 ? want_start[k] : W * T);
            CU_ASSERT_EQUAL(len[k], k < 15 ? want_len[k] : 0);
            covered += len[k];
        }
        CU_ASSERT_EQUAL(covered, W * T); /* every token in exactly one sequence */
    }
    /* one row of ids for all windows (Sk [1, T]): each window has window 0's runs */
    const int64_t n1 = fr_cudnn_ragged_reference(ids, 0, 2, T, 4, 8, 2 * T, start, len);
    CU_ASSERT_EQUAL(n1, 8);
    CU_ASSERT_EQUAL(start[4], 10);
    CU_ASSERT_EQUAL(len[4], 3);
    CU_ASSERT_EQUAL(len[7], 2);
    /* rows per problem (Sk [W * heads, T], heads broadcast as the nodes require): row r * hq */
    int32_t per_head[2 * 2 * T];
    for (int r = 0; r < 2; r++)
        for (int h = 0; h < 2; h++) memcpy(per_head + (r * 2 + h) * T, ids + (r == 0 ? 2 : 0) * T, T * sizeof(int32_t));
    CU_ASSERT_EQUAL(fr_cudnn_ragged_reference(per_head, 0, 2, T, 2, 1, 2 * T, start, len), 14);
    CU_ASSERT_EQUAL(start[10], 10);
    CU_ASSERT_EQUAL(len[10], 3);
    /* more sequences than slots: the count says so, the slots written stay within the batch */
    const int64_t over = fr_cudnn_ragged_reference(ids, 0, W, T, 1, 1, 4, start, len);
    CU_ASSERT_EQUAL(over, 15);
    CU_ASSERT_EQUAL(start[3], 8);
    for (int k = 0; k < 4; k++) CU_ASSERT(start[k] + len[k] <= W * T);
}
#endif

static CU_TestInfo tests[] = {
    {"a missing cuDNN: clean errors, auto falls back, info says so", test_missing_library},
#ifdef FP8RUN_HAVE_CUDA
    {"fr_cudnn_open: a missing file, a library that is not cuDNN", test_open},
    {"cuDNN SDPA graphs build and finalize without a device (where cuDNN is installed)", test_graphs},
    {"cuDNN FP8 SDPA graphs build and finalize without a device (where cuDNN is installed)", test_graphs_fp8},
    {"packed ids into cuDNN's variable-length sequences (host reference)", test_ragged_reference},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"attention_cudnn_load", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    setenv("FP8RUN_CUDNN_LIBRARY", MISSING, 1); /* before anything loads cuDNN */
    return fr_test_main(suites);
}
