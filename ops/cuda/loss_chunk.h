/* The cross-entropy kernels of ops/cuda/loss.cu on a chunk of rows, for ops that make the
 * logits a chunk at a time (LinearCrossEntropy, ops/cuda/linear_ce.c). The scratch is
 * SoftmaxCrossEntropy's for all `rows` rows of the op ([count][per-row loss][per-row counted]);
 * each chunk writes its rows' entries, and the mean at the end sums them all in the fixed order
 * the unchunked loss does, so the loss is the same as SoftmaxCrossEntropy's of the whole
 * logits. Everything runs on stream s; a bad label goes to the device error word `err` with
 * node index `node`, as SoftmaxCrossEntropy reports it. */
#ifndef FR_CUDA_LOSS_CHUNK_H
#define FR_CUDA_LOSS_CHUNK_H

#include <cuda_runtime.h>

#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fr_ce_chunk_ctx {
    cudaStream_t s;
    const fr_node *n;
    int *err;           /* the context's device error word */
    int node;           /* n's index in its graph */
    void *scratch;      /* fr_cuda_ce_scratch_bytes(rows) bytes of device memory */
    int64_t rows, len;  /* all rows of the op, the vocabulary */
    const void *labels; /* device, [rows], int64 (lb64) or int32 */
    int lb64;
    long long ignore;
} fr_ce_chunk_ctx;

/* Scratch bytes for `rows` rows. */
size_t fr_cuda_ce_scratch_bytes(int64_t rows);
/* The count of counted rows of all rows (and the label check), for the gradient's scale. */
FR_NODISCARD fr_status fr_cuda_ce_count(const fr_ce_chunk_ctx *c);
/* Rows r0 .. r0+R-1: logits x [R][len] (x_bf16: bfloat16, else float32) give those rows' losses
 * and, when dx is not NULL, dlogits dx [R][len] (dx_bf16: bfloat16, else float32) =
 * dloss[0] / count * (softmax - onehot), in the same pass (fr_cuda_ce_count must have run).
 * dx may be x (same dtype): each element is read before it is written. */
FR_NODISCARD fr_status fr_cuda_ce_chunk(const fr_ce_chunk_ctx *c, int64_t r0, int64_t R, const void *x, int x_bf16,
                                        const float *dloss, void *dx, int dx_bf16);
/* The mean over the counted rows of all rows into out (device float). */
FR_NODISCARD fr_status fr_cuda_ce_mean(const fr_ce_chunk_ctx *c, float *out);

#ifdef __cplusplus
}
#endif

#endif
