/* GPU kernels of the reduce family (ops/cuda/reduce.cu) against the CPU kernels, on fresh
 * random inputs: every Reduce* op over single, multiple, negative, repeated, all and no axes,
 * keepdims 0/1, axes as attribute (old opsets) and as constant input (new opsets),
 * noop_with_empty_axes, rank-0, size-1 and empty dims, float32/float64/int32/int64, and large
 * shapes that take every kernel path (row groups of 32/256 threads, column tiles, split
 * reductions with partials, tiny inner dims, several reduced dims); non-finite inputs;
 * ArgMax/ArgMin with ties, NaN, select_last_index; ReduceGrad of every kind (ties, zeros of
 * Prod, NaN maxima); SumToShape; Dot; CumSum (exclusive, reverse, every axis, constant or
 * graph-input axis, int32/int64 axis, long lines).
 * Tolerances: float32 results within 1e-6 relative L2 of the CPU (both accumulate in double
 * and round once; the contract is 1e-5), float64 1e-12; Max/Min, integer results, indices
 * and non-finite values exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

#define TOL_F32 1e-6
#define TOL_F64 1e-12

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? TOL_F64 : TOL_F32; }

static const char *shape_s(int r, const int64_t *d, char *buf, size_t n) { return fr_shape_str(r, d, buf, n); }

/* ---- Reduce* ---- */

typedef enum rk { K_SUM, K_MEAN, K_MAX, K_MIN, K_PROD, K_SUMSQ, K_L1, K_L2, K_LSE } rk;
static const struct {
    const char *op;
    rk k;
    int new_opset;
} ops[] = {
    {"ReduceSum", K_SUM, 13},         {"ReduceMean", K_MEAN, 18}, {"ReduceMax", K_MAX, 18},
    {"ReduceMin", K_MIN, 18},         {"ReduceProd", K_PROD, 18}, {"ReduceSumSquare", K_SUMSQ, 18},
    {"ReduceL1", K_L1, 18},           {"ReduceL2", K_L2, 18},     {"ReduceLogSumExp", K_LSE, 18},
};
#define N_OPS ((int)(sizeof ops / sizeof ops[0]))

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

typedef struct axset {
    int n; /* -1: no axes given */
    int64_t a[4];
} axset;

static const shp small_shapes[] = {
    {3, {2, 3, 4}}, {1, {5}}, {3, {3, 1, 4}}, {3, {2, 0, 3}}, {1, {1}},
    {0, {0}},       {4, {4, 5, 6, 3}}, {2, {64, 130}}, {3, {33, 1, 65}},
};
#define N_SMALL ((int)(sizeof small_shapes / sizeof small_shapes[0]))

static const axset axes_sets[] = {
    {-1, {0}}, {0, {0}}, {1, {0}}, {1, {-1}}, {1, {1}}, {2, {0, 2}}, {2, {-1, -3}},
    {2, {1, 1}}, {3, {0, 1, 2}}, {4, {3, 1, 0, 2}}, {2, {-2, 0}},
};
#define N_AXES ((int)(sizeof axes_sets / sizeof axes_sets[0]))

static int axes_valid(int rank, const axset *a)
{
    if (a->n > 0 && rank == 0) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->a[i] < -rank || a->a[i] >= rank) return 0;
    return 1;
}

/* input values by op and dtype: products near 1 so they neither overflow nor vanish */
static fr_tensor *reduce_input(fr_rng *r, rk k, fr_dtype dt, int rank, const int64_t *d)
{
    if (dt == FR_I32 || dt == FR_I64) return tt_rand_ints(r, dt, rank, d, -3, 3);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    if (k == K_PROD)
        return n > 1000 ? tt_randn(r, dt, rank, d, 1.0, 0.01) : tt_rand_uniform(r, dt, rank, d, 0.5, 1.5);
    return tt_randn(r, dt, rank, d, 0.0, 2.0);
}

