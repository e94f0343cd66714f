/* AttentionQKV / AttentionQKVGrad with the q/k RMSNorm (inputs q_norm, k_norm:
 * ops/attention_qkv.h) on the GPU (ops/cuda/attention_qkv_norm.cuh) against the CPU op on the
 * same fresh random inputs: O, LSE, dX and both weight gradients.
 *  - precision fp32 (fp8run's float32 kernels): 1e-5 relative L2 (LSE 1e-5);
 *  - precision bf16 on fp8run's kernels and on cuDNN (every run checked to have been cuDNN's;
 *    skipped, saying so, where cuDNN does not load): 2e-2 (LSE 1e-4), the CPU emulating bf16;
 *    on cuDNN also with dx_dtype bfloat16 (cuDNN writes dX itself, the norm's backward in place)
 *    and X in bfloat16.
 * Cases: per-head norm (Qwen3's: D 128, GQA, RoPE half; and Qwen3 0.6B's heads, hq 16, hk 8),
 * full-width norm (OLMo2's: weights [heads * D]; D 64 and D 128, MHA), per-head with D 24 (not
 * a multiple of 16: the general kernels) and interleaved RoPE, interleaved RoPE with D 64 (the
 * fused kernels), per-head without RoPE, 48 heads (a token's units in two blocks), D 256 with
 * MQA; T 33 to 256, causal. On fp8run's kernels (deterministic attention) the backward runs
 * twice and must give the same bits (the weights' gradients are summed in a fixed order).
 *
 * FR_QKNORM_BENCH=1 adds a benchmark (not a check): AttentionQKV and AttentionQKVGrad on cuDNN
 * at Qwen3 0.6B's attention (B 8, T 2048, hq 16, hk 8, D 128, RoPE, per-head norm), with and
 * without the norm, X/O/dX bfloat16 (a narrowed fp8 step) and float32; node times (CUDA
 * events, 3 warm-up runs, 20 timed) and each kernel's time with the norm (the node captured in
 * a CUDA graph, each kernel replayed alone), the norm kernels' bytes as a share of the memory
 * ceiling (FR_QKNORM_BW_GBS, default 4800: an H200). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_kernel.h"
#endif

#define TOL_F32 1e-5
#define TOL_BF16 2e-2
#define TOL_LSE 1e-4

#ifdef FP8RUN_HAVE_CUDA
typedef struct ncase {
    int64_t B, T, Hq, Hk, D;
    int rope, full; /* rope 0 none, 1 half, 2 interleaved; full-width norm */
    int packed;     /* packed SFT windows: segment ids Sk = Sq, seg_form packed */
} ncase;

static const ncase k_cases[] = {
    {2, 256, 4, 2, 128, 1, 0, 0},
    {2, 130, 4, 4, 64, 1, 1, 0},
    {3, 33, 6, 3, 24, 2, 0, 0},
    {1, 97, 8, 2, 64, 0, 0, 0},
    {2, 96, 16, 8, 128, 1, 0, 0}, /* Qwen3 0.6B's heads */
    {1, 80, 8, 8, 128, 1, 1, 0},  /* OLMo2's full width at D 128 */
    {2, 45, 4, 2, 64, 2, 0, 0},   /* interleaved RoPE on the fused kernels */
    {1, 40, 40, 8, 128, 1, 0, 0}, /* 48 heads: two chunks of a token's units, one across Q and K */
    {1, 50, 4, 1, 256, 1, 0, 0},  /* D 256 (16 lanes a head), MQA */
};

static fr_cuda_ctx *g_dnn;
static int g_dnn_tried;

static fr_cuda_ctx *dnn_ctx(void)
{
    if (g_dnn_tried) return g_dnn;
    g_dnn_tried = 1;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_dnn));
    if (fr_cuda_ctx_set_attention(g_dnn, "cudnn") != FR_OK) {
        printf("\n  cuDNN path skipped: %s", fr_last_error());
        fr_clear_error();
        fr_cuda_ctx_free(g_dnn);
        g_dnn = NULL;
    }
    return g_dnn;
}

