/* CUDA kernels of ops/elementwise_grad.c: ActivationGrad, PowGrad, FmodGrad, ExtremumGrad,
 * ClipGrad, with the CPU's formulas and PyTorch 1.13 conventions (see elementwise_grad.h).
 *
 * The CPU evaluates in double and rounds once. Here float64 does the same; float32 does the
 * activation derivatives marked DOUBLE in ops/ew_unary.def (the rational ones), PowGrad,
 * FmodGrad, ExtremumGrad and ClipGrad in double too (cheap, and then equal to the CPU), and
 * those marked NATIVE (the transcendental ones) with CUDA's float functions (a few ulp).
 * ClipGrad's bound gradients are sums: a fixed two-pass tree in double (deterministic; equal
 * to the CPU's sequential double sum up to double rounding). */
#include <cuda_bf16.h>
#include <type_traits>

#include "ops/cuda/elementwise_lowp.cuh"
#include "ops/cuda/elementwise_util.cuh"

/* ---- ActivationGrad ---- */

namespace {

/* generated from the rows of ops/ew_unary.def; ActivationGrad supports those whose rule is
 * EW_ACT */
const char *const ag_names[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) NAME,
#include "ops/ew_unary.def"
};
static_assert(sizeof ag_names / sizeof ag_names[0] == FR_UN_COUNT, "one name per ew_unary.def row");
constexpr int ag_rule[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_RULE(GRAD),
#include "ops/ew_unary.def"
};
constexpr int ag_in_double[] = { /* EW_ACT(.., DOUBLE, ..): float32 evaluates in double too */
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_DX_DOUBLE(GRAD),
#include "ops/ew_unary.def"
};
constexpr int ag_attrs[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_ATTR_MASK(ATTRS),
#include "ops/ew_unary.def"
};
constexpr float ag_alpha_default[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) EW_ALPHA_DEFAULT(ATTRS),
#include "ops/ew_unary.def"
};

