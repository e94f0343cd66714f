/* The q/k RMSNorm of AttentionQKV on the GPU (included by attention_qkv.cu only; the contract:
 * ops/attention_qkv.h).
 *
 * Two ways, the same arithmetic per element (float32; the CPU's statistics are double: within
 * 1e-6 of the CPU, the sums' order aside):
 *
 * Fused into the vectorized staging (fwd8_kernel, bwd8_kernel; taken where fast_of and the
 * pointers allow: D a multiple of 16, 16-byte aligned tensors, the usual shapes). A thread owns
 * a unit of a head of a token: the 8 features at d and the 8 at d + D / 2, so with the half-split
 * RoPE both elements of every pair are in one thread (interleaved pairs lie within each group of
 * 8); 16-byte loads and stores, 32-bit index math once per thread. A block's x covers the units
 * of a token (Q's heads, then K's: a chunk of them when a token has more than 8 warps of units),
 * its y a few tokens; the row statistics are sums over the D / 16 lanes of a head by shuffles
 * (per-head norm), or over the token's section by a block reduction (full width). The forward
 * reads X's Q and K once and writes the normalized, RoPE'd Q and K where the attention reads
 * them: the same bytes as the staging without the norm, which it replaces (V is staged alone, or
 * read from a bfloat16 X). The backward reads the attention's dQ, dK and X once and writes dX's
 * Q and K columns (in place is safe: a thread reads every element it writes, and no other
 * thread reads it); each thread sums dy xh of its 16 features over the tokens it visits in
 * registers, the block adds its threads' sums in a fixed order into one row of partial sums per
 * block (a few hundred rows), and reduce_kernel adds the rows in a fixed order: the weights'
 * gradients are the same bits run to run (no atomics), the grid being a function of the device.
 *
 * The general kernels (any shape or alignment): one warp per normalized row, the row staged in
 * shared memory, its mean square reduced across the warp, normalized and scaled, and RoPE
 * applied before the warp writes the row into the section layout the attention kernels read;
 * the staging pass before it has written Q and K without the norm and these rows overwrite
 * them. Backward, per row: the gradient for the normalized and rotated values (the attention's
 * dQ or dK, in its layout) gets RoPE's transpose, then RMSNorm's backward with the row's
 * statistics recomputed from X: dx = inv (g w - xh mean(g w xh)), xh = x inv. Each warp sums
 * g xh for the weights' gradient over the rows it visits in shared memory and writes that
 * partial sum; reduce_kernel adds the partial sums in a fixed order (deterministic).
 *
 * The host launchers at the end size the grids, the shared memory and the backward's partial
 * sums (kept at the end of the node's scratch: reserve) from the node's geometry. */
#ifndef FR_OPS_CUDA_ATTENTION_QKV_NORM_CUH
#define FR_OPS_CUDA_ATTENTION_QKV_NORM_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda/attention_qkv_stage.cuh"
#include "ops/cuda/cuda_kernel.h"
extern "C" {
#include "ops/attention_qkv.h"
}

