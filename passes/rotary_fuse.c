/* Rotary fusion (see rotary_fuse.h): from each Concat, walk back to the halves of x and
 * forward through the Muls to the Add, check every step, replace the pattern by one
 * ai.fp8run::Rotary node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/layout_plan.h"
#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/pattern.h"
#include "passes/rotary_fuse.h"

typedef struct fuse_ctx {
    fr_readers rd;
    char *needs_grad; /* per value: a trainable parameter is upstream */
    int widened;      /* partial rotaries made around a Rotary this pass did not make (imported) */
} fuse_ctx;

/* needs_grad: FR_VAL_PARAM values and everything computed from them (to a fixed point, so the
 * node order does not matter). */
static fr_status mark_needs_grad(fuse_ctx *c)
{
    fr_graph *g = c->rd.g;
    c->needs_grad = fr_calloc((size_t)g->n_values + 1, 1, "rotary fusion");
    if (!c->needs_grad) return FR_ERR_OOM;
    for (int i = 0; i < g->n_values; i++) c->needs_grad[i] = (g->values[i].flags & FR_VAL_PARAM) != 0;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const fr_node *n = &g->nodes[i];
            int any = 0;
            for (int k = 0; k < n->n_inputs && !any; k++) any = n->inputs[k] >= 0 && c->needs_grad[n->inputs[k]];
            for (int k = 0; any && k < n->n_outputs; k++)
                if (n->outputs[k] >= 0 && !c->needs_grad[n->outputs[k]]) c->needs_grad[n->outputs[k]] = changed = 1;
        }
    }
    return FR_OK;
}

/* A Slice of x on the last axis only (constant inputs): 1 with its start, length and step on
 * that axis; 0 when the node is no such Slice. */
static int last_axis_slice(const fr_graph *g, const fr_node *n, int x, int64_t *start, int64_t *len, int64_t *step)
{
    fr_slice_plan p;
    if (!fr_is_onnx_op(n, "Slice") || n->n_outputs != 1 || n->inputs[0] != x || !fr_pattern_slice_plan(g, n, &p))
        return 0;
    const fr_value *X = &g->values[x];
    const int r = X->rank;
    for (int k = 0; k < r - 1; k++)
        if (p.start[k] != 0 || p.step[k] != 1 || p.len[k] != X->dims[k]) return 0;
    *start = p.start[r - 1], *len = p.len[r - 1], *step = p.step[r - 1];
    return 1;
}

/* Where a Slice of x on the last axis only takes h = hd / 2 elements with step `step`
 * (constant inputs): its start; -1 when the node is no such Slice. */
static int64_t last_axis_slice_start(const fr_graph *g, const fr_node *n, int x, int64_t step)
{
    int64_t st, len, sp;
    if (!last_axis_slice(g, n, x, &st, &len, &sp)) return -1;
    return sp == step && len == g->values[x].dims[g->values[x].rank - 1] / 2 ? st : -1;
}

/* Axis attribute of a node, normalized against rank (-1 when bad). */
static int norm_axis(const fr_node *n, int rank)
{
    int64_t a;
    if (fr_node_attr_int(n, "axis", 0, &a) != FR_OK) return -1;
    if (a < 0) a += rank;
    return a >= 0 && a < rank ? (int)a : -1;
}

/* cos or sin: float32, broadcasting to x's shape without enlarging it, needing no gradient. */
static int table_ok(const fuse_ctx *c, int t, int x)
{
    const fr_value *T = &c->rd.g->values[t], *X = &c->rd.g->values[x];
    if (t == x || c->needs_grad[t] || T->dtype != FR_F32 || T->rank > X->rank) return 0;
    for (int k = 0; k < T->rank; k++) {
        int64_t td = T->dims[T->rank - 1 - k], xd = X->dims[X->rank - 1 - k];
        if (td != xd && td != 1) return 0;
    }
    return 1;
}

typedef struct match {
    int x, cos, sin, y, interleaved;
    int dead[10], n_dead;
} match;

