/* The residual Add + LayerNorm fusion: ops/add_layer_norm.c (AddLayerNorm, AddLayerNormGrad) and
 * passes/residual_norm_fuse.c, on the CPU, fresh random inputs (FR_TEST_SEED):
 *  - hand-built graphs, fused vs unfused (fr_ft_check_pattern): h read again after the norm (the
 *    backward's dH input), h read by the norm only, no Bias, two normalized dims (axis 1, Scale
 *    [T, D]), h a graph output, epsilon, a position embedding [1, T, D] or [T, D] as either
 *    addend, a bias-like [D] addend, h flattened to [B T, D] by a Reshape before the norm (OPT): y and the gradients of a, b, Scale, Bias bit for bit (relative
 *    L2 0: the ops round as the unfused ones do); an Add broadcasting over a middle dim, a
 *    broadcast Scale, a Bias of another shape than Scale's, a Reshape whose input is read again
 *    and a used Mean output stay unfused;
 *  - a parallel block's second LayerNorm of the sum (with and without Bias): in the same node
 *    (Y2), y and the gradients of a, b and both norms' parameters bit for bit; of another
 *    epsilon: left as a LayerNormalization reading H, which the fast-path check names;
 *  - the gradient rule against central differences (1e-3 relative L2, the float32
 *    finite-difference noise), with and without a gradient into H, with a repeated B, with only A
 *    differentiated (dScale and dBias empty), and with the second norm (both Ys read, or one);
 *  - the trainer on the dynamo exports (opsets 18 and 23, static and dynamic shapes) of GPT-2,
 *    BERT (post-LN: the sum is read by the norm only), OPT (the sum reshaped before the norm),
 *    Falcon, Phi, Starcoder2 and GPT-NeoX (parallel attention + MLP: the sum read by two norms, both in one AddLayerNorm):
 *    the fused node counts, one AddLayerNormGrad each, no norm after an Add left, and 20 AdamW steps' losses equal to the unfused ones within 1e-6
 *    (--no-fuse-residual-norm). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "passes/fast_path.h"
#include "passes/residual_norm_fuse.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* ---- hand-built patterns ---- */

enum {
    K_RESID,        /* out = Mul(h, c) + y: h read again (dH) */
    K_NORM_ONLY,    /* out = y: h read by the norm only (post-LN) */
    K_NO_BIAS,      /* LayerNormalization(h, w) */
    K_TWO_DIMS,     /* axis 1 over [B, T, D], Scale and Bias [T, D] */
    K_H_OUTPUT,     /* h also a graph output */
    K_EPS,          /* epsilon 1e-3 */
    K_POS_B,        /* b [1, T, D]: a position embedding */
    K_POS_A,        /* a [T, D], b [B, T, D]: the repeated addend first */
    K_ROW_B,        /* b [D]: the same row added to every row */
    K_MID_BCAST,    /* b [B, 1, D]: not fused */
    K_BCAST_SCALE,  /* Scale [1]: not fused */
    K_BIAS_SHAPE,   /* Scale [D], Bias [1, D]: not fused */
    K_MEAN_OUT,     /* the Mean output read: not fused */
    K_PARALLEL,     /* y2 = LayerNormalization(h, W2, Bias2) too: both norms fused (Y2) */
    K_PAR_NO_BIAS,  /* the same, the first norm without Bias, y2 = LayerNormalization(h, W2) */
    K_PAR_EPS,      /* the second norm of another epsilon: only the first fused */
    K_RESHAPE,      /* v = Reshape(h) to [B T, D] before the norm (OPT), h read by it only: fused */
    K_RESHAPE_READ  /* the same with h read again: not fused */
};

#define PB 2
#define PT 3
#define PD 8

