/* Reductions (ops/reduce.c) against references written here (double precision, one pass
 * over the input mapping each element to its output), on fresh random inputs: every
 * Reduce* op over single, multiple, negative, repeated, all and no axes, keepdims 0/1,
 * axes as attribute (old opsets) and as constant input (new opsets), noop_with_empty_axes,
 * rank-0, size-1 and empty dims; integer Sum/Mean/Max/Min/Prod with wrapping; ArgMax/ArgMin
 * with ties (select_last_index), NaN and negative axes; and the errors.
 * Tolerance: float32 results within 1e-6 relative L2 of the double reference (non-finite
 * values must match exactly); Max/Min, integer results and indices exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* ---- the reference ---- */

typedef enum rk { K_SUM, K_MEAN, K_MAX, K_MIN, K_PROD, K_SUMSQ, K_L1, K_L2, K_LSE } rk;
static const struct { const char *op; rk k; int new_opset; } ops[] = {
    {"ReduceSum", K_SUM, 13},         {"ReduceMean", K_MEAN, 18}, {"ReduceMax", K_MAX, 18},
    {"ReduceMin", K_MIN, 18},         {"ReduceProd", K_PROD, 18}, {"ReduceSumSquare", K_SUMSQ, 18},
    {"ReduceL1", K_L1, 18},           {"ReduceL2", K_L2, 18},     {"ReduceLogSumExp", K_LSE, 18},
};
#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

/* red[k]: axis k is reduced. Fills ref (keepdims layout, n_out entries) in double. */
static void ref_reduce(rk k, const fr_tensor *x, const int *red, double *ref, int64_t n_out)
{
    int r = x->rank;
    int64_t n = fr_tensor_numel(x);
    int64_t *cnt = calloc((size_t)(n_out ? n_out : 1), sizeof(int64_t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cnt);
    for (int64_t o = 0; o < n_out; o++)
        ref[o] = k == K_PROD ? 1.0 : k == K_MAX ? -INFINITY : k == K_MIN ? INFINITY : 0.0;
    for (int64_t i = 0; i < n; i++) {
        /* output index: the input coordinates with reduced ones set to 0 */
        int64_t rem = i, o = 0, mul = 1;
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % x->dims[d];
            rem /= x->dims[d];
            if (!red[d]) {
                o += c * mul;
                mul *= x->dims[d];
            }
        }
        double v = fr_tensor_get_f64(x, i);
        cnt[o]++;
        switch (k) {
        case K_SUM: case K_MEAN: ref[o] += v; break;
        case K_MAX: ref[o] = isnan(v) || isnan(ref[o]) ? NAN : fmax(ref[o], v); break;
        case K_MIN: ref[o] = isnan(v) || isnan(ref[o]) ? NAN : fmin(ref[o], v); break;
        case K_PROD: ref[o] *= v; break;
        case K_SUMSQ: case K_L2: ref[o] += v * v; break;
        case K_L1: ref[o] += fabs(v); break;
        case K_LSE: ref[o] += exp(v); break;
        }
    }
    for (int64_t o = 0; o < n_out; o++) {
        if (k == K_MEAN) ref[o] = cnt[o] ? ref[o] / (double)cnt[o] : NAN;
        if (k == K_L2) ref[o] = sqrt(ref[o]);
        if (k == K_LSE) ref[o] = log(ref[o]);
        ref[o] = (double)(float)ref[o]; /* the float32 rounding of the exact result */
    }
    free(cnt);
}

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

static const shp shapes[] = {
    {3, {2, 3, 4}}, {1, {5}},    {3, {3, 1, 4}}, {3, {2, 0, 3}},
    {1, {1}},       {0, {0}},    {4, {4, 5, 6, 3}}, {2, {64, 130}},
};

/* axes lists; n = -1 means "no axes given" */
static const struct { int n; int64_t a[4]; } axes_sets[] = {
    {-1, {0}}, {0, {0}}, {1, {0}}, {1, {-1}}, {1, {1}}, {2, {0, 2}}, {2, {-1, -3}},
    {2, {1, 1}}, {3, {0, 1, 2}}, {4, {3, 1, 0, 2}}, {2, {-2, 0}},
};

