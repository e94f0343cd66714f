/* CUDA kernels of ops/unary.c: unary math (generated from ops/ew_unary.def), IsNaN/IsInf/Not, Cast/CastLike, Clip, Identity,
 * Dropout (inference semantics).
 *
 * Float32 math uses the float functions of CUDA's math library (expf, erfcf, ...) with the
 * CPU's formulas (the CPU evaluates them in double and rounds once; the float functions are
 * within a few ulp, far inside the 1e-5 tolerance); float64 uses the double functions. Ops
 * that are exact in float (Neg, Abs, Relu, LeakyRelu, Floor, Ceil, Sign, Sqrt) give the CPU's
 * bits. Integer ops wrap as the CPU does. Cast is a port of the CPU's carrier scheme, bit for
 * bit (round-to-odd before float16/bfloat16/fp8 rounding, saturating float->int, NaN -> 0,
 * NaN payloads kept as x86 keeps them). */
#include <cuda_bf16.h>
#include <type_traits>

#include "ops/cuda/elementwise_lowp.cuh"
#include "ops/cuda/elementwise_util.cuh"

namespace {

/* ---- unary math: generated from the rows of ops/ew_unary.def ---- */

struct UnKind {
    const char *op;
    int code;  /* FR_UN_* */
    int ints;  /* int32/int64 supported too */
    int attrs; /* EW_A_* */
    float alpha_default;
};

const UnKind un_kinds[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) {NAME, FR_UN_##ID, EW_HAS(YINT), EW_ATTR_MASK(ATTRS), EW_ALPHA_DEFAULT(ATTRS)},
#include "ops/ew_unary.def"
};
static_assert(sizeof un_kinds / sizeof un_kinds[0] == FR_UN_COUNT, "one kind per ew_unary.def row");

constexpr int un_ints[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_HAS(YINT),
#include "ops/ew_unary.def"
};
constexpr int un_attrs[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_ATTR_MASK(ATTRS),
#include "ops/ew_unary.def"
};

/* float32/float64: the row's Y in the tensor's type. GT is Gelu's approximate="tanh" as a
 * template parameter, so each variant is a kernel of its own. */
template <int OP, int GT, typename EW_T>
__device__ __forceinline__ EW_T un_float(EW_T v, float alpha)
{
    constexpr int gelu_tanh = GT;
    (void)gelu_tanh;
    (void)alpha;
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    if constexpr (OP == FR_UN_##ID) return (EW_T)(Y);                                        \
    else
#include "ops/ew_unary.def"
        return v;
}

/* int32/int64: the row's YINT (UT: the unsigned type, so negation of INT_MIN wraps) */
template <int OP, typename T>
__device__ __forceinline__ T un_int(T v)
{
    typedef typename std::make_unsigned<T>::type UT;
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    if constexpr (OP == FR_UN_##ID) return (T)(EW_EXPR(YINT));                               \
    else
#include "ops/ew_unary.def"
        return (T)(UT)v;
}

template <int OP, int GT, typename T>
struct UnF {
    const T *x;
    T *y;
    float alpha;
    __device__ void operator()(int64_t i) const
    {
        if constexpr (std::is_floating_point<T>::value)
            y[i] = un_float<OP, GT, T>(x[i], alpha);
        else
            y[i] = un_int<OP, T>(x[i]);
    }
};

/* float32 element function of the vector kernel: the scalar kernel's un_float */
template <int OP, int GT> struct UnV {
    float alpha;
    __device__ float operator()(const float *a) const { return un_float<OP, GT, float>(a[0], alpha); }
};

template <int OP, int GT, typename T>
fr_status un_launch(const fr_cuda_kctx *k, int64_t n, float alpha)
{
    if constexpr (std::is_same<T, float>::value) {
        const EwVecIn<1> in{{(const float *)k->in[0]->data}};
        float *y = (float *)k->out[0]->data;
        if (ew_vec4_ok(in, y)) return ew_launch_vec4(k, n, in, y, UnV<OP, GT>{alpha}, "elementwise unary");
    }
    UnF<OP, GT, T> f{(const T *)k->in[0]->data, (T *)k->out[0]->data, alpha};
    return ew_launch_flat(k, n, f, "elementwise unary");
}

template <int OP, int GT>
fr_status un_dispatch_t(const fr_cuda_kctx *k, fr_dtype dt, int64_t n, float alpha)
{
    if constexpr (un_ints[OP] != 0) {
        if (dt == FR_I32) return un_launch<OP, GT, int32_t>(k, n, alpha);
        if (dt == FR_I64) return un_launch<OP, GT, int64_t>(k, n, alpha);
    }
    if (dt == FR_F32) return un_launch<OP, GT, float>(k, n, alpha);
    if (dt == FR_F64) return un_launch<OP, GT, double>(k, n, alpha);
    return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(dt));
}

template <int OP>
fr_status un_dispatch(const fr_cuda_kctx *k, fr_dtype dt, int64_t n, float alpha, int gelu_tanh)
{
    if constexpr ((un_attrs[OP] & EW_A_APPROX) != 0)
        if (gelu_tanh) return un_dispatch_t<OP, 1>(k, dt, n, alpha);
    return un_dispatch_t<OP, 0>(k, dt, n, alpha);
}

/* ai.fp8run::Gelu with a bfloat16 X or Y (ops/unary_math.c): the float32 Gelu of X's value,
 * rounded once for a bfloat16 Y (the one-element kernel, for pointers the 16-byte one cannot take) */
template <int GT, typename TX, typename TY>
struct GeluLowp {
    const TX *x;
    TY *y;
    __device__ void operator()(int64_t i) const { ew_lowp_put(y + i, un_float<FR_UN_GELU, GT, float>(ew_lowp_widen(x[i]), 0.f)); }
};

/* the same element function for the 16-byte kernel (elementwise_lowp.cuh) */
template <int GT> struct GeluV {
    __device__ float operator()(const float *a) const { return un_float<FR_UN_GELU, GT, float>(a[0], 0.f); }
};

template <int GT>
fr_status gelu_lowp_t(const fr_cuda_kctx *k, int64_t n)
{
    const void *x = k->in[0]->data;
    void *y = k->out[0]->data;
    const bool xb = k->in[0]->dtype == FR_BF16, yb = k->out[0]->dtype == FR_BF16;
    typedef __nv_bfloat16 bf;
    if (ew_lowp_ok(x, NULL, y)) {
        if (xb && yb) return ew_launch_lowp<1>(k, n, (const bf *)x, (const bf *)NULL, (bf *)y, GeluV<GT>{}, "Gelu");
        if (xb) return ew_launch_lowp<1>(k, n, (const bf *)x, (const bf *)NULL, (float *)y, GeluV<GT>{}, "Gelu");
        return ew_launch_lowp<1>(k, n, (const float *)x, (const bf *)NULL, (bf *)y, GeluV<GT>{}, "Gelu");
    }
    if (xb && yb)
        return ew_launch_flat(k, n, GeluLowp<GT, __nv_bfloat16, __nv_bfloat16>{(const __nv_bfloat16 *)x, (__nv_bfloat16 *)y},
                              "Gelu");
    if (xb) return ew_launch_flat(k, n, GeluLowp<GT, __nv_bfloat16, float>{(const __nv_bfloat16 *)x, (float *)y}, "Gelu");
    return ew_launch_flat(k, n, GeluLowp<GT, float, __nv_bfloat16>{(const float *)x, (__nv_bfloat16 *)y}, "Gelu");
}

fr_status same_numel(const fr_cuda_kctx *k, const fr_tensor *x, const fr_tensor *y)
{
    if (!x || !y || fr_tensor_numel(x) != fr_tensor_numel(y))
        return fr_node_error(k->node, FR_ERR_SHAPE,
                             "output does not match the input's element count (re-run shape inference)");
    return FR_OK;
}

} // namespace

fr_status ew_unary_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const UnKind *kind = NULL;
    for (size_t i = 0; i < sizeof un_kinds / sizeof un_kinds[0]; i++)
        if (strcmp(un_kinds[i].op, n->op_type) == 0) kind = &un_kinds[i];
    if (!kind) return fr_node_error(n, FR_ERR_INTERNAL, "not a unary math op");
    if (k->n_in < 1 || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs 1 input and 1 output");
    const fr_tensor *x = k->in[0], *y = k->out[0];
    FR_TRY(same_numel(k, x, y));
    const fr_dtype dt = x->dtype;
    /* ai.fp8run::Gelu: Y as its y_dtype says on a float32 / bfloat16 X (ops/unary_math.c) */
    const int lowp = kind->code == FR_UN_GELU && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0 && (dt == FR_F32 || dt == FR_BF16);
    fr_dtype yt = dt;
    if (lowp) {
        int bf;
        FR_TRY(fr_attr_bf16(n, "y_dtype", &bf));
        yt = bf ? FR_BF16 : FR_F32;
    }
    if (y->dtype != yt)
        return fr_node_error(n, FR_ERR_SHAPE, "output dtype %s, expected %s (input dtype %s)", fr_dtype_name(y->dtype),
                             fr_dtype_name(yt), fr_dtype_name(dt));
    if (!(dt == FR_F32 || (lowp && dt == FR_BF16) || dt == FR_F64 || (kind->ints && (dt == FR_I32 || dt == FR_I64))))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (supported: float32, float64%s)",
                             fr_dtype_name(dt), kind->ints ? ", int32, int64" : "");
    float alpha = kind->alpha_default;
    int gelu_tanh = 0;
    if (kind->attrs & EW_A_ALPHA) FR_TRY(fr_node_attr_float(n, "alpha", kind->alpha_default, &alpha));
    if (kind->attrs & EW_A_APPROX) {
        const char *s;
        FR_TRY(fr_node_attr_string(n, "approximate", "none", &s));
        if (strcmp(s, "tanh") == 0)
            gelu_tanh = 1;
        else if (strcmp(s, "none") != 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "approximate=\"%s\" is not supported (\"none\" or \"tanh\")",
                                 s);
    }
    const int64_t cnt = fr_tensor_numel(x);
    if (dt == FR_BF16 || yt == FR_BF16) return gelu_tanh ? gelu_lowp_t<1>(k, cnt) : gelu_lowp_t<0>(k, cnt);
    switch (kind->code) {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    case FR_UN_##ID: return un_dispatch<FR_UN_##ID>(k, dt, cnt, alpha, gelu_tanh);
#include "ops/ew_unary.def"
    }
    return fr_node_error(n, FR_ERR_INTERNAL, "unary op code %d", kind->code);
}

