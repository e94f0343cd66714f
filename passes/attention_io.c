/* Attention I/O fusion (see attention_io.h): from each fused Attention node, walk its Q, K, V
 * inputs back to one Split of the fused projection and its O forward to the tensor the output
 * projection reads, following each Reshape and Transpose as a strided view; when the views
 * are the packed layout AttentionQKV reads and writes, replace the whole region by it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/layout_plan.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "passes/attention_io.h"
#include "passes/passes.h"
#include "passes/pattern.h"

#define MAX_CHAIN 8 /* layout nodes per chain */
#define MAX_DEAD (3 * MAX_CHAIN + 2 + MAX_CHAIN + MAX_CHAIN + 3)

/* A tensor as a strided view of another (element strides from element off; size-1 dims carry
 * any stride). Transpose permutes a view; Reshape, Unsqueeze, Squeeze and Flatten reshape it to
 * their output's (inferred) dims; a Split output or a Slice narrows it. */
typedef struct view {
    int rank;
    int64_t dims[FR_MAX_RANK], strides[FR_MAX_RANK];
    int64_t off;
} view;

static void view_contiguous(view *v, int rank, const int64_t *dims)
{
    v->rank = rank;
    v->off = 0;
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        v->dims[k] = dims[k];
        v->strides[k] = s;
        s *= dims[k];
    }
}

/* v reshaped to dims (same element count): 0 when that is no strided view (dims merged that
 * are not laid out one inside the other). */
static int view_reshape(view *v, int nr, const int64_t *nd)
{
    int64_t od[FR_MAX_RANK], os[FR_MAX_RANK], ns[FR_MAX_RANK];
    int on = 0, i = 0, j = 0;
    for (int k = 0; k < v->rank; k++)
        if (v->dims[k] != 1) od[on] = v->dims[k], os[on++] = v->strides[k];
    while (j < nr) {
        if (nd[j] == 1) {
            ns[j++] = 0;
            continue;
        }
        if (i >= on) return 0;
        const int i0 = i, j0 = j;
        int64_t po = od[i++], pn = nd[j++];
        while (po != pn) {
            if (po < pn) {
                if (i >= on) return 0;
                po *= od[i++];
            } else {
                if (j >= nr) return 0;
                pn *= nd[j++];
            }
        }
        for (int a = i0; a + 1 < i; a++)
            if (os[a] != os[a + 1] * od[a + 1]) return 0;
        int64_t s = os[i - 1];
        for (int b = j - 1; b >= j0; b--) {
            ns[b] = s;
            s *= nd[b];
        }
    }
    if (i != on) return 0;
    v->rank = nr;
    for (int k = 0; k < nr; k++) v->dims[k] = nd[k], v->strides[k] = ns[k];
    return 1;
}

/* The permutation of a Transpose of rank r (default: reversed); 0 when malformed. */
static int perm_of(const fr_node *t, int r, int64_t *perm)
{
    const fr_attr *a = fr_node_attr(t, "perm");
    if (a && (a->type != FR_ATTR_INTS || a->n != r)) return 0;
    int seen[FR_MAX_RANK] = {0};
    for (int k = 0; k < r; k++) {
        perm[k] = a ? a->ints[k] : r - 1 - k;
        if (perm[k] < 0 || perm[k] >= r || seen[perm[k]]++) return 0;
    }
    return 1;
}

/* out = Transpose(in): forward (in's view known) or backward (out's view known). */
static int view_transpose(view *v, const fr_node *t, int forward)
{
    int64_t perm[FR_MAX_RANK];
    if (v->rank < 1 || !perm_of(t, v->rank, perm)) return 0;
    view w = *v;
    for (int k = 0; k < v->rank; k++) {
        if (forward) {
            w.dims[k] = v->dims[perm[k]], w.strides[k] = v->strides[perm[k]];
        } else {
            w.dims[perm[k]] = v->dims[k], w.strides[perm[k]] = v->strides[k];
        }
    }
    *v = w;
    return 1;
}

/* v is [B, heads.., T, width] of a [B, T, W] packed tensor: B at T W, T at W, the feature at 1,
 * the heads (product `heads`) row-major at *hs columns each (*hs -1: one head), from column
 * *off of each row. */
