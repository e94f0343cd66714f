/* Gradient accumulation in place on the GPU (runtime/cuda/cuda_train.h, FP8RUN_GRAD_ACCUM_INPLACE;
 * label gpu: skips without a device).
 *
 * A generated Llama (d 64, ffn 128, vocab 256: every Linear's dims multiples of 16) trains
 * STEPS steps of K = 3 micro-batches in fp32, bf16 and fp8 (delayed, current, block) twice on
 * the same batches: with the weight-gradient GEMMs adding into the held gradients (the default)
 * and with the separate accumulation pass (FP8RUN_GRAD_ACCUM_INPLACE=0). Asserted:
 *  - the path: on, some parameters are accumulated in place (bf16, fp8; fp32 training rewrites
 *    no Linear, so none there) and their GEMMs added into dW
 *    exactly params x (K - 1) x STEPS times (one GEMM per such parameter per micro-batch after
 *    the first); off, none and no GEMM added (the block recipe's fp8 GEMMs are not eligible,
 *    its bf16/fp32 ones may be: its count is only checked to match);
 *  - the numbers: the first step's loss bit for bit (the same weights), its gradient norm within
 *    1e-5 relative (the same gradients summed in another order: the GEMM's beta = 1 against a
 *    separate float32 add), and every step's loss and the final weights within `tol` relative
 *    (1e-5 fp32/bf16; 1e-3 fp8, where an update differing in the last bits can move a later
 *    quantization step);
 *  - the memory plan (tr_memory_of, what `fp8run info --memory` prints): its gradient buffers
 *    are the accumulation buffer plus the held gradients the trainer allocated, exactly; its
 *    activations the rest of the executor's arena, exactly in fp32 and within 1 MiB + 2% in
 *    bf16/fp8 (their scratch is sized on the device), in both modes; on, the accumulation buffer
 *    is smaller by exactly the in-place parameters' float32 bytes and the whole allocation is
 *    smaller. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/trainer.h"
#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"
#endif

#ifdef FP8RUN_HAVE_CUDA

#define STEPS 4
#define K 3

typedef struct accum_run {
    double loss[STEPS], norm0;
    fr_cuda_grad_inplace_info info;
    fr_train_memory plan;
    size_t inplace_bytes; /* float32 bytes of the parameters accumulated in place */
} accum_run;

/* One run on the GPU, in place (on) or through the separate pass; the trainer is returned for
 * comparing weights (caller frees). */
static fr_trainer *train(const fr_graph *g, const char *precision, const char *recipe, int on, accum_run *r)
{
    memset(r, 0, sizeof *r);
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.grad_accum = K;
    o.precision = precision;
    if (recipe) o.fp8.recipe = recipe;
    o.device = "cuda";
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.fp8_fast_accum = 0;
    o.deterministic = 1; /* the heuristic's GEMM algorithms in both trainers (no timed picks): the
                            same forward, so the first loss compares bit for bit */
    if (!on) setenv("FP8RUN_GRAD_ACCUM_INPLACE", "0", 1);
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, &o, &t);
    /* the plan reads the knob as the trainer did */
    if (st == FR_OK) st = tr_memory_of(t, 1, &r->plan);
    unsigned char *inplace = t ? calloc((size_t)t->n_params + 1, 1) : NULL;
    if (st == FR_OK && inplace) {
        fr_cuda_train_inplace_plan(t, inplace, NULL);
        for (int i = 0; i < t->n_params; i++) r->inplace_bytes += inplace[i] ? (size_t)t->params[i].numel * 4 : 0;
    }
    free(inplace);
    unsetenv("FP8RUN_GRAD_ACCUM_INPLACE");
    FR_ASSERT_OK(st);
    if (st != FR_OK) {
        fr_trainer_free(t);
        return NULL;
    }
    const int64_t n = (int64_t)K * 2 * 17;
    int64_t w[K * 2 * 17];
    uint64_t s = 97531;
    for (int i = 0; i < STEPS; i++) {
        gpu_windows(&s, w, n, 256);
        fr_train_stats ts;
        FR_ASSERT_OK(fr_trainer_step(t, w, K, &ts));
        CU_ASSERT_FALSE(ts.skipped);
        r->loss[i] = ts.loss;
        if (i == 0) r->norm0 = ts.grad_norm;
    }
    fr_cuda_train_grad_inplace(t->be_state, &r->info);
    return t;
}

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 0 ? fabs(b) : 1.0); }