static int axes_valid(int rank, int n, const int64_t *a)
{
    if (n > 0 && rank == 0) return 0;
    for (int i = 0; i < n; i++)
        if (a[i] < -rank || a[i] >= rank) return 0;
    return 1;
}

/* One Reduce op run and checked. form 0: axes attribute (old opset); form 1: axes input. */
static void run_reduce(fr_rng *rng, int oi, fr_dtype dt, const shp *s, int ai, int keepdims,
                       int noop, int form, int *runs)
{
    int n_ax = axes_sets[ai].n;
    const int64_t *ax = axes_sets[ai].a;
    if (!axes_valid(s->r, n_ax, ax)) return;
    if (form == 0 && (n_ax == 0 || noop)) return; /* an empty axes attribute is not a thing */
    fr_tensor *x = tt_new(dt, s->r, s->d);
    int64_t n = fr_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        double v = dt == FR_F32 ? 3.0 * (2 * fr_rng_uniform(rng) - 1)
                                : (double)(int64_t)(fr_rng_uniform(rng) * 7) - 3;
        if (ops[oi].k == K_PROD && dt == FR_F32) v = 0.5 + fr_rng_uniform(rng); /* no tiny products */
        if (dt == FR_F32) ((float *)x->data)[i] = (float)v;
        else if (dt == FR_I32) ((int32_t *)x->data)[i] = (int32_t)v;
        else ((int64_t *)x->data)[i] = (int64_t)v;
    }
    fr_tensor *axt = form == 1 && n_ax >= 0 ? tt_ints(FR_I64, n_ax, ax) : NULL;
    fr_tensor *ins[2] = {x, axt};
    tnode t;
    tn_init(&t, ops[oi].op, form == 1 ? ops[oi].new_opset : 11, axt ? 2 : 1, ins, 2u, 1);
    if (form == 0 && n_ax > 0) TN_ATTR(&t, ints, "axes", n_ax, ax);
    if (keepdims != 1 || fr_rng_uniform(rng) < 0.5)
        TN_ATTR(&t, int, "keepdims", keepdims);
    if (noop) TN_ATTR(&t, int, "noop_with_empty_axes", 1);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    /* expected shape */
    int red[8] = {0};
    for (int d = 0; d < s->r; d++) red[d] = n_ax <= 0 ? !noop : 0;
    for (int i = 0; i < n_ax; i++) red[ax[i] < 0 ? ax[i] + s->r : ax[i]] = 1;
    int er = 0;
    int64_t ed[8];
    for (int d = 0; d < s->r; d++)
        if (!red[d]) ed[er++] = s->d[d];
        else if (keepdims) ed[er++] = 1;
    tt_assert_shape(y, dt, er, ed);
    int64_t n_out = fr_tensor_numel(y);
    double *ref = malloc(sizeof(double) * (size_t)(n_out ? n_out : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    if (dt == FR_F32) {
        ref_reduce(ops[oi].k, x, red, ref, n_out);
        double tol = ops[oi].k == K_MAX || ops[oi].k == K_MIN ? 0.0 : 1e-6;
        double err = tt_rel_err(y, ref, n_out); /* non-finite values must match exactly */
        int ok = err <= tol;
        CU_ASSERT(ok);
        if (!ok)
            fprintf(stderr, "\n  %s shape#%d axes#%d keepdims=%d noop=%d form=%d: err %g\n",
                    ops[oi].op, (int)(s - shapes), ai, keepdims, noop, form, err);
    } else {
        /* integers: wrapping sums/products in uint64, narrowed to the type */
        int64_t *iref = calloc((size_t)(n_out ? n_out : 1), sizeof(int64_t));
        int64_t *cnt = calloc((size_t)(n_out ? n_out : 1), sizeof(int64_t));
        CU_ASSERT_PTR_NOT_NULL_FATAL(iref);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cnt);
        rk k = ops[oi].k;
        for (int64_t o = 0; o < n_out; o++)
            iref[o] = k == K_PROD ? 1 : k == K_MAX ? INT64_MIN : k == K_MIN ? INT64_MAX : 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t rem = i, o = 0, mul = 1;
            for (int d = s->r - 1; d >= 0; d--) {
                int64_t c = rem % s->d[d];
                rem /= s->d[d];
                if (!red[d]) {
                    o += c * mul;
                    mul *= s->d[d];
                }
            }
            int64_t v = fr_tensor_get_i64(x, i);
            cnt[o]++;
            if (k == K_SUM || k == K_MEAN) iref[o] = (int64_t)((uint64_t)iref[o] + (uint64_t)v);
            if (k == K_PROD) iref[o] = (int64_t)((uint64_t)iref[o] * (uint64_t)v);
            if (k == K_MAX && v > iref[o]) iref[o] = v;
            if (k == K_MIN && v < iref[o]) iref[o] = v;
        }
        for (int64_t o = 0; o < n_out; o++) {
            int64_t v = iref[o];
            if (dt == FR_I32) {
                if (k == K_MAX && cnt[o] == 0) v = INT32_MIN;
                if (k == K_MIN && cnt[o] == 0) v = INT32_MAX;
                v = (int32_t)(uint32_t)(uint64_t)v;
            }
            if (k == K_MEAN) v = cnt[o] ? v / cnt[o] : 0;
            CU_ASSERT_EQUAL(fr_tensor_get_i64(y, o), v);
        }
        free(iref);
        free(cnt);
    }
    (*runs)++;
    free(ref);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(axt);
}

