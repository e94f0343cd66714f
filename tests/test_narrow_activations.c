/* Narrowed activations (passes/narrow_activations.c, Linear's y_dtype, SwiGLU on bfloat16):
 *  - Linear with y_dtype bfloat16 (bf16 and fp8 precision, CPU): Y equals the float32 Linear's
 *    Y rounded to bfloat16, bit for bit (one rounding of the same GEMM result);
 *  - SwiGLU / SwiGLUGrad on bfloat16 gate/up equal the float32 ops on the same (widened) values
 *    bit for bit, both forms; outputs float32; a float64 dy next to bf16 gate/up is refused
 *    (a bfloat16 dy is accepted: tests/test_swiglu_bf16.c);
 *  - AttentionQKV / AttentionQKVGrad on bfloat16 X equal the float32 ops on the same (widened)
 *    values bit for bit (O, LSE, dX float32; RoPE half, interleaved, none; causal and not);
 *  - the pass on the generated Llama: two Linears per layer narrowed in bf16 and fp8 (the
 *    fused Q/K/V read by AttentionQKV, the gate/up read by SwiGLU), none in fp32 or with
 *    --no-narrow-activations; the trainer's SwiGLUGrad and AttentionQKVGrad read the bf16
 *    values (their gradients: test_narrow_gradients); a Linear read by
 *    anything else, stays;
 *  - training: the first two fp8 losses with and without narrowing within 1e-3 / 3e-3 (the
 *    rounding alone), the 20-step run within 5e-2 (the trajectories spread), and both train;
 *  - bad attributes are errors naming the node;
 *  - the dynamo exports of Llama, Qwen2, Mistral, Phi-3 and Gemma (opsets 18, 23) narrow one
 *    gate/up Linear per layer in fp8, and the fused Q/K/V Linear where AttentionQKV reads it
 *    directly (Qwen2's biased one too); GPT-2 (GELU MLP) none read by SwiGLU / AttentionQKV
 *    (its GELU MLP: test_narrow_gelu). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/op_harness.h"
#include "ops/linear.h"
#include "passes/narrow_activations.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 11};

/* ---- Linear y_dtype ---- */

static fr_tensor *run_linear(fr_tensor *x, fr_tensor *w, const char *prec, const char *recipe, int y_bf16)
{
    tnode t;
    fr_tensor *ins[2] = {x, w};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 2, ins, 0u, 1);
    TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "precision", prec);
    TN_ATTR(&t, string, "recipe", recipe);
    if (y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

static void test_linear_y_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_linear");
    static const int64_t shapes[][3] = {{5, 7, 3}, {16, 32, 48}, {33, 20, 17}}; /* M, K, N */
    static const char *const precs[][2] = {{"bf16", "delayed"}, {"fp8", "current"}, {"fp8", "block"}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t p = 0; p < sizeof precs / sizeof precs[0]; p++) {
            int64_t xd[2] = {shapes[s][0], shapes[s][1]}, wd[2] = {shapes[s][2], shapes[s][1]};
            fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0.0, 1.0), *w = tt_randn(&r, FR_F32, 2, wd, 0.0, 0.5);
            fr_tensor *yf = run_linear(x, w, precs[p][0], precs[p][1], 0);
            fr_tensor *yb = run_linear(x, w, precs[p][0], precs[p][1], 1);
            CU_ASSERT_EQUAL_FATAL(yb->dtype, FR_BF16);
            CU_ASSERT_EQUAL(yf->dtype, FR_F32);
            int64_t bad = 0, n = fr_tensor_numel(yf);
            for (int64_t i = 0; i < n; i++)
                bad += ((const uint16_t *)yb->data)[i] != fr_f32_to_bf16(((const float *)yf->data)[i]);
            if (bad) printf("\n  %s/%s case %zu: %lld of %lld differ", precs[p][0], precs[p][1], s, (long long)bad, (long long)n);
            CU_ASSERT_EQUAL(bad, 0);
            fr_tensor_free(x);
            fr_tensor_free(w);
            fr_tensor_free(yf);
            fr_tensor_free(yb);
        }
}

