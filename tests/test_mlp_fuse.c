/* The MLP activation fusions on the dynamo exports: SwiGLU (passes/swiglu_fuse.c) on Llama,
 * Qwen2, Mistral and Phi-3 (its gate_up_proj Split read directly: the one-input form), and
 * the GELU fusion pass (passes/gelu_fuse.c):
 *  - the dynamo exports (tests/fixtures/hf, opset 18): GPT-2's gelu_new and Gemma's
 *    gelu_pytorch_tanh (Tanh chains), BERT's Erf form fused (one per MLP, and BERT's prediction
 *    head), no Tanh or Erf left; the fused graph's logits match PyTorch's within 1e-4; Llama
 *    (SwiGLU) fuses none;
 *  - hand-built graphs: Erf of Div(x, sqrt 2) and of Mul(x, 1 / sqrt 2), the Tanh chain in
 *    the three orders of 0.5 x (1 + t): fused, y and dx as the unfused graph's (1e-5); a wrong
 *    constant, a Tanh read elsewhere, a cube written as Pow(x, 2) stay unfused;
 *  - GeGLU: Mul(Gelu(gate), up) becomes SwiGLU activation gelu_tanh / gelu (Gemma: 2, logits
 *    as PyTorch's; by hand: y, dgate, dup as unfused); SwiGLU's three activations against
 *    central differences (float64, both forms);
 *  - the trainer: Gelu and its ActivationGrad with the SwiGLU switch on, the chain without. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/autodiff.h"
#include "passes/gelu_fuse.h"
#include "passes/swiglu_fuse.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static const struct {
    const char *dir;
    int fused;
} k_fx[] = {{"gpt2_op18_static", 2}, {"gpt2_op18_dynamic", 2}, {"gemma_op18_static", 2}, {"bert_op18_static", 3},
            {"llama_op18_static", 0}};

static void test_fixtures(void)
{
    for (size_t i = 0; i < sizeof k_fx / sizeof k_fx[0]; i++) {
        fr_graph *g = fr_ft_load_hf(k_fx[i].dir);
        int n = -1;
        FR_ASSERT_OK(fr_fuse_gelu(g, &n));
        if (n != k_fx[i].fused) printf("\n  %s: fused %d, expected %d", k_fx[i].dir, n, k_fx[i].fused);
        CU_ASSERT_EQUAL(n, k_fx[i].fused);
        CU_ASSERT_EQUAL(count_op(g, "Gelu"), k_fx[i].fused);
        CU_ASSERT_EQUAL(count_op(g, "Tanh") + count_op(g, "Erf"), 0);
        fr_ft_expect_hf_logits(g, k_fx[i].dir);
        fr_graph_free(g);
    }
}

static void test_swiglu_exports(void)
{
    static const struct {
        const char *dir;
        int fused, one_input;
    } fx[] = {{"llama_op18_static", 2, 0}, {"llama_op18_dynamic", 2, 0}, {"qwen2_op18_static", 2, 0},
              {"mistral_op18_static", 2, 0}, {"phi3_op18_static", 2, 2}, {"gemma_op18_static", 0, 0}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fr_graph *g = fr_ft_load_hf(fx[i].dir);
        int n = -1, one = -1;
        FR_ASSERT_OK(fr_fuse_swiglu(g, &n, &one));
        if (n != fx[i].fused || one != fx[i].one_input) printf("\n  %s: fused %d (%d one-input)", fx[i].dir, n, one);
        CU_ASSERT_EQUAL(n, fx[i].fused);
        CU_ASSERT_EQUAL(one, fx[i].one_input);
        CU_ASSERT_EQUAL(count_op(g, "Sigmoid"), 0);
        fr_ft_expect_hf_logits(g, fx[i].dir);
        fr_graph_free(g);
    }
}

/* Gemma's GeGLU: the GELU fusion, then the SwiGLU pass takes Mul(Gelu(gate), up). */
static void test_geglu_exports(void)
{
    fr_graph *g = fr_ft_load_hf("gemma_op18_static");
    int n_gelu = -1, n = -1;
    FR_ASSERT_OK(fr_fuse_gelu(g, &n_gelu));
    FR_ASSERT_OK(fr_fuse_swiglu(g, &n, NULL));
    CU_ASSERT_EQUAL(n_gelu, 2);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(count_op(g, "Gelu"), 0);
    int tanh_act = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const char *a = NULL;
        if (strcmp(g->nodes[i].op_type, "SwiGLU") == 0 && fr_node_attr_string(&g->nodes[i], "activation", "silu", &a) == FR_OK)
            tanh_act += strcmp(a, "gelu_tanh") == 0;
    }
    CU_ASSERT_EQUAL(tanh_act, 2);
    fr_ft_expect_hf_logits(g, "gemma_op18_static");
    fr_graph_free(g);
}

