/* The training step replayed from a CUDA graph (FP8RUN_CUDA_GRAPH=1, runtime/cuda/cuda_graph.h)
 * against the same step queued node by node (FP8RUN_CUDA_GRAPH=0). Label gpu: skips without a
 * device.
 *
 * A generated Llama (2 layers, d 64, GQA, vocab 256) trains 12 steps (batch 2 x seq 16, random
 * tokens and seed from the test's rng) twice on the GPU, with FP8RUN_GEMM_TUNE=0 and
 * --attention fp8run so that both runs make the same choices: once node by node, once with
 * the graph. Asserted, per configuration (fp8 delayed, bf16, fp8 delayed with 2 micro-batches
 * per step, fp8 delayed with --recompute full, fp8 current scaling, LoRA on fp8 with the frozen
 * base held as codes only and dropout 0.1 on the adapters' input):
 *  (a) every step's loss, and an evaluation loss after training, are bit-identical;
 *  (b) every parameter after training is bit-identical (byte compare);
 *  (c) the graph was really used: every run but the first was captured or replayed, with one
 *      capture (two with 2 micro-batches, run with the weight cache on: one run converts the
 *      weights, the other does not, and each replays its own; the rest keep no copies, at the
 *      default for one micro-batch a step), and the weight-conversion counter (cuda_kernel.h:
 *      weight_casts) moves the same as node by node (no extra conversions).
 * And the default (auto): the graph replays a step of one micro-batch, is off with --grad-accum 2
 * (whose gradients then add up in place) and under FP8RUN_PROFILE; another value is an error
 * that names it. */
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/trainer.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h"
#include "runtime/train/train_internal.h"
#endif

#define STEPS 12

#ifdef FP8RUN_HAVE_CUDA
typedef struct cfg {
    const char *precision, *recipe, *recompute;
    int k, lora;
} cfg;

typedef struct result {
    double loss[STEPS], eval;
    float **params;
    int64_t *numel;
    int n_params;
    long long casts, captures, replays;
    char note[256];
} result;

static void run(const fr_graph *g, const cfg *c, uint64_t seed, int graph, result *r)
{
    setenv("FP8RUN_CUDA_GRAPH", graph ? "1" : "0", 1);
    setenv("FP8RUN_GEMM_TUNE", "0", 1);
    /* micro-batches: a capture per state of the weight cache is part of what is compared, so it
       is on (the options configure one micro-batch, which would turn it off); the others run at
       the default, the copies made in scratch by every captured run */
    if (c->k > 1) setenv("FP8RUN_WEIGHT_CACHE", "1", 1);
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = c->precision;
    if (c->recipe) o.fp8.recipe = c->recipe;
    if (c->recompute) o.recompute = c->recompute;
    o.device = "cuda";
    o.attention = "fp8run";
    o.lr.max_lr = 1e-2;
    o.seed = seed;
    if (c->lora) {
        o.lora.rank = 4;
        o.lora.alpha = 8;
        o.lora.targets = "proj";
        o.lora.dropout = 0.1; /* KeyedDropout: its key {seed, step, micro-batch} is an input */
    }
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, &o, &t);
    unsetenv("FP8RUN_CUDA_GRAPH");
    unsetenv("FP8RUN_GEMM_TUNE");
    unsetenv("FP8RUN_WEIGHT_CACHE");
    FR_ASSERT_OK(st);
    const int64_t per = 2 * 17, n = per * c->k;
    int64_t *w = malloc((size_t)n * sizeof *w);
    fr_rng rng = {seed};
    for (int i = 0; i < STEPS; i++) {
        for (int64_t j = 0; j < n; j++) w[j] = (int64_t)(fr_rng_uniform(&rng) * 256);
        fr_train_stats s;
        FR_ASSERT_OK(fr_trainer_step(t, w, c->k, &s));
        r->loss[i] = s.loss;
    }
    for (int64_t j = 0; j < per; j++) w[j] = (int64_t)(fr_rng_uniform(&rng) * 256);
    FR_ASSERT_OK(fr_trainer_eval(t, w, &r->eval));
    free(w);
    r->n_params = fr_trainer_param_count(t);
    r->params = calloc((size_t)r->n_params, sizeof *r->params);
    r->numel = calloc((size_t)r->n_params, sizeof *r->numel);
    for (int i = 0; i < r->n_params; i++) {
        r->numel[i] = fr_trainer_param_numel(t, i);
        r->params[i] = malloc((size_t)r->numel[i] * sizeof(float));
        FR_ASSERT_OK(fr_trainer_get_param(t, fr_trainer_param_name(t, i), r->params[i]));
    }
    r->casts = fr_cuda_train_weight_casts(t->be_state);
    fr_cuda_train_graph(t->be_state, r->note, sizeof r->note, &r->captures, &r->replays);
    fr_trainer_free(t);
}