namespace qkv_norm {

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* A section's layout: element (b, h, t, d) at b sb + h sh + t st + d. */
struct Lay {
    int64_t sb, sh, st;
};

struct Geo {
    int64_t T, W, D;
    int64_t off[2], len[2], heads[2]; /* Q, K: first column, row length, head count */
    int64_t rows[2];                  /* B T heads D / len */
    float eps;
    int rotary, interleaved;
    int64_t cos_b, sin_b;
};

/* Where row r of all (Q rows first) lies: section, batch, token, first head, X offset. */
struct Row {
    int s;
    int64_t b, t, h0, x;
};

__device__ __forceinline__ Row row_of(const Geo &g, int64_t r)
{
    Row w;
    w.s = r < g.rows[0] ? 0 : 1;
    if (w.s) r -= g.rows[0];
    const int64_t per = g.heads[w.s] * g.D / g.len[w.s], bt = r / per, rr = r % per;
    w.b = bt / g.T, w.t = bt % g.T, w.h0 = rr * (g.len[w.s] / g.D);
    w.x = bt * g.W + g.off[w.s] + rr * g.len[w.s];
    return w;
}

/* Partner of feature d in a rotated head and its sign (ops/rotary.h): forward
 * y_d = x_d c_d + sign x_p s_d, transposed y_d = x_d c_d - sign x_p s_p (attention_qkv.cu's
 * general staging kernels use it too). */
__device__ __forceinline__ int64_t partner(int64_t d, int64_t D, int il, float *sign)
{
    if (il) {
        *sign = (d & 1) ? 1.f : -1.f;
        return d ^ 1;
    }
    const int64_t h = D / 2;
    *sign = d < h ? -1.f : 1.f;
    return d < h ? d + h : d - h;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Forward: rows of X (TX) normalized, scaled, RoPE'd into q, k (TO, layouts lq, lk). Shared
 * memory: a row of max(len) floats per warp. */
template <typename TO, typename TX>
__global__ void stage_kernel(Geo g, const TX *__restrict__ X, const float *__restrict__ wq,
                             const float *__restrict__ wk, const float *__restrict__ cs, const float *__restrict__ sn,
                             TO *q, TO *k, Lay lq, Lay lk)
{
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    const int64_t most = g.len[0] > g.len[1] ? g.len[0] : g.len[1];
    float *buf = smem + (int64_t)warp * most;
    const int64_t n = g.rows[0] + g.rows[1];
    for (int64_t r = (int64_t)blockIdx.x * wpb + warp; r < n; r += (int64_t)gridDim.x * wpb) {
        const Row w = row_of(g, r);
        const int64_t L = g.len[w.s];
        const float *wt = w.s ? wk : wq;
        float ss = 0.f;
        for (int64_t j = lane; j < L; j += 32) {
            const float v = ld(X + w.x + j);
            buf[j] = v;
            ss = fmaf(v, v, ss);
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)L + g.eps);
        for (int64_t j = lane; j < L; j += 32) buf[j] = buf[j] * inv * wt[j];
        __syncwarp();
        const Lay &l = w.s ? lk : lq;
        TO *out = (w.s ? k : q) + w.b * l.sb + w.t * l.st;
        for (int64_t j = lane; j < L; j += 32) {
            const int64_t hh = j / g.D, d = j % g.D;
            float y = buf[j];
            if (g.rotary) {
                float sign;
                const int64_t p = partner(d, g.D, g.interleaved, &sign);
                const float *cr = cs + w.b * g.cos_b + w.t * g.D, *sr = sn + w.b * g.sin_b + w.t * g.D;
                y = fmaf(y, cr[d], sign * buf[hh * g.D + p] * sr[d]);
            }
            st(out + (w.h0 + hh) * l.sh + d, y);
        }
        __syncwarp();
    }
}

/* Backward: from the gradients for the staged Q, K (gq, gk: TS, layouts lq, lk) to dX's Q and
 * K columns (TD); X (TX) for the statistics. part: per warp of the grid, len[0] + len[1]
 * partial sums of the weights' gradients. Shared memory per warp: three rows (the gradient
 * as read, X, the gradient with RoPE transposed) and the two accumulators. */
template <typename TS, typename TX, typename TD>
__global__ void grad_kernel(Geo g, const TX *__restrict__ X, const float *__restrict__ wq, const float *__restrict__ wk,
                            const float *__restrict__ cs, const float *__restrict__ sn, const TS *gq, const TS *gk,
                            Lay lq, Lay lk, TD *dX, float *__restrict__ part)
{
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    const int64_t most = g.len[0] > g.len[1] ? g.len[0] : g.len[1], acc_n = g.len[0] + g.len[1];
    float *gr = smem + (int64_t)warp * (3 * most + acc_n), *xr = gr + most, *yr = xr + most, *acc = yr + most;
    for (int64_t j = lane; j < acc_n; j += 32) acc[j] = 0.f;
    __syncwarp(); /* (K's accumulators start at len[0]: other lanes' elements) */
    const int64_t n = g.rows[0] + g.rows[1];
    for (int64_t r = (int64_t)blockIdx.x * wpb + warp; r < n; r += (int64_t)gridDim.x * wpb) {
        const Row w = row_of(g, r);
        const int64_t L = g.len[w.s];
        const float *wt = w.s ? wk : wq;
        float *a = acc + (w.s ? g.len[0] : 0);
        const Lay &l = w.s ? lk : lq;
        const TS *src = (w.s ? gk : gq) + w.b * l.sb + w.t * l.st;
        float ss = 0.f;
        for (int64_t j = lane; j < L; j += 32) {
            gr[j] = ld(src + (w.h0 + j / g.D) * l.sh + j % g.D);
            const float v = ld(X + w.x + j);
            xr[j] = v;
            ss = fmaf(v, v, ss);
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)L + g.eps);
        __syncwarp();
        float sgx = 0.f;
        for (int64_t j = lane; j < L; j += 32) { /* RoPE transposed (partners read from gr) */
            float y = gr[j];
            if (g.rotary) {
                const int64_t hh = j / g.D, d = j % g.D;
                float sign;
                const int64_t p = partner(d, g.D, g.interleaved, &sign);
                const float *cr = cs + w.b * g.cos_b + w.t * g.D, *sr = sn + w.b * g.sin_b + w.t * g.D;
                y = fmaf(y, cr[d], -sign * gr[hh * g.D + p] * sr[p]);
            }
            const float xh = xr[j] * inv;
            a[j] += y * xh;
            sgx = fmaf(y * wt[j], xh, sgx);
            yr[j] = y;
        }
        const float mgx = warp_sum(sgx) / (float)L;
        for (int64_t j = lane; j < L; j += 32) st(dX + w.x + j, inv * (yr[j] * wt[j] - xr[j] * inv * mgx));
        __syncwarp();
    }
    __syncwarp();
    const int64_t gw = (int64_t)blockIdx.x * wpb + warp;
    for (int64_t j = lane; j < acc_n; j += 32) part[gw * acc_n + j] = acc[j];
}

