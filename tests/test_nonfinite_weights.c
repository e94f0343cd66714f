/* NaN and Inf in loaded weights: a safetensors load reports each tensor that holds them and how
 * many (in the load report and as a warning naming it), and FP8RUN_LOAD_STRICT_WEIGHTS refuses
 * the load, naming the tensor and the count, with nothing loaded. The CLI: `train --init-from`
 * warns, and `--strict-weights` refuses. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fp8run.h>

#include "tests/cli_runner.h"

static char model[512], tokens[512];
static char warnings[4096];
static fr_rng rng;

static unsigned rnd(unsigned n) { return (unsigned)(fr_rng_uniform(&rng) * n) % n; }

static void on_log(void *user, fp8run_log_level level, const char *message)
{
    (void)user;
    if (level >= FP8RUN_LOG_WARN && strlen(warnings) + strlen(message) + 2 < sizeof warnings) {
        strcat(warnings, message);
        strcat(warnings, "\n");
    }
}

static int suite_init(void)
{
    if (cli_suite_init()) return 1;
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(tokens, sizeof tokens, "train/tokens.bin");
    return 0;
}

/* The model's parameter 0 with `nan` NaNs and `inf` Infs at random places, saved as
 * safetensors into cli_tmp/dir; its name and element count out. */
static void save_poisoned(const char *dir, int nan, int inf, char *name, size_t name_len, size_t *numel)
{
    fp8run_model *m;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(model, &m), FP8RUN_OK);
    fp8run_value_info vi = {.struct_size = sizeof vi};
    CU_ASSERT_EQUAL_FATAL(fp8run_model_param(m, 0, &vi), FP8RUN_OK);
    snprintf(name, name_len, "%s", vi.name);
    *numel = (size_t)vi.numel;
    float *v = malloc(*numel * sizeof *v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_get_param(m, name, v, *numel), FP8RUN_OK);
    /* distinct places: a stride through the tensor from a random start */
    size_t at = (size_t)rnd((unsigned)*numel);
    for (int k = 0; k < nan + inf; k++) v[(at + (size_t)k * 7) % *numel] = k < nan ? NAN : (k % 2 ? INFINITY : -INFINITY);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_set_param(m, name, v, *numel), FP8RUN_OK);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_save_safetensors(m, cli_path(dir), FP8RUN_DTYPE_FLOAT32, 0), FP8RUN_OK);
    free(v);
    fp8run_model_destroy(m);
}

static void test_api(void)
{
    char name[256];
    size_t numel;
    rng = fr_test_rng(__func__);
    int nan = 1 + (int)rnd(5), inf = 1 + (int)rnd(3);
    save_poisoned("bad", nan, inf, name, sizeof name, &numel);
    fp8run_safetensors *st;
    CU_ASSERT_EQUAL_FATAL(fp8run_safetensors_open(cli_path("bad"), &st), FP8RUN_OK);
    fp8run_model *m;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(model, &m), FP8RUN_OK);
    float *before = malloc(numel * sizeof *before), *after = malloc(numel * sizeof *after);
    CU_ASSERT_FATAL(before && after);
    CU_ASSERT_EQUAL(fp8run_model_get_param(m, name, before, numel), FP8RUN_OK);

    /* strict: refused, naming the tensor and the count; nothing loaded */
    char want[320];
    snprintf(want, sizeof want, "'%s' (%d)", name, nan + inf);
    CU_ASSERT_EQUAL(fp8run_model_load_safetensors(m, st, FP8RUN_LOAD_STRICT_WEIGHTS, NULL), FP8RUN_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), want));
    if (!strstr(fp8run_last_error(), want)) printf("\n  %s", fp8run_last_error());
    CU_ASSERT_EQUAL(fp8run_model_get_param(m, name, after, numel), FP8RUN_OK);
    CU_ASSERT_EQUAL(memcmp(before, after, numel * sizeof *after), 0);

    /* not strict: loaded, reported and warned */
    warnings[0] = '\0';
    fp8run_set_log_callback(on_log, NULL, FP8RUN_LOG_WARN);
    fp8run_load_report r = {.struct_size = sizeof r};
    CU_ASSERT_EQUAL(fp8run_model_load_safetensors(m, st, 0, &r), FP8RUN_OK);
    fp8run_set_log_callback(NULL, NULL, FP8RUN_LOG_WARN);
    CU_ASSERT_EQUAL_FATAL(r.n_nonfinite, 1);
    CU_ASSERT_STRING_EQUAL(r.nonfinite[0], name);
    CU_ASSERT_EQUAL(r.nonfinite_counts[0], nan + inf);
    snprintf(want, sizeof want, "tensor '%s' holds %d NaN/Inf values", name, nan + inf);
    CU_ASSERT_PTR_NOT_NULL(strstr(warnings, want));
    CU_ASSERT_EQUAL(fp8run_model_get_param(m, name, after, numel), FP8RUN_OK);
    int bad = 0;
    for (size_t i = 0; i < numel; i++) bad += !isfinite(after[i]);
    CU_ASSERT_EQUAL(bad, nan + inf);

    /* a report of the first version's size is filled as before */
    fp8run_load_report old;
    memset(&old, 0x5a, sizeof old);
    old.struct_size = offsetof(fp8run_load_report, n_nonfinite);
    CU_ASSERT_EQUAL(fp8run_model_load_safetensors(m, st, 0, &old), FP8RUN_OK);
    CU_ASSERT(old.n_matched > 0);
    CU_ASSERT_EQUAL(old.n_nonfinite, 0x5a5a5a5a); /* untouched */
    /* clean weights: nothing reported */
    save_poisoned("good", 0, 0, name, sizeof name, &numel);
    fp8run_safetensors *ok;
    CU_ASSERT_EQUAL_FATAL(fp8run_safetensors_open(cli_path("good"), &ok), FP8RUN_OK);
    CU_ASSERT_EQUAL(fp8run_model_load_safetensors(m, ok, FP8RUN_LOAD_STRICT_WEIGHTS, &r), FP8RUN_OK);
    CU_ASSERT_EQUAL(r.n_nonfinite, 0);
    fp8run_safetensors_close(ok);
    fp8run_safetensors_close(st);
    fp8run_model_destroy(m);
    free(before);
    free(after);
}

