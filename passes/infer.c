/* Shape/dtype inference driver with constant folding. Nodes are visited in topological order;
 * each op's infer() sees its inputs' shapes and any constant input data, so a node folded
 * here (Shape -> Gather -> Concat chains that compute a Reshape target) hands real values to
 * the infer() of the nodes after it. */
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h" /* fr_node_infer: infer + the "every output static" check */
#include "ops/op.h"
#include "passes/passes.h"

/* A constant the graph may bake into folded results. Parameters change while training and
 * runtime state changes every step, so nothing computed from them may be frozen. */
static int foldable_value(const fr_value *v)
{
    return v->constant && !(v->flags & (FR_VAL_PARAM | FR_VAL_STATE | FR_VAL_INPUT));
}

/* Ops whose result depends only on the input's shape, never its data. */
static int shape_only_op(const fr_node *n)
{
    return n->domain[0] == '\0' && (strcmp(n->op_type, "Shape") == 0 || strcmp(n->op_type, "Size") == 0);
}

static int can_fold(const fr_graph *g, const fr_node *n, int64_t max_elements)
{
    if (!n->op->cpu || (n->op->flags & FR_OP_NO_FOLD)) return 0;
    int shape_only = shape_only_op(n);
    for (int k = 0; k < n->n_inputs; k++) {
        int vid = n->inputs[k];
        if (vid < 0) continue;
        const fr_value *v = &g->values[vid];
        if (shape_only) continue; /* the input's static shape is known: infer() succeeded */
        if (!foldable_value(v)) return 0;
    }
    int any_out = 0;
    for (int k = 0; k < n->n_outputs; k++) {
        int vid = n->outputs[k];
        if (vid < 0) continue;
        const fr_value *v = &g->values[vid];
        int64_t numel;
        if (fr_shape_numel(v->rank, v->dims, v->name, &numel) != FR_OK) return 0;
        if (numel > max_elements) return 0;
        any_out = 1;
    }
    return any_out;
}

/* Run the node's CPU kernel on its constant inputs and attach the results. */
static fr_status fold_node(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int n_in = n->n_inputs, n_out = n->n_outputs;
    fr_tensor **in = fr_calloc((size_t)(n_in ? n_in : 1), sizeof *in, "folding inputs");
    fr_tensor **out = fr_calloc((size_t)(n_out ? n_out : 1), sizeof *out, "folding outputs");
    fr_tensor *headers = fr_calloc((size_t)(n_in ? n_in : 1), sizeof *headers, "folding inputs");
    fr_status st = FR_OK;
    if (!in || !out || !headers) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int k = 0; k < n_in; k++) {
        int vid = n->inputs[k];
        if (vid < 0) continue;
        const fr_value *v = &g->values[vid];
        if (v->constant) {
            in[k] = v->constant;
        } else {
            /* Shape/Size of a computed value: a data-less tensor that carries the shape */
            fr_tensor *h = &headers[k];
            h->dtype = v->dtype;
            h->rank = v->rank;
            memcpy(h->dims, v->dims, sizeof h->dims);
            in[k] = h;
        }
    }
    for (int k = 0; k < n_out; k++) {
        int vid = n->outputs[k];
        if (vid < 0) continue;
        const fr_value *v = &g->values[vid];
        st = fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &out[k]);
        if (st != FR_OK) goto done;
    }
    fr_kernel_ctx ctx = {g, n, fr_graph_opset(g, n->domain), n_in, n_out, in, out};
    st = n->op->cpu(&ctx);
    if (st != FR_OK) {
        st = fr_error_context(st, "constant folding");
        goto done;
    }
    for (int k = 0; k < n_out; k++) {
        int vid = n->outputs[k];
        if (vid < 0) continue;
        fr_value *v = &g->values[vid];
        v->constant = out[k];
        v->flags |= FR_VAL_FOLDED;
        out[k] = NULL;
    }
done:
    if (out)
        for (int k = 0; k < n_out; k++) fr_tensor_free(out[k]);
    free(in);
    free(out);
    free(headers);
    return st;
}

fr_status fr_fold_value(fr_graph *g, int vid, int64_t max_elements, int depth, int *folded)
{
    *folded = 0;
    const fr_value *v = &g->values[vid];
    if (v->constant) {
        *folded = foldable_value(v);
        return FR_OK;
    }
    if (depth <= 0 || v->producer < 0) return FR_OK;
    int p = v->producer;
    const fr_node *n = &g->nodes[p];
    if (n->dead || !n->op) return FR_OK;
    if (!shape_only_op(n))
        for (int k = 0; k < n->n_inputs; k++) {
            int in = g->nodes[p].inputs[k], f;
            if (in < 0) continue;
            FR_TRY(fr_fold_value(g, in, max_elements, depth - 1, &f));
            if (!f) return FR_OK;
        }
    if (!can_fold(g, &g->nodes[p], max_elements)) return FR_OK;
    FR_TRY(fold_node(g, p));
    *folded = 1;
    return FR_OK;
}

fr_status fr_infer_graph(fr_graph *g, int fold, int64_t max_elements, int *n_folded)
{
    int folded = 0;
    if (n_folded) *n_folded = 0;
    if (max_elements <= 0) max_elements = FR_FOLD_MAX_ELEMENTS_DEFAULT;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        if (!n->op)
            return fr_error(FR_ERR_INTERNAL, "node '%s' (%s): op not resolved before inference",
                            n->name, n->op_type);
        /* forget shapes the model declared (value_info) so an infer() that leaves an output
         * unset is caught instead of passing with stale information */
        for (int k = 0; k < n->n_outputs; k++) {
            int vid = n->outputs[k];
            if (vid < 0) continue;
            fr_value *v = &g->values[vid];
            if (v->constant) /* a value produced twice would have failed toposort */
                return fr_error(FR_ERR_INTERNAL, "node '%s' (%s) writes constant '%s'", n->name,
                                n->op_type, v->name);
            int64_t none[FR_MAX_RANK] = {0};
            fr_value_set_shape(v, FR_UNDEFINED, -1, none);
        }
        FR_TRY(fr_node_infer(g, i));
        n = &g->nodes[i];
        if (fold && can_fold(g, n, max_elements)) {
            FR_TRY(fold_node(g, i));
            folded++;
        }
    }
    if (n_folded) *n_folded = folded;
    return FR_OK;
}
