/* Layout op family: Transpose, Concat, Split, Slice, Trilu, Tile, and the backward ops
 * SliceGrad and TileGrad (ai.fp8run; see "backward" below).
 *
 * All are pure data movement and work for every dtype fp8run holds, copying elements by
 * fr_dtype_size. Transpose, Slice and Tile are one strided-copy engine: the output is
 * contiguous and each output dim walks the input with some stride (a permuted stride, a
 * stride times a step that may be negative, or 0 for a repeat). The engine drops size-1 dims
 * and merges dims that stay contiguous in the input, so perm [0,2,1,3] (attention heads)
 * becomes memcpy of rows, and a swap of the last two dims becomes a cache-blocked 2-D
 * transpose. */
#include <stdlib.h>
#include <string.h>

#include "../passes/autodiff.h"
#include "layout_plan.h"
#include "op.h"

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

/* ---- the strided-copy engine (the view and its planning: layout_plan.h) ---- */

/* dst[i] = src[i * st] for n elements of es bytes. */
static void copy_run(char *dst, const char *src, int64_t n, int64_t st, size_t es)
{
    if (st == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
#define RUN(T)                                                                                     \
    do {                                                                                           \
        T *d_ = (T *)(void *)dst;                                                                  \
        const T *s_ = (const T *)(const void *)src;                                                \
        for (int64_t i = 0; i < n; i++) d_[i] = s_[i * st];                                        \
    } while (0)
    switch (es) {
    case 1: RUN(uint8_t); break;
    case 2: RUN(uint16_t); break;
    case 4: RUN(uint32_t); break;
    case 8: RUN(uint64_t); break;
    default:
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + (size_t)i * es, src + i * st * (int64_t)es, es);
    }
#undef RUN
}

/* dst[r][c] = src[r + c * sc] for an R x C block: a transpose, walked in 8 x 8 tiles. With
 * power-of-two row lengths the lines of larger tiles fall into the same cache set and evict
 * each other (measured on 1024 x 1024 float32: 32 x 32 tiles 1.3 GB/s, 8 x 8 tiles 13 GB/s;
 * other sizes and a two-level blocking were no faster). */
static void transpose_2d(char *dst, const char *src, int64_t R, int64_t C, int64_t sc, size_t es)
{
    enum { TB = 8 };
#define TR(T)                                                                                      \
    do {                                                                                           \
        T *d_ = (T *)(void *)dst;                                                                  \
        const T *s_ = (const T *)(const void *)src;                                                \
        for (int64_t r0 = 0; r0 < R; r0 += TB)                                                     \
            for (int64_t c0 = 0; c0 < C; c0 += TB) {                                               \
                int64_t r1 = r0 + TB < R ? r0 + TB : R, c1 = c0 + TB < C ? c0 + TB : C;            \
                for (int64_t c = c0; c < c1; c++)                                                  \
                    for (int64_t r = r0; r < r1; r++) d_[r * C + c] = s_[r + c * sc];              \
            }                                                                                      \
    } while (0)
    switch (es) {
    case 1: TR(uint8_t); break;
    case 2: TR(uint16_t); break;
    case 4: TR(uint32_t); break;
    case 8: TR(uint64_t); break;
    default:
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                memcpy(dst + (size_t)(r * C + c) * es, src + (r + c * sc) * (int64_t)es, es);
    }
#undef TR
}

/* Fill the contiguous `dst` from `src` through the view. */
static void view_copy(char *dst, const char *src, fr_view v, size_t es)
{
    if (!fr_view_simplify(&v)) return;
    src += v.offset * (int64_t)es;
    if (v.rank == 0) {
        memcpy(dst, src, es);
        return;
    }
    /* inner block: a row, or a 2-D transpose when the last two dims are swapped */
    int tr = v.rank >= 2 && v.stride[v.rank - 2] == 1 && v.stride[v.rank - 1] != 1;
    int outer = v.rank - (tr ? 2 : 1);
    int64_t rows = tr ? v.dims[v.rank - 2] : 1, cols = v.dims[v.rank - 1];
    int64_t block = rows * cols, sc = v.stride[v.rank - 1];
    int64_t idx[FR_MAX_VIEW] = {0}, off = 0;
    for (;;) {
        if (tr)
            transpose_2d(dst, src + off * (int64_t)es, rows, cols, sc, es);
        else
            copy_run(dst, src + off * (int64_t)es, cols, sc, es);
        dst += (size_t)block * es;
        int k = outer - 1;
        for (; k >= 0; k--) {
            off += v.stride[k];
            if (++idx[k] < v.dims[k]) break;
            off -= v.stride[k] * v.dims[k];
            idx[k] = 0;
        }
        if (k < 0) return;
    }
}

