/* ai.fp8run::Attention's softcap attribute and segment inputs Sk, Sq (ops/attention.h), on the
 * CPU reference, fresh random inputs:
 *  - softcap against the unfused float64 chain MatMul -> Mul(scale) -> Div(c) -> Tanh -> Mul(c)
 *    -> Add(causal/window mask) -> [Add(M)] -> Softmax -> MatMul: O within 1e-12 (relative
 *    L2), dQ, dK, dV of AttentionGrad against the chain's autodiff within 1e-10; the gradient
 *    against central differences (float64, 1e-6); softcap really changes O;
 *  - the segment rule against the dense additive-mask formulation (M = 0 where Sk[j] == Sq[i],
 *    -inf elsewhere, plus any M of the node): O, LSE and the gradients equal within 1e-12
 *    (LSE -inf on the same rows): HF padding (Sq absent), packed and padded sequences,
 *    arbitrary ids with fully masked rows, rows per problem or per first batch dim, GQA with
 *    a window and softcap, rank-2 Q; int32 and int64 ids;
 *  - AttentionGrad, made by the gradient rule, reads Sk, Sq (and the softcap attribute);
 *  - the seg_form promises are checked (errors name the node and the row), bad shapes,
 *    dtypes and attributes are errors that name the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/grad.h"
#include "tests/gradcheck.h"

static fr_graph *new_graph(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    CU_ASSERT_FATAL(g != NULL);
    FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
    return g;
}

/* One problem: Q [dq], K, V [dk] (V's last dim Dv), attributes, segments. */
typedef struct scase {
    int rq, rk;
    int64_t dq[5], dk[5], Dv;
    int causal;
    int64_t window;
    double softcap;
    int bias;      /* an additive [Tq, Tk] M input (finite values and a few -inf) */
    int seg;       /* 0 none; 1 HF padding; 2 packed; 3 padded; 4 arbitrary ids; 5 rank-2 Q padding */
    int per_batch; /* Sk rows: 1 one per problem, 0 one per Q's first dim */
    fr_dtype idt;  /* the ids' dtype */
} scase;

static int64_t batch_of(const scase *c)
{
    int64_t b = 1;
    for (int d = 0; d < c->rq - 2; d++) b *= c->dq[d];
    return b;
}
static int64_t tq_of(const scase *c) { return c->dq[c->rq - 2]; }
static int64_t tk_of(const scase *c) { return c->dk[c->rk - 2]; }
static int64_t rows_of(const scase *c) { return c->rq == 2 ? 1 : c->per_batch ? batch_of(c) : c->dq[0]; }
static float scale_of(const scase *c) { return (float)(1.3 / sqrt((double)c->dq[c->rq - 1])); }

/* Whether the case has Sq (HF padding has Sk only: every query has id 1). */
static int has_sq(const scase *c) { return c->seg != 1 && c->seg != 5; }

/* Key (q 0) or query (q 1) segment id of row r, position t. */
static int64_t seg_at(const scase *c, int q, int64_t r, int64_t t)
{
    const int64_t T = q ? tq_of(c) : tk_of(c);
    switch (c->seg) {
    case 1: return t < T - r ? 1 : 0;                   /* row r drops its last r keys */
    case 2: return t < 3 ? 1 : t < T - r ? 2 + r : 0;  /* examples 1, 2 + r, then padding */
    case 3: return t < T - 2 * r ? 1 : 0;              /* right padding, 2 r tokens */
    case 4: return (3 * t + 5 * r + (q ? 1 : 0)) % 4 - (q && t == 1 ? 9 : 0); /* query 1: no key */
    case 5: return t % 3 == 2 ? 0 : 1;
    default: return 1;
    }
}

static const char *form_of(const scase *c) { return c->seg == 2 ? "packed" : c->seg == 3 ? "padded" : "general"; }

static double bias_at(int64_t i, int64_t j) { return (i + 2 * j) % 7 == 3 ? -INFINITY : 0.4 * sin(1.3 * i - 0.7 * j); }

