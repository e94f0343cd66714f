/* Layout op family, part 2: Slice, Trilu, Tile and the backward ops SliceGrad and TileGrad
 * (ai.fp8run; Transpose, Concat and Split: layout.c). Pure data movement for every dtype fp8run
 * holds; Slice and Tile run on the strided-copy engine of view_copy.c (a stride times a step
 * that may be negative, or 0 for a repeat). */
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/layout_plan.h"
#include "ops/op.h"

/* ---- helpers ---- */

static fr_tensor *kin(const fr_kernel_ctx *ctx, int i)
{
    return i < ctx->n_in ? ctx->in[i] : NULL;
}

/* Integer values of a small 1-D (or scalar) index tensor the kernel receives at run time
 * (the same data infer() read as a constant). */
static fr_status tensor_ints(const fr_node *n, const fr_tensor *t, const char *what, int max,
                             int *cnt, int64_t *vals)
{
    if (!fr_dtype_is_int(t->dtype) || t->rank > 1)
        return fr_node_error(n, FR_ERR_SHAPE, "%s must be a 1-D integer tensor, got %s rank %d",
                             what, fr_dtype_name(t->dtype), t->rank);
    int64_t c = fr_tensor_numel(t);
    if (c > max)
        return fr_node_error(n, FR_ERR_SHAPE, "%s has %lld entries, at most %d expected", what,
                             (long long)c, max);
    for (int64_t k = 0; k < c; k++) vals[k] = fr_tensor_get_i64(t, k);
    *cnt = (int)c;
    return FR_OK;
}

/* Infer-side twin of tensor_ints: a constant input copied into a fixed array. */
static fr_status const_ints(fr_graph *g, const fr_node *n, int i, const char *what, int max,
                            int *cnt, int64_t *vals)
{
    int64_t *v;
    FR_TRY(fr_infer_const_ints(g, n, i, cnt, &v));
    fr_status st = FR_OK;
    if (*cnt > max)
        st = fr_node_error(n, FR_ERR_SHAPE, "%s has %d entries, at most %d expected", what, *cnt,
                           max);
    else if (*cnt)
        memcpy(vals, v, sizeof(int64_t) * (size_t)*cnt);
    free(v);
    return st;
}
/* ---- Slice ---- */

/* Slice's starts/ends/axes/steps: attributes before opset 10, inputs 1..4 after. In the
 * kernel (g == NULL) the inputs come from the tensors. n_axes/n_steps = -1 when absent. */
typedef struct slice_args {
    int cnt, n_ends, n_axes, n_steps;
    int64_t starts[FR_MAX_RANK], ends[FR_MAX_RANK], axes[FR_MAX_RANK], steps[FR_MAX_RANK];
} slice_args;

static fr_status slice_args_get(fr_graph *g, const fr_kernel_ctx *ctx, const fr_node *n,
                                int64_t opset, slice_args *s)
{
    if (opset < 10) {
        FR_TRY(fr_slice_attr(n, "starts", 1, &s->cnt, s->starts));
        FR_TRY(fr_slice_attr(n, "ends", 1, &s->n_ends, s->ends));
        FR_TRY(fr_slice_attr(n, "axes", 0, &s->n_axes, s->axes));
        s->n_steps = -1;
        return FR_OK;
    }
    static const char *names[4] = {"starts", "ends", "axes", "steps"};
    int *cnts[4] = {&s->cnt, &s->n_ends, &s->n_axes, &s->n_steps};
    int64_t *vals[4] = {s->starts, s->ends, s->axes, s->steps};
    for (int i = 0; i < 4; i++) {
        *cnts[i] = -1;
        if (g) {
            if (fr_node_in(g, n, i + 1))
                FR_TRY(const_ints(g, n, i + 1, names[i], FR_MAX_RANK, cnts[i], vals[i]));
        } else if (kin(ctx, i + 1)) {
            FR_TRY(tensor_ints(n, kin(ctx, i + 1), names[i], FR_MAX_RANK, cnts[i], vals[i]));
        }
        if (i < 2 && *cnts[i] < 0)
            return fr_node_error(n, FR_ERR_GRAPH, "input '%s' is missing", names[i]);
    }
    return FR_OK;
}

