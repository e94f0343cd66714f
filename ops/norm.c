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
 * allows. An empty normalized extent gives NaN statistics (0 / 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "op.h"

static int is_rms(const fr_node *n) { return strcmp(n->op_type, "RMSNormalization") == 0; }

typedef struct norm_cfg {
    int axis;
    float eps;
    int64_t rows, len; /* rows of `len` contiguous elements */
} norm_cfg;

/* Attributes and the row split of X's shape. */
static fr_status norm_config(const fr_node *n, int rank, const int64_t *dims, norm_cfg *c)
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
    FR_TRY(check_dtype(n, x->dtype, s->dtype, "Scale"));
    if (b) FR_TRY(check_dtype(n, x->dtype, b->dtype, "B"));
    norm_cfg c;
    FR_TRY(norm_config(n, x->rank, x->dims, &c));
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

static fr_status bc_map_make(const fr_tensor *p, const fr_tensor *x, const norm_cfg *c, bc_map *m)
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

static int64_t bc_row_off(const bc_map *m, const fr_tensor *x, const norm_cfg *c, int64_t r)
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
    FR_TRY(check_dtype(n, x->dtype, s->dtype, "Scale"));
    if (b) FR_TRY(check_dtype(n, x->dtype, b->dtype, "B"));
    norm_cfg c;
    FR_TRY(norm_config(n, x->rank, x->dims, &c));
    FR_TRY(check_bcast(n, "Scale", s->rank, s->dims, x->rank, x->dims));
    if (b) FR_TRY(check_bcast(n, "B", b->rank, b->dims, x->rank, x->dims));
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
    const double dlen = (double)c.len, eps = (double)c.eps;
    for (int64_t r = 0; r < c.rows; r++) {
        const int64_t base = r * c.len;
        double mean = 0.0, var = 0.0;
        if (!rms) {
            for (int64_t j = 0; j < c.len; j++) mean += getv(x, base + j);
            mean /= dlen;
        }
        for (int64_t j = 0; j < c.len; j++) {
            double d = getv(x, base + j) - mean;
            var += d * d;
        }
        var /= dlen;
        const double inv = 1.0 / sqrt(var + eps);
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

const fr_op_def fr_ops_norm[] = {
    {"LayerNormalization", FR_DOMAIN_ONNX, 17, norm_infer, norm_cpu, NULL, 0},
    {"RMSNormalization", FR_DOMAIN_ONNX, 23, norm_infer, norm_cpu, NULL, 0},
    {0},
};