/* ---- IsNaN, IsInf, Not ---- */

namespace {

enum PredOp { PRED_NAN, PRED_INF, PRED_NOT };

/* class of element i: 0 finite, 1 NaN, 2 +inf, 3 -inf (read from the bits, no conversion) */
template <int DT>
__device__ __forceinline__ int pred_class(const void *p, int64_t i)
{
    if constexpr (DT == FR_F32) {
        uint32_t u = ((const uint32_t *)p)[i], a = u & 0x7fffffffu;
        return a > 0x7f800000u ? 1 : a == 0x7f800000u ? (u >> 31 ? 3 : 2) : 0;
    } else if constexpr (DT == FR_F64) {
        uint64_t u = ((const uint64_t *)p)[i], a = u & 0x7fffffffffffffffull;
        return a > 0x7ff0000000000000ull ? 1 : a == 0x7ff0000000000000ull ? (u >> 63 ? 3 : 2) : 0;
    } else if constexpr (DT == FR_F16) {
        uint16_t u = ((const uint16_t *)p)[i], a = u & 0x7fffu;
        return a > 0x7c00u ? 1 : a == 0x7c00u ? (u >> 15 ? 3 : 2) : 0;
    } else { /* bfloat16 */
        uint16_t u = ((const uint16_t *)p)[i], a = u & 0x7fffu;
        return a > 0x7f80u ? 1 : a == 0x7f80u ? (u >> 15 ? 3 : 2) : 0;
    }
}

template <int DT, int OP>
struct PredF {
    const void *x;
    uint8_t *y;
    int pos, neg;
    __device__ void operator()(int64_t i) const
    {
        if constexpr (OP == PRED_NOT) {
            y[i] = !((const uint8_t *)x)[i];
        } else {
            int c = pred_class<DT>(x, i);
            y[i] = OP == PRED_NAN ? c == 1 : ((c == 2 && pos) || (c == 3 && neg));
        }
    }
};

template <int OP>
fr_status pred_dispatch(const fr_cuda_kctx *k, fr_dtype dt, int64_t n, int pos, int neg)
{
    const void *x = k->in[0]->data;
    uint8_t *y = (uint8_t *)k->out[0]->data;
    switch (dt) {
    case FR_F32: return ew_launch_flat(k, n, PredF<FR_F32, OP>{x, y, pos, neg}, "IsNaN/IsInf");
    case FR_F64: return ew_launch_flat(k, n, PredF<FR_F64, OP>{x, y, pos, neg}, "IsNaN/IsInf");
    case FR_F16: return ew_launch_flat(k, n, PredF<FR_F16, OP>{x, y, pos, neg}, "IsNaN/IsInf");
    case FR_BF16: return ew_launch_flat(k, n, PredF<FR_BF16, OP>{x, y, pos, neg}, "IsNaN/IsInf");
    default: return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(dt));
    }
}

} // namespace

