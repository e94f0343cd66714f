/* RMSNorm rows at memory speed (see add_norm.h), and the kernels of ai.fp8run::AddRMSNorm /
 * AddRMSNormGrad (ops/add_norm.c).
 *
 * One block per row, 32..256 threads; thread t holds the vectors t, t + blockDim, ... of its
 * row in registers (up to 32 floats), so each tensor is read once and written once: forward a, b
 * read and h, y written; backward dy, x, dh read and dx written. One block reduction per row
 * (double, fixed order: each warp sums the warps' partials itself, double-buffered so one
 * barrier per row). The backward's two row sums (sum x^2 and sum dy w x) share that reduction:
 * sum(dy w xh) = inv * sum(dy w x).
 *
 * dScale without a second pass over dy and x: the backward runs one wave of resident blocks
 * (at most bwd_blocks: 512, more for short rows; the grid depends on the device and the row
 * length only), each taking rows blockIdx.x, + gridDim.x, ...; a thread always owns the same
 * columns, so it sums dy * xh of its columns over its block's rows in registers (double) and
 * writes them once to a [blocks, len] scratch; a second small kernel adds the blocks in a fixed
 * order (32 columns x 32 lanes of blocks per thread block, then a tree over the lanes).
 * Short rows (a per-head q/k norm: 128 features, one warp a block) need many blocks in flight
 * to reach the memory's speed: the grid cap grows as the rows shorten (partials up to 4 MiB).
 * No atomics: the bits repeat from run to run.
 * The backward of rows of 768..4096 (multiples of 256 up to 2048, of 512 above) takes
 * rms_bwd_team instead (teams of warps a row, several teams a block, no block barrier a row;
 * see there) unless FP8RUN_RMS_BWD_TEAMS=0, read at every launch.
 *
 * Rows that do not fit the registers (len % 4 != 0 or len > 8192) take the same kernels
 * without the register cache: each pass re-reads the row (L1/L2) and the dScale partials
 * accumulate in the scratch. Arithmetic as on the CPU (ops/norm.c, ops/add_norm.c): statistics
 * in double, each output computed in double and rounded once; h = a + b and dx = dh + d are
 * single float32 adds, as the unfused Add rounds them.
 *
 * bfloat16 (half the bytes around the FP8 Linears): B and dY may be bfloat16 (widened
 * exactly: the bits of the float32 tensor of the same values), Y may be written in bfloat16
 * (the float32 Y rounded to nearest even). The forward may also write H's bfloat16 copy (Hs,
 * the backward's H), the backward read H in bfloat16 (widened exactly, like dY).
 * The dtypes are template parameters; a vector is 8 elements (two float4, one 16-byte bfloat16
 * word; vec16.cuh) when len % 8 == 0, else 4, chosen from len alone (shape_of), so that every
 * dtype sums in the same order. */
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/add_norm.h"
#include "ops/cuda/vec16.cuh"
#include "ops/norm.h"

extern "C" {
#include "graph/env.h"
}

namespace {

constexpr int kThreads = 256;  /* most threads per block */
constexpr int kMaxRegs = 32;   /* most floats per thread held in registers (vectors x V) */
constexpr int64_t kBwdGrid = 512;        /* the backward's grid cap for long rows */
constexpr int64_t kBwdGridMax = 8192;    /* and for short ones */
constexpr int64_t kBwdPartBytes = 4 << 20; /* the dScale partials' bytes that lift the cap past kBwdGrid */

typedef __nv_bfloat16 bf16;

/* vector i of a float32 or bfloat16 row as V floats, and back (vec16.cuh) */
template <int V> using F = fr_vf<V>;
template <int V, typename T> __device__ __forceinline__ F<V> ld(const T *p, int64_t i) { return fr_vld<V>(p, i); }
template <int V, typename T> __device__ __forceinline__ void st(T *p, int64_t i, const F<V> &q) { fr_vst<V>(p, i, q); }

/* (a, b) summed over the block; every thread gets the same sums. buf: this row's half of a
 * double-buffered [2][32] array (the other half is the next row's, so no trailing barrier). */
__device__ __forceinline__ double2 block_sum2(double a, double b, double2 *buf)
{
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        a += __shfl_down_sync(0xffffffffu, a, d);
        b += __shfl_down_sync(0xffffffffu, b, d);
    }
    const int w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    if (threadIdx.x % 32 == 0) buf[w] = make_double2(a, b);
    __syncthreads();
    double2 s = buf[0];
    for (int i = 1; i < nw; i++) {
        s.x += buf[i].x;
        s.y += buf[i].y;
    }
    return s;
}

