/* Flash attention backward on Hopper's wgmma (sm_90a builds), for tc_bwd's problems (see
 * attention_tc_bwd.cu, whose plan it keeps: two kernels, no atomics, bit-identical runs) and
 * with its numbers; the products run as warpgroup sequences reading their shared-memory
 * operands straight from 128-byte swizzled tiles (ops/cuda/wgmma.cuh):
 *  - dK, dV: a block of two warpgroups owns 128 keys (64 each: the keys are the rows,
 *    S^T = K Q^T and dP^T = V dO^T with Q and dO tiles as K-major B operands) and walks the
 *    query tiles of every Q batch index reading them; dV += P^T dO and dK += dS^T Q take P^T
 *    and dS^T from registers and the same Q, dO tiles as N-major B operands. Past a padded head
 *    dim of 128 dK and dV do not fit one thread's registers together: one pass each.
 *  - dQ: a block of two warpgroups owns 128 query rows and walks the key tiles: S = Q K^T,
 *    dP = dO V^T, dQ += dS K (K's tile N-major).
 * Query tiles of 64 (32 at a padded head dim of 256) and key tiles of 64 (32) keep both
 * kernels' double-buffered tiles within one SM's shared memory. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace fr_attn {
namespace {

using namespace mma;
using namespace fr_wg;
using wg::kThreads;
using wg::tile_bytes;

/* f(std::true_type) where a tile crosses an edge and its element loop must test keys one by
 * one, f(std::false_type) where none can be masked: two copies of the loop, each without the
 * other's test. X (extra masks) tests the edges at run time, in one copy. */
template <bool X, class F> __device__ __forceinline__ void by_edge(bool edge, F &f)
{
    if (!X && edge)
        f(std::true_type{});
    else
        f(std::false_type{});
}

/* query rows per tile of the dK, dV walk; keys per tile of the dQ walk */
template <int DP> __host__ __device__ constexpr int bwd_tile() { return DP == 256 ? 32 : 64; }
constexpr int kRows = 128; /* keys of a dK, dV block; query rows of a dQ block */

/* ---------------------------------------------------------------- dQ ---- */

template <int DP> constexpr size_t dq_smem()
{
    return 1024 + 2 * tile_bytes<DP>(kRows) + 4 * tile_bytes<DP>(bwd_tile<DP>()) + 2 * bwd_tile<DP>() * sizeof(int64_t);
}

template <int DP, bool X> __global__ void __launch_bounds__(kThreads, 1)
    dq_wg(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
          const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
          float *__restrict__ dQ, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = kRows, BN = bwd_tile<DP>();
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = wg::smem_base(smem_raw), *sdO = sQ + tile_bytes<DP>(BM), *sK = sdO + tile_bytes<DP>(BM);
    unsigned char *sV = sK + 2 * tile_bytes<DP>(BN);
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + 2 * tile_bytes<DP>(BN)); /* the key tiles' segment ids */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int wgi = warp >> 2, w4 = warp & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const bf16 *Kb = K + kvb * p.Tk * p.D, *Vb = V + kvb * p.Tk * p.Dv;
    int j0, j1; /* the key tiles this block reads */
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);

    wg::load_sw<BM, DP>(sQ, Q + b * p.Tq * p.D, p.D, q0, p.Tq, tid);
    wg::load_sw<BM, DP>(sdO, dO + b * p.Tq * p.Dv, p.Dv, q0, p.Tq, tid);
    auto load_kv = [&](int j, int buf) {
        wg::load_sw<BN, DP>(sK + buf * tile_bytes<DP>(BN), Kb, p.D, j * BN, p.Tk, tid);
        wg::load_sw<BN, DP>(sV + buf * tile_bytes<DP>(BN), Vb, p.Dv, j * BN, p.Tk, tid);
        cp_async_commit();
        if (X && mk.sk) load_key_ids<kThreads>(p, mk, srow, j * BN, BN, sKid + buf * BN, tid);
    };
    if (j0 < j1)
        load_kv(j0, j0 & 1);
    else
        cp_async_commit();

    const int wq0 = q0 + wgi * 64; /* this warpgroup's first query row */
    int row[2];
    float lse2[2], dl[2];
    int64_t qid[2] = {1, 1}, moff = 0;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        row[h] = wq0 + w4 * 16 + g + h * 8;
        const bool ok = row[h] < p.Tq;
        lse2[h] = ok ? lse2_of(LSE[b * p.Tq + row[h]]) : INFINITY;
        dl[h] = ok ? Delta[b * p.Tq + row[h]] : 0.f;
        if (X && mk.sq && ok) qid[h] = seg_at(mk.sq, mk.seg64, srow * p.Tq + row[h]);
    }
    if (X && mk.m) moff = mask_off(p, mk, b);
    float dq[DP / 2];