/* The halves (x1, x2) of x: two Slices, or one Split; their nodes appended to m->dead. */
static int halves(const fuse_ctx *c, int x1, int x2, match *m)
{
    const fr_graph *g = c->rd.g;
    const fr_node *p1 = fr_live_producer(g, x1), *p2 = fr_live_producer(g, x2);
    if (!p1 || !p2 || c->rd.count[x1] != 1 || c->rd.count[x2] != 1) return 0;
    if (p1 == p2) { /* Split(x) -> (x1, x2) */
        if (!fr_is_onnx_op(p1, "Split") || p1->n_outputs != 2 || p1->outputs[0] != x1 || p1->outputs[1] != x2) return 0;
        const int x = p1->inputs[0];
        const fr_value *X = &g->values[x], *A = &g->values[x1], *B = &g->values[x2];
        if (X->rank < 1 || norm_axis(p1, X->rank) != X->rank - 1 || !fr_same_dims(A, B) || A->rank != X->rank ||
            2 * A->dims[A->rank - 1] != X->dims[X->rank - 1])
            return 0;
        m->x = x;
        m->dead[m->n_dead++] = (int)(p1 - g->nodes);
        return 1;
    }
    const int x = p1->inputs[0];
    if (x < 0 || g->values[x].rank < 1) return 0;
    if (last_axis_slice_start(g, p1, x, 1) != 0 || last_axis_slice_start(g, p2, x, 1) != g->values[x].dims[g->values[x].rank - 1] / 2)
        return 0;
    m->x = x;
    m->dead[m->n_dead++] = (int)(p1 - g->nodes);
    m->dead[m->n_dead++] = (int)(p2 - g->nodes);
    return 1;
}

/* rotate_half: rot = Concat(Neg(x2), x1) on the last axis; node ci is the Concat. */
static int rotate_half(const fuse_ctx *c, int ci, match *m)
{
    const fr_graph *g = c->rd.g;
    const fr_node *cat = &g->nodes[ci];
    if (!fr_is_onnx_op(cat, "Concat") || cat->n_inputs != 2 || cat->n_outputs != 1) return 0;
    const fr_value *R = &g->values[cat->outputs[0]];
    if (R->rank < 1 || R->dims[R->rank - 1] % 2 || norm_axis(cat, R->rank) != R->rank - 1) return 0;
    const fr_node *neg = fr_live_producer(g, cat->inputs[0]);
    if (!neg || !fr_is_onnx_op(neg, "Neg") || neg->n_inputs != 1 || c->rd.count[cat->inputs[0]] != 1) return 0;
    if (!halves(c, cat->inputs[1], neg->inputs[0], m)) return 0;
    m->dead[m->n_dead++] = (int)(neg - g->nodes);
    m->dead[m->n_dead++] = ci;
    return 1;
}

/* v = Unsqueeze(u) on a new last axis, v read once: u; else -1. */
static int unsqueezed_last(const fuse_ctx *c, int v, match *m)
{
    const fr_graph *g = c->rd.g;
    const fr_node *n = fr_live_producer(g, v);
    if (!n || c->rd.count[v] != 1 || !fr_is_onnx_op(n, "Unsqueeze") || n->n_outputs != 1) return -1;
    int cnt;
    int64_t ax[FR_MAX_RANK];
    const int64_t *av;
    if (n->n_inputs >= 2) {
        if (!fr_pattern_const_ints(g, n, 1, &cnt, ax) || cnt != 1) return -1;
    } else {
        if (fr_node_attr_ints(n, "axes", &cnt, &av) != FR_OK || cnt != 1) return -1;
        ax[0] = av[0];
    }
    const int r = g->values[v].rank;
    if (ax[0] != -1 && ax[0] != r - 1) return -1;
    m->dead[m->n_dead++] = (int)(n - g->nodes);
    return n->inputs[0];
}

/* rotate_every_two (GPT-J): rot = Reshape(Concat(Unsqueeze(Neg(x2)), Unsqueeze(x1)) on a new
 * last axis) to x's shape, x1 = x[..., 0::2], x2 = x[..., 1::2]; node ri is the Reshape. */
