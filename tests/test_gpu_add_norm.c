/* GPU kernels of ai.fp8run::AddRMSNorm / AddRMSNormGrad (ops/cuda/add_norm.cu) against the CPU
 * (ops/add_norm.c), fresh random inputs: rows in registers (len % 4 == 0, len <= 8192: 1, 2, 4
 * and 8 vectors per thread), the re-reading path (len 12288, 30000; len 7, 1001 without
 * vectors), two normalized dims (axis 1), real sizes (16384 x 768, 2048 x 2048, 256 x 8192),
 * with and without dH, dScale omitted.
 * Tolerances: H (one float32 add, as the CPU) bit for bit; Y, dX, dScale within 1e-6 relative L2
 * (both sides compute in double and round once; only the order of the double sums differs).
 * The backward run twice gives the same bits (no atomics). The RMSNormalization / RMSNormGrad
 * fast path these kernels also serve is tested by tests/test_gpu_norm.c.
 * bfloat16, every shape: B bfloat16 and/or y_dtype bfloat16 against the float32 case
 * of the same values, on the GPU: H and a float32 Y bit for bit, a bfloat16 Y the float32 Y
 * rounded bit for bit (the same kernel's float32 result), and within one bfloat16 ulp of the
 * CPU's rounded Y; with the output Hs, H rounded bit for bit (GPU and CPU); AddRMSNormGrad with
 * a bfloat16 dY, and with a bfloat16 H (Hs) too: dX and dScale bit for bit those of the float32
 * tensors of the same values (GPU and CPU). len % 8 == 0 takes the 8-element vectors, len % 8 == 4 the
 * element-wise kernels for bfloat16 (float4 for float32).
 * The backward's team kernel (rows of 768..2048 by 256, 2560..4096 by 512; the default there)
 * on 1500 rows of 768, 1024, 2048, 3072, 4096 (and 1000, 2304: not its rows), dY float32,
 * float32 of bfloat16 values and bfloat16 (also with a bfloat16 H), with and without dH and
 * dScale: the CPU within 1e-6,
 * two runs bit for bit, FP8RUN_RMS_BWD_TEAMS=0 (the one-row-per-block kernel) within 1e-6 (dX
 * printed when not bit for bit: the same row sums), a bfloat16 dY the float32 dY's bits.
 * Printed, not asserted: the kernels' times at the 1B step's shape (16384 x 2048, with dH and
 * dScale) for float32 and the bfloat16 combinations. */
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
    {2, -1, {600, 1024}}, /* more rows than the backward's blocks */
    {2, -1, {10, 20}},    {2, -1, {3, 8200}}, /* bfloat16: element-wise; 8-element vectors re-reading the row */
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

/* An AddRMSNormGrad node on dY, X, Scale (and dH: with_dh), dScale asked for with with_dw, run on
 * the CPU */
static void bwd_node(tnode *t, const shp *s, fr_tensor *dy, fr_tensor *x, fr_tensor *w, fr_tensor *dh, int with_dh,
                     int with_dw)
{
    fr_tensor *ins[4] = {dy, x, w, dh};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "AddRMSNormGrad", 1, with_dh ? 4 : 3, ins, 0, 2);
    TN_ATTR(t, int, "axis", s->axis);
    TN_ATTR(t, float, "epsilon", 1e-6f);
    if (!with_dw) tn_omit_output(t, 1);
    FR_ASSERT_OK(tn_run(t));
}

