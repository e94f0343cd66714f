/* Backward ops of the elementwise families (see elementwise_grad.h). */
#include "ops/elementwise_grad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/elementwise_util.h"
#include "ops/ew_math.h"

/* ---- shared checks ---- */

static int is_f(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64; }

static fr_status float_error(const fr_node *n, const char *what, const fr_value *v)
{
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s '%s' is %s (float32 or float64 supported)",
                         what, v->name, fr_dtype_name(v->dtype));
}

static int same_dims(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return 1;
}

/* v broadcasts to `to` (right-aligned, each dim 1 or equal). */
static fr_status check_bcast_to(const fr_node *n, const fr_value *v, const fr_value *to)
{
    int ok = v->rank <= to->rank;
    for (int d = 0; ok && d < v->rank; d++) {
        int64_t vd = v->dims[d], td = to->dims[to->rank - v->rank + d];
        ok = vd == td || vd == 1;
    }
    if (ok) return FR_OK;
    char a[128], b[128];
    return fr_node_error(n, FR_ERR_SHAPE, "'%s' of shape %s does not broadcast to the gradient shape %s",
                         v->name, fr_shape_str(v->rank, v->dims, a, sizeof a),
                         fr_shape_str(to->rank, to->dims, b, sizeof b));
}

static fr_status check_out_dtypes(const fr_kernel_ctx *ctx)
{
    for (int o = 0; o < ctx->n_out; o++)
        if (ctx->out[o] && !is_f(ctx->out[o]->dtype))
            return fr_node_error(ctx->node, FR_ERR_UNSUPPORTED, "output %d is %s", o,
                                 fr_dtype_name(ctx->out[o]->dtype));
    return FR_OK;
}

static inline double rd(const char *p, fr_dtype dt, int64_t i)
{
    switch (dt) {
    case FR_F32: return ((const float *)(const void *)p)[i];
    case FR_F64: return ((const double *)(const void *)p)[i];
    case FR_I32: return ((const int32_t *)(const void *)p)[i];
    default: return (double)((const int64_t *)(const void *)p)[i];
    }
}

static inline void wr(char *p, fr_dtype dt, int64_t i, double v)
{
    if (dt == FR_F32)
        ((float *)(void *)p)[i] = (float)v;
    else
        ((double *)(void *)p)[i] = v;
}

/* ==== ActivationGrad ==== */

typedef void (*ag_fn)(int64_t n, const void *dy, const void *v, void *dx, const ew_un_params *p);

/* the float32 or float64 loop of op ID's dx, computed in double from g (= dy), v, alpha and
 * gelu_tanh; generated for every ew_unary.def row, used for those with an EW_ACT rule */
#define AG(ID, T, EXPR)                                                                      \
    static void ag_##ID##_##T(int64_t n, const void *gv, const void *vv, void *dv,          \
                              const ew_un_params *p)                                         \
    {                                                                                        \
        const T *gp = gv, *vp = vv;                                                          \
        T *d = dv;                                                                           \
        EW_UN_PARAMS(p);                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                    \
            const double g = gp[i], v = vp[i];                                               \
            (void)g;                                                                         \
            (void)v;                                                                         \
            d[i] = (T)(EXPR);                                                                \
        }                                                                                    \
    }

#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    AG(ID, float, EW_DX(GRAD))                                                               \
    AG(ID, double, EW_DX(GRAD))
#include "ops/ew_unary.def"

typedef struct ag_kind {
    const char *op;
    int rule;    /* EW_GR_ACT: ActivationGrad supports it */
    int reads_y; /* 1: v is the forward output, 0: the forward input */
    int attrs;   /* EW_A_*: copied from the forward node */
    float alpha_default;
    ag_fn f32, f64;
} ag_kind;

static const ag_kind ag_kinds[] = {
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD)                              \
    [FR_UN_##ID] = {NAME, EW_RULE(GRAD), EW_READS_Y(GRAD), EW_ATTR_MASK(ATTRS),            \
                    EW_ALPHA_DEFAULT(ATTRS), ag_##ID##_float, ag_##ID##_double},
#include "ops/ew_unary.def"
};
EW_STATIC_ASSERT(sizeof ag_kinds / sizeof ag_kinds[0] == FR_UN_COUNT, "one kind per ew_unary.def row");