__device__ __forceinline__ double inv_rms(double ss, int64_t len, float eps)
{
    return 1.0 / sqrt(ss / (double)len + (double)eps);
}

/* ---------------------------------------------------------------- forward ---- */

/* vector i of a + b (b NULL: of a): the same float adds wherever it is recomputed */
template <int V, typename TB> __device__ __forceinline__ F<V> ld_sum(const float *a, const TB *b, int64_t i)
{
    F<V> q = ld<V>(a, i);
    if (b) {
        const F<V> p = ld<V>(b, i);
#pragma unroll
        for (int j = 0; j < V; j++) q.v[j] += p.v[j];
    }
    return q;
}

template <int V> __device__ __forceinline__ double sum_sq(const F<V> &q)
{
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < V; j++) s += (double)q.v[j] * (double)q.v[j];
    return s;
}

/* y's vector i from h's */
template <int V, typename TY>
__device__ __forceinline__ void fwd_out(TY *yr, const float *w, int64_t i, const F<V> &q, double inv)
{
    const F<V> wq = ld<V>(w, i);
    F<V> o;
#pragma unroll
    for (int j = 0; j < V; j++) o.v[j] = (float)((double)q.v[j] * inv * (double)wq.v[j]);
    st<V>(yr, i, o);
}

template <int V, int VPT, typename TB, typename TY>
__global__ void __launch_bounds__(kThreads) rms_fwd(const float *a, const TB *b, const float *w, float *h, TY *y,
                                                   bf16 *hs, int64_t rows, int64_t len, float eps)
{
    __shared__ double2 red[2][32];
    const int64_t nv = len / V;
    int par = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x, par ^= 1) {
        const float *ar = a + r * len;
        const TB *br = b ? b + r * len : nullptr;
        float *hr = h ? h + r * len : nullptr;
        bf16 *hsr = hs ? hs + r * len : nullptr; /* H's bfloat16 copy for the backward */
        TY *yr = y + r * len;
        double ss = 0.0;
        if constexpr (VPT > 0) {
            F<V> q[VPT];
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                q[k] = ld_sum<V>(ar, br, i);
                if (hr) st<V>(hr, i, q[k]);
                if (hsr) st<V>(hsr, i, q[k]);
                ss += sum_sq<V>(q[k]);
            }
            const double inv = inv_rms(block_sum2(ss, 0.0, red[par]).x, len, eps);
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) fwd_out<V>(yr, w, i, q[k], inv);
            }
        } else {
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
                const F<V> q = ld_sum<V>(ar, br, i);
                if (hr) st<V>(hr, i, q);
                if (hsr) st<V>(hsr, i, q);
                ss += sum_sq<V>(q);
            }
            const double inv = inv_rms(block_sum2(ss, 0.0, red[par]).x, len, eps);
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) fwd_out<V>(yr, w, i, ld_sum<V>(ar, br, i), inv);
        }
    }
}

/* ---------------------------------------------------------------- backward ---- */

/* the row sums' share of vector i: sum x^2 (.x) and sum dy w x (.y) */
template <int V>
__device__ __forceinline__ void bwd_sums(const F<V> &gq, const F<V> &xq, const float *w, int64_t i, double &ss, double &sg)
{
    const F<V> wq = ld<V>(w, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double xv = (double)xq.v[j];
        ss += xv * xv;
        sg += (double)gq.v[j] * (double)wq.v[j] * xv;
    }
}

