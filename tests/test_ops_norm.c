/* LayerNormalization (opset 17) and RMSNormalization (opset 23) (ops/norm.c) against
 * double-precision references written here, on fresh random inputs with a non-zero mean:
 * axis -1, 1, 0 and negative on rank-3 inputs, Scale/B shaped like the normalized dims,
 * broadcast from fewer dims or size-1 dims, or varying per row (unidirectional broadcast to
 * X), with and without B, with and without the optional Mean/InvStdDev outputs, epsilon,
 * size-1 and empty dims, float64, and the errors.
 * Tolerance: Y, Mean and InvStdDev within 1e-6 relative L2 of the reference (float64 1e-12). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "harness.h"
#include "ops/op.h"

/* ---- a one-node graph run as the executor will: infer, allocate outputs, run ---- */

typedef struct tnode {
    fr_graph *g;
    int nid, n_in, n_out;
    int in_vid[4], out_vid[4];
    fr_tensor *in[4];
    fr_tensor *out[4];
} tnode;

/* ins[i] == NULL is an omitted optional input; bit o of out_mask clear omits output o. */
static void tn_init(tnode *t, const char *op, int64_t opset, int n_in, fr_tensor *const *ins,
                    int n_out, unsigned out_mask)
{
    memset(t, 0, sizeof *t);
    FR_ASSERT_OK(fr_graph_new(&t->g));
    fr_graph *g = t->g;
    g->opsets = fr_calloc(1, sizeof(fr_opset), "opsets");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->opsets);
    g->opsets[0].domain = fr_strdup("", "domain");
    g->opsets[0].version = opset;
    g->n_opsets = 1;
    t->n_in = n_in;
    t->n_out = n_out;
    for (int i = 0; i < n_in; i++) {
        t->in_vid[i] = -1;
        if (!ins[i]) continue;
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &t->in_vid[i]));
        fr_value_set_shape(&g->values[t->in_vid[i]], ins[i]->dtype, ins[i]->rank, ins[i]->dims);
        FR_ASSERT_OK(fr_graph_mark_input(g, t->in_vid[i]));
        t->in[i] = ins[i];
    }
    for (int o = 0; o < n_out; o++) {
        t->out_vid[o] = -1;
        if (!(out_mask & (1u << o))) continue;
        char nm[16];
        snprintf(nm, sizeof nm, "out%d", o);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &t->out_vid[o]));
    }
    FR_ASSERT_OK(fr_graph_add_node(g, op, "", "node_under_test", n_in, t->in_vid, n_out,
                                   t->out_vid, &t->nid));
}

static fr_node *tn_node(tnode *t) { return &t->g->nodes[t->nid]; }

/* Outputs start as NaN so skipped elements cannot pass. */
static fr_status tn_run(tnode *t)
{
    fr_node *n = tn_node(t);
    const fr_op_def *op = fr_op_find(n->domain, n->op_type);
    if (!op) return fr_error(FR_ERR_UNSUPPORTED, "op %s is not registered", n->op_type);
    FR_TRY(op->infer(t->g, t->nid));
    for (int o = 0; o < t->n_out; o++) {
        if (t->out_vid[o] < 0) continue;
        const fr_value *v = &t->g->values[t->out_vid[o]];
        FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &t->out[o]));
        int64_t cnt = fr_tensor_numel(t->out[o]);
        for (int64_t i = 0; i < cnt; i++) {
            if (v->dtype == FR_F32) ((float *)t->out[o]->data)[i] = NAN;
            if (v->dtype == FR_F64) ((double *)t->out[o]->data)[i] = NAN;
        }
    }
    fr_kernel_ctx ctx = {t->g, n, fr_graph_opset(t->g, n->domain), t->n_in, t->n_out, t->in, t->out};
    return op->cpu(&ctx);
}

static void tn_free(tnode *t)
{
    for (int o = 0; o < t->n_out; o++) fr_tensor_free(t->out[o]);
    fr_graph_free(t->g);
}

static void assert_error_mentions(const char *what)
{
    const char *e = fr_last_error();
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "node_under_test"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, what));
    if (!strstr(e, what)) fprintf(stderr, "\n  error was: %s (want '%s')\n", e, what);
}

static fr_tensor *tnew(fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_tensor_new(dt, rank, dims, "test tensor", &t));
    return t;
}

static fr_tensor *trand(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double mean,
                        double sd)
{
    fr_tensor *t = tnew(dt, rank, dims);
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = mean + sd * fr_rng_normal(r);
        if (dt == FR_F32) ((float *)t->data)[i] = (float)v;
        else ((double *)t->data)[i] = v;
    }
    return t;
}

