/* AttentionQKV's Q/K/V layouts beyond Llama's (ops/attention_qkv.h: packing "heads", the
 * partial rotary rotary_dim) and the pass that reads them (passes/attention_io.c):
 *  - the unfused chain as the exporters write it (GPT-NeoX: Reshape [B, T, H, 2 D + Dv],
 *    Transpose, Split per head; Llama / Phi-3: Split or three Slices of [Q | K | V], Reshape,
 *    Transpose; Rotary with rotary_dim on q and k; Attention; Transpose, Reshape) against the
 *    same graph after fr_fuse_attention_io (one AttentionQKV with the packing and rotary_dim
 *    expected): O and dX (autodiff through AttentionQKVGrad) equal bit for bit in float32,
 *    MHA and GQA, causal or not, whole, partial and interleaved RoPE, Dv != D;
 *  - the op in float64 equals the chain bit for bit and its gradient matches central
 *    differences (1e-6);
 *  - bad attributes fail in infer (packing "heads" with GQA, unknown packing, odd or too large
 *    rotary_dim, tables not rotary_dim wide, a q/k norm with packing "heads");
 *  - the GPT-NeoX fixtures (opsets 18 and 23, static and dynamic: per-head packing, rotary on 4
 *    of 16 features) and Phi-3 (Slices of qkv_proj) fuse one AttentionQKV per layer with those
 *    attributes, no Slice, Concat, Transpose or Rotary left (nor Split in GPT-NeoX: Phi-3's
 *    are its MLP's gate/up, SwiGLU is not fused here), logits equal to the pass
 *    off within 1e-6;
 *  - what `fp8run info` reports off the fast path for the trainers' bf16 graphs (forward and
 *    backward): nothing for Phi-3, nothing around attention for GPT-NeoX (its LayerNorms after
 *    residual Adds are another fusion's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_qkv.h"
#include "ops/grad.h"
#include "passes/attention_fuse.h"
#include "passes/attention_io.h"
#include "passes/qkv_split_regroup.h"
#include "passes/gather_slice.h"
#include "passes/slice_hoist.h"
#include "passes/fast_path.h"
#include "passes/fp8_compile.h"
#include "passes/rotary_fuse.h"
#include "runtime/io/npy.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/op_harness.h"

typedef struct lcfg {
    int64_t B, T, Hq, Hk, D, Dv;
    int heads;  /* packing "heads" (else [Q | K | V] sections) */
    int64_t rd; /* rotary_dim (0: no RoPE) */
    int il;     /* interleaved RoPE */
    int causal;
    int slices; /* sections: three Slices of X instead of a Split */
} lcfg;

static const lcfg k_cfgs[] = {
    {2, 5, 3, 3, 8, 8, 1, 4, 0, 1, 0},   /* GPT-NeoX: per head, a quarter rotated */
    {2, 6, 2, 2, 6, 4, 1, 6, 1, 0, 0},   /* per head, whole interleaved RoPE, Dv != D */
    {1, 4, 4, 4, 4, 4, 1, 0, 0, 1, 0},   /* per head, no RoPE */
    {2, 5, 4, 2, 8, 8, 0, 4, 0, 1, 1},   /* Phi-3-like Slices, GQA, partial */
    {2, 3, 2, 2, 12, 12, 0, 8, 1, 1, 0}, /* a Split, partial interleaved */
    {2, 4, 2, 1, 4, 6, 0, 4, 0, 0, 1},   /* Slices, MQA, whole RoPE, Dv != D */
};
#define N_CFGS ((int)(sizeof k_cfgs / sizeof k_cfgs[0]))

static int64_t width(const lcfg *c)
{
    return c->heads ? c->Hq * (2 * c->D + c->Dv) : (c->Hq + c->Hk) * c->D + c->Hk * c->Dv;
}

static int ints(fr_graph *g, const char *name, int n, const int64_t *v)
{
    const int64_t d = n;
    return fr_gc_add_input(g, NULL, name, FR_I64, 1, &d, v);
}

