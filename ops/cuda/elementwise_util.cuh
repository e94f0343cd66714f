/* Private machinery of the CUDA elementwise family (ops/cuda/elementwise*.cu): launch sizes,
 * numpy-broadcast geometry, the device error flag, and bit-exact ports of the CPU's float16 /
 * bfloat16 conversions (graph/tensor.c; the fp8 ones are graph/fp8_format.h's own, which
 * compiles them as device functions too).
 *
 * Broadcast geometry (EwGeom) is the CUDA side of ops/elementwise_util.c: the output's index
 * space with size-1 dims dropped and adjacent dims merged where every operand stays linear.
 * When every input is either dense in the output's layout or a single repeated element, a
 * kernel indexes it with i or 0 ("flat"); otherwise it unravels i over the collapsed dims
 * (row and column broadcasts collapse to two dims: one division), with multiply-shift
 * divisions when the output has fewer than 2^31 elements, int64 '/' beyond.
 *
 * Error flag: integer division by zero, 0 to a negative integer power and training-mode
 * Dropout are errors on the CPU (FR_ERR_RANGE / FR_ERR_UNSUPPORTED, found while computing).
 * A kernel cannot return a status without synchronizing, so the node's scratch holds one
 * uint32 word, cleared on the stream before the kernel and set to a nonzero EW_FLAG_* code by
 * any thread that meets such an element (its result element is 0); run() returns FR_OK. The
 * executor may read word 0 of the node's scratch after the step to report it. */
#ifndef FR_CUDA_ELEMENTWISE_UTIL_CUH
#define FR_CUDA_ELEMENTWISE_UTIL_CUH

#include <stdint.h>
#include <string.h>

#include "graph/fp8_format.h" /* the fp8 conversions, device functions here */
#include "ops/cuda/cuda_kernel.h"
#include "ops/ew_math.h" /* the op lists, the scalar math, EW_FLAG_* and ew_raise */

#define EW_THREADS 256
#define EW_MAX_IN 4 /* inputs of one broadcast kernel (Where, PowGrad, FmodGrad have 3) */

#define EW_FLAG_BYTES 16 /* scratch bytes of nodes that may set the flag (codes: ew_math.h) */

/* Blocks for n elements with grid-stride loops: enough to fill the device, never 0 for n > 0. */
static inline unsigned ew_blocks(const fr_cuda_kctx *k, int64_t n)
{
    int64_t want = (n + EW_THREADS - 1) / EW_THREADS;
    int64_t cap = (int64_t)(k->cu->sm_count > 0 ? k->cu->sm_count : 132) * 8;
    if (want > cap) want = cap;
    return (unsigned)(want < 1 ? 1 : want);
}

/* The flag word in scratch (NULL when the node has none), cleared on the stream. */
FR_NODISCARD fr_status ew_flag_begin(const fr_cuda_kctx *k, unsigned **flag);

/* ---- broadcast geometry ---- */

struct EwGeom {
    int64_t n;                            /* output elements */
    int rank;                             /* collapsed rank, >= 1 */
    int general;                          /* 1: some input needs unravelling */
    int64_t dims[FR_MAX_RANK];            /* collapsed dims */
    int64_t st[EW_MAX_IN][FR_MAX_RANK];   /* element strides of each input over them */
    int64_t step[EW_MAX_IN];              /* 1: dense (offset i); else 0 (flat mode: element 0) */
    uint32_t mul[FR_MAX_RANK];            /* fast division by dims[d] (n < 2^31) */
    int shr[FR_MAX_RANK];
};

/* Division by a fixed divisor through a multiply-high and a shift (the round-up method, as
 * CUTLASS's FastDivmod): exact for dividends below 2^31, checked on the host against '/'
 * for divisors up to 2^31 - 1. d == 1 is mul == 0. */
static inline void ew_fastdiv_init(int64_t d, uint32_t *mul, int *shr)
{
    *mul = 0;
    *shr = 0;
    if (d <= 1 || d > INT32_MAX) return;
    int l = 0;
    while (((int64_t)1 << l) < d) l++;
    *mul = (uint32_t)((((uint64_t)1 << (31 + l)) + (uint64_t)d - 1) / (uint64_t)d);
    *shr = l - 1;
}

__device__ __forceinline__ uint32_t ew_fastdiv(uint32_t n, uint32_t mul, int shr)
{
    return mul ? __umulhi(n, mul) >> shr : n;
}

/* Geometry of n_in inputs broadcast to `out` (dense). A shape that does not broadcast is
 * FR_ERR_SHAPE naming the node. */