static fr_status slice_plan_get(fr_graph *g, const fr_kernel_ctx *ctx, const fr_node *n,
                                int64_t opset, int rank, const int64_t *dims, fr_slice_plan *p)
{
    slice_args s;
    FR_TRY(slice_args_get(g, ctx, n, opset, &s));
    return fr_slice_resolve(n, rank, dims, s.cnt, s.starts, s.n_ends, s.ends, s.n_axes, s.axes,
                            s.n_steps, s.steps, p);
}

static fr_status slice_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int64_t opset = fr_graph_opset(g, n->domain);
    FR_TRY(fr_infer_require_inputs(g, n, opset >= 10 ? 3 : 1, opset >= 10 ? 5 : 1));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    fr_slice_plan p;
    FR_TRY(slice_plan_get(g, NULL, n, opset, x->rank, x->dims, &p));
    fr_infer_set(g, n, 0, x->dtype, x->rank, p.len);
    return FR_OK;
}

static fr_status slice_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = kin(ctx, 0);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    fr_slice_plan p;
    FR_TRY(slice_plan_get(NULL, ctx, ctx->node, ctx->opset, x->rank, x->dims, &p));
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, x->rank, p.len));
    fr_view v;
    fr_view_slice(&v, x->rank, x->dims, p.start, p.step, p.len);
    fr_view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
    return FR_OK;
}

/* ---- Trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle of the last two
 * dims, zero the rest; k is an optional int64 scalar input read at run time ---- */

static fr_status trilu_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 2));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    if (x->rank < 2)
        return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 2, got %d", x->rank);
    const fr_value *k = fr_node_in(g, n, 1);
    if (k && (!fr_dtype_is_int(k->dtype) || (k->rank > 1 || (k->rank == 1 && k->dims[0] != 1))))
        return fr_node_error(n, FR_ERR_SHAPE, "k must be an integer scalar, got %s rank %d",
                             fr_dtype_name(k->dtype), k->rank);
    int64_t upper;
    FR_TRY(fr_node_attr_int(n, "upper", 1, &upper));
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status trilu_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = kin(ctx, 0), *kt = kin(ctx, 1);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    if (x->rank < 2)
        return fr_node_error(ctx->node, FR_ERR_SHAPE, "input must have rank >= 2, got %d", x->rank);
    int64_t upper, k = 0;
    FR_TRY(fr_node_attr_int(ctx->node, "upper", 1, &upper));
    if (kt) {
        if (!fr_dtype_is_int(kt->dtype) || fr_tensor_numel(kt) != 1)
            return fr_node_error(ctx->node, FR_ERR_SHAPE, "k must be an integer scalar");
        k = fr_tensor_get_i64(kt, 0);
    }
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, x->rank, x->dims));
    if (!y->nbytes) return FR_OK;
    size_t es = fr_dtype_size(x->dtype);
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    int64_t mats = fr_tensor_numel(x) / (R * C);
    const char *src = x->data;
    char *dst = y->data;
    /* k is clamped to [-R-1, C+1] first: beyond that every row keeps all or nothing, and
     * i + k cannot overflow */
    int64_t kc = k < -R - 1 ? -R - 1 : k > C + 1 ? C + 1 : k;
    size_t row = (size_t)C * es;
    for (int64_t m = 0; m < mats; m++) {
        for (int64_t i = 0; i < R; i++) {
            /* keep columns [lo, hi) of row i; zero bytes are 0 in every dtype (+0.0, false) */
            int64_t t = i + kc, lo = 0, hi = C;
            if (upper)
                lo = t < 0 ? 0 : t > C ? C : t;
            else
                hi = t + 1 < 0 ? 0 : t + 1 > C ? C : t + 1;
            if (lo) memset(dst, 0, (size_t)lo * es);
            if (hi > lo)
                memcpy(dst + (size_t)lo * es, src + (size_t)lo * es, (size_t)(hi - lo) * es);
            if (hi < C) memset(dst + (size_t)hi * es, 0, (size_t)(C - hi) * es);
            src += row;
            dst += row;
        }
    }
    return FR_OK;
}

/* ---- Tile: output dim k = dims[k] * repeats[k] ---- */

static fr_status tile_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    int cnt;
    int64_t reps[FR_MAX_RANK], dims[FR_MAX_RANK];
    FR_TRY(const_ints(g, n, 1, "repeats", FR_MAX_RANK, &cnt, reps));
    FR_TRY(fr_tile_dims(n, x->rank, x->dims, cnt, reps, dims));
    fr_infer_set(g, n, 0, x->dtype, x->rank, dims);
    return FR_OK;
}