static int reshape(fr_graph *g, int x, int rank, const int64_t *dims)
{
    char nm[64];
    snprintf(nm, sizeof nm, "shape_%d", g->n_values);
    return fr_gc_op1(g, "Reshape", 2, (int[]){x, ints(g, nm, rank, dims)});
}

static int transpose(fr_graph *g, int x, int rank, const int64_t *perm)
{
    int y, nid = fr_gc_node(g, "Transpose", "", 1, &x, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", rank, perm));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

static int rotary(fr_graph *g, const lcfg *c, int x, int cs, int sn)
{
    int y, nid = fr_gc_node(g, "Rotary", "ai.fp8run", 3, (int[]){x, cs, sn}, 1, &y);
    if (c->rd < c->D) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", c->rd));
    if (c->il) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "interleaved", 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

/* X [B, T, W] -> q, k, v as the exporters lay them out: per head [B, H, T, *], or sections as
 * [B, Hk, G, T, *] (G = Hq / Hk; 1 for K and V). */
static void split_qkv(fr_graph *g, const lcfg *c, int x, int *qkv)
{
    const int64_t B = c->B, T = c->T, D = c->D, Dv = c->Dv, Hk = c->Hk, G = c->Hq / c->Hk;
    if (c->heads) {
        const int64_t per = 2 * D + Dv, sizes[3] = {D, D, Dv};
        int xt = transpose(g, reshape(g, x, 4, (int64_t[]){B, T, c->Hq, per}), 4, (int64_t[]){0, 2, 1, 3});
        int nid = fr_gc_node(g, "Split", "", 2, (int[]){xt, ints(g, "sizes", 3, sizes)}, 3, qkv);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        return;
    }
    const int64_t sizes[3] = {c->Hq * D, Hk * D, Hk * Dv}, ax = -1;
    int s[3];
    if (c->slices) {
        int64_t at = 0;
        for (int i = 0; i < 3; i++) {
            char a[16], b[16], n[16];
            snprintf(a, sizeof a, "st%d", i);
            snprintf(b, sizeof b, "en%d", i);
            snprintf(n, sizeof n, "ax%d", i);
            const int64_t e = at + sizes[i];
            s[i] = fr_gc_op1(g, "Slice", 4, (int[]){x, ints(g, a, 1, &at), ints(g, b, 1, &e), ints(g, n, 1, &ax)});
            at = e;
        }
    } else {
        int nid = fr_gc_node(g, "Split", "", 2, (int[]){x, ints(g, "sizes", 3, sizes)}, 3, s);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 2));
        FR_ASSERT_OK(fr_node_infer(g, nid));
    }
    const int64_t perm[5] = {0, 2, 3, 1, 4};
    for (int i = 0; i < 3; i++) {
        const int64_t d5[5] = {B, T, Hk, i == 0 ? G : 1, i == 2 ? Dv : D};
        qkv[i] = transpose(g, reshape(g, s[i], 5, d5), 5, perm);
    }
}

/* The unfused chain on a fresh graph (dt float32 or float64): returns O [B, T, Hq Dv]; *x
 * the input X (differentiable), *cs, *sn the tables (-1 without RoPE; constants). */
static int build_chain(fr_graph *g, fr_rng *r, const lcfg *c, fr_dtype dt, int *x, int *cs, int *sn)
{
    FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
    *x = fr_gc_add_input(g, r, "X", dt, 3, (int64_t[]){c->B, c->T, width(c)}, NULL);
    *cs = *sn = -1;
    if (c->rd) {
        *cs = fr_gc_add_input(g, r, "cos", dt, 2, (int64_t[]){c->T, c->rd}, NULL);
        *sn = fr_gc_add_input(g, r, "sin", dt, 2, (int64_t[]){c->T, c->rd}, NULL);
        g->values[*cs].flags &= ~FR_VAL_PARAM; /* constants: no gradient */
        g->values[*sn].flags &= ~FR_VAL_PARAM;
    }
    int qkv[3];
    split_qkv(g, c, *x, qkv);
    if (c->rd) {
        qkv[0] = rotary(g, c, qkv[0], *cs, *sn);
        qkv[1] = rotary(g, c, qkv[1], *cs, *sn);
    }
    int ol[2], nid = fr_gc_node(g, "Attention", "ai.fp8run", 3, qkv, 2, ol), o = ol[0]; /* (LSE: the gradient's) */
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "causal", c->causal));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    const int64_t N = c->Hq * c->Dv;
    if (c->heads) return reshape(g, transpose(g, o, 4, (int64_t[]){0, 2, 1, 3}), 3, (int64_t[]){c->B, c->T, N});
    return reshape(g, transpose(g, o, 5, (int64_t[]){0, 3, 1, 2, 4}), 3, (int64_t[]){c->B, c->T, N});
}

