/* Activation recomputation (see recompute.h). */
#include "passes/recompute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/linear.h"
#include "ops/op.h"

fr_status fr_recompute_parse(const char *s, fr_recompute_mode *out)
{
    static const char *const names[] = {"none", "attention", "mlp", "full"};
    for (int i = 0; s && i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (fr_recompute_mode)i;
            return FR_OK;
        }
    return fr_error(FR_ERR_INVALID_ARG, "recompute '%s' is not one of none, attention, mlp, full", s ? s : "(null)");
}

static int is_op(const fr_node *n, const char *domain, const char *op)
{
    return strcmp(n->domain, domain) == 0 && strcmp(n->op_type, op) == 0;
}

/* the pass's working state; arrays over forward nodes (nf) or the original values (nv) */
typedef struct rc {
    fr_graph *g;
    int nf, nn, nv;
    int *branch_of;   /* per forward node: its residual branch, -1 */
    int *region_of;   /* per forward node: its region, -1 */
    int *stamp_n, *stamp_v, gen; /* per node / value marks of one branch search */
    unsigned char *on; /* per forward node: on the branch being searched */
    unsigned char *clone, *internal; /* per forward node: to copy; read inside its region */
    int *map;         /* per original value: its copy, -1 */
    int *first;       /* per forward node to copy: the first node needing its copy (nn: none) */
    int *src_of;      /* per copy (node nn + i): the forward node it copies */
} rc;

typedef struct branch {
    int add, r, attn;
} branch;

static int producer(const rc *c, int v)
{
    int p = v >= 0 ? c->g->values[v].producer : -1;
    return p >= 0 && p < c->nf ? p : -1;
}

/* Mark c->on[] for the forward nodes on a path from value r to value b (b's producer
 * included); returns how many, 0 when r does not reach b. *attn: an attention op is among
 * them; *gemm: a Linear or MatMul is. */
static int search_branch(rc *c, int r, int b, int *attn, int *gemm)
{
    const fr_graph *g = c->g;
    int lo = producer(c, r) + 1, hi = producer(c, b), gen = ++c->gen, n_on = 0;
    *attn = *gemm = 0;
    if (hi < lo) return 0;
    for (int n = lo; n <= hi; n++) { /* stamp_n: reached from r */
        const fr_node *nd = &g->nodes[n];
        for (int k = 0; !nd->dead && k < nd->n_inputs; k++) {
            int v = nd->inputs[k], p = producer(c, v);
            if (v == r || (p >= lo && c->stamp_n[p] == gen)) c->stamp_n[n] = gen;
        }
    }
    if (c->stamp_n[hi] != gen) return 0;
    for (int n = hi; n >= lo; n--) { /* stamp_v: read by a node on the path */
        const fr_node *nd = &g->nodes[n];
        int on = n == hi;
        for (int o = 0; !on && o < nd->n_outputs; o++) on = nd->outputs[o] >= 0 && c->stamp_v[nd->outputs[o]] == gen;
        c->on[n] = on && c->stamp_n[n] == gen;
        if (!c->on[n]) continue;
        n_on++;
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) c->stamp_v[nd->inputs[k]] = gen;
        if (is_op(nd, FR_DOMAIN_FP8RUN, "Attention") || is_op(nd, FR_DOMAIN_FP8RUN, "AttentionQKV") ||
            is_op(nd, "", "Softmax"))
            *attn = 1;
        if (strcmp(nd->op_type, "Linear") == 0 || strcmp(nd->op_type, "MatMul") == 0) *gemm = 1;
    }
    return n_on;
}

/* Find the residual branches (c->branch_of) into *out (malloc'ed), *n of them. */
static fr_status find_branches(rc *c, branch **out, int *n)
{
    const fr_graph *g = c->g;
    branch *bs = fr_malloc((size_t)(c->nf ? c->nf : 1) * sizeof *bs, "recompute");
    if (!bs) return FR_ERR_OOM;
    *out = bs;
    *n = 0;
    for (int i = 0; i < c->nf; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead || !is_op(nd, "", "Add") || nd->n_inputs != 2 || nd->inputs[0] < 0 || nd->inputs[1] < 0) continue;
        for (int side = 0; side < 2; side++) {
            int r = nd->inputs[side], b = nd->inputs[1 - side], attn, gemm;
            int lo = producer(c, r) + 1, hi = producer(c, b);
            if (search_branch(c, r, b, &attn, &gemm) < 2 || !gemm) continue;
            int clash = 0; /* branches are disjoint in a residual chain; keep the first otherwise */
            for (int k = lo; k <= hi; k++) clash |= c->on[k] && c->branch_of[k] >= 0;
            if (clash) break;
            for (int k = lo; k <= hi; k++)
                if (c->on[k]) c->branch_of[k] = *n;
            bs[(*n)++] = (branch){i, r, attn};
            break;
        }
    }
    return FR_OK;
}

