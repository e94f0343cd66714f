/* The residual stream's Add and the LayerNorm that reads it, one node each way (domain
 * ai.fp8run; made by passes/residual_norm_fuse.c), float32; the LayerNorm family's counterpart
 * of AddRMSNorm (ops/add_norm.c):
 *   AddLayerNorm(A, B, Scale[, Bias]) -> H, Y
 *       H = A + B                       float32 add, as ONNX Add rounds it
 *       Y = LayerNormalization(H, Scale, Bias)   ops/norm.c's maths
 *   AddLayerNormGrad(dY, H, Scale[, dH]) -> dX, dScale, dBias
 *       dX = dH + LayerNormGrad's dX    the norm's part rounded to float32 first, then one float32
 *                                       add: the bits of the unfused Add of H's two gradients
 * Scale and Bias have exactly the normalized dims [axis, rank) (leading 1s allowed), one shape,
 * shared by every row. B has A's shape, or A's trailing dims from some dim at or before axis
 * on (leading 1s allowed): it repeats over A's leading dims, as a position embedding [1, T, D]
 * added to the token embeddings [N, T, D] does; its gradient is then dX summed over them
 * (SumToShape, as the unfused Add's). Attributes axis (default -1) and epsilon as
 * LayerNormalization's. dH (the gradient reaching H from its other readers) is optional; dScale
 * and dBias may be left empty (dBias is empty when the forward has no Bias).
 * The mean and variance (two passes) and every output are computed in double and rounded once, as
 * ops/norm.c does, so the fused forward is bit-identical to Add + LayerNormalization on the CPU,
 * and the backward to LayerNormGrad + Add.
 *
 * bfloat16 around the FP8 Linears, as AddRMSNorm (passes/narrow_activations.c sets them):
 * attribute y_dtype "float32" (default) | "bfloat16" rounds the float32 Y to bfloat16 (nearest
 * even); B and dY may be bfloat16, widened exactly. A, H, dH, Scale, Bias and the gradients
 * stay float32. The backward reads H, never Y. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/add_norm.h"
#include "ops/grad.h"
#include "ops/norm.h"
#include "ops/op.h"

int64_t fr_add_layer_norm_b_rows(const fr_value *a, const fr_value *b, int axis, int64_t len)
{
    if (b->rank > a->rank || len <= 0) return 0;
    int ones = 0; /* past the dims equal to A's: only 1s from here on */
    int split = a->rank - b->rank;
    for (int k = b->rank - 1; k >= 0; k--) {
        const int ak = a->rank - b->rank + k;
        if (!ones && b->dims[k] == a->dims[ak]) {
            split = ak;
            continue;
        }
        ones = 1;
        if (b->dims[k] != 1) return 0;
    }
    if (split > axis) return 0;
    int64_t n = 1;
    for (int k = 0; k < b->rank; k++) n *= b->dims[k];
    return n / len;
}

static int same_dims(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

static int has_bias(const fr_node *n) { return n->n_inputs > 3 && n->inputs[3] >= 0; }

static inline float ld_f(const float *f, const uint16_t *bf16, int64_t i)
{
    return bf16 ? fr_bf16_to_f32(bf16[i]) : f[i];
}

/* mean and 1 / sqrt(var + eps) of the float32 row x[0, len), as ops/norm.c's row_stats */
static double row_stats(const float *x, int64_t len, float eps, double *mean)
{
    const double dlen = (double)len;
    double m = 0.0, var = 0.0;
    for (int64_t j = 0; j < len; j++) m += (double)x[j];
    m /= dlen;
    for (int64_t j = 0; j < len; j++) {
        const double d = (double)x[j] - m;
        var += d * d;
    }
    var /= dlen;
    *mean = m;
    return 1.0 / sqrt(var + (double)eps);
}

static fr_status aln_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, has_bias(n) ? 4 : 3));
    if (n->n_outputs != 2) return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected H and Y", n->n_outputs);
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    const fr_value *bias = fr_node_in(g, n, 3);
    FR_TRY(fr_add_norm_check_x(n, a, "A", 0));
    FR_TRY(fr_add_norm_check_x(n, b, "B", 1));
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, a->rank, a->dims, &c));
    if (c.len > 0 && fr_add_layer_norm_b_rows(a, b, c.axis, c.len) <= 0) {
        char s1[128], s2[128];
        return fr_node_error(n, FR_ERR_SHAPE, "B %s must be A %s or its trailing dims from axis %d or before on",
                             fr_shape_str(b->rank, b->dims, s1, sizeof s1),
                             fr_shape_str(a->rank, a->dims, s2, sizeof s2), c.axis);
    }
    FR_TRY(fr_add_norm_check_scale(n, a, s, &c));
    if (bias) {
        FR_TRY(fr_add_norm_check_param(n, a, bias, &c, "Bias"));
        if (!same_dims(bias, s))
            return fr_node_error(n, FR_ERR_SHAPE, "Bias must have Scale's shape");
    }
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    fr_infer_same(g, n, 0, 0);
    fr_infer_set(g, n, 1, ydt, a->rank, a->dims);
    return FR_OK;
}

