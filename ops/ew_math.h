/* The elementwise op lists (ops/ew_unary.def, ops/ew_binary.def): their ids, the vocabulary
 * their columns are written in, and the scalar math they call. Included by the CPU kernels
 * (C: ops/unary.c, ops/binary.c, ops/elementwise_grad.c) and by the CUDA ones (device code:
 * ops/cuda/elementwise*.cu), so an op's math is written once for both.
 *
 * A .def expression is compiled as:
 *   EW_T     its evaluation type: double on the CPU (the CPU evaluates in double and rounds
 *            once); on CUDA a template parameter, float or double
 *   EW_C(c)  the constant c in EW_T
 *   EW_M(f)  the math function f (exp, log1p, erfc, ...) for EW_T: C's double function on the
 *            CPU, the float or double overload m_f on CUDA (no fast-math variants; a function
 *            not yet used needs its m_f pair below)
 *   helpers  ew_sigmoid, ew_gelu_erf, ... (below): written once with EW_FN, a double function
 *            on the CPU and a float/double template on CUDA
 * A column that may be absent is EW_OP(expr) or EW_NONE; EW_HAS(col) and EW_EXPR(col) take it
 * apart by token pasting, so a column must be written literally as one of the two (EW_OP,
 * EW_NONE, EW_ACT and EW_GRAD_* are deliberately never defined as macros). */
#ifndef FR_EW_MATH_H
#define FR_EW_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define EW_C(c) EW_T(c)
#define EW_M(f) m_##f
#define EW_FN template <typename EW_T> static __device__ __forceinline__ EW_T
#define EW_IFN static __device__ __forceinline__ int64_t
#define EW_IS_FLOAT (sizeof(EW_T) == sizeof(float))
#define EW_STATIC_ASSERT static_assert

#define EW_FLAG_DIV_ZERO 1u      /* integer Div/Mod by zero */
#define EW_FLAG_POW_NEG_ZERO 2u  /* integer 0 ^ negative */
#define EW_FLAG_DROPOUT_TRAIN 4u /* Dropout in training mode with ratio != 0 */

/* the error flag of ops/cuda/elementwise_util.cuh: set by any thread, read after the step */
typedef unsigned ew_flag_t;
static __device__ __forceinline__ void ew_raise(unsigned *flag, unsigned code)
{
    if (flag) atomicOr(flag, code);
}
#define EW_RAISE_DIV_ZERO(flag) ew_raise(flag, EW_FLAG_DIV_ZERO)
#define EW_RAISE_POW_NEG_ZERO(flag) ew_raise(flag, EW_FLAG_POW_NEG_ZERO)

static __device__ __forceinline__ float m_exp(float x) { return expf(x); }
static __device__ __forceinline__ double m_exp(double x) { return exp(x); }
static __device__ __forceinline__ float m_log(float x) { return logf(x); }
static __device__ __forceinline__ double m_log(double x) { return log(x); }
static __device__ __forceinline__ float m_log1p(float x) { return log1pf(x); }
static __device__ __forceinline__ double m_log1p(double x) { return log1p(x); }
static __device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
static __device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
static __device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
static __device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
static __device__ __forceinline__ float m_erf(float x) { return erff(x); }
static __device__ __forceinline__ double m_erf(double x) { return erf(x); }
static __device__ __forceinline__ float m_erfc(float x) { return erfcf(x); }
static __device__ __forceinline__ double m_erfc(double x) { return erfc(x); }
static __device__ __forceinline__ float m_sin(float x) { return sinf(x); }
static __device__ __forceinline__ double m_sin(double x) { return sin(x); }
static __device__ __forceinline__ float m_cos(float x) { return cosf(x); }
static __device__ __forceinline__ double m_cos(double x) { return cos(x); }
static __device__ __forceinline__ float m_floor(float x) { return floorf(x); }
static __device__ __forceinline__ double m_floor(double x) { return floor(x); }
static __device__ __forceinline__ float m_ceil(float x) { return ceilf(x); }
static __device__ __forceinline__ double m_ceil(double x) { return ceil(x); }
static __device__ __forceinline__ float m_fabs(float x) { return fabsf(x); }
static __device__ __forceinline__ double m_fabs(double x) { return fabs(x); }
static __device__ __forceinline__ float m_fmod(float a, float b) { return fmodf(a, b); }
static __device__ __forceinline__ double m_fmod(double a, double b) { return fmod(a, b); }
#else
#define EW_T double
#define EW_C(c) ((double)(c))
#define EW_M(f) f
#define EW_FN static inline double
#define EW_IFN static inline int64_t
#define EW_IS_FLOAT 0
#define EW_STATIC_ASSERT _Static_assert
typedef int ew_flag_t; /* the CPU's: set to 1, reported after the loop */
#define EW_RAISE_DIV_ZERO(flag) (*(flag) = 1)
#define EW_RAISE_POW_NEG_ZERO(flag) (*(flag) = 1)
#endif

