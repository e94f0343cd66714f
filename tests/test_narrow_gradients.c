/* bfloat16 around the FP8 Linears (passes/narrow_activations.c's producers,
 * passes/narrow_gradients.c) on the generated Llama, CPU:
 *  - per layer in bf16 and fp8 precision: both AddRMSNorm Ys (read by the Q/K/V and gate/up
 *    Linears), SwiGLU's y and AttentionQKV's O (read by the down and O projections) are
 *    bfloat16, as are the O and down projections' Ys (AddRMSNorm's branch input); in the
 *    backward SwiGLUGrad's and AttentionQKVGrad's dX and the down / O projections' dX;
 *    the residual stream (AddRMSNorm's H, AddRMSNormGrad's dX) stays float32;
 *  - nothing of it in fp32 precision or with --no-narrow-activations;
 *  - a producer output also read by something else than a bf16/fp8 Linear stays float32;
 *  - training: fp8 and bf16 losses with and without narrowing agree within what bf16 rounding
 *    of the activations explains (the first step) and both runs train;
 *  - the dynamo exports of Llama, Gemma and GPT-2: what is narrowed, and fp8 training with and
 *    without it; of Qwen3 (static and dynamic exports): AttentionQKVGrad's dX narrowed beside
 *    its q/k norm weights' float32 gradients. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/fuse_test_util.h"
#include "tests/op_harness.h"
#include "ops/linear.h"
#include "passes/narrow_activations.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 13};

typedef struct counts {
    int norm_y, norm_h, swiglu_y, attn_o, lin_y_branch, swiglug_dx, attng_dx, lgd_dx, anorm_dx, logits, dlogits;
    int anorm_hs; /* AddRMSNormGrads reading their AddRMSNorm's bfloat16 Hs, not H */
} counts;

static int bf16(const fr_graph *g, int v) { return v >= 0 && g->values[v].dtype == FR_BF16; }

static int op(const fr_node *n, const char *t) { return !n->dead && strcmp(n->op_type, t) == 0; }

static counts count(const fr_graph *g)
{
    counts c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (op(n, "AddRMSNorm")) {
            c.norm_y += bf16(g, n->outputs[1]);
            c.norm_h += bf16(g, n->outputs[0]);
        } else if (op(n, "SwiGLU")) {
            c.swiglu_y += bf16(g, n->outputs[0]);
        } else if (op(n, "SwiGLUQuantize")) { /* an fp8 producer: y rounded to bf16, then its codes */
            int y16 = 0;
            FR_ASSERT_OK(fr_attr_bf16(n, "y_dtype", &y16));
            c.swiglu_y += y16;
        } else if (op(n, "AttentionQKV")) {
            c.attn_o += bf16(g, n->outputs[0]);
        } else if (op(n, "Linear")) {
            /* Y bf16 and read by AddRMSNorm: the O / down projections; by the loss: the LM head */
            for (int j = 0; j < g->n_nodes; j++) {
                if (op(&g->nodes[j], "AddRMSNorm") && g->nodes[j].inputs[1] == n->outputs[0])
                    c.lin_y_branch += bf16(g, n->outputs[0]);
                if (op(&g->nodes[j], "SoftmaxCrossEntropy") && g->nodes[j].inputs[0] == n->outputs[0])
                    c.logits += bf16(g, n->outputs[0]);
            }
        } else if (op(n, "SoftmaxCrossEntropyGrad")) {
            c.dlogits += bf16(g, n->outputs[0]);
        } else if (op(n, "SwiGLUGrad")) {
            c.swiglug_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "SwiGLUGradQuantize")) { /* fp8 producers: d_gate_up rounded to bf16, then its codes */
            int b = 0;
            FR_ASSERT_OK(fr_attr_bf16(n, "dx_dtype", &b));
            c.swiglug_dx += b;
        } else if (op(n, "AttentionQKVGrad")) {
            c.attng_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "LinearGradData")) {
            c.lgd_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "AddRMSNormGrad")) {
            c.anorm_dx += bf16(g, n->outputs[0]);
            const int h = n->inputs[1], p = g->values[h].producer;
            c.anorm_hs += bf16(g, h) && p >= 0 && op(&g->nodes[p], "AddRMSNorm") && g->nodes[p].n_outputs > 2 &&
                          g->nodes[p].outputs[2] == h;
        }
    }
    return c;
}

