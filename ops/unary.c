/* Unary elementwise ops other than the math of ops/unary_math.c: predicates (IsNaN, IsInf,
 * Not), conversions (Cast, CastLike), Clip and Identity (Dropout: ops/dropout.c).
 *
 * Float math is evaluated in double and rounded once to the output type, so float32 results
 * are within about half an ulp of the exact value even for composite formulas (Gelu,
 * Softplus) where float evaluation would lose digits to cancellation. NaN propagates as in
 * numpy: Log/Sqrt of a negative number is NaN, Relu(NaN) is NaN.
 *
 * Gradient rules follow PyTorch's autograd conventions; the fused backward kernels they
 * emit are in ops/elementwise_grad.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "ops/elementwise_grad.h"
#include "ops/elementwise_util.h"
#include "ops/op.h"

/* ---- helpers shared by the ops below ---- */

static int64_t node_opset(const fr_graph *g, const fr_node *n)
{
    return fr_graph_opset(g, n->domain);
}

/* ---- IsNaN, IsInf, Not: bool outputs ---- */

static int is_float_pred_dtype(fr_dtype dt)
{
    return dt == FR_F32 || dt == FR_F64 || dt == FR_F16 || dt == FR_BF16;
}

static fr_status pred_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    int is_not = strcmp(n->op_type, "Not") == 0;
    if (is_not ? x->dtype != FR_BOOL : !is_float_pred_dtype(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (%s)",
                             fr_dtype_name(x->dtype),
                             is_not ? "bool" : "float32, float64, float16, bfloat16");
    fr_infer_set(g, n, 0, FR_BOOL, x->rank, x->dims);
    return FR_OK;
}

static fr_status pred_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    int64_t cnt = fr_tensor_numel(x);
    uint8_t *out = y->data;
    if (y->dtype != FR_BOOL)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be bool, got %s",
                             fr_dtype_name(y->dtype));
    if (strcmp(n->op_type, "Not") == 0) {
        if (x->dtype != FR_BOOL)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (bool)",
                                 fr_dtype_name(x->dtype));
        const uint8_t *in = x->data;
        for (int64_t i = 0; i < cnt; i++) out[i] = !in[i];
        return FR_OK;
    }
    if (!is_float_pred_dtype(x->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported",
                             fr_dtype_name(x->dtype));
    if (strcmp(n->op_type, "IsNaN") == 0) {
        for (int64_t i = 0; i < cnt; i++) out[i] = isnan(fr_tensor_get_f64(x, i)) != 0;
        return FR_OK;
    }
    int64_t pos, neg;
    FR_TRY(fr_node_attr_int(n, "detect_positive", 1, &pos));
    FR_TRY(fr_node_attr_int(n, "detect_negative", 1, &neg));
    for (int64_t i = 0; i < cnt; i++) {
        double v = fr_tensor_get_f64(x, i);
        out[i] = isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    }
    return FR_OK;
}

/* ---- Cast, CastLike ----
 * Each element travels through one carrier picked by the source dtype: a double for float
 * types (exact for all of them), an int64 for bool and integers up to 32 bits and int64, a
 * uint64 for uint64. Conversions from the carrier:
 *   - to float32/float64: C conversion (correctly rounded, nearest-even);
 *   - to float16/bfloat16/fp8: round to odd into float32 first, then the format's own
 *     nearest-even rounding; round-to-odd with >= 2 spare bits makes the two steps equal to
 *     one correct rounding (no double-rounding error for float64 or int64 sources);
 *   - float to integer: truncate toward zero (ONNX/numpy); NaN -> 0 and values outside the
 *     target range saturate to its ends (ONNX leaves these undefined; this keeps them
 *     defined and free of C undefined behaviour);
 *   - integer to narrower integer: wrap modulo 2^bits (numpy astype);
 *   - to bool: x != 0 (so NaN -> true, as numpy).
 * fp8 targets (E4M3FN, E5M2) use graph/fp8_format.h (nearest-even, `saturate` attribute);
 * the FNUZ fp8 variants are not supported. */

typedef enum { CARRY_F, CARRY_I, CARRY_U } carry_kind;

typedef union carry {
    double f;
    int64_t i;
    uint64_t u;
} carry;

#define CAST_BLOCK 256

static int cast_dtype_ok(fr_dtype dt)
{
    return fr_dtype_size(dt) > 0 && dt != FR_F8E4M3FNUZ && dt != FR_F8E5M2FNUZ;
}

static carry_kind carry_of(fr_dtype dt)
{
    if (fr_dtype_is_float(dt)) return CARRY_F;
    return dt == FR_U64 ? CARRY_U : CARRY_I;
}

