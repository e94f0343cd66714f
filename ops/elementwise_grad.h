/* Backward ops of the elementwise families (domain ai.fp8run), emitted by the gradient rules
 * of ops/unary.c and ops/binary.c. Each is one fused pass over its tensors, so a training
 * step pays one kernel per activation instead of a chain of elementwise nodes. Math is done
 * in double and rounded once to the output dtype (float32 or float64).
 *
 * ActivationGrad(dy, v) {op, approximate, alpha} -> dx
 *   op is a unary op of ops/ew_unary.def whose gradient rule is EW_ACT(FROM, EVAL, dx): its row
 *   gives v (FROM = X: the forward input x, Y: the forward output y, whichever the derivative
 *   is cheapest and most accurate from) and dx from g = dy and v, e.g.
 *     Exp         y   dy * y
 *     Relu        y   y <= 0 ? 0 : dy       (selected, not multiplied: PyTorch threshold_backward)
 *     LeakyRelu   x   x > 0 ? dy : alpha dy (attribute alpha, default 0.01)
 *     Gelu        x   dy * d/dx gelu(x), approximate = "none" (erf) or "tanh"
 *   dy, v and dx share one shape and dtype; for Gelu dy and x may each be bfloat16 instead (the
 *   narrowed activations' and gradients'), dx then float32: the float32 result on the widened
 *   values.
 *
 * PowGrad(dy, x, e) {input = 0 | 1} -> d(loss)/dx (input 0) or d(loss)/de (input 1), with dy's
 *   (the broadcast) shape and the dtype of that input; the rule sums it to the input's shape.
 *   PyTorch's conventions: base: e == 0 ? 0 : dy * e * x^(e-1);
 *   exponent: dy * (x == 0 && e >= 0 ? 0 : x^e * log(x)), so NaN for x < 0.
 *
 * ExtremumGrad(dy, x_0, ..., x_{k-1}) {mode = "Max" | "Min"} -> dx_0, ..., dx_{k-1}
 *   in dy's shape: dy goes to the inputs equal to the result, split evenly among ties (for two
 *   inputs half/half, as torch.maximum/minimum); when the result is NaN every input gets dy.
 *
 * ClipGrad(dy, x, min?, max?) {input = 0 | 1 | 2, min, max} -> gradient of x (x's shape) or of
 *   the min / max bound input (its one-element shape). Bounds are the inputs when present,
 *   else the float attributes min/max (legacy Clip), else unbounded. PyTorch's clamp:
 *   x: lo <= x <= hi ? dy : 0 (the gradient passes at the bounds);
 *   min: sum of dy where x < lo (and lo < hi when both bounds exist);
 *   max: sum of dy where x > hi (or everywhere when hi < lo).
 *
 * FmodGrad(dy, a, b) -> d(loss)/db of Mod(a, b) {fmod=1} in dy's shape: -dy * trunc(a / b)
 *   (d/da is dy itself). */
#ifndef FR_ELEMENTWISE_GRAD_H
#define FR_ELEMENTWISE_GRAD_H

#include "ops/grad.h"
#include "ops/op.h"

extern const fr_op_def fr_ops_elementwise_grad[];

/* The gradient rule of a unary activation node (ctx->node_id is an ew_unary.def op with an
 * EW_ACT rule): emits ActivationGrad with the right forward value and the node's attributes;
 * *out receives dx. */
FR_NODISCARD fr_status fr_ew_emit_activation_grad(fr_grad_ctx *ctx, int *out);

#endif
