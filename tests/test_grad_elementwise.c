/* Gradient rules of the elementwise families (ops/unary.c, ops/binary.c) and their fused
 * backward kernels (ops/elementwise_grad.c).
 *
 * - Every rule against central differences (tests/gradcheck.c) in float64 on fresh random
 *   inputs kept away from non-differentiable points: relative L2 error < 1e-6 per input.
 *   Binary ops broadcast both ways ([3,1,4] op [5,1] and back), Where with a broadcast
 *   condition, variadic ops with three broadcast inputs.
 * - PyTorch 1.13's conventions at the edges, as exact values printed by torch (Clip at its
 *   bounds and with min > max, Max/Min ties and NaN, Pow at x <= 0 and e == 0, Relu/Abs at
 *   0, LeakyRelu at 0).
 * - The fused ActivationGrad kernels: float32 equals float64 within 1e-6 relative per element.
 * - One activation costs one backward node (ActivationGrad).
 * - A small chain, Gelu(x * w1 + b1) * w2, differentiated end to end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/autodiff.h"

#define TOL 1e-6
#define TOL_EXACT 1e-12 /* relative: gradients against the values PyTorch prints */

/* Reshape random N(0,1) inputs to a domain (see also fr_gc_away_from_zero). */
static double *f64(fr_graph *g, int vid) { return g->values[vid].constant->data; }
static int64_t numel(fr_graph *g, int vid) { return fr_tensor_numel(g->values[vid].constant); }

static void positive(fr_graph *g, int vid, double margin)
{
    double *x = f64(g, vid);
    for (int64_t i = 0; i < numel(g, vid); i++) x[i] = fabs(x[i]) + margin;
}

static void scale(fr_graph *g, int vid, double s)
{
    double *x = f64(g, vid);
    for (int64_t i = 0; i < numel(g, vid); i++) x[i] *= s;
}

/* Keep x at least `margin` away from every integer (for Floor, Ceil, casts to int). */
static void away_from_integers(fr_graph *g, int vid, double margin)
{
    double *x = f64(g, vid);
    for (int64_t i = 0; i < numel(g, vid); i++) {
        double f = x[i] - floor(x[i]);
        if (f < margin || f > 1 - margin) x[i] += 0.5;
    }
}

/* ---- unary ---- */

typedef struct un_case {
    const char *op;
    int domain; /* 0: any, 1: away from 0, 2: positive */
    double scale;
    const char *approximate; /* Gelu */
    float alpha;             /* LeakyRelu, when != 0 */
} un_case;

static const un_case un_cases[] = {
    {"Neg", 0, 1, NULL, 0},         {"Abs", 1, 1, NULL, 0},      {"Exp", 0, 1, NULL, 0},
    {"Log", 2, 1, NULL, 0},         {"Sqrt", 2, 1, NULL, 0},     {"Reciprocal", 1, 1, NULL, 0},
    {"Tanh", 0, 1.5, NULL, 0},      {"Erf", 0, 1, NULL, 0},      {"Sigmoid", 0, 2, NULL, 0},
    {"Relu", 1, 1, NULL, 0},        {"LeakyRelu", 1, 1, NULL, 0}, {"LeakyRelu", 1, 1, NULL, 0.2f},
    {"Gelu", 0, 2.5, NULL, 0},      {"Gelu", 0, 2.5, "tanh", 0}, {"Softplus", 0, 3, NULL, 0},
    {"Sin", 0, 2, NULL, 0},         {"Cos", 0, 2, NULL, 0},      {"Softsign", 0, 3, NULL, 0},
};

