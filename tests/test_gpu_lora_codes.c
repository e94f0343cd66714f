/* LoRA on the GPU with the frozen base held only as its Linears' converted copies
 * (runtime/cuda/cuda_exec.h: a frozen float32 weight that only bf16/fp8 Linear and
 * LinearGradData nodes read gets no device block; its codes are made from the host's values).
 * Label gpu: skips without a device.
 *
 * A generated Llama (2 layers, d 64, GQA, vocab 256) with rank-4 adapters on every projection
 * trains 6 steps (batch 2 x seq 16) on the GPU twice: with FP8RUN_LORA_KEEP_BASE=1 (the float32
 * base on the device too, converted from there) and without (codes only), in fp8 (delayed,
 * current, block) and bf16. Asserted:
 *  (a) every step's loss and an evaluation loss after training are bit-identical (the codes are
 *      the same bytes, made once); in the delayed recipe within 1e-2 instead: the codes-only
 *      base is quantized once with the scale of its own amax, the kept base with the evolving
 *      scale_w state (measured on an H200 before this change: not bit-equal);
 *  (b) the trainer's device bytes (fr_trainer_memory: the executors' own plan) and the memory
 *      prediction's parameter bytes (train_memory.h) both drop by the float32 bytes of the
 *      frozen weights held as codes (within 256 B of alignment per weight), which cover every
 *      projection weight of the model; fr_trainer_param_bytes says the same drop;
 *  (c) the merged export (fr_trainer_export) of both runs is identical initializer by
 *      initializer (not in the delayed recipe: different training), and every frozen weight that no adapter touches equals the model's original
 *      float32 value bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "runtime/train/trainer.h"
#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"
#endif

#define STEPS 6

#ifdef FP8RUN_HAVE_CUDA
typedef struct lora_run {
    double loss[STEPS], eval;
    size_t device_bytes, planned_params;
    fr_param_bytes pb;
    char export_path[96];
} lora_run;

/* One GPU run; keep: FP8RUN_LORA_KEEP_BASE=1 for all of it (the trainer reads it when built and
 * when it reports bytes). */
static void train(const fr_graph *g, const char *precision, const char *recipe, int keep, lora_run *r)
{
    if (keep) setenv("FP8RUN_LORA_KEEP_BASE", "1", 1);
    /* both runs keep the converted copies, so that what differs is the float32 base alone (the
       kept base's trainer would otherwise make them in scratch: one micro-batch, no codes-only) */
    setenv("FP8RUN_WEIGHT_CACHE", "1", 1);
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = precision;
    if (recipe) o.fp8.recipe = recipe;
    o.device = "cuda";
    o.lr.max_lr = 1e-2;
    o.fp8_fast_accum = 0;
    o.lora.rank = 4;
    o.lora.alpha = 8;
    o.lora.targets = "proj";
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    if (!t) {
        unsetenv("FP8RUN_LORA_KEEP_BASE");
        unsetenv("FP8RUN_WEIGHT_CACHE");
        return;
    }
    fr_train_memory m;
    FR_ASSERT_OK(tr_memory_of(t, 1, &m));
    r->planned_params = m.params;
    fr_trainer_param_bytes(t, &r->pb);
    r->device_bytes = fr_trainer_memory(t, NULL, NULL);
    int64_t n = 2 * 17, w[2 * 17];
    uint64_t s = 1234567;
    for (int i = 0; i < STEPS; i++) {
        gpu_windows(&s, w, n, 256);
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &st));
        CU_ASSERT_FALSE(st.skipped);
        r->loss[i] = st.loss;
    }
    gpu_windows(&s, w, n, 256);
    FR_ASSERT_OK(fr_trainer_eval(t, w, &r->eval));
    snprintf(r->export_path, sizeof r->export_path, "/tmp/fr_lora_codes_%d_%d.onnx", (int)getpid(), keep);
    FR_ASSERT_OK(fr_trainer_export(t, r->export_path));
    fr_trainer_free(t);
    unsetenv("FP8RUN_LORA_KEEP_BASE");
    unsetenv("FP8RUN_WEIGHT_CACHE");
}

/* Float32 bytes of the model's projection weights (what --lora-targets proj adapts). */
static int64_t proj_bytes(const fr_graph *g, int *count)
{
    int64_t b = 0;
    *count = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].constant && strstr(g->values[v].name, "proj") && g->values[v].dtype == FR_F32) {
            b += (int64_t)g->values[v].constant->nbytes;
            (*count)++;
        }
    return b;
}