/* dW[j] = sum over the nw partial rows; section s of the partials at col0. Block (32, 32):
 * threadIdx.x a column of 32, threadIdx.y the partial rows y, y + 32, ..., summed in that
 * order and then over y in a fixed tree (deterministic); coalesced 128-byte row reads. */
__global__ void __launch_bounds__(1024) reduce_kernel(const float *__restrict__ part, int64_t nw, int64_t acc_n,
                                                      int64_t col0, int64_t len, float *__restrict__ dw)
{
    __shared__ float red[32][33];
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (j < len)
        for (int64_t w = threadIdx.y; w < nw; w += 32) s += part[w * acc_n + col0 + j];
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = 16; h > 0; h >>= 1) {
        if (threadIdx.y < h) red[threadIdx.y][threadIdx.x] += red[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && j < len) dw[j] = red[0][threadIdx.x];
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
                         (int)q.Hk, 0, 0, 0, 0, 0, 0, 0, {(int)q.q_off, (int)q.k_off, (int)q.v_off},
                         {(int)q.q_hs, (int)q.k_hs, (int)q.v_hs}};
    return true;
}

inline Geo geo_of(const fr_attn_qkv_geom &q)
{
    Geo g;
    g.T = q.T, g.W = q.W, g.D = q.D;
    g.off[0] = q.q_off, g.off[1] = q.k_off;
    g.len[0] = q.qn_len, g.len[1] = q.kn_len;
    g.heads[0] = q.Hq, g.heads[1] = q.Hk;
    for (int s = 0; s < 2; s++) g.rows[s] = q.qn_len ? q.B * q.T * g.heads[s] * q.D / g.len[s] : 0;
    g.eps = q.qk_norm_eps;
    g.rotary = q.rotary, g.interleaved = q.interleaved;
    g.cos_b = q.cos_b, g.sin_b = q.sin_b;
    return g;
}

/* ---- launchers (attention_qkv.cu calls them with the node's geometry) ---- */

constexpr size_t kAlign = 256;
constexpr size_t kNormSmem = 48 * 1024; /* shared memory without opting in */
constexpr int64_t kNormPart = 4 << 20;  /* the backward's partial sums: at most this many bytes */
constexpr int64_t kNormWarps = 4224;    /* and at most this many warps (32 per SM of an H200) */

/* Warps per block for rows of per_warp floats of shared memory each (0: too long a row). */
inline int warps_per_block(int64_t per_warp)
{
    const int64_t w = (int64_t)kNormSmem / (per_warp * 4);
    return w < 1 ? 0 : w > 8 ? 8 : (int)w;
}

struct Grid {
    int wpb;
    unsigned blocks;
    int64_t acc_n, per_warp;
    size_t part_bytes; /* the backward's partial sums */
};