static void test_reduce_float(void)
{
    fr_rng r = fr_test_rng("reduce_float");
    int runs = 0;
    for (int oi = 0; oi < N_OPS; oi++)
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
            for (int ai = 0; ai < (int)(sizeof axes_sets / sizeof axes_sets[0]); ai++)
                for (int kd = 0; kd < 2; kd++)
                    for (int form = 0; form < 2; form++)
                        for (int noop = 0; noop < 2; noop++)
                            run_reduce(&r, oi, FR_F32, &shapes[s], ai, kd, noop, form, &runs);
    CU_ASSERT(runs > 1500);
}

static void test_reduce_int(void)
{
    fr_rng r = fr_test_rng("reduce_int");
    int runs = 0;
    for (int oi = 0; oi < 5; oi++) /* Sum, Mean, Max, Min, Prod */
        for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
            for (int ai = 0; ai < (int)(sizeof axes_sets / sizeof axes_sets[0]); ai += 2)
                for (int kd = 0; kd < 2; kd++) {
                    run_reduce(&r, oi, FR_I32, &shapes[s], ai, kd, 0, 1, &runs);
                    run_reduce(&r, oi, FR_I64, &shapes[s], ai, kd, 0, 0, &runs);
                }
    CU_ASSERT(runs > 200);
    /* int32 sum wraps */
    int64_t d[1] = {2};
    fr_tensor *x = tt_new(FR_I32, 1, d);
    ((int32_t *)x->data)[0] = INT32_MAX;
    ((int32_t *)x->data)[1] = 5;
    fr_tensor *ins[1] = {x};
    tnode t;
    tn_init(&t, "ReduceSum", 13, 1, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[0], INT32_MIN + 4);
    tn_free(&t);
    fr_tensor_free(x);
}

