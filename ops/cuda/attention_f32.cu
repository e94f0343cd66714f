/* Flash attention in exact float32, register tiled (precision fp32, D == Dv in {64, 128}, 16-byte
 * aligned operands; dispatched from attention.cu): SIMT float32, no TF32, 64 x 64 tiles of 256
 * threads, each thread a 4 x 4 micro-tile of the scores and a 4 x D/16 slice of the output,
 * float4 reads from padded shared memory. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace fr_attn {
namespace {

/* Exact float32 (precision fp32, D == Dv in {64, 128}, 16-byte aligned tensors): 64 x 64 tiles,
 * 256 threads as 16 x 16 (ty = tid / 16, tx = tid % 16). Thread (ty, tx) computes the score
 * micro-tile of rows ty + 16 r and columns tx + 16 c (r, c < 4), and owns the output rows
 * ty + 16 r, columns 4 tx + 64 h + e (h < D / 64, e < 4). A row's 16 threads are one half-warp,
 * so the softmax reductions are 4 shuffles. Tiles live in shared memory as rows of D floats
 * padded by 4: float4 reads along D, consecutive rows 4 banks apart (no conflicts). Score-shaped
 * tiles (P, dS) are rows of 64 padded to 80 (the two rows a warp writes are 16 banks apart).
 * D = 64 keeps K and V (dQ: too) in shared memory at once; D = 128 streams them through one
 * buffer so that two forward blocks fit an SM. */
constexpr int FB = 64, kF32Threads = 256, kLdS = FB + 16;

template <int D> __host__ __device__ constexpr bool f32_split() { return D <= 64; }

__device__ __forceinline__ float f4_at(const float4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* rows [r0, r0 + FB) of a [rows, D] matrix into shared memory (leading dim D + 4), zeros past
 * `rows`; asynchronous (cp.async, one commit group) */
template <int D> __device__ __forceinline__ void f32_load_rows(float *dst, const float *src, int r0, int rows)
{
    constexpr int W4 = D / 4, LD = D + 4;
    for (int i = threadIdx.x; i < FB * W4; i += kF32Threads) {
        const int r = i / W4, c4 = i - r * W4;
        const bool ok = r0 + r < rows;
        cp_async16(dst + r * LD + c4 * 4, src + (ok ? (int64_t)(r0 + r) * D + c4 * 4 : 0), ok);
    }
    cp_async_commit();
}

/* acc[r][c] += A[ty + 16 r, :] . B[tx + 16 c, :] (rows of D, leading dim D + 4) */
template <int D>
__device__ __forceinline__ void f32_abt(float (&acc)[4][4], const float *A, const float *B, int ty, int tx)
{
    constexpr int LD = D + 4;
#pragma unroll 4
    for (int k = 0; k < D; k += 4) {
        float4 a[4], b[4];
#pragma unroll
        for (int r = 0; r < 4; r++) a[r] = *reinterpret_cast<const float4 *>(A + (ty + 16 * r) * LD + k);
#pragma unroll
        for (int c = 0; c < 4; c++) b[c] = *reinterpret_cast<const float4 *>(B + (tx + 16 * c) * LD + k);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float s = acc[r][c];
                s = fmaf(a[r].x, b[c].x, s);
                s = fmaf(a[r].y, b[c].y, s);
                s = fmaf(a[r].z, b[c].z, s);
                s = fmaf(a[r].w, b[c].w, s);
                acc[r][c] = s;
            }
    }
}

/* acc[r][4 h + e] += sum_j P[ty + 16 r, j] X[j, 4 tx + 64 h + e], j < 64 (P: leading dim kLdS;
 * X: rows of D, leading dim D + 4) */
template <int D>
__device__ __forceinline__ void f32_pv(float (&acc)[4][D / 16], const float *P, const float *X, int ty, int tx)
{
    constexpr int LD = D + 4, NH = D / 64;
#pragma unroll 2
    for (int j = 0; j < FB; j += 4) {
        float4 pr[4];
#pragma unroll
        for (int r = 0; r < 4; r++) pr[r] = *reinterpret_cast<const float4 *>(P + (ty + 16 * r) * kLdS + j);
#pragma unroll
        for (int jj = 0; jj < 4; jj++)
#pragma unroll
            for (int h = 0; h < NH; h++) {
                const float4 x = *reinterpret_cast<const float4 *>(X + (j + jj) * LD + 64 * h + 4 * tx);
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const float pv = f4_at(pr[r], jj);
                    acc[r][4 * h + 0] = fmaf(pv, x.x, acc[r][4 * h + 0]);
                    acc[r][4 * h + 1] = fmaf(pv, x.y, acc[r][4 * h + 1]);
                    acc[r][4 * h + 2] = fmaf(pv, x.z, acc[r][4 * h + 2]);
                    acc[r][4 * h + 3] = fmaf(pv, x.w, acc[r][4 * h + 3]);
                }
            }
    }
}

