/* AttentionQKV / AttentionQKVGrad with GPT-NeoX's per-head packing (packing "heads") and the
 * partial rotary (rotary_dim < D) on the GPU (ops/cuda/attention_qkv.cu and its staging,
 * attention_qkv_staging.cuh / attention_qkv_stage.cuh) against the CPU op on the same fresh
 * random inputs: O, LSE and dX.
 *  - precision fp32 (fp8run's float32 kernels): 1e-5 relative L2;
 *  - precision bf16 on fp8run's kernels and on cuDNN (every run checked to have been cuDNN's;
 *    skipped, saying so, where cuDNN does not load): O and dX 2e-2, LSE 1e-4, the CPU emulating
 *    bf16;
 *  - each with X float32 and bfloat16 (on cuDNN a bfloat16 X is read in place where no RoPE
 *    applies: V, and with a partial rotary the staged copy must hold all of Q and K), and on
 *    cuDNN the backward also with dx_dtype bfloat16 (cuDNN writes dX itself, RoPE's transpose
 *    then in place on the rotated features only).
 * Cases: the Pythia-1B head (D 256, a quarter rotated), D 64 with 16 rotated (the vectorized
 * staging's pair units), 8 rotated interleaved, 24 rotated (not a multiple of 16: the general
 * kernels), D 24 (general kernels), no RoPE, a whole RoPE per head, Dv != D (not on cuDNN,
 * whose Dv != D no test has run); and [Q | K | V] sections with a partial rotary (GQA). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#endif

#define TOL_F32 1e-5
#define TOL_BF16 2e-2
#define TOL_LSE 1e-4

#ifdef FP8RUN_HAVE_CUDA
typedef struct lcase {
    int64_t B, T, Hq, Hk, D, Dv;
    int heads;  /* packing "heads" */
    int64_t rd; /* rotated features per head (0: no RoPE) */
    int il;     /* interleaved RoPE */
} lcase;

static const lcase k_cases[] = {
    {2, 65, 2, 2, 256, 256, 1, 64, 0}, /* Pythia-1B's head */
    {2, 130, 4, 4, 64, 64, 1, 16, 0},  /* pair units of the vectorized staging */
    {2, 97, 4, 4, 64, 64, 1, 8, 1},    /* interleaved, 8 rotated */
    {1, 130, 4, 4, 64, 64, 1, 24, 0},  /* 24 rotated: the general kernels */
    {3, 33, 6, 6, 24, 24, 1, 8, 0},    /* D 24: the general kernels */
    {2, 65, 4, 4, 64, 64, 1, 0, 0},    /* per head, no RoPE */
    {2, 130, 2, 2, 128, 128, 1, 128, 0}, /* per head, whole RoPE */
    {2, 33, 4, 4, 64, 32, 1, 32, 0},   /* Dv != D */
    {2, 130, 4, 2, 64, 64, 0, 32, 0},  /* sections, GQA, half rotated */
};

static fr_cuda_ctx *g_dnn; /* --attention cudnn, NULL when cuDNN does not load */
static int g_dnn_tried, n_dnn_runs;

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

static int64_t width(const lcase *c)
{
    return c->heads ? c->Hq * (2 * c->D + c->Dv) : (c->Hq + c->Hk) * c->D + c->Hk * c->Dv;
}

static void set_attrs(tnode *t, const lcase *c, const char *prec)
{
    TN_ATTR(t, int, "heads", c->Hq);
    TN_ATTR(t, int, "kv_heads", c->Hk);
    TN_ATTR(t, int, "head_dim", c->D);
    TN_ATTR(t, string, "precision", prec);
    TN_ATTR(t, int, "causal", 1);
    if (c->heads) TN_ATTR(t, string, "packing", "heads");
    if (c->rd && c->rd < c->D) TN_ATTR(t, int, "rotary_dim", c->rd);
    if (c->il) TN_ATTR(t, int, "interleaved", 1);
}

static void expect_close(const fr_tensor *got, const fr_tensor *want, double tol, const char *name, const char *what)
{
    const double e = gpu_rel_err(got, want);
    if (e <= tol) return;
    fprintf(stderr, "\n    %s: %s relative L2 %.3g > %.3g\n", what, name, e, tol);
    CU_FAIL("AttentionQKV (packing, partial rotary) on the GPU outside its tolerance");
}

static fr_tensor *to_bf16(fr_tensor *X)
{
    fr_tensor *b = tt_new(FR_BF16, X->rank, X->dims);
    for (int64_t i = 0; i < fr_tensor_numel(X); i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)X->data)[i]);
    fr_tensor_free(X);
    return b;
}

