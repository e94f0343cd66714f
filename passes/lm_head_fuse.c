/* Chunked LM head (see lm_head_fuse.h): match the head, its loss and their backward on the
 * differentiated graph, put one LinearCrossEntropy node in the Linear's place (the nodes that
 * make dloss moved before it), and mark the five nodes dead. */
#include "passes/lm_head_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/linear.h"
#include "ops/linear_ce.h"
#include "ops/op.h"

static int is_op(const fr_node *n, const char *op)
{
    return !n->dead && strcmp(n->op_type, op) == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

static int in_at(const fr_node *n, int i) { return i < n->n_inputs ? n->inputs[i] : -1; }
static int out_at(const fr_node *n, int o) { return o < n->n_outputs ? n->outputs[o] : -1; }

/* inputs / outputs from index `from` on are all absent */
static int none_from(const int *ids, int count, int from)
{
    for (int i = from; i < count; i++)
        if (ids[i] >= 0) return 0;
    return 1;
}

/* Every live reader of value v is one of the nodes in ok[0..n_ok) reading it only in slot
 * slots[k]; *seen gets a bit per ok node that reads it. */
static int readers_only(const fr_graph *g, int v, const int *ok, const int *slots, int n_ok, unsigned *seen)
{
    *seen = 0;
    if (g->values[v].flags & FR_VAL_OUTPUT) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int s = 0; s < n->n_inputs; s++) {
            if (n->inputs[s] != v) continue;
            int k = 0;
            while (k < n_ok && !(ok[k] == i && slots[k] == s)) k++;
            if (k == n_ok) return 0;
            *seen |= 1u << k;
        }
    }
    return 1;
}

/* The single live reader of v in slot `slot` with op `op`, or -1 (also when there are two). */
static int reader(const fr_graph *g, int v, const char *op, int slot)
{
    int found = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (is_op(&g->nodes[i], op) && in_at(&g->nodes[i], slot) == v) {
            if (found >= 0) return -1;
            found = i;
        }
    return found;
}

typedef struct head {
    int lin, ce, ceg, gd, gw; /* node ids (-1: absent backward node) */
    int x, w, labels, dloss;
    int loss, dx, dw;
} head;