static void test_linear_bad_attrs(void)
{
    fr_rng r = fr_test_rng("narrow_bad");
    int64_t xd[2] = {4, 8}, wd[2] = {6, 8};
    fr_tensor *x = tt_randn(&r, FR_F32, 2, xd, 0, 1), *w = tt_randn(&r, FR_F32, 2, wd, 0, 1);
    tnode t;
    fr_tensor *ins[2] = {x, w};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, 2, ins, 0u, 1);
    TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "y_dtype", "bfloat16"); /* precision fp32 (the default) */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("needs precision bf16 or fp8");
    TN_ATTR(&t, string, "y_dtype", "float16");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("y_dtype 'float16'");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(w);
}

/* ---- SwiGLU on bfloat16 ---- */

/* t's values rounded to bfloat16: the bf16 tensor and the float32 tensor of the same values */
static void bf16_pair(fr_tensor *t, fr_tensor **bf)
{
    *bf = tt_new(FR_BF16, t->rank, t->dims);
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        uint16_t h = fr_f32_to_bf16(((float *)t->data)[i]);
        ((uint16_t *)(*bf)->data)[i] = h;
        ((float *)t->data)[i] = fr_bf16_to_f32(h);
    }
}

static void run_swiglu(const char *op, const char *act, int n_in, fr_tensor **ins, int n_out, fr_tensor **outs)
{
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, n_in, ins, 0u, n_out);
    if (act) TN_ATTR(&t, string, "activation", act);
    FR_ASSERT_OK(tn_run(&t));
    for (int o = 0; o < n_out; o++) {
        outs[o] = t.out[o];
        t.out[o] = NULL;
    }
    tn_free(&t);
}

static int64_t count_diff(const fr_tensor *a, const fr_tensor *b)
{
    CU_ASSERT_EQUAL_FATAL(a->dtype, FR_F32);
    CU_ASSERT_EQUAL_FATAL(b->dtype, FR_F32);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(a), fr_tensor_numel(b));
    return memcmp(a->data, b->data, (size_t)fr_tensor_numel(a) * 4) != 0;
}

static void test_swiglu_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_swiglu");
    static const char *const acts[3] = {NULL, "gelu_tanh", "gelu"};
    for (int a = 0; a < 3; a++)
        for (int form = 1; form <= 2; form++) {
            int64_t d[2] = {7, 10}, d2[2] = {7, form == 1 ? 20 : 10};
            fr_tensor *f[2] = {tt_randn(&r, FR_F32, 2, d2, 0, 3), form == 2 ? tt_randn(&r, FR_F32, 2, d, 0, 1) : NULL};
            fr_tensor *b[2] = {NULL, NULL}, *dy = tt_randn(&r, FR_F32, 2, d, 0, 1);
            for (int k = 0; k < form; k++) bf16_pair(f[k], &b[k]);
            fr_tensor *yf, *yb, *gf[2] = {NULL, NULL}, *gb[2] = {NULL, NULL};
            run_swiglu("SwiGLU", acts[a], form, f, 1, &yf);
            run_swiglu("SwiGLU", acts[a], form, b, 1, &yb);
            CU_ASSERT_EQUAL(count_diff(yb, yf), 0);
            fr_tensor *fin[3] = {f[0], f[1], NULL}, *bin[3] = {b[0], b[1], NULL};
            fin[form] = dy;
            bin[form] = dy;
            run_swiglu("SwiGLUGrad", acts[a], form + 1, fin, form == 1 ? 1 : 2, gf);
            run_swiglu("SwiGLUGrad", acts[a], form + 1, bin, form == 1 ? 1 : 2, gb);
            for (int k = 0; k < (form == 1 ? 1 : 2); k++) CU_ASSERT_EQUAL(count_diff(gb[k], gf[k]), 0);
            for (int k = 0; k < 2; k++) {
                fr_tensor_free(f[k]);
                fr_tensor_free(b[k]);
                fr_tensor_free(gf[k]);
                fr_tensor_free(gb[k]);
            }
            fr_tensor_free(dy);
            fr_tensor_free(yf);
            fr_tensor_free(yb);
        }
    /* a float64 dy next to bfloat16 gate_up is refused: the math is float32 */
    int64_t d2[2] = {3, 8}, d[2] = {3, 4};
    fr_tensor *g32 = tt_randn(&r, FR_F32, 2, d2, 0, 1), *gb, *db = tt_randn(&r, FR_F64, 2, d, 0, 1);
    bf16_pair(g32, &gb);
    tnode t;
    fr_tensor *ins[2] = {gb, db};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SwiGLUGrad", 1, 2, ins, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("expected float32");
    tn_free(&t);
    fr_tensor_free(g32);
    fr_tensor_free(gb);
    fr_tensor_free(db);
}

