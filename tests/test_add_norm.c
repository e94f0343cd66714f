/* The residual Add + RMSNorm fusion: ops/add_norm.c (AddRMSNorm, AddRMSNormGrad) and
 * passes/residual_norm_fuse.c.
 *  - hand-built graphs, fused vs unfused (fr_ft_check_pattern, fresh random inputs): h read again
 *    after the norm (the backward's dH input), h read by the norm only, two normalized dims
 *    (axis 1, Scale [T, D]), h a graph output, ONNX and ai.fp8run RMSNormalization, eps: y and
 *    the gradients of a, b, w equal to 1e-7 relative L2 (the ops round as the unfused ones do,
 *    so they are in fact bit-identical); an Add with broadcast, a broadcast Scale stay unfused;
 *  - the gradient rule against central differences (float32 kernels: 1e-3 relative L2, the
 *    float32 finite-difference noise), with and without a gradient into H, and with only A
 *    differentiated (dScale output empty);
 *  - the trainer on a generated Llama (3 layers): 2 AddRMSNorm per layer (the first norm reads
 *    the embedding: RMSNormalization), as many AddRMSNormGrad, 5 Adds gone from the backward
 *    (the last sum is read by the final norm only: it had none);
 *    20 training steps' losses equal to the unfused ones within 1e-6; --no-fuse-residual-norm
 *    and --recompute keep the Adds;
 *  - the trainer on the dynamo Llama export (tests/fixtures/hf): 4 of its 5 RMSNorms fused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "passes/residual_norm_fuse.h"
#include "runtime/train/llama_gen.h"
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
    K_RESID,       /* out = Mul(h, c) + y: h read again (dH) */
    K_NORM_ONLY,   /* out = y: h read by the norm only */
    K_TWO_DIMS,    /* axis 1 over [B, T, D], Scale [T, D] */
    K_H_OUTPUT,    /* h also a graph output */
    K_FP8RUN,      /* ai.fp8run::RMSNormalization (passes/rmsnorm_fuse.c's), eps 1e-6 */
    K_BCAST_ADD,   /* b of shape [D]: not fused */
    K_BCAST_SCALE  /* Scale [1]: not fused */
};

#define PB 2
#define PT 3
#define PD 8

static void build(fr_graph *g, uint64_t seed, int kind)
{
    fr_rng r = {seed};
    const int64_t dx[3] = {PB, PT, PD}, dtd[2] = {PT, PD}, dd[1] = {PD}, d1[1] = {1};
    const int a = fr_gc_add_input(g, &r, "A", FR_F32, 3, dx, NULL);
    const int b = kind == K_BCAST_ADD ? fr_gc_add_input(g, &r, "B", FR_F32, 1, dd, NULL)
                                      : fr_gc_add_input(g, &r, "B", FR_F32, 3, dx, NULL);
    const int w = kind == K_TWO_DIMS      ? fr_gc_add_input(g, &r, "W", FR_F32, 2, dtd, NULL)
                  : kind == K_BCAST_SCALE ? fr_gc_add_input(g, &r, "W", FR_F32, 1, d1, NULL)
                                          : fr_gc_add_input(g, &r, "W", FR_F32, 1, dd, NULL);
    const int c = fr_gc_add_input(g, &r, "C", FR_F32, 3, dx, NULL);
    const int h = fr_gc_op1(g, "Add", 2, (int[]){a, b});
    int y;
    const int fp8 = kind == K_FP8RUN;
    if (fp8) FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int nid = fr_gc_node(g, "RMSNormalization", fp8 ? FR_DOMAIN_FP8RUN : "", 2, (int[]){h, w}, 1, &y);
    if (kind == K_TWO_DIMS) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", 1));
    if (fp8) FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "epsilon", 1e-6f));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    if (kind == K_H_OUTPUT) FR_ASSERT_OK(fr_graph_mark_output(g, h));
    const int out = kind == K_NORM_ONLY ? y : fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){h, c}), y});
    FR_ASSERT_OK(fr_graph_mark_output(g, out));
}

static void check_kind(int kind, int want)
{
    static const char *const wrt[3] = {"A", "B", "W"};
    fr_ft_check_pattern(build, kind, 23, fr_fuse_residual_norm, want, 3, wrt, 1e-7);
}

static void test_resid(void) { check_kind(K_RESID, 1); }
static void test_norm_only(void) { check_kind(K_NORM_ONLY, 1); }
static void test_two_dims(void) { check_kind(K_TWO_DIMS, 1); }
static void test_h_output(void) { check_kind(K_H_OUTPUT, 1); }
static void test_fp8run_domain(void) { check_kind(K_FP8RUN, 1); }
static void test_bcast_add(void) { check_kind(K_BCAST_ADD, 0); }
static void test_bcast_scale(void) { check_kind(K_BCAST_SCALE, 0); }

/* ---- the gradient rule against central differences ---- */

