/* The CUDA Linear with a bias (ops/cuda/linear.cu, fr_q_gemm_out in ops/cuda/quantize_finish.cu:
 * cuBLASLt's BIAS epilogue where it takes the bias, else the finishing pass) and the bfloat16
 * Gelu / ActivationGrad of the narrowed GELU MLP (ops/cuda/elementwise_unary.cu,
 * elementwise_grad.cu), against the CPU:
 *   - Linear with a bias, y_dtype bfloat16 and float32, in bf16 and fp8 (current, block)
 *     precision, on aligned shapes (the epilogue, or its fallback through a float32 result)
 *     and padded ones (N or K not a multiple of 16: the copy-out adds the bias), with W and
 *     the bias as inputs (a bfloat16 Y rounds the bias into scratch) and as constants (its bf16
 *     copy kept with W's): Y within 1e-2 relative L2 of the CPU (test_gpu_linear's tolerance:
 *     the same products in cuBLASLt's summation order), and for a bfloat16 Y every element
 *     within 2 bf16 ulps of the CPU's or within 1e-3 x rms(Y) (a cancelling sum near zero
 *     moves by more than its ulp) or within one ulp of the larger of the sum and the bias
 *     (cuBLASLt's epilogue may round the sum to bf16 before adding the bias). Both add the
 *     bias rounded to bf16 for a bfloat16 Y (ops/linear.h);
 *   - a bfloat16 Y on an aligned shape in bf16 and per-tensor fp8 takes cuBLASLt's BIAS
 *     epilogue with the bf16 bias (the GEMM report's refusals do not grow); the block recipe's
 *     choice and the whole report are printed;
 *   - ai.fp8run::Gelu with a bfloat16 X and/or Y and ActivationGrad (op Gelu) with a bfloat16
 *     dy and/or x: within 1 bf16 ulp of the CPU for a bfloat16 Y (CUDA's float functions vs the
 *     CPU's double, then one rounding each), within 1e-5 relative L2 for float32 outputs.
 * Without a GPU the program says so and passes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_gemm.h"
#endif

static int ulp_dist(uint16_t a, uint16_t b)
{
    int ia = a & 0x8000u ? -(int)(a & 0x7fffu) : (int)a, ib = b & 0x8000u ? -(int)(b & 0x7fffu) : (int)b;
    return abs(ia - ib);
}

/* one bf16 ulp at the magnitude of v (2^(e - 7) for |v| in [2^e, 2^(e+1))) */
static double bf16_ulp(double v)
{
    int e;
    frexp(fabs(v), &e);
    return v == 0 ? 0 : ldexp(1.0, e - 8);
}

/* elements of bf16 tensors further than max_ulp bf16 ulps apart and further than abs_tol; with
 * the float32 bias b (per column) also further than one ulp of the larger of the GEMM's sum and
 * the bias: cuBLASLt's BIAS epilogue into a bf16 D rounds the sum to bf16 before adding the bias
 * in some of its kernels (seen on an H200 at M=135 K=141 N=29, the heuristic's algorithm too:
 * every far result a multiple of the bias's ulp), which a sum cancelling the bias shows */
static int64_t bf16_far(const fr_tensor *got, const fr_tensor *want, int max_ulp, double abs_tol, const fr_tensor *b)
{
    int64_t far = 0, n = fr_tensor_numel(want);
    const uint16_t *g = got->data, *w = want->data;
    const int64_t cols = want->rank ? want->dims[want->rank - 1] : 1;
    for (int64_t i = 0; i < n; i++) {
        const double gv = fr_bf16_to_f32(g[i]), wv = fr_bf16_to_f32(w[i]);
        double tol = abs_tol;
        if (b) {
            const double bv = fr_bf16_to_f32(fr_f32_to_bf16(((const float *)b->data)[i % cols]));
            const double m = fmax(fabs(wv - bv), fabs(bv));
            tol = fmax(tol, bf16_ulp(m));
        }
        const int bad = ulp_dist(g[i], w[i]) > max_ulp && fabs(gv - wv) > tol;
        if (bad && far < 4) /* where they are says which path is wrong: a column (the bias), a row, a tile */
            fprintf(stderr, "\n    [%lld, %lld]: GPU %.6g, CPU %.6g", (long long)(i / cols), (long long)(i % cols),
                    (double)fr_bf16_to_f32(g[i]), (double)fr_bf16_to_f32(w[i]));
        far += bad;
    }
    return far;
}

static double bf16_rms(const fr_tensor *t)
{
    double s = 0;
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = fr_bf16_to_f32(((const uint16_t *)t->data)[i]);
        s += v * v;
    }
    return n ? sqrt(s / (double)n) : 0;
}

