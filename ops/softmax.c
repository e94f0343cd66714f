/* Softmax and LogSoftmax (float32, float64), with both opset conventions:
 *   opset >= 13: normalize along `axis` (default -1);
 *   opset < 13:  coerce the input to 2-D at `axis` (default 1), [d0*..*d(axis-1),
 *                d(axis)*..*d(n-1)], and normalize each row over the flattened trailing dims.
 * Numerically stable: the row max is subtracted before exp(); exp, the sum and the log run in
 * double, so float32 results are within a rounding or two of the exact values.
 * A row that is all -inf (or holds +inf or NaN) gives NaN in every element, as onnxruntime
 * 1.32 does for both ops and both conventions (checked): (-inf) - (-inf) is NaN, so this
 * falls out of the plain formula, no special case.
 *
 * Backward (domain ai.fp8run), one fused node per forward node, from the forward output y:
 *   SoftmaxGrad(dy, y)    = y * (dy - sum(dy * y))
 *   LogSoftmaxGrad(dy, y) = dy - exp(y) * sum(dy)
 * with attributes axis (normalized, >= 0) and flatten (1: the opset < 13 convention, the
 * sum runs over all dims from axis on). Row sums accumulate in double and each element is
 * rounded once. */
#include <math.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"

/* Rows of `len` elements `inner` apart: outer * inner rows in all. */
typedef struct sm_shape {
    int64_t outer, len, inner;
} sm_shape;

static int legacy_opset(int64_t opset) { return opset >= 1 && opset < 13; }

/* The row split for normalizing at axis64 (flattened trailing dims when legacy). */
static fr_status sm_split(const fr_node *n, int64_t axis64, int legacy, int rank,
                          const int64_t *dims, sm_shape *s)
{
    int axis;
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis64, rank, &axis));
    s->outer = 1;
    s->len = 1;
    s->inner = 1;
    for (int k = 0; k < rank; k++) {
        if (k < axis)
            s->outer *= dims[k];
        else if (k == axis || legacy)
            s->len *= dims[k];
        else
            s->inner *= dims[k];
    }
    return FR_OK;
}

static fr_status sm_plan(const fr_node *n, int64_t opset, int rank, const int64_t *dims,
                         sm_shape *s)
{
    int legacy = legacy_opset(opset);
    int64_t axis64;
    FR_TRY(fr_node_attr_int(n, "axis", legacy ? 1 : -1, &axis64));
    return sm_split(n, axis64, legacy, rank, dims, s);
}

static int is_log(const fr_node *n) { return strcmp(n->op_type, "LogSoftmax") == 0; }

static fr_status sm_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "input dtype %s is not supported (float32 or float64 only)",
                             fr_dtype_name(x->dtype));
    sm_shape s;
    FR_TRY(sm_plan(n, fr_graph_opset(g, n->domain), x->rank, x->dims, &s));
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

/* One row: x[0], x[st], ... x[(len-1)*st] into y likewise. */
#define SM_ROW(T)                                                                            \
    do {                                                                                     \
        double m = -INFINITY;                                                                \
        for (int64_t k = 0; k < len; k++) {                                                  \
            double v = x[k * st];                                                            \
            if (v > m || isnan(v)) m = v;                                                    \
        }                                                                                    \
        double sum = 0.0;                                                                    \
        for (int64_t k = 0; k < len; k++) {                                                  \
            double e = exp((double)x[k * st] - m);                                           \
            sum += e;                                                                        \
            if (!log_) y[k * st] = (T)e; /* scaled below */                                  \
        }                                                                                    \
        if (log_) {                                                                          \
            double shift = m + log(sum);                                                     \
            for (int64_t k = 0; k < len; k++) y[k * st] = (T)((double)x[k * st] - shift);    \
        } else {                                                                             \
            double inv = 1.0 / sum;                                                          \
            for (int64_t k = 0; k < len; k++) y[k * st] = (T)((double)y[k * st] * inv);      \
        }                                                                                    \
    } while (0)

static void sm_row_f32(const float *x, float *y, int64_t len, int64_t st, int log_)
{
    SM_ROW(float);
}

static void sm_row_f64(const double *x, double *y, int64_t len, int64_t st, int log_)
{
    SM_ROW(double);
}

static fr_status sm_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 1 || !ctx->in[0] || ctx->n_out < 1 || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported",
                             fr_dtype_name(x->dtype));
    int same = y->dtype == x->dtype && y->rank == x->rank;
    for (int k = 0; same && k < x->rank; k++) same = y->dims[k] == x->dims[k];
    if (!same)
        return fr_node_error(n, FR_ERR_SHAPE, "output must match the input's dtype and shape "
                             "(re-run shape inference)");
    sm_shape s;
    FR_TRY(sm_plan(n, ctx->opset, x->rank, x->dims, &s));
    int lg = is_log(n);
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            int64_t off = o * s.len * s.inner + i;
            if (x->dtype == FR_F32)
                sm_row_f32((const float *)x->data + off, (float *)y->data + off, s.len, s.inner, lg);
            else
                sm_row_f64((const double *)x->data + off, (double *)y->data + off, s.len, s.inner, lg);
        }
    return FR_OK;
}

/* ---- backward ---- */

static fr_status smg_attrs(const fr_node *n, int rank, const int64_t *dims, sm_shape *s)
{
    int64_t axis, flatten;
    FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
    FR_TRY(fr_node_attr_int(n, "flatten", 0, &flatten));
    if (flatten != 0 && flatten != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "flatten=%lld must be 0 or 1", (long long)flatten);
    return sm_split(n, axis, (int)flatten, rank, dims, s);
}

