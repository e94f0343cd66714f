/* Linear, LinearGradData, LinearGradWeight (domain ai.fp8run): see linear.h for the contract.
 * Every float32 GEMM goes through gemm_f32(): each operand is "prepared" into a float32 buffer
 * holding exactly the values the GPU's tensor cores multiply (fp32 copy, bf16-rounded, or fp8
 * codes times their scale_inv), zero-padded to the pad multiple, and gemm_kseq() multiplies
 * them with a fixed float32 summation order. float64 (fp32 precision, for gradient checks) uses
 * cblas_dgemm. */
#include "linear.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/autodiff.h"
#include "../runtime/fp8_format.h"
#include "../runtime/fp8_scaling.h"
#include "../runtime/option_choices.h"

/* ---- attributes ---- */

static const char *const k_precisions[] = {FR_CHOICES_PRECISION NULL};
static const char *const k_recipes[] = {FR_CHOICES_RECIPE NULL};
_Static_assert(FR_CHOICE_COUNT(k_precisions) == FR_LIN_FP8 + 1, "FR_CHOICES_PRECISION follows fr_lin_precision");
_Static_assert(FR_CHOICE_COUNT(k_recipes) == FR_LIN_BLOCKWISE + 1, "FR_CHOICES_RECIPE follows fr_lin_recipe");

fr_status fr_lin_precision_parse(const char *s, fr_lin_precision *out)
{
    int k = fr_choice_find(k_precisions, s);
    if (k < 0) return fr_error(FR_ERR_UNSUPPORTED, "precision '%s' is not one of fp32, bf16, fp8", s);
    *out = (fr_lin_precision)k;
    return FR_OK;
}

const char *fr_lin_precision_name(fr_lin_precision p)
{
    return k_precisions[p == FR_LIN_FP8 ? 2 : p == FR_LIN_BF16 ? 1 : 0];
}

fr_status fr_lin_recipe_parse(const char *s, fr_lin_recipe *out)
{
    int k = fr_choice_find(k_recipes, s);
    if (k < 0) return fr_error(FR_ERR_UNSUPPORTED, "recipe '%s' is not one of delayed, current, block", s);
    *out = (fr_lin_recipe)k;
    return FR_OK;
}

const char *fr_lin_recipe_name(fr_lin_recipe r)
{
    return k_recipes[r == FR_LIN_BLOCKWISE ? 2 : r == FR_LIN_CURRENT ? 1 : 0];
}

typedef fr_lin_attrs lin_cfg;