/* the row's dx in EW_T; GT: Gelu approximate="tanh" as a template parameter */
template <int OP, int GT, typename EW_T>
__device__ __forceinline__ EW_T ag_dx(EW_T g, EW_T v, double alpha)
{
    constexpr int gelu_tanh = GT;
    (void)gelu_tanh;
    (void)alpha;
    (void)v;
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    if constexpr (OP == FR_UN_##ID) return (EW_T)(EW_DX(GRAD));                              \
    else
#include "ops/ew_unary.def"
        return g;
}

template <int OP, int GT, typename T>
struct AgF {
    const T *dy, *v;
    T *dx;
    double alpha;
    __device__ void operator()(int64_t i) const
    {
        if constexpr (ag_in_double[OP] != 0)
            dx[i] = (T)ag_dx<OP, GT, double>((double)dy[i], (double)v[i], alpha);
        else
            dx[i] = ag_dx<OP, GT, T>(dy[i], v[i], alpha);
    }
};

/* float32 element function of the vector kernel (a[0] = dy, a[1] = v): AgF's */
template <int OP, int GT> struct AgV {
    double alpha;
    __device__ float operator()(const float *a) const
    {
        if constexpr (ag_in_double[OP] != 0)
            return (float)ag_dx<OP, GT, double>((double)a[0], (double)a[1], alpha);
        else
            return ag_dx<OP, GT, float>(a[0], a[1], alpha);
    }
};

template <int OP, int GT>
fr_status ag_launch_t(const fr_cuda_kctx *k, fr_dtype dt, int64_t n, double alpha)
{
    const void *dy = k->in[0]->data, *v = k->in[1]->data;
    void *dx = k->out[0]->data;
    if (dt == FR_F32) {
        const EwVecIn<2> in{{(const float *)dy, (const float *)v}};
        if (ew_vec4_ok(in, (const float *)dx))
            return ew_launch_vec4(k, n, in, (float *)dx, AgV<OP, GT>{alpha}, "ActivationGrad");
    }
    if (dt == FR_F32)
        return ew_launch_flat(k, n, AgF<OP, GT, float>{(const float *)dy, (const float *)v, (float *)dx, alpha},
                              "ActivationGrad");
    return ew_launch_flat(k, n, AgF<OP, GT, double>{(const double *)dy, (const double *)v, (double *)dx, alpha},
                          "ActivationGrad");
}

template <int OP>
fr_status ag_launch(const fr_cuda_kctx *k, fr_dtype dt, int64_t n, double alpha, int gelu_tanh)
{
    if constexpr (ag_rule[OP] != EW_GR_ACT) {
        return fr_node_error(k->node, FR_ERR_INTERNAL, "activation gradient code %d", OP);
    } else {
        if constexpr ((ag_attrs[OP] & EW_A_APPROX) != 0)
            if (gelu_tanh) return ag_launch_t<OP, 1>(k, dt, n, alpha);
        return ag_launch_t<OP, 0>(k, dt, n, alpha);
    }
}

int is_f(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64; }

/* Gelu's gradient with a bfloat16 dy and/or x (ops/elementwise_grad.h): the float32 kernel's
 * dx on the widened values */

template <int GT, typename TD, typename TV>
struct GeluGradLowp {
    const TD *dy;
    const TV *v;
    float *dx;
    __device__ void operator()(int64_t i) const { dx[i] = ag_dx<FR_UN_GELU, GT, float>(ew_lowp_widen(dy[i]), ew_lowp_widen(v[i]), 0.0); }
};

/* the same element function for the 16-byte kernel (elementwise_lowp.cuh): a = {dy, x} */
template <int GT> struct GeluGradV {
    __device__ float operator()(const float *a) const { return ag_dx<FR_UN_GELU, GT, float>(a[0], a[1], 0.0); }
};

template <int GT>
fr_status gelu_grad_lowp(const fr_cuda_kctx *k, int64_t n)
{
    const void *dy = k->in[0]->data, *v = k->in[1]->data;
    float *dx = (float *)k->out[0]->data;
    const bool db = k->in[0]->dtype == FR_BF16, vb = k->in[1]->dtype == FR_BF16;
    typedef __nv_bfloat16 bf;
    if (ew_lowp_ok(dy, v, dx)) {
        const GeluGradV<GT> f{};
        if (db && vb) return ew_launch_lowp<2>(k, n, (const bf *)dy, (const bf *)v, dx, f, "ActivationGrad");
        if (db) return ew_launch_lowp<2>(k, n, (const bf *)dy, (const float *)v, dx, f, "ActivationGrad");
        return ew_launch_lowp<2>(k, n, (const float *)dy, (const bf *)v, dx, f, "ActivationGrad");
    }
    if (db && vb) return ew_launch_flat(k, n, GeluGradLowp<GT, bf, bf>{(const bf *)dy, (const bf *)v, dx}, "ActivationGrad");
    if (db) return ew_launch_flat(k, n, GeluGradLowp<GT, bf, float>{(const bf *)dy, (const float *)v, dx}, "ActivationGrad");
    return ew_launch_flat(k, n, GeluGradLowp<GT, float, bf>{(const float *)dy, (const bf *)v, dx}, "ActivationGrad");
}

int lowp_f(fr_dtype dt) { return dt == FR_F32 || dt == FR_BF16; }

} // namespace

