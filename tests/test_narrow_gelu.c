/* Narrowed activations of the GPT-2 / GPT-NeoX family (biased Linears, GELU MLP):
 *  - Linear with a bias and y_dtype bfloat16 (CPU): the bias is rounded to bfloat16 first (as
 *    autocast and cuBLASLt's bf16-output epilogue take it), so Y equals the float32 Linear's Y
 *    with that bf16-rounded bias, rounded once to bfloat16, bit for bit, in bf16 and fp8
 *    (current, block, padded); in bf16 precision it also matches a float64 reference (the
 *    bf16-rounded operands' exact products summed in double, plus the bf16-rounded bias,
 *    rounded once to bfloat16): every element within one bf16 ulp and at most 1% of them off
 *    by that ulp (the float32 sum's own rounding moving a value across a bf16 rounding
 *    boundary); adding the bias after a first rounding would put about a quarter of them off;
 *  - ai.fp8run::Gelu on a bfloat16 X and/or with y_dtype bfloat16 equals the float32 Gelu on the
 *    same (widened) values, its result rounded once, bit for bit (approximate none and tanh);
 *    ONNX's Gelu refuses a bfloat16 X and y_dtype (its Y keeps X's type);
 *  - ActivationGrad (op Gelu) on a bfloat16 dy and/or x equals the float32 one on the widened
 *    values, dx float32;
 *  - the pipeline on the dynamo exports of GPT-NeoX (LayerNorm -> biased Linear -> Gelu ->
 *    biased Linear -> residual Add): in fp8 and bf16 each layer's up projection and Gelu write
 *    bfloat16 (the Gelu in the ai.fp8run domain), so does the biased Q/K/V projection
 *    AttentionQKV reads; ActivationGrad reads the bf16 X and a bf16 dy (the down projection's
 *    dX); none in fp32 or with narrowing off. The output projections stay float32: the parallel
 *    residual sums them with plain Adds. GPT-2's export puts a Reshape between each Gemm and
 *    its reader, so nothing there is narrowed (yet); fp8 training with and without narrowing
 *    gives close losses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/op_harness.h"
#include "ops/linear.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

/* ---- Linear: bias + y_dtype bfloat16 ---- */

