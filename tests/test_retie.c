/* passes/retie.c and passes/unshare.c, the two export artifacts undone before training.
 * retie: a parameter that is a bit-exact transpose or copy of an embedding table is
 * tied back to it; look-alikes that differ in one bit, constant tensors and tables no Gather
 * reads are left alone; the forward output does not change; the fixture exported from a tied
 * GPT-2 with constant folding gets its LM head re-tied, the Llama fixture (untied) nothing. */
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "tests/gradcheck.h"
#include "passes/autodiff.h"
#include "passes/retie.h"
#include "passes/unshare.h"

static int add_param(fr_graph *g, const char *name, int64_t r, int64_t c, fr_rng *rng)
{
    int vid;
    int64_t dims[2] = {r, c};
    fr_tensor *t;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, dims, name, &t));
    if (rng) fr_rng_fill_normal(rng, t->data, r * c, 1.0f);
    FR_ASSERT_OK(fr_graph_add_value(g, name, &vid));
    FR_ASSERT_OK(fr_graph_set_initializer(g, vid, t));
    g->values[vid].flags |= FR_VAL_INITIALIZER;
    return vid;
}

static int add_node(fr_graph *g, const char *op, int n_in, const int *in, const char *out_name)
{
    int out, nid;
    FR_ASSERT_OK(fr_graph_add_value(g, out_name, &out));
    FR_ASSERT_OK(fr_graph_add_node(g, op, "", out_name, n_in, in, 1, &out, &nid));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return out;
}

static void transpose_into(const fr_tensor *src, fr_tensor *dst)
{
    const float *s = src->data;
    float *d = dst->data;
    int64_t R = src->dims[0], C = src->dims[1];
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) d[j * R + i] = s[i * C + j];
}

static void test_tiny(void)
{
    fr_rng r = fr_test_rng("retie_tiny");
    const int64_t V = 7, D = 5;
    fr_graph *g = fr_gc_new_graph(17);
    int E = add_param(g, "E", V, D, &r);            /* embedding table */
    int C = add_param(g, "E_T_copy", D, V, NULL);   /* E^T, as folding writes it */
    int C2 = add_param(g, "E_copy", V, D, NULL);    /* E itself, copied */
    int Near = add_param(g, "near_miss", D, V, NULL); /* E^T with one bit flipped */
    int Z1 = add_param(g, "zeros_a", D, V, NULL), Z2 = add_param(g, "zeros_b", D, V, NULL);
    transpose_into(g->values[E].constant, g->values[C].constant);
    memcpy(g->values[C2].constant->data, g->values[E].constant->data, (size_t)(V * D) * sizeof(float));
    transpose_into(g->values[E].constant, g->values[Near].constant);
    ((uint32_t *)g->values[Near].constant->data)[3] ^= 1u;

    int ids;
    int64_t idims[1] = {4};
    int64_t idv[4] = {0, 3, 6, 3};
    fr_tensor *it;
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 1, idims, "ids", &it));
    memcpy(it->data, idv, sizeof idv);
    FR_ASSERT_OK(fr_graph_add_value(g, "ids", &ids));
    FR_ASSERT_OK(fr_graph_set_initializer(g, ids, it));
    int in[2] = {E, ids};
    int h = add_node(g, "Gather", 2, in, "h");                /* [4, D] */
    int in2[2] = {h, C};
    int y1 = add_node(g, "MatMul", 2, in2, "y1");             /* [4, V] */
    int in3[2] = {h, Near};
    int y2 = add_node(g, "MatMul", 2, in3, "y2");
    int in4[2] = {C2, Z1};
    int y3 = add_node(g, "MatMul", 2, in4, "y3");             /* [V, V] */
    int in5[2] = {h, Z2};
    int y4 = add_node(g, "MatMul", 2, in5, "y4");
    int outs[4] = {y1, y2, y3, y4};
    for (int i = 0; i < 4; i++) FR_ASSERT_OK(fr_graph_mark_output(g, outs[i]));

    fr_tensor **before = calloc((size_t)g->n_values, sizeof *before);
    FR_ASSERT_OK(fr_gc_run(g, before));
    int nv_before = g->n_values;

    fr_tie *ties = NULL;
    int n = 0;
    FR_ASSERT_OK(fr_retie_params(g, &ties, &n));
    CU_ASSERT_EQUAL_FATAL(n, 2);
    int saw_t = 0, saw_copy = 0;
    for (int i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(ties[i].source, E);
        if (ties[i].copy == C) saw_t = ties[i].transposed == 1;
        if (ties[i].copy == C2) saw_copy = ties[i].transposed == 0;
    }
    CU_ASSERT(saw_t && saw_copy);
    CU_ASSERT_FALSE(g->values[C].flags & FR_VAL_PARAM);
    CU_ASSERT_FALSE(g->values[C2].flags & FR_VAL_PARAM);
    CU_ASSERT(g->values[Near].flags & FR_VAL_PARAM);
    CU_ASSERT(g->values[Z1].flags & FR_VAL_PARAM);
    CU_ASSERT(g->values[Z2].flags & FR_VAL_PARAM);
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) {
            CU_ASSERT_NOT_EQUAL(g->nodes[i].inputs[k], C);
            CU_ASSERT_NOT_EQUAL(g->nodes[i].inputs[k], C2);
        }

    fr_tensor **after = calloc((size_t)g->n_values, sizeof *after);
    FR_ASSERT_OK(fr_gc_run(g, after));
    for (int i = 0; i < 4; i++) {
        const fr_tensor *a = before[outs[i]], *b = after[outs[i]];
        CU_ASSERT_FATAL(a && b && a->nbytes == b->nbytes);
        CU_ASSERT(memcmp(a->data, b->data, a->nbytes) == 0);
    }

    /* sync writes a changed source back into both copies */
    fr_graph *to = fr_gc_new_graph(17);
    int tE = add_param(to, "E", V, D, &r), tC = add_param(to, "E_T_copy", D, V, NULL);
    int tC2 = add_param(to, "E_copy", V, D, NULL);
    fr_retie_sync(g, ties, n, to);
    fr_tensor *want;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, (int64_t[]){D, V}, "want", &want));
    transpose_into(to->values[tE].constant, want);
    CU_ASSERT(memcmp(want->data, to->values[tC].constant->data, want->nbytes) == 0);
    CU_ASSERT(memcmp(to->values[tE].constant->data, to->values[tC2].constant->data, want->nbytes) == 0);
    fr_tensor_free(want);
    fr_graph_free(to);

    free(ties);
    fr_gc_free_tensors(g, after);
    free(after);
    for (int i = 0; i < nv_before; i++) fr_tensor_free(before[i]);
    free(before);
    fr_graph_free(g);
}