fr_status ew_activation_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const char *op, *approx;
    float alpha;
    FR_TRY(fr_node_attr_string(n, "op", "", &op));
    int code = -1;
    for (int i = 0; i < FR_UN_COUNT; i++)
        if (ag_rule[i] == EW_GR_ACT && strcmp(ag_names[i], op) == 0) code = i;
    if (code < 0) return fr_node_error(n, FR_ERR_UNSUPPORTED, "op=\"%s\" has no activation gradient kernel", op);
    FR_TRY(fr_node_attr_float(n, "alpha", ag_alpha_default[code], &alpha));
    FR_TRY(fr_node_attr_string(n, "approximate", "none", &approx));
    int gelu_tanh = strcmp(approx, "tanh") == 0;
    if (!gelu_tanh && strcmp(approx, "none") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "approximate=\"%s\" (\"none\" or \"tanh\")", approx);
    const fr_tensor *dy = k->n_in > 1 ? k->in[0] : NULL, *v = k->n_in > 1 ? k->in[1] : NULL;
    const fr_tensor *dx = k->n_out > 0 ? k->out[0] : NULL;
    if (!dy || !v || !dx) return fr_node_error(n, FR_ERR_GRAPH, "needs 2 inputs and 1 output");
    const int64_t cnt = fr_tensor_numel(dy);
    if (code == FR_UN_GELU && (dy->dtype == FR_BF16 || v->dtype == FR_BF16) && lowp_f(dy->dtype) && lowp_f(v->dtype) &&
        dx->dtype == FR_F32) {
        if (fr_tensor_numel(v) != cnt || fr_tensor_numel(dx) != cnt)
            return fr_node_error(n, FR_ERR_SHAPE, "element counts differ (re-run shape inference)");
        return gelu_tanh ? gelu_grad_lowp<1>(k, cnt) : gelu_grad_lowp<0>(k, cnt);
    }
    if (!is_f(dy->dtype) || v->dtype != dy->dtype || dx->dtype != dy->dtype)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtypes %s, %s -> %s (float32 or float64, all the same)",
                             fr_dtype_name(dy->dtype), fr_dtype_name(v->dtype), fr_dtype_name(dx->dtype));
    if (fr_tensor_numel(v) != cnt || fr_tensor_numel(dx) != cnt)
        return fr_node_error(n, FR_ERR_SHAPE, "element counts differ (re-run shape inference)");
    switch (code) {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    case FR_UN_##ID: return ag_launch<FR_UN_##ID>(k, dy->dtype, cnt, (double)alpha, gelu_tanh);
#include "ops/ew_unary.def"
    }
    return fr_node_error(n, FR_ERR_INTERNAL, "activation gradient code %d", code);
}

/* ---- PowGrad: base: e == 0 ? 0 : dy e x^(e-1); exponent: dy (x == 0 && e >= 0 ? 0 : x^e log x) ---- */

namespace {

template <typename TG, typename TE, typename TO>
struct PowGradF {
    const TG *dy, *x;
    const TE *e;
    TO *out;
    int wrt_exp;
    __device__ void operator()(int64_t i, const int64_t *off) const
    {
        const double g = (double)dy[off[0]], xv = (double)x[off[1]], ev = (double)e[off[2]];
        double d;
        if (wrt_exp)
            d = g * (xv == 0 && ev >= 0 ? 0.0 : pow(xv, ev) * log(xv));
        else
            d = ev == 0 ? 0.0 : g * ev * pow(xv, ev - 1.0);
        out[i] = (TO)d;
    }
};

template <typename TG, typename TE>
fr_status pg_launch(const fr_cuda_kctx *k, const EwGeom &g, int wrt_exp)
{
    const void *dy = k->in[0]->data, *x = k->in[1]->data, *e = k->in[2]->data;
    void *out = k->out[0]->data;
    if (wrt_exp) {
        if constexpr (std::is_floating_point<TE>::value)
            return ew_launch_bcast<3>(k, g, PowGradF<TG, TE, TE>{(const TG *)dy, (const TG *)x, (const TE *)e, (TE *)out, 1},
                                      "PowGrad");
        return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "the gradient of an integer exponent");
    }
    return ew_launch_bcast<3>(k, g, PowGradF<TG, TE, TG>{(const TG *)dy, (const TG *)x, (const TE *)e, (TG *)out, 0},
                              "PowGrad");
}

template <typename TG>
fr_status pg_by_exp(const fr_cuda_kctx *k, const EwGeom &g, int wrt_exp)
{
    switch (k->in[2]->dtype) {
    case FR_F32: return pg_launch<TG, float>(k, g, wrt_exp);
    case FR_F64: return pg_launch<TG, double>(k, g, wrt_exp);
    case FR_I32: return pg_launch<TG, int32_t>(k, g, wrt_exp);
    case FR_I64: return pg_launch<TG, int64_t>(k, g, wrt_exp);
    default:
        return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "exponent is %s", fr_dtype_name(k->in[2]->dtype));
    }
}

} // namespace