static void set_attrs(tnode *t, const ncase *c, const char *prec)
{
    TN_ATTR(t, int, "heads", c->Hq);
    TN_ATTR(t, int, "kv_heads", c->Hk);
    TN_ATTR(t, int, "head_dim", c->D);
    TN_ATTR(t, string, "precision", prec);
    TN_ATTR(t, int, "causal", 1);
    TN_ATTR(t, float, "qk_norm_eps", 1e-6f);
    if (c->rope == 2) TN_ATTR(t, int, "interleaved", 1);
    if (c->packed) TN_ATTR(t, string, "seg_form", "packed");
}

/* Packed windows' segment ids [B, T] int32: examples 1, 2, ... of random lengths (1 to T / 2, the
 * last one cut at the window's end) */
static fr_tensor *make_ids(fr_rng *r, const ncase *c)
{
    fr_tensor *s = tt_new(FR_I32, 2, (int64_t[]){c->B, c->T});
    for (int64_t b = 0; b < c->B; b++) {
        int32_t id = 1;
        for (int64_t t = 0; t < c->T; id++) {
            const int64_t len = 1 + (int64_t)(fr_rng_uniform(r) * (double)(c->T / 2));
            for (int64_t j = 0; j < len && t < c->T; j++, t++) ((int32_t *)s->data)[b * c->T + t] = id;
        }
    }
    return s;
}

static void expect_close(const fr_tensor *got, const fr_tensor *want, double tol, const char *name, const char *what)
{
    const double e = gpu_rel_err(got, want);
    if (e <= tol) return;
    fprintf(stderr, "\n    %s: %s relative L2 %.3g > %.3g\n", what, name, e, tol);
    CU_FAIL("AttentionQKV with q/k norm on the GPU outside its tolerance");
}

static fr_tensor *to_bf16(fr_tensor *X)
{
    fr_tensor *b = tt_new(FR_BF16, X->rank, X->dims);
    for (int64_t i = 0; i < fr_tensor_numel(X); i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)X->data)[i]);
    fr_tensor_free(X);
    return b;
}

static void make_tables(const ncase *c, fr_tensor **pcs, fr_tensor **psn)
{
    const int64_t d[2] = {c->T, c->D};
    fr_tensor *cs = tt_new(FR_F32, 2, d), *sn = tt_new(FR_F32, 2, d);
    for (int64_t i = 0; i < c->T; i++)
        for (int64_t j = 0; j < c->D; j++) {
            const int64_t f = c->rope == 2 ? j / 2 : j % (c->D / 2);
            const double a = (double)i * pow(10000.0, -2.0 * (double)f / (double)c->D);
            ((float *)cs->data)[i * c->D + j] = (float)cos(a);
            ((float *)sn->data)[i * c->D + j] = (float)sin(a);
        }
    *pcs = cs, *psn = sn;
}

