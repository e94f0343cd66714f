/* GPU elementwise family (ops/cuda/elementwise*.cu) against the CPU kernels of ops/unary.c,
 * ops/binary.c and ops/elementwise_grad.c: every op, dtype, attribute form and broadcast
 * pattern on fresh random inputs (NaN/inf/-0 sprinkled into float inputs).
 *
 * Tolerances (gpu_rel_err, relative L2 over the tensor; NaN must meet NaN, inf the same inf):
 *   - 0 (bit for bit, NaN payloads aside for float32/float64) for every integer, bool,
 *     float16, bfloat16 and fp8 result, Cast, data movement, and the float ops that are exact
 *     (Neg, Abs, Relu, LeakyRelu, Floor, Ceil, Sign, Sqrt, Reciprocal, Add/Sub/Mul/Div, Mod,
 *     Max/Min, comparisons, Clip, FmodGrad, ExtremumGrad, ClipGrad for x);
 *   - 1e-5 for other float32 results, 1e-12 for float64 (transcendental functions); Gelu's
 *     gradient relative to max(||dx||, ||dy||), since dx passes through zero near v = -0.75.
 * A failure prints the case, the shapes, the first mismatching element with both values and
 * its inputs. The last test checks that every op of the three CPU families ran here. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "graph/fp8_format.h"

#define TOL32 1e-5
#define TOL64 1e-12

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? TOL64 : TOL32; }

/* ---- ops seen (for the coverage test) ---- */

#define MAX_SEEN 128
static char seen[MAX_SEEN][32];
static int n_seen;

static void mark_seen(const char *op)
{
    for (int i = 0; i < n_seen; i++)
        if (strcmp(seen[i], op) == 0) return;
    if (n_seen < MAX_SEEN) snprintf(seen[n_seen++], sizeof seen[0], "%s", op);
}

/* ---- running and comparing ---- */

static int broadcasts_to(const fr_tensor *src, const fr_tensor *out)
{
    if (src->rank > out->rank) return 0;
    for (int d = 0; d < src->rank; d++) {
        int64_t s = src->dims[d], o = out->dims[out->rank - src->rank + d];
        if (s != o && s != 1) return 0;
    }
    return 1;
}

/* After a mismatch at output element i: the input elements it was computed from. */
static void inputs_at(tnode *t, const fr_tensor *want, int64_t i)
{
    for (int k = 0; k < t->n_in; k++) {
        const fr_tensor *x = t->in[k];
        if (!x || !fr_tensor_numel(x) || !fr_dtype_size(x->dtype)) continue;
        int64_t xi = fr_tensor_numel(x) == 1 ? 0 : broadcasts_to(x, want) ? tt_bcast_index(x, want, i) : -1;
        if (xi < 0 && fr_tensor_numel(x) == fr_tensor_numel(want)) xi = i;
        if (xi < 0) continue;
        fprintf(stderr, "    input %d there: ", k);
        gpu_print_elem(x, xi);
        fprintf(stderr, "\n");
    }
}

/* Run t on the CPU and the GPU and compare every output within tol (0: exact), float outputs
 * relative to at least floor_norm (gpu_rel_err_floor). `what` describes the case (printf
 * format). Returns 1 when all match. */
static int check_vcase(tnode *t, double tol, double floor_norm, const char *what, va_list ap)
{
    char desc[512];
    vsnprintf(desc, sizeof desc, what, ap);
    mark_seen(tn_node(t)->op_type);
    if (tn_run(t) != FR_OK) {
        gpu_print_case(desc, t);
        fprintf(stderr, "    the CPU kernel failed: %s\n", fr_last_error());
        CU_FAIL("CPU reference failed");
        return 0;
    }
    return gpu_check_floor(t, tol, floor_norm, desc, inputs_at);
}

static int check_case(tnode *t, double tol, const char *what, ...) __attribute__((format(printf, 3, 4)));
static int check_case(tnode *t, double tol, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    const int ok = check_vcase(t, tol, 0, what, ap);
    va_end(ap);
    return ok;
}

static int check_floor(tnode *t, double tol, double floor_norm, const char *what, ...) __attribute__((format(printf, 4, 5)));
static int check_floor(tnode *t, double tol, double floor_norm, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    const int ok = check_vcase(t, tol, floor_norm, what, ap);
    va_end(ap);
    return ok;
}

/* ---- inputs ---- */

typedef struct shape {
    int rank;
    int64_t d[FR_MAX_RANK];
} shape;

/* scalar, one element, short, size-1 inner dims, empty, odd matrix, many blocks, 3-D odd */
static const shape un_shapes[] = {
    {0, {0}}, {1, {1}}, {1, {7}}, {3, {3, 1, 4}}, {3, {2, 0, 3}}, {2, {17, 33}}, {1, {100003}}, {3, {3, 257, 129}},
};
#define N_UN_SHAPES ((int)(sizeof un_shapes / sizeof un_shapes[0]))

static void set_f(fr_tensor *t, int64_t i, double v)
{
    if (t->dtype == FR_F32)
        ((float *)t->data)[i] = (float)v;
    else
        ((double *)t->data)[i] = v;
}

/* NaN, +-inf, +-0 and (huge != 0) huge values at a few random places of a float32/float64
 * tensor. Pow leaves the huge ones out: 1e30^6 squared overflows gpu_rel_err's norm. */
static void sprinkle_some(fr_tensor *t, fr_rng *r, int huge)
{
    if (t->dtype != FR_F32 && t->dtype != FR_F64) return;
    int64_t n = fr_tensor_numel(t);
    if (n < 8) return;
    const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-30, 1e30, -1e30};
    int cnt = n < 64 ? 3 : 12;
    for (int k = 0; k < cnt; k++) set_f(t, tt_rand_int(r, 0, n - 1), sp[tt_rand_int(r, 0, huge ? 7 : 5)]);
}

static void sprinkle(fr_tensor *t, fr_rng *r) { sprinkle_some(t, r, 1); }

/* Element i = v in any dtype (out of range integers wrap, floats convert as C does). */
static void put_any(fr_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case FR_F32: ((float *)t->data)[i] = (float)v; break;
    case FR_F64: ((double *)t->data)[i] = v; break;
    case FR_F16: ((uint16_t *)t->data)[i] = fr_f32_to_f16((float)v); break;
    case FR_BF16: ((uint16_t *)t->data)[i] = fr_f32_to_bf16((float)v); break;
    case FR_F8E4M3: ((uint8_t *)t->data)[i] = fr_f32_to_e4m3((float)v, 1); break;
    case FR_F8E5M2: ((uint8_t *)t->data)[i] = fr_f32_to_e5m2((float)v, 1); break;
    case FR_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
    default: {
        double c = fmax(-9.2e18, fmin(9.2e18, round(v)));
        uint64_t u = (uint64_t)(int64_t)c;
        memcpy((char *)t->data + (size_t)i * fr_dtype_size(t->dtype), &u, fr_dtype_size(t->dtype)); /* little endian */
    }
    }
}

/* ---- unary math ---- */

typedef struct un_case {
    const char *op;
    const char *approx; /* Gelu: attribute value or NULL */
    double lo, hi;
    int exact; /* float results bit for bit */
    int ints;  /* int32/int64 too */
} un_case;

