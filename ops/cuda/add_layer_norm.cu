/* The kernels of ai.fp8run::AddLayerNorm / AddLayerNormGrad (ops/add_layer_norm.c): the
 * residual Add and the LayerNorm(s) of its sum, one pass over the row each way. Built as
 * AddRMSNorm's (ops/cuda/add_norm.cu), with LayerNorm's mean, and a parallel block's second norm
 * of the same sum (Y2: the same statistics, its own Scale2 / Bias2; backward dY2, which adds one
 * sum per reduction and its own parameter sums):
 *
 * One block per row, 32..256 threads; thread t holds the vectors t, t + blockDim, ... of its row
 * in registers (up to 32 floats forward; backward 16, or 8 with the second norm, whose parameter
 * sums take registers too), so each tensor is read once and written once. The forward's
 * statistics in double as on the CPU (ops/norm.c): the mean, then the mean of the squared
 * deviations (two block reductions; no cancellation), each output computed in double and
 * rounded once. h = a + b and dx = dh + d are single float32 adds, as the unfused Adds round them
 * (two norms: (dh + d2) + d1, as on the CPU). The backward's row sums share those two
 * reductions: (sum x, sum g) then (sum (x - mean)^2, sum g (x - mean)), g = dy w (each norm's),
 * and sum(g xh) = inv sum(g (x - mean)); its register path computes each element in float32 and
 * only the sums over the warps in double (add_layer_norm_reg.cuh says why and how close that
 * stays).
 * Block reductions: each warp sums the warps' partials itself in a fixed order, over a
 * double-buffered [2][32] array that alternates from one reduction to the next (one barrier each).
 *
 * dScale and dBias without a second pass: the backward runs one wave of resident blocks, each
 * taking rows blockIdx.x, + gridDim.x, ...; a thread always owns the same columns, so it sums
 * dy xh and dy of its columns over its block's rows in registers and adds them to a
 * [blocks, 2 len] double scratch ([blocks, 4 len] with the second norm); a second small kernel
 * adds the blocks in a fixed order. No atomics: the bits repeat from run to run.
 *
 * Rows that do not fit the registers (len % 4 != 0, or longer rows) take a kernel without the
 * register cache, in double as on the CPU: each pass re-reads the row (L1/L2) and the partials
 * accumulate in the scratch. B may repeat over the leading rows (its row r % b_rows: a position
 * embedding).
 * bfloat16: B, dY and dY2 may be bfloat16 (widened exactly), Y and Y2 may be written in bfloat16
 * (the float32 Y rounded to nearest even); the vector width depends on len only, so every dtype sums in the
 * same order. */
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/add_layer_norm.h"
#include "ops/cuda/add_layer_norm_reg.cuh"
#include "ops/cuda/vec16.cuh"
#include "ops/norm.h"

namespace {

constexpr int kFwdRegs = 32;               /* most floats per thread held in registers, forward */
constexpr int kBwdRegs = 16;               /* and backward (plus 2 floats each for dScale, dBias) */
constexpr int kBwdRegs2 = 8;               /* and backward with the second norm (4 floats each) */
constexpr int64_t kBwdGrid = 512;          /* the backward's grid cap for long rows */
constexpr int64_t kBwdGridMax = 8192;      /* and for short ones */
/* the partials' bytes that lift the cap past kBwdGrid: rows of 768 or 1024 (blocks of 3 or 4
 * warps) fill the multiprocessors with 6 to 8 blocks each, ~13 MiB of partials (in L2 mostly) */
constexpr int64_t kBwdPartBytes = 16 << 20;

/* v summed over the block; every thread gets the same sums. buf: one half of a double-buffered
 * [2][32] array, the other half than the previous reduction's (so one barrier each). */
template <int K> __device__ __forceinline__ DK<K> block_sum(DK<K> v, DK<K> *buf)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1)
#pragma unroll
        for (int k = 0; k < K; k++) v.v[k] += __shfl_down_sync(0xffffffffu, v.v[k], d);
    const int w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    if (threadIdx.x % 32 == 0) buf[w] = v;
    __syncthreads();
    DK<K> s = buf[0];
    for (int i = 1; i < nw; i++)
