/* Fused SwiGLU (domain ai.fp8run): the contract shared by the CPU reference (ops/swiglu.c), the
 * fusion pass that emits it (passes/swiglu_fuse.c) and the CUDA kernels (ops/cuda/swiglu.cu).
 *
 * Why: the Llama MLP's act = Mul(Mul(gate, Sigmoid(gate)), up) materializes the Split copies of
 * the fused gate/up Linear, Sigmoid(gate), gate * sig and the product, and its backward keeps
 * four of them alive; at the 1B config each is [16384, 5632] float32 (369 MB) per layer. The
 * fused op reads gate and up once and keeps nothing but its inputs for the backward.
 *
 * SwiGLU(gate, up) -> y          two-input form: gate, up of one shape, y that shape.
 * SwiGLU(gate_up) -> y           one-input form: gate_up [..., 2F]; gate = its first F columns
 *                                of the last axis, up = the last F; y [..., F]. It reads the
 *                                fused gate/up Linear's output directly (no Split copies).
 *   y = gate * sigmoid(gate) * up, float32 (float64 allowed for gradient checks), no
 *   broadcasting. gate/up may be bfloat16 (the gate/up Linear's y_dtype, pass
 *   narrow_activations): they are widened exactly, y and every gradient are float32 unless
 *   the attributes below narrow them.
 *
 * bfloat16 around the FP8 Linears, half the bytes between them (values "float32" (default: today's dtype, float64
 * for float64 inputs) | "bfloat16", an error with float64 inputs):
 *   SwiGLU attribute y_dtype: y is the float32 y rounded to bfloat16 (nearest even).
 *   SwiGLUGrad attribute dx_dtype: dgate and dup (d_gate_up) likewise rounded to bfloat16.
 *   SwiGLUGrad's dy may be bfloat16 with float32 or bfloat16 gate/up (widened exactly).
 *   Every bfloat16 input computes the bits its float32 tensor of the same values computes.
 *
 * Attribute activation (default "silu"): the gate's act(g) = g * s(g) with
 *   "silu"       s = sigmoid(g)                                       (SwiGLU, Llama)
 *   "gelu_tanh"  s = sigmoid(2 k (g + c g^3)), k = sqrt(2 / pi), c = 0.044715, which is
 *                0.5 (1 + tanh(k (g + c g^3)))                        (GeGLU, Gemma)
 *   "gelu"       s = Phi(g) = 0.5 erfc(-g / sqrt 2)                   (GeGLU, erf GELU)
 *   so y = act(g) * up. SwiGLUGrad carries the same attribute.
 *
 * SwiGLUGrad(gate, up, dy) -> (dgate, dup)     two-input form (either output may be omitted)
 * SwiGLUGrad(gate_up, dy) -> d_gate_up         one-input form, [..., 2F]: dgate then dup
 *   dup = dy * act(g);  dgate = dy * up * act'(g), with act' = s (1 + g (1 - s)) for silu,
 *   s + g 2 s (1 - s) k (1 + 3 c g^2) for gelu_tanh, Phi(g) + g phi(g) for gelu.
 *
 * CPU: every element computed in double and rounded once to float32 (within an ulp or two of
 * the unfused float32 chain, which rounds after each op), then to bfloat16 where asked. CUDA:
 * float32 math, within 1e-5 relative; its bfloat16 outputs are its float32 ones rounded.
 * The gradient rule of SwiGLU emits one SwiGLUGrad node reading the forward's inputs. */