static fr_status tile_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = kin(ctx, 0), *rt = kin(ctx, 1);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x || !rt) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    int cnt;
    int64_t reps[FR_MAX_RANK], dims[FR_MAX_RANK];
    FR_TRY(tensor_ints(ctx->node, rt, "repeats", FR_MAX_RANK, &cnt, reps));
    FR_TRY(fr_tile_dims(ctx->node, x->rank, x->dims, cnt, reps, dims));
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, x->rank, dims));
    fr_view v;
    fr_view_tile(&v, x->rank, x->dims, reps);
    fr_view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
    return FR_OK;
}

/* ==== backward ====
 *
 * Transpose, Concat, Split and Trilu differentiate into the same standard ops (inverse
 * permutation, Split, Concat, Trilu), which every backend already has. Slice and Tile need
 * scatters that no ONNX op expresses without index tensors, so they get fp8run ops:
 *   SliceGrad(dy) {shape, starts, steps}: zeros of `shape` with dy written at
 *     starts[k] + i * steps[k] along every dim k (the resolved forward plan: no clamping or
 *     negative starts left, steps may be negative);
 *   TileGrad(dy) {shape}: the sum of the tiles of dy, each of `shape`, accumulated in double
 *     in the order of dy so results are reproducible bit for bit. */

/* ---- SliceGrad ---- */

static fr_status slice_grad_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *dy = fr_node_in(g, n, 0);
    int rank;
    const int64_t *shape, *starts, *steps;
    FR_TRY(fr_slice_grad_check(n, dy->dtype, dy->rank, dy->dims, &rank, &shape, &starts, &steps));
    fr_infer_set(g, n, 0, dy->dtype, rank, shape);
    return FR_OK;
}

/* Zero the output, then write dy through the slice's view (no two dy elements share a
 * destination, so this is a plain strided store). */
static fr_status slice_grad_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *dy = kin(ctx, 0);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!dy) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    int rank;
    const int64_t *shape, *starts, *steps;
    FR_TRY(fr_slice_grad_check(ctx->node, dy->dtype, dy->rank, dy->dims, &rank, &shape, &starts,
                               &steps));
    FR_TRY(fr_check_out(ctx->node, y, dy->dtype, rank, shape));
    if (y->nbytes) memset(y->data, 0, y->nbytes);
    int64_t n = fr_tensor_numel(dy);
    if (!n) return FR_OK;
    int64_t cs[FR_MAX_RANK], st[FR_MAX_RANK], idx[FR_MAX_RANK] = {0}, off = 0;
    fr_contig_strides(rank, shape, cs);
    for (int k = 0; k < rank; k++) {
        st[k] = cs[k] * steps[k];
        off += cs[k] * starts[k];
    }
    int64_t len = rank ? dy->dims[rank - 1] : 1, s = rank ? st[rank - 1] : 0;
    size_t es = fr_dtype_size(dy->dtype);
    for (int64_t i = 0; i < n; i += len) {
        if (es == 8) {
            const double *src = (const double *)dy->data + i;
            double *dst = (double *)y->data + off;
            for (int64_t j = 0; j < len; j++) dst[j * s] = src[j];
        } else {
            const float *src = (const float *)dy->data + i;
            float *dst = (float *)y->data + off;
            for (int64_t j = 0; j < len; j++) dst[j * s] = src[j];
        }
        for (int k = rank - 2; k >= 0; k--) {
            off += st[k];
            if (++idx[k] < dy->dims[k]) break;
            off -= st[k] * dy->dims[k];
            idx[k] = 0;
        }
    }
    return FR_OK;
}

/* ---- TileGrad ---- */

static fr_status tile_grad_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *dy = fr_node_in(g, n, 0);
    int rank;
    const int64_t *shape;
    FR_TRY(fr_tile_grad_check(n, dy->dtype, dy->rank, dy->dims, &rank, &shape));
    fr_infer_set(g, n, 0, dy->dtype, rank, shape);
    return FR_OK;
}

