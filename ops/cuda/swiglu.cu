/* CUDA kernels of ops/swiglu.c: SwiGLU and SwiGLUGrad (ops/swiglu.h), both forms.
 *
 * One thread handles 4 consecutive elements of a row with 16-byte loads and stores (float32,
 * F a multiple of 4, every pointer 16-byte aligned: each group of 4 then stays inside one row
 * and one half of gate_up; bfloat16 gate/up: 8-byte loads); otherwise one element per thread. The activation (silu, or
 * GeGLU's gelu_tanh / gelu) is a template parameter. The sigmoid is float32 expf
 * (float64 inputs: double), written so that neither s nor 1 - s cancels or overflows; results
 * are within a few ulp of the CPU's once-rounded double. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
extern "C" {
#include "ops/swiglu.h"
}

namespace {

constexpr int kThreads = 256;

/* s = sigmoid(g), oms = 1 - s */
__device__ __forceinline__ void sig_pair(float g, float &s, float &oms)
{
    float e = expf(-fabsf(g));
    float a = 1.0f / (1.0f + e); /* sigmoid(|g|) */
    float b = e * a;             /* 1 - sigmoid(|g|) */
    s = g >= 0.0f ? a : b;
    oms = g >= 0.0f ? b : a;
}
__device__ __forceinline__ void sig_pair(double g, double &s, double &oms)
{
    double e = exp(-fabs(g));
    double a = 1.0 / (1.0 + e);
    double b = e * a;
    s = g >= 0.0 ? a : b;
    oms = g >= 0.0 ? b : a;
}

__device__ __forceinline__ float m_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ double m_erfc(double x) { return erfc(x); }

/* a = act(g) and da = act'(g) of the activation ACT (FR_GLU_*, ops/swiglu.h) */
template <int ACT, typename T> __device__ __forceinline__ void act_pair(T g, T &a, T &da)
{
    if (ACT == FR_GLU_GELU) {
        const T phi = T(0.5) * m_erfc(-g * T(0.70710678118654752440));
        a = g * phi;
        da = phi + g * exp(T(-0.5) * g * g) * T(0.39894228040143267794);
        return;
    }
    const T k = T(0.79788456080286535588), c = T(0.044715);
    T s, oms;
    sig_pair(ACT == FR_GLU_GELU_TANH ? T(2) * k * (g + c * g * g * g) : g, s, oms);
    a = g * s;
    da = ACT == FR_GLU_GELU_TANH ? s + g * T(2) * s * oms * k * (T(1) + T(3) * c * g * g) : s * fma(g, oms, T(1));
}

template <int ACT, typename T> __device__ __forceinline__ T fwd1(T g, T u)
{
    T a, da;
    act_pair<ACT>(g, a, da);
    return a * u;
}

template <int ACT, typename T> __device__ __forceinline__ void bwd1(T g, T u, T dy, T &dg, T &du)
{
    T a, da;
    act_pair<ACT>(g, a, da);
    du = dy * a;
    dg = dy * u * da;
}

/* The problem: rows of F elements; gate (r, j) at gate[r * stride + j], up at up[r * stride + j],
 * y / dy at [r * F + j]; gradients at the gate's and up's offsets of dgate / dup. TI: gate/up's
 * storage (T, or __nv_bfloat16 widened to float), T: the math, y, dy and the gradients. */
template <typename TI, typename T> struct Args {
    const TI *gate, *up;
    const T *dy;
    T *y, *dgate, *dup;
    int64_t rows, F, stride;
};

__device__ __forceinline__ float wide(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float wide(float v) { return v; }
__device__ __forceinline__ double wide(double v) { return v; }

/* 4 consecutive inputs (16-byte float4 or 8-byte bf16 x 4 loads) as a float4 */
__device__ __forceinline__ float4 load4(const float *p, int64_t i4) { return ((const float4 *)p)[i4]; }
__device__ __forceinline__ float4 load4(const __nv_bfloat16 *p, int64_t i4)
{
    const uint2 v = ((const uint2 *)p)[i4];
    const __nv_bfloat162 a = *(const __nv_bfloat162 *)&v.x, b = *(const __nv_bfloat162 *)&v.y;
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    return make_float4(fa.x, fa.y, fb.x, fb.y);
}

template <int ACT, typename TI, typename T> __global__ void swiglu_fwd(Args<TI, T> a)
{
    const int64_t n = a.rows * a.F;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / a.F, o = r * a.stride + (e - r * a.F);
        a.y[e] = fwd1<ACT>((T)wide(a.gate[o]), (T)wide(a.up[o]));
    }
}

template <int ACT, typename TI> __global__ void swiglu_fwd4(Args<TI, float> a)
{
    const int64_t n4 = a.rows * a.F / 4, F4 = a.F / 4, s4 = a.stride / 4;
    float4 *y4 = (float4 *)a.y;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n4; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / F4, o = r * s4 + (e - r * F4);
        const float4 g = load4(a.gate, o), u = load4(a.up, o);
        y4[e] = make_float4(fwd1<ACT>(g.x, u.x), fwd1<ACT>(g.y, u.y), fwd1<ACT>(g.z, u.z), fwd1<ACT>(g.w, u.w));
    }
}

template <int ACT, typename TI, typename T> __global__ void swiglu_bwd(Args<TI, T> a)
{
    const int64_t n = a.rows * a.F;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / a.F, o = r * a.stride + (e - r * a.F);
        T dg, du;
        bwd1<ACT>((T)wide(a.gate[o]), (T)wide(a.up[o]), a.dy[e], dg, du);
        if (a.dgate) a.dgate[o] = dg;
        if (a.dup) a.dup[o] = du;
    }
}