fr_status ew_pred_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs 1 input and 1 output");
    const fr_tensor *x = k->in[0], *y = k->out[0];
    FR_TRY(same_numel(k, x, y));
    if (y->dtype != FR_BOOL)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be bool, got %s", fr_dtype_name(y->dtype));
    const int64_t cnt = fr_tensor_numel(x);
    if (strcmp(n->op_type, "Not") == 0) {
        if (x->dtype != FR_BOOL)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (bool)",
                                 fr_dtype_name(x->dtype));
        return ew_launch_flat(k, cnt, PredF<FR_BOOL, PRED_NOT>{x->data, (uint8_t *)y->data, 0, 0}, "Not");
    }
    if (strcmp(n->op_type, "IsNaN") == 0) return pred_dispatch<PRED_NAN>(k, x->dtype, cnt, 0, 0);
    int64_t pos, neg;
    FR_TRY(fr_node_attr_int(n, "detect_positive", 1, &pos));
    FR_TRY(fr_node_attr_int(n, "detect_negative", 1, &neg));
    return pred_dispatch<PRED_INF>(k, x->dtype, cnt, pos != 0, neg != 0);
}

/* ---- Cast, CastLike: the CPU's carrier scheme (ops/unary.c), element by element ---- */

namespace {

enum CarryKind { CARRY_F, CARRY_I, CARRY_U };

struct Carry {
    double f;
    int64_t i;
    uint64_t u;
};

template <int DT>
__host__ __device__ constexpr CarryKind carry_kind()
{
    return DT == FR_F32 || DT == FR_F64 || DT == FR_F16 || DT == FR_BF16 || DT == FR_F8E4M3 || DT == FR_F8E5M2
               ? CARRY_F
               : DT == FR_U64 ? CARRY_U : CARRY_I;
}

template <int DT>
__device__ __forceinline__ Carry cast_load(const void *src, int64_t i)
{
    Carry c{0.0, 0, 0};
    if constexpr (DT == FR_F32) c.f = ew_f2d(((const float *)src)[i]);
    else if constexpr (DT == FR_F64) c.f = ((const double *)src)[i];
    else if constexpr (DT == FR_F16) c.f = ew_f2d(ew_f16_to_f32(((const uint16_t *)src)[i]));
    else if constexpr (DT == FR_BF16) c.f = ew_f2d(ew_bf16_to_f32(((const uint16_t *)src)[i]));
    else if constexpr (DT == FR_F8E4M3) c.f = ew_f2d(fr_e4m3_to_f32(((const uint8_t *)src)[i]));
    else if constexpr (DT == FR_F8E5M2) c.f = ew_f2d(fr_e5m2_to_f32(((const uint8_t *)src)[i]));
    else if constexpr (DT == FR_I8) c.i = ((const int8_t *)src)[i];
    else if constexpr (DT == FR_I16) c.i = ((const int16_t *)src)[i];
    else if constexpr (DT == FR_I32) c.i = ((const int32_t *)src)[i];
    else if constexpr (DT == FR_I64) c.i = ((const int64_t *)src)[i];
    else if constexpr (DT == FR_U8) c.i = ((const uint8_t *)src)[i];
    else if constexpr (DT == FR_BOOL) c.i = ((const uint8_t *)src)[i] != 0;
    else if constexpr (DT == FR_U16) c.i = ((const uint16_t *)src)[i];
    else if constexpr (DT == FR_U32) c.i = ((const uint32_t *)src)[i];
    else c.u = ((const uint64_t *)src)[i]; /* FR_U64 */
    return c;
}

/* nearest float32 in round-to-odd: truncate toward zero, set the last bit when inexact */
__device__ __forceinline__ float f32_odd(double d)
{
    float f = ew_d2f(d);
    if (d != d || isinf(f) || (double)f == d) return f;
    uint32_t b = __float_as_uint(f);
    if (!(b & 1u)) {
        if (fabs((double)f) > fabs(d))
            b--;
        else
            b++;
        f = __uint_as_float(b);
    }
    return f;
}

__device__ __forceinline__ double u64_to_f64_odd(uint64_t m)
{
    int sh = 0;
    while ((m >> sh) >= ((uint64_t)1 << 53)) sh++;
    if (sh == 0) return (double)m;
    uint64_t q = (m >> sh) | (uint64_t)((m & (((uint64_t)1 << sh) - 1)) != 0);
    return ldexp((double)q, sh);
}

__device__ __forceinline__ double i64_to_f64_odd(int64_t v)
{
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    double r = u64_to_f64_odd(m);
    return v < 0 ? -r : r;
}

template <int K>
__device__ __forceinline__ double carry_f64(const Carry &c)
{
    return K == CARRY_F ? c.f : K == CARRY_I ? (double)c.i : (double)c.u;
}

template <int K>
__device__ __forceinline__ float carry_f32(const Carry &c)
{
    return K == CARRY_F ? ew_d2f(c.f) : K == CARRY_I ? (float)c.i : (float)c.u;
}

template <int K>
__device__ __forceinline__ float carry_f32_odd(const Carry &c)
{
    return f32_odd(K == CARRY_F ? c.f : K == CARRY_I ? i64_to_f64_odd(c.i) : u64_to_f64_odd(c.u));
}

/* float -> signed of `bits` bits: truncate, NaN -> 0, saturate; integers pass (the store wraps) */
template <int K>
__device__ __forceinline__ int64_t carry_signed(const Carry &c, int bits)
{
    if constexpr (K == CARRY_F) {
        double hi = ldexp(1.0, bits - 1);
        int64_t hi_i = (int64_t)(((uint64_t)1 << (bits - 1)) - 1);
        double d = c.f;
        if (d != d) return 0;
        if (d >= hi) return hi_i;
        if (d <= -hi) return -hi_i - 1;
        return (int64_t)d;
    } else {
        return K == CARRY_I ? c.i : (int64_t)c.u;
    }
}

template <int K>
__device__ __forceinline__ uint64_t carry_unsigned(const Carry &c, int bits)
{
    if constexpr (K == CARRY_F) {
        uint64_t hi_u = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
        double d = c.f;
        if (d != d || d <= 0) return 0;
        if (d >= ldexp(1.0, bits)) return hi_u;
        return (uint64_t)d;
    } else {
        return K == CARRY_I ? (uint64_t)c.i : c.u;
    }
}

template <int K>
__device__ __forceinline__ void cast_store(int to, const Carry &c, void *dst, int64_t i, int sat)
{
    switch (to) {
    case FR_F32: ((float *)dst)[i] = carry_f32<K>(c); break;
    case FR_F64: ((double *)dst)[i] = carry_f64<K>(c); break;
    case FR_F16: ((uint16_t *)dst)[i] = ew_f32_to_f16(carry_f32_odd<K>(c)); break;
    case FR_BF16: ((uint16_t *)dst)[i] = ew_f32_to_bf16(carry_f32_odd<K>(c)); break;
    case FR_F8E4M3: ((uint8_t *)dst)[i] = fr_f32_to_e4m3(carry_f32_odd<K>(c), sat); break;
    case FR_F8E5M2: ((uint8_t *)dst)[i] = fr_f32_to_e5m2(carry_f32_odd<K>(c), sat); break;
    /* narrowing wraps modulo 2^bits */
    case FR_I8: ((int8_t *)dst)[i] = (int8_t)(uint8_t)carry_signed<K>(c, 8); break;
    case FR_I16: ((int16_t *)dst)[i] = (int16_t)(uint16_t)carry_signed<K>(c, 16); break;
    case FR_I32: ((int32_t *)dst)[i] = (int32_t)(uint32_t)carry_signed<K>(c, 32); break;
    case FR_I64: ((int64_t *)dst)[i] = carry_signed<K>(c, 64); break;
    case FR_U8: ((uint8_t *)dst)[i] = (uint8_t)carry_unsigned<K>(c, 8); break;
    case FR_U16: ((uint16_t *)dst)[i] = (uint16_t)carry_unsigned<K>(c, 16); break;
    case FR_U32: ((uint32_t *)dst)[i] = (uint32_t)carry_unsigned<K>(c, 32); break;
    case FR_U64: ((uint64_t *)dst)[i] = carry_unsigned<K>(c, 64); break;
    default: /* FR_BOOL */
        ((uint8_t *)dst)[i] = K == CARRY_F ? c.f != 0 : K == CARRY_I ? c.i != 0 : c.u != 0;
        break;
    }
}

/* Sources whose every value is a float32 (float32, float16, bfloat16, fp8): the carrier's
 * round-to-odd step is the identity for them, so narrow float targets convert the float
 * directly (NaN quieted, as the CPU's trip through double does). */
__host__ __device__ constexpr bool float_exact(int dt)
{
    return dt == FR_F32 || dt == FR_F16 || dt == FR_BF16 || dt == FR_F8E4M3 || dt == FR_F8E5M2;
}

template <int DT>
__device__ __forceinline__ float load_float(const void *src, int64_t i)
{
    if constexpr (DT == FR_F32) return ((const float *)src)[i];
    else if constexpr (DT == FR_F16) return ew_f16_to_f32(((const uint16_t *)src)[i]);
    else if constexpr (DT == FR_BF16) return ew_bf16_to_f32(((const uint16_t *)src)[i]);
    else if constexpr (DT == FR_F8E4M3) return fr_e4m3_to_f32(((const uint8_t *)src)[i]);
    else return fr_e5m2_to_f32(((const uint8_t *)src)[i]);
}

template <int FROM>
struct CastF {
    const void *x;
    void *y;
    int to, sat;
    __device__ void operator()(int64_t i) const
    {
        if constexpr (float_exact(FROM)) {
            float v = load_float<FROM>(x, i);
            if (v != v) v = __uint_as_float(__float_as_uint(v) | 0x400000u);
            switch (to) {
            case FR_F32: ((float *)y)[i] = v; return;
            case FR_F16: ((uint16_t *)y)[i] = ew_f32_to_f16(v); return;
            case FR_BF16: ((uint16_t *)y)[i] = ew_f32_to_bf16(v); return;
            case FR_F8E4M3: ((uint8_t *)y)[i] = fr_f32_to_e4m3(v, sat); return;
            case FR_F8E5M2: ((uint8_t *)y)[i] = fr_f32_to_e5m2(v, sat); return;
            default: {
                const Carry c{ew_f2d(v), 0, 0};
                cast_store<CARRY_F>(to, c, y, i, sat);
                return;
            }
            }
        } else {
            cast_store<carry_kind<FROM>()>(to, cast_load<FROM>(x, i), y, i, sat);
        }
    }
};

int cast_dtype_ok(fr_dtype dt)
{
    return fr_dtype_size(dt) > 0 && dt != FR_F8E4M3FNUZ && dt != FR_F8E5M2FNUZ;
}

} // namespace

