/* The CUDA Linear family with bfloat16 X and dY (ops/linear.h, ops/cuda/linear.cu and the
 * bf16-source quantization kernels of ops/cuda/quantize.cu), for bf16 and fp8 precision, every
 * fp8 recipe (delayed, current, block), both transB, both fp8 formats, on padded shapes (no dim
 * a multiple of 16: the 32x32 tile kernels, the scalar amax), aligned ones (the 16-byte cast +
 * transpose and flat kernels, the vector amax) and a large unaligned one. The reducing kernels
 * run with FP8RUN_QUANT_BLOCKS=3 (unless set) so the grid-stride loops' remainders run.
 * What must hold:
 *   - GPU with bfloat16 inputs == GPU with the float32 inputs of the same values, every output
 *     bit for bit (Y, Xq, Xq_scale_inv, amax_x/w, dX, amax_dy, dYq, dYq_scale_inv, dW): the
 *     same codes into the same GEMMs;
 *   - against the CPU emulation with the bfloat16 inputs: codes, scales, amaxes and bf16 copies
 *     bit for bit, Y / dX / dW within 1e-2 relative L2 (test_gpu_linear's tolerance: the same
 *     products in cuBLASLt's summation order);
 *   - dx_dtype bfloat16 (the GEMM writes bf16): each dX element is the float32 dX of the same
 *     build rounded to nearest even, or one bf16 ulp from it, or within 1e-5 x rms(dX) of it
 *     (cuBLASLt may pick another algorithm for a bf16 result: a cancelling sum near zero then
 *     moves by more than its own ulp); the count of inexact elements is printed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "tests/linear_pair.h"

static int64_t g_ulp1, g_elems; /* dx_dtype bfloat16: elements one ulp off, of all compared */

/* Node t (built with lp_init) on the CPU and the GPU; GPU outputs into g (caller frees). */
static int run_both(tnode *t, fr_tensor **g, const char *label)
{
    for (int o = 0; o < TN_MAX; o++) g[o] = NULL;
    if (tn_run(t) != FR_OK) {
        fprintf(stderr, "\n  %s: CPU failed: %s\n", label, fr_last_error());
        return 0;
    }
    if (tn_run_gpu(t, g) != FR_OK) {
        fprintf(stderr, "\n  %s: GPU failed: %s\n", label, fr_last_error());
        return 0;
    }
    return 1;
}

/* The node with float32 (a) and bfloat16 (b) inputs on both devices. keep_f: the float32
 * node's CPU outputs (its tnode) and GPU outputs, for the caller (who frees them). */
static int pair(const lp_case *c, const lp_data *d, lp_kind kind, int x_bf, int y_bf, int narrow, fr_tensor *saved,
                fr_tensor *saved_sinv, const char *label, tnode *keep_t, fr_tensor **keep_g)
{
    tnode a, b;
    fr_tensor *ga[TN_MAX], *gb[TN_MAX];
    const char *const *names = lp_init(&a, kind, c, d, 0, 0, narrow, saved, saved_sinv);
    lp_init(&b, kind, c, d, x_bf, y_bf, narrow, saved, saved_sinv);
    int ok = run_both(&a, ga, label) & run_both(&b, gb, label);
    char l2[400];
    for (int o = 0; ok && o < a.n_out; o++) {
        snprintf(l2, sizeof l2, "%s [GPU bf16 vs GPU float32 inputs]", label);
        ok &= lp_same(l2, names[o], gb[o], ga[o]);
        if (!b.out[o]) continue;
        double err = gpu_rel_err(gb[o], b.out[o]), tol = o == 0 ? 1e-2 : 0.0;
        if (err > tol) {
            fprintf(stderr, "\n  %s [GPU vs CPU]:", label);
            gpu_print_mismatch(names[o], gb[o], b.out[o], err, tol);
            ok = 0;
        }
    }
    gpu_free_outputs(&b, gb);
    tn_free(&b);
    if (keep_t) {
        *keep_t = a;
        for (int o = 0; o < TN_MAX; o++) keep_g[o] = ga[o];
    } else {
        gpu_free_outputs(&a, ga);
        tn_free(&a);
    }
    return ok;
}