static void gradcheck_case(int h_read, int n_wrt, const char *what)
{
    fr_rng r = fr_test_rng("add_norm_grad");
    fr_graph *g = fr_gc_new_graph(23);
    FR_ASSERT_OK(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    const int64_t dx[2] = {5, 12}, dw[1] = {12};
    const int a = fr_gc_add_input(g, &r, "A", FR_F32, 2, dx, NULL);
    const int b = fr_gc_add_input(g, &r, "B", FR_F32, 2, dx, NULL);
    const int w = fr_gc_add_input(g, &r, "W", FR_F32, 1, dw, NULL);
    const int c = fr_gc_add_input(g, &r, "C", FR_F32, 2, dx, NULL);
    int in[3] = {a, b, w}, outs[2];
    const int nid = fr_gc_node(g, "AddRMSNorm", FR_DOMAIN_FP8RUN, 3, in, 2, outs);
    FR_ASSERT_OK(fr_node_infer(g, nid));
    const int out = h_read ? fr_gc_op1(g, "Add", 2, (int[]){fr_gc_op1(g, "Mul", 2, (int[]){outs[0], c}), outs[1]})
                           : outs[1];
    fr_gc_check(g, &r, out, n_wrt, in, what, 1e-3);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "AddRMSNormGrad"), 1);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "RMSNormGrad"), 0);
    fr_graph_free(g);
}

static void test_gradcheck(void)
{
    gradcheck_case(1, 3, "AddRMSNorm, H read again");
    gradcheck_case(0, 3, "AddRMSNorm, Y only");
    gradcheck_case(1, 1, "AddRMSNorm, dA only (no dScale)");
}

/* ---- the trainer ---- */

static void llama(fr_graph **g)
{
    fr_llama_config c = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 11};
    FR_ASSERT_OK(fr_llama_generate(&c, g));
}

static void expect_counts(const fr_graph *model, int fuse, const char *recompute, int fused, int plain_norms)
{
    fr_train_options o;
    fr_ft_train_options(&o);
    o.fuse_residual_norm = fuse;
    if (recompute) o.recompute = recompute;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s", fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    CU_ASSERT_EQUAL(count_op(t->g, "AddRMSNorm"), fused);
    CU_ASSERT_EQUAL(count_op(t->g, "AddRMSNormGrad"), fused);
    if (plain_norms >= 0) { /* (recompute copies norms) */
        CU_ASSERT_EQUAL(count_op(t->g, "RMSNormalization"), plain_norms);
        CU_ASSERT_EQUAL(count_op(t->g, "RMSNormGrad"), plain_norms);
    }
    fr_trainer_free(t);
}

static void test_trainer_llama(void)
{
    fr_graph *g = NULL;
    llama(&g);
    /* 3 layers: 6 norms read a residual Add, the first reads the embedding, 7 in all */
    expect_counts(g, 1, NULL, 6, 1);
    expect_counts(g, 0, NULL, 0, 7);
    expect_counts(g, 1, "attention", 0, -1);
    /* the backward's Adds of the residual gradients go with the forward's Adds */
    fr_train_options o;
    fr_ft_train_options(&o);
    int adds[2];
    for (int f = 0; f < 2; f++) {
        o.fuse_residual_norm = f;
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        adds[f] = count_op(t->g, "Add");
        fr_trainer_free(t);
    }
    if (adds[0] - adds[1] != 11) printf("\n  Adds: %d unfused, %d fused", adds[0], adds[1]);
    CU_ASSERT_EQUAL(adds[0] - adds[1], 11); /* 6 forward, 5 backward (the last sum is the final norm's only) */
    fr_graph_free(g);
}

static void test_trainer_losses(void)
{
    fr_graph *g = NULL;
    llama(&g);
    fr_train_options o;
    fr_ft_train_options(&o);
    double fused[FR_FT_STEPS], plain[FR_FT_STEPS];
    o.fuse_residual_norm = 1;
    fr_ft_train_losses(g, &o, fused, NULL);
    o.fuse_residual_norm = 0;
    fr_ft_train_losses(g, &o, plain, NULL);
    fr_ft_expect_same_losses("fp32 residual norm", fused, plain, 1e-6);
    fr_graph_free(g);
}

static void test_trainer_dynamo(void)
{
    fr_graph *model = fr_ft_open_hf("llama_op18_static");
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s", fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    /* 2 layers: the first norm reads the embedding */
    CU_ASSERT_EQUAL(count_op(t->g, "AddRMSNorm"), 4);
    CU_ASSERT_EQUAL(count_op(t->g, "AddRMSNormGrad"), 4);
    CU_ASSERT_EQUAL(count_op(t->g, "RMSNormalization"), 1);
    fr_trainer_free(t);
    fr_graph_free(model);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"h read again: fused, same y, da, db, dw", test_resid},
        {"h read by the norm only: fused, same y, da, db, dw", test_norm_only},
        {"two normalized dims: fused, same y, da, db, dw", test_two_dims},
        {"h a graph output: fused, same y, da, db, dw", test_h_output},
        {"ai.fp8run::RMSNormalization: fused, same y, da, db, dw", test_fp8run_domain},
        {"Add with broadcast: not fused", test_bcast_add},
        {"broadcast Scale: not fused", test_bcast_scale},
        {"AddRMSNorm's gradient rule vs central differences", test_gradcheck},
        {"trainer, generated Llama: fused nodes, backward Adds gone, off switches", test_trainer_llama},
        {"trainer, generated Llama: losses fused == unfused (1e-6)", test_trainer_losses},
        {"trainer, dynamo Llama export: 4 of 5 norms fused", test_trainer_dynamo},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"add_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
