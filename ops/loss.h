/* The loss head's dtype rules (ops/loss.c), shared with its CUDA kernels (ops/cuda/loss.cu). */
#ifndef FR_OPS_LOSS_H
#define FR_OPS_LOSS_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* C functions, also when ops/cuda/loss.cu includes this */
#endif

/* The dtype SoftmaxCrossEntropy(+Grad) compute and write in for these logits: float32 for
 * bfloat16 logits, else the logits' own. */
fr_dtype fr_ce_dtype(fr_dtype logits);
/* SoftmaxCrossEntropyGrad's dx_dtype: *bf16 = 1 for "bfloat16"; errors name the node. */
FR_NODISCARD fr_status fr_ce_dx_bf16(const fr_node *n, fr_dtype logits, int *bf16);

#ifdef __cplusplus
}
#endif

#endif
