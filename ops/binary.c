/* Binary / n-ary elementwise op family with numpy multidirectional broadcasting:
 * arithmetic (Add, Sub, Mul, Div, Pow, Mod), variadic Max, Min, Sum, Mean, comparisons
 * (Equal, Less, LessOrEqual, Greater, GreaterOrEqual -> bool), logic (And, Or, Xor on
 * bool), Where (3-way broadcast, any dtype) and Expand (any dtype, static shape input).
 *
 * Iteration is ops/elementwise_util.c's fr_ew_run; each op supplies an inner-run kernel
 * that specializes on which operands repeat (step 0), so same-shape, scalar and row
 * broadcasts run as plain loops.
 *
 * Integer semantics: +, -, * wrap modulo 2^bits (no C overflow); Div truncates toward zero
 * and INT_MIN / -1 wraps to INT_MIN; a zero divisor (Div, Mod) is FR_ERR_RANGE rather than
 * undefined behaviour. Float Max/Min propagate NaN (numpy maximum/minimum).
 *
 * Gradient rules (PyTorch's autograd conventions) reduce broadcast dims with
 * fr_grad_sum_to; Pow, Max/Min and Mod use the fused kernels of ops/elementwise_grad.c.
 * Comparisons and logic give bool values, which carry no gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise_grad.h"
#include "ops/elementwise_util.h"
#include "ops/ew_math.h"
#include "ops/op.h"

/* ---- inner-run kernels: generated from the rows of ops/ew_binary.def ---- */

/* y = EXPR(a, b) over one run. UT is the unsigned type of the operands' width (wrapping
 * integer arithmetic); `bad` is the flag passed as arg (division by zero). */
#define BIN(NAME, TA, TY, UTY, EXPR)                                                         \
    static void NAME(int64_t n, char *const *p, const int64_t *s, void *arg)                 \
    {                                                                                        \
        typedef UTY UT;                                                                      \
        ew_flag_t *bad = arg;                                                                \
        TY *y = (TY *)(void *)p[0];                                                          \
        const TA *pa = (const TA *)(const void *)p[1], *pb = (const TA *)(const void *)p[2]; \
        (void)sizeof(UT);                                                                    \
        (void)bad;                                                                           \
        if (s[1] && s[2]) {                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                \
                const TA a = pa[i], b = pb[i];                                               \
                BIN_USE(a, b);                                                               \
                y[i] = (TY)(EXPR);                                                           \
            }                                                                                \
        } else if (s[1]) {                                                                   \
            const TA b = pb[0];                                                              \
            for (int64_t i = 0; i < n; i++) {                                                \
                const TA a = pa[i];                                                          \
                BIN_USE(a, b);                                                               \
                y[i] = (TY)(EXPR);                                                           \
            }                                                                                \
        } else if (s[2]) {                                                                   \
            const TA a = pa[0];                                                              \
            for (int64_t i = 0; i < n; i++) {                                                \
                const TA b = pb[i];                                                          \
                BIN_USE(a, b);                                                               \
                y[i] = (TY)(EXPR);                                                           \
            }                                                                                \
        } else {                                                                             \
            const TA a = pa[0], b = pb[0];                                                   \
            BIN_USE(a, b);                                                                   \
            const TY v = (TY)(EXPR);                                                         \
            for (int64_t i = 0; i < n; i++) y[i] = v;                                        \
        }                                                                                    \
    }
#define BIN_USE(a, b) ((void)(a), (void)(b)) /* a math row may not read both */
#define BIN_OUT_0(TA) TA                     /* OUT_BOOL 0: the input type */
#define BIN_OUT_1(TA) uint8_t                /* OUT_BOOL 1: bool */