#pragma unroll
    for (int i = 0; i < DP / 2; i++) dq[i] = 0.f;
    const uint32_t aQ = smem_addr(sQ), adO = smem_addr(sdO);
    const float sl2 = p.scale * kLog2e;

    for (int j = j0; j < j1; j++) {
        wg::tiles_landed();
        __syncthreads(); /* tile j landed; every warpgroup is done with the other buffer */
        if (j + 1 < j1) load_kv(j + 1, (j + 1) & 1);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + 63) continue;
        if (mk.window > 0 && (int64_t)wq0 - (k0 + BN - 1) >= mk.window) continue;
        const uint32_t aK = smem_addr(sK + (j & 1) * tile_bytes<DP>(BN));
        const uint32_t aV = smem_addr(sV + (j & 1) * tile_bytes<DP>(BN));
        float s[BN / 2], dp[BN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++) {
            mma_ss<BN>(s, wg_desc_k<BM>(aQ, wgi * 64, kk), wg_desc_k<BN>(aK, 0, kk), kk > 0);
            mma_ss<BN>(dp, wg_desc_k<BM>(adO, wgi * 64, kk), wg_desc_k<BN>(aV, 0, kk), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<BN / 2>(s);
        fence_regs<BN / 2>(dp);
        const int64_t *kid = sKid + (j & 1) * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + 64 > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + 63 - k0 >= mk.window);
        uint32_t da[BN / 16][4];
        /* E: the tile crosses an edge (by_edge) */
        auto ds_tile = [&](auto edge_tag) {
            constexpr bool E = decltype(edge_tag)::value;
#pragma unroll
            for (int t = 0; t < BN / 8; t++) {
                float ds[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, key = k0 + t * 8 + 2 * c + (e & 1);
                    float pv = 0.f, dcap = 1.f;
                    if (X) {
                        if (!edge || !outside(p, mk, row[h], key))
                            pv = ex2(score2<X>(p, mk, s[t * 4 + e], row[h], key, moff, mk.sk ? kid[key - k0] : 0,
                                               qid[h], &dcap) -
                                     lse2[h]);
                    } else { /* one FFMA a score, and a select where the tile crosses an edge */
                        pv = ex2(fmaf(s[t * 4 + e], sl2, -lse2[h]));
                        if (E) pv = outside(p, mk, row[h], key) ? 0.f : pv;
                    }
                    ds[e] = pv * (dp[t * 4 + e] - dl[h]) * dcap; /* dS (through the softcap) */
                }
                da[t >> 1][(t & 1) * 2] = pack_bf16(ds[0], ds[1]);
                da[t >> 1][(t & 1) * 2 + 1] = pack_bf16(ds[2], ds[3]);
            }
        };
        by_edge<X>(edge, ds_tile);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) mma_rs<DP>(dq, da[kk], wg_desc_n<BN>(aK, kk), 1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<DP / 2>(dq);
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (row[h] >= p.Tq) continue;
        float *qrow = dQ + (b * p.Tq + row[h]) * p.D;
#pragma unroll
        for (int t = 0; t < DP / 8; t++)
            if (t * 8 < p.D)
                *reinterpret_cast<float2 *>(qrow + t * 8 + 2 * c) =
                    make_float2(dq[t * 4 + 2 * h] * p.scale, dq[t * 4 + 2 * h + 1] * p.scale);
    }