/* with_dh: the dH input; with_dw: the dScale output */
static void run_bwd(fr_rng *r, const shp *s, int with_dh, int with_dw)
{
    fr_tensor *dy = tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(r, FR_F32, s->r, s->d, 0.2, 1.5);
    fr_tensor *w = scale_of(r, s), *dh = tt_randn(r, FR_F32, s->r, s->d, 0.0, 0.5);
    tnode t;
    bwd_node(&t, s, dy, x, w, dh, with_dh, with_dw);
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

/* ---- bfloat16 ---- */

/* AddRMSNorm with B bfloat16 (b16) and / or y_dtype bfloat16 (y16), against the float32 case
 * (ref: its CPU outputs, g0: its GPU outputs) */
static void fwd_bf16_case(const shp *s, fr_tensor *a, fr_tensor *bf, fr_tensor *bb, fr_tensor *w, int b16, int y16,
                          tnode *ref, fr_tensor **g0)
{
    fr_tensor *ins[3] = {a, b16 ? bb : bf, w};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 2);
    TN_ATTR(&t, int, "axis", s->axis);
    if (y16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    char what[200], extra[64], lab[320];
    snprintf(extra, sizeof extra, "B %s Y %s", b16 ? "bf16" : "f32", y16 ? "bf16" : "f32");
    describe(what, sizeof what, "AddRMSNorm", s, extra);
    fr_tensor *g[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&t, g));
    for (int o = 0; o < 2; o++) {
        snprintf(lab, sizeof lab, "%s: GPU %s vs the float32 case's", what, o ? "Y" : "H");
        bc_expect(lab, g[o], g0[o]);
        snprintf(lab, sizeof lab, "%s: CPU %s vs the float32 case's", what, o ? "Y" : "H");
        bc_expect(lab, t.out[o], ref->out[o]);
    }
    if (b16 && y16) { /* with the output Hs as well: H, Y the same, Hs the CPU's (H rounded) bit for bit */
        tnode th;
        tn_init_domain(&th, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 3);
        TN_ATTR(&th, int, "axis", s->axis);
        TN_ATTR(&th, string, "y_dtype", "bfloat16");
        FR_ASSERT_OK(tn_run(&th));
        fr_tensor *gh[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu(&th, gh));
        static const char *const on[3] = {"H", "Y", "Hs"};
        for (int o = 0; o < 3; o++) {
            snprintf(lab, sizeof lab, "%s, Hs: GPU %s vs the CPU's", what, on[o]);
            CU_ASSERT_EQUAL(bc_bits_diff(lab, gh[o], o < 2 ? g[o] : th.out[2]), 0);
        }
        snprintf(lab, sizeof lab, "%s: GPU Hs vs H rounded", what);
        CU_ASSERT_EQUAL(bc_round_diff(lab, gh[2], g[0], NULL), 0);
        gpu_free_outputs(&th, gh);
        tn_free(&th);
    }
    if (y16) { /* and the CPU's rounded Y, from a float32 Y within 1e-6 */
        int64_t far = 0;
        snprintf(lab, sizeof lab, "%s: GPU Y vs the CPU's float32 Y rounded (one ulp allowed)", what);
        (void)bc_round_diff(lab, g[1], ref->out[1], &far);
        CU_ASSERT_EQUAL(far, 0);
    }
    gpu_free_outputs(&t, g);
    tn_free(&t);
}

static void test_fwd_bf16(void)
{
    fr_rng r = fr_test_rng("gpu_add_norm_fwd_bf16");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shp *s = &shapes[i];
        fr_tensor *a = tt_randn(&r, FR_F32, s->r, s->d, 0.3, 1.0), *bf = tt_randn(&r, FR_F32, s->r, s->d, -0.1, 0.7);
        fr_tensor *bb = bc_bf16_pair(bf), *w = scale_of(&r, s);
        fr_tensor *ins[3] = {a, bf, w}, *g0[TN_MAX];
        tnode ref;
        tn_init_domain(&ref, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 2);
        TN_ATTR(&ref, int, "axis", s->axis);
        FR_ASSERT_OK(tn_run(&ref));
        FR_ASSERT_OK(tn_run_gpu(&ref, g0));
        for (int c = 1; c < 4; c++) fwd_bf16_case(s, a, bf, bb, w, c & 1, c >> 1, &ref, g0);
        gpu_free_outputs(&ref, g0);
        tn_free(&ref);
        fr_tensor_free(a);
        fr_tensor_free(bf);
        fr_tensor_free(bb);
        fr_tensor_free(w);
    }
}

/* AddRMSNormGrad with dY float32 and bfloat16 of the same values: the same dX and dScale bits */
static void test_bwd_bf16(void)
{
    fr_rng r = fr_test_rng("gpu_add_norm_bwd_bf16");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shp *s = &shapes[i];
        const int with_dh = i % 2 == 0, with_dw = i % 3 != 2;
        fr_tensor *dyf = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(&r, FR_F32, s->r, s->d, 0.2, 1.5);
        fr_tensor *dyb = bc_bf16_pair(dyf), *w = scale_of(&r, s), *dh = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 0.5);
        fr_tensor *xb = bc_bf16_pair(x); /* x holds bfloat16 values now: xb is H's saved copy Hs */
        tnode t[3];
        fr_tensor *g[3][TN_MAX];
        char what[200], extra[64], lab[320];
        snprintf(extra, sizeof extra, "dH %s, dScale %s", with_dh ? "yes" : "no", with_dw ? "yes" : "no");
        describe(what, sizeof what, "AddRMSNormGrad bf16 dY (and H)", s, extra);
        for (int k = 0; k < 3; k++) { /* dY, H: f32 f32, bf16 f32, bf16 bf16 */
            bwd_node(&t[k], s, k ? dyb : dyf, k == 2 ? xb : x, w, dh, with_dh, with_dw);
            FR_ASSERT_OK(tn_run_gpu(&t[k], g[k]));
        }
        gpu_check(&t[1], TOL, what);
        gpu_check(&t[2], TOL, what);
        for (int k = 1; k < 3; k++)
            for (int o = 0; o < (with_dw ? 2 : 1); o++) {
                snprintf(lab, sizeof lab, "%s: GPU %s (H %s) vs float32 dY's", what, o ? "dScale" : "dX",
                         k == 2 ? "bf16" : "f32");
                CU_ASSERT_EQUAL(bc_bits_diff(lab, g[k][o], g[0][o]), 0);
                snprintf(lab, sizeof lab, "%s: CPU %s (H %s) vs float32 dY's", what, o ? "dScale" : "dX",
                         k == 2 ? "bf16" : "f32");
                CU_ASSERT_EQUAL(bc_bits_diff(lab, t[k].out[o], t[0].out[o]), 0);
            }
        fr_tensor_free(xb);
        for (int k = 0; k < 3; k++) {
            gpu_free_outputs(&t[k], g[k]);
            tn_free(&t[k]);
        }
        fr_tensor_free(dyf);
        fr_tensor_free(dyb);
        fr_tensor_free(x);
        fr_tensor_free(w);
        fr_tensor_free(dh);
    }
}

