/* Gradient rules of the data-movement and reduction families (ops/gather.c, ops/shape.c,
 * ops/layout.c, ops/reduce.c) and their backward ops (GatherGrad, GatherElementsGrad,
 * GatherNDGrad, SliceGrad, TileGrad, ReduceGrad).
 *
 * - Every rule against central differences (tests/gradcheck.c) in float64 on fresh random
 *   inputs: relative L2 error < 1e-6 per input. Gather with repeated, negative and scalar
 *   indices on axes 0, 1 and -1; Slice with negative steps, clamped ends and omitted axes;
 *   Split into uneven parts with an output unused, in all three opset forms; Concat of three
 *   inputs; every reduction with keepdims 0/1, several axes, axes as attribute and as input,
 *   empty axes with noop_with_empty_axes 0 and 1.
 * - Exact values where the derivative is a convention: ReduceMax/ReduceMin ties share dy
 *   evenly (torch.amax/amin), ReduceProd with one and with two zeros, repeated Gather indices
 *   summing into one row.
 * - float32 kernels against float64 (1e-6 relative per element), and float32 scatter-adds
 *   reproducible bit for bit.
 * - Errors name the node. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

#define TOL 1e-6
#define TOL_EXACT 1e-14 /* relative: gradients against exact values */

static double worst_seen = 0; /* worst gradcheck error over the whole run, printed at the end */

static double *f64(fr_graph *g, int vid) { return g->values[vid].constant->data; }
static int64_t numel(fr_graph *g, int vid) { return fr_tensor_numel(g->values[vid].constant); }

static void check(fr_graph *g, fr_rng *r, int out, int n_wrt, const int *wrt, const char *what)
{
    double err = fr_gc_check(g, r, out, n_wrt, wrt, what, TOL);
    if (err > worst_seen || isnan(err)) worst_seen = err;
}

static int ints(fr_graph *g, const char *name, int rank, const int64_t *dims, const int64_t *v)
{
    fr_rng r = fr_test_rng(name);
    return fr_gc_add_input(g, &r, name, FR_I64, rank, dims, v);
}

static int ints1(fr_graph *g, const char *name, int64_t n, const int64_t *v)
{
    return ints(g, name, 1, &n, v);
}

/* ---- Gather family ---- */

static void gather_case(int64_t opset, int rank, const int64_t *dims, int q, const int64_t *qd,
                        const int64_t *idx, int64_t axis, fr_dtype idx_dt, const char *what)
{
    fr_rng r = fr_test_rng(what);
    fr_graph *g = fr_gc_new_graph(opset);
    int x = fr_gc_add_input(g, &r, "x", FR_F64, rank, dims, NULL);
    int iv = fr_gc_add_input(g, &r, "idx", idx_dt, q, qd, idx);
    int in[2] = {x, iv}, y;
    int nid = fr_gc_node(g, "Gather", "", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", axis));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    check(g, &r, y, 1, &x, what);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "GatherGrad"), 1);
    fr_graph_free(g);
}

static void test_gather(void)
{
    /* axis 0, 2-D indices, repeats (0 three times via 0 and -5) and negatives */
    int64_t d0[2] = {5, 3}, q0[2] = {2, 3}, i0[6] = {0, -1, 2, 0, 4, -5};
    gather_case(13, 2, d0, 2, q0, i0, 0, FR_I64, "Gather axis 0 [5,3] idx [2,3]");
    /* axis 1 of a 3-D tensor */
    int64_t d1[3] = {2, 4, 3}, q1[1] = {5}, i1[5] = {1, -1, 1, 3, 0};
    gather_case(13, 3, d1, 1, q1, i1, 1, FR_I64, "Gather axis 1 [2,4,3] idx [5]");
    /* axis -1, int32 indices */
    int64_t d2[2] = {3, 4}, q2[2] = {2, 2}, i2[4] = {-1, 0, 3, -1};
    gather_case(11, 2, d2, 2, q2, i2, -1, FR_I32, "Gather axis -1 int32");
    /* scalar indices drop the axis */
    int64_t d3[2] = {4, 3}, i3[1] = {2}, i4[1] = {-1};
    gather_case(13, 2, d3, 0, NULL, i3, 0, FR_I64, "Gather scalar axis 0");
    gather_case(13, 2, d3, 0, NULL, i4, 1, FR_I64, "Gather scalar -1 axis 1");
    /* 1-D data with a scalar index: a rank-0 output */
    int64_t d4[1] = {6};
    gather_case(1, 1, d4, 0, NULL, i4, 0, FR_I64, "Gather 1-D scalar (opset 1)");
}

/* Repeated embedding rows sum exactly: every row of dy is 1, 2, 4, ... (exact in double) */
static void test_gather_repeats_exact(void)
{
    fr_graph *g = fr_gc_new_graph(13);
    int64_t dd[2] = {4, 2}, qd[1] = {5}, idx[5] = {3, 1, 3, -1, 0};
    const double xs[8] = {0};
    int x = fr_gc_add_values(g, "x", FR_F64, 2, dd, xs);
    int iv = ints(g, "idx", 1, qd, idx);
    int in[2] = {x, iv}, grads[1];
    int y = fr_gc_op1(g, "Gather", 2, in);
    const double dy[10] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
    fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, grads);
    /* row 3 gets rows 0, 2 and 3 of dy; row 1 row 1; row 0 row 4; row 2 nothing */
    const double want[8] = {256, 512, 4, 8, 0, 0, 1 + 16 + 64, 2 + 32 + 128};
    fr_gc_expect(g, t, grads[0], want, 8, TOL_EXACT, "Gather repeated rows");
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

static void test_gather_elements(void)
{
    const struct {
        int64_t axis;
        int64_t dd[2], qd[2];
        int64_t idx[12];
        const char *what;
    } cases[] = {
        /* indices longer than the axis (repeats), narrower outside it */
        {1, {3, 4}, {2, 6}, {0, 3, -1, 0, 1, 0, 2, 2, -4, 1, 3, 3}, "GatherElements axis 1"},
        {0, {3, 4}, {4, 3}, {0, -1, 2, 2, 1, 0, -3, 0, 0, 1, 1, 2}, "GatherElements axis 0"},
        {-1, {2, 3}, {2, 4}, {2, 2, 2, 0, -1, 1, 0, 0}, "GatherElements axis -1"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng(cases[c].what);
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, cases[c].dd, NULL);
        int iv = ints(g, "idx", 2, cases[c].qd, cases[c].idx);
        int in[2] = {x, iv}, y;
        int nid = fr_gc_node(g, "GatherElements", "", 2, in, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", cases[c].axis));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, cases[c].what);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "GatherElementsGrad"), 1);
        fr_graph_free(g);
    }
}

static void test_gather_nd(void)
{
    const struct {
        int64_t opset, b;
        int r, q;
        int64_t dd[3], qd[3];
        int64_t idx[12];
        const char *what;
    } cases[] = {
        /* whole rows [2] of a [4,3,2] by (i, j) pairs, repeated and negative */
        {11, 0, 3, 2, {4, 3, 2}, {5, 2}, {0, 1, 3, -1, 0, 1, -4, 1, 2, 0}, "GatherND b=0 m=2"},
        /* slabs [3,2] by a single index */
        {13, 0, 3, 2, {4, 3, 2}, {3, 1}, {1, -1, 1}, "GatherND b=0 m=1"},
        /* batch_dims 1: per batch, elements of [3,4] by (i, j) */
        {13, 1, 3, 3, {2, 3, 4}, {2, 3, 2}, {0, 1, 0, 1, 2, -1, 1, 1, 1, 1, -3, 0}, "GatherND b=1"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng(cases[c].what);
        fr_graph *g = fr_gc_new_graph(cases[c].opset);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, cases[c].r, cases[c].dd, NULL);
        int iv = ints(g, "idx", cases[c].q, cases[c].qd, cases[c].idx);
        int in[2] = {x, iv}, y;
        int nid = fr_gc_node(g, "GatherND", "", 2, in, 1, &y);
        if (cases[c].b)
            FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "batch_dims", cases[c].b));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, cases[c].what);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "GatherNDGrad"), 1);
        fr_graph_free(g);
    }
}