static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t dx[3] = {PB, PT, PD}, dtd[2] = {PT, PD}, d1td[3] = {1, PT, PD}, db1d[3] = {PB, 1, PD};
    const int64_t dd[1] = {PD}, d1d[2] = {1, PD}, d1[1] = {1};
    const int a = kind == K_POS_A ? fr_gc_add_input(g, &r, "A", FR_F32, 2, dtd, NULL)
                                  : fr_gc_add_input(g, &r, "A", FR_F32, 3, dx, NULL);
    const int b = kind == K_POS_B       ? fr_gc_add_input(g, &r, "B", FR_F32, 3, d1td, NULL)
                  : kind == K_ROW_B     ? fr_gc_add_input(g, &r, "B", FR_F32, 1, dd, NULL)
                  : kind == K_MID_BCAST ? fr_gc_add_input(g, &r, "B", FR_F32, 3, db1d, NULL)
                                        : fr_gc_add_input(g, &r, "B", FR_F32, 3, dx, NULL);
    const int w = kind == K_TWO_DIMS      ? fr_gc_add_input(g, &r, "W", FR_F32, 2, dtd, NULL)
                  : kind == K_BCAST_SCALE ? fr_gc_add_input(g, &r, "W", FR_F32, 1, d1, NULL)
                                          : fr_gc_add_input(g, &r, "W", FR_F32, 1, dd, NULL);
    const int c0 = kind == K_TWO_DIMS     ? fr_gc_add_input(g, &r, "Bias", FR_F32, 2, dtd, NULL)
                   : kind == K_BIAS_SHAPE ? fr_gc_add_input(g, &r, "Bias", FR_F32, 2, d1d, NULL)
                                          : fr_gc_add_input(g, &r, "Bias", FR_F32, 1, dd, NULL);
    int c = fr_gc_add_input(g, &r, "C", FR_F32, 3, dx, NULL);
    const int h0 = fr_gc_op1(g, "Add", 2, (int[]){a, b});
    int h = h0;
    if (kind == K_RESHAPE || kind == K_RESHAPE_READ) {
        const int64_t two = 2, flat[2] = {PB * PT, PD};
        h = fr_gc_op1(g, "Reshape", 2, (int[]){h0, fr_gc_add_input(g, NULL, "flat", FR_I64, 1, &two, flat)});
    }
    int y[2];
    const int nid = fr_gc_node(g, "LayerNormalization", "", kind == K_NO_BIAS || kind == K_PAR_NO_BIAS ? 2 : 3,
                               (int[]){h, w, c0},
                               kind == K_MEAN_OUT ? 2 : 1, y);
    if (kind == K_TWO_DIMS) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
    if (kind == K_EPS) FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "epsilon", 1e-3f));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    if (kind == K_H_OUTPUT) FR_ASSERT_OK(fr_graph_mark_output(g, h));
    if (kind == K_MEAN_OUT) FR_ASSERT_OK(fr_graph_mark_output(g, y[1]));
    if (h != h0) { /* C as the flattened sum */
        const int64_t two = 2, flat[2] = {PB * PT, PD};
        c = fr_gc_op1(g, "Reshape", 2, (int[]){c, fr_gc_add_input(g, NULL, "flat_c", FR_I64, 1, &two, flat)});
    }
    int out =
        kind == K_NORM_ONLY ? y[0] : fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){h, c}), y[0]});
    if (kind == K_RESHAPE_READ) FR_ASSERT_OK(fr_graph_mark_output(g, h0));
    if (kind >= K_PARALLEL) { /* the parallel block's second norm, read after the first */
        const int w2 = fr_gc_add_input(g, &r, "W2", FR_F32, 1, dd, NULL);
        const int b2 = fr_gc_add_input(g, &r, "Bias2", FR_F32, 1, dd, NULL);
        int y2;
        const int n2 = fr_gc_node(g, "LayerNormalization", "", kind == K_PAR_NO_BIAS ? 2 : 3, (int[]){h, w2, b2}, 1, &y2);
        if (kind == K_PAR_EPS) FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[n2], "epsilon", 1e-3f));
        FR_ASSERT_OK(fr_node_infer(g, n2));
        out = fr_gc_op1(g, "Add", 2, (int[]){out, fr_gc_op1(g, "Mul", 2, (int[]){y2, c})});
    }
    FR_ASSERT_OK(fr_graph_mark_output(g, out));
}