/* ---- the team kernel (rows of 768..4096) against the one-row-per-block kernel ---- */

/* the GPU outputs with FP8RUN_RMS_BWD_TEAMS=teams ("1": the team kernel where the row fits) */
static void run_gpu_teams(tnode *t, const char *teams, fr_tensor **g)
{
    setenv("FP8RUN_RMS_BWD_TEAMS", teams, 1);
    FR_ASSERT_OK(tn_run_gpu(t, g));
}

/* one case: the CPU within TOL, two team runs bit for bit, the old kernel within TOL (dX is
 * expected bit for bit too: the same row sums in the same order; printed when not). bf16: dY
 * bfloat16 against f32g, the team kernel's outputs for the float32 dY of the same values. */
static void teams_case(const shp *s, fr_tensor *dy, fr_tensor *x, fr_tensor *w, fr_tensor *dh, int with_dh, int with_dw,
                       fr_tensor **f32g, fr_tensor **keep)
{
    tnode t;
    bwd_node(&t, s, dy, x, w, dh, with_dh, with_dw);
    char what[320], extra[64], lab[400];
    snprintf(extra, sizeof extra, "dY %s, H %s, dH %s, dScale %s (teams)", fr_dtype_name(dy->dtype),
             fr_dtype_name(x->dtype), with_dh ? "yes" : "no", with_dw ? "yes" : "no");
    describe(what, sizeof what, "AddRMSNormGrad", s, extra);
    setenv("FP8RUN_RMS_BWD_TEAMS", "1", 1);
    gpu_check(&t, TOL, what);
    fr_tensor *g1[TN_MAX], *g2[TN_MAX], *g0[TN_MAX];
    run_gpu_teams(&t, "1", g1);
    run_gpu_teams(&t, "1", g2);
    run_gpu_teams(&t, "0", g0);
    for (int o = 0; o < (with_dw ? 2 : 1); o++) {
        const char *name = o ? "dScale" : "dX";
        snprintf(lab, sizeof lab, "%s: %s, two runs", what, name);
        CU_ASSERT_EQUAL(bc_bits_diff(lab, g1[o], g2[o]), 0);
        const double e = gpu_rel_err(g1[o], g0[o]);
        if (e > TOL) printf("\n  %s: %s differs from FP8RUN_RMS_BWD_TEAMS=0's by %g", what, name, e);
        CU_ASSERT(e <= TOL);
        if (o == 0 && e != 0) printf("\n  %s: dX not bit for bit FP8RUN_RMS_BWD_TEAMS=0's (%g)", what, e);
        if (f32g) {
            snprintf(lab, sizeof lab, "%s: %s vs float32 dY's", what, name);
            CU_ASSERT_EQUAL(bc_bits_diff(lab, g1[o], f32g[o]), 0);
        }
    }
    if (!with_dw) CU_ASSERT_PTR_NULL(g1[1]);
    if (!with_dw) CU_ASSERT_PTR_NULL(g0[1]);
    if (keep)
        for (int o = 0; o < 2; o++) keep[o] = g1[o], g1[o] = NULL;
    gpu_free_outputs(&t, g0);
    gpu_free_outputs(&t, g1);
    gpu_free_outputs(&t, g2);
    tn_free(&t);
}

