/* One-index gathers as Slices (see gather_slice.h). */
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/gather_slice.h"
#include "passes/pattern.h"

/* The axis and index node n gathers, when it is a one-index gather of a constant index: 1. */
static int one_index(const fr_graph *g, const fr_node *n, int64_t *axis, int64_t *index)
{
    if (n->n_inputs != 2 || n->n_outputs != 1 || n->inputs[0] < 0 || n->inputs[1] < 0) return 0;
    const fr_value *x = &g->values[n->inputs[0]];
    const fr_tensor *ix = g->values[n->inputs[1]].constant;
    if (!ix || (ix->dtype != FR_I64 && ix->dtype != FR_I32) || fr_tensor_numel(ix) != 1 || x->rank < 1) return 0;
    int64_t b = 0;
    if (fr_is_onnx_op(n, "GatherND")) {
        if (fr_node_attr_int(n, "batch_dims", 0, &b) != FR_OK || b != 0 || ix->rank != 2) return 0;
        *axis = 0;
    } else if (fr_is_onnx_op(n, "Gather")) {
        if (fr_node_attr_int(n, "axis", 0, axis) != FR_OK || ix->rank != 1) return 0;
        if (*axis < 0) *axis += x->rank;
        if (*axis < 0 || *axis >= x->rank) return 0;
    } else {
        return 0;
    }
    const int64_t d = x->dims[*axis];
    *index = fr_tensor_get_i64(ix, 0);
    if (*index < 0) *index += d;
    return d > 0 && *index >= 0 && *index < d;
}

fr_status fr_gather_to_slice(fr_graph *g, int *count)
{
    *count = 0;
    const int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        int64_t axis, index;
        if (g->nodes[i].dead || !one_index(g, &g->nodes[i], &axis, &index)) continue;
        char nm[512];
        int s, e, a, nid;
        const int x = g->nodes[i].inputs[0], y = g->nodes[i].outputs[0];
        snprintf(nm, sizeof nm, "%s/slice_start", g->nodes[i].name);
        FR_TRY(fr_pattern_const_i64(g, nm, 1, &index, &s));
        snprintf(nm, sizeof nm, "%s/slice_end", g->nodes[i].name);
        FR_TRY(fr_pattern_const_i64(g, nm, 1, (const int64_t[]){index + 1}, &e));
        snprintf(nm, sizeof nm, "%s/slice_axis", g->nodes[i].name);
        FR_TRY(fr_pattern_const_i64(g, nm, 1, &axis, &a));
        snprintf(nm, sizeof nm, "%s/as_slice", g->nodes[i].name);
        g->nodes[i].dead = 1; /* y gets its new producer */
        FR_TRY(fr_graph_add_node(g, "Slice", FR_DOMAIN_ONNX, nm, 4, (const int[]){x, s, e, a}, 1, &y, &nid));
        FR_TRY(fr_node_infer(g, nid));
        (*count)++;
    }
    if (!*count) return FR_OK;
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}