/* ---- Transpose ---- */

static fr_status transpose_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    int perm[FR_MAX_RANK];
    FR_TRY(fr_transpose_perm(n, x->rank, perm));
    int64_t dims[FR_MAX_RANK];
    for (int k = 0; k < x->rank; k++) dims[k] = x->dims[perm[k]];
    fr_infer_set(g, n, 0, x->dtype, x->rank, dims);
    return FR_OK;
}

static fr_status transpose_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = kin(ctx, 0);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    int perm[FR_MAX_RANK];
    FR_TRY(fr_transpose_perm(ctx->node, x->rank, perm));
    fr_view v;
    fr_view_permute(&v, x->rank, x->dims, perm);
    FR_TRY(fr_check_out(ctx->node, y, x->dtype, x->rank, v.dims));
    view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
    return FR_OK;
}

/* ---- Concat ---- */

static fr_status concat_axis(const fr_node *n, int64_t opset, int rank, int *axis)
{
    int64_t a;
    const fr_attr *at = fr_node_attr(n, "axis");
    if (!at && opset >= 4) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'axis' is missing");
    FR_TRY(fr_node_attr_int(n, "axis", 1, &a)); /* opset 1..3 default */
    return fr_norm_axis(n, a, rank, axis);
}

/* Shapes of the parts must agree except along the axis; the result's axis dim is the sum. */
static fr_status concat_shape(const fr_node *n, int cnt, const fr_dtype *dts, const int *ranks,
                              const int64_t (*dims)[FR_MAX_RANK], int axis, int64_t *out)
{
    for (int k = 0; k < ranks[0]; k++) out[k] = dims[0][k];
    out[axis] = 0;
    for (int i = 0; i < cnt; i++) {
        char a[128], b[128];
        if (dts[i] != dts[0])
            return fr_node_error(n, FR_ERR_SHAPE, "input %d is %s but input 0 is %s", i,
                                 fr_dtype_name(dts[i]), fr_dtype_name(dts[0]));
        int ok = ranks[i] == ranks[0];
        for (int k = 0; ok && k < ranks[0]; k++) ok = k == axis || dims[i][k] == dims[0][k];
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "input %d has shape %s, which does not match input 0's %s "
                                 "outside axis %d",
                                 i, fr_shape_str(ranks[i], dims[i], a, sizeof a),
                                 fr_shape_str(ranks[0], dims[0], b, sizeof b), axis);
        if (out[axis] > INT64_MAX - dims[i][axis])
            return fr_node_error(n, FR_ERR_SHAPE, "concatenated size overflows");
        out[axis] += dims[i][axis];
    }
    return FR_OK;
}

/* Per-input shape arrays, heap-allocated since Concat takes any number of inputs. */
typedef struct parts {
    fr_dtype *dts;
    int *ranks;
    int64_t (*dims)[FR_MAX_RANK];
} parts;

static fr_status parts_alloc(parts *p, int cnt)
{
    size_t c = (size_t)(cnt ? cnt : 1);
    p->dts = fr_calloc(c, sizeof *p->dts, "concat inputs");
    p->ranks = fr_calloc(c, sizeof *p->ranks, "concat inputs");
    p->dims = fr_calloc(c, sizeof *p->dims, "concat inputs");
    if (!p->dts || !p->ranks || !p->dims) return FR_ERR_OOM;
    return FR_OK;
}

static void parts_free(parts *p)
{
    free(p->dts);
    free(p->ranks);
    free(p->dims);
}

