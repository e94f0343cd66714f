/* GPU kernels of the norm family (ops/cuda/norm.cu) against the CPU kernels, on fresh random
 * inputs with a non-zero mean: LayerNormalization / RMSNormalization on axis -1, 1, 0 and
 * negative axes, Scale / B shaped like the normalized dims, from fewer dims, with size-1 dims
 * (broadcast inside the normalized dims) or varying per row, with and without B, with and
 * without the optional Mean / InvStdDev outputs, epsilon, size-1 and empty dims, float32 and
 * float64; real sizes (d = 768..30000, up to 100000 rows) that take the shared-memory row
 * cache (default and opted-in sizes) and the uncached path; LayerNormGrad / RMSNormGrad
 * (dX, dScale, dB) with the column path (sliced rows, two-stage sums), the generic
 * parameter-broadcast path and (float32 LayerNormGrad, rows of up to 4096) AddLayerNormGrad's
 * register kernels; RMSNormalization in the ai.fp8run domain too (the fused node); RMSNormGrad
 * on rows of 768..4096 with AddRMSNormGrad's team kernel and with FP8RUN_RMS_BWD_TEAMS=0.
 * Tolerances: float32 within 1e-6 relative L2 of the CPU (both compute in double and round
 * once, or the register kernels in float32, ~1e-7 off; the contract is 1e-5), float64 within
 * 1e-11; NaN statistics of empty rows exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

#define TOL_F32 1e-6
#define TOL_F64 1e-11

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? TOL_F64 : TOL_F32; }

/* RMSNormalization nodes in the ai.fp8run domain (passes/rmsnorm_fuse.c's, below opset 23) */
static int g_fp8run_domain;

/* ---- cases (Scale / B shapes: tt_param_shape) ---- */

static const char *const pnames[] = {"exact", "last", "lead1", "full", "size1"};

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

/* X, Scale and B (NULL when !bias) for a case; 0 when the parameter shape does not apply */
static int make_inputs(fr_rng *rng, fr_dtype dt, int rms, const shp *xs, int axis, tt_pshape sp, int bias, tt_pshape bp,
                       fr_tensor **x, fr_tensor **s, fr_tensor **b)
{
    int a = axis < 0 ? axis + xs->r : axis;
    int64_t sd[FR_MAX_RANK + 1], bd[FR_MAX_RANK + 1];
    int sr = tt_param_shape(sp, xs->r, xs->d, a, sd);
    if (sr > xs->r) return 0; /* [1] + dims[axis:] only fits when axis > 0 */
    *x = tt_randn(rng, dt, xs->r, xs->d, rms ? 0.5 : 3.0, 2.0);
    *s = tt_randn(rng, dt, sr, sd, 1.0, 0.5);
    *b = NULL;
    if (bias) {
        int br = tt_param_shape(bp, xs->r, xs->d, a, bd);
        if (br > xs->r) br = tt_param_shape(TT_P_EXACT, xs->r, xs->d, a, bd);
        *b = tt_randn(rng, dt, br, bd, 0.0, 1.0);
    }
    return 1;
}

static void describe(char *buf, size_t n, const char *op, fr_dtype dt, const shp *xs, int axis, const fr_tensor *s,
                     tt_pshape sp, const fr_tensor *b, tt_pshape bp, const char *extra)
{
    char x1[96], s1[96], b1[96] = "none";
    fr_shape_str(xs->r, xs->d, x1, sizeof x1);
    fr_shape_str(s->rank, s->dims, s1, sizeof s1);
    if (b) fr_shape_str(b->rank, b->dims, b1, sizeof b1);
    snprintf(buf, n, "%s %s X%s axis %d Scale%s (%s) B%s (%s) %s", op, fr_dtype_name(dt), x1, axis, s1, pnames[sp], b1,
             b ? pnames[bp] : "-", extra);
}

/* ---- forward ---- */

