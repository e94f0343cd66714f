/* LinearCrossEntropy on the GPU (ops/linear_ce.h; the contract: ops/cuda/cuda_kernel.h). Made
 * of the pieces the unfused LM head runs, in a loop over chunks of rows with one chunk buffer:
 *   - W's bf16 copy (bf16 precision) made once per weights version into the node's persistent
 *     memory (fr_q_to_bf16, as Linear keeps it); a float32 X rounded to bf16 once per run;
 *   - per chunk of R rows: the forward GEMM (fr_cuda_gemm, bf16 x bf16 or float32 x float32,
 *     the logits in y_dtype) into the chunk buffer; the loss rows and dlogits in one pass over
 *     it (fr_cuda_ce_chunk: ops/cuda/loss.cu's row kernels; dlogits written over the logits
 *     when their dtypes agree); the data-gradient GEMM into the chunk's rows of dX; the
 *     weight-gradient GEMM into dW, accumulating from the second chunk on (beta = 1);
 *   - before the loop the count of counted rows, after it the mean (loss.cu's kernels).
 * The results differ from the unfused GPU chain only by cuBLASLt's summation order for the
 * chunk's shapes, and dW by the float32 sum of its chunks' partial products (relative ~1e-6).
 * Scratch: the loss rows, X's bf16 copy (float32 X in bf16 precision), W's bf16 copy when W
 * is not a constant (a tied head's transposed table), the chunk's logits and, when their dtype
 * differs from the logits', its dlogits. */
#include <cuda_runtime.h>
#include <string.h>

#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/loss_chunk.h"
#include "ops/cuda/quantize.cuh"
#include "ops/linear_ce.h"

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* The node's shapes and dtypes as the kernel sees them, from graph values or device tensors. */
struct Plan {
    fr_lce_dims d;
    int x_bf16;       /* X is bfloat16 already */
    int lg_bf16;      /* the chunk's logits dtype (y_dtype) */
    int dl_bf16;      /* dlogits: bf16 in bf16 precision (the GEMMs' operand), else float32 */
    int grads;
    int w_kept;       /* bf16: W's copy kept across runs (W a constant, the weight cache on), else made in scratch */
    /* scratch offsets */
    size_t ce, xb, wb, lg, dl, total;
};

/* W (input 1) is a graph constant (a parameter), whose bf16 copy the node may keep: another W
   (a tied head's transposed table, say) is converted on every run, as Linear does */
int w_constant(const fr_graph *g, const fr_node *n)
{
    return n->n_inputs > 1 && n->inputs[1] >= 0 && g->values[n->inputs[1]].constant != NULL &&
           fr_tensor_numel(g->values[n->inputs[1]].constant) > 0;
}

fr_status make_plan(const fr_graph *g, const fr_node *n, int cache, int64_t M, int64_t K, int64_t V, int x_bf16,
                    int grads, Plan *p)
{
    memset(p, 0, sizeof *p);
    FR_TRY(fr_lce_read(n, M, K, V, &p->d));
    p->w_kept = cache && p->d.bf16 && w_constant(g, n);
    p->x_bf16 = x_bf16;
    p->lg_bf16 = p->d.y_bf16;
    p->dl_bf16 = p->d.bf16;
    p->grads = grads;
    const int64_t C = p->d.chunk;
    size_t off = 0;
    p->ce = off;
    off += align_up(fr_cuda_ce_scratch_bytes(M));
    p->xb = off;
    if (p->d.bf16 && !x_bf16) off += align_up((size_t)(M * K) * 2);
    p->wb = off;
    if (p->d.bf16 && !p->w_kept) off += align_up((size_t)(K * V) * 2);
    p->lg = off;
    off += align_up((size_t)(C * V) * (p->lg_bf16 ? 2 : 4));
    p->dl = p->lg;
    if (grads && p->dl_bf16 != p->lg_bf16) {
        p->dl = off;
        off += align_up((size_t)(C * V) * (p->dl_bf16 ? 2 : 4));
    }
    p->total = off;
    return FR_OK;
}

