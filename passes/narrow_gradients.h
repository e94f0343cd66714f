/* Narrow gradients: the backward's counterpart of narrow_activations (same switch,
 * --no-narrow-activations), run on the differentiated graph. A gradient that only the FP8/bf16
 * Linears' backward reads, or that only a fused op's backward reads from a Linear's backward,
 * is written in bfloat16 (the producers' dx_dtype attribute):
 *   - SwiGLUGrad's d_gate_up (dgate, dup) and AttentionQKVGrad's dX when every reader is the dY
 *     of a bf16/fp8 LinearGradData or the Ys of a LinearGradWeight (the gate/up and Q/K/V
 *     projections' backward), which quantize it to E5M2 (or round it to bf16) anyway; with a
 *     q/k norm (Qwen3, OLMo2, Gemma3) AttentionQKVGrad's norm weights' gradients stay float32;
 *   - LinearGradData's dX when every reader is SwiGLUGrad's dy, AttentionQKVGrad's dO or the dy
 *     of Gelu's ActivationGrad (the down and O projections' backward feeding the fused ops' and
 *     the GELU's backward; ActivationGrad's dx stays float32: a biased up projection's bias
 *     gradient sums it);
 *   - the LM head: a bf16/fp8 Linear whose logits only the loss head reads
 *     (SoftmaxCrossEntropy and its gradient, which widen them) writes them in bfloat16 (y_dtype;
 *     the loss head is added by the trainer after the forward's passes, hence here), and
 *     SoftmaxCrossEntropyGrad's dlogits, read by that Linear's backward, are bfloat16 too
 *     (ops/loss.c): at B8 x T2048 and a 32000 vocabulary, 2.1 GB less each at the step's peak.
 * Why: at 1B (B8 x T2048) these are [16384, 11264] and [16384, 3072] floats per layer written
 * and read once each; the FP8 dY cast + transpose reads 2 bytes per element instead of 4.
 * The residual stream's gradient (AddRMSNormGrad's dX, summed with the branches') stays float32.
 * The residual stream itself stays float32 too, but what the norm's backward reads of it does
 * not: where AddRMSNorm's Y is bfloat16 (narrowed for the Linears), AddRMSNorm also writes H's
 * bfloat16 copy (output Hs) and AddRMSNormGrad reads that. The float32 H then dies at the next
 * layer's add instead of living until the backward: at 1B (B8 x T2048) 64 MiB less a norm held,
 * 2 GiB at the step's peak, for a backward whose statistics are those of the rounded H (as in a
 * bf16 model; test_narrow_gradients bounds the difference). */
#ifndef FR_NARROW_GRADIENTS_H
#define FR_NARROW_GRADIENTS_H

#include "graph/ir.h"

/* *count receives the number of gradient nodes narrowed, *residuals the norm backwards that
 * read H's bfloat16 copy (residuals NULL: they keep reading the float32 H). */
FR_NODISCARD fr_status fr_narrow_gradients(fr_graph *g, int *count, int *residuals);

#endif
