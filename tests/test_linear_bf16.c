/* Linear / LinearGradData / LinearGradWeight with bfloat16 X and dY (ops/linear.h) on the CPU:
 * for bf16 and fp8 precision, every fp8 recipe (delayed, current, block), both transB and both
 * fp8 formats, the bfloat16 inputs give the float32 inputs' results of the same values BIT FOR
 * BIT: Y (float32 and y_dtype bfloat16), Xq, Xq_scale_inv, amax_x / amax_w, dX, amax_dy, dYq,
 * dYq_scale_inv, dW (from X or the saved Xq, from dY bf16 or float32 in every mix). dx_dtype
 * "bfloat16" writes the float32 dX rounded to nearest even (checked with a rounding written
 * here). With a bias, y_dtype "bfloat16" gives bf16(S + bf16(bias)) for the float32 sum S of the
 * bias-free Linear, bit for bit, and a float32 Y keeps S + bias (every precision, transB, a
 * padded fp8 GEMM). The float32 path itself is checked against an independent reference by
 * test_linear.
 * Also: the gradient rule of a bfloat16 X gives a float32 dX, and the infer errors. */
#include <stdlib.h>
#include <string.h>

#include "tests/linear_pair.h"
#include "ops/grad.h"
#include "ops/linear.h"

/* Run the node on float32 and on bfloat16 inputs; every output must be the same bytes. Keeps
 * the float32 run in *keep_f when not NULL (the caller frees it). */
static int pair(const lp_case *c, const lp_data *d, lp_kind kind, int x_bf, int y_bf, int narrow, fr_tensor *saved,
                fr_tensor *saved_sinv, const char *label, tnode *keep_f)
{
    tnode a, b;
    const char *const *names = lp_init(&a, kind, c, d, 0, 0, narrow, saved, saved_sinv);
    lp_init(&b, kind, c, d, x_bf, y_bf, narrow, saved, saved_sinv);
    int ok = 1;
    if (tn_run(&a) != FR_OK || tn_run(&b) != FR_OK) {
        fprintf(stderr, "\n  %s: run failed: %s\n", label, fr_last_error());
        ok = 0;
    }
    for (int o = 0; ok && o < a.n_out; o++) ok &= lp_same(label, names[o], a.out[o], b.out[o]);
    if (ok && kind != LP_WGRAD && a.out[0] && a.out[0]->dtype != (narrow ? FR_BF16 : FR_F32)) {
        fprintf(stderr, "\n  %s: output 0 is %s\n", label, fr_dtype_name(a.out[0]->dtype));
        ok = 0;
    }
    if (keep_f)
        *keep_f = a;
    else
        tn_free(&a);
    tn_free(&b);
    return ok;
}

