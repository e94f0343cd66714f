/* Flash attention backward on Hopper's wgmma (sm_90a builds), for tc_bwd's problems (see
 * attention_tc_bwd.cu, whose plan it keeps: two kernels, no atomics, bit-identical runs) and
 * with its numbers. Both kernels are warp-specialized as the forward is (attention_wg.cu):
 * warpgroup 0 loads, warpgroups 1 and 2 compute, and they meet only on mbarriers, so one
 * consumer's element step runs under the other's products and no consumer computes an address.
 *  - dK, dV (dkdv_ws): a block owns 128 keys (64 per consumer: the keys are the rows, S^T =
 *    K Q^T and dP^T = V dO^T with Q and dO tiles as K-major B operands) and walks the query
 *    tiles of every Q batch index reading them (QWalk). One thread of the producer has the
 *    tensor copy engine bring K and V once and each query tile's Q and dO into a ring of
 *    stages; its 128 threads bring the tile's LSE and Delta by cp.async, counted on the same
 *    `full` mbarrier. dV += P^T dO and dK += dS^T Q take P^T and dS^T from registers and the
 *    same Q, dO tiles as N-major B operands. Past a padded head dim of 128 dK and dV do not
 *    fit one thread's registers together: one pass each.
 *  - dQ (dq_ws): a block owns 128 query rows (Q and dO resident) and walks the key tiles, K
 *    and V (and the key segment ids) in the ring: S = Q K^T, dP = dO V^T, dQ += dS K.
 * Consumers run with 232 registers, the producer with 40 (setmaxnreg). */
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
using wg::by_edge;
using wg::tile_bytes;

constexpr int kWsThreads = 384, kKeys = 128; /* a producer and two consumer warpgroups; rows a block owns */

/* ---------------------------------------------------------------- dK, dV ---- */
/* WANT: 1 dV, 2 dK, 3 both. Resident tiles of 128 keys: K, and V where dK is wanted (dP^T =
 * V dO^T; dV alone never reads V). Query rows per tile and ring stages: the ring and the
 * resident tiles within 227 KiB; at a padded head dim of 256 the dV pass, with K alone
 * resident, takes tiles of 64 rows in 2 stages, the dK pass 32 rows in 3. */
template <int WANT> __host__ __device__ constexpr int ws_resident() { return (WANT & 2) ? 2 : 1; }
template <int DP, int WANT> __host__ __device__ constexpr int ws_bm() { return DP == 256 && WANT != 1 ? 32 : 64; }
template <int DP, int WANT> __host__ __device__ constexpr int ws_stages() { return DP == 256 && WANT == 1 ? 2 : 3; }
template <int DP, int WANT> constexpr size_t ws_smem()
{
    constexpr int BM = ws_bm<DP, WANT>(), S = ws_stages<DP, WANT>();
    return 1024 + ws_resident<WANT>() * tile_bytes<DP>(kKeys) + S * (2 * tile_bytes<DP>(BM) + 2 * BM * sizeof(float)) +
           (2 * S + 1) * sizeof(uint64_t);
}
static_assert(ws_smem<128, 3>() <= 227 * 1024 && ws_smem<256, 1>() <= 227 * 1024 && ws_smem<256, 2>() <= 227 * 1024,
              "dK/dV's shared memory within one SM's 227 KiB");

