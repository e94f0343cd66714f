/* Attention fusion (see attention_fuse.h): find Softmax nodes, walk to the MatMul(P, V) that
 * reads the probabilities and back to the MatMul(Q, KT) that made the scores, check every
 * step, then replace the chain by one ai.fp8run::Attention node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/attention_fuse.h"
#include "passes/attention_emit.h"
#include "passes/attention_mask.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/pattern.h"

/* A masked score is at or below this (float32 finfo.min, -inf, -1e30 all qualify). */
#define MASKED_MAX (-1e30)
/* Masks that preparation left unfolded for their size (a [T, T] mask passes its cap from
 * T = 1025 on) are folded here to be checked, up to this many elements (T = 8192). */
#define MASK_FOLD_MAX ((int64_t)1 << 26)

static int is_f32(const fr_graph *g, int v) { return v >= 0 && g->values[v].dtype == FR_F32; }

/* A Cast that changes nothing (float32 to float32). */
static int noop_cast(const fr_graph *g, const fr_node *n)
{
    int64_t to;
    return fr_is_onnx_op(n, "Cast") && n->n_inputs == 1 && is_f32(g, n->inputs[0]) && n->n_outputs == 1 &&
           fr_node_attr_int(n, "to", 0, &to) == FR_OK && to == FR_F32;
}

static int const_scalar(const fr_graph *g, int v, double *x)
{
    const fr_tensor *t = v >= 0 ? g->values[v].constant : NULL;
    if (!t || !fr_dtype_is_float(t->dtype) || fr_tensor_numel(t) != 1) return 0;
    *x = fr_tensor_get_f64(t, 0);
    return 1;
}


/* A run-time mask x for scores sv: float32, broadcastable to them (Tq or 1, Tk or 1, batch dims
 * equal or 1). Fully masked rows (-inf) then give 0, as the exporter's guard (required) does. */
static int runtime_mask_ok(const fr_graph *g, int x, const fr_value *sv)
{
    const fr_value *mv = &g->values[x];
    if (!is_f32(g, x) || mv->rank < 2 || mv->rank > sv->rank) return 0;
    for (int d = 0; d < mv->rank; d++) {
        const int64_t sd = sv->dims[sv->rank - mv->rank + d];
        if (mv->dims[d] != sd && mv->dims[d] != 1) return 0;
    }
    return 1;
}

/* What one match found. */
typedef struct match match;
static int runtime_symbolic(const fr_graph *g, const fr_node *n, int boolean, const fr_value *sv, match *m);

struct match {
    int q, kt, v, o;
    double scale;
    int causal, guarded; /* guarded: the IsNaN/Where guard was there */
    int mask;            /* a run-time additive mask input, or -1 */
    int seg;             /* the key padding input read symbolically (the fused op's Sk), or -1 */
    int64_t window;
    double softcap;       /* c of c * tanh(s / c) on the scores (Gemma 2), 0: none */
    fr_attn_mask_info mi; /* a run-time mask read symbolically: what it is, or why not */
    int mask_runtime;     /* 1: the mask was computed at run time (mi says how it was taken) */
    int dead[32]; /* nodes replaced */
    int n_dead;
    int rewire_node, rewire_from; /* a scale taken from below Q's layout: that node's input is */
    int rewire_to;                /* rewire_from, and becomes rewire_to (-1: none) */
};

/* The mask node n (Add(S, M): additive; Where(C, S, lowest): boolean) with its mask computed at
 * run time, read symbolically (attention_mask.h): causal / window / key padding into m, and
 * the mask's input slot returned; else -1 with the reason in m->mi. An Add's first operand is
 * tried too (either may be the scores). The chain's nodes go with dead-node elimination once
 * nothing reads them. */
static int runtime_symbolic(const fr_graph *g, const fr_node *n, int boolean, const fr_value *sv, match *m)
{
    m->mask_runtime = 1;
    int slot = boolean ? 0 : 1;
    int kind = fr_attn_mask_symbolic(g, n->inputs[slot], boolean, sv, &m->mi);
    if (kind == FR_ATTN_MASK_BAD && !boolean) {
        fr_attn_mask_info other;
        if (fr_attn_mask_symbolic(g, n->inputs[0], 0, sv, &other) != FR_ATTN_MASK_BAD) {
            m->mi = other;
            kind = other.kind;
            slot = 0;
        }
    }
    if (kind == FR_ATTN_MASK_BAD) return -1;
    m->causal = kind == FR_ATTN_MASK_CAUSAL;
    m->window = m->mi.window;
    m->seg = m->mi.seg;
    return slot;
}

