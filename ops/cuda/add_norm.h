/* RMSNorm rows at memory speed (ops/cuda/add_norm.cu), float32 (B, dY and Y may be bfloat16),
 * Scale of exactly the row length shared by every row: the kernels of ai.fp8run::AddRMSNorm /
 * AddRMSNormGrad (ops/add_norm.c) and the fast path of RMSNormalization / RMSNormGrad
 * (ops/cuda/norm.cu). C++ linkage: CUDA files only. */
#ifndef FR_CUDA_ADD_NORM_H
#define FR_CUDA_ADD_NORM_H

#include "ops/cuda/cuda_kernel.h"

/* 1 when rows of len elements fit the register path (every element read once, len % 4 == 0,
 * len <= 8192); the kernels below also take other lengths, re-reading the row (L1/L2). */
int fr_rms_rows_fast(int64_t len);
/* The scratch of fr_rms_rows_bwd: per-block partial sums of dScale (double). */
size_t fr_rms_rows_bwd_scratch(int64_t rows, int64_t len);

/* h = a + b (b may be NULL: h = a; h may be NULL: not stored), y = h / rms(h) * w, per row. */
FR_NODISCARD fr_status fr_rms_rows_fwd(const fr_node *n, cudaStream_t st, const float *a, const float *b,
                                       const float *w, float *h, float *y, int64_t rows, int64_t len, float eps);
/* The same with B (NULL or float32 / bfloat16: widened exactly) and Y (float32 / bfloat16: the
 * float32 Y rounded) of dtypes b_dt, y_dt, and hs (NULL, or bfloat16: h rounded, for the
 * backward); an error names any other dtype. */
FR_NODISCARD fr_status fr_rms_rows_fwd_dt(const fr_node *n, cudaStream_t st, const float *a, const void *b,
                                          fr_dtype b_dt, const float *w, float *h, void *y, fr_dtype y_dt, void *hs,
                                          int64_t rows, int64_t len, float eps);
/* dx = dh + RMSNorm's dX (dh may be NULL), dw = sum over rows of dy * x / rms(x) (may be NULL);
 * scratch of fr_rms_rows_bwd_scratch bytes; sm_count sizes the grid (one wave). Deterministic on a
 * given device: no atomics. */
FR_NODISCARD fr_status fr_rms_rows_bwd(const fr_node *n, cudaStream_t st, int sm_count, const float *dy, const float *x,
                                       const float *w, const float *dh, float *dx, float *dw, void *scratch,
                                       size_t scratch_bytes, int64_t rows, int64_t len, float eps);
/* The same with dy and x of dtypes dy_dt, x_dt (float32 or bfloat16: widened exactly). */
FR_NODISCARD fr_status fr_rms_rows_bwd_dt(const fr_node *n, cudaStream_t st, int sm_count, const void *dy,
                                          fr_dtype dy_dt, const void *x, fr_dtype x_dt, const float *w, const float *dh,
                                          float *dx, float *dw, void *scratch, size_t scratch_bytes, int64_t rows,
                                          int64_t len, float eps);

#endif
