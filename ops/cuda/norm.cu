/* CUDA kernels of the norm family (see ops/cuda/cuda_kernel.h for the contract):
 * LayerNormalization, RMSNormalization and their fused backward ops LayerNormGrad /
 * RMSNormGrad (ops/norm.c), float32 and float64, Scale / B broadcast unidirectionally to X.
 *
 * Forward and the dX part of the backward: one block per row (64..512 threads by row length,
 * 16-byte vector loads when the row length allows), statistics in double with two passes as on the CPU (mean, then the mean of squared
 * deviations), each output computed in double and rounded once. The row is read from global
 * memory once and kept in shared memory for the later passes when it fits (up to 96 KiB; a
 * thread reads back only what it wrote, so the cache needs no barriers), else re-read (L2).
 *
 * dScale / dB (sums over the rows of dY * xh and dY): the row kernel stores each row's mean
 * and 1/std (double) in scratch; with the common layout (Scale covering exactly the
 * normalized dims, shared by all rows) a column kernel sums 32 columns x a slice of rows per
 * block into per-slice partials, and a second kernel adds the slices in order: a two-stage,
 * deterministic reduction without atomics. Any other broadcast of Scale / B (rows-dependent
 * or broadcast inside the normalized dims) takes a generic kernel: one block per parameter
 * element, summing every X position mapped to it.
 *
 * Float32 LayerNormGrad whose Scale and B are the row takes AddLayerNormGrad's register kernels
 * when the row fits them (ops/cuda/add_layer_norm.h): dX and the parameter sums in one pass,
 * float32 arithmetic per element (~1e-7 of the double results), as RMSNormGrad takes
 * ops/cuda/add_norm.cu's. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/add_layer_norm.h"
#include "ops/cuda/add_norm.h"
#include "ops/norm.h"

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kSmemDefault = 48 * 1024;
constexpr size_t kSmemMax = 96 * 1024;
constexpr int64_t kTargetBlocks = 1024;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* ---------------------------------------------------------------- configuration ---- */

/* Where the Scale / B element of X element (row r, j) lives: row_off(r) + inner_off(j). */
struct BcMap {
    int rank, axis;
    int ident;  /* inner_off(j) == j */
    int shared; /* row_off(r) == 0 */
    int64_t dims[FR_MAX_RANK], st[FR_MAX_RANK]; /* X's dims; the parameter's strides (0: broadcast) */
};

fr_status bc_make(const fr_node *n, const char *what, int rp, const int64_t *dp, int rx, const int64_t *dx,
                  int axis, BcMap *m)
{
    memset(m, 0, sizeof *m);
    int ok = rp <= rx;
    for (int k = 0; ok && k < rp; k++) ok = dp[k] == 1 || dp[k] == dx[rx - rp + k];
    if (!ok) return fr_node_error(n, FR_ERR_SHAPE, "%s does not broadcast to X", what);
    m->rank = rx;
    m->axis = axis;
    memcpy(m->dims, dx, sizeof(int64_t) * (size_t)rx);
    fr_broadcast_strides(rp, dp, rx, dx, m->st);
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(rx, dx, cs);
    m->shared = 1;
    m->ident = 1;
    for (int k = 0; k < rx; k++) {
        if (k < axis && m->st[k] != 0 && dx[k] != 1) m->shared = 0;
        if (k >= axis && m->st[k] != cs[k] && dx[k] != 1) m->ident = 0;
    }
    return FR_OK;
}

__device__ __forceinline__ int64_t bc_row(const BcMap &m, int64_t r)
{
    if (m.shared) return 0;
    int64_t off = 0;
#pragma unroll
    for (int k = FR_MAX_RANK - 1; k >= 0; k--)
        if (k < m.axis) {
            off += (r % m.dims[k]) * m.st[k];
            r /= m.dims[k];
        }
    return off;
}

__device__ __forceinline__ int64_t bc_inner(const BcMap &m, int64_t j)
{
    if (m.ident) return j;
    int64_t off = 0;
#pragma unroll
    for (int k = FR_MAX_RANK - 1; k >= 0; k--)
        if (k < m.rank && k >= m.axis) {
            off += (j % m.dims[k]) * m.st[k];
            j /= m.dims[k];
        }
    return off;
}

