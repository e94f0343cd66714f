/* The cuBLASLt GEMM wrapper (see cuda_gemm.h): row-major -> column-major translation, FP8
 * layout checks, scale modes, fast accumulation, the algorithm per GEMM shape (the heuristic's,
 * or the fastest of its candidates timed; ops/cuda/gemm_tune.c), and the report of the choices. */
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/gemm_tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the heuristic cache ---- */


static void cache_free(struct fr_cuda_gemm_cache *c)
{
    if (!c) return;
    for (int b = 0; b < GEMM_BUCKETS; b++) {
        gemm_entry *e = c->bucket[b];
        while (e) {
            gemm_entry *nx = e->next;
            free(e);
            e = nx;
        }
    }
    free(c);
}

static unsigned key_hash(const gemm_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    unsigned h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 16777619u;
    return h % GEMM_BUCKETS;
}

static gemm_entry *cache_find(struct fr_cuda_gemm_cache *c, const gemm_key *k)
{
    for (gemm_entry *e = c->bucket[key_hash(k)]; e; e = e->next)
        if (memcmp(&e->key, k, sizeof *k) == 0) return e;
    return NULL;
}

/* ---- helpers ---- */

static const char *type_name(fr_dtype t) { return fr_dtype_name(t); }

static int is_fp8(fr_dtype t) { return t == FR_F8E4M3 || t == FR_F8E5M2; }

static int lt_type(fr_dtype t, cudaDataType_t *out)
{
    switch (t) {
    case FR_F32: *out = CUDA_R_32F; return 1;
    case FR_F64: *out = CUDA_R_64F; return 1;
    case FR_BF16: *out = CUDA_R_16BF; return 1;
    case FR_F16: *out = CUDA_R_16F; return 1;
    case FR_F8E4M3: *out = CUDA_R_8F_E4M3; return 1;
    case FR_F8E5M2: *out = CUDA_R_8F_E5M2; return 1;
    default: return 0;
    }
}

/* largest power of two (<= 256) dividing the address and, for batches, the stride in bytes */
static int32_t alignment(const void *p, int64_t stride_bytes, int64_t batch)
{
    uint64_t v = (uint64_t)(uintptr_t)p;
    if (batch > 1 && stride_bytes) v |= (uint64_t)stride_bytes;
    int32_t a = 256;
    while (a > 1 && (v % (uint64_t)a) != 0) a /= 2;
    return a;
}

static const char *scale_name(fr_gemm_scale s)
{
    switch (s) {
    case FR_GEMM_SCALE_TENSOR: return "per-tensor";
    case FR_GEMM_SCALE_VEC128: return "1x128 blocks";
    case FR_GEMM_SCALE_BLK128: return "128x128 blocks";
    default: return "none";
    }
}

/* "GEMM M=.. N=.. K=.. batch=.. (A float8e4m3fn [M][K], B ... -> float32)" for messages */
static void describe(const fr_gemm *g, char *buf, size_t n)
{
    snprintf(buf, n, "GEMM M=%lld N=%lld K=%lld batch=%lld (A %s%s, B %s%s -> %s, lda=%lld ldb=%lld ldd=%lld)",
             (long long)g->M, (long long)g->N, (long long)g->K, (long long)(g->batch > 0 ? g->batch : 1),
             type_name(g->a_type), g->trans_a ? " transposed" : "", type_name(g->b_type),
             g->trans_b ? " transposed" : "", type_name(g->d_type), (long long)g->lda, (long long)g->ldb,
             (long long)g->ldd);
}

#define GERR(st, ...) (n ? fr_node_error(n, st, __VA_ARGS__) : fr_error(st, __VA_ARGS__))

void fr_gemm_init(fr_gemm *g)
{
    memset(g, 0, sizeof *g);
    g->alpha = 1.0;
    g->beta = 0.0;
    g->batch = 1;
}

