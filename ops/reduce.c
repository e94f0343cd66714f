/* Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
 * ReduceL1, ReduceL2, ReduceLogSumExp, and ArgMax / ArgMin.
 *
 * Axes are an attribute before opset 13 (ReduceSum) / 18 (the others) and an optional
 * constant input from then on; which form is read follows the node's opset. Absent or
 * empty axes reduce every axis, unless noop_with_empty_axes=1 (input form only), which
 * reduces over no axis: each output is the reduction of a single element, so ReduceSumSquare
 * gives x*x and ReduceL2 |x| (the ONNX reference and onnxruntime agree). Repeated axes count
 * once (as onnxruntime accepts them).
 *
 * Float inputs (float32, float64) accumulate in double, so float32 sums and means are
 * accurate to the final rounding. Integer inputs (int32, int64) are supported for Sum, Mean
 * (truncating division), Max, Min and Prod; sums and products wrap modulo 2^bits.
 * Empty reductions give the identity: 0 for sums and norms, 1 for Prod, -inf / +inf (the
 * integer type's min / max) for Max / Min, -inf for LogSumExp, and NaN for a float Mean
 * (0 / 0, as numpy; the spec leaves it undefined). Max / Min propagate NaN like numpy and
 * torch; ArgMax / ArgMin treat NaN as the extreme value (numpy's argmax/argmin), so they
 * agree with ReduceMax / ReduceMin.
 *
 * Every reduction's gradient is one fused ai.fp8run::ReduceGrad node (reduce_grad.c; the
 * gradient rule that emits it is at the end of this file). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "ops/reduce.h"

typedef struct red_def {
    const char *op;
    red_kind kind;
    int axes_input_opset; /* first opset where axes is an input */
    int ints;             /* int32/int64 supported */
} red_def;

static const red_def red_defs[] = {
    {"ReduceSum", R_SUM, 13, 1},         {"ReduceMean", R_MEAN, 18, 1},
    {"ReduceMax", R_MAX, 18, 1},         {"ReduceMin", R_MIN, 18, 1},
    {"ReduceProd", R_PROD, 18, 1},       {"ReduceSumSquare", R_SUMSQ, 18, 0},
    {"ReduceL1", R_L1, 18, 0},           {"ReduceL2", R_L2, 18, 0},
    {"ReduceLogSumExp", R_LSE, 18, 0},
};

static fr_status red_def_of(const fr_node *n, const red_def **out)
{
    for (size_t i = 0; i < sizeof red_defs / sizeof red_defs[0]; i++)
        if (strcmp(red_defs[i].op, n->op_type) == 0) {
            *out = &red_defs[i];
            return FR_OK;
        }
    return fr_node_error(n, FR_ERR_INTERNAL, "not a reduction");
}

static int is_int_dt(fr_dtype dt) { return dt == FR_I32 || dt == FR_I64; }

static fr_status red_check_dtype(const fr_node *n, const red_def *d, fr_dtype dt)
{
    if (dt == FR_F32 || dt == FR_F64 || (d->ints && is_int_dt(dt))) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (float32, float64%s)",
                         fr_dtype_name(dt), d->ints ? ", int32, int64" : "");
}