/* GeGLU by hand: Mul(Gelu(G), U) fused vs not, y, dG, dU (1e-5). Kind 0: ai.fp8run::Gelu
 * tanh (opset 18), 1: ONNX Gelu none (opset 20), 2: the Gelu also read elsewhere (unfused). */
static void build_geglu(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t d[3] = {2, 3, 8};
    int G = fr_gc_add_input(g, &r, "G", FR_F32, 3, d, NULL), U = fr_gc_add_input(g, &r, "U", FR_F32, 3, d, NULL), a;
    int nid = fr_gc_node(g, "Gelu", kind == 1 ? "" : FR_DOMAIN_FP8RUN, 1, &G, 1, &a);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "approximate", kind == 1 ? "none" : "tanh"));
    if (kind != 1) FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    if (kind == 2) FR_ASSERT_OK(fr_graph_mark_output(g, a));
    FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){U, a})));
}

static fr_status swiglu_pass(fr_graph *g, int *count) { return fr_fuse_swiglu(g, count, NULL); }

static void test_geglu_patterns(void)
{
    static const char *const wrt[2] = {"G", "U"};
    fr_ft_check_pattern(build_geglu, 0, 18, swiglu_pass, 1, 2, wrt, 1e-5);
    fr_ft_check_pattern(build_geglu, 1, 20, swiglu_pass, 1, 2, wrt, 1e-5);
    fr_ft_check_pattern(build_geglu, 2, 18, swiglu_pass, 0, 2, wrt, 1e-5);
}

/* SwiGLU's activations against central differences (float64), both forms. */
static void test_activation_gradcheck(void)
{
    static const char *const acts[3] = {"silu", "gelu_tanh", "gelu"};
    for (int a = 0; a < 3; a++)
        for (int one = 0; one < 2; one++) {
            fr_rng r = fr_test_rng("swiglu_activation_gradcheck");
            fr_graph *g = fr_gc_new_graph(18);
            CU_ASSERT_FATAL(g != NULL);
            const int64_t d[2] = {3, one ? 8 : 4};
            int in[2] = {fr_gc_add_input(g, &r, "G", FR_F64, 2, d, NULL), -1}, y;
            if (!one) in[1] = fr_gc_add_input(g, &r, "U", FR_F64, 2, d, NULL);
            FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
            int nid = fr_gc_node(g, "SwiGLU", FR_DOMAIN_FP8RUN, one ? 1 : 2, in, 1, &y);
            FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "activation", acts[a]));
            FR_ASSERT_OK(fr_node_infer(g, nid));
            char what[64];
            snprintf(what, sizeof what, "SwiGLU %s %s", acts[a], one ? "one-input" : "two-input");
            fr_gc_check(g, &r, y, one ? 1 : 2, in, what, 1e-7);
            fr_graph_free(g);
        }
}

