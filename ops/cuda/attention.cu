/* CUDA kernels of the fused attention op (ops/attention.h): Attention (O, LSE) and
 * AttentionGrad (dQ, dK, dV), flash style: no [T, T] matrix is ever stored.
 *
 * Two paths, chosen per node:
 *  - tensor cores (precision bf16, D == Dv in {64, 128}, 16-byte aligned operands):
 *    mma.sync m16n8k16 bf16 with float32 accumulation. K and V (and in the backward Q and dO
 *    too) are first rounded to bf16 into scratch (round-to-nearest-even, one pass), so the
 *    tiles that every block streams are half the bytes and go straight to shared memory with
 *    cp.async (double buffered, rows padded by 16 bytes: conflict-free ldmatrix).
 *    Forward: a block of 8 warps per (128 query rows, Q batch index), 16 rows per warp, key
 *    tiles of 64; online softmax in the log2 domain (running max m, running sum l), P rounded
 *    to bf16 in registers for P V, O = acc / l and LSE = m ln2 + ln l at the end.
 *  - float32 tiled (precision fp32, D == Dv in {64, 128}, 16-byte aligned): SIMT float32, no
 *    TF32, 64 x 64 tiles of 256 threads, each thread a 4 x 4 micro-tile of the scores and a
 *    4 x D/16 slice of the output, float4 reads from padded shared memory.
 *  - generic (float32 precision with other head dims up to 256, or the cases above that miss a
 *    condition): SIMT float32, 32 x 32 tiles, exact float32 math (bf16 precision rounds the
 *    operands, P and dS as the spec says).
 * Backward (both paths): Delta_i = dO_i . O_i (double sum, float32 result, in scratch); one
 * kernel per (64-key block, K/V batch index) walks every query tile of every Q batch index
 * that reads this K/V (the GQA group, in increasing order) and keeps dK, dV in registers; one
 * kernel per (query block, Q batch index) walks the key tiles for dQ. No atomics: the results
 * are bit-identical run to run. Causal: key tiles above the diagonal are skipped, only tiles
 * crossing it are masked element by element. float64 is CPU-only (FR_ERR_UNSUPPORTED).
 * A sliding window or a mask input goes to the simple kernels of attention_masked.cu. */
#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../runtime/cuda/cuda_kernel.h"
#include "attention_masked.cuh"
#include "cuda_util.cuh"
extern "C" {
#include "../attention.h"
}

namespace {

typedef __nv_bfloat16 bf16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr size_t kAlign = 256;
constexpr int kMaxGenericD = 256; /* generic path: D and Dv up to this */

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* Q batch index -> K/V batch index (fr_attn_kv_index, on the device) */
struct KvMap {
    int brank;
    int64_t qdims[FR_MAX_RANK];
    int64_t kv_stride[FR_MAX_RANK];
};

__device__ __forceinline__ int64_t kv_of(const KvMap &m, int64_t b)
{
    int64_t kv = 0;
    for (int k = m.brank - 1; k >= 0; k--) {
        const int64_t d = m.qdims[k];
        kv += (b % d) * m.kv_stride[k];
        b /= d;
    }
    return kv;
}

/* The first Q batch index after `prev` that reads K/V index kv (batch: none). */
__device__ __forceinline__ int64_t next_q_of(const KvMap &m, int64_t batch, int64_t kv, int64_t prev)
{
    for (int64_t b = prev + 1; b < batch; b++)
        if (kv_of(m, b) == kv) return b;
    return batch;
}

struct Prob {
    int64_t batch, kv_batch;
    int Tq, Tk, D, Dv;
    float scale;
    int causal, bf16;
    KvMap map;
};

/* ---------------------------------------------------------------- PTX helpers ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, zero-filled when !valid (src is then not read) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

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

/* ---------------------------------------------------------------- preprocessing ---- */

/* float32 -> bf16, 4 at a time (n4 = elements / 4; 16-byte aligned input) */
__global__ void to_bf16_kernel(const float4 *__restrict__ x, uint2 *__restrict__ y, int64_t n4)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        y[i] = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
    }
}

/* Delta_r = sum_d dO[r, d] O[r, d] (summed in double, lanes then a fixed tree); one warp per
 * row. dO16 (optional): dO rounded to bf16 for the tensor-core kernels. */
