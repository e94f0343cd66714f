/* The weight gradient's X operand (see wgrad_operand.h). */
#include "passes/wgrad_operand.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/linear.h"
#include "ops/op.h"

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

typedef struct wo {
    fr_graph *g;
    int *root; /* per value: the value whose memory it is */
    int *last; /* per root: the position of its last reader; INT_MAX: held for the whole run */
} wo;

static fr_status liveness(wo *w)
{
    fr_graph *g = w->g;
    const size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    free(w->root);
    free(w->last);
    w->root = fr_malloc(nv * sizeof(int), "weight-gradient operands");
    w->last = fr_malloc(nv * sizeof(int), "weight-gradient operands");
    if (!w->root || !w->last) return FR_ERR_OOM;
    for (int v = 0; v < g->n_values; v++) {
        w->root[v] = v;
        /* graph inputs, constants and parameters are held whatever reads them */
        w->last[v] = g->values[v].producer < 0 ? INT_MAX : -1;
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && fr_node_is_view(&g->nodes[i]))
            w->root[g->nodes[i].outputs[0]] = w->root[g->nodes[i].inputs[0]];
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            int r = n->inputs[k] >= 0 ? w->root[n->inputs[k]] : -1;
            if (r >= 0 && w->last[r] != INT_MAX && w->last[r] < i) w->last[r] = i;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) w->last[w->root[g->outputs[i]]] = INT_MAX;
    return FR_OK;
}

/* value v stays in memory after position `at` whatever reads it there */
static int kept_past(const wo *w, int v, int at) { return v < 0 || w->last[w->root[v]] > at; }

/* X's producer a pure elementwise op of the fused MLP whose copy remakes X bit for bit */
static int remakable(const fr_node *p)
{
    if (!p || p->n_outputs < 1) return 0;
    for (int o = 1; o < p->n_outputs; o++)
        if (p->outputs[o] >= 0) return 0;
    return is_op(p, "SwiGLU") || is_op(p, "Gelu");
}

/* p (X's remakable producer) is a one-input SwiGLU whose output a per-tensor fp8 weight
 * gradient can remake inside its own quantization (ops/linear.h, x_glu) */
static int glu_source(const fr_graph *g, const fr_node *p, const fr_lin_attrs *a)
{
    if (!is_op(p, "SwiGLU") || p->n_inputs != 1 || p->inputs[0] < 0 || a->recipe == FR_LIN_BLOCKWISE) return 0;
    const fr_dtype dt = g->values[p->inputs[0]].dtype;
    return dt == FR_F32 || dt == FR_BF16;
}

/* Weight gradient i reads SwiGLU px's gate_up with its activation and output dtype */
static fr_status set_glu(fr_graph *g, int i, int px)
{
    const char *act;
    int y_bf16;
    FR_TRY(fr_node_attr_string(&g->nodes[px], "activation", "silu", &act));
    FR_TRY(fr_attr_bf16(&g->nodes[px], "y_dtype", &y_bf16));
    char a[16];
    snprintf(a, sizeof a, "%s", act);
    FR_TRY(fr_node_set_attr_string(&g->nodes[i], "x_glu", a));
    if (y_bf16) FR_TRY(fr_node_set_attr_string(&g->nodes[i], "x_glu_dtype", "bfloat16"));
    return FR_OK;
}

/* Insert a copy of forward node p at position `at` (shifting the rest), writing a new value
 * shaped like p's output; *out its id. */
