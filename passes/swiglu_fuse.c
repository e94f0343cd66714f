/* SwiGLU fusion (see swiglu_fuse.h): from each Sigmoid, walk forward through the two Muls,
 * check every step, replace the three nodes by one ai.fp8run::SwiGLU; then fold an equal-halves
 * Split that only feeds it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/pattern.h"
#include "passes/swiglu_fuse.h"

typedef struct match {
    int g, u, y;
    const char *act; /* the SwiGLU activation attribute: "silu", "gelu_tanh" or "gelu" */
    int dead[3], n_dead; /* Sigmoid, inner Mul, outer Mul (GeGLU: Gelu, Mul) */
} match;

/* GeGLU: Mul(Gelu(g), u) with the Gelu of the default or the ai.fp8run domain (what
 * passes/gelu_fuse.c makes), float32, one shape; node s is the Gelu. */
static int match_geglu(const fr_readers *c, int s, match *m)
{
    const fr_graph *g = c->g;
    const fr_node *gl = &g->nodes[s];
    if (gl->dead || strcmp(gl->op_type, "Gelu") != 0 || (gl->domain[0] && strcmp(gl->domain, FR_DOMAIN_FP8RUN) != 0) ||
        gl->n_inputs != 1 || gl->n_outputs != 1)
        return 0;
    const char *approx;
    if (fr_node_attr_string(gl, "approximate", "none", &approx) != FR_OK) return 0;
    m->act = strcmp(approx, "tanh") == 0 ? "gelu_tanh" : strcmp(approx, "none") == 0 ? "gelu" : NULL;
    const int gv = gl->inputs[0], a = gl->outputs[0];
    const fr_node *mu = fr_sole_reader(c, a);
    m->u = fr_binary_other(mu, "Mul", a);
    if (!m->act || m->u < 0 || m->u == a) return 0;
    m->g = gv;
    m->y = mu->outputs[0];
    const int vals[4] = {gv, a, m->u, m->y};
    for (int i = 0; i < 4; i++)
        if (g->values[vals[i]].dtype != FR_F32 || g->values[vals[i]].rank < 1 || !fr_same_dims(&g->values[vals[i]], &g->values[gv]))
            return 0;
    m->dead[0] = s;
    m->dead[1] = (int)(mu - g->nodes);
    m->n_dead = 2;
    return 1;
}

static int match_at(const fr_readers *c, int s, match *m)
{
    const fr_graph *g = c->g;
    const fr_node *sg = &g->nodes[s];
    if (match_geglu(c, s, m)) return 1;
    m->act = "silu";
    m->n_dead = 3;
    if (!fr_is_onnx_op(sg, "Sigmoid") || sg->n_inputs != 1 || sg->n_outputs != 1) return 0;
    const int gv = sg->inputs[0], sv = sg->outputs[0];
    const fr_node *m1 = fr_sole_reader(c, sv);
    int x = fr_binary_other(m1, "Mul", sv);
    if (x < 0 || x == sv) return 0;
    const int t = m1->outputs[0];
    const fr_node *m2 = fr_sole_reader(c, t);
    int other = fr_binary_other(m2, "Mul", t);
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
        if (g->values[vals[i]].dtype != FR_F32 || !fr_same_dims(&g->values[vals[i]], G)) return 0;
    (void)U;
    (void)Y;
    m->dead[0] = s;
    m->dead[1] = (int)(m1 - g->nodes);
    m->dead[2] = (int)(m2 - g->nodes);
    return 1;
}

/* The Split whose two outputs are exactly (gate, up), halves of its input's last axis, read by
 * nothing else (called with the pattern's nodes already dead: no readers left); NULL if none. */
static const fr_node *gate_up_split(const fr_readers *c, int gate, int up)
{
    const fr_graph *g = c->g;
    int p = g->values[gate].producer;
    if (p < 0 || gate == up || c->count[gate] != 0 || c->count[up] != 0) return NULL;
    const fr_node *sp = &g->nodes[p];
    if (!fr_is_onnx_op(sp, "Split") || sp->n_outputs != 2 || sp->outputs[0] != gate || sp->outputs[1] != up) return NULL;
    const fr_value *x = &g->values[sp->inputs[0]], *G = &g->values[gate], *U = &g->values[up];
    if (x->dtype != FR_F32 || x->rank != G->rank || !fr_same_dims(G, U)) return NULL;
    int64_t axis;
    if (fr_node_attr_int(sp, "axis", 0, &axis) != FR_OK) return NULL;
    if (axis < 0) axis += x->rank;
    if (axis != x->rank - 1 || x->dims[x->rank - 1] != 2 * G->dims[G->rank - 1]) return NULL;
    for (int k = 0; k < x->rank - 1; k++)
        if (x->dims[k] != G->dims[k]) return NULL;
    return sp;
}

static fr_status fuse_one(fr_readers *c, const match *m, int *one_input)
{
    fr_graph *g = c->g;
    char base[600];
    snprintf(base, sizeof base, "%s/fused_swiglu", g->nodes[m->dead[m->n_dead - 1]].name);
    for (int i = 0; i < m->n_dead; i++) g->nodes[m->dead[i]].dead = 1;
    FR_TRY(fr_readers_refresh(c, "SwiGLU fusion")); /* what still reads g and u is outside the pattern */
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
    if (strcmp(m->act, "silu") != 0) FR_TRY(fr_node_set_attr_string(&g->nodes[nid], "activation", m->act));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_swiglu(fr_graph *g, int *count, int *one_input)
{
    int n1 = 0;
    *count = 0;
    fr_readers c = {g, NULL};
    fr_status st = fr_readers_refresh(&c, "SwiGLU fusion");
    const int n_nodes = g->n_nodes; /* nodes added while fusing are not candidates */
    for (int s = 0; s < n_nodes && st == FR_OK; s++) {
        match m;
        if (!match_at(&c, s, &m)) continue;
        if (*count == 0) st = fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1);
        if (st == FR_OK) st = fuse_one(&c, &m, &n1);
        if (st == FR_OK) st = fr_readers_refresh(&c, "SwiGLU fusion");
        if (st == FR_OK) (*count)++;
    }
    fr_readers_free(&c);
    if (st == FR_OK && *count) {
        st = fr_graph_compact(g);
        if (st == FR_OK) st = fr_graph_toposort(g);
    }
    if (one_input) *one_input = n1;
    return st;
}
