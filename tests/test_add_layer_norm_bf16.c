/* AddLayerNorm / AddLayerNormGrad around the FP8 Linears in bfloat16 (ops/add_layer_norm.c), on
 * the CPU, fresh random inputs (FR_TEST_SEED):
 *  - B bfloat16 and / or y_dtype bfloat16 against the float32 case of the same values, several
 *    shapes (one and two normalized dims, B repeated over the rows, with and without Bias): H and
 *    a float32 Y bit for bit, a bfloat16 Y the float32 Y rounded to nearest even bit for bit
 *    (rounding written out in tests/bf16_check.c);
 *  - AddLayerNormGrad with a bfloat16 dY (with and without dH, dScale / dBias omitted; with the
 *    second norm's bfloat16 dY2): dX and the parameter gradients bit for bit those of the
 *    float32 dY (dY2) of the same values; the forward's Y2 likewise;
 *  - the gradient rule through autodiff with a bfloat16 B and Y: dA, dB (float32), dScale,
 *    dBias bit for bit those of the float32 graph that rounds Y with two Casts; the backward
 *    reads H;
 *  - bad dtypes, shapes and attribute values are errors naming the node and the tensor. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gradcheck.h"
#include "ops/grad.h"
#include "ops/op.h"

typedef struct shp {
    int r, axis, b_lead; /* b_lead: B drops this many leading dims of A (repeated over them) */
    int64_t d[3];
} shp;

static const shp shapes[] = {
    {2, -1, 0, {5, 16}}, {3, -1, 1, {2, 3, 24}}, {2, -1, 0, {4, 7}}, {3, 1, 0, {2, 3, 8}},
    {2, -1, 0, {1, 1}},  {2, -1, 1, {3, 100}},   {3, 1, 1, {4, 2, 6}},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static fr_tensor *param_of(fr_rng *r, const shp *s, double mean)
{
    const int a = s->axis < 0 ? s->axis + s->r : s->axis;
    return tt_randn(r, FR_F32, s->r - a, s->d + a, mean, 0.5);
}

/* ---- forward ---- */

/* w2 (may be NULL): the second norm (Scale2 w2, Bias2 w: Y2) */
static void run_fwd(tnode *t, const shp *s, fr_tensor *a, fr_tensor *b, fr_tensor *w, fr_tensor *bias, fr_tensor *w2,
                    int y16)
{
    fr_tensor *ins[6] = {a, b, w, bias, w2, w};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "AddLayerNorm", 1, w2 ? 6 : bias ? 4 : 3, ins, 0, w2 ? 3 : 2);
    TN_ATTR(t, int, "axis", s->axis);
    if (y16) TN_ATTR(t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(t));
}

static void test_fwd(void)
{
    fr_rng r = fr_test_rng("add_layer_norm_bf16_fwd");
    for (int i = 0; i < N_SHAPES; i++) {
        const shp *s = &shapes[i];
        fr_tensor *a = tt_randn(&r, FR_F32, s->r, s->d, 0.3, 1.0);
        fr_tensor *bf = tt_randn(&r, FR_F32, s->r - s->b_lead, s->d + s->b_lead, 0.0, 0.8);
        fr_tensor *bb = bc_bf16_pair(bf), *w = param_of(&r, s, 1.0), *bias = i % 2 ? param_of(&r, s, 0.0) : NULL;
        fr_tensor *w2 = i % 3 == 1 ? param_of(&r, s, 1.0) : NULL;
        tnode ref;
        run_fwd(&ref, s, a, bf, w, bias, w2, 0);
        for (int c = 1; c < 4; c++) {
            const int b16 = c & 1, y16 = c >> 1;
            tnode t;
            run_fwd(&t, s, a, b16 ? bb : bf, w, bias, w2, y16);
            tt_assert_shape(t.out[0], FR_F32, s->r, s->d);
            for (int o = 0; o < (w2 ? 3 : 2); o++) {
                if (o) tt_assert_shape(t.out[o], y16 ? FR_BF16 : FR_F32, s->r, s->d);
                char lab[96];
                snprintf(lab, sizeof lab, "shape %d B %s Y %s: %s", i, b16 ? "bf16" : "f32", y16 ? "bf16" : "f32",
                         o == 0 ? "H" : o == 1 ? "Y" : "Y2");
                bc_expect(lab, t.out[o], ref.out[o]);
            }
            tn_free(&t);
        }
        tn_free(&ref);
        fr_tensor_free(a);
        fr_tensor_free(bf);
        fr_tensor_free(bb);
        fr_tensor_free(w);
        fr_tensor_free(bias);
        fr_tensor_free(w2);
    }
}