static const scase k_cases[] = {
    /* HF padding, causal, rows = Q's first dim, int64 */
    {4, 4, {2, 3, 6, 4}, {2, 3, 6, 4}, 4, 1, 0, 0.0, 0, 1, 0, FR_I64},
    /* packed, causal, int32, softcap */
    {4, 4, {2, 2, 8, 4}, {2, 2, 8, 4}, 3, 1, 0, 1.5, 0, 2, 0, FR_I32},
    /* padded (Sq = Sk), not causal, one row per problem */
    {4, 4, {2, 2, 7, 3}, {2, 2, 7, 3}, 3, 0, 0, 0.0, 0, 3, 1, FR_I64},
    /* arbitrary ids, Tq != Tk, with a bias M: fully masked rows (query 1) */
    {4, 4, {2, 2, 5, 3}, {2, 2, 7, 3}, 2, 0, 0, 0.0, 1, 4, 1, FR_I32},
    /* GQA, causal window, softcap, padding per first dim */
    {5, 5, {2, 2, 2, 6, 4}, {2, 2, 1, 6, 4}, 4, 1, 3, 0.8, 0, 3, 0, FR_I64},
    /* rank-2 Q, Sk [1, T] */
    {2, 2, {5, 4}, {5, 4}, 4, 0, 0, 0.0, 0, 5, 0, FR_I64},
};
#define N_CASES ((int)(sizeof k_cases / sizeof k_cases[0]))

/* The Sk (q 0) / Sq (q 1) input of a case, -1 when absent. */
static int add_seg(fr_graph *g, fr_rng *r, const scase *c, int q)
{
    if (!c->seg || (q && !has_sq(c))) return -1;
    const int64_t rows = rows_of(c), T = q ? tq_of(c) : tk_of(c);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(rows * T));
    CU_ASSERT_FATAL(ids != NULL);
    for (int64_t x = 0; x < rows * T; x++) ids[x] = seg_at(c, q, x / T, x % T);
    int v = fr_gc_add_input(g, r, q ? "Sq" : "Sk", c->idt, 2, (int64_t[]){rows, T}, ids);
    free(ids);
    return v;
}

/* The dense mask of the case: M[b, i, j] = bias (when the case has one) + 0 or -inf from the
 * segments, shaped [Q's batch dims, Tq, Tk]. */
static int add_dense_mask(fr_graph *g, const scase *c)
{
    const int64_t B = batch_of(c), Tq = tq_of(c), Tk = tk_of(c), rows = rows_of(c);
    double *m = malloc(sizeof(double) * (size_t)(B * Tq * Tk));
    CU_ASSERT_FATAL(m != NULL);
    for (int64_t b = 0; b < B; b++) {
        const int64_t r = b / (B / rows);
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = 0; j < Tk; j++) {
                const int64_t qid = has_sq(c) ? seg_at(c, 1, r, i) : 1;
                double v = c->bias ? bias_at(i, j) : 0.0;
                m[(b * Tq + i) * Tk + j] = c->seg && seg_at(c, 0, r, j) != qid ? -INFINITY : v;
            }
    }
    int64_t dims[5];
    memcpy(dims, c->dq, sizeof(int64_t) * (size_t)c->rq);
    dims[c->rq - 1] = Tk;
    int v = fr_gc_add_values(g, "dense_mask", FR_F64, c->rq, dims, m);
    free(m);
    return v;
}

static int add_bias(fr_graph *g, const scase *c)
{
    const int64_t Tq = tq_of(c), Tk = tk_of(c);
    double *m = malloc(sizeof(double) * (size_t)(Tq * Tk));
    CU_ASSERT_FATAL(m != NULL);
    for (int64_t x = 0; x < Tq * Tk; x++) m[x] = bias_at(x / Tk, x % Tk);
    int v = fr_gc_add_values(g, "bias", FR_F64, 2, (int64_t[]){Tq, Tk}, m);
    free(m);
    return v;
}

static void set_attrs(fr_node *n, const scase *c, int with_segs)
{
    FR_ASSERT_OK(fr_node_set_attr_float(n, "scale", scale_of(c)));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", c->causal));
    if (c->window) FR_ASSERT_OK(fr_node_set_attr_int(n, "window", c->window));
    if (c->softcap > 0) FR_ASSERT_OK(fr_node_set_attr_float(n, "softcap", (float)c->softcap));
    if (with_segs) FR_ASSERT_OK(fr_node_set_attr_string(n, "seg_form", form_of(c)));
}

static void add_qkv(fr_graph *g, fr_rng *r, const scase *c, int *q, int *k, int *v)
{
    int64_t dv[5];
    memcpy(dv, c->dk, sizeof dv);
    dv[c->rk - 1] = c->Dv;
    *q = fr_gc_add_input(g, r, "Q", FR_F64, c->rq, c->dq, NULL);
    *k = fr_gc_add_input(g, r, "K", FR_F64, c->rk, c->dk, NULL);
    *v = fr_gc_add_input(g, r, "V", FR_F64, c->rk, dv, NULL);
}

