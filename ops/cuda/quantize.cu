/* FP8 quantization kernels of the Linear family (see quantize.cuh for the contract). */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <float.h>

#include "quantize.cuh"

#define FULL_MASK 0xFFFFFFFFu
#define NAN_BITS 0x7FC00000u /* the canonical NaN fr_amax returns */
#define INF_BITS 0x7F800000u

static unsigned blocks_for(int64_t work, int64_t per_block)
{
    int64_t b = (work + per_block - 1) / per_block;
    if (b > (1 << 20)) b = 1 << 20; /* grid-stride loops cover the rest */
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

/* fr_fp8_scale_from_amax on the amax's bits: *bad for NaN/Inf (the CPU's FR_ERR_NUMERIC) */
__device__ float scale_from_amax_bits(unsigned bits, fr_q_fmt f, int *bad)
{
    *bad = 0;
    if (bits >= INF_BITS) {
        *bad = 1;
        return 1.0f;
    }
    float amax = __uint_as_float(bits);
    if (amax == 0.0f) return 1.0f;
    float s = ldexpf(__fdiv_rn(f.e5m2 ? 57344.0f : 448.0f, amax), -f.margin);
    if (!(s <= FLT_MAX)) s = FLT_MAX;
    if (s < FLT_MIN) s = FLT_MIN;
    return s;
}

__device__ __forceinline__ float sinv_of(float scale, int bad)
{
    return bad ? __uint_as_float(NAN_BITS) : __fdiv_rn(1.0f, scale);
}

/* block-wide max of v (blockDim.x * blockDim.y threads, a multiple of 32, <= 1024) */
__device__ unsigned block_max(unsigned v, unsigned *red)
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

__device__ __forceinline__ void warp_atomic_max(unsigned *dst, unsigned v)
{
    v = __reduce_max_sync(FULL_MASK, v);
    if ((threadIdx.x & 31) == 0 && v) atomicMax(dst, v);
}

/* ---- per-tensor amax and scale ---- */

__global__ void amax_kernel(const float *x, int64_t n, unsigned *out)
{
    unsigned m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        m = max(m, abs_bits(x[i]));
    warp_atomic_max(out, m);
}

fr_status fr_q_amax(cudaStream_t s, const fr_node *n, const float *x, int64_t count, fr_q_stats *st, int slot)
{
    if (count == 0) return FR_OK;
    amax_kernel<<<blocks_for(count, 256 * 8), 256, 0, s>>>(x, count, &st->amax_bits[slot]);
    return fr_cuda_check_launch(n, "fp8 amax");
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
        scale = scale_from_amax_bits(bits, f, &bad);
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

/* Src float: quantize with *scale; Src uint8_t: codes copied as they are. */
template <typename Src>
__global__ void tile_kernel(const Src *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, const float *scale_ptr,
                            int e5m2, int trans, uint8_t *dst, uint8_t *dense, unsigned *amax)
{
    __shared__ uint8_t tile[32][33];
    float s = scale_ptr ? *scale_ptr : 1.0f;
    unsigned m = 0;
    int64_t tc = (Cp + 31) / 32, ntiles = ((Rp + 31) / 32) * tc;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int64_t r0 = (t / tc) * 32, c0 = (t % tc) * 32;
        for (int i = threadIdx.y; i < 32; i += blockDim.y) {
            int64_t r = r0 + i, c = c0 + threadIdx.x;
            uint8_t q = 0;
            if (r < R && c < C) {
                Src x = src[r * C + c];
                if constexpr (sizeof(Src) == 1) {
                    q = (uint8_t)x;
                } else {
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
    if (amax) warp_atomic_max(amax, m);
}

/* The common case of tile_kernel, no padding and no transpose: a float4 in, four codes out
 * (one 32-bit store) per thread and iteration, so a warp reads 512 and writes 128 contiguous
 * bytes; the same bytes and amax as the tile kernel. */
__global__ void flat_kernel(const float4 *src, int64_t n4, const float *scale_ptr, int e5m2, uint32_t *dst,
                            uint32_t *dense, unsigned *amax)
{
    float s = scale_ptr ? *scale_ptr : 1.0f;
    unsigned m = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = src[i];
        m = max(max(max(m, abs_bits(x.x)), max(abs_bits(x.y), abs_bits(x.z))), abs_bits(x.w));
        uint32_t q = (uint32_t)quantize(x.x, s, e5m2) | (uint32_t)quantize(x.y, s, e5m2) << 8 |
                     (uint32_t)quantize(x.z, s, e5m2) << 16 | (uint32_t)quantize(x.w, s, e5m2) << 24;
        dst[i] = q;
        if (dense) dense[i] = q;
    }
    if (amax) warp_atomic_max(amax, m);
}

fr_status fr_q_tensor(cudaStream_t s, const fr_node *n, const float *src, int64_t R, int64_t C,
                      const float *scale, fr_q_fmt f, int trans, uint8_t *dst, uint8_t *dense,
                      fr_q_stats *st, int amax_slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    if (!trans && Rp == R && Cp == C && (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 4 == 0 &&
        (uintptr_t)dense % 4 == 0) {
        int64_t n4 = R * C / 4; /* C is a multiple of 16 here */
        flat_kernel<<<blocks_for(n4, 256 * 4), 256, 0, s>>>((const float4 *)src, n4, scale, f.e5m2, (uint32_t *)dst,
                                                             (uint32_t *)dense,
                                                             amax_slot >= 0 ? &st->amax_bits[amax_slot] : NULL);
        return fr_cuda_check_launch(n, "fp8 quantize (per tensor, flat)");
    }
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<float><<<blocks_for(ntiles, 1), dim3(32, 8), 0, s>>>(
        src, R, C, Rp, Cp, scale, f.e5m2, trans, dst, dense, amax_slot >= 0 ? &st->amax_bits[amax_slot] : NULL);
    return fr_cuda_check_launch(n, "fp8 quantize (per tensor)");
}

fr_status fr_q_transpose_codes(cudaStream_t s, const fr_node *n, const uint8_t *src, int64_t R, int64_t C,
                               uint8_t *dst)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t ntiles = fr_q_cdiv(Rp, 32) * fr_q_cdiv(Cp, 32);
    tile_kernel<uint8_t><<<blocks_for(ntiles, 1), dim3(32, 8), 0, s>>>(src, R, C, Rp, Cp, NULL, 0, 1, dst, NULL,
                                                                       NULL);
    return fr_cuda_check_launch(n, "fp8 code transpose");
}

/* ---- 1x128 blocks along the rows: one warp per block ---- */

__global__ void rows128_kernel(const float *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, fr_q_fmt f,
                               uint8_t *dst, float *sinv, unsigned *amax, unsigned *flags, unsigned flag_bit)
{
    int lane = threadIdx.x & 31;
    int64_t nkb = (Cp + 127) / 128, nblocks = Rp * nkb;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / 32;
    unsigned m_all = 0;
    for (int64_t w = warp; w < nblocks; w += nwarps) {
        int64_t r = w / nkb, kb = w % nkb;
        float v[4];
        unsigned m = 0;
        for (int j = 0; j < 4; j++) {
            int64_t c = kb * 128 + j * 32 + lane;
            v[j] = (r < R && c < C) ? src[r * C + c] : 0.0f;
            m = max(m, abs_bits(v[j]));
        }
        m = __reduce_max_sync(FULL_MASK, m);
        m_all = max(m_all, m);
        int bad = 0;
        float scale = r < R ? scale_from_amax_bits(m, f, &bad) : 1.0f;
        for (int j = 0; j < 4; j++) {
            int64_t c = kb * 128 + j * 32 + lane;
            if (c < Cp) dst[r * Cp + c] = (r < R && c < C) ? quantize(v[j], scale, f.e5m2) : (uint8_t)0;
        }
        if (lane == 0) {
            sinv[kb * Rp + r] = sinv_of(scale, bad);
            if (bad) atomicOr(flags, flag_bit);
        }
    }
    if (lane == 0 && m_all && amax) atomicMax(amax, m_all);
}

fr_status fr_q_rows128(cudaStream_t s, const fr_node *n, const float *src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst, float *sinv, fr_q_stats *st, int slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t nblocks = Rp * fr_q_cdiv(Cp, 128);
    rows128_kernel<<<blocks_for(nblocks, 8), 256, 0, s>>>(src, R, C, Rp, Cp, f, dst, sinv, &st->amax_bits[slot],
                                                         &st->flags, 1u << slot);
    return fr_cuda_check_launch(n, "fp8 quantize (1x128 blocks)");
}

/* ---- 128x1 blocks along the columns: a CTA per 128 rows x 32 columns ---- */

__global__ void cols128_kernel(const float *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, fr_q_fmt f,
                               uint8_t *dst_t, float *sinv_t, uint8_t *dense, float *sinv_dense, unsigned *amax,
                               unsigned *flags, unsigned flag_bit)
{
    __shared__ unsigned red[8][32];
    __shared__ float col_scale[32];
    __shared__ uint8_t tile[128][33];
    int tx = threadIdx.x, ty = threadIdx.y; /* 32 x 8 */
    int64_t nrb = (Rp + 127) / 128, ncb = (Cp + 31) / 32;
    unsigned m_all = 0;
    for (int64_t t = blockIdx.x; t < nrb * ncb; t += gridDim.x) {
        int64_t rb = t / ncb, r0 = rb * 128, c0 = (t % ncb) * 32, c = c0 + tx;
        float v[16];
        unsigned m = 0;
        for (int i = 0; i < 16; i++) {
            int64_t r = r0 + ty + 8 * i;
            v[i] = (r < R && c < C) ? src[r * C + c] : 0.0f;
            m = max(m, abs_bits(v[i]));
        }
        red[ty][tx] = m;
        __syncthreads();
        if (ty == 0) {
            for (int i = 1; i < 8; i++) m = max(m, red[i][tx]);
            m_all = max(m_all, m);
            int bad = 0;
            float scale = c < C ? scale_from_amax_bits(m, f, &bad) : 1.0f;
            col_scale[tx] = scale;
            float si = sinv_of(scale, bad);
            if (sinv_t && c < Cp) sinv_t[rb * Cp + c] = si;
            if (sinv_dense && c < C) sinv_dense[rb * C + c] = si;
            if (bad) atomicOr(flags, flag_bit);
        }
        __syncthreads();
        float scale = col_scale[tx];
        for (int i = 0; i < 16; i++) {
            int64_t r = r0 + ty + 8 * i;
            uint8_t q = (r < R && c < C) ? quantize(v[i], scale, f.e5m2) : (uint8_t)0;
            if (dense && r < R && c < C) dense[r * C + c] = q;
            tile[ty + 8 * i][tx] = q;
        }
        __syncthreads();
        if (dst_t)
            for (int idx = ty * 32 + tx; idx < 128 * 32; idx += 256) {
                int64_t cc = c0 + idx / 128, rr = r0 + idx % 128; /* dst_t [cc][rr], rows contiguous */
                if (cc < Cp && rr < Rp) dst_t[cc * Rp + rr] = tile[idx % 128][idx / 128];
            }
        __syncthreads();
    }
    if (ty == 0) warp_atomic_max(amax, m_all);
}

fr_status fr_q_cols128(cudaStream_t s, const fr_node *n, const float *src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst_t, float *sinv_t, uint8_t *dense, float *sinv_dense, fr_q_stats *st,
                       int slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t ntiles = fr_q_cdiv(Rp, 128) * fr_q_cdiv(Cp, 32);
    cols128_kernel<<<blocks_for(ntiles, 1), dim3(32, 8), 0, s>>>(src, R, C, Rp, Cp, f, dst_t, sinv_t, dense,
                                                                 sinv_dense, &st->amax_bits[slot], &st->flags,
                                                                 1u << slot);
    return fr_cuda_check_launch(n, "fp8 quantize (128x1 blocks)");
}

/* ---- 128x128 blocks: a CTA per block ---- */

__global__ void tiles128_kernel(const float *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, fr_q_fmt f,
                                int trans, uint8_t *dst, float *sinv, int64_t L4, unsigned *amax, unsigned *flags,
                                unsigned flag_bit)
{
    __shared__ unsigned red[8];
    __shared__ uint8_t tile[128][129];
    int tid = threadIdx.x; /* 256 threads */
    int64_t nrb = (Rp + 127) / 128, ncb = (Cp + 127) / 128;
    unsigned m_all = 0;
    for (int64_t t = blockIdx.x; t < nrb * ncb; t += gridDim.x) {
        int64_t rb = t / ncb, cb = t % ncb, r0 = rb * 128, c0 = cb * 128;
        unsigned m = 0;
        for (int idx = tid; idx < 128 * 128; idx += 256) {
            int64_t r = r0 + idx / 128, c = c0 + idx % 128;
            if (r < R && c < C) m = max(m, abs_bits(src[r * C + c]));
        }
        m = block_max(m, red);
        m_all = max(m_all, m);
        int bad = 0;
        float scale = scale_from_amax_bits(m, f, &bad);
        for (int idx = tid; idx < 128 * 128; idx += 256) {
            int64_t r = r0 + idx / 128, c = c0 + idx % 128;
            tile[idx / 128][idx % 128] = (r < R && c < C) ? quantize(src[r * C + c], scale, f.e5m2) : (uint8_t)0;
        }
        __syncthreads();
        for (int idx = tid; idx < 128 * 128; idx += 256) {
            int oo = idx / 128, ii = idx % 128; /* destination row / column within the block */
            if (!trans) {
                int64_t r = r0 + oo, c = c0 + ii;
                if (r < Rp && c < Cp) dst[r * Cp + c] = tile[oo][ii];
            } else {
                int64_t c = c0 + oo, r = r0 + ii; /* dst [c][r] */
                if (c < Cp && r < Rp) dst[c * Rp + r] = tile[ii][oo];
            }
        }
        if (tid == 0) {
            int64_t ob = trans ? cb : rb, ib = trans ? rb : cb;
            sinv[ob * L4 + ib] = sinv_of(scale, bad);
            if (bad) atomicOr(flags, flag_bit);
        }
        __syncthreads();
    }
    if (tid == 0 && m_all) atomicMax(amax, m_all);
}

fr_status fr_q_tiles128(cudaStream_t s, const fr_node *n, const float *src, int64_t R, int64_t C, fr_q_fmt f,
                        int trans, uint8_t *dst, float *sinv, fr_q_stats *st, int slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t I = trans ? Rp : Cp, L4 = (fr_q_cdiv(I, 128) + 3) / 4 * 4;
    int64_t ntiles = fr_q_cdiv(Rp, 128) * fr_q_cdiv(Cp, 128);
    tiles128_kernel<<<blocks_for(ntiles, 1), 256, 0, s>>>(src, R, C, Rp, Cp, f, trans, dst, sinv, L4,
                                                          &st->amax_bits[slot], &st->flags, 1u << slot);
    return fr_cuda_check_launch(n, "fp8 quantize (128x128 blocks)");
}

/* ---- small helpers ---- */

__global__ void pad_grid_kernel(const float *src, int64_t G, int64_t C, int64_t Cp, float *dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < G * Cp; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t g = i / Cp, c = i % Cp;
        dst[i] = c < C ? src[g * C + c] : 1.0f;
    }
}

fr_status fr_q_pad_grid(cudaStream_t s, const fr_node *n, const float *src, int64_t G, int64_t C, int64_t Cp,
                        float *dst)
{
    if (G * Cp == 0) return FR_OK;
    pad_grid_kernel<<<blocks_for(G * Cp, 256), 256, 0, s>>>(src, G, C, Cp, dst);
    return fr_cuda_check_launch(n, "scale grid copy");
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

template <typename T>
__global__ void finish_kernel(const T *D, int64_t ldd, T *Y, int64_t rows, int64_t cols, const T *bias)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / cols, c = i % cols;
        T v = D[r * ldd + c];
        Y[i] = bias ? v + bias[c] : v;
    }
}

fr_status fr_q_finish(cudaStream_t s, const fr_node *n, fr_dtype dt, const void *D, int64_t ldd, void *Y,
                      int64_t rows, int64_t cols, const void *bias)
{
    if (rows * cols == 0) return FR_OK;
    if (D == Y && ldd == cols && !bias) return FR_OK;
    unsigned grid = blocks_for(rows * cols, 256 * 4);
    if (dt == FR_F64)
        finish_kernel<double><<<grid, 256, 0, s>>>((const double *)D, ldd, (double *)Y, rows, cols,
                                                   (const double *)bias);
    else
        finish_kernel<float><<<grid, 256, 0, s>>>((const float *)D, ldd, (float *)Y, rows, cols, (const float *)bias);
    return fr_cuda_check_launch(n, "GEMM output copy / bias");
}
