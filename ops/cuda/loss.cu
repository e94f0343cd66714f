/* CUDA kernels of the loss head SoftmaxCrossEntropy(+Grad) (ops/loss.c; see
 * ops/cuda/cuda_kernel.h for the contract), on the rows of the softmax family (one warp or one
 * block per row, the online max and sum in double, softmax_rows.cuh).
 *
 * Per-row losses (double) go to scratch and one block sums them in a
 * fixed order, with the count of non-ignored positions; mean over those, 0 when all are
 * ignored. A label outside [0, V) (FR_ERR_RANGE on the CPU) cannot stop a kernel: it is
 * recorded in the context's device error word (fr_dev_error: FR_ERR_RANGE, the node, the
 * label, V), which the next synchronizing caller turns into an error naming the node; the
 * kernels go on with a NaN loss for that row (so the mean is NaN) and a NaN gradient row. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/softmax_rows.cuh"
#include "ops/cuda/loss_chunk.h"
#include "ops/loss.h"

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* ---------------------------------------------------------------- cross-entropy ---- */

/* scratch: [count int64 (Grad)][per-row loss doubles][per-row counted ints]; err: the
 * context's device error word */
struct CeScratch {
    int *err;
    int node;
    long long *count;
    double *loss;
    int *counted;
};

size_t ce_scratch_size(int64_t rows, CeScratch *s, void *base)
{
    size_t off = 0;
    char *b = (char *)base;
    if (s) s->count = (long long *)(b + off);
    off += kAlign;
    if (s) s->loss = (double *)(b + off);
    off += align_up((size_t)(rows ? rows : 1) * sizeof(double));
    if (s) s->counted = (int *)(b + off);
    off += align_up((size_t)(rows ? rows : 1) * sizeof(int));
    return off;
}

fr_status ce_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const int li = strcmp(n->op_type, "SoftmaxCrossEntropyGrad") == 0 ? 2 : 1;
    if (n->n_inputs <= li || n->inputs[li] < 0) return fr_node_error(n, FR_ERR_GRAPH, "labels input is missing");
    const fr_value *lb = &g->values[n->inputs[li]];
    int64_t rows = 1;
    for (int d = 0; d < lb->rank; d++) rows *= lb->dims[d];
    *bytes = ce_scratch_size(rows, nullptr, nullptr);
    return FR_OK;
}

__device__ __forceinline__ long long ld_label(const void *lb, int is64, int64_t r)
{
    return is64 ? ((const long long *)lb)[r] : (long long)((const int *)lb)[r];
}

/* V elements of a row stored as In, widened to T (exact: In is T or bfloat16 for float T) */
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
template <class T, class In, int V> __device__ __forceinline__ Vec<T, V> ld_as(const In *p, int64_t i)
{
    const Vec<In, V> q = ld_vec<In, V>(p, i);
    Vec<T, V> r;
#pragma unroll
    for (int j = 0; j < V; j++) r.v[j] = (T)widen(q.v[j]);
    return r;
}
__device__ __forceinline__ void narrow_to(__nv_bfloat16 &d, float v) { d = __float2bfloat16_rn(v); }
__device__ __forceinline__ void narrow_to(float &d, float v) { d = v; }
__device__ __forceinline__ void narrow_to(double &d, double v) { d = v; }

/* log-sum-exp of one row (G threads); every thread of the group gets it. */
template <class T, class In, int V, int G> __device__ __forceinline__ double row_lse(const In *xr, int64_t nv, int lane)
{
    MS<T> st = ms_init<T>();
    for (int64_t i = lane; i < nv; i += G) {
        const Vec<T, V> q = ld_as<T, In, V>(xr, i);
#pragma unroll
        for (int j = 0; j < V; j++) ms_add(st, q.v[j]);
    }
    st = group_allreduce<G>(st, MSComb<T>{});
    return (double)st.m + log(ms_sum(st));
}