static fr_status smg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *dy = fr_node_in(g, n, 0), *y = fr_node_in(g, n, 1);
    if (y->dtype != FR_F32 && y->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "dtype %s is not supported (float32 or float64 only)",
                             fr_dtype_name(y->dtype));
    int same = dy->dtype == y->dtype && dy->rank == y->rank;
    for (int k = 0; same && k < y->rank; k++) same = dy->dims[k] == y->dims[k];
    if (!same) {
        char s1[128], s2[128];
        return fr_node_error(n, FR_ERR_SHAPE, "dy '%s' (%s %s) must match y '%s' (%s %s)", dy->name,
                             fr_dtype_name(dy->dtype), fr_shape_str(dy->rank, dy->dims, s1, sizeof s1),
                             y->name, fr_dtype_name(y->dtype), fr_shape_str(y->rank, y->dims, s2, sizeof s2));
    }
    sm_shape s;
    FR_TRY(smg_attrs(n, y->rank, y->dims, &s));
    fr_infer_same(g, n, 0, 1);
    return FR_OK;
}

/* One row, element k at k * st; sums in double, one rounding per output. */
#define SMG_ROW(T)                                                                           \
    do {                                                                                     \
        double sum = 0.0;                                                                    \
        if (log_) {                                                                          \
            for (int64_t k = 0; k < len; k++) sum += (double)dy[k * st];                     \
            for (int64_t k = 0; k < len; k++)                                                \
                dx[k * st] = (T)((double)dy[k * st] - exp((double)y[k * st]) * sum);         \
        } else {                                                                             \
            for (int64_t k = 0; k < len; k++) sum += (double)dy[k * st] * (double)y[k * st]; \
            for (int64_t k = 0; k < len; k++)                                                \
                dx[k * st] = (T)((double)y[k * st] * ((double)dy[k * st] - sum));            \
        }                                                                                    \
    } while (0)

static void smg_row_f32(const float *dy, const float *y, float *dx, int64_t len, int64_t st,
                        int log_)
{
    SMG_ROW(float);
}

static void smg_row_f64(const double *dy, const double *y, double *dx, int64_t len, int64_t st,
                        int log_)
{
    SMG_ROW(double);
}

static fr_status smg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 2 || !ctx->in[0] || !ctx->in[1] || ctx->n_out != 1 || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs dy, y and one output");
    const fr_tensor *dy = ctx->in[0], *y = ctx->in[1];
    fr_tensor *dx = ctx->out[0];
    if (y->dtype != FR_F32 && y->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s is not supported",
                             fr_dtype_name(y->dtype));
    int same = dy->dtype == y->dtype && dx->dtype == y->dtype && dy->rank == y->rank &&
               dx->rank == y->rank;
    for (int k = 0; same && k < y->rank; k++)
        same = dy->dims[k] == y->dims[k] && dx->dims[k] == y->dims[k];
    if (!same)
        return fr_node_error(n, FR_ERR_SHAPE, "dy, y and dx must have one dtype and shape "
                             "(re-run shape inference)");
    sm_shape s;
    FR_TRY(smg_attrs(n, y->rank, y->dims, &s));
    int lg = strcmp(n->op_type, "LogSoftmaxGrad") == 0;
    for (int64_t o = 0; o < s.outer; o++)
        for (int64_t i = 0; i < s.inner; i++) {
            int64_t off = o * s.len * s.inner + i;
            if (y->dtype == FR_F32)
                smg_row_f32((const float *)dy->data + off, (const float *)y->data + off,
                            (float *)dx->data + off, s.len, s.inner, lg);
            else
                smg_row_f64((const double *)dy->data + off, (const double *)y->data + off,
                            (double *)dx->data + off, s.len, s.inner, lg);
        }
    return FR_OK;
}

/* One fused backward node from the forward output, with the forward's axis convention
 * written out explicitly (the backward op has no opset-dependent default). */
static fr_status sm_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    if (ctx->dout[0] < 0 || !ctx->need_din[0]) return FR_OK;
    const int legacy = legacy_opset(ctx->opset), y = n->outputs[0];
    const fr_value *yv = &g->values[y];
    int64_t axis64;
    int axis;
    FR_TRY(fr_node_attr_int(n, "axis", legacy ? 1 : -1, &axis64));
    FR_TRY(fr_norm_axis(n, axis64, yv->rank, &axis));
    const char *op = is_log(n) ? "LogSoftmaxGrad" : "SoftmaxGrad";
    int in[2] = {ctx->dout[0], y}, nid;
    FR_TRY(fr_grad_node(ctx, op, FR_DOMAIN_FP8RUN, 2, in, 1, &ctx->din[0], &nid));
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
    if (legacy) FR_TRY(fr_node_set_attr_int(gn, "flatten", 1));
    return fr_grad_finish(ctx, nid);
}

const fr_op_def fr_ops_softmax[] = {
    {"Softmax", FR_DOMAIN_ONNX, 1, sm_infer, sm_cpu, sm_grad, 0},
    {"LogSoftmax", FR_DOMAIN_ONNX, 1, sm_infer, sm_cpu, sm_grad, 0},
    {"SoftmaxGrad", FR_DOMAIN_FP8RUN, 1, smg_infer, smg_cpu, NULL, 0},
    {"LogSoftmaxGrad", FR_DOMAIN_FP8RUN, 1, smg_infer, smg_cpu, NULL, 0},
    {0},
};