static void run_case(fr_rng *r, const ncase *c, const char *prec, fr_cuda_ctx *ctx, int xbf, int dx_bf16)
{
    const int64_t W = (c->Hq + 2 * c->Hk) * c->D;
    fr_tensor *X = tt_randn(r, FR_F32, 3, (int64_t[]){c->B, c->T, W}, 0, 1), *cs = NULL, *sn = NULL;
    if (xbf) X = to_bf16(X);
    if (c->rope) make_tables(c, &cs, &sn);
    fr_tensor *wq = tt_randn(r, FR_F32, 1, (int64_t[]){c->full ? c->Hq * c->D : c->D}, 1, 0.3);
    fr_tensor *wk = tt_randn(r, FR_F32, 1, (int64_t[]){c->full ? c->Hk * c->D : c->D}, 1, 0.3);
    char what[200];
    snprintf(what, sizeof what, "%s%s%s %s B%lld T%lld Hq%lld Hk%lld D%lld rope%d full%d", prec, xbf ? " X bf16" : "",
             dx_bf16 ? " dX bf16" : "", ctx ? "cuDNN" : "fp8run", (long long)c->B, (long long)c->T, (long long)c->Hq,
             (long long)c->Hk, (long long)c->D, c->rope, c->full);
    const int bf = strcmp(prec, "bf16") == 0;
    const double tol = bf ? TOL_BF16 : TOL_F32;
    fr_tensor *ids = c->packed ? make_ids(r, c) : NULL;
    fr_tensor *ins[7] = {X, cs, sn, ids, ids, wq, wk};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "AttentionQKV", 1, 7, ins, 0u, 2);
    set_attrs(&f, c, prec);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *go[TN_MAX];
    const long long before = ctx ? ctx->attn_runs_cudnn : 0;
    fr_status st = tn_run_gpu_on(ctx, &f, go);
    if (st != FR_OK) fprintf(stderr, "\n    %s: %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before + 1);
    expect_close(go[0], f.out[0], tol, "O", what);
    expect_close(go[1], f.out[1], bf ? TOL_LSE : TOL_F32, "LSE", what);
    fr_tensor *dO = tt_randn(r, FR_F32, go[0]->rank, go[0]->dims, 0, 1);
    fr_tensor *bins[10] = {X, go[0], go[1], dO, cs, sn, ids, ids, wq, wk};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionQKVGrad", 1, 10, bins, 0u, 3);
    set_attrs(&b, c, prec);
    if (dx_bf16) TN_ATTR(&b, string, "dx_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&b));
    fr_tensor *gb[TN_MAX];
    const long long before_b = ctx ? ctx->attn_runs_cudnn : 0;
    st = tn_run_gpu_on(ctx, &b, gb);
    if (st != FR_OK) fprintf(stderr, "\n    %s (backward): %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before_b + 1);
    expect_close(gb[0], b.out[0], tol, "dX", what);
    expect_close(gb[1], b.out[1], tol, "dq_norm", what);
    expect_close(gb[2], b.out[2], tol, "dk_norm", what);
    if (!ctx) { /* fp8run's attention is deterministic: so must the norm's backward be */
        fr_tensor *g2[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu_on(ctx, &b, g2));
        for (int o = 0; o < 3; o++)
            if (memcmp(g2[o]->data, gb[o]->data, gb[o]->nbytes) != 0) {
                fprintf(stderr, "\n    %s: output %d differs between two runs\n", what, o);
                CU_FAIL("the q/k norm's backward is not repeatable bit for bit");
            }
        gpu_free_outputs(&b, g2);
    }
    gpu_free_outputs(&b, gb);
    gpu_free_outputs(&f, go);
    tn_free(&b);
    tn_free(&f);
    fr_tensor *all[] = {dO, X, cs, sn, wq, wk, ids};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}
#endif

static void test_fp32(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(__func__);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        run_case(&r, &k_cases[i], "fp32", NULL, 0, 0);
        run_case(&r, &k_cases[i], "fp32", NULL, 1, 0);
    }
#endif
}

static void test_bf16_own(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(__func__);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        run_case(&r, &k_cases[i], "bf16", NULL, 0, 0);
        run_case(&r, &k_cases[i], "bf16", NULL, 1, 1);
    }
#endif
}

/* Packed SFT windows with the q/k norm on cuDNN: the forward on the projection, the backward on
 * cuDNN's variable-length form with Q, K, V and their gradients in separate token-major copies
 * (the norm's backward reading them there); Qwen3 0.6B's heads among them. Skipped where cuDNN
 * does not take packed sequences (9.6 and Hopper). */
static void test_bf16_cudnn_packed(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) return;
    if (fr_cudnn_version() < 90600 || c->cc_major < 9) {
        printf("\n  SKIP: cuDNN %zu on compute capability %d: packed sequences need cuDNN 9.6 and Hopper",
               fr_cudnn_version(), c->cc_major);
        return;
    }
    static const ncase packed[] = {
        {2, 256, 4, 2, 128, 1, 0, 1},
        {3, 96, 16, 8, 128, 1, 0, 1}, /* Qwen3 0.6B's heads */
        {2, 130, 4, 4, 64, 1, 1, 1},  /* full width */
        {2, 45, 4, 2, 64, 2, 0, 1},   /* interleaved RoPE */
        {1, 97, 8, 2, 64, 0, 0, 1},   /* no RoPE */
    };
    fr_rng r = fr_test_rng(__func__);
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++) {
        run_case(&r, &packed[i], "bf16", c, 0, 0);
        run_case(&r, &packed[i], "bf16", c, 1, 1);
    }