/* per-row loss: lse(row) - row[label]; ignored rows 0 and not counted */
template <class T, class In, int V, int G>
__global__ void __launch_bounds__(G == 32 ? 256 : G) ce_rows(const In *x, const void *lb, int lb64, int64_t rows,
                                                            int64_t len, long long ignore, CeScratch sc)
{
    constexpr int RPB = G == 32 ? 256 / 32 : 1;
    const int64_t row0 = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    for (int64_t rb = row0; rb - (threadIdx.x / G) < rows; rb += (int64_t)gridDim.x * RPB) {
        const bool valid = rb < rows;
        const long long label = valid ? ld_label(lb, lb64, rb) : ignore;
        const bool bad = label != ignore && (label < 0 || label >= len);
        const bool work = valid && label != ignore && !bad;
        const In *xr = x + (work ? rb : 0) * len;
        const double lse = row_lse<T, In, V, G>(xr, work ? len / V : 0, lane);
        if (valid && lane == 0) {
            if (bad) fr_dev_error(sc.err, FR_ERR_RANGE, sc.node, label, len);
            sc.loss[rb] = work ? lse - (double)widen(xr[label]) : bad ? (double)NAN : 0.0;
            sc.counted[rb] = label != ignore;
        }
    }
}

/* one block: the mean over the counted rows, summed in a fixed order */
template <class T> __global__ void __launch_bounds__(1024) ce_mean(CeScratch sc, int64_t rows, T *out)
{
    double s = 0.0, c = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        s += sc.loss[r];
        c += (double)sc.counted[r];
    }
    s = group_allreduce<1024>(s, AddD{});
    c = group_allreduce<1024>(c, AddD{});
    if (threadIdx.x == 0) *out = (T)(c > 0 ? s / c : 0.0);
}

/* one block: the count of non-ignored rows (for the gradient's scale), and the label check */
__global__ void __launch_bounds__(1024) ce_count(const void *lb, int lb64, int64_t rows, int64_t len, long long ignore,
                                                CeScratch sc)
{
    double c = 0.0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        const long long y = ld_label(lb, lb64, r);
        if (y == ignore) continue;
        c += 1.0;
        if (y < 0 || y >= len) fr_dev_error(sc.err, FR_ERR_RANGE, sc.node, y, len);
    }
    c = group_allreduce<1024>(c, AddD{});
    if (threadIdx.x == 0) *sc.count = (long long)c;
}

/* Row rb of a grid-stride loop over rows of length len: its label and what to do with it */
struct CeRow {
    bool valid, bad, work; /* a row at all; a label outside [0, len); counted and good */
    long long label;
    int64_t off, nv;       /* its first element (0 past the end), its V-vectors (0 past the end) */
};
template <int V>
__device__ __forceinline__ CeRow ce_row(const void *lb, int lb64, int64_t rb, int64_t rows, int64_t len, long long ignore)
{
    CeRow r;
    r.valid = rb < rows;
    r.label = r.valid ? ld_label(lb, lb64, rb) : ignore;
    r.bad = r.label != ignore && (r.label < 0 || r.label >= len);
    r.work = r.valid && r.label != ignore && !r.bad;
    r.off = (r.valid ? rb : 0) * len;
    r.nv = r.valid ? len / V : 0;
    return r;
}

/* One row's dlogits (G threads, the row's nv vectors): scale * (softmax - onehot(label)) where the
 * row counts, 0 where it is ignored, NaN for a bad label */
template <class T, class In, class Out, int V, int G>
__device__ __forceinline__ void grad_row(const In *xr, int64_t nv, int lane, bool work, bool bad, double lse,
                                         double scale, long long label, Out *dr)
{
    for (int64_t i = lane; i < nv; i += G) {
        Vec<Out, V> o;
        if (work) {
            const Vec<T, V> q = ld_as<T, In, V>(xr, i);
#pragma unroll
            for (int j = 0; j < V; j++) {
                /* exp(x - lse) in T, x - lse rounded once; the T result rounded to Out. The
                 * label's p - 1 as expm1: a confident row's p near 1 in T would leave few of
                 * p - 1's digits (a [1, 5] row: -6e-5 off by 5e-4 relative in float) */
                const T d = (T)((double)q.v[j] - lse);
                const double g = i * V + j == label ? (double)expm1_t(d) : (double)exp_t(d);
                narrow_to(o.v[j], (T)(scale * g));
            }
        } else {
#pragma unroll
            for (int j = 0; j < V; j++) narrow_to(o.v[j], bad ? (T)NAN : (T)0);
        }
        st_vec<Out, V>(dr, i, o);
    }
}

