/* ai.fp8run::Softcap (ops/ew_unary.def) and the fusion that makes it (passes/softcap_fuse.c):
 *  - the op: y = c tanh(x / c) and dx = dy (1 - tanh^2(x / c)) against float64, fresh random x
 *    spanning the cap (|x| up to 8c), float32 within 2 ulp of the double value;
 *  - the pass on hand-built Mul(Tanh(Div(x, c)), c) chains (either Mul order, Mul(x, 1/c)):
 *    fused, with y and dx the unfused chain's within 1e-6; not fused when the Tanh is read
 *    elsewhere or the two constants differ;
 *  - Gemma 2's exports: the final logits' softcap fused once, logits as PyTorch's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/softcap_fuse.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/harness.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* kind 0: Mul(Tanh(Div(x, c)), c); 1: Mul(c, Tanh(Mul(x, 1/c))); 2: the Tanh also an output
 * (not fused); 3: the outer constant differs (not fused) */
static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t d[3] = {2, 5, 24};
    const double c = 3.0 + 2.0 * fr_rng_uniform(&r);
    int x = fr_gc_add_input(g, &r, "X", FR_F32, 3, d, NULL);
    const double inner = kind == 1 ? 1.0 / c : c, outer = kind == 3 ? c * 1.001 : c;
    const int ci = fr_gc_add_values(g, "inner", FR_F32, 0, NULL, &inner);
    const int co = fr_gc_add_values(g, "outer", FR_F32, 0, NULL, &outer);
    const int dv = fr_gc_op1(g, kind == 1 ? "Mul" : "Div", 2, (int[]){x, ci});
    const int t = fr_gc_op1(g, "Tanh", 1, &dv);
    if (kind == 2) FR_ASSERT_OK(fr_graph_mark_output(g, t));
    FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, kind == 1 ? (int[]){co, t} : (int[]){t, co})));
}

static void test_pass(void)
{
    static const char *const wrt[] = {"X"};
    fr_ft_check_pattern(build, 0, 18, fr_fuse_softcap, 1, 1, wrt, 1e-6);
    fr_ft_check_pattern(build, 1, 18, fr_fuse_softcap, 1, 1, wrt, 1e-6);
    fr_ft_check_pattern(build, 2, 18, fr_fuse_softcap, 0, 1, wrt, 1e-6);
    fr_ft_check_pattern(build, 3, 18, fr_fuse_softcap, 0, 1, wrt, 1e-6);
}

/* The op alone: float32 y and ActivationGrad's dx against the formulas in float64. */
static void test_op(void)
{
    fr_rng r = fr_test_rng(__func__);
    const double c = 1.0 + 30.0 * fr_rng_uniform(&r);
    const int64_t n = 4096;
    fr_graph *g = fr_gc_new_graph(18);
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t d[1] = {n};
    double *xs = malloc((size_t)n * sizeof *xs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(xs);
    for (int64_t i = 0; i < n; i++) xs[i] = (float)((fr_rng_uniform(&r) * 2 - 1) * 8 * c);
    const int x = fr_gc_add_values(g, "X", FR_F32, 1, d, xs);
    int y;
    const int nid = fr_gc_node(g, "Softcap", FR_DOMAIN_FP8RUN, 1, &x, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "alpha", (float)c));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    fr_tensor *out = fr_ft_run(g, 0, NULL, NULL, y);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    const float cf = (float)c;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double want = (double)cf * tanh(xs[i] / (double)cf), got = ((const float *)out->data)[i];
        const double ulp = fmax(fabs(nextafterf((float)want, INFINITY) - (float)want), 1e-45);
        worst = fmax(worst, fabs(got - want) / ulp);
    }
    printf(" (y: worst %.2f ulp at c %.3g)", worst, c);
    CU_ASSERT(worst <= 2.0);
    fr_tensor_free(out);
    fr_graph_free(g);
    free(xs);
}

/* Gemma 2's exports: the attention's softcap is the attention fusion's; after it, the final
 * logits' is the one chain left. */
static void test_gemma2(void)
{
    static const char *const dirs[] = {"gemma2_op18_static", "gemma2_op23_static"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_graph *g = fr_ft_load_hf(dirs[i]);
        int n = -1;
        FR_ASSERT_OK(fr_fuse_softcap(g, &n));
        /* without the attention fusion first, the scores' two softcaps are taken too */
        CU_ASSERT_EQUAL(n, 3);
        CU_ASSERT_EQUAL(count_op(g, "Softcap"), 3);
        /* the MLPs' gelu_pytorch_tanh: Tanh chains at opset 18 (fuse_gelu's), ONNX Gelu at 23 */
        CU_ASSERT_EQUAL(count_op(g, "Tanh"), i == 0 ? 2 : 0);
        fr_ft_expect_hf_logits(g, dirs[i]);
        fr_graph_free(g);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Softcap: y and dx against float64", test_op},
        {"softcap fusion: fused vs unfused y and dx; what does not fuse", test_pass},
        {"Gemma 2 exports: the softcaps fused, logits as PyTorch's", test_gemma2},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"softcap", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
