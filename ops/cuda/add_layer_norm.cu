/* The kernels of ai.fp8run::AddLayerNorm / AddLayerNormGrad (ops/add_layer_norm.c): the
 * residual Add and the LayerNorm of its sum, one pass over the row each way. Built as AddRMSNorm's
 * (ops/cuda/add_norm.cu), with LayerNorm's mean:
 *
 * One block per row, 32..256 threads; thread t holds the vectors t, t + blockDim, ... of its row
 * in registers (up to 32 floats forward, 16 backward, whose dScale and dBias sums take registers
 * too), so each tensor is read once and written once. Statistics in double as on the CPU (ops/
 * norm.c): the mean, then the mean of the squared deviations (two block reductions; no
 * cancellation), each output computed in double and rounded once. h = a + b and dx = dh + d are
 * single float32 adds, as the unfused Adds round them. The backward's row sums share those two
 * reductions: (sum x, sum g) then (sum (x - mean)^2, sum g (x - mean)), g = dy w, and
 * sum(g xh) = inv sum(g (x - mean)).
 * Block reductions: each warp sums the warps' partials itself in a fixed order, over a
 * double-buffered [2][32] array that alternates from one reduction to the next (one barrier each).
 *
 * dScale and dBias without a second pass: the backward runs one wave of resident blocks, each
 * taking rows blockIdx.x, + gridDim.x, ...; a thread always owns the same columns, so it sums
 * dy xh and dy of its columns over its block's rows in registers (double) and writes them once to
 * a [blocks, 2 len] scratch; a second small kernel adds the blocks in a fixed order. No atomics:
 * the bits repeat from run to run.
 *
 * Rows that do not fit the registers (len % 4 != 0, or longer rows) take the same kernels without
 * the register cache: each pass re-reads the row (L1/L2) and the partials accumulate in the
 * scratch. B may repeat over the leading rows (its row r % b_rows: a position embedding).
 * bfloat16: B and dY may be bfloat16 (widened exactly), Y may be written in bfloat16 (the float32
 * Y rounded to nearest even); the vector width depends on len only, so every dtype sums in the
 * same order. */
#include <math.h>
#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/vec16.cuh"
#include "ops/norm.h"

namespace {

constexpr int kThreads = 256;              /* most threads per block */
constexpr int kFwdRegs = 32;               /* most floats per thread held in registers, forward */
constexpr int kBwdRegs = 16;               /* and backward (plus 2 doubles each for dScale, dBias) */
constexpr int64_t kBwdGrid = 512;          /* the backward's grid cap for long rows */
constexpr int64_t kBwdGridMax = 8192;      /* and for short ones */
constexpr int64_t kBwdPartBytes = 4 << 20; /* the partials' bytes that lift the cap past kBwdGrid */

typedef __nv_bfloat16 bf16;

template <int V> using F = fr_vf<V>;
template <int V, typename T> __device__ __forceinline__ F<V> ld(const T *p, int64_t i) { return fr_vld<V>(p, i); }
template <int V, typename T> __device__ __forceinline__ void st(T *p, int64_t i, const F<V> &q) { fr_vst<V>(p, i, q); }

/* (a, b) summed over the block; every thread gets the same sums. buf: one half of a
 * double-buffered [2][32] array, the other half than the previous reduction's. */
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

template <int V, int VPT, typename TB, typename TY>
__global__ void __launch_bounds__(kThreads)
    aln_fwd(const float *a, const TB *b, int64_t b_rows, const float *w, const float *bias, float *h, TY *y,
            int64_t rows, int64_t len, float eps)
{
    __shared__ double2 red[2][32];
    const int64_t nv = len / V;
    int par = 0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *ar = a + r * len;
        const TB *br = b + (r % b_rows) * len;
        float *hr = h + r * len;
        TY *yr = y + r * len;
        double s = 0.0, ss = 0.0;
        if constexpr (VPT > 0) {
            F<V> q[VPT];
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                q[k] = ld_sum<V>(ar, br, i);
                st<V>(hr, i, q[k]);
                s += vsum<V>(q[k]);
            }
            const double mean = block_sum2(s, 0.0, red[par]).x / (double)len;
            par ^= 1;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) ss += vdev2<V>(q[k], mean);
            }
            const double inv = 1.0 / sqrt(block_sum2(ss, 0.0, red[par]).x / (double)len + (double)eps);
            par ^= 1;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) fwd_out<V>(yr, w, bias, i, q[k], mean, inv);
            }
        } else {
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
                const F<V> q = ld_sum<V>(ar, br, i);
                st<V>(hr, i, q);
                s += vsum<V>(q);
            }
            const double mean = block_sum2(s, 0.0, red[par]).x / (double)len;
            par ^= 1;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) ss += vdev2<V>(ld_sum<V>(ar, br, i), mean);
            const double inv = 1.0 / sqrt(block_sum2(ss, 0.0, red[par]).x / (double)len + (double)eps);
            par ^= 1;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
                fwd_out<V>(yr, w, bias, i, ld_sum<V>(ar, br, i), mean, inv);
        }
    }
}