/* Attention with inputs (M, Sk, Sq: -1 absent); returns the node id. */
static int add_attention(fr_graph *g, const scase *c, int q, int k, int v, int m, int sk, int sq, int *out)
{
    const int n_in = sq >= 0 ? 6 : sk >= 0 ? 5 : m >= 0 ? 4 : 3;
    int nid = fr_gc_node(g, "Attention", "ai.fp8run", n_in, (int[]){q, k, v, m, sk, sq}, 2, out);
    set_attrs(&g->nodes[nid], c, sk >= 0);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return nid;
}

/* ||a - b|| / max(||b||, 1e-300); -inf meets -inf. */
static double rel_l2(const fr_tensor *a, const fr_tensor *b)
{
    const int64_t n = fr_tensor_numel(a);
    CU_ASSERT_FATAL(n == fr_tensor_numel(b));
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fr_tensor_get_f64(a, i), y = fr_tensor_get_f64(b, i);
        if (x == y) {
            if (isfinite(y)) den += y * y;
            continue;
        }
        if (!isfinite(x) || !isfinite(y)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return sqrt(num) / fmax(sqrt(den), 1e-300);
}

/* O, LSE and gradients (dy the same random values) of one graph's Attention output. */
typedef struct result {
    fr_tensor *o, *lse, *grad[3];
} result;

static void run_case(fr_graph *g, int o, int lse, const double *dy, const int *wrt, result *res)
{
    int gv[3];
    fr_tensor **t = fr_gc_backprop(g, o, dy, 3, wrt, gv);
    CU_ASSERT_FATAL(t != NULL);
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, o), "o", &res->o));
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, lse), "lse", &res->lse));
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_FATAL(gv[i] >= 0);
        FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, gv[i]), "grad", &res->grad[i]));
    }
    fr_gc_free_tensors(g, t);
    free(t);
}

static void free_result(result *r)
{
    fr_tensor_free(r->o);
    fr_tensor_free(r->lse);
    for (int i = 0; i < 3; i++) fr_tensor_free(r->grad[i]);
}

static double *random_dy(fr_rng *r, const fr_graph *g, int o, int64_t *n)
{
    *n = 1;
    for (int d = 0; d < g->values[o].rank; d++) *n *= g->values[o].dims[d];
    double *dy = malloc(sizeof(double) * (size_t)*n);
    CU_ASSERT_FATAL(dy != NULL);
    for (int64_t i = 0; i < *n; i++) dy[i] = fr_rng_normal(r);
    return dy;
}

/* ---- softcap against the unfused chain ---- */

static int add_unfused(fr_graph *g, const scase *c, int q, int k, int v)
{
    int64_t perm[5] = {0, 1, 2, 3, 4};
    perm[c->rk - 2] = c->rk - 1;
    perm[c->rk - 1] = c->rk - 2;
    int kt, nid = fr_gc_node(g, "Transpose", "", 1, &k, 1, &kt);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", c->rk, perm));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int s = fr_gc_op1(g, "MatMul", 2, (int[]){q, kt});
    double sc = scale_of(c), cap = (float)c->softcap; /* the attribute's float */
    s = fr_gc_op1(g, "Mul", 2, (int[]){s, fr_gc_add_values(g, "scale", FR_F64, 0, NULL, &sc)});
    if (cap > 0) {
        const int cv = fr_gc_add_values(g, "cap", FR_F64, 0, NULL, &cap);
        s = fr_gc_op1(g, "Div", 2, (int[]){s, cv});
        s = fr_gc_op1(g, "Tanh", 1, &s);
        s = fr_gc_op1(g, "Mul", 2, (int[]){s, cv});
    }
    if (c->causal) {
        const int64_t T = tq_of(c);
        double *m = malloc(sizeof(double) * (size_t)(T * T));
        CU_ASSERT_FATAL(m != NULL);
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) m[i * T + j] = j > i || (c->window && i - j >= c->window) ? -INFINITY : 0.0;
        s = fr_gc_op1(g, "Add", 2, (int[]){s, fr_gc_add_values(g, "causal", FR_F64, 2, (int64_t[]){T, T}, m)});
        free(m);
    }
    if (c->bias) s = fr_gc_op1(g, "Add", 2, (int[]){s, add_bias(g, c)});
    int p;
    nid = fr_gc_node(g, "Softmax", "", 1, &s, 1, &p);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return fr_gc_op1(g, "MatMul", 2, (int[]){p, v});
}