static fr_tensor *run_linear(fr_tensor *x, fr_tensor *w, fr_tensor *b, const char *prec, const char *recipe,
                             int pad, int y_bf16)
{
    tnode t;
    fr_tensor *ins[3] = {x, w, b};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 3, ins, 0u, 1);
    TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "precision", prec);
    TN_ATTR(&t, string, "recipe", recipe);
    if (pad > 1) TN_ATTR(&t, int, "pad_multiple", pad);
    if (y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

static double bf16_val(uint16_t h) { return (double)fr_bf16_to_f32(h); }

/* d rounded once to bfloat16, nearest even (finite d away from the overflow) */
static uint16_t bf16_of_double(double d)
{
    uint16_t h = fr_f32_to_bf16((float)d), best = h;
    double err = fabs(bf16_val(h) - d);
    for (int s = -1; s <= 1; s += 2) {
        uint16_t c = (uint16_t)(h + s);
        if ((c & 0x8000u) != (h & 0x8000u)) continue;
        double e = fabs(bf16_val(c) - d);
        if (e < err || (e == err && (c & 1u) == 0)) {
            best = c;
            err = e;
        }
    }
    return best;
}

static int ulp_dist(uint16_t a, uint16_t b)
{
    int ia = a & 0x8000u ? -(int)(a & 0x7fffu) : (int)a, ib = b & 0x8000u ? -(int)(b & 0x7fffu) : (int)b;
    return abs(ia - ib);
}

static void test_linear_bias_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_bias_linear");
    static const int64_t shapes[][3] = {{5, 7, 3}, {16, 32, 48}, {33, 20, 17}, {64, 96, 80}}; /* M, K, N */
    static const struct {
        const char *prec, *recipe;
        int pad;
    } precs[] = {{"bf16", "delayed", 1}, {"fp8", "current", 1}, {"fp8", "block", 1}, {"fp8", "current", 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
            const int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            int64_t xd[2] = {M, K}, wd[2] = {N, K}, bd[1] = {N};
            fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0.0, 1.0), *w = tt_randn(&r, FR_F32, 2, wd, 0.0, 0.5);
            fr_tensor *b = tt_randn(&r, FR_F32, 1, bd, 0.0, 2.0), *br = tt_new(FR_F32, 1, bd);
            for (int64_t j = 0; j < N; j++) /* the bias as a bfloat16 Y adds it */
                ((float *)br->data)[j] = fr_bf16_to_f32(fr_f32_to_bf16(((const float *)b->data)[j]));
            fr_tensor *yf = run_linear(x, w, br, precs[p].prec, precs[p].recipe, precs[p].pad, 0);
            fr_tensor *yb = run_linear(x, w, b, precs[p].prec, precs[p].recipe, precs[p].pad, 1);
            CU_ASSERT_EQUAL_FATAL(yb->dtype, FR_BF16);
            CU_ASSERT_EQUAL_FATAL(yf->dtype, FR_F32);
            const uint16_t *yh = yb->data;
            int64_t bad = 0, n = M * N;
            for (int64_t i = 0; i < n; i++) bad += yh[i] != fr_f32_to_bf16(((const float *)yf->data)[i]);
            if (bad)
                printf("\n  %s/%s pad %d case %zu: %lld of %lld differ from bf16(float32 Y)", precs[p].prec,
                       precs[p].recipe, precs[p].pad, s, (long long)bad, (long long)n);
            CU_ASSERT_EQUAL(bad, 0);
            if (strcmp(precs[p].prec, "bf16") == 0) { /* the float64 reference, rounded once */
                const float *xv = x->data, *wv = w->data, *bv = br->data;
                int64_t off = 0, far = 0, twice = 0;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t j = 0; j < N; j++) {
                        double acc = 0, mag = fabs(bv[j]);
                        for (int64_t k = 0; k < K; k++) {
                            double t =
                                bf16_val(fr_f32_to_bf16(xv[m * K + k])) * bf16_val(fr_f32_to_bf16(wv[j * K + k]));
                            acc += t;
                            mag += fabs(t);
                        }
                        uint16_t want = bf16_of_double(acc + bv[j]);
                        uint16_t two = bf16_of_double(bf16_val(bf16_of_double(acc)) + bv[j]);
                        int d = ulp_dist(yh[m * N + j], want);
                        /* Where the sum cancels, float32 accumulation (K + 1 roundings of at most 2^-24 of
                         * the running magnitude) may move the result by more than a bfloat16 ulp of the
                         * small total; beyond that bound plus Y's own rounding is a real error. */
                        double got = bf16_val(yh[m * N + j]), exact = acc + bv[j];
                        double bound = (double)(K + 1) * ldexp(mag, -24) + fabs(got) * ldexp(1.0, -8);
                        off += d != 0;
                        far += d > 1 && fabs(got - exact) > bound;
                        twice += two != want;
                    }
                if (off * 100 > n || far)
                    printf("\n  case %zu: %lld of %lld off the float64 reference (%lld by more than 1 ulp and the "
                           "float32 bound)",
                           s, (long long)off, (long long)n, (long long)far);
                CU_ASSERT_EQUAL(far, 0);
                CU_ASSERT(off * 100 <= n);
                if (n >= 1000) CU_ASSERT(twice * 20 > n); /* the test sees a second rounding */
            }
            fr_tensor *all[6] = {x, w, b, br, yf, yb};
            for (int k = 0; k < 6; k++) fr_tensor_free(all[k]);
        }
}

/* ---- Gelu and its gradient on bfloat16 ---- */

/* t's values rounded to bfloat16: the bf16 tensor, and t holding the same values in float32 */
static fr_tensor *bf16_copy(fr_tensor *t)
{
    fr_tensor *bf = tt_new(FR_BF16, t->rank, t->dims);
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        uint16_t h = fr_f32_to_bf16(((float *)t->data)[i]);
        ((uint16_t *)bf->data)[i] = h;
        ((float *)t->data)[i] = fr_bf16_to_f32(h);
    }
    return bf;
}

static fr_status run1(const char *domain, const char *op, int n_in, fr_tensor **ins, const char *approx,
                      const char *y_dtype, fr_tensor **out)
{
    tnode t;
    tn_init_domain(&t, domain, op, domain[0] ? 1 : 20, n_in, ins, 0u, 1);
    if (strcmp(op, "ActivationGrad") == 0) TN_ATTR(&t, string, "op", "Gelu");
    if (approx) TN_ATTR(&t, string, "approximate", approx);
    if (y_dtype) TN_ATTR(&t, string, "y_dtype", y_dtype);
    fr_status st = tn_run(&t);
    *out = st == FR_OK ? t.out[0] : NULL;
    if (st == FR_OK) t.out[0] = NULL;
    tn_free(&t);
    return st;
}