static const un_case un_cases[] = {
    {"Neg", NULL, -5, 5, 1, 1},       {"Abs", NULL, -5, 5, 1, 1},        {"Exp", NULL, -20, 20, 0, 0},
    {"Log", NULL, -1, 10, 0, 0},      {"Sqrt", NULL, -1, 10, 1, 0},      {"Reciprocal", NULL, -3, 3, 1, 0},
    {"Tanh", NULL, -5, 5, 0, 0},      {"Erf", NULL, -3, 3, 0, 0},        {"Sigmoid", NULL, -20, 20, 0, 0},
    {"Relu", NULL, -5, 5, 1, 1},      {"LeakyRelu", NULL, -5, 5, 1, 0},  {"Gelu", NULL, -6, 6, 0, 0},
    {"Gelu", "none", -6, 6, 0, 0},    {"Gelu", "tanh", -6, 6, 0, 0},     {"Softplus", NULL, -15, 15, 0, 0},
    {"Sin", NULL, -10, 10, 0, 0},     {"Cos", NULL, -10, 10, 0, 0},      {"Floor", NULL, -5, 5, 1, 0},
    {"Ceil", NULL, -5, 5, 1, 0},      {"Sign", NULL, -5, 5, 1, 1},       {"Softsign", NULL, -50, 50, 0, 0},
};

static void test_unary_float(void)
{
    fr_rng r = fr_test_rng("gpu_unary_float");
    const fr_dtype dts[2] = {FR_F32, FR_F64};
    for (size_t c = 0; c < sizeof un_cases / sizeof un_cases[0]; c++) {
        const un_case *uc = &un_cases[c];
        for (int di = 0; di < 2; di++) {
            for (int s = 0; s < N_UN_SHAPES; s++) {
                fr_tensor *x = tt_rand_uniform(&r, dts[di], un_shapes[s].rank, un_shapes[s].d, uc->lo, uc->hi);
                sprinkle(x, &r);
                tnode t;
                tn_init(&t, uc->op, 20, 1, &x, 0, 1);
                if (uc->approx) TN_ATTR(&t, string, "approximate", uc->approx);
                check_case(&t, uc->exact ? 0 : tol_of(dts[di]), "%s approximate=%s %s shape #%d", uc->op,
                           uc->approx ? uc->approx : "-", fr_dtype_name(dts[di]), s);
                tn_free(&t);
                fr_tensor_free(x);
            }
        }
    }
}

/* ai.fp8run::Gelu (passes/gelu_fuse.c's node for graphs below opset 20): ONNX Gelu's kernel */
static void test_gelu_fp8run(void)
{
    fr_rng r = fr_test_rng("gpu_gelu_fp8run");
    static const char *const approx[2] = {"none", "tanh"};
    for (int a = 0; a < 2; a++)
        for (int s = 0; s < N_UN_SHAPES; s++) {
            fr_tensor *x = tt_rand_uniform(&r, FR_F32, un_shapes[s].rank, un_shapes[s].d, -6, 6);
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Gelu", 1, 1, &x, 0, 1);
            TN_ATTR(&t, string, "approximate", approx[a]);
            check_case(&t, tol_of(FR_F32), "ai.fp8run::Gelu approximate=%s shape #%d", approx[a], s);
            tn_free(&t);
            fr_tensor_free(x);
        }
}

static void test_unary_int_and_attrs(void)
{
    fr_rng r = fr_test_rng("gpu_unary_int");
    const fr_dtype dts[2] = {FR_I32, FR_I64};
    for (size_t c = 0; c < sizeof un_cases / sizeof un_cases[0]; c++) {
        if (!un_cases[c].ints) continue;
        for (int di = 0; di < 2; di++) {
            for (int s = 0; s < N_UN_SHAPES; s++) {
                fr_tensor *x = tt_rand_uniform(&r, dts[di], un_shapes[s].rank, un_shapes[s].d, -1e6, 1e6);
                int64_t n = fr_tensor_numel(x);
                if (n > 3) { /* INT_MIN wraps under Neg/Abs; 0 and INT_MAX */
                    if (dts[di] == FR_I32) {
                        ((int32_t *)x->data)[0] = INT32_MIN;
                        ((int32_t *)x->data)[1] = 0;
                        ((int32_t *)x->data)[2] = INT32_MAX;
                    } else {
                        ((int64_t *)x->data)[0] = INT64_MIN;
                        ((int64_t *)x->data)[1] = 0;
                        ((int64_t *)x->data)[2] = INT64_MAX;
                    }
                }
                tnode t;
                tn_init(&t, un_cases[c].op, 14, 1, &x, 0, 1);
                check_case(&t, 0, "%s %s shape #%d", un_cases[c].op, fr_dtype_name(dts[di]), s);
                tn_free(&t);
                fr_tensor_free(x);
            }
        }
    }
    /* ai.fp8run::Softcap: alpha the cap, x well past it both ways */
    for (int di = 0; di < 2; di++) {
        fr_dtype dt = di ? FR_F64 : FR_F32;
        int64_t d[2] = {129, 77};
        float cap = (float)(1.0 + 30.0 * fr_rng_uniform(&r));
        fr_tensor *x = tt_rand_uniform(&r, dt, 2, d, -8.0 * cap, 8.0 * cap);
        sprinkle(x, &r);
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Softcap", 1, 1, &x, 0, 1);
        TN_ATTR(&t, float, "alpha", cap);
        check_case(&t, tol_of(dt), "Softcap alpha=%g %s", cap, fr_dtype_name(dt));
        tn_free(&t);
        fr_tensor_free(x);
    }
    /* LeakyRelu with an alpha attribute */
    for (int di = 0; di < 2; di++) {
        fr_dtype dt = di ? FR_F64 : FR_F32;
        int64_t d[2] = {129, 77};
        fr_tensor *x = tt_rand_uniform(&r, dt, 2, d, -4, 4);
        sprinkle(x, &r);
        float alpha = (float)(0.05 + 0.5 * fr_rng_uniform(&r));
        tnode t;
        tn_init(&t, "LeakyRelu", 16, 1, &x, 0, 1);
        TN_ATTR(&t, float, "alpha", alpha);
        check_case(&t, 0, "LeakyRelu alpha=%g %s", alpha, fr_dtype_name(dt));
        tn_free(&t);
        fr_tensor_free(x);
    }
}

/* ---- IsNaN, IsInf, Not ---- */

static void test_predicates(void)
{
    fr_rng r = fr_test_rng("gpu_predicates");
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_F16, FR_BF16};
    const shape shp[] = {{0, {0}}, {2, {6, 5}}, {1, {0}}, {1, {100003}}};
    for (int di = 0; di < 4; di++) {
        for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
            fr_tensor *x = tt_new(dts[di], shp[s].rank, shp[s].d);
            int64_t n = fr_tensor_numel(x);
            for (int64_t i = 0; i < n; i++) {
                double u = fr_rng_uniform(&r);
                put_any(x, i, u < 0.2 ? NAN : u < 0.35 ? INFINITY : u < 0.5 ? -INFINITY : (u - 0.75) * 100);
            }
            if (n > 4 && (dts[di] == FR_F16 || dts[di] == FR_BF16)) { /* NaN payloads, -NaN */
                ((uint16_t *)x->data)[0] = dts[di] == FR_F16 ? 0xFC01u : 0xFF81u;
                ((uint16_t *)x->data)[1] = dts[di] == FR_F16 ? 0x7D00u : 0x7FC1u;
            }
            tnode t;
            tn_init(&t, "IsNaN", 20, 1, &x, 0, 1);
            check_case(&t, 0, "IsNaN %s shape #%d", fr_dtype_name(dts[di]), (int)s);
            tn_free(&t);
            for (int mode = 0; mode < 4; mode++) {
                tn_init(&t, "IsInf", 20, 1, &x, 0, 1);
                if (mode != 3) {
                    TN_ATTR(&t, int, "detect_positive", mode & 1);
                    TN_ATTR(&t, int, "detect_negative", (mode >> 1) & 1);
                }
                check_case(&t, 0, "IsInf %s mode %d shape #%d", fr_dtype_name(dts[di]), mode, (int)s);
                tn_free(&t);
            }
            fr_tensor_free(x);
        }
    }
    for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
        fr_tensor *b = tt_rand_bits(&r, FR_BOOL, shp[s].rank, shp[s].d);
        tnode t;
        tn_init(&t, "Not", 1, 1, &b, 0, 1);
        check_case(&t, 0, "Not shape #%d", (int)s);
        tn_free(&t);
        fr_tensor_free(b);
    }
}