static void test_unary(void)
{
    for (size_t c = 0; c < sizeof un_cases / sizeof un_cases[0]; c++) {
        const un_case *uc = &un_cases[c];
        fr_rng r = fr_test_rng(uc->op);
        fr_graph *g = fr_gc_new_graph(20);
        int64_t d[3] = {2, 3, 4};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, d, NULL), y;
        scale(g, x, uc->scale);
        if (uc->domain == 1) fr_gc_away_from_zero(g, x, 0.1);
        if (uc->domain == 2) positive(g, x, 0.1);
        int nid = fr_gc_node(g, uc->op, "", 1, &x, 1, &y);
        fr_node *node = &g->nodes[nid];
        if (uc->approximate) FR_ASSERT_OK(fr_node_set_attr_string(node, "approximate", uc->approximate));
        if (uc->alpha) FR_ASSERT_OK(fr_node_set_attr_float(node, "alpha", uc->alpha));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        char what[64];
        snprintf(what, sizeof what, "%s%s%s", uc->op, uc->approximate ? " " : "",
                 uc->approximate ? uc->approximate : "");
        fr_gc_check(g, &r, y, 1, &x, what, TOL);
        /* one fused backward node per activation (Neg reuses Neg) */
        if (strcmp(uc->op, "Neg") != 0) CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "ActivationGrad"), 1);
        fr_graph_free(g);
    }
}

/* Sign, Floor, Ceil have zero gradient: out = f(x) * x has d/dx = f(x). */
static void test_piecewise_constant(void)
{
    const char *ops[] = {"Sign", "Floor", "Ceil"};
    for (int k = 0; k < 3; k++) {
        fr_rng r = fr_test_rng(ops[k]);
        fr_graph *g = fr_gc_new_graph(20);
        int64_t d[2] = {4, 5};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL);
        scale(g, x, 3);
        away_from_integers(g, x, 0.05);
        int f = fr_gc_op1(g, ops[k], 1, &x);
        int in[2] = {f, x};
        int y = fr_gc_op1(g, "Mul", 2, in);
        fr_gc_check(g, &r, y, 1, &x, ops[k], TOL);
        fr_graph_free(g);
    }
}

/* Relu(0), Abs(0), LeakyRelu(0), Relu(NaN), Abs(NaN), as torch 1.13 */
static void test_unary_conventions(void)
{
    const double xs[4] = {0.0, -0.0, NAN, -3.0}, dy[4] = {1, 1, 1, 1};
    const struct {
        const char *op;
        double want[4];
    } cases[] = {
        {"Relu", {0, 0, 1, 0}},
        {"Abs", {0, 0, 0, -1}},
        {"LeakyRelu", {0.01f, 0.01f, 0.01f, 0.01f}}, /* alpha float 0.01 */
    };
    int64_t d[1] = {4};
    for (int c = 0; c < 3; c++) {
        fr_graph *g = fr_gc_new_graph(20);
        int x = fr_gc_add_values(g, "x", FR_F64, 1, d, xs), grad;
        int y = fr_gc_op1(g, cases[c].op, 1, &x);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, &grad);
        fr_gc_expect(g, t, grad, cases[c].want, 4, TOL_EXACT, cases[c].op);
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
}

/* ---- Cast, Identity, Dropout ---- */

static void test_cast(void)
{
    fr_rng r = fr_test_rng("cast");
    int64_t d[2] = {3, 4};
    /* float64 -> float32: the gradient comes back as float64, exactly dy */
    for (int like = 0; like < 2; like++) {
        fr_graph *g = fr_gc_new_graph(20);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL), y, grad;
        int proto = fr_gc_add_input(g, &r, "proto", FR_F32, 0, NULL, NULL);
        int in[2] = {x, proto};
        int nid = fr_gc_node(g, like ? "CastLike" : "Cast", "", like ? 2 : 1, in, 1, &y);
        if (!like) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "to", FR_F32));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        CU_ASSERT_EQUAL(g->values[y].dtype, FR_F32);
        double dy[12];
        for (int i = 0; i < 12; i++) dy[i] = (float)fr_rng_normal(&r);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, &grad);
        CU_ASSERT_EQUAL(g->values[grad].dtype, FR_F64);
        fr_gc_expect(g, t, grad, dy, 12, TOL_EXACT, "Cast grad");
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
    /* float32 -> float64 */
    {
        fr_graph *g = fr_gc_new_graph(20);
        int x = fr_gc_add_input(g, &r, "x", FR_F32, 2, d, NULL), y, grad;
        int nid = fr_gc_node(g, "Cast", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "to", FR_F64));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        double dy[12];
        for (int i = 0; i < 12; i++) dy[i] = (float)fr_rng_normal(&r); /* exact in float32 */
        fr_tensor **t = fr_gc_backprop(g, y, dy, 1, &x, &grad);
        CU_ASSERT_EQUAL(g->values[grad].dtype, FR_F32);
        fr_gc_expect(g, t, grad, dy, 12, TOL_EXACT, "Cast f32->f64 grad");
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
    /* a round trip through int64 contributes nothing: out = Cast(Cast(x, int64), double) * x */
    {
        fr_graph *g = fr_gc_new_graph(20);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL), xi, xf;
        scale(g, x, 3);
        away_from_integers(g, x, 0.05);
        int nid = fr_gc_node(g, "Cast", "", 1, &x, 1, &xi);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "to", FR_I64));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        nid = fr_gc_node(g, "Cast", "", 1, &xi, 1, &xf);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "to", FR_F64));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        int in[2] = {xf, x};
        int y = fr_gc_op1(g, "Mul", 2, in);
        fr_gc_check(g, &r, y, 1, &x, "Cast via int64", TOL);
        fr_graph_free(g);
    }
}

