/* ai.fp8run::AttentionQKV (ops/attention_qkv.h) and the pass that emits it
 * (passes/attention_io.h):
 *  - the CPU op against a float64 reference written out here (RoPE half / interleaved / none,
 *    [T, D] and [B, 1, T, D] tables, MHA / GQA / MQA, causal or not, Dv != D, 2-D output):
 *    1e-12 relative L2 on O and LSE;
 *  - its gradient (AttentionQKVGrad) against central differences, float64: 1e-6;
 *  - bfloat16 tensors (float32 computation): O, dO (and X) in bfloat16 give the float32 op's dX
 *    on the same values bit for bit; o_dtype / dx_dtype bfloat16 write the float32 op's O / dX
 *    rounded to bfloat16 bit for bit (LSE unchanged); bad combinations fail in infer;
 *  - the generated Llama and the HF dynamo fixtures, bf16 training graphs: one AttentionQKV
 *    (and one AttentionQKVGrad) per layer, no Split, Concat, Transpose, Rotary or RotaryGrad
 *    left (Phi-3's Slices of its qkv_proj and GPT-NeoX's per-head [q k v] packing with a partial
 *    rotary read as they are); logits of the fixtures with and
 *    without the pass equal within 1e-6, and 20 bf16 training steps give the same losses
 *    within 1e-6 relative (the op computes what the chain it replaces computed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_qkv.h"
#include "passes/attention_fuse.h"
#include "passes/attention_io.h"
#include "passes/fp8_compile.h"
#include "passes/rotary_fuse.h"
#include "graph/onnx_io.h"
#include "ops/grad.h"
#include "runtime/train/llama_gen.h"
#include "runtime/io/npy.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/op_harness.h"

typedef struct cfg {
    int64_t B, T, Hq, Hk, D, Dv;
    int rope;  /* 0 none, 1 half, 2 interleaved */
    int table; /* 2: [T, D]; 4: [B, 1, T, D] */
    int causal, flat;
    double softcap; /* the softcap attribute (0: none) */
    int seg;        /* segment ids: 0 none; 1 Sk = padding (batch b drops its last b keys), Sq absent;
                     * 2 Sk = Sq = packed example ids, int32 */
} cfg;

static const cfg k_cfgs[] = {
    {2, 5, 4, 2, 4, 4, 1, 2, 1, 0, 0.0, 0}, {2, 6, 4, 4, 6, 6, 2, 4, 1, 0, 0.0, 0},
    {1, 4, 3, 1, 4, 6, 0, 2, 0, 1, 0.0, 0}, {2, 3, 2, 1, 8, 8, 1, 4, 0, 1, 0.0, 0},
    {2, 7, 6, 3, 2, 2, 2, 2, 1, 0, 0.0, 0},
    {2, 6, 4, 2, 4, 4, 1, 2, 1, 0, 1.25, 1}, {2, 7, 2, 1, 6, 4, 0, 2, 0, 1, 0.0, 2},
    {2, 6, 4, 4, 4, 4, 2, 4, 1, 0, 0.5, 2},
};
#define N_CFGS ((int)(sizeof k_cfgs / sizeof k_cfgs[0]))

static int64_t width(const cfg *c) { return (c->Hq + c->Hk) * c->D + c->Hk * c->Dv; }

/* Segment id of token t of batch b (seg 1: the key's; 2: key's and query's). */
static int64_t seg_id(const cfg *c, int64_t b, int64_t t)
{
    if (c->seg == 1) return t < c->T - b ? 1 : 0;
    return t < 2 ? 1 : t < c->T - b ? 2 + b : 0; /* examples 1, 2 (+ b), then padding */
}

/* The Sk (which 0) or Sq (1) tensor of a config with segments, NULL where absent. */
static fr_tensor *seg_tensor(const cfg *c, int which)
{
    if (!c->seg || (which == 1 && c->seg == 1)) return NULL;
    fr_tensor *t;
    FR_ASSERT_OK(fr_tensor_new(c->seg == 2 ? FR_I32 : FR_I64, 2, (int64_t[]){c->B, c->T}, which ? "Sq" : "Sk", &t));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t i = 0; i < c->T; i++) {
            if (c->seg == 2)
                ((int32_t *)t->data)[b * c->T + i] = (int32_t)seg_id(c, b, i);
            else
                ((int64_t *)t->data)[b * c->T + i] = seg_id(c, b, i);
        }
    return t;
}

