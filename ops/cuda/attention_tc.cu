/* Flash attention forward on bf16 tensor cores (precision bf16; D, Dv multiples of 8 up to 256;
 * 16-byte aligned operands; dispatched from attention.cu), FlashAttention-2 style: mma.sync
 * m16n8k16 bf16 with float32 accumulation, online softmax in registers, no [T, T] tile in
 * memory. K and V are first rounded to bf16 into scratch (round-to-nearest-even, one pass), so
 * the tiles every block streams are half the bytes and go straight to shared memory with
 * cp.async (double buffered, rows padded by 16 bytes: conflict-free ldmatrix). The kernels are
 * templated on DP, the head dim padded to 64, 128 or 256 (columns past D or Dv load as zeros and
 * add nothing), so D 80 runs the 128 kernel and D 192 the 256 one.
 * A block per (128 query rows, Q batch index): 4 warps of 32 rows or 8 warps of 16 (fwd_rm), key
 * tiles of 32 or 64; the heaviest (last) query blocks first. Masks (attention_mma.cuh): key tiles past the causal
 * diagonal, before the sliding window, or (seg_form padded/packed) outside the block's segments
 * are never loaded; tiles that cross a bound are masked per element; softcap, segment ids and an
 * additive mask tensor run in a second instantiation (X) so plain causal attention pays for none
 * of them. A row that sees no key gives O = 0, LSE = -inf. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/cuda_util.cuh"


namespace fr_attn {
namespace {

using namespace mma;

/* float32 -> bf16, 4 at a time (n4 = elements / 4; 16-byte aligned input) */
__global__ void to_bf16_kernel(const float4 *__restrict__ x, uint2 *__restrict__ y, int64_t n4)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        y[i] = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
}

constexpr int kFwdBM = 128;

/* Query row tiles of 16 per warp: two (4 warps; the K and V fragments each ldmatrix brings
 * serve both, halving the shared-memory reads per MMA, as FlashAttention-2 does) at a padded
 * head dim of 128 without the extras (H200, B8 H8 T2048 causal: 136 -> 154 TFLOP/s); else one
 * (8 warps): with the extras two tiles' accumulators spill, at 256 they do not fit, and at 64
 * two tiles measured slower (140 -> 111 TFLOP/s). */
template <int DP, bool X> __host__ __device__ constexpr int fwd_rm() { return DP == 128 && !X ? 2 : 1; }
template <int DP, bool X> __host__ __device__ constexpr int fwd_threads() { return 32 * kFwdBM / (16 * fwd_rm<DP, X>()); }
/* keys per tile: 32 at a padded head dim of 128 with two row tiles (their scores and O fit the
 * registers then), else 64 */
template <int DP, bool X> __host__ __device__ constexpr int fwd_bn() { return DP == 128 && fwd_rm<DP, X>() == 2 ? 32 : 64; }
template <int DP, bool X> constexpr size_t fwd_smem()
{
    return (size_t)(kFwdBM + 4 * fwd_bn<DP, X>()) * (DP + 8) * sizeof(bf16) + 2 * fwd_bn<DP, X>() * sizeof(int64_t);
}
/* blocks per SM: two of 4 warps, or of 8 at DP 64; one of 8 warps past that */
template <int DP, bool X> constexpr int fwd_minb() { return fwd_rm<DP, X>() == 2 || DP <= 64 ? 2 : 1; }

template <int DP, bool X>
__global__ void __launch_bounds__(fwd_threads<DP, X>(), fwd_minb<DP, X>())
    fwd_tc(const float *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V, float *__restrict__ O,
           float *__restrict__ LSE, Prob p, Masks mk)
{
    constexpr int BM = kFwdBM, BN = fwd_bn<DP, X>(), LD = DP + 8, NT = fwd_threads<DP, X>(), RM = fwd_rm<DP, X>();
    constexpr int WR = 16 * RM; /* rows per warp */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw), *sK = sQ + BM * LD, *sV = sK + 2 * BN * LD;
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + 2 * BN * LD); /* the key tiles' segment ids */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const float *Qb = Q + b * p.Tq * p.D;
    const bf16 *Kb = K + kvb * p.Tk * p.D, *Vb = V + kvb * p.Tk * p.Dv;
    int j0, j1; /* the key tiles this block reads */
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);

    auto load_kv = [&](int j, int buf) {
        load_rows<BN, DP, NT>(sK + buf * BN * LD, Kb, p.D, 0, j * BN, p.Tk, tid);
        load_rows<BN, DP, NT>(sV + buf * BN * LD, Vb, p.Dv, 0, j * BN, p.Tk, tid);
        cp_async_commit();
        if (X && mk.sk) load_key_ids<NT>(p, mk, srow, j * BN, BN, sKid + buf * BN, tid);
    };
    if (j0 < j1) load_kv(j0, j0 & 1);
    for (int i = tid; i < BM * DP / 4; i += NT) { /* Q: float32 -> bf16 into shared memory */
        const int r = i / (DP / 4), c4 = i % (DP / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < p.Tq && c4 * 4 < p.D) v = __ldg(reinterpret_cast<const float4 *>(Qb + (int64_t)(q0 + r) * p.D) + c4);
        *reinterpret_cast<uint2 *>(sQ + r * LD + c4 * 4) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }

    /* this thread's rows: h = 2 r + (0 | 1) is row wq0 + 16 r + g (+ 8) */
    float o[RM][DP / 8][4];
#pragma unroll
    for (int r = 0; r < RM; r++) zero<DP / 8>(o[r]);
    float m[2 * RM], l[2 * RM];
    int row[2 * RM];
    int64_t qid[2 * RM];
    const int wq0 = q0 + warp * WR; /* this warp's first query row */