/* One Reduce op on x. form 0: axes attribute (opset 11); form 1: axes input (new opset). */
static void run_reduce_x(int oi, fr_tensor *x, const axset *ax, int keepdims, int noop, int form, int *runs)
{
    if (!axes_valid(x->rank, ax)) return;
    if (form == 0 && (ax->n == 0 || noop)) return; /* no empty axes attribute / noop before */
    fr_tensor *axt = form == 1 && ax->n >= 0 ? tt_ints(FR_I64, ax->n, ax->a) : NULL;
    fr_tensor *ins[2] = {x, axt};
    tnode t;
    const int64_t opset = form == 1 ? ops[oi].new_opset : 11;
    tn_init(&t, ops[oi].op, opset, axt ? 2 : 1, ins, 2u, 1);
    if (form == 0 && ax->n > 0) TN_ATTR(&t, ints, "axes", ax->n, ax->a);
    TN_ATTR(&t, int, "keepdims", keepdims);
    if (noop) TN_ATTR(&t, int, "noop_with_empty_axes", 1);
    FR_ASSERT_OK(tn_run(&t));
    char what[256], sh[96], as[64] = "none";
    if (ax->n >= 0) {
        int p = snprintf(as, sizeof as, "[");
        for (int i = 0; i < ax->n; i++) p += snprintf(as + p, sizeof as - (size_t)p, "%s%lld", i ? "," : "", (long long)ax->a[i]);
        snprintf(as + p, sizeof as - (size_t)p, "]");
    }
    snprintf(what, sizeof what, "%s opset %lld %s x%s axes %s (%s) keepdims=%d noop=%d", ops[oi].op, (long long)opset,
             fr_dtype_name(x->dtype), shape_s(x->rank, x->dims, sh, sizeof sh), as,
             form ? "input" : "attribute", keepdims, noop);
    double tol = ops[oi].k == K_MAX || ops[oi].k == K_MIN ? 0.0 : tol_of(x->dtype);
    gpu_check(&t, tol, what);
    (*runs)++;
    tn_free(&t);
    fr_tensor_free(axt);
}

static void test_reduce_small(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_small");
    int runs = 0;
    for (int oi = 0; oi < N_OPS; oi++)
        for (int s = 0; s < N_SMALL; s++)
            for (int ai = 0; ai < N_AXES; ai++)
                for (int kd = 0; kd < 2; kd++)
                    for (int form = 0; form < 2; form++)
                        for (int noop = 0; noop < 2; noop++) {
                            fr_tensor *x = reduce_input(&r, ops[oi].k, FR_F32, small_shapes[s].r, small_shapes[s].d);
                            run_reduce_x(oi, x, &axes_sets[ai], kd, noop, form, &runs);
                            fr_tensor_free(x);
                        }
    CU_ASSERT(runs > 2000);
}

static void test_reduce_f64_int(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_f64_int");
    int runs = 0;
    for (int oi = 0; oi < N_OPS; oi++)
        for (int s = 0; s < N_SMALL; s++)
            for (int ai = 0; ai < N_AXES; ai += 2) {
                fr_tensor *x = reduce_input(&r, ops[oi].k, FR_F64, small_shapes[s].r, small_shapes[s].d);
                run_reduce_x(oi, x, &axes_sets[ai], ai % 4 == 0, 0, 1, &runs);
                fr_tensor_free(x);
                if (oi > 4) continue; /* integers: Sum, Mean, Max, Min, Prod */
                for (int di = 0; di < 2; di++) {
                    fr_dtype dt = di ? FR_I64 : FR_I32;
                    x = reduce_input(&r, ops[oi].k, dt, small_shapes[s].r, small_shapes[s].d);
                    run_reduce_x(oi, x, &axes_sets[ai], (ai / 2) % 2, ai == 2, 1, &runs);
                    run_reduce_x(oi, x, &axes_sets[ai], 1, 0, 0, &runs);
                    fr_tensor_free(x);
                }
            }
    CU_ASSERT(runs > 400);
    /* integer wrapping: int32 sums wrap modulo 2^32, products wrap */
    int64_t d[1] = {3};
    fr_tensor *x = tt_new(FR_I32, 1, d);
    ((int32_t *)x->data)[0] = INT32_MAX;
    ((int32_t *)x->data)[1] = 5;
    ((int32_t *)x->data)[2] = INT32_MAX;
    for (int oi = 0; oi < 5; oi++) {
        axset all = {-1, {0}};
        run_reduce_x(oi, x, &all, 0, 0, 1, &runs);
    }
    fr_tensor_free(x);
}