__global__ void __launch_bounds__(256) delta_kernel(const float *__restrict__ O, const float *__restrict__ dO,
                                                    float *__restrict__ delta, bf16 *__restrict__ dO16, int64_t rows,
                                                    int Dv)
{
    const int lane = threadIdx.x & 31;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const float *o = O + r * Dv, *d = dO + r * Dv;
        double acc = 0.0;
        for (int i = lane; i < Dv; i += 32) {
            const float g = d[i];
            acc += (double)g * (double)o[i];
            if (dO16) dO16[r * Dv + i] = __float2bfloat16_rn(g);
        }
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
        if (lane == 0) delta[r] = (float)acc;
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
    const int nqb = (p.Tq + BM - 1) / BM;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * BM;
    const int64_t kvb = kv_of(p.map, b);
    const float *Qb = Q + b * p.Tq * D;
    const bf16 *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    const int nk = (p.Tk + BN - 1) / BN;
    const int n_end = p.causal ? min(nk, (min(q0 + BM, p.Tq) - 1) / BN + 1) : nk;

    auto load_kv = [&](int j, int buf) {
        const int k0 = j * BN;
        bf16 *dk = sK + buf * BN * LD, *dv = sV + buf * BN * LD;
        for (int i = tid; i < BN * D / 8; i += NT) {
            const int r = i / (D / 8), ch = i % (D / 8);
            const bool ok = k0 + r < p.Tk;
            const int64_t off = ok ? (int64_t)(k0 + r) * D + ch * 8 : 0;
            cp_async16(dk + r * LD + ch * 8, Kb + off, ok);
            cp_async16(dv + r * LD + ch * 8, Vb + off, ok);
        }
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
        cp_async_wait_all();
        __syncthreads(); /* tile j landed; every warp is done with tile j - 1's buffer */
        if (j + 1 < n_end) load_kv(j + 1, (j + 1) & 1);
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
    const int nqb = (p.Tq + BM - 1) / BM;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * BM;
    const int64_t kvb = kv_of(p.map, b);
    const bf16 *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    const int nk = (p.Tk + BN - 1) / BN;
    const int n_end = p.causal ? min(nk, (min(q0 + BM, p.Tq) - 1) / BN + 1) : nk;

    for (int i = tid; i < BM * D / 8; i += NT) {
        const int r = i / (D / 8), ch = i % (D / 8);
        const bool ok = q0 + r < p.Tq;
        const int64_t off = ok ? (b * p.Tq + q0 + r) * D + ch * 8 : 0;
        cp_async16(sQ + r * LD + ch * 8, Q + off, ok);
        cp_async16(sdO + r * LD + ch * 8, dO + off, ok);
    }
    auto load_kv = [&](int j, int buf) {
        const int k0 = j * BN;
        bf16 *dk = sK + buf * BN * LD, *dv = sV + buf * BN * LD;
        for (int i = tid; i < BN * D / 8; i += NT) {
            const int r = i / (D / 8), ch = i % (D / 8);
            const bool ok = k0 + r < p.Tk;
            const int64_t off = ok ? (int64_t)(k0 + r) * D + ch * 8 : 0;
            cp_async16(dk + r * LD + ch * 8, Kb + off, ok);
            cp_async16(dv + r * LD + ch * 8, Vb + off, ok);
        }
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
        cp_async_wait_all();
        __syncthreads();
        if (j + 1 < n_end) load_kv(j + 1, (j + 1) & 1);
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

    for (int i = tid; i < BN * D / 8; i += NT) {
        const int r = i / (D / 8), ch = i % (D / 8);
        const bool ok = n0 + r < p.Tk;
        const int64_t off = ok ? (int64_t)(n0 + r) * D + ch * 8 : 0;
        cp_async16(sK + r * LD + ch * 8, Kb + off, ok);
        cp_async16(sV + r * LD + ch * 8, Vb + off, ok);
    }
    auto load_q = [&](int64_t qb, int it, int buf) {
        const int t0 = it * BM;
        bf16 *dq = sQ + buf * BM * LD, *ddo = sdO + buf * BM * LD;
        for (int i = tid; i < BM * D / 8; i += NT) {
            const int r = i / (D / 8), ch = i % (D / 8);
            const bool ok = t0 + r < p.Tq;
            const int64_t off = ok ? (qb * p.Tq + t0 + r) * D + ch * 8 : 0;
            cp_async16(dq + r * LD + ch * 8, Q + off, ok);
            cp_async16(ddo + r * LD + ch * 8, dO + off, ok);
        }
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

/* ---------------------------------------------------------------- generic float32 path ---- */

/* 32 x 32 tiles, 256 threads: thread t owns row t / 8 of the tile and columns t % 8 + 8 j. */
constexpr int GB = 32, kGenThreads = 256;

__device__ __forceinline__ float rnd(float x, int bf) { return bf ? __bfloat162float(__float2bfloat16_rn(x)) : x; }

/* rows [r0, r0 + GB) of a [rows, width] matrix into shared memory (leading dim ld), zeros past
 * `rows`, rounded to bf16 when bf */
__device__ __forceinline__ void load_tile(float *dst, int ld, const float *src, int r0, int rows, int width, int bf)
{
    for (int i = threadIdx.x; i < GB * width; i += kGenThreads) {
        const int r = i / width, d = i % width;
        dst[r * ld + d] = r0 + r < rows ? rnd(src[(int64_t)(r0 + r) * width + d], bf) : 0.f;
    }
}

__device__ __forceinline__ float dot_s(const float *a, const float *b, int n)
{
    float acc = 0.f;
    for (int d = 0; d < n; d++) acc = fmaf(a[d], b[d], acc);
    return acc;
}

size_t gen_fwd_smem(int D, int Dv) { return sizeof(float) * (size_t)(2 * GB * (D + 1) + GB * (Dv + 1) + GB * (GB + 1)); }

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    fwd_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                float *__restrict__ O, float *__restrict__ LSE, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sQ = smf, *sK = sQ + GB * LQ, *sV = sK + GB * LQ, *sP = sV + GB * LV;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const int nqb = (p.Tq + GB - 1) / GB;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * GB, qrow = q0 + r;
    const int64_t kvb = kv_of(p.map, b);
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * Dv;
    load_tile(sQ, LQ, Q + b * p.Tq * D, q0, p.Tq, D, p.bf16);
    const int nk = (p.Tk + GB - 1) / GB;
    const int n_end = p.causal ? min(nk, (min(q0 + GB, p.Tq) - 1) / GB + 1) : nk;
    float o[NJ], m = -INFINITY, l = 0.f;
#pragma unroll
    for (int j = 0; j < NJ; j++) o[j] = 0.f;
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * GB;
        __syncthreads();
        load_tile(sK, LQ, Kb, k0, p.Tk, D, p.bf16);
        load_tile(sV, LV, Vb, k0, p.Tk, Dv, p.bf16);
        __syncthreads();
        float s[4], mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int kc = sub + 8 * u, key = k0 + kc;
            float v = dot_s(sQ + r * LQ, sK + kc * LQ, D) * p.scale;
            if (key >= p.Tk || (p.causal && key > qrow)) v = -INFINITY;
            s[u] = v;
            mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        const float mn = fmaxf(m, mx), base = mn == -INFINITY ? 0.f : mn;
        const float alpha = expf(m - base);
        float ps = 0.f;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float pv = expf(s[u] - base);
            ps += pv;
            sP[r * LP + sub + 8 * u] = rnd(pv, p.bf16);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        ps += __shfl_xor_sync(0xffffffffu, ps, 4);
        l = l * alpha + ps;
        m = mn;
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = sub + 8 * j;
            if (col < Dv) {
                float acc = o[j] * alpha;
                for (int k = 0; k < GB; k++) acc = fmaf(sP[r * LP + k], sV[k * LV + col], acc);
                o[j] = acc;
            }
        }
    }
    if (qrow >= p.Tq) return;
    const float inv = 1.f / l;
    float *orow = O + (b * p.Tq + qrow) * Dv;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (sub + 8 * j < Dv) orow[sub + 8 * j] = o[j] * inv;
    if (LSE && sub == 0) LSE[b * p.Tq + qrow] = m + logf(l);
}

size_t gen_dq_smem(int D, int Dv) { return sizeof(float) * (size_t)(2 * GB * (D + 1) + 2 * GB * (Dv + 1) + GB * (GB + 1)); }

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    dq_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
               const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
               float *__restrict__ dQ, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sQ = smf, *sK = sQ + GB * LQ, *sdO = sK + GB * LQ, *sV = sdO + GB * LV, *sS = sV + GB * LV;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const int nqb = (p.Tq + GB - 1) / GB;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * GB, qrow = q0 + r;
    const int64_t kvb = kv_of(p.map, b);
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * Dv;
    load_tile(sQ, LQ, Q + b * p.Tq * D, q0, p.Tq, D, p.bf16);
    load_tile(sdO, LV, dO + b * p.Tq * Dv, q0, p.Tq, Dv, p.bf16);
    const bool live = qrow < p.Tq;
    const float lse = live ? LSE[b * p.Tq + qrow] : 0.f, dl = live ? Delta[b * p.Tq + qrow] : 0.f;
    const int nk = (p.Tk + GB - 1) / GB;
    const int n_end = p.causal ? min(nk, (min(q0 + GB, p.Tq) - 1) / GB + 1) : nk;
    float dq[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) dq[j] = 0.f;
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * GB;
        __syncthreads();
        load_tile(sK, LQ, Kb, k0, p.Tk, D, p.bf16);
        load_tile(sV, LV, Vb, k0, p.Tk, Dv, p.bf16);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int kc = sub + 8 * u, key = k0 + kc;
            float ds = 0.f;
            if (live && key < p.Tk && !(p.causal && key > qrow)) {
                const float pv = expf(dot_s(sQ + r * LQ, sK + kc * LQ, D) * p.scale - lse);
                ds = pv * (dot_s(sdO + r * LV, sV + kc * LV, Dv) - dl);
            }
            sS[r * LP + kc] = rnd(ds, p.bf16);
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = sub + 8 * j;
            if (col < D) {
                float acc = dq[j];
                for (int k = 0; k < GB; k++) acc = fmaf(sS[r * LP + k], sK[k * LQ + col], acc);
                dq[j] = acc;
            }
        }
    }
    if (!live) return;
    float *qr = dQ + (b * p.Tq + qrow) * D;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (sub + 8 * j < D) qr[sub + 8 * j] = dq[j] * p.scale;
}

