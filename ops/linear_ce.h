/* LinearCrossEntropy (domain ai.fp8run): the LM head Linear and the cross-entropy loss head in
 * one op that never holds the [tokens, vocab] logits or their gradient whole. It works through
 * the rows (tokens) in chunks: a chunk's logits, then in the same pass over them the chunk's
 * losses and (with dloss) its dlogits, which at once give the chunk's rows of dX and its share
 * of dW. One chunk buffer, reused.
 *
 * LinearCrossEntropy(X [..., K], W, labels [...] int64/int32, dloss? []) -> (loss [], dX?, dW?)
 *   W: [V, K] with transB = 1 (torch's Linear), [K, V] with transB = 0; float32.
 *   X: float32, or bfloat16 in bf16 precision (a narrowed activation, widened exactly).
 *   loss: float32, the mean over the rows whose label != ignore_index of
 *     logsumexp(logits row) - logits[label], 0 when every row is ignored: SoftmaxCrossEntropy
 *     (ops/loss.h) of logits = X op(W) as Linear (ops/linear.h) computes them.
 *   dloss: float32 scalar, d(objective)/d(loss), known before the op runs (autodiff's seed, or
 *     the SFT loss weight times it): required for dX / dW.
 *   dX: X's shape, float32 (bfloat16 with dx_dtype "bfloat16"): LinearGradData of dlogits.
 *   dW: W's shape and layout, float32: LinearGradWeight of X and dlogits.
 *   dlogits = dloss / count * (softmax(row) - onehot(label)), 0 on ignored rows: the values
 *   SoftmaxCrossEntropyGrad writes.
 * Attributes:
 *   transB, precision ("fp32" | "bf16"), y_dtype, dx_dtype, pad_multiple, weights, state_prefix:
 *     the LM head Linear's and its data gradient's (ops/linear.h); y_dtype "bfloat16" rounds
 *     each logit to bfloat16 before the loss reads it, as the narrowed head writes them
 *     (passes/narrow_gradients.h). In bf16 precision the GEMM operands (X, W, dlogits) are
 *     rounded to bfloat16 as the bf16 Linear's are, so dlogits are bfloat16 whatever the
 *     unfused loss head's dx_dtype was (the data and weight gradients round them anyway).
 *   ignore_index int (default -100): SoftmaxCrossEntropy's.
 *   chunk_rows int >= 1 (default 1024): rows per chunk (the last one may be shorter);
 *     fr_lce_chunk_rows picks it so a chunk's float32 logits are about 256 MiB.
 * The CPU kernel computes every value as the unfused chain's CPU kernels do (the same float32
 * products summed in the same order, the loss statistics in double in the same order), so
 * loss, dX and dW equal Linear + SoftmaxCrossEntropy (+ Grad, LinearGradData, LinearGradWeight)
 * bit for bit for any chunk size: a logit or a dX element sums over K or V within one row, and
 * a dW element adds its rows' products in row order across the chunks into one float32 sum,
 * as the unfused weight-gradient GEMM adds them. (That holds for finite X and W. The kernel
 * skips the zero dlogits of ignored rows and zero products, which the unfused GEMMs multiply:
 * with an Inf or NaN in X or W, where the loss is NaN either way, the two may put NaN in
 * different gradient elements.) fp8 precision, float64 and a bias are not
 * supported (the pass that makes the op leaves those heads unfused). */
#ifndef FR_OPS_LINEAR_CE_H
#define FR_OPS_LINEAR_CE_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* C functions, also when ops/cuda/linear_ce.cu includes this */
#endif

extern const fr_op_def fr_ops_linear_ce[]; /* LinearCrossEntropy */

enum { FR_LCE_IN_X = 0, FR_LCE_IN_W = 1, FR_LCE_IN_LABELS = 2, FR_LCE_IN_DLOSS = 3, FR_LCE_N_IN = 4 };
enum { FR_LCE_OUT_LOSS = 0, FR_LCE_OUT_DX = 1, FR_LCE_OUT_DW = 2, FR_LCE_N_OUT = 3 };

#define FR_LCE_CHUNK_BYTES ((int64_t)256 << 20) /* a chunk's float32 logits, about */

/* The node's shape facts, checked (shared by the CPU kernel and the CUDA launcher). */
typedef struct fr_lce_dims {
    int64_t M, K, V;   /* rows (tokens), hidden, vocabulary */
    int64_t chunk;     /* rows per chunk, in [1, max(M, 1)] */
    int transB, bf16;  /* precision bf16 (else fp32) */
    int y_bf16, dx_bf16;
    int64_t ignore;
} fr_lce_dims;
FR_NODISCARD fr_status fr_lce_read(const fr_node *n, int64_t M, int64_t K, int64_t V, fr_lce_dims *d);

/* Rows per chunk for a vocabulary of V: FR_LCE_CHUNK_BYTES of float32 logits, a multiple of 128
 * (at least 128), at most M (at least 1). */
int64_t fr_lce_chunk_rows(int64_t M, int64_t V);

#ifdef __cplusplus
}
#endif

#endif