static const ag_kind *ag_find(const char *op)
{
    for (size_t i = 0; i < sizeof ag_kinds / sizeof ag_kinds[0]; i++)
        if (ag_kinds[i].rule == EW_GR_ACT && strcmp(ag_kinds[i].op, op) == 0) return &ag_kinds[i];
    return NULL;
}

static fr_status ag_read(const fr_node *n, const ag_kind **kind, ew_un_params *p)
{
    const char *op, *approx;
    float alpha;
    FR_TRY(fr_node_attr_string(n, "op", "", &op));
    const ag_kind *k = ag_find(op);
    if (!k)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "op=\"%s\" has no activation gradient kernel", op);
    FR_TRY(fr_node_attr_float(n, "alpha", k->alpha_default, &alpha));
    FR_TRY(fr_node_attr_string(n, "approximate", "none", &approx));
    p->alpha = alpha;
    p->gelu_tanh = strcmp(approx, "tanh") == 0;
    if (!p->gelu_tanh && strcmp(approx, "none") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "approximate=\"%s\" (\"none\" or \"tanh\")", approx);
    *kind = k;
    return FR_OK;
}

/* Gelu's gradient on the narrowed activations: dy and x each float32 or bfloat16 (at least one
 * bfloat16), dx float32, computed as the float32 kernel on the widened values */
static int ag_lowp(const ag_kind *k, fr_dtype dy, fr_dtype v)
{
    return strcmp(k->op, "Gelu") == 0 && (dy == FR_BF16 || v == FR_BF16) && (dy == FR_F32 || dy == FR_BF16) &&
           (v == FR_F32 || v == FR_BF16);
}

static fr_status ag_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const ag_kind *k;
    ew_un_params p;
    FR_TRY(ag_read(n, &k, &p));
    const fr_value *dy = fr_node_in(g, n, 0), *v = fr_node_in(g, n, 1);
    if (ag_lowp(k, dy->dtype, v->dtype)) {
        char a[128], b[128];
        if (!same_dims(v, dy))
            return fr_node_error(n, FR_ERR_SHAPE, "'%s' %s must match the gradient '%s' %s", v->name,
                                 fr_shape_str(v->rank, v->dims, a, sizeof a), dy->name,
                                 fr_shape_str(dy->rank, dy->dims, b, sizeof b));
        fr_infer_set(g, n, 0, FR_F32, dy->rank, dy->dims);
        return FR_OK;
    }
    if (!is_f(dy->dtype)) return float_error(n, "gradient", dy);
    if (v->dtype != dy->dtype || !same_dims(v, dy)) {
        char a[128], b[128];
        return fr_node_error(n, FR_ERR_SHAPE, "'%s' (%s %s) must match the gradient '%s' (%s %s)",
                             v->name, fr_shape_str(v->rank, v->dims, a, sizeof a),
                             fr_dtype_name(v->dtype), dy->name,
                             fr_shape_str(dy->rank, dy->dims, b, sizeof b), fr_dtype_name(dy->dtype));
    }
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status ag_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const ag_kind *k;
    ew_un_params p;
    FR_TRY(ag_read(n, &k, &p));
    const fr_tensor *dy = ctx->in[0], *v = ctx->in[1];
    fr_tensor *dx = ctx->out[0];
    if (!dy || !v || !dx) return fr_node_error(n, FR_ERR_GRAPH, "needs 2 inputs and 1 output");
    int64_t cnt = fr_tensor_numel(dy);
    if (ag_lowp(k, dy->dtype, v->dtype) && dx->dtype == FR_F32) {
        if (fr_tensor_numel(v) != cnt || fr_tensor_numel(dx) != cnt)
            return fr_node_error(n, FR_ERR_SHAPE, "element counts differ (re-run shape inference)");
        float *w[2] = {NULL, NULL};
        const fr_tensor *src[2] = {dy, v};
        const void *in[2] = {dy->data, v->data};
        for (int i = 0; i < 2; i++) {
            if (src[i]->dtype != FR_BF16) continue;
            w[i] = fr_malloc((size_t)(cnt > 0 ? cnt : 1) * sizeof(float), "ActivationGrad bfloat16 input widened");
            if (!w[i]) {
                free(w[0]);
                return FR_ERR_OOM;
            }
            for (int64_t e = 0; e < cnt; e++) w[i][e] = fr_bf16_to_f32(((const uint16_t *)src[i]->data)[e]);
            in[i] = w[i];
        }
        k->f32(cnt, in[0], in[1], dx->data, &p);
        free(w[0]);
        free(w[1]);
        return FR_OK;
    }
    if (!is_f(dy->dtype) || v->dtype != dy->dtype || dx->dtype != dy->dtype)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "dtypes %s, %s -> %s (float32 or float64, all the same)",
                             fr_dtype_name(dy->dtype), fr_dtype_name(v->dtype),
                             fr_dtype_name(dx->dtype));
    if (fr_tensor_numel(v) != cnt || fr_tensor_numel(dx) != cnt)
        return fr_node_error(n, FR_ERR_SHAPE, "element counts differ (re-run shape inference)");
    (dy->dtype == FR_F32 ? k->f32 : k->f64)(cnt, dy->data, v->data, dx->data, &p);
    return FR_OK;
}

