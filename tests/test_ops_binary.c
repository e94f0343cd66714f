/* Binary / n-ary elementwise ops (ops/binary.c) against references written here, on fresh
 * random inputs, over broadcasting in both directions, rank-0 scalars, size-1 and empty
 * dims: arithmetic on float32/float64/int32/int64, Pow (negative bases, integer and float
 * exponents), Mod (both fmod modes), variadic Max/Min/Sum/Mean, comparisons, logic, Where
 * (3-way broadcast, several dtypes) and Expand.
 * Tolerances: float32 arithmetic within 1e-6 relative of the double reference; float64
 * within 1e-15; Sum/Mean within 1e-6 of the sum of magnitudes; integers, comparisons,
 * logic, Max/Min, Where and Expand exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* Independent numpy broadcasting: the expected output shape. */
static int bshape(int ra, const int64_t *da, int rb, const int64_t *db, int *r, int64_t *d)
{
    *r = ra > rb ? ra : rb;
    for (int k = 0; k < *r; k++) {
        int64_t a = k - (*r - ra) >= 0 ? da[k - (*r - ra)] : 1;
        int64_t b = k - (*r - rb) >= 0 ? db[k - (*r - rb)] : 1;
        if (a != b && a != 1 && b != 1) return 0;
        d[k] = a == 1 ? b : a;
    }
    return 1;
}

/* operand shape pairs: equal, scalar either side, rank-0, row and column broadcasts, both
 * directions, size-1, empty, and big enough for the fast paths */