/* Shapes large enough for every kernel path, and the axes that exercise them. */
static void test_reduce_large(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_large");
    static const struct {
        shp s;
        axset ax[3];
        int nax;
    } cases[] = {
        {{2, {1000, 1000}}, {{1, {1}}, {1, {0}}, {-1, {0}}}, 3},      /* rows, columns, all */
        {{2, {3, 200000}}, {{1, {1}}, {1, {0}}, {0, {0}}}, 2},        /* few long rows: split */
        {{2, {200000, 3}}, {{1, {0}}, {1, {1}}, {0, {0}}}, 2},        /* tiny inner dim, split */
        {{3, {7, 333, 129}}, {{1, {1}}, {2, {0, 2}}, {1, {-1}}}, 3},  /* middle axis, two reduced */
        {{1, {1048583}}, {{-1, {0}}, {0, {0}}, {0, {0}}}, 1},         /* one big sum */
        {{3, {2, 50000, 2}}, {{1, {1}}, {2, {0, 2}}, {0, {0}}}, 2},
        {{4, {16, 8, 64, 33}}, {{2, {1, 3}}, {2, {0, 2}}, {3, {0, 1, 3}}}, 3},
        {{2, {100000, 37}}, {{1, {1}}, {1, {0}}, {0, {0}}}, 2},       /* many short rows: warp groups */
    };
    int runs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int oi = 0; oi < N_OPS; oi++)
            for (int a = 0; a < cases[c].nax; a++) {
                fr_dtype dt = (oi + a + (int)c) % 4 == 0 ? FR_F64 : FR_F32;
                fr_tensor *x = reduce_input(&r, ops[oi].k, dt, cases[c].s.r, cases[c].s.d);
                run_reduce_x(oi, x, &cases[c].ax[a], (oi + a) % 2, 0, (oi + a) % 3 != 0, &runs);
                fr_tensor_free(x);
                if (oi == K_SUM || oi == K_MAX || oi == K_MEAN) { /* integers on the big paths too */
                    fr_dtype it = (a + (int)c) % 2 ? FR_I64 : FR_I32;
                    x = reduce_input(&r, ops[oi].k, it, cases[c].s.r, cases[c].s.d);
                    run_reduce_x(oi, x, &cases[c].ax[a], 1, 0, 1, &runs);
                    fr_tensor_free(x);
                }
            }
    CU_ASSERT(runs > 150);
}

/* -inf / +inf / NaN rows: Max/Min propagate NaN, LogSumExp's shift, sums of infinities */
static void test_reduce_nonfinite(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_nonfinite");
    int64_t d[2] = {6, 3};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    const float v[18] = {-INFINITY, -INFINITY, -INFINITY, 1.0f, INFINITY, 2.0f, 1.0f, NAN, 3.0f,
                         1000.0f,   999.0f,    998.0f,    -INFINITY, 0.5f, 0.25f, INFINITY, INFINITY, -1.0f};
    memcpy(x->data, v, sizeof v);
    int runs = 0;
    for (int oi = 0; oi < N_OPS; oi++) {
        axset a1 = {1, {1}}, a0 = {1, {0}};
        run_reduce_x(oi, x, &a1, 1, 0, 0, &runs);
        run_reduce_x(oi, x, &a0, 0, 0, 1, &runs);
    }
    fr_tensor_free(x);
    /* a large tensor with a few non-finite values spread over it (products near 1: a
     * product that underflows to 0 before or after meeting an inf depends on the order) */
    int64_t db[2] = {300, 5000};
    for (int oi = 0; oi < N_OPS; oi++) {
        x = tt_randn(&r, FR_F32, 2, db, ops[oi].k == K_PROD ? 1.0 : 0.0, ops[oi].k == K_PROD ? 0.01 : 1.0);
        float *xv = x->data;
        xv[17] = NAN;
        xv[5000 * 10 + 3] = INFINITY;
        xv[5000 * 20 + 4999] = -INFINITY;
        for (int64_t i = 5000 * 30; i < 5000 * 31; i++) xv[i] = -INFINITY;
        axset a1 = {1, {1}}, a0 = {1, {0}};
        run_reduce_x(oi, x, &a1, 0, 0, 1, &runs);
        run_reduce_x(oi, x, &a0, 0, 0, 1, &runs);
        fr_tensor_free(x);
    }
}

