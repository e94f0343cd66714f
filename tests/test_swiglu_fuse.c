/* The SwiGLU fusion pass (passes/swiglu_fuse.c):
 *  - the generated tiny Llama: every layer's MLP activation fused, the two-input form in fp32
 *    and the one-input form (reading the fused gate/up Linear's output, no Split left) in
 *    bf16/fp8 (the report counts them);
 *  - hand-built graphs: both operand orders and the Mul(g, Mul(Sigmoid(g), u)) form fuse and
 *    compute the same y (1e-6); an intermediate read elsewhere, the sigmoid of another value,
 *    a broadcast u and float64 stay unfused; a Split with an output read elsewhere stays;
 *  - CPU training, 20 steps: fused vs --no-fuse-swiglu losses within 1e-5 relative (fp32) and
 *    1e-3 (bf16, fp8). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "passes/autodiff.h"
#include "passes/swiglu_fuse.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static int count_op(const fr_graph *g, const char *op, int n_inputs)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0 && (n_inputs < 0 || g->nodes[i].n_inputs == n_inputs);
    return n;
}

static const fr_llama_config k_llama = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 3};

/* The compiled (bf16/fp8) forward graph of the generated Llama for [2, 16]. */
static void check_compiled(const char *precision, int fuse)
{
    fr_graph *model = NULL, *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = precision;
    o.fuse_swiglu = fuse;
    fr_fp8_report rep;
    memset(&rep, 0, sizeof rep);
    fr_status st = fr_train_compile_graph(model, &o, &g, &rep);
    if (st != FR_OK) printf("\n  %s: %s", precision, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    const int L = k_llama.layers, one = 1;
    CU_ASSERT_EQUAL(count_op(g, "SwiGLU", -1), fuse ? L : 0);
    CU_ASSERT_EQUAL(count_op(g, "SwiGLU", 1), fuse && one ? L : 0);
    CU_ASSERT_EQUAL(count_op(g, "Sigmoid", -1), fuse ? 0 : L);
    if (one) {
        /* fused: the gate/up Splits are gone (the Q/K/V ones are AttentionQKV's input) */
        CU_ASSERT_EQUAL(count_op(g, "Split", -1) + (fuse ? L : 0) + count_op(g, "AttentionQKV", -1), L * 2);
        CU_ASSERT_EQUAL(rep.n_swiglu, fuse ? L : 0);
        CU_ASSERT_EQUAL(rep.n_swiglu_one_input, fuse ? L : 0);
        char *text = NULL;
        FR_ASSERT_OK(fr_fp8_report_format(&rep, &text));
        CU_ASSERT((strstr(text, "SwiGLU activations fused") != NULL) == fuse);
        free(text);
    }
    fr_fp8_report_free(&rep);
    fr_graph_free(g);
    fr_graph_free(model);
}

/* fp32 is not compiled: the trainer's own graph (forward and backward) is checked. */
static void test_llama_fp32(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    for (int fuse = 0; fuse < 2; fuse++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = 2;
        o.seq_len = 16;
        o.fuse_swiglu = fuse;
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
        const int L = k_llama.layers;
        CU_ASSERT_EQUAL(count_op(t->g, "SwiGLU", 2), fuse ? L : 0);
        CU_ASSERT_EQUAL(count_op(t->g, "SwiGLUGrad", 3), fuse ? L : 0);
        CU_ASSERT_EQUAL(count_op(t->g, "Sigmoid", -1), fuse ? 0 : L);
        fr_trainer_free(t);
    }
    fr_graph_free(model);
}
static void test_llama_fp8(void) { check_compiled("fp8", 1); }
static void test_llama_bf16(void) { check_compiled("bf16", 1); }
static void test_llama_fp8_off(void) { check_compiled("fp8", 0); }

/* ---- hand-built patterns ---- */

enum {
    P_GS_U,        /* Mul(Mul(g, Sigmoid(g)), u) */
    P_U_SG,        /* Mul(u, Mul(Sigmoid(g), g)) */
    P_G_SU,        /* Mul(g, Mul(Sigmoid(g), u)) */
    P_GS_OUTPUT,   /* g * sig also a graph output */
    P_SIG_READ,    /* Sigmoid(g) read twice */
    P_OTHER_SIG,   /* Mul(Mul(g, Sigmoid(Neg(g))), u) */
    P_BROADCAST,   /* u [F] broadcast over g [R, F] */
    P_SPLIT,       /* g, u from Split(x) in halves: one-input form */
    P_SPLIT_READ,  /* the same with g also a graph output: two-input form, Split kept */
    P_SPLIT_THREE  /* g, u two of a Split's three outputs: two-input form, Split kept */
};

#define R 3
#define F 8

static int add_graph_input(fr_graph *g, const char *name, int rank, const int64_t *dims)
{
    int v;
    FR_ASSERT_OK(fr_graph_add_value(g, name, &v));
    fr_value_set_shape(&g->values[v], FR_F32, rank, dims);
    FR_ASSERT_OK(fr_graph_mark_input(g, v));
    return v;
}

static int mul(fr_graph *g, int a, int b) { return fr_gc_op1(g, "Mul", 2, (int[]){a, b}); }

/* Builds the pattern; returns y (a graph output); *x the graph input. */
static int build(fr_graph *g, int kind, int *x)
{
    int64_t d[2] = {R, F}, dx[2] = {R, kind == P_SPLIT_THREE ? 3 * F : 2 * F}, du[1] = {F};
    int G, U;
    if (kind >= P_SPLIT) {
        *x = add_graph_input(g, "X", 2, dx);
        int outs[3], nid = fr_gc_node(g, "Split", "", 1, x, kind == P_SPLIT_THREE ? 3 : 2, outs);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "axis", -1));
        FR_ASSERT_OK(fr_node_infer(g, nid));
        G = outs[0];
        U = outs[1];
        if (kind == P_SPLIT_THREE) FR_ASSERT_OK(fr_graph_mark_output(g, outs[2]));
        if (kind == P_SPLIT_READ) FR_ASSERT_OK(fr_graph_mark_output(g, G));
    } else {
        *x = add_graph_input(g, "X", 2, d);
        G = *x;
        U = add_graph_input(g, "U", kind == P_BROADCAST ? 1 : 2, kind == P_BROADCAST ? du : d);
    }
    int h = kind == P_OTHER_SIG ? fr_gc_op1(g, "Neg", 1, &G) : G;
    int s = fr_gc_op1(g, "Sigmoid", 1, &h), y;
    switch (kind) {
    case P_U_SG: y = mul(g, U, mul(g, s, G)); break;
    case P_G_SU: y = mul(g, G, mul(g, s, U)); break;
    default: {
        int gs = mul(g, G, s);
        y = mul(g, gs, U);
        if (kind == P_GS_OUTPUT) FR_ASSERT_OK(fr_graph_mark_output(g, gs));
        if (kind == P_SIG_READ) FR_ASSERT_OK(fr_graph_mark_output(g, fr_gc_op1(g, "Neg", 1, &s)));
    }
    }
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return y;
}

