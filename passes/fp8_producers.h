/* FP8-emitting producers, on the differentiated graph: an op that makes an fp8 Linear's X (or
 * a data gradient's dY) writes its codes itself, so the operand is never written in bfloat16 and
 * the Linear quantizes nothing.
 *
 * Forward: the one-input SwiGLU feeding the MLP's down projection becomes
 * SwiGLUQuantize (ops/swiglu.h), which reads the Linear's scale_x (the delayed recipe's state)
 * and writes the codes and the amax the Linear wrote (its amax_x output moves to the producer;
 * the delayed recipe's history reads the same value). The Linear reads the codes (ops/linear.h,
 * an E4M3 X) and multiplies them with 1 / scale_x: Y is the same bit for bit.
 *
 * Only where nothing else reads X: the Linear saves no Xq (its weight gradient remakes X from
 * the gate/up output, FP8RUN_WGRAD_OPERAND=remade with x_glu), no LoRA adapter or other node reads
 * X, and X is no graph output. Per-tensor delayed recipe only (the current recipe would need X's
 * amax before the codes: two passes over gate/up). At 1B, B8 x T2048 it saves a layer's
 * bfloat16 X written and read (176 MiB each way) and the Linear's quantization pass.
 *
 * Backward: the one-input SwiGLUGrad whose d_gate_up only the gate/up projection's fp8
 * LinearGradData reads (delayed recipe) becomes SwiGLUGradQuantize (ops/swiglu.h): it reads the
 * data gradient's scale_dy and writes dY's codes for that GEMM, the transposed codes and their
 * scale_inv for the weight gradient, and amax_dy (the data gradient's outputs dYq,
 * dYq_scale_inv and amax_dy move to it, the same values). The data gradient reads the codes
 * (ops/linear.h, dY as codes) and multiplies them with 1 / scale_dy: dX and dW are the same bit
 * for bit. Where the GPU kernel's tiles take it: bfloat16 gate_up, dy and d_gate_up (the
 * narrowed graph), tokens a multiple of 16, F of 64. At 1B it saves a layer's bfloat16 d_gate_up
 * written and read (352 MiB each way) and reads gate_up and dy once for both halves. */
#ifndef FR_FP8_PRODUCERS_H
#define FR_FP8_PRODUCERS_H

#include "graph/ir.h"

/* Rewrite g (forward and backward, in executable order; the SwiGLUGrad nodes only when grads);
 * *forward, *backward: the SwiGLU and SwiGLUGrad nodes rewritten. */
FR_NODISCARD fr_status fr_fp8_producers(fr_graph *g, int grads, int *forward, int *backward);

#endif