/* Match the head ending in loss node ce; 0 with why[] set when it does not qualify. */
static int match(const fr_graph *g, int ce, head *h, char *why, size_t nw)
{
    memset(h, -1, sizeof *h);
    const fr_node *c = &g->nodes[ce];
    h->ce = ce;
    const int logits = in_at(c, 0);
    h->labels = in_at(c, 1);
    h->loss = out_at(c, 0);
    const int lin = logits >= 0 ? g->values[logits].producer : -1;
    if (lin < 0 || !is_op(&g->nodes[lin], "Linear") || out_at(&g->nodes[lin], 0) != logits) {
        snprintf(why, nw, "the logits of '%s' come from %s%s, not a Linear (precision fp32 keeps MatMul)", c->name,
                 lin >= 0 ? "a " : "no node", lin >= 0 ? g->nodes[lin].op_type : "");
        return 0;
    }
    const fr_node *L = &g->nodes[lin];
    fr_lin_attrs a;
    if (fr_lin_read_attrs(L, &a) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    if (a.prec == FR_LIN_FP8 || !none_from(L->inputs, L->n_inputs, 2) || !none_from(L->outputs, L->n_outputs, 2) ||
        g->values[in_at(L, 1)].dtype != FR_F32) {
        snprintf(why, nw, "the LM head '%s' is fp8, has a bias or keeps scaling state", L->name);
        return 0;
    }
    h->lin = lin;
    h->x = in_at(L, 0);
    h->w = in_at(L, 1);
    int64_t ig_ce, ig_g;
    h->ceg = reader(g, logits, "SoftmaxCrossEntropyGrad", 1);
    const int ok_l[2] = {ce, h->ceg}, sl_l[2] = {0, 1};
    unsigned seen;
    if (!readers_only(g, logits, ok_l, sl_l, h->ceg >= 0 ? 2 : 1, &seen)) {
        snprintf(why, nw, "the logits of '%s' are read by more than the loss head", L->name);
        return 0;
    }
    if (fr_node_attr_int(c, "ignore_index", -100, &ig_ce) != FR_OK) return 0;
    if (h->ceg < 0) return 1; /* no backward: the loss alone */
    const fr_node *G = &g->nodes[h->ceg];
    if (fr_node_attr_int(G, "ignore_index", -100, &ig_g) != FR_OK || ig_g != ig_ce || in_at(G, 2) != h->labels) return 0;
    h->dloss = in_at(G, 0);
    const int dl = out_at(G, 0);
    if (h->dloss < 0 || g->values[h->dloss].dtype != FR_F32 || dl < 0) return 0;
    /* the head's backward: the data gradient reads dlogits (and may hand the weight gradient
       their bf16 copy dYq), the weight gradient X or the forward's Xq */
    h->gd = reader(g, dl, "LinearGradData", 0);
    const int dyq = h->gd >= 0 ? out_at(&g->nodes[h->gd], 2) : -1;
    h->gw = reader(g, dl, "LinearGradWeight", 1);
    if (h->gw < 0 && dyq >= 0) h->gw = reader(g, dyq, "LinearGradWeight", 1);
    const int ok_d[2] = {h->gd, h->gw}, sl_d[2] = {0, 1};
    if (!readers_only(g, dl, ok_d, sl_d, 2, &seen) || (dyq >= 0 && !readers_only(g, dyq, &h->gw, &sl_d[1], 1, &seen))) {
        snprintf(why, nw, "dlogits of '%s' are read by more than its backward", L->name);
        return 0;
    }
    if (h->gd >= 0) {
        const fr_node *D = &g->nodes[h->gd];
        if (in_at(D, 1) != h->w || !none_from(D->inputs, D->n_inputs, 2) || out_at(D, 1) >= 0 || out_at(D, 3) >= 0) return 0;
        h->dx = out_at(D, 0);
    }
    if (h->gw >= 0) {
        const fr_node *W = &g->nodes[h->gw];
        const int xs = in_at(W, 0), xq = out_at(L, FR_LIN_OUT_XQ);
        if ((xs != h->x && (xq < 0 || xs != xq)) || !none_from(W->inputs, W->n_inputs, 2) || out_at(W, 1) >= 0) return 0;
        h->dw = out_at(W, 0);
    }
    if (h->dx < 0 && h->dw < 0) return 0;
    const int xq = out_at(L, FR_LIN_OUT_XQ);
    const int ok_q[1] = {h->gw}, sl_q[1] = {0};
    if (xq >= 0 && !readers_only(g, xq, ok_q, sl_q, h->gw >= 0 ? 1 : 0, &seen)) return 0;
    return 1;
}

/* Mark in `hoist` the nodes after `lin` that dloss is computed by (its ancestors there); 0 when
 * one of them is the head itself (dloss depends on the loss). */
static int dloss_nodes(const fr_graph *g, int lin, int dloss, unsigned char *hoist)
{
    int *stack = fr_malloc((size_t)g->n_values * sizeof *stack, "chunked LM head");
    if (!stack) return -1;
    int sp = 0, ok = 1;
    stack[sp++] = dloss;
    while (sp && ok) {
        const int v = stack[--sp], p = g->values[v].producer;
        if (p < 0 || p < lin || hoist[p]) continue;
        if (p == lin) {
            ok = 0;
            break;
        }
        hoist[p] = 1;
        for (int i = 0; i < g->nodes[p].n_inputs; i++)
            if (g->nodes[p].inputs[i] >= 0 && sp < g->n_values) stack[sp++] = g->nodes[p].inputs[i];
    }
    free(stack);
    return ok;
}

/* Node order: the nodes before the head, the moved dloss nodes, the fused node, the rest. */
static fr_status reorder(fr_graph *g, int lin, int fused, const unsigned char *hoist)
{
    const int nn = g->n_nodes;
    fr_node *sorted = fr_malloc((size_t)nn * sizeof *sorted, "chunked LM head");
    if (!sorted) return FR_ERR_OOM;
    int k = 0;
    for (int i = 0; i < nn; i++) {
        if (i == lin) {
            for (int j = lin + 1; j < nn; j++)
                if (hoist[j]) sorted[k++] = g->nodes[j];
            sorted[k++] = g->nodes[fused];
        }
        if (hoist[i] || i == fused) continue;
        sorted[k++] = g->nodes[i];
    }
    memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
    free(sorted);
    return fr_graph_rebuild_producers(g);
}

static fr_status copy_attrs(fr_node *dst, const fr_node *src)
{
    for (int i = 0; i < src->n_attrs; i++) {
        const fr_attr *a = &src->attrs[i];
        if (a->type == FR_ATTR_INT)
            FR_TRY(fr_node_set_attr_int(dst, a->name, a->i));
        else if (a->type == FR_ATTR_STRING)
            FR_TRY(fr_node_set_attr_string(dst, a->name, a->s ? a->s : ""));
    }
    return FR_OK;
}

static fr_status fuse_one(fr_graph *g, const head *h, int64_t *rows, int64_t *vocab, int64_t *chunk)
{
    unsigned char *hoist = fr_calloc((size_t)g->n_nodes + 1, 1, "chunked LM head");
    if (!hoist) return FR_ERR_OOM;
    if (h->dloss >= 0) {
        int r = dloss_nodes(g, h->lin, h->dloss, hoist);
        if (r <= 0) {
            free(hoist);
            return r < 0 ? FR_ERR_OOM : FR_ERR_UNSUPPORTED; /* unsupported: left unfused by the caller */
        }
    }
    char name[600];
    snprintf(name, sizeof name, "%s/chunked_ce", g->nodes[h->lin].name);
    int in[FR_LCE_N_IN] = {h->x, h->w, h->labels, h->dloss}, out[FR_LCE_N_OUT] = {h->loss, h->dx, h->dw}, nid;
    const int n_in = h->dloss >= 0 ? 4 : 3, n_out = h->dw >= 0 ? 3 : h->dx >= 0 ? 2 : 1;
    fr_status st = fr_graph_add_node(g, "LinearCrossEntropy", FR_DOMAIN_FP8RUN, name, n_in, in, n_out, out, &nid);
    if (st != FR_OK) {
        free(hoist);
        return st;
    }
    fr_node *f = &g->nodes[nid];
    f->op = fr_op_find(FR_DOMAIN_FP8RUN, "LinearCrossEntropy");
    st = copy_attrs(f, &g->nodes[h->lin]);
    const fr_value *w = &g->values[h->w];
    int64_t tb = 0, ig = -100, M = 1;
    if (st == FR_OK) st = fr_node_attr_int(&g->nodes[h->lin], "transB", 0, &tb);
    if (st == FR_OK) st = fr_node_attr_int(&g->nodes[h->ce], "ignore_index", -100, &ig);
    const fr_value *lb = &g->values[h->labels];
    for (int d = 0; d < lb->rank; d++) M *= lb->dims[d];
    const int64_t V = tb ? w->dims[0] : w->dims[1];
    *rows = M;
    *vocab = V;
    *chunk = fr_lce_chunk_rows(M, V);
    if (st == FR_OK && h->gd >= 0) { /* the data gradient's dX dtype */
        const char *dxd;
        st = fr_node_attr_string(&g->nodes[h->gd], "dx_dtype", "float32", &dxd);
        if (st == FR_OK) st = fr_node_set_attr_string(&g->nodes[nid], "dx_dtype", dxd);
    }
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[nid], "ignore_index", ig);
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[nid], "chunk_rows", *chunk);
    const int dead[5] = {h->lin, h->ce, h->ceg, h->gd, h->gw};
    for (int i = 0; st == FR_OK && i < 5; i++) {
        if (dead[i] < 0) continue;
        fr_node *d = &g->nodes[dead[i]];
        d->dead = 1;
        for (int o = 0; o < d->n_outputs; o++) d->outputs[o] = -1; /* their values are the fused node's now */
    }
    if (st == FR_OK) st = reorder(g, h->lin, nid, hoist);
    free(hoist);
    if (st == FR_OK) {
        int fid = -1; /* its index after the reorder */
        for (int i = 0; i < g->n_nodes && fid < 0; i++)
            if (!g->nodes[i].dead && strcmp(g->nodes[i].name, name) == 0) fid = i;
        st = fid >= 0 ? fr_node_infer(g, fid) : fr_error(FR_ERR_INTERNAL, "chunked LM head: the fused node went missing");
    }
    return st;
}

