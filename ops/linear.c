/* Linear, LinearGradData, LinearGradWeight (domain ai.fp8run): see linear.h for the contract.
 * This file: shape inference, the gradient rule and the op table; the attributes are read in
 * linear_attrs.c (below the kernels, which read them too), the CPU kernels and their GEMM
 * emulation (the values the GPU's tensor cores multiply, in a fixed float32 summation order) are
 * in linear_cpu.c. */
#include "ops/linear.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "graph/fp8_format.h"
#include "graph/fp8_scaling.h"
#include "graph/option_choices.h"

typedef fr_lin_attrs lin_cfg;

static fr_status read_cfg(const fr_node *n, lin_cfg *c) { return fr_lin_read_attrs(n, c); }

static int delayed_fp8(const lin_cfg *c) { return c->prec == FR_LIN_FP8 && c->recipe == FR_LIN_DELAYED; }

/* ---- shape inference ---- */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t lead_numel(const fr_value *v) /* product of all dims but the last */
{
    int64_t m = 1;
    for (int d = 0; d + 1 < v->rank; d++) m *= v->dims[d];
    return m;
}

static fr_status check_float(const fr_node *n, const fr_value *v, const char *role)
{
    if (v->dtype != FR_F32 && v->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s '%s' has dtype %s; Linear computes on "
                             "float32 (or float64 in fp32 precision)", role, v->name,
                             fr_dtype_name(v->dtype));
    return FR_OK;
}

/* An activation or output gradient (X, dY): W's dtype, or bfloat16 with a float32 W in bf16 /
 * fp8 precision (widened exactly by the kernels). */
static fr_status check_act(const fr_node *n, const fr_value *v, const fr_value *w, const lin_cfg *c,
                           const char *role)
{
    if (v->dtype == FR_BF16) {
        if (c->prec == FR_LIN_FP32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s '%s' is bfloat16, which needs precision bf16 "
                                 "or fp8 (precision is fp32)", role, v->name);
        if (w->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "a bfloat16 %s '%s' needs a float32 weight ('%s' "
                                 "is %s)", role, v->name, w->name, fr_dtype_name(w->dtype));
        return FR_OK;
    }
    FR_TRY(check_float(n, v, role));
    if (v->dtype != w->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "%s '%s' (%s) and weight '%s' (%s) differ in dtype", role,
                             v->name, fr_dtype_name(v->dtype), w->name, fr_dtype_name(w->dtype));
    return FR_OK;
}

/* A [1] float32 scale state input: required when `want`, absent otherwise. */
static fr_status check_scale_input(fr_graph *g, const fr_node *n, int idx, int want, const char *role)
{
    const fr_value *v = fr_node_in(g, n, idx);
    if (!want) {
        if (v)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input %d (%s '%s') is only used by "
                                 "fp8 precision with the delayed recipe", idx, role, v->name);
        return FR_OK;
    }
    if (!v)
        return fr_node_error(n, FR_ERR_GRAPH, "the delayed fp8 recipe needs the %s state input "
                             "(input %d)", role, idx);
    int64_t numel = 1;
    for (int d = 0; d < v->rank; d++) numel *= v->dims[d];
    if (v->dtype != FR_F32 || v->rank < 0 || numel != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "%s '%s' must be a float32 tensor of one element",
                             role, v->name);
    return FR_OK;
}

/* W's [K, N] from its shape and transB; X's last dim must equal K. */
static fr_status weight_dims(const fr_node *n, const fr_value *w, int transB, int64_t *K, int64_t *N)
{
    if (w->rank != 2) {
        char s[128];
        return fr_node_error(n, FR_ERR_SHAPE, "weight '%s' must be 2-D, got %s", w->name,
                             fr_shape_str(w->rank, w->dims, s, sizeof s));
    }
    *K = transB ? w->dims[1] : w->dims[0];
    *N = transB ? w->dims[0] : w->dims[1];
    return FR_OK;
}

static fr_status check_dtype_prec(const fr_node *n, const fr_value *x, const lin_cfg *c)
{
    if (x->dtype == FR_F64 && c->prec != FR_LIN_FP32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "float64 tensors run in fp32 precision only "
                             "(precision is %s)", fr_lin_precision_name(c->prec));
    return FR_OK;
}