/* (c): the two exports agree; what no adapter touched is the original. */
/* equal: the two runs trained the same adapters (bit for bit), so the merged exports are equal */
static void check_exports(const fr_graph *g, const char *pk, const char *pd, int equal)
{
    fr_graph *ek = NULL, *ed = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(pk, &ek));
    FR_ASSERT_OK(fr_onnx_load_file(pd, &ed));
    if (!ek || !ed) goto done;
    int same = 1, untouched = 0, original = 1, merged = 0;
    for (int v = 0; v < g->n_values; v++) {
        const fr_tensor *c = g->values[v].constant;
        if (!c || c->dtype != FR_F32) continue;
        int vk = fr_graph_find_value(ek, g->values[v].name), vd = fr_graph_find_value(ed, g->values[v].name);
        const fr_tensor *a = vk >= 0 ? ek->values[vk].constant : NULL, *b = vd >= 0 ? ed->values[vd].constant : NULL;
        if (!a || !b || a->nbytes != c->nbytes || b->nbytes != c->nbytes) {
            same = 0;
            continue;
        }
        same &= !equal || memcmp(a->data, b->data, c->nbytes) == 0;
        if (strstr(g->values[v].name, "proj")) {
            merged += memcmp(a->data, c->data, c->nbytes) != 0; /* W + s B A: B trained away from 0 */
        } else {
            untouched++;
            original &= memcmp(b->data, c->data, c->nbytes) == 0;
        }
    }
    printf(" [export: %d untouched weights %s, %d merged differ from the base]", untouched,
           original ? "original" : "CHANGED", merged);
    CU_ASSERT(same);
    CU_ASSERT(original);
    CU_ASSERT(untouched > 0);
    CU_ASSERT(merged > 0);
done:
    fr_graph_free(ek);
    fr_graph_free(ed);
    remove(pk);
    remove(pd);
    char data[128];
    snprintf(data, sizeof data, "%s.data", pk);
    remove(data);
    snprintf(data, sizeof data, "%s.data", pd);
    remove(data);
}

static void check(const char *precision, const char *recipe)
{
    if (!gpu_available()) return;
    fr_graph *g = gpu_tiny_llama();
    if (!g) return;
    lora_run *k = calloc(1, sizeof *k), *d = calloc(1, sizeof *d);
    train(g, precision, recipe, 1, k);
    train(g, precision, recipe, 0, d);
    /* (a) bit for bit, except the delayed recipe: the kept float32 base is quantized with the
       scale_w state (its initial value first, then what the history says), the codes-only base
       once with the scale from its own amax (where that history settles): close, not equal */
    const int dl = recipe && strcmp(recipe, "delayed") == 0;
    if (dl) {
        double worst = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(k->loss[s] - d->loss[s]) / fabs(k->loss[s]));
        printf(" (delayed: losses within %.2e of the kept base's)", worst);
        CU_ASSERT(worst <= 1e-2);
        CU_ASSERT(fabs(k->eval - d->eval) <= 1e-2 * fabs(k->eval));
    } else {
        CU_ASSERT(memcmp(k->loss, d->loss, sizeof k->loss) == 0);
        CU_ASSERT(memcmp(&k->eval, &d->eval, sizeof k->eval) == 0);
    }
    /* (b) */
    int nw;
    const int64_t want = proj_bytes(g, &nw);
    const int64_t said = k->pb.frozen_bytes - d->pb.frozen_bytes;
    const int64_t dev = (int64_t)k->device_bytes - (int64_t)d->device_bytes;
    const int64_t plan = (int64_t)k->planned_params - (int64_t)d->planned_params;
    printf(" (%s%s%s: loss %.4f -> %.4f, eval %.4f; device bytes %.1f -> %.1f KiB, drop %lld, planned drop %lld, "
           "reported %lld, projections %lld in %d; frozen %.2f -> %.2f bytes/parameter)",
           precision, recipe ? "/" : "", recipe ? recipe : "", d->loss[0], d->loss[STEPS - 1], d->eval,
           k->device_bytes / 1024.0, d->device_bytes / 1024.0, (long long)dev, (long long)plan, (long long)said,
           (long long)want, nw, k->pb.frozen ? (double)k->pb.frozen_bytes / (double)k->pb.frozen : 0.0,
           d->pb.frozen ? (double)d->pb.frozen_bytes / (double)d->pb.frozen : 0.0);
    CU_ASSERT(said >= want);
    CU_ASSERT(dev >= said && dev <= said + 256 * (int64_t)(nw + 8));
    CU_ASSERT(plan == dev);
    /* (c) */
    check_exports(g, k->export_path, d->export_path, !dl);
    free(k);
    free(d);
    fr_graph_free(g);
}

static void test_delayed(void) { check("fp8", "delayed"); }
static void test_current(void) { check("fp8", "current"); }
static void test_block(void) { check("fp8", "block"); }
static void test_bf16(void) { check("bf16", NULL); }
#endif

static CU_TestInfo tests[] = {
#ifdef FP8RUN_HAVE_CUDA
    {"LoRA fp8 delayed: codes-only base == float32 base kept, bit for bit; memory; export", test_delayed},
    {"LoRA fp8 current: the same", test_current},
    {"LoRA fp8 block: the same", test_block},
    {"LoRA bf16: the same", test_bf16},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_lora_codes", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