inline Grid grid_of(const fr_attn_qkv_geom &q, int backward)
{
    const Geo g = geo_of(q);
    Grid r = {};
    const int64_t most = g.len[0] > g.len[1] ? g.len[0] : g.len[1], rows = g.rows[0] + g.rows[1];
    r.acc_n = g.len[0] + g.len[1];
    r.per_warp = backward ? 3 * most + r.acc_n : most;
    r.wpb = warps_per_block(r.per_warp);
    if (!r.wpb) return r;
    /* the backward's grid: enough warps to fill the GPU (a partial sum each, added up by
       reduce_kernel: fewer partials, less to add), at least 1024 */
    int64_t cap = kNormPart / (r.acc_n * 4);
    if (cap > kNormWarps) cap = kNormWarps;
    if (cap < 1024) cap = 1024;
    int64_t warps = backward ? (rows < cap ? rows : cap) : rows;
    if (warps < 1) warps = 1;
    int64_t blocks = (warps + r.wpb - 1) / r.wpb;
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    r.blocks = (unsigned)blocks;
    r.part_bytes = backward ? (size_t)(blocks * r.wpb * r.acc_n) * sizeof(float) : 0;
    return r;
}

/* The scratch the norm's backward adds at the end of the node's scratch: the partial sums of
 * the general kernels or of the fused ones (which runs is known at the launch only). */
inline size_t reserve(const fr_attn_qkv_geom &q, int backward)
{
    if (!q.qk_norm || !backward) return 0;
    size_t bytes = grid_of(q, 1).part_bytes;
    FastShape f;
    if (fast_of(q, &f)) {
        const size_t fb = (size_t)(fast_rows_cap(q) * (q.qn_len + q.kn_len)) * sizeof(float);
        if (fb > bytes) bytes = fb;
    }
    return (bytes + kAlign - 1) / kAlign * kAlign + kAlign;
}

inline FR_NODISCARD fr_status check(const fr_node *n, const fr_attn_qkv_geom &q, int backward)
{
    if (!q.qk_norm || grid_of(q, backward).wpb) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "q/k norm rows of %lld features are too long for the CUDA kernels",
                         (long long)(q.qn_len > q.kn_len ? q.qn_len : q.kn_len));
}

/* The norm's geometry of node n (weights at inputs 5, 6; the gradient's at 8, 9) into q. */
inline FR_NODISCARD fr_status read_graph(const fr_graph *g, const fr_node *n, int backward, fr_attn_qkv_geom *q)
{
    const int wi = backward ? FR_ATTN_QKV_GRAD_QNORM : FR_ATTN_QKV_QNORM;
    const fr_value *wq = n->n_inputs > wi + 1 && n->inputs[wi] >= 0 ? &g->values[n->inputs[wi]] : NULL;
    const fr_value *wk = wq && n->inputs[wi + 1] >= 0 ? &g->values[n->inputs[wi + 1]] : NULL;
    FR_TRY(fr_attn_qkv_norm_geometry(n, wq ? wq->rank : 0, wq ? wq->dims : NULL, wk ? wk->rank : 0,
                                     wk ? wk->dims : NULL, q));
    return check(n, *q, backward);
}

/* The same from a run's tensors, checked for the kernels; the gradient's outputs dq_norm,
 * dk_norm (1, 2) checked against the weights. */
inline FR_NODISCARD fr_status read_run(const fr_cuda_kctx *k, int backward, fr_attn_qkv_geom *q)
{
    const fr_node *n = k->node;
    const int wi = backward ? FR_ATTN_QKV_GRAD_QNORM : FR_ATTN_QKV_QNORM;
    const fr_tensor *wq = k->n_in > wi + 1 ? k->in[wi] : NULL, *wk = k->n_in > wi + 1 ? k->in[wi + 1] : NULL;
    FR_TRY(fr_attn_qkv_norm_geometry(n, wq ? wq->rank : 0, wq ? wq->dims : NULL, wk ? wk->rank : 0,
                                     wk ? wk->dims : NULL, q));
    FR_TRY(check(n, *q, backward));
    for (int o = 1; backward && o < k->n_out; o++) {
        if (!k->out[o]) continue;
        if (!q->qk_norm) return fr_node_error(n, FR_ERR_GRAPH, "outputs dq_norm, dk_norm need inputs q_norm, k_norm");
        const fr_tensor *w = o == 1 ? wq : wk;
        FR_TRY(fr_check_out(n, k->out[o], FR_F32, w->rank, w->dims));
    }
    return FR_OK;
}

/* An empty X: the weights' gradients are 0. */
inline FR_NODISCARD fr_status zero_grads(const fr_cuda_kctx *k)
{
    for (int o = 1; o < k->n_out; o++)
        if (k->out[o]) FR_CUDA_TRY(cudaMemsetAsync(k->out[o]->data, 0, k->out[o]->nbytes, k->cu->stream));
    return FR_OK;
}