static void check(const cfg *c, const char *name)
{
    if (!gpu_available()) return;
    fr_llama_config lc = {64, 2, 4, 2, 128, 256, 32, 11};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&lc, &g));
    fr_rng rng = fr_test_rng(name);
    const uint64_t seed = (uint64_t)(fr_rng_uniform(&rng) * 1e9) + 1;
    result *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    run(g, c, seed, 0, a);
    run(g, c, seed, 1, b);
    /* (a) */
    int same_loss = memcmp(a->loss, b->loss, sizeof a->loss) == 0;
    CU_ASSERT(same_loss);
    CU_ASSERT(memcmp(&a->eval, &b->eval, sizeof a->eval) == 0);
    for (int i = 0; !same_loss && i < STEPS; i++)
        fprintf(stderr, "\n  step %d: loss %.9g node by node, %.9g from the graph", i, a->loss[i], b->loss[i]);
    /* (b) */
    CU_ASSERT_EQUAL(a->n_params, b->n_params);
    int differ = 0;
    for (int i = 0; i < a->n_params && i < b->n_params; i++)
        differ += a->numel[i] != b->numel[i] ||
                  memcmp(a->params[i], b->params[i], (size_t)a->numel[i] * sizeof(float)) != 0;
    CU_ASSERT_EQUAL(differ, 0);
    /* (c) */
    const long long runs = (long long)STEPS * c->k;
    printf(" (%s: loss %.4f -> %.4f; %s; conversions %lld / %lld)", name, b->loss[0], b->loss[STEPS - 1], b->note,
           a->casts, b->casts);
    CU_ASSERT_EQUAL(b->captures, c->k > 1 ? 2 : 1);
    CU_ASSERT_EQUAL(b->replays + b->captures, runs - 1); /* the first run alone goes node by node */
    CU_ASSERT_EQUAL(a->casts, b->casts);
    CU_ASSERT_EQUAL(a->captures + a->replays, 0);
    for (int i = 0; i < a->n_params; i++) free(a->params[i]);
    for (int i = 0; i < b->n_params; i++) free(b->params[i]);
    free(a->params);
    free(b->params);
    free(a->numel);
    free(b->numel);
    free(a);
    free(b);
    fr_graph_free(g);
}

/* A trainer at the default FP8RUN_CUDA_GRAPH (unset) with K micro-batches a step, under
   FP8RUN_PROFILE=prof when not NULL: 3 steps, then its captures and replays and in-place params. */
static void run_auto(const fr_graph *g, int k, const char *prof, long long *captures, long long *replays, int *inplace)
{
    unsetenv("FP8RUN_CUDA_GRAPH");
    if (prof) setenv("FP8RUN_PROFILE", prof, 1);
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = "fp8";
    o.grad_accum = k;
    o.device = "cuda";
    o.attention = "fp8run";
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, &o, &t);
    unsetenv("FP8RUN_PROFILE");
    FR_ASSERT_OK(st);
    int64_t w[2 * 17 * 2];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 2 * 17 * k; j++) w[j] = (i * 31 + j * 7) % 256;
        fr_train_stats s;
        FR_ASSERT_OK(fr_trainer_step(t, w, k, &s));
    }
    fr_cuda_train_graph(t->be_state, NULL, 0, captures, replays);
    fr_cuda_grad_inplace_info in;
    fr_cuda_train_grad_inplace(t->be_state, &in);
    *inplace = in.params;
    fr_trainer_free(t);
}

static void test_auto(void)
{
    if (!gpu_available()) return;
    fr_llama_config lc = {64, 2, 4, 2, 128, 256, 32, 11};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&lc, &g));
    long long cap = -1, rep = -1;
    int inplace = -1;
    run_auto(g, 1, NULL, &cap, &rep, &inplace); /* one micro-batch: on */
    CU_ASSERT_EQUAL(cap, 1);
    CU_ASSERT_EQUAL(rep, 1);
    run_auto(g, 2, NULL, &cap, &rep, &inplace); /* two: off, gradients in place */
    CU_ASSERT_EQUAL(cap + rep, 0);
    CU_ASSERT(inplace > 0);
    run_auto(g, 1, "1", &cap, &rep, &inplace); /* profiling: off */
    CU_ASSERT_EQUAL(cap + rep, 0);
    setenv("FP8RUN_CUDA_GRAPH", "yes", 1);
    fr_train_options o;
    fr_train_options_default(&o);
    o.device = "cuda";
    fr_trainer *t = NULL;
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "FP8RUN_CUDA_GRAPH=yes"));
    unsetenv("FP8RUN_CUDA_GRAPH");
    fr_trainer_free(t);
    fr_graph_free(g);
}

static void test_delayed(void) { check(&(cfg){"fp8", "delayed", NULL, 1, 0}, "fp8 delayed"); }
static void test_bf16(void) { check(&(cfg){"bf16", NULL, NULL, 1, 0}, "bf16"); }
static void test_accum(void) { check(&(cfg){"fp8", "delayed", NULL, 2, 0}, "fp8 delayed, 2 micro-batches"); }
static void test_recompute(void) { check(&(cfg){"fp8", "delayed", "full", 1, 0}, "fp8 delayed, recompute full"); }
static void test_current(void) { check(&(cfg){"fp8", "current", NULL, 1, 0}, "fp8 current"); }
static void test_lora(void) { check(&(cfg){"fp8", "delayed", NULL, 1, 1}, "LoRA fp8 delayed, codes only, dropout"); }
#endif

static CU_TestInfo tests[] = {
#ifdef FP8RUN_HAVE_CUDA
    {"fp8 delayed: graph replay == node by node, bit for bit", test_delayed},
    {"bf16: the same", test_bf16},
    {"fp8 delayed, gradient accumulation 2: the same", test_accum},
    {"fp8 delayed, recompute full: the same", test_recompute},
    {"fp8 current scaling: the same", test_current},
    {"LoRA fp8 delayed (frozen base as codes), dropout 0.1: the same", test_lora},
    {"the default: on for one micro-batch, off for two and under the profiler; bad values named", test_auto},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_cuda_graph", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
