/* The fused rotary ops (ops/rotary.c) against the unfused ONNX chain
 * Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h, hd)), Slice(x, 0, h)), sin)), fresh random
 * inputs, tables of several broadcast shapes ([T, hd], [1, 1, T, hd], per batch, [T, 1], one
 * table shaped unlike the other):
 *  - Rotary: float64 within 1e-12, float32 within 1e-6 (relative L2; the fused op rounds once,
 *    the chain after every op);
 *  - gradcheck in float64 (central differences, 1e-6) with respect to X;
 *  - RotaryGrad (through the gradient rule) vs autodiff of the chain: float64 1e-12, float32 1e-6;
 *  - a gradient asked for cos or sin is an error naming the node; bad shapes are errors;
 *  - the partial rotary (rotary_dim R < hd, cases with rd set; an odd hd too) against
 *    Concat(chain(x[..., :R]), x[..., R:]), all of the above. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

typedef struct shape_case {
    int rx, rc, rs;
    int64_t x[5], c[5], s[5];
    int64_t rd; /* rotary_dim (0: the whole head); the tables then broadcast to [.., rd] */
} shape_case;

static const shape_case cases[] = {
    {2, 2, 2, {3, 4}, {3, 4}, {3, 4}, 0},
    {4, 2, 2, {2, 3, 5, 8}, {5, 8}, {5, 8}, 0},
    {4, 4, 4, {2, 3, 7, 16}, {1, 1, 7, 16}, {1, 1, 7, 16}, 0},
    {5, 2, 2, {2, 2, 3, 6, 10}, {6, 10}, {6, 10}, 0},
    {4, 4, 4, {2, 3, 4, 6}, {2, 1, 4, 6}, {2, 1, 4, 6}, 0},
    {3, 2, 2, {2, 5, 6}, {5, 1}, {5, 1}, 0},
    {3, 2, 1, {3, 4, 8}, {4, 8}, {8}, 0},
    {1, 1, 1, {2}, {2}, {2}, 0},
    {4, 2, 2, {2, 3, 5, 16}, {5, 4}, {5, 4}, 4},
    {4, 4, 4, {2, 3, 7, 12}, {1, 1, 7, 8}, {1, 1, 7, 8}, 8},
    {3, 2, 2, {3, 4, 10}, {4, 6}, {4, 6}, 6},
    {3, 2, 2, {2, 3, 5}, {3, 2}, {3, 2}, 2},
    {4, 4, 4, {2, 3, 4, 24}, {2, 1, 4, 16}, {2, 1, 4, 16}, 16},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static int64_t numel(int rank, const int64_t *d)
{
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= d[k];
    return n;
}

static int add_random(fr_graph *g, fr_rng *r, const char *name, fr_dtype dt, int rank, const int64_t *dims)
{
    const int64_t n = numel(rank, dims);
    double *v = malloc(sizeof(double) * (size_t)n);
    CU_ASSERT_FATAL(v != NULL);
    for (int64_t i = 0; i < n; i++) v[i] = dt == FR_F32 ? (float)fr_rng_normal(r) : fr_rng_normal(r);
    int id = fr_gc_add_values(g, name, dt, rank, dims, v);
    free(v);
    return id;
}

/* A graph with constant inputs X, C (cos), S (sin), random N(0, 1). */
static fr_graph *new_graph(fr_rng *r, const shape_case *c, fr_dtype dt, int *X, int *C, int *S)
{
    fr_graph *g = fr_gc_new_graph(17);
    CU_ASSERT_FATAL(g != NULL);
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    *X = add_random(g, r, "X", dt, c->rx, c->x);
    *C = add_random(g, r, "C", dt, c->rc, c->c);
    *S = add_random(g, r, "S", dt, c->rs, c->s);
    return g;
}

static int i64(fr_graph *g, const char *name, int64_t v)
{
    int64_t one = 1;
    return fr_gc_add_input(g, NULL, name, FR_I64, 1, &one, &v);
}

static int chain_whole(fr_graph *g, int X, int C, int S);

/* The unfused chain as exporters write it; with rd (a partial rotary) on x[..., :rd], joined
 * with x[..., rd:] as HF's apply_rotary_pos_emb does. */
static int chain(fr_graph *g, int X, int C, int S, int64_t rd)
{
    if (!rd) return chain_whole(g, X, C, S);
    int ax = i64(g, "axis_part", -1);
    int xr = fr_gc_op1(g, "Slice", 4, (int[]){X, i64(g, "r0", 0), i64(g, "r1", rd), ax});
    int xp = fr_gc_op1(g, "Slice", 4, (int[]){X, i64(g, "p0", rd), i64(g, "p1", INT64_MAX), ax}), y;
    int nid = fr_gc_node(g, "Concat", "", 2, (int[]){chain_whole(g, xr, C, S), xp}, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

static int chain_whole(fr_graph *g, int X, int C, int S)
{
    const fr_value *x = &g->values[X];
    const int64_t hd = x->dims[x->rank - 1];
    int ax = i64(g, "axis_last", -1);
    int x1 = fr_gc_op1(g, "Slice", 4, (int[]){X, i64(g, "s0", 0), i64(g, "e0", hd / 2), ax});
    int x2 = fr_gc_op1(g, "Slice", 4, (int[]){X, i64(g, "s1", hd / 2), i64(g, "e1", INT64_MAX), ax});
    int neg = fr_gc_op1(g, "Neg", 1, &x2), rot;
    int nid = fr_gc_node(g, "Concat", "", 2, (int[]){neg, x1}, 1, &rot);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){X, C}), fr_gc_op1(g, "Mul", 2, (int[]){rot, S})});
}

