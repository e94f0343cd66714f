/* LinearCrossEntropy (see linear_ce.h): attributes, shape inference, the CPU kernel.
 * The kernel mirrors the unfused chain's CPU kernels value for value: the GEMM operands are
 * prepared as ops/linear_cpu.c prepares them (float32, or rounded to bfloat16), every float32
 * sum starts at +0 and adds its products one by one in the contraction's order (gemm_kseq's
 * order), and the loss statistics are ops/loss.c's, in double. A sum starting at +0 never
 * becomes -0, so the zero products of the unfused GEMM's padding (pad_multiple) and of ignored
 * rows change nothing and are skipped. */
#include "ops/linear_ce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/linear.h"

int64_t fr_lce_chunk_rows(int64_t M, int64_t V)
{
    int64_t r = V > 0 ? FR_LCE_CHUNK_BYTES / (V * 4) : M;
    r = r / 128 * 128;
    if (r < 128) r = 128;
    if (r > M) r = M;
    return r < 1 ? 1 : r;
}

fr_status fr_lce_read(const fr_node *n, int64_t M, int64_t K, int64_t V, fr_lce_dims *d)
{
    fr_lin_attrs a;
    FR_TRY(fr_lin_read_attrs(n, &a));
    if (a.prec == FR_LIN_FP8)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "precision fp8 is not supported (fp32 or bf16: an fp8 LM head "
                             "stays a Linear and a SoftmaxCrossEntropy)");
    if ((a.y_bf16 || a.dx_bf16) && a.prec != FR_LIN_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "y_dtype / dx_dtype bfloat16 need precision bf16");
    int64_t chunk;
    FR_TRY(fr_node_attr_int(n, "chunk_rows", 1024, &chunk));
    if (chunk < 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "chunk_rows=%lld (must be >= 1)", (long long)chunk);
    FR_TRY(fr_node_attr_int(n, "ignore_index", -100, &d->ignore));
    d->M = M;
    d->K = K;
    d->V = V;
    d->chunk = chunk > M ? (M > 0 ? M : 1) : chunk;
    d->transB = a.transB;
    d->bf16 = a.prec == FR_LIN_BF16;
    d->y_bf16 = a.y_bf16;
    d->dx_bf16 = a.dx_bf16;
    return FR_OK;
}

/* ---- shape inference ---- */