inline const float *in_f32(const fr_cuda_kctx *k, int i)
{
    return k->n_in > i && k->in[i] ? (const float *)k->in[i]->data : nullptr;
}

/* Q and K rewritten, normalized then RoPE'd, into q, k (layouts lq, lk), from X as stored. */
template <typename TO, class L> void stage(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward,
                                           const float *cs, const float *sn, TO *oq, TO *ok, const L &lq_, const L &lk_,
                                           cudaStream_t stream)
{
    const Grid r = grid_of(q, 0);
    const Geo g = geo_of(q);
    const int wi = backward ? FR_ATTN_QKV_GRAD_QNORM : FR_ATTN_QKV_QNORM;
    const float *wq = in_f32(k, wi), *wk = in_f32(k, wi + 1);
    const size_t smem = (size_t)(r.wpb * r.per_warp) * sizeof(float);
    const Lay lq{lq_.sb, lq_.sh, lq_.st}, lk{lk_.sb, lk_.sh, lk_.st}; /* (the caller's layout type) */
    const fr_tensor *X = k->in[0];
    if (X->dtype == FR_BF16)
        stage_kernel<TO, bf16>
            <<<r.blocks, 32 * r.wpb, smem, stream>>>(g, (const bf16 *)X->data, wq, wk, cs, sn, oq, ok, lq, lk);
    else
        stage_kernel<TO, float>
            <<<r.blocks, 32 * r.wpb, smem, stream>>>(g, (const float *)X->data, wq, wk, cs, sn, oq, ok, lq, lk);
}

/* stage into the Q and K sections of a packed bf16 copy x16 (layouts ls[0], ls[1]), which
 * cuDNN then reads for Q and K (qkv[0], qkv[1]) */
template <class L>
void stage_copy(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward, const float *cs, const float *sn,
                bf16 *x16, const L *ls, const bf16 **qkv, cudaStream_t stream)
{
    stage<bf16>(k, q, backward, cs, sn, x16, x16 + q.k_off, ls[0], ls[1], stream);
    qkv[0] = x16, qkv[1] = x16 + q.k_off;
}

/* The backward's partial sums: the last reserve(q, 1) bytes of the node's scratch, aligned. */
inline FR_NODISCARD fr_status part_of(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, float **part)
{
    const size_t res = reserve(q, 1);
    if (!k->scratch || k->scratch_bytes < res)
        return fr_node_error(k->node, FR_ERR_INTERNAL, "scratch of %zu bytes, the q/k norm needs %zu", k->scratch_bytes,
                             res);
    *part = (float *)(((uintptr_t)k->scratch + k->scratch_bytes - res + kAlign - 1) / kAlign * kAlign);
    return FR_OK;
}

/* The weights' gradients (outputs 1, 2) from rows of acc_n partial sums (Q's len[0] first). */
inline FR_NODISCARD fr_status reduce_weights(const fr_cuda_kctx *k, const float *part, int64_t rows, int64_t acc_n,
                                             const int64_t *len)
{
    for (int s = 0; s < 2; s++) {
        fr_tensor *dw = k->n_out > 1 + s ? k->out[1 + s] : NULL;
        if (!dw) continue;
        reduce_kernel<<<(unsigned)((len[s] + 31) / 32), dim3(32, 32), 0, k->cu->stream>>>(
            part, rows, acc_n, s ? len[0] : 0, len[s], (float *)dw->data);
    }
    return fr_cuda_check_launch(k->node, "AttentionQKVGrad(q/k norm weights)");
}

template <typename TS, typename TX> void grad_x(const Grid &r, const Geo &g, const fr_tensor *X, const float *wq,
                                                const float *wk, const float *cs, const float *sn, const TS *gq,
                                                const TS *gk, const Lay &a, const Lay &b, fr_tensor *dX, float *part,
                                                cudaStream_t stream)
{
    const size_t smem = (size_t)(r.wpb * r.per_warp) * sizeof(float);
    const TX *x = (const TX *)X->data;
    if (dX->dtype == FR_BF16)
        grad_kernel<TS, TX, bf16>
            <<<r.blocks, 32 * r.wpb, smem, stream>>>(g, x, wq, wk, cs, sn, gq, gk, a, b, (bf16 *)dX->data, part);
    else
        grad_kernel<TS, TX, float>
            <<<r.blocks, 32 * r.wpb, smem, stream>>>(g, x, wq, wk, cs, sn, gq, gk, a, b, (float *)dX->data, part);
}

