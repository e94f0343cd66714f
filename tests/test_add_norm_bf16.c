/* AddRMSNorm / AddRMSNormGrad around the FP8 Linears in bfloat16 (ops/add_norm.c),
 * on the CPU, fresh random inputs (FR_TEST_SEED):
 *  - B bfloat16 and / or y_dtype bfloat16 against the float32 case of the same values, several
 *    shapes (one and two normalized dims): H and a float32 Y bit for bit, a bfloat16 Y the
 *    float32 Y rounded to nearest even bit for bit (rounding written out in tests/bf16_check.c);
 *  - AddRMSNormGrad with a bfloat16 dY (with and without dH, dScale omitted): dX and dScale
 *    bit for bit those of the float32 dY of the same values;
 *  - the gradient rule through autodiff with a bfloat16 B and Y (the widening Cast's gradient
 *    hands it a bfloat16 dY): dA, dB (float32), dScale bit for bit those of the float32 graph
 *    that rounds Y with two Casts; the backward reads H;
 *  - inferred dtypes, and bad dtypes / attribute values are errors naming the node. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gradcheck.h"
#include "ops/grad.h"
#include "ops/op.h"

typedef struct shp {
    int r, axis;
    int64_t d[3];
} shp;

static const shp shapes[] = {
    {2, -1, {5, 16}}, {3, -1, {2, 3, 24}}, {2, -1, {4, 7}}, {3, 1, {2, 3, 8}}, {2, -1, {1, 1}}, {2, -1, {3, 100}},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static fr_tensor *scale_of(fr_rng *r, const shp *s)
{
    const int a = s->axis < 0 ? s->axis + s->r : s->axis;
    return tt_randn(r, FR_F32, s->r - a, s->d + a, 1.0, 0.5);
}

/* ---- forward ---- */

static void run_fwd(tnode *t, const shp *s, fr_tensor *a, fr_tensor *b, fr_tensor *w, int y16)
{
    fr_tensor *ins[3] = {a, b, w};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 2);
    TN_ATTR(t, int, "axis", s->axis);
    if (y16) TN_ATTR(t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(t));
}

static void test_fwd(void)
{
    fr_rng r = fr_test_rng("add_norm_bf16_fwd");
    for (int i = 0; i < N_SHAPES; i++) {
        const shp *s = &shapes[i];
        fr_tensor *a = tt_randn(&r, FR_F32, s->r, s->d, 0.3, 1.0), *bf = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 0.8);
        fr_tensor *bb = bc_bf16_pair(bf), *w = scale_of(&r, s);
        tnode ref, hs;
        run_fwd(&ref, s, a, bf, w, 0);
        /* with the optional output Hs: H rounded to bfloat16, H and Y unchanged */
        fr_tensor *ins[3] = {a, bf, w};
        tn_init_domain(&hs, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 3);
        TN_ATTR(&hs, int, "axis", s->axis);
        FR_ASSERT_OK(tn_run(&hs));
        tt_assert_shape(hs.out[2], FR_BF16, s->r, s->d);
        CU_ASSERT_EQUAL(bc_round_diff("Hs", hs.out[2], ref.out[0], NULL), 0);
        CU_ASSERT_EQUAL(bc_bits_diff("H beside Hs", hs.out[0], ref.out[0]), 0);
        CU_ASSERT_EQUAL(bc_bits_diff("Y beside Hs", hs.out[1], ref.out[1]), 0);
        tn_free(&hs);
        for (int c = 1; c < 4; c++) {
            const int b16 = c & 1, y16 = c >> 1;
            tnode t;
            run_fwd(&t, s, a, b16 ? bb : bf, w, y16);
            tt_assert_shape(t.out[0], FR_F32, s->r, s->d);
            tt_assert_shape(t.out[1], y16 ? FR_BF16 : FR_F32, s->r, s->d);
            char lab[96];
            snprintf(lab, sizeof lab, "shape %d B %s Y %s: H", i, b16 ? "bf16" : "f32", y16 ? "bf16" : "f32");
            bc_expect(lab, t.out[0], ref.out[0]);
            snprintf(lab, sizeof lab, "shape %d B %s Y %s: Y", i, b16 ? "bf16" : "f32", y16 ? "bf16" : "f32");
            bc_expect(lab, t.out[1], ref.out[1]);
            tn_free(&t);
        }
        tn_free(&ref);
        fr_tensor_free(a);
        fr_tensor_free(bf);
        fr_tensor_free(bb);
        fr_tensor_free(w);
    }
}

