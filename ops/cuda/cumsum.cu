/* CUDA kernels of CumSum (ops/cumsum.c), with the CPU kernel's semantics; the kernel table is in
 * reduce.cu.
 *
 * Device errors: CumSum with a non-constant axis input reads the axis on the device; an axis
 * out of range (FR_ERR_SHAPE on the CPU) is recorded in the context's device error word
 * (fr_dev_error: the node, the axis, the rank) and the output is zeros; no host
 * synchronization is allowed. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/reduce_engine.cuh"

namespace {

/* ---------------------------------------------------------------- CumSum ---- */

/* Lines of `len` elements `inner` apart; sums run in double as on the CPU (exact for integers
 * below 2^53, so integer results are identical whatever the order). */
struct CsShape {
    int rank;
    int64_t dims[FR_MAX_RANK];
};

template <class T> __device__ __forceinline__ void cs_put(T *y, int64_t i, double v) { y[i] = (T)v; }

/* inner == 1: one block per line, scanned 256 elements at a time with a running carry */
template <class T>
__global__ void __launch_bounds__(kThreads) cs_rows(const T *x, T *y, int64_t lines, int64_t len, int exclusive, int reverse)
{
    __shared__ double wsum[kThreads / 32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
        const T *xl = x + line * len;
        T *yl = y + line * len;
        double carry = 0.0;
        for (int64_t c0 = 0; c0 < len; c0 += kThreads) {
            const int64_t k = c0 + threadIdx.x;
            const int64_t kk = reverse ? len - 1 - k : k;
            const double v = k < len ? (double)xl[kk] : 0.0;
            double inc = v; /* warp inclusive scan */
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const double t = __shfl_up_sync(0xffffffffu, inc, d);
                if (lane >= d) inc += t;
            }
            double exc = __shfl_up_sync(0xffffffffu, inc, 1);
            if (lane == 0) exc = 0.0;
            if (lane == 31) wsum[w] = inc;
            __syncthreads();
            double woff = 0.0, total = 0.0;
#pragma unroll
            for (int j = 0; j < kThreads / 32; j++) {
                if (j < w) woff += wsum[j];
                total += wsum[j];
            }
            if (k < len) cs_put(yl, kk, carry + woff + (exclusive ? exc : inc));
            carry += total;
            __syncthreads(); /* wsum is rewritten by the next chunk */
        }
    }
}

/* inner > 1 (or the axis known only on the device): one thread per line, sequential along it,
 * consecutive threads on consecutive inner positions (coalesced). axis_dev != NULL: read the
 * axis there (int32 or int64), normalized as the CPU does; out of range goes to the device
 * error word and the output is zeros. */
template <class T>
__global__ void __launch_bounds__(kThreads) cs_lines(const T *x, T *y, CsShape s, int axis, const void *axis_dev,
                                                    int axis_is64, int exclusive, int reverse, int *err, int node)
{
    int64_t numel = 1;
    for (int k = 0; k < s.rank; k++) numel *= s.dims[k];
    if (axis_dev) {
        const long long a = axis_is64 ? *(const long long *)axis_dev : (long long)*(const int *)axis_dev;
        if (a < -s.rank || a >= s.rank) {
            if (blockIdx.x == 0 && threadIdx.x == 0) fr_dev_error(err, FR_ERR_SHAPE, node, a, s.rank);
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
                y[i] = (T)0;
            return;
        }
        axis = (int)(a < 0 ? a + s.rank : a);
    }
    int64_t len = s.dims[axis], inner = 1;
    for (int k = axis + 1; k < s.rank; k++) inner *= s.dims[k];
    if (len == 0 || inner == 0) return;
    const int64_t lines = numel / len;
    for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < lines; l += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = l / inner, i = l % inner, base = o * len * inner + i;
        double acc = 0.0;
        for (int64_t k = 0; k < len; k++) {
            const int64_t off = base + (reverse ? len - 1 - k : k) * inner;
            const double v = (double)x[off];
            if (exclusive) {
                cs_put(y, off, acc);
                acc += v;
            } else {
                acc += v;
                cs_put(y, off, acc);
            }
        }
    }
}

template <class T> fr_status cs_run(const fr_cuda_kctx *k, int axis, int exclusive, int reverse)
{
    const fr_tensor *x = k->in[0];
    const T *xd = (const T *)x->data;
    T *yd = (T *)k->out[0]->data;
    const int64_t numel = fr_tensor_numel(x);
    cudaStream_t st = k->cu->stream;
    CsShape s;
    memset(&s, 0, sizeof s);
    s.rank = x->rank;
    memcpy(s.dims, x->dims, sizeof s.dims);
    if (axis >= 0) {
        int64_t len = x->dims[axis], inner = 1;
        for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
        if (inner == 1 && len > 1) {
            const int64_t lines = numel / len;
            cs_rows<T><<<(unsigned)(lines < 65536 ? lines : 65536), kThreads, 0, st>>>(xd, yd, lines, len, exclusive,
                                                                                    reverse);
            return fr_cuda_check_launch(k->node, "CumSum");
        }
        cs_lines<T><<<grid_for(numel / (len ? len : 1)), kThreads, 0, st>>>(xd, yd, s, axis, nullptr, 0, exclusive,
                                                                            reverse, nullptr, 0);
        return fr_cuda_check_launch(k->node, "CumSum");
    }
    /* the axis lives on the device */
    const fr_tensor *a = k->in[1];
    cs_lines<T><<<grid_for(numel), kThreads, 0, st>>>(xd, yd, s, 0, a->data, a->dtype == FR_I64, exclusive, reverse,
                                                      k->cu->dev_error, fr_node_index(k));
    return fr_cuda_check_launch(k->node, "CumSum");
}

fr_status cs_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs x, axis and one output");
    if (!k->in[1]) return fr_node_error(n, FR_ERR_GRAPH, "the axis input is required");
    const fr_tensor *x = k->in[0], *at = k->in[1];
    if (x->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    if (!fr_dtype_is_int(at->dtype) || fr_tensor_numel(at) != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "axis must be an integer scalar");
    if (at->dtype != FR_I64 && at->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "axis dtype %s (int32 or int64)", fr_dtype_name(at->dtype));
    int64_t exclusive, reverse;
    FR_TRY(fr_node_attr_int(n, "exclusive", 0, &exclusive));
    FR_TRY(fr_node_attr_int(n, "reverse", 0, &reverse));
    int axis = -1; /* -1: read on the device */
    const fr_tensor *c = const_input(k->g, n, 1);
    if (c) FR_TRY(fr_norm_axis(n, fr_tensor_get_i64(c, 0), x->rank, &axis));
    if (fr_tensor_numel(x) == 0) return FR_OK;
    const int ex = exclusive != 0, rv = reverse != 0;
    switch (x->dtype) {
    case FR_F32: return cs_run<float>(k, axis, ex, rv);
    case FR_F64: return cs_run<double>(k, axis, ex, rv);
    case FR_I32: return cs_run<int32_t>(k, axis, ex, rv);
    case FR_I64: return cs_run<long long>(k, axis, ex, rv);
    default: return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    }
}

} /* namespace */

fr_status fr_cumsum_cuda(const fr_cuda_kctx *k) { return cs_cuda(k); }
