/* Models as users bring them: tiny Hugging Face architectures exported by torch 2.11's dynamo
 * exporter at opsets 18 and 23 (tests/fixtures/hf, written by tools/gen_hf_exports.py), run and
 * trained through the fp8run CLI exactly as a user would, against PyTorch:
 *   - `fp8run run` reproduces PyTorch's logits (relative L2 <= 1e-4);
 *   - 20 AdamW steps in fp32 (`--data-order sequential`) follow PyTorch's losses (each step's
 *     loss within 1e-4 relative) with no step skipped;
 *   - on the Llama fixture, 300 FP8 steps track 300 fp32 steps (final loss within 1%).
 * Each fixture is its own CUnit test, so a failure names the architecture, opset and style. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"
#include "runtime/npy.h"

#define REL_TOL 1e-4
#define STEPS 20

static const char *const FIXTURES[] = {
    "llama_op18_static", "llama_op18_dynamic", "llama_op23_static", "llama_op23_dynamic",
    "qwen2_op18_static", "qwen2_op23_static", "mistral_op18_static", "mistral_op23_static",
    "gpt2_op18_static", "gpt2_op18_dynamic", "gpt2_op23_static", "gpt2_op23_dynamic",
    "phi3_op18_static", "phi3_op23_static", "gemma_op18_static", "gemma_op23_static",
    "bert_op18_static", "bert_op23_static",
};
#define N_FIXTURES ((int)(sizeof FIXTURES / sizeof FIXTURES[0]))

static char hf_dir[512];

static int file_exists(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}


/* The forward: `fp8run run` with the fixture's inputs against PyTorch's logits. */
static void check_logits(const char *name)
{
    char in[1100] = "", p[1024], out[1100];
    snprintf(p, sizeof p, "%s/%s/input_attention_mask.npy", hf_dir, name);
    if (file_exists(p)) snprintf(in, sizeof in, "--input attention_mask='%s'", p);
    int rc = cli_run("run '%s/%s/model.onnx' --input input_ids='%s/%s/input_input_ids.npy' %s --output-dir out_%s",
                     hf_dir, name, hf_dir, name, in, name);
    if (rc) cli_show(rc);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    fr_tensor *got = NULL, *want = NULL;
    snprintf(out, sizeof out, "%s/out_%s/logits.npy", cli_tmp, name);
    snprintf(p, sizeof p, "%s/%s/output_logits.npy", hf_dir, name);
    FR_ASSERT_OK(fr_npy_load(out, &got));
    FR_ASSERT_OK(fr_npy_load(p, &want));
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(got), fr_tensor_numel(want));
    double rel = fr_rel_l2((const float *)got->data, (const float *)want->data, fr_tensor_numel(want));
    printf("\n    %-20s logits rel L2 %.2e", name, rel);
    CU_ASSERT(rel <= REL_TOL);
    fr_tensor_free(got);
    fr_tensor_free(want);
}

/* `fp8run train` for `steps` steps; returns the number of step records read into losses. */
static int train(const char *name, const char *precision, int steps, double *losses, int *skipped)
{
    int rc = cli_run("train '%s/%s/model.onnx' --data '%s/tokens.bin' --steps %d --batch 2 --seq 11 --lr 1e-3 "
                     "--data-order sequential --precision %s --log %s_%s.jsonl",
                     hf_dir, name, hf_dir, steps, precision, name, precision);
    if (rc) cli_show(rc);
    CU_ASSERT_EQUAL(rc, 0);
    char log[1024];
    snprintf(log, sizeof log, "%s/%s_%s.jsonl", cli_tmp, name, precision);
    int vals;
    return cli_read_log(log, losses, steps, &vals, skipped);
}

/* 20 fp32 steps against PyTorch's losses.txt */
static void check_training(const char *name)
{
    char p[1024];
    double want[STEPS], got[STEPS];
    snprintf(p, sizeof p, "%s/%s/losses.txt", hf_dir, name);
    FILE *f = fopen(p, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int n = 0;
    while (n < STEPS && fscanf(f, "%lf", &want[n]) == 1) n++;
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(n, STEPS);
    int skipped = 0;
    CU_ASSERT_EQUAL_FATAL(train(name, "fp32", STEPS, got, &skipped), STEPS);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double r = fabs(got[i] - want[i]) / fabs(want[i]);
        if (!(r <= worst)) worst = r; /* NaN counts as worst */
    }
    printf(" | 20 steps: loss %.4f -> %.4f (PyTorch %.4f -> %.4f), worst rel %.2e, %d skipped", got[0],
           got[STEPS - 1], want[0], want[STEPS - 1], worst, skipped);
    CU_ASSERT(worst <= REL_TOL);
    CU_ASSERT_EQUAL(skipped, 0);
}

static void check_fixture(int i)
{
    check_logits(FIXTURES[i]);
    check_training(FIXTURES[i]);
}

#define FIXTURE_TEST(i) \
    static void test_fixture_##i(void) { if (i < N_FIXTURES) check_fixture(i); }
FIXTURE_TEST(0) FIXTURE_TEST(1) FIXTURE_TEST(2) FIXTURE_TEST(3) FIXTURE_TEST(4) FIXTURE_TEST(5)
FIXTURE_TEST(6) FIXTURE_TEST(7) FIXTURE_TEST(8) FIXTURE_TEST(9) FIXTURE_TEST(10) FIXTURE_TEST(11)
FIXTURE_TEST(12) FIXTURE_TEST(13) FIXTURE_TEST(14) FIXTURE_TEST(15) FIXTURE_TEST(16) FIXTURE_TEST(17)

/* FP8 tracks fp32 on the Llama export over 300 steps (the mean of the last 20 losses) */
static void test_llama_fp8_tracks_fp32(void)
{
    enum { N = 300, TAIL = 20 };
    static double l32[N], l8[N];
    int s32 = 0, s8 = 0;
    int n = getenv("FR_TEST_SANITIZE") ? 30 : N; /* sanitizers: memory errors, not convergence */
    CU_ASSERT_EQUAL_FATAL(train("llama_op18_static", "fp32", n, l32, &s32), n);
    CU_ASSERT_EQUAL_FATAL(train("llama_op18_static", "fp8", n, l8, &s8), n);
    double a = 0, b = 0;
    int tail = n < TAIL ? n : TAIL;
    for (int i = n - tail; i < n; i++) a += l32[i], b += l8[i];
    double rel = fabs(b - a) / fabs(a);
    printf("\n    llama_op18_static %d steps: fp32 %.4f -> %.4f, fp8 %.4f -> %.4f, last-%d mean rel %.2e, %d skipped",
           n, l32[0], a / tail, l8[0], b / tail, tail, rel, s8);
    CU_ASSERT(rel <= 0.01);
    CU_ASSERT_EQUAL(s8, 0);
    CU_ASSERT(a / tail < l32[0]); /* it learned something */
}

static int suite_init(void)
{
    fr_fixture(hf_dir, sizeof hf_dir, "hf");
    return cli_suite_init();
}

#define T(i) {"fixture " #i, test_fixture_##i}
static CU_TestInfo tests[] = {
    T(0), T(1), T(2), T(3), T(4), T(5), T(6), T(7), T(8), T(9), T(10), T(11), T(12), T(13), T(14), T(15),
    T(16), T(17), {"llama fp8 tracks fp32", test_llama_fp8_tracks_fp32}, CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"hf_exports", suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