static const scase k_cap_cases[] = {
    {3, 3, {2, 6, 8}, {2, 6, 8}, 8, 1, 0, 1.5, 0, 0, 0, FR_I64},
    {5, 5, {2, 2, 2, 7, 4}, {2, 2, 1, 7, 4}, 3, 1, 3, 0.7, 0, 0, 0, FR_I64},
    {4, 4, {1, 2, 5, 4}, {1, 2, 6, 4}, 4, 0, 0, 2.0, 1, 0, 0, FR_I64},
};
#define N_CAP ((int)(sizeof k_cap_cases / sizeof k_cap_cases[0]))

static void test_softcap_vs_unfused(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CAP; ci++) {
        const scase *c = &k_cap_cases[ci];
        fr_rng r2 = r, r0 = r; /* the same Q, K, V in each graph */
        fr_graph *gf = new_graph(), *gu = new_graph(), *g0 = new_graph();
        int q, k, v, q2, k2, v2, q0, k0, v0, out[2], out0[2];
        add_qkv(gf, &r, c, &q, &k, &v);
        add_qkv(gu, &r2, c, &q2, &k2, &v2);
        add_qkv(g0, &r0, c, &q0, &k0, &v0);
        add_attention(gf, c, q, k, v, c->bias ? add_bias(gf, c) : -1, -1, -1, out);
        scase nocap = *c; /* the same node without softcap */
        nocap.softcap = 0;
        add_attention(g0, &nocap, q0, k0, v0, c->bias ? add_bias(g0, c) : -1, -1, -1, out0);
        const int ref = add_unfused(gu, c, q2, k2, v2);
        int64_t n;
        double *dy = random_dy(&r, gf, out[0], &n);
        result f, f0;
        run_case(gf, out[0], out[1], dy, (int[]){q, k, v}, &f);
        run_case(g0, out0[0], out0[1], dy, (int[]){q0, k0, v0}, &f0);
        CU_ASSERT(rel_l2(f0.o, f.o) > 1e-3); /* softcap matters here */
        for (int i = 0; i < gf->n_nodes; i++) /* the gradient node keeps the softcap */
            if (strcmp(gf->nodes[i].op_type, "AttentionGrad") == 0) {
                float cap = 0;
                FR_ASSERT_OK(fr_node_attr_float(&gf->nodes[i], "softcap", 0.0f, &cap));
                CU_ASSERT(cap == (float)c->softcap);
            }
        int gv[3];
        fr_tensor **t = fr_gc_backprop(gu, ref, dy, 3, (int[]){q2, k2, v2}, gv);
        CU_ASSERT_FATAL(t != NULL);
        double e = rel_l2(f.o, fr_gc_value(gu, t, ref));
        if (!(e <= 1e-12)) printf("\n  softcap case %d: O rel L2 %g", ci, e);
        CU_ASSERT(e <= 1e-12);
        for (int i = 0; i < 3; i++) {
            e = rel_l2(f.grad[i], fr_gc_value(gu, t, gv[i]));
            if (!(e <= 1e-10)) printf("\n  softcap case %d: d%c rel L2 %g", ci, "QKV"[i], e);
            CU_ASSERT(e <= 1e-10);
        }
        fr_gc_free_tensors(gu, t);
        free(t);
        free_result(&f);
        free_result(&f0);
        free(dy);
        fr_graph_free(gf);
        fr_graph_free(gu);
        fr_graph_free(g0);
    }
}

static void test_softcap_gradcheck(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CAP; ci++) {
        const scase *c = &k_cap_cases[ci];
        fr_graph *g = new_graph();
        int q, k, v, out[2];
        add_qkv(g, &r, c, &q, &k, &v);
        add_attention(g, c, q, k, v, c->bias ? add_bias(g, c) : -1, -1, -1, out);
        char what[64];
        snprintf(what, sizeof what, "softcap case %d", ci);
        fr_gc_check(g, &r, out[0], 3, (int[]){q, k, v}, what, 1e-6);
        fr_graph_free(g);
    }
}

/* ---- segments against the dense mask ---- */