static void test_identity_dropout(void)
{
    fr_rng r = fr_test_rng("identity_dropout");
    fr_graph *g = fr_gc_new_graph(13);
    int64_t d[2] = {3, 5};
    int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL), outs[2];
    int a = fr_gc_op1(g, "Identity", 1, &x);
    int nid = fr_gc_node(g, "Dropout", "", 1, &a, 2, outs); /* with the mask output */
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int in[2] = {outs[0], x};
    int y = fr_gc_op1(g, "Mul", 2, in); /* x^2 through Identity and Dropout */
    fr_gc_check(g, &r, y, 1, &x, "Identity/Dropout", TOL);
    fr_graph_free(g);
}

/* ---- Clip ---- */

static void keep_off_bounds(fr_graph *g, int vid, double lo, double hi)
{
    double *x = f64(g, vid);
    for (int64_t i = 0; i < numel(g, vid); i++)
        if (fabs(x[i] - lo) < 1e-3 || fabs(x[i] - hi) < 1e-3) x[i] += 0.01;
}

static void test_clip(void)
{
    fr_rng r = fr_test_rng("clip");
    int64_t d[2] = {6, 7};
    /* opset 13: both bounds as inputs, differentiated too; then with only the max bound */
    for (int variant = 0; variant < 2; variant++) {
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL);
        double lo = -0.5 + 0.2 * fr_rng_uniform(&r), hi = 0.4 + 0.3 * fr_rng_uniform(&r);
        int vlo = fr_gc_add_values(g, "lo", FR_F64, 0, NULL, &lo);
        int vhi = fr_gc_add_values(g, "hi", FR_F64, 0, NULL, &hi);
        keep_off_bounds(g, x, lo, hi);
        int in[3] = {x, variant ? -1 : vlo, vhi};
        int y = fr_gc_op1(g, "Clip", 3, in);
        int wrt[3] = {x, vhi, vlo};
        fr_gc_check(g, &r, y, variant ? 2 : 3, wrt, variant ? "Clip(max only)" : "Clip", TOL);
        fr_graph_free(g);
    }
    /* opset 6: attribute bounds */
    {
        fr_graph *g = fr_gc_new_graph(6);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL), y;
        keep_off_bounds(g, x, -0.3, 0.6);
        int nid = fr_gc_node(g, "Clip", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "min", -0.3f));
        FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "max", 0.6f));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        fr_gc_check(g, &r, y, 1, &x, "Clip opset 6", TOL);
        fr_graph_free(g);
    }
}

