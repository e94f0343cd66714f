/* The RMSNorm fusion pass (passes/rmsnorm_fuse.c):
 *  - the dynamo exports (tests/fixtures/hf, opset 18): every RMSNorm of Llama, Qwen2, Mistral,
 *    Phi-3 and Gemma (its folded 1 + w) fused, 2 per layer + the final one, no Pow or Sqrt
 *    left; the fused graph's logits match PyTorch's within 1e-4; GPT-2 and BERT (native
 *    LayerNormalization) fuse none and keep their LayerNormalization;
 *  - hand-built graphs: Reciprocal, Div(1, s), Div(x, s), Pow(., -0.5), Mul(x, x), Gemma's
 *    Add(1, w) scale, opset-13 ReduceMean (axes attribute): fused, y and the gradients of x
 *    and w as the unfused graph's (1e-5); exponent 4, a mean over axis 0, a trained eps, an
 *    intermediate read elsewhere stay unfused;
 *  - the trainer: the exported Llama's graph holds RMSNormalization and RMSNormGrad only. */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "fuse_test_util.h"
#include "gradcheck.h"
#include "graph/onnx_io.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/rmsnorm_fuse.h"
#include "runtime/npy.h"
#include "runtime/train_internal.h"
#include "runtime/trainer.h"

#define TRAIN_RE "^(model|lm_head|transformer|bert|cls)\\."

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* What `--train TRAIN_RE` does: the exporter's constants (exponent, eps, tables) untrained. */
static void freeze_constants(fr_graph *g)
{
    regex_t re;
    CU_ASSERT_FATAL(regcomp(&re, TRAIN_RE, REG_EXTENDED | REG_NOSUB) == 0);
    for (int i = 0; i < g->n_values; i++)
        if ((g->values[i].flags & FR_VAL_PARAM) && regexec(&re, g->values[i].name, 0, NULL, 0) != 0)
            g->values[i].flags &= ~FR_VAL_PARAM;
    regfree(&re);
}

/* ---- the dynamo exports ---- */

static const struct {
    const char *dir;
    int fused;
} k_fx[] = {{"llama_op18_static", 5}, {"llama_op18_dynamic", 5}, {"qwen2_op18_static", 5}, {"mistral_op18_static", 5},
            {"phi3_op18_static", 5},  {"gemma_op18_static", 5},  {"gpt2_op18_static", 0}, {"gpt2_op18_dynamic", 0},
            {"bert_op18_static", 0}};

/* Loads fixture dir, prepared for its [2, 11] inputs, constants frozen. */
static fr_graph *load_fixture(const char *dir)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/model.onnx", dir);
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g));
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 11));
    freeze_constants(g);
    return g;
}

/* Runs g on the fixture's inputs; asserts logits within 1e-4 of PyTorch's. */
static void expect_logits(fr_graph *g, const char *dir)
{
    char rel[300], p[600];
    int vids[8], n = 0;
    fr_tensor *ins[8];
    for (int i = 0; i < g->n_inputs && n < 8; i++, n++) {
        vids[n] = g->inputs[i];
        snprintf(rel, sizeof rel, "hf/%s/input_%s.npy", dir, g->values[vids[n]].name);
        FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &ins[n]));
    }
    snprintf(rel, sizeof rel, "hf/%s/output_logits.npy", dir);
    fr_tensor *want;
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &want));
    fr_tensor *got = fr_ft_run(g, n, vids, (const fr_tensor *const *)ins, g->outputs[0]);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(got), fr_tensor_numel(want));
    double e = fr_rel_l2(got->data, want->data, fr_tensor_numel(want));
    if (!(e <= 1e-4)) printf("\n  %s: logits differ from PyTorch's by %g", dir, e);
    CU_ASSERT(e <= 1e-4);
    for (int i = 0; i < n; i++) fr_tensor_free(ins[i]);
    fr_tensor_free(got);
    fr_tensor_free(want);
}