fr_status ew_cast_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs an input and an output");
    const fr_tensor *x = k->in[0], *y = k->out[0];
    FR_TRY(same_numel(k, x, y));
    if (!cast_dtype_ok(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "casting from %s (dtype %d) is not supported",
                             fr_dtype_name(x->dtype), (int)x->dtype);
    if (!cast_dtype_ok(y->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "casting to %s (dtype %d) is not supported",
                             fr_dtype_name(y->dtype), (int)y->dtype);
    int64_t sat;
    FR_TRY(fr_node_attr_int(n, "saturate", 1, &sat));
    const int64_t cnt = fr_tensor_numel(x);
    if (cnt == 0) return FR_OK;
    if (x->dtype == y->dtype) {
        FR_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, k->cu->stream));
        return FR_OK;
    }
    const int to = (int)y->dtype, s = sat != 0;
    switch (x->dtype) {
#define CAST_CASE(DT) \
    case DT: return ew_launch_flat(k, cnt, CastF<DT>{x->data, y->data, to, s}, "Cast");
        CAST_CASE(FR_F32) CAST_CASE(FR_F64) CAST_CASE(FR_F16) CAST_CASE(FR_BF16) CAST_CASE(FR_F8E4M3)
        CAST_CASE(FR_F8E5M2) CAST_CASE(FR_I8) CAST_CASE(FR_I16) CAST_CASE(FR_I32) CAST_CASE(FR_I64)
        CAST_CASE(FR_U8) CAST_CASE(FR_U16) CAST_CASE(FR_U32) CAST_CASE(FR_U64) CAST_CASE(FR_BOOL)
#undef CAST_CASE
    default: break;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "casting from %s is not supported", fr_dtype_name(x->dtype));
}