static void set_amax_out(fr_graph *g, const fr_node *n, int o)
{
    int64_t one = 1;
    fr_infer_set(g, n, o, FR_F32, 1, &one);
}

static fr_status linear_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    FR_TRY(fr_infer_require_inputs(g, n, 2, FR_LIN_N_IN));
    if (n->n_outputs < 1 || n->n_outputs > FR_LIN_N_OUT || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected Y and up to 4 optional ones",
                             n->n_outputs);
    const fr_value *x = fr_node_in(g, n, 0), *w = fr_node_in(g, n, 1), *b = fr_node_in(g, n, 2);
    FR_TRY(check_float(n, w, "weight"));
    if (x->dtype == FR_F8E4M3) { /* X's codes from an fp8 producer (SwiGLUQuantize) */
        if (!delayed_fp8(&c) || w->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "input '%s' given as E4M3 codes needs fp8 precision with the "
                                 "delayed recipe and a float32 weight",
                                 x->name);
        if (fr_node_out(g, n, FR_LIN_OUT_XQ) || fr_node_out(g, n, FR_LIN_OUT_XQ_SINV) ||
            fr_node_out(g, n, FR_LIN_OUT_AMAX_X))
            return fr_node_error(n, FR_ERR_GRAPH,
                                 "input '%s' comes as codes: their producer writes amax_x, and "
                                 "there is no Xq",
                                 x->name);
    } else {
        FR_TRY(check_act(n, x, w, &c, "input"));
    }
    FR_TRY(check_dtype_prec(n, w, &c));
    int64_t K, N;
    FR_TRY(weight_dims(n, w, c.transB, &K, &N));
    char sx[128], sw[128];
    if (x->rank < 1 || x->dims[x->rank - 1] != K)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s %s does not match weight '%s' %s %s "
                             "(transB=%d: want X [..., %lld])", x->name,
                             fr_shape_str(x->rank, x->dims, sx, sizeof sx), fr_dtype_name(x->dtype),
                             w->name, fr_shape_str(w->rank, w->dims, sw, sizeof sw),
                             fr_dtype_name(w->dtype), c.transB, (long long)K);
    if (b) {
        int ok = b->dtype == w->dtype && ((b->rank == 1 && b->dims[0] == N) ||
                                          (b->rank == 2 && b->dims[0] == 1 && b->dims[1] == N && x->rank >= 2));
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE, "bias '%s' %s %s must be [%lld] (or [1, %lld]) %s",
                                 b->name, fr_shape_str(b->rank, b->dims, sx, sizeof sx),
                                 fr_dtype_name(b->dtype), (long long)N, (long long)N,
                                 fr_dtype_name(w->dtype));
    }
    int dl = delayed_fp8(&c);
    FR_TRY(check_scale_input(g, n, FR_LIN_IN_SCALE_X, dl, "scale_x"));
    FR_TRY(check_scale_input(g, n, FR_LIN_IN_SCALE_W, dl, "scale_w"));
    if (dl && fr_node_in(g, n, FR_LIN_IN_SCALE_DY))
        FR_TRY(check_scale_input(g, n, FR_LIN_IN_SCALE_DY, 1, "scale_dy"));
    else
        FR_TRY(check_scale_input(g, n, FR_LIN_IN_SCALE_DY, 0, "scale_dy"));

    int64_t dims[FR_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[x->rank - 1] = N;
    /* y_dtype bfloat16: Y = bf16(float32 sum + bf16(bias)); a bias is float32, as W */
    if (c.y_bf16 && w->dtype != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "y_dtype bfloat16 needs a float32 weight (and bias)");
    fr_infer_set(g, n, FR_LIN_OUT_Y, c.y_bf16 ? FR_BF16 : w->dtype, x->rank, dims);
    int has_xq = fr_node_out(g, n, FR_LIN_OUT_XQ) != NULL;
    int has_sinv = fr_node_out(g, n, FR_LIN_OUT_XQ_SINV) != NULL;
    int has_amax = fr_node_out(g, n, FR_LIN_OUT_AMAX_X) || fr_node_out(g, n, FR_LIN_OUT_AMAX_W);
    if (c.prec == FR_LIN_BF16 && !has_sinv && !has_amax) { /* Xq: X's bf16 copy, no scale */
        if (has_xq) fr_infer_set(g, n, FR_LIN_OUT_XQ, FR_BF16, x->rank, x->dims);
        return FR_OK;
    }
    if (c.prec != FR_LIN_FP8 && (has_xq || has_sinv || has_amax))
        return fr_node_error(n, FR_ERR_GRAPH, "outputs Xq_scale_inv, amax_x, amax_w exist in fp8 "
                             "precision only, Xq in bf16 and fp8 (precision is %s)",
                             fr_lin_precision_name(c.prec));
    if (has_xq != has_sinv)
        return fr_node_error(n, FR_ERR_GRAPH, "outputs Xq and Xq_scale_inv come together (the "
                             "backward needs the scale of the saved codes)");
    if (has_xq) {
        int64_t sd[2] = {ceil_div(lead_numel(x), FR_LIN_BLOCK), K}, one = 1;
        int64_t xt[2] = {K, lead_numel(x)}; /* per tensor: the codes transposed, [K, tokens] */
        if (c.recipe == FR_LIN_BLOCKWISE) {
            fr_infer_set(g, n, FR_LIN_OUT_XQ, FR_F8E4M3, x->rank, x->dims);
            fr_infer_set(g, n, FR_LIN_OUT_XQ_SINV, FR_F32, 2, sd);
        } else {
            fr_infer_set(g, n, FR_LIN_OUT_XQ, FR_F8E4M3, 2, xt);
            fr_infer_set(g, n, FR_LIN_OUT_XQ_SINV, FR_F32, 1, &one);
        }
    }
    set_amax_out(g, n, FR_LIN_OUT_AMAX_X);
    set_amax_out(g, n, FR_LIN_OUT_AMAX_W);
    return FR_OK;
}