/* torch.clamp: the gradient passes where x equals a bound; with min > max only max gets one */
static void test_clip_conventions(void)
{
    const struct {
        double x[5], lo, hi, dx[5], dlo, dhi;
    } cases[] = {
        {{-1, 0, 0.5, 1, 2}, 0, 1, {0, 1, 1, 1, 0}, 1, 1},
        {{-1, 0.5, 2, NAN, 0}, 1, 0, {0, 0, 0, 0, 0}, 0, 5}, /* NaN: none to x, max gets all */
        {{-1, 0.5, 1, 1.5, 0}, 1, 1, {0, 0, 1, 0, 0}, 0, 1},  /* min == max */
    };
    const double dy[5] = {1, 1, 1, 1, 1};
    int64_t d[1] = {5};
    for (int c = 0; c < 3; c++) {
        fr_graph *g = fr_gc_new_graph(13);
        int x = fr_gc_add_values(g, "x", FR_F64, 1, d, cases[c].x);
        int lo = fr_gc_add_values(g, "lo", FR_F64, 0, NULL, &cases[c].lo);
        int hi = fr_gc_add_values(g, "hi", FR_F64, 0, NULL, &cases[c].hi);
        int in[3] = {x, lo, hi}, wrt[3] = {x, lo, hi}, grads[3];
        int y = fr_gc_op1(g, "Clip", 3, in);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 3, wrt, grads);
        fr_gc_expect(g, t, grads[0], cases[c].dx, 5, TOL_EXACT, "Clip dx");
        fr_gc_expect(g, t, grads[1], &cases[c].dlo, 1, TOL_EXACT, "Clip dmin");
        fr_gc_expect(g, t, grads[2], &cases[c].dhi, 1, TOL_EXACT, "Clip dmax");
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
}

/* ---- binary ---- */

static void test_binary(void)
{
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    int64_t da[3] = {3, 1, 4}, db[2] = {5, 1};
    for (int k = 0; k < 4; k++) {
        for (int dir = 0; dir < 2; dir++) {
            fr_rng r = fr_test_rng(ops[k]);
            fr_graph *g = fr_gc_new_graph(17);
            int a = fr_gc_add_input(g, &r, "a", FR_F64, dir ? 2 : 3, dir ? db : da, NULL);
            int b = fr_gc_add_input(g, &r, "b", FR_F64, dir ? 3 : 2, dir ? da : db, NULL);
            if (strcmp(ops[k], "Div") == 0) fr_gc_away_from_zero(g, b, 0.5);
            int in[2] = {a, b}, wrt[2] = {a, b};
            int y = fr_gc_op1(g, ops[k], 2, in);
            CU_ASSERT_EQUAL(g->values[y].rank, 3);
            char what[64];
            snprintf(what, sizeof what, "%s %s", ops[k], dir ? "[5,1] op [3,1,4]" : "[3,1,4] op [5,1]");
            fr_gc_check(g, &r, y, 2, wrt, what, TOL);
            fr_graph_free(g);
        }
    }
    /* both operands one value: x * x and x / x accumulate two contributions */
    const char *same_ops[] = {"Mul", "Div", "Sub"};
    for (int k = 0; k < 3; k++) {
        fr_rng r = fr_test_rng("same_operand");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t d[2] = {2, 3};
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL);
        fr_gc_away_from_zero(g, x, 0.5);
        int in[2] = {x, x};
        int y = fr_gc_op1(g, same_ops[k], 2, in);
        int in2[2] = {y, x};
        int z = fr_gc_op1(g, "Mul", 2, in2); /* keeps x/x and x-x from being constant */
        fr_gc_check(g, &r, z, 1, &x, same_ops[k], TOL);
        fr_graph_free(g);
    }
}

