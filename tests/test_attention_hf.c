/* The attention fusion on today's torch.onnx (dynamo) exports, tests/fixtures/hf (2 layers,
 * batch 2 x seq 11):
 *  - opset 18 (SDPA decomposed: the scale split over q and k^T, k^T through
 *    Reshape/Transpose/Reshape, an additive [2,1,11,11] mask, the IsNaN/Where guard, GQA's
 *    Expand): every layer fuses (Mistral's sliding window 6 onto window=6, BERT's all-zero mask
 *    onto no mask), and the fused graph's logits match PyTorch's output_logits.npy within 1e-4
 *    (relative L2 and max-abs over max-abs);
 *  - CPU training, 20 fp32 AdamW steps on the module parameters: fused and unfused losses agree
 *    within 1e-5 relative (the gradients of the fused op against the graph it replaced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_test_util.h"
#include "gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/attention_fuse.h"
#include "passes/passes.h"
#include "runtime/npy.h"
#include "runtime/trainer.h"

#define HF_B 2
#define HF_T 11
#define HF_LAYERS 2

static const char *const static18[] = {"llama", "qwen2", "mistral", "gpt2", "phi3", "gemma", "bert"};

static fr_tensor *load_npy(const char *dir, const char *file)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/%s", dir, file);
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &t));
    return t;
}

static fr_graph *load_model(const char *dir)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/model.onnx", dir);
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g));
    return g;
}

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* Fused count per layer, the window of the fused nodes, and the logits against PyTorch's. */
static void check_forward(const char *dir, int64_t want_window)
{
    fr_graph *g = load_model(dir);
    FR_ASSERT_OK(fr_ft_prepare(g, HF_B, HF_T));
    int n = -1;
    fr_status st = fr_fuse_attention(g, &n);
    if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    if (n != HF_LAYERS) printf("\n  %s: fused %d, expected %d", dir, n, HF_LAYERS);
    CU_ASSERT_EQUAL(n, HF_LAYERS);
    CU_ASSERT_EQUAL(count_op(g, "Softmax"), 0);
    CU_ASSERT_EQUAL(count_op(g, "IsNaN"), 0);
    for (int i = 0; i < g->n_nodes; i++) {
        if (strcmp(g->nodes[i].op_type, "Attention") != 0) continue;
        int64_t w = -1;
        FR_ASSERT_OK(fr_node_attr_int(&g->nodes[i], "window", 0, &w));
        CU_ASSERT_EQUAL(w, want_window);
    }
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    int ids = fr_graph_find_value(g, "input_ids"), logits = fr_graph_find_value(g, "logits");
    CU_ASSERT_FATAL(ids >= 0 && logits >= 0);
    fr_tensor *in = load_npy(dir, "input_input_ids.npy"), *ref = load_npy(dir, "output_logits.npy");
    fr_tensor *out = fr_ft_run(g, 1, &ids, (const fr_tensor *const *)&in, logits);
    const int64_t ne = fr_tensor_numel(ref);
    CU_ASSERT_FATAL(fr_tensor_numel(out) == ne);
    double worst = 0, top = 0;
    for (int64_t e = 0; e < ne; e++) {
        worst = fmax(worst, fabs(((float *)out->data)[e] - ((float *)ref->data)[e]));
        top = fmax(top, fabs(((float *)ref->data)[e]));
    }
    const double l2 = fr_rel_l2(out->data, ref->data, ne);
    if (l2 > 1e-4 || worst > 1e-4 * top) printf("\n  %s: logits off by %g (L2), %g (max)", dir, l2, worst / top);
    CU_ASSERT(l2 <= 1e-4);
    CU_ASSERT(worst <= 1e-4 * top);
    fr_tensor_free(in);
    fr_tensor_free(ref);
    fr_tensor_free(out);
    fr_graph_free(g);
}

static void test_forward_op18(void)
{
    for (size_t i = 0; i < sizeof static18 / sizeof static18[0]; i++) {
        char dir[64];
        snprintf(dir, sizeof dir, "%s_op18_static", static18[i]);
        check_forward(dir, strcmp(static18[i], "mistral") == 0 ? 6 : 0);
    }
}

/* 20 fp32 steps at the fixtures' fixed [2, 11], module parameters only (the exporter's folded
 * constants stay frozen), fused vs unfused. */
static void check_training(const char *dir)
{
    fr_graph *g = load_model(dir);
    double fused[FR_FT_STEPS], plain[FR_FT_STEPS];
    for (int fuse = 0; fuse < 2; fuse++) {
        fr_train_options o;
        fr_ft_train_options(&o);
        o.batch = HF_B;
        o.seq_len = HF_T;
        o.lr.max_lr = 1e-3;
        o.train_regex = "^(model|lm_head|transformer|bert|cls)\\.";
        o.fuse_attention = fuse;
        fr_ft_train_losses(g, &o, fuse ? fused : plain, NULL);
    }
    fr_ft_expect_same_losses(dir, fused, plain, 1e-5);
    fr_graph_free(g);
}

static void test_train_op18(void)
{
    check_training("llama_op18_static");   /* GQA */
    check_training("mistral_op18_static"); /* window */
    check_training("gpt2_op18_static");
    check_training("bert_op18_static"); /* no mask */
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"opset 18 static exports: every layer fused, logits = PyTorch's (1e-4)", test_forward_op18},
        {"opset 18 training fp32: fused == unfused (1e-5)", test_train_op18},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_hf", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
