/* GPU kernels of ai.fp8run::AddLayerNorm / AddLayerNormGrad (ops/cuda/add_layer_norm.cu)
 * against the CPU (ops/add_layer_norm.c), fresh random inputs (FR_TEST_SEED): rows in registers
 * (len % 4 == 0: 1, 2, 4 and 8 vectors per thread forward, up to 16 floats backward), the
 * re-reading path (len 8192 backward, 12288, 30000; len 7, 1001 without vectors), two normalized
 * dims (axis 1), real sizes (16384 x 768, 2048 x 2048, 256 x 8192), more rows than the backward's
 * blocks; with and without Bias, B repeating over the leading rows (a position embedding), with
 * and without dH, dScale / dBias omitted; a parallel block's second norm (Y2 forward; dY2,
 * dScale2, dBias2 backward, some omitted; the register path takes up to 8 floats a thread there). Inputs with a mean far from 0 (the variance's
 * cancellation, which two passes avoid).
 * Tolerances: H (one float32 add, as the CPU) bit for bit; Y, dX, dScale, dBias within 1e-6
 * relative L2 (the forward and the backward's re-reading path compute in double and round once,
 * as the CPU; the backward's register path computes each element in float32, ~1e-7 off). The
 * backward run twice gives the same bits (no atomics). The training shapes (16384 rows of 768,
 * 1024, 2048; 1020, 1001) once more with fresh inputs, one and two norms, float32 and bfloat16 dY.
 * bfloat16: B bfloat16 and/or y_dtype bfloat16 against the float32 case of the same values on
 * the GPU: H and a float32 Y bit for bit, a bfloat16 Y the float32 Y rounded bit for bit, and
 * within one bfloat16 ulp of the CPU's rounded Y (Y2 likewise); a bfloat16 dY (and dY2): dX and
 * the parameter gradients bit for bit those of the float32 dY (GPU and CPU).
 * Printed, not asserted: the kernels' times at a 1B step's shape (16384 x 2048). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"

#define TOL 1e-6

typedef struct shp {
    int r, axis;
    int64_t d[3];
} shp;

static const shp shapes[] = {
    {3, -1, {4, 5, 16}},  {2, -1, {3, 7}},     {2, -1, {33, 1001}},   {3, 1, {4, 6, 32}},    {2, -1, {9, 64}},
    {2, -1, {5, 2048}},   {2, -1, {7, 4096}},  {2, -1, {3, 8192}},    {2, -1, {6, 12288}},   {2, -1, {3, 30000}},
    {2, -1, {1, 8192}},   {2, -1, {1000, 32}}, {2, -1, {16384, 768}}, {2, -1, {2048, 2048}}, {2, -1, {256, 8192}},
    {2, -1, {600, 1024}}, {2, -1, {10, 20}},   {2, -1, {3, 8200}},   {2, -1, {300, 4096}},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* Scale / Bias: the normalized dims */
static fr_tensor *param_of(fr_rng *r, const shp *s, double mean)
{
    const int a = s->axis < 0 ? s->axis + s->r : s->axis;
    return tt_randn(r, FR_F32, s->r - a, s->d + a, mean, 0.5);
}

/* B: A's shape, or (bcast) its dims past the first (the first dim's rows repeat B's) */
static fr_tensor *b_of(fr_rng *r, const shp *s, int bcast)
{
    const int a = s->axis < 0 ? s->axis + s->r : s->axis;
    if (bcast && a >= 1 && s->d[0] > 1) return tt_randn(r, FR_F32, s->r - 1, s->d + 1, -0.1, 0.7);
    return tt_randn(r, FR_F32, s->r, s->d, -0.1, 0.7);
}

static void describe(char *buf, size_t n, const char *op, const shp *s, const char *extra)
{
    char x1[96];
    fr_shape_str(s->r, s->d, x1, sizeof x1);
    snprintf(buf, n, "%s X%s axis %d %s", op, x1, s->axis, extra);
}

