/* The rotary fusion pass (passes/rotary_fuse.c):
 *  - the generated tiny Llama: every q and k RoPE fused after preparation (2 x layers Rotary,
 *    no Neg left), in the fp32 trainer (forward and backward: RotaryGrad) and the fp8 compiled
 *    graph; none with --no-fuse-attention;
 *  - the exported fixtures: llama_tiny and llama_tiny_op14 (two Slices with an INT64_MAX end,
 *    Neg, Concat, [1, 1, T, hd] folded tables) fuse 2 x 2 layers; gpt2/bert have no RoPE;
 *  - hand-built graphs: Slices, swapped operand orders, a Split, [1, 1, T, hd] tables fuse and
 *    (x [B, H, T, hd]) compute the same y (1e-6); the Neg read elsewhere, halves swapped (the inverse rotation),
 *    a trainable table and a table enlarging x stay unfused; the interleaved (GPT-J) stack form
 *    fuses to Rotary interleaved=1 (same y), its halves swapped does not;
 *  - the partial rotary: Concat(Rotary(x[..., :R]), x[..., R:]) fuses to Rotary rotary_dim=R
 *    (same y, 1e-6), other joins stay; the GPT-NeoX exports keep no Concat;
 *  - CPU training, 20 steps, fp32: RoPE fused vs unfused losses within 1e-5 relative (the
 *    attention unfused on both sides). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/rotary_fuse.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static const fr_llama_config k_llama = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 3};

static void test_generated_llama(void)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &g));
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 16));
    int n = -1;
    FR_ASSERT_OK(fr_fuse_rotary(g, &n));
    CU_ASSERT_EQUAL(n, 2 * k_llama.layers);
    CU_ASSERT_EQUAL(count_op(g, "Rotary"), 2 * k_llama.layers);
    CU_ASSERT_EQUAL(count_op(g, "Neg"), 0);
    CU_ASSERT_EQUAL(count_op(g, "Concat"), 0);
    fr_graph_free(g);
}

static void test_trainer_graphs(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    const int L = k_llama.layers;
    for (int fuse = 0; fuse < 2; fuse++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = 2;
        o.seq_len = 16;
        o.fuse_attention = fuse;
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
        CU_ASSERT_EQUAL(count_op(t->g, "Rotary"), fuse ? 2 * L : 0);
        CU_ASSERT_EQUAL(count_op(t->g, "RotaryGrad"), fuse ? 2 * L : 0);
        CU_ASSERT_EQUAL(count_op(t->g, "Neg") == 0, fuse);
        fr_trainer_free(t);
        /* the fp8 compiled graph */
        fr_graph *c = NULL;
        fr_fp8_report rep;
        memset(&rep, 0, sizeof rep);
        o.precision = "fp8";
        fr_status st = fr_train_compile_graph(model, &o, &c, &rep);
        if (st != FR_OK) printf("\n  fp8: %s", fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        /* (each AttentionQKV applies the RoPE of its layer's q and k) */
        CU_ASSERT_EQUAL(count_op(c, "Rotary") + 2 * count_op(c, "AttentionQKV"), fuse ? 2 * L : 0);
        fr_fp8_report_free(&rep);
        fr_graph_free(c);
    }
    fr_graph_free(model);
}

static void test_fixtures(void)
{
    static const struct {
        const char *path;
        int64_t seq;
        int fused;
    } fx[] = {{"llama_tiny/model.onnx", 13, 4}, {"llama_tiny_op14/model.onnx", 7, 4}, {"gpt2_tiny/model.onnx", 11, 0},
              {"gpt2_tiny_op13/model.onnx", 5, 0}, {"bert_tiny/model.onnx", 9, 0}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char p[600];
        fr_graph *g = NULL;
        FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, fx[i].path), &g));
        FR_ASSERT_OK(fr_ft_prepare(g, 2, fx[i].seq));
        int n = -1;
        FR_ASSERT_OK(fr_fuse_rotary(g, &n));
        if (n != fx[i].fused) printf("\n  %s: fused %d, expected %d", fx[i].path, n, fx[i].fused);
        CU_ASSERT_EQUAL(n, fx[i].fused);
        if (fx[i].fused) CU_ASSERT_EQUAL(count_op(g, "Neg"), 0);
        fr_graph_free(g);
    }
}

/* ---- hand-built patterns ---- */