fr_status fr_reduce_bool_attr(const fr_node *n, const char *name, int64_t dflt, int *out)
{
    int64_t v;
    FR_TRY(fr_node_attr_int(n, name, dflt, &v));
    if (v != 0 && v != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s=%lld must be 0 or 1", name, (long long)v);
    *out = (int)v;
    return FR_OK;
}

int fr_reduce_grad_inputs(red_kind k)
{
    switch (k) {
    case R_SUM: case R_MEAN: return 1;
    case R_SUMSQ: case R_L1: case R_PROD: return 2;
    default: return 3;
    }
}

/* Attributes and where the axes come from, by opset. */
typedef struct red_cfg {
    int keepdims, noop;
    int axes_from_input;
    int attr_count;           /* -1: no axes attribute */
    const int64_t *attr_axes;
} red_cfg;

static fr_status red_config(const fr_node *n, int64_t opset, const red_def *d, int n_inputs,
                            red_cfg *c)
{
    memset(c, 0, sizeof *c);
    FR_TRY(fr_reduce_bool_attr(n, "keepdims", 1, &c->keepdims));
    c->axes_from_input = !(opset >= 1 && opset < d->axes_input_opset);
    FR_TRY(fr_node_attr_ints(n, "axes", &c->attr_count, &c->attr_axes));
    if (c->axes_from_input) {
        FR_TRY(fr_reduce_bool_attr(n, "noop_with_empty_axes", 0, &c->noop));
        if (c->attr_count >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "axes is an input from opset %d on, not an attribute (the model "
                                 "imports opset %lld)",
                                 d->axes_input_opset, (long long)opset);
    } else if (n_inputs > 1) {
        return fr_node_error(n, FR_ERR_GRAPH,
                             "takes axes as an attribute before opset %d (the model imports "
                             "opset %lld), but has %d inputs",
                             d->axes_input_opset, (long long)opset, n_inputs);
    }
    return FR_OK;
}

/* Which axes reduce and the output shape. naxes = -1 when no axes were given. */
typedef struct red_plan {
    int rank;
    int64_t dims[FR_MAX_RANK];
    unsigned char red[FR_MAX_RANK];
    int out_rank;
    int64_t out_dims[FR_MAX_RANK];
} red_plan;

static fr_status red_make_plan(const fr_node *n, int rank, const int64_t *dims, int naxes,
                               const int64_t *axes, int keepdims, int noop, red_plan *p)
{
    memset(p, 0, sizeof *p);
    p->rank = rank;
    memcpy(p->dims, dims, sizeof(int64_t) * (size_t)rank);
    if (naxes <= 0) {
        for (int k = 0; k < rank; k++) p->red[k] = !noop;
    } else {
        if (rank == 0)
            return fr_node_error(n, FR_ERR_SHAPE, "axes given for a rank-0 input");
        for (int i = 0; i < naxes; i++) {
            int a;
            FR_TRY(fr_norm_axis(n, axes[i], rank, &a));
            p->red[a] = 1;
        }
    }
    for (int k = 0; k < rank; k++) {
        if (!p->red[k])
            p->out_dims[p->out_rank++] = dims[k];
        else if (keepdims)
            p->out_dims[p->out_rank++] = 1;
    }
    return FR_OK;
}

/* Axes from the kernel's input tensor (malloc'ed copy, NULL when count is 0 or -1). */
static fr_status tensor_axes(const fr_node *n, const fr_tensor *t, int *count, int64_t **vals)
{
    *count = -1;
    *vals = NULL;
    if (!t) return FR_OK;
    if (!fr_dtype_is_int(t->dtype) || t->rank > 1)
        return fr_node_error(n, FR_ERR_SHAPE, "axes must be a 1-D integer tensor, got %s rank %d",
                             fr_dtype_name(t->dtype), t->rank);
    int64_t cnt = fr_tensor_numel(t);
    if (cnt > 1024) return fr_node_error(n, FR_ERR_SHAPE, "axes has %lld entries", (long long)cnt);
    *count = (int)cnt;
    if (cnt == 0) return FR_OK;
    *vals = fr_malloc(sizeof(int64_t) * (size_t)cnt, "reduce axes");
    if (!*vals) return FR_ERR_OOM;
    for (int64_t i = 0; i < cnt; i++) (*vals)[i] = fr_tensor_get_i64(t, i);
    return FR_OK;
}

static fr_status red_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    const red_def *d = NULL;
    FR_TRY(red_def_of(n, &d));
    FR_TRY(fr_infer_require_inputs(g, n, 1, 2));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(red_check_dtype(n, d, x->dtype));
    red_cfg c;
    FR_TRY(red_config(n, fr_graph_opset(g, n->domain), d, n->n_inputs, &c));
    int cnt = c.attr_count;
    int64_t *vals = NULL;
    if (c.axes_from_input) {
        cnt = -1;
        if (fr_node_in(g, n, 1)) FR_TRY(fr_infer_const_ints(g, n, 1, &cnt, &vals));
    }
    red_plan p;
    fr_status st = red_make_plan(n, x->rank, x->dims, cnt, c.axes_from_input ? vals : c.attr_axes,
                                 c.keepdims, c.noop, &p);
    free(vals);
    FR_TRY(st);
    fr_infer_set(g, n, 0, x->dtype, p.out_rank, p.out_dims);
    return FR_OK;
}