/* float32 scatter-add: the same bits on every run, each row the double sum rounded once */
static void test_scatter_f32_deterministic(void)
{
    fr_rng r = fr_test_rng("scatter_f32");
    const int64_t vocab = 7, dim = 5, ntok = 300;
    int64_t *idx = malloc(sizeof(int64_t) * ntok);
    double *dy = malloc(sizeof(double) * ntok * dim);
    CU_ASSERT_FATAL(idx && dy);
    for (int64_t j = 0; j < ntok; j++) /* half of them negative */
        idx[j] = (int64_t)(fr_rng_uniform(&r) * vocab) - (j & 1 ? vocab : 0);
    for (int64_t i = 0; i < ntok * dim; i++) dy[i] = (float)(fr_rng_normal(&r) * 1000);
    double want[7 * 5] = {0};
    for (int64_t j = 0; j < ntok; j++) {
        int64_t v = idx[j] < 0 ? idx[j] + vocab : idx[j];
        for (int64_t e = 0; e < dim; e++) want[v * dim + e] += dy[j * dim + e];
    }
    float first[7 * 5];
    for (int run = 0; run < 2; run++) {
        fr_graph *g = fr_gc_new_graph(13);
        int64_t dd[2] = {vocab, dim}, qd[1] = {ntok};
        double zeros[7 * 5] = {0};
        int x = fr_gc_add_values(g, "emb", FR_F32, 2, dd, zeros);
        int iv = ints(g, "ids", 1, qd, idx);
        int in[2] = {x, iv}, grads[1];
        int y = fr_gc_op1(g, "Gather", 2, in);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, grads);
        const fr_tensor *gt = fr_gc_value(g, t, grads[0]);
        CU_ASSERT_EQUAL_FATAL(gt->dtype, FR_F32);
        const float *got = gt->data;
        int bad = 0;
        for (int i = 0; i < vocab * dim; i++) {
            if (got[i] != (float)want[i]) bad++;
            if (run == 0) first[i] = got[i];
            else if (memcmp(&first[i], &got[i], sizeof(float)) != 0) bad++;
        }
        if (bad) fprintf(stderr, "\n  float32 GatherGrad: %d elements off\n", bad);
        CU_ASSERT_EQUAL(bad, 0);
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
    free(idx);
    free(dy);
}

/* ---- Reshape, Squeeze, Unsqueeze, Flatten ---- */

