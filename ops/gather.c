/* Gather op family: Gather, GatherElements, GatherND, and their backward scatter-adds
 * GatherGrad, GatherElementsGrad, GatherNDGrad (ai.fp8run; see the section below).
 *
 * Pure data movement for every dtype fp8run holds (elements copied by fr_dtype_size).
 * Indices are int64 or int32 of any rank; a negative index counts from the end of its axis.
 * An index outside [-n, n) is FR_ERR_RANGE naming the node, the index, its position in the
 * indices tensor and the axis: token ids past the vocabulary are a common user error and
 * must never read out of bounds. Indices are checked before anything is written. */
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/gather_plan.h"
#include "ops/op.h"

/* ---- helpers ---- */

static int64_t index_at(const fr_tensor *idx, int64_t j)
{
    return idx->dtype == FR_I64 ? ((const int64_t *)idx->data)[j] : ((const int32_t *)idx->data)[j];
}

/* The out-of-range error, with the flat position j turned into coordinates of `idx`. */
static fr_status range_error(const fr_node *n, const fr_tensor *idx, int64_t j, int64_t v, int axis,
                             int64_t size)
{
    int64_t pos[FR_MAX_RANK];
    for (int k = idx->rank - 1; k >= 0; k--) {
        pos[k] = idx->dims[k] ? j % idx->dims[k] : 0;
        j = idx->dims[k] ? j / idx->dims[k] : 0;
    }
    char ps[160];
    return fr_node_error(
        n, FR_ERR_RANGE, "index %lld at position %s is out of range for axis %d of size %lld",
        (long long)v, fr_shape_str(idx->rank, pos, ps, sizeof ps), axis, (long long)size);
}

/* Every index in [-size, size). */
static fr_status check_indices(const fr_node *n, const fr_tensor *idx, int axis, int64_t size)
{
    int64_t cnt = fr_tensor_numel(idx);
    for (int64_t j = 0; j < cnt; j++) {
        int64_t v = index_at(idx, j);
        if (v < -size || v >= size) return range_error(n, idx, j, v, axis, size);
    }
    return FR_OK;
}

/* ---- Gather: out = data.shape[:axis] + indices.shape + data.shape[axis+1:] ---- */

static fr_status gather_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *iv = fr_node_in(g, n, 1);
    FR_TRY(fr_holdable(n, "data", x->dtype));
    FR_TRY(fr_gather_index_dtype_ok(n, iv->dtype));
    int axis, rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_shape(n, x->rank, x->dims, iv->rank, iv->dims, axis, &rank, dims));
    /* constant indices (embedding row picks, Shape gathers) fail here, before any run */
    if (iv->constant) FR_TRY(check_indices(n, iv->constant, axis, x->dims[axis]));
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

/* The data, indices and output of the three gather kernels; the indices' dtype checked. */
static fr_status gather_io(const fr_kernel_ctx *ctx, const fr_tensor **x, const fr_tensor **idx, fr_tensor **y)
{
    *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    *idx = ctx->n_in > 1 ? ctx->in[1] : NULL;
    *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!*x || !*idx) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    return fr_gather_index_dtype_ok(ctx->node, (*idx)->dtype);
}

static fr_status gather_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    FR_TRY(gather_io(ctx, &x, &idx, &y));
    int axis, rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_shape(n, x->rank, x->dims, idx->rank, idx->dims, axis, &rank, dims));
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, rank, dims));
    int64_t size = x->dims[axis];
    FR_TRY(check_indices(n, idx, axis, size));
    if (!y->nbytes) return FR_OK;
    int64_t outer = 1, inner = 1, cnt = fr_tensor_numel(idx);
    for (int k = 0; k < axis; k++) outer *= x->dims[k];
    for (int k = axis + 1; k < x->rank; k++) inner *= x->dims[k];
    size_t row = (size_t)inner * fr_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++) {
        const char *base = src + (size_t)(o * size) * row;
        for (int64_t j = 0; j < cnt; j++) {
            int64_t v = index_at(idx, j);
            if (v < 0) v += size;
            memcpy(dst, base + (size_t)v * row, row);
            dst += row;
        }
    }
    return FR_OK;
}

/* ---- GatherElements: out[..., i_axis, ...] = data[..., indices[...], ...]; out has the
 * indices' shape, which may be smaller than data's outside the axis ---- */