/* ---- column vocabulary ---- */

#define EW_HAS(col) EW_HAS_##col
#define EW_HAS_EW_OP(e) 1
#define EW_HAS_EW_NONE 0
#define EW_EXPR(col) EW_EXPR_##col
#define EW_EXPR_EW_OP(e) (e)
#define EW_EXPR_EW_NONE 0

/* attributes an op reads (ATTRS column of ew_unary.def): EW_NO_ATTRS; EW_ALPHA(d): float
 * alpha, default d (LeakyRelu); EW_APPROX: string approximate, "none" or "tanh" (Gelu). The
 * kernels see them as bits of EW_ATTR_MASK(col) and alpha's default as EW_ALPHA_DEFAULT(col). */
#define EW_A_ALPHA 1
#define EW_A_APPROX 2
#define EW_ATTR_MASK(col) EW_ATTR_MASK_##col
#define EW_ATTR_MASK_EW_NO_ATTRS 0
#define EW_ATTR_MASK_EW_ALPHA(d) EW_A_ALPHA
#define EW_ATTR_MASK_EW_APPROX EW_A_APPROX
#define EW_ALPHA_DEFAULT(col) EW_ALPHA_DEFAULT_##col
#define EW_ALPHA_DEFAULT_EW_NO_ATTRS 0.01f /* unused: what an op without alpha is handed */
#define EW_ALPHA_DEFAULT_EW_ALPHA(d) (d)
#define EW_ALPHA_DEFAULT_EW_APPROX 0.01f

/* gradient rule of a unary op (GRAD column): EW_GRAD_NEG (dx = Neg(dy)), EW_GRAD_ZERO
 * (piecewise constant), or EW_ACT(FROM, EVAL, dx): one fused ActivationGrad node reading the
 * forward input (FROM = X) or output (Y), whose float32 CUDA kernel evaluates dx in double
 * (EVAL = DOUBLE) or in float (NATIVE; the CPU is always double). */
enum { EW_GR_NEG, EW_GR_ZERO, EW_GR_ACT };
#define EW_RULE(col) EW_RULE_##col
#define EW_RULE_EW_GRAD_NEG EW_GR_NEG
#define EW_RULE_EW_GRAD_ZERO EW_GR_ZERO
#define EW_RULE_EW_ACT(from, eval, dx) EW_GR_ACT
#define EW_READS_Y(col) EW_READS_Y_##col
#define EW_READS_Y_EW_GRAD_NEG 0
#define EW_READS_Y_EW_GRAD_ZERO 0
#define EW_READS_Y_EW_ACT(from, eval, dx) EW_FROM_##from
#define EW_FROM_X 0
#define EW_FROM_Y 1
#define EW_DX_DOUBLE(col) EW_DX_DOUBLE_##col
#define EW_DX_DOUBLE_EW_GRAD_NEG 1
#define EW_DX_DOUBLE_EW_GRAD_ZERO 1
#define EW_DX_DOUBLE_EW_ACT(from, eval, dx) EW_EVAL_##eval
#define EW_EVAL_DOUBLE 1
#define EW_EVAL_NATIVE 0
#define EW_DX(col) EW_DX_##col
#define EW_DX_EW_GRAD_NEG 0
#define EW_DX_EW_GRAD_ZERO 0
#define EW_DX_EW_ACT(from, eval, dx) (dx)