/* The node computing a node's one non-constant input (-1: none, several, or not forward). */
static int sole_source(const rc *c, int n)
{
    const fr_node *nd = &c->g->nodes[n];
    int src = -1, count = 0;
    for (int k = 0; k < nd->n_inputs; k++) {
        int v = nd->inputs[k];
        if (v < 0 || c->g->values[v].constant) continue;
        count++;
        src = producer(c, v);
    }
    return count == 1 ? src : -1;
}

/* full: the attention branch whose Add reaches MLP branch k's residual input directly or through
 * single-input nodes outside the branches (a post-LN block's LayerNorm); -1 if none. The nodes
 * between join the region (with the Add) when `join` >= 0. */
static int attention_before(rc *c, const branch *bs, int k, int join)
{
    int p = producer(c, bs[k].r);
    while (p >= 0 && c->branch_of[p] < 0) {
        for (int a = 0; a < k; a++)
            if (bs[a].attn && bs[a].add == p) {
                if (join >= 0) c->region_of[p] = join;
                return a;
            }
        if (join >= 0) c->region_of[p] = join;
        p = sole_source(c, p);
    }
    return -1;
}

/* c->region_of from the branches and the mode; returns the region count. */
static int assign_regions(rc *c, const branch *bs, int nb, fr_recompute_mode mode)
{
    int *reg = fr_malloc((size_t)(nb ? nb : 1) * sizeof(int), "recompute");
    if (!reg) return -1;
    int nr = 0;
    for (int k = 0; k < nb; k++) {
        int want = mode == FR_RECOMPUTE_FULL || (mode == FR_RECOMPUTE_ATTENTION && bs[k].attn) ||
                   (mode == FR_RECOMPUTE_MLP && !bs[k].attn);
        reg[k] = -1;
        /* full: an MLP branch reading an attention branch's Add joins it, with what is between */
        int a = mode == FR_RECOMPUTE_FULL && !bs[k].attn ? attention_before(c, bs, k, -1) : -1;
        if (a >= 0) {
            reg[k] = reg[a];
            attention_before(c, bs, k, reg[a]);
        }
        if (want && reg[k] < 0) reg[k] = nr++;
    }
    for (int n = 0; n < c->nf; n++)
        if (c->branch_of[n] >= 0) c->region_of[n] = reg[c->branch_of[n]];
    free(reg);
    return nr;
}

/* Which forward nodes to copy (c->clone) and where each copy goes (c->first: right before the
 * first backward node reading it or a copy made from it). */
static void plan_copies(rc *c)
{
    const fr_graph *g = c->g;
    for (int n = 0; n < c->nf; n++) c->first[n] = c->nn;
    for (int n = 0; n < c->nf; n++) { /* read inside its own region: not a sink */
        const fr_node *nd = &g->nodes[n];
        for (int k = 0; c->region_of[n] >= 0 && k < nd->n_inputs; k++) {
            int p = producer(c, nd->inputs[k]);
            if (p >= 0 && c->region_of[p] == c->region_of[n]) c->internal[p] = 1;
        }
    }
    for (int j = c->nf; j < c->nn; j++) { /* the backward's reads */
        const fr_node *nd = &g->nodes[j];
        for (int k = 0; !nd->dead && k < nd->n_inputs; k++) {
            int p = producer(c, nd->inputs[k]);
            if (p < 0 || c->region_of[p] < 0 || !c->internal[p]) continue;
            c->clone[p] = 1;
            if (j < c->first[p]) c->first[p] = j;
        }
    }
    for (int n = c->nf - 1; n >= 0; n--) { /* and what those copies read inside the region */
        const fr_node *nd = &g->nodes[n];
        for (int k = 0; c->clone[n] && k < nd->n_inputs; k++) {
            int p = producer(c, nd->inputs[k]);
            if (p < 0 || c->region_of[p] != c->region_of[n]) continue;
            c->clone[p] = 1;
            if (c->first[n] < c->first[p]) c->first[p] = c->first[n];
        }
    }
}

/* Append the copy of forward node n (inputs through c->map; a Linear's amax outputs dropped). */
static fr_status copy_node(rc *c, int n)
{
    fr_graph *g = c->g;
    const fr_node *src = &g->nodes[n];
    int ni = src->n_inputs, no = src->n_outputs, nid;
    int is_linear = is_op(src, FR_DOMAIN_FP8RUN, "Linear");
    int *io = fr_malloc((size_t)(ni + no + 1) * sizeof(int), "recompute");
    if (!io) return FR_ERR_OOM;
    char name[600];
    snprintf(name, sizeof name, "%s/recompute", src->name);
    for (int k = 0; k < ni; k++) {
        int v = src->inputs[k];
        io[k] = v >= 0 && c->map[v] >= 0 ? c->map[v] : v;
    }
    fr_status st = FR_OK;
    for (int o = 0; o < no && st == FR_OK; o++) {
        int v = g->nodes[n].outputs[o];
        io[ni + o] = -1;
        if (v < 0 || (is_linear && (o == FR_LIN_OUT_AMAX_X || o == FR_LIN_OUT_AMAX_W))) continue;
        char vn[600];
        snprintf(vn, sizeof vn, "%s/recompute", g->values[v].name);
        st = fr_graph_add_unique_value(g, vn, &io[ni + o]);
        if (st != FR_OK) break;
        const fr_value *ov = &g->values[v];
        fr_value_set_shape(&g->values[io[ni + o]], ov->dtype, ov->rank, ov->dims);
        c->map[v] = io[ni + o];
    }
    src = &g->nodes[n];
    if (st == FR_OK) st = fr_graph_add_node(g, src->op_type, src->domain, name, ni, io, no, io + ni, &nid);
    free(io);
    FR_TRY(st);
    g->nodes[nid].op = g->nodes[n].op;
    return fr_node_copy_attrs(&g->nodes[nid], &g->nodes[n]);
}