/* LinearGradData(dY, W, scale_w?, scale_dy?) -> (dX, amax_dy?, dYq?, dYq_scale_inv?) */
static fr_status grad_data_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    FR_TRY(fr_infer_require_inputs(g, n, 2, 4));
    if (n->n_outputs < 1 || n->n_outputs > 4 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected dX and optionally amax_dy, "
                             "dYq, dYq_scale_inv", n->n_outputs);
    const fr_value *dy = fr_node_in(g, n, 0), *w = fr_node_in(g, n, 1);
    FR_TRY(check_float(n, w, "weight"));
    const int dy_codes = dy->dtype == FR_F8E5M2 || dy->dtype == FR_F8E4M3;
    if (dy_codes) { /* dY's codes from an fp8 producer (SwiGLUGradQuantize) */
        if (!delayed_fp8(&c) || w->dtype != FR_F32 || dy->dtype != c.dy_fmt)
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "output gradient '%s' given as %s codes needs fp8 precision with the delayed "
                                 "recipe, a float32 weight and codes in the dY format (%s)",
                                 dy->name, fr_dtype_name(dy->dtype), fr_dtype_name(c.dy_fmt));
        if (fr_node_out(g, n, 1) || fr_node_out(g, n, 2) || fr_node_out(g, n, 3))
            return fr_node_error(n, FR_ERR_GRAPH,
                                 "output gradient '%s' comes as codes: their producer writes amax_dy, dYq and "
                                 "dYq_scale_inv",
                                 dy->name);
    } else {
        FR_TRY(check_act(n, dy, w, &c, "output gradient"));
    }
    FR_TRY(check_dtype_prec(n, w, &c));
    if (c.dx_bf16 && w->dtype != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dx_dtype bfloat16 needs a float32 weight");
    fr_dtype dx_dt = c.dx_bf16 ? FR_BF16 : w->dtype;
    int64_t K, N;
    FR_TRY(weight_dims(n, w, c.transB, &K, &N));
    char s1[128], s2[128];
    if (dy->rank < 1 || dy->dims[dy->rank - 1] != N)
        return fr_node_error(n, FR_ERR_SHAPE, "output gradient '%s' %s does not match weight '%s' %s",
                             dy->name, fr_shape_str(dy->rank, dy->dims, s1, sizeof s1), w->name,
                             fr_shape_str(w->rank, w->dims, s2, sizeof s2));
    FR_TRY(check_scale_input(g, n, 2, delayed_fp8(&c), "scale_w"));
    FR_TRY(check_scale_input(g, n, 3, delayed_fp8(&c), "scale_dy"));
    if (c.prec != FR_LIN_FP8 && fr_node_out(g, n, 1))
        return fr_node_error(n, FR_ERR_GRAPH, "output amax_dy exists in fp8 precision only");
    int has_q = fr_node_out(g, n, 2) != NULL, has_qs = fr_node_out(g, n, 3) != NULL;
    if (c.prec == FR_LIN_BF16 && !has_qs) { /* dYq: dY's bf16 copy, dY's shape, no scale */
        int64_t dims[FR_MAX_RANK];
        memcpy(dims, dy->dims, sizeof dims);
        dims[dy->rank - 1] = K;
        fr_infer_set(g, n, 0, dx_dt, dy->rank, dims);
        if (has_q) fr_infer_set(g, n, 2, FR_BF16, dy->rank, dy->dims);
        return FR_OK;
    }
    if ((has_q || has_qs) && (c.prec != FR_LIN_FP8 || c.recipe == FR_LIN_BLOCKWISE))
        return fr_node_error(n, FR_ERR_GRAPH, "outputs dYq, dYq_scale_inv exist with the per-tensor "
                             "fp8 recipes only, dYq alone in bf16 (precision %s, recipe %s)", fr_lin_precision_name(c.prec),
                             fr_lin_recipe_name(c.recipe));
    if (has_q != has_qs)
        return fr_node_error(n, FR_ERR_GRAPH, "outputs dYq and dYq_scale_inv come together");
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, dy->dims, sizeof dims);
    dims[dy->rank - 1] = K;
    fr_infer_set(g, n, 0, dx_dt, dy->rank, dims);
    set_amax_out(g, n, 1);
    if (has_q) { /* dY^T codes [N, M], as the weight-gradient GEMM consumes them */
        int64_t qd[2] = {N, lead_numel(dy)};
        fr_infer_set(g, n, 2, c.dy_fmt, 2, qd);
        set_amax_out(g, n, 3);
    }
    return FR_OK;
}

