/* LayerNormalization (opset 17) and RMSNormalization (opset 23) (ops/norm.c) against
 * double-precision references written here, on fresh random inputs with a non-zero mean:
 * axis -1, 1, 0 and negative on rank-3 inputs, Scale/B shaped like the normalized dims,
 * broadcast from fewer dims or size-1 dims, or varying per row (unidirectional broadcast to
 * X), with and without B, with and without the optional Mean/InvStdDev outputs, epsilon,
 * size-1 and empty dims, float64, and the errors.
 * Tolerance: Y, Mean and InvStdDev within 1e-6 relative L2 of the reference (float64 1e-12). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* ---- cases (Scale / B shapes: tt_param_shape) ---- */

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

static const shp xshapes[] = {
    {3, {2, 5, 16}}, {3, {3, 1, 7}}, {2, {6, 384}}, {3, {4, 0, 8}}, {1, {9}}, {4, {2, 3, 4, 5}},
};

/* One LayerNormalization / RMSNormalization run against the reference. */
static void run_norm(fr_rng *rng, fr_dtype dt, int rms, const shp *xs, int axis, tt_pshape sp, int bias, tt_pshape bp,
                     int stats, float eps, double tol)
{
    fr_tensor *x = tt_randn(rng, dt, xs->r, xs->d, rms ? 0.5 : 3.0, 2.0);
    int a = axis < 0 ? axis + xs->r : axis;
    int64_t sd[FR_MAX_RANK + 1], bd[FR_MAX_RANK + 1];
    int sr = tt_param_shape(sp, x->rank, x->dims, a, sd);
    if (sr > xs->r) { /* [1] + dims[axis:] only fits when axis > 0 */
        fr_tensor_free(x);
        return;
    }
    fr_tensor *s = tt_randn(rng, dt, sr, sd, 1.0, 0.5), *b = NULL;
    if (bias) {
        int br = tt_param_shape(bp, x->rank, x->dims, a, bd);
        if (br > xs->r) br = tt_param_shape(TT_P_EXACT, x->rank, x->dims, a, bd);
        b = tt_randn(rng, dt, br, bd, 0.0, 1.0);
    }
    fr_tensor *ins[3] = {x, s, b};
    tnode t;
    int n_out = rms ? 1 : stats ? 3 : 1;
    tn_init(&t, rms ? "RMSNormalization" : "LayerNormalization", rms ? 23 : 17, b ? 3 : 2, ins,
            0, n_out);
    if (stats == 2) tn_omit_output(&t, 1); /* Mean omitted, InvStdDev kept */
    TN_ATTR(&t, int, "axis", axis);
    if (eps != 1e-5f) TN_ATTR(&t, float, "epsilon", eps);
    FR_ASSERT_OK(tn_run(&t));

    fr_tensor *y = t.out[0];
    tt_assert_shape(y, dt, xs->r, xs->d);
    int64_t rows = 1, len = 1;
    for (int k = 0; k < xs->r; k++) {
        if (k < a) rows *= xs->d[k];
        else len *= xs->d[k];
    }
    int64_t n = rows * len;
    double *ry = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *rm = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    double *ri = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ry);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ri);
    for (int64_t row = 0; row < rows; row++) {
        double mean = 0, ms = 0;
        for (int64_t j = 0; j < len; j++) mean += fr_tensor_get_f64(x, row * len + j);
        mean /= (double)len;
        for (int64_t j = 0; j < len; j++) {
            double v = fr_tensor_get_f64(x, row * len + j) - (rms ? 0.0 : mean);
            ms += v * v;
        }
        double inv = 1.0 / sqrt(ms / (double)len + (double)eps);
        rm[row] = mean;
        ri[row] = inv;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = row * len + j;
            double v = (fr_tensor_get_f64(x, i) - (rms ? 0.0 : mean)) * inv *
                       fr_tensor_get_f64(s, tt_bcast_index(s, x, i));
            if (b) v += fr_tensor_get_f64(b, tt_bcast_index(b, x, i));
            ry[i] = v;
        }
    }
    double err = tt_rel_err(y, ry, n);
    CU_ASSERT(err <= tol);
    if (!(err <= tol))
        fprintf(stderr, "\n  %s x rank %d axis %d scale#%d bias=%d#%d: Y rel err %g\n",
                rms ? "RMSNorm" : "LayerNorm", xs->r, axis, sp, bias, bp, err);
    if (!rms && stats) {
        int64_t ed[FR_MAX_RANK];
        for (int k = 0; k < xs->r; k++) ed[k] = k < a ? xs->d[k] : 1;
        for (int o = stats == 2 ? 2 : 1; o < 3; o++) {
            fr_tensor *st = t.out[o];
            tt_assert_shape(st, FR_F32, xs->r, ed);
            if (len == 0) { /* statistics of nothing: 0 / 0 */
                for (int64_t i = 0; i < rows; i++) CU_ASSERT(isnan(fr_tensor_get_f64(st, i)));
                continue;
            }
            double e2 = tt_rel_err(st, o == 1 ? rm : ri, rows);
            CU_ASSERT(e2 <= (tol > 1e-6 ? tol : 1e-6));
        }
        if (stats == 2) CU_ASSERT_PTR_NULL(t.out[1]);
    }
    free(ry);
    free(rm);
    free(ri);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static void test_norm_sweep(int rms)
{
    fr_rng r = fr_test_rng(rms ? "rmsnorm_sweep" : "layernorm_sweep");
    int runs = 0;
    for (int xi = 0; xi < (int)(sizeof xshapes / sizeof xshapes[0]); xi++) {
        const shp *xs = &xshapes[xi];
        for (int axis = -xs->r; axis < xs->r; axis++)
            for (int sp = TT_P_EXACT; sp <= TT_P_SIZE1; sp++)
                for (int bias = 0; bias < (rms ? 1 : 2); bias++)
                    for (int stats = 0; stats < (rms ? 1 : 3); stats++) {
                        tt_pshape bp = (tt_pshape)((sp + 1 + stats) % 5);
                        float eps = (runs % 3 == 0) ? 1e-3f : 1e-5f;
                        run_norm(&r, FR_F32, rms, xs, axis, (tt_pshape)sp, bias, bp, stats, eps, 1e-6);
                        runs++;
                    }
    }
    CU_ASSERT(runs > (rms ? 50 : 300));
}