/* ---- AttentionQKV on bfloat16 X ---- */

typedef struct qkv_case {
    int64_t B, T, Hq, Hk, D;
    int rope, causal; /* rope 0 none, 1 half, 2 interleaved */
} qkv_case;

static void qkv_attrs(tnode *t, const qkv_case *c)
{
    TN_ATTR(t, int, "heads", c->Hq);
    TN_ATTR(t, int, "kv_heads", c->Hk);
    TN_ATTR(t, int, "head_dim", c->D);
    if (c->causal) TN_ATTR(t, int, "causal", 1);
    if (c->rope == 2) TN_ATTR(t, int, "interleaved", 1);
}

/* One op on X (float32 or its bf16 twin) and the float32 rest: its outputs, owned by the caller */
static void run_qkv_op(const qkv_case *c, const char *op, int n_in, fr_tensor **ins, int n_out, fr_tensor **outs)
{
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, n_in, ins, 0u, n_out);
    qkv_attrs(&t, c);
    FR_ASSERT_OK(tn_run(&t));
    for (int o = 0; o < n_out; o++) {
        outs[o] = t.out[o];
        t.out[o] = NULL;
    }
    tn_free(&t);
}

static void test_attention_qkv_bf16(void)
{
    fr_rng r = fr_test_rng("narrow_attention_qkv");
    static const qkv_case cases[] = {{2, 9, 4, 2, 8, 1, 1}, {1, 12, 2, 2, 6, 2, 0}, {2, 7, 3, 1, 4, 0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const qkv_case *c = &cases[i];
        const int64_t xd[3] = {c->B, c->T, (c->Hq + 2 * c->Hk) * c->D}, td[2] = {c->T, c->D};
        fr_tensor *xf = tt_randn(&r, FR_F32, 3, xd, 0, 1), *xb;
        bf16_pair(xf, &xb);
        fr_tensor *cs = c->rope ? tt_randn(&r, FR_F32, 2, td, 0, 1) : NULL, *sn = c->rope ? tt_randn(&r, FR_F32, 2, td, 0, 1) : NULL;
        const int nf = c->rope ? 3 : 1, nb = c->rope ? 6 : 4;
        fr_tensor *of[2], *ob[2];
        run_qkv_op(c, "AttentionQKV", nf, (fr_tensor *[]){xf, cs, sn}, 2, of);
        run_qkv_op(c, "AttentionQKV", nf, (fr_tensor *[]){xb, cs, sn}, 2, ob);
        for (int k = 0; k < 2; k++) CU_ASSERT_EQUAL(count_diff(ob[k], of[k]), 0); /* O, LSE */
        fr_tensor *dO = tt_randn(&r, FR_F32, of[0]->rank, of[0]->dims, 0, 1), *gf, *gb;
        run_qkv_op(c, "AttentionQKVGrad", nb, (fr_tensor *[]){xf, of[0], of[1], dO, cs, sn}, 1, &gf);
        run_qkv_op(c, "AttentionQKVGrad", nb, (fr_tensor *[]){xb, of[0], of[1], dO, cs, sn}, 1, &gb);
        CU_ASSERT_EQUAL(count_diff(gb, gf), 0); /* dX float32 */
        for (int k = 0; k < 2; k++) {
            fr_tensor_free(of[k]);
            fr_tensor_free(ob[k]);
        }
        fr_tensor *all[7] = {xf, xb, cs, sn, dO, gf, gb};
        for (int k = 0; k < 7; k++) fr_tensor_free(all[k]);
    }
    /* bfloat16 tables next to bfloat16 X are refused: the tables are float32 */
    const int64_t xd[3] = {1, 4, 16}, td[2] = {4, 4};
    fr_tensor *xf = tt_randn(&r, FR_F32, 3, xd, 0, 1), *cf = tt_randn(&r, FR_F32, 2, td, 0, 1), *xb, *cb;
    bf16_pair(xf, &xb);
    bf16_pair(cf, &cb);
    const qkv_case c = {1, 4, 2, 1, 4, 1, 0};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AttentionQKV", 1, 3, (fr_tensor *[]){xb, cb, cb}, 0u, 2);
    qkv_attrs(&t, &c);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("tables must be float32");
    tn_free(&t);
    fr_tensor *all[4] = {xf, cf, xb, cb};
    for (int k = 0; k < 4; k++) fr_tensor_free(all[k]);
}

/* ---- the pass in the trainer ---- */

/* The Y of Linear nd is read by SwiGLU (or the SwiGLUQuantize it became under fp8) or
 * AttentionQKV (the Linears this rule narrows; the producers' narrowing and the gradients' are
 * test_narrow_gradients') */
static int read_by_fused(const fr_graph *g, const fr_node *nd)
{
    for (int j = 0; j < g->n_nodes; j++) {
        const fr_node *r = &g->nodes[j];
        if (r->dead || (strcmp(r->op_type, "SwiGLU") != 0 && strcmp(r->op_type, "SwiGLUQuantize") != 0 &&
                        strcmp(r->op_type, "AttentionQKV") != 0))
            continue;
        for (int k = 0; k < r->n_inputs; k++)
            if (r->inputs[k] == nd->outputs[0]) return 1;
    }
    return 0;
}

/* bf16 Linears read by SwiGLU / AttentionQKV; *swiglug_bf16, *qkvg_bf16: the gradients reading a bf16 input */
static int count_bf16_linears(const fr_graph *g, int *swiglug_bf16, int *qkvg_bf16)
{
    int n = 0;
    *swiglug_bf16 = 0, *qkvg_bf16 = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        if (strcmp(nd->op_type, "Linear") == 0 && g->values[nd->outputs[0]].dtype == FR_BF16 && read_by_fused(g, nd)) {
            fr_lin_attrs a;
            FR_ASSERT_OK(fr_lin_read_attrs(nd, &a));
            CU_ASSERT(a.y_bf16);
            n++;
        }
        if ((strcmp(nd->op_type, "SwiGLUGrad") == 0 || strcmp(nd->op_type, "SwiGLUGradQuantize") == 0) &&
            g->values[nd->inputs[0]].dtype == FR_BF16)
            (*swiglug_bf16)++;
        if (strcmp(nd->op_type, "AttentionQKVGrad") == 0 && g->values[nd->inputs[0]].dtype == FR_BF16) (*qkvg_bf16)++;
    }
    return n;
}