static int check_case(const lp_case *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    lp_data d;
    lp_make(&d, c, &r);
    int ok = 1, fp8 = lp_is_fp8(c);
    char l2[300];
    tnode fwd;
    snprintf(l2, sizeof l2, "%s forward", label);
    ok &= pair(c, &d, LP_FWD, 1, 0, 0, NULL, NULL, l2, &fwd);
    if (!fp8) ok &= lp_same(label, "bf16 Xq vs the bfloat16 X", fwd.out[1], d.xb); /* X's own bytes */
    snprintf(l2, sizeof l2, "%s forward y_dtype bfloat16", label);
    ok &= pair(c, &d, LP_FWD, 1, 0, 1, NULL, NULL, l2, NULL);
    snprintf(l2, sizeof l2, "%s LinearGradData", label);
    tnode dg;
    ok &= pair(c, &d, LP_DGRAD, 0, 1, 0, NULL, NULL, l2, &dg);
    /* dx_dtype bfloat16: the float32 dX rounded, everything else unchanged */
    snprintf(l2, sizeof l2, "%s LinearGradData dx_dtype bfloat16", label);
    tnode dn;
    const char *const *dnames = lp_init(&dn, LP_DGRAD, c, &d, 0, 1, 1, NULL, NULL);
    FR_ASSERT_OK(tn_run(&dn));
    int64_t near, bad = lp_bf16_of(dn.out[0], dg.out[0], 0.0, &near);
    if (bad != 0) fprintf(stderr, "\n  %s: %lld dX elements are not the float32 dX rounded\n", l2, (long long)bad);
    ok &= bad == 0;
    for (int o = 1; o < dn.n_out; o++) ok &= lp_same(l2, dnames[o], dn.out[o], dg.out[o]);
    tn_free(&dn);
    tn_free(&dg);
    for (int mix = 1; mix < 4; mix++) { /* bf16 X, bf16 dY, both */
        snprintf(l2, sizeof l2, "%s LinearGradWeight(%s X, %s dY)", label, mix & 1 ? "bf16" : "f32",
                 mix & 2 ? "bf16" : "f32");
        ok &= pair(c, &d, LP_WGRAD, mix & 1, mix & 2, 0, NULL, NULL, l2, NULL);
    }
    if (fp8) { /* from the saved codes and a bfloat16 dY */
        snprintf(l2, sizeof l2, "%s LinearGradWeight(saved Xq, bf16 dY)", label);
        ok &= pair(c, &d, LP_WGRAD, 0, 1, 0, fwd.out[1], fwd.out[2], l2, NULL);
    }
    tn_free(&fwd);
    lp_free(&d);
    return ok;
}

/* every precision x recipe x transB (and both fp8 formats); M = 135, K = 141, N = 29 (nothing a
 * multiple of 16) and M = 300, K = 256, N = 130 (several 128-blocks each way) */
static void test_bit_for_bit(void)
{
    static const char *const pr[4][2] = {{"bf16", NULL}, {"fp8", "delayed"}, {"fp8", "current"}, {"fp8", "block"}};
    for (int p = 0; p < 4; p++)
        for (int tb = 0; tb < 2; tb++)
            for (int s = 0; s < 2; s++) {
                lp_case c = {pr[p][0], pr[p][1], NULL, tb, 3, 45, 141, 29};
                if (s) {
                    c.lead0 = 300;
                    c.lead1 = 0;
                    c.K = 256;
                    c.N = 130;
                }
                if (p && (tb + s) % 2) c.fmt = "e4m3";
                char label[160];
                snprintf(label, sizeof label, "%s %s %s transB=%d shape#%d", c.prec, c.recipe ? c.recipe : "",
                         c.fmt ? c.fmt : "hybrid", tb, s);
                CU_ASSERT(check_case(&c, label));
            }
}

/* the gradient rule of Linear with a bfloat16 X: dX float32; in bf16 precision the weight
 * gradient reads the bfloat16 X itself (it is its own bf16 copy) */
static void test_gradient_rule(void)
{
    static const char *const pr[3][2] = {{"bf16", NULL}, {"fp8", "current"}, {"fp8", "delayed"}};
    for (int p = 0; p < 3; p++) {
        lp_case c = {pr[p][0], pr[p][1], NULL, 1, 2, 5, 24, 8};
        fr_rng r = fr_test_rng("lp_rule");
        lp_data d;
        lp_make(&d, &c, &r);
        tnode t;
        lp_init(&t, LP_FWD, &c, &d, 1, 0, 0, NULL, NULL);
        FR_ASSERT_OK(tn_run(&t));
        fr_graph *g = t.g;
        int dyv;
        FR_ASSERT_OK(fr_graph_add_value(g, "dY", &dyv));
        fr_value_set_shape(&g->values[dyv], FR_F32, g->values[t.out_vid[0]].rank, g->values[t.out_vid[0]].dims);
        int dout[5] = {dyv, -1, -1, -1, -1}, need[6] = {1, 1, 0, 0, 0, 0}, din[6] = {-1, -1, -1, -1, -1, -1};
        fr_grad_ctx ctx = {g, t.nid, 1, dout, need, din};
        FR_ASSERT_OK(fr_linear_op("Linear")->grad(&ctx));
        CU_ASSERT_FATAL(din[0] >= 0 && din[1] >= 0);
        CU_ASSERT_EQUAL(g->values[din[0]].dtype, FR_F32);
        CU_ASSERT_EQUAL(g->values[din[1]].dtype, FR_F32);
        const fr_node *gw = &g->nodes[g->values[din[1]].producer];
        if (p == 0) CU_ASSERT_EQUAL(gw->inputs[0], t.in_vid[0]); /* X, not its copy Xq */
        if (p == 1) CU_ASSERT_EQUAL(gw->inputs[0], t.out_vid[1]); /* the saved codes */
        tn_free(&t);
        lp_free(&d);
    }
}

