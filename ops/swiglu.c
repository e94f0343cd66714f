/* Fused SwiGLU on the CPU: SwiGLU and SwiGLUGrad as ops/swiglu.h specifies. Each element is
 * computed in double from its float inputs and rounded once. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/swiglu.h"

/* ---- geometry (shared with the CUDA launchers) ---- */

static int same_shape(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

fr_status fr_glu_act_parse(const char *name, int *act)
{
    *act = strcmp(name, "silu") == 0        ? FR_GLU_SILU
           : strcmp(name, "gelu_tanh") == 0 ? FR_GLU_GELU_TANH
           : strcmp(name, "gelu") == 0      ? FR_GLU_GELU
                                            : -1;
    if (*act >= 0) return FR_OK;
    *act = FR_GLU_SILU;
    return fr_error(FR_ERR_UNSUPPORTED, "GLU activation '%s' is not one of silu, gelu_tanh, gelu", name);
}

fr_swiglu_geom fr_swiglu_fused_geom(int act, int64_t rows, int64_t F, fr_dtype in_dtype, fr_dtype out_dtype)
{
    fr_swiglu_geom geo;
    memset(&geo, 0, sizeof geo);
    geo.fused = 1;
    geo.act = act;
    geo.rows = rows;
    geo.F = F;
    geo.in_stride = 2 * F;
    geo.up_off = F;
    geo.in_dtype = in_dtype;
    geo.math = fr_swiglu_out_dtype(in_dtype);
    geo.out_dtype = out_dtype;
    return geo;
}

fr_status fr_swiglu_geometry(const fr_graph *g, const fr_node *n, int grad, fr_swiglu_geom *geo)
{
    memset(geo, 0, sizeof *geo);
    const int n_data = n->n_inputs - grad; /* gate/up inputs: 1 or 2 */
    if (n_data < 1 || n_data > 2)
        return fr_node_error(n, FR_ERR_GRAPH, "takes %s, got %d inputs",
                             grad ? "(gate, up, dy) or (gate_up, dy)" : "(gate, up) or (gate_up)", n->n_inputs);
    for (int i = 0; i < n->n_inputs; i++)
        if (n->inputs[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_value *x = &g->values[n->inputs[0]];
    char s1[128], s2[128];
    if (x->dtype != FR_F32 && x->dtype != FR_F64 && x->dtype != FR_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' is %s: float32, bfloat16 or float64 only", x->name,
                             fr_dtype_name(x->dtype));
    if (x->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input '%s' is a scalar: needs rank >= 1", x->name);
    geo->in_dtype = x->dtype;
    geo->math = fr_swiglu_out_dtype(x->dtype);
    for (int i = 1; i < n->n_inputs; i++) {
        const fr_value *y = &g->values[n->inputs[i]];
        /* gate and up share the input dtype; dy (the last input of the gradient) is the math
         * dtype's or bfloat16 (float32 math only) */
        const int is_dy = grad && i == n->n_inputs - 1;
        const fr_dtype want = is_dy ? geo->math : x->dtype;
        if (y->dtype != want && !(is_dy && y->dtype == FR_BF16 && geo->math == FR_F32))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' is %s, expected %s%s (input '%s' is %s)", y->name,
                                 fr_dtype_name(y->dtype), fr_dtype_name(want),
                                 is_dy && want == FR_F32 ? " or bfloat16" : "", x->name, fr_dtype_name(x->dtype));
        if (is_dy) geo->dy_dtype = y->dtype;
    }
    /* y_dtype / dx_dtype: the outputs narrowed to bfloat16 */
    const char *attr = grad ? "dx_dtype" : "y_dtype";
    int bf16;
    FR_TRY(fr_attr_bf16(n, attr, &bf16));
    geo->out_dtype = bf16 ? FR_BF16 : geo->math;
    if (geo->out_dtype == FR_BF16 && geo->math != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s bfloat16 needs float32 or bfloat16 inputs ('%s' is %s)", attr,
                             x->name, fr_dtype_name(x->dtype));
    const char *act;
    FR_TRY(fr_node_attr_string(n, "activation", "silu", &act));
    if (fr_glu_act_parse(act, &geo->act) != FR_OK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute activation=\"%s\" (\"silu\", \"gelu_tanh\" or \"gelu\")", act);
    const int64_t last = x->dims[x->rank - 1];
    geo->fused = n_data == 1;
    geo->F = geo->fused ? last / 2 : last;
    if (geo->fused && last % 2 != 0)
        return fr_node_error(n, FR_ERR_SHAPE, "gate_up '%s' %s: its last dim must be even (gate then up)", x->name,
                             fr_shape_str(x->rank, x->dims, s1, sizeof s1));
    geo->rows = 1;
    for (int k = 0; k < x->rank - 1; k++) geo->rows *= x->dims[k];
    geo->in_stride = geo->fused ? 2 * geo->F : geo->F;
    geo->up_off = geo->fused ? geo->F : 0;
    /* up and dy: gate's shape (two-input), dy gate_up's with the last dim halved (one-input) */
    for (int i = 1; i < n->n_inputs; i++) {
        const fr_value *y = &g->values[n->inputs[i]];
        int ok;
        if (geo->fused) {
            ok = y->rank == x->rank && y->dims[y->rank - 1] == geo->F;
            for (int k = 0; ok && k < x->rank - 1; k++) ok = y->dims[k] == x->dims[k];
        } else {
            ok = same_shape(x, y);
        }
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE, "input '%s' is %s, expected %s (%s '%s' %s, no broadcasting)",
                                 y->name, fr_shape_str(y->rank, y->dims, s1, sizeof s1),
                                 geo->fused ? "gate_up's shape with the last dim halved" : "the same shape",
                                 geo->fused ? "gate_up" : "gate", x->name,
                                 fr_shape_str(x->rank, x->dims, s2, sizeof s2));
    }
    return FR_OK;
}

/* ---- SwiGLU ---- */

static fr_status swiglu_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 2));
    if (n->n_outputs != 1 || n->outputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one output y");
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(g, n, 0, &geo));
    const fr_value *x = fr_node_in(g, n, 0);
    int64_t d[FR_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = geo.F;
    fr_infer_set(g, n, 0, geo.out_dtype, x->rank, d);
    return FR_OK;
}