/* w2 (may be NULL): the second norm, Scale2 w2 and Bias2 bias2 (may be NULL) */
static void fwd_node(tnode *t, const shp *s, fr_tensor *a, fr_tensor *b, fr_tensor *w, fr_tensor *bias, fr_tensor *w2,
                     fr_tensor *bias2, int y16)
{
    fr_tensor *ins[6] = {a, b, w, bias, w2, bias2};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "AddLayerNorm", 1, w2 ? (bias2 ? 6 : 5) : bias ? 4 : 3, ins, 0, w2 ? 3 : 2);
    TN_ATTR(t, int, "axis", s->axis);
    if (y16) TN_ATTR(t, string, "y_dtype", "bfloat16");
}

/* two: the second norm (Y2) too */
static void run_fwd(fr_rng *r, const shp *s, int with_bias, int bcast, int two)
{
    fr_tensor *a = tt_randn(r, FR_F32, s->r, s->d, 3.0, 1.0), *b = b_of(r, s, bcast);
    fr_tensor *w = param_of(r, s, 1.0), *bias = with_bias ? param_of(r, s, 0.0) : NULL;
    fr_tensor *w2 = two ? param_of(r, s, 1.0) : NULL, *bias2 = two ? param_of(r, s, 0.0) : NULL;
    tnode t;
    fwd_node(&t, s, a, b, w, bias, w2, bias2, 0);
    FR_ASSERT_OK(tn_run(&t));
    char what[320], extra[64];
    snprintf(extra, sizeof extra, "Bias %s, B %s%s", with_bias ? "yes" : "no", b->rank < s->r ? "repeated" : "full",
             two ? ", Y2" : "");
    describe(what, sizeof what, "AddLayerNorm", s, extra);
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
    fr_tensor_free(bias);
    fr_tensor_free(w2);
    fr_tensor_free(bias2);
}

/* dy2 (may be NULL): the second norm's dY2 and Scale2 w2; with_dp: bit q wants parameter
 * gradient q (dScale, dBias, dScale2, dBias2) */
static void bwd_node(tnode *t, const shp *s, fr_tensor *dy, fr_tensor *x, fr_tensor *w, fr_tensor *dh, fr_tensor *dy2,
                     fr_tensor *w2, int with_dp)
{
    fr_tensor *ins[6] = {dy, x, w, dh, dy2, w2};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "AddLayerNormGrad", 1, dy2 ? 6 : dh ? 4 : 3, ins, 0, dy2 ? 5 : 3);
    TN_ATTR(t, int, "axis", s->axis);
    TN_ATTR(t, float, "epsilon", 1e-6f);
    for (int q = 0; q < (dy2 ? 4 : 2); q++)
        if (!(with_dp >> q & 1)) tn_omit_output(t, 1 + q);
}

/* with_dh: the dH input; two: the second norm; with_dp: the parameter gradients wanted */
static void run_bwd(fr_rng *r, const shp *s, int with_dh, int two, int with_dp)
{
    fr_tensor *dy = tt_randn(r, FR_F32, s->r, s->d, 0.1, 1.0), *x = tt_randn(r, FR_F32, s->r, s->d, 2.0, 1.5);
    fr_tensor *w = param_of(r, s, 1.0), *dh = with_dh ? tt_randn(r, FR_F32, s->r, s->d, 0.0, 0.5) : NULL;
    fr_tensor *dy2 = two ? tt_randn(r, FR_F32, s->r, s->d, -0.1, 0.8) : NULL, *w2 = two ? param_of(r, s, 0.8) : NULL;
    tnode t;
    bwd_node(&t, s, dy, x, w, dh, dy2, w2, with_dp);
    FR_ASSERT_OK(tn_run(&t));
    char what[320], extra[80];
    snprintf(extra, sizeof extra, "dH %s, %s, parameter gradients 0x%x", with_dh ? "yes" : "no",
             two ? "two norms" : "one norm", (unsigned)with_dp);
    describe(what, sizeof what, "AddLayerNormGrad", s, extra);
    gpu_check(&t, TOL, what);
    fr_tensor *g1[TN_MAX], *g2[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&t, g1));
    FR_ASSERT_OK(tn_run_gpu(&t, g2));
    for (int o = 0; o < (two ? 5 : 3); o++)
        if (g1[o]) CU_ASSERT_EQUAL(gpu_rel_err(g1[o], g2[o]), 0);
    gpu_free_outputs(&t, g1);
    gpu_free_outputs(&t, g2);
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(dh);
    fr_tensor_free(dy2);
    fr_tensor_free(w2);
}

