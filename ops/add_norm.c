/* The residual stream's Add and the RMSNorm that reads it, one node each way (domain ai.fp8run;
 * made by passes/residual_norm_fuse.c), float32:
 *   AddRMSNorm(A, B, Scale) -> H, Y[, Hs]   H = A + B (float32 add, as ONNX Add rounds it)
 *                                           Y = RMSNormalization(H, Scale) (ops/norm.c's maths)
 *                                           Hs (optional): H rounded to bfloat16, the copy the
 *                                           backward reads (passes/narrow_gradients.c)
 *   AddRMSNormGrad(dY, H, Scale[, dH]) -> dX, dScale
 *       dX = dH + RMSNormGrad's dX          the RMSNorm part rounded to float32 first, then one
 *                                           float32 add: the bits of the unfused Add of the two
 *                                           gradients of H (the residual's and the norm's)
 * A and B have the same shape; Scale has exactly the normalized dims [axis, rank) (leading 1s
 * allowed), shared by every row. Attributes axis (default -1) and epsilon as RMSNormalization.
 * dH (the gradient reaching H from its other readers) is optional; dScale may be left empty.
 * The statistics and every output are computed in double and rounded once, as ops/norm.c does,
 * so the fused forward is bit-identical to Add + RMSNormalization on the CPU, and the backward
 * to RMSNormGrad + Add.
 *
 * bfloat16 around the FP8 Linears, half the bytes between them (passes/narrow_activations.c
 * sets them):
 *   attribute y_dtype "float32" (default) | "bfloat16": Y (read by the next Linears only) is
 *     the float32 Y rounded to bfloat16 (nearest even); H stays float32.
 *   B may be bfloat16 (the branch's Linear with y_dtype bfloat16), dY of AddRMSNormGrad too
 *     (a LinearGradData with dx_dtype bfloat16): widened exactly, so the op computes the bits
 *     it computes for the float32 tensor of the same values. A, H, dH, Scale, dX, dScale stay
 *     float32; the gradient of a bfloat16 B is float32 dX. The backward reads H, never Y.
 *   AddRMSNormGrad's H may be bfloat16 (the forward's Hs): widened exactly, the statistics are
 *     those of the rounded H. The float32 H, the residual stream, then dies with the forward's
 *     next reader instead of living until this node: half its bytes held for the backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/add_norm.h"
#include "ops/grad.h"
#include "ops/norm.h"
#include "ops/op.h"

static int same_dims(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

fr_status fr_add_norm_check_param(const fr_node *n, const fr_value *x, const fr_value *s, const fr_norm_cfg *c,
                                  const char *what)
{
    int ok = s->dtype == FR_F32 && s->rank <= x->rank;
    int64_t numel = 1;
    for (int k = 0; ok && k < s->rank; k++) {
        const int xk = x->rank - s->rank + k;
        numel *= s->dims[k];
        if (xk < c->axis)
            ok = s->dims[k] == 1;
        else
            ok = s->dims[k] == x->dims[xk];
    }
    if (!ok || numel != c->len) {
        char s1[128], s2[128];
        return fr_node_error(n, FR_ERR_SHAPE, "%s %s %s must be float32 of X %s's normalized dims (axis %d)", what,
                             fr_shape_str(s->rank, s->dims, s1, sizeof s1), fr_dtype_name(s->dtype),
                             fr_shape_str(x->rank, x->dims, s2, sizeof s2), c->axis);
    }
    return FR_OK;
}

fr_status fr_add_norm_check_scale(const fr_node *n, const fr_value *x, const fr_value *s, const fr_norm_cfg *c)
{
    return fr_add_norm_check_param(n, x, s, c, "Scale");
}

fr_status fr_add_norm_check_x(const fr_node *n, const fr_value *x, const char *what, int bf16_ok)
{
    if (x->dtype != FR_F32 && !(bf16_ok && x->dtype == FR_BF16))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s (float32%s only)", what, fr_dtype_name(x->dtype),
                             bf16_ok ? " or bfloat16" : "");
    return FR_OK;
}

fr_status fr_add_norm_y_dtype(const fr_node *n, fr_dtype *dt)
{
    int bf16;
    FR_TRY(fr_attr_bf16(n, "y_dtype", &bf16));
    *dt = bf16 ? FR_BF16 : FR_F32;
    return FR_OK;
}

/* element i of a float32 or (bf16 != NULL) bfloat16 tensor, widened exactly */
static inline float ld_f(const float *f, const uint16_t *bf16, int64_t i)
{
    return bf16 ? fr_bf16_to_f32(bf16[i]) : f[i];
}