/* float32 sums of many values accumulate in double: the error stays at the final rounding */
static void test_reduce_accuracy(void)
{
    fr_rng r = fr_test_rng("reduce_accuracy");
    int64_t d[2] = {3, 200000};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    float *xv = x->data;
    for (int64_t i = 0; i < 3 * 200000; i++) xv[i] = (float)(1.0 + 1e-3 * fr_rng_normal(&r));
    const char *names[2] = {"ReduceSum", "ReduceMean"};
    for (int k = 0; k < 2; k++) {
        fr_tensor *ins[1] = {x};
        tnode t;
        tn_init(&t, names[k], 11, 1, ins, 0, 1);
        int64_t ax[1] = {-1};
        TN_ATTR(&t, ints, "axes", 1, ax);
        TN_ATTR(&t, int, "keepdims", 0);
        FR_ASSERT_OK(tn_run(&t));
        for (int row = 0; row < 3; row++) {
            double s = 0;
            for (int64_t i = 0; i < 200000; i++) s += xv[row * 200000 + i];
            if (k == 1) s /= 200000.0;
            double got = ((float *)t.out[0]->data)[row];
            CU_ASSERT(fabs(got - s) <= 6e-8 * fabs(s)); /* one float32 rounding */
        }
        tn_free(&t);
    }
    fr_tensor_free(x);
}

/* Non-finite inputs: Max/Min propagate NaN; LogSumExp of -inf rows is -inf, +inf rows +inf,
 * and large values do not overflow (the max shift). */
static void test_reduce_nonfinite(void)
{
    int64_t d[2] = {4, 3};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    const float v[12] = {-INFINITY, -INFINITY, -INFINITY, 1.0f, INFINITY, 2.0f,
                         1.0f, NAN, 3.0f, 1000.0f, 999.0f, 998.0f};
    memcpy(x->data, v, sizeof v);
    fr_tensor *ins[1] = {x};
    tnode t;
    tn_init(&t, "ReduceLogSumExp", 13, 1, ins, 0, 1);
    int64_t ax[1] = {1};
    TN_ATTR(&t, ints, "axes", 1, ax);
    FR_ASSERT_OK(tn_run(&t));
    const float *y = t.out[0]->data;
    CU_ASSERT(isinf(y[0]) && y[0] < 0);
    CU_ASSERT(isinf(y[1]) && y[1] > 0);
    CU_ASSERT(isnan(y[2]));
    double want = 1000.0 + log(1.0 + exp(-1.0) + exp(-2.0));
    CU_ASSERT(fabs(y[3] - want) <= 1e-6 * want);
    tn_free(&t);
    tn_init(&t, "ReduceMax", 13, 1, ins, 0, 1);
    TN_ATTR(&t, ints, "axes", 1, ax);
    FR_ASSERT_OK(tn_run(&t));
    y = t.out[0]->data;
    CU_ASSERT(isinf(y[0]) && y[0] < 0);
    CU_ASSERT(isinf(y[1]) && y[1] > 0);
    CU_ASSERT(isnan(y[2]));
    CU_ASSERT_EQUAL(y[3], 1000.0f);
    tn_free(&t);
    fr_tensor_free(x);
}

/* ---- ArgMax / ArgMin ---- */

