/* Flash attention backward on bf16 tensor cores (the forward's conditions and masks, see
 * attention_tc.cu), FlashAttention-2 style with no atomics, so runs are bit-identical:
 *  - dK, dV: one block per (16 keys per warp, 4 or 8 warps; K/V batch index) (the keys are the
 *    MMA rows: S^T = K Q^T, dP^T = V dO^T), walking the query tiles of every Q batch index that
 *    reads this K/V in increasing order: dV += P^T dO, dK += dS^T Q, dK *= scale at the end.
 *    Past a padded head dim of 128 the dK and dV accumulators do not fit one thread's registers
 *    together: two passes then, one for dV and one for dK, each recomputing S^T.
 *  - dQ: one block per (16 query rows per warp, 4 or 8 warps; Q batch index), walking the key
 *    tiles: dQ = scale dS K with S and dP recomputed.
 * P = exp2(s log2e - LSE log2e) (0 where masked and on rows that saw no key: LSE = -inf);
 * dS = P (dP - Delta), times 1 - tanh^2 under softcap; P and dS rounded to bf16 as GEMM
 * operands. Tiles outside the causal / window / segment bounds are skipped as in the forward. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/cuda_util.cuh"


namespace fr_attn {
namespace {

using namespace mma;


/* ---------------------------------------------------------------- dQ ---- */

/* dQ tiles: 64 query rows (4 warps) by 64 keys; at DP 256, 128 rows (8 warps) by 32 keys, so
 * eight warps share an SM rather than four (shared memory holds one block either way) */
template <int DP> __host__ __device__ constexpr int dq_warps() { return DP >= 256 ? 8 : 4; }
template <int DP> __host__ __device__ constexpr int dq_bn() { return DP >= 256 ? 32 : 64; }
template <int DP> constexpr size_t dq_smem()
{
    return (size_t)(2 * 16 * dq_warps<DP>() + 4 * dq_bn<DP>()) * (DP + 8) * sizeof(bf16) +
           2 * dq_bn<DP>() * sizeof(int64_t);
}
/* blocks per SM: 4 at DP 64 (H100, 125M shape: 2 -> 68, 3 -> 80, 4 -> 86 TFLOP/s), 2 at 128;
 * dK, dV at DP 64 three (four spilled a few hundred bytes once the masks were in) */
template <int DP> constexpr int bwd_minb() { return DP <= 64 ? 4 : DP <= 128 ? 2 : 1; }
template <int DP> constexpr int dkdv_minb() { return DP <= 64 ? 3 : DP <= 128 ? 2 : 1; }

