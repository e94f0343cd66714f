/* Flash attention on bf16 tensor cores (precision bf16, D == Dv in {64, 128}, 16-byte aligned
 * operands; dispatched from attention.cu): mma.sync m16n8k16 bf16 with float32 accumulation.
 * K and V (and in the backward Q and dO too) are first rounded to bf16 into scratch
 * (round-to-nearest-even, one pass), so the tiles that every block streams are half the bytes and
 * go straight to shared memory with cp.async (double buffered, rows padded by 16 bytes:
 * conflict-free ldmatrix).
 * Forward: a block of 8 warps per (128 query rows, Q batch index), 16 rows per warp, key tiles
 * of 64; online softmax in the log2 domain (running max m, running sum l), P rounded to bf16 in
 * registers for P V, O = acc / l and LSE = m ln2 + ln l at the end. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace fr_attn {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/* ---------------------------------------------------------------- PTX helpers ---- */

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
/* c += a b: a 16x16 bf16 (row), b 16x8 bf16 (col), c 16x8 float32 */
__device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two floats -> bf16x2 (round to nearest even), lo in the low half */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Fragment addressing (lane l of a warp; X row-major with leading dimension ld):
 *  A operand, rows r0.., k0..: ldsm_x4(X + (r0 + a_row(l)) * ld + k0 + a_col(l))
 *  B operand with B[k][n] = X[n][k] (two n-tiles of 8): ldsm_x4(X + (n0 + bn_row(l)) * ld + k0 + bn_col(l))
 *  B operand with B[k][n] = X[k][n] (two n-tiles of 8): ldsm_x4_t(X + (k0 + a_row(l)) * ld + n0 + a_col(l)) */
__device__ __forceinline__ int a_row(int l) { return (l & 7) + ((l >> 3) & 1) * 8; }
__device__ __forceinline__ int a_col(int l) { return (l >> 4) * 8; }
__device__ __forceinline__ int bn_row(int l) { return (l & 7) + (l >> 4) * 8; }
__device__ __forceinline__ int bn_col(int l) { return ((l >> 3) & 1) * 8; }

/* acc[16 x 8*NT] += A (16 x 16*KT, fragments from shared rows) . X^T, X rows n (B[k][n] = X[n][k]) */
template <int KT, int NT>
__device__ __forceinline__ void mma_abt(float (*acc)[4], const bf16 *A, int lda, const bf16 *X, int ldx, int lane)
{
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a[4];
        ldsm_x4(a, A + a_row(lane) * lda + kk * 16 + a_col(lane));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4(b, X + (np * 16 + bn_row(lane)) * ldx + kk * 16 + bn_col(lane));
            mma_bf16(acc[2 * np], a, b[0], b[1]);
            mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

/* acc[16 x 8*NT] += P (register fragments, 16 x 16*KT) . X, X rows k (B[k][n] = X[k][n]) */
template <int KT, int NT>
__device__ __forceinline__ void mma_pb(float (*acc)[4], const uint32_t (*pa)[4], const bf16 *X, int ldx, int lane)
{
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_t(b, X + (kk * 16 + a_row(lane)) * ldx + np * 16 + a_col(lane));
            mma_bf16(acc[2 * np], pa[kk], b[0], b[1]);
            mma_bf16(acc[2 * np + 1], pa[kk], b[2], b[3]);
        }
}

/* Accumulator tiles (16 x 8 each, NT of them) as bf16 A fragments of a 16 x 8*NT operand. */
template <int NT> __device__ __forceinline__ void acc_to_a(const float (*s)[4], uint32_t (*pa)[4])
{
#pragma unroll
    for (int t = 0; t < NT; t++) {
        pa[t >> 1][(t & 1) * 2 + 0] = pack_bf16(s[t][0], s[t][1]);
        pa[t >> 1][(t & 1) * 2 + 1] = pack_bf16(s[t][2], s[t][3]);
    }
}

/* Rows r0 .. r0 + R - 1 of two bf16 [*, D] matrices a and b (row base + r0 + r; rows from `rows`
 * on zero-filled) -> shared da, db with rows padded to D + 8, by cp.async (not committed). */
template <int R, int D, int NT>
__device__ __forceinline__ void load_rows2(bf16 *da, bf16 *db, const bf16 *a, const bf16 *b, int64_t base, int r0,
                                           int rows, int tid)
{
    constexpr int LD = D + 8;
    for (int i = tid; i < R * D / 8; i += NT) {
        const int r = i / (D / 8), ch = i % (D / 8);
        const bool ok = r0 + r < rows;
        const int64_t off = ok ? (base + (r0 + r)) * D + ch * 8 : 0;
        cp_async16(da + r * LD + ch * 8, a + off, ok);
        cp_async16(db + r * LD + ch * 8, b + off, ok);
    }
}