static void check_kind(int kind, int want)
{
    static const char *const wrt[6] = {"A", "B", "W", "Bias", "W2", "Bias2"}, *const wrt_nb[5] = {"A", "B", "W", "W2",
                                                                                                  "Bias2"};
    if (kind == K_NO_BIAS || kind == K_PAR_NO_BIAS)
        fr_ft_check_pattern(build, kind, 18, fr_fuse_residual_norm, want, kind == K_NO_BIAS ? 3 : 4, wrt_nb, 0.0);
    else
        fr_ft_check_pattern(build, kind, 18, fr_fuse_residual_norm, want, kind >= K_PARALLEL ? 6 : 4, wrt, 0.0);
}

/* the parallel patterns: both norms in one AddLayerNorm (Y2) and one AddLayerNormGrad, or not */
static void check_parallel(int kind, int want_y2)
{
    check_kind(kind, 1);
    fr_graph *g = fr_gc_new_graph(18);
    build(g, 7, kind);
    int n = -1;
    FR_ASSERT_OK(fr_fuse_residual_norm(g, &n));
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(count_op(g, "LayerNormalization"), !want_y2);
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "AddLayerNorm") == 0) CU_ASSERT_EQUAL(g->nodes[i].n_outputs, 2 + want_y2);
    if (!want_y2) { /* the fast path names the norm left */
        fr_slow_report r;
        FR_ASSERT_OK(fr_fast_path_check(g, &r));
        CU_ASSERT_EQUAL(r.n_slow, 1);
        CU_ASSERT(r.n_kinds == 1 && strstr(r.kinds[0].why, "did not take it") != NULL);
        fr_slow_report_free(&r);
    }
    fr_graph_free(g);
}

static void test_parallel(void)
{
    check_parallel(K_PARALLEL, 1);
    check_parallel(K_PAR_NO_BIAS, 1);
    check_parallel(K_PAR_EPS, 0);
}

static void test_fused(void)
{
    static const int kinds[] = {K_RESID, K_NORM_ONLY, K_NO_BIAS, K_TWO_DIMS, K_H_OUTPUT,
                                K_EPS,   K_POS_B,     K_POS_A,   K_ROW_B,    K_RESHAPE};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) check_kind(kinds[i], 1);
}

static void test_unfused(void)
{
    static const int kinds[] = {K_MID_BCAST, K_BCAST_SCALE, K_BIAS_SHAPE, K_RESHAPE_READ};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) check_kind(kinds[i], 0);
    /* (the Mean output has no gradient rule: the forward only) */
    fr_graph *g = fr_gc_new_graph(18);
    build(g, 7, K_MEAN_OUT);
    int n = -1;
    FR_ASSERT_OK(fr_fuse_residual_norm(g, &n));
    CU_ASSERT_EQUAL(n, 0);
    char why[300];
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "LayerNormalization") == 0) {
            CU_ASSERT_EQUAL(fr_residual_norm_why(g, i, why, sizeof why), 0);
            CU_ASSERT(strstr(why, "Mean") != NULL);
        }
    fr_graph_free(g);
}

/* ---- the gradient rule against central differences ---- */

/* h_read: H read again; bcast: B [T, D] repeated over the rows of A [R, T, D]; two: the second
 * norm (Scale2, Bias2: Y2 read too); only: which Ys the output reads (bit 0 Y, bit 1 Y2) */
