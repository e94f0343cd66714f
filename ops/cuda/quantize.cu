/* FP8 quantization kernels of the Linear family (see quantize.cuh for the contract): per-tensor
 * amax, scale and casts; the block-scaled casts are in quantize_block.cu. */
#include <stdlib.h>

#include "ops/cuda/glu_act.cuh"
#include "ops/cuda/quantize.cuh"
#include "ops/cuda/quantize_util.cuh"
#include "ops/cuda/cast_transpose.cuh"


/* ---- per-tensor amax and scale ---- */

template <typename T> __global__ void amax_kernel(const T *x, int64_t n, unsigned *out)
{
    __shared__ unsigned red[32];
    unsigned m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        m = max(m, abs_bits(ld_f(x, i)));
    block_atomic_max(out, m, red);
}

/* 16-byte loads (4 float32 or 8 bfloat16), four in flight per thread and iteration */
template <typename T> __global__ void amax16_kernel(const uint4 *__restrict__ x, int64_t nv, unsigned *out)
{
    __shared__ unsigned red[32];
    unsigned m = 0;
    int64_t step = (int64_t)gridDim.x * blockDim.x, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * step < nv; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = x[i + u * step];
#pragma unroll
        for (int u = 0; u < 4; u++) m = amax_vec<T>(m, v[u]);
    }
    for (; i < nv; i += step) m = amax_vec<T>(m, x[i]);
    block_atomic_max(out, m, red);
}

template <typename T> static fr_status q_amax(cudaStream_t s, const fr_node *n, const T *x, int64_t count, unsigned *out)
{
    const int V = q_vec<T>::n;
    if (count % V == 0 && aligned16(x)) {
        amax16_kernel<T><<<wave_blocks(count / V, 256), 256, 0, s>>>((const uint4 *)x, count / V, out);
        return fr_cuda_check_launch(n, "fp8 amax");
    }
    amax_kernel<T><<<wave_blocks(count, 256), 256, 0, s>>>(x, count, out);
    return fr_cuda_check_launch(n, "fp8 amax");
}

fr_status fr_q_amax(cudaStream_t s, const fr_node *n, fr_q_src x, int64_t count, fr_q_stats *st, int slot)
{
    if (count == 0) return FR_OK;
    if (x.bf16) return q_amax(s, n, (const __nv_bfloat16 *)x.p, count, &st->amax_bits[slot]);
    return q_amax(s, n, (const float *)x.p, count, &st->amax_bits[slot]);
}

__global__ void finalize_kernel(fr_q_stats *st, int slot, const float *given, int from_amax, fr_q_fmt f,
                                float *amax_out, float *sinv_out)
{
    unsigned bits = st->amax_bits[slot];
    if (amax_out) *amax_out = __uint_as_float(bits > INF_BITS ? NAN_BITS : bits);
    if (!given && !from_amax) return;
    int bad = 0;
    float scale;
    if (given) {
        scale = *given;
        bad = !(scale > 0.0f) || isinf(scale);
    } else {
        scale = scale_from_amax_bits(bits, f.e5m2, f.margin, &bad);
    }
    if (bad) {
        atomicOr(&st->flags, 1u << slot);
        if (!given) scale = 1.0f;
    }
    float si = sinv_of(scale, bad);
    st->scale[slot] = scale;
    st->scale_inv[slot][0] = si;
    if (sinv_out) *sinv_out = si;
}

fr_status fr_q_finalize(cudaStream_t s, const fr_node *n, fr_q_stats *st, int slot, const float *given,
                        int from_amax, fr_q_fmt f, float *amax_out, float *sinv_out)
{
    finalize_kernel<<<1, 1, 0, s>>>(st, slot, given, from_amax, f, amax_out, sinv_out);
    return fr_cuda_check_launch(n, "fp8 scale");
}

/* ---- per-tensor quantization (and code transposes) through 32x32 tiles ---- */

/* Scalar sources of tile_kernel: sc_mem, element (r, c) of src [R][C] (uint8_t: codes, copied
 * as they are); sc_glu, X (r, c) of a GLU source (see ld_glu). */
