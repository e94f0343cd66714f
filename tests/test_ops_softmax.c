/* Softmax and LogSoftmax (ops/softmax.c) against double-precision references written here,
 * on fresh random inputs: every axis (negative too, and the default) under both opset
 * conventions (opset >= 13: one axis; opset < 13: the input coerced to 2-D at axis), size-1
 * and empty dims, large logits (stability), -inf / +inf entries, and the errors.
 * Tolerance: within 1e-6 relative L2 of the reference; non-finite values must match
 * exactly (an all -inf row is NaN, as onnxruntime gives). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* Reference: each normalized group is the set of elements sharing the coordinates outside
 * the normalized dims (one dim for opset >= 13, all dims from axis on before), taken
 * relative to the group max so a size-1 group's log-softmax is exactly 0. */
static void ref_softmax(const fr_tensor *x, int axis, int legacy, int lg, double *ref)
{
    int r = x->rank;
    int64_t n = fr_tensor_numel(x);
    /* group id of each element: its flat index with normalized coordinates zeroed */
    int64_t *grp = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    double *gmax = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *gsum = calloc((size_t)(n ? n : 1), sizeof(double));
    CU_ASSERT_PTR_NOT_NULL_FATAL(grp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gmax);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gsum);
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, g = 0, mul = 1;
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % x->dims[d];
            rem /= x->dims[d];
            int normalized = legacy ? d >= axis : d == axis;
            if (!normalized) g += c * mul;
            mul *= x->dims[d];
        }
        grp[i] = g;
        gmax[i] = -INFINITY;
    }
    for (int64_t i = 0; i < n; i++)
        if (fr_tensor_get_f64(x, i) > gmax[grp[i]]) gmax[grp[i]] = fr_tensor_get_f64(x, i);
    for (int64_t i = 0; i < n; i++) gsum[grp[i]] += exp(fr_tensor_get_f64(x, i) - gmax[grp[i]]);
    for (int64_t i = 0; i < n; i++) {
        double v = fr_tensor_get_f64(x, i) - gmax[grp[i]];
        ref[i] = lg ? v - log(gsum[grp[i]]) : exp(v) / gsum[grp[i]];
    }
    free(grp);
    free(gmax);
    free(gsum);
}

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

static void run_case(fr_rng *rng, fr_dtype dt, const char *op, int64_t opset, const shp *s,
                     int axis, int set_axis, double scale, double tol)
{
    fr_tensor *x = tt_randn(rng, dt, s->r, s->d, 0.0, scale);
    int64_t n = fr_tensor_numel(x);
    tnode t;
    tn_init(&t, op, opset, 1, &x, 0, 1);
    if (set_axis) TN_ATTR(&t, int, "axis", axis);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    tt_assert_shape(y, dt, s->r, s->d);
    int legacy = opset >= 1 && opset < 13; /* 0: no opset import, the current rules */
    int a = set_axis ? (axis < 0 ? axis + s->r : axis) : (legacy ? 1 : s->r - 1);
    double *ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    ref_softmax(x, a, legacy, strcmp(op, "LogSoftmax") == 0, ref);
    double err = tt_rel_err(y, ref, n);
    CU_ASSERT(err <= tol);
    if (!(err <= tol))
        fprintf(stderr, "\n  %s opset %lld rank %d axis %d%s: rel err %g\n", op, (long long)opset,
                s->r, axis, set_axis ? "" : " (default)", err);
    free(ref);
    tn_free(&t);
    fr_tensor_free(x);
}

static const shp shapes[] = {
    {3, {2, 3, 4}}, {1, {5}}, {3, {3, 1, 4}}, {3, {2, 0, 3}}, {4, {4, 5, 6, 3}}, {2, {8, 1000}},
    {2, {7, 1}},
};

static void test_softmax_axes(void)
{
    fr_rng r = fr_test_rng("softmax_axes");
    const char *ops[2] = {"Softmax", "LogSoftmax"};
    const int64_t opsets[3] = {11, 13, 1};
    int runs = 0;
    for (int oi = 0; oi < 2; oi++)
        for (int po = 0; po < 3; po++)
            for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]); si++) {
                const shp *s = &shapes[si];
                if (opsets[po] >= 13 || s->r >= 2) { /* the legacy default axis is 1 */
                    run_case(&r, FR_F32, ops[oi], opsets[po], s, 0, 0, 3.0, 1e-6);
                    runs++;
                }
                for (int axis = -s->r; axis < s->r; axis++) {
                    if (opsets[po] == 1 && axis < 0) continue; /* negative axes from opset 11 */
                    run_case(&r, FR_F32, ops[oi], opsets[po], s, axis, 1, 3.0, 1e-6);
                    runs++;
                }
            }
    CU_ASSERT(runs > 100);
    /* float64, and an opset-0 graph (no import: the current convention) */
    run_case(&r, FR_F64, "Softmax", 13, &shapes[0], 1, 1, 3.0, 1e-14);
    run_case(&r, FR_F64, "LogSoftmax", 11, &shapes[4], -2, 1, 3.0, 1e-14);
    run_case(&r, FR_F32, "Softmax", 0, &shapes[4], 0, 0, 3.0, 1e-6);
}

