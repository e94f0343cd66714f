/* Models as users bring them: tiny Hugging Face architectures exported by torch 2.11's dynamo
 * exporter at opsets 18 and 23 (tests/fixtures/hf, written by tools/gen_hf_exports.py), run and
 * trained through the fp8run CLI exactly as a user would, against PyTorch:
 *   - `fp8run run` reproduces PyTorch's logits (relative L2 <= 1e-4); on the dynamic exports
 *     also with a padded attention_mask (one row padded on the right, then on the left: the
 *     rows of fully masked queries, whose outputs are no token's, are left out);
 *   - 20 AdamW steps in fp32 (`--data-order sequential`) follow PyTorch's losses (each step's
 *     loss within 1e-4 relative) with no step skipped, and 20 fp8 steps follow those (within
 *     FP8_TOL); where the CLI trains on a GPU, both runs are repeated on the CPU and the GPU's
 *     losses checked against them (the GPU against the CPU reference, per fixture);
 *   - the model those 20 steps trained, exported back (`--export`): its trained parameters are
 *     the original's (the module's names and shapes, which test_hf_params checks against the
 *     module), `fp8run run` on it reproduces the original model's forward with the final
 *     checkpoint applied (C API, relative L2 <= 1e-5, logits that moved from PyTorch's initial
 *     ones), and onnxruntime, where installed, reproduces those logits on it (max rel <= 1e-4;
 *     skipped, saying why, where onnxruntime refuses the fixture PyTorch exported as well);
 *   - `fp8run info` finds nothing off the fast path (every attention, norm, RoPE and activation
 *     fused);
 *   - on the Llama fixture, 300 FP8 steps track 300 fp32 steps (final loss within 1%).
 * Each fixture is its own CUnit test, so a failure names the architecture, opset and style. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/cli_runner.h"
#include "fp8run.h"
#include "runtime/io/npy.h"

#define REL_TOL 1e-4
#define STEPS 20

static const char *const FIXTURES[] = {
    "llama_op18_static", "llama_op18_dynamic", "llama_op23_static", "llama_op23_dynamic",
    "qwen2_op18_static", "qwen2_op23_static", "mistral_op18_static", "mistral_op23_static",
    "gpt2_op18_static", "gpt2_op18_dynamic", "gpt2_op23_static", "gpt2_op23_dynamic",
    "phi3_op18_static", "phi3_op23_static", "gemma_op18_static", "gemma_op23_static",
    "bert_op18_static", "bert_op23_static", "mistral_op18_dynamic", "mistral_op23_dynamic",
    "qwen3_op18_static", "qwen3_op23_static", "gpt_neox_op18_static", "gpt_neox_op23_static",
    "olmo2_op18_static", "olmo2_op23_static", "gemma3_op18_static", "gemma3_op23_static",
    "qwen3_op18_dynamic", "qwen3_op23_dynamic", "gpt_neox_op18_dynamic", "gpt_neox_op23_dynamic",
    "gemma2_op18_static", "gemma2_op23_static", "gemma2_op18_dynamic", "gemma2_op23_dynamic",
    "starcoder2_op18_static", "starcoder2_op23_static", "starcoder2_op18_dynamic", "starcoder2_op23_dynamic",
    "phi_op18_static", "phi_op23_static", "opt_op18_static", "opt_op23_static", "falcon_op18_static",
    "opt_op18_dynamic", "opt_op23_dynamic", "phi_op18_dynamic", "phi_op23_dynamic", "falcon_op18_dynamic",
    "gemma3_op18_dynamic", "gemma3_op23_dynamic", "qwen2_op18_dynamic", "qwen2_op23_dynamic", "phi3_op18_dynamic",
    "phi3_op23_dynamic", "olmo2_op18_dynamic", "olmo2_op23_dynamic",
};
#define N_FIXTURES ((int)(sizeof FIXTURES / sizeof FIXTURES[0]))

static char hf_dir[512];

static int file_exists(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}


/* `fp8run run` with the padded attention_mask input_attention_mask_SIDE.npy against PyTorch's
 * output_logits_SIDE.npy, over the rows of queries that see a key (causal: mask[b, j] = 1 for
 * some j <= i). Fixtures without that reference are skipped. */