/* Nearest float32 in round-to-odd: truncate toward zero, set the last bit when inexact. */
static float f32_odd(double d)
{
    float f = (float)d;
    if (isnan(d) || isinf(f) || (double)f == d) return f;
    uint32_t b;
    memcpy(&b, &f, 4);
    if (!(b & 1u)) {
        /* f is the even neighbour; the odd one lies on the other side of d */
        if (fabs((double)f) > fabs(d))
            b--;
        else
            b++;
        memcpy(&f, &b, 4);
    }
    return f;
}

/* uint64 -> double in round-to-odd (sticky bit folded into the last kept bit). */
static double u64_to_f64_odd(uint64_t m)
{
    int sh = 0;
    while ((m >> sh) >= ((uint64_t)1 << 53)) sh++;
    if (sh == 0) return (double)m;
    uint64_t q = (m >> sh) | ((m & (((uint64_t)1 << sh) - 1)) != 0);
    return ldexp((double)q, sh);
}

static double i64_to_f64_odd(int64_t v)
{
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    double r = u64_to_f64_odd(m);
    return v < 0 ? -r : r;
}

static void cast_load(fr_dtype dt, const void *src, int64_t start, int cnt, carry *c)
{
    switch (dt) {
#define LOAD(DT, T, FIELD, EXPR)                                                            \
    case DT:                                                                                \
        for (int i = 0; i < cnt; i++) {                                                     \
            const T v = ((const T *)src)[start + i];                                        \
            c[i].FIELD = (EXPR);                                                            \
        }                                                                                   \
        break;
        LOAD(FR_F32, float, f, v)
        LOAD(FR_F64, double, f, v)
        LOAD(FR_F16, uint16_t, f, fr_f16_to_f32(v))
        LOAD(FR_BF16, uint16_t, f, fr_bf16_to_f32(v))
        LOAD(FR_F8E4M3, uint8_t, f, fr_e4m3_to_f32(v))
        LOAD(FR_F8E5M2, uint8_t, f, fr_e5m2_to_f32(v))
        LOAD(FR_I8, int8_t, i, v)
        LOAD(FR_I16, int16_t, i, v)
        LOAD(FR_I32, int32_t, i, v)
        LOAD(FR_I64, int64_t, i, v)
        LOAD(FR_U8, uint8_t, i, v)
        LOAD(FR_BOOL, uint8_t, i, v != 0)
        LOAD(FR_U16, uint16_t, i, v)
        LOAD(FR_U32, uint32_t, i, v)
        LOAD(FR_U64, uint64_t, u, v)
#undef LOAD
    default: break; /* rejected by cast_check before any load */
    }
}

/* float -> signed integer with range [lo, hi_excl): truncate, NaN -> 0, saturate. The bounds
 * are powers of two (or their negatives), exact in double. */
static int64_t f2i(double d, double lo, double hi_excl, int64_t lo_i, int64_t hi_i)
{
    if (isnan(d)) return 0;
    if (d >= hi_excl) return hi_i;
    if (d <= lo) return lo_i;
    return (int64_t)d; /* in range: C truncates toward zero */
}

static uint64_t f2u(double d, double hi_excl, uint64_t hi_u)
{
    if (isnan(d) || d <= 0) return 0;
    if (d >= hi_excl) return hi_u;
    return (uint64_t)d;
}

static double carry_f64(carry c, carry_kind k)
{
    return k == CARRY_F ? c.f : k == CARRY_I ? (double)c.i : (double)c.u;
}

static float carry_f32(carry c, carry_kind k)
{
    return k == CARRY_F ? (float)c.f : k == CARRY_I ? (float)c.i : (float)c.u;
}

static float carry_f32_odd(carry c, carry_kind k)
{
    return f32_odd(k == CARRY_F ? c.f : k == CARRY_I ? i64_to_f64_odd(c.i) : u64_to_f64_odd(c.u));
}

/* Signed target of `bits` bits: saturating from float, wrapping from integers. */
static int64_t carry_signed(carry c, carry_kind k, int bits)
{
    if (k == CARRY_F) {
        double hi = ldexp(1.0, bits - 1);
        int64_t hi_i = (int64_t)(((uint64_t)1 << (bits - 1)) - 1);
        return f2i(c.f, -hi, hi, -hi_i - 1, hi_i);
    }
    return k == CARRY_I ? c.i : (int64_t)c.u;
}

