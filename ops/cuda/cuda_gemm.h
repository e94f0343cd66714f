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
 * Fast accumulation (fast_accum, fp8 with per-tensor scales only): cuBLASLt's
 * CUBLASLT_MATMUL_DESC_FAST_ACCUM, the FP8 tensor cores' partial sums kept in their own
 * narrower accumulator instead of being promoted to float32 every few K steps: faster, and
 * about 1e-3 relative off the exact sum at K of a few thousand. Transformer Engine and torchao
 * take it for the forward GEMM only (the gradients' GEMMs keep the exact path); so does
 * ops/cuda/linear.cu, when ctx->fp8_fast_accum is set. The CPU reference cannot emulate it.
 *
 * The algorithm is chosen once per (types, M, N, K, batch, layouts, strides, scale modes,
 * fast_accum, beta != 0, pointer alignments) and cached in ctx->gemm_cache. With ctx->gemm_tune
 * (the default; FP8RUN_GEMM_TUNE=0 turns it off) the first call of a shape asks the heuristic
 * for up to FR_GEMM_CANDIDATES (gemm_tune.h) algorithms and times each on the call's own
 * buffers (one warm-up and FR_GEMM_TUNE_REPS timed runs; D is written, which beta = 0 makes harmless), and
 * keeps the fastest (another than the heuristic's first only when at least 1% faster). That
 * first call waits for the GPU; it is skipped (the heuristic's first taken) while the stream
 * is being captured and for accumulating GEMMs (beta != 0: the timed runs would add into D).
 * The choice is kept per process and device model, so every context (session) of a process
 * multiplies a shape with the same algorithm: results stay bit-identical between sessions of
 * one process; between processes a near tie may go the other way (FP8RUN_GEMM_TUNE=0 for
 * bitwise repeatable runs across processes). The workspace is ctx->workspace. Everything runs
 * on ctx->stream; nothing else synchronizes. */
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
    int fast_accum;                       /* fp8, per-tensor scales: fast accumulation (above);
                                             ignored for other GEMMs */
    const void *bias;                     /* optional device vector [N] of bias_type, added by
                                             cuBLASLt's BIAS epilogue to the float32 sum before D's
                                             conversion (one rounding); batch 1, beta 0 only */
    fr_dtype bias_type;
} fr_gemm;

/* (FR_GEMM_CANDIDATES, FR_GEMM_TUNE_REPS: the timing's bounds, gemm_tune.h) */

/* Events around each cuBLASLt call while a profiling executor runs (runtime/cuda/cuda_exec.c):
 * slot i's events are ev[2i], ev[2i+1], its node node[i]; calls past cap are not timed. */
typedef struct fr_cuda_gemm_timer {
    cudaEvent_t *ev;
    int *node;
    int cap, used, node_now;
} fr_cuda_gemm_timer;

/* What the GEMMs of context c chose, one line: "cuBLASLt: 12 GEMM shapes, 9 timed among up to 8
 * candidates, 3 took another than the heuristic's first (best: 7% faster, fp8 M=16384 N=11264
 * K=2048); fp8 forward with fast accumulation"; with biased GEMMs also how many took the bias
 * epilogue and for how many cuBLASLt refused it (a finishing pass adds the bias). */
void fr_cuda_gemm_report(const fr_cuda_ctx *c, char *buf, size_t n);

/* Zero-initialized descriptor with alpha = 1, beta = 0, batch = 1. */
void fr_gemm_init(fr_gemm *g);

/* Run the GEMM on cu->stream. M, N or batch == 0: nothing to do. K == 0: D = beta * D (the
 * empty sum), done with a scale kernel rather than cuBLASLt. Errors name node `n` (may be
 * NULL) and the GEMM's shape and types. */
FR_NODISCARD fr_status fr_cuda_gemm(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g);

/* fr_cuda_gemm with g->bias: *fused = 1 when cuBLASLt ran it with the BIAS epilogue; *fused = 0
 * when cuBLASLt has no algorithm for that epilogue with these types (nothing ran; the refusal is
 * kept per shape like an algorithm): the caller then adds the bias itself. Other failures are
 * errors as for fr_cuda_gemm (which treats a refused epilogue as FR_ERR_UNSUPPORTED). */
FR_NODISCARD fr_status fr_cuda_gemm_bias(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g, int *fused);

/* D = beta * D over the [rows][cols] matrix with leading dim ld (ops/cuda/gemm_scale.cu): the
 * K == 0 case of fr_cuda_gemm. dtype FR_F32, FR_F64 or FR_BF16. */
FR_NODISCARD fr_status fr_cuda_scale_matrix(fr_cuda_ctx *cu, const fr_node *n, fr_dtype dt, void *D, int64_t rows,
                               int64_t cols, int64_t ld, int64_t batch, int64_t stride, double beta);

#ifdef __cplusplus
}
#endif

#endif
