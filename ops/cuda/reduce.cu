/* CUDA kernels of the reduce family (see runtime/cuda/cuda_kernel.h for the contract):
 * ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSumExp, ArgMax/ArgMin and ReduceGrad
 * (ops/reduce.c), SumToShape and Dot (ops/grad_ops.c), CumSum (ops/cumsum.c), with the CPU
 * kernels' semantics: axes as attribute or constant input by opset, keepdims,
 * noop_with_empty_axes, the same identities for empty reductions, NaN rules and integer
 * wrapping.
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
 * (wrapping like the CPU), Max/Min/ArgMax/ArgMin compare in the input type.
 *
 * Device errors: CumSum with a non-constant axis input reads the axis on the device; an axis
 * out of range (FR_ERR_SHAPE on the CPU) is recorded in the context's device error word
 * (fr_dev_error: the node, the axis, the rank) and the output is zeros; no host
 * synchronization is allowed. Everything else is validated on the host from the static
 * shapes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../runtime/cuda/cuda_kernel.h"
#include "cuda_util.cuh"

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

template <class A> __device__ __forceinline__ A shfl_down(A v, int d)
{
    static_assert(sizeof(A) % 4 == 0, "accumulators are whole 32-bit words");
    int w[sizeof(A) / 4];
    memcpy(w, &v, sizeof(A));
#pragma unroll
    for (int i = 0; i < (int)(sizeof(A) / 4); i++) w[i] = __shfl_down_sync(0xffffffffu, w[i], d);
    memcpy(&v, w, sizeof(A));
    return v;
}

/* Reduce over a group of G threads (32: a warp, 256: the block); the group's first thread
 * gets the result. Every thread of the block must call it. Fixed order: deterministic. */