static int view_heads(const view *v, int64_t B, int64_t T, int64_t W, int64_t heads, int64_t width, int64_t *off,
                      int64_t *hs)
{
    const int r = v->rank;
    if (r < 3 || v->dims[0] != B || v->dims[r - 2] != T || v->dims[r - 1] != width) return 0;
    if ((B > 1 && v->strides[0] != T * W) || (T > 1 && v->strides[r - 2] != W) || (width > 1 && v->strides[r - 1] != 1))
        return 0;
    int64_t s = -1, n = 1;
    for (int k = r - 3; k >= 1; k--) {
        if (v->dims[k] == 1) continue;
        if (s < 0) s = v->strides[k];
        if (v->strides[k] != s * n) return 0;
        n *= v->dims[k];
    }
    if (n != heads || (n > 1 && s < width) || v->off < 0) return 0;
    *hs = n > 1 ? s : -1;
    *off = v->off;
    return 1;
}

/* v narrowed as Slice plan p takes it (steps multiply the strides). */
static void view_slice(view *v, const fr_slice_plan *p)
{
    for (int k = 0; k < v->rank; k++) {
        v->off += p->start[k] * v->strides[k];
        v->strides[k] *= p->step[k];
        v->dims[k] = p->len[k];
    }
}

typedef struct chain {
    int n, nodes[MAX_CHAIN]; /* producer order: nodes[0] reads the Split output */
    int rotary;              /* the Rotary node, -1: none */
    view at_rotary;          /* its input as a view of X */
    int norm;                /* the q/k RMSNormalization node (before the Rotary), -1: none */
    view at_norm;            /* its input as a view of X */
} chain;

typedef struct match {
    int attn, x, z, cos, sin, interleaved, flat_output;
    int split[3], n_split;      /* the Split, or the three Slices, that make Q, K and V */
    int pre[MAX_CHAIN], n_pre;  /* layout nodes from X to what they split */
    int by_head;                /* packing "heads" (GPT-NeoX's per-head q, k, v) */
    int64_t rd;                 /* rotary_dim: features of a head rotated */
    int wq, wk; /* the q/k norm weights (-1: no norm) */
    float eps;
    int seg_k, seg_q; /* the Attention's segment ids Sk, Sq (-1: absent), handed on */
    int64_t B, T, W, Hq, Hk, D, Dv;
    chain c[3];
    int n_out, out_nodes[MAX_CHAIN];
} match;

typedef struct ctx {
    fr_readers rd;
    char *why; /* fr_attention_io_why: the first reason a match fails (NULL: not asked) */
    size_t wn;
    int shape_only; /* (fr_attention_io_why) the layout alone: values may have more readers, as a
                       differentiated graph's have (its backward reads them) */
} ctx;

/* Records why a match failed (the first reason only) and yields `fail`. */
#define WHY(fail, ...) (cx->why && !cx->why[0] ? (snprintf(cx->why, cx->wn, __VA_ARGS__), (fail)) : (fail))

static int is_layout(const fr_node *n)
{
    static const char *const ops[] = {"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten"};
    if (!n || n->dead || n->domain[0] || n->n_outputs != 1 || n->n_inputs < 1) return 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(n->op_type, ops[i]) == 0) return 1;
    return 0;
}

/* RMSNormalization (ONNX's or fp8run's: passes/rmsnorm_fuse.h) with its Scale, one output */
static int is_norm(const fr_node *n)
{
    return n && !n->dead && (n->domain[0] == 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0) &&
           strcmp(n->op_type, "RMSNormalization") == 0 && n->n_inputs == 2 && n->inputs[1] >= 0 && n->n_outputs == 1;
}

static int is_rotary(const fr_node *n)
{
    return n && !n->dead && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0 && strcmp(n->op_type, "Rotary") == 0 &&
           n->n_inputs == 3 && n->n_outputs == 1;
}