/* ---- Cast, CastLike ---- */

static const fr_dtype all_dtypes[] = {FR_F32, FR_F64, FR_F16, FR_BF16, FR_F8E4M3, FR_F8E5M2, FR_I8, FR_I16,
                                      FR_I32, FR_I64, FR_U8,  FR_U16, FR_U32, FR_U64,   FR_BOOL};
#define N_ALL ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* kind 0: random bytes (every pattern: NaN payloads, subnormals, huge); 1: normal values at a
 * random scale (rounding, saturation); 2: small integers with halves (ties). */
static fr_tensor *cast_input(fr_rng *r, fr_dtype dt, int kind, int rank, const int64_t *dims)
{
    if (kind == 0) return tt_rand_bits(r, dt, rank, dims);
    fr_tensor *x = tt_new(dt, rank, dims);
    int64_t n = fr_tensor_numel(x);
    const double scales[] = {1e-6, 1e-3, 1, 300, 7e4, 3e9, 1e19};
    for (int64_t i = 0; i < n; i++) {
        double v = kind == 1 ? fr_rng_normal(r) * scales[tt_rand_int(r, 0, 6)]
                             : (double)tt_rand_int(r, -600, 600) * 0.5;
        put_any(x, i, v);
    }
    return x;
}

static void test_cast_matrix(void)
{
    fr_rng r = fr_test_rng("gpu_cast");
    const shape shp[] = {{2, {37, 29}}, {1, {0}}, {0, {0}}};
    for (int a = 0; a < N_ALL; a++) {
        for (int kind = 0; kind < 3; kind++) {
            for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
                fr_tensor *x = cast_input(&r, all_dtypes[a], kind, shp[s].rank, shp[s].d);
                for (int b = 0; b < N_ALL; b++) {
                    fr_dtype to = all_dtypes[b];
                    int fp8 = to == FR_F8E4M3 || to == FR_F8E5M2;
                    for (int sat = -1; sat <= (fp8 ? 0 : -1); sat++) { /* -1: attribute absent (1) */
                        tnode t;
                        tn_init(&t, "Cast", 21, 1, &x, 0, 1);
                        TN_ATTR(&t, int, "to", to);
                        if (sat >= 0) TN_ATTR(&t, int, "saturate", sat);
                        check_case(&t, 0, "Cast %s -> %s saturate=%d input kind %d shape #%d",
                                   fr_dtype_name(all_dtypes[a]), fr_dtype_name(to), sat < 0 ? 1 : sat, kind, (int)s);
                        tn_free(&t);
                    }
                }
                fr_tensor_free(x);
            }
        }
    }
}

/* The conversions that matter for training (float32 -> bf16/f16/fp8 and back) on a large
 * tensor; CastLike takes its dtype from the second input. */
static void test_cast_large_and_castlike(void)
{
    fr_rng r = fr_test_rng("gpu_cast_large");
    int64_t d[2] = {311, 1031};
    const fr_dtype narrow[] = {FR_BF16, FR_F16, FR_F8E4M3, FR_F8E5M2};
    for (int kind = 0; kind < 2; kind++) {
        fr_tensor *x = cast_input(&r, FR_F32, kind, 2, d);
        for (int k = 0; k < 4; k++) {
            for (int sat = 0; sat <= 1; sat++) {
                tnode t;
                tn_init(&t, "Cast", 21, 1, &x, 0, 1);
                TN_ATTR(&t, int, "to", narrow[k]);
                TN_ATTR(&t, int, "saturate", sat);
                if (!check_case(&t, 0, "Cast float32 -> %s saturate=%d kind %d", fr_dtype_name(narrow[k]), sat,
                                kind)) {
                    tn_free(&t);
                    continue;
                }
                fr_tensor *y = t.out[0]; /* back to float32 and float64 */
                t.out[0] = NULL;
                tn_free(&t);
                for (int back = 0; back < 2; back++) {
                    tn_init(&t, "Cast", 21, 1, &y, 0, 1);
                    TN_ATTR(&t, int, "to", back ? FR_F64 : FR_F32);
                    check_case(&t, 0, "Cast %s -> %s", fr_dtype_name(narrow[k]), back ? "float64" : "float32");
                    tn_free(&t);
                }
                fr_tensor_free(y);
            }
            int64_t one = 1;
            fr_tensor *like = tt_new(narrow[k], 1, &one);
            fr_tensor *ins[2] = {x, like};
            tnode t;
            tn_init(&t, "CastLike", 21, 2, ins, 0, 1);
            check_case(&t, 0, "CastLike float32 -> %s", fr_dtype_name(narrow[k]));
            tn_free(&t);
            tn_init(&t, "CastLike", 21, 2, ins, 2u, 1); /* the dtype source as a constant */
            TN_ATTR(&t, int, "saturate", 0);
            check_case(&t, 0, "CastLike float32 -> %s saturate=0 (constant target)", fr_dtype_name(narrow[k]));
            tn_free(&t);
            fr_tensor_free(like);
        }
        fr_tensor_free(x);
    }
}

/* ---- Clip ---- */

static void test_clip(void)
{
    fr_rng r = fr_test_rng("gpu_clip");
    const shape shp[] = {{2, {33, 65}}, {1, {100003}}, {1, {0}}, {0, {0}}};
    /* legacy (opset 6): attributes */
    for (int di = 0; di < 2; di++) {
        fr_dtype dt = di ? FR_F64 : FR_F32;
        for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
            fr_tensor *x = tt_rand_uniform(&r, dt, shp[s].rank, shp[s].d, -5, 5);
            sprinkle(x, &r);
            for (int mode = 0; mode < 4; mode++) { /* bit 0: min given, bit 1: max given */
                tnode t;
                tn_init(&t, "Clip", 6, 1, &x, 0, 1);
                if (mode & 1) TN_ATTR(&t, float, "min", -1.25f);
                if (mode & 2) TN_ATTR(&t, float, "max", 2.1f);
                check_case(&t, 0, "Clip opset 6 %s min%s max%s shape #%d", fr_dtype_name(dt), mode & 1 ? "=-1.25" : " absent",
                           mode & 2 ? "=2.1" : " absent", (int)s);
                tn_free(&t);
            }
            fr_tensor_free(x);
        }
    }
    /* opset 13: optional bound inputs, as graph inputs (device scalars) or constants */
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_I32, FR_I64};
    for (int di = 0; di < 4; di++) {
        fr_dtype dt = dts[di];
        for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
            fr_tensor *x = tt_rand_uniform(&r, dt, shp[s].rank, shp[s].d, -50, 50);
            sprinkle(x, &r);
            for (int mode = 0; mode < 5; mode++) { /* 4: lo > hi */
                fr_tensor *lo = tt_scalar(dt, mode == 4 ? 20 : -7);
                int64_t one = 1;
                fr_tensor *hi = tt_new(dt, 1, &one); /* shape [1] works too */
                tt_set(hi, 0, mode == 4 ? -3 : 12);
                fr_tensor *ins[3] = {x, (mode & 1) || mode == 4 ? lo : NULL, (mode & 2) || mode == 4 ? hi : NULL};
                int n_in = ins[2] ? 3 : ins[1] ? 2 : 1;
                for (int cst = 0; cst < 2; cst++) {
                    tnode t;
                    tn_init(&t, "Clip", 13, n_in, ins, cst ? 6u : 0u, 1);
                    check_case(&t, 0, "Clip opset 13 %s bounds mode %d %s shape #%d", fr_dtype_name(dt), mode,
                               cst ? "constant" : "input", (int)s);
                    tn_free(&t);
                }
                fr_tensor_free(lo);
                fr_tensor_free(hi);
            }
            fr_tensor_free(x);
        }
    }
}