static fr_status an_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    if (n->n_outputs < 2 || n->n_outputs > 3)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected H, Y and optionally Hs", n->n_outputs);
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    FR_TRY(fr_add_norm_check_x(n, a, "A", 0));
    FR_TRY(fr_add_norm_check_x(n, b, "B", 1));
    if (!same_dims(a, b)) return fr_node_error(n, FR_ERR_SHAPE, "A and B must have the same shape");
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, a->rank, a->dims, &c));
    FR_TRY(fr_add_norm_check_scale(n, a, s, &c));
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    fr_infer_same(g, n, 0, 0);
    fr_infer_set(g, n, 1, ydt, a->rank, a->dims);
    if (n->n_outputs > 2 && n->outputs[2] >= 0) fr_infer_set(g, n, 2, FR_BF16, a->rank, a->dims);
    return FR_OK;
}

static fr_status an_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 3 || ctx->n_out < 2 || ctx->n_out > 3 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0] || !ctx->out[1])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (A, B, Scale -> H, Y[, Hs])", ctx->n_in,
                             ctx->n_out);
    const fr_tensor *at = ctx->in[0];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, at->rank, at->dims, &c));
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    FR_TRY(fr_check_out(n, ctx->out[1], ydt, at->rank, at->dims));
    const int b16 = ctx->in[1]->dtype == FR_BF16, y16 = ydt == FR_BF16;
    const float *a = at->data, *b = b16 ? NULL : ctx->in[1]->data, *s = ctx->in[2]->data;
    const uint16_t *bh = b16 ? ctx->in[1]->data : NULL;
    float *h = ctx->out[0]->data, *y = y16 ? NULL : ctx->out[1]->data;
    uint16_t *yh = y16 ? ctx->out[1]->data : NULL;
    uint16_t *hs = NULL;
    if (ctx->n_out > 2 && ctx->out[2]) {
        FR_TRY(fr_check_out(n, ctx->out[2], FR_BF16, at->rank, at->dims));
        hs = ctx->out[2]->data;
    }
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double ss = 0.0;
        for (int64_t j = 0; j < c.len; j++) {
            const float v = a[base + j] + ld_f(b, bh, base + j);
            h[base + j] = v;
            if (hs) hs[base + j] = fr_f32_to_bf16(v);
            ss += (double)v * (double)v;
        }
        const double inv = 1.0 / sqrt(ss / (double)c.len + (double)c.eps);
        for (int64_t j = 0; j < c.len; j++) {
            const float v = (float)((double)h[base + j] * inv * (double)s[j]);
            if (yh)
                yh[base + j] = fr_f32_to_bf16(v); /* the float32 Y, rounded */
            else
                y[base + j] = v;
        }
    }
    return FR_OK;
}

/* ---- backward ---- */

static fr_status ang_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 4));
    if (n->n_outputs != 2 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs outputs dX and dScale (dScale may be empty)");
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    const fr_value *dh = fr_node_in(g, n, 3);
    FR_TRY(fr_add_norm_check_x(n, dy, "dY", 1));
    FR_TRY(fr_add_norm_check_x(n, x, "H", 1));
    if (!same_dims(dy, x) || (dh && (!same_dims(dh, x) || dh->dtype != FR_F32)))
        return fr_node_error(n, FR_ERR_SHAPE, "dY (float32 or bfloat16) and dH (float32) must have H's shape");
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    FR_TRY(fr_add_norm_check_scale(n, x, s, &c));
    fr_infer_set(g, n, 0, FR_F32, x->rank, x->dims); /* float32 whatever H's dtype */
    if (n->outputs[1] >= 0) fr_infer_same(g, n, 1, 2);
    return FR_OK;
}

