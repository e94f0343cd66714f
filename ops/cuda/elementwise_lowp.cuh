/* Same-shape elementwise ops whose inputs and output are each float32 or bfloat16, 16 bytes at a
 * time (the mixed-dtype twin of elementwise_util.cuh's ew_vec4_kernel).
 *
 * Why: the flat kernel moves one 2-byte element per thread and iteration, and on an H200 the
 * bfloat16 Gelu and its gradient over [16384, 8192] ran at 27-41% of the memory ceiling with it.
 * Here a thread loads 8 elements of every input (one 16-byte word of bfloat16, two of float32:
 * vec16.cuh), twice per iteration before computing, and stores 8 results. f(const float *a) ->
 * float is the per-element function of the scalar kernel on the widened inputs, and a bfloat16
 * output is rounded to nearest even as the scalar kernel does, so the results are the same bits.
 * Every pointer must be 16-byte aligned (ew_lowp_ok); the last n % 8 elements are done one by
 * one. No __restrict__: the output may be an input's buffer (each element is read before it is
 * written, by the same thread). */
#ifndef FR_CUDA_ELEMENTWISE_LOWP_CUH
#define FR_CUDA_ELEMENTWISE_LOWP_CUH

#include "ops/cuda/elementwise_util.cuh"
#include "ops/cuda/vec16.cuh"

__device__ __forceinline__ float ew_lowp_widen(float v) { return v; }
__device__ __forceinline__ float ew_lowp_widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void ew_lowp_put(float *p, float v) { *p = v; }
__device__ __forceinline__ void ew_lowp_put(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* NIN (1 or 2) inputs a (TA) and b (TB; unused with one input), output y (TY) */
template <int NIN, typename TA, typename TB, typename TY, typename F>
__global__ void __launch_bounds__(EW_THREADS)
    ew_lowp_kernel(int64_t n, const TA *a, const TB *b, TY *y, F f)
{
    const int64_t nv = n / 8, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < nv; i += 2 * stride) {
        const int two = i + stride < nv;
        fr_vf<8> x[2], w[2];
        x[0] = fr_vld<8>(a, i);
        if constexpr (NIN == 2) w[0] = fr_vld<8>(b, i);
        if (two) {
            x[1] = fr_vld<8>(a, i + stride);
            if constexpr (NIN == 2) w[1] = fr_vld<8>(b, i + stride);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (u == 1 && !two) break;
            fr_vf<8> r;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float in[2] = {x[u].v[j], NIN == 2 ? w[u].v[j] : 0.0f};
                r.v[j] = f(in);
            }
            fr_vst<8>(y, i + u * stride, r);
        }
    }
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n - nv * 8) { /* the tail: at most 7 elements */
        const int64_t e = nv * 8 + t;
        float in[2] = {ew_lowp_widen(a[e]), 0.0f};
        if constexpr (NIN == 2) in[1] = ew_lowp_widen(b[e]);
        ew_lowp_put(y + e, f(in));
    }
}

static inline int ew_lowp_ok(const void *a, const void *b, const void *y)
{
    return fr_aligned_to(a, 16) && fr_aligned_to(b, 16) && fr_aligned_to(y, 16);
}

template <int NIN, typename TA, typename TB, typename TY, typename F>
static FR_NODISCARD fr_status ew_launch_lowp(const fr_cuda_kctx *k, int64_t n, const TA *a, const TB *b, TY *y,
                                             const F &f, const char *name)
{
    if (n == 0) return FR_OK;
    ew_lowp_kernel<NIN, TA, TB, TY, F><<<ew_blocks(k, (n + 7) / 8), EW_THREADS, 0, k->cu->stream>>>(n, a, b, y, f);
    return fr_cuda_check_launch(k->node, name);
}

#endif