/* ---- fold kernels: one contiguous run of `len` inputs into the accumulators, either all
 * into acc[0] (step 0: the run lies along reduced axes) or elementwise (step 1). Float
 * inputs fold into double, integers into int64. `sh` is LogSumExp's per-output shift. ---- */

typedef void (*fold_fn)(const void *x, int64_t len, void *acc, int step, const double *sh);

#define FOLD(NAME, T, AT, STEP)                                                              \
    static void NAME(const void *xv, int64_t len, void *accv, int step, const double *sh)    \
    {                                                                                        \
        const T *x = xv;                                                                     \
        AT *acc = accv;                                                                      \
        if (step == 0) {                                                                     \
            AT a = acc[0];                                                                   \
            const double s_ = sh ? sh[0] : 0.0;                                              \
            (void)s_;                                                                        \
            for (int64_t i = 0; i < len; i++) {                                              \
                const AT v = (AT)x[i];                                                       \
                STEP(a, v, s_);                                                              \
            }                                                                                \
            acc[0] = a;                                                                      \
        } else {                                                                             \
            for (int64_t i = 0; i < len; i++) {                                              \
                const AT v = (AT)x[i];                                                       \
                const double s_ = sh ? sh[i] : 0.0;                                          \
                (void)s_;                                                                    \
                STEP(acc[i], v, s_);                                                         \
            }                                                                                \
        }                                                                                    \
    }

#define S_SUM(a, v, s) a += v
#define S_SUMSQ(a, v, s) a += v * v
#define S_L1(a, v, s) a += fabs(v)
#define S_PROD(a, v, s) a *= v
#define S_MAX(a, v, s) if (v > a || isnan(v)) a = v /* NaN sticks: nothing is > NaN */
#define S_MIN(a, v, s) if (v < a || isnan(v)) a = v
#define S_LSE(a, v, s) a += exp(v - s)
#define S_ISUM(a, v, s) a = (int64_t)((uint64_t)a + (uint64_t)v)
#define S_IPROD(a, v, s) a = (int64_t)((uint64_t)a * (uint64_t)v)
#define S_IMAX(a, v, s) if (v > a) a = v
#define S_IMIN(a, v, s) if (v < a) a = v