/* ---------------------------------------------------------------- block sums ---- */

struct D2 {
    double a, b;
};

/* Sum over the block (any blockDim multiple of 32, <= 1024); every thread gets it. */
__device__ __forceinline__ D2 block_sum2(D2 v)
{
    __shared__ D2 sm[32];
    __shared__ D2 res;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) {
        v.a += __shfl_down_sync(0xffffffffu, v.a, d);
        v.b += __shfl_down_sync(0xffffffffu, v.b, d);
    }
    const int w = threadIdx.x / 32, l = threadIdx.x % 32, nw = blockDim.x / 32;
    if (l == 0) sm[w] = v;
    __syncthreads();
    if (w == 0) {
        D2 t = l < nw ? sm[l] : D2{0.0, 0.0};
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) {
            t.a += __shfl_down_sync(0xffffffffu, t.a, d);
            t.b += __shfl_down_sync(0xffffffffu, t.b, d);
        }
        if (l == 0) res = t;
    }
    __syncthreads();
    const D2 r = res;
    __syncthreads(); /* sm / res are reused by the next call */
    return r;
}

__device__ __forceinline__ double block_sum(double v) { return block_sum2(D2{v, 0.0}).a; }

/* threads per row: about 2 loads (vectors or elements) per thread, 64..512 */
int row_threads(int64_t loads)
{
    int t = 64;
    while (t < 512 && (int64_t)t * 2 < loads) t *= 2;
    return t;
}

/* 16-byte vectors: every row start is then 16-byte aligned (cudaMalloc'd tensors) */
template <class T> bool vec_ok(int64_t len) { return len % (16 / (int64_t)sizeof(T)) == 0; }

unsigned grid_rows(int64_t rows)
{
    const int64_t cap = 1 << 20;
    return (unsigned)(rows < 1 ? 1 : rows > cap ? cap : rows);
}

/* dynamic shared memory for the row cache; 0 when the rows do not fit */
template <class K> fr_status smem_for(const fr_node *n, K kernel, size_t want, size_t *bytes)
{
    *bytes = 0;
    if (want == 0 || want > kSmemMax) return FR_OK;
    if (want > kSmemDefault) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)want);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* no cache then: the kernel re-reads global memory */
            (void)n;
            return FR_OK;
        }
    }
    *bytes = want;
    return FR_OK;
}

/* ---------------------------------------------------------------- statistics ---- */

/* V consecutive elements, one 16-byte load when V > 1 (rows of a multiple of V elements) */
template <class T, int V> struct alignas(sizeof(T) * V) Vec {
    T v[V];
};
template <class T, int V> __device__ __forceinline__ Vec<T, V> ldv(const T *p, int64_t i)
{
    return reinterpret_cast<const Vec<T, V> *>(p)[i];
}
template <class T, int V> __device__ __forceinline__ void stv(T *p, int64_t i, const Vec<T, V> &v)
{
    reinterpret_cast<Vec<T, V> *>(p)[i] = v;
}

/* mean (0 for RMS) and 1 / sqrt(var + eps) of the row, filling the cache (if any) on the way;
 * vector i of the row (elements iV..iV+V-1) is handled by thread i % blockDim.x in every pass. */
template <class T, int V>
__device__ __forceinline__ void row_stats(const T *xr, T *cache, int64_t len, int rms, double eps, double *mean,
                                          double *inv)
{
    const int64_t nv = len / V;
    double m = 0.0;
    const T *src = xr;
    if (!rms) {
        double s = 0.0;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            const Vec<T, V> q = ldv<T, V>(xr, i);
            if (cache) stv<T, V>(cache, i, q);
#pragma unroll
            for (int j = 0; j < V; j++) s += (double)q.v[j];
        }
        m = block_sum(s) / (double)len;
        if (cache) src = cache;
    }
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        const Vec<T, V> q = ldv<T, V>(src, i);
        if (cache && rms) stv<T, V>(cache, i, q);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const double d = (double)q.v[j] - m;
            sq += d * d;
        }
    }
    const double var = block_sum(sq) / (double)len;
    *mean = m;
    *inv = 1.0 / sqrt(var + eps);
}