static void check_padded(const char *name, const char *side)
{
    char mp[1024], p[1100], out[1100];
    snprintf(mp, sizeof mp, "%s/%s/input_attention_mask_%s.npy", hf_dir, name, side);
    if (!file_exists(mp)) return;
    int rc = cli_run("run '%s/%s/model.onnx' --input input_ids='%s/%s/input_input_ids.npy' --input attention_mask='%s' "
                     "--output-dir outp_%s_%s", hf_dir, name, hf_dir, name, mp, side, name);
    if (rc) cli_show(rc);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    fr_tensor *got = NULL, *want = NULL, *mask = NULL;
    snprintf(out, sizeof out, "%s/outp_%s_%s/logits.npy", cli_tmp, side, name);
    snprintf(p, sizeof p, "%s/%s/output_logits_%s.npy", hf_dir, name, side);
    FR_ASSERT_OK(fr_npy_load(out, &got));
    FR_ASSERT_OK(fr_npy_load(p, &want));
    FR_ASSERT_OK(fr_npy_load(mp, &mask));
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(got), fr_tensor_numel(want));
    CU_ASSERT_FATAL(want->rank == 3 && mask->rank == 2 && mask->dtype == FR_I64 && mask->dims[0] == want->dims[0] &&
                    mask->dims[1] == want->dims[1]);
    const int64_t B = want->dims[0], T = want->dims[1], V = want->dims[2];
    const float *g = got->data, *w = want->data;
    double num = 0, den = 0;
    int rows = 0;
    for (int64_t b = 0; b < B; b++) {
        int seen = 0;
        for (int64_t i = 0; i < T; i++) {
            seen |= ((const int64_t *)mask->data)[b * T + i] != 0;
            if (!seen) continue;
            rows++;
            for (int64_t e = (b * T + i) * V; e < (b * T + i + 1) * V; e++) {
                num += ((double)g[e] - w[e]) * ((double)g[e] - w[e]);
                den += (double)w[e] * w[e];
            }
        }
    }
    const double rel = sqrt(num / den);
    printf(" | %s-padded %.2e (%d rows)", side, rel, rows);
    CU_ASSERT(rel <= REL_TOL);
    fr_tensor_free(got);
    fr_tensor_free(want);
    fr_tensor_free(mask);
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
    check_padded(name, "right");
    check_padded(name, "left");
}

/* Where the last train_as() ran: the CLI's "training MODEL on DEVICE: ..." line ("CPU", or
 * the GPU's name where fp8run has the CUDA backend and a device). */
static char train_device[128];

/* `fp8run train` for `steps` steps, its log NAME_TAG.jsonl; returns the number of step records
 * read into losses. */
static int train_as(const char *name, const char *tag, const char *precision, int steps, double *losses, int *skipped,
                    const char *extra)
{
    int rc = cli_run("train '%s/%s/model.onnx' --data '%s/tokens.bin' --steps %d --batch 2 --seq 11 --lr 1e-3 --grad-clip 1 "
                     "--data-order sequential --precision %s --log %s_%s.jsonl %s",
                     hf_dir, name, hf_dir, steps, precision, name, tag, extra);
    if (rc) cli_show(rc);
    CU_ASSERT_EQUAL(rc, 0);
    snprintf(train_device, sizeof train_device, "?");
    const char *on = strstr(cli_out, "/model.onnx on ");
    if (!on) on = strstr(cli_err, "/model.onnx on ");
    if (on) snprintf(train_device, sizeof train_device, "%.*s", (int)strcspn(on + 15, ":("), on + 15);
    size_t len = strlen(train_device);
    while (len && train_device[len - 1] == ' ') train_device[--len] = '\0';
    char log[1024];
    snprintf(log, sizeof log, "%s/%s_%s.jsonl", cli_tmp, name, tag);
    int vals;
    return cli_read_log(log, losses, steps, &vals, skipped);
}
static int train(const char *name, const char *precision, int steps, double *losses, int *skipped, const char *extra)
{
    return train_as(name, precision, precision, steps, losses, skipped, extra);
}

/* The largest relative difference of a's losses from b's (NaN counts as the largest). */
static double worst_rel(const double *a, const double *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double r = fabs(a[i] - b[i]) / fabs(b[i]);
        if (!(r <= worst)) worst = r;
    }
    return worst;
}

