/* The fp8 weight gradient's X operand (passes/wgrad_operand.h, FP8RUN_WGRAD_OPERAND): with X
 * kept (the default) or remade, training gives the same bits as with the forward's saved codes
 * (losses, gradient norms, every gradient, the weights after 4 steps) on the generated tiny
 * Llama (fused and unfused), the Hugging Face Llama fixture (dynamo) and gpt2_tiny (GELU MLP), in
 * fp8 with the delayed, current and block recipes; the rewritten nodes are the ones expected,
 * the Linears they read write no codes, and the CPU executor's planned peak does not go up
 * (down where activations outweigh the gradients). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "ops/linear.h"
#include "passes/wgrad_operand.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"

static const fr_llama_config k_llama = {
    .d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 5};
static const char *const k_modes[] = {"saved", "kept", "remade"};
#define N_MODES 3
#define STEPS 4

typedef struct model_case {
    const char *name;
    fr_graph *g;
    int64_t batch, seq, vocab;
    int unfused;                /* no attention, SwiGLU or sibling fusion */
    int want_kept, want_remade; /* weight gradients rewritten in modes kept / remade (-1: any) */
    int strict;                 /* the planned peak goes down in mode remade */
} model_case;

static const fr_pass_result *pass_result(const fr_trainer *t)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, "wgrad_operands") == 0) return &t->passes.pass[i];
    return NULL;
}

/* every fp8 LinearGradWeight reads what the mode says: the saved codes, or a float X */
static void check_nodes(const fr_graph *g, int mode, int *kept, int *remade)
{
    *kept = *remade = 0;
    int no_codes = 0; /* fp8 Linears that save no Xq: those whose weight gradient reads X */
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        fr_lin_attrs a;
        if (!n->dead && strcmp(n->op_type, "Linear") == 0 && fr_lin_read_attrs(n, &a) == FR_OK &&
            a.prec == FR_LIN_FP8 && n->n_outputs > FR_LIN_OUT_XQ && n->outputs[FR_LIN_OUT_XQ] < 0)
            no_codes++;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        fr_lin_attrs a;
        if (n->dead || strcmp(n->op_type, "LinearGradWeight") != 0 || fr_lin_read_attrs(n, &a) != FR_OK ||
            a.prec != FR_LIN_FP8)
            continue;
        const int x = n->inputs[0], p = g->values[x].producer;
        if (g->values[x].dtype == FR_F8E4M3) continue;
        CU_ASSERT(mode > 0);
        if (p >= 0 && strstr(g->nodes[p].name, "/remade")) {
            ++*remade;
            CU_ASSERT(p == i - 1); /* placed right before its reader */
        } else {
            ++*kept;
        }
    }
    CU_ASSERT_EQUAL(no_codes, *kept + *remade);
}

static void run_case(const model_case *m, const char *recipe)
{
    size_t peak[N_MODES];
    fr_trainer *t[N_MODES] = {0};
    for (int k = 0; k < N_MODES; k++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = m->batch;
        o.seq_len = m->seq;
        o.precision = "fp8";
        o.fp8.recipe = recipe;
        if (m->unfused) o.fuse_attention = o.fuse_swiglu = o.fp8.fuse = 0;
        CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_WGRAD_OPERAND", k_modes[k], 1), 0);
        FR_ASSERT_OK(fr_trainer_new(m->g, &o, &t[k]));
        peak[k] = fr_exec_peak_bytes(tr_cpu_exec(t[k]));
        const fr_pass_result *r = pass_result(t[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        int kept, remade;
        check_nodes(t[k]->g, k, &kept, &remade);
        CU_ASSERT_EQUAL(r->changed, kept + remade);
        if (k == 0) CU_ASSERT_EQUAL(kept + remade, 0);
        if (k == 1) CU_ASSERT_EQUAL(remade, 0);
        if (k >= 1 && m->want_kept >= 0) CU_ASSERT_EQUAL(kept, m->want_kept);
        if (k == 2 && m->want_remade >= 0) CU_ASSERT_EQUAL(remade, m->want_remade);
        printf("\n    %s %s %s: %s", m->name, recipe, k_modes[k], r->detail);
    }
    unsetenv("FP8RUN_WGRAD_OPERAND");
    const int64_t vocab = m->vocab ? m->vocab : fr_trainer_vocab(t[0]);
    const int same = fr_ft_same_training(t, N_MODES, m->batch, m->seq, vocab, 1, STEPS, "wgrad_operand");
    CU_ASSERT(same);
    printf("\n    %s %s: planned peak bytes saved %zu, kept %zu, remade %zu; bit-identical %s", m->name, recipe,
           peak[0], peak[1], peak[2], same ? "yes" : "NO");
    CU_ASSERT(peak[1] <= peak[0]);
    CU_ASSERT(peak[2] <= peak[1]);
    if (m->strict) CU_ASSERT(peak[2] < peak[0]);
    for (int k = 0; k < N_MODES; k++) fr_trainer_free(t[k]);
}

static void run_recipes(model_case *m)
{
    static const char *const recipes[] = {"delayed", "current", "block"};
    for (size_t c = 0; c < sizeof recipes / sizeof recipes[0]; c++) run_case(m, recipes[c]);
    fr_graph_free(m->g);
}

/* 2 layers: the O projection reads the attention output, which AttentionQKVGrad reads after
 * the weight gradient (kept); the down projection reads SwiGLU(gate/up), whose input SwiGLUGrad
 * reads (remade) */
static void test_generated_llama(void)
{
    model_case m = {.name = "generated Llama", .batch = 4, .seq = 32, .want_kept = 2, .want_remade = 2, .strict = 1};
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &m.g));
    m.vocab = k_llama.vocab;
    run_recipes(&m);
}

static void test_generated_unfused(void)
{
    model_case m = {
        .name = "generated Llama unfused", .batch = 2, .seq = 16, .unfused = 1, .want_kept = -1, .want_remade = 0};
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &m.g));
    m.vocab = k_llama.vocab;
    run_recipes(&m);
}

static void test_hf_llama(void)
{
    char path[1024];
    model_case m = {
        .name = "HF Llama (dynamo)", .batch = 2, .seq = 11, .vocab = 211, .want_kept = -1, .want_remade = -1};
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "hf/llama_op18_static/model.onnx"), &m.g));
    run_recipes(&m);
}

static void test_gpt2(void)
{
    char path[1024];
    model_case m = {.name = "gpt2_tiny", .batch = 2, .seq = 11, .want_kept = -1, .want_remade = -1};
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "gpt2_tiny/model.onnx"), &m.g));
    run_recipes(&m);
}

static void test_bad_value(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 1;
    o.seq_len = 8;
    o.precision = "fp8";
    CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_WGRAD_OPERAND", "sometimes", 1), 0);
    fr_trainer *t = NULL;
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "FP8RUN_WGRAD_OPERAND"));
    unsetenv("FP8RUN_WGRAD_OPERAND");
    fr_trainer_free(t);
    fr_graph_free(g);
}

static CU_TestInfo k_tests[] = {
    {"generated Llama: kept and remade X bit-identical, lower planned peak", test_generated_llama},
    {"generated Llama unfused: bit-identical, nothing remade", test_generated_unfused},
    {"HF Llama fixture (dynamo): bit-identical", test_hf_llama},
    {"gpt2_tiny (GELU MLP): bit-identical", test_gpt2},
    {"a wrong FP8RUN_WGRAD_OPERAND is an error naming it", test_bad_value},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo k_suites[] = {
    {"wgrad_operand", NULL, NULL, NULL, NULL, k_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(k_suites); }