FR_NODISCARD fr_status ew_geom(const fr_node *node, const fr_tensor *out, int n_in, const fr_tensor *const *in,
                  EwGeom *g);

/* Geometry of any number of operands (ExtremumGrad): collapsed dims and per-operand strides
 * written to dims[] and st[k * FR_MAX_RANK + d]. */
FR_NODISCARD fr_status ew_geom_many(const fr_node *node, const fr_tensor *out, int n_in, const fr_tensor *const *in,
                       int *rank, int64_t *dims, int64_t *st);

template <int NIN>
__device__ __forceinline__ void ew_offsets(const EwGeom &g, int64_t i, int64_t (&off)[NIN])
{
    if (!g.general) {
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] = g.step[k] ? i : 0;
        return;
    }
#pragma unroll
    for (int k = 0; k < NIN; k++) off[k] = 0;
    if (g.n <= (int64_t)INT32_MAX) { /* every input is smaller: 32-bit offsets */
        uint32_t r = (uint32_t)i, o[NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) o[k] = 0;
        for (int d = g.rank - 1; d > 0; d--) {
            uint32_t q = ew_fastdiv(r, g.mul[d], g.shr[d]), c = r - q * (uint32_t)g.dims[d];
            r = q;
#pragma unroll
            for (int k = 0; k < NIN; k++)
                if (!g.step[k]) o[k] += c * (uint32_t)g.st[k][d];
        }
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] = g.step[k] ? i : (int64_t)(o[k] + r * (uint32_t)g.st[k][0]);
    } else {
        int64_t r = i;
        for (int d = g.rank - 1; d > 0; d--) {
            int64_t q = r / g.dims[d], c = r - q * g.dims[d];
            r = q;
#pragma unroll
            for (int k = 0; k < NIN; k++) off[k] += c * g.st[k][d];
        }
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] += r * g.st[k][0];
    }
}

/* One kernel for every broadcast op: f(i, off) computes output element i from input
 * elements off[0..NIN). */
template <int NIN, typename F>
__global__ void ew_bcast_kernel(EwGeom g, F f)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += stride) {
        int64_t off[NIN];
        ew_offsets<NIN>(g, i, off);
        f(i, off);
    }
}

/* Same-shape elementwise kernel: f(i). */
template <typename F>
__global__ void ew_flat_kernel(int64_t n, F f)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <int NIN, typename F>
static FR_NODISCARD fr_status ew_launch_bcast(const fr_cuda_kctx *k, const EwGeom &g, const F &f, const char *name)
{
    if (g.n == 0) return FR_OK;
    ew_bcast_kernel<NIN, F><<<ew_blocks(k, g.n), EW_THREADS, 0, k->cu->stream>>>(g, f);
    return fr_cuda_check_launch(k->node, name);
}

template <typename F>
static FR_NODISCARD fr_status ew_launch_flat(const fr_cuda_kctx *k, int64_t n, const F &f, const char *name)
{
    if (n == 0) return FR_OK;
    ew_flat_kernel<F><<<ew_blocks(k, n), EW_THREADS, 0, k->cu->stream>>>(n, f);
    return fr_cuda_check_launch(k->node, name);
}

/* ---- same-shape float32 ops with 16-byte accesses ---- */

/* The flat kernel reads one float per thread and iteration: at full occupancy that leaves
 * ~8 KB in flight per multiprocessor, far below what an H100 / H200 needs to stream at its
 * memory speed (GELU and its gradient over [16384, 8192] ran at ~55-60%). Here each thread
 * loads two float4 of every input before computing (32 bytes per input in flight), and
 * f(in[NIN]) -> float is the same per-element function as the scalar kernel's, so the results
 * are the same bits. Pointers must be 16-byte aligned (ew_vec4_ok); the last n % 4 elements
 * are done one by one. Plain loads, no __restrict__: the output may be an input's buffer (each
 * element is read before it is written, by the same thread). */
template <int NIN> struct EwVecIn {
    const float *p[NIN];
};