static int rotate_pairs(const fuse_ctx *c, int ri, match *m)
{
    const fr_graph *g = c->rd.g;
    const fr_node *rs = &g->nodes[ri];
    if (!fr_is_onnx_op(rs, "Reshape") || rs->n_inputs < 1 || rs->n_outputs != 1) return 0;
    const int st = rs->inputs[0];
    const fr_node *cat = fr_live_producer(g, st);
    if (!cat || c->rd.count[st] != 1 || !fr_is_onnx_op(cat, "Concat") || cat->n_inputs != 2 || cat->n_outputs != 1) return 0;
    const fr_value *S = &g->values[st];
    if (S->rank < 2 || S->dims[S->rank - 1] != 2 || norm_axis(cat, S->rank) != S->rank - 1) return 0;
    const int nx = unsqueezed_last(c, cat->inputs[0], m), x1 = unsqueezed_last(c, cat->inputs[1], m);
    const fr_node *neg = nx >= 0 ? fr_live_producer(g, nx) : NULL;
    if (x1 < 0 || !neg || c->rd.count[nx] != 1 || !fr_is_onnx_op(neg, "Neg") || neg->n_inputs != 1) return 0;
    const int x2 = neg->inputs[0];
    const fr_node *p1 = fr_live_producer(g, x1), *p2 = fr_live_producer(g, x2);
    if (!p1 || !p2 || c->rd.count[x1] != 1 || c->rd.count[x2] != 1) return 0;
    m->x = p1->inputs[0];
    if (m->x < 0 || g->values[m->x].rank < 1 || last_axis_slice_start(g, p1, m->x, 2) != 0 ||
        last_axis_slice_start(g, p2, m->x, 2) != 1)
        return 0;
    m->interleaved = 1;
    m->dead[m->n_dead++] = (int)(p1 - g->nodes);
    m->dead[m->n_dead++] = (int)(p2 - g->nodes);
    m->dead[m->n_dead++] = (int)(neg - g->nodes);
    m->dead[m->n_dead++] = (int)(cat - g->nodes);
    m->dead[m->n_dead++] = ri;
    return 1;
}

static int match_at(void *ctx, int ci, void *mv)
{
    const fuse_ctx *c = ctx;
    match *m = mv;
    const fr_graph *g = c->rd.g;
    memset(m, 0, sizeof *m);
    if (!rotate_half(c, ci, m)) {
        memset(m, 0, sizeof *m);
        if (!rotate_pairs(c, ci, m)) return 0;
    }
    const int rot = g->nodes[ci].outputs[0];
    const fr_value *R = &g->values[rot], *X = &g->values[m->x];
    if (R->dtype != FR_F32 || X->dtype != FR_F32 || !fr_same_dims(X, R) || X->dims[X->rank - 1] % 2) return 0;
    /* Mul(rot, sin) read only by Add(., Mul(x, cos)) */
    const fr_node *ms = fr_sole_reader(&c->rd, rot);
    m->sin = fr_binary_other(ms, "Mul", rot);
    if (m->sin < 0 || m->sin == rot) return 0;
    const int t2 = ms->outputs[0];
    const fr_node *add = fr_sole_reader(&c->rd, t2);
    const int t1 = fr_binary_other(add, "Add", t2);
    if (t1 < 0 || t1 == t2 || c->rd.count[t1] != 1) return 0;
    const fr_node *mc = fr_live_producer(g, t1);
    m->cos = fr_binary_other(mc, "Mul", m->x);
    if (m->cos < 0) return 0;
    m->y = add->outputs[0];
    if (!table_ok(c, m->cos, m->x) || !table_ok(c, m->sin, m->x)) return 0;
    const int vals[3] = {t1, t2, m->y};
    for (int i = 0; i < 3; i++)
        if (g->values[vals[i]].dtype != FR_F32 || !fr_same_dims(&g->values[vals[i]], X)) return 0;
    m->dead[m->n_dead++] = (int)(ms - g->nodes);
    m->dead[m->n_dead++] = (int)(mc - g->nodes);
    m->dead[m->n_dead++] = (int)(add - g->nodes);
    return 1;
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fuse_ctx *)ctx)->rd.g;
    char base[600];
    fr_fuse_kill(g, m->dead, m->n_dead, "fused_rotary", base, sizeof base);
    int in[3] = {m->x, m->cos, m->sin}, y = m->y, nid;
    FR_TRY(fr_graph_add_node(g, "Rotary", FR_DOMAIN_FP8RUN, base, 3, in, 1, &y, &nid));
    if (m->interleaved) FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "interleaved", 1));
    return fr_node_infer(g, nid);
}

/* ---- the partial rotary: Concat(Rotary(x[..., :R]), x[..., R:]) -> Rotary(x, rotary_dim R) ---- */

typedef struct partial {
    int x, rot, y;   /* x, the Rotary node, the Concat's output */
    int64_t rd;
    int dead[4], n_dead;
} partial;