static void test_gelu_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_gelu");
    static const char *const approx[2] = {"none", "tanh"};
    int64_t d[2] = {9, 37};
    for (int a = 0; a < 2; a++) {
        fr_tensor *xf = tt_randn(&r, FR_F32, 2, d, 0, 3), *dyf = tt_randn(&r, FR_F32, 2, d, 0, 1);
        fr_tensor *xb = bf16_copy(xf), *dyb = bf16_copy(dyf);
        fr_tensor *ref = NULL, *dref = NULL;
        FR_ASSERT_OK(run1(FR_DOMAIN_FP8RUN, "Gelu", 1, &xf, approx[a], NULL, &ref));
        fr_tensor *gin[2] = {dyf, xf};
        FR_ASSERT_OK(run1(FR_DOMAIN_FP8RUN, "ActivationGrad", 2, gin, approx[a], NULL, &dref));
        const int64_t n = fr_tensor_numel(xf);
        for (int xbf = 0; xbf < 2; xbf++)
            for (int ybf = 0; ybf < 2; ybf++) {
                if (!xbf && !ybf) continue;
                fr_tensor *in = xbf ? xb : xf, *y = NULL;
                FR_ASSERT_OK(run1(FR_DOMAIN_FP8RUN, "Gelu", 1, &in, approx[a], ybf ? "bfloat16" : "float32", &y));
                CU_ASSERT_EQUAL_FATAL(y->dtype, ybf ? FR_BF16 : FR_F32);
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    float want = ((const float *)ref->data)[i];
                    bad += ybf ? ((const uint16_t *)y->data)[i] != fr_f32_to_bf16(want)
                               : memcmp((const float *)y->data + i, &want, 4) != 0;
                }
                CU_ASSERT_EQUAL(bad, 0);
                fr_tensor_free(y);
            }
        for (int dbf = 0; dbf < 2; dbf++)
            for (int xbf = 0; xbf < 2; xbf++) {
                if (!dbf && !xbf) continue;
                fr_tensor *in[2] = {dbf ? dyb : dyf, xbf ? xb : xf}, *dx = NULL;
                FR_ASSERT_OK(run1(FR_DOMAIN_FP8RUN, "ActivationGrad", 2, in, approx[a], NULL, &dx));
                CU_ASSERT_EQUAL_FATAL(dx->dtype, FR_F32);
                CU_ASSERT_EQUAL(memcmp(dx->data, dref->data, (size_t)n * 4), 0);
                fr_tensor_free(dx);
            }
        fr_tensor *y = NULL;
        CU_ASSERT_EQUAL(run1("", "Gelu", 1, &xb, approx[a], NULL, &y), FR_ERR_UNSUPPORTED); /* ONNX's: Y = X's type */
        CU_ASSERT_EQUAL(run1("", "Gelu", 1, &xf, approx[a], "bfloat16", &y), FR_OK); /* ONNX's ignores y_dtype */
        if (y) CU_ASSERT_EQUAL(y->dtype, FR_F32);
        fr_tensor_free(y);
        CU_ASSERT_EQUAL(run1(FR_DOMAIN_FP8RUN, "Gelu", 1, &xf, approx[a], "float16", &y), FR_ERR_UNSUPPORTED);
        fr_tensor *all[6] = {xf, dyf, xb, dyb, ref, dref};
        for (int k = 0; k < 6; k++) fr_tensor_free(all[k]);
    }
}

/* ---- the pipeline on GPT-NeoX and GPT-2 ---- */

static int has_bias(const fr_node *n) { return n->n_inputs > FR_LIN_IN_B && n->inputs[FR_LIN_IN_B] >= 0; }

typedef struct gelu_count {
    int up, gelu, biased, agrad_x, agrad_dy;
} gelu_count;

/* the forward's nodes: not the copies that remake a Gelu's output for its Linear's weight
 * gradient (passes/wgrad_operand.c, named ".../remade") */
static int counted(const fr_node *nd) { return !nd->dead && !strstr(nd->name, "/remade"); }