/* ---------------------------------------------------------------- forward ---- */

template <class T, int V>
__global__ void __launch_bounds__(512) norm_fwd(const T *x, const T *s, const T *b, T *y, float *mo, float *io,
                                               int64_t rows, int64_t len, double eps, int rms, int use_cache, BcMap ms,
                                               BcMap mb)
{
    extern __shared__ __align__(16) double smem_d[];
    T *cache = use_cache ? reinterpret_cast<T *>(smem_d) : nullptr;
    const int64_t nv = len / V;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * len;
        double mean, inv;
        row_stats<T, V>(xr, cache, len, rms, eps, &mean, &inv);
        if (threadIdx.x == 0) {
            if (mo) mo[r] = (float)mean;
            if (io) io[r] = (float)inv;
        }
        const T *src = cache ? cache : xr;
        const int64_t so = bc_row(ms, r), bo = b ? bc_row(mb, r) : 0;
        T *yr = y + r * len;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            Vec<T, V> q = ldv<T, V>(src, i);
#pragma unroll
            for (int j = 0; j < V; j++) {
                const int64_t e = i * V + j;
                double v = ((double)q.v[j] - mean) * inv * (double)s[so + bc_inner(ms, e)];
                if (b) v += (double)b[bo + bc_inner(mb, e)];
                q.v[j] = (T)v;
            }
            stv<T, V>(yr, i, q);
        }
    }
}

/* len == 0: the statistics are 0/0 (NaN; RMS's mean is 0) */
__global__ void norm_empty_stats(float *mo, float *io, int64_t rows, int rms)
{
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        if (mo) mo[r] = rms ? 0.0f : (float)NAN;
        if (io) io[r] = (float)NAN;
    }
}

fr_status check_dtype(const fr_node *n, fr_dtype x, const fr_tensor *o, const char *what)
{
    if (x != FR_F32 && x != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "X dtype %s is not supported (float32 or float64 only)",
                             fr_dtype_name(x));
    if (o && o->dtype != x)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s is %s but X is %s (mixed dtypes are not supported)", what,
                             fr_dtype_name(o->dtype), fr_dtype_name(x));
    return FR_OK;
}

fr_status check_numel(const fr_node *n, const fr_tensor *t, fr_dtype dt, int64_t numel, const char *what)
{
    if (t && (t->dtype != dt || fr_tensor_numel(t) != numel))
        return fr_node_error(n, FR_ERR_SHAPE, "output %s has the wrong dtype or shape (re-run shape inference)", what);
    return FR_OK;
}

template <class T>
fr_status norm_fwd_run(const fr_cuda_kctx *k, const fr_norm_cfg &c, int rms, const BcMap &ms, const BcMap &mb)
{
    const T *x = (const T *)k->in[0]->data, *s = (const T *)k->in[1]->data;
    const T *b = k->n_in > 2 && k->in[2] ? (const T *)k->in[2]->data : nullptr;
    T *y = (T *)k->out[0]->data;
    float *mo = k->n_out > 1 && k->out[1] ? (float *)k->out[1]->data : nullptr;
    float *io = k->n_out > 2 && k->out[2] ? (float *)k->out[2]->data : nullptr;
    cudaStream_t st = k->cu->stream;
    if (c.rows == 0) return FR_OK;
    if (c.len == 0) {
        if (!mo && !io) return FR_OK;
        norm_empty_stats<<<(unsigned)((c.rows + 255) / 256 < 4096 ? (c.rows + 255) / 256 : 4096), 256, 0, st>>>(
            mo, io, c.rows, rms);
        return fr_cuda_check_launch(k->node, k->node->op_type);
    }
    constexpr int VW = 16 / sizeof(T);
    size_t smem;
    if (vec_ok<T>(c.len)) {
        FR_TRY(smem_for(k->node, norm_fwd<T, VW>, (size_t)c.len * sizeof(T), &smem));
        norm_fwd<T, VW><<<grid_rows(c.rows), row_threads(c.len / VW), smem, st>>>(x, s, b, y, mo, io, c.rows, c.len,
                                                                                 (double)c.eps, rms, smem > 0, ms, mb);
    } else {
        FR_TRY(smem_for(k->node, norm_fwd<T, 1>, (size_t)c.len * sizeof(T), &smem));
        norm_fwd<T, 1><<<grid_rows(c.rows), row_threads(c.len), smem, st>>>(x, s, b, y, mo, io, c.rows, c.len,
                                                                            (double)c.eps, rms, smem > 0, ms, mb);
    }
    return fr_cuda_check_launch(k->node, k->node->op_type);
}

