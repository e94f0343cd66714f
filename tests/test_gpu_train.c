/* Whole training steps on the GPU against the CPU reference (label gpu: skips without a device).
 *
 *  - FP32: every fixture model (GPT-2 folded and unfolded, Llama at opsets 17 and 14, BERT)
 *    trains 20 steps on the same batches on both devices; every step's loss within 1e-3
 *    relative, and the trained weights (read back through fr_trainer_get_param) within 1e-3
 *    relative L2.
 *  - BF16 and FP8 (delayed, current, block) on llama_tiny: the GPU run tracks the CPU run of
 *    the same precision: mean loss of the last 5 of 30 steps within 2%, no step skipped.
 *  - LoRA (q_proj|v_proj adapters on the transformers Llama fixture): FP32 as above, only
 *    the adapters trained; FP8 delayed (the frozen base compiled to fp8) tracking the CPU as
 *    above.
 *  - Gradient accumulation (2 micro-batches) and a checkpoint written on the GPU that the CPU
 *    loads and continues (and the other way) with matching losses.
 *  - Steps queued without waiting (fr_trainer_step_async, polled every 5 steps) give the same
 *    statistics as fr_trainer_step bit for bit, poisoned batches (token 0's embedding row NaN)
 *    included: skipped inside the queue exactly as in sync mode and on the CPU, the later
 *    updates' bias correction from the device's step count, the same weights at the end.
 *  - The weight cache (the FP8 cast / bf16 copy of W done once per optimizer step): 2 micro-
 *    batches per step, an evaluation and a set_param between steps give losses, evaluation
 *    losses and weights bit-identical to the same run with the cache off (FP8RUN_WEIGHT_CACHE=0),
 *    for bf16 and the three fp8 recipes; with it on, each Linear and LinearGradData node converts
 *    its weight once per step for k = 1 and k = 4 (k times with it off). On GPT-NeoX (biased
 *    Linears with a bfloat16 Y, whose bf16 bias copies are kept with W's) the same, with a
 *    set_param on a bias, in bf16 and fp8 current.
 *  - Recomputation (--recompute attention|mlp|full) converts the weights as often as none (the
 *    recomputed Linears share their forward's codes) and gives the losses and weights of --recompute
 *    none bit for bit on the GPU, in fp32, bf16 and fp8 (delayed, current, block).
 * The tolerance is loose because the GEMMs sum in another order (cuBLASLt vs the CPU's
 * fixed order); the kernels themselves are checked op by op in test_gpu_<family>. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuse_test_util.h"
#include "tests/gpu_harness.h"
#include "graph/onnx_io.h"
#include "ops/linear.h"
#include "runtime/train/trainer.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h" /* the weight-cast counter */
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"
#endif

static fr_graph *load(const char *name)
{
    char p[600], rel[128];
    snprintf(rel, sizeof rel, "%s/model.onnx", name);
    fr_graph *g = NULL;
    fr_status st = fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g);
    if (st != FR_OK) printf("\n  %s\n", fr_last_error());
    return g;
}

static fr_train_options options(int64_t B, int64_t T, const char *precision, const char *device)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.precision = precision;
    o.device = device;
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.fp8_fast_accum = 0; /* the exact path: the CPU cannot emulate fast accumulation */
    return o;
}

/* Train `steps` steps (k micro-batches each) from a fixed batch stream; losses into out. */
static void run(fr_trainer *t, int steps, int k, uint64_t seed, double *out)
{
    int64_t B = fr_trainer_batch(t), T = fr_trainer_seq_len(t), V = fr_trainer_vocab(t);
    int64_t n = (int64_t)k * B * (T + 1);
    int64_t *w = malloc((size_t)n * sizeof *w);
    uint64_t s = seed;
    for (int i = 0; i < steps; i++) {
        gpu_windows(&s, w, n, V);
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, k, &st));
        CU_ASSERT_FALSE(st.skipped);
        if (st.skipped) printf("\n  step %d skipped: %s", i, st.reason);
        out[i] = st.loss;
    }
    free(w);
}

/* lora (may be NULL): the same with LoRA adapters (passes/lora.h), which are then the
 * trained parameters compared */