static void test_segments_vs_dense(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CASES; ci++) {
        const scase *c = &k_cases[ci];
        fr_rng r2 = r;
        fr_graph *gs = new_graph(), *gd = new_graph();
        int q, k, v, q2, k2, v2, os[2], od[2];
        add_qkv(gs, &r, c, &q, &k, &v);
        add_qkv(gd, &r2, c, &q2, &k2, &v2);
        const int sk = add_seg(gs, &r, c, 0), sq = add_seg(gs, &r, c, 1);
        add_attention(gs, c, q, k, v, c->bias ? add_bias(gs, c) : -1, sk, sq, os);
        scase dense = *c;
        dense.seg = 0;
        add_attention(gd, &dense, q2, k2, v2, add_dense_mask(gd, c), -1, -1, od);
        int64_t n;
        double *dy = random_dy(&r, gs, os[0], &n);
        result a, b;
        run_case(gs, os[0], os[1], dy, (int[]){q, k, v}, &a);
        run_case(gd, od[0], od[1], dy, (int[]){q2, k2, v2}, &b);
        const double eo = rel_l2(a.o, b.o), el = rel_l2(a.lse, b.lse);
        if (!(eo <= 1e-12 && el <= 1e-12)) printf("\n  segment case %d: O rel L2 %g, LSE %g", ci, eo, el);
        CU_ASSERT(eo <= 1e-12);
        CU_ASSERT(el <= 1e-12);
        for (int i = 0; i < 3; i++) {
            const double e = rel_l2(a.grad[i], b.grad[i]);
            if (!(e <= 1e-12)) printf("\n  segment case %d: d%c rel L2 %g", ci, "QKV"[i], e);
            CU_ASSERT(e <= 1e-12);
        }
        if (c->seg == 4) { /* query 1 sees no key: O = 0, LSE = -inf */
            CU_ASSERT(fr_tensor_get_f64(a.lse, 1) == -INFINITY);
            CU_ASSERT(fr_tensor_get_f64(a.o, 1 * c->Dv) == 0.0);
        }
        /* the gradient node reads the segments at 7, 8 (M at 6 or empty) */
        int found = 0;
        for (int i = 0; i < gs->n_nodes; i++)
            if (strcmp(gs->nodes[i].op_type, "AttentionGrad") == 0) {
                const fr_node *gn = &gs->nodes[i];
                found = 1;
                CU_ASSERT(gn->n_inputs == (sq >= 0 ? 9 : 8) && gn->inputs[7] == sk);
                CU_ASSERT((gn->inputs[6] >= 0) == (c->bias != 0));
            }
        CU_ASSERT(found);
        free_result(&a);
        free_result(&b);
        free(dy);
        fr_graph_free(gs);
        fr_graph_free(gd);
    }
}

/* Central differences through a node with segments, softcap and a window. */
static void test_segments_gradcheck(void)
{
    fr_rng r = fr_test_rng(__func__);
    const int pick[3] = {1, 3, 4};
    for (int p = 0; p < 3; p++) {
        const scase *c = &k_cases[pick[p]];
        fr_graph *g = new_graph();
        int q, k, v, out[2];
        add_qkv(g, &r, c, &q, &k, &v);
        const int sk = add_seg(g, &r, c, 0), sq = add_seg(g, &r, c, 1);
        add_attention(g, c, q, k, v, c->bias ? add_bias(g, c) : -1, sk, sq, out);
        char what[64];
        snprintf(what, sizeof what, "segment case %d", pick[p]);
        fr_gc_check(g, &r, out[0], 3, (int[]){q, k, v}, what, 1e-6);
        fr_graph_free(g);
    }
}

/* ---- promises and errors ---- */

static const scase k_plain = {4, 4, {2, 2, 6, 4}, {2, 2, 6, 4}, 4, 1, 0, 0.0, 0, 0, 0, FR_I64};

/* Runs Attention on Sk (and Sq: NULL absent) rows of the plain case with seg_form form;
 * returns the status and leaves the message in fr_last_error. */
static fr_status run_form(const char *form, const int64_t *sk, const int64_t *sq)
{
    fr_rng r = fr_test_rng("attn_seg_form");
    fr_graph *g = new_graph();
    int q, k, v, out[2];
    add_qkv(g, &r, &k_plain, &q, &k, &v);
    const int64_t dims[2] = {2, 6};
    const int skv = fr_gc_add_input(g, &r, "Sk", FR_I64, 2, dims, sk);
    const int sqv = sq ? fr_gc_add_input(g, &r, "Sq", FR_I32, 2, dims, sq) : -1;
    int nid = fr_gc_node(g, "Attention", "ai.fp8run", sq ? 6 : 5, (int[]){q, k, v, -1, skv, sqv}, 2, out);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "causal", 1));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "seg_form", form));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    CU_ASSERT_FATAL(t != NULL);
    const fr_status st = fr_gc_run(g, t);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
    return st;
}

