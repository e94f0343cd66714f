/* CUDA kernels of ops/swiglu.c: SwiGLU and SwiGLUGrad (ops/swiglu.h), both forms.
 *
 * Vector path: a thread handles V consecutive elements of a row, moved 16 bytes at a time
 * (vec16.cuh): V = 4 when every tensor is float32 (float4), V = 8 when any is bfloat16 (gate/up,
 * y, dy or the gradients: one 16-byte word of bfloat16, two float4 of float32), F a multiple
 * of V and every pointer 16-byte aligned (each vector then stays inside one row and one half
 * of gate_up). Otherwise one element per thread. The dtypes are template parameters of the
 * vector kernels and run-time flags of the element-wise ones (not hot). The activation (silu,
 * or GeGLU's gelu_tanh / gelu) is a template parameter. The sigmoid is float32 expf (float64
 * inputs: double), written so that neither s nor 1 - s cancels or overflows; results are
 * within a few ulp of the CPU's once-rounded double. Every bfloat16 output is the float32
 * result the same kernel computes, rounded to nearest even; bfloat16 inputs widen exactly,
 * so they give the bits of the float32 tensor of the same values. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/glu_act.cuh"
#include "ops/cuda/vec16.cuh"
extern "C" {
#include "ops/swiglu.h"
}

namespace {

using namespace fr_glu;

constexpr int kThreads = 256;

typedef __nv_bfloat16 bf16;

/* The problem: rows of F elements; gate (r, j) at gate[r * stride + j], up at up[r * stride + j],
 * y / dy at [r * F + j]; gradients at the gate's and up's offsets of dgate / dup. The element
 * pointers' dtypes: in (gate, up), dy and out (y or the gradients). */
struct Args {
    const void *gate, *up, *dy;
    void *y, *dgate, *dup;
    int64_t rows, F, stride;
    fr_dtype in, dyt, out;
};

/* ---- element-wise kernels: any F, any alignment; T the math (float or double) ---- */

template <typename T> __device__ __forceinline__ T ld1(const void *p, fr_dtype dt, int64_t i)
{
    if constexpr (sizeof(T) == 8) {
        return ((const double *)p)[i];
    } else {
        return dt == FR_BF16 ? __bfloat162float(((const bf16 *)p)[i]) : ((const float *)p)[i];
    }
}

template <typename T> __device__ __forceinline__ void st1(void *p, fr_dtype dt, int64_t i, T v)
{
    if constexpr (sizeof(T) == 8) {
        ((double *)p)[i] = v;
    } else {
        if (dt == FR_BF16)
            ((bf16 *)p)[i] = __float2bfloat16_rn(v);
        else
            ((float *)p)[i] = v;
    }
}

template <int ACT, typename T> __global__ void swiglu_fwd(Args a)
{
    const int64_t n = a.rows * a.F;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / a.F, o = r * a.stride + (e - r * a.F);
        st1<T>(a.y, a.out, e, fwd1<ACT>(ld1<T>(a.gate, a.in, o), ld1<T>(a.up, a.in, o)));
    }
}

template <int ACT, typename T> __global__ void swiglu_bwd(Args a)
{
    const int64_t n = a.rows * a.F;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / a.F, o = r * a.stride + (e - r * a.F);
        T dg, du;
        bwd1<ACT>(ld1<T>(a.gate, a.in, o), ld1<T>(a.up, a.in, o), ld1<T>(a.dy, a.dyt, e), dg, du);
        if (a.dgate) st1<T>(a.dgate, a.out, o, dg);
        if (a.dup) st1<T>(a.dup, a.out, o, du);
    }
}

/* ---- vector kernels (float math): TI gate/up, TD dy, TO y or the gradients ---- */