template <int DP, bool X>
__global__ void __launch_bounds__(32 * dq_warps<DP>(), bwd_minb<DP>())
    dq_tc(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
          const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
          float *__restrict__ dQ, Prob p, Masks mk)
{
    constexpr int BM = 16 * dq_warps<DP>(), BN = dq_bn<DP>(), LD = DP + 8, NT = 32 * dq_warps<DP>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw), *sdO = sQ + BM * LD, *sK = sdO + BM * LD, *sV = sK + 2 * BN * LD;
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + 2 * BN * LD); /* the key tiles' segment ids */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const bf16 *Kb = K + kvb * p.Tk * p.D, *Vb = V + kvb * p.Tk * p.Dv;
    int j0, j1; /* the key tiles this block reads */
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);

    load_rows<BM, DP, NT>(sQ, Q, p.D, b * p.Tq, q0, p.Tq, tid);
    load_rows<BM, DP, NT>(sdO, dO, p.Dv, b * p.Tq, q0, p.Tq, tid);
    auto load_kv = [&](int j, int buf) {
        load_rows<BN, DP, NT>(sK + buf * BN * LD, Kb, p.D, 0, j * BN, p.Tk, tid);
        load_rows<BN, DP, NT>(sV + buf * BN * LD, Vb, p.Dv, 0, j * BN, p.Tk, tid);
        cp_async_commit();
        if (X && mk.sk) load_key_ids<NT>(p, mk, srow, j * BN, BN, sKid + buf * BN, tid);
    };
    if (j0 < j1)
        load_kv(j0, j0 & 1);
    else
        cp_async_commit();

    const int wq0 = q0 + warp * 16;
    const int row[2] = {wq0 + g, wq0 + g + 8};
    float lse2[2], dl[2];
    int64_t qid[2] = {1, 1}, moff = 0;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool ok = row[h] < p.Tq;
        lse2[h] = ok ? lse2_of(LSE[b * p.Tq + row[h]]) : INFINITY;
        dl[h] = ok ? Delta[b * p.Tq + row[h]] : 0.f;
        if (X && mk.sq && ok) qid[h] = seg_at(mk.sq, mk.seg64, srow * p.Tq + row[h]);
    }
    if (X && mk.m) moff = mask_off(p, mk, b);
    float dq[DP / 8][4];
    zero<DP / 8>(dq);
    const bf16 *qw = sQ + warp * 16 * LD, *dow = sdO + warp * 16 * LD;

    for (int j = j0; j < j1; j++) {
        next_tile(j, j1, load_kv);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + 15) continue;
        if (mk.window > 0 && (int64_t)wq0 - (k0 + BN - 1) >= mk.window) continue;
        const bf16 *kt = sK + (j & 1) * BN * LD, *vt = sV + (j & 1) * BN * LD;
        float s[BN / 8][4], dp[BN / 8][4];
        zero<BN / 8>(s);
        zero<BN / 8>(dp);
        mma_abt<DP / 16, BN / 8, 1>(&s, qw, LD, kt, LD, lane);
        mma_abt<DP / 16, BN / 8, 1>(&dp, dow, LD, vt, LD, lane);
        const int64_t *kid = sKid + (j & 1) * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + 16 > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + 15 - k0 >= mk.window);
#pragma unroll
        for (int t = 0; t < BN / 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1, key = k0 + t * 8 + 2 * c + (e & 1);
                float pv = 0.f, dcap = 1.f;
                if (!edge || !outside(p, mk, row[h], key))
                    pv = ex2(score2<X>(p, mk, s[t][e], row[h], key, moff, X && mk.sk ? kid[key - k0] : 0, qid[h],
                                       &dcap) -
                             lse2[h]);
                s[t][e] = pv * (dp[t][e] - dl[h]) * dcap; /* dS (through the softcap) */
            }
        uint32_t da[BN / 16][4];
        acc_to_a<BN / 8>(s, da);
        mma_pb<BN / 16, DP / 8, 1>(&dq, &da, kt, LD, lane);
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
                    make_float2(dq[t][2 * h] * p.scale, dq[t][2 * h + 1] * p.scale);
    }
}

/* ---------------------------------------------------------------- dK, dV ---- */

/* keys per block (16 per warp): 64 (4 warps) up to DP 128 (two or three blocks per SM; 8 warps
 * at DP 128 measured 3% slower), 128 (8 warps) at DP 256, where shared memory holds one block:
 * eight warps per SM rather than four (H200, B8 H8 T2048 causal: 66 -> 95 TFLOP/s with dQ's
 * eight warps); query rows per tile 32 */
template <int DP> __host__ __device__ constexpr int kv_warps() { return DP >= 256 ? 8 : 4; }
constexpr int kKvBM = 32;
template <int DP> constexpr size_t dkdv_smem()
{
    return (size_t)(2 * 16 * kv_warps<DP>() + 4 * kKvBM) * (DP + 8) * sizeof(bf16) + 4 * kKvBM * sizeof(float);
}