size_t gen_dkdv_smem(int D, int Dv)
{
    return sizeof(float) * (size_t)(2 * GB * (D + 1) + 2 * GB * (Dv + 1) + 2 * GB * (GB + 1) + 2 * GB);
}

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    dkdv_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                 const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
                 float *__restrict__ dK, float *__restrict__ dV, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sK = smf, *sQ = sK + GB * LQ, *sV = sQ + GB * LQ, *sdO = sV + GB * LV, *sP = sdO + GB * LV,
          *sS = sP + GB * LP, *sL = sS + GB * LP, *sDl = sL + GB;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * GB, key = n0 + r;
    load_tile(sK, LQ, K + kvb * p.Tk * D, n0, p.Tk, D, p.bf16);
    load_tile(sV, LV, V + kvb * p.Tk * Dv, n0, p.Tk, Dv, p.bf16);
    const int nq = (p.Tq + GB - 1) / GB, i0 = p.causal ? n0 / GB : 0;
    float dk[NJ], dv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) dk[j] = dv[j] = 0.f;
    for (int64_t qb = next_q_of(p.map, p.batch, kvb, -1); qb < p.batch; qb = next_q_of(p.map, p.batch, kvb, qb))
        for (int it = i0; it < nq; it++) {
            const int t0 = it * GB;
            __syncthreads();
            load_tile(sQ, LQ, Q + qb * p.Tq * D, t0, p.Tq, D, p.bf16);
            load_tile(sdO, LV, dO + qb * p.Tq * Dv, t0, p.Tq, Dv, p.bf16);
            for (int i = threadIdx.x; i < GB; i += kGenThreads) {
                const bool ok = t0 + i < p.Tq;
                sL[i] = ok ? LSE[qb * p.Tq + t0 + i] : 0.f;
                sDl[i] = ok ? Delta[qb * p.Tq + t0 + i] : 0.f;
            }
            __syncthreads();
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int qc = sub + 8 * u, q = t0 + qc;
                float pv = 0.f, ds = 0.f;
                if (q < p.Tq && key < p.Tk && !(p.causal && key > q)) {
                    pv = expf(dot_s(sQ + qc * LQ, sK + r * LQ, D) * p.scale - sL[qc]);
                    ds = pv * (dot_s(sdO + qc * LV, sV + r * LV, Dv) - sDl[qc]);
                }
                sP[r * LP + qc] = rnd(pv, p.bf16);
                sS[r * LP + qc] = rnd(ds, p.bf16);
            }
            __syncwarp();
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int col = sub + 8 * j;
                if (col < Dv) {
                    float acc = dv[j];
                    for (int q = 0; q < GB; q++) acc = fmaf(sP[r * LP + q], sdO[q * LV + col], acc);
                    dv[j] = acc;
                }
                if (col < D) {
                    float acc = dk[j];
                    for (int q = 0; q < GB; q++) acc = fmaf(sS[r * LP + q], sQ[q * LQ + col], acc);
                    dk[j] = acc;
                }
            }
        }
    if (key >= p.Tk) return;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int col = sub + 8 * j;
        if (dK && col < D) dK[(kvb * p.Tk + key) * D + col] = dk[j] * p.scale;
        if (dV && col < Dv) dV[(kvb * p.Tk + key) * Dv + col] = dv[j];
    }
}