static int check_case(const lp_case *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    lp_data d;
    lp_make(&d, c, &r);
    int ok = 1, fp8 = lp_is_fp8(c);
    char l2[300];
    tnode fwd, dg;
    fr_tensor *gf[TN_MAX], *gd[TN_MAX];
    snprintf(l2, sizeof l2, "%s forward", label);
    ok &= pair(c, &d, LP_FWD, 1, 0, 0, NULL, NULL, l2, &fwd, gf);
    snprintf(l2, sizeof l2, "%s forward y_dtype bfloat16", label);
    ok &= pair(c, &d, LP_FWD, 1, 0, 1, NULL, NULL, l2, NULL, NULL);
    snprintf(l2, sizeof l2, "%s LinearGradData", label);
    ok &= pair(c, &d, LP_DGRAD, 0, 1, 0, NULL, NULL, l2, &dg, gd);
    /* dx_dtype bfloat16 from bf16 dY: the GPU's float32 dX rounded (or one ulp off) */
    snprintf(l2, sizeof l2, "%s LinearGradData dx_dtype bfloat16", label);
    tnode dn;
    fr_tensor *gn[TN_MAX];
    const char *const *dnames = lp_init(&dn, LP_DGRAD, c, &d, 0, 1, 1, NULL, NULL);
    if (run_both(&dn, gn, l2) && gd[0]) {
        double rms = 0; /* near zero (a cancelling sum) another order moves dX by more than its ulp */
        for (int64_t i = 0; i < fr_tensor_numel(gd[0]); i++) rms += (double)((float *)gd[0]->data)[i] * ((float *)gd[0]->data)[i];
        rms = sqrt(rms / (double)(fr_tensor_numel(gd[0]) > 0 ? fr_tensor_numel(gd[0]) : 1));
        int64_t near, bad = lp_bf16_of(gn[0], gd[0], 1e-5 * rms, &near);
        if (bad != near) fprintf(stderr, "\n  %s: %lld dX elements more than 1 ulp (and 1e-5 rms) from the float32 dX "
                                 "rounded\n", l2, (long long)(bad - near));
        ok &= bad == near;
        g_ulp1 += bad;
        g_elems += fr_tensor_numel(gd[0]);
        for (int o = 1; o < dn.n_out; o++) ok &= lp_same(l2, dnames[o], gn[o], gd[o]);
        double err = gpu_rel_err(gn[0], dn.out[0]);
        if (err > 1e-2) {
            gpu_print_mismatch("dX (bf16)", gn[0], dn.out[0], err, 1e-2);
            ok = 0;
        }
    } else {
        ok = 0;
    }
    gpu_free_outputs(&dn, gn);
    tn_free(&dn);
    gpu_free_outputs(&dg, gd);
    tn_free(&dg);
    for (int mix = 1; mix < 4; mix++) {
        snprintf(l2, sizeof l2, "%s LinearGradWeight(%s X, %s dY)", label, mix & 1 ? "bf16" : "f32",
                 mix & 2 ? "bf16" : "f32");
        ok &= pair(c, &d, LP_WGRAD, mix & 1, mix & 2, 0, NULL, NULL, l2, NULL, NULL);
    }
    if (fp8 && fwd.out[1] && fwd.out[2]) {
        snprintf(l2, sizeof l2, "%s LinearGradWeight(saved Xq, bf16 dY)", label);
        ok &= pair(c, &d, LP_WGRAD, 0, 1, 0, fwd.out[1], fwd.out[2], l2, NULL, NULL);
    }
    gpu_free_outputs(&fwd, gf);
    tn_free(&fwd);
    lp_free(&d);
    return ok;
}

/* M = 135, K = 141, N = 29 (padded); M = 256, K = 256, N = 128 (aligned, one 128-tile of N);
 * M = 1024, K = 512, N = 384 (aligned, many tiles); M = 517, K = 1000, N = 771 */
static const int64_t shapes[][4] = {{3, 45, 141, 29}, {2, 128, 256, 128}, {4, 256, 512, 384}, {517, 0, 1000, 771}};

static void run_prec(const char *prec, const char *recipe)
{
    for (int s = 0; s < 4; s++)
        for (int tb = 0; tb < 2; tb++) {
            if (s == 3 && !tb) continue; /* the large one once: its CPU reference is the slow part */
            lp_case c = {prec, recipe, NULL, tb, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]};
            if (recipe && (s + tb) % 2) c.fmt = "e4m3";
            char label[160];
            snprintf(label, sizeof label, "%s %s %s transB=%d shape#%d", prec, recipe ? recipe : "",
                     c.fmt ? c.fmt : "hybrid", tb, s);
            CU_ASSERT(check_case(&c, label));
        }
    printf("\n    %s %s: dx_dtype bfloat16: %lld of %lld dX elements not the rounded float32 dX\n", prec,
           recipe ? recipe : "", (long long)g_ulp1, (long long)g_elems);
    g_ulp1 = g_elems = 0;
}

static void test_bf16(void) { run_prec("bf16", NULL); }
static void test_delayed(void) { run_prec("fp8", "delayed"); }
static void test_current(void) { run_prec("fp8", "current"); }
static void test_block(void) { run_prec("fp8", "block"); }

static CU_TestInfo tests[] = {
    {"bf16 precision: bfloat16 X / dY", test_bf16},
    {"fp8 delayed: bfloat16 X / dY", test_delayed},
    {"fp8 current: bfloat16 X / dY", test_current},
    {"fp8 block: bfloat16 X / dY", test_block},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    setenv("FP8RUN_QUANT_BLOCKS", "3", 0); /* read when the CUDA context is made */
    CU_SuiteInfo suites[] = {{"gpu_linear_bf16", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
