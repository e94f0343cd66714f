/* The register path of AddLayerNormGrad's backward (ops/cuda/add_layer_norm.cu, which includes
 * this file once, and LayerNormGrad's fast path through it), with what it shares with the
 * re-reading kernel there: one block per row, thread t holding the vectors t, t + blockDim, ...
 * of each tensor's row (vec16.cuh). */
#ifndef FR_CUDA_ADD_LAYER_NORM_REG_CUH
#define FR_CUDA_ADD_LAYER_NORM_REG_CUH

#include <math.h>
#include <stdint.h>

#include "ops/cuda/vec16.cuh"

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kThreads = 256; /* most threads per block */

template <int V> using F = fr_vf<V>;
template <int V, typename T> __device__ __forceinline__ F<V> ld(const T *p, int64_t i) { return fr_vld<V>(p, i); }
template <int V, typename T> __device__ __forceinline__ void st(T *p, int64_t i, const F<V> &q) { fr_vst<V>(p, i, q); }

/* K doubles, summed over the block together */
template <int K> struct DK {
    double v[K];
};

/* vector i of dY2, float32 or (bf) bfloat16 */
template <int V> __device__ __forceinline__ F<V> ld_dy2(const void *p, int bf, int64_t i)
{
    return bf ? ld<V>((const bf16 *)p, i) : ld<V>((const float *)p, i);
}

/* row r of dY2 (NN 2; else NULL), float32 or (bf) bfloat16 */
template <int NN> __device__ __forceinline__ const void *dy2_row(const void *dy2, int bf, int64_t r, int64_t len)
{
    return NN > 1 ? (const char *)dy2 + r * len * (bf ? 2 : 4) : nullptr;
}

/* row r of the backward's tensors (dh NULL: no dH) */
template <typename TD> struct BwdRow {
    const TD *dy;
    const void *dy2;
    const float *x, *dh;
    float *dx;
};

template <int NN, typename TD>
__device__ __forceinline__ BwdRow<TD> bwd_row(const TD *dy, const void *dy2, int dy2_bf16, const float *x,
                                              const float *dh, float *dx, int64_t r, int64_t len)
{
    return BwdRow<TD>{dy + r * len, dy2_row<NN>(dy2, dy2_bf16, r, len), x + r * len, dh ? dh + r * len : nullptr,
                      dx + r * len};
}

/* The register path of the backward (each thread's VPT vectors of the row in registers), built
 * for memory speed. The row's arithmetic is float32, the row sums double past the warp:
 *  - double costs: Hopper runs 64-bit conversions at 16 a clock per multiprocessor and double
 *    at a half of float's rate, and double registers halve the blocks that fit; at ~25 double
 *    operations and 5 conversions an element, a kernel in double runs at a third of the
 *    memory's speed. Here an element takes one conversion and one double add (the mean's sum),
 *    float operations otherwise;
 *  - the mean as on the CPU: sum x in double (one conversion an element), so that a mean far
 *    from 0 loses nothing; then the deviations x - mean as (x - mh) - ml in float, with
 *    mean = mh + ml split into two floats (exact to a rounding of the deviation);
 *  - the other sums (sum g w; sum (x - mean)^2, sum g w (x - mean)): each thread sums its own
 *    elements in float and each warp its threads in float (shuffles), then the warps' sums are
 *    added in double in a fixed order: the rounding errors stay relative to a few hundred terms
 *    of one sign or random signs, ~1e-7 of the sums;
 *  - dScale / dBias: float sums of kFlush rows at most, then added in double to the block's
 *    partials in the scratch (its own region: written on the first flush, added to after);
 *  - no register prefetch of the next row: the registers it would take are spent on a second
 *    (and third) resident block, whose loads fill the gaps of this one's reductions.
 * Results differ from the CPU's double arithmetic by a few float32 roundings (~1e-7 relative);
 * the order of every sum depends on len (and the device's grid) only, so a bfloat16 dY gives the
 * bits of the float32 dY of the same values, and the bits repeat from run to run. */
