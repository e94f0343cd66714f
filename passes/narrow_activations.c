/* Narrow activations (see narrow_activations.h): mark the qualifying producers' output dtype
 * bfloat16 and give their outputs that dtype. */
#include <stdlib.h>
#include <string.h>

#include "ops/linear.h"
#include "ops/op.h"
#include "passes/narrow_activations.h"
#include "passes/pattern.h"

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

/* A Linear (or its gradient node) in bf16 or fp8 precision: the ones that read bfloat16. */
int fr_narrow_lowp_linear(const fr_node *n, const char *op)
{
    fr_lin_attrs a;
    return is_op(n, op) && fr_lin_read_attrs(n, &a) == FR_OK && a.prec != FR_LIN_FP32;
}

int fr_narrow_readers_all(const fr_graph *g, int v, fr_narrow_reader_fn ok)
{
    if (v < 0 || g->values[v].dtype != FR_F32 || (g->values[v].flags & FR_VAL_OUTPUT)) return 0;
    int seen = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            if (n->inputs[k] != v) continue;
            if (!ok(n, k)) return 0;
            seen = 1;
        }
    }
    return seen;
}

int fr_narrow_linear_y(const fr_node *n)
{
    fr_lin_attrs a;
    return is_op(n, "Linear") && fr_lin_read_attrs(n, &a) == FR_OK && a.prec != FR_LIN_FP32 && !a.y_bf16;
}

/* Gelu of either domain (ONNX's, or passes/gelu_fuse.c's ai.fp8run one) on a float32 X */
static int is_gelu(const fr_graph *g, const fr_node *n)
{
    return !n->dead && strcmp(n->op_type, "Gelu") == 0 && (!n->domain[0] || strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0) &&
           n->n_inputs == 1 && n->inputs[0] >= 0 && n->n_outputs == 1 && n->outputs[0] >= 0 &&
           (g->values[n->inputs[0]].dtype == FR_F32 || g->values[n->inputs[0]].dtype == FR_BF16);
}

/* A Gelu about to read or write bfloat16 becomes ai.fp8run::Gelu (ONNX's Gelu keeps Y in X's
 * type; ours has y_dtype, default float32: ops/unary_math.c). */
static fr_status gelu_to_fp8run(fr_node *n)
{
    if (strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0) return FR_OK;
    char *d = fr_strdup(FR_DOMAIN_FP8RUN, "narrow_activations");
    if (!d) return FR_ERR_OOM;
    free(n->domain);
    n->domain = d;
    const fr_op_def *op = fr_op_find(FR_DOMAIN_FP8RUN, "Gelu");
    if (op) n->op = op;
    return FR_OK;
}

/* The Linear producing v when it may write bfloat16 for reader, v's only reader; else NULL. */
static fr_node *narrowable(const fr_readers *r, int v, const fr_node *reader)
{
    fr_graph *g = r->g;
    const fr_value *val = &g->values[v];
    if (val->dtype != FR_F32 || (val->flags & FR_VAL_OUTPUT) || fr_sole_reader(r, v) != reader) return NULL;
    const fr_node *p = fr_live_producer(g, v);
    return p && p->outputs[FR_LIN_OUT_Y] == v && fr_narrow_linear_y(p) ? (fr_node *)p : NULL;
}

static fr_status mark(fr_graph *g, fr_node *n, const char *attr, int out, int *count)
{
    FR_TRY(fr_node_set_attr_string(n, attr, "bfloat16"));
    g->values[n->outputs[out]].dtype = FR_BF16; /* as the op's inference says now */
    (*count)++;
    return FR_OK;
}

/* The Linears read by the fused SwiGLU (both of its inputs, one dtype), AttentionQKV's X or a
 * Gelu (GPT-2's and GPT-NeoX's MLP up projection). */
static fr_status narrow_linear_outputs(fr_readers *r, int *count)
{
    fr_graph *g = r->g;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (is_gelu(g, n)) {
            fr_node *lin = narrowable(r, n->inputs[0], n);
            if (lin) {
                FR_TRY(gelu_to_fp8run(n));
                FR_TRY(mark(g, lin, "y_dtype", FR_LIN_OUT_Y, count));
            }
            continue;
        }
        if (is_op(n, "AttentionQKV") && n->n_inputs >= 1 && n->inputs[0] >= 0) {
            fr_node *lin = narrowable(r, n->inputs[0], n);
            if (lin) FR_TRY(mark(g, lin, "y_dtype", FR_LIN_OUT_Y, count));
            continue;
        }
        if (!is_op(n, "SwiGLU") || n->n_inputs < 1 || n->n_inputs > 2 ||
            (n->n_inputs == 2 && n->inputs[0] == n->inputs[1]))
            continue;
        fr_node *lin[2] = {NULL, NULL};
        int ok = 1;
        for (int k = 0; k < n->n_inputs; k++) {
            lin[k] = n->inputs[k] >= 0 ? narrowable(r, n->inputs[k], n) : NULL;
            ok = ok && lin[k] != NULL;
        }
        for (int k = 0; ok && k < n->n_inputs; k++) FR_TRY(mark(g, lin[k], "y_dtype", FR_LIN_OUT_Y, count));
    }
    return FR_OK;
}