fr_status ew_pow_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    int64_t which;
    FR_TRY(fr_node_attr_int(n, "input", 0, &which));
    if (which != 0 && which != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input=%lld (0: base, 1: exponent)", (long long)which);
    if (k->n_in != 3 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs and 1 output");
    const fr_dtype gdt = k->in[0]->dtype, odt = k->out[0]->dtype;
    const fr_dtype want = which ? k->in[2]->dtype : k->in[1]->dtype;
    if (!is_f(gdt) || k->in[1]->dtype != gdt || odt != want || !is_f(odt))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtypes dy %s, x %s, e %s -> %s are not supported",
                             fr_dtype_name(gdt), fr_dtype_name(k->in[1]->dtype), fr_dtype_name(k->in[2]->dtype),
                             fr_dtype_name(odt));
    const fr_tensor *ins[3] = {k->in[0], k->in[1], k->in[2]};
    EwGeom g;
    FR_TRY(ew_geom(n, k->out[0], 3, ins, &g));
    return gdt == FR_F32 ? pg_by_exp<float>(k, g, (int)which) : pg_by_exp<double>(k, g, (int)which);
}

/* ---- FmodGrad: -dy trunc(a / b), in double ---- */

namespace {

template <typename T>
struct FmodGradF {
    const T *dy, *a, *b;
    T *out;
    __device__ void operator()(int64_t i, const int64_t *off) const
    {
        out[i] = (T)(-(double)dy[off[0]] * trunc((double)a[off[1]] / (double)b[off[2]]));
    }
};

} // namespace

fr_status ew_fmod_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 3 || !k->in[0] || !k->in[1] || !k->in[2] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs and 1 output");
    const fr_dtype dt = k->in[0]->dtype;
    for (int i = 1; i < 3; i++)
        if (k->in[i]->dtype != dt || k->out[0]->dtype != dt || !is_f(dt))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtypes must all be float32 or all float64");
    const fr_tensor *ins[3] = {k->in[0], k->in[1], k->in[2]};
    EwGeom g;
    FR_TRY(ew_geom(n, k->out[0], 3, ins, &g));
    if (dt == FR_F32)
        return ew_launch_bcast<3>(k, g, FmodGradF<float>{(const float *)ins[0]->data, (const float *)ins[1]->data,
                                                         (const float *)ins[2]->data, (float *)k->out[0]->data},
                                  "FmodGrad");
    return ew_launch_bcast<3>(k, g, FmodGradF<double>{(const double *)ins[0]->data, (const double *)ins[1]->data,
                                                      (const double *)ins[2]->data, (double *)k->out[0]->data},
                              "FmodGrad");
}

/* ---- ExtremumGrad(dy, x_0..x_{k-1}) -> dx_0..dx_{k-1} ----
 * Any number of operands: their pointers and broadcast strides form a table in the node's
 * scratch, written by small upload kernels (kernel parameters carry it to the device, so no
 * host memory has to outlive the call and the step stays capturable). */