static fr_status lce_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, FR_LCE_N_IN));
    if (n->n_outputs < 1 || n->n_outputs > FR_LCE_N_OUT || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected loss and optionally dX, dW", n->n_outputs);
    const fr_value *x = fr_node_in(g, n, 0), *w = fr_node_in(g, n, 1), *lb = fr_node_in(g, n, 2);
    const fr_value *dl = fr_node_in(g, n, FR_LCE_IN_DLOSS);
    char s1[128], s2[128];
    if (w->dtype != FR_F32 || w->rank != 2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "weight '%s' must be a float32 matrix, got %s %s", w->name,
                             fr_dtype_name(w->dtype), fr_shape_str(w->rank, w->dims, s1, sizeof s1));
    int64_t tb;
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    const int64_t K = tb ? w->dims[1] : w->dims[0], V = tb ? w->dims[0] : w->dims[1];
    if (x->rank < 1 || x->dims[x->rank - 1] != K)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s does not match weight '%s' %s (transB=%lld: want X [..., %lld])",
                             x->name, fr_shape_str(x->rank, x->dims, s1, sizeof s1), w->name,
                             fr_shape_str(w->rank, w->dims, s2, sizeof s2), (long long)tb, (long long)K);
    int64_t M = 1;
    for (int d = 0; d + 1 < x->rank; d++) M *= x->dims[d];
    fr_lce_dims dims;
    FR_TRY(fr_lce_read(n, M, K, V, &dims));
    if (x->dtype != FR_F32 && !(x->dtype == FR_BF16 && dims.bf16))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' is %s: float32, or bfloat16 in bf16 precision", x->name,
                             fr_dtype_name(x->dtype));
    if (lb->dtype != FR_I64 && lb->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_SHAPE, "labels must be int64 or int32, got %s", fr_dtype_name(lb->dtype));
    int ok = lb->rank == x->rank - 1;
    for (int d = 0; ok && d < lb->rank; d++) ok = lb->dims[d] == x->dims[d];
    if (!ok)
        return fr_node_error(n, FR_ERR_SHAPE, "labels %s do not match input %s (want the input's shape without the last dim)",
                             fr_shape_str(lb->rank, lb->dims, s1, sizeof s1), fr_shape_str(x->rank, x->dims, s2, sizeof s2));
    const int want_grad = fr_node_out(g, n, FR_LCE_OUT_DX) || fr_node_out(g, n, FR_LCE_OUT_DW);
    if (dl) {
        int64_t numel = 1;
        for (int d = 0; d < dl->rank; d++) numel *= dl->dims[d];
        if (dl->dtype != FR_F32 || numel != 1)
            return fr_node_error(n, FR_ERR_SHAPE, "dloss '%s' must be a float32 scalar", dl->name);
    } else if (want_grad) {
        return fr_node_error(n, FR_ERR_GRAPH, "dX / dW outputs need the dloss input (input 3)");
    }
    fr_infer_set(g, n, FR_LCE_OUT_LOSS, FR_F32, 0, NULL);
    if (fr_node_out(g, n, FR_LCE_OUT_DX)) fr_infer_set(g, n, FR_LCE_OUT_DX, dims.dx_bf16 ? FR_BF16 : FR_F32, x->rank, x->dims);
    if (fr_node_out(g, n, FR_LCE_OUT_DW)) fr_infer_set(g, n, FR_LCE_OUT_DW, FR_F32, 2, w->dims);
    return FR_OK;
}

/* ---- the CPU kernel ---- */

/* y[i] += a * x[i]: every GEMM below is a run of these, each y element adding its products in
 * the contraction's order. 8 lanes (AVX where the CPU has it, target_clones picks at run time,
 * as linear_cpu.c's gemm_kseq); the lanes are independent elements, so the width changes no
 * result, and ISO C mode never fuses the multiply and the add. */
typedef float lce_v8f __attribute__((vector_size(32)));