static void test_fwd(void)
{
    fr_rng r = fr_test_rng("gpu_add_layer_norm_fwd");
    for (size_t i = 0; i < N_SHAPES; i++) {
        run_fwd(&r, &shapes[i], 1, 0, 0);
        run_fwd(&r, &shapes[i], i % 2, 1, 0);
        run_fwd(&r, &shapes[i], i % 2, i % 3 == 0, 1);
    }
}

static void test_bwd(void)
{
    fr_rng r = fr_test_rng("gpu_add_layer_norm_bwd");
    for (size_t i = 0; i < N_SHAPES; i++) {
        run_bwd(&r, &shapes[i], 1, 0, 3);
        run_bwd(&r, &shapes[i], 0, 0, 3);
        if (i % 3 == 0) run_bwd(&r, &shapes[i], 1, 0, (int)(i / 3) % 3);
        run_bwd(&r, &shapes[i], i % 2, 1, 15);
        if (i % 3 == 1) run_bwd(&r, &shapes[i], 1, 1, i % 2 ? 12 : 5);
    }
}

/* ---- bfloat16 ---- */

static void test_fwd_bf16(void)
{
    fr_rng r = fr_test_rng("gpu_add_layer_norm_fwd_bf16");
    for (size_t i = 0; i < N_SHAPES; i++) {
        const shp *s = &shapes[i];
        fr_tensor *a = tt_randn(&r, FR_F32, s->r, s->d, 0.3, 1.0), *bf = b_of(&r, s, i % 2);
        fr_tensor *bb = bc_bf16_pair(bf), *w = param_of(&r, s, 1.0), *bias = param_of(&r, s, 0.0), *g0[TN_MAX];
        tnode ref;
        fr_tensor *w2 = i % 2 ? param_of(&r, s, 1.0) : NULL; /* odd shapes: Y2 too */
        fwd_node(&ref, s, a, bf, w, bias, w2, NULL, 0);
        FR_ASSERT_OK(tn_run(&ref));
        FR_ASSERT_OK(tn_run_gpu(&ref, g0));
        for (int c = 1; c < 4; c++) {
            const int b16 = c & 1, y16 = c >> 1;
            tnode t;
            fwd_node(&t, s, a, b16 ? bb : bf, w, bias, w2, NULL, y16);
            FR_ASSERT_OK(tn_run(&t));
            char what[320], extra[64], lab[448];
            snprintf(extra, sizeof extra, "B %s Y %s", b16 ? "bf16" : "f32", y16 ? "bf16" : "f32");
            describe(what, sizeof what, "AddLayerNorm", s, extra);
            fr_tensor *g[TN_MAX];
            FR_ASSERT_OK(tn_run_gpu(&t, g));
            for (int o = 0; o < (w2 ? 3 : 2); o++) {
                snprintf(lab, sizeof lab, "%s: GPU %s vs the float32 case's", what, o == 0 ? "H" : o == 1 ? "Y" : "Y2");
                bc_expect(lab, g[o], g0[o]);
                if (!y16 || o == 0) continue;
                int64_t far = 0;
                snprintf(lab, sizeof lab, "%s: GPU %s vs the CPU's float32 one rounded (one ulp allowed)", what,
                         o == 1 ? "Y" : "Y2");
                (void)bc_round_diff(lab, g[o], ref.out[o], &far);
                CU_ASSERT_EQUAL(far, 0);
            }
            gpu_free_outputs(&t, g);
            tn_free(&t);
        }
        gpu_free_outputs(&ref, g0);
        tn_free(&ref);
        fr_tensor_free(a);
        fr_tensor_free(bf);
        fr_tensor_free(bb);
        fr_tensor_free(w);
        fr_tensor_free(bias);
        fr_tensor_free(w2);
    }
}

