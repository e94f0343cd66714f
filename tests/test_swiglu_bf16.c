/* SwiGLU / SwiGLUGrad around the FP8 Linears in bfloat16 (ops/swiglu.c), on the CPU,
 * fresh random inputs (FR_TEST_SEED):
 *  - every combination of gate/up bfloat16, dy bfloat16 and y_dtype / dx_dtype bfloat16, both
 *    forms, the three activations, several shapes, against the all-float32 case of the same
 *    values: float32 outputs bit for bit, bfloat16 outputs the float32 output rounded to
 *    nearest even bit for bit (rounding written out in tests/bf16_check.c); an omitted output;
 *  - the gradient rule through autodiff with y_dtype bfloat16 (the widening Cast's gradient
 *    hands SwiGLUGrad a bfloat16 dy): dgate, dup bit for bit those of the float32 graph that
 *    rounds y with two Casts, float32;
 *  - inferred dtypes, and bad combinations (bfloat16 outputs of float64 inputs, a bfloat16 dy
 *    with float64 gate/up, a float64 dy with float32 ones, unknown values) are node errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gradcheck.h"
#include "ops/grad.h"
#include "ops/op.h"

typedef struct shp {
    int r;
    int64_t d[3]; /* gate's shape (F last) */
} shp;

static const shp shapes[] = {{1, {1}}, {2, {3, 7}}, {2, {4, 16}}, {3, {2, 3, 12}}, {2, {5, 40}}};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static const char *g_act; /* activation of the next nodes (NULL: silu) */

/* xf: float32 inputs holding bfloat16 values, xb their bfloat16 copies; in16 / dy16: which to
 * use, o16: y_dtype / dx_dtype bfloat16 */
static void glu_run(tnode *t, fr_tensor **xf, fr_tensor **xb, int n_in, int grad, int n_out, int omit, int in16,
                    int dy16, int o16)
{
    fr_tensor *ins[3];
    for (int i = 0; i < n_in; i++) ins[i] = (grad && i == n_in - 1 ? dy16 : in16) ? xb[i] : xf[i];
    tn_init_domain(t, FR_DOMAIN_FP8RUN, grad ? "SwiGLUGrad" : "SwiGLU", 1, n_in, ins, 0u, n_out);
    if (omit >= 0) tn_omit_output(t, omit);
    if (g_act) TN_ATTR(t, string, "activation", g_act);
    if (o16) TN_ATTR(t, string, grad ? "dx_dtype" : "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(t));
}

static void combos(fr_rng *r, const shp *s, int grad, int one_input, int omit)
{
    int64_t d2[3];
    memcpy(d2, s->d, sizeof d2);
    if (one_input) d2[s->r - 1] *= 2;
    fr_tensor *xf[3], *xb[3];
    int n_in = 0;
    xf[n_in++] = tt_randn(r, FR_F32, s->r, one_input ? d2 : s->d, 0.0, 3.0);
    if (!one_input) xf[n_in++] = tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0);
    if (grad) xf[n_in++] = tt_randn(r, FR_F32, s->r, s->d, 0.0, 1.0);
    for (int i = 0; i < n_in; i++) xb[i] = bc_bf16_pair(xf[i]);
    const int n_out = grad && !one_input ? 2 : 1;
    tnode ref;
    glu_run(&ref, xf, xb, n_in, grad, n_out, omit, 0, 0, 0);
    for (int c = 1; c < (grad ? 8 : 4); c++) {
        const int in16 = c & 1, dy16 = grad && (c & 2), o16 = grad ? c >> 2 : c >> 1;
        tnode t;
        glu_run(&t, xf, xb, n_in, grad, n_out, omit, in16, dy16, o16);
        for (int o = 0; o < n_out; o++) {
            CU_ASSERT_EQUAL(t.out[o] == NULL, o == omit);
            if (!t.out[o]) continue;
            CU_ASSERT_EQUAL(t.out[o]->dtype, o16 ? FR_BF16 : FR_F32);
            char lab[160];
            snprintf(lab, sizeof lab, "%s %s act %s rank %d gate/up %d dy %d out %d: output %d",
                     grad ? "SwiGLUGrad" : "SwiGLU", one_input ? "one-input" : "two-input", g_act ? g_act : "silu",
                     s->r, in16, dy16, o16, o);
            bc_expect(lab, t.out[o], ref.out[o]);
        }
        tn_free(&t);
    }
    tn_free(&ref);
    for (int i = 0; i < n_in; i++) {
        fr_tensor_free(xf[i]);
        fr_tensor_free(xb[i]);
    }
}

static void test_combos(void)
{
    fr_rng r = fr_test_rng("swiglu_bf16_combos");
    static const char *const acts[3] = {NULL, "gelu_tanh", "gelu"};
    for (int a = 0; a < 3; a++) {
        g_act = acts[a];
        for (int i = 0; i < N_SHAPES; i++)
            for (int form = 0; form < 2; form++) {
                combos(&r, &shapes[i], 0, form, -1);
                combos(&r, &shapes[i], 1, form, -1);
            }
    }
    g_act = NULL;
    combos(&r, &shapes[2], 1, 0, 0);
    combos(&r, &shapes[3], 1, 0, 1);
}

/* ---- the gradient rule ---- */

/* y = SwiGLU(G, U) then float32: narrow: y_dtype bfloat16 and one Cast; else a float32 y rounded
 * by Cast(Cast(y, bfloat16), float32). wrt = {G, U}. Returns the float32 y. */
