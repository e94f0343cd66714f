/* AttentionQKV / AttentionQKVGrad on the GPU (ops/cuda/attention_qkv.cu) against the CPU op
 * (ops/attention_qkv.c) on the same fresh random inputs:
 *  - precision fp32 (fp8run's float32 kernels on head-major copies): O, LSE, dX within 1e-5
 *    relative L2 of the CPU;
 *  - precision bf16 on fp8run's kernels (--attention fp8run) and on cuDNN (--attention cudnn,
 *    each run checked to have been cuDNN's through the context's counters; skipped, saying so,
 *    where cuDNN does not load): O and dX within 2e-2 relative L2 of the CPU's bf16 emulation
 *    (the CPU rounds the normalized probabilities, flash kernels the unnormalized ones, and
 *    cuDNN's outputs are bf16), LSE within 1e-4. The backward reads each path's own forward
 *    outputs, on the CPU and the GPU alike.
 * Cases: GQA, MHA and MQA heads; RoPE half, interleaved and none; [T, D] and [B, 1, T, D]
 * tables; causal and not; T 33, 65, 97, 130, 256 (odd, not multiples of 64, and one); D 64 and
 * 128 (the vectorized staging kernels of attention_qkv_stage.cuh) and D 24 (not a multiple of
 * 16: the general one-element kernels); the 2-D output of GPT-2's rows. Each again with X in
 * bfloat16 (a narrowed Q/K/V projection, passes/narrow_activations.h; the CPU reference reads
 * the same bf16 X, which it widens exactly), at the same tolerances. */
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
typedef struct qcase {
    int64_t B, T, Hq, Hk, D;
    int rope, table, causal, flat; /* rope 0 none, 1 half, 2 interleaved; table 2 [T, D], 4 [B, 1, T, D] */
} qcase;

static const qcase k_cases[] = {
    {2, 130, 4, 2, 64, 1, 2, 1, 0},  {2, 256, 4, 4, 128, 2, 4, 1, 0}, {2, 65, 6, 2, 64, 0, 2, 1, 1},
    {1, 130, 8, 1, 128, 1, 4, 0, 0}, {2, 256, 4, 2, 128, 1, 2, 1, 0}, {3, 33, 6, 3, 24, 1, 4, 1, 0},
    {2, 97, 8, 2, 64, 2, 2, 1, 1},
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

static void set_attrs(tnode *t, const qcase *c, const char *prec)
{
    TN_ATTR(t, int, "heads", c->Hq);
    TN_ATTR(t, int, "kv_heads", c->Hk);
    TN_ATTR(t, int, "head_dim", c->D);
    TN_ATTR(t, string, "precision", prec);
    if (c->causal) TN_ATTR(t, int, "causal", 1);
    if (c->rope == 2) TN_ATTR(t, int, "interleaved", 1);
    if (c->flat) TN_ATTR(t, int, "flat_output", 1);
}

static void expect_close(const fr_tensor *got, const fr_tensor *want, double tol, const char *name, const char *what)
{
    const double e = gpu_rel_err(got, want);
    if (e <= tol) return;
    fprintf(stderr, "\n    %s: %s relative L2 %.3g > %.3g\n", what, name, e, tol);
    CU_FAIL("AttentionQKV on the GPU outside its tolerance");
}

/* X's values rounded to bfloat16, in a bfloat16 tensor (X itself is freed) */
static fr_tensor *to_bf16(fr_tensor *X)
{
    fr_tensor *b = tt_new(FR_BF16, X->rank, X->dims);
    for (int64_t i = 0; i < fr_tensor_numel(X); i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)X->data)[i]);
    fr_tensor_free(X);
    return b;
}

