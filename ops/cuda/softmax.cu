/* CUDA kernels of the softmax family (see ops/cuda/cuda_kernel.h for the contract):
 * Softmax, LogSoftmax, SoftmaxGrad, LogSoftmaxGrad (ops/softmax.c), float32 and float64, with
 * the CPU's conventions (opset < 13 flattens the trailing dims at axis, opset >= 13 normalizes
 * one axis; the backward ops take axis and flatten explicitly). The loss head
 * SoftmaxCrossEntropy, on the same rows, is in loss.cu.
 *
 * Rows are normalized by one warp (rows up to 2048 elements, 8 rows per block) or one block
 * of 512 threads (longer rows: attention over long sequences, vocabulary-sized logits), with
 * 16-byte vector loads when the row allows. The statistics come from one read of the row:
 * each thread keeps an online (max, sum of exp(x - max)) pair, the sum in double, and the
 * pairs combine in a fixed tree (deterministic). A row whose max is not finite (all -inf,
 * or holding +inf) or that holds a NaN gives NaN everywhere, as the CPU's formula does.
 * Rows along a non-last axis (opset >= 13, axis < rank-1) run one thread per row, the
 * threads of a warp on neighbouring columns (coalesced). */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/softmax_rows.cuh"

namespace {

/* ---------------------------------------------------------------- Softmax / LogSoftmax ---- */

struct SmShape {
    int64_t outer, len, inner;
};

fr_status sm_split(const fr_node *n, int64_t axis64, int legacy, const fr_tensor *x, SmShape *s)
{
    int axis;
    if (x->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis64, x->rank, &axis));
    s->outer = s->len = s->inner = 1;
    for (int k = 0; k < x->rank; k++) {
        if (k < axis)
            s->outer *= x->dims[k];
        else if (k == axis || legacy)
            s->len *= x->dims[k];
        else
            s->inner *= x->dims[k];
    }
    return FR_OK;
}

/* Rows of len contiguous elements: G threads per row (32: BLOCK/32 rows per block). */
template <class T, int V, int G>
__global__ void __launch_bounds__(G == 32 ? 256 : G) sm_rows(const T *x, T *y, int64_t rows, int64_t len, int log_)
{
    constexpr int RPB = G == 32 ? 256 / 32 : 1;
    const int64_t row0 = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    for (int64_t rb = row0; rb - (threadIdx.x / G) < rows; rb += (int64_t)gridDim.x * RPB) {
        const bool valid = rb < rows;
        const T *xr = x + (valid ? rb : 0) * len;
        T *yr = y + (valid ? rb : 0) * len;
        const int64_t nv = valid ? len / V : 0;
        MS<T> st = ms_init<T>();
        for (int64_t i = lane; i < nv; i += G) {
            const Vec<T, V> q = ld_vec<T, V>(xr, i);
#pragma unroll
            for (int j = 0; j < V; j++) ms_add(st, q.v[j]);
        }
        st = group_allreduce<G>(st, MSComb<T>{});
        const double sum = ms_sum(st);
        if (log_) {
            const double shift = (double)st.m + log(sum);
            for (int64_t i = lane; i < nv; i += G) {
                Vec<T, V> q = ld_vec<T, V>(xr, i);
#pragma unroll
                for (int j = 0; j < V; j++) q.v[j] = (T)((double)q.v[j] - shift);
                st_vec<T, V>(yr, i, q);
            }
        } else {
            const T inv = (T)(1.0 / sum);
            for (int64_t i = lane; i < nv; i += G) {
                Vec<T, V> q = ld_vec<T, V>(xr, i);
#pragma unroll
                for (int j = 0; j < V; j++) q.v[j] = exp_t((T)(q.v[j] - st.m)) * inv;
                st_vec<T, V>(yr, i, q);
            }
        }
    }
}

/* Rows along a non-last axis: one thread per (outer, inner) row, element k at k * inner. */
template <class T>
__global__ void __launch_bounds__(256) sm_cols(const T *x, T *y, SmShape s, int log_)
{
    const int64_t n = s.outer * s.inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / s.inner, i = t % s.inner, base = o * s.len * s.inner + i;
        MS<T> st = ms_init<T>();
        for (int64_t k = 0; k < s.len; k++) ms_add(st, x[base + k * s.inner]);
        const double sum = ms_sum(st);
        if (log_) {
            const double shift = (double)st.m + log(sum);
            for (int64_t k = 0; k < s.len; k++) y[base + k * s.inner] = (T)((double)x[base + k * s.inner] - shift);
        } else {
            const T inv = (T)(1.0 / sum);
            for (int64_t k = 0; k < s.len; k++) y[base + k * s.inner] = exp_t((T)(x[base + k * s.inner] - st.m)) * inv;
        }
    }
}

