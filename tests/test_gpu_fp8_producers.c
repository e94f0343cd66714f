/* SwiGLUQuantize, SwiGLUGradQuantize (ops/swiglu.h, ops/cuda/swiglu_quant.cu) and the fp8
 * Linear / LinearGradData reading their codes (ops/linear.h) on the CUDA backend. Fresh random gate_up N(0, 3) for every activation, gate_up
 * float32 and bfloat16, y_dtype float32 and bfloat16, shapes whose F takes the 16-byte vectors
 * and shapes that do not. What must hold:
 *   - the codes are the GPU SwiGLU's y quantized with the scale (the CPU's quantization of
 *     those values, bit for bit), the amax that y's (fr_amax), bit for bit;
 *   - a Linear reading the codes gives, on the GPU, the Y of the GPU Linear reading y, bit for
 *     bit, and its amax_w;
 *   - the CPU SwiGLUQuantize's codes are within one code of the GPU's (the CPU's SwiGLU rounds
 *     a double, the GPU's float32 math is within a few ulp: a value next to a rounding boundary
 *     may fall either side), at most 1% of them.
 * SwiGLUGradQuantize likewise: its codes, transposed codes, scale_inv and amax are the GPU
 * SwiGLUGrad's d_gate_up quantized (bit for bit), the data gradient reading the codes gives the dX
 * (and its dYq the transposed codes) of the one reading d_gate_up, the CPU's codes within one.
 * Training the tiny Llama 5 fp8 steps with the producers on, forward only and off gives the same
 * losses and weights bit for bit (the gate/up gradients rewritten only with them on).
 * Printed, not asserted: at the 1B step's shape (16384 tokens, F 5632, bf16 gate_up and y),
 * SwiGLU + the Linear's quantization of X against SwiGLUQuantize, and the backward's pair. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "ops/linear.h"
#include "runtime/train/train_internal.h"
#include "tests/bf16_check.h"
#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"

static const char *const k_acts[3] = {"silu", "gelu_tanh", "gelu"};
static const int64_t k_shapes[][3] = {
    {64, 64, 32}, {37, 40, 24}, {19, 13, 16}, {256, 96, 48}, {160, 128, 64}}; /* rows, F, N */
#define N_SHAPES (int)(sizeof k_shapes / sizeof k_shapes[0])

static void set_glu(tnode *t, const char *act, int y16)
{
    TN_ATTR(t, string, "activation", act);
    if (y16) TN_ATTR(t, string, "y_dtype", "bfloat16");
}