/* One precision on one context (NULL: the harness's, --attention fp8run); xbf: X in bfloat16. */
static void run_case(fr_rng *r, const qcase *c, const char *prec, fr_cuda_ctx *ctx, int xbf)
{
    const int64_t W = (c->Hq + 2 * c->Hk) * c->D;
    fr_tensor *X = tt_randn(r, FR_F32, 3, (int64_t[]){c->B, c->T, W}, 0, 1), *cs = NULL, *sn = NULL;
    if (xbf) X = to_bf16(X);
    if (c->rope) { /* real RoPE tables: cos^2 + sin^2 = 1 */
        const int rank = c->table == 4 ? 4 : 2;
        const int64_t d2[2] = {c->T, c->D}, d4[4] = {c->B, 1, c->T, c->D};
        cs = tt_new(FR_F32, rank, rank == 4 ? d4 : d2);
        sn = tt_new(FR_F32, rank, rank == 4 ? d4 : d2);
        const int64_t rows = fr_tensor_numel(cs) / c->D;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < c->D; j++) {
                const int64_t f = c->rope == 2 ? j / 2 : j % (c->D / 2);
                const double a = (double)(i % c->T + (i / c->T) * 3) * pow(10000.0, -2.0 * (double)f / (double)c->D);
                ((float *)cs->data)[i * c->D + j] = (float)cos(a);
                ((float *)sn->data)[i * c->D + j] = (float)sin(a);
            }
    }
    char what[200];
    snprintf(what, sizeof what, "%s%s %s B%lld T%lld Hq%lld Hk%lld D%lld rope%d table%d causal%d flat%d", prec, xbf ? " X bf16" : "",
             ctx ? "cuDNN" : "fp8run", (long long)c->B, (long long)c->T, (long long)c->Hq, (long long)c->Hk,
             (long long)c->D, c->rope, c->table, c->causal, c->flat);
    const int bf = strcmp(prec, "bf16") == 0;
    const double tol = bf ? TOL_BF16 : TOL_F32;
    fr_tensor *ins[3] = {X, cs, sn};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "AttentionQKV", 1, c->rope ? 3 : 1, ins, 0u, 2);
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
    /* backward from the GPU's forward outputs */
    fr_tensor *dO = tt_randn(r, FR_F32, go[0]->rank, go[0]->dims, 0, 1);
    fr_tensor *bins[6] = {X, go[0], go[1], dO, cs, sn};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionQKVGrad", 1, c->rope ? 6 : 4, bins, 0u, 1);
    set_attrs(&b, c, prec);
    FR_ASSERT_OK(tn_run(&b));
    fr_tensor *gb[TN_MAX];
    const long long before_b = ctx ? ctx->attn_runs_cudnn : 0;
    st = tn_run_gpu_on(ctx, &b, gb);
    if (st != FR_OK) fprintf(stderr, "\n    %s (backward): %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before_b + 1);
    expect_close(gb[0], b.out[0], tol, "dX", what);
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

static void fp32_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_fp32_xbf16" : "test_fp32");
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "fp32", NULL, xbf);
#else
    (void)xbf;
#endif
}

static void bf16_own_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_bf16_own_xbf16" : "test_bf16_own");
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "bf16", NULL, xbf);
#else
    (void)xbf;
#endif
}

static void bf16_cudnn_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) return;
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_bf16_cudnn_xbf16" : "test_bf16_cudnn");
    n_dnn_runs = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "bf16", c, xbf);
    printf("\n  %d cases on cuDNN", n_dnn_runs);
#else
    (void)xbf;
#endif
}

static void test_fp32(void) { fp32_cases(0); }
static void test_bf16_own(void) { bf16_own_cases(0); }
static void test_bf16_cudnn(void) { bf16_cudnn_cases(0); }
static void test_fp32_xbf16(void) { fp32_cases(1); }
static void test_bf16_own_xbf16(void) { bf16_own_cases(1); }
static void test_bf16_cudnn_xbf16(void) { bf16_cudnn_cases(1); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32},
        {"bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own},
        {"bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn},
        {"bfloat16 X, fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32_xbf16},
        {"bfloat16 X, bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own_xbf16},
        {"bfloat16 X, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn_xbf16},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_attention_qkv", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    const int rc = gpu_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    if (g_dnn) fr_cuda_ctx_free(g_dnn);
#endif
    return rc;
}
