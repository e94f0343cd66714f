/* CUDA kernels of the matmul family: MatMul, Gemm (cuBLASLt through ops/cuda/cuda_gemm.h)
 * and Einsum (a direct kernel). Same semantics as ops/matmul.c and ops/einsum.c:
 *  - MatMul: numpy matmul; 1-D operands promoted ([K] -> [1, K] for A, [K, 1] for B); batch
 *    dims broadcast. When B has no batch of its own the batch folds into M (one GEMM, as on
 *    the CPU); otherwise the batch dims are merged where both operands' strides allow and the
 *    innermost merged dim is one strided-batched cuBLASLt call (stride 0 for a broadcast
 *    operand), outer ones a host loop of such calls.
 *  - Gemm: Y = alpha A' B' + beta C, C unidirectionally broadcast; Y is first filled with
 *    (float)(beta * C) computed in double exactly as the CPU does, then the GEMM accumulates
 *    (beta == 0 ignores C, so inf/NaN in C do not leak, as on the CPU).
 *  - float32 GEMMs use CUBLAS_COMPUTE_32F (no TF32): within 1e-5 of the CPU's sgemm; float64
 *    uses CUBLAS_COMPUTE_64F.
 *  - Einsum: one thread per output element sums over the contracted letters in double, in the
 *    CPU kernel's order (letters in order of first appearance, the last one fastest), so the
 *    results are bit-identical to ops/einsum.c. */
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

/* ---- D = beta * D (the K == 0 GEMM) ---- */

template <typename T>
__global__ void scale_matrix_kernel(T *d, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                                    double beta)
{
    int64_t total = rows * cols * batch;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
        T *p = d + b * stride + r * ld + c;
        *p = beta == 0.0 ? T(0) : T((double)*p * beta); /* beta 0: no NaN from 0 * inf */
    }
}

__global__ void scale_matrix_bf16_kernel(__nv_bfloat16 *d, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                         int64_t stride, float beta)
{
    int64_t total = rows * cols * batch;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
        __nv_bfloat16 *p = d + b * stride + r * ld + c;
        *p = beta == 0.0f ? __float2bfloat16_rn(0.0f) : __float2bfloat16_rn(__bfloat162float(*p) * beta);
    }
}

