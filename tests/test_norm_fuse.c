/* The RMSNorm fusion pass (passes/rmsnorm_fuse.c):
 *  - the dynamo exports (tests/fixtures/hf, opset 18): every RMSNorm of Llama, Qwen2, Mistral,
 *    Phi-3 and Gemma (its folded 1 + w) fused, 2 per layer + the final one, no Pow or Sqrt
 *    left; the fused graph's logits match PyTorch's within 1e-4; GPT-2 and BERT (native
 *    LayerNormalization) fuse none and keep their LayerNormalization;
 *  - hand-built graphs: Reciprocal, Div(1, s), Div(x, s), Pow(., -0.5), Mul(x, x), Gemma's
 *    Add(1, w) scale, opset-13 ReduceMean (axes attribute): fused, y and the gradients of x
 *    and w as the unfused graph's (1e-5); exponent 4, a mean over axis 0, a trained eps, an
 *    intermediate read elsewhere stay unfused;
 *  - the trainer: Llama's and Gemma's graphs hold RMSNormalization and RMSNormGrad, GPT-2's and
 *    BERT's their native LayerNormalization (one output) and LayerNormGrad, and no ReduceMean,
 *    Sqrt or Pow. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/rmsnorm_fuse.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* ---- the dynamo exports ---- */

static const struct {
    const char *dir;
    int fused;
} k_fx[] = {{"llama_op18_static", 5}, {"llama_op18_dynamic", 5}, {"qwen2_op18_static", 5}, {"mistral_op18_static", 5},
            {"phi3_op18_static", 5},  {"gemma_op18_static", 5},  {"gpt2_op18_static", 0}, {"gpt2_op18_dynamic", 0},
            {"bert_op18_static", 0}};

static void test_fixtures(void)
{
    for (size_t i = 0; i < sizeof k_fx / sizeof k_fx[0]; i++) {
        fr_graph *g = fr_ft_load_hf(k_fx[i].dir);
        const int ln = count_op(g, "LayerNormalization");
        int n = -1;
        FR_ASSERT_OK(fr_fuse_rmsnorm(g, &n));
        if (n != k_fx[i].fused) printf("\n  %s: fused %d, expected %d", k_fx[i].dir, n, k_fx[i].fused);
        CU_ASSERT_EQUAL(n, k_fx[i].fused);
        CU_ASSERT_EQUAL(count_op(g, "RMSNormalization"), k_fx[i].fused);
        CU_ASSERT_EQUAL(count_op(g, "LayerNormalization"), ln);
        if (n) {
            CU_ASSERT_EQUAL(count_op(g, "Sqrt"), 0);
            CU_ASSERT_EQUAL(count_op(g, "Reciprocal"), 0);
        }
        fr_ft_expect_hf_logits(g, k_fx[i].dir);
        fr_graph_free(g);
    }
}

/* The trainer fuses the RMSNorms and differentiates them as one node each; the exporter's
 * native LayerNormalization (GPT-2, BERT) trains with its fused LayerNormGrad and nothing else
 * (no statistics outputs, no ReduceMean / Sqrt / Pow chain). */