/* fp8 (E4M3 forward, E5M2 gradients, delayed scaling) against fp32, step by step over the 20
 * steps: on the CPU the fixtures differ by 1.4e-4 (Gemma) to 4.6e-3 (OLMo2); 2e-2 leaves room
 * for a GPU's accumulation order and fast fp8 accumulation and still catches a wrong scale. */
#define FP8_TOL 2e-2

/* 20 fp32 steps against PyTorch's losses.txt, then 20 fp8 steps against those fp32 ones. Where
 * the CLI trains on a GPU (a CUDA build with a device), both run again with --device cpu: the
 * GPU against the CPU reference, fp32 to PyTorch's tolerance, fp8 to FP8_TOL. */
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
    char extra[600];
    snprintf(extra, sizeof extra, "--ckpt-dir ck_%s --export %s_trained.onnx", name, name);
    CU_ASSERT_EQUAL_FATAL(train(name, "fp32", STEPS, got, &skipped, extra), STEPS);
    char device[128];
    snprintf(device, sizeof device, "%s", train_device);
    CU_ASSERT(strcmp(device, "?") != 0); /* the CLI said where it trained */
    double worst = worst_rel(got, want, STEPS);
    printf(" | 20 steps on %s: loss %.4f -> %.4f (PyTorch %.4f -> %.4f), worst rel %.2e, %d skipped", device, got[0],
           got[STEPS - 1], want[0], want[STEPS - 1], worst, skipped);
    /* OPT's fixture has a nearly dead ReLU unit: the first step's gradient of fc2.weight[20, 2]
     * cancels to -7.19e-9 (float64) from terms ~1e5 times larger, which float32 gets 9% off
     * (PyTorch) and 33% off (fp8run), and AdamW's eps 1e-8 turns that into a 6.9e-5 weight
     * difference and 2.8e-4 in the losses by step 19. With layers.0.fc2.weight frozen on both
     * sides the 20 losses agree within 1e-7; a real fault here (a bias left untrained, the
     * position rows trained per batch row) showed as 9e-4 and more. */
    const double fp32_tol = strncmp(name, "opt_", 4) == 0 ? 5e-4 : REL_TOL;
    CU_ASSERT(worst <= fp32_tol);
    CU_ASSERT_EQUAL(skipped, 0);

    double l8[STEPS];
    int s8 = -1;
    CU_ASSERT_EQUAL_FATAL(train(name, "fp8", STEPS, l8, &s8, ""), STEPS);
    double w8 = worst_rel(l8, got, STEPS);
    printf(" | fp8 vs fp32 worst rel %.2e", w8);
    CU_ASSERT(w8 <= FP8_TOL);
    CU_ASSERT_EQUAL(s8, 0);
    if (strcmp(device, "CPU") == 0) return;

    /* a GPU trained: the CPU reference beside it */
    double c32[STEPS], c8[STEPS];
    int cs32 = -1, cs8 = -1;
    CU_ASSERT_EQUAL_FATAL(train_as(name, "cpu_fp32", "fp32", STEPS, c32, &cs32, "--device cpu"), STEPS);
    CU_ASSERT_EQUAL_FATAL(train_as(name, "cpu_fp8", "fp8", STEPS, c8, &cs8, "--device cpu"), STEPS);
    const double g32 = worst_rel(got, c32, STEPS), g8 = worst_rel(l8, c8, STEPS);
    printf(" | %s vs CPU: fp32 worst rel %.2e, fp8 %.2e", device, g32, g8);
    CU_ASSERT(g32 <= fp32_tol);
    CU_ASSERT(g8 <= FP8_TOL);
    CU_ASSERT_EQUAL(cs32 + cs8, 0);
}

/* The original model with the final checkpoint applied, run through the C API's forward on
 * the fixture's inputs: fp8run's logits of the trained model, without the export in between.
 * Returns a malloc'ed copy (n floats), NULL after a failed assertion. */