/* ---- Identity, Dropout ---- */

static void test_identity_dropout(void)
{
    fr_rng r = fr_test_rng("gpu_identity_dropout");
    const shape shp[] = {{0, {0}}, {2, {5, 0}}, {3, {4, 3, 7}}, {1, {100003}}};
    for (int di = 0; di < TT_N_DTYPES; di++) {
        for (size_t s = 0; s < sizeof shp / sizeof shp[0]; s++) {
            fr_tensor *x = tt_rand_bits(&r, tt_dtypes[di], shp[s].rank, shp[s].d);
            tnode t;
            tn_init(&t, "Identity", 16, 1, &x, 0, 1);
            check_case(&t, 0, "Identity %s shape #%d", fr_dtype_name(tt_dtypes[di]), (int)s);
            tn_free(&t);
            /* opset 13: bool mask; data of any dtype */
            for (int n_out = 1; n_out <= 2; n_out++) {
                tn_init(&t, "Dropout", 13, 1, &x, 0, n_out);
                check_case(&t, 0, "Dropout opset 13 %s outputs %d shape #%d", fr_dtype_name(tt_dtypes[di]), n_out,
                           (int)s);
                tn_free(&t);
            }
            fr_tensor_free(x);
        }
    }
    /* opset 7 (mask in the data dtype), opset 6 is_test=1, opset 12+ with ratio and
     * training_mode inputs (false as an input and as a constant; true with ratio 0) */
    const fr_dtype mdts[4] = {FR_F32, FR_F64, FR_F16, FR_BF16};
    int64_t d[2] = {31, 257};
    for (int di = 0; di < 4; di++) {
        fr_tensor *x = tt_rand_bits(&r, mdts[di], 2, d);
        tnode t;
        tn_init(&t, "Dropout", 7, 1, &x, 0, 2);
        check_case(&t, 0, "Dropout opset 7 %s with mask", fr_dtype_name(mdts[di]));
        tn_free(&t);
        tn_init(&t, "Dropout", 6, 1, &x, 0, 2);
        TN_ATTR(&t, int, "is_test", 1);
        check_case(&t, 0, "Dropout opset 6 is_test=1 %s with mask", fr_dtype_name(mdts[di]));
        tn_free(&t);
        fr_tensor *ratio = tt_scalar(FR_F32, 0.25), *ratio0 = tt_scalar(FR_F32, 0.0);
        fr_tensor *tm0 = tt_new(FR_BOOL, 0, NULL), *tm1 = tt_new(FR_BOOL, 0, NULL);
        ((uint8_t *)tm1->data)[0] = 1;
        fr_tensor *ins[3] = {x, ratio, tm0};
        for (int cst = 0; cst < 2; cst++) {
            tn_init(&t, "Dropout", 13, 3, ins, cst ? 6u : 0u, 2);
            check_case(&t, 0, "Dropout opset 13 %s ratio 0.25 training_mode false (%s)", fr_dtype_name(mdts[di]),
                       cst ? "constants" : "inputs");
            tn_free(&t);
        }
        fr_tensor *ins1[3] = {x, ratio0, tm1};
        tn_init(&t, "Dropout", 13, 3, ins1, 0u, 2);
        check_case(&t, 0, "Dropout opset 13 %s ratio 0 training_mode true", fr_dtype_name(mdts[di]));
        tn_free(&t);
        fr_tensor_free(ratio);
        fr_tensor_free(ratio0);
        fr_tensor_free(tm0);
        fr_tensor_free(tm1);
        fr_tensor_free(x);
    }
}

/* ---- binary ops with broadcasting ---- */

typedef struct shape2 {
    shape a, b;
} shape2;

static const shape2 bshapes[] = {
    {{2, {17, 33}}, {2, {17, 33}}},                 /* same shape */
    {{1, {100003}}, {1, {100003}}},                 /* same shape, many blocks */
    {{0, {0}}, {2, {64, 130}}},                     /* scalar first */
    {{2, {300, 257}}, {0, {0}}},                    /* scalar second */
    {{2, {300, 257}}, {1, {257}}},                  /* row broadcast */
    {{2, {300, 257}}, {2, {300, 1}}},               /* column broadcast */
    {{4, {4, 1, 5, 6}}, {3, {3, 1, 6}}},            /* general */
    {{2, {5, 1}}, {2, {1, 7}}},                     /* outer product */
    {{2, {0, 3}}, {1, {3}}},                        /* empty */
    {{2, {2, 0}}, {2, {2, 1}}},                     /* empty */
    {{8, {2, 1, 3, 1, 2, 3, 1, 2}}, {8, {1, 2, 1, 3, 2, 1, 2, 1}}}, /* rank 8 */
    {{3, {33, 1, 517}}, {3, {1, 129, 517}}},        /* general, 2.2M elements */
    {{1, {1}}, {0, {0}}},                           /* one element */
    {{3, {1, 1, 1}}, {1, {1}}},
};
#define N_BSHAPES ((int)(sizeof bshapes / sizeof bshapes[0]))

/* a and b for op on dtype dt: divisors nonzero for integers, specials for floats, and a few
 * equal values (ties) */
static void binary_inputs(fr_rng *r, const char *op, fr_dtype dt, const shape2 *s, fr_tensor **a, fr_tensor **b)
{
    int is_int = dt == FR_I32 || dt == FR_I64;
    int cmp = !strcmp(op, "Equal") || !strcmp(op, "Less") || !strcmp(op, "LessOrEqual") || !strcmp(op, "Greater") ||
              !strcmp(op, "GreaterOrEqual") || !strcmp(op, "Max") || !strcmp(op, "Min");
    if (dt == FR_BOOL) {
        *a = tt_rand_bits(r, dt, s->a.rank, s->a.d);
        *b = tt_rand_bits(r, dt, s->b.rank, s->b.d);
        return;
    }
    if (cmp) { /* small integers: many ties */
        *a = tt_rand_ints(r, dt, s->a.rank, s->a.d, -4, 4);
        *b = tt_rand_ints(r, dt, s->b.rank, s->b.d, -4, 4);
    } else if (is_int) {
        double big = dt == FR_I32 ? 2e9 : 4e18; /* tt_rand_int needs hi - lo < 2^63 */
        int wide = !strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul"); /* wrap-around */
        *a = tt_rand_uniform(r, dt, s->a.rank, s->a.d, wide ? -big : -1000, wide ? big : 1000);
        *b = tt_rand_uniform(r, dt, s->b.rank, s->b.d, wide ? -big : -50, wide ? big : 50);
    } else {
        *a = tt_rand_uniform(r, dt, s->a.rank, s->a.d, -10, 10);
        *b = tt_rand_uniform(r, dt, s->b.rank, s->b.d, -10, 10);
    }
    int64_t na = fr_tensor_numel(*a), nb = fr_tensor_numel(*b);
    if (is_int) {
        int64_t mn = dt == FR_I32 ? INT32_MIN : INT64_MIN;
        for (int64_t i = 0; i < nb; i++) /* no zero divisor: the CPU refuses it */
            if (fr_tensor_get_i64(*b, i) == 0) put_any(*b, i, (double)tt_rand_int(r, 1, 9));
        if (na > 0 && nb > 0) { /* INT_MIN / -1 and INT_MIN % -1 at element 0 */
            if (dt == FR_I32) ((int32_t *)(*a)->data)[0] = (int32_t)mn;
            else ((int64_t *)(*a)->data)[0] = mn;
            put_any(*b, 0, -1);
        }
    } else {
        sprinkle(*a, r);
        sprinkle(*b, r);
    }
}

