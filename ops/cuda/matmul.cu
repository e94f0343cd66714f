/* CUDA kernels of the matmul family: MatMul, Gemm (cuBLASLt through ops/cuda/cuda_gemm.h;
 * Einsum, a direct kernel, is in einsum.cu). Same semantics as ops/matmul.c:
 *  - MatMul: numpy matmul; 1-D operands promoted ([K] -> [1, K] for A, [K, 1] for B); batch
 *    dims broadcast. When B has no batch of its own the batch folds into M (one GEMM, as on
 *    the CPU); otherwise the batch dims are merged where both operands' strides allow and the
 *    innermost merged dim is one strided-batched cuBLASLt call (stride 0 for a broadcast
 *    operand), outer ones a host loop of such calls.
 *  - Gemm: Y = alpha A' B' + beta C, C unidirectionally broadcast; Y is first filled with
 *    (float)(beta * C) computed in double exactly as the CPU does, then the GEMM accumulates
 *    (beta == 0 ignores C, so inf/NaN in C do not leak, as on the CPU).
 *  - float32 GEMMs use CUBLAS_COMPUTE_32F (no TF32): within 1e-5 of the CPU's sgemm; float64
 *    uses CUBLAS_COMPUTE_64F. */
#include <cuda_bf16.h>
#include <string.h>

#include "ops/cuda/cuda_gemm.h"
#include "ops/matmul.h"

#define THREADS 256

static unsigned grid_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 65536) b = 65536; /* grid-stride loops cover the rest */
    return (unsigned)(b < 1 ? 1 : b);
}

/* ---- MatMul ---- */

static fr_status dtype_check(const fr_node *n, const fr_tensor *a, const fr_tensor *b)
{
    if (a->dtype != b->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "A is %s but B is %s", fr_dtype_name(a->dtype), fr_dtype_name(b->dtype));
    if (a->dtype != FR_F32 && a->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (float32 or float64 only)",
                             fr_dtype_name(a->dtype));
    return FR_OK;
}

/* A batched product: Y[batch..][M][N] = op(A) op(B), op a transpose of the last two dims where
 * ta/tb say, batch dims broadcast (strides in elements, 0 where broadcast). Batch dims over
 * which B is broadcast and A is contiguous fold into M (GQA: the query groups of one KV head
 * become one tall GEMM); the others merge where both strides allow; the innermost merged dim
 * is one strided-batched cuBLASLt call, outer ones a host loop. */