#endif
}

static void test_bf16_cudnn(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) return;
    fr_rng r = fr_test_rng(__func__);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        if (k_cases[i].D % 8) continue; /* (cuDNN takes multiples of 8) */
        run_case(&r, &k_cases[i], "bf16", c, 0, 0);
        run_case(&r, &k_cases[i], "bf16", c, 1, 0);
        run_case(&r, &k_cases[i], "bf16", c, 1, 1);
    }
#endif
}

/* ---- FR_QKNORM_BENCH=1 ---- */

#ifdef FP8RUN_HAVE_CUDA
/* A device tensor of random values uniform in [lo, hi) (bf16: rounded), freed by dev_free. */
static fr_tensor *dev_new(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double lo, double hi)
{
    fr_tensor *t = calloc(1, sizeof *t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    t->dtype = dt, t->rank = rank;
    memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    const int64_t n = fr_tensor_numel(t);
    t->nbytes = (size_t)n * fr_dtype_size(dt);
    void *h = malloc(t->nbytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)(lo + (hi - lo) * fr_rng_uniform(r));
        if (dt == FR_BF16)
            ((uint16_t *)h)[i] = fr_f32_to_bf16(v);
        else
            ((float *)h)[i] = v;
    }
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&t->data, t->nbytes), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(t->data, h, t->nbytes, cudaMemcpyHostToDevice), cudaSuccess);
    free(h);
    return t;
}

static void dev_free(fr_tensor *t)
{
    if (!t) return;
    cudaFree(t->data);
    free(t);
}

/* One node ready to run on the device: its graph, tensors and planned scratch. */
typedef struct bnode {
    tnode t;
    const fr_cuda_kernel_def *def;
    fr_cuda_kctx kc;
    fr_tensor *in[TN_MAX], *out[TN_MAX];
    void *scratch;
} bnode;

static void bnode_init(bnode *b, fr_cuda_ctx *c, const char *op, const ncase *nc, const char *ydt, int n_in,
                       fr_tensor *const *in, int n_out, fr_tensor *const *out)
{
    memset(b, 0, sizeof *b);
    tn_init_domain(&b->t, "ai.fp8run", op, 1, n_in, in, 0u, n_out);
    set_attrs(&b->t, nc, "bf16");
    if (ydt) TN_ATTR(&b->t, string, strcmp(op, "AttentionQKV") == 0 ? "o_dtype" : "dx_dtype", ydt);
    for (int i = 0; i < n_in; i++) b->in[i] = in[i];
    for (int i = 0; i < n_out; i++) b->out[i] = out[i];
    const fr_node *n = tn_node(&b->t);
    b->def = fr_cuda_kernel_find(n->domain, n->op_type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b->def);
    size_t sb = 0;
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
    FR_ASSERT_OK(fr_cuda_kernel_scratch(b->def, &env, b->t.g, n, &sb));
    if (sb) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&b->scratch, sb), cudaSuccess);
    const fr_cuda_kctx kc = {b->t.g, n, 1, n_in, n_out, b->in, b->out, c, b->scratch, sb, NULL, 0, NULL};
    b->kc = kc;
}

static void bnode_free(bnode *b)
{
    if (b->scratch) cudaFree(b->scratch);
    tn_free(&b->t);
}