static void test_cli(void)
{
    char name[256];
    size_t numel;
    save_poisoned("cbad", 2, 1, name, sizeof name, &numel);
    const char *train = "train '%s' --data '%s' --steps 1 --batch 1 --seq 8 --lr 1e-3 --init-from cbad";
    char cmd[1400];
    snprintf(cmd, sizeof cmd, train, model, tokens);
    char want[320];
    snprintf(want, sizeof want, "'%s'", name);
    CLI_EXPECT(cli_run("%s --strict-weights", cmd), 1, cli_err, "NaN/Inf");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, want));
    /* without the flag it warns, naming the tensor and the count (training may then skip steps) */
    int rc = cli_run("%s", cmd);
    snprintf(want, sizeof want, "tensor '%s' holds 3 NaN/Inf values", name);
    int ok = strstr(cli_err, want) != NULL && strstr(cli_err, "warning") != NULL;
    if (!ok) cli_show(rc);
    CU_ASSERT(ok);
}

/* An ONNX model whose own parameter holds NaN/Inf: the load warns naming it, the model counts
 * it, `train --strict-weights` refuses it, and without the flag training goes on. */
static void test_model(void)
{
    rng = fr_test_rng(__func__);
    fp8run_model *m;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(model, &m), FP8RUN_OK);
    CU_ASSERT_EQUAL(fp8run_model_nonfinite_params(m), 0);
    const int k = (int)rnd((unsigned)fp8run_model_param_count(m));
    fp8run_value_info vi = {.struct_size = sizeof vi};
    CU_ASSERT_EQUAL_FATAL(fp8run_model_param(m, k, &vi), FP8RUN_OK);
    char name[256];
    snprintf(name, sizeof name, "%s", vi.name);
    const size_t numel = (size_t)vi.numel;
    float *v = malloc(numel * sizeof *v);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_get_param(m, name, v, numel), FP8RUN_OK);
    v[rnd((unsigned)numel)] = NAN;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_set_param(m, name, v, numel), FP8RUN_OK);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_save(m, cli_path("nan.onnx")), FP8RUN_OK);
    fp8run_model_destroy(m);
    free(v);

    warnings[0] = '\0';
    fp8run_set_log_callback(on_log, NULL, FP8RUN_LOG_WARN);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(cli_path("nan.onnx"), &m), FP8RUN_OK);
    fp8run_set_log_callback(NULL, NULL, FP8RUN_LOG_WARN);
    CU_ASSERT_EQUAL(fp8run_model_nonfinite_params(m), 1);
    int64_t count = 0;
    const char *got = fp8run_model_nonfinite_param(m, 0, &count);
    CU_ASSERT(got && strcmp(got, name) == 0 && count == 1);
    CU_ASSERT_PTR_NULL(fp8run_model_nonfinite_param(m, 1, &count));
    char want[320];
    snprintf(want, sizeof want, "parameter '%s' holds 1 NaN/Inf values", name);
    CU_ASSERT_PTR_NOT_NULL(strstr(warnings, want));
    fp8run_model_destroy(m);
    CU_ASSERT_EQUAL(fp8run_model_nonfinite_params(NULL), 0);

    const char *train = "train '%s' --data '%s' --steps 1 --batch 1 --seq 8 --lr 1e-3";
    char cmd[1400];
    snprintf(cmd, sizeof cmd, train, cli_path("nan.onnx"), tokens);
    CLI_EXPECT(cli_run("%s --strict-weights", cmd), 1, cli_err, "--strict-weights refuses them");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, want));
    int rc = cli_run("%s", cmd);
    if (!strstr(cli_err, want)) cli_show(rc);
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, want));
}

static CU_TestInfo tests[] = {
    {"NaN/Inf in the ONNX model's own parameters: warned, counted, refused by --strict-weights", test_model},
    {"NaN/Inf weights: reported, warned, refused when strict (C API)", test_api},
    {"NaN/Inf weights: train --init-from warns, --strict-weights refuses", test_cli},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"nonfinite_weights", suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