/* ---- Clip: bounds from attributes (opset < 11) or from device scalars (read in the kernel:
 * the host never waits for them); an omitted bound does not clip ---- */

namespace {

template <typename T>
struct ClipF {
    const T *x;
    T *y;
    const T *plo, *phi; /* device bound or NULL */
    T lo, hi;           /* used when the pointer is NULL */
    __device__ void operator()(int64_t i) const
    {
        const T l = plo ? *plo : lo, h = phi ? *phi : hi;
        T v = x[i] < l ? l : x[i];
        y[i] = v > h ? h : v;
    }
};

template <typename T>
fr_status clip_launch(const fr_cuda_kctx *k, int64_t cnt, const fr_tensor *tlo, const fr_tensor *thi, T lo, T hi)
{
    ClipF<T> f{(const T *)k->in[0]->data, (T *)k->out[0]->data, tlo ? (const T *)tlo->data : NULL,
               thi ? (const T *)thi->data : NULL, lo, hi};
    return ew_launch_flat(k, cnt, f, "Clip");
}

} // namespace

fr_status ew_clip_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = k->in[0], *y = k->out[0];
    FR_TRY(same_numel(k, x, y));
    const int legacy = k->opset >= 1 && k->opset < 11;
    const fr_tensor *tlo = !legacy && k->n_in > 1 ? k->in[1] : NULL;
    const fr_tensor *thi = !legacy && k->n_in > 2 ? k->in[2] : NULL;
    for (int i = 1; !legacy && i < k->n_in && i < 3; i++) {
        const fr_tensor *b = k->in[i];
        if (b && (b->dtype != x->dtype || fr_tensor_numel(b) != 1))
            return fr_node_error(n, FR_ERR_SHAPE, "%s bound must be a one-element %s tensor", i == 1 ? "min" : "max",
                                 fr_dtype_name(x->dtype));
    }
    if (y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output dtype %s differs from input dtype %s", fr_dtype_name(y->dtype),
                             fr_dtype_name(x->dtype));
    const int64_t cnt = fr_tensor_numel(x);
    float alo = -3.402823466e38f, ahi = 3.402823466e38f;
    if (legacy) {
        FR_TRY(fr_node_attr_float(n, "min", -3.402823466e38f, &alo));
        FR_TRY(fr_node_attr_float(n, "max", 3.402823466e38f, &ahi));
    }
    switch (x->dtype) {
    case FR_F32:
        return clip_launch<float>(k, cnt, tlo, thi, legacy ? alo : -INFINITY, legacy ? ahi : INFINITY);
    case FR_F64:
        return clip_launch<double>(k, cnt, tlo, thi, legacy ? (double)alo : -INFINITY, legacy ? (double)ahi : INFINITY);
    case FR_I32:
        if (!legacy) return clip_launch<int32_t>(k, cnt, tlo, thi, INT32_MIN, INT32_MAX);
        break;
    case FR_I64:
        if (!legacy) return clip_launch<int64_t>(k, cnt, tlo, thi, INT64_MIN, INT64_MAX);
        break;
    default: break;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
}