/* ---------------------------------------------------------------- float32, register tiled ---- */

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
    const int nqb = (p.Tq + FB - 1) / FB;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * FB;
    const int64_t kvb = kv_of(p.map, b);
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * D;
    f32_load_rows<D>(sQ, Q + b * p.Tq * D, q0, p.Tq);
    const int nk = (p.Tk + FB - 1) / FB;
    const int n_end = p.causal ? min(nk, (min(q0 + FB, p.Tq) - 1) / FB + 1) : nk;
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
    const int nqb = (p.Tq + FB - 1) / FB;
    const int64_t b = blockIdx.x % p.batch;
    const int q0 = (nqb - 1 - (int)(blockIdx.x / p.batch)) * FB;
    const int64_t kvb = kv_of(p.map, b);
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
    const int nk = (p.Tk + FB - 1) / FB;
    const int n_end = p.causal ? min(nk, (min(q0 + FB, p.Tq) - 1) / FB + 1) : nk;
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

/* ---------------------------------------------------------------- host side ---- */

struct Plan {
    fr_attn_attrs a;
    fr_attn_geom geo;
    Prob p;
    bool tc;  /* tensor-core path (static conditions; alignment is checked at run time) */
    bool f32; /* register-tiled float32 path (likewise) */
};

fr_status make_plan(const fr_node *n, int rq, const int64_t *dq, int rk, const int64_t *dk, int rv, const int64_t *dv,
                    Plan *pl)
{
    FR_TRY(fr_attn_read_attrs(n, rq >= 1 ? dq[rq - 1] : 0, &pl->a));
    FR_TRY(fr_attn_geometry(n, rq, dq, rk, dk, rv, dv, pl->a.causal, &pl->geo));
    const fr_attn_geom &g = pl->geo;
    if (g.Tq > INT_MAX / 2 || g.Tk > INT_MAX / 2 || g.D > INT_MAX || g.Dv > INT_MAX)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "sequence lengths %lld, %lld are too long for the CUDA kernels",
                             (long long)g.Tq, (long long)g.Tk);
    Prob &p = pl->p;
    memset(&p, 0, sizeof p);
    p.batch = g.batch;
    p.kv_batch = g.kv_batch;
    p.Tq = (int)g.Tq;
    p.Tk = (int)g.Tk;
    p.D = (int)g.D;
    p.Dv = (int)g.Dv;
    p.scale = pl->a.scale;
    p.causal = pl->a.causal;
    p.bf16 = pl->a.bf16;
    p.map.brank = g.brank;
    for (int k = 0; k < g.brank; k++) {
        p.map.qdims[k] = g.qdims[k];
        p.map.kv_stride[k] = g.kv_stride[k];
    }
    pl->tc = pl->a.bf16 && g.D == g.Dv && (g.D == 64 || g.D == 128);
    pl->f32 = !pl->a.bf16 && g.D == g.Dv && (g.D == 64 || g.D == 128);
    return FR_OK;
}