/* row-major [.., D] row `row` += / = acc row r (times mul), float4 stores */
template <int D>
__device__ __forceinline__ void f32_store_row(float *dst, const float (&acc)[4][D / 16], int r, float mul, int tx)
{
#pragma unroll
    for (int h = 0; h < D / 64; h++)
        *reinterpret_cast<float4 *>(dst + 64 * h + 4 * tx) =
            make_float4(acc[r][4 * h] * mul, acc[r][4 * h + 1] * mul, acc[r][4 * h + 2] * mul, acc[r][4 * h + 3] * mul);
}

__device__ __forceinline__ float half_warp_max(float v)
{
#pragma unroll
    for (int s = 1; s < 16; s <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
    return v;
}
__device__ __forceinline__ float half_warp_sum(float v)
{
#pragma unroll
    for (int s = 1; s < 16; s <<= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
}

template <int D> constexpr size_t fwd_f32_smem()
{
    return sizeof(float) * ((size_t)(f32_split<D>() ? 3 : 2) * FB * (D + 4) + (size_t)FB * kLdS);
}

/* One block per (64 query rows, Q batch index), heaviest (last) query blocks first; online
 * softmax over the key tiles. */
template <int D>
__global__ void __launch_bounds__(kF32Threads, 2)
    fwd_f32(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
            float *__restrict__ O, float *__restrict__ LSE, Prob p)
{
    constexpr int LD = D + 4, NO = D / 16;
    constexpr bool split = f32_split<D>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sQ = reinterpret_cast<float *>(smem_raw), *sK = sQ + FB * LD, *sV = split ? sK + FB * LD : sK,
          *sP = sV + FB * LD;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const auto [b, q0, kvb] = q_tile_of(p, FB);
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    f32_load_rows<D>(sQ, Q + b * p.Tq * D, q0, p.Tq);
    const int n_end = key_tiles(p, q0, FB, FB);
    float o[4][NO], m[4], l[4];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int e = 0; e < NO; e++) o[r][e] = 0.f;
    }
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * FB;
        __syncthreads(); /* every thread is done with the last tile's K, V, P */
        f32_load_rows<D>(sK, Kb, k0, p.Tk);
        if (split) f32_load_rows<D>(sV, Vb, k0, p.Tk);
        cp_async_wait_all();
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++) s[r][0] = s[r][1] = s[r][2] = s[r][3] = 0.f;
        f32_abt<D>(s, sQ, sK, ty, tx);
        const bool edge = k0 + FB > p.Tk || (p.causal && k0 + FB - 1 > q0);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int q = q0 + ty + 16 * r;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float v = s[r][c] * p.scale;
                if (edge) {
                    const int key = k0 + tx + 16 * c;
                    if (key >= p.Tk || (p.causal && key > q)) v = -INFINITY;
                }
                s[r][c] = v;
                mx = fmaxf(mx, v);
            }
            mx = half_warp_max(mx);
            const float mn = fmaxf(m[r], mx), base = mn == -INFINITY ? 0.f : mn;
            const float alpha = expf(m[r] - base);
            float ps = 0.f;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float pv = expf(s[r][c] - base);
                ps += pv;
                sP[(ty + 16 * r) * kLdS + tx + 16 * c] = pv;
            }
            l[r] = l[r] * alpha + half_warp_sum(ps);
            m[r] = mn;
#pragma unroll
            for (int e = 0; e < NO; e++) o[r][e] *= alpha;
        }
        if (!split) {
            __syncthreads(); /* K read by every thread: V takes its buffer */
            f32_load_rows<D>(sV, Vb, k0, p.Tk);
            cp_async_wait_all();
        }
        __syncthreads();
        f32_pv<D>(o, sP, sV, ty, tx);
    }
    cp_async_wait_all();
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int q = q0 + ty + 16 * r;
        if (q >= p.Tq) continue;
        f32_store_row<D>(O + (b * p.Tq + q) * D, o, r, 1.f / l[r], tx);
        if (LSE && tx == 0) LSE[b * p.Tq + q] = m[r] + logf(l[r]);
    }
}

template <int D> constexpr size_t dq_f32_smem()
{
    return sizeof(float) * ((size_t)(f32_split<D>() ? 4 : 3) * FB * (D + 4) + (size_t)FB * kLdS);
}

/* One block per (64 query rows, Q batch index): dQ = scale dS K over the key tiles, S and dP
 * recomputed. */
