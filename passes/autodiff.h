/* Reverse-mode automatic differentiation at graph level.
 * fr_autodiff appends the backward graph to g: starting from d(loss)/d(loss) = 1, it walks
 * the forward nodes in reverse topological order and calls each op's gradient rule
 * (fr_op_def.grad), which emits ordinary graph nodes. Gradients reaching the same value from
 * several consumers (tied weights, residual branches) are summed with Add nodes. */
#ifndef FR_AUTODIFF_H
#define FR_AUTODIFF_H

#include "ops/grad.h"

/* wrt: value ids to differentiate with respect to (parameters, or any float value).
 * grads_out[i] receives the value id of d(loss)/d(wrt[i]), or -1 when wrt[i] does not
 * influence the loss. loss must be a float scalar (rank 0 or a single element).
 * A non-differentiable op on a path from a wrt value to the loss is FR_ERR_UNSUPPORTED
 * naming the node and the value. Shapes of all new values are inferred. */
FR_NODISCARD fr_status fr_autodiff(fr_graph *g, int loss, int n_wrt, const int *wrt, int *grads_out);

#endif
