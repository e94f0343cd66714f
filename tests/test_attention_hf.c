/* The attention fusion on today's torch.onnx (dynamo) exports, tests/fixtures/hf (2 layers,
 * batch 2 x seq 11):
 *  - opset 18 (SDPA decomposed: the scale split over q and k^T, k^T through
 *    Reshape/Transpose/Reshape, an additive [2,1,11,11] mask, the IsNaN/Where guard, GQA's
 *    Expand, read through: no Expand is left): every layer fuses (Mistral's sliding window 6 onto window=6, BERT's all-zero mask
 *    onto no mask), and the fused graph's logits match PyTorch's output_logits.npy within 1e-4
 *    (relative L2 and max-abs over max-abs);
 *  - CPU training, 20 fp32 AdamW steps on the module parameters: fused and unfused losses agree
 *    within 1e-5 relative (the gradients of the fused op against the graph it replaced). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "ops/op.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/attention_fuse.h"
#include "passes/passes.h"
#include "runtime/io/npy.h"
#include "runtime/train/trainer.h"

#define HF_B 2
#define HF_T 11
#define HF_LAYERS 2

static const char *const archs[] = {"llama", "qwen2", "mistral", "gpt2", "phi3", "gemma", "bert"};

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

static int count_op(const fr_graph *g, const char *op, const char *domain)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0 && strcmp(g->nodes[i].domain, domain) == 0;
    return n;
}

/* The logits of dir's model at [2, 11] for its inputs (input_ids, and attention_mask when it has
 * one: `pad` zeros its first `pad` columns of row 1, a left-padded row), fused or not. Checks the
 * fused count (every layer) and the window of the fused nodes. */
static fr_tensor *logits_of(const char *dir, int fuse, int64_t want_window, int pad)
{
    fr_graph *g = load_model(dir);
    fr_status st = fr_ft_prepare(g, HF_B, HF_T); /* opset 23: lowers Attention */
    if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    CU_ASSERT_EQUAL(count_op(g, "Attention", ""), 0);
    for (int i = 0; i < g->n_values; i++) g->values[i].flags &= ~FR_VAL_PARAM; /* inference: none trained */
    if (fuse) {
        int n = -1;
        st = fr_fuse_attention(g, &n);
        if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        n = count_op(g, "Attention", "ai.fp8run");
        if (n != HF_LAYERS) printf("\n  %s: %d fused attention nodes, expected %d", dir, n, HF_LAYERS);
        CU_ASSERT_EQUAL(n, HF_LAYERS);
        CU_ASSERT_EQUAL(count_op(g, "Softmax", ""), 0);
        CU_ASSERT_EQUAL(count_op(g, "IsNaN", ""), 0);
        /* GQA reads K/V unexpanded; the dynamic exports' masks (Expand too) are read symbolically */
        CU_ASSERT_EQUAL(count_op(g, "Expand", ""), 0);
        for (int i = 0; i < g->n_nodes; i++) {
            if (strcmp(g->nodes[i].op_type, "Attention") != 0) continue;
            int64_t w = -1;
            FR_ASSERT_OK(fr_node_attr_int(&g->nodes[i], "window", 0, &w));
            CU_ASSERT_EQUAL(w, want_window);
        }
    }
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    int ids[2] = {fr_graph_find_value(g, "input_ids"), fr_graph_find_value(g, "attention_mask")};
    const int logits = fr_graph_find_value(g, "logits"), n_in = ids[1] >= 0 ? 2 : 1;
    CU_ASSERT_FATAL(ids[0] >= 0 && logits >= 0);
    fr_tensor *in[2] = {load_npy(dir, "input_input_ids.npy"), n_in > 1 ? load_npy(dir, "input_attention_mask.npy") : NULL};
    for (int j = 0; in[1] && j < pad; j++) ((int64_t *)in[1]->data)[HF_T + j] = 0;
    fr_tensor *out = fr_ft_run(g, n_in, ids, (const fr_tensor *const *)in, logits);
    fr_tensor_free(in[0]);
    fr_tensor_free(in[1]);
    fr_graph_free(g);
    return out;
}

/* out against ref within tol: relative L2, and max-abs over the reference's max-abs. */
static void expect_close(const char *what, const fr_tensor *out, const fr_tensor *ref, double tol)
{
    const int64_t ne = fr_tensor_numel(ref);
    CU_ASSERT_FATAL(fr_tensor_numel(out) == ne);
    double worst = 0, top = 0;
    for (int64_t e = 0; e < ne; e++) {
        worst = fmax(worst, fabs(((float *)out->data)[e] - ((float *)ref->data)[e]));
        top = fmax(top, fabs(((float *)ref->data)[e]));
    }
    const double l2 = fr_rel_l2(out->data, ref->data, ne);
    if (!(l2 <= tol && worst <= tol * top)) printf("\n  %s: logits off by %g (L2), %g (max)", what, l2, worst / top);
    CU_ASSERT(l2 <= tol);
    CU_ASSERT(worst <= tol * top);
}