/* The norm's backward: dX's Q and K columns from the gradients for the staged Q and K (gq, gk
 * in layouts lq, lk; they may lie inside dX itself), and the weights' gradients (outputs 1, 2). */
template <typename TS, class L> FR_NODISCARD fr_status grad(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q,
                                                            const float *cs, const float *sn, const TS *gq,
                                                            const TS *gk, const L &a_, const L &b_)
{
    const Grid r = grid_of(q, 1);
    const Geo g = geo_of(q);
    float *part = NULL;
    FR_TRY(part_of(k, q, &part));
    const float *wq = in_f32(k, FR_ATTN_QKV_GRAD_QNORM), *wk = in_f32(k, FR_ATTN_QKV_GRAD_QNORM + 1);
    cudaStream_t stream = k->cu->stream;
    const Lay a{a_.sb, a_.sh, a_.st}, b{b_.sb, b_.sh, b_.st}; /* (the caller's layout type) */
    if (k->in[0]->dtype == FR_BF16)
        grad_x<TS, bf16>(r, g, k->in[0], wq, wk, cs, sn, gq, gk, a, b, k->out[0], part, stream);
    else
        grad_x<TS, float>(r, g, k->in[0], wq, wk, cs, sn, gq, gk, a, b, k->out[0], part, stream);
    FR_TRY(fr_cuda_check_launch(k->node, "AttentionQKVGrad(q/k norm)"));
    return reduce_weights(k, part, (int64_t)r.blocks * r.wpb, r.acc_n, g.len);
}

/* ---- the fused kernels' launchers ---- */

inline bool a16(const void *p) { return qkv_fast::aligned16(p); }

template <class L> inline bool lay_ok(const L &l) { return l.sb % 8 == 0 && l.sh % 8 == 0 && l.st % 8 == 0; }

template <class L> inline qkv_fast::Lay8 lay8_of(const L &l) { return qkv_fast::Lay8{l.sb, l.sh, l.st}; }

/* Shared memory of the fused kernels: the backward's per-thread sums, then row_sum's (full width). */
inline size_t fast_smem(const FastShape &f, int backward)
{
    const size_t red = f.full ? (size_t)(f.by * (f.bx / 32) * 2) : 0;
    return (red + (backward ? (size_t)(f.bx * f.by * 17) : 0)) * sizeof(float);
}

template <bool FULL, typename TX, typename TO>
void fwd8(const FastShape &f, const TX *X, const float *wq, const float *wk, const float *cs, const float *sn, TO *oq,
          TO *ok, qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, cudaStream_t stream)
{
    fwd8_kernel<FULL, TX, TO><<<dim3(f.tok_blocks, (unsigned)f.chunks), dim3((unsigned)f.bx, (unsigned)f.by),
                                fast_smem(f, 0), stream>>>(f.g, X, wq, wk, cs, sn, oq, ok, lq, lk);
}

template <typename TX, typename TO>
void fwd8_x(const FastShape &f, const TX *X, const float *wq, const float *wk, const float *cs, const float *sn, TO *oq,
            TO *ok, qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, cudaStream_t stream)
{
    if (f.full)
        fwd8<true, TX, TO>(f, X, wq, wk, cs, sn, oq, ok, lq, lk, stream);
    else
        fwd8<false, TX, TO>(f, X, wq, wk, cs, sn, oq, ok, lq, lk, stream);
}

/* The fused forward, where it applies (else false, nothing launched): Q and K of X normalized
 * and RoPE'd into oq, ok (layouts l[0], l[1]); V staged into ov (layout l[2]) unless ov is
 * NULL. The caller checks the launches. */