fr_status fr_lin_read_attrs(const fr_node *n, fr_lin_attrs *c)
{
    int64_t tb, margin, pad;
    const char *prec, *recipe, *fmt;
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    FR_TRY(fr_node_attr_string(n, "precision", "fp32", &prec));
    FR_TRY(fr_node_attr_string(n, "recipe", "delayed", &recipe));
    FR_TRY(fr_node_attr_string(n, "fp8_format", "hybrid", &fmt));
    FR_TRY(fr_node_attr_int(n, "margin", 0, &margin));
    FR_TRY(fr_node_attr_int(n, "pad_multiple", 1, &pad));
    if (tb != 0 && tb != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "transB=%lld (must be 0 or 1)", (long long)tb);
    if (fr_lin_precision_parse(prec, &c->prec) != FR_OK || fr_lin_recipe_parse(recipe, &c->recipe) != FR_OK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s", fr_last_error());
    if (strcmp(fmt, "hybrid") == 0)
        c->dy_fmt = FR_F8E5M2;
    else if (strcmp(fmt, "e4m3") == 0)
        c->dy_fmt = FR_F8E4M3;
    else
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "fp8_format '%s' is not one of hybrid, e4m3", fmt);
    if (margin < -64 || margin > 64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "margin %lld is outside [-64, 64]", (long long)margin);
    if (pad < 1 || pad > 4096)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "pad_multiple %lld is outside [1, 4096]", (long long)pad);
    c->transB = (int)tb;
    c->margin = (int)margin;
    c->pad = pad;
    return FR_OK;
}

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
    FR_TRY(check_float(n, x, "input"));
    FR_TRY(check_float(n, w, "weight"));
    FR_TRY(check_dtype_prec(n, x, &c));
    int64_t K, N;
    FR_TRY(weight_dims(n, w, c.transB, &K, &N));
    char sx[128], sw[128];
    if (x->rank < 1 || x->dims[x->rank - 1] != K || w->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s %s does not match weight '%s' %s %s "
                             "(transB=%d: want X [..., %lld])", x->name,
                             fr_shape_str(x->rank, x->dims, sx, sizeof sx), fr_dtype_name(x->dtype),
                             w->name, fr_shape_str(w->rank, w->dims, sw, sizeof sw),
                             fr_dtype_name(w->dtype), c.transB, (long long)K);
    if (b) {
        int ok = b->dtype == x->dtype && ((b->rank == 1 && b->dims[0] == N) ||
                                          (b->rank == 2 && b->dims[0] == 1 && b->dims[1] == N && x->rank >= 2));
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE, "bias '%s' %s %s must be [%lld] (or [1, %lld]) %s",
                                 b->name, fr_shape_str(b->rank, b->dims, sx, sizeof sx),
                                 fr_dtype_name(b->dtype), (long long)N, (long long)N,
                                 fr_dtype_name(x->dtype));
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
    fr_infer_set(g, n, FR_LIN_OUT_Y, x->dtype, x->rank, dims);
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
        fr_infer_set(g, n, FR_LIN_OUT_XQ, FR_F8E4M3, x->rank, x->dims);
        int64_t sd[2] = {ceil_div(lead_numel(x), FR_LIN_BLOCK), K}, one = 1;
        if (c.recipe == FR_LIN_BLOCKWISE)
            fr_infer_set(g, n, FR_LIN_OUT_XQ_SINV, FR_F32, 2, sd);
        else
            fr_infer_set(g, n, FR_LIN_OUT_XQ_SINV, FR_F32, 1, &one);
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
    FR_TRY(check_float(n, dy, "output gradient"));
    FR_TRY(check_float(n, w, "weight"));
    FR_TRY(check_dtype_prec(n, dy, &c));
    int64_t K, N;
    FR_TRY(weight_dims(n, w, c.transB, &K, &N));
    char s1[128], s2[128];
    if (dy->rank < 1 || dy->dims[dy->rank - 1] != N || w->dtype != dy->dtype)
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
        fr_infer_set(g, n, 0, dy->dtype, dy->rank, dims);
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
    fr_infer_set(g, n, 0, dy->dtype, dy->rank, dims);
    set_amax_out(g, n, 1);
    if (has_q) { /* dY^T codes [N, M], as the weight-gradient GEMM consumes them */
        int64_t qd[2] = {N, lead_numel(dy)};
        fr_infer_set(g, n, 2, c.dy_fmt, 2, qd);
        set_amax_out(g, n, 3);
    }
    return FR_OK;
}

/* The saved input's scale_inv (input 2): [1], or [ceil(tokens/128), K] for "block". */
static fr_status check_saved_scale(const fr_node *n, const lin_cfg *c, const fr_value *xs, const fr_value *s)
{
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
        FR_TRY(check_float(n, xs, "input"));
        if (xs->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' must be float32 in fp8 precision", xs->name);
        FR_TRY(check_scale_input(g, n, 2, delayed_fp8(c), "scale_x"));
    }
    char s1[128], s2[128];
    if (xs->rank < 1 || dyq->rank != 2 || dyq->dims[1] != lead_numel(xs))
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s and quantized output gradient '%s' %s "
                             "([N, tokens]) differ in tokens", xs->name,
                             fr_shape_str(xs->rank, xs->dims, s1, sizeof s1), dyq->name,
                             fr_shape_str(dyq->rank, dyq->dims, s2, sizeof s2));
    int64_t K = xs->dims[xs->rank - 1], N = dyq->dims[0];
    int64_t dw[2] = {c->transB ? N : K, c->transB ? K : N};
    fr_infer_set(g, n, 0, FR_F32, 2, dw);
    return FR_OK;
}

