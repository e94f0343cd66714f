/* CUDA kernels of ops/binary.c: arithmetic (Add, Sub, Mul, Div, Mod both modes), variadic
 * Max/Min/Sum/Mean, comparisons, logic (generated from ops/ew_binary.def), Pow, Where, Expand; all with numpy broadcasting
 * through EwGeom (flat index for same-shape and single-element operands, unravelled
 * otherwise).
 *
 * Results equal the CPU's element for element: integer +, -, * wrap; Div truncates with
 * INT_MIN / -1 wrapping; Mod follows the divisor's sign (fmod=0) or the dividend's (fmod=1);
 * float Max/Min propagate NaN; variadic ops fold left to right as the CPU does (in place in
 * the output), Mean divides the sum by the count in the output dtype. Float Pow takes the
 * exponent to double and evaluates pow() in double as the CPU does (x^2 and x^3 as products,
 * which round the same way). A zero integer divisor or 0 to a negative integer power gives 0
 * and raises the node's error flag (elementwise_util.cuh). */
#include <type_traits>

#include "ops/cuda/elementwise_util.cuh"

namespace {

/* ---- the math rows of ops/ew_binary.def ---- */

/* UT of a math row: the unsigned type of an integer T (wrapping arithmetic); T otherwise */
template <typename T, bool = std::is_integral<T>::value>
struct uns {
    typedef T type;
};
template <typename T>
struct uns<T, true> {
    typedef typename std::make_unsigned<T>::type type;
};

constexpr int bm_dts[] = {
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B) FR_BM_DTS_##ID,
#include "ops/ew_binary.def"
};
constexpr int bm_out_bool[] = {
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B) OUT_BOOL,
#include "ops/ew_binary.def"
};
constexpr int bm_raises[] = {
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B) RAISES,
#include "ops/ew_binary.def"
};

template <int OP, typename T>
using bin_out_t = typename std::conditional<bm_out_bool[OP] != 0, uint8_t, T>::type;

/* y = the row's F (float/double), I (int32/int64) or B (bool: uint8) */
template <int OP, typename T>
__device__ __forceinline__ bin_out_t<OP, T> bin_op(T a, T b, unsigned *bad)
{
    typedef typename uns<T>::type UT;
    typedef bin_out_t<OP, T> TY;
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B)                                           \
    if constexpr (OP == FR_BM_##ID) {                                                        \
        if constexpr (std::is_same<T, uint8_t>::value)                                       \
            return (TY)(EW_EXPR(B));                                                         \
        else if constexpr (std::is_integral<T>::value)                                       \
            return (TY)(EW_EXPR(I));                                                         \
        else                                                                                 \
            return (TY)(EW_EXPR(F));                                                         \
    } else
#include "ops/ew_binary.def"
        return (TY)(UT)0;
}

template <int OP, typename T>
struct BinF {
    const T *a, *b;
    bin_out_t<OP, T> *y;
    unsigned *flag;
    __device__ void operator()(int64_t i, const int64_t *off) const { y[i] = bin_op<OP, T>(a[off[0]], b[off[1]], flag); }
};

template <int OP, typename T>
fr_status bin_launch(const fr_cuda_kctx *k, const fr_tensor *a, const fr_tensor *b, fr_tensor *y, unsigned *flag)
{
    const fr_tensor *ins[2] = {a, b};
    EwGeom g;
    FR_TRY(ew_geom(k->node, y, 2, ins, &g));
    BinF<OP, T> f{(const T *)a->data, (const T *)b->data, (bin_out_t<OP, T> *)y->data, flag};
    return ew_launch_bcast<2>(k, g, f, "elementwise binary");
}

