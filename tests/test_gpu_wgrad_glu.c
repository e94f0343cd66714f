/* LinearGradWeight with x_glu (ops/linear.h) on the CUDA backend: the weight gradient reads a
 * one-input SwiGLU's gate_up and remakes X = SwiGLU(gate_up) inside its quantization pass
 * (ops/cuda/quantize.cu, fr_q_glu_t). Fresh random gate_up N(0, 3) (the sigmoid's tails) and dY
 * N(0, 1), for every activation (silu, gelu_tanh, gelu), gate_up float32 and bfloat16, X
 * (SwiGLU's y_dtype) float32 and bfloat16, the delayed and current recipes, transB 0 and 1,
 * dY as it is and as the data gradient's dYq codes, and shapes aligned to 16 (the 128x128
 * cast-transpose tiles) and not (the padded 32x32 tiles). What must hold:
 *   - dW bit for bit the GPU's dW from X itself, X made by the GPU's SwiGLU node: the remade X
 *     is the SwiGLU's, so the codes and the GEMM are the same;
 *   - dW within 1e-2 relative L2 of the CPU's x_glu node (fp8 GEMM summation order, the
 *     Linear family's contract).
 * Printed, not asserted: at the 1B step's down projection (16384 tokens, F 5632, N 2048, bf16
 * gate_up and X, dYq codes) the time of SwiGLU + LinearGradWeight(X) against the one
 * LinearGradWeight(gate_up) that replaces them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"

static const char *const k_acts[3] = {"silu", "gelu_tanh", "gelu"};

typedef struct gcase {
    int64_t M, K, N;
} gcase;

static const gcase k_shapes[] = {{64, 48, 32}, {256, 128, 64}, {37, 20, 24}, {130, 40, 18}};
#define N_SHAPES (int)(sizeof k_shapes / sizeof k_shapes[0])

static float amax_of(const fr_tensor *t)
{
    float m = 0;
    const int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        const float v = t->dtype == FR_BF16 ? fr_bf16_to_f32(((const uint16_t *)t->data)[i]) : ((const float *)t->data)[i];
        m = fmaxf(m, fabsf(v));
    }
    return m;
}

static void wgrad_attrs(tnode *t, const char *recipe, int transB)
{
    TN_ATTR(t, string, "precision", "fp8");
    TN_ATTR(t, string, "recipe", recipe);
    TN_ATTR(t, int, "transB", transB);
}

/* One case: gu16 gate_up bfloat16, y16 X bfloat16, dyq dY as the data gradient's codes. */
static void run_case(fr_rng *rng, const gcase *s, const char *act, int gu16, int y16, const char *recipe,
                     int transB, int dyq)
{
    const int delayed = strcmp(recipe, "delayed") == 0;
    int64_t gd[2] = {s->M, 2 * s->K}, yd[2] = {s->M, s->N};
    fr_tensor *guf = tt_randn(rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
    fr_tensor *gu = gu16 ? gub : guf, *dy = tt_randn(rng, FR_F32, 2, yd, 0.0, 1.0);
    char what[256];
    snprintf(what, sizeof what, "M %lld K %lld N %lld %s gate_up %s X %s %s transB %d dY %s", (long long)s->M,
             (long long)s->K, (long long)s->N, act, gu16 ? "bf16" : "f32", y16 ? "bf16" : "f32", recipe, transB,
             dyq ? "codes" : "float");
    /* X by the SwiGLU node, on the GPU (and the CPU, for the scale) */
    tnode sw;
    tn_init_domain(&sw, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, &gu, 0, 1);
    TN_ATTR(&sw, string, "activation", act);
    if (y16) TN_ATTR(&sw, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&sw));
    fr_tensor *xg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&sw, xg));
    fr_tensor *sx = tt_scalar1(448.0f / fmaxf(amax_of(sw.out[0]), 1e-6f) / 2),
              *sdy = tt_scalar1(57344.0f / amax_of(dy) / 4);
    /* dY as the data gradient hands it over: LinearGradData's dYq and its scale_inv (CPU) */
    fr_tensor *dq = dy, *dq_sinv = delayed ? sdy : NULL;
    tnode dd;
    int have_dd = 0;
    if (dyq) {
        int64_t wd[2] = {transB ? s->N : s->K, transB ? s->K : s->N};
        fr_tensor *w = tt_randn(rng, FR_F32, 2, wd, 0.0, 1.0);
        fr_tensor *din[4] = {dy, w, delayed ? tt_scalar1(1.0f) : NULL, delayed ? sdy : NULL};
        tn_init_domain(&dd, FR_DOMAIN_FP8RUN, "LinearGradData", 1, delayed ? 4 : 2, din, 0, 4);
        tn_omit_output(&dd, 1);
        wgrad_attrs(&dd, recipe, transB);
        FR_ASSERT_OK(tn_run(&dd));
        dq = dd.out[2];
        dq_sinv = dd.out[3];
        have_dd = 1;
        fr_tensor_free(w);
        if (din[2]) fr_tensor_free(din[2]);
    }
    /* the reference: LinearGradWeight(X from the GPU's SwiGLU) on the GPU */
    fr_tensor *rin[4] = {xg[0], dq, delayed ? sx : NULL, dyq ? dq_sinv : (delayed ? sdy : NULL)};
    const int n_in = dyq || delayed ? 4 : 2;
    tnode ref, glu;
    tn_init_domain(&ref, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, n_in, rin, 0, 1);
    wgrad_attrs(&ref, recipe, transB);
    FR_ASSERT_OK(tn_run(&ref));
    fr_tensor *rg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&ref, rg));
    /* the node under test: LinearGradWeight(gate_up) with x_glu */
    fr_tensor *gin[4] = {gu, dq, rin[2], rin[3]};
    tn_init_domain(&glu, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, n_in, gin, 0, 1);
    wgrad_attrs(&glu, recipe, transB);
    TN_ATTR(&glu, string, "x_glu", act);
    if (y16) TN_ATTR(&glu, string, "x_glu_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&glu));
    fr_tensor *gg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&glu, gg));
    char lab[320];
    snprintf(lab, sizeof lab, "%s: dW from gate_up vs dW from the SwiGLU's X (GPU, bits)", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, gg[0], rg[0]), 0);
    const double err = gpu_rel_err(gg[0], glu.out[0]);
    if (!(err <= 1e-2)) {
        fprintf(stderr, "\n  case: %s\n", what);
        gpu_print_mismatch("dW", gg[0], glu.out[0], err, 1e-2);
    }
    CU_ASSERT(err <= 1e-2);
    gpu_free_outputs(&glu, gg);
    gpu_free_outputs(&ref, rg);
    gpu_free_outputs(&sw, xg);
    tn_free(&glu);
    tn_free(&ref);
    if (have_dd) tn_free(&dd);
    tn_free(&sw);
    fr_tensor_free(sx);
    fr_tensor_free(sdy);
    fr_tensor_free(dy);
    fr_tensor_free(guf);
    fr_tensor_free(gub);
}

