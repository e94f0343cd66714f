/* The reduction engine of the reduce family's CUDA kernels (reduce.cu: Reduce*, ArgMax/ArgMin,
 * SumToShape, Dot; reduce_grad.cu: ReduceGrad; cumsum.cu: CumSum, which shares only the launch
 * helpers). Everything here has internal linkage: each file instantiates what it launches.
 *
 * One engine runs every reduction. The input dims, size-1 dims dropped and neighbours of the
 * same kind merged, split into kept dims (whose row-major order is the output's) and reduced
 * dims; an output index maps to an input base offset, a reduced index to an offset from it.
 * Two kernel shapes:
 *   row: the innermost merged dim is reduced (contiguous runs): a group of 32 or 256 threads
 *        per output strides over the reduced index (coalesced);
 *   col: the innermost merged dim is kept: a block takes 32 consecutive outputs (coalesced
 *        loads across the warp) and 8 warps share the reduced index.
 * With too few outputs to fill the GPU, the reduced range is cut into S splits (grid.y) whose
 * partial accumulators go to scratch; a second kernel combines them in split order. The launch
 * shape depends on the shapes only, so results are deterministic (no atomics).
 * Float inputs accumulate sums and products in double as the CPU does, integers in uint64
 * (wrapping like the CPU), Max/Min/ArgMax/ArgMin compare in the input type. Column sums of a
 * float32 [rows, cols] (SumToShape's bias gradients, ReduceSum/Mean over leading axes) take
 * their own two kernels (colsum_part / colsum_fin below), equally deterministic. */
#ifndef FR_REDUCE_ENGINE_CUH
#define FR_REDUCE_ENGINE_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/reduce.h" /* red_kind: the reduction kinds of Reduce* and ReduceGrad */

namespace {

constexpr int kThreads = 256;      /* every engine kernel runs 256-thread blocks */
constexpr int64_t kTargetBlocks = 1024; /* enough blocks to fill an H100 several times over */
constexpr int64_t kMaxSplit = 4096;
constexpr size_t kPartElem = 16;   /* largest accumulator (ArgMax of double, Prod with zeros) */
constexpr size_t kAlign = 256;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* ---------------------------------------------------------------- the reduction plan ---- */

struct RPlan {
    int nk, nr;                  /* kept / reduced merged dims, outer to inner */
    int64_t ksize[FR_MAX_RANK], kstride[FR_MAX_RANK];
    int64_t rsize[FR_MAX_RANK], rstride[FR_MAX_RANK];
    /* all merged dims in order (ReduceGrad maps input index -> output index) */
    int nd;
    int64_t size[FR_MAX_RANK], ostride[FR_MAX_RANK]; /* output strides, 0 along reduced dims */
    unsigned char kind[FR_MAX_RANK];                 /* 1 = reduced */
    int64_t n_out, count, n_in;
    int row;                     /* innermost merged dim reduced */
    /* launch shape */
    int group;                   /* row: threads per output (32 or 256) */
    int64_t blocks;              /* grid.x */
    int64_t split, chunk;        /* grid.y and reduced indices per split */
};

/* red[k] != 0: axis k is reduced. */
RPlan plan_make(int rank, const int64_t *dims, const unsigned char *red)
{
    RPlan p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < rank; k++) {
        if (dims[k] == 1) continue;
        const unsigned char kd = red[k] ? 1 : 0;
        if (p.nd > 0 && p.kind[p.nd - 1] == kd) {
            p.size[p.nd - 1] *= dims[k];
        } else {
            p.kind[p.nd] = kd;
            p.size[p.nd++] = dims[k];
        }
    }
    int64_t st[FR_MAX_RANK], s = 1, os = 1;
    for (int k = p.nd - 1; k >= 0; k--) {
        st[k] = s;
        s *= p.size[k];
        p.ostride[k] = p.kind[k] ? 0 : os;
        if (!p.kind[k]) os *= p.size[k];
    }
    p.n_in = s;
    p.n_out = 1;
    p.count = 1;
    for (int k = 0; k < p.nd; k++) {
        if (p.kind[k]) {
            p.rsize[p.nr] = p.size[k];
            p.rstride[p.nr++] = st[k];
            p.count *= p.size[k];
        } else {
            p.ksize[p.nk] = p.size[k];
            p.kstride[p.nk++] = st[k];
            p.n_out *= p.size[k];
        }
    }
    p.row = p.nd > 0 && p.kind[p.nd - 1];
    /* launch shape */
    p.split = 1;
    if (p.row) {
        p.group = p.count >= 1024 ? 256 : 32;
        const int64_t opb = kThreads / p.group;
        p.blocks = (p.n_out + opb - 1) / opb;
        if (p.group == 256 && p.blocks < kTargetBlocks / 2 && p.count >= 4096) {
            int64_t a = (kTargetBlocks + p.blocks - 1) / p.blocks, b = (p.count + 2047) / 2048;
            p.split = a < b ? a : b;
        }
    } else {
        p.group = 0;
        p.blocks = (p.n_out + 31) / 32;
        if (p.blocks < kTargetBlocks / 2 && p.count >= 64) {
            int64_t a = (kTargetBlocks + p.blocks - 1) / p.blocks, b = (p.count + 31) / 32;
            p.split = a < b ? a : b;
        }
    }
    if (p.split > kMaxSplit) p.split = kMaxSplit;
    if (p.split < 1) p.split = 1;
    p.chunk = (p.count + p.split - 1) / p.split;
    if (p.chunk > 0) p.split = (p.count + p.chunk - 1) / p.chunk; /* no empty splits */
    else p.split = 1;
    return p;
}