#pragma unroll
        for (int k = 0; k < K; k++) s.v[k] += buf[i].v[k];
    return s;
}

__device__ __forceinline__ double block_sum1(double a, DK<1> *buf) { return block_sum<1>(DK<1>{{a}}, buf).v[0]; }

/* vector i of a + b: the same float adds wherever it is recomputed */
template <int V, typename TB> __device__ __forceinline__ F<V> ld_sum(const float *a, const TB *b, int64_t i)
{
    F<V> q = ld<V>(a, i);
    const F<V> p = ld<V>(b, i);
#pragma unroll
    for (int j = 0; j < V; j++) q.v[j] += p.v[j];
    return q;
}

template <int V> __device__ __forceinline__ double vsum(const F<V> &q)
{
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < V; j++) s += (double)q.v[j];
    return s;
}

template <int V> __device__ __forceinline__ double vdev2(const F<V> &q, double mean)
{
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double d = (double)q.v[j] - mean;
        s += d * d;
    }
    return s;
}

/* ---------------------------------------------------------------- forward ---- */

/* y's vector i from h's */
template <int V, typename TY>
__device__ __forceinline__ void fwd_out(TY *yr, const float *w, const float *bias, int64_t i, const F<V> &q,
                                        double mean, double inv)
{
    const F<V> wq = ld<V>(w, i);
    F<V> bq;
    if (bias) bq = ld<V>(bias, i);
    F<V> o;
#pragma unroll
    for (int j = 0; j < V; j++) {
        double v = ((double)q.v[j] - mean) * inv * (double)wq.v[j];
        if (bias) v += (double)bq.v[j];
        o.v[j] = (float)v;
    }
    st<V>(yr, i, o);
}

/* y (and y2, when w2 is given) from the row of h: its vector i */
template <int V, typename TY>
__device__ __forceinline__ void fwd_outs(TY *yr, TY *y2r, const float *w, const float *bias, const float *w2,
                                         const float *bias2, int64_t i, const F<V> &q, double mean, double inv)
{
    fwd_out<V>(yr, w, bias, i, q, mean, inv);
    if (y2r) fwd_out<V>(y2r, w2, bias2, i, q, mean, inv);
}

template <int V, int VPT, typename TB, typename TY>
__global__ void __launch_bounds__(kThreads)
    aln_fwd(const float *a, const TB *b, int64_t b_rows, const float *w, const float *bias, const float *w2,
            const float *bias2, float *h, TY *y, TY *y2, int64_t rows, int64_t len, float eps)
{
    __shared__ DK<1> red[2][32];
    const int64_t nv = len / V;
    int par = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *ar = a + r * len;
        const TB *br = b + (r % b_rows) * len;
        float *hr = h + r * len;
        TY *yr = y + r * len, *y2r = y2 ? y2 + r * len : nullptr;
        double s = 0.0, ss = 0.0;
        if constexpr (VPT > 0) {
            F<V> q[VPT];
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) break; /* (i grows with k) */
                q[k] = ld_sum<V>(ar, br, i);
                st<V>(hr, i, q[k]);
                s += vsum<V>(q[k]);
            }
            const double mean = block_sum1(s, red[par]) / (double)len;
            par ^= 1;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) ss += vdev2<V>(q[k], mean);
            }
            const double inv = 1.0 / sqrt(block_sum1(ss, red[par]) / (double)len + (double)eps);
            par ^= 1;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) fwd_outs<V>(yr, y2r, w, bias, w2, bias2, i, q[k], mean, inv);
            }
        } else {
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
                const F<V> q = ld_sum<V>(ar, br, i);
                st<V>(hr, i, q);
                s += vsum<V>(q);
            }
            const double mean = block_sum1(s, red[par]) / (double)len;
            par ^= 1;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) ss += vdev2<V>(ld_sum<V>(ar, br, i), mean);
            const double inv = 1.0 / sqrt(block_sum1(ss, red[par]) / (double)len + (double)eps);
            par ^= 1;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
                fwd_outs<V>(yr, y2r, w, bias, w2, bias2, i, ld_sum<V>(ar, br, i), mean, inv);
        }
    }
}

