/* The GLU activations' float math on the device (ops/swiglu.h's activation attribute), shared
 * by the SwiGLU kernels (swiglu.cu) and the quantization pass that remakes a SwiGLU's output for
 * the weight gradient (quantize.cu, ops/linear.h x_glu): one definition, so both compute the
 * same bits. The sigmoid is expf (exp for double), written so that neither s nor 1 - s cancels
 * or overflows. */
#ifndef FR_OPS_CUDA_GLU_ACT_CUH
#define FR_OPS_CUDA_GLU_ACT_CUH

#include <math.h>

#include <cuda_bf16.h>

extern "C" {
#include "ops/swiglu.h"
}

namespace fr_glu {

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

/* The SwiGLU's stored y as a float: fwd1 in float32, rounded to bfloat16 (and widened back)
 * when the SwiGLU writes bfloat16 (y_dtype), as its bfloat16 stores round */
template <int ACT> __device__ __forceinline__ float x_of(float g, float u, int y_bf16)
{
    const float x = fwd1<ACT>(g, u);
    return y_bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

} // namespace fr_glu

#endif