/* WANT: 1 dV, 2 dK, 3 both. */
template <int DP, bool X, int WANT>
__global__ void __launch_bounds__(32 * kv_warps<DP>(), dkdv_minb<DP>())
    dkdv_tc(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
            const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
            float *__restrict__ dK, float *__restrict__ dV, Prob p, Masks mk)
{
    constexpr int BN = 16 * kv_warps<DP>(), BM = kKvBM, LD = DP + 8, NT = 32 * kv_warps<DP>();
    constexpr bool WK = (WANT & 2) != 0, WV = (WANT & 1) != 0;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw), *sV = sK + BN * LD, *sQ = sV + BN * LD, *sdO = sQ + 2 * BM * LD;
    float *sL = reinterpret_cast<float *>(sdO + 2 * BM * LD), *sDl = sL + 2 * BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * BN; /* first key blocks (most queries) first */
    const int n1 = min(n0 + BN, p.Tk);
    const bf16 *Kb = K + kvb * p.Tk * p.D, *Vb = V + kvb * p.Tk * p.Dv;
    const QWalk<X> walk(p, mk, kvb, n0, n1, BM);

    load_rows<BN, DP, NT>(sK, Kb, p.D, 0, n0, p.Tk, tid);
    load_rows<BN, DP, NT>(sV, Vb, p.Dv, 0, n0, p.Tk, tid);
    auto load_q = [&](int64_t qb, int it, int buf) {
        const int t0 = it * BM;
        load_rows<BM, DP, NT>(sQ + buf * BM * LD, Q, p.D, qb * p.Tq, t0, p.Tq, tid);
        load_rows<BM, DP, NT>(sdO + buf * BM * LD, dO, p.Dv, qb * p.Tq, t0, p.Tq, tid);
        for (int i = tid; i < BM; i += NT) {
            const bool ok = t0 + i < p.Tq;
            const int64_t off = ok ? qb * p.Tq + t0 + i : 0;
            cp_async4(sL + buf * BM + i, LSE + off, ok);
            cp_async4(sDl + buf * BM + i, Delta + off, ok);
        }
        cp_async_commit();
    };

    float dk[WK ? DP / 8 : 1][4], dv[WV ? DP / 8 : 1][4];
    zero<WK ? DP / 8 : 1>(dk);
    zero<WV ? DP / 8 : 1>(dv);
    const int wk0 = n0 + warp * 16; /* this warp's first key */
    const int key[2] = {wk0 + g, wk0 + g + 8};
    const bf16 *kw = sK + warp * 16 * LD, *vw = sV + warp * 16 * LD;

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
        cp_async_wait_all();
        __syncthreads(); /* this tile landed; every warp is done with the other buffer */
        if (nb < p.batch) load_q(nb, ni, buf ^ 1);
        walk.enter(cb, key, &mb, &moff, kid);
        const int qt0 = ci * BM;
        const bool skip = (p.causal && qt0 + BM - 1 < wk0) || /* every query before this warp's keys */
                          (mk.window > 0 && (int64_t)qt0 - (wk0 + 15) >= mk.window); /* or past its window */
        if (!skip) {
            const bf16 *qt = sQ + buf * BM * LD, *dot = sdO + buf * BM * LD;
            const float *lt = sL + buf * BM, *dlt = sDl + buf * BM;
            float s[BM / 8][4], dp[BM / 8][4];
            zero<BM / 8>(s);
            mma_abt<DP / 16, BM / 8, 1>(&s, kw, LD, qt, LD, lane);
            if (WK) {
                zero<BM / 8>(dp);
                mma_abt<DP / 16, BM / 8, 1>(&dp, vw, LD, dot, LD, lane);
            }
            const bool edge = wk0 + 16 > p.Tk || qt0 + BM > p.Tq || (p.causal && qt0 < wk0 + 15) ||
                              (mk.window > 0 && (int64_t)qt0 + BM - 1 - wk0 >= mk.window);
            const int64_t srow = X && mk.sk ? cb / mk.seg_per_row : 0;
#pragma unroll
            for (int t = 0; t < BM / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = t * 8 + 2 * c + (e & 1), q = qt0 + qi, k = key[e >> 1];
                    float pv = 0.f, dcap = 1.f;
                    if (!edge || !outside(p, mk, q, k)) {
                        const int64_t qid = X && mk.sq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + q) : 1;
                        pv = ex2(score2<X>(p, mk, s[t][e], q, k, moff, kid[e >> 1], qid, &dcap) - lse2_of(lt[qi]));
                    }
                    s[t][e] = pv;
                    if (WK) dp[t][e] = pv * (dp[t][e] - dlt[qi]) * dcap; /* dS^T */
                }
            uint32_t pa[BM / 16][4];
            if constexpr (WV) {
                acc_to_a<BM / 8>(s, pa);
                mma_pb<BM / 16, DP / 8, 1>(&dv, &pa, dot, LD, lane);
            }
            if constexpr (WK) {
                acc_to_a<BM / 8>(dp, pa);
                mma_pb<BM / 16, DP / 8, 1>(&dk, &pa, qt, LD, lane);
            }
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
                    make_float2(dk[WK ? t : 0][2 * h] * p.scale, dk[WK ? t : 0][2 * h + 1] * p.scale);
            if (WV && dV && t * 8 < p.Dv)
                *reinterpret_cast<float2 *>(dV + (kvb * p.Tk + key[h]) * p.Dv + t * 8 + 2 * c) =
                    make_float2(dv[WV ? t : 0][2 * h], dv[WV ? t : 0][2 * h + 1]);
        }
    }
}

