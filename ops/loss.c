/* Loss heads (domain ai.fp8run).
 *   SoftmaxCrossEntropy(logits [..., V], labels [...] int) {ignore_index=-100} -> loss []
 *     mean over the positions whose label != ignore_index of logsumexp(row) - row[label],
 *     as PyTorch's F.cross_entropy(reduction="mean"). With every position ignored the loss
 *     is 0 (PyTorch gives NaN) so a padded-out batch does not count as a bad step.
 *   SoftmaxCrossEntropyGrad(dloss [], logits, labels) {ignore_index, dx_dtype} -> dlogits
 *     dloss * (softmax(row) - onehot(label)) / count, zero rows where ignored.
 * Statistics are computed in double; a label outside [0, V) is FR_ERR_RANGE.
 * logits may be bfloat16 (the LM head's y_dtype, passes/narrow_gradients.h): widened exactly,
 * the ops are then the float32 ops on those values (loss, dloss and dlogits float32).
 * dx_dtype "bfloat16" (default "float32"; float32/bf16 logits only) rounds dlogits to bf16
 * (nearest even) from the float32 value, for a bf16/fp8 LM head's backward, which rounds or
 * quantizes it anyway. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/loss.h"
#include "ops/op.h"

static fr_status ce_check(fr_graph *g, const fr_node *n, int logits_idx, int labels_idx)
{
    const fr_value *lg = fr_node_in(g, n, logits_idx), *lb = fr_node_in(g, n, labels_idx);
    if (lg->dtype != FR_F32 && lg->dtype != FR_F64 && lg->dtype != FR_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "logits must be float32/float64/bfloat16, got %s",
                             fr_dtype_name(lg->dtype));
    if (lb->dtype != FR_I64 && lb->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_SHAPE, "labels must be int64 or int32, got %s",
                             fr_dtype_name(lb->dtype));
    int ok = lg->rank >= 1 && lb->rank == lg->rank - 1;
    for (int d = 0; ok && d < lb->rank; d++) ok = lb->dims[d] == lg->dims[d];
    if (!ok) {
        char a[128], b[128];
        return fr_node_error(n, FR_ERR_SHAPE, "labels %s do not match logits %s (want logits' shape without the last dim)",
                             fr_shape_str(lb->rank, lb->dims, a, sizeof a),
                             fr_shape_str(lg->rank, lg->dims, b, sizeof b));
    }
    return FR_OK;
}

static fr_status ce_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    FR_TRY(ce_check(g, n, 0, 1));
    fr_infer_set(g, n, 0, fr_ce_dtype(fr_node_in(g, n, 0)->dtype), 0, NULL);
    return FR_OK;
}

static fr_status ce_grad_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    FR_TRY(ce_check(g, n, 1, 2));
    const fr_value *lg = fr_node_in(g, n, 1), *dl = fr_node_in(g, n, 0);
    const fr_dtype ct = fr_ce_dtype(lg->dtype);
    if (dl->dtype != ct)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dloss '%s' is %s, expected %s for %s logits", dl->name,
                             fr_dtype_name(dl->dtype), fr_dtype_name(ct), fr_dtype_name(lg->dtype));
    int dx16;
    FR_TRY(fr_ce_dx_bf16(n, lg->dtype, &dx16));
    fr_infer_set(g, n, 0, dx16 ? FR_BF16 : ct, lg->rank, lg->dims);
    return FR_OK;
}

fr_dtype fr_ce_dtype(fr_dtype logits) { return logits == FR_BF16 ? FR_F32 : logits; }

fr_status fr_ce_dx_bf16(const fr_node *n, fr_dtype logits, int *bf16)
{
    FR_TRY(fr_attr_bf16(n, "dx_dtype", bf16));
    if (*bf16 && logits == FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dx_dtype bfloat16 needs float32 or bfloat16 logits (float64)");
    return FR_OK;
}

static double get(const fr_tensor *t, int64_t i)
{
    if (t->dtype == FR_BF16) return fr_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return t->dtype == FR_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

/* bfloat16 outputs: the float32 value rounded once more (nearest even) */
static void set(fr_tensor *t, int64_t i, double v)
{
    if (t->dtype == FR_F64)
        ((double *)t->data)[i] = v;
    else if (t->dtype == FR_BF16)
        ((uint16_t *)t->data)[i] = fr_f32_to_bf16((float)v);
    else
        ((float *)t->data)[i] = (float)v;
}

