/* LoRA (passes/lora.h, runtime/train/train_lora.c):
 *  - gradients of the adapted Linear (x, A, B) against central differences, on fresh random
 *    values with B non-zero (B = 0 would make A's gradient zero);
 *  - the pass on the transformers Llama fixture: q_proj|v_proj gives 4 adapters, every base
 *    parameter frozen, A drawn in U(-1/sqrt(in), 1/sqrt(in)), B zero, so the first loss is the
 *    base model's bit for bit; bytes per parameter; a bad regex, no match and dropout 1 refused;
 *  - training lowers the loss of the batch it trains on;
 *  - bf16: the first loss is the bf16 base model's; fp8: the frozen base Linears are compiled
 *    (unfused, still frozen), the adapters bf16, and training lowers the loss;
 *  - the adapter export: PEFT's keys, shapes, values and config;
 *  - the merged export run by `fp8run run` gives the adapter model's logits (rel 1e-5);
 *  - a checkpoint resumes bit-exact;
 *  - the CLI: start line with bytes per parameter, --export-adapter, --resume (the same losses
 *    as one run), export of a LoRA checkpoint (merged, byte-equal to the run's own export),
 *    --init-from into the frozen base;
 *  - --lora-dropout (lora_dropout): gradients with the mask fixed; one KeyedDropout per adapter
 *    with its own stream, none in the eval graph; the first loss is still the base model's, the
 *    same seed gives the same losses (--recompute full too), dropout changes them; a training step's loss is not the
 *    eval loss of the same weights (it is without dropout); adapter_config.json records it; the
 *    merged export reproduces the eval logits; a checkpoint resumes bit-exact with gradient
 *    accumulation; the CLI trains and resumes with --lora-dropout 0.1. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"
#include "fp8run.h"
#include "tests/gradcheck.h"
#include "tests/harness.h"
#include "tests/hf_llama_util.h"
#include "ops/dropout.h"
#include "ops/dropout_mask.h"
#include "passes/autodiff.h"
#include "passes/lora.h"
#include "runtime/api/api_internal.h"
#include "runtime/train/train_internal.h"
#include "runtime/io/npy.h"
#include "runtime/io/safetensors.h"

#define MODEL HF_MODEL
#define B HF_B
#define T HF_T
#define V HF_V
#define RANK 4
#define ALPHA 8.0
#define N_ADAPTERS 4
/* q_proj [72, 72] and v_proj [24, 72] (GQA) in each of the 2 layers */
static const char *const k_modules[N_ADAPTERS] = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                                  "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"};
static const int64_t k_out[N_ADAPTERS] = {72, 24, 72, 24};
#define IN 72

/* --lora-dropout and --grad-accum of the sessions made next (the C API's fields) */
static double g_dropout;
static int g_accum = 1;
static const char *g_recompute = "none";

static int g_narrow = 1; /* narrow_activations of the next sessions */

static fp8run_session *new_session_prec(fp8run_model *m, int rank, const char *targets, double lr,
                                        const char *precision)
{
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.precision = precision;
    c.batch = B;
    c.seq_len = T;
    c.lr = lr;
    c.seed = 7;
    c.lora_rank = rank;
    c.lora_alpha = ALPHA;
    c.lora_targets = targets;
    c.lora_dropout = g_dropout;
    c.grad_accum = g_accum;
    c.recompute = g_recompute;
    c.narrow_activations = g_narrow;
    fp8run_session *s = NULL;
    OK(fp8run_session_create(m, "cpu", &c, &s));
    return s;
}

static fp8run_session *new_session(fp8run_model *m, int rank, const char *targets, double lr)
{
    return new_session_prec(m, rank, targets, lr, "fp32");
}

static double step(fp8run_session *s)
{
    /* g_accum micro-batches of the same windows (each its own dropout masks) */
    int64_t w[4 * B * (T + 1)];
    for (int k = 0; k < g_accum; k++) memcpy(w + k * B * (T + 1), hf_win, sizeof hf_win);
    fp8run_step_stats st = {.struct_size = sizeof st};
    OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, (size_t)(g_accum * B * (T + 1)), &st));
    return st.loss;
}

