/* AttentionQKV's staging on the GPU (included by attention_qkv.cu only; the contract:
 * ops/attention_qkv.h): the node's geometry as the kernels take it, the one-element-per-thread
 * staging kernels (any shape, any alignment), and the launchers that move the packed X, dX and
 * O-like tensors to and from the sections' layouts, choosing the vectorized kernels of
 * attention_qkv_stage.cuh where the shapes and pointers allow (same bits either way). Both of
 * attention_qkv.cu's paths (cuDNN's and fp8run's kernels) stage through these. */
#ifndef FR_OPS_CUDA_ATTENTION_QKV_STAGING_CUH
#define FR_OPS_CUDA_ATTENTION_QKV_STAGING_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda/attention_qkv_norm.cuh"
#include "ops/cuda/attention_qkv_stage.cuh"
#include "ops/cuda/cuda_kernel.h"
extern "C" {
#include "ops/attention.h"
#include "ops/attention_qkv.h"
}

namespace {

typedef __nv_bfloat16 bf16;

__device__ inline float load_f(const float *p) { return *p; }
__device__ inline float load_f(const bf16 *p) { return __bfloat162float(*p); }
__device__ inline void store_f(float *p, float v) { *p = v; }
__device__ inline void store_f(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Where column c of a packed [B, T, W] row goes in a section: head and feature. */
struct Geo {
    int64_t B, T, W, Hq, Hk, D, Dv;
    int rotary, interleaved;
    int64_t cos_b, sin_b;
    int64_t rd;        /* the first rd features of a Q or K head are rotated (rotary_dim) */
    int heads_packing; /* packing "heads": head h's q, k, v at h (2 D + Dv) + 0, D, 2 D */
};

/* A section's other layout: element (b, h, t, d) at b sb + h sh + t st + d. */
struct Lay {
    int64_t sb, sh, st;
};

using qkv_norm::partner; /* a rotated feature's partner and sign (attention_qkv_norm.cuh) */

/* Section of packed column c: 0 Q, 1 K, 2 V; head and feature. */
__device__ inline int section(const Geo &g, int64_t c, int64_t *h, int64_t *d)
{
    if (g.heads_packing) {
        const int64_t per = 2 * g.D + g.Dv, r = c % per;
        *h = c / per;
        *d = r < g.D ? r : r < 2 * g.D ? r - g.D : r - 2 * g.D;
        return r < g.D ? 0 : r < 2 * g.D ? 1 : 2;
    }
    const int64_t kq = g.Hq * g.D, kk = kq + g.Hk * g.D;
    if (c < kq) {
        *h = c / g.D, *d = c % g.D;
        return 0;
    }
    if (c < kk) {
        *h = (c - kq) / g.D, *d = (c - kq) % g.D;
        return 1;
    }
    *h = (c - kk) / g.Dv, *d = (c - kk) % g.Dv;
    return 2;
}

/* Forward staging: element (b, t, c) of X (float32 or bfloat16, TX) (RoPE'd on Q and K) into
 * the section's layout. */
template <typename TO, typename TX>
__global__ void stage_kernel(Geo g, const TX *__restrict__ X, const float *__restrict__ cs,
                             const float *__restrict__ sn, TO *q, TO *k, TO *v, Lay lq, Lay lk, Lay lv)
{
    const int64_t n = g.B * g.T * g.W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % g.W, bt = i / g.W, t = bt % g.T, b = bt / g.T;
        int64_t h, d;
        const int s = section(g, c, &h, &d);
        float y = load_f(X + i);
        if (g.rotary && s < 2 && d < g.rd) {
            float sign;
            const int64_t p = partner(d, g.rd, g.interleaved, &sign);
            const float *cr = cs + b * g.cos_b + t * g.rd, *sr = sn + b * g.sin_b + t * g.rd;
            y = fmaf(y, cr[d], sign * load_f(X + i - d + p) * sr[d]);
        }
        const Lay &l = s == 0 ? lq : s == 1 ? lk : lv;
        TO *o = s == 0 ? q : s == 1 ? k : v;
        store_f(o + b * l.sb + h * l.sh + t * l.st + d, y);
    }
}

/* Backward packing: element (b, t, c) of dX (float32 or bfloat16, TD) from the sections'
 * gradients (RoPE transposed on Q and K). */
template <typename TI, typename TD>
__global__ void unstage_kernel(Geo g, const TI *q, const TI *k, const TI *v, Lay lq, Lay lk, Lay lv,
                               const float *__restrict__ cs, const float *__restrict__ sn, TD *__restrict__ dX)
{
    const int64_t n = g.B * g.T * g.W;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % g.W, bt = i / g.W, t = bt % g.T, b = bt / g.T;
        int64_t h, d;
        const int s = section(g, c, &h, &d);
        const Lay &l = s == 0 ? lq : s == 1 ? lk : lv;
        const TI *src = (s == 0 ? q : s == 1 ? k : v) + b * l.sb + h * l.sh + t * l.st;
        float y = load_f(src + d);
        if (g.rotary && s < 2 && d < g.rd) {
            float sign;
            const int64_t p = partner(d, g.rd, g.interleaved, &sign);
            const float *cr = cs + b * g.cos_b + t * g.rd, *sr = sn + b * g.sin_b + t * g.rd;
            y = fmaf(y, cr[d], -sign * load_f(src + p) * sr[p]);
        }
        store_f(dX + i, y);
    }
}