/* ---------------------------------------------------------------- backward ---- */

/* vector i's share of (sum x, sum g) */
template <int V>
__device__ __forceinline__ void bwd_sums1(const F<V> &gq, const F<V> &xq, const float *w, int64_t i, double &sx, double &sg)
{
    const F<V> wq = ld<V>(w, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        sx += (double)xq.v[j];
        sg += (double)gq.v[j] * (double)wq.v[j];
    }
}

/* vector i's share of (sum (x - mean)^2, sum g (x - mean)) */
template <int V>
__device__ __forceinline__ void bwd_sums2(const F<V> &gq, const F<V> &xq, const float *w, int64_t i, double mean,
                                          double &sd, double &sgd)
{
    const F<V> wq = ld<V>(w, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double d = (double)xq.v[j] - mean;
        sd += d * d;
        sgd += (double)gq.v[j] * (double)wq.v[j] * d;
    }
}

/* dx's vector i (dh + the norm's part, rounded first); gxh[j] = dy xh and gy[j] = dy, the
 * parameter gradients' terms */
template <int V>
__device__ __forceinline__ void bwd_out(float *dxr, const float *dhr, const float *w, int64_t i, const F<V> &gq,
                                        const F<V> &xq, double mean, double inv, double mg, double mgx, double *gxh,
                                        double *gy)
{
    const F<V> wq = ld<V>(w, i);
    F<V> o;
    if (dhr) o = ld<V>(dhr, i);
#pragma unroll
    for (int j = 0; j < V; j++) {
        const double xh = ((double)xq.v[j] - mean) * inv, g = (double)gq.v[j];
        const float d = (float)(inv * (g * (double)wq.v[j] - mg - xh * mgx));
        o.v[j] = dhr ? o.v[j] + d : d;
        gxh[j] = g * xh;
        gy[j] = g;
    }
    st<V>(dxr, i, o);
}

/* dx = dh + inv (g - mean(g) - xh mean(g xh)); part[blockIdx.x][col] = sum of dy xh over the
 * block's rows, part[blockIdx.x][len + col] = sum of dy (part NULL: neither wanted) */
template <int V, int VPT, typename TD>
__global__ void __launch_bounds__(kThreads) aln_bwd(const TD *dy, const float *x, const float *w, const float *dh,
                                                   float *dx, double *part, int64_t rows, int64_t len, float eps)
{
    __shared__ double2 red[2][32];
    const int64_t nv = len / V;
    double *pb = part ? part + (int64_t)blockIdx.x * 2 * len : nullptr;
    constexpr int KA = VPT > 0 ? VPT : 1;
    double acc_s[KA][V], acc_b[KA][V];
#pragma unroll
    for (int k = 0; k < KA; k++)
#pragma unroll
        for (int j = 0; j < V; j++) acc_s[k][j] = acc_b[k][j] = 0.0;
    if (VPT == 0 && pb)
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
#pragma unroll
            for (int j = 0; j < V; j++) pb[i * V + j] = pb[len + i * V + j] = 0.0;
    int par = 0;
    const double dlen = (double)len;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const TD *dyr = dy + r * len;
        const float *xr = x + r * len, *dhr = dh ? dh + r * len : nullptr;
        float *dxr = dx + r * len;
        double sx = 0.0, sg = 0.0, sd = 0.0, sgd = 0.0, gxh[V], gy[V];
        if constexpr (VPT > 0) {
            F<V> gq[VPT], xq[VPT];
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                gq[k] = ld<V>(dyr, i);
                xq[k] = ld<V>(xr, i);
                bwd_sums1<V>(gq[k], xq[k], w, i, sx, sg);
            }
            const double2 s1 = block_sum2(sx, sg, red[par]);
            par ^= 1;
            const double mean = s1.x / dlen, mg = s1.y / dlen;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i < nv) bwd_sums2<V>(gq[k], xq[k], w, i, mean, sd, sgd);
            }
            const double2 s2 = block_sum2(sd, sgd, red[par]);
            par ^= 1;
            const double inv = 1.0 / sqrt(s2.x / dlen + (double)eps), mgx = s2.y * inv / dlen;