fr_status norm_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const int rms = strcmp(n->op_type, "RMSNormalization") == 0;
    if (k->n_in < 2 || k->n_in > (rms ? 2 : 3) || !k->in[0] || !k->in[1] || k->n_out < 1 || k->n_out > (rms ? 1 : 3) ||
        !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs", k->n_in, k->n_out);
    const fr_tensor *x = k->in[0], *s = k->in[1], *b = k->n_in > 2 ? k->in[2] : nullptr;
    FR_TRY(check_dtype(n, x->dtype, s, "Scale"));
    FR_TRY(check_dtype(n, x->dtype, b, "B"));
    fr_norm_cfg c;
    FR_TRY(fr_norm_config(n, x->rank, x->dims, &c));
    BcMap ms, mb;
    FR_TRY(bc_make(n, "Scale", s->rank, s->dims, x->rank, x->dims, c.axis, &ms));
    memset(&mb, 0, sizeof mb);
    if (b) FR_TRY(bc_make(n, "B", b->rank, b->dims, x->rank, x->dims, c.axis, &mb));
    FR_TRY(check_numel(n, k->out[0], x->dtype, fr_tensor_numel(x), "Y"));
    for (int o = 1; o < k->n_out; o++) FR_TRY(check_numel(n, k->out[o], FR_F32, c.rows, o == 1 ? "Mean" : "InvStdDev"));
    if (rms && x->dtype == FR_F32 && ms.ident && ms.shared && fr_tensor_numel(s) == c.len && fr_rms_rows_fast(c.len))
        return fr_rms_rows_fwd(n, k->cu->stream, (const float *)x->data, nullptr, (const float *)s->data, nullptr,
                               (float *)k->out[0]->data, c.rows, c.len, c.eps); /* rows in registers */
    return x->dtype == FR_F32 ? norm_fwd_run<float>(k, c, rms, ms, mb) : norm_fwd_run<double>(k, c, rms, ms, mb);
}

/* ---------------------------------------------------------------- backward ---- */

/* dX per row; the row's mean and 1/std go to stats[2r], stats[2r+1] for the parameter grads.
 * dX = r (g - mean(g) - xh mean(g xh)), g = dY Scale, xh = (X - mean) r (no mean(g) for RMS) */
template <class T, int V>
__global__ void __launch_bounds__(512) ng_rows(const T *dy, const T *x, const T *s, T *dx, double *stats, int64_t rows,
                                              int64_t len, double eps, int rms, int use_cache, BcMap ms)
{
    extern __shared__ __align__(16) double smem_d[];
    T *cx = use_cache ? reinterpret_cast<T *>(smem_d) : nullptr;
    T *cdy = use_cache ? reinterpret_cast<T *>(smem_d) + len : nullptr;
    const int64_t nv = len / V;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * len, *dyr = dy + r * len;
        double mean, inv;
        row_stats<T, V>(xr, cx, len, rms, eps, &mean, &inv);
        if (threadIdx.x == 0) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = inv;
        }
        const T *xs = cx ? cx : xr;
        const int64_t so = bc_row(ms, r);
        D2 acc{0.0, 0.0};
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            const Vec<T, V> gq = ldv<T, V>(dyr, i), xq = ldv<T, V>(xs, i);
            if (cdy) stv<T, V>(cdy, i, gq);
