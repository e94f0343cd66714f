/* SwiGLUQuantize and SwiGLUGradQuantize on the CPU (ops/swiglu.h): the one-input SwiGLU's y
 * (SwiGLUGrad's d_gate_up), made as SwiGLU (SwiGLUGrad) makes it, quantized with the delayed
 * recipe's scale exactly as the fp8 Linear quantizes its X (LinearGradData its dY). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "graph/fp8_scaling.h"
#include "ops/swiglu.h"

/* gate_up [..., 2F] float32 / bfloat16 and scale [1] float32; *geo the one-input geometry with
 * y_dtype's rounding as out_dtype */
static fr_status quant_geometry(const fr_graph *g, const fr_node *n, fr_swiglu_geom *geo)
{
    if (n->n_inputs != 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "takes (gate_up, scale), got %d inputs", n->n_inputs);
    if (n->n_outputs != 2 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs the outputs codes and amax");
    const fr_value *x = &g->values[n->inputs[0]], *s = &g->values[n->inputs[1]];
    char sh[128];
    if ((x->dtype != FR_F32 && x->dtype != FR_BF16) || x->rank < 1 || x->dims[x->rank - 1] % 2 != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "gate_up '%s' (%s %s) must be float32 or bfloat16 with an even "
                             "last dim",
                             x->name, fr_dtype_name(x->dtype), fr_shape_str(x->rank, x->dims, sh, sizeof sh));
    int64_t sn = 1;
    for (int k = 0; k < s->rank; k++) sn *= s->dims[k];
    if (s->dtype != FR_F32 || sn != 1) return fr_node_error(n, FR_ERR_SHAPE, "scale '%s' must be float32 [1]", s->name);
    int bf16, act;
    const char *a;
    FR_TRY(fr_attr_bf16(n, "y_dtype", &bf16));
    FR_TRY(fr_node_attr_string(n, "activation", "silu", &a));
    if (fr_glu_act_parse(a, &act) != FR_OK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute activation=\"%s\" (\"silu\", \"gelu_tanh\" or \"gelu\")",
                             a);
    int64_t rows = 1;
    for (int k = 0; k < x->rank - 1; k++) rows *= x->dims[k];
    *geo = fr_swiglu_fused_geom(act, rows, x->dims[x->rank - 1] / 2, x->dtype, bf16 ? FR_BF16 : FR_F32);
    return FR_OK;
}

static fr_status quant_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    fr_swiglu_geom geo;
    FR_TRY(quant_geometry(g, n, &geo));
    const fr_value *x = fr_node_in(g, n, 0);
    int64_t d[FR_MAX_RANK], one = 1;
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = geo.F;
    fr_infer_set(g, n, 0, FR_F8E4M3, x->rank, d);
    if (n->outputs[1] >= 0) fr_infer_set(g, n, 1, FR_F32, 1, &one);
    return FR_OK;
}

static fr_status quant_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    fr_swiglu_geom geo;
    FR_TRY(quant_geometry(ctx->g, n, &geo));
    const fr_tensor *x = ctx->in[0];
    int64_t d[FR_MAX_RANK];
    memcpy(d, x->dims, sizeof(int64_t) * (size_t)x->rank);
    d[x->rank - 1] = geo.F;
    FR_TRY(fr_check_out(n, ctx->out[0], FR_F8E4M3, x->rank, d));
    const int64_t count = geo.rows * geo.F;
    float *y = fr_malloc((size_t)(count > 0 ? count : 1) * sizeof(float), "SwiGLUQuantize's y");
    if (!y) return FR_ERR_OOM;
    const int bf16 = geo.out_dtype == FR_BF16;
    geo.out_dtype = FR_F32; /* y in float32, then rounded as SwiGLU's bfloat16 store rounds it */
    fr_swiglu_forward_cpu(&geo, x->data, x->data, y);
    if (bf16)
        for (int64_t i = 0; i < count; i++) y[i] = fr_bf16_to_f32(fr_f32_to_bf16(y[i]));
    char what[300];
    snprintf(what, sizeof what, "node '%s' (SwiGLUQuantize): output '%s'", n->name, ctx->g->values[n->outputs[0]].name);
    fr_status st =
        fr_fp8_quantize_blocks(y, geo.rows, geo.F, geo.F, geo.rows ? geo.rows : 1, geo.F ? geo.F : 1, FR_F8E4M3, 0,
                               (const float *)ctx->in[1]->data, what, (uint8_t *)ctx->out[0]->data, NULL, NULL, 0);
    if (st == FR_OK && ctx->n_out > 1 && ctx->out[1]) ((float *)ctx->out[1]->data)[0] = fr_amax(y, count);
    free(y);
    return st;
}

/* ---- SwiGLUGradQuantize ---- */

/* (gate_up, dy, scale): the geometry SwiGLUGrad(gate_up, dy) of the same attributes has, and the
 * codes' format */
