/* LayerNormalization (opset 17) and RMSNormalization (opset 23), float32 and float64.
 *
 * Both normalize over the trailing dims [axis, rank) (axis default -1):
 *   LayerNormalization: Y = (X - mean) * InvStdDev * Scale + B,
 *                       InvStdDev = 1 / sqrt(mean((X - mean)^2) + epsilon)
 *   RMSNormalization:   Y = X / sqrt(mean(X^2) + epsilon) * scale
 * Scale and B broadcast unidirectionally to X's full shape (the spec's rule), so a scale of
 * shape [D], [1, D] or even [T, D] works. The optional Mean and InvStdDev outputs of
 * LayerNormalization have X's leading dims and 1 for each normalized dim; they are float32
 * (stash_type=1, the only stash type supported).
 * The statistics are computed in double (two passes, so the variance does not cancel) and
 * every output is rounded once, which is more accurate than the float32 stash the spec
 * allows. An empty normalized extent gives NaN statistics (0 / 0).
 *
 * ai.fp8run::RMSNormalization is the same op in fp8run's domain, for graphs of an opset below 23
 * (passes/rmsnorm_fuse.c).
 *
 * Backward (domain ai.fp8run), one fused node per forward node; the statistics are
 * recomputed from X (cheap next to saving them, and the same double arithmetic as forward):
 *   LayerNormGrad(dY, X, Scale[, B]) -> dX, dScale[, dB]
 *   RMSNormGrad(dY, X, Scale)        -> dX, dScale
 * with xh = (X - mean) * r (mean = 0 for RMS), g = dY * Scale, per row of L elements:
 *   dX = r * (g - mean(g) - xh * mean(g * xh))     (RMS: without the mean(g) term)
 *   dScale = dY * xh and dB = dY, summed over the positions Scale / B are broadcast to.
 * B is an input of LayerNormGrad only for dB's shape. Attributes axis and epsilon as the
 * forward's. All sums accumulate in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/norm.h"
#include "ops/op.h"

static int is_rms(const fr_node *n) { return strcmp(n->op_type, "RMSNormalization") == 0; }

/* Attributes and the row split of X's shape. */
fr_status fr_norm_config(const fr_node *n, int rank, const int64_t *dims, fr_norm_cfg *c)
{
    int64_t axis, stash;
    FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
    FR_TRY(fr_node_attr_float(n, "epsilon", 1e-5f, &c->eps));
    FR_TRY(fr_node_attr_int(n, "stash_type", 1, &stash));
    if (stash != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "stash_type=%lld is not supported (only 1, float32)", (long long)stash);
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "X must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis, rank, &c->axis));
    c->rows = 1;
    c->len = 1;
    for (int k = 0; k < rank; k++) {
        if (k < c->axis)
            c->rows *= dims[k];
        else
            c->len *= dims[k];
    }
    return FR_OK;
}

static fr_status check_dtype(const fr_node *n, fr_dtype x, fr_dtype other, const char *what)
{
    if (x != FR_F32 && x != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "X dtype %s is not supported (float32 or float64 only)",
                             fr_dtype_name(x));
    if (other != x)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s but X is %s (mixed dtypes are not "
                             "supported)", what, fr_dtype_name(other), fr_dtype_name(x));
    return FR_OK;
}

/* Scale / B must broadcast unidirectionally to X: right-aligned, each dim equal or 1. */
static fr_status check_bcast(const fr_node *n, const char *what, int rs, const int64_t *ds,
                             int rx, const int64_t *dx)
{
    int ok = rs <= rx;
    for (int k = 0; ok && k < rs; k++) ok = ds[k] == 1 || ds[k] == dx[rx - rs + k];
    if (!ok) {
        char s1[128], s2[128];
        return fr_node_error(n, FR_ERR_SHAPE, "%s %s does not broadcast to X %s", what,
                             fr_shape_str(rs, ds, s1, sizeof s1), fr_shape_str(rx, dx, s2, sizeof s2));
    }
    return FR_OK;
}