/* Double buffering: waits for tile j (and for every warp to be done with tile j - 1's buffer),
 * then starts tile j + 1 into that buffer with load(j + 1, buffer). */
template <class L> __device__ __forceinline__ void next_tile(int j, int n, L &load)
{
    cp_async_wait_all();
    __syncthreads();
    if (j + 1 < n) load(j + 1, (j + 1) & 1);
}

/* ---------------------------------------------------------------- preprocessing ---- */

/* float32 -> bf16, 4 at a time (n4 = elements / 4; 16-byte aligned input) */
__global__ void to_bf16_kernel(const float4 *__restrict__ x, uint2 *__restrict__ y, int64_t n4)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        y[i] = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
}

/* ---------------------------------------------------------------- tensor cores: forward ---- */

constexpr int kFwdBM = 128, kFwdBN = 64, kFwdThreads = 256;

template <int D> constexpr size_t fwd_tc_smem() { return (size_t)(kFwdBM + 4 * kFwdBN) * (D + 8) * sizeof(bf16); }

/* One block per (128 query rows, Q batch index); heaviest (last) query blocks first. */
template <int D, int MINB>
__global__ void __launch_bounds__(kFwdThreads, MINB)
    fwd_tc(const float *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V, float *__restrict__ O,
           float *__restrict__ LSE, Prob p)
{
    constexpr int BM = kFwdBM, BN = kFwdBN, LD = D + 8, NT = kFwdThreads;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw), *sK = sQ + BM * LD, *sV = sK + 2 * BN * LD;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const float *Qb = Q + b * p.Tq * D;
    const bf16 *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    const int n_end = key_tiles(p, q0, BM, BN);

    auto load_kv = [&](int j, int buf) {
        load_rows2<BN, D, NT>(sK + buf * BN * LD, sV + buf * BN * LD, Kb, Vb, 0, j * BN, p.Tk, tid);
        cp_async_commit();
    };
    load_kv(0, 0);
    for (int i = tid; i < BM * D / 4; i += NT) { /* Q: float32 -> bf16 into shared memory */
        const int r = i / (D / 4), c4 = i % (D / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < p.Tq) v = __ldg(reinterpret_cast<const float4 *>(Qb + (int64_t)(q0 + r) * D) + c4);
        *reinterpret_cast<uint2 *>(sQ + r * LD + c4 * 4) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }

    float o[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int wq0 = q0 + warp * 16; /* this warp's first query row */
    const int row[2] = {wq0 + g, wq0 + g + 8};
    const float cl = p.scale * kLog2e;
    const bf16 *qw = sQ + warp * 16 * LD;

    for (int j = 0; j < n_end; j++) {
        next_tile(j, n_end, load_kv);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + 15) continue; /* the whole tile is above this warp's diagonal */
        const bf16 *kt = sK + (j & 1) * BN * LD, *vt = sV + (j & 1) * BN * LD;
        float s[BN / 8][4];
#pragma unroll
        for (int t = 0; t < BN / 8; t++) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
        mma_abt<D / 16, BN / 8>(s, qw, LD, kt, LD, lane);

        const bool edge = k0 + BN > p.Tk || (p.causal && k0 + BN - 1 > wq0);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int t = 0; t < BN / 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[t][e] * cl;
                if (edge) {
                    const int key = k0 + t * 8 + 2 * c + (e & 1);
                    if (key >= p.Tk || (p.causal && key > row[e >> 1])) v = -INFINITY;
                }
                s[t][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
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
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            s[t][0] = ex2(s[t][0] - mx[0]);
            s[t][1] = ex2(s[t][1] - mx[0]);
            s[t][2] = ex2(s[t][2] - mx[1]);
            s[t][3] = ex2(s[t][3] - mx[1]);
            l[0] += s[t][0] + s[t][1];
            l[1] += s[t][2] + s[t][3];
        }
#pragma unroll
        for (int t = 0; t < D / 8; t++) {
            o[t][0] *= alpha[0];
            o[t][1] *= alpha[0];
            o[t][2] *= alpha[1];
            o[t][3] *= alpha[1];
        }
        uint32_t pa[BN / 16][4];
        acc_to_a<BN / 8>(s, pa);
        mma_pb<BN / 16, D / 8>(o, pa, vt, LD, lane);
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (row[h] >= p.Tq) continue;
        const float inv = 1.f / l[h];
        float *orow = O + (b * p.Tq + row[h]) * D;
#pragma unroll
        for (int t = 0; t < D / 8; t++)
            *reinterpret_cast<float2 *>(orow + t * 8 + 2 * c) = make_float2(o[t][2 * h] * inv, o[t][2 * h + 1] * inv);
        if (LSE && c == 0) LSE[b * p.Tq + row[h]] = m[h] * kLn2 + logf(l[h]);
    }
}

