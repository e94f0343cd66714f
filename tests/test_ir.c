/* IR basics: values, nodes, attributes, toposort, cycle detection, copies that share storage. */
#include <string.h>

#include "graph/ir.h"
#include "tests/harness.h"

static void test_add_lookup(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    int a, b, c, dup;
    FR_ASSERT_OK(fr_graph_add_value(g, "a", &a));
    FR_ASSERT_OK(fr_graph_add_value(g, "b", &b));
    for (int i = 0; i < 500; i++) { /* force map and array growth */
        char nm[32];
        snprintf(nm, sizeof nm, "v%d", i);
        int id;
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &id));
    }
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "a"), a);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "b"), b);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "v499"), b + 500);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "nope"), -1);
    CU_ASSERT_EQUAL(fr_graph_add_value(g, "a", &dup), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'a'"));
    FR_ASSERT_OK(fr_graph_add_unique_value(g, "a", &c));
    CU_ASSERT_STRING_EQUAL(g->values[c].name, "a__1");
    fr_graph_free(g);
}

static void test_toposort_and_cycle(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    int x, y, z, w;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    FR_ASSERT_OK(fr_graph_add_value(g, "y", &y));
    FR_ASSERT_OK(fr_graph_add_value(g, "z", &z));
    FR_ASSERT_OK(fr_graph_add_value(g, "w", &w));
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    int in2[2] = {y, x};
    /* z = y + x added before y = Neg(x): toposort must reorder */
    FR_ASSERT_OK(fr_graph_add_node(g, "Add", "", "add", 2, in2, 1, &z, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Neg", "", "neg", 1, &x, 1, &y, NULL));
    FR_ASSERT_OK(fr_graph_toposort(g));
    CU_ASSERT_STRING_EQUAL(g->nodes[0].name, "neg");
    CU_ASSERT_STRING_EQUAL(g->nodes[1].name, "add");
    CU_ASSERT_EQUAL(g->values[z].producer, 1);
    /* a cycle: w = Neg(z), and rewire neg to read w */
    FR_ASSERT_OK(fr_graph_add_node(g, "Neg", "", "neg2", 1, &z, 1, &w, NULL));
    g->nodes[0].inputs[0] = w;
    CU_ASSERT_EQUAL(fr_graph_toposort(g), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "cycle"));
    fr_graph_free(g);
}

static void test_attrs(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    int x, y;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    FR_ASSERT_OK(fr_graph_add_value(g, "y", &y));
    int nid;
    FR_ASSERT_OK(fr_graph_add_node(g, "Transpose", "", NULL, 1, &x, 1, &y, &nid));
    fr_node *n = &g->nodes[nid];
    CU_ASSERT_STRING_EQUAL(n->name, "Transpose_0");
    int64_t perm[3] = {2, 0, 1};
    FR_ASSERT_OK(fr_node_set_attr_ints(n, "perm", 3, perm));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "axis", -1));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "axis", 4)); /* replaces */
    int cnt;
    const int64_t *vals;
    FR_ASSERT_OK(fr_node_attr_ints(n, "perm", &cnt, &vals));
    CU_ASSERT_EQUAL(cnt, 3);
    CU_ASSERT_EQUAL(vals[0], 2);
    int64_t ax;
    FR_ASSERT_OK(fr_node_attr_int(n, "axis", 0, &ax));
    CU_ASSERT_EQUAL(ax, 4);
    CU_ASSERT_EQUAL(n->n_attrs, 2);
    FR_ASSERT_OK(fr_node_attr_int(n, "missing", 7, &ax));
    CU_ASSERT_EQUAL(ax, 7);
    float f;
    CU_ASSERT_EQUAL(fr_node_attr_float(n, "perm", 0.f, &f), FR_ERR_PARSE);
    fr_graph_free(g);
}