static gelu_count count_gelu(const fr_graph *g)
{
    gelu_count c = {0, 0, 0, 0, 0};
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (!counted(nd)) continue;
        if (strcmp(nd->op_type, "Linear") == 0 && has_bias(nd) && g->values[nd->outputs[0]].dtype == FR_BF16) {
            c.biased++;
            for (int j = 0; j < g->n_nodes; j++)
                if (counted(&g->nodes[j]) && strcmp(g->nodes[j].op_type, "Gelu") == 0 &&
                    g->nodes[j].inputs[0] == nd->outputs[0])
                    c.up++;
        }
        if (strcmp(nd->op_type, "Gelu") == 0 && strcmp(nd->domain, FR_DOMAIN_FP8RUN) == 0 &&
            g->values[nd->inputs[0]].dtype == FR_BF16 && g->values[nd->outputs[0]].dtype == FR_BF16)
            c.gelu++;
        if (strcmp(nd->op_type, "ActivationGrad") == 0) {
            c.agrad_dy += g->values[nd->inputs[0]].dtype == FR_BF16;
            c.agrad_x += g->values[nd->inputs[1]].dtype == FR_BF16;
        }
    }
    return c;
}

/* layers: those whose up projection, Gelu and Q/K/V projection narrow */
static void check_pipeline(const char *dir, const char *prec, int narrow, int layers)
{
    fr_graph *g = fr_ft_open_hf(dir);
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.precision = prec;
    o.narrow_activations = narrow;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, &o, &t);
    if (st != FR_OK) printf("\n  %s %s: %s", dir, prec, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    gelu_count c = count_gelu(t->g);
    int want = narrow && strcmp(prec, "fp32") != 0 ? layers : 0;
    if (c.up != want || c.gelu != want || c.agrad_x != want || c.agrad_dy != want || c.biased != 2 * want)
        printf("\n  %s %s narrow=%d: up %d, gelu %d, ActivationGrad x %d dy %d, biased bf16 Linears %d (want %d a "
               "kind, %d biased)",
               dir, prec, narrow, c.up, c.gelu, c.agrad_x, c.agrad_dy, c.biased, want, 2 * want);
    CU_ASSERT_EQUAL(c.up, want);
    CU_ASSERT_EQUAL(c.gelu, want);
    CU_ASSERT_EQUAL(c.agrad_x, want);
    CU_ASSERT_EQUAL(c.agrad_dy, want);
    CU_ASSERT_EQUAL(c.biased, 2 * want); /* the up and Q/K/V projections */
    fr_trainer_free(t);
    fr_graph_free(g);
}

static void test_pipeline(void)
{
    static const struct {
        const char *dir;
        int layers;
    } fx[] = {{"gpt_neox_op18_static", 2}, {"gpt_neox_op23_static", 2}, {"gpt2_op18_static", 0}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        check_pipeline(fx[i].dir, "fp8", 1, fx[i].layers);
        check_pipeline(fx[i].dir, "bf16", 1, fx[i].layers);
        check_pipeline(fx[i].dir, "fp8", 0, fx[i].layers);
        check_pipeline(fx[i].dir, "fp32", 1, fx[i].layers);
    }
}

static void test_losses(void)
{
    fr_graph *g = fr_ft_open_hf("gpt_neox_op18_static");
    double on[FR_FT_STEPS], off[FR_FT_STEPS];
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.precision = "fp8";
    fr_ft_train_losses(g, &o, on, NULL);
    o.narrow_activations = 0;
    fr_ft_train_losses(g, &o, off, NULL);
    CU_ASSERT(fabs(on[0] - off[0]) <= 1e-3 * fabs(off[0]));
    fr_ft_expect_same_losses("fp8 GPT-NeoX narrowed", on, off, 5e-2);
    CU_ASSERT(on[FR_FT_STEPS - 1] < on[0]);
    fr_graph_free(g);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Linear bias + y_dtype bfloat16 == bf16(float32 Y), and the float64 reference rounded once",
         test_linear_bias_bf16},
        {"Gelu / ActivationGrad on bfloat16 == float32 on the same values", test_gelu_bf16},
        {"pipeline: GPT-NeoX's up and Q/K/V projections and Gelus in bfloat16", test_pipeline},
        {"fp8 GPT-NeoX training with and without narrowing", test_losses},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"narrow_gelu", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