static void test_reshape_family(void)
{
    int64_t d[3] = {2, 3, 2}, d1[4] = {2, 1, 3, 1};
    /* Reshape with a -1, opset 13 (shape input) and opset 4 (attribute) */
    {
        fr_rng r = fr_test_rng("reshape13");
        fr_graph *g = fr_gc_new_graph(14);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL);
        int64_t s[2] = {-1, 4};
        int in[2] = {x, ints1(g, "shape", 2, s)};
        int y = fr_gc_op1(g, "Reshape", 2, in);
        check(g, &r, y, 1, &x, "Reshape [2,3,2] -> [-1,4]");
        fr_graph_free(g);
    }
    {
        fr_rng r = fr_test_rng("reshape4");
        fr_graph *g = fr_gc_new_graph(4);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y;
        int64_t s[2] = {6, 2};
        int nid = fr_gc_node(g, "Reshape", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 2, s));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, "Reshape opset 4 (shape attribute)");
        fr_graph_free(g);
    }
    /* Squeeze: attribute (opset 11), input (opset 13), no axes */
    for (int form = 0; form < 3; form++) {
        fr_rng r = fr_test_rng("squeeze");
        fr_graph *g = fr_gc_new_graph(form == 0 ? 11 : 13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 4, d1, NULL), y;
        int64_t axes[2] = {1, -1};
        int nid;
        if (form == 1) {
            int in[2] = {x, ints1(g, "axes", 2, axes)};
            nid = fr_gc_node(g, "Squeeze", "", 2, in, 1, &y);
        } else {
            nid = fr_gc_node(g, "Squeeze", "", 1, &x, 1, &y);
            if (form == 0) FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "axes", 2, axes));
        }
        FR_ASSERT_OK(fr_node_infer(g, nid));
        CU_ASSERT_EQUAL(g->values[y].rank, 2);
        check(g, &r, y, 1, &x, "Squeeze");
        fr_graph_free(g);
    }
    /* Unsqueeze: attribute (opset 11), input (opset 13) */
    for (int form = 0; form < 2; form++) {
        fr_rng r = fr_test_rng("unsqueeze");
        fr_graph *g = fr_gc_new_graph(form ? 13 : 11);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y, nid;
        int64_t axes[2] = {0, -2};
        if (form) {
            int in[2] = {x, ints1(g, "axes", 2, axes)};
            nid = fr_gc_node(g, "Unsqueeze", "", 2, in, 1, &y);
        } else {
            nid = fr_gc_node(g, "Unsqueeze", "", 1, &x, 1, &y);
            FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "axes", 2, axes));
        }
        FR_ASSERT_OK(fr_node_infer(g, nid));
        CU_ASSERT_EQUAL(g->values[y].rank, 5);
        check(g, &r, y, 1, &x, "Unsqueeze");
        fr_graph_free(g);
    }
    /* Flatten at axis 2, 0 and -1 */
    const int64_t faxes[3] = {2, 0, -1};
    for (int k = 0; k < 3; k++) {
        fr_rng r = fr_test_rng("flatten");
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y;
        int nid = fr_gc_node(g, "Flatten", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", faxes[k]));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, "Flatten");
        fr_graph_free(g);
    }
}

/* ---- Transpose, Concat, Split ---- */

static void test_transpose(void)
{
    int64_t d[4] = {2, 3, 4, 2}, perm[4] = {2, 0, 3, 1};
    for (int form = 0; form < 2; form++) {
        fr_rng r = fr_test_rng("transpose");
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, form ? 3 : 4, d, NULL), y;
        int nid = fr_gc_node(g, "Transpose", "", 1, &x, 1, &y);
        if (!form) FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", 4, perm));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, form ? "Transpose (default perm)" : "Transpose perm [2,0,3,1]");
        fr_graph_free(g);
    }
}

static void test_concat(void)
{
    const int64_t opsets[2] = {11, 13}; /* Split's sizes as attribute / as input */
    for (int o = 0; o < 2; o++) {
        fr_rng r = fr_test_rng("concat");
        fr_graph *g = fr_gc_new_graph(opsets[o]);
        int64_t da[3] = {2, 1, 3}, db[3] = {2, 4, 3}, dc[3] = {2, 2, 3};
        int in[3] = {fr_gc_add_input(g, &r, "a", FR_F64, 3, da, NULL),
                     fr_gc_add_input(g, &r, "b", FR_F64, 3, db, NULL),
                     fr_gc_add_input(g, &r, "c", FR_F64, 3, dc, NULL)},
            y;
        int nid = fr_gc_node(g, "Concat", "", 3, in, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -2));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 3, in, "Concat of 3 on axis -2");
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "Split"), 1);
        fr_graph_free(g);
    }
    /* only one input differentiated; one input, the identity */
    {
        fr_rng r = fr_test_rng("concat_one");
        fr_graph *g = fr_gc_new_graph(13);
        int64_t da[2] = {3, 2}, db[2] = {3, 5};
        int in[2] = {fr_gc_add_input(g, &r, "a", FR_F64, 2, da, NULL),
                     fr_gc_add_input(g, &r, "b", FR_F64, 2, db, NULL)},
            y;
        int nid = fr_gc_node(g, "Concat", "", 2, in, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &in[1], "Concat, second input only");
        fr_graph_free(g);
        g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, da, NULL);
        nid = fr_gc_node(g, "Concat", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 0));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, y, 1, &x, "Concat of one input");
        fr_graph_free(g);
    }
}