/* ---- backward ---- */

static void test_bwd(void)
{
    fr_rng r = fr_test_rng("add_layer_norm_bf16_bwd");
    static const char *const names[5] = {"dX", "dScale", "dBias", "dScale2", "dBias2"};
    for (int i = 0; i < N_SHAPES; i++)
        for (int v = 0; v < 5; v++) { /* 0: dH and all, 1: no dH, 2: no dScale, 3: no dBias, 4: dY2 too */
            const shp *s = &shapes[i];
            fr_tensor *dyf = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(&r, FR_F32, s->r, s->d, 0.2, 1.5);
            fr_tensor *dyb = bc_bf16_pair(dyf), *w = param_of(&r, s, 1.0), *dh = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 0.5);
            fr_tensor *dy2f = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 1.0), *dy2b = bc_bf16_pair(dy2f), *w2 = param_of(&r, s, 1.0);
            tnode t[2];
            for (int k = 0; k < 2; k++) {
                fr_tensor *ins[6] = {k ? dyb : dyf, x, w, dh, k ? dy2b : dy2f, w2};
                tn_init_domain(&t[k], FR_DOMAIN_FP8RUN, "AddLayerNormGrad", 1, v == 4 ? 6 : v == 1 ? 3 : 4, ins, 0,
                               v == 4 ? 5 : 3);
                TN_ATTR(&t[k], int, "axis", s->axis);
                if (v == 2 || v == 3) tn_omit_output(&t[k], v - 1);
                FR_ASSERT_OK(tn_run(&t[k]));
            }
            tt_assert_shape(t[1].out[0], FR_F32, s->r, s->d);
            for (int o = 0; o < (v == 4 ? 5 : 3); o++) {
                if (o && o < 3 && v == o + 1) {
                    CU_ASSERT_PTR_NULL(t[1].out[o]);
                    continue;
                }
                char lab[96];
                snprintf(lab, sizeof lab, "shape %d variant %d: %s", i, v, names[o]);
                CU_ASSERT_EQUAL(bc_bits_diff(lab, t[1].out[o], t[0].out[o]), 0);
            }
            for (int k = 0; k < 2; k++) tn_free(&t[k]);
            fr_tensor_free(dyf);
            fr_tensor_free(dyb);
            fr_tensor_free(x);
            fr_tensor_free(w);
            fr_tensor_free(dh);
            fr_tensor_free(dy2f);
            fr_tensor_free(dy2b);
            fr_tensor_free(w2);
        }
}

/* ---- the gradient rule ---- */

/* out = H * C + float32(Y). narrow: B bfloat16 and y_dtype bfloat16, Y widened by one Cast;
 * else B float32 (the same values) and Y rounded by Cast(Cast(Y, bfloat16), float32). Returns
 * out; *h the H value, wrt = {A, B, W, Bias}. */
static int build_grad(fr_graph *g, uint64_t seed, int narrow, int *wrt, int *h)
{
    fr_rng r = {seed};
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t dx[2] = {6, 16}, dw[1] = {16};
    const int a = fr_gc_add_input(g, &r, "A", FR_F32, 2, dx, NULL), b32 = fr_gc_add_input(g, &r, "B32", FR_F32, 2, dx, NULL);
    const int w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL), c = fr_gc_add_input(g, &r, "C", FR_F32, 2, dx, NULL);
    const int bias = fr_gc_add_input(g, &r, "Bias", FR_F32, 1, dw, NULL);
    fr_tensor *bb = bc_bf16_pair(g->values[b32].constant); /* B32 now holds bfloat16 values */
    int b = b32;
    if (narrow) {
        b = fr_gc_add_input(g, &r, "B16", FR_BF16, 2, dx, NULL);
        memcpy(g->values[b].constant->data, bb->data, bb->nbytes);
    }
    fr_tensor_free(bb);
    int outs[2];
    const int nid = fr_gc_node(g, "AddLayerNorm", FR_DOMAIN_FP8RUN, 4, (int[]){a, b, w, bias}, 2, outs);
    if (narrow) FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "y_dtype", "bfloat16"));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    CU_ASSERT_EQUAL(g->values[outs[1]].dtype, narrow ? FR_BF16 : FR_F32);
    int y = outs[1];
    for (int k = narrow; k < 2; k++) {
        const int x = y;
        const int cid = fr_gc_node(g, "Cast", "", 1, &x, 1, &y);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[cid], "to", k == 0 ? FR_BF16 : FR_F32));
        FR_ASSERT_OK(fr_node_infer(g, cid));
    }
    wrt[0] = a;
    wrt[1] = b;
    wrt[2] = w;
    wrt[3] = bias;
    *h = outs[0];
    return fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){outs[0], c}), y});
}