size_t plan_part_bytes(const RPlan &p)
{
    return p.split > 1 && p.n_out > 0 ? align_up((size_t)p.split * (size_t)p.n_out * kPartElem) : 0;
}

__device__ __forceinline__ int64_t kept_off(const RPlan &p, int64_t o)
{
    int64_t off = 0;
#pragma unroll
    for (int k = FR_MAX_RANK - 1; k >= 0; k--)
        if (k < p.nk) {
            const int64_t s = p.ksize[k];
            off += (o % s) * p.kstride[k];
            o /= s;
        }
    return off;
}

__device__ __forceinline__ int64_t red_off(const RPlan &p, int64_t r)
{
    int64_t off = 0;
#pragma unroll
    for (int k = FR_MAX_RANK - 1; k >= 0; k--)
        if (k < p.nr) {
            const int64_t s = p.rsize[k];
            off += (r % s) * p.rstride[k];
            r /= s;
        }
    return off;
}

/* Output index of input element i (row-major over the merged dims). */
__device__ __forceinline__ int64_t out_of_in(const RPlan &p, int64_t i)
{
    int64_t o = 0;
#pragma unroll
    for (int k = FR_MAX_RANK - 1; k >= 0; k--)
        if (k < p.nd) {
            const int64_t s = p.size[k];
            o += (i % s) * p.ostride[k];
            i /= s;
        }
    return o;
}

/* ---------------------------------------------------------------- block reductions ---- */

/* Reduce over a group of G threads (32: a warp, 256: the block); the group's first thread
 * gets the result. Every thread of the block must call it. Fixed order: deterministic. */
template <int G, class Cb> __device__ __forceinline__ typename Cb::A group_reduce(const Cb &cb, typename Cb::A v)
{
    using A = typename Cb::A;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = cb.comb(v, fr_shfl_down(v, d));
    if (G == 32) return v;
    __shared__ A sm[kThreads / 32];
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = l < kThreads / 32 ? sm[l] : cb.init();
#pragma unroll
        for (int d = kThreads / 64; d > 0; d >>= 1) v = cb.comb(v, fr_shfl_down(v, d));
    }
    return v;
}

/* ---------------------------------------------------------------- accumulators ---- */