/* stats: 0 = only Y, 1 = Y, Mean, InvStdDev, 2 = Y, InvStdDev (Mean omitted) */
static void run_norm(fr_rng *rng, fr_dtype dt, int rms, const shp *xs, int axis, tt_pshape sp, int bias, tt_pshape bp,
                     int stats, float eps)
{
    fr_tensor *x, *s, *b;
    if (!make_inputs(rng, dt, rms, xs, axis, sp, bias && !rms, bp, &x, &s, &b)) return;
    fr_tensor *ins[3] = {x, s, b};
    tnode t;
    int n_out = rms ? 1 : stats ? 3 : 1;
    const char *op = rms ? "RMSNormalization" : "LayerNormalization";
    if (rms && g_fp8run_domain)
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, 2, ins, 0, n_out);
    else
        tn_init(&t, op, rms ? 23 : 17, b ? 3 : 2, ins, 0, n_out);
    if (stats == 2 && !rms) tn_omit_output(&t, 1);
    TN_ATTR(&t, int, "axis", axis);
    if (eps != 1e-5f) TN_ATTR(&t, float, "epsilon", eps);
    FR_ASSERT_OK(tn_run(&t));
    char what[320], extra[64];
    snprintf(extra, sizeof extra, "stats=%d epsilon=%g", rms ? 0 : stats, (double)eps);
    describe(what, sizeof what, op, dt, xs, axis, s, sp, b, bp, extra);
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static const shp xshapes[] = {
    {3, {2, 5, 16}}, {3, {3, 1, 7}}, {2, {6, 384}}, {3, {4, 0, 8}}, {1, {9}}, {4, {2, 3, 4, 5}}, {2, {0, 8}},
};

static void test_norm_small(void)
{
    fr_rng r = fr_test_rng("gpu_norm_small");
    int runs = 0;
    for (size_t xi = 0; xi < sizeof xshapes / sizeof xshapes[0]; xi++) {
        const shp *xs = &xshapes[xi];
        for (int axis = -xs->r; axis < xs->r; axis++)
            for (int sp = 0; sp < 5; sp++)
                for (int rms = 0; rms < 2; rms++) {
                    fr_dtype dt = (axis + sp + rms + 8) % 5 == 0 ? FR_F64 : FR_F32;
                    run_norm(&r, dt, rms, xs, axis, (tt_pshape)sp, sp % 2, (tt_pshape)((sp + 1) % 5), sp % 3,
                             sp == 4 ? 1e-3f : 1e-5f);
                    runs++;
                }
    }
    CU_ASSERT(runs > 100);
}

/* real sizes: rows cached in shared memory (default and opted-in sizes) or re-read */
static const shp big_shapes[] = {
    {2, {16384, 768}}, {2, {2048, 8192}}, {2, {512, 12289}}, {2, {64, 30000}},
    {3, {8, 512, 1024}}, {2, {100000, 64}}, {2, {1, 8192}},
};

static void test_norm_large(void)
{
    fr_rng r = fr_test_rng("gpu_norm_large");
    for (size_t xi = 0; xi < sizeof big_shapes / sizeof big_shapes[0]; xi++)
        for (int rms = 0; rms < 2; rms++) {
            run_norm(&r, FR_F32, rms, &big_shapes[xi], -1, TT_P_EXACT, 1, TT_P_EXACT, xi % 3, 1e-5f);
            if (xi == 1 || xi == 4) run_norm(&r, FR_F64, rms, &big_shapes[xi], -1, TT_P_LEAD1, 1, TT_P_LAST, 1, 1e-6f);
        }
    /* per-row parameters and broadcast inside the normalized dims at a real size */
    const shp s3 = {3, {16, 256, 768}};
    run_norm(&r, FR_F32, 0, &s3, -1, TT_P_FULL, 1, TT_P_EXACT, 1, 1e-5f);
    run_norm(&r, FR_F32, 0, &s3, 1, TT_P_SIZE1, 1, TT_P_LAST, 1, 1e-5f);
    run_norm(&r, FR_F32, 1, &s3, -2, TT_P_EXACT, 0, TT_P_EXACT, 0, 1e-5f);
}

/* ---- backward ---- */