static void test_grad_rule(void)
{
    fr_rng r = fr_test_rng("add_layer_norm_bf16_grad");
    const uint64_t seed = r.s;
    (void)fr_rng_normal(&r); /* dy below from the next numbers */
    double dy[96];
    for (int i = 0; i < 96; i++) dy[i] = fr_rng_normal(&r);
    fr_graph *g[2];
    fr_tensor **t[2];
    int grads[2][4];
    for (int k = 0; k < 2; k++) {
        int wrt[4], h;
        g[k] = fr_gc_new_graph(21);
        const int out = build_grad(g[k], seed, k, wrt, &h);
        t[k] = fr_gc_backprop(g[k], out, dy, 4, wrt, grads[k]);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g[k], "AddLayerNormGrad"), 1);
        for (int i = 0; i < g[k]->n_nodes; i++)
            if (strcmp(g[k]->nodes[i].op_type, "AddLayerNormGrad") == 0) {
                const fr_node *n = &g[k]->nodes[i];
                CU_ASSERT_EQUAL(n->inputs[1], h);
                CU_ASSERT_EQUAL(g[k]->values[n->inputs[0]].dtype, k ? FR_BF16 : FR_F32);
            }
    }
    static const char *const names[4] = {"dA", "dB", "dScale", "dBias"};
    for (int i = 0; i < 4; i++) {
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

/* B of shape bd[2] (A is [3, 8]), Bias [bias_d] */
static void expect_fwd_error(fr_dtype at, fr_dtype bt, const int64_t *bd, int64_t bias_d, const char *ydt,
                             const char *what)
{
    fr_rng r = fr_test_rng("add_layer_norm_bf16_err");
    const int64_t d[2] = {3, 8}, dw[1] = {8}, dbias[1] = {bias_d};
    fr_tensor *a = tt_new(at, 2, d), *b = tt_new(bt, 2, bd), *w = tt_randn(&r, FR_F32, 1, dw, 1.0, 0.1);
    fr_tensor *bias = tt_randn(&r, FR_F32, 1, dbias, 0.0, 0.1);
    fr_tensor *ins[4] = {a, b, w, bias};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddLayerNorm", 1, 4, ins, 0, 2);
    if (ydt) TN_ATTR(&t, string, "y_dtype", ydt);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error(what);
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
    fr_tensor_free(w);
    fr_tensor_free(bias);
}

static void test_errors(void)
{
    const int64_t full[2] = {3, 8}, inner[2] = {3, 1}; /* inner: broadcast inside the normalized dim */
    expect_fwd_error(FR_F32, FR_F32, full, 8, "float16", "y_dtype 'float16'");
    expect_fwd_error(FR_BF16, FR_F32, full, 8, NULL, "A is bfloat16");
    expect_fwd_error(FR_F32, FR_F64, full, 8, "bfloat16", "B is float64");
    expect_fwd_error(FR_F32, FR_F32, full, 4, NULL, "Bias");
    expect_fwd_error(FR_F32, FR_F32, inner, 8, NULL, "B [3, 1]");
    /* the backward's dH must be float32 of H's shape */
    const int64_t d[2] = {3, 8}, dw[1] = {8};
    fr_tensor *dy = tt_new(FR_BF16, 2, d), *x = tt_new(FR_F32, 2, d), *w = tt_new(FR_F32, 1, dw), *dh = tt_new(FR_BF16, 2, d);
    fr_tensor *ins[4] = {dy, x, w, dh};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddLayerNormGrad", 1, 4, ins, 0, 3);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error("dH (float32)");
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(dh);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"AddLayerNorm bf16 B / y_dtype bf16 == the float32 case (bits, Y rounded)", test_fwd},
        {"AddLayerNormGrad bf16 dY == float32 dY (bits), with/without dH, dScale, dBias", test_bwd},
        {"gradient rule, bf16 B and Y: dA, dB, dScale, dBias == the Cast-rounded float32 graph's", test_grad_rule},
        {"bad dtypes, shapes and y_dtype values are node errors", test_errors},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"add_layer_norm_bf16", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
