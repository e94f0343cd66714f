/* Unary elementwise ops (ops/unary.c): math ops against double-precision references on
 * fresh random inputs, IsNaN/IsInf/Not, the full Cast dtype matrix and its rounding and
 * truncation rules, CastLike, Clip (attribute and input forms), Identity and Dropout.
 * Tolerances: float32 results within 1e-6 relative of the double reference (2e-6 for the
 * exp/tanh/erf based ops); float64 within 1e-12 (1e-9 where the textbook reference formula
 * itself cancels); integer, bool and conversion results exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"
#include "graph/fp8_format.h"

static int close_to(double got, double ref, double tol)
{
    if (isnan(ref)) return isnan(got);
    if (isinf(ref)) return got == ref;
    return fabs(got - ref) <= tol * fabs(ref) + 1e-37;
}

/* shapes every elementwise test walks: scalar, size-1, vector, size-1 inner dims, empty,
 * and a matrix */
static const struct { int rank; int64_t dims[4]; } shapes[] = {
    {0, {0}}, {1, {1}}, {1, {7}}, {3, {3, 1, 4}}, {3, {2, 0, 3}}, {2, {17, 33}},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* ---- float math ---- */

static double r_neg(double x) { return -x; }
static double r_abs(double x) { return x < 0 ? -x : x; }
static double r_recip(double x) { return 1.0 / x; }
static double r_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double r_relu(double x) { return x > 0 ? x : 0.0; }
static double r_leaky(double x) { return x >= 0 ? x : (double)0.01f * x; }
static double r_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x)
{
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
static double r_softplus(double x) { return log(1.0 + exp(x)); }
static double r_sign(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
static double r_softsign(double x) { return x / (1.0 + fabs(x)); }

typedef struct math_case {
    const char *op;
    const char *gelu_approx; /* Gelu: attribute value or NULL */
    double (*ref)(double);
    double lo, hi, tol32, tol64;
} math_case;

static const math_case math_cases[] = {
    {"Neg", NULL, r_neg, -5, 5, 0, 0},
    {"Abs", NULL, r_abs, -5, 5, 0, 0},
    {"Exp", NULL, exp, -20, 20, 2e-6, 1e-12},
    {"Log", NULL, log, -1, 10, 1e-6, 1e-12},       /* negatives -> NaN */
    {"Sqrt", NULL, sqrt, -1, 10, 1e-6, 1e-15},     /* negatives -> NaN */
    {"Reciprocal", NULL, r_recip, -3, 3, 1e-6, 1e-15},
    {"Tanh", NULL, tanh, -5, 5, 2e-6, 1e-12},
    {"Erf", NULL, erf, -3, 3, 2e-6, 1e-12},
    {"Sigmoid", NULL, r_sigmoid, -20, 20, 2e-6, 1e-12},
    {"Relu", NULL, r_relu, -5, 5, 0, 0},
    {"LeakyRelu", NULL, r_leaky, -5, 5, 1e-6, 1e-15},
    {"Gelu", NULL, r_gelu, -5, 5, 2e-6, 1e-9},
    {"Gelu", "none", r_gelu, -5, 5, 2e-6, 1e-9},
    {"Gelu", "tanh", r_gelu_tanh, -5, 5, 2e-6, 1e-9},
    {"Softplus", NULL, r_softplus, -15, 15, 2e-6, 1e-9},
    {"Sin", NULL, sin, -10, 10, 1e-6, 1e-12},
    {"Cos", NULL, cos, -10, 10, 1e-6, 1e-12},
    {"Floor", NULL, floor, -5, 5, 0, 0},
    {"Ceil", NULL, ceil, -5, 5, 0, 0},
    {"Sign", NULL, r_sign, -5, 5, 0, 0},
    {"Softsign", NULL, r_softsign, -50, 50, 1e-6, 1e-15},
};

static void check_math(fr_dtype dt)
{
    fr_rng r = fr_test_rng(dt == FR_F32 ? "unary_math_f32" : "unary_math_f64");
    for (size_t c = 0; c < sizeof math_cases / sizeof math_cases[0]; c++) {
        const math_case *mc = &math_cases[c];
        double tol = dt == FR_F32 ? mc->tol32 : mc->tol64;
        for (int s = 0; s < N_SHAPES; s++) {
            fr_tensor *x = tt_rand_uniform(&r, dt, shapes[s].rank, shapes[s].dims, mc->lo, mc->hi);
            int64_t n = fr_tensor_numel(x);
            if (n > 2) { /* exact zero: Log -> -inf, Reciprocal -> inf, Sign -> 0 */
                if (dt == FR_F32) ((float *)x->data)[1] = 0.0f;
                else ((double *)x->data)[1] = 0.0;
            }
            tnode t;
            tn_init(&t, mc->op, 20, 1, &x, 0, 1);
            if (mc->gelu_approx)
                TN_ATTR(&t, string, "approximate", mc->gelu_approx);
            FR_ASSERT_OK(tn_run(&t));
            fr_tensor *y = t.out[0];
            tt_assert_shape(y, dt, x->rank, x->dims);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double xv = fr_tensor_get_f64(x, i), yv = fr_tensor_get_f64(y, i);
                double ref = mc->ref(xv);
                if (!close_to(yv, ref, tol)) {
                    if (bad++ < 3)
                        fprintf(stderr, "\n  %s(%s) x=%.9g got %.12g want %.12g", mc->op,
                                fr_dtype_name(dt), xv, yv, ref);
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(x);
        }
    }
}

static void test_math_f32(void) { check_math(FR_F32); }
static void test_math_f64(void) { check_math(FR_F64); }

/* Log/Sqrt of a negative number is NaN (numpy), Relu/Neg keep NaN, Sqrt(-0) = -0. */
static void test_math_specials(void)
{
    int64_t d[1] = {5};
    fr_tensor *x = tt_new(FR_F32, 1, d);
    float *xv = x->data;
    xv[0] = -1.0f;
    xv[1] = NAN;
    xv[2] = -0.0f;
    xv[3] = INFINITY;
    xv[4] = -INFINITY;
    const char *ops[] = {"Log", "Sqrt", "Relu", "Neg", "Exp", "Sigmoid", "Tanh"};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        tnode t;
        tn_init(&t, ops[k], 17, 1, &x, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        const float *y = t.out[0]->data;
        CU_ASSERT(isnan(y[1])); /* NaN in, NaN out, for every op */
        if (!strcmp(ops[k], "Log")) {
            CU_ASSERT(isnan(y[0]));
            CU_ASSERT(isinf(y[2]) && y[2] < 0);
            CU_ASSERT(y[3] == INFINITY);
            CU_ASSERT(isnan(y[4]));
        } else if (!strcmp(ops[k], "Sqrt")) {
            CU_ASSERT(isnan(y[0]));
            CU_ASSERT(y[2] == 0.0f && signbit(y[2]));
            CU_ASSERT(isnan(y[4]));
        } else if (!strcmp(ops[k], "Relu")) {
            CU_ASSERT(y[0] == 0.0f && y[3] == INFINITY && y[4] == 0.0f);
        } else if (!strcmp(ops[k], "Exp")) {
            CU_ASSERT(y[3] == INFINITY && y[4] == 0.0f);
        } else if (!strcmp(ops[k], "Sigmoid")) {
            CU_ASSERT(y[3] == 1.0f && y[4] == 0.0f);
        } else if (!strcmp(ops[k], "Tanh")) {
            CU_ASSERT(y[3] == 1.0f && y[4] == -1.0f);
        }
        tn_free(&t);
    }
    fr_tensor_free(x);
}

static void test_leaky_alpha(void)
{
    fr_rng r = fr_test_rng("leaky_alpha");
    int64_t d[2] = {4, 9};
    fr_tensor *x = tt_rand_uniform(&r, FR_F32, 2, d, -4, 4);
    float alpha = (float)(0.05 + 0.5 * fr_rng_uniform(&r));
    tnode t;
    tn_init(&t, "LeakyRelu", 16, 1, &x, 0, 1);
    TN_ATTR(&t, float, "alpha", alpha);
    FR_ASSERT_OK(tn_run(&t));
    int bad = 0;
    for (int64_t i = 0; i < 36; i++) {
        double xv = ((float *)x->data)[i];
        double ref = xv >= 0 ? xv : (double)alpha * xv;
        bad += !close_to(((float *)t.out[0]->data)[i], ref, 1e-6);
    }
    CU_ASSERT_EQUAL(bad, 0);
    tn_free(&t);
    fr_tensor_free(x);
}

/* int32/int64 Neg, Abs, Relu, Sign: exact, with INT_MIN wrapping as numpy does. */
static void test_int_unary(void)
{
    fr_rng r = fr_test_rng("int_unary");
    const char *ops[] = {"Neg", "Abs", "Relu", "Sign"};
    fr_dtype dts[] = {FR_I32, FR_I64};
    for (int di = 0; di < 2; di++) {
        for (size_t k = 0; k < 4; k++) {
            int64_t d[1] = {40};
            fr_tensor *x = tt_rand_uniform(&r, dts[di], 1, d, -1e6, 1e6);
            int64_t mn = dts[di] == FR_I32 ? INT32_MIN : INT64_MIN;
            if (dts[di] == FR_I32) {
                ((int32_t *)x->data)[0] = INT32_MIN;
                ((int32_t *)x->data)[1] = 0;
            } else {
                ((int64_t *)x->data)[0] = INT64_MIN;
                ((int64_t *)x->data)[1] = 0;
            }
            tnode t;
            tn_init(&t, ops[k], 14, 1, &x, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            CU_ASSERT_EQUAL(t.out[0]->dtype, dts[di]);
            int bad = 0;
            for (int64_t i = 0; i < 40; i++) {
                int64_t v = fr_tensor_get_i64(x, i), got = fr_tensor_get_i64(t.out[0], i), want;
                if (v == mn && (k == 0 || k == 1))
                    want = mn; /* -INT_MIN wraps to INT_MIN */
                else if (k == 0) want = -v;
                else if (k == 1) want = v < 0 ? -v : v;
                else if (k == 2) want = v > 0 ? v : 0;
                else want = v > 0 ? 1 : v < 0 ? -1 : 0;
                bad += got != want;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(x);
        }
    }
}

static void test_unsupported(void)
{
    int64_t d[1] = {3};
    fr_tensor *xi = tt_new(FR_I64, 1, d), *xh = tt_new(FR_F16, 1, d);
    tnode t;
    tn_init(&t, "Exp", 13, 1, &xi, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("int64");
    tn_free(&t);
    tn_init(&t, "Tanh", 13, 1, &xh, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("float16");
    tn_free(&t);
    fr_tensor *xf = tt_new(FR_F32, 1, d);
    tn_init(&t, "Gelu", 20, 1, &xf, 0, 1);
    TN_ATTR(&t, string, "approximate", "erf");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("approximate");
    tn_free(&t);
    fr_tensor_free(xi);
    fr_tensor_free(xh);
    fr_tensor_free(xf);
}

/* ---- IsNaN, IsInf, Not ---- */

static void test_isnan_isinf_not(void)
{
    fr_rng r = fr_test_rng("isnan_isinf");
    int64_t d[2] = {6, 5};
    fr_dtype dts[] = {FR_F32, FR_F64, FR_F16, FR_BF16};
    for (int di = 0; di < 4; di++) {
        fr_tensor *x = tt_new(dts[di], 2, d);
        double vals[30];
        for (int i = 0; i < 30; i++) {
            double u = fr_rng_uniform(&r);
            vals[i] = u < 0.2 ? NAN : u < 0.35 ? INFINITY : u < 0.5 ? -INFINITY : (u - 0.75) * 100;
            float f = (float)vals[i];
            switch (dts[di]) {
            case FR_F32: ((float *)x->data)[i] = f; break;
            case FR_F64: ((double *)x->data)[i] = vals[i]; break;
            case FR_F16: ((uint16_t *)x->data)[i] = fr_f32_to_f16(f); break;
            default: ((uint16_t *)x->data)[i] = fr_f32_to_bf16(f); break;
            }
        }
        tnode t;
        tn_init(&t, "IsNaN", 20, 1, &x, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        CU_ASSERT_EQUAL(t.out[0]->dtype, FR_BOOL);
        int bad = 0;
        for (int i = 0; i < 30; i++) bad += ((uint8_t *)t.out[0]->data)[i] != (isnan(vals[i]) != 0);
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        for (int mode = 0; mode < 4; mode++) { /* detect_positive / detect_negative */
            int pos = mode & 1, neg = (mode >> 1) & 1;
            tn_init(&t, "IsInf", 20, 1, &x, 0, 1);
            if (mode != 3) { /* mode 3 leaves both attributes at their default 1 */
                TN_ATTR(&t, int, "detect_positive", pos);
                TN_ATTR(&t, int, "detect_negative", neg);
            }
            FR_ASSERT_OK(tn_run(&t));
            bad = 0;
            for (int i = 0; i < 30; i++) {
                int want = (vals[i] == INFINITY && pos) || (vals[i] == -INFINITY && neg);
                bad += ((uint8_t *)t.out[0]->data)[i] != want;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
        }
        fr_tensor_free(x);
    }
    fr_tensor *b = tt_rand_uniform(&r, FR_BOOL, 2, d, 0, 1);
    tnode t;
    tn_init(&t, "Not", 1, 1, &b, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    int bad = 0;
    for (int i = 0; i < 30; i++) bad += ((uint8_t *)t.out[0]->data)[i] != !((uint8_t *)b->data)[i];
    CU_ASSERT_EQUAL(bad, 0);
    tn_free(&t);
    fr_tensor_free(b);
}

/* ---- Cast ---- */

static fr_tensor *run_cast(fr_tensor *x, fr_dtype to, int saturate, fr_status *st)
{
    tnode t;
    tn_init(&t, "Cast", 21, 1, &x, 0, 1);
    TN_ATTR(&t, int, "to", to);
    if (saturate >= 0) TN_ATTR(&t, int, "saturate", saturate);
    *st = tn_run(&t);
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

static const fr_dtype all_dtypes[] = {FR_F32, FR_F64,  FR_F16, FR_BF16, FR_F8E4M3,
                                      FR_F8E5M2, FR_I8, FR_I16, FR_I32, FR_I64,
                                      FR_U8,  FR_U16,  FR_U32, FR_U64,  FR_BOOL};

static int dt_unsigned(fr_dtype dt) { return dt == FR_U8 || dt == FR_U16 || dt == FR_U32 || dt == FR_U64; }

/* Write the exact small integer v into element i of any dtype. */
static void put_small(fr_tensor *t, int64_t i, int v)
{
    float f = (float)v;
    switch (t->dtype) {
    case FR_F32: ((float *)t->data)[i] = f; break;
    case FR_F64: ((double *)t->data)[i] = v; break;
    case FR_F16: ((uint16_t *)t->data)[i] = fr_f32_to_f16(f); break;
    case FR_BF16: ((uint16_t *)t->data)[i] = fr_f32_to_bf16(f); break;
    case FR_F8E4M3: ((uint8_t *)t->data)[i] = fr_f32_to_e4m3(f, 1); break;
    case FR_F8E5M2: ((uint8_t *)t->data)[i] = fr_f32_to_e5m2(f, 1); break;
    case FR_I8: ((int8_t *)t->data)[i] = (int8_t)v; break;
    case FR_I16: ((int16_t *)t->data)[i] = (int16_t)v; break;
    case FR_I32: ((int32_t *)t->data)[i] = v; break;
    case FR_I64: ((int64_t *)t->data)[i] = v; break;
    case FR_U8: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
    case FR_U16: ((uint16_t *)t->data)[i] = (uint16_t)v; break;
    case FR_U32: ((uint32_t *)t->data)[i] = (uint32_t)v; break;
    case FR_U64: ((uint64_t *)t->data)[i] = (uint64_t)v; break;
    case FR_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
    default: CU_FAIL("put_small dtype");
    }
}

/* Every dtype to every dtype on small integers (exact in all of them, fp8 included):
 * value preserved, except bool (v != 0), negative ints to unsigned (wrap) and negative
 * floats to unsigned (saturate to 0). */
static void test_cast_matrix(void)
{
    fr_rng r = fr_test_rng("cast_matrix");
    const int nd = (int)(sizeof all_dtypes / sizeof all_dtypes[0]);
    int64_t d[2] = {3, 7};
    for (int a = 0; a < nd; a++) {
        fr_dtype from = all_dtypes[a];
        fr_tensor *x = tt_new(from, 2, d);
        int vals[21];
        for (int i = 0; i < 21; i++) {
            int lo = dt_unsigned(from) || from == FR_BOOL ? 0 : -8;
            int hi = from == FR_BOOL ? 1 : 8;
            vals[i] = (int)tt_rand_int(&r, lo, hi);
            put_small(x, i, vals[i]);
        }
        for (int b = 0; b < nd; b++) {
            fr_dtype to = all_dtypes[b];
            fr_status st;
            fr_tensor *y = run_cast(x, to, -1, &st);
            CU_ASSERT_EQUAL_FATAL(st, FR_OK);
            CU_ASSERT_EQUAL(y->dtype, to);
            CU_ASSERT_EQUAL(y->rank, 2);
            int bad = 0;
            for (int i = 0; i < 21; i++) {
                int v = vals[i];
                if (to == FR_BOOL) {
                    bad += fr_tensor_get_i64(y, i) != (v != 0);
                } else if (fr_dtype_is_float(to)) {
                    bad += fr_tensor_get_f64(y, i) != (double)v;
                } else if (dt_unsigned(to)) {
                    int bits = (int)fr_dtype_size(to) * 8;
                    uint64_t mask = bits == 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
                    uint64_t want = v >= 0 ? (uint64_t)v : fr_dtype_is_float(from) ? 0 : (uint64_t)(int64_t)v & mask;
                    bad += ((uint64_t)fr_tensor_get_i64(y, i) & mask) != want;
                } else {
                    bad += fr_tensor_get_i64(y, i) != v;
                }
            }
            if (bad) fprintf(stderr, "\n  cast %s -> %s: %d wrong", fr_dtype_name(from), fr_dtype_name(to), bad);
            CU_ASSERT_EQUAL(bad, 0);
            fr_tensor_free(y);
        }
        fr_tensor_free(x);
    }
}

/* float -> int truncates toward zero; NaN -> 0; out of range saturates. */
static void test_cast_float_to_int(void)
{
    fr_rng r = fr_test_rng("cast_f2i");
    int64_t d[1] = {64};
    fr_tensor *x = tt_rand_uniform(&r, FR_F32, 1, d, -1000, 1000);
    float *xv = x->data;
    xv[0] = -2.7f;
    xv[1] = 2.7f;
    xv[2] = -0.5f;
    xv[3] = NAN;
    xv[4] = INFINITY;
    xv[5] = -INFINITY;
    xv[6] = 3e9f;
    xv[7] = -3e9f;
    xv[8] = 1e20f;
    struct { fr_dtype dt; double lo, hi; } tg[] = {
        {FR_I8, -128, 127}, {FR_I16, -32768, 32767}, {FR_I32, -2147483648.0, 2147483647.0},
        {FR_I64, -9223372036854775808.0, 9223372036854775807.0}, {FR_U8, 0, 255},
        {FR_U16, 0, 65535}, {FR_U32, 0, 4294967295.0}, {FR_U64, 0, 18446744073709551615.0}};
    for (size_t k = 0; k < sizeof tg / sizeof tg[0]; k++) {
        fr_status st;
        fr_tensor *y = run_cast(x, tg[k].dt, -1, &st);
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        int bad = 0;
        for (int i = 0; i < 64; i++) {
            double v = xv[i], want;
            if (isnan(v)) want = 0;
            else if (v >= tg[k].hi) want = tg[k].hi;
            else if (v <= tg[k].lo) want = tg[k].lo;
            else want = trunc(v);
            double got = tg[k].dt == FR_U64 ? (double)((uint64_t *)y->data)[i] : fr_tensor_get_f64(y, i);
            if (got != want) {
                if (bad++ < 3) fprintf(stderr, "\n  %s: %g -> %.17g want %.17g", fr_dtype_name(tg[k].dt), v, got, want);
            }
        }
        CU_ASSERT_EQUAL(bad, 0);
        if (tg[k].dt == FR_I64) {
            CU_ASSERT_EQUAL(((int64_t *)y->data)[8], INT64_MAX);
            CU_ASSERT_EQUAL(((int64_t *)y->data)[0], -2);
            CU_ASSERT_EQUAL(((int64_t *)y->data)[1], 2);
        }
        fr_tensor_free(y);
    }
    fr_tensor *yb;
    fr_status st;
    yb = run_cast(x, FR_BOOL, -1, &st);
    FR_ASSERT_OK(st);
    for (int i = 0; i < 64; i++) CU_ASSERT_EQUAL(((uint8_t *)yb->data)[i], xv[i] != 0); /* NaN -> 1 */
    fr_tensor_free(yb);
    fr_tensor_free(x);
}

/* float32 -> float16 / bfloat16 / fp8 match the formats' own converters; saturate=0 gives
 * NaN (E4M3) or Inf (E5M2) on overflow. */
static void test_cast_narrow_floats(void)
{
    fr_rng r = fr_test_rng("cast_narrow");
    int64_t d[1] = {500};
    fr_tensor *x = tt_new(FR_F32, 1, d);
    float *xv = x->data;
    for (int i = 0; i < 500; i++) /* log-uniform magnitudes across the formats' ranges */
        xv[i] = (float)((fr_rng_uniform(&r) < 0.5 ? -1 : 1) * exp((fr_rng_uniform(&r) - 0.5) * 40));
    xv[0] = NAN;
    xv[1] = INFINITY;
    xv[2] = -1000.0f;
    xv[3] = 1e6f;
    for (int sat = 0; sat <= 1; sat++) {
        fr_status st;
        fr_tensor *h = run_cast(x, FR_F16, sat ? -1 : 0, &st);
        FR_ASSERT_OK(st);
        fr_tensor *b = run_cast(x, FR_BF16, -1, &st);
        FR_ASSERT_OK(st);
        fr_tensor *e4 = run_cast(x, FR_F8E4M3, sat ? -1 : 0, &st);
        FR_ASSERT_OK(st);
        fr_tensor *e5 = run_cast(x, FR_F8E5M2, sat ? -1 : 0, &st);
        FR_ASSERT_OK(st);
        int bad = 0;
        for (int i = 0; i < 500; i++) {
            uint16_t hw = fr_f32_to_f16(xv[i]), bw = fr_f32_to_bf16(xv[i]);
            uint16_t hg = ((uint16_t *)h->data)[i], bg = ((uint16_t *)b->data)[i];
            if (isnan(xv[i])) bad += !isnan(fr_f16_to_f32(hg)) || !isnan(fr_bf16_to_f32(bg));
            else bad += hg != hw || bg != bw;
            bad += ((uint8_t *)e4->data)[i] != fr_f32_to_e4m3(xv[i], sat);
            bad += ((uint8_t *)e5->data)[i] != fr_f32_to_e5m2(xv[i], sat);
        }
        CU_ASSERT_EQUAL(bad, 0);
        if (sat) {
            CU_ASSERT_EQUAL(((uint8_t *)e4->data)[2], 0xFE); /* -448 */
            CU_ASSERT_EQUAL(((uint8_t *)e5->data)[3], 0x7B); /* 57344 */
        } else {
            CU_ASSERT_EQUAL(((uint8_t *)e4->data)[2] & 0x7F, 0x7F); /* NaN */
            CU_ASSERT_EQUAL(((uint8_t *)e5->data)[3], 0x7C);        /* +Inf */
        }
        fr_tensor_free(h);
        fr_tensor_free(b);
        fr_tensor_free(e4);
        fr_tensor_free(e5);
    }
    fr_tensor_free(x);
}

/* float64 and int64 sources round once to the narrow format: values just above a tie of the
 * target format, whose float32 rounding would land exactly on the tie. */
static void test_cast_no_double_rounding(void)
{
    int64_t d[1] = {3};
    fr_tensor *x = tt_new(FR_F64, 1, d);
    double *xv = x->data;
    xv[0] = 1.0 + ldexp(1, -11) + ldexp(1, -40); /* f16: just above the tie 1 + ulp/2 */
    xv[1] = 1.0 + ldexp(1, -8) + ldexp(1, -40);  /* bf16 */
    xv[2] = 1.0 + ldexp(1, -4) + ldexp(1, -40);  /* e4m3 */
    fr_status st;
    fr_tensor *h = run_cast(x, FR_F16, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(((uint16_t *)h->data)[0], 0x3C01);
    fr_tensor *b = run_cast(x, FR_BF16, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(((uint16_t *)b->data)[1], 0x3F81);
    fr_tensor *e = run_cast(x, FR_F8E4M3, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(((uint8_t *)e->data)[2], 0x39);
    fr_tensor_free(h);
    fr_tensor_free(b);
    fr_tensor_free(e);
    fr_tensor_free(x);

    fr_tensor *xi = tt_new(FR_I64, 1, d);
    int64_t *iv = xi->data;
    iv[0] = ((int64_t)1 << 40) + ((int64_t)1 << 32) + 1;     /* bf16 tie + 1 -> rounds up */
    iv[1] = -(((int64_t)1 << 40) + ((int64_t)1 << 32) + 1);
    iv[2] = ((int64_t)1 << 40) + ((int64_t)1 << 32);         /* exact tie -> even (down) */
    b = run_cast(xi, FR_BF16, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(((uint16_t *)b->data)[0], 0x5381);
    CU_ASSERT_EQUAL(((uint16_t *)b->data)[1], 0xD381);
    CU_ASSERT_EQUAL(((uint16_t *)b->data)[2], 0x5380);
    fr_tensor_free(b);
    /* int64 -> float32 / float64 are single correct roundings too */
    fr_tensor *f = run_cast(xi, FR_F32, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(((float *)f->data)[0], (float)iv[0]);
    fr_tensor_free(f);
    fr_tensor_free(xi);
}

static void test_cast_round_trips(void)
{
    fr_rng r = fr_test_rng("cast_round_trip");
    int64_t d[2] = {9, 11};
    fr_tensor *x = tt_rand_uniform(&r, FR_F32, 2, d, -1e4, 1e4);
    fr_status st;
    /* float32 -> float64 -> float32 is the identity */
    fr_tensor *y = run_cast(x, FR_F64, -1, &st);
    FR_ASSERT_OK(st);
    fr_tensor *z = run_cast(y, FR_F32, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(memcmp(x->data, z->data, x->nbytes), 0);
    fr_tensor_free(y);
    fr_tensor_free(z);
    /* float32 -> bfloat16 -> float32 is bf16 rounding */
    y = run_cast(x, FR_BF16, -1, &st);
    FR_ASSERT_OK(st);
    z = run_cast(y, FR_F32, -1, &st);
    FR_ASSERT_OK(st);
    int bad = 0;
    for (int i = 0; i < 99; i++) {
        float xv = ((float *)x->data)[i];
        bad += ((float *)z->data)[i] != fr_bf16_to_f32(fr_f32_to_bf16(xv));
    }
    CU_ASSERT_EQUAL(bad, 0);
    fr_tensor_free(y);
    fr_tensor_free(z);
    fr_tensor_free(x);
    /* int32 -> int64 -> int32 and int64 -> float64 -> int64 below 2^53 */
    fr_tensor *xi = tt_new(FR_I64, 2, d);
    for (int i = 0; i < 99; i++)
        ((int64_t *)xi->data)[i] = tt_rand_int(&r, -((int64_t)1 << 52), (int64_t)1 << 52);
    y = run_cast(xi, FR_F64, -1, &st);
    FR_ASSERT_OK(st);
    z = run_cast(y, FR_I64, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(memcmp(xi->data, z->data, xi->nbytes), 0);
    fr_tensor_free(y);
    fr_tensor_free(z);
    /* int64 -> int8 wraps modulo 256, int8 -> int64 sign-extends */
    y = run_cast(xi, FR_I8, -1, &st);
    FR_ASSERT_OK(st);
    bad = 0;
    for (int i = 0; i < 99; i++) {
        int64_t v = ((int64_t *)xi->data)[i];
        int64_t want = (int64_t)(((uint64_t)v & 0xFF) ^ 0x80) - 0x80;
        bad += ((int8_t *)y->data)[i] != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    fr_tensor_free(y);
    /* uint64 above 2^63 survives uint64 -> float64 -> uint64 when representable */
    fr_tensor *xu = tt_new(FR_U64, 1, d);
    for (int i = 0; i < 9; i++) ((uint64_t *)xu->data)[i] = ((uint64_t)1 << 63) + ((uint64_t)i << 20);
    y = run_cast(xu, FR_F64, -1, &st);
    FR_ASSERT_OK(st);
    z = run_cast(y, FR_U64, -1, &st);
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(memcmp(xu->data, z->data, xu->nbytes), 0);
    fr_tensor_free(y);
    fr_tensor_free(z);
    fr_tensor_free(xu);
    fr_tensor_free(xi);
}

static void test_cast_errors_and_castlike(void)
{
    int64_t d[1] = {4};
    fr_tensor *x = tt_new(FR_F32, 1, d);
    float *xv = x->data;
    xv[0] = -3.9f;
    xv[1] = 3.9f;
    xv[2] = 0.0f;
    xv[3] = 1e3f;
    fr_status st;
    fr_tensor *y = run_cast(x, FR_F8E4M3FNUZ, -1, &st);
    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
    tn_assert_error("float8e4m3fnuz");
    fr_tensor_free(y);
    y = run_cast(x, FR_STRING, -1, &st);
    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
    fr_tensor_free(y);
    /* missing 'to' */
    tnode t;
    tn_init(&t, "Cast", 13, 1, &x, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("'to'");
    tn_free(&t);
    /* CastLike takes the dtype of its second input */
    fr_tensor *like = tt_new(FR_I16, 0, NULL);
    fr_tensor *ins[2] = {x, like};
    tn_init(&t, "CastLike", 15, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(t.out[0]->dtype, FR_I16);
    CU_ASSERT_EQUAL(t.out[0]->rank, 1);
    const int16_t *o = t.out[0]->data;
    CU_ASSERT(o[0] == -3 && o[1] == 3 && o[2] == 0 && o[3] == 1000);
    tn_free(&t);
    fr_tensor_free(like);
    fr_tensor_free(x);
}

/* ---- Clip ---- */

static void check_clip(fr_rng *r, fr_dtype dt, int64_t opset, int have_min, int have_max,
                       int swap)
{
    int64_t d[3] = {3, 1, 8};
    fr_tensor *x = tt_rand_uniform(r, dt, 3, d, -10, 10);
    if (dt == FR_F32) ((float *)x->data)[5] = NAN;
    double lo = -3 - 3 * fr_rng_uniform(r), hi = 2 + 3 * fr_rng_uniform(r);
    if (dt == FR_I32 || dt == FR_I64) {
        lo = floor(lo);
        hi = floor(hi);
    }
    if (swap) { /* min > max: everything becomes max */
        double tmp = lo;
        lo = hi;
        hi = tmp;
    }
    fr_tensor *bmin = tt_scalar(dt, lo), *bmax = tt_scalar(dt, hi);
    tnode t;
    if (opset < 11) {
        tn_init(&t, "Clip", opset, 1, &x, 0, 1);
        if (have_min) TN_ATTR(&t, float, "min", (float)lo);
        if (have_max) TN_ATTR(&t, float, "max", (float)hi);
    } else {
        fr_tensor *ins[3] = {x, have_min ? bmin : NULL, have_max ? bmax : NULL};
        int n_in = have_max ? 3 : have_min ? 2 : 1;
        tn_init(&t, "Clip", opset, n_in, ins, 0, 1);
    }
    FR_ASSERT_OK(tn_run(&t));
    int bad = 0;
    int64_t n = fr_tensor_numel(x);
    double flo = have_min ? (double)(float)lo : -INFINITY, fhi = have_max ? (double)(float)hi : INFINITY;
    if (dt == FR_F64) {
        flo = have_min ? lo : -INFINITY;
        fhi = have_max ? hi : INFINITY;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = fr_tensor_get_f64(x, i), got = fr_tensor_get_f64(t.out[0], i);
        double want = isnan(v) ? v : fmin(fmax(v, flo), fhi);
        if (have_min && have_max && flo > fhi) want = isnan(v) ? v : fhi;
        if (isnan(want) ? !isnan(got) : got != want) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(bmin);
    fr_tensor_free(bmax);
}

static void test_clip(void)
{
    fr_rng r = fr_test_rng("clip");
    fr_dtype dts[] = {FR_F32, FR_F64, FR_I32, FR_I64};
    for (int di = 0; di < 4; di++)
        for (int m = 0; m < 4; m++) check_clip(&r, dts[di], 13, m & 1, m >> 1, 0);
    check_clip(&r, FR_F32, 13, 1, 1, 1);
    check_clip(&r, FR_I64, 12, 1, 1, 1);
    for (int m = 0; m < 4; m++) check_clip(&r, FR_F32, 6, m & 1, m >> 1, 0);
    /* opset 6 default bounds are the float range: +inf clips to FLT_MAX */
    fr_tensor *x = tt_scalar(FR_F32, INFINITY);
    tnode t;
    tn_init(&t, "Clip", 6, 1, &x, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(*(float *)t.out[0]->data, 3.402823466e38f);
    tn_free(&t);
    /* a bound that is not a one-element tensor of the input dtype */
    int64_t d2[1] = {2};
    fr_tensor *b2 = tt_new(FR_F32, 1, d2), *bi = tt_new(FR_I64, 0, NULL);
    fr_tensor *ins[2] = {x, b2};
    tn_init(&t, "Clip", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("min");
    tn_free(&t);
    ins[1] = bi;
    tn_init(&t, "Clip", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_free(&t);
    fr_tensor_free(b2);
    fr_tensor_free(bi);
    fr_tensor_free(x);
}

/* ---- Identity, Dropout ---- */

static void test_identity(void)
{
    fr_rng r = fr_test_rng("identity");
    fr_dtype dts[] = {FR_I8, FR_F16, FR_I64, FR_BOOL, FR_F32, FR_F8E5M2};
    for (int di = 0; di < 6; di++) {
        for (int s = 0; s < N_SHAPES; s++) {
            fr_tensor *x = tt_rand_bits(&r, dts[di], shapes[s].rank, shapes[s].dims);
            tnode t;
            tn_init(&t, "Identity", 16, 1, &x, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            CU_ASSERT_EQUAL(t.out[0]->dtype, dts[di]);
            CU_ASSERT_EQUAL(t.out[0]->rank, x->rank);
            CU_ASSERT_EQUAL(t.out[0]->nbytes, x->nbytes);
            if (x->nbytes) CU_ASSERT_EQUAL(memcmp(t.out[0]->data, x->data, x->nbytes), 0);
            tn_free(&t);
            fr_tensor_free(x);
        }
    }
}

static void test_dropout(void)
{
    fr_rng r = fr_test_rng("dropout");
    int64_t d[2] = {5, 6};
    fr_tensor *x = tt_rand_uniform(&r, FR_F32, 2, d, -1, 1);
    fr_tensor *ratio = tt_scalar(FR_F32, 0.3f), *ratio0 = tt_scalar(FR_F32, 0.0f);
    fr_tensor *tm_true = tt_new(FR_BOOL, 0, NULL), *tm_false = tt_new(FR_BOOL, 0, NULL);
    *(uint8_t *)tm_true->data = 1;
    tnode t;
    /* opset 13, no optional inputs: copy and an all-true bool mask */
    tn_init(&t, "Dropout", 13, 1, &x, 0, 2);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(memcmp(t.out[0]->data, x->data, x->nbytes), 0);
    CU_ASSERT_EQUAL(t.out[1]->dtype, FR_BOOL);
    int ones = 0;
    for (int i = 0; i < 30; i++) ones += ((uint8_t *)t.out[1]->data)[i] == 1;
    CU_ASSERT_EQUAL(ones, 30);
    tn_free(&t);
    /* training_mode constant false with a ratio: inference */
    fr_tensor *ins[3] = {x, ratio, tm_false};
    tn_init(&t, "Dropout", 13, 3, ins, 6u, 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(memcmp(t.out[0]->data, x->data, x->nbytes), 0);
    tn_free(&t);
    /* training_mode constant true: unsupported at infer (ratio default 0.5, or 0.3) */
    fr_tensor *ins2[3] = {x, NULL, tm_true};
    tn_init(&t, "Dropout", 13, 3, ins2, 4u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("training");
    tn_free(&t);
    ins[2] = tm_true;
    tn_init(&t, "Dropout", 13, 3, ins, 6u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_free(&t);
    /* training with ratio 0 is the identity */
    ins[1] = ratio0;
    tn_init(&t, "Dropout", 13, 3, ins, 6u, 2);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(memcmp(t.out[0]->data, x->data, x->nbytes), 0);
    tn_free(&t);
    /* training_mode fed at run time (not constant): the kernel refuses */
    ins[1] = ratio;
    tn_init(&t, "Dropout", 13, 3, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("training");
    tn_free(&t);
    /* opset 7: mask has the data dtype */
    tn_init(&t, "Dropout", 7, 1, &x, 0, 2);
    TN_ATTR(&t, float, "ratio", 0.2f);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(t.out[1]->dtype, FR_F32);
    CU_ASSERT_EQUAL(((float *)t.out[1]->data)[29], 1.0f);
    tn_free(&t);
    /* opset 6: is_test=0 (the default) is training */
    tn_init(&t, "Dropout", 6, 1, &x, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_free(&t);
    tn_init(&t, "Dropout", 6, 1, &x, 0, 1);
    TN_ATTR(&t, int, "is_test", 1);
    FR_ASSERT_OK(tn_run(&t));
    CU_ASSERT_EQUAL(memcmp(t.out[0]->data, x->data, x->nbytes), 0);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(ratio);
    fr_tensor_free(ratio0);
    fr_tensor_free(tm_true);
    fr_tensor_free(tm_false);
}

static void test_registered(void)
{
    const char *names[] = {"Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf",
                           "Sigmoid", "Relu", "LeakyRelu", "Gelu", "Softplus", "Sin", "Cos",
                           "Floor", "Ceil", "Sign", "Softsign", "IsNaN", "IsInf", "Not", "Cast", "CastLike",
                           "Clip", "Identity", "Dropout"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo unary_tests[] = {
    {"registered", test_registered},
    {"math_f32", test_math_f32},
    {"math_f64", test_math_f64},
    {"math_specials", test_math_specials},
    {"leaky_alpha", test_leaky_alpha},
    {"int_unary", test_int_unary},
    {"unsupported", test_unsupported},
    {"isnan_isinf_not", test_isnan_isinf_not},
    {"cast_matrix", test_cast_matrix},
    {"cast_float_to_int", test_cast_float_to_int},
    {"cast_narrow_floats", test_cast_narrow_floats},
    {"cast_no_double_rounding", test_cast_no_double_rounding},
    {"cast_round_trips", test_cast_round_trips},
    {"cast_errors_castlike", test_cast_errors_and_castlike},
    {"clip", test_clip},
    {"identity", test_identity},
    {"dropout", test_dropout},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_unary", NULL, NULL, NULL, NULL, unary_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