/* every dtype of every math row; a missing column (EW_NONE) gives a kernel that is never used */
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B)                                           \
    BIN(bm_##ID##_f32, float, BIN_OUT_##OUT_BOOL(float), uint32_t, EW_EXPR(F))              \
    BIN(bm_##ID##_f64, double, BIN_OUT_##OUT_BOOL(double), uint64_t, EW_EXPR(F))            \
    BIN(bm_##ID##_i32, int32_t, BIN_OUT_##OUT_BOOL(int32_t), uint32_t, EW_EXPR(I))          \
    BIN(bm_##ID##_i64, int64_t, BIN_OUT_##OUT_BOOL(int64_t), uint64_t, EW_EXPR(I))          \
    BIN(bm_##ID##_b, uint8_t, uint8_t, uint8_t, EW_EXPR(B))
#include "ops/ew_binary.def"

/* the kernel of math row m for dtype slot d (bin_slots below), NULL where the row has none */
static const fr_ew_fn bm_fns[FR_BM_COUNT][5] = {
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B)                                           \
    [FR_BM_##ID] = {EW_HAS(F) ? bm_##ID##_f32 : NULL, EW_HAS(F) ? bm_##ID##_f64 : NULL,      \
                    EW_HAS(I) ? bm_##ID##_i32 : NULL, EW_HAS(I) ? bm_##ID##_i64 : NULL,      \
                    EW_HAS(B) ? bm_##ID##_b : NULL},
#include "ops/ew_binary.def"
};

static const struct {
    fr_dtype dt;
    int cls;
} bin_slots[5] = {
    {FR_F32, EW_DT_F}, {FR_F64, EW_DT_F}, {FR_I32, EW_DT_I}, {FR_I64, EW_DT_I}, {FR_BOOL, EW_DT_B},
};

/* ---- the kinds: op name -> math row and dtypes ---- */

typedef struct bin_kind {
    const char *name; /* op_type, or "Mod/fmod" for Mod with fmod=1 */
    int math;         /* FR_BM_* */
    int out_bool;
    int variadic;     /* 1..N inputs (Max, Min, Sum, Mean) */
    int dts;          /* EW_DT_* */
    int grad;         /* EW_BG_* */
} bin_kind;

static const bin_kind bin_kinds[] = {
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    [FR_BK_##ID] = {NAME, FR_BM_##MATH, FR_BM_OUT_BOOL_##MATH, VARIADIC, DTYPES, GRAD},
#include "ops/ew_binary.def"
};
EW_STATIC_ASSERT(sizeof bin_kinds / sizeof bin_kinds[0] == FR_BK_COUNT, "one kind per ew_binary.def op");

static const bin_kind *bin_kind_named(const char *name)
{
    for (size_t i = 0; i < sizeof bin_kinds / sizeof bin_kinds[0]; i++)
        if (strcmp(bin_kinds[i].name, name) == 0) return &bin_kinds[i];
    return NULL;
}

static fr_status bin_kind_of(const fr_node *n, const bin_kind **out)
{
    const char *name = n->op_type;
    if (strcmp(name, "Mod") == 0) {
        int64_t fm;
        FR_TRY(fr_node_attr_int(n, "fmod", 0, &fm));
        if (fm != 0 && fm != 1)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "fmod=%lld is not 0 or 1", (long long)fm);
        if (fm) name = bin_kinds[FR_BK_MOD_FMOD].name;
    }
    *out = bin_kind_named(name);
    if (*out) return FR_OK;
    return fr_node_error(n, FR_ERR_INTERNAL, "not a binary elementwise op");
}

static fr_ew_fn bin_fn_of(const bin_kind *k, fr_dtype dt)
{
    for (int i = 0; i < 5; i++)
        if (bin_slots[i].dt == dt && (k->dts & bin_slots[i].cls)) return bm_fns[k->math][i];
    return NULL;
}

static fr_status bin_dtype_error(const fr_node *n, const bin_kind *k, fr_dtype dt)
{
    char list[128] = "";
    size_t off = 0;
    for (int i = 0; i < 5 && off < sizeof list; i++)
        if (k->dts & bin_slots[i].cls)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", off ? ", " : "",
                                    fr_dtype_name(bin_slots[i].dt));
    if (k == &bin_kinds[FR_BK_MOD] && fr_dtype_is_float(dt))
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "input dtype %s needs fmod=1 (ONNX requires it for floating point)",
                             fr_dtype_name(dt));
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (supported: %s)",
                         fr_dtype_name(dt), list);
}

/* Every input present with a known static shape and the same dtype as input 0; output
 * shape = broadcast of them all. */
static fr_status infer_broadcast_all(fr_graph *g, const fr_node *n, int first, int *rank,
                                     int64_t *dims)
{
    FR_TRY(fr_infer_require_inputs(g, n, n->n_inputs, n->n_inputs));
    const fr_value *x0 = fr_node_in(g, n, first);
    *rank = x0->rank;
    memcpy(dims, x0->dims, sizeof(int64_t) * (size_t)x0->rank);
    for (int i = 0; i < n->n_inputs; i++) {
        const fr_value *v = fr_node_in(g, n, i);
        if (i >= first && v->dtype != x0->dtype)
            return fr_node_error(n, FR_ERR_SHAPE, "input %d ('%s') is %s but input %d ('%s') is %s",
                                 i, v->name, fr_dtype_name(v->dtype), first, x0->name,
                                 fr_dtype_name(x0->dtype));
        int64_t tmp[FR_MAX_RANK];
        int r;
        FR_TRY(fr_broadcast_shape(n, *rank, dims, v->rank, v->dims, &r, tmp));
        *rank = r;
        memcpy(dims, tmp, sizeof(int64_t) * (size_t)r);
    }
    return FR_OK;
}

static fr_status bin_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    const bin_kind *k;
    FR_TRY(bin_kind_of(n, &k));
    if (k->variadic ? n->n_inputs < 1 : n->n_inputs != 2)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs, expected %s", n->n_inputs,
                             k->variadic ? "at least 1" : "2");
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(infer_broadcast_all(g, n, 0, &rank, dims));
    fr_dtype dt = fr_node_in(g, n, 0)->dtype;
    if (!bin_fn_of(k, dt)) return bin_dtype_error(n, k, dt);
    fr_infer_set(g, n, 0, k->out_bool ? FR_BOOL : dt, rank, dims);
    return FR_OK;
}