/* X (or its saved copy) and dY of a weight gradient agree in all but the last dim; K and N are
 * their last dims. */
static fr_status wgrad_kn(const fr_node *n, const fr_value *xs, const fr_value *dy, int64_t *K, int64_t *N)
{
    char s1[128], s2[128];
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
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "bfloat16 inputs ('%s' %s, '%s' %s) need bf16 precision "
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
    FR_TRY(wgrad_kn(n, xs, dy, &K, &N));
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
    if (xs->dtype == FR_BF16 || dy->dtype == FR_BF16)
        return grad_weight_infer_bf16(g, n, &c, xs, dy);
    FR_TRY(check_float(n, dy, "output gradient"));
    FR_TRY(check_dtype_prec(n, dy, &c));
    int saved = xs->dtype == FR_F8E4M3;
    if (saved) {
        if (c.prec != FR_LIN_FP8)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "a saved float8e4m3fn input '%s' needs fp8 "
                                 "precision", xs->name);
        if (dy->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "output gradient must be float32 in fp8 precision");
    } else {
        FR_TRY(check_float(n, xs, "input"));
        if (xs->dtype != dy->dtype)
            return fr_node_error(n, FR_ERR_SHAPE, "input '%s' and output gradient '%s' differ in dtype",
                                 xs->name, dy->name);
    }
    int64_t K, N;
    FR_TRY(wgrad_kn(n, xs, dy, &K, &N));
    if (saved) {
        FR_TRY(check_saved_scale(n, &c, xs, s));
    } else {
        FR_TRY(check_scale_input(g, n, 2, delayed_fp8(&c), "scale_x"));
    }
    FR_TRY(check_scale_input(g, n, 3, delayed_fp8(&c), "scale_dy"));
    if (c.prec != FR_LIN_FP8 && fr_node_out(g, n, 1))
        return fr_node_error(n, FR_ERR_GRAPH, "output amax_dy exists in fp8 precision only");
    int64_t dw[2] = {c.transB ? N : K, c.transB ? K : N};
    fr_infer_set(g, n, 0, dy->dtype, 2, dw);
    set_amax_out(g, n, 1);
    return FR_OK;
}

/* dst[i] = bf16(src[i]): the bytes the GPU's bf16 operands hold (Xq, dYq in bf16 precision) */
static void round_bf16(const float *src, int64_t count, uint16_t *dst)
{
    for (int64_t i = 0; i < count; i++) dst[i] = fr_f32_to_bf16(src[i]);
}

/* ---- GEMM emulation ---- */

