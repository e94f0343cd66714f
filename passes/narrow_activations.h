/* Narrow activations: a Linear whose output is read only by ops that take bfloat16 writes it in
 * bfloat16 (its y_dtype attribute, ops/linear.h), as autocast's Linear outputs are.
 *
 * Why: the Llama MLP's fused gate/up Linear writes [tokens, 2F] floats that the fused SwiGLU
 * reads and its gradient reads again in the backward (saved until then): at the 1B shape
 * 738 MB per layer in float32. In bfloat16 the GEMM writes half, SwiGLU and SwiGLUGrad read
 * half and the saved copy holds half (5.9 GB less at 1B, B8 x T2048). The values lose what
 * bf16 rounding loses (8 bits of mantissa), which the FP8/bf16 GEMMs reading the SwiGLU's
 * output then quantize further anyway; float32 (--precision fp32) runs are never narrowed.
 * Likewise the fused Q/K/V projection read by the fused attention (AttentionQKV,
 * ops/attention_qkv.h): its [tokens, (Hq + 2 Hk) D] floats (201 MB per layer at 1B) are
 * rounded to bf16 for cuDNN by AttentionQKV anyway; written in bf16, the GEMM writes half,
 * both stagings (forward, backward) read half and the saved copy holds half (1.6 GB at 1B).
 *
 * Which Linears: precision bf16 or fp8, float32 Y that is no graph output, and Y's only reader
 * is a SwiGLU, AttentionQKV's X or a Gelu (the backward's SwiGLUGrad / AttentionQKVGrad /
 * ActivationGrad, added later by autodiff, read what the forward read). A bias is added to the
 * float32 sum before the one rounding (ops/linear.h). In SwiGLU's two-input form both gate and
 * up must qualify (one dtype). A Gelu reading or writing bfloat16 becomes ai.fp8run::Gelu, whose
 * y_dtype gives Y's dtype (ONNX's Gelu keeps X's type).
 *
 * The fused producers of the FP8 Linears' inputs likewise (their y_dtype / o_dtype): AddRMSNorm's
 * and AddLayerNorm's normalized Y, SwiGLU's y, AttentionQKV's O and Gelu's Y (GPT-2's and
 * GPT-NeoX's MLP, read by the down projection) when every reader is the X of a bf16/fp8 Linear
 * (which quantizes or rounds it to bf16 anyway: the Linear reads 2 bytes instead of 4, the
 * producer writes 2). AddRMSNormGrad / AddLayerNormGrad read H, SwiGLUGrad gate/up, not these; AttentionQKVGrad
 * reads O in bf16, ActivationGrad reads Gelu's X, not its Y. And a bf16/fp8 Linear whose Y only AddRMSNorm's (AddLayerNorm's) branch
 * input B reads (the attention and MLP outputs added to the float32 residual, as autocast adds them).
 * Last, a bf16 Linear whose X is bfloat16 now drops its Xq output (X's bf16 copy, saved for the
 * weight gradient when X was float32): the gradient reads X itself, and the forward no longer
 * copies every such X (at 1B in bf16, 0.9 GB a layer read and written).
 * The backward's counterpart is passes/narrow_gradients.h. */
#ifndef FR_NARROW_ACTIVATIONS_H
#define FR_NARROW_ACTIVATIONS_H

#include "graph/ir.h"

/* *count receives the number of outputs narrowed and of copies dropped. */
FR_NODISCARD fr_status fr_narrow_activations(fr_graph *g, int *count);

/* Shared with passes/narrow_gradients.c: n is a live ai.fp8run `op` node (Linear,
 * LinearGradData, LinearGradWeight) in bf16 or fp8 precision. */
int fr_narrow_lowp_linear(const fr_node *n, const char *op);
/* n is a live bf16/fp8 Linear whose Y is still float32. */
int fr_narrow_linear_y(const fr_node *n);
/* reader(n, slot): may input `slot` of node n read the value in bfloat16? */
typedef int (*fr_narrow_reader_fn)(const fr_node *n, int slot);
/* v is float32, no graph output, has at least one reader and every live reader's slot passes ok. */
int fr_narrow_readers_all(const fr_graph *g, int v, fr_narrow_reader_fn ok);

#endif