template <int ACT, typename TI> __global__ void swiglu_bwd4(Args<TI, float> a)
{
    const int64_t n4 = a.rows * a.F / 4, F4 = a.F / 4, s4 = a.stride / 4;
    const float4 *dy4 = (const float4 *)a.dy;
    float4 *dg4 = (float4 *)a.dgate, *du4 = (float4 *)a.dup;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n4; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / F4, o = r * s4 + (e - r * F4);
        const float4 g = load4(a.gate, o), u = load4(a.up, o), d = dy4[e];
        float4 dg, du;
        bwd1<ACT>(g.x, u.x, d.x, dg.x, du.x);
        bwd1<ACT>(g.y, u.y, d.y, dg.y, du.y);
        bwd1<ACT>(g.z, u.z, d.z, dg.z, du.z);
        bwd1<ACT>(g.w, u.w, d.w, dg.w, du.w);
        if (dg4) dg4[o] = dg;
        if (du4) du4[o] = du;
    }
}

int aligned(const void *p, unsigned bytes) { return p == NULL || ((uintptr_t)p & (bytes - 1u)) == 0; }

/* The vectorized kernels exist for float math only (float32 or bfloat16 inputs). */
template <int ACT, typename TI, typename T> struct Vec {
    static void fwd(const Args<TI, T> &, unsigned, cudaStream_t) {}
    static void bwd(const Args<TI, T> &, unsigned, cudaStream_t) {}
};
template <int ACT, typename TI> struct Vec<ACT, TI, float> {
    static void fwd(const Args<TI, float> &a, unsigned b, cudaStream_t s) { swiglu_fwd4<ACT, TI><<<b, kThreads, 0, s>>>(a); }
    static void bwd(const Args<TI, float> &a, unsigned b, cudaStream_t s) { swiglu_bwd4<ACT, TI><<<b, kThreads, 0, s>>>(a); }
};

/* The four kernels of activation ACT. */
template <int ACT, typename TI, typename T> void go(const Args<TI, T> &a, int vec, int grad, unsigned blocks, cudaStream_t s)
{
    if (vec && grad)
        Vec<ACT, TI, T>::bwd(a, blocks, s);
    else if (vec)
        Vec<ACT, TI, T>::fwd(a, blocks, s);
    else if (grad)
        swiglu_bwd<ACT, TI, T><<<blocks, kThreads, 0, s>>>(a);
    else
        swiglu_fwd<ACT, TI, T><<<blocks, kThreads, 0, s>>>(a);
}

template <typename TI, typename T>
fr_status launch(const fr_cuda_kctx *k, const fr_swiglu_geom &geo, int grad, fr_tensor *dg, fr_tensor *du)
{
    Args<TI, T> a;
    memset(&a, 0, sizeof a);
    a.gate = (const TI *)k->in[0]->data;
    a.up = (const TI *)k->in[geo.fused ? 0 : 1]->data + geo.up_off;
    a.rows = geo.rows;
    a.F = geo.F;
    a.stride = geo.in_stride;
    if (!geo.fused) { /* one flat row: no division per element */
        a.F = a.rows * a.F;
        a.stride = a.F;
        a.rows = a.F ? 1 : 0;
    }
    if (grad) {
        a.dy = (const T *)k->in[k->n_in - 1]->data;
        a.dgate = dg ? (T *)dg->data : NULL;
        a.dup = du ? (T *)du->data + geo.up_off : NULL;
    } else {
        a.y = (T *)k->out[0]->data;
    }
    const int64_t n = a.rows * a.F;
    if (n == 0) return FR_OK;
    const unsigned in_align = 4 * sizeof(TI); /* 4 inputs per load */
    const int vec = sizeof(T) == 4 && a.F % 4 == 0 && aligned(a.gate, in_align) && aligned(a.up, in_align) &&
                    aligned(a.dy, 16) && aligned(a.y, 16) && aligned(a.dgate, 16) && aligned(a.dup, 16);
    const unsigned blocks = fr_grid_for(vec ? n / 4 : n, kThreads);
    cudaStream_t s = k->cu->stream;
    if (geo.act == FR_GLU_GELU_TANH)
        go<FR_GLU_GELU_TANH, TI, T>(a, vec, grad, blocks, s);
    else if (geo.act == FR_GLU_GELU)
        go<FR_GLU_GELU, TI, T>(a, vec, grad, blocks, s);
    else
        go<FR_GLU_SILU, TI, T>(a, vec, grad, blocks, s);
    return fr_cuda_check_launch(k->node, grad ? "swiglu_bwd" : "swiglu_fwd");
}

/* gate/up's dtype picks the kernels: float32, bfloat16 (float math) or float64 */
fr_status launch_for(const fr_cuda_kctx *k, const fr_swiglu_geom &geo, int grad, fr_tensor *dg, fr_tensor *du)
{
    fr_dtype dt = k->in[0]->dtype;
    if (dt == FR_F32) return launch<float, float>(k, geo, grad, dg, du);
    if (dt == FR_BF16) return launch<__nv_bfloat16, float>(k, geo, grad, dg, du);
    return launch<double, double>(k, geo, grad, dg, du);
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
    return launch_for(k, geo, 0, NULL, NULL);
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
    return launch_for(k, geo, 1, dg, du);
}

} // namespace

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_swiglu[] = {
    {"SwiGLU", FR_DOMAIN_FP8RUN, swiglu_cuda, NULL},
    {"SwiGLUGrad", FR_DOMAIN_FP8RUN, swiglug_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