static void test_pow(void)
{
    int64_t da[3] = {3, 1, 4}, db[2] = {5, 1};
    for (int dir = 0; dir < 2; dir++) {
        fr_rng r = fr_test_rng("pow");
        fr_graph *g = fr_gc_new_graph(17);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, dir ? 2 : 3, dir ? db : da, NULL);
        int e = fr_gc_add_input(g, &r, "e", FR_F64, dir ? 3 : 2, dir ? da : db, NULL);
        positive(g, x, 0.2);
        scale(g, e, 1.5);
        int in[2] = {x, e}, wrt[2] = {x, e};
        int y = fr_gc_op1(g, "Pow", 2, in);
        fr_gc_check(g, &r, y, 2, wrt, dir ? "Pow [5,1]^[3,1,4]" : "Pow [3,1,4]^[5,1]", TOL);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "PowGrad"), 2);
        fr_graph_free(g);
    }
    /* integer exponent (no gradient of its own), negative bases allowed */
    {
        fr_rng r = fr_test_rng("pow_int");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t d[2] = {4, 5}, three = 3;
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d, NULL);
        int e = fr_gc_add_input(g, &r, "e", FR_I64, 0, NULL, &three);
        int in[2] = {x, e};
        int y = fr_gc_op1(g, "Pow", 2, in);
        fr_gc_check(g, &r, y, 1, &x, "Pow x^3 (int64 exponent)", TOL);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "PowGrad"), 1);
        fr_graph_free(g);
    }
}

/* torch.pow's gradients at x <= 0 and e == 0 (values printed by torch 1.13) */
static void test_pow_conventions(void)
{
    const double x[10] = {-2, -2, -0.5, 0, 0, 0, 0, 2, -2, 2};
    const double e[10] = {3, 2.5, 2, 0.5, -1, 0, 2, 0, 0, 0};
    const double dy[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, NAN};
    const double dx[10] = {12, NAN, -1, INFINITY, -INFINITY, 0, 0, 0, 0, 0};
    const double de[10] = {NAN, NAN, NAN, 0, -INFINITY, 0, 0, 0.6931471805599453, NAN, NAN};
    int64_t d[1] = {10};
    fr_graph *g = fr_gc_new_graph(17);
    int vx = fr_gc_add_values(g, "x", FR_F64, 1, d, x), ve = fr_gc_add_values(g, "e", FR_F64, 1, d, e);
    int in[2] = {vx, ve}, grads[2];
    int y = fr_gc_op1(g, "Pow", 2, in);
    fr_tensor **t = fr_gc_backprop(g, y, dy, 2, in, grads);
    fr_gc_expect(g, t, grads[0], dx, 10, TOL_EXACT, "Pow d/dx");
    fr_gc_expect(g, t, grads[1], de, 10, TOL_EXACT, "Pow d/de");
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

/* fmod: d/da = 1, d/db = -trunc(a/b); a/b kept away from integers (the jumps) */
static void test_mod(void)
{
    fr_rng r = fr_test_rng("mod");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t da[2] = {3, 4}, db[1] = {4};
    int a = fr_gc_add_input(g, &r, "a", FR_F64, 2, da, NULL);
    int b = fr_gc_add_input(g, &r, "b", FR_F64, 1, db, NULL);
    double *av = f64(g, a), *bv = f64(g, b);
    for (int j = 0; j < 4; j++) bv[j] = (j & 1 ? -1 : 1) * (1 + fr_rng_uniform(&r));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            double q = floor(fr_rng_uniform(&r) * 7) - 3, f = 0.2 + 0.6 * fr_rng_uniform(&r);
            av[i * 4 + j] = bv[j] * (q + f);
        }
    int in[2] = {a, b}, y, wrt[2] = {a, b};
    int nid = fr_gc_node(g, "Mod", "", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "fmod", 1));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    fr_gc_check(g, &r, y, 2, wrt, "Mod fmod=1", TOL);
    fr_graph_free(g);
}

static void test_variadic(void)
{
    const char *ops[] = {"Max", "Min", "Sum", "Mean"};
    int64_t d0[3] = {2, 3, 4}, d1[2] = {3, 1}, d2[1] = {4};
    for (int k = 0; k < 4; k++) {
        fr_rng r = fr_test_rng(ops[k]);
        fr_graph *g = fr_gc_new_graph(17);
        int in[3] = {fr_gc_add_input(g, &r, "a", FR_F64, 1, d2, NULL),
                     fr_gc_add_input(g, &r, "b", FR_F64, 3, d0, NULL),
                     fr_gc_add_input(g, &r, "c", FR_F64, 2, d1, NULL)};
        int y = fr_gc_op1(g, ops[k], 3, in);
        fr_gc_check(g, &r, y, 3, in, ops[k], TOL);
        fr_graph_free(g);
        /* one input: the identity */
        g = fr_gc_new_graph(17);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, d1, NULL);
        y = fr_gc_op1(g, ops[k], 1, &x);
        int in2[2] = {y, x};
        int z = fr_gc_op1(g, "Mul", 2, in2);
        fr_gc_check(g, &r, z, 1, &x, ops[k], TOL);
        fr_graph_free(g);
    }
}

