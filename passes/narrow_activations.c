/* Narrow activations (see narrow_activations.h): mark the qualifying Linears y_dtype bfloat16
 * and give their outputs that dtype. */
#include <string.h>

#include "ops/linear.h"
#include "passes/narrow_activations.h"
#include "passes/pattern.h"

/* The Linear producing v when it may write bfloat16 for reader, v's only reader; else NULL. */
static fr_node *narrowable(const fr_readers *r, int v, const fr_node *reader)
{
    fr_graph *g = r->g;
    const fr_value *val = &g->values[v];
    if (val->dtype != FR_F32 || (val->flags & FR_VAL_OUTPUT) || fr_sole_reader(r, v) != reader) return NULL;
    const fr_node *p = fr_live_producer(g, v);
    if (!p || strcmp(p->op_type, "Linear") != 0 || strcmp(p->domain, FR_DOMAIN_FP8RUN) != 0 ||
        p->outputs[FR_LIN_OUT_Y] != v)
        return NULL;
    if (p->n_inputs > FR_LIN_IN_B && p->inputs[FR_LIN_IN_B] >= 0) return NULL; /* a bias: Y stays float32 */
    fr_lin_attrs a;
    if (fr_lin_read_attrs(p, &a) != FR_OK || a.prec == FR_LIN_FP32 || a.y_bf16) return NULL;
    return (fr_node *)p;
}

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

/* The Linears node n reads that may be narrowed, into lin (all or none): SwiGLU's gate/up (both
 * in its two-input form: one dtype), AttentionQKV's X when read there alone. */
static int readers_linears(const fr_readers *r, const fr_node *n, fr_node **lin)
{
    if (is_op(n, "SwiGLU")) {
        if (n->n_inputs < 1 || n->n_inputs > 2 || (n->n_inputs == 2 && n->inputs[0] == n->inputs[1])) return 0;
        for (int k = 0; k < n->n_inputs; k++)
            if (!(lin[k] = n->inputs[k] >= 0 ? narrowable(r, n->inputs[k], n) : NULL)) return 0;
        return n->n_inputs;
    }
    if (is_op(n, "AttentionQKV")) {
        if (n->n_inputs < 1 || n->inputs[0] < 0) return 0;
        for (int k = 1; k < n->n_inputs; k++)
            if (n->inputs[k] == n->inputs[0]) return 0; /* X is no table too */
        return (lin[0] = narrowable(r, n->inputs[0], n)) != NULL;
    }
    return 0;
}

fr_status fr_narrow_activations(fr_graph *g, int *count)
{
    *count = 0;
    fr_readers r = {g, NULL};
    FR_TRY(fr_readers_refresh(&r, "narrow_activations"));
    fr_status st = FR_OK;
    for (int i = 0; i < g->n_nodes && st == FR_OK; i++) {
        fr_node *lin[2] = {NULL, NULL};
        const int nl = readers_linears(&r, &g->nodes[i], lin);
        for (int k = 0; k < nl && st == FR_OK; k++) {
            st = fr_node_set_attr_string(lin[k], "y_dtype", "bfloat16");
            g->values[lin[k]->outputs[FR_LIN_OUT_Y]].dtype = FR_BF16; /* as Linear's inference says now */
            (*count)++;
        }
    }
    fr_readers_free(&r);
    return st;
}