/* The kernel's inputs and output have the dtypes infer() gave them. */
static fr_status check_run_dtypes(const fr_kernel_ctx *ctx, int first, fr_dtype out_dt)
{
    const fr_node *n = ctx->node;
    if (!ctx->out[0] || ctx->out[0]->dtype != out_dt)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s (re-run shape inference)",
                             fr_dtype_name(out_dt));
    for (int i = 0; i < ctx->n_in; i++) {
        if (!ctx->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
        if (i >= first && ctx->in[i]->dtype != ctx->in[first]->dtype)
            return fr_node_error(n, FR_ERR_SHAPE, "input %d is %s but input %d is %s", i,
                                 fr_dtype_name(ctx->in[i]->dtype), first,
                                 fr_dtype_name(ctx->in[first]->dtype));
    }
    return FR_OK;
}

static fr_status div_zero_error(const fr_node *n)
{
    return fr_node_error(n, FR_ERR_RANGE, "integer division by zero");
}

static fr_status bin_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const bin_kind *k;
    FR_TRY(bin_kind_of(n, &k));
    if (ctx->n_in < 1 || (!k->variadic && ctx->n_in != 2))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs", ctx->n_in);
    if (!ctx->in[0]) return fr_node_error(n, FR_ERR_GRAPH, "input 0 is missing");
    fr_dtype dt = ctx->in[0]->dtype;
    fr_ew_fn fn = bin_fn_of(k, dt);
    if (!fn) return bin_dtype_error(n, k, dt);
    FR_TRY(check_run_dtypes(ctx, 0, k->out_bool ? FR_BOOL : dt));
    fr_tensor *y = ctx->out[0];
    int bad = 0;
    if (ctx->n_in == 1) {
        FR_TRY(fr_ew_broadcast_copy(n, y, ctx->in[0]));
    } else {
        fr_tensor *ops[3] = {y, ctx->in[0], ctx->in[1]};
        FR_TRY(fr_ew_run(n, 3, ops, fn, &bad));
        for (int i = 2; i < ctx->n_in; i++) { /* variadic: fold the rest in place */
            fr_tensor *acc[3] = {y, y, ctx->in[i]};
            FR_TRY(fr_ew_run(n, 3, acc, fn, &bad));
        }
    }
    if (bad) return div_zero_error(n);
    if (k == &bin_kinds[FR_BK_MEAN]) {
        int64_t cnt = fr_tensor_numel(y);
        if (dt == FR_F32) {
            float *v = y->data, d = (float)ctx->n_in;
            for (int64_t i = 0; i < cnt; i++) v[i] /= d;
        } else {
            double *v = y->data, d = (double)ctx->n_in;
            for (int64_t i = 0; i < cnt; i++) v[i] /= d;
        }
    }
    return FR_OK;
}

