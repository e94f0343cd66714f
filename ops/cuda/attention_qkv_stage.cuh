/* Vectorized staging kernels of AttentionQKV (included by attention_qkv.cu only).
 *
 * Why: one thread per element with 64-bit index arithmetic (the general kernels there) is
 * bound by integer divisions, about 8% of the memory ceiling on an H200. Here a thread owns a
 * unit of 8 consecutive features of one head of one token (with a half-split RoPE, also the 8
 * partners rd / 2 further on, so both elements of every pair are in one thread): 16-byte loads
 * and stores, consecutive threads on consecutive units of a row, 32-bit index math once per
 * unit. Taken when D % 16 == 0, Dv % 8 == 0, the rotated rd a multiple of 16 (8 interleaved),
 * every pointer 16-byte aligned and the units fit in 31 bits (fast_geo); the general kernels
 * remain for the rest.
 *
 * The arithmetic per element is the general kernels' own expression (fmaf(x, c, (sign x_p) s)),
 * so both paths give the same bits. */
#ifndef FR_OPS_CUDA_ATTENTION_QKV_STAGE_CUH
#define FR_OPS_CUDA_ATTENTION_QKV_STAGE_CUH

#include <cuda_bf16.h>
#include <stdint.h>

namespace qkv_fast {

typedef __nv_bfloat16 bf16;

/* A section's layout: element (b, h, t, d) at b sb + h sh + t st + d (all multiples of 8). */
struct Lay8 {
    int64_t sb, sh, st;
};

struct Geo8 {
    unsigned units, rot_units; /* per token row: all units, and the rotated ones first */
    unsigned n;                /* rows * units */
    int T, W, D, Dv, Hq, Hk;
    int rotary, interleaved;
    int64_t cos_b, sin_b;
    int rd;                    /* rotated features per Q or K head (0: no RoPE; rotary_dim) */
    int ru, pu;                /* per Q or K head: rotated units (of 8, or 8 pairs), the others */
    /* per section (Q, K, V): first column, columns from head to head; scalars, not arrays: a
     * kernel parameter indexed at run time is copied to local memory by every thread, which
     * once cost the staging kernels more traffic than their data */
    int off0, off1, off2, hs0, hs1, hs2;
};

__device__ __forceinline__ void ld8(const float *p, float *v)
{
    const float4 a = __ldg((const float4 *)p), b = __ldg((const float4 *)(p + 4));
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

__device__ __forceinline__ void ld8(const bf16 *p, float *v)
{
    const uint4 r = *(const uint4 *)p;
    const unsigned w[4] = {r.x, r.y, r.z, r.w};
    for (int i = 0; i < 4; i++) {
        __nv_bfloat162 h;
        memcpy(&h, &w[i], 4);
        const float2 f = __bfloat1622float2(h);
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ void st8(float *p, const float *v)
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ void st8(bf16 *p, const float *v)
{
    unsigned w[4];
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]); /* round to nearest even */
        memcpy(&w[i], &h, 4);
    }
    *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
}

/* Unit u of a row: section s (0 Q, 1 K, 2 V), head h, first feature d; pair: the half-split
 * RoPE unit (features d.. and d + rd / 2..). A row's units: the rotated ones (every Q, then K,
 * head's first rd features: ru each), then the rest of the Q and K heads (pu each, from
 * feature rd on), then V's (Dv / 8 per head); the column is the section's off + h hs + d,
 * whatever the packing. */
struct Unit {
    int s, h, d, col;
    bool pair, rot;
};

__device__ __forceinline__ Unit unit_of(const Geo8 &g, unsigned u)
{
    Unit r;
    int hh; /* Q and K heads counted together */
    if (u < g.rot_units) {
        hh = (int)(u / g.ru);
        r.d = (int)(u % g.ru) * 8;
        r.pair = !g.interleaved, r.rot = true;
    } else {
        u -= g.rot_units;
        const unsigned qk = (unsigned)((g.Hq + g.Hk) * g.pu);
        r.pair = false, r.rot = false;
        if (u < qk) {
            hh = (int)(u / g.pu);
            r.d = g.rd + (int)(u % g.pu) * 8;
        } else {
            u -= qk;
            const unsigned per = (unsigned)g.Dv / 8;
            r.s = 2, r.h = (int)(u / per), r.d = (int)(u % per) * 8;
            r.col = g.off2 + r.h * g.hs2 + r.d;
            return r;
        }
    }
    const bool q = hh < g.Hq;
    r.s = q ? 0 : 1;
    r.h = q ? hh : hh - g.Hq;
    r.col = (q ? g.off0 : g.off1) + r.h * (q ? g.hs0 : g.hs1) + r.d;
    return r;
}

/* RoPE on a unit in place (a: its 8 features; p: their partners rd / 2 on, pair units only):
 * forward y_d = x_d c_d + sign x_p s_d, transposed (GRAD) y_d = x_d c_d - sign x_p s_p, with
 * sign -1 on the first of a pair (d < D / 2, or d even when interleaved), +1 on the second. */
template <bool GRAD>
__device__ __forceinline__ void rotate8(const Unit &u, int hd, const float *cr, const float *sr, float *a, float *p)
{
    float c0[8], s0[8], y[8];
    ld8(cr, c0), ld8(sr, s0);
    if (u.pair) {
        float c1[8], s1[8], z[8];
        ld8(cr + hd, c1), ld8(sr + hd, s1);
        for (int e = 0; e < 8; e++) {
            y[e] = GRAD ? fmaf(a[e], c0[e], p[e] * s1[e]) : fmaf(a[e], c0[e], -p[e] * s0[e]);
            z[e] = GRAD ? fmaf(p[e], c1[e], -a[e] * s0[e]) : fmaf(p[e], c1[e], a[e] * s1[e]);
        }
        for (int e = 0; e < 8; e++) a[e] = y[e], p[e] = z[e];
        return;
    }
    for (int e = 0; e < 8; e += 2) { /* pairs (2j, 2j + 1) */
        y[e] = GRAD ? fmaf(a[e], c0[e], a[e + 1] * s0[e + 1]) : fmaf(a[e], c0[e], -a[e + 1] * s0[e]);
        y[e + 1] = GRAD ? fmaf(a[e + 1], c0[e + 1], -a[e] * s0[e]) : fmaf(a[e + 1], c0[e + 1], a[e] * s0[e + 1]);
    }
    for (int e = 0; e < 8; e++) a[e] = y[e];
}

/* Forward (GRAD 0): packed X (TX float32, or bfloat16 when narrowed: one 16-byte load per
 * unit), RoPE'd on Q and K, into the sections q, k, v (layouts lq, lk, lv). Backward (GRAD 1):
 * the sections' gradients into the packed dX (TD float32, or bfloat16 by dx_dtype), RoPE
 * transposed (X unused). A thread reads and writes the same elements (a unit and its partner),
 * so the backward may run in place (sections laid out inside dX itself); g.units == rot_units
 * then visits only the rotated units. */
template <bool GRAD, typename TS, typename TX, typename TD>
__global__ void __launch_bounds__(256) rope8_kernel(Geo8 g, const TX *__restrict__ X, TD *dX,
                                                    TS *q, TS *k, TS *v, Lay8 lq, Lay8 lk, Lay8 lv,
                                                    const float *__restrict__ cs, const float *__restrict__ sn)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= g.n) return;
    const unsigned row = i / g.units, t = row % (unsigned)g.T, b = row / (unsigned)g.T;
    const Unit u = unit_of(g, i % g.units);
    const size_t x = (size_t)row * g.W + u.col;
    /* the section's strides picked by value (a reference to one of three parameters would put
     * them in local memory) */
    const int64_t sb = u.s == 0 ? lq.sb : u.s == 1 ? lk.sb : lv.sb;
    const int64_t sh = u.s == 0 ? lq.sh : u.s == 1 ? lk.sh : lv.sh;
    const int64_t st = u.s == 0 ? lq.st : u.s == 1 ? lk.st : lv.st;
    TS *sec = (u.s == 0 ? q : u.s == 1 ? k : v) + b * sb + u.h * sh + t * st + u.d;
    const int hd = g.rd / 2; /* a pair unit's partner features */
    float a[8], p[8];
    if (GRAD) {
        ld8(sec, a);
        if (u.pair) ld8(sec + hd, p);
    } else {
        ld8(X + x, a);
        if (u.pair) ld8(X + x + hd, p);
    }
    if (u.rot) {
        const int64_t r = (int64_t)t * g.rd + u.d;
        rotate8<GRAD>(u, hd, cs + b * g.cos_b + r, sn + b * g.sin_b + r, a, p);
    }
    if (GRAD) {
        st8(dX + x, a);
        if (u.pair) st8(dX + x + hd, p);
    } else {
        st8(sec, a);
        if (u.pair) st8(sec + hd, p);
    }
}

