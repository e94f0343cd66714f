/* ai.fp8run::Linear, LinearGradData and LinearGradWeight on the CUDA backend against the CPU
 * emulation (ops/linear.c), on fresh random inputs, for every precision (fp32 in float32 and
 * float64, bf16, fp8), every fp8 recipe (delayed, current, block) and format (hybrid, e4m3),
 * transB 0/1, with and without bias, with and without the saved Xq, for shapes whose M, N, K
 * are not multiples of 16 or 128 (the GPU pads them for cuBLASLt's FP8 GEMM), aligned shapes
 * (no padding: the saved per-tensor Xq, X's codes transposed [K, M], is the weight-gradient
 * GEMM's operand as it is), rank-1 inputs, empty dims and
 * pad_multiple (a CPU emulation of the padding: changes nothing). Half the bf16/fp8 cases make
 * W (and scale_w) constants, so the kernels convert W into persistent memory (the weight cache).
 * What must hold:
 *   - quantized bytes (Xq), their scale_inv and every amax output: bit-identical;
 *   - Y, dX, dW: fp32 within 1e-5 relative L2 of the CPU (float64: 1e-12); bf16 and fp8
 *     within 1e-2 (the same products summed in cuBLASLt's order instead of the CPU's), also
 *     with y_dtype bfloat16 (Y written in bf16 by the GEMM);
 *   - where the CPU refuses a scale (FR_ERR_NUMERIC: an Inf in X under the current/block
 *     recipe, a delayed scale of 0), the GPU makes the outputs touched NaN (its way of making
 *     the trainer skip the step; see ops/cuda/quantize.cuh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "ops/linear.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#endif

/* ---- comparing one output ---- */

/* worst relative error of the GEMM results in the current test (printed at its end, so a
 * run shows how far inside the tolerance the results are) */
static double g_worst[3];

static void note_err(const char *what, double err)
{
    int i = what[0] == 'Y' ? 0 : strcmp(what, "dX") == 0 ? 1 : strcmp(what, "dW") == 0 ? 2 : -1;
    if (i >= 0 && err > g_worst[i]) g_worst[i] = err;
}

static void report_worst(const char *test)
{
    printf("\n    %s: worst rel err Y %.3g, dX %.3g, dW %.3g\n", test, g_worst[0], g_worst[1], g_worst[2]);
    g_worst[0] = g_worst[1] = g_worst[2] = 0;
}

static int cmp_out(const char *label, const char *what, const fr_tensor *got, const fr_tensor *want, double tol)
{
    if (!got || !want) {
        fprintf(stderr, "\n  %s: %s missing (GPU %p, CPU %p)\n", label, what, (void *)got, (void *)want);
        return 0;
    }
    double err = gpu_rel_err(got, want);
    note_err(what, err);
    if (err <= tol) return 1;
    fprintf(stderr, "\n  case: %s\n", label);
    gpu_print_mismatch(what, got, want, err, tol);
    return 0;
}

/* ---- one configuration ---- */

typedef struct lcase {
    int rank;
    int64_t lead[3];
    int64_t K, N;
    int transB, bias;
    const char *prec, *recipe, *fmt; /* recipe / fmt NULL: attribute not set */
    int margin;
    int64_t pad;
    int save_xq;
    int const_w; /* W (and scale_w) constants: the kernels keep W's conversion (persistent memory) */
    fr_dtype dt;
    int y_bf16; /* attribute y_dtype bfloat16 (no bias) */
} lcase;

static int is_fp8(const lcase *c) { return strcmp(c->prec, "fp8") == 0; }
static int is_delayed(const lcase *c) { return is_fp8(c) && (!c->recipe || strcmp(c->recipe, "delayed") == 0); }

static double tol_of(const lcase *c)
{
    if (c->dt == FR_F64) return 1e-12;
    return strcmp(c->prec, "fp32") == 0 ? 1e-5 : 1e-2;
}