/* ---- Pow ----
 * Float base (float32/float64) with a float or integer exponent: pow() in double, rounded
 * once; negative bases give real results for integral exponents and NaN otherwise (C/numpy).
 * Integer base with an integer exponent: exact with wrapping; a negative exponent gives the
 * truncated 1 / x^|e| (so 0 unless x is +-1), and 0 to a negative power is FR_ERR_RANGE.
 * The exponent is first converted to double (float base) or int64 (integer base). */

static int pow_dtype_ok(fr_dtype dt)
{
    return dt == FR_F32 || dt == FR_F64 || dt == FR_I32 || dt == FR_I64;
}

#define POW(NAME, TB, TE, EXPR)                                                              \
    static void NAME(int64_t n, char *const *p, const int64_t *s, void *arg)                 \
    {                                                                                        \
        ew_flag_t *bad_ = arg;                                                               \
        TB *y = (TB *)(void *)p[0];                                                          \
        const TB *a = (const TB *)(const void *)p[1];                                        \
        const TE *b = (const TE *)(const void *)p[2];                                        \
        (void)bad_;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                    \
            const TB x0 = a[i * s[1]];                                                       \
            const TE x1 = b[i * s[2]];                                                       \
            y[i] = (TB)(EXPR);                                                               \
        }                                                                                    \
    }

POW(powd_f32, float, double, pow((double)x0, x1))
POW(powd_f64, double, double, pow(x0, x1))
POW(powi_i32, int32_t, int64_t, (uint32_t)ew_ipow(x0, x1, bad_))
POW(powi_i64, int64_t, int64_t, ew_ipow(x0, x1, bad_))

/* x^2, the common float32 case (variance), as one multiply: the same correctly rounded
 * result as pow. */
static void square_f32(int64_t n, char *const *p, const int64_t *s, void *arg)
{
    float *y = (float *)(void *)p[0];
    const float *a = (const float *)(const void *)p[1];
    (void)arg;
    (void)s;
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * a[i];
}

static fr_status pow_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *e = fr_node_in(g, n, 1);
    if (!pow_dtype_ok(x->dtype) || !pow_dtype_ok(e->dtype) ||
        (fr_dtype_is_int(x->dtype) && !fr_dtype_is_int(e->dtype)))
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "base %s with exponent %s is not supported (float32/float64 base "
                             "with a float32/float64/int32/int64 exponent, or int32/int64 "
                             "base with an integer exponent)",
                             fr_dtype_name(x->dtype), fr_dtype_name(e->dtype));
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_broadcast_shape(n, x->rank, x->dims, e->rank, e->dims, &rank, dims));
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