/* ---------------------------------------------------------------- backward ---- */

/* The norms' dY (gq[k]) and Scales (w[k]) of a vector, NN norms: g = dy w */
template <int V, int NN> struct Vg {
    F<V> gq[NN];
};

/* vector i's share of s1 = (sum x, sum g per norm) */
template <int V, int NN>
__device__ __forceinline__ void bwd_sums1(const Vg<V, NN> &g, const F<V> &xq, const float *const *w, int64_t i,
                                          DK<1 + NN> &s1)
{
#pragma unroll
    for (int n = 0; n < NN; n++) {
        const F<V> wq = ld<V>(w[n], i);
#pragma unroll
        for (int j = 0; j < V; j++) s1.v[1 + n] += (double)g.gq[n].v[j] * (double)wq.v[j];
    }
#pragma unroll
    for (int j = 0; j < V; j++) s1.v[0] += (double)xq.v[j];
}

/* vector i's share of s2 = (sum (x - mean)^2, sum g (x - mean) per norm) */
template <int V, int NN>
__device__ __forceinline__ void bwd_sums2(const Vg<V, NN> &g, const F<V> &xq, const float *const *w, int64_t i,
                                          double mean, DK<1 + NN> &s2)
{
#pragma unroll
    for (int n = 0; n < NN; n++) {
        const F<V> wq = ld<V>(w[n], i);
#pragma unroll
        for (int j = 0; j < V; j++) s2.v[1 + n] += (double)g.gq[n].v[j] * (double)wq.v[j] * ((double)xq.v[j] - mean);
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double d = (double)xq.v[j] - mean;
        s2.v[0] += d * d;
    }
}

/* dx's vector i: dh + d1, or (dh + d2) + d1 (each norm's part rounded first); gxh[n][j] = dy xh
 * and gy[n][j] = dy, the parameter gradients' terms */
template <int V, int NN>
__device__ __forceinline__ void bwd_out(float *dxr, const float *dhr, const float *const *w, int64_t i,
                                        const Vg<V, NN> &g, const F<V> &xq, double mean, double inv, const double *mg,
                                        const double *mgx, double (*gxh)[V], double (*gy)[V])
{
    F<V> wq[NN], o;
#pragma unroll
    for (int n = 0; n < NN; n++) wq[n] = ld<V>(w[n], i);
    if (dhr) o = ld<V>(dhr, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double xh = ((double)xq.v[j] - mean) * inv;
        float d[NN];
#pragma unroll
        for (int n = 0; n < NN; n++) {
            const double gv = (double)g.gq[n].v[j];
            d[n] = (float)(inv * (gv * (double)wq[n].v[j] - mg[n] - xh * mgx[n]));
            gxh[n][j] = gv * xh;
            gy[n][j] = gv;
        }
        float v = d[NN - 1]; /* NN 2: d2 first, as on the CPU */
        if (dhr) v = NN > 1 ? o.v[j] + v : o.v[j];
        o.v[j] = dhr || NN > 1 ? v + d[0] : d[0];
    }
    st<V>(dxr, i, o);
}

/* The row's second reduction s2 (over buf) and what the outputs need from both: returns 1 / std;
 * mg[n] = mean(g_n), mgx[n] = mean(g_n xh) */