static float *get_param(fp8run_session *s, const char *name, int64_t n)
{
    float *p = malloc((size_t)n * sizeof *p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    OK(fp8run_session_get_param(s, name, p, (size_t)n));
    return p;
}

static void adapter_name(char *buf, size_t n, int k, char which)
{
    snprintf(buf, n, "base_model.model.%s.lora_%c.weight", k_modules[k], which);
}

/* ---- gradients ---- */

/* y = x W^T (x [2, t, 6], W "lin.weight" [5, 6], trained) with a rank-3 adapter (alpha 6, the
 * given dropout) applied to it; the values' ids through the pointers. */
static fr_graph *lora_linear(fr_rng *r, int64_t t, double dropout, int *x, int *w, int *wt, int *y,
                             fr_lora_result *res)
{
    fr_graph *g = fr_gc_new_graph(18);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    const int64_t xd[3] = {2, t, 6}, wd[2] = {5, 6};
    *x = fr_gc_add_input(g, r, "x", FR_F32, 3, xd, NULL);
    *w = fr_gc_add_input(g, r, "lin.weight", FR_F32, 2, wd, NULL);
    g->values[*w].flags |= FR_VAL_PARAM | FR_VAL_INITIALIZER;
    *wt = fr_gc_op1(g, "Transpose", 1, w);
    int in[2] = {*x, *wt};
    *y = fr_gc_op1(g, "MatMul", 2, in);
    fr_prng pr;
    fr_prng_seed(&pr, 3);
    fr_lora_options o = {.rank = 3, .alpha = 6, .targets = "^lin\\.weight$", .dropout = dropout};
    FR_ASSERT_OK(fr_lora_apply(g, &o, &pr, res));
    return g;
}

static void test_gradcheck(void)
{
    fr_rng r = fr_test_rng("lora_gradcheck");
    int x, w, wt, y;
    fr_lora_result res;
    fr_graph *g = lora_linear(&r, 3, 0, &x, &w, &wt, &y, &res);
    CU_ASSERT_EQUAL_FATAL(res.n, 1);
    CU_ASSERT_STRING_EQUAL(res.ad[0].module, "lin");
    CU_ASSERT_STRING_EQUAL(res.ad[0].a, "base_model.model.lin.lora_A.weight");
    CU_ASSERT_FALSE(g->values[w].flags & FR_VAL_PARAM); /* frozen */
    for (int i = 0; i < g->n_nodes; i++) FR_ASSERT_OK(fr_node_infer(g, i));
    int a = fr_graph_find_value(g, res.ad[0].a), b = fr_graph_find_value(g, res.ad[0].b);
    CU_ASSERT_FATAL(a >= 0 && b >= 0);
    CU_ASSERT(g->values[a].dims[0] == 3 && g->values[a].dims[1] == 6);
    CU_ASSERT(g->values[b].dims[0] == 5 && g->values[b].dims[1] == 3);
    /* A within PEFT's kaiming-uniform bound; B zero: the output is the base Linear's */
    const float *ad = g->values[a].constant->data;
    for (int i = 0; i < 18; i++) CU_ASSERT(fabsf(ad[i]) <= 1.0f / sqrtf(6.0f) && ad[i] != 0.0f);
    fr_tensor **tv = calloc((size_t)g->n_values, sizeof *tv);
    FR_ASSERT_OK(fr_gc_run(g, tv));
    const fr_tensor *yt = fr_gc_value(g, tv, y), *base = fr_gc_value(g, tv, g->nodes[0].outputs[0]);
    for (int i = 1; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "MatMul") == 0 && g->nodes[i].inputs[1] == wt)
            base = fr_gc_value(g, tv, g->nodes[i].outputs[0]);
    CU_ASSERT_FATAL(yt && base && yt != base);
    CU_ASSERT_EQUAL(memcmp(yt->data, base->data, yt->nbytes), 0);
    fr_gc_free_tensors(g, tv);
    free(tv);
    /* B random: every input's gradient is non-trivial */
    float *bd = g->values[b].constant->data;
    for (int i = 0; i < 15; i++) bd[i] = (float)fr_rng_normal(&r);
    int wrt[3] = {x, a, b};
    fr_gc_check(g, &r, y, 3, wrt, "LoRA Linear (x, A, B)", 1e-4); /* float32 differences */
    fr_lora_result_free(&res);
    fr_graph_free(g);
}