/* torch.maximum/minimum split ties half/half and give NaN's gradient to both operands; with
 * more inputs the tie splits evenly */
static void test_extremum_conventions(void)
{
    const double a[6] = {1, 2, 3, NAN, 5, 2}, b[6] = {1, 1, 4, 1, NAN, 2}, dy[6] = {1, 1, 1, 1, 1, 1};
    const double max_da[6] = {0.5, 1, 0, 1, 1, 0.5}, max_db[6] = {0.5, 0, 1, 1, 1, 0.5};
    const double min_da[6] = {0.5, 0, 1, 1, 1, 0.5}, min_db[6] = {0.5, 1, 0, 1, 1, 0.5};
    int64_t d[1] = {6};
    for (int is_min = 0; is_min < 2; is_min++) {
        fr_graph *g = fr_gc_new_graph(17);
        int in[2] = {fr_gc_add_values(g, "a", FR_F64, 1, d, a), fr_gc_add_values(g, "b", FR_F64, 1, d, b)};
        int grads[2];
        int y = fr_gc_op1(g, is_min ? "Min" : "Max", 2, in);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 2, in, grads);
        fr_gc_expect(g, t, grads[0], is_min ? min_da : max_da, 6, TOL_EXACT, is_min ? "Min da" : "Max da");
        fr_gc_expect(g, t, grads[1], is_min ? min_db : max_db, 6, TOL_EXACT, is_min ? "Min db" : "Max db");
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
    /* three inputs tied at the last element, one broadcast: dy/3 each there */
    {
        const double c = 2, dc = 1.0 / 3; /* c is a scalar: only element 5 ties with it */
        const double want_a[6] = {0, 1, 0, 1, 1, 1.0 / 3}, want_b[6] = {0, 0, 1, 1, 1, 1.0 / 3};
        const double xa[6] = {1, 3, 3, NAN, 5, 2};
        fr_graph *g = fr_gc_new_graph(17);
        int in[3] = {fr_gc_add_values(g, "a", FR_F64, 1, d, xa), fr_gc_add_values(g, "b", FR_F64, 1, d, b),
                     fr_gc_add_values(g, "c", FR_F64, 0, NULL, &c)};
        int grads[3];
        int y = fr_gc_op1(g, "Max", 3, in);
        fr_tensor **t = fr_gc_backprop(g, y, dy, 3, in, grads);
        fr_gc_expect(g, t, grads[0], want_a, 6, TOL_EXACT, "Max3 da");
        fr_gc_expect(g, t, grads[1], want_b, 6, TOL_EXACT, "Max3 db");
        /* c wins element 0, gets dy at the NaN elements 3 and 4, and a third at element 5 */
        double want_c = 1 + 1 + 1 + dc;
        fr_gc_expect(g, t, grads[2], &want_c, 1, TOL_EXACT, "Max3 dc");
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
    }
}

static void test_where(void)
{
    int64_t dc[2] = {3, 1}, dx[2] = {3, 4}, dy[1] = {4};
    for (int dir = 0; dir < 2; dir++) {
        fr_rng r = fr_test_rng("where");
        fr_graph *g = fr_gc_new_graph(17);
        int64_t cv[3];
        for (int i = 0; i < 3; i++) cv[i] = fr_rng_uniform(&r) < 0.5;
        cv[0] = 1;
        cv[1] = 0;
        int c = fr_gc_add_input(g, &r, "cond", FR_BOOL, 2, dc, cv);
        int x = fr_gc_add_input(g, &r, "x", FR_F64, dir ? 1 : 2, dir ? dy : dx, NULL);
        int y = fr_gc_add_input(g, &r, "y", FR_F64, dir ? 2 : 1, dir ? dx : dy, NULL);
        int in[3] = {c, x, y}, wrt[2] = {x, y};
        int out = fr_gc_op1(g, "Where", 3, in);
        fr_gc_check(g, &r, out, 2, wrt, dir ? "Where(c[3,1], x[4], y[3,4])" : "Where(c[3,1], x[3,4], y[4])", TOL);
        fr_graph_free(g);
    }
}