#pragma unroll
            for (int k = 0; k < VPT; k++) {
                const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
                if (i >= nv) continue;
                bwd_out<V>(dxr, dhr, w, i, gq[k], xq[k], mean, inv, mg, mgx, gxh, gy);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    acc_s[k][j] += gxh[j];
                    acc_b[k][j] += gy[j];
                }
            }
        } else {
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
                bwd_sums1<V>(ld<V>(dyr, i), ld<V>(xr, i), w, i, sx, sg);
            const double2 s1 = block_sum2(sx, sg, red[par]);
            par ^= 1;
            const double mean = s1.x / dlen, mg = s1.y / dlen;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
                bwd_sums2<V>(ld<V>(dyr, i), ld<V>(xr, i), w, i, mean, sd, sgd);
            const double2 s2 = block_sum2(sd, sgd, red[par]);
            par ^= 1;
            const double inv = 1.0 / sqrt(s2.x / dlen + (double)eps), mgx = s2.y * inv / dlen;
            for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
                bwd_out<V>(dxr, dhr, w, i, ld<V>(dyr, i), ld<V>(xr, i), mean, inv, mg, mgx, gxh, gy);
                if (pb)
#pragma unroll
                    for (int j = 0; j < V; j++) { /* this thread's own columns */
                        pb[i * V + j] += gxh[j];
                        pb[len + i * V + j] += gy[j];
                    }
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
            for (int j = 0; j < V; j++) {
                pb[i * V + j] = acc_s[k][j];
                pb[len + i * V + j] = acc_b[k][j];
            }
        }
    }
}

/* column c of [blocks, 2 len] summed over the blocks: c < len to ds[c], else to db[c - len]
 * (either may be NULL). Block (32, 32): thread (x, y) adds blocks y, y + 32, ... of column
 * 32 blockIdx.x + x in order, then the 32 lanes in a fixed tree. */
__global__ void __launch_bounds__(1024) aln_dw(const double *part, int64_t blocks, int64_t len, float *ds, float *db)
{
    __shared__ double red[32][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, cols = 2 * len;
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
    float *out = c < len ? ds : db;
    if (out) out[c < len ? c : c - len] = (float)red[0][threadIdx.x];
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

int64_t bwd_blocks(int64_t rows, int64_t len)
{
    int64_t cap = kBwdPartBytes / ((len > 0 ? 2 * len : 1) * (int64_t)sizeof(double));
    cap = cap < kBwdGrid ? kBwdGrid : cap > kBwdGridMax ? kBwdGridMax : cap;
    return rows < cap ? rows : cap;
}

unsigned fwd_blocks(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

int al16(const void *p) { return fr_aligned_to(p, 16); }

struct FwdArgs {
    const float *a;
    const void *b;
    int64_t b_rows;
    const float *w, *bias;
    float *h;
    void *y;
    int64_t rows, len;
    float eps;
};

template <int V, int VPT, typename TB, typename TY> void launch_fwd(int threads, cudaStream_t st, const FwdArgs &p)
{
    if constexpr (V * VPT <= kFwdRegs)
        aln_fwd<V, VPT, TB, TY><<<fwd_blocks(p.rows), threads, 0, st>>>(
            p.a, (const TB *)p.b, p.b_rows, p.w, p.bias, p.h, (TY *)p.y, p.rows, p.len, p.eps);
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
    const Shape s = shape_of(p.len, al16(p.a) && al16(p.b) && al16(p.w) && al16(p.bias) && al16(p.h) && al16(p.y),
                             kFwdRegs);
    if (s.vec == 8)
        fwd_v<8, TB, TY>(s, st, p);
    else if (s.vec == 4)
        fwd_v<4, TB, TY>(s, st, p);
    else
        launch_fwd<1, 0, TB, TY>(s.threads, st, p);
}

struct BwdArgs {
    const void *dy;
    const float *x, *w, *dh;
    float *dx;
    double *part;
    int64_t rows, len;
    float eps;
};

/* one wave of resident blocks, at most bwd_blocks; the float32 kernel of the shape sizes it
 * whatever dY's dtype, so the order of the partial sums does not depend on the dtype */
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

template <int V, int VPT, typename TD> int64_t launch_bwd(int threads, int sm_count, cudaStream_t st, const BwdArgs &p)
{
    if constexpr (V * VPT <= kBwdRegs) {
        const int64_t g = bwd_grid(aln_bwd<V, VPT, float>, threads, sm_count, p.rows, p.len);
        aln_bwd<V, VPT, TD><<<(unsigned)g, threads, 0, st>>>((const TD *)p.dy, p.x, p.w, p.dh, p.dx, p.part, p.rows,
                                                             p.len, p.eps);
        return g;
    }
    return 0;
}

template <int V, typename TD> int64_t bwd_v(const Shape &s, int sm_count, cudaStream_t st, const BwdArgs &p)
{
    switch (s.vpt) {
    case 1: return launch_bwd<V, 1, TD>(s.threads, sm_count, st, p);
    case 2: return launch_bwd<V, 2, TD>(s.threads, sm_count, st, p);
    case 4: return launch_bwd<V, 4, TD>(s.threads, sm_count, st, p);
    default: return launch_bwd<V, 0, TD>(s.threads, sm_count, st, p);
    }
}

template <typename TD> int64_t bwd_t(int sm_count, cudaStream_t st, const BwdArgs &p)
{
    const Shape s = shape_of(p.len, al16(p.dy) && al16(p.x) && al16(p.w) && al16(p.dh) && al16(p.dx), kBwdRegs);
    if (s.vec == 8) return bwd_v<8, TD>(s, sm_count, st, p);
    if (s.vec == 4) return bwd_v<4, TD>(s, sm_count, st, p);
    return launch_bwd<1, 0, TD>(s.threads, sm_count, st, p);
}

size_t bwd_scratch(int64_t rows, int64_t len)
{
    const int64_t b = bwd_blocks(rows, len);
    return (size_t)(b > 0 ? b : 1) * (size_t)(len > 0 ? 2 * len : 1) * sizeof(double);
}

fr_status f32_or_bf16(const fr_node *n, fr_dtype dt, const char *what)
{
    if (dt == FR_F32 || dt == FR_BF16) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s (float32 or bfloat16 only)", what, fr_dtype_name(dt));
}

/* ---------------------------------------------------------------- the ops ---- */

fr_status aln_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || k->n_in > 4 || k->n_out != 2 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0] ||
        !k->out[1])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (A, B, Scale[, Bias] -> H, Y)", k->n_in,
                             k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[0]->rank, k->in[0]->dims, &c));
    const fr_dtype bt = k->in[1]->dtype, yt = k->out[1]->dtype;
    FR_TRY(f32_or_bf16(n, bt, "B"));
    FR_TRY(f32_or_bf16(n, yt, "Y"));
    if (c.rows <= 0 || c.len <= 0) return FR_OK;
    const int64_t b_rows = fr_tensor_numel(k->in[1]) / c.len;
    if (b_rows < 1 || b_rows * c.len != fr_tensor_numel(k->in[1]) || c.rows % b_rows != 0)
        return fr_node_error(n, FR_ERR_SHAPE, "B does not repeat over A's rows (re-run shape inference)");
    const FwdArgs p = {(const float *)k->in[0]->data,
                       k->in[1]->data,
                       b_rows,
                       (const float *)k->in[2]->data,
                       k->n_in > 3 && k->in[3] ? (const float *)k->in[3]->data : nullptr,
                       (float *)k->out[0]->data,
                       k->out[1]->data,
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
    *bytes = bwd_scratch(c.rows, c.len);
    return FR_OK;
}