typedef struct operand {
    const float *src;      /* float32 storage [rows][cols], row-major (NULL when q / bf is used) */
    const uint16_t *bf;    /* or: storage already rounded to bf16 (bf16 precision) */
    const uint8_t *q;      /* or: saved fp8 codes [rows][cols] ... */
    const float *q_sinv;   /* ... with their scale_inv grid (blocks br x bc) */
    int64_t rows, cols;
    int trans;             /* the GEMM multiplies the transpose of the storage */
    fr_lin_precision prec;
    fr_dtype fmt;          /* fp8 format */
    int blockwise;         /* 1: br x bc blocks with their own scales; 0: one scale */
    int64_t br, bc;
    const float *scale;    /* per-tensor: the delayed scale, or NULL = from this tensor's amax */
    int margin;
    uint8_t *q_out;        /* optional copy of the codes [rows][cols] */
    float *sinv_out;       /* optional scale_inv ([1] or the block grid) */
    const char *what;      /* "node 'x' (Linear): weight 'w'" */
} operand;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Fill buf [rp][cp] (zeroed by the caller) with what the tensor cores multiply. */
static fr_status prepare_values(const operand *o, float *buf, int64_t cp)
{
    int64_t R = o->rows, C = o->cols;
    if (o->q) { /* saved fp8 codes: decode times the scale_inv of their block */
        float table[256];
        for (int c = 0; c < 256; c++)
            table[c] = o->fmt == FR_F8E4M3 ? fr_e4m3_to_f32((uint8_t)c) : fr_e5m2_to_f32((uint8_t)c);
        int64_t br = o->blockwise ? o->br : (R ? R : 1), bc = o->blockwise ? o->bc : (C ? C : 1);
        int64_t gc = ceil_div(C, bc);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                buf[r * cp + c] = table[o->q[r * C + c]] * o->q_sinv[(r / br) * gc + c / bc];
        return FR_OK;
    }
    if (o->bf) { /* rounded once already: the same values as rounding src here */
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) buf[r * cp + c] = fr_bf16_to_f32(o->bf[r * C + c]);
        return FR_OK;
    }
    switch (o->prec) {
    case FR_LIN_FP32:
        for (int64_t r = 0; r < R && C > 0; r++) memcpy(buf + r * cp, o->src + r * C, (size_t)C * sizeof(float));
        return FR_OK;
    case FR_LIN_BF16:
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                buf[r * cp + c] = fr_bf16_to_f32(fr_f32_to_bf16(o->src[r * C + c]));
        return FR_OK;
    case FR_LIN_FP8:
        break;
    }
    if (o->blockwise)
        return fr_fp8_quantize_blocks(o->src, R, C, C, o->br, o->bc, o->fmt, o->margin, NULL,
                                      o->what, o->q_out, o->sinv_out, buf, cp);
    float scale;
    if (o->scale) {
        scale = *o->scale;
    } else {
        float amax = fr_amax(o->src, R * C);
        FR_TRY(fr_fp8_scale_from_amax(amax, o->fmt, o->margin, 1.0f, o->what, &scale));
    }
    FR_TRY(fr_fp8_quantize_blocks(o->src, R, C, C, R ? R : 1, C ? C : 1, o->fmt, o->margin, &scale,
                                  o->what, o->q_out, NULL, buf, cp));
    if (o->sinv_out) o->sinv_out[0] = 1.0f / scale;
    return FR_OK;
}

/* The operand's values op(storage) as a zero-padded row-major buffer [round_up(rows of op)]
 * [round_up(cols of op)] (the transpose is materialized). */
static fr_status prepare(const operand *o, int64_t pad, float **out)
{
    int64_t rp = round_up(o->rows, pad), cp = round_up(o->cols, pad);
    size_t n = (size_t)(rp * cp > 0 ? rp * cp : 1);
    float *buf = fr_calloc(n, sizeof(float), "Linear GEMM operand");
    if (!buf) return FR_ERR_OOM;
    fr_status st = prepare_values(o, buf, cp);
    if (st == FR_OK && o->trans) {
        float *tb = fr_malloc(n * sizeof(float), "Linear GEMM operand");
        if (!tb) {
            st = FR_ERR_OOM;
        } else {
            for (int64_t r = 0; r < rp; r++)
                for (int64_t c = 0; c < cp; c++) tb[c * rp + r] = buf[r * cp + c];
            free(buf);
            buf = tb;
        }
    }
    if (st != FR_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return FR_OK;
}

/* C[M][N] = A[M][K] B[K][N], all dense row-major. Every element is summed in float32 in the
 * order k = 0, 1, ..., K-1 (the tiling only groups elements), so the result does not depend on
 * M, N, K, the tiling or threads: zero padding provably changes nothing. (A BLAS sgemm changes
 * its summation order with the matrix dims: padding M alone from 135 to 144 changed 225 of
 * 3915 results in a test with OpenBLAS.) */
/* The 4 x 16 tile keeps its accumulators in vector registers (GCC vector extensions: AVX
 * registers where the CPU has them, pairs of SSE registers otherwise; target_clones picks at run
 * time). The vector width changes nothing in the result: each C element still adds its K
 * products one by one in order, and ISO C mode never fuses a multiply and an add. */
typedef float fr_v8f __attribute__((vector_size(32)));

#define LOAD8(v, p) memcpy(&(v), (p), sizeof(fr_v8f)) /* unaligned; a macro: no vector ABI */

__attribute__((target_clones("avx2", "default")))
static void gemm_kseq(const float *A, const float *B, float *C, int64_t M, int64_t N, int64_t K)
{
    int64_t m0 = 0;
    for (; m0 + 4 <= M; m0 += 4) {
        const float *a0 = A + m0 * K, *a1 = a0 + K, *a2 = a1 + K, *a3 = a2 + K;
        int64_t n0 = 0;
        for (; n0 + 16 <= N; n0 += 16) {
            fr_v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
            for (int64_t k = 0; k < K; k++) {
                fr_v8f b0, b1;
                LOAD8(b0, B + k * N + n0);
                LOAD8(b1, B + k * N + n0 + 8);
                c00 += a0[k] * b0;
                c01 += a0[k] * b1;
                c10 += a1[k] * b0;
                c11 += a1[k] * b1;
                c20 += a2[k] * b0;
                c21 += a2[k] * b1;
                c30 += a3[k] * b0;
                c31 += a3[k] * b1;
            }
            float *c = C + m0 * N + n0;
            memcpy(c, &c00, 32);
            memcpy(c + 8, &c01, 32);
            memcpy(c + N, &c10, 32);
            memcpy(c + N + 8, &c11, 32);
            memcpy(c + 2 * N, &c20, 32);
            memcpy(c + 2 * N + 8, &c21, 32);
            memcpy(c + 3 * N, &c30, 32);
            memcpy(c + 3 * N + 8, &c31, 32);
        }
        for (; n0 < N; n0++)
            for (int i = 0; i < 4; i++) {
                float s = 0.0f;
                for (int64_t k = 0; k < K; k++) s += A[(m0 + i) * K + k] * B[k * N + n0];
                C[(m0 + i) * N + n0] = s;
            }
    }
    for (; m0 < M; m0++) {
        float *c = C + m0 * N;
        for (int64_t n = 0; n < N; n++) c[n] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = A[m0 * K + k];
            const float *b = B + k * N;
            for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
        }
    }
}