static int count_op(const fr_graph *g, const char *op) { return fr_gc_count_nodes(g, op); }

static const fr_node *find_op(const fr_graph *g, const char *op)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0) return &g->nodes[i];
    return NULL;
}

/* The AttentionQKV node carries the packing and rotary_dim the layout needs. */
static void expect_attrs(const fr_node *n, int heads, int64_t rd, const char *what)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    const char *packing;
    int64_t got_rd;
    FR_ASSERT_OK(fr_node_attr_string(n, "packing", "sections", &packing));
    FR_ASSERT_OK(fr_node_attr_int(n, "rotary_dim", 0, &got_rd));
    const int ok = strcmp(packing, heads ? "heads" : "sections") == 0 && got_rd == rd;
    if (!ok) printf("\n  %s: packing %s, rotary_dim %lld", what, packing, (long long)got_rd);
    CU_ASSERT(ok);
}

/* O and dX of the chain (fused 0) or of the graph after the pass (fused 1), float32, the same
 * inputs and dO for both. */
static void run_chain(const lcfg *c, int fused, fr_tensor **o, fr_tensor **dx)
{
    fr_rng r = fr_test_rng("qkv_layout_chain");
    fr_graph *g = fr_gc_new_graph(18);
    CU_ASSERT_FATAL(g != NULL);
    int x, cs, sn, z = build_chain(g, &r, c, FR_F32, &x, &cs, &sn);
    const char *zname = g->values[z].name;
    char zn[256];
    snprintf(zn, sizeof zn, "%s", zname);
    if (fused) {
        int n = -1;
        FR_ASSERT_OK(fr_fuse_attention_io(g, &n));
        CU_ASSERT_EQUAL(n, 1);
        CU_ASSERT_EQUAL(count_op(g, "Rotary") + count_op(g, "Transpose") + count_op(g, "Split") + count_op(g, "Slice"), 0);
        expect_attrs(find_op(g, "AttentionQKV"), c->heads, c->rd && c->rd < c->D ? c->rd : 0, "chain");
        z = fr_graph_find_value(g, zn);
        x = fr_graph_find_value(g, "X");
        CU_ASSERT_FATAL(z >= 0 && x >= 0);
    }
    const int64_t no = c->B * c->T * c->Hq * c->Dv;
    double *dy = malloc(sizeof(double) * (size_t)no);
    CU_ASSERT_FATAL(dy != NULL);
    for (int64_t i = 0; i < no; i++) dy[i] = (float)fr_rng_normal(&r);
    int gv = -1;
    fr_tensor **t = fr_gc_backprop(g, z, dy, 1, &x, &gv);
    CU_ASSERT_FATAL(t != NULL && gv >= 0);
    if (fused) CU_ASSERT_EQUAL(count_op(g, "AttentionQKVGrad"), 1);
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, z), "O", o));
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, gv), "dX", dx));
    fr_gc_free_tensors(g, t);
    free(t);
    free(dy);
    fr_graph_free(g);
}