static void add_dead(match *m, const fr_graph *g, const fr_node *n) { m->dead[m->n_dead++] = (int)(n - g->nodes); }

/* x scaled by a constant scalar (fr_match_scalar_scale): folds it into m->scale, marks the
 * node replaced and returns the unscaled value; else returns x. */
static int peel_scale(const fr_readers *c, int x, match *m)
{
    double f;
    int nd;
    const int y = m->n_dead >= 20 ? -1 : fr_match_scalar_scale(c, x, &f, &nd);
    if (y < 0) return x;
    m->scale *= f;
    m->dead[m->n_dead++] = nd;
    return y;
}

/* x scaled below a head split (fr_match_scale_below_layout): folds the scale into m->scale,
 * marks the Mul replaced and records that the layout node is to read the unscaled value;
 * returns x (whose data then is unscaled), or x unchanged with nothing done. */
static int peel_scale_below_layout(const fr_readers *c, int x, match *m)
{
    double f;
    int nd, lay;
    const int y = m->n_dead >= 20 ? -1 : fr_match_scale_below_layout(c, x, &f, &nd, &lay);
    if (y < 0) return x;
    m->scale *= f;
    m->dead[m->n_dead++] = nd;
    m->rewire_node = lay;
    m->rewire_from = c->g->nodes[lay].inputs[0];
    m->rewire_to = y;
    return x;
}

/* The scores' softcap (fr_match_softcap; the scores read once): sets m->softcap, marks the
 * three nodes replaced and returns the uncapped scores; else returns x. */
static int peel_softcap(const fr_readers *c, int x, match *m)
{
    double cap;
    int nodes[3];
    const int y = c->count[x] != 1 || m->n_dead >= 11 ? -1 : fr_match_softcap(c, x, &cap, nodes);
    if (y < 0) return x;
    m->softcap = cap;
    for (int i = 0; i < 3; i++) m->dead[m->n_dead++] = nodes[i];
    return y;
}

/* Walk back from the softmax input through casts, the mask, the softcap and the scale to the
 * scores' MatMul; fills m. Every value passed must have the node after it as only reader. */