static fr_trainer *trainer(const char *prec, int narrow)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = prec;
    o.narrow_activations = narrow;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s narrow=%d: %s", prec, narrow, fr_last_error());
    CU_ASSERT_EQUAL(st, FR_OK);
    fr_graph_free(model);
    return t;
}

static void check(const char *prec, int narrow)
{
    fr_trainer *t = trainer(prec, narrow);
    if (!t) return;
    counts c = count(t->g);
    const int L = (int)k_llama.layers, on = narrow && strcmp(prec, "fp32") != 0;
    printf("\n  %s narrow=%d: norm Y %d, SwiGLU y %d, O %d, branch Y %d, dX: SwiGLUGrad %d AttentionQKVGrad %d "
           "LinearGradData %d; logits %d dlogits %d", prec, narrow, c.norm_y, c.swiglu_y, c.attn_o, c.lin_y_branch,
           c.swiglug_dx, c.attng_dx, c.lgd_dx, c.logits, c.dlogits);
    /* 2 L AddRMSNorms: each layer's two residual adds with the norm after them (the last one
       the final norm, read by the bf16 LM head); layer 0's first norm has no add */
    CU_ASSERT_EQUAL(c.norm_y, on ? 2 * L : 0);
    CU_ASSERT_EQUAL(c.logits, on);  /* the LM head writes bf16 logits */
    CU_ASSERT_EQUAL(c.dlogits, on); /* and the loss head's gradient bf16 dlogits */
    CU_ASSERT_EQUAL(c.norm_h, 0);
    CU_ASSERT_EQUAL(c.swiglu_y, on ? L : 0);
    CU_ASSERT_EQUAL(c.attn_o, on ? L : 0);
    CU_ASSERT_EQUAL(c.lin_y_branch, on ? 2 * L : 0);
    CU_ASSERT_EQUAL(c.swiglug_dx, on ? L : 0);
    CU_ASSERT_EQUAL(c.attng_dx, on ? L : 0);
    CU_ASSERT_EQUAL(c.lgd_dx, on ? 2 * L : 0); /* the down and O projections' dX */
    CU_ASSERT_EQUAL(c.anorm_dx, 0);            /* the residual gradient stays float32 */
    CU_ASSERT_EQUAL(c.anorm_hs, on ? 2 * L : 0); /* the backward reads the residual's bf16 copy */
    fr_trainer_free(t);
}

static void test_graphs(void)
{
    check("fp8", 1);
    check("bf16", 1);
    check("fp8", 0);
    check("fp32", 1);
    /* FP8RUN_BF16_SAVED_RESIDUAL=0: the norms' backward reads the float32 H again, nothing else changes */
    CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_BF16_SAVED_RESIDUAL", "0", 1), 0);
    fr_trainer *t = trainer("fp8", 1);
    unsetenv("FP8RUN_BF16_SAVED_RESIDUAL");
    if (!t) return;
    counts c = count(t->g);
    CU_ASSERT_EQUAL(c.anorm_hs, 0);
    CU_ASSERT_EQUAL(c.norm_y, 2 * (int)k_llama.layers);
    fr_trainer_free(t);
}

/* an AddRMSNorm Y also read by a float32 consumer stays float32 */
static void test_other_reader(void)
{
    fr_trainer *t = trainer("fp8", 0);
    if (!t) return;
    fr_graph *g = t->g;
    int marked = 0;
    for (int i = 0; i < g->n_nodes && !marked; i++)
        if (op(&g->nodes[i], "AddRMSNorm")) {
            g->values[g->nodes[i].outputs[1]].flags |= FR_VAL_OUTPUT, marked = i + 1;
        }
    int n = -1;
    FR_ASSERT_OK(fr_narrow_activations(g, &n));
    CU_ASSERT(n > 0);
    CU_ASSERT_FATAL(marked > 0);
    CU_ASSERT_EQUAL(g->values[g->nodes[marked - 1].outputs[1]].dtype, FR_F32);
    fr_trainer_free(t);
}

/* ---- the loss head on bfloat16 logits ---- */