static fr_status gq_geometry(const fr_graph *g, const fr_node *n, fr_swiglu_geom *geo, fr_dtype *fmt)
{
    if (n->n_inputs != 3 || n->inputs[2] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "takes (gate_up, dy, scale), got %d inputs", n->n_inputs);
    if (n->n_outputs < 1 || n->n_outputs > 4 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs the output codes (then codes_t, scale_inv, amax, each optional)");
    fr_node grad = *n; /* the same node read as SwiGLUGrad's one-input form */
    grad.n_inputs = 2;
    FR_TRY(fr_swiglu_geometry(g, &grad, 1, geo));
    if (!geo->fused || geo->math != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "gate_up must be float32 or bfloat16");
    const fr_value *s = &g->values[n->inputs[2]];
    int64_t sn = 1;
    for (int k = 0; k < s->rank; k++) sn *= s->dims[k];
    if (s->dtype != FR_F32 || sn != 1) return fr_node_error(n, FR_ERR_SHAPE, "scale '%s' must be float32 [1]", s->name);
    const char *cd;
    FR_TRY(fr_node_attr_string(n, "codes_dtype", "float8e5m2", &cd));
    if (strcmp(cd, "float8e5m2") == 0)
        *fmt = FR_F8E5M2;
    else if (strcmp(cd, "float8e4m3fn") == 0)
        *fmt = FR_F8E4M3;
    else
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute codes_dtype=\"%s\" (\"float8e5m2\" or \"float8e4m3fn\")",
                             cd);
    return FR_OK;
}

static fr_status gq_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    fr_swiglu_geom geo;
    fr_dtype fmt;
    FR_TRY(gq_geometry(g, n, &geo, &fmt));
    const fr_value *x = fr_node_in(g, n, 0);
    int64_t t[2] = {2 * geo.F, geo.rows}, one = 1;
    fr_infer_set(g, n, 0, fmt, x->rank, x->dims);
    if (n->n_outputs > 1 && n->outputs[1] >= 0) fr_infer_set(g, n, 1, fmt, 2, t);
    for (int o = 2; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0) fr_infer_set(g, n, o, FR_F32, 1, &one);
    return FR_OK;
}

static fr_status gq_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    fr_swiglu_geom geo;
    fr_dtype fmt;
    FR_TRY(gq_geometry(ctx->g, n, &geo, &fmt));
    const fr_tensor *x = ctx->in[0];
    FR_TRY(fr_check_out(n, ctx->out[0], fmt, x->rank, x->dims));
    const int64_t M = geo.rows, C = 2 * geo.F, count = M * C;
    fr_tensor *ct = ctx->n_out > 1 ? ctx->out[1] : NULL, *si = ctx->n_out > 2 ? ctx->out[2] : NULL;
    fr_tensor *am = ctx->n_out > 3 ? ctx->out[3] : NULL;
    float *d = fr_malloc((size_t)(count > 0 ? count : 1) * sizeof(float), "SwiGLUGradQuantize's d_gate_up");
    if (!d) return FR_ERR_OOM;
    const int bf16 = geo.out_dtype == FR_BF16;
    geo.out_dtype = FR_F32; /* d_gate_up in float32, then rounded as SwiGLUGrad's bfloat16 store rounds it */
    fr_swiglu_backward_cpu(&geo, x->data, x->data, ctx->in[1]->data, d, d);
    if (bf16)
        for (int64_t i = 0; i < count; i++) d[i] = fr_bf16_to_f32(fr_f32_to_bf16(d[i]));
    char what[300];
    snprintf(what, sizeof what, "node '%s' (SwiGLUGradQuantize): output '%s'", n->name,
             ctx->g->values[n->outputs[0]].name);
    uint8_t *q = ctx->out[0]->data;
    fr_status st = fr_fp8_quantize_blocks(d, M, C, C, M ? M : 1, C ? C : 1, fmt, 0, (const float *)ctx->in[2]->data,
                                          what, q, NULL, NULL, 0);
    if (st == FR_OK && ct) /* [C][M]: the weight gradient's operand */
        for (int64_t r = 0; r < M; r++)
            for (int64_t c = 0; c < C; c++) ((uint8_t *)ct->data)[c * M + r] = q[r * C + c];
    if (st == FR_OK && si) ((float *)si->data)[0] = 1.0f / ((const float *)ctx->in[2]->data)[0];
    if (st == FR_OK && am) ((float *)am->data)[0] = fr_amax(d, count);
    free(d);
    return st;
}

const fr_op_def fr_ops_swiglu_quant[] = {
    {"SwiGLUQuantize", FR_DOMAIN_FP8RUN, 1, quant_infer, quant_cpu, NULL, 0},
    {"SwiGLUGradQuantize", FR_DOMAIN_FP8RUN, 1, gq_infer, gq_cpu, NULL, 0},
    {0},
};