static void test_bits(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_wgrad_glu");
    for (int i = 0; i < N_SHAPES; i++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 4; c++) {
                const int gu16 = c & 1, y16 = c >> 1;
                run_case(&rng, &k_shapes[i], k_acts[a], gu16, y16, "delayed", (i + c) & 1, c != 1);
                run_case(&rng, &k_shapes[i], k_acts[a], gu16, y16, "current", (i + c + 1) & 1, c == 3);
            }
}

/* the 1B down projection: SwiGLU + LinearGradWeight(X, dYq) against LinearGradWeight(gate_up, dYq) */
static void test_times(void)
{
    if (!gpu_available()) return;
    const int64_t M = 16384, F = 5632, N = 2048;
    int64_t gd[2] = {M, 2 * F}, xd[2] = {M, F}, qd[2] = {N, M}, one = 1;
    fr_tensor gu = gpu_shape_only(FR_BF16, 2, gd), x = gpu_shape_only(FR_BF16, 2, xd);
    fr_tensor q = gpu_shape_only(FR_F8E5M2, 2, qd), s1 = gpu_shape_only(FR_F32, 1, &one);
    double bytes = 0;
    tnode sw, w1, w2;
    fr_tensor *swin[1] = {&gu}, *in1[4] = {&x, &q, &s1, &s1}, *in2[4] = {&gu, &q, &s1, &s1};
    tn_init_domain(&sw, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, swin, 0, 1);
    TN_ATTR(&sw, string, "y_dtype", "bfloat16");
    const double t_sw = gpu_time_node(&sw, 20, &bytes);
    tn_init_domain(&w1, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, in1, 0, 1);
    wgrad_attrs(&w1, "delayed", 1);
    const double t_w1 = gpu_time_node(&w1, 20, &bytes);
    tn_init_domain(&w2, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, in2, 0, 1);
    wgrad_attrs(&w2, "delayed", 1);
    TN_ATTR(&w2, string, "x_glu", "silu");
    TN_ATTR(&w2, string, "x_glu_dtype", "bfloat16");
    const double t_w2 = gpu_time_node(&w2, 20, &bytes);
    printf("\n    1B down projection, X remade: SwiGLU %.3f ms + LinearGradWeight(X) %.3f ms = %.3f ms; "
           "LinearGradWeight(gate_up, x_glu) %.3f ms\n",
           t_sw, t_w1, t_sw + t_w1, t_w2);
    tn_free(&sw);
    tn_free(&w1);
    tn_free(&w2);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"x_glu: dW bit for bit the SwiGLU's X's, within 1e-2 of the CPU", test_bits},
        {"x_glu at the 1B down projection: times (printed)", test_times},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_wgrad_glu", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
