/* `fp8run compile`, `fp8run info` (the Linear layers section, on .onnx and .fbs) and
 * `fp8run train --log-fp8` run as a program (FR_CLI) on llama_tiny (batch 2, seq 13):
 *  - compile: help, usage errors (exit 2), compiling a compiled graph (exit 1), the report;
 *  - info on the .onnx and on the .fbs names every Linear layer of llama_tiny with its
 *    precision, and on the .onnx the training pipeline's passes in order with their counts; recipe options on info (exclude by node name, --no-fuse, fp32); the .fbs part
 *    (batch x seq, recorded decisions, scaling state after a run is not needed: fresh);
 *  - train of the .fbs: batch/seq from the file, another --batch is an error that says to
 *    recompile, recipe options refused; export equals the on-the-fly --precision fp8 run's
 *    byte for byte; `export CKPT --model x.fbs`; eval of the .fbs;
 *  - --log-fp8: records every N steps with one entry per operand of every fp8 Linear, finite
 *    amax and scale for the delayed recipe, null with a note where the current recipe has no
 *    per-tensor amax (dY). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"

static char llama[600], tokens[600];

static int suite_init(void)
{
    fr_fixture(llama, sizeof llama, "llama_tiny/model.onnx");
    fr_fixture(tokens, sizeof tokens, "train/tokens.bin");
    return cli_suite_init();
}

/* The 15 Linear layers of llama_tiny (2 layers x q, k, v, o, gate, up, down + the LM head). */
static const char *const k_linears[] = {
    "/layers.0/self_attn/q_proj/MatMul", "/layers.0/self_attn/k_proj/MatMul", "/layers.0/self_attn/v_proj/MatMul",
    "/layers.0/self_attn/o_proj/MatMul", "/layers.0/mlp/gate_proj/MatMul",    "/layers.0/mlp/up_proj/MatMul",
    "/layers.0/mlp/down_proj/MatMul",    "/layers.1/self_attn/q_proj/MatMul", "/layers.1/self_attn/k_proj/MatMul",
    "/layers.1/self_attn/v_proj/MatMul", "/layers.1/self_attn/o_proj/MatMul", "/layers.1/mlp/gate_proj/MatMul",
    "/layers.1/mlp/up_proj/MatMul",      "/layers.1/mlp/down_proj/MatMul",    "/lm_head/MatMul",
};

/* The precision printed on the line that names `layer` in the Linear section ("" if absent). */
static const char *precision_of(const char *text, const char *layer, char *buf)
{
    const char *sec = strstr(text, "Linear layers");
    buf[0] = '\0';
    for (const char *p = sec ? strstr(sec, layer) : NULL; p; p = strstr(p + 1, layer)) {
        const char *ls = p;
        while (ls > text && ls[-1] != '\n') ls--;
        if (sscanf(ls, " %7s", buf) == 1 && (!strcmp(buf, "fp8") || !strcmp(buf, "bf16") || !strcmp(buf, "fp32")))
            return buf;
    }
    buf[0] = '\0';
    return buf;
}

/* every llama_tiny Linear named with a precision: bf16 for layer 0's q/k/v and the LM head */
static void check_linear_section(const char *text, const char *what)
{
    int named = 0;
    for (size_t i = 0; i < sizeof k_linears / sizeof k_linears[0]; i++) {
        char p[16];
        precision_of(text, k_linears[i], p);
        int boundary = strstr(k_linears[i], "layers.0/self_attn/") && !strstr(k_linears[i], "o_proj");
        boundary = boundary || strstr(k_linears[i], "lm_head");
        const char *want = boundary ? "bf16" : "fp8";
        if (strcmp(p, want) != 0) printf("\n  %s: %s has precision '%s', want %s\n", what, k_linears[i], p, want);
        named += strcmp(p, want) == 0;
    }
    CU_ASSERT_EQUAL(named, 15);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "15 Linear layers in 9 nodes (4 fused groups): fp8 11, bf16 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "why: boundary: first Linear group"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "LM head"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "GPU pads K +0, N +0 to multiples of 16"));
}