/* With dropout: x -> KeyedDropout -> A; the gradients with the key (so the mask) fixed. */
static void test_gradcheck_dropout(void)
{
    fr_rng r = fr_test_rng("lora_gradcheck_dropout");
    int x, w, wt, y;
    fr_lora_result res;
    fr_graph *g = lora_linear(&r, 4, 0.3, &x, &w, &wt, &y, &res);
    /* one KeyedDropout reading x and the key (a graph input), feeding A's MatMul */
    int key = fr_graph_find_value(g, FR_DROPOUT_KEY_INPUT), kd = -1;
    CU_ASSERT_FATAL(key >= 0 && (g->values[key].flags & FR_VAL_INPUT));
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "KeyedDropout") == 0) {
            CU_ASSERT_EQUAL(kd, -1);
            kd = i;
        }
    CU_ASSERT_FATAL(kd >= 0);
    CU_ASSERT(g->nodes[kd].inputs[0] == x && g->nodes[kd].inputs[1] == key);
    CU_ASSERT_STRING_EQUAL(g->nodes[kd].name, "lin/lora_dropout");
    float ratio;
    uint64_t stream;
    FR_ASSERT_OK(fr_keyed_dropout_params(&g->nodes[kd], &ratio, &stream));
    CU_ASSERT_EQUAL(ratio, 0.3f);
    /* the key fixed: a constant (a fresh seed, step, micro-batch) */
    const int64_t kdim[1] = {FR_DROPOUT_KEY_LEN};
    const int64_t kv[3] = {(int64_t)(fr_rng_uniform(&r) * 1e15), (int64_t)(fr_rng_uniform(&r) * 1000), 0};
    int kc = fr_gc_add_input(g, &r, "fixed_key", FR_I64, 1, kdim, kv);
    g->nodes[kd].inputs[1] = kc;
    for (int i = 0; i < g->n_nodes; i++) FR_ASSERT_OK(fr_node_infer(g, i));
    int a = fr_graph_find_value(g, res.ad[0].a), b = fr_graph_find_value(g, res.ad[0].b);
    float *bd = g->values[b].constant->data;
    for (int i = 0; i < 15; i++) bd[i] = (float)fr_rng_normal(&r);
    int wrt[3] = {x, a, b};
    fr_gc_check(g, &r, y, 3, wrt, "LoRA Linear with dropout (x, A, B)", 1e-4);
    fr_lora_result_free(&res);
    fr_graph_free(g);
}

/* ---- the pass on the fixture ---- */