static float *trained_logits(const char *name, int64_t *n)
{
    char p[1100];
    fp8run_model *m = NULL;
    snprintf(p, sizeof p, "%s/%s/model.onnx", hf_dir, name);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(p, &m), FP8RUN_OK);
    int applied = -1;
    snprintf(p, sizeof p, "%s/ck_%s/step_%08d.ckpt", cli_tmp, name, STEPS);
    CU_ASSERT_EQUAL(fp8run_model_apply_checkpoint(m, p, &applied), FP8RUN_OK);
    CU_ASSERT_EQUAL(applied, fp8run_model_param_count(m));
    static const char *const in_names[2] = {"input_ids", "attention_mask"};
    fp8run_tensor in[2] = {{.struct_size = sizeof in[0]}, {.struct_size = sizeof in[1]}};
    const int64_t *dims[2];
    int ranks[2], n_in = 0;
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s/input_%s.npy", hf_dir, name, in_names[k]);
        if (!file_exists(p)) continue;
        CU_ASSERT_EQUAL_FATAL(fp8run_npy_load(p, &in[n_in]), FP8RUN_OK);
        in[n_in].name = in_names[k];
        dims[n_in] = in[n_in].dims;
        ranks[n_in] = in[n_in].rank;
        n_in++;
    }
    const char *names[2] = {in[0].name, in[1].name};
    fp8run_prepare_config pc;
    CU_ASSERT_EQUAL_FATAL(fp8run_prepare_config_init(&pc, sizeof pc), FP8RUN_OK);
    pc.input_names = names;
    pc.input_ranks = ranks;
    pc.input_dims = dims;
    pc.n_inputs = n_in;
    fp8run_forward *f = NULL;
    float *out = NULL;
    if (fp8run_forward_create(m, &pc, &f) == FP8RUN_OK) {
        int ok = 1;
        for (int k = 0; k < n_in; k++) ok &= fp8run_forward_set_input(f, &in[k]) == FP8RUN_OK;
        fp8run_tensor y = {.struct_size = sizeof y};
        if (ok && fp8run_forward_run(f) == FP8RUN_OK && fp8run_forward_output(f, 0, &y) == FP8RUN_OK &&
            y.dtype == FP8RUN_DTYPE_FLOAT32 && (out = malloc(y.nbytes))) {
            memcpy(out, y.data, y.nbytes);
            *n = (int64_t)(y.nbytes / sizeof(float));
        } else {
            printf("\n    forward of the trained %s failed: %s", name, fp8run_forward_error(f));
        }
        fp8run_forward_destroy(f);
    } else {
        printf("\n    forward_create %s: %s", name, fp8run_last_error());
    }
    CU_ASSERT_PTR_NOT_NULL(out);
    for (int k = 0; k < n_in; k++) fp8run_npy_free(&in[k]);
    fp8run_model_destroy(m);
    return out;
}

/* onnxruntime on the export against fp8run's logits of it; exit 77 where onnxruntime also
 * refuses the file PyTorch exported (then the export is not what it trips on). */
static const char ORT_CHECK[] =
    "import sys, numpy as np, onnxruntime as ort\n"
    "orig, exported, ins, want = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]\n"
    "def run(path):\n"
    "    s = ort.InferenceSession(path, providers=['CPUExecutionProvider'])\n"
    "    return s.run(None, {i.name: np.load(ins + '/input_' + i.name + '.npy') for i in s.get_inputs()})[0]\n"
    "try:\n"
    "    run(orig)\n"
    "except Exception as e:\n"
    "    m = str(e).splitlines()[0]\n"
    "    print('onnxruntime refuses the PyTorch export too:', m[m.find('running'):][:200])\n"
    "    sys.exit(77)\n"
    "y, r = run(exported), np.load(want)\n"
    "e = float(np.abs(y - r).max() / np.abs(r).max())\n"
    "print('onnxruntime vs fp8run max rel %.1e' % e)\n"
    "sys.exit(0 if e <= 1e-4 else 1)\n";

static int have_onnxruntime(void)
{
    static int have = -1;
    if (have < 0) have = system("python3 -c 'import onnxruntime' >/dev/null 2>&1") == 0;
    return have;
}