/* Walk from Attention input v back to a Split output, filling c; returns the Split output. */
static int walk_back(const ctx *cx, int v, chain *c)
{
    const fr_graph *g = cx->rd.g;
    c->n = 0;
    c->rotary = c->norm = -1;
    int nodes[MAX_CHAIN];
    for (;;) {
        if (v < 0) return -1;
        if (cx->rd.count[v] != 1 && !cx->shape_only)
            return WHY(-1, "a value between the projection and it has another reader");
        const fr_node *p = fr_live_producer(g, v);
        if (!p) return WHY(-1, "Q, K or V is no projection's output");
        if (fr_is_onnx_op(p, "Split") || fr_is_onnx_op(p, "Slice")) break; /* (of the projection: find_source) */
        if (c->n == MAX_CHAIN) return WHY(-1, "more than %d layout nodes between the projection and it", MAX_CHAIN);
        if (!(is_layout(p) || is_rotary(p) || is_norm(p))) {
            if (strcmp(p->op_type, "Linear") == 0 || strcmp(p->op_type, "MatMul") == 0 ||
                strcmp(p->op_type, "Gemm") == 0)
                return WHY(-1, "Q, K and V come from separate projections, not one fused Q/K/V Linear and its Split");
            /* (no node name: the reason is the same for every layer) */
            return WHY(-1, "Q, K or V passes through a %s (the staging reads one Split, or three Slices, of the fused "
                       "projection through Reshape, Transpose, Rotary and RMSNormalization only)", p->op_type);
        }
        if (is_rotary(p)) {
            if (c->rotary >= 0) return WHY(-1, "two Rotary nodes on one input");
            c->rotary = (int)(p - g->nodes);
        }
        if (is_norm(p)) { /* met walking back: it must come before the Rotary (RoPE of normalized heads) */
            if (c->norm >= 0) return WHY(-1, "two RMSNormalization nodes on one input");
            c->norm = (int)(p - g->nodes);
        }
        nodes[c->n++] = (int)(p - g->nodes);
        v = p->inputs[0];
    }
    for (int i = 0; i < c->n; i++) c->nodes[i] = nodes[c->n - 1 - i];
    return v;
}

/* Elements of a value (its dims' product). */
static int64_t value_numel(const fr_value *v)
{
    int64_t n = 1;
    for (int k = 0; k < v->rank; k++) n *= v->dims[k];
    return n;
}

/* One layout node n (output y) applied to view v, checked against y's dims. */
static int view_step(const fr_node *n, const fr_value *y, view *v)
{
    if (strcmp(n->op_type, "Transpose") == 0) {
        if (!view_transpose(v, n, 1)) return 0;
    } else if (!view_reshape(v, y->rank, y->dims)) {
        return 0;
    }
    if (v->rank != y->rank) return 0;
    for (int k = 0; k < v->rank; k++)
        if (v->dims[k] != y->dims[k]) return 0;
    return 1;
}

/* The view of chain c's end, from its start *v (the Split or Slice output it reads, as a view
 * of X [B, T, W]; updated in place); the Rotary's input view recorded. */
static int walk_views(const fr_graph *g, chain *c, view *v)
{
    int seen_rotary = 0;
    for (int i = 0; i < c->n; i++) {
        const fr_node *n = &g->nodes[c->nodes[i]];
        const fr_value *y = &g->values[n->outputs[0]];
        if (is_rotary(n)) {
            c->at_rotary = *v;
            seen_rotary = 1;
            continue;
        }
        if (is_norm(n)) {
            if (seen_rotary) return 0; /* RoPE, then the norm: not what the op computes */
            c->at_norm = *v;
            continue;
        }
        if (!view_step(n, y, v)) return 0;
    }
    return 1;
}


/* The tables of Rotary r at input view v: they follow the token (row t at t D), the batch or
 * not (the op's leading dims), never the head; X's last dim the feature. */
static int rotary_ok(const fr_graph *g, const match *m, const fr_node *r, const view *v)
{
    const fr_value *x = &g->values[r->inputs[0]];
    if (x->rank != v->rank || x->dtype != FR_F32) return 0;
    int64_t xr[FR_MAX_RANK]; /* X's rotated columns: its first rd features */
    memcpy(xr, x->dims, sizeof(int64_t) * (size_t)x->rank);
    xr[x->rank - 1] = m->rd;
    for (int t = 1; t < 3; t++) {
        const fr_value *tb = &g->values[r->inputs[t]];
        if (tb->dtype != FR_F32 || tb->rank < 2 || tb->rank > x->rank) return 0;
        if (tb->dims[tb->rank - 1] != m->rd || tb->dims[tb->rank - 2] != m->T) return 0;
        for (int k = 0; k < tb->rank; k++) /* broadcasting that never enlarges X */
            if (tb->dims[k] != 1 && tb->dims[k] != xr[x->rank - tb->rank + k]) return 0;
        int64_t lead = 1;
        for (int k = 0; k + 2 < tb->rank; k++) lead *= tb->dims[k];
        if (lead != 1 && lead != m->B) return 0;
        const int64_t bst = lead == m->B && m->B > 1 ? m->T * m->rd : 0;
        int64_t cst[FR_MAX_RANK];
        fr_broadcast_strides(tb->rank, tb->dims, x->rank, xr, cst);
        for (int k = 0; k < x->rank; k++) {
            if (v->dims[k] == 1) continue;
            const int64_t s = v->strides[k];
            int64_t want;
            if (s == 1 && k == x->rank - 1)
                want = 1;
            else if (s == m->W && v->dims[k] == m->T)
                want = m->rd;
            else if (s == m->T * m->W && v->dims[k] == m->B)
                want = bst;
            else if (s >= m->D && s < m->W)
                want = 0; /* a head */
            else
                return 0;
            if (cst[k] != want) return 0;
        }
    }
    return 1;
}

