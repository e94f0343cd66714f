/* Unary elementwise math: the ops of ops/ew_unary.def (Neg, Exp, Relu, Gelu, ...). Their
 * kernels, kinds, table entries and gradient rules are generated from its rows.
 *
 * Float math is evaluated in double and rounded once to the output type, so float32 results
 * are within about half an ulp of the exact value even for composite formulas (Gelu,
 * Softplus) where float evaluation would lose digits to cancellation. NaN propagates as in
 * numpy: Log/Sqrt of a negative number is NaN, Relu(NaN) is NaN.
 *
 * Gradient rules follow PyTorch's autograd conventions; the fused ActivationGrad kernel they
 * emit is in ops/elementwise_grad.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise_grad.h"
#include "ops/elementwise_util.h"
#include "ops/ew_math.h"
#include "ops/op.h"

/* ---- element math: generated from the rows of ops/ew_unary.def, evaluated in double ---- */

typedef void (*un_fn)(int64_t n, const void *x, void *y, const ew_un_params *p);

/* the float32 or float64 loop of op ID; EXPR computes in double from v, alpha, gelu_tanh */
#define UN_FLOAT(ID, T, EXPR)                                                                \
    static void un_##ID##_##T(int64_t n, const void *xv, void *yv, const ew_un_params *p)    \
    {                                                                                        \
        const T *x = xv;                                                                     \
        T *y = yv;                                                                           \
        EW_UN_PARAMS(p);                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                    \
            const double v = x[i];                                                           \
            y[i] = (T)(EXPR);                                                                \
        }                                                                                    \
    }

/* the int32 or int64 loop (UTY: the unsigned type, so negation of INT_MIN wraps as in numpy
 * instead of overflowing); generated for every op, used only for those with an int column */
#define UN_INT(ID, T, UTY, EXPR)                                                             \
    static void un_##ID##_##T(int64_t n, const void *xv, void *yv, const ew_un_params *p)    \
    {                                                                                        \
        typedef UTY UT;                                                                      \
        const T *x = xv;                                                                     \
        T *y = yv;                                                                           \
        (void)p;                                                                             \
        (void)sizeof(UT);                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                    \
            const T v = x[i];                                                                \
            (void)v;                                                                         \
            y[i] = (T)(EXPR);                                                                \
        }                                                                                    \
    }

#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    UN_FLOAT(ID, float, Y)                                                                   \
    UN_FLOAT(ID, double, Y)                                                                  \
    UN_INT(ID, int32_t, uint32_t, EW_EXPR(YINT))                                             \
    UN_INT(ID, int64_t, uint64_t, EW_EXPR(YINT))
#include "ops/ew_unary.def"

typedef struct un_impl {
    fr_dtype dt; /* FR_UNDEFINED: no such kernel */
    un_fn fn;
} un_impl;

typedef struct un_kind {
    const char *op;
    int attrs;           /* EW_A_* */
    float alpha_default; /* EW_A_ALPHA */
    int rule;            /* EW_GR_* */
    un_impl impl[4];
} un_kind;