/* the axes input omitted (node input -1), int32 axes, noop with no axes input */
static void test_reduce_axes_input(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_axes_input");
    int64_t d[3] = {20, 30, 40}, d1[1] = {1};
    fr_tensor *x = tt_randn(&r, FR_F32, 3, d, 0.0, 1.0);
    fr_tensor *ax32 = tt_new(FR_I32, 1, d1);
    ((int32_t *)ax32->data)[0] = -2;
    tnode t;
    fr_tensor *ins[2] = {x, NULL};
    tn_init(&t, "ReduceSum", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "keepdims", 0);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, TOL_F32, "ReduceSum opset 13, omitted axes input");
    tn_free(&t);
    tn_init(&t, "ReduceMax", 18, 2, ins, 0, 1);
    TN_ATTR(&t, int, "noop_with_empty_axes", 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0.0, "ReduceMax opset 18, omitted axes input, noop_with_empty_axes=1");
    tn_free(&t);
    fr_tensor *ins32[2] = {x, ax32};
    tn_init(&t, "ReduceMean", 18, 2, ins32, 2u, 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, TOL_F32, "ReduceMean opset 18, int32 axes [-2]");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(ax32);
}

/* ---- ArgMax / ArgMin ---- */

static void run_arg(fr_tensor *x, int mx, int axis, int kd, int last, const char *note)
{
    fr_tensor *ins[1] = {x};
    tnode t;
    tn_init(&t, mx ? "ArgMax" : "ArgMin", 13, 1, ins, 0, 1);
    TN_ATTR(&t, int, "axis", axis);
    TN_ATTR(&t, int, "keepdims", kd);
    TN_ATTR(&t, int, "select_last_index", last);
    FR_ASSERT_OK(tn_run(&t));
    char what[256], sh[96];
    snprintf(what, sizeof what, "%s %s x%s axis %d keepdims=%d select_last_index=%d %s", mx ? "ArgMax" : "ArgMin",
             fr_dtype_name(x->dtype), shape_s(x->rank, x->dims, sh, sizeof sh), axis, kd, last, note);
    gpu_check(&t, 0.0, what);
    tn_free(&t);
}

static void test_arg(void)
{
    fr_rng r = fr_test_rng("gpu_argmax_argmin");
    static const shp shapes[] = {{3, {2, 3, 4}}, {1, {7}}, {2, {5, 1}}, {4, {2, 3, 1, 5}}, {2, {0, 3}},
                                 {2, {40, 70}},  {2, {1000, 1000}}, {2, {3, 200000}}, {2, {200000, 3}},
                                 {3, {4, 100, 257}}};
    const fr_dtype dts[4] = {FR_F32, FR_I64, FR_I32, FR_F64};
    int runs = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shp *s = &shapes[si];
        int64_t n = 1;
        for (int k = 0; k < s->r; k++) n *= s->d[k];
        for (int axis = -s->r; axis < s->r; axis++) {
            int a = axis < 0 ? axis + s->r : axis;
            if (s->d[a] == 0) continue; /* an error on the CPU */
            if (n > 100000 && axis < 0) continue;
            for (int v = 0; v < 4; v++) {
                fr_dtype dt = dts[(v + runs) % 4];
                /* few distinct values (many ties), or continuous values */
                fr_tensor *x = v < 2 ? tt_rand_ints(&r, dt, s->r, s->d, -2, 1) : tt_randn(&r, dt, s->r, s->d, 0, 1);
                if (v == 3 && (dt == FR_F32 || dt == FR_F64) && n > 0) /* a few NaN */
                    for (int q = 0; q < 3; q++) tt_set(x, tt_rand_int(&r, 0, n - 1), NAN);
                run_arg(x, v % 2, axis, (v + axis) % 2 != 0, v / 2, v < 2 ? "(ties)" : v == 3 ? "(NaN)" : "");
                run_arg(x, v % 2 == 0, axis, 1, 1 - v / 2, v < 2 ? "(ties)" : v == 3 ? "(NaN)" : "");
                runs += 2;
                fr_tensor_free(x);
            }
        }
    }
    CU_ASSERT(runs > 100);
    /* NaN is the extreme: first / last NaN */
    int64_t d[1] = {5};
    fr_tensor *x = tt_new(FR_F32, 1, d);
    const float v[5] = {1.0f, NAN, 7.0f, NAN, -3.0f};
    memcpy(x->data, v, sizeof v);
    for (int mx = 0; mx < 2; mx++)
        for (int last = 0; last < 2; last++) run_arg(x, mx, 0, 1, last, "(NaN at 1 and 3)");
    fr_tensor_free(x);
}

