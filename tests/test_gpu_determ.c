/* --deterministic on the GPU (label gpu: skips without a device; the cuDNN cases skip, saying
 * so, where cuDNN does not load).
 *
 *  - A generated Llama (d 256, 2 layers, 4 heads of 64, 2 K/V heads, vocab 512) trains 4 steps
 *    of 2 micro-batches (B 2 x T 128), twice in one process, each run in a fresh session, with
 *    --deterministic and --attention auto: every step's loss and gradient norm, and every
 *    trained weight afterwards, are the same bits in both runs. bf16, and fp8 delayed where the
 *    GPU has FP8 (compute capability 8.9+).
 *  - Where cuDNN loads, the attention line names cuDNN's fused flash attention on its
 *    deterministic engines for every run, or (should cuDNN offer no deterministic engine for
 *    a node) fp8run's kernels with "no deterministic engine" as the reason: never a run on a
 *    non-deterministic cuDNN engine. The GEMM line says the heuristic's algorithm was taken.
 *  - --attention fp8run --deterministic: the same bits run to run as well (no cuDNN).
 *  - The op: AttentionGrad on a context with --deterministic (fresh random inputs; MHA and GQA,
 *    causal and not, T 65 (cuDNN <= 9.15's padding workaround), Tq != Tk, and the 1B's head
 *    dim 128 at T 512): dQ, dK, dV within 1e-2 relative L2 of the float64 reference (the fused
 *    op in float64 on the bf16-rounded inputs, as test_gpu_attention_cudnn), and a second run
 *    the same bits. cuDNN must have run it (the context's counters), unless cuDNN offered no
 *    deterministic engine: then fp8run's kernels ran it, the note says so, and the program
 *    says which shapes. Also for information: whether two default-context runs differed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_kernel.h" /* the device's compute capability */
#endif

#define STEPS 4
#define GA 2
#define BATCH 2
#define SEQ 128
#define VOCAB 512

typedef struct run_out {
    double loss[STEPS], gnorm[STEPS];
    float *w; /* every trained parameter, concatenated in the session's order */
    size_t nw;
    char attn[1200], gemm[1200];
} run_out;

static fp8run_model *tiny_llama(void)
{
    fp8run_llama_config c;
    if (fp8run_llama_config_init(&c, sizeof c) != FP8RUN_OK) return NULL;
    c.dim = 256, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.ffn = 512, c.vocab = VOCAB, c.max_seq = SEQ;
    c.seed = 7;
    fp8run_model *m = NULL;
    if (fp8run_model_generate_llama(&c, &m) != FP8RUN_OK) printf("\n  generate: %s\n", fp8run_last_error());
    return m;
}

/* Train STEPS steps on `tokens` with these choices; 0 on success (out filled). */
static int train(const fp8run_model *m, const char *precision, const char *attention, int det, const int64_t *tokens,
                 run_out *out)
{
    memset(out, 0, sizeof *out);
    fp8run_train_config c;
    if (fp8run_train_config_init(&c, sizeof c) != FP8RUN_OK) return -1;
    c.batch = BATCH, c.seq_len = SEQ, c.grad_accum = GA;
    c.precision = precision;
    c.attention = attention;
    c.deterministic = det;
    c.lr = 1e-3;
    fp8run_session *s = NULL;
    if (fp8run_session_create(m, "cuda", &c, &s) != FP8RUN_OK) {
        printf("\n  session (%s, --attention %s): %s\n", precision, attention, fp8run_last_error());
        return -1;
    }
    const size_t per_step = (size_t)GA * BATCH * (SEQ + 1);
    int rc = 0;
    for (int k = 0; k < STEPS && rc == 0; k++) {
        fp8run_step_stats st = {.struct_size = sizeof st};
        if (fp8run_session_train_step(s, tokens + (size_t)k * per_step, FP8RUN_DTYPE_INT64, per_step, &st) !=
            FP8RUN_OK) {
            printf("\n  step %d: %s\n", k, fp8run_session_error(s));
            rc = -1;
        }
        out->loss[k] = st.loss;
        out->gnorm[k] = st.grad_norm;
    }
    snprintf(out->attn, sizeof out->attn, "%s", fp8run_session_attention(s));
    snprintf(out->gemm, sizeof out->gemm, "%s", fp8run_session_gemm(s));
    const int np = fp8run_session_param_count(s);
    for (int i = 0; i < np && rc == 0; i++) {
        fp8run_value_info pi = {.struct_size = sizeof pi};
        if (fp8run_session_param(s, i, &pi) != FP8RUN_OK || pi.numel < 0)
            rc = -1;
        else
            out->nw += (size_t)pi.numel;
    }
    out->w = rc == 0 ? malloc(out->nw * sizeof *out->w) : NULL;
    if (rc == 0 && !out->w) rc = -1;
    size_t off = 0;
    for (int i = 0; i < np && rc == 0; i++) {
        fp8run_value_info pi = {.struct_size = sizeof pi};
        if (fp8run_session_param(s, i, &pi) != FP8RUN_OK ||
            fp8run_session_get_param(s, pi.name, out->w + off, (size_t)pi.numel) != FP8RUN_OK)
            rc = -1;
        off += (size_t)pi.numel;
    }
    fp8run_session_destroy(s);
    return rc;
}

