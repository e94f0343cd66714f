/* FP8-emitting producers (see fp8_producers.h). */
#include "passes/fp8_producers.h"

#include <stdio.h>
#include <string.h>

#include "ops/linear.h"
#include "ops/op.h"

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

static int readers(const fr_graph *g, int v)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++) c += g->nodes[i].inputs[k] == v;
    return c;
}

static int out_at(const fr_node *n, int o) { return o < n->n_outputs ? n->outputs[o] : -1; }

/* Linear li's X is the output of a one-input SwiGLU that only li reads, and li takes codes for it */
static int rewritable(const fr_graph *g, const fr_node *li, int *producer)
{
    fr_lin_attrs a;
    if (!is_op(li, "Linear") || fr_lin_read_attrs(li, &a) != FR_OK || a.prec != FR_LIN_FP8 ||
        a.recipe != FR_LIN_DELAYED)
        return 0;
    if (li->n_inputs <= FR_LIN_IN_SCALE_X || li->inputs[FR_LIN_IN_SCALE_X] < 0 || li->inputs[FR_LIN_IN_X] < 0) return 0;
    if (out_at(li, FR_LIN_OUT_XQ) >= 0 || out_at(li, FR_LIN_OUT_XQ_SINV) >= 0 || out_at(li, FR_LIN_OUT_AMAX_X) < 0)
        return 0;
    const int x = li->inputs[FR_LIN_IN_X], p = g->values[x].producer;
    if (p < 0 || !is_op(&g->nodes[p], "SwiGLU") || g->nodes[p].n_inputs != 1 || g->nodes[p].inputs[0] < 0 ||
        g->nodes[p].n_outputs != 1 || g->nodes[p].outputs[0] != x)
        return 0;
    const fr_value *xv = &g->values[x], *gu = &g->values[g->nodes[p].inputs[0]];
    if ((xv->dtype != FR_F32 && xv->dtype != FR_BF16) || (gu->dtype != FR_F32 && gu->dtype != FR_BF16)) return 0;
    if ((xv->flags & FR_VAL_OUTPUT) || readers(g, x) != 1) return 0;
    *producer = p;
    return 1;
}

/* Node p becomes the producer `op` reading in and writing out, with its name, its activation and
 * its bfloat16 attribute `b16` (SwiGLU's y_dtype, SwiGLUGrad's dx_dtype) kept; value v, which the
 * consumer read, now holds the codes (dtype fmt, its shape). */
static fr_status become(fr_graph *g, int p, const char *op, const char *b16, int n_in, const int *in, int n_out,
                        const int *out, int v, fr_dtype fmt)
{
    const char *act;
    int bf16;
    FR_TRY(fr_node_attr_string(&g->nodes[p], "activation", "silu", &act));
    FR_TRY(fr_attr_bf16(&g->nodes[p], b16, &bf16));
    char a[16], name[600];
    snprintf(a, sizeof a, "%s", act); /* the reset frees the attributes act points into */
    snprintf(name, sizeof name, "%s", g->nodes[p].name);
    FR_TRY(fr_node_reset(g, p, op, FR_DOMAIN_FP8RUN, name, n_in, in, n_out, out));
    g->nodes[p].op = fr_op_find(FR_DOMAIN_FP8RUN, op);
    if (strcmp(a, "silu") != 0) FR_TRY(fr_node_set_attr_string(&g->nodes[p], "activation", a));
    if (bf16) FR_TRY(fr_node_set_attr_string(&g->nodes[p], b16, "bfloat16"));
    fr_value *cv = &g->values[v];
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, cv->dims, sizeof(int64_t) * (size_t)cv->rank);
    fr_value_set_shape(cv, fmt, cv->rank, dims);
    return FR_OK;
}