/* The rows' dlogits dx = dloss / count * (softmax(row) - onehot(label)) (ignored rows 0, bad
 * labels NaN), and with LOSS each row's loss too (ce_rows' entries), from the same read of the
 * row for its lse; dx may then be NULL (the loss alone). With LOSS the label's logit is read
 * before any thread of the group writes, so dx may be x (in place). */
template <bool LOSS, class T, class In, class Out, int V, int G>
__device__ __forceinline__ void ce_grad_body(const T *dl, const In *x, const void *lb, int lb64, int64_t rows,
                                             int64_t len, long long ignore, const CeScratch &sc, Out *dx)
{
    constexpr int RPB = G == 32 ? 256 / 32 : 1;
    const int64_t row0 = (int64_t)blockIdx.x * RPB + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const long long cnt = dl ? *sc.count : 0;
    const double scale = cnt ? (double)dl[0] / (double)cnt : 0.0;
    for (int64_t rb = row0; rb - (threadIdx.x / G) < rows; rb += (int64_t)gridDim.x * RPB) {
        const CeRow w = ce_row<V>(lb, lb64, rb, rows, len, ignore);
        const double xl = LOSS && w.work && lane == 0 ? (double)widen(x[w.off + w.label]) : 0.0;
        const double lse = row_lse<T, In, V, G>(x + w.off, w.work ? w.nv : 0, lane);
        if (LOSS && w.valid && lane == 0) {
            if (w.bad) fr_dev_error(sc.err, FR_ERR_RANGE, sc.node, w.label, len);
            sc.loss[rb] = w.work ? lse - xl : w.bad ? (double)NAN : 0.0;
            sc.counted[rb] = w.label != ignore;
        }
        if (dx) grad_row<T, In, Out, V, G>(x + w.off, w.nv, lane, w.work, w.bad, lse, scale, w.label, dx + w.off);
    }
}

template <class T, class In, class Out, int V, int G>
__global__ void __launch_bounds__(G == 32 ? 256 : G) ce_grad_rows(const T *dl, const In *x, const void *lb, int lb64,
                                                                 int64_t rows, int64_t len, long long ignore,
                                                                 CeScratch sc, Out *dx)
{
    ce_grad_body<false, T, In, Out, V, G>(dl, x, lb, lb64, rows, len, ignore, sc, dx);
}

/* A chunk's rows (LinearCrossEntropy, loss_chunk.h): each row's loss (as ce_rows) and, with dl,
 * its dlogits (as ce_grad_rows), one read of the row for the lse and one for the gradient. */
template <class T, class In, class Out, int V, int G>
__global__ void __launch_bounds__(G == 32 ? 256 : G) ce_loss_grad_rows(const T *dl, const In *x, const void *lb, int lb64,
                                                                      int64_t rows, int64_t len, long long ignore,
                                                                      CeScratch sc, Out *dx)
{
    ce_grad_body<true, T, In, Out, V, G>(dl, x, lb, lb64, rows, len, ignore, sc, dx);
}

/* ---------------------------------------------------------------- long rows, float statistics ----
 * Rows longer than kSmallRow of float32 or bfloat16 logits (an LM head's vocabulary). The generic
 * rows above keep the sum of exp in double element by element: a float -> double conversion and
 * a double add per element in the statistics, several more per element in the gradient, which
 * left the loss head compute-bound at about a quarter of its memory bandwidth. Here a thread
 * takes units of 8 consecutive elements (one 16-byte load of bfloat16, two of float32: the same
 * elements per thread for both, so bfloat16 logits see float32's arithmetic exactly) and kU
 * units per trip, their loads issued together; a trip's max and its sum of exp(x - max) (at most
 * 8 kU terms) are in float, folded into the row's (max, double sum) pair in a fixed order, and
 * the gradient is exp(x - lse) * scale in float (within the 1e-5 contract: the lse rounded to
 * float moves a row's probabilities by at most about 1e-6 relative). */
