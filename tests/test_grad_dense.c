/* Gradient rules of the dense families: MatMul and Gemm (ops/matmul.c), Softmax and
 * LogSoftmax (ops/softmax.c), LayerNormalization and RMSNormalization (ops/norm.c), and their
 * fused backward kernels (SoftmaxGrad, LogSoftmaxGrad, LayerNormGrad, RMSNormGrad).
 *
 * - Every rule against central differences (tests/gradcheck.c) in float64 on fresh random
 *   inputs: relative L2 error < 1e-6 per input. MatMul in every numpy form (2-D, batched with
 *   broadcast batch dims on either side, 1-D on either side and both); Gemm with every
 *   transA/transB, alpha/beta != 1 and each shape C may have; Softmax/LogSoftmax at several
 *   axes (negative ones too) under both opset conventions; LayerNormalization at axis -1 and 1
 *   with and without bias, with broadcast scales; RMSNormalization.
 * - The fused kernels: float32 equals float64 within 1e-5 relative per element on the same
 *   (float32-representable) inputs.
 * - One fused backward node per Softmax / LayerNorm; the Linear-layer MatMul needs no
 *   SumToShape (its batch folds into one GEMM).
 * - A gradient into LayerNormalization's Mean / InvStdDev is a clear error naming the node.
 * - A small attention-like chain differentiated end to end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

#define TOL 1e-6
#define TOL_F32 1e-5

static double worst_seen; /* worst gradcheck error of the current test, printed at its end */

static void check(fr_graph *g, fr_rng *r, int out, int n_wrt, const int *wrt, const char *what)
{
    double err = fr_gc_check(g, r, out, n_wrt, wrt, what, TOL);
    if (!(err <= worst_seen)) worst_seen = err;
}

static void report(const char *what)
{
    printf("\n  %s: worst relative L2 error %.3g ", what, worst_seen);
    worst_seen = 0;
}

/* ---- MatMul ---- */

typedef struct mm_case {
    int ra, rb;
    int64_t da[4], db[4];
} mm_case;

static const mm_case mm_cases[] = {
    {2, 2, {3, 4}, {4, 5}},
    {3, 2, {2, 3, 4}, {4, 5}},             /* Linear layer: batch folds into M */
    {4, 2, {2, 3, 2, 4}, {4, 5}},
    {4, 3, {2, 1, 3, 4}, {5, 4, 6}},       /* batch broadcast on both sides */
    {3, 4, {5, 3, 4}, {2, 1, 4, 6}},
    {2, 3, {3, 4}, {2, 4, 5}},             /* A shared across B's batch */
    {3, 3, {1, 3, 4}, {2, 4, 5}},
    {3, 3, {2, 3, 4}, {1, 4, 5}},
    {4, 4, {2, 3, 3, 4}, {2, 3, 4, 2}},    /* attention-like, no broadcast */
    {1, 2, {4}, {4, 5}},                   /* 1-D A */
    {1, 3, {4}, {2, 4, 5}},
    {1, 4, {4}, {3, 1, 4, 5}},
    {2, 1, {3, 4}, {4}},                   /* 1-D B */
    {3, 1, {2, 3, 4}, {4}},
    {4, 1, {2, 1, 3, 4}, {4}},
    {1, 1, {4}, {4}},                      /* both 1-D: a dot product */
};

