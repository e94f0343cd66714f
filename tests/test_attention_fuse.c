/* The attention fusion pass (passes/attention_fuse.c):
 *  - the generated tiny Llama (GQA) and the exported fixtures fuse every layer after
 *    preparation (bert_tiny's mask comes from the attention_mask input: stays unfused);
 *  - hand-built graphs: the additive-mask and Where forms with a transposed-key Transpose fuse
 *    and compute the same O (1e-6); a mask that is not constant, probabilities read elsewhere,
 *    a mask with a fully masked row and a non-causal mask stay unfused;
 *  - CPU training, 20 steps: fused vs --no-fuse-attention losses within 1e-5 relative (fp32)
 *    and 1e-3 (bf16), and the bf16 report counts the fused blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/attention_fuse.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* Prepare for [batch, seq] inputs, fuse; returns the fused count (-1 on error). */
static int prepare_and_fuse_at(fr_graph *g, int64_t batch, int64_t seq)
{
    int c = -1;
    if (fr_ft_prepare(g, batch, seq) != FR_OK || fr_fuse_attention(g, &c) != FR_OK) {
        printf("\n  %s", fr_last_error());
        return -1;
    }
    return c;
}

static int prepare_and_fuse(fr_graph *g) { return prepare_and_fuse_at(g, 2, 16); }

static void test_generated_llama(void)
{
    fr_llama_config c = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 7};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&c, &g));
    CU_ASSERT_EQUAL(prepare_and_fuse(g), 3);
    CU_ASSERT_EQUAL(count_op(g, "Softmax"), 0);
    CU_ASSERT_EQUAL(count_op(g, "Attention"), 3);
    fr_graph_free(g);
}

/* At seq 1100 the [T, T] causal mask is past preparation's folding cap (1M elements): the pass
 * folds it itself to check it, and the mask's nodes go away with the fusion. */
static void test_long_sequence_mask(void)
{
    fr_llama_config c = {.d = 32, .layers = 2, .heads = 2, .kv_heads = 1, .ffn = 32, .vocab = 16, .max_seq = 1100, .seed = 5};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&c, &g));
    CU_ASSERT_EQUAL(prepare_and_fuse_at(g, 1, 1100), 2);
    CU_ASSERT_EQUAL(count_op(g, "Softmax"), 0);
    CU_ASSERT_EQUAL(count_op(g, "Trilu"), 0);
    CU_ASSERT_EQUAL(count_op(g, "Attention"), 2);
    fr_graph_free(g);
}

static void test_fixtures(void)
{
    static const struct {
        const char *path;
        int fused;
    } fx[] = {{"llama_tiny/model.onnx", 2}, {"llama_tiny_op14/model.onnx", 2}, {"gpt2_tiny/model.onnx", 2},
              {"gpt2_tiny_op13/model.onnx", 2}, {"bert_tiny/model.onnx", 0}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char p[600];
        fr_graph *g = NULL;
        FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, fx[i].path), &g));
        int n = prepare_and_fuse(g);
        if (n != fx[i].fused) printf("\n  %s: fused %d, expected %d", fx[i].path, n, fx[i].fused);
        CU_ASSERT_EQUAL(n, fx[i].fused);
        fr_graph_free(g);
    }
}

/* ---- hand-built graphs ---- */

enum { MASK_CAUSAL_ADD, MASK_CAUSAL_WHERE, MASK_INPUT, MASK_FULL_ROW, MASK_NOT_CAUSAL, P_READ_TWICE };

#define HB 2
#define HH 3
#define HT 5
#define HD 4

static int add_graph_input(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims)
{
    int v;
    FR_ASSERT_OK(fr_graph_add_value(g, name, &v));
    fr_value_set_shape(&g->values[v], dt, rank, dims);
    FR_ASSERT_OK(fr_graph_mark_input(g, v));
    return v;
}

/* scores = MatMul(Q, Transpose(K4, [0,2,3,1])) / 2, masked, Softmax, MatMul(P, V); K4 is
 * [B, T, H, D] as exports lay it out. Returns O (marked output). */
static int build(fr_graph *g, int kind, int *q, int *k4, int *v)
{
    int64_t dq[4] = {HB, HH, HT, HD}, dk[4] = {HB, HT, HH, HD};
    *q = add_graph_input(g, "Q", FR_F32, 4, dq);
    *k4 = add_graph_input(g, "K4", FR_F32, 4, dk);
    *v = add_graph_input(g, "V", FR_F32, 4, dq);
    int kt, nid = fr_gc_node(g, "Transpose", "", 1, k4, 1, &kt);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", 4, (int64_t[]){0, 2, 3, 1}));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int s = fr_gc_op1(g, "MatMul", 2, (int[]){*q, kt});
    double two = 2.0;
    s = fr_gc_op1(g, "Div", 2, (int[]){s, fr_gc_add_values(g, "two", FR_F32, 0, NULL, &two)});
    int64_t md[4] = {1, 1, HT, HT};
    double m[HT * HT];
    for (int i = 0; i < HT; i++)
        for (int j = 0; j < HT; j++) {
            int drop = kind == MASK_FULL_ROW ? (i == 0 || j > i) : kind == MASK_NOT_CAUSAL ? j == 0 && i == 3 : j > i;
            m[i * HT + j] = kind == MASK_CAUSAL_WHERE ? !drop : drop ? -3.4028234663852886e38 : 0.0;
        }
    if (kind == MASK_CAUSAL_WHERE) {
        int cb;
        fr_tensor *bt;
        FR_ASSERT_OK(fr_tensor_new(FR_BOOL, 4, md, "cond", &bt));
        for (int e = 0; e < HT * HT; e++) ((unsigned char *)bt->data)[e] = m[e] != 0;
        FR_ASSERT_OK(fr_graph_add_value(g, "cond", &cb));
        FR_ASSERT_OK(fr_graph_set_initializer(g, cb, bt)); /* a bool constant, as folding leaves it */
        double neg = -3.4028234663852886e38;
        s = fr_gc_op1(g, "Where", 3, (int[]){cb, s, fr_gc_add_values(g, "neg", FR_F32, 0, NULL, &neg)});
    } else if (kind == MASK_INPUT) {
        s = fr_gc_op1(g, "Add", 2, (int[]){s, add_graph_input(g, "mask", FR_F32, 4, md)});
    } else {
        s = fr_gc_op1(g, "Add", 2, (int[]){s, fr_gc_add_values(g, "mask", FR_F32, 4, md, m)});
    }
    int p, sn = fr_gc_node(g, "Softmax", "", 1, &s, 1, &p);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[sn], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, sn));
    int o = fr_gc_op1(g, "MatMul", 2, (int[]){p, *v});
    FR_ASSERT_OK(fr_graph_mark_output(g, o));
    if (kind == P_READ_TWICE) FR_ASSERT_OK(fr_graph_mark_output(g, p));
    return o;
}