static void expect_error(tnode *t, fr_status want, const char *what)
{
    fr_status st = tn_run(t);
    CU_ASSERT_EQUAL(st, want);
    if (st != FR_OK) tn_assert_error(what);
    tn_free(t);
}

static void test_errors(void)
{
    fr_rng r = fr_test_rng("lp_errors");
    lp_case c = {"fp32", NULL, NULL, 1, 2, 5, 24, 8};
    lp_data d;
    lp_make(&d, &c, &r);
    tnode t;
    lp_init(&t, LP_FWD, &c, &d, 1, 0, 0, NULL, NULL); /* bfloat16 X in fp32 precision */
    expect_error(&t, FR_ERR_UNSUPPORTED, "precision");
    lp_init(&t, LP_DGRAD, &c, &d, 0, 1, 0, NULL, NULL); /* bfloat16 dY in fp32 precision */
    expect_error(&t, FR_ERR_UNSUPPORTED, "precision");
    lp_init(&t, LP_WGRAD, &c, &d, 1, 1, 0, NULL, NULL);
    expect_error(&t, FR_ERR_UNSUPPORTED, "precision");
    lp_init(&t, LP_DGRAD, &c, &d, 0, 0, 1, NULL, NULL); /* dx_dtype bfloat16 in fp32 precision */
    expect_error(&t, FR_ERR_UNSUPPORTED, "dx_dtype");
    lp_init(&t, LP_FWD, &c, &d, 0, 0, 0, NULL, NULL); /* ... and on the forward, where it is copied from */
    TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    expect_error(&t, FR_ERR_UNSUPPORTED, "dx_dtype");
    c.prec = "bf16";
    lp_init(&t, LP_DGRAD, &c, &d, 0, 1, 0, NULL, NULL);
    TN_ATTR(&t, string, "dx_dtype", "float16");
    expect_error(&t, FR_ERR_UNSUPPORTED, "float16");
    lp_init(&t, LP_DGRAD, &c, &d, 0, 1, 1, NULL, NULL); /* bf16 precision: fine */
    expect_error(&t, FR_OK, "");
    /* a bfloat16 X needs a float32 weight */
    lp_data e = d;
    int64_t wd[2] = {8, 24};
    e.w = tt_randn(&r, FR_F64, 2, wd, 0, 1);
    lp_init(&t, LP_FWD, &c, &e, 1, 0, 0, NULL, NULL);
    expect_error(&t, FR_ERR_UNSUPPORTED, "float32 weight");
    fr_tensor_free(e.w);
    lp_free(&d);
}

/* ---- y_dtype bfloat16 with a bias ---- */