/* ---- ReduceGrad ---- */

static const char *const rg_kind[] = {"Sum", "Mean", "Max", "Min", "Prod", "SumSquare", "L1", "L2", "LogSumExp"};

static int rg_inputs(rk k)
{
    switch (k) {
    case K_SUM: case K_MEAN: return 1;
    case K_SUMSQ: case K_L1: case K_PROD: return 2;
    default: return 3;
    }
}

/* forward on the CPU (for y), then ReduceGrad(dy, x, y) on CPU and GPU */
static void run_rg(fr_rng *r, int oi, fr_dtype dt, const shp *s, const axset *ax, int keepdims, int mode)
{
    if (!axes_valid(s->r, ax)) return;
    int64_t n = 1;
    for (int k = 0; k < s->r; k++) n *= s->d[k];
    fr_tensor *x;
    rk kind = ops[oi].k;
    if (kind == K_MAX || kind == K_MIN || (kind == K_PROD && n <= 5000) || (kind == K_L1 && mode == 1))
        x = tt_rand_ints(r, dt, s->r, s->d, -2, 2); /* ties, zeros */
    else if (kind == K_PROD)
        x = tt_randn(r, dt, s->r, s->d, 1.0, 0.01);
    else
        x = tt_randn(r, dt, s->r, s->d, 0.0, 1.5);
    if (mode == 2 && n > 0) /* NaN maxima: their NaN elements take dy */
        for (int q = 0; q < 3; q++) tt_set(x, tt_rand_int(r, 0, n - 1), NAN);
    /* forward (axes as an input, noop when the list is empty) */
    fr_tensor *axt = ax->n >= 0 ? tt_ints(FR_I64, ax->n, ax->a) : NULL;
    fr_tensor *fins[2] = {x, axt};
    tnode f;
    tn_init(&f, ops[oi].op, 18, axt ? 2 : 1, fins, 2u, 1);
    TN_ATTR(&f, int, "keepdims", keepdims);
    if (ax->n == 0) TN_ATTR(&f, int, "noop_with_empty_axes", 1);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *y = f.out[0];
    fr_tensor *dy = tt_randn(r, dt, y->rank, y->dims, 0.0, 1.0);
    /* the reduced axes, normalized */
    int red[FR_MAX_RANK] = {0};
    for (int k = 0; k < s->r; k++) red[k] = ax->n < 0;
    for (int i = 0; i < ax->n; i++) red[ax->a[i] < 0 ? ax->a[i] + s->r : ax->a[i]] = 1;
    int64_t axes[FR_MAX_RANK];
    int na = 0;
    for (int k = 0; k < s->r; k++)
        if (red[k]) axes[na++] = k;
    fr_tensor *gins[3] = {dy, x, y};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ReduceGrad", 1, rg_inputs(kind), gins, 0, 1);
    TN_ATTR(&t, string, "kind", rg_kind[oi]);
    TN_ATTR(&t, ints, "axes", na, axes);
    TN_ATTR(&t, int, "keepdims", keepdims);
    TN_ATTR(&t, ints, "shape", s->r, s->d);
    FR_ASSERT_OK(tn_run(&t));
    char what[256], sh[96], as[64];
    int p = snprintf(as, sizeof as, "[");
    for (int i = 0; i < na; i++) p += snprintf(as + p, sizeof as - (size_t)p, "%s%lld", i ? "," : "", (long long)axes[i]);
    snprintf(as + p, sizeof as - (size_t)p, "]");
    snprintf(what, sizeof what, "ReduceGrad kind=%s %s x%s axes %s keepdims=%d%s", rg_kind[oi], fr_dtype_name(dt),
             shape_s(s->r, s->d, sh, sizeof sh), as, keepdims, mode == 2 ? " (NaN in x)" : mode == 1 ? " (zeros)" : "");
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    tn_free(&f);
    fr_tensor_free(x);
    fr_tensor_free(dy);
    fr_tensor_free(axt);
}