/* Fused logits against PyTorch's. */
static void check_forward(const char *dir, int64_t want_window)
{
    fr_tensor *ref = load_npy(dir, "output_logits.npy"), *out = logits_of(dir, 1, want_window, 0);
    expect_close(dir, out, ref, 1e-4);
    fr_tensor_free(ref);
    fr_tensor_free(out);
}

static void check_forward_static(int opset)
{
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        char dir[64];
        snprintf(dir, sizeof dir, "%s_op%d_static", archs[i], opset);
        check_forward(dir, strcmp(archs[i], "mistral") == 0 ? 6 : 0);
    }
}

static void test_forward_op18(void)
{
    check_forward_static(18);
    check_forward("llama_op18_dynamic", 0); /* the mask computed from attention_mask: a mask input */
    check_forward("gpt2_op18_dynamic", 0);
}

/* opset 23: a constant attn_mask onto attributes (Mistral's window 6), a bool one computed from
 * attention_mask onto the mask input (llama_op23_dynamic also needs RotaryEmbedding-23: not
 * here until that lands). */
static void test_forward_op23(void)
{
    check_forward_static(23);
    check_forward("gpt2_op23_dynamic", 0);
}

/* Zeroes the logits of row 1's first `pad` positions: queries whose keys are all padding. The
 * fused op gives them 0 (the key padding is its segment input Sk), the unfused graph a uniform
 * average over the keys (every score at the lowest float32): no token's output either way. */
static void drop_masked_rows(fr_tensor *t, int pad)
{
    const int64_t V = t->dims[2];
    memset((float *)t->data + HF_T * V, 0, sizeof(float) * (size_t)(pad * V));
}

/* dynamic exports with a left-padded row (4 padding tokens): fused (the padding as Sk) = unfused
 * within 1e-5 over the queries that see a key. */
static void test_padding(void)
{
    static const char *const dyn[] = {"llama_op18_dynamic", "gpt2_op18_dynamic"};
    for (int i = 0; i < 2; i++) {
        fr_tensor *plain = logits_of(dyn[i], 0, 0, 4), *fused = logits_of(dyn[i], 1, 0, 4);
        drop_masked_rows(plain, 4);
        drop_masked_rows(fused, 4);
        expect_close(dyn[i], fused, plain, 1e-5);
        fr_tensor_free(plain);
        fr_tensor_free(fused);
    }
    /* Attention-23 with the bool mask of the same padding, against the opset-18 graph unfused */
    fr_tensor *plain = logits_of("gpt2_op18_dynamic", 0, 0, 4), *lowered = logits_of("gpt2_op23_dynamic", 1, 0, 4);
    drop_masked_rows(plain, 4);
    drop_masked_rows(lowered, 4);
    expect_close("gpt2_op23_dynamic", lowered, plain, 1e-5);
    fr_tensor_free(plain);
    fr_tensor_free(lowered);
}

/* 20 fp32 steps at the fixtures' fixed [2, 11], module parameters only (the exporter's folded
 * constants stay frozen): fused_dir fused against plain_dir unfused (the same model). */
static void check_training(const char *fused_dir, const char *plain_dir)
{
    double loss[2][FR_FT_STEPS];
    for (int fuse = 0; fuse < 2; fuse++) {
        fr_graph *g = load_model(fuse ? fused_dir : plain_dir);
        fr_train_options o;
        fr_ft_train_options(&o);
        o.batch = HF_B;
        o.seq_len = HF_T;
        o.lr.max_lr = 1e-3;
        o.train_regex = "^(model|lm_head|transformer|bert|cls)\\.";
        o.fuse_attention = fuse;
        fr_ft_train_losses(g, &o, loss[fuse], NULL);
        if (fuse) { /* the fused count as bf16 training reports it (nothing fused: nothing compared) */
            fr_trainer *t = NULL;
            o.precision = "bf16";
            FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
            const fr_fp8_report *rep = fr_trainer_fp8_report(t);
            CU_ASSERT_FATAL(rep != NULL);
            if (rep->n_attention != HF_LAYERS) printf("\n  %s: %d fused in training", fused_dir, rep->n_attention);
            CU_ASSERT_EQUAL(rep->n_attention, HF_LAYERS);
            fr_trainer_free(t);
        }
        fr_graph_free(g);
    }
    fr_ft_expect_same_losses(fused_dir, loss[1], loss[0], 1e-5);
}