template <int G, class Cb> __device__ __forceinline__ typename Cb::A group_reduce(const Cb &cb, typename Cb::A v)
{
    using A = typename Cb::A;
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = cb.comb(v, shfl_down(v, d));
    if (G == 32) return v;
    __shared__ A sm[kThreads / 32];
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    if (l == 0) sm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = l < kThreads / 32 ? sm[l] : cb.init();
#pragma unroll
        for (int d = kThreads / 64; d > 0; d >>= 1) v = cb.comb(v, shfl_down(v, d));
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
fr_status red_launch(const fr_cuda_kctx *k, const RPlan &p, Cb cb, Ld ld, Fn fn, void *part, const char *name)
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

/* ---------------------------------------------------------------- Reduce* ---- */

enum RKind { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_SUMSQ, R_L1, R_L2, R_LSE };

struct RedDef {
    const char *op;
    RKind kind;
    int axes_input_opset;
    int ints;
};

const RedDef red_defs[] = {
    {"ReduceSum", R_SUM, 13, 1},   {"ReduceMean", R_MEAN, 18, 1},     {"ReduceMax", R_MAX, 18, 1},
    {"ReduceMin", R_MIN, 18, 1},   {"ReduceProd", R_PROD, 18, 1},     {"ReduceSumSquare", R_SUMSQ, 18, 0},
    {"ReduceL1", R_L1, 18, 0},     {"ReduceL2", R_L2, 18, 0},         {"ReduceLogSumExp", R_LSE, 18, 0},
};

const RedDef *red_def_of(const fr_node *n)
{
    for (const RedDef &d : red_defs)
        if (strcmp(d.op, n->op_type) == 0) return &d;
    return nullptr;
}

fr_status bool_attr(const fr_node *n, const char *name, int64_t dflt, int *out)
{
    int64_t v;
    FR_TRY(fr_node_attr_int(n, name, dflt, &v));
    if (v != 0 && v != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s=%lld must be 0 or 1", name, (long long)v);
    *out = (int)v;
    return FR_OK;
}

/* The constant value of node input i (axes): host data of the graph's initializer/folded
 * constant; the device copy cannot be read without a synchronization. */
const fr_tensor *const_input(const fr_graph *g, const fr_node *n, int i)
{
    if (i >= n->n_inputs || n->inputs[i] < 0) return nullptr;
    return g->values[n->inputs[i]].constant;
}

/* Which axes of x (rank, dims) the node reduces, as ops/reduce.c decides. */
fr_status red_axes(const fr_graph *g, const fr_node *n, int64_t opset, const RedDef *d, int rank,
                   unsigned char *red)
{
    int keepdims, noop = 0;
    FR_TRY(bool_attr(n, "keepdims", 1, &keepdims));
    const int from_input = !(opset >= 1 && opset < d->axes_input_opset);
    int cnt;
    const int64_t *attr;
    FR_TRY(fr_node_attr_ints(n, "axes", &cnt, &attr));
    int64_t vals[1024];
    const int64_t *axes = attr;
    if (from_input) {
        FR_TRY(bool_attr(n, "noop_with_empty_axes", 0, &noop));
        if (cnt >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "axes is an input from opset %d on, not an attribute",
                                 d->axes_input_opset);
        cnt = -1;
        if (n->n_inputs > 1 && n->inputs[1] >= 0) {
            const fr_tensor *t = const_input(g, n, 1);
            if (!t)
                return fr_node_error(n, FR_ERR_SHAPE, "the axes input must be a constant (static shapes)");
            if (!fr_dtype_is_int(t->dtype) || t->rank > 1)
                return fr_node_error(n, FR_ERR_SHAPE, "axes must be a 1-D integer tensor");
            int64_t c = fr_tensor_numel(t);
            if (c > 1024) return fr_node_error(n, FR_ERR_SHAPE, "axes has %lld entries", (long long)c);
            for (int64_t i = 0; i < c; i++) vals[i] = fr_tensor_get_i64(t, i);
            cnt = (int)c;
            axes = vals;
        }
    } else if (n->n_inputs > 1) {
        return fr_node_error(n, FR_ERR_GRAPH, "takes axes as an attribute before opset %d", d->axes_input_opset);
    }
    memset(red, 0, FR_MAX_RANK);
    if (cnt <= 0) {
        for (int k = 0; k < rank; k++) red[k] = !noop;
    } else {
        if (rank == 0) return fr_node_error(n, FR_ERR_SHAPE, "axes given for a rank-0 input");
        for (int i = 0; i < cnt; i++) {
            int a;
            FR_TRY(fr_norm_axis(n, axes[i], rank, &a));
            red[a] = 1;
        }
    }
    return FR_OK;
}

/* loaders: (input offset, output index, reduced index) -> the value folded */
template <class T> struct LoadF { /* float inputs folded into double, transformed by kind */
    const T *x;
    int kind;
    const double *shift; /* LogSumExp: the per-output max */
    __device__ double operator()(int64_t off, int64_t o, int64_t) const
    {
        const double v = (double)x[off];
        switch (kind) {
        case R_SUMSQ: case R_L2: return v * v;
        case R_L1: return fabs(v);
        case R_LSE: return exp(v - shift[o]);
        default: return v;
        }
    }
};
template <class T> struct LoadRaw {
    const T *x;
    __device__ T operator()(int64_t off, int64_t, int64_t) const { return x[off]; }
};
template <class T> struct LoadI {
    const T *x;
    __device__ long long operator()(int64_t off, int64_t, int64_t) const { return (long long)x[off]; }
};

/* finishers: (output index, accumulator) -> output */
template <class T> struct FinF {
    T *y;
    int kind;
    int64_t count;
    const double *shift;
    __device__ void operator()(int64_t o, double v) const
    {
        switch (kind) {
        case R_MEAN: v = count ? v / (double)count : (double)NAN; break;
        case R_L2: v = sqrt(v); break;
        case R_LSE: {
            const double s = shift[o];
            v = isfinite(s) ? s + log(v) : s; /* a non-finite max is the result itself */
            break;
        }
        default: break;
        }
        y[o] = (T)v;
    }
};
template <class T, class V> struct Store {
    T *y;
    __device__ void operator()(int64_t o, V v) const { y[o] = (T)v; }
};
template <class T> struct FinI {
    T *y;
    int mean;
    int64_t count;
    __device__ void operator()(int64_t o, long long v) const
    {
        if (mean) {
            if (sizeof(T) == 4) v = (long long)(int32_t)(uint32_t)(unsigned long long)v; /* the wrapped sum */
            v = count ? v / count : 0;
        }
        y[o] = (T)(unsigned long long)v;
    }
};

fr_status red_plan_node(const fr_graph *g, const fr_node *n, int64_t opset, const RedDef **d, RPlan *p)
{
    *d = red_def_of(n);
    if (!*d) return fr_node_error(n, FR_ERR_INTERNAL, "not a reduction");
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs input data");
    const fr_value *x = &g->values[n->inputs[0]];
    unsigned char red[FR_MAX_RANK];
    FR_TRY(red_axes(g, n, opset, *d, x->rank, red));
    *p = plan_make(x->rank, x->dims, red);
    return FR_OK;
}

fr_status red_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const RedDef *d;
    RPlan p;
    FR_TRY(red_plan_node(g, n, fr_graph_opset(g, n->domain), &d, &p));
    *bytes = plan_part_bytes(p) + (d->kind == R_LSE ? align_up((size_t)p.n_out * sizeof(double)) : 0);
    return FR_OK;
}

template <class T> fr_status red_run_float(const fr_cuda_kctx *k, const RedDef *d, const RPlan &p, const T *x, T *y)
{
    char *scr = (char *)k->scratch;
    void *part = plan_part_bytes(p) ? scr : nullptr;
    switch (d->kind) {
    case R_MAX:
    case R_MIN:
        return red_launch(k, p, ExtF<T>{d->kind == R_MAX}, LoadRaw<T>{x}, Store<T, T>{y}, part, d->op);
    case R_PROD:
        return red_launch(k, p, MulD{}, LoadF<T>{x, R_SUM, nullptr}, FinF<T>{y, R_PROD, p.count, nullptr}, part,
                          d->op);
    case R_LSE: {
        double *shift = (double *)(scr + plan_part_bytes(p));
        FR_TRY(red_launch(k, p, ExtF<T>{1}, LoadRaw<T>{x}, Store<double, T>{shift}, part, d->op));
        return red_launch(k, p, AddD{}, LoadF<T>{x, R_LSE, shift}, FinF<T>{y, R_LSE, p.count, shift}, part, d->op);
    }
    default:
        return red_launch(k, p, AddD{}, LoadF<T>{x, d->kind, nullptr}, FinF<T>{y, d->kind, p.count, nullptr}, part,
                          d->op);
    }
}

template <class T> fr_status red_run_int(const fr_cuda_kctx *k, const RedDef *d, const RPlan &p, const T *x, T *y)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    const long long lo = sizeof(T) == 4 ? (long long)INT32_MIN : (long long)INT64_MIN;
    const long long hi = sizeof(T) == 4 ? (long long)INT32_MAX : (long long)INT64_MAX;
    switch (d->kind) {
    case R_SUM:
    case R_MEAN:
        return red_launch(k, p, IAdd{}, LoadI<T>{x}, FinI<T>{y, d->kind == R_MEAN, p.count}, part, d->op);
    case R_PROD: return red_launch(k, p, IMul{}, LoadI<T>{x}, FinI<T>{y, 0, p.count}, part, d->op);
    case R_MAX:
    case R_MIN:
        return red_launch(k, p, IExt{d->kind == R_MAX, lo, hi}, LoadI<T>{x}, FinI<T>{y, 0, p.count}, part, d->op);
    default: return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "integer input");
    }
}

