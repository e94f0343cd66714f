/* Autodiff core, the loss head and the backward helper ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

static int add_node(fr_graph *g, const char *op, const char *domain, int n_in, const int *in,
                    const char *out_name, int64_t ignore)
{
    int out, nid;
    if (fr_graph_add_value(g, out_name, &out) != FR_OK) return -1;
    if (fr_graph_add_node(g, op, domain, NULL, n_in, in, 1, &out, &nid) != FR_OK) return -1;
    if (ignore != 0 && fr_node_set_attr_int(&g->nodes[nid], "ignore_index", ignore) != FR_OK) return -1;
    if (fr_node_infer(g, nid) != FR_OK) return -1;
    return out;
}

/* CE forward against a direct double computation, with ignored positions */
static void test_cross_entropy_forward(void)
{
    fr_rng r = fr_test_rng("ce_fwd");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t B = 3, T = 5, V = 7, dl[3] = {B, T, V}, db[2] = {B, T}, labels[15];
    for (int i = 0; i < 15; i++) labels[i] = (int64_t)(fr_rng_uniform(&r) * V);
    labels[4] = -100;
    labels[9] = -100;
    int lg = fr_gc_add_input(g, &r, "logits", FR_F32, 3, dl, NULL);
    int lb = fr_gc_add_input(g, &r, "labels", FR_I64, 2, db, labels);
    int in[2] = {lg, lb};
    int loss = add_node(g, "SoftmaxCrossEntropy", "ai.fp8run", 2, in, "loss", 0);
    CU_ASSERT_FATAL(loss >= 0);
    CU_ASSERT_EQUAL(g->values[loss].rank, 0);
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const float *x = g->values[lg].constant->data;
    double ref = 0;
    int cnt = 0;
    for (int row = 0; row < B * T; row++) {
        if (labels[row] == -100) continue;
        double m = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) m = fmax(m, x[row * V + v]);
        for (int v = 0; v < V; v++) s += exp(x[row * V + v] - m);
        ref += m + log(s) - x[row * V + labels[row]];
        cnt++;
    }
    ref /= cnt;
    CU_ASSERT_DOUBLE_EQUAL(((float *)t[loss]->data)[0], ref, 1e-6 * fabs(ref) + 1e-7);
    /* a label outside the vocabulary is a range error naming the node */
    ((int64_t *)g->values[lb].constant->data)[7] = V;
    CU_ASSERT_EQUAL(fr_gc_run(g, t), FR_ERR_RANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "SoftmaxCrossEntropy"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "label 7"));
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

static void test_cross_entropy_grad(void)
{
    fr_rng r = fr_test_rng("ce_grad");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t dl[2] = {6, 5}, db[1] = {6}, labels[6] = {0, 4, -1, 2, 3, 1};
    int lg = fr_gc_add_input(g, &r, "logits", FR_F64, 2, dl, NULL);
    int lb = fr_gc_add_input(g, &r, "labels", FR_I64, 1, db, labels);
    int in[2] = {lg, lb};
    int loss = add_node(g, "SoftmaxCrossEntropy", "ai.fp8run", 2, in, "loss", -1);
    CU_ASSERT_FATAL(loss >= 0);
    double err = fr_gradcheck(g, &r, loss, 1, &lg);
    CU_ASSERT(err < 1e-6);
    fr_graph_free(g);
}

/* SumToShape reduces broadcast dims; checked against a direct sum */
static void test_sum_to_shape(void)
{
    fr_rng r = fr_test_rng("sum_to");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t dx[4] = {2, 3, 4, 5};
    int x = fr_gc_add_input(g, &r, "x", FR_F32, 4, dx, NULL);
    int y, nid;
    FR_ASSERT_OK(fr_graph_add_value(g, "y", &y));
    FR_ASSERT_OK(fr_graph_add_node(g, "SumToShape", "ai.fp8run", NULL, 1, &x, 1, &y, &nid));
    int64_t shape[3] = {3, 1, 5};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 3, shape));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const float *xv = g->values[x].constant->data, *yv = t[y]->data;
    double maxerr = 0;
    for (int j = 0; j < 3; j++)
        for (int l = 0; l < 5; l++) {
            double s = 0;
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 4; k++) s += xv[((i * 3 + j) * 4 + k) * 5 + l];
            maxerr = fmax(maxerr, fabs(yv[j * 5 + l] - s));
        }
    CU_ASSERT(maxerr < 1e-5);
    /* a target that is not a broadcast of the input is refused */
    int64_t bad[2] = {4, 4};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 2, bad));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

/* A value used twice accumulates both gradients: loss = CE(x) + CE(x) via Dot of two uses */
static void test_accumulation_and_errors(void)
{
    fr_rng r = fr_test_rng("accum");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[1] = {4};
    int a = fr_gc_add_input(g, &r, "a", FR_F64, 1, d, NULL);
    int in[2] = {a, a};
    int s = add_node(g, "Dot", "ai.fp8run", 2, in, "a_dot_a", 0); /* d/da = 2a */
    CU_ASSERT_FATAL(s >= 0);
    int grad;
    FR_ASSERT_OK(fr_autodiff(g, s, 1, &a, &grad));
    CU_ASSERT_FATAL(grad >= 0);
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const double *av = g->values[a].constant->data, *gv = t[grad]->data;
    for (int i = 0; i < 4; i++) CU_ASSERT_DOUBLE_EQUAL(gv[i], 2 * av[i], 1e-12);
    fr_gc_free_tensors(g, t);
    free(t);
    /* loss that is not a scalar is refused */
    int lb = fr_gc_add_input(g, &r, "not_scalar", FR_F64, 1, d, NULL);
    CU_ASSERT_EQUAL(fr_autodiff(g, lb, 1, &a, &grad), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "not_scalar"));
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"cross_entropy_forward", test_cross_entropy_forward},
    {"cross_entropy_grad", test_cross_entropy_grad},
    {"sum_to_shape", test_sum_to_shape},
    {"accumulation_and_errors", test_accumulation_and_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"autodiff", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