constexpr int kFlush = 32; /* rows a thread sums in float before adding them to the block's doubles */

/* KD double and KF float partials summed over the block (each warp in the partials' type, the
 * warps in double in a fixed order); every thread gets the same sums, the doubles first. buf: one
 * half of a double-buffered [2][32] array, the other half than the previous reduction's (one
 * barrier each). */
template <int KD, int KF>
__device__ __forceinline__ DK<KD + KF> block_sum_df(const double (&a)[KD > 0 ? KD : 1], const float (&v)[KF],
                                                    DK<KD + KF> *buf)
{
    double sd[KD > 0 ? KD : 1];
    float s[KF];
#pragma unroll
    for (int k = 0; k < KD; k++) sd[k] = a[k];
#pragma unroll
    for (int k = 0; k < KF; k++) s[k] = v[k];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
#pragma unroll
        for (int k = 0; k < KD; k++) sd[k] += __shfl_down_sync(0xffffffffu, sd[k], d);
#pragma unroll
        for (int k = 0; k < KF; k++) s[k] += __shfl_down_sync(0xffffffffu, s[k], d);
    }
    const int w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int k = 0; k < KD; k++) buf[w].v[k] = sd[k];
#pragma unroll
        for (int k = 0; k < KF; k++) buf[w].v[KD + k] = (double)s[k];
    }
    __syncthreads();
    DK<KD + KF> t = buf[0];
    for (int i = 1; i < nw; i++)
#pragma unroll
        for (int k = 0; k < KD + KF; k++) t.v[k] += buf[i].v[k];
    return t;
}

/* this thread's float sums of dScale (as) and dBias (ab) added to the block's partials pb
 * (add 0: written, the first flush), then cleared */
template <int V, int VPT, int NN>
__device__ __forceinline__ void flush_part(double *pb, int64_t len, int64_t nv, bool add, float (&as)[NN][VPT][V],
                                           float (&ab)[NN][VPT][V])
{
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        if (i >= nv) break;
#pragma unroll
        for (int n = 0; n < NN; n++) {
            double *ps = pb + 2 * n * len + i * V, *pbb = ps + len;
#pragma unroll
            for (int j = 0; j < V; j++) {
                ps[j] = add ? ps[j] + (double)as[n][k][j] : (double)as[n][k][j];
                pbb[j] = add ? pbb[j] + (double)ab[n][k][j] : (double)ab[n][k][j];
                as[n][k][j] = ab[n][k][j] = 0.0f;
            }
        }
    }
}

/* resident blocks of 256 threads the register path is built for: 3 (80 registers) with one norm
 * and up to 8 elements a thread, else 2 (128; the second norm's sums spill at 80) */
template <int V, int VPT, int NN> constexpr int kRegBlocks = NN == 1 && VPT * V <= 8 ? 3 : 2;

template <int V, int VPT, int NN, typename TD>
__global__ void __launch_bounds__(kThreads, (kRegBlocks<V, VPT, NN>))
    aln_bwd_reg(const TD *dy, const void *dy2, int dy2_bf16, const float *x, const float *w1, const float *w2,
                const float *dh, float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    static_assert(VPT > 0 && NN * VPT * V <= 16, "the register path");
    __shared__ DK<1 + NN> red[2][32];
    const int64_t nv = len / V, pl = 2 * NN * len;
    const float *const w[2] = {w1, w2};
    double *pb = part ? part + (int64_t)blockIdx.x * pl : nullptr;
    float acc_s[NN][VPT][V], acc_b[NN][VPT][V];
    F<V> wq[NN][VPT]; /* this thread's columns of Scale (Scale2), the same every row */
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int k = 0; k < VPT; k++) {
#pragma unroll
            for (int j = 0; j < V; j++) acc_s[n][k][j] = acc_b[n][k][j] = 0.0f;
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            wq[n][k] = i < nv ? ld<V>(w[n], i) : F<V>{};
        }
    int par = 0, pending = 0;
    bool flushed = false;
    const double dlen = (double)len;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const BwdRow<TD> row = bwd_row<NN>(dy, dy2, dy2_bf16, x, dh, dx, r, len);
        F<V> xq[VPT], gq[VPT][NN], hq[VPT];
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i >= nv) break;
            xq[k] = ld<V>(row.x, i);
            gq[k][0] = ld<V>(row.dy, i);
            if constexpr (NN > 1) gq[k][1] = ld_dy2<V>(row.dy2, dy2_bf16, i);
            if (row.dh) hq[k] = ld<V>(row.dh, i);
        }
        /* s1 = (sum x; sum g w per norm) */
        double sx[1] = {0.0};
        float s1[NN];