static int same_bits(const fr_tensor *a, const fr_tensor *b)
{
    return a->dtype == b->dtype && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static void test_chain_bits(void)
{
    for (int ci = 0; ci < N_CFGS; ci++) {
        fr_tensor *o0, *d0, *o1, *d1;
        run_chain(&k_cfgs[ci], 0, &o0, &d0);
        run_chain(&k_cfgs[ci], 1, &o1, &d1);
        const int ok_o = same_bits(o0, o1), ok_d = same_bits(d0, d1);
        if (!ok_o || !ok_d)
            printf("\n  config %d: O %s (%g), dX %s (%g)", ci, ok_o ? "same" : "differs", fr_gc_rel_l2(o1, o0),
                   ok_d ? "same" : "differs", fr_gc_rel_l2(d1, d0));
        CU_ASSERT(ok_o);
        CU_ASSERT(ok_d);
        fr_tensor *all[4] = {o0, d0, o1, d1};
        for (int i = 0; i < 4; i++) fr_tensor_free(all[i]);
    }
}

static void set_attrs(fr_node *n, const lcfg *c)
{
    FR_ASSERT_OK(fr_node_set_attr_int(n, "heads", c->Hq));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "kv_heads", c->Hk));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "head_dim", c->D));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", c->causal));
    if (c->heads) FR_ASSERT_OK(fr_node_set_attr_string(n, "packing", "heads"));
    if (c->rd && c->rd < c->D) FR_ASSERT_OK(fr_node_set_attr_int(n, "rotary_dim", c->rd));
    if (c->il) FR_ASSERT_OK(fr_node_set_attr_int(n, "interleaved", 1));
}

/* float64: the op built directly next to the chain computes the chain's O bit for bit; its
 * gradient against central differences. */
static void test_float64_gradient(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const lcfg *c = &k_cfgs[ci];
        fr_graph *g = fr_gc_new_graph(18);
        CU_ASSERT_FATAL(g != NULL);
        int x, cs, sn, z = build_chain(g, &r, c, FR_F64, &x, &cs, &sn), outs[2];
        const int nid = fr_gc_node(g, "AttentionQKV", "ai.fp8run", c->rd ? 3 : 1, (int[]){x, cs, sn}, 2, outs);
        set_attrs(&g->nodes[nid], c);
        FR_ASSERT_OK(fr_node_infer(g, nid));
        fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
        CU_ASSERT_FATAL(t != NULL);
        FR_ASSERT_OK(fr_gc_run(g, t));
        const int same = same_bits(fr_gc_value(g, t, outs[0]), fr_gc_value(g, t, z));
        if (!same) printf("\n  config %d: float64 O differs from the chain's", ci);
        CU_ASSERT(same);
        fr_gc_free_tensors(g, t);
        free(t);
        char what[64];
        snprintf(what, sizeof what, "AttentionQKV layout config %d", ci);
        fr_gc_check(g, &r, outs[0], 1, &x, what, 1e-6);
        fr_graph_free(g);
    }
}

/* The node fails in infer with an error containing what. */
static void expect_error(const lcfg *c, const char *attr, const char *sval, int64_t ival, int64_t table_w,
                         int norm, const char *what)
{
    fr_rng r = fr_test_rng(__func__);
    fr_tensor *x = tt_randn(&r, FR_F32, 3, (int64_t[]){c->B, c->T, width(c)}, 0, 1);
    fr_tensor *cs = tt_randn(&r, FR_F32, 2, (int64_t[]){c->T, table_w}, 0, 1);
    fr_tensor *sn = tt_randn(&r, FR_F32, 2, (int64_t[]){c->T, table_w}, 0, 1);
    fr_tensor *w = tt_randn(&r, FR_F32, 1, (int64_t[]){c->D}, 0, 1);
    fr_tensor *ins[7] = {x, cs, sn, NULL, NULL, w, w};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "AttentionQKV", 1, norm ? 7 : 3, ins, 0, 2);
    set_attrs(tn_node(&t), c);
    if (sval) TN_ATTR(&t, string, attr, sval);
    if (!sval && attr) TN_ATTR(&t, int, attr, ival);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error(what);
    tn_free(&t);
    fr_tensor *all[4] = {x, cs, sn, w};
    for (int i = 0; i < 4; i++) fr_tensor_free(all[i]);
}