static void test_fixture_pass(void)
{
    fp8run_model *m = hf_load_model();
    fp8run_session *base = new_session(m, 0, NULL, 1e-3);
    fp8run_session *s = new_session(m, RANK, "q_proj|v_proj", 1e-3);
    /* B = 0: the first loss is the base model's, exactly */
    double l0 = hf_eval(base), l1 = hf_eval(s);
    CU_ASSERT_EQUAL(l0, l1);
    CU_ASSERT(isfinite(l0));
    /* the adapters are the only trained parameters */
    CU_ASSERT_EQUAL_FATAL(fp8run_session_param_count(s), 2 * N_ADAPTERS);
    int64_t n_base = 0, n_lora = 0;
    for (int i = 0; i < fp8run_session_param_count(base); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        OK(fp8run_session_param(base, i, &v));
        n_base += v.numel;
    }
    for (int k = 0; k < N_ADAPTERS; k++) {
        char an[200], bn[200];
        adapter_name(an, sizeof an, k, 'A');
        adapter_name(bn, sizeof bn, k, 'B');
        float *a = get_param(s, an, RANK * IN), *b = get_param(s, bn, k_out[k] * RANK);
        int a_ok = 1, b_zero = 1;
        for (int i = 0; i < RANK * IN; i++) a_ok &= fabsf(a[i]) <= 1.0f / sqrtf((float)IN) && a[i] != 0.0f;
        for (int i = 0; i < k_out[k] * RANK; i++) b_zero &= b[i] == 0.0f;
        CU_ASSERT(a_ok);
        CU_ASSERT(b_zero);
        n_lora += RANK * IN + k_out[k] * RANK;
        free(a);
        free(b);
    }
    fp8run_param_bytes pb = {.struct_size = sizeof pb};
    OK(fp8run_session_param_bytes(s, &pb));
    CU_ASSERT_EQUAL(pb.trained, n_lora);
    CU_ASSERT_EQUAL(pb.trained_bytes, n_lora * 16); /* fp32 weight, gradient, AdamW's two moments */
    CU_ASSERT_EQUAL(pb.frozen, n_base);
    CU_ASSERT_EQUAL(pb.frozen_bytes, n_base * 4);
    OK(fp8run_session_param_bytes(base, &pb));
    CU_ASSERT_EQUAL(pb.trained, n_base);
    CU_ASSERT_EQUAL(pb.frozen, 0);
    /* the same seed draws the same A */
    fp8run_session *s2 = new_session(m, RANK, "q_proj|v_proj", 1e-3);
    char an[200];
    adapter_name(an, sizeof an, 3, 'A');
    float *a1 = get_param(s, an, RANK * IN), *a2 = get_param(s2, an, RANK * IN);
    CU_ASSERT_EQUAL(memcmp(a1, a2, RANK * IN * sizeof(float)), 0);
    free(a1);
    free(a2);
    fp8run_session_destroy(s2);
    /* training lowers the loss of the batch it trains on */
    double first = step(s), last = first;
    for (int i = 0; i < 30; i++) last = step(s);
    CU_ASSERT(last < first - 0.05);
    printf("\n  loss %.4f -> %.4f after 31 LoRA steps ", first, last);
    /* refusals name what is wrong */
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.batch = B;
    c.seq_len = T;
    c.lora_rank = 4;
    c.lora_targets = "no_such_module";
    fp8run_session *bad = NULL;
    CU_ASSERT_NOT_EQUAL(fp8run_session_create(m, "cpu", &c, &bad), FP8RUN_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "matches no Linear"));
    c.lora_targets = "q_proj(";
    CU_ASSERT_NOT_EQUAL(fp8run_session_create(m, "cpu", &c, &bad), FP8RUN_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "--lora-targets"));
    c.lora_targets = "q_proj";
    c.lora_dropout = 1;
    CU_ASSERT_NOT_EQUAL(fp8run_session_create(m, "cpu", &c, &bad), FP8RUN_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "--lora-dropout 1: must be in [0, 1)"));
    c.lora_dropout = 0;
    c.lora_targets = NULL;
    CU_ASSERT_NOT_EQUAL(fp8run_session_create(m, "cpu", &c, &bad), FP8RUN_OK);
    CU_ASSERT_PTR_NULL(bad);
    CU_ASSERT_NOT_EQUAL(fp8run_session_export_adapter(base, cli_path("none")), FP8RUN_OK);
    fp8run_session_destroy(s);
    fp8run_session_destroy(base);
    fp8run_model_destroy(m);
}

/* ---- --lora-dropout through the C API ---- */

static int count_keyed(const fr_graph *g, int *n_ratio, float ratio)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        float r;
        uint64_t st;
        if (strcmp(g->nodes[i].op_type, "KeyedDropout") != 0) continue;
        n++;
        if (fr_keyed_dropout_params(&g->nodes[i], &r, &st) == FR_OK && r == ratio) (*n_ratio)++;
    }
    return n;
}