#define FOLD_F(NAME, STEP)                                                                   \
    FOLD(NAME##_f32, float, double, STEP) FOLD(NAME##_f64, double, double, STEP)
#define FOLD_I(NAME, STEP)                                                                   \
    FOLD(NAME##_i32, int32_t, int64_t, STEP) FOLD(NAME##_i64, int64_t, int64_t, STEP)

FOLD_F(f_sum, S_SUM)
FOLD_F(f_sumsq, S_SUMSQ)
FOLD_F(f_l1, S_L1)
FOLD_F(f_prod, S_PROD)
FOLD_F(f_max, S_MAX)
FOLD_F(f_min, S_MIN)
FOLD_F(f_lse, S_LSE)
FOLD_I(i_sum, S_ISUM)
FOLD_I(i_prod, S_IPROD)
FOLD_I(i_max, S_IMAX)
FOLD_I(i_min, S_IMIN)

static fold_fn fold_of(red_kind k, fr_dtype dt)
{
    int f32 = dt == FR_F32, i32 = dt == FR_I32;
    if (dt == FR_F32 || dt == FR_F64) {
        switch (k) {
        case R_SUM: case R_MEAN: return f32 ? f_sum_f32 : f_sum_f64;
        case R_SUMSQ: case R_L2: return f32 ? f_sumsq_f32 : f_sumsq_f64;
        case R_L1: return f32 ? f_l1_f32 : f_l1_f64;
        case R_PROD: return f32 ? f_prod_f32 : f_prod_f64;
        case R_MAX: return f32 ? f_max_f32 : f_max_f64;
        case R_MIN: return f32 ? f_min_f32 : f_min_f64;
        case R_LSE: return f32 ? f_lse_f32 : f_lse_f64; /* second pass; the first is R_MAX */
        }
    }
    switch (k) {
    case R_SUM: case R_MEAN: return i32 ? i_sum_i32 : i_sum_i64;
    case R_PROD: return i32 ? i_prod_i32 : i_prod_i64;
    case R_MAX: return i32 ? i_max_i32 : i_max_i64;
    case R_MIN: return i32 ? i_min_i32 : i_min_i64;
    default: return NULL;
    }
}

/* The input's dims with size-1 dims dropped and neighbours of the same kind (reduced or
 * kept) merged, so the innermost loop runs as long as possible. */
typedef struct red_iter {
    int nd;
    int64_t size[FR_MAX_RANK];
    int64_t xs[FR_MAX_RANK]; /* input strides (elements) */
    int64_t as[FR_MAX_RANK]; /* accumulator strides; 0 along reduced dims */
    int last_reduced;
} red_iter;

static void red_make_iter(const red_plan *p, red_iter *it)
{
    unsigned char kind[FR_MAX_RANK];
    memset(it, 0, sizeof *it);
    for (int k = 0; k < p->rank; k++) {
        if (p->dims[k] == 1) continue;
        if (it->nd > 0 && kind[it->nd - 1] == p->red[k]) {
            it->size[it->nd - 1] *= p->dims[k];
        } else {
            kind[it->nd] = p->red[k];
            it->size[it->nd++] = p->dims[k];
        }
    }
    if (it->nd == 0) { /* a single element */
        kind[0] = 0;
        it->size[0] = 1;
        it->nd = 1;
    }
    int64_t xs = 1, as = 1;
    for (int k = it->nd - 1; k >= 0; k--) {
        it->xs[k] = xs;
        xs *= it->size[k];
        it->as[k] = kind[k] ? 0 : as;
        if (!kind[k]) as *= it->size[k];
    }
    it->last_reduced = kind[it->nd - 1];
}

/* Fold every input element into its output's accumulator. */
static void red_run(const red_iter *it, const char *x, size_t es, fold_fn fn, char *acc,
                    size_t as_bytes, const double *shift)
{
    int64_t len = it->size[it->nd - 1], outer = 1;
    for (int k = 0; k + 1 < it->nd; k++) outer *= it->size[k];
    int64_t idx[FR_MAX_RANK] = {0}, xo = 0, ao = 0;
    for (int64_t o = 0; o < outer; o++) {
        fn(x + (size_t)xo * es, len, acc + (size_t)ao * as_bytes, it->last_reduced ? 0 : 1,
           shift ? shift + ao : NULL);
        for (int k = it->nd - 2; k >= 0; k--) {
            xo += it->xs[k];
            ao += it->as[k];
            if (++idx[k] < it->size[k]) break;
            xo -= it->xs[k] * idx[k];
            ao -= it->as[k] * idx[k];
            idx[k] = 0;
        }
    }
}

static double f_init(red_kind k)
{
    switch (k) {
    case R_PROD: return 1.0;
    case R_MAX: case R_LSE: return -INFINITY;
    case R_MIN: return INFINITY;
    default: return 0.0;
    }
}

static int64_t i_init(red_kind k, fr_dtype dt)
{
    switch (k) {
    case R_PROD: return 1;
    case R_MAX: return dt == FR_I32 ? INT32_MIN : INT64_MIN;
    case R_MIN: return dt == FR_I32 ? INT32_MAX : INT64_MAX;
    default: return 0;
    }
}

static fr_status red_float(const red_def *d, const red_plan *p, const fr_tensor *x, fr_tensor *y,
                           int64_t count)
{
    int64_t n_out = fr_tensor_numel(y);
    double *acc = fr_malloc(sizeof(double) * (size_t)(n_out ? n_out : 1), "reduce accumulators");
    double *shift = NULL;
    if (!acc) return FR_ERR_OOM;
    red_iter it;
    red_make_iter(p, &it);
    size_t es = fr_dtype_size(x->dtype);
    int has_data = fr_tensor_numel(x) > 0;
    if (d->kind == R_LSE) { /* pass 1: per-output max, the shift that keeps exp() in range */
        shift = fr_malloc(sizeof(double) * (size_t)(n_out ? n_out : 1), "reduce shift");
        if (!shift) {
            free(acc);
            return FR_ERR_OOM;
        }
        for (int64_t i = 0; i < n_out; i++) {
            shift[i] = -INFINITY;
            acc[i] = 0.0;
        }
        if (has_data) {
            red_run(&it, x->data, es, fold_of(R_MAX, x->dtype), (char *)shift, sizeof(double), NULL);
            /* pass 2: sum of exp(x - max); where the max is not finite that sum is NaN, but
             * the result is then the max itself (set below) */
            red_run(&it, x->data, es, fold_of(R_LSE, x->dtype), (char *)acc, sizeof(double), shift);
        }
    } else {
        double init = f_init(d->kind);
        for (int64_t i = 0; i < n_out; i++) acc[i] = init;
        if (has_data)
            red_run(&it, x->data, es, fold_of(d->kind, x->dtype), (char *)acc, sizeof(double),
                    NULL);
    }
    for (int64_t i = 0; i < n_out; i++) {
        double v = acc[i];
        switch (d->kind) {
        case R_MEAN: v = count ? v / (double)count : NAN; break;
        case R_L2: v = sqrt(v); break;
        case R_LSE: v = isfinite(shift[i]) ? shift[i] + log(v) : shift[i]; break;
        default: break;
        }
        if (y->dtype == FR_F32)
            ((float *)y->data)[i] = (float)v;
        else
            ((double *)y->data)[i] = v;
    }
    free(acc);
    free(shift);
    return FR_OK;
}

static fr_status red_int(const red_def *d, const red_plan *p, const fr_tensor *x, fr_tensor *y,
                         int64_t count)
{
    int64_t n_out = fr_tensor_numel(y);
    int64_t *acc = fr_malloc(sizeof(int64_t) * (size_t)(n_out ? n_out : 1), "reduce accumulators");
    if (!acc) return FR_ERR_OOM;
    int64_t init = i_init(d->kind, x->dtype);
    for (int64_t i = 0; i < n_out; i++) acc[i] = init;
    red_iter it;
    red_make_iter(p, &it);
    if (fr_tensor_numel(x) > 0)
        red_run(&it, x->data, fr_dtype_size(x->dtype), fold_of(d->kind, x->dtype), (char *)acc,
                sizeof(int64_t), NULL);
    for (int64_t i = 0; i < n_out; i++) {
        int64_t v = acc[i];
        if (d->kind == R_MEAN) {
            if (x->dtype == FR_I32) v = (int64_t)(int32_t)(uint32_t)(uint64_t)v; /* wrapped sum */
            v = count ? v / count : 0;
        }
        if (y->dtype == FR_I32)
            ((int32_t *)y->data)[i] = (int32_t)(uint32_t)(uint64_t)v;
        else
            ((int64_t *)y->data)[i] = v;
    }
    free(acc);
    return FR_OK;
}

static fr_status red_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const red_def *d = NULL;
    FR_TRY(red_def_of(n, &d));
    if (ctx->n_in < 1 || ctx->n_in > 2 || !ctx->in[0] || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs input data and an output");
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    FR_TRY(red_check_dtype(n, d, x->dtype));
    red_cfg c;
    FR_TRY(red_config(n, ctx->opset, d, ctx->n_in, &c));
    int cnt = c.attr_count;
    int64_t *vals = NULL;
    if (c.axes_from_input) FR_TRY(tensor_axes(n, ctx->n_in > 1 ? ctx->in[1] : NULL, &cnt, &vals));
    red_plan p;
    fr_status st = red_make_plan(n, x->rank, x->dims, cnt, c.axes_from_input ? vals : c.attr_axes,
                                 c.keepdims, c.noop, &p);
    free(vals);
    FR_TRY(st);
    FR_TRY(fr_check_out(n, y, x->dtype, p.out_rank, p.out_dims));
    int64_t count = 1; /* elements folded into each output */
    for (int k = 0; k < p.rank; k++)
        if (p.red[k]) count *= p.dims[k];
    if (is_int_dt(x->dtype)) return red_int(d, &p, x, y, count);
    return red_float(d, &p, x, y, count);
}

/* ---- ArgMax / ArgMin ---- */

typedef struct arg_cfg {
    int axis, keepdims, last;
    int64_t outer, len, inner;
    int out_rank;
    int64_t out_dims[FR_MAX_RANK];
} arg_cfg;

static fr_status arg_config(const fr_node *n, int rank, const int64_t *dims, arg_cfg *c)
{
    char s[128];
    int64_t axis;
    memset(c, 0, sizeof *c);
    FR_TRY(fr_node_attr_int(n, "axis", 0, &axis));
    FR_TRY(fr_reduce_bool_attr(n, "keepdims", 1, &c->keepdims));
    FR_TRY(fr_reduce_bool_attr(n, "select_last_index", 0, &c->last));
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis, rank, &c->axis));
    c->outer = c->inner = 1;
    for (int k = 0; k < rank; k++) {
        if (k < c->axis) c->outer *= dims[k];
        if (k > c->axis) c->inner *= dims[k];
        if (k != c->axis)
            c->out_dims[c->out_rank++] = dims[k];
        else if (c->keepdims)
            c->out_dims[c->out_rank++] = 1;
    }
    c->len = dims[c->axis];
    if (c->len == 0 && c->outer * c->inner > 0)
        return fr_node_error(n, FR_ERR_SHAPE, "axis %d of %s is empty: no index to return",
                             c->axis, fr_shape_str(rank, dims, s, sizeof s));
    return FR_OK;
}