/* The trained model exported back: the module's names, fp8run's trained logits, onnxruntime. */
static void check_export(const char *name)
{
    char p[1100], q[1100];
    fp8run_model *orig = NULL, *exp = NULL;
    snprintf(p, sizeof p, "%s/%s/model.onnx", hf_dir, name);
    snprintf(q, sizeof q, "%s/%s_trained.onnx", cli_tmp, name);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(p, &orig), FP8RUN_OK);
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(q, &exp), FP8RUN_OK);
    /* trained again from the export: the same parameters, by name and shape */
    int np_ = fp8run_model_param_count(orig), same = 0;
    CU_ASSERT_EQUAL(fp8run_model_param_count(exp), np_);
    for (int i = 0; i < np_; i++) {
        fp8run_value_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
        CU_ASSERT_EQUAL_FATAL(fp8run_model_param(orig, i, &a), FP8RUN_OK);
        for (int j = 0; j < fp8run_model_param_count(exp); j++) {
            CU_ASSERT_EQUAL_FATAL(fp8run_model_param(exp, j, &b), FP8RUN_OK);
            if (strcmp(a.name, b.name) == 0) {
                same += a.rank == b.rank && memcmp(a.dims, b.dims, (size_t)a.rank * sizeof a.dims[0]) == 0;
                break;
            }
        }
    }
    CU_ASSERT_EQUAL(same, np_);
    fp8run_model_destroy(orig);
    fp8run_model_destroy(exp);

    int64_t n = 0;
    float *want = trained_logits(name, &n);
    if (!want) return;
    char in[1200] = "";
    snprintf(p, sizeof p, "%s/%s/input_attention_mask.npy", hf_dir, name);
    if (file_exists(p)) snprintf(in, sizeof in, "--input attention_mask='%s'", p);
    int rc = cli_run("run %s_trained.onnx --input input_ids='%s/%s/input_input_ids.npy' %s --output-dir outx_%s", name,
                     hf_dir, name, in, name);
    if (rc) cli_show(rc);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    fr_tensor *got = NULL, *init = NULL;
    snprintf(p, sizeof p, "%s/outx_%s/logits.npy", cli_tmp, name);
    FR_ASSERT_OK(fr_npy_load(p, &got));
    snprintf(p, sizeof p, "%s/%s/output_logits.npy", hf_dir, name);
    FR_ASSERT_OK(fr_npy_load(p, &init));
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(got), n);
    double rel = fr_rel_l2((const float *)got->data, want, n);
    double moved = fr_rel_l2((const float *)got->data, (const float *)init->data, n);
    printf("\n    %-20s exported: %d params by name, logits vs trained model %.1e (moved %.2f from initial)", name,
           same, rel, moved);
    CU_ASSERT(rel <= 1e-5);
    CU_ASSERT(moved > 1e-3);
    free(want);
    fr_tensor_free(got);
    fr_tensor_free(init);
    if (!have_onnxruntime()) {
        printf(", SKIP onnxruntime: not installed");
        return;
    }
    cli_write("ort_check.py", ORT_CHECK);
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "cd '%s' && python3 ort_check.py '%s/%s/model.onnx' %s_trained.onnx '%s/%s' "
             "outx_%s/logits.npy > ort_%s.txt 2> ort_%s.err", cli_tmp, hf_dir, name, name, hf_dir, name, name, name,
             name);
    int st = system(cmd);
    int code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    snprintf(p, sizeof p, "ort_%s.txt", name);
    char *msg = cli_slurp_tmp(p, NULL);
    msg[strcspn(msg, "\n")] = 0;
    printf(", %s%s", code == 77 ? "SKIP " : "", msg);
    if (code != 0 && code != 77) {
        snprintf(p, sizeof p, "ort_%s.err", name);
        char *err = cli_slurp_tmp(p, NULL);
        printf("\n%s", err);
        free(err);
    }
    CU_ASSERT(code == 0 || code == 77);
    free(msg);
}

/* `fp8run info` as a user runs it (a dynamic export given its batch and seq): every attention,
 * norm, RoPE and activation fused, nothing off the fast path. */
static void check_fast_path(const char *name)
{
    const int dyn = strstr(name, "_dynamic") != NULL;
    int rc = cli_run("info '%s/%s/model.onnx' %s", hf_dir, name, dyn ? "--dim batch=2 --dim seq=11" : "");
    const char *line = strstr(cli_out, "off the fast path:");
    char got[200] = "(none)";
    if (line) snprintf(got, sizeof got, "%.*s", (int)strcspn(line, "\n"), line);
    printf(" | %s", got);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(line && strncmp(line, "off the fast path: nothing", 26) == 0);
}