static void test_arg(void)
{
    fr_rng r = fr_test_rng("argmax_argmin");
    static const shp ashapes[] = {{3, {2, 3, 4}}, {1, {7}}, {2, {5, 1}}, {4, {2, 3, 1, 5}},
                                  {2, {0, 3}}, {2, {40, 70}}};
    const fr_dtype dts[3] = {FR_F32, FR_I64, FR_I32};
    int runs = 0;
    for (int si = 0; si < (int)(sizeof ashapes / sizeof ashapes[0]); si++) {
        const shp *s = &ashapes[si];
        for (int axis = -s->r; axis < s->r; axis++)
            for (int mx = 0; mx < 2; mx++)
                for (int kd = 0; kd < 2; kd++)
                    for (int last = 0; last < 2; last++) {
                        fr_dtype dt = dts[runs % 3];
                        fr_tensor *x = tt_new(dt, s->r, s->d);
                        int64_t n = fr_tensor_numel(x);
                        for (int64_t i = 0; i < n; i++) { /* few distinct values: many ties */
                            int v = (int)(fr_rng_uniform(&r) * 4);
                            if (dt == FR_F32) ((float *)x->data)[i] = (float)v - 1.5f;
                            else if (dt == FR_I64) ((int64_t *)x->data)[i] = v - 2;
                            else ((int32_t *)x->data)[i] = v - 2;
                        }
                        fr_tensor *ins[1] = {x};
                        tnode t;
                        tn_init(&t, mx ? "ArgMax" : "ArgMin", 13, 1, ins, 0, 1);
                        TN_ATTR(&t, int, "axis", axis);
                        TN_ATTR(&t, int, "keepdims", kd);
                        TN_ATTR(&t, int, "select_last_index", last);
                        int a = axis < 0 ? axis + s->r : axis;
                        if (s->d[a] == 0) { /* no index to return for the other elements */
                            CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
                            tn_free(&t);
                            fr_tensor_free(x);
                            continue;
                        }
                        FR_ASSERT_OK(tn_run(&t));
                        fr_tensor *y = t.out[0];
                        CU_ASSERT_EQUAL(y->dtype, FR_I64);
                        CU_ASSERT_EQUAL_FATAL(y->rank, kd ? s->r : s->r - 1);
                        for (int d = 0, j = 0; d < s->r; d++) {
                            if (d == a && !kd) continue;
                            CU_ASSERT_EQUAL(y->dims[j], d == a ? 1 : s->d[d]);
                            j++;
                        }
                        int64_t inner = 1, outer = 1, len = s->d[a];
                        for (int d = a + 1; d < s->r; d++) inner *= s->d[d];
                        for (int d = 0; d < a; d++) outer *= s->d[d];
                        for (int64_t o = 0; o < outer; o++)
                            for (int64_t i = 0; i < inner; i++) {
                                int64_t best = 0;
                                for (int64_t k = 1; k < len; k++) {
                                    double v = fr_tensor_get_f64(x, (o * len + k) * inner + i);
                                    double b = fr_tensor_get_f64(x, (o * len + best) * inner + i);
                                    if (mx ? v > b : v < b) best = k;
                                    else if (last && v == b) best = k;
                                }
                                CU_ASSERT_EQUAL(((int64_t *)y->data)[o * inner + i], best);
                            }
                        runs++;
                        tn_free(&t);
                        fr_tensor_free(x);
                    }
    }
    CU_ASSERT(runs > 100);
}

/* NaN counts as the extreme value (numpy): the first NaN, or the last with select_last. */
static void test_arg_nan(void)
{
    int64_t d[1] = {5};
    fr_tensor *x = tt_new(FR_F32, 1, d);
    const float v[5] = {1.0f, NAN, 7.0f, NAN, -3.0f};
    memcpy(x->data, v, sizeof v);
    fr_tensor *ins[1] = {x};
    for (int mx = 0; mx < 2; mx++)
        for (int last = 0; last < 2; last++) {
            tnode t;
            tn_init(&t, mx ? "ArgMax" : "ArgMin", 13, 1, ins, 0, 1);
            TN_ATTR(&t, int, "select_last_index", last);
            FR_ASSERT_OK(tn_run(&t));
            CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[0], last ? 3 : 1);
            tn_free(&t);
        }
    fr_tensor_free(x);
}

/* The axes input: omitted (id -1) reduces everything, int32 axes are accepted, and an
 * omitted input with noop_with_empty_axes=1 copies the input. */