/* C [M][N] = op(A) op(B) (+ bias[N]) with op(A) M x K, op(B) K x N; every dim padded to `pad`. */
static fr_status gemm_f32(const operand *a, const operand *b, int64_t M, int64_t N, int64_t K,
                          int64_t pad, const float *bias, float *C)
{
    float *av = NULL, *bv = NULL, *cbuf = NULL;
    fr_status st = prepare(a, pad, &av);
    if (st == FR_OK) st = prepare(b, pad, &bv);
    if (st != FR_OK || M == 0 || N == 0) goto done;
    int64_t Mp = round_up(M, pad), Np = round_up(N, pad), Kp = round_up(K, pad);
    float *cv = C;
    if (Mp != M || Np != N) {
        cbuf = fr_malloc((size_t)(Mp * Np) * sizeof(float), "Linear GEMM result");
        if (!cbuf) {
            st = FR_ERR_OOM;
            goto done;
        }
        cv = cbuf;
    }
    gemm_kseq(av, bv, cv, Mp, Np, Kp);
    if (cbuf)
        for (int64_t m = 0; m < M; m++) memcpy(C + m * N, cbuf + m * Np, (size_t)N * sizeof(float));
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) C[m * N + n] += bias[n];
done:
    free(av);
    free(bv);
    free(cbuf);
    return st;
}

