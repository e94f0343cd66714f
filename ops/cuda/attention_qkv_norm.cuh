/* The q/k RMSNorm of AttentionQKV on the GPU (included by attention_qkv.cu only; the contract:
 * ops/attention_qkv.h).
 *
 * Two ways, the same arithmetic per element (float32; the CPU's statistics are double: within
 * 1e-6 of the CPU, the sums' order aside):
 *
 * Fused into the vectorized staging where the shapes and pointers allow (the kernels and their
 * shapes: attention_qkv_norm8.cuh; their launchers at the end of this file).
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

#include "ops/cuda/attention_qkv_norm8.cuh"
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

/* stage into the Q and K sections of a bf16 copy (dst[0], dst[1]; layouts ls[0], ls[1]), which
 * cuDNN then reads for Q and K (qkv[0], qkv[1]) */
template <class L>
void stage_copy(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward, const float *cs, const float *sn,
                bf16 *const *dst, const L *ls, const bf16 **qkv, cudaStream_t stream)
{
    stage<bf16>(k, q, backward, cs, sn, dst[0], dst[1], ls[0], ls[1], stream);
    qkv[0] = dst[0], qkv[1] = dst[1];
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

/* stage_fast for cuDNN: Q and K into a bf16 copy (dst[0], dst[1]; layouts ls), V read from X
 * where it is bfloat16 and aligned and X's layout will do (v_from_x), else staged into dst[2]
 * too; qkv: what cuDNN reads. */
template <class L>
bool stage_cudnn(const fr_cuda_kctx *k, const fr_attn_qkv_geom &q, int backward, const float *cs, const float *sn,
                 bf16 *const *dst, const L *ls, bool v_from_x, const bf16 **qkv, cudaStream_t stream)
{
    const fr_tensor *X = k->in[0];
    const bool v_direct = v_from_x && X->dtype == FR_BF16 && a16(X->data) && q.v_off % 8 == 0;
    if (!stage_fast<bf16>(k, q, backward, cs, sn, dst[0], dst[1], v_direct ? nullptr : dst[2], ls, stream))
        return false;
    qkv[0] = dst[0], qkv[1] = dst[1], qkv[2] = v_direct ? (const bf16 *)X->data + q.v_off : dst[2];
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