typedef struct bin_case {
    const char *op;
    int fmod;    /* Mod: -1 absent, else the attribute */
    unsigned dts; /* bit 0 f32, 1 f64, 2 i32, 3 i64, 4 bool */
} bin_case;

static const bin_case bin_cases[] = {
    {"Add", -1, 15},          {"Sub", -1, 15},         {"Mul", -1, 15},    {"Div", -1, 15},
    {"Mod", -1, 12},          {"Mod", 0, 12},          {"Mod", 1, 15},     {"Max", -1, 15},
    {"Min", -1, 15},          {"Sum", -1, 15},         {"Mean", -1, 3},    {"Equal", -1, 31},
    {"Less", -1, 15},         {"LessOrEqual", -1, 15}, {"Greater", -1, 15}, {"GreaterOrEqual", -1, 15},
    {"And", -1, 16},          {"Or", -1, 16},          {"Xor", -1, 16},
};

static void test_binary(void)
{
    fr_rng r = fr_test_rng("gpu_binary");
    const fr_dtype dts[5] = {FR_F32, FR_F64, FR_I32, FR_I64, FR_BOOL};
    for (size_t c = 0; c < sizeof bin_cases / sizeof bin_cases[0]; c++) {
        const bin_case *bc = &bin_cases[c];
        for (int di = 0; di < 5; di++) {
            if (!(bc->dts & (1u << di))) continue;
            for (int s = 0; s < N_BSHAPES; s++) {
                if (s == N_BSHAPES - 3 && di != 0 && di != 3) continue; /* the 2.2M case: float32, int64 */
                fr_tensor *ins[2];
                binary_inputs(&r, bc->op, dts[di], &bshapes[s], &ins[0], &ins[1]);
                tnode t;
                tn_init(&t, bc->op, 13, 2, ins, 0, 1);
                if (bc->fmod >= 0) TN_ATTR(&t, int, "fmod", bc->fmod);
                /* float division/fmod and every other op are exact; Mean divides */
                check_case(&t, 0, "%s fmod=%d %s shape pair #%d", bc->op, bc->fmod, fr_dtype_name(dts[di]), s);
                tn_free(&t);
                fr_tensor_free(ins[0]);
                fr_tensor_free(ins[1]);
            }
        }
    }
}

/* Max, Min, Sum, Mean with 1..8 inputs of different broadcast shapes (folded left to right). */
static void test_variadic(void)
{
    fr_rng r = fr_test_rng("gpu_variadic");
    const char *ops[4] = {"Max", "Min", "Sum", "Mean"};
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_I32, FR_I64};
    const shape pool[] = {{3, {4, 3, 5}}, {2, {3, 5}}, {1, {5}}, {3, {4, 1, 5}}, {0, {0}}, {3, {1, 1, 1}},
                          {2, {3, 1}},    {3, {4, 3, 1}}};
    const int counts[4] = {1, 3, 5, 8};
    for (int o = 0; o < 4; o++) {
        for (int di = 0; di < 4; di++) {
            if (o == 3 && di >= 2) continue; /* Mean: floats */
            for (int ci = 0; ci < 4; ci++) {
                for (int big = 0; big < 2; big++) {
                    int k = counts[ci];
                    fr_tensor *ins[8];
                    for (int i = 0; i < k; i++) {
                        shape s = pool[(i + ci) % 8];
                        if (big) { /* one large same-shape set, a scalar among them */
                            s.rank = 2;
                            s.d[0] = 1001;
                            s.d[1] = 257;
                            if (i == 1) s.rank = 0;
                        }
                        if (k == 1 && !big) s = pool[0];
                        ins[i] = o < 2 ? tt_rand_ints(&r, dts[di], s.rank, s.d, -5, 5)
                                       : tt_rand_uniform(&r, dts[di], s.rank, s.d, -100, 100);
                        sprinkle(ins[i], &r);
                    }
                    tnode t;
                    tn_init(&t, ops[o], 13, k, ins, 0, 1);
                    check_case(&t, 0, "%s of %d inputs %s%s", ops[o], k, fr_dtype_name(dts[di]), big ? " (large)" : "");
                    tn_free(&t);
                    for (int i = 0; i < k; i++) fr_tensor_free(ins[i]);
                }
            }
        }
    }
}

/* ---- Pow ---- */

static void test_pow(void)
{
    fr_rng r = fr_test_rng("gpu_pow");
    const fr_dtype fexp[4] = {FR_F32, FR_F64, FR_I32, FR_I64};
    for (int bi = 0; bi < 2; bi++) {
        fr_dtype bdt = bi ? FR_F64 : FR_F32;
        for (int ei = 0; ei < 4; ei++) {
            for (int s = 0; s < N_BSHAPES; s++) {
                if (s == N_BSHAPES - 3 && bi) continue;
                fr_tensor *x = tt_rand_uniform(&r, bdt, bshapes[s].a.rank, bshapes[s].a.d, -3, 3);
                sprinkle_some(x, &r, 0);
                fr_tensor *e = fexp[ei] == FR_F32 || fexp[ei] == FR_F64
                                   ? (s % 2 ? tt_rand_ints(&r, fexp[ei], bshapes[s].b.rank, bshapes[s].b.d, -4, 4)
                                            : tt_rand_uniform(&r, fexp[ei], bshapes[s].b.rank, bshapes[s].b.d, -3, 3))
                                   : tt_rand_ints(&r, fexp[ei], bshapes[s].b.rank, bshapes[s].b.d, -4, 6);
                fr_tensor *ins[2] = {x, e};
                tnode t;
                tn_init(&t, "Pow", 15, 2, ins, 0, 1);
                check_case(&t, tol_of(bdt), "Pow %s ^ %s shape pair #%d", fr_dtype_name(bdt), fr_dtype_name(fexp[ei]), s);
                tn_free(&t);
                fr_tensor_free(x);
                fr_tensor_free(e);
            }
        }
        /* scalar exponents with fast paths (2, 3) and others, as input and as constant */
        const double sc[] = {2.0, 3.0, 0.5, -1.0, 0.0, 1.0, -2.0, 2.5};
        for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
            int64_t d[2] = {257, 391};
            fr_tensor *x = tt_rand_uniform(&r, bdt, 2, d, -4, 4);
            sprinkle_some(x, &r, 0);
            fr_tensor *e = tt_scalar(bdt, sc[k]);
            fr_tensor *ins[2] = {x, e};
            for (int cst = 0; cst < 2; cst++) {
                tnode t;
                tn_init(&t, "Pow", 15, 2, ins, cst ? 2u : 0u, 1);
                check_case(&t, sc[k] == 2.0 && bdt == FR_F32 ? 0 : tol_of(bdt), "Pow %s ^ %g (%s)", fr_dtype_name(bdt), sc[k],
                           cst ? "constant" : "input");
                tn_free(&t);
            }
            fr_tensor_free(x);
            fr_tensor_free(e);
        }
    }
    /* integer base: exact with wrapping; negative exponents give 0 unless the base is +-1 */
    const fr_dtype idt[2] = {FR_I32, FR_I64};
    for (int bi = 0; bi < 2; bi++) {
        for (int ei = 0; ei < 2; ei++) {
            for (int s = 0; s < N_BSHAPES; s++) {
                if (s == N_BSHAPES - 3) continue;
                fr_tensor *x = tt_rand_ints(&r, idt[bi], bshapes[s].a.rank, bshapes[s].a.d, -40, 40);
                fr_tensor *e = tt_rand_ints(&r, idt[ei], bshapes[s].b.rank, bshapes[s].b.d, 0, 25);
                int64_t nx = fr_tensor_numel(x), ne = fr_tensor_numel(e);
                if (nx == ne && nx > 4) { /* same shape: negative exponents where the base is nonzero */
                    for (int64_t i = 0; i < ne; i += 3)
                        if (fr_tensor_get_i64(x, i) != 0) put_any(e, i, (double)tt_rand_int(&r, -3, -1));
                    put_any(x, 1, -1);
                    put_any(e, 1, -3);
                    put_any(x, 2, 1);
                    put_any(e, 2, -2);
                }
                fr_tensor *ins[2] = {x, e};
                tnode t;
                tn_init(&t, "Pow", 15, 2, ins, 0, 1);
                check_case(&t, 0, "Pow %s ^ %s shape pair #%d", fr_dtype_name(idt[bi]), fr_dtype_name(idt[ei]), s);
                tn_free(&t);
                fr_tensor_free(x);
                fr_tensor_free(e);
            }
        }
    }
}