/* Split [3, 7, 2] on axis 1 into 3 uneven parts; loss from Concat(part 2, part 0) so part 1
 * gets no gradient and contributes zeros. form 0: split attribute (opset 11), 1: split input
 * (opset 13), 2: num_outputs (opset 18, parts 3, 3, 1). */
static void test_split(void)
{
    for (int form = 0; form < 3; form++) {
        fr_rng r = fr_test_rng("split");
        fr_graph *g = fr_gc_new_graph(form == 0 ? 11 : form == 1 ? 13 : 18);
        int64_t d[3] = {3, 7, 2}, sizes[3] = {1, 4, 2};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), outs[3], nid;
        if (form == 1) {
            int in[2] = {x, ints1(g, "split", 3, sizes)};
            nid = fr_gc_node(g, "Split", "", 2, in, 3, outs);
        } else {
            nid = fr_gc_node(g, "Split", "", 1, &x, 3, outs);
            if (form == 0) FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "split", 3, sizes));
            if (form == 2) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "num_outputs", 3));
        }
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        CU_ASSERT_EQUAL(g->values[outs[2]].dims[1], form == 2 ? 1 : 2);
        int cin[2] = {outs[2], outs[0]}, y;
        nid = fr_gc_node(g, "Concat", "", 2, cin, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        const char *what[3] = {"Split (attribute), output 1 unused",
                               "Split (input), output 1 unused",
                               "Split (num_outputs), output 1 unused"};
        check(g, &r, y, 1, &x, what[form]);
        fr_graph_free(g);
    }
    /* all outputs used, equal parts, axis -1 */
    {
        fr_rng r = fr_test_rng("split_all");
        fr_graph *g = fr_gc_new_graph(13);
        int64_t d[2] = {3, 6};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL), outs[2];
        int nid = fr_gc_node(g, "Split", "", 1, &x, 2, outs);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        int min[2] = {outs[0], outs[1]};
        int y = fr_gc_op1(g, "Mul", 2, min);
        check(g, &r, y, 1, &x, "Split halves multiplied");
        fr_graph_free(g);
    }
}

/* ---- Slice ---- */

static void test_slice(void)
{
    const int64_t BIG = INT64_MAX, SMALL = INT64_MIN;
    const struct {
        int64_t opset;
        int cnt, has_axes, has_steps;
        int64_t starts[2], ends[2], axes[2], steps[2];
        const char *what;
    } cases[] = {
        {13, 2, 1, 1, {5, -1}, {-100, SMALL}, {0, -1}, {-2, -1}, "Slice negative steps"},
        {13, 2, 0, 0, {1, 0}, {100, 3}, {0}, {0}, "Slice clamped end, no axes/steps"},
        {13, 1, 1, 1, {-7}, {BIG}, {1}, {2}, "Slice step 2 from a clamped negative start"},
        {13, 1, 1, 1, {-1}, {-6}, {1}, {-3}, "Slice step -3 through a clamped end"},
        {13, 1, 1, 0, {0}, {BIG}, {0}, {0}, "Slice of everything (identity)"},
        {9, 2, 1, 0, {1, -3}, {-1, 1000}, {2, 1}, {0}, "Slice opset 9 (attributes)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng(cases[c].what);
        fr_graph *g = fr_gc_new_graph(cases[c].opset);
        int64_t d[3] = {6, 5, 4};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y, nid;
        if (cases[c].opset >= 10) {
            int in[5] = {x, ints1(g, "starts", cases[c].cnt, cases[c].starts),
                         ints1(g, "ends", cases[c].cnt, cases[c].ends), -1, -1};
            int n_in = 3;
            if (cases[c].has_axes) in[n_in++] = ints1(g, "axes", cases[c].cnt, cases[c].axes);
            if (cases[c].has_steps) in[n_in++] = ints1(g, "steps", cases[c].cnt, cases[c].steps);
            nid = fr_gc_node(g, "Slice", "", n_in, in, 1, &y);
        } else {
            nid = fr_gc_node(g, "Slice", "", 1, &x, 1, &y);
            fr_node *n = &g->nodes[nid];
            FR_ASSERT_OK(fr_node_set_attr_ints(n, "starts", cases[c].cnt, cases[c].starts));
            FR_ASSERT_OK(fr_node_set_attr_ints(n, "ends", cases[c].cnt, cases[c].ends));
            FR_ASSERT_OK(fr_node_set_attr_ints(n, "axes", cases[c].cnt, cases[c].axes));
        }
        FR_ASSERT_OK(fr_node_infer(g, nid));
        int64_t numel_y;
        FR_ASSERT_OK(fr_shape_numel(g->values[y].rank, g->values[y].dims, "y", &numel_y));
        CU_ASSERT(numel_y > 0);
        check(g, &r, y, 1, &x, cases[c].what);
        fr_graph_free(g);
    }
}

/* SliceGrad places dy exactly (reversed rows, zeros elsewhere) */
static void test_slice_exact(void)
{
    fr_graph *g = fr_gc_new_graph(13);
    int64_t d[2] = {2, 5}, starts[1] = {-1}, ends[1] = {0}, axes[1] = {1}, steps[1] = {-2};
    const double xs[10] = {0};
    int x = fr_gc_add_values(g, "x", FR_F64, 2, d, xs);
    int in[5] = {x, ints1(g, "starts", 1, starts), ints1(g, "ends", 1, ends),
                 ints1(g, "axes", 1, axes), ints1(g, "steps", 1, steps)};
    int y = fr_gc_op1(g, "Slice", 5, in), grads[1];
    CU_ASSERT_EQUAL(g->values[y].dims[1], 2); /* columns 4 and 2 */
    const double dy[4] = {1, 2, 3, 4};
    fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, grads);
    const double want[10] = {0, 0, 2, 0, 1, 0, 0, 4, 0, 3};
    fr_gc_expect(g, t, grads[0], want, 10, TOL_EXACT, "SliceGrad");
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "SliceGrad"), 1);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