namespace {

struct EgOperand {
    const void *x;
    void *out;
    int64_t st[FR_MAX_RANK];
};

#define EG_CHUNK 16

struct EgChunk {
    EgOperand *dst;
    int count;
    EgOperand ops[EG_CHUNK];
};

__global__ void eg_upload_kernel(EgChunk c)
{
    if ((int)threadIdx.x < c.count) c.dst[threadIdx.x] = c.ops[threadIdx.x];
}

struct EgDims {
    int64_t d[FR_MAX_RANK];
    uint32_t mul[FR_MAX_RANK]; /* fast division (ew_fastdiv) when n < 2^31 */
    int shr[FR_MAX_RANK];
};

template <typename T>
__device__ __forceinline__ double eg_load(const EgOperand &o, const int64_t (&c)[FR_MAX_RANK], int rank)
{
    int64_t off = 0;
#pragma unroll
    for (int d = 0; d < FR_MAX_RANK; d++)
        if (d < rank) off += c[d] * o.st[d];
    return (double)((const T *)o.x)[off];
}

template <typename T>
__global__ void eg_kernel(int64_t n, int rank, EgDims dims, const T *dy, const EgOperand *ops, int k, int is_max)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        int64_t c[FR_MAX_RANK];
        if (n <= (int64_t)INT32_MAX) {
            uint32_t r = (uint32_t)e;
#pragma unroll
            for (int d = FR_MAX_RANK - 1; d >= 0; d--) {
                c[d] = 0;
                if (d < rank) {
                    uint32_t q = ew_fastdiv(r, dims.mul[d], dims.shr[d]);
                    c[d] = r - q * (uint32_t)dims.d[d];
                    r = q;
                }
            }
        } else {
            int64_t r = e;
#pragma unroll
            for (int d = FR_MAX_RANK - 1; d >= 0; d--) {
                c[d] = 0;
                if (d < rank) {
                    int64_t q = r / dims.d[d];
                    c[d] = r - q * dims.d[d];
                    r = q;
                }
            }
        }
        const double g = (double)dy[e];
        double m = eg_load<T>(ops[0], c, rank);
        int nan = m != m;
        for (int i = 1; i < k; i++) {
            double v = eg_load<T>(ops[i], c, rank);
            if (v != v)
                nan = 1;
            else if (is_max ? v > m : v < m)
                m = v;
        }
        int ties = 0;
        for (int i = 0; !nan && i < k; i++) ties += eg_load<T>(ops[i], c, rank) == m;
        for (int i = 0; i < k; i++) {
            double v = eg_load<T>(ops[i], c, rank);
            ((T *)ops[i].out)[e] = (T)(nan ? g : v == m ? g / ties : 0.0);
        }
    }
}

size_t eg_table_bytes(int k) { return (size_t)k * sizeof(EgOperand); }

} // namespace

fr_status ew_extremum_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    *bytes = eg_table_bytes(n->n_inputs > 1 ? n->n_inputs - 1 : 1);
    return FR_OK;
}

fr_status ew_extremum_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const char *mode;
    FR_TRY(fr_node_attr_string(n, "mode", "", &mode));
    if (strcmp(mode, "Max") != 0 && strcmp(mode, "Min") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mode=\"%s\" (\"Max\" or \"Min\")", mode);
    const int is_max = mode[1] == 'a';
    const int kin = k->n_in - 1;
    if (kin < 1 || k->n_out != kin) return fr_node_error(n, FR_ERR_GRAPH, "needs k+1 inputs and k outputs");
    const fr_tensor *dy = k->in[0];
    if (!dy || !is_f(dy->dtype)) return fr_node_error(n, FR_ERR_UNSUPPORTED, "gradient must be float32/float64");
    const fr_dtype dt = dy->dtype;
    const int64_t total = fr_tensor_numel(dy);
    for (int i = 0; i < kin; i++) {
        const fr_tensor *x = k->in[i + 1], *o = k->out[i];
        if (!x || !o || x->dtype != dt || o->dtype != dt || fr_tensor_numel(o) != total)
            return fr_node_error(n, FR_ERR_SHAPE, "operand %d does not match the gradient (re-run shape inference)", i);
    }
    if (!k->scratch || k->scratch_bytes < eg_table_bytes(kin))
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, the operand table needs %zu", k->scratch_bytes,
                             eg_table_bytes(kin));
    int64_t *st = (int64_t *)fr_malloc((size_t)kin * FR_MAX_RANK * sizeof(int64_t), "ExtremumGrad strides");
    if (!st) return FR_ERR_OOM;
    EgDims dims;
    memset(&dims, 0, sizeof dims);
    int rank;
    fr_status s = ew_geom_many(n, dy, kin, k->in + 1, &rank, dims.d, st);
    for (int d = 0; s == FR_OK && d < rank; d++) ew_fastdiv_init(dims.d[d], &dims.mul[d], &dims.shr[d]);
    EgOperand *table = (EgOperand *)k->scratch;
    for (int c0 = 0; s == FR_OK && c0 < kin; c0 += EG_CHUNK) {
        EgChunk ch;
        memset(&ch, 0, sizeof ch);
        ch.dst = table + c0;
        ch.count = kin - c0 < EG_CHUNK ? kin - c0 : EG_CHUNK;
        for (int i = 0; i < ch.count; i++) {
            ch.ops[i].x = k->in[c0 + i + 1]->data;
            ch.ops[i].out = k->out[c0 + i]->data;
            memcpy(ch.ops[i].st, st + (size_t)(c0 + i) * FR_MAX_RANK, sizeof ch.ops[i].st);
        }
        eg_upload_kernel<<<1, EG_CHUNK, 0, k->cu->stream>>>(ch);
        s = fr_cuda_check_launch(n, "ExtremumGrad table upload");
    }
    free(st);
    FR_TRY(s);
    if (total == 0) return FR_OK;
    if (dt == FR_F32)
        eg_kernel<float><<<ew_blocks(k, total), EW_THREADS, 0, k->cu->stream>>>(total, rank, dims,
                                                                                 (const float *)dy->data, table, kin,
                                                                                 is_max);
    else
        eg_kernel<double><<<ew_blocks(k, total), EW_THREADS, 0, k->cu->stream>>>(total, rank, dims,
                                                                                  (const double *)dy->data, table, kin,
                                                                                  is_max);
    return fr_cuda_check_launch(n, "ExtremumGrad");
}