static fr_status pow_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 2 || !ctx->in[0] || !ctx->in[1])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 2 inputs");
    fr_tensor *x = ctx->in[0], *e = ctx->in[1], *y = ctx->out[0];
    int int_base = fr_dtype_is_int(x->dtype);
    if (!pow_dtype_ok(x->dtype) || !pow_dtype_ok(e->dtype) || (int_base && !fr_dtype_is_int(e->dtype)))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "base %s with exponent %s is not supported",
                             fr_dtype_name(x->dtype), fr_dtype_name(e->dtype));
    if (!y || y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s (re-run shape inference)",
                             fr_dtype_name(x->dtype));
    if (x->dtype == FR_F32 && fr_tensor_numel(e) == 1 && fr_tensor_get_f64(e, 0) == 2.0) {
        fr_tensor *ops[2] = {y, x};
        return fr_ew_run(n, 2, ops, square_f32, NULL);
    }
    /* exponent in the computation type */
    fr_tensor *ec;
    FR_TRY(fr_tensor_new(int_base ? FR_I64 : FR_F64, e->rank, e->dims, "Pow exponent", &ec));
    int64_t cnt = fr_tensor_numel(e);
    for (int64_t i = 0; i < cnt; i++) {
        if (int_base)
            ((int64_t *)ec->data)[i] = fr_tensor_get_i64(e, i);
        else
            ((double *)ec->data)[i] = fr_tensor_get_f64(e, i);
    }
    fr_ew_fn fn = x->dtype == FR_F32 ? powd_f32 : x->dtype == FR_F64 ? powd_f64
                : x->dtype == FR_I32 ? powi_i32 : powi_i64;
    int bad = 0;
    fr_tensor *ops[3] = {y, x, ec};
    fr_status st = fr_ew_run(n, 3, ops, fn, &bad);
    fr_tensor_free(ec);
    if (st != FR_OK) return st;
    if (bad) return fr_node_error(n, FR_ERR_RANGE, "0 raised to a negative integer power");
    return FR_OK;
}

/* ---- Where(cond, x, y): any dtype, selected by element size ---- */

#define WHERE_LOOP(T)                                                                        \
    do {                                                                                     \
        T *o = (T *)(void *)p[0];                                                            \
        const T *x = (const T *)(const void *)p[2], *y = (const T *)(const void *)p[3];      \
        for (int64_t i = 0; i < n; i++) o[i] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];      \
    } while (0)

static void where_run(int64_t n, char *const *p, const int64_t *s, void *arg)
{
    const size_t es = *(const size_t *)arg;
    const uint8_t *c = (const uint8_t *)p[1];
    switch (es) {
    case 1: WHERE_LOOP(uint8_t); break;
    case 2: WHERE_LOOP(uint16_t); break;
    case 4: WHERE_LOOP(uint32_t); break;
    case 8: WHERE_LOOP(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(p[0] + (size_t)i * es, c[i * s[1]] ? p[2] + (size_t)(i * s[2]) * es
                                                      : p[3] + (size_t)(i * s[3]) * es, es);
    }
}

static fr_status where_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    if (n->n_inputs != 3) return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs, expected 3", n->n_inputs);
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(infer_broadcast_all(g, n, 1, &rank, dims));
    const fr_value *c = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1);
    if (c->dtype != FR_BOOL)
        return fr_node_error(n, FR_ERR_SHAPE, "condition '%s' must be bool, got %s", c->name,
                             fr_dtype_name(c->dtype));
    if (fr_dtype_size(x->dtype) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(x->dtype));
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

static fr_status where_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 3) return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs");
    FR_TRY(check_run_dtypes(ctx, 1, ctx->in[1] ? ctx->in[1]->dtype : FR_UNDEFINED));
    if (ctx->in[0]->dtype != FR_BOOL)
        return fr_node_error(n, FR_ERR_SHAPE, "condition must be bool, got %s",
                             fr_dtype_name(ctx->in[0]->dtype));
    size_t es = fr_dtype_size(ctx->in[1]->dtype);
    if (es == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(ctx->in[1]->dtype));
    fr_tensor *ops[4] = {ctx->out[0], ctx->in[0], ctx->in[1], ctx->in[2]};
    return fr_ew_run(n, 4, ops, where_run, &es);
}

/* ---- Expand(x, shape): bidirectional broadcast of x with a constant shape ---- */

static fr_status expand_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0);
    if (fr_dtype_size(x->dtype) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(x->dtype));
    int cnt;
    int64_t shape[FR_MAX_RANK];
    FR_TRY(fr_infer_const_shape(g, n, 1, &cnt, shape));
    for (int i = 0; i < cnt; i++)
        if (shape[i] < 0)
            return fr_node_error(n, FR_ERR_SHAPE, "shape[%d] = %lld is negative", i, (long long)shape[i]);
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_broadcast_shape(n, x->rank, x->dims, cnt, shape, &rank, dims));
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

static fr_status expand_cpu(const fr_kernel_ctx *ctx)
{
    if (ctx->n_in < 1 || !ctx->in[0] || !ctx->out[0])
        return fr_node_error(ctx->node, FR_ERR_GRAPH, "input or output missing");
    return fr_ew_broadcast_copy(ctx->node, ctx->out[0], ctx->in[0]);
}

