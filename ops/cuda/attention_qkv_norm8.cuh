/* The q/k RMSNorm of AttentionQKV fused into the vectorized staging: the kernels and their
 * shapes (included by attention_qkv_norm.cuh, which launches them; the contract:
 * ops/attention_qkv.h). The same arithmetic per element as the general kernels there (float32;
 * the CPU's statistics are double: within 1e-6 of the CPU, the sums' order aside).
 *
 * Taken where fast_of and the pointers allow (D a multiple of 16, 16-byte aligned tensors, the
 * usual shapes). A thread owns a unit of a head of a token: the 8 features at d and the 8 at
 * d + D / 2, so with the half-split RoPE both elements of every pair are in one thread
 * (interleaved pairs lie within each group of 8); 16-byte loads and stores, 32-bit index math
 * once per thread. A block's x covers the units of a token (Q's heads, then K's: a chunk of them
 * when a token has more than 8 warps of units), its y a few tokens; the row statistics are sums
 * over the D / 16 lanes of a head by shuffles (per-head norm), or over the token's section by a
 * block reduction (full width). The forward reads X's Q and K once and writes the normalized,
 * RoPE'd Q and K where the attention reads them: the same bytes as the staging without the
 * norm, which it replaces (V is staged alone, or read from a bfloat16 X). The backward reads
 * the attention's dQ, dK and X once and writes dX's Q and K columns (in place is safe: a thread
 * reads every element it writes, and no other thread reads it); each thread sums dy xh of its
 * 16 features over the tokens it visits, the block adds its threads' sums in a fixed order into
 * one row of partial sums per block (a wave of blocks: a few hundred rows), and reduce_kernel
 * adds the rows in a fixed order: the weights' gradients are the same bits run to run (no
 * atomics; the grid is a function of the device). */
#ifndef FR_OPS_CUDA_ATTENTION_QKV_NORM8_CUH
#define FR_OPS_CUDA_ATTENTION_QKV_NORM8_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda/attention_qkv_stage.cuh"
extern "C" {
#include "ops/attention_qkv.h"
}