static uint64_t carry_unsigned(carry c, carry_kind k, int bits)
{
    if (k == CARRY_F) {
        uint64_t hi_u = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
        return f2u(c.f, ldexp(1.0, bits), hi_u);
    }
    return k == CARRY_I ? (uint64_t)c.i : c.u;
}

static void cast_store(fr_dtype dt, carry_kind k, const carry *c, int cnt, void *dst,
                       int64_t start, int saturate)
{
    switch (dt) {
#define STORE(DT, T, EXPR)                                                                  \
    case DT:                                                                                \
        for (int i = 0; i < cnt; i++) ((T *)dst)[start + i] = (T)(EXPR);                    \
        break;
        STORE(FR_F32, float, carry_f32(c[i], k))
        STORE(FR_F64, double, carry_f64(c[i], k))
        STORE(FR_F16, uint16_t, fr_f32_to_f16(carry_f32_odd(c[i], k)))
        STORE(FR_BF16, uint16_t, fr_f32_to_bf16(carry_f32_odd(c[i], k)))
        STORE(FR_F8E4M3, uint8_t, fr_f32_to_e4m3(carry_f32_odd(c[i], k), saturate))
        STORE(FR_F8E5M2, uint8_t, fr_f32_to_e5m2(carry_f32_odd(c[i], k), saturate))
        /* narrowing to the target width wraps modulo 2^bits (GCC/Clang semantics) */
        STORE(FR_I8, int8_t, (uint8_t)carry_signed(c[i], k, 8))
        STORE(FR_I16, int16_t, (uint16_t)carry_signed(c[i], k, 16))
        STORE(FR_I32, int32_t, (uint32_t)carry_signed(c[i], k, 32))
        STORE(FR_I64, int64_t, carry_signed(c[i], k, 64))
        STORE(FR_U8, uint8_t, carry_unsigned(c[i], k, 8))
        STORE(FR_U16, uint16_t, carry_unsigned(c[i], k, 16))
        STORE(FR_U32, uint32_t, carry_unsigned(c[i], k, 32))
        STORE(FR_U64, uint64_t, carry_unsigned(c[i], k, 64))
        STORE(FR_BOOL, uint8_t,
              k == CARRY_F ? c[i].f != 0 : k == CARRY_I ? c[i].i != 0 : c[i].u != 0)
#undef STORE
    default: break;
    }
}

static fr_status cast_check(const fr_node *n, fr_dtype from, fr_dtype to)
{
    if (!cast_dtype_ok(from))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "casting from %s (dtype %d) is not supported",
                             fr_dtype_name(from), (int)from);
    if (!cast_dtype_ok(to))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "casting to %s (dtype %d) is not supported",
                             fr_dtype_name(to), (int)to);
    return FR_OK;
}

/* Target dtype: Cast's `to` attribute or CastLike's second input. */
static fr_status cast_target(fr_graph *g, const fr_node *n, fr_dtype *to)
{
    if (strcmp(n->op_type, "CastLike") == 0) {
        *to = fr_node_in(g, n, 1)->dtype;
        return FR_OK;
    }
    int64_t v;
    FR_TRY(fr_node_attr_int(n, "to", -1, &v));
    if (v < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'to' is required");
    if (v > 64) return fr_node_error(n, FR_ERR_UNSUPPORTED, "unknown target dtype %lld", (long long)v);
    *to = (fr_dtype)v;
    return FR_OK;
}

static fr_status cast_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int like = strcmp(n->op_type, "CastLike") == 0;
    FR_TRY(fr_infer_require_inputs(g, n, like ? 2 : 1, like ? 2 : 1));
    const fr_value *x = fr_node_in(g, n, 0);
    fr_dtype to = FR_UNDEFINED;
    FR_TRY(cast_target(g, n, &to));
    FR_TRY(cast_check(n, x->dtype, to));
    int64_t sat;
    FR_TRY(fr_node_attr_int(n, "saturate", 1, &sat));
    fr_infer_set(g, n, 0, to, x->rank, x->dims);
    return FR_OK;
}

static fr_status cast_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    FR_TRY(cast_check(n, x->dtype, y->dtype));
    int64_t sat;
    FR_TRY(fr_node_attr_int(n, "saturate", 1, &sat));
    int64_t cnt = fr_tensor_numel(x);
    if (x->dtype == y->dtype) {
        if (cnt) memcpy(y->data, x->data, x->nbytes);
        return FR_OK;
    }
    carry_kind k = carry_of(x->dtype);
    carry buf[CAST_BLOCK];
    for (int64_t s = 0; s < cnt; s += CAST_BLOCK) {
        int m = (int)(cnt - s < CAST_BLOCK ? cnt - s : CAST_BLOCK);
        cast_load(x->dtype, x->data, s, m, buf);
        cast_store(y->dtype, k, buf, m, y->data, s, sat != 0);
    }
    return FR_OK;
}