/* X with its Scale and optional B (NULL): dtypes, the normalized axes (c) and the broadcasts. */
static fr_status check_operands(const fr_node *n, const fr_tensor *x, const fr_tensor *s, const fr_tensor *b,
                                fr_norm_cfg *c)
{
    FR_TRY(check_dtype(n, x->dtype, s->dtype, "Scale"));
    if (b) FR_TRY(check_dtype(n, x->dtype, b->dtype, "B"));
    FR_TRY(fr_norm_config(n, x->rank, x->dims, c));
    FR_TRY(check_bcast(n, "Scale", s->rank, s->dims, x->rank, x->dims));
    if (b) FR_TRY(check_bcast(n, "B", b->rank, b->dims, x->rank, x->dims));
    return FR_OK;
}

static fr_status norm_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int rms = is_rms(n);
    FR_TRY(fr_infer_require_inputs(g, n, 2, rms ? 2 : 3));
    const fr_value *x = fr_node_in(g, n, 0), *s = fr_node_in(g, n, 1), *b = fr_node_in(g, n, 2);
    if (b) FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    if (n->n_outputs > (rms ? 1 : 3))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected at most %d", n->n_outputs,
                             rms ? 1 : 3);
    fr_norm_cfg c;
    FR_TRY(check_dtype(n, x->dtype, s->dtype, "Scale"));
    if (b) FR_TRY(check_dtype(n, x->dtype, b->dtype, "B"));
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    FR_TRY(check_bcast(n, "Scale", s->rank, s->dims, x->rank, x->dims));
    if (b) FR_TRY(check_bcast(n, "B", b->rank, b->dims, x->rank, x->dims));
    fr_infer_same(g, n, 0, 0);
    int64_t sd[FR_MAX_RANK];
    for (int k = 0; k < x->rank; k++) sd[k] = k < c.axis ? x->dims[k] : 1;
    fr_infer_set(g, n, 1, FR_F32, x->rank, sd);
    fr_infer_set(g, n, 2, FR_F32, x->rank, sd);
    return FR_OK;
}

/* Where Scale/B element for X element (row r, j) lives: row_off(r) + inner[j]. With
 * `ident`, inner[j] == j and no table is kept; with `shared`, row_off is 0 for every row. */
typedef struct bc_map {
    int64_t st[FR_MAX_RANK]; /* element strides broadcast to X's shape */
    int64_t *inner;          /* NULL when ident */
    int ident, shared;
} bc_map;

static fr_status bc_map_make(const fr_tensor *p, const fr_tensor *x, const fr_norm_cfg *c, bc_map *m)
{
    memset(m, 0, sizeof *m);
    fr_broadcast_strides(p->rank, p->dims, x->rank, x->dims, m->st);
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(x->rank, x->dims, cs);
    m->shared = 1;
    m->ident = 1;
    for (int k = 0; k < x->rank; k++) {
        if (k < c->axis && m->st[k] != 0 && x->dims[k] != 1) m->shared = 0;
        if (k >= c->axis && m->st[k] != cs[k] && x->dims[k] != 1) m->ident = 0;
    }
    if (m->ident) return FR_OK;
    m->inner = fr_malloc(sizeof(int64_t) * (size_t)(c->len ? c->len : 1), "norm broadcast map");
    if (!m->inner) return FR_ERR_OOM;
    int64_t idx[FR_MAX_RANK] = {0}, off = 0;
    for (int64_t j = 0; j < c->len; j++) {
        m->inner[j] = off;
        for (int k = x->rank - 1; k >= c->axis; k--) {
            off += m->st[k];
            if (++idx[k] < x->dims[k]) break;
            off -= m->st[k] * idx[k];
            idx[k] = 0;
        }
    }
    return FR_OK;
}

static int64_t bc_row_off(const bc_map *m, const fr_tensor *x, const fr_norm_cfg *c, int64_t r)
{
    if (m->shared) return 0;
    int64_t off = 0;
    for (int k = c->axis - 1; k >= 0; k--) {
        off += (r % x->dims[k]) * m->st[k];
        r /= x->dims[k];
    }
    return off;
}