static int match_partial(void *ctx, int ci, void *mv)
{
    const fuse_ctx *c = ctx;
    partial *m = mv;
    const fr_graph *g = c->rd.g;
    const fr_node *cat = &g->nodes[ci];
    memset(m, 0, sizeof *m);
    if (!fr_is_onnx_op(cat, "Concat") || cat->n_inputs != 2 || cat->n_outputs != 1) return 0;
    const fr_value *Y = &g->values[cat->outputs[0]];
    if (Y->rank < 1 || norm_axis(cat, Y->rank) != Y->rank - 1 || Y->dtype != FR_F32) return 0;
    const int ry = cat->inputs[0], xp = cat->inputs[1];
    const fr_node *rot = fr_live_producer(g, ry), *ps = fr_live_producer(g, xp);
    if (!rot || !ps || c->rd.count[ry] != 1 || c->rd.count[xp] != 1 || strcmp(rot->op_type, "Rotary") != 0 ||
        strcmp(rot->domain, FR_DOMAIN_FP8RUN) != 0 || rot->n_inputs != 3 || fr_node_attr(rot, "rotary_dim"))
        return 0;
    const int xr = rot->inputs[0];
    if (c->needs_grad[rot->inputs[1]] || c->needs_grad[rot->inputs[2]]) return 0; /* (as the whole one's) */
    const fr_node *rs = fr_live_producer(g, xr);
    if (!rs || c->rd.count[xr] != 1 || rs->n_inputs < 1) return 0;
    const int x = rs->inputs[0];
    if (x < 0 || !fr_same_dims(&g->values[x], Y) || g->values[x].dtype != FR_F32) return 0;
    const int64_t hd = Y->dims[Y->rank - 1];
    int64_t s0, l0, p0, s1, l1, p1;
    if (!last_axis_slice(g, rs, x, &s0, &l0, &p0) || !last_axis_slice(g, ps, x, &s1, &l1, &p1)) return 0;
    if (s0 != 0 || p0 != 1 || s1 != l0 || p1 != 1 || l0 + l1 != hd || l0 < 2 || l1 < 1) return 0;
    m->x = x, m->rot = (int)(rot - g->nodes), m->y = cat->outputs[0], m->rd = l0;
    m->dead[m->n_dead++] = (int)(rs - g->nodes);
    m->dead[m->n_dead++] = (int)(ps - g->nodes);
    m->dead[m->n_dead++] = m->rot;
    m->dead[m->n_dead++] = ci;
    return 1;
}

static fr_status fuse_partial(void *ctx, const void *mv)
{
    const partial *m = mv;
    fr_graph *g = ((fuse_ctx *)ctx)->rd.g;
    const fr_node *rot = &g->nodes[m->rot];
    int in[3] = {m->x, rot->inputs[1], rot->inputs[2]}, y = m->y, nid;
    int64_t il;
    FR_TRY(fr_node_attr_int(rot, "interleaved", 0, &il));
    const size_t nl = strlen(rot->name), sl = strlen("/fused_rotary");
    if (nl < sl || strcmp(rot->name + nl - sl, "/fused_rotary") != 0) ((fuse_ctx *)ctx)->widened++;
    char base[600];
    fr_fuse_kill(g, m->dead, m->n_dead, "partial_rotary", base, sizeof base);
    FR_TRY(fr_graph_add_node(g, "Rotary", FR_DOMAIN_FP8RUN, base, 3, in, 1, &y, &nid));
    if (il) FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "interleaved", 1));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", m->rd));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_rotary(fr_graph *g, int *count)
{
    fuse_ctx c = {{g, NULL}, NULL, 0};
    match m;
    partial pm;
    int partials = 0;
    *count = 0;
    fr_status st = mark_needs_grad(&c);
    if (st == FR_OK) st = fr_fuse_loop(&c.rd, "rotary fusion", match_at, fuse_one, &c, &m, count);
    /* then the partial rotaries around Rotary nodes: those made just now (counted once, above)
       and those an import made (opset 23's RotaryEmbedding: counted here) */
    if (st == FR_OK) st = fr_fuse_loop(&c.rd, "rotary fusion", match_partial, fuse_partial, &c, &pm, &partials);
    *count += c.widened;
    fr_readers_free(&c.rd);
    free(c.needs_grad);
    return st;
}