/* float64 (fp32 precision): C = op(A) op(B) (+ bias) with the same zero padding. */
static fr_status gemm_f64(const double *A, int ta, const double *B, int tb, int64_t M, int64_t N,
                          int64_t K, int64_t pad, const double *bias, double *C)
{
    if (M == 0 || N == 0) return FR_OK;
    if (K == 0) {
        for (int64_t i = 0; i < M * N; i++) C[i] = 0.0;
    } else {
        int64_t Mp = round_up(M, pad), Np = round_up(N, pad), Kp = round_up(K, pad);
        int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        int64_t arp = round_up(ar, pad), acp = round_up(ac, pad), brp = round_up(br, pad), bcp = round_up(bc, pad);
        double *ap = NULL, *bp = NULL, *cp = NULL;
        if (pad > 1) {
            ap = fr_calloc((size_t)(arp * acp), sizeof(double), "Linear GEMM operand");
            bp = fr_calloc((size_t)(brp * bcp), sizeof(double), "Linear GEMM operand");
            cp = fr_calloc((size_t)(Mp * Np), sizeof(double), "Linear GEMM result");
            if (!ap || !bp || !cp) {
                free(ap);
                free(bp);
                free(cp);
                return FR_ERR_OOM;
            }
            for (int64_t r = 0; r < ar; r++) memcpy(ap + r * acp, A + r * ac, (size_t)ac * sizeof(double));
            for (int64_t r = 0; r < br; r++) memcpy(bp + r * bcp, B + r * bc, (size_t)bc * sizeof(double));
        }
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)Mp, (int)Np, (int)Kp, 1.0, ap ? ap : A, (int)(ap ? acp : ac), bp ? bp : B,
                    (int)(bp ? bcp : bc), 0.0, cp ? cp : C, (int)Np);
        if (cp)
            for (int64_t m = 0; m < M; m++) memcpy(C + m * N, cp + m * Np, (size_t)N * sizeof(double));
        free(ap);
        free(bp);
        free(cp);
    }
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) C[m * N + n] += bias[n];
    return FR_OK;
}

static int64_t t_lead(const fr_tensor *t)
{
    int64_t m = 1;
    for (int d = 0; d + 1 < t->rank; d++) m *= t->dims[d];
    return m;
}

static int64_t t_last(const fr_tensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

/* GEMM dims must fit cblas's int */
static fr_status check_blas_dims(const fr_node *n, int64_t M, int64_t N, int64_t K, int64_t pad)
{
    int64_t lim = 0x7FFFFFFF - pad;
    if (M > lim || N > lim || K > lim)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM dims %lld x %lld x %lld exceed the BLAS "
                             "int range", (long long)M, (long long)N, (long long)K);
    return FR_OK;
}

static void what_str(char *buf, size_t n, const fr_kernel_ctx *ctx, const char *role, int idx)
{
    int vid = idx < ctx->node->n_inputs ? ctx->node->inputs[idx] : -1;
    snprintf(buf, n, "node '%s' (%s): %s '%s'", ctx->node->name, ctx->node->op_type, role,
             vid >= 0 ? ctx->g->values[vid].name : "?");
}

static const float *scale_in(const fr_kernel_ctx *ctx, int i, const lin_cfg *c)
{
    return delayed_fp8(c) && i < ctx->n_in && ctx->in[i] ? (const float *)ctx->in[i]->data : NULL;
}

static void write_amax(const fr_kernel_ctx *ctx, int o, const fr_tensor *t)
{
    if (o < ctx->n_out && ctx->out[o])
        ((float *)ctx->out[o]->data)[0] = fr_amax(t->data, fr_tensor_numel(t));
}

static operand x_operand(const fr_tensor *x, int64_t M, int64_t K, const lin_cfg *c, int along_tokens)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.src = x->data;
    o.rows = M;
    o.cols = K;
    o.prec = c->prec;
    o.fmt = FR_F8E4M3;
    o.blockwise = c->recipe == FR_LIN_BLOCKWISE;
    o.br = along_tokens ? FR_LIN_BLOCK : 1;
    o.bc = along_tokens ? 1 : FR_LIN_BLOCK;
    o.margin = c->margin;
    return o;
}

static operand w_operand(const fr_tensor *w, const lin_cfg *c, int trans)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.src = w->data;
    o.rows = w->dims[0];
    o.cols = w->dims[1];
    o.trans = trans;
    o.prec = c->prec;
    o.fmt = FR_F8E4M3;
    o.blockwise = c->recipe == FR_LIN_BLOCKWISE;
    o.br = o.bc = FR_LIN_BLOCK;
    o.margin = c->margin;
    return o;
}

static operand dy_operand(const fr_tensor *dy, int64_t M, int64_t N, const lin_cfg *c, int along_tokens)
{
    operand o = x_operand(dy, M, N, c, along_tokens);
    o.fmt = c->dy_fmt;
    return o;
}