/* O-like tensors: element (b, t, c) of the packed [B, T, Hq Dv] p and (b, c / Dv, t, c % Dv)
 * of the other layout h; to_heads: p -> h, else h -> p. */
template <typename TP, typename TH>
__global__ void o_kernel(int64_t B, int64_t T, int64_t N, int64_t Dv, Lay l, const TP *pin, TH *hout, const TH *hin,
                         TP *pout)
{
    const int64_t n = B * T * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % N, bt = i / N, t = bt % T, b = bt / T;
        const int64_t j = b * l.sb + (c / Dv) * l.sh + t * l.st + c % Dv;
        if (pin)
            store_f(hout + j, load_f(pin + i));
        else
            store_f(pout + i, load_f(hin + j));
    }
}

unsigned blocks_for(int64_t n)
{
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

/* ---- the node's problem ---- */

struct Node {
    fr_attn_qkv_geom q;
    fr_attn_attrs a;
    Geo g;
    int64_t seg_rows, seg_q; /* Sk's rows (0: no segment ids), Sq given */
};

FR_NODISCARD fr_status node_of(const fr_node *n, int rx, const int64_t *dx, const fr_value *c, const fr_value *s, Node *p)
{
    FR_TRY(fr_attn_qkv_geometry(n, rx, dx, c ? c->rank : 0, c ? c->dims : NULL, s ? s->rank : 0, s ? s->dims : NULL,
                                &p->q));
    FR_TRY(fr_attn_read_attrs(n, p->q.D, &p->a));
    p->seg_rows = 0, p->seg_q = 0;
    const fr_attn_qkv_geom &q = p->q;
    p->g = Geo{q.B, q.T, q.W, q.Hq, q.Hk, q.D, q.Dv, q.rotary, q.interleaved, q.cos_b, q.sin_b, q.rd, q.heads_packing};
    return FR_OK;
}

/* The vectorized kernels' geometry, or false where they do not apply (qkv_fast). */
bool fast_geo(const Node &p, qkv_fast::Geo8 *g8)
{
    const fr_attn_qkv_geom &q = p.q;
    if (q.D % 16 || q.Dv % 8) return false;
    const int64_t rd = q.rotary ? q.rd : 0; /* rotated features per Q or K head */
    if (rd % (q.interleaved ? 8 : 16)) return false;
    const int64_t ru = rd / (q.interleaved ? 8 : 16), pu = (q.D - rd) / 8; /* units per Q or K head */
    const int64_t rot_units = (q.Hq + q.Hk) * ru, units = rot_units + (q.Hq + q.Hk) * pu + q.Hk * (q.Dv / 8);
    if (q.W > INT32_MAX || q.T > INT32_MAX || q.B * q.T * units >= ((int64_t)1 << 31)) return false;
    *g8 = qkv_fast::Geo8{(unsigned)units, (unsigned)rot_units, (unsigned)(q.B * q.T * units), (int)q.T, (int)q.W,
                         (int)q.D, (int)q.Dv, (int)q.Hq, (int)q.Hk, q.rotary, q.interleaved, q.cos_b, q.sin_b,
                         (int)rd, (int)ru, (int)pu, (int)q.q_off, (int)q.k_off, (int)q.v_off,
                         (int)q.q_hs, (int)q.k_hs, (int)q.v_hs};
    return true;
}

/* Whether the tables (NULL: none) suit the vectorized kernels. */
bool tables_ok(const float *cs, const float *sn)
{
    return !cs || (qkv_fast::aligned16(cs) && qkv_fast::aligned16(sn));
}

/* n elements of O-like tensors in units of 8: the count of units, 0 when it does not apply. */
unsigned units8(int64_t n) { return n % 8 == 0 && n / 8 < ((int64_t)1 << 31) ? (unsigned)(n / 8) : 0; }

qkv_fast::Lay8 lay8(const Lay &l) { return qkv_fast::Lay8{l.sb, l.sh, l.st}; }

/* X (RoPE'd) into the sections' layouts, vectorized where it can be. */
template <typename TO, typename TX>
void stage_x(const Node &p, const TX *X, const float *cs, const float *sn, TO *q, TO *k, TO *v, const Lay *l,
             cudaStream_t stream)
{
    qkv_fast::Geo8 g8;
    if (fast_geo(p, &g8) && tables_ok(cs, sn) && qkv_fast::aligned16(X) && qkv_fast::aligned16(q) &&
        qkv_fast::aligned16(k) && qkv_fast::aligned16(v)) {
        qkv_fast::rope8_kernel<false, TO, TX, float><<<qkv_fast::blocks8(g8.n), 256, 0, stream>>>(
            g8, X, nullptr, q, k, v, lay8(l[0]), lay8(l[1]), lay8(l[2]), cs, sn);
        return;
    }
    const int64_t nx = p.q.B * p.q.T * p.q.W;
    stage_kernel<TO, TX><<<blocks_for(nx), 256, 0, stream>>>(p.g, X, cs, sn, q, k, v, l[0], l[1], l[2]);
}

/* stage_x on X as it is stored: float32, or bfloat16 (a narrowed projection) */
template <typename TO>
void stage(const Node &p, const fr_tensor *X, const float *cs, const float *sn, TO *q, TO *k, TO *v, const Lay *l,
           cudaStream_t stream)
{
    if (X->dtype == FR_BF16)
        stage_x<TO, bf16>(p, (const bf16 *)X->data, cs, sn, q, k, v, l, stream);
    else
        stage_x<TO, float>(p, (const float *)X->data, cs, sn, q, k, v, l, stream);
}

/* O-like tensors between the packed layout and the head layout l (pin -> hout, or hin -> pout),
 * vectorized where it can be. */
template <typename TP, typename TH>
void o_move(const Node &p, const Lay &l, const TP *pin, TH *hout, const TH *hin, TP *pout, cudaStream_t stream)
{
    const fr_attn_qkv_geom &q = p.q;
    const int64_t N = q.Hq * q.Dv, no = q.B * q.T * N;
    const unsigned n8 = units8(no);
    const void *a = pin ? (const void *)pin : (const void *)hin, *b = pin ? (const void *)hout : (const void *)pout;
    if (n8 && q.Dv % 8 == 0 && q.T <= INT32_MAX && q.Dv <= INT32_MAX && qkv_fast::aligned16(a) &&
        qkv_fast::aligned16(b)) {
        qkv_fast::o8_kernel<TP, TH><<<qkv_fast::blocks8(n8), 256, 0, stream>>>(n8, (unsigned)(N / 8), (int)q.T, (int)q.Dv,
                                                                               lay8(l), pin, hout, hin, pout);
        return;
    }
    o_kernel<TP, TH><<<blocks_for(no), 256, 0, stream>>>(q.B, q.T, N, q.Dv, l, pin, hout, hin, pout);
}

/* dX from the sections' gradients (RoPE transposed), vectorized where it can be. */
template <typename TI, typename TD>
void unstage(const Node &p, TI *q, TI *k, TI *v, const Lay *l, const float *cs, const float *sn,
             TD *dX, cudaStream_t stream)
{
    qkv_fast::Geo8 g8;
    if (fast_geo(p, &g8) && tables_ok(cs, sn) && qkv_fast::aligned16(dX) && qkv_fast::aligned16(q) &&
        qkv_fast::aligned16(k) && qkv_fast::aligned16(v)) {
        qkv_fast::rope8_kernel<true, TI, float, TD><<<qkv_fast::blocks8(g8.n), 256, 0, stream>>>(
            g8, nullptr, dX, q, k, v, lay8(l[0]), lay8(l[1]), lay8(l[2]), cs, sn);
        return;
    }
    const int64_t nx = p.q.B * p.q.T * p.q.W;
    unstage_kernel<TI, TD><<<blocks_for(nx), 256, 0, stream>>>(p.g, q, k, v, l[0], l[1], l[2], cs, sn, dX);
}

/* unstage into dX as it is stored (dx_dtype): float32 or bfloat16 */
template <typename TI>
void unstage_to(const Node &p, TI *q, TI *k, TI *v, const Lay *l, const float *cs, const float *sn, fr_tensor *dX,
                cudaStream_t stream)
{
    if (dX->dtype == FR_BF16)
        unstage<TI, bf16>(p, q, k, v, l, cs, sn, (bf16 *)dX->data, stream);
    else
        unstage<TI, float>(p, q, k, v, l, cs, sn, (float *)dX->data, stream);
}

/* The vectorized geometry restricted to the rotated units (the Q and K columns): false where
 * the vectorized kernels do not apply or nothing is rotated. */
bool rot_geo(const Node &p, const float *cs, const float *sn, qkv_fast::Geo8 *g8)
{
    if (!p.q.rotary || !fast_geo(p, g8) || !tables_ok(cs, sn)) return false;
    g8->units = g8->rot_units;
    g8->n = (unsigned)(p.q.B * p.q.T) * g8->rot_units;
    return true;
}

/* rot_geo for all of Q and K (the rotated units, then the rest of the Q and K heads: with a
 * partial rotary they are more than the rotated ones). */
bool qk_geo(const Node &p, const float *cs, const float *sn, qkv_fast::Geo8 *g8)
{
    if (!rot_geo(p, cs, sn, g8)) return false;
    g8->units = g8->rot_units + (unsigned)((p.q.Hq + p.q.Hk) * g8->pu);
    g8->n = (unsigned)(p.q.B * p.q.T) * g8->units;
    return true;
}

} /* namespace */

#endif
