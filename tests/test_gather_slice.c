/* The canonical Slices the attention staging reads:
 *  - one-index gathers as Slices (passes/gather_slice.c): GatherND [[i]] and Gather [i]
 *    (negative i too) become Slices, y and the input's gradient the gather's exactly; other
 *    gathers stay;
 *  - Slices above a Transpose (passes/slice_hoist.c) along axes it moves, y and dX exact; not
 *    along an axis it keeps, nor when the Transpose has another reader;
 *  - Falcon's export: its K/V gathers become Slices, logits as PyTorch's. */
#include <string.h>

#include "ops/grad.h"
#include "passes/gather_slice.h"
#include "passes/slice_hoist.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/harness.h"

/* kind 0: GatherND(x [5, 3, 4], [[-2]]); 1: Gather(x, [1], axis 1); 2: Gather(x, [-1], axis -1);
 * 3: Gather(x, [0, 2], axis 0) (two indices: stays); 4: GatherND(x, [[0, 1]]) (a row, stays) */
static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t d[3] = {5, 3, 4};
    const int x = fr_gc_add_input(g, &r, "X", FR_F32, 3, d, NULL);
    fr_tensor *ix;
    const int64_t one[2] = {1, 1}, two[1] = {2}, pair[2] = {1, 2};
    FR_ASSERT_OK(fr_tensor_new(FR_I64, kind == 0 || kind == 4 ? 2 : 1, kind == 3 ? two : kind == 4 ? pair : one, "I", &ix));
    int64_t *iv = ix->data;
    iv[0] = kind == 0 ? -2 : kind == 1 ? 1 : kind == 2 ? -1 : 0;
    if (kind == 3) iv[1] = 2;
    if (kind == 4) iv[1] = 1;
    int i;
    FR_ASSERT_OK(fr_graph_add_value(g, "I", &i));
    fr_value_set_shape(&g->values[i], FR_I64, ix->rank, ix->dims);
    FR_ASSERT_OK(fr_graph_set_initializer(g, i, ix));
    int y;
    const int nid = fr_gc_node(g, kind == 0 || kind == 4 ? "GatherND" : "Gather", "", 2, (int[]){x, i}, 1, &y);
    if (kind == 1) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
    if (kind == 2) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    /* a product so that the gradient reaching X is not uniform */
    FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){y, y})));
}

static void test_patterns(void)
{
    static const char *const wrt[] = {"X"};
    for (int k = 0; k < 3; k++) fr_ft_check_pattern(build, k, 18, fr_gather_to_slice, 1, 1, wrt, 0.0);
    fr_ft_check_pattern(build, 3, 18, fr_gather_to_slice, 0, 1, wrt, 0.0);
    fr_ft_check_pattern(build, 4, 18, fr_gather_to_slice, 0, 1, wrt, 0.0);
}

/* x [2, 3, 4, 5], Transpose perm [2, 0, 1, 3] -> [4, 2, 3, 5], read by Slices. kind 0: two
 * Slices of axis 0 ([0:3], [3:4]; hoisted); 1: a Slice of axis 3 ([1:4], kept in place: stays);
 * 2: a Slice of axis 0 and a Relu of the Transpose (stays); 3: axis -4 with a step 2 (hoisted) */
static int add_i64(fr_graph *g, const char *name, int64_t v)
{
    fr_tensor *t;
    const int64_t one = 1;
    int id;
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 1, &one, name, &t));
    *(int64_t *)t->data = v;
    FR_ASSERT_OK(fr_graph_add_unique_value(g, name, &id));
    fr_value_set_shape(&g->values[id], FR_I64, 1, &one);
    FR_ASSERT_OK(fr_graph_set_initializer(g, id, t));
    return id;
}

static void add_slice(fr_graph *g, int x, int64_t s0, int64_t e0, int64_t ax, int64_t step, int *out)
{
    const int64_t vals[4] = {s0, e0, ax, step};
    int in[5];
    for (int i = 0; i < 4; i++) in[i + 1] = add_i64(g, "slice_arg", vals[i]);
    in[0] = x;
    *out = fr_gc_op1(g, "Slice", step == 1 ? 4 : 5, in);
}

static void build_hoist(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t d[4] = {2, 3, 4, 5};
    const int x = fr_gc_add_input(g, &r, "X", FR_F32, 4, d, NULL);
    int t;
    const int nid = fr_gc_node(g, "Transpose", "", 1, &x, 1, &t);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", 4, (const int64_t[]){2, 0, 1, 3}));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int a, b;
    if (kind == 0) {
        add_slice(g, t, 0, 3, 0, 1, &a);
        add_slice(g, t, 3, 4, 0, 1, &b);
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){a, a})));
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){b, b})));
    } else if (kind == 1) {
        add_slice(g, t, 1, 4, 3, 1, &a);
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){a, a})));
    } else if (kind == 2) {
        add_slice(g, t, 0, 2, 0, 1, &a);
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){a, a})));
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Relu", 1, &t)));
    } else {
        add_slice(g, t, 0, 4, -4, 2, &a);
        FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Mul", 2, (int[]){a, a})));
    }
}

static void test_hoist(void)
{
    static const char *const wrt[] = {"X"};
    fr_ft_check_pattern(build_hoist, 0, 18, fr_hoist_slices, 2, 1, wrt, 0.0);
    fr_ft_check_pattern(build_hoist, 1, 18, fr_hoist_slices, 0, 1, wrt, 0.0);
    fr_ft_check_pattern(build_hoist, 2, 18, fr_hoist_slices, 0, 1, wrt, 0.0);
    fr_ft_check_pattern(build_hoist, 3, 18, fr_hoist_slices, 1, 1, wrt, 0.0);
}

static void test_falcon(void)
{
    fr_graph *g = fr_ft_load_hf("falcon_op18_static");
    int n = -1;
    FR_ASSERT_OK(fr_gather_to_slice(g, &n));
    CU_ASSERT_EQUAL(n, 4); /* K and V of each layer's multi-query split */
    for (int i = 0; i < g->n_nodes; i++) CU_ASSERT(strcmp(g->nodes[i].op_type, "GatherND") != 0);
    fr_ft_expect_hf_logits(g, "falcon_op18_static");
    fr_graph_free(g);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"one-index gathers become Slices (y, dX exact); others stay", test_patterns},
        {"Slices above a Transpose along the axes it moves (y, dX exact); others stay", test_hoist},
        {"Falcon's multi-query K/V gathers: Slices, logits as PyTorch's", test_falcon},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gather_slice", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
