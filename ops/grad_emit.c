/* Helpers that gradient rules use to emit backward nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/limits.h"
#include "ops/grad.h"

fr_status fr_node_infer(fr_graph *g, int node_id)
{
    fr_node *n = &g->nodes[node_id];
    if (!n->op) {
        const fr_op_def *d = fr_op_find(n->domain, n->op_type);
        if (!d)
            return fr_error(FR_ERR_INTERNAL, "node '%s': op '%s' (domain '%s') is not registered",
                            n->name, n->op_type, n->domain);
        n->op = d;
    }
    FR_TRY(n->op->infer(g, node_id));
    n = &g->nodes[node_id];
    /* how many outputs the op gave: one past the last that infer() typed. A node declaring
     * more (a Relu with 1000 outputs) is a malformed model, not an infer() that forgot one */
    int given = 0;
    for (int o = 0; o < n->n_outputs; o++)
        if (n->outputs[o] >= 0 && g->values[n->outputs[o]].dtype != FR_UNDEFINED) given = o + 1;
    for (int o = 0; o < n->n_outputs; o++) {
        if (n->outputs[o] < 0) continue;
        const fr_value *v = &g->values[n->outputs[o]];
        int ok = v->dtype != FR_UNDEFINED && v->rank >= 0;
        for (int d = 0; ok && d < v->rank; d++) ok = v->dims[d] >= 0;
        if (!ok && given > 0 && o >= given)
            return fr_error(FR_ERR_GRAPH,
                            "node '%s' (%s) declares %d outputs, but %s gives %d here (refused: the model is "
                            "malformed; output '%s' has nothing to hold)",
                            n->name, n->op_type, n->n_outputs, n->op_type, given, v->name);
        if (!ok)
            return fr_error(FR_ERR_INTERNAL,
                            "node '%s' (%s): shape inference left output '%s' without a static "
                            "shape (a bug in the op's infer)",
                            n->name, n->op_type, v->name);
        /* every op's output passes here: a shape no memory holds (Expand, ConstantOfShape,
         * Tile, Range... to 2^40 elements) is refused while planning, before anything runs */
        size_t bytes;
        if (fr_shape_bytes(v->dtype, v->rank, v->dims, "", &bytes) != FR_OK) { /* again, to name it */
            char what[600];
            snprintf(what, sizeof what, "node '%s' (%s) output '%s'", n->name, n->op_type, v->name);
            return fr_shape_bytes(v->dtype, v->rank, v->dims, what, &bytes);
        }
    }
    return FR_OK;
}

fr_status fr_grad_node(fr_grad_ctx *ctx, const char *op_type, const char *domain, int n_in,
                       const int *in, int n_out, int *out, int *node_id)
{
    fr_graph *g = ctx->g;
    char base[512];
    int seq = g->n_nodes;
    snprintf(base, sizeof base, "%s_grad/%s_%d", g->nodes[ctx->node_id].name, op_type, seq);
    for (int o = 0; o < n_out; o++) {
        char nm[560];
        if (n_out == 1)
            snprintf(nm, sizeof nm, "%s", base);
        else
            snprintf(nm, sizeof nm, "%s:%d", base, o);
        FR_TRY(fr_graph_add_unique_value(g, nm, &out[o]));
    }
    int nid;
    FR_TRY(fr_graph_add_node(g, op_type, domain, base, n_in, in, n_out, out, &nid));
    const fr_op_def *d = fr_op_find(domain, op_type);
    if (!d)
        return fr_error(FR_ERR_INTERNAL, "gradient of node '%s' needs op '%s', which is not registered",
                        g->nodes[ctx->node_id].name, op_type);
    g->nodes[nid].op = d;
    if (node_id) *node_id = nid;
    return FR_OK;
}

fr_status fr_grad_finish(fr_grad_ctx *ctx, int node_id) { return fr_node_infer(ctx->g, node_id); }

void fr_grad_keep_needed(fr_grad_ctx *ctx, int node_id, int n, const int *out)
{
    fr_node *gn = &ctx->g->nodes[node_id];
    for (int i = 0; i < n; i++) {
        if (ctx->need_din[i]) {
            ctx->din[i] = out[i];
        } else {
            ctx->g->values[out[i]].producer = -1;
            gn->outputs[i] = -1;
        }
    }
}

fr_status fr_grad_op1(fr_grad_ctx *ctx, const char *op_type, int n_in, const int *in, int *out)
{
    int nid;
    FR_TRY(fr_grad_node(ctx, op_type, "", n_in, in, 1, out, &nid));
    return fr_grad_finish(ctx, nid);
}

static int same_shape(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

fr_status fr_grad_sum_to(fr_grad_ctx *ctx, int grad, int like, int *out)
{
    fr_graph *g = ctx->g;
    if (same_shape(&g->values[grad], &g->values[like])) {
        *out = grad;
        return FR_OK;
    }
    int in[1] = {grad}, nid;
    FR_TRY(fr_grad_node(ctx, "SumToShape", "ai.fp8run", 1, in, 1, out, &nid));
    const fr_value *lv = &g->values[like];
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "shape", lv->rank, lv->dims));
    return fr_grad_finish(ctx, nid);
}

fr_status fr_grad_const(fr_grad_ctx *ctx, fr_dtype dt, int rank, const int64_t *dims,
                        const double *data, int *out)
{
    fr_graph *g = ctx->g;
    char nm[512];
    snprintf(nm, sizeof nm, "%s_grad/const", g->nodes[ctx->node_id].name);
    fr_tensor *t;
    FR_TRY(fr_tensor_new(dt, rank, dims, nm, &t));
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case FR_F32: ((float *)t->data)[i] = (float)data[i]; break;
        case FR_F64: ((double *)t->data)[i] = data[i]; break;
        case FR_I64: ((int64_t *)t->data)[i] = (int64_t)data[i]; break;
        default:
            fr_tensor_free(t);
            return fr_error(FR_ERR_INTERNAL, "fr_grad_const: dtype %s not supported", fr_dtype_name(dt));
        }
    }
    fr_status st = fr_graph_add_unique_value(g, nm, out);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    fr_value *v = &g->values[*out];
    v->constant = t;
    v->flags |= FR_VAL_FOLDED;
    fr_value_set_shape(v, dt, rank, dims);
    return FR_OK;
}

fr_status fr_grad_scalar(fr_grad_ctx *ctx, double v, int like, int *out)
{
    return fr_grad_const(ctx, ctx->g->values[like].dtype, 0, NULL, &v, out);
}