/* M, K, V of the node from its graph values */
fr_status graph_dims(const fr_graph *g, const fr_node *n, int64_t *M, int64_t *K, int64_t *V, int *x_bf16, int *grads)
{
    if (n->n_inputs < 3 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[2] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs X, W and labels");
    const fr_value *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]], *lb = &g->values[n->inputs[2]];
    int64_t tb;
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    if (w->rank != 2) return fr_node_error(n, FR_ERR_SHAPE, "the weight must be 2-D");
    *K = tb ? w->dims[1] : w->dims[0];
    *V = tb ? w->dims[0] : w->dims[1];
    *M = 1;
    for (int d = 0; d < lb->rank; d++) *M *= lb->dims[d];
    *x_bf16 = x->dtype == FR_BF16;
    *grads = (n->n_outputs > 1 && n->outputs[1] >= 0) || (n->n_outputs > 2 && n->outputs[2] >= 0);
    return FR_OK;
}

fr_status lce_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes)
{
    int64_t M, K, V;
    int xb, grads;
    FR_TRY(graph_dims(g, n, &M, &K, &V, &xb, &grads));
    Plan p;
    FR_TRY(make_plan(g, n, env->weight_cache, M, K, V, xb, grads, &p));
    *bytes = p.total;
    return FR_OK;
}

/* bf16 precision keeps W's bf16 copy (its stored layout) across runs, with the weight cache on */
fr_status lce_persist(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const char *prec;
    FR_TRY(fr_node_attr_string(n, "precision", "fp32", &prec));
    *bytes = 0;
    if (!env->weight_cache || strcmp(prec, "bf16") != 0 || !w_constant(g, n)) return FR_OK;
    const fr_value *w = &g->values[n->inputs[1]];
    int64_t numel = 1;
    for (int d = 0; d < w->rank; d++) numel *= w->dims[d];
    *bytes = align_up((size_t)numel * 2);
    return FR_OK;
}

