/* Memory prediction (runtime/train/train_memory.h, fp8run_model_predict_memory) against what a real
 * CPU trainer of the same configuration allocates: the executor's pool (the same planner, run
 * without allocating), the optimizer's state arena, the gradient buffers and the parameters,
 * each equal to the byte. Configurations: llama_tiny FP32 AdamW, fp8 with fp8 moments (fused
 * parameters), bf16 with bf16 moments and 2 micro-batches, SGD with momentum. Also: the fp8
 * moments take 2 x (n + 4 ceil(n / 128)) bytes per parameter (each slot 4-byte aligned), and the
 * public call answers the same as the internal one. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h"
#endif

static fr_graph *load_llama(void)
{
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    return g;
}

static void check(const fr_graph *g, const fr_train_options *o, const char *what)
{
    fr_train_memory m;
    FR_ASSERT_OK(fr_train_predict_memory(g, o, 0, &m));
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, o, &t));
    size_t numel = 0, expect_state = 0;
    for (int i = 0; i < t->n_params; i++) {
        numel += (size_t)t->params[i].numel;
        size_t n = (size_t)t->params[i].numel;
        if (o->opt.state_dtype == FR_OPT_STATE_FP8) expect_state += 2 * (((n + 3) & ~(size_t)3) + 4 * ((n + 127) / 128));
    }
    CU_ASSERT_EQUAL(m.activations, fr_exec_pool_bytes(tr_cpu_exec(t)));
    CU_ASSERT_EQUAL(m.optimizer_state, fr_optimizer_state_bytes(t->optim));
    CU_ASSERT_EQUAL(m.grads, numel * sizeof(float));
    CU_ASSERT_EQUAL(m.params, numel * sizeof(float));
    if (o->opt.state_dtype == FR_OPT_STATE_FP8) CU_ASSERT_EQUAL(m.optimizer_state, expect_state);
    CU_ASSERT(m.inputs >= (size_t)(o->batch * o->seq_len) * sizeof(int64_t));
    CU_ASSERT_EQUAL(m.total, m.params + m.grads + m.optimizer_state + m.activations + m.inputs);
    char text[512];
    fr_train_memory_text(&m, text, sizeof text);
    printf("\n    %s: pool %zu B (planned %zu B), state %zu B; %s", what, fr_exec_pool_bytes(tr_cpu_exec(t)), m.activations,
           m.optimizer_state, text);
    fr_trainer_free(t);
}

static fr_train_options base(void)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 13;
    return o;
}

static void test_prediction_equals_allocation(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = base();
    check(g, &o, "fp32");
    o.precision = o.fp8.precision = "fp8";
    o.opt.state_dtype = FR_OPT_STATE_FP8;
    check(g, &o, "fp8, fp8 moments");
    o = base();
    o.precision = o.fp8.precision = "bf16";
    o.opt.state_dtype = FR_OPT_STATE_BF16;
    o.grad_accum = 2;
    o.batch = 3;
    check(g, &o, "bf16, bf16 moments, B3 K2");
    o = base();
    o.opt = fr_opt_config_sgd();
    o.opt.momentum = 0.9;
    check(g, &o, "SGD momentum");
    fr_graph_free(g);
}

static void test_public_call(void)
{
    char p[600];
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &m), FP8RUN_OK);
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.batch = 2;
    c.seq_len = 13;
    c.optimizer_state = "fp8";
    fp8run_memory_report r = {.struct_size = sizeof r};
    CU_ASSERT_EQUAL(fp8run_model_predict_memory(m, &c, "cpu", &r), FP8RUN_OK);
    fr_graph *g = load_llama();
    fr_train_options o = base();
    o.opt.state_dtype = FR_OPT_STATE_FP8;
    fr_train_memory mm;
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 0, &mm));
    CU_ASSERT_EQUAL(r.gpu, 0);
    CU_ASSERT_EQUAL(r.activations_peak[0], '\0'); /* the GPU plan's text only */
    CU_ASSERT_STRING_EQUAL(r.backward_passes, mm.backward_passes); /* the passes after autodiff, a line each */
    CU_ASSERT(strncmp(r.backward_passes, "narrow_gradients: ", 18) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.backward_passes, "\nfp8_producers: "));
    CU_ASSERT_EQUAL(r.total, mm.total);
    CU_ASSERT_EQUAL(r.optimizer_state, mm.optimizer_state);
    CU_ASSERT_EQUAL(fp8run_model_predict_memory(m, &c, "tpu", &r), FP8RUN_ERR_INVALID_ARG);
    c.batch = 4; /* activations grow with the batch, the rest does not */
    fp8run_memory_report r4 = {.struct_size = sizeof r4};
    CU_ASSERT_EQUAL(fp8run_model_predict_memory(m, &c, "cpu", &r4), FP8RUN_OK);
    CU_ASSERT(r4.activations > r.activations);
    CU_ASSERT_EQUAL(r4.optimizer_state, r.optimizer_state);
    /* a caller built before activations_peak: nothing written past its struct_size */
    unsigned char raw[sizeof(fp8run_memory_report)];
    memset(raw, 0xAB, sizeof raw);
    fp8run_memory_report *old = (fp8run_memory_report *)(void *)raw;
    old->struct_size = offsetof(fp8run_memory_report, activations_peak);
    CU_ASSERT_EQUAL(fp8run_model_predict_memory(m, &c, "cpu", old), FP8RUN_OK);
    CU_ASSERT_EQUAL(old->total, r4.total);
    int untouched = 1;
    for (size_t k = offsetof(fp8run_memory_report, activations_peak); k < sizeof raw; k++) untouched &= raw[k] == 0xAB;
    CU_ASSERT(untouched);
    fr_graph_free(g);
    fp8run_model_destroy(m);
}