static void test_compile_usage(void)
{
    CLI_EXPECT(cli_run("compile --help"), 0, cli_out, "specialized");
    CLI_EXPECT(cli_run("help compile"), 0, cli_out, "--batch B --seq T");
    CLI_EXPECT(cli_run("--help"), 0, cli_out, "compile");
    CLI_EXPECT(cli_run("compile '%s' --batch 2 --seq 13", llama), 2, cli_err, "-o OUT.fbs is required");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --seq 13", llama), 2, cli_err, "--batch B and --seq T are required");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --batch 2 --seq 13 --precision fp32", llama), 2, cli_err, "fp32");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --batch 2 --seq 13 --recipe sometimes", llama), 2, cli_err, "--recipe");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --batch 2 --seq 13 --pad-multiple 0", llama), 2, cli_err,
               "--pad-multiple");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --batch 2 --seq 13 --bogus", llama), 2, cli_err, "unknown option");
    CLI_EXPECT(cli_run("compile nope.onnx -o x.fbs --batch 2 --seq 13"), 1, cli_err, "nope.onnx");
    CLI_EXPECT(cli_run("compile '%s' -o x.fbs --batch 2 --seq 13 --fp8-exclude '(unclosed'", llama), 1, cli_err,
               "(unclosed");
}

static void test_compile_and_info(void)
{
    CLI_EXPECT(cli_run("compile '%s' -o llama.fbs --batch 2 --seq 13", llama), 0, cli_out, "compiled");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "batch 2 x seq 13"));
    CLI_EXPECT(cli_run("compile llama.fbs -o again.fbs --batch 2 --seq 13"), 1, cli_err, "already a compiled graph");

    /* info on the ONNX model: what the compile pass would do with the default options */
    CLI_EXPECT(cli_run("info '%s'", llama), 0, cli_out, "Linear layers (FP8 compile");
    check_linear_section(cli_out, "info .onnx");
    /* and what each pass of the training pipeline did, in order (passes/pipeline.c) */
    const char *pipe = strstr(cli_out, "Training pipeline (graph passes before autodiff, in order)\n");
    CU_ASSERT_PTR_NOT_NULL(pipe);
    const char *attn = pipe ? strstr(pipe, "  pass fuse_attention: 2 fused\n") : NULL;
    const char *fp8 = attn ? strstr(attn, "  pass fp8_compile: 15 Linears (11 fp8, 4 bf16, 0 fp32), 4 fused") : NULL;
    CU_ASSERT_PTR_NOT_NULL(fp8 ? strstr(fp8, "  pass fuse_swiglu: 2 fused") : NULL);
    /* info on the compiled graph: the recorded decisions, its shape, its state */
    CLI_EXPECT(cli_run("info llama.fbs"), 0, cli_out, "specialized to batch 2 x seq 13");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "Linear layers (recorded at compile time"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "informative: training reads the graph itself"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "ai.fp8run::Linear"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "ai.fp8run 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "FP8 scaling state (21 operands, fresh"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "parameters     109K (108864 elements"));
    check_linear_section(cli_out, "info .fbs");

    /* recipe options on info */
    char p[16];
    CLI_EXPECT(cli_run("info '%s' --fp8-exclude 'o_proj' --recipe current", llama), 0, cli_out,
               "excluded by fp8_exclude 'o_proj'");
    CU_ASSERT_STRING_EQUAL(precision_of(cli_out, "/layers.1/self_attn/o_proj/MatMul", p), "bf16");
    CU_ASSERT_STRING_EQUAL(precision_of(cli_out, "/layers.1/mlp/down_proj/MatMul", p), "fp8");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "recipe current"));
    CLI_EXPECT(cli_run("info '%s' --no-fuse --bf16-boundary 0", llama), 0, cli_out,
               "15 Linear layers in 15 nodes (0 fused groups): fp8 15");
    CLI_EXPECT(cli_run("info '%s' --precision fp32", llama), 0, cli_out, "precision fp32: no Linear is rewritten");
    CLI_EXPECT(cli_run("info '%s' --precision bf16", llama), 0, cli_out, "precision bf16 requested");
    CLI_EXPECT(cli_run("info '%s' --recipe nope", llama), 2, cli_err, "--recipe");
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* --log-fp8 records of a log: returns how many; checks each one's entries */
static int check_fp8_records(const char *log, int per_record, int delayed, int *steps, int max)
{
    int n = 0;
    char *s = strdup(log), *save = NULL;
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strstr(line, "\"fp8\": [")) continue;
        long long step = -1;
        CU_ASSERT_EQUAL(sscanf(line, "{\"step\": %lld, \"fp8\": [", &step), 1);
        if (n < max) steps[n] = (int)step;
        n++;
        int entries = count(line, "\"operand\": ");
        if (entries != per_record) printf("\n  step %lld: %d entries, want %d\n", step, entries, per_record);
        CU_ASSERT_EQUAL(entries, per_record);
        CU_ASSERT_EQUAL(count(line, "\"operand\": \"x\""), per_record / 3);
        CU_ASSERT_EQUAL(count(line, "\"operand\": \"dy\""), per_record / 3);
        CU_ASSERT(!strstr(line, "nan") && !strstr(line, "inf"));
        if (delayed) {
            CU_ASSERT_EQUAL(count(line, "\"amax\": null"), 0);
            CU_ASSERT_EQUAL(count(line, "\"saturated\": "), per_record);
            CU_ASSERT_EQUAL(count(line, "\"history_max\": "), per_record);
        } else { /* current: dY has no per-tensor amax, and the record says so */
            CU_ASSERT_EQUAL(count(line, "\"amax\": null"), per_record / 3);
            CU_ASSERT_EQUAL(count(line, "\"note\": \"no amax: the current recipe"), per_record / 3);
        }
        /* amax and scale of every x entry are positive numbers */
        for (const char *p = strstr(line, "\"operand\": \"x\""); p; p = strstr(p + 1, "\"operand\": \"x\"")) {
            const char *a = strstr(p, "\"amax\": "), *sc = strstr(p, "\"scale\": ");
            double av = a ? strtod(a + 8, NULL) : -1, sv = sc ? strtod(sc + 9, NULL) : -1;
            CU_ASSERT(av > 0 && isfinite(av) && sv > 0 && isfinite(sv));
        }
    }
    free(s);
    return n;
}