static fr_status tile_grad_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *dy = kin(ctx, 0);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!dy) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    int rank;
    const int64_t *shape;
    FR_TRY(fr_tile_grad_check(ctx->node, dy->dtype, dy->rank, dy->dims, &rank, &shape));
    FR_TRY(fr_check_out(ctx->node, y, dy->dtype, rank, shape));
    int64_t ny = fr_tensor_numel(y), n = fr_tensor_numel(dy);
    if (!ny) return FR_OK;
    double *acc = fr_calloc((size_t)ny, sizeof(double), "TileGrad accumulator");
    if (!acc) return FR_ERR_OOM;
    int64_t cs[FR_MAX_RANK], idx[FR_MAX_RANK] = {0}, m[FR_MAX_RANK] = {0}, off = 0;
    fr_contig_strides(rank, shape, cs);
    int f64 = dy->dtype == FR_F64;
    /* walk dy in order; m[k] = idx[k] mod shape[k] is the position inside the tile, and it
     * wraps to 0 together with idx[k] since dy's dims are multiples of shape's */
    for (int64_t i = 0; i < n; i++) {
        acc[off] += f64 ? ((const double *)dy->data)[i] : ((const float *)dy->data)[i];
        for (int k = rank - 1; k >= 0; k--) {
            off += cs[k];
            if (++m[k] == shape[k]) {
                m[k] = 0;
                off -= cs[k] * shape[k];
            }
            if (++idx[k] < dy->dims[k]) break;
            idx[k] = 0;
        }
    }
    fr_store_acc(y, acc, ny);
    free(acc);
    return FR_OK;
}

/* ---- gradient rules ---- */

static int same_shape_v(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

/* Slice: dy placed into zeros of the input's shape (SliceGrad with the resolved plan). */
static fr_status slice_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const fr_value *x = &g->values[n->inputs[0]];
    int rank = x->rank, nid;
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    fr_slice_plan p;
    FR_TRY(slice_plan_get(g, NULL, n, ctx->opset, rank, dims, &p));
    int whole = 1; /* the slice takes everything in order: dy is the gradient as it is */
    for (int k = 0; k < rank; k++)
        whole = whole && p.len[k] == dims[k] && (p.step[k] == 1 || dims[k] <= 1);
    if (whole) {
        ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    FR_TRY(fr_grad_node(ctx, "SliceGrad", FR_DOMAIN_FP8RUN, 1, &ctx->dout[0], 1, &ctx->din[0],
                        &nid));
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_ints(gn, "shape", rank, dims));
    FR_TRY(fr_node_set_attr_ints(gn, "starts", rank, p.start));
    FR_TRY(fr_node_set_attr_ints(gn, "steps", rank, p.step));
    return fr_grad_finish(ctx, nid);
}

/* Trilu is linear and masks elementwise: the same Trilu (same k, same 'upper') on dy. */
static fr_status trilu_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    int64_t upper;
    FR_TRY(fr_node_attr_int(n, "upper", 1, &upper));
    int in[2] = {ctx->dout[0], n->n_inputs > 1 ? n->inputs[1] : -1}, nid;
    FR_TRY(fr_grad_node(ctx, "Trilu", FR_DOMAIN_ONNX, in[1] >= 0 ? 2 : 1, in, 1, &ctx->din[0],
                        &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "upper", upper));
    return fr_grad_finish(ctx, nid);
}

/* Tile: every tile's gradient adds into the input (TileGrad). */
static fr_status tile_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const fr_value *x = &g->values[n->inputs[0]];
    if (same_shape_v(x, &g->values[ctx->dout[0]])) { /* all repeats 1 */
        ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    int rank = x->rank, nid;
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    FR_TRY(fr_grad_node(ctx, "TileGrad", FR_DOMAIN_FP8RUN, 1, &ctx->dout[0], 1, &ctx->din[0],
                        &nid));
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "shape", rank, dims));
    return fr_grad_finish(ctx, nid);
}

/* ---- the table ---- */

const fr_op_def fr_ops_slice_tile[] = {
    {"Slice", FR_DOMAIN_ONNX, 1, slice_infer, slice_cpu, slice_grad, 0},
    {"Trilu", FR_DOMAIN_ONNX, 14, trilu_infer, trilu_cpu, trilu_grad, 0},
    {"Tile", FR_DOMAIN_ONNX, 6, tile_infer, tile_cpu, tile_grad, 0},
    {"SliceGrad", FR_DOMAIN_FP8RUN, 1, slice_grad_infer, slice_grad_cpu, NULL, 0},
    {"TileGrad", FR_DOMAIN_FP8RUN, 1, tile_grad_infer, tile_grad_cpu, NULL, 0},
    {0},
};