static void test_reduce_axes_input(void)
{
    fr_rng r = fr_test_rng("reduce_axes_input");
    int64_t d[3] = {2, 3, 4}, d1[1] = {1};
    fr_tensor *x = tt_new(FR_F32, 3, d);
    for (int i = 0; i < 24; i++) ((float *)x->data)[i] = (float)fr_rng_normal(&r);
    fr_tensor *ax32 = tt_new(FR_I32, 1, d1);
    ((int32_t *)ax32->data)[0] = -2;
    const float *xv = x->data;
    tnode t;
    /* omitted optional input */
    fr_tensor *ins[2] = {x, NULL};
    tn_init(&t, "ReduceSum", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "keepdims", 0);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(t.out[0]->rank, 0);
    double s = 0;
    for (int i = 0; i < 24; i++) s += xv[i];
    CU_ASSERT(fabs(((float *)t.out[0]->data)[0] - s) <= 1e-6 * (1 + fabs(s)));
    tn_free(&t);
    tn_init(&t, "ReduceMax", 18, 2, ins, 0, 1);
    TN_ATTR(&t, int, "noop_with_empty_axes", 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(t.out[0]->rank, 3);
    CU_ASSERT(memcmp(t.out[0]->data, x->data, 24 * sizeof(float)) == 0);
    tn_free(&t);
    /* int32 axes, negative */
    fr_tensor *ins32[2] = {x, ax32};
    tn_init(&t, "ReduceMean", 18, 2, ins32, 2u, 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL_FATAL(t.out[0]->rank, 3);
    CU_ASSERT_EQUAL(t.out[0]->dims[1], 1);
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 4; c++) {
            double m = (xv[a * 12 + c] + xv[a * 12 + 4 + c] + xv[a * 12 + 8 + c]) / 3.0;
            CU_ASSERT(fabs(((float *)t.out[0]->data)[a * 4 + c] - m) <= 1e-6 * (1 + fabs(m)));
        }
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(ax32);
}

static void test_reduce_errors(void)
{
    int64_t d[2] = {2, 3};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    int64_t ax2[1] = {2}, ax1[1] = {1};
    fr_tensor *axt = tt_ints(FR_I64, 1, ax1);
    tnode t;
    fr_tensor *ins[2] = {x, axt};
    /* axis out of range, attribute form */
    tn_init(&t, "ReduceMean", 13, 1, ins, 0, 1);
    TN_ATTR(&t, ints, "axes", 1, ax2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("out of range");
    tn_free(&t);
    /* axes attribute at an opset where it is an input */
    tn_init(&t, "ReduceMean", 18, 1, ins, 0, 1);
    TN_ATTR(&t, ints, "axes", 1, ax1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("opset 18");
    tn_free(&t);
    /* axes input at an opset where it is an attribute */
    tn_init(&t, "ReduceSum", 12, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("attribute");
    tn_free(&t);
    /* axes input that is not a constant */
    tn_init(&t, "ReduceSum", 13, 2, ins, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    /* keepdims = 2 */
    tn_init(&t, "ReduceMax", 13, 1, ins, 0, 1);
    TN_ATTR(&t, int, "keepdims", 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("keepdims");
    tn_free(&t);
    /* unsupported dtypes */
    fr_tensor *xb = tt_new(FR_BF16, 2, d), *xi = tt_new(FR_I32, 2, d);
    fr_tensor *insb[1] = {xb}, *insi[1] = {xi};
    tn_init(&t, "ReduceSum", 13, 1, insb, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("bfloat16");
    tn_free(&t);
    tn_init(&t, "ReduceSumSquare", 13, 1, insi, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("int32");
    tn_free(&t);
    /* ArgMax over an empty axis, and a bad axis */
    int64_t de[2] = {2, 0};
    fr_tensor *xe = tt_new(FR_F32, 2, de);
    fr_tensor *inse[1] = {xe};
    tn_init(&t, "ArgMax", 13, 1, inse, 0, 1);
    TN_ATTR(&t, int, "axis", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("empty");
    tn_free(&t);
    tn_init(&t, "ArgMin", 13, 1, ins, 0, 1);
    TN_ATTR(&t, int, "axis", -3);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("out of range");
    tn_free(&t);
    fr_tensor *to_free[] = {x, axt, xb, xi, xe};
    for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) fr_tensor_free(to_free[i]);
}

static CU_TestInfo reduce_tests[] = {
    {"Reduce* float32: axes, keepdims, both axes forms, noop", test_reduce_float},
    {"Reduce Sum/Mean/Max/Min/Prod on int32/int64", test_reduce_int},
    {"ReduceSum/Mean accumulate in double", test_reduce_accuracy},
    {"non-finite inputs", test_reduce_nonfinite},
    {"axes input omitted / int32", test_reduce_axes_input},
    {"ArgMax/ArgMin with ties", test_arg},
    {"ArgMax/ArgMin with NaN", test_arg_nan},
    {"errors", test_reduce_errors},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"ops_reduce", NULL, NULL, NULL, NULL, reduce_tests},
                             CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