static void check_fp32_lora(const char *name, int64_t B, int64_t T, const fr_lora_options *lora)
{
    fr_graph *g = load(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options oc = options(B, T, "fp32", "cpu"), og = options(B, T, "fp32", "cuda");
    if (lora) oc.lora = og.lora = *lora;
    fr_trainer *tc, *tg;
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg));
    double lc[20], lg[20], worst = 0;
    run(tc, 20, 1, 77, lc);
    run(tg, 20, 1, 77, lg);
    for (int i = 0; i < 20; i++) {
        double r = fabs(lg[i] - lc[i]) / fabs(lc[i]);
        if (r > worst) worst = r;
    }
    double pd = gpu_params_rel_diff(tg, tc);
    printf(" (%s%s on %s: worst loss rel diff %.2e over 20 steps, weights rel L2 %.2e)", name, lora ? " LoRA" : "",
           fr_trainer_device(tg), worst, pd);
    CU_ASSERT(worst <= 1e-3);
    CU_ASSERT(pd <= 1e-3);
    if (lora) { /* only the adapters train, on both devices */
        CU_ASSERT_EQUAL(fr_trainer_param_count(tg), fr_trainer_param_count(tc));
        for (int i = 0; i < fr_trainer_param_count(tg); i++) CU_ASSERT_PTR_NOT_NULL(strstr(fr_trainer_param_name(tg, i), ".lora_"));
    }
    fr_trainer_free(tc);
    fr_trainer_free(tg);
    fr_graph_free(g);
}

static void check_fp32(const char *name, int64_t B, int64_t T) { check_fp32_lora(name, B, T, NULL); }

static void test_fp32_lora(void)
{
    fr_lora_options lo = {.rank = 4, .alpha = 8, .targets = "q_proj|v_proj"};
    check_fp32_lora("hf/llama_op18_static", 2, 11, &lo);
}

static void test_fp32_gpt2(void) { check_fp32("gpt2_tiny", 2, 11); }
static void test_fp32_gpt2_op13(void) { check_fp32("gpt2_tiny_op13", 1, 5); }
static void test_fp32_llama(void) { check_fp32("llama_tiny", 2, 13); }
static void test_fp32_llama_op14(void) { check_fp32("llama_tiny_op14", 2, 7); }
static void test_fp32_bert(void) { check_fp32("bert_tiny", 2, 9); }

/* lora (may be NULL): LoRA adapters on a frozen base the FP8 compiler converts too */
static void check_precision_on(const char *name, int64_t B, int64_t T, const char *precision, const char *recipe,
                               const fr_lora_options *lora)
{
    fr_graph *g = load(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options oc = options(B, T, precision, "cpu"), og = options(B, T, precision, "cuda");
    if (recipe) oc.fp8.recipe = og.fp8.recipe = recipe;
    if (lora) oc.lora = og.lora = *lora;
    fr_trainer *tc, *tg;
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg));
    double lc[30], lg[30], mc = 0, mg = 0;
    run(tc, 30, 1, 99, lc);
    run(tg, 30, 1, 99, lg);
    for (int i = 25; i < 30; i++) {
        mc += lc[i] / 5;
        mg += lg[i] / 5;
    }
    double rel = fabs(mg - mc) / mc;
    printf(" (%s%s%s: last-5 mean loss CPU %.4f GPU %.4f, rel %.2e; first %.4f / %.4f)", precision, recipe ? "/" : "",
           recipe ? recipe : "", mc, mg, rel, lc[0], lg[0]);
    CU_ASSERT(rel <= 0.02);
    CU_ASSERT(fabs(lg[0] - lc[0]) / lc[0] <= 1e-2); /* the first step's loss is the forward pass */
    fr_trainer_free(tc);
    fr_trainer_free(tg);
    fr_graph_free(g);
}

static void check_precision(const char *precision, const char *recipe)
{
    check_precision_on("llama_tiny", 4, 32, precision, recipe, NULL);
}

static void test_fp8_lora(void)
{
    fr_lora_options lo = {.rank = 4, .alpha = 8, .targets = "q_proj|v_proj"};
    check_precision_on("hf/llama_op18_static", 2, 11, "fp8", "delayed", &lo);
}