/* the attributes a unary row's Y and dx read, as the CPU kernels pass them ... */
typedef struct ew_un_params {
    double alpha;  /* EW_A_ALPHA */
    int gelu_tanh; /* EW_A_APPROX: approximate="tanh" */
} ew_un_params;
/* ... and the names Y and dx read them by, declared from an ew_un_params *p */
#define EW_UN_PARAMS(p)                                                                      \
    const double alpha = (p)->alpha;                                                         \
    const int gelu_tanh = (p)->gelu_tanh;                                                    \
    (void)alpha;                                                                             \
    (void)gelu_tanh

/* dtype classes of ew_binary.def */
#define EW_DT_F 1 /* float32, float64 */
#define EW_DT_I 2 /* int32, int64 */
#define EW_DT_B 4 /* bool */

/* gradient rules of binary ops (GRAD column of FR_BIN_OP), implemented in ops/binary.c */
enum { EW_BG_NONE, EW_BG_ADD, EW_BG_SUB, EW_BG_MUL, EW_BG_DIV, EW_BG_MEAN, EW_BG_EXTREMUM, EW_BG_FMOD };

/* ---- the ids ---- */

#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) FR_UN_##ID,
enum fr_un_id {
#include "ops/ew_unary.def"
    FR_UN_COUNT
};

#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B) FR_BM_##ID,
enum fr_bm_id {
#include "ops/ew_binary.def"
    FR_BM_COUNT
};

#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD) FR_BK_##ID,
enum fr_bk_id {
#include "ops/ew_binary.def"
    FR_BK_COUNT
};

/* per binary math row: the dtype classes it has an expression for, bool output, raises ... */
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B)                                           \
    FR_BM_DTS_##ID = (EW_HAS(F) ? EW_DT_F : 0) | (EW_HAS(I) ? EW_DT_I : 0) | (EW_HAS(B) ? EW_DT_B : 0), \
    FR_BM_OUT_BOOL_##ID = OUT_BOOL, FR_BM_RAISES_##ID = RAISES,