static void expect_msg(fr_status st, const char *what)
{
    CU_ASSERT(st != FR_OK);
    const char *msg = fr_last_error();
    const int ok = strstr(msg, what) && strstr(msg, "Attention");
    if (!ok) printf("\n  error '%s' lacks '%s'", msg, what);
    CU_ASSERT(ok);
    fr_clear_error();
}

static void test_seg_form_promises(void)
{
    const int64_t padded[12] = {1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1};
    const int64_t packed[12] = {1, 1, 2, 2, 2, 0, 1, 3, 3, 3, 4, 4};
    const int64_t holes[12] = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t down[12] = {1, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1};
    FR_ASSERT_OK(run_form("padded", padded, NULL));
    FR_ASSERT_OK(run_form("padded", padded, padded));
    FR_ASSERT_OK(run_form("packed", packed, packed));
    FR_ASSERT_OK(run_form("packed", padded, NULL)); /* padding is one example */
    FR_ASSERT_OK(run_form("general", down, holes));
    expect_msg(run_form("padded", holes, NULL), "seg_form padded: Sk row 0");
    expect_msg(run_form("padded", packed, NULL), "seg_form padded");
    expect_msg(run_form("packed", down, NULL), "seg_form packed: Sk row 0");
    expect_msg(run_form("packed", packed, padded), "Sq differs from Sk");
}

/* Infer of the plain case with Sk dims dk (dtype tk), Sq (rank 0: absent) and attributes. */
static void expect_infer(fr_dtype tk, int64_t r0, int64_t t0, int with_sq, int with_sk, float softcap,
                         const char *form, const char *what)
{
    fr_rng r = fr_test_rng("attn_seg_errors");
    fr_graph *g = new_graph();
    int q, k, v, out[2];
    add_qkv(g, &r, &k_plain, &q, &k, &v);
    const int64_t dims[2] = {r0, t0};
    const int skv = with_sk ? fr_gc_add_input(g, &r, "Sk", tk, 2, dims, NULL) : -1;
    const int sqv = with_sq ? fr_gc_add_input(g, &r, "Sq", FR_I64, 2, dims, NULL) : -1;
    int nid = fr_gc_node(g, "Attention", "ai.fp8run", 6, (int[]){q, k, v, -1, skv, sqv}, 2, out);
    fr_node *n = &g->nodes[nid];
    FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", 1));
    if (softcap != 0) FR_ASSERT_OK(fr_node_set_attr_float(n, "softcap", softcap));
    if (form) FR_ASSERT_OK(fr_node_set_attr_string(n, "seg_form", form));
    if (!what) {
        FR_ASSERT_OK(fr_node_infer(g, nid));
    } else {
        expect_msg(fr_node_infer(g, nid), what);
    }
    fr_graph_free(g);
}

static void test_errors(void)
{
    expect_infer(FR_I64, 2, 6, 1, 1, 0, NULL, NULL);     /* rows = Q's first dim */
    expect_infer(FR_I32, 4, 6, 0, 1, 0, NULL, NULL);     /* one row per problem */
    expect_infer(FR_I64, 1, 6, 0, 1, 0, NULL, NULL);     /* one row for all */
    expect_infer(FR_I64, 2, 5, 0, 1, 0, NULL, "Sk [2, 5] must be [R, Tk=6]");
    expect_infer(FR_I64, 3, 6, 0, 1, 0, NULL, "Sk [3, 6]");
    expect_infer(FR_F32, 2, 6, 0, 1, 0, NULL, "int32 or int64");
    expect_infer(FR_I64, 2, 6, 1, 0, 0, NULL, "needs Sk");
    expect_infer(FR_I64, 2, 6, 0, 1, -1.0f, NULL, "softcap -1");
    expect_infer(FR_I64, 2, 6, 0, 1, 0, "ragged", "seg_form 'ragged'");
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"softcap vs the unfused tanh chain (1e-12 O, 1e-10 grads)", test_softcap_vs_unfused},
        {"softcap gradient vs central differences (float64)", test_softcap_gradcheck},
        {"segments vs the dense additive mask (1e-12)", test_segments_vs_dense},
        {"segments gradient vs central differences (float64)", test_segments_gradcheck},
        {"seg_form promises checked", test_seg_form_promises},
        {"errors name the node", test_errors},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention segments and softcap", NULL, NULL, NULL, NULL, tests},
                             CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