struct AddD {
    using A = double;
    __device__ A init() const { return 0.0; }
    __device__ A comb(A a, A b) const { return a + b; }
};
struct MulD {
    using A = double;
    __device__ A init() const { return 1.0; }
    __device__ A comb(A a, A b) const { return a * b; }
};
/* Max / Min of floats: NaN sticks (whichever NaN), as the CPU's fold */
template <class T> struct ExtF {
    using A = T;
    int max;
    __device__ A init() const { return max ? (T)-INFINITY : (T)INFINITY; }
    __device__ A comb(A a, A b) const
    {
        if (isnan(a)) return a;
        if (isnan(b)) return b;
        return max ? (b > a ? b : a) : (b < a ? b : a);
    }
};
/* integer sums / products wrap modulo 2^64, narrowed at the end (the CPU's uint64 fold) */
struct IAdd {
    using A = unsigned long long;
    __device__ A init() const { return 0ull; }
    __device__ A comb(A a, A b) const { return a + b; }
};
struct IMul {
    using A = unsigned long long;
    __device__ A init() const { return 1ull; }
    __device__ A comb(A a, A b) const { return a * b; }
};
struct IExt {
    using A = long long;
    int max;
    long long lo, hi; /* the element type's range: the identities */
    __device__ A init() const { return max ? lo : hi; }
    __device__ A comb(A a, A b) const { return max ? (b > a ? b : a) : (b < a ? b : a); }
};
/* Prod's backward: product of the nonzero elements and the count of zeros */
struct PZ {
    double p;
    long long z;
};
struct ProdZ {
    using A = PZ;
    __device__ A init() const { return PZ{1.0, 0}; }
    __device__ A comb(A a, A b) const { return PZ{a.p * b.p, a.z + b.z}; }
};
/* ArgMax / ArgMin: (value, index); i < 0 is the empty identity. NaN is the extreme value;
 * ties go to the smaller index, or the larger with select_last_index. Commutative and
 * associative, so any tree gives the CPU's scan result. */
template <class T> struct ArgAcc {
    T v;
    long long i;
};
template <class T> struct ArgCb {
    using A = ArgAcc<T>;
    int max, last;
    __device__ A init() const { return A{(T)0, -1}; }
    __device__ bool better(T v, T w) const
    {
        if (isnan((double)v)) return !isnan((double)w);
        if (isnan((double)w)) return false;
        return max ? v > w : v < w;
    }
    __device__ A comb(A a, A b) const
    {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        if (better(b.v, a.v)) return b;
        if (better(a.v, b.v)) return a;
        return (last ? a.i > b.i : a.i < b.i) ? a : b;
    }
};

/* ---------------------------------------------------------------- the engine ---- */

template <int G, class Cb, class Ld, class Fn>
__global__ void __launch_bounds__(kThreads) red_row(RPlan p, Cb cb, Ld ld, Fn fn, typename Cb::A *part)
{
    using A = typename Cb::A;
    const int64_t o = (int64_t)blockIdx.x * (kThreads / G) + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const int64_t s = blockIdx.y;
    A acc = cb.init();
    const bool valid = o < p.n_out;
    if (valid) {
        const int64_t base = kept_off(p, o);
        const int64_t r0 = s * p.chunk, r1 = min(p.count, r0 + p.chunk);
        if (p.nr == 1) { /* the innermost dim: stride 1 */
            for (int64_t r = r0 + lane; r < r1; r += G) acc = cb.comb(acc, (A)ld(base + r, o, r));
        } else {
            for (int64_t r = r0 + lane; r < r1; r += G) acc = cb.comb(acc, (A)ld(base + red_off(p, r), o, r));
        }
    }
    acc = group_reduce<G>(cb, acc);
    if (valid && lane == 0) {
        if (gridDim.y == 1)
            fn(o, acc);
        else
            part[s * p.n_out + o] = acc;
    }
}