fr_status fr_ew_emit_activation_grad(fr_grad_ctx *ctx, int *out)
{
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    const ag_kind *k = ag_find(n->op_type);
    if (!k)
        return fr_node_error(n, FR_ERR_INTERNAL, "no activation gradient kernel for %s", n->op_type);
    int v = k->reads_y ? n->outputs[0] : n->inputs[0];
    float alpha = k->alpha_default;
    const char *approx = "none";
    FR_TRY(fr_node_attr_float(n, "alpha", k->alpha_default, &alpha));
    FR_TRY(fr_node_attr_string(n, "approximate", "none", &approx));
    int in[2] = {ctx->dout[0], v}, nid;
    char approx_copy[32];
    snprintf(approx_copy, sizeof approx_copy, "%s", approx); /* n moves when the graph grows */
    const char *op = k->op;
    FR_TRY(fr_grad_node(ctx, "ActivationGrad", FR_DOMAIN_FP8RUN, 2, in, 1, out, &nid));
    fr_node *gn = &ctx->g->nodes[nid];
    FR_TRY(fr_node_set_attr_string(gn, "op", op));
    if (k->attrs & EW_A_ALPHA) FR_TRY(fr_node_set_attr_float(gn, "alpha", alpha));
    if (k->attrs & EW_A_APPROX) FR_TRY(fr_node_set_attr_string(gn, "approximate", approx_copy));
    return fr_grad_finish(ctx, nid);
}

/* ==== PowGrad ==== */

typedef struct pg_arg {
    fr_dtype dt[4]; /* out, dy, x, e */
    int wrt_exp;
} pg_arg;

static void pg_run(int64_t n, char *const *p, const int64_t *s, void *argv)
{
    const pg_arg *a = argv;
    for (int64_t i = 0; i < n; i++) {
        double g = rd(p[1], a->dt[1], i * s[1]), x = rd(p[2], a->dt[2], i * s[2]),
               e = rd(p[3], a->dt[3], i * s[3]), d;
        if (a->wrt_exp)
            d = g * (x == 0 && e >= 0 ? 0.0 : pow(x, e) * log(x));
        else
            d = e == 0 ? 0.0 : g * e * pow(x, e - 1.0);
        wr(p[0], a->dt[0], i, d);
    }
}

static fr_status pg_input(const fr_node *n, int64_t *which)
{
    FR_TRY(fr_node_attr_int(n, "input", 0, which));
    if (*which != 0 && *which != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input=%lld (0: base, 1: exponent)",
                             (long long)*which);
    return FR_OK;
}

static fr_status pg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    int64_t which;
    FR_TRY(pg_input(n, &which));
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1), *e = fr_node_in(g, n, 2);
    if (!is_f(dy->dtype)) return float_error(n, "gradient", dy);
    if (x->dtype != dy->dtype) return float_error(n, "base", x);
    int e_ok = is_f(e->dtype) || (!which && (e->dtype == FR_I32 || e->dtype == FR_I64));
    if (!e_ok) return float_error(n, "exponent", e);
    FR_TRY(check_bcast_to(n, x, dy));
    FR_TRY(check_bcast_to(n, e, dy));
    fr_infer_set(g, n, 0, which ? e->dtype : x->dtype, dy->rank, dy->dims);
    return FR_OK;
}

