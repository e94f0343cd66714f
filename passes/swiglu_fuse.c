/* SwiGLU fusion (see swiglu_fuse.h): from each Sigmoid, walk forward through the two Muls,
 * check every step, replace the three nodes by one ai.fp8run::SwiGLU; then fold an equal-halves
 * Split that only feeds it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/op.h"
#include "autodiff.h"
#include "swiglu_fuse.h"

typedef struct fuse_ctx {
    fr_graph *g;
    int *readers; /* per value: input slots of live nodes reading it, plus 1 if a graph output */
} fuse_ctx;

static fr_status count_readers(fuse_ctx *c)
{
    fr_graph *g = c->g;
    free(c->readers);
    c->readers = fr_calloc((size_t)g->n_values + 1, sizeof(int), "SwiGLU fusion");
    if (!c->readers) return FR_ERR_OOM;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) c->readers[n->inputs[k]]++;
    }
    for (int i = 0; i < g->n_outputs; i++) c->readers[g->outputs[i]]++;
    return FR_OK;
}

static int is_op(const fr_node *n, const char *op) { return !n->dead && !n->domain[0] && strcmp(n->op_type, op) == 0; }

/* The live node reading v, when it is v's only reader (one input slot, not a graph output). */
static const fr_node *sole_reader(const fuse_ctx *c, int v)
{
    if (v < 0 || c->readers[v] != 1) return NULL;
    const fr_graph *g = c->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v) return n;
    }
    return NULL;
}

static int same_dims(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

/* A Mul of two inputs, one of them x: the other one (-1 if not). */
static int mul_other(const fr_node *n, int x)
{
    if (!is_op(n, "Mul") || n->n_inputs != 2 || n->n_outputs != 1) return -1;
    return n->inputs[0] == x ? n->inputs[1] : n->inputs[1] == x ? n->inputs[0] : -1;
}

typedef struct match {
    int g, u, y;
    int dead[3]; /* Sigmoid, inner Mul, outer Mul */
} match;

static int match_at(const fuse_ctx *c, int s, match *m)
{
    const fr_graph *g = c->g;
    const fr_node *sg = &g->nodes[s];
    if (!is_op(sg, "Sigmoid") || sg->n_inputs != 1 || sg->n_outputs != 1) return 0;
    const int gv = sg->inputs[0], sv = sg->outputs[0];
    const fr_node *m1 = sole_reader(c, sv);
    int x = m1 ? mul_other(m1, sv) : -1;
    if (x < 0 || x == sv) return 0;
    const int t = m1->outputs[0];
    const fr_node *m2 = sole_reader(c, t);
    int other = m2 ? mul_other(m2, t) : -1;
    if (other < 0 || other == t) return 0;
    if (x == gv) { /* Mul(Mul(g, Sigmoid(g)), u) */
        m->u = other;
    } else if (other == gv) { /* Mul(g, Mul(Sigmoid(g), u)) */
        m->u = x;
    } else {
        return 0;
    }
    m->g = gv;
    m->y = m2->outputs[0];
    const fr_value *G = &g->values[m->g], *U = &g->values[m->u], *Y = &g->values[m->y];
    const int vals[4] = {sv, t, m->u, m->y};
    if (G->dtype != FR_F32 || G->rank < 1) return 0;
    for (int i = 0; i < 4; i++)
        if (g->values[vals[i]].dtype != FR_F32 || !same_dims(&g->values[vals[i]], G)) return 0;
    (void)U;
    (void)Y;
    m->dead[0] = s;
    m->dead[1] = (int)(m1 - g->nodes);
    m->dead[2] = (int)(m2 - g->nodes);
    return 1;
}

/* The Split whose two outputs are exactly (gate, up), halves of its input's last axis, read by
 * nothing else (called with the pattern's nodes already dead: no readers left); NULL if none. */
static const fr_node *gate_up_split(const fuse_ctx *c, int gate, int up)
{
    const fr_graph *g = c->g;
    int p = g->values[gate].producer;
    if (p < 0 || gate == up || c->readers[gate] != 0 || c->readers[up] != 0) return NULL;
    const fr_node *sp = &g->nodes[p];
    if (!is_op(sp, "Split") || sp->n_outputs != 2 || sp->outputs[0] != gate || sp->outputs[1] != up) return NULL;
    const fr_value *x = &g->values[sp->inputs[0]], *G = &g->values[gate], *U = &g->values[up];
    if (x->dtype != FR_F32 || x->rank != G->rank || !same_dims(G, U)) return NULL;
    int64_t axis;
    if (fr_node_attr_int(sp, "axis", 0, &axis) != FR_OK) return NULL;
    if (axis < 0) axis += x->rank;
    if (axis != x->rank - 1 || x->dims[x->rank - 1] != 2 * G->dims[G->rank - 1]) return NULL;
    for (int k = 0; k < x->rank - 1; k++)
        if (x->dims[k] != G->dims[k]) return NULL;
    return sp;
}

static fr_status fuse_one(fuse_ctx *c, const match *m, int *one_input)
{
    fr_graph *g = c->g;
    char base[600];
    snprintf(base, sizeof base, "%s/fused_swiglu", g->nodes[m->dead[2]].name);
    for (int i = 0; i < 3; i++) g->nodes[m->dead[i]].dead = 1;
    FR_TRY(count_readers(c)); /* what still reads g and u is outside the pattern */
    int in[2] = {m->g, m->u}, n_in = 2, nid;
    const fr_node *sp = gate_up_split(c, m->g, m->u);
    if (sp) {
        in[0] = sp->inputs[0];
        n_in = 1;
        g->nodes[sp - g->nodes].dead = 1;
        (*one_input)++;
    }
    int y = m->y;
    FR_TRY(fr_graph_add_node(g, "SwiGLU", FR_DOMAIN_FP8RUN, base, n_in, in, 1, &y, &nid));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_swiglu(fr_graph *g, int *count, int *one_input)
{
    int n1 = 0;
    *count = 0;
    fuse_ctx c = {g, NULL};
    fr_status st = count_readers(&c);
    const int n_nodes = g->n_nodes; /* nodes added while fusing are not candidates */
    for (int s = 0; s < n_nodes && st == FR_OK; s++) {
        match m;
        if (!match_at(&c, s, &m)) continue;
        if (*count == 0) st = fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1);
        if (st == FR_OK) st = fuse_one(&c, &m, &n1);
        if (st == FR_OK) st = count_readers(&c);
        if (st == FR_OK) (*count)++;
    }
    free(c.readers);
    if (st == FR_OK && *count) {
        st = fr_graph_compact(g);
        if (st == FR_OK) st = fr_graph_toposort(g);
    }
    if (one_input) *one_input = n1;
    return st;
}