static void test_errors(void)
{
    const lcfg heads = k_cfgs[0], gqa = k_cfgs[3];
    lcfg gqa_heads = gqa;
    gqa_heads.heads = 1;
    expect_error(&gqa_heads, NULL, NULL, 0, gqa.rd, 0, "needs heads == kv_heads");
    expect_error(&gqa, "packing", "interleaved", 0, gqa.rd, 0, "packing 'interleaved'");
    expect_error(&heads, "rotary_dim", NULL, 3, 3, 0, "rotary_dim=3");
    expect_error(&heads, "rotary_dim", NULL, 10, 10, 0, "rotary_dim=10");
    expect_error(&heads, NULL, NULL, 0, heads.D, 0, "rotary_dim=4"); /* tables D wide for 4 rotated */
    lcfg whole = heads;
    whole.rd = whole.D;
    expect_error(&whole, NULL, NULL, 0, whole.D, 1, "q/k norm takes packing \"sections\"");
}

/* ---- the fixtures ---- */

static fr_graph *compiled(const char *dir, int io, int *fused)
{
    fr_graph *g = fr_ft_load_hf(dir);
    int n = 0;
    FR_ASSERT_OK(fr_gather_to_slice(g, &n)); /* the pipeline's canonical Slices first */
    FR_ASSERT_OK(fr_hoist_slices(g, &n));
    FR_ASSERT_OK(fr_fuse_attention(g, &n));
    FR_ASSERT_OK(fr_fuse_rotary(g, &n));
    fr_fp8_options fo;
    fr_fp8_options_default(&fo);
    fo.precision = "bf16";
    fr_fp8_report rep;
    memset(&rep, 0, sizeof rep);
    FR_ASSERT_OK(fr_fp8_compile(g, &fo, &rep));
    fr_fp8_report_free(&rep);
    *fused = 0;
    if (io) FR_ASSERT_OK(fr_regroup_qkv_splits(g, &n)); /* (parallel blocks: the pipeline's order) */
    if (io) FR_ASSERT_OK(fr_fuse_attention_io(g, fused));
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    return g;
}

static void test_fixtures(void)
{
    static const struct {
        const char *dir;
        int heads;
        int64_t rd;
    } fx[] = {
        {"gpt_neox_op18_static", 1, 4},  {"gpt_neox_op23_static", 1, 4}, {"gpt_neox_op18_dynamic", 1, 4},
        {"gpt_neox_op23_dynamic", 1, 4}, {"phi3_op18_static", 0, 0},     {"phi3_op23_static", 0, 0},
        /* Phi: a parallel block, its q/k/v/fc1 Linears one Split (regrouped), partial rotary */
        {"phi_op18_static", 0, 8},       {"phi_op23_static", 0, 8},
        /* Falcon: multi-query K/V gathered from a head-major transpose (gather_to_slice,
           hoist_slices), a parallel block */
        {"falcon_op18_static", 0, 0},
    };
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        int fused = -1, none = -1;
        fr_graph *g1 = compiled(fx[i].dir, 1, &fused), *g0 = compiled(fx[i].dir, 0, &none);
        if (fused != 2) printf("\n  %s: %d fused", fx[i].dir, fused);
        CU_ASSERT_EQUAL(fused, 2);
        CU_ASSERT_EQUAL(count_op(g1, "AttentionQKV"), 2);
        static const char *const gone[] = {"Split", "Slice", "Concat", "Transpose", "Rotary", "Attention"};
        for (size_t k = fx[i].heads ? 0 : 1; k < sizeof gone / sizeof gone[0]; k++) { /* (Phi-3's MLP splits gate/up) */
            const int left = count_op(g1, gone[k]);
            if (left) printf("\n  %s: %d %s left", fx[i].dir, left, gone[k]);
            CU_ASSERT_EQUAL(left, 0);
        }
        expect_attrs(find_op(g1, "AttentionQKV"), fx[i].heads, fx[i].rd, fx[i].dir);
        /* inputs: input_ids, and attention_mask (all ones) where the export takes it */
        const int dyn = fr_graph_find_value(g1, "attention_mask") >= 0, n_in = dyn ? 2 : 1;
        static const char *const names[2] = {"input_ids", "attention_mask"};
        int ids1[2], ids0[2];
        fr_tensor *in[2] = {NULL, NULL};
        for (int k = 0; k < n_in; k++) {
            ids1[k] = fr_graph_find_value(g1, names[k]), ids0[k] = fr_graph_find_value(g0, names[k]);
            CU_ASSERT_FATAL(ids1[k] >= 0 && ids0[k] >= 0);
            char rel[160], p[600];
            snprintf(rel, sizeof rel, "hf/%s/input_%s.npy", fx[i].dir, names[k]);
            FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &in[k]));
        }
        const int lg[2] = {fr_graph_find_value(g1, "logits"), fr_graph_find_value(g0, "logits")};
        CU_ASSERT_FATAL(lg[0] >= 0 && lg[1] >= 0);
        fr_tensor *y1 = fr_ft_run(g1, n_in, ids1, (const fr_tensor *const *)in, lg[0]);
        fr_tensor *y0 = fr_ft_run(g0, n_in, ids0, (const fr_tensor *const *)in, lg[1]);
        const double e = fr_gc_rel_l2(y1, y0);
        if (!(e <= 1e-6)) printf("\n  %s: logits with the pass off by %g", fx[i].dir, e);
        CU_ASSERT(e <= 1e-6);
        fr_tensor_free(in[0]);
        fr_tensor_free(in[1]);
        fr_tensor_free(y1);
        fr_tensor_free(y0);
        fr_graph_free(g1);
        fr_graph_free(g0);
    }
}