/* ---------------------------------------------------------------- tensor cores: dQ ---- */

constexpr int kDqBM = 64, kDqBN = 64, kBwdThreads = 128;
/* blocks per SM of the backward kernels: D = 64 runs 4 (H100, 125M shape: 2 -> 68, 3 -> 80,
 * 4 -> 86 TFLOP/s, a few spilled bytes in dK/dV included), D = 128 two */
template <int D> __host__ __device__ constexpr int bwd_minb() { return D <= 64 ? 4 : 2; }

template <int D> constexpr size_t dq_tc_smem() { return (size_t)(2 * kDqBM + 4 * kDqBN) * (D + 8) * sizeof(bf16); }

/* One block per (64 query rows, Q batch index), 16 rows per warp: dQ = scale dS K over the key
 * tiles, with S = Q K^T and dP = dO V^T recomputed. */
template <int D>
__global__ void __launch_bounds__(kBwdThreads, bwd_minb<D>())
    dq_tc(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
          const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
          float *__restrict__ dQ, Prob p)
{
    constexpr int BM = kDqBM, BN = kDqBN, LD = D + 8, NT = kBwdThreads;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sQ = reinterpret_cast<bf16 *>(smem_raw), *sdO = sQ + BM * LD, *sK = sdO + BM * LD, *sV = sK + 2 * BN * LD;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    const bf16 *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    const int n_end = key_tiles(p, q0, BM, BN);

    load_rows2<BM, D, NT>(sQ, sdO, Q, dO, b * p.Tq, q0, p.Tq, tid);
    auto load_kv = [&](int j, int buf) {
        load_rows2<BN, D, NT>(sK + buf * BN * LD, sV + buf * BN * LD, Kb, Vb, 0, j * BN, p.Tk, tid);
        cp_async_commit();
    };
    load_kv(0, 0);

    const int wq0 = q0 + warp * 16;
    const int row[2] = {wq0 + g, wq0 + g + 8};
    float lse2[2], dl[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool ok = row[h] < p.Tq;
        lse2[h] = ok ? LSE[b * p.Tq + row[h]] * kLog2e : 0.f;
        dl[h] = ok ? Delta[b * p.Tq + row[h]] : 0.f;
    }
    float dq[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; t++) dq[t][0] = dq[t][1] = dq[t][2] = dq[t][3] = 0.f;
    const float cl = p.scale * kLog2e;
    const bf16 *qw = sQ + warp * 16 * LD, *dow = sdO + warp * 16 * LD;

    for (int j = 0; j < n_end; j++) {
        next_tile(j, n_end, load_kv);
        const int k0 = j * BN;
        if (p.causal && k0 > wq0 + 15) continue;
        const bf16 *kt = sK + (j & 1) * BN * LD, *vt = sV + (j & 1) * BN * LD;
        float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
            dp[t][0] = dp[t][1] = dp[t][2] = dp[t][3] = 0.f;
        }
        mma_abt<D / 16, BN / 8>(s, qw, LD, kt, LD, lane);
        mma_abt<D / 16, BN / 8>(dp, dow, LD, vt, LD, lane);
        const bool edge = k0 + BN > p.Tk || (p.causal && k0 + BN - 1 > wq0);
#pragma unroll
        for (int t = 0; t < BN / 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e >> 1;
                float pv = ex2(s[t][e] * cl - lse2[h]);
                if (edge) {
                    const int key = k0 + t * 8 + 2 * c + (e & 1);
                    if (key >= p.Tk || (p.causal && key > row[h])) pv = 0.f;
                }
                s[t][e] = pv * (dp[t][e] - dl[h]); /* dS */
            }
        uint32_t da[BN / 16][4];
        acc_to_a<BN / 8>(s, da);
        mma_pb<BN / 16, D / 8>(dq, da, kt, LD, lane);
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (row[h] >= p.Tq) continue;
        float *qrow = dQ + (b * p.Tq + row[h]) * D;
#pragma unroll
        for (int t = 0; t < D / 8; t++)
            *reinterpret_cast<float2 *>(qrow + t * 8 + 2 * c) =
                make_float2(dq[t][2 * h] * p.scale, dq[t][2 * h + 1] * p.scale);
    }
}