/* Large logits: the max shift keeps exp() finite. */
static void test_softmax_large(void)
{
    fr_rng r = fr_test_rng("softmax_large");
    run_case(&r, FR_F32, "Softmax", 13, &shapes[0], -1, 1, 400.0, 1e-6);
    run_case(&r, FR_F32, "LogSoftmax", 13, &shapes[0], -1, 1, 400.0, 1e-6);
    run_case(&r, FR_F32, "Softmax", 11, &shapes[4], 2, 1, 400.0, 1e-6);
    run_case(&r, FR_F32, "LogSoftmax", 11, &shapes[4], 1, 1, 400.0, 1e-6);
    /* all logits far below 0: exp() of the unshifted values underflows to 0 */
    int64_t d[2] = {2, 3};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    for (int i = 0; i < 6; i++) ((float *)x->data)[i] = -1000.0f - (float)(fr_rng_uniform(&r) * 4);
    for (int lg = 0; lg < 2; lg++) {
        tnode t;
        tn_init(&t, lg ? "LogSoftmax" : "Softmax", 13, 1, &x, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        double ref[6];
        ref_softmax(x, 1, 0, lg, ref);
        CU_ASSERT(tt_rel_err(t.out[0], ref, 6) <= 1e-6);
        tn_free(&t);
    }
    fr_tensor_free(x);
}

/* Rows with -inf entries: masked entries get 0 (Softmax) / -inf (LogSoftmax); an all -inf
 * row and a row holding +inf are NaN everywhere, matching onnxruntime 1.32. */
static void test_softmax_inf(void)
{
    int64_t d[2] = {3, 4};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    const float v[12] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                         0.0f, -INFINITY, 1.0f, -INFINITY,
                         INFINITY, 0.0f, 1.0f, 2.0f};
    memcpy(x->data, v, sizeof v);
    for (int lg = 0; lg < 2; lg++)
        for (int legacy = 0; legacy < 2; legacy++) {
            tnode t;
            tn_init(&t, lg ? "LogSoftmax" : "Softmax", legacy ? 11 : 13, 1, &x, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            const float *y = t.out[0]->data;
            for (int j = 0; j < 4; j++) CU_ASSERT(isnan(y[j]));
            for (int j = 8; j < 12; j++) CU_ASSERT(isnan(y[j]));
            double p0 = 1.0 / (1.0 + exp(1.0));
            if (lg) {
                CU_ASSERT(fabs(y[4] - log(p0)) <= 1e-6);
                CU_ASSERT(fabs(y[6] - log(1 - p0)) <= 1e-6);
                CU_ASSERT(isinf(y[5]) && y[5] < 0);
                CU_ASSERT(isinf(y[7]) && y[7] < 0);
            } else {
                CU_ASSERT(fabs(y[4] - p0) <= 1e-7);
                CU_ASSERT(fabs(y[6] - (1 - p0)) <= 1e-7);
                CU_ASSERT_EQUAL(y[5], 0.0f);
                CU_ASSERT_EQUAL(y[7], 0.0f);
            }
            tn_free(&t);
        }
    fr_tensor_free(x);
}

static void test_softmax_errors(void)
{
    int64_t d[2] = {2, 3};
    tnode t;
    fr_tensor *xi = tt_new(FR_I32, 2, d), *xh = tt_new(FR_F16, 2, d), *x = tt_new(FR_F32, 2, d);
    fr_tensor *s = tt_new(FR_F32, 0, NULL);
    tn_init(&t, "Softmax", 13, 1, &xi, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("int32");
    tn_free(&t);
    tn_init(&t, "LogSoftmax", 13, 1, &xh, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("float16");
    tn_free(&t);
    tn_init(&t, "Softmax", 11, 1, &x, 0, 1);
    TN_ATTR(&t, int, "axis", 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("out of range");
    tn_free(&t);
    tn_init(&t, "Softmax", 13, 1, &x, 0, 1);
    TN_ATTR(&t, int, "axis", -3);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("out of range");
    tn_free(&t);
    tn_init(&t, "Softmax", 13, 1, &s, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank");
    tn_free(&t);
    fr_tensor_free(xi);
    fr_tensor_free(xh);
    fr_tensor_free(x);
    fr_tensor_free(s);
}

static CU_TestInfo softmax_tests[] = {
    {"Softmax/LogSoftmax all axes, both opset conventions", test_softmax_axes},
    {"large logits stay finite", test_softmax_large},
    {"-inf and +inf entries", test_softmax_inf},
    {"errors", test_softmax_errors},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"ops_softmax", NULL, NULL, NULL, NULL, softmax_tests},
                             CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