static void test_bwd_teams(void)
{
    if (!gpu_available()) return;
    /* team kernel: 768..2048 (one vector a thread, 2 teams a block at 768, 1024), 3072, 4096 (two);
     * 1000, 2304: the old kernel whatever the variable says */
    static const int64_t lens[] = {768, 1024, 2048, 4096, 3072, 1000, 2304};
    const char *prev = getenv("FP8RUN_RMS_BWD_TEAMS");
    char saved[32] = "";
    if (prev) snprintf(saved, sizeof saved, "%s", prev);
    fr_rng r = fr_test_rng("gpu_add_norm_bwd_teams");
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const shp s = {2, -1, {1500, lens[li]}}; /* more rows than a wave has teams */
        fr_tensor *dyf = tt_randn(&r, FR_F32, s.r, s.d, 0.0, 1.0), *x = tt_randn(&r, FR_F32, s.r, s.d, 0.2, 1.5);
        fr_tensor *dyr = tt_randn(&r, FR_F32, s.r, s.d, 0.0, 1.0), *dyb = bc_bf16_pair(dyr);
        fr_tensor *w = scale_of(&r, &s), *dh = tt_randn(&r, FR_F32, s.r, s.d, 0.0, 0.5);
        fr_tensor *xb = bc_bf16_pair(x); /* x holds bfloat16 values now; xb them in bfloat16 (Hs) */
        for (int c = 0; c < 4; c++) {
            const int with_dh = c & 1, with_dw = c >> 1;
            teams_case(&s, dyf, x, w, dh, with_dh, with_dw, NULL, NULL);
            fr_tensor *f32g[2] = {NULL, NULL};
            teams_case(&s, dyr, x, w, dh, with_dh, with_dw, NULL, f32g);
            teams_case(&s, dyb, x, w, dh, with_dh, with_dw, f32g, NULL);
            teams_case(&s, dyb, xb, w, dh, with_dh, with_dw, f32g, NULL);
            for (int o = 0; o < 2; o++) fr_tensor_free(f32g[o]);
        }
        fr_tensor_free(xb);
        fr_tensor_free(dyf);
        fr_tensor_free(dyr);
        fr_tensor_free(dyb);
        fr_tensor_free(x);
        fr_tensor_free(w);
        fr_tensor_free(dh);
    }
    if (prev)
        setenv("FP8RUN_RMS_BWD_TEAMS", saved, 1);
    else
        unsetenv("FP8RUN_RMS_BWD_TEAMS");
}

/* ---- timings at the 1B shape ---- */

/* forward: B's dtype bt, Y's yt; backward: dY's bt, H's yt */
static void time_case(int grad, fr_dtype bt, fr_dtype yt)
{
    const int64_t d[2] = {16384, 2048}, dw[1] = {2048};
    fr_tensor a = gpu_shape_only(grad ? bt : FR_F32, 2, d), b = gpu_shape_only(grad ? yt : bt, 2, d);
    fr_tensor w = gpu_shape_only(FR_F32, 1, dw), dh = gpu_shape_only(FR_F32, 2, d);
    fr_tensor *ins[4] = {&a, &b, &w, &dh};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, grad ? "AddRMSNormGrad" : "AddRMSNorm", 1, grad ? 4 : 3, ins, 0, 2);
    if (!grad && yt == FR_BF16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    double bytes = 0;
    const double ms = gpu_time_node(&t, 20, &bytes);
    if (grad)
        printf("\n    AddRMSNormGrad [16384, 2048] dY %-8s H %-8s (dH, dScale) %7.3f ms %6.0f GB/s", fr_dtype_name(bt),
               fr_dtype_name(yt), ms, bytes / (ms * 1e6));
    else
        printf("\n    AddRMSNorm     [16384, 2048] B %-8s Y %-8s       %7.3f ms %6.0f GB/s", fr_dtype_name(bt),
               fr_dtype_name(yt), ms, bytes / (ms * 1e6));
    tn_free(&t);
}

static void test_times(void)
{
    if (!gpu_available()) return;
    time_case(0, FR_F32, FR_F32);
    time_case(0, FR_F32, FR_BF16);
    time_case(0, FR_BF16, FR_BF16);
    time_case(1, FR_F32, FR_F32);
    time_case(1, FR_BF16, FR_F32);
    time_case(1, FR_BF16, FR_BF16); /* the training graph's (bfloat16 saved residual) */
    printf("\n");
}

static CU_TestInfo tests[] = {
    {"AddRMSNorm: H bit for bit, Y (1e-6)", test_fwd},
    {"AddRMSNormGrad: dX, dScale (1e-6), repeatable bits", test_bwd},
    {"AddRMSNorm bf16 B / y_dtype bf16 (and Hs): float32 case's bits, Y and Hs their rounding", test_fwd_bf16},
    {"AddRMSNormGrad bf16 dY and H: float32 dY's and H's dX, dScale bits", test_bwd_bf16},
    {"AddRMSNormGrad teams of warps (768..4096): CPU, FP8RUN_RMS_BWD_TEAMS=0, repeatable bits", test_bwd_teams},
    {"times at the 1B shape (printed)", test_times},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_add_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