template <typename T> struct sc_mem {
    static constexpr bool codes = sizeof(T) == 1;
    const T *src;
    int64_t C;
    __device__ __forceinline__ float at(int64_t r, int64_t c) const { return ld_f(src, r * C + c); }
    __device__ __forceinline__ uint8_t code(int64_t r, int64_t c) const { return ((const uint8_t *)src)[r * C + c]; }
};
template <int ACT, typename T> struct sc_glu {
    static constexpr bool codes = false;
    const T *gate_up;
    int64_t C;
    int y_bf16;
    __device__ __forceinline__ float at(int64_t r, int64_t c) const
    {
        const int64_t o = r * 2 * C + c;
        return fr_glu::x_of<ACT>(ld_f(gate_up, o), ld_f(gate_up, o + C), y_bf16);
    }
    __device__ __forceinline__ uint8_t code(int64_t, int64_t) const { return 0; }
};

/* A float source: quantize with *scale; codes: copied as they are. */
template <typename L>
__global__ void tile_kernel(L ld, int64_t R, int64_t C, int64_t Rp, int64_t Cp, const float *scale_ptr,
                            int e5m2, int trans, uint8_t *dst, uint8_t *dense, unsigned *amax)
{
    __shared__ uint8_t tile[32][33];
    __shared__ unsigned red[32];
    float s = scale_ptr ? *scale_ptr : 1.0f;
    unsigned m = 0;
    int64_t tc = (Cp + 31) / 32, ntiles = ((Rp + 31) / 32) * tc;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int64_t r0 = (t / tc) * 32, c0 = (t % tc) * 32;
        for (int i = threadIdx.y; i < 32; i += blockDim.y) {
            int64_t r = r0 + i, c = c0 + threadIdx.x;
            uint8_t q = 0;
            if (r < R && c < C) {
                if constexpr (L::codes) {
                    q = ld.code(r, c);
                } else {
                    float x = ld.at(r, c);
                    m = max(m, abs_bits(x));
                    q = quantize(x, s, e5m2);
                    if (dense) dense[r * C + c] = q;
                }
            }
            if (!trans) {
                if (r < Rp && c < Cp) dst[r * Cp + c] = q;
            } else {
                tile[i][threadIdx.x] = q;
            }
        }
        if (trans) {
            __syncthreads();
            for (int i = threadIdx.y; i < 32; i += blockDim.y) {
                int64_t c = c0 + i, r = r0 + threadIdx.x; /* dst [c][r] */
                if (c < Cp && r < Rp) dst[c * Rp + r] = tile[threadIdx.x][i];
            }
            __syncthreads();
        }
    }
    if (amax) block_atomic_max(amax, m, red);
}

/* ---- per-tensor quantization with a transpose (cast_transpose.cuh) ---- */

/* The sources of cast_transpose_kernel: a loader L gives the floats of V consecutive columns of
 * a row from L::raw, loaded whole before any is converted (G raw loads in flight per thread).
 * ld_mem: src [R][C] float32 or bfloat16, 16 bytes a load. */
template <typename T> struct ld_mem {
    static constexpr int V = q_vec<T>::n, G = CT_GROUP;
    typedef uint4 raw;
    const T *src;
    int64_t C;
    __device__ __forceinline__ raw load(int64_t r, int64_t c) const { return *(const uint4 *)(src + r * C + c); }
    __device__ __forceinline__ raw zero() const { return make_uint4(0, 0, 0, 0); }
    __device__ __forceinline__ void get(const raw &u, float *f) const { q_vec<T>::get(u, f); }
};

/* ld_glu: X [R][C] = SwiGLU(gate_up [R][2C]) with activation ACT (glu_act.cuh: the SwiGLU
 * kernels' own math), rounded to bfloat16 when that SwiGLU wrote bfloat16 (ops/linear.h,
 * x_glu); two 16-byte loads (gate, up) a group of V columns, and half the groups in flight of
 * ld_mem's (the activation's registers). */