static fr_status concat_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    if (n->n_inputs < 1) return fr_node_error(n, FR_ERR_GRAPH, "has no inputs");
    FR_TRY(fr_infer_require_inputs(g, n, n->n_inputs, n->n_inputs));
    const fr_value *x0 = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x0->dtype));
    if (x0->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "inputs must have rank >= 1");
    int axis;
    FR_TRY(concat_axis(n, fr_graph_opset(g, n->domain), x0->rank, &axis));
    parts p;
    fr_status st = parts_alloc(&p, n->n_inputs);
    for (int i = 0; st == FR_OK && i < n->n_inputs; i++) {
        const fr_value *x = fr_node_in(g, n, i);
        p.dts[i] = x->dtype;
        p.ranks[i] = x->rank;
        memcpy(p.dims[i], x->dims, sizeof p.dims[i]);
    }
    int64_t dims[FR_MAX_RANK];
    if (st == FR_OK) st = concat_shape(n, n->n_inputs, p.dts, p.ranks, p.dims, axis, dims);
    if (st == FR_OK) fr_infer_set(g, n, 0, x0->dtype, x0->rank, dims);
    parts_free(&p);
    return st;
}

static fr_status concat_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (ctx->n_in < 1) return fr_node_error(n, FR_ERR_GRAPH, "has no inputs");
    for (int i = 0; i < ctx->n_in; i++)
        if (!ctx->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_tensor *x0 = ctx->in[0];
    if (x0->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "inputs must have rank >= 1");
    int axis;
    FR_TRY(concat_axis(n, ctx->opset, x0->rank, &axis));
    parts p;
    fr_status st = parts_alloc(&p, ctx->n_in);
    for (int i = 0; st == FR_OK && i < ctx->n_in; i++) {
        p.dts[i] = ctx->in[i]->dtype;
        p.ranks[i] = ctx->in[i]->rank;
        memcpy(p.dims[i], ctx->in[i]->dims, sizeof p.dims[i]);
    }
    int64_t dims[FR_MAX_RANK];
    if (st == FR_OK) st = concat_shape(n, ctx->n_in, p.dts, p.ranks, p.dims, axis, dims);
    parts_free(&p);
    FR_TRY(st);
    FR_TRY(fr_check_out(ctx->node, y, x0->dtype, x0->rank, dims));
    if (!y->nbytes) return FR_OK;
    /* each input contributes one contiguous chunk per outer index */
    size_t es = fr_dtype_size(x0->dtype);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= dims[k];
    for (int k = axis + 1; k < x0->rank; k++) inner *= dims[k];
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int i = 0; i < ctx->n_in; i++) {
            size_t chunk = (size_t)(ctx->in[i]->dims[axis] * inner) * es;
            if (!chunk) continue;
            memcpy(dst, (const char *)ctx->in[i]->data + (size_t)o * chunk, chunk);
            dst += chunk;
        }
    }
    return FR_OK;
}

/* ---- Split ---- */

/* Split's explicit sizes, if any: *cnt = -1 when absent. At infer time (g != NULL) from the
 * attribute or a constant input; in the kernel from the attribute or the input tensor. */
static fr_status split_list(fr_graph *g, const fr_node *n, int64_t opset, const fr_tensor *in1,
                            int *cnt, int64_t **vals)
{
    *cnt = -1;
    *vals = NULL;
    if (opset < 13) {
        const int64_t *a;
        int c;
        FR_TRY(fr_node_attr_ints(n, "split", &c, &a));
        if (c < 0) return FR_OK;
        *vals = fr_calloc((size_t)c + 1, sizeof **vals, "split sizes");
        if (!*vals) return FR_ERR_OOM;
        if (c) memcpy(*vals, a, sizeof **vals * (size_t)c);
        *cnt = c;
        return FR_OK;
    }
    if (g) {
        if (!fr_node_in(g, n, 1)) return FR_OK;
        return fr_infer_const_ints(g, n, 1, cnt, vals);
    }
    if (!in1) return FR_OK;
    if (!fr_dtype_is_int(in1->dtype) || in1->rank > 1)
        return fr_node_error(n, FR_ERR_SHAPE, "split must be a 1-D integer tensor");
    int64_t c = fr_tensor_numel(in1);
    *vals = fr_calloc((size_t)c + 1, sizeof **vals, "split sizes");
    if (!*vals) return FR_ERR_OOM;
    for (int64_t k = 0; k < c; k++) (*vals)[k] = fr_tensor_get_i64(in1, k);
    *cnt = (int)c;
    return FR_OK;
}

