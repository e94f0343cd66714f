/* V consecutive float32 or bfloat16 elements as V floats, moved 16 bytes at a time: the vector
 * loads and stores of the row kernels that read or write either dtype (add_norm.cu, swiglu.cu).
 * Vector i holds elements [i V, i V + V). float32: V / 4 float4 (V % 4 == 0); bfloat16: V / 8
 * 16-byte words (V % 8 == 0; V == 4: one 8-byte word); other V element by element. The pointer
 * must be aligned to the access (16 bytes; 8 for bfloat16 V == 4). bfloat16 widens exactly
 * (its bits are the float's top half) and narrows to nearest even (__float2bfloat16_rn, as
 * fr_f32_to_bf16 on the CPU). */
#ifndef FR_CUDA_VEC16_CUH
#define FR_CUDA_VEC16_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

template <int V> struct fr_vf {
    float v[V];
};

/* the two bfloat16 of word w (the lower address in the low half) as floats */
__device__ __forceinline__ void fr_bf16x2_wide(uint32_t w, float *o)
{
    o[0] = __uint_as_float(w << 16);
    o[1] = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ uint32_t fr_bf16x2_narrow(float a, float b)
{
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x (a) at the lower address */
    uint32_t w;
    memcpy(&w, &h, 4);
    return w;
}

template <int V> __device__ __forceinline__ fr_vf<V> fr_vld(const float *p, int64_t i)
{
    fr_vf<V> r;
    if constexpr (V % 4 == 0) {
        const float4 *q = reinterpret_cast<const float4 *>(p) + i * (V / 4);
#pragma unroll
        for (int c = 0; c < V / 4; c++) {
            const float4 t = q[c];
            r.v[4 * c] = t.x;
            r.v[4 * c + 1] = t.y;
            r.v[4 * c + 2] = t.z;
            r.v[4 * c + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) r.v[j] = p[i * V + j];
    }
    return r;
}

template <int V> __device__ __forceinline__ fr_vf<V> fr_vld(const __nv_bfloat16 *p, int64_t i)
{
    fr_vf<V> r;
    if constexpr (V % 8 == 0) {
        const uint4 *q = reinterpret_cast<const uint4 *>(p) + i * (V / 8);
#pragma unroll
        for (int c = 0; c < V / 8; c++) {
            const uint4 t = q[c];
            fr_bf16x2_wide(t.x, r.v + 8 * c);
            fr_bf16x2_wide(t.y, r.v + 8 * c + 2);
            fr_bf16x2_wide(t.z, r.v + 8 * c + 4);
            fr_bf16x2_wide(t.w, r.v + 8 * c + 6);
        }
    } else if constexpr (V == 4) {
        const uint2 t = reinterpret_cast<const uint2 *>(p)[i];
        fr_bf16x2_wide(t.x, r.v);
        fr_bf16x2_wide(t.y, r.v + 2);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) r.v[j] = __bfloat162float(p[i * V + j]);
    }
    return r;
}

template <int V> __device__ __forceinline__ void fr_vst(float *p, int64_t i, const fr_vf<V> &r)
{
    if constexpr (V % 4 == 0) {
        float4 *q = reinterpret_cast<float4 *>(p) + i * (V / 4);
#pragma unroll
        for (int c = 0; c < V / 4; c++) q[c] = make_float4(r.v[4 * c], r.v[4 * c + 1], r.v[4 * c + 2], r.v[4 * c + 3]);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) p[i * V + j] = r.v[j];
    }
}

template <int V> __device__ __forceinline__ void fr_vst(__nv_bfloat16 *p, int64_t i, const fr_vf<V> &r)
{
    if constexpr (V % 8 == 0) {
        uint4 *q = reinterpret_cast<uint4 *>(p) + i * (V / 8);
#pragma unroll
        for (int c = 0; c < V / 8; c++) {
            const float *s = r.v + 8 * c;
            q[c] = make_uint4(fr_bf16x2_narrow(s[0], s[1]), fr_bf16x2_narrow(s[2], s[3]), fr_bf16x2_narrow(s[4], s[5]),
                              fr_bf16x2_narrow(s[6], s[7]));
        }
    } else if constexpr (V == 4) {
        reinterpret_cast<uint2 *>(p)[i] = make_uint2(fr_bf16x2_narrow(r.v[0], r.v[1]), fr_bf16x2_narrow(r.v[2], r.v[3]));
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) p[i * V + j] = __float2bfloat16_rn(r.v[j]);
    }
}

/* 1 when p is null or aligned to `bytes` (a power of 2) */
static inline int fr_aligned_to(const void *p, unsigned bytes) { return p == nullptr || ((uintptr_t)p & (bytes - 1u)) == 0; }

#endif