/* a kernel for each dtype the row has an expression for */
template <int OP>
fr_status bin_dispatch(const fr_cuda_kctx *k, fr_dtype dt, const fr_tensor *a, const fr_tensor *b, fr_tensor *y,
                       unsigned *flag)
{
    if constexpr ((bm_dts[OP] & EW_DT_B) != 0)
        if (dt == FR_BOOL) return bin_launch<OP, uint8_t>(k, a, b, y, flag);
    if constexpr ((bm_dts[OP] & EW_DT_F) != 0) {
        if (dt == FR_F32) return bin_launch<OP, float>(k, a, b, y, flag);
        if (dt == FR_F64) return bin_launch<OP, double>(k, a, b, y, flag);
    }
    if constexpr ((bm_dts[OP] & EW_DT_I) != 0) {
        if (dt == FR_I32) return bin_launch<OP, int32_t>(k, a, b, y, flag);
        if (dt == FR_I64) return bin_launch<OP, int64_t>(k, a, b, y, flag);
    }
    return fr_node_error(k->node, FR_ERR_INTERNAL, "binary op %d has no %s kernel", OP, fr_dtype_name(dt));
}

fr_status bin_run_op(const fr_cuda_kctx *k, int op, fr_dtype dt, const fr_tensor *a, const fr_tensor *b, fr_tensor *y,
                     unsigned *flag)
{
    switch (op) {
#define FR_BIN_MATH(ID, OUT_BOOL, RAISES, F, I, B)                                           \
    case FR_BM_##ID: return bin_dispatch<FR_BM_##ID>(k, dt, a, b, y, flag);
#include "ops/ew_binary.def"
    }
    return fr_node_error(k->node, FR_ERR_INTERNAL, "binary op code %d", op);
}

/* The kinds of ops/ew_binary.def (its ops and variants, in its order): name, math row, bool
 * output, variadic, supported dtype classes. */
struct BinKind {
    const char *name; /* op_type, or "Mod/fmod" for Mod with fmod=1 */
    int op, out_bool, variadic, dts;
};

const BinKind bin_kinds[] = {
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    {NAME, FR_BM_##MATH, FR_BM_OUT_BOOL_##MATH, VARIADIC, DTYPES},
#include "ops/ew_binary.def"
};
static_assert(sizeof bin_kinds / sizeof bin_kinds[0] == FR_BK_COUNT, "one kind per ew_binary.def op");

int dt_class(fr_dtype dt)
{
    return dt == FR_F32 || dt == FR_F64 ? EW_DT_F : dt == FR_I32 || dt == FR_I64 ? EW_DT_I : dt == FR_BOOL ? EW_DT_B : 0;
}

/* Broadcast copy of any dtype, by element size (Expand, single-input variadic ops). */
template <typename T>
struct CopyF {
    const T *x;
    T *y;
    __device__ void operator()(int64_t i, const int64_t *off) const { y[i] = x[off[0]]; }
};

fr_status bcast_copy(const fr_cuda_kctx *k, const fr_tensor *x, fr_tensor *y)
{
    if (x->dtype != y->dtype)
        return fr_node_error(k->node, FR_ERR_SHAPE, "copy from %s to %s", fr_dtype_name(x->dtype),
                             fr_dtype_name(y->dtype));
    EwGeom g;
    FR_TRY(ew_geom(k->node, y, 1, &x, &g));
    if (g.n == 0) return FR_OK;
    if (!g.general && g.step[0]) { /* same element count: a plain copy */
        FR_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, y->nbytes, cudaMemcpyDeviceToDevice, k->cu->stream));
        return FR_OK;
    }
    switch (fr_dtype_size(x->dtype)) {
    case 1: return ew_launch_bcast<1>(k, g, CopyF<uint8_t>{(const uint8_t *)x->data, (uint8_t *)y->data}, "broadcast copy");
    case 2: return ew_launch_bcast<1>(k, g, CopyF<uint16_t>{(const uint16_t *)x->data, (uint16_t *)y->data}, "broadcast copy");
    case 4: return ew_launch_bcast<1>(k, g, CopyF<uint32_t>{(const uint32_t *)x->data, (uint32_t *)y->data}, "broadcast copy");
    case 8: return ew_launch_bcast<1>(k, g, CopyF<uint64_t>{(const uint64_t *)x->data, (uint64_t *)y->data}, "broadcast copy");
    default:
        return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(x->dtype));
    }
}

template <typename T>
struct DivByF {
    T *y;
    T d;
    __device__ void operator()(int64_t i) const { y[i] /= d; }
};

} // namespace