fr_status plan_of_node(const fr_graph *g, const fr_node *n, Plan *pl)
{
    if (n->n_inputs < 3) return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V");
    const fr_value *v[3];
    for (int i = 0; i < 3; i++) {
        if (n->inputs[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
        v[i] = &g->values[n->inputs[i]];
    }
    return make_plan(n, v[0]->rank, v[0]->dims, v[1]->rank, v[1]->dims, v[2]->rank, v[2]->dims, pl);
}

/* Scratch: forward (tensor cores) K16, V16; backward Delta, then (tensor cores) Q16, dO16,
 * K16, V16. */
struct Scratch {
    float *delta;
    bf16 *q16, *do16, *k16, *v16;
};

size_t scratch_layout(const Plan &pl, bool grad, void *base, Scratch *s)
{
    const fr_attn_geom &g = pl.geo;
    char *b = (char *)base;
    size_t off = 0;
    auto take = [&](size_t bytes) {
        char *ptr = b ? b + off : nullptr;
        off += align_up(bytes);
        return ptr;
    };
    Scratch t = {};
    if (grad) t.delta = (float *)take((size_t)(g.batch * g.Tq) * sizeof(float));
    if (pl.tc) {
        if (grad) {
            t.q16 = (bf16 *)take((size_t)(g.batch * g.Tq * g.D) * sizeof(bf16));
            t.do16 = (bf16 *)take((size_t)(g.batch * g.Tq * g.Dv) * sizeof(bf16));
        }
        t.k16 = (bf16 *)take((size_t)(g.kv_batch * g.Tk * g.D) * sizeof(bf16));
        t.v16 = (bf16 *)take((size_t)(g.kv_batch * g.Tk * g.Dv) * sizeof(bf16));
    }
    if (s) *s = t;
    return off;
}

fr_status attn_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    Plan pl;
    FR_TRY(plan_of_node(g, n, &pl));
    *bytes = scratch_layout(pl, strcmp(n->op_type, "AttentionGrad") == 0, nullptr, nullptr);
    return FR_OK;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

unsigned grid_of(int64_t blocks) { return (unsigned)(blocks < 1 ? 1 : blocks); }

fr_status to_bf16(const fr_cuda_kctx *k, const float *x, bf16 *y, int64_t n)
{
    if (n == 0) return FR_OK;
    const int64_t n4 = n / 4; /* D is a multiple of 8 on this path */
    const int64_t blocks = (n4 + 255) / 256;
    to_bf16_kernel<<<grid_of(blocks > 65536 ? 65536 : blocks), 256, 0, k->cu->stream>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<uint2 *>(y), n4);
    return fr_cuda_check_launch(k->node, "Attention(to bf16)");
}

template <class F> fr_status set_smem(const fr_node *n, F *kernel, size_t bytes)
{
    if (bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess)
            return fr_node_error(n, FR_ERR_DEVICE, "%zu bytes of shared memory per block: %s", bytes,
                                 cudaGetErrorString(e));
    }
    return FR_OK;
}