/* ---- gradient rules ---- */

/* din[i] = grad summed down to input i's shape. */
static fr_status give(fr_grad_ctx *ctx, int i, int grad)
{
    return fr_grad_sum_to(ctx, grad, ctx->g->nodes[ctx->node_id].inputs[i], &ctx->din[i]);
}

static fr_status emit2(fr_grad_ctx *ctx, const char *op, int a, int b, int *out)
{
    int in[2] = {a, b};
    return fr_grad_op1(ctx, op, 2, in, out);
}

static fr_status emit_neg(fr_grad_ctx *ctx, int a, int *out)
{
    int in[1] = {a};
    return fr_grad_op1(ctx, "Neg", 1, in, out);
}

/* Max/Min of k >= 2 inputs: one ExtremumGrad node gives every input its share. */
static fr_status extremum_grad(fr_grad_ctx *ctx, const char *mode)
{
    fr_graph *g = ctx->g;
    const int k = g->nodes[ctx->node_id].n_inputs;
    int *in = fr_malloc((size_t)(k + 1) * sizeof(int), "ExtremumGrad inputs");
    int *outs = fr_malloc((size_t)k * sizeof(int), "ExtremumGrad outputs");
    fr_status st = in && outs ? FR_OK : FR_ERR_OOM;
    int nid = -1;
    if (st == FR_OK) {
        in[0] = ctx->dout[0];
        memcpy(in + 1, g->nodes[ctx->node_id].inputs, (size_t)k * sizeof(int));
        st = fr_grad_node(ctx, "ExtremumGrad", FR_DOMAIN_FP8RUN, k + 1, in, k, outs, &nid);
    }
    if (st == FR_OK) st = fr_node_set_attr_string(&g->nodes[nid], "mode", mode);
    if (st == FR_OK) st = fr_grad_finish(ctx, nid);
    for (int i = 0; st == FR_OK && i < k; i++)
        if (ctx->need_din[i]) st = give(ctx, i, outs[i]);
    free(in);
    free(outs);
    return st;
}

static fr_status bin_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dy = ctx->dout[0], k = n->n_inputs;
    if (dy < 0) return FR_OK;
    const int a = n->inputs[0], b = k > 1 ? n->inputs[1] : -1, y = n->outputs[0];
    const bin_kind *kind = bin_kind_named(n->op_type);
    const int rule = kind ? kind->grad : EW_BG_NONE;
    char op[16];
    snprintf(op, sizeof op, "%s", n->op_type); /* n moves when nodes are added */
    int t, u;
    if (rule == EW_BG_ADD) {
        for (int i = 0; i < k; i++)
            if (ctx->need_din[i]) FR_TRY(give(ctx, i, dy));
    } else if (rule == EW_BG_SUB) {
        if (ctx->need_din[0]) FR_TRY(give(ctx, 0, dy));
        if (ctx->need_din[1]) {
            FR_TRY(fr_grad_sum_to(ctx, dy, b, &t)); /* negate the smaller tensor */
            FR_TRY(emit_neg(ctx, t, &ctx->din[1]));
        }
    } else if (rule == EW_BG_MUL) {
        if (ctx->need_din[0]) {
            FR_TRY(emit2(ctx, "Mul", dy, b, &t));
            FR_TRY(give(ctx, 0, t));
        }
        if (ctx->need_din[1]) {
            FR_TRY(emit2(ctx, "Mul", dy, a, &t));
            FR_TRY(give(ctx, 1, t));
        }
    } else if (rule == EW_BG_DIV) {
        /* d/da = dy / b; d/db = -dy a / b^2 = -(dy / b) * y */
        FR_TRY(emit2(ctx, "Div", dy, b, &t));
        if (ctx->need_din[0]) FR_TRY(give(ctx, 0, t));
        if (ctx->need_din[1]) {
            FR_TRY(emit2(ctx, "Mul", t, y, &u));
            FR_TRY(fr_grad_sum_to(ctx, u, b, &t));
            FR_TRY(emit_neg(ctx, t, &ctx->din[1]));
        }
    } else if (rule == EW_BG_MEAN) {
        t = dy;
        if (k > 1) {
            int kv;
            FR_TRY(fr_grad_scalar(ctx, (double)k, dy, &kv));
            FR_TRY(emit2(ctx, "Div", dy, kv, &t));
        }
        for (int i = 0; i < k; i++)
            if (ctx->need_din[i]) FR_TRY(give(ctx, i, t));
    } else if (rule == EW_BG_EXTREMUM) {
        if (k == 1) {
            if (ctx->need_din[0]) ctx->din[0] = dy;
        } else {
            FR_TRY(extremum_grad(ctx, op));
        }
    } else if (rule == EW_BG_FMOD) {
        /* float Mod is fmod (infer refuses fmod=0 for floats): d/da = dy, d/db = -dy trunc(a/b) */
        if (ctx->need_din[0]) FR_TRY(give(ctx, 0, dy));
        if (ctx->need_din[1]) {
            int in[3] = {dy, a, b}, nid;
            FR_TRY(fr_grad_node(ctx, "FmodGrad", FR_DOMAIN_FP8RUN, 3, in, 1, &t, &nid));
            FR_TRY(fr_grad_finish(ctx, nid));
            FR_TRY(give(ctx, 1, t));
        }
    } else {
        return fr_node_error(n, FR_ERR_INTERNAL, "no gradient rule for this op");
    }
    return FR_OK;
}

