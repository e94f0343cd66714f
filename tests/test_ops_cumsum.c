/* CumSum: every exclusive/reverse combination on every axis against direct sums, int64
 * data, and the gradient by central differences. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

static int add_cumsum(fr_graph *g, int x, int axis_vid, int exclusive, int reverse)
{
    int y, nid, in[2] = {x, axis_vid};
    if (fr_graph_add_unique_value(g, "y", &y) != FR_OK) return -1;
    if (fr_graph_add_node(g, "CumSum", "", NULL, 2, in, 1, &y, &nid) != FR_OK) return -1;
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "exclusive", exclusive));
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "reverse", reverse));
    if (fr_node_infer(g, nid) != FR_OK) return -1;
    return y;
}

static void test_forward(void)
{
    fr_rng r = fr_test_rng("cumsum_fwd");
    int64_t dims[3] = {3, 4, 5};
    for (int axis = -3; axis < 3; axis++) {
        for (int mode = 0; mode < 4; mode++) {
            int ex = mode & 1, rev = mode >> 1;
            fr_graph *g = fr_gc_new_graph(14);
            int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, dims, NULL);
            int64_t av = axis;
            int a = fr_gc_add_input(g, &r, "axis", FR_I64, 0, NULL, &av);
            int y = add_cumsum(g, x, a, ex, rev);
            CU_ASSERT_FATAL(y >= 0);
            fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
            FR_ASSERT_OK(fr_gc_run(g, t));
            const double *xv = g->values[x].constant->data, *yv = t[y]->data;
            int ax = axis < 0 ? axis + 3 : axis;
            double maxerr = 0;
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 5; k++) {
                        int idx[3] = {i, j, k};
                        double s = 0;
                        for (int m = 0; m < dims[ax]; m++) {
                            int jdx[3] = {i, j, k};
                            jdx[ax] = m;
                            int before = rev ? m > idx[ax] : m < idx[ax];
                            if (before || (!ex && m == idx[ax])) s += xv[(jdx[0] * 4 + jdx[1]) * 5 + jdx[2]];
                        }
                        maxerr = fmax(maxerr, fabs(s - yv[(i * 4 + j) * 5 + k]));
                    }
            CU_ASSERT(maxerr < 1e-12);
            fr_gc_free_tensors(g, t); /* before gradcheck grows the graph */
            free(t);
            int wrt = x;
            CU_ASSERT(fr_gradcheck(g, &r, y, 1, &wrt) < 1e-6);
            fr_graph_free(g);
        }
    }
}

static void test_int64_and_errors(void)
{
    fr_rng r = fr_test_rng("cumsum_int");
    fr_graph *g = fr_gc_new_graph(14);
    int64_t d[2] = {2, 3}, vals[6] = {1, 1, 1, 0, 1, 1}, one = 1;
    int x = fr_gc_add_input(g, &r, "mask", FR_I64, 2, d, vals);
    int a = fr_gc_add_input(g, &r, "axis", FR_I64, 0, NULL, &one);
    int y = add_cumsum(g, x, a, 0, 0);
    CU_ASSERT_FATAL(y >= 0);
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    const int64_t want[6] = {1, 2, 3, 0, 1, 2};
    CU_ASSERT_EQUAL(memcmp(t[y]->data, want, sizeof want), 0);
    fr_gc_free_tensors(g, t);
    free(t);
    int64_t bad = 2;
    int b = fr_gc_add_input(g, &r, "bad_axis", FR_I64, 0, NULL, &bad);
    CU_ASSERT_EQUAL(add_cumsum(g, x, b, 0, 0), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "axis"));
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"forward_and_grad", test_forward},
    {"int64_and_errors", test_int64_and_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cumsum", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