/* Put each copy (nodes nn.., in forward order) right before c->first[its source]. */
static fr_status reorder(rc *c)
{
    fr_graph *g = c->g;
    int total = g->n_nodes;
    fr_node *nodes = fr_malloc((size_t)total * sizeof *nodes, "recompute");
    if (!nodes) return FR_ERR_OOM;
    int k = 0;
    for (int j = 0; j < c->nn; j++) {
        for (int m = c->nn; j >= c->nf && m < total; m++)
            if (c->first[c->src_of[m - c->nn]] == j) nodes[k++] = g->nodes[m];
        nodes[k++] = g->nodes[j];
    }
    if (k != total) { /* every copy is read by the backward: a bug otherwise */
        free(nodes);
        return fr_error(FR_ERR_INTERNAL, "recompute: %d of %d nodes placed", k, total);
    }
    free(g->nodes);
    g->nodes = nodes;
    g->cap_nodes = total;
    return fr_graph_rebuild_producers(g);
}

static void rc_free(rc *c)
{
    free(c->branch_of);
    free(c->region_of);
    free(c->stamp_n);
    free(c->stamp_v);
    free(c->on);
    free(c->clone);
    free(c->internal);
    free(c->map);
    free(c->first);
    free(c->src_of);
}

static fr_status run(rc *c, fr_recompute_mode mode, fr_recompute_stats *stats)
{
    fr_graph *g = c->g;
    size_t nf = (size_t)(c->nf ? c->nf : 1), nv = (size_t)(c->nv ? c->nv : 1);
    c->branch_of = fr_malloc(nf * sizeof(int), "recompute");
    c->region_of = fr_malloc(nf * sizeof(int), "recompute");
    c->stamp_n = fr_calloc(nf, sizeof(int), "recompute");
    c->stamp_v = fr_calloc(nv, sizeof(int), "recompute");
    c->on = fr_calloc(nf, 1, "recompute");
    c->clone = fr_calloc(nf, 1, "recompute");
    c->internal = fr_calloc(nf, 1, "recompute");
    c->map = fr_malloc(nv * sizeof(int), "recompute");
    c->first = fr_malloc(nf * sizeof(int), "recompute");
    c->src_of = fr_malloc(nf * sizeof(int), "recompute");
    if (!c->branch_of || !c->region_of || !c->stamp_n || !c->stamp_v || !c->on || !c->clone || !c->internal ||
        !c->map || !c->first || !c->src_of)
        return FR_ERR_OOM;
    for (int i = 0; i < c->nf; i++) c->branch_of[i] = c->region_of[i] = -1;
    for (int i = 0; i < c->nv; i++) c->map[i] = -1;
    branch *bs = NULL;
    int nb;
    fr_status st = find_branches(c, &bs, &nb);
    int nr = st == FR_OK ? assign_regions(c, bs, nb, mode) : 0;
    free(bs);
    FR_TRY(st);
    if (nr < 0) return FR_ERR_OOM;
    plan_copies(c);
    int copies = 0;
    for (int n = 0; n < c->nf; n++)
        if (c->clone[n]) {
            FR_TRY(copy_node(c, n));
            c->src_of[copies++] = n;
        }
    for (int j = c->nf; j < c->nn; j++) { /* the backward reads the copies */
        fr_node *nd = &g->nodes[j];
        for (int k = 0; k < nd->n_inputs; k++) {
            int v = nd->inputs[k];
            if (v < 0 || v >= c->nv || c->map[v] < 0) continue;
            nd->inputs[k] = c->map[v];
            stats->reads++;
        }
    }
    stats->regions = nr;
    stats->nodes = copies;
    return copies ? reorder(c) : FR_OK;
}

fr_status fr_recompute(fr_graph *g, int n_forward, fr_recompute_mode mode, fr_recompute_stats *stats)
{
    fr_recompute_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    if (n_forward < 0 || n_forward > g->n_nodes)
        return fr_error(FR_ERR_INTERNAL, "recompute: %d forward nodes of %d", n_forward, g->n_nodes);
    if (mode == FR_RECOMPUTE_NONE) return FR_OK;
    rc c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.nf = n_forward;
    c.nn = g->n_nodes;
    c.nv = g->n_values;
    fr_status st = run(&c, mode, stats);
    rc_free(&c);
    return st;
}