/* dx's vector i (dh + the norm's part, rounded first); gxh[j] = dy xh, dScale's terms */
template <int V>
__device__ __forceinline__ void bwd_out(float *dxr, const float *dhr, const float *w, int64_t i, const F<V> &gq,
                                        const F<V> &xq, double inv, double mgx, double *gxh)
{
    const F<V> wq = ld<V>(w, i);
    F<V> o;
    if (dhr) o = ld<V>(dhr, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double xh = (double)xq.v[j] * inv, g = (double)gq.v[j];
        const float d = (float)(inv * (g * (double)wq.v[j] - xh * mgx));
        o.v[j] = dhr ? o.v[j] + d : d;
        gxh[j] = g * xh;
    }
    st<V>(dxr, i, o);
}

/* dx = dh + inv (dy w - xh mean(dy w xh)), xh = x inv; part[blockIdx.x][col] = sum of dy xh over
 * the block's rows (part NULL: dScale not wanted) */
template <int V, int VPT, typename TD, typename TX>
__global__ void __launch_bounds__(kThreads) rms_bwd(const TD *dy, const TX *x, const float *w, const float *dh,
                                                   float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    __shared__ double2 red[2][32];
    const int64_t nv = len / V;
    double *pb = part ? part + (int64_t)blockIdx.x * len : nullptr;
    constexpr int KA = VPT > 0 ? VPT : 1;
    double acc[KA][V];
#pragma unroll
    for (int k = 0; k < KA; k++)
#pragma unroll
        for (int j = 0; j < V; j++) acc[k][j] = 0.0;
    if (VPT == 0 && pb)
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
#pragma unroll
            for (int j = 0; j < V; j++) pb[i * V + j] = 0.0;
    int par = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x, par ^= 1) {
        const TD *dyr = dy + r * len;
        const TX *xr = x + r * len;
        const float *dhr = dh ? dh + r * len : nullptr;
        float *dxr = dx + r * len;
        double ss = 0.0, sg = 0.0, gxh[V];
        if constexpr (VPT > 0) {
            F<V> gq[VPT], xq[VPT];
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                gq[k] = ld<V>(dyr, i);
                xq[k] = ld<V>(xr, i);
                bwd_sums<V>(gq[k], xq[k], w, i, ss, sg);
            }
            const double2 s = block_sum2(ss, sg, red[par]);
            const double inv = inv_rms(s.x, len, eps), mgx = s.y * inv / (double)len;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                bwd_out<V>(dxr, dhr, w, i, gq[k], xq[k], inv, mgx, gxh);
#pragma unroll
                for (int j = 0; j < V; j++) acc[k][j] += gxh[j];
            }
        } else {
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
                bwd_sums<V>(ld<V>(dyr, i), ld<V>(xr, i), w, i, ss, sg);
            const double2 s = block_sum2(ss, sg, red[par]);
            const double inv = inv_rms(s.x, len, eps), mgx = s.y * inv / (double)len;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
                bwd_out<V>(dxr, dhr, w, i, ld<V>(dyr, i), ld<V>(xr, i), inv, mgx, gxh);
                if (pb)
#pragma unroll
                    for (int j = 0; j < V; j++) pb[i * V + j] += gxh[j]; /* this thread's own columns */
            }
        }
    }
    if constexpr (VPT > 0) {
        if (!pb) return;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i >= nv) continue;
#pragma unroll
            for (int j = 0; j < V; j++) pb[i * V + j] = acc[k][j];
        }
    }
}

/* dw[j] = the blocks' partials of column j: block (32, 32), thread (x, y) adds blocks y, y + 32,
 * ... of column 32 blockIdx.x + x in order, then the 32 lanes in a fixed tree */
__global__ void __launch_bounds__(1024) rms_dw(const double *part, int64_t blocks, int64_t len, float *dw)
{
    __shared__ double red[32][33];
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    double s = 0.0;
    if (j < len) {
#pragma unroll 8 /* the loads of several blocks in flight; the adds stay in order */
        for (int64_t b = threadIdx.y; b < blocks; b += 32) s += part[b * len + j];
    }
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = 16; h > 0; h >>= 1) {
        if (threadIdx.y < h) red[threadIdx.y][threadIdx.x] += red[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && j < len) dw[j] = (float)red[0][threadIdx.x];
}

/* ---------------------------------------------------------------- backward, teams of warps ---- */