static void test_matmul(void)
{
    for (size_t c = 0; c < sizeof mm_cases / sizeof mm_cases[0]; c++) {
        const mm_case *mc = &mm_cases[c];
        fr_rng r = fr_test_rng("matmul");
        fr_graph *g = fr_gc_new_graph(17);
        int a = fr_gc_add_input(g, &r, "A", FR_F64, mc->ra, mc->da, NULL);
        int b = fr_gc_add_input(g, &r, "B", FR_F64, mc->rb, mc->db, NULL);
        int in[2] = {a, b};
        int y = fr_gc_op1(g, "MatMul", 2, in);
        char what[160], s1[64], s2[64];
        snprintf(what, sizeof what, "MatMul %s x %s", fr_shape_str(mc->ra, mc->da, s1, sizeof s1),
                 fr_shape_str(mc->rb, mc->db, s2, sizeof s2));
        check(g, &r, y, 2, in, what);
        if (mc->rb <= 2 && mc->ra >= 2) /* no batch on B: two Gemms, nothing summed afterwards */
            CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "SumToShape"), 0);
        fr_graph_free(g);
    }
    /* one value as both operands: X @ X accumulates two contributions; and only one operand
     * differentiated */
    {
        fr_rng r = fr_test_rng("matmul_same");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t d[3] = {2, 4, 4};
        int x = fr_gc_add_input(g, &r, "X", FR_F64, 3, d, NULL);
        int in[2] = {x, x};
        int y = fr_gc_op1(g, "MatMul", 2, in);
        check(g, &r, y, 1, &x, "MatMul X @ X");
        fr_graph_free(g);
    }
    for (int side = 0; side < 2; side++) {
        fr_rng r = fr_test_rng("matmul_one_side");
        fr_graph *g = fr_gc_new_graph(13);
        int64_t da[3] = {2, 3, 4}, db[3] = {2, 4, 5};
        int a = fr_gc_add_input(g, &r, "A", FR_F64, 3, da, NULL);
        int b = fr_gc_add_input(g, &r, "B", FR_F64, 3, db, NULL);
        int in[2] = {a, b};
        int y = fr_gc_op1(g, "MatMul", 2, in);
        check(g, &r, y, 1, side ? &b : &a, side ? "MatMul dB only" : "MatMul dA only");
        fr_graph_free(g);
    }
    report("MatMul");
}

/* ---- Gemm ---- */

static void test_gemm(void)
{
    const int64_t M = 3, N = 5, K = 4;
    const struct {
        int rank;
        int64_t d[2];
        const char *name;
    } cshapes[] = {
        {-1, {0, 0}, "no C"}, {0, {0, 0}, "C []"},     {1, {N, 0}, "C [N]"},   {1, {1, 0}, "C [1]"},
        {2, {1, N}, "C [1,N]"}, {2, {M, 1}, "C [M,1]"}, {2, {M, N}, "C [M,N]"}, {2, {1, 1}, "C [1,1]"},
    };
    const float ab[3][2] = {{1.0f, 1.0f}, {0.7f, -1.3f}, {-2.5f, 0.0f}}; /* alpha, beta */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t cs = 0; cs < sizeof cshapes / sizeof cshapes[0]; cs++)
                for (int k = 0; k < 3; k++) {
                    fr_rng r = fr_test_rng("gemm");
                    fr_graph *g = fr_gc_new_graph(13);
                    int64_t da[2] = {ta ? K : M, ta ? M : K}, db[2] = {tb ? N : K, tb ? K : N};
                    int a = fr_gc_add_input(g, &r, "A", FR_F64, 2, da, NULL);
                    int b = fr_gc_add_input(g, &r, "B", FR_F64, 2, db, NULL);
                    int has_c = cshapes[cs].rank >= 0;
                    int cv = has_c ? fr_gc_add_input(g, &r, "C", FR_F64, cshapes[cs].rank,
                                                      cshapes[cs].d, NULL)
                                   : -1;
                    int in[3] = {a, b, cv}, y;
                    int nid = fr_gc_node(g, "Gemm", "", has_c ? 3 : 2, in, 1, &y);
                    fr_node *nd = &g->nodes[nid];
                    if (ta) FR_ASSERT_OK(fr_node_set_attr_int(nd, "transA", 1));
                    if (tb) FR_ASSERT_OK(fr_node_set_attr_int(nd, "transB", 1));
                    if (k) {
                        FR_ASSERT_OK(fr_node_set_attr_float(nd, "alpha", ab[k][0]));
                        FR_ASSERT_OK(fr_node_set_attr_float(nd, "beta", ab[k][1]));
                    }
                    FR_ASSERT_OK(fr_node_infer(g, nid));
                    char what[128];
                    snprintf(what, sizeof what, "Gemm transA=%d transB=%d alpha=%g beta=%g %s", ta,
                             tb, ab[k][0], ab[k][1], cshapes[cs].name);
                    check(g, &r, y, has_c ? 3 : 2, in, what);
                    fr_graph_free(g);
                }
    report("Gemm");
}

/* ---- Softmax / LogSoftmax ---- */

