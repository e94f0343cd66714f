/* CumSum (opset 11+): running sum along `axis` (a scalar input), with the `exclusive` and
 * `reverse` attributes. Exporters emit it for position ids computed from attention masks
 * (OPT). Sums run in double per line. Gradient: the CumSum of dy in the opposite direction
 * with the same exclusivity. */
#include <stdlib.h>

#include "ops/grad.h"
#include "ops/op.h"

static fr_status cumsum_axis(const fr_node *n, const fr_tensor *axis_t, int rank, int *axis)
{
    if (!axis_t) return fr_node_error(n, FR_ERR_GRAPH, "the axis input is required");
    if (!fr_dtype_is_int(axis_t->dtype) || fr_tensor_numel(axis_t) != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "axis must be an integer scalar");
    return fr_norm_axis(n, fr_tensor_get_i64(axis_t, 0), rank, axis);
}

static fr_status cumsum_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *ax = fr_node_in(g, n, 1);
    if (x->dtype != FR_F32 && x->dtype != FR_F64 && x->dtype != FR_I64 && x->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    if (ax->constant) {
        int axis;
        FR_TRY(cumsum_axis(n, ax->constant, x->rank, &axis));
    }
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static double get(const fr_tensor *t, int64_t i) { return fr_tensor_get_f64(t, i); }

static void set(fr_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case FR_F32: ((float *)t->data)[i] = (float)v; break;
    case FR_F64: ((double *)t->data)[i] = v; break;
    case FR_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    default: ((int32_t *)t->data)[i] = (int32_t)v; break;
    }
}

static fr_status cumsum_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    int axis;
    int64_t exclusive, reverse;
    FR_TRY(cumsum_axis(ctx->node, ctx->in[1], x->rank, &axis));
    FR_TRY(fr_node_attr_int(ctx->node, "exclusive", 0, &exclusive));
    FR_TRY(fr_node_attr_int(ctx->node, "reverse", 0, &reverse));
    int64_t len = x->rank ? x->dims[axis] : 1, inner = 1, outer = 1;
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            double acc = 0;
            for (int64_t k = 0; k < len; k++) {
                int64_t kk = reverse ? len - 1 - k : k, off = (o * len + kk) * inner + i;
                double v = get(x, off);
                if (exclusive) {
                    set(y, off, acc);
                    acc += v;
                } else {
                    acc += v;
                    set(y, off, acc);
                }
            }
        }
    }
    return FR_OK;
}

static fr_status cumsum_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    int64_t exclusive, reverse;
    FR_TRY(fr_node_attr_int(n, "exclusive", 0, &exclusive));
    FR_TRY(fr_node_attr_int(n, "reverse", 0, &reverse));
    int in[2] = {ctx->dout[0], n->inputs[1]}, out, nid;
    FR_TRY(fr_grad_node(ctx, "CumSum", "", 2, in, 1, &out, &nid));
    FR_TRY(fr_node_set_attr_int(&ctx->g->nodes[nid], "exclusive", exclusive));
    FR_TRY(fr_node_set_attr_int(&ctx->g->nodes[nid], "reverse", !reverse));
    FR_TRY(fr_grad_finish(ctx, nid));
    ctx->din[0] = out;
    return FR_OK;
}

const fr_op_def fr_ops_cumsum[] = {
    {"CumSum", FR_DOMAIN_ONNX, 11, cumsum_infer, cumsum_cpu, cumsum_grad, 0},
    {0},
};