fr_status gemm(const fr_cuda_kctx *k, int64_t M, int64_t N, int64_t K, fr_dtype in, fr_dtype out, const void *A, int ta,
               const void *B, int tb, void *D, double beta)
{
    fr_gemm g;
    fr_gemm_init(&g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.trans_a = ta;
    g.trans_b = tb;
    g.a_type = g.b_type = in;
    g.d_type = out;
    g.A = A;
    g.B = B;
    g.D = D;
    g.beta = beta;
    return fr_cuda_gemm(k->cu, k->node, &g);
}

fr_status lce_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || !k->in[0] || !k->in[1] || !k->in[2] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs X, W, labels and the loss output");
    const fr_tensor *x = k->in[0], *w = k->in[1], *lb = k->in[2];
    const fr_tensor *dlt = k->n_in > FR_LCE_IN_DLOSS ? k->in[FR_LCE_IN_DLOSS] : NULL;
    fr_tensor *dx = k->n_out > FR_LCE_OUT_DX ? k->out[FR_LCE_OUT_DX] : NULL;
    fr_tensor *dw = k->n_out > FR_LCE_OUT_DW ? k->out[FR_LCE_OUT_DW] : NULL;
    int64_t tb;
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    if (w->rank != 2 || w->dtype != FR_F32) return fr_node_error(n, FR_ERR_SHAPE, "the weight must be a float32 matrix");
    const int64_t K = tb ? w->dims[1] : w->dims[0], V = tb ? w->dims[0] : w->dims[1], M = fr_tensor_numel(lb);
    const int grads = dx || dw;
    if (grads && (!dlt || dlt->dtype != FR_F32 || fr_tensor_numel(dlt) != 1))
        return fr_node_error(n, FR_ERR_GRAPH, "dX / dW need the dloss input (float32 scalar)");
    if (fr_tensor_numel(x) != M * K || (x->dtype != FR_F32 && x->dtype != FR_BF16))
        return fr_node_error(n, FR_ERR_SHAPE, "X does not match the labels and the weight (re-run shape inference)");
    Plan p;
    FR_TRY(make_plan(k->g, n, fr_cuda_weight_cache(k->cu), M, K, V, x->dtype == FR_BF16, grads, &p));
    FR_TRY(fr_check_out(n, k->out[0], FR_F32, 0, NULL));
    if (dx) FR_TRY(fr_check_out(n, dx, p.d.dx_bf16 ? FR_BF16 : FR_F32, x->rank, x->dims));
    if (dw) FR_TRY(fr_check_out(n, dw, FR_F32, 2, w->dims));
    if (!k->scratch || k->scratch_bytes < p.total)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, p.total);
    cudaStream_t s = k->cu->stream;
    char *base = (char *)k->scratch;
    fr_ce_chunk_ctx cc = {s, n, k->cu->dev_error, fr_node_index(k), base + p.ce, M, V, lb->data, lb->dtype == FR_I64,
                          (long long)p.d.ignore};
    if (lb->dtype != FR_I64 && lb->dtype != FR_I32) return fr_node_error(n, FR_ERR_SHAPE, "labels must be int64 or int32");

    /* the GEMM operands */
    const fr_dtype gt = p.d.bf16 ? FR_BF16 : FR_F32;
    const void *wop = w->data, *xop = x->data;
    if (p.d.bf16 && p.w_kept) {
        if (!k->persist || !k->persist_version || k->persist_bytes < (size_t)(K * V) * 2)
            return fr_node_error(n, FR_ERR_INTERNAL, "no persistent memory for the weight's bf16 copy");
        fr_cuda_ctx *cu = k->cu;
        if (*k->persist_version != cu->weights_version) {
            cu->weight_casts++;
            FR_TRY(fr_q_to_bf16(s, n, (const float *)w->data, K * V, k->persist));
            *k->persist_version = cu->weights_version;
        }
        wop = k->persist;
    } else if (p.d.bf16) {
        FR_TRY(fr_q_to_bf16(s, n, (const float *)w->data, K * V, base + p.wb));
        wop = base + p.wb;
    }
    if (p.d.bf16 && !p.x_bf16) {
        FR_TRY(fr_q_to_bf16(s, n, (const float *)x->data, M * K, base + p.xb));
        xop = base + p.xb;
    }
    const size_t ge = p.d.bf16 ? 2 : 4;
    void *lg = base + p.lg, *dl = grads ? base + p.dl : NULL;
    if (dw && M == 0) FR_CUDA_TRY(cudaMemsetAsync(dw->data, 0, (size_t)(K * V) * 4, s));
    FR_TRY(fr_cuda_ce_count(&cc));
    for (int64_t r0 = 0; r0 < M; r0 += p.d.chunk) {
        const int64_t R = M - r0 < p.d.chunk ? M - r0 : p.d.chunk;
        const char *xc = (const char *)xop + (size_t)(r0 * K) * ge;
        /* logits [R][V] = Xc [R][K] op(W): W stored [V][K] (transB) is read transposed */
        FR_TRY(gemm(k, R, V, K, gt, p.lg_bf16 ? FR_BF16 : FR_F32, xc, 0, wop, (int)tb, lg, 0.0));
        FR_TRY(fr_cuda_ce_chunk(&cc, r0, R, lg, p.lg_bf16, grads ? (const float *)dlt->data : NULL, dl, p.dl_bf16));
        if (!grads) continue;
        if (dx) { /* dX rows [R][K] = dl [R][V] op(W)^T */
            char *dxc = (char *)dx->data + (size_t)(r0 * K) * (p.d.dx_bf16 ? 2 : 4);
            FR_TRY(gemm(k, R, K, V, gt, dx->dtype, dl, 0, wop, !tb, dxc, 0.0));
        }
        if (dw) { /* dW += dl^T Xc ([V][K], transB) or Xc^T dl ([K][V]) */
            const double beta = r0 > 0 ? 1.0 : 0.0;
            if (tb)
                FR_TRY(gemm(k, V, K, R, gt, FR_F32, dl, 1, xc, 0, dw->data, beta));
            else
                FR_TRY(gemm(k, K, V, R, gt, FR_F32, xc, 1, dl, 0, dw->data, beta));
        }
    }
    return fr_cuda_ce_mean(&cc, (float *)k->out[0]->data);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_linear_ce[] = {
    {"LinearCrossEntropy", FR_DOMAIN_FP8RUN, lce_run, NULL, lce_persist, lce_scratch, 0, NULL},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL},
};