/* ---- backward ---- */

static void test_bwd(void)
{
    fr_rng r = fr_test_rng("add_norm_bf16_bwd");
    for (int i = 0; i < N_SHAPES; i++)
        for (int v = 0; v < 3; v++) { /* 0: dH and dScale, 1: no dH, 2: no dScale */
            const shp *s = &shapes[i];
            fr_tensor *dyf = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 1.0), *x = tt_randn(&r, FR_F32, s->r, s->d, 0.2, 1.5);
            fr_tensor *dyb = bc_bf16_pair(dyf), *w = scale_of(&r, s), *dh = tt_randn(&r, FR_F32, s->r, s->d, 0.0, 0.5);
            fr_tensor *xb = bc_bf16_pair(x); /* x now holds bfloat16 values; xb them in bfloat16 (the saved Hs) */
            tnode t[2];
            for (int k = 0; k < 2; k++) {
                fr_tensor *ins[4] = {k ? dyb : dyf, k ? xb : x, w, dh};
                tn_init_domain(&t[k], FR_DOMAIN_FP8RUN, "AddRMSNormGrad", 1, v == 1 ? 3 : 4, ins, 0, 2);
                TN_ATTR(&t[k], int, "axis", s->axis);
                if (v == 2) tn_omit_output(&t[k], 1);
                FR_ASSERT_OK(tn_run(&t[k]));
            }
            tt_assert_shape(t[1].out[0], FR_F32, s->r, s->d);
            char lab[96];
            snprintf(lab, sizeof lab, "shape %d variant %d: dX", i, v);
            CU_ASSERT_EQUAL(bc_bits_diff(lab, t[1].out[0], t[0].out[0]), 0);
            if (v != 2) {
                snprintf(lab, sizeof lab, "shape %d variant %d: dScale", i, v);
                CU_ASSERT_EQUAL(bc_bits_diff(lab, t[1].out[1], t[0].out[1]), 0);
            }
            for (int k = 0; k < 2; k++) tn_free(&t[k]);
            fr_tensor_free(dyf);
            fr_tensor_free(dyb);
            fr_tensor_free(x);
            fr_tensor_free(xb);
            fr_tensor_free(w);
            fr_tensor_free(dh);
        }
}

/* ---- the gradient rule ---- */

/* out = H * C + float32(Y). narrow: B bfloat16 and y_dtype bfloat16, Y widened by one Cast;
 * else B float32 (the same values) and Y rounded by Cast(Cast(Y, bfloat16), float32). Returns
 * out; *h the H value, wrt = {A, B, W}. */
static int build_grad(fr_graph *g, uint64_t seed, int narrow, int *wrt, int *h)
{
    fr_rng r = {seed};
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t dx[2] = {6, 16}, dw[1] = {16};
    const int a = fr_gc_add_input(g, &r, "A", FR_F32, 2, dx, NULL), b32 = fr_gc_add_input(g, &r, "B32", FR_F32, 2, dx, NULL);
    const int w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL), c = fr_gc_add_input(g, &r, "C", FR_F32, 2, dx, NULL);
    fr_tensor *bb = bc_bf16_pair(g->values[b32].constant); /* B32 now holds bfloat16 values */
    int b = b32;
    if (narrow) {
        b = fr_gc_add_input(g, &r, "B16", FR_BF16, 2, dx, NULL);
        memcpy(g->values[b].constant->data, bb->data, bb->nbytes);
    }
    fr_tensor_free(bb);
    int outs[2];
    const int nid = fr_gc_node(g, "AddRMSNorm", FR_DOMAIN_FP8RUN, 3, (int[]){a, b, w}, 2, outs);
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
    *h = outs[0];
    return fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){outs[0], c}), y});
}