template <int NN>
__device__ __forceinline__ double finish_row(const DK<1 + NN> &s1, DK<1 + NN> s2, DK<1 + NN> *buf, double dlen,
                                             float eps, double *mg, double *mgx)
{
    s2 = block_sum<1 + NN>(s2, buf);
    const double inv = 1.0 / sqrt(s2.v[0] / dlen + (double)eps);
#pragma unroll
    for (int n = 0; n < NN; n++) {
        mg[n] = s1.v[1 + n] / dlen;
        mgx[n] = s2.v[1 + n] * inv / dlen;
    }
    return inv;
}

/* dx = dh + inv (g - mean(g) - xh mean(g xh)) per norm; part[blockIdx.x][(2 n + 0) len + col] = sum
 * of dy_n xh over the block's rows, [(2 n + 1) len + col] = sum of dy_n (part NULL: none wanted).
 * This kernel re-reads the row in each pass (rows that do not fit the registers; aln_bwd_reg
 * in add_layer_norm_reg.cuh is the register path) and accumulates the partials in the scratch. */
template <int V, int NN, typename TD>
__global__ void __launch_bounds__(kThreads)
    aln_bwd(const TD *dy, const void *dy2, int dy2_bf16, const float *x, const float *w1, const float *w2,
            const float *dh, float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    __shared__ DK<1 + NN> red[2][32];
    const int64_t nv = len / V, pl = 2 * NN * len;
    const float *const w[2] = {w1, w2};
    double *pb = part ? part + (int64_t)blockIdx.x * pl : nullptr;
    if (pb)
        for (int64_t c = threadIdx.x; c < nv; c += blockDim.x)
#pragma unroll
            for (int n = 0; n < 2 * NN; n++)
#pragma unroll
                for (int j = 0; j < V; j++) pb[n * len + c * V + j] = 0.0;
    int par = 0;
    const double dlen = (double)len;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TD *dyr = dy + r * len;
        const void *dy2r = dy2_row<NN>(dy2, dy2_bf16, r, len);
        const float *xr = x + r * len, *dhr = dh ? dh + r * len : nullptr;
        float *dxr = dx + r * len;
        DK<1 + NN> s1, s2;
#pragma unroll
        for (int n = 0; n <= NN; n++) s1.v[n] = s2.v[n] = 0.0;
        double gxh[NN][V], gy[NN][V], mg[NN], mgx[NN];
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            Vg<V, NN> g;
            g.gq[0] = ld<V>(dyr, i);
            if constexpr (NN > 1) g.gq[1] = ld_dy2<V>(dy2r, dy2_bf16, i);
            bwd_sums1<V, NN>(g, ld<V>(xr, i), w, i, s1);
        }
        s1 = block_sum<1 + NN>(s1, red[par]);
        par ^= 1;
        const double mean = s1.v[0] / dlen;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            Vg<V, NN> g;
            g.gq[0] = ld<V>(dyr, i);
            if constexpr (NN > 1) g.gq[1] = ld_dy2<V>(dy2r, dy2_bf16, i);
            bwd_sums2<V, NN>(g, ld<V>(xr, i), w, i, mean, s2);
        }
        const double inv = finish_row<NN>(s1, s2, red[par], dlen, eps, mg, mgx);
        par ^= 1;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            Vg<V, NN> g;
            g.gq[0] = ld<V>(dyr, i);
            if constexpr (NN > 1) g.gq[1] = ld_dy2<V>(dy2r, dy2_bf16, i);
            bwd_out<V, NN>(dxr, dhr, w, i, g, ld<V>(xr, i), mean, inv, mg, mgx, gxh, gy);
            if (pb)
#pragma unroll
                for (int n = 0; n < NN; n++)
#pragma unroll
                    for (int j = 0; j < V; j++) { /* this thread's own columns */
                        pb[2 * n * len + i * V + j] += gxh[n][j];
                        pb[(2 * n + 1) * len + i * V + j] += gy[n][j];
                    }
        }
    }
}

