/* Supervised fine-tuning on the GPU against the CPU reference (label gpu: skips without a
 * device): the SFT batches of tests/fixtures/sft (segment ids into the fused attention, target
 * labels, the loss weight of each micro-batch) give the same training on both:
 *  - fp32, llama_tiny and the Hugging Face Llama export, packing on and off, 1 and 2
 *    micro-batches: losses within 1e-3 relative over 10 steps, weights within 1e-3 (rel L2);
 *  - fp8 (delayed): the mean loss of the last 5 of 10 steps within 2%, no step skipped;
 *  - evaluation packed and unpacked of the same examples agrees on the GPU (1e-4).
 * The tolerances are test_gpu_train's: the GEMMs and attention sum in another order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "graph/onnx_io.h"
#include "runtime/io/data.h"
#include "runtime/train/trainer.h"

#define MAXW (2 * 2 * 64)

static fr_graph *load(const char *rel)
{
    char p[600];
    fr_graph *g = NULL;
    if (fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g) != FR_OK) printf("\n  %s\n", fr_last_error());
    return g;
}

static fr_data_loader *open_sft(const char *rel, int64_t B, int64_t T, int packing)
{
    char p[600];
    fr_data_opts d = fr_data_opts_default();
    d.batch = B;
    d.seq_len = T;
    d.order = FR_DATA_SEQUENTIAL;
    d.packing = packing;
    fr_data_loader *dl = NULL;
    if (fr_data_open(fr_fixture(p, sizeof p, rel), &d, &dl) != FR_OK) printf("\n  %s\n", fr_last_error());
    return dl;
}

static fr_train_options options(int64_t B, int64_t T, int k, const char *precision, const char *device, int packing)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.grad_accum = k;
    o.precision = precision;
    o.device = device;
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.fp8_fast_accum = 0; /* the exact path: the CPU cannot emulate fast accumulation */
    o.sft = 1;
    o.sft_padded = !packing;
    return o;
}

/* 10 steps of trainer t on the file's batches; losses into out. */
static void run(fr_trainer *t, const char *data, int k, int packing, double *out)
{
    const int64_t B = fr_trainer_batch(t), T = fr_trainer_seq_len(t), per = B * (T + 1);
    fr_data_loader *dl = open_sft(data, B, T, packing);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    int64_t w[MAXW];
    int32_t seg[MAXW];
    uint8_t tgt[MAXW];
    CU_ASSERT_FATAL(k * per <= MAXW);
    for (int s = 0; s < 10; s++) {
        for (int m = 0; m < k; m++) FR_ASSERT_OK(fr_data_next_sft(dl, w + m * per, seg + m * per, tgt + m * per, NULL));
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step_sft(t, w, seg, tgt, k, &st));
        CU_ASSERT_FALSE(st.skipped);
        out[s] = st.loss;
    }
    fr_data_close(dl);
}

static void check(const char *model, const char *data, int64_t B, int64_t T, int k, const char *precision, int packing)
{
    fr_graph *g = load(model);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options oc = options(B, T, k, precision, "cpu", packing), og = options(B, T, k, precision, "cuda", packing);
    fr_trainer *tc, *tg;
    FR_ASSERT_OK(fr_trainer_new(g, &oc, &tc));
    FR_ASSERT_OK(fr_trainer_new(g, &og, &tg));
    double lc[10], lg[10], worst = 0, mc = 0, mg = 0;
    run(tc, data, k, packing, lc);
    run(tg, data, k, packing, lg);
    for (int i = 0; i < 10; i++) {
        double r = fabs(lg[i] - lc[i]) / fabs(lc[i]);
        if (!(r <= worst)) worst = r;
        if (i >= 5) mc += lc[i] / 5, mg += lg[i] / 5;
    }
    double pd = gpu_params_rel_diff(tg, tc);
    printf(" (%s %s packing %s k=%d: worst loss rel diff %.2e, last-5 means %.4f / %.4f, weights rel L2 %.2e)", model,
           precision, packing ? "on" : "off", k, worst, mc, mg, pd);
    if (strcmp(precision, "fp32") == 0) {
        CU_ASSERT(worst <= 1e-3);
        CU_ASSERT(pd <= 1e-3);
    } else {
        CU_ASSERT(fabs(mg - mc) / mc <= 0.02);
    }
    fr_trainer_free(tc);
    fr_trainer_free(tg);
    fr_graph_free(g);
}

static void test_fp32_llama_packed(void) { check("llama_tiny/model.onnx", "sft/llama_sft.bin", 2, 13, 1, "fp32", 1); }
static void test_fp32_llama_padded_accum(void) { check("llama_tiny/model.onnx", "sft/llama_sft.bin", 2, 13, 2, "fp32", 0); }
static void test_fp32_hf_packed(void)
{
    check("hf/llama_op18_dynamic/model.onnx", "sft/hf_chat.bin", 2, 63, 1, "fp32", 1);
}
static void test_fp8_llama_packed(void) { check("llama_tiny/model.onnx", "sft/llama_sft.bin", 2, 13, 2, "fp8", 1); }

/* Packed and unpacked evaluation of the whole file on the GPU: the same target-token loss. */
static void test_eval_packed_equals_unpacked(void)
{
    fr_graph *g = load("llama_tiny/model.onnx");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(1, 13, 1, "fp32", "cuda", 1);
    o.eval_only = 1;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    double mean[2];
    for (int packing = 0; packing < 2; packing++) {
        fr_data_loader *dl = open_sft("sft/llama_sft.bin", 1, 13, packing);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        double sum = 0;
        int64_t total = 0;
        for (int64_t b = 0; b < fr_data_batches_per_epoch(dl); b++) {
            int64_t w[14], n;
            int32_t seg[14];
            uint8_t tgt[14];
            double loss;
            FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, NULL));
            FR_ASSERT_OK(fr_trainer_eval_sft(t, w, seg, tgt, &loss, &n));
            sum += loss * (double)n;
            total += n;
        }
        mean[packing] = sum / (double)total;
        fr_data_close(dl);
    }
    printf(" (GPU eval: unpacked %.7f, packed %.7f)", mean[0], mean[1]);
    CU_ASSERT(fabs(mean[0] - mean[1]) <= 1e-4 * fabs(mean[0]));
    fr_trainer_free(t);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"fp32 llama_tiny packed: GPU == CPU", test_fp32_llama_packed},
    {"fp32 llama_tiny padded, 2 micro-batches: GPU == CPU", test_fp32_llama_padded_accum},
    {"fp32 HF Llama export on real chat data, packed: GPU == CPU", test_fp32_hf_packed},
    {"fp8 delayed llama_tiny packed, 2 micro-batches: GPU tracks CPU", test_fp8_llama_packed},
    {"GPU eval: packed == unpacked", test_eval_packed_equals_unpacked},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {{"gpu_sft", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return gpu_test_main(suites); }