/* Integer division by zero is an error on the CPU; the GPU kernel must not fault (it raises
 * the node's device flag instead, which this test cannot see) and returns FR_OK. */
static void test_div_zero_no_crash(void)
{
    fr_rng r = fr_test_rng("gpu_div_zero");
    int64_t d[1] = {1000};
    const char *ops[3] = {"Div", "Mod", "Pow"};
    for (int o = 0; o < 3; o++) {
        fr_tensor *a = tt_rand_ints(&r, FR_I32, 1, d, o == 2 ? 0 : -9, o == 2 ? 0 : 9);
        fr_tensor *b = tt_rand_ints(&r, FR_I32, 1, d, o == 2 ? -2 : 0, 0);
        fr_tensor *ins[2] = {a, b};
        tnode t;
        tn_init(&t, ops[o], 13, 2, ins, 0, 1);
        mark_seen(ops[o]);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE); /* the CPU refuses; outputs are allocated */
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        if (st != FR_OK) fprintf(stderr, "\n  %s by zero on the GPU: %s\n", ops[o], fr_last_error());
        CU_ASSERT_EQUAL(st, FR_OK);
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor_free(a);
        fr_tensor_free(b);
    }
}

/* ---- Where, Expand ---- */

static void test_where_expand(void)
{
    fr_rng r = fr_test_rng("gpu_where_expand");
    const struct {
        shape c, x, y;
    } ws[] = {
        {{3, {3, 1, 5}}, {3, {1, 4, 5}}, {1, {5}}},
        {{1, {100003}}, {1, {100003}}, {1, {100003}}},
        {{2, {300, 257}}, {0, {0}}, {2, {300, 257}}},
        {{0, {0}}, {2, {64, 33}}, {2, {64, 1}}},
        {{2, {0, 4}}, {1, {4}}, {0, {0}}},
        {{3, {17, 1, 129}}, {3, {1, 65, 129}}, {2, {65, 1}}},
    };
    for (int di = 0; di < TT_N_DTYPES; di++) {
        for (size_t s = 0; s < sizeof ws / sizeof ws[0]; s++) {
            fr_tensor *ins[3] = {tt_rand_bits(&r, FR_BOOL, ws[s].c.rank, ws[s].c.d),
                                 tt_rand_bits(&r, tt_dtypes[di], ws[s].x.rank, ws[s].x.d),
                                 tt_rand_bits(&r, tt_dtypes[di], ws[s].y.rank, ws[s].y.d)};
            tnode t;
            tn_init(&t, "Where", 16, 3, ins, 0, 1);
            check_case(&t, 0, "Where %s shape set #%d", fr_dtype_name(tt_dtypes[di]), (int)s);
            tn_free(&t);
            for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
        }
    }
    const struct {
        shape x;
        int n;
        int64_t to[FR_MAX_RANK];
    } es[] = {
        {{2, {3, 1}}, 3, {2, 3, 4}},         {{1, {1}}, 1, {100003}},       {{1, {5}}, 2, {0, 5}},
        {{3, {2, 1, 3}}, 3, {2, 4, 3}},      {{2, {4, 5}}, 1, {1}},          {{0, {0}}, 2, {129, 257}},
        {{2, {1, 257}}, 2, {300, 1}},        {{3, {7, 1, 1}}, 4, {3, 1, 5, 9}}, {{2, {6, 7}}, 2, {6, 7}},
    };
    for (int di = 0; di < TT_N_DTYPES; di++) {
        for (size_t s = 0; s < sizeof es / sizeof es[0]; s++) {
            fr_tensor *x = tt_rand_bits(&r, tt_dtypes[di], es[s].x.rank, es[s].x.d);
            fr_tensor *sh = tt_ints(FR_I64, es[s].n, es[s].to);
            fr_tensor *ins[2] = {x, sh};
            tnode t;
            tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
            check_case(&t, 0, "Expand %s case #%d", fr_dtype_name(tt_dtypes[di]), (int)s);
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(sh);
        }
    }
}

/* ---- backward ops (domain ai.fp8run) ---- */

/* ||x|| over its finite elements (the sprinkled NaN/inf left out). */
static double finite_norm(const fr_tensor *x)
{
    double r2 = 0;
    for (int64_t i = 0; i < fr_tensor_numel(x); i++) {
        const double v = fr_tensor_get_f64(x, i);
        if (isfinite(v)) r2 += v * v;
    }
    return sqrt(r2);
}