constexpr int kU = 4;

/* a unit as loaded (bfloat16 stays packed until used: half the registers of its floats) */
template <class In> struct Unit;
template <> struct Unit<float> {
    float4 a, b;
};
template <> struct Unit<__nv_bfloat16> {
    uint4 q;
};
__device__ __forceinline__ Unit<float> ld_unit(const float *p, int64_t u)
{
    return Unit<float>{reinterpret_cast<const float4 *>(p)[2 * u], reinterpret_cast<const float4 *>(p)[2 * u + 1]};
}
__device__ __forceinline__ Unit<__nv_bfloat16> ld_unit(const __nv_bfloat16 *p, int64_t u)
{
    return Unit<__nv_bfloat16>{reinterpret_cast<const uint4 *>(p)[u]};
}
template <class In> __device__ __forceinline__ Unit<In> unit_fill(float v);
template <> __device__ __forceinline__ Unit<float> unit_fill<float>(float v)
{
    return Unit<float>{make_float4(v, v, v, v), make_float4(v, v, v, v)};
}
template <> __device__ __forceinline__ Unit<__nv_bfloat16> unit_fill<__nv_bfloat16>(float v)
{
    const uint32_t h = __float_as_uint(v) >> 16, w = h | h << 16; /* v exact in bf16 (-inf) */
    return Unit<__nv_bfloat16>{make_uint4(w, w, w, w)};
}
/* element j of a unit, widened exactly */
__device__ __forceinline__ float el(const Unit<float> &u, int j)
{
    const float4 &h = j < 4 ? u.a : u.b;
    const int k = j & 3;
    return k == 0 ? h.x : k == 1 ? h.y : k == 2 ? h.z : h.w;
}
__device__ __forceinline__ float el(const Unit<__nv_bfloat16> &u, int j)
{
    const uint32_t w = (j >> 1) == 0 ? u.q.x : (j >> 1) == 1 ? u.q.y : (j >> 1) == 2 ? u.q.z : u.q.w;
    return __uint_as_float(j & 1 ? w & 0xffff0000u : w << 16); /* the low half is the even element */
}
__device__ __forceinline__ void st8(float *p, int64_t u, const float (&v)[8])
{
    reinterpret_cast<float4 *>(p)[2 * u] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4 *>(p)[2 * u + 1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void st8(__nv_bfloat16 *p, int64_t u, const float (&v)[8])
{
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]); /* .x = low half */
        memcpy(&w[j], &h, 4);
    }
    reinterpret_cast<uint4 *>(p)[u] = make_uint4(w[0], w[1], w[2], w[3]);
}

/* log-sum-exp of a row of nu units (the block's G threads); every thread gets it */
template <class In, int G> __device__ __forceinline__ double row_lse_fast(const In *xr, int64_t nu, int lane)
{
    MS<float> st = ms_init<float>();
    for (int64_t i0 = lane; i0 < nu; i0 += (int64_t)G * kU) {
        Unit<In> v[kU];
#pragma unroll
        for (int u = 0; u < kU; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            v[u] = i < nu ? ld_unit(xr, i) : unit_fill<In>(-INFINITY);
        }
        float cm = -INFINITY; /* fmaxf skips NaN: the NaN reaches the sum below */
#pragma unroll
        for (int u = 0; u < kU; u++)
#pragma unroll
            for (int j = 0; j < 8; j++) cm = fmaxf(cm, el(v[u], j));
        float cs = 0.f; /* -inf terms (masked) add 0, also when the whole trip is -inf */
#pragma unroll
        for (int u = 0; u < kU; u++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float e = el(v[u], j);
                cs += e == -INFINITY ? 0.f : expf(e - cm);
            }
        st = MSComb<float>{}(st, MS<float>{cm, (double)cs});
    }
    st = group_allreduce<G>(st, MSComb<float>{});
    return (double)st.m + log(ms_sum(st));
}