static fr_status aln_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 3 || ctx->n_in > 4 || ctx->n_out != 2 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0] || !ctx->out[1])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (A, B, Scale[, Bias] -> H, Y)", ctx->n_in,
                             ctx->n_out);
    const fr_tensor *at = ctx->in[0], *bt = ctx->in[1];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, at->rank, at->dims, &c));
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    FR_TRY(fr_check_out(n, ctx->out[1], ydt, at->rank, at->dims));
    const int64_t brows = c.len > 0 ? fr_tensor_numel(bt) / c.len : 1;
    const int b16 = bt->dtype == FR_BF16, y16 = ydt == FR_BF16;
    const float *a = at->data, *b = b16 ? NULL : bt->data, *s = ctx->in[2]->data;
    const float *bias = ctx->n_in > 3 && ctx->in[3] ? ctx->in[3]->data : NULL;
    const uint16_t *bh = b16 ? bt->data : NULL;
    float *h = ctx->out[0]->data, *y = y16 ? NULL : ctx->out[1]->data;
    uint16_t *yh = y16 ? ctx->out[1]->data : NULL;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len, bb = (r % brows) * c.len;
        for (int64_t j = 0; j < c.len; j++) h[base + j] = a[base + j] + ld_f(b, bh, bb + j);
        double mean;
        const double inv = row_stats(h + base, c.len, c.eps, &mean);
        for (int64_t j = 0; j < c.len; j++) {
            double v = ((double)h[base + j] - mean) * inv * (double)s[j];
            if (bias) v += (double)bias[j];
            if (yh)
                yh[base + j] = fr_f32_to_bf16((float)v); /* the float32 Y, rounded */
            else
                y[base + j] = (float)v;
        }
    }
    return FR_OK;
}

/* ---- backward ---- */

static fr_status alng_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 4));
    if (n->n_outputs != 3 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs outputs dX, dScale and dBias (the last two may be empty)");
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    const fr_value *dh = fr_node_in(g, n, 3);
    FR_TRY(fr_add_norm_check_x(n, dy, "dY", 1));
    FR_TRY(fr_add_norm_check_x(n, x, "H", 0));
    if (!same_dims(dy, x) ||
        (dh && (!same_dims(dh, x) || dh->dtype != FR_F32)))
        return fr_node_error(n, FR_ERR_SHAPE, "dY (float32 or bfloat16) and dH (float32) must have H's shape");
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    FR_TRY(fr_add_norm_check_scale(n, x, s, &c));
    fr_infer_same(g, n, 0, 1);
    if (n->outputs[1] >= 0) fr_infer_same(g, n, 1, 2);
    if (n->outputs[2] >= 0) fr_infer_same(g, n, 2, 2);
    return FR_OK;
}