template <int ACT, typename T> struct ld_glu {
    static constexpr int V = q_vec<T>::n, G = CT_GROUP / 2;
    struct raw {
        uint4 g, u;
    };
    const T *gate_up;
    int64_t C;
    int y_bf16;
    __device__ __forceinline__ raw load(int64_t r, int64_t c) const
    {
        const T *row = gate_up + r * 2 * C + c;
        return raw{*(const uint4 *)row, *(const uint4 *)(row + C)};
    }
    __device__ __forceinline__ raw zero() const { return raw{make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)}; }
    __device__ __forceinline__ void get(const raw &x, float *f) const
    {
        float g[V], u[V];
        q_vec<T>::get(x.g, g);
        q_vec<T>::get(x.u, u);
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = fr_glu::x_of<ACT>(g[j], u[j], y_bf16);
    }
};

/* codes src [R][C] -> dst_t [C][R] (R, C multiples of 16, 16-byte aligned): 16-byte loads */
__global__ void __launch_bounds__(256) transpose_codes_kernel(const uint8_t *src, int64_t R, int64_t C,
                                                              uint8_t *dst_t)
{
    __shared__ alignas(16) uint32_t tile[CT_TILE][CT_TILE / 4];
    int tid = threadIdx.x, c16 = tid & 7, row = tid >> 3; /* 8 x 16 bytes a row, 32 rows a pass */
    int64_t tc = (C + CT_TILE - 1) / CT_TILE, ntiles = (R + CT_TILE - 1) / CT_TILE * tc;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int64_t r0 = t / tc * CT_TILE, c0 = t % tc * CT_TILE, c = c0 + c16 * 16;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t r = r0 + row + 32 * i;
            uint4 q = r < R && c < C ? *(const uint4 *)(src + r * C + c) : make_uint4(0, 0, 0, 0);
            const int tr = row + 32 * i; /* a quarter warp fills one tile row */
            *(uint4 *)(tile[tr] + ((c16 * 4) ^ ct_swz(tr))) = q;
        }
        __syncthreads();
        store_transposed(tile, r0, c0, R, C, dst_t);
        __syncthreads();
    }
}

/* The common case of tile_kernel, no padding and no transpose: a 16-byte load in (4 float32 or
 * 8 bfloat16), its codes out (one 4- or 8-byte store) per thread and element; four loads in
 * flight per thread and iteration; the same bytes and amax as the tile kernel. */
template <typename T>
__global__ void flat_kernel(const uint4 *__restrict__ src, int64_t nv, const float *scale_ptr, int e5m2,
                            uint8_t *__restrict__ dst, uint8_t *__restrict__ dense, unsigned *amax)
{
    constexpr int V = q_vec<T>::n, W = V / 4;
    __shared__ unsigned red[32];
    float s = scale_ptr ? *scale_ptr : 1.0f;
    unsigned m = 0;
    int64_t step = (int64_t)gridDim.x * blockDim.x, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    auto one = [&](uint4 u, int64_t at) {
        float f[V];
        uint32_t q[W];
        q_vec<T>::get(u, f);
#pragma unroll
        for (int j = 0; j < V; j++) m = max(m, abs_bits(f[j]));
#pragma unroll
        for (int k = 0; k < W; k++) q[k] = quantize4(f + 4 * k, s, e5m2);
        store_codes<W>(dst + at * V, q);
        if (dense) store_codes<W>(dense + at * V, q);
    };
    for (; i + 3 * step < nv; i += 4 * step) {
        uint4 x[4];
#pragma unroll
        for (int u = 0; u < 4; u++) x[u] = src[i + u * step];
#pragma unroll
        for (int u = 0; u < 4; u++) one(x[u], i + u * step);
    }
    for (; i < nv; i += step) one(src[i], i);
    if (amax) block_atomic_max(amax, m, red);
}