/* ---- Identity, Dropout ---- */

namespace {

fr_status copy_tensor(const fr_cuda_kctx *k, const fr_tensor *x, fr_tensor *y)
{
    FR_TRY(same_numel(k, x, y));
    if (y->dtype != x->dtype)
        return fr_node_error(k->node, FR_ERR_SHAPE, "output dtype %s differs from input dtype %s",
                             fr_dtype_name(y->dtype), fr_dtype_name(x->dtype));
    if (x->nbytes) FR_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, x->nbytes, cudaMemcpyDeviceToDevice, k->cu->stream));
    return FR_OK;
}

template <typename T>
struct FillF {
    T *y;
    T v;
    __device__ void operator()(int64_t i) const { y[i] = v; }
};

/* Training mode with a nonzero ratio is an error on the CPU (read at run time there); here
 * one thread reads the device scalars and raises the flag. */
__global__ void dropout_check_kernel(const uint8_t *training, const void *ratio, int ratio_dt, unsigned *flag)
{
    if (!training[0]) return;
    double r = 0.5;
    if (ratio) {
        switch (ratio_dt) {
        case FR_F32: r = ((const float *)ratio)[0]; break;
        case FR_F64: r = ((const double *)ratio)[0]; break;
        case FR_F16: r = ew_f16_to_f32(((const uint16_t *)ratio)[0]); break;
        case FR_BF16: r = ew_bf16_to_f32(((const uint16_t *)ratio)[0]); break;
        default: r = 1.0; break;
        }
    }
    if (r != 0) ew_raise(flag, EW_FLAG_DROPOUT_TRAIN);
}

} // namespace

