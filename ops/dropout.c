/* Dropout: ONNX's Dropout (inference semantics) and ai.fp8run::KeyedDropout (training); the
 * contract is ops/dropout.h, the mask ops/dropout_mask.h. */
#include <math.h>
#include <string.h>

#include "ops/dropout.h"
#include "ops/dropout_mask.h"
#include "ops/elementwise_util.h"
#include "ops/grad.h"
#include "ops/op.h"

/* ---- ONNX Dropout (inference semantics: y = x, mask all true) ---- */

static fr_status dropout_training_error(const fr_node *n, double ratio)
{
    return fr_node_error(n, FR_ERR_UNSUPPORTED,
                         "Dropout in training mode (ratio %g) is not run outside training: `fp8run "
                         "train` draws its mask per step when training_mode and ratio are constants; "
                         "inference runs Dropout with inference semantics only (export the model in "
                         "eval mode)",
                         ratio);
}

static fr_dtype dropout_mask_dtype(int64_t opset, fr_dtype x)
{
    return opset >= 1 && opset < 10 ? x : FR_BOOL;
}

static fr_status dropout_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int64_t opset = fr_graph_opset(g, n->domain);
    int modern = !(opset >= 1 && opset < 12);
    FR_TRY(fr_infer_require_inputs(g, n, 1, modern ? 3 : 1));
    const fr_value *x = fr_node_in(g, n, 0);
    if (fr_dtype_size(x->dtype) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(x->dtype));
    if (opset >= 1 && opset < 7) {
        int64_t is_test;
        FR_TRY(fr_node_attr_int(n, "is_test", 0, &is_test));
        float ratio;
        FR_TRY(fr_node_attr_float(n, "ratio", 0.5f, &ratio));
        if (!is_test && ratio > 0) return dropout_training_error(n, ratio);
    }
    const fr_value *tm = fr_node_in(g, n, 2);
    if (tm && tm->constant) {
        if (fr_tensor_numel(tm->constant) != 1)
            return fr_node_error(n, FR_ERR_SHAPE, "training_mode '%s' must be a scalar", tm->name);
        if (fr_tensor_get_i64(tm->constant, 0)) {
            const fr_value *r = fr_node_in(g, n, 1);
            if (!r) return dropout_training_error(n, 0.5);
            if (!r->constant || fr_tensor_numel(r->constant) != 1)
                return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                     "Dropout in training mode with a non-constant ratio '%s' is "
                                     "not supported yet (inference semantics only)",
                                     r->name);
            double ratio = fr_tensor_get_f64(r->constant, 0);
            if (ratio != 0) return dropout_training_error(n, ratio);
        }
    }
    fr_infer_same(g, n, 0, 0);
    if (n->n_outputs > 1)
        fr_infer_set(g, n, 1, dropout_mask_dtype(opset, x->dtype), x->rank, x->dims);
    return FR_OK;
}

static fr_status dropout_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    const fr_tensor *tm = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if (tm && fr_tensor_numel(tm) >= 1 && fr_tensor_get_i64(tm, 0)) {
        const fr_tensor *r = ctx->n_in > 1 ? ctx->in[1] : NULL;
        double ratio = r && fr_tensor_numel(r) >= 1 ? fr_tensor_get_f64(r, 0) : 0.5;
        if (ratio != 0) return dropout_training_error(n, ratio);
    }
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    if (y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output dtype %s differs from input dtype %s",
                             fr_dtype_name(y->dtype), fr_dtype_name(x->dtype));
    if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
    fr_tensor *mask = ctx->n_out > 1 ? ctx->out[1] : NULL;
    if (!mask) return FR_OK;
    FR_TRY(fr_ew_same_numel(ctx, x, mask));
    int64_t cnt = fr_tensor_numel(mask);
    switch (mask->dtype) {
    case FR_BOOL: memset(mask->data, 1, (size_t)cnt); break;
    case FR_F32: for (int64_t i = 0; i < cnt; i++) ((float *)mask->data)[i] = 1.0f; break;
    case FR_F64: for (int64_t i = 0; i < cnt; i++) ((double *)mask->data)[i] = 1.0; break;
    case FR_F16: for (int64_t i = 0; i < cnt; i++) ((uint16_t *)mask->data)[i] = 0x3C00u; break;
    case FR_BF16: for (int64_t i = 0; i < cnt; i++) ((uint16_t *)mask->data)[i] = 0x3F80u; break;
    default:
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mask dtype %s is not supported",
                             fr_dtype_name(mask->dtype));
    }
    return FR_OK;
}

/* The output gradient passes through; the mask and the ratio / training_mode inputs carry none. */
static fr_status dropout_grad(fr_grad_ctx *ctx)
{
    if (ctx->need_din[0]) ctx->din[0] = ctx->dout[0];
    return FR_OK;
}