static fr_status ge_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *iv = fr_node_in(g, n, 1);
    FR_TRY(fr_holdable(n, "data", x->dtype));
    FR_TRY(fr_gather_index_dtype_ok(n, iv->dtype));
    int axis;
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_elements_shapes(n, x->rank, x->dims, iv->rank, iv->dims, axis));
    if (iv->constant) FR_TRY(check_indices(n, iv->constant, axis, x->dims[axis]));
    fr_infer_set(g, n, 0, x->dtype, iv->rank, iv->dims);
    return FR_OK;
}

static fr_status ge_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    FR_TRY(gather_io(ctx, &x, &idx, &y));
    int axis;
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_elements_shapes(n, x->rank, x->dims, idx->rank, idx->dims, axis));
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, idx->rank, idx->dims));
    int64_t size = x->dims[axis];
    FR_TRY(check_indices(n, idx, axis, size));
    int64_t cnt = fr_tensor_numel(idx);
    if (!cnt) return FR_OK;
    size_t es = fr_dtype_size(x->dtype);
    int64_t ds[FR_MAX_RANK], c[FR_MAX_RANK] = {0},
                             off = 0; /* off: source offset without the axis */
    fr_contig_strides(x->rank, x->dims, ds);
    const char *src = x->data;
    char *dst = y->data;
    for (int64_t j = 0; j < cnt; j++) {
        int64_t v = index_at(idx, j);
        if (v < 0) v += size;
        memcpy(dst + (size_t)j * es, src + (size_t)(off + v * ds[axis]) * es, es);
        for (int k = idx->rank - 1; k >= 0; k--) {
            if (k != axis) off += ds[k];
            if (++c[k] < idx->dims[k]) break;
            if (k != axis) off -= ds[k] * idx->dims[k];
            c[k] = 0;
        }
    }
    return FR_OK;
}

/* ---- GatherND (batch_dims from opset 12): the last dim of indices (m) addresses the m dims
 * of data after the b batch dims; out = indices.shape[:-1] + data.shape[b+m:] ---- */

static fr_status gnd_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0), *iv = fr_node_in(g, n, 1);
    FR_TRY(fr_holdable(n, "data", x->dtype));
    FR_TRY(fr_gather_index_dtype_ok(n, iv->dtype));
    int64_t b;
    FR_TRY(fr_gather_nd_batch_dims(n, fr_graph_opset(g, n->domain), &b));
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_nd_shape(n, b, x->rank, x->dims, iv->rank, iv->dims, &rank, dims));
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

static fr_status gnd_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    FR_TRY(gather_io(ctx, &x, &idx, &y));
    int64_t b;
    FR_TRY(fr_gather_nd_batch_dims(n, ctx->opset, &b));
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_nd_shape(n, b, x->rank, x->dims, idx->rank, idx->dims, &rank, dims));
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, rank, dims));
    int64_t m = idx->dims[idx->rank - 1], cnt = fr_tensor_numel(idx);
    /* check every tuple entry against the data dim it addresses */
    for (int64_t j = 0; j < cnt; j++) {
        int64_t v = index_at(idx, j), size = x->dims[b + j % m];
        if (v < -size || v >= size) return range_error(n, idx, j, v, (int)(b + j % m), size);
    }
    if (!y->nbytes) return FR_OK;
    int64_t ds[FR_MAX_RANK], batches = 1, per_batch = 1, inner = 1;
    fr_contig_strides(x->rank, x->dims, ds);
    for (int k = 0; k < b; k++) batches *= x->dims[k];
    for (int k = (int)b; k < idx->rank - 1; k++) per_batch *= idx->dims[k];
    for (int k = (int)(b + m); k < x->rank; k++) inner *= x->dims[k];
    size_t es = fr_dtype_size(x->dtype), row = (size_t)inner * es;
    int64_t batch_stride = b > 0 ? ds[b - 1] : 0;
    const char *src = x->data;
    char *dst = y->data;
    const int64_t *i64 = idx->data;
    const int32_t *i32 = idx->data;
    for (int64_t bi = 0; bi < batches; bi++) {
        for (int64_t t = 0; t < per_batch; t++) {
            int64_t base = (bi * per_batch + t) * m, off = bi * batch_stride;
            for (int64_t l = 0; l < m; l++) {
                int64_t v = idx->dtype == FR_I64 ? i64[base + l] : i32[base + l];
                if (v < 0) v += x->dims[b + l];
                off += v * ds[b + l];
            }
            memcpy(dst, src + (size_t)off * es, row);
            dst += row;
        }
    }
    return FR_OK;
}