/* ---- Trilu, Tile ---- */

static void test_trilu(void)
{
    for (int upper = 0; upper < 2; upper++) {
        for (int with_k = 0; with_k < 2; with_k++) {
            fr_rng r = fr_test_rng("trilu");
            fr_graph *g = fr_gc_new_graph(14);
            int64_t d[3] = {2, 4, 5}, k = upper ? 1 : -1;
            int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y;
            int in[2] = {x, with_k ? ints(g, "k", 0, NULL, &k) : -1};
            int nid = fr_gc_node(g, "Trilu", "", with_k ? 2 : 1, in, 1, &y);
            FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "upper", upper));
            FR_ASSERT_OK(fr_node_infer(g, nid));
            check(g, &r, y, 1, &x, upper ? "Trilu upper" : "Trilu lower");
            fr_graph_free(g);
        }
    }
}

static void test_tile(void)
{
    const struct {
        int rank;
        int64_t d[3], reps[3];
    } cases[] = {{2, {2, 3}, {3, 2}}, {3, {2, 1, 3}, {1, 4, 2}}, {1, {5}, {1}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng("tile");
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, cases[c].rank, cases[c].d, NULL);
        int in[2] = {x, ints1(g, "repeats", cases[c].rank, cases[c].reps)};
        int y = fr_gc_op1(g, "Tile", 2, in);
        check(g, &r, y, 1, &x, "Tile");
        fr_graph_free(g);
    }
}

/* ---- reductions ---- */

static const char *red_ops[] = {"ReduceSum",       "ReduceMean", "ReduceMax",
                                "ReduceMin",       "ReduceProd", "ReduceSumSquare",
                                "ReduceL1",        "ReduceL2",   "ReduceLogSumExp"};
#define N_RED (int)(sizeof red_ops / sizeof red_ops[0])

/* One reduction node. axes_form: 0 attribute, 1 input, 2 none given. */
static int reduce_node(fr_graph *g, const char *op, int x, int axes_form, int n_axes,
                       const int64_t *axes, int keepdims, int noop)
{
    int in[2] = {x, -1}, y;
    if (axes_form == 1) in[1] = ints1(g, "axes", n_axes, axes);
    int nid = fr_gc_node(g, op, "", axes_form == 1 ? 2 : 1, in, 1, &y);
    fr_node *n = &g->nodes[nid];
    if (axes_form == 0) FR_ASSERT_OK(fr_node_set_attr_ints(n, "axes", n_axes, axes));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "keepdims", keepdims));
    if (noop >= 0) FR_ASSERT_OK(fr_node_set_attr_int(n, "noop_with_empty_axes", noop));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

static void test_reduce(void)
{
    const struct {
        int64_t opset; /* 11: axes attribute for every op; 18: axes input for every op */
        int axes_form, n_axes, keepdims, noop;
        int64_t axes[3];
        const char *what;
    } cfgs[] = {
        {11, 0, 2, 1, -1, {0, 2}, "axes [0,2] attribute keepdims 1"},
        {11, 0, 1, 0, -1, {-1}, "axes [-1] attribute keepdims 0"},
        {11, 2, 0, 0, -1, {0}, "no axes (all), keepdims 0"},
        {18, 1, 2, 0, -1, {1, -1}, "axes [1,-1] input keepdims 0"},
        {18, 1, 1, 1, -1, {1}, "axes [1] input keepdims 1"},
        {18, 1, 0, 1, 0, {0}, "empty axes input, noop 0 (all)"},
        {18, 1, 0, 0, 1, {0}, "empty axes input, noop 1 (none)"},
        {18, 2, 0, 1, 1, {0}, "no axes input, noop 1 (none)"},
        {18, 1, 3, 0, -1, {2, 0, 1}, "all three axes listed"},
    };
    for (int k = 0; k < N_RED; k++) {
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            char what[160];
            snprintf(what, sizeof what, "%s %s (opset %lld)", red_ops[k], cfgs[c].what,
                     (long long)cfgs[c].opset);
            fr_rng r = fr_test_rng(what);
            fr_graph *g = fr_gc_new_graph(cfgs[c].opset);
            int64_t d[3] = {3, 2, 4};
            int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL);
            const char *op = red_ops[k];
            /* non-differentiable points and huge products kept away */
            if (!strcmp(op, "ReduceL1") || !strcmp(op, "ReduceL2") || !strcmp(op, "ReduceProd"))
                fr_gc_away_from_zero(g, x, 0.3);
            if (!strcmp(op, "ReduceProd")) {
                double *xv = f64(g, x);
                for (int64_t i = 0; i < numel(g, x); i++)
                    xv[i] = xv[i] > 0 ? fmin(xv[i], 1.6) : fmax(xv[i], -1.6);
            }
            int y = reduce_node(g, op, x, cfgs[c].axes_form, cfgs[c].n_axes, cfgs[c].axes,
                                cfgs[c].keepdims, cfgs[c].noop);
            check(g, &r, y, 1, &x, what);
            CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "ReduceGrad"), 1);
            fr_graph_free(g);
        }
    }
    /* ReduceSum takes axes as an input from opset 13 */
    {
        fr_rng r = fr_test_rng("reducesum13");
        fr_graph *g = fr_gc_new_graph(13);
        int64_t d[3] = {3, 2, 4}, axes[1] = {-2};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL);
        int y = reduce_node(g, "ReduceSum", x, 1, 1, axes, 0, -1);
        check(g, &r, y, 1, &x, "ReduceSum opset 13 axes input");
        fr_graph_free(g);
    }
    /* a rank-0 input */
    for (int k = 0; k < N_RED; k++) {
        fr_rng r = fr_test_rng("reduce_scalar");
        fr_graph *g = fr_gc_new_graph(18);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 0, NULL, NULL);
        fr_gc_away_from_zero(g, x, 0.3);
        int y = reduce_node(g, red_ops[k], x, 2, 0, NULL, 1, -1);
        check(g, &r, y, 1, &x, red_ops[k]);
        fr_graph_free(g);
    }
}