/* s = sigmoid(g) and 1 - s without cancellation or overflow on either side. */
static void sigmoid_pair(double g, double *s, double *oms)
{
    if (g >= 0) {
        double e = exp(-g);
        *s = 1.0 / (1.0 + e);
        *oms = e * *s;
    } else {
        double e = exp(g);
        *oms = 1.0 / (1.0 + e);
        *s = e * *oms;
    }
}

/* The gate's activation a = act(g) and its derivative da (see swiglu.h). */
static void act_pair(int act, double g, double *a, double *da)
{
    double s, oms;
    if (act == FR_GLU_GELU) {
        const double phi = 0.5 * erfc(-g * 0.70710678118654752440);
        *a = g * phi;
        *da = phi + g * exp(-0.5 * g * g) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */
        return;
    }
    const double k = 0.79788456080286535588, c = 0.044715;
    sigmoid_pair(act == FR_GLU_GELU_TANH ? 2.0 * k * (g + c * g * g * g) : g, &s, &oms);
    *a = g * s;
    *da = act == FR_GLU_GELU_TANH ? s + g * 2.0 * s * oms * k * (1.0 + 3.0 * c * g * g) : s * (1.0 + g * oms);
}

/* Element i of a float64, float32 or bfloat16 tensor as double (exact). */
static inline double ld(const void *p, fr_dtype dt, int64_t i)
{
    if (dt == FR_F64) return ((const double *)p)[i];
    if (dt == FR_F32) return ((const float *)p)[i];
    return fr_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* Element i = v rounded once to float64 / float32; bfloat16: the float32 value rounded. */
static inline void st(void *p, fr_dtype dt, int64_t i, double v)
{
    if (dt == FR_F64)
        ((double *)p)[i] = v;
    else if (dt == FR_F32)
        ((float *)p)[i] = (float)v;
    else
        ((uint16_t *)p)[i] = fr_f32_to_bf16((float)v);
}

static fr_status swiglu_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(ctx->g, n, 0, &geo));
    const fr_value *x = &ctx->g->values[n->inputs[0]];
    int64_t d[FR_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = geo.F;
    FR_TRY(fr_check_out(n, ctx->out[0], geo.out_dtype, x->rank, d));
    fr_swiglu_forward_cpu(&geo, ctx->in[0]->data, ctx->in[geo.fused ? 0 : 1]->data, ctx->out[0]->data);
    return FR_OK;
}

void fr_swiglu_forward_cpu(const fr_swiglu_geom *geo, const void *gp, const void *up, void *yp)
{
    const fr_dtype it = geo->in_dtype, ot = geo->out_dtype;
    for (int64_t r = 0; r < geo->rows; r++) {
        const int64_t o = r * geo->in_stride;
        for (int64_t j = 0; j < geo->F; j++) {
            double a, da;
            act_pair(geo->act, ld(gp, it, o + j), &a, &da);
            st(yp, ot, r * geo->F + j, a * ld(up, it, geo->up_off + o + j));
        }
    }
}