fr_status ew_binary_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const char *name = n->op_type;
    if (strcmp(name, "Mod") == 0) {
        int64_t fm;
        FR_TRY(fr_node_attr_int(n, "fmod", 0, &fm));
        if (fm != 0 && fm != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "fmod=%lld is not 0 or 1", (long long)fm);
        if (fm) name = bin_kinds[FR_BK_MOD_FMOD].name;
    }
    const BinKind *kind = NULL;
    for (size_t i = 0; i < sizeof bin_kinds / sizeof bin_kinds[0]; i++)
        if (strcmp(bin_kinds[i].name, name) == 0) kind = &bin_kinds[i];
    if (!kind) return fr_node_error(n, FR_ERR_INTERNAL, "not a binary elementwise op");
    if (k->n_in < 1 || (!kind->variadic && k->n_in != 2))
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs", k->n_in);
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_dtype dt = k->in[0]->dtype;
    if (!(dt_class(dt) & kind->dts)) {
        if (kind->op == FR_BM_PYMOD && dt_class(dt) == EW_DT_F)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "input dtype %s needs fmod=1 (ONNX requires it for floating point)", fr_dtype_name(dt));
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(dt));
    }
    fr_tensor *y = k->out[0];
    const fr_dtype out_dt = kind->out_bool ? FR_BOOL : dt;
    if (!y || y->dtype != out_dt)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s (re-run shape inference)", fr_dtype_name(out_dt));
    for (int i = 1; i < k->n_in; i++)
        if (k->in[i]->dtype != dt)
            return fr_node_error(n, FR_ERR_SHAPE, "input %d is %s but input 0 is %s", i,
                                 fr_dtype_name(k->in[i]->dtype), fr_dtype_name(dt));
    unsigned *flag = NULL; /* only integer division can fail */
    if (dt_class(dt) == EW_DT_I && bm_raises[kind->op])
        FR_TRY(ew_flag_begin(k, &flag));
    if (k->n_in == 1) {
        FR_TRY(bcast_copy(k, k->in[0], y));
    } else {
        FR_TRY(bin_run_op(k, kind->op, dt, k->in[0], k->in[1], y, flag));
        for (int i = 2; i < k->n_in; i++) /* variadic: fold the rest in place, as the CPU */
            FR_TRY(bin_run_op(k, kind->op, dt, y, k->in[i], y, flag));
    }
    if (kind == &bin_kinds[FR_BK_MEAN]) {
        const int64_t cnt = fr_tensor_numel(y);
        if (dt == FR_F32) return ew_launch_flat(k, cnt, DivByF<float>{(float *)y->data, (float)k->n_in}, "Mean");
        return ew_launch_flat(k, cnt, DivByF<double>{(double *)y->data, (double)k->n_in}, "Mean");
    }
    return FR_OK;
}

/* ---- Pow ---- */

namespace {

template <typename TB, typename TE>
struct PowF {
    const TB *x;
    const TE *e;
    TB *y;
    unsigned *flag;
    __device__ void operator()(int64_t i, const int64_t *off) const
    {
        const TB b = x[off[0]];
        if constexpr (std::is_integral<TB>::value) {
            y[i] = (TB)ew_ipow((int64_t)b, (int64_t)e[off[1]], flag);
        } else {
            const double ed = (double)e[off[1]];
            if (ed == 2.0) { /* exact product, rounded once: pow's result */
                y[i] = b * b;
            } else if (ed == 3.0 && std::is_same<TB, float>::value) {
                /* x*x is exact in double: one double rounding, as pow(), then the float one */
                const double d = (double)b;
                y[i] = (TB)(d * d * d);
            } else {
                y[i] = (TB)pow((double)b, ed);
            }
        }
    }
};

template <typename TB, typename TE>
fr_status pow_launch(const fr_cuda_kctx *k, unsigned *flag)
{
    const fr_tensor *ins[2] = {k->in[0], k->in[1]};
    EwGeom g;
    FR_TRY(ew_geom(k->node, k->out[0], 2, ins, &g));
    PowF<TB, TE> f{(const TB *)ins[0]->data, (const TE *)ins[1]->data, (TB *)k->out[0]->data, flag};
    return ew_launch_bcast<2>(k, g, f, "Pow");
}

template <typename TB>
fr_status pow_by_exp(const fr_cuda_kctx *k, fr_dtype edt, unsigned *flag)
{
    switch (edt) {
    case FR_I32: return pow_launch<TB, int32_t>(k, flag);
    case FR_I64: return pow_launch<TB, int64_t>(k, flag);
    case FR_F32:
        if constexpr (!std::is_integral<TB>::value) return pow_launch<TB, float>(k, flag);
        break;
    case FR_F64:
        if constexpr (!std::is_integral<TB>::value) return pow_launch<TB, double>(k, flag);
        break;
    default: break;
    }
    return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "exponent %s is not supported", fr_dtype_name(edt));
}

} // namespace

