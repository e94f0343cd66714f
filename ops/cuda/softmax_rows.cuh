/* The row machinery of the softmax family (softmax.cu) and the loss head (loss.cu): one warp
 * or one block of kBig threads per row, a group all-reduce, the online (max, sum of
 * exp(x - max)) pair with its sum in double combined in a fixed tree, and 16-byte vector loads.
 * Internal to those two files (an anonymous namespace: each keeps its own copy). */
#ifndef FR_CUDA_SOFTMAX_ROWS_CUH
#define FR_CUDA_SOFTMAX_ROWS_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"

namespace {

constexpr int kBig = 512;        /* threads per long row */
constexpr int kSmallRow = 2048;  /* rows up to this length take one warp */

/* ---------------------------------------------------------------- helpers ---- */

__device__ __forceinline__ float exp_t(float v) { return expf(v); }
__device__ __forceinline__ double exp_t(double v) { return exp(v); }
__device__ __forceinline__ float expm1_t(float v) { return expm1f(v); }
__device__ __forceinline__ double expm1_t(double v) { return expm1(v); }

/* Reduce over a group of G threads (32: a warp; else the whole block of G threads), then
 * broadcast: every thread of the group gets the result. All threads must call it. */
template <int G, class A, class Cb> __device__ __forceinline__ A group_allreduce(A v, Cb cb)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = cb(v, fr_shfl_down(v, d));
    if (G == 32) {
        int w[sizeof(A) / 4];
        memcpy(w, &v, sizeof(A));
#pragma unroll
        for (int i = 0; i < (int)(sizeof(A) / 4); i++) w[i] = __shfl_sync(0xffffffffu, w[i], 0);
        memcpy(&v, w, sizeof(A));
        return v;
    }
    __shared__ A sm[G / 32 > 0 ? G / 32 : 1];
    __shared__ A res;
    const int wi = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sm[wi] = v;
    __syncthreads();
    if (wi == 0) {
        A t = sm[l < G / 32 ? l : 0];
        const bool in = l < G / 32;
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            const A o = fr_shfl_down(t, d);
            if (l + d < G / 32 && in) t = cb(t, o);
        }
        if (l == 0) res = t;
    }
    __syncthreads();
    const A r = res;
    __syncthreads(); /* res and sm are reused by the next call */
    return r;
}

struct AddD {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* online softmax statistics: max and sum of exp(x - max) */
template <class T> struct MS {
    T m;
    double s;
};
template <class T> __device__ __forceinline__ MS<T> ms_init() { return MS<T>{(T)-INFINITY, 0.0}; }
template <class T> __device__ __forceinline__ void ms_add(MS<T> &a, T v)
{
    if (v > a.m) {
        a.s = a.s * (double)exp_t((T)(a.m - v)) + 1.0;
        a.m = v;
    } else if (v != (T)-INFINITY) { /* NaN lands here and makes the sum NaN */
        a.s += (double)exp_t((T)(v - a.m));
    }
}
template <class T> struct MSComb {
    __device__ MS<T> operator()(MS<T> a, MS<T> b) const
    {
        const T m = a.m > b.m ? a.m : b.m;
        const double sa = a.m == (T)-INFINITY ? a.s * 0.0 : a.s * (double)exp_t((T)(a.m - m));
        const double sb = b.m == (T)-INFINITY ? b.s * 0.0 : b.s * (double)exp_t((T)(b.m - m));
        return MS<T>{m, sa + sb};
    }
};
/* the row's sum, NaN unless the max is finite (all -inf, +inf, NaN rows are NaN) */
template <class T> __device__ __forceinline__ double ms_sum(const MS<T> &a)
{
    return isfinite((double)a.m) ? a.s : (double)NAN;
}

/* V consecutive elements, loaded as one 16-byte vector when V > 1 */
template <class T, int V> struct alignas(sizeof(T) * V) Vec {
    T v[V];
};
template <class T, int V> __device__ __forceinline__ Vec<T, V> ld_vec(const T *p, int64_t i)
{
    return reinterpret_cast<const Vec<T, V> *>(p)[i];
}
template <class T, int V> __device__ __forceinline__ void st_vec(T *p, int64_t i, const Vec<T, V> &v)
{
    reinterpret_cast<Vec<T, V> *>(p)[i] = v;
}

/* 16-byte vectors when every row start is 16-byte aligned */
template <class T> bool can_vec(int64_t len, const void *a, const void *b, const void *c)
{
    const int64_t v = 16 / (int64_t)sizeof(T);
    return len % v == 0 && ((uintptr_t)a % 16) == 0 && ((uintptr_t)b % 16) == 0 && ((uintptr_t)c % 16) == 0;
}

unsigned blocks_for(int64_t n, int64_t per_block, int64_t cap = 1 << 20)
{
    int64_t b = (n + per_block - 1) / per_block;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

} /* namespace */

#endif