extern "C" fr_status fr_cuda_scale_matrix(fr_cuda_ctx *cu, const fr_node *n, fr_dtype dt, void *D, int64_t rows,
                                          int64_t cols, int64_t ld, int64_t batch, int64_t stride, double beta)
{
    if (batch < 1) batch = 1;
    int64_t total = rows * cols * batch;
    if (total == 0) return FR_OK;
    if (beta == 1.0) return FR_OK;
    unsigned grid = grid_for(total);
    if (dt == FR_F32)
        scale_matrix_kernel<float><<<grid, THREADS, 0, cu->stream>>>((float *)D, rows, cols, ld, batch, stride, beta);
    else if (dt == FR_F64)
        scale_matrix_kernel<double><<<grid, THREADS, 0, cu->stream>>>((double *)D, rows, cols, ld, batch, stride, beta);
    else if (dt == FR_BF16)
        scale_matrix_bf16_kernel<<<grid, THREADS, 0, cu->stream>>>((__nv_bfloat16 *)D, rows, cols, ld, batch, stride,
                                                                   (float)beta);
    else
        return n ? fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM output dtype %s", fr_dtype_name(dt))
                 : fr_error(FR_ERR_UNSUPPORTED, "GEMM output dtype %s", fr_dtype_name(dt));
    return fr_cuda_check_launch(n, "scale_matrix");
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

/* ---- Einsum ---- */

#define ES_MAX_OPS 8
#define ES_MAX_SUM 16

typedef struct es_params {
    int n_ops, n_out, n_sum, f64;
    int64_t n_out_elems, n_sum_elems;
    int64_t out_size[FR_MAX_RANK];
    int64_t sum_size[ES_MAX_SUM];
    int64_t out_stride[ES_MAX_OPS][FR_MAX_RANK]; /* operand k's stride for output letter d */
    int64_t sum_stride[ES_MAX_OPS][ES_MAX_SUM];  /* ... and for summed letter s */
    const void *in[ES_MAX_OPS];
    void *out;
} es_params;

__global__ void einsum_kernel(es_params p)
{
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < p.n_out_elems;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base[ES_MAX_OPS];
        for (int k = 0; k < p.n_ops; k++) base[k] = 0;
        int64_t rem = o;
        for (int d = p.n_out - 1; d >= 0; d--) {
            int64_t c = rem % p.out_size[d];
            rem /= p.out_size[d];
            for (int k = 0; k < p.n_ops; k++) base[k] += c * p.out_stride[k][d];
        }
        int64_t idx[ES_MAX_SUM], off[ES_MAX_OPS];
        for (int s = 0; s < p.n_sum; s++) idx[s] = 0;
        for (int k = 0; k < p.n_ops; k++) off[k] = base[k];
        double acc = 0.0;
        for (int64_t it = 0; it < p.n_sum_elems; it++) {
            double prod = 1.0; /* explicit roundings: no FMA contraction, the CPU's exact sums */
            for (int k = 0; k < p.n_ops; k++)
                prod = __dmul_rn(prod, p.f64 ? ((const double *)p.in[k])[off[k]]
                                             : (double)((const float *)p.in[k])[off[k]]);
            acc = __dadd_rn(acc, prod);
            for (int s = p.n_sum - 1; s >= 0; s--) { /* odometer, last summed letter fastest */
                idx[s]++;
                for (int k = 0; k < p.n_ops; k++) off[k] += p.sum_stride[k][s];
                if (idx[s] < p.sum_size[s]) break;
                for (int k = 0; k < p.n_ops; k++) off[k] -= p.sum_stride[k][s] * p.sum_size[s];
                idx[s] = 0;
            }
        }
        if (p.f64)
            ((double *)p.out)[o] = acc;
        else
            ((float *)p.out)[o] = (float)acc;
    }
}

/* Parse the equation (already validated by shape inference; checked again here). Letters are
 * numbered in order of first appearance, as in ops/einsum.c. */