static void test_dropout_session(void)
{
    fp8run_model *m = hf_load_model();
    fp8run_session *plain = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    g_dropout = 0.1;
    fp8run_session *s = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    g_recompute = "full"; /* the backward's copies of the dropouts replay their masks */
    fp8run_session *s2 = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    g_recompute = "none";
    g_dropout = 0;
    /* one dropout per adapter in the training graph, each its own stream; none in evaluation */
    const fr_trainer *t = s->t;
    int n_ratio = 0, n_eval_ratio = 0;
    /* forward, and the backward of layer 1's (layer 0's input needs no gradient: all is frozen) */
    CU_ASSERT_EQUAL(count_keyed(t->g, &n_ratio, 0.1f), N_ADAPTERS + 2);
    CU_ASSERT_EQUAL(n_ratio, N_ADAPTERS + 2);
    CU_ASSERT_EQUAL(count_keyed(t->eval_g, &n_eval_ratio, 0.1f), 0);
    for (int i = 0; i < t->eval_g->n_inputs; i++)
        CU_ASSERT_STRING_NOT_EQUAL(t->eval_g->values[t->eval_g->inputs[i]].name, FR_DROPOUT_KEY_INPUT);
    uint64_t streams[N_ADAPTERS];
    int ns = 0;
    for (int i = 0; i < t->g->n_nodes && ns < N_ADAPTERS; i++) {
        float r;
        if (strcmp(t->g->nodes[i].op_type, "KeyedDropout") == 0 && strstr(t->g->nodes[i].name, "/lora_dropout") &&
            strstr(t->g->nodes[i].name, "_grad") == NULL)
            FR_ASSERT_OK(fr_keyed_dropout_params(&t->g->nodes[i], &r, &streams[ns++]));
    }
    CU_ASSERT_EQUAL_FATAL(ns, N_ADAPTERS);
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < i; j++) CU_ASSERT(streams[i] != streams[j]);
    int n_copies = 0;
    CU_ASSERT(count_keyed(s2->t->g, &n_copies, 0.1f) > N_ADAPTERS + 2); /* recomputed copies */
    /* B = 0: the first loss is the base model's whatever the mask; then dropout moves the losses,
       the same seed the same way (recomputed or not) */
    double lp[6], l1[6], l2[6];
    for (int i = 0; i < 6; i++) {
        lp[i] = step(plain);
        l1[i] = step(s);
        l2[i] = step(s2);
    }
    CU_ASSERT_EQUAL(l1[0], lp[0]);
    CU_ASSERT_EQUAL(memcmp(l1, l2, sizeof l1), 0);
    int moved = 0;
    for (int i = 1; i < 6; i++) moved += l1[i] != lp[i];
    CU_ASSERT(moved >= 4);
    CU_ASSERT(l1[5] < l1[0]); /* it trains */
    printf("\n  with dropout 0.1: loss %.4f -> %.4f (without: %.4f -> %.4f) ", l1[0], l1[5], lp[0], lp[5]);
    /* training draws masks, evaluation does not: a step's loss is not the eval loss of the same
       weights and batch with dropout, and is without */
    double e = hf_eval(s), ep = hf_eval(plain);
    CU_ASSERT(step(s) != e);
    CU_ASSERT_EQUAL(step(plain), ep);
    /* the adapter records it */
    OK(fp8run_session_export_adapter(s, cli_path("dropout_adapter")));
    char *cfg = cli_slurp(cli_path("dropout_adapter/adapter_config.json"), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg, "\"lora_dropout\": 0.1"));
    free(cfg);
    fp8run_session_destroy(s2);
    fp8run_session_destroy(s);
    fp8run_session_destroy(plain);
    fp8run_model_destroy(m);
}

/* ---- on an fp8 / bf16 base ---- */

static void test_low_precision_base(void)
{
    fp8run_model *m = hf_load_model();
    /* bf16: the frozen base Linears are the base run's bf16 GEMMs, the adapters add exact
       zeros: the same first loss (without narrowing: the base's fused Q/K/V, read by the fused
       attention alone, would write bf16, the adapted one, read by its adapter's Add, not) */
    g_narrow = 0;
    fp8run_session *b16 = new_session_prec(m, 0, NULL, 1e-2, "bf16");
    fp8run_session *l16 = new_session_prec(m, RANK, "q_proj|v_proj", 1e-2, "bf16");
    g_narrow = 1;
    double lb = hf_eval(b16), ll = hf_eval(l16);
    CU_ASSERT_EQUAL(lb, ll);
    fp8run_session_destroy(b16);
    fp8run_session_destroy(l16);
    /* fp8: the 15 frozen base Linears are compiled (fp8 between the bf16 ends), unfused, and
       stay frozen; the adapters' GEMMs are bf16 */
    fp8run_session *s = new_session_prec(m, RANK, "q_proj|v_proj", 1e-2, "fp8");
    CU_ASSERT_EQUAL(fp8run_session_param_count(s), 2 * N_ADAPTERS);
    fp8run_report *r = NULL;
    OK(fp8run_session_report(s, &r));
    int n_base_fp8 = 0, n_adapter_fp8 = 0, n_base = 0;
    for (int i = 0; i < fp8run_report_layer_count(r); i++) {
        fp8run_layer_info li = {.struct_size = sizeof li};
        OK(fp8run_report_layer(r, i, &li));
        int adapter = strstr(li.weights, ".lora_") != NULL, fp8 = strcmp(li.precision, "fp8") == 0;
        n_base += !adapter;
        n_base_fp8 += !adapter && fp8;
        n_adapter_fp8 += adapter && fp8;
        if (!adapter) CU_ASSERT_EQUAL(li.n_fused, 1);
    }
    CU_ASSERT_EQUAL(n_base, 15);
    CU_ASSERT_EQUAL(n_base_fp8, 13); /* bf16_boundary 1: the first (q_proj) and last (LM head) */
    CU_ASSERT_EQUAL(n_adapter_fp8, 0);
    fp8run_report_destroy(r);
    double first = step(s), last = first;
    for (int i = 0; i < 30; i++) last = step(s);
    CU_ASSERT(isfinite(last) && last < first - 0.05);
    printf("\n  fp8 base: loss %.4f -> %.4f after 31 LoRA steps ", first, last);
    /* the A of q_proj and v_proj share their input: fused into one bf16 GEMM, exported apart */
    OK(fp8run_session_export_adapter(s, cli_path("fp8_adapter")));
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(cli_path("fp8_adapter/adapter_model.safetensors"), &f));
    CU_ASSERT_EQUAL(f->n, 2 * N_ADAPTERS);
    char an[200];
    adapter_name(an, sizeof an, 1, 'A');
    const fr_st_tensor *t = fr_st_find(f, an);
    CU_ASSERT_FATAL(t && t->dims[0] == RANK && t->dims[1] == IN);
    float *want = get_param(s, an, RANK * IN), got[RANK * IN];
    FR_ASSERT_OK(fr_st_read_f32(f, t, got));
    CU_ASSERT_EQUAL(memcmp(want, got, sizeof got), 0);
    free(want);
    fr_st_close(f);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* ---- exports ---- */