/* Rows of 768..2048 elements (len % 256 == 0) and of 2560..4096 (len % 512 == 0), every tensor
 * 16-byte aligned (the common hidden sizes): a team of warps owns a row at a time, each thread
 * VPT 8-element vectors of it (one 16-byte word of a bfloat16 dY, two float4 of a float32 one):
 * VPT = 1 up to 2048 (teams of len / 256 warps: 3..8), 2 above (len / 512 warps: 5..8; vectors
 * t and t + threads, as rms_bwd). A block holds as many teams as fit 8 warps (2 of 3 or 4
 * warps, else 1) and its teams take rows team, team + teams in the grid, ... without waiting for
 * each other: a row's two sums go through warp shuffles and one named barrier of the team's
 * warps (bar.sync 1 + team), never a block barrier, so while one team reduces, the others'
 * loads are in flight. dy, x and dh are all loaded before the reduction (one memory latency a
 * row, not two). The dScale sums of a thread's columns (double) sit in shared memory, not
 * registers, which keeps the kernel at <= 80 (VPT 1) / 128 (VPT 2) registers without spills:
 * 3 (2) blocks of 8 warps a multiprocessor. The block adds its teams' sums in team order once at
 * the end (one block barrier) into one row of part: the grid is one wave of the float32
 * kernel's blocks, whatever dY's dtype.
 * The row sums are rms_bwd's: a thread holds the same vectors (rms_bwd's block is one team),
 * sums its elements in the same order, and the warps' partials are added in warp order, so dX
 * is expected to have rms_bwd's bits; dScale's sums are grouped by team and block, not by
 * block, so it matches rms_bwd's within rounding. */
constexpr int kTeamV = 8;     /* elements per vector */
constexpr int kTeamWarps = 8; /* most warps per block */
constexpr int kTeamMinLen = 768;
constexpr int kTeamMaxLen = 4096;

/* vectors per thread for rows of len (0: not a team kernel's row) */
int team_vpt(int64_t len)
{
    if (len >= kTeamMinLen && len <= 2048 && len % 256 == 0) return 1;
    if (len > 2048 && len <= kTeamMaxLen && len % 512 == 0) return 2;
    return 0;
}

/* v, the compiler not knowing so: the output pass converts x and dy to double again rather than
 * keep the sums' doubles alive across the reduction (twice the registers) */
__device__ __forceinline__ float opaque(float v)
{
    float r;
    asm volatile("mov.b32 %0, %1;" : "=f"(r) : "f"(v));
    return r;
}

/* the team's warps meet: barrier 1 + team (0 is __syncthreads'); at most 2 teams a block (teams
 * of >= 3 warps in blocks of <= 8), and constant ids leave the block 3 barriers, not all 16 */
__device__ __forceinline__ void team_sync(int team, int threads)
{
    if (team == 0)
        asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
    else
        asm volatile("bar.sync 2, %0;" ::"r"(threads) : "memory");
}

template <int VPT, typename TD, typename TX> __global__ void __launch_bounds__(kTeamWarps * 32, VPT == 1 ? 3 : 2)
    rms_bwd_team(const TD *dy, const TX *x, const float *w, const float *dh, float *dx, double *part, int rows,
                 int len, int teams, float eps)
{
    constexpr int V = kTeamV, B = kTeamWarps * 32;
    __shared__ double2 red[2][kTeamWarps];        /* per warp, double-buffered by row parity */
    __shared__ double acc[VPT * V][B];            /* thread i's dScale sums: acc[k V + j][i] */
    const int nt = len / (V * VPT), nw = nt / 32; /* threads, warps of a team */
    const int team = (int)threadIdx.x / nt, t = (int)threadIdx.x % nt;
    if (part)
#pragma unroll
        for (int j = 0; j < VPT * V; j++) acc[j][threadIdx.x] = 0.0;
    const int step = (int)gridDim.x * teams;
    int par = 0;
    for (int r = (int)blockIdx.x * teams + team; r < rows; r += step, par ^= 1) {
        const int64_t o = (int64_t)r * len;
        F<V> gq[VPT], xq[VPT], hq[VPT];
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            gq[k] = ld<V>(dy + o, t + k * nt);
            xq[k] = ld<V>(x + o, t + k * nt);
            if (dh) hq[k] = ld<V>(dh + o, t + k * nt);
        }
        double ss = 0.0, sg = 0.0;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const F<V> wq = ld<V>(w, t + k * nt);
#pragma unroll
            for (int j = 0; j < V; j++) {
                const double xv = (double)xq[k].v[j];
                ss += xv * xv;
                sg += (double)gq[k].v[j] * (double)wq.v[j] * xv;
            }
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            ss += __shfl_down_sync(0xffffffffu, ss, d);
            sg += __shfl_down_sync(0xffffffffu, sg, d);
        }
        if (threadIdx.x % 32 == 0) red[par][threadIdx.x / 32] = make_double2(ss, sg);
        team_sync(team, nt);
        const double2 *rp = red[par] + team * nw;
        double2 s = rp[0];
        for (int i = 1; i < nw; i++) {
            s.x += rp[i].x;
            s.y += rp[i].y;
        }
        const double inv = inv_rms(s.x, len, eps), mgx = s.y * inv / (double)len;