/* one row's dlogits: scale * (softmax - onehot(label)); 0 where ignored, NaN for a bad label */
template <class In, class Out, int G> __device__ __forceinline__ void
grad_row_fast(const In *xr, int64_t nu, int lane, bool work, bool bad, float lse, float scale, long long label, Out *dr)
{
    for (int64_t i0 = lane; i0 < nu; i0 += (int64_t)G * kU) {
        Unit<In> v[kU];
#pragma unroll
        for (int u = 0; u < kU; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (work && i < nu) v[u] = ld_unit(xr, i);
        }
#pragma unroll
        for (int u = 0; u < kU; u++) {
            const int64_t i = i0 + (int64_t)u * G;
            if (i >= nu) break;
            float o[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (work) {
                    const float p = expf(el(v[u], j) - lse);
                    o[j] = scale * (i * 8 + j == label ? p - 1.f : p);
                } else {
                    o[j] = bad ? NAN : 0.f;
                }
            }
            st8(dr, i, o);
        }
    }
}

/* One block of kBig threads per row: with LOSS each row's loss (ce_rows' entries), with dx its
 * dlogits (ce_grad_rows'; dl, the loss's gradient, needs the count ce_count wrote). The label's
 * logit is read before the block's first barrier, so dx may be x (in place). */
template <bool LOSS, class In, class Out> __global__ void __launch_bounds__(kBig, 2)
    ce_fast_rows(const float *dl, const In *x, const void *lb, int lb64, int64_t rows, int64_t len, long long ignore,
                 CeScratch sc, Out *dx)
{
    const int lane = threadIdx.x;
    const long long cnt = dl ? *sc.count : 0;
    const float scale = cnt ? (float)((double)dl[0] / (double)cnt) : 0.f;
    for (int64_t rb = blockIdx.x; rb < rows; rb += gridDim.x) {
        const CeRow w = ce_row<8>(lb, lb64, rb, rows, len, ignore);
        const double xl = LOSS && w.work && lane == 0 ? (double)widen(x[w.off + w.label]) : 0.0;
        const double lse = row_lse_fast<In, kBig>(x + w.off, w.work ? w.nv : 0, lane);
        if (LOSS && lane == 0) {
            if (w.bad) fr_dev_error(sc.err, FR_ERR_RANGE, sc.node, w.label, len);
            sc.loss[rb] = w.work ? lse - xl : w.bad ? (double)NAN : 0.0;
            sc.counted[rb] = w.label != ignore;
        }
        if (dx)
            grad_row_fast<In, Out, kBig>(x + w.off, w.nv, lane, w.work, w.bad, (float)lse, scale, w.label, dx + w.off);
    }
}

/* the long-row path takes rows past kSmallRow of whole 16-byte units, 16-byte aligned */
bool fast_rows(int64_t len, const void *x, const void *dx)
{
    return len > kSmallRow && len % 8 == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)dx % 16) == 0;
}