/* Contiguous conversions of n8 units of 8 elements: blockIdx.y picks one of two (src, dst)
 * pairs, so the backward converts O and dO in one launch. */
template <typename TI, typename TO>
__global__ void __launch_bounds__(256) convert8_kernel(unsigned n8, const TI *a, TO *ya, const TI *b, TO *yb)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const TI *src = blockIdx.y ? b : a;
    TO *dst = blockIdx.y ? yb : ya;
    float v[8];
    ld8(src + (size_t)i * 8, v);
    st8(dst + (size_t)i * 8, v);
}

/* O-like tensors between the packed [B, T, Hq Dv] and a head layout l, 8 features of one head
 * per thread (Dv % 8 == 0): pin -> hout when pin is given, else hin -> pout. */
template <typename TP, typename TH>
__global__ void __launch_bounds__(256) o8_kernel(unsigned n8, unsigned per_row, int T, int Dv, Lay8 l, const TP *pin,
                                                 TH *hout, const TH *hin, TP *pout)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const unsigned row = i / per_row, t = row % (unsigned)T, b = row / (unsigned)T, c = (i % per_row) * 8;
    const int64_t j = b * l.sb + (int64_t)(c / Dv) * l.sh + t * l.st + c % Dv;
    float v[8];
    if (pin) {
        ld8(pin + (size_t)i * 8, v);
        st8(hout + j, v);
    } else {
        ld8(hin + j, v);
        st8(pout + (size_t)i * 8, v);
    }
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

inline unsigned blocks8(unsigned n) { return (n + 255) / 256; }

} /* namespace qkv_fast */

#endif