/* a bfloat16 dY (and dY2 with two) against the float32 dY of the same values: dX and the
 * parameter gradients bit for bit (GPU and CPU), the GPU within TOL of the CPU */
static void run_bwd_bf16(fr_rng *r, const shp *s, int with_dh, int two, int with_dp)
{
    fr_tensor *dyf = tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(r, FR_F32, s->r, s->d, 0.2, 1.5);
    fr_tensor *dyb = bc_bf16_pair(dyf), *w = param_of(r, s, 1.0);
    fr_tensor *dh = with_dh ? tt_randn(r, FR_F32, s->r, s->d, 0.0, 0.5) : NULL;
    fr_tensor *dy2f = two ? tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0) : NULL, *dy2b = two ? bc_bf16_pair(dy2f) : NULL;
    fr_tensor *w2 = two ? param_of(r, s, 1.0) : NULL;
    tnode t[2];
    fr_tensor *g[2][TN_MAX];
    char what[320], extra[64], lab[448];
    snprintf(extra, sizeof extra, "dH %s, dScale/dBias %s%s", with_dh ? "yes" : "no", with_dp ? "yes" : "no",
             two ? ", two norms" : "");
    describe(what, sizeof what, "AddLayerNormGrad bf16 dY", s, extra);
    for (int k = 0; k < 2; k++) {
        bwd_node(&t[k], s, k ? dyb : dyf, x, w, dh, k ? dy2b : dy2f, w2, with_dp ? 15 : 0);
        FR_ASSERT_OK(tn_run(&t[k]));
        FR_ASSERT_OK(tn_run_gpu(&t[k], g[k]));
    }
    gpu_check(&t[1], TOL, what);
    static const char *const names[5] = {"dX", "dScale", "dBias", "dScale2", "dBias2"};
    for (int o = 0; o < (with_dp ? (two ? 5 : 3) : 1); o++) {
        snprintf(lab, sizeof lab, "%s: GPU %s vs float32 dY's", what, names[o]);
        CU_ASSERT_EQUAL(bc_bits_diff(lab, g[1][o], g[0][o]), 0);
        snprintf(lab, sizeof lab, "%s: CPU %s vs float32 dY's", what, names[o]);
        CU_ASSERT_EQUAL(bc_bits_diff(lab, t[1].out[o], t[0].out[o]), 0);
    }
    for (int k = 0; k < 2; k++) {
        gpu_free_outputs(&t[k], g[k]);
        tn_free(&t[k]);
    }
    fr_tensor_free(dyf);
    fr_tensor_free(dyb);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(dh);
    fr_tensor_free(dy2f);
    fr_tensor_free(dy2b);
    fr_tensor_free(w2);
}

static void test_bwd_bf16(void)
{
    fr_rng r = fr_test_rng("gpu_add_layer_norm_bwd_bf16");
    for (size_t i = 0; i < N_SHAPES; i++) /* odd shapes: the second norm, dY2 bfloat16 too */
        run_bwd_bf16(&r, &shapes[i], i % 2 == 0, i % 2, i % 3 == 2 ? 0 : 3);
}

/* ---- the backward at the training shapes (the register path's float32 arithmetic) ---- */

/* rows of 768, 1024, 2048 (vectors of 8), 1020 (of 4) and 1001 (no vectors: the double kernel
 * that re-reads the row); 16384 rows: more than a wave of blocks, each flushing its float
 * sums of dScale / dBias more than once */
static const shp real_shapes[] = {
    {2, -1, {16384, 768}}, {2, -1, {16384, 1024}}, {2, -1, {16384, 2048}}, {2, -1, {4096, 1020}}, {2, -1, {2048, 1001}},
};
#define N_REAL (sizeof real_shapes / sizeof real_shapes[0])