fr_status red_check_out(const fr_node *n, const fr_tensor *y, fr_dtype dt, int64_t n_out)
{
    if (!y || y->dtype != dt || fr_tensor_numel(y) != n_out)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s with %lld elements (re-run shape inference)",
                             fr_dtype_name(dt), (long long)n_out);
    return FR_OK;
}

fr_status red_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs input data and an output");
    const RedDef *d;
    RPlan p;
    FR_TRY(red_plan_node(k->g, n, k->opset, &d, &p));
    const fr_tensor *x = k->in[0];
    fr_tensor *y = k->out[0];
    FR_TRY(red_check_out(n, y, x->dtype, p.n_out));
    switch (x->dtype) {
    case FR_F32: return red_run_float(k, d, p, (const float *)x->data, (float *)y->data);
    case FR_F64: return red_run_float(k, d, p, (const double *)x->data, (double *)y->data);
    case FR_I32:
        if (d->ints) return red_run_int(k, d, p, (const int32_t *)x->data, (int32_t *)y->data);
        break;
    case FR_I64:
        if (d->ints) return red_run_int(k, d, p, (const int64_t *)x->data, (int64_t *)y->data);
        break;
    default: break;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
}

/* ---------------------------------------------------------------- ArgMax / ArgMin ---- */

fr_status arg_plan(const fr_node *n, int rank, const int64_t *dims, RPlan *p)
{
    int64_t axis;
    int keepdims, last, a;
    FR_TRY(fr_node_attr_int(n, "axis", 0, &axis));
    FR_TRY(bool_attr(n, "keepdims", 1, &keepdims));
    FR_TRY(bool_attr(n, "select_last_index", 0, &last));
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis, rank, &a));
    unsigned char red[FR_MAX_RANK] = {0};
    red[a] = 1;
    *p = plan_make(rank, dims, red);
    if (dims[a] == 0 && p->n_out > 0) return fr_node_error(n, FR_ERR_SHAPE, "axis %d is empty: no index to return", a);
    return FR_OK;
}

