/* Narrow gradients (see narrow_gradients.h): set dx_dtype bfloat16 on the qualifying backward
 * nodes and give their outputs that dtype. */
#include <stdio.h>
#include <string.h>

#include "ops/linear.h"
#include "ops/op.h"
#include "passes/narrow_activations.h"
#include "passes/narrow_gradients.h"

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

/* dY of a bf16/fp8 LinearGradData, Ys of a bf16/fp8 LinearGradWeight */
static int linear_dy(const fr_node *n, int slot)
{
    return (slot == 0 && fr_narrow_lowp_linear(n, "LinearGradData")) ||
           (slot == 1 && fr_narrow_lowp_linear(n, "LinearGradWeight"));
}

/* dy of SwiGLUGrad (its last input), dO of AttentionQKVGrad(X, O, LSE, dO [, cos, sin]), dy of
 * Gelu's ActivationGrad (GPT-2's and GPT-NeoX's MLP: the down projection's dX; its dx, which the
 * bias gradient also reads, stays float32) */
static int fused_grad_dy(const fr_node *n, int slot)
{
    if (is_op(n, "SwiGLUGrad")) return slot == n->n_inputs - 1 && slot >= 1;
    if (is_op(n, "ActivationGrad")) {
        const char *op;
        return slot == 0 && fr_node_attr_string(n, "op", "", &op) == FR_OK && strcmp(op, "Gelu") == 0;
    }
    return is_op(n, "AttentionQKVGrad") && slot == 3;
}

/* logits of the loss head, forward and backward */
static int loss_logits(const fr_node *n, int slot)
{
    return (slot == 0 && is_op(n, "SoftmaxCrossEntropy")) || (slot == 1 && is_op(n, "SoftmaxCrossEntropyGrad"));
}

/* The outputs dx_dtype narrows: dX alone for LinearGradData (not dYq) and AttentionQKVGrad (its
 * q/k norm weights' gradients, outputs 1 and 2, stay float32: the optimizer reads them), every
 * output of SwiGLUGrad (dgate, dup in its two-input form) and SoftmaxCrossEntropyGrad. */
static int narrowed_outputs(const fr_node *n)
{
    const int dx_only = is_op(n, "LinearGradData") || is_op(n, "AttentionQKVGrad");
    return dx_only && n->n_outputs > 1 ? 1 : n->n_outputs;
}

/* every narrowed output of n qualifies */
static int outputs_ok(const fr_graph *g, const fr_node *n, fr_narrow_reader_fn ok)
{
    int any = 0;
    for (int k = 0; k < narrowed_outputs(n); k++) {
        if (n->outputs[k] < 0) continue;
        if (!fr_narrow_readers_all(g, n->outputs[k], ok)) return 0;
        any = 1;
    }
    return any;
}

/* A bf16-precision LinearGradData whose dY is bfloat16 now would copy it to dYq (dY's bf16
 * copy, for the weight gradient): its readers read dY itself and the copy goes. */
static void bypass_bf16_copy(fr_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        fr_lin_attrs a;
        if (!is_op(n, "LinearGradData") || fr_lin_read_attrs(n, &a) != FR_OK || a.prec != FR_LIN_BF16 ||
            n->n_outputs < 3 || n->outputs[2] < 0 || (n->n_outputs > 3 && n->outputs[3] >= 0))
            continue;
        const int dy = n->inputs[0], q = n->outputs[2];
        if (g->values[dy].dtype != FR_BF16 || (g->values[q].flags & FR_VAL_OUTPUT)) continue;
        for (int j = 0; j < g->n_nodes; j++)
            for (int k = 0; k < g->nodes[j].n_inputs; k++)
                if (!g->nodes[j].dead && g->nodes[j].inputs[k] == q) g->nodes[j].inputs[k] = dy;
        n->outputs[2] = -1;
        g->values[q].producer = -1;
    }
}

/* The norm backward's H: the bfloat16 copy AddRMSNorm writes beside the float32 H (its output
 * Hs), where the forward narrowed Y (bf16 / fp8 training). Returns the nodes changed. */
static fr_status saved_residuals(fr_graph *g, int *count)
{
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *gn = &g->nodes[i];
        if (!is_op(gn, "AddRMSNormGrad") || gn->n_inputs < 2 || gn->inputs[1] < 0) continue;
        const int h = gn->inputs[1], p = g->values[h].producer;
        if (p < 0 || g->values[h].dtype != FR_F32 || (g->values[h].flags & FR_VAL_OUTPUT)) continue;
        fr_node *an = &g->nodes[p];
        if (!is_op(an, "AddRMSNorm") || an->outputs[0] != h || an->n_outputs < 2 || an->outputs[1] < 0 ||
            g->values[an->outputs[1]].dtype != FR_BF16)
            continue;
        int hs = an->n_outputs > 2 ? an->outputs[2] : -1;
        if (hs < 0) {
            char name[600];
            snprintf(name, sizeof name, "%s/bf16", g->values[h].name);
            FR_TRY(fr_graph_add_unique_value(g, name, &hs)); /* (moves values, not nodes) */
            if (an->n_outputs < 3) {
                int *o = fr_realloc_array(an->outputs, 3, sizeof *o, "narrow gradients");
                if (!o) return FR_ERR_OOM;
                an->outputs = o;
                an->n_outputs = 3;
            }
            an->outputs[2] = hs;
            g->values[hs].producer = p;
            fr_value_set_shape(&g->values[hs], FR_BF16, g->values[h].rank, g->values[h].dims);
        }
        g->nodes[i].inputs[1] = hs;
        (*count)++;
    }
    return FR_OK;
}

fr_status fr_narrow_gradients(fr_graph *g, int *count, int *residuals)
{
    if (residuals) FR_TRY(saved_residuals(g, residuals));
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        int ok = 0;
        if (is_op(n, "Linear")) {
            /* the LM head: logits only the loss head reads (its gradient too, below) */
            if (fr_narrow_linear_y(n) && fr_narrow_readers_all(g, n->outputs[0], loss_logits)) {
                FR_TRY(fr_node_set_attr_string(n, "y_dtype", "bfloat16"));
                g->values[n->outputs[0]].dtype = FR_BF16;
                (*count)++;
            }
            continue;
        }
        if (is_op(n, "SwiGLUGrad") || is_op(n, "AttentionQKVGrad") || is_op(n, "SoftmaxCrossEntropyGrad"))
            ok = outputs_ok(g, n, linear_dy);
        else if (fr_narrow_lowp_linear(n, "LinearGradData"))
            ok = n->n_outputs >= 1 && fr_narrow_readers_all(g, n->outputs[0], fused_grad_dy);
        if (!ok) continue;
        FR_TRY(fr_node_set_attr_string(n, "dx_dtype", "bfloat16"));
        for (int k = 0; k < narrowed_outputs(n); k++)
            if (n->outputs[k] >= 0) g->values[n->outputs[k]].dtype = FR_BF16; /* as inference says now */
        (*count)++;
    }
    bypass_bf16_copy(g);
    return FR_OK;
}