static int same_run(const run_out *a, const run_out *b)
{
    return memcmp(a->loss, b->loss, sizeof a->loss) == 0 && memcmp(a->gnorm, b->gnorm, sizeof a->gnorm) == 0 &&
           a->nw == b->nw && a->nw && memcmp(a->w, b->w, a->nw * sizeof *a->w) == 0;
}

static void tokens_for(const char *name, int64_t *t, size_t n)
{
    fr_rng r = fr_test_rng(name);
    for (size_t i = 0; i < n; i++) t[i] = (int64_t)(fr_rng_uniform(&r) * VOCAB) % VOCAB;
}

/* Two --deterministic runs of `precision` with `attention`: the same bits; the lines checked. */
static void check(const char *precision, const char *attention, int with_cudnn)
{
    fp8run_model *m = tiny_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const size_t n = (size_t)STEPS * GA * BATCH * (SEQ + 1);
    int64_t *tok = malloc(n * sizeof *tok);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    tokens_for(precision, tok, n);
    run_out a, b;
    const int ra = train(m, precision, attention, 1, tok, &a), rb = train(m, precision, attention, 1, tok, &b);
    CU_ASSERT_EQUAL(ra, 0);
    CU_ASSERT_EQUAL(rb, 0);
    if (ra == 0 && rb == 0) {
        const int same = same_run(&a, &b);
        printf("\n    %s --attention %s --deterministic: losses %.6f .. %.6f, %zu weights: %s\n      attention: %s\n"
               "      gemm: %s\n",
               precision, attention, a.loss[0], a.loss[STEPS - 1], a.nw, same ? "bit-identical" : "DIFFER", a.attn,
               a.gemm);
        CU_ASSERT(same);
        CU_ASSERT(isfinite(a.loss[STEPS - 1]) && a.loss[STEPS - 1] > 0); /* random tokens: nothing to learn */
        CU_ASSERT_PTR_NOT_NULL(strstr(a.gemm, "the heuristic's first algorithm (--deterministic)"));
        CU_ASSERT_STRING_EQUAL(a.attn, b.attn);
        if (with_cudnn) {
            /* cuDNN's deterministic engines ran every attention, or fp8run's kernels ran a node
               for want of one (and say so); never cuDNN without "deterministic engines" */
            const int dn = strstr(a.attn, "fused flash attention") != NULL;
            const int own = strstr(a.attn, "fp8run kernels") != NULL;
            CU_ASSERT(dn || own);
            if (dn) CU_ASSERT_PTR_NOT_NULL(strstr(a.attn, "deterministic engines (--deterministic)"));
            if (own) CU_ASSERT_PTR_NOT_NULL(strstr(a.attn, "no deterministic engine"));
            if (dn && !own) printf("      cuDNN ran every attention node on deterministic engines\n");
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(a.attn, "fp8run kernels"));
        }
    }
    free(a.w);
    free(b.w);
    free(tok);
    fp8run_model_destroy(m);
}

static int cudnn_loads(void)
{
    int version = 0;
    const char *info = fp8run_cudnn_info(&version);
    if (version <= 0) printf("\n    SKIP the cuDNN cases: %s\n", info);
    return version > 0;
}

