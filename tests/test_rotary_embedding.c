/* Opset 23's RotaryEmbedding lowered onto ai.fp8run::Rotary (passes/rotary_embedding.c):
 *  - 4D [B, N, S, H] and 3D [B, S, N*H] inputs, [B, S, R/2] caches or [P, R/2] ones gathered
 *    by position_ids, a partial rotary_embedding_dim, interleaved pairs, and all of these
 *    together: y as the spec's formula computed here element by element (1e-6, fresh random
 *    inputs); one Rotary per node, no RotaryEmbedding left;
 *  - the gradient of X through the lowered graph against central differences (float64);
 *  - bad attributes (interleaved=2, an odd or too large rotary_embedding_dim, a 3D X without
 *    num_heads) are errors naming the node and the attribute;
 *  - fr_prepare_forward lowers it (so `fp8run run` and the trainer get it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/rotary_embedding.h"

#define B 2
#define N 3
#define S 5
#define H 8
#define P 9

typedef struct cfg {
    int rank3, pos, interleaved, rdim; /* rdim 0: the whole head */
} cfg;

/* y[b, n, s, :] by the spec: x1/x2 halves (or evens/odds) of the first R, rotated. */
static void reference(const cfg *c, const double *x, const double *cs, const double *sn, const int64_t *pos, double *y)
{
    const int R = c->rdim ? c->rdim : H, h = R / 2;
    for (int b = 0; b < B; b++)
        for (int n = 0; n < N; n++)
            for (int s = 0; s < S; s++) {
                /* X element (b, n, s, j): 4D [B, N, S, H], 3D [B, S, N*H] */
                const int64_t off = c->rank3 ? ((int64_t)(b * S + s) * N + n) * H : ((int64_t)(b * N + n) * S + s) * H;
                const int64_t row = c->pos ? pos[b * S + s] * h : (int64_t)(b * S + s) * h;
                for (int j = 0; j < H; j++) y[off + j] = x[off + j];
                for (int i = 0; i < h; i++) {
                    const int i1 = c->interleaved ? 2 * i : i, i2 = c->interleaved ? 2 * i + 1 : i + h;
                    const double x1 = x[off + i1], x2 = x[off + i2], co = cs[row + i], si = sn[row + i];
                    y[off + i1] = co * x1 - si * x2;
                    y[off + i2] = si * x1 + co * x2;
                }
            }
}

/* The RotaryEmbedding node's graph; *ids: X, cos, sin, position_ids (-1), y. */
static fr_graph *build(const cfg *c, fr_rng *r, fr_dtype dt, int64_t interleaved_attr, int heads, int *ids)
{
    fr_graph *g = fr_gc_new_graph(23);
    CU_ASSERT_FATAL(g != NULL);
    const int R = c->rdim ? c->rdim : H;
    const int64_t d4[4] = {B, N, S, H}, d3[3] = {B, S, N * H}, dc3[3] = {B, S, R / 2}, dc2[2] = {P, R / 2}, dp[2] = {B, S};
    ids[0] = fr_gc_add_input(g, r, "X", dt, c->rank3 ? 3 : 4, c->rank3 ? d3 : d4, NULL);
    ids[1] = fr_gc_add_input(g, r, "cos", dt, c->pos ? 2 : 3, c->pos ? dc2 : dc3, NULL);
    ids[2] = fr_gc_add_input(g, r, "sin", dt, c->pos ? 2 : 3, c->pos ? dc2 : dc3, NULL);
    ids[3] = -1;
    if (c->pos) {
        int64_t p[B * S];
        for (int i = 0; i < B * S; i++) p[i] = (int64_t)(fr_rng_uniform(r) * P);
        ids[3] = fr_gc_add_input(g, NULL, "position_ids", FR_I64, 2, dp, p);
    }
    int y, nid = fr_gc_node(g, "RotaryEmbedding", "", c->pos ? 4 : 3, ids, 1, &y);
    fr_node *n = &g->nodes[nid];
    FR_ASSERT_OK(fr_node_set_attr_int(n, "interleaved", interleaved_attr));
    if (c->rdim) FR_ASSERT_OK(fr_node_set_attr_int(n, "rotary_embedding_dim", c->rdim));
    if (heads) FR_ASSERT_OK(fr_node_set_attr_int(n, "num_heads", heads));
    fr_value_set_shape(&g->values[y], dt, g->values[ids[0]].rank, g->values[ids[0]].dims);
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    ids[4] = y;
    return g;
}

/* Lowers, resolves and infers g; asserts one Rotary and no RotaryEmbedding left. */
static void lower(fr_graph *g)
{
    int n = -1;
    FR_ASSERT_OK(fr_lower_rotary_embedding(g, &n));
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "Rotary"), 1);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "RotaryEmbedding"), 0);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    FR_ASSERT_OK(fr_infer_graph(g, 0, 0, NULL));
}

static const double *f64(const fr_graph *g, int vid) { return g->values[vid].constant->data; }