fr_status arg_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one input");
    const fr_value *x = &g->values[n->inputs[0]];
    RPlan p;
    FR_TRY(arg_plan(n, x->rank, x->dims, &p));
    *bytes = plan_part_bytes(p);
    return FR_OK;
}

template <class T> struct LoadArg {
    const T *x;
    __device__ ArgAcc<T> operator()(int64_t off, int64_t, int64_t r) const { return ArgAcc<T>{x[off], r}; }
};
template <class T> struct FinArg {
    int64_t *y;
    __device__ void operator()(int64_t o, ArgAcc<T> a) const { y[o] = a.i < 0 ? 0 : a.i; }
};

template <class T> fr_status arg_run(const fr_cuda_kctx *k, const RPlan &p, int max, int last)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, ArgCb<T>{max, last}, LoadArg<T>{(const T *)k->in[0]->data},
                      FinArg<T>{(int64_t *)k->out[0]->data}, part, k->node->op_type);
}

fr_status arg_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = k->in[0];
    RPlan p;
    FR_TRY(arg_plan(n, x->rank, x->dims, &p));
    FR_TRY(red_check_out(n, k->out[0], FR_I64, p.n_out));
    int last = 0;
    FR_TRY(bool_attr(n, "select_last_index", 0, &last));
    const int max = strcmp(n->op_type, "ArgMax") == 0;
    switch (x->dtype) {
    case FR_F32: return arg_run<float>(k, p, max, last);
    case FR_F64: return arg_run<double>(k, p, max, last);
    case FR_I32: return arg_run<int32_t>(k, p, max, last);
    case FR_I64: return arg_run<long long>(k, p, max, last);
    default: return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
    }
}

/* ---------------------------------------------------------------- ReduceGrad ---- */

const char *const rg_names[] = {"Sum", "Mean", "Max", "Min", "Prod", "SumSquare", "L1", "L2", "LogSumExp"};
const RKind rg_kinds[] = {R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_SUMSQ, R_L1, R_L2, R_LSE};

int rg_inputs(RKind k)
{
    switch (k) {
    case R_SUM: case R_MEAN: return 1;
    case R_SUMSQ: case R_L1: case R_PROD: return 2;
    default: return 3;
    }
}

/* kind and the plan over x's shape (attribute `shape`) */
fr_status rg_plan(const fr_node *n, int n_in, RKind *kind, RPlan *p)
{
    const char *ks;
    FR_TRY(fr_node_attr_string(n, "kind", NULL, &ks));
    if (!ks) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'kind' is required");
    size_t i = 0;
    while (i < sizeof rg_names / sizeof rg_names[0] && strcmp(rg_names[i], ks) != 0) i++;
    if (i == sizeof rg_names / sizeof rg_names[0])
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "kind '%s' is not a reduction", ks);
    *kind = rg_kinds[i];
    if (n_in != rg_inputs(*kind))
        return fr_node_error(n, FR_ERR_GRAPH, "kind '%s' takes %d inputs, the node has %d", ks, rg_inputs(*kind), n_in);
    int cnt;
    const int64_t *v;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > FR_MAX_RANK) return fr_node_error(n, FR_ERR_UNSUPPORTED, "shape has rank %d", cnt);
    int rank = cnt;
    int64_t dims[FR_MAX_RANK];
    for (int k = 0; k < rank; k++) {
        if (v[k] < 0) return fr_node_error(n, FR_ERR_SHAPE, "shape has a negative dim");
        dims[k] = v[k];
    }
    FR_TRY(fr_node_attr_ints(n, "axes", &cnt, &v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'axes' is required");
    unsigned char red[FR_MAX_RANK] = {0};
    for (int j = 0; j < cnt; j++) {
        int a;
        FR_TRY(fr_norm_axis(n, v[j], rank, &a));
        red[a] = 1;
    }
    *p = plan_make(rank, dims, red);
    return FR_OK;
}

/* scratch: [aux: n_out doubles][zeros: n_out int64][reduction partials] */
size_t rg_aux_bytes(RKind kind, const RPlan &p)
{
    if (kind == R_MAX || kind == R_MIN) return align_up((size_t)p.n_out * sizeof(double));
    if (kind == R_PROD) return align_up((size_t)p.n_out * sizeof(double)) + align_up((size_t)p.n_out * sizeof(long long));
    return 0;
}

fr_status rg_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    RKind kind;
    RPlan p;
    FR_TRY(rg_plan(n, n->n_inputs, &kind, &p));
    *bytes = rg_aux_bytes(kind, p) ? rg_aux_bytes(kind, p) + plan_part_bytes(p) : 0;
    return FR_OK;
}

