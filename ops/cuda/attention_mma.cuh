/* What the bf16 tensor-core flash kernels (attention_tc.cu: forward, attention_tc_bwd.cu: dQ and
 * dK, dV) share: PTX wrappers (ldmatrix, mma.sync m16n8k16 bf16 -> float32, ex2, tanh), the
 * fragment addressing of warp-level GEMMs on shared tiles, tile loads by cp.async with the head
 * dim padded to the kernel's template width DP (columns from D on read as zeros, so one kernel
 * serves every D that is a multiple of 8 up to DP), and the mask predicates: causal, sliding
 * window, softcap, segment ids (Sk, Sq) and an additive mask tensor, evaluated per element
 * only on tiles that need them (attention_flash.cuh: Masks). */
#ifndef FR_ATTENTION_MMA_CUH
#define FR_ATTENTION_MMA_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_flash.cuh"

namespace fr_attn {
namespace mma {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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
/* tanh to about 2^-11 relative (sm_75+): below the bf16 rounding of P that follows */
__device__ __forceinline__ float tanh_fast(float x)
{
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
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

/* acc[r][16 x 8*NT] += A_r (rows r*16.., 16 x 16*KT, fragments from shared rows) . X^T, X rows n
 * (B[k][n] = X[n][k]), for RM row tiles r: each B fragment is loaded once for all of them */
template <int KT, int NT, int RM>
__device__ __forceinline__ void mma_abt(float (*acc)[NT][4], const bf16 *A, int lda, const bf16 *X, int ldx, int lane)
{
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t a[RM][4];
#pragma unroll
        for (int r = 0; r < RM; r++) ldsm_x4(a[r], A + (r * 16 + a_row(lane)) * lda + kk * 16 + a_col(lane));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4(b, X + (np * 16 + bn_row(lane)) * ldx + kk * 16 + bn_col(lane));
#pragma unroll
            for (int r = 0; r < RM; r++) {
                mma_bf16(acc[r][2 * np], a[r], b[0], b[1]);
                mma_bf16(acc[r][2 * np + 1], a[r], b[2], b[3]);
            }
        }
    }
}

/* acc[r][16 x 8*NT] += P_r (register fragments, 16 x 16*KT) . X, X rows k (B[k][n] = X[k][n]),
 * for RM row tiles r */
template <int KT, int NT, int RM>
__device__ __forceinline__ void mma_pb(float (*acc)[NT][4], const uint32_t (*pa)[KT][4], const bf16 *X, int ldx,
                                       int lane)
{
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_t(b, X + (kk * 16 + a_row(lane)) * ldx + np * 16 + a_col(lane));
#pragma unroll
            for (int r = 0; r < RM; r++) {
                mma_bf16(acc[r][2 * np], pa[r][kk], b[0], b[1]);
                mma_bf16(acc[r][2 * np + 1], pa[r][kk], b[2], b[3]);
            }
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

template <int N> __device__ __forceinline__ void zero(float (*a)[4])
{
#pragma unroll
    for (int t = 0; t < N; t++) a[t][0] = a[t][1] = a[t][2] = a[t][3] = 0.f;
}

/* Rows r0 .. r0 + R - 1 of a bf16 [*, W] matrix x (row base + r0 + r; rows from `rows` on and
 * columns from W on zero-filled) -> shared dst with rows of DP + 8, by cp.async (not committed).
 * W is a multiple of 8 (16-byte chunks). */
template <int R, int DP, int NT>
__device__ __forceinline__ void load_rows(bf16 *dst, const bf16 *x, int W, int64_t base, int r0, int rows, int tid)
{
    constexpr int LD = DP + 8;
    for (int i = tid; i < R * DP / 8; i += NT) {
        const int r = i / (DP / 8), ch = i % (DP / 8);
        const bool ok = r0 + r < rows && ch * 8 < W;
        const int64_t off = ok ? (base + (r0 + r)) * W + ch * 8 : 0;
        cp_async16(dst + r * LD + ch * 8, x + off, ok);
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

/* LSE in the log2 domain (the backward kernels); a row that saw no key (-inf) gives +inf, so
 * every P of it is 0 */
__device__ __forceinline__ float lse2_of(float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; }

/* ---- masks ---- */

__device__ __forceinline__ int64_t seg_at(const void *p, int is64, int64_t i)
{
    return is64 ? __ldg((const long long *)p + i) : (int64_t)__ldg((const int *)p + i);
}
/* ids in the order seg_form padded/packed promise: positive non-decreasing, padding (0) last */
__device__ __forceinline__ uint64_t seg_order(int64_t id) { return id == 0 ? ~0ull : (uint64_t)id; }

/* Over row `base` .. base + n - 1 of ids (NULL: every id 1) ordered by seg_order, the first
 * index whose id is >= key (upper: > key). */
__device__ __forceinline__ int seg_bound(const void *ids, int is64, int64_t base, int n, uint64_t key, bool upper)
{
    if (!ids) return (upper ? 1ull <= key : 1ull < key) ? n : 0;
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const uint64_t v = seg_order(seg_at(ids, is64, base + mid));
        if (upper ? v <= key : v < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The keys [*k0, *k1) that queries [q0, q1) of segment row r can see (seg_ranges only):
 * those whose ids lie between the first and last query's ids. */
__device__ __forceinline__ void seg_key_range(const Masks &mk, int64_t r, int Tq, int Tk, int q0, int q1, int *k0,
                                              int *k1)
{
    const uint64_t a = mk.sq ? seg_order(seg_at(mk.sq, mk.seg64, r * Tq + q0)) : 1ull;
    const uint64_t z = mk.sq ? seg_order(seg_at(mk.sq, mk.seg64, r * Tq + q1 - 1)) : 1ull;
    *k0 = seg_bound(mk.sk, mk.seg64, r * Tk, Tk, a, false);
    *k1 = seg_bound(mk.sk, mk.seg64, r * Tk, Tk, z, true);
}
/* The queries [*q0, *q1) that keys [k0, k1) of segment row r can be seen by (seg_ranges only). */
__device__ __forceinline__ void seg_query_range(const Masks &mk, int64_t r, int Tq, int Tk, int k0, int k1, int *q0,
                                                int *q1)
{
    const uint64_t a = seg_order(seg_at(mk.sk, mk.seg64, r * Tk + k0));
    const uint64_t z = seg_order(seg_at(mk.sk, mk.seg64, r * Tk + k1 - 1));
    *q0 = seg_bound(mk.sq, mk.seg64, r * Tq, Tq, a, false);
    *q1 = seg_bound(mk.sq, mk.seg64, r * Tq, Tq, z, true);
}

/* The key tiles of BN that query rows [q0, q1) of Q batch index b read: [*j0, *j1), past the
 * causal diagonal, from the window's start and (seg_form padded/packed) within the rows'
 * segments; *srow: b's row of the segment ids. */
template <bool X>
__device__ __forceinline__ void key_tile_range(const Prob &p, const Masks &mk, int64_t b, int q0, int q1, int BM,
                                               int BN, int *j0, int *j1, int64_t *srow)
{
    *j1 = key_tiles(p, q0, BM, BN), *j0 = 0;
    if (mk.window > 0) *j0 = (int)max((int64_t)0, (int64_t)q0 - mk.window + 1) / BN;
    *srow = X && mk.sk ? b / mk.seg_per_row : 0;
    if (X && mk.sk && mk.seg_ranges) {
        int k0, k1;
        seg_key_range(mk, *srow, p.Tq, p.Tk, q0, q1, &k0, &k1);
        *j0 = max(*j0, k0 / BN);
        *j1 = k1 > k0 ? min(*j1, (k1 + BN - 1) / BN) : *j0;
    }
}

/* Offset of Q batch index b's additive mask (strides per Q batch dim). */
__device__ __forceinline__ int64_t mask_off(const Prob &p, const Masks &mk, int64_t b)
{
    int64_t off = 0;
    for (int k = p.map.brank - 1; k >= 0; k--) {
        off += (b % p.map.qdims[k]) * mk.mstride[k];
        b /= p.map.qdims[k];
    }
    return off;
}

/* The (Q batch index, query tile of BM) pairs whose queries can see keys [n0, n1) of K/V batch
 * index kvb, in increasing order, for the dK, dV kernels: from the causal diagonal, up to the
 * window's end (n1 - 1 + window - 1), and (seg_form padded/packed) between the keys' ids in
 * each Q batch index's row of segment ids. */
template <bool X> struct QWalk {
    const Prob &p;
    const Masks &mk;
    int64_t kvb;
    int n0, n1, BM, i0, i1;
    __device__ __forceinline__ QWalk(const Prob &p_, const Masks &mk_, int64_t kvb_, int n0_, int n1_, int BM_)
        : p(p_), mk(mk_), kvb(kvb_), n0(n0_), n1(n1_), BM(BM_)
    {
        const int nq = (p.Tq + BM - 1) / BM;
        i0 = p.causal ? n0 / BM : 0, i1 = nq;
        if (mk.window > 0) i1 = (int)min((int64_t)nq, ((int64_t)n1 - 1 + mk.window - 1) / BM + 1);
    }
    /* the query tiles [*a, *z) of Q batch index qb */
    __device__ __forceinline__ void range_of(int64_t qb, int *a, int *z) const
    {
        *a = i0, *z = i1;
        if (X && mk.sk && mk.seg_ranges) {
            int r0, r1;
            seg_query_range(mk, qb / mk.seg_per_row, p.Tq, p.Tk, n0, n1, &r0, &r1);
            *a = max(*a, r0 / BM);
            *z = r1 > r0 ? min(*z, (r1 + BM - 1) / BM) : *a;
        }
    }
    /* the next (Q batch index, tile) after (qb, it) (qb -1: the first); *nb = batch: none */
    __device__ __forceinline__ void advance(int64_t qb, int it, int64_t *nb, int *ni) const
    {
        int a, z;
        if (qb >= 0 && qb < p.batch) {
            range_of(qb, &a, &z);
            if (it + 1 < z) {
                *nb = qb, *ni = it + 1;
                return;
            }
        }
        for (;;) {
            qb = next_q_of(p.map, p.batch, kvb, qb);
            if (qb >= p.batch) break;
            range_of(qb, &a, &z);
            if (a < z) {
                *nb = qb, *ni = a;
                return;
            }
        }
        *nb = p.batch, *ni = 0;
    }
    /* Entering Q batch index qb (X; *mb: the one entered last): its additive mask's offset and
     * the segment ids of this thread's keys key[0], key[1] (-1 past Tk) */
    __device__ __forceinline__ void enter(int64_t qb, const int *key, int64_t *mb, int64_t *moff, int64_t *kid) const
    {
        if (!X || qb == *mb) return;
        *mb = qb;
        if (mk.m) *moff = mask_off(p, mk, qb);
        if (mk.sk)
            for (int h = 0; h < 2; h++)
                kid[h] = key[h] < p.Tk ? seg_at(mk.sk, mk.seg64, (qb / mk.seg_per_row) * p.Tk + key[h]) : -1;
    }
};

/* The log2-domain score of raw product s (= q.k) for query i, key j with the extras (X):
 * softcap, additive mask (at moff), segments (key id kid, query id qid); -inf where masked.
 * dcap (backward) receives d softcap / d s_scaled = 1 - tanh^2. Causal, window and bounds are
 * checked by the caller. */
template <bool X>
__device__ __forceinline__ float score2(const Prob &p, const Masks &mk, float s, int i, int j, int64_t moff,
                                        int64_t kid, int64_t qid, float *dcap)
{
    if (!X) return s * (p.scale * kLog2e);
    float v = s * p.scale;
    if (mk.softcap > 0.f) {
        const float t = tanh_fast(v * mk.softcap_inv);
        v = mk.softcap * t;
        if (dcap) *dcap = 1.f - t * t;
    }
    if (mk.m) v += __ldg(mk.m + moff + (int64_t)i * mk.mrow + (int64_t)j * mk.mcol);
    if (mk.sk && kid != qid) v = -INFINITY;
    return v * kLog2e;
}

/* The segment ids of keys j0 .. j0 + n - 1 of segment row r into shared ids[] (-1 past Tk),
 * by ordinary loads and stores: the tile's barrier publishes them. */
template <int NT>
__device__ __forceinline__ void load_key_ids(const Prob &p, const Masks &mk, int64_t r, int j0, int n, int64_t *ids,
                                             int tid)
{
    for (int i = tid; i < n; i += NT) ids[i] = j0 + i < p.Tk ? seg_at(mk.sk, mk.seg64, r * p.Tk + j0 + i) : -1;
}

/* Whether causal / window / bounds mask key j for query i. */
__device__ __forceinline__ bool outside(const Prob &p, const Masks &mk, int i, int j)
{
    return j >= p.Tk || i >= p.Tq || (p.causal && j > i) || (mk.window > 0 && (int64_t)i - j >= mk.window);
}

} /* namespace mma */
} /* namespace fr_attn */

#endif
