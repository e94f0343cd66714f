/* The fp8 quantization kernels of the Linear family (ops/cuda/quantize.cu) byte for byte
 * against the CPU emulation (ops/linear.c), through the nodes that use them:
 *   - Linear with the saved Xq: X's codes (per tensor transposed, [K][M], written by the
 *     pass that quantizes X for the forward GEMM; or in 128x1 blocks), their scale_inv, amax_x
 *     and amax_w;
 *   - LinearGradData with dYq: dY's codes for its GEMM and, transposed [N][M], for the weight
 *     gradient (one read of dY), dYq_scale_inv, amax_dy;
 *   - LinearGradWeight from the saved Xq (per tensor as it is, padded where needed) and dYq;
 * for the per-tensor recipes (delayed: the amax reduced in the cast's pass; current: the amax
 * pass, then the cast) and the block recipe, on shapes with no dim a multiple of 16 (the
 * padded path), aligned shapes whose dims are not multiples of the 128x128 tiles, aligned
 * shapes of many tiles, and delayed inputs holding NaN and +-Inf (NaN codes, saturated codes,
 * a NaN / Inf amax).
 * The program runs the reducing kernels with FP8RUN_QUANT_BLOCKS=3 (unless set): three blocks
 * each looping over many tiles, so every block's partial amax and the grid-stride loops'
 * remainders are exercised; test_gpu_linear runs the same kernels with the default grid.
 * What must hold: every code, scale_inv and amax bit-identical to the CPU (amax also equal to
 * max |x| computed here for finite inputs); Y, dX, dW within 1e-2 relative L2 (the GEMMs sum in
 * cuBLASLt's order); skipped without a device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

typedef struct qcase {
    int64_t M, K, N;
    const char *recipe, *fmt;
    int transB;
    int nonfinite; /* delayed only: NaN / Inf planted in X and dY (1: NaN and Inf, 2: Inf only) */
} qcase;

static int is_delayed(const qcase *c) { return strcmp(c->recipe, "delayed") == 0; }
static int is_block(const qcase *c) { return strcmp(c->recipe, "block") == 0; }

static void set_attrs(tnode *t, const qcase *c)
{
    TN_ATTR(t, int, "transB", c->transB);
    TN_ATTR(t, string, "precision", "fp8");
    TN_ATTR(t, string, "recipe", c->recipe);
    TN_ATTR(t, string, "fp8_format", c->fmt);
    TN_ATTR(t, string, "state_prefix", "fp8_state/q");
}

static float finite_amax(const fr_tensor *t)
{
    float m = 0;
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        float v = fabsf(((const float *)t->data)[i]);
        if (isfinite(v)) m = fmaxf(m, v);
    }
    return m;
}

/* Run t on the CPU and the GPU; output o within tols[o] (0: every byte equal, < 0: not
 * compared). gpu: the GPU's outputs, kept for the caller (freed by it) when not NULL. */
static int run_cmp(tnode *t, const char *label, const char *const *names, const double *tols, fr_tensor **gpu)
{
    fr_status st = tn_run(t);
    if (st != FR_OK) {
        fprintf(stderr, "\n  %s: CPU failed: %s\n", label, fr_last_error());
        return 0;
    }
    fr_tensor *g[TN_MAX];
    st = tn_run_gpu(t, g);
    if (st != FR_OK) {
        fprintf(stderr, "\n  %s: GPU failed: %s\n", label, fr_last_error());
        gpu_free_outputs(t, g);
        return 0;
    }
    int ok = 1;
    for (int o = 0; o < t->n_out; o++) {
        if (tols[o] < 0 || !t->out[o]) continue;
        if (!g[o]) {
            fprintf(stderr, "\n  %s: GPU output %s missing\n", label, names[o]);
            ok = 0;
            continue;
        }
        double err = gpu_rel_err(g[o], t->out[o]);
        /* bytes, not values: a NaN amax must have the CPU's canonical NaN bits */
        int same = tols[o] > 0 ? err <= tols[o]
                               : g[o]->nbytes == t->out[o]->nbytes &&
                                     memcmp(g[o]->data, t->out[o]->data, g[o]->nbytes) == 0;
        if (!same) {
            fprintf(stderr, "\n  case: %s\n", label);
            gpu_print_mismatch(names[o], g[o], t->out[o], err, tols[o]);
            ok = 0;
        }
    }
    if (gpu) {
        for (int o = 0; o < t->n_out; o++) gpu[o] = g[o];
    } else {
        gpu_free_outputs(t, g);
    }
    return ok;
}