/* A saved Xq of a per-tensor recipe: the codes transposed, [K, tokens] */
static int saved_t(const lin_cfg *c, const fr_value *xs)
{
    return xs->dtype == FR_F8E4M3 && c->recipe != FR_LIN_BLOCKWISE;
}

/* K and the token count of Xs: [K, tokens] (saved_t) or [..., K] */
static void xs_km(const lin_cfg *c, const fr_value *xs, int64_t *K, int64_t *M)
{
    int t = saved_t(c, xs) && xs->rank == 2;
    *K = t ? xs->dims[0] : xs->dims[xs->rank - 1];
    *M = t ? xs->dims[1] : lead_numel(xs);
}

/* x_glu (linear.h): Xs is gate_up [..., 2K], float32 or bfloat16; *K (its last dim) halved */
static fr_status glu_k(const fr_node *n, const lin_cfg *c, const fr_value *xs, int64_t *K)
{
    if (c->x_glu < 0) return FR_OK;
    if ((xs->dtype != FR_F32 && xs->dtype != FR_BF16) || *K % 2 != 0) {
        char s1[128];
        return fr_node_error(n, FR_ERR_SHAPE,
                             "x_glu: input '%s' (%s %s) must be a GLU's gate_up, float32 or "
                             "bfloat16 with an even last dim",
                             xs->name, fr_dtype_name(xs->dtype), fr_shape_str(xs->rank, xs->dims, s1, sizeof s1));
    }
    *K /= 2;
    return FR_OK;
}

/* The saved input's scale_inv (input 2): [1], or [ceil(tokens/128), K] for "block"; the
 * per-tensor codes must be 2-D ([K, tokens]). */
static fr_status check_saved_scale(const fr_node *n, const lin_cfg *c, const fr_value *xs, const fr_value *s)
{
    if (saved_t(c, xs) && xs->rank != 2) {
        char s1[128];
        return fr_node_error(n, FR_ERR_SHAPE, "the saved input '%s' %s must be the transposed codes [K, tokens] "
                             "(recipe %s)", xs->name, fr_shape_str(xs->rank, xs->dims, s1, sizeof s1),
                             fr_lin_recipe_name(c->recipe));
    }
    int64_t K = xs->dims[xs->rank - 1];
    int64_t want0 = c->recipe == FR_LIN_BLOCKWISE ? ceil_div(lead_numel(xs), FR_LIN_BLOCK) : 1;
    int want_rank = c->recipe == FR_LIN_BLOCKWISE ? 2 : 1;
    int sok = s && s->dtype == FR_F32 && s->rank == want_rank && s->dims[0] == want0 &&
              (want_rank == 1 || s->dims[1] == K);
    if (!sok)
        return fr_node_error(n, FR_ERR_SHAPE, "the saved input '%s' needs its scale_inv as input "
                             "2 (float32 %s)", xs->name,
                             c->recipe == FR_LIN_BLOCKWISE ? "[ceil(tokens/128), K]" : "[1]");
    return FR_OK;
}

