/* Narrow activations (see narrow_activations.h): mark the qualifying Linears y_dtype bfloat16
 * and give their outputs that dtype. */
#include <string.h>

#include "ops/linear.h"
#include "passes/narrow_activations.h"
#include "passes/pattern.h"

/* The Linear producing v when it may write bfloat16 for swiglu, v's only reader; else NULL. */
static fr_node *narrowable(const fr_readers *r, int v, const fr_node *swiglu)
{
    fr_graph *g = r->g;
    const fr_value *val = &g->values[v];
    if (val->dtype != FR_F32 || (val->flags & FR_VAL_OUTPUT) || fr_sole_reader(r, v) != swiglu) return NULL;
    const fr_node *p = fr_live_producer(g, v);
    if (!p || strcmp(p->op_type, "Linear") != 0 || strcmp(p->domain, FR_DOMAIN_FP8RUN) != 0 ||
        p->outputs[FR_LIN_OUT_Y] != v)
        return NULL;
    if (p->n_inputs > FR_LIN_IN_B && p->inputs[FR_LIN_IN_B] >= 0) return NULL; /* a bias: Y stays float32 */
    fr_lin_attrs a;
    if (fr_lin_read_attrs(p, &a) != FR_OK || a.prec == FR_LIN_FP32 || a.y_bf16) return NULL;
    return (fr_node *)p;
}

fr_status fr_narrow_activations(fr_graph *g, int *count)
{
    *count = 0;
    fr_readers r = {g, NULL};
    FR_TRY(fr_readers_refresh(&r, "narrow_activations"));
    fr_status st = FR_OK;
    for (int i = 0; i < g->n_nodes && st == FR_OK; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->op_type, "SwiGLU") != 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0 ||
            n->n_inputs < 1 || n->n_inputs > 2 || (n->n_inputs == 2 && n->inputs[0] == n->inputs[1]))
            continue;
        fr_node *lin[2] = {NULL, NULL};
        int ok = 1;
        for (int k = 0; k < n->n_inputs; k++) {
            lin[k] = n->inputs[k] >= 0 ? narrowable(&r, n->inputs[k], n) : NULL;
            ok = ok && lin[k] != NULL;
        }
        for (int k = 0; ok && k < n->n_inputs && st == FR_OK; k++) {
            st = fr_node_set_attr_string(lin[k], "y_dtype", "bfloat16");
            g->values[lin[k]->outputs[FR_LIN_OUT_Y]].dtype = FR_BF16; /* as Linear's inference says now */
            (*count)++;
        }
    }
    fr_readers_free(&r);
    return st;
}