static int rotary(fr_graph *g, int X, int C, int S, int64_t rd)
{
    int y, nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, C, S}, 1, &y);
    if (rd) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", rd));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

static void check_forward(fr_dtype dt, double tol)
{
    fr_rng r = fr_test_rng(dt == FR_F64 ? "rotary_fwd64" : "rotary_fwd32");
    for (int ci = 0; ci < N_CASES; ci++) {
        int X, C, S;
        fr_graph *g = new_graph(&r, &cases[ci], dt, &X, &C, &S);
        int ref = chain(g, X, C, S, cases[ci].rd), y = rotary(g, X, C, S, cases[ci].rd);
        fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
        CU_ASSERT_FATAL(t != NULL);
        FR_ASSERT_OK(fr_gc_run(g, t));
        double e = fr_gc_rel_l2(fr_gc_value(g, t, y), fr_gc_value(g, t, ref));
        if (e > tol) printf("\n  case %d %s: %g", ci, fr_dtype_name(dt), e);
        CU_ASSERT(e <= tol);
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
}

static void test_forward_f64(void) { check_forward(FR_F64, 1e-12); }
static void test_forward_f32(void) { check_forward(FR_F32, 1e-6); }

static void test_gradcheck(void)
{
    fr_rng r = fr_test_rng("rotary_gradcheck");
    for (int ci = 0; ci < N_CASES; ci++) {
        int X, C, S;
        fr_graph *g = new_graph(&r, &cases[ci], FR_F64, &X, &C, &S);
        char what[64];
        snprintf(what, sizeof what, "Rotary case %d", ci);
        fr_gc_check(g, &r, rotary(g, X, C, S, cases[ci].rd), 1, &X, what, 1e-6);
        CU_ASSERT(fr_gc_count_nodes(g, "RotaryGrad") == 1);
        fr_graph_free(g);
    }
}

/* dX of the chain (fused = 0) or of Rotary (fused = 1) for the same inputs and dy. */
static fr_tensor *grad_x(const shape_case *c, fr_dtype dt, const char *seed, int fused)
{
    fr_rng r = fr_test_rng(seed);
    int X, C, S;
    fr_graph *g = new_graph(&r, c, dt, &X, &C, &S);
    const int64_t n = numel(c->rx, c->x);
    double *dy = malloc(sizeof(double) * (size_t)n);
    CU_ASSERT_FATAL(dy != NULL);
    for (int64_t i = 0; i < n; i++) dy[i] = dt == FR_F32 ? (float)fr_rng_normal(&r) : fr_rng_normal(&r);
    int y = fused ? rotary(g, X, C, S, c->rd) : chain(g, X, C, S, c->rd), gv = -1;
    fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &X, &gv), *out = NULL;
    CU_ASSERT_FATAL(t != NULL && gv >= 0);
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, gv), "dX", &out));
    CU_ASSERT(fr_gc_count_nodes(g, "RotaryGrad") == fused);
    fr_gc_free_tensors(g, t);
    free(t);
    free(dy);
    fr_graph_free(g);
    return out;
}