static void gradcheck_case(int h_read, int bcast, int two, int only, int n_wrt, const char *what)
{
    fr_rng r = fr_test_rng("add_layer_norm_grad");
    fr_graph *g = fr_gc_new_graph(18);
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t dx[3] = {2, 3, 12}, dbt[2] = {3, 12}, dw[1] = {12};
    const int a = fr_gc_add_input(g, &r, "A", FR_F32, 3, dx, NULL);
    const int b = bcast ? fr_gc_add_input(g, &r, "B", FR_F32, 2, dbt, NULL) : fr_gc_add_input(g, &r, "B", FR_F32, 3, dx, NULL);
    const int w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL);
    const int bias = fr_gc_add_input(g, &r, "Bias", FR_F32, 1, dw, NULL);
    const int w2 = fr_gc_add_input(g, &r, "W2", FR_F32, 1, dw, NULL);
    const int bias2 = fr_gc_add_input(g, &r, "Bias2", FR_F32, 1, dw, NULL);
    const int c = fr_gc_add_input(g, &r, "C", FR_F32, 3, dx, NULL);
    int in[6] = {a, b, w, bias, w2, bias2}, outs[3];
    const int nid = fr_gc_node(g, "AddLayerNorm", FR_DOMAIN_FP8RUN, two ? 6 : 4, in, two ? 3 : 2, outs);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int out = only & 1 ? outs[1] : -1;
    if (two && (only & 2)) {
        const int y2 = fr_gc_op1(g, "Mul", 2, (int[]){outs[2], c});
        out = out < 0 ? y2 : fr_gc_op1(g, "Add", 2, (int[]){out, y2});
    }
    if (h_read) out = fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){outs[0], c}), out});
    fr_gc_check(g, &r, out, n_wrt, in, what, 1e-3);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "AddLayerNormGrad"), 1);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "LayerNormGrad"), 0);
    fr_graph_free(g);
}

static void test_gradcheck(void)
{
    gradcheck_case(1, 0, 0, 1, 4, "AddLayerNorm, H read again");
    gradcheck_case(0, 0, 0, 1, 4, "AddLayerNorm, Y only");
    gradcheck_case(1, 1, 0, 1, 4, "AddLayerNorm, B repeated over the rows");
    gradcheck_case(1, 0, 0, 1, 1, "AddLayerNorm, dA only (no dScale, dBias)");
    gradcheck_case(1, 0, 1, 3, 6, "AddLayerNorm with Y2, H read again");
    gradcheck_case(0, 1, 1, 3, 6, "AddLayerNorm with Y2, B repeated");
    gradcheck_case(1, 0, 1, 2, 6, "AddLayerNorm with Y2, only Y2 read");
    gradcheck_case(0, 0, 1, 1, 4, "AddLayerNorm with Y2, only Y read");
}

/* ---- the trainer on the dynamo exports ---- */

/* the trainer's float32 graph of a fixture, fused or not */
static fr_trainer *hf_trainer(const char *dir, int fuse)
{
    fr_graph *model = fr_ft_open_hf(dir);
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.fuse_residual_norm = fuse;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    fr_graph_free(model);
    return t;
}

static const fr_node *producer(const fr_graph *g, int v)
{
    return v >= 0 && g->values[v].producer >= 0 ? &g->nodes[g->values[v].producer] : NULL;
}

/* fused: AddLayerNorm nodes; plain: LayerNormalization nodes left fused; no norm after an Add */
static void expect_hf(const char *dir, int fused, int plain)
{
    fr_trainer *t = hf_trainer(dir, 1);
    if (count_op(t->g, "AddLayerNorm") != fused || count_op(t->g, "LayerNormalization") != plain)
        printf("\n  %s: %d AddLayerNorm, %d LayerNormalization", dir, count_op(t->g, "AddLayerNorm"),
               count_op(t->g, "LayerNormalization"));
    CU_ASSERT_EQUAL(count_op(t->g, "AddLayerNorm"), fused);
    CU_ASSERT_EQUAL(count_op(t->g, "AddLayerNormGrad"), fused);
    CU_ASSERT_EQUAL(count_op(t->g, "LayerNormalization"), plain);
    for (int i = 0; i < t->g->n_nodes; i++) { /* and no norm reads an Add's sum (past a Reshape) */
        const fr_node *n = &t->g->nodes[i];
        if (n->dead || strcmp(n->op_type, "LayerNormalization") != 0) continue;
        const fr_node *p = producer(t->g, n->inputs[0]);
        if (p && strcmp(p->op_type, "Reshape") == 0) p = producer(t->g, p->inputs[0]);
        CU_ASSERT(!p || strcmp(p->op_type, "Add") != 0);
    }
    fr_trainer_free(t);
    t = hf_trainer(dir, 0);
    CU_ASSERT_EQUAL(count_op(t->g, "AddLayerNorm"), 0);
    fr_trainer_free(t);
}

