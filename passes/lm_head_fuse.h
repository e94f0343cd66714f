/* Chunked LM head (--chunked-lm-head on), on the differentiated training graph: the LM head
 * Linear, the loss head and their backward
 *
 *   Linear(X, W) -> logits;  SoftmaxCrossEntropy(logits, labels) -> loss
 *   SoftmaxCrossEntropyGrad(dloss, logits, labels) -> dlogits
 *   LinearGradData(dlogits, W) -> dX;  LinearGradWeight(X or Xq, dlogits or dYq) -> dW
 *
 * become one ai.fp8run::LinearCrossEntropy(X, W, labels, dloss) -> (loss, dX, dW) (ops/linear_ce.h)
 * that works through the tokens in chunks: the [tokens, vocab] logits and dlogits are never
 * whole (at 1B, B8 x T2048 and a 128256 vocabulary: 4 GiB of bf16 logits plus 4 GiB of
 * dlogits at the step's peak), and the head's GEMM runs once (the loss and the gradient come
 * from the same chunk of logits), not again in the backward.
 *
 * Where: after autodiff, because the fused node makes the gradient in the forward's place and
 * so needs dloss then. It fuses only when
 *   - the Linear is fp32 or bf16 precision (an fp8 head keeps its scaling state as it is), has
 *     no bias, and its logits are read by the loss head and its gradient only (not an output);
 *   - dlogits are read by that Linear's two backward nodes only (directly or through the bf16
 *     dYq copy), and the saved Xq by the weight gradient only;
 *   - dloss does not depend on the loss (autodiff's constant seed, or the SFT loss weight
 *     times it): the nodes computing it are moved before the head (they read constants and
 *     inputs); anything else leaves the head unfused.
 * The evaluation graph (copied before autodiff) keeps its Linear and loss head: evaluation,
 * sampling and prediction see the logits as before. */
#ifndef FR_LM_HEAD_FUSE_H
#define FR_LM_HEAD_FUSE_H

#include <stddef.h>

#include "graph/ir.h"

/* *count: heads fused; detail (may be NULL): what was fused and the bytes no longer held, or
 * why a loss head was left as it is. */
FR_NODISCARD fr_status fr_fuse_lm_head(fr_graph *g, int *count, char *detail, size_t n);

/* The bytes of logits and dlogits a LinearCrossEntropy node of g does not hold whole (every
 * such node summed, less its chunk buffer): what info --memory reports as saved. */
size_t fr_lm_head_saved_bytes(const fr_graph *g);

#endif