#pragma unroll
            for (int j = 0; j < V; j++) {
                const double xh = ((double)xq.v[j] - mean) * inv;
                const double gj = (double)gq.v[j] * (double)s[so + bc_inner(ms, i * V + j)];
                acc.a += gj;
                acc.b += gj * xh;
            }
        }
        acc = block_sum2(acc);
        const double mg = rms ? 0.0 : acc.a / (double)len, mgx = acc.b / (double)len;
        if (!dx) continue;
        const T *dys = cdy ? cdy : dyr;
        T *dxr = dx + r * len;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
            const Vec<T, V> gq = ldv<T, V>(dys, i), xq = ldv<T, V>(xs, i);
            Vec<T, V> o;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const double xh = ((double)xq.v[j] - mean) * inv;
                const double gj = (double)gq.v[j] * (double)s[so + bc_inner(ms, i * V + j)];
                o.v[j] = (T)(inv * (gj - mg - xh * mgx));
            }
            stv<T, V>(dxr, i, o);
        }
    }
}

/* Scale / B cover the normalized dims exactly, shared by all rows: column sums over the rows.
 * Block = 32 columns x 8 row lanes; grid.y slices the rows. */
template <class T>
__global__ void __launch_bounds__(256) ng_cols(const T *dy, const T *x, const double *stats, int64_t rows, int64_t len,
                                              int64_t chunk, double *part, T *ds, T *db)
{
    __shared__ D2 sm[8][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t j = (int64_t)blockIdx.x * 32 + tx, sl = blockIdx.y;
    const int64_t r0 = sl * chunk, r1 = min(rows, r0 + chunk);
    D2 acc{0.0, 0.0};
    if (j < len)
        for (int64_t r = r0 + ty; r < r1; r += 8) {
            const double gy = (double)dy[r * len + j];
            const double xh = ((double)x[r * len + j] - stats[2 * r]) * stats[2 * r + 1];
            acc.a += gy * xh;
            acc.b += gy;
        }
    sm[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int h = 4; h > 0; h >>= 1) {
        if (ty < h) {
            sm[ty][tx].a += sm[ty + h][tx].a;
            sm[ty][tx].b += sm[ty + h][tx].b;
        }
        __syncthreads();
    }
    if (ty == 0 && j < len) {
        if (gridDim.y == 1) {
            if (ds) ds[j] = (T)sm[0][tx].a;
            if (db) db[j] = (T)sm[0][tx].b;
        } else {
            part[2 * (sl * len + j)] = sm[0][tx].a;
            part[2 * (sl * len + j) + 1] = sm[0][tx].b;
        }
    }
}

template <class T>
__global__ void __launch_bounds__(256) ng_cols_fin(const double *part, int64_t slices, int64_t len, T *ds, T *db)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < len; j += (int64_t)gridDim.x * blockDim.x) {
        double a = 0.0, b = 0.0;
        for (int64_t sl = 0; sl < slices; sl++) {
            a += part[2 * (sl * len + j)];
            b += part[2 * (sl * len + j) + 1];
        }
        if (ds) ds[j] = (T)a;
        if (db) db[j] = (T)b;
    }
}

/* Any other broadcast: the parameter's elements as the kept dims of a reduction over X. */
struct PGen {
    int nk, nr;
    int64_t ksize[FR_MAX_RANK], kstride[FR_MAX_RANK]; /* X strides of the parameter's dims */
    int64_t rsize[FR_MAX_RANK], rstride[FR_MAX_RANK]; /* X dims the parameter is broadcast over */
    int64_t n_out, count;
};

PGen pgen_make(const BcMap &m)
{
    PGen p;
    memset(&p, 0, sizeof p);
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(m.rank, m.dims, cs);
    p.n_out = p.count = 1;
    for (int k = 0; k < m.rank; k++) {
        if (m.dims[k] == 1) continue;
        if (m.st[k] != 0) {
            p.ksize[p.nk] = m.dims[k];
            p.kstride[p.nk++] = cs[k];
            p.n_out *= m.dims[k];
        } else {
            p.rsize[p.nr] = m.dims[k];
            p.rstride[p.nr++] = cs[k];
            p.count *= m.dims[k];
        }
    }
    return p;
}