template <int DP, bool X, int WANT> __global__ void __launch_bounds__(kWsThreads, 1)
    dkdv_ws(const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
            const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmO,
            const float *__restrict__ LSE, const float *__restrict__ Delta, float *__restrict__ dK,
            float *__restrict__ dV, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BN = kKeys, BM = ws_bm<DP, WANT>(), S = ws_stages<DP, WANT>();
    constexpr bool WK = (WANT & 2) != 0, WV = (WANT & 1) != 0;
    constexpr uint32_t kKV = (uint32_t)tile_bytes<DP>(BN), kQ = (uint32_t)tile_bytes<DP>(BM);
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sK = wg::smem_base(smem_raw), *sV = sK + kKV, *sQ = sK + ws_resident<WANT>() * kKV, *sdO = sQ + S * kQ;
    float *sL = reinterpret_cast<float *>(sdO + S * kQ), *sDl = sL + S * BM;
    uint64_t *full = reinterpret_cast<uint64_t *>(sDl + S * BM), *empty = full + S, *kv_full = empty + S;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * BN; /* first key blocks (most queries) first */
    const int n1 = min(n0 + BN, p.Tk);
    const QWalk<X> walk(p, mk, kvb, n0, n1, BM);
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full + s, 1 + 128); /* the tiles' bytes, and each producer thread's LSE/Delta copies */
            mbar_init(empty + s, 256);    /* each consumer thread */
        }
        mbar_init(kv_full, 1);
        fence_mbar_init();
    }
    __syncthreads();

    if (wgi == 0) { /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            mbar_expect_tx(kv_full, ws_resident<WANT>() * kKV);
            for (int a = 0; a < DP / 64; a++) {
                tma_load_3d(sK + a * BN * 128, &tmK, a * 64, n0, (int)kvb, kv_full);
                if (WK) tma_load_3d(sV + a * BN * 128, &tmV, a * 64, n0, (int)kvb, kv_full);
            }
        }
        int64_t qb;
        int qi;
        walk.advance(-1, 0, &qb, &qi);
        for (int it = 0; qb < p.batch; it++) {
            const int s = it % S, k = it / S, t0 = qi * BM;
            if (k > 0) mbar_wait(empty + s, (k - 1) & 1);
            if (tid == 0) {
                mbar_expect_tx(full + s, 2 * kQ);
                for (int a = 0; a < DP / 64; a++) {
                    tma_load_3d(sQ + s * kQ + a * BM * 128, &tmQ, a * 64, t0, (int)qb, full + s);
                    tma_load_3d(sdO + s * kQ + a * BM * 128, &tmO, a * 64, t0, (int)qb, full + s);
                }
            }
            if (tid < BM) {
                const bool ok = t0 + tid < p.Tq;
                const int64_t off = ok ? qb * p.Tq + t0 + tid : 0;
                cp_async4(sL + s * BM + tid, LSE + off, ok);
                cp_async4(sDl + s * BM + tid, Delta + off, ok);
            }
            mbar_arrive_cp_async(full + s);
            int64_t nb;
            int ni;
            walk.advance(qb, qi, &nb, &ni);
            qb = nb, qi = ni;
        }
        cp_async_wait_all(); /* keep the threads until their copies landed */
        return;
    }

    /* ---- consumers: warpgroups 1 and 2, 64 keys each ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wgi - 1, w4 = warp & 3, lane = tid & 31, g = lane >> 2, c = lane & 3;
    float dk[WK ? DP / 2 : 1], dv[WV ? DP / 2 : 1];
#pragma unroll
    for (int i = 0; i < (WK ? DP / 2 : 1); i++) dk[i] = 0.f;
#pragma unroll
    for (int i = 0; i < (WV ? DP / 2 : 1); i++) dv[i] = 0.f;
    const int wk0 = n0 + cw * 64; /* this warpgroup's first key */
    const int key[2] = {wk0 + w4 * 16 + g, wk0 + w4 * 16 + g + 8};
    const uint32_t aK = smem_addr(sK), aV = smem_addr(sV);
    const float sl2 = p.scale * kLog2e;
    mbar_wait(kv_full, 0);

    int64_t cb, mb = -1, moff = 0, kid[2] = {0, 0};
    int ci;
    walk.advance(-1, 0, &cb, &ci);
    for (int it = 0; cb < p.batch; it++) {
        const int s = it % S;
        mbar_wait(full + s, (it / S) & 1);
        walk.enter(cb, key, &mb, &moff, kid);
        const int qt0 = ci * BM;
        const bool skip = (p.causal && qt0 + BM - 1 < wk0) || /* every query before this warpgroup's keys */
                          (mk.window > 0 && (int64_t)qt0 - (wk0 + 63) >= mk.window); /* or past its window */
        if (!skip) {
            const uint32_t aQ = smem_addr(sQ + s * kQ), adO = smem_addr(sdO + s * kQ);
            const float *lt = sL + s * BM, *dlt = sDl + s * BM;
            float sc[BM / 2], dp[WK ? BM / 2 : 1];
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DP / 16; kk++) {
                mma_ss<BM>(sc, wg_desc_k<BN>(aK, cw * 64, kk), wg_desc_k<BM>(aQ, 0, kk), kk > 0);
                if constexpr (WK) mma_ss<BM>(dp, wg_desc_k<BN>(aV, cw * 64, kk), wg_desc_k<BM>(adO, 0, kk), kk > 0);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<BM / 2>(sc);
            if constexpr (WK) fence_regs<BM / 2>(dp);
            const bool edge = wk0 + 64 > p.Tk || qt0 + BM > p.Tq || (p.causal && qt0 < wk0 + 63) ||
                              (mk.window > 0 && (int64_t)qt0 + BM - 1 - wk0 >= mk.window);
            const int64_t srow = X && mk.sk ? cb / mk.seg_per_row : 0;
            uint32_t pa[BM / 16][4], dsa[WK ? BM / 16 : 1][4];
            auto p_ds_tile = [&](auto edge_tag) {
                constexpr bool E = decltype(edge_tag)::value;
#pragma unroll
                for (int t = 0; t < BM / 8; t++) {
                    const float2 lq = *reinterpret_cast<const float2 *>(lt + t * 8 + 2 * c);
                    const float2 dq = *reinterpret_cast<const float2 *>(dlt + t * 8 + 2 * c);
                    const float l2[2] = {lse2_of(lq.x), lse2_of(lq.y)}, dl[2] = {dq.x, dq.y};
                    float pv[4], ds[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int qi = t * 8 + 2 * c + (e & 1), q = qt0 + qi, k = key[e >> 1];
                        float dcap = 1.f;
                        pv[e] = 0.f;
                        if (X) {
                            if (!edge || !outside(p, mk, q, k)) {
                                const int64_t qid = mk.sq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + q) : 1;
                                pv[e] = ex2(score2<X>(p, mk, sc[t * 4 + e], q, k, moff, kid[e >> 1], qid, &dcap) -
                                            l2[e & 1]);
                            }
                        } else {
                            pv[e] = ex2(fmaf(sc[t * 4 + e], sl2, -l2[e & 1]));
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
        mbar_arrive(empty + s); /* this stage's Q, dO, LSE and Delta read */
        int64_t nb;
        int ni;
        walk.advance(cb, ci, &nb, &ni);
        cb = nb, ci = ni;
    }
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

/* ---------------------------------------------------------------- dQ ----
 * A block of 128 query rows (warpgroups 1 and 2, 64 each) walks its key tiles
 * (key_tile_range); warpgroup 0 brings Q and dO once and then each key tile's K and V (and
 * segment ids) into a ring, by the tensor copy engine: key tiles of 64 in 3 stages (32 in 2 at a
 * padded head dim of 256; 3 there measured no faster, 476 against 471 us) beside Q and dO
 * within 227 KiB. */
template <int DP> __host__ __device__ constexpr int dq_ws_bn() { return DP == 256 ? 32 : 64; }
template <int DP> __host__ __device__ constexpr int dq_ws_stages() { return DP == 256 ? 2 : 3; }
template <int DP> constexpr size_t dq_ws_smem()
{
    return 1024 + 2 * tile_bytes<DP>(kKeys) +
           dq_ws_stages<DP>() * (2 * tile_bytes<DP>(dq_ws_bn<DP>()) + dq_ws_bn<DP>() * sizeof(int64_t)) +
           (2 * dq_ws_stages<DP>() + 1) * sizeof(uint64_t);
}
static_assert(dq_ws_smem<128>() <= 227 * 1024 && dq_ws_smem<256>() <= 227 * 1024, "dQ's shared memory within 227 KiB");

template <int DP, bool X> __global__ void __launch_bounds__(kWsThreads, 1)
    dq_ws(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmO,
          const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
          const float *__restrict__ LSE, const float *__restrict__ Delta, float *__restrict__ dQ, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = kKeys, BN = dq_ws_bn<DP>(), S = dq_ws_stages<DP>();
    constexpr uint32_t kRowsB = (uint32_t)tile_bytes<DP>(BM), kT = (uint32_t)tile_bytes<DP>(BN);
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = wg::smem_base(smem_raw), *sdO = sQ + kRowsB, *sK = sdO + kRowsB, *sV = sK + S * kT;
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + S * kT);
    uint64_t *full = reinterpret_cast<uint64_t *>(sKid + S * BN), *empty = full + S, *q_full = empty + S;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    int j0, j1;
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full + s, X && mk.sk ? 1 + 128 : 1);
            mbar_init(empty + s, 256);
        }
        mbar_init(q_full, 1);
        fence_mbar_init();
    }
    __syncthreads();

    if (wgi == 0) { /* ---- producer ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        const bool ids = X && mk.sk;
        if (!ids && tid != 0) return;
        if (tid == 0) {
            mbar_expect_tx(q_full, 2 * kRowsB);
            for (int a = 0; a < DP / 64; a++) {
                tma_load_3d(sQ + a * BM * 128, &tmQ, a * 64, q0, (int)b, q_full);
                tma_load_3d(sdO + a * BM * 128, &tmO, a * 64, q0, (int)b, q_full);
            }
        }
        for (int j = j0; j < j1; j++) {
            const int it = j - j0, s = it % S, k = it / S;
            if (k > 0) mbar_wait(empty + s, (k - 1) & 1);
            if (tid == 0) {
                mbar_expect_tx(full + s, 2 * kT);
                for (int a = 0; a < DP / 64; a++) {
                    tma_load_3d(sK + s * kT + a * BN * 128, &tmK, a * 64, j * BN, (int)kvb, full + s);
                    tma_load_3d(sV + s * kT + a * BN * 128, &tmV, a * 64, j * BN, (int)kvb, full + s);
                }
            }
            if (ids) {
                load_key_ids<128>(p, mk, srow, j * BN, BN, sKid + s * BN, tid);
                mbar_arrive(full + s);
            }
        }
        return;
    }

    /* ---- consumers ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wgi - 1, w4 = warp & 3, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int wq0 = q0 + cw * 64;
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
    mbar_wait(q_full, 0);

    for (int j = j0; j < j1; j++) {
        const int it = j - j0, s = it % S;
        mbar_wait(full + s, (it / S) & 1);
        const int k0 = j * BN;
        if ((p.causal && k0 > wq0 + 63) || (mk.window > 0 && (int64_t)wq0 - (k0 + BN - 1) >= mk.window)) {
            mbar_arrive(empty + s);
            continue;
        }
        const uint32_t aK = smem_addr(sK + s * kT), aV = smem_addr(sV + s * kT);
        float sc[BN / 2], dp[BN / 2];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++) {
            mma_ss<BN>(sc, wg_desc_k<BM>(aQ, cw * 64, kk), wg_desc_k<BN>(aK, 0, kk), kk > 0);
            mma_ss<BN>(dp, wg_desc_k<BM>(adO, cw * 64, kk), wg_desc_k<BN>(aV, 0, kk), kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<BN / 2>(sc);
        fence_regs<BN / 2>(dp);
        const int64_t *kid = sKid + s * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + 64 > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + 63 - k0 >= mk.window);
        uint32_t da[BN / 16][4];
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
                            pv = ex2(score2<X>(p, mk, sc[t * 4 + e], row[h], key, moff, mk.sk ? kid[key - k0] : 0,
                                               qid[h], &dcap) -
                                     lse2[h]);
                    } else {
                        pv = ex2(fmaf(sc[t * 4 + e], sl2, -lse2[h]));
                        if (E) pv = outside(p, mk, row[h], key) ? 0.f : pv;
                    }
                    ds[e] = pv * (dp[t * 4 + e] - dl[h]) * dcap;
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
        mbar_arrive(empty + s); /* K, V and the ids of this stage read */
    }
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

/* ---------------------------------------------------------------- launchers ---- */

template <int DP, bool X, int WANT> fr_status dkdv_ws_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk,
                                                             const Scratch &s, float *dK, float *dV, const float *LSE)
{
    const size_t smem = ws_smem<DP, WANT>();
    FR_TRY(set_smem(k->node, dkdv_ws<DP, X, WANT>, smem));
    CUtensorMap tK, tV, tQ, tO;
    FR_TRY(wg::tile_map(k->node, "K", &tK, s.k16, p.kv_batch, p.Tk, p.D, kKeys));
    FR_TRY(wg::tile_map(k->node, "V", &tV, s.v16, p.kv_batch, p.Tk, p.Dv, kKeys));
    FR_TRY(wg::tile_map(k->node, "Q", &tQ, s.q16, p.batch, p.Tq, p.D, ws_bm<DP, WANT>()));
    FR_TRY(wg::tile_map(k->node, "dO", &tO, s.do16, p.batch, p.Tq, p.Dv, ws_bm<DP, WANT>()));
    const int64_t blocks = (int64_t)((p.Tk + kKeys - 1) / kKeys) * p.kv_batch;
    dkdv_ws<DP, X, WANT>
        <<<grid_of(blocks), kWsThreads, smem, k->cu->stream>>>(tK, tV, tQ, tO, LSE, s.delta, dK, dV, p, mk);
    return fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, wgmma, producer warpgroup)");
}