static void run_ng(fr_rng *rng, fr_dtype dt, int rms, const shp *xs, int axis, tt_pshape sp, int bias, tt_pshape bp,
                   int want_db, float eps)
{
    fr_tensor *x, *s, *b;
    if (!make_inputs(rng, dt, rms, xs, axis, sp, bias && !rms, bp, &x, &s, &b)) return;
    fr_tensor *dy = tt_randn(rng, dt, xs->r, xs->d, 0.0, 1.0);
    fr_tensor *ins[4] = {dy, x, s, b};
    tnode t;
    const char *op = rms ? "RMSNormGrad" : "LayerNormGrad";
    const int n_out = b && want_db ? 3 : 2;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, b ? 4 : 3, ins, 0, n_out);
    TN_ATTR(&t, int, "axis", axis);
    if (eps != 1e-5f) TN_ATTR(&t, float, "epsilon", eps);
    FR_ASSERT_OK(tn_run(&t));
    char what[320], extra[64];
    snprintf(extra, sizeof extra, "outputs=%d epsilon=%g", n_out, (double)eps);
    describe(what, sizeof what, op, dt, xs, axis, s, sp, b, bp, extra);
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static void test_norm_grad_small(void)
{
    fr_rng r = fr_test_rng("gpu_norm_grad_small");
    int runs = 0;
    for (size_t xi = 0; xi < sizeof xshapes / sizeof xshapes[0]; xi++) {
        const shp *xs = &xshapes[xi];
        for (int axis = -xs->r; axis < xs->r; axis++)
            for (int sp = 0; sp < 5; sp++)
                for (int rms = 0; rms < 2; rms++) {
                    fr_dtype dt = (axis + sp + rms + 8) % 4 == 0 ? FR_F64 : FR_F32;
                    run_ng(&r, dt, rms, xs, axis, (tt_pshape)sp, sp != 2, (tt_pshape)((sp + 3) % 5), sp != 4,
                           sp == 1 ? 1e-2f : 1e-5f);
                    runs++;
                }
    }
    CU_ASSERT(runs > 100);
}

static void test_norm_grad_large(void)
{
    fr_rng r = fr_test_rng("gpu_norm_grad_large");
    for (size_t xi = 0; xi < sizeof big_shapes / sizeof big_shapes[0]; xi++)
        for (int rms = 0; rms < 2; rms++) {
            run_ng(&r, FR_F32, rms, &big_shapes[xi], -1, TT_P_EXACT, 1, TT_P_EXACT, 1, 1e-5f);
            if (xi == 0 || xi == 4) run_ng(&r, FR_F64, rms, &big_shapes[xi], -1, TT_P_LEAD1, 1, TT_P_EXACT, 1, 1e-5f);
        }
    /* float32 LayerNormGrad with Scale and B the row takes AddLayerNormGrad's register kernels
     * (float32 arithmetic per element): vectors of 8 and 4, 1 to 4 of them a thread */
    static const shp ln_rows[] = {
        {2, {16384, 2048}}, {2, {16384, 1024}}, {2, {4096, 1020}}, {2, {512, 4096}}, {2, {300, 2044}}, {2, {64, 4092}},
    };
    if (gpu_available()) { /* (their CPU references take seconds) */
        for (size_t xi = 0; xi < sizeof ln_rows / sizeof ln_rows[0]; xi++)
            run_ng(&r, FR_F32, 0, &ln_rows[xi], -1, TT_P_EXACT, 1, TT_P_EXACT, 1, 1e-5f);
        run_ng(&r, FR_F32, 0, &ln_rows[1], -1, TT_P_LEAD1, 0, TT_P_EXACT, 0, 1e-2f); /* no B: dScale only */
        run_ng(&r, FR_F32, 0, &ln_rows[0], -1, TT_P_EXACT, 1, TT_P_EXACT, 0, 1e-5f); /* B given, no dB */
    }
    /* the generic parameter path at a real size, and normalizing two dims */
    const shp s3 = {3, {16, 256, 768}};
    run_ng(&r, FR_F32, 0, &s3, -1, TT_P_FULL, 1, TT_P_EXACT, 1, 1e-5f);
    run_ng(&r, FR_F32, 0, &s3, 1, TT_P_SIZE1, 1, TT_P_LAST, 1, 1e-5f);
    run_ng(&r, FR_F32, 1, &s3, 1, TT_P_EXACT, 0, TT_P_EXACT, 0, 1e-5f);
    run_ng(&r, FR_F32, 0, &s3, 1, TT_P_EXACT, 1, TT_P_EXACT, 0, 1e-5f); /* B given, dB not asked for */
}