/* ==== backward: scatter-add ops (ai.fp8run) ====
 *
 * GatherGrad(dy, indices) {axis, shape}, GatherElementsGrad(dy, indices) {axis, shape} and
 * GatherNDGrad(dy, indices) {batch_dims, shape} give zeros of `shape` (the forward data's
 * shape) with every element of dy added at the position the forward op read it from.
 * Repeated indices accumulate (the embedding gradient). `shape` is an attribute rather than
 * an input so the backward pass does not keep the forward data alive.
 *
 * Accumulation is deterministic: the rows of dy that land on one destination row are summed
 * in double in their order in dy, then rounded once. The (destination, source) row pairs are
 * sorted instead of accumulating into a double copy of the whole output, so the scratch
 * memory is bounded by dy, not by the (vocabulary-sized) data. */

typedef struct row_ref {
    int64_t dst, src; /* row numbers, in rows of `inner` elements */
} row_ref;

static int row_cmp(const void *a, const void *b)
{
    const row_ref *x = a, *y = b;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    return (x->src > y->src) - (x->src < y->src);
}

static inline double ld(const void *p, fr_dtype dt, int64_t i)
{
    return dt == FR_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* out = 0, then out row refs[j].dst += dy row refs[j].src for every j. Sorting by (dst, src)
 * makes the order of the additions independent of qsort's. */
static fr_status scatter_rows(fr_tensor *out, const fr_tensor *dy, row_ref *refs, int64_t cnt,
                              int64_t inner)
{
    if (out->nbytes) memset(out->data, 0, out->nbytes);
    if (!cnt || !inner) return FR_OK;
    qsort(refs, (size_t)cnt, sizeof *refs, row_cmp);
    double *acc = fr_malloc(sizeof(double) * (size_t)inner, "scatter-add row");
    if (!acc) return FR_ERR_OOM;
    fr_dtype dt = dy->dtype;
    for (int64_t a = 0; a < cnt;) {
        int64_t b = a + 1;
        while (b < cnt && refs[b].dst == refs[a].dst) b++;
        const int64_t s0 = refs[a].src * inner, d0 = refs[a].dst * inner;
        /* start from the first row (not 0.0) so a lone -0.0 keeps its sign */
        for (int64_t e = 0; e < inner; e++) acc[e] = ld(dy->data, dt, s0 + e);
        for (int64_t j = a + 1; j < b; j++) {
            const int64_t s = refs[j].src * inner;
            for (int64_t e = 0; e < inner; e++) acc[e] += ld(dy->data, dt, s + e);
        }
        if (dt == FR_F64)
            memcpy((double *)out->data + d0, acc, sizeof(double) * (size_t)inner);
        else
            for (int64_t e = 0; e < inner; e++) ((float *)out->data)[d0 + e] = (float)acc[e];
        a = b;
    }
    free(acc);
    return FR_OK;
}

static fr_status scatter_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *dy = fr_node_in(g, n, 0), *iv = fr_node_in(g, n, 1);
    int rank, a;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_scatter_check(n, fr_gather_scatter_kind(n), dy->dtype, dy->rank, dy->dims,
                                   iv->dtype, iv->rank, iv->dims, &rank, dims, &a));
    fr_infer_set(g, n, 0, dy->dtype, rank, dims);
    return FR_OK;
}