static void test_reduce_grad(void)
{
    fr_rng r = fr_test_rng("gpu_reduce_grad");
    static const struct {
        shp s;
        axset ax[4];
        int nax;
    } cases[] = {
        {{3, {2, 3, 4}}, {{1, {1}}, {2, {0, 2}}, {0, {0}}, {-1, {0}}}, 4},
        {{2, {64, 130}}, {{1, {0}}, {1, {1}}, {-1, {0}}, {0, {0}}}, 3},
        {{0, {0}}, {{-1, {0}}, {0, {0}}, {0, {0}}, {0, {0}}}, 2},
        {{3, {2, 0, 3}}, {{1, {1}}, {1, {0}}, {0, {0}}, {0, {0}}}, 2},
        {{3, {7, 333, 129}}, {{1, {1}}, {2, {0, 2}}, {1, {2}}, {0, {0}}}, 3},
        {{2, {1000, 1000}}, {{1, {0}}, {1, {1}}, {-1, {0}}, {0, {0}}}, 3},
        {{2, {3, 200000}}, {{1, {1}}, {1, {0}}, {0, {0}}, {0, {0}}}, 2},
    };
    int runs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int oi = 0; oi < N_OPS; oi++)
            for (int a = 0; a < cases[c].nax; a++) {
                fr_dtype dt = (oi + a) % 3 == 0 ? FR_F64 : FR_F32;
                run_rg(&r, oi, dt, &cases[c].s, &cases[c].ax[a], (oi + a + (int)c) % 2, 0);
                runs++;
            }
    /* NaN maxima, and L1 at zeros */
    for (size_t c = 0; c < 2; c++) {
        run_rg(&r, K_MAX, FR_F32, &cases[c].s, &cases[c].ax[0], 1, 2);
        run_rg(&r, K_MIN, FR_F64, &cases[c].s, &cases[c].ax[1], 0, 2);
        run_rg(&r, K_L1, FR_F32, &cases[c].s, &cases[c].ax[0], 1, 1);
    }
    CU_ASSERT(runs > 100);
}

/* ---- SumToShape, Dot ---- */

static void run_sum_to(fr_rng *r, fr_dtype dt, int rx, const int64_t *dx, int ry, const int64_t *dy)
{
    fr_tensor *x = tt_randn(r, dt, rx, dx, 0.5, 1.0);
    fr_tensor *ins[1] = {x};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SumToShape", 1, 1, ins, 0, 1);
    TN_ATTR(&t, ints, "shape", ry, dy);
    FR_ASSERT_OK(tn_run(&t));
    char what[200], s1[96], s2[96];
    snprintf(what, sizeof what, "SumToShape %s %s -> %s", fr_dtype_name(dt), shape_s(rx, dx, s1, sizeof s1),
             shape_s(ry, dy, s2, sizeof s2));
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    fr_tensor_free(x);
}