static int build_grad(fr_graph *g, uint64_t seed, int narrow, int *wrt)
{
    fr_rng r = {seed};
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t d[2] = {5, 12};
    const int gv = fr_gc_add_input(g, &r, "G", FR_F32, 2, d, NULL), uv = fr_gc_add_input(g, &r, "U", FR_F32, 2, d, NULL);
    int y;
    const int nid = fr_gc_node(g, "SwiGLU", FR_DOMAIN_FP8RUN, 2, (int[]){gv, uv}, 1, &y);
    if (narrow) FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "y_dtype", "bfloat16"));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    CU_ASSERT_EQUAL(g->values[y].dtype, narrow ? FR_BF16 : FR_F32);
    for (int k = narrow; k < 2; k++) {
        const int x = y;
        const int cid = fr_gc_node(g, "Cast", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[cid], "to", k == 0 ? FR_BF16 : FR_F32));
        FR_ASSERT_OK(fr_node_infer(g, cid));
    }
    wrt[0] = gv;
    wrt[1] = uv;
    return y;
}

static void test_grad_rule(void)
{
    fr_rng r = fr_test_rng("swiglu_bf16_grad");
    const uint64_t seed = r.s;
    (void)fr_rng_normal(&r); /* dy below from the next numbers */
    double dy[60];
    for (int i = 0; i < 60; i++) dy[i] = fr_rng_normal(&r);
    fr_graph *g[2];
    fr_tensor **t[2];
    int grads[2][2];
    for (int k = 0; k < 2; k++) {
        int wrt[2];
        g[k] = fr_gc_new_graph(21);
        const int out = build_grad(g[k], seed, k, wrt);
        t[k] = fr_gc_backprop(g[k], out, dy, 2, wrt, grads[k]);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g[k], "SwiGLUGrad"), 1);
        for (int i = 0; i < g[k]->n_nodes; i++)
            if (strcmp(g[k]->nodes[i].op_type, "SwiGLUGrad") == 0)
                CU_ASSERT_EQUAL(g[k]->values[g[k]->nodes[i].inputs[2]].dtype, k ? FR_BF16 : FR_F32);
    }
    static const char *const names[2] = {"dgate", "dup"};
    for (int i = 0; i < 2; i++) {
        const fr_tensor *a = fr_gc_value(g[1], t[1], grads[1][i]), *b = fr_gc_value(g[0], t[0], grads[0][i]);
        CU_ASSERT_EQUAL(a->dtype, FR_F32);
        CU_ASSERT_EQUAL(bc_bits_diff(names[i], a, b), 0);
    }
    for (int k = 0; k < 2; k++) {
        fr_gc_free_tensors(g[k], t[k]);
        free(t[k]);
        fr_graph_free(g[k]);
    }
}

/* ---- errors ---- */

/* a node over inputs of these dtypes (gate [3, 8] or gate_up [3, 16], dy [3, 8]) must fail
 * with `what` in the message */
static void expect_error(int grad, int one_input, fr_dtype gt, fr_dtype dyt, const char *attr, const char *val,
                         const char *what)
{
    const int64_t d[2] = {3, 8}, d2[2] = {3, 16};
    fr_tensor *ins[3];
    int n = 0;
    ins[n++] = tt_new(gt, 2, one_input ? d2 : d);
    if (!one_input) ins[n++] = tt_new(gt, 2, d);
    if (grad) ins[n++] = tt_new(dyt, 2, d);
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, grad ? "SwiGLUGrad" : "SwiGLU", 1, n, ins, 0u, grad && !one_input ? 2 : 1);
    if (attr) TN_ATTR(&t, string, attr, val);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error(what);
    tn_free(&t);
    for (int i = 0; i < n; i++) fr_tensor_free(ins[i]);
}

static void test_errors(void)
{
    expect_error(0, 0, FR_F64, 0, "y_dtype", "bfloat16", "y_dtype bfloat16 needs float32 or bfloat16 inputs");
    expect_error(0, 1, FR_F64, 0, "y_dtype", "bfloat16", "y_dtype bfloat16 needs float32 or bfloat16 inputs");
    expect_error(1, 0, FR_F64, FR_F64, "dx_dtype", "bfloat16", "dx_dtype bfloat16 needs float32 or bfloat16 inputs");
    expect_error(0, 0, FR_F32, 0, "y_dtype", "float16", "y_dtype 'float16' is not one of float32, bfloat16");
    expect_error(1, 1, FR_BF16, FR_F32, "dx_dtype", "bf16", "dx_dtype 'bf16' is not one of float32, bfloat16");
    expect_error(1, 0, FR_F64, FR_BF16, NULL, NULL, "is bfloat16, expected float64");
    expect_error(1, 1, FR_F32, FR_F64, NULL, NULL, "is float64, expected float32 or bfloat16");
    expect_error(1, 0, FR_BF16, FR_F16, NULL, NULL, "is float16, expected float32 or bfloat16");
    expect_error(0, 0, FR_F16, 0, NULL, NULL, "float32, bfloat16 or float64 only");
    /* gate and up of different dtypes */
    const int64_t d[2] = {3, 8};
    fr_tensor *ins[2] = {tt_new(FR_F32, 2, d), tt_new(FR_BF16, 2, d)};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 2, ins, 0u, 1);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error("is bfloat16, expected float32");
    tn_free(&t);
    fr_tensor_free(ins[0]);
    fr_tensor_free(ins[1]);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"bf16 gate/up, dy, y_dtype, dx_dtype == the float32 case (bits, outputs rounded)", test_combos},
        {"gradient rule with y_dtype bf16: dgate, dup == the Cast-rounded float32 graph's bits", test_grad_rule},
        {"bad dtype combinations and attribute values are node errors", test_errors},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"swiglu_bf16", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
