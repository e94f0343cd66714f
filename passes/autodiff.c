/* Reverse-mode autodiff over the graph (see autodiff.h). */
#include <stdlib.h>
#include <string.h>

#include "passes/autodiff.h"

/* Gradients of float values only: integer/bool values (shapes, indices, masks) carry none.
 * float16/bfloat16 count as differentiable so that a parameter reaching the loss through a
 * Cast to a narrow float is not silently cut off: the ops on the way then report clearly
 * that they do not support that dtype. */
static int differentiable_value(const fr_value *v)
{
    return v->dtype == FR_F32 || v->dtype == FR_F64 || v->dtype == FR_F16 || v->dtype == FR_BF16;
}

static fr_status accumulate(fr_graph *g, int fwd_node, int *gradmap, int vid, int din)
{
    if (gradmap[vid] < 0) {
        gradmap[vid] = din;
        return FR_OK;
    }
    /* two gradient contributions: emit Add (named after the node whose rule added the second) */
    int sum, in[2] = {gradmap[vid], din};
    int dummy_dout = -1, dummy_need = 0, dummy_din = -1;
    fr_grad_ctx ctx = {g, fwd_node, 0, &dummy_dout, &dummy_need, &dummy_din};
    FR_TRY(fr_grad_op1(&ctx, "Add", 2, in, &sum));
    gradmap[vid] = sum;
    return FR_OK;
}

