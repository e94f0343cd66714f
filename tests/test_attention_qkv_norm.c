/* The q/k RMSNorm of ai.fp8run::AttentionQKV (inputs q_norm, k_norm: ops/attention_qkv.h) and
 * the pass that fuses it (passes/attention_io.c):
 *  - the CPU op with the norms equals the op without them on X normalized by a float64
 *    reference written out here (per head and full width, RoPE half / none, GQA): 1e-12;
 *  - its gradient with respect to X and both weights against central differences (float64):
 *    1e-6;
 *  - the Qwen3 fixtures (per-head q/k norm before RoPE) and the OLMo2 ones (full width, before
 *    the head split), static and dynamic exports alike: one AttentionQKV per layer taking the
 *    norm weights, no RMSNormalization left on Q or K, logits equal to the pass off within
 *    1e-6; Qwen3's bf16 trainer's graph
 *    has no RMSNormGrad of the q/k norms, and 20 bf16 steps
 *    give the losses of the pass off within 1e-6 relative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "ops/attention_qkv.h"
#include "ops/grad.h"
#include "passes/attention_fuse.h"
#include "passes/attention_io.h"
#include "passes/fp8_compile.h"
#include "passes/rmsnorm_fuse.h"
#include "passes/rotary_fuse.h"
#include "runtime/io/npy.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/op_harness.h"

typedef struct cfg {
    int64_t B, T, Hq, Hk, D, Dv;
    int rope, full; /* RoPE (half split) or none; full-width norm or per head */
} cfg;

static const cfg k_cfgs[] = {
    {2, 5, 4, 2, 4, 4, 1, 0},
    {1, 4, 3, 1, 6, 4, 0, 0},
    {2, 3, 2, 2, 4, 4, 1, 1},
    {1, 6, 4, 1, 2, 6, 1, 1},
};
#define N_CFGS ((int)(sizeof k_cfgs / sizeof k_cfgs[0]))
#define EPS 1e-3f

static int64_t width(const cfg *c) { return (c->Hq + c->Hk) * c->D + c->Hk * c->Dv; }
static int64_t qlen(const cfg *c) { return c->full ? c->Hq * c->D : c->D; }
static int64_t klen(const cfg *c) { return c->full ? c->Hk * c->D : c->D; }

static void set_attrs(fr_node *n, const cfg *c)
{
    FR_ASSERT_OK(fr_node_set_attr_int(n, "heads", c->Hq));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "kv_heads", c->Hk));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "head_dim", c->D));
    FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", 1));
    FR_ASSERT_OK(fr_node_set_attr_float(n, "qk_norm_eps", EPS));
}

/* X with Q and K normalized row by row (rows of len from column off), in double. */
static void norm_ref(const cfg *c, double *x, int64_t off, int64_t cols, int64_t len, const double *w)
{
    const int64_t W = width(c);
    for (int64_t bt = 0; bt < c->B * c->T; bt++)
        for (int64_t r0 = off; r0 < off + cols; r0 += len) {
            double *row = x + bt * W + r0, ss = 0;
            for (int64_t j = 0; j < len; j++) ss += row[j] * row[j];
            const double inv = 1 / sqrt(ss / (double)len + (double)EPS);
            for (int64_t j = 0; j < len; j++) row[j] *= inv * w[j];
        }
}

static void tables(fr_rng *r, const cfg *c, fr_tensor **cs, fr_tensor **sn)
{
    const int64_t d[2] = {c->T, c->D};
    *cs = tt_randn(r, FR_F64, 2, d, 0, 1);
    *sn = tt_randn(r, FR_F64, 2, d, 0, 1);
}

static void run_qkv(const cfg *c, fr_tensor *x, fr_tensor *cs, fr_tensor *sn, fr_tensor *wq, fr_tensor *wk,
                    fr_tensor **o, fr_tensor **lse)
{
    fr_tensor *ins[7] = {x, cs, sn, NULL, NULL, wq, wk};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "AttentionQKV", 1, wq ? 7 : c->rope ? 3 : 1, ins, 0, 2);
    set_attrs(tn_node(&t), c);
    FR_ASSERT_OK(tn_run(&t));
    *o = t.out[0], *lse = t.out[1];
    t.out[0] = t.out[1] = NULL;
    tn_free(&t);
}