static void check_kind(int kind, int want_fused, int want_one_input)
{
    fr_rng r = fr_test_rng("swiglu_fuse_kinds");
    fr_graph *g = fr_gc_new_graph(17);
    CU_ASSERT_FATAL(g != NULL);
    int x, y = build(g, kind, &x);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    int vids[2] = {x, -1}, n_in = 1;
    int uv = fr_graph_find_value(g, "U");
    if (uv >= 0) vids[n_in++] = uv;
    fr_tensor *ins[2];
    for (int i = 0; i < n_in; i++) {
        const fr_value *v = &g->values[vids[i]];
        FR_ASSERT_OK(fr_tensor_new(FR_F32, v->rank, v->dims, v->name, &ins[i]));
        fr_rng_fill_normal(&r, ins[i]->data, fr_tensor_numel(ins[i]), 2.0f);
    }
    fr_tensor *before = fr_ft_run(g, n_in, vids, (const fr_tensor *const *)ins, y);
    int n = -1, n1 = -1;
    FR_ASSERT_OK(fr_fuse_swiglu(g, &n, &n1));
    if (n != want_fused || n1 != want_one_input) printf("\n  kind %d: %d fused, %d one-input", kind, n, n1);
    CU_ASSERT_EQUAL(n, want_fused);
    CU_ASSERT_EQUAL(n1, want_one_input);
    CU_ASSERT_EQUAL(count_op(g, "Sigmoid", -1), !want_fused);
    if (kind >= P_SPLIT) CU_ASSERT_EQUAL(count_op(g, "Split", -1), !want_one_input);
    y = fr_graph_find_value(g, g->values[y].name);
    fr_tensor *after = fr_ft_run(g, n_in, vids, (const fr_tensor *const *)ins, y);
    double e = fr_rel_l2(after->data, before->data, fr_tensor_numel(before));
    if (e > 1e-6) printf("\n  kind %d: fused y differs by %g", kind, e);
    CU_ASSERT(e <= 1e-6);
    for (int i = 0; i < n_in; i++) fr_tensor_free(ins[i]);
    fr_tensor_free(before);
    fr_tensor_free(after);
    fr_graph_free(g);
}