static void test_sum_to_shape(void)
{
    fr_rng r = fr_test_rng("gpu_sum_to_shape");
    static const struct {
        int rx;
        int64_t dx[4];
        int ry;
        int64_t dy[4];
    } cases[] = {
        {3, {2, 3, 4}, 1, {4}},           {3, {2, 3, 4}, 3, {1, 3, 1}},   {3, {2, 3, 4}, 0, {0}},
        {3, {4, 1, 5}, 2, {1, 5}},        {2, {3, 4}, 2, {3, 4}},         {3, {2, 0, 4}, 1, {4}},
        {3, {8, 2048, 768}, 1, {768}},    {3, {64, 1024, 8}, 2, {1024, 1}}, {2, {16384, 768}, 2, {1, 768}},
        {4, {4, 12, 128, 128}, 4, {1, 12, 1, 1}}, {2, {100000, 3}, 1, {3}}, {2, {3, 100000}, 2, {3, 1}},
        /* the float32 column-sum path (cols % 4 == 0): a partial last column tile and row block,
           fewer rows than one row step, a single column group, rows over many row blocks */
        {2, {1000, 260}, 1, {260}},       {3, {3, 4, 8}, 1, {8}},         {2, {70001, 4}, 2, {1, 4}},
        {3, {5, 13, 1028}, 3, {1, 1, 1028}}, {2, {64, 128}, 1, {128}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_sum_to(&r, FR_F32, cases[c].rx, cases[c].dx, cases[c].ry, cases[c].dy);
        if (c % 3 == 0) run_sum_to(&r, FR_F64, cases[c].rx, cases[c].dx, cases[c].ry, cases[c].dy);
    }
}

/* The bias gradients of a GPT-NeoX (Pythia-1B) layer at batch 8 x seq 2048: dY [16384, N] summed
 * to [N] for N = 6144 (QKV), 2048 (dense, down), 8192 (up), on zero-mean data like gradients
 * (sums that cancel); within the float32 tolerance of the CPU's double sum, and the same bits
 * on a second run (fixed summation order, no atomics). */
static void test_sum_to_shape_bias_grads(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_sum_to_shape_bias_grads");
    static const struct {
        int rx;
        int64_t dx[3];
        int64_t n;
    } cases[] = {{2, {16384, 6144, 0}, 6144}, {3, {8, 2048, 2048}, 2048}, {2, {16384, 8192, 0}, 8192}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_tensor *x = tt_randn(&r, FR_F32, cases[c].rx, cases[c].dx, 0.0, 1.0);
        fr_tensor *ins[1] = {x};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SumToShape", 1, 1, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", 1, &cases[c].n);
        FR_ASSERT_OK(tn_run(&t));
        char what[160], s1[96];
        snprintf(what, sizeof what, "SumToShape float32 %s -> [%lld] (bias gradient)",
                 shape_s(cases[c].rx, cases[c].dx, s1, sizeof s1), (long long)cases[c].n);
        gpu_check(&t, TOL_F32, what);
        fr_tensor *g1[TN_MAX], *g2[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu(&t, g1));
        FR_ASSERT_OK(tn_run_gpu(&t, g2));
        CU_ASSERT(g1[0]->nbytes == g2[0]->nbytes && memcmp(g1[0]->data, g2[0]->data, g1[0]->nbytes) == 0);
        gpu_free_outputs(&t, g1);
        gpu_free_outputs(&t, g2);
        tn_free(&t);
        fr_tensor_free(x);
    }
}

static void test_dot(void)
{
    fr_rng r = fr_test_rng("gpu_dot");
    static const shp shapes[] = {{0, {0}}, {1, {0}}, {1, {1}}, {1, {1000}}, {2, {333, 77}}, {1, {1048577}},
                                 {3, {64, 128, 257}}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int di = 0; di < 2; di++) {
            fr_dtype dt = di ? FR_F64 : FR_F32;
            fr_tensor *a = tt_randn(&r, dt, shapes[s].r, shapes[s].d, 0.1, 1.0);
            fr_tensor *b = tt_randn(&r, dt, shapes[s].r, shapes[s].d, 0.2, 1.0);
            fr_tensor *ins[2] = {a, b};
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Dot", 1, 2, ins, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            char what[160], sh[96];
            snprintf(what, sizeof what, "Dot %s %s", fr_dtype_name(dt), shape_s(shapes[s].r, shapes[s].d, sh, sizeof sh));
            gpu_check(&t, tol_of(dt), what);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
}

/* ---- CumSum ---- */

static void run_cumsum(fr_tensor *x, int64_t axis, fr_dtype axis_dt, int const_axis, int ex, int rev)
{
    fr_tensor *at = tt_scalar(axis_dt, (double)axis);
    fr_tensor *ins[2] = {x, at};
    tnode t;
    tn_init(&t, "CumSum", 14, 2, ins, const_axis ? 2u : 0u, 1);
    TN_ATTR(&t, int, "exclusive", ex);
    TN_ATTR(&t, int, "reverse", rev);
    FR_ASSERT_OK(tn_run(&t));
    char what[200], sh[96];
    snprintf(what, sizeof what, "CumSum %s x%s axis %lld (%s %s) exclusive=%d reverse=%d", fr_dtype_name(x->dtype),
             shape_s(x->rank, x->dims, sh, sizeof sh), (long long)axis, fr_dtype_name(axis_dt),
             const_axis ? "constant" : "graph input", ex, rev);
    gpu_check(&t, tol_of(x->dtype), what);
    tn_free(&t);
    fr_tensor_free(at);
}

static void test_cumsum(void)
{
    fr_rng r = fr_test_rng("gpu_cumsum");
    static const shp shapes[] = {{3, {3, 4, 5}}, {1, {1}}, {2, {2, 0}}, {1, {300000}}, {2, {4096, 129}},
                                 {2, {129, 4096}}, {2, {8, 2048}}, {3, {5, 1, 700}}};
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_I64, FR_I32};
    int runs = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = 1;
        for (int k = 0; k < shapes[s].r; k++) n *= shapes[s].d[k];
        for (int axis = -shapes[s].r; axis < shapes[s].r; axis++)
            for (int mode = 0; mode < 4; mode++) {
                if (n > 10000 && axis < 0 && mode > 0) continue;
                fr_dtype dt = dts[(mode + axis + 4) % 4];
                fr_tensor *x = dt == FR_I64 || dt == FR_I32 ? tt_rand_ints(&r, dt, shapes[s].r, shapes[s].d, -5, 9)
                                                             : tt_randn(&r, dt, shapes[s].r, shapes[s].d, 0.3, 1.0);
                run_cumsum(x, axis, mode % 2 ? FR_I32 : FR_I64, 1, mode & 1, mode >> 1);
                runs++;
                if (mode == 0 || n < 10000) { /* the axis known only on the device */
                    run_cumsum(x, axis, mode % 2 ? FR_I64 : FR_I32, 0, mode >> 1, mode & 1);
                    runs++;
                }
                fr_tensor_free(x);
            }
    }
    CU_ASSERT(runs > 100);
}