template <class T> fr_status sm_launch(const fr_cuda_kctx *k, const SmShape &s, int log_)
{
    const T *x = (const T *)k->in[0]->data;
    T *y = (T *)k->out[0]->data;
    cudaStream_t st = k->cu->stream;
    constexpr int VW = 16 / sizeof(T);
    if (s.inner == 1) {
        const int64_t rows = s.outer;
        const bool vec = can_vec<T>(s.len, x, y, y);
        if (s.len <= kSmallRow) {
            const unsigned b = blocks_for(rows, 8);
            if (vec) sm_rows<T, VW, 32><<<b, 256, 0, st>>>(x, y, rows, s.len, log_);
            else sm_rows<T, 1, 32><<<b, 256, 0, st>>>(x, y, rows, s.len, log_);
        } else {
            const unsigned b = blocks_for(rows, 1);
            if (vec) sm_rows<T, VW, kBig><<<b, kBig, 0, st>>>(x, y, rows, s.len, log_);
            else sm_rows<T, 1, kBig><<<b, kBig, 0, st>>>(x, y, rows, s.len, log_);
        }
    } else {
        sm_cols<T><<<blocks_for(s.outer * s.inner, 256), 256, 0, st>>>(x, y, s, log_);
    }
    return fr_cuda_check_launch(k->node, k->node->op_type);
}

fr_status sm_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 1 || !k->in[0] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = k->in[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
    if (k->out[0]->dtype != x->dtype || k->out[0]->nbytes != x->nbytes)
        return fr_node_error(n, FR_ERR_SHAPE, "output must match the input's dtype and shape (re-run shape inference)");
    const int legacy = k->opset >= 1 && k->opset < 13;
    int64_t axis;
    FR_TRY(fr_node_attr_int(n, "axis", legacy ? 1 : -1, &axis));
    SmShape s;
    FR_TRY(sm_split(n, axis, legacy, x, &s));
    if (s.outer * s.len * s.inner == 0) return FR_OK;
    const int lg = strcmp(n->op_type, "LogSoftmax") == 0;
    return x->dtype == FR_F32 ? sm_launch<float>(k, s, lg) : sm_launch<double>(k, s, lg);
}

/* ---------------------------------------------------------------- backward ---- */

/* SoftmaxGrad: dx = y (dy - sum(dy y)); LogSoftmaxGrad: dx = dy - exp(y) sum(dy).
 * Sums in double, the elementwise formula in double (one rounding per output). */
template <class T> __device__ __forceinline__ double smg_term(T dy, T y, int log_)
{
    return log_ ? (double)dy : (double)dy * (double)y;
}
template <class T> __device__ __forceinline__ T smg_out(T dy, T y, double sum, int log_)
{
    return log_ ? (T)((double)dy - (double)exp_t(y) * sum) : (T)((double)y * ((double)dy - sum));
}

template <class T, int V, int G>
__global__ void __launch_bounds__(G == 32 ? 256 : G) smg_rows(const T *dy, const T *y, T *dx, int64_t rows, int64_t len,
                                                             int log_)
{
    constexpr int RPB = G == 32 ? 256 / 32 : 1;
    const int64_t row0 = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    for (int64_t rb = row0; rb - (threadIdx.x / G) < rows; rb += (int64_t)gridDim.x * RPB) {
        const bool valid = rb < rows;
        const int64_t off = (valid ? rb : 0) * len;
        const int64_t nv = valid ? len / V : 0;
        double acc = 0.0;
        for (int64_t i = lane; i < nv; i += G) {
            const Vec<T, V> a = ld_vec<T, V>(dy + off, i), b = ld_vec<T, V>(y + off, i);
#pragma unroll
            for (int j = 0; j < V; j++) acc += smg_term(a.v[j], b.v[j], log_);
        }
        const double sum = group_allreduce<G>(acc, AddD{});
        for (int64_t i = lane; i < nv; i += G) {
            const Vec<T, V> a = ld_vec<T, V>(dy + off, i), b = ld_vec<T, V>(y + off, i);
            Vec<T, V> q;
#pragma unroll
            for (int j = 0; j < V; j++) q.v[j] = smg_out(a.v[j], b.v[j], sum, log_);
            st_vec<T, V>(dx + off, i, q);
        }
    }
}