static void set_attrs(tnode *t, const lcase *c)
{
    TN_ATTR(t, int, "transB", c->transB);
    TN_ATTR(t, string, "precision", c->prec);
    if (c->recipe) TN_ATTR(t, string, "recipe", c->recipe);
    if (c->fmt) TN_ATTR(t, string, "fp8_format", c->fmt);
    if (c->margin) TN_ATTR(t, int, "margin", c->margin);
    if (c->pad != 1) TN_ATTR(t, int, "pad_multiple", c->pad);
    if (c->y_bf16 && strcmp(t->g->nodes[t->nid].op_type, "Linear") == 0) TN_ATTR(t, string, "y_dtype", "bfloat16");
    TN_ATTR(t, string, "state_prefix", "fp8_state/lin");
}

static float amax_of(const fr_tensor *t)
{
    float m = 0;
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(((const float *)t->data)[i]));
    return m;
}

/* Run t on CPU and GPU, compare outputs [0, n_out) with tols[o] (< 0: skip). cpu_status: the
 * status the CPU must return (FR_OK normally). */
static int run_compare(tnode *t, const char *label, const char *const *names, const double *tols,
                       fr_status cpu_status, fr_tensor **gpu_keep)
{
    fr_status st = tn_run(t);
    if (st != cpu_status) {
        fprintf(stderr, "\n  %s: CPU returned %d (%s), expected %d\n", label, (int)st, fr_last_error(), (int)cpu_status);
        return 0;
    }
    fr_tensor *g[TN_MAX];
    if (gpu_keep)
        for (int o = 0; o < TN_MAX; o++) gpu_keep[o] = NULL;
    st = tn_run_gpu(t, g);
    if (st != FR_OK) {
        fprintf(stderr, "\n  %s: GPU run failed: %s\n", label, fr_last_error());
        gpu_free_outputs(t, g);
        return 0;
    }
    int ok = 1;
    for (int o = 0; o < t->n_out; o++)
        if (tols[o] >= 0 && t->out[o]) ok &= cmp_out(label, names[o], g[o], t->out[o], tols[o]);
    if (gpu_keep) {
        for (int o = 0; o < t->n_out; o++) gpu_keep[o] = g[o];
    } else {
        gpu_free_outputs(t, g);
    }
    return ok;
}

/* Forward, data gradient and weight gradient (from X and, in fp8 with save_xq, from the
 * saved Xq) of one configuration. */