static fr_status ang_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 3 || ctx->n_in > 4 || ctx->n_out != 2 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (dY, H, Scale[, dH] -> dX, dScale)",
                             ctx->n_in, ctx->n_out);
    const fr_tensor *xt = ctx->in[1];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, xt->rank, xt->dims, &c));
    const int g16 = ctx->in[0]->dtype == FR_BF16, x16 = xt->dtype == FR_BF16;
    const float *dy = g16 ? NULL : ctx->in[0]->data, *xf = x16 ? NULL : xt->data, *s = ctx->in[2]->data;
    const uint16_t *dyh = g16 ? ctx->in[0]->data : NULL, *xh16 = x16 ? xt->data : NULL;
    const float *dh = ctx->n_in > 3 && ctx->in[3] ? ctx->in[3]->data : NULL;
    float *dx = ctx->out[0]->data, *ds = ctx->out[1] ? ctx->out[1]->data : NULL;
    double *acc = NULL;
    if (ds) {
        acc = fr_calloc((size_t)(c.len ? c.len : 1), sizeof(double), "AddRMSNormGrad dScale");
        if (!acc) return FR_ERR_OOM;
    }
    const double dlen = (double)c.len;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double ss = 0.0;
        for (int64_t j = 0; j < c.len; j++) {
            const double xv = (double)ld_f(xf, xh16, base + j);
            ss += xv * xv;
        }
        const double inv = 1.0 / sqrt(ss / dlen + (double)c.eps);
        double sgx = 0.0;
        for (int64_t j = 0; j < c.len; j++) {
            const double xh = (double)ld_f(xf, xh16, base + j) * inv, gy = (double)ld_f(dy, dyh, base + j);
            sgx += gy * (double)s[j] * xh;
            if (acc) acc[j] += gy * xh;
        }
        const double mgx = sgx / dlen;
        for (int64_t j = 0; j < c.len; j++) {
            const double xh = (double)ld_f(xf, xh16, base + j) * inv;
            const float d = (float)(inv * ((double)ld_f(dy, dyh, base + j) * (double)s[j] - xh * mgx));
            dx[base + j] = dh ? dh[base + j] + d : d;
        }
    }
    if (ds)
        for (int64_t j = 0; j < c.len; j++) ds[j] = (float)acc[j];
    free(acc);
    return FR_OK;
}

/* One AddRMSNormGrad node: A and B both get dX (H = A + B); H's own gradient from its other
 * readers (dout[0]) is its dH input, so no Add of the two gradients remains. */
static fr_status an_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dh = ctx->dout[0], dy = ctx->dout[1];
    if (dy < 0) { /* only H is read on the way to the loss */
        if (dh >= 0)
            for (int i = 0; i < 2; i++)
                if (ctx->need_din[i]) ctx->din[i] = dh;
        return FR_OK;
    }
    if (!ctx->need_din[0] && !ctx->need_din[1] && !ctx->need_din[2]) return FR_OK;
    int64_t axis;
    float eps;
    FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
    FR_TRY(fr_node_attr_float(n, "epsilon", 1e-5f, &eps));
    const int h = n->outputs[0], in[4] = {dy, h, n->inputs[2], dh};
    int out[2], nid;
    FR_TRY(fr_grad_node(ctx, "AddRMSNormGrad", FR_DOMAIN_FP8RUN, dh >= 0 ? 4 : 3, in, 2, out, &nid));
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
    FR_TRY(fr_node_set_attr_float(gn, "epsilon", eps));
    if (!ctx->need_din[2]) {
        g->values[out[1]].producer = -1;
        gn->outputs[1] = -1;
    }
    FR_TRY(fr_grad_finish(ctx, nid));
    for (int i = 0; i < 2; i++)
        if (ctx->need_din[i]) ctx->din[i] = out[0];
    if (ctx->need_din[2]) ctx->din[2] = out[1];
    return FR_OK;
}

const fr_op_def fr_ops_add_norm[] = {
    {"AddRMSNorm", FR_DOMAIN_FP8RUN, 1, an_infer, an_cpu, an_grad, 0},
    {"AddRMSNormGrad", FR_DOMAIN_FP8RUN, 1, ang_infer, ang_cpu, NULL, 0},
    {0},
};