static void test_shape_overflow(void)
{
    int64_t dims[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 16};
    int64_t n;
    CU_ASSERT_EQUAL(fr_shape_numel(3, dims, "t", &n), FR_ERR_OOM);
    fr_tensor *t;
    CU_ASSERT_EQUAL(fr_tensor_new(FR_F32, 3, dims, "t", &t), FR_ERR_OOM);
    int64_t neg[1] = {-3};
    CU_ASSERT_EQUAL(fr_shape_numel(1, neg, "t", &n), FR_ERR_SHAPE);
}

static void test_half_bf16(void)
{
    /* every half value round-trips exactly through float */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fr_f16_to_f32((uint16_t)h);
        uint16_t back = fr_f32_to_f16(f);
        if (f != f) {
            CU_ASSERT((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu));
        } else if (back != h) {
            CU_FAIL("f16 round trip");
            break;
        }
        float fb = fr_bf16_to_f32((uint16_t)h);
        if (fb == fb && fr_f32_to_bf16(fb) != h) {
            CU_FAIL("bf16 round trip");
            break;
        }
    }
    /* round to nearest even at the halfway point */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(1.0f + 1.0f / 256.0f), 0x3f80);  /* tie -> even (down) */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(1.0f + 3.0f / 256.0f), 0x3f82);  /* tie -> even (up) */
    CU_ASSERT_EQUAL(fr_f32_to_f16(65520.0f), 0x7c00);               /* overflows to inf */
    CU_ASSERT_EQUAL(fr_f32_to_f16(65519.0f), 0x7bff);
    CU_ASSERT_EQUAL(fr_f32_to_f16(5.9604645e-08f), 0x0001);         /* min subnormal */
    CU_ASSERT_EQUAL(fr_f32_to_f16(2.9802322e-08f), 0x0000);         /* half of it: tie to even 0 */
}

/* A copy made with shared constants borrows the source's storage; take_constants hands it
 * over (no copy), so the copy outlives the source with the same bytes, and storage the copy
 * borrows from elsewhere is copied. */
static void test_shared_copy_take(void)
{
    fr_graph *g, *c;
    FR_ASSERT_OK(fr_graph_new(&g));
    int a, b;
    FR_ASSERT_OK(fr_graph_add_value(g, "a", &a));
    FR_ASSERT_OK(fr_graph_add_value(g, "b", &b));
    const int64_t d[1] = {5};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d, "a", &g->values[a].constant));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d, "b", &g->values[b].constant));
    for (int i = 0; i < 5; i++) ((float *)g->values[a].constant->data)[i] = (float)i + 0.5f;
    FR_ASSERT_OK(fr_train_clone_graph(g, 1, &c));
    CU_ASSERT_PTR_EQUAL(c->values[a].constant->data, g->values[a].constant->data);
    CU_ASSERT_FALSE(c->values[a].constant->owns_data);
    /* b in the copy borrows storage g does not own: it must be copied */
    float outside[5] = {9, 8, 7, 6, 5};
    c->values[b].constant->data = outside;
    FR_ASSERT_OK(fr_graph_take_constants(c, g));
    CU_ASSERT_TRUE(c->values[a].constant->owns_data);
    CU_ASSERT_FALSE(g->values[a].constant->owns_data);
    CU_ASSERT_TRUE(c->values[b].constant->owns_data);
    CU_ASSERT_PTR_NOT_EQUAL(c->values[b].constant->data, outside);
    fr_graph_free(g); /* frees only what it still owns: b's own storage */
    const float *x = c->values[a].constant->data, *y = c->values[b].constant->data;
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(x[i], (float)i + 0.5f);
        CU_ASSERT_EQUAL(y[i], outside[i]);
    }
    fr_graph_free(c);
}

static CU_TestInfo ir_tests[] = {
    {"shared_copy_take", test_shared_copy_take},
    {"add_lookup", test_add_lookup},
    {"toposort_and_cycle", test_toposort_and_cycle},
    {"attrs", test_attrs},
    {"shape_overflow", test_shape_overflow},
    {"half_bf16", test_half_bf16},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ir", NULL, NULL, NULL, NULL, ir_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