static int match_scores(const fr_readers *c, int x, match *m)
{
    const fr_graph *g = c->g;
    int mask_seen = 0, scale_seen = 0, cap_seen = 0;
    const fr_value *sv = &g->values[x];
    const int64_t Tq = sv->rank >= 2 ? sv->dims[sv->rank - 2] : -1, Tk = sv->rank >= 2 ? sv->dims[sv->rank - 1] : -1;
    for (int steps = 0; steps < 8; steps++) {
        const fr_node *n = fr_live_producer(g, x);
        if (!n || c->count[x] != 1 || !is_f32(g, x) || m->n_dead >= 14) return 0;
        if (noop_cast(g, n)) {
            add_dead(m, g, n);
            x = n->inputs[0];
            continue;
        }
        if (!mask_seen && !scale_seen && !cap_seen && fr_is_onnx_op(n, "Add") && n->n_inputs == 2) {
            int k = g->values[n->inputs[0]].constant ? 0 : 1; /* the constant side, else the second */
            const fr_value *mv = &g->values[n->inputs[k]];
            const int sym = mv->constant ? -1 : runtime_symbolic(g, n, 0, sv, m);
            if (sym >= 0) k = sym; /* the side read as the mask */
            const fr_value *other = &g->values[n->inputs[1 - k]];
            if (other->constant || !fr_same_dims(other, &g->values[n->outputs[0]])) return 0;
            if (sym >= 0) {
                /* read symbolically: attributes and Sk, no mask input */
            } else if (mv->constant) {
                int kind = fr_attn_classify_mask(mv->constant, 0, Tq, Tk, &m->window);
                if (kind == FR_ATTN_MASK_BAD) return 0;
                m->causal = kind == FR_ATTN_MASK_CAUSAL;
            } else {
                /* computed at run time, not read symbolically: the fused op reads it, adding it
                   as this Add did */
                if (!m->guarded || !runtime_mask_ok(g, n->inputs[k], sv)) return 0;
                m->mask = n->inputs[k];
            }
            mask_seen = 1;
            add_dead(m, g, n);
            x = n->inputs[1 - k];
            continue;
        }
        if (!mask_seen && !scale_seen && !cap_seen && fr_is_onnx_op(n, "Where") && n->n_inputs == 3) {
            const fr_value *cond = &g->values[n->inputs[0]], *a = &g->values[n->inputs[1]];
            const fr_tensor *ft = g->values[n->inputs[2]].constant;
            int fill_ok = ft && fr_dtype_is_float(ft->dtype) && fr_tensor_numel(ft) >= 1;
            for (int64_t e = 0; fill_ok && e < fr_tensor_numel(ft); e++) fill_ok = fr_tensor_get_f64(ft, e) <= MASKED_MAX;
            if (cond->dtype != FR_BOOL || a->constant || !fill_ok || !fr_same_dims(a, &g->values[n->outputs[0]]))
                return 0;
            if (!cond->constant) {
                if (runtime_symbolic(g, n, 1, sv, m) < 0) return 0;
            } else {
                int kind = fr_attn_classify_mask(cond->constant, 1, Tq, Tk, &m->window);
                if (kind == FR_ATTN_MASK_BAD) return 0;
                m->causal = kind == FR_ATTN_MASK_CAUSAL;
            }
            mask_seen = 1;
            add_dead(m, g, n);
            x = n->inputs[1];
            continue;
        }
        if (!cap_seen && !scale_seen) {
            const int z = peel_softcap(c, x, m);
            if (z != x) {
                /* a mask added before the softcap would be capped too: not the op's order */
                cap_seen = 1;
                mask_seen = 1;
                x = z;
                continue;
            }
        }
        const int y = scale_seen ? x : peel_scale(c, x, m);
        if (y != x) {
            scale_seen = 1;
            x = y;
            continue;
        }
        if (fr_is_onnx_op(n, "MatMul") && n->n_inputs == 2) {
            const fr_value *q = &g->values[n->inputs[0]], *kt = &g->values[n->inputs[1]];
            if (q->rank < 2 || kt->rank < 2 || kt->rank > q->rank || !is_f32(g, n->inputs[0]) || !is_f32(g, n->inputs[1]))
                return 0;
            /* the scores keep Q's batch dims (K's broadcast into them, never the reverse) */
            for (int d = 0; d < q->rank - 2; d++)
                if (sv->dims[d] != q->dims[d]) return 0;
            if (sv->rank != q->rank) return 0;
            add_dead(m, g, n);
            /* the exporter splits the scale over both operands (sqrt(scale) on q and on k^T) */
            m->q = peel_scale(c, n->inputs[0], m);
            if (m->q == n->inputs[0]) m->q = peel_scale_below_layout(c, m->q, m);
            m->kt = peel_scale(c, n->inputs[1], m);
            return 1;
        }
        return 0;
    }
    return 0;
}

/* Softmax over the last axis (either opset convention). */
static int softmax_last_axis(const fr_graph *g, const fr_node *n)
{
    if (!fr_is_onnx_op(n, "Softmax") || n->n_inputs != 1 || n->n_outputs != 1) return 0;
    const int legacy = fr_graph_opset(g, "") < 13, r = g->values[n->inputs[0]].rank;
    int64_t axis;
    if (r < 2 || fr_node_attr_int(n, "axis", legacy ? 1 : -1, &axis) != FR_OK) return 0;
    if (axis < 0) axis += r;
    return axis == r - 1;
}

/* Where(IsNaN(p), 0, p) reading p (a rule of the exporter: fully masked rows give 0, not NaN):
 * moves *p past it. The fused op never has a fully masked row (no mask, causal, or a window
 * holding the diagonal), so the guard changes nothing there but NaN inputs. Returns 0 when p
 * has other readers than the guard. */
static int guard_after(const fr_readers *c, match *m, int *p)
{
    const fr_graph *g = c->g;
    if (c->count[*p] == 1) return 1;
    const fr_node *isn = fr_reader_op(c, *p, "IsNaN");
    if (c->count[*p] != 2 || !isn || isn->n_outputs != 1) return 0;
    const fr_node *w = fr_sole_reader(c, isn->outputs[0]);
    double zero;
    if (!w || !fr_is_onnx_op(w, "Where") || w->n_inputs != 3 || w->inputs[0] != isn->outputs[0] ||
        w->inputs[2] != *p || !const_scalar(g, w->inputs[1], &zero) || zero != 0 ||
        !fr_same_dims(&g->values[w->outputs[0]], &g->values[*p]))
        return 0;
    add_dead(m, g, isn);
    add_dead(m, g, w);
    m->guarded = 1;
    *p = w->outputs[0];
    return 1;
}