static void test_bf16(void) { check_precision("bf16", NULL); }
static void test_fp8_delayed(void) { check_precision("fp8", "delayed"); }
static void test_fp8_current(void) { check_precision("fp8", "current"); }
static void test_fp8_block(void) { check_precision("fp8", "block"); }

/* accumulation and checkpoints crossing devices */
static void test_accum_and_ckpt(void)
{
    fr_graph *g = load("llama_tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options oc = options(2, 13, "fp8", "cpu"), og = options(2, 13, "fp8", "cuda");
    fr_trainer *tc, *tg, *tc2, *tg2;
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg));
    double lc[6], lg[6];
    run(tc, 3, 2, 5, lc);
    run(tg, 3, 2, 5, lg);
    for (int i = 0; i < 3; i++) CU_ASSERT(fabs(lg[i] - lc[i]) / lc[i] <= 2e-2);
    char dir[512], pg[600], pc[600];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(pg, sizeof pg, "%s/gpu.ckpt", dir);
    snprintf(pc, sizeof pc, "%s/cpu.ckpt", dir);
    FR_ASSERT_OK(fr_trainer_save(tg, pg, NULL, 0));
    FR_ASSERT_OK(fr_trainer_save(tc, pc, NULL, 0));
    /* GPU checkpoint -> CPU trainer, CPU checkpoint -> GPU trainer; both continue */
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc2));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg2));
    FR_ASSERT_OK(fr_trainer_load(tc2, pg, NULL, NULL));
    FR_ASSERT_OK(fr_trainer_load(tg2, pc, NULL, NULL));
    CU_ASSERT(gpu_params_rel_diff(tc2, tg) <= 1e-6);  /* the GPU's weights arrived on the CPU */
    CU_ASSERT(gpu_params_rel_diff(tg2, tc) <= 1e-6);  /* and the other way */
    run(tc2, 3, 2, 11, lc + 3);
    run(tg, 3, 2, 11, lg + 3);
    for (int i = 3; i < 6; i++) CU_ASSERT(fabs(lg[i] - lc[i]) / lc[i] <= 2e-2);
    printf(" (k=2 fp8 losses CPU %.4f..%.4f, GPU %.4f..%.4f)", lc[0], lc[5], lg[0], lg[5]);
    unlink(pg);
    unlink(pc);
    rmdir(dir);
    fr_trainer_free(tc);
    fr_trainer_free(tg);
    fr_trainer_free(tc2);
    fr_trainer_free(tg2);
    fr_graph_free(g);
}

/* token 0's embedding row NaN: a batch holding token 0 is skipped, the others never read it */
static void poison_token0(fr_trainer *t)
{
    for (int i = 0; i < fr_trainer_param_count(t); i++) {
        const char *name = fr_trainer_param_name(t, i);
        int64_t n = fr_trainer_param_numel(t, i);
        if (strcmp(name, "embed_tokens.weight") != 0) continue; /* llama_tiny: [V, 64] */
        float *x = malloc((size_t)n * sizeof *x);
        FR_ASSERT_OK(fr_trainer_get_param(t, name, x));
        for (int64_t e = 0; e < 64; e++) x[e] = NAN; /* row 0 */
        FR_ASSERT_OK(fr_trainer_set_param(t, name, x));
        free(x);
        return;
    }
    CU_FAIL("no embedding table");
}

static void poisoned_windows(uint64_t *s, int64_t *w, int64_t n, int64_t vocab, int poisoned)
{
    gpu_windows(s, w, n, vocab - 1);
    for (int64_t i = 0; i < n; i++) w[i] += 1;
    if (poisoned) w[3] = 0;
}

static int same_stats(const fr_train_stats *a, const fr_train_stats *b)
{
    return a->step == b->step && memcmp(&a->loss, &b->loss, sizeof a->loss) == 0 &&
           memcmp(&a->grad_norm, &b->grad_norm, sizeof a->grad_norm) == 0 && a->lr == b->lr &&
           a->skipped == b->skipped && a->bad_in_a_row == b->bad_in_a_row && strcmp(a->reason, b->reason) == 0;
}