static void check_fixture(int i)
{
    check_logits(FIXTURES[i]);
    check_fast_path(FIXTURES[i]);
    check_training(FIXTURES[i]);
    check_export(FIXTURES[i]);
}

#define FIXTURE_TEST(i) \
    static void test_fixture_##i(void) { if (i < N_FIXTURES) check_fixture(i); }
FIXTURE_TEST(0) FIXTURE_TEST(1) FIXTURE_TEST(2) FIXTURE_TEST(3) FIXTURE_TEST(4) FIXTURE_TEST(5)
FIXTURE_TEST(6) FIXTURE_TEST(7) FIXTURE_TEST(8) FIXTURE_TEST(9) FIXTURE_TEST(10) FIXTURE_TEST(11)
FIXTURE_TEST(12) FIXTURE_TEST(13) FIXTURE_TEST(14) FIXTURE_TEST(15) FIXTURE_TEST(16) FIXTURE_TEST(17)
FIXTURE_TEST(18) FIXTURE_TEST(19) FIXTURE_TEST(20) FIXTURE_TEST(21) FIXTURE_TEST(22) FIXTURE_TEST(23)
FIXTURE_TEST(24) FIXTURE_TEST(25) FIXTURE_TEST(26) FIXTURE_TEST(27) FIXTURE_TEST(28) FIXTURE_TEST(29)
FIXTURE_TEST(30) FIXTURE_TEST(31) FIXTURE_TEST(32) FIXTURE_TEST(33) FIXTURE_TEST(34) FIXTURE_TEST(35)
FIXTURE_TEST(36) FIXTURE_TEST(37) FIXTURE_TEST(38) FIXTURE_TEST(39) FIXTURE_TEST(40) FIXTURE_TEST(41)
FIXTURE_TEST(42) FIXTURE_TEST(43) FIXTURE_TEST(44) FIXTURE_TEST(45) FIXTURE_TEST(46) FIXTURE_TEST(47)
FIXTURE_TEST(48) FIXTURE_TEST(49) FIXTURE_TEST(50) FIXTURE_TEST(51) FIXTURE_TEST(52) FIXTURE_TEST(53)
FIXTURE_TEST(54) FIXTURE_TEST(55) FIXTURE_TEST(56) FIXTURE_TEST(57) FIXTURE_TEST(58) FIXTURE_TEST(59)
FIXTURE_TEST(60) FIXTURE_TEST(61) FIXTURE_TEST(62) FIXTURE_TEST(63)
/* one CUnit test per fixture, so that a failure names it: room for MAX_FIXTURES */
#define MAX_FIXTURES 64
_Static_assert(N_FIXTURES <= MAX_FIXTURES, "more fixtures than FIXTURE_TEST functions: add some");

/* FP8 tracks fp32 on the Llama export over 300 steps (the mean of the last 20 losses) */
static void test_llama_fp8_tracks_fp32(void)
{
    enum { N = 300, TAIL = 20 };
    static double l32[N], l8[N];
    int s32 = 0, s8 = 0;
    int n = getenv("FR_TEST_SANITIZE") ? 30 : N; /* sanitizers: memory errors, not convergence */
    CU_ASSERT_EQUAL_FATAL(train("llama_op18_static", "fp32", n, l32, &s32, ""), n);
    CU_ASSERT_EQUAL_FATAL(train("llama_op18_static", "fp8", n, l8, &s8, ""), n);
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
    T(16), T(17), T(18), T(19), T(20), T(21), T(22), T(23), T(24), T(25), T(26), T(27), T(28), T(29), T(30), T(31),
    T(32), T(33), T(34), T(35), T(36), T(37), T(38), T(39), T(40), T(41), T(42), T(43), T(44), T(45), T(46), T(47),
    T(48), T(49), T(50), T(51), T(52), T(53), T(54), T(55), T(56), T(57), T(58), T(59), T(60), T(61), T(62), T(63),
    {"llama fp8 tracks fp32", test_llama_fp8_tracks_fp32}, CU_TEST_INFO_NULL,
};
static CU_SuiteInfo suites[] = {{"hf_exports", suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