typedef struct shp {
    int r;
    int64_t d[4];
} shp;
static const struct { shp a, b; } pairs[] = {
    {{0, {0}}, {0, {0}}},
    {{0, {0}}, {2, {3, 4}}},
    {{2, {3, 4}}, {0, {0}}},
    {{1, {5}}, {1, {5}}},
    {{3, {2, 3, 4}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {1, {4}}},
    {{1, {4}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {2, {3, 1}}},
    {{2, {3, 1}}, {2, {1, 4}}},
    {{3, {2, 1, 4}}, {2, {3, 1}}},
    {{1, {1}}, {1, {6}}},
    {{2, {6, 1}}, {1, {1}}},
    {{2, {0, 3}}, {1, {3}}},
    {{2, {2, 0}}, {1, {1}}},
    {{2, {1, 0}}, {2, {4, 1}}},
    {{3, {1, 1, 5}}, {3, {5, 1, 1}}},
    {{2, {64, 129}}, {1, {129}}},
    {{2, {64, 129}}, {2, {64, 1}}},
    {{4, {2, 3, 4, 5}}, {4, {2, 1, 4, 1}}},
};
#define N_PAIRS ((int)(sizeof pairs / sizeof pairs[0]))

static fr_status run2(tnode *t, const char *op, int64_t opset, fr_tensor *a, fr_tensor *b)
{
    fr_tensor *ins[2] = {a, b};
    tn_init(t, op, opset, 2, ins, 0, 1);
    return tn_run(t);
}

/* ---- arithmetic ---- */

static double ref_arith(const char *op, double a, double b)
{
    if (!strcmp(op, "Add")) return a + b;
    if (!strcmp(op, "Sub")) return a - b;
    if (!strcmp(op, "Mul")) return a * b;
    return a / b;
}

static void check_arith_float(fr_dtype dt)
{
    fr_rng r = fr_test_rng(dt == FR_F32 ? "arith_f32" : "arith_f64");
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    double tol = dt == FR_F32 ? 1e-6 : 1e-15;
    for (int k = 0; k < 4; k++) {
        for (int p = 0; p < N_PAIRS; p++) {
            fr_tensor *a = tt_rand_uniform(&r, dt, pairs[p].a.r, pairs[p].a.d, -3, 3);
            fr_tensor *b = tt_rand_uniform(&r, dt, pairs[p].b.r, pairs[p].b.d, -3, 3);
            tnode t;
            FR_ASSERT_OK(run2(&t, ops[k], 14, a, b));
            fr_tensor *y = t.out[0];
            int er;
            int64_t ed[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(a->rank, a->dims, b->rank, b->dims, &er, ed));
            tt_assert_shape(y, dt, er, ed);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                double av = fr_tensor_get_f64(a, tt_bcast_index(a, y, i));
                double bv = fr_tensor_get_f64(b, tt_bcast_index(b, y, i));
                double ref = ref_arith(ops[k], av, bv), got = fr_tensor_get_f64(y, i);
                if (!(fabs(got - ref) <= tol * fabs(ref))) {
                    if (bad++ < 3) fprintf(stderr, "\n  %s pair %d i=%lld: got %.10g want %.10g", ops[k], p, (long long)i, got, ref);
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
}

static void test_arith_f32(void) { check_arith_float(FR_F32); }
static void test_arith_f64(void) { check_arith_float(FR_F64); }

/* int32/int64: exact; division truncates toward zero (reference through double, exact for
 * these magnitudes). */
static void test_arith_int(void)
{
    fr_rng r = fr_test_rng("arith_int");
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    fr_dtype dts[] = {FR_I32, FR_I64};
    for (int di = 0; di < 2; di++) {
        for (int k = 0; k < 4; k++) {
            for (int p = 0; p < N_PAIRS; p++) {
                fr_tensor *a = tt_rand_ints(&r, dts[di], pairs[p].a.r, pairs[p].a.d, -1000, 1000);
                fr_tensor *b = tt_rand_ints(&r, dts[di], pairs[p].b.r, pairs[p].b.d, -50, 50);
                for (int64_t i = 0; i < fr_tensor_numel(b); i++)
                    if (fr_tensor_get_i64(b, i) == 0) tt_set(b, i, 7);
                tnode t;
                FR_ASSERT_OK(run2(&t, ops[k], 14, a, b));
                fr_tensor *y = t.out[0];
                CU_ASSERT_EQUAL(y->dtype, dts[di]);
                int bad = 0;
                for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                    double av = (double)fr_tensor_get_i64(a, tt_bcast_index(a, y, i));
                    double bv = (double)fr_tensor_get_i64(b, tt_bcast_index(b, y, i));
                    double ref = k == 3 ? trunc(av / bv) : ref_arith(ops[k], av, bv);
                    bad += (double)fr_tensor_get_i64(y, i) != ref;
                }
                CU_ASSERT_EQUAL(bad, 0);
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
    /* wrapping at the edges, and INT_MIN / -1 */
    int64_t d1[1] = {3};
    fr_tensor *a = tt_new(FR_I32, 1, d1), *b = tt_new(FR_I32, 1, d1);
    int32_t *av = a->data, *bv = b->data;
    av[0] = INT32_MAX; bv[0] = 1;
    av[1] = INT32_MIN; bv[1] = -1;
    av[2] = -7;        bv[2] = 2;
    tnode t;
    FR_ASSERT_OK(run2(&t, "Add", 14, a, b));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[0], INT32_MIN);
    tn_free(&t);
    FR_ASSERT_OK(run2(&t, "Div", 14, a, b));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[1], INT32_MIN);
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[2], -3);
    tn_free(&t);
    FR_ASSERT_OK(run2(&t, "Mul", 14, a, a));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[0], 1); /* (2^31-1)^2 mod 2^32 */
    tn_free(&t);
    bv[2] = 0; /* integer division by zero is an error, not a crash */
    CU_ASSERT_EQUAL(run2(&t, "Div", 14, a, b), FR_ERR_RANGE);
    tn_assert_error("division by zero");
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- Pow ---- */

static void test_pow(void)
{
    fr_rng r = fr_test_rng("pow");
    fr_dtype edts[] = {FR_F32, FR_I64, FR_I32, FR_F64};
    for (int p = 0; p < N_PAIRS; p++) {
        for (int e = 0; e < 4; e++) {
            fr_tensor *a = tt_rand_uniform(&r, FR_F32, pairs[p].a.r, pairs[p].a.d, -3, 3);
            /* integral exponents: negative bases stay real */
            fr_tensor *b = tt_rand_ints(&r, edts[e], pairs[p].b.r, pairs[p].b.d, -3, 3);
            if (edts[e] == FR_F64 && fr_tensor_numel(b) > 1) tt_set(b, 0, 0.5); /* NaN for a < 0 */
            tnode t;
            FR_ASSERT_OK(run2(&t, "Pow", 15, a, b));
            fr_tensor *y = t.out[0];
            CU_ASSERT_EQUAL(y->dtype, FR_F32);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                double av = fr_tensor_get_f64(a, tt_bcast_index(a, y, i));
                double bv = fr_tensor_get_f64(b, tt_bcast_index(b, y, i));
                double ref = pow(av, bv), got = fr_tensor_get_f64(y, i);
                if (isnan(ref) ? !isnan(got) : !(fabs(got - ref) <= 1e-6 * fabs(ref))) {
                    if (bad++ < 3) fprintf(stderr, "\n  pow(%g, %g) got %.10g want %.10g", av, bv, got, ref);
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
    /* scalar exponents: 2 (the multiply fast path), 3 and 0.5, on negative bases too */
    double exps[] = {2, 3, 0.5, -1};
    int64_t d[2] = {5, 8};
    for (int k = 0; k < 4; k++) {
        fr_tensor *a = tt_rand_uniform(&r, FR_F32, 2, d, -4, 4), *b = tt_new(FR_F32, 0, NULL);
        *(float *)b->data = (float)exps[k];
        tnode t;
        FR_ASSERT_OK(run2(&t, "Pow", 13, a, b));
        int bad = 0;
        for (int i = 0; i < 40; i++) {
            double av = ((float *)a->data)[i], ref = pow(av, exps[k]);
            double got = ((float *)t.out[0]->data)[i];
            bad += isnan(ref) ? !isnan(got) : !(fabs(got - ref) <= 1e-6 * fabs(ref));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(a);
        fr_tensor_free(b);
    }
    /* integer base, integer exponent: exact; negative exponents truncate 1/x^e */
    fr_tensor *a = tt_rand_ints(&r, FR_I64, 2, d, -5, 5);
    fr_tensor *b = tt_rand_ints(&r, FR_I64, 1, d + 1, -2, 9);
    for (int i = 0; i < 40; i++) /* 0 to a negative power is the error case below */
        if (((int64_t *)a->data)[i] == 0) ((int64_t *)a->data)[i] = 2;
    tnode t;
    FR_ASSERT_OK(run2(&t, "Pow", 15, a, b));
    int bad = 0;
    for (int i = 0; i < 40; i++) {
        int64_t av = ((int64_t *)a->data)[i], ev = ((int64_t *)b->data)[i % 8];
        int64_t want = 1;
        if (ev < 0)
            want = av == 1 ? 1 : av == -1 ? ((ev & 1) ? -1 : 1) : 0;
        else
            for (int64_t j = 0; j < ev; j++) want *= av;
        bad += ((int64_t *)t.out[0]->data)[i] != want;
    }
    tn_free(&t);
    CU_ASSERT_EQUAL(bad, 0);
    /* 0 to a negative power is an error; int base with float exponent is unsupported */
    ((int64_t *)a->data)[0] = 0;
    for (int j = 0; j < 8; j++) ((int64_t *)b->data)[j] = -1;
    CU_ASSERT_EQUAL(run2(&t, "Pow", 15, a, b), FR_ERR_RANGE);
    tn_free(&t);
    fr_tensor *bf = tt_new(FR_F32, 0, NULL);
    CU_ASSERT_EQUAL(run2(&t, "Pow", 15, a, bf), FR_ERR_UNSUPPORTED);
    tn_assert_error("int64");
    tn_free(&t);
    fr_tensor_free(bf);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- Mod ---- */

static void test_mod(void)
{
    fr_rng r = fr_test_rng("mod");
    fr_dtype dts[] = {FR_I64, FR_I32, FR_F32, FR_F64};
    for (int di = 0; di < 4; di++) {
        for (int fm = 0; fm <= 1; fm++) {
            int is_float = di >= 2;
            for (int p = 0; p < N_PAIRS; p++) {
                fr_tensor *a = tt_rand_uniform(&r, dts[di], pairs[p].a.r, pairs[p].a.d, -100, 100);
                fr_tensor *b = tt_rand_uniform(&r, dts[di], pairs[p].b.r, pairs[p].b.d, -9, 9);
                for (int64_t i = 0; i < fr_tensor_numel(b); i++)
                    if (fr_tensor_get_f64(b, i) == 0) tt_set(b, i, -4);
                tnode t;
                fr_tensor *ins[2] = {a, b};
                tn_init(&t, "Mod", 13, 2, ins, 0, 1);
                TN_ATTR(&t, int, "fmod", fm);
                fr_status st = tn_run(&t);
                if (is_float && !fm) { /* ONNX: floats need fmod=1 */
                    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
                    tn_assert_error("fmod");
                } else {
                    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
                    fr_tensor *y = t.out[0];
                    int bad = 0;
                    for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                        double av = fr_tensor_get_f64(a, tt_bcast_index(a, y, i));
                        double bv = fr_tensor_get_f64(b, tt_bcast_index(b, y, i));
                        /* fmod: sign of the dividend; Python mod: sign of the divisor */
                        double ref = fm ? fmod(av, bv) : av - bv * floor(av / bv);
                        bad += fr_tensor_get_f64(y, i) != ref;
                    }
                    CU_ASSERT_EQUAL(bad, 0);
                }
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
}

/* ---- variadic Max, Min, Sum, Mean ---- */

static const struct { int n; shp s[4]; } var_cases[] = {
    {1, {{2, {3, 4}}}},
    {1, {{0, {0}}}},
    {2, {{2, {3, 1}}, {1, {4}}}},
    {3, {{2, {3, 1}}, {1, {4}}, {3, {2, 1, 1}}}},
    {4, {{0, {0}}, {1, {5}}, {2, {2, 5}}, {2, {2, 1}}}},
    {3, {{2, {0, 3}}, {1, {3}}, {0, {0}}}},
    {2, {{2, {50, 70}}, {2, {50, 70}}}},
};

static void check_variadic(const char *op, fr_dtype dt)
{
    fr_rng r = fr_test_rng(op);
    for (size_t c = 0; c < sizeof var_cases / sizeof var_cases[0]; c++) {
        int n = var_cases[c].n;
        fr_tensor *ins[4];
        int er = 0;
        int64_t ed[FR_MAX_RANK] = {0};
        for (int k = 0; k < n; k++) {
            ins[k] = tt_rand_uniform(&r, dt, var_cases[c].s[k].r, var_cases[c].s[k].d, -5, 5);
            int64_t prev[FR_MAX_RANK];
            memcpy(prev, ed, sizeof prev);
            CU_ASSERT_FATAL(bshape(er, prev, ins[k]->rank, ins[k]->dims, &er, ed));
        }
        tnode t;
        tn_init(&t, op, 13, n, ins, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, dt, er, ed);
        int bad = 0;
        for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < n; k++) {
                double v = fr_tensor_get_f64(ins[k], tt_bcast_index(ins[k], y, i));
                if (!strcmp(op, "Max")) acc = k ? fmax(acc, v) : v;
                else if (!strcmp(op, "Min")) acc = k ? fmin(acc, v) : v;
                else acc += v;
                mag += fabs(v);
            }
            if (!strcmp(op, "Mean")) {
                acc /= n;
                mag /= n;
            }
            double got = fr_tensor_get_f64(y, i);
            bad += !(fabs(got - acc) <= 1e-6 * mag);
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        for (int k = 0; k < n; k++) fr_tensor_free(ins[k]);
    }
}

static void test_variadic(void)
{
    const char *ops[] = {"Max", "Min", "Sum", "Mean"};
    for (int k = 0; k < 4; k++) {
        check_variadic(ops[k], FR_F32);
        check_variadic(ops[k], FR_F64);
    }
    check_variadic("Max", FR_I64);
    check_variadic("Min", FR_I32);
    check_variadic("Sum", FR_I64);
    /* Max/Min propagate NaN from either side (numpy maximum/minimum) */
    int64_t d[1] = {2};
    fr_tensor *a = tt_new(FR_F32, 1, d), *b = tt_new(FR_F32, 1, d);
    ((float *)a->data)[0] = NAN;
    ((float *)a->data)[1] = 1;
    ((float *)b->data)[0] = 1;
    ((float *)b->data)[1] = NAN;
    for (int k = 0; k < 2; k++) {
        tnode t;
        FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
        CU_ASSERT(isnan(((float *)t.out[0]->data)[0]) && isnan(((float *)t.out[0]->data)[1]));
        tn_free(&t);
    }
    /* Mean has no integer kernel */
    fr_tensor *ai = tt_new(FR_I64, 1, d);
    tnode t;
    tn_init(&t, "Mean", 13, 1, &ai, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_free(&t);
    fr_tensor_free(ai);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- comparisons and logic ---- */

static int ref_cmp(const char *op, double a, double b)
{
    if (!strcmp(op, "Equal")) return a == b;
    if (!strcmp(op, "Less")) return a < b;
    if (!strcmp(op, "LessOrEqual")) return a <= b;
    if (!strcmp(op, "Greater")) return a > b;
    return a >= b;
}

static void test_compare(void)
{
    fr_rng r = fr_test_rng("compare");
    const char *ops[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    fr_dtype dts[] = {FR_F32, FR_F64, FR_I32, FR_I64, FR_BOOL};
    for (int di = 0; di < 5; di++) {
        for (int k = 0; k < 5; k++) {
            if (dts[di] == FR_BOOL && k > 0) continue;
            for (int p = 0; p < N_PAIRS; p++) {
                /* small integer set: plenty of ties */
                fr_tensor *a = tt_rand_ints(&r, dts[di], pairs[p].a.r, pairs[p].a.d, -2, 2);
                fr_tensor *b = tt_rand_ints(&r, dts[di], pairs[p].b.r, pairs[p].b.d, -2, 2);
                tnode t;
                FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
                fr_tensor *y = t.out[0];
                CU_ASSERT_EQUAL(y->dtype, FR_BOOL);
                int bad = 0;
                for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                    double av = fr_tensor_get_f64(a, tt_bcast_index(a, y, i));
                    double bv = fr_tensor_get_f64(b, tt_bcast_index(b, y, i));
                    bad += ((uint8_t *)y->data)[i] != ref_cmp(ops[k], av, bv);
                }
                CU_ASSERT_EQUAL(bad, 0);
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
    /* NaN compares unequal and unordered */
    fr_tensor *a = tt_new(FR_F32, 0, NULL), *b = tt_new(FR_F32, 0, NULL);
    *(float *)a->data = NAN;
    for (int k = 0; k < 5; k++) {
        tnode t;
        FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
        CU_ASSERT_EQUAL(*(uint8_t *)t.out[0]->data, 0);
        tn_free(&t);
    }
    /* Less on bool is not a supported kernel */
    fr_tensor *bb = tt_new(FR_BOOL, 0, NULL);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "Less", 13, bb, bb), FR_ERR_UNSUPPORTED);
    tn_assert_error("bool");
    tn_free(&t);
    fr_tensor_free(bb);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

static void test_logic(void)
{
    fr_rng r = fr_test_rng("logic");
    const char *ops[] = {"And", "Or", "Xor"};
    for (int k = 0; k < 3; k++) {
        for (int p = 0; p < N_PAIRS; p++) {
            fr_tensor *a = tt_rand_ints(&r, FR_BOOL, pairs[p].a.r, pairs[p].a.d, 0, 1);
            fr_tensor *b = tt_rand_ints(&r, FR_BOOL, pairs[p].b.r, pairs[p].b.d, 0, 1);
            tnode t;
            FR_ASSERT_OK(run2(&t, ops[k], 7, a, b));
            fr_tensor *y = t.out[0];
            CU_ASSERT_EQUAL(y->dtype, FR_BOOL);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                int av = ((uint8_t *)a->data)[tt_bcast_index(a, y, i)];
                int bv = ((uint8_t *)b->data)[tt_bcast_index(b, y, i)];
                int want = k == 0 ? (av && bv) : k == 1 ? (av || bv) : (av != bv);
                bad += ((uint8_t *)y->data)[i] != want;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
    int64_t d[1] = {2};
    fr_tensor *f = tt_new(FR_F32, 1, d);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "And", 7, f, f), FR_ERR_UNSUPPORTED);
    tn_assert_error("float32");
    tn_free(&t);
    fr_tensor_free(f);
}

/* ---- Where ---- */

static void test_where(void)
{
    fr_rng r = fr_test_rng("where");
    static const struct { shp c, x, y; } cases[] = {
        {{2, {3, 1}}, {2, {1, 4}}, {0, {0}}},      /* broadcast condition */
        {{1, {4}}, {3, {2, 3, 4}}, {2, {3, 4}}},
        {{3, {2, 3, 4}}, {0, {0}}, {1, {1}}},
        {{0, {0}}, {1, {5}}, {1, {5}}},            /* scalar condition */
        {{2, {0, 3}}, {1, {3}}, {1, {1}}},         /* empty */
        {{2, {40, 33}}, {2, {40, 33}}, {2, {40, 33}}},
    };
    fr_dtype dts[] = {FR_F32, FR_I64, FR_U8, FR_F16, FR_BOOL, FR_F64};
    for (int di = 0; di < 6; di++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fr_tensor *cond = tt_rand_ints(&r, FR_BOOL, cases[c].c.r, cases[c].c.d, 0, 1);
            fr_tensor *x = tt_rand_bits(&r, dts[di], cases[c].x.r, cases[c].x.d);
            fr_tensor *y = tt_rand_bits(&r, dts[di], cases[c].y.r, cases[c].y.d);
            fr_tensor *ins[3] = {cond, x, y};
            tnode t;
            tn_init(&t, "Where", 16, 3, ins, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            fr_tensor *o = t.out[0];
            int er, r2;
            int64_t ed[FR_MAX_RANK], e2[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(cond->rank, cond->dims, x->rank, x->dims, &r2, e2));
            CU_ASSERT_FATAL(bshape(r2, e2, y->rank, y->dims, &er, ed));
            tt_assert_shape(o, dts[di], er, ed);
            size_t es = fr_dtype_size(dts[di]);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(o); i++) {
                int cv = ((uint8_t *)cond->data)[tt_bcast_index(cond, o, i)];
                const fr_tensor *src = cv ? x : y;
                const uint8_t *want = (uint8_t *)src->data + es * (size_t)tt_bcast_index(src, o, i);
                bad += memcmp((uint8_t *)o->data + es * (size_t)i, want, es) != 0;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(cond);
            fr_tensor_free(x);
            fr_tensor_free(y);
        }
    }
    /* condition must be bool; x and y one dtype */
    int64_t d[1] = {3};
    fr_tensor *c = tt_new(FR_F32, 1, d), *x = tt_new(FR_F32, 1, d), *xi = tt_new(FR_I64, 1, d);
    fr_tensor *ins[3] = {c, x, x};
    tnode t;
    tn_init(&t, "Where", 16, 3, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("bool");
    tn_free(&t);
    fr_tensor *cb = tt_new(FR_BOOL, 1, d);
    fr_tensor *ins2[3] = {cb, x, xi};
    tn_init(&t, "Where", 16, 3, ins2, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_free(&t);
    fr_tensor_free(cb);
    fr_tensor_free(c);
    fr_tensor_free(x);
    fr_tensor_free(xi);
}

/* ---- Expand ---- */

static void test_expand(void)
{
    fr_rng r = fr_test_rng("expand");
    static const struct { shp in; int n; int64_t shape[4]; } cases[] = {
        {{2, {3, 1}}, 3, {2, 1, 4}},   /* 1 in the shape keeps the input dim */
        {{2, {2, 3}}, 1, {3}},         /* shape of smaller rank than the input */
        {{1, {4}}, 2, {1, 1}},         /* all-ones shape: rank grows only */
        {{0, {0}}, 2, {2, 3}},         /* scalar input */
        {{2, {2, 3}}, 0, {0}},         /* empty shape: identity */
        {{1, {1}}, 2, {3, 0}},         /* expand to an empty tensor */
        {{3, {1, 4, 1}}, 3, {5, 1, 7}},
    };
    fr_dtype dts[] = {FR_F32, FR_I64, FR_I8, FR_F16, FR_BOOL};
    for (int di = 0; di < 5; di++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fr_tensor *x = tt_rand_bits(&r, dts[di], cases[c].in.r, cases[c].in.d);
            fr_tensor *s = tt_ints(FR_I64, cases[c].n, cases[c].shape);
            fr_tensor *ins[2] = {x, s};
            tnode t;
            tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            fr_tensor *o = t.out[0];
            int er;
            int64_t ed[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(x->rank, x->dims, cases[c].n, cases[c].shape, &er, ed));
            tt_assert_shape(o, dts[di], er, ed);
            size_t es = fr_dtype_size(dts[di]);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(o); i++)
                bad += memcmp((uint8_t *)o->data + es * (size_t)i,
                              (uint8_t *)x->data + es * (size_t)tt_bcast_index(x, o, i), es) != 0;
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(s);
        }
    }
    /* a shape that does not broadcast, a negative dim, a non-constant shape */
    int64_t d[1] = {3}, bad_shape[2] = {2, 4}, neg[1] = {-1};
    fr_tensor *x = tt_new(FR_F32, 1, d), *s = tt_ints(FR_I64, 2, bad_shape);
    fr_tensor *sn = tt_ints(FR_I64, 1, neg);
    fr_tensor *ins[2] = {x, s};
    tnode t;
    tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("broadcast");
    tn_free(&t);
    ins[1] = sn;
    tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("negative");
    tn_free(&t);
    ins[1] = s;
    tn_init(&t, "Expand", 13, 2, ins, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(sn);
}

/* ---- type and shape errors ---- */

static void test_errors(void)
{
    int64_t d3[1] = {3}, d4[1] = {4};
    fr_tensor *f3 = tt_new(FR_F32, 1, d3), *f4 = tt_new(FR_F32, 1, d4), *i3 = tt_new(FR_I64, 1, d3);
    fr_tensor *b3 = tt_new(FR_BOOL, 1, d3), *h3 = tt_new(FR_F16, 1, d3);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "Add", 14, f3, f4), FR_ERR_SHAPE);
    tn_assert_error("[3]");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Mul", 14, f3, i3), FR_ERR_SHAPE);
    tn_assert_error("int64");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Add", 14, b3, b3), FR_ERR_UNSUPPORTED);
    tn_assert_error("bool");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Sub", 14, h3, h3), FR_ERR_UNSUPPORTED);
    tn_assert_error("float16");
    tn_free(&t);
    tn_init(&t, "Sum", 13, 0, NULL, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_free(&t);
    fr_tensor_free(f3);
    fr_tensor_free(f4);
    fr_tensor_free(i3);
    fr_tensor_free(b3);
    fr_tensor_free(h3);
}

static void test_registered(void)
{
    const char *names[] = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum",
                           "Mean", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                           "And", "Or", "Xor", "Where", "Expand"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo binary_tests[] = {
    {"registered", test_registered},
    {"arith_f32", test_arith_f32},
    {"arith_f64", test_arith_f64},
    {"arith_int", test_arith_int},
    {"pow", test_pow},
    {"mod", test_mod},
    {"variadic", test_variadic},
    {"compare", test_compare},
    {"logic", test_logic},
    {"where", test_where},
    {"expand", test_expand},
    {"errors", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_binary", NULL, NULL, NULL, NULL, binary_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