static void test_fixtures(void)
{
    for (size_t i = 0; i < sizeof k_fx / sizeof k_fx[0]; i++) {
        fr_graph *g = load_fixture(k_fx[i].dir);
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
        expect_logits(g, k_fx[i].dir);
        fr_graph_free(g);
    }
}

/* The trainer fuses them and differentiates them as one node each. */
static void test_trainer(void)
{
    char p[600];
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "hf/llama_op18_static/model.onnx"), &model));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 11;
    o.train_regex = TRAIN_RE;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s", fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    CU_ASSERT_EQUAL(count_op(t->g, "RMSNormalization"), 5);
    CU_ASSERT_EQUAL(count_op(t->g, "RMSNormGrad"), 5);
    CU_ASSERT_EQUAL(count_op(t->g, "Sqrt"), 0);
    CU_ASSERT_EQUAL(count_op(t->g, "ReduceMean"), 0);
    fr_trainer_free(t);
    fr_graph_free(model);
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

/* y of the pattern of `kind` over X [HB, HT, HD] and W [HD] (inputs x and w). */
static int build(fr_graph *g, uint64_t seed, int kind, int *x, int *w)
{
    fr_rng r = {seed};
    const int64_t dx[3] = {HB, HT, HD}, dw[1] = {HD};
    *x = fr_gc_add_input(g, &r, "X", FR_F32, 3, dx, NULL);
    *w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL);
    const int X = *x;
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
    int W = kind == P_GEMMA ? fr_gc_op1(g, "Add", 2, (int[]){scalar(g, "one_w", 1.0), *w}) : *w;
    int y = kind == P_RECIP ? fr_gc_op1(g, "Mul", 2, (int[]){W, n}) : fr_gc_op1(g, "Mul", 2, (int[]){n, W});
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return y;
}

/* y and dL/dx, dL/dw of the pattern, fused or not (fused: *n_fused receives the count). */
static void run_kind(int kind, uint64_t seed, const double *dy, int fuse, int *n_fused, fr_tensor **res)
{
    fr_graph *g = fr_gc_new_graph(kind == P_ATTR ? 13 : 18);
    CU_ASSERT_FATAL(g != NULL);
    int x, w;
    build(g, seed, kind, &x, &w);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    if (fuse) FR_ASSERT_OK(fr_fuse_rmsnorm(g, n_fused));
    /* ids may move when the pass compacts the graph: find them again by name */
    x = fr_graph_find_value(g, "X");
    w = fr_graph_find_value(g, "W");
    int wrt[2] = {x, w}, grads[2];
    const int yv = g->outputs[g->n_outputs - 1];
    fr_tensor **t = fr_gc_backprop(g, yv, dy, 2, wrt, grads);
    CU_ASSERT_FATAL(t != NULL);
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, yv), "y", &res[0]));
    for (int i = 0; i < 2; i++) FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, grads[i]), "grad", &res[1 + i]));
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

static void check_kind(int kind, int want_fused)
{
    fr_rng r = fr_test_rng("rmsnorm_fuse_kinds");
    const uint64_t seed = r.s | 1;
    double dy[HB * HT * HD];
    for (int i = 0; i < HB * HT * HD; i++) dy[i] = fr_rng_normal(&r);
    fr_tensor *plain[3], *fused[3];
    int n = -1;
    run_kind(kind, seed, dy, 0, NULL, plain);
    run_kind(kind, seed, dy, 1, &n, fused);
    if (n != want_fused) printf("\n  kind %d: %d fused", kind, n);
    CU_ASSERT_EQUAL(n, want_fused);
    static const char *what[3] = {"y", "dx", "dw"};
    for (int i = 0; i < 3; i++) {
        double e = fr_gc_rel_l2(fused[i], plain[i]);
        if (!(e <= 1e-5)) printf("\n  kind %d: fused %s differs by %g", kind, what[i], e);
        CU_ASSERT(e <= 1e-5);
        fr_tensor_free(plain[i]);
        fr_tensor_free(fused[i]);
    }
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
        {"trainer on the exported Llama: RMSNormalization + RMSNormGrad only", test_trainer},
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