__attribute__((target_clones("avx2", "default")))
static void axpy(float *y, float a, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        lce_v8f xv, yv;
        memcpy(&xv, x + i, sizeof xv);
        memcpy(&yv, y + i, sizeof yv);
        yv += a * xv;
        memcpy(y + i, &yv, sizeof yv);
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* a GEMM operand value as the unfused Linear's CPU kernel prepares it */
static float operand(float v, int bf16) { return bf16 ? fr_bf16_to_f32(fr_f32_to_bf16(v)) : v; }

static float x_at(const fr_tensor *x, int64_t i, int bf16)
{
    if (x->dtype == FR_BF16) return fr_bf16_to_f32(((const uint16_t *)x->data)[i]);
    return operand(((const float *)x->data)[i], bf16);
}

typedef struct lce_run {
    const fr_kernel_ctx *ctx;
    fr_lce_dims d;
    const fr_tensor *x, *lb;
    float *wv;      /* op(W)^T as the GEMMs multiply it: [V][K] (dX's rows) */
    float *wt;      /* and op(W): [K][V] (the logits: V sums side by side, each in k order) */
    float *xc;      /* a chunk of X's operand rows [chunk][K] */
    float *lc;      /* the chunk's logits, then its dlogits, [chunk][V] */
    double total;   /* the loss sum over the rows so far, in row order */
    double scale;   /* dloss / count (0 without counted rows) */
    float *dx;      /* float32 dX, or NULL (dX bf16: rounded per row through dxr) */
    uint16_t *dx16;
    float *dxr;     /* one row of dX */
    float *dw;      /* the dW output, accumulated over the chunks */
} lce_run;

/* logsumexp of a row of logits in double, as ops/loss.c's row_logsumexp */
static double row_lse(const float *r, int64_t V)
{
    double m = -INFINITY, s = 0;
    for (int64_t v = 0; v < V; v++)
        if ((double)r[v] > m) m = r[v];
    for (int64_t v = 0; v < V; v++) s += exp((double)r[v] - m);
    return m + log(s);
}

static void chunk_rows(lce_run *r, int64_t r0, int64_t R, int grads)
{
    const int64_t K = r->d.K, V = r->d.V;
    const int bf = r->d.bf16;
    for (int64_t i = 0; i < R; i++)
        for (int64_t k = 0; k < K; k++) r->xc[i * K + k] = x_at(r->x, (r0 + i) * K + k, bf);
    for (int64_t i = 0; i < R; i++) {
        const int64_t y = fr_tensor_get_i64(r->lb, r0 + i);
        float *row = r->lc + i * V;
        const float *xr = r->xc + i * K;
        if (y == r->d.ignore) { /* no loss; a zero gradient row */
            memset(row, 0, (size_t)V * sizeof *row);
            continue;
        }
        /* row[v] = sum over k in order of x[k] op(W)[k][v]: each of the V sums starts at +0 and
           adds its products one by one, as gemm_kseq's; the loop over v vectorizes */
        for (int64_t v = 0; v < V; v++) row[v] = 0.0f;
        for (int64_t k = 0; k < K; k++) axpy(row, xr[k], r->wt + k * V, V);
        if (r->d.y_bf16)
            for (int64_t v = 0; v < V; v++) row[v] = fr_bf16_to_f32(fr_f32_to_bf16(row[v]));
        const double lse = row_lse(row, V);
        r->total += lse - (double)row[y];
        if (!grads) continue;
        for (int64_t v = 0; v < V; v++) {
            const float g = (float)(r->scale * (exp((double)row[v] - lse) - (v == y ? 1.0 : 0.0)));
            row[v] = operand(g, bf);
        }
    }
}

/* dX rows r0.. of the chunk's dlogits: dX[m][k] = sum over v in order of dl[m][v] op(W)^T[v][k] */
static void chunk_dx(lce_run *r, int64_t r0, int64_t R)
{
    const int64_t K = r->d.K, V = r->d.V;
    for (int64_t i = 0; i < R; i++) {
        float *acc = r->dx ? r->dx + (r0 + i) * K : r->dxr;
        for (int64_t k = 0; k < K; k++) acc[k] = 0.0f;
        const float *dl = r->lc + i * V;
        for (int64_t v = 0; v < V; v++)
            if (dl[v] != 0.0f) axpy(acc, dl[v], r->wv + v * K, K); /* +-0 products leave a sum that started at +0 as it is */
        if (!r->dx)
            for (int64_t k = 0; k < K; k++) r->dx16[(r0 + i) * K + k] = fr_f32_to_bf16(acc[k]);
    }
}

/* dW += the chunk's rows, in row order: dW[v][k] (transB) or dW[k][v] += dl[m][v] x[m][k] */
static void chunk_dw(lce_run *r, int64_t R)
{
    const int64_t K = r->d.K, V = r->d.V;
    for (int64_t i = 0; i < R; i++) {
        const float *dl = r->lc + i * V, *xr = r->xc + i * K;
        if (r->d.transB) {
            for (int64_t v = 0; v < V; v++)
                if (dl[v] != 0.0f) axpy(r->dw + v * K, dl[v], xr, K);
        } else {
            for (int64_t k = 0; k < K; k++)
                if (xr[k] != 0.0f) axpy(r->dw + k * V, xr[k], dl, V);
        }
    }
}

/* labels in range; how many rows count (ops/loss.c's check, its words) */
static fr_status count_labels(const fr_kernel_ctx *ctx, const fr_tensor *lb, int64_t V, int64_t ignore, int64_t *count)
{
    int64_t rows = fr_tensor_numel(lb), c = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = fr_tensor_get_i64(lb, r);
        if (y == ignore) continue;
        if (y < 0 || y >= V)
            return fr_node_error(ctx->node, FR_ERR_RANGE, "label %lld at position %lld is outside the vocabulary [0, %lld)",
                                 (long long)y, (long long)r, (long long)V);
        c++;
    }
    *count = c;
    return FR_OK;
}