/* Whether value x is computed from a node the match replaces (then it cannot be the fused node's
 * mask) or from a trained parameter (the fused op gives its mask no gradient; an unfused graph
 * would train it). Depth-first over producers; out of memory counts as yes (no fusion). */
static int reaches_dead(const fr_graph *g, int x, const int *dead, int n_dead)
{
    unsigned char *seen = calloc((size_t)g->n_values + 1, 1);
    int *stack = malloc(sizeof(int) * ((size_t)g->n_values + 1)), top = 0, hit = !seen || !stack;
    if (!hit) stack[top++] = x;
    while (!hit && top > 0) {
        const int v = stack[--top];
        const fr_node *n = fr_live_producer(g, v);
        hit = (g->values[v].flags & FR_VAL_PARAM) != 0;
        if (!n || seen[v]) continue;
        seen[v] = 1;
        for (int i = 0; i < n_dead; i++) hit = hit || &g->nodes[dead[i]] == n;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && !seen[n->inputs[k]] && top < g->n_values) stack[top++] = n->inputs[k];
    }
    free(seen);
    free(stack);
    return hit;
}

/* The whole pattern around Softmax node s. */
static int match_at(const fr_readers *c, int s, match *m)
{
    const fr_graph *g = c->g;
    const fr_node *sm = &g->nodes[s];
    memset(m, 0, sizeof *m);
    m->scale = 1.0;
    m->mask = -1;
    m->seg = -1;
    m->rewire_node = -1;
    if (!softmax_last_axis(g, sm) || !is_f32(g, sm->inputs[0])) return 0;
    add_dead(m, g, sm);
    /* forward: the exporter's guard Where(IsNaN(P), 0, P), casts, then MatMul(P, V) */
    int p = sm->outputs[0], found = 0;
    if (!guard_after(c, m, &p)) return 0;
    for (int steps = 0; steps < 4 && !found; steps++) {
        const fr_node *n = fr_sole_reader(c, p);
        if (!n) return 0;
        if (noop_cast(g, n)) {
            add_dead(m, g, n);
            p = n->outputs[0];
            continue;
        }
        if (!fr_is_onnx_op(n, "MatMul") || n->n_inputs != 2 || n->inputs[0] != p || n->inputs[1] == p) return 0;
        m->v = n->inputs[1];
        m->o = n->outputs[0];
        add_dead(m, g, n);
        found = 1;
    }
    if (!found) return 0;
    if (!match_scores(c, sm->inputs[0], m)) return 0;
    /* V: K's batch dims, [Tk, Dv]; O: P's batch dims */
    const fr_value *kt = &g->values[m->kt], *v = &g->values[m->v], *o = &g->values[m->o], *q = &g->values[m->q];
    if (!is_f32(g, m->v) || v->rank != kt->rank || v->dims[v->rank - 2] != kt->dims[kt->rank - 1] || o->rank != q->rank)
        return 0;
    for (int d = 0; d < v->rank - 2; d++)
        if (v->dims[d] != kt->dims[d]) return 0;
    return m->mask < 0 || !reaches_dead(g, m->mask, m->dead, m->n_dead);
}

/* A Transpose node perm(x) -> new value named after base; returns the value. */
static fr_status add_transpose(fr_graph *g, int x, int rank, const int64_t *perm, const char *base, int *out)
{
    char nm[512];
    snprintf(nm, sizeof nm, "%s/K", base);
    FR_TRY(fr_graph_add_unique_value(g, nm, out));
    int nid;
    snprintf(nm, sizeof nm, "%s/Transpose_K", base);
    FR_TRY(fr_graph_add_node(g, "Transpose", FR_DOMAIN_ONNX, nm, 1, &x, 1, out, &nid));
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "perm", rank, perm));
    return fr_node_infer(g, nid);
}

/* The exporter's K^T: Reshape(Transpose{0,2,1}(Reshape(x -> [N, Tk, D])) -> [.., D, Tk]), each
 * value read once: returns x (whose row-major data is K's), marking the three nodes replaced;
 * else -1. */