static fr_status pg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    int64_t which;
    FR_TRY(pg_input(n, &which));
    if (ctx->n_in != 3 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs and 1 output");
    FR_TRY(check_out_dtypes(ctx));
    fr_tensor *ops[4] = {ctx->out[0], ctx->in[0], ctx->in[1], ctx->in[2]};
    pg_arg a = {{ops[0]->dtype, ops[1]->dtype, ops[2]->dtype, ops[3]->dtype}, (int)which};
    for (int k = 1; k < 4; k++)
        if (!is_f(a.dt[k]) && !(k == 3 && (a.dt[k] == FR_I32 || a.dt[k] == FR_I64)))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input %d is %s", k - 1, fr_dtype_name(a.dt[k]));
    return fr_ew_run(n, 4, ops, pg_run, &a);
}

/* ==== FmodGrad ==== */

#define FMOD_RUN(NAME, T)                                                                    \
    static void NAME(int64_t n, char *const *p, const int64_t *s, void *arg)                 \
    {                                                                                        \
        T *d = (T *)(void *)p[0];                                                            \
        const T *g = (const T *)(const void *)p[1], *a = (const T *)(const void *)p[2],      \
                *b = (const T *)(const void *)p[3];                                          \
        (void)arg;                                                                           \
        for (int64_t i = 0; i < n; i++)                                                      \
            d[i] = (T)(-(double)g[i * s[1]] * trunc((double)a[i * s[2]] / (double)b[i * s[3]])); \
    }

FMOD_RUN(fmod_grad_f32, float)
FMOD_RUN(fmod_grad_f64, double)

static fr_status fg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    const fr_value *dy = fr_node_in(g, n, 0);
    if (!is_f(dy->dtype)) return float_error(n, "gradient", dy);
    for (int i = 1; i < 3; i++) {
        const fr_value *v = fr_node_in(g, n, i);
        if (v->dtype != dy->dtype) return float_error(n, i == 1 ? "dividend" : "divisor", v);
        FR_TRY(check_bcast_to(n, v, dy));
    }
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

static fr_status fg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 3 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs 3 inputs and 1 output");
    fr_dtype dt = ctx->in[0]->dtype;
    for (int i = 1; i < 3; i++)
        if (ctx->in[i]->dtype != dt || ctx->out[0]->dtype != dt || !is_f(dt))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtypes must all be float32 or all float64");
    fr_tensor *ops[4] = {ctx->out[0], ctx->in[0], ctx->in[1], ctx->in[2]};
    return fr_ew_run(n, 4, ops, dt == FR_F32 ? fmod_grad_f32 : fmod_grad_f64, NULL);
}

/* ==== ExtremumGrad ==== */

static fr_status eg_mode(const fr_node *n, int *is_max)
{
    const char *m;
    FR_TRY(fr_node_attr_string(n, "mode", "", &m));
    if (strcmp(m, "Max") != 0 && strcmp(m, "Min") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mode=\"%s\" (\"Max\" or \"Min\")", m);
    *is_max = m[1] == 'a';
    return FR_OK;
}

static fr_status eg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int is_max;
    FR_TRY(eg_mode(n, &is_max));
    if (n->n_inputs < 2 || n->n_outputs != n->n_inputs - 1)
        return fr_node_error(n, FR_ERR_GRAPH,
                             "has %d inputs and %d outputs (want dy, x_0..x_k-1 -> k outputs)",
                             n->n_inputs, n->n_outputs);
    FR_TRY(fr_infer_require_inputs(g, n, n->n_inputs, n->n_inputs));
    const fr_value *dy = fr_node_in(g, n, 0);
    if (!is_f(dy->dtype)) return float_error(n, "gradient", dy);
    for (int i = 1; i < n->n_inputs; i++) {
        const fr_value *x = fr_node_in(g, n, i);
        if (x->dtype != dy->dtype) return float_error(n, "input", x);
        FR_TRY(check_bcast_to(n, x, dy));
    }
    for (int o = 0; o < n->n_outputs; o++) fr_infer_same(g, n, o, 0);
    return FR_OK;
}

