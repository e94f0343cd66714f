/* Host-side planning of the layout ops, shared by the CPU kernels (ops/layout.c) and the CUDA
 * launchers (ops/cuda/layout.cu) so both backends check, clamp and walk shapes the same way:
 * Transpose's perm, Split's sizes, Slice's ONNX clamping, Tile's dims, the SliceGrad /
 * TileGrad attribute checks, and the strided view the copy engines walk. */
#ifndef FR_LAYOUT_PLAN_H
#define FR_LAYOUT_PLAN_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* C functions, also when ops/cuda/layout.cu includes this */
#endif

#define FR_MAX_VIEW (2 * FR_MAX_RANK) /* Tile views each dim as (repeat, dim) */

/* A contiguous tensor seen through strides of another: contiguous element i (row-major over
 * dims) meets strided element offset + sum_k idx_k * stride[k]. */
typedef struct fr_view {
    int rank;
    int64_t dims[FR_MAX_VIEW];
    int64_t stride[FR_MAX_VIEW]; /* in elements per step of the dim; any sign, 0 repeats */
    int64_t offset;              /* element of the strided side that contiguous element 0 meets */
} fr_view;

/* Drop size-1 dims and merge neighbours that are contiguous in the strided side. Returns 0
 * when the view holds no element. */
int fr_view_simplify(fr_view *v);
/* Transpose: output dim k walks input dim perm[k] of a contiguous [rank, dims] input. */
void fr_view_permute(fr_view *v, int rank, const int64_t *dims, const int *perm);
/* Slice (and SliceGrad, the strided side being its output): len[k] elements from start[k] in
 * steps of step[k] along every dim of a contiguous [rank, dims] tensor. */
void fr_view_slice(fr_view *v, int rank, const int64_t *dims, const int64_t *start,
                   const int64_t *step, const int64_t *len);
/* Tile: output dim k viewed as (repeat, dim); the repeat walks the input with stride 0. */
void fr_view_tile(fr_view *v, int rank, const int64_t *dims, const int64_t *reps);
/* Fill the contiguous `dst` from `src` through the view (elements of es bytes; view_copy.c). */
void fr_view_copy(char *dst, const char *src, fr_view v, size_t es);

/* Transpose's perm attribute (default: reversed dims), checked to be a permutation. */
FR_NODISCARD fr_status fr_transpose_perm(const fr_node *n, int rank, int *perm);

/* Sizes of the n_out parts along a dim of size `dim`. `split` (cnt >= 0 entries) comes from
 * the attribute (opset < 13) or the input (13+); without it, opset 18's num_outputs gives
 * ceil(dim / num_outputs) per part with a smaller last part, and otherwise the dim must
 * divide evenly among the outputs. */
FR_NODISCARD fr_status fr_split_sizes(const fr_node *n, int64_t opset, int64_t dim, int cnt,
                         const int64_t *split, int n_out, int64_t *sizes);

/* Per-dim start/step/length of a slice, clamped exactly as the ONNX spec says: negative
 * starts/ends count from the end; with a positive step both clamp to [0, dim], with a
 * negative step start clamps to [0, dim-1] and end to [-1, dim-1] (so INT64_MIN reverses
 * through element 0). */
typedef struct fr_slice_plan {
    int64_t start[FR_MAX_RANK], step[FR_MAX_RANK], len[FR_MAX_RANK];
} fr_slice_plan;

FR_NODISCARD fr_status fr_slice_resolve(const fr_node *n, int rank, const int64_t *dims, int cnt,
                           const int64_t *starts, int n_ends, const int64_t *ends, int n_axes,
                           const int64_t *axes, int n_steps, const int64_t *steps,
                           fr_slice_plan *p);
/* An ints attribute of Slice before opset 10 copied into vals (at most FR_MAX_RANK entries);
 * *cnt = -1 when absent and not required. */
FR_NODISCARD fr_status fr_slice_attr(const fr_node *n, const char *name, int required, int *cnt, int64_t *vals);

/* Tile's output dims, dims[k] * reps[k] (cnt entries, one per dim; no overflow). */
FR_NODISCARD fr_status fr_tile_dims(const fr_node *n, int rank, const int64_t *dims, int cnt,
                       const int64_t *reps, int64_t *out);

/* SliceGrad's attributes against dy [rank, dims] (float32/64): the output shape and the
 * resolved starts and steps, every write landing inside the output. */
FR_NODISCARD fr_status fr_slice_grad_check(const fr_node *n, fr_dtype dt, int rank, const int64_t *dims,
                              int *out_rank, const int64_t **shape, const int64_t **starts,
                              const int64_t **steps);
/* TileGrad's shape attribute against dy [rank, dims] (float32/64): dy is a tiling of it. */
FR_NODISCARD fr_status fr_tile_grad_check(const fr_node *n, fr_dtype dt, int rank, const int64_t *dims,
                             int *out_rank, const int64_t **shape);

#ifdef __cplusplus
}
#endif

#endif