/* SwiGLUQuantize(gate_up [..., 2F], scale [1]) -> (codes [..., F] float8e4m3fn, amax [1])
 *   The one-input SwiGLU's y (attributes activation and y_dtype as SwiGLU's: y_dtype
 *   "bfloat16" rounds y to bfloat16 first), written as the E4M3 codes the fp8 Linear reading
 *   it would make with the delayed recipe's scale (ops/linear.h: code = sat(rn(y * scale))),
 *   and amax = max |y| (NaN if any NaN, else Inf if any Inf), the Linear's amax_x. Emitted by
 *   passes/fp8_producers.c after autodiff (no gradient rule): the Linear then reads the codes
 *   and the bfloat16 y is never written. A scale that is not finite and > 0 is FR_ERR_NUMERIC on
 *   the CPU; the GPU writes codes and leaves the refusal to the Linear, which makes its output
 *   NaN (ops/cuda/quantize.cuh).
 * SwiGLUGradQuantize(gate_up [..., 2F], dy [..., F], scale [1])
 *        -> (codes [..., 2F], codes_t [2F, M]?, scale_inv [1]?, amax [1]?)
 *   The one-input SwiGLUGrad's d_gate_up (attributes activation and dx_dtype as SwiGLUGrad's:
 *   dx_dtype "bfloat16" rounds it to bfloat16 first), written as the codes the fp8
 *   LinearGradData reading it would make with the delayed recipe's scale_dy, in the Linear's
 *   dY format (attribute codes_dtype: "float8e5m2", the default, as fp8_format "hybrid", or
 *   "float8e4m3fn" for "e4m3"); codes_t: the same codes transposed, [2F, M] with M the tokens
 *   (LinearGradData's dYq, the weight gradient's operand); scale_inv = 1 / scale (its
 *   dYq_scale_inv); amax = max |d_gate_up| as fr_amax gives it (its amax_dy). Emitted by
 *   passes/fp8_producers.c after autodiff: the data gradient then reads the codes, and the
 *   bfloat16 d_gate_up is never written. A bad scale: as SwiGLUQuantize. */
#ifndef FR_OPS_SWIGLU_H
#define FR_OPS_SWIGLU_H

#include "ops/op.h"

extern const fr_op_def fr_ops_swiglu[]; /* SwiGLU, SwiGLUGrad */

/* The problem as rows of F elements: gate element (r, j) is at r * in_stride + j of
 * its input, up element (r, j) at up_off + r * in_stride + j of its input (input 0 in the
 * one-input form, input 1 in the two-input form). */
enum { FR_GLU_SILU, FR_GLU_GELU_TANH, FR_GLU_GELU };

/* The activation attribute's names ("silu", "gelu_tanh", "gelu") as FR_GLU_*; else an error. */
FR_NODISCARD fr_status fr_glu_act_parse(const char *name, int *act);

typedef struct fr_swiglu_geom {
    int fused;          /* 1: one-input form */
    int act;            /* FR_GLU_*: the activation attribute */
    int64_t rows, F;
    int64_t in_stride;  /* 2F fused, F otherwise */
    int64_t up_off;     /* F fused (into input 0), 0 otherwise (into input 1) */
    fr_dtype in_dtype;  /* of gate/up */
    fr_dtype math;      /* the computing dtype: fr_swiglu_out_dtype(in_dtype) */
    fr_dtype out_dtype; /* of the node's outputs: y (y_dtype) or the gradients (dx_dtype) */
    fr_dtype dy_dtype;  /* SwiGLUGrad's dy: math or bfloat16 (0 for SwiGLU) */
} fr_swiglu_geom;

/* bfloat16 gate/up (a Linear with y_dtype bfloat16) compute in float32; float32 and float64
 * stay as they are. */
static inline fr_dtype fr_swiglu_out_dtype(fr_dtype in) { return in == FR_BF16 ? FR_F32 : in; }

/* Checks dtypes and shapes of a SwiGLU (grad = 0) or SwiGLUGrad (grad = 1) node's inputs and
 * its y_dtype / dx_dtype attribute, and fills *geo; errors name the node. */
FR_NODISCARD fr_status fr_swiglu_geometry(const fr_graph *g, const fr_node *n, int grad, fr_swiglu_geom *geo);

/* The one-input form's geometry for gate_up [rows, 2F] of in_dtype (float32 or bfloat16), y of
 * out_dtype (float32 or bfloat16): for callers that remake a SwiGLU's output (ops/linear.h,
 * x_glu). */
fr_swiglu_geom fr_swiglu_fused_geom(int act, int64_t rows, int64_t F, fr_dtype in_dtype, fr_dtype out_dtype);

/* The CPU forward: y [rows, F] from gate/up as geo places them; the bits SwiGLU writes. */
void fr_swiglu_forward_cpu(const fr_swiglu_geom *geo, const void *gate, const void *up, void *y);

/* The CPU backward: dgate, dup (either may be NULL) from gate/up and dy as geo places them;
 * the bits SwiGLUGrad writes. The one-input form writes both into d_gate_up (dgate == dup). */
void fr_swiglu_backward_cpu(const fr_swiglu_geom *geo, const void *gate, const void *up, const void *dy, void *dgate,
                            void *dup);

#endif