static fr_tensor *run_ce(const char *op, int n_in, fr_tensor **ins, int dx16)
{
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, n_in, ins, 0u, 1);
    if (dx16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

static void test_loss_head_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_ce");
    int64_t d[3] = {2, 5, 37}, ld[2] = {2, 5};
    fr_tensor *lf = tt_randn(&r, FR_F32, 3, d, 0, 3), *lb = bc_bf16_pair(lf); /* lf: lb's float32 twin */
    fr_tensor *labels = tt_rand_ints(&r, FR_I64, 2, ld, 0, 36), *dl = tt_scalar(FR_F32, 1.7); /* [0, 36] */
    ((int64_t *)labels->data)[3] = -100; /* one ignored position */
    fr_tensor *in_f[2] = {lf, labels}, *in_b[2] = {lb, labels};
    fr_tensor *loss_f = run_ce("SoftmaxCrossEntropy", 2, in_f, 0), *loss_b = run_ce("SoftmaxCrossEntropy", 2, in_b, 0);
    CU_ASSERT_EQUAL(loss_b->dtype, FR_F32);
    CU_ASSERT_EQUAL(memcmp(loss_f->data, loss_b->data, 4), 0);
    fr_tensor *g_f[3] = {dl, lf, labels}, *g_b[3] = {dl, lb, labels};
    fr_tensor *dxf = run_ce("SoftmaxCrossEntropyGrad", 3, g_f, 0), *dxb = run_ce("SoftmaxCrossEntropyGrad", 3, g_b, 0);
    fr_tensor *dxf16 = run_ce("SoftmaxCrossEntropyGrad", 3, g_f, 1), *dxb16 = run_ce("SoftmaxCrossEntropyGrad", 3, g_b, 1);
    CU_ASSERT_EQUAL(dxb->dtype, FR_F32);
    CU_ASSERT_EQUAL(dxf16->dtype, FR_BF16);
    CU_ASSERT_EQUAL(dxb16->dtype, FR_BF16);
    const int64_t n = fr_tensor_numel(lf);
    CU_ASSERT_EQUAL(memcmp(dxf->data, dxb->data, (size_t)n * 4), 0);
    int64_t off = bc_round_diff("dlogits (float32 logits)", dxf16, dxf, NULL) +
                  bc_round_diff("dlogits (bf16 logits)", dxb16, dxf, NULL),
            nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += ((float *)dxf->data)[i] != 0.0f;
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT(nonzero > n / 2);
    /* a float64 computation cannot write bf16; a bf16 dloss is refused */
    fr_tensor *l64 = tt_randn(&r, FR_F64, 3, d, 0, 1), *dl64 = tt_scalar(FR_F64, 1.0);
    fr_tensor *g64[3] = {dl64, l64, labels};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropyGrad", 1, 3, g64, 0u, 1);
    TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("float64");
    tn_free(&t);
    fr_tensor *dl16 = tt_new(FR_BF16, 0, NULL), *gbad[3] = {dl16, lb, labels};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropyGrad", 1, 3, gbad, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("dloss");
    tn_free(&t);
    fr_tensor *all[] = {lf, lb, labels, dl, loss_f, loss_b, dxf, dxb, dxf16, dxb16, l64, dl64, dl16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}

static void losses(const char *prec)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    double on[FR_FT_STEPS], off[FR_FT_STEPS];
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = prec;
    fr_ft_train_losses(model, &o, on, NULL);
    o.narrow_activations = 0;
    fr_ft_train_losses(model, &o, off, NULL);
    printf("\n  %s: loss 0: %.6f vs %.6f, loss %d: %.6f vs %.6f", prec, on[0], off[0], FR_FT_STEPS - 1,
           on[FR_FT_STEPS - 1], off[FR_FT_STEPS - 1]);
    CU_ASSERT(fabs(on[0] - off[0]) <= 2e-3 * fabs(off[0])); /* the rounding alone */
    fr_ft_expect_same_losses(prec, on, off, 5e-2);
    CU_ASSERT(on[FR_FT_STEPS - 1] < 0.9 * on[0]);
    fr_graph_free(model);
}

static void test_losses(void)
{
    losses("fp8");
    losses("bf16");
}

/* What users bring: the dynamo exports narrow the same producers (Llama, Gemma: 8 per layer, and
 * the bf16 LM head then saves no copy of its bfloat16 X: one more; GPT-2, LayerNorm and biased
 * projections: only AttentionQKV's O) and train in fp8 with and without narrowing to the same
 * losses within what the rounding explains */