/* The parameter gradients' outputs: out[q] takes columns [q len, (q + 1) len) of the partials
 * (dScale, dBias, dScale2, dBias2; NULL: not wanted) */
struct DwOut {
    float *out[4];
};

/* column c of [blocks, nq len] summed over the blocks into out[c / len][c % len]. Block (32, 32):
 * thread (x, y) adds blocks y, y + 32, ... of column 32 blockIdx.x + x in order, then the 32
 * lanes in a fixed tree. */
__global__ void __launch_bounds__(1024) aln_dw(const double *part, int64_t blocks, int64_t len, int nq, DwOut o)
{
    __shared__ double red[32][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, cols = nq * len;
    double s = 0.0;
    if (c < cols)
        for (int64_t b = threadIdx.y; b < blocks; b += 32) s += part[b * cols + c];
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = 16; h > 0; h >>= 1) {
        if (threadIdx.y < h) red[threadIdx.y][threadIdx.x] += red[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y != 0 || c >= cols) return;
    float *out = o.out[c / len];
    if (out) out[c % len] = (float)red[0][threadIdx.x];
}

/* ---------------------------------------------------------------- launch ---- */

/* the vector's elements (1: none), vectors per thread of the register path (0: none), threads */
struct Shape {
    int vec, vpt, threads;
};

/* The vector depends on len, the alignment and the register cap only, never on the dtypes:
 * 8 elements when len % 8 == 0, else 4 when len % 4 == 0 (16-byte aligned tensors). */
Shape shape_of(int64_t len, int aligned, int max_regs)
{
    Shape s{!aligned ? 1 : len % 8 == 0 ? 8 : len % 4 == 0 ? 4 : 1, 0, kThreads};
    const int64_t nv = len / s.vec;
    if (s.vec > 1)
        for (int v = 1; v * s.vec <= max_regs; v *= 2)
            if ((nv + v - 1) / v <= kThreads) {
                s.vpt = v;
                s.threads = (int)(((nv + v - 1) / v + 31) / 32 * 32);
                break;
            }
    return s;
}

/* the partials' columns: 2 (dScale, dBias) per norm */
int64_t bwd_blocks(int64_t rows, int64_t len, int nn)
{
    int64_t cap = kBwdPartBytes / ((len > 0 ? 2 * nn * len : 1) * (int64_t)sizeof(double));
    cap = cap < kBwdGrid ? kBwdGrid : cap > kBwdGridMax ? kBwdGridMax : cap;
    return rows < cap ? rows : cap;
}

unsigned fwd_blocks(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

int al16(const void *p) { return fr_aligned_to(p, 16); }

struct FwdArgs {
    const float *a;
    const void *b;
    int64_t b_rows;
    const float *w, *bias, *w2, *bias2;
    float *h;
    void *y, *y2;
    int64_t rows, len;
    float eps;
};

template <int V, int VPT, typename TB, typename TY> void launch_fwd(int threads, cudaStream_t st, const FwdArgs &p)
{
    if constexpr (V * VPT <= kFwdRegs)
        aln_fwd<V, VPT, TB, TY><<<fwd_blocks(p.rows), threads, 0, st>>>(p.a, (const TB *)p.b, p.b_rows, p.w, p.bias,
                                                                        p.w2, p.bias2, p.h, (TY *)p.y, (TY *)p.y2,
                                                                        p.rows, p.len, p.eps);
}

template <int V, typename TB, typename TY> void fwd_v(const Shape &s, cudaStream_t st, const FwdArgs &p)
{
    switch (s.vpt) {
    case 1: launch_fwd<V, 1, TB, TY>(s.threads, st, p); break;
    case 2: launch_fwd<V, 2, TB, TY>(s.threads, st, p); break;
    case 4: launch_fwd<V, 4, TB, TY>(s.threads, st, p); break;
    case 8: launch_fwd<V, 8, TB, TY>(s.threads, st, p); break;
    default: launch_fwd<V, 0, TB, TY>(s.threads, st, p); break;
    }
}

template <typename TB, typename TY> void fwd_t(cudaStream_t st, const FwdArgs &p)
{
    const int al = al16(p.a) && al16(p.b) && al16(p.w) && al16(p.bias) && al16(p.w2) && al16(p.bias2) && al16(p.h) &&
                   al16(p.y) && al16(p.y2);
    const Shape s = shape_of(p.len, al, kFwdRegs);
    if (s.vec == 8)
        fwd_v<8, TB, TY>(s, st, p);
    else if (s.vec == 4)
        fwd_v<4, TB, TY>(s, st, p);
    else
        launch_fwd<1, 0, TB, TY>(s.threads, st, p);
}

struct BwdArgs {
    const void *dy, *dy2; /* dy2 NULL: one norm */
    int dy2_bf16;
    const float *x, *w, *w2, *dh;
    float *dx;
    double *part;
    int64_t rows, len;
    float eps;
};

/* one wave of resident blocks, at most bwd_blocks; the float32 kernel of the shape sizes it
 * whatever dY's dtype, so the order of the partial sums does not depend on the dtype */
template <class K> int64_t bwd_grid(K kernel, int threads, int sm_count, int64_t rows, int64_t len, int nn)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    const int64_t wave = (int64_t)per_sm * (sm_count > 0 ? sm_count : 1), cap = bwd_blocks(rows, len, nn);
    return wave < cap ? wave : cap;
}

template <int V, int VPT, int NN, typename TD>
int64_t launch_bwd(int threads, int sm_count, cudaStream_t st, const BwdArgs &p)
{
    if constexpr (VPT == 0) {
        const int64_t g = bwd_grid(aln_bwd<V, NN, float>, threads, sm_count, p.rows, p.len, NN);
        aln_bwd<V, NN, TD><<<(unsigned)g, threads, 0, st>>>((const TD *)p.dy, p.dy2, p.dy2_bf16, p.x, p.w, p.w2, p.dh,
                                                            p.dx, p.part, p.rows, p.len, p.eps);
        return g;
    } else if constexpr (V * VPT <= (NN > 1 ? kBwdRegs2 : kBwdRegs)) {
        const int64_t g = bwd_grid(aln_bwd_reg<V, VPT, NN, float>, threads, sm_count, p.rows, p.len, NN);
        aln_bwd_reg<V, VPT, NN, TD><<<(unsigned)g, threads, 0, st>>>((const TD *)p.dy, p.dy2, p.dy2_bf16, p.x, p.w,
                                                                     p.w2, p.dh, p.dx, p.part, p.rows, p.len, p.eps);
        return g;
    }
    return 0;
}

template <int V, int NN, typename TD> int64_t bwd_v(const Shape &s, int sm_count, cudaStream_t st, const BwdArgs &p)
{
    switch (s.vpt) {
    case 1: return launch_bwd<V, 1, NN, TD>(s.threads, sm_count, st, p);
    case 2: return launch_bwd<V, 2, NN, TD>(s.threads, sm_count, st, p);
    case 4: return launch_bwd<V, 4, NN, TD>(s.threads, sm_count, st, p);
    default: return launch_bwd<V, 0, NN, TD>(s.threads, sm_count, st, p);
    }
}

template <int NN, typename TD> int64_t bwd_n(int sm_count, cudaStream_t st, const BwdArgs &p)
{
    const int al = al16(p.dy) && al16(p.dy2) && al16(p.x) && al16(p.w) && al16(p.w2) && al16(p.dh) && al16(p.dx);
    const Shape s = shape_of(p.len, al, NN > 1 ? kBwdRegs2 : kBwdRegs);
    if (s.vec == 8) return bwd_v<8, NN, TD>(s, sm_count, st, p);
    if (s.vec == 4) return bwd_v<4, NN, TD>(s, sm_count, st, p);
    return launch_bwd<1, 0, NN, TD>(s.threads, sm_count, st, p);
}

template <typename TD> int64_t bwd_t(int sm_count, cudaStream_t st, const BwdArgs &p)
{
    return p.dy2 ? bwd_n<2, TD>(sm_count, st, p) : bwd_n<1, TD>(sm_count, st, p);
}

size_t bwd_scratch(int64_t rows, int64_t len, int nn)
{
    const int64_t b = bwd_blocks(rows, len, nn);
    return (size_t)(b > 0 ? b : 1) * (size_t)(len > 0 ? 2 * nn * len : 1) * sizeof(double);
}

fr_status f32_or_bf16(const fr_node *n, fr_dtype dt, const char *what)
{
    if (dt == FR_F32 || dt == FR_BF16) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s (float32 or bfloat16 only)", what, fr_dtype_name(dt));
}

/* ---------------------------------------------------------------- the ops ---- */

const void *in_data(const fr_cuda_kctx *k, int i) { return k->n_in > i && k->in[i] ? k->in[i]->data : nullptr; }

fr_status aln_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const int two = k->n_in > 4 && k->in[4];
    if (k->n_in < 3 || k->n_in > 6 || k->n_out != 2 + two || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0] ||
        !k->out[1] || (two && !k->out[2]))
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (A, B, Scale[, Bias[, Scale2[, Bias2]]] -> H, Y[, Y2])",
                             k->n_in, k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[0]->rank, k->in[0]->dims, &c));
    const fr_dtype bt = k->in[1]->dtype, yt = k->out[1]->dtype;
    FR_TRY(f32_or_bf16(n, bt, "B"));
    FR_TRY(f32_or_bf16(n, yt, "Y"));
    if (two && k->out[2]->dtype != yt) return fr_node_error(n, FR_ERR_GRAPH, "Y2 must have Y's dtype");
    if (c.rows <= 0 || c.len <= 0) return FR_OK;
    const int64_t b_rows = fr_tensor_numel(k->in[1]) / c.len;
    if (b_rows < 1 || b_rows * c.len != fr_tensor_numel(k->in[1]) || c.rows % b_rows != 0)
        return fr_node_error(n, FR_ERR_SHAPE, "B does not repeat over A's rows (re-run shape inference)");
    const FwdArgs p = {(const float *)k->in[0]->data,
                       k->in[1]->data,
                       b_rows,
                       (const float *)k->in[2]->data,
                       (const float *)in_data(k, 3),
                       (const float *)in_data(k, 4),
                       (const float *)in_data(k, 5),
                       (float *)k->out[0]->data,
                       k->out[1]->data,
                       two ? k->out[2]->data : nullptr,
                       c.rows,
                       c.len,
                       c.eps};
    cudaStream_t st = k->cu->stream;
    if (bt == FR_BF16 && yt == FR_BF16)
        fwd_t<bf16, bf16>(st, p);
    else if (bt == FR_BF16)
        fwd_t<bf16, float>(st, p);
    else if (yt == FR_BF16)
        fwd_t<float, bf16>(st, p);
    else
        fwd_t<float, float>(st, p);
    return fr_cuda_check_launch(n, n->op_type);
}