static void test_trainer(void)
{
    fr_graph *model = fr_ft_open_hf("gpt2_op18_static");
    for (int fuse = 0; fuse < 2; fuse++) {
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.fuse_swiglu = fuse;
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(model, &o, &t);
        if (st != FR_OK) printf("\n  %s", fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        CU_ASSERT_EQUAL(count_op(t->g, "Gelu"), fuse ? 2 : 0);
        CU_ASSERT_EQUAL(count_op(t->g, "Tanh") == 0, fuse);
        fr_trainer_free(t);
    }
    fr_graph_free(model);
}

/* ---- hand-built patterns ---- */

enum {
    P_ERF_DIV,   /* Mul(x, Mul(0.5, Add(Erf(Div(x, sqrt 2)), 1))) */
    P_ERF_MUL,   /* Erf(Mul(1 / sqrt 2, x)), Mul(Mul(x, 0.5), Add(1, t)) */
    P_TANH_NEW,  /* gelu_new: Mul(Mul(0.5, x), Add(Tanh(..), 1)) */
    P_TANH_GEMMA,/* Mul(x, Mul(0.5, Add(Tanh(..), 1))), constants on the left */
    P_TANH_LAST, /* Mul(Mul(x, Add(t, 1)), 0.5) */
    P_WRONG_C,   /* 0.045 for 0.044715 */
    P_TANH_READ, /* Tanh's output also a graph output */
    P_SQUARE     /* Pow(x, 2) for the cube */
};

static int scalar(fr_graph *g, const char *name, double v) { return fr_gc_add_values(g, name, FR_F32, 0, NULL, &v); }
static int mul(fr_graph *g, int a, int b) { return fr_gc_op1(g, "Mul", 2, (int[]){a, b}); }
static int add(fr_graph *g, int a, int b) { return fr_gc_op1(g, "Add", 2, (int[]){a, b}); }

static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t dx[3] = {2, 3, 8};
    const int x = fr_gc_add_input(g, &r, "X", FR_F32, 3, dx, NULL);
    int t;
    if (kind == P_ERF_DIV || kind == P_ERF_MUL) {
        int u = kind == P_ERF_DIV ? fr_gc_op1(g, "Div", 2, (int[]){x, scalar(g, "sqrt2", M_SQRT2)})
                                  : mul(g, scalar(g, "rsqrt2", M_SQRT1_2), x);
        t = fr_gc_op1(g, "Erf", 1, &u);
    } else {
        int cube = fr_gc_op1(g, "Pow", 2, (int[]){x, scalar(g, "three", kind == P_SQUARE ? 2.0 : 3.0)});
        int inner = add(g, x, mul(g, scalar(g, "c", kind == P_WRONG_C ? 0.045 : 0.044715), cube));
        int u = kind == P_TANH_NEW ? mul(g, inner, scalar(g, "k", sqrt(2.0 / M_PI))) : mul(g, scalar(g, "k", sqrt(2.0 / M_PI)), inner);
        t = fr_gc_op1(g, "Tanh", 1, &u);
        if (kind == P_TANH_READ) FR_ASSERT_OK(fr_graph_mark_output(g, t));
    }
    const int half = scalar(g, "half", 0.5), one = scalar(g, "one", 1.0);
    int a = kind == P_ERF_MUL ? add(g, one, t) : add(g, t, one), y;
    if (kind == P_ERF_MUL || kind == P_TANH_NEW)
        y = mul(g, kind == P_ERF_MUL ? mul(g, x, half) : mul(g, half, x), a);
    else if (kind == P_TANH_LAST)
        y = mul(g, mul(g, x, a), half);
    else
        y = mul(g, x, mul(g, half, a));
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
}

static void check_kind(int kind, int want)
{
    static const char *const wrt[1] = {"X"};
    fr_ft_check_pattern(build, kind, 18, fr_fuse_gelu, want, 1, wrt, 1e-5);
}

static void test_erf_div(void) { check_kind(P_ERF_DIV, 1); }
static void test_erf_mul(void) { check_kind(P_ERF_MUL, 1); }
static void test_tanh_new(void) { check_kind(P_TANH_NEW, 1); }
static void test_tanh_gemma(void) { check_kind(P_TANH_GEMMA, 1); }
static void test_tanh_last(void) { check_kind(P_TANH_LAST, 1); }
static void test_wrong_c(void) { check_kind(P_WRONG_C, 0); }
static void test_tanh_read(void) { check_kind(P_TANH_READ, 0); }
static void test_square(void) { check_kind(P_SQUARE, 0); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"dynamo exports: GELUs fused, logits as PyTorch's (1e-4)", test_fixtures},
        {"SwiGLU on the exports (Phi-3: one-input), logits as PyTorch's", test_swiglu_exports},
        {"Gemma's GeGLU: Gelu then SwiGLU gelu_tanh, logits as PyTorch's", test_geglu_exports},
        {"GeGLU by hand: fused == unfused y, dG, dU; Gelu read elsewhere not fused", test_geglu_patterns},
        {"SwiGLU silu / gelu_tanh / gelu gradients vs central differences", test_activation_gradcheck},
        {"trainer on the exported GPT-2: Gelu with the SwiGLU switch only", test_trainer},
        {"Erf(Div(x, sqrt 2)): fused, same y, dx", test_erf_div},
        {"Erf(Mul(1 / sqrt 2, x)), (0.5 x)(1 + t): fused, same y, dx", test_erf_mul},
        {"gelu_new Tanh chain: fused, same y, dx", test_tanh_new},
        {"Gemma Tanh chain: fused, same y, dx", test_tanh_gemma},
        {"(x (t + 1)) 0.5: fused, same y, dx", test_tanh_last},
        {"wrong constant: not fused", test_wrong_c},
        {"Tanh read elsewhere: not fused", test_tanh_read},
        {"Pow(x, 2) for the cube: not fused", test_square},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"mlp_fuse", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