static fr_tensor *run_biased(fr_tensor *x, fr_tensor *w, fr_tensor *b, const char *prec, const char *recipe, int pad,
                             int transB, int y_bf16)
{
    tnode t;
    fr_tensor *ins[3] = {x, w, b};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, b ? 3 : 2, ins, 0u, 1);
    TN_ATTR(&t, int, "transB", transB);
    TN_ATTR(&t, string, "precision", prec);
    if (recipe) TN_ATTR(&t, string, "recipe", recipe);
    if (pad > 1) TN_ATTR(&t, int, "pad_multiple", pad);
    if (y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

/* Y = bf16(S + bf16(bias)) bit for bit, S the float32 sum (the bias-free float32 Linear of the same
 * operands), the sum in float32 and both roundings to nearest even (autocast's Linear, cuBLASLt's
 * bf16-output BIAS epilogue); a float32 Y keeps the float32 bias: S + bias exactly. Also counts
 * where the old rounding of S + bias differs, so the test shows it tells the two apart. */
static void test_bias_y_bf16(void)
{
    fr_rng r = fr_test_rng("linear_bias_y_bf16");
    static const int64_t shapes[][3] = {{5, 7, 3}, {33, 20, 17}, {64, 96, 80}}; /* M, K, N */
    static const struct {
        const char *prec, *recipe;
        int pad;
    } precs[] = {{"bf16", NULL, 1}, {"fp8", "current", 1}, {"fp8", "block", 1}, {"fp8", "current", 16}};
    int64_t old_differs = 0, total = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++)
            for (int tb = 0; tb < 2; tb++) {
                const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
                int64_t xd[2] = {M, K}, wd[2] = {tb ? N : K, tb ? K : N}, bd[1] = {N};
                fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0.0, 1.0), *w = tt_randn(&r, FR_F32, 2, wd, 0.0, 0.5);
                fr_tensor *b = tt_randn(&r, FR_F32, 1, bd, 0.0, 2.0);
                const char *pr = precs[p].prec, *rc = precs[p].recipe;
                fr_tensor *sum = run_biased(x, w, NULL, pr, rc, precs[p].pad, tb, 0);
                fr_tensor *yf = run_biased(x, w, b, pr, rc, precs[p].pad, tb, 0);
                fr_tensor *yb = run_biased(x, w, b, pr, rc, precs[p].pad, tb, 1);
                CU_ASSERT_EQUAL_FATAL(yb->dtype, FR_BF16);
                const float *sv = sum->data, *fv = yf->data, *bv = b->data;
                const uint16_t *yh = yb->data;
                int64_t bad = 0, bad_f = 0;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t j = 0; j < N; j++) {
                        const float bb = fr_bf16_to_f32(fr_f32_to_bf16(bv[j]));
                        const float acc = sv[m * N + j];
                        bad += yh[m * N + j] != fr_f32_to_bf16(acc + bb);
                        bad_f += memcmp(&fv[m * N + j], &(float){acc + bv[j]}, sizeof(float)) != 0;
                        old_differs += yh[m * N + j] != fr_f32_to_bf16(acc + bv[j]);
                    }
                total += M * N;
                if (bad || bad_f)
                    printf("\n  %s/%s pad %d transB %d case %zu: %lld of %lld bf16 Y not bf16(S + bf16(b)), %lld "
                           "float32 Y not S + b", pr, rc ? rc : "", precs[p].pad, tb, s, (long long)bad,
                           (long long)(M * N), (long long)bad_f);
                CU_ASSERT_EQUAL(bad, 0);
                CU_ASSERT_EQUAL(bad_f, 0);
                fr_tensor *all[6] = {x, w, b, sum, yf, yb};
                for (int k = 0; k < 6; k++) fr_tensor_free(all[k]);
            }
    printf(" (%lld of %lld elements differ from bf16(S + b), the float32 bias's single rounding)",
           (long long)old_differs, (long long)total);
    CU_ASSERT(old_differs * 100 > total); /* the bias's rounding is visible at these sizes */
}

static CU_TestInfo tests[] = {
    {"bfloat16 X / dY == float32 of the same values, bit for bit", test_bit_for_bit},
    {"y_dtype bfloat16 with a bias: bf16(float32 sum + bf16(bias)), bit for bit", test_bias_y_bf16},
    {"gradient rule of a bfloat16 X", test_gradient_rule},
    {"errors", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"linear_bf16", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