static int check_case(const lcase *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    int ok = 1;
    int64_t xd[4], M = 1;
    for (int i = 0; i < c->rank - 1; i++) {
        xd[i] = c->lead[i];
        M *= c->lead[i];
    }
    xd[c->rank - 1] = c->K;
    int64_t wd[2] = {c->transB ? c->N : c->K, c->transB ? c->K : c->N};
    fr_tensor *x = tt_randn(&r, c->dt, c->rank, xd, 0, 1.5);
    fr_tensor *w = tt_randn(&r, c->dt, 2, wd, 0, 0.05);
    fr_tensor *b = c->bias ? tt_randn(&r, c->dt, 1, &c->N, 0, 1) : NULL;
    int64_t yd[4];
    memcpy(yd, xd, sizeof yd);
    yd[c->rank - 1] = c->N;
    fr_tensor *dy = tt_randn(&r, c->dt, c->rank, yd, 0, 0.01);
    fr_tensor *sx = NULL, *sw = NULL, *sdy = NULL;
    int fp8 = is_fp8(c), dl = is_delayed(c);
    if (dl) { /* X over-scaled (some codes saturate), W under-scaled, dY near its range */
        float ax = amax_of(x), aw = amax_of(w), ay = amax_of(dy);
        float dmax = c->fmt && strcmp(c->fmt, "e4m3") == 0 ? 448.0f : 57344.0f;
        sx = tt_scalar1(ax > 0 ? 448.0f / ax * 1.7f : 3.0f);
        sw = tt_scalar1(aw > 0 ? 448.0f / aw * 0.25f : 5.0f);
        sdy = tt_scalar1(ay > 0 ? dmax / ay * 0.9f : 1000.0f);
    }
    double tol = tol_of(c);
    /* forward */
    fr_tensor *fin[6] = {x, w, b, sx, sw, sdy};
    tnode f;
    const unsigned fmask = c->const_w ? 2u | (dl ? 16u : 0u) : 0u, dmask = c->const_w ? 2u | (dl ? 4u : 0u) : 0u;
    tn_init_domain(&f, FR_DOMAIN_FP8RUN, "Linear", 1, dl ? 6 : (b ? 3 : 2), fin, fmask, fp8 ? 5 : 1);
    set_attrs(&f, c);
    if (fp8 && !c->save_xq) {
        tn_omit_output(&f, 1);
        tn_omit_output(&f, 2);
    }
    static const char *const fnames[5] = {"Y", "Xq", "Xq_scale_inv", "amax_x", "amax_w"};
    const double ftols[5] = {tol, 0, 0, 0, 0};
    char l2[300];
    snprintf(l2, sizeof l2, "%s forward", label);
    ok &= run_compare(&f, l2, fnames, ftols, FR_OK, NULL);
    /* data gradient */
    fr_tensor *din[4] = {dy, w, sw, sdy};
    tnode d;
    tn_init_domain(&d, FR_DOMAIN_FP8RUN, "LinearGradData", 1, dl ? 4 : 2, din, dmask, fp8 ? 2 : 1);
    set_attrs(&d, c);
    static const char *const dnames[2] = {"dX", "amax_dy"};
    const double dtols[2] = {tol, 0};
    snprintf(l2, sizeof l2, "%s LinearGradData", label);
    ok &= run_compare(&d, l2, dnames, dtols, FR_OK, NULL);
    tn_free(&d);
    /* per-tensor fp8: dY quantized once, by the data gradient, which hands dY^T codes [N, M] and
     * their scale_inv to the weight gradient: both bit-identical to the CPU's, and the CPU's dW
     * from them bit-identical to its dW from dY */
    if (fp8 && strcmp(c->recipe ? c->recipe : "delayed", "block") != 0) {
        tnode dq;
        tn_init_domain(&dq, FR_DOMAIN_FP8RUN, "LinearGradData", 1, dl ? 4 : 2, din, dmask, 4);
        set_attrs(&dq, c);
        static const char *const qnames[4] = {"dX", "amax_dy", "dYq", "dYq_scale_inv"};
        const double qtols[4] = {tol, 0, 0, 0};
        snprintf(l2, sizeof l2, "%s LinearGradData(dYq)", label);
        ok &= run_compare(&dq, l2, qnames, qtols, FR_OK, NULL);
        int saved = c->save_xq && f.out[1] && f.out[2];
        fr_tensor *xin = saved ? f.out[1] : x, *xsc = saved ? f.out[2] : sx;
        fr_tensor *qin[4] = {xin, dq.out[2], xsc, dq.out[3]}, *fin2[4] = {xin, dy, xsc, sdy};
        tnode wq, wf;
        tn_init_domain(&wq, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, qin, 0, 1);
        set_attrs(&wq, c);
        snprintf(l2, sizeof l2, "%s LinearGradWeight(dYq)", label);
        static const char *const qwnames[1] = {"dW"};
        const double qwtols[1] = {tol};
        ok &= run_compare(&wq, l2, qwnames, qwtols, FR_OK, NULL);
        tn_init_domain(&wf, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, dl ? 4 : 3, fin2, 0, 1);
        set_attrs(&wf, c);
        fr_status st = tn_run(&wf);
        int same = st == FR_OK && wq.out[0] && wf.out[0] && wq.out[0]->nbytes == wf.out[0]->nbytes &&
                   (wf.out[0]->nbytes == 0 || memcmp(wq.out[0]->data, wf.out[0]->data, wf.out[0]->nbytes) == 0);
        if (!same) fprintf(stderr, "\n  %s: CPU dW from dYq differs from dW from dY\n", label);
        ok &= same;
        tn_free(&wf);
        tn_free(&wq);
        tn_free(&dq);
    }
    /* bf16: X rounded once by the forward (saved as Xq), dY once by the data gradient (dYq, dY's
     * layout): both bit-identical to the CPU's; the weight gradient from them matches the CPU's,
     * and the CPU's dW from them is bit-identical to its dW from X and dY */
    if (strcmp(c->prec, "bf16") == 0) {
        fr_tensor *f2in[3] = {x, w, b};
        tnode fq, dq, wq, wf;
        tn_init_domain(&fq, FR_DOMAIN_FP8RUN, "Linear", 1, b ? 3 : 2, f2in, 0, 2);
        set_attrs(&fq, c);
        snprintf(l2, sizeof l2, "%s forward(Xq)", label);
        ok &= run_compare(&fq, l2, fnames, ftols, FR_OK, NULL);
        tn_init_domain(&dq, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 2, din, 0, 3);
        tn_omit_output(&dq, 1);
        set_attrs(&dq, c);
        static const char *const bnames[3] = {"dX", "amax_dy", "dYq"};
        const double btols[3] = {tol, -1, 0};
        snprintf(l2, sizeof l2, "%s LinearGradData(dYq)", label);
        ok &= run_compare(&dq, l2, bnames, btols, FR_OK, NULL);
        fr_tensor *qin[2] = {fq.out[1], dq.out[2]}, *fin2[2] = {x, dy};
        static const char *const qwnames[1] = {"dW"};
        const double qwtols[1] = {tol};
        for (int mix = 0; mix < 3; mix++) { /* (Xq, dYq), (X, dYq), (Xq, dY) */
            fr_tensor *in2[2] = {mix == 1 ? x : qin[0], mix == 2 ? dy : qin[1]};
            tn_init_domain(&wq, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 2, in2, 0, 1);
            set_attrs(&wq, c);
            snprintf(l2, sizeof l2, "%s LinearGradWeight(bf16 inputs #%d)", label, mix);
            ok &= run_compare(&wq, l2, qwnames, qwtols, FR_OK, NULL);
            tn_init_domain(&wf, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 2, fin2, 0, 1);
            set_attrs(&wf, c);
            fr_status st = tn_run(&wf);
            int same = st == FR_OK && wq.out[0] && wf.out[0] && wq.out[0]->nbytes == wf.out[0]->nbytes &&
                       (wf.out[0]->nbytes == 0 || memcmp(wq.out[0]->data, wf.out[0]->data, wf.out[0]->nbytes) == 0);
            if (!same) fprintf(stderr, "\n  %s: CPU dW from bf16 inputs #%d differs from dW from X, dY\n", label, mix);
            ok &= same;
            tn_free(&wf);
            tn_free(&wq);
        }
        tn_free(&dq);
        tn_free(&fq);
    }
    /* weight gradient from X */
    fr_tensor *win[4] = {x, dy, sx, sdy};
    tnode wg;
    tn_init_domain(&wg, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, dl ? 4 : 2, win, 0, fp8 ? 2 : 1);
    set_attrs(&wg, c);
    static const char *const wnames[2] = {"dW", "amax_dy"};
    const double wtols[2] = {tol, 0};
    snprintf(l2, sizeof l2, "%s LinearGradWeight(X)", label);
    ok &= run_compare(&wg, l2, wnames, wtols, FR_OK, NULL);
    tn_free(&wg);
    /* weight gradient from the saved Xq and its scale_inv (the CPU forward's outputs) */
    if (fp8 && c->save_xq && f.out[1] && f.out[2]) {
        fr_tensor *sin_[4] = {f.out[1], dy, f.out[2], sdy};
        tn_init_domain(&wg, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, dl ? 4 : 3, sin_, 0, 2);
        set_attrs(&wg, c);
        snprintf(l2, sizeof l2, "%s LinearGradWeight(saved Xq)", label);
        ok &= run_compare(&wg, l2, wnames, wtols, FR_OK, NULL);
        tn_free(&wg);
    }
    tn_free(&f);
    fr_tensor *all[] = {x, w, b, dy, sx, sw, sdy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
    return ok;
}

static lcase base(const char *prec, const char *recipe)
{
    lcase c = {3, {3, 45, 0}, 141, 29, 1, 1, prec, recipe, NULL, 0, 1, 1, 0, FR_F32, 0};
    return c;
}

/* shapes: M = 135, K = 141, N = 29 (nothing a multiple of 16); M = 38, K = 300, N = 200;
 * M = 517, K = 1000, N = 771 (several 128-blocks each way, many thread blocks); aligned
 * M = 256, K = 256, N = 128; a rank-1 input (M = 1). */
static const struct { int rank; int64_t lead[3], K, N; } shapes[] = {
    {3, {3, 45, 0}, 141, 29},
    {3, {2, 19, 0}, 300, 200},
    {2, {517, 0, 0}, 1000, 771},
    {3, {2, 128, 0}, 256, 128},
    {1, {0, 0, 0}, 130, 17},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static lcase with_shape(lcase c, int s)
{
    c.rank = shapes[s].rank;
    memcpy(c.lead, shapes[s].lead, sizeof c.lead);
    c.K = shapes[s].K;
    c.N = shapes[s].N;
    return c;
}

static void test_fp32(void)
{
    for (int s = 0; s < N_SHAPES; s++)
        for (int tb = 0; tb < 2; tb++)
            for (int dt = 0; dt < 2; dt++) {
                lcase c = with_shape(base("fp32", NULL), s);
                c.transB = tb;
                c.bias = (s + tb) & 1;
                c.dt = dt ? FR_F64 : FR_F32;
                char label[128];
                snprintf(label, sizeof label, "fp32 %s shape#%d transB=%d bias=%d", fr_dtype_name(c.dt), s, tb,
                         c.bias);
                CU_ASSERT(check_case(&c, label));
            }
    report_worst("fp32 (float32 and float64)");
}

static void test_bf16(void)
{
    for (int s = 0; s < N_SHAPES; s++)
        for (int tb = 0; tb < 2; tb++) {
            lcase c = with_shape(base("bf16", NULL), s);
            c.transB = tb;
            c.bias = (s + tb + 1) & 1;
            c.const_w = tb;
            char label[128];
            snprintf(label, sizeof label, "bf16 shape#%d transB=%d bias=%d const_w=%d", s, tb, c.bias, c.const_w);
            CU_ASSERT(check_case(&c, label));
        }
    report_worst("bf16");
}

static void fp8_recipe(const char *recipe)
{
    for (int s = 0; s < N_SHAPES; s++)
        for (int tb = 0; tb < 2; tb++)
            for (int f = 0; f < 2; f++) {
                lcase c = with_shape(base("fp8", recipe), s);
                c.transB = tb;
                c.fmt = f ? "e4m3" : "hybrid";
                c.bias = (s + tb + f) & 1;
                c.margin = strcmp(recipe, "current") == 0 && f ? 1 : 0;
                c.save_xq = (s + f) % 3 != 2; /* mostly saved; sometimes re-quantized from X */
                c.const_w = (s + tb + f) % 2; /* half the cases through the kept weight conversion */
                char label[160];
                snprintf(label, sizeof label, "fp8 %s %s shape#%d transB=%d bias=%d margin=%d save_xq=%d const_w=%d",
                         recipe, c.fmt, s, tb, c.bias, c.margin, c.save_xq, c.const_w);
                CU_ASSERT(check_case(&c, label));
            }
    report_worst(recipe);
}

/* y_dtype bfloat16 (passes/narrow_activations.c): the GEMM writes bf16 Y (through the padded
 * result's copy where M or N is not a multiple of 16), within 1e-2 of the CPU's bf16(Y) */
static void test_y_bf16(void)
{
    static const char *const pr[4][2] = {{"bf16", NULL}, {"fp8", "delayed"}, {"fp8", "current"}, {"fp8", "block"}};
    for (int s = 0; s < N_SHAPES; s++)
        for (int p = 0; p < 4; p++) {
            lcase c = with_shape(base(pr[p][0], pr[p][1]), s);
            c.transB = (s + p) & 1;
            c.bias = 0;
            c.y_bf16 = 1;
            c.const_w = p & 1;
            char label[160];
            snprintf(label, sizeof label, "y_dtype bfloat16 %s %s shape#%d transB=%d", pr[p][0], pr[p][1] ? pr[p][1] : "",
                     s, c.transB);
            CU_ASSERT(check_case(&c, label));
        }
    report_worst("y_dtype bfloat16");
}

static void test_fp8_delayed(void) { fp8_recipe("delayed"); }
static void test_fp8_current(void) { fp8_recipe("current"); }
static void test_fp8_block(void) { fp8_recipe("block"); }

/* The bias path at the 1B model's widths (a slice of its 16384 tokens): fp8 Y with bias, N a
 * multiple of 16 (the bias added in place to the GEMM's result, 16-byte vectors) for the QKV
 * and MLP up widths, and fp32 (the float GEMM's in-place bias) */
static void test_bias_wide(void)
{
    static const int64_t ns[2] = {6144, 8192};
    for (int i = 0; i < 2; i++) {
        lcase c = base("fp8", "current");
        c.rank = 2;
        c.lead[0] = 256;
        c.lead[1] = c.lead[2] = 0;
        c.K = 2048;
        c.N = ns[i];
        c.transB = i;
        c.bias = 1;
        c.save_xq = 1;
        c.const_w = i;
        char label[128];
        snprintf(label, sizeof label, "fp8 current [256, 2048] x [2048 -> %lld] + bias, transB=%d", (long long)c.N, i);
        CU_ASSERT(check_case(&c, label));
        c = base("fp32", NULL);
        c.rank = 2;
        c.lead[0] = 64;
        c.lead[1] = c.lead[2] = 0;
        c.K = 512;
        c.N = ns[i];
        c.bias = 1;
        snprintf(label, sizeof label, "fp32 [64, 512] x [512 -> %lld] + bias", (long long)c.N);
        CU_ASSERT(check_case(&c, label));
    }
    report_worst("bias at the 1B widths");
}

static void test_empty_and_pad(void)
{
    const char *precs[5] = {"fp32", "bf16", "fp8", "fp8", "fp8"};
    const char *recipes[5] = {NULL, NULL, "delayed", "current", "block"};
    for (int p = 0; p < 5; p++) {
        lcase c = base(precs[p], recipes[p]);
        c.rank = 2;
        c.lead[0] = 0; /* no tokens */
        char label[128];
        snprintf(label, sizeof label, "%s %s no tokens", precs[p], recipes[p] ? recipes[p] : "");
        CU_ASSERT(check_case(&c, label));
        c.lead[0] = 5;
        c.K = 0; /* Y = bias */
        snprintf(label, sizeof label, "%s %s K=0", precs[p], recipes[p] ? recipes[p] : "");
        CU_ASSERT(check_case(&c, label));
        c.K = 7;
        c.N = 0;
        snprintf(label, sizeof label, "%s %s N=0", precs[p], recipes[p] ? recipes[p] : "");
        CU_ASSERT(check_case(&c, label));
        c = base(precs[p], recipes[p]); /* pad_multiple: the CPU pads, the GPU ignores it */
        c.pad = 16;
        c.transB = p & 1;
        snprintf(label, sizeof label, "%s %s pad_multiple=16", precs[p], recipes[p] ? recipes[p] : "");
        CU_ASSERT(check_case(&c, label));
    }
}

/* NaN in X under the delayed recipe: both sides quantize it to the NaN code, amax is NaN.
 * Where the CPU refuses a scale (Inf under current/block, a delayed scale of 0), the GPU's
 * outputs that depend on it are NaN. */
static void test_non_finite(void)
{
    fr_rng r = fr_test_rng("gpu_linear_nonfinite");
    int64_t xd[2] = {40, 300}, wd[2] = {24, 300};
    static const char *const names[5] = {"Y", "Xq", "Xq_scale_inv", "amax_x", "amax_w"};
    /* delayed, NaN in X: identical results (NaN rows) */
    {
        fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0, 1), *w = tt_randn(&r, FR_F32, 2, wd, 0, 0.05);
        ((float *)x->data)[5 * 300 + 7] = NAN;
        fr_tensor *sx = tt_scalar1(50.0f), *sw = tt_scalar1(400.0f), *sdy = tt_scalar1(1000.0f);
        fr_tensor *in[6] = {x, w, NULL, sx, sw, sdy};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 6, in, 0, 5);
        lcase c = base("fp8", "delayed");
        set_attrs(&t, &c);
        const double tols[5] = {1e-2, 0, 0, 0, 0};
        CU_ASSERT(run_compare(&t, "delayed NaN in X", names, tols, FR_OK, NULL));
        CU_ASSERT(isnan(((float *)t.out[3]->data)[0]));
        tn_free(&t);
        fr_tensor *all[] = {x, w, sx, sw, sdy};
        for (size_t i = 0; i < 5; i++) fr_tensor_free(all[i]);
    }
    /* current: Inf in X -> CPU FR_ERR_NUMERIC, GPU: every Y NaN, amax_x Inf */
    for (int blk = 0; blk < 2; blk++) {
        fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0, 1), *w = tt_randn(&r, FR_F32, 2, wd, 0, 0.05);
        ((float *)x->data)[5 * 300 + 7] = -INFINITY;
        fr_tensor *in[2] = {x, w};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 2, in, 0, 5);
        lcase c = base("fp8", blk ? "block" : "current");
        set_attrs(&t, &c);
        const double tols[5] = {-1, -1, -1, -1, -1};
        fr_tensor *g[TN_MAX];
        CU_ASSERT(run_compare(&t, blk ? "block Inf in X" : "current Inf in X", names, tols, FR_ERR_NUMERIC, g));
        if (g[0]) {
            const float *y = g[0]->data;
            int nan_rows = 0, bad = 0;
            for (int m = 0; m < 40; m++) {
                int rn = 0;
                for (int n = 0; n < 24; n++) rn += isnan(y[m * 24 + n]) != 0;
                nan_rows += rn == 24;
                bad += rn != 0 && rn != 24;
            }
            /* current: the whole tensor's scale is refused; block: only token 5's block */
            int want = blk ? 1 : 40;
            if (nan_rows != want || bad)
                fprintf(stderr, "\n  %s: %d all-NaN rows (want %d), %d partly NaN\n", blk ? "block" : "current",
                        nan_rows, want, bad);
            CU_ASSERT_EQUAL(nan_rows, want);
            CU_ASSERT_EQUAL(bad, 0);
            if (blk) CU_ASSERT(isnan(y[5 * 24]));
            CU_ASSERT(isinf(((float *)g[3]->data)[0]));
        }
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(w);
    }
    /* delayed with a scale of 0: CPU refuses, GPU Y all NaN */
    {
        fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0, 1), *w = tt_randn(&r, FR_F32, 2, wd, 0, 0.05);
        fr_tensor *sx = tt_scalar1(0.0f), *sw = tt_scalar1(400.0f), *sdy = tt_scalar1(1000.0f);
        fr_tensor *in[6] = {x, w, NULL, sx, sw, sdy};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 6, in, 0, 5);
        lcase c = base("fp8", "delayed");
        set_attrs(&t, &c);
        const double tols[5] = {-1, -1, -1, -1, -1};
        fr_tensor *g[TN_MAX];
        CU_ASSERT(run_compare(&t, "delayed scale 0", names, tols, FR_ERR_NUMERIC, g));
        if (g[0]) {
            int all_nan = 1;
            for (int i = 0; i < 40 * 24; i++) all_nan &= isnan(((float *)g[0]->data)[i]) != 0;
            CU_ASSERT(all_nan);
        }
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor *all[] = {x, w, sx, sw, sdy};
        for (size_t i = 0; i < 5; i++) fr_tensor_free(all[i]);
    }
}