__device__ __forceinline__ int64_t pg_off(const int64_t *size, const int64_t *stride, int n, int64_t i)
{
    int64_t off = 0;
    for (int k = n - 1; k >= 0; k--) {
        off += (i % size[k]) * stride[k];
        i /= size[k];
    }
    return off;
}

/* one block per parameter element e (row-major over the parameter's own shape, which is the
 * order of its non-broadcast X dims); which = 0: dScale (dY xh), 1: dB (dY) */
template <class T>
__global__ void __launch_bounds__(256) ng_generic(const T *dy, const T *x, const double *stats, int64_t len, PGen p,
                                                 int which, T *out, int64_t n_param)
{
    for (int64_t e = blockIdx.x; e < n_param; e += gridDim.x) {
        double acc = 0.0;
        if (e < p.n_out) {
            const int64_t base = pg_off(p.ksize, p.kstride, p.nk, e);
            for (int64_t i = threadIdx.x; i < p.count; i += blockDim.x) {
                const int64_t off = base + pg_off(p.rsize, p.rstride, p.nr, i);
                const double gy = (double)dy[off];
                if (which == 0) {
                    const int64_t r = off / len;
                    acc += gy * (((double)x[off] - stats[2 * r]) * stats[2 * r + 1]);
                } else {
                    acc += gy;
                }
            }
        }
        acc = block_sum(acc);
        if (threadIdx.x == 0) out[e] = (T)acc;
    }
}

/* the column path's row slices */
int64_t ng_slices(int64_t rows, int64_t len)
{
    const int64_t bx = (len + 31) / 32;
    int64_t s = 1;
    if (bx < kTargetBlocks / 2 && rows >= 128) {
        const int64_t a = (kTargetBlocks + bx - 1) / bx, b = rows / 64;
        s = a < b ? a : b;
    }
    if (s > 4096) s = 4096;
    if (s < 1) s = 1;
    const int64_t chunk = (rows + s - 1) / s;
    return chunk > 0 ? (rows + chunk - 1) / chunk : 1;
}

struct NgPlan {
    fr_norm_cfg c;
    int cols; /* Scale (and B) take the column path */
    int64_t slices;
    size_t stats_bytes, part_bytes;
};

fr_status ng_plan(const fr_node *n, int rx, const int64_t *dx, int rs, const int64_t *ds, int rb, const int64_t *db,
                  int has_b, NgPlan *p, BcMap *ms, BcMap *mb)
{
    memset(p, 0, sizeof *p);
    FR_TRY(fr_norm_config(n, rx, dx, &p->c));
    FR_TRY(bc_make(n, "Scale", rs, ds, rx, dx, p->c.axis, ms));
    memset(mb, 0, sizeof *mb);
    if (has_b) FR_TRY(bc_make(n, "B", rb, db, rx, dx, p->c.axis, mb));
    /* the column path needs a parameter of exactly len elements in X's inner layout */
    int64_t ns = 1, nb = 1;
    for (int k = 0; k < rs; k++) ns *= ds[k];
    for (int k = 0; has_b && k < rb; k++) nb *= db[k];
    p->cols = ms->ident && ms->shared && ns == p->c.len && (!has_b || (mb->ident && mb->shared && nb == p->c.len));
    p->slices = p->cols ? ng_slices(p->c.rows, p->c.len) : 1;
    p->stats_bytes = align_up((size_t)(p->c.rows ? p->c.rows : 1) * 2 * sizeof(double));
    p->part_bytes = p->cols && p->slices > 1 ? align_up((size_t)p->slices * (size_t)p->c.len * 2 * sizeof(double)) : 0;
    return FR_OK;
}

/* RMSNormGrad on rows that fit ops/cuda/add_norm.cu's registers (Scale = the row, shared) */
int rms_rows_ok(const fr_node *n, fr_dtype dt, const NgPlan &p)
{
    return strcmp(n->op_type, "RMSNormGrad") == 0 && dt == FR_F32 && p.cols && fr_rms_rows_fast(p.c.len);
}

/* LayerNormGrad on rows that fit ops/cuda/add_layer_norm.cu's registers (Scale and B = the row,
 * shared) */