static void run_case(fr_rng *rng, const int64_t *shp, const char *act, int gu16, int y16, int tb)
{
    const int64_t R = shp[0], F = shp[1], N = shp[2];
    int64_t gd[2] = {R, 2 * F}, wd[2] = {tb ? N : F, tb ? F : N};
    fr_tensor *guf = tt_randn(rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
    fr_tensor *gu = gu16 ? gub : guf, *w = tt_randn(rng, FR_F32, 2, wd, 0.0, 0.2);
    fr_tensor *sx = tt_scalar1(60.0f), *sw = tt_scalar1(900.0f);
    char what[200];
    snprintf(what, sizeof what, "rows %lld F %lld N %lld %s gate_up %s y %s transB %d", (long long)R, (long long)F,
             (long long)N, act, gu16 ? "bf16" : "f32", y16 ? "bf16" : "f32", tb);
    tnode sg, q;
    tn_init_domain(&sg, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, &gu, 0, 1);
    set_glu(&sg, act, y16);
    FR_ASSERT_OK(tn_run(&sg));
    fr_tensor *yg[TN_MAX], *qg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&sg, yg));
    fr_tensor *qin[2] = {gu, sx};
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUQuantize", 1, 2, qin, 0, 2);
    set_glu(&q, act, y16);
    FR_ASSERT_OK(tn_run(&q));
    FR_ASSERT_OK(tn_run_gpu(&q, qg));
    /* the GPU's codes and amax: its own y quantized */
    float *y = tt_floats(yg[0]);
    fr_tensor *want = tt_new(FR_F8E4M3, 2, (int64_t[]){R, F});
    FR_ASSERT_OK(fr_fp8_quantize(y, R * F, 60.0f, FR_F8E4M3, want->data));
    char lab[300];
    snprintf(lab, sizeof lab, "%s: GPU codes vs the GPU SwiGLU's y quantized", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, qg[0], want), 0);
    const float am = fr_amax(y, R * F);
    CU_ASSERT_EQUAL(memcmp(&am, qg[1]->data, 4), 0);
    /* the CPU's codes: within one code of the GPU's, rarely off */
    int64_t off = 0, far = 0;
    for (int64_t i = 0; i < R * F; i++) {
        const int a = ((const uint8_t *)qg[0]->data)[i], b = ((const uint8_t *)q.out[0]->data)[i];
        off += a != b;
        far += abs(a - b) > 1 && ((a ^ b) & 0x80) == 0;
    }
    if (far || off * 100 > R * F)
        fprintf(stderr, "\n  %s: %lld codes differ from the CPU's, %lld by more than one\n", what, (long long)off,
                (long long)far);
    CU_ASSERT_EQUAL(far, 0);
    CU_ASSERT(off * 100 <= R * F);
    /* Linear(codes) == Linear(y) on the GPU */
    fr_tensor *lf_in[5] = {yg[0], w, NULL, sx, sw}, *lq_in[5] = {qg[0], w, NULL, sx, sw};
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
    fr_tensor *lfg[TN_MAX], *lqg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&lf, lfg));
    FR_ASSERT_OK(tn_run_gpu(&lq, lqg));
    snprintf(lab, sizeof lab, "%s: GPU Linear(codes) vs GPU Linear(y)", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, lqg[0], lfg[0]), 0);
    CU_ASSERT_EQUAL(memcmp(lqg[FR_LIN_OUT_AMAX_W]->data, lfg[FR_LIN_OUT_AMAX_W]->data, 4), 0);
    CU_ASSERT(gpu_rel_err(lqg[0], lq.out[0]) <= 1e-2);
    gpu_free_outputs(&lq, lqg);
    gpu_free_outputs(&lf, lfg);
    gpu_free_outputs(&q, qg);
    gpu_free_outputs(&sg, yg);
    tn_free(&lq);
    tn_free(&lf);
    tn_free(&q);
    tn_free(&sg);
    free(y);
    fr_tensor_free(want);
    fr_tensor_free(guf);
    fr_tensor_free(gub);
    fr_tensor_free(w);
    fr_tensor_free(sx);
    fr_tensor_free(sw);
}

static void test_bits(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_fp8_producers");
    for (int i = 0; i < N_SHAPES; i++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 4; c++) run_case(&rng, k_shapes[i], k_acts[a], c & 1, c >> 1, (i + c) & 1);
}

