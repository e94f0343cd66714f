/* fp8run's own helper ops that gradient rules emit (domain ai.fp8run).
 *   SumToShape(x) {shape}: sum x over the dims that numpy broadcasting added or expanded, so
 *   that a gradient gets the shape of the forward operand again.
 *   Dot(a, b): sum(a * b) as a scalar, accumulated in double (gradient checks use it to
 *   turn any tensor into a scalar loss). */
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"

static fr_status sum_to_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    int cnt;
    const int64_t *shape;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &shape));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > x->rank)
        return fr_node_error(n, FR_ERR_SHAPE, "target rank %d exceeds input rank %d", cnt, x->rank);
    for (int k = 0; k < cnt; k++) {
        int64_t xd = x->dims[x->rank - cnt + k];
        if (shape[k] != 1 && shape[k] != xd)
            return fr_node_error(n, FR_ERR_SHAPE, "cannot sum dim %d of size %lld to size %lld", k,
                                 (long long)xd, (long long)shape[k]);
    }
    fr_infer_set(g, n, 0, x->dtype, cnt, shape);
    return FR_OK;
}

static fr_status sum_to_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(ctx->node, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    int64_t strides[FR_MAX_RANK], idx[FR_MAX_RANK] = {0};
    int64_t ny = fr_tensor_numel(y), nx = fr_tensor_numel(x);
    double *acc = fr_calloc((size_t)(ny ? ny : 1), sizeof(double), "SumToShape accumulator");
    if (!acc) return FR_ERR_OOM;
    fr_broadcast_strides(y->rank, y->dims, x->rank, x->dims, strides);
    int64_t off = 0;
    for (int64_t i = 0; i < nx; i++) {
        acc[off] += x->dtype == FR_F64 ? ((const double *)x->data)[i] : ((const float *)x->data)[i];
        for (int k = x->rank - 1; k >= 0; k--) { /* odometer increment */
            idx[k]++;
            off += strides[k];
            if (idx[k] < x->dims[k]) break;
            off -= strides[k] * x->dims[k];
            idx[k] = 0;
        }
    }
    fr_store_acc(y, acc, ny);
    free(acc);
    return FR_OK;
}

static fr_status dot_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1);
    int ok = a->rank == b->rank && a->dtype == b->dtype && (a->dtype == FR_F32 || a->dtype == FR_F64);
    for (int d = 0; ok && d < a->rank; d++) ok = a->dims[d] == b->dims[d];
    if (!ok) return fr_node_error(n, FR_ERR_SHAPE, "inputs must be float tensors of one shape and dtype");
    fr_infer_set(g, n, 0, a->dtype, 0, NULL);
    return FR_OK;
}

static double getd(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static fr_status dot_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1];
    double s = 0;
    int64_t n = fr_tensor_numel(a);
    for (int64_t i = 0; i < n; i++) s += getd(a, i) * getd(b, i);
    if (ctx->out[0]->dtype == FR_F64)
        ((double *)ctx->out[0]->data)[0] = s;
    else
        ((float *)ctx->out[0]->data)[0] = (float)s;
    return FR_OK;
}

/* d(sum a*b)/da = dout * b: emitted as Mul(b, dout) with dout broadcast from a scalar */
static fr_status dot_grad(fr_grad_ctx *ctx)
{
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    int a = n->inputs[0], b = n->inputs[1];
    if (ctx->need_din[0]) {
        int in[2] = {b, ctx->dout[0]};
        FR_TRY(fr_grad_op1(ctx, "Mul", 2, in, &ctx->din[0]));
    }
    if (ctx->need_din[1]) {
        int in[2] = {a, ctx->dout[0]};
        FR_TRY(fr_grad_op1(ctx, "Mul", 2, in, &ctx->din[1]));
    }
    return FR_OK;
}

const fr_op_def fr_ops_grad[] = {
    {"Dot", FR_DOMAIN_FP8RUN, 1, dot_infer, dot_cpu, dot_grad, 0},
    {"SumToShape", FR_DOMAIN_FP8RUN, 1, sum_to_infer, sum_to_cpu, NULL, 0},
    {0},
};