template <int ACT, int V, typename TI, typename TO> __global__ void swiglu_fwdv(Args a)
{
    const int64_t nv = a.rows * a.F / V, Fv = a.F / V, sv = a.stride / V;
    const TI *gate = (const TI *)a.gate, *up = (const TI *)a.up;
    TO *y = (TO *)a.y;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < nv; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / Fv, o = r * sv + (e - r * Fv);
        const fr_vf<V> g = fr_vld<V>(gate, o), u = fr_vld<V>(up, o);
        fr_vf<V> q;
#pragma unroll
        for (int j = 0; j < V; j++) q.v[j] = fwd1<ACT>(g.v[j], u.v[j]);
        fr_vst<V>(y, e, q);
    }
}

template <int ACT, int V, typename TI, typename TD, typename TO> __global__ void swiglu_bwdv(Args a)
{
    const int64_t nv = a.rows * a.F / V, Fv = a.F / V, sv = a.stride / V;
    const TI *gate = (const TI *)a.gate, *up = (const TI *)a.up;
    const TD *dy = (const TD *)a.dy;
    TO *dgate = (TO *)a.dgate, *dup = (TO *)a.dup;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < nv; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / Fv, o = r * sv + (e - r * Fv);
        const fr_vf<V> g = fr_vld<V>(gate, o), u = fr_vld<V>(up, o), d = fr_vld<V>(dy, e);
        fr_vf<V> dg, du;
#pragma unroll
        for (int j = 0; j < V; j++) bwd1<ACT>(g.v[j], u.v[j], d.v[j], dg.v[j], du.v[j]);
        if (dgate) fr_vst<V>(dgate, o, dg);
        if (dup) fr_vst<V>(dup, o, du);
    }
}

/* ---- launch ---- */

template <typename T> constexpr int is_bf16() { return sizeof(T) == 2; }

/* The vector kernels of one dtype combination: V 4 all float32, 8 with any bfloat16. Returns 0
 * when a.F or the pointers do not allow them. */
template <int ACT, typename TI, typename TD, typename TO> int go_vec(const Args &a, int grad, cudaStream_t s)
{
    constexpr int V = is_bf16<TI>() || is_bf16<TD>() || is_bf16<TO>() ? 8 : 4;
    const int ok = a.F % V == 0 && fr_aligned_to(a.gate, 16) && fr_aligned_to(a.up, 16) && fr_aligned_to(a.dy, 16) &&
                   fr_aligned_to(a.y, 16) && fr_aligned_to(a.dgate, 16) && fr_aligned_to(a.dup, 16);
    if (!ok) return 0;
    const unsigned blocks = fr_grid_for(a.rows * a.F / V, kThreads);
    if (grad)
        swiglu_bwdv<ACT, V, TI, TD, TO><<<blocks, kThreads, 0, s>>>(a);
    else
        swiglu_fwdv<ACT, V, TI, TO><<<blocks, kThreads, 0, s>>>(a);
    return 1;
}

/* the vector kernels for a's dtypes (float math only; the forward's dy counts as float32) */
template <int ACT> int vec_for(const Args &a, int grad, cudaStream_t s)
{
    const int i16 = a.in == FR_BF16, d16 = grad && a.dyt == FR_BF16, o16 = a.out == FR_BF16;
    switch (i16 * 4 + d16 * 2 + o16) {
    case 0: return go_vec<ACT, float, float, float>(a, grad, s);
    case 1: return go_vec<ACT, float, float, bf16>(a, grad, s);
    case 2: return go_vec<ACT, float, bf16, float>(a, grad, s);
    case 3: return go_vec<ACT, float, bf16, bf16>(a, grad, s);
    case 4: return go_vec<ACT, bf16, float, float>(a, grad, s);
    case 5: return go_vec<ACT, bf16, float, bf16>(a, grad, s);
    case 6: return go_vec<ACT, bf16, bf16, float>(a, grad, s);
    default: return go_vec<ACT, bf16, bf16, bf16>(a, grad, s);
    }
}