static fr_status split_plan(fr_graph *g, const fr_node *n, int64_t opset, int rank,
                            const int64_t *dims, const fr_tensor *in1, int n_out, int *axis,
                            int64_t **sizes)
{
    int64_t a;
    FR_TRY(fr_node_attr_int(n, "axis", 0, &a));
    FR_TRY(fr_norm_axis(n, a, rank, axis));
    if (n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "has no outputs");
    int cnt;
    int64_t *split;
    FR_TRY(split_list(g, n, opset, in1, &cnt, &split));
    *sizes = fr_calloc((size_t)n_out, sizeof **sizes, "split sizes");
    fr_status st =
        *sizes ? fr_split_sizes(n, opset, dims[*axis], cnt, split, n_out, *sizes) : FR_ERR_OOM;
    free(split);
    if (st != FR_OK) {
        free(*sizes);
        *sizes = NULL;
    }
    return st;
}

static fr_status split_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int64_t opset = fr_graph_opset(g, n->domain);
    FR_TRY(fr_infer_require_inputs(g, n, 1, opset >= 13 ? 2 : 1));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    int axis;
    int64_t *sizes;
    FR_TRY(split_plan(g, n, opset, x->rank, x->dims, NULL, n->n_outputs, &axis, &sizes));
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    for (int i = 0; i < n->n_outputs; i++) {
        dims[axis] = sizes[i];
        fr_infer_set(g, n, i, x->dtype, x->rank, dims);
    }
    free(sizes);
    return FR_OK;
}

static fr_status split_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = kin(ctx, 0);
    if (!x) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    int axis;
    int64_t *sizes;
    FR_TRY(
        split_plan(NULL, n, ctx->opset, x->rank, x->dims, kin(ctx, 1), ctx->n_out, &axis, &sizes));
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    fr_status st = FR_OK;
    for (int i = 0; st == FR_OK && i < ctx->n_out; i++) {
        dims[axis] = sizes[i];
        if (ctx->out[i]) st = fr_check_out(ctx->node, ctx->out[i], x->dtype, x->rank, dims);
    }
    size_t es = fr_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= x->dims[k];
    for (int k = axis + 1; k < x->rank; k++) inner *= x->dims[k];
    const char *src = x->data;
    for (int64_t o = 0; st == FR_OK && o < outer; o++) {
        for (int i = 0; i < ctx->n_out; i++) {
            size_t chunk = (size_t)(sizes[i] * inner) * es;
            if (chunk && ctx->out[i])
                memcpy((char *)ctx->out[i]->data + (size_t)o * chunk, src, chunk);
            src += chunk;
        }
    }
    free(sizes);
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
    view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
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
    view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
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
    for (int64_t i = 0; i < ny; i++) {
        if (f64)
            ((double *)y->data)[i] = acc[i];
        else
            ((float *)y->data)[i] = (float)acc[i];
    }
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

/* Transpose: the inverse permutation. */
static fr_status transpose_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    int rank = g->values[n->inputs[0]].rank, perm[FR_MAX_RANK], nid;
    FR_TRY(fr_transpose_perm(n, rank, perm));
    int64_t inv[FR_MAX_RANK];
    for (int k = 0; k < rank; k++) inv[perm[k]] = k;
    FR_TRY(fr_grad_node(ctx, "Transpose", FR_DOMAIN_ONNX, 1, &ctx->dout[0], 1, &ctx->din[0], &nid));
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "perm", rank, inv));
    return fr_grad_finish(ctx, nid);
}

/* A Split of `src` along `axis` into `cnt` parts of `sizes`, in the form the graph's opset
 * reads: the 'split' attribute before opset 13, a constant int64 input from 13. */
static fr_status emit_split(fr_grad_ctx *ctx, int src, int axis, int cnt, const int64_t *sizes,
                            int *outs)
{
    fr_graph *g = ctx->g;
    int64_t opset = fr_graph_opset(g, FR_DOMAIN_ONNX), len = cnt;
    int nid;
    if (opset >= 13) {
        double *d = fr_calloc((size_t)cnt, sizeof *d, "split sizes");
        if (!d) return FR_ERR_OOM;
        for (int i = 0; i < cnt; i++) d[i] = (double)sizes[i];
        int in[2] = {src, -1};
        fr_status st = fr_grad_const(ctx, FR_I64, 1, &len, d, &in[1]);
        free(d);
        FR_TRY(st);
        FR_TRY(fr_grad_node(ctx, "Split", FR_DOMAIN_ONNX, 2, in, cnt, outs, &nid));
    } else {
        FR_TRY(fr_grad_node(ctx, "Split", FR_DOMAIN_ONNX, 1, &src, cnt, outs, &nid));
        FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "split", cnt, sizes));
    }
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "axis", axis));
    return fr_grad_finish(ctx, nid);
}

