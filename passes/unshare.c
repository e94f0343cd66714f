/* Undoing value-deduplicated parameters (see unshare.h). */
#include <string.h>

#include "passes/unshare.h"

static int all_equal_bytes(const fr_tensor *t)
{
    size_t es = fr_dtype_size(t->dtype);
    const unsigned char *b = t->data;
    for (size_t off = es; es && off < t->nbytes; off += es)
        if (memcmp(b + off, b, es) != 0) return 0;
    return 1;
}

fr_status fr_unshare_params(fr_graph *g, int *n_unshared)
{
    int n = 0;
    if (n_unshared) *n_unshared = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *nd = &g->nodes[i];
        if (nd->dead || strcmp(nd->op_type, "Identity") != 0 || nd->domain[0] || nd->n_inputs != 1 ||
            nd->n_outputs != 1 || nd->inputs[0] < 0 || nd->outputs[0] < 0)
            continue;
        const fr_value *x = &g->values[nd->inputs[0]];
        fr_value *y = &g->values[nd->outputs[0]];
        if (!(x->flags & FR_VAL_PARAM) || !x->constant || !fr_dtype_is_float(x->dtype) ||
            !all_equal_bytes(x->constant))
            continue;
        if (y->flags & (FR_VAL_OUTPUT | FR_VAL_INPUT | FR_VAL_INITIALIZER) || y->constant) continue;
        fr_tensor *copy;
        FR_TRY(fr_tensor_new(x->dtype, x->rank, x->dims, y->name, &copy));
        memcpy(copy->data, x->constant->data, x->constant->nbytes);
        y->producer = -1;
        nd = &g->nodes[i];
        nd->dead = 1;
        FR_TRY(fr_graph_set_initializer(g, nd->outputs[0], copy));
        n++;
    }
    if (n_unshared) *n_unshared = n;
    return n ? fr_graph_compact(g) : FR_OK;
}