static void test_softmax(void)
{
    const char *ops[2] = {"Softmax", "LogSoftmax"};
    const int64_t opsets[2] = {11, 13};
    const int64_t axes[6] = {99 /* default */, 0, 1, 2, -1, -2};
    for (int o = 0; o < 2; o++)
        for (int v = 0; v < 2; v++)
            for (int a = 0; a < 6; a++) {
                fr_rng r = fr_test_rng(ops[o]);
                fr_graph *g = fr_gc_new_graph(opsets[v]);
                int64_t d[3] = {2, 3, 4};
                int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y;
                int nid = fr_gc_node(g, ops[o], "", 1, &x, 1, &y);
                if (axes[a] != 99) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", axes[a]));
                FR_ASSERT_OK(fr_node_infer(g, nid));
                char what[96];
                snprintf(what, sizeof what, "%s opset %lld axis %s%lld", ops[o], (long long)opsets[v],
                         axes[a] == 99 ? "default " : "", (long long)(axes[a] == 99 ? 0 : axes[a]));
                check(g, &r, y, 1, &x, what);
                CU_ASSERT_EQUAL(fr_gc_count_nodes(g, o ? "LogSoftmaxGrad" : "SoftmaxGrad"), 1);
                fr_graph_free(g);
            }
    /* rank 1 and a masked row (a -inf logit gets no gradient, the others are unaffected) */
    for (int o = 0; o < 2; o++) {
        fr_rng r = fr_test_rng("softmax_masked");
        fr_graph *g = fr_gc_new_graph(13);
        int64_t d[2] = {3, 5};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL);
        int64_t dm[2] = {3, 5};
        int mask = fr_gc_add_input(g, &r, "mask", FR_F64, 2, dm, NULL);
        double *mv = g->values[mask].constant->data;
        for (int i = 0; i < 15; i++) mv[i] = (i % 5 == 4 && i != 4) ? -INFINITY : 0.0;
        int in[2] = {x, mask};
        int xm = fr_gc_op1(g, "Add", 2, in);
        int y = fr_gc_op1(g, o ? "LogSoftmax" : "Softmax", 1, &xm);
        if (o) { /* -inf in LogSoftmax's output would make the loss -inf: mask it by Softmax */
            int e = fr_gc_op1(g, "Exp", 1, &y);
            y = e;
        }
        check(g, &r, y, 1, &x, o ? "Exp(LogSoftmax) masked" : "Softmax masked");
        fr_graph_free(g);
    }
    report("Softmax/LogSoftmax");
}

/* ---- LayerNormalization / RMSNormalization ---- */

typedef struct ln_case {
    int rms, axis, bias;
    int rs, rb;
    int64_t ds[3], db[3];
    float eps; /* 0: default */
} ln_case;

static const ln_case ln_cases[] = {
    {0, -1, 1, 1, 1, {5}, {5}, 0},
    {0, -1, 0, 1, 0, {5}, {0}, 0},
    {0, 1, 1, 2, 2, {4, 5}, {4, 5}, 0},
    {0, 1, 0, 2, 0, {4, 5}, {0}, 1e-3f},
    {0, -2, 1, 2, 1, {4, 5}, {5}, 0},        /* B broadcast within the normalized dims */
    {0, 1, 1, 2, 2, {1, 5}, {4, 1}, 0},      /* Scale and B broadcast within them */
    {0, -1, 1, 2, 3, {4, 5}, {3, 1, 5}, 0},  /* broadcast across the rows (shared = 0) */
    {0, 0, 1, 3, 3, {3, 4, 5}, {3, 4, 5}, 0},
    {1, -1, 0, 1, 0, {5}, {0}, 0},
    {1, 1, 0, 2, 0, {4, 5}, {0}, 1e-2f},
    {1, -1, 0, 2, 0, {4, 5}, {0}, 0},
};