/* SwiGLUGradQuantize on the GPU against the GPU SwiGLUGrad and data gradient */
static void run_grad_case(fr_rng *rng, const int64_t *shp, const char *act, int gu16, int d16, int e4m3, int tb)
{
    const int64_t R = shp[0], F = shp[1], K = shp[2], C = 2 * F;
    int64_t gd[2] = {R, C}, dd[2] = {R, F}, wd[2] = {tb ? C : K, tb ? K : C};
    fr_tensor *guf = tt_randn(rng, FR_F32, 2, gd, 0.0, 3.0), *gub = bc_bf16_pair(guf);
    fr_tensor *dyf = tt_randn(rng, FR_F32, 2, dd, 0.0, 0.5), *dyb = bc_bf16_pair(dyf);
    fr_tensor *gu = gu16 ? gub : guf, *dy = d16 ? dyb : dyf, *w = tt_randn(rng, FR_F32, 2, wd, 0.0, 0.2);
    const float sv = e4m3 ? 40.0f : 5000.0f;
    fr_tensor *sdy = tt_scalar1(sv), *sw = tt_scalar1(900.0f);
    const fr_dtype fmt = e4m3 ? FR_F8E4M3 : FR_F8E5M2;
    char what[200], lab[300];
    snprintf(what, sizeof what, "rows %lld F %lld K %lld %s gate_up %s dy %s %s transB %d", (long long)R, (long long)F,
             (long long)K, act, gu16 ? "bf16" : "f32", d16 ? "bf16" : "f32", e4m3 ? "e4m3" : "e5m2", tb);
    tnode sg, q;
    fr_tensor *gin[2] = {gu, dy}, *qin[3] = {gu, dy, sdy};
    tn_init_domain(&sg, FR_DOMAIN_FP8RUN, "SwiGLUGrad", 1, 2, gin, 0, 1);
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUGradQuantize", 1, 3, qin, 0, 4);
    TN_ATTR(&sg, string, "activation", act);
    TN_ATTR(&q, string, "activation", act);
    TN_ATTR(&sg, string, "dx_dtype", "bfloat16");
    TN_ATTR(&q, string, "dx_dtype", "bfloat16");
    if (e4m3) TN_ATTR(&q, string, "codes_dtype", "float8e4m3fn");
    FR_ASSERT_OK(tn_run(&sg));
    FR_ASSERT_OK(tn_run(&q));
    fr_tensor *dg[TN_MAX], *qg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&sg, dg));
    FR_ASSERT_OK(tn_run_gpu(&q, qg));
    /* the GPU's codes, transposed codes, scale_inv and amax: its own d_gate_up quantized */
    float *d = tt_floats(dg[0]);
    fr_tensor *want = tt_new(fmt, 2, gd), *want_t = tt_new(fmt, 2, (int64_t[]){C, R});
    FR_ASSERT_OK(fr_fp8_quantize(d, R * C, sv, fmt, want->data));
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) ((uint8_t *)want_t->data)[c * R + r] = ((const uint8_t *)want->data)[r * C + c];
    snprintf(lab, sizeof lab, "%s: GPU codes vs the GPU SwiGLUGrad's d_gate_up quantized", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, qg[0], want), 0);
    snprintf(lab, sizeof lab, "%s: GPU transposed codes", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, qg[1], want_t), 0);
    const float am = fr_amax(d, R * C), si = 1.0f / sv;
    CU_ASSERT_EQUAL(memcmp(&si, qg[2]->data, 4), 0);
    CU_ASSERT_EQUAL(memcmp(&am, qg[3]->data, 4), 0);
    /* the CPU's codes: within one code of the GPU's, rarely off */
    int64_t off = 0, far = 0;
    for (int64_t i = 0; i < R * C; i++) {
        const int a = ((const uint8_t *)qg[0]->data)[i], b = ((const uint8_t *)q.out[0]->data)[i];
        off += a != b;
        far += abs(a - b) > 1 && ((a ^ b) & 0x80) == 0;
    }
    if (far || off * 100 > R * C)
        fprintf(stderr, "\n  %s: %lld codes differ from the CPU's, %lld by more than one\n", what, (long long)off,
                (long long)far);
    CU_ASSERT_EQUAL(far, 0);
    CU_ASSERT(off * 100 <= R * C);
    /* LinearGradData(codes) == LinearGradData(d_gate_up) on the GPU, whose dYq is the codes_t */
    fr_tensor *lf_in[4] = {dg[0], w, sw, sdy}, *lq_in[4] = {qg[0], w, sw, sdy};
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
    fr_tensor *lfg[TN_MAX], *lqg[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&lf, lfg));
    FR_ASSERT_OK(tn_run_gpu(&lq, lqg));
    snprintf(lab, sizeof lab, "%s: GPU LinearGradData(codes) vs GPU LinearGradData(d_gate_up)", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, lqg[0], lfg[0]), 0);
    snprintf(lab, sizeof lab, "%s: the GPU data gradient's dYq vs the producer's", what);
    CU_ASSERT_EQUAL(bc_bits_diff(lab, lfg[2], qg[1]), 0);
    CU_ASSERT_EQUAL(memcmp(lfg[1]->data, qg[3]->data, 4), 0);
    CU_ASSERT(gpu_rel_err(lqg[0], lq.out[0]) <= 1e-2);
    gpu_free_outputs(&lq, lqg);
    gpu_free_outputs(&lf, lfg);
    gpu_free_outputs(&q, qg);
    gpu_free_outputs(&sg, dg);
    tn_free(&lq);
    tn_free(&lf);
    tn_free(&q);
    tn_free(&sg);
    free(d);
    fr_tensor_free(want);
    fr_tensor_free(want_t);
    fr_tensor_free(guf);
    fr_tensor_free(gub);
    fr_tensor_free(dyf);
    fr_tensor_free(dyb);
    fr_tensor_free(w);
    fr_tensor_free(sdy);
    fr_tensor_free(sw);
}