template <class T>
__global__ void __launch_bounds__(256) smg_cols(const T *dy, const T *y, T *dx, SmShape s, int log_)
{
    const int64_t n = s.outer * s.inner;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = t / s.inner, i = t % s.inner, base = o * s.len * s.inner + i;
        double sum = 0.0;
        for (int64_t k = 0; k < s.len; k++) sum += smg_term(dy[base + k * s.inner], y[base + k * s.inner], log_);
        for (int64_t k = 0; k < s.len; k++) {
            const int64_t e = base + k * s.inner;
            dx[e] = smg_out(dy[e], y[e], sum, log_);
        }
    }
}

template <class T> fr_status smg_launch(const fr_cuda_kctx *k, const SmShape &s, int log_)
{
    const T *dy = (const T *)k->in[0]->data, *y = (const T *)k->in[1]->data;
    T *dx = (T *)k->out[0]->data;
    cudaStream_t st = k->cu->stream;
    constexpr int VW = 16 / sizeof(T);
    if (s.inner == 1) {
        const int64_t rows = s.outer;
        const bool vec = can_vec<T>(s.len, dy, y, dx);
        if (s.len <= kSmallRow) {
            const unsigned b = blocks_for(rows, 8);
            if (vec) smg_rows<T, VW, 32><<<b, 256, 0, st>>>(dy, y, dx, rows, s.len, log_);
            else smg_rows<T, 1, 32><<<b, 256, 0, st>>>(dy, y, dx, rows, s.len, log_);
        } else {
            const unsigned b = blocks_for(rows, 1);
            if (vec) smg_rows<T, VW, kBig><<<b, kBig, 0, st>>>(dy, y, dx, rows, s.len, log_);
            else smg_rows<T, 1, kBig><<<b, kBig, 0, st>>>(dy, y, dx, rows, s.len, log_);
        }
    } else {
        smg_cols<T><<<blocks_for(s.outer * s.inner, 256), 256, 0, st>>>(dy, y, dx, s, log_);
    }
    return fr_cuda_check_launch(k->node, k->node->op_type);
}

fr_status smg_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1] || k->n_out != 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs dy, y and one output");
    const fr_tensor *dy = k->in[0], *y = k->in[1];
    fr_tensor *dx = k->out[0];
    if (y->dtype != FR_F32 && y->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s is not supported", fr_dtype_name(y->dtype));
    int same = dy->dtype == y->dtype && dx->dtype == y->dtype && dy->rank == y->rank && dx->rank == y->rank;
    for (int d = 0; same && d < y->rank; d++) same = dy->dims[d] == y->dims[d] && dx->dims[d] == y->dims[d];
    if (!same) return fr_node_error(n, FR_ERR_SHAPE, "dy, y and dx must have one dtype and shape (re-run shape inference)");
    int64_t axis, flatten;
    FR_TRY(fr_node_attr_int(n, "axis", -1, &axis));
    FR_TRY(fr_node_attr_int(n, "flatten", 0, &flatten));
    if (flatten != 0 && flatten != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "flatten=%lld must be 0 or 1", (long long)flatten);
    SmShape s;
    FR_TRY(sm_split(n, axis, (int)flatten, y, &s));
    if (s.outer * s.len * s.inner == 0) return FR_OK;
    const int lg = strcmp(n->op_type, "LogSoftmaxGrad") == 0;
    return y->dtype == FR_F32 ? smg_launch<float>(k, s, lg) : smg_launch<double>(k, s, lg);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_softmax[] = {
    {"Softmax", FR_DOMAIN_ONNX, sm_cuda, NULL},
    {"LogSoftmax", FR_DOMAIN_ONNX, sm_cuda, NULL},
    {"SoftmaxGrad", FR_DOMAIN_FP8RUN, smg_cuda, NULL},
    {"LogSoftmaxGrad", FR_DOMAIN_FP8RUN, smg_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