static void test_norm(void)
{
    for (size_t c = 0; c < sizeof ln_cases / sizeof ln_cases[0]; c++) {
        const ln_case *lc = &ln_cases[c];
        fr_rng r = fr_test_rng("norm");
        fr_graph *g = fr_gc_new_graph(lc->rms ? 23 : 17);
        int64_t dx[3] = {3, 4, 5};
        int x = fr_gc_add_input(g, &r, "X", FR_F64, 3, dx, NULL);
        int s = fr_gc_add_input(g, &r, "Scale", FR_F64, lc->rs, lc->ds, NULL);
        int b = lc->bias ? fr_gc_add_input(g, &r, "B", FR_F64, lc->rb, lc->db, NULL) : -1;
        int in[3] = {x, s, b}, y;
        int nid = fr_gc_node(g, lc->rms ? "RMSNormalization" : "LayerNormalization", "", lc->bias ? 3 : 2, in, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", lc->axis));
        if (lc->eps != 0) FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "epsilon", lc->eps));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        char what[160], s1[64], s2[64];
        snprintf(what, sizeof what, "%s axis %d Scale %s B %s", lc->rms ? "RMSNorm" : "LayerNorm",
                 lc->axis, fr_shape_str(lc->rs, lc->ds, s1, sizeof s1),
                 lc->bias ? fr_shape_str(lc->rb, lc->db, s2, sizeof s2) : "none");
        check(g, &r, y, lc->bias ? 3 : 2, in, what);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, lc->rms ? "RMSNormGrad" : "LayerNormGrad"), 1);
        fr_graph_free(g);
    }
    /* with the Mean / InvStdDev outputs present but unused, and only X differentiated */
    {
        fr_rng r = fr_test_rng("norm_outputs");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t dx[2] = {6, 7}, ds[1] = {7};
        int x = fr_gc_add_input(g, &r, "X", FR_F64, 2, dx, NULL);
        int s = fr_gc_add_input(g, &r, "Scale", FR_F64, 1, ds, NULL);
        int in[2] = {x, s}, outs[3];
        int nid = fr_gc_node(g, "LayerNormalization", "", 2, in, 3, outs);
        FR_ASSERT_OK(fr_node_infer(g, nid));
        check(g, &r, outs[0], 1, &x, "LayerNorm with Mean/InvStdDev outputs, dX only");
        fr_graph_free(g);
    }
    report("LayerNorm/RMSNorm");
}

/* A gradient flowing into Mean or InvStdDev is refused, naming the node. */
static void test_norm_stat_outputs(void)
{
    for (int o = 1; o < 3; o++) {
        fr_rng r = fr_test_rng("norm_stats");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t dx[2] = {3, 4}, ds[1] = {4};
        int x = fr_gc_add_input(g, &r, "X", FR_F32, 2, dx, NULL);
        int s = fr_gc_add_input(g, &r, "Scale", FR_F32, 1, ds, NULL);
        int in[2] = {x, s}, outs[3];
        int nid = fr_gc_node(g, "LayerNormalization", "", 2, in, 3, outs);
        FR_ASSERT_OK(fr_node_infer(g, nid));
        const char *name = g->nodes[nid].name;
        char node_name[64];
        snprintf(node_name, sizeof node_name, "%s", name ? name : "");
        const fr_value *sv = &g->values[outs[o]];
        int rv = fr_gc_add_input(g, &r, "R", sv->dtype, sv->rank, sv->dims, NULL);
        int din[2] = {outs[o], rv}, loss, grads[2];
        int dn = fr_gc_node(g, "Dot", FR_DOMAIN_FP8RUN, 2, din, 1, &loss);
        FR_ASSERT_OK(fr_node_infer(g, dn));
        CU_ASSERT_EQUAL(fr_autodiff(g, loss, 2, in, grads), FR_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), node_name));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), o == 1 ? "Mean" : "InvStdDev"));
        fr_graph_free(g);
    }
}

/* ---- fused kernels: float32 against float64 ---- */

/* A backward kernel run on inputs dY, v (softmax: y; norms: X), then Scale and B; all values
 * float32-representable so the float32 and float64 runs see the same numbers. */
typedef struct fk_case {
    const char *op;
    int n_in, n_out;
    int64_t axis;
    int flatten; /* SoftmaxGrad / LogSoftmaxGrad */
    int64_t dscale[3];
    int rscale;
} fk_case;

static double fk_worst; /* worst per-element relative difference seen */