static int is_argmax(const fr_node *n) { return strcmp(n->op_type, "ArgMax") == 0; }

static fr_status arg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    if (x->dtype != FR_F32 && x->dtype != FR_F64 && !is_int_dt(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "input dtype %s is not supported (float32, float64, int32, int64)",
                             fr_dtype_name(x->dtype));
    arg_cfg c;
    FR_TRY(arg_config(n, x->rank, x->dims, &c));
    fr_infer_set(g, n, 0, FR_I64, c.out_rank, c.out_dims);
    return FR_OK;
}

/* Index of the best element along the axis: scan k outermost so the inner run is contiguous;
 * out[] holds the best index so far. `better` is strict, `tie` equality (NaN ties NaN). */
#define ARG_SCAN(T, BETTER)                                                                  \
    do {                                                                                     \
        const T *x = xv;                                                                     \
        for (int64_t o = 0; o < c->outer; o++) {                                             \
            const T *xo = x + o * c->len * c->inner;                                         \
            int64_t *yo = out + o * c->inner;                                                \
            for (int64_t i = 0; i < c->inner; i++) yo[i] = 0;                                \
            for (int64_t k = 1; k < c->len; k++)                                             \
                for (int64_t i = 0; i < c->inner; i++) {                                     \
                    const T v = xo[k * c->inner + i], b = xo[yo[i] * c->inner + i];          \
                    int better = BETTER, tie = v == b || (v != v && b != b);                 \
                    if (better || (c->last && tie)) yo[i] = k;                               \
                }                                                                            \
        }                                                                                    \
    } while (0)