/* Max/Min: the elements equal to the result (NaN ties NaN) */
template <class T> struct LoadTie {
    const T *x, *y;
    __device__ double operator()(int64_t off, int64_t o, int64_t) const
    {
        const double a = (double)x[off], b = (double)y[o];
        return (a == b || (isnan(a) && isnan(b))) ? 1.0 : 0.0;
    }
};
template <class T> struct LoadPZ {
    const T *x;
    __device__ PZ operator()(int64_t off, int64_t, int64_t) const
    {
        const double v = (double)x[off];
        return v == 0 ? PZ{1.0, 1} : PZ{v, 0};
    }
};
struct StorePZ {
    double *p;
    long long *z;
    __device__ void operator()(int64_t o, PZ a) const
    {
        p[o] = a.p;
        z[o] = a.z;
    }
};

template <class T>
__global__ void __launch_bounds__(kThreads) rg_apply(RPlan p, int kind, const T *dy, const T *x, const T *y,
                                                    const double *aux, const long long *zeros, T *dx)
{
    const int64_t nx = p.n_in;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nx; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o;
        if (p.nr == 0) o = i;
        else if (p.row && p.nr == 1) o = i / p.count;       /* [kept..., reduced] */
        else if (!p.row && p.nr == 1 && p.kind[0]) o = i % p.n_out; /* [reduced, kept...] */
        else o = out_of_in(p, i);
        const double gv = (double)dy[o];
        double v;
        switch (kind) {
        case R_SUM: v = gv; break;
        case R_MEAN: v = gv / (double)p.count; break;
        case R_SUMSQ: v = 2.0 * (double)x[i] * gv; break;
        case R_L1: {
            const double xv = (double)x[i];
            v = (isnan(xv) ? xv : xv > 0 ? 1.0 : xv < 0 ? -1.0 : 0.0) * gv;
            break;
        }
        case R_L2: {
            const double yv = (double)y[o];
            v = yv == 0 ? 0.0 : (double)x[i] / yv * gv;
            break;
        }
        case R_LSE: v = exp((double)x[i] - (double)y[o]) * gv; break;
        case R_MAX:
        case R_MIN: {
            const double xv = (double)x[i], yv = (double)y[o];
            v = (xv == yv || (isnan(xv) && isnan(yv))) ? gv / aux[o] : 0.0;
            break;
        }
        default: { /* R_PROD */
            const double xv = (double)x[i];
            const long long z = zeros[o];
            v = z == 0 ? aux[o] / xv * gv : z == 1 ? (xv == 0 ? aux[o] * gv : 0.0) : 0.0;
            break;
        }
        }
        dx[i] = (T)v;
    }
}

template <class T> fr_status rg_run(const fr_cuda_kctx *k, RKind kind, const RPlan &p)
{
    const T *dy = (const T *)k->in[0]->data;
    const T *x = k->n_in > 1 ? (const T *)k->in[1]->data : nullptr;
    const T *y = k->n_in > 2 ? (const T *)k->in[2]->data : nullptr;
    T *dx = (T *)k->out[0]->data;
    char *scr = (char *)k->scratch;
    double *aux = nullptr;
    long long *zeros = nullptr;
    const size_t aux_bytes = rg_aux_bytes(kind, p);
    void *part = plan_part_bytes(p) ? scr + aux_bytes : nullptr;
    if (kind == R_MAX || kind == R_MIN) {
        aux = (double *)scr;
        FR_TRY(red_launch(k, p, AddD{}, LoadTie<T>{x, y}, Store<double, double>{aux}, part, "ReduceGrad(ties)"));
    } else if (kind == R_PROD) {
        aux = (double *)scr;
        zeros = (long long *)(scr + align_up((size_t)p.n_out * sizeof(double)));
        FR_TRY(red_launch(k, p, ProdZ{}, LoadPZ<T>{x}, StorePZ{aux, zeros}, part, "ReduceGrad(prod)"));
    }
    rg_apply<T><<<grid_for(p.n_in, 65536), kThreads, 0, k->cu->stream>>>(p, (int)kind, dy, x, y, aux, zeros, dx);
    return fr_cuda_check_launch(k->node, "ReduceGrad");
}