static void check_async(const char *precision, const char *recipe)
{
    enum { N = 16 };
    fr_graph *g = load("llama_tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options og = options(4, 32, precision, "cuda"), oc = options(4, 32, precision, "cpu");
    if (recipe) og.fp8.recipe = oc.fp8.recipe = recipe;
    fr_trainer *ts, *ta, *tc;
    FR_ASSERT_OK(fr_trainer_new(g, &og, &ts));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &ta));
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    poison_token0(ts);
    poison_token0(ta);
    poison_token0(tc);
    const int64_t n = 4 * 33, V = fr_trainer_vocab(ts);
    int64_t w[4 * 33];
    fr_train_stats a[N], b[N], c[N];
    uint64_t r = 4242;
    int nb = 0, skipped = 0, diff = 0, cpu_skip_diff = 0;
    for (int i = 0; i < N; i++) {
        const int poisoned = i == 3 || i == 7 || i == 8;
        poisoned_windows(&r, w, n, V, poisoned);
        FR_ASSERT_OK(fr_trainer_step(ts, w, 1, &a[i]));
        FR_ASSERT_OK(fr_trainer_step(tc, w, 1, &c[i]));
        int64_t idx;
        FR_ASSERT_OK(fr_trainer_step_async(ta, w, 1, &idx));
        CU_ASSERT_EQUAL(idx, i);
        if ((i + 1) % 5 == 0 || i == N - 1) {
            int got = 1;
            while (fr_trainer_queued(ta) > 0 && got) FR_ASSERT_OK(fr_trainer_poll(ta, 1, &b[nb++], &got));
        }
    }
    CU_ASSERT_EQUAL_FATAL(nb, N);
    for (int i = 0; i < N; i++) {
        diff += !same_stats(&a[i], &b[i]);
        skipped += b[i].skipped;
        cpu_skip_diff += b[i].skipped != c[i].skipped;
        if (!same_stats(&a[i], &b[i]))
            printf("\n  step %d: sync %.9g %.9g %d '%s', async %.9g %.9g %d '%s'", i, a[i].loss, a[i].grad_norm,
                   a[i].skipped, a[i].reason, b[i].loss, b[i].grad_norm, b[i].skipped, b[i].reason);
    }
    CU_ASSERT_EQUAL(diff, 0);
    CU_ASSERT_EQUAL(skipped, 3);
    CU_ASSERT_EQUAL(cpu_skip_diff, 0);
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(ta), 3);
    CU_ASSERT_EQUAL(fr_optimizer_step_count(fr_trainer_optimizer(ta)), N - 3);
    CU_ASSERT_EQUAL(fr_optimizer_step_count(fr_trainer_optimizer(ts)), N - 3);
    /* the weights bit for bit (get_param reads the device's) */
    int wdiff = 0;
    for (int i = 0; i < fr_trainer_param_count(ts); i++) {
        const char *name = fr_trainer_param_name(ts, i);
        int64_t m = fr_trainer_param_numel(ts, i);
        float *x = malloc((size_t)m * sizeof *x), *y = malloc((size_t)m * sizeof *y);
        FR_ASSERT_OK(fr_trainer_get_param(ts, name, x));
        FR_ASSERT_OK(fr_trainer_get_param(ta, name, y));
        wdiff += memcmp(x, y, (size_t)m * sizeof *x) != 0;
        free(x);
        free(y);
    }
    CU_ASSERT_EQUAL(wdiff, 0);
    printf(" (%s%s%s: %d steps, %d skipped (CPU agrees: %s), sync == async: %s; loss %.4f -> %.4f)", precision,
           recipe ? "/" : "", recipe ? recipe : "", N, skipped, cpu_skip_diff ? "no" : "yes", diff || wdiff ? "NO" : "yes",
           b[0].loss, b[N - 1].loss);
    fr_trainer_free(ts);
    fr_trainer_free(ta);
    fr_trainer_free(tc);
    fr_graph_free(g);
}

static void test_async_fp32(void) { check_async("fp32", NULL); }
static void test_async_fp8(void) { check_async("fp8", "delayed"); }