static void test_bwd_real(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_add_layer_norm_bwd_real");
    for (size_t i = 0; i < N_REAL; i++) {
        const shp *s = &real_shapes[i];
        run_bwd(&r, s, 1, 0, 3);  /* one norm, dH */
        run_bwd(&r, s, 0, 0, 3);  /* no dH */
        run_bwd(&r, s, 1, 1, 15); /* two norms, dH */
        run_bwd(&r, s, 0, 1, 5);  /* two norms, dScale and dScale2 only */
        run_bwd_bf16(&r, s, 1, 0, 1);
        run_bwd_bf16(&r, s, i % 2, 1, 1);
    }
}

/* ---- timings at the 1B shape ---- */

static void time_case(int grad, fr_dtype bt, fr_dtype yt)
{
    const int64_t d[2] = {16384, 2048}, dw[1] = {2048};
    fr_tensor a = gpu_shape_only(grad ? bt : FR_F32, 2, d), b = gpu_shape_only(grad ? FR_F32 : bt, 2, d);
    fr_tensor w = gpu_shape_only(FR_F32, 1, dw), c = grad ? gpu_shape_only(FR_F32, 2, d) : gpu_shape_only(FR_F32, 1, dw);
    fr_tensor *ins[4] = {&a, &b, &w, &c};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, grad ? "AddLayerNormGrad" : "AddLayerNorm", 1, 4, ins, 0, grad ? 3 : 2);
    if (!grad && yt == FR_BF16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    double bytes = 0;
    const double ms = gpu_time_node(&t, 20, &bytes);
    if (grad)
        printf("\n    AddLayerNormGrad [16384, 2048] dY %-8s (dH, dScale, dBias) %7.3f ms %6.0f GB/s",
               fr_dtype_name(bt), ms, bytes / (ms * 1e6));
    else
        printf("\n    AddLayerNorm     [16384, 2048] B %-8s Y %-8s (Bias)     %7.3f ms %6.0f GB/s", fr_dtype_name(bt),
               fr_dtype_name(yt), ms, bytes / (ms * 1e6));
    tn_free(&t);
}

/* the second norm's forward and backward (Y2; dY2) at the same shape */
static void time_two(int grad)
{
    const int64_t d[2] = {16384, 2048}, dw[1] = {2048};
    fr_tensor x = gpu_shape_only(FR_F32, 2, d), p = gpu_shape_only(FR_F32, 1, dw);
    fr_tensor *fwd[6] = {&x, &x, &p, &p, &p, &p}, *bwd[6] = {&x, &x, &p, &x, &x, &p};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, grad ? "AddLayerNormGrad" : "AddLayerNorm", 1, 6, grad ? bwd : fwd, 0,
                   grad ? 5 : 3);
    double bytes = 0;
    const double ms = gpu_time_node(&t, 20, &bytes);
    printf("\n    %-16s [16384, 2048] two norms, float32            %7.3f ms %6.0f GB/s",
           grad ? "AddLayerNormGrad" : "AddLayerNorm", ms, bytes / (ms * 1e6));
    tn_free(&t);
}

static void test_times(void)
{
    if (!gpu_available()) return;
    time_two(0);
    time_two(1);
    time_case(0, FR_F32, FR_F32);
    time_case(0, FR_F32, FR_BF16);
    time_case(0, FR_BF16, FR_BF16);
    time_case(1, FR_F32, FR_F32);
    time_case(1, FR_BF16, FR_F32);
    printf("\n");
}

static CU_TestInfo tests[] = {
    {"AddLayerNorm: H bit for bit, Y (1e-6); Bias, repeated B", test_fwd},
    {"AddLayerNormGrad: dX, dScale, dBias (1e-6), repeatable bits", test_bwd},
    {"AddLayerNorm bf16 B / y_dtype bf16: float32 case's bits, Y its rounding", test_fwd_bf16},
    {"AddLayerNormGrad bf16 dY: float32 dY's dX, dScale, dBias bits", test_bwd_bf16},
    {"AddLayerNormGrad at 768, 1024, 2048, 1020, 1001 features x 16384 rows, f32 and bf16 dY", test_bwd_real},
    {"times at the 1B shape (printed)", test_times},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_add_layer_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