int ln_rows_ok(const fr_node *n, fr_dtype dt, const NgPlan &p)
{
    return strcmp(n->op_type, "LayerNormGrad") == 0 && dt == FR_F32 && p.cols && fr_ln_rows_fast(p.c.len);
}

fr_status ng_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 3 || n->inputs[1] < 0 || n->inputs[2] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs dY, X and Scale");
    const fr_value *x = &g->values[n->inputs[1]], *s = &g->values[n->inputs[2]];
    const fr_value *b = n->n_inputs > 3 && n->inputs[3] >= 0 ? &g->values[n->inputs[3]] : nullptr;
    NgPlan p;
    BcMap ms, mb;
    FR_TRY(ng_plan(n, x->rank, x->dims, s->rank, s->dims, b ? b->rank : 0, b ? b->dims : nullptr, b != nullptr, &p, &ms,
                   &mb));
    *bytes = p.stats_bytes + p.part_bytes;
    if (rms_rows_ok(n, x->dtype, p)) {
        const size_t fast = fr_rms_rows_bwd_scratch(p.c.rows, p.c.len);
        if (fast > *bytes) *bytes = fast;
    }
    if (ln_rows_ok(n, x->dtype, p)) {
        const size_t fast = fr_ln_rows_bwd_scratch(p.c.rows, p.c.len);
        if (fast > *bytes) *bytes = fast;
    }
    return FR_OK;
}

template <class T>
fr_status ng_run(const fr_cuda_kctx *k, const NgPlan &p, int rms, const BcMap &ms, const BcMap &mb)
{
    const T *dy = (const T *)k->in[0]->data, *x = (const T *)k->in[1]->data, *s = (const T *)k->in[2]->data;
    T *dx = k->out[0] ? (T *)k->out[0]->data : nullptr;
    T *ds = k->out[1] ? (T *)k->out[1]->data : nullptr;
    T *db = k->n_out > 2 && k->out[2] ? (T *)k->out[2]->data : nullptr;
    const int64_t ns = fr_tensor_numel(k->in[2]), nb = db ? fr_tensor_numel(k->in[3]) : 0;
    double *stats = (double *)k->scratch;
    double *part = (double *)((char *)k->scratch + p.stats_bytes);
    cudaStream_t st = k->cu->stream;
    const int64_t rows = p.c.rows, len = p.c.len;
    if (rows > 0 && len > 0) {
        constexpr int VW = 16 / sizeof(T);
        size_t smem;
        if (vec_ok<T>(len)) {
            FR_TRY(smem_for(k->node, ng_rows<T, VW>, 2 * (size_t)len * sizeof(T), &smem));
            ng_rows<T, VW><<<grid_rows(rows), row_threads(len / VW), smem, st>>>(dy, x, s, dx, stats, rows, len,
                                                                               (double)p.c.eps, rms, smem > 0, ms);
        } else {
            FR_TRY(smem_for(k->node, ng_rows<T, 1>, 2 * (size_t)len * sizeof(T), &smem));
            ng_rows<T, 1><<<grid_rows(rows), row_threads(len), smem, st>>>(dy, x, s, dx, stats, rows, len,
                                                                          (double)p.c.eps, rms, smem > 0, ms);
        }
        FR_TRY(fr_cuda_check_launch(k->node, k->node->op_type));
    }
    if (p.cols) {
        if (len == 0 || (!ds && !db)) return FR_OK;
        const int64_t chunk = (rows + p.slices - 1) / p.slices;
        dim3 grid((unsigned)((len + 31) / 32), (unsigned)p.slices);
        ng_cols<T><<<grid, 256, 0, st>>>(dy, x, stats, rows, len, chunk, part, ds, db);
        FR_TRY(fr_cuda_check_launch(k->node, k->node->op_type));
        if (p.slices > 1) {
            const int64_t b = (len + 255) / 256;
            ng_cols_fin<T><<<(unsigned)(b < 4096 ? b : 4096), 256, 0, st>>>(part, p.slices, len, ds, db);
            FR_TRY(fr_cuda_check_launch(k->node, k->node->op_type));
        }
        return FR_OK;
    }
    if (ds && ns > 0) {
        const PGen g = pgen_make(ms);
        ng_generic<T><<<(unsigned)(ns < 65536 ? ns : 65536), 256, 0, st>>>(dy, x, stats, len, g, 0, ds, ns);
        FR_TRY(fr_cuda_check_launch(k->node, k->node->op_type));
    }
    if (db && nb > 0) {
        const PGen g = pgen_make(mb);
        ng_generic<T><<<(unsigned)(nb < 65536 ? nb : 65536), 256, 0, st>>>(dy, x, stats, len, g, 1, db, nb);
        FR_TRY(fr_cuda_check_launch(k->node, k->node->op_type));
    }
    return FR_OK;
}