/* Every recompute mode == none bit for bit: 5 steps' losses, then every weight. */
static void check_recompute(const char *precision, const char *recipe)
{
    static const char *const modes[] = {"none", "attention", "mlp", "full"};
    enum { STEPS = 5, M = 4 };
    fr_graph *g = load("llama_tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_trainer *t[M] = {0};
    double loss[M][STEPS];
    long long casts[M];
    size_t codes[M];
    for (int m = 0; m < M; m++) {
        fr_train_options o = options(2, 16, precision, "cuda");
        if (recipe) o.fp8.recipe = recipe;
        o.recompute = modes[m];
        /* --recompute turns the residual-norm fusion off, and the narrowed norm outputs with it:
           off in mode none too, so the comparison is recompute's alone (test_recompute) */
        o.fuse_residual_norm = 0;
        setenv("FP8RUN_WEIGHT_CACHE", "1", 1); /* what is compared: the kept copies' sharing */
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t[m]));
        unsetenv("FP8RUN_WEIGHT_CACHE");
        run(t[m], STEPS, 1, 91, loss[m]);
#ifdef FP8RUN_HAVE_CUDA
        /* a recomputed Linear reuses its forward's weight codes (one copy, converted once per
           step): the same conversions and the same predicted codes as without recomputation */
        casts[m] = fr_cuda_train_weight_casts(t[m]->be_state);
        fr_train_memory pm;
        FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &pm));
        codes[m] = pm.fp8_weights;
        CU_ASSERT_EQUAL(casts[m], casts[0]);
        CU_ASSERT_EQUAL(codes[m], codes[0]);
#else
        casts[m] = 0;
        codes[m] = 0;
#endif
    }
    printf(" (weight casts in %d steps: %lld none, %lld full; codes %zu B)", STEPS, casts[0], casts[M - 1], codes[0]);
    int diff = 0;
    for (int m = 1; m < M; m++) {
        int ld = memcmp(loss[m], loss[0], sizeof loss[0]) != 0;
        int wd = gpu_params_rel_diff(t[m], t[0]) != 0;
        if (ld || wd) printf("\n  %s: losses %s, weights %s", modes[m], ld ? "DIFFER" : "same", wd ? "DIFFER" : "same");
        diff += ld + wd;
    }
    CU_ASSERT_EQUAL(diff, 0);
    printf(" (%s%s%s: attention, mlp, full == none bit for bit: %s)", precision, recipe ? "/" : "", recipe ? recipe : "",
           diff ? "NO" : "yes");
    for (int m = 0; m < M; m++) fr_trainer_free(t[m]);
    fr_graph_free(g);
}

static void test_recompute_fp32(void) { check_recompute("fp32", NULL); }
static void test_recompute_bf16(void) { check_recompute("bf16", NULL); }
static void test_recompute_delayed(void) { check_recompute("fp8", "delayed"); }
static void test_recompute_current(void) { check_recompute("fp8", "current"); }
static void test_recompute_block(void) { check_recompute("fp8", "block"); }

#ifdef FP8RUN_HAVE_CUDA
/* A GPU trainer with the weight cache on or off (FP8RUN_WEIGHT_CACHE, read when the trainer
 * makes its CUDA context; unset, one micro-batch a step would turn it off). */
static fr_trainer *gpu_trainer(const fr_graph *g, const fr_train_options *o, int cache)
{
    setenv("FP8RUN_WEIGHT_CACHE", cache ? "1" : "0", 1);
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, o, &t);
    unsetenv("FP8RUN_WEIGHT_CACHE");
    FR_ASSERT_OK(st);
    return t;
}

static int is_const_input(const fr_graph *g, const fr_node *nd, int slot)
{
    return slot < nd->n_inputs && nd->inputs[slot] >= 0 && g->values[nd->inputs[slot]].constant;
}

/* Linear / LinearGradData nodes of the training graph in bf16/fp8 (they convert W every run):
 * *kept: those whose W (and delayed scale_w) are constants, which keep W's conversion. */
