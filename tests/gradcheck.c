/* Central-difference gradient checks (see gradcheck.h). */
#include "tests/gradcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/autodiff.h"

static double tget(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_F64 ? ((double *)t->data)[i] : ((float *)t->data)[i];
}

static void tset(fr_tensor *t, int64_t i, double v)
{
    if (t->dtype == FR_F64)
        ((double *)t->data)[i] = v;
    else
        ((float *)t->data)[i] = (float)v;
}

int fr_gc_add_input(fr_graph *g, fr_rng *r, const char *name, fr_dtype dt, int rank,
                    const int64_t *dims, const int64_t *ints)
{
    int vid;
    fr_tensor *t;
    if (fr_graph_add_value(g, name, &vid) != FR_OK) return -1;
    if (fr_tensor_new(dt, rank, dims, name, &t) != FR_OK) return -1;
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case FR_F32: ((float *)t->data)[i] = (float)fr_rng_normal(r); break;
        case FR_F64: ((double *)t->data)[i] = fr_rng_normal(r); break;
        case FR_I64: ((int64_t *)t->data)[i] = ints ? ints[i] : 0; break;
        case FR_I32: ((int32_t *)t->data)[i] = ints ? (int32_t)ints[i] : 0; break;
        case FR_BOOL: ((uint8_t *)t->data)[i] = ints ? (uint8_t)(ints[i] != 0) : 0; break;
        default: break;
        }
    }
    fr_value *v = &g->values[vid];
    v->constant = t;
    v->flags |= FR_VAL_FOLDED;
    fr_value_set_shape(v, dt, rank, dims);
    return vid;
}

fr_graph *fr_gc_new_graph(int64_t opset)
{
    fr_graph *g = NULL;
    if (fr_graph_new(&g) != FR_OK) return NULL;
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = opset;
    g->n_opsets = 1;
    return g;
}

int fr_gc_node(fr_graph *g, const char *op, const char *domain, int n_in, const int *in, int n_out, int *outs)
{
    int nid;
    for (int o = 0; o < n_out; o++) {
        char nm[64];
        snprintf(nm, sizeof nm, "%s_%d_out%d", op, g->n_nodes, o);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &outs[o]));
    }
    FR_ASSERT_OK(fr_graph_add_node(g, op, domain, NULL, n_in, in, n_out, outs, &nid));
    return nid;
}

int fr_gc_op1(fr_graph *g, const char *op, int n_in, const int *in)
{
    int out;
    int nid = fr_gc_node(g, op, "", n_in, in, 1, &out);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return out;
}

int fr_gc_count_nodes(const fr_graph *g, const char *op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

int fr_gc_add_values(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims, const double *v)
{
    fr_rng r = fr_test_rng(name); /* the random fill is overwritten */
    int vid = fr_gc_add_input(g, &r, name, dt, rank, dims, NULL);
    fr_tensor *t = g->values[vid].constant;
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) tset(t, i, v[i]);
    return vid;
}

void fr_gc_away_from_zero(fr_graph *g, int vid, double margin)
{
    fr_tensor *t = g->values[vid].constant;
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        double x = tget(t, i);
        tset(t, i, x < 0 ? x - margin : x + margin);
    }
}

double fr_gc_check(fr_graph *g, fr_rng *r, int out_vid, int n_wrt, const int *wrt, const char *what, double tol)
{
    double err = fr_gradcheck(g, r, out_vid, n_wrt, wrt);
    if (!(err < tol)) fprintf(stderr, "\n  %s: gradcheck error %.3g\n", what, err);
    CU_ASSERT(err < tol);
    return err;
}

fr_tensor **fr_gc_backprop(fr_graph *g, int out_vid, const double *dy, int n_wrt, const int *wrt, int *grads)
{
    const fr_value *ov = &g->values[out_vid];
    int rv = fr_gc_add_values(g, "R", ov->dtype, ov->rank, ov->dims, dy);
    int in[2] = {out_vid, rv}, loss;
    int nid = fr_gc_node(g, "Dot", FR_DOMAIN_FP8RUN, 2, in, 1, &loss);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    FR_ASSERT_OK(fr_autodiff(g, loss, n_wrt, wrt, grads));
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    return t;
}

/* Same value within tol relative, NaN equal to NaN, infinities by sign. */
static int same(double a, double b, double tol)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b || fabs(a - b) <= tol * fabs(b);
}

const fr_tensor *fr_gc_value(const fr_graph *g, fr_tensor **t, int vid)
{
    return g->values[vid].constant ? g->values[vid].constant : t[vid];
}

double fr_gc_rel_l2(const fr_tensor *a, const fr_tensor *b)
{
    int64_t n = fr_tensor_numel(b);
    if (!a || fr_tensor_numel(a) != n) return INFINITY;
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = fr_tensor_get_f64(a, i), y = fr_tensor_get_f64(b, i);
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}

void fr_gc_expect(fr_graph *g, fr_tensor **t, int vid, const double *want, int64_t n, double tol, const char *what)
{
    CU_ASSERT_FATAL(vid >= 0);
    const fr_tensor *gt = fr_gc_value(g, t, vid);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(gt), n);
    for (int64_t i = 0; i < n; i++) {
        double v = fr_tensor_get_f64(gt, i);
        if (!same(v, want[i], tol)) {
            fprintf(stderr, "\n  %s[%lld] = %.17g, expected %.17g\n", what, (long long)i, v, want[i]);
            CU_FAIL("gradient differs from the expected value");
        }
    }
}