static void compare_outputs(const char *what, int o, const fr_tensor *a, const fr_tensor *b)
{
    int64_t n = fr_tensor_numel(b);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(a), n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double fa = ((const float *)a->data)[i], fb = ((const double *)b->data)[i];
        double rel = fabs(fa - fb) / fmax(fabs(fb), 1e-30);
        if (!(rel <= fk_worst)) fk_worst = rel;
        if (!(fabs(fa - fb) <= TOL_F32 * fabs(fb) + 1e-30)) bad++;
    }
    if (bad)
        fprintf(stderr, "\n  %s output %d: %d of %lld float32 results off by > %g relative\n", what,
                o, bad, (long long)n, TOL_F32);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_kernels_f32_vs_f64(void)
{
    const fk_case cases[] = {
        {"SoftmaxGrad", 2, 1, 1, 0, {0}, 0},    {"SoftmaxGrad", 2, 1, 2, 0, {0}, 0},
        {"SoftmaxGrad", 2, 1, 1, 1, {0}, 0},    {"LogSoftmaxGrad", 2, 1, 0, 0, {0}, 0},
        {"LogSoftmaxGrad", 2, 1, 2, 0, {0}, 0}, {"LogSoftmaxGrad", 2, 1, 1, 1, {0}, 0},
        {"LayerNormGrad", 4, 3, -1, 0, {64}, 1}, {"LayerNormGrad", 3, 2, 1, 0, {16, 64}, 2},
        {"RMSNormGrad", 3, 2, -1, 0, {64}, 1},  {"RMSNormGrad", 3, 2, 1, 0, {16, 64}, 2},
    };
    const int64_t dx[3] = {8, 16, 64};
    const int64_t n = 8 * 16 * 64;
    double *buf[4];
    for (int k = 0; k < 4; k++) buf[k] = malloc((size_t)n * sizeof(double));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const fk_case *fc = &cases[c];
        fr_rng r = fr_test_rng(fc->op);
        int soft = strstr(fc->op, "Softmax") != NULL, lg = strncmp(fc->op, "Log", 3) == 0;
        for (int64_t i = 0; i < n; i++) {
            buf[0][i] = (float)fr_rng_normal(&r);
            double x = 3 * fr_rng_normal(&r) + (soft ? 0 : 0.5);
            /* softmax: y in (0, 1); log-softmax: y < 0; norms: X with an offset */
            buf[1][i] = (float)(soft ? (lg ? -fabs(x) - 0.1 : 1 / (1 + exp(-x))) : x);
            buf[2][i] = (float)(1 + 0.5 * fr_rng_normal(&r));
            buf[3][i] = (float)fr_rng_normal(&r);
        }
        fr_graph *gs[2];
        fr_tensor **ts[2];
        int outs[2][3];
        for (int p = 0; p < 2; p++) {
            fr_dtype dt = p ? FR_F64 : FR_F32;
            fr_graph *g = gs[p] = fr_gc_new_graph(17);
            int in[4];
            in[0] = fr_gc_add_values(g, "dy", dt, 3, dx, buf[0]);
            in[1] = fr_gc_add_values(g, "v", dt, 3, dx, buf[1]);
            if (fc->n_in > 2) in[2] = fr_gc_add_values(g, "scale", dt, fc->rscale, fc->dscale, buf[2]);
            if (fc->n_in > 3) in[3] = fr_gc_add_values(g, "b", dt, fc->rscale, fc->dscale, buf[3]);
            int nid = fr_gc_node(g, fc->op, FR_DOMAIN_FP8RUN, fc->n_in, in, fc->n_out, outs[p]);
            FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", fc->axis));
            if (fc->flatten) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "flatten", 1));
            FR_ASSERT_OK(fr_node_infer(g, nid));
            CU_ASSERT_EQUAL(g->values[outs[p][0]].dtype, dt);
            ts[p] = calloc((size_t)g->n_values, sizeof(fr_tensor *));
            FR_ASSERT_OK(fr_gc_run(g, ts[p]));
        }
        char what[96];
        snprintf(what, sizeof what, "%s axis %lld%s", fc->op, (long long)fc->axis,
                 fc->flatten ? " flatten" : "");
        for (int o = 0; o < fc->n_out; o++)
            compare_outputs(what, o, ts[0][outs[0][o]], ts[1][outs[1][o]]);
        for (int p = 0; p < 2; p++) {
            fr_gc_free_tensors(gs[p], ts[p]);
            free(ts[p]);
            fr_graph_free(gs[p]);
        }
    }
    for (int k = 0; k < 4; k++) free(buf[k]);
    printf("\n  fused kernels float32 vs float64: worst relative error per element %.3g ", fk_worst);
}

