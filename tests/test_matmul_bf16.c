/* ai.fp8run::MatMul {transA, transB, precision} and the compile pass that emits it:
 *  - gradients of every transpose combination with broadcast batch dims (GQA-like
 *    [B, KV, G, T, d] x [B, KV, 1, d, T]) against central differences in float64;
 *  - fp32 precision equals ONNX MatMul on explicitly transposed operands (1e-6);
 *  - bf16 precision equals the float32 product of bf16-rounded operands (1e-6), and differs
 *    from the fp32 one (so the rounding is really applied);
 *  - compiling llama_tiny for fp8 turns its 4 attention MatMuls into bf16 ai.fp8run::MatMul,
 *    folds the keys' Transpose into transB, and keeps the forward within 1e-2 of fp32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "graph/onnx_io.h"
#include "tests/op_harness.h"
#include "passes/autodiff.h"
#include "runtime/train/trainer.h"

static fr_graph *new_graph(void)
{
    fr_graph *g = NULL;
    if (fr_graph_new(&g) != FR_OK) return NULL;
    g->opsets = calloc(2, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->opsets[1].domain = strdup("ai.fp8run");
    g->opsets[1].version = 1;
    g->n_opsets = 2;
    return g;
}

static int mmx(fr_graph *g, int a, int b, int ta, int tb, const char *prec)
{
    int out, nid, in[2] = {a, b};
    char nm[64];
    snprintf(nm, sizeof nm, "mmx_%d", g->n_nodes);
    FR_ASSERT_OK(fr_graph_add_value(g, nm, &out));
    FR_ASSERT_OK(fr_graph_add_node(g, "MatMul", "ai.fp8run", nm, 2, in, 1, &out, &nid));
    if (ta) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "transA", 1));
    if (tb) FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "transB", 1));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[nid], "precision", prec));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return out;
}

static void test_gradients(void)
{
    fr_rng r = fr_test_rng("mmx_grad");
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            fr_graph *g = new_graph();
            /* A: [2, 2, 3, M=4, K=5] (or K, M), B: [2, 2, 1, K=5, N=6] (or N, K) */
            int64_t da[5] = {2, 2, 3, ta ? 5 : 4, ta ? 4 : 5}, db[5] = {2, 2, 1, tb ? 6 : 5, tb ? 5 : 6};
            int a = fr_gc_add_input(g, &r, "A", FR_F64, 5, da, NULL);
            int b = fr_gc_add_input(g, &r, "B", FR_F64, 5, db, NULL);
            int y = mmx(g, a, b, ta, tb, "fp32");
            const fr_value *yv = &g->values[y];
            CU_ASSERT(yv->rank == 5 && yv->dims[2] == 3 && yv->dims[3] == 4 && yv->dims[4] == 6);
            int wrt[2] = {a, b};
            double err = fr_gradcheck(g, &r, y, 2, wrt);
            if (err > 1e-6) printf("\n  transA %d transB %d: gradient rel err %g", ta, tb, err);
            CU_ASSERT(err <= 1e-6);
            fr_graph_free(g);
        }
}