#elif defined(__CUDA_ARCH__)
    __trap(); /* built without sm_90a: never launched (wg_takes), and loud if it is */
#endif
}

/* ---------------------------------------------------------------- dK, dV ---- */

template <int DP> constexpr size_t dkdv_smem()
{
    return 1024 + 2 * tile_bytes<DP>(kRows) + 4 * tile_bytes<DP>(bwd_tile<DP>()) + 4 * bwd_tile<DP>() * sizeof(float);
}

/* WANT: 1 dV, 2 dK, 3 both. */
template <int DP, bool X, int WANT> __global__ void __launch_bounds__(kThreads, 1)
    dkdv_wg(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
            const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
            float *__restrict__ dK, float *__restrict__ dV, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BN = kRows, BM = bwd_tile<DP>();
    constexpr bool WK = (WANT & 2) != 0, WV = (WANT & 1) != 0;
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sK = wg::smem_base(smem_raw), *sV = sK + tile_bytes<DP>(BN), *sQ = sV + tile_bytes<DP>(BN);
    unsigned char *sdO = sQ + 2 * tile_bytes<DP>(BM);
    float *sL = reinterpret_cast<float *>(sdO + 2 * tile_bytes<DP>(BM)), *sDl = sL + 2 * BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int wgi = warp >> 2, w4 = warp & 3;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * BN; /* first key blocks (most queries) first */
    const int n1 = min(n0 + BN, p.Tk);
    const QWalk<X> walk(p, mk, kvb, n0, n1, BM);

    wg::load_sw<BN, DP>(sK, K + kvb * p.Tk * p.D, p.D, n0, p.Tk, tid);
    wg::load_sw<BN, DP>(sV, V + kvb * p.Tk * p.Dv, p.Dv, n0, p.Tk, tid);
    auto load_q = [&](int64_t qb, int it, int buf) {
        const int t0 = it * BM;
        wg::load_sw<BM, DP>(sQ + buf * tile_bytes<DP>(BM), Q + qb * p.Tq * p.D, p.D, t0, p.Tq, tid);
        wg::load_sw<BM, DP>(sdO + buf * tile_bytes<DP>(BM), dO + qb * p.Tq * p.Dv, p.Dv, t0, p.Tq, tid);
        for (int i = tid; i < BM; i += kThreads) {
            const bool ok = t0 + i < p.Tq;
            const int64_t off = ok ? qb * p.Tq + t0 + i : 0;
            cp_async4(sL + buf * BM + i, LSE + off, ok);
            cp_async4(sDl + buf * BM + i, Delta + off, ok);
        }
        cp_async_commit();
    };

    float dk[WK ? DP / 2 : 1], dv[WV ? DP / 2 : 1];
#pragma unroll
    for (int i = 0; i < (WK ? DP / 2 : 1); i++) dk[i] = 0.f;
#pragma unroll
    for (int i = 0; i < (WV ? DP / 2 : 1); i++) dv[i] = 0.f;
    const int wk0 = n0 + wgi * 64; /* this warpgroup's first key */
    const int key[2] = {wk0 + w4 * 16 + g, wk0 + w4 * 16 + g + 8};
    const uint32_t aK = smem_addr(sK), aV = smem_addr(sV);
    const float sl2 = p.scale * kLog2e;

    int64_t cb;
    int ci, buf = 0;
    walk.advance(-1, 0, &cb, &ci);
    if (cb < p.batch)
        load_q(cb, ci, 0);
    else
        cp_async_commit(); /* (K, V) */
    int64_t mb = -1, moff = 0, kid[2] = {0, 0};
    while (cb < p.batch) {
        int64_t nb;
        int ni;
        walk.advance(cb, ci, &nb, &ni);
        wg::tiles_landed();
        __syncthreads(); /* this tile landed; every warpgroup is done with the other buffer */
        if (nb < p.batch) load_q(nb, ni, buf ^ 1);
        walk.enter(cb, key, &mb, &moff, kid);
        const int qt0 = ci * BM;
        const bool skip = (p.causal && qt0 + BM - 1 < wk0) || /* every query before this warpgroup's keys */
                          (mk.window > 0 && (int64_t)qt0 - (wk0 + 63) >= mk.window); /* or past its window */
        if (!skip) {
            const uint32_t aQ = smem_addr(sQ + buf * tile_bytes<DP>(BM)),
                           adO = smem_addr(sdO + buf * tile_bytes<DP>(BM));
            const float *lt = sL + buf * BM, *dlt = sDl + buf * BM;
            float s[BM / 2], dp[WK ? BM / 2 : 1];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DP / 16; kk++) {
                mma_ss<BM>(s, wg_desc_k<BN>(aK, wgi * 64, kk), wg_desc_k<BM>(aQ, 0, kk), kk > 0);
                if constexpr (WK) mma_ss<BM>(dp, wg_desc_k<BN>(aV, wgi * 64, kk), wg_desc_k<BM>(adO, 0, kk), kk > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<BM / 2>(s);
            if constexpr (WK) fence_regs<BM / 2>(dp);
            const bool edge = wk0 + 64 > p.Tk || qt0 + BM > p.Tq || (p.causal && qt0 < wk0 + 63) ||
                              (mk.window > 0 && (int64_t)qt0 + BM - 1 - wk0 >= mk.window);
            const int64_t srow = X && mk.sk ? cb / mk.seg_per_row : 0;
            uint32_t pa[BM / 16][4], dsa[WK ? BM / 16 : 1][4];
            /* E: the tile crosses an edge (by_edge) */
            auto p_ds_tile = [&](auto edge_tag) {
                constexpr bool E = decltype(edge_tag)::value;
#pragma unroll
                for (int t = 0; t < BM / 8; t++) {
                    /* this thread's two queries of the 8: their LSE (log2) and Delta */
                    const float2 lq = *reinterpret_cast<const float2 *>(lt + t * 8 + 2 * c);
                    const float2 dd = *reinterpret_cast<const float2 *>(dlt + t * 8 + 2 * c);
                    const float l2[2] = {lse2_of(lq.x), lse2_of(lq.y)}, dl[2] = {dd.x, dd.y};
                    float pv[4], ds[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qi = t * 8 + 2 * c + (e & 1), q = qt0 + qi, k = key[e >> 1];
                        float dcap = 1.f;
                        pv[e] = 0.f;
                        if (X) {
                            if (!edge || !outside(p, mk, q, k)) {
                                const int64_t qid = mk.sq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + q) : 1;
                                pv[e] = ex2(score2<X>(p, mk, s[t * 4 + e], q, k, moff, kid[e >> 1], qid, &dcap) -
                                            l2[e & 1]);
                            }
                        } else { /* one FFMA a score, and a select where the tile crosses an edge */
                            pv[e] = ex2(fmaf(s[t * 4 + e], sl2, -l2[e & 1]));
                            if (E) pv[e] = outside(p, mk, q, k) ? 0.f : pv[e];
                        }
                        if (WK) ds[e] = pv[e] * (dp[WK ? t * 4 + e : 0] - dl[e & 1]) * dcap; /* dS^T */
                    }
                    pa[t >> 1][(t & 1) * 2] = pack_bf16(pv[0], pv[1]);
                    pa[t >> 1][(t & 1) * 2 + 1] = pack_bf16(pv[2], pv[3]);
                    if constexpr (WK) {
                        dsa[t >> 1][(t & 1) * 2] = pack_bf16(ds[0], ds[1]);
                        dsa[t >> 1][(t & 1) * 2 + 1] = pack_bf16(ds[2], ds[3]);
                    }
                }
            };
            by_edge<X>(edge, p_ds_tile);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
                if constexpr (WV) mma_rs<DP>(dv, pa[kk], wg_desc_n<BM>(adO, kk), 1);
                if constexpr (WK) mma_rs<DP>(dk, dsa[kk], wg_desc_n<BM>(aQ, kk), 1);
            }
            wgmma_commit();
            wgmma_wait<0>();
            if constexpr (WV) fence_regs<DP / 2>(dv);
            if constexpr (WK) fence_regs<DP / 2>(dk);
        }
        cb = nb;
        ci = ni;
        buf ^= 1;
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (key[h] >= p.Tk) continue;
#pragma unroll
        for (int t = 0; t < DP / 8; t++) {
            if (WK && dK && t * 8 < p.D)
                *reinterpret_cast<float2 *>(dK + (kvb * p.Tk + key[h]) * p.D + t * 8 + 2 * c) =
                    make_float2(dk[WK ? t * 4 + 2 * h : 0] * p.scale, dk[WK ? t * 4 + 2 * h + 1 : 0] * p.scale);
            if (WV && dV && t * 8 < p.Dv)
                *reinterpret_cast<float2 *>(dV + (kvb * p.Tk + key[h]) * p.Dv + t * 8 + 2 * c) =
                    make_float2(dv[WV ? t * 4 + 2 * h : 0], dv[WV ? t * 4 + 2 * h + 1 : 0]);
        }
    }