fr_status check_f32(const fr_node *n, const fr_tensor *const *t, int count)
{
    for (int i = 0; i < count; i++) {
        if (t[i]->dtype == FR_F64)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "float64 attention runs on the CPU only (float32 on the GPU)");
        if (t[i]->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input %d is %s: the CUDA kernels take float32", i,
                                 fr_dtype_name(t[i]->dtype));
    }
    return FR_OK;
}

fr_status generic_fits(const fr_node *n, const Prob &p)
{
    if (p.D > kMaxGenericD || p.Dv > kMaxGenericD)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "head dims D = %d, Dv = %d: the CUDA kernels take up to %d (bf16 tensor cores: 64, 128)",
                             p.D, p.Dv, kMaxGenericD);
    return FR_OK;
}

/* ---- Attention ---- */

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

template <int NJ> fr_status fwd_gen_launch(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K,
                                           const float *V, float *O, float *L)
{
    const size_t smem = gen_fwd_smem(p.D, p.Dv);
    FR_TRY(set_smem(k->node, fwd_generic<NJ>, smem));
    const int64_t blocks = (int64_t)((p.Tq + GB - 1) / GB) * p.batch;
    fwd_generic<NJ><<<grid_of(blocks), kGenThreads, smem, k->cu->stream>>>(Q, K, V, O, L, p);
    return fr_cuda_check_launch(k->node, "Attention(float32)");
}

template <int D> fr_status fwd_f32_launch(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K,
                                          const float *V, float *O, float *L)
{
    const size_t smem = fwd_f32_smem<D>();
    FR_TRY(set_smem(k->node, fwd_f32<D>, smem));
    const int64_t blocks = (int64_t)((p.Tq + FB - 1) / FB) * p.batch;
    fwd_f32<D><<<grid_of(blocks), kF32Threads, smem, k->cu->stream>>>(Q, K, V, O, L, p);
    return fr_cuda_check_launch(k->node, "Attention(float32 tiled)");
}