static int converting_nodes(const fr_trainer *t, int *kept)
{
    const fr_graph *g = t->g;
    int n = 0;
    *kept = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead || strcmp(nd->domain, "ai.fp8run") != 0) continue;
        int fwd = strcmp(nd->op_type, "Linear") == 0;
        if (!fwd && strcmp(nd->op_type, "LinearGradData") != 0) continue;
        const char *prec = "fp32", *recipe = "delayed";
        FR_ASSERT_OK(fr_node_attr_string(nd, "precision", "fp32", &prec));
        FR_ASSERT_OK(fr_node_attr_string(nd, "recipe", "delayed", &recipe));
        if (strcmp(prec, "fp32") == 0) continue;
        n++;
        int delayed = strcmp(prec, "fp8") == 0 && strcmp(recipe, "delayed") == 0;
        if (is_const_input(g, nd, 1) && (!delayed || is_const_input(g, nd, fwd ? 4 : 2))) (*kept)++;
    }
    return n;
}

/* Halve the first weight matrix through set_param (the host changes a parameter mid-run). */
static void halve_a_weight(fr_trainer *t)
{
    for (int i = 0; i < fr_trainer_param_count(t); i++) {
        const char *name = fr_trainer_param_name(t, i);
        if (!strstr(name, "MatMul")) continue; /* llama_tiny: "onnx::MatMul_576" (q_proj), ... */
        int64_t n = fr_trainer_param_numel(t, i);
        float *x = malloc((size_t)n * sizeof *x);
        FR_ASSERT_OK(fr_trainer_get_param(t, name, x));
        for (int64_t e = 0; e < n; e++) x[e] *= 0.5f;
        FR_ASSERT_OK(fr_trainer_set_param(t, name, x));
        free(x);
        return;
    }
    CU_FAIL("no MatMul weight");
}