static void test_expand(void)
{
    fr_rng r = fr_test_rng("expand");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t dx[2] = {3, 1}, ds[1] = {3}, shape[3] = {2, 3, 4};
    int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, dx, NULL);
    int s = fr_gc_add_input(g, &r, "shape", FR_I64, 1, ds, shape);
    int in[2] = {x, s};
    int y = fr_gc_op1(g, "Expand", 2, in);
    CU_ASSERT_EQUAL(g->values[y].rank, 3);
    fr_gc_check(g, &r, y, 1, &x, "Expand", TOL);
    fr_graph_free(g);
}

/* ---- the fused kernels: float32 against float64 ---- */

static void test_activation_grad_f32_vs_f64(void)
{
    const struct {
        const char *op, *approximate;
        int kind; /* v: 0 any, 1 positive, 2 tanh(x), 3 sigmoid(x) */
    } cases[] = {
        {"Abs", NULL, 0},        {"Exp", NULL, 1},     {"Log", NULL, 1},       {"Sqrt", NULL, 1},
        {"Reciprocal", NULL, 0}, {"Tanh", NULL, 2},    {"Sigmoid", NULL, 3},   {"Relu", NULL, 0},
        {"LeakyRelu", NULL, 0},  {"Erf", NULL, 0},     {"Gelu", NULL, 0},      {"Gelu", "tanh", 0},
        {"Softplus", NULL, 0},   {"Sin", NULL, 0},     {"Cos", NULL, 0},       {"Softsign", NULL, 0},
    };
    const int64_t n = 1000;
    double *dyv = malloc(n * sizeof(double)), *vv = malloc(n * sizeof(double));
    CU_ASSERT_FATAL(dyv && vv);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_rng r = fr_test_rng(cases[c].op);
        for (int64_t i = 0; i < n; i++) {
            double x = 3 * fr_rng_normal(&r);
            dyv[i] = (float)fr_rng_normal(&r); /* exact in both dtypes */
            vv[i] = (float)(cases[c].kind == 1 ? fabs(x) + 1e-3 : cases[c].kind == 2 ? tanh(x)
                            : cases[c].kind == 3 ? 1 / (1 + exp(-x)) : x);
        }
        fr_tensor *res[2] = {NULL, NULL};
        fr_graph *gs[2];
        fr_tensor **ts[2];
        for (int p = 0; p < 2; p++) {
            fr_dtype dt = p ? FR_F64 : FR_F32;
            fr_graph *g = gs[p] = fr_gc_new_graph(20);
            int64_t d[1] = {n};
            int in[2] = {fr_gc_add_values(g, "dy", dt, 1, d, dyv), fr_gc_add_values(g, "v", dt, 1, d, vv)}, out;
            int nid = fr_gc_node(g, "ActivationGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
            FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "op", cases[c].op));
            fr_node *node = &g->nodes[nid];
            if (cases[c].approximate)
                FR_ASSERT_OK(fr_node_set_attr_string(node, "approximate", cases[c].approximate));
            FR_ASSERT_OK(fr_node_infer(g, nid));
            CU_ASSERT_EQUAL(g->values[out].dtype, dt);
            ts[p] = calloc((size_t)g->n_values, sizeof(fr_tensor *));
            FR_ASSERT_OK(fr_gc_run(g, ts[p]));
            res[p] = ts[p][out];
        }
        const float *a = res[0]->data;
        const double *b = res[1]->data;
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (!(fabs(a[i] - b[i]) <= 1e-6 * fabs(b[i]) + 1e-37)) bad++;
        if (bad)
            fprintf(stderr, "\n  ActivationGrad %s: %d of %lld float32 results off\n", cases[c].op,
                    bad, (long long)n);
        CU_ASSERT_EQUAL(bad, 0);
        for (int p = 0; p < 2; p++) {
            fr_gc_free_tensors(gs[p], ts[p]);
            free(ts[p]);
            fr_graph_free(gs[p]);
        }
    }
    free(dyv);
    free(vv);
}