#ifdef FP8RUN_HAVE_CUDA
/* the GPU plan tests' options: fp8, seq 16 */
static fr_train_options gpu_fp8_base(void)
{
    fr_train_options o = base();
    o.precision = o.fp8.precision = "fp8";
    o.seq_len = 16;
    return o;
}
#endif

/* The GPU plan's weight cache (tr_weight_cache): with one micro-batch a step nothing keeps the
 * weights' fp8 codes between runs (each run follows a weight change: they are made in scratch),
 * which takes less memory in all, recomputation included; with two or FP8RUN_WEIGHT_CACHE=1
 * the codes are kept (the same bytes whatever grad_accum is); FP8RUN_WEIGHT_CACHE=0 keeps none. A
 * plan needs no device, only the CUDA backend compiled in. */
static void test_gpu_weight_cache(void)
{
#ifndef FP8RUN_HAVE_CUDA
    printf(" (skipped: built without the CUDA backend)");
#else
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = gpu_fp8_base();
    fr_train_memory one, two, forced, rec, none;
    unsetenv("FP8RUN_WEIGHT_CACHE");
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &one));
    o.grad_accum = 2;
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &two));
    setenv("FP8RUN_WEIGHT_CACHE", "0", 1);
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &none));
    o.grad_accum = 1;
    setenv("FP8RUN_WEIGHT_CACHE", "1", 1);
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &forced));
    unsetenv("FP8RUN_WEIGHT_CACHE");
    o.recompute = "mlp";
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &rec));
    CU_ASSERT_EQUAL(one.fp8_weights, 0);
    CU_ASSERT_EQUAL(none.fp8_weights, 0);
    CU_ASSERT(two.fp8_weights > 0);
    CU_ASSERT_EQUAL(forced.fp8_weights, two.fp8_weights);
    CU_ASSERT_EQUAL(rec.fp8_weights, 0); /* recomputation alone: a recomputed Linear converts again */
    /* the codes in scratch cost one node's at a time, never all of them */
    CU_ASSERT(one.activations >= forced.activations);
    CU_ASSERT(one.total < forced.total);
    printf(" (fp8 codes kept: %zu B with K=2, 0 with K=1; total %zu B against %zu with the cache forced on)",
           two.fp8_weights, one.total, forced.total);
    fr_graph_free(g);
