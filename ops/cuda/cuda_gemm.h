/* One wrapper over cublasLtMatmul for row-major operands, used by every GEMM of the CUDA
 * backend (MatMul, Gemm, Linear and its backward GEMMs).
 *
 *     D[M][N] = alpha * op(A) op(B) + beta * D          (per batch entry)
 *
 * with op(A) [M][K] (A stored [M][K], or [K][M] when trans_a), op(B) [K][N] (B stored [K][N],
 * or [N][K] when trans_b), every matrix row-major with its own leading dimension, batches
 * strided (stride 0 = the same A or B for every batch entry). beta != 0 accumulates into D
 * (cuBLASLt's C is D itself).
 *
 * Row-major -> column-major: cuBLASLt computes the column-major D^T [N][M] = op(B)^T op(A)^T,
 * so its "A" is our B and its "B" is our A, and its m, n are our N, M.
 *
 * Types (a_type = b_type except for fp8):
 *   FR_F32 x FR_F32 -> FR_F32   CUBLAS_COMPUTE_32F: true float32 products, never TF32
 *   FR_BF16/FR_F16 x same -> FR_F32 (or the input type)   CUBLAS_COMPUTE_32F
 *   FR_F64 x FR_F64 -> FR_F64   CUBLAS_COMPUTE_64F
 *   FR_F8E4M3/FR_F8E5M2 (not both E5M2) -> FR_F32 or FR_BF16   CUBLAS_COMPUTE_32F
 * FP8 on Hopper multiplies only the "TN" form: both operands K-contiguous, i.e. A stored
 * [M][K] (trans_a = 0) and B stored [N][K] (trans_b = 1); M, N, K, lda, ldb, ldd multiples
 * of 16 and 16-byte aligned pointers (the scale pointers too). The callers (ops/cuda/linear.cu) quantize into padded,
 * transposed copies so this always holds; a call that breaks it is FR_ERR_INTERNAL naming the
 * node and the shape, never cuBLASLt's own message.
 *
 * FP8 scales (device float32, the DEquantization factors scale_inv = 1 / scale):
 *   FR_GEMM_SCALE_TENSOR  one float for the whole operand;
 *   FR_GEMM_SCALE_VEC128  one float per 1x128 block along K of each row of the operand's
 *                         [rows][K] storage (rows = M for A, N for B), stored K-block-major:
 *                         sinv[(k / 128) * rows + row], ceil(K/128) * rows floats;
 *   FR_GEMM_SCALE_BLK128  one float per 128x128 block of the [rows][K] storage, stored
 *                         sinv[(row / 128) * L4 + k / 128] with L4 = ceil(K/128) rounded up to
 *                         a multiple of 4 (the entries past ceil(K/128) are never read);
 *   (cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F / VEC128_32F / BLK128x128_32F: the
 *   layouts of the cuBLAS documentation, "128-element 1D and 128x128 2D block scaling",
 *   written in our row-major terms). BLK128 x BLK128 is not supported by cuBLASLt.
 *
 * The heuristic's choice is cached per (types, M, N, K, batch, layouts, strides, scale modes,
 * pointer alignments) in ctx->gemm_cache; the workspace is ctx->workspace. Everything runs on
 * ctx->stream; nothing synchronizes. */
#ifndef FR_CUDA_GEMM_H
#define FR_CUDA_GEMM_H

#include "ops/cuda/cuda_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fr_gemm_scale {
    FR_GEMM_SCALE_NONE = 0, /* not an fp8 operand */
    FR_GEMM_SCALE_TENSOR = 1,
    FR_GEMM_SCALE_VEC128 = 2,
    FR_GEMM_SCALE_BLK128 = 3
} fr_gemm_scale;

typedef struct fr_gemm {
    int64_t M, N, K;
    int trans_a, trans_b;
    fr_dtype a_type, b_type, d_type;
    const void *A, *B;
    void *D;
    int64_t lda, ldb, ldd;                /* row-major leading dims in elements; 0 = packed */
    int64_t batch;                        /* >= 1 (0 is treated as 1) */
    int64_t stride_a, stride_b, stride_d; /* elements between batch entries (A, B: 0 = shared) */
    double alpha, beta;                   /* beta != 0: accumulate into D */
    const float *a_scale_inv, *b_scale_inv; /* fp8 only: device pointers, layouts above */
    fr_gemm_scale a_scale, b_scale;
    int fast_bf16;                        /* f32 x f32: operands rounded to bf16 on the tensor
                                             cores, float32 sums (CUBLAS_COMPUTE_32F_FAST_16BF) */
} fr_gemm;

/* Zero-initialized descriptor with alpha = 1, beta = 0, batch = 1. */
void fr_gemm_init(fr_gemm *g);

/* Run the GEMM on cu->stream. M, N or batch == 0: nothing to do. K == 0: D = beta * D (the
 * empty sum), done with a scale kernel rather than cuBLASLt. Errors name node `n` (may be
 * NULL) and the GEMM's shape and types. */
FR_NODISCARD fr_status fr_cuda_gemm(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g);

/* D = beta * D over the [rows][cols] matrix with leading dim ld (ops/cuda/matmul.cu): the
 * K == 0 case of fr_cuda_gemm. dtype FR_F32, FR_F64 or FR_BF16. */
FR_NODISCARD fr_status fr_cuda_scale_matrix(fr_cuda_ctx *cu, const fr_node *n, fr_dtype dt, void *D, int64_t rows,
                               int64_t cols, int64_t ld, int64_t batch, int64_t stride, double beta);

#ifdef __cplusplus
}
#endif

#endif
