/* The residual stream's Add and the LayerNorm(s) that read it, one node each way (domain
 * ai.fp8run; made by passes/residual_norm_fuse.c), float32; the LayerNorm family's counterpart
 * of AddRMSNorm (ops/add_norm.c):
 *   AddLayerNorm(A, B, Scale[, Bias[, Scale2[, Bias2]]]) -> H, Y[, Y2]
 *       H = A + B                       float32 add, as ONNX Add rounds it
 *       Y = LayerNormalization(H, Scale, Bias)     ops/norm.c's maths
 *       Y2 = LayerNormalization(H, Scale2, Bias2)  a parallel attention + MLP block's second norm
 *                                       of the same sum (GPT-NeoX, Falcon): the same statistics
 *   AddLayerNormGrad(dY, H, Scale[, dH[, dY2, Scale2]]) -> dX, dScale, dBias[, dScale2, dBias2]
 *       dX = dH + LayerNormGrad's dX    the norm's part rounded to float32 first, then one float32
 *                                       add: the bits of the unfused Add of H's two gradients;
 *                                       with the second norm (dH + d2) + d1, the order in which
 *                                       autodiff adds the unfused readers' gradients (the later
 *                                       reader's first)
 * Scale and Bias (Scale2 and Bias2) have exactly the normalized dims [axis, rank) (leading 1s
 * allowed), one shape, shared by every row. B has A's shape, or A's trailing dims from some dim
 * at or before axis on (leading 1s allowed): it repeats over A's leading dims, as a position
 * embedding [1, T, D] added to the token embeddings [N, T, D] does; its gradient is then dX
 * summed over them (SumToShape, as the unfused Add's). Attributes axis (default -1) and epsilon
 * as LayerNormalization's (both norms share them). dH (the gradient reaching H from its other
 * readers) is optional; the parameter gradients may be left empty (dBias is empty when the
 * forward has no Bias). The second norm's backward is there when both Y and Y2 have a gradient
 * (else one norm's node serves, with that norm's Scale).
 * The mean and variance (two passes) and every output are computed in double and rounded once, as
 * ops/norm.c does, so the fused forward is bit-identical to Add + LayerNormalization on the CPU,
 * and the backward to LayerNormGrad + Add.
 *
 * bfloat16 around the FP8 Linears, as AddRMSNorm (passes/narrow_activations.c sets them):
 * attribute y_dtype "float32" (default) | "bfloat16" rounds the float32 Y (and Y2) to bfloat16
 * (nearest even); B, dY and dY2 may be bfloat16, widened exactly. A, H, dH, the parameters and
 * the gradients stay float32. The backward reads H, never Y. */
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

/* input i is given */
static int has_in(const fr_node *n, int i) { return n->n_inputs > i && n->inputs[i] >= 0; }

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

/* Scale (input si) and the optional Bias (bi) of one norm of X */
static fr_status check_params(fr_graph *g, const fr_node *n, const fr_value *x, const fr_norm_cfg *c, int si, int bi)
{
    const fr_value *s = fr_node_in(g, n, si), *bias = fr_node_in(g, n, bi);
    FR_TRY(fr_add_norm_check_param(n, x, s, c, si == 2 ? "Scale" : "Scale2"));
    if (!bias) return FR_OK;
    FR_TRY(fr_add_norm_check_param(n, x, bias, c, bi == 3 ? "Bias" : "Bias2"));
    if (!same_dims(bias, s))
        return fr_node_error(n, FR_ERR_SHAPE, "%s must have %s's shape", bi == 3 ? "Bias" : "Bias2",
                             si == 2 ? "Scale" : "Scale2");
    return FR_OK;
}

static fr_status aln_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    const int two = has_in(n, 4);
    FR_TRY(fr_infer_require_inputs(g, n, 3, 6));
    if (n->n_outputs != 2 + two || (has_in(n, 5) && !two))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected H and Y%s (Y2 with Scale2)", n->n_outputs,
                             two ? " and Y2" : "");
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1);
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
    FR_TRY(check_params(g, n, a, &c, 2, 3));
    if (two) FR_TRY(check_params(g, n, a, &c, 4, 5));
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    fr_infer_same(g, n, 0, 0);
    fr_infer_set(g, n, 1, ydt, a->rank, a->dims);
    if (two) fr_infer_set(g, n, 2, ydt, a->rank, a->dims);
    return FR_OK;
}

/* Y of the row at h (mean, inv: its statistics) with Scale s and Bias bias (may be NULL) into
 * y or (yh != NULL) bfloat16 yh */
static void norm_row(const float *h, int64_t len, double mean, double inv, const float *s, const float *bias,
                     float *y, uint16_t *yh)
{
    for (int64_t j = 0; j < len; j++) {
        double v = ((double)h[j] - mean) * inv * (double)s[j];
        if (bias) v += (double)bias[j];
        if (yh)
            yh[j] = fr_f32_to_bf16((float)v); /* the float32 Y, rounded */
        else
            y[j] = (float)v;
    }
}