static fr_status batched_gemm(const fr_cuda_kctx *k, const fr_tensor *a, const fr_tensor *b, fr_tensor *y, int ta,
                              int tb, int fast_bf16, int64_t M, int64_t N, int64_t K, int nb, const int64_t *bdims_in,
                              const int64_t *sa_in, const int64_t *sb_in)
{
    const fr_node *n = k->node;
    int64_t bdims[FR_MAX_RANK], sa[FR_MAX_RANK], sb[FR_MAX_RANK];
    memcpy(bdims, bdims_in, sizeof(int64_t) * (size_t)nb);
    memcpy(sa, sa_in, sizeof(int64_t) * (size_t)nb);
    memcpy(sb, sb_in, sizeof(int64_t) * (size_t)nb);
    /* fold the innermost batch dims into M while B does not move along them and A's matrices
     * (untransposed) follow each other: [.., G, M, K] is [.., G*M, K] */
    while (nb > 0 && !ta && sb[nb - 1] == 0 && (sa[nb - 1] == M * K || bdims[nb - 1] == 1)) {
        M *= bdims[nb - 1];
        nb--;
    }
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) batch *= bdims[d];
    fr_gemm g;
    fr_gemm_init(&g);
    g.a_type = g.b_type = g.d_type = a->dtype;
    g.trans_a = ta;
    g.trans_b = tb;
    g.fast_bf16 = fast_bf16;
    g.M = M;
    g.N = N;
    g.K = K;
    if (batch == 0 || M == 0 || N == 0) return FR_OK;
    int64_t md[FR_MAX_RANK], ma[FR_MAX_RANK], mb[FR_MAX_RANK];
    int nm = 0;
    for (int d = 0; d < nb; d++) {
        if (bdims[d] == 1) continue;
        if (nm > 0 && ma[nm - 1] == sa[d] * bdims[d] && mb[nm - 1] == sb[d] * bdims[d]) {
            md[nm - 1] *= bdims[d];
            ma[nm - 1] = sa[d];
            mb[nm - 1] = sb[d];
        } else {
            md[nm] = bdims[d];
            ma[nm] = sa[d];
            mb[nm] = sb[d];
            nm++;
        }
    }
    if (nm == 0) {
        g.A = a->data;
        g.B = b->data;
        g.D = y->data;
        return fr_cuda_gemm(k->cu, n, &g);
    }
    g.batch = md[nm - 1];
    g.stride_a = ma[nm - 1];
    g.stride_b = mb[nm - 1];
    g.stride_d = M * N;
    int64_t outer = batch / g.batch;
    size_t es = fr_dtype_size(a->dtype);
    int64_t idx[FR_MAX_RANK] = {0}, oa = 0, ob = 0;
    for (int64_t i = 0; i < outer; i++) {
        g.A = (const char *)a->data + (size_t)oa * es;
        g.B = (const char *)b->data + (size_t)ob * es;
        g.D = (char *)y->data + (size_t)(i * g.batch * M * N) * es;
        FR_TRY(fr_cuda_gemm(k->cu, n, &g));
        for (int d = nm - 2; d >= 0; d--) { /* odometer over the outer merged dims */
            oa += ma[d];
            ob += mb[d];
            if (++idx[d] < md[d]) break;
            oa -= ma[d] * idx[d];
            ob -= mb[d] * idx[d];
            idx[d] = 0;
        }
    }
    return FR_OK;
}

/* The shared part of MatMul and ai.fp8run::MatMul: shapes after the transposes, the broadcast
 * batch plan, then batched_gemm. 1-D operands only without transposes (ONNX MatMul). */
static fr_status matmul_common(const fr_cuda_kctx *k, int ta, int tb, int fast_bf16)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs A and B and output Y");
    const fr_tensor *a = k->in[0], *b = k->in[1];
    fr_tensor *y = k->out[0];
    FR_TRY(dtype_check(n, a, b));
    int ra = a->rank, rb = b->rank;
    if (ra < 1 || rb < 1 || ((ta || tb) && (ra < 2 || rb < 2)))
        return fr_node_error(n, FR_ERR_SHAPE, "operands must have rank >= 1 (>= 2 with transposes)");
    int ab = ra >= 2 ? ra - 2 : 0, bb = rb >= 2 ? rb - 2 : 0;
    int64_t r0 = ra >= 2 ? a->dims[ra - 2] : 1, r1 = a->dims[ra - 1];
    int64_t M = ta ? r1 : r0, K = ta ? r0 : r1;
    int64_t c0 = rb >= 2 ? b->dims[rb - 2] : b->dims[0], c1 = rb >= 2 ? b->dims[rb - 1] : 1;
    int64_t kb = tb ? c1 : c0, N = tb ? c0 : c1;
    if (K != kb) return fr_node_error(n, FR_ERR_SHAPE, "inner dimensions differ (%lld vs %lld)", (long long)K, (long long)kb);
    int nb;
    int64_t bdims[FR_MAX_RANK], sa[FR_MAX_RANK], sb[FR_MAX_RANK];
    FR_TRY(fr_broadcast_shape(n, ab, a->dims, bb, b->dims, &nb, bdims));
    fr_broadcast_strides(ab, a->dims, nb, bdims, sa);
    fr_broadcast_strides(bb, b->dims, nb, bdims, sb);
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) {
        batch *= bdims[d];
        sa[d] *= M * K;
        sb[d] *= K * N;
    }
    if (fr_tensor_numel(y) != batch * M * N || y->dtype != a->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output does not have the inferred shape (re-run shape inference)");
    return batched_gemm(k, a, b, y, ta, tb, fast_bf16, M, N, K, nb, bdims, sa, sb);
}

static fr_status matmul_run(const fr_cuda_kctx *k) { return matmul_common(k, 0, 0, 0); }