template <int NIN, typename F>
__global__ void __launch_bounds__(EW_THREADS) ew_vec4_kernel(int64_t n, EwVecIn<NIN> in, float *out, F f)
{
    const int64_t nv = n / 4, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + stride < nv; i += 2 * stride) {
        float4 x[2][NIN];
#pragma unroll
        for (int u = 0; u < 2; u++)
#pragma unroll
            for (int k = 0; k < NIN; k++) x[u][k] = reinterpret_cast<const float4 *>(in.p[k])[i + u * stride];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            float a[4][NIN];
#pragma unroll
            for (int k = 0; k < NIN; k++) {
                a[0][k] = x[u][k].x;
                a[1][k] = x[u][k].y;
                a[2][k] = x[u][k].z;
                a[3][k] = x[u][k].w;
            }
            reinterpret_cast<float4 *>(out)[i + u * stride] = make_float4(f(a[0]), f(a[1]), f(a[2]), f(a[3]));
        }
    }
    for (; i < nv; i += stride) {
        float a[4][NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) {
            const float4 x = reinterpret_cast<const float4 *>(in.p[k])[i];
            a[0][k] = x.x;
            a[1][k] = x.y;
            a[2][k] = x.z;
            a[3][k] = x.w;
        }
        reinterpret_cast<float4 *>(out)[i] = make_float4(f(a[0]), f(a[1]), f(a[2]), f(a[3]));
    }
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n - nv * 4) { /* the tail: at most 3 elements */
        const int64_t e = nv * 4 + t;
        float a[NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) a[k] = in.p[k][e];
        out[e] = f(a);
    }
}

template <int NIN> static inline int ew_vec4_ok(const EwVecIn<NIN> &in, const float *out)
{
    int ok = (uintptr_t)out % 16 == 0;
    for (int k = 0; k < NIN; k++) ok = ok && (uintptr_t)in.p[k] % 16 == 0;
    return ok;
}

/* Blocks for the vector kernel: enough to fill the device (as ew_blocks), in float4 units. */
template <int NIN, typename F>
static FR_NODISCARD fr_status ew_launch_vec4(const fr_cuda_kctx *k, int64_t n, const EwVecIn<NIN> &in, float *out,
                                             const F &f, const char *name)
{
    if (n == 0) return FR_OK;
    ew_vec4_kernel<NIN, F><<<ew_blocks(k, (n + 3) / 4), EW_THREADS, 0, k->cu->stream>>>(n, in, out, f);
    return fr_cuda_check_launch(k->node, name);
}

/* ---- number formats, bit for bit as the CPU (graph/tensor.c) ---- */

__device__ __forceinline__ float ew_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return __uint_as_float(bits);
}

__device__ __forceinline__ uint16_t ew_f32_to_f16(float f)
{
    uint32_t x = __float_as_uint(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (payload kept, quieted) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? (uint16_t)(0x200u | ((ax >> 13) & 0x3ffu)) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        if (ax < 0x33000000u) return sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((ax >> 13) - ((127 - 15) << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

__device__ __forceinline__ float ew_bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ __forceinline__ uint16_t ew_f32_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* float <-> double as x86 SSE converts them, NaN payloads included (the CPU's Cast carries
 * floats in double; a NaN's payload shows in a float16 result). */
__device__ __forceinline__ double ew_f2d(float f)
{
    if (f != f) {
        uint32_t u = __float_as_uint(f);
        uint64_t d = ((uint64_t)(u & 0x80000000u) << 32) | 0x7FF8000000000000ull | ((uint64_t)(u & 0x3FFFFFu) << 29);
        return __longlong_as_double((long long)d);
    }
    return (double)f;
}

__device__ __forceinline__ float ew_d2f(double d)
{
    if (d != d) {
        uint64_t u = (uint64_t)__double_as_longlong(d);
        return __uint_as_float((uint32_t)((u >> 32) & 0x80000000u) | 0x7FC00000u | (uint32_t)((u >> 29) & 0x3FFFFFu));
    }
    return (float)d;
}

/* ---- the family's run() / scratch() entry points (elementwise_*.cu) ---- */

FR_NODISCARD fr_status ew_unary_run(const fr_cuda_kctx *k);    /* Neg .. Sign */
FR_NODISCARD fr_status ew_pred_run(const fr_cuda_kctx *k);     /* IsNaN, IsInf, Not */
FR_NODISCARD fr_status ew_cast_run(const fr_cuda_kctx *k);     /* Cast, CastLike */
FR_NODISCARD fr_status ew_clip_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_identity_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_dropout_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_binary_run(const fr_cuda_kctx *k);   /* Add .. Xor, variadic Max/Min/Sum/Mean */
FR_NODISCARD fr_status ew_pow_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_where_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_expand_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_activation_grad_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_pow_grad_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_fmod_grad_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_extremum_grad_run(const fr_cuda_kctx *k);
FR_NODISCARD fr_status ew_clip_grad_run(const fr_cuda_kctx *k);

FR_NODISCARD fr_status ew_flag_scratch(const fr_graph *g, const fr_node *n, size_t *bytes);
FR_NODISCARD fr_status ew_extremum_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes);
FR_NODISCARD fr_status ew_clip_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes);

#endif