/* Max/Min ties share dy evenly (torch.amax/amin); a NaN result goes to its NaN elements */
static void test_reduce_ties(void)
{
    const double x[9] = {1, 3, 3, 2, 2, 2, 5, 0, NAN}, dy[3] = {1, 2, 3};
    const double want_max[9] = {0, 0.5, 0.5, 2.0 / 3, 2.0 / 3, 2.0 / 3, 0, 0, 3};
    const double want_min[9] = {1, 0, 0, 2.0 / 3, 2.0 / 3, 2.0 / 3, 0, 0, 3};
    int64_t d[2] = {3, 3}, axis = 1;
    for (int is_min = 0; is_min < 2; is_min++) {
        for (int f = 0; f < 2; f++) {
            fr_graph *g = fr_gc_new_graph(13);
            int xv = fr_gc_add_values(g, "x", f ? FR_F32 : FR_F64, 2, d, x), grads[1];
            int y = reduce_node(g, is_min ? "ReduceMin" : "ReduceMax", xv, 0, 1, &axis, 0, -1);
            fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &xv, grads);
            const double *want = is_min ? want_min : want_max;
            if (f) { /* float32: the thirds rounded */
                double w32[9];
                for (int i = 0; i < 9; i++) w32[i] = (float)want[i];
                fr_gc_expect(g, t, grads[0], w32, 9, TOL_EXACT, is_min ? "ReduceMin ties f32" : "ReduceMax ties f32");
            } else {
                fr_gc_expect(g, t, grads[0], want, 9, TOL_EXACT, is_min ? "ReduceMin ties" : "ReduceMax ties");
            }
            fr_gc_free_tensors(g, t);
            free(t);
            fr_graph_free(g);
        }
    }
    /* ties across two reduced axes: x [2,2,2] over axes 0 and 2 */
    {
        const double x3[8] = {1, 4, 1, 1, 1, 0, 4, 1}, dy2[2] = {6, 9};
        /* group j=0: x[0,0,:]={1,4}, x[1,0,:]={1,0}; j=1: x[0,1,:]={1,1}, x[1,1,:]={4,1} */
        const double want_max[8] = {0, 6, 0, 0, 0, 0, 9, 0};
        const double want_min[8] = {0, 0, 3, 3, 0, 6, 0, 3};
        int64_t d3[3] = {2, 2, 2}, axes[2] = {0, 2};
        for (int is_min = 0; is_min < 2; is_min++) {
            fr_graph *g = fr_gc_new_graph(18);
            int xv = fr_gc_add_values(g, "x", FR_F64, 3, d3, x3), grads[1];
            int y = reduce_node(g, is_min ? "ReduceMin" : "ReduceMax", xv, 1, 2, axes, 1, -1);
            fr_tensor **t = fr_gc_backprop(g, y, dy2, 1, &xv, grads);
            fr_gc_expect(g, t, grads[0], is_min ? want_min : want_max, 8, TOL_EXACT,
                         is_min ? "ReduceMin ties over 2 axes" : "ReduceMax ties over 2 axes");
            fr_gc_free_tensors(g, t);
            free(t);
            fr_graph_free(g);
        }
    }
}

/* ReduceProd at zeros: one zero gets the product of the rest, two zeros give 0 (torch.prod) */
static void test_reduce_prod_zeros(void)
{
    const double x[9] = {2, 0, 3, 0, 0, 5, 2, 3, 4}, dy[3] = {1, 2, -1};
    const double want[9] = {0, 6, 0, 0, 0, 0, -12, -8, -6};
    int64_t d[2] = {3, 3}, axis = -1;
    fr_graph *g = fr_gc_new_graph(18);
    int xv = fr_gc_add_values(g, "x", FR_F64, 2, d, x), grads[1];
    int y = reduce_node(g, "ReduceProd", xv, 1, 1, &axis, 0, -1);
    fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &xv, grads);
    fr_gc_expect(g, t, grads[0], want, 9, TOL_EXACT, "ReduceProd zeros");
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

