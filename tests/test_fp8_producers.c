/* FP8-emitting producers (passes/fp8_producers.h) on the CPU: SwiGLUQuantize (ops/swiglu.h)
 * writes the codes and amax an fp8 Linear would make from SwiGLU's output, the Linear reading
 * those codes (ops/linear.h, an E4M3 X) gives the Y of the float X bit for bit; likewise
 * SwiGLUGradQuantize for the data gradient's dY (both layouts of the codes); and training the
 * generated Llama with the pass on and off gives the same losses, gradients and weights, bit
 * for bit, with the SwiGLU nodes rewritten only where the pass's conditions hold (the down
 * projection's X remade for its weight gradient, the delayed recipe). Fresh random inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "graph/fp8_scaling.h"
#include "ops/linear.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "tests/bf16_check.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"
#include "tests/op_harness.h"

static const char *const k_acts[3] = {"silu", "gelu_tanh", "gelu"};

/* SwiGLUQuantize's codes and amax are SwiGLU's y quantized with the scale and its amax; a
 * Linear reading the codes gives the Y of the Linear reading y, bit for bit */
static void test_op(void)
{
    static const int64_t shapes[3][3] = {{16, 32, 24}, {7, 5, 9}, {33, 48, 16}}; /* rows, F, N */
    fr_rng rng = fr_test_rng("fp8_producers_op");
    int cases = 0;
    for (int si = 0; si < 3; si++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 4; c++) {
                const int64_t R = shapes[si][0], F = shapes[si][1], N = shapes[si][2];
                const int gu16 = c & 1, y16 = c >> 1, tb = (si + c) & 1;
                int64_t gd[2] = {R, 2 * F}, wd[2] = {tb ? N : F, tb ? F : N};
                fr_tensor *guf = tt_randn(&rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
                fr_tensor *gu = gu16 ? gub : guf, *w = tt_randn(&rng, FR_F32, 2, wd, 0.0, 0.2);
                fr_tensor *sx = tt_scalar1(90.0f + (float)c), *sw = tt_scalar1(700.0f);
                tnode sw_, q;
                tn_init_domain(&sw_, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, &gu, 0, 1);
                fr_tensor *qin[2] = {gu, sx};
                tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUQuantize", 1, 2, qin, 0, 2);
                TN_ATTR(&sw_, string, "activation", k_acts[a]);
                TN_ATTR(&q, string, "activation", k_acts[a]);
                if (y16) {
                    TN_ATTR(&sw_, string, "y_dtype", "bfloat16");
                    TN_ATTR(&q, string, "y_dtype", "bfloat16");
                }
                FR_ASSERT_OK(tn_run(&sw_));
                FR_ASSERT_OK(tn_run(&q));
                CU_ASSERT_EQUAL_FATAL(q.out[0]->dtype, FR_F8E4M3);
                float *y = tt_floats(sw_.out[0]);
                uint8_t *want = malloc((size_t)(R * F));
                FR_ASSERT_OK(fr_fp8_quantize(y, R * F, 90.0f + (float)c, FR_F8E4M3, want));
                CU_ASSERT_EQUAL(memcmp(want, q.out[0]->data, (size_t)(R * F)), 0);
                const float am = fr_amax(y, R * F);
                CU_ASSERT_EQUAL(memcmp(&am, q.out[1]->data, sizeof am), 0);
                /* Linear(y) against Linear(codes) */
                fr_tensor *lf_in[5] = {sw_.out[0], w, NULL, sx, sw}, *lq_in[5] = {q.out[0], w, NULL, sx, sw};
                tnode lf, lq;
                tn_init_domain(&lf, FR_DOMAIN_FP8RUN, "Linear", 1, 5, lf_in, 0, 5);
                tn_init_domain(&lq, FR_DOMAIN_FP8RUN, "Linear", 1, 5, lq_in, 0, 5);
                tnode *both[2] = {&lf, &lq};
                for (int b = 0; b < 2; b++) {
                    TN_ATTR(both[b], string, "precision", "fp8");
                    TN_ATTR(both[b], int, "transB", tb);
                    tn_omit_output(both[b], FR_LIN_OUT_XQ);
                    tn_omit_output(both[b], FR_LIN_OUT_XQ_SINV);
                }
                tn_omit_output(&lq, FR_LIN_OUT_AMAX_X);
                FR_ASSERT_OK(tn_run(&lf));
                FR_ASSERT_OK(tn_run(&lq));
                char lab[160];
                snprintf(lab, sizeof lab, "rows %lld F %lld N %lld %s gate_up %s y %s transB %d", (long long)R,
                         (long long)F, (long long)N, k_acts[a], gu16 ? "bf16" : "f32", y16 ? "bf16" : "f32", tb);
                CU_ASSERT_EQUAL(bc_bits_diff(lab, lq.out[0], lf.out[0]), 0);
                CU_ASSERT_EQUAL(memcmp(lf.out[FR_LIN_OUT_AMAX_X]->data, q.out[1]->data, 4), 0);
                CU_ASSERT_EQUAL(memcmp(lf.out[FR_LIN_OUT_AMAX_W]->data, lq.out[FR_LIN_OUT_AMAX_W]->data, 4), 0);
                cases++;
                tn_free(&lq);
                tn_free(&lf);
                tn_free(&q);
                tn_free(&sw_);
                free(y);
                free(want);
                fr_tensor_free(guf);
                fr_tensor_free(gub);
                fr_tensor_free(w);
                fr_tensor_free(sx);
                fr_tensor_free(sw);
            }
    printf("\n    %d cases: codes, amax and Y bit for bit", cases);
}

/* SwiGLUGradQuantize's codes (both layouts), scale_inv and amax are SwiGLUGrad's d_gate_up
 * quantized with the scale, as the data gradient would; a LinearGradData reading the codes gives
 * the dX of the one reading d_gate_up, bit for bit, and that one's dYq, dYq_scale_inv, amax_dy
 * equal the producer's */
static void test_grad_op(void)
{
    static const int64_t shapes[3][3] = {{16, 32, 24}, {7, 5, 9}, {33, 48, 16}}; /* rows, F, K */
    fr_rng rng = fr_test_rng("fp8_producers_grad_op");
    int cases = 0;
    for (int si = 0; si < 3; si++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 8; c++) {
                const int64_t R = shapes[si][0], F = shapes[si][1], K = shapes[si][2];
                const int gu16 = c & 1, d16 = (c >> 1) & 1, e4m3 = c >> 2, tb = (si + c) & 1;
                int64_t gd[2] = {R, 2 * F}, dd[2] = {R, F}, wd[2] = {tb ? 2 * F : K, tb ? K : 2 * F};
                fr_tensor *guf = tt_randn(&rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
                fr_tensor *dyf = tt_randn(&rng, FR_F32, 2, dd, 0.0, 0.5), *dyb = bc_bf16_pair(dyf);
                fr_tensor *gu = gu16 ? gub : guf, *dy = d16 ? dyb : dyf, *w = tt_randn(&rng, FR_F32, 2, wd, 0.0, 0.2);
                fr_tensor *sdy = tt_scalar1(e4m3 ? 30.0f + (float)c : 3000.0f + (float)c), *sw = tt_scalar1(700.0f);
                tnode sg, q;
                fr_tensor *gin[2] = {gu, dy}, *qin[3] = {gu, dy, sdy};
                tn_init_domain(&sg, FR_DOMAIN_FP8RUN, "SwiGLUGrad", 1, 2, gin, 0, 1);
                tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUGradQuantize", 1, 3, qin, 0, 4);
                TN_ATTR(&sg, string, "activation", k_acts[a]);
                TN_ATTR(&q, string, "activation", k_acts[a]);
                TN_ATTR(&sg, string, "dx_dtype", "bfloat16");
                TN_ATTR(&q, string, "dx_dtype", "bfloat16");
                if (e4m3) TN_ATTR(&q, string, "codes_dtype", "float8e4m3fn");
                FR_ASSERT_OK(tn_run(&sg));
                FR_ASSERT_OK(tn_run(&q));
                const fr_dtype fmt = e4m3 ? FR_F8E4M3 : FR_F8E5M2;
                CU_ASSERT_EQUAL_FATAL(q.out[0]->dtype, fmt);
                CU_ASSERT_EQUAL_FATAL(q.out[1]->dims[0], 2 * F);
                CU_ASSERT_EQUAL_FATAL(q.out[1]->dims[1], R);
                /* the data gradient on d_gate_up, and on the codes */
                fr_tensor *lf_in[4] = {sg.out[0], w, sw, sdy}, *lq_in[4] = {q.out[0], w, sw, sdy};
                tnode lf, lq;
                tn_init_domain(&lf, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 4, lf_in, 0, 4);
                tn_init_domain(&lq, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 4, lq_in, 0, 1);
                tnode *both[2] = {&lf, &lq};
                for (int b = 0; b < 2; b++) {
                    TN_ATTR(both[b], string, "precision", "fp8");
                    TN_ATTR(both[b], int, "transB", tb);
                    if (e4m3) TN_ATTR(both[b], string, "fp8_format", "e4m3");
                }
                FR_ASSERT_OK(tn_run(&lf));
                FR_ASSERT_OK(tn_run(&lq));
                char lab[160];
                snprintf(lab, sizeof lab, "rows %lld F %lld K %lld %s gate_up %s dy %s %s transB %d", (long long)R,
                         (long long)F, (long long)K, k_acts[a], gu16 ? "bf16" : "f32", d16 ? "bf16" : "f32",
                         e4m3 ? "e4m3" : "e5m2", tb);
                CU_ASSERT_EQUAL(bc_bits_diff(lab, lq.out[0], lf.out[0]), 0);
                CU_ASSERT_EQUAL(memcmp(lf.out[2]->data, q.out[1]->data, (size_t)(R * 2 * F)), 0); /* dYq */
                CU_ASSERT_EQUAL(memcmp(lf.out[3]->data, q.out[2]->data, 4), 0);                   /* its scale_inv */
                CU_ASSERT_EQUAL(memcmp(lf.out[1]->data, q.out[3]->data, 4), 0);                   /* amax_dy */
                /* the row-major codes: d_gate_up quantized */
                float *d = tt_floats(sg.out[0]);
                uint8_t *want = malloc((size_t)(R * 2 * F));
                FR_ASSERT_OK(fr_fp8_quantize(d, R * 2 * F, ((const float *)sdy->data)[0], fmt, want));
                CU_ASSERT_EQUAL(memcmp(want, q.out[0]->data, (size_t)(R * 2 * F)), 0);
                cases++;
                free(d);
                free(want);
                tn_free(&lq);
                tn_free(&lf);
                tn_free(&q);
                tn_free(&sg);
                fr_tensor_free(guf);
                fr_tensor_free(gub);
                fr_tensor_free(dyf);
                fr_tensor_free(dyb);
                fr_tensor_free(w);
                fr_tensor_free(sdy);
                fr_tensor_free(sw);
            }
    printf("\n    %d cases: codes both ways, scale_inv, amax and dX bit for bit", cases);
}

/* a scale that is not finite and > 0 is refused like the Linear's; a Linear reading codes
 * refuses the current recipe and an amax_x output */
static void test_errors(void)
{
    fr_rng rng = fr_test_rng("fp8_producers_err");
    int64_t gd[2] = {4, 16}, wd[2] = {8, 8};
    fr_tensor *gu = tt_randn(&rng, FR_F32, 2, gd, 0.0, 1.0), *zero = tt_scalar1(0.0f), *sx = tt_scalar1(4.0f);
    fr_tensor *w = tt_randn(&rng, FR_F32, 2, wd, 0.0, 1.0);
    fr_tensor *qin[2] = {gu, zero};
    tnode q;
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUQuantize", 1, 2, qin, 0, 2);
    CU_ASSERT_EQUAL(tn_run(&q), FR_ERR_NUMERIC);
    tn_free(&q);
    qin[1] = sx;
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUQuantize", 1, 2, qin, 0, 2);
    FR_ASSERT_OK(tn_run(&q));
    for (int k = 0; k < 2; k++) {
        fr_tensor *lin[5] = {q.out[0], w, NULL, k ? sx : NULL, k ? sx : NULL};
        tnode l;
        tn_init_domain(&l, FR_DOMAIN_FP8RUN, "Linear", 1, k ? 5 : 2, lin, 0, k ? 4 : 1);
        TN_ATTR(&l, string, "precision", "fp8");
        if (!k) TN_ATTR(&l, string, "recipe", "current");
        if (k) {
            tn_omit_output(&l, FR_LIN_OUT_XQ);
            tn_omit_output(&l, FR_LIN_OUT_XQ_SINV);
        }
        CU_ASSERT_NOT_EQUAL(tn_run(&l), FR_OK);
        tn_assert_error(k ? "amax_x" : "delayed recipe");
        tn_free(&l);
    }
    tn_free(&q);
    /* dY's codes: a refused scale; a data gradient reading them without the delayed recipe, with
     * an amax_dy output, or in the other format */
    int64_t dd[2] = {4, 8};
    fr_tensor *dy = tt_randn(&rng, FR_F32, 2, dd, 0.0, 1.0);
    fr_tensor *gin[3] = {gu, dy, zero};
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUGradQuantize", 1, 3, gin, 0, 4);
    CU_ASSERT_EQUAL(tn_run(&q), FR_ERR_NUMERIC);
    tn_free(&q);
    gin[2] = sx;
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUGradQuantize", 1, 3, gin, 0, 4);
    FR_ASSERT_OK(tn_run(&q));
    int64_t w2d[2] = {16, 8};
    fr_tensor *w2 = tt_randn(&rng, FR_F32, 2, w2d, 0.0, 1.0);
    for (int k = 0; k < 3; k++) {
        fr_tensor *lin[4] = {q.out[0], w2, sx, sx};
        tnode l;
        tn_init_domain(&l, FR_DOMAIN_FP8RUN, "LinearGradData", 1, k ? 4 : 2, lin, 0, k == 1 ? 2 : 1);
        TN_ATTR(&l, string, "precision", "fp8");
        if (!k) TN_ATTR(&l, string, "recipe", "current");
        if (k == 2) TN_ATTR(&l, string, "fp8_format", "e4m3");
        CU_ASSERT_NOT_EQUAL(tn_run(&l), FR_OK);
        tn_assert_error(k == 1 ? "amax_dy" : k ? "dY format" : "delayed recipe");
        tn_free(&l);
    }
    tn_free(&q);
    fr_tensor_free(dy);
    fr_tensor_free(w2);
    fr_tensor_free(gu);
    fr_tensor_free(zero);
    fr_tensor_free(sx);
    fr_tensor_free(w);
}

static int count_op(const fr_graph *g, const char *op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

/* the generated Llama trained 4 steps in fp8 with the down projection's X remade: the pass on
 * and off give the same numbers bit for bit; it rewrites each layer's SwiGLU under the delayed
 * recipe and none under the others, or when the weight gradient reads saved codes */
static void test_training(void)
{
    static const fr_llama_config cfg = {
        .d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 128, .vocab = 64, .max_seq = 32, .seed = 9};
    static const char *const recipes[3] = {"delayed", "current", "block"};
    fr_graph *g;
    FR_ASSERT_OK(fr_llama_generate(&cfg, &g));
    for (int r = 0; r < 3; r++)
        for (int mode = 0; mode < 2; mode++) {
            fr_trainer *t[2] = {NULL, NULL};
            CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_WGRAD_OPERAND", mode ? "remade" : "kept", 1), 0);
            for (int k = 0; k < 2; k++) {
                fr_train_options o;
                fr_train_options_default(&o);
                o.batch = 4;
                o.seq_len = 32;
                o.precision = "fp8";
                o.fp8.recipe = recipes[r];
                CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_FP8_PRODUCERS", k ? "1" : "0", 1), 0);
                FR_ASSERT_OK(fr_trainer_new(g, &o, &t[k]));
            }
            if (r == 0 && mode) { /* FP8RUN_FP8_PRODUCERS=forward: the SwiGLUs rewritten, not their gradients */
                fr_trainer *tf = NULL;
                fr_train_options o;
                fr_train_options_default(&o);
                o.batch = 4;
                o.seq_len = 32;
                o.precision = "fp8";
                CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_FP8_PRODUCERS", "forward", 1), 0);
                FR_ASSERT_OK(fr_trainer_new(g, &o, &tf));
                CU_ASSERT_EQUAL(count_op(tf->g, "SwiGLUQuantize"), cfg.layers);
                CU_ASSERT_EQUAL(count_op(tf->g, "SwiGLUGradQuantize"), 0);
                fr_trainer_free(tf);
                tf = NULL;
                CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_FP8_PRODUCERS", "foward", 1), 0); /* a typo: refused */
                CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &tf), FR_ERR_INVALID_ARG);
                CU_ASSERT_PTR_NULL(tf);
                CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "FP8RUN_FP8_PRODUCERS=foward"));
                fr_clear_error();
            }
            unsetenv("FP8RUN_FP8_PRODUCERS");
            const int want = r == 0 && mode ? cfg.layers : 0, want_grad = r == 0 ? cfg.layers : 0;
            CU_ASSERT_EQUAL(count_op(t[0]->g, "SwiGLUQuantize"), 0);
            CU_ASSERT_EQUAL(count_op(t[1]->g, "SwiGLUQuantize"), want);
            CU_ASSERT_EQUAL(count_op(t[0]->g, "SwiGLUGradQuantize"), 0);
            CU_ASSERT_EQUAL(count_op(t[1]->g, "SwiGLUGradQuantize"), want_grad);
            CU_ASSERT_EQUAL(count_op(t[1]->g, "SwiGLUGrad"), cfg.layers - want_grad);
            /* (the block recipe remakes X by copies of the SwiGLU nodes) */
            CU_ASSERT_EQUAL(count_op(t[1]->g, "SwiGLU"), cfg.layers - want + (r == 2 && mode ? cfg.layers : 0));
            const int same = fr_ft_same_training(t, 2, 4, 32, cfg.vocab, 1, 4, "fp8_producers");
            CU_ASSERT(same);
            printf("\n    %s, X %s: %d SwiGLUQuantize, %d SwiGLUGradQuantize, bit-identical %s", recipes[r],
                   mode ? "remade" : "kept", count_op(t[1]->g, "SwiGLUQuantize"),
                   count_op(t[1]->g, "SwiGLUGradQuantize"), same ? "yes" : "NO");
            fr_trainer_free(t[0]);
            fr_trainer_free(t[1]);
        }
    unsetenv("FP8RUN_WGRAD_OPERAND");
    fr_graph_free(g);
}

static CU_TestInfo k_tests[] = {
    {"SwiGLUQuantize: codes and amax of SwiGLU's y; Linear(codes) == Linear(y), bit for bit", test_op},
    {"SwiGLUGradQuantize: dY's codes both ways, scale_inv, amax; dX from codes == dX from d_gate_up", test_grad_op},
    {"a refused scale; a Linear (data gradient) reading codes without the delayed recipe or with amax_x (amax_dy)",
     test_errors},
    {"training with the pass on and off: bit-identical, rewritten where it applies", test_training},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo k_suites[] = {
    {"fp8_producers", NULL, NULL, NULL, NULL, k_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(k_suites); }