fr_status alng_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 3 || n->inputs[1] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs dY, H and Scale");
    const fr_value *x = &g->values[n->inputs[1]];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    *bytes = bwd_scratch(c.rows, c.len, n->n_inputs > 4 && n->inputs[4] >= 0 ? 2 : 1);
    return FR_OK;
}

/* the backward's kernels: dX, then the parameter gradients (o; nq of them: 2 per norm) from the
 * blocks' partials; dy_bf16: dY is bfloat16 */
fr_status bwd_run(const fr_node *n, int sm_count, cudaStream_t st, int dy_bf16, const BwdArgs &p, const DwOut &o, int nq)
{
    int64_t blocks = 0;
    if (bwd_blocks(p.rows, p.len, nq / 2) > 0) {
        blocks = dy_bf16 ? bwd_t<bf16>(sm_count, st, p) : bwd_t<float>(sm_count, st, p);
        FR_TRY(fr_cuda_check_launch(n, n->op_type));
    }
    if (!p.part) return FR_OK;
    /* no rows: the partials are no blocks' and the sums 0 */
    aln_dw<<<(unsigned)((nq * p.len + 31) / 32), dim3(32, 32), 0, st>>>(p.part, blocks, p.len, nq, o);
    return fr_cuda_check_launch(n, n->op_type);
}