/* The q/k RMSNormalization r of a section of `heads` heads, its input at view v of X: its rows
 * (the last axis only) are each head's D features (per head) or, on [B, T, heads D], each
 * token's section (full width), and its Scale a float32 vector of that length. Returns the
 * row length, 0 when it is neither; *eps its epsilon. */
static int64_t norm_ok(const fr_graph *g, const match *m, const fr_node *r, const view *v, int64_t heads, float *eps)
{
    const fr_value *x = &g->values[r->inputs[0]], *w = &g->values[r->inputs[1]];
    int64_t axis = -2;
    if (fr_node_attr_int(r, "axis", -1, &axis) != FR_OK || fr_node_attr_float(r, "epsilon", 1e-5f, eps) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    if (x->dtype != FR_F32 || w->dtype != FR_F32 || x->rank != v->rank || v->rank < 1) return 0;
    if (axis != -1 && axis != v->rank - 1) return 0;
    const int last = v->rank - 1;
    const int64_t len = v->dims[last];
    if ((len != m->D && len != heads * m->D) || (len > 1 && v->strides[last] != 1)) return 0;
    int64_t numel = 1;
    for (int k = 0; k < w->rank; k++) numel *= w->dims[k];
    if (w->rank < 1 || numel != len || w->dims[w->rank - 1] != len) return 0;
    for (int k = 0; k < last; k++) { /* every other dim steps whole rows: token, batch or head */
        if (v->dims[k] == 1) continue;
        const int64_t st = v->strides[k];
        const int ok = (st == m->W && v->dims[k] == m->T) || (st == m->T * m->W && v->dims[k] == m->B) ||
                       (len == m->D && st % m->D == 0 && st < m->W);
        if (!ok) return 0;
    }
    return len;
}

/* The RoPE tables of q and k are one: the same value, equal constants, or the same op on the
 * same inputs (the opset-23 RotaryEmbedding import stages each call's tables itself). */
static int same_table(const fr_graph *g, int a, int b)
{
    if (a == b) return 1;
    if (a < 0 || b < 0) return 0;
    const fr_value *va = &g->values[a], *vb = &g->values[b];
    if (va->dtype != vb->dtype || !fr_same_dims(va, vb)) return 0;
    if (va->constant && vb->constant) {
        const fr_tensor *ta = va->constant, *tb = vb->constant;
        return ta->nbytes == tb->nbytes && memcmp(ta->data, tb->data, ta->nbytes) == 0;
    }
    const fr_node *pa = fr_live_producer(g, a), *pb = fr_live_producer(g, b);
    if (!pa || !pb || strcmp(pa->op_type, pb->op_type) != 0 || strcmp(pa->domain, pb->domain) != 0 ||
        pa->n_inputs != pb->n_inputs || pa->n_outputs != 1 || pb->n_outputs != 1 ||
        strcmp(pa->op_type, "Unsqueeze") != 0 || fr_node_attr(pa, "axes") || fr_node_attr(pb, "axes"))
        return 0;
    for (int i = 0; i < pa->n_inputs; i++)
        if (!same_table(g, pa->inputs[i], pb->inputs[i])) return 0;
    return 1;
}

static int64_t attr_int(const fr_node *n, const char *name, int64_t dflt)
{
    int64_t v = dflt;
    if (fr_node_attr_int(n, name, dflt, &v) != FR_OK) return -1;
    return v;
}

/* What Q, K and V were split from (sv[i]: the Split or Slice outputs their chains start at):
 * one Split into three, or three Slices of one tensor (Phi-3's qkv_proj), reading X, the
 * projection's [B, T, W] output (B and T Q's), through layout nodes only (GPT-NeoX views it
 * [B, H, T, 3 D] first). Fills m->split, m->pre, m->x and start[i]: sv[i] as a view of X. */
static int find_source(const ctx *cx, match *m, const int *sv, int64_t B, int64_t T, view *start)
{
    const fr_graph *g = cx->rd.g;
    const fr_node *p[3];
    for (int i = 0; i < 3; i++) p[i] = fr_live_producer(g, sv[i]);
    if (sv[0] == sv[1] || sv[0] == sv[2] || sv[1] == sv[2])
        return WHY(0, "Q, K and V are not three parts of one projection");
    m->n_split = 0;
    if (p[0] == p[1] && p[1] == p[2] && fr_is_onnx_op(p[0], "Split")) {
        if (p[0]->n_outputs != 3) return WHY(0, "the projection's Split is not into Q, K and V alone");
        m->split[m->n_split++] = (int)(p[0] - g->nodes);
    } else if (fr_is_onnx_op(p[0], "Slice") && fr_is_onnx_op(p[1], "Slice") && fr_is_onnx_op(p[2], "Slice") &&
               p[0] != p[1] && p[1] != p[2] && p[0] != p[2] && p[0]->inputs[0] == p[1]->inputs[0] &&
               p[0]->inputs[0] == p[2]->inputs[0]) {
        for (int i = 0; i < 3; i++) m->split[m->n_split++] = (int)(p[i] - g->nodes);
    } else {
        return WHY(0, "Q, K and V come from different Splits (or Slices of different tensors)");
    }
    const int src = p[0]->inputs[0];
    if (src < 0) return 0;
    if (!cx->shape_only && cx->rd.count[src] != m->n_split)
        return WHY(0, "a value between the projection and it has another reader");
    /* back through layout nodes; X is the furthest [B, T, W] value on the way */
    int vals[MAX_CHAIN + 1], nodes[MAX_CHAIN], nv = 1, xi = -1;
    vals[0] = src;
    for (;;) {
        const fr_value *v = &g->values[vals[nv - 1]];
        if (v->rank == 3 && v->dims[0] == B && v->dims[1] == T) xi = nv - 1;
        const fr_node *l = fr_live_producer(g, vals[nv - 1]);
        if (!is_layout(l) || nv > MAX_CHAIN || l->inputs[0] < 0) break;
        if (nv > 1 && !cx->shape_only && cx->rd.count[vals[nv - 1]] != 1) break;
        nodes[nv - 1] = (int)(l - g->nodes);
        vals[nv++] = l->inputs[0];
    }
    if (xi < 0 || g->values[vals[xi]].dtype != FR_F32)
        return WHY(0, "the projection output is not a float32 [B, T, W] tensor");
    m->x = vals[xi];
    m->n_pre = xi;
    view w;
    view_contiguous(&w, 3, g->values[m->x].dims);
    for (int i = xi - 1; i >= 0; i--) { /* forward from X to src */
        m->pre[xi - 1 - i] = nodes[i];
        if (!view_step(&g->nodes[nodes[i]], &g->values[vals[i]], &w)) return 0;
    }
    if (m->n_split == 1) { /* the Split's outputs one after another along its axis */
        const fr_node *sp = p[0];
        int64_t a = attr_int(sp, "axis", 0), at = 0;
        if (a < 0) a += w.rank;
        if (a < 0 || a >= w.rank) return 0;
        for (int o = 0; o < 3; o++) {
            const fr_value *y = &g->values[sp->outputs[o]];
            int i = 0;
            while (i < 3 && sv[i] != sp->outputs[o]) i++;
            if (i == 3 || y->rank != w.rank) return WHY(0, "the projection's Split is not into Q, K and V alone");
            start[i] = w;
            start[i].dims[a] = y->dims[a];
            start[i].off += at * w.strides[a];
            at += y->dims[a];
        }
        return at == w.dims[a];
    }
    for (int i = 0; i < 3; i++) {
        fr_slice_plan pl;
        const fr_value *y = &g->values[sv[i]];
        if (!fr_pattern_slice_plan(g, p[i], &pl) || y->rank != w.rank)
            return WHY(0, "a Slice of the projection is not constant");
        start[i] = w;
        view_slice(&start[i], &pl);
        for (int k = 0; k < w.rank; k++)
            if (start[i].dims[k] != y->dims[k]) return 0;
    }
    return 1;
}

/* Attention's O forward through layout nodes to [B, T, Hq Dv]. */
static int walk_out(const ctx *cx, match *m, const fr_node *a)
{
    const fr_graph *g = cx->rd.g;
    int v = a->outputs[0], vals[MAX_CHAIN + 1], nodes[MAX_CHAIN], n = 0;
    vals[0] = v;
    for (;;) {
        const fr_node *r = fr_sole_reader(&cx->rd, v);
        if (!r && cx->shape_only) /* (a backward reads O too: follow its layout reader) */
            for (int k = 0; !r && k < 5; k++)
                r = fr_reader_op(&cx->rd, v, (const char *const[]){"Reshape", "Transpose", "Unsqueeze", "Squeeze",
                                                                   "Flatten"}[k]);
        if (!is_layout(r) || r->inputs[0] != v || n == MAX_CHAIN) break;
        nodes[n++] = (int)(r - g->nodes);
        v = r->outputs[0];
        vals[n] = v;
    }
    const int64_t N = m->Hq * m->Dv;
    while (n > 0) { /* the last value shaped [B, T, Hq Dv] or [B T, Hq Dv] ends the chain */
        const fr_value *z = &g->values[vals[n]];
        if (z->rank == 3 && z->dims[0] == m->B && z->dims[1] == m->T && z->dims[2] == N) break;
        if (z->rank == 2 && z->dims[0] == m->B * m->T && z->dims[1] == N) break;
        n--;
    }
    if (n == 0) return 0;
    const fr_value *z = &g->values[vals[n]];
    m->flat_output = z->rank == 2;
    view w;
    view_contiguous(&w, 3, (int64_t[]){m->B, m->T, N});
    for (int i = n - 1; i >= 0; i--) { /* back from Z: each node's input as a view of Z */
        const fr_node *nd = &g->nodes[nodes[i]];
        const fr_value *in = &g->values[vals[i]];
        if (strcmp(nd->op_type, "Transpose") == 0) {
            if (!view_transpose(&w, nd, 0)) return 0;
        } else if (!view_reshape(&w, in->rank, in->dims)) {
            return 0;
        }
    }
    int64_t off, hs;
    if (!view_heads(&w, m->B, m->T, m->Hq * m->Dv, m->Hq, m->Dv, &off, &hs) || off != 0 || (hs >= 0 && hs != m->Dv))
        return 0;
    m->z = vals[n];
    m->n_out = n;
    memcpy(m->out_nodes, nodes, sizeof(int) * (size_t)n);
    return 1;
}

static int match_at(void *cv, int ai, void *mv)
{
    const ctx *cx = cv;
    match *m = mv;
    const fr_graph *g = cx->rd.g;
    const fr_node *a = &g->nodes[ai];
    memset(m, 0, sizeof *m);
    if (a->dead || strcmp(a->domain, FR_DOMAIN_FP8RUN) != 0 || strcmp(a->op_type, "Attention") != 0) return 0;
    if (a->n_inputs < 3 || a->n_outputs < 1) return 0;
    if (a->n_inputs > 3 && a->inputs[3] >= 0)
        return WHY(0, "it reads an additive mask tensor (the staging takes causal and window masks only)");
    m->seg_k = a->n_inputs > 4 ? a->inputs[4] : -1;
    m->seg_q = a->n_inputs > 5 ? a->inputs[5] : -1;
    if (a->n_outputs > 1 && a->outputs[1] >= 0 && cx->rd.count[a->outputs[1]] != 0 && !cx->shape_only)
        return WHY(0, "its LSE output is read by the graph");
    int sv[3];
    for (int i = 0; i < 3; i++) {
        if (a->inputs[i] < 0 || (i > 0 && a->inputs[i] == a->inputs[0])) return 0;
        sv[i] = walk_back(cx, a->inputs[i], &m->c[i]);
        if (sv[i] < 0) return WHY(0, "?");
    }
    m->attn = ai;
    const fr_value *q = &g->values[a->inputs[0]], *k = &g->values[a->inputs[1]], *v = &g->values[a->inputs[2]];
    if (q->rank < 3 || k->rank < 3 || v->rank < 3) return 0;
    m->B = q->dims[0], m->T = q->dims[q->rank - 2];
    m->D = q->dims[q->rank - 1];
    m->Dv = v->dims[v->rank - 1];
    if (m->B < 1 || m->T < 1 || m->D < 1 || m->Dv < 1) return 0;
    view start[3];
    if (!find_source(cx, m, sv, m->B, m->T, start)) return WHY(0, "?");
    m->W = g->values[m->x].dims[2];
    const int64_t bt = m->B * m->T, nq = value_numel(q), nk = value_numel(k);
    if (nq % (bt * m->D) || nk % (bt * m->D)) return 0;
    m->Hq = nq / (bt * m->D), m->Hk = nk / (bt * m->D);
    if (m->Hk < 1 || m->Hq % m->Hk || value_numel(v) != bt * m->Hk * m->Dv) return 0;
    /* the three chains as views of X: [B, heads, T, width] from a column, heads hs apart */
    const int64_t heads[3] = {m->Hq, m->Hk, m->Hk}, width[3] = {m->D, m->D, m->Dv};
    int64_t off[3], hs[3];
    for (int i = 0; i < 3; i++)
        if (!walk_views(g, &m->c[i], &start[i]) ||
            !view_heads(&start[i], m->B, m->T, m->W, heads[i], width[i], &off[i], &hs[i]))
            return WHY(0, "its %s heads are not read from the projection as [B, heads, T, D] of its columns",
                       i == 0 ? "Q" : i == 1 ? "K" : "V");
    /* the packing: [Q | K | V] sections, or per-head [q k v] groups (hs -1: one head, any) */
    const int64_t G3 = 2 * m->D + m->Dv;
    const int sections = off[0] == 0 && off[1] == m->Hq * m->D && off[2] == (m->Hq + m->Hk) * m->D &&
                         (hs[0] < 0 || hs[0] == m->D) && (hs[1] < 0 || hs[1] == m->D) &&
                         (hs[2] < 0 || hs[2] == m->Dv) && m->W == (m->Hq + m->Hk) * m->D + m->Hk * m->Dv;
    const int by_head = m->Hq == m->Hk && off[0] == 0 && off[1] == m->D && off[2] == 2 * m->D &&
                        (hs[0] < 0 || hs[0] == G3) && (hs[1] < 0 || hs[1] == G3) && (hs[2] < 0 || hs[2] == G3) &&
                        m->W == m->Hq * G3;
    if (!sections && !by_head)
        return WHY(0, "its Q, K and V are neither [Q | K | V] sections of the projection nor per-head [q k v] groups");
    m->by_head = !sections;
    /* query head h reads K/V head h / G, the op's grouping */
    fr_attn_attrs at;
    fr_attn_geom geo;
    if (fr_attn_read_attrs(a, m->D, &at) != FR_OK ||
        fr_attn_geometry(a, q->rank, q->dims, k->rank, k->dims, v->rank, v->dims, at.causal, &geo) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    if (geo.batch != m->B * m->Hq || geo.kv_batch != m->B * m->Hk || geo.Tq != m->T || geo.Tk != m->T) return 0;
    for (int64_t i = 0; i < geo.batch; i++)
        if (fr_attn_kv_index(&geo, i) != (i / m->Hq) * m->Hk + (i % m->Hq) / (m->Hq / m->Hk)) return 0;
    /* RoPE: on q and k alike, or on neither; never on v */
    const int rq = m->c[0].rotary, rk = m->c[1].rotary;
    if (m->c[2].rotary >= 0 || (rq < 0) != (rk < 0)) return WHY(0, "RoPE is not on Q and K alike");
    m->cos = m->sin = -1;
    if (rq >= 0) {
        const fr_node *nq = &g->nodes[rq], *nk = &g->nodes[rk];
        if (!same_table(g, nq->inputs[1], nk->inputs[1]) || !same_table(g, nq->inputs[2], nk->inputs[2]))
            return WHY(0, "q and k read different RoPE tables");
        m->interleaved = (int)attr_int(nq, "interleaved", 0);
        if (m->interleaved != attr_int(nk, "interleaved", 0) || m->interleaved < 0) return 0;
        m->rd = attr_int(nq, "rotary_dim", m->D); /* a partial rotary: the first rd features */
        if (m->rd != attr_int(nk, "rotary_dim", m->D) || m->rd < 2 || m->rd > m->D || m->rd % 2)
            return WHY(0, "q and k rotate different numbers of features");
        if (!rotary_ok(g, m, nq, &m->c[0].at_rotary) || !rotary_ok(g, m, nk, &m->c[1].at_rotary))
            return WHY(0, "its RoPE tables are not [.., T, D] per token");
        m->cos = nq->inputs[1], m->sin = nq->inputs[2];
    }
    /* q/k RMSNorm: on q and k alike (the same epsilon), or on neither; never on v */
    const int nq_ = m->c[0].norm, nk_ = m->c[1].norm;
    m->wq = m->wk = -1;
    if (m->c[2].norm >= 0 || (nq_ < 0) != (nk_ < 0)) return WHY(0, "an RMSNorm on one of Q and K only (or on V)");
    if (nq_ >= 0 && (m->by_head || (m->cos >= 0 && m->rd < m->D)))
        return WHY(0, "its q/k RMSNorm comes with a per-head Q/K/V packing or a partial rotary (the staging takes "
                   "neither with the norm)");
    if (nq_ >= 0) {
        float eq, ek;
        const fr_node *q_ = &g->nodes[nq_], *k_ = &g->nodes[nk_];
        if (!norm_ok(g, m, q_, &m->c[0].at_norm, m->Hq, &eq) || !norm_ok(g, m, k_, &m->c[1].at_norm, m->Hk, &ek) ||
            eq != ek)
            return WHY(0, "its q/k RMSNorm is neither per head nor full width (or q and k differ in epsilon)");
        m->wq = q_->inputs[1], m->wk = k_->inputs[1], m->eps = eq;
    }
    if (!walk_out(cx, m, a))
        return WHY(0, "its O does not reach a [B, T, heads * Dv] tensor through Reshape and Transpose only");
    return 1;
}

static fr_status fuse_one(void *cv, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((ctx *)cv)->rd.g;
    int dead[MAX_DEAD], nd = 0;
    for (int i = 0; i < m->n_pre; i++) dead[nd++] = m->pre[i];
    for (int i = 0; i < m->n_split; i++) dead[nd++] = m->split[i];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < m->c[i].n; j++) dead[nd++] = m->c[i].nodes[j];
    for (int j = 0; j < m->n_out; j++) dead[nd++] = m->out_nodes[j];
    dead[nd++] = m->attn;
    char base[600], nm[700];
    fr_fuse_kill(g, dead, nd, "io", base, sizeof base);
    snprintf(nm, sizeof nm, "%s/lse", base);
    int lse;
    FR_TRY(fr_graph_add_unique_value(g, nm, &lse));
    int in[7] = {m->x, m->cos, m->sin, m->seg_k, m->seg_q, m->wq, m->wk}, out[2] = {m->z, lse}, nid;
    const int n_in = m->wq >= 0 ? 7 : m->seg_q >= 0 ? 5 : m->seg_k >= 0 ? 4 : m->cos >= 0 ? 3 : 1;
    FR_TRY(fr_graph_add_node(g, "AttentionQKV", FR_DOMAIN_FP8RUN, base, n_in, in, 2, out, &nid));
    const fr_node *a = &g->nodes[m->attn];
    fr_node *n = &g->nodes[nid];
    for (int i = 0; i < a->n_attrs; i++) { /* scale, causal, window, precision, softcap, seg_form */
        const fr_attr *at = &a->attrs[i];
        if (at->type == FR_ATTR_FLOAT)
            FR_TRY(fr_node_set_attr_float(n, at->name, at->f));
        else if (at->type == FR_ATTR_INT)
            FR_TRY(fr_node_set_attr_int(n, at->name, at->i));
        else if (at->type == FR_ATTR_STRING)
            FR_TRY(fr_node_set_attr_string(n, at->name, at->s));
    }
    FR_TRY(fr_node_set_attr_int(n, "heads", m->Hq));
    FR_TRY(fr_node_set_attr_int(n, "kv_heads", m->Hk));
    FR_TRY(fr_node_set_attr_int(n, "head_dim", m->D));
    if (m->interleaved) FR_TRY(fr_node_set_attr_int(n, "interleaved", 1));
    if (m->by_head) FR_TRY(fr_node_set_attr_string(n, "packing", "heads"));
    if (m->cos >= 0 && m->rd < m->D) FR_TRY(fr_node_set_attr_int(n, "rotary_dim", m->rd));
    if (m->flat_output) FR_TRY(fr_node_set_attr_int(n, "flat_output", 1));
    if (m->wq >= 0) FR_TRY(fr_node_set_attr_float(n, "qk_norm_eps", m->eps));
    return fr_node_infer(g, nid);
}

int fr_attention_io_why(const fr_graph *g, int node, char *why, size_t n)
{
    if (n) why[0] = 0;
    ctx c = {{(fr_graph *)g, NULL}, why, n, 1};
    if (fr_readers_refresh(&c.rd, "attention I/O check") != FR_OK) {
        fr_clear_error();
        snprintf(why, n, "out of memory");
        return 0;
    }
    match *m = malloc(sizeof *m);
    int ok = m ? match_at(&c, node, m) : 0;
    free(m);
    fr_readers_free(&c.rd);
    if (!ok && n && (!why[0] || strcmp(why, "?") == 0))
        snprintf(why, n, "its Q, K, V or O are not laid out as the staging reads them");
    return ok;
}

fr_status fr_fuse_attention_io(fr_graph *g, int *count)
{
    ctx c = {{g, NULL}, NULL, 0, 0};
    match m;
    fr_status st = fr_fuse_loop(&c.rd, "attention I/O fusion", match_at, fuse_one, &c, &m, count);
    fr_readers_free(&c.rd);
    return st;
}