static void test_grad_bits(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_fp8_producers_grad");
    for (int i = 0; i < N_SHAPES; i++)
        for (int a = 0; a < 3; a++)
            for (int c = 0; c < 8; c++)
                run_grad_case(&rng, k_shapes[i], k_acts[a], c & 1, (c >> 1) & 1, c >> 2, (i + c) & 1);
}

/* The tiny Llama (ffn 128: the tiles take its gate/up gradient) trained 5 fp8 steps on the GPU
 * with the producers on, forward only and off: the same losses and weights bit for bit, with
 * each layer's SwiGLUGrad rewritten only in the first */
static void test_training(void)
{
    if (!gpu_available()) return;
    static const char *const modes[3] = {"1", "forward", "0"};
    enum { STEPS = 5 };
    fr_graph *g = gpu_tiny_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_trainer *t[3] = {0};
    double loss[3][STEPS];
    for (int m = 0; m < 3; m++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = 2;
        o.seq_len = 32;
        o.precision = "fp8";
        o.device = "cuda";
        o.lr.max_lr = 1e-3;
        o.fp8_fast_accum = 0;
        CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_FP8_PRODUCERS", modes[m], 1), 0);
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t[m]));
        unsetenv("FP8RUN_FP8_PRODUCERS");
        int rewritten = 0;
        for (int i = 0; i < t[m]->g->n_nodes; i++)
            rewritten += !t[m]->g->nodes[i].dead && strcmp(t[m]->g->nodes[i].op_type, "SwiGLUGradQuantize") == 0;
        CU_ASSERT_EQUAL(rewritten, m == 0 ? 2 : 0);
        uint64_t seed = 77;
        const int64_t n = 2 * 33;
        int64_t w[2 * 33];
        for (int s = 0; s < STEPS; s++) {
            gpu_windows(&seed, w, n, fr_trainer_vocab(t[m]));
            fr_train_stats st;
            FR_ASSERT_OK(fr_trainer_step(t[m], w, 1, &st));
            CU_ASSERT_FALSE(st.skipped);
            loss[m][s] = st.loss;
        }
    }
    for (int m = 1; m < 3; m++) {
        const int ld = memcmp(loss[m], loss[0], sizeof loss[0]) != 0;
        const double wd = gpu_params_rel_diff(t[m], t[0]);
        if (ld || wd != 0)
            printf("\n  FP8RUN_FP8_PRODUCERS=%s: losses %s, weights rel diff %g", modes[m], ld ? "DIFFER" : "same", wd);
        CU_ASSERT_FALSE(ld);
        CU_ASSERT_EQUAL(wd, 0.0);
    }
    printf("\n    5 fp8 steps, producers on / forward / off: losses %.6f .. %.6f, bit-identical\n", loss[0][0],
           loss[0][STEPS - 1]);
    for (int m = 0; m < 3; m++) fr_trainer_free(t[m]);
    fr_graph_free(g);
}