#pragma unroll
        for (int k = 0; k < VPT; k++) {
            const F<V> wq = ld<V>(w, t + k * nt);
            F<V> ov;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const double xh = (double)opaque(xq[k].v[j]) * inv, g = (double)opaque(gq[k].v[j]);
                const float d = (float)(inv * (g * (double)wq.v[j] - xh * mgx));
                ov.v[j] = dh ? hq[k].v[j] + d : d;
                if (part) acc[k * V + j][threadIdx.x] += g * xh;
            }
            st<V>(dx + o, t + k * nt, ov);
        }
    }
    if (!part) return; /* the same for the whole block */
    __syncthreads();
    if (team > 0) return;
#pragma unroll
    for (int k = 0; k < VPT; k++) {
        double2 *pb = reinterpret_cast<double2 *>(part + (int64_t)blockIdx.x * len + (int64_t)(t + k * nt) * V);
#pragma unroll
        for (int j = 0; j < V; j += 2) {
            double2 q = make_double2(acc[k * V + j][t], acc[k * V + j + 1][t]);
            for (int m = 1; m < teams; m++) { /* in team order */
                q.x += acc[k * V + j][m * nt + t];
                q.y += acc[k * V + j + 1][m * nt + t];
            }
            pb[j / 2] = q;
        }
    }
}

/* ---------------------------------------------------------------- launch ---- */

/* the vector's elements (1: none), vectors per thread of the register path (0: none), threads
 * per block */
struct Shape {
    int vec, vpt, threads;
};

/* The vector depends on len and the alignment only, never on the dtypes: a thread then sums
 * the same elements in the same order whatever the dtypes, so bfloat16 inputs give the bits
 * of float32 ones and a bfloat16 Y is the float32 Y rounded. 8 elements (two float4, one
 * 16-byte bfloat16 word) when len % 8 == 0, else 4 (float4, 8-byte bfloat16) when
 * len % 4 == 0; aligned: every tensor's start is 16-byte aligned. */
Shape shape_of(int64_t len, int aligned)
{
    Shape s{!aligned ? 1 : len % 8 == 0 ? 8 : len % 4 == 0 ? 4 : 1, 0, kThreads};
    const int64_t nv = len / s.vec;
    if (s.vec > 1)
        for (int v = 1; v * s.vec <= kMaxRegs; v *= 2)
            if ((nv + v - 1) / v <= kThreads) {
                s.vpt = v;
                s.threads = (int)(((nv + v - 1) / v + 31) / 32 * 32);
                break;
            }
    return s;
}

int64_t bwd_blocks(int64_t rows, int64_t len)
{
    int64_t cap = kBwdPartBytes / ((len > 0 ? len : 1) * (int64_t)sizeof(double));
    cap = cap < kBwdGrid ? kBwdGrid : cap > kBwdGridMax ? kBwdGridMax : cap;
    return rows < cap ? rows : cap;
}