static void test_layernorm(void) { test_norm_sweep(0); }
static void test_rmsnorm(void) { test_norm_sweep(1); }

static void test_norm_f64(void)
{
    fr_rng r = fr_test_rng("norm_f64");
    run_norm(&r, FR_F64, 0, &xshapes[0], -1, TT_P_EXACT, 1, TT_P_EXACT, 1, 1e-5f, 1e-12);
    run_norm(&r, FR_F64, 0, &xshapes[0], 1, TT_P_LAST, 1, TT_P_FULL, 1, 1e-5f, 1e-12);
    run_norm(&r, FR_F64, 1, &xshapes[0], 1, TT_P_EXACT, 0, TT_P_EXACT, 0, 1e-5f, 1e-12);
}

/* A constant row has zero variance: Y = B exactly and InvStdDev = 1 / sqrt(epsilon). */
static void test_layernorm_constant_rows(void)
{
    int64_t dx[2] = {3, 4}, ds[1] = {4};
    fr_tensor *x = tt_new(FR_F32, 2, dx), *s = tt_new(FR_F32, 1, ds), *b = tt_new(FR_F32, 1, ds);
    for (int i = 0; i < 12; i++) ((float *)x->data)[i] = 2.5f + (float)(i / 4);
    for (int i = 0; i < 4; i++) {
        ((float *)s->data)[i] = 3.0f;
        ((float *)b->data)[i] = (float)i - 1.0f;
    }
    fr_tensor *ins[3] = {x, s, b};
    tnode t;
    tn_init(&t, "LayerNormalization", 17, 3, ins, 0, 3);
    TN_ATTR(&t, float, "epsilon", 0.25f);
    FR_ASSERT_OK(tn_run(&t));
    for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(((float *)t.out[0]->data)[i], (float)(i % 4) - 1.0f);
    for (int r = 0; r < 3; r++) {
        CU_ASSERT_EQUAL(((float *)t.out[1]->data)[r], 2.5f + (float)r);
        CU_ASSERT_EQUAL(((float *)t.out[2]->data)[r], 2.0f);
    }
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static void test_norm_errors(void)
{
    fr_rng r = fr_test_rng("norm_errors");
    int64_t dx[3] = {2, 3, 4}, ds[1] = {4}, dbad[1] = {3}, d2[2] = {5, 4};
    fr_tensor *x = tt_randn(&r, FR_F32, 3, dx, 0, 1), *s = tt_randn(&r, FR_F32, 1, ds, 1, 1);
    fr_tensor *sbad = tt_randn(&r, FR_F32, 1, dbad, 1, 1), *s2 = tt_randn(&r, FR_F32, 2, d2, 1, 1);
    fr_tensor *s64 = tt_randn(&r, FR_F64, 1, ds, 1, 1), *xh = tt_new(FR_BF16, 3, dx);
    fr_tensor *sc = tt_randn(&r, FR_F32, 0, NULL, 1, 1);
    tnode t;
    fr_tensor *ins[3] = {x, s, s};
    /* stash_type other than float32 */
    tn_init(&t, "LayerNormalization", 17, 2, ins, 0, 1);
    TN_ATTR(&t, int, "stash_type", 16);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("stash_type");
    tn_free(&t);
    /* scale that does not broadcast to X */
    fr_tensor *ins_bad[2] = {x, sbad};
    tn_init(&t, "LayerNormalization", 17, 2, ins_bad, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("does not broadcast");
    tn_free(&t);
    fr_tensor *ins_b2[3] = {x, s, s2};
    tn_init(&t, "LayerNormalization", 17, 3, ins_b2, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("B [5, 4]");
    tn_free(&t);
    /* dtypes */
    fr_tensor *ins_h[2] = {xh, s};
    tn_init(&t, "RMSNormalization", 23, 2, ins_h, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("bfloat16");
    tn_free(&t);
    fr_tensor *ins_64[2] = {x, s64};
    tn_init(&t, "RMSNormalization", 23, 2, ins_64, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("float64");
    tn_free(&t);
    /* axis out of range, rank-0 X */
    tn_init(&t, "LayerNormalization", 17, 2, ins, 0, 1);
    TN_ATTR(&t, int, "axis", 3);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("out of range");
    tn_free(&t);
    fr_tensor *ins_sc[2] = {sc, sc};
    tn_init(&t, "RMSNormalization", 23, 2, ins_sc, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank");
    tn_free(&t);
    /* RMSNormalization has no bias input and one output */
    tn_init(&t, "RMSNormalization", 23, 3, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("inputs");
    tn_free(&t);
    tn_init(&t, "RMSNormalization", 23, 2, ins, 0, 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("outputs");
    tn_free(&t);
    fr_tensor *to_free[] = {x, s, sbad, s2, s64, xh, sc};
    for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) fr_tensor_free(to_free[i]);
}

static CU_TestInfo norm_tests[] = {
    {"LayerNormalization axes, Scale/B broadcasts, Mean/InvStdDev", test_layernorm},
    {"RMSNormalization axes and scale broadcasts", test_rmsnorm},
    {"float64", test_norm_f64},
    {"LayerNormalization constant rows and epsilon", test_layernorm_constant_rows},
    {"errors", test_norm_errors},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"ops_norm", NULL, NULL, NULL, NULL, norm_tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
