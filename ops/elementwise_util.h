/* Iteration over numpy-broadcast operands for the elementwise families (ops/unary_math.c,
 * ops/unary.c, ops/binary.c).
 *
 * fr_ew_run walks the output's index space once. Dims of size 1 are dropped and adjacent
 * dims are merged wherever every operand stays linear across them, so the common cases
 * turn into few, long inner runs: same shape -> one run over everything; scalar vs tensor
 * -> one run with the scalar's step 0; "row" broadcast [M,N] op [N] -> M runs of N with
 * both steps 1; "column" broadcast [M,N] op [M,1] -> M runs of N with steps 1 and 0. */
#ifndef FR_ELEMENTWISE_UTIL_H
#define FR_ELEMENTWISE_UTIL_H

#include "ops/op.h"

#define FR_EW_MAX_OPS 5

/* One inner run of n elements. p[0] is the output, p[1..] the inputs, each pointing at its
 * run's first element. step[k] is 1 when operand k advances one element per output element
 * and 0 when it repeats a single element (step[0] is always 1). */
typedef void (*fr_ew_fn)(int64_t n, char *const *p, const int64_t *step, void *arg);

/* ops[0] is the output: dense, its shape is the iteration space. ops[1..n_ops-1] are inputs
 * whose shapes must broadcast to it (right-aligned, each dim 1 or equal); an input may be
 * the output tensor itself (in-place accumulation). A shape that does not broadcast is
 * FR_ERR_SHAPE naming the node. Nothing is called for an empty output. */
FR_NODISCARD fr_status fr_ew_run(const fr_node *node, int n_ops, fr_tensor *const *ops, fr_ew_fn fn,
                    void *arg);

/* Copy `src` broadcast to `dst`'s shape (Expand, and Identity-like ops); any dtype, bytes
 * copied by element size. dst and src must have the same dtype. */
FR_NODISCARD fr_status fr_ew_broadcast_copy(const fr_node *node, fr_tensor *dst, const fr_tensor *src);

/* Output and input must hold the same number of elements (the executor allocates outputs
 * from infer(); a mismatch means the graph changed after inference). */
FR_NODISCARD fr_status fr_ew_same_numel(const fr_kernel_ctx *ctx, const fr_tensor *x, const fr_tensor *y);

#endif