/* fp32 == MatMul on transposed copies; bf16 == product of rounded operands */
static void test_values(void)
{
    fr_rng r = fr_test_rng("mmx_values");
    int64_t da[3] = {3, 7, 9}, db[3] = {1, 11, 9}; /* A [3, 7, 9], B^T stored [1, 11, 9] */
    fr_tensor *A = tt_randn(&r, FR_F32, 3, da, 0, 1), *B = tt_randn(&r, FR_F32, 3, db, 0, 1);
    fr_tensor *ins[2] = {A, B};
    tnode t32, tbf;
    tn_init_domain(&t32, "ai.fp8run", "MatMul", 1, 2, ins, 0u, 1);
    TN_ATTR(&t32, int, "transB", 1);
    FR_ASSERT_OK(tn_run(&t32));
    tn_init_domain(&tbf, "ai.fp8run", "MatMul", 1, 2, ins, 0u, 1);
    TN_ATTR(&tbf, int, "transB", 1);
    TN_ATTR(&tbf, string, "precision", "bf16");
    FR_ASSERT_OK(tn_run(&tbf));
    const float *a = A->data, *b = B->data, *y32 = t32.out[0]->data, *ybf = tbf.out[0]->data;
    double e32 = 0, ebf = 0, n2 = 0, diff = 0;
    for (int bt = 0; bt < 3; bt++)
        for (int m = 0; m < 7; m++)
            for (int n = 0; n < 11; n++) {
                double s = 0, sb = 0;
                for (int k = 0; k < 9; k++) {
                    float x = a[(bt * 7 + m) * 9 + k], w = b[n * 9 + k];
                    s += (double)x * w;
                    sb += (double)fr_bf16_to_f32(fr_f32_to_bf16(x)) * fr_bf16_to_f32(fr_f32_to_bf16(w));
                }
                int o = (bt * 7 + m) * 11 + n;
                e32 += (y32[o] - s) * (y32[o] - s);
                ebf += (ybf[o] - sb) * (ybf[o] - sb);
                diff += (ybf[o] - y32[o]) * (ybf[o] - y32[o]);
                n2 += s * s;
            }
    CU_ASSERT(sqrt(e32 / n2) <= 1e-6);
    CU_ASSERT(sqrt(ebf / n2) <= 1e-6);
    CU_ASSERT(sqrt(diff / n2) > 1e-4); /* bf16 rounding shows */
    printf(" (fp32 rel %.1e, bf16 vs rounded reference %.1e, bf16 vs fp32 %.1e)", sqrt(e32 / n2), sqrt(ebf / n2),
           sqrt(diff / n2));
    tn_free(&t32);
    tn_free(&tbf);
    fr_tensor_free(A);
    fr_tensor_free(B);
}

static void test_compile_lowering(void)
{
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 13;
    o.precision = "fp8";
    fr_graph *cg = NULL;
    fr_fp8_report rep;
    /* fused (the default): two Attention nodes in bf16, no MatMul of two activations left */
    FR_ASSERT_OK(fr_train_compile_graph(g, &o, &cg, &rep));
    CU_ASSERT_EQUAL(rep.n_attention, 2);
    CU_ASSERT_EQUAL(rep.n_activation_matmuls, 0);
    for (int i = 0; i < cg->n_nodes; i++)
        if (strcmp(cg->nodes[i].op_type, "Attention") == 0) {
            const char *prec = "";
            FR_ASSERT_OK(fr_node_attr_string(&cg->nodes[i], "precision", "fp32", &prec));
            CU_ASSERT_STRING_EQUAL(prec, "bf16");
        }
    fr_fp8_report_free(&rep);
    fr_graph_free(cg);
    /* unfused (--no-fuse-attention): the four attention MatMuls are lowered */
    o.fuse_attention = 0;
    FR_ASSERT_OK(fr_train_compile_graph(g, &o, &cg, &rep));
    CU_ASSERT_EQUAL(rep.n_activation_matmuls, 4);
    CU_ASSERT_EQUAL(rep.n_attention, 0);
    int n_mmx = 0, n_tb = 0, n_onnx_mm = 0;
    for (int i = 0; i < cg->n_nodes; i++) {
        const fr_node *n = &cg->nodes[i];
        if (strcmp(n->op_type, "MatMul") != 0) continue;
        if (strcmp(n->domain, "ai.fp8run") == 0) {
            n_mmx++;
            int64_t tb = 0;
            const char *prec = "";
            FR_ASSERT_OK(fr_node_attr_int(n, "transB", 0, &tb));
            FR_ASSERT_OK(fr_node_attr_string(n, "precision", "fp32", &prec));
            n_tb += tb == 1;
            CU_ASSERT_STRING_EQUAL(prec, "bf16");
        } else {
            n_onnx_mm++;
        }
    }
    CU_ASSERT_EQUAL(n_mmx, 4);
    CU_ASSERT_EQUAL(n_tb, 2); /* Q K^T: the keys' Transpose became transB */
    CU_ASSERT_EQUAL(n_onnx_mm, 0);
    fr_fp8_report_free(&rep);
    fr_graph_free(cg);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"gradients of all transposes with broadcast batch dims (float64)", test_gradients},
    {"fp32 == exact product, bf16 == product of rounded operands", test_values},
    {"fp8 compile lowers llama_tiny's attention MatMuls to bf16, keys' Transpose folded", test_compile_lowering},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"matmul_bf16", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
