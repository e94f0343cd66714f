/* CUDA kernels of ops/rotary.c: Rotary and RotaryGrad (ops/rotary.h), one pass each.
 *
 * One thread handles a pair of column groups (j and j + h of one row, h = hd / 2), so it reads
 * X[j], X[j + h] once and writes both outputs. float32 with h a multiple of 4, tables contiguous
 * along the last axis, every row start 16-byte aligned: 4 columns per thread with 16-byte loads
 * and stores; otherwise (and interleaved: pairs 2p, 2p + 1) one column pair per thread. The tables' row offsets come from the
 * collapsed row dims and their strides (fr_rotary_geom: broadcasting costs no copy); indices
 * are 32-bit when the problem fits. Float math: within an ulp or two of the CPU's double.
 * A partial rotary (rotary_dim R < hd) runs the same kernels on the first R columns of each row
 * (h = R / 2, rows still hd apart) and copies the other columns with one strided memcpy. */
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
extern "C" {
#include "ops/rotary.h"
}

namespace {

constexpr int kThreads = 256;

template <typename T> struct Args {
    const T *x, *cos, *sin;
    T *y;
    int64_t rows, h, hd, n; /* n: work items (rows * h, or rows * h / 4) */
    int nd;
    int64_t dims[FR_MAX_RANK], cs[FR_MAX_RANK], ss[FR_MAX_RANK];
    int64_t cl, sl;
    int64_t step, off; /* a pair's columns: (p * step, p * step + off) */
};

/* Row r's table offsets. */
template <typename T, typename I> __device__ __forceinline__ void offsets(const Args<T> &a, I r, I &co, I &so)
{
    co = 0;
    so = 0;
    for (int k = a.nd - 1; k >= 0; k--) {
        const I d = (I)a.dims[k], q = r / d, i = r - q * d;
        r = q;
        co += i * (I)a.cs[k];
        so += i * (I)a.ss[k];
    }
}

/* x0 = X[j], x1 = X[j + h]; c0, s0 the tables at j, c1, s1 at j + h */
template <bool GRAD, typename T>
__device__ __forceinline__ void pair(T x0, T x1, T c0, T c1, T s0, T s1, T &y0, T &y1)
{
    if (GRAD) {
        y0 = fma(x0, c0, x1 * s1);
        y1 = fma(x1, c1, -(x0 * s0));
    } else {
        y0 = fma(x0, c0, -(x1 * s0));
        y1 = fma(x1, c1, x0 * s1);
    }
}

template <bool GRAD, typename T, typename I> __global__ void rotary_pairs(Args<T> a)
{
    const I n = (I)a.n, h = (I)a.h, hd = (I)a.hd, cl = (I)a.cl, sl = (I)a.sl;
    for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
        const I r = e / h, p = e - r * h, j = p * (I)a.step, k = j + (I)a.off;
        I co, so;
        offsets<T, I>(a, r, co, so);
        const T *xr = a.x + r * hd;
        T *yr = a.y + r * hd;
        T y0, y1;
        pair<GRAD>(xr[j], xr[k], a.cos[co + j * cl], a.cos[co + k * cl], a.sin[so + j * sl], a.sin[so + k * sl], y0,
                   y1);
        yr[j] = y0;
        yr[k] = y1;
    }
}

template <bool GRAD, typename I> __global__ void rotary_pairs4(Args<float> a)
{
    const I n = (I)a.n, h4 = (I)(a.h / 4), hd4 = (I)(a.hd / 4);
    const float4 *x4 = (const float4 *)a.x, *c4 = (const float4 *)a.cos, *s4 = (const float4 *)a.sin;
    float4 *y4 = (float4 *)a.y;
    for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (I)gridDim.x * blockDim.x) {
        const I r = e / h4, j = e - r * h4;
        I co, so;
        offsets<float, I>(a, r, co, so);
        co /= 4;
        so /= 4;
        const float4 x0 = x4[r * hd4 + j], x1 = x4[r * hd4 + j + h4];
        const float4 c0 = c4[co + j], c1 = c4[co + j + h4], s0 = s4[so + j], s1 = s4[so + j + h4];
        float4 y0, y1;
        pair<GRAD>(x0.x, x1.x, c0.x, c1.x, s0.x, s1.x, y0.x, y1.x);
        pair<GRAD>(x0.y, x1.y, c0.y, c1.y, s0.y, s1.y, y0.y, y1.y);
        pair<GRAD>(x0.z, x1.z, c0.z, c1.z, s0.z, s1.z, y0.z, y1.z);
        pair<GRAD>(x0.w, x1.w, c0.w, c1.w, s0.w, s1.w, y0.w, y1.w);
        y4[r * hd4 + j] = y0;
        y4[r * hd4 + j + h4] = y1;
    }
}