/* Real RoPE tables [T, rd] (cos^2 + sin^2 = 1) */
static void make_tables(const lcase *c, fr_tensor **pcs, fr_tensor **psn)
{
    fr_tensor *cs = tt_new(FR_F32, 2, (int64_t[]){c->T, c->rd}), *sn = tt_new(FR_F32, 2, (int64_t[]){c->T, c->rd});
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t j = 0; j < c->rd; j++) {
            const int64_t f = c->il ? j / 2 : j % (c->rd / 2);
            const double a = (double)t * pow(10000.0, -2.0 * (double)f / (double)c->rd);
            ((float *)cs->data)[t * c->rd + j] = (float)cos(a);
            ((float *)sn->data)[t * c->rd + j] = (float)sin(a);
        }
    *pcs = cs, *psn = sn;
}

/* One precision on one context (NULL: the harness's, fp8run's kernels); xbf: X bfloat16;
 * dxbf: the backward with dx_dtype bfloat16 (compared by value). */
static void run_case(fr_rng *r, const lcase *c, const char *prec, fr_cuda_ctx *ctx, int xbf, int dxbf)
{
    fr_tensor *X = tt_randn(r, FR_F32, 3, (int64_t[]){c->B, c->T, width(c)}, 0, 1), *cs = NULL, *sn = NULL;
    if (xbf) X = to_bf16(X);
    if (c->rd) make_tables(c, &cs, &sn);
    char what[200];
    snprintf(what, sizeof what, "%s%s%s %s B%lld T%lld Hq%lld Hk%lld D%lld Dv%lld %s rotary_dim %lld%s", prec,
             xbf ? " X bf16" : "", dxbf ? " dx bf16" : "", ctx ? "cuDNN" : "fp8run", (long long)c->B, (long long)c->T,
             (long long)c->Hq, (long long)c->Hk, (long long)c->D, (long long)c->Dv, c->heads ? "heads" : "sections",
             (long long)c->rd, c->il ? " interleaved" : "");
    const int bf = strcmp(prec, "bf16") == 0;
    const double tol = bf ? TOL_BF16 : TOL_F32;
    fr_tensor *ins[3] = {X, cs, sn};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "AttentionQKV", 1, c->rd ? 3 : 1, ins, 0u, 2);
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
    fr_tensor *bins[6] = {X, go[0], go[1], dO, cs, sn};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionQKVGrad", 1, c->rd ? 6 : 4, bins, 0u, 1);
    set_attrs(&b, c, prec);
    if (dxbf) TN_ATTR(&b, string, "dx_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&b));
    fr_tensor *gb[TN_MAX];
    const long long before_b = ctx ? ctx->attn_runs_cudnn : 0;
    st = tn_run_gpu_on(ctx, &b, gb);
    if (st != FR_OK) fprintf(stderr, "\n    %s (backward): %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before_b + 1);
    expect_close(gb[0], b.out[0], dxbf ? TOL_BF16 : tol, "dX", what);
    n_dnn_runs += ctx != NULL;
    gpu_free_outputs(&b, gb);
    gpu_free_outputs(&f, go);
    tn_free(&b);
    tn_free(&f);
    fr_tensor_free(dO);
    fr_tensor_free(X);
    fr_tensor_free(cs);
    fr_tensor_free(sn);
}
#endif

/* path 0: fp32 on fp8run's kernels; 1: bf16 on fp8run's kernels; 2: bf16 on cuDNN */
static void cases(int path, int xbf, int dxbf)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!gpu_available()) return;
    fr_cuda_ctx *ctx = path == 2 ? dnn_ctx() : NULL;
    if (path == 2 && !ctx) return;
    char seed[64];
    snprintf(seed, sizeof seed, "gpu_qkv_layout_%d_%d_%d", path, xbf, dxbf);
    fr_rng r = fr_test_rng(seed);
    n_dnn_runs = 0;
    int want = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        if (path == 2 && k_cases[i].Dv != k_cases[i].D) continue; /* (cuDNN: the shapes its tests have seen) */
        run_case(&r, &k_cases[i], path ? "bf16" : "fp32", ctx, xbf, dxbf);
        want++;
    }
    if (path == 2) {
        printf("\n  %d cases on cuDNN", n_dnn_runs);
        CU_ASSERT_EQUAL(n_dnn_runs, want);
    }
#else
    (void)path, (void)xbf, (void)dxbf;
#endif
}

static void test_fp32(void) { cases(0, 0, 0); }
static void test_fp32_xbf16(void) { cases(0, 1, 0); }
static void test_bf16_own(void) { cases(1, 0, 0); }
static void test_bf16_own_xbf16(void) { cases(1, 1, 0); }
static void test_bf16_cudnn(void) { cases(2, 0, 0); }
static void test_bf16_cudnn_xbf16(void) { cases(2, 1, 0); }
static void test_bf16_cudnn_dxbf16(void) { cases(2, 1, 1); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32},
        {"bfloat16 X, fp32 vs CPU: 1e-5", test_fp32_xbf16},
        {"bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own},
        {"bfloat16 X, bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own_xbf16},
        {"bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn},
        {"bfloat16 X, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn_xbf16},
        {"bfloat16 X, dx_dtype bfloat16, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn_dxbf16},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_attention_qkv_layout", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    const int rc = gpu_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    if (g_dnn) fr_cuda_ctx_free(g_dnn);
#endif
    return rc;
}