/* Types, FP8 layout rules, leading dims: FR_ERR_UNSUPPORTED / FR_ERR_INTERNAL naming the GEMM. */
static fr_status validate(const fr_node *n, const fr_gemm *g, const char *what)
{
    int fp8 = is_fp8(g->a_type) || is_fp8(g->b_type);
    if (fp8) {
        if (!is_fp8(g->a_type) || !is_fp8(g->b_type) || (g->a_type == FR_F8E5M2 && g->b_type == FR_F8E5M2))
            return GERR(FR_ERR_UNSUPPORTED, "%s: fp8 GEMMs multiply E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3", what);
        if (g->d_type != FR_F32 && g->d_type != FR_BF16)
            return GERR(FR_ERR_UNSUPPORTED, "%s: an fp8 GEMM writes float32 or bfloat16", what);
        if (g->trans_a || !g->trans_b)
            return GERR(FR_ERR_INTERNAL, "%s: fp8 operands must both be K-contiguous (A [M][K], B [N][K]); "
                        "the caller must pass transposed copies (a bug in fp8run)", what);
        if (g->M % 16 || g->N % 16 || g->K % 16 || g->lda % 16 || g->ldb % 16 || g->ldd % 16)
            return GERR(FR_ERR_INTERNAL, "%s: fp8 GEMM dims and leading dims must be multiples of 16; "
                        "the caller must pad (a bug in fp8run)", what);
        if (((uintptr_t)g->A | (uintptr_t)g->B | (uintptr_t)g->D) % 16)
            return GERR(FR_ERR_INTERNAL, "%s: fp8 GEMM operands must be 16-byte aligned", what);
        if (g->a_scale == FR_GEMM_SCALE_NONE || g->b_scale == FR_GEMM_SCALE_NONE || !g->a_scale_inv ||
            !g->b_scale_inv)
            return GERR(FR_ERR_INTERNAL, "%s: fp8 operands need their scale_inv (a bug in fp8run)", what);
        if (((uintptr_t)g->a_scale_inv | (uintptr_t)g->b_scale_inv) % 16) /* else NOT_SUPPORTED */
            return GERR(FR_ERR_INTERNAL, "%s: fp8 scale_inv pointers must be 16-byte aligned (a bug in fp8run)",
                        what);
        int blk_a = g->a_scale == FR_GEMM_SCALE_BLK128, blk_b = g->b_scale == FR_GEMM_SCALE_BLK128;
        int tensor_a = g->a_scale == FR_GEMM_SCALE_TENSOR, tensor_b = g->b_scale == FR_GEMM_SCALE_TENSOR;
        if (blk_a && blk_b)
            return GERR(FR_ERR_UNSUPPORTED, "%s: cuBLASLt cannot multiply two 128x128-block-scaled operands", what);
        if (tensor_a != tensor_b)
            return GERR(FR_ERR_UNSUPPORTED, "%s: per-tensor and block scales (%s, %s) do not mix", what,
                        scale_name(g->a_scale), scale_name(g->b_scale));
        if (!tensor_a && g->batch > 1)
            return GERR(FR_ERR_UNSUPPORTED, "%s: block-scaled fp8 GEMMs are not batched", what);
    } else {
        if (g->a_type != g->b_type)
            return GERR(FR_ERR_UNSUPPORTED, "%s: A and B must have one type", what);
        int ok = (g->a_type == FR_F32 && g->d_type == FR_F32) || (g->a_type == FR_F64 && g->d_type == FR_F64) ||
                 ((g->a_type == FR_BF16 || g->a_type == FR_F16) && (g->d_type == FR_F32 || g->d_type == g->a_type));
        if (!ok) return GERR(FR_ERR_UNSUPPORTED, "%s: unsupported type combination", what);
        if (g->a_scale != FR_GEMM_SCALE_NONE || g->b_scale != FR_GEMM_SCALE_NONE)
            return GERR(FR_ERR_INTERNAL, "%s: scales are for fp8 operands only", what);
    }
    if (g->bias) {
        if (g->bias_type != FR_F32 && g->bias_type != FR_BF16)
            return GERR(FR_ERR_UNSUPPORTED, "%s: a %s bias (float32 or bfloat16)", what, type_name(g->bias_type));
        if ((g->batch > 1) || g->beta != 0.0)
            return GERR(FR_ERR_INTERNAL, "%s: a bias epilogue needs batch 1 and beta 0 (a bug in fp8run)", what);
    }
    int64_t ac = g->trans_a ? g->M : g->K, bc = g->trans_b ? g->K : g->N; /* row lengths */
    if (g->lda < ac || g->ldb < bc || g->ldd < g->N)
        return GERR(FR_ERR_INTERNAL, "%s: a leading dimension is smaller than its row", what);
    if (g->M < 0 || g->N < 0 || g->K < 0 || g->batch < 0 || g->stride_a < 0 || g->stride_b < 0 || g->stride_d < 0)
        return GERR(FR_ERR_INTERNAL, "%s: negative size", what);
    return FR_OK;
}

/* cuBLASLt call status -> error naming the node, the GEMM and the function called */
#define LT(call)                                                                                  \
    do {                                                                                          \
        cublasStatus_t s_ = (call);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            const char *c_ = #call;                                                               \
            st = GERR(FR_ERR_DEVICE, "%s: %.*s failed: %s (%d)", what, (int)strcspn(c_, "("), c_, \
                      cublasLtGetStatusName(s_), (int)s_);                                        \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)

