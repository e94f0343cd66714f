/* The q/k RMSNorm of AttentionQKV on the GPU (included by attention_qkv.cu only; the contract:
 * ops/attention_qkv.h).
 *
 * One warp per normalized row (a head's D features, or a token's whole Q or K section): the
 * row is read once into shared memory, its mean square reduced across the warp, normalized
 * and scaled, and RoPE (which pairs features of one head, both in the warp's row) applied
 * before the warp writes the row into the section layout the attention kernels read. The
 * staging pass before it has written Q and K without the norm; these rows overwrite them
 * (Q and K staged twice: the simple way to keep the vectorized staging as it is).
 *
 * Backward, per row: the gradient for the normalized and rotated values (the attention's dQ or
 * dK, in its layout) gets RoPE's transpose, then RMSNorm's backward with the row's statistics
 * recomputed from X: dx = inv (g w - xh mean(g w xh)), xh = x inv. dX's Q and K columns are
 * written (in place is safe: the warp holds its row before it writes). Each warp sums
 * g xh for the weights' gradient over the rows it visits in shared memory and writes that
 * partial sum; a second kernel adds the partial sums in a fixed order (deterministic).
 *
 * float32 arithmetic (the CPU's statistics are double): within 1e-6 of the CPU. */
#ifndef FR_OPS_CUDA_ATTENTION_QKV_NORM_CUH
#define FR_OPS_CUDA_ATTENTION_QKV_NORM_CUH

#include <cuda_bf16.h>
#include <stdint.h>

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
 * y_d = x_d c_d + sign x_p s_d, transposed y_d = x_d c_d - sign x_p s_p. */
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
__global__ void grad_kernel(Geo g, const TX *__restrict__ X, const float *__restrict__ wq,
                            const float *__restrict__ wk, const float *__restrict__ cs, const float *__restrict__ sn,
                            const TS *gq, const TS *gk, Lay lq, Lay lk, TD *dX, float *__restrict__ part)
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

} /* namespace qkv_norm */

#endif