static void check_cache_exact(const char *precision, const char *recipe)
{
    enum { STEPS = 6, K = 2 };
    fr_graph *g = load("llama_tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 16, precision, "cuda");
    if (recipe) o.fp8.recipe = recipe;
    fr_trainer *t[2] = {gpu_trainer(g, &o, 1), gpu_trainer(g, &o, 0)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(t[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t[1]);
    const int64_t n = (int64_t)K * 2 * 17, V = fr_trainer_vocab(t[0]);
    int64_t w[K * 2 * 17];
    double loss[2][STEPS], ev[2][STEPS];
    for (int c = 0; c < 2; c++) {
        uint64_t r = 77;
        for (int i = 0; i < STEPS; i++) {
            gpu_windows(&r, w, n, V);
            fr_train_stats st;
            FR_ASSERT_OK(fr_trainer_step(t[c], w, K, &st));
            CU_ASSERT_FALSE(st.skipped);
            loss[c][i] = st.loss;
            FR_ASSERT_OK(fr_trainer_eval(t[c], w, &ev[c][i])); /* the eval graph shares the weights */
            if (i == 2) halve_a_weight(t[c]);                  /* the host changes one */
        }
    }
    int ldiff = memcmp(loss[0], loss[1], sizeof loss[0]) != 0, ediff = memcmp(ev[0], ev[1], sizeof ev[0]) != 0;
    int wdiff = 0;
    for (int i = 0; i < fr_trainer_param_count(t[0]); i++) {
        const char *name = fr_trainer_param_name(t[0], i);
        int64_t m = fr_trainer_param_numel(t[0], i);
        float *x = malloc((size_t)m * sizeof *x), *y = malloc((size_t)m * sizeof *y);
        FR_ASSERT_OK(fr_trainer_get_param(t[0], name, x));
        FR_ASSERT_OK(fr_trainer_get_param(t[1], name, y));
        wdiff += memcmp(x, y, (size_t)m * sizeof *x) != 0;
        free(x);
        free(y);
    }
    CU_ASSERT_EQUAL(ldiff, 0);
    CU_ASSERT_EQUAL(ediff, 0);
    CU_ASSERT_EQUAL(wdiff, 0);
    for (int i = 0; ldiff && i < STEPS; i++) printf("\n  step %d: cached %.9g, uncached %.9g", i, loss[0][i], loss[1][i]);
    printf(" (%s%s%s k=%d: cached == uncached: losses %s, eval %s, weights %s; loss %.4f -> %.4f)", precision,
           recipe ? "/" : "", recipe ? recipe : "", K, ldiff ? "NO" : "yes", ediff ? "NO" : "yes", wdiff ? "NO" : "yes",
           loss[0][0], loss[0][STEPS - 1]);
    fr_trainer_free(t[0]);
    fr_trainer_free(t[1]);
    fr_graph_free(g);
}

static void test_cache_bf16(void) { check_cache_exact("bf16", NULL); }
static void test_cache_delayed(void) { check_cache_exact("fp8", "delayed"); }
static void test_cache_current(void) { check_cache_exact("fp8", "current"); }
static void test_cache_block(void) { check_cache_exact("fp8", "block"); }

/* GPT-NeoX (biased Linears whose Y is bfloat16: the bias's bf16 copy kept with W's): k=2 with
 * the cache on == off bit for bit, also after the host halves a bias (set_param); the optimizer
 * changes every bias each step, so a kept copy that missed a change would show. */
static void check_cache_bias(const char *precision, const char *recipe)
{
    enum { STEPS = 4, K = 2 };
    fr_graph *g = fr_ft_open_hf("gpt_neox_op18_static");
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.precision = precision;
    o.device = "cuda";
    if (recipe) o.fp8.recipe = recipe;
    fr_trainer *t[2] = {gpu_trainer(g, &o, 1), gpu_trainer(g, &o, 0)};
    CU_ASSERT_PTR_NOT_NULL_FATAL(t[0]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t[1]);
    int biased = 0;
    for (int i = 0; i < t[0]->g->n_nodes; i++) {
        const fr_node *nd = &t[0]->g->nodes[i];
        biased += !nd->dead && strcmp(nd->op_type, "Linear") == 0 && is_const_input(t[0]->g, nd, FR_LIN_IN_B) &&
                  t[0]->g->values[nd->outputs[0]].dtype == FR_BF16;
    }
    CU_ASSERT(biased > 0);
    const int64_t row = o.seq_len + 1, n = (int64_t)K * o.batch * row, V = fr_trainer_vocab(t[0]);
    int64_t *w = malloc(sizeof(int64_t) * (size_t)n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    double loss[2][STEPS];
    for (int c = 0; c < 2; c++) {
        uint64_t r = 91;
        for (int i = 0; i < STEPS; i++) {
            gpu_windows(&r, w, n, V);
            fr_train_stats st;
            FR_ASSERT_OK(fr_trainer_step(t[c], w, K, &st));
            CU_ASSERT_FALSE(st.skipped);
            loss[c][i] = st.loss;
            if (i == 1) { /* the host halves an up projection's bias (its Y is bfloat16) */
                int found = 0;
                for (int p = 0; p < fr_trainer_param_count(t[c]) && !found; p++) {
                    const char *name = fr_trainer_param_name(t[c], p);
                    if (!strstr(name, "dense_h_to_4h.bias")) continue;
                    found = 1;
                    int64_t m = fr_trainer_param_numel(t[c], p);
                    float *x = malloc((size_t)m * sizeof *x);
                    FR_ASSERT_OK(fr_trainer_get_param(t[c], name, x));
                    for (int64_t e = 0; e < m; e++) x[e] *= 0.5f;
                    FR_ASSERT_OK(fr_trainer_set_param(t[c], name, x));
                    free(x);
                }
                CU_ASSERT(found);
            }
        }
    }
    const int ldiff = memcmp(loss[0], loss[1], sizeof loss[0]) != 0;
    CU_ASSERT_EQUAL(ldiff, 0);
    for (int i = 0; ldiff && i < STEPS; i++) printf("\n  step %d: cached %.9g, uncached %.9g", i, loss[0][i], loss[1][i]);
    printf(" (%s%s%s NeoX, %d biased bf16-output Linears: cached == uncached %s)", precision, recipe ? "/" : "",
           recipe ? recipe : "", biased, ldiff ? "NO" : "yes");
    free(w);
    fr_trainer_free(t[0]);
    fr_trainer_free(t[1]);
    fr_graph_free(g);
}

static void test_cache_bias_bf16(void) { check_cache_bias("bf16", NULL); }
static void test_cache_bias_current(void) { check_cache_bias("fp8", "current"); }

/* weight conversions per step: once per kept node with the cache, k times without */
static void test_cache_count(void)
{
    fr_graph *g = load("llama_tiny");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 16, "fp8", "cuda");
    for (int cache = 1; cache >= 0; cache--) {
        fr_trainer *t = gpu_trainer(g, &o, cache);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        int kept;
        const int nodes = converting_nodes(t, &kept);
        CU_ASSERT(kept > 0);
        const int64_t V = fr_trainer_vocab(t);
        int64_t w[4 * 2 * 17];
        uint64_t r = 5;
        for (int k = 1; k <= 4; k += 3) {
            long long per_step[2];
            for (int i = 0; i < 2; i++) {
                gpu_windows(&r, w, (int64_t)k * 2 * 17, V);
                long long before = fr_cuda_train_weight_casts(t->be_state);
                fr_train_stats st;
                FR_ASSERT_OK(fr_trainer_step(t, w, k, &st));
                per_step[i] = fr_cuda_train_weight_casts(t->be_state) - before;
            }
            const long long want = (long long)kept * (cache ? 1 : k) + (long long)(nodes - kept) * k;
            CU_ASSERT_EQUAL(per_step[0], want);
            CU_ASSERT_EQUAL(per_step[1], want);
            printf(" (cache %s, k=%d: %lld and %lld weight casts per step; %d nodes convert W, %d keep it)",
                   cache ? "on" : "off", k, per_step[0], per_step[1], nodes, kept);
        }
        fr_trainer_free(t);
    }
    fr_graph_free(g);
}
#endif

static CU_TestInfo tests[] = {
    {"fp32 gpt2_tiny: GPU == CPU (1e-3) for 20 steps", test_fp32_gpt2},
    {"fp32 gpt2_tiny_op13: GPU == CPU", test_fp32_gpt2_op13},
    {"fp32 llama_tiny: GPU == CPU", test_fp32_llama},
    {"fp32 llama_tiny_op14: GPU == CPU", test_fp32_llama_op14},
    {"fp32 bert_tiny: GPU == CPU", test_fp32_bert},
    {"fp32 LoRA on hf llama: GPU == CPU, adapters only", test_fp32_lora},
    {"bf16 llama_tiny: GPU tracks CPU", test_bf16},
    {"fp8 delayed llama_tiny: GPU tracks CPU", test_fp8_delayed},
    {"fp8 current llama_tiny: GPU tracks CPU", test_fp8_current},
    {"fp8 block llama_tiny: GPU tracks CPU", test_fp8_block},
    {"fp8 LoRA (frozen fp8 base) on hf llama: GPU tracks CPU", test_fp8_lora},
    {"accumulation; checkpoints GPU <-> CPU", test_accum_and_ckpt},
    {"fp32: async steps == sync steps bit for bit, skipped steps included", test_async_fp32},
    {"fp8 delayed: async steps == sync steps bit for bit, skipped steps included", test_async_fp8},
    {"recompute fp32: every mode == none bit for bit", test_recompute_fp32},
    {"recompute bf16: every mode == none bit for bit", test_recompute_bf16},
    {"recompute fp8 delayed: every mode == none bit for bit", test_recompute_delayed},
    {"recompute fp8 current: every mode == none bit for bit", test_recompute_current},
    {"recompute fp8 block: every mode == none bit for bit", test_recompute_block},
#ifdef FP8RUN_HAVE_CUDA
    {"weight cache bf16: k=2, eval, set_param: == cache off bit for bit", test_cache_bf16},
    {"weight cache fp8 delayed: == cache off bit for bit", test_cache_delayed},
    {"weight cache fp8 current: == cache off bit for bit", test_cache_current},
    {"weight cache fp8 block: == cache off bit for bit", test_cache_block},
    {"weight cache: one cast per kept node per step at k=1 and k=4 (k without)", test_cache_count},
    {"weight cache bf16 GPT-NeoX: kept bf16 biases, set_param on a bias: == cache off", test_cache_bias_bf16},
    {"weight cache fp8 current GPT-NeoX: kept bf16 biases == cache off", test_cache_bias_current},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_train", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