static fr_status alng_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 3 || ctx->n_in > 4 || ctx->n_out != 3 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (dY, H, Scale[, dH] -> dX, dScale, dBias)", ctx->n_in,
                             ctx->n_out);
    const fr_tensor *xt = ctx->in[1];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, xt->rank, xt->dims, &c));
    const int g16 = ctx->in[0]->dtype == FR_BF16;
    const float *dy = g16 ? NULL : ctx->in[0]->data, *x = xt->data, *s = ctx->in[2]->data;
    const uint16_t *dyh = g16 ? ctx->in[0]->data : NULL;
    const float *dh = ctx->n_in > 3 && ctx->in[3] ? ctx->in[3]->data : NULL;
    float *dx = ctx->out[0]->data, *ds = ctx->out[1] ? ctx->out[1]->data : NULL;
    float *db = ctx->out[2] ? ctx->out[2]->data : NULL;
    const size_t nacc = (size_t)(c.len ? c.len : 1);
    double *acc = fr_calloc(2 * nacc, sizeof(double), "AddLayerNormGrad dScale and dBias");
    if (!acc) return FR_ERR_OOM;
    double *acc_s = acc, *acc_b = acc + nacc;
    const double dlen = (double)c.len;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double mean;
        const double inv = row_stats(x + base, c.len, c.eps, &mean);
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < c.len; j++) {
            const double xh = ((double)x[base + j] - mean) * inv, gy = (double)ld_f(dy, dyh, base + j);
            const double gj = gy * (double)s[j];
            sg += gj;
            sgx += gj * xh;
            acc_s[j] += gy * xh;
            acc_b[j] += gy;
        }
        const double mg = sg / dlen, mgx = sgx / dlen;
        for (int64_t j = 0; j < c.len; j++) {
            const double xh = ((double)x[base + j] - mean) * inv;
            const double gj = (double)ld_f(dy, dyh, base + j) * (double)s[j];
            const float d = (float)(inv * (gj - mg - xh * mgx));
            dx[base + j] = dh ? dh[base + j] + d : d;
        }
    }
    for (int64_t j = 0; j < c.len; j++) {
        if (ds) ds[j] = (float)acc_s[j];
        if (db) db[j] = (float)acc_b[j];
    }
    free(acc);
    return FR_OK;
}

/* One AddLayerNormGrad node: A gets dX, B dX summed to its shape (H = A + B); H's own gradient
 * from its other readers (dout[0]) is its dH input, so no Add of the two gradients remains. */
static fr_status aln_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dh = ctx->dout[0], dy = ctx->dout[1], bias = has_bias(n);
    int dx = dh;
    if (dy >= 0 && (ctx->need_din[0] || ctx->need_din[1] || ctx->need_din[2] || (bias && ctx->need_din[3]))) {
        int64_t axis;
        float eps;
        FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
        FR_TRY(fr_node_attr_float(n, "epsilon", 1e-5f, &eps));
        const int in[4] = {dy, n->outputs[0], n->inputs[2], dh};
        int out[3], nid;
        FR_TRY(fr_grad_node(ctx, "AddLayerNormGrad", FR_DOMAIN_FP8RUN, dh >= 0 ? 4 : 3, in, 3, out, &nid));
        fr_node *gn = &g->nodes[nid];
        FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
        FR_TRY(fr_node_set_attr_float(gn, "epsilon", eps));
        for (int o = 1; o < 3; o++)
            if (!ctx->need_din[o + 1] || (o == 2 && !bias)) {
                g->values[out[o]].producer = -1;
                gn->outputs[o] = -1;
            }
        FR_TRY(fr_grad_finish(ctx, nid));
        dx = out[0];
        if (ctx->need_din[2]) ctx->din[2] = out[1];
        if (bias && ctx->need_din[3]) ctx->din[3] = out[2];
    }
    if (dx < 0) return FR_OK; /* nothing reaches H */
    if (ctx->need_din[0]) ctx->din[0] = dx;
    if (ctx->need_din[1]) FR_TRY(fr_grad_sum_to(ctx, dx, n->inputs[1], &ctx->din[1]));
    return FR_OK;
}

const fr_op_def fr_ops_add_layer_norm[] = {
    {"AddLayerNorm", FR_DOMAIN_FP8RUN, 1, aln_infer, aln_cpu, aln_grad, 0},
    {"AddLayerNormGrad", FR_DOMAIN_FP8RUN, 1, alng_infer, alng_cpu, NULL, 0},
    {0},
};