fr_status attn_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || k->n_in > 4 || !k->in[0] || !k->in[1] || !k->in[2] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V (and optionally a mask) and output O");
    const fr_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2], *mask = k->n_in > 3 ? k->in[3] : NULL;
    fr_tensor *o = k->out[0], *lse = k->n_out > 1 ? k->out[1] : NULL;
    FR_TRY(check_f32(n, k->in, mask ? 4 : 3));
    Plan pl;
    FR_TRY(make_plan(n, q->rank, q->dims, kk->rank, kk->dims, v->rank, v->dims, &pl));
    const Prob &p = pl.p;
    int64_t od[FR_MAX_RANK];
    memcpy(od, q->dims, sizeof(int64_t) * (size_t)q->rank);
    od[q->rank - 1] = p.Dv;
    FR_TRY(fr_check_out(n, o, FR_F32, q->rank, od));
    if (lse) FR_TRY(fr_check_out(n, lse, FR_F32, q->rank - 1, q->dims));
    if (p.batch == 0 || p.Tq == 0 || p.Dv == 0) return FR_OK;
    if (p.Tk == 0 || p.D == 0)
        return fr_node_error(n, FR_ERR_SHAPE, "Tk and D must be >= 1 (a row with no key has no softmax)");
    const float *Q = (const float *)q->data, *K = (const float *)kk->data, *V = (const float *)v->data;
    float *O = (float *)o->data, *L = lse ? (float *)lse->data : nullptr;
    if (mask || pl.a.window > 0) /* the flash kernels know only the causal bound */
        return fr_attn_masked_fwd(k, &pl.a, &pl.geo, Q, K, V, mask, O, L);
    if (pl.tc && aligned16(Q) && aligned16(K) && aligned16(V) && aligned16(O)) { /* O: float2 stores */
        Scratch s;
        const size_t need = scratch_layout(pl, false, k->scratch, &s);
        if (!k->scratch || k->scratch_bytes < need)
            return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
        FR_TRY(to_bf16(k, K, s.k16, p.kv_batch * p.Tk * p.D));
        FR_TRY(to_bf16(k, V, s.v16, p.kv_batch * p.Tk * p.Dv));
        return p.D == 64 ? fwd_tc_launch<64>(k, p, Q, s.k16, s.v16, O, L)
                         : fwd_tc_launch<128>(k, p, Q, s.k16, s.v16, O, L);
    }
    if (pl.f32 && aligned16(Q) && aligned16(K) && aligned16(V) && aligned16(O))
        return p.D == 64 ? fwd_f32_launch<64>(k, p, Q, K, V, O, L) : fwd_f32_launch<128>(k, p, Q, K, V, O, L);
    FR_TRY(generic_fits(n, p));
    return (p.D <= 64 && p.Dv <= 64) ? fwd_gen_launch<8>(k, p, Q, K, V, O, L) : fwd_gen_launch<32>(k, p, Q, K, V, O, L);
}

/* ---- AttentionGrad ---- */

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