static void test_train_fbs_and_log_fp8(void)
{
    if (cli_run("compile '%s' -o llama.fbs --batch 2 --seq 13 --amax-history 16", llama) != 0) {
        cli_show(1);
        CU_FAIL_FATAL("compile");
    }
    /* the .fbs: batch and seq from the file; --log-fp8 every 2 steps */
    CLI_EXPECT(
        cli_run("train llama.fbs --data '%s' --steps 5 --lr 1e-3 --log fbs.jsonl --log-fp8 2 --export from_fbs.onnx "
                "--ckpt-dir ck --data-order sequential",
                tokens),
        0, cli_out, "trained llama.fbs: 5 steps");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "2 x 13 x 1 tokens per step"));
    char path[700];
    snprintf(path, sizeof path, "%s/fbs.jsonl", cli_tmp);
    char *log = cli_slurp(path, NULL);
    int steps[8] = {0};
    /* 7 fp8 Linear nodes (layer 0: o, gate/up, down; layer 1: q/k/v, o, gate/up, down) x 3 operands */
    CU_ASSERT_EQUAL(check_fp8_records(log, 21, 1, steps, 8), 2);
    CU_ASSERT(steps[0] == 2 && steps[1] == 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "\"layer\": \"fused(/layers.1/self_attn/q_proj/MatMul,"));
    free(log);

    /* the same run from the ONNX model compiled on the fly: the same export, byte for byte */
    CLI_EXPECT(
        cli_run("train '%s' --precision fp8 --amax-history 16 --batch 2 --seq 13 --data '%s' --steps 5 --lr 1e-3 "
                "--export from_onnx.onnx --data-order sequential",
                llama, tokens),
        0, cli_out, "trained");
    size_t n1, n2;
    snprintf(path, sizeof path, "%s/from_fbs.onnx", cli_tmp);
    char *a = cli_slurp(path, &n1);
    snprintf(path, sizeof path, "%s/from_onnx.onnx", cli_tmp);
    char *b = cli_slurp(path, &n2);
    CU_ASSERT(n1 > 0 && n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    /* the checkpoint of the .fbs run exports through the .fbs (its config names it) */
    CLI_EXPECT(cli_run("export ck/step_00000005.ckpt -o from_ckpt.onnx"), 0, cli_out, "exported from_ckpt.onnx");
    snprintf(path, sizeof path, "%s/from_ckpt.onnx", cli_tmp);
    a = cli_slurp(path, &n1);
    snprintf(path, sizeof path, "%s/from_fbs.onnx", cli_tmp);
    b = cli_slurp(path, &n2);
    CU_ASSERT(n1 > 0 && n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    CLI_EXPECT(cli_run("eval llama.fbs --data '%s' --batches 2", tokens), 0, cli_out, "loss ");
    CLI_EXPECT(cli_run("eval ck/step_00000005.ckpt --model llama.fbs --data '%s' --batches 2", tokens), 0, cli_out,
               "loss ");
    /* resume the .fbs run from its checkpoint, and the ONNX run from the same checkpoint */
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 6 --lr 1e-3 --ckpt-dir ck --resume --data-order sequential",
                       tokens),
               0, cli_out, "6 steps");
    CLI_EXPECT(
        cli_run("train '%s' --precision fp8 --amax-history 16 --batch 2 --seq 13 --data '%s' --steps 7 --lr 1e-3 "
                "--ckpt-dir ck --resume --data-order sequential",
                llama, tokens),
        0, cli_out, "7 steps");

    /* what a compiled graph fixes */
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 2 --lr 1e-3 --batch 4", tokens), 1, cli_err, "recompile");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "compiled for --batch 2 --seq 13"));
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 2 --lr 1e-3 --seq 12", tokens), 1, cli_err, "--seq 12");
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 2 --lr 1e-3 --recipe current", tokens), 2, cli_err,
               "fixed when compiling");
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 2 --lr 1e-3 --precision bf16", tokens), 1, cli_err,
               "compiled for precision fp8");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 2 --lr 1e-3", llama, tokens), 2, cli_err,
               "--batch B and --seq T are required");
    CLI_EXPECT(cli_run("train llama.fbs --data '%s' --steps 2 --lr 1e-3 --log-fp8 1", tokens), 2, cli_err,
               "--log-fp8 needs --log");

    /* the current recipe on the fly: x and w amaxes, dY says it has none */
    CLI_EXPECT(cli_run("train '%s' --precision fp8 --recipe current --batch 2 --seq 13 --data '%s' --steps 3 --lr 1e-3 "
                       "--log cur.jsonl --log-fp8 1",
                       llama, tokens),
               0, cli_out, "trained");
    snprintf(path, sizeof path, "%s/cur.jsonl", cli_tmp);
    log = cli_slurp(path, NULL);
    CU_ASSERT_EQUAL(check_fp8_records(log, 21, 0, steps, 8), 3);
    free(log);
    /* bf16: nothing to log, said once */
    CLI_EXPECT(
        cli_run(
            "train '%s' --precision bf16 --batch 2 --seq 13 --data '%s' --steps 1 --lr 1e-3 --log b.jsonl --log-fp8 1",
            llama, tokens),
        0, cli_err, "no fp8 Linear");
}

static CU_TestInfo tests[] = {
    {"compile: help and usage errors", test_compile_usage},
    {"compile; info on .onnx and .fbs lists every Linear with its precision", test_compile_and_info},
    {"train a .fbs (shape from the file, export == on-the-fly), --log-fp8", test_train_fbs_and_log_fp8},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"compile_cli", suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