static fr_status einsum_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const char *eq;
    FR_TRY(fr_node_attr_string(n, "equation", NULL, &eq));
    if (!eq) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'equation' is required");
    if (strstr(eq, "..."))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s': '...' (ellipsis) is not supported", eq);
    char in[ES_MAX_OPS][FR_MAX_RANK + 1], out[FR_MAX_RANK + 1], letters[53];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    memset(letters, 0, sizeof letters);
    int n_ops = 0, len = 0, n_letters = 0;
    const char *arrow = strstr(eq, "->");
    for (const char *c = eq; *c && (!arrow || c < arrow); c++) {
        if (*c == ' ') continue;
        if (*c == ',') {
            if (++n_ops >= ES_MAX_OPS) return fr_node_error(n, FR_ERR_UNSUPPORTED, "too many operands");
            len = 0;
            continue;
        }
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')) || len >= FR_MAX_RANK ||
            strchr(in[n_ops], *c))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s' is not supported", eq);
        in[n_ops][len++] = *c;
        if (!strchr(letters, *c)) letters[n_letters++] = *c;
    }
    n_ops++;
    if (n_ops != k->n_in)
        return fr_node_error(n, FR_ERR_GRAPH, "equation '%s' has %d operands but the node has %d inputs", eq, n_ops,
                             k->n_in);
    int n_out = 0;
    if (arrow) {
        for (const char *c = arrow + 2; *c; c++) {
            if (*c == ' ') continue;
            if (!strchr(letters, *c) || strchr(out, *c) || n_out >= FR_MAX_RANK)
                return fr_node_error(n, FR_ERR_GRAPH, "equation '%s': bad output letter '%c'", eq, *c);
            out[n_out++] = *c;
        }
    } else {
        for (char c = 'A'; c <= 'z'; c++) {
            int cnt = 0;
            for (int i = 0; i < n_ops; i++) cnt += strchr(in[i], c) != NULL;
            if (cnt == 1 && n_out < FR_MAX_RANK) out[n_out++] = c;
        }
    }
    /* letter sizes (size-1 dims broadcast) */
    int64_t size[52];
    for (int i = 0; i < n_letters; i++) size[i] = -1;
    for (int op = 0; op < n_ops; op++) {
        const fr_tensor *t = k->in[op];
        if (!t || t->rank != (int)strlen(in[op]) || t->dtype != k->in[0]->dtype ||
            (t->dtype != FR_F32 && t->dtype != FR_F64))
            return fr_node_error(n, FR_ERR_SHAPE, "operand %d does not match the equation '%s'", op, eq);
        for (int d = 0; d < t->rank; d++) {
            int li = (int)(strchr(letters, in[op][d]) - letters);
            if (size[li] < 0 || size[li] == 1)
                size[li] = t->dims[d];
            else if (t->dims[d] != 1 && t->dims[d] != size[li])
                return fr_node_error(n, FR_ERR_SHAPE, "index '%c' has sizes %lld and %lld", in[op][d],
                                     (long long)size[li], (long long)t->dims[d]);
        }
    }
    es_params p;
    memset(&p, 0, sizeof p);
    p.n_ops = n_ops;
    p.n_out = n_out;
    p.f64 = k->in[0]->dtype == FR_F64;
    p.out = k->out[0]->data;
    int sum_letter[52], n_sum = 0;
    for (int li = 0; li < n_letters; li++)
        if (!strchr(out, letters[li])) {
            if (n_sum >= ES_MAX_SUM)
                return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s' sums over more than %d letters", eq,
                                     ES_MAX_SUM);
            sum_letter[n_sum++] = li;
        }
    p.n_sum = n_sum;
    p.n_out_elems = 1;
    for (int d = 0; d < n_out; d++) {
        p.out_size[d] = size[strchr(letters, out[d]) - letters];
        p.n_out_elems *= p.out_size[d];
    }
    p.n_sum_elems = 1;
    for (int s = 0; s < n_sum; s++) {
        p.sum_size[s] = size[sum_letter[s]];
        p.n_sum_elems *= p.sum_size[s];
    }
    for (int op = 0; op < n_ops; op++) {
        const fr_tensor *t = k->in[op];
        p.in[op] = t->data;
        int64_t stride = 1;
        for (int d = t->rank - 1; d >= 0; d--) {
            char c = in[op][d];
            int64_t st = t->dims[d] == 1 ? 0 : stride;
            stride *= t->dims[d];
            const char *po = strchr(out, c);
            if (po) {
                p.out_stride[op][po - out] = st;
            } else {
                int li = (int)(strchr(letters, c) - letters);
                for (int s = 0; s < n_sum; s++)
                    if (sum_letter[s] == li) p.sum_stride[op][s] = st;
            }
        }
    }
    const fr_tensor *y = k->out[0];
    if (fr_tensor_numel(y) != p.n_out_elems || y->dtype != k->in[0]->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output does not have the inferred shape (re-run shape inference)");
    if (p.n_out_elems == 0) return FR_OK;
    einsum_kernel<<<grid_for(p.n_out_elems), THREADS, 0, k->cu->stream>>>(p);
    return fr_cuda_check_launch(n, "einsum");
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_matmul[] = {
    {"MatMul", FR_DOMAIN_ONNX, matmul_run, NULL},
    {"MatMul", FR_DOMAIN_FP8RUN, mmx_run, NULL},
    {"Gemm", FR_DOMAIN_ONNX, gemm_run, NULL},
    {"Einsum", FR_DOMAIN_ONNX, einsum_run, NULL},
    {NULL, NULL, NULL, NULL},
};