/* ---- float32 kernels against float64 ---- */

typedef int (*build_fn)(fr_graph *g, int x);

static int b_reduce(fr_graph *g, int x, const char *op)
{
    int64_t axes[2] = {0, 2};
    return reduce_node(g, op, x, 0, 2, axes, 0, -1);
}
static int b_sum(fr_graph *g, int x) { return b_reduce(g, x, "ReduceSum"); }
static int b_mean(fr_graph *g, int x) { return b_reduce(g, x, "ReduceMean"); }
static int b_max(fr_graph *g, int x) { return b_reduce(g, x, "ReduceMax"); }
static int b_prod(fr_graph *g, int x) { return b_reduce(g, x, "ReduceProd"); }
static int b_sumsq(fr_graph *g, int x) { return b_reduce(g, x, "ReduceSumSquare"); }
static int b_l1(fr_graph *g, int x) { return b_reduce(g, x, "ReduceL1"); }
static int b_l2(fr_graph *g, int x) { return b_reduce(g, x, "ReduceL2"); }
static int b_lse(fr_graph *g, int x) { return b_reduce(g, x, "ReduceLogSumExp"); }
static int b_slice(fr_graph *g, int x)
{
    int64_t s[2] = {-1, 1}, e[2] = {INT64_MIN, 4}, a[2] = {2, 1}, st[2] = {-2, 2};
    int in[5] = {x, ints1(g, "s", 2, s), ints1(g, "e", 2, e), ints1(g, "a", 2, a),
                 ints1(g, "st", 2, st)};
    return fr_gc_op1(g, "Slice", 5, in);
}
static int b_tile(fr_graph *g, int x)
{
    int64_t reps[3] = {2, 1, 3};
    int in[2] = {x, ints1(g, "reps", 3, reps)};
    return fr_gc_op1(g, "Tile", 2, in);
}
static int b_gather_elements(fr_graph *g, int x)
{
    int64_t qd[3] = {3, 4, 5}, idx[60];
    for (int i = 0; i < 60; i++) idx[i] = (i * 7) % 4 - (i & 1 ? 4 : 0);
    int in[2] = {x, ints(g, "idx", 3, qd, idx)}, y;
    int nid = fr_gc_node(g, "GatherElements", "", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}
static int b_gather_nd(fr_graph *g, int x)
{
    int64_t qd[3] = {3, 6, 1}, idx[18];
    for (int i = 0; i < 18; i++) idx[i] = i % 4 - 1;
    int in[2] = {x, ints(g, "idx", 3, qd, idx)}, y;
    int nid = fr_gc_node(g, "GatherND", "", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "batch_dims", 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return y;
}

static void test_f32_vs_f64(void)
{
    const struct {
        const char *what;
        build_fn fn;
    } cases[] = {
        {"ReduceSum", b_sum},   {"ReduceMean", b_mean},         {"ReduceMax", b_max},
        {"ReduceProd", b_prod}, {"ReduceSumSquare", b_sumsq},   {"ReduceL1", b_l1},
        {"ReduceL2", b_l2},     {"ReduceLogSumExp", b_lse},     {"Slice", b_slice},
        {"Tile", b_tile},       {"GatherElements", b_gather_elements},
        {"GatherND", b_gather_nd},
    };
    int64_t d[3] = {3, 4, 5};
    double xs[60], dy[400];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng(cases[c].what);
        for (int i = 0; i < 60; i++) {
            double v = fr_rng_normal(&r);
            xs[i] = (float)(v < 0 ? v - 0.3 : v + 0.3); /* exact in both dtypes */
        }
        for (int i = 0; i < 400; i++) dy[i] = (float)fr_rng_normal(&r);
        const fr_tensor *res[2];
        fr_graph *gs[2];
        fr_tensor **ts[2];
        for (int p = 0; p < 2; p++) {
            fr_graph *g = gs[p] = fr_gc_new_graph(12); /* axes attributes, batch_dims */
            int x = fr_gc_add_values(g, "x", p ? FR_F64 : FR_F32, 3, d, xs), grads[1];
            int y = cases[c].fn(g, x);
            ts[p] = fr_gc_backprop(g, y, dy, 1, &x, grads);
            res[p] = fr_gc_value(g, ts[p], grads[0]);
            CU_ASSERT_EQUAL(res[p]->dtype, p ? FR_F64 : FR_F32);
        }
        const float *a = res[0]->data;
        const double *b = res[1]->data;
        int bad = 0;
        for (int64_t i = 0; i < 60; i++)
            if (!(fabs(a[i] - b[i]) <= 1e-6 * fabs(b[i]) + 1e-30)) bad++;
        if (bad) fprintf(stderr, "\n  %s: %d of 60 float32 gradients off\n", cases[c].what, bad);
        CU_ASSERT_EQUAL(bad, 0);
        for (int p = 0; p < 2; p++) {
            fr_gc_free_tensors(gs[p], ts[p]);
            free(ts[p]);
            fr_graph_free(gs[p]);
        }
    }
}

/* ---- a chain: embedding rows, reshaped, transposed, sliced and reduced ---- */

static void test_chain(void)
{
    fr_rng r = fr_test_rng("chain");
    fr_graph *g = fr_gc_new_graph(18);
    int64_t de[2] = {6, 4}, qd[2] = {2, 3}, ids[6] = {1, 5, 1, -1, 0, 2};
    int emb = fr_gc_add_input(g, &r, "emb", FR_F64, 2, de, NULL);
    int in[2] = {emb, ints(g, "ids", 2, qd, ids)};
    int h = fr_gc_op1(g, "Gather", 2, in); /* [2,3,4] */
    int64_t shape[4] = {2, 3, 2, 2};
    int in2[2] = {h, ints1(g, "shape", 4, shape)};
    int h2 = fr_gc_op1(g, "Reshape", 2, in2), h3, nid;
    int64_t perm[4] = {0, 2, 1, 3};
    nid = fr_gc_node(g, "Transpose", "", 1, &h2, 1, &h3); /* [2,2,3,2] */
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "perm", 4, perm));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int64_t s[1] = {1}, e[1] = {3}, a[1] = {2};
    int in3[4] = {h3, ints1(g, "s", 1, s), ints1(g, "e", 1, e), ints1(g, "a", 1, a)};
    int h4 = fr_gc_op1(g, "Slice", 4, in3); /* [2,2,2,2] */
    int in4[2] = {h4, h4};
    int h5 = fr_gc_op1(g, "Mul", 2, in4);
    int64_t axes[1] = {-1};
    int y = reduce_node(g, "ReduceMean", h5, 1, 1, axes, 0, -1);
    check(g, &r, y, 1, &emb, "Gather-Reshape-Transpose-Slice-Mul-ReduceMean");
    fr_graph_free(g);
}

