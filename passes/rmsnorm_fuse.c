/* RMSNorm fusion (see rmsnorm_fuse.h): from each ReduceMean, walk back to x and forward to
 * the scale Mul, check every step, replace the chain by one ai.fp8run::RMSNormalization. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/pattern.h"
#include "passes/rmsnorm_fuse.h"

typedef struct match {
    int x, w, y;
    float eps;
    int dead[8], n_dead;
} match;

static void kill(const fr_graph *g, match *m, const fr_node *n) { m->dead[m->n_dead++] = (int)(n - g->nodes); }

/* ReduceMean over the last axis only, keepdims=1 (axes as input from opset 18, else attribute). */
static int last_axis_mean(const fr_graph *g, const fr_node *n, int rank)
{
    if (!fr_is_onnx_op(n, "ReduceMean") || n->n_outputs != 1) return 0;
    int64_t keep;
    if (fr_node_attr_int(n, "keepdims", 1, &keep) != FR_OK || keep != 1) return 0;
    int cnt = 0;
    int64_t ax;
    if (n->n_inputs >= 2 && n->inputs[1] >= 0) {
        const fr_tensor *t = g->values[n->inputs[1]].constant;
        if (!t || !fr_dtype_is_int(t->dtype) || fr_tensor_numel(t) != 1) return 0;
        ax = fr_tensor_get_i64(t, 0);
    } else {
        const int64_t *v;
        if (fr_node_attr_ints(n, "axes", &cnt, &v) != FR_OK || cnt != 1) return 0;
        ax = v[0];
    }
    return ax == -1 || ax == rank - 1;
}

/* The square of x: Pow(x, 2) or Mul(x, x); x returned, -1 when not. */
static int square_of(const fr_graph *g, const fr_node *n)
{
    double e;
    if (fr_is_onnx_op(n, "Pow") && n->n_inputs == 2 && fr_const_scalar(g, n->inputs[1], &e) && e == 2.0) return n->inputs[0];
    if (fr_is_onnx_op(n, "Mul") && n->n_inputs == 2 && n->inputs[0] == n->inputs[1]) return n->inputs[0];
    return -1;
}

/* From r = 1 / sqrt(ms + eps) (or its division form) to n = x * r: n's node, NULL when not. */
static const fr_node *normalized(const fr_readers *c, const fr_node *add, int x, match *m)
{
    const fr_graph *g = c->g;
    const int a = add->outputs[0];
    const fr_node *s = fr_sole_reader(c, a);
    if (!s) return NULL;
    double e;
    if (fr_is_onnx_op(s, "Pow") && s->n_inputs == 2 && s->inputs[0] == a) { /* (ms + eps)^-0.5 */
        if (!fr_const_scalar(g, s->inputs[1], &e) || e != -0.5) return NULL;
        kill(g, m, s);
        const fr_node *mul = fr_sole_reader(c, s->outputs[0]);
        if (fr_binary_other(mul, "Mul", s->outputs[0]) != x) return NULL;
        return mul;
    }
    if (!fr_is_onnx_op(s, "Sqrt") || s->n_inputs != 1 || s->n_outputs != 1) return NULL;
    kill(g, m, s);
    const int sv = s->outputs[0];
    const fr_node *r = fr_sole_reader(c, sv);
    if (!r || r->n_outputs != 1) return NULL;
    if (fr_is_onnx_op(r, "Div") && r->n_inputs == 2 && r->inputs[1] == sv) {
        if (r->inputs[0] == x) return r; /* x / s */
        if (!fr_const_scalar(g, r->inputs[0], &e) || e != 1.0) return NULL;
    } else if (!fr_is_onnx_op(r, "Reciprocal") || r->n_inputs != 1) {
        return NULL;
    }
    kill(g, m, r);
    const fr_node *mul = fr_sole_reader(c, r->outputs[0]);
    if (fr_binary_other(mul, "Mul", r->outputs[0]) != x) return NULL;
    return mul;
}

/* w broadcasts to X without enlarging it. */
static int scale_ok(const fr_value *W, const fr_value *X)
{
    if (W->dtype != FR_F32 || W->rank > X->rank) return 0;
    for (int k = 0; k < W->rank; k++) {
        int64_t wd = W->dims[W->rank - 1 - k], xd = X->dims[X->rank - 1 - k];
        if (wd != xd && wd != 1) return 0;
    }
    return 1;
}

static int match_at(void *ctx, int ri, void *mv)
{
    const fr_readers *c = ctx;
    match *m = mv;
    const fr_graph *g = c->g;
    const fr_node *rm = &g->nodes[ri];
    memset(m, 0, sizeof *m);
    if (!fr_is_onnx_op(rm, "ReduceMean") || rm->n_inputs < 1) return 0;
    const fr_node *sq = fr_live_producer(g, rm->inputs[0]);
    if (!sq || c->count[rm->inputs[0]] != 1 || (m->x = square_of(g, sq)) < 0) return 0;
    const fr_value *X = &g->values[m->x];
    if (X->dtype != FR_F32 || X->rank < 1 || !last_axis_mean(g, rm, X->rank)) return 0;
    kill(g, m, sq);
    kill(g, m, rm);
    const int ms = rm->outputs[0];
    const fr_node *add = fr_sole_reader(c, ms);
    const int ev = fr_binary_other(add, "Add", ms);
    double eps;
    if (ev < 0 || !fr_const_scalar(g, ev, &eps) || !(eps >= 0)) return 0;
    m->eps = (float)eps;
    kill(g, m, add);
    const fr_node *nn = normalized(c, add, m->x, m);
    if (!nn) return 0;
    kill(g, m, nn);
    const int nv = nn->outputs[0];
    const fr_node *mw = fr_sole_reader(c, nv);
    m->w = fr_binary_other(mw, "Mul", nv);
    if (m->w < 0 || m->w == nv) return 0;
    m->y = mw->outputs[0];
    if (!scale_ok(&g->values[m->w], X) || !fr_same_dims(&g->values[nv], X) || !fr_same_dims(&g->values[m->y], X) ||
        g->values[m->y].dtype != FR_F32)
        return 0;
    kill(g, m, mw);
    return 1;
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fr_readers *)ctx)->g;
    char base[600];
    fr_fuse_kill(g, m->dead, m->n_dead, "fused_rmsnorm", base, sizeof base);
    int in[2] = {m->x, m->w}, y = m->y, nid;
    FR_TRY(fr_graph_add_node(g, "RMSNormalization", FR_DOMAIN_FP8RUN, base, 2, in, 1, &y, &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_TRY(fr_node_set_attr_float(&g->nodes[nid], "epsilon", m->eps));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_rmsnorm(fr_graph *g, int *count)
{
    match m;
    return fr_fuse_on_readers(g, "RMSNorm fusion", match_at, fuse_one, &m, count);
}