/* An axis input out of range known only on the device: the CPU fails with FR_ERR_SHAPE; the
 * kernel records it in the device error word (ops/cuda/reduce.cu), which fr_cuda_run_node reads
 * after synchronizing: the same status, naming the node. */
static void test_cumsum_bad_axis(void)
{
    fr_rng r = fr_test_rng("gpu_cumsum_bad_axis");
    int64_t d[2] = {3, 4};
    fr_tensor *x = tt_randn(&r, FR_F32, 2, d, 0, 1);
    fr_tensor *at = tt_scalar(FR_I64, 2);
    fr_tensor *ins[2] = {x, at};
    tnode t;
    tn_init(&t, "CumSum", 14, 2, ins, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t.out[0]);
    fr_tensor *g[TN_MAX];
    fr_status st = tn_run_gpu(&t, g);
    if (st != FR_ERR_SHAPE)
        fprintf(stderr, "\n  CumSum axis 2 of a rank-2 input on the GPU: got %s (%s), want FR_ERR_SHAPE\n",
                fr_status_name(st), fr_last_error());
    CU_ASSERT_EQUAL(st, FR_ERR_SHAPE);
    tn_assert_error("on the GPU");
    gpu_free_outputs(&t, g);
    tn_free(&t);
    /* the error word was cleared: the next run is fine */
    fr_tensor *at1 = tt_scalar(FR_I64, 1);
    fr_tensor *ins1[2] = {x, at1};
    tn_init(&t, "CumSum", 14, 2, ins1, 0u, 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, TOL_F32, "CumSum after a device error");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(at);
    fr_tensor_free(at1);
}

static CU_TestInfo tests[] = {
    {"Reduce* float32 small shapes: all axes forms, keepdims, noop", test_reduce_small},
    {"Reduce* float64 and int32/int64", test_reduce_f64_int},
    {"Reduce* large shapes: row/column/split paths", test_reduce_large},
    {"Reduce* non-finite inputs", test_reduce_nonfinite},
    {"Reduce* axes input omitted / int32", test_reduce_axes_input},
    {"ArgMax/ArgMin: ties, NaN, select_last_index", test_arg},
    {"ReduceGrad every kind", test_reduce_grad},
    {"SumToShape", test_sum_to_shape},
    {"SumToShape at the 1B bias-gradient shapes: tolerance, repeatable bits", test_sum_to_shape_bias_grads},
    {"Dot", test_dot},
    {"CumSum", test_cumsum},
    {"CumSum axis out of range on the device", test_cumsum_bad_axis},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_reduce", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