template <class Cb, class Ld, class Fn>
__global__ void __launch_bounds__(kThreads) red_col(RPlan p, Cb cb, Ld ld, Fn fn, typename Cb::A *part)
{
    using A = typename Cb::A;
    __shared__ A sm[kThreads / 32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t o = (int64_t)blockIdx.x * 32 + tx, s = blockIdx.y;
    A acc = cb.init();
    if (o < p.n_out) {
        const int64_t base = kept_off(p, o);
        const int64_t r0 = s * p.chunk, r1 = min(p.count, r0 + p.chunk);
        if (p.nr == 1) {
            const int64_t st = p.rstride[0];
            for (int64_t r = r0 + ty; r < r1; r += kThreads / 32) acc = cb.comb(acc, (A)ld(base + r * st, o, r));
        } else {
            for (int64_t r = r0 + ty; r < r1; r += kThreads / 32)
                acc = cb.comb(acc, (A)ld(base + red_off(p, r), o, r));
        }
    }
    sm[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int h = kThreads / 64; h > 0; h >>= 1) {
        if (ty < h) sm[ty][tx] = cb.comb(sm[ty][tx], sm[ty + h][tx]);
        __syncthreads();
    }
    if (ty == 0 && o < p.n_out) {
        if (gridDim.y == 1)
            fn(o, sm[0][tx]);
        else
            part[s * p.n_out + o] = sm[0][tx];
    }
}

/* the splits' partial accumulators of each output, combined in split order */
template <class Cb, class Fn>
__global__ void __launch_bounds__(kThreads) red_fin(int64_t n_out, int64_t split, Cb cb, Fn fn, const typename Cb::A *part)
{
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n_out; o += (int64_t)gridDim.x * blockDim.x) {
        typename Cb::A acc = cb.init();
        for (int64_t s = 0; s < split; s++) acc = cb.comb(acc, part[s * n_out + o]);
        fn(o, acc);
    }
}

unsigned grid_for(int64_t n, int64_t cap = 8192)
{
    int64_t b = (n + kThreads - 1) / kThreads;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* Run the reduction of plan p: ld(offset, output, reduced index) gives each input element's
 * value, cb folds them, fn(output, accumulator) writes the result. part: the plan's
 * plan_part_bytes of scratch (or NULL when it needs none). */
template <class Cb, class Ld, class Fn>
FR_NODISCARD fr_status red_launch(const fr_cuda_kctx *k, const RPlan &p, Cb cb, Ld ld, Fn fn, void *part, const char *name)
{
    using A = typename Cb::A;
    static_assert(sizeof(A) <= kPartElem, "accumulator larger than the scratch planned for it");
    if (p.n_out == 0) return FR_OK;
    if (p.blocks > 0x7fffffff || p.split > 65535)
        return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "reduction too large for one launch");
    if (p.split > 1 && !part) return fr_node_error(k->node, FR_ERR_INTERNAL, "reduction scratch missing");
    cudaStream_t st = k->cu->stream;
    dim3 grid((unsigned)p.blocks, (unsigned)p.split);
    A *pa = (A *)part;
    if (p.row && p.group == 256)
        red_row<256><<<grid, kThreads, 0, st>>>(p, cb, ld, fn, pa);
    else if (p.row)
        red_row<32><<<grid, kThreads, 0, st>>>(p, cb, ld, fn, pa);
    else
        red_col<<<grid, kThreads, 0, st>>>(p, cb, ld, fn, pa);
    FR_TRY(fr_cuda_check_launch(k->node, name));
    if (p.split > 1) {
        red_fin<<<grid_for(p.n_out), kThreads, 0, st>>>(p.n_out, p.split, cb, fn, (const A *)pa);
        FR_TRY(fr_cuda_check_launch(k->node, name));
    }
    return FR_OK;
}

/* ---------------------------------------------------------------- column sums ---- */