static const un_kind un_kinds[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    [FR_UN_##ID] = {NAME, EW_ATTR_MASK(ATTRS), EW_ALPHA_DEFAULT(ATTRS), EW_RULE(GRAD),       \
                    {{FR_F32, un_##ID##_float},                                              \
                     {FR_F64, un_##ID##_double},                                             \
                     {EW_HAS(YINT) ? FR_I32 : FR_UNDEFINED, un_##ID##_int32_t},              \
                     {EW_HAS(YINT) ? FR_I64 : FR_UNDEFINED, un_##ID##_int64_t}}},
#include "ops/ew_unary.def"
};
EW_STATIC_ASSERT(sizeof un_kinds / sizeof un_kinds[0] == FR_UN_COUNT, "one kind per ew_unary.def row");

static const un_kind *un_kind_of(const fr_node *n)
{
    for (size_t i = 0; i < sizeof un_kinds / sizeof un_kinds[0]; i++)
        if (strcmp(un_kinds[i].op, n->op_type) == 0) return &un_kinds[i];
    return NULL;
}

static un_fn un_fn_of(const un_kind *k, fr_dtype dt)
{
    for (int i = 0; i < 4; i++)
        if (k->impl[i].dt != FR_UNDEFINED && k->impl[i].dt == dt) return k->impl[i].fn;
    return NULL;
}

static fr_status un_dtype_error(const fr_node *n, const un_kind *k, fr_dtype dt)
{
    char list[128] = "";
    size_t off = 0;
    for (int i = 0; i < 4 && off < sizeof list; i++)
        if (k->impl[i].dt != FR_UNDEFINED)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", off ? ", " : "",
                                    fr_dtype_name(k->impl[i].dt));
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (supported: %s)",
                         fr_dtype_name(dt), list);
}

static fr_status un_read_params(const fr_node *n, const un_kind *k, ew_un_params *p)
{
    p->alpha = 0;
    p->gelu_tanh = 0;
    if (k->attrs & EW_A_ALPHA) {
        float a;
        FR_TRY(fr_node_attr_float(n, "alpha", k->alpha_default, &a));
        p->alpha = a;
    }
    if (k->attrs & EW_A_APPROX) {
        const char *s;
        FR_TRY(fr_node_attr_string(n, "approximate", "none", &s));
        if (strcmp(s, "tanh") == 0)
            p->gelu_tanh = 1;
        else if (strcmp(s, "none") != 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "approximate=\"%s\" is not supported (\"none\" or \"tanh\")", s);
    }
    return FR_OK;
}

/* ai.fp8run::Gelu, the narrowed activations' Gelu (passes/narrow_activations.c): X float32 or
 * bfloat16, Y as its y_dtype says (default float32), computed from X's float32 value as the
 * float32 op and rounded once to bfloat16 for a bfloat16 Y. The ONNX Gelu keeps Y = X's type. */
static int lowp_gelu(const fr_node *n) { return strcmp(n->op_type, "Gelu") == 0 && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0; }

/* Y's dtype: y_dtype (ai.fp8run::Gelu on float32 / bfloat16), else X's */
static fr_status un_y_dtype(const fr_node *n, const un_kind *k, fr_dtype x, fr_dtype *y)
{
    *y = x;
    if (x == FR_BF16 && !lowp_gelu(n)) return un_dtype_error(n, k, x);
    if (!lowp_gelu(n) || (x != FR_F32 && x != FR_BF16)) {
        if (lowp_gelu(n) && fr_node_attr(n, "y_dtype"))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "y_dtype needs a float32 or bfloat16 input (input is %s)",
                                 fr_dtype_name(x));
        return FR_OK;
    }
    int bf;
    FR_TRY(fr_attr_bf16(n, "y_dtype", &bf));
    *y = bf ? FR_BF16 : FR_F32;
    return FR_OK;
}

static fr_status un_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    const un_kind *k = un_kind_of(n);
    if (!k) return fr_node_error(n, FR_ERR_INTERNAL, "not a unary math op");
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    if (x->dtype != FR_BF16 && !un_fn_of(k, x->dtype)) return un_dtype_error(n, k, x->dtype);
    ew_un_params p;
    FR_TRY(un_read_params(n, k, &p));
    fr_dtype yt;
    FR_TRY(un_y_dtype(n, k, x->dtype, &yt));
    fr_infer_set(g, n, 0, yt, x->rank, x->dims);
    return FR_OK;
}

/* ai.fp8run::Gelu with a bfloat16 X or Y: the float32 kernel on X widened (exactly), its float32
 * result rounded once */
static fr_status un_cpu_bf16(const fr_kernel_ctx *ctx, const un_kind *k, const ew_un_params *p)
{
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    const int64_t cnt = fr_tensor_numel(x);
    const size_t bytes = (size_t)(cnt > 0 ? cnt : 1) * sizeof(float);
    float *xw = x->dtype == FR_BF16 ? fr_malloc(bytes, "Gelu bfloat16 input widened") : NULL;
    float *yw = y->dtype == FR_BF16 ? fr_malloc(bytes, "Gelu float32 result") : NULL;
    if ((x->dtype == FR_BF16 && !xw) || (y->dtype == FR_BF16 && !yw)) {
        free(xw);
        free(yw);
        return FR_ERR_OOM;
    }
    if (xw)
        for (int64_t i = 0; i < cnt; i++) xw[i] = fr_bf16_to_f32(((const uint16_t *)x->data)[i]);
    float *yf = yw ? yw : y->data;
    un_fn_of(k, FR_F32)(cnt, xw ? xw : x->data, yf, p);
    if (yw)
        for (int64_t i = 0; i < cnt; i++) ((uint16_t *)y->data)[i] = fr_f32_to_bf16(yw[i]);
    free(xw);
    free(yw);
    return FR_OK;
}

static fr_status un_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const un_kind *k = un_kind_of(n);
    if (!k) return fr_node_error(n, FR_ERR_INTERNAL, "not a unary math op");
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    un_fn fn = un_fn_of(k, x->dtype);
    if (!fn && x->dtype != FR_BF16) return un_dtype_error(n, k, x->dtype);
    fr_dtype yt;
    FR_TRY(un_y_dtype(n, k, x->dtype, &yt));
    if (y->dtype != yt)
        return fr_node_error(n, FR_ERR_SHAPE, "output dtype %s, expected %s (input dtype %s)",
                             fr_dtype_name(y->dtype), fr_dtype_name(yt), fr_dtype_name(x->dtype));
    ew_un_params p;
    FR_TRY(un_read_params(n, k, &p));
    if (x->dtype == FR_BF16 || y->dtype == FR_BF16) return un_cpu_bf16(ctx, k, &p);
    fn(fr_tensor_numel(x), x->data, y->data, &p);
    return FR_OK;
}

/* ---- gradient rule ---- */

/* Unary math: the rule of the op's ew_unary.def row. Neg negates the gradient; piecewise
 * constant ops (Floor, Ceil, Sign) have none (din stays -1); the others emit one fused
 * ActivationGrad node. */
static fr_status un_grad(fr_grad_ctx *ctx)
{
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    const un_kind *k = un_kind_of(n);
    if (!k) return fr_node_error(n, FR_ERR_INTERNAL, "no gradient rule for this unary op");
    switch (k->rule) {
    case EW_GR_NEG: {
        int in[1] = {ctx->dout[0]};
        return fr_grad_op1(ctx, "Neg", 1, in, &ctx->din[0]);
    }
    case EW_GR_ACT: return fr_ew_emit_activation_grad(ctx, &ctx->din[0]);
    default: return FR_OK; /* EW_GR_ZERO */
    }
}

/* ---- the table ---- */

const fr_op_def fr_ops_unary_math[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    {NAME, DOMAIN, OPSET, un_infer, un_cpu, un_grad, 0},
#include "ops/ew_unary.def"
    /* the same Gelu for graphs below opset 20 (what passes/gelu_fuse.c emits) */
    {"Gelu", FR_DOMAIN_FP8RUN, 1, un_infer, un_cpu, un_grad, 0},
    {0},
};
