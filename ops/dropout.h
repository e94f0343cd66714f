/* Dropout ops (ops/dropout.c; CUDA: ops/cuda/dropout.cu for KeyedDropout, ops/cuda/
 * elementwise_unary.cu for ONNX Dropout).
 *
 * ONNX Dropout runs as the identity (mask all true). Opset 6 has `is_test` (0 = training, the
 * default); 7..11 have no mode (a runtime runs them in inference); 12+ take optional `ratio`
 * and `training_mode` inputs. Training mode with ratio > 0 is FR_ERR_UNSUPPORTED here: at
 * infer when the inputs are constants, at run time otherwise. `fp8run train` first rewrites
 * the training-mode ones whose ratio is a constant into KeyedDropout (passes/dropout.h), so
 * only inference runs and non-constant ratios meet the refusal. The mask is bool from opset
 * 10, the data dtype before.
 *
 * KeyedDropout(x, key) -> y   (domain ai.fp8run), attributes ratio (p in [0, 1)) and seed
 * (the node's stream, an int64 the pass that adds the node picks):
 *     y[i] = x[i] * (keep(i) ? 1 / (1 - p) : 0)
 * keep(i) is the counter-based hash of ops/dropout_mask.h over key = int64 [3] {seed, step,
 * micro-batch} (what the trainer feeds through the graph input FR_DROPOUT_KEY_INPUT), the
 * node's stream and i, the element's flat row-major index. float32, float16 and bfloat16
 * multiply in float32 (16-bit types rounded once), float64 in double; a dropped NaN or Inf
 * gives NaN as in torch (x * 0), a dropped finite x gives a zero.
 * Its gradient is the same op on dy with the same key and attributes, dx = dy * mask / (1 - p):
 * the backward recomputes the mask from the hash instead of storing it. Stored as bytes it
 * would keep one byte per element alive from the forward to the backward (for LoRA on a
 * Llama-3-8B shape, B1 x T2048, d 4096 on q/k/v/o of 32 layers: 1 GiB); recomputing costs one
 * 64-bit mix per element in a kernel that is bound by memory anyway. */
#ifndef FR_OPS_DROPOUT_H
#define FR_OPS_DROPOUT_H

#include "ops/op.h"

extern const fr_op_def fr_ops_dropout[]; /* Dropout, KeyedDropout */

/* KeyedDropout's attributes: ratio in [0, 1) (else FR_ERR_GRAPH naming the node) and the
 * node's stream (its seed attribute, default 0). */
FR_NODISCARD fr_status fr_keyed_dropout_params(const fr_node *n, float *ratio, uint64_t *stream);

#endif