/* LinearGradWeight with Ys = the dYq output of LinearGradData: codes [N, M] in the dY format,
 * ys_scale (input 3) their scale_inv [1]; per-tensor fp8 only; amax_dy comes from the data
 * gradient, so there is none here. */
static fr_status grad_weight_infer_dyq(fr_graph *g, const fr_node *n, const lin_cfg *c, const fr_value *xs,
                                       const fr_value *dyq, const fr_value *s)
{
    if (c->prec != FR_LIN_FP8 || c->recipe == FR_LIN_BLOCKWISE || dyq->dtype != c->dy_fmt)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "a quantized output gradient '%s' (%s) needs fp8 "
                             "precision with a per-tensor recipe and the dY format %s", dyq->name,
                             fr_dtype_name(dyq->dtype), fr_dtype_name(c->dy_fmt));
    const fr_value *ys = fr_node_in(g, n, 3);
    if (!ys || ys->dtype != FR_F32 || ys->rank != 1 || ys->dims[0] != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "the quantized output gradient '%s' needs its scale_inv "
                             "as input 3 (float32 [1])", dyq->name);
    if (fr_node_out(g, n, 1))
        return fr_node_error(n, FR_ERR_GRAPH, "output amax_dy is the data gradient's when the output "
                             "gradient comes quantized");
    int saved = xs->dtype == FR_F8E4M3;
    if (saved)
        FR_TRY(check_saved_scale(n, c, xs, s));
    else {
        if (xs->dtype != FR_F32 && xs->dtype != FR_BF16)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' (%s) must be float32 or bfloat16 in fp8 "
                                 "precision", xs->name, fr_dtype_name(xs->dtype));
        FR_TRY(check_scale_input(g, n, 2, delayed_fp8(c), "scale_x"));
    }
    char s1[128], s2[128];
    int64_t K = 0, M = 0;
    if (xs->rank >= 1) xs_km(c, xs, &K, &M);
    if (xs->rank < 1 || dyq->rank != 2 || dyq->dims[1] != M)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s and quantized output gradient '%s' %s "
                             "([N, tokens]) differ in tokens", xs->name,
                             fr_shape_str(xs->rank, xs->dims, s1, sizeof s1), dyq->name,
                             fr_shape_str(dyq->rank, dyq->dims, s2, sizeof s2));
    int64_t N = dyq->dims[0];
    FR_TRY(glu_k(n, c, xs, &K));
    int64_t dw[2] = {c->transB ? N : K, c->transB ? K : N};
    fr_infer_set(g, n, 0, FR_F32, 2, dw);
    return FR_OK;
}

/* X (or its saved copy) and dY of a weight gradient agree in all but the last dim; K and N are
 * their last dims. xt: Xs is the per-tensor saved codes [K, tokens] (saved_t). */
static fr_status wgrad_kn(const fr_node *n, const fr_value *xs, const fr_value *dy, int xt, int64_t *K, int64_t *N)
{
    char s1[128], s2[128];
    if (xt) {
        if (xs->rank != 2 || dy->rank < 1 || xs->dims[1] != lead_numel(dy))
            return fr_node_error(n, FR_ERR_SHAPE, "saved input '%s' %s ([K, tokens]) and output gradient '%s' %s "
                                 "differ in tokens", xs->name, fr_shape_str(xs->rank, xs->dims, s1, sizeof s1),
                                 dy->name, fr_shape_str(dy->rank, dy->dims, s2, sizeof s2));
        *K = xs->dims[0];
        *N = dy->dims[dy->rank - 1];
        return FR_OK;
    }
    int ok = xs->rank >= 1 && xs->rank == dy->rank;
    for (int d = 0; ok && d + 1 < xs->rank; d++) ok = xs->dims[d] == dy->dims[d];
    if (!ok)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s and output gradient '%s' %s must agree "
                             "in all but the last dim", xs->name,
                             fr_shape_str(xs->rank, xs->dims, s1, sizeof s1), dy->name,
                             fr_shape_str(dy->rank, dy->dims, s2, sizeof s2));
    *K = xs->dims[xs->rank - 1];
    *N = dy->dims[dy->rank - 1];
    return FR_OK;
}