/* The trainer's bf16 graph, classified (passes/fast_path.h): GPT-NeoX (every export) keeps no
 * attention-related node off the fast path, Phi-3 none at all. */
static void test_fast_path_reports(void)
{
    static const char *const dirs[] = {"gpt_neox_op18_static", "gpt_neox_op23_static", "gpt_neox_op18_dynamic",
                                       "gpt_neox_op23_dynamic", "phi3_op18_static",     "phi3_op23_static"};
    static const char *const around[] = {"Attention", "AttentionGrad", "Transpose", "Split", "Concat",
                                         "Slice",     "Rotary",        "RotaryGrad"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_graph *model = fr_ft_open_hf(dirs[i]);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.precision = "bf16";
        o.fp8.precision = "bf16";
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(model, &o, &t);
        if (st != FR_OK) printf("\n  %s: %s", dirs[i], fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        fr_slow_report r;
        FR_ASSERT_OK(fr_fast_path_check(t->g, &r));
        int n_around = 0;
        for (int k = 0; k < r.n_kinds; k++)
            for (size_t a = 0; a < sizeof around / sizeof around[0]; a++)
                if (strcmp(r.kinds[k].op, around[a]) == 0) {
                    printf("\n  %s: %d %s off the fast path: %s", dirs[i], r.kinds[k].count, r.kinds[k].op,
                           r.kinds[k].why);
                    n_around += r.kinds[k].count;
                }
        CU_ASSERT_EQUAL(n_around, 0);
        if (strncmp(dirs[i], "phi3", 4) == 0) CU_ASSERT_EQUAL(r.n_slow, 0);
        CU_ASSERT(count_op(t->g, "AttentionQKV") == 2 && count_op(t->g, "AttentionQKVGrad") == 2);
        CU_ASSERT(r.n_nodes > 40); /* forward and backward */
        fr_slow_report_free(&r);
        fr_trainer_free(t);
        fr_graph_free(model);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"per-head packing, Slices, partial rotary: fused == chain bit for bit (O, dX)", test_chain_bits},
        {"float64: == chain bit for bit; gradient vs central differences (1e-6)", test_float64_gradient},
        {"bad packing / rotary_dim / tables / norm: errors in infer", test_errors},
        {"GPT-NeoX and Phi-3 fixtures: fused with their packing, logits == pass off", test_fixtures},
        {"GPT-NeoX and Phi-3 trainers: nothing around attention off the fast path", test_fast_path_reports},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_qkv_layout", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