static const float *in_f(const fr_kernel_ctx *ctx, int i)
{
    return ctx->n_in > i && ctx->in[i] ? ctx->in[i]->data : NULL;
}

static fr_status aln_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const int two = ctx->n_in > 4 && ctx->in[4];
    if (ctx->n_in < 3 || ctx->n_in > 6 || ctx->n_out != 2 + two || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0] || !ctx->out[1] || (two && !ctx->out[2]))
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (A, B, Scale[, Bias[, Scale2[, Bias2]]] -> H, Y[, Y2])",
                             ctx->n_in, ctx->n_out);
    const fr_tensor *at = ctx->in[0], *bt = ctx->in[1];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, at->rank, at->dims, &c));
    fr_dtype ydt;
    FR_TRY(fr_add_norm_y_dtype(n, &ydt));
    for (int o = 1; o < ctx->n_out; o++) FR_TRY(fr_check_out(n, ctx->out[o], ydt, at->rank, at->dims));
    const int64_t brows = c.len > 0 ? fr_tensor_numel(bt) / c.len : 1;
    const int b16 = bt->dtype == FR_BF16, y16 = ydt == FR_BF16;
    const float *a = at->data, *b = b16 ? NULL : bt->data;
    const uint16_t *bh = b16 ? bt->data : NULL;
    float *h = ctx->out[0]->data;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len, bb = (r % brows) * c.len;
        for (int64_t j = 0; j < c.len; j++) h[base + j] = a[base + j] + ld_f(b, bh, bb + j);
        double mean;
        const double inv = row_stats(h + base, c.len, c.eps, &mean);
        for (int k = 0; k <= two; k++) {
            void *y = ctx->out[1 + k]->data;
            norm_row(h + base, c.len, mean, inv, in_f(ctx, 2 + 2 * k), in_f(ctx, 3 + 2 * k),
                     y16 ? NULL : (float *)y + base, y16 ? (uint16_t *)y + base : NULL);
        }
    }
    return FR_OK;
}

/* ---- backward ---- */

static fr_status alng_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    const int two = has_in(n, 4);
    FR_TRY(fr_infer_require_inputs(g, n, 3, 6));
    if (n->n_outputs != 3 + 2 * two || n->outputs[0] < 0 || two != has_in(n, 5))
        return fr_node_error(n, FR_ERR_GRAPH, "needs outputs dX, dScale, dBias%s (the parameters' may be empty)%s",
                             two ? ", dScale2, dBias2" : "", two != has_in(n, 5) ? "; dY2 and Scale2 go together" : "");
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1), *dh = fr_node_in(g, n, 3);
    const fr_value *dy2 = fr_node_in(g, n, 4);
    FR_TRY(fr_add_norm_check_x(n, dy, "dY", 1));
    FR_TRY(fr_add_norm_check_x(n, x, "H", 0));
    if (two) FR_TRY(fr_add_norm_check_x(n, dy2, "dY2", 1));
    if (!same_dims(dy, x) || (dy2 && !same_dims(dy2, x)) || (dh && (!same_dims(dh, x) || dh->dtype != FR_F32)))
        return fr_node_error(n, FR_ERR_SHAPE, "dY, dY2 (float32 or bfloat16) and dH (float32) must have H's shape");
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    FR_TRY(fr_add_norm_check_scale(n, x, fr_node_in(g, n, 2), &c));
    if (two) FR_TRY(fr_add_norm_check_param(n, x, fr_node_in(g, n, 5), &c, "Scale2"));
    fr_infer_same(g, n, 0, 1);
    for (int o = 1; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0) fr_infer_same(g, n, o, o < 3 ? 2 : 5);
    return FR_OK;
}

/* One norm's share of the backward of a row: its statistics (mean, inv), dY, Scale; the row
 * sums' means and the parameter sums on the way */
typedef struct norm_bwd {
    const float *dy, *s;
    const uint16_t *dyh;
    double *acc_s, *acc_b; /* [len] each */
    double mg, mgx;
} norm_bwd;

static void bwd_sums(norm_bwd *k, const float *x, int64_t base, int64_t len, double mean, double inv)
{
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = 0; j < len; j++) {
        const double xh = ((double)x[base + j] - mean) * inv, gy = (double)ld_f(k->dy, k->dyh, base + j);
        const double gj = gy * (double)k->s[j];
        sg += gj;
        sgx += gj * xh;
        k->acc_s[j] += gy * xh;
        k->acc_b[j] += gy;
    }
    k->mg = sg / (double)len;
    k->mgx = sgx / (double)len;
}

/* the norm's part of dX at element j of the row at base, rounded to float32 */
static float bwd_d(const norm_bwd *k, const float *x, int64_t base, int64_t j, double mean, double inv)
{
    const double xh = ((double)x[base + j] - mean) * inv;
    const double gj = (double)ld_f(k->dy, k->dyh, base + j) * (double)k->s[j];
    return (float)(inv * (gj - k->mg - xh * k->mgx));
}