static double getv(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

/* The statistics of the row at `base`, in double and in two passes (so the variance does not
 * cancel): *mean (0 for RMS) and the returned 1 / sqrt(var + epsilon). */
static double row_stats(const fr_tensor *x, int64_t base, const fr_norm_cfg *c, int rms, double *mean)
{
    const double dlen = (double)c->len;
    double m = 0.0, var = 0.0;
    if (!rms) {
        for (int64_t j = 0; j < c->len; j++) m += getv(x, base + j);
        m /= dlen;
    }
    for (int64_t j = 0; j < c->len; j++) {
        double d = getv(x, base + j) - m;
        var += d * d;
    }
    var /= dlen;
    *mean = m;
    return 1.0 / sqrt(var + (double)c->eps);
}

static fr_status check_out(const fr_node *n, const fr_tensor *o, fr_dtype dt, int rank,
                           const int64_t *dims, const char *what)
{
    if (!o) return FR_OK;
    int ok = o->dtype == dt && o->rank == rank;
    for (int k = 0; ok && k < rank; k++) ok = o->dims[k] == dims[k];
    if (!ok)
        return fr_node_error(n, FR_ERR_SHAPE, "output %s has the wrong dtype or shape (re-run "
                             "shape inference)", what);
    return FR_OK;
}

static fr_status norm_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    int rms = is_rms(n);
    if (ctx->n_in < 2 || ctx->n_in > (rms ? 2 : 3) || !ctx->in[0] || !ctx->in[1] || ctx->n_out < 1 ||
        ctx->n_out > (rms ? 1 : 3))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs", ctx->n_in, ctx->n_out);
    const fr_tensor *x = ctx->in[0], *s = ctx->in[1], *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    fr_tensor *y = ctx->out[0], *mo = ctx->n_out > 1 ? ctx->out[1] : NULL;
    fr_tensor *io = ctx->n_out > 2 ? ctx->out[2] : NULL;
    fr_norm_cfg c;
    FR_TRY(check_operands(n, x, s, b, &c));
    if (!y) return fr_node_error(n, FR_ERR_GRAPH, "output Y is missing");
    FR_TRY(check_out(n, y, x->dtype, x->rank, x->dims, "Y"));
    int64_t sd[FR_MAX_RANK];
    for (int k = 0; k < x->rank; k++) sd[k] = k < c.axis ? x->dims[k] : 1;
    FR_TRY(check_out(n, mo, FR_F32, x->rank, sd, "Mean"));
    FR_TRY(check_out(n, io, FR_F32, x->rank, sd, "InvStdDev"));

    bc_map ms, mb;
    FR_TRY(bc_map_make(s, x, &c, &ms));
    memset(&mb, 0, sizeof mb);
    if (b) {
        fr_status st = bc_map_make(b, x, &c, &mb);
        if (st != FR_OK) {
            free(ms.inner);
            return st;
        }
    }
    const int f32 = x->dtype == FR_F32;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double mean;
        const double inv = row_stats(x, base, &c, rms, &mean);
        if (mo) ((float *)mo->data)[r] = (float)mean;
        if (io) ((float *)io->data)[r] = (float)inv;
        const int64_t so = bc_row_off(&ms, x, &c, r), bo = b ? bc_row_off(&mb, x, &c, r) : 0;
        for (int64_t j = 0; j < c.len; j++) {
            double v = (getv(x, base + j) - mean) * inv * getv(s, so + (ms.ident ? j : ms.inner[j]));
            if (b) v += getv(b, bo + (mb.ident ? j : mb.inner[j]));
            if (f32)
                ((float *)y->data)[base + j] = (float)v;
            else
                ((double *)y->data)[base + j] = v;
        }
    }
    free(ms.inner);
    free(mb.inner);
    return FR_OK;
}

/* ---- backward ---- */

static int is_rms_grad(const fr_node *n) { return strcmp(n->op_type, "RMSNormGrad") == 0; }