/* ---------------------------------------------------------------- launchers ---- */

template <int DP, bool X, int WANT>
fr_status dkdv_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dK, float *dV,
                      const float *LSE)
{
    const size_t smem = dkdv_smem<DP>();
    FR_TRY(set_smem(k->node, dkdv_tc<DP, X, WANT>, smem));
    constexpr int BN = 16 * kv_warps<DP>();
    const int64_t blocks = (int64_t)((p.Tk + BN - 1) / BN) * p.kv_batch;
    dkdv_tc<DP, X, WANT><<<grid_of(blocks), 32 * kv_warps<DP>(), smem, k->cu->stream>>>(s.q16, s.k16, s.v16, s.do16, LSE,
                                                                               s.delta, dK, dV, p, mk);
    return fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, tensor cores)");
}

template <int DP, bool X>
fr_status bwd_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ, float *dK,
                     float *dV, const float *LSE)
{
    if constexpr (DP <= 128) {
        if (dK || dV) FR_TRY((dkdv_launch<DP, X, 3>(k, p, mk, s, dK, dV, LSE)));
    } else { /* dK and dV accumulators together would spill: one pass each */
        if (dV) FR_TRY((dkdv_launch<DP, X, 1>(k, p, mk, s, dK, dV, LSE)));
        if (dK) FR_TRY((dkdv_launch<DP, X, 2>(k, p, mk, s, dK, dV, LSE)));
    }
    if (dQ) {
        const size_t smem = dq_smem<DP>();
        FR_TRY(set_smem(k->node, dq_tc<DP, X>, smem));
        constexpr int BM = 16 * dq_warps<DP>();
        const int64_t blocks = (int64_t)((p.Tq + BM - 1) / BM) * p.batch;
        dq_tc<DP, X><<<grid_of(blocks), 32 * dq_warps<DP>(), smem, k->cu->stream>>>(s.q16, s.k16, s.v16, s.do16, LSE, s.delta,
                                                                           dQ, p, mk);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, tensor cores)"));
    }
    return FR_OK;
}

template <int DP>
fr_status bwd_dp(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ, float *dK,
                 float *dV, const float *LSE)
{
    return mk.extra() ? bwd_launch<DP, true>(k, p, mk, s, dQ, dK, dV, LSE)
                      : bwd_launch<DP, false>(k, p, mk, s, dQ, dK, dV, LSE);
}

} /* namespace */

fr_status tc_bwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ, float *dK,
                 float *dV, const float *LSE)
{
    if (wg_takes(k, p)) {
        k->cu->attn_runs_wgmma++;
        return wg_bwd(k, p, mk, s, dQ, dK, dV, LSE);
    }
    const int w = p.D > p.Dv ? p.D : p.Dv;
    if (w <= 64) return bwd_dp<64>(k, p, mk, s, dQ, dK, dV, LSE);
    if (w <= 128) return bwd_dp<128>(k, p, mk, s, dQ, dK, dV, LSE);
    return bwd_dp<256>(k, p, mk, s, dQ, dK, dV, LSE);
}

} /* namespace fr_attn */