/* LinearGradWeight in bf16 precision with Xs and/or Ys already rounded to bf16 (the forward's
 * Xq, the data gradient's dYq), the other float32: no scale inputs, no amax_dy. */
static fr_status grad_weight_infer_bf16(fr_graph *g, const fr_node *n, const lin_cfg *c, const fr_value *xs,
                                        const fr_value *dy)
{
    if (c->prec != FR_LIN_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "bfloat16 inputs ('%s' %s, '%s' %s) need bf16 or fp8 precision "
                             "(precision is %s)", xs->name, fr_dtype_name(xs->dtype), dy->name,
                             fr_dtype_name(dy->dtype), fr_lin_precision_name(c->prec));
    if ((xs->dtype != FR_BF16 && xs->dtype != FR_F32) || (dy->dtype != FR_BF16 && dy->dtype != FR_F32))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' (%s) and output gradient '%s' (%s) must each "
                             "be float32 or bfloat16", xs->name, fr_dtype_name(xs->dtype), dy->name,
                             fr_dtype_name(dy->dtype));
    if (fr_node_in(g, n, 2) || fr_node_in(g, n, 3))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "scale inputs exist in fp8 precision only");
    if (fr_node_out(g, n, 1))
        return fr_node_error(n, FR_ERR_GRAPH, "output amax_dy exists in fp8 precision only");
    int64_t K, N;
    FR_TRY(wgrad_kn(n, xs, dy, 0, &K, &N));
    int64_t dw[2] = {c->transB ? N : K, c->transB ? K : N};
    fr_infer_set(g, n, 0, FR_F32, 2, dw);
    return FR_OK;
}

/* LinearGradWeight(Xs, Ys, xs_scale?, ys_scale?) -> (dW, amax_dy?) */
static fr_status grad_weight_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    FR_TRY(fr_infer_require_inputs(g, n, 2, 4));
    if (n->n_outputs < 1 || n->n_outputs > 2 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d outputs, expected dW and optionally amax_dy",
                             n->n_outputs);
    const fr_value *xs = fr_node_in(g, n, 0), *dy = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    if (dy->dtype == FR_F8E4M3 || dy->dtype == FR_F8E5M2)
        return grad_weight_infer_dyq(g, n, &c, xs, dy, s);
    /* fp8 quantizes a bfloat16 X / dY as the float32 tensor of the same values */
    int fp8 = c.prec == FR_LIN_FP8, x_bf = fp8 && xs->dtype == FR_BF16, y_bf = fp8 && dy->dtype == FR_BF16;
    if ((xs->dtype == FR_BF16 && !x_bf) || (dy->dtype == FR_BF16 && !y_bf))
        return grad_weight_infer_bf16(g, n, &c, xs, dy);
    if (!y_bf) FR_TRY(check_float(n, dy, "output gradient"));
    FR_TRY(check_dtype_prec(n, dy, &c));
    int saved = xs->dtype == FR_F8E4M3;
    if (saved) {
        if (!fp8)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "a saved float8e4m3fn input '%s' needs fp8 "
                                 "precision", xs->name);
        if (dy->dtype != FR_F32 && !y_bf)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "output gradient must be float32 or bfloat16 in "
                                 "fp8 precision");
    } else {
        if (!x_bf) FR_TRY(check_float(n, xs, "input"));
        fr_dtype xt = x_bf ? FR_F32 : xs->dtype, yt = y_bf ? FR_F32 : dy->dtype;
        if (xt != yt)
            return fr_node_error(n, FR_ERR_SHAPE, "input '%s' (%s) and output gradient '%s' (%s) differ in "
                                 "dtype", xs->name, fr_dtype_name(xs->dtype), dy->name, fr_dtype_name(dy->dtype));
    }
    int64_t K, N;
    FR_TRY(wgrad_kn(n, xs, dy, saved && saved_t(&c, xs), &K, &N));
    FR_TRY(glu_k(n, &c, xs, &K));
    if (saved) {
        FR_TRY(check_saved_scale(n, &c, xs, s));
    } else {
        FR_TRY(check_scale_input(g, n, 2, delayed_fp8(&c), "scale_x"));
    }
    FR_TRY(check_scale_input(g, n, 3, delayed_fp8(&c), "scale_dy"));
    if (c.prec != FR_LIN_FP8 && fr_node_out(g, n, 1))
        return fr_node_error(n, FR_ERR_GRAPH, "output amax_dy exists in fp8 precision only");
    int64_t dw[2] = {c.transB ? N : K, c.transB ? K : N};
    fr_infer_set(g, n, 0, y_bf ? FR_F32 : dy->dtype, 2, dw);
    set_amax_out(g, n, 1);
    return FR_OK;
}