/* ai.fp8run::MatMul {transA, transB, precision}: see ops/matmul.c */
static fr_status mmx_run(const fr_cuda_kctx *k)
{
    int64_t ta, tb;
    const char *prec;
    FR_TRY(fr_node_attr_int(k->node, "transA", 0, &ta));
    FR_TRY(fr_node_attr_int(k->node, "transB", 0, &tb));
    FR_TRY(fr_node_attr_string(k->node, "precision", "fp32", &prec));
    return matmul_common(k, ta != 0, tb != 0, strcmp(prec, "bf16") == 0);
}

/* ---- Gemm ---- */

template <typename T>
__global__ void fill_beta_c_kernel(T *y, const T *c, int64_t M, int64_t N, int64_t rs, int64_t cs, double beta)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = i / N, j = i % N;
        y[i] = (T)(beta * (double)c[m * rs + j * cs]); /* the CPU's (float)(beta * c) */
    }
}

static fr_status gemm_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 2 || k->n_in > 3 || !k->in[0] || !k->in[1] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs A, B (C optional) and output Y");
    fr_gemm_attrs ga;
    FR_TRY(fr_gemm_read_attrs(n, &ga));
    const int ta = ga.ta, tb = ga.tb;
    const float alpha = ga.alpha, beta = ga.beta;
    const fr_tensor *a = k->in[0], *b = k->in[1], *c = k->n_in > 2 ? k->in[2] : NULL;
    fr_tensor *y = k->out[0];
    FR_TRY(dtype_check(n, a, b));
    if (c && c->dtype != a->dtype) return fr_node_error(n, FR_ERR_SHAPE, "A, B and C must have one dtype");
    if (a->rank != 2 || b->rank != 2) return fr_node_error(n, FR_ERR_SHAPE, "A and B must both be 2-D");
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
    if (K != kb) return fr_node_error(n, FR_ERR_SHAPE, "inner dimensions differ");
    if (y->rank != 2 || y->dims[0] != M || y->dims[1] != N || y->dtype != a->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output does not have the inferred shape (re-run shape inference)");
    if (M == 0 || N == 0) return FR_OK;
    int use_c = c && beta != 0.0f;
    if (use_c) {
        int64_t rs = 0, cs = 0; /* C's row and column strides, 0 where broadcast */
        if (c->rank == 2) {
            rs = c->dims[0] == 1 ? 0 : c->dims[1];
            cs = c->dims[1] == 1 ? 0 : 1;
        } else if (c->rank == 1) {
            cs = c->dims[0] == 1 ? 0 : 1;
        } else if (c->rank > 2) {
            return fr_node_error(n, FR_ERR_SHAPE, "C has rank %d", c->rank);
        }
        if (a->dtype == FR_F32)
            fill_beta_c_kernel<float><<<grid_for(M * N), THREADS, 0, k->cu->stream>>>(
                (float *)y->data, (const float *)c->data, M, N, rs, cs, (double)beta);
        else
            fill_beta_c_kernel<double><<<grid_for(M * N), THREADS, 0, k->cu->stream>>>(
                (double *)y->data, (const double *)c->data, M, N, rs, cs, (double)beta);
        FR_TRY(fr_cuda_check_launch(n, "fill_beta_c"));
    }
    fr_gemm g;
    fr_gemm_init(&g);
    g.M = M;
    g.N = N;
    g.K = K;
    g.trans_a = (int)ta;
    g.trans_b = (int)tb;
    g.a_type = g.b_type = g.d_type = a->dtype;
    g.A = a->data;
    g.B = b->data;
    g.D = y->data;
    g.alpha = (double)alpha;
    g.beta = use_c ? 1.0 : 0.0;
    return fr_cuda_gemm(k->cu, n, &g);
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_matmul[] = {
    {"MatMul", FR_DOMAIN_ONNX, matmul_run, NULL},
    {"MatMul", FR_DOMAIN_FP8RUN, mmx_run, NULL},
    {"Gemm", FR_DOMAIN_ONNX, gemm_run, NULL},
    {NULL, NULL, NULL, NULL},
};
