/* Flash attention forward on Hopper's warpgroup matrix products (wgmma, sm_90a builds), for
 * the same problems as attention_tc.cu's forward (precision bf16; D, Dv multiples of 8 up to
 * 256; every mask kind) and with its numbers: S = Q K^T and O += P V in bf16 with float32
 * accumulation, the online softmax in registers, the same mask predicates
 * (attention_mma.cuh). What differs is the matrix unit: a warpgroup (4 warps) multiplies its 64
 * query rows by a whole key tile in one asynchronous wgmma sequence reading K and V straight
 * from shared memory (128-byte swizzled tiles, ops/cuda/wgmma.cuh), where mma.sync needs every
 * fragment brought to registers by ldmatrix first. P stays in registers as the A operand of
 * O += P V.
 *
 * A block is two warpgroups (128 query rows of one Q batch index; the heaviest, last, tiles
 * first); key tiles of 128 (64 at a padded head dim of 256, so that O's 128 float32 registers
 * a thread fit) are double buffered by cp.async from every thread. While one warpgroup runs its
 * softmax the other's products run: the two overlap without further scheduling. Q is read as
 * float32 and rounded to bf16 into shared memory once. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/cuda_util.cuh"

extern "C" {
#include "graph/env.h"
}

namespace fr_attn {
namespace {

using namespace mma;
using namespace fr_wg;

constexpr int kWgBM = 128;
using wg::kThreads;
using wg::tile_bytes;
/* keys per tile */
template <int DP> __host__ __device__ constexpr int wg_bn() { return DP == 256 ? 64 : 128; }
/* Q, K and V double buffered, the key tiles' segment ids, and 1024 bytes to align the start */
template <int DP> constexpr size_t wg_smem()
{
    return 1024 + tile_bytes<DP>(kWgBM) + 4 * tile_bytes<DP>(wg_bn<DP>()) + 2 * wg_bn<DP>() * sizeof(int64_t);
}
template <int DP, bool X> __global__ void __launch_bounds__(kThreads, 1)
    fwd_wg(const float *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V, float *__restrict__ O,
           float *__restrict__ LSE, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = kWgBM, BN = wg_bn<DP>();
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = wg::smem_base(smem_raw);
    unsigned char *sK = sQ + tile_bytes<DP>(BM), *sV = sK + 2 * tile_bytes<DP>(BN);
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + 2 * tile_bytes<DP>(BN));
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int wg = warp >> 2, w4 = warp & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const float *Qb = Q + b * p.Tq * p.D;
    const bf16 *Kb = K + kvb * p.Tk * p.D, *Vb = V + kvb * p.Tk * p.Dv;
    int j0, j1; /* the key tiles this block reads */
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);

    auto load_kv = [&](int j, int buf) {
        wg::load_sw<BN, DP>(sK + buf * tile_bytes<DP>(BN), Kb, p.D, j * BN, p.Tk, tid);
        wg::load_sw<BN, DP>(sV + buf * tile_bytes<DP>(BN), Vb, p.Dv, j * BN, p.Tk, tid);
        cp_async_commit();
        if (X && mk.sk) load_key_ids<kThreads>(p, mk, srow, j * BN, BN, sKid + buf * BN, tid);
    };
    if (j0 < j1) load_kv(j0, j0 & 1);
    for (int i = tid; i < BM * DP / 8; i += kThreads) { /* Q: float32 -> bf16, 8 columns a chunk */
        const int r = i / (DP / 8), ch = i % (DP / 8);
        float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
        if (q0 + r < p.Tq && ch * 8 < p.D) {
            const float4 *src = reinterpret_cast<const float4 *>(Qb + (int64_t)(q0 + r) * p.D + ch * 8);
            v0 = __ldg(src);
            v1 = __ldg(src + 1);
        }
        *reinterpret_cast<uint4 *>(sQ + sw_off<BM>(r, ch)) =
            make_uint4(pack_bf16(v0.x, v0.y), pack_bf16(v0.z, v0.w), pack_bf16(v1.x, v1.y), pack_bf16(v1.z, v1.w));
    }

    /* this thread's rows: h = 0 | 1 is row wq0 + 16 w4 + g (+ 8) */
    float o[DP / 2];