/* The GEMM report's counts of bias-epilogue shapes taken and refused (0 and 0 without a GPU
 * or before any biased GEMM). */
static void bias_counts(int *taken, int *refused)
{
    *taken = *refused = 0;
#ifdef FP8RUN_HAVE_CUDA
    char rep[600];
    fr_cuda_gemm_report((const fr_cuda_ctx *)gpu_ctx(), rep, sizeof rep);
    const char *p = strstr(rep, "bias epilogue: "), *q = p ? strstr(p, "refused for ") : NULL;
    if (p) *taken = atoi(p + strlen("bias epilogue: "));
    if (q) *refused = atoi(q + strlen("refused for "));
#endif
}

/* consts: W and the bias are constants (the bf16 bias kept in persistent memory); want_epi:
 * the bias epilogue must be taken (no new refusal in the GEMM report) */
static int check_linear(fr_rng *r, int64_t M, int64_t K, int64_t N, const char *prec, const char *recipe, int y_bf16,
                        int consts, int want_epi)
{
    int64_t xd[2] = {M, K}, wd[2] = {N, K}, bd[1] = {N};
    fr_tensor *x = tt_randn(r, FR_F32, 2, xd, 0.0, 1.0), *w = tt_randn(r, FR_F32, 2, wd, 0.0, 0.5);
    fr_tensor *b = tt_randn(r, FR_F32, 1, bd, 0.0, 2.0);
    fr_tensor *ins[3] = {x, w, b}, *g[TN_MAX];
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 3, ins, consts ? 6u : 0u, 1);
    TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "precision", prec);
    if (recipe) TN_ATTR(&t, string, "recipe", recipe);
    if (y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    char label[200];
    snprintf(label, sizeof label, "Linear %s %s M=%lld K=%lld N=%lld bias, Y %s%s", prec, recipe ? recipe : "",
             (long long)M, (long long)K, (long long)N, y_bf16 ? "bfloat16" : "float32",
             consts ? ", W and b constant" : "");
    int ok = tn_run(&t) == FR_OK;
    if (!ok) fprintf(stderr, "\n  %s: CPU failed: %s", label, fr_last_error());
    int taken0, refused0, taken1, refused1;
    bias_counts(&taken0, &refused0);
    ok = ok && tn_run_gpu(&t, g) == FR_OK;
    bias_counts(&taken1, &refused1);
    const int epi_ok = !want_epi || (refused1 == refused0 && taken1 >= 1);
    if (!ok) {
        fprintf(stderr, "\n  %s: failed: %s", label, fr_last_error());
    } else {
        double err = gpu_rel_err(g[0], t.out[0]);
        ok = g[0]->dtype == t.out[0]->dtype && err <= 1e-2;
        if (!ok) gpu_print_mismatch("Y", g[0], t.out[0], err, 1e-2);
        if (ok && y_bf16) {
            /* fp8: the GPU's scale from amax may flip an input's code where the CPU's rounds the
               other way, moving a row's outputs by up to about 1% of Y's rms */
            const double abs_tol = (strcmp(prec, "fp8") == 0 ? 1e-2 : 1e-3) * bf16_rms(t.out[0]);
            int64_t far = bf16_far(g[0], t.out[0], 2, abs_tol, b);
            if (far) fprintf(stderr, "\n  %s: %lld elements more than 2 bf16 ulps off", label, (long long)far);
            ok = far == 0;
        }
        if (!epi_ok)
            fprintf(stderr, "\n  %s: cuBLASLt refused the BIAS epilogue (report: %d taken, %d refused; before: %d, %d)",
                    label, taken1, refused1, taken0, refused0);
        ok = ok && epi_ok;
        gpu_free_outputs(&t, g);
    }
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(b);
    return ok;
}

static void run_prec(const char *prec, const char *recipe)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_linear_bias");
    /* aligned (the epilogue or its fallback), N and K padded, M odd and K padded */
    static const int64_t shapes[][3] = {{256, 256, 128}, {135, 141, 29}, {77, 100, 96}, {512, 1024, 384}};
    /* cuBLASLt documents a bf16 bias with a bf16 D for bf16 and per-tensor fp8 GEMMs */
    const int per_tensor = strcmp(prec, "bf16") == 0 || (recipe && strcmp(recipe, "current") == 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int aligned = shapes[s][0] % 16 == 0 && shapes[s][1] % 16 == 0 && shapes[s][2] % 16 == 0;
        for (int yb = 0; yb < 2; yb++)
            for (int consts = 0; consts < 2; consts++)
                CU_ASSERT(check_linear(&r, shapes[s][0], shapes[s][1], shapes[s][2], prec, recipe, yb, consts,
                                       yb && aligned && per_tensor));
    }