unsigned fwd_blocks(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

/* 16-byte vectors need every row start aligned: the tensors' starts (row lengths % vec == 0) */
int al16(const void *p) { return fr_aligned_to(p, 16); }

template <int V, int VPT, typename TB, typename TY>
void launch_fwd(int threads, cudaStream_t st, const float *a, const TB *b, const float *w, float *h, TY *y, bf16 *hs,
                int64_t rows, int64_t len, float eps)
{
    if constexpr (V * VPT <= kMaxRegs)
        rms_fwd<V, VPT, TB, TY><<<fwd_blocks(rows), threads, 0, st>>>(a, b, w, h, y, hs, rows, len, eps);
}

template <int V, typename TB, typename TY>
void fwd_v(const Shape &s, cudaStream_t st, const float *a, const TB *b, const float *w, float *h, TY *y, bf16 *hs,
           int64_t rows, int64_t len, float eps)
{
    const int t = s.threads;
    switch (s.vpt) {
    case 1: launch_fwd<V, 1>(t, st, a, b, w, h, y, hs, rows, len, eps); break;
    case 2: launch_fwd<V, 2>(t, st, a, b, w, h, y, hs, rows, len, eps); break;
    case 4: launch_fwd<V, 4>(t, st, a, b, w, h, y, hs, rows, len, eps); break;
    case 8: launch_fwd<V, 8>(t, st, a, b, w, h, y, hs, rows, len, eps); break;
    default: launch_fwd<V, 0>(t, st, a, b, w, h, y, hs, rows, len, eps); break;
    }
}

/* the forward for B's and Y's dtypes */
template <typename TB, typename TY>
void fwd_t(cudaStream_t st, const float *a, const void *bv, const float *w, float *h, void *yv, void *hsv,
           int64_t rows, int64_t len, float eps)
{
    const TB *b = (const TB *)bv;
    TY *y = (TY *)yv;
    bf16 *hs = (bf16 *)hsv;
    const Shape s = shape_of(len, al16(a) && al16(b) && al16(w) && al16(h) && al16(y) && al16(hs));
    if (s.vec == 8)
        fwd_v<8>(s, st, a, b, w, h, y, hs, rows, len, eps);
    else if (s.vec == 4)
        fwd_v<4>(s, st, a, b, w, h, y, hs, rows, len, eps);
    else
        launch_fwd<1, 0>(s.threads, st, a, b, w, h, y, hs, rows, len, eps);
}

/* the backward's grid: one wave of resident blocks (no tail), at most bwd_blocks (the scratch's).
 * The kernel passed is the float32 one of the shape whatever dY's dtype, so the grid, and with
 * it the order of dScale's partial sums, does not depend on the dtype. */
template <class K> int64_t bwd_grid(K kernel, int threads, int sm_count, int64_t rows, int64_t len)
{
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = 1;
    }
    const int64_t wave = (int64_t)per_sm * (sm_count > 0 ? sm_count : 1), cap = bwd_blocks(rows, len);
    return wave < cap ? wave : cap;
}

template <int V, int VPT, typename TD, typename TX>
int64_t launch_bwd(int threads, int sm_count, cudaStream_t st, const TD *dy, const TX *x, const float *w,
                   const float *dh, float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    if constexpr (V * VPT <= kMaxRegs) {
        const int64_t g = bwd_grid(rms_bwd<V, VPT, float, float>, threads, sm_count, rows, len);
        rms_bwd<V, VPT, TD, TX><<<(unsigned)g, threads, 0, st>>>(dy, x, w, dh, dx, part, rows, len, eps);
        return g;
    }
    return 0;
}

/* the team kernel for dY's dtype; grid: one wave of the float32 kernel's blocks (bwd_grid), no
 * more blocks than the rows need, so part has at most the scratch's rows */
template <int VPT, typename TD, typename TX>
int64_t launch_team(int sm_count, cudaStream_t st, const TD *dy, const TX *x, const float *w, const float *dh,
                    float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    const int nt = (int)(len / (kTeamV * VPT)), teams = kTeamWarps * 32 / nt, threads = teams * nt;
    const int64_t need = (rows + teams - 1) / teams;
    int64_t g = bwd_grid(rms_bwd_team<VPT, float, float>, threads, sm_count, rows, len);
    g = g < need ? g : need;
    rms_bwd_team<VPT, TD, TX><<<(unsigned)g, threads, 0, st>>>(dy, x, w, dh, dx, part, (int)rows, (int)len, teams, eps);
    return g;
}