#pragma unroll
    for (int i = 0; i < DP / 2; i++) o[i] = 0.f;
    float m[2], l[2];
    int row[2];
    int64_t qid[2];
    const int wq0 = q0 + wg * 64; /* this warpgroup's first query row */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        m[h] = -INFINITY, l[h] = 0.f;
        row[h] = wq0 + w4 * 16 + g + h * 8;
        qid[h] = X && mk.sq && row[h] < p.Tq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + row[h]) : 1;
    }
    const int64_t moff = X && mk.m ? mask_off(p, mk, b) : 0;
    const uint32_t aQ = smem_addr(sQ);

    for (int j = j0; j < j1; j++) {
        wg::tiles_landed(); /* Q's stores and the cp.async tile, before wgmma reads them */
        __syncthreads();    /* also: every warpgroup is done with tile j - 1's buffer */
        if (j + 1 < j1) load_kv(j + 1, (j + 1) & 1);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + 63) continue; /* the whole tile is above this warpgroup's diagonal */
        if (mk.window > 0 && (int64_t)wq0 - (k0 + BN - 1) >= mk.window) continue; /* before its window */
        const uint32_t aK = smem_addr(sK + (j & 1) * tile_bytes<DP>(BN));
        const uint32_t aV = smem_addr(sV + (j & 1) * tile_bytes<DP>(BN));
        float s[BN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++)
            mma_ss<BN>(s, wg_desc_k<BM>(aQ, wg * 64, kk), wg_desc_k<BN>(aK, 0, kk), kk > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<BN / 2>(s);

        const int64_t *kid = sKid + (j & 1) * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + 64 > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + 63 - k0 >= mk.window);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int t = 0; t < BN / 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1, key = k0 + t * 8 + 2 * c + (e & 1), i = row[h];
                float v = -INFINITY;
                if (!edge || !outside(p, mk, i, key))
                    v = score2<X>(p, mk, s[t * 4 + e], i, key, moff, X && mk.sk ? kid[key - k0] : 0, qid[h], nullptr);
                s[t * 4 + e] = v;
                mx[h] = fmaxf(mx[h], v);
            }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]);
            const float base = mn == -INFINITY ? 0.f : mn; /* a row with no key yet */
            alpha[h] = ex2(m[h] - base);
            m[h] = mn;
            mx[h] = base;
            l[h] *= alpha[h];
        }
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            const float p0 = ex2(s[t * 4] - mx[0]), p1 = ex2(s[t * 4 + 1] - mx[0]);
            const float p2 = ex2(s[t * 4 + 2] - mx[1]), p3 = ex2(s[t * 4 + 3] - mx[1]);
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            pa[t >> 1][(t & 1) * 2] = pack_bf16(p0, p1);
            pa[t >> 1][(t & 1) * 2 + 1] = pack_bf16(p2, p3);
        }
#pragma unroll
        for (int t = 0; t < DP / 8; t++) {
            o[t * 4] *= alpha[0];
            o[t * 4 + 1] *= alpha[0];
            o[t * 4 + 2] *= alpha[1];
            o[t * 4 + 3] *= alpha[1];
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) mma_rs<DP>(o, pa[kk], wg_desc_n<BN>(aV, kk), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<DP / 2>(o);
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (row[h] >= p.Tq) continue;
        const bool none = !(l[h] > 0.f); /* no key: O = 0, LSE = -inf (the CPU's rule) */
        const float inv = none ? 0.f : 1.f / l[h];
        float *orow = O + (b * p.Tq + row[h]) * p.Dv;
#pragma unroll
        for (int t = 0; t < DP / 8; t++)
            if (t * 8 < p.Dv)
                *reinterpret_cast<float2 *>(orow + t * 8 + 2 * c) =
                    make_float2(o[t * 4 + 2 * h] * inv, o[t * 4 + 2 * h + 1] * inv);
        if (LSE && c == 0) LSE[b * p.Tq + row[h]] = none ? -INFINITY : m[h] * kLn2 + logf(l[h]);
    }
#elif defined(__CUDA_ARCH__)
    __trap(); /* built without sm_90a: never launched (wg_takes), and loud if it is */
#endif
}

template <int DP, bool X> fr_status wg_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q,
                                              const bf16 *K, const bf16 *V, float *O, float *L)
{
    const size_t smem = wg_smem<DP>();
    FR_TRY(set_smem(k->node, fwd_wg<DP, X>, smem));
    const int64_t blocks = (int64_t)((p.Tq + kWgBM - 1) / kWgBM) * p.batch;
    fwd_wg<DP, X><<<grid_of(blocks), kThreads, smem, k->cu->stream>>>(Q, K, V, O, L, p, mk);
    return fr_cuda_check_launch(k->node, "Attention(wgmma)");
}

template <int DP> fr_status wg_dp(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K,
                                  const bf16 *V, float *O, float *L)
{
    return mk.extra() ? wg_launch<DP, true>(k, p, mk, Q, K, V, O, L) : wg_launch<DP, false>(k, p, mk, Q, K, V, O, L);
}

} /* namespace */

bool wg_takes(const Prob &p)
{
#ifdef FP8RUN_SM90A
    return (p.D > 64 || p.Dv > 64) && !fr_env_is(FR_ENV_FLASH_WGMMA, "0");
#else
    (void)p;
    return false;
#endif
}

fr_status wg_fwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K, const bf16 *V,
                 float *O, float *L)
{
    if ((p.D > p.Dv ? p.D : p.Dv) <= 128) return wg_dp<128>(k, p, mk, Q, K, V, O, L);
    return wg_dp<256>(k, p, mk, Q, K, V, O, L);
}

} /* namespace fr_attn */