/* X of a bf16/fp8 Linear: what reads the norms', SwiGLU's and the attention's outputs. */
static int lowp_linear_x(const fr_node *n, int slot)
{
    return slot == FR_LIN_IN_X && fr_narrow_lowp_linear(n, "Linear");
}

static int is_add_norm(const fr_node *n) { return is_op(n, "AddRMSNorm") || is_op(n, "AddLayerNorm"); }

/* B of AddRMSNorm / AddLayerNorm (the branch added to the float32 residual A; the sum H stays
 * float32). */
static int add_norm_branch(const fr_node *n, int slot)
{
    return slot == 1 && is_add_norm(n) && n->inputs[0] != n->inputs[1];
}

/* The fused producers whose output only bf16/fp8 Linears read: AddRMSNorm's and AddLayerNorm's
 * Y (and Y2), SwiGLU's y, AttentionQKV's O, Gelu's Y; then the Linears whose Y is only their
 * branch input. */
static fr_status narrow_producers(fr_graph *g, int *count)
{
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (is_add_norm(n) && n->n_outputs >= 2 && fr_narrow_readers_all(g, n->outputs[1], lowp_linear_x) &&
            (n->n_outputs < 3 || fr_narrow_readers_all(g, n->outputs[2], lowp_linear_x))) {
            FR_TRY(mark(g, n, "y_dtype", 1, count));
            if (n->n_outputs > 2) { /* AddLayerNorm's second norm: one y_dtype for both */
                g->values[n->outputs[2]].dtype = FR_BF16;
                (*count)++;
            }
        }
        else if (is_op(n, "SwiGLU") && n->n_outputs >= 1 && fr_narrow_readers_all(g, n->outputs[0], lowp_linear_x))
            FR_TRY(mark(g, n, "y_dtype", 0, count));
        else if (is_op(n, "AttentionQKV") && n->n_outputs >= 1 &&
                 fr_narrow_readers_all(g, n->outputs[0], lowp_linear_x))
            FR_TRY(mark(g, n, "o_dtype", 0, count));
        else if (is_gelu(g, n) && fr_narrow_readers_all(g, n->outputs[0], lowp_linear_x)) {
            FR_TRY(gelu_to_fp8run(n));
            FR_TRY(mark(g, n, "y_dtype", 0, count));
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (fr_narrow_linear_y(n) && fr_narrow_readers_all(g, n->outputs[FR_LIN_OUT_Y], add_norm_branch))
            FR_TRY(mark(g, n, "y_dtype", FR_LIN_OUT_Y, count));
    }
    return FR_OK;
}

/* A bf16 Linear saves X's bf16 copy (Xq) for its weight gradient where X is float32 (the float X
 * then dies after the forward). Once X's producer writes bfloat16, the copy has X's bits: the
 * gradient rule (ops/linear.c) reads X itself, and the Linear writes no copy (a device copy of
 * every such X a step, the same bytes kept either way). */
static void drop_bf16_copies(fr_graph *g, int *count)
{
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        fr_lin_attrs a;
        if (is_op(n, "Linear") && fr_lin_read_attrs(n, &a) == FR_OK && a.prec == FR_LIN_BF16 &&
            n->inputs[FR_LIN_IN_X] >= 0 && g->values[n->inputs[FR_LIN_IN_X]].dtype == FR_BF16)
            *count += fr_lin_drop_unread_xq(g, n);
    }
}

fr_status fr_narrow_activations(fr_graph *g, int *count)
{
    *count = 0;
    fr_readers r = {g, NULL};
    FR_TRY(fr_readers_refresh(&r, "narrow_activations"));
    fr_status st = narrow_linear_outputs(&r, count);
    fr_readers_free(&r);
    if (st == FR_OK) st = narrow_producers(g, count);
    if (st == FR_OK) drop_bf16_copies(g, count);
    return st;
}