fr_status alng_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const int two = k->n_in > 4 && k->in[4], nn = 1 + two, nq = 2 * nn;
    if (k->n_in < 3 || k->n_in > 6 || k->n_out != 3 + 2 * two || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0] ||
        (two && (k->n_in < 6 || !k->in[5])))
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (dY, H, Scale[, dH[, dY2, Scale2]] -> dX, dScale, "
                             "dBias[, dScale2, dBias2])",
                             k->n_in, k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[1]->rank, k->in[1]->dims, &c));
    FR_TRY(f32_or_bf16(n, k->in[0]->dtype, "dY"));
    if (two) FR_TRY(f32_or_bf16(n, k->in[4]->dtype, "dY2"));
    DwOut o = {{nullptr, nullptr, nullptr, nullptr}};
    int want_p = 0;
    for (int q = 0; q < nq; q++) {
        o.out[q] = k->out[1 + q] ? (float *)k->out[1 + q]->data : nullptr;
        want_p = want_p || o.out[q];
    }
    if (c.len <= 0) return FR_OK;
    const size_t need = bwd_scratch(c.rows, c.len, nn);
    if (want_p && (!k->scratch || k->scratch_bytes < need))
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
    const BwdArgs p = {k->in[0]->data,
                       in_data(k, 4),
                       two && k->in[4]->dtype == FR_BF16,
                       (const float *)k->in[1]->data,
                       (const float *)k->in[2]->data,
                       (const float *)in_data(k, 5),
                       (const float *)in_data(k, 3),
                       (float *)k->out[0]->data,
                       want_p ? (double *)k->scratch : nullptr,
                       c.rows,
                       c.len,
                       c.eps};
    return bwd_run(n, k->cu->sm_count, k->cu->stream, k->in[0]->dtype == FR_BF16, p, o, nq);
}

} /* namespace */

