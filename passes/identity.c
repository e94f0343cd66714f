/* Identity removal. Exporters leave Identity nodes behind (tied weights, renamed outputs);
 * they cost a copy each at run time and hide constants from folding. Every value is mapped to
 * its replacement with a union-find style table, then all node inputs/outputs are rewritten
 * once, so long Identity chains cost linear time. */
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"

static int find(int *repl, int v)
{
    int r = v;
    while (repl[r] != r) r = repl[r];
    while (repl[v] != r) { /* path compression */
        int next = repl[v];
        repl[v] = r;
        v = next;
    }
    return r;
}

static int is_identity(const fr_node *n)
{
    return !n->dead && strcmp(n->op_type, "Identity") == 0 && n->domain[0] == '\0' &&
           n->n_inputs == 1 && n->n_outputs == 1 && n->inputs[0] >= 0 && n->outputs[0] >= 0;
}

fr_status fr_remove_identities(fr_graph *g, int *n_removed)
{
    int removed = 0;
    if (n_removed) *n_removed = 0;
    if (g->n_values == 0) return FR_OK;
    int *repl = fr_malloc((size_t)g->n_values * sizeof(int), "Identity removal table");
    if (!repl) return FR_ERR_OOM;
    for (int v = 0; v < g->n_values; v++) repl[v] = v;

    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (!is_identity(n)) continue;
        int x = find(repl, n->inputs[0]);
        int y = n->outputs[0];
        const fr_value *xv = &g->values[x];
        const fr_value *yv = &g->values[y];
        if (yv->flags & FR_VAL_OUTPUT) {
            /* The output name must survive: let x's producer write y instead of x. Only
             * possible when x is a plain intermediate value. */
            int movable = xv->producer >= 0 && !xv->constant &&
                          !(xv->flags & (FR_VAL_INPUT | FR_VAL_OUTPUT | FR_VAL_INITIALIZER));
            if (!movable) continue; /* keep this Identity: it is the copy that names the output */
            repl[x] = y;
            /* y now carries x's producer; later lookups of x's old consumers resolve to y */
            g->values[y].producer = xv->producer;
        } else {
            repl[y] = x;
        }
        n->dead = 1;
        removed++;
    }

    if (removed) {
        for (int i = 0; i < g->n_nodes; i++) {
            fr_node *n = &g->nodes[i];
            if (n->dead) continue;
            for (int k = 0; k < n->n_inputs; k++)
                if (n->inputs[k] >= 0) n->inputs[k] = find(repl, n->inputs[k]);
            for (int k = 0; k < n->n_outputs; k++)
                if (n->outputs[k] >= 0) n->outputs[k] = find(repl, n->outputs[k]);
        }
    }
    free(repl);
    if (n_removed) *n_removed = removed;
    /* remove the dead Identities now: they still name their outputs, which now have other
     * producers, and would make the producer table inconsistent */
    return removed ? fr_graph_compact(g) : FR_OK;
}