template <int V, typename TD, typename TX>
int64_t bwd_v(const Shape &s, int sm_count, cudaStream_t st, const TD *dy, const TX *x, const float *w,
              const float *dh, float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    const int t = s.threads;
    switch (s.vpt) {
    case 1: return launch_bwd<V, 1>(t, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    case 2: return launch_bwd<V, 2>(t, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    case 4: return launch_bwd<V, 4>(t, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    case 8: return launch_bwd<V, 8>(t, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    default: return launch_bwd<V, 0>(t, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    }
}

/* the backward for dY's dtype; returns the blocks (the dScale partials). teams: 0 takes rms_bwd
 * for every shape (FP8RUN_RMS_BWD_TEAMS=0), else rms_bwd_team where it fits. */
template <typename TD, typename TX>
int64_t bwd_t(int teams, int sm_count, cudaStream_t st, const void *dyv, const void *xv, const float *w,
              const float *dh, float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    const TD *dy = (const TD *)dyv;
    const TX *x = (const TX *)xv;
    const int aligned = al16(dy) && al16(x) && al16(w) && al16(dh) && al16(dx);
    /* (rows: an int in the kernel, with its row steps; part: written as double2) */
    if (teams && aligned && al16(part) && rows <= INT32_MAX / 2) {
        const int vpt = team_vpt(len);
        if (vpt == 1) return launch_team<1>(sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
        if (vpt == 2) return launch_team<2>(sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    }
    const Shape s = shape_of(len, aligned);
    if (s.vec == 8) return bwd_v<8>(s, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    if (s.vec == 4) return bwd_v<4>(s, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
    return launch_bwd<1, 0>(s.threads, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
}

/* ---------------------------------------------------------------- the ops ---- */

fr_status an_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 3 || k->n_out < 2 || k->n_out > 3 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0] ||
        !k->out[1])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (A, B, Scale -> H, Y[, Hs])", k->n_in,
                             k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[0]->rank, k->in[0]->dims, &c));
    const fr_tensor *hs = k->n_out > 2 ? k->out[2] : nullptr;
    if (hs && hs->dtype != FR_BF16) return fr_node_error(n, FR_ERR_GRAPH, "output Hs is not bfloat16");
    return fr_rms_rows_fwd_dt(n, k->cu->stream, (const float *)k->in[0]->data, k->in[1]->data, k->in[1]->dtype,
                              (const float *)k->in[2]->data, (float *)k->out[0]->data, k->out[1]->data,
                              k->out[1]->dtype, hs ? hs->data : nullptr, c.rows, c.len, c.eps);
}

fr_status ang_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 3 || n->inputs[1] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs dY, H and Scale");
    const fr_value *x = &g->values[n->inputs[1]];
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    *bytes = fr_rms_rows_bwd_scratch(c.rows, c.len);
    return FR_OK;
}

fr_status ang_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || k->n_in > 4 || k->n_out != 2 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (dY, H, Scale[, dH] -> dX, dScale)",
                             k->n_in, k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[1]->rank, k->in[1]->dims, &c));
    const float *dh = k->n_in > 3 && k->in[3] ? (const float *)k->in[3]->data : nullptr;
    float *dw = k->out[1] ? (float *)k->out[1]->data : nullptr;
    return fr_rms_rows_bwd_dt(n, k->cu->stream, k->cu->sm_count, k->in[0]->data, k->in[0]->dtype, k->in[1]->data,
                              k->in[1]->dtype, (const float *)k->in[2]->data, dh, (float *)k->out[0]->data, dw,
                              k->scratch, k->scratch_bytes, c.rows, c.len, c.eps);
}

} /* namespace */

int fr_rms_rows_fast(int64_t len) { return len > 0 && shape_of(len, 1).vpt > 0; }

size_t fr_rms_rows_bwd_scratch(int64_t rows, int64_t len)
{
    const int64_t b = bwd_blocks(rows, len);
    return (size_t)(b > 0 ? b : 1) * (size_t)(len > 0 ? len : 1) * sizeof(double);
}

/* float32 or bfloat16 only, named in the error */
static fr_status f32_or_bf16(const fr_node *n, fr_dtype dt, const char *what)
{
    if (dt == FR_F32 || dt == FR_BF16) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s (float32 or bfloat16 only)", what, fr_dtype_name(dt));
}