enum {
    P_SLICES,     /* Add(Mul(x, cos), Mul(rot, sin)), two Slices */
    P_SWAPPED,    /* Add(Mul(sin, rot), Mul(cos, x)) */
    P_SPLIT,      /* halves from one Split */
    P_TABLE4,     /* cos/sin [1, 1, T, hd], x [B, H, T, hd] */
    P_NEG_READ,   /* Neg's output also a graph output */
    P_HALVES,     /* Concat(Neg(x1), x2): the inverse rotation */
    P_PARAM,      /* cos a trainable parameter */
    P_ENLARGE,    /* cos [2, 1, T, hd] against x [H, T, hd]: the product is larger than x */
    P_STACK,      /* interleaved: Reshape(Concat(Unsqueeze(Neg(x[1::2])), Unsqueeze(x[0::2]))) */
    P_STACK_SWAP  /* the same with x[0::2] and x[1::2] swapped: not RoPE's rotation */
};

#define HH 3
#define HT 5
#define HD 8

static int i64(fr_graph *g, const char *name, int64_t v)
{
    int64_t one = 1;
    return fr_gc_add_input(g, NULL, name, FR_I64, 1, &one, &v);
}

static int build(fr_graph *g, fr_rng *r, int kind, int *x)
{
    int64_t dx[4] = {2, HH, HT, HD}, dt[4] = {kind == P_ENLARGE ? 2 : 1, 1, HT, HD};
    const int xrank = kind == P_TABLE4 ? 4 : 3; /* [B,] H, T, hd */
    FR_ASSERT_OK(fr_graph_add_value(g, "X", x));
    fr_value_set_shape(&g->values[*x], FR_F32, xrank, dx + 4 - xrank);
    FR_ASSERT_OK(fr_graph_mark_input(g, *x));
    const int trank = kind == P_TABLE4 || kind == P_ENLARGE ? 4 : 2;
    const int64_t *td = trank == 4 ? dt : dt + 2;
    int C = fr_gc_add_input(g, r, "cos", FR_F32, trank, td, NULL), S = fr_gc_add_input(g, r, "sin", FR_F32, trank, td, NULL);
    if (kind == P_PARAM) g->values[C].flags |= FR_VAL_PARAM;
    int x1, x2;
    if (kind == P_STACK || kind == P_STACK_SWAP) {
        int ax = i64(g, "ax", -1), two = i64(g, "two", 2), e = i64(g, "end", INT64_MAX);
        x1 = fr_gc_op1(g, "Slice", 5, (int[]){*x, i64(g, "s0", 0), e, ax, two});
        x2 = fr_gc_op1(g, "Slice", 5, (int[]){*x, i64(g, "s1", 1), e, ax, two});
        if (kind == P_STACK_SWAP) {
            int t = x1;
            x1 = x2;
            x2 = t;
        }
        int u1 = fr_gc_op1(g, "Unsqueeze", 2, (int[]){fr_gc_op1(g, "Neg", 1, &x2), ax});
        int u2 = fr_gc_op1(g, "Unsqueeze", 2, (int[]){x1, ax}), st;
        int nid = fr_gc_node(g, "Concat", "", 2, (int[]){u1, u2}, 1, &st);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        const int64_t nd = xrank;
        int rot = fr_gc_op1(g, "Reshape", 2, (int[]){st, fr_gc_add_input(g, NULL, "shape", FR_I64, 1, &nd, dx + 4 - xrank)});
        int y = fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){*x, C}), fr_gc_op1(g, "Mul", 2, (int[]){rot, S})});
        FR_ASSERT_OK(fr_graph_mark_output(g, y));
        return y;
    }
    if (kind == P_SPLIT) {
        int outs[2], nid = fr_gc_node(g, "Split", "", 1, x, 2, outs);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "num_outputs", 2));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        x1 = outs[0];
        x2 = outs[1];
    } else {
        int ax = i64(g, "ax", -1);
        x1 = fr_gc_op1(g, "Slice", 4, (int[]){*x, i64(g, "s0", 0), i64(g, "e0", HD / 2), ax});
        x2 = fr_gc_op1(g, "Slice", 4, (int[]){*x, i64(g, "s1", -HD / 2), i64(g, "e1", INT64_MAX), ax});
    }
    if (kind == P_HALVES) {
        int t = x1;
        x1 = x2;
        x2 = t;
    }
    int neg = fr_gc_op1(g, "Neg", 1, &x2), rot;
    int nid = fr_gc_node(g, "Concat", "", 2, (int[]){neg, x1}, 1, &rot);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", xrank - 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    if (kind == P_NEG_READ) FR_ASSERT_OK(fr_graph_mark_output(g, neg));
    int y = kind == P_SWAPPED ? fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){S, rot}), fr_gc_op1(g, "Mul", 2, (int[]){C, *x})})
                              : fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){*x, C}), fr_gc_op1(g, "Mul", 2, (int[]){rot, S})});
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return y;
}