static void test_times(void)
{
    if (!gpu_available()) return;
    const int64_t M = 16384, F = 5632;
    int64_t gd[2] = {M, 2 * F}, xd[2] = {M, F}, one = 1;
    fr_tensor gu = gpu_shape_only(FR_BF16, 2, gd), s1 = gpu_shape_only(FR_F32, 1, &one);
    double bytes = 0;
    tnode sg, q;
    fr_tensor *in1[1] = {&gu}, *in2[2] = {&gu, &s1};
    tn_init_domain(&sg, FR_DOMAIN_FP8RUN, "SwiGLU", 1, 1, in1, 0, 1);
    TN_ATTR(&sg, string, "y_dtype", "bfloat16");
    const double t_sg = gpu_time_node(&sg, 20, &bytes);
    tn_init_domain(&q, FR_DOMAIN_FP8RUN, "SwiGLUQuantize", 1, 2, in2, 0, 2);
    TN_ATTR(&q, string, "y_dtype", "bfloat16");
    const double t_q = gpu_time_node(&q, 20, &bytes);
    (void)xd;
    printf("\n    1B MLP [16384, 11264] -> [16384, 5632]: SwiGLU (bf16 y) %.3f ms; SwiGLUQuantize (codes) %.3f ms, "
           "%.0f GB/s\n",
           t_sg, t_q, bytes / (t_q * 1e6));
    tn_free(&sg);
    tn_free(&q);
    /* the backward: SwiGLUGrad (bf16 d_gate_up) and the gate/up data gradient quantizing it,
     * against SwiGLUGradQuantize and the data gradient reading its codes (d 2048, transB 1) */
    int64_t wd[2] = {2 * F, 2048};
    fr_tensor dy = gpu_shape_only(FR_BF16, 2, xd), w = gpu_shape_only(FR_F32, 2, wd);
    fr_tensor cq = gpu_shape_only(FR_F8E5M2, 2, gd);
    fr_tensor *gin[2] = {&gu, &dy}, *qin[3] = {&gu, &dy, &s1};
    tnode g, gq, ld, lq;
    tn_init_domain(&g, FR_DOMAIN_FP8RUN, "SwiGLUGrad", 1, 2, gin, 0, 1);
    TN_ATTR(&g, string, "dx_dtype", "bfloat16");
    tn_init_domain(&gq, FR_DOMAIN_FP8RUN, "SwiGLUGradQuantize", 1, 3, qin, 0, 4);
    TN_ATTR(&gq, string, "dx_dtype", "bfloat16");
    fr_tensor dgu = gpu_shape_only(FR_BF16, 2, gd);
    fr_tensor *ldi[4] = {&dgu, &w, &s1, &s1}, *lqi[4] = {&cq, &w, &s1, &s1};
    tn_init_domain(&ld, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 4, ldi, 0, 4);
    tn_init_domain(&lq, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 4, lqi, 0, 1);
    tnode *lin[2] = {&ld, &lq};
    for (int b = 0; b < 2; b++) {
        TN_ATTR(lin[b], string, "precision", "fp8");
        TN_ATTR(lin[b], int, "transB", 1);
        TN_ATTR(lin[b], string, "dx_dtype", "bfloat16");
    }
    double bq = 0;
    const double t_g = gpu_time_node(&g, 20, &bytes), t_ld = gpu_time_node(&ld, 20, &bytes);
    const double t_gq = gpu_time_node(&gq, 20, &bq), t_lq = gpu_time_node(&lq, 20, &bytes);
    printf("    1B MLP backward: SwiGLUGrad %.3f + LinearGradData(bf16 dY) %.3f = %.3f ms; SwiGLUGradQuantize %.3f "
           "(%.0f GB/s) + LinearGradData(codes) %.3f = %.3f ms\n",
           t_g, t_ld, t_g + t_ld, t_gq, bq / (t_gq * 1e6), t_lq, t_gq + t_lq);
    tn_free(&g);
    tn_free(&gq);
    tn_free(&ld);
    tn_free(&lq);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"SwiGLUQuantize: the GPU SwiGLU's y quantized; Linear(codes) == Linear(y) on the GPU", test_bits},
        {"SwiGLUGradQuantize: the GPU SwiGLUGrad's d_gate_up quantized both ways; LinearGradData(codes) == "
         "LinearGradData(d_gate_up) on the GPU",
         test_grad_bits},
        {"training with the producers on, forward only and off: bit-identical on the GPU", test_training},
        {"SwiGLUQuantize and SwiGLUGradQuantize at the 1B shape: times (printed)", test_times},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_fp8_producers", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
