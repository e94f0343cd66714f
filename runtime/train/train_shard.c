/* The sharding plan of a trainer's parameters (runtime/dist/shard_plan.h) for
 * --shard-parameters: each parameter's cut and gathered element from the FP8 compiler's
 * decisions. An FP8 Linear's weight travels as FP8 codes (one byte; with the block recipe whole
 * 128x128 blocks per rank, their scales with them) and is cut along its output features, the
 * rows of the K-major layout its codes take for the GEMM (dim 0 of a transB [N, K] weight, the
 * last of a MatMul's [K, N]); a BF16 Linear's weight travels as bf16; everything else (norms,
 * embeddings, biases) as float32, cut along dim 0. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"

/* the Linear whose (first) weight a training-graph parameter is: the fused parameter
   "fused(a,b,c)" is its members' Linear */
static const fr_fp8_layer *linear_of(const fr_trainer *t, const char *name)
{
    if (!t->has_report) return NULL;
    if (strncmp(name, "fused(", 6) == 0) name += 6;
    const size_t n = strcspn(name, ",)");
    for (int l = 0; l < t->report.n_layers; l++) {
        const char *w = t->report.layers[l].weights;
        if (w && strcspn(w, ",") == n && strncmp(w, name, n) == 0) return &t->report.layers[l];
    }
    return NULL;
}

fr_status tr_shard_plan(const fr_trainer *t, int world, fr_shard_plan **out)
{
    *out = NULL;
    const int n = t->n_params;
    fr_shard_spec *s = fr_calloc((size_t)(n ? n : 1), sizeof *s, "shard plan");
    int *order = fr_malloc((size_t)(n ? n : 1) * sizeof *order, "shard plan");
    int *first = fr_malloc((size_t)t->g->n_values * sizeof *first + 1, "shard plan");
    if (!s || !order || !first) {
        free(s);
        free(order);
        free(first);
        return FR_ERR_OOM;
    }
    /* the parameters in the order the step first reads them (the training graph's nodes are in
       execution order): exporters' initializer lists need not follow the layers (TorchScript's
       anonymous weights come after every named one), and units follow this order */
    for (int v = 0; v < t->g->n_values; v++) first[v] = INT_MAX;
    for (int k = t->g->n_nodes - 1; k >= 0; k--)
        for (int j = 0; j < t->g->nodes[k].n_inputs; j++)
            if (t->g->nodes[k].inputs[j] >= 0) first[t->g->nodes[k].inputs[j]] = k;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) { /* stable insertion sort: a few hundred parameters */
        const int x = order[i], fx = first[t->params[x].value];
        int j = i;
        while (j > 0 && first[t->params[order[j - 1]].value] > fx) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    free(first);
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        const fr_value *v = &t->g->values[t->params[i].value];
        const fr_fp8_layer *L = v->rank == 2 ? linear_of(t, v->name) : NULL;
        const int fp8 = L && L->precision == FR_LIN_FP8;
        s[k] = (fr_shard_spec){v->name, v->rank, v->dims, L && !L->transB ? 1 : 0,
                               fp8 ? 1 : L && L->precision == FR_LIN_BF16 ? 2 : 4,
                               fp8 && L->recipe == FR_LIN_BLOCKWISE ? FR_LIN_BLOCK : 0};
    }
    fr_status st = fr_shard_plan_new(s, n, world, out);
    free(s);
    free(order);
    return st;
}