fr_status fr_autodiff(fr_graph *g, int loss, int n_wrt, const int *wrt, int *grads_out)
{
    const int n_fwd = g->n_nodes, nv0 = g->n_values;
    const fr_value *lv = &g->values[loss];
    if (!differentiable_value(lv))
        return fr_error(FR_ERR_INVALID_ARG, "loss '%s' must be a float tensor, got %s", lv->name,
                        fr_dtype_name(lv->dtype));
    int64_t lnumel;
    FR_TRY(fr_shape_numel(lv->rank, lv->dims, lv->name, &lnumel));
    if (lnumel != 1)
        return fr_error(FR_ERR_INVALID_ARG, "loss '%s' must hold a single value, it has %lld",
                        lv->name, (long long)lnumel);

    unsigned char *requires = fr_calloc((size_t)nv0, 1, "autodiff");
    int *gradmap = fr_malloc((size_t)nv0 * sizeof(int), "autodiff");
    int *need = NULL, *din = NULL, *dout = NULL;
    fr_status st = FR_OK;
    if (!requires || !gradmap) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int i = 0; i < nv0; i++) gradmap[i] = -1;
    for (int i = 0; i < n_wrt; i++) {
        if (wrt[i] < 0 || wrt[i] >= nv0) {
            st = fr_error(FR_ERR_INVALID_ARG, "autodiff: value id %d is not in the graph", wrt[i]);
            goto done;
        }
        if (differentiable_value(&g->values[wrt[i]])) requires[wrt[i]] = 1;
    }
    /* forward: which values depend on a wrt value */
    for (int n = 0; n < n_fwd; n++) {
        const fr_node *nd = &g->nodes[n];
        int any = 0;
        for (int i = 0; i < nd->n_inputs; i++)
            if (nd->inputs[i] >= 0 && requires[nd->inputs[i]]) any = 1;
        if (!any) continue;
        for (int o = 0; o < nd->n_outputs; o++) {
            int v = nd->outputs[o];
            if (v >= 0 && differentiable_value(&g->values[v])) requires[v] = 1;
        }
    }
    if (!requires[loss]) {
        for (int i = 0; i < n_wrt; i++) grads_out[i] = -1;
        goto done;
    }

    /* seed: d(loss)/d(loss) = 1, emitted as a constant with the loss's shape */
    {
        double one = 1.0;
        int seed;
        char nm[] = "loss_grad_seed";
        fr_tensor *t;
        st = fr_tensor_new(lv->dtype, lv->rank, lv->dims, nm, &t);
        if (st != FR_OK) goto done;
        if (lv->dtype == FR_F32)
            ((float *)t->data)[0] = (float)one;
        else
            ((double *)t->data)[0] = one;
        st = fr_graph_add_unique_value(g, nm, &seed);
        if (st != FR_OK) {
            fr_tensor_free(t);
            goto done;
        }
        fr_value *sv = &g->values[seed];
        sv->constant = t;
        sv->flags |= FR_VAL_FOLDED;
        fr_value_set_shape(sv, t->dtype, t->rank, t->dims);
        gradmap[loss] = seed;
    }

    for (int n = n_fwd - 1; n >= 0; n--) {
        const fr_node *nd = &g->nodes[n];
        int has_dout = 0, has_need = 0;
        for (int o = 0; o < nd->n_outputs; o++)
            if (nd->outputs[o] >= 0 && gradmap[nd->outputs[o]] >= 0) has_dout = 1;
        if (!has_dout) continue;
        for (int i = 0; i < nd->n_inputs; i++)
            if (nd->inputs[i] >= 0 && requires[nd->inputs[i]]) has_need = 1;
        if (!has_need) continue;
        if (!nd->op || !nd->op->grad) {
            const char *via = "";
            for (int i = 0; i < nd->n_inputs; i++)
                if (nd->inputs[i] >= 0 && requires[nd->inputs[i]]) {
                    via = g->values[nd->inputs[i]].name;
                    break;
                }
            st = fr_error(FR_ERR_UNSUPPORTED,
                          "node '%s' (%s) lies between a trained parameter and the loss (through "
                          "'%s') but has no gradient rule; freeze the parameters before it or "
                          "use another op",
                          nd->name, nd->op_type, via);
            goto done;
        }
        int ni = nd->n_inputs, no = nd->n_outputs;
        free(need);
        free(din);
        free(dout);
        need = fr_calloc((size_t)ni + 1, sizeof(int), "autodiff");
        din = fr_malloc(((size_t)ni + 1) * sizeof(int), "autodiff");
        dout = fr_malloc(((size_t)no + 1) * sizeof(int), "autodiff");
        if (!need || !din || !dout) {
            st = FR_ERR_OOM;
            goto done;
        }
        for (int i = 0; i < ni; i++) {
            need[i] = nd->inputs[i] >= 0 && requires[nd->inputs[i]];
            din[i] = -1;
        }
        for (int o = 0; o < no; o++) dout[o] = nd->outputs[o] >= 0 ? gradmap[nd->outputs[o]] : -1;
        fr_grad_ctx ctx = {g, n, fr_graph_opset(g, nd->domain), dout, need, din};
        st = nd->op->grad(&ctx);
        if (st != FR_OK) goto done;
        nd = &g->nodes[n]; /* the rule may have grown g->nodes */
        for (int i = 0; i < ni; i++) {
            if (!need[i] || din[i] < 0) continue;
            int vid = nd->inputs[i];
            const fr_value *fv = &g->values[vid], *gv = &g->values[din[i]];
            /* a bfloat16 activation's gradient is carried in float32 (the narrowed Linear
               outputs of passes/narrow_activations.h: their gradient rules take float32 dY) */
            int ok = fv->rank == gv->rank && (fv->dtype == gv->dtype || (fv->dtype == FR_BF16 && gv->dtype == FR_F32));
            for (int d = 0; ok && d < fv->rank; d++) ok = fv->dims[d] == gv->dims[d];
            if (!ok) {
                char a[128], b[128];
                st = fr_error(FR_ERR_INTERNAL,
                              "gradient rule of node '%s' (%s) gave input '%s' a gradient of "
                              "shape %s %s, expected %s %s",
                              nd->name, nd->op_type, fv->name, fr_shape_str(gv->rank, gv->dims, a, sizeof a),
                              fr_dtype_name(gv->dtype), fr_shape_str(fv->rank, fv->dims, b, sizeof b),
                              fr_dtype_name(fv->dtype));
                goto done;
            }
            st = accumulate(g, n, gradmap, vid, din[i]);
            if (st != FR_OK) goto done;
            nd = &g->nodes[n]; /* accumulate's Add node may have grown g->nodes too */
        }
    }
    for (int i = 0; i < n_wrt; i++) grads_out[i] = gradmap[wrt[i]];
done:
    free(requires);
    free(gradmap);
    free(need);
    free(din);
    free(dout);
    return st;
}