fr_status ng_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const int rms = strcmp(n->op_type, "RMSNormGrad") == 0;
    if (k->n_in < 3 || k->n_in > (rms ? 3 : 4) || !k->in[0] || !k->in[1] || !k->in[2] || k->n_out < 2 || k->n_out > 3)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs and %d outputs", k->n_in, k->n_out);
    const fr_tensor *dy = k->in[0], *x = k->in[1], *s = k->in[2], *b = k->n_in > 3 ? k->in[3] : nullptr;
    const fr_tensor *db = k->n_out > 2 ? k->out[2] : nullptr;
    if (db && !b) return fr_node_error(n, FR_ERR_GRAPH, "output dB needs input B (for its shape)");
    FR_TRY(check_dtype(n, x->dtype, dy, "dY"));
    FR_TRY(check_dtype(n, x->dtype, s, "Scale"));
    FR_TRY(check_dtype(n, x->dtype, b, "B"));
    if (dy->nbytes != x->nbytes) return fr_node_error(n, FR_ERR_SHAPE, "dY must have X's shape");
    NgPlan p;
    BcMap ms, mb;
    FR_TRY(ng_plan(n, x->rank, x->dims, s->rank, s->dims, b ? b->rank : 0, b ? b->dims : nullptr, b != nullptr, &p, &ms,
                   &mb));
    FR_TRY(check_numel(n, k->out[0], x->dtype, fr_tensor_numel(x), "dX"));
    FR_TRY(check_numel(n, k->out[1], x->dtype, fr_tensor_numel(s), "dScale"));
    if (db) FR_TRY(check_numel(n, db, x->dtype, fr_tensor_numel(b), "dB"));
    if (!k->scratch || k->scratch_bytes < p.stats_bytes + p.part_bytes)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes,
                             p.stats_bytes + p.part_bytes);
    if (k->out[0] && rms_rows_ok(n, x->dtype, p))
        return fr_rms_rows_bwd(n, k->cu->stream, k->cu->sm_count, (const float *)dy->data, (const float *)x->data,
                               (const float *)s->data, nullptr, (float *)k->out[0]->data,
                               (float *)(k->out[1] ? k->out[1]->data : nullptr), k->scratch, k->scratch_bytes, p.c.rows,
                               p.c.len, p.c.eps);
    if (k->out[0] && ln_rows_ok(n, x->dtype, p))
        return fr_ln_rows_bwd(n, k->cu->stream, k->cu->sm_count, (const float *)dy->data, (const float *)x->data,
                              (const float *)s->data, (float *)k->out[0]->data,
                              (float *)(k->out[1] ? k->out[1]->data : nullptr),
                              (float *)(db ? db->data : nullptr), k->scratch, k->scratch_bytes, p.c.rows, p.c.len,
                              p.c.eps);
    return x->dtype == FR_F32 ? ng_run<float>(k, p, rms, ms, mb) : ng_run<double>(k, p, rms, ms, mb);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_norm[] = {
    {"LayerNormalization", FR_DOMAIN_ONNX, norm_cuda, NULL},
    {"RMSNormalization", FR_DOMAIN_ONNX, norm_cuda, NULL},
    {"RMSNormalization", FR_DOMAIN_FP8RUN, norm_cuda, NULL},
    {"LayerNormGrad", FR_DOMAIN_FP8RUN, ng_cuda, ng_scratch},
    {"RMSNormGrad", FR_DOMAIN_FP8RUN, ng_cuda, ng_scratch},
    {NULL, NULL, NULL, NULL},
};