fr_status rg_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    if (k->n_in < 1 || k->n_out < 1 || !k->out[0]) return fr_node_error(n, FR_ERR_GRAPH, "needs dy and an output");
    RKind kind;
    RPlan p;
    FR_TRY(rg_plan(n, k->n_in, &kind, &p));
    const fr_tensor *dy = k->in[0];
    fr_tensor *dx = k->out[0];
    if (dy->dtype != FR_F32 && dy->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dy is %s (float32 or float64 supported)", fr_dtype_name(dy->dtype));
    int ok = dx->dtype == dy->dtype && fr_tensor_numel(dx) == p.n_in && fr_tensor_numel(dy) == p.n_out;
    for (int i = 1; ok && i < k->n_in; i++)
        ok = k->in[i]->dtype == dy->dtype && fr_tensor_numel(k->in[i]) == (i == 1 ? p.n_in : p.n_out);
    if (!ok) return fr_node_error(n, FR_ERR_SHAPE, "inputs/outputs do not match the attributes (re-run shape inference)");
    if (p.n_in == 0) return FR_OK;
    return dy->dtype == FR_F32 ? rg_run<float>(k, kind, p) : rg_run<double>(k, kind, p);
}

/* ---------------------------------------------------------------- SumToShape, Dot ---- */

fr_status sum_to_plan(const fr_node *n, int rx, const int64_t *dx, RPlan *p)
{
    int cnt;
    const int64_t *shape;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &shape));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > rx) return fr_node_error(n, FR_ERR_SHAPE, "target rank %d exceeds input rank %d", cnt, rx);
    unsigned char red[FR_MAX_RANK] = {0};
    for (int k = 0; k < rx; k++) {
        if (k < rx - cnt) {
            red[k] = 1;
            continue;
        }
        const int64_t t = shape[k - (rx - cnt)];
        if (t != 1 && t != dx[k])
            return fr_node_error(n, FR_ERR_SHAPE, "cannot sum dim %d of size %lld to size %lld", k, (long long)dx[k],
                                 (long long)t);
        red[k] = t == 1 && dx[k] != 1;
    }
    *p = plan_make(rx, dx, red);
    return FR_OK;
}

fr_status sum_to_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one input");
    const fr_value *x = &g->values[n->inputs[0]];
    RPlan p;
    FR_TRY(sum_to_plan(n, x->rank, x->dims, &p));
    *bytes = plan_part_bytes(p);
    return FR_OK;
}

template <class T> fr_status sum_to_run(const fr_cuda_kctx *k, const RPlan &p)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, AddD{}, LoadF<T>{(const T *)k->in[0]->data, R_SUM, nullptr},
                      FinF<T>{(T *)k->out[0]->data, R_SUM, p.count, nullptr}, part, "SumToShape");
}

fr_status sum_to_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = k->in[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    RPlan p;
    FR_TRY(sum_to_plan(n, x->rank, x->dims, &p));
    FR_TRY(red_check_out(n, k->out[0], x->dtype, p.n_out));
    return x->dtype == FR_F32 ? sum_to_run<float>(k, p) : sum_to_run<double>(k, p);
}

RPlan dot_plan(int rank, const int64_t *dims)
{
    int64_t numel = 1;
    for (int k = 0; k < rank; k++) numel *= dims[k];
    const unsigned char red[1] = {1};
    return plan_make(1, &numel, red);
}

fr_status dot_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs");
    const fr_value *a = &g->values[n->inputs[0]];
    *bytes = plan_part_bytes(dot_plan(a->rank, a->dims));
    return FR_OK;
}

template <class T> struct LoadDot {
    const T *a, *b;
    __device__ double operator()(int64_t off, int64_t, int64_t) const { return (double)a[off] * (double)b[off]; }
};