#endif
}

/* The CUDA graph's default (FP8RUN_CUDA_GRAPH auto: runtime/cuda/cuda_train.h) and what it does to
 * the GPU plan: with 2 micro-batches auto leaves the graph off, so the weight gradients still add
 * up in place and the plan is FP8RUN_CUDA_GRAPH=0's; =1 turns that off (a capture fixes each GEMM's
 * beta), which makes the plan larger; with one micro-batch auto turns the graph on (a run of one
 * micro-batch accumulates nothing, so the plan is the same either way). An unknown value is an error naming it, in the plan as in the trainer. */
static void test_gpu_graph_default(void)
{
#ifndef FP8RUN_HAVE_CUDA
    printf(" (skipped: built without the CUDA backend)");
#else
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = gpu_fp8_base();
    o.grad_accum = 2;
    fr_train_memory autom, off, on;
    int want = -1;
    unsetenv("FP8RUN_CUDA_GRAPH");
    FR_ASSERT_OK(fr_cuda_train_graph_wanted(&o, &want));
    CU_ASSERT_EQUAL(want, 0);
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &autom));
    setenv("FP8RUN_CUDA_GRAPH", "0", 1);
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &off));
    setenv("FP8RUN_CUDA_GRAPH", "1", 1);
    FR_ASSERT_OK(fr_cuda_train_graph_wanted(&o, &want));
    CU_ASSERT_EQUAL(want, 1);
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &on));
    CU_ASSERT_EQUAL(autom.total, off.total);
    CU_ASSERT_EQUAL(autom.grads, off.grads);
    /* forced on: the accumulation buffer takes the bytes the held gradients took, and each
       micro-batch's gradients are the arena's outputs besides, until the pass adds them: a larger
       plan (at the 8B shape, B1 x K4, 120 GiB measured against 105) */
    CU_ASSERT_EQUAL(on.grads, off.grads);
    CU_ASSERT(on.total > off.total);
    setenv("FP8RUN_CUDA_GRAPH", "yes", 1);
    fr_train_memory bad;
    CU_ASSERT_EQUAL(fr_train_predict_memory(g, &o, 1, &bad), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "FP8RUN_CUDA_GRAPH=yes"));
    unsetenv("FP8RUN_CUDA_GRAPH");
    o.grad_accum = 1;
    FR_ASSERT_OK(fr_cuda_train_graph_wanted(&o, &want));
    CU_ASSERT_EQUAL(want, 1);
    o.world_size = 2; /* data parallel: off */
    FR_ASSERT_OK(fr_cuda_train_graph_wanted(&o, &want));
    CU_ASSERT_EQUAL(want, 0);
    o.world_size = 0;
    setenv("FP8RUN_PROFILE", "2", 1); /* the profiler times every node: off */
    FR_ASSERT_OK(fr_cuda_train_graph_wanted(&o, &want));
    unsetenv("FP8RUN_PROFILE");
    CU_ASSERT_EQUAL(want, 0);
    printf(" (K=2 plan: %zu B with the graph default or off, %zu B with it forced on)", off.total, on.total);
    fr_graph_free(g);
#endif
}

static CU_TestInfo tests[] = {
    {"prediction == what a CPU trainer allocates", test_prediction_equals_allocation},
    {"fp8run_model_predict_memory", test_public_call},
    {"GPU plan: the weight cache only where a run reuses it", test_gpu_weight_cache},
    {"GPU plan: the CUDA graph's default keeps gradients in place with micro-batches", test_gpu_graph_default},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"train_memory", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