static void test_trainer(void)
{
    static const struct {
        const char *dir;
        int rms, ln;
    } fx[] = {{"llama_op18_static", 5, 0}, {"gemma_op18_static", 5, 0}, {"gpt2_op18_static", 0, 5}, {"bert_op18_static", 0, 6}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fr_graph *model = fr_ft_open_hf(fx[i].dir);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.fuse_residual_norm = 0; /* keeps the norms as RMSNormalization (tests/test_add_norm.c fuses them) */
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(model, &o, &t);
        if (st != FR_OK) printf("\n  %s: %s", fx[i].dir, fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        CU_ASSERT_EQUAL(count_op(t->g, "RMSNormalization"), fx[i].rms);
        CU_ASSERT_EQUAL(count_op(t->g, "RMSNormGrad"), fx[i].rms);
        CU_ASSERT_EQUAL(count_op(t->g, "LayerNormalization"), fx[i].ln);
        CU_ASSERT_EQUAL(count_op(t->g, "LayerNormGrad"), fx[i].ln);
        CU_ASSERT_EQUAL(count_op(t->g, "Sqrt") + count_op(t->g, "ReduceMean") + count_op(t->g, "Pow"), 0);
        for (int k = 0; k < t->g->n_nodes; k++)
            if (strcmp(t->g->nodes[k].op_type, "LayerNormalization") == 0) CU_ASSERT_EQUAL(t->g->nodes[k].n_outputs, 1);
        fr_trainer_free(t);
        /* --no-fuse-rmsnorm keeps the exporter's ops (LayerNorm is imported as one op anyway) */
        o.fuse_rmsnorm = 0;
        st = fr_trainer_new(model, &o, &t);
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        CU_ASSERT_EQUAL(count_op(t->g, "RMSNormalization"), 0);
        CU_ASSERT_EQUAL(count_op(t->g, "ReduceMean") > 0, fx[i].rms > 0);
        fr_trainer_free(t);
        fr_graph_free(model);
    }
}

/* ---- hand-built patterns ---- */

enum {
    P_RECIP,  /* Mul(x, Reciprocal(Sqrt(.))), Mul(w, n) */
    P_DIV1,   /* Mul(Div(1, Sqrt(.)), x), Mul(n, w) */
    P_DIVX,   /* Div(x, Sqrt(.)) */
    P_POW,    /* Pow(Add(eps, ms), -0.5) */
    P_MULXX,  /* Mul(x, x) for the square */
    P_GEMMA,  /* scale Add(1, w) */
    P_ATTR,   /* opset 13: ReduceMean's axes attribute */
    P_EXP4,   /* Pow(x, 4): not RMSNorm */
    P_AXIS0,  /* mean over axis 0 */
    P_EPS_PARAM, /* eps trained */
    P_SQRT_READ  /* Sqrt's output also a graph output */
};

#define HB 2
#define HT 3
#define HD 8

static int scalar(fr_graph *g, const char *name, double v) { return fr_gc_add_values(g, name, FR_F32, 0, NULL, &v); }

/* The pattern of `kind` over inputs X [HB, HT, HD] and W [HD]; y its last output. */
static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t dx[3] = {HB, HT, HD}, dw[1] = {HD};
    const int X = fr_gc_add_input(g, &r, "X", FR_F32, 3, dx, NULL);
    const int w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL);
    int sq = kind == P_MULXX ? fr_gc_op1(g, "Mul", 2, (int[]){X, X})
                             : fr_gc_op1(g, "Pow", 2, (int[]){X, scalar(g, "two", kind == P_EXP4 ? 4.0 : 2.0)});
    int ms;
    if (kind == P_ATTR) {
        int nid = fr_gc_node(g, "ReduceMean", "", 1, &sq, 1, &ms);
        FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "axes", 1, (int64_t[]){-1}));
        FR_ASSERT_OK(fr_node_infer(g, nid));
    } else {
        int64_t one = 1, ax = kind == P_AXIS0 ? 0 : -1;
        ms = fr_gc_op1(g, "ReduceMean", 2, (int[]){sq, fr_gc_add_input(g, NULL, "axes", FR_I64, 1, &one, &ax)});
    }
    int eps = scalar(g, "eps", 1e-6);
    if (kind == P_EPS_PARAM) g->values[eps].flags |= FR_VAL_PARAM;
    int a = kind == P_POW ? fr_gc_op1(g, "Add", 2, (int[]){eps, ms}) : fr_gc_op1(g, "Add", 2, (int[]){ms, eps}), n;
    if (kind == P_POW) {
        n = fr_gc_op1(g, "Mul", 2, (int[]){X, fr_gc_op1(g, "Pow", 2, (int[]){a, scalar(g, "mhalf", -0.5)})});
    } else {
        int s = fr_gc_op1(g, "Sqrt", 1, &a);
        if (kind == P_SQRT_READ) FR_ASSERT_OK(fr_graph_mark_output(g, s));
        if (kind == P_DIVX)
            n = fr_gc_op1(g, "Div", 2, (int[]){X, s});
        else if (kind == P_DIV1)
            n = fr_gc_op1(g, "Mul", 2, (int[]){fr_gc_op1(g, "Div", 2, (int[]){scalar(g, "one", 1.0), s}), X});
        else
            n = fr_gc_op1(g, "Mul", 2, (int[]){X, fr_gc_op1(g, "Reciprocal", 1, &s)});
    }
    int W = kind == P_GEMMA ? fr_gc_op1(g, "Add", 2, (int[]){scalar(g, "one_w", 1.0), w}) : w;
    int y = kind == P_RECIP ? fr_gc_op1(g, "Mul", 2, (int[]){W, n}) : fr_gc_op1(g, "Mul", 2, (int[]){n, W});
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
}

static fr_status fuse(fr_graph *g, int *count) { return fr_fuse_rmsnorm(g, count); }

static void check_kind(int kind, int want_fused)
{
    static const char *const wrt[2] = {"X", "W"};
    fr_ft_check_pattern(build, kind, kind == P_ATTR ? 13 : 18, fuse, want_fused, 2, wrt, 1e-5);
}

static void test_recip(void) { check_kind(P_RECIP, 1); }
static void test_div1(void) { check_kind(P_DIV1, 1); }
static void test_divx(void) { check_kind(P_DIVX, 1); }
static void test_pow(void) { check_kind(P_POW, 1); }
static void test_mulxx(void) { check_kind(P_MULXX, 1); }
static void test_gemma(void) { check_kind(P_GEMMA, 1); }
static void test_attr(void) { check_kind(P_ATTR, 1); }
static void test_exp4(void) { check_kind(P_EXP4, 0); }
static void test_axis0(void) { check_kind(P_AXIS0, 0); }
static void test_eps_param(void) { check_kind(P_EPS_PARAM, 0); }
static void test_sqrt_read(void) { check_kind(P_SQRT_READ, 0); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"dynamo exports: RMSNorms fused, logits as PyTorch's (1e-4)", test_fixtures},
        {"trainer: RMSNorm / LayerNorm and their fused grads only", test_trainer},
        {"Reciprocal(Sqrt): fused, same y, dx, dw", test_recip},
        {"Div(1, Sqrt): fused, same y, dx, dw", test_div1},
        {"Div(x, Sqrt): fused, same y, dx, dw", test_divx},
        {"Pow(., -0.5): fused, same y, dx, dw", test_pow},
        {"Mul(x, x): fused, same y, dx, dw", test_mulxx},
        {"Gemma Add(1, w): fused, same y, dx, dw", test_gemma},
        {"opset 13 axes attribute: fused, same y, dx, dw", test_attr},
        {"exponent 4: not fused", test_exp4},
        {"mean over axis 0: not fused", test_axis0},
        {"trained eps: not fused", test_eps_param},
        {"Sqrt read elsewhere: not fused", test_sqrt_read},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"norm_fuse", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