static fr_status ng_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int rms = is_rms_grad(n);
    FR_TRY(fr_infer_require_inputs(g, n, 3, rms ? 3 : 4));
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    const fr_value *b = fr_node_in(g, n, 3);
    if (b) FR_TRY(fr_infer_require_inputs(g, n, 4, 4));
    if (n->n_outputs < 2 || n->n_outputs > (b ? 3 : 2))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected dX, dScale%s", n->n_outputs,
                             b ? " and dB" : " (dB only with input B)");
    FR_TRY(check_dtype(n, x->dtype, dy->dtype, "dY"));
    FR_TRY(check_dtype(n, x->dtype, s->dtype, "Scale"));
    if (b) FR_TRY(check_dtype(n, x->dtype, b->dtype, "B"));
    int same = dy->rank == x->rank;
    for (int k = 0; same && k < x->rank; k++) same = dy->dims[k] == x->dims[k];
    if (!same) {
        char s1[128], s2[128];
        return fr_node_error(n, FR_ERR_SHAPE, "dY %s must have X's shape %s",
                             fr_shape_str(dy->rank, dy->dims, s1, sizeof s1),
                             fr_shape_str(x->rank, x->dims, s2, sizeof s2));
    }
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    FR_TRY(check_bcast(n, "Scale", s->rank, s->dims, x->rank, x->dims));
    if (b) FR_TRY(check_bcast(n, "B", b->rank, b->dims, x->rank, x->dims));
    fr_infer_same(g, n, 0, 1);
    fr_infer_same(g, n, 1, 2);
    if (n->n_outputs > 2) fr_infer_same(g, n, 2, 3);
    return FR_OK;
}

static void putv(fr_tensor *t, int64_t i, double v)
{
    if (t->dtype == FR_F32)
        ((float *)t->data)[i] = (float)v;
    else
        ((double *)t->data)[i] = v;
}

static fr_status ng_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    int rms = is_rms_grad(n);
    if (ctx->n_in < 3 || ctx->n_in > (rms ? 3 : 4) || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] ||
        ctx->n_out < 2 || ctx->n_out > 3)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs", ctx->n_in, ctx->n_out);
    const fr_tensor *dy = ctx->in[0], *x = ctx->in[1], *s = ctx->in[2];
    const fr_tensor *b = ctx->n_in > 3 ? ctx->in[3] : NULL;
    fr_tensor *dx = ctx->out[0], *ds = ctx->out[1], *db = ctx->n_out > 2 ? ctx->out[2] : NULL;
    if (db && !b) return fr_node_error(n, FR_ERR_GRAPH, "output dB needs input B (for its shape)");
    FR_TRY(check_dtype(n, x->dtype, dy->dtype, "dY"));
    fr_norm_cfg c;
    FR_TRY(check_operands(n, x, s, b, &c));
    FR_TRY(check_out(n, dy, x->dtype, x->rank, x->dims, "dY (input)"));
    FR_TRY(check_out(n, dx, x->dtype, x->rank, x->dims, "dX"));
    FR_TRY(check_out(n, ds, x->dtype, s->rank, s->dims, "dScale"));
    if (db) FR_TRY(check_out(n, db, x->dtype, b->rank, b->dims, "dB"));

    const int64_t ns = fr_tensor_numel(s), nb = db ? fr_tensor_numel(b) : 0;
    bc_map ms, mb;
    memset(&mb, 0, sizeof mb);
    double *acc_s = fr_calloc((size_t)(ns ? ns : 1), sizeof(double), "norm grad dScale");
    double *acc_b = db ? fr_calloc((size_t)(nb ? nb : 1), sizeof(double), "norm grad dB") : NULL;
    fr_status st = (!acc_s || (db && !acc_b)) ? FR_ERR_OOM : FR_OK;
    if (st == FR_OK) st = bc_map_make(s, x, &c, &ms);
    else memset(&ms, 0, sizeof ms);
    if (st == FR_OK && db) st = bc_map_make(b, x, &c, &mb);
    if (st != FR_OK) goto done;

    const double dlen = (double)c.len;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        const int64_t so = bc_row_off(&ms, x, &c, r), bo = db ? bc_row_off(&mb, x, &c, r) : 0;
        double mean;
        const double inv = row_stats(x, base, &c, rms, &mean);
        /* row sums of g and g * xh; the parameter gradients on the way */
        double sg = 0.0, sgx = 0.0;
        for (int64_t j = 0; j < c.len; j++) {
            const double xh = (getv(x, base + j) - mean) * inv, gy = getv(dy, base + j);
            const int64_t si = so + (ms.ident ? j : ms.inner[j]);
            const double gj = gy * getv(s, si);
            sg += gj;
            sgx += gj * xh;
            acc_s[si] += gy * xh;
            if (db) acc_b[bo + (mb.ident ? j : mb.inner[j])] += gy;
        }
        const double mg = rms ? 0.0 : sg / dlen, mgx = sgx / dlen;
        if (dx)
            for (int64_t j = 0; j < c.len; j++) {
                const double xh = (getv(x, base + j) - mean) * inv;
                const double gj = getv(dy, base + j) * getv(s, so + (ms.ident ? j : ms.inner[j]));
                putv(dx, base + j, inv * (gj - mg - xh * mgx));
            }
    }
    if (ds)
        for (int64_t i = 0; i < ns; i++) putv(ds, i, acc_s[i]);
    if (db)
        for (int64_t i = 0; i < nb; i++) putv(db, i, acc_b[i]);