static fr_status alng_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const int two = ctx->n_in > 4 && ctx->in[4];
    if (ctx->n_in < 3 || ctx->n_in > 6 || ctx->n_out != 3 + 2 * two || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        !ctx->out[0] || (two && (ctx->n_in < 6 || !ctx->in[5])))
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (dY, H, Scale[, dH[, dY2, Scale2]] -> dX, dScale, "
                             "dBias[, dScale2, dBias2])",
                             ctx->n_in, ctx->n_out);
    const fr_tensor *xt = ctx->in[1];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, xt->rank, xt->dims, &c));
    const float *x = xt->data, *dh = in_f(ctx, 3);
    float *dx = ctx->out[0]->data;
    const size_t nacc = (size_t)(c.len ? c.len : 1);
    double *acc = fr_calloc(4 * nacc, sizeof(double), "AddLayerNormGrad parameter gradients");
    if (!acc) return FR_ERR_OOM;
    norm_bwd k[2];
    memset(k, 0, sizeof k);
    for (int i = 0; i <= two; i++) {
        const fr_tensor *dyt = ctx->in[i ? 4 : 0];
        k[i].dy = dyt->dtype == FR_BF16 ? NULL : dyt->data;
        k[i].dyh = dyt->dtype == FR_BF16 ? dyt->data : NULL;
        k[i].s = ctx->in[i ? 5 : 2]->data;
        k[i].acc_s = acc + 2 * (size_t)i * nacc;
        k[i].acc_b = acc + (2 * (size_t)i + 1) * nacc;
    }
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double mean;
        const double inv = row_stats(x + base, c.len, c.eps, &mean);
        for (int i = 0; i <= two; i++) bwd_sums(&k[i], x, base, c.len, mean, inv);
        for (int64_t j = 0; j < c.len; j++) {
            const float d1 = bwd_d(&k[0], x, base, j, mean, inv);
            float v = two ? bwd_d(&k[1], x, base, j, mean, inv) : 0.0f; /* (dH + d2) + d1 */
            if (dh) v = two ? dh[base + j] + v : dh[base + j];
            dx[base + j] = dh || two ? v + d1 : d1;
        }
    }
    for (int o = 1; o < ctx->n_out; o++)
        if (ctx->out[o]) {
            float *p = ctx->out[o]->data;
            for (int64_t j = 0; j < c.len; j++) p[j] = (float)acc[(size_t)(o - 1) * nacc + (size_t)j];
        }
    free(acc);
    return FR_OK;
}

/* The backward node: A gets dX, B dX summed to its shape (H = A + B); H's own gradient from its
 * other readers (dout[0]) is its dH input, so no Add of the gradients remains. Norm k (0: Y, 1:
 * Y2) has its Scale at input 2 + 2k, its Bias at 3 + 2k; both norms' in one node when both Ys
 * have a gradient, else the one that has. */
static fr_status aln_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dh = ctx->dout[0], two = has_in(n, 4);
    const int dys[2] = {ctx->dout[1], two ? ctx->dout[2] : -1};
    int ks[2], nk = 0; /* the norms with a gradient */
    for (int k = 0; k < 2; k++)
        if (dys[k] >= 0) ks[nk++] = k;
    int need = ctx->need_din[0] || ctx->need_din[1];
    for (int k = 0; k < nk; k++)
        need = need || ctx->need_din[2 + 2 * ks[k]] || (has_in(n, 3 + 2 * ks[k]) && ctx->need_din[3 + 2 * ks[k]]);
    int dx = dh;
    if (nk && need) {
        int64_t axis;
        float eps;
        FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
        FR_TRY(fr_node_attr_float(n, "epsilon", 1e-5f, &eps));
        const int in[6] = {dys[ks[0]], n->outputs[0], n->inputs[2 + 2 * ks[0]], dh,
                           nk > 1 ? dys[1] : -1, nk > 1 ? n->inputs[4] : -1};
        int out[5], nid;
        FR_TRY(fr_grad_node(ctx, "AddLayerNormGrad", FR_DOMAIN_FP8RUN, nk > 1 ? 6 : dh >= 0 ? 4 : 3, in, 3 + 2 * (nk - 1),
                            out, &nid));
        n = &g->nodes[ctx->node_id]; /* adding the node may have moved the node array */
        fr_node *gn = &g->nodes[nid];
        FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
        FR_TRY(fr_node_set_attr_float(gn, "epsilon", eps));
        for (int o = 1; o < 3 + 2 * (nk - 1); o++) {
            const int fwd_in = o + 1 + 2 * ks[(o - 1) / 2] - 2 * ((o - 1) / 2); /* Scale or Bias of that norm */
            if (!has_in(n, fwd_in) || !ctx->need_din[fwd_in]) {
                g->values[out[o]].producer = -1;
                gn->outputs[o] = -1;
            } else {
                ctx->din[fwd_in] = out[o];
            }
        }
        FR_TRY(fr_grad_finish(ctx, nid));
        n = &g->nodes[ctx->node_id];
        dx = out[0];
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
