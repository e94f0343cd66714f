/* The fp8 weight gradient's X operand (passes/wgrad_operand.h, FP8RUN_WGRAD_OPERAND): with X
 * kept or remade (the default), training gives the same bits as with the forward's saved codes
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
#include "tests/bf16_check.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"
#include "tests/op_harness.h"

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
    int glu;                    /* its remade X are all one-input SwiGLU outputs */
} model_case;

static const fr_pass_result *pass_result(const fr_trainer *t)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, "wgrad_operands") == 0) return &t->passes.pass[i];
    return NULL;
}

/* every fp8 LinearGradWeight reads what the mode says: the saved codes, or a float X (kept, a
 * copy of its producer, or the gate/up output its quantization remakes X from: *fused) */
static void check_nodes(const fr_graph *g, int mode, int *kept, int *remade, int *fused)
{
    *kept = *remade = *fused = 0;
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
        if (a.x_glu >= 0) {
            ++*remade;
            ++*fused;
            CU_ASSERT(mode == 2);
            CU_ASSERT(a.recipe != FR_LIN_BLOCKWISE);
        } else if (p >= 0 && strstr(g->nodes[p].name, "/remade")) {
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
        int kept, remade, fused;
        check_nodes(t[k]->g, k, &kept, &remade, &fused);
        /* a one-input SwiGLU's output is remade in the weight gradient's own quantization pass
           under the per-tensor recipes, by a copy under the block recipe */
        if (k == 2 && m->glu) CU_ASSERT_EQUAL(fused, strcmp(recipe, "block") == 0 ? 0 : remade);
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
    model_case m = {
        .name = "generated Llama", .batch = 4, .seq = 32, .want_kept = 2, .want_remade = 2, .strict = 1, .glu = 1};
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

/* ---- the x_glu form of LinearGradWeight (ops/linear.h) on the CPU ---- */

/* dW of LinearGradWeight(gate_up) with x_glu is LinearGradWeight(SwiGLU(gate_up))'s bit for
 * bit: every activation, gate_up float32 / bfloat16, X float32 / bfloat16, delayed and current,
 * transB 0 / 1, aligned and ragged shapes */
static void test_glu_op(void)
{
    static const char *const acts[3] = {"silu", "gelu_tanh", "gelu"};
    static const int64_t shapes[3][3] = {{32, 16, 16}, {13, 7, 5}, {40, 24, 9}}; /* M, K, N */
    fr_rng rng = fr_test_rng("wgrad_glu_op");
    int cases = 0;
    for (int si = 0; si < 3; si++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 8; c++) {
                const int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
                const int gu16 = c & 1, y16 = (c >> 1) & 1, delayed = c >> 2, tb = (si + c) & 1;
                int64_t gd[2] = {M, 2 * K}, yd[2] = {M, N};
                fr_tensor *guf = tt_randn(&rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
                fr_tensor *gu = gu16 ? gub : guf, *dy = tt_randn(&rng, FR_F32, 2, yd, 0.0, 1.0);
                fr_tensor *sx = delayed ? tt_scalar1(37.0f) : NULL, *sdy = delayed ? tt_scalar1(1500.0f) : NULL;
                tnode sw, ref, glu;
                tn_init_domain(&sw, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, &gu, 0, 1);
                TN_ATTR(&sw, string, "activation", acts[a]);
                if (y16) TN_ATTR(&sw, string, "y_dtype", "bfloat16");
                FR_ASSERT_OK(tn_run(&sw));
                fr_tensor *rin[4] = {sw.out[0], dy, sx, sdy}, *gin[4] = {gu, dy, sx, sdy};
                tn_init_domain(&ref, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, delayed ? 4 : 2, rin, 0, 1);
                tn_init_domain(&glu, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, delayed ? 4 : 2, gin, 0, 1);
                tnode *both[2] = {&ref, &glu};
                for (int b = 0; b < 2; b++) {
                    TN_ATTR(both[b], string, "precision", "fp8");
                    TN_ATTR(both[b], string, "recipe", delayed ? "delayed" : "current");
                    TN_ATTR(both[b], int, "transB", tb);
                }
                TN_ATTR(&glu, string, "x_glu", acts[a]);
                if (y16) TN_ATTR(&glu, string, "x_glu_dtype", "bfloat16");
                FR_ASSERT_OK(tn_run(&ref));
                FR_ASSERT_OK(tn_run(&glu));
                char lab[200];
                snprintf(lab, sizeof lab, "M %lld K %lld N %lld %s gate_up %s X %s %s transB %d", (long long)M,
                         (long long)K, (long long)N, acts[a], gu16 ? "bf16" : "f32", y16 ? "bf16" : "f32",
                         delayed ? "delayed" : "current", tb);
                CU_ASSERT_EQUAL(bc_bits_diff(lab, glu.out[0], ref.out[0]), 0);
                cases++;
                tn_free(&glu);
                tn_free(&ref);
                tn_free(&sw);
                fr_tensor_free(guf);
                fr_tensor_free(gub);
                fr_tensor_free(dy);
                if (sx) fr_tensor_free(sx);
                if (sdy) fr_tensor_free(sdy);
            }
    printf("\n    %d x_glu cases bit-identical to the SwiGLU's X", cases);
}

/* what x_glu refuses, each an error naming the node */
static void test_glu_errors(void)
{
    fr_rng rng = fr_test_rng("wgrad_glu_err");
    int64_t gd[2] = {8, 14}, god[2] = {8, 15}, yd[2] = {8, 4};
    fr_tensor *gu = tt_randn(&rng, FR_F32, 2, gd, 0.0, 1.0), *odd = tt_randn(&rng, FR_F32, 2, god, 0.0, 1.0);
    fr_tensor *dy = tt_randn(&rng, FR_F32, 2, yd, 0.0, 1.0);
    static const struct {
        const char *recipe, *glu, *glu_dtype, *want;
        int odd;
    } k_bad[] = {
        {"block", "silu", NULL, "per-tensor recipe", 0},
        {"current", "relu", NULL, "x_glu=\"relu\"", 0},
        {"current", NULL, "bfloat16", "x_glu_dtype without x_glu", 0},
        {"current", "silu", NULL, "even last dim", 1},
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        fr_tensor *in[2] = {k_bad[i].odd ? odd : gu, dy};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 2, in, 0, 1);
        TN_ATTR(&t, string, "precision", "fp8");
        TN_ATTR(&t, string, "recipe", k_bad[i].recipe);
        if (k_bad[i].glu) TN_ATTR(&t, string, "x_glu", k_bad[i].glu);
        if (k_bad[i].glu_dtype) TN_ATTR(&t, string, "x_glu_dtype", k_bad[i].glu_dtype);
        CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
        tn_assert_error(k_bad[i].want);
        tn_free(&t);
    }
    fr_tensor_free(gu);
    fr_tensor_free(odd);
    fr_tensor_free(dy);
}

static CU_TestInfo k_tests[] = {
    {"x_glu: the weight gradient from gate_up equals the one from SwiGLU's X, bit for bit", test_glu_op},
    {"x_glu: what it refuses, naming the node", test_glu_errors},
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