static void test_activation_grad(void)
{
    fr_rng r = fr_test_rng("gpu_activation_grad");
    const struct {
        const char *op, *approx;
        int kind; /* v: 0 any, 1 positive, 2 in (-1, 1), 3 in (0, 1) */
        /* f' has roots that its formula reaches by cancellation (Gelu's near -0.75, a
         * difference of two terms), where dy * f'(v) is tiny and only its error relative to
         * |dy| (|f'| <= 1.13 there) means anything: the norm of dy floors the denominator */
        int floor_dy;
    } cases[] = {
        {"Abs", NULL, 0, 0},        {"Exp", NULL, 1, 0},    {"Log", NULL, 1, 0},     {"Sqrt", NULL, 1, 0},
        {"Reciprocal", NULL, 0, 0}, {"Tanh", NULL, 2, 0},   {"Sigmoid", NULL, 3, 0}, {"Relu", NULL, 0, 0},
        {"LeakyRelu", NULL, 0, 0},  {"Erf", NULL, 0, 0},    {"Gelu", NULL, 0, 1},    {"Gelu", "none", 0, 1},
        {"Gelu", "tanh", 0, 1},     {"Softplus", NULL, 0, 0}, {"Sin", NULL, 0, 0},   {"Cos", NULL, 0, 0},
        {"Softsign", NULL, 0, 0},   {"Softcap", NULL, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int di = 0; di < 2; di++) {
            fr_dtype dt = di ? FR_F64 : FR_F32;
            for (int s = 0; s < N_UN_SHAPES; s++) {
                const shape *sh = &un_shapes[s];
                fr_tensor *dy = tt_randn(&r, dt, sh->rank, sh->d, 0, 1);
                fr_tensor *v = cases[c].kind == 1   ? tt_rand_uniform(&r, dt, sh->rank, sh->d, 1e-3, 20)
                               : cases[c].kind == 2 ? tt_rand_uniform(&r, dt, sh->rank, sh->d, -1, 1)
                               : cases[c].kind == 3 ? tt_rand_uniform(&r, dt, sh->rank, sh->d, 0, 1)
                                                    : tt_randn(&r, dt, sh->rank, sh->d, 0, 3);
                sprinkle(dy, &r);
                sprinkle(v, &r);
                int64_t n = fr_tensor_numel(v);
                if (n > 8) { /* the kinks: 0 for Relu/Abs/LeakyRelu */
                    set_f(v, 3, 0.0);
                    set_f(v, 4, -0.0);
                }
                fr_tensor *ins[2] = {dy, v};
                const int has_alpha = strcmp(cases[c].op, "LeakyRelu") == 0 || strcmp(cases[c].op, "Softcap") == 0;
                for (int alpha = 0; alpha < (has_alpha ? 2 : 1); alpha++) {
                    tnode t;
                    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ActivationGrad", 1, 2, ins, 0, 1);
                    TN_ATTR(&t, string, "op", cases[c].op);
                    if (cases[c].approx) TN_ATTR(&t, string, "approximate", cases[c].approx);
                    if (alpha) TN_ATTR(&t, float, "alpha", 0.37f);
                    check_floor(&t, tol_of(dt), cases[c].floor_dy ? finite_norm(dy) : 0,
                                "ActivationGrad op=%s approximate=%s%s %s shape #%d", cases[c].op,
                                cases[c].approx ? cases[c].approx : "-", alpha ? " alpha=0.37" : "", fr_dtype_name(dt), s);
                    tn_free(&t);
                }
                fr_tensor_free(dy);
                fr_tensor_free(v);
            }
        }
    }
}

static void test_pow_grad(void)
{
    fr_rng r = fr_test_rng("gpu_pow_grad");
    const fr_dtype edts[4] = {FR_F32, FR_F64, FR_I32, FR_I64};
    const shape2 ps[] = { /* x, e; dy has the broadcast shape */
        {{2, {65, 33}}, {2, {65, 33}}}, {{2, {300, 257}}, {0, {0}}}, {{2, {300, 257}}, {1, {257}}},
        {{3, {4, 1, 6}}, {2, {3, 1}}},  {{1, {100003}}, {1, {1}}},   {{2, {0, 3}}, {1, {3}}},
    };
    for (int gi = 0; gi < 2; gi++) {
        fr_dtype gdt = gi ? FR_F64 : FR_F32;
        for (int ei = 0; ei < 4; ei++) {
            for (int which = 0; which < 2; which++) {
                if (which && ei >= 2) continue; /* integer exponents have no gradient */
                for (size_t s = 0; s < sizeof ps / sizeof ps[0]; s++) {
                    int rank;
                    int64_t dd[FR_MAX_RANK];
                    FR_ASSERT_OK(fr_broadcast_shape(NULL, ps[s].a.rank, ps[s].a.d, ps[s].b.rank, ps[s].b.d, &rank, dd));
                    fr_tensor *dy = tt_randn(&r, gdt, rank, dd, 0, 1);
                    fr_tensor *x = tt_rand_uniform(&r, gdt, ps[s].a.rank, ps[s].a.d, -3, 3);
                    fr_tensor *e = ei < 2 ? tt_rand_uniform(&r, edts[ei], ps[s].b.rank, ps[s].b.d, -3, 3)
                                          : tt_rand_ints(&r, edts[ei], ps[s].b.rank, ps[s].b.d, -3, 4);
                    int64_t nx = fr_tensor_numel(x);
                    for (int64_t i = 0; i < nx; i += 7) set_f(x, i, 0.0); /* x == 0 conventions */
                    if (ei < 2 && fr_tensor_numel(e) > 5) {
                        set_f(e, 0, 0.0);
                        set_f(e, 1, 2.0);
                    }
                    sprinkle(dy, &r);
                    fr_tensor *ins[3] = {dy, x, e};
                    tnode t;
                    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "PowGrad", 1, 3, ins, 0, 1);
                    TN_ATTR(&t, int, "input", which);
                    check_case(&t, tol_of(gdt), "PowGrad input=%d dy %s e %s shape set #%d", which,
                               fr_dtype_name(gdt), fr_dtype_name(edts[ei]), (int)s);
                    tn_free(&t);
                    fr_tensor_free(dy);
                    fr_tensor_free(x);
                    fr_tensor_free(e);
                }
            }
        }
    }
}

static void test_fmod_grad(void)
{
    fr_rng r = fr_test_rng("gpu_fmod_grad");
    const shape2 ps[] = {
        {{2, {65, 33}}, {2, {65, 33}}}, {{2, {300, 257}}, {0, {0}}}, {{2, {300, 257}}, {2, {300, 1}}},
        {{3, {4, 1, 6}}, {2, {3, 1}}},  {{1, {100003}}, {1, {100003}}}, {{2, {0, 3}}, {1, {3}}},
    };
    for (int di = 0; di < 2; di++) {
        fr_dtype dt = di ? FR_F64 : FR_F32;
        for (size_t s = 0; s < sizeof ps / sizeof ps[0]; s++) {
            int rank;
            int64_t dd[FR_MAX_RANK];
            FR_ASSERT_OK(fr_broadcast_shape(NULL, ps[s].a.rank, ps[s].a.d, ps[s].b.rank, ps[s].b.d, &rank, dd));
            fr_tensor *ins[3] = {tt_randn(&r, dt, rank, dd, 0, 1),
                                 tt_rand_uniform(&r, dt, ps[s].a.rank, ps[s].a.d, -100, 100),
                                 tt_rand_uniform(&r, dt, ps[s].b.rank, ps[s].b.d, -7, 7)};
            sprinkle(ins[1], &r);
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "FmodGrad", 1, 3, ins, 0, 1);
            check_case(&t, 0, "FmodGrad %s shape set #%d", fr_dtype_name(dt), (int)s);
            tn_free(&t);
            for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
        }
    }
}