/* ---- Clip ----
 * Opset < 11: bounds are float attributes min/max (defaults: the float range, as the
 * spec's numeric_limits defaults). Opset >= 11: optional scalar inputs of the input's dtype;
 * an omitted bound does not clip. y = min(max(x, lo), hi), so lo > hi gives hi everywhere
 * (numpy.clip) and NaN passes through. */

static int clip_legacy(int64_t opset) { return opset >= 1 && opset < 11; }

static fr_status clip_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int legacy = clip_legacy(node_opset(g, n));
    FR_TRY(fr_infer_require_inputs(g, n, 1, legacy ? 1 : 3));
    const fr_value *x = fr_node_in(g, n, 0);
    int ok = x->dtype == FR_F32 || x->dtype == FR_F64 ||
             (!legacy && (x->dtype == FR_I32 || x->dtype == FR_I64));
    if (!ok)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (%s)",
                             fr_dtype_name(x->dtype),
                             legacy ? "float32, float64" : "float32, float64, int32, int64");
    for (int i = 1; i < n->n_inputs; i++) {
        const fr_value *b = fr_node_in(g, n, i);
        if (!b) continue;
        int64_t cnt = 1;
        for (int d = 0; d < b->rank; d++) cnt *= b->dims[d];
        if (b->dtype != x->dtype || b->rank < 0 || cnt != 1)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "%s bound '%s' must be a one-element %s tensor", i == 1 ? "min" : "max",
                                 b->name, fr_dtype_name(x->dtype));
    }
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status clip_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0];
    fr_tensor *y = ctx->out[0];
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    const fr_tensor *tlo = ctx->n_in > 1 ? ctx->in[1] : NULL;
    const fr_tensor *thi = ctx->n_in > 2 ? ctx->in[2] : NULL;
    for (int i = 1; i < ctx->n_in; i++) {
        const fr_tensor *b = ctx->in[i];
        if (b && (b->dtype != x->dtype || fr_tensor_numel(b) != 1))
            return fr_node_error(n, FR_ERR_SHAPE, "%s bound must be a one-element %s tensor",
                                 i == 1 ? "min" : "max", fr_dtype_name(x->dtype));
    }
    if (y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output dtype %s differs from input dtype %s",
                             fr_dtype_name(y->dtype), fr_dtype_name(x->dtype));
    int64_t cnt = fr_tensor_numel(x);
    if (x->dtype == FR_F32 || x->dtype == FR_F64) {
        double lo = -INFINITY, hi = INFINITY;
        if (clip_legacy(ctx->opset)) {
            float a, b;
            FR_TRY(fr_node_attr_float(n, "min", -3.402823466e38f, &a));
            FR_TRY(fr_node_attr_float(n, "max", 3.402823466e38f, &b));
            lo = a;
            hi = b;
        } else {
            if (tlo) lo = fr_tensor_get_f64(tlo, 0);
            if (thi) hi = fr_tensor_get_f64(thi, 0);
        }
        if (x->dtype == FR_F32) {
            const float *in = x->data;
            float *out = y->data, l = (float)lo, h = (float)hi;
            for (int64_t i = 0; i < cnt; i++) {
                float v = in[i] < l ? l : in[i];
                out[i] = v > h ? h : v;
            }
        } else {
            const double *in = x->data;
            double *out = y->data;
            for (int64_t i = 0; i < cnt; i++) {
                double v = in[i] < lo ? lo : in[i];
                out[i] = v > hi ? hi : v;
            }
        }
        return FR_OK;
    }
    if (x->dtype == FR_I32 || x->dtype == FR_I64) {
        int64_t lo = x->dtype == FR_I32 ? INT32_MIN : INT64_MIN;
        int64_t hi = x->dtype == FR_I32 ? INT32_MAX : INT64_MAX;
        if (tlo) lo = fr_tensor_get_i64(tlo, 0);
        if (thi) hi = fr_tensor_get_i64(thi, 0);
        for (int64_t i = 0; i < cnt; i++) {
            int64_t v = x->dtype == FR_I32 ? ((const int32_t *)x->data)[i]
                                           : ((const int64_t *)x->data)[i];
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            if (x->dtype == FR_I32)
                ((int32_t *)y->data)[i] = (int32_t)v;
            else
                ((int64_t *)y->data)[i] = v;
        }
        return FR_OK;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported",
                         fr_dtype_name(x->dtype));
}

/* ---- Identity ---- */