static void test_forward(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const cfg *c = &k_cfgs[ci];
        fr_tensor *x = tt_randn(&r, FR_F64, 3, (int64_t[]){c->B, c->T, width(c)}, 0, 1), *cs = NULL, *sn = NULL;
        fr_tensor *wq = tt_randn(&r, FR_F64, 1, (int64_t[]){qlen(c)}, 1, 0.3);
        fr_tensor *wk = tt_randn(&r, FR_F64, 1, (int64_t[]){klen(c)}, 1, 0.3);
        if (c->rope) tables(&r, c, &cs, &sn);
        fr_tensor *xn = tt_new(FR_F64, 3, x->dims);
        memcpy(xn->data, x->data, x->nbytes);
        norm_ref(c, xn->data, 0, c->Hq * c->D, qlen(c), wq->data);
        norm_ref(c, xn->data, c->Hq * c->D, c->Hk * c->D, klen(c), wk->data);
        fr_tensor *o1, *l1, *o0, *l0;
        run_qkv(c, x, c->rope ? cs : NULL, c->rope ? sn : NULL, wq, wk, &o1, &l1);
        run_qkv(c, xn, cs, sn, NULL, NULL, &o0, &l0);
        const double eo = fr_gc_rel_l2(o1, o0), el = fr_gc_rel_l2(l1, l0);
        if (!(eo <= 1e-12 && el <= 1e-12)) printf("\n  config %d: O off by %g, LSE by %g", ci, eo, el);
        CU_ASSERT(eo <= 1e-12);
        CU_ASSERT(el <= 1e-12);
        fr_tensor *all[] = {x, cs, sn, wq, wk, xn, o1, l1, o0, l0};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
    }
}

static void test_gradient(void)
{
    fr_rng r = fr_test_rng(__func__);
    for (int ci = 0; ci < N_CFGS; ci++) {
        const cfg *c = &k_cfgs[ci];
        fr_graph *g = fr_gc_new_graph(18);
        CU_ASSERT_FATAL(g != NULL);
        FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
        const int x = fr_gc_add_input(g, &r, "x", FR_F64, 3, (int64_t[]){c->B, c->T, width(c)}, NULL);
        const int wq = fr_gc_add_input(g, &r, "wq", FR_F64, 1, (int64_t[]){qlen(c)}, NULL);
        const int wk = fr_gc_add_input(g, &r, "wk", FR_F64, 1, (int64_t[]){klen(c)}, NULL);
        int cv = -1, sv = -1;
        if (c->rope) {
            fr_tensor *cs = NULL, *sn = NULL;
            tables(&r, c, &cs, &sn);
            cv = fr_gc_add_values(g, "cos", FR_F64, cs->rank, cs->dims, cs->data);
            sv = fr_gc_add_values(g, "sin", FR_F64, sn->rank, sn->dims, sn->data);
            fr_tensor_free(cs);
            fr_tensor_free(sn);
            g->values[cv].flags &= ~FR_VAL_PARAM; /* constants: no gradient */
            g->values[sv].flags &= ~FR_VAL_PARAM;
        }
        int outs[2];
        const int nid = fr_gc_node(g, "AttentionQKV", "ai.fp8run", 7, (int[]){x, cv, sv, -1, -1, wq, wk}, 2, outs);
        set_attrs(&g->nodes[nid], c);
        FR_ASSERT_OK(fr_node_infer(g, nid));
        char what[64];
        snprintf(what, sizeof what, "AttentionQKV with q/k norm, config %d", ci);
        fr_gc_check(g, &r, outs[0], 3, (int[]){x, wq, wk}, what, 1e-6);
        fr_graph_free(g);
    }
}

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

/* The fixture prepared, RMSNorm, attention and RoPE fused, compiled for bf16; the pass on or not. */
static fr_graph *hf_compiled(const char *dir, int io, int *fused)
{
    fr_graph *g = fr_ft_load_hf(dir);
    int n = 0;
    FR_ASSERT_OK(fr_fuse_rmsnorm(g, &n));
    FR_ASSERT_OK(fr_fuse_attention(g, &n));
    FR_ASSERT_OK(fr_fuse_rotary(g, &n));
    fr_fp8_options fo;
    fr_fp8_options_default(&fo);
    fo.precision = "bf16";
    fr_fp8_report rep;
    memset(&rep, 0, sizeof rep);
    FR_ASSERT_OK(fr_fp8_compile(g, &fo, &rep));
    fr_fp8_report_free(&rep);
    *fused = 0;
    if (io) FR_ASSERT_OK(fr_fuse_attention_io(g, fused));
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    return g;
}

/* Qwen3 (per head: weights [D]) and OLMo2 (full width: [heads D]), both opsets, static and
 * dynamic (symbolic batch and seq, an attention_mask input) exports. */