static void check_kind(int kind, int want_fused)
{
    fr_rng r = fr_test_rng("rotary_fuse_kinds");
    fr_graph *g = fr_gc_new_graph(18);
    CU_ASSERT_FATAL(g != NULL);
    int x, y = build(g, &r, kind, &x);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    fr_tensor *xin;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, g->values[x].rank, g->values[x].dims, "X", &xin));
    fr_rng_fill_normal(&r, xin->data, fr_tensor_numel(xin), 1.0f);
    fr_tensor *before = kind == P_ENLARGE ? NULL : fr_ft_run(g, 1, &x, (const fr_tensor *const *)&xin, y);
    int n = -1;
    FR_ASSERT_OK(fr_fuse_rotary(g, &n));
    if (n != want_fused) printf("\n  kind %d: %d fused", kind, n);
    CU_ASSERT_EQUAL(n, want_fused);
    CU_ASSERT_EQUAL(count_op(g, "Rotary"), want_fused);
    CU_ASSERT_EQUAL(count_op(g, "Neg"), !want_fused);
    if (kind == P_STACK && want_fused) CU_ASSERT_EQUAL(count_op(g, "Reshape") + count_op(g, "Unsqueeze"), 0);
    if (before) {
        y = fr_graph_find_value(g, g->values[y].name);
        fr_tensor *after = fr_ft_run(g, 1, &x, (const fr_tensor *const *)&xin, y);
        double e = fr_rel_l2(after->data, before->data, fr_tensor_numel(before));
        if (e > 1e-6) printf("\n  kind %d: fused y differs by %g", kind, e);
        CU_ASSERT(e <= 1e-6);
        fr_tensor_free(after);
    }
    fr_tensor_free(xin);
    fr_tensor_free(before);
    fr_graph_free(g);
}

static void test_slices(void) { check_kind(P_SLICES, 1); }
static void test_swapped(void) { check_kind(P_SWAPPED, 1); }
static void test_split(void) { check_kind(P_SPLIT, 1); }
static void test_table4(void) { check_kind(P_TABLE4, 1); }
static void test_neg_read(void) { check_kind(P_NEG_READ, 0); }
static void test_halves(void) { check_kind(P_HALVES, 0); }
static void test_param(void) { check_kind(P_PARAM, 0); }
static void test_enlarge(void) { check_kind(P_ENLARGE, 0); }
static void test_stack(void) { check_kind(P_STACK, 1); }
static void test_stack_swap(void) { check_kind(P_STACK_SWAP, 0); }

/* ---- the partial rotary ---- */

/* x [H, T, hd]: Concat(RoPE(x[..., :rd]), x[..., pass_from:]) with rd = 8 of hd = 12 (tables
 * [T, 8]); pass_from 8 is HF's partial rotary, anything else is not. */
static int build_partial(fr_graph *g, fr_rng *r, int64_t pass_from, int *x)
{
    const int64_t hd = 12, rd = 8, dx[3] = {HH, HT, hd}, dt[2] = {HT, rd};
    FR_ASSERT_OK(fr_graph_add_value(g, "X", x));
    fr_value_set_shape(&g->values[*x], FR_F32, 3, dx);
    FR_ASSERT_OK(fr_graph_mark_input(g, *x));
    int C = fr_gc_add_input(g, r, "cos", FR_F32, 2, dt, NULL), S = fr_gc_add_input(g, r, "sin", FR_F32, 2, dt, NULL);
    int ax = i64(g, "ax", -1), e = i64(g, "end", INT64_MAX);
    int xr = fr_gc_op1(g, "Slice", 4, (int[]){*x, i64(g, "r0", 0), i64(g, "r1", rd), ax});
    int xp = fr_gc_op1(g, "Slice", 4, (int[]){*x, i64(g, "p0", pass_from), e, ax});
    int x1 = fr_gc_op1(g, "Slice", 4, (int[]){xr, i64(g, "s0", 0), i64(g, "e0", rd / 2), ax});
    int x2 = fr_gc_op1(g, "Slice", 4, (int[]){xr, i64(g, "s1", rd / 2), e, ax});
    int rot, y, nid = fr_gc_node(g, "Concat", "", 2, (int[]){fr_gc_op1(g, "Neg", 1, &x2), x1}, 1, &rot);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int ry = fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){xr, C}), fr_gc_op1(g, "Mul", 2, (int[]){rot, S})});
    nid = fr_gc_node(g, "Concat", "", 2, (int[]){ry, xp}, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return y;
}

/* HF's partial rotary becomes one Rotary with rotary_dim 8 (same y); a pass-through part that
 * is not the rest of the head (x[..., 6:]: y is 14 wide) stays a Concat around a whole Rotary. */