template <typename TO, class L>
bool stage_fast(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward, const float *cs, const float *sn,
                TO *oq, TO *ok, TO *ov, const L *l, cudaStream_t stream)
{
    FastShape f;
    qkv_fast::Geo8 v8;
    if (!fast_of(q, &f) || (ov && !v8_of(q, &v8))) return false;
    const int wi = backward ? FR_ATTN_QKV_GRAD_QNORM : FR_ATTN_QKV_QNORM;
    const float *wq = in_f32(k, wi), *wk = in_f32(k, wi + 1);
    const fr_tensor *X = k->in[0];
    if (!wq || !wk || !a16(wq) || !a16(wk) || !a16(X->data) || !a16(oq) || !a16(ok) || (ov && !a16(ov))) return false;
    if (q.rotary && (!cs || !sn || !a16(cs) || !a16(sn))) return false;
    if (!lay_ok(l[0]) || !lay_ok(l[1]) || (ov && !lay_ok(l[2]))) return false;
    const qkv_fast::Lay8 lq = lay8_of(l[0]), lk = lay8_of(l[1]);
    if (X->dtype == FR_BF16) {
        const bf16 *x = (const bf16 *)X->data;
        if (ov)
            qkv_fast::rope8_kernel<false, TO, bf16, float><<<qkv_fast::blocks8(v8.n), 256, 0, stream>>>(
                v8, x, nullptr, ov, ov, ov, lay8_of(l[2]), lay8_of(l[2]), lay8_of(l[2]), nullptr, nullptr);
        fwd8_x<bf16, TO>(f, x, wq, wk, cs, sn, oq, ok, lq, lk, stream);
    } else {
        const float *x = (const float *)X->data;
        if (ov)
            qkv_fast::rope8_kernel<false, TO, float, float><<<qkv_fast::blocks8(v8.n), 256, 0, stream>>>(
                v8, x, nullptr, ov, ov, ov, lay8_of(l[2]), lay8_of(l[2]), lay8_of(l[2]), nullptr, nullptr);
        fwd8_x<float, TO>(f, x, wq, wk, cs, sn, oq, ok, lq, lk, stream);
    }
    return true;
}

/* stage_fast for cuDNN: Q and K into the packed bf16 copy x16 (layouts ls, X's), V read from X
 * where it is bfloat16 and aligned, else staged into x16 too; qkv: what cuDNN reads. */
template <class L>
bool stage_cudnn(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward, const float *cs, const float *sn,
                 bf16 *x16, const L *ls, const bf16 **qkv, cudaStream_t stream)
{
    const fr_tensor *X = k->in[0];
    const bool v_direct = X->dtype == FR_BF16 && a16(X->data) && q.v_off % 8 == 0;
    if (!stage_fast<bf16>(k, q, backward, cs, sn, x16, x16 + q.k_off, v_direct ? nullptr : x16 + q.v_off, ls, stream))
        return false;
    qkv[0] = x16, qkv[1] = x16 + q.k_off, qkv[2] = v_direct ? (const bf16 *)X->data + q.v_off : x16 + q.v_off;
    return true;
}

/* The fused backward's kernel on a grid of at most one wave (the blocks the device holds at
 * once, a function of the device: the same grid, the same sums, run to run) and at most
 * rows_cap rows of partial sums; *rows: the rows written. */
template <bool FULL, typename TS, typename TX, typename TD>
FR_NODISCARD fr_status bwd8(const fr_cuda_kctx *k, const FastShape &f, int64_t rows_cap, const TX *X, const float *wq,
                            const float *wk, const float *cs, const float *sn, const TS *gq, const TS *gk,
                            qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, TD *dX, float *part, int64_t *rows)
{
    const size_t smem = fast_smem(f, 1);
    int occ = 0;
    void (*kern)(Fast, const TX *, const float *, const float *, const float *, const float *, const TS *, const TS *,
                 qkv_fast::Lay8, qkv_fast::Lay8, TD *, float *) = bwd8_kernel<FULL, TS, TX, TD>;
    FR_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, f.bx * f.by, smem));
    int64_t gx = (int64_t)occ * (k->cu->sm_count > 0 ? k->cu->sm_count : 1) / f.chunks;
    if (gx > rows_cap / f.chunks) gx = rows_cap / f.chunks;
    if (gx > (int64_t)f.tok_blocks) gx = f.tok_blocks;
    if (gx < 1) gx = 1;
    kern<<<dim3((unsigned)gx, (unsigned)f.chunks), dim3((unsigned)f.bx, (unsigned)f.by), smem, k->cu->stream>>>(
        f.g, X, wq, wk, cs, sn, gq, gk, lq, lk, dX, part);
    *rows = gx * f.chunks;
    return FR_OK;
}

template <typename TS, typename TX, typename TD>
FR_NODISCARD fr_status bwd8_full(const fr_cuda_kctx *k, const FastShape &f, int64_t rows_cap, const TX *X,
                                 const float *wq, const float *wk, const float *cs, const float *sn, const TS *gq,
                                 const TS *gk, qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, TD *dX, float *part, int64_t *rows)
{
    if (f.full) return bwd8<true, TS, TX, TD>(k, f, rows_cap, X, wq, wk, cs, sn, gq, gk, lq, lk, dX, part, rows);
    return bwd8<false, TS, TX, TD>(k, f, rows_cap, X, wq, wk, cs, sn, gq, gk, lq, lk, dX, part, rows);
}