static void set_attrs(fr_node *n, const cfg *c)
{
    FR_ASSERT_OK(fr_node_set_attr_int(n, "heads", c->Hq));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "kv_heads", c->Hk));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "head_dim", c->D));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", c->causal));
    if (c->rope == 2) FR_ASSERT_OK(fr_node_set_attr_int(n, "interleaved", 1));
    if (c->flat) FR_ASSERT_OK(fr_node_set_attr_int(n, "flat_output", 1));
    if (c->softcap > 0) FR_ASSERT_OK(fr_node_set_attr_float(n, "softcap", (float)c->softcap));
    if (c->seg) FR_ASSERT_OK(fr_node_set_attr_string(n, "seg_form", c->seg == 1 ? "padded" : "packed"));
}

/* RoPE of head row x (D) at token t of batch b, in double. */
static void rope_ref(const cfg *c, const double *x, const fr_tensor *cs, const fr_tensor *sn, int64_t b, int64_t t,
                     double *y)
{
    memcpy(y, x, sizeof(double) * (size_t)c->D);
    if (!c->rope) return;
    const int64_t base = (c->table == 4 ? b * c->T * c->D : 0) + t * c->D, h = c->D / 2;
    const double *C = (const double *)cs->data + base, *S = (const double *)sn->data + base;
    for (int64_t p = 0; p < h; p++) {
        const int64_t j = c->rope == 2 ? 2 * p : p, k = c->rope == 2 ? j + 1 : p + h;
        y[j] = x[j] * C[j] - x[k] * S[j];
        y[k] = x[k] * C[k] + x[j] * S[k];
    }
}

/* O [B, T, Hq Dv] and LSE [B, Hq, T] written out. */
static void attn_ref(const cfg *c, const fr_tensor *X, const fr_tensor *cs, const fr_tensor *sn, double *O, double *L)
{
    const int64_t W = width(c), G = c->Hq / c->Hk, D = c->D, Dv = c->Dv;
    const double *x = X->data, scale = (float)(1.0 / sqrt((double)D)); /* the attribute's float */
    double q[64], k[64], s[64];
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->T; i++) {
                const int64_t kh = h / G;
                rope_ref(c, x + (b * c->T + i) * W + h * D, cs, sn, b, i, q);
                const int64_t n = c->causal ? i + 1 : c->T;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < n; j++) {
                    rope_ref(c, x + (b * c->T + j) * W + (c->Hq + kh) * D, cs, sn, b, j, k);
                    double d = 0;
                    for (int64_t e = 0; e < D; e++) d += q[e] * k[e];
                    s[j] = d * scale;
                    if (c->softcap > 0) s[j] = (float)c->softcap * tanh(s[j] / (float)c->softcap);
                    const int64_t qid = c->seg == 2 ? seg_id(c, b, i) : 1;
                    if (c->seg && seg_id(c, b, j) != qid) s[j] = -INFINITY;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
                L[(b * c->Hq + h) * c->T + i] = m + log(sum);
                double *o = O + (b * c->T + i) * c->Hq * Dv + h * Dv;
                for (int64_t e = 0; e < Dv; e++) o[e] = 0;
                for (int64_t j = 0; j < n; j++) {
                    const double p = exp(s[j] - m) / sum, *v = x + (b * c->T + j) * W + (c->Hq + c->Hk) * D + kh * Dv;
                    for (int64_t e = 0; e < Dv; e++) o[e] += p * v[e];
                }
            }
}