static void test_export_adapter(void)
{
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    for (int i = 0; i < 3; i++) step(s);
    const char *dir = cli_path("adapter");
    OK(fp8run_session_export_adapter(s, dir));
    char p[700];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(p, &f));
    CU_ASSERT_EQUAL(f->n, 2 * N_ADAPTERS);
    for (int k = 0; k < N_ADAPTERS; k++)
        for (int j = 0; j < 2; j++) {
            char name[200];
            adapter_name(name, sizeof name, k, j ? 'B' : 'A');
            const fr_st_tensor *t = fr_st_find(f, name);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            int64_t d0 = j ? k_out[k] : RANK, d1 = j ? RANK : IN;
            CU_ASSERT(t->dtype == FR_F32 && t->rank == 2 && t->dims[0] == d0 && t->dims[1] == d1);
            float *want = get_param(s, name, d0 * d1), *got = malloc((size_t)(d0 * d1) * sizeof *got);
            FR_ASSERT_OK(fr_st_read_f32(f, t, got));
            CU_ASSERT_EQUAL(memcmp(want, got, (size_t)(d0 * d1) * sizeof *got), 0);
            int nonzero = 0;
            for (int64_t i = 0; i < d0 * d1; i++) nonzero |= got[i] != 0.0f;
            CU_ASSERT(nonzero); /* trained: B moved away from zero */
            free(want);
            free(got);
        }
    fr_st_close(f);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    char *cfg = cli_slurp(p, NULL);
    const char *want[] = {"\"peft_type\": \"LORA\"", "\"r\": 4,", "\"lora_alpha\": 8,", "\"lora_dropout\": 0,",
                          "\"bias\": \"none\"", "\"task_type\": \"CAUSAL_LM\"", "\"base_model_name_or_path\": null"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!strstr(cfg, want[i])) printf("\n  adapter_config.json lacks %s:\n%s", want[i], cfg);
        CU_ASSERT_PTR_NOT_NULL(strstr(cfg, want[i]));
    }
    for (int k = 0; k < N_ADAPTERS; k++) {
        char q[200];
        snprintf(q, sizeof q, "\"%s\"", k_modules[k]);
        CU_ASSERT_PTR_NOT_NULL(strstr(cfg, q));
    }
    CU_ASSERT_PTR_NULL(strstr(cfg, "k_proj"));
    free(cfg);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

static float *read_logits(const char *path, int64_t n)
{
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_npy_load(path, &t));
    CU_ASSERT_FATAL(t->dtype == FR_F32 && fr_tensor_numel(t) == n);
    float *out = malloc((size_t)n * sizeof *out);
    memcpy(out, t->data, (size_t)n * sizeof *out);
    fr_tensor_free(t);
    return out;
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        s += (double)b[i] * b[i];
    }
    return sqrt(d / s);
}