static int has_fp8(void)
{
    const struct fr_cuda_ctx *c = gpu_ctx();
    (void)c;
#ifdef FP8RUN_HAVE_CUDA
    if (c && c->cc_major * 10 + c->cc_minor >= 89) return 1;
#endif
    printf("\n    SKIP fp8: the GPU has no FP8 tensor cores (compute capability < 8.9)\n");
    return 0;
}

static void test_bf16_cudnn(void)
{
    if (!gpu_available() || !cudnn_loads()) return;
    check("bf16", "auto", 1);
}

static void test_fp8_cudnn(void)
{
    if (!gpu_available() || !cudnn_loads() || !has_fp8()) return;
    check("fp8", "auto", 1);
}

static void test_bf16_own(void)
{
    if (!gpu_available()) return;
    check("bf16", "fp8run", 0);
}

/* ---- the op on a --deterministic context ---- */

#ifdef FP8RUN_HAVE_CUDA
#define TOL_REF 1e-2

/* x rounded to bf16, as float64: what cuDNN reads. */
static fr_tensor *bf16_f64(const fr_tensor *x)
{
    fr_tensor *y = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F64, x->rank, x->dims, "bf16 as f64", &y));
    for (int64_t i = 0; i < fr_tensor_numel(x); i++)
        ((double *)y->data)[i] = (double)fr_bf16_to_f32(fr_f32_to_bf16(((const float *)x->data)[i]));
    return y;
}

static int same_bits(const fr_tensor *a, const fr_tensor *b)
{
    return a && b && fr_tensor_numel(a) == fr_tensor_numel(b) &&
           memcmp(a->data, b->data, (size_t)fr_tensor_numel(a) * fr_dtype_size(a->dtype)) == 0;
}

static void set_attrs(tnode *t, int causal, const char *prec)
{
    if (causal) TN_ATTR(t, int, "causal", 1);
    TN_ATTR(t, string, "precision", prec);
}

typedef struct acase {
    int rq;
    int64_t q[5];
    int rk;
    int64_t k[5];
    int causal;
} acase;

static int n_dnn, n_own, n_default_differ;

static void det_case(fr_cuda_ctx *det, fr_cuda_ctx *dflt, fr_rng *r, const acase *c)
{
    fr_tensor *Q = tt_randn(r, FR_F32, c->rq, c->q, 0, 1), *K = tt_randn(r, FR_F32, c->rk, c->k, 0, 1),
              *V = tt_randn(r, FR_F32, c->rk, c->k, 0, 1);
    char what[256], s1[64], s2[64];
    snprintf(what, sizeof what, "causal=%d Q %s K %s", c->causal, fr_shape_str(c->rq, c->q, s1, sizeof s1),
             fr_shape_str(c->rk, c->k, s2, sizeof s2));
    /* the float64 forward gives O and LSE for both backwards */
    fr_tensor *Q64 = bf16_f64(Q), *K64 = bf16_f64(K), *V64 = bf16_f64(V), *r_ins[3] = {Q64, K64, V64};
    tnode rf;
    tn_init_domain(&rf, "ai.fp8run", "Attention", 1, 3, r_ins, 0u, 2);
    set_attrs(&rf, c->causal, "fp32");
    FR_ASSERT_OK(tn_run(&rf));
    fr_tensor *O = NULL, *L = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, rf.out[0]->rank, rf.out[0]->dims, "O", &O));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, rf.out[1]->rank, rf.out[1]->dims, "LSE", &L));
    for (int64_t i = 0; i < fr_tensor_numel(O); i++) ((float *)O->data)[i] = (float)fr_tensor_get_f64(rf.out[0], i);
    for (int64_t i = 0; i < fr_tensor_numel(L); i++) ((float *)L->data)[i] = (float)fr_tensor_get_f64(rf.out[1], i);
    fr_tensor *dO = tt_randn(r, FR_F32, O->rank, O->dims, 0, 1), *dO64 = bf16_f64(dO);
    fr_tensor *bins[6] = {Q, K, V, O, L, dO}, *rb_ins[6] = {Q64, K64, V64, rf.out[0], rf.out[1], dO64};
    tnode b, rb;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, 6, bins, 0u, 3);
    set_attrs(&b, c->causal, "bf16");
    FR_ASSERT_OK(tn_run(&b));
    tn_init_domain(&rb, "ai.fp8run", "AttentionGrad", 1, 6, rb_ins, 0u, 3);
    set_attrs(&rb, c->causal, "fp32");
    FR_ASSERT_OK(tn_run(&rb));
    const long long dn0 = det->attn_runs_cudnn, own0 = det->attn_runs_own;
    fr_tensor *g1[TN_MAX], *g2[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu_on(det, &b, g1));
    FR_ASSERT_OK(tn_run_gpu_on(det, &b, g2));
    const long long dn = det->attn_runs_cudnn - dn0, own = det->attn_runs_own - own0;
    CU_ASSERT(dn + own == 2);
    if (own) {
        printf("\n    %s: fp8run's kernels (%s)", what, det->attn_note);
        CU_ASSERT_PTR_NOT_NULL(strstr(det->attn_note, "no deterministic engine"));
        n_own++;
    } else {
        n_dnn++;
    }
    static const char *names[3] = {"dQ", "dK", "dV"};
    for (int o = 0; o < 3; o++) {
        const double e = gpu_rel_l2(g1[o], rb.out[o]);
        if (e > TOL_REF)
            fprintf(stderr, "\n    %s: %s vs float64: relative L2 %.3g > %.3g\n", what, names[o], e, TOL_REF);
        CU_ASSERT(e <= TOL_REF);
        if (!same_bits(g1[o], g2[o])) fprintf(stderr, "\n    %s: %s differs between two runs\n", what, names[o]);
        CU_ASSERT(same_bits(g1[o], g2[o]));
    }
    if (dflt) { /* for information: the default context's backward, twice */
        fr_tensor *h1[TN_MAX], *h2[TN_MAX];
        if (tn_run_gpu_on(dflt, &b, h1) == FR_OK && tn_run_gpu_on(dflt, &b, h2) == FR_OK)
            n_default_differ += !(same_bits(h1[0], h2[0]) && same_bits(h1[1], h2[1]) && same_bits(h1[2], h2[2]));
        gpu_free_outputs(&b, h1);
        gpu_free_outputs(&b, h2);
    }
    gpu_free_outputs(&b, g1);
    gpu_free_outputs(&b, g2);
    tn_free(&rb);
    tn_free(&b);
    tn_free(&rf);
    fr_tensor *all[] = {Q, K, V, O, L, dO, Q64, K64, V64, dO64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}