#ifdef FP8RUN_HAVE_CUDA
    char rep[600];
    fr_cuda_gemm_report((const fr_cuda_ctx *)gpu_ctx(), rep, sizeof rep);
    printf("\n    %s %s: %s", prec, recipe ? recipe : "", rep);
#endif
}

static void test_bf16(void) { run_prec("bf16", NULL); }
static void test_current(void) { run_prec("fp8", "current"); }
static void test_block(void) { run_prec("fp8", "block"); }

/* ---- Gelu / ActivationGrad on bfloat16 ---- */

static fr_tensor *to_bf16(const fr_tensor *t)
{
    fr_tensor *b = tt_new(FR_BF16, t->rank, t->dims);
    for (int64_t i = 0; i < fr_tensor_numel(t); i++)
        ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((const float *)t->data)[i]);
    return b;
}

static int check_node(tnode *t, const char *label)
{
    fr_tensor *g[TN_MAX];
    int ok = tn_run(t) == FR_OK && tn_run_gpu(t, g) == FR_OK;
    if (!ok) {
        fprintf(stderr, "\n  %s: failed: %s", label, fr_last_error());
        return 0;
    }
    if (t->out[0]->dtype == FR_BF16) {
        /* 1 ulp, or 1e-6 absolute: tanh's form cancels (1 + tanh near -1) where Gelu is tiny, and
           the GPU's float32 tanhf and the CPU's differ there by a few float32 ulps of 1 */
        int64_t far = bf16_far(g[0], t->out[0], 1, 1e-6, NULL);
        if (far) fprintf(stderr, "\n  %s: %lld elements more than 1 bf16 ulp (and 1e-6) off", label, (long long)far);
        ok = g[0]->dtype == FR_BF16 && far == 0;
    } else {
        double err = gpu_rel_err(g[0], t->out[0]);
        ok = err <= 1e-5;
        if (!ok) gpu_print_mismatch(label, g[0], t->out[0], err, 1e-5);
    }
    gpu_free_outputs(t, g);
    return ok;
}

static void test_gelu(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gelu_bf16");
    static const char *const approx[2] = {"none", "tanh"};
    int64_t d[2] = {67, 301};
    for (int a = 0; a < 2; a++) {
        fr_tensor *xf = tt_randn(&r, FR_F32, 2, d, 0, 3), *dyf = tt_randn(&r, FR_F32, 2, d, 0, 1);
        fr_tensor *xb = to_bf16(xf), *dyb = to_bf16(dyf);
        for (int mix = 1; mix < 4; mix++) { /* bit 0: X bfloat16, bit 1: Y bfloat16 */
            fr_tensor *in = mix & 1 ? xb : xf;
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Gelu", 1, 1, &in, 0u, 1);
            TN_ATTR(&t, string, "approximate", approx[a]);
            TN_ATTR(&t, string, "y_dtype", mix & 2 ? "bfloat16" : "float32");
            char label[120];
            snprintf(label, sizeof label, "Gelu %s X %s Y %s", approx[a], mix & 1 ? "bf16" : "f32", mix & 2 ? "bf16" : "f32");
            CU_ASSERT(check_node(&t, label));
            tn_free(&t);
        }
        for (int mix = 1; mix < 4; mix++) { /* bit 0: dy bfloat16, bit 1: x bfloat16 */
            fr_tensor *ins[2] = {mix & 1 ? dyb : dyf, mix & 2 ? xb : xf};
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ActivationGrad", 1, 2, ins, 0u, 1);
            TN_ATTR(&t, string, "op", "Gelu");
            TN_ATTR(&t, string, "approximate", approx[a]);
            char label[120];
            snprintf(label, sizeof label, "ActivationGrad(Gelu %s) dy %s x %s", approx[a], mix & 1 ? "bf16" : "f32",
                     mix & 2 ? "bf16" : "f32");
            CU_ASSERT(check_node(&t, label));
            tn_free(&t);
        }
        fr_tensor *all[4] = {xf, dyf, xb, dyb};
        for (int k = 0; k < 4; k++) fr_tensor_free(all[k]);
    }
}

static CU_TestInfo tests[] = {
    {"bf16 precision: Linear with a bias, Y bfloat16 / float32 == CPU", test_bf16},
    {"fp8 current: Linear with a bias, Y bfloat16 / float32 == CPU", test_current},
    {"fp8 block: Linear with a bias, Y bfloat16 / float32 == CPU", test_block},
    {"Gelu / ActivationGrad on bfloat16 == CPU", test_gelu},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_linear_bias", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