static void test_fixtures(void)
{
    for (int f = 0; f < 8; f++) {
        char dir[64];
        const int opset = f % 2 ? 23 : 18, olmo = f % 4 >= 2;
        snprintf(dir, sizeof dir, "%s_op%d_%s", olmo ? "olmo2" : "qwen3", opset, f >= 4 ? "dynamic" : "static");
        int fused = -1, none = -1;
        fr_graph *g1 = hf_compiled(dir, 1, &fused), *g0 = hf_compiled(dir, 0, &none);
        CU_ASSERT_EQUAL(fused, 2);
        CU_ASSERT_EQUAL(count_op(g1, "AttentionQKV"), 2);
        for (int i = 0; i < g1->n_nodes; i++) {
            const fr_node *n = &g1->nodes[i];
            if (n->dead || strcmp(n->op_type, "AttentionQKV") != 0) continue;
            CU_ASSERT_FATAL(n->n_inputs == 7 && n->inputs[5] >= 0 && n->inputs[6] >= 0);
            /* Qwen3's tiny config: 4 query heads of 16; OLMo2's: 4 of 16, 2 kv heads */
            CU_ASSERT_EQUAL(g1->values[n->inputs[5]].dims[g1->values[n->inputs[5]].rank - 1], olmo ? 64 : 16);
            CU_ASSERT_EQUAL(g1->values[n->inputs[6]].dims[g1->values[n->inputs[6]].rank - 1], olmo ? 32 : 16);
        }
        /* 2 layers x (2 block norms + q + k) + the final norm, less the 4 q/k norms */
        CU_ASSERT_EQUAL(count_op(g0, "RMSNormalization"), 9);
        CU_ASSERT_EQUAL(count_op(g1, "RMSNormalization"), 5);
        CU_ASSERT_EQUAL(count_op(g1, "Transpose"), 0);
        CU_ASSERT_FATAL(g1->n_outputs > 0 && strcmp(g1->values[g1->outputs[0]].name, "logits") == 0);
        fr_tensor *y1 = fr_ft_hf_logits(g1, dir), *y0 = fr_ft_hf_logits(g0, dir);
        const double e = fr_gc_rel_l2(y1, y0);
        if (!(e <= 1e-6)) printf("\n  %s: logits with the pass off by %g", dir, e);
        CU_ASSERT(e <= 1e-6);
        fr_tensor_free(y1);
        fr_tensor_free(y0);
        fr_graph_free(g1);
        fr_graph_free(g0);
    }
}

/* The trainer's bf16 graph and 20 bf16 steps, the pass on and off. */
static void test_qwen3_training(void)
{
    fr_graph *model = fr_ft_open_hf("qwen3_op18_static");
    double loss[2][FR_FT_STEPS];
    int grads[2] = {0, 0};
    for (int on = 0; on < 2; on++) {
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.lr.max_lr = 1e-3;
        o.precision = "bf16";
        o.fp8.precision = "bf16";
        o.fuse_attention_io = on;
        o.narrow_activations = 0;
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(model, &o, &t);
        if (st != FR_OK) printf("\n  %s", fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        grads[on] = count_op(t->g, "RMSNormGrad") + count_op(t->g, "AddRMSNormGrad");
        if (on) {
            CU_ASSERT_EQUAL(count_op(t->g, "AttentionQKVGrad"), 2);
            for (int i = 0; i < t->g->n_nodes; i++) {
                const fr_node *n = &t->g->nodes[i];
                if (!n->dead && strcmp(n->op_type, "AttentionQKVGrad") == 0) CU_ASSERT(n->n_outputs == 3);
            }
        }
        fr_trainer_free(t);
        fr_ft_train_losses(model, &o, loss[on], NULL);
    }
    if (grads[0] - grads[1] != 4) printf("\n  norm gradient nodes: %d with the pass off, %d on", grads[0], grads[1]);
    CU_ASSERT_EQUAL(grads[0] - grads[1], 4);
    fr_ft_expect_same_losses("qwen3", loss[1], loss[0], 1e-6);
    fr_graph_free(model);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"CPU op with q/k norms == op on normalized X (1e-12)", test_forward},
        {"gradient wrt X and the norm weights vs central differences (1e-6)", test_gradient},
        {"Qwen3 and OLMo2 fixtures: q/k norms fused, logits == pass off", test_fixtures},
        {"Qwen3 training: no q/k norm gradients left, losses == pass off", test_qwen3_training},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_qkv_norm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