template <int DP, bool X> fr_status dq_ws_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk,
                                                 const Scratch &s, float *dQ, const float *LSE)
{
    const size_t smem = dq_ws_smem<DP>();
    FR_TRY(set_smem(k->node, dq_ws<DP, X>, smem));
    CUtensorMap tQ, tO, tK, tV;
    FR_TRY(wg::tile_map(k->node, "Q", &tQ, s.q16, p.batch, p.Tq, p.D, kKeys));
    FR_TRY(wg::tile_map(k->node, "dO", &tO, s.do16, p.batch, p.Tq, p.Dv, kKeys));
    FR_TRY(wg::tile_map(k->node, "K", &tK, s.k16, p.kv_batch, p.Tk, p.D, dq_ws_bn<DP>()));
    FR_TRY(wg::tile_map(k->node, "V", &tV, s.v16, p.kv_batch, p.Tk, p.Dv, dq_ws_bn<DP>()));
    const int64_t blocks = (int64_t)((p.Tq + kKeys - 1) / kKeys) * p.batch;
    dq_ws<DP, X><<<grid_of(blocks), kWsThreads, smem, k->cu->stream>>>(tQ, tO, tK, tV, LSE, s.delta, dQ, p, mk);
    return fr_cuda_check_launch(k->node, "AttentionGrad(dQ, wgmma, producer warpgroup)");
}

template <int DP, bool X> fr_status bwd_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s,
                                               float *dQ, float *dK, float *dV, const float *LSE)
{
    if constexpr (DP <= 128) {
        if (dK || dV) FR_TRY((dkdv_ws_launch<DP, X, 3>(k, p, mk, s, dK, dV, LSE)));
    } else { /* dK and dV accumulators together would spill: one pass each */
        if (dV) FR_TRY((dkdv_ws_launch<DP, X, 1>(k, p, mk, s, dK, dV, LSE)));
        if (dK) FR_TRY((dkdv_ws_launch<DP, X, 2>(k, p, mk, s, dK, dV, LSE)));
    }
    if (dQ) FR_TRY((dq_ws_launch<DP, X>(k, p, mk, s, dQ, LSE)));
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
    switch (wg::padded_dim(p)) {
    case 64: return bwd_dp<64>(k, p, mk, s, dQ, dK, dV, LSE);
    case 128: return bwd_dp<128>(k, p, mk, s, dQ, dK, dV, LSE);
    default: return bwd_dp<256>(k, p, mk, s, dQ, dK, dV, LSE);
    }
}

} /* namespace fr_attn */