#pragma unroll
    for (int h = 0; h < 2 * RM; h++) {
        m[h] = -INFINITY, l[h] = 0.f;
        row[h] = wq0 + (h >> 1) * 16 + g + (h & 1) * 8;
        qid[h] = X && mk.sq && row[h] < p.Tq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + row[h]) : 1;
    }
    const int64_t moff = X && mk.m ? mask_off(p, mk, b) : 0;
    const bf16 *qw = sQ + warp * WR * LD;

    for (int j = j0; j < j1; j++) {
        next_tile(j, j1, load_kv);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + WR - 1) continue; /* the whole tile is above this warp's diagonal */
        if (mk.window > 0 && (int64_t)wq0 - (k0 + BN - 1) >= mk.window) continue; /* before its window */
        const bf16 *kt = sK + (j & 1) * BN * LD, *vt = sV + (j & 1) * BN * LD;
        float s[RM][BN / 8][4];
#pragma unroll
        for (int r = 0; r < RM; r++) zero<BN / 8>(s[r]);
        mma_abt<DP / 16, BN / 8, RM>(s, qw, LD, kt, LD, lane);

        const int64_t *kid = sKid + (j & 1) * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + WR > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + WR - 1 - k0 >= mk.window);
        float mx[2 * RM];
#pragma unroll
        for (int h = 0; h < 2 * RM; h++) mx[h] = -INFINITY;
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = 2 * r + (e >> 1), key = k0 + t * 8 + 2 * c + (e & 1), i = row[h];
                    float v = -INFINITY;
                    if (!edge || !outside(p, mk, i, key))
                        v = score2<X>(p, mk, s[r][t][e], i, key, moff, X && mk.sk ? kid[key - k0] : 0, qid[h], nullptr);
                    s[r][t][e] = v;
                    mx[h] = fmaxf(mx[h], v);
                }
        float alpha[2 * RM];
#pragma unroll
        for (int h = 0; h < 2 * RM; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h]);
            const float base = mn == -INFINITY ? 0.f : mn; /* a row with no key yet */
            alpha[h] = ex2(m[h] - base);
            m[h] = mn;
            mx[h] = base;
            l[h] *= alpha[h];
        }
        uint32_t pa[RM][BN / 16][4];
#pragma unroll
        for (int r = 0; r < RM; r++) {
#pragma unroll
            for (int t = 0; t < BN / 8; t++) {
                s[r][t][0] = ex2(s[r][t][0] - mx[2 * r]);
                s[r][t][1] = ex2(s[r][t][1] - mx[2 * r]);
                s[r][t][2] = ex2(s[r][t][2] - mx[2 * r + 1]);
                s[r][t][3] = ex2(s[r][t][3] - mx[2 * r + 1]);
                l[2 * r] += s[r][t][0] + s[r][t][1];
                l[2 * r + 1] += s[r][t][2] + s[r][t][3];
            }
#pragma unroll
            for (int t = 0; t < DP / 8; t++) {
                o[r][t][0] *= alpha[2 * r];
                o[r][t][1] *= alpha[2 * r];
                o[r][t][2] *= alpha[2 * r + 1];
                o[r][t][3] *= alpha[2 * r + 1];
            }
            acc_to_a<BN / 8>(s[r], pa[r]);
        }
        mma_pb<BN / 16, DP / 8, RM>(o, pa, vt, LD, lane);
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2 * RM; h++) {
        const int r = h >> 1, e0 = 2 * (h & 1);
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
                    make_float2(o[r][t][e0] * inv, o[r][t][e0 + 1] * inv);
        if (LSE && c == 0) LSE[b * p.Tq + row[h]] = none ? -INFINITY : m[h] * kLn2 + logf(l[h]);
    }
}

template <int DP, bool X>
fr_status fwd_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K,
                     const bf16 *V, float *O, float *L)
{
    const size_t smem = fwd_smem<DP, X>();
    FR_TRY(set_smem(k->node, fwd_tc<DP, X>, smem));
    const int64_t blocks = (int64_t)((p.Tq + kFwdBM - 1) / kFwdBM) * p.batch;
    fwd_tc<DP, X><<<grid_of(blocks), fwd_threads<DP, X>(), smem, k->cu->stream>>>(Q, K, V, O, L, p, mk);
    return fr_cuda_check_launch(k->node, "Attention(tensor cores)");
}

template <int DP>
fr_status fwd_dp(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K, const bf16 *V,
                 float *O, float *L)
{
    return mk.extra() ? fwd_launch<DP, true>(k, p, mk, Q, K, V, O, L) : fwd_launch<DP, false>(k, p, mk, Q, K, V, O, L);
}

} /* namespace */

fr_status tc_to_bf16(const fr_cuda_kctx *k, const float *x, bf16 *y, int64_t n)
{
    if (n == 0) return FR_OK;
    const int64_t n4 = n / 4; /* D is a multiple of 8 on this path */
    const int64_t blocks = (n4 + 255) / 256;
    to_bf16_kernel<<<grid_of(blocks > 65536 ? 65536 : blocks), 256, 0, k->cu->stream>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<uint2 *>(y), n4);
    return fr_cuda_check_launch(k->node, "Attention(to bf16)");
}

fr_status tc_fwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K, const bf16 *V,
                 float *O, float *L)
{
    if (wg_takes(k, p)) {
        k->cu->attn_runs_wgmma++;
        return wg_fwd(k, p, mk, Q, K, V, O, L);
    }
    const int w = p.D > p.Dv ? p.D : p.Dv;
    if (w <= 64) return fwd_dp<64>(k, p, mk, Q, K, V, O, L);
    if (w <= 128) return fwd_dp<128>(k, p, mk, Q, K, V, O, L);
    return fwd_dp<256>(k, p, mk, Q, K, V, O, L);
}

} /* namespace fr_attn */