static void merged_export(void)
{
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    for (int i = 0; i < 5; i++) step(s);
    hf_eval(s);
    const int64_t n = (int64_t)B * T * V;
    float *want = malloc((size_t)n * sizeof *want);
    OK(fp8run_session_eval_output(s, NULL, NULL, want, (size_t)n));
    OK(fp8run_session_export(s, cli_path("merged.onnx")));
    OK(fp8run_session_export(s, cli_path("merged2.onnx"))); /* exporting twice merges once */
    /* the windows' first T tokens are the model's input */
    int64_t dims[2] = {B, T};
    fr_tensor *ids;
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 2, dims, "input_ids", &ids));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) ((int64_t *)ids->data)[b * T + t] = hf_win[b * (T + 1) + t];
    FR_ASSERT_OK(fr_npy_save(cli_path("ids.npy"), ids));
    fr_tensor_free(ids);
    CLI_EXPECT(cli_run("run merged.onnx --input input_ids=ids.npy --output-dir out"), 0, cli_out, "");
    CLI_EXPECT(cli_run("run merged2.onnx --input input_ids=ids.npy --output-dir out2"), 0, cli_out, "");
    char p[512];
    CLI_EXPECT(cli_run("run '%s' --input input_ids=ids.npy --output-dir outb", fr_fixture(p, sizeof p, MODEL)), 0,
               cli_out, "");
    float *got = read_logits(cli_path("out/logits.npy"), n), *got2 = read_logits(cli_path("out2/logits.npy"), n);
    float *base = read_logits(cli_path("outb/logits.npy"), n);
    double err = rel_l2(got, want, n), moved = rel_l2(base, want, n);
    printf("\n  merged export vs adapter model: rel L2 %.3g (base model: %.3g) ", err, moved);
    CU_ASSERT(err <= 1e-5);
    CU_ASSERT(moved > 1e-3); /* the adapters changed the model: the check is not trivial */
    CU_ASSERT_EQUAL(memcmp(got, got2, (size_t)n * sizeof *got), 0);
    free(want);
    free(got);
    free(got2);
    free(base);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* the merged model reproduces the eval logits, also after training with dropout (evaluation
   and export have none) */
static void test_merged_export(void)
{
    merged_export();
    g_dropout = 0.2;
    merged_export();
    g_dropout = 0;
}

/* ---- checkpoints ---- */

