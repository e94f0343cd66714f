/* Layout op family, part 1: Transpose, Concat, Split (Slice, Trilu, Tile and the backward ops
 * SliceGrad / TileGrad: slice_tile.c).
 *
 * All are pure data movement and work for every dtype fp8run holds, copying elements by
 * fr_dtype_size. Transpose (like Slice and Tile) runs on the strided-copy engine of view_copy.c:
 * the output is contiguous and each output dim walks the input with some stride. The engine
 * drops size-1 dims and merges dims that stay contiguous in the input, so perm [0,2,1,3]
 * (attention heads) becomes memcpy of rows, and a swap of the last two dims becomes a
 * cache-blocked 2-D transpose. */
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
    fr_view_copy(y->data, x->data, v, fr_dtype_size(x->dtype));
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

/* ---- gradient rules ---- */
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

/* ---- the table ---- */

const fr_op_def fr_ops_layout[] = {
    {"Transpose", FR_DOMAIN_ONNX, 1, transpose_infer, transpose_cpu, transpose_grad, 0},
    {"Concat", FR_DOMAIN_ONNX, 1, concat_infer, concat_cpu, concat_grad, 0},
    {"Split", FR_DOMAIN_ONNX, 2, split_infer, split_cpu, split_grad, 0},
    {0},
};