/* Sums over the rows of a float32 matrix [rows, cols] (cols % 4 == 0, 16-byte aligned): the
 * bias gradients (SumToShape of dY [tokens, N] to [N]) and ReduceSum/Mean over leading axes.
 * The engine's red_col reads one float per thread and converts every element to double
 * (64-bit conversions run at a quarter of the FP32 rate on Hopper: at [16384, 8192] that alone
 * takes about as long as reading the matrix), so it stays far from the memory ceiling. Here:
 *   colsum_part: a 2-D grid; block (tile, rb) sums rows [rb R, rb R + R) of columns
 *     [128 tile, 128 tile + 128): each warp reads whole 512-byte row segments (float4 per
 *     lane), 8 rows in flight per thread, the 8 rows summed pairwise in float32 and then
 *     added to double accumulators (one conversion per 8 elements; the float32 pair sums
 *     lose at most 3 roundings of 2^-24 relative to the 8 elements' magnitudes, far inside
 *     the CPU's 1e-5 contract); the 8 warps' sums combined in warp order into partials
 *     [row_blocks, cols] of double;
 *   colsum_fin: each column's partials summed in row-block order.
 * Every thread's order of additions is fixed by the shapes alone: the result's bits repeat. */
constexpr int kColVec = 4;                                   /* floats per lane and load */
constexpr int kColUnroll = 8;                                /* rows in flight per thread */
constexpr int64_t kColTile = 32 * kColVec;                   /* columns per block */
constexpr int64_t kColRowStep = (kThreads / 32) * kColUnroll; /* rows per block per step */
constexpr int64_t kColTargetBlocks = 1024;                   /* about 2 waves at 4 blocks/SM */

struct ColPlan {
    int ok; /* the plan is a column sum this path takes (shape-wise; alignment checked at launch) */
    int64_t rows, cols, tiles, rb, rpb; /* row blocks of rpb rows each */
};

ColPlan colsum_plan(const RPlan &p)
{
    ColPlan c;
    memset(&c, 0, sizeof c);
    if (p.nd != 2 || !p.kind[0] || p.kind[1] || p.size[1] % kColVec != 0 || p.size[0] < 1 || p.size[1] < 1) return c;
    c.ok = 1;
    c.rows = p.size[0];
    c.cols = p.size[1];
    c.tiles = (c.cols + kColTile - 1) / kColTile;
    const int64_t max_rb = (c.rows + kColRowStep - 1) / kColRowStep;
    int64_t rb = (kColTargetBlocks + c.tiles - 1) / c.tiles;
    if (rb > max_rb) rb = max_rb;
    if (rb < 1) rb = 1;
    c.rpb = (c.rows + rb - 1) / rb;
    c.rpb = (c.rpb + kColRowStep - 1) / kColRowStep * kColRowStep;
    c.rb = (c.rows + c.rpb - 1) / c.rpb;
    return c;
}

size_t colsum_part_bytes(const ColPlan &c)
{
    return c.ok ? align_up((size_t)c.rb * (size_t)c.cols * sizeof(double)) : 0;
}