#pragma unroll
        for (int n = 0; n < NN; n++) s1[n] = 0.0f;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            if (threadIdx.x + (int64_t)k * blockDim.x >= nv) break;
#pragma unroll
            for (int j = 0; j < V; j++) {
                sx[0] += (double)xq[k].v[j];
#pragma unroll
                for (int n = 0; n < NN; n++) s1[n] = fmaf(gq[k][n].v[j], wq[n][k].v[j], s1[n]);
            }
        }
        const DK<1 + NN> t1 = block_sum_df<1, NN>(sx, s1, red[par]);
        par ^= 1;
        const double mean = t1.v[0] / dlen;
        const float mh = (float)mean, ml = (float)(mean - (double)mh);
        /* s2 = (sum (x - mean)^2, sum g w (x - mean) per norm) */
        float s2[1 + NN];
#pragma unroll
        for (int n = 0; n <= NN; n++) s2[n] = 0.0f;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            if (threadIdx.x + (int64_t)k * blockDim.x >= nv) break;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float d = (xq[k].v[j] - mh) - ml;
                s2[0] = fmaf(d, d, s2[0]);
#pragma unroll
                for (int n = 0; n < NN; n++) s2[1 + n] = fmaf(gq[k][n].v[j] * wq[n][k].v[j], d, s2[1 + n]);
            }
        }
        const double none[1] = {0.0};
        const DK<1 + NN> t2 = block_sum_df<0, 1 + NN>(none, s2, red[par]);
        par ^= 1;
        const double inv = 1.0 / sqrt(t2.v[0] / dlen + (double)eps);
        const float invf = (float)inv;
        float mg[NN], mgx[NN];
#pragma unroll
        for (int n = 0; n < NN; n++) {
            mg[n] = (float)(t1.v[1 + n] / dlen);
            mgx[n] = (float)(t2.v[1 + n] * inv / dlen);
        }
        /* dx = dh + d1, or (dh + d2) + d1; the parameter gradients' terms into the float sums */
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i >= nv) break;
            F<V> o;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float xh = ((xq[k].v[j] - mh) - ml) * invf;
                float d[NN];
#pragma unroll
                for (int n = 0; n < NN; n++) {
                    const float gv = gq[k][n].v[j];
                    d[n] = invf * fmaf(-xh, mgx[n], gv * wq[n][k].v[j] - mg[n]);
                    acc_s[n][k][j] = fmaf(gv, xh, acc_s[n][k][j]);
                    acc_b[n][k][j] += gv;
                }
                float v = d[NN - 1]; /* NN 2: d2 first, as on the CPU */
                if (row.dh) v = NN > 1 ? hq[k].v[j] + v : hq[k].v[j];
                o.v[j] = row.dh || NN > 1 ? v + d[0] : d[0];
            }
            st<V>(row.dx, i, o);
        }
        if (pb && ++pending == kFlush) {
            flush_part<V, VPT, NN>(pb, len, nv, flushed, acc_s, acc_b);
            flushed = true;
            pending = 0;
        }
    }
    /* the rest; a block without rows writes zeros */
    if (pb && (pending > 0 || !flushed)) flush_part<V, VPT, NN>(pb, len, nv, flushed, acc_s, acc_b);
}

} /* namespace */

#endif