template <int D>
__global__ void __launch_bounds__(kF32Threads, f32_split<D>() ? 2 : 1)
    dq_f32(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
           const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
           float *__restrict__ dQ, Prob p)
{
    constexpr int LD = D + 4, NO = D / 16;
    constexpr bool split = f32_split<D>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sQ = reinterpret_cast<float *>(smem_raw), *sdO = sQ + FB * LD, *sK = sdO + FB * LD,
          *sV = split ? sK + FB * LD : sK, *sS = sV + FB * LD;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const auto [b, q0, kvb] = q_tile_of(p, FB);
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    f32_load_rows<D>(sQ, Q + b * p.Tq * D, q0, p.Tq);
    f32_load_rows<D>(sdO, dO + b * p.Tq * D, q0, p.Tq);
    float lse[4], dl[4], dq[4][NO];
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int q = q0 + ty + 16 * r;
        lse[r] = q < p.Tq ? LSE[b * p.Tq + q] : 0.f;
        dl[r] = q < p.Tq ? Delta[b * p.Tq + q] : 0.f;
#pragma unroll
        for (int e = 0; e < NO; e++) dq[r][e] = 0.f;
    }
    const int n_end = key_tiles(p, q0, FB, FB);
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * FB;
        float s[4][4], dp[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) s[r][c] = dp[r][c] = 0.f;
        __syncthreads(); /* every thread is done with the last tile's K and dS */
        f32_load_rows<D>(sV, Vb, k0, p.Tk);
        if (split) f32_load_rows<D>(sK, Kb, k0, p.Tk);
        cp_async_wait_all();
        __syncthreads();
        f32_abt<D>(dp, sdO, sV, ty, tx);
        if (!split) {
            __syncthreads(); /* V read by every thread: K takes its buffer */
            f32_load_rows<D>(sK, Kb, k0, p.Tk);
            cp_async_wait_all();
            __syncthreads();
        }
        f32_abt<D>(s, sQ, sK, ty, tx);
        const bool edge = k0 + FB > p.Tk || (p.causal && k0 + FB - 1 > q0);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int q = q0 + ty + 16 * r;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float pv = expf(s[r][c] * p.scale - lse[r]);
                if (edge) {
                    const int key = k0 + tx + 16 * c;
                    if (key >= p.Tk || (p.causal && key > q)) pv = 0.f;
                }
                sS[(ty + 16 * r) * kLdS + tx + 16 * c] = pv * (dp[r][c] - dl[r]);
            }
        }
        __syncthreads();
        f32_pv<D>(dq, sS, sK, ty, tx);
    }
    cp_async_wait_all();
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int q = q0 + ty + 16 * r;
        if (q < p.Tq) f32_store_row<D>(dQ + (b * p.Tq + q) * D, dq, r, p.scale, tx);
    }
}

template <int D> constexpr size_t dkdv_f32_smem()
{
    return sizeof(float) * ((size_t)4 * FB * (D + 4) + (size_t)2 * FB * kLdS + 2 * FB);
}

/* One block per (64 keys, K/V batch index): walks the query tiles of every Q batch index that
 * reads this K/V (in increasing order); the keys are the micro-tile rows (S^T = K Q^T,
 * dP^T = V dO^T): dV += P^T dO, dK += dS^T Q, then dK *= scale. */
