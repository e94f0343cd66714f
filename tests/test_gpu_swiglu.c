/* GPU kernels of the fused SwiGLU (ops/cuda/swiglu.cu) against the CPU kernels (ops/swiglu.c),
 * fresh random inputs N(0, 3) for gate (reaching the sigmoid's tails), N(0, 1) for up and dy:
 * SwiGLU and SwiGLUGrad, two-input and one-input forms, ragged sizes (F not a multiple of 4:
 * the scalar path; F a multiple of 4: the float4 path; 1-element and empty), SwiGLUGrad with
 * an omitted output, float64, a 1B-sized row count, GeGLU's activations (gelu_tanh, gelu), and
 * bfloat16 gate/up (a narrowed Linear's output; y, dy and the gradients float32).
 * Tolerance: 1e-5 relative L2 (the contract; float32 math against the CPU's once-rounded
 * double), float64 1e-12.
 * bfloat16 combinations, every shape, form and activation: gate/up bfloat16, dy
 * bfloat16, y_dtype / dx_dtype bfloat16, each against the all-float32 case of the same values
 * on the GPU: float32 outputs bit for bit, bfloat16 outputs the float32 case's output rounded,
 * bit for bit (the same kernels' float32 results), and within one bfloat16 ulp of the CPU's
 * rounded output; the CPU the same bit for bit. F % 8 == 0 takes the 8-element vectors (one
 * 16-byte bfloat16 word), other F the element-wise kernels.
 * Printed, not asserted: the kernels' times at the 1B step's shape (16384 tokens, F 5632, the
 * one-input form) for float32 and the bfloat16 combinations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"

typedef struct shp {
    int r;
    int64_t d[4]; /* gate's shape (F last) */
} shp;

