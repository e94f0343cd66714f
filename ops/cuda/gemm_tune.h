/* The GEMM wrapper's algorithm cache (ops/cuda/cuda_gemm.c) and the timing of cuBLASLt's
 * candidates (ops/cuda/gemm_tune.c); see cuda_gemm.h for what is chosen and when. Private to
 * those two files. Below the wrapper: the timing needs only the context, and the wrapper
 * (which owns the cache) makes the report of the choices. */
#ifndef FR_OPS_CUDA_GEMM_TUNE_H
#define FR_OPS_CUDA_GEMM_TUNE_H

#include "ops/cuda/cuda_kernel.h"

#define FR_GEMM_CANDIDATES 8 /* algorithms asked of the heuristic and timed, at most */
#define FR_GEMM_TUNE_REPS 3  /* timed runs of each candidate (after one warm-up) */

/* Everything the algorithm depends on; compared with memcmp, so always zeroed first. */
typedef struct gemm_key {
    int32_t a_type, b_type, d_type, compute;
    int32_t trans_a, trans_b, a_scale, b_scale, accumulate;
    int32_t align_a, align_b, align_d, fast_accum;
    int32_t bias_type, align_bias; /* bias_type: the fr_dtype + 1, 0 without a bias */
    int64_t M, N, K, lda, ldb, ldd, batch, stride_a, stride_b, stride_d;
} gemm_key;

/* One shape's algorithm; timed: the candidates were timed (here or by another context of the
 * process), n_cand of them, `chosen` the index taken (0: the heuristic's first), ms_first and
 * ms_best their times per call. */
typedef struct gemm_entry {
    gemm_key key;
    cublasLtMatmulAlgo_t algo;
    int refused; /* a bias epilogue cuBLASLt has no algorithm for: no algo, the caller's fallback */
    int n_cand, timed, chosen;
    float ms_first, ms_best;
    struct gemm_entry *next;
} gemm_entry;

#define GEMM_BUCKETS 256

struct fr_cuda_gemm_cache {
    gemm_entry *bucket[GEMM_BUCKETS];
};

/* A GEMM's cuBLASLt descriptors and buffers (cuBLASLt's A, B are our B, A). */
typedef struct gemm_lt {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    const void *alpha, *beta, *A, *B;
    void *D;
} gemm_lt;

/* The algorithm of e->key among the heuristic's res[0..found): the process's earlier choice
 * for this device model, else the fastest timed on l's buffers (waits for the GPU). Leaves
 * e->algo = res[0] and e->timed = 0 while the stream is being captured. Fills e's algo and
 * timing fields. */
FR_NODISCARD fr_status fr_gemm_tune(fr_cuda_ctx *cu, const gemm_lt *l, const cublasLtMatmulHeuristicResult_t *res,
                                    int found, gemm_entry *e);

#endif