/* Plant NaN / Inf at the first element, the last one and one in the middle of t. */
static void plant(fr_tensor *t, int kind, int64_t salt)
{
    int64_t n = fr_tensor_numel(t);
    if (n == 0) return;
    float *p = t->data;
    p[n - 1] = INFINITY;
    p[(n / 2 + salt) % n] = -INFINITY;
    if (kind == 1) p[0] = NAN;
}

static int check(const qcase *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    int ok = 1, dl = is_delayed(c), blk = is_block(c);
    int64_t xd[2] = {c->M, c->K}, wd[2] = {c->transB ? c->N : c->K, c->transB ? c->K : c->N}, yd[2] = {c->M, c->N};
    fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0, 1.5), *w = tt_randn(&r, FR_F32, 2, wd, 0, 0.05);
    fr_tensor *dy = tt_randn(&r, FR_F32, 2, yd, 0, 0.01);
    float ax = finite_amax(x), ay = finite_amax(dy);
    if (c->nonfinite) {
        plant(x, c->nonfinite, 7);
        plant(dy, c->nonfinite, 3);
    }
    fr_tensor *sx = NULL, *sw = NULL, *sdy = NULL;
    if (dl) { /* X over-scaled (some codes saturate), dY near its range */
        float dmax = strcmp(c->fmt, "e4m3") == 0 ? 448.0f : 57344.0f;
        sx = tt_scalar1(ax > 0 ? 448.0f / ax * 1.7f : 3.0f);
        sw = tt_scalar1(0.25f * 448.0f / finite_amax(w));
        sdy = tt_scalar1(ay > 0 ? dmax / ay * 0.9f : 1000.0f);
    }
    double gt = c->nonfinite ? -1 : 1e-2; /* GEMM results: NaN rows where a NaN was, else compared */
    char l2[300];

    /* forward with the saved Xq */
    fr_tensor *fin[6] = {x, w, NULL, sx, sw, sdy};
    tnode f;
    tn_init_domain(&f, FR_DOMAIN_FP8RUN, "Linear", 1, dl ? 6 : 2, fin, 0, 5);
    set_attrs(&f, c);
    static const char *const fnames[5] = {"Y", "Xq", "Xq_scale_inv", "amax_x", "amax_w"};
    const double ftols[5] = {gt, 0, 0, 0, 0};
    snprintf(l2, sizeof l2, "%s Linear", label);
    ok &= run_cmp(&f, l2, fnames, ftols, NULL);
    if (!blk && f.out[1]) { /* per tensor: the saved codes are X^T, [K, M] */
        int shaped = f.out[1]->rank == 2 && f.out[1]->dims[0] == c->K && f.out[1]->dims[1] == c->M;
        if (!shaped) fprintf(stderr, "\n  %s: saved Xq is not [K, M]\n", label);
        ok &= shaped;
    }
    if (!c->nonfinite && f.out[3]) { /* the reference itself: amax = max |x| */
        float got = ((const float *)f.out[3]->data)[0];
        if (got != ax) fprintf(stderr, "\n  %s: CPU amax_x %g, max |x| %g\n", label, (double)got, (double)ax);
        ok &= got == ax;
    }
    if (c->nonfinite && f.out[3]) { /* NaN wins over Inf; Inf alone gives +Inf */
        float got = ((const float *)f.out[3]->data)[0];
        ok &= c->nonfinite == 1 ? isnan(got) != 0 : got == INFINITY;
    }

    if (!blk) {
        /* data gradient: dY's codes for its GEMM and transposed for the weight gradient */
        fr_tensor *din[4] = {dy, w, sw, sdy};
        tnode d;
        tn_init_domain(&d, FR_DOMAIN_FP8RUN, "LinearGradData", 1, dl ? 4 : 2, din, 0, 4);
        set_attrs(&d, c);
        static const char *const dnames[4] = {"dX", "amax_dy", "dYq", "dYq_scale_inv"};
        const double dtols[4] = {gt, 0, 0, 0};
        snprintf(l2, sizeof l2, "%s LinearGradData(dYq)", label);
        ok &= run_cmp(&d, l2, dnames, dtols, NULL);
        if (!c->nonfinite && d.out[1]) ok &= ((const float *)d.out[1]->data)[0] == ay;
        /* weight gradient from the saved Xq^T and dYq (as they are) */
        if (f.out[1] && f.out[2] && d.out[2] && d.out[3] && !c->nonfinite) {
            fr_tensor *win[4] = {f.out[1], d.out[2], f.out[2], d.out[3]};
            tnode wg;
            tn_init_domain(&wg, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 4, win, 0, 1);
            set_attrs(&wg, c);
            static const char *const wnames[1] = {"dW"};
            const double wtols[1] = {1e-2};
            snprintf(l2, sizeof l2, "%s LinearGradWeight(Xq, dYq)", label);
            ok &= run_cmp(&wg, l2, wnames, wtols, NULL);
            tn_free(&wg);
        }
        tn_free(&d);
    } else {
        /* block: dY in 1x128 blocks (data gradient), X and dY in 128x1 blocks (weight gradient) */
        fr_tensor *din[2] = {dy, w};
        tnode d;
        tn_init_domain(&d, FR_DOMAIN_FP8RUN, "LinearGradData", 1, 2, din, 0, 2);
        set_attrs(&d, c);
        static const char *const dnames[2] = {"dX", "amax_dy"};
        const double dtols[2] = {1e-2, 0};
        snprintf(l2, sizeof l2, "%s LinearGradData", label);
        ok &= run_cmp(&d, l2, dnames, dtols, NULL);
        tn_free(&d);
        fr_tensor *win[2] = {x, dy};
        tnode wg;
        tn_init_domain(&wg, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, 2, win, 0, 2);
        set_attrs(&wg, c);
        static const char *const wnames[2] = {"dW", "amax_dy"};
        const double wtols[2] = {1e-2, 0};
        snprintf(l2, sizeof l2, "%s LinearGradWeight(X)", label);
        ok &= run_cmp(&wg, l2, wnames, wtols, NULL);
        tn_free(&wg);
    }
    tn_free(&f);
    fr_tensor *all[] = {x, w, dy, sx, sw, sdy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
    return ok;
}