static void test_train_op18(void)
{
    check_training("llama_op18_static", "llama_op18_static");     /* GQA */
    check_training("mistral_op18_static", "mistral_op18_static"); /* window */
    check_training("gpt2_op18_static", "gpt2_op18_static");
    check_training("bert_op18_static", "bert_op18_static"); /* no mask */
    check_training("gpt2_op18_dynamic", "gpt2_op18_dynamic"); /* mask input */
}

/* Training the mask's constants too (--train '.*' selects every float initializer, constants
 * included): the run-time mask then depends on a trained value and stays unfused (the fused op
 * gives its mask no gradient). */
static void test_trained_mask_unfused(void)
{
    fr_graph *g = load_model("gpt2_op18_dynamic");
    fr_train_options o;
    fr_ft_train_options(&o);
    o.batch = HF_B;
    o.seq_len = HF_T;
    o.precision = "bf16";
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t)); /* parameters only: the mask is constant, fused */
    CU_ASSERT_EQUAL(fr_trainer_fp8_report(t)->n_attention, 2);
    fr_trainer_free(t);
    o.train_regex = ".*";
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_fp8_report(t)->n_attention, 0);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* Attention-23 lowered against the opset-18 export of the same model, unfused. */
static void test_train_op23(void)
{
    check_training("llama_op23_static", "llama_op18_static");
    check_training("mistral_op23_static", "mistral_op18_static");
    check_training("gpt2_op23_dynamic", "gpt2_op18_dynamic");
}

/* The FLOP count of the attention (bench's MFU) is the same for Attention-23 as for the opset-18
 * decomposition of the same model: 12 x width x seq per token and layer. */
static double attention_flops(const char *dir)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/model.onnx", dir);
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(fr_fixture(p, sizeof p, rel), &m), FP8RUN_OK);
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.batch = HF_B;
    c.seq_len = HF_T;
    fp8run_flops_info fl = {.struct_size = sizeof fl};
    CU_ASSERT_EQUAL(fp8run_model_train_flops(m, &c, &fl), FP8RUN_OK);
    CU_ASSERT_EQUAL(fl.attention_known, 1);
    fp8run_model_destroy(m);
    return fl.attention_flops_per_token;
}

static void test_flops_op23(void)
{
    const double f18 = attention_flops("llama_op18_static"), f23 = attention_flops("llama_op23_static");
    if (f18 != 12.0 * HF_LAYERS * 72 * HF_T || f23 != f18) printf("\n  attention FLOPs/token: op18 %g, op23 %g", f18, f23);
    CU_ASSERT(f18 == 12.0 * HF_LAYERS * 72 * HF_T); /* 6 heads x head dim 12 */
    CU_ASSERT(f23 == f18);
}

/* Attention-23 beyond the supported subset: an error naming the node and the attribute. */
static void expect_op23_error(const char *attr, int64_t value, const char *want)
{
    fr_graph *g = load_model("llama_op23_static");
    int hit = 0;
    for (int i = 0; i < g->n_nodes && !hit; i++)
        if (strcmp(g->nodes[i].op_type, "Attention") == 0) {
            hit = 1;
            if (strcmp(attr, "softcap") == 0)
                FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[i], attr, (float)value));
            else
                FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[i], attr, value));
        }
    CU_ASSERT_FATAL(hit);
    CU_ASSERT_EQUAL(fr_ft_prepare(g, HF_B, HF_T), FR_ERR_UNSUPPORTED);
    const char *msg = fr_last_error();
    if (!strstr(msg, want) || !strstr(msg, "Attention")) printf("\n  error '%s' lacks '%s'", msg, want);
    CU_ASSERT(strstr(msg, want) != NULL && strstr(msg, "Attention") != NULL);
    fr_graph_free(g);
}

static void test_op23_errors(void)
{
    expect_op23_error("softcap", 30, "softcap=30");
    expect_op23_error("is_causal", 2, "is_causal=2");
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"opset 18 static exports: every layer fused, logits = PyTorch's (1e-4)", test_forward_op18},
        {"opset 23 exports (Attention-23 lowered): logits = PyTorch's (1e-4)", test_forward_op23},
        {"dynamic exports, a left-padded row: fused (and opset 23) == opset 18 unfused (1e-5)", test_padding},
        {"opset 18 training fp32: fused == unfused (1e-5)", test_train_op18},
        {"a run-time mask computed from trained values stays unfused", test_trained_mask_unfused},
        {"Attention-23: unsupported attributes are errors naming them", test_op23_errors},
        {"attention FLOPs: Attention-23 counted as its opset-18 form", test_flops_op23},
        {"opset 23 training fp32: lowered == opset 18 unfused (1e-5)", test_train_op23},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_hf", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
