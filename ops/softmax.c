/* Softmax and LogSoftmax (float32, float64), with both opset conventions:
 *   opset >= 13: normalize along `axis` (default -1);
 *   opset < 13:  coerce the input to 2-D at `axis` (default 1), [d0*..*d(axis-1),
 *                d(axis)*..*d(n-1)], and normalize each row over the flattened trailing dims.
 * Numerically stable: the row max is subtracted before exp(); exp, the sum and the log run in
 * double, so float32 results are within a rounding or two of the exact values.
 * A row that is all -inf (or holds +inf or NaN) gives NaN in every element, as onnxruntime
 * 1.32 does for both ops and both conventions (checked): (-inf) - (-inf) is NaN, so this
 * falls out of the plain formula, no special case. */
#include <math.h>
#include <string.h>

#include "op.h"

/* Rows of `len` elements `inner` apart: outer * inner rows in all. */
typedef struct sm_shape {
    int64_t outer, len, inner;
} sm_shape;

static int legacy_opset(int64_t opset) { return opset >= 1 && opset < 13; }

static fr_status sm_plan(const fr_node *n, int64_t opset, int rank, const int64_t *dims,
                         sm_shape *s)
{
    int legacy = legacy_opset(opset);
    int64_t axis64;
    int axis;
    FR_TRY(fr_node_attr_int(n, "axis", legacy ? 1 : -1, &axis64));
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

const fr_op_def fr_ops_softmax[] = {
    {"Softmax", FR_DOMAIN_ONNX, 1, sm_infer, sm_cpu, NULL, 0},
    {"LogSoftmax", FR_DOMAIN_ONNX, 1, sm_infer, sm_cpu, NULL, 0},
    {0},
};
