/* GPU kernels of ai.fp8run::AddRMSNorm / AddRMSNormGrad (ops/cuda/rms_rows.cu) against the CPU
 * (ops/add_norm.c), fresh random inputs: rows in registers (len % 4 == 0, len <= 8192: 1, 2, 4
 * and 8 vectors per thread), the re-reading path (len 12288, 30000; len 7, 1001 without
 * vectors), two normalized dims (axis 1), real sizes (16384 x 768, 2048 x 2048, 256 x 8192),
 * with and without dH, dScale omitted.
 * Tolerances: H (one float32 add, as the CPU) bit for bit; Y, dX, dScale within 1e-6 relative L2
 * (both sides compute in double and round once; only the order of the double sums differs).
 * The backward run twice gives the same bits (no atomics). The RMSNormalization / RMSNormGrad
 * fast path these kernels also serve is tested by tests/test_gpu_norm.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

#define TOL 1e-6

typedef struct shp {
    int r, axis;
    int64_t d[3];
} shp;

static const shp shapes[] = {
    {3, -1, {4, 5, 16}},  {2, -1, {3, 7}},     {2, -1, {33, 1001}},   {3, 1, {4, 6, 32}},    {2, -1, {9, 64}},
    {2, -1, {5, 2048}},   {2, -1, {7, 4096}},  {2, -1, {3, 8192}},    {2, -1, {6, 12288}},   {2, -1, {3, 30000}},
    {2, -1, {1, 8192}},   {2, -1, {1000, 32}}, {2, -1, {16384, 768}}, {2, -1, {2048, 2048}}, {2, -1, {256, 8192}},
    {2, -1, {600, 1024}}, /* more rows than the backward's blocks */
};

/* Scale: the normalized dims */
static fr_tensor *scale_of(fr_rng *r, const shp *s)
{
    const int a = s->axis < 0 ? s->axis + s->r : s->axis;
    return tt_randn(r, FR_F32, s->r - a, s->d + a, 1.0, 0.5);
}

static void describe(char *buf, size_t n, const char *op, const shp *s, const char *extra)
{
    char x1[96];
    fr_shape_str(s->r, s->d, x1, sizeof x1);
    snprintf(buf, n, "%s X%s axis %d %s", op, x1, s->axis, extra);
}

static void run_fwd(fr_rng *r, const shp *s)
{
    fr_tensor *a = tt_randn(r, FR_F32, s->r, s->d, 0.3, 1.0), *b = tt_randn(r, FR_F32, s->r, s->d, -0.1, 0.7);
    fr_tensor *w = scale_of(r, s);
    fr_tensor *ins[3] = {a, b, w};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 2);
    TN_ATTR(&t, int, "axis", s->axis);
    FR_ASSERT_OK(tn_run(&t));
    char what[200];
    describe(what, sizeof what, "AddRMSNorm", s, "");
    gpu_check(&t, TOL, what);
    fr_tensor *g[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&t, g));
    const double eh = gpu_rel_err(g[0], t.out[0]);
    if (eh != 0) printf("\n  %s: H differs by %g (must be bit for bit)", what, eh);
    CU_ASSERT_EQUAL(eh, 0);
    gpu_free_outputs(&t, g);
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
    fr_tensor_free(w);
}

/* with_dh: the dH input; with_dw: the dScale output */
static void run_bwd(fr_rng *r, const shp *s, int with_dh, int with_dw)
{
    fr_tensor *dy = tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(r, FR_F32, s->r, s->d, 0.2, 1.5);
    fr_tensor *w = scale_of(r, s), *dh = tt_randn(r, FR_F32, s->r, s->d, 0.0, 0.5);
    fr_tensor *ins[4] = {dy, x, w, dh};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNormGrad", 1, with_dh ? 4 : 3, ins, 0, 2);
    TN_ATTR(&t, int, "axis", s->axis);
    TN_ATTR(&t, float, "epsilon", 1e-6f);
    if (!with_dw) tn_omit_output(&t, 1);
    FR_ASSERT_OK(tn_run(&t));
    char what[200], extra[64];
    snprintf(extra, sizeof extra, "dH %s, dScale %s", with_dh ? "yes" : "no", with_dw ? "yes" : "no");
    describe(what, sizeof what, "AddRMSNormGrad", s, extra);
    gpu_check(&t, TOL, what);
    /* the same bits again */
    fr_tensor *g1[TN_MAX], *g2[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&t, g1));
    FR_ASSERT_OK(tn_run_gpu(&t, g2));
    for (int o = 0; o < 2; o++)
        if (g1[o]) CU_ASSERT_EQUAL(gpu_rel_err(g1[o], g2[o]), 0);
    gpu_free_outputs(&t, g1);
    gpu_free_outputs(&t, g2);
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(dh);
}

static void test_fwd(void)
{
    fr_rng r = fr_test_rng("gpu_add_norm_fwd");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_fwd(&r, &shapes[i]);
}

static void test_bwd(void)
{
    fr_rng r = fr_test_rng("gpu_add_norm_bwd");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        run_bwd(&r, &shapes[i], 1, 1);
        run_bwd(&r, &shapes[i], 0, 1);
        if (i % 4 == 0) run_bwd(&r, &shapes[i], 1, 0);
    }
}

static CU_TestInfo tests[] = {
    {"AddRMSNorm: H bit for bit, Y (1e-6)", test_fwd},
    {"AddRMSNormGrad: dX, dScale (1e-6), repeatable bits", test_bwd},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_add_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