template <class T> fr_status dot_run(const fr_cuda_kctx *k, const RPlan &p)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, AddD{}, LoadDot<T>{(const T *)k->in[0]->data, (const T *)k->in[1]->data},
                      Store<T, double>{(T *)k->out[0]->data}, part, "Dot");
}

fr_status dot_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs and one output");
    const fr_tensor *a = k->in[0], *b = k->in[1];
    if ((a->dtype != FR_F32 && a->dtype != FR_F64) || b->dtype != a->dtype || a->nbytes != b->nbytes ||
        k->out[0]->dtype != a->dtype || fr_tensor_numel(k->out[0]) != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "inputs must be float tensors of one shape and dtype");
    RPlan p = dot_plan(a->rank, a->dims);
    return a->dtype == FR_F32 ? dot_run<float>(k, p) : dot_run<double>(k, p);
}

/* ---------------------------------------------------------------- CumSum ---- */

/* Lines of `len` elements `inner` apart; sums run in double as on the CPU (exact for integers
 * below 2^53, so integer results are identical whatever the order). */
struct CsShape {
    int rank;
    int64_t dims[FR_MAX_RANK];
};

template <class T> __device__ __forceinline__ void cs_put(T *y, int64_t i, double v) { y[i] = (T)v; }

/* inner == 1: one block per line, scanned 256 elements at a time with a running carry */
template <class T>
__global__ void __launch_bounds__(kThreads) cs_rows(const T *x, T *y, int64_t lines, int64_t len, int exclusive, int reverse)
{
    __shared__ double wsum[kThreads / 32];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
    for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
        const T *xl = x + line * len;
        T *yl = y + line * len;
        double carry = 0.0;
        for (int64_t c0 = 0; c0 < len; c0 += kThreads) {
            const int64_t k = c0 + threadIdx.x;
            const int64_t kk = reverse ? len - 1 - k : k;
            const double v = k < len ? (double)xl[kk] : 0.0;
            double inc = v; /* warp inclusive scan */
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const double t = __shfl_up_sync(0xffffffffu, inc, d);
                if (lane >= d) inc += t;
            }
            double exc = __shfl_up_sync(0xffffffffu, inc, 1);
            if (lane == 0) exc = 0.0;
            if (lane == 31) wsum[w] = inc;
            __syncthreads();
            double woff = 0.0, total = 0.0;
#pragma unroll
            for (int j = 0; j < kThreads / 32; j++) {
                if (j < w) woff += wsum[j];
                total += wsum[j];
            }
            if (k < len) cs_put(yl, kk, carry + woff + (exclusive ? exc : inc));
            carry += total;
            __syncthreads(); /* wsum is rewritten by the next chunk */
        }
    }
}

/* inner > 1 (or the axis known only on the device): one thread per line, sequential along it,
 * consecutive threads on consecutive inner positions (coalesced). axis_dev != NULL: read the
 * axis there (int32 or int64), normalized as the CPU does; out of range goes to the device
 * error word and the output is zeros. */
template <class T>
__global__ void __launch_bounds__(kThreads) cs_lines(const T *x, T *y, CsShape s, int axis, const void *axis_dev,
                                                    int axis_is64, int exclusive, int reverse, int *err, int node)
{
    int64_t numel = 1;
    for (int k = 0; k < s.rank; k++) numel *= s.dims[k];
    if (axis_dev) {
        const long long a = axis_is64 ? *(const long long *)axis_dev : (long long)*(const int *)axis_dev;
        if (a < -s.rank || a >= s.rank) {
            if (blockIdx.x == 0 && threadIdx.x == 0) fr_dev_error(err, FR_ERR_SHAPE, node, a, s.rank);
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < numel; i += (int64_t)gridDim.x * blockDim.x)
                y[i] = (T)0;
            return;
        }
        axis = (int)(a < 0 ? a + s.rank : a);
    }
    int64_t len = s.dims[axis], inner = 1;
    for (int k = axis + 1; k < s.rank; k++) inner *= s.dims[k];
    if (len == 0 || inner == 0) return;
    const int64_t lines = numel / len;
    for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < lines; l += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = l / inner, i = l % inner, base = o * len * inner + i;
        double acc = 0.0;
        for (int64_t k = 0; k < len; k++) {
            const int64_t off = base + (reverse ? len - 1 - k : k) * inner;
            const double v = (double)x[off];
            if (exclusive) {
                cs_put(y, off, acc);
                acc += v;
            } else {
                acc += v;
                cs_put(y, off, acc);
            }
        }
    }
}