namespace qkv_norm {

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- fused into the vectorized staging ---- */

/* The fused kernels' geometry (fast_of: every value fits an int). */
struct Fast {
    int T, W, D, Hq, Hk;
    int uh;      /* units per head: D / 16 (a unit: features d..d+7 and d+D/2..d+D/2+7) */
    int nq, upt; /* Q's units per token (Hq uh), and Q's and K's ((Hq + Hk) uh) */
    int len[2];  /* the normalized rows: D, or heads D (full width) */
    int off[2], hs[2];
    int rotary, interleaved;
    int64_t cos_b, sin_b;
    unsigned BT; /* tokens (B T) */
    float eps;
};

/* The unit thread (x, y) of block (bx, by) owns: section s (0 Q, 1 K), head h, first feature d
 * (< D / 2); ok: a unit of the token (the last warp may have more lanes than units). */
struct Own {
    int s, h, d;
    bool ok;
};

__device__ __forceinline__ Own own_of(const Fast &g)
{
    const int j = (int)(blockIdx.y * blockDim.x + threadIdx.x), s = j >= g.nq, hj = s ? j - g.nq : j;
    Own o;
    o.s = s, o.h = hj / g.uh, o.d = (hj - o.h * g.uh) * 8, o.ok = j < g.upt;
    return o;
}

/* The sum of v over the normalized row: per head (FULL 0), the uh lanes of the head (aligned
 * groups of a power of two lanes: the xor butterfly leaves every lane the same bits, a + b
 * being b + a); full width, the block's threads of the same section and token slot, warp by
 * warp in a fixed order (red: 2 floats per warp). Every thread of the block calls it. */
template <bool FULL> __device__ __forceinline__ float row_sum(float v, int s, int uh, float *red)
{
    if (!FULL) {
        for (int o = uh >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
    const int nw = (int)(blockDim.x >> 5), w = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    const float q = warp_sum(s ? 0.f : v), k = warp_sum(s ? v : 0.f);
    float *r = red + threadIdx.y * nw * 2;
    if (lane == 0) r[2 * w] = q, r[2 * w + 1] = k;
    __syncthreads();
    float sum = 0.f;
    for (int i = 0; i < nw; i++) sum += r[2 * i + s];
    __syncthreads(); /* (red is written again by the next call) */
    return sum;
}

/* RoPE on a unit in place, forward or transposed (GRAD): a, p the features at d and d + D / 2,
 * cr, sr the tables' row at d. The expressions are qkv_fast::rotate8's (and the general
 * kernels'): the same bits. */
template <bool GRAD>
__device__ __forceinline__ void rope_unit(int interleaved, int hd, const float *cr, const float *sr, float *a, float *p)
{
    qkv_fast::Unit u;
    u.pair = !interleaved;
    if (u.pair) {
        qkv_fast::rotate8<GRAD>(u, hd, cr, sr, a, p);
        return;
    }
    qkv_fast::rotate8<GRAD>(u, hd, cr, sr, a, nullptr); /* pairs within each group of 8 */
    qkv_fast::rotate8<GRAD>(u, hd, cr + hd, sr + hd, p, nullptr);
}

/* Forward: Q and K of X (TX) normalized, scaled, RoPE'd into oq, ok (TO, layouts lq, lk).
 * Shared memory (FULL): 2 floats per warp and token slot. */
template <bool FULL, typename TX, typename TO>
__global__ void __launch_bounds__(FULL ? 512 : 256, FULL ? 1 : 4)
    fwd8_kernel(Fast g, const TX *__restrict__ X, const float *__restrict__ wq, const float *__restrict__ wk,
                const float *__restrict__ cs, const float *__restrict__ sn, TO *oq, TO *ok, qkv_fast::Lay8 lq,
                qkv_fast::Lay8 lk)
{
    extern __shared__ float red[];
    const Own u = own_of(g);
    const int hd = g.D / 2;
    const float *w = (u.s ? wk : wq) + (FULL ? u.h * g.D : 0) + u.d;
    const int col = (u.s ? g.off[1] : g.off[0]) + u.h * (u.s ? g.hs[1] : g.hs[0]) + u.d;
    const qkv_fast::Lay8 l = u.s ? lk : lq;
    TO *out = u.s ? ok : oq;
    const float L = (float)(u.s ? g.len[1] : g.len[0]);
    /* the same trip count for every thread of the block (row_sum's shuffles and barriers) */
    for (unsigned t0 = blockIdx.x * blockDim.y; t0 < g.BT; t0 += gridDim.x * blockDim.y) {
        const unsigned bt = t0 + threadIdx.y;
        const bool live = u.ok && bt < g.BT;
        float a[8], p[8], ss = 0.f;
        if (live) {
            const TX *x = X + (size_t)bt * (unsigned)g.W + col;
            qkv_fast::ld8(x, a), qkv_fast::ld8(x + hd, p);
            for (int e = 0; e < 8; e++) ss = fmaf(a[e], a[e], ss);
            for (int e = 0; e < 8; e++) ss = fmaf(p[e], p[e], ss);
        }
        ss = row_sum<FULL>(ss, u.s, g.uh, red);
        if (!live) continue;
        const float inv = rsqrtf(ss / L + g.eps);
        {
            float w8[8]; /* (loaded here, from L1: fewer registers across row_sum) */
            qkv_fast::ld8(w, w8);
            for (int e = 0; e < 8; e++) a[e] = a[e] * inv * w8[e];
            qkv_fast::ld8(w + hd, w8);
            for (int e = 0; e < 8; e++) p[e] = p[e] * inv * w8[e];
        }
        const unsigned b = bt / (unsigned)g.T, t = bt - b * (unsigned)g.T;
        if (g.rotary) {
            const int64_t r = (int64_t)t * g.D + u.d;
            rope_unit<false>(g.interleaved, hd, cs + b * g.cos_b + r, sn + b * g.sin_b + r, a, p);
        }
        TO *o = out + b * l.sb + u.h * l.sh + t * l.st + u.d;
        qkv_fast::st8(o, a), qkv_fast::st8(o + hd, p);
    }
}

/* Backward: from the gradients for the staged Q, K (gq, gk: TS, layouts lq, lk; they may lie in
 * dX itself) to dX's Q and K columns (TD), X (TX) for the statistics; one row of len[0] + len[1]
 * partial sums of the weights' gradients per block (row blockIdx.y gridDim.x + blockIdx.x of
 * part). Shared memory (fast_smem): each thread's 16 sums of dy xh (17 floats apart: no bank
 * conflicts; there rather than in registers, for occupancy), then row_sum's. */
template <bool FULL, typename TS, typename TX, typename TD>
__global__ void __launch_bounds__(FULL ? 512 : 256, FULL ? 1 : 3)
    bwd8_kernel(Fast g, const TX *X, const float *__restrict__ wq, const float *__restrict__ wk,
                const float *__restrict__ cs, const float *__restrict__ sn, const TS *gq, const TS *gk,
                qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, TD *dX, float *__restrict__ part)
{
    extern __shared__ float sm[];
    const int tid = (int)(threadIdx.y * blockDim.x + threadIdx.x), nt = (int)(blockDim.x * blockDim.y);
    float *acc = sm + tid * 17, *red = sm + nt * 17;
    const Own u = own_of(g);
    const int hd = g.D / 2;
    const float *w = (u.s ? wk : wq) + (FULL ? u.h * g.D : 0) + u.d;
    const int col = (u.s ? g.off[1] : g.off[0]) + u.h * (u.s ? g.hs[1] : g.hs[0]) + u.d;
    const qkv_fast::Lay8 l = u.s ? lk : lq;
    const TS *src = u.s ? gk : gq;
    const float L = (float)(u.s ? g.len[1] : g.len[0]);
    for (int e = 0; e < 16; e++) acc[e] = 0.f; /* (the thread's own: no barrier needed) */
    for (unsigned t0 = blockIdx.x * blockDim.y; t0 < g.BT; t0 += gridDim.x * blockDim.y) {
        const unsigned bt = t0 + threadIdx.y;
        const bool live = u.ok && bt < g.BT;
        const unsigned b = bt / (unsigned)g.T, t = bt - b * (unsigned)g.T;
        float ga[8], gp[8], a[8], p[8], ss = 0.f;
        for (int e = 0; e < 8; e++) ga[e] = gp[e] = a[e] = p[e] = 0.f;
        if (live) {
            const TS *gs = src + b * l.sb + u.h * l.sh + t * l.st + u.d;
            qkv_fast::ld8(gs, ga), qkv_fast::ld8(gs + hd, gp);
            const TX *x = X + (size_t)bt * (unsigned)g.W + col;
            qkv_fast::ld8(x, a), qkv_fast::ld8(x + hd, p);
            for (int e = 0; e < 8; e++) ss = fmaf(a[e], a[e], ss);
            for (int e = 0; e < 8; e++) ss = fmaf(p[e], p[e], ss);
            if (g.rotary) { /* the gradient for the normalized values: RoPE transposed */
                const int64_t r = (int64_t)t * g.D + u.d;
                rope_unit<true>(g.interleaved, hd, cs + b * g.cos_b + r, sn + b * g.sin_b + r, ga, gp);
            }
        }
        ss = row_sum<FULL>(ss, u.s, g.uh, red);
        /* a thread with no unit adds nothing (0, not rsqrt(eps)'s product with 0) */
        const float inv = live ? rsqrtf(ss / L + g.eps) : 0.f;
        float w0[8], w1[8], sgx = 0.f;
        if (live) qkv_fast::ld8(w, w0), qkv_fast::ld8(w + hd, w1); /* (from L1: fewer registers) */
        else
            for (int e = 0; e < 8; e++) w0[e] = w1[e] = 0.f;
        for (int e = 0; e < 8; e++) {
            const float xh = a[e] * inv;
            acc[e] += ga[e] * xh;
            sgx = fmaf(ga[e] * w0[e], xh, sgx);
        }
        for (int e = 0; e < 8; e++) {
            const float xh = p[e] * inv;
            acc[8 + e] += gp[e] * xh;
            sgx = fmaf(gp[e] * w1[e], xh, sgx);
        }
        sgx = row_sum<FULL>(sgx, u.s, g.uh, red);
        if (!live) continue;
        const float mgx = sgx / L;
        for (int e = 0; e < 8; e++) {
            ga[e] = inv * (ga[e] * w0[e] - a[e] * inv * mgx);
            gp[e] = inv * (gp[e] * w1[e] - p[e] * inv * mgx);
        }
        TD *dx = dX + (size_t)bt * (unsigned)g.W + col;
        qkv_fast::st8(dx, ga), qkv_fast::st8(dx + hd, gp);
    }
    float *pr = part + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * (unsigned)(g.len[0] + g.len[1]);
    if (FULL) { /* one token slot (blockDim.y 1) and one chunk: every column is one thread's */
        if (u.ok) {
            float *c = pr + (u.s ? g.len[0] : 0) + u.h * g.D + u.d;
            for (int e = 0; e < 8; e++) c[e] = acc[e], c[hd + e] = acc[8 + e];
        }
        return;
    }
    /* per head: column (s, d) adds the threads of every head of section s and every token slot
     * that own feature d, in that fixed order (0 where the block's chunk has none) */
    __syncthreads();
    const int x0 = (int)(blockIdx.y * blockDim.x);
    for (int c = tid; c < 2 * g.D; c += nt) {
        const int s = c >= g.D, d = c - s * g.D, in = d < hd ? d : d - hd, e = (in & 7) + (d < hd ? 0 : 8);
        const int first = (s ? g.nq : 0) + (in >> 3) - x0, heads = s ? g.Hk : g.Hq;
        float sum = 0.f;
        for (int y = 0; y < (int)blockDim.y; y++)
            for (int h = 0; h < heads; h++) {
                const int x = first + h * g.uh;
                if (x >= 0 && x < (int)blockDim.x) sum += sm[(y * (int)blockDim.x + x) * 17 + e];
            }
        pr[c] = sum;
    }
}

/* ---- the fused kernels' shapes ---- */

constexpr int64_t kFastRows = 2048;    /* the fused backward's partial rows: at most this many */
constexpr int64_t kFastPart = 8 << 20; /* and this many bytes */

/* The fused kernels' geometry and block shape: x a chunk of a token's units (whole warps: for
 * a per-head norm at most 8 of them, the token's units split evenly into chunks; for a full
 * width norm all of them, at most 512 threads), y token slots (per head: blocks of up to 256
 * threads; full width: 1). */
struct FastShape {
    Fast g;
    bool full;
    int bx, by, chunks;
    unsigned tok_blocks; /* blocks of by tokens covering B T */
};

/* The fused kernels' rows of partial sums for the backward: at most this many. */
inline int64_t fast_rows_cap(const fr_attn_qkv_geom &q)
{
    const int64_t by_bytes = kFastPart / ((q.qn_len + q.kn_len) * 4);
    return by_bytes < 1 ? 1 : by_bytes < kFastRows ? by_bytes : kFastRows;
}

/* Whether the fused kernels take the node's shapes (the pointers are checked at the launch):
 * a whole or no rotary, D a multiple of 16, all Q and K rows per head (D / 16 a power of two up
 * to 32: a head's lanes in one warp) or all full width (a token's units in one block), columns
 * and counts that fit an int, multiples of 8 (16-byte units). */
inline bool fast_of(const fr_attn_qkv_geom &q, FastShape *f)
{
    if (!q.qk_norm || q.heads_packing || q.D < 16 || q.D % 16 || q.Dv < 8 || q.Dv % 8) return false;
    if (q.rotary && q.rd != q.D) return false;
    if (q.W > INT32_MAX || q.W % 8 || q.B * q.T > INT32_MAX || q.T < 1) return false;
    const int64_t cols[6] = {q.q_off, q.k_off, q.v_off, q.q_hs, q.k_hs, q.v_hs};
    for (int i = 0; i < 6; i++)
        if (cols[i] % 8 || cols[i] > INT32_MAX) return false;
    const bool full = q.qn_len != q.D || q.kn_len != q.D; /* (a single head's is both) */
    if (q.qn_len != (full ? q.Hq * q.D : q.D) || q.kn_len != (full ? q.Hk * q.D : q.D)) return false;
    const int64_t uh = q.D / 16, upt = (q.Hq + q.Hk) * uh, nw = (upt + 31) / 32;
    if (full ? nw > 16 : uh > 32 || (uh & (uh - 1)) || nw > 8 * (int64_t)65535) return false;
    FastShape r;
    r.full = full;
    r.chunks = full ? 1 : (int)((nw + 7) / 8);
    r.bx = 32 * (int)((nw + r.chunks - 1) / r.chunks);
    r.by = full || r.bx >= 256 ? 1 : 256 / r.bx;
    const int64_t bt = q.B * q.T;
    r.tok_blocks = (unsigned)((bt + r.by - 1) / r.by);
    Fast &g = r.g;
    g.T = (int)q.T, g.W = (int)q.W, g.D = (int)q.D, g.Hq = (int)q.Hq, g.Hk = (int)q.Hk;
    g.uh = (int)uh, g.nq = (int)(q.Hq * uh), g.upt = (int)upt;
    g.len[0] = (int)q.qn_len, g.len[1] = (int)q.kn_len;
    g.off[0] = (int)q.q_off, g.off[1] = (int)q.k_off, g.hs[0] = (int)q.q_hs, g.hs[1] = (int)q.k_hs;
    g.rotary = q.rotary, g.interleaved = q.interleaved;
    g.cos_b = q.cos_b, g.sin_b = q.sin_b;
    g.BT = (unsigned)bt;
    g.eps = q.qk_norm_eps;
    *f = r;
    return true;
}

/* The vectorized staging's geometry for V alone (no rotated units, no other Q or K units). */
inline bool v8_of(const fr_attn_qkv_geom &q, qkv_fast::Geo8 *g8)
{
    const int64_t units = q.Hk * (q.Dv / 8), n = q.B * q.T * units;
    if (q.Dv % 8 || n >= ((int64_t)1 << 31)) return false;
    *g8 = qkv_fast::Geo8{(unsigned)units, 0u, (unsigned)n, (int)q.T, (int)q.W, (int)q.D, (int)q.Dv, (int)q.Hq,
                         (int)q.Hk, 0, 0, 0, 0, 0, 0, 0, (int)q.q_off, (int)q.k_off, (int)q.v_off,
                         (int)q.q_hs, (int)q.k_hs, (int)q.v_hs};
    return true;
}

} /* namespace qkv_norm */

#endif
