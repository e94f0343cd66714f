/* Host-side shape checks of the gather family, shared by the CPU kernels (ops/gather.c) and
 * the CUDA launchers (ops/cuda/gather.cu) so both backends accept the same nodes and fail
 * with the same messages. */
#ifndef FR_GATHER_PLAN_H
#define FR_GATHER_PLAN_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* C functions, also when ops/cuda/gather.cu includes this */
#endif

/* Indices are int64 or int32. */
FR_NODISCARD fr_status fr_gather_index_dtype_ok(const fr_node *n, fr_dtype dt);
/* Gather / GatherElements: the axis attribute normalized against data of rank >= 1. */
FR_NODISCARD fr_status fr_gather_axis(const fr_node *n, int rank, int *axis);
/* Gather's output: data.shape[:axis] + indices.shape + data.shape[axis+1:]. */
FR_NODISCARD fr_status fr_gather_shape(const fr_node *n, int r, const int64_t *dd, int q, const int64_t *di,
                          int axis, int *rank, int64_t *dims);
/* GatherElements: indices of data's rank, no larger than data outside the axis. */
FR_NODISCARD fr_status fr_gather_elements_shapes(const fr_node *n, int r, const int64_t *dd, int q,
                                    const int64_t *di, int axis);
/* GatherND with b batch dims: checks the shapes and gives the output's. */
FR_NODISCARD fr_status fr_gather_nd_shape(const fr_node *n, int64_t b, int r, const int64_t *dd, int q,
                             const int64_t *di, int *rank, int64_t *dims);
/* GatherND's batch_dims (an attribute from opset 12). */
FR_NODISCARD fr_status fr_gather_nd_batch_dims(const fr_node *n, int64_t opset, int64_t *b);
/* The scatter-adds: 0 GatherGrad, 1 GatherElementsGrad, 2 GatherNDGrad. */
int fr_gather_scatter_kind(const fr_node *n);
/* A scatter-add's checks: its `shape` attribute (the forward data's shape, into rank / dims),
 * the forward op's shape checks against the indices [q, di] (the axis, or batch_dims for
 * kind 2, into *axis_or_b), and dy (float32/64) against the forward output's shape. */
FR_NODISCARD fr_status fr_gather_scatter_check(const fr_node *n, int kind, fr_dtype dy_dt, int dy_rank,
                                  const int64_t *dy_dims, fr_dtype idx_dt, int q, const int64_t *di,
                                  int *rank, int64_t *dims, int *axis_or_b);

#ifdef __cplusplus
}
#endif

#endif
