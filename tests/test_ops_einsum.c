/* Einsum: forward against direct loops, gradients by central differences, refused forms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

static fr_status add_einsum(fr_graph *g, const char *eq, int n_in, const int *in, int *out)
{
    int nid;
    FR_TRY(fr_graph_add_value(g, "y", out));
    FR_TRY(fr_graph_add_node(g, "Einsum", "", "einsum", n_in, in, 1, out, &nid));
    FR_TRY(fr_node_set_attr_string(&g->nodes[nid], "equation", eq));
    return fr_node_infer(g, nid);
}

static void test_outer_and_attention(void)
{
    fr_rng r = fr_test_rng("einsum_fwd");
    /* torch.outer as exported: "i,j->ij" */
    fr_graph *g = fr_gc_new_graph(14);
    int64_t di[1] = {7}, dj[1] = {5};
    int a = fr_gc_add_input(g, &r, "a", FR_F32, 1, di, NULL), b = fr_gc_add_input(g, &r, "b", FR_F32, 1, dj, NULL);
    int in[2] = {a, b}, y;
    FR_ASSERT_OK(add_einsum(g, "i,j->ij", 2, in, &y));
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const float *av = g->values[a].constant->data, *bv = g->values[b].constant->data, *yv = t[y]->data;
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) CU_ASSERT_DOUBLE_EQUAL(yv[i * 5 + j], av[i] * bv[j], 1e-6);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
    /* attention scores "bhqd,bhkd->bhqk" with a batch-broadcast operand */
    g = fr_gc_new_graph(14);
    int64_t dq[4] = {2, 3, 4, 5}, dk[4] = {1, 3, 6, 5};
    int q = fr_gc_add_input(g, &r, "q", FR_F64, 4, dq, NULL), k = fr_gc_add_input(g, &r, "k", FR_F64, 4, dk, NULL);
    int in2[2] = {q, k};
    FR_ASSERT_OK(add_einsum(g, "bhqd,bhkd->bhqk", 2, in2, &y));
    CU_ASSERT_EQUAL(g->values[y].dims[0], 2);
    CU_ASSERT_EQUAL(g->values[y].dims[3], 6);
    t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const double *qv = g->values[q].constant->data, *kv = g->values[k].constant->data, *sv = t[y]->data;
    double maxerr = 0;
    for (int bb = 0; bb < 2; bb++)
        for (int h = 0; h < 3; h++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 6; j++) {
                    double s = 0;
                    for (int d = 0; d < 5; d++) s += qv[((bb * 3 + h) * 4 + i) * 5 + d] * kv[(h * 6 + j) * 5 + d];
                    maxerr = fmax(maxerr, fabs(s - sv[((bb * 3 + h) * 4 + i) * 6 + j]));
                }
    CU_ASSERT(maxerr < 1e-12);
    fr_gc_free_tensors(g, t);
    free(t);
    /* gradients w.r.t. both operands, including the broadcast one */
    CU_ASSERT(fr_gradcheck(g, &r, y, 2, in2) < 1e-6);
    fr_graph_free(g);
}

static void test_implicit_and_errors(void)
{
    fr_rng r = fr_test_rng("einsum_err");
    fr_graph *g = fr_gc_new_graph(14);
    int64_t d2[2] = {3, 4}, d3[2] = {4, 2};
    int a = fr_gc_add_input(g, &r, "a", FR_F64, 2, d2, NULL), b = fr_gc_add_input(g, &r, "b", FR_F64, 2, d3, NULL);
    int in[2] = {a, b}, y;
    FR_ASSERT_OK(add_einsum(g, "ij,jk", 2, in, &y)); /* implicit output "ik" */
    CU_ASSERT_EQUAL(g->values[y].rank, 2);
    CU_ASSERT_EQUAL(g->values[y].dims[1], 2);
    CU_ASSERT(fr_gradcheck(g, &r, y, 2, in) < 1e-6);
    fr_graph_free(g);
    g = fr_gc_new_graph(14);
    a = fr_gc_add_input(g, &r, "a", FR_F64, 2, d2, NULL);
    CU_ASSERT_EQUAL(add_einsum(g, "ii->i", 1, &a, &y), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "diagonal"));
    fr_graph_free(g);
    g = fr_gc_new_graph(14);
    a = fr_gc_add_input(g, &r, "a", FR_F64, 2, d2, NULL);
    CU_ASSERT_EQUAL(add_einsum(g, "...i->i", 1, &a, &y), FR_ERR_UNSUPPORTED);
    fr_graph_free(g);
    g = fr_gc_new_graph(14);
    a = fr_gc_add_input(g, &r, "a", FR_F64, 2, d2, NULL);
    CU_ASSERT_EQUAL(add_einsum(g, "ijk->i", 1, &a, &y), FR_ERR_SHAPE);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"outer_and_attention", test_outer_and_attention},
    {"implicit_and_errors", test_implicit_and_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"einsum", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