static void tables(fr_rng *r, const cfg *c, fr_tensor **cs, fr_tensor **sn)
{
    const int64_t d2[2] = {c->T, c->D}, d4[4] = {c->B, 1, c->T, c->D};
    const int rank = c->table == 4 ? 4 : 2;
    const int64_t *d = rank == 4 ? d4 : d2;
    *cs = tt_randn(r, FR_F64, rank, d, 0, 1);
    *sn = tt_randn(r, FR_F64, rank, d, 0, 1);
}

static void test_forward(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const cfg *c = &k_cfgs[ci];
        fr_tensor *x = tt_randn(&r, FR_F64, 3, (int64_t[]){c->B, c->T, width(c)}, 0, 1), *cs = NULL, *sn = NULL;
        tables(&r, c, &cs, &sn);
        fr_tensor *sk = seg_tensor(c, 0), *sq = seg_tensor(c, 1);
        fr_tensor *ins[5] = {x, c->rope ? cs : NULL, c->rope ? sn : NULL, sk, sq};
        tnode t;
        tn_init_domain(&t, "ai.fp8run", "AttentionQKV", 1, sq ? 5 : sk ? 4 : c->rope ? 3 : 1, ins, 0, 2);
        set_attrs(tn_node(&t), c);
        FR_ASSERT_OK(tn_run(&t));
        const int64_t no = c->B * c->T * c->Hq * c->Dv, nl = c->B * c->Hq * c->T;
        double *O = malloc(sizeof(double) * (size_t)no), *L = malloc(sizeof(double) * (size_t)nl);
        CU_ASSERT_FATAL(O && L);
        attn_ref(c, x, cs, sn, O, L);
        tt_assert_shape(t.out[0], FR_F64, c->flat ? 2 : 3,
                        c->flat ? (int64_t[]){c->B * c->T, c->Hq * c->Dv} : (int64_t[]){c->B, c->T, c->Hq * c->Dv});
        tt_assert_shape(t.out[1], FR_F64, 3, (int64_t[]){c->B, c->Hq, c->T});
        const double eo = tt_rel_err(t.out[0], O, no), el = tt_rel_err(t.out[1], L, nl);
        if (!(eo <= 1e-12 && el <= 1e-12)) printf("\n  config %d: O off by %g, LSE by %g", ci, eo, el);
        CU_ASSERT(eo <= 1e-12);
        CU_ASSERT(el <= 1e-12);
        free(O);
        free(L);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(cs);
        fr_tensor_free(sn);
        fr_tensor_free(sk);
        fr_tensor_free(sq);
    }
}

static void test_gradient(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const cfg *c = &k_cfgs[ci];
        fr_graph *g = fr_gc_new_graph(18);
        CU_ASSERT_FATAL(g != NULL);
        FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
        const int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, (int64_t[]){c->B, c->T, width(c)}, NULL);
        fr_tensor *cs = NULL, *sn = NULL;
        tables(&r, c, &cs, &sn);
        const int cv = fr_gc_add_values(g, "cos", FR_F64, cs->rank, cs->dims, cs->data);
        const int sv = fr_gc_add_values(g, "sin", FR_F64, sn->rank, sn->dims, sn->data);
        fr_tensor_free(cs);
        fr_tensor_free(sn);
        g->values[cv].flags &= ~FR_VAL_PARAM; /* constants: no gradient */
        g->values[sv].flags &= ~FR_VAL_PARAM;
        int outs[2], segs[2] = {-1, -1};
        for (int w = 0; w < 2; w++) {
            fr_tensor *st = seg_tensor(c, w);
            if (!st) continue;
            int64_t ids[64];
            for (int64_t e = 0; e < c->B * c->T; e++) ids[e] = fr_tensor_get_i64(st, e);
            segs[w] = fr_gc_add_input(g, &r, w ? "Sq" : "Sk", st->dtype, 2, st->dims, ids);
            fr_tensor_free(st);
        }
        const int n_in = segs[1] >= 0 ? 5 : segs[0] >= 0 ? 4 : c->rope ? 3 : 1;
        const int nid = fr_gc_node(g, "AttentionQKV", "ai.fp8run", n_in,
                                   (int[]){x, c->rope ? cv : -1, c->rope ? sv : -1, segs[0], segs[1]}, 2, outs);
        set_attrs(&g->nodes[nid], c);
        FR_ASSERT_OK(fr_node_infer(g, nid));
        char what[64];
        snprintf(what, sizeof what, "AttentionQKV config %d", ci);
        fr_gc_check(g, &r, outs[0], 1, &x, what, 1e-6);
        if (c->seg) { /* the gradient node reads the segment ids where the forward had them */
            int found = 0;
            for (int i = 0; i < g->n_nodes; i++)
                if (strcmp(g->nodes[i].op_type, "AttentionQKVGrad") == 0) {
                    found = 1;
                    CU_ASSERT(g->nodes[i].n_inputs == (segs[1] >= 0 ? 8 : 7) && g->nodes[i].inputs[6] == segs[0]);
                }
            CU_ASSERT(found);
        }
        fr_graph_free(g);
    }
}