/* ---------------------------------------------------------------- tensor cores: dK, dV ---- */

constexpr int kKvBN = 64;
/* query rows per tile: 32 keeps dK, dV, S^T, dP^T in the registers of 2 (D = 128) or 4
 * (D = 64) blocks per SM */
template <int D> __host__ __device__ constexpr int kv_bm() { return 32; }
template <int D> constexpr size_t dkdv_tc_smem()
{
    return (size_t)(2 * kKvBN + 4 * kv_bm<D>()) * (D + 8) * sizeof(bf16) + 4 * kv_bm<D>() * sizeof(float);
}

/* One block per (64 keys, K/V batch index), 16 keys per warp (the keys are the MMA rows:
 * S^T = K Q^T, dP^T = V dO^T). Walks the query tiles of every Q batch index reading this
 * K/V, in increasing order: dV += P^T dO, dK += dS^T Q, then dK *= scale. */
template <int D>
__global__ void __launch_bounds__(kBwdThreads, bwd_minb<D>())
    dkdv_tc(const bf16 *__restrict__ Q, const bf16 *__restrict__ K, const bf16 *__restrict__ V,
            const bf16 *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
            float *__restrict__ dK, float *__restrict__ dV, Prob p)
{
    constexpr int BN = kKvBN, BM = kv_bm<D>(), LD = D + 8, NT = kBwdThreads;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16 *sK = reinterpret_cast<bf16 *>(smem_raw), *sV = sK + BN * LD, *sQ = sV + BN * LD, *sdO = sQ + 2 * BM * LD;
    float *sL = reinterpret_cast<float *>(sdO + 2 * BM * LD), *sDl = sL + 2 * BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * BN; /* first key blocks (most queries) first */
    const bf16 *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    const int nq = (p.Tq + BM - 1) / BM;
    const int i0 = p.causal ? n0 / BM : 0;

    load_rows2<BN, D, NT>(sK, sV, Kb, Vb, 0, n0, p.Tk, tid);
    auto load_q = [&](int64_t qb, int it, int buf) {
        const int t0 = it * BM;
        load_rows2<BM, D, NT>(sQ + buf * BM * LD, sdO + buf * BM * LD, Q, dO, qb * p.Tq, t0, p.Tq, tid);
        for (int i = tid; i < BM; i += NT) {
            const bool ok = t0 + i < p.Tq;
            const int64_t off = ok ? qb * p.Tq + t0 + i : 0;
            cp_async4(sL + buf * BM + i, LSE + off, ok);
            cp_async4(sDl + buf * BM + i, Delta + off, ok);
        }
        cp_async_commit();
    };

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int t = 0; t < D / 8; t++) {
        dk[t][0] = dk[t][1] = dk[t][2] = dk[t][3] = 0.f;
        dv[t][0] = dv[t][1] = dv[t][2] = dv[t][3] = 0.f;
    }
    const int wk0 = n0 + warp * 16; /* this warp's first key */
    const int key[2] = {wk0 + g, wk0 + g + 8};
    const float cl = p.scale * kLog2e;
    const bf16 *kw = sK + warp * 16 * LD, *vw = sV + warp * 16 * LD;

    int64_t cb = next_q_of(p.map, p.batch, kvb, -1);
    int ci = i0, buf = 0;
    if (cb < p.batch && ci < nq)
        load_q(cb, ci, 0);
    else
        cb = p.batch;
    while (cb < p.batch) {
        int64_t nb = cb;
        int ni = ci + 1;
        if (ni >= nq) {
            ni = i0;
            nb = next_q_of(p.map, p.batch, kvb, cb);
        }
        cp_async_wait_all();
        __syncthreads(); /* this tile landed; every warp is done with the other buffer */
        if (nb < p.batch) load_q(nb, ni, buf ^ 1);
        const int qt0 = ci * BM;
        if (!(p.causal && qt0 + BM - 1 < wk0)) { /* else every query is before this warp's keys */
            const bf16 *qt = sQ + buf * BM * LD, *dot = sdO + buf * BM * LD;
            const float *lt = sL + buf * BM, *dlt = sDl + buf * BM;
            float s[BM / 8][4], dp[BM / 8][4];
#pragma unroll
            for (int t = 0; t < BM / 8; t++) {
                s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
                dp[t][0] = dp[t][1] = dp[t][2] = dp[t][3] = 0.f;
            }
            mma_abt<D / 16, BM / 8>(s, kw, LD, qt, LD, lane);
            mma_abt<D / 16, BM / 8>(dp, vw, LD, dot, LD, lane);
            const bool edge = wk0 + 16 > p.Tk || qt0 + BM > p.Tq || (p.causal && qt0 < wk0 + 15);
#pragma unroll
            for (int t = 0; t < BM / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int qi = t * 8 + 2 * c + (e & 1);
                    float pv = ex2(s[t][e] * cl - lt[qi] * kLog2e);
                    if (edge) {
                        const int q = qt0 + qi, k = key[e >> 1];
                        if (q >= p.Tq || k >= p.Tk || (p.causal && k > q)) pv = 0.f;
                    }
                    s[t][e] = pv;
                    dp[t][e] = pv * (dp[t][e] - dlt[qi]); /* dS^T */
                }
            uint32_t pa[BM / 16][4];
            acc_to_a<BM / 8>(s, pa);
            mma_pb<BM / 16, D / 8>(dv, pa, dot, LD, lane);
            acc_to_a<BM / 8>(dp, pa);
            mma_pb<BM / 16, D / 8>(dk, pa, qt, LD, lane);
        }
        cb = nb;
        ci = ni;
        buf ^= 1;
    }
    cp_async_wait_all();
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (key[h] >= p.Tk) continue;
        const int64_t r = (kvb * p.Tk + key[h]) * D;