static fr_status eg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    int is_max;
    FR_TRY(eg_mode(n, &is_max));
    const int k = ctx->n_in - 1;
    if (k < 1 || ctx->n_out != k)
        return fr_node_error(n, FR_ERR_GRAPH, "needs k+1 inputs and k outputs");
    const fr_tensor *dy = ctx->in[0];
    if (!dy || !is_f(dy->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "gradient must be float32/float64");
    const fr_dtype dt = dy->dtype;
    const int64_t total = fr_tensor_numel(dy);
    for (int i = 0; i < k; i++) {
        const fr_tensor *x = ctx->in[i + 1], *o = ctx->out[i];
        if (!x || !o || x->dtype != dt || o->dtype != dt || fr_tensor_numel(o) != total)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "operand %d does not match the gradient (re-run shape inference)", i);
    }
    const int r = dy->rank;
    int64_t *st = fr_malloc((size_t)k * FR_MAX_RANK * sizeof(int64_t), "ExtremumGrad strides");
    int64_t *off = fr_calloc((size_t)k, sizeof(int64_t), "ExtremumGrad offsets");
    if (!st || !off) {
        free(st);
        free(off);
        return FR_ERR_OOM;
    }
    for (int i = 0; i < k; i++) {
        const fr_tensor *x = ctx->in[i + 1];
        int ok = x->rank <= r;
        for (int d = 0; ok && d < x->rank; d++)
            ok = x->dims[d] == 1 || x->dims[d] == dy->dims[r - x->rank + d];
        if (!ok) {
            free(st);
            free(off);
            return fr_node_error(n, FR_ERR_SHAPE, "input %d does not broadcast to the gradient", i);
        }
        fr_broadcast_strides(x->rank, x->dims, r, dy->dims, st + (size_t)i * FR_MAX_RANK);
    }
    int64_t idx[FR_MAX_RANK] = {0};
    for (int64_t e = 0; e < total; e++) {
        double g = rd(dy->data, dt, e), m = rd(ctx->in[1]->data, dt, off[0]);
        int nan = isnan(m);
        for (int i = 1; i < k; i++) {
            double v = rd(ctx->in[i + 1]->data, dt, off[i]);
            if (isnan(v))
                nan = 1;
            else if (is_max ? v > m : v < m)
                m = v;
        }
        int ties = 0;
        for (int i = 0; !nan && i < k; i++) ties += rd(ctx->in[i + 1]->data, dt, off[i]) == m;
        for (int i = 0; i < k; i++) {
            double v = rd(ctx->in[i + 1]->data, dt, off[i]);
            wr(ctx->out[i]->data, dt, e, nan ? g : v == m ? g / ties : 0.0);
        }
        for (int d = r - 1; d >= 0; d--) { /* odometer over dy's shape */
            idx[d]++;
            for (int i = 0; i < k; i++) off[i] += st[(size_t)i * FR_MAX_RANK + d];
            if (idx[d] < dy->dims[d]) break;
            for (int i = 0; i < k; i++) off[i] -= st[(size_t)i * FR_MAX_RANK + d] * dy->dims[d];
            idx[d] = 0;
        }
    }
    free(st);
    free(off);
    return FR_OK;
}

/* ==== ClipGrad ==== */

typedef struct clip_bounds {
    double lo, hi;
    int has_lo, has_hi;
} clip_bounds;

static fr_status cg_input(const fr_node *n, int64_t *which)
{
    FR_TRY(fr_node_attr_int(n, "input", 0, which));
    if (*which < 0 || *which > 2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input=%lld (0: x, 1: min, 2: max)",
                             (long long)*which);
    return FR_OK;
}

static fr_status cg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 4));
    int64_t which;
    FR_TRY(cg_input(n, &which));
    const fr_value *dy = fr_node_in(g, n, 0), *x = fr_node_in(g, n, 1);
    if (!is_f(dy->dtype)) return float_error(n, "gradient", dy);
    if (x->dtype != dy->dtype || !same_dims(x, dy))
        return fr_node_error(n, FR_ERR_SHAPE, "'%s' must have the gradient's shape and dtype", x->name);
    for (int i = 2; i < n->n_inputs; i++) {
        const fr_value *b = fr_node_in(g, n, i);
        if (!b) continue;
        int64_t cnt = 1;
        for (int d = 0; d < b->rank; d++) cnt *= b->dims[d];
        if (b->dtype != x->dtype || cnt != 1)
            return fr_node_error(n, FR_ERR_SHAPE, "bound '%s' must be a one-element %s tensor", b->name,
                                 fr_dtype_name(x->dtype));
    }
    const fr_value *target = fr_node_in(g, n, (int)which + 1);
    if (!target)
        return fr_node_error(n, FR_ERR_GRAPH, "input=%lld names an omitted bound", (long long)which);
    fr_infer_set(g, n, 0, target->dtype, target->rank, target->dims);
    return FR_OK;
}