template <int D>
__global__ void __launch_bounds__(kF32Threads, f32_split<D>() ? 2 : 1)
    dkdv_f32(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
             const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
             float *__restrict__ dK, float *__restrict__ dV, Prob p)
{
    constexpr int LD = D + 4, NO = D / 16;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *sK = reinterpret_cast<float *>(smem_raw), *sV = sK + FB * LD, *sQ = sV + FB * LD, *sdO = sQ + FB * LD,
          *sP = sdO + FB * LD, *sS = sP + FB * kLdS, *sL = sS + FB * kLdS, *sDl = sL + FB;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * FB; /* first key blocks (most queries) first */
    f32_load_rows<D>(sK, K + kvb * p.Tk * D, n0, p.Tk);
    f32_load_rows<D>(sV, V + kvb * p.Tk * D, n0, p.Tk);
    const int nq = (p.Tq + FB - 1) / FB, i0 = p.causal ? n0 / FB : 0;
    float dk[4][NO], dv[4][NO];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < NO; e++) dk[r][e] = dv[r][e] = 0.f;
    for (int64_t qb = next_q_of(p.map, p.batch, kvb, -1); qb < p.batch; qb = next_q_of(p.map, p.batch, kvb, qb))
        for (int it = i0; it < nq; it++) {
            const int t0 = it * FB;
            __syncthreads(); /* every thread is done with the last tile's Q, dO, P, dS */
            f32_load_rows<D>(sQ, Q + qb * p.Tq * D, t0, p.Tq);
            f32_load_rows<D>(sdO, dO + qb * p.Tq * D, t0, p.Tq);
            if (tid < FB) {
                const bool ok = t0 + tid < p.Tq;
                sL[tid] = ok ? LSE[qb * p.Tq + t0 + tid] : 0.f;
                sDl[tid] = ok ? Delta[qb * p.Tq + t0 + tid] : 0.f;
            }
            cp_async_wait_all();
            __syncthreads();
            float s[4][4], dp[4][4];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) s[r][c] = dp[r][c] = 0.f;
            f32_abt<D>(s, sK, sQ, ty, tx);
            f32_abt<D>(dp, sV, sdO, ty, tx);
            const bool edge = n0 + FB > p.Tk || t0 + FB > p.Tq || (p.causal && t0 < n0 + FB - 1);
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int qi = tx + 16 * c, q = t0 + qi;
                const float lq = sL[qi], dlq = sDl[qi];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    float pv = expf(s[r][c] * p.scale - lq);
                    if (edge) {
                        const int key = n0 + ty + 16 * r;
                        if (q >= p.Tq || key >= p.Tk || (p.causal && key > q)) pv = 0.f;
                    }
                    sP[(ty + 16 * r) * kLdS + qi] = pv;
                    sS[(ty + 16 * r) * kLdS + qi] = pv * (dp[r][c] - dlq);
                }
            }
            __syncthreads();
            f32_pv<D>(dv, sP, sdO, ty, tx);
            f32_pv<D>(dk, sS, sQ, ty, tx);
        }
    cp_async_wait_all();
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int key = n0 + ty + 16 * r;
        if (key >= p.Tk) continue;
        const int64_t row = (kvb * p.Tk + key) * D;
        if (dK) f32_store_row<D>(dK + row, dk, r, p.scale, tx);
        if (dV) f32_store_row<D>(dV + row, dv, r, 1.f, tx);
    }
}
/* ---------------------------------------------------------------- launchers ---- */

template <int D> fr_status fwd_f32_launch(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K,
                                          const float *V, float *O, float *L)
{
    const size_t smem = fwd_f32_smem<D>();
    FR_TRY(set_smem(k->node, fwd_f32<D>, smem));
    const int64_t blocks = (int64_t)((p.Tq + FB - 1) / FB) * p.batch;
    fwd_f32<D><<<grid_of(blocks), kF32Threads, smem, k->cu->stream>>>(Q, K, V, O, L, p);
    return fr_cuda_check_launch(k->node, "Attention(float32 tiled)");
}

template <int D> fr_status bwd_f32_launch(const fr_cuda_kctx *k, const Prob &p, const float *const *in,
                                          const float *delta, float *dQ, float *dK, float *dV)
{
    cudaStream_t st = k->cu->stream;
    const float *Q = in[0], *K = in[1], *V = in[2], *LSE = in[4], *dO = in[5];
    if (dK || dV) {
        const size_t smem = dkdv_f32_smem<D>();
        FR_TRY(set_smem(k->node, dkdv_f32<D>, smem));
        const int64_t blocks = (int64_t)((p.Tk + FB - 1) / FB) * p.kv_batch;
        dkdv_f32<D><<<grid_of(blocks), kF32Threads, smem, st>>>(Q, K, V, dO, LSE, delta, dK, dV, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, float32 tiled)"));
    }
    if (dQ) {
        const size_t smem = dq_f32_smem<D>();
        FR_TRY(set_smem(k->node, dq_f32<D>, smem));
        const int64_t blocks = (int64_t)((p.Tq + FB - 1) / FB) * p.batch;
        dq_f32<D><<<grid_of(blocks), kF32Threads, smem, st>>>(Q, K, V, dO, LSE, delta, dQ, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, float32 tiled)"));
    }
    return FR_OK;
}

} /* namespace */

fr_status f32_fwd(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K, const float *V, float *O,
                  float *L)
{
    return p.D == 64 ? fwd_f32_launch<64>(k, p, Q, K, V, O, L) : fwd_f32_launch<128>(k, p, Q, K, V, O, L);
}

fr_status f32_bwd(const fr_cuda_kctx *k, const Prob &p, const float *const *in, const float *delta, float *dQ,
                  float *dK, float *dV)
{
    return p.D == 64 ? bwd_f32_launch<64>(k, p, in, delta, dQ, dK, dV) : bwd_f32_launch<128>(k, p, in, delta, dQ, dK, dV);
}

} /* namespace fr_attn */