static fr_status identity_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    if (fr_dtype_size(x->dtype) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(x->dtype));
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status copy_tensor(const fr_kernel_ctx *ctx, const fr_tensor *x, fr_tensor *y)
{
    FR_TRY(fr_ew_same_numel(ctx, x, y));
    if (y->dtype != x->dtype)
        return fr_node_error(ctx->node, FR_ERR_SHAPE, "output dtype %s differs from input dtype %s",
                             fr_dtype_name(y->dtype), fr_dtype_name(x->dtype));
    if (x->nbytes) memcpy(y->data, x->data, x->nbytes);
    return FR_OK;
}

static fr_status identity_cpu(const fr_kernel_ctx *ctx)
{
    return copy_tensor(ctx, ctx->in[0], ctx->out[0]);
}

/* ---- gradient rules ---- */

/* Float-to-float casts pass the gradient back, cast to the input's dtype. Casts from or to
 * integers and bool are piecewise constant (zero gradient). CastLike's second input only
 * lends its dtype. */
static fr_status cast_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    const fr_value *x = fr_node_in(g, n, 0), *y = fr_node_out(g, n, 0);
    if (!fr_dtype_is_float(x->dtype) || !fr_dtype_is_float(y->dtype)) return FR_OK;
    if (g->values[ctx->dout[0]].dtype == x->dtype) {
        ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    fr_dtype to = x->dtype;
    int in[1] = {ctx->dout[0]}, nid;
    FR_TRY(fr_grad_node(ctx, "Cast", FR_DOMAIN_ONNX, 1, in, 1, &ctx->din[0], &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "to", (int64_t)to));
    return fr_grad_finish(ctx, nid);
}

/* Clip: one ClipGrad node per input that needs a gradient (x, and the min/max bound inputs
 * of opset 11+). Legacy attribute bounds are copied onto the ClipGrad node with the same
 * defaults the forward kernel uses. */
static fr_status clip_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    if (ctx->dout[0] < 0) return FR_OK;
    int legacy = clip_legacy(ctx->opset);
    float lo = 0, hi = 0;
    if (legacy) {
        FR_TRY(fr_node_attr_float(n, "min", -3.402823466e38f, &lo));
        FR_TRY(fr_node_attr_float(n, "max", 3.402823466e38f, &hi));
    }
    int in[4] = {ctx->dout[0], n->inputs[0], -1, -1}, n_in = 2;
    for (int i = 1; !legacy && i < n->n_inputs && i < 3; i++) {
        in[i + 1] = n->inputs[i];
        if (n->inputs[i] >= 0) n_in = i + 2;
    }
    const int n_fwd_in = n->n_inputs < 3 ? n->n_inputs : 3;
    for (int i = 0; i < n_fwd_in; i++) {
        if (!ctx->need_din[i] || in[i + 1] < 0) continue;
        int nid;
        FR_TRY(fr_grad_node(ctx, "ClipGrad", FR_DOMAIN_FP8RUN, n_in, in, 1, &ctx->din[i], &nid));
        fr_node *cn = &g->nodes[nid];
        FR_TRY(fr_node_set_attr_int(cn, "input", i));
        if (legacy) {
            FR_TRY(fr_node_set_attr_float(cn, "min", lo));
            FR_TRY(fr_node_set_attr_float(cn, "max", hi));
        }
        FR_TRY(fr_grad_finish(ctx, nid));
    }
    return FR_OK;
}

/* Identity passes the gradient through. */
static fr_status pass_grad(fr_grad_ctx *ctx)
{
    if (ctx->need_din[0]) ctx->din[0] = ctx->dout[0];
    return FR_OK;
}

/* ---- the table ---- */

const fr_op_def fr_ops_unary[] = {
    {"IsNaN", FR_DOMAIN_ONNX, 9, pred_infer, pred_cpu, NULL, 0},
    {"IsInf", FR_DOMAIN_ONNX, 10, pred_infer, pred_cpu, NULL, 0},
    {"Not", FR_DOMAIN_ONNX, 1, pred_infer, pred_cpu, NULL, 0},
    {"Cast", FR_DOMAIN_ONNX, 6, cast_infer, cast_cpu, cast_grad, 0},
    {"CastLike", FR_DOMAIN_ONNX, 15, cast_infer, cast_cpu, cast_grad, 0},
    {"Clip", FR_DOMAIN_ONNX, 6, clip_infer, clip_cpu, clip_grad, 0},
    {"Identity", FR_DOMAIN_ONNX, 1, identity_infer, identity_cpu, pass_grad, 0},
    {0},
};