/* ---- gradient rule ---- */

/* Add a backward node carrying the forward node's attributes. Output 0 gets an automatic name;
 * output 1 (when amax_name is given) is named amax_name; with q_out, output 2 (dYq) and, when
 * n_q is 2, output 3 (its scale_inv) are added and returned there. Inputs after the last
 * present one are dropped. */
static fr_status emit(fr_grad_ctx *ctx, const char *op_type, int n_in, const int *in,
                      const char *amax_name, int *out0, int *q_out, int n_q)
{
    fr_graph *g = ctx->g;
    while (n_in > 2 && in[n_in - 1] < 0) n_in--;
    char base[600], qname[700];
    snprintf(base, sizeof base, "%s_grad/%s_%d", g->nodes[ctx->node_id].name, op_type, g->n_nodes);
    int outs[4] = {-1, -1, -1, -1}, nid;
    FR_TRY(fr_graph_add_unique_value(g, base, &outs[0]));
    if (amax_name) FR_TRY(fr_graph_add_unique_value(g, amax_name, &outs[1]));
    if (q_out) {
        snprintf(qname, sizeof qname, "%s/dYq", base);
        FR_TRY(fr_graph_add_unique_value(g, qname, &outs[2]));
        if (n_q > 1) {
            snprintf(qname, sizeof qname, "%s/dYq_scale_inv", base);
            FR_TRY(fr_graph_add_unique_value(g, qname, &outs[3]));
        }
    }
    int n_out = q_out ? 2 + n_q : amax_name ? 2 : 1;
    FR_TRY(fr_graph_add_node(g, op_type, FR_DOMAIN_FP8RUN, base, n_in, in, n_out, outs, &nid));
    g->nodes[nid].op = fr_linear_op(op_type);
    const fr_node *fwd = &g->nodes[ctx->node_id];
    for (int i = 0; i < fwd->n_attrs; i++) {
        const fr_attr *a = &g->nodes[ctx->node_id].attrs[i];
        if (a->type == FR_ATTR_INT)
            FR_TRY(fr_node_set_attr_int(&g->nodes[nid], a->name, a->i));
        else if (a->type == FR_ATTR_STRING)
            FR_TRY(fr_node_set_attr_string(&g->nodes[nid], a->name, a->s ? a->s : ""));
    }
    FR_TRY(fr_grad_finish(ctx, nid));
    *out0 = outs[0];
    if (q_out) {
        q_out[0] = outs[2];
        q_out[1] = outs[3];
    }
    return FR_OK;
}

static int in_or_none(const fr_node *n, int i) { return i < n->n_inputs ? n->inputs[i] : -1; }
static int out_or_none(const fr_node *n, int o) { return o < n->n_outputs ? n->outputs[o] : -1; }