/* M, K, N: nothing a multiple of 16 (padded); multiples of 16 but not of 128 (the cast +
 * transpose's partial tiles); 12 whole 128x128 tiles of X and 8 of dY over 3 blocks; a padded
 * M with aligned K, N; many tiles (72 of X, 27 of dY over 3 blocks) */
static const int64_t shapes[][3] = {
    {135, 141, 29}, {400, 208, 144}, {512, 384, 272}, {33, 1024, 48}, {1040, 1024, 272},
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

static void run_recipe(const char *recipe)
{
    for (int s = 0; s < N_SHAPES; s++)
        for (int f = 0; f < 2; f++) {
            qcase c = {shapes[s][0], shapes[s][1], shapes[s][2], recipe, f ? "e4m3" : "hybrid", (s + f) & 1, 0};
            char label[160];
            snprintf(label, sizeof label, "quantize %s %s M=%lld K=%lld N=%lld transB=%d", recipe, c.fmt,
                     (long long)c.M, (long long)c.K, (long long)c.N, c.transB);
            CU_ASSERT(check(&c, label));
        }
}

static void test_delayed(void)
{
    if (gpu_available()) run_recipe("delayed");
}

static void test_current(void)
{
    if (gpu_available()) run_recipe("current");
}

static void test_block(void)
{
    if (gpu_available()) run_recipe("block");
}

/* delayed (the only recipe that quantizes non-finite input): NaN -> NaN code, +-Inf ->
 * saturated codes, amax NaN (NaN and Inf) or +Inf (Inf alone), on padded and aligned shapes */
static void test_nonfinite(void)
{
    if (!gpu_available()) return;
    for (int s = 0; s < N_SHAPES; s++)
        for (int kind = 1; kind <= 2; kind++) {
            qcase c = {shapes[s][0], shapes[s][1], shapes[s][2], "delayed", kind == 1 ? "hybrid" : "e4m3", s & 1,
                       kind};
            char label[160];
            snprintf(label, sizeof label, "quantize delayed %s M=%lld K=%lld N=%lld", kind == 1 ? "NaN+Inf" : "Inf",
                     (long long)c.M, (long long)c.K, (long long)c.N);
            CU_ASSERT(check(&c, label));
        }
}

static CU_TestInfo tests[] = {
    {"delayed: codes, transposed codes, amax bit for bit", test_delayed},
    {"current: amax pass, then the cast", test_current},
    {"block: 1x128 / 128x1 / 128x128 blocks", test_block},
    {"delayed NaN / Inf input", test_nonfinite},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    setenv("FP8RUN_QUANT_BLOCKS", "3", 0); /* read when the CUDA context is made */
    CU_SuiteInfo suites[] = {{"gpu_quantize", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