template <class In, class Out>
fr_status ce_chunk_run(const fr_ce_chunk_ctx *c, const CeScratch &sc, int64_t R, const void *xv, const float *dl,
                       void *dxv)
{
    const In *x = (const In *)xv;
    Out *dx = (Out *)dxv;
    constexpr int VW = 16 / sizeof(float);
    const int64_t len = c->len;
    const bool vec = can_vec<float>(len, x, dx ? (const void *)dx : (const void *)x, x);
    const void *lb = c->labels;
    if (fast_rows(len, x, dx ? (const void *)dx : (const void *)x)) {
        ce_fast_rows<true, In, Out><<<blocks_for(R, 1), kBig, 0, c->s>>>(dl, x, lb, c->lb64, R, len, c->ignore, sc, dx);
    } else if (len <= kSmallRow) {
        const unsigned b = blocks_for(R, 8);
        if (vec) ce_loss_grad_rows<float, In, Out, VW, 32><<<b, 256, 0, c->s>>>(dl, x, lb, c->lb64, R, len, c->ignore, sc, dx);
        else ce_loss_grad_rows<float, In, Out, 1, 32><<<b, 256, 0, c->s>>>(dl, x, lb, c->lb64, R, len, c->ignore, sc, dx);
    } else {
        const unsigned b = blocks_for(R, 1);
        if (vec) ce_loss_grad_rows<float, In, Out, VW, kBig><<<b, kBig, 0, c->s>>>(dl, x, lb, c->lb64, R, len, c->ignore, sc, dx);
        else ce_loss_grad_rows<float, In, Out, 1, kBig><<<b, kBig, 0, c->s>>>(dl, x, lb, c->lb64, R, len, c->ignore, sc, dx);
    }
    return fr_cuda_check_launch(c->n, "LinearCrossEntropy(loss rows)");
}

CeScratch chunk_scratch(const fr_ce_chunk_ctx *c)
{
    CeScratch sc;
    ce_scratch_size(c->rows, &sc, c->scratch);
    sc.err = c->err;
    sc.node = c->node;
    return sc;
}

} /* namespace */

extern "C" size_t fr_cuda_ce_scratch_bytes(int64_t rows) { return ce_scratch_size(rows, nullptr, nullptr); }

extern "C" fr_status fr_cuda_ce_count(const fr_ce_chunk_ctx *c)
{
    ce_count<<<1, 1024, 0, c->s>>>(c->labels, c->lb64, c->rows, c->len, c->ignore, chunk_scratch(c));
    return fr_cuda_check_launch(c->n, "LinearCrossEntropy(count)");
}

extern "C" fr_status fr_cuda_ce_chunk(const fr_ce_chunk_ctx *c, int64_t r0, int64_t R, const void *x, int x_bf16,
                                      const float *dloss, void *dx, int dx_bf16)
{
    if (R <= 0 || r0 < 0 || r0 + R > c->rows)
        return fr_node_error(c->n, FR_ERR_INTERNAL, "chunk rows %lld..%lld outside [0, %lld)", (long long)r0,
                             (long long)(r0 + R), (long long)c->rows);
    CeScratch sc = chunk_scratch(c);
    sc.loss += r0;
    sc.counted += r0;
    fr_ce_chunk_ctx cc = *c;
    cc.labels = c->lb64 ? (const void *)((const long long *)c->labels + r0) : (const void *)((const int *)c->labels + r0);
    if (!dx) dx_bf16 = x_bf16; /* no output: the type only names the template */
    if (x_bf16)
        return dx_bf16 ? ce_chunk_run<__nv_bfloat16, __nv_bfloat16>(&cc, sc, R, x, dloss, dx)
                       : ce_chunk_run<__nv_bfloat16, float>(&cc, sc, R, x, dloss, dx);
    return dx_bf16 ? ce_chunk_run<float, __nv_bfloat16>(&cc, sc, R, x, dloss, dx)
                   : ce_chunk_run<float, float>(&cc, sc, R, x, dloss, dx);
}

extern "C" fr_status fr_cuda_ce_mean(const fr_ce_chunk_ctx *c, float *out)
{
    ce_mean<float><<<1, 1024, 0, c->s>>>(chunk_scratch(c), c->rows, out);
    return fr_cuda_check_launch(c->n, "LinearCrossEntropy(mean)");
}