#endif

static void test_op(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!gpu_available() || !cudnn_loads()) return;
    fr_cuda_ctx *det = NULL, *dflt = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &det));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(det, "auto"));
    det->deterministic = 1;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &dflt));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(dflt, "cudnn"));
    fr_rng r = fr_test_rng("gpu_determ_op");
    const acase cases[] = {
        {4, {2, 3, 256, 64}, 4, {2, 3, 256, 64}, 0},         {4, {2, 3, 65, 64}, 4, {2, 3, 65, 64}, 1},
        {4, {2, 3, 33, 64}, 4, {2, 3, 70, 64}, 0},           {5, {2, 2, 3, 128, 64}, 5, {2, 2, 1, 128, 64}, 1},
        {5, {2, 4, 2, 512, 128}, 5, {2, 4, 1, 512, 128}, 1}, /* the 1B's head dim and groups */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) det_case(det, dflt, &r, &cases[i]);
    char rep[1200];
    fr_cuda_attention_report(det, rep, sizeof rep);
    printf("\n    %d shapes on cuDNN's deterministic engines, %d on fp8run's kernels; within %.0e of float64, "
           "bit-identical twice\n    attention: %s\n    default context (cuDNN, no --deterministic): %d of %zu shapes "
           "differed between two runs\n",
           n_dnn, n_own, TOL_REF, rep, n_default_differ, sizeof cases / sizeof cases[0]);
    CU_ASSERT_EQUAL(n_dnn + n_own, (int)(sizeof cases / sizeof cases[0]));
    fr_cuda_ctx_free(det);
    fr_cuda_ctx_free(dflt);
#endif
}

static CU_TestInfo tests[] = {
    {"AttentionGrad --deterministic: cuDNN vs float64, two runs bit for bit", test_op},
    {"bf16, cuDNN attention: --deterministic runs bit-identical", test_bf16_cudnn},
    {"fp8 delayed, cuDNN attention: --deterministic runs bit-identical", test_fp8_cudnn},
    {"bf16, fp8run attention: --deterministic runs bit-identical", test_bf16_own},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_determ", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