static void check_kind(int kind, int want_fused)
{
    fr_rng r = fr_test_rng("attn_fuse_kinds");
    fr_graph *g = fr_gc_new_graph(17);
    int q, k4, v;
    int o = build(g, kind, &q, &k4, &v);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    int64_t dq[4] = {HB, HH, HT, HD}, dk[4] = {HB, HT, HH, HD};
    fr_tensor *ins[3];
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 4, dq, "Q", &ins[0]));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 4, dk, "K", &ins[1]));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 4, dq, "V", &ins[2]));
    for (int i = 0; i < 3; i++) fr_rng_fill_normal(&r, ins[i]->data, fr_tensor_numel(ins[i]), 1.0f);
    int vids[3] = {q, k4, v};
    fr_tensor *before = NULL, *after = NULL;
    if (kind != MASK_INPUT) before = fr_ft_run(g, 3, vids, (const fr_tensor *const *)ins, o);
    int n = -1;
    FR_ASSERT_OK(fr_fuse_attention(g, &n));
    CU_ASSERT_EQUAL(n, want_fused);
    CU_ASSERT_EQUAL(count_op(g, "Softmax"), !want_fused);
    if (kind != MASK_INPUT) {
        after = fr_ft_run(g, 3, vids, (const fr_tensor *const *)ins, o);
        double e = fr_rel_l2(after->data, before->data, fr_tensor_numel(before));
        if (e > 1e-6) printf("\n  kind %d: fused O differs by %g", kind, e);
        CU_ASSERT(e <= 1e-6);
    }
    for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
    fr_tensor_free(before);
    fr_tensor_free(after);
    fr_graph_free(g);
}

static void test_add_mask_fuses(void) { check_kind(MASK_CAUSAL_ADD, 1); }
static void test_where_mask_fuses(void) { check_kind(MASK_CAUSAL_WHERE, 1); }
static void test_mask_input_stays(void) { check_kind(MASK_INPUT, 0); }
static void test_full_row_stays(void) { check_kind(MASK_FULL_ROW, 0); }
static void test_not_causal_stays(void) { check_kind(MASK_NOT_CAUSAL, 0); }
static void test_p_read_twice_stays(void) { check_kind(P_READ_TWICE, 0); }

/* ---- training: fused vs unfused ---- */

static void train_losses(const fr_graph *g, const char *precision, int fuse, double *loss, int *n_attention)
{
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = precision;
    o.fuse_attention = fuse;
    o.narrow_activations = 0; /* the fusion alone (its fused Q/K/V is narrowed: test_narrow_activations) */
    fr_ft_train_losses(g, &o, loss, n_attention);
}

static void check_training(const char *precision, double tol)
{
    fr_llama_config c = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 3};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&c, &g));
    double fused[FR_FT_STEPS], plain[FR_FT_STEPS];
    int na_f, na_p;
    train_losses(g, precision, 1, fused, &na_f);
    train_losses(g, precision, 0, plain, &na_p);
    fr_ft_expect_same_losses(precision, fused, plain, tol);
    if (strcmp(precision, "fp32") != 0) {
        CU_ASSERT_EQUAL(na_f, 2);
        CU_ASSERT_EQUAL(na_p, 0);
    }
    fr_graph_free(g);
}

static void test_train_fp32(void) { check_training("fp32", 1e-5); }
static void test_train_bf16(void) { check_training("bf16", 1e-3); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"generated Llama: every layer fused", test_generated_llama},
        {"a mask past the folding cap (seq 1100) is folded by the pass and fused", test_long_sequence_mask},
        {"fixtures after preparation", test_fixtures},
        {"additive causal mask, transposed keys: fused, same O", test_add_mask_fuses},
        {"Where(causal bool, S, min) form: fused, same O", test_where_mask_fuses},
        {"mask from an input: not fused", test_mask_input_stays},
        {"mask with a fully masked row: not fused", test_full_row_stays},
        {"mask not causal: not fused", test_not_causal_stays},
        {"probabilities also a graph output: not fused", test_p_read_twice_stays},
        {"training fp32: fused == unfused (1e-5)", test_train_fp32},
        {"training bf16: fused == unfused (1e-3)", test_train_bf16},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_fuse", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