static void check(const char *precision, const char *recipe, double tol)
{
    fr_graph *g = gpu_tiny_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    accum_run a, b;
    fr_trainer *ta = train(g, precision, recipe, 1, &a);
    fr_trainer *tb = train(g, precision, recipe, 0, &b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ta);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    const int block = recipe && strcmp(recipe, "block") == 0;
    /* the path taken (fp32 training rewrites no Linear: its MatMuls' gradients are not
       LinearGradWeight GEMMs, so nothing qualifies there) */
    const int fp32 = strcmp(precision, "fp32") == 0;
    if (!block && !fp32) CU_ASSERT(a.info.params > 0);
    if (fp32) CU_ASSERT_EQUAL(a.info.params, 0);
    CU_ASSERT_EQUAL(a.info.gemms, (long long)a.info.params * (K - 1) * STEPS);
    CU_ASSERT_EQUAL(b.info.params, 0);
    CU_ASSERT_EQUAL(b.info.gemms, 0);
    CU_ASSERT_EQUAL(b.info.held_bytes, 0);
    CU_ASSERT_EQUAL(a.info.acc_bytes + a.inplace_bytes, b.info.acc_bytes);
    CU_ASSERT_EQUAL(b.inplace_bytes, 0);
    /* the numbers */
    CU_ASSERT(memcmp(&a.loss[0], &b.loss[0], sizeof a.loss[0]) == 0);
    CU_ASSERT(rel(a.norm0, b.norm0) <= 1e-5);
    double worst = 0;
    for (int i = 0; i < STEPS; i++)
        if (rel(a.loss[i], b.loss[i]) > worst) worst = rel(a.loss[i], b.loss[i]);
    const double pd = gpu_params_rel_diff(ta, tb);
    CU_ASSERT(worst <= tol);
    CU_ASSERT(pd <= tol);
    /* the plan is what was allocated, in both modes: the gradients exactly; the arena exactly in
       fp32, and in bf16/fp8 within the memory plan's contract (1 MiB + 2%: their attention and
       GEMM scratch is sized on the device, an H200 run showed it off by some bytes in both modes
       alike). In place allocates less in all. */
    const accum_run *r[2] = {&a, &b};
    size_t total[2];
    for (int m = 0; m < 2; m++) {
        CU_ASSERT_EQUAL(r[m]->plan.grads, r[m]->info.acc_bytes + r[m]->info.held_bytes);
        const double planned = (double)(r[m]->plan.activations + r[m]->info.held_bytes),
                     arena = (double)r[m]->info.arena_bytes;
        if (fp32) CU_ASSERT_EQUAL(r[m]->plan.activations + r[m]->info.held_bytes, r[m]->info.arena_bytes);
        CU_ASSERT(fabs(planned - arena) <= 1048576.0 + 0.02 * arena);
        total[m] = r[m]->info.acc_bytes + r[m]->info.arena_bytes;
    }
    if (a.info.params > 0) CU_ASSERT(total[0] < total[1]);
    printf(" (%s%s%s: %d params in place, %lld GEMMs added; losses %.6f..%.6f, worst rel diff %.2e, norm0 %.2e, "
           "weights %.2e; plan in place: grads %zu + activations %zu bytes (arena %zu), separate: %zu + %zu (arena "
           "%zu))",
           precision, recipe ? "/" : "", recipe ? recipe : "", a.info.params, a.info.gemms, a.loss[0],
           a.loss[STEPS - 1], worst, rel(a.norm0, b.norm0), pd, a.plan.grads, a.plan.activations,
           (size_t)a.info.arena_bytes, b.plan.grads, b.plan.activations, (size_t)b.info.arena_bytes);
    fr_trainer_free(ta);
    fr_trainer_free(tb);
    fr_graph_free(g);
}

static void test_fp32(void) { check("fp32", NULL, 1e-5); }
static void test_bf16(void) { check("bf16", NULL, 1e-5); }
static void test_fp8_delayed(void) { check("fp8", "delayed", 1e-3); }
static void test_fp8_current(void) { check("fp8", "current", 1e-3); }
static void test_fp8_block(void) { check("fp8", "block", 1e-3); }

/* one micro-batch per step: nothing is held, no accumulation buffer planned */
static void test_k1(void)
{
    fr_graph *g = gpu_tiny_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = "fp8";
    o.device = "cuda";
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    if (t) {
        fr_cuda_grad_inplace_info info;
        fr_cuda_train_grad_inplace(t->be_state, &info);
        CU_ASSERT_EQUAL(info.params, 0);
        CU_ASSERT_EQUAL(info.held_bytes, 0);
        CU_ASSERT_EQUAL(fr_cuda_train_inplace_plan(t, NULL, NULL), 0);
        fr_train_memory m;
        FR_ASSERT_OK(tr_memory_of(t, 1, &m));
        CU_ASSERT_EQUAL(m.grads, 0);
    }
    fr_trainer_free(t);
    fr_graph_free(g);
}
#endif

static CU_TestInfo tests[] = {
#ifdef FP8RUN_HAVE_CUDA
    {"fp32 K=3: in place == separate pass (1e-5), plan == allocation", test_fp32},
    {"bf16 K=3: in place == separate pass (1e-5), plan == allocation", test_bf16},
    {"fp8 delayed K=3: in place == separate pass (1e-3), plan == allocation", test_fp8_delayed},
    {"fp8 current K=3: in place == separate pass (1e-3), plan == allocation", test_fp8_current},
    {"fp8 block K=3: in place (non-fp8 GEMMs only) == separate pass", test_fp8_block},
    {"K=1: nothing held, no accumulation buffer", test_k1},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_grad_accum", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