#define CU_KEEP(call)                                                                   \
    do {                                                                                \
        cudaError_t ce_ = (call);                                                       \
        if (ce_ != cudaSuccess) {                                                       \
            st = fr_cuda_status(ce_, #call, __FILE__, __LINE__);                        \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

static cublasLtMatmulMatrixScale_t lt_scale_mode(fr_gemm_scale s)
{
    switch (s) {
    case FR_GEMM_SCALE_VEC128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case FR_GEMM_SCALE_BLK128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    }
}

/* fused: NULL for fr_cuda_gemm (a refused bias epilogue is an error), else fr_cuda_gemm_bias's */
static fr_status gemm_run(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *gin, int *fused)
{
    fr_gemm g = *gin;
    if (fused) *fused = 1;
    if (g.batch == 0) g.batch = 1;
    if (g.lda == 0) g.lda = g.trans_a ? g.M : g.K;
    if (g.ldb == 0) g.ldb = g.trans_b ? g.K : g.N;
    if (g.ldd == 0) g.ldd = g.N;
    char what[400];
    describe(&g, what, sizeof what);
    FR_TRY(validate(n, &g, what));
    if (g.M == 0 || g.N == 0) return FR_OK;
    if (g.K == 0 && g.bias) { /* D = bias: the caller's own pass, after the empty sum below */
        if (!fused) return GERR(FR_ERR_UNSUPPORTED, "%s: a bias epilogue with K = 0", what);
        *fused = 0;
        return FR_OK;
    }
    if (g.K == 0) /* the empty sum: D = beta * D */
        return fr_cuda_scale_matrix(cu, n, g.d_type, g.D, g.M, g.N, g.ldd, g.batch, g.stride_d, g.beta);
    if (g.M > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX || g.batch > INT32_MAX)
        return GERR(FR_ERR_UNSUPPORTED, "%s: dims beyond cuBLASLt's int range", what);

    cudaDataType_t ta, tb, td;
    if (!lt_type(g.a_type, &ta) || !lt_type(g.b_type, &tb) || !lt_type(g.d_type, &td))
        return GERR(FR_ERR_UNSUPPORTED, "%s: unsupported types", what);
    int f64 = g.a_type == FR_F64;
    cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                  : g.fast_bf16 && g.a_type == FR_F32 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                                       : CUBLAS_COMPUTE_32F;
    cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
    size_t ea = fr_dtype_size(g.a_type), eb = fr_dtype_size(g.b_type), ed = fr_dtype_size(g.d_type);
    int accumulate = g.beta != 0.0;
    int fast_accum = is_fp8(g.a_type) && g.fast_accum && g.a_scale == FR_GEMM_SCALE_TENSOR;

    gemm_key key;
    memset(&key, 0, sizeof key);
    key.a_type = (int32_t)g.a_type;
    key.b_type = (int32_t)g.b_type;
    key.d_type = (int32_t)g.d_type;
    key.compute = (int32_t)compute;
    key.trans_a = g.trans_a;
    key.trans_b = g.trans_b;
    key.a_scale = (int32_t)g.a_scale;
    key.b_scale = (int32_t)g.b_scale;
    key.accumulate = accumulate;
    key.fast_accum = fast_accum;
    key.align_a = alignment(g.A, g.stride_a * (int64_t)ea, g.batch);
    key.align_b = alignment(g.B, g.stride_b * (int64_t)eb, g.batch);
    key.align_d = alignment(g.D, g.stride_d * (int64_t)ed, g.batch);
    key.M = g.M;
    key.N = g.N;
    key.K = g.K;
    key.lda = g.lda;
    key.ldb = g.ldb;
    key.ldd = g.ldd;
    key.batch = g.batch;
    key.stride_a = g.stride_a;
    key.stride_b = g.stride_b;
    key.stride_d = g.stride_d;
    if (g.bias) {
        key.bias_type = (int32_t)g.bias_type + 1;
        key.align_bias = alignment(g.bias, 0, 1);
    }

    fr_status st = FR_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;

    /* cuBLASLt (column-major) A := our B, B := our A; m = N, n = M */
    cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t la_rows = (uint64_t)(g.trans_b ? g.K : g.N), la_cols = (uint64_t)(g.trans_b ? g.N : g.K);
    uint64_t lb_rows = (uint64_t)(g.trans_a ? g.M : g.K), lb_cols = (uint64_t)(g.trans_a ? g.K : g.M);

    LT(cublasLtMatmulDescCreate(&op, compute, scale_type));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (is_fp8(g.a_type)) {
        cublasLtMatmulMatrixScale_t ma = lt_scale_mode(g.b_scale), mb = lt_scale_mode(g.a_scale);
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.b_scale_inv,
                                          sizeof g.b_scale_inv));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.a_scale_inv,
                                          sizeof g.a_scale_inv));
        if (ma != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || mb != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F) {
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
        }
        if (fast_accum) {
            int8_t fa = 1;
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fa, sizeof fa));
        }
    }
    if (g.bias) { /* D's rows in cuBLASLt's column-major terms are our N: one bias value each */
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt;
        if (!lt_type(g.bias_type, &bt)) {
            st = GERR(FR_ERR_UNSUPPORTED, "%s: unsupported bias type", what);
            goto done;
        }
        int32_t bt32 = (int32_t)bt;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt32, sizeof bt32));
    }
    LT(cublasLtMatrixLayoutCreate(&la, tb, la_rows, la_cols, g.ldb));
    LT(cublasLtMatrixLayoutCreate(&lb, ta, lb_rows, lb_cols, g.lda));
    LT(cublasLtMatrixLayoutCreate(&ld, td, (uint64_t)g.N, (uint64_t)g.M, g.ldd));
    if (g.batch > 1) {
        int32_t bc = (int32_t)g.batch;
        int64_t sa = g.stride_b, sb = g.stride_a, sd = g.stride_d;
        LT(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        LT(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
        LT(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        LT(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
        LT(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
        LT(cublasLtMatrixLayoutSetAttribute(ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
    }

    if (!cu->gemm_cache) {
        cu->gemm_cache = fr_calloc(1, sizeof *cu->gemm_cache, "GEMM heuristic cache");
        if (!cu->gemm_cache) {
            st = FR_ERR_OOM;
            goto done;
        }
        cu->gemm_cache_free = cache_free;
    }
    float alpha_f = (float)g.alpha, beta_f = (float)g.beta;
    const void *alpha = f64 ? (const void *)&g.alpha : (const void *)&alpha_f;
    const void *beta = f64 ? (const void *)&g.beta : (const void *)&beta_f;
    gemm_entry *e = cache_find(cu->gemm_cache, &key);
    if (!e) {
        uint64_t ws = cu->workspace_bytes;
        uint32_t al_a = (uint32_t)key.align_b, al_b = (uint32_t)key.align_a, al_d = (uint32_t)key.align_d;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
        if (ed < 4) { /* a bf16 D: split-K partials summed in float32 (the compute type), never in bf16 */
            uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof mask));
        }
        cublasLtMatmulHeuristicResult_t res[FR_GEMM_CANDIDATES];
        int found = 0;
        memset(res, 0, sizeof res);
        int want = cu->gemm_tune ? FR_GEMM_CANDIDATES : 1;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cu->lt, op, la, lb, ld, ld, pref, want, res, &found);
        /* a bias epilogue cuBLASLt does not take with these types: NOT_SUPPORTED, no algorithm, or
           (a float32 bias beside a bf16 D of bf16 inputs, on cuBLASLt 12.9) INVALID_VALUE */
        int refused = g.bias && (hs == CUBLAS_STATUS_NOT_SUPPORTED || hs == CUBLAS_STATUS_INVALID_VALUE ||
                                 (hs == CUBLAS_STATUS_SUCCESS && (found < 1 || res[0].state != CUBLAS_STATUS_SUCCESS)));
        if (!refused && hs != CUBLAS_STATUS_SUCCESS) {
            st = GERR(FR_ERR_DEVICE, "%s: cublasLtMatmulAlgoGetHeuristic failed: %s (%d)", what,
                      cublasLtGetStatusName(hs), (int)hs);
            goto done;
        }
        if (refused && !fused) {
            st = GERR(FR_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm with a %s bias epilogue on %s (sm_%d%d)",
                      what, type_name(g.bias_type), cu->name, cu->cc_major, cu->cc_minor);
            goto done;
        }
        if (!refused && (found < 1 || res[0].state != CUBLAS_STATUS_SUCCESS)) {
            st = GERR(FR_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for this GEMM on %s (sm_%d%d)", what,
                      cu->name, cu->cc_major, cu->cc_minor);
            goto done;
        }
        e = fr_calloc(1, sizeof *e, "GEMM algorithm cache entry");
        if (!e) {
            st = FR_ERR_OOM;
            goto done;
        }
        e->key = key;
        if (refused) { /* remembered, so the heuristic is asked once per shape */
            e->refused = 1;
            unsigned h = key_hash(&key);
            e->next = cu->gemm_cache->bucket[h];
            cu->gemm_cache->bucket[h] = e;
            *fused = 0;
            goto done;
        }
        e->algo = res[0].algo;
        e->n_cand = found;
        const gemm_lt lt = {op, la, lb, ld, alpha, beta, g.A, g.B, g.D};
        if (cu->gemm_tune && found > 1 && !accumulate) st = fr_gemm_tune(cu, &lt, res, found, e);
        if (st != FR_OK) {
            free(e);
            goto done;
        }
        unsigned h = key_hash(&key);
        e->next = cu->gemm_cache->bucket[h];
        cu->gemm_cache->bucket[h] = e;
    }
    if (e->refused) {
        if (fused)
            *fused = 0;
        else
            st = GERR(FR_ERR_UNSUPPORTED, "%s: cuBLASLt has no algorithm with a %s bias epilogue on %s (sm_%d%d)",
                      what, type_name(g.bias_type), cu->name, cu->cc_major, cu->cc_minor);
        goto done;
    }
    {
        fr_cuda_gemm_timer *tm = cu->gemm_timer; /* profiling: this call's time, for its node */
        int slot = tm && tm->used < tm->cap ? tm->used++ : -1;
        if (slot >= 0) {
            tm->node[slot] = tm->node_now;
            CU_KEEP(cudaEventRecord(tm->ev[2 * slot], cu->stream));
        }
        LT(cublasLtMatmul(cu->lt, op, alpha, g.B, la, g.A, lb, beta, g.D, ld, g.D, ld, &e->algo, cu->workspace,
                          cu->workspace_bytes, cu->stream));
        if (slot >= 0) CU_KEEP(cudaEventRecord(tm->ev[2 * slot + 1], cu->stream));
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return st;
}

fr_status fr_cuda_gemm(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g) { return gemm_run(cu, n, g, NULL); }

fr_status fr_cuda_gemm_bias(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g, int *fused)
{
    return gemm_run(cu, n, g, fused);
}

/* ---- the report ---- */

void fr_cuda_gemm_report(const fr_cuda_ctx *c, char *buf, size_t n)
{
    if (!n) return;
    int shapes = 0, timed = 0, changed = 0, bias_fused = 0, bias_refused = 0;
    double saved = 0, best_gain = 0;
    const gemm_entry *best = NULL;
    for (int b = 0; c && c->gemm_cache && b < GEMM_BUCKETS; b++)
        for (const gemm_entry *e = c->gemm_cache->bucket[b]; e; e = e->next) {
            shapes++;
            bias_fused += e->key.bias_type && !e->refused;
            bias_refused += e->refused;
            if (!e->timed) continue;
            timed++;
            if (e->chosen == 0) continue;
            changed++;
            double gain = isfinite(e->ms_first) ? 1.0 - e->ms_best / e->ms_first : 1.0;
            if (isfinite(e->ms_first)) saved += e->ms_first - e->ms_best;
            if (!best || gain > best_gain) {
                best = e;
                best_gain = gain;
            }
        }
    int off = snprintf(buf, n, "cuBLASLt: %d GEMM shape%s", shapes, shapes == 1 ? "" : "s");
    if (c && !c->gemm_tune)
        off += snprintf(buf + off, off < (int)n ? n - (size_t)off : 0, ", the heuristic's first algorithm (%s)",
                        c->deterministic ? "--deterministic" : "FP8RUN_GEMM_TUNE=0");
    else
        off += snprintf(buf + off, off < (int)n ? n - (size_t)off : 0,
                        ", %d timed among up to %d candidates, %d took another than the heuristic's first", timed,
                        FR_GEMM_CANDIDATES, changed);
    if (best && off < (int)n)
        off += snprintf(buf + off, n - (size_t)off,
                        " (one call of each: %.3f ms saved; best %.0f%% faster: %s M=%lld N=%lld K=%lld)", saved,
                        100 * best_gain, fr_dtype_name((fr_dtype)best->key.a_type), (long long)best->key.M,
                        (long long)best->key.N, (long long)best->key.K);
    if ((bias_fused || bias_refused) && off < (int)n)
        off += snprintf(buf + off, n - (size_t)off, "; bias epilogue: %d shape%s, refused for %d (a finishing pass)",
                        bias_fused, bias_fused == 1 ? "" : "s", bias_refused);
    if (c && off < (int)n)
        snprintf(buf + off, n - (size_t)off, "; fp8 forward GEMMs %s",
                 c->fp8_fast_accum ? "with fast accumulation" : "with exact (promoted) accumulation");
}