/* Runs g on the CPU: its output within tol of want[0..n). */
static void expect_output(fr_graph *g, const double *want, int64_t n, double tol, const char *what)
{
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    CU_ASSERT_FATAL(t != NULL);
    FR_ASSERT_OK(fr_gc_run(g, t));
    fr_gc_expect(g, t, g->outputs[0], want, n, tol, what);
    fr_gc_free_tensors(g, t);
    free(t);
}

static void check(const cfg *c)
{
    fr_rng r = fr_test_rng("rotary_embedding");
    int ids[5];
    fr_graph *g = build(c, &r, FR_F64, c->interleaved, c->rank3 || c->pos ? N : 0, ids);
    const int64_t n = (int64_t)B * N * S * H;
    double *want = malloc(sizeof(double) * (size_t)n);
    CU_ASSERT_FATAL(want != NULL);
    reference(c, f64(g, ids[0]), f64(g, ids[1]), f64(g, ids[2]), c->pos ? g->values[ids[3]].constant->data : NULL, want);
    lower(g);
    expect_output(g, want, n, 1e-12, "lowered RotaryEmbedding");
    free(want);
    /* dL/dX by central differences */
    const int x = fr_graph_find_value(g, "X");
    fr_gc_check(g, &r, g->outputs[0], 1, &x, "dX", 1e-7);
    fr_graph_free(g);
}

static void test_4d(void) { check(&(cfg){0, 0, 0, 0}); }
static void test_4d_pos(void) { check(&(cfg){0, 1, 0, 0}); }
static void test_3d(void) { check(&(cfg){1, 0, 0, 0}); }
static void test_partial(void) { check(&(cfg){0, 0, 0, 4}); }
static void test_interleaved(void) { check(&(cfg){0, 0, 1, 0}); }
static void test_all(void) { check(&(cfg){1, 1, 1, 6}); }

/* float32 through fr_prepare_forward: lowered there, same y as the reference (1e-6). */
static void test_prepare(void)
{
    fr_rng r = fr_test_rng("rotary_embedding_prepare");
    const cfg c = {0, 1, 0, 0};
    int ids[5];
    fr_graph *g = build(&c, &r, FR_F32, 0, N, ids);
    const int64_t n = (int64_t)B * N * S * H;
    double *x = malloc(sizeof(double) * (size_t)n * 2), *want = x + n, cs[P * H / 2], sn[P * H / 2];
    CU_ASSERT_FATAL(x != NULL);
    for (int64_t i = 0; i < n; i++) x[i] = ((const float *)g->values[ids[0]].constant->data)[i];
    for (int i = 0; i < P * H / 2; i++) {
        cs[i] = ((const float *)g->values[ids[1]].constant->data)[i];
        sn[i] = ((const float *)g->values[ids[2]].constant->data)[i];
    }
    reference(&c, x, cs, sn, g->values[ids[3]].constant->data, want);
    fr_prepare_options po;
    fr_prepare_options_default(&po);
    po.fold = 0;
    FR_ASSERT_OK(fr_prepare_forward(g, &po, NULL));
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "Rotary"), 1);
    expect_output(g, want, n, 1e-6, "prepared RotaryEmbedding");
    free(x);
    fr_graph_free(g);
}

/* A bad attribute: an error naming the node and the attribute. */
static void expect_error(const cfg *c, int64_t interleaved, int heads, const char *attr)
{
    fr_rng r = fr_test_rng("rotary_embedding_errors");
    int ids[5];
    fr_graph *g = build(c, &r, FR_F32, interleaved, heads, ids);
    fr_status st = fr_lower_rotary_embedding(g, NULL);
    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
    const char *e = fr_last_error();
    if (!strstr(e, "RotaryEmbedding") || !strstr(e, attr)) printf("\n  error: %s", e);
    CU_ASSERT(strstr(e, "RotaryEmbedding") != NULL); /* the node's name */
    CU_ASSERT(strstr(e, attr) != NULL);
    fr_graph_free(g);
}

static void test_errors(void)
{
    expect_error(&(cfg){0, 0, 0, 0}, 2, 0, "interleaved");
    expect_error(&(cfg){0, 0, 0, 3}, 0, 0, "rotary_embedding_dim");
    expect_error(&(cfg){0, 0, 0, 10}, 0, 0, "rotary_embedding_dim");
    expect_error(&(cfg){1, 0, 0, 0}, 0, 0, "num_heads");
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"4D X, [B, S, H/2] caches: y and dX", test_4d},
        {"4D X, position_ids: y and dX", test_4d_pos},
        {"3D X with num_heads: y and dX", test_3d},
        {"rotary_embedding_dim 4 of 8: y and dX", test_partial},
        {"interleaved: y and dX", test_interleaved},
        {"3D, position_ids, interleaved, dim 6: y and dX", test_all},
        {"fr_prepare_forward lowers it (float32)", test_prepare},
        {"bad attributes: errors naming node and attribute", test_errors},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"rotary_embedding", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