static fr_status linear_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *x = ctx->in[0], *w = ctx->in[1], *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    fr_tensor *y = ctx->out[0];
    int64_t K = c.transB ? w->dims[1] : w->dims[0], N = c.transB ? w->dims[0] : w->dims[1];
    int64_t M = t_lead(x);
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    if (x->dtype == FR_F64)
        return gemm_f64(x->data, 0, w->data, c.transB, M, N, K, c.pad, b ? b->data : NULL, y->data);
    if (x->dtype != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    char wx[600], ww[600];
    what_str(wx, sizeof wx, ctx, "input", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    fr_tensor *xq = ctx->n_out > FR_LIN_OUT_XQ ? ctx->out[FR_LIN_OUT_XQ] : NULL;
    fr_tensor *xs = ctx->n_out > FR_LIN_OUT_XQ_SINV ? ctx->out[FR_LIN_OUT_XQ_SINV] : NULL;
    operand a = x_operand(x, M, K, &c, 0), bw = w_operand(w, &c, c.transB);
    a.scale = scale_in(ctx, FR_LIN_IN_SCALE_X, &c);
    a.what = wx;
    bw.scale = scale_in(ctx, FR_LIN_IN_SCALE_W, &c);
    bw.what = ww;
    if (c.prec == FR_LIN_FP8 && !a.blockwise && xq) { /* per tensor: the GEMM's own codes */
        a.q_out = xq->data;
        a.sinv_out = xs->data;
    }
    FR_TRY(gemm_f32(&a, &bw, M, N, K, c.pad, b ? b->data : NULL, y->data));
    if (c.prec == FR_LIN_BF16 && xq) round_bf16(x->data, M * K, xq->data);
    if (c.prec == FR_LIN_FP8 && a.blockwise && xq) /* wgrad wants X in 128x1 blocks */
        FR_TRY(fr_fp8_quantize_blocks(x->data, M, K, K, FR_LIN_BLOCK, 1, FR_F8E4M3, c.margin, NULL,
                                      wx, xq->data, xs->data, NULL, 0));
    write_amax(ctx, FR_LIN_OUT_AMAX_X, x);
    write_amax(ctx, FR_LIN_OUT_AMAX_W, w);
    return FR_OK;
}

static fr_status grad_data_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *dy = ctx->in[0], *w = ctx->in[1];
    fr_tensor *dx = ctx->out[0];
    int64_t K = c.transB ? w->dims[1] : w->dims[0], N = c.transB ? w->dims[0] : w->dims[1];
    int64_t M = t_lead(dy);
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    /* dX [M,K] = dY [M,N] op(W)^T: W [K,N] is used transposed, W [N,K] as stored */
    if (dy->dtype == FR_F64)
        return gemm_f64(dy->data, 0, w->data, !c.transB, M, K, N, c.pad, NULL, dx->data);
    char wd[600], ww[600];
    what_str(wd, sizeof wd, ctx, "output gradient", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    operand a = dy_operand(dy, M, N, &c, 0), bw = w_operand(w, &c, !c.transB);
    a.scale = scale_in(ctx, 3, &c);
    a.what = wd;
    bw.scale = scale_in(ctx, 2, &c);
    bw.what = ww;
    fr_tensor *dyq = ctx->n_out > 2 ? ctx->out[2] : NULL, *dyq_sinv = ctx->n_out > 3 ? ctx->out[3] : NULL;
    if (c.prec == FR_LIN_BF16 && dyq) /* dY's bf16 copy for the weight gradient, dY's layout */
        round_bf16(dy->data, M * N, dyq->data);
    uint8_t *codes = NULL;
    if (dyq && dyq_sinv) { /* the GEMM's own codes, kept and handed over transposed */
        codes = fr_malloc((size_t)(M * N > 0 ? M * N : 1), "dY codes");
        if (!codes) return FR_ERR_OOM;
        a.q_out = codes;
        a.sinv_out = dyq_sinv->data;
    }
    fr_status st = gemm_f32(&a, &bw, M, K, N, c.pad, NULL, dx->data);
    if (st == FR_OK && codes) {
        uint8_t *t = dyq->data;
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) t[j * M + m] = codes[m * N + j];
    }
    free(codes);
    FR_TRY(st);
    write_amax(ctx, 1, dy);
    return FR_OK;
}