static int reshaped_kt(const fr_readers *c, match *m, int kt)
{
    const fr_graph *g = c->g;
    const fr_node *r2 = fr_live_producer(g, kt);
    if (!r2 || !fr_is_onnx_op(r2, "Reshape") || c->count[kt] != 1) return -1;
    const int tv = r2->inputs[0];
    const fr_node *t = fr_live_producer(g, tv);
    const fr_attr *pa = t && fr_is_onnx_op(t, "Transpose") ? fr_node_attr(t, "perm") : NULL;
    if (!pa || pa->type != FR_ATTR_INTS || pa->n != 3 || pa->ints[0] != 0 || pa->ints[1] != 2 || pa->ints[2] != 1 ||
        c->count[tv] != 1)
        return -1;
    const int rv = t->inputs[0];
    const fr_node *r1 = fr_live_producer(g, rv);
    const fr_value *a = &g->values[rv], *ktv = &g->values[kt];
    if (!r1 || !fr_is_onnx_op(r1, "Reshape") || c->count[rv] != 1 || a->rank != 3 ||
        a->dims[1] != ktv->dims[ktv->rank - 1] || a->dims[2] != ktv->dims[ktv->rank - 2])
        return -1;
    add_dead(m, g, r2);
    add_dead(m, g, t);
    add_dead(m, g, r1);
    return r1->inputs[0];
}

/* GQA as the exporter writes it: K's source x is Expand([B, KV, 1, Tk, D]) to [B, KV, G, Tk, D]
 * (static shapes) or its Reshape to [B, KV * G, Tk, D] (dynamic: the exporter's _unsafe_view),
 * V is Reshape(Expand(..)) likewise, for Q [B, KV * G, Tq, D]. The fused op then reads the
 * Expands' inputs (K/V broadcast over G): the copies and their gradients' sums go away. Sets
 * *k5, *v5 and e's kv_heads and groups; 0 when the form is not there. */
static int gqa_sources(const fr_graph *g, const match *m, int x, int *k5, int *v5, fr_attn_emit *e)
{
    const fr_value *q = &g->values[m->q];
    int64_t kv, grp, kv2, grp2;
    if (q->rank != 4 || !(fr_attn_expand_source(g, x, 0, k5, &kv, &grp) || fr_attn_expand_source(g, x, 1, k5, &kv, &grp)) ||
        !fr_attn_expand_source(g, m->v, 1, v5, &kv2, &grp2) || kv != kv2 || grp != grp2 || kv * grp != q->dims[1] ||
        g->values[*k5].dims[0] != q->dims[0] || g->values[*v5].dims[0] != q->dims[0])
        return 0;
    e->kv_heads = kv;
    e->groups = grp;
    return 1;
}

/* K [.., Tk, D] from KT: through the exporter's reshape chain (GQA: the Expands' inputs, into e),
 * or KT's Transpose when it has one that only this reads, else a new Transpose. */
static fr_status make_k(fr_readers *c, match *m, const char *base, int *k, fr_attn_emit *e)
{
    fr_graph *g = c->g;
    const int r = g->values[m->kt].rank;
    int64_t perm[FR_MAX_RANK];
    const int x = reshaped_kt(c, m, m->kt);
    if (x >= 0 && gqa_sources(g, m, x, k, &e->v, e)) return FR_OK;
    if (x >= 0) { /* K = x viewed as KT's batch dims, [Tk, D] */
        const fr_value *ktv = &g->values[m->kt];
        int64_t kd[FR_MAX_RANK];
        memcpy(kd, ktv->dims, sizeof(int64_t) * (size_t)r);
        kd[r - 2] = ktv->dims[r - 1];
        kd[r - 1] = ktv->dims[r - 2];
        const fr_value *xv = &g->values[x];
        int same = xv->rank == r;
        for (int d = 0; same && d < r; d++) same = xv->dims[d] == kd[d];
        if (same) {
            *k = x;
            return FR_OK;
        }
        char nm[512];
        snprintf(nm, sizeof nm, "%s/K", base);
        return fr_pattern_reshape(g, x, r, kd, nm, k);
    }
    const fr_node *t = fr_live_producer(g, m->kt);
    const fr_attr *pa = t && fr_is_onnx_op(t, "Transpose") ? fr_node_attr(t, "perm") : NULL;
    if (pa && pa->type == FR_ATTR_INTS && pa->n == r && c->count[m->kt] == 1) {
        memcpy(perm, pa->ints, sizeof(int64_t) * (size_t)r);
        int64_t tmp = perm[r - 2];
        perm[r - 2] = perm[r - 1];
        perm[r - 1] = tmp;
        int identity = 1;
        for (int d = 0; d < r; d++) identity = identity && perm[d] == d;
        const int x = t->inputs[0];
        add_dead(m, g, t);
        if (identity && gqa_sources(g, m, x, k, &e->v, e)) return FR_OK; /* HF's eager repeat_kv */
        if (identity) {
            *k = x;
            return FR_OK;
        }
        return add_transpose(g, x, r, perm, base, k);
    }
    for (int d = 0; d < r; d++) perm[d] = d;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    return add_transpose(g, m->kt, r, perm, base, k);
}