fr_status fr_rms_rows_fwd_dt(const fr_node *n, cudaStream_t st, const float *a, const void *b, fr_dtype b_dt,
                             const float *w, float *h, void *y, fr_dtype y_dt, void *hs, int64_t rows, int64_t len,
                             float eps)
{
    FR_TRY(f32_or_bf16(n, b_dt, "B"));
    FR_TRY(f32_or_bf16(n, y_dt, "Y"));
    if (rows <= 0 || len <= 0) return FR_OK;
    if (b_dt == FR_BF16 && y_dt == FR_BF16)
        fwd_t<bf16, bf16>(st, a, b, w, h, y, hs, rows, len, eps);
    else if (b_dt == FR_BF16)
        fwd_t<bf16, float>(st, a, b, w, h, y, hs, rows, len, eps);
    else if (y_dt == FR_BF16)
        fwd_t<float, bf16>(st, a, b, w, h, y, hs, rows, len, eps);
    else
        fwd_t<float, float>(st, a, b, w, h, y, hs, rows, len, eps);
    return fr_cuda_check_launch(n, n->op_type);
}

fr_status fr_rms_rows_fwd(const fr_node *n, cudaStream_t st, const float *a, const float *b, const float *w, float *h,
                          float *y, int64_t rows, int64_t len, float eps)
{
    return fr_rms_rows_fwd_dt(n, st, a, b, FR_F32, w, h, y, FR_F32, nullptr, rows, len, eps);
}

fr_status fr_rms_rows_bwd_dt(const fr_node *n, cudaStream_t st, int sm_count, const void *dy, fr_dtype dy_dt,
                             const void *x, fr_dtype x_dt, const float *w, const float *dh, float *dx, float *dw,
                             void *scratch, size_t scratch_bytes, int64_t rows, int64_t len, float eps)
{
    FR_TRY(f32_or_bf16(n, dy_dt, "dY"));
    FR_TRY(f32_or_bf16(n, x_dt, "H"));
    if (len <= 0) return FR_OK;
    double *part = dw ? (double *)scratch : nullptr;
    if (dw && (!scratch || scratch_bytes < fr_rms_rows_bwd_scratch(rows, len)))
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", scratch_bytes,
                             fr_rms_rows_bwd_scratch(rows, len));
    int64_t blocks = 0;
    if (bwd_blocks(rows, len) > 0) {
        const int teams = !fr_env_is(FR_ENV_RMS_BWD_TEAMS, "0"); /* at every launch: tests switch it */
        const int g16 = dy_dt == FR_BF16, x16 = x_dt == FR_BF16;
        if (g16 && x16)
            blocks = bwd_t<bf16, bf16>(teams, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
        else if (g16)
            blocks = bwd_t<bf16, float>(teams, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
        else if (x16)
            blocks = bwd_t<float, bf16>(teams, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
        else
            blocks = bwd_t<float, float>(teams, sm_count, st, dy, x, w, dh, dx, part, rows, len, eps);
        FR_TRY(fr_cuda_check_launch(n, n->op_type));
    }
    if (!dw) return FR_OK;
    rms_dw<<<(unsigned)((len + 31) / 32), dim3(32, 32), 0, st>>>(part, blocks, len, dw);
    return fr_cuda_check_launch(n, n->op_type);
}

fr_status fr_rms_rows_bwd(const fr_node *n, cudaStream_t st, int sm_count, const float *dy, const float *x, const float *w,
                          const float *dh, float *dx, float *dw, void *scratch, size_t scratch_bytes, int64_t rows,
                          int64_t len, float eps)
{
    return fr_rms_rows_bwd_dt(n, st, sm_count, dy, FR_F32, x, FR_F32, w, dh, dx, dw, scratch, scratch_bytes, rows, len,
                              eps);
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_add_norm[] = {
    {"AddRMSNorm", FR_DOMAIN_FP8RUN, an_cuda, NULL},
    {"AddRMSNormGrad", FR_DOMAIN_FP8RUN, ang_cuda, ang_scratch},
    {NULL, NULL, NULL, NULL},
};