template <typename T>
static fr_status q_tensor(cudaStream_t s, const fr_node *n, const T *src, int64_t R, int64_t C, const float *scale,
                          fr_q_fmt f, int trans, uint8_t *dst, uint8_t *dense, uint8_t *dense_t, unsigned *amax)
{
    const int V = q_vec<T>::n;
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp == R && Cp == C && aligned16(src) && aligned16(dst) && aligned16(dense) && aligned16(dense_t) &&
        (trans || dense_t)) { /* one pass writes every layout wanted */
        int64_t ntiles = fr_q_cdiv(R, CT_TILE) * fr_q_cdiv(C, CT_TILE);
        cast_transpose_kernel<<<wave_blocks(ntiles, 1), 256, 0, s>>>(ld_mem<T>{src, C}, R, C, scale, f.e5m2, trans ? dense : dst,
                                                                      trans ? NULL : dense, trans ? dst : dense_t,
                                                                      amax);
        return fr_cuda_check_launch(n, "fp8 quantize (per tensor, cast + transpose)");
    }
    if (dense_t) { /* padded or unaligned: the transposed copy [C][R] by the tile kernel, then the rest */
        int64_t nt = fr_q_cdiv(R, 32) * fr_q_cdiv(C, 32);
        tile_kernel<<<blocks_for(nt, 1), dim3(32, 8), 0, s>>>(sc_mem<T>{src, C}, R, C, R, C, scale, f.e5m2, 1, dense_t, NULL,
                                                                 NULL);
        FR_TRY(fr_cuda_check_launch(n, "fp8 quantize (per tensor, transposed copy)"));
    }
    if (!trans && Rp == R && Cp == C && aligned16(src) && (uintptr_t)dst % V == 0 && (uintptr_t)dense % V == 0) {
        int64_t nv = R * C / V; /* C is a multiple of 16 here */
        flat_kernel<T><<<wave_blocks(nv, 256), 256, 0, s>>>((const uint4 *)src, nv, scale, f.e5m2, dst, dense, amax);
        return fr_cuda_check_launch(n, "fp8 quantize (per tensor, flat)");
    }
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<<<wave_blocks(ntiles, 1), dim3(32, 8), 0, s>>>(sc_mem<T>{src, C}, R, C, Rp, Cp, scale, f.e5m2, trans, dst, dense,
                                                                  amax);
    return fr_cuda_check_launch(n, "fp8 quantize (per tensor)");
}

fr_status fr_q_tensor(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C,
                      const float *scale, fr_q_fmt f, int trans, uint8_t *dst, uint8_t *dense,
                      uint8_t *dense_t, fr_q_stats *st, int amax_slot)
{
    if (fr_q_pad16(R) * fr_q_pad16(C) == 0) return FR_OK;
    unsigned *amax = amax_slot >= 0 ? &st->amax_bits[amax_slot] : NULL;
    if (src.bf16)
        return q_tensor(s, n, (const __nv_bfloat16 *)src.p, R, C, scale, f, trans, dst, dense, dense_t, amax);
    return q_tensor(s, n, (const float *)src.p, R, C, scale, f, trans, dst, dense, dense_t, amax);
}

template <int ACT, typename T>
static fr_status q_glu_t(cudaStream_t s, const fr_node *n, const T *gu, int y_bf16, int64_t R, int64_t C,
                         const float *scale, fr_q_fmt f, uint8_t *dst_t, unsigned *amax)
{
    const int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp == R && Cp == C && aligned16(gu) && aligned16(dst_t)) { /* rows of 2C: every load stays aligned */
        int64_t ntiles = fr_q_cdiv(R, CT_TILE) * fr_q_cdiv(C, CT_TILE);
        cast_transpose_kernel<<<wave_blocks(ntiles, 1), 256, 0, s>>>(ld_glu<ACT, T>{gu, C, y_bf16}, R, C, scale, f.e5m2,
                                                                     NULL, NULL, dst_t, amax);
        return fr_cuda_check_launch(n, "fp8 quantize (remade GLU output, cast + transpose)");
    }
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<<<wave_blocks(ntiles, 1), dim3(32, 8), 0, s>>>(sc_glu<ACT, T>{gu, C, y_bf16}, R, C, Rp, Cp, scale,
                                                               f.e5m2, 1, dst_t, NULL, amax);
    return fr_cuda_check_launch(n, "fp8 quantize (remade GLU output)");
}