template <int ACT> void go(const Args &a, int grad, cudaStream_t s)
{
    const int f64 = a.in == FR_F64;
    if (!f64 && vec_for<ACT>(a, grad, s)) return;
    const unsigned blocks = fr_grid_for(a.rows * a.F, kThreads);
    if (f64 && grad)
        swiglu_bwd<ACT, double><<<blocks, kThreads, 0, s>>>(a);
    else if (f64)
        swiglu_fwd<ACT, double><<<blocks, kThreads, 0, s>>>(a);
    else if (grad)
        swiglu_bwd<ACT, float><<<blocks, kThreads, 0, s>>>(a);
    else
        swiglu_fwd<ACT, float><<<blocks, kThreads, 0, s>>>(a);
}

fr_status launch(const fr_cuda_kctx *k, const fr_swiglu_geom &geo, int grad, fr_tensor *dg, fr_tensor *du)
{
    Args a;
    memset(&a, 0, sizeof a);
    const size_t isz = fr_dtype_size(geo.in_dtype), osz = fr_dtype_size(geo.out_dtype);
    a.in = geo.in_dtype;
    a.out = geo.out_dtype;
    a.dyt = grad ? geo.dy_dtype : geo.math;
    a.gate = k->in[0]->data;
    a.up = (const char *)k->in[geo.fused ? 0 : 1]->data + geo.up_off * isz;
    a.rows = geo.rows;
    a.F = geo.F;
    a.stride = geo.in_stride;
    if (!geo.fused) { /* one flat row: no division per element */
        a.F = a.rows * a.F;
        a.stride = a.F;
        a.rows = a.F ? 1 : 0;
    }
    if (grad) {
        a.dy = k->in[k->n_in - 1]->data;
        a.dgate = dg ? dg->data : NULL;
        a.dup = du ? (char *)du->data + geo.up_off * osz : NULL;
    } else {
        a.y = k->out[0]->data;
    }
    if (a.rows * a.F == 0) return FR_OK;
    cudaStream_t s = k->cu->stream;
    if (geo.act == FR_GLU_GELU_TANH)
        go<FR_GLU_GELU_TANH>(a, grad, s);
    else if (geo.act == FR_GLU_GELU)
        go<FR_GLU_GELU>(a, grad, s);
    else
        go<FR_GLU_SILU>(a, grad, s);
    return fr_cuda_check_launch(k->node, grad ? "swiglu_bwd" : "swiglu_fwd");
}

fr_status out_shape(const fr_cuda_kctx *k, const fr_tensor *t, fr_dtype dt, int rank, const int64_t *dims, int64_t last)
{
    int64_t d[FR_MAX_RANK];
    memcpy(d, dims, sizeof(int64_t) * (size_t)rank);
    d[rank - 1] = last;
    return fr_check_out(k->node, t, dt, rank, d);
}

fr_status swiglu_cuda(const fr_cuda_kctx *k)
{
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(k->g, k->node, 0, &geo));
    const fr_tensor *x = k->in[0];
    FR_TRY(out_shape(k, k->out[0], geo.out_dtype, x->rank, x->dims, geo.F));
    return launch(k, geo, 0, NULL, NULL);
}

fr_status swiglug_cuda(const fr_cuda_kctx *k)
{
    fr_swiglu_geom geo;
    FR_TRY(fr_swiglu_geometry(k->g, k->node, 1, &geo));
    const fr_tensor *x = k->in[0];
    fr_tensor *dg = k->out[0], *du = geo.fused ? k->out[0] : (k->n_out > 1 ? k->out[1] : NULL);
    if (dg) FR_TRY(out_shape(k, dg, geo.out_dtype, x->rank, x->dims, x->dims[x->rank - 1]));
    if (du && !geo.fused) FR_TRY(out_shape(k, du, geo.out_dtype, x->rank, x->dims, x->dims[x->rank - 1]));
    if (!dg && !du) return FR_OK;
    return launch(k, geo, 1, dg, du);
}

} // namespace

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_swiglu[] = {
    {"SwiGLU", FR_DOMAIN_FP8RUN, swiglu_cuda, NULL},
    {"SwiGLUGrad", FR_DOMAIN_FP8RUN, swiglug_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
