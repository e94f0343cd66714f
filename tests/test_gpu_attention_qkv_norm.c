/* AttentionQKV / AttentionQKVGrad with the q/k RMSNorm (inputs q_norm, k_norm:
 * ops/attention_qkv.h) on the GPU (ops/cuda/attention_qkv_norm.cuh) against the CPU op on the
 * same fresh random inputs: O, LSE, dX and both weight gradients.
 *  - precision fp32 (fp8run's float32 kernels): 1e-5 relative L2 (LSE 1e-5);
 *  - precision bf16 on fp8run's kernels and on cuDNN (every run checked to have been cuDNN's;
 *    skipped, saying so, where cuDNN does not load): 2e-2 (LSE 1e-4), the CPU emulating bf16;
 *    on cuDNN also with dx_dtype bfloat16 (cuDNN writes dX itself, the norm's backward in place)
 *    and X in bfloat16.
 * Cases: per-head norm (Qwen3's: D 128, GQA, RoPE half), full-width norm (OLMo2's: D 64, MHA),
 * per-head with D 24 (not a multiple of 16: the general staging kernels) and interleaved RoPE,
 * per-head without RoPE; T 33 to 256, causal. */
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
typedef struct ncase {
    int64_t B, T, Hq, Hk, D;
    int rope, full; /* rope 0 none, 1 half, 2 interleaved; full-width norm */
} ncase;

static const ncase k_cases[] = {
    {2, 256, 4, 2, 128, 1, 0},
    {2, 130, 4, 4, 64, 1, 1},
    {3, 33, 6, 3, 24, 2, 0},
    {1, 97, 8, 2, 64, 0, 0},
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
    fr_tensor *ins[7] = {X, cs, sn, NULL, NULL, wq, wk};
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
    fr_tensor *bins[10] = {X, go[0], go[1], dO, cs, sn, NULL, NULL, wq, wk};
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
    gpu_free_outputs(&b, gb);
    gpu_free_outputs(&f, go);
    tn_free(&b);
    tn_free(&f);
    fr_tensor *all[] = {dO, X, cs, sn, wq, wk};
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

int main(void)
{
    CU_TestInfo tests[] = {
        {"q/k norm, fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32},
        {"q/k norm, bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own},
        {"q/k norm, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_attention_qkv_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    const int rc = gpu_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    if (g_dnn) fr_cuda_ctx_free(g_dnn);
#endif
    return rc;
}