/* Pow: one PowGrad node per input that needs a gradient (the exponent only when float). */
static fr_status pow_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    int in[3] = {ctx->dout[0], n->inputs[0], n->inputs[1]};
    if (in[0] < 0) return FR_OK;
    for (int i = 0; i < 2; i++) {
        if (!ctx->need_din[i]) continue;
        int t, nid;
        FR_TRY(fr_grad_node(ctx, "PowGrad", FR_DOMAIN_FP8RUN, 3, in, 1, &t, &nid));
        FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "input", i));
        FR_TRY(fr_grad_finish(ctx, nid));
        FR_TRY(give(ctx, i, t));
    }
    return FR_OK;
}

/* Where: dX = Where(cond, dy, 0), dY = Where(cond, 0, dy), each summed to its input's shape;
 * the bool condition has none. */
static fr_status where_grad(fr_grad_ctx *ctx)
{
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    const int dy = ctx->dout[0], cond = n->inputs[0];
    if (dy < 0 || (!ctx->need_din[1] && !ctx->need_din[2])) return FR_OK;
    int zero;
    FR_TRY(fr_grad_scalar(ctx, 0.0, dy, &zero));
    for (int i = 1; i <= 2; i++) {
        if (!ctx->need_din[i]) continue;
        int in[3] = {cond, i == 1 ? dy : zero, i == 1 ? zero : dy}, t;
        FR_TRY(fr_grad_op1(ctx, "Where", 3, in, &t));
        FR_TRY(give(ctx, i, t));
    }
    return FR_OK;
}

/* Expand: the broadcast copies' gradients add up. */
static fr_status expand_grad(fr_grad_ctx *ctx)
{
    if (ctx->dout[0] < 0 || !ctx->need_din[0]) return FR_OK;
    return give(ctx, 0, ctx->dout[0]);
}

/* ---- the table ---- */

const fr_op_def fr_ops_binary[] = {
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    {NAME, DOMAIN, OPSET, bin_infer, bin_cpu, (GRAD) == EW_BG_NONE ? NULL : bin_grad, 0},
#define FR_BIN_VARIANT(ID, NAME, DOMAIN, MATH, DTYPES, VARIADIC, GRAD) /* not an op */
#include "ops/ew_binary.def"
    {"Pow", FR_DOMAIN_ONNX, 7, pow_infer, pow_cpu, pow_grad, 0},
    {"Where", FR_DOMAIN_ONNX, 9, where_infer, where_cpu, where_grad, 0},
    {"Expand", FR_DOMAIN_ONNX, 8, expand_infer, expand_cpu, expand_grad, 0},
    {0},
};