template <int NJ> fr_status bwd_gen_launch(const fr_cuda_kctx *k, const Prob &p, const float *const *in,
                                           const float *delta, float *dQ, float *dK, float *dV)
{
    cudaStream_t st = k->cu->stream;
    const float *Q = in[0], *K = in[1], *V = in[2], *LSE = in[4], *dO = in[5];
    if (dK || dV) {
        const size_t smem = gen_dkdv_smem(p.D, p.Dv);
        FR_TRY(set_smem(k->node, dkdv_generic<NJ>, smem));
        const int64_t blocks = (int64_t)((p.Tk + GB - 1) / GB) * p.kv_batch;
        dkdv_generic<NJ><<<grid_of(blocks), kGenThreads, smem, st>>>(Q, K, V, dO, LSE, delta, dK, dV, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, float32)"));
    }
    if (dQ) {
        const size_t smem = gen_dq_smem(p.D, p.Dv);
        FR_TRY(set_smem(k->node, dq_generic<NJ>, smem));
        const int64_t blocks = (int64_t)((p.Tq + GB - 1) / GB) * p.batch;
        dq_generic<NJ><<<grid_of(blocks), kGenThreads, smem, st>>>(Q, K, V, dO, LSE, delta, dQ, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, float32)"));
    }
    return FR_OK;
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

fr_status attng_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 6 || k->n_in > 7 || k->n_out != 3)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V, O, LSE, dO (and the mask) and outputs dQ, dK, dV");
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    FR_TRY(check_f32(n, k->in, k->n_in));
    const fr_tensor *mask = k->n_in > 6 ? k->in[6] : NULL;
    const fr_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2];
    fr_tensor *dq = k->out[0], *dk = k->out[1], *dv = k->out[2];
    Plan pl;
    FR_TRY(make_plan(n, q->rank, q->dims, kk->rank, kk->dims, v->rank, v->dims, &pl));
    const Prob &p = pl.p;
    int64_t od[FR_MAX_RANK];
    memcpy(od, q->dims, sizeof(int64_t) * (size_t)q->rank);
    od[q->rank - 1] = p.Dv;
    FR_TRY(fr_check_out(n, k->in[3], FR_F32, q->rank, od));
    FR_TRY(fr_check_out(n, k->in[5], FR_F32, q->rank, od));
    FR_TRY(fr_check_out(n, k->in[4], FR_F32, q->rank - 1, q->dims));
    if (dq) FR_TRY(fr_check_out(n, dq, FR_F32, q->rank, q->dims));
    if (dk) FR_TRY(fr_check_out(n, dk, FR_F32, kk->rank, kk->dims));
    if (dv) FR_TRY(fr_check_out(n, dv, FR_F32, v->rank, v->dims));
    if (!dq && !dk && !dv) return FR_OK;
    cudaStream_t st = k->cu->stream;
    if (p.batch == 0 || p.Tq == 0 || p.Tk == 0) { /* no term: zero gradients, as on the CPU */
        fr_tensor *outs[3] = {dq, dk, dv};
        for (int i = 0; i < 3; i++)
            if (outs[i] && outs[i]->nbytes) FR_CUDA_TRY(cudaMemsetAsync(outs[i]->data, 0, outs[i]->nbytes, st));
        return FR_OK;
    }
    if (p.D == 0 || p.Dv == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "head dims D = %d, Dv = %d: the CUDA kernels need both >= 1", p.D,
                             p.Dv);
    const float *in[6];
    for (int i = 0; i < 6; i++) in[i] = (const float *)k->in[i]->data;
    bool tc = pl.tc;
    for (int i = 0; i < 6; i++) tc = tc && aligned16(in[i]);
    const fr_tensor *grads[3] = {dq, dk, dv}; /* written with float2 stores */
    for (int i = 0; i < 3; i++) tc = tc && (!grads[i] || aligned16(grads[i]->data));
    if (!tc) pl.tc = false; /* the generic path needs Delta only (the scratch may be larger) */
    Scratch s;
    const size_t need = scratch_layout(pl, true, k->scratch, &s);
    if (!k->scratch || k->scratch_bytes < need)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
    float *dQ = dq ? (float *)dq->data : nullptr, *dK = dk ? (float *)dk->data : nullptr,
          *dV = dv ? (float *)dv->data : nullptr;
    if (mask || pl.a.window > 0) return fr_attn_masked_bwd(k, &pl.a, &pl.geo, in, mask, s.delta, dQ, dK, dV);
    const int64_t rows = p.batch * p.Tq;
    const int64_t dblocks = (rows + 7) / 8;
    delta_kernel<<<grid_of(dblocks > 65536 ? 65536 : dblocks), 256, 0, st>>>(in[3], in[5], s.delta,
                                                                              tc ? s.do16 : nullptr, rows, p.Dv);
    FR_TRY(fr_cuda_check_launch(n, "AttentionGrad(Delta)"));
    if (tc) {
        FR_TRY(to_bf16(k, in[0], s.q16, rows * p.D));
        FR_TRY(to_bf16(k, in[1], s.k16, p.kv_batch * p.Tk * p.D));
        FR_TRY(to_bf16(k, in[2], s.v16, p.kv_batch * p.Tk * p.Dv));
        return p.D == 64 ? bwd_tc_launch<64>(k, p, s, dQ, dK, dV, in[4]) : bwd_tc_launch<128>(k, p, s, dQ, dK, dV, in[4]);
    }
    bool f32 = pl.f32;
    for (int i = 0; i < 6; i++) f32 = f32 && aligned16(in[i]);
    f32 = f32 && aligned16(dQ) && aligned16(dK) && aligned16(dV); /* (null is aligned) */
    if (f32)
        return p.D == 64 ? bwd_f32_launch<64>(k, p, in, s.delta, dQ, dK, dV)
                         : bwd_f32_launch<128>(k, p, in, s.delta, dQ, dK, dV);
    FR_TRY(generic_fits(n, p));
    return (p.D <= 64 && p.Dv <= 64) ? bwd_gen_launch<8>(k, p, in, s.delta, dQ, dK, dV)
                                     : bwd_gen_launch<32>(k, p, in, s.delta, dQ, dK, dV);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_attention[] = {
    {"Attention", FR_DOMAIN_FP8RUN, attn_cuda, attn_scratch},
    {"AttentionGrad", FR_DOMAIN_FP8RUN, attng_cuda, attn_scratch},
    {NULL, NULL, NULL, NULL},
};