static fr_status grad_weight_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *xs = ctx->in[0], *dy = ctx->in[1], *s = ctx->n_in > 2 ? ctx->in[2] : NULL;
    fr_tensor *dw = ctx->out[0];
    int dyq = dy->dtype == FR_F8E4M3 || dy->dtype == FR_F8E5M2; /* [N, M] codes from LinearGradData */
    int64_t M = dyq ? dy->dims[1] : t_lead(dy), K = t_last(xs), N = dyq ? dy->dims[0] : t_last(dy);
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    /* transB=0: dW [K,N] = X^T dY; transB=1: dW [N,K] = dY^T X (contraction over tokens) */
    if (dy->dtype == FR_F64) {
        if (c.transB) return gemm_f64(dy->data, 1, xs->data, 0, N, K, M, c.pad, NULL, dw->data);
        return gemm_f64(xs->data, 1, dy->data, 0, K, N, M, c.pad, NULL, dw->data);
    }
    char wx[600], wd[600];
    what_str(wx, sizeof wx, ctx, "input", 0);
    what_str(wd, sizeof wd, ctx, "output gradient", 1);
    operand ox = x_operand(xs, M, K, &c, 1), od = dy_operand(dy, M, N, &c, 1);
    ox.what = wx;
    od.what = wd;
    od.scale = scale_in(ctx, 3, &c);
    if (xs->dtype == FR_BF16) { /* the forward's Xq / the data gradient's dYq: rounded already */
        ox.src = NULL;
        ox.bf = xs->data;
    }
    if (dy->dtype == FR_BF16) {
        od.src = NULL;
        od.bf = dy->data;
    }
    if (dyq) { /* the same values as quantizing dY here: stored transposed */
        od.src = NULL;
        od.scale = NULL;
        od.q = dy->data;
        od.q_sinv = ctx->in[3]->data;
        od.rows = N;
        od.cols = M;
    }
    if (xs->dtype == FR_F8E4M3) {
        ox.src = NULL;
        ox.q = xs->data;
        ox.q_sinv = s->data;
    } else {
        ox.scale = scale_in(ctx, 2, &c);
    }
    operand *a = c.transB ? &od : &ox, *b = c.transB ? &ox : &od;
    a->trans = 1;
    if (dyq) od.trans = !od.trans;
    FR_TRY(gemm_f32(a, b, c.transB ? N : K, c.transB ? K : N, M, c.pad, NULL, dw->data));
    if (!dyq) write_amax(ctx, 1, dy);
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
        /* the forward's saved Xq: fp8 codes with their scale_inv, or X's bf16 copy */
        int saved = xq >= 0 && (xq_sinv >= 0 || bf16);
        int in[4] = {saved ? xq : x, share_dy ? dyq[0] : dy, saved ? xq_sinv : (dl ? scale_x : -1),
                     share_dy ? dyq[1] : dl ? scale_dy : -1};
        FR_TRY(emit(ctx, "LinearGradWeight", 4, in, dl && !amax_done ? amax_name : NULL,
                    &ctx->din[FR_LIN_IN_W], NULL, 0));
    }
    if (need_b) FR_TRY(fr_grad_sum_to(ctx, dy, b, &ctx->din[FR_LIN_IN_B]));
    return FR_OK;
}

const fr_op_def fr_ops_linear[] = {
    {"Linear", FR_DOMAIN_FP8RUN, 1, linear_infer, linear_cpu, linear_grad, 0},
    {"LinearGradData", FR_DOMAIN_FP8RUN, 1, grad_data_infer, grad_data_cpu, NULL, 0},
    {"LinearGradWeight", FR_DOMAIN_FP8RUN, 1, grad_weight_infer, grad_weight_cpu, NULL, 0},
    {0},
};

const fr_op_def *fr_linear_op(const char *op_type)
{
    for (const fr_op_def *d = fr_ops_linear; d->op_type; d++)
        if (strcmp(d->op_type, op_type) == 0) return d;
    return NULL;
}