/* NaN is the extreme for both ArgMax and ArgMin (numpy); otherwise plain comparisons */
#define F_BETTER(OP) (isnan(v) ? !isnan(b) : (!isnan(b) && v OP b))

static void arg_scan(const arg_cfg *c, fr_dtype dt, int max, const void *xv, int64_t *out)
{
    if (dt == FR_F32) {
        if (max) ARG_SCAN(float, F_BETTER(>)); else ARG_SCAN(float, F_BETTER(<));
    } else if (dt == FR_F64) {
        if (max) ARG_SCAN(double, F_BETTER(>)); else ARG_SCAN(double, F_BETTER(<));
    } else if (dt == FR_I32) {
        if (max) ARG_SCAN(int32_t, v > b); else ARG_SCAN(int32_t, v < b);
    } else {
        if (max) ARG_SCAN(int64_t, v > b); else ARG_SCAN(int64_t, v < b);
    }
}

static fr_status arg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 1 || !ctx->in[0] || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = ctx->in[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64 && !is_int_dt(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported",
                             fr_dtype_name(x->dtype));
    arg_cfg c;
    FR_TRY(arg_config(n, x->rank, x->dims, &c));
    FR_TRY(fr_check_out(n, ctx->out[0], FR_I64, c.out_rank, c.out_dims));
    if (c.outer * c.inner == 0) return FR_OK;
    arg_scan(&c, x->dtype, is_argmax(n), x->data, ctx->out[0]->data);
    return FR_OK;
}
/* Gradient rule of every reduction: resolve the reduced axes as the forward did and emit one
 * ReduceGrad with the inputs its kind needs. */
