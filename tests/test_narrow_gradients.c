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
 *    of the activations explains (the first step) and both runs train. */
#include <math.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/op_harness.h"
#include "ops/linear.h"
#include "passes/narrow_activations.h"
#include "runtime/llama_gen.h"
#include "runtime/train_internal.h"
#include "runtime/trainer.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 13};

typedef struct counts {
    int norm_y, norm_h, swiglu_y, attn_o, lin_y_branch, swiglug_dx, attng_dx, lgd_dx, anorm_dx;
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
        } else if (op(n, "AttentionQKV")) {
            c.attn_o += bf16(g, n->outputs[0]);
        } else if (op(n, "Linear")) {
            /* Y bf16 and read by AddRMSNorm: the O / down projections */
            for (int j = 0; j < g->n_nodes; j++)
                if (op(&g->nodes[j], "AddRMSNorm") && g->nodes[j].inputs[1] == n->outputs[0])
                    c.lin_y_branch += bf16(g, n->outputs[0]);
        } else if (op(n, "SwiGLUGrad")) {
            c.swiglug_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "AttentionQKVGrad")) {
            c.attng_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "LinearGradData")) {
            c.lgd_dx += bf16(g, n->outputs[0]);
        } else if (op(n, "AddRMSNormGrad")) {
            c.anorm_dx += bf16(g, n->outputs[0]);
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
           "LinearGradData %d", prec, narrow, c.norm_y, c.swiglu_y, c.attn_o, c.lin_y_branch, c.swiglug_dx, c.attng_dx,
           c.lgd_dx);
    /* 2 L AddRMSNorms (the last layer's second one reads the final norm's input? no: the
       final norm is the last AddRMSNorm, read by the bf16 LM head) */
    CU_ASSERT(on ? c.norm_y >= 2 * L - 1 : c.norm_y == 0);
    CU_ASSERT_EQUAL(c.norm_h, 0);
    CU_ASSERT_EQUAL(c.swiglu_y, on ? L : 0);
    CU_ASSERT_EQUAL(c.attn_o, on ? L : 0);
    CU_ASSERT_EQUAL(c.lin_y_branch, on ? 2 * L : 0);
    CU_ASSERT_EQUAL(c.swiglug_dx, on ? L : 0);
    CU_ASSERT_EQUAL(c.attng_dx, on ? L : 0);
    CU_ASSERT_EQUAL(c.lgd_dx, on ? 2 * L : 0); /* the down and O projections' dX */
    CU_ASSERT_EQUAL(c.anorm_dx, 0);            /* the residual gradient stays float32 */
    fr_trainer_free(t);
}

static void test_graphs(void)
{
    check("fp8", 1);
    check("bf16", 1);
    check("fp8", 0);
    check("fp32", 1);
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

int main(void)
{
    CU_TestInfo tests[] = {
        {"Llama: bf16 producers, branch Linears and gradients per layer; none in fp32 or off", test_graphs},
        {"a producer output read by a graph output stays float32", test_other_reader},
        {"fp8 and bf16 training with and without narrowing", test_losses},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"narrow_gradients", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