static void check_grad_vs_unfused(fr_dtype dt, double tol)
{
    const char *seed = dt == FR_F64 ? "rotary_grad64" : "rotary_grad32";
    for (int ci = 0; ci < N_CASES; ci++) {
        fr_tensor *ref = grad_x(&cases[ci], dt, seed, 0), *got = grad_x(&cases[ci], dt, seed, 1);
        double e = fr_gc_rel_l2(got, ref);
        if (e > tol) printf("\n  case %d %s: dX %g", ci, fr_dtype_name(dt), e);
        CU_ASSERT(e <= tol);
        fr_tensor_free(ref);
        fr_tensor_free(got);
    }
}

static void test_grad_f64(void) { check_grad_vs_unfused(FR_F64, 1e-12); }
static void test_grad_f32(void) { check_grad_vs_unfused(FR_F32, 1e-6); }

/* Differentiating with respect to the sin table is refused, naming the node and the table. */
static void test_no_table_gradient(void)
{
    fr_rng r = fr_test_rng("rotary_table_grad");
    int X, C, S;
    fr_graph *g = new_graph(&r, &cases[1], FR_F64, &X, &C, &S);
    int y = rotary(g, X, C, S, 0);
    int loss = fr_gc_op1(g, "ReduceSum", 1, &y), gr[2] = {-1, -1};
    fr_status st = fr_autodiff(g, loss, 2, (int[]){X, S}, gr);
    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
    const char *msg = fr_last_error();
    CU_ASSERT(strstr(msg, "Rotary") != NULL && strstr(msg, "'S'") != NULL);
    if (st != FR_ERR_UNSUPPORTED) printf("\n  %s", msg);
    fr_graph_free(g);
}

static void test_bad_shapes(void)
{
    fr_rng r = fr_test_rng("rotary_bad");
    fr_graph *g = fr_gc_new_graph(17);
    CU_ASSERT_FATAL(g != NULL);
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    int64_t odd[2] = {3, 5}, x[3] = {2, 3, 4}, big[3] = {2, 3, 8}, wide[4] = {2, 2, 3, 4}, t[2] = {3, 4};
    int O = add_random(g, &r, "odd", FR_F32, 2, odd), X = add_random(g, &r, "X", FR_F32, 3, x);
    int B = add_random(g, &r, "big", FR_F32, 3, big), W = add_random(g, &r, "wide", FR_F32, 4, wide);
    int T = add_random(g, &r, "T", FR_F32, 2, t), T64 = add_random(g, &r, "T64", FR_F64, 2, t);
    int y;
    int nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){O, O, O}, 1, &y);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* odd head size */
    nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, B, T}, 1, &y);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* cos does not broadcast */
    nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, W, T}, 1, &y);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* cos would enlarge X */
    nid = fr_gc_node(g, "RotaryGrad", FR_DOMAIN_FP8RUN, 3, (int[]){X, T, T64}, 1, &y);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED); /* dtypes differ */
    static const int64_t bad_rd[3] = {3, 6, 0}; /* odd; past the head; none */
    for (int i = 0; i < 3; i++) {
        nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, T, T}, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", bad_rd[i]));
        CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    }
    int64_t t2[2] = {3, 2};
    int T2 = add_random(g, &r, "T2", FR_F32, 2, t2);
    nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, T, T2}, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", 2));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* cos [3, 4] is wider than the 2 rotated columns */
    nid = fr_gc_node(g, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){X, T2, T2}, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", 2));
    FR_ASSERT_OK(fr_node_infer(g, nid)); /* and [3, 2] tables fit them */
    fr_graph_free(g);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Rotary float64 == unfused chain (1e-12), broadcast tables", test_forward_f64},
        {"Rotary float32 == unfused chain (1e-6), broadcast tables", test_forward_f32},
        {"gradcheck float64", test_gradcheck},
        {"RotaryGrad float64 == autodiff of the chain (1e-12)", test_grad_f64},
        {"RotaryGrad float32 == autodiff of the chain (1e-6)", test_grad_f32},
        {"no gradient for the tables: a clear error", test_no_table_gradient},
        {"bad shapes are errors", test_bad_shapes},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"ops_rotary", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
