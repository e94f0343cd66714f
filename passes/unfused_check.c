/* What the fusions left (see unfused_check.h). */
#include <stdio.h>
#include <string.h>

#include "passes/unfused_check.h"

static const char *const k_left[] = {"Softmax", "ReduceMean", "Erf", "Tanh", "Sigmoid"};
#define N_LEFT (int)(sizeof k_left / sizeof k_left[0])

fr_status fr_unfused_check(const fr_graph *g, int *left, char *detail, size_t n)
{
    int count[N_LEFT] = {0}, first[N_LEFT], total = 0;
    for (int k = 0; k < N_LEFT; k++) first[k] = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->domain[0]) continue; /* the fused ops are ai.fp8run's */
        for (int k = 0; k < N_LEFT; k++)
            if (strcmp(nd->op_type, k_left[k]) == 0) {
                if (count[k]++ == 0) first[k] = i;
                total++;
            }
    }
    *left = total;
    if (n == 0) return FR_OK;
    if (total == 0) {
        snprintf(detail, n, "nothing left unfused");
        return FR_OK;
    }
    size_t at = (size_t)snprintf(detail, n, "%d left unfused:", total);
    for (int k = 0, shown = 0; k < N_LEFT && at < n; k++) {
        if (!count[k]) continue;
        /* the first node of each kind is named: where to look in the model */
        at += (size_t)snprintf(detail + at, n - at, "%s %s %d (first '%s')", shown++ ? "," : "", k_left[k], count[k],
                               g->nodes[first[k]].name);
    }
    return FR_OK;
}