done:
    free(acc_s);
    free(acc_b);
    free(ms.inner);
    free(mb.inner);
    return st;
}

/* One fused backward node. Gradients into the optional Mean / InvStdDev outputs are refused:
 * exporters never consume them, and supporting them would need another kernel. */
static fr_status norm_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int rms = is_rms(n);
    for (int o = 1; o < n->n_outputs; o++)
        if (ctx->dout[o] >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "a gradient flows into output %d ('%s', %s), which has no "
                                 "gradient rule (only Y is differentiable)",
                                 o, g->values[n->outputs[o]].name, o == 1 ? "Mean" : "InvStdDev");
    if (ctx->dout[0] < 0) return FR_OK;
    const int has_b = !rms && n->n_inputs > 2 && n->inputs[2] >= 0;
    int64_t axis;
    float eps;
    FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
    FR_TRY(fr_node_attr_float(n, "epsilon", 1e-5f, &eps));
    int in[4] = {ctx->dout[0], n->inputs[0], n->inputs[1], has_b ? n->inputs[2] : -1};
    int out[3], nid;
    const int n_io = has_b ? 4 : 3;
    FR_TRY(fr_grad_node(ctx, rms ? "RMSNormGrad" : "LayerNormGrad", FR_DOMAIN_FP8RUN, n_io, in,
                        n_io - 1, out, &nid));
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
    FR_TRY(fr_node_set_attr_float(gn, "epsilon", eps));
    FR_TRY(fr_grad_finish(ctx, nid));
    for (int i = 0; i < n_io - 1; i++)
        if (ctx->need_din[i]) ctx->din[i] = out[i];
    return FR_OK;
}

const fr_op_def fr_ops_norm[] = {
    {"LayerNormalization", FR_DOMAIN_ONNX, 17, norm_infer, norm_cpu, norm_grad, 0},
    {"RMSNormalization", FR_DOMAIN_ONNX, 23, norm_infer, norm_cpu, norm_grad, 0},
    /* the same op for graphs below opset 23 (what passes/rmsnorm_fuse.c emits) */
    {"RMSNormalization", FR_DOMAIN_FP8RUN, 1, norm_infer, norm_cpu, norm_grad, 0},
    {"LayerNormGrad", FR_DOMAIN_FP8RUN, 1, ng_infer, ng_cpu, NULL, 0},
    {"RMSNormGrad", FR_DOMAIN_FP8RUN, 1, ng_infer, ng_cpu, NULL, 0},
    {0},
};