/* Validate labels; count the positions that are not ignored. */
static fr_status ce_labels(const fr_kernel_ctx *ctx, const fr_tensor *labels, int64_t V,
                           int64_t ignore, int64_t *count)
{
    int64_t rows = fr_tensor_numel(labels), c = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = fr_tensor_get_i64(labels, r);
        if (y == ignore) continue;
        if (y < 0 || y >= V)
            return fr_node_error(ctx->node, FR_ERR_RANGE,
                                 "label %lld at position %lld is outside the vocabulary [0, %lld)",
                                 (long long)y, (long long)r, (long long)V);
        c++;
    }
    *count = c;
    return FR_OK;
}

static double row_logsumexp(const fr_tensor *lg, int64_t base, int64_t V)
{
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = get(lg, base + v);
        if (x > m) m = x;
    }
    for (int64_t v = 0; v < V; v++) s += exp(get(lg, base + v) - m);
    return m + log(s);
}

static fr_status ce_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *lg = ctx->in[0], *lb = ctx->in[1];
    int64_t ignore, count;
    FR_TRY(fr_node_attr_int(ctx->node, "ignore_index", -100, &ignore));
    int64_t V = lg->dims[lg->rank - 1], rows = fr_tensor_numel(lb);
    FR_TRY(ce_labels(ctx, lb, V, ignore, &count));
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = fr_tensor_get_i64(lb, r);
        if (y == ignore) continue;
        total += row_logsumexp(lg, r * V, V) - get(lg, r * V + y);
    }
    set(ctx->out[0], 0, count ? total / (double)count : 0.0);
    return FR_OK;
}

static fr_status ce_grad_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *dl = ctx->in[0], *lg = ctx->in[1], *lb = ctx->in[2];
    fr_tensor *dx = ctx->out[0];
    int64_t ignore, count;
    FR_TRY(fr_node_attr_int(ctx->node, "ignore_index", -100, &ignore));
    int64_t V = lg->dims[lg->rank - 1], rows = fr_tensor_numel(lb);
    FR_TRY(ce_labels(ctx, lb, V, ignore, &count));
    double scale = count ? get(dl, 0) / (double)count : 0.0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = fr_tensor_get_i64(lb, r), base = r * V;
        if (y == ignore) {
            for (int64_t v = 0; v < V; v++) set(dx, base + v, 0.0);
            continue;
        }
        double lse = row_logsumexp(lg, base, V);
        for (int64_t v = 0; v < V; v++)
            set(dx, base + v, scale * (exp(get(lg, base + v) - lse) - (v == y ? 1.0 : 0.0)));
    }
    return FR_OK;
}

static fr_status ce_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    int64_t ignore;
    FR_TRY(fr_node_attr_int(n, "ignore_index", -100, &ignore));
    int in[3] = {ctx->dout[0], n->inputs[0], n->inputs[1]}, out, nid;
    FR_TRY(fr_grad_node(ctx, "SoftmaxCrossEntropyGrad", FR_DOMAIN_FP8RUN, 3, in, 1, &out, &nid));
    FR_TRY(fr_node_set_attr_int(&ctx->g->nodes[nid], "ignore_index", ignore));
    FR_TRY(fr_grad_finish(ctx, nid));
    ctx->din[0] = out;
    return FR_OK;
}

const fr_op_def fr_ops_loss[] = {
    {"SoftmaxCrossEntropy", FR_DOMAIN_FP8RUN, 1, ce_infer, ce_cpu, ce_grad, 0},
    {"SoftmaxCrossEntropyGrad", FR_DOMAIN_FP8RUN, 1, ce_grad_infer, ce_grad_cpu, NULL, 0},
    {0},
};