template <typename T>
static fr_status q_glu_act(cudaStream_t s, const fr_node *n, fr_q_glu x, int64_t R, int64_t C, const float *scale,
                           fr_q_fmt f, uint8_t *dst_t, unsigned *amax)
{
    const T *gu = (const T *)x.gate_up;
    if (x.act == FR_GLU_GELU_TANH) return q_glu_t<FR_GLU_GELU_TANH>(s, n, gu, x.y_bf16, R, C, scale, f, dst_t, amax);
    if (x.act == FR_GLU_GELU) return q_glu_t<FR_GLU_GELU>(s, n, gu, x.y_bf16, R, C, scale, f, dst_t, amax);
    return q_glu_t<FR_GLU_SILU>(s, n, gu, x.y_bf16, R, C, scale, f, dst_t, amax);
}

fr_status fr_q_glu_t(cudaStream_t s, const fr_node *n, fr_q_glu x, int64_t R, int64_t C, const float *scale,
                     fr_q_fmt f, uint8_t *dst_t, fr_q_stats *st, int amax_slot)
{
    if (fr_q_pad16(R) * fr_q_pad16(C) == 0) return FR_OK;
    unsigned *amax = amax_slot >= 0 ? &st->amax_bits[amax_slot] : NULL;
    if (x.bf16) return q_glu_act<__nv_bfloat16>(s, n, x, R, C, scale, f, dst_t, amax);
    return q_glu_act<float>(s, n, x, R, C, scale, f, dst_t, amax);
}

fr_status fr_q_transpose_codes(cudaStream_t s, const fr_node *n, const uint8_t *src, int64_t R, int64_t C,
                               uint8_t *dst)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    if (Rp == R && Cp == C && aligned16(src) && aligned16(dst)) {
        int64_t nt = fr_q_cdiv(R, CT_TILE) * fr_q_cdiv(C, CT_TILE);
        transpose_codes_kernel<<<blocks_for(nt, 1), 256, 0, s>>>(src, R, C, dst);
        return fr_cuda_check_launch(n, "fp8 code transpose");
    }
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<<<blocks_for(ntiles, 1), dim3(32, 8), 0, s>>>(sc_mem<uint8_t>{src, C}, R, C, Rp, Cp, NULL, 0, 1, dst, NULL,
                                                                       NULL);
    return fr_cuda_check_launch(n, "fp8 code transpose");
}

fr_status fr_q_pad_codes(cudaStream_t s, const fr_node *n, const uint8_t *src, int64_t R, int64_t C, uint8_t *dst)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<<<blocks_for(ntiles, 1), dim3(32, 8), 0, s>>>(sc_mem<uint8_t>{src, C}, R, C, Rp, Cp, NULL, 0, 0, dst, NULL,
                                                                       NULL);
    return fr_cuda_check_launch(n, "fp8 code padding");
}

__global__ void to_bf16_kernel(const float *src, int64_t count, __nv_bfloat16 *dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* four at a time: a float4 in, two bf16 pairs out */
__global__ void to_bf16_x4_kernel(const float4 *src, int64_t n4, uint2 *dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = src[i];
        __nv_bfloat162 a = __floats2bfloat162_rn(x.x, x.y), b = __floats2bfloat162_rn(x.z, x.w);
        dst[i] = make_uint2(*(const unsigned *)&a, *(const unsigned *)&b);
    }
}

fr_status fr_q_to_bf16(cudaStream_t s, const fr_node *n, const float *src, int64_t count, void *dst)
{
    if (count == 0) return FR_OK;
    if (count % 4 == 0 && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0) {
        to_bf16_x4_kernel<<<blocks_for(count / 4, 256 * 4), 256, 0, s>>>((const float4 *)src, count / 4, (uint2 *)dst);
        return fr_cuda_check_launch(n, "bf16 rounding");
    }
    to_bf16_kernel<<<blocks_for(count, 256 * 4), 256, 0, s>>>(src, count, (__nv_bfloat16 *)dst);
    return fr_cuda_check_launch(n, "bf16 rounding");
}
