/* Dead-node elimination: one backward sweep over the topologically sorted nodes, marking
 * values live from the graph outputs. A value that holds a constant (folded) needs no
 * producer, so folded nodes die here too. */
#include <stdlib.h>

#include "passes/passes.h"

fr_status fr_dce(fr_graph *g, int *n_removed)
{
    int removed = 0;
    if (n_removed) *n_removed = 0;
    unsigned char *live = fr_calloc((size_t)(g->n_values ? g->n_values : 1), 1, "DCE liveness");
    if (!live) return FR_ERR_OOM;
    for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = 1;

    for (int i = g->n_nodes - 1; i >= 0; i--) {
        fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        int needed = 0;
        for (int k = 0; k < n->n_outputs && !needed; k++) {
            int v = n->outputs[k];
            needed = v >= 0 && live[v] && !g->values[v].constant;
        }
        if (!needed) {
            n->dead = 1;
            removed++;
            continue;
        }
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) live[n->inputs[k]] = 1;
    }
    free(live);
    if (n_removed) *n_removed = removed;
    return FR_OK;
}