static void check_trainer(const char *prec, int narrow, int want)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = prec;
    o.narrow_activations = narrow;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    int sg = -1, qg = -1, n = count_bf16_linears(t->g, &sg, &qg);
    if (n != 2 * want) printf("\n  %s narrow=%d: %d bf16 Linears, want %d", prec, narrow, n, 2 * want);
    CU_ASSERT_EQUAL(n, 2 * want); /* Q/K/V and gate/up */
    CU_ASSERT_EQUAL(sg, want);    /* every layer's SwiGLUGrad reads its bf16 gate_up */
    CU_ASSERT_EQUAL(qg, want);    /* and its AttentionQKVGrad its bf16 Q/K/V */
    fr_trainer_free(t);
    fr_graph_free(model);
}

static void test_trainer_graphs(void)
{
    check_trainer("fp8", 1, (int)k_llama.layers);
    check_trainer("bf16", 1, (int)k_llama.layers);
    check_trainer("fp8", 0, 0);
    check_trainer("fp32", 1, 0);
}

/* bf16 Linears of a trainer graph: *with_copy of them save X's bf16 copy (Xq); returns those
 * whose X is bfloat16, each of which must save none, a weight gradient reading X itself */
static int bf16_x_linears(const fr_graph *g, int *with_copy)
{
    int n = 0;
    *with_copy = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        fr_lin_attrs a;
        if (nd->dead || strcmp(nd->op_type, "Linear") != 0 || fr_lin_read_attrs(nd, &a) != FR_OK ||
            a.prec != FR_LIN_BF16)
            continue;
        const int x = nd->inputs[FR_LIN_IN_X], xq = nd->n_outputs > FR_LIN_OUT_XQ ? nd->outputs[FR_LIN_OUT_XQ] : -1;
        *with_copy += xq >= 0;
        if (g->values[x].dtype != FR_BF16) continue;
        n++;
        CU_ASSERT_EQUAL(xq, -1);
        int gw_reads_x = 0;
        for (int j = 0; j < g->n_nodes; j++)
            if (!g->nodes[j].dead && strcmp(g->nodes[j].op_type, "LinearGradWeight") == 0 && g->nodes[j].inputs[0] == x)
                gw_reads_x = 1;
        CU_ASSERT(gw_reads_x);
    }
    return n;
}