#elif defined(__CUDA_ARCH__)
    __trap(); /* built without sm_90a: never launched (wg_takes), and loud if it is */
#endif
}

/* ---------------------------------------------------------------- launchers ---- */

template <int DP, bool X, int WANT> fr_status dkdv_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk,
                                                          const Scratch &s, float *dK, float *dV, const float *LSE)
{
    const size_t smem = dkdv_smem<DP>();
    FR_TRY(set_smem(k->node, dkdv_wg<DP, X, WANT>, smem));
    const int64_t blocks = (int64_t)((p.Tk + kRows - 1) / kRows) * p.kv_batch;
    dkdv_wg<DP, X, WANT>
        <<<grid_of(blocks), kThreads, smem, k->cu->stream>>>(s.q16, s.k16, s.v16, s.do16, LSE, s.delta, dK, dV, p, mk);
    return fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, wgmma)");
}

template <int DP, bool X> fr_status bwd_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s,
                                               float *dQ, float *dK, float *dV, const float *LSE)
{
    if constexpr (DP <= 128) {
        if (dK || dV) FR_TRY((dkdv_launch<DP, X, 3>(k, p, mk, s, dK, dV, LSE)));
    } else { /* dK and dV accumulators together would spill: one pass each */
        if (dV) FR_TRY((dkdv_launch<DP, X, 1>(k, p, mk, s, dK, dV, LSE)));
        if (dK) FR_TRY((dkdv_launch<DP, X, 2>(k, p, mk, s, dK, dV, LSE)));
    }
    if (dQ) {
        const size_t smem = dq_smem<DP>();
        FR_TRY(set_smem(k->node, dq_wg<DP, X>, smem));
        const int64_t blocks = (int64_t)((p.Tq + kRows - 1) / kRows) * p.batch;
        dq_wg<DP, X>
            <<<grid_of(blocks), kThreads, smem, k->cu->stream>>>(s.q16, s.k16, s.v16, s.do16, LSE, s.delta, dQ, p, mk);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, wgmma)"));
    }
    return FR_OK;
}

template <int DP> fr_status bwd_dp(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ,
                                   float *dK, float *dV, const float *LSE)
{
    return mk.extra() ? bwd_launch<DP, true>(k, p, mk, s, dQ, dK, dV, LSE)
                      : bwd_launch<DP, false>(k, p, mk, s, dQ, dK, dV, LSE);
}

} /* namespace */

fr_status wg_bwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ, float *dK,
                 float *dV, const float *LSE)
{
    if ((p.D > p.Dv ? p.D : p.Dv) <= 128) return bwd_dp<128>(k, p, mk, s, dQ, dK, dV, LSE);
    return bwd_dp<256>(k, p, mk, s, dQ, dK, dV, LSE);
}

} /* namespace fr_attn */