/* Concat: dy split back into the inputs' extents along the axis (one Split node). */
static fr_status concat_grad(fr_grad_ctx *ctx)
{
    if (ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    int cnt = n->n_inputs, axis;
    if (cnt == 1) {
        if (ctx->need_din[0]) ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    FR_TRY(concat_axis(n, ctx->opset, g->values[n->inputs[0]].rank, &axis));
    int64_t *sizes = fr_calloc((size_t)cnt, sizeof *sizes, "concat grad");
    int *outs = fr_calloc((size_t)cnt, sizeof *outs, "concat grad");
    fr_status st = sizes && outs ? FR_OK : FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < cnt; i++) sizes[i] = g->values[n->inputs[i]].dims[axis];
    if (st == FR_OK) st = emit_split(ctx, ctx->dout[0], axis, cnt, sizes, outs);
    for (int i = 0; st == FR_OK && i < cnt; i++)
        if (ctx->need_din[i]) ctx->din[i] = outs[i];
    free(sizes);
    free(outs);
    return st;
}

/* Split: the outputs' gradients concatenated; an output without one contributes zeros (a
 * constant of its shape). */
static fr_status split_grad(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0]) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const fr_value *x = &g->values[n->inputs[0]];
    int cnt = n->n_outputs, axis, rank = x->rank;
    fr_dtype dt = x->dtype;
    int64_t dims[FR_MAX_RANK], *sizes;
    memcpy(dims, x->dims, sizeof dims);
    FR_TRY(split_plan(g, n, ctx->opset, rank, dims, NULL, cnt, &axis, &sizes));
    if (cnt == 1) {
        free(sizes);
        ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    int *parts = fr_calloc((size_t)cnt, sizeof *parts, "split grad");
    fr_status st = parts ? FR_OK : FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < cnt; i++) {
        parts[i] = ctx->dout[i];
        if (parts[i] >= 0) continue;
        int64_t zd[FR_MAX_RANK], numel;
        memcpy(zd, dims, sizeof zd);
        zd[axis] = sizes[i];
        st = fr_shape_numel(rank, zd, "zero gradient", &numel);
        double *zeros = st == FR_OK ? fr_calloc((size_t)(numel ? numel : 1), sizeof(double),
                                                "zero gradient")
                                    : NULL;
        if (st == FR_OK && !zeros) st = FR_ERR_OOM;
        if (st == FR_OK) st = fr_grad_const(ctx, dt, rank, zd, zeros, &parts[i]);
        free(zeros);
    }
    int nid;
    if (st == FR_OK)
        st = fr_grad_node(ctx, "Concat", FR_DOMAIN_ONNX, cnt, parts, 1, &ctx->din[0], &nid);
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[nid], "axis", axis);
    if (st == FR_OK) st = fr_grad_finish(ctx, nid);
    free(parts);
    free(sizes);
    return st;
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

const fr_op_def fr_ops_layout[] = {
    {"Transpose", FR_DOMAIN_ONNX, 1, transpose_infer, transpose_cpu, transpose_grad, 0},
    {"Concat", FR_DOMAIN_ONNX, 1, concat_infer, concat_cpu, concat_grad, 0},
    {"Split", FR_DOMAIN_ONNX, 2, split_infer, split_cpu, split_grad, 0},
    {"Slice", FR_DOMAIN_ONNX, 1, slice_infer, slice_cpu, slice_grad, 0},
    {"Trilu", FR_DOMAIN_ONNX, 14, trilu_infer, trilu_cpu, trilu_grad, 0},
    {"Tile", FR_DOMAIN_ONNX, 6, tile_infer, tile_cpu, tile_grad, 0},
    {"SliceGrad", FR_DOMAIN_FP8RUN, 1, slice_grad_infer, slice_grad_cpu, NULL, 0},
    {"TileGrad", FR_DOMAIN_FP8RUN, 1, tile_grad_infer, tile_grad_cpu, NULL, 0},
    {0},
};
