/* LayerNorm's backward at memory speed (ops/cuda/add_layer_norm.cu, AddLayerNormGrad's kernels
 * with one norm and no dH): the fast path of LayerNormGrad (ops/cuda/norm.cu) for float32 rows
 * whose Scale (and B) is exactly the row, shared by every row. C++ linkage: CUDA files only. */
#ifndef FR_CUDA_ADD_LAYER_NORM_H
#define FR_CUDA_ADD_LAYER_NORM_H

#include "ops/cuda/cuda_kernel.h"

/* 1 when rows of len elements fit the register path (len % 4 == 0, len <= 4096); the kernel
 * below takes other lengths too, in double and re-reading the row. */
int fr_ln_rows_fast(int64_t len);
/* The scratch of fr_ln_rows_bwd: the blocks' partial sums of dScale and dB (double). */
size_t fr_ln_rows_bwd_scratch(int64_t rows, int64_t len);

/* dx = LayerNorm's dX of the rows of x (statistics recomputed, epsilon eps), dw = sum over rows
 * of dy xh, db = sum of dy (either may be NULL); scratch of fr_ln_rows_bwd_scratch bytes;
 * sm_count sizes the grid (one wave). Deterministic on a given device: no atomics. */
FR_NODISCARD fr_status fr_ln_rows_bwd(const fr_node *n, cudaStream_t st, int sm_count, const float *dy, const float *x,
                                      const float *w, float *dx, float *dw, float *db, void *scratch,
                                      size_t scratch_bytes, int64_t rows, int64_t len, float eps);

#endif