template <typename TS, typename TX>
FR_NODISCARD fr_status bwd8_x(const fr_cuda_kctx *k, const FastShape &f, int64_t rows_cap, const TX *X,
                              const float *wq, const float *wk, const float *cs, const float *sn, const TS *gq,
                              const TS *gk, qkv_fast::Lay8 lq, qkv_fast::Lay8 lk, fr_tensor *dX, float *part,
                              int64_t *rows)
{
    if (dX->dtype == FR_BF16)
        return bwd8_full<TS, TX, bf16>(k, f, rows_cap, X, wq, wk, cs, sn, gq, gk, lq, lk, (bf16 *)dX->data, part,
                                       rows);
    return bwd8_full<TS, TX, float>(k, f, rows_cap, X, wq, wk, cs, sn, gq, gk, lq, lk, (float *)dX->data, part, rows);
}

/* The fused backward, where it applies (*done = 1; else nothing launched): dX's Q and K columns
 * from the gradients for the staged Q and K (gq, gk, layouts l[0], l[1]; they may lie in dX
 * itself), V's columns from gv (layout l[2]) unless gv is NULL (already in dX), and the
 * weights' gradients (outputs 1, 2). */
template <typename TS, class L>
FR_NODISCARD fr_status grad_fast(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, const float *cs, const float *sn,
                                 const TS *gq, const TS *gk, const TS *gv, const L *l, int *done)
{
    *done = 0;
    FastShape f;
    qkv_fast::Geo8 v8;
    const int64_t rows_cap = fast_rows_cap(q);
    if (!fast_of(q, &f) || rows_cap < f.chunks || (gv && !v8_of(q, &v8))) return FR_OK;
    const float *wq = in_f32(k, FR_ATTN_QKV_GRAD_QNORM), *wk = in_f32(k, FR_ATTN_QKV_GRAD_QNORM + 1);
    const fr_tensor *X = k->in[0];
    fr_tensor *dX = k->out[0];
    if (!wq || !wk || !a16(wq) || !a16(wk) || !a16(X->data) || !a16(dX->data) || !a16(gq) || !a16(gk) ||
        (gv && !a16(gv)))
        return FR_OK;
    if (q.rotary && (!cs || !sn || !a16(cs) || !a16(sn))) return FR_OK;
    if (!lay_ok(l[0]) || !lay_ok(l[1]) || (gv && !lay_ok(l[2]))) return FR_OK;
    float *part = NULL;
    FR_TRY(part_of(k, q, &part));
    cudaStream_t stream = k->cu->stream;
    if (gv) { /* V's gradient as it is (the kernel reads only, whatever its pointer's constness) */
        TS *v = const_cast<TS *>(gv);
        const qkv_fast::Lay8 lv = lay8_of(l[2]);
        if (dX->dtype == FR_BF16)
            qkv_fast::rope8_kernel<true, TS, float, bf16><<<qkv_fast::blocks8(v8.n), 256, 0, stream>>>(
                v8, nullptr, (bf16 *)dX->data, v, v, v, lv, lv, lv, nullptr, nullptr);
        else
            qkv_fast::rope8_kernel<true, TS, float, float><<<qkv_fast::blocks8(v8.n), 256, 0, stream>>>(
                v8, nullptr, (float *)dX->data, v, v, v, lv, lv, lv, nullptr, nullptr);
    }
    const qkv_fast::Lay8 lq = lay8_of(l[0]), lk = lay8_of(l[1]);
    int64_t rows = 0;
    const void *x = X->data;
    const fr_status st =
        X->dtype == FR_BF16
            ? bwd8_x<TS, bf16>(k, f, rows_cap, (const bf16 *)x, wq, wk, cs, sn, gq, gk, lq, lk, dX, part, &rows)
            : bwd8_x<TS, float>(k, f, rows_cap, (const float *)x, wq, wk, cs, sn, gq, gk, lq, lk, dX, part, &rows);
    FR_TRY(st);
    FR_TRY(fr_cuda_check_launch(k->node, "AttentionQKVGrad(q/k norm, fused)"));
    const int64_t len[2] = {q.qn_len, q.kn_len};
    FR_TRY(reduce_weights(k, part, rows, q.qn_len + q.kn_len, len));
    *done = 1;
    return FR_OK;
}

} /* namespace qkv_norm */

#endif