static fr_status fuse_one(fr_readers *c, match *m, const char *softmax_name)
{
    fr_graph *g = c->g;
    char base[480];
    snprintf(base, sizeof base, "%s/fused_attention", softmax_name);
    fr_attn_emit e = {m->q, -1, m->v, m->mask, m->o, 1, 1, (float)m->scale, m->causal, m->window, base, m->seg,
                      (float)m->softcap};
    FR_TRY(make_k(c, m, base, &e.k, &e));
    for (int i = 0; i < m->n_dead; i++) g->nodes[m->dead[i]].dead = 1;
    if (m->rewire_node >= 0 && g->nodes[m->rewire_node].inputs[0] == m->rewire_from)
        g->nodes[m->rewire_node].inputs[0] = m->rewire_to;
    FR_TRY(fr_attn_emit_node(g, &e));
    return m->mask_runtime ? fr_attn_mask_note(g, base, &m->mi) : FR_OK;
}

/* Fold the masks preparation left unfolded for their size: walk back from each Softmax through
 * the steps a match may take and fold the non-score inputs of Add and Where nodes on demand. */
static fr_status fold_masks(fr_graph *g)
{
    for (int s = 0; s < g->n_nodes; s++) {
        if (!fr_is_onnx_op(&g->nodes[s], "Softmax") || g->nodes[s].n_inputs < 1) continue;
        int x = g->nodes[s].inputs[0];
        for (int steps = 0; steps < 8 && x >= 0; steps++) {
            const fr_node *n = fr_live_producer(g, x);
            if (!n || n->n_inputs < 1) break;
            int f0 = 0, f1 = 0, f2 = 0;
            if (fr_is_onnx_op(n, "Add") && n->n_inputs == 2) {
                int a = n->inputs[0], b = n->inputs[1];
                FR_TRY(fr_fold_value(g, a, MASK_FOLD_MAX, 4, &f0));
                FR_TRY(fr_fold_value(g, b, MASK_FOLD_MAX, 4, &f1));
                if (f0 == f1) break; /* both constant, or neither: no mask here */
                x = f0 ? b : a;
            } else if (fr_is_onnx_op(n, "Where") && n->n_inputs == 3) {
                int a = n->inputs[1];
                FR_TRY(fr_fold_value(g, n->inputs[0], MASK_FOLD_MAX, 4, &f0));
                FR_TRY(fr_fold_value(g, n->inputs[2], MASK_FOLD_MAX, 4, &f2));
                x = a;
            } else if ((fr_is_onnx_op(n, "Mul") || fr_is_onnx_op(n, "Div")) && n->n_inputs == 2) {
                x = g->values[n->inputs[0]].constant ? n->inputs[1] : n->inputs[0];
            } else if (fr_is_onnx_op(n, "Cast")) {
                x = n->inputs[0];
            } else {
                break;
            }
        }
    }
    return FR_OK;
}

fr_status fr_fuse_attention(fr_graph *g, int *count)
{
    *count = 0;
    FR_TRY(fold_masks(g));
    fr_readers c = {g, NULL};
    fr_status st = fr_readers_refresh(&c, "attention fusion");
    const int n_nodes = g->n_nodes; /* nodes added while fusing are not candidates */
    for (int s = 0; s < n_nodes && st == FR_OK; s++) {
        match m;
        if (!match_at(&c, s, &m)) continue;
        char *name = fr_strdup(g->nodes[s].name, "attention fusion");
        if (!name) {
            st = FR_ERR_OOM;
            break;
        }
        if (*count == 0) st = fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1);
        if (st == FR_OK) st = fuse_one(&c, &m, name);
        free(name);
        if (st == FR_OK) st = fr_readers_refresh(&c, "attention fusion");
        if (st == FR_OK) (*count)++;
    }
    fr_readers_free(&c);
    if (st == FR_OK && *count) {
        int removed;
        st = fr_graph_compact(g);
        if (st == FR_OK) st = fr_graph_toposort(g);
        if (st == FR_OK) st = fr_dce(g, &removed); /* the masks' nodes, read by nothing now */
        if (st == FR_OK && removed) st = fr_graph_compact(g);
    }
    return st;
}
