/* Backward ops of the elementwise families (domain ai.fp8run), emitted by the gradient rules
 * of ops/unary.c and ops/binary.c. Each is one fused pass over its tensors, so a training
 * step pays one kernel per activation instead of a chain of elementwise nodes. Math is done
 * in double and rounded once to the output dtype (float32 or float64).
 *
 * ActivationGrad(dy, v) {op, approximate, alpha} -> dx
 *   dy, v and dx share one shape and dtype. v is the forward input x or the forward output y,
 *   whichever the derivative is cheapest and most accurate from:
 *     op          v   dx
 *     Abs         x   dy * sgn(x)           (sgn(0) = sgn(NaN) = 0, as PyTorch)
 *     Exp         y   dy * y
 *     Log         x   dy / x
 *     Sqrt        y   dy / (2 y)
 *     Reciprocal  y   -dy * y^2
 *     Tanh        y   dy * (1 - y^2)
 *     Sigmoid     y   dy * y (1 - y)
 *     Relu        y   y <= 0 ? 0 : dy       (selected, not multiplied: PyTorch threshold_backward)
 *     LeakyRelu   x   x > 0 ? dy : alpha dy (attribute alpha, default 0.01)
 *     Erf         x   dy * 2/sqrt(pi) exp(-x^2)
 *     Gelu        x   dy * d/dx gelu(x), approximate = "none" (erf) or "tanh"
 *     Softplus    x   dy * sigmoid(x)
 *     Sin         x   dy * cos(x)
 *     Cos         x   -dy * sin(x)
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

#include "../passes/autodiff.h"
#include "op.h"

extern const fr_op_def fr_ops_elementwise_grad[];

/* The gradient rule of a unary activation node (ctx->node_id is Abs, Exp, ..., Cos in the
 * table above): emits ActivationGrad with the right forward value and the node's attributes;
 * *out receives dx. */
fr_status fr_ew_emit_activation_grad(fr_grad_ctx *ctx, int *out);

/* Whether ActivationGrad supports `op` (1) and, if so, reads the forward output (*reads_y = 1)
 * or input (0). */
int fr_ew_activation_grad_known(const char *op, int *reads_y);

#endif