/* ---- KeyedDropout ---- */

static int keyed_dtype_ok(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64 || dt == FR_F16 || dt == FR_BF16; }

fr_status fr_keyed_dropout_params(const fr_node *n, float *ratio, uint64_t *stream)
{
    int64_t seed;
    FR_TRY(fr_node_attr_float(n, "ratio", -1.0f, ratio));
    FR_TRY(fr_node_attr_int(n, "seed", 0, &seed));
    if (!(*ratio >= 0.0f && *ratio < 1.0f))
        return fr_node_error(n, FR_ERR_GRAPH, "attribute 'ratio' %g must be in [0, 1)", (double)*ratio);
    *stream = (uint64_t)seed;
    return FR_OK;
}

static fr_status keyed_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *k = fr_node_in(g, n, 1);
    if (!keyed_dtype_ok(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (float32, float64, "
                             "float16, bfloat16)", fr_dtype_name(x->dtype));
    if (k->dtype != FR_I64 || k->rank != 1 || k->dims[0] != FR_DROPOUT_KEY_LEN)
        return fr_node_error(n, FR_ERR_SHAPE, "key '%s' must be int64 [%d] (seed, step, micro-batch)", k->name,
                             FR_DROPOUT_KEY_LEN);
    float ratio;
    uint64_t stream;
    FR_TRY(fr_keyed_dropout_params(n, &ratio, &stream));
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status keyed_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0], *key = ctx->in[1];
    fr_tensor *y = ctx->out[0];
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    if (y->dtype != x->dtype || !keyed_dtype_ok(x->dtype))
        return fr_node_error(n, FR_ERR_SHAPE, "input %s and output %s must be the same float dtype",
                             fr_dtype_name(x->dtype), fr_dtype_name(y->dtype));
    if (!key || key->dtype != FR_I64 || fr_tensor_numel(key) != FR_DROPOUT_KEY_LEN)
        return fr_node_error(n, FR_ERR_SHAPE, "key must be int64 [%d]", FR_DROPOUT_KEY_LEN);
    float ratio;
    uint64_t stream;
    FR_TRY(fr_keyed_dropout_params(n, &ratio, &stream));
    const int64_t *k = key->data;
    const uint64_t nk = fr_dropout_node_key((uint64_t)k[0], k[1], k[2], stream);
    const uint32_t thr = fr_dropout_threshold(ratio);
    const float s = fr_dropout_scale(ratio);
    const double sd = 1.0 / (1.0 - (double)ratio);
    const int64_t cnt = fr_tensor_numel(x);
    switch (x->dtype) {
    case FR_F32: {
        const float *a = x->data;
        float *b = y->data;
        for (int64_t i = 0; i < cnt; i++) b[i] = a[i] * (fr_dropout_keep(nk, i, thr) ? s : 0.0f);
        break;
    }
    case FR_F64: {
        const double *a = x->data;
        double *b = y->data;
        for (int64_t i = 0; i < cnt; i++) b[i] = a[i] * (fr_dropout_keep(nk, i, thr) ? sd : 0.0);
        break;
    }
    case FR_F16: {
        const uint16_t *a = x->data;
        uint16_t *b = y->data;
        for (int64_t i = 0; i < cnt; i++)
            b[i] = fr_f32_to_f16(fr_f16_to_f32(a[i]) * (fr_dropout_keep(nk, i, thr) ? s : 0.0f));
        break;
    }
    default: { /* bfloat16 */
        const uint16_t *a = x->data;
        uint16_t *b = y->data;
        for (int64_t i = 0; i < cnt; i++)
            b[i] = fr_f32_to_bf16(fr_bf16_to_f32(a[i]) * (fr_dropout_keep(nk, i, thr) ? s : 0.0f));
        break;
    }
    }
    return FR_OK;
}

/* dx = KeyedDropout(dy, key): the same mask and scale (dropout is diagonal). */
static fr_status keyed_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    int in[2] = {ctx->dout[0], g->nodes[ctx->node_id].inputs[1]}, nid;
    FR_TRY(fr_grad_node(ctx, "KeyedDropout", FR_DOMAIN_FP8RUN, 2, in, 1, &ctx->din[0], &nid));
    FR_TRY(fr_node_copy_attrs(&g->nodes[nid], &g->nodes[ctx->node_id]));
    return fr_grad_finish(ctx, nid);
}

/* ---- the table ---- */

const fr_op_def fr_ops_dropout[] = {
    {"Dropout", FR_DOMAIN_ONNX, 6, dropout_infer, dropout_cpu, dropout_grad, 0},
    /* never folded: its key is fed per micro-batch (a constant key would fold one mask) */
    {"KeyedDropout", FR_DOMAIN_FP8RUN, 1, keyed_infer, keyed_cpu, keyed_grad, FR_OP_NO_FOLD},
    {0},
};