static void test_extremum_grad(void)
{
    fr_rng r = fr_test_rng("gpu_extremum_grad");
    const shape pool[] = {{3, {4, 3, 5}}, {2, {3, 5}}, {1, {5}}, {3, {4, 1, 5}}, {0, {0}}, {3, {1, 1, 1}},
                          {2, {3, 1}}};
    const int counts[4] = {1, 2, 3, 7};
    for (int mi = 0; mi < 2; mi++) {
        const char *mode = mi ? "Min" : "Max";
        for (int di = 0; di < 2; di++) {
            fr_dtype dt = di ? FR_F64 : FR_F32;
            for (int ci = 0; ci < 4; ci++) {
                for (int big = 0; big < 3; big++) { /* small broadcast, large, empty */
                    int k = counts[ci];
                    int64_t dyd[3] = {4, 3, 5};
                    int dyr = 3;
                    if (big == 1) {
                        dyr = 2;
                        dyd[0] = 1001;
                        dyd[1] = 131;
                    } else if (big == 2) {
                        dyr = 2;
                        dyd[0] = 0;
                        dyd[1] = 5;
                    }
                    fr_tensor *ins[8];
                    ins[0] = tt_randn(&r, dt, dyr, dyd, 0, 1);
                    for (int i = 0; i < k; i++) {
                        shape s = pool[(i + ci) % 7];
                        if (big) { /* same shape as dy, or a scalar */
                            s.rank = i == 1 ? 0 : dyr;
                            memcpy(s.d, dyd, sizeof dyd);
                        }
                        if (k == 1) { /* one input must have dy's shape */
                            s.rank = dyr;
                            memcpy(s.d, dyd, sizeof dyd);
                        }
                        ins[i + 1] = tt_rand_ints(&r, dt, s.rank, s.d, -2, 2); /* ties */
                        sprinkle(ins[i + 1], &r);
                    }
                    tnode t;
                    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ExtremumGrad", 1, k + 1, ins, 0, k);
                    TN_ATTR(&t, string, "mode", mode);
                    check_case(&t, 0, "ExtremumGrad mode=%s k=%d %s case %d", mode, k, fr_dtype_name(dt), big);
                    tn_free(&t);
                    for (int i = 0; i <= k; i++) fr_tensor_free(ins[i]);
                }
            }
        }
    }
}

static void test_clip_grad(void)
{
    fr_rng r = fr_test_rng("gpu_clip_grad");
    const int64_t sizes[4] = {0, 1, 1000, 200003};
    for (int di = 0; di < 2; di++) {
        fr_dtype dt = di ? FR_F64 : FR_F32;
        for (int si = 0; si < 4; si++) {
            int64_t n = sizes[si];
            /* dy of one sign: a bound's gradient sums dy over the clipped elements, and a sum of
             * mixed signs can cancel to near zero, where any other summation order is far more than
             * 1e-12 off relatively (1.6e-12 seen at n 200003 in float64) */
            fr_tensor *dy = tt_rand_uniform(&r, dt, 1, &n, 0.5, 1.5);
            fr_tensor *x = tt_rand_ints(&r, dt, 1, &n, -6, 6); /* values at the bounds */
            sprinkle(x, &r);
            /* bounds: mode bit 0 lo input, bit 1 hi input, 4: lo > hi inputs, 5: attributes,
             * 6: attributes with lo > hi */
            for (int mode = 0; mode < 7; mode++) {
                int has_lo = mode == 4 || (mode < 4 && (mode & 1)), has_hi = mode == 4 || (mode < 4 && (mode & 2));
                fr_tensor *lo = tt_scalar(dt, mode == 4 ? 3 : -2), *hi = tt_scalar(dt, mode == 4 ? -1 : 4);
                fr_tensor *ins[4] = {dy, x, has_lo ? lo : NULL, has_hi ? hi : NULL};
                int n_in = has_hi ? 4 : has_lo ? 3 : 2;
                for (int which = 0; which < 3; which++) {
                    if ((which == 1 && !has_lo) || (which == 2 && !has_hi)) continue;
                    tnode t;
                    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ClipGrad", 1, n_in, ins, 0, 1);
                    TN_ATTR(&t, int, "input", which);
                    if (mode >= 5) {
                        TN_ATTR(&t, float, "min", mode == 5 ? -2.0f : 3.0f);
                        TN_ATTR(&t, float, "max", mode == 5 ? 4.0f : -1.0f);
                    }
                    check_case(&t, which ? tol_of(dt) : 0, "ClipGrad input=%d bounds mode %d %s n=%lld", which, mode,
                               fr_dtype_name(dt), (long long)n);
                    tn_free(&t);
                }
                fr_tensor_free(lo);
                fr_tensor_free(hi);
            }
            fr_tensor_free(dy);
            fr_tensor_free(x);
        }
    }
}

/* ---- coverage: every op of the three CPU families ran on the GPU above ---- */

static void test_coverage(void)
{
    const fr_op_def *tables[3] = {fr_ops_unary, fr_ops_binary, fr_ops_elementwise_grad};
    int missing = 0;
    for (int tb = 0; tb < 3; tb++) {
        for (const fr_op_def *d = tables[tb]; d->op_type; d++) {
            int found = 0;
            for (int i = 0; i < n_seen && !found; i++) found = strcmp(seen[i], d->op_type) == 0;
            if (!found) {
                fprintf(stderr, "\n  op %s has no GPU test here (add one)\n", d->op_type);
                missing++;
            }
        }
    }
    CU_ASSERT_EQUAL(missing, 0);
}

/* float32 unary ops and ActivationGrad take 16-byte accesses with two vectors in flight per
 * thread: sizes past one grid stride of vectors (the unrolled loop), with and without a tail
 * of n % 4 elements; the element functions are the scalar kernels', so the tolerances are
 * the float32 ones above (the exact ops exact). */
static void test_vec4_large(void)
{
    fr_rng r = fr_test_rng("gpu_vec4_large");
    static const shape big[] = {{2, {2048, 1024}}, {2, {1031, 2053}}};
    static const struct {
        const char *op, *approx;
        int exact;
    } ops[] = {{"Gelu", "none", 0}, {"Gelu", "tanh", 0}, {"Relu", NULL, 1}, {"Sigmoid", NULL, 0}};
    for (int s = 0; s < 2; s++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            fr_tensor *x = tt_randn(&r, FR_F32, big[s].rank, big[s].d, 0, 3);
            fr_tensor *dy = tt_randn(&r, FR_F32, big[s].rank, big[s].d, 0, 1);
            tnode t;
            tn_init(&t, ops[o].op, 20, 1, &x, 0, 1);
            if (ops[o].approx) TN_ATTR(&t, string, "approximate", ops[o].approx);
            check_case(&t, ops[o].exact ? 0 : tol_of(FR_F32), "%s approximate=%s float32 [%lld, %lld]", ops[o].op,
                       ops[o].approx ? ops[o].approx : "-", (long long)big[s].d[0], (long long)big[s].d[1]);
            tn_free(&t);
            fr_tensor *ins[2] = {dy, x};
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ActivationGrad", 1, 2, ins, 0, 1);
            TN_ATTR(&t, string, "op", ops[o].op);
            if (ops[o].approx) TN_ATTR(&t, string, "approximate", ops[o].approx);
            check_case(&t, tol_of(FR_F32), "ActivationGrad op=%s approximate=%s float32 [%lld, %lld]", ops[o].op,
                       ops[o].approx ? ops[o].approx : "-", (long long)big[s].d[0], (long long)big[s].d[1]);
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(dy);
        }
}

static CU_TestInfo tests[] = {
    {"unary_float", test_unary_float},
    {"gelu_fp8run", test_gelu_fp8run},
    {"unary_int_and_attrs", test_unary_int_and_attrs},
    {"predicates", test_predicates},
    {"cast_matrix", test_cast_matrix},
    {"cast_large_and_castlike", test_cast_large_and_castlike},
    {"clip", test_clip},
    {"identity_dropout", test_identity_dropout},
    {"binary", test_binary},
    {"variadic", test_variadic},
    {"pow", test_pow},
    {"div_zero_no_crash", test_div_zero_no_crash},
    {"where_expand", test_where_expand},
    {"activation_grad", test_activation_grad},
    {"vec4_large: unary and ActivationGrad past one grid stride, with tails", test_vec4_large},
    {"pow_grad", test_pow_grad},
    {"fmod_grad", test_fmod_grad},
    {"extremum_grad", test_extremum_grad},
    {"clip_grad", test_clip_grad},
    {"coverage", test_coverage}, /* last: counts the ops the tests above ran */
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_elementwise", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