static fr_status red_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const red_def *d = NULL;
    FR_TRY(red_def_of(n, &d));
    red_cfg c;
    FR_TRY(red_config(n, ctx->opset, d, n->n_inputs, &c));
    int cnt = c.attr_count;
    int64_t *vals = NULL;
    if (c.axes_from_input) {
        cnt = -1;
        if (fr_node_in(g, n, 1)) FR_TRY(fr_infer_const_ints(g, n, 1, &cnt, &vals));
    }
    const fr_value *xv = &g->values[n->inputs[0]];
    red_plan p;
    fr_status st = red_make_plan(n, xv->rank, xv->dims, cnt, c.axes_from_input ? vals : c.attr_axes,
                                 c.keepdims, c.noop, &p);
    free(vals);
    FR_TRY(st);
    int64_t axes[FR_MAX_RANK];
    int na = 0;
    for (int k = 0; k < p.rank; k++)
        if (p.red[k]) axes[na++] = k;
    int in[3] = {ctx->dout[0], n->inputs[0], n->outputs[0]}, nid;
    FR_TRY(fr_grad_node(ctx, "ReduceGrad", FR_DOMAIN_FP8RUN, fr_reduce_grad_inputs(d->kind), in, 1,
                        &ctx->din[0], &nid));
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_string(gn, "kind", d->op + strlen("Reduce")));
    FR_TRY(fr_node_set_attr_ints(gn, "axes", na, axes));
    FR_TRY(fr_node_set_attr_int(gn, "keepdims", c.keepdims));
    FR_TRY(fr_node_set_attr_ints(gn, "shape", p.rank, p.dims));
    return fr_grad_finish(ctx, nid);
}

#define RED_OP(NAME) {NAME, FR_DOMAIN_ONNX, 1, red_infer, red_cpu, red_grad, 0}

const fr_op_def fr_ops_reduce[] = {
    RED_OP("ReduceSum"),
    RED_OP("ReduceMean"),
    RED_OP("ReduceMax"),
    RED_OP("ReduceMin"),
    RED_OP("ReduceProd"),
    RED_OP("ReduceSumSquare"),
    RED_OP("ReduceL1"),
    RED_OP("ReduceL2"),
    RED_OP("ReduceLogSumExp"),
    {"ArgMax", FR_DOMAIN_ONNX, 1, arg_infer, arg_cpu, NULL, 0},
    {"ArgMin", FR_DOMAIN_ONNX, 1, arg_infer, arg_cpu, NULL, 0},
    {0},
};