/* One bound: its input t when present (*has), else the float attribute of legacy Clip when
 * set, else *v stays unbounded. */
static fr_status cg_bound(const fr_node *n, const fr_tensor *t, const char *attr, int *has, double *v)
{
    if (t) {
        *v = fr_tensor_get_f64(t, 0);
        *has = 1;
    } else if (fr_node_attr(n, attr)) {
        float f;
        FR_TRY(fr_node_attr_float(n, attr, 0, &f));
        *v = f;
    }
    return FR_OK;
}

static fr_status cg_bounds(const fr_kernel_ctx *ctx, clip_bounds *b)
{
    const fr_tensor *tl = ctx->n_in > 2 ? ctx->in[2] : NULL, *th = ctx->n_in > 3 ? ctx->in[3] : NULL;
    b->lo = -INFINITY;
    b->hi = INFINITY;
    b->has_lo = b->has_hi = 0;
    FR_TRY(cg_bound(ctx->node, tl, "min", &b->has_lo, &b->lo));
    return cg_bound(ctx->node, th, "max", &b->has_hi, &b->hi);
}

static fr_status cg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    int64_t which;
    FR_TRY(cg_input(n, &which));
    const fr_tensor *dy = ctx->n_in > 1 ? ctx->in[0] : NULL, *x = ctx->n_in > 1 ? ctx->in[1] : NULL;
    fr_tensor *out = ctx->out[0];
    if (!dy || !x || !out) return fr_node_error(n, FR_ERR_GRAPH, "needs dy, x and an output");
    const fr_dtype dt = x->dtype;
    const int64_t cnt = fr_tensor_numel(x);
    if (!is_f(dt) || dy->dtype != dt || out->dtype != dt || fr_tensor_numel(dy) != cnt)
        return fr_node_error(n, FR_ERR_SHAPE, "dy and x must be float32/float64 of one shape and dtype");
    for (int i = 2; i < ctx->n_in; i++)
        if (ctx->in[i] && (ctx->in[i]->dtype != dt || fr_tensor_numel(ctx->in[i]) != 1))
            return fr_node_error(n, FR_ERR_SHAPE, "bound %d must be a one-element %s tensor", i - 2,
                                 fr_dtype_name(dt));
    clip_bounds b;
    FR_TRY(cg_bounds(ctx, &b));
    if (which == 0) {
        if (fr_tensor_numel(out) != cnt)
            return fr_node_error(n, FR_ERR_SHAPE, "output must have x's shape");
        for (int64_t i = 0; i < cnt; i++) {
            double v = rd(x->data, dt, i);
            wr(out->data, dt, i, v >= b.lo && v <= b.hi ? rd(dy->data, dt, i) : 0.0);
        }
        return FR_OK;
    }
    if (fr_tensor_numel(out) != 1) return fr_node_error(n, FR_ERR_SHAPE, "output must hold one element");
    double acc = 0;
    for (int64_t i = 0; i < cnt; i++) {
        double v = rd(x->data, dt, i);
        int take = which == 1 ? v < b.lo && (!b.has_hi || b.lo < b.hi)
                              : v > b.hi || (b.has_lo && b.hi < b.lo);
        if (take) acc += rd(dy->data, dt, i);
    }
    wr(out->data, dt, 0, acc);
    return FR_OK;
}

/* ---- the table ---- */

const fr_op_def fr_ops_elementwise_grad[] = {
    {"ActivationGrad", FR_DOMAIN_FP8RUN, 1, ag_infer, ag_cpu, NULL, 0},
    {"PowGrad", FR_DOMAIN_FP8RUN, 1, pg_infer, pg_cpu, NULL, 0},
    {"FmodGrad", FR_DOMAIN_FP8RUN, 1, fg_infer, fg_cpu, NULL, 0},
    {"ExtremumGrad", FR_DOMAIN_FP8RUN, 1, eg_infer, eg_cpu, NULL, 0},
    {"ClipGrad", FR_DOMAIN_FP8RUN, 1, cg_infer, cg_cpu, NULL, 0},
    {0},
};