fr_status ew_pow_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1]) return fr_node_error(n, FR_ERR_GRAPH, "needs 2 inputs");
    const fr_tensor *x = k->in[0], *e = k->in[1];
    const fr_tensor *y = k->out[0];
    if (!y || y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s (re-run shape inference)", fr_dtype_name(x->dtype));
    unsigned *flag = NULL; /* only an integer 0 to a negative power can fail */
    if (x->dtype == FR_I32 || x->dtype == FR_I64) FR_TRY(ew_flag_begin(k, &flag));
    switch (x->dtype) {
    case FR_F32: return pow_by_exp<float>(k, e->dtype, flag);
    case FR_F64: return pow_by_exp<double>(k, e->dtype, flag);
    case FR_I32: return pow_by_exp<int32_t>(k, e->dtype, flag);
    case FR_I64: return pow_by_exp<int64_t>(k, e->dtype, flag);
    default: break;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "base %s with exponent %s is not supported", fr_dtype_name(x->dtype),
                         fr_dtype_name(e->dtype));
}

/* ---- Where(cond, x, y): any dtype, by element size ---- */

namespace {

template <typename T>
struct WhereF {
    const uint8_t *c;
    const T *x, *y;
    T *o;
    __device__ void operator()(int64_t i, const int64_t *off) const { o[i] = c[off[0]] ? x[off[1]] : y[off[2]]; }
};

template <typename T>
fr_status where_launch(const fr_cuda_kctx *k, const EwGeom &g)
{
    WhereF<T> f{(const uint8_t *)k->in[0]->data, (const T *)k->in[1]->data, (const T *)k->in[2]->data,
                (T *)k->out[0]->data};
    return ew_launch_bcast<3>(k, g, f, "Where");
}

} // namespace

fr_status ew_where_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 3 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs");
    if (k->in[0]->dtype != FR_BOOL)
        return fr_node_error(n, FR_ERR_SHAPE, "condition must be bool, got %s", fr_dtype_name(k->in[0]->dtype));
    const fr_dtype dt = k->in[1]->dtype;
    if (k->in[2]->dtype != dt || k->out[0]->dtype != dt)
        return fr_node_error(n, FR_ERR_SHAPE, "input 2 is %s and the output %s but input 1 is %s",
                             fr_dtype_name(k->in[2]->dtype), fr_dtype_name(k->out[0]->dtype), fr_dtype_name(dt));
    const fr_tensor *ins[3] = {k->in[0], k->in[1], k->in[2]};
    EwGeom g;
    FR_TRY(ew_geom(n, k->out[0], 3, ins, &g));
    switch (fr_dtype_size(dt)) {
    case 1: return where_launch<uint8_t>(k, g);
    case 2: return where_launch<uint16_t>(k, g);
    case 4: return where_launch<uint32_t>(k, g);
    case 8: return where_launch<uint64_t>(k, g);
    default: return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor", fr_dtype_name(dt));
    }
}

/* ---- Expand: the shape input was folded into the output's shape by infer() ---- */

fr_status ew_expand_run(const fr_cuda_kctx *k)
{
    if (k->n_in < 1 || !k->in[0] || !k->out[0])
        return fr_node_error(k->node, FR_ERR_GRAPH, "input or output missing");
    return bcast_copy(k, k->in[0], k->out[0]);
}