/* ---- bfloat16 O, dO, o_dtype, dx_dtype ---- */

/* t's values rounded to bfloat16: *b the bfloat16 tensor, *w the float32 one of the same values */
static void bf16_pair(const fr_tensor *t, fr_tensor **b, fr_tensor **w)
{
    *b = tt_new(FR_BF16, t->rank, t->dims);
    *w = tt_new(FR_F32, t->rank, t->dims);
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        const uint16_t h = fr_f32_to_bf16(((const float *)t->data)[i]);
        ((uint16_t *)(*b)->data)[i] = h;
        ((float *)(*w)->data)[i] = fr_bf16_to_f32(h);
    }
}

static int same_bits(const fr_tensor *a, const fr_tensor *b)
{
    return a->dtype == b->dtype && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* y (bfloat16) is f (float32) rounded to nearest even, element for element */
static int is_rounding(const fr_tensor *y, const fr_tensor *f)
{
    if (y->dtype != FR_BF16 || f->dtype != FR_F32 || fr_tensor_numel(y) != fr_tensor_numel(f)) return 0;
    for (int64_t i = 0; i < fr_tensor_numel(f); i++)
        if (((const uint16_t *)y->data)[i] != fr_f32_to_bf16(((const float *)f->data)[i])) return 0;
    return 1;
}

/* One forward (o_bf16: o_dtype bfloat16): *o, *lse handed to the caller. */
static void qkv_fwd(const cfg *c, fr_tensor *x, fr_tensor *cs, fr_tensor *sn, int o_bf16, fr_tensor **o,
                    fr_tensor **lse)
{
    fr_tensor *ins[3] = {x, cs, sn};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "AttentionQKV", 1, c->rope ? 3 : 1, ins, 0, 2);
    set_attrs(tn_node(&t), c);
    if (o_bf16) TN_ATTR(&t, string, "o_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    *o = t.out[0], *lse = t.out[1];
    t.out[0] = t.out[1] = NULL;
    tn_free(&t);
}

static fr_tensor *qkv_bwd(const cfg *c, fr_tensor *x, fr_tensor *o, fr_tensor *lse, fr_tensor *dout, fr_tensor *cs,
                          fr_tensor *sn, int dx_bf16)
{
    fr_tensor *ins[6] = {x, o, lse, dout, cs, sn};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "AttentionQKVGrad", 1, c->rope ? 6 : 4, ins, 0, 1);
    set_attrs(tn_node(&t), c);
    if (dx_bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *dx = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return dx;
}

static void test_bf16_io(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const cfg *c = &k_cfgs[ci];
        fr_tensor *x = tt_randn(&r, FR_F32, 3, (int64_t[]){c->B, c->T, width(c)}, 0, 1), *xb, *xw;
        bf16_pair(x, &xb, &xw);
        const int64_t d2[2] = {c->T, c->D}, d4[4] = {c->B, 1, c->T, c->D};
        fr_tensor *cs = tt_randn(&r, FR_F32, c->table == 4 ? 4 : 2, c->table == 4 ? d4 : d2, 0, 1);
        fr_tensor *sn = tt_randn(&r, FR_F32, cs->rank, cs->dims, 0, 1);
        fr_tensor *o32, *l32, *o16, *l16, *o16x, *l16x;
        qkv_fwd(c, xw, cs, sn, 0, &o32, &l32);
        qkv_fwd(c, xw, cs, sn, 1, &o16, &l16);
        qkv_fwd(c, xb, cs, sn, 1, &o16x, &l16x); /* bfloat16 X too */
        if (!is_rounding(o16, o32)) printf("\n  config %d: o_dtype bfloat16 is not O rounded", ci);
        CU_ASSERT(is_rounding(o16, o32));
        CU_ASSERT(same_bits(l16, l32));
        CU_ASSERT(same_bits(o16x, o16));
        CU_ASSERT(same_bits(l16x, l32));
        fr_tensor *ob, *ow, *dob, *dow;
        bf16_pair(o32, &ob, &ow);
        fr_tensor *d = tt_randn(&r, FR_F32, o32->rank, o32->dims, 0, 1);
        bf16_pair(d, &dob, &dow);
        fr_tensor *ref = qkv_bwd(c, xw, ow, l32, dow, cs, sn, 0);
        tt_assert_shape(ref, FR_F32, 3, x->dims);
        for (int m = 0; m < 8; m++) { /* bit 0: O bfloat16, 1: dO, 2: X */
            fr_tensor *xi = m & 4 ? xb : xw, *oi = m & 1 ? ob : ow, *di = m & 2 ? dob : dow;
            fr_tensor *g32 = qkv_bwd(c, xi, oi, l32, di, cs, sn, 0), *g16 = qkv_bwd(c, xi, oi, l32, di, cs, sn, 1);
            const int ok32 = same_bits(g32, ref), ok16 = is_rounding(g16, ref);
            if (!ok32 || !ok16) printf("\n  config %d, bf16 inputs %d: dX %s, dx_dtype bfloat16 %s", ci, m,
                                       ok32 ? "ok" : "differs", ok16 ? "ok" : "is not dX rounded");
            CU_ASSERT(ok32);
            CU_ASSERT(ok16);
            fr_tensor_free(g32);
            fr_tensor_free(g16);
        }
        fr_tensor *all[] = {x, xb, xw, cs, sn, o32, l32, o16, l16, o16x, l16x, ob, ow, d, dob, dow, ref};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
    }
}