fr_status fr_fuse_lm_head(fr_graph *g, int *count, char *detail, size_t n)
{
    *count = 0;
    char why[300] = "", done[400] = "";
    int64_t M = 0, V = 0, R = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!is_op(&g->nodes[i], "SoftmaxCrossEntropy")) continue;
        head h;
        if (!match(g, i, &h, why, sizeof why)) continue;
        fr_dtype yt = g->values[out_at(&g->nodes[h.lin], 0)].dtype;
        fr_status st = fuse_one(g, &h, &M, &V, &R);
        if (st == FR_ERR_UNSUPPORTED) {
            snprintf(why, sizeof why, "dloss of '%s' depends on its loss", g->nodes[i].name);
            continue;
        }
        FR_TRY(st);
        const double gib = (double)M * (double)V * (yt == FR_BF16 ? 2.0 : 4.0) * (h.ceg >= 0 ? 2 : 1) / (1 << 30);
        snprintf(done, sizeof done, "logits [%lld, %lld] %s%s (%.2f GiB) in chunks of %lld rows", (long long)M,
                 (long long)V, fr_dtype_name(yt), h.ceg >= 0 ? " and their gradient" : "", gib, (long long)R);
        (*count)++;
        i = -1; /* the node order changed: look again from the start (fused heads are dead) */
    }
    if (*count) FR_TRY(fr_graph_compact(g)); /* the executors refuse dead nodes */
    if (detail && n) {
        if (*count)
            snprintf(detail, n, "%d fused: %s", *count, done);
        else
            snprintf(detail, n, "0 fused%s%s", why[0] ? ": " : " (no loss head)", why);
    }
    return FR_OK;
}

size_t fr_lm_head_saved_bytes(const fr_graph *g)
{
    size_t total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (!is_op(n, "LinearCrossEntropy") || in_at(n, 1) < 0 || in_at(n, 2) < 0) continue;
        const fr_value *w = &g->values[n->inputs[1]], *lb = &g->values[n->inputs[2]];
        int64_t tb = 0, chunk = 0, M = 1;
        int y16 = 0;
        if (fr_node_attr_int(n, "transB", 0, &tb) != FR_OK || fr_node_attr_int(n, "chunk_rows", 1024, &chunk) != FR_OK ||
            fr_attr_bf16(n, "y_dtype", &y16) != FR_OK || w->rank != 2) {
            fr_clear_error();
            continue;
        }
        for (int d = 0; d < lb->rank; d++) M *= lb->dims[d];
        const int64_t V = tb ? w->dims[0] : w->dims[1];
        const size_t el = y16 ? 2 : 4, grads = out_at(n, 1) >= 0 || out_at(n, 2) >= 0;
        const size_t whole = (size_t)M * (size_t)V * el * (grads ? 2 : 1), part = (size_t)(chunk < M ? chunk : M) * (size_t)V * 4;
        if (whole > part) total += whole - part;
    }
    return total;
}