fr_status ew_identity_run(const fr_cuda_kctx *k)
{
    if (k->n_in < 1 || k->n_out < 1) return fr_node_error(k->node, FR_ERR_GRAPH, "needs 1 input and 1 output");
    return copy_tensor(k, k->in[0], k->out[0]);
}

fr_status ew_dropout_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = k->in[0];
    const fr_tensor *tm = k->n_in > 2 ? k->in[2] : NULL;
    if (tm && fr_tensor_numel(tm) >= 1) {
        unsigned *flag;
        FR_TRY(ew_flag_begin(k, &flag));
        if (tm->dtype != FR_BOOL)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "training_mode must be bool, got %s",
                                 fr_dtype_name(tm->dtype));
        const fr_tensor *r = k->n_in > 1 ? k->in[1] : NULL;
        int has_r = r && fr_tensor_numel(r) >= 1;
        dropout_check_kernel<<<1, 1, 0, k->cu->stream>>>((const uint8_t *)tm->data, has_r ? r->data : NULL,
                                                         has_r ? (int)r->dtype : 0, flag);
        FR_TRY(fr_cuda_check_launch(n, "Dropout training-mode check"));
    }
    FR_TRY(copy_tensor(k, x, k->out[0]));
    fr_tensor *mask = k->n_out > 1 ? k->out[1] : NULL;
    if (!mask) return FR_OK;
    FR_TRY(same_numel(k, x, mask));
    const int64_t cnt = fr_tensor_numel(mask);
    switch (mask->dtype) {
    case FR_BOOL:
        if (cnt) FR_CUDA_TRY(cudaMemsetAsync(mask->data, 1, (size_t)cnt, k->cu->stream));
        return FR_OK;
    case FR_F32: return ew_launch_flat(k, cnt, FillF<float>{(float *)mask->data, 1.0f}, "Dropout mask");
    case FR_F64: return ew_launch_flat(k, cnt, FillF<double>{(double *)mask->data, 1.0}, "Dropout mask");
    case FR_F16: return ew_launch_flat(k, cnt, FillF<uint16_t>{(uint16_t *)mask->data, 0x3C00u}, "Dropout mask");
    case FR_BF16: return ew_launch_flat(k, cnt, FillF<uint16_t>{(uint16_t *)mask->data, 0x3F80u}, "Dropout mask");
    default:
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mask dtype %s is not supported", fr_dtype_name(mask->dtype));
    }
}