int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

template <bool GRAD, typename T, typename I> void go(const Args<T> &a, unsigned blocks, cudaStream_t s)
{
    rotary_pairs<GRAD, T, I><<<blocks, kThreads, 0, s>>>(a);
}

template <typename T> fr_status launch(const fr_cuda_kctx *k, const fr_rotary_geom &geo, int grad)
{
    Args<T> a;
    memset(&a, 0, sizeof a);
    a.x = (const T *)k->in[0]->data;
    a.cos = (const T *)k->in[1]->data;
    a.sin = (const T *)k->in[2]->data;
    a.y = (T *)k->out[0]->data;
    a.rows = geo.rows;
    a.hd = geo.hd;
    a.h = geo.rd / 2; /* the rotated columns: the first rd of each row */
    a.nd = geo.nd;
    for (int d = 0; d < geo.nd; d++) {
        a.dims[d] = geo.dims[d];
        a.cs[d] = geo.cos_stride[d];
        a.ss[d] = geo.sin_stride[d];
    }
    a.cl = geo.cos_last;
    a.sl = geo.sin_last;
    a.step = geo.interleaved ? 2 : 1;
    a.off = geo.interleaved ? 1 : a.h;
    if (a.rows * a.h == 0) return FR_OK;
    cudaStream_t s = k->cu->stream;
    if (geo.rd < geo.hd && (const void *)a.y != (const void *)a.x) { /* the columns past rotary_dim pass through */
        const size_t es = sizeof(T), pitch = (size_t)geo.hd * es;
        FR_CUDA_TRY(cudaMemcpy2DAsync(a.y + geo.rd, pitch, a.x + geo.rd, pitch, (size_t)(geo.hd - geo.rd) * es,
                                      (size_t)geo.rows, cudaMemcpyDeviceToDevice, s));
    }
    int vec = !geo.interleaved && sizeof(T) == 4 && a.h % 4 == 0 && a.hd % 4 == 0 && a.cl == 1 && a.sl == 1 && aligned16(a.x) && aligned16(a.y) &&
              aligned16(a.cos) && aligned16(a.sin);
    for (int d = 0; vec && d < geo.nd; d++) vec = a.cs[d] % 4 == 0 && a.ss[d] % 4 == 0;
    a.n = vec ? a.rows * a.h / 4 : a.rows * a.h;
    /* 32-bit indices when every element index and table offset fits */
    int64_t tab = 0;
    for (int i = 1; i < 3; i++) tab = tab > (int64_t)fr_tensor_numel(k->in[i]) ? tab : (int64_t)fr_tensor_numel(k->in[i]);
    const int small = a.rows * a.hd < ((int64_t)1 << 31) && tab < ((int64_t)1 << 31);
    const unsigned blocks = fr_grid_for(a.n, kThreads);
    if (vec) {
        Args<float> f = *(Args<float> *)&a;
        if (grad && small)
            rotary_pairs4<true, uint32_t><<<blocks, kThreads, 0, s>>>(f);
        else if (grad)
            rotary_pairs4<true, int64_t><<<blocks, kThreads, 0, s>>>(f);
        else if (small)
            rotary_pairs4<false, uint32_t><<<blocks, kThreads, 0, s>>>(f);
        else
            rotary_pairs4<false, int64_t><<<blocks, kThreads, 0, s>>>(f);
    } else if (grad && small) {
        go<true, T, uint32_t>(a, blocks, s);
    } else if (grad) {
        go<true, T, int64_t>(a, blocks, s);
    } else if (small) {
        go<false, T, uint32_t>(a, blocks, s);
    } else {
        go<false, T, int64_t>(a, blocks, s);
    }
    return fr_cuda_check_launch(k->node, grad ? "rotary_bwd" : "rotary_fwd");
}

fr_status run(const fr_cuda_kctx *k, int grad)
{
    fr_rotary_geom geo;
    FR_TRY(fr_rotary_geometry(k->g, k->node, &geo));
    const fr_tensor *x = k->in[0];
    FR_TRY(fr_check_out(k->node, k->out[0], x->dtype, x->rank, x->dims));
    return x->dtype == FR_F32 ? launch<float>(k, geo, grad) : launch<double>(k, geo, grad);
}

fr_status rotary_cuda(const fr_cuda_kctx *k) { return run(k, 0); }
fr_status rotaryg_cuda(const fr_cuda_kctx *k) { return run(k, 1); }

} // namespace

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_rotary[] = {
    {"Rotary", FR_DOMAIN_FP8RUN, rotary_cuda, NULL},
    {"RotaryGrad", FR_DOMAIN_FP8RUN, rotaryg_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