/* The backward ops reject bad shapes and attributes, naming the node. */
static void test_errors(void)
{
    fr_rng r = fr_test_rng("errors");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {3, 4}, d2[2] = {4, 3}, ds[1] = {3};
    int dy = fr_gc_add_input(g, &r, "dy", FR_F64, 2, d, NULL);
    int y = fr_gc_add_input(g, &r, "y", FR_F64, 2, d, NULL);
    int yt = fr_gc_add_input(g, &r, "yt", FR_F64, 2, d2, NULL);
    int yf = fr_gc_add_input(g, &r, "yf", FR_F32, 2, d, NULL);
    int sc = fr_gc_add_input(g, &r, "scale_bad", FR_F64, 1, ds, NULL);
    int out, outs[2];
    int in[2] = {dy, yt};
    int nid = fr_gc_node(g, "SoftmaxGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    in[1] = yf;
    nid = fr_gc_node(g, "LogSoftmaxGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    CU_ASSERT_NOT_EQUAL(fr_node_infer(g, nid), FR_OK);
    in[1] = y;
    nid = fr_gc_node(g, "SoftmaxGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 2));
    CU_ASSERT_NOT_EQUAL(fr_node_infer(g, nid), FR_OK);
    int nin[3] = {dy, y, sc};
    nid = fr_gc_node(g, "LayerNormGrad", FR_DOMAIN_FP8RUN, 3, nin, 2, outs);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* Scale [3] vs X [3,4] */
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "Scale"));
    int nin2[3] = {dy, yt, y};
    nid = fr_gc_node(g, "RMSNormGrad", FR_DOMAIN_FP8RUN, 3, nin2, 2, outs);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_SHAPE); /* dY shape differs from X */
    fr_graph_free(g);
}

/* ---- a chain: attention-like block, every parameter differentiated ----
 * h = LayerNorm(x) ; q = Gemm(h, Wq^T, bq) ; k = h @ Wk ; p = Softmax(q k^T) ; o = p @ h ;
 * out = LogSoftmax(RMSNorm(o) @ Wo) */
static void test_chain(void)
{
    fr_rng r = fr_test_rng("chain");
    fr_graph *g = fr_gc_new_graph(23);
    int64_t dx[2] = {5, 6}, d6[1] = {6}, dw[2] = {6, 6}, dwo[2] = {6, 3};
    int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, dx, NULL);
    int ls = fr_gc_add_input(g, &r, "ln_s", FR_F64, 1, d6, NULL);
    int lb = fr_gc_add_input(g, &r, "ln_b", FR_F64, 1, d6, NULL);
    int wq = fr_gc_add_input(g, &r, "wq", FR_F64, 2, dw, NULL);
    int wk = fr_gc_add_input(g, &r, "wk", FR_F64, 2, dw, NULL);
    int bq = fr_gc_add_input(g, &r, "bq", FR_F64, 1, d6, NULL);
    int rs = fr_gc_add_input(g, &r, "rms_s", FR_F64, 1, d6, NULL);
    int wo = fr_gc_add_input(g, &r, "wo", FR_F64, 2, dwo, NULL);
    /* small projections keep the attention softmax away from saturation, where gradients
     * vanish and central differences are all noise */
    for (int w = 0; w < 2; w++) {
        double *wv = g->values[w ? wk : wq].constant->data;
        for (int i = 0; i < 36; i++) wv[i] *= 0.2;
    }
    int in3[3] = {x, ls, lb};
    int h = fr_gc_op1(g, "LayerNormalization", 3, in3);
    /* the bias goes on q: on k it would shift every score of a row equally (zero gradient) */
    int qin[3] = {h, wq, bq}, q;
    int nid = fr_gc_node(g, "Gemm", "", 3, qin, 1, &q);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "transB", 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int in2[2] = {h, wk};
    int k = fr_gc_op1(g, "MatMul", 2, in2);
    int kt;
    nid = fr_gc_node(g, "Transpose", "", 1, &k, 1, &kt);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int qk[2] = {q, kt};
    int s = fr_gc_op1(g, "MatMul", 2, qk);
    int p = fr_gc_op1(g, "Softmax", 1, &s);
    int ph[2] = {p, h};
    int o = fr_gc_op1(g, "MatMul", 2, ph);
    int ro[2] = {o, rs};
    int n2 = fr_gc_op1(g, "RMSNormalization", 2, ro);
    int nw[2] = {n2, wo};
    int lo = fr_gc_op1(g, "MatMul", 2, nw);
    int out = fr_gc_op1(g, "LogSoftmax", 1, &lo);
    int wrt[8] = {x, ls, lb, wq, wk, bq, rs, wo};
    check(g, &r, out, 8, wrt, "attention-like chain");
    fr_graph_free(g);
    report("chain");
}

static CU_TestInfo tests[] = {
    {"matmul", test_matmul},
    {"gemm", test_gemm},
    {"softmax", test_softmax},
    {"norm", test_norm},
    {"norm_stat_outputs", test_norm_stat_outputs},
    {"kernels_f32_vs_f64", test_kernels_f32_vs_f64},
    {"errors", test_errors},
    {"chain", test_chain},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"grad_dense", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