/* ---- ClipGrad(dy, x, min?, max?) {input} ---- */

namespace {

#define CG_MAX_PARTS 1024

struct CgBounds {
    const void *plo, *phi; /* device bound inputs or NULL */
    double lo, hi;         /* attribute bounds (or +-inf) when the pointer is NULL */
    int has_lo, has_hi;    /* the bound is an input (ClipGrad's min/max rules use it) */
};

template <typename T>
__device__ __forceinline__ void cg_read(const CgBounds &b, double &lo, double &hi)
{
    lo = b.plo ? (double)*(const T *)b.plo : b.lo;
    hi = b.phi ? (double)*(const T *)b.phi : b.hi;
}

template <typename T>
struct ClipGradXF {
    const T *dy, *x;
    T *out;
    CgBounds b;
    __device__ void operator()(int64_t i) const
    {
        double lo, hi;
        cg_read<T>(b, lo, hi);
        const double v = (double)x[i];
        out[i] = v >= lo && v <= hi ? dy[i] : T(0);
    }
};

template <typename T>
__global__ void cg_partial_kernel(int64_t n, const T *dy, const T *x, CgBounds b, int which, double *partial)
{
    __shared__ double red[EW_THREADS];
    double lo, hi;
    cg_read<T>(b, lo, hi);
    double acc = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = (double)x[i];
        const int take = which == 1 ? v < lo && (!b.has_hi || lo < hi) : v > hi || (b.has_lo && hi < lo);
        if (take) acc += (double)dy[i];
    }
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = EW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = red[0];
}