/* The weight gradient from the data gradient's unpadded dY^T codes multiplies them as they are:
 * its scratch holds no copy of them (M * N bytes less than from float dY); likewise the
 * forward's saved X^T codes [K, M] (M * K bytes less than from float X). Plan only: no GPU
 * work. */
static void test_dyq_scratch(void)
{
#ifndef FP8RUN_HAVE_CUDA
    return; /* no CUDA backend in this build: nothing to plan (the other cases say SKIP) */
#else
    const int64_t M = 256, K = 192, N = 128, xd[2] = {M, K}, yd[2] = {M, N}, qd[2] = {N, M}, xtd[2] = {K, M};
    const fr_cuda_kernel_def *kd = fr_cuda_kernel_find(FR_DOMAIN_FP8RUN, "LinearGradWeight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(kd);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kd->scratch_env);
    fr_tensor *x = tt_new(FR_F32, 2, xd), *dy = tt_new(FR_F32, 2, yd), *dyq = tt_new(FR_F8E4M3, 2, qd);
    fr_tensor *sx = tt_scalar1(1), *sinv = tt_scalar1(1), *xqt = tt_new(FR_F8E4M3, 2, xtd);
    for (int tb = 0; tb < 2; tb++) {
        lcase c = base("fp8", "current");
        c.transB = tb;
        c.fmt = "e4m3";
        fr_tensor *qin[4] = {x, dyq, sx, sinv}, *fin[3] = {x, dy, sx}, *tin[4] = {xqt, dyq, sinv, sinv};
        tnode wq, wf, wt;
        tn_init_domain(&wq, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, qin, 0, 1);
        tn_init_domain(&wf, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 3, fin, 0, 1);
        tn_init_domain(&wt, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, tin, 0, 1);
        set_attrs(&wq, &c);
        set_attrs(&wf, &c);
        set_attrs(&wt, &c);
        size_t bq = 0, bf = 0, bt = 0;
        const fr_cuda_plan_env env = {NULL, FR_CUDA_ATTN_FP8RUN, 1};
        FR_ASSERT_OK(fr_cuda_kernel_scratch(kd, &env, wq.g, tn_node(&wq), &bq));
        FR_ASSERT_OK(fr_cuda_kernel_scratch(kd, &env, wf.g, tn_node(&wf), &bf));
        FR_ASSERT_OK(fr_cuda_kernel_scratch(kd, &env, wt.g, tn_node(&wt), &bt));
        CU_ASSERT(bq + (size_t)(M * N) <= bf);
        CU_ASSERT(bt + (size_t)(M * K) <= bq);
        tn_free(&wq);
        tn_free(&wf);
        tn_free(&wt);
    }
    fr_tensor *all[] = {x, dy, dyq, sx, sinv, xqt};
    for (size_t i = 0; i < 6; i++) fr_tensor_free(all[i]);
#endif
}

static CU_TestInfo tests[] = {
    {"fp32 (float32 and float64): forward, dX, dW", test_fp32},
    {"bf16: forward, dX, dW", test_bf16},
    {"fp8 delayed (hybrid/e4m3, transB, bias, saved Xq)", test_fp8_delayed},
    {"fp8 current", test_fp8_current},
    {"fp8 block", test_fp8_block},
    {"y_dtype bfloat16: bf16 and fp8 recipes", test_y_bf16},
    {"bias at the 1B widths (fp8 and fp32, in place)", test_bias_wide},
    {"empty dims and pad_multiple", test_empty_and_pad},
    {"NaN / Inf and refused scales", test_non_finite},
    {"fp8 weight gradient from unpadded dYq, Xq^T: no scratch copy of the codes", test_dyq_scratch},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_linear", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