enum {
#include "ops/ew_binary.def"
};
/* ... and every op's dtypes have an expression in its math row */
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    EW_STATIC_ASSERT(((DTYPES) & ~FR_BM_DTS_##MATH) == 0, NAME ": a dtype without math");
#include "ops/ew_binary.def"

/* ---- scalar math the .def expressions call ---- */

EW_FN ew_sigmoid(EW_T x)
{
    /* both branches avoid exp overflow turning into inf/inf */
    if (x >= EW_C(0)) return EW_C(1) / (EW_C(1) + EW_M(exp)(-x));
    EW_T e = EW_M(exp)(x);
    return e / (EW_C(1) + e);
}

EW_FN ew_softplus(EW_T x) { return x > EW_C(0) ? x + EW_M(log1p)(EW_M(exp)(-x)) : EW_M(log1p)(EW_M(exp)(x)); }

/* 0.5 x (1 + erf(x / sqrt 2)) written with erfc so that large negative x keeps its relative
 * accuracy instead of cancelling to 0 */
EW_FN ew_gelu_erf(EW_T x) { return EW_C(0.5) * x * EW_M(erfc)(-x * EW_C(0.70710678118654752440)); }

/* 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)): the same function without the cancellation */
EW_FN ew_gelu_tanh(EW_T x)
{
    EW_T u = EW_C(0.79788456080286535588) * (x + EW_C(0.044715) * x * x * x);
    return x / (EW_C(1) + EW_M(exp)(EW_C(-2.0) * u));
}

/* c tanh(x / c): logits or scores capped smoothly at +-c (Gemma 2), and its derivative */
EW_FN ew_softcap(EW_T x, EW_T c) { return c * EW_M(tanh)(x / c); }
/* 1 - tanh^2(u) written as sech^2(u) = 4e / (1 + e)^2 with e = exp(-2|u|): 1 - t t cancels
 * where |t| nears 1, so GPU and CPU tanh differing by an ulp differed there by 1e-10 */
EW_FN ew_softcap_deriv(EW_T x, EW_T c)
{
    const EW_T u = x / c, e = EW_M(exp)(EW_C(-2.0) * (u < EW_C(0) ? -u : u));
    return EW_C(4) * e / ((EW_C(1) + e) * (EW_C(1) + e));
}

EW_FN ew_sign(EW_T x) { return x > EW_C(0) ? EW_C(1) : x < EW_C(0) ? EW_C(-1) : x; /* keeps 0, -0, NaN */ }

EW_FN ew_sgn0(EW_T x) { return x > EW_C(0) ? EW_C(1) : x < EW_C(0) ? EW_C(-1) : EW_C(0); /* 0 for 0, NaN */ }

/* d/dx [x Phi(x)] = Phi(x) + x phi(x); Phi through erfc keeps precision for x << 0 */
EW_FN ew_gelu_erf_deriv(EW_T x)
{
    return EW_C(0.5) * EW_M(erfc)(-x * EW_C(0.70710678118654752440)) +
           x * EW_C(0.39894228040143267794) * EW_M(exp)(EW_C(-0.5) * x * x);
}

/* gelu = x s with s = sigmoid(2u), u = k (x + c x^3):
 * d/dx = s + x * 2 s (1 - s) * k (1 + 3 c x^2)   (0.5 (1 + tanh u) = s, 1 - tanh^2 u = 4 s (1-s)) */
EW_FN ew_gelu_tanh_deriv(EW_T x)
{
    const EW_T k = EW_C(0.79788456080286535588), c = EW_C(0.044715);
    EW_T u = k * (x + c * x * x * x);
    EW_T s = ew_sigmoid(EW_C(2.0) * u), sm = ew_sigmoid(EW_C(-2.0) * u);
    /* float: for |x| > ~1e19 the last factor overflows where double does not; the product
     * is 0 there (s (1 - s) == 0) for any finite x, as in double */
    if (EW_IS_FLOAT && s * sm == EW_C(0) && isfinite(x)) return s;
    return s + x * EW_C(2.0) * s * sm * k * (EW_C(1.0) + EW_C(3.0) * c * x * x);
}

/* Truncating integer division; INT_MIN / -1 wraps (computed in int64 for int32, whose result
 * then wraps on the narrowing store). A zero divisor gives 0 and raises the flag. */
EW_IFN ew_idiv(int64_t a, int64_t b, ew_flag_t *bad)
{
    if (b == 0) {
        EW_RAISE_DIV_ZERO(bad);
        return 0;
    }
    if (b == -1) return (int64_t)((uint64_t)0 - (uint64_t)a);
    return a / b;
}

/* Remainder: sign of the dividend (C, floor_mode 0) or of the divisor (Python, 1). */
EW_IFN ew_irem(int64_t a, int64_t b, int floor_mode, ew_flag_t *bad)
{
    if (b == 0) {
        EW_RAISE_DIV_ZERO(bad);
        return 0;
    }
    if (b == -1) return 0;
    int64_t r = a % b;
    if (floor_mode && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

/* Integer power, exact with wrapping. A negative exponent gives the truncated 1 / a^|e| (so 0
 * unless a is +-1); 0 to a negative power gives 0 and raises the flag. */
EW_IFN ew_ipow(int64_t a, int64_t e, ew_flag_t *bad)
{
    if (e < 0) {
        if (a == 0) EW_RAISE_POW_NEG_ZERO(bad);
        if (a == 1) return 1;
        if (a == -1) return (e & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, base = (uint64_t)a;
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return (int64_t)r;
}

#endif