static fr_status lce_cpu(const fr_kernel_ctx *ctx)
{
    lce_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.x = ctx->in[0];
    r.lb = ctx->in[2];
    const fr_tensor *w = ctx->in[1], *dl = ctx->n_in > FR_LCE_IN_DLOSS ? ctx->in[FR_LCE_IN_DLOSS] : NULL;
    fr_tensor *dx = ctx->n_out > FR_LCE_OUT_DX ? ctx->out[FR_LCE_OUT_DX] : NULL;
    fr_tensor *dw = ctx->n_out > FR_LCE_OUT_DW ? ctx->out[FR_LCE_OUT_DW] : NULL;
    int64_t tb;
    FR_TRY(fr_node_attr_int(ctx->node, "transB", 0, &tb));
    const int64_t K = tb ? w->dims[1] : w->dims[0], V = tb ? w->dims[0] : w->dims[1];
    const int64_t M = fr_tensor_numel(r.lb);
    FR_TRY(fr_lce_read(ctx->node, M, K, V, &r.d));
    if ((dx || dw) && !dl) return fr_node_error(ctx->node, FR_ERR_GRAPH, "dX / dW need the dloss input");
    int64_t count = 0;
    FR_TRY(count_labels(ctx, r.lb, V, r.d.ignore, &count));
    const int grads = dx || dw;
    if (grads) r.scale = count ? (double)((const float *)dl->data)[0] / (double)count : 0.0;
    const int64_t C = r.d.chunk;
    r.wv = fr_malloc((size_t)(V * K > 0 ? V * K : 1) * sizeof(float), "LinearCrossEntropy weight operand");
    r.wt = fr_malloc((size_t)(V * K > 0 ? V * K : 1) * sizeof(float), "LinearCrossEntropy weight operand");
    r.xc = fr_malloc((size_t)(C * K > 0 ? C * K : 1) * sizeof(float), "LinearCrossEntropy input chunk");
    r.lc = fr_malloc((size_t)(C * V > 0 ? C * V : 1) * sizeof(float), "LinearCrossEntropy logits chunk");
    r.dxr = fr_malloc((size_t)(K > 0 ? K : 1) * sizeof(float), "LinearCrossEntropy dX row");
    fr_status st = r.wv && r.wt && r.xc && r.lc && r.dxr ? FR_OK : FR_ERR_OOM;
    if (st == FR_OK) {
        const float *wd = w->data;
        for (int64_t v = 0; v < V; v++)
            for (int64_t k = 0; k < K; k++) {
                r.wv[v * K + k] = operand(tb ? wd[v * K + k] : wd[k * V + v], r.d.bf16);
                r.wt[k * V + v] = r.wv[v * K + k];
            }
        if (dx && dx->dtype == FR_BF16)
            r.dx16 = dx->data;
        else if (dx)
            r.dx = dx->data;
        if (dw) {
            r.dw = dw->data;
            memset(r.dw, 0, (size_t)(V * K) * sizeof(float));
        }
        for (int64_t r0 = 0; r0 < M; r0 += C) {
            const int64_t R = M - r0 < C ? M - r0 : C;
            chunk_rows(&r, r0, R, grads);
            if (dx) chunk_dx(&r, r0, R);
            if (dw) chunk_dw(&r, R);
        }
        ((float *)ctx->out[0]->data)[0] = (float)(count ? r.total / (double)count : 0.0);
    }
    free(r.wv);
    free(r.wt);
    free(r.xc);
    free(r.lc);
    free(r.dxr);
    return st;
}

const fr_op_def fr_ops_linear_ce[] = {
    {"LinearCrossEntropy", FR_DOMAIN_FP8RUN, 1, lce_infer, lce_cpu, NULL, 0},
    {0},
};
