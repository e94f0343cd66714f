/* GELU fusion (see gelu_fuse.h): from each Erf or Tanh, walk back to x and forward to the
 * product, check every step, replace the chain by one ai.fp8run::Gelu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/gelu_fuse.h"
#include "passes/pattern.h"

typedef struct match {
    int x, y, tanh;
    int dead[10], n_dead;
} match;

static void kill(const fr_graph *g, match *m, const fr_node *n) { m->dead[m->n_dead++] = (int)(n - g->nodes); }

static int is_const(const fr_graph *g, int v, double want)
{
    double c;
    return fr_const_scalar(g, v, &c) && fabs(c - want) <= 1e-6 * fabs(want);
}

/* v's live producer when v is read once: an `op` with a constant `want` as one operand (the
 * other returned in *other); NULL otherwise. Div only as Div(other, want). */
static const fr_node *by_const(const fr_readers *c, int v, const char *op, double want, int *other)
{
    const fr_node *p = fr_live_producer(c->g, v);
    if (!p || c->count[v] != 1 || !fr_is_onnx_op(p, op) || p->n_inputs != 2) return NULL;
    for (int k = 0; k < 2; k++)
        if ((k == 1 || strcmp(op, "Div") != 0) && is_const(c->g, p->inputs[k], want)) {
            *other = p->inputs[1 - k];
            return p;
        }
    return NULL;
}

/* u = x / sqrt 2 (or x * (1 / sqrt 2)): x, else -1. */
static int erf_arg(const fr_readers *c, int u, match *m)
{
    int x;
    const fr_node *p = by_const(c, u, "Div", M_SQRT2, &x);
    if (!p) p = by_const(c, u, "Mul", M_SQRT1_2, &x);
    if (!p) return -1;
    kill(c->g, m, p);
    return x;
}

/* u = sqrt(2 / pi) (x + 0.044715 x^3): x, else -1. */
static int tanh_arg(const fr_readers *c, int u, match *m)
{
    const fr_graph *g = c->g;
    int s, cube;
    const fr_node *pk = by_const(c, u, "Mul", sqrt(2.0 / M_PI), &s);
    const fr_node *add = pk ? fr_live_producer(g, s) : NULL;
    if (!add || c->count[s] != 1 || !fr_is_onnx_op(add, "Add") || add->n_inputs != 2) return -1;
    for (int k = 0; k < 2; k++) {
        const int x = add->inputs[k];
        const fr_node *pc = by_const(c, add->inputs[1 - k], "Mul", 0.044715, &cube);
        const fr_node *pw = pc ? fr_live_producer(g, cube) : NULL;
        if (!pw || c->count[cube] != 1 || !fr_is_onnx_op(pw, "Pow") || pw->n_inputs != 2 || pw->inputs[0] != x ||
            !is_const(g, pw->inputs[1], 3.0))
            continue;
        kill(g, m, pk);
        kill(g, m, add);
        kill(g, m, pc);
        kill(g, m, pw);
        return x;
    }
    return -1;
}

/* From a = 1 + t to y = 0.5 x a in one of its three orders: y, else -1. */
static int half_x_times(const fr_readers *c, int a, int x, match *m)
{
    const fr_graph *g = c->g;
    const fr_node *r = fr_sole_reader(c, a);
    const int other = fr_binary_other(r, "Mul", a);
    if (other < 0 || other == a) return -1;
    kill(g, m, r);
    const int t = r->outputs[0];
    int h;
    if (other == x) { /* Mul(Mul(x, a), 0.5) */
        const fr_node *r2 = fr_sole_reader(c, t);
        const int k = fr_binary_other(r2, "Mul", t);
        if (k < 0 || !is_const(g, k, 0.5)) return -1;
        kill(g, m, r2);
        return r2->outputs[0];
    }
    if (is_const(g, other, 0.5)) { /* Mul(x, Mul(0.5, a)) */
        const fr_node *r2 = fr_sole_reader(c, t);
        if (fr_binary_other(r2, "Mul", t) != x) return -1;
        kill(g, m, r2);
        return r2->outputs[0];
    }
    const fr_node *ph = by_const(c, other, "Mul", 0.5, &h); /* Mul(Mul(x, 0.5), a) */
    if (!ph || h != x) return -1;
    kill(g, m, ph);
    return t;
}

static int match_at(void *ctx, int ti, void *mv)
{
    const fr_readers *c = ctx;
    match *m = mv;
    const fr_graph *g = c->g;
    const fr_node *t = &g->nodes[ti];
    memset(m, 0, sizeof *m);
    m->tanh = fr_is_onnx_op(t, "Tanh");
    if ((!m->tanh && !fr_is_onnx_op(t, "Erf")) || t->n_inputs != 1 || t->n_outputs != 1) return 0;
    m->x = m->tanh ? tanh_arg(c, t->inputs[0], m) : erf_arg(c, t->inputs[0], m);
    if (m->x < 0) return 0;
    kill(g, m, t);
    const int tv = t->outputs[0];
    const fr_node *add = fr_sole_reader(c, tv);
    const int one = fr_binary_other(add, "Add", tv);
    if (one < 0 || !is_const(g, one, 1.0)) return 0;
    kill(g, m, add);
    m->y = half_x_times(c, add->outputs[0], m->x, m);
    if (m->y < 0) return 0;
    const fr_value *X = &g->values[m->x], *Y = &g->values[m->y];
    return X->dtype == FR_F32 && Y->dtype == FR_F32 && X->rank >= 0 && fr_same_dims(X, Y);
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fr_readers *)ctx)->g;
    char base[600];
    fr_fuse_kill(g, m->dead, m->n_dead, "fused_gelu", base, sizeof base);
    int y = m->y, nid;
    FR_TRY(fr_graph_add_node(g, "Gelu", FR_DOMAIN_FP8RUN, base, 1, &m->x, 1, &y, &nid));
    FR_TRY(fr_node_set_attr_string(&g->nodes[nid], "approximate", m->tanh ? "tanh" : "none"));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_gelu(fr_graph *g, int *count)
{
    match m;
    return fr_fuse_on_readers(g, "GELU fusion", match_at, fuse_one, &m, count);
}