static int count_ties(const char *model, char *source, char *copy)
{
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, model), &g));
    FR_ASSERT_OK(fr_graph_toposort(g));
    fr_tie *ties = NULL;
    int n = 0;
    FR_ASSERT_OK(fr_retie_params(g, &ties, &n));
    if (n > 0) {
        strcpy(source, g->values[ties[0].source].name);
        strcpy(copy, g->values[ties[0].copy].name);
        CU_ASSERT_EQUAL(ties[0].transposed, 1);
    }
    free(ties);
    fr_graph_free(g);
    return n;
}

static void test_fixtures(void)
{
    char s[256] = "", c[256] = "";
    CU_ASSERT_EQUAL(count_ties("gpt2_tiny/model.onnx", s, c), 1);
    CU_ASSERT_STRING_EQUAL(s, "wte.weight");
    CU_ASSERT_STRING_EQUAL(c, "onnx::MatMul_293");
    /* unfolded export: the tie is a Transpose node already; untied Llama: nothing to do */
    CU_ASSERT_EQUAL(count_ties("gpt2_tiny_op13/model.onnx", s, c), 0);
    CU_ASSERT_EQUAL(count_ties("llama_tiny/model.onnx", s, c), 0);
}

/* Identity(ones) -> its own initializer named as the Identity's output; Identity(random) is a
 * tie and stays; an Identity writing a graph output stays. */
static void test_unshare(void)
{
    fr_rng r = fr_test_rng("unshare");
    fr_graph *g = fr_gc_new_graph(17);
    int ones = add_param(g, "ln0.weight", 1, 6, NULL), rnd = add_param(g, "emb", 1, 6, &r);
    float *o = g->values[ones].constant->data;
    for (int i = 0; i < 6; i++) o[i] = 1.0f;
    int x = add_param(g, "x", 1, 6, &r);
    int in_a[1] = {ones}, in_b[1] = {rnd}, in_c[1] = {ones};
    int a = add_node(g, "Identity", 1, in_a, "ln1.weight");
    int b = add_node(g, "Identity", 1, in_b, "emb_alias");
    int c = add_node(g, "Identity", 1, in_c, "exported_gain");
    int m1[2] = {x, a}, m2[2] = {x, b}, m3[2] = {x, ones};
    int y1 = add_node(g, "Mul", 2, m1, "y1"), y2 = add_node(g, "Mul", 2, m2, "y2");
    int y3 = add_node(g, "Mul", 2, m3, "y3");
    int outs[4] = {y1, y2, y3, c};
    for (int i = 0; i < 4; i++) FR_ASSERT_OK(fr_graph_mark_output(g, outs[i]));
    int n = -1, n_init = g->n_initializers;
    FR_ASSERT_OK(fr_unshare_params(g, &n));
    CU_ASSERT_EQUAL(n, 1);
    int v = fr_graph_find_value(g, "ln1.weight");
    CU_ASSERT_FATAL(v >= 0);
    const fr_value *lv = &g->values[v];
    CU_ASSERT(lv->constant && (lv->flags & FR_VAL_PARAM) && (lv->flags & FR_VAL_INITIALIZER) && lv->producer < 0);
    CU_ASSERT(lv->constant && memcmp(lv->constant->data, o, 6 * sizeof(float)) == 0);
    CU_ASSERT(lv->constant && lv->constant->data != (void *)o); /* a copy, trained on its own */
    CU_ASSERT_EQUAL(g->n_initializers, n_init + 1);
    int ids = 0;
    for (int i = 0; i < g->n_nodes; i++) ids += strcmp(g->nodes[i].op_type, "Identity") == 0;
    CU_ASSERT_EQUAL(ids, 2); /* the tie and the output-naming Identity stay */
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"unshare: value-merged parameters split, ties kept", test_unshare},
    {"tied copies found, look-alikes left alone, outputs unchanged, sync", test_tiny},
    {"fixtures: gpt2_tiny's folded LM head re-tied, llama_tiny untouched", test_fixtures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"retie", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