static void test_bf16_copies(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = "bf16";
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    int copies = -1;
    /* O, gate/up, down and the next layer's Q/K/V read bfloat16 (AddRMSNorm's, SwiGLU's and the
     * attention's outputs), and the LM head (the final AddRMSNorm's): no copy saved. The first
     * layer's Q/K/V reads the first RMSNormalization's float32 output, rounded into its copy. */
    CU_ASSERT_EQUAL(bf16_x_linears(t->g, &copies), 4 * (int)k_llama.layers);
    CU_ASSERT_EQUAL(copies, 1);
    fr_trainer_free(t);
    /* not narrowed: every X stays float32, and the Linears that are its only reader save a copy */
    o.narrow_activations = 0;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    CU_ASSERT_EQUAL(bf16_x_linears(t->g, &copies), 0);
    CU_ASSERT_EQUAL(copies, 4 * (int)k_llama.layers + 1);
    /* narrowed after autodiff: the Xs it makes bfloat16 keep their copies, which the weight
     * gradients read */
    int n = -1, with_copy = 0, bf16_x = 0;
    FR_ASSERT_OK(fr_narrow_activations(t->g, &n));
    for (int i = 0; i < t->g->n_nodes; i++) {
        const fr_node *nd = &t->g->nodes[i];
        if (nd->dead || strcmp(nd->op_type, "Linear") != 0 || nd->n_outputs <= FR_LIN_OUT_XQ ||
            nd->outputs[FR_LIN_OUT_XQ] < 0)
            continue;
        with_copy++;
        bf16_x += t->g->values[nd->inputs[FR_LIN_IN_X]].dtype == FR_BF16;
    }
    CU_ASSERT(bf16_x > 0);
    CU_ASSERT_EQUAL(with_copy, 4 * (int)k_llama.layers + 1);
    fr_trainer_free(t);
    fr_graph_free(model);
}

static void test_losses(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    double on[FR_FT_STEPS], off[FR_FT_STEPS];
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = "fp8";
    fr_ft_train_losses(model, &o, on, NULL);
    o.narrow_activations = 0;
    fr_ft_train_losses(model, &o, off, NULL);
    /* the first losses see the rounding alone (measured 3.7e-5, 4.3e-4); later ones the two
       trajectories, which this short high-lr run spreads (measured up to 2.1e-2 by step 12) */
    CU_ASSERT(fabs(on[0] - off[0]) <= 1e-3 * fabs(off[0]));
    CU_ASSERT(fabs(on[1] - off[1]) <= 3e-3 * fabs(off[1]));
    fr_ft_expect_same_losses("fp8 narrowed", on, off, 5e-2);
    CU_ASSERT(on[FR_FT_STEPS - 1] < on[0]);
    fr_graph_free(model);
}