int fr_ln_rows_fast(int64_t len) { return len > 0 && shape_of(len, 1, kBwdRegs).vpt > 0; }

size_t fr_ln_rows_bwd_scratch(int64_t rows, int64_t len) { return bwd_scratch(rows, len, 1); }

fr_status fr_ln_rows_bwd(const fr_node *n, cudaStream_t st, int sm_count, const float *dy, const float *x,
                         const float *w, float *dx, float *dw, float *db, void *scratch, size_t scratch_bytes,
                         int64_t rows, int64_t len, float eps)
{
    if (len <= 0) return FR_OK;
    const int want_p = dw || db;
    const size_t need = bwd_scratch(rows, len, 1);
    if (want_p && (!scratch || scratch_bytes < need))
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", scratch_bytes, need);
    const BwdArgs p = {dy, nullptr, 0, x, w, nullptr, nullptr, dx, want_p ? (double *)scratch : nullptr, rows, len, eps};
    const DwOut o = {{dw, db, nullptr, nullptr}};
    return bwd_run(n, sm_count, st, 0, p, o, 2);
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_add_layer_norm[] = {
    {"AddLayerNorm", FR_DOMAIN_FP8RUN, aln_cuda, NULL},
    {"AddLayerNormGrad", FR_DOMAIN_FP8RUN, alng_cuda, alng_scratch},
    {NULL, NULL, NULL, NULL},
};