static void test_grad_rule(void)
{
    fr_rng r = fr_test_rng("add_norm_bf16_grad");
    const uint64_t seed = r.s;
    (void)fr_rng_normal(&r); /* dy below from the next numbers */
    double dy[96];
    for (int i = 0; i < 96; i++) dy[i] = fr_rng_normal(&r);
    fr_graph *g[2];
    fr_tensor **t[2];
    int grads[2][3];
    for (int k = 0; k < 2; k++) {
        int wrt[3], h;
        g[k] = fr_gc_new_graph(21);
        const int out = build_grad(g[k], seed, k, wrt, &h);
        t[k] = fr_gc_backprop(g[k], out, dy, 3, wrt, grads[k]);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g[k], "AddRMSNormGrad"), 1);
        for (int i = 0; i < g[k]->n_nodes; i++)
            if (strcmp(g[k]->nodes[i].op_type, "AddRMSNormGrad") == 0) {
                const fr_node *n = &g[k]->nodes[i];
                CU_ASSERT_EQUAL(n->inputs[1], h);
                /* the Cast's gradient hands a bfloat16 dY to the narrowed graph's node */
                CU_ASSERT_EQUAL(g[k]->values[n->inputs[0]].dtype, k ? FR_BF16 : FR_F32);
            }
    }
    static const char *const names[3] = {"dA", "dB", "dScale"};
    for (int i = 0; i < 3; i++) {
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

/* ---- inference and errors ---- */

static void expect_fwd_error(fr_dtype at, fr_dtype bt, fr_dtype wt, const char *ydt, const char *what)
{
    fr_rng r = fr_test_rng("add_norm_bf16_err");
    const int64_t d[2] = {3, 8}, dw[1] = {8};
    fr_tensor *a = tt_new(at, 2, d), *b = tt_new(bt, 2, d), *w = tt_randn(&r, wt, 1, dw, 1.0, 0.1);
    fr_tensor *ins[3] = {a, b, w};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNorm", 1, 3, ins, 0, 2);
    if (ydt) TN_ATTR(&t, string, "y_dtype", ydt);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error(what);
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
    fr_tensor_free(w);
}

static void expect_bwd_error(fr_dtype dyt, fr_dtype xt, fr_dtype dht, const char *what)
{
    const int64_t d[2] = {3, 8}, dw[1] = {8};
    fr_tensor *dy = tt_new(dyt, 2, d), *x = tt_new(xt, 2, d), *w = tt_new(FR_F32, 1, dw), *dh = tt_new(dht, 2, d);
    fr_tensor *ins[4] = {dy, x, w, dh};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNormGrad", 1, 4, ins, 0, 2);
    CU_ASSERT_NOT_EQUAL(tn_run(&t), FR_OK);
    tn_assert_error(what);
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(x);
    fr_tensor_free(w);
    fr_tensor_free(dh);
}

static void test_errors(void)
{
    expect_fwd_error(FR_F32, FR_F32, FR_F32, "float16", "y_dtype 'float16'");
    expect_fwd_error(FR_F32, FR_F32, FR_F32, "bfloat", "y_dtype 'bfloat'");
    expect_fwd_error(FR_BF16, FR_F32, FR_F32, NULL, "A is bfloat16");
    expect_fwd_error(FR_F64, FR_F64, FR_F32, "bfloat16", "A is float64");
    expect_fwd_error(FR_F32, FR_F64, FR_F32, "bfloat16", "B is float64");
    expect_fwd_error(FR_F32, FR_F16, FR_F32, NULL, "B is float16");
    expect_fwd_error(FR_F32, FR_BF16, FR_BF16, NULL, "Scale");
    expect_bwd_error(FR_F64, FR_F32, FR_F32, "dY is float64");
    expect_bwd_error(FR_BF16, FR_F64, FR_F32, "H is float64");
    expect_bwd_error(FR_BF16, FR_F32, FR_BF16, "dH (float32)");
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"AddRMSNorm bf16 B / y_dtype bf16 == the float32 case (bits, Y rounded)", test_fwd},
        {"AddRMSNormGrad bf16 dY and H == float32 ones of the same values (bits), with/without dH, dScale", test_bwd},
        {"gradient rule, bf16 B and Y: dA, dB, dScale == the Cast-rounded float32 graph's bits", test_grad_rule},
        {"inferred dtypes; bad dtypes and y_dtype values are node errors", test_errors},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"add_norm_bf16", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