static void resume(void)
{
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    for (int i = 0; i < 3; i++) step(s);
    OK(fp8run_session_save(s, cli_path("lora.ckpt"), NULL));
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = step(s);
    fp8run_session *r = new_session(m, RANK, "q_proj|v_proj", 1e-2);
    OK(fp8run_session_load(r, cli_path("lora.ckpt"), NULL));
    CU_ASSERT_EQUAL(fp8run_session_steps_done(r), 3);
    for (int i = 0; i < 4; i++) {
        double got = step(r);
        CU_ASSERT_EQUAL(memcmp(&got, &want[i], sizeof got), 0);
    }
    for (int k = 0; k < N_ADAPTERS; k++) {
        char bn[200];
        adapter_name(bn, sizeof bn, k, 'B');
        float *b1 = get_param(s, bn, k_out[k] * RANK), *b2 = get_param(r, bn, k_out[k] * RANK);
        CU_ASSERT_EQUAL(memcmp(b1, b2, (size_t)(k_out[k] * RANK) * sizeof *b1), 0);
        free(b1);
        free(b2);
    }
    /* a run without LoRA does not take a LoRA checkpoint silently */
    fp8run_session *plain = new_session(m, 0, NULL, 1e-2);
    CU_ASSERT_NOT_EQUAL(fp8run_session_load(plain, cli_path("lora.ckpt"), NULL), FP8RUN_OK);
    fp8run_session_destroy(plain);
    fp8run_session_destroy(r);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* bit-exact, also with dropout (the masks of the resumed steps those of the uninterrupted run)
   over two micro-batches per step */
static void test_resume(void)
{
    resume();
    g_dropout = 0.1;
    g_accum = 2;
    resume();
    g_dropout = 0;
    g_accum = 1;
}

/* ---- the CLI ---- */

static void test_cli(void)
{
    char model[512], tokens[512];
    fr_fixture(model, sizeof model, MODEL);
    fr_fixture(tokens, sizeof tokens, "hf/tokens.bin");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 2 --batch 2 --seq 11 --lr 1e-2 --device cpu --lora-rank 4 "
                       "--lora-alpha 8 --lora-targets 'q_proj|v_proj' --export-adapter cliad --export cli.onnx",
                       model, tokens),
               0, cli_err, "16.0 bytes per trained parameter, 145K frozen at 4.0 bytes each");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "exported adapter"));
    size_t len = 0;
    free(cli_slurp(cli_path("cliad/adapter_model.safetensors"), &len));
    CU_ASSERT(len > 8 * 1000);
    /* resumed: the same losses as one run of 4 steps; the checkpoint exports merged */
    const char *lora = "--batch 2 --seq 11 --lr 1e-2 --device cpu --lora-rank 4 --lora-alpha 8 --lora-targets "
                       "'q_proj|v_proj' --data-order sequential";
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 4 %s --log full.jsonl --export full.onnx", model, tokens, lora),
               0, cli_out, "trained");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 2 %s --ckpt-dir ck --log part.jsonl", model, tokens, lora), 0,
               cli_out, "trained");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 4 %s --ckpt-dir ck --resume --log part.jsonl", model, tokens,
                       lora),
               0, cli_err, "resumed");
    double full[4], part[4];
    int n_val = 0;
    CU_ASSERT_EQUAL(cli_read_log(cli_path("full.jsonl"), full, 4, &n_val, NULL), 4);
    CU_ASSERT_EQUAL(cli_read_log(cli_path("part.jsonl"), part, 4, &n_val, NULL), 4);
    CU_ASSERT_EQUAL(memcmp(full, part, sizeof full), 0);
    CLI_EXPECT(cli_run("export ck/step_00000004.ckpt --model '%s' -o fromckpt.onnx", model), 0, cli_out, "exported");
    size_t l1 = 0, l2 = 0;
    char *e1 = cli_slurp(cli_path("full.onnx"), &l1), *e2 = cli_slurp(cli_path("fromckpt.onnx"), &l2);
    CU_ASSERT(l1 > 0 && l1 == l2 && memcmp(e1, e2, l1) == 0); /* merged the same way, byte for byte */
    free(e1);
    free(e2);
    /* --init-from with LoRA loads the frozen base (into the model, before the session) */
    char weights[512];
    fr_fixture(weights, sizeof weights, "hf/llama_safetensors");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 %s --init-from '%s'", model, tokens, lora, weights), 0, cli_err,
               "21 parameters loaded, 0 missing");
    /* --lora-dropout 0.1: trains, records it, resumes to the losses of one run */
    const char *drop = "--batch 2 --seq 11 --lr 1e-2 --device cpu --lora-rank 4 --lora-alpha 8 --lora-targets "
                       "'q_proj|v_proj' --data-order sequential --lora-dropout 0.1 --grad-accum 2";
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 4 %s --log dfull.jsonl --export-adapter dad", model, tokens,
                       drop),
               0, cli_out, "trained");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 2 %s --ckpt-dir dck --log dpart.jsonl", model, tokens, drop), 0,
               cli_out, "trained");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 4 %s --ckpt-dir dck --resume --log dpart.jsonl", model, tokens,
                       drop),
               0, cli_err, "resumed");
    CU_ASSERT_EQUAL(cli_read_log(cli_path("dfull.jsonl"), full, 4, &n_val, NULL), 4);
    CU_ASSERT_EQUAL(cli_read_log(cli_path("dpart.jsonl"), part, 4, &n_val, NULL), 4);
    CU_ASSERT_EQUAL(memcmp(full, part, sizeof full), 0);
    char *cfg = cli_slurp(cli_path("dad/adapter_config.json"), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(cfg, "\"lora_dropout\": 0.1"));
    free(cfg);
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-2 --device cpu --lora-rank 4 "
                       "--lora-targets q_proj --lora-dropout 1",
                       model, tokens),
               1, cli_err, "--lora-dropout 1: must be in [0, 1)");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-2 --device cpu "
                       "--export-adapter x",
                       model, tokens),
               1, cli_err, "no LoRA");
}

static CU_TestInfo tests[] = {
    {"gradcheck", test_gradcheck},
    {"gradcheck_dropout", test_gradcheck_dropout},
    {"fixture_pass", test_fixture_pass},
    {"dropout_session", test_dropout_session},
    {"low_precision_base", test_low_precision_base},
    {"export_adapter", test_export_adapter},
    {"merged_export", test_merged_export},
    {"resume", test_resume},
    {"cli", test_cli},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"lora", hf_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