void fr_gc_free_tensors(fr_graph *g, fr_tensor **tensors)
{
    for (int i = 0; i < g->n_values; i++) {
        fr_tensor_free(tensors[i]);
        tensors[i] = NULL;
    }
}

fr_status fr_gc_run(fr_graph *g, fr_tensor **tensors)
{
    for (int n = 0; n < g->n_nodes; n++) {
        const fr_node *nd = &g->nodes[n];
        if (!nd->op) FR_TRY(fr_node_infer(g, n));
        nd = &g->nodes[n];
        fr_tensor *in[16] = {0}, *out[16] = {0};
        if (nd->n_inputs > 16 || nd->n_outputs > 16)
            return fr_error(FR_ERR_INTERNAL, "gradcheck runner: too many inputs/outputs");
        for (int i = 0; i < nd->n_inputs; i++) {
            int vid = nd->inputs[i];
            if (vid < 0) continue;
            in[i] = g->values[vid].constant ? g->values[vid].constant : tensors[vid];
            if (!in[i])
                return fr_error(FR_ERR_INTERNAL, "gradcheck runner: '%s' not computed", g->values[vid].name);
        }
        for (int o = 0; o < nd->n_outputs; o++) {
            int vid = nd->outputs[o];
            if (vid < 0) continue;
            const fr_value *v = &g->values[vid];
            fr_tensor_free(tensors[vid]);
            tensors[vid] = NULL;
            FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &tensors[vid]));
            out[o] = tensors[vid];
        }
        fr_kernel_ctx ctx = {g, nd, fr_graph_opset(g, nd->domain), nd->n_inputs, nd->n_outputs, in, out};
        FR_TRY(nd->op->cpu(&ctx));
    }
    return FR_OK;
}

double fr_gradcheck(fr_graph *g, fr_rng *r, int out_vid, int n_wrt, const int *wrt)
{
    const fr_value *ov = &g->values[out_vid];
    fr_dtype dt = ov->dtype;
    int rvid = fr_gc_add_input(g, r, "gradcheck_R", dt, ov->rank, g->values[out_vid].dims, NULL);
    int loss, nid, in[2] = {out_vid, rvid};
    if (rvid < 0 || fr_graph_add_value(g, "gradcheck_loss", &loss) != FR_OK ||
        fr_graph_add_node(g, "Dot", "ai.fp8run", "gradcheck_dot", 2, in, 1, &loss, &nid) != FR_OK ||
        fr_node_infer(g, nid) != FR_OK) {
        fprintf(stderr, "gradcheck: building the loss failed: %s\n", fr_last_error());
        return INFINITY;
    }
    int n_fwd = g->n_nodes;
    int *grads = calloc((size_t)n_wrt, sizeof(int));
    if (fr_autodiff(g, loss, n_wrt, wrt, grads) != FR_OK) {
        fprintf(stderr, "gradcheck: autodiff failed: %s\n", fr_last_error());
        free(grads);
        return INFINITY;
    }
    fr_tensor **tensors = calloc((size_t)g->n_values, sizeof(fr_tensor *));
    if (fr_gc_run(g, tensors) != FR_OK) {
        fprintf(stderr, "gradcheck: running forward+backward failed: %s\n", fr_last_error());
        fr_gc_free_tensors(g, tensors);
        free(tensors);
        free(grads);
        return INFINITY;
    }
    /* forward-only runs for the numeric derivative: temporarily hide the backward nodes */
    int n_all = g->n_nodes;
    double worst = 0;
    double eps = dt == FR_F64 ? 1e-6 : 1e-2;
    for (int w = 0; w < n_wrt; w++) {
        fr_tensor *x = g->values[wrt[w]].constant;
        const fr_tensor *ga = grads[w] >= 0 ? fr_gc_value(g, tensors, grads[w]) : NULL;
        int64_t n = fr_tensor_numel(x), step = n > 96 ? n / 96 + 1 : 1;
        double num2 = 0, diff2 = 0;
        g->n_nodes = n_fwd;
        for (int64_t i = 0; i < n; i += step) {
            double x0 = tget(x, i), lp, lm;
            tset(x, i, x0 + eps);
            fr_gc_run(g, tensors);
            lp = tget(tensors[loss], 0);
            tset(x, i, x0 - eps);
            fr_gc_run(g, tensors);
            lm = tget(tensors[loss], 0);
            tset(x, i, x0);
            double num = (lp - lm) / (2 * eps), ana = ga ? tget(ga, i) : 0.0;
            num2 += num * num;
            diff2 += (num - ana) * (num - ana);
        }
        g->n_nodes = n_all;
        double rel = sqrt(diff2) / fmax(sqrt(num2), 1e-12);
        if (isnan(rel)) rel = INFINITY;
        if (rel > worst) worst = rel;
        if (rel > (dt == FR_F64 ? 1e-6 : 2e-2))
            fprintf(stderr, "\n  gradcheck: d loss / d '%s': relative error %.3g (numeric norm %.3g)\n",
                    g->values[wrt[w]].name, rel, sqrt(num2));
    }
    fr_gc_free_tensors(g, tensors);
    free(tensors);
    free(grads);
    return worst;
}