/* SwiGLU p becomes SwiGLUQuantize(gate_up, scale_x) -> (X's codes, Linear li's amax_x) */
static fr_status rewrite(fr_graph *g, int li, int p)
{
    const int x = g->nodes[li].inputs[FR_LIN_IN_X];
    const int in[2] = {g->nodes[p].inputs[0], g->nodes[li].inputs[FR_LIN_IN_SCALE_X]};
    const int out[2] = {x, g->nodes[li].outputs[FR_LIN_OUT_AMAX_X]};
    FR_TRY(become(g, p, "SwiGLUQuantize", "y_dtype", 2, in, 2, out, x, FR_F8E4M3));
    g->nodes[li].outputs[FR_LIN_OUT_AMAX_X] = -1;
    return fr_graph_rebuild_producers(g);
}

/* Data gradient li's dY is the output of a one-input SwiGLUGrad that only li reads */
static int grad_rewritable(const fr_graph *g, const fr_node *li, int *producer)
{
    fr_lin_attrs a;
    if (!is_op(li, "LinearGradData") || fr_lin_read_attrs(li, &a) != FR_OK || a.prec != FR_LIN_FP8 ||
        a.recipe != FR_LIN_DELAYED)
        return 0;
    if (li->n_inputs < 4 || li->inputs[3] < 0 || li->inputs[0] < 0) return 0;
    const int v = li->inputs[0], p = g->values[v].producer;
    if (p < 0 || !is_op(&g->nodes[p], "SwiGLUGrad") || g->nodes[p].n_inputs != 2 || g->nodes[p].inputs[0] < 0 ||
        g->nodes[p].inputs[1] < 0 || g->nodes[p].n_outputs != 1 || g->nodes[p].outputs[0] != v)
        return 0;
    /* what the GPU kernel's tiles take (ops/cuda/swiglu_quant.cu): elsewhere SwiGLUGrad and the
       data gradient's own cast-transpose are faster than the element-wise fallback */
    const fr_value *dv = &g->values[v], *gu = &g->values[g->nodes[p].inputs[0]],
                   *dy = &g->values[g->nodes[p].inputs[1]];
    if (dv->dtype != FR_BF16 || gu->dtype != FR_BF16 || dy->dtype != FR_BF16 || gu->rank < 1) return 0;
    int64_t rows = 1;
    for (int k = 0; k < gu->rank - 1; k++) rows *= gu->dims[k] > 0 ? gu->dims[k] : 0;
    if (rows <= 0 || rows % 16 != 0 || gu->dims[gu->rank - 1] % 128 != 0) return 0;
    if ((dv->flags & FR_VAL_OUTPUT) || readers(g, v) != 1) return 0;
    *producer = p;
    return 1;
}

/* SwiGLUGrad p becomes SwiGLUGradQuantize(gate_up, dy, scale_dy) -> (dY's codes, dYq,
 * dYq_scale_inv, amax_dy), the last three taken from data gradient li */
static fr_status grad_rewrite(fr_graph *g, int li, int p)
{
    fr_lin_attrs la;
    FR_TRY(fr_lin_read_attrs(&g->nodes[li], &la));
    const fr_node *l = &g->nodes[li];
    const int v = l->inputs[0];
    const int in[3] = {g->nodes[p].inputs[0], g->nodes[p].inputs[1], l->inputs[3]};
    const int out[4] = {v, out_at(l, 2), out_at(l, 3), out_at(l, 1)};
    FR_TRY(become(g, p, "SwiGLUGradQuantize", "dx_dtype", 3, in, 4, out, v, la.dy_fmt));
    if (la.dy_fmt == FR_F8E4M3) FR_TRY(fr_node_set_attr_string(&g->nodes[p], "codes_dtype", "float8e4m3fn"));
    fr_node *ln = &g->nodes[li];
    for (int o = 1; o < ln->n_outputs; o++) ln->outputs[o] = -1;
    ln->n_outputs = 1;
    return fr_graph_rebuild_producers(g);
}

fr_status fr_fp8_producers(fr_graph *g, int grads, int *forward, int *backward)
{
    *forward = *backward = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        int p;
        if (rewritable(g, &g->nodes[i], &p)) {
            FR_TRY(rewrite(g, i, p));
            ++*forward;
        } else if (grads && grad_rewritable(g, &g->nodes[i], &p)) {
            FR_TRY(grad_rewrite(g, i, p));
            ++*backward;
        }
    }
    return FR_OK;
}