static void test_hf_exports(void)
{
    static const struct {
        const char *dir;
        int narrowed; /* the forward pass's count over the fixtures' 2 layers */
    } fx[] = {{"llama_op18_static", 17}, {"gemma_op18_static", 17}, {"gpt2_op18_static", 2}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fr_graph *g = fr_ft_open_hf(fx[i].dir);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.precision = "fp8";
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        int n = -1;
        for (int k = 0; k < t->passes.n; k++)
            if (strcmp(t->passes.pass[k].name, "narrow_activations") == 0) n = t->passes.pass[k].changed;
        if (n != fx[i].narrowed) printf("\n  %s: %d narrowed, want %d", fx[i].dir, n, fx[i].narrowed);
        CU_ASSERT_EQUAL(n, fx[i].narrowed);
        fr_trainer_free(t);
        double on[FR_FT_STEPS], off[FR_FT_STEPS];
        fr_ft_train_losses(g, &o, on, NULL);
        o.narrow_activations = 0;
        fr_ft_train_losses(g, &o, off, NULL);
        printf("\n  %s fp8: loss 0 %.6f vs %.6f, loss %d %.6f vs %.6f", fx[i].dir, on[0], off[0], FR_FT_STEPS - 1,
               on[FR_FT_STEPS - 1], off[FR_FT_STEPS - 1]);
        CU_ASSERT(fabs(on[0] - off[0]) <= 2e-3 * fabs(off[0]));
        fr_ft_expect_same_losses(fx[i].dir, on, off, 5e-2);
        fr_graph_free(g);
    }
}

/* The fused per-head q/k norm (Qwen3, opsets 18 and 23, static and dynamic exports):
 * AttentionQKVGrad's dX is bfloat16 like the Llama's while its norm weights' gradients stay
 * float32, and fp8 training matches the unnarrowed run within what the rounding explains */
static void test_qk_norm_exports(void)
{
    static const char *const dirs[] = {"qwen3_op18_static", "qwen3_op23_static", "qwen3_op18_dynamic",
                                       "qwen3_op23_dynamic"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_graph *g = fr_ft_open_hf(dirs[i]);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.precision = "fp8";
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        int normed = 0, dx_bf16 = 0, dw_f32 = 0;
        for (int j = 0; j < t->g->n_nodes; j++) {
            const fr_node *n = &t->g->nodes[j];
            if (!op(n, "AttentionQKVGrad") || n->n_outputs < 3) continue;
            normed++;
            dx_bf16 += bf16(t->g, n->outputs[0]);
            dw_f32 += n->outputs[1] >= 0 && n->outputs[2] >= 0 && t->g->values[n->outputs[1]].dtype == FR_F32 &&
                      t->g->values[n->outputs[2]].dtype == FR_F32;
        }
        printf("\n  %s: %d AttentionQKVGrad with q/k norm weights' gradients, dX bf16 in %d, theirs float32 in %d",
               dirs[i], normed, dx_bf16, dw_f32);
        CU_ASSERT(normed >= 2); /* the fixtures' two layers */
        CU_ASSERT_EQUAL(dx_bf16, normed);
        CU_ASSERT_EQUAL(dw_f32, normed);
        fr_trainer_free(t);
        double on[FR_FT_STEPS], off[FR_FT_STEPS];
        fr_ft_train_losses(g, &o, on, NULL);
        o.narrow_activations = 0;
        fr_ft_train_losses(g, &o, off, NULL);
        printf("\n  %s fp8: loss 0 %.6f vs %.6f, loss %d %.6f vs %.6f", dirs[i], on[0], off[0], FR_FT_STEPS - 1,
               on[FR_FT_STEPS - 1], off[FR_FT_STEPS - 1]);
        CU_ASSERT(fabs(on[0] - off[0]) <= 2e-3 * fabs(off[0]));
        fr_ft_expect_same_losses(dirs[i], on, off, 5e-2);
        fr_graph_free(g);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Llama: bf16 producers, branch Linears and gradients per layer; none in fp32 or off", test_graphs},
        {"a producer output read by a graph output stays float32", test_other_reader},
        {"SoftmaxCrossEntropy(Grad) on bf16 logits == float32; dx_dtype == rounding", test_loss_head_bf16},
        {"fp8 and bf16 training with and without narrowing", test_losses},
        {"dynamo HF exports: the producers narrowed, fp8 losses with and without", test_hf_exports},
        {"q/k-norm exports: AttentionQKVGrad's dX bf16, the norm weights' gradients float32", test_qk_norm_exports},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"narrow_gradients", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