namespace {

fr_status ce_check(const fr_node *n, const fr_tensor *lg, const fr_tensor *lb)
{
    if (lg->dtype != FR_F32 && lg->dtype != FR_F64 && lg->dtype != FR_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "logits must be float32/float64/bfloat16, got %s",
                             fr_dtype_name(lg->dtype));
    if (lb->dtype != FR_I64 && lb->dtype != FR_I32)
        return fr_node_error(n, FR_ERR_SHAPE, "labels must be int64 or int32, got %s", fr_dtype_name(lb->dtype));
    int ok = lg->rank >= 1 && lb->rank == lg->rank - 1;
    for (int d = 0; ok && d < lb->rank; d++) ok = lb->dims[d] == lg->dims[d];
    if (!ok) return fr_node_error(n, FR_ERR_SHAPE, "labels do not match logits (want logits' shape without the last dim)");
    return FR_OK;
}

template <class T, class In = T>
fr_status ce_fwd_run(const fr_cuda_kctx *k, const CeScratch &sc, int64_t rows, int64_t len, long long ignore)
{
    const In *x = (const In *)k->in[0]->data;
    const fr_tensor *lb = k->in[1];
    const int lb64 = lb->dtype == FR_I64;
    cudaStream_t st = k->cu->stream;
    constexpr int VW = 16 / sizeof(T); /* T's vector width for bf16 logits too: the same
                                           elements per thread, so the same sums as float32 */
    if (rows > 0) {
        const bool vec = can_vec<T>(len, x, x, x);
        bool fast = false;
        if constexpr (std::is_same<T, float>::value) {
            fast = fast_rows(len, x, x);
            if (fast)
                ce_fast_rows<true, In, In><<<blocks_for(rows, 1), kBig, 0, st>>>(nullptr, x, lb->data, lb64, rows, len,
                                                                               ignore, sc, nullptr);
        }
        if (!fast && len <= kSmallRow) {
            const unsigned b = blocks_for(rows, 8);
            if (vec) ce_rows<T, In, VW, 32><<<b, 256, 0, st>>>(x, lb->data, lb64, rows, len, ignore, sc);
            else ce_rows<T, In, 1, 32><<<b, 256, 0, st>>>(x, lb->data, lb64, rows, len, ignore, sc);
        } else if (!fast) {
            const unsigned b = blocks_for(rows, 1);
            if (vec) ce_rows<T, In, VW, kBig><<<b, kBig, 0, st>>>(x, lb->data, lb64, rows, len, ignore, sc);
            else ce_rows<T, In, 1, kBig><<<b, kBig, 0, st>>>(x, lb->data, lb64, rows, len, ignore, sc);
        }
        FR_TRY(fr_cuda_check_launch(k->node, "SoftmaxCrossEntropy(rows)"));
    }
    ce_mean<T><<<1, 1024, 0, st>>>(sc, rows, (T *)k->out[0]->data);
    return fr_cuda_check_launch(k->node, "SoftmaxCrossEntropy(mean)");
}

/* In: the logits' storage, Out: dlogits' (T or bfloat16); T's vector width throughout (bf16
   as 8-byte vectors), so every element sees the float32 path's arithmetic */
template <class T, class In = T, class Out = T>
fr_status ce_grad_run(const fr_cuda_kctx *k, const CeScratch &sc, int64_t rows, int64_t len, long long ignore)
{
    const T *dl = (const T *)k->in[0]->data;
    const In *x = (const In *)k->in[1]->data;
    const fr_tensor *lb = k->in[2];
    const int lb64 = lb->dtype == FR_I64;
    Out *dx = (Out *)k->out[0]->data;
    cudaStream_t st = k->cu->stream;
    constexpr int VW = 16 / sizeof(T);
    ce_count<<<1, 1024, 0, st>>>(lb->data, lb64, rows, len, ignore, sc);
    FR_TRY(fr_cuda_check_launch(k->node, "SoftmaxCrossEntropyGrad(count)"));
    if (len == 0) return FR_OK;
    const bool vec = can_vec<T>(len, x, dx, dx);
    if constexpr (std::is_same<T, float>::value) {
        if (fast_rows(len, x, dx)) {
            ce_fast_rows<false, In, Out>
                <<<blocks_for(rows, 1), kBig, 0, st>>>(dl, x, lb->data, lb64, rows, len, ignore, sc, dx);
            return fr_cuda_check_launch(k->node, "SoftmaxCrossEntropyGrad");
        }
    }
    if (len <= kSmallRow) {
        const unsigned b = blocks_for(rows, 8);
        if (vec) ce_grad_rows<T, In, Out, VW, 32><<<b, 256, 0, st>>>(dl, x, lb->data, lb64, rows, len, ignore, sc, dx);
        else ce_grad_rows<T, In, Out, 1, 32><<<b, 256, 0, st>>>(dl, x, lb->data, lb64, rows, len, ignore, sc, dx);
    } else {
        const unsigned b = blocks_for(rows, 1);
        if (vec) ce_grad_rows<T, In, Out, VW, kBig><<<b, kBig, 0, st>>>(dl, x, lb->data, lb64, rows, len, ignore, sc, dx);
        else ce_grad_rows<T, In, Out, 1, kBig><<<b, kBig, 0, st>>>(dl, x, lb->data, lb64, rows, len, ignore, sc, dx);
    }
    return fr_cuda_check_launch(k->node, "SoftmaxCrossEntropyGrad");
}

fr_status ce_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const int grad = strcmp(n->op_type, "SoftmaxCrossEntropyGrad") == 0;
    const int nin = grad ? 3 : 2;
    if (k->n_in != nin || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs %d inputs and one output", nin);
    for (int i = 0; i < nin; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_tensor *lg = k->in[grad ? 1 : 0], *lb = k->in[grad ? 2 : 1];
    FR_TRY(ce_check(n, lg, lb));
    const fr_dtype ct = fr_ce_dtype(lg->dtype); /* float32 for bf16 logits */
    if (grad && (k->in[0]->dtype != ct || fr_tensor_numel(k->in[0]) != 1))
        return fr_node_error(n, FR_ERR_SHAPE, "dloss must be a %s scalar", fr_dtype_name(ct));
    int dx16 = 0;
    if (grad) FR_TRY(fr_ce_dx_bf16(n, lg->dtype, &dx16));
    const fr_tensor *out = k->out[0];
    const fr_dtype want = dx16 ? FR_BF16 : ct;
    if (out->dtype != want || (grad ? fr_tensor_numel(out) != fr_tensor_numel(lg) : fr_tensor_numel(out) != 1))
        return fr_node_error(n, FR_ERR_SHAPE, "output has the wrong dtype or shape (re-run shape inference)");
    int64_t ignore;
    FR_TRY(fr_node_attr_int(n, "ignore_index", -100, &ignore));
    const int64_t rows = fr_tensor_numel(lb), len = lg->dims[lg->rank - 1];
    CeScratch sc;
    const size_t need = ce_scratch_size(rows, &sc, k->scratch);
    if (!k->scratch || k->scratch_bytes < need)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
    sc.err = k->cu->dev_error;
    sc.node = fr_node_index(k);
    if (!grad) {
        if (lg->dtype == FR_BF16) return ce_fwd_run<float, __nv_bfloat16>(k, sc, rows, len, ignore);
        return lg->dtype == FR_F32 ? ce_fwd_run<float>(k, sc, rows, len, ignore)
                                   : ce_fwd_run<double>(k, sc, rows, len, ignore);
    }
    if (rows == 0) return FR_OK;
    if (lg->dtype == FR_F64) return ce_grad_run<double>(k, sc, rows, len, ignore);
    if (lg->dtype == FR_BF16)
        return dx16 ? ce_grad_run<float, __nv_bfloat16, __nv_bfloat16>(k, sc, rows, len, ignore)
                    : ce_grad_run<float, __nv_bfloat16, float>(k, sc, rows, len, ignore);
    return dx16 ? ce_grad_run<float, float, __nv_bfloat16>(k, sc, rows, len, ignore)
                : ce_grad_run<float>(k, sc, rows, len, ignore);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_loss[] = {
    {"SoftmaxCrossEntropy", FR_DOMAIN_FP8RUN, ce_cuda, ce_scratch},
    {"SoftmaxCrossEntropyGrad", FR_DOMAIN_FP8RUN, ce_cuda, ce_scratch},
    {NULL, NULL, NULL, NULL},
};