fr_status alng_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || k->n_in > 4 || k->n_out != 3 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs (dY, H, Scale[, dH] -> dX, dScale, dBias)",
                             k->n_in, k->n_out);
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, k->in[1]->rank, k->in[1]->dims, &c));
    FR_TRY(f32_or_bf16(n, k->in[0]->dtype, "dY"));
    float *ds = k->out[1] ? (float *)k->out[1]->data : nullptr, *db = k->out[2] ? (float *)k->out[2]->data : nullptr;
    const int want_p = ds || db;
    if (c.len <= 0) return FR_OK;
    if (want_p && (!k->scratch || k->scratch_bytes < bwd_scratch(c.rows, c.len)))
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes,
                             bwd_scratch(c.rows, c.len));
    const BwdArgs p = {k->in[0]->data,
                       (const float *)k->in[1]->data,
                       (const float *)k->in[2]->data,
                       k->n_in > 3 && k->in[3] ? (const float *)k->in[3]->data : nullptr,
                       (float *)k->out[0]->data,
                       want_p ? (double *)k->scratch : nullptr,
                       c.rows,
                       c.len,
                       c.eps};
    cudaStream_t st = k->cu->stream;
    int64_t blocks = 0;
    if (bwd_blocks(c.rows, c.len) > 0) {
        blocks = k->in[0]->dtype == FR_BF16 ? bwd_t<bf16>(k->cu->sm_count, st, p) : bwd_t<float>(k->cu->sm_count, st, p);
        FR_TRY(fr_cuda_check_launch(n, n->op_type));
    }
    if (!want_p) return FR_OK;
    /* no rows: the partials are no blocks' and the sums 0 */
    aln_dw<<<(unsigned)((2 * c.len + 31) / 32), dim3(32, 32), 0, st>>>(p.part, blocks, c.len, ds, db);
    return fr_cuda_check_launch(n, n->op_type);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_add_layer_norm[] = {
    {"AddLayerNorm", FR_DOMAIN_FP8RUN, aln_cuda, NULL},
    {"AddLayerNormGrad", FR_DOMAIN_FP8RUN, alng_cuda, alng_scratch},
    {NULL, NULL, NULL, NULL},
};