static void test_hf_counts(void)
{
    /* GPT-2 (2 layers): the embedding sum (position embedding repeated over the batch), the two
       residual sums of each layer but the last's second, which the final norm reads: 5 */
    expect_hf("gpt2_op18_static", 5, 0);
    expect_hf("gpt2_op23_static", 5, 0);
    expect_hf("gpt2_op18_dynamic", 5, 0);
    expect_hf("gpt2_op23_dynamic", 5, 0);
    /* BERT (2 layers, post-LN): the embedding sum and the 2 per layer; the MLM head's norm reads a
       GELU */
    expect_hf("bert_op18_static", 5, 1);
    expect_hf("bert_op23_static", 5, 1);
    /* GPT-NeoX (2 layers, parallel residual): layer 0's two norms read the embedding, layer 1's
       both read the first sum (one AddLayerNorm with Y2), the final norm the second sum */
    expect_hf("gpt_neox_op18_static", 2, 2);
    expect_hf("gpt_neox_op23_static", 2, 2);
    expect_hf("gpt_neox_op18_dynamic", 2, 2);
    expect_hf("gpt_neox_op23_dynamic", 2, 2);
    /* OPT (2 layers): the embedding sum, then the residual stream flattened to [N T, D] before each
       norm (a Reshape between the Add and the norm): all 5 */
    expect_hf("opt_op18_static", 5, 0);
    expect_hf("opt_op23_static", 5, 0);
    /* Falcon, Phi (parallel blocks, one norm each): layer 0's reads the embedding */
    expect_hf("falcon_op18_static", 2, 1);
    expect_hf("phi_op18_static", 2, 1);
    expect_hf("phi_op23_static", 2, 1);
    /* Starcoder2 (2 layers, pre-LN): the first reads the embedding */
    expect_hf("starcoder2_op18_static", 4, 1);
    expect_hf("starcoder2_op23_static", 4, 1);
    expect_hf("starcoder2_op18_dynamic", 4, 1);
}

static void test_hf_losses(void)
{
    static const char *const dirs[] = {"gpt2_op18_static",   "bert_op18_static", "gpt_neox_op18_static",
                                       "opt_op18_static",    "phi_op18_static",  "falcon_op18_static",
                                       "starcoder2_op18_static"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_graph *model = fr_ft_open_hf(dirs[i]);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        double fused[FR_FT_STEPS], plain[FR_FT_STEPS];
        o.fuse_residual_norm = 1;
        fr_ft_train_losses(model, &o, fused, NULL);
        o.fuse_residual_norm = 0;
        fr_ft_train_losses(model, &o, plain, NULL);
        fr_ft_expect_same_losses(dirs[i], fused, plain, 1e-6);
        fr_graph_free(model);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Add + LayerNorm fused: y, da, db, dScale, dBias bit for bit (10 patterns)", test_fused},
        {"middle-dim broadcast, broadcast Scale, Bias shape, sum read past its Reshape, Mean output: not fused",
         test_unfused},
        {"parallel block: the sum's second LayerNorm fused too (Y2), bit for bit; other epsilon not", test_parallel},
        {"AddLayerNorm's gradient rule vs central differences", test_gradcheck},
        {"trainer, GPT-2 / BERT / GPT-NeoX / OPT / Falcon / Phi / Starcoder2: fused, no norm after an Add", test_hf_counts},
        {"trainer, 7 LayerNorm exports: 20 steps' losses fused == unfused (1e-6)", test_hf_losses},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"add_layer_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
