/* Per-tensor quantization with a transpose through 128 x 128 tiles, 16-byte loads and stores:
 * the kernel of quantize.cu's casts (loaders ld_mem, ld_glu), and the tile transpose that
 * SwiGLUGradQuantize's kernel (swiglu_quant.cu) shares. */
#ifndef FR_OPS_CUDA_CAST_TRANSPOSE_CUH
#define FR_OPS_CUDA_CAST_TRANSPOSE_CUH

#include "ops/cuda/quantize_util.cuh"

/* byte j of a, b, c, d (four consecutive rows of one column) as one word */
__device__ __forceinline__ uint32_t column_word(uint32_t a, uint32_t b, uint32_t c, uint32_t d, int j)
{
    unsigned sel = (unsigned)j | (unsigned)(j + 4) << 4;
    return __byte_perm(__byte_perm(a, b, sel), __byte_perm(c, d, sel), 0x5410);
}

#define CT_TILE 128 /* rows and columns of a tile; 256 threads */
/* cast_transpose_kernel: loads in flight per thread (a group), and the blocks a multiprocessor
 * must hold (register cap 64): with all 16 loads of a float32 tile in flight at once it took
 * 128 registers, so only 2 blocks (512 threads) ran on a multiprocessor and a block's
 * quantize / transpose phases left the memory idle; 4 groups of 4 keep 4 x 256 x 64 bytes in
 * flight per multiprocessor (ptxas: 64 registers float32, 56 bfloat16, no spills). */
#define CT_GROUP 4
#define CT_MIN_BLOCKS 4

/* The word of a tile row holding columns 4 cw .. 4 cw + 3 sits at tile[row][cw ^ ct_swz(row)]
 * (XOR on bits 2..4 of the word index by the row's chunk of 16): store_transposed's warp reads 8
 * chunks x 4 words at once, which fall on 32 different banks only so. Writers use the same
 * map (a 16-byte group of 4 words stays together). */
__device__ __forceinline__ int ct_swz(int row) { return ((row >> 4) & 7) << 2; }

/* One 128 x 128 tile's codes, tile[row][(column / 4) ^ ct_swz(row)] (4 codes a word), written
 * transposed to dst_t [C][R] (R a multiple of 16): thread (rg = tid % 8, cg = tid / 8) takes
 * rows 16 rg .. 16 rg + 15 of columns 4 cg .. 4 cg + 3 and writes 4 x 16 bytes; the 8 threads of
 * one cg write 128 consecutive bytes of a dst_t row (a warp: 4 whole lines a store). The tile's
 * columns from `split` on go `jump` further into dst_t (two column ranges of one tile: a GLU
 * gradient's gate and up halves). */
__device__ __forceinline__ void store_transposed(const uint32_t (*tile)[CT_TILE / 4], int64_t r0, int64_t c0,
                                                 int64_t R, int64_t C, uint8_t *dst_t, int split = CT_TILE,
                                                 int64_t jump = 0)
{
    int tid = threadIdx.x, rg = tid & 7, cg = tid >> 3;
    int64_t rb = r0 + rg * 16;
    if (rb >= R) return; /* R % 16 == 0: a chunk of 16 rows is all in or all out */
    uint32_t w[16];
#pragma unroll
    for (int i = 0; i < 16; i++) w[i] = tile[rg * 16 + i][cg ^ (rg << 2)]; /* ct_swz(16 rg + i) */
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int lc = cg * 4 + j;
        const int64_t c = c0 + lc + (lc >= split ? jump : 0);
        if (c < C) {
            uint4 o;
            o.x = column_word(w[0], w[1], w[2], w[3], j);
            o.y = column_word(w[4], w[5], w[6], w[7], j);
            o.z = column_word(w[8], w[9], w[10], w[11], j);
            o.w = column_word(w[12], w[13], w[14], w[15], j);
            *(uint4 *)(dst_t + c * R + rb) = o;
        }
    }
}

/* The sources of cast_transpose_kernel: a loader L gives the floats of V consecutive columns of
 * a row from L::raw, loaded whole before any is converted (G raw loads in flight per thread);
 * quantize.cu's ld_mem (a float32 or bfloat16 tensor) is the plain one. */

/* src [R][C] as loader L reads it (R, C multiples of 16, 16-byte aligned) quantized with
 * *scale_ptr: the codes row-major into dst and dst2 (each optional, [R][C]) and transposed into
 * dst_t (optional, [C][R]), the amax of src into *amax (optional): one read of src, 16 bytes a
 * load (4 float32 columns, 32 threads a tile row; or 8 bfloat16 columns, 16 threads a row). */
template <typename L>
__global__ void __launch_bounds__(256, CT_MIN_BLOCKS) cast_transpose_kernel(L ld, int64_t R, int64_t C,
                                                             const float *scale_ptr, int e5m2, uint8_t *dst,
                                                             uint8_t *dst2, uint8_t *dst_t, unsigned *amax)
{
    constexpr int V = L::V, W = V / 4;                                    /* columns a load, code words */
    constexpr int TPR = CT_TILE / V, RPP = 256 / TPR, NP = CT_TILE / RPP; /* threads a row, rows a pass, passes */
    constexpr int G = NP < L::G ? NP : L::G;                              /* passes a group of loads */
    __shared__ uint32_t tile[CT_TILE][CT_TILE / 4];
    __shared__ unsigned red[32];
    float s = scale_ptr ? *scale_ptr : 1.0f;
    unsigned m = 0;
    int tid = threadIdx.x, cv = tid % TPR, row = tid / TPR;
    int64_t tc = (C + CT_TILE - 1) / CT_TILE, ntiles = (R + CT_TILE - 1) / CT_TILE * tc;
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        int64_t r0 = t / tc * CT_TILE, c0 = t % tc * CT_TILE, c = c0 + cv * V;
#pragma unroll
        for (int i0 = 0; i0 < NP; i0 += G) {
            typename L::raw v[G];
#pragma unroll
            for (int i = 0; i < G; i++) { /* a group's loads first: G in flight per thread */
                int64_t r = r0 + row + RPP * (i0 + i);
                v[i] = r < R && c < C ? ld.load(r, c) : ld.zero();
            }
#pragma unroll
            for (int i = 0; i < G; i++) {
                int64_t r = r0 + row + RPP * (i0 + i);
                float f[V];
                uint32_t q[W];
                ld.get(v[i], f);
#pragma unroll
                for (int j = 0; j < V; j++) m = max(m, abs_bits(f[j]));
#pragma unroll
                for (int k = 0; k < W; k++) {
                    q[k] = quantize4(f + 4 * k, s, e5m2);
                    const int tr = row + RPP * (i0 + i);
                    tile[tr][(cv * W + k) ^ ct_swz(tr)] = q[k];
                }
                if (r < R && c < C) {
                    if (dst) store_codes<W>(dst + r * C + c, q);
                    if (dst2) store_codes<W>(dst2 + r * C + c, q);
                }
            }
        }
        if (dst_t) {
            __syncthreads();
            store_transposed(tile, r0, c0, R, C, dst_t);
            __syncthreads();
        }
    }
    if (amax) block_atomic_max(amax, m, red);
}

#endif