static fr_status scatter_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *dy = ctx->n_in > 0 ? ctx->in[0] : NULL,
                    *idx = ctx->n_in > 1 ? ctx->in[1] : NULL;
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!dy || !idx) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    int kind = fr_gather_scatter_kind(n), rank, a;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_scatter_check(n, kind, dy->dtype, dy->rank, dy->dims, idx->dtype, idx->rank,
                                   idx->dims, &rank, dims, &a));
    FR_TRY(fr_check_out(ctx->node, y, dy->dtype, rank, dims));
    int64_t cnt = fr_tensor_numel(idx), ds[FR_MAX_RANK], inner = 1, rows = 0;
    fr_contig_strides(rank, dims, ds);
    /* indices checked again: a bad one must never write out of bounds */
    if (kind == 2) {
        int64_t m = idx->dims[idx->rank - 1];
        for (int64_t j = 0; j < cnt; j++) {
            int64_t v = index_at(idx, j), size = dims[a + j % m];
            if (v < -size || v >= size) return range_error(n, idx, j, v, (int)(a + j % m), size);
        }
    } else {
        FR_TRY(check_indices(n, idx, a, dims[a]));
    }
    int64_t outer = 1;
    if (kind == 0) {
        for (int k = 0; k < a; k++) outer *= dims[k];
        for (int k = a + 1; k < rank; k++) inner *= dims[k];
        rows = outer * cnt;
    } else if (kind == 1) {
        rows = cnt;
    } else {
        int64_t m = idx->dims[idx->rank - 1];
        for (int k = a + (int)m; k < rank; k++) inner *= dims[k];
        rows = m ? cnt / m : 0;
    }
    row_ref *refs = fr_malloc(sizeof *refs * (size_t)(rows ? rows : 1), "scatter-add rows");
    if (!refs) return FR_ERR_OOM;
    if (kind == 0) {
        int64_t size = dims[a];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < cnt; j++) {
                int64_t v = index_at(idx, j);
                if (v < 0) v += size;
                refs[o * cnt + j] = (row_ref){o * size + v, o * cnt + j};
            }
    } else if (kind == 1) {
        /* walk indices' coordinates; off is the data offset without the axis term */
        int64_t c[FR_MAX_RANK] = {0}, off = 0, size = dims[a];
        for (int64_t j = 0; j < cnt; j++) {
            int64_t v = index_at(idx, j);
            if (v < 0) v += size;
            refs[j] = (row_ref){off + v * ds[a], j};
            for (int k = idx->rank - 1; k >= 0; k--) {
                if (k != a) off += ds[k];
                if (++c[k] < idx->dims[k]) break;
                if (k != a) off -= ds[k] * idx->dims[k];
                c[k] = 0;
            }
        }
    } else {
        /* the forward kernel's addressing; every offset is a multiple of inner */
        int64_t m = idx->dims[idx->rank - 1], batch_stride = a > 0 ? ds[a - 1] : 0;
        int64_t per_batch = 1;
        for (int k = a; k < idx->rank - 1; k++) per_batch *= idx->dims[k];
        for (int64_t r = 0; r < rows; r++) {
            int64_t bi = per_batch ? r / per_batch : 0, off = bi * batch_stride;
            for (int64_t l = 0; l < m; l++) {
                int64_t v = index_at(idx, r * m + l);
                if (v < 0) v += dims[a + l];
                off += v * ds[a + l];
            }
            refs[r] = (row_ref){inner ? off / inner : 0, r};
        }
    }
    fr_status st = scatter_rows(y, dy, refs, rows, inner);
    free(refs);
    return st;
}

/* ---- gradient rules: the data gets the scatter-add of dy; indices have none ---- */

static fr_status gather_family_grad(fr_grad_ctx *ctx, const char *grad_op)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    int in[2] = {ctx->dout[0], n->inputs[1]}, x = n->inputs[0], nid;
    int64_t b = 0, axis = 0;
    if (strcmp(n->op_type, "GatherND") == 0)
        FR_TRY(fr_gather_nd_batch_dims(n, ctx->opset, &b));
    else
        FR_TRY(fr_node_attr_int(n, "axis", 0, &axis));
    FR_TRY(fr_grad_node(ctx, grad_op, FR_DOMAIN_FP8RUN, 2, in, 1, &ctx->din[0], &nid));
    fr_node *gn = &g->nodes[nid];
    const fr_value *xv = &g->values[x];
    FR_TRY(fr_node_set_attr_ints(gn, "shape", xv->rank, xv->dims));
    if (strcmp(grad_op, "GatherNDGrad") == 0)
        FR_TRY(fr_node_set_attr_int(gn, "batch_dims", b));
    else
        FR_TRY(fr_node_set_attr_int(gn, "axis", axis));
    return fr_grad_finish(ctx, nid);
}

static fr_status gather_grad(fr_grad_ctx *ctx) { return gather_family_grad(ctx, "GatherGrad"); }
static fr_status ge_grad(fr_grad_ctx *ctx) { return gather_family_grad(ctx, "GatherElementsGrad"); }
static fr_status gnd_grad(fr_grad_ctx *ctx) { return gather_family_grad(ctx, "GatherNDGrad"); }

/* ---- the table ---- */

const fr_op_def fr_ops_gather[] = {
    {"Gather", FR_DOMAIN_ONNX, 1, gather_infer, gather_cpu, gather_grad, 0},
    {"GatherElements", FR_DOMAIN_ONNX, 11, ge_infer, ge_cpu, ge_grad, 0},
    {"GatherND", FR_DOMAIN_ONNX, 11, gnd_infer, gnd_cpu, gnd_grad, 0},
    {"GatherGrad", FR_DOMAIN_FP8RUN, 1, scatter_infer, scatter_cpu, NULL, 0},
    {"GatherElementsGrad", FR_DOMAIN_FP8RUN, 1, scatter_infer, scatter_cpu, NULL, 0},
    {"GatherNDGrad", FR_DOMAIN_FP8RUN, 1, scatter_infer, scatter_cpu, NULL, 0},
    {0},
};
