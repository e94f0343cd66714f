/* FP8 quantization in blocks (the "block" recipe; see quantize.cuh): 1x128 along the rows,
 * 128x1 along the columns, 128x128 tiles, and the padded scale grids. */
#include "ops/cuda/quantize.cuh"
#include "ops/cuda/quantize_util.cuh"

/* ---- 1x128 blocks along the rows: one warp per block ---- */

template <typename T>
__global__ void rows128_kernel(const T *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, fr_q_fmt f,
                               uint8_t *dst, float *sinv, unsigned *amax, unsigned *flags, unsigned flag_bit)
{
    __shared__ unsigned red[32];
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
            v[j] = (r < R && c < C) ? ld_f(src, r * C + c) : 0.0f;
            m = max(m, abs_bits(v[j]));
        }
        m = __reduce_max_sync(FULL_MASK, m);
        m_all = max(m_all, m);
        int bad = 0;
        float scale = r < R ? scale_from_amax_bits(m, f.e5m2, f.margin, &bad) : 1.0f;
        for (int j = 0; j < 4; j++) {
            int64_t c = kb * 128 + j * 32 + lane;
            if (c < Cp) dst[r * Cp + c] = (r < R && c < C) ? quantize(v[j], scale, f.e5m2) : (uint8_t)0;
        }
        if (lane == 0) {
            sinv[kb * Rp + r] = sinv_of(scale, bad);
            if (bad) atomicOr(flags, flag_bit);
        }
    }
    if (amax) block_atomic_max(amax, m_all, red);
}

fr_status fr_q_rows128(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst, float *sinv, fr_q_stats *st, int slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t nblocks = Rp * fr_q_cdiv(Cp, 128);
    unsigned grid = wave_blocks(nblocks, 8);
    if (src.bf16)
        rows128_kernel<<<grid, 256, 0, s>>>((const __nv_bfloat16 *)src.p, R, C, Rp, Cp, f, dst, sinv,
                                            &st->amax_bits[slot], &st->flags, 1u << slot);
    else
        rows128_kernel<<<grid, 256, 0, s>>>((const float *)src.p, R, C, Rp, Cp, f, dst, sinv, &st->amax_bits[slot],
                                            &st->flags, 1u << slot);
    return fr_cuda_check_launch(n, "fp8 quantize (1x128 blocks)");
}

/* ---- 128x1 blocks along the columns: a CTA per 128 rows x 32 columns ---- */

template <typename T>
__global__ void cols128_kernel(const T *src, int64_t R, int64_t C, int64_t Rp, int64_t Cp, fr_q_fmt f,
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
            v[i] = (r < R && c < C) ? ld_f(src, r * C + c) : 0.0f;
            m = max(m, abs_bits(v[i]));
        }
        red[ty][tx] = m;
        __syncthreads();
        if (ty == 0) {
            for (int i = 1; i < 8; i++) m = max(m, red[i][tx]);
            m_all = max(m_all, m);
            int bad = 0;
            float scale = c < C ? scale_from_amax_bits(m, f.e5m2, f.margin, &bad) : 1.0f;
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
    block_atomic_max(amax, m_all, &red[0][0]); /* red is free: the loop ended on a barrier */
}

fr_status fr_q_cols128(cudaStream_t s, const fr_node *n, fr_q_src src, int64_t R, int64_t C, fr_q_fmt f,
                       uint8_t *dst_t, float *sinv_t, uint8_t *dense, float *sinv_dense, fr_q_stats *st,
                       int slot)
{
    int64_t Rp = fr_q_pad16(R), Cp = fr_q_pad16(C);
    if (Rp * Cp == 0) return FR_OK;
    int64_t ntiles = fr_q_cdiv(Rp, 128) * fr_q_cdiv(Cp, 32);
    unsigned grid = wave_blocks(ntiles, 1);
    if (src.bf16)
        cols128_kernel<<<grid, dim3(32, 8), 0, s>>>((const __nv_bfloat16 *)src.p, R, C, Rp, Cp, f, dst_t, sinv_t,
                                                    dense, sinv_dense, &st->amax_bits[slot], &st->flags, 1u << slot);
    else
        cols128_kernel<<<grid, dim3(32, 8), 0, s>>>((const float *)src.p, R, C, Rp, Cp, f, dst_t, sinv_t, dense,
                                                    sinv_dense, &st->amax_bits[slot], &st->flags, 1u << slot);
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
        float scale = scale_from_amax_bits(m, f.e5m2, f.margin, &bad);
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
    tiles128_kernel<<<wave_blocks(ntiles, 1), 256, 0, s>>>(src, R, C, Rp, Cp, f, trans, dst, sinv, L4,
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