/* ---- errors name the node ---- */

static void test_errors(void)
{
    fr_rng r = fr_test_rng("errors");
    fr_graph *g = fr_gc_new_graph(13);
    int64_t d[1] = {3}, qd[1] = {3}, bad_idx[3] = {0, 7, 1};
    int dy = fr_gc_add_input(g, &r, "dy", FR_F64, 1, d, NULL);
    int iv = fr_gc_add_input(g, &r, "idx", FR_I64, 1, qd, bad_idx);
    int in[2] = {dy, iv}, out;
    /* an index past the data: a range error at run time, nothing written */
    int nid = fr_gc_node(g, "GatherGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    int64_t shape[2] = {4, 1};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 1, shape));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    CU_ASSERT_EQUAL(fr_gc_run(g, t), FR_ERR_RANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "7"));
    fr_gc_free_tensors(g, t);
    free(t);
    /* dy that is not the forward output's shape */
    nid = fr_gc_node(g, "GatherGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 2, shape));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    /* ReduceGrad: unknown kind, wrong input count */
    nid = fr_gc_node(g, "ReduceGrad", FR_DOMAIN_FP8RUN, 1, &dy, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "kind", "Median"));
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "axes", 0, NULL));
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 1, d));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "Median"));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "kind", "Max"));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    /* SliceGrad: dy does not fit where the plan puts it */
    nid = fr_gc_node(g, "SliceGrad", FR_DOMAIN_FP8RUN, 1, &dy, 1, &out);
    int64_t sh[1] = {4}, st[1] = {2}, stp[1] = {1};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 1, sh));
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "starts", 1, st));
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "steps", 1, stp));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    /* TileGrad: 3 is not a tiling of 2 */
    nid = fr_gc_node(g, "TileGrad", FR_DOMAIN_FP8RUN, 1, &dy, 1, &out);
    int64_t two[1] = {2};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 1, two));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE);
    /* float16 dy is refused clearly */
    int dy16 = fr_gc_add_input(g, &r, "dy16", FR_F16, 1, d, NULL);
    nid = fr_gc_node(g, "TileGrad", FR_DOMAIN_FP8RUN, 1, &dy16, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[nid], "shape", 1, d));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float16"));
    fr_graph_free(g);
}

static void test_summary(void)
{
    printf("(worst gradcheck relative error %.3g) ", worst_seen);
    CU_ASSERT(worst_seen < TOL);
}

static CU_TestInfo tests[] = {
    {"Gather: axes 0/1/-1, repeated, negative, scalar indices", test_gather},
    {"Gather: repeated rows sum exactly", test_gather_repeats_exact},
    {"GatherElements", test_gather_elements},
    {"GatherND (batch_dims 0, 1)", test_gather_nd},
    {"float32 scatter-add: exact and reproducible", test_scatter_f32_deterministic},
    {"Reshape, Squeeze, Unsqueeze, Flatten", test_reshape_family},
    {"Transpose", test_transpose},
    {"Concat", test_concat},
    {"Split: uneven, unused output, all opset forms", test_split},
    {"Slice: negative steps, clamping, omitted axes", test_slice},
    {"SliceGrad exact placement", test_slice_exact},
    {"Trilu", test_trilu},
    {"Tile", test_tile},
    {"reductions: keepdims, axes forms, noop", test_reduce},
    {"ReduceMax/ReduceMin ties (torch.amax/amin)", test_reduce_ties},
    {"ReduceProd at zeros", test_reduce_prod_zeros},
    {"float32 kernels vs float64", test_f32_vs_f64},
    {"chain", test_chain},
    {"errors", test_errors},
    {"summary", test_summary},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"grad_layout", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