static const shp shapes[] = {
    {1, {1}},        {2, {3, 7}},     {2, {5, 12}},   {3, {2, 3, 40}}, {2, {33, 64}},
    {2, {129, 100}}, {2, {17, 1001}}, {3, {0, 4, 8}}, {2, {1000, 352}},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* The activation attribute of the next cases (NULL: absent, silu). */
static const char *g_act;
/* 1: gate/up of the next cases are bfloat16 (dy stays dt) */
static int g_bf16_in;

/* One case: op (0 SwiGLU, 1 SwiGLUGrad), form (2 inputs or 1), omit (grad two-input: output to
 * omit, or -1). */
static void run_case(fr_rng *rng, fr_dtype dt, const shp *s, int grad, int one_input, int omit)
{
    int64_t d2[4];
    memcpy(d2, s->d, sizeof d2);
    if (one_input) d2[s->r - 1] *= 2;
    fr_tensor *ins[3];
    int n_in = 0;
    const fr_dtype in_dt = g_bf16_in ? FR_BF16 : dt;
    if (one_input) {
        ins[n_in] = tt_randn(rng, in_dt, s->r, d2, 0.0, 3.0);
        /* up (the second half of each row) at N(0, 1) is not needed: N(0, 3) works as well */
        n_in++;
    } else {
        ins[n_in++] = tt_randn(rng, in_dt, s->r, s->d, 0.0, 3.0);
        ins[n_in++] = tt_randn(rng, in_dt, s->r, s->d, 0.0, 1.0);
    }
    if (grad) ins[n_in++] = tt_randn(rng, dt, s->r, s->d, 0.0, 1.0);
    tnode t;
    tn_init_domain(&t, "ai.fp8run", grad ? "SwiGLUGrad" : "SwiGLU", 1, n_in, ins, 0u, grad && !one_input ? 2 : 1);
    if (omit >= 0) tn_omit_output(&t, omit);
    if (g_act) TN_ATTR(&t, string, "activation", g_act);
    FR_ASSERT_OK(tn_run(&t));
    char what[160], sh[96];
    fr_shape_str(s->r, s->d, sh, sizeof sh);
    snprintf(what, sizeof what, "%s %s F-shape %s %s omit %d activation %s", grad ? "SwiGLUGrad" : "SwiGLU",
             fr_dtype_name(in_dt), sh, one_input ? "one-input" : "two-input", omit, g_act ? g_act : "-");
    gpu_check(&t, dt == FR_F64 ? 1e-12 : 1e-5, what);
    tn_free(&t);
    for (int i = 0; i < n_in; i++) fr_tensor_free(ins[i]);
}

static void test_swiglu(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_fwd");
    for (int i = 0; i < N_SHAPES; i++)
        for (int form = 0; form < 2; form++) run_case(&rng, FR_F32, &shapes[i], 0, form, -1);
}

static void test_swiglu_grad(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_bwd");
    for (int i = 0; i < N_SHAPES; i++) {
        run_case(&rng, FR_F32, &shapes[i], 1, 1, -1);
        for (int omit = -1; omit < 2; omit++) run_case(&rng, FR_F32, &shapes[i], 1, 0, omit);
    }
}

static void test_float64(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_f64");
    for (int i = 0; i < 6; i++)
        for (int form = 0; form < 2; form++) {
            run_case(&rng, FR_F64, &shapes[i], 0, form, -1);
            run_case(&rng, FR_F64, &shapes[i], 1, form, -1);
        }
}

/* GeGLU: activation gelu_tanh and gelu, both forms, forward and backward, float32 and 64 */
static void test_geglu(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_geglu");
    static const char *const acts[2] = {"gelu_tanh", "gelu"};
    for (int a = 0; a < 2; a++) {
        g_act = acts[a];
        for (int i = 0; i < N_SHAPES; i++)
            for (int form = 0; form < 2; form++) {
                const fr_dtype dt = i % 4 == 1 ? FR_F64 : FR_F32;
                run_case(&rng, dt, &shapes[i], 0, form, -1);
                run_case(&rng, dt, &shapes[i], 1, form, -1);
            }
        g_act = NULL;
    }
}

/* bfloat16 gate/up (the narrowed gate/up Linear), every form and activation: the kernels widen
 * exactly, so the contract's 1e-5 holds; outputs float32 */
static void test_bf16_inputs(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_bf16");
    static const char *const acts[3] = {NULL, "gelu_tanh", "gelu"};
    g_bf16_in = 1;
    for (int a = 0; a < 3; a++) {
        g_act = acts[a];
        for (int i = 0; i < N_SHAPES; i++)
            for (int form = 0; form < 2; form++) {
                run_case(&rng, FR_F32, &shapes[i], 0, form, -1);
                run_case(&rng, FR_F32, &shapes[i], 1, form, -1);
            }
    }
    run_case(&rng, FR_F32, &shapes[4], 1, 0, 0); /* an omitted output */
    g_act = NULL;
    g_bf16_in = 0;
}

/* ---- bfloat16 combinations ---- */

/* One node over x's tensors (float32 holding bfloat16 values: xf; their bfloat16 copies: xb):
 * in16 gate/up bfloat16, dy16 dy bfloat16, o16 y_dtype / dx_dtype bfloat16. Runs it on the CPU
 * (t->out) and the GPU (g). */
static void glu_run(fr_tensor **xf, fr_tensor **xb, int n_in, int grad, int n_out, int omit, int in16, int dy16,
                    int o16, tnode *t, fr_tensor **g)
{
    fr_tensor *ins[3];
    for (int i = 0; i < n_in; i++) ins[i] = (grad && i == n_in - 1 ? dy16 : in16) ? xb[i] : xf[i];
    tn_init_domain(t, "ai.fp8run", grad ? "SwiGLUGrad" : "SwiGLU", 1, n_in, ins, 0u, n_out);
    if (omit >= 0) tn_omit_output(t, omit);
    if (g_act) TN_ATTR(t, string, "activation", g_act);
    if (o16) TN_ATTR(t, string, grad ? "dx_dtype" : "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(t));
    FR_ASSERT_OK(tn_run_gpu(t, g));
}

static void bf16_combos(fr_rng *rng, const shp *s, int grad, int one_input, int omit)
{
    int64_t d2[4];
    memcpy(d2, s->d, sizeof d2);
    if (one_input) d2[s->r - 1] *= 2;
    fr_tensor *xf[3], *xb[3];
    int n_in = 0;
    xf[n_in++] = tt_randn(rng, FR_F32, s->r, one_input ? d2 : s->d, 0.0, 3.0);
    if (!one_input) xf[n_in++] = tt_randn(rng, FR_F32, s->r, s->d, 0.0, 1.0);
    if (grad) xf[n_in++] = tt_randn(rng, FR_F32, s->r, s->d, 0.0, 1.0);
    for (int i = 0; i < n_in; i++) xb[i] = bc_bf16_pair(xf[i]);
    const int n_out = grad && !one_input ? 2 : 1;
    tnode ref;
    fr_tensor *g0[TN_MAX];
    glu_run(xf, xb, n_in, grad, n_out, omit, 0, 0, 0, &ref, g0);
    char what[200], sh[96], lab[320];
    fr_shape_str(s->r, s->d, sh, sizeof sh);
    for (int c = 1; c < (grad ? 8 : 4); c++) {
        const int in16 = c & 1, dy16 = grad && (c & 2), o16 = grad ? c >> 2 : c >> 1;
        tnode t;
        fr_tensor *g[TN_MAX];
        glu_run(xf, xb, n_in, grad, n_out, omit, in16, dy16, o16, &t, g);
        snprintf(what, sizeof what, "%s F-shape %s %s omit %d activation %s, gate/up %s dy %s out %s",
                 grad ? "SwiGLUGrad" : "SwiGLU", sh, one_input ? "one-input" : "two-input", omit, g_act ? g_act : "-",
                 in16 ? "bf16" : "f32", grad ? (dy16 ? "bf16" : "f32") : "-", o16 ? "bf16" : "f32");
        for (int o = 0; o < n_out; o++) {
            if (!t.out[o]) continue;
            snprintf(lab, sizeof lab, "%s: GPU output %d vs the float32 case's", what, o);
            bc_expect(lab, g[o], g0[o]);
            snprintf(lab, sizeof lab, "%s: CPU output %d vs the float32 case's", what, o);
            bc_expect(lab, t.out[o], ref.out[o]);
            if (o16) {
                int64_t far = 0;
                snprintf(lab, sizeof lab, "%s: GPU output %d vs the CPU's float32 rounded (one ulp allowed)", what, o);
                (void)bc_round_diff(lab, g[o], ref.out[o], &far);
                CU_ASSERT_EQUAL(far, 0);
            }
        }
        gpu_free_outputs(&t, g);
        tn_free(&t);
    }
    gpu_free_outputs(&ref, g0);
    tn_free(&ref);
    for (int i = 0; i < n_in; i++) {
        fr_tensor_free(xf[i]);
        fr_tensor_free(xb[i]);
    }
}

static void test_bf16_combos(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_swiglu_bf16_combos");
    static const char *const acts[3] = {NULL, "gelu_tanh", "gelu"};
    for (int a = 0; a < 3; a++) {
        g_act = acts[a];
        for (int i = 0; i < N_SHAPES; i++)
            for (int form = 0; form < 2; form++) {
                bf16_combos(&rng, &shapes[i], 0, form, -1);
                bf16_combos(&rng, &shapes[i], 1, form, -1);
            }
    }
    g_act = NULL;
    bf16_combos(&rng, &shapes[4], 1, 0, 0); /* omitted outputs */
    bf16_combos(&rng, &shapes[8], 1, 0, 1);
}

/* ---- timings at the 1B shape ---- */

static void time_case(int grad, fr_dtype in, fr_dtype dy, int o16)
{
    const int64_t gu[2] = {16384, 2 * 5632}, yd[2] = {16384, 5632};
    fr_tensor x = gpu_shape_only(in, 2, gu), d = gpu_shape_only(dy, 2, yd);
    fr_tensor *ins[2] = {&x, &d};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", grad ? "SwiGLUGrad" : "SwiGLU", 1, grad ? 2 : 1, ins, 0u, 1);
    if (o16) TN_ATTR(&t, string, grad ? "dx_dtype" : "y_dtype", "bfloat16");
    double bytes = 0;
    const double ms = gpu_time_node(&t, 20, &bytes);
    if (grad)
        printf("\n    SwiGLUGrad [16384, 11264]: gate_up %-8s dy %-8s d_gate_up %-8s %7.3f ms %6.0f GB/s",
               fr_dtype_name(in), fr_dtype_name(dy), o16 ? "bfloat16" : "float32", ms, bytes / (ms * 1e6));
    else
        printf("\n    SwiGLU     [16384, 11264]: gate_up %-8s y %-8s %7.3f ms %6.0f GB/s", fr_dtype_name(in),
               o16 ? "bfloat16" : "float32", ms, bytes / (ms * 1e6));
    tn_free(&t);
}

static void test_times(void)
{
    if (!gpu_available()) return;
    time_case(0, FR_F32, FR_F32, 0);
    time_case(0, FR_BF16, FR_F32, 0);
    time_case(0, FR_BF16, FR_F32, 1);
    time_case(1, FR_F32, FR_F32, 0);
    time_case(1, FR_BF16, FR_F32, 0);
    time_case(1, FR_BF16, FR_BF16, 0);
    time_case(1, FR_BF16, FR_F32, 1);
    time_case(1, FR_BF16, FR_BF16, 1);
    printf("\n");
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"SwiGLU both forms == CPU (1e-5)", test_swiglu},
        {"SwiGLUGrad both forms, omitted outputs == CPU (1e-5)", test_swiglu_grad},
        {"float64 == CPU (1e-12)", test_float64},
        {"GeGLU activations gelu_tanh / gelu == CPU", test_geglu},
        {"bfloat16 gate/up, all activations == CPU (1e-5)", test_bf16_inputs},
        {"bfloat16 gate/up, dy, y_dtype, dx_dtype == float32 case's bits / rounding", test_bf16_combos},
        {"times at the 1B shape (printed)", test_times},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_swiglu", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