/* Unsupported attribute values and dtypes are clear errors naming the node. */
static void test_errors(void)
{
    fr_rng r = fr_test_rng("errors");
    fr_graph *g = fr_gc_new_graph(20);
    int64_t d[1] = {3};
    int in[2] = {fr_gc_add_input(g, &r, "dy", FR_F64, 1, d, NULL),
                 fr_gc_add_input(g, &r, "v", FR_F64, 1, d, NULL)};
    int in16[2] = {fr_gc_add_input(g, &r, "dy16", FR_F16, 1, d, NULL),
                   fr_gc_add_input(g, &r, "v16", FR_F16, 1, d, NULL)};
    int out;
    int nid = fr_gc_node(g, "ActivationGrad", FR_DOMAIN_FP8RUN, 2, in, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "op", "Selu"));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "Selu"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), g->nodes[nid].name));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "op", "Gelu"));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "approximate", "erf"));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "approximate"));
    nid = fr_gc_node(g, "ActivationGrad", FR_DOMAIN_FP8RUN, 2, in16, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "op", "Tanh"));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float16"));
    int pin[3] = {in[0], in[1], in[1]};
    nid = fr_gc_node(g, "PowGrad", FR_DOMAIN_FP8RUN, 3, pin, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "input", 2));
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED);
    int outs[2];
    int ein[3] = {in[0], in[1], in[1]};
    nid = fr_gc_node(g, "ExtremumGrad", FR_DOMAIN_FP8RUN, 3, ein, 2, outs);
    CU_ASSERT_EQUAL(fr_node_infer(g, nid), FR_ERR_UNSUPPORTED); /* mode missing */
    fr_graph_free(g);
}

/* ---- a chain: y = Gelu(x * w1 + b1) * w2 ---- */

static void test_mlp_chain(void)
{
    fr_rng r = fr_test_rng("mlp");
    fr_graph *g = fr_gc_new_graph(20);
    int64_t dx[3] = {4, 1, 3}, dw1[2] = {5, 3}, db1[2] = {5, 1}, dw2[1] = {3};
    int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, dx, NULL);
    int w1 = fr_gc_add_input(g, &r, "w1", FR_F64, 2, dw1, NULL);
    int b1 = fr_gc_add_input(g, &r, "b1", FR_F64, 2, db1, NULL);
    int w2 = fr_gc_add_input(g, &r, "w2", FR_F64, 1, dw2, NULL);
    int in[2] = {x, w1};
    int h = fr_gc_op1(g, "Mul", 2, in); /* [4,5,3] */
    int in2[2] = {h, b1};
    int hb = fr_gc_op1(g, "Add", 2, in2);
    int a = fr_gc_op1(g, "Gelu", 1, &hb);
    int in3[2] = {a, w2};
    int y = fr_gc_op1(g, "Mul", 2, in3);
    int wrt[4] = {w1, b1, w2, x};
    fr_gc_check(g, &r, y, 4, wrt, "Gelu(x*w1+b1)*w2", TOL);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"unary", test_unary},
    {"piecewise_constant", test_piecewise_constant},
    {"unary_conventions", test_unary_conventions},
    {"cast", test_cast},
    {"identity_dropout", test_identity_dropout},
    {"clip", test_clip},
    {"clip_conventions", test_clip_conventions},
    {"binary", test_binary},
    {"pow", test_pow},
    {"pow_conventions", test_pow_conventions},
    {"mod", test_mod},
    {"variadic", test_variadic},
    {"extremum_conventions", test_extremum_conventions},
    {"where", test_where},
    {"expand", test_expand},
    {"activation_grad_f32_vs_f64", test_activation_grad_f32_vs_f64},
    {"errors", test_errors},
    {"mlp_chain", test_mlp_chain},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"grad_elementwise", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