static double getd(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

/* Flat index in `p` (right-aligned, size-1 dims broadcast) of X's element i. */
static int64_t bindex(const fr_tensor *p, const fr_tensor *x, int64_t i)
{
    int64_t idx = 0, mul = 1;
    for (int k = x->rank - 1; k >= 0; k--) {
        int64_t c = i % x->dims[k];
        i /= x->dims[k];
        int j = k - (x->rank - p->rank);
        if (j < 0) continue;
        if (p->dims[j] != 1) idx += c * mul;
        mul *= p->dims[j];
    }
    return idx;
}

static double rel_err(const fr_tensor *y, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = getd(y, i);
        if (isnan(v) || isnan(ref[i])) return INFINITY;
        num += (v - ref[i]) * (v - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- parameter shapes relative to X and axis ---- */

typedef enum pshape { P_EXACT, P_LAST, P_LEAD1, P_FULL, P_SIZE1 } pshape;

/* P_EXACT: X.dims[axis:]; P_LAST: [X.dims[-1]]; P_LEAD1: [1] + X.dims[axis:];
 * P_FULL: X.dims (varies per row); P_SIZE1: X.dims[axis:] with its first dim set to 1. */
static int param_shape(pshape p, const fr_tensor *x, int axis, int64_t *d)
{
    int r = 0;
    switch (p) {
    case P_EXACT:
    case P_SIZE1:
        for (int k = axis; k < x->rank; k++) d[r++] = x->dims[k];
        if (p == P_SIZE1) d[0] = 1;
        return r;
    case P_LAST: d[0] = x->dims[x->rank - 1]; return 1;
    case P_LEAD1:
        d[r++] = 1;
        for (int k = axis; k < x->rank; k++) d[r++] = x->dims[k];
        return r;
    case P_FULL:
        for (int k = 0; k < x->rank; k++) d[r++] = x->dims[k];
        return r;
    }
    return 0;
}

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

static const shp xshapes[] = {
    {3, {2, 5, 16}}, {3, {3, 1, 7}}, {2, {6, 384}}, {3, {4, 0, 8}}, {1, {9}}, {4, {2, 3, 4, 5}},
};

/* One LayerNormalization / RMSNormalization run against the reference. */
static void run_norm(fr_rng *rng, fr_dtype dt, int rms, const shp *xs, int axis, pshape sp,
                     int bias, pshape bp, int stats, float eps, double tol)
{
    fr_tensor *x = trand(rng, dt, xs->r, xs->d, rms ? 0.5 : 3.0, 2.0);
    int a = axis < 0 ? axis + xs->r : axis;
    int64_t sd[FR_MAX_RANK + 1], bd[FR_MAX_RANK + 1];
    int sr = param_shape(sp, x, a, sd);
    if (sr > xs->r) { /* [1] + dims[axis:] only fits when axis > 0 */
        fr_tensor_free(x);
        return;
    }
    fr_tensor *s = trand(rng, dt, sr, sd, 1.0, 0.5), *b = NULL;
    if (bias) {
        int br = param_shape(bp, x, a, bd);
        if (br > xs->r) br = param_shape(P_EXACT, x, a, bd);
        b = trand(rng, dt, br, bd, 0.0, 1.0);
    }
    fr_tensor *ins[3] = {x, s, b};
    tnode t;
    int n_out = rms ? 1 : stats ? 3 : 1;
    unsigned mask = stats == 2 ? 0x5u : 0x7u; /* stats 2: Mean omitted, InvStdDev kept */
    tn_init(&t, rms ? "RMSNormalization" : "LayerNormalization", rms ? 23 : 17, b ? 3 : 2, ins,
            n_out, mask);
    FR_ASSERT_OK(fr_node_set_attr_int(tn_node(&t), "axis", axis));
    if (eps != 1e-5f) FR_ASSERT_OK(fr_node_set_attr_float(tn_node(&t), "epsilon", eps));
    FR_ASSERT_OK(tn_run(&t));

    fr_tensor *y = t.out[0];
    CU_ASSERT_EQUAL(y->dtype, dt);
    CU_ASSERT_EQUAL_FATAL(y->rank, xs->r);
    for (int k = 0; k < xs->r; k++) CU_ASSERT_EQUAL(y->dims[k], xs->d[k]);
    int64_t rows = 1, len = 1;
    for (int k = 0; k < xs->r; k++) {
        if (k < a) rows *= xs->d[k];
        else len *= xs->d[k];
    }
    int64_t n = rows * len;
    double *ry = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *rm = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    double *ri = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ry);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rm);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ri);
    for (int64_t row = 0; row < rows; row++) {
        double mean = 0, ms = 0;
        for (int64_t j = 0; j < len; j++) mean += getd(x, row * len + j);
        mean /= (double)len;
        for (int64_t j = 0; j < len; j++) {
            double v = getd(x, row * len + j) - (rms ? 0.0 : mean);
            ms += v * v;
        }
        double inv = 1.0 / sqrt(ms / (double)len + (double)eps);
        rm[row] = mean;
        ri[row] = inv;
        for (int64_t j = 0; j < len; j++) {
            int64_t i = row * len + j;
            double v = (getd(x, i) - (rms ? 0.0 : mean)) * inv * getd(s, bindex(s, x, i));
            if (b) v += getd(b, bindex(b, x, i));
            ry[i] = v;
        }
    }
    double err = rel_err(y, ry, n);
    CU_ASSERT(err <= tol);
    if (!(err <= tol))
        fprintf(stderr, "\n  %s x rank %d axis %d scale#%d bias=%d#%d: Y rel err %g\n",
                rms ? "RMSNorm" : "LayerNorm", xs->r, axis, sp, bias, bp, err);
    if (!rms && stats) {
        int64_t ed[FR_MAX_RANK];
        for (int k = 0; k < xs->r; k++) ed[k] = k < a ? xs->d[k] : 1;
        for (int o = stats == 2 ? 2 : 1; o < 3; o++) {
            fr_tensor *st = t.out[o];
            CU_ASSERT_PTR_NOT_NULL_FATAL(st);
            CU_ASSERT_EQUAL(st->dtype, FR_F32);
            CU_ASSERT_EQUAL_FATAL(st->rank, xs->r);
            for (int k = 0; k < xs->r; k++) CU_ASSERT_EQUAL(st->dims[k], ed[k]);
            if (len == 0) { /* statistics of nothing: 0 / 0 */
                for (int64_t i = 0; i < rows; i++) CU_ASSERT(isnan(getd(st, i)));
                continue;
            }
            double e2 = rel_err(st, o == 1 ? rm : ri, rows);
            CU_ASSERT(e2 <= (tol > 1e-6 ? tol : 1e-6));
        }
        if (stats == 2) CU_ASSERT_PTR_NULL(t.out[1]);
    }
    free(ry);
    free(rm);
    free(ri);
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static void test_norm_sweep(int rms)
{
    fr_rng r = fr_test_rng(rms ? "rmsnorm_sweep" : "layernorm_sweep");
    int runs = 0;
    for (int xi = 0; xi < (int)(sizeof xshapes / sizeof xshapes[0]); xi++) {
        const shp *xs = &xshapes[xi];
        for (int axis = -xs->r; axis < xs->r; axis++)
            for (int sp = P_EXACT; sp <= P_SIZE1; sp++)
                for (int bias = 0; bias < (rms ? 1 : 2); bias++)
                    for (int stats = 0; stats < (rms ? 1 : 3); stats++) {
                        pshape bp = (pshape)((sp + 1 + stats) % 5);
                        float eps = (runs % 3 == 0) ? 1e-3f : 1e-5f;
                        run_norm(&r, FR_F32, rms, xs, axis, (pshape)sp, bias, bp, stats, eps, 1e-6);
                        runs++;
                    }
    }
    CU_ASSERT(runs > (rms ? 50 : 300));
}

static void test_layernorm(void) { test_norm_sweep(0); }
static void test_rmsnorm(void) { test_norm_sweep(1); }

static void test_norm_f64(void)
{
    fr_rng r = fr_test_rng("norm_f64");
    run_norm(&r, FR_F64, 0, &xshapes[0], -1, P_EXACT, 1, P_EXACT, 1, 1e-5f, 1e-12);
    run_norm(&r, FR_F64, 0, &xshapes[0], 1, P_LAST, 1, P_FULL, 1, 1e-5f, 1e-12);
    run_norm(&r, FR_F64, 1, &xshapes[0], 1, P_EXACT, 0, P_EXACT, 0, 1e-5f, 1e-12);
}

/* A constant row has zero variance: Y = B exactly and InvStdDev = 1 / sqrt(epsilon). */
static void test_layernorm_constant_rows(void)
{
    int64_t dx[2] = {3, 4}, ds[1] = {4};
    fr_tensor *x = tnew(FR_F32, 2, dx), *s = tnew(FR_F32, 1, ds), *b = tnew(FR_F32, 1, ds);
    for (int i = 0; i < 12; i++) ((float *)x->data)[i] = 2.5f + (float)(i / 4);
    for (int i = 0; i < 4; i++) {
        ((float *)s->data)[i] = 3.0f;
        ((float *)b->data)[i] = (float)i - 1.0f;
    }
    fr_tensor *ins[3] = {x, s, b};
    tnode t;
    tn_init(&t, "LayerNormalization", 17, 3, ins, 3, 0x7u);
    FR_ASSERT_OK(fr_node_set_attr_float(tn_node(&t), "epsilon", 0.25f));
    FR_ASSERT_OK(tn_run(&t));
    for (int i = 0; i < 12; i++) CU_ASSERT_EQUAL(((float *)t.out[0]->data)[i], (float)(i % 4) - 1.0f);
    for (int r = 0; r < 3; r++) {
        CU_ASSERT_EQUAL(((float *)t.out[1]->data)[r], 2.5f + (float)r);
        CU_ASSERT_EQUAL(((float *)t.out[2]->data)[r], 2.0f);
    }
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(b);
}

static void test_norm_errors(void)
{
    fr_rng r = fr_test_rng("norm_errors");
    int64_t dx[3] = {2, 3, 4}, ds[1] = {4}, dbad[1] = {3}, d2[2] = {5, 4};
    fr_tensor *x = trand(&r, FR_F32, 3, dx, 0, 1), *s = trand(&r, FR_F32, 1, ds, 1, 1);
    fr_tensor *sbad = trand(&r, FR_F32, 1, dbad, 1, 1), *s2 = trand(&r, FR_F32, 2, d2, 1, 1);
    fr_tensor *s64 = trand(&r, FR_F64, 1, ds, 1, 1), *xh = tnew(FR_BF16, 3, dx);
    fr_tensor *sc = trand(&r, FR_F32, 0, NULL, 1, 1);
    tnode t;
    fr_tensor *ins[3] = {x, s, s};
    /* stash_type other than float32 */
    tn_init(&t, "LayerNormalization", 17, 2, ins, 1, 1u);
    FR_ASSERT_OK(fr_node_set_attr_int(tn_node(&t), "stash_type", 16));
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    assert_error_mentions("stash_type");
    tn_free(&t);
    /* scale that does not broadcast to X */
    fr_tensor *ins_bad[2] = {x, sbad};
    tn_init(&t, "LayerNormalization", 17, 2, ins_bad, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("does not broadcast");
    tn_free(&t);
    fr_tensor *ins_b2[3] = {x, s, s2};
    tn_init(&t, "LayerNormalization", 17, 3, ins_b2, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("B [5, 4]");
    tn_free(&t);
    /* dtypes */
    fr_tensor *ins_h[2] = {xh, s};
    tn_init(&t, "RMSNormalization", 23, 2, ins_h, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    assert_error_mentions("bfloat16");
    tn_free(&t);
    fr_tensor *ins_64[2] = {x, s64};
    tn_init(&t, "RMSNormalization", 23, 2, ins_64, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    assert_error_mentions("float64");
    tn_free(&t);
    /* axis out of range, rank-0 X */
    tn_init(&t, "LayerNormalization", 17, 2, ins, 1, 1u);
    FR_ASSERT_OK(fr_node_set_attr_int(tn_node(&t), "axis", 3));
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("out of range");
    tn_free(&t);
    fr_tensor *ins_sc[2] = {sc, sc};
    tn_init(&t, "RMSNormalization", 23, 2, ins_sc, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("rank");
    tn_free(&t);
    /* RMSNormalization has no bias input and one output */
    tn_init(&t, "RMSNormalization", 23, 3, ins, 1, 1u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    assert_error_mentions("inputs");
    tn_free(&t);
    tn_init(&t, "RMSNormalization", 23, 2, ins, 2, 3u);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    assert_error_mentions("outputs");
    tn_free(&t);
    fr_tensor *to_free[] = {x, s, sbad, s2, s64, xh, sc};
    for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) fr_tensor_free(to_free[i]);
}

static CU_TestInfo norm_tests[] = {
    {"LayerNormalization axes, Scale/B broadcasts, Mean/InvStdDev", test_layernorm},
    {"RMSNormalization axes and scale broadcasts", test_rmsnorm},
    {"float64", test_norm_f64},
    {"LayerNormalization constant rows and epsilon", test_layernorm_constant_rows},
    {"errors", test_norm_errors},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"ops_norm", NULL, NULL, NULL, NULL, norm_tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