static fr_status linear_grad(fr_grad_ctx *ctx)
{
    int dy = ctx->dout[FR_LIN_OUT_Y];
    if (dy < 0) return FR_OK;
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const char *prefix;
    FR_TRY(fr_node_attr_string(n, "state_prefix", n->name, &prefix));
    char amax_name[600];
    snprintf(amax_name, sizeof amax_name, "%s/amax_dy", prefix);
    int dl = delayed_fp8(&c);
    int x = n->inputs[FR_LIN_IN_X], w = n->inputs[FR_LIN_IN_W], b = in_or_none(n, FR_LIN_IN_B);
    int scale_x = in_or_none(n, FR_LIN_IN_SCALE_X), scale_w = in_or_none(n, FR_LIN_IN_SCALE_W);
    int scale_dy = in_or_none(n, FR_LIN_IN_SCALE_DY);
    int xq = out_or_none(n, FR_LIN_OUT_XQ), xq_sinv = out_or_none(n, FR_LIN_OUT_XQ_SINV);
    if (dl && scale_dy < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "the delayed fp8 recipe needs the scale_dy state "
                             "input (input 5) to build the backward");
    int need_x = ctx->need_din[FR_LIN_IN_X], need_w = ctx->need_din[FR_LIN_IN_W];
    int need_b = b >= 0 && FR_LIN_IN_B < n->n_inputs && ctx->need_din[FR_LIN_IN_B];
    int amax_done = 0;
    /* both gradients: dY is converted once, by the data gradient, which hands it over: per-tensor
     * fp8 as codes transposed (as the weight-gradient GEMM reads them) with their scale_inv, bf16
     * as dY's bf16 copy in dY's layout (the bf16 GEMM reads either transpose) */
    int bf16 = c.prec == FR_LIN_BF16;
    int share_dy = need_x && need_w && ((c.prec == FR_LIN_FP8 && c.recipe != FR_LIN_BLOCKWISE) || bf16);
    int dyq[2] = {-1, -1};
    if (need_x) {
        int in[4] = {dy, w, dl ? scale_w : -1, dl ? scale_dy : -1};
        FR_TRY(emit(ctx, "LinearGradData", 4, in, dl ? amax_name : NULL, &ctx->din[FR_LIN_IN_X],
                    share_dy ? dyq : NULL, bf16 ? 1 : 2));
        amax_done = dl;
    }
    if (need_w) {
        /* the forward's saved Xq: fp8 codes with their scale_inv, or X's bf16 copy (a bfloat16
         * X is that copy already: read it, so the pass that saves Xq may drop the output) */
        int saved = xq >= 0 && (xq_sinv >= 0 || (bf16 && ctx->g->values[x].dtype != FR_BF16));
        int in[4] = {saved ? xq : x, share_dy ? dyq[0] : dy, saved ? xq_sinv : (dl ? scale_x : -1),
                     share_dy ? dyq[1] : dl ? scale_dy : -1};
        FR_TRY(emit(ctx, "LinearGradWeight", 4, in, dl && !amax_done ? amax_name : NULL,
                    &ctx->din[FR_LIN_IN_W], NULL, 0));
    }
    if (need_b) FR_TRY(fr_grad_sum_to(ctx, dy, b, &ctx->din[FR_LIN_IN_B]));
    return FR_OK;
}

const fr_op_def fr_ops_linear[] = {
    {"Linear", FR_DOMAIN_FP8RUN, 1, linear_infer, fr_linear_cpu, linear_grad, 0},
    {"LinearGradData", FR_DOMAIN_FP8RUN, 1, grad_data_infer, fr_linear_grad_data_cpu, NULL, 0},
    {"LinearGradWeight", FR_DOMAIN_FP8RUN, 1, grad_weight_infer, fr_linear_grad_weight_cpu, NULL, 0},
    {0},
};

static int readers(const fr_graph *g, int v)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++) c += g->nodes[i].inputs[k] == v;
    return c;
}

int fr_lin_drop_unread_xq(fr_graph *g, fr_node *lin)
{
    int any = 0;
    for (int o = FR_LIN_OUT_XQ; o <= FR_LIN_OUT_XQ_SINV && o < lin->n_outputs; o++) {
        int v = lin->outputs[o];
        if (v < 0) continue;
        if (readers(g, v) || (g->values[v].flags & FR_VAL_OUTPUT)) return 0;
        any = 1;
    }
    for (int o = FR_LIN_OUT_XQ; o <= FR_LIN_OUT_XQ_SINV && o < lin->n_outputs; o++) {
        if (lin->outputs[o] >= 0) g->values[lin->outputs[o]].producer = -1;
        lin->outputs[o] = -1;
    }
    return any;
}

const fr_op_def *fr_linear_op(const char *op_type)
{
    for (const fr_op_def *d = fr_ops_linear; d->op_type; d++)
        if (strcmp(d->op_type, op_type) == 0) return d;
    return NULL;
}