template <typename T>
__global__ void cg_final_kernel(const double *partial, int nparts, T *out)
{
    __shared__ double red[EW_THREADS];
    double acc = 0;
    for (int i = threadIdx.x; i < nparts; i += EW_THREADS) acc += partial[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int s = EW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (T)red[0];
}

template <typename T>
fr_status cg_launch(const fr_cuda_kctx *k, int which, int64_t cnt, const CgBounds &b)
{
    const T *dy = (const T *)k->in[0]->data, *x = (const T *)k->in[1]->data;
    T *out = (T *)k->out[0]->data;
    if (which == 0) return ew_launch_flat(k, cnt, ClipGradXF<T>{dy, x, out, b}, "ClipGrad");
    if (!k->scratch || k->scratch_bytes < CG_MAX_PARTS * sizeof(double))
        return fr_node_error(k->node, FR_ERR_INTERNAL, "scratch of %zu bytes, the bound gradient needs %zu",
                             k->scratch_bytes, (size_t)CG_MAX_PARTS * sizeof(double));
    double *partial = (double *)k->scratch;
    /* the block count depends on n only, so the summation order is fixed */
    int64_t parts = (cnt + EW_THREADS * 4 - 1) / (EW_THREADS * 4);
    if (parts > CG_MAX_PARTS) parts = CG_MAX_PARTS;
    if (parts > 0) {
        cg_partial_kernel<T><<<(unsigned)parts, EW_THREADS, 0, k->cu->stream>>>(cnt, dy, x, b, which, partial);
        FR_TRY(fr_cuda_check_launch(k->node, "ClipGrad partial sums"));
    }
    cg_final_kernel<T><<<1, EW_THREADS, 0, k->cu->stream>>>(partial, (int)parts, out);
    return fr_cuda_check_launch(k->node, "ClipGrad sum");
}

/* One bound: its input t when present (the kernel reads it: *p, *has), else the float
 * attribute of legacy Clip when set (*v), else *v stays unbounded. */
fr_status cg_bound(const fr_node *n, const fr_tensor *t, const char *attr, const void **p, int *has, double *v)
{
    if (t) {
        *p = t->data;
        *has = 1;
    } else if (fr_node_attr(n, attr)) {
        float f;
        FR_TRY(fr_node_attr_float(n, attr, 0, &f));
        *v = f;
    }
    return FR_OK;
}

} // namespace

fr_status ew_clip_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    (void)n;
    *bytes = CG_MAX_PARTS * sizeof(double);
    return FR_OK;
}

fr_status ew_clip_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    int64_t which;
    FR_TRY(fr_node_attr_int(n, "input", 0, &which));
    if (which < 0 || which > 2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input=%lld (0: x, 1: min, 2: max)", (long long)which);
    const fr_tensor *dy = k->n_in > 1 ? k->in[0] : NULL, *x = k->n_in > 1 ? k->in[1] : NULL;
    const fr_tensor *out = k->n_out > 0 ? k->out[0] : NULL;
    if (!dy || !x || !out) return fr_node_error(n, FR_ERR_GRAPH, "needs dy, x and an output");
    const fr_dtype dt = x->dtype;
    const int64_t cnt = fr_tensor_numel(x);
    if (!is_f(dt) || dy->dtype != dt || out->dtype != dt || fr_tensor_numel(dy) != cnt)
        return fr_node_error(n, FR_ERR_SHAPE, "dy and x must be float32/float64 of one shape and dtype");
    for (int i = 2; i < k->n_in; i++)
        if (k->in[i] && (k->in[i]->dtype != dt || fr_tensor_numel(k->in[i]) != 1))
            return fr_node_error(n, FR_ERR_SHAPE, "bound %d must be a one-element %s tensor", i - 2, fr_dtype_name(dt));
    CgBounds b;
    memset(&b, 0, sizeof b);
    b.lo = -INFINITY;
    b.hi = INFINITY;
    const fr_tensor *tl = k->n_in > 2 ? k->in[2] : NULL, *th = k->n_in > 3 ? k->in[3] : NULL;
    FR_TRY(cg_bound(n, tl, "min", &b.plo, &b.has_lo, &b.lo));
    FR_TRY(cg_bound(n, th, "max", &b.phi, &b.has_hi, &b.hi));
    if (which == 0) {
        if (fr_tensor_numel(out) != cnt) return fr_node_error(n, FR_ERR_SHAPE, "output must have x's shape");
    } else if (fr_tensor_numel(out) != 1) {
        return fr_node_error(n, FR_ERR_SHAPE, "output must hold one element");
    }
    return dt == FR_F32 ? cg_launch<float>(k, (int)which, cnt, b) : cg_launch<double>(k, (int)which, cnt, b);
}