static fr_status insert_copy(fr_graph *g, int p, int at, int *out)
{
    const int src_out = g->nodes[p].outputs[0];
    char vn[600], nn[600];
    snprintf(vn, sizeof vn, "%s/remade", g->values[src_out].name);
    FR_TRY(fr_graph_add_unique_value(g, vn, out));
    const fr_value *sv = &g->values[src_out];
    fr_value_set_shape(&g->values[*out], sv->dtype, sv->rank, sv->dims);
    snprintf(nn, sizeof nn, "%s/remade", g->nodes[p].name);
    int nid, ni = g->nodes[p].n_inputs, no = g->nodes[p].n_outputs;
    int *outs = fr_malloc((size_t)no * sizeof(int), "weight-gradient operands");
    if (!outs) return FR_ERR_OOM;
    outs[0] = *out;
    for (int o = 1; o < no; o++) outs[o] = -1;
    /* (the node's own arrays and strings: they stay where they are when g->nodes grows) */
    const fr_node *src = &g->nodes[p];
    fr_status st = fr_graph_add_node(g, src->op_type, src->domain, nn, ni, src->inputs, no, outs, &nid);
    free(outs);
    FR_TRY(st);
    g->nodes[nid].op = g->nodes[p].op;
    FR_TRY(fr_node_copy_attrs(&g->nodes[nid], &g->nodes[p]));
    /* move it from the end to `at` */
    fr_node copy = g->nodes[nid];
    memmove(&g->nodes[at + 1], &g->nodes[at], (size_t)(nid - at) * sizeof(fr_node));
    g->nodes[at] = copy;
    return fr_graph_rebuild_producers(g);
}

static fr_status run(wo *w, int remake, fr_wgrad_operand_stats *stats)
{
    fr_graph *g = w->g;
    FR_TRY(liveness(w));
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *gw = &g->nodes[i];
        fr_lin_attrs a;
        if (!is_op(gw, "LinearGradWeight") || gw->n_inputs < 3 || fr_lin_read_attrs(gw, &a) != FR_OK ||
            a.prec != FR_LIN_FP8)
            continue;
        const int xq = gw->inputs[0], pl = g->values[xq].producer;
        if (pl < 0 || !is_op(&g->nodes[pl], "Linear") || g->nodes[pl].n_outputs <= FR_LIN_OUT_XQ_SINV ||
            g->nodes[pl].outputs[FR_LIN_OUT_XQ] != xq || gw->inputs[2] != g->nodes[pl].outputs[FR_LIN_OUT_XQ_SINV])
            continue;
        const fr_node *lin = &g->nodes[pl];
        const int x = lin->inputs[FR_LIN_IN_X];
        /* the delayed recipe quantizes with the forward's scale_x; the others find the scale
           from X's amax, which is the forward's */
        const int sx = a.recipe == FR_LIN_DELAYED ? lin->inputs[FR_LIN_IN_SCALE_X] : -1;
        if (a.recipe == FR_LIN_DELAYED && (lin->n_inputs <= FR_LIN_IN_SCALE_X || sx < 0)) continue;
        if (g->values[x].dtype != FR_F32 && g->values[x].dtype != FR_BF16) continue;
        int xs = -1;
        if (kept_past(w, x, i)) {
            xs = x;
            stats->kept++;
        } else if (remake) {
            const int px = g->values[x].producer;
            const fr_node *p = px >= 0 ? &g->nodes[px] : NULL;
            int ok = remakable(p) && p->outputs[0] == x;
            for (int k = 0; ok && k < p->n_inputs; k++) ok = kept_past(w, p->inputs[k], i);
            if (!ok) continue;
            if (glu_source(g, p, &a)) { /* the weight gradient's quantization remakes X */
                xs = p->inputs[0];
                FR_TRY(set_glu(g, i, px));
                gw = &g->nodes[i];
                stats->fused++;
            } else {
                FR_TRY(insert_copy(g, px, i, &xs));
                gw = &g->nodes[++i]; /* the weight gradient moved one place on */
            }
            stats->remade++;
        } else {
            continue;
        }
        gw->inputs[0] = xs;
        gw->inputs[2] = sx;
        fr_lin_drop_unread_xq(g, &g->nodes[pl]); /* the forward's Xq, unread now */
        /* a kept X was read past i already; a copy moved every later node one place on */
        if (xs != x) FR_TRY(liveness(w));
    }
    return FR_OK;
}

fr_status fr_wgrad_operands(fr_graph *g, int remake, fr_wgrad_operand_stats *stats)
{
    memset(stats, 0, sizeof *stats);
    wo w = {g, NULL, NULL};
    fr_status st = run(&w, remake, stats);
    free(w.root);
    free(w.last);
    return st;
}