__device__ __forceinline__ float4 f4_add(float4 a, float4 b)
{
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__global__ void __launch_bounds__(kThreads) colsum_part(const float *__restrict__ x, int64_t rows, int64_t cols,
                                                        int64_t rpb, double *__restrict__ part)
{
    __shared__ double sm[kThreads / 32][kColTile];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    const int64_t c = (int64_t)blockIdx.x * kColTile + lane * kColVec;
    const int64_t r0 = (int64_t)blockIdx.y * rpb, r1 = min(rows, r0 + rpb);
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    if (c < cols) {
        const float *xc = x + c;
        int64_t r = r0 + w;
        constexpr int64_t W = kThreads / 32;
        for (; r + (kColUnroll - 1) * W < r1; r += kColUnroll * W) {
            float4 v[kColUnroll];
#pragma unroll
            for (int u = 0; u < kColUnroll; u++) v[u] = __ldg(reinterpret_cast<const float4 *>(xc + (r + u * W) * cols));
#pragma unroll
            for (int h = kColUnroll / 2; h > 0; h >>= 1)
#pragma unroll
                for (int u = 0; u < h; u++) v[u] = f4_add(v[u], v[u + h]);
            a0 += (double)v[0].x;
            a1 += (double)v[0].y;
            a2 += (double)v[0].z;
            a3 += (double)v[0].w;
        }
        for (; r < r1; r += W) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(xc + r * cols));
            a0 += (double)v.x;
            a1 += (double)v.y;
            a2 += (double)v.z;
            a3 += (double)v.w;
        }
    }
    sm[w][lane * kColVec] = a0;
    sm[w][lane * kColVec + 1] = a1;
    sm[w][lane * kColVec + 2] = a2;
    sm[w][lane * kColVec + 3] = a3;
    __syncthreads();
    if (threadIdx.x < kColTile) {
        const int64_t o = (int64_t)blockIdx.x * kColTile + threadIdx.x;
        double s = sm[0][threadIdx.x];
#pragma unroll
        for (int i = 1; i < kThreads / 32; i++) s += sm[i][threadIdx.x];
        if (o < cols) part[blockIdx.y * cols + o] = s;
    }
}

/* block: 32 columns x 8 lanes over the row blocks; lane l takes row blocks l, l + 8, ... */
template <class Fn>
__global__ void __launch_bounds__(kThreads) colsum_fin(int64_t cols, int64_t rb, const double *__restrict__ part, Fn fn)
{
    __shared__ double sm[kThreads / 32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t o = (int64_t)blockIdx.x * 32 + tx;
    double s = 0;
    if (o < cols)
        for (int64_t b = ty; b < rb; b += kThreads / 32) s += part[b * cols + o];
    sm[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && o < cols) {
#pragma unroll
        for (int i = 1; i < kThreads / 32; i++) s += sm[i][tx];
        fn(o, s);
    }
}

/* Whether colsum_launch takes plan c for x (else the engine runs it). */
bool colsum_usable(const ColPlan &c, const void *x, const void *part)
{
    return c.ok && part && ((uintptr_t)x % 16) == 0 && c.tiles <= 0x7fffffff && c.rb <= 65535;
}

/* The column sum of x by plan c; fn(column, double sum) writes the result. part: the scratch
 * of colsum_part_bytes(c). */
template <class Fn>
FR_NODISCARD fr_status colsum_launch(const fr_cuda_kctx *k, const ColPlan &c, const float *x, Fn fn, void *part,
                                     const char *name)
{
    cudaStream_t st = k->cu->stream;
    double *pa = (double *)part;
    colsum_part<<<dim3((unsigned)c.tiles, (unsigned)c.rb), kThreads, 0, st>>>(x, c.rows, c.cols, c.rpb, pa);
    FR_TRY(fr_cuda_check_launch(k->node, name));
    colsum_fin<<<(unsigned)((c.cols + 31) / 32), kThreads, 0, st>>>(c.cols, c.rb, (const double *)pa, fn);
    return fr_cuda_check_launch(k->node, name);
}

/* finisher: the accumulator converted to T */
template <class T, class V> struct Store {
    T *y;
    __device__ void operator()(int64_t o, V v) const { y[o] = (T)v; }
};

/* The constant value of node input i (axes): host data of the graph's initializer/folded
 * constant; the device copy cannot be read without a synchronization. */
const fr_tensor *const_input(const fr_graph *g, const fr_node *n, int i)
{
    if (i >= n->n_inputs || n->inputs[i] < 0) return nullptr;
    return g->values[n->inputs[i]].constant;
}

} /* namespace */

/* ReduceGrad (reduce_grad.cu) and CumSum (cumsum.cu), for the kernel table in reduce.cu */
FR_NODISCARD fr_status fr_reduce_grad_cuda(const fr_cuda_kctx *k);
FR_NODISCARD fr_status fr_reduce_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes);
FR_NODISCARD fr_status fr_cumsum_cuda(const fr_cuda_kctx *k);

#endif