/* RMSNormGrad on float32 rows of 768..4096 (and 1000, 2304: the one-row-per-block kernel
 * whatever the variable), Scale the row: AddRMSNormGrad's team kernel (ops/cuda/add_norm.cu)
 * against the CPU, against FP8RUN_RMS_BWD_TEAMS=0 (within the tolerance; dX expected bit for
 * bit, printed when not) and against itself (bit for bit) */
static void test_rms_grad_teams(void)
{
    if (!gpu_available()) return;
    static const int64_t lens[] = {768, 1024, 2048, 4096, 3072, 1000, 2304};
    const char *prev = getenv("FP8RUN_RMS_BWD_TEAMS");
    char saved[32] = "";
    if (prev) snprintf(saved, sizeof saved, "%s", prev);
    fr_rng r = fr_test_rng("gpu_norm_rms_grad_teams");
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const shp xs = {2, {1200, lens[li]}};
        fr_tensor *x = NULL, *sc = NULL, *b = NULL;
        CU_ASSERT_FATAL(make_inputs(&r, FR_F32, 1, &xs, -1, TT_P_EXACT, 0, TT_P_EXACT, &x, &sc, &b));
        fr_tensor *dy = tt_randn(&r, FR_F32, xs.r, xs.d, 0.0, 1.0);
        fr_tensor *ins[3] = {dy, x, sc};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "RMSNormGrad", 1, 3, ins, 0, 2);
        TN_ATTR(&t, int, "axis", -1);
        FR_ASSERT_OK(tn_run(&t));
        char what[320];
        describe(what, sizeof what, "RMSNormGrad", FR_F32, &xs, -1, sc, TT_P_EXACT, NULL, TT_P_EXACT, "(teams)");
        setenv("FP8RUN_RMS_BWD_TEAMS", "1", 1);
        gpu_check(&t, TOL_F32, what);
        fr_tensor *g1[TN_MAX], *g2[TN_MAX], *g0[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu(&t, g1));
        FR_ASSERT_OK(tn_run_gpu(&t, g2));
        setenv("FP8RUN_RMS_BWD_TEAMS", "0", 1);
        FR_ASSERT_OK(tn_run_gpu(&t, g0));
        for (int o = 0; o < 2; o++) {
            CU_ASSERT_EQUAL(gpu_rel_err(g1[o], g2[o]), 0);
            const double e = gpu_rel_err(g1[o], g0[o]);
            if (e > TOL_F32 || (o == 0 && e != 0))
                printf("\n  %s: %s differs from FP8RUN_RMS_BWD_TEAMS=0's by %g", what, o ? "dScale" : "dX", e);
            CU_ASSERT(e <= TOL_F32);
        }
        gpu_free_outputs(&t, g0);
        gpu_free_outputs(&t, g1);
        gpu_free_outputs(&t, g2);
        tn_free(&t);
        fr_tensor_free(dy);
        fr_tensor_free(x);
        fr_tensor_free(sc);
    }
    if (prev)
        setenv("FP8RUN_RMS_BWD_TEAMS", saved, 1);
    else
        unsetenv("FP8RUN_RMS_BWD_TEAMS");
}

static void test_rms_fp8run(void)
{
    fr_rng r = fr_test_rng("gpu_norm_fp8run");
    g_fp8run_domain = 1;
    for (size_t xi = 0; xi < sizeof xshapes / sizeof xshapes[0]; xi++)
        run_norm(&r, FR_F32, 1, &xshapes[xi], -1, TT_P_LAST, 0, TT_P_EXACT, 0, 1e-6f);
    run_norm(&r, FR_F32, 1, &big_shapes[0], -1, TT_P_EXACT, 0, TT_P_EXACT, 0, 1e-6f);
    g_fp8run_domain = 0;
}

static CU_TestInfo tests[] = {
    {"LayerNorm/RMSNorm small shapes: axes, parameter broadcasts, outputs", test_norm_small},
    {"LayerNorm/RMSNorm real sizes", test_norm_large},
    {"ai.fp8run::RMSNormalization (below opset 23)", test_rms_fp8run},
    {"LayerNormGrad/RMSNormGrad small shapes", test_norm_grad_small},
    {"LayerNormGrad/RMSNormGrad real sizes", test_norm_grad_large},
    {"RMSNormGrad rows of 768..4096: teams of warps vs FP8RUN_RMS_BWD_TEAMS=0, repeatable bits", test_rms_grad_teams},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