static void test_gs_u(void) { check_kind(P_GS_U, 1, 0); }
static void test_u_sg(void) { check_kind(P_U_SG, 1, 0); }
static void test_g_su(void) { check_kind(P_G_SU, 1, 0); }
static void test_gs_output(void) { check_kind(P_GS_OUTPUT, 0, 0); }
static void test_sig_read(void) { check_kind(P_SIG_READ, 0, 0); }
static void test_other_sig(void) { check_kind(P_OTHER_SIG, 0, 0); }
static void test_broadcast(void) { check_kind(P_BROADCAST, 0, 0); }
static void test_split(void) { check_kind(P_SPLIT, 1, 1); }
static void test_split_read(void) { check_kind(P_SPLIT_READ, 1, 0); }
static void test_split_three(void) { check_kind(P_SPLIT_THREE, 1, 0); }

/* ---- training: fused vs unfused ---- */

static void train_losses(const fr_graph *g, const char *precision, int fuse, double *loss)
{
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = precision;
    o.fuse_swiglu = fuse;
    o.narrow_activations = 0; /* the fusion alone (bf16 gate/up: test_narrow_activations) */
    fr_ft_train_losses(g, &o, loss, NULL);
}

static void check_training(const char *precision, double tol)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &g));
    double fused[FR_FT_STEPS], plain[FR_FT_STEPS];
    train_losses(g, precision, 1, fused);
    train_losses(g, precision, 0, plain);
    fr_ft_expect_same_losses(precision, fused, plain, tol);
    fr_graph_free(g);
}

static void test_train_fp32(void) { check_training("fp32", 1e-5); }
static void test_train_bf16(void) { check_training("bf16", 1e-3); }
static void test_train_fp8(void) { check_training("fp8", 1e-3); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"generated Llama fp32: every layer, two-input form", test_llama_fp32},
        {"generated Llama fp8: every layer, one-input form, no gate/up Split", test_llama_fp8},
        {"generated Llama bf16: every layer, one-input form", test_llama_bf16},
        {"generated Llama fp8 --no-fuse-swiglu: unfused", test_llama_fp8_off},
        {"Mul(Mul(g, Sigmoid(g)), u): fused, same y", test_gs_u},
        {"Mul(u, Mul(Sigmoid(g), g)): fused, same y", test_u_sg},
        {"Mul(g, Mul(Sigmoid(g), u)): fused, same y", test_g_su},
        {"g * sig also a graph output: not fused", test_gs_output},
        {"sigmoid read elsewhere: not fused", test_sig_read},
        {"sigmoid of another value: not fused", test_other_sig},
        {"u broadcast: not fused", test_broadcast},
        {"halves of a Split: one-input form, Split dropped", test_split},
        {"Split output read elsewhere: two-input form, Split kept", test_split_read},
        {"g, u two of three Split outputs: two-input form, Split kept", test_split_three},
        {"training fp32: fused == unfused (1e-5)", test_train_fp32},
        {"training bf16: fused == unfused (1e-3)", test_train_bf16},
        {"training fp8: fused == unfused (1e-3)", test_train_fp8},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"swiglu_fuse", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