/* The backward is one SwiGLUGrad node reading the forward's inputs; outputs whose gradient
 * nobody needs are left empty (two-input form). */
static fr_status swiglu_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int fused = n->n_inputs == 1;
    if (ctx->dout[0] < 0 || !(ctx->need_din[0] || (!fused && ctx->need_din[1]))) return FR_OK;
    const char *a;
    FR_TRY(fr_node_attr_string(n, "activation", "silu", &a));
    char act[16];
    snprintf(act, sizeof act, "%s", a); /* n moves when the graph grows */
    int in[3], out[2], nid;
    if (fused) {
        in[0] = n->inputs[0];
        in[1] = ctx->dout[0];
        FR_TRY(fr_grad_node(ctx, "SwiGLUGrad", FR_DOMAIN_FP8RUN, 2, in, 1, out, &nid));
        ctx->din[0] = out[0];
    } else {
        in[0] = n->inputs[0];
        in[1] = n->inputs[1];
        in[2] = ctx->dout[0];
        FR_TRY(fr_grad_node(ctx, "SwiGLUGrad", FR_DOMAIN_FP8RUN, 3, in, 2, out, &nid));
        fr_grad_keep_needed(ctx, nid, 2, out);
    }
    if (strcmp(act, "silu") != 0) FR_TRY(fr_node_set_attr_string(&g->nodes[nid], "activation", act));
    return fr_grad_finish(ctx, nid);
}

/* ---- SwiGLUGrad ---- */

static fr_status swiglug_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 3));
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(g, n, 1, &geo));
    if (geo.fused) {
        if (n->n_outputs != 1 || n->outputs[0] < 0)
            return fr_node_error(n, FR_ERR_GRAPH, "the one-input form has one output d_gate_up");
        const fr_value *x = fr_node_in(g, n, 0);
        fr_infer_set(g, n, 0, geo.out_dtype, x->rank, x->dims);
        return FR_OK;
    }
    if (n->n_outputs != 2) return fr_node_error(n, FR_ERR_GRAPH, "needs 2 outputs dgate, dup (empty when not needed)");
    for (int i = 0; i < 2; i++) {
        const fr_value *x = fr_node_in(g, n, i);
        if (n->outputs[i] >= 0) fr_infer_set(g, n, i, geo.out_dtype, x->rank, x->dims);
    }
    return FR_OK;
}

static fr_status swiglug_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(ctx->g, n, 1, &geo));
    const fr_value *x = &ctx->g->values[n->inputs[0]];
    fr_tensor *dg = ctx->out[0], *du = geo.fused ? ctx->out[0] : (ctx->n_out > 1 ? ctx->out[1] : NULL);
    if (dg) FR_TRY(fr_check_out(n, dg, geo.out_dtype, x->rank, x->dims));
    if (du && !geo.fused) FR_TRY(fr_check_out(n, du, geo.out_dtype, x->rank, x->dims));
    fr_swiglu_backward_cpu(&geo, ctx->in[0]->data, ctx->in[geo.fused ? 0 : 1]->data, ctx->in[ctx->n_in - 1]->data,
                           dg ? dg->data : NULL, du ? du->data : NULL);
    return FR_OK;
}

void fr_swiglu_backward_cpu(const fr_swiglu_geom *geo, const void *gp, const void *up, const void *dyp, void *dgp,
                            void *dup)
{
    const fr_dtype it = geo->in_dtype, ot = geo->out_dtype;
    for (int64_t r = 0; r < geo->rows; r++) {
        const int64_t o = r * geo->in_stride;
        for (int64_t j = 0; j < geo->F; j++) {
            const double uv = ld(up, it, geo->up_off + o + j), dy = ld(dyp, geo->dy_dtype, r * geo->F + j);
            double a, da;
            act_pair(geo->act, ld(gp, it, o + j), &a, &da);
            if (dgp) st(dgp, ot, o + j, dy * uv * da);
            if (dup) st(dup, ot, geo->up_off + o + j, dy * a);
        }
    }
}

const fr_op_def fr_ops_swiglu[] = {
    {"SwiGLU", FR_DOMAIN_FP8RUN, 1, swiglu_infer, swiglu_cpu, swiglu_grad, 0},
    {"SwiGLUGrad", FR_DOMAIN_FP8RUN, 1, swiglug_infer, swiglug_cpu, NULL, 0},
    {0},
};
