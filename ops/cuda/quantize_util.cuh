/* Shared pieces of the kernels that write fp8 codes (quantize.cu, quantize_block.cu,
 * swiglu_quant.cu): launch sizes, the fp8 conversion, float32 / bfloat16 loads, scales from amax
 * bits and block-wide maxima. */
#ifndef FR_OPS_CUDA_QUANTIZE_UTIL_CUH
#define FR_OPS_CUDA_QUANTIZE_UTIL_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <float.h>

#include "ops/cuda/cuda_kernel.h"

#define FULL_MASK 0xFFFFFFFFu
#define NAN_BITS 0x7FC00000u /* the canonical NaN fr_amax returns */
#define INF_BITS 0x7F800000u

static inline unsigned blocks_for(int64_t work, int64_t per_block)
{
    int64_t b = (work + per_block - 1) / per_block;
    if (b > (1 << 20)) b = 1 << 20; /* grid-stride loops cover the rest */
    return (unsigned)(b < 1 ? 1 : b);
}

/* Blocks of 256 threads that fill the device once (8 a multiprocessor: 2048 threads). The
 * kernels that reduce an amax take at most this many and loop over the rest: every block ends
 * with one atomicMax on the same word, and those serialize in L2 (a warp-level atomic per 4 KB
 * of float32 made the 1B model's forward quantization ~3x slower than its bytes). The count is
 * read once per process (all devices of a run are alike); the context's cap
 * (fr_cuda_quant_blocks, from FP8RUN_QUANT_BLOCKS) overrides it. */
static inline int64_t one_wave(void)
{
    static int64_t wave; /* a benign race: every thread writes the same value */
    const int64_t cap = fr_cuda_quant_blocks();
    if (cap) return cap;
    if (!wave) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v < 1)
            v = 132;
        wave = (int64_t)v * 8;
    }
    return wave;
}

/* blocks_for, at most one wave (kernels with an amax reduction) */
static inline unsigned wave_blocks(int64_t work, int64_t per_block)
{
    int64_t b = (work + per_block - 1) / per_block, w = one_wave();
    if (b > w) b = w;
    return (unsigned)(b < 1 ? 1 : b);
}

__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(x) & 0x7FFFFFFFu; }

__device__ __forceinline__ uint8_t to_fp8(float v, int e5m2)
{
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

__device__ __forceinline__ uint8_t quantize(float x, float scale, int e5m2)
{
    return to_fp8(__fmul_rn(x, scale), e5m2); /* one float32 rounding, then the cvt */
}

/* the four codes of x[0..3] * s, packed little-endian (the first column in the low byte) */
__device__ __forceinline__ uint32_t quantize4(const float *x, float s, int e5m2)
{
    return (uint32_t)quantize(x[0], s, e5m2) | (uint32_t)quantize(x[1], s, e5m2) << 8 |
           (uint32_t)quantize(x[2], s, e5m2) << 16 | (uint32_t)quantize(x[3], s, e5m2) << 24;
}

/* ---- float32 and bfloat16 sources (fr_q_src): a bfloat16 is the top half of the float32 of
 * the same value, so widening is exact and everything after it is the float32 computation ---- */

__device__ __forceinline__ float ld_f(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld_f(const __nv_bfloat16 *p, int64_t i)
{
    return __uint_as_float((unsigned)((const unsigned short *)p)[i] << 16);
}

/* 16 loaded bytes of T as floats: 4 float32, or 8 bfloat16 (little-endian: the low half of a
 * word is the earlier element) */
template <typename T> struct q_vec;
template <> struct q_vec<float> {
    static constexpr int n = 4;
    __device__ static __forceinline__ void get(uint4 u, float *f)
    {
        f[0] = __uint_as_float(u.x);
        f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z);
        f[3] = __uint_as_float(u.w);
    }
};
template <> struct q_vec<__nv_bfloat16> {
    static constexpr int n = 8;
    __device__ static __forceinline__ void get(uint4 u, float *f)
    {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            f[2 * j] = __uint_as_float(w[j] << 16);
            f[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
        }
    }
};

template <typename T> __device__ __forceinline__ unsigned amax_vec(unsigned m, uint4 u)
{
    float f[q_vec<T>::n];
    q_vec<T>::get(u, f);
#pragma unroll
    for (int j = 0; j < q_vec<T>::n; j++) m = max(m, abs_bits(f[j]));
    return m;
}

/* the codes of a 16-byte load's values: W = n / 4 words */
template <int W> __device__ __forceinline__ void store_codes(uint8_t *p, const uint32_t *q)
{
    if constexpr (W == 1)
        *(uint32_t *)p = q[0];
    else
        *(uint2 *)p = make_uint2(q[0], q[1]);
}

static inline int aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* fr_fp8_scale_from_amax on the amax's bits: *bad for NaN/Inf (the CPU's FR_ERR_NUMERIC) */
static __device__ float scale_from_amax_bits(unsigned bits, int e5m2, int margin, int *bad)
{
    *bad = 0;
    if (bits >= INF_BITS) {
        *bad = 1;
        return 1.0f;
    }
    float amax = __uint_as_float(bits);
    if (amax == 0.0f) return 1.0f;
    float s = ldexpf(__fdiv_rn(e5m2 ? 57344.0f : 448.0f, amax), -margin);
    if (!(s <= FLT_MAX)) s = FLT_MAX;
    if (s < FLT_MIN) s = FLT_MIN;
    return s;
}

__device__ __forceinline__ float sinv_of(float scale, int bad)
{
    return bad ? __uint_as_float(NAN_BITS) : __fdiv_rn(1.0f, scale);
}

/* block-wide max of v (blockDim.x * blockDim.y threads, a multiple of 32, <= 1024) */
static __device__ unsigned block_max(unsigned v, unsigned *red)
{
    int tid = threadIdx.y * blockDim.x + threadIdx.x, nw = (blockDim.x * blockDim.y) / 32;
    v = __reduce_max_sync(FULL_MASK, v);
    __syncthreads(); /* red may still be read from a previous call */
    if ((tid & 31) == 0) red[tid / 32] = v;
    __syncthreads();
    unsigned m = 0;
    for (int w = 0; w < nw; w++) m = max(m, red[w]);
    return m;
}

/* one atomicMax per block: every thread of the block must call it (it synchronizes) */
__device__ __forceinline__ void block_atomic_max(unsigned *dst, unsigned v, unsigned *red)
{
    v = block_max(v, red);
    if (threadIdx.x == 0 && threadIdx.y == 0 && v) atomicMax(dst, v);
}

#endif
