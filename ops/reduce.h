/* What the reduction ops (reduce.c: Reduce*, ArgMax/ArgMin) share with their backward op
 * (reduce_grad.c: ReduceGrad, ai.fp8run), and both with their CUDA launchers (ops/cuda/reduce*.cu). */
#ifndef FR_REDUCE_H
#define FR_REDUCE_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* C functions, also when the CUDA reduction launchers (ops/cuda/reduce*.cu) include this */
#endif

typedef enum red_kind { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_SUMSQ, R_L1, R_L2, R_LSE } red_kind;

/* reduce.c: a 0/1 integer attribute (default dflt); other values are FR_ERR_UNSUPPORTED naming
 * the node. */
FR_NODISCARD fr_status fr_reduce_bool_attr(const fr_node *n, const char *name, int64_t dflt, int *out);
/* reduce.c (the forward's gradient rule wires them): how many inputs ReduceGrad of this kind
 * takes: dy (1), dy and x (2) or dy, x and y (3). */
int fr_reduce_grad_inputs(red_kind k);
/* reduce_grad.c: ReduceGrad's attributes, read alike by the CPU kernel and the CUDA launcher: the kind (which
 * must take n_in inputs), and x's shape (`shape`, dims[*rank]) with its reduced axes (`axes`:
 * red[k] = 1, for k < FR_MAX_RANK). */
FR_NODISCARD fr_status fr_reduce_grad_kind(const fr_node *n, int n_in, red_kind *out);
FR_NODISCARD fr_status fr_reduce_grad_shape(const fr_node *n, int *rank, int64_t *dims, unsigned char *red);

#ifdef __cplusplus
}
#endif

#endif