template <class T> fr_status cs_run(const fr_cuda_kctx *k, int axis, int exclusive, int reverse)
{
    const fr_tensor *x = k->in[0];
    const T *xd = (const T *)x->data;
    T *yd = (T *)k->out[0]->data;
    const int64_t numel = fr_tensor_numel(x);
    cudaStream_t st = k->cu->stream;
    CsShape s;
    memset(&s, 0, sizeof s);
    s.rank = x->rank;
    memcpy(s.dims, x->dims, sizeof s.dims);
    if (axis >= 0) {
        int64_t len = x->dims[axis], inner = 1;
        for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
        if (inner == 1 && len > 1) {
            const int64_t lines = numel / len;
            cs_rows<T><<<(unsigned)(lines < 65536 ? lines : 65536), kThreads, 0, st>>>(xd, yd, lines, len, exclusive,
                                                                                    reverse);
            return fr_cuda_check_launch(k->node, "CumSum");
        }
        cs_lines<T><<<grid_for(numel / (len ? len : 1)), kThreads, 0, st>>>(xd, yd, s, axis, nullptr, 0, exclusive,
                                                                            reverse, nullptr, 0);
        return fr_cuda_check_launch(k->node, "CumSum");
    }
    /* the axis lives on the device */
    const fr_tensor *a = k->in[1];
    cs_lines<T><<<grid_for(numel), kThreads, 0, st>>>(xd, yd, s, 0, a->data, a->dtype == FR_I64, exclusive, reverse,
                                                      k->cu->dev_error, fr_node_index(k));
    return fr_cuda_check_launch(k->node, "CumSum");
}

fr_status cs_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs x, axis and one output");
    if (!k->in[1]) return fr_node_error(n, FR_ERR_GRAPH, "the axis input is required");
    const fr_tensor *x = k->in[0], *at = k->in[1];
    if (x->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    if (!fr_dtype_is_int(at->dtype) || fr_tensor_numel(at) != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "axis must be an integer scalar");
    if (at->dtype != FR_I64 && at->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "axis dtype %s (int32 or int64)", fr_dtype_name(at->dtype));
    int64_t exclusive, reverse;
    FR_TRY(fr_node_attr_int(n, "exclusive", 0, &exclusive));
    FR_TRY(fr_node_attr_int(n, "reverse", 0, &reverse));
    int axis = -1; /* -1: read on the device */
    const fr_tensor *c = const_input(k->g, n, 1);
    if (c) FR_TRY(fr_norm_axis(n, fr_tensor_get_i64(c, 0), x->rank, &axis));
    if (fr_tensor_numel(x) == 0) return FR_OK;
    const int ex = exclusive != 0, rv = reverse != 0;
    switch (x->dtype) {
    case FR_F32: return cs_run<float>(k, axis, ex, rv);
    case FR_F64: return cs_run<double>(k, axis, ex, rv);
    case FR_I32: return cs_run<int32_t>(k, axis, ex, rv);
    case FR_I64: return cs_run<long long>(k, axis, ex, rv);
    default: return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    }
}

} /* namespace */

#define RED_K(NAME) {NAME, FR_DOMAIN_ONNX, red_cuda, red_scratch}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_reduce[] = {
    RED_K("ReduceSum"),
    RED_K("ReduceMean"),
    RED_K("ReduceMax"),
    RED_K("ReduceMin"),
    RED_K("ReduceProd"),
    RED_K("ReduceSumSquare"),
    RED_K("ReduceL1"),
    RED_K("ReduceL2"),
    RED_K("ReduceLogSumExp"),
    {"ArgMax", FR_DOMAIN_ONNX, arg_cuda, arg_scratch},
    {"ArgMin", FR_DOMAIN_ONNX, arg_cuda, arg_scratch},
    {"ReduceGrad", FR_DOMAIN_FP8RUN, rg_cuda, rg_scratch},
    {"SumToShape", FR_DOMAIN_FP8RUN, sum_to_cuda, sum_to_scratch},
    {"Dot", FR_DOMAIN_FP8RUN, dot_cuda, dot_scratch},
    {"CumSum", FR_DOMAIN_ONNX, cs_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