/* a gate/up Linear read by something besides SwiGLU stays float32 */
static void test_other_reader(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = "fp8";
    o.eval_only = 1;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    int sg, qg, before = count_bf16_linears(t->g, &sg, &qg);
    CU_ASSERT_EQUAL(before, 2 * (int)k_llama.layers);
    fr_trainer_free(t);
    /* again on a graph where each gate_up Linear's output is also a graph output: none narrowed */
    o.narrow_activations = 0;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    fr_graph *g = t->g;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (strcmp(g->nodes[i].op_type, "SwiGLU") == 0 || strcmp(g->nodes[i].op_type, "AttentionQKV") == 0))
            g->values[g->nodes[i].inputs[0]].flags |= FR_VAL_OUTPUT;
    int n = -1;
    FR_ASSERT_OK(fr_narrow_activations(g, &n)); /* narrows the producers (test_narrow_gradients), not these */
    CU_ASSERT_EQUAL(count_bf16_linears(g, &sg, &qg), 0);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (strcmp(g->nodes[i].op_type, "SwiGLU") == 0 || strcmp(g->nodes[i].op_type, "AttentionQKV") == 0))
            g->values[g->nodes[i].inputs[0]].flags &= ~FR_VAL_OUTPUT;
    FR_ASSERT_OK(fr_narrow_activations(g, &n));
    CU_ASSERT_EQUAL(n, 2 * (int)k_llama.layers);
    FR_ASSERT_OK(fr_narrow_activations(g, &n)); /* a second run finds nothing left */
    CU_ASSERT_EQUAL(n, 0);
    fr_trainer_free(t);
    fr_graph_free(model);
}

/* What users bring: the dynamo exports (opset 18 and 23) of the Llama-family fixtures narrow one
 * gate/up Linear per layer in fp8 (the fused SwiGLU reads it) and the unbiased Q/K/V projection
 * AttentionQKV reads (the dynamic export too: its mask is read as causal); GPT-2 none */
static void test_hf_exports(void)
{
    static const struct {
        const char *dir;
        int swiglu, qkv; /* layers with a narrowed gate/up, Q/K/V: the fixtures have 2 */
    } fx[] = {{"llama_op18_static", 2, 2},   {"llama_op23_dynamic", 2, 2}, {"qwen2_op18_static", 2, 2},
              {"mistral_op23_static", 2, 2}, {"phi3_op18_static", 2, 2},   {"gemma_op18_static", 2, 2},
              {"gpt2_op18_static", 0, 0}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        fr_graph *g = fr_ft_open_hf(fx[i].dir);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.precision = "fp8";
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(g, &o, &t);
        if (st != FR_OK) printf("\n  %s: %s", fx[i].dir, fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        int sg = -1, qg = -1, n = count_bf16_linears(t->g, &sg, &qg);
        if (n != fx[i].swiglu + fx[i].qkv || sg != fx[i].swiglu || qg != fx[i].qkv)
            printf("\n  %s: %d narrowed (%d SwiGLU, %d AttentionQKV), want %d, %d", fx[i].dir, n, sg, qg, fx[i].swiglu,
                   fx[i].qkv);
        CU_ASSERT_EQUAL(n, fx[i].swiglu + fx[i].qkv);
        CU_ASSERT_EQUAL(sg, fx[i].swiglu);
        CU_ASSERT_EQUAL(qg, fx[i].qkv);
        fr_trainer_free(t);
        fr_graph_free(g);
    }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Linear y_dtype bfloat16 == bf16(float32 Y), bf16 and fp8", test_linear_y_bf16},
        {"Linear y_dtype: bad values and combinations are errors", test_linear_bad_attrs},
        {"SwiGLU(Grad) on bfloat16 gate/up == float32 on the same values", test_swiglu_bf16},
        {"AttentionQKV(Grad) on bfloat16 X == float32 on the same values", test_attention_qkv_bf16},
        {"trainer: narrowed Q/K/V and gate/up Linears per layer in bf16/fp8, none in fp32 or off", test_trainer_graphs},
        {"bf16: a Linear on a bfloat16 X saves no copy of it; its weight gradient reads X", test_bf16_copies},
        {"fp8 training with and without narrowing", test_losses},
        {"a Linear whose output is also read elsewhere stays float32", test_other_reader},
        {"dynamo HF exports: narrowed gate/up and Q/K/V Linears (Llama family), none for GPT-2", test_hf_exports},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"narrow_activations", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