#pragma unroll
        for (int t = 0; t < D / 8; t++) {
            if (dK)
                *reinterpret_cast<float2 *>(dK + r + t * 8 + 2 * c) =
                    make_float2(dk[t][2 * h] * p.scale, dk[t][2 * h + 1] * p.scale);
            if (dV) *reinterpret_cast<float2 *>(dV + r + t * 8 + 2 * c) = make_float2(dv[t][2 * h], dv[t][2 * h + 1]);
        }
    }
}
/* ---------------------------------------------------------------- launchers ---- */

template <int D> fr_status fwd_tc_launch(const fr_cuda_kctx *k, const Prob &p, const float *Q, const bf16 *K,
                                         const bf16 *V, float *O, float *L)
{
    constexpr int MINB = D <= 64 ? 2 : 1;
    const size_t smem = fwd_tc_smem<D>();
    FR_TRY(set_smem(k->node, fwd_tc<D, MINB>, smem));
    const int64_t blocks = (int64_t)((p.Tq + kFwdBM - 1) / kFwdBM) * p.batch;
    fwd_tc<D, MINB><<<grid_of(blocks), kFwdThreads, smem, k->cu->stream>>>(Q, K, V, O, L, p);
    return fr_cuda_check_launch(k->node, "Attention(tensor cores)");
}

template <int D> fr_status bwd_tc_launch(const fr_cuda_kctx *k, const Prob &p, const Scratch &s, float *dQ, float *dK,
                                         float *dV, const float *LSE)
{
    cudaStream_t st = k->cu->stream;
    if (dK || dV) {
        const size_t smem = dkdv_tc_smem<D>();
        FR_TRY(set_smem(k->node, dkdv_tc<D>, smem));
        const int64_t blocks = (int64_t)((p.Tk + kKvBN - 1) / kKvBN) * p.kv_batch;
        dkdv_tc<D><<<grid_of(blocks), kBwdThreads, smem, st>>>(s.q16, s.k16, s.v16, s.do16, LSE, s.delta, dK, dV, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, tensor cores)"));
    }
    if (dQ) {
        const size_t smem = dq_tc_smem<D>();
        FR_TRY(set_smem(k->node, dq_tc<D>, smem));
        const int64_t blocks = (int64_t)((p.Tq + kDqBM - 1) / kDqBM) * p.batch;
        dq_tc<D><<<grid_of(blocks), kBwdThreads, smem, st>>>(s.q16, s.k16, s.v16, s.do16, LSE, s.delta, dQ, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, tensor cores)"));
    }
    return FR_OK;
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

fr_status tc_fwd(const fr_cuda_kctx *k, const Prob &p, const float *Q, const bf16 *K, const bf16 *V, float *O,
                 float *L)
{
    return p.D == 64 ? fwd_tc_launch<64>(k, p, Q, K, V, O, L) : fwd_tc_launch<128>(k, p, Q, K, V, O, L);
}

fr_status tc_bwd(const fr_cuda_kctx *k, const Prob &p, const Scratch &s, float *dQ, float *dK, float *dV,
                 const float *LSE)
{
    return p.D == 64 ? bwd_tc_launch<64>(k, p, s, dQ, dK, dV, LSE) : bwd_tc_launch<128>(k, p, s, dQ, dK, dV, LSE);
}

} /* namespace fr_attn */