/* ms per run (3 warm-up runs, then 20 between two events) */
static double bnode_ms(bnode *b)
{
    fr_cuda_ctx *c = b->kc.cu;
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    for (int i = 0; i < 3; i++) FR_ASSERT_OK(b->def->run(&b->kc));
    CU_ASSERT_EQUAL(cudaEventRecord(e0, c->stream), cudaSuccess);
    for (int i = 0; i < 20; i++) FR_ASSERT_OK(b->def->run(&b->kc));
    CU_ASSERT_EQUAL(cudaEventRecord(e1, c->stream), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return ms / 20;
}

/* "ns::name" of a mangled kernel name (template arguments and anonymous namespaces left out). */
static void short_name(const char *m, char *buf, size_t n)
{
    buf[0] = 0;
    if (strncmp(m, "_Z", 2) != 0) {
        snprintf(buf, n, "%.60s", m);
        return;
    }
    const char *p = m + 2;
    if (*p == 'N') p++;
    size_t at = 0;
    while (*p >= '0' && *p <= '9') {
        const long len = strtol(p, (char **)&p, 10);
        if (len <= 0 || (long)strlen(p) < len) break;
        if (strncmp(p, "_GLOBAL__N", 10) != 0 && at + 3 + (size_t)len < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%.*s", at ? "::" : "", (int)len, p);
        p += len;
    }
}

/* Each kernel of one run of b alone: the run captured into a CUDA graph, each kernel node
 * replayed alone (a clone of the graph without the others), 3 warm-up launches then 20 timed.
 * The fused norm kernels' bytes (fwd8: Q and K of X read, written bf16; bwd8: the gradient
 * (bf16), X read, dX written) as a share of bw GB/s. Failures print and return (a benchmark). */
static void kernel_table(bnode *b, double e_qk, double xs, double ds, double bw)
{
    fr_cuda_ctx *c = b->kc.cu;
    cudaGraph_t g = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        printf("      (no capture: %s)\n", cudaGetErrorString(cudaGetLastError()));
        return;
    }
    const fr_status st = b->def->run(&b->kc);
    const cudaError_t ce = cudaStreamEndCapture(c->stream, &g);
    if (st != FR_OK || ce != cudaSuccess) {
        printf("      (capture failed: %s)\n", st != FR_OK ? fr_last_error() : cudaGetErrorString(ce));
        fr_clear_error();
        if (g) cudaGraphDestroy(g);
        return;
    }
    size_t nn = 0;
    cudaGraphGetNodes(g, NULL, &nn);
    cudaGraphNode_t *nodes = calloc(nn ? nn : 1, sizeof *nodes), *drop = calloc(nn ? nn : 1, sizeof *drop);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nodes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(drop);
    cudaGraphGetNodes(g, nodes, &nn);
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    double total = 0;
    for (size_t i = 0; i < nn; i++) {
        enum cudaGraphNodeType ty;
        if (cudaGraphNodeGetType(nodes[i], &ty) != cudaSuccess || ty == cudaGraphNodeTypeEmpty) continue;
        char name[160] = "", grid[48] = "";
        if (ty == cudaGraphNodeTypeKernel) {
            struct cudaKernelNodeParams kp;
            memset(&kp, 0, sizeof kp);
            snprintf(name, sizeof name, "kernel (cuDNN's, or unnamed)");
            if (cudaGraphKernelNodeGetParams(nodes[i], &kp) == cudaSuccess) {
                snprintf(grid, sizeof grid, "<<<(%u,%u),(%u,%u)>>>", kp.gridDim.x, kp.gridDim.y, kp.blockDim.x,
                         kp.blockDim.y);
#if CUDART_VERSION >= 12030
                const char *m = NULL;
                if (kp.func && cudaFuncGetName(&m, kp.func) == cudaSuccess && m) short_name(m, name, sizeof name);
#endif
            }
            cudaGetLastError(); /* (a cuDNN node's params may not be the runtime's to read) */
        } else {
            snprintf(name, sizeof name, "%s", ty == cudaGraphNodeTypeMemset ? "memset" : ty == cudaGraphNodeTypeMemcpy
                                                                                          ? "memcpy" : "other node");
        }
        cudaGraph_t cl = NULL;
        cudaGraphExec_t ex = NULL;
        int ok = cudaGraphClone(&cl, g) == cudaSuccess;
        size_t nd = 0;
        for (size_t j = 0; ok && j < nn; j++)
            if (j != i) ok = cudaGraphNodeFindInClone(&drop[nd++], nodes[j], cl) == cudaSuccess;
        for (size_t j = 0; ok && j < nd; j++) ok = cudaGraphDestroyNode(drop[j]) == cudaSuccess;
        ok = ok && cudaGraphInstantiate(&ex, cl, 0) == cudaSuccess;
        float ms = 0;
        for (int w = 0; ok && w < 3; w++) ok = cudaGraphLaunch(ex, c->stream) == cudaSuccess;
        ok = ok && cudaEventRecord(e0, c->stream) == cudaSuccess;
        for (int r = 0; ok && r < 20; r++) ok = cudaGraphLaunch(ex, c->stream) == cudaSuccess;
        ok = ok && cudaEventRecord(e1, c->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
             cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess;
        if (ex) cudaGraphExecDestroy(ex);
        if (cl) cudaGraphDestroy(cl);
        if (!ok) {
            printf("      %-34s %-28s (not timed: %s)\n", name, grid, cudaGetErrorString(cudaGetLastError()));
            continue;
        }
        ms /= 20;
        total += ms;
        double bytes = 0;
        if (strstr(name, "fwd8_kernel")) bytes = e_qk * (xs + 2);
        if (strstr(name, "bwd8_kernel")) bytes = e_qk * (2 + xs + ds);
        if (bytes > 0)
            printf("      %-34s %-28s %8.4f ms  %6.1f MB  %6.0f GB/s  %5.1f%% of the ceiling\n", name, grid, ms,
                   bytes / 1e6, bytes / (ms * 1e6), 100.0 * bytes / (ms * 1e6) / bw);
        else
            printf("      %-34s %-28s %8.4f ms\n", name, grid, ms);
    }
    printf("      %-63s %8.4f ms (kernels alone, summed)\n", "", total);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    free(nodes), free(drop);
    cudaGraphDestroy(g);
    fflush(stdout);
}

/* AttentionQKV(Grad) at Qwen3 0.6B's attention with and without the norm; bf_io: X, O, dO and dX
 * bfloat16 (a narrowed fp8 step), else float32. */
static void bench_qwen3(fr_cuda_ctx *c, int bf_io, double bw)
{
    const ncase nc = {8, 2048, 16, 8, 128, 1, 0, 0};
    const int64_t W = (nc.Hq + 2 * nc.Hk) * nc.D, N = nc.Hq * nc.D;
    const fr_dtype io = bf_io ? FR_BF16 : FR_F32;
    fr_rng r = fr_test_rng("qknorm_bench");
    fr_tensor *X = dev_new(&r, io, 3, (int64_t[]){nc.B, nc.T, W}, -1.7, 1.7);
    fr_tensor *cs = dev_new(&r, FR_F32, 2, (int64_t[]){nc.T, nc.D}, -1, 1);
    fr_tensor *sn = dev_new(&r, FR_F32, 2, (int64_t[]){nc.T, nc.D}, -1, 1);
    fr_tensor *wq = dev_new(&r, FR_F32, 1, (int64_t[]){nc.D}, 0.7, 1.3);
    fr_tensor *wk = dev_new(&r, FR_F32, 1, (int64_t[]){nc.D}, 0.7, 1.3);
    fr_tensor *O = dev_new(&r, io, 3, (int64_t[]){nc.B, nc.T, N}, -1, 1);
    fr_tensor *dO = dev_new(&r, io, 3, (int64_t[]){nc.B, nc.T, N}, -1, 1);
    fr_tensor *L = dev_new(&r, FR_F32, 3, (int64_t[]){nc.B, nc.Hq, nc.T}, 0, 1);
    fr_tensor *dX = dev_new(&r, io, 3, (int64_t[]){nc.B, nc.T, W}, 0, 0);
    fr_tensor *dwq = dev_new(&r, FR_F32, 1, (int64_t[]){nc.D}, 0, 0);
    fr_tensor *dwk = dev_new(&r, FR_F32, 1, (int64_t[]){nc.D}, 0, 0);
    const char *ydt = bf_io ? "bfloat16" : NULL;
    printf("    Qwen3 0.6B attention, cuDNN, B8 T2048 hq16 hk8 D128 RoPE, per-head q/k norm; X, O, dO, dX %s:\n",
           bf_io ? "bfloat16" : "float32");
    fr_tensor *fin[7] = {X, cs, sn, NULL, NULL, wq, wk}, *fout[2] = {O, L};
    fr_tensor *bin[10] = {X, O, L, dO, cs, sn, NULL, NULL, wq, wk}, *bout[3] = {dX, dwq, dwk};
    double ms[2][2];
    for (int norm = 1; norm >= 0; norm--) {
        bnode f, b;
        bnode_init(&f, c, "AttentionQKV", &nc, ydt, norm ? 7 : 3, fin, 2, fout);
        ms[norm][0] = bnode_ms(&f);
        bnode_init(&b, c, "AttentionQKVGrad", &nc, ydt, norm ? 10 : 6, bin, norm ? 3 : 1, bout);
        ms[norm][1] = bnode_ms(&b);
        bnode_free(&b);
        bnode_free(&f);
    }
    printf("      AttentionQKV     %8.3f ms with the norm, %8.3f ms without: the norm's extra %7.3f ms\n", ms[1][0],
           ms[0][0], ms[1][0] - ms[0][0]);
    printf("      AttentionQKVGrad %8.3f ms with the norm, %8.3f ms without: the norm's extra %7.3f ms\n", ms[1][1],
           ms[0][1], ms[1][1] - ms[0][1]);
    fflush(stdout);
    const double e_qk = (double)(nc.B * nc.T * (nc.Hq + nc.Hk) * nc.D), xs = bf_io ? 2 : 4;
    bnode f, b;
    bnode_init(&f, c, "AttentionQKV", &nc, ydt, 7, fin, 2, fout);
    FR_ASSERT_OK(f.def->run(&f.kc)); /* (O and LSE for the backward; plans made before the capture) */
    printf("      kernels of AttentionQKV with the norm:\n");
    kernel_table(&f, e_qk, xs, xs, bw);
    bnode_init(&b, c, "AttentionQKVGrad", &nc, ydt, 10, bin, 3, bout);
    FR_ASSERT_OK(b.def->run(&b.kc));
    printf("      kernels of AttentionQKVGrad with the norm:\n");
    kernel_table(&b, e_qk, xs, xs, bw);
    bnode_free(&b);
    bnode_free(&f);
    fflush(stdout);
    fr_tensor *all[] = {X, cs, sn, wq, wk, O, dO, L, dX, dwq, dwk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dev_free(all[i]);
}
#endif

static void test_bench(void)
{
#ifdef FP8RUN_HAVE_CUDA
    const char *e = getenv("FR_QKNORM_BENCH");
    if (!e || strcmp(e, "1") != 0) return;
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) {
        printf("\n  FR_QKNORM_BENCH: skipped (cuDNN does not load)");
        return;
    }
    const char *bws = getenv("FR_QKNORM_BW_GBS");
    const double bw = bws && atof(bws) > 0 ? atof(bws) : 4800;
    printf("\n    (ceiling: %.0f GB/s; %s)\n", bw, c->name);
    bench_qwen3(c, 1, bw);
    bench_qwen3(c, 0, bw);
#endif
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"q/k norm, fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32},
        {"q/k norm, bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own},
        {"q/k norm, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn},
        {"q/k norm, packed SFT windows, bf16 on cuDNN's variable-length form vs CPU: 2e-2", test_bf16_cudnn_packed},
        {"FR_QKNORM_BENCH=1: Qwen3 0.6B's attention with and without the norm, per kernel (not a check)", test_bench},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_attention_qkv_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    const int rc = gpu_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    if (g_dnn) fr_cuda_ctx_free(g_dnn);
#endif
    return rc;
}