/* The node under test fails in infer with an error containing what. */
static void expect_infer_error(tnode *t, const char *what)
{
    CU_ASSERT_NOT_EQUAL(tn_run(t), FR_OK);
    tn_assert_error(what);
    tn_free(t);
}

static void test_bf16_errors(void)
{
    fr_rng r = fr_test_rng(__func__);
    const cfg *c = &k_cfgs[2]; /* no RoPE */
    const int64_t xd[3] = {c->B, c->T, width(c)}, od[2] = {c->B * c->T, c->Hq * c->Dv}, ld[3] = {c->B, c->Hq, c->T};
    fr_tensor *x32 = tt_randn(&r, FR_F32, 3, xd, 0, 1), *x64 = tt_randn(&r, FR_F64, 3, xd, 0, 1);
    fr_tensor *o16 = tt_new(FR_BF16, 2, od), *o64 = tt_randn(&r, FR_F64, 2, od, 0, 1);
    fr_tensor *l32 = tt_randn(&r, FR_F32, 3, ld, 0, 1), *l64 = tt_randn(&r, FR_F64, 3, ld, 0, 1);
    fr_tensor *l16 = tt_new(FR_BF16, 3, ld), *o32 = tt_randn(&r, FR_F32, 2, od, 0, 1);
    static const char *const fattr[3] = {"o_dtype", "o_dtype", NULL};
    static const char *const fval[3] = {"float16", "bfloat16", NULL};
    static const char *const fwant[2] = {"o_dtype 'float16' is not one of float32, bfloat16",
                                         "o_dtype bfloat16 needs a float32 computation"};
    for (int i = 0; i < 2; i++) { /* a bad value; bfloat16 O from a float64 computation */
        tnode t;
        tn_init_domain(&t, "ai.fp8run", "AttentionQKV", 1, 1, (fr_tensor *[]){i ? x64 : x32}, 0, 2);
        set_attrs(tn_node(&t), c);
        TN_ATTR(&t, string, fattr[i], fval[i]);
        expect_infer_error(&t, fwant[i]);
    }
    struct {
        fr_tensor *x, *o, *l, *d;
        const char *dx, *want;
    } bad[] = {
        {x32, o32, l32, o32, "float16", "dx_dtype 'float16' is not one of float32, bfloat16"},
        {x64, o64, l64, o64, "bfloat16", "dx_dtype bfloat16 needs a float32 computation"},
        {x64, o16, l64, o64, NULL, "expected float64"},  /* bfloat16 O for a float64 computation */
        {x64, o64, l64, o16, NULL, "expected float64"},  /* and dO */
        {x32, o32, l16, o32, NULL, "expected float32"},  /* LSE stays float32 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tnode t;
        tn_init_domain(&t, "ai.fp8run", "AttentionQKVGrad", 1, 4, (fr_tensor *[]){bad[i].x, bad[i].o, bad[i].l, bad[i].d},
                       0, 1);
        set_attrs(tn_node(&t), c);
        if (bad[i].dx) TN_ATTR(&t, string, "dx_dtype", bad[i].dx);
        expect_infer_error(&t, bad[i].want);
    }
    fr_tensor *all[] = {x32, x64, o16, o64, l32, l64, l16, o32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* A bf16 trainer's graph (fuse_attention_io on): per layer one AttentionQKV and its gradient,
 * none of the layout ops around attention (want_fused 0: the pass leaves the graph). */
static void check_trainer_graph(const char *what, const fr_graph *model, const fr_train_options *base, int layers,
                                int want_fused)
{
    fr_train_options o = *base;
    o.precision = "bf16";
    o.fp8.precision = "bf16";
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s: %s", what, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    const int n = count_op(t->g, "AttentionQKV");
    if (n != (want_fused ? layers : 0)) printf("\n  %s: %d AttentionQKV nodes", what, n);
    CU_ASSERT_EQUAL(n, want_fused ? layers : 0);
    CU_ASSERT_EQUAL(count_op(t->g, "AttentionQKVGrad"), want_fused ? layers : 0);
    if (want_fused) {
        static const char *const gone[] = {"Split", "Concat", "Transpose", "Rotary", "RotaryGrad", "Attention"};
        for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) {
            const int left = count_op(t->g, gone[i]);
            if (left) printf("\n  %s: %d %s left", what, left, gone[i]);
            CU_ASSERT_EQUAL(left, 0);
        }
    }
    fr_trainer_free(t);
}

/* 20 bf16 steps with and without the pass: the same losses. */
static void check_losses(const char *what, const fr_graph *model, const fr_train_options *base)
{
    double loss[2][FR_FT_STEPS];
    for (int on = 0; on < 2; on++) {
        fr_train_options o = *base;
        o.precision = "bf16";
        o.fp8.precision = "bf16";
        o.fuse_attention_io = on;
        o.narrow_activations = 0; /* the fusion alone (a bf16 Q/K/V: test_narrow_activations) */
        fr_ft_train_losses(model, &o, loss[on], NULL);
    }
    fr_ft_expect_same_losses(what, loss[1], loss[0], 1e-6);
}

static const fr_llama_config k_llama = {64, 2, 4, 2, 176, 128, 64, 3};

static void test_generated_llama(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    CU_ASSERT_EQUAL(o.fuse_attention_io, 1); /* on by default (faster on an H200: bench/README) */
    check_trainer_graph("llama, pass on by default", model, &o, (int)k_llama.layers, 1);
    o.fuse_attention_io = 1;
    check_trainer_graph("llama", model, &o, (int)k_llama.layers, 1);
    o.fuse_attention_io = 0;
    check_trainer_graph("llama, pass off", model, &o, (int)k_llama.layers, 0);
    o.fuse_attention_io = 1;
    o.fp8.fuse = 0; /* separate Q/K/V Linears: no Split to read through */
    check_trainer_graph("llama, --no-fuse", model, &o, (int)k_llama.layers, 0);
    fr_ft_train_options(&o);
    check_losses("llama", model, &o);
    fr_graph_free(model);
}

/* The fixture prepared, attention and RoPE fused, compiled for bf16; the pass on or not. */
static fr_graph *hf_compiled(const char *dir, int io, int *fused)
{
    fr_graph *g = fr_ft_load_hf(dir);
    int n = 0;
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
    if (io) FR_ASSERT_OK(fr_fuse_attention_io(g, fused));
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    return g;
}

static void test_hf_fixtures(void)
{
    static const char *const archs[] = {"llama", "qwen2", "mistral", "gemma", "gpt2", "bert", "phi3", "gpt_neox"};
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
        for (int opset = 18; opset <= 23; opset += 5) {
            char dir[64];
            snprintf(dir, sizeof dir, "%s_op%d_static", archs[a], opset);
            const int want = 2;
            int fused = -1, none = -1;
            fr_graph *g1 = hf_compiled(dir, 1, &fused), *g0 = hf_compiled(dir, 0, &none);
            if (fused != want) printf("\n  %s: %d fused, %d expected", dir, fused, want);
            CU_ASSERT_EQUAL(fused, want);
            CU_ASSERT_EQUAL(count_op(g1, "AttentionQKV"), want);
            if (want) { /* (the Splits left are the MLPs' gate/up: SwiGLU is not fused here) */
                CU_ASSERT_EQUAL(count_op(g1, "Transpose"), 0);
                CU_ASSERT_EQUAL(count_op(g1, "Rotary"), 0);
                CU_ASSERT(count_op(g0, "Transpose") > 0);
            }
            const int ids[2] = {fr_graph_find_value(g1, "input_ids"), fr_graph_find_value(g0, "input_ids")};
            const int lg[2] = {fr_graph_find_value(g1, "logits"), fr_graph_find_value(g0, "logits")};
            CU_ASSERT_FATAL(ids[0] >= 0 && ids[1] >= 0 && lg[0] >= 0 && lg[1] >= 0);
            char rel[128], p[600];
            snprintf(rel, sizeof rel, "hf/%s/input_input_ids.npy", dir);
            fr_tensor *in = NULL;
            FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &in));
            fr_tensor *y1 = fr_ft_run(g1, 1, &ids[0], (const fr_tensor *const *)&in, lg[0]);
            fr_tensor *y0 = fr_ft_run(g0, 1, &ids[1], (const fr_tensor *const *)&in, lg[1]);
            const double e = fr_gc_rel_l2(y1, y0);
            if (!(e <= 1e-6)) printf("\n  %s: logits with the pass off by %g", dir, e);
            CU_ASSERT(e <= 1e-6);
            fr_tensor_free(in);
            fr_tensor_free(y1);
            fr_tensor_free(y0);
            fr_graph_free(g1);
            fr_graph_free(g0);
        }
}

/* Training through the trainer on two fixtures (GQA with RoPE; GPT-2's 2-D rows, no RoPE). */
static void test_hf_training(void)
{
    static const char *const dirs[] = {"llama_op18_static", "gpt2_op18_static"};
    for (int i = 0; i < 2; i++) {
        fr_graph *g = fr_ft_open_hf(dirs[i]);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.lr.max_lr = 1e-3;
        o.fuse_attention_io = 1;
        check_trainer_graph(dirs[i], g, &o, 2, 1);
        check_losses(dirs[i], g, &o);
        fr_graph_free(g);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"CPU op vs float64 reference (1e-12)", test_forward},
        {"gradient vs central differences (1e-6)", test_gradient},
        {"bfloat16 O/dO/X == float32 bit for bit; o_dtype/dx_dtype == rounding", test_bf16_io},
        {"bfloat16: bad combinations fail in infer", test_bf16_errors},
        {"generated Llama: fused per layer, losses == pass off", test_generated_llama},
        {"HF fixtures: fused, logits == pass off", test_hf_fixtures},
        {"HF training: losses == pass off", test_hf_training},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_qkv", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