static void test_partial(void)
{
    for (int k = 0; k < 2; k++) {
        fr_rng r = fr_test_rng("rotary_fuse_partial");
        fr_graph *g = fr_gc_new_graph(18);
        CU_ASSERT_FATAL(g != NULL);
        int x, y = build_partial(g, &r, k ? 6 : 8, &x);
        FR_ASSERT_OK(fr_graph_resolve_ops(g));
        fr_tensor *xin;
        FR_ASSERT_OK(fr_tensor_new(FR_F32, g->values[x].rank, g->values[x].dims, "X", &xin));
        fr_rng_fill_normal(&r, xin->data, fr_tensor_numel(xin), 1.0f);
        fr_tensor *before = fr_ft_run(g, 1, &x, (const fr_tensor *const *)&xin, y);
        int n = -1;
        FR_ASSERT_OK(fr_fuse_rotary(g, &n));
        CU_ASSERT_EQUAL(n, 1);
        CU_ASSERT_EQUAL(count_op(g, "Rotary"), 1);
        CU_ASSERT_EQUAL(count_op(g, "Concat"), k);
        CU_ASSERT_EQUAL(count_op(g, "Slice"), 2 * k);
        for (int i = 0; i < g->n_nodes; i++)
            if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, "Rotary") == 0) {
                int64_t rd = -1;
                FR_ASSERT_OK(fr_node_attr_int(&g->nodes[i], "rotary_dim", 0, &rd));
                CU_ASSERT_EQUAL(rd, k ? 0 : 8);
            }
        y = fr_graph_find_value(g, g->values[y].name);
        fr_tensor *after = fr_ft_run(g, 1, &x, (const fr_tensor *const *)&xin, y);
        const double e = fr_rel_l2(after->data, before->data, fr_tensor_numel(before));
        if (e > 1e-6) printf("\n  partial %d: fused y differs by %g", k, e);
        CU_ASSERT(e <= 1e-6);
        fr_tensor_free(after);
        fr_tensor_free(xin);
        fr_tensor_free(before);
        fr_graph_free(g);
    }
    /* the GPT-NeoX exports (rotary on a quarter of each head): 2 layers x q, k; no Concat left */
    static const char *const dirs[] = {"gpt_neox_op18_static", "gpt_neox_op23_static"};
    for (int i = 0; i < 2; i++) {
        fr_graph *g = fr_ft_load_hf(dirs[i]);
        int n = -1;
        FR_ASSERT_OK(fr_fuse_rotary(g, &n));
        CU_ASSERT_EQUAL(n, 4);
        CU_ASSERT_EQUAL(count_op(g, "Rotary"), 4);
        CU_ASSERT_EQUAL(count_op(g, "Concat"), 0);
        fr_graph_free(g);
    }
}

/* ---- training: RoPE fused vs unfused, attention unfused on both sides ---- */

static void test_train_fp32(void)
{
    fr_graph *plain = NULL, *fused = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &plain));
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &fused));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.fuse_attention = 0; /* only what the test fused itself differs */
    FR_ASSERT_OK(fr_ft_prepare(plain, o.batch, o.seq_len));
    FR_ASSERT_OK(fr_ft_prepare(fused, o.batch, o.seq_len));
    int n = -1;
    FR_ASSERT_OK(fr_fuse_rotary(fused, &n));
    CU_ASSERT_EQUAL(n, 2 * k_llama.layers);
    double lf[FR_FT_STEPS], lp[FR_FT_STEPS];
    fr_ft_train_losses(fused, &o, lf, NULL);
    fr_ft_train_losses(plain, &o, lp, NULL);
    double worst = fr_ft_expect_same_losses("fp32", lf, lp, 1e-5);
    printf(" (worst %.2g, loss %.4f -> %.4f) ", worst, lp[0], lp[FR_FT_STEPS - 1]);
    fr_graph_free(plain);
    fr_graph_free(fused);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"generated Llama: every q and k RoPE fused", test_generated_llama},
        {"trainer fp32 and fp8 compiled graphs; --no-fuse-attention keeps RoPE", test_trainer_graphs},
        {"fixtures after preparation", test_fixtures},
        {"two Slices: fused, same y", test_slices},
        {"swapped operand orders: fused, same y", test_swapped},
        {"halves from a Split: fused, same y", test_split},
        {"[1, 1, T, hd] tables: fused, same y", test_table4},
        {"Neg read elsewhere: not fused", test_neg_read},
        {"halves swapped (inverse rotation): not fused", test_halves},
        {"trainable table: not fused", test_param},
        {"table enlarging x: not fused", test_enlarge},
        {"interleaved (stack of x[1::2], x[0::2]): fused interleaved, same y", test_stack},
        {"interleaved halves swapped: not fused", test_stack_swap},
        {"partial rotary (Concat of a Rotary and the rest): one Rotary with rotary_dim, same y", test_partial},
        {"training fp32: RoPE fused == unfused (1e-5)", test_train_fp32},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"rotary_fuse", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
