/* Nothing the user owns is lost or overwritten, command by command, as a hostile user tries it:
 *  - an output that is one of the command's inputs (the same path, another spelling, a hard or
 *    a symbolic link) or another output is refused and the input stays byte for byte;
 *  - a FIFO, a device or a folder given to any reading command is refused at once (each run
 *    under `timeout`: a hang is a failure, not a stuck test);
 *  - a symbolic link planted at any name a command writes (the names it derives too:
 *    *_val.bin, adapter_config.json, model.safetensors) is replaced, its target untouched;
 *  - a write that fails (FP8RUN_TEST_WRITE_FAULT: ENOSPC, EIO, fsync, rename) leaves every
 *    previous file as it was and no temporary behind (prepare, plot, --export-adapter,
 *    export --safetensors, checkpoints);
 *  - plot: 10^5 FP8 layers in seconds, labels cut on character boundaries and XML-escaped,
 *    absurd coordinates dropped with a note;
 *  - every option refuses an empty value. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cli_runner.h"
#include "tests/hf_llama_util.h"

static char model[512], tokens[512], hf_model[512], hf_tokens[512];

static int suite_init(void)
{
    if (cli_suite_init()) return 1;
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(tokens, sizeof tokens, "train/tokens.bin");
    fr_fixture(hf_model, sizeof hf_model, HF_MODEL);
    fr_fixture(hf_tokens, sizeof hf_tokens, "hf/tokens.bin");
    cli_wrap = "timeout -k 2 30"; /* a command that hangs exits 124 */
    return 0;
}

/* A copy of a fixture into the working folder. */
static void copy_in(const char *src, const char *name)
{
    size_t n = 0;
    char *d = cli_slurp(src, &n);
    FILE *f = fopen(cli_path(name), "wb");
    CU_ASSERT_FATAL(f && n > 0);
    CU_ASSERT_EQUAL(fwrite(d, 1, n, f), n);
    fclose(f);
    free(d);
}

/* The file's bytes, to compare before and after (malloc'ed; "" when missing). */
static char *bytes_of(const char *name, size_t *n) { return cli_slurp_tmp(name, n); }

/* name still holds what `before` (n bytes) held. */
static int unchanged(const char *name, const char *before, size_t n)
{
    size_t m = 0;
    char *now = bytes_of(name, &m);
    int same = m == n && memcmp(now, before, n) == 0;
    if (!same) printf("\n  %s changed (%zu -> %zu bytes)", name, n, m);
    free(now);
    return same;
}

/* Temporary files (".NAME.tmp.*", checkpoints' "NAME.tmp.*") left in the folder `dir` of the
 * working folder. */
static int temporaries(const char *dir)
{
    DIR *d = opendir(cli_path(dir));
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) {
            printf("\n  a temporary was left: %s/%s", dir, e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* `fp8run ARGS` is refused (exit 1 or 2), says `needle`, and `keep` is byte for byte as before. */
#define REFUSED_KEEPING(keep, needle, ...)                                        \
    do {                                                                          \
        size_t n_ = 0;                                                            \
        char *b_ = bytes_of(keep, &n_);                                           \
        int rc_ = cli_run(__VA_ARGS__);                                           \
        int ok_ = (rc_ == 1 || rc_ == 2) && strstr(cli_err, needle);              \
        if (!ok_) cli_show(rc_);                                                  \
        CU_ASSERT(ok_);                                                           \
        CU_ASSERT(unchanged(keep, b_, n_));                                       \
        free(b_);                                                                 \
    } while (0)

/* ---- outputs that are inputs ---- */

static void test_prepare_over_inputs(void)
{
    cli_write("a.txt", "the first document");
    cli_write("b.txt", "the second");
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("sub"), 0755), 0);
    CU_ASSERT_EQUAL_FATAL(link(cli_path("b.txt"), cli_path("hard.bin")), 0);
    CU_ASSERT_EQUAL_FATAL(symlink("a.txt", cli_path("soft.bin")), 0);
    const char *same[] = {"a.txt", "./a.txt", "sub/../a.txt", "hard.bin", "soft.bin"};
    for (int i = 0; i < 5; i++) {
        REFUSED_KEEPING("a.txt", "would destroy the input", "prepare --tokenizer bytes a.txt b.txt -o %s", same[i]);
        CU_ASSERT(unchanged("b.txt", "the second", 10));
    }
    REFUSED_KEEPING("b.txt", "would destroy the input",
                    "prepare --tokenizer bytes a.txt b.txt -o t.bin --val-fraction 0.5 --val-out ./b.txt");
    /* the derived validation name is an input */
    cli_write("t_val.bin", "an input with the derived name");
    REFUSED_KEEPING("t_val.bin", "t_val.bin", "prepare --tokenizer bytes t_val.bin -o t.bin --val-fraction 0.5");
    /* both outputs one file */
    cli_write("t.bin", "previous tokens");
    REFUSED_KEEPING("t.bin", "are the same file",
                    "prepare --tokenizer bytes a.txt -o t.bin --val-fraction 0.5 --val-out sub/../t.bin");
}

static void test_other_commands_over_inputs(void)
{
    copy_in(model, "m.onnx");
    copy_in(tokens, "t.bin");
    const char *train = "train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3";
    REFUSED_KEEPING("m.onnx", "would destroy the input", "compile m.onnx --batch 1 --seq 8 -o ./m.onnx");
    REFUSED_KEEPING("t.bin", "would destroy the input", "%s --log t.bin", train); /* was: truncated, SIGBUS */
    REFUSED_KEEPING("m.onnx", "would destroy the input", "%s --log m.onnx", train);
    REFUSED_KEEPING("m.onnx", "would destroy the input", "%s --export m.onnx", train);
    REFUSED_KEEPING("t.bin", "would destroy the input", "%s --export t.bin", train);
    REFUSED_KEEPING("m.onnx", "would destroy the input", "bench m.onnx --batch 1 --seq 8 --steps 1 --json m.onnx");
    /* a log as its own plot */
    CLI_EXPECT(cli_run("%s --log run.jsonl", train), 0, cli_out, "trained");
    REFUSED_KEEPING("run.jsonl", "would destroy the input", "plot run.jsonl -o run.jsonl");
    REFUSED_KEEPING("run.jsonl", "would destroy the input", "plot run.jsonl -o ./run.jsonl --title x");
    /* a checkpoint exported over itself */
    CLI_EXPECT(cli_run("%s --ckpt-dir ck", train), 0, cli_out, "trained");
    REFUSED_KEEPING("ck/step_00000001.ckpt", "would destroy the input",
                    "export ck/step_00000001.ckpt -o ck/step_00000001.ckpt");
    /* the .npy a run writes is one of its inputs */
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("o"), 0755), 0);
    char ids[512];
    fr_fixture(ids, sizeof ids, "llama_tiny/input_input_ids.npy");
    copy_in(ids, "o/logits.npy");
    REFUSED_KEEPING("o/logits.npy", "would destroy the input", "run m.onnx --input input_ids=o/logits.npy --output-dir o");
}

/* ---- what is not a regular file, given to every reading command ---- */

static void test_non_regular_inputs(void)
{
    copy_in(model, "m.onnx");
    copy_in(tokens, "t.bin");
    cli_write("ok.txt", "text");
    CU_ASSERT_EQUAL_FATAL(mkfifo(cli_path("fifo"), 0644), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("folder"), 0755), 0);
    const char *kinds[][2] = {{"fifo", "a FIFO"}, {"/dev/zero", "a device"}, {"folder", "a folder"}};
    const char *cmds[] = {
        "prepare --tokenizer bytes ok.txt %s -o out.bin",
        "plot %s -o out.svg",
        "info %s",
        "run %s --output-dir outdir",
        "compile %s --batch 1 --seq 8 -o out.fbs",
        "train %s --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3",
        "train m.onnx --data %s --steps 1 --batch 1 --seq 8 --lr 1e-3",
        "train m.onnx --data t.bin --val %s --steps 1 --batch 1 --seq 8 --lr 1e-3",
        "eval m.onnx --data %s --batch 1 --seq 8",
        "bench %s --batch 1 --seq 8 --steps 1",
        "run m.onnx --input input_ids=%s --output-dir outdir",
    };
    for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++)
        for (int k = 0; k < 3; k++) {
            char args[256];
            snprintf(args, sizeof args, cmds[c], kinds[k][0]);
            int rc = cli_run("%s", args);
            int ok = rc == 1 && (strstr(cli_err, kinds[k][1]) || strstr(cli_err, "not a regular file"));
            if (!ok) cli_show(rc);
            CU_ASSERT(ok);
        }
    /* the safetensors a training starts from, and the checkpoint export reads */
    for (int k = 0; k < 3; k++) {
        int rc = cli_run("train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3 --init-from %s", kinds[k][0]);
        CU_ASSERT(rc == 1 && strstr(cli_err, kinds[k][0]));
        rc = cli_run("export %s -o out.onnx", kinds[k][0]);
        CU_ASSERT(rc == 1 && strstr(cli_err, kinds[k][0]));
        if (rc != 1) cli_show(rc);
    }
}

/* ---- symbolic links planted at the names a command writes ---- */

static void plant(const char *name)
{
    unlink(cli_path(name));
    CU_ASSERT_EQUAL(symlink("victim.txt", cli_path(name)), 0);
}

/* name is a regular file now (the link replaced) and victim.txt as it was. */
static void link_replaced(const char *name)
{
    struct stat sb;
    int ok = lstat(cli_path(name), &sb) == 0 && S_ISREG(sb.st_mode);
    if (!ok) printf("\n  %s is not a regular file after the write", name);
    CU_ASSERT(ok);
    CU_ASSERT(unchanged("victim.txt", "the victim", 10));
}

static void test_links_at_outputs(void)
{
    cli_write("victim.txt", "the victim");
    cli_write("a.txt", "0123456789abcdef");
    copy_in(model, "m.onnx");
    copy_in(tokens, "t.bin");
    plant("p.bin");
    plant("p_val.bin");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o p.bin --val-fraction 0.5"), 0, cli_out, "p_val.bin");
    link_replaced("p.bin");
    link_replaced("p_val.bin");

    const char *train = "train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3";
    CLI_EXPECT(cli_run("%s --log run.jsonl", train), 0, cli_out, "trained");
    plant("run.svg");
    CLI_EXPECT(cli_run("plot run.jsonl -o run.svg"), 0, cli_out, "wrote run.svg");
    link_replaced("run.svg");
    plant("c.fbs");
    CLI_EXPECT(cli_run("compile m.onnx --batch 1 --seq 8 -o c.fbs"), 0, cli_out, "c.fbs");
    link_replaced("c.fbs");
    plant("e.onnx");
    CLI_EXPECT(cli_run("%s --export e.onnx", train), 0, cli_out, "trained");
    link_replaced("e.onnx");
    plant("b.json");
    CLI_EXPECT(cli_run("bench m.onnx --batch 1 --seq 8 --steps 1 --json b.json"), 0, cli_out, "");
    link_replaced("b.json");
    /* the log is appended to as training goes: a link there is refused, not followed */
    plant("l.jsonl");
    int rc = cli_run("%s --log l.jsonl", train);
    CU_ASSERT(unchanged("victim.txt", "the victim", 10));
    if (rc == 0) link_replaced("l.jsonl");

    /* the adapter's two files, and a safetensors export */
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("ad"), 0755), 0);
    CU_ASSERT_EQUAL(symlink("../victim.txt", cli_path("ad/adapter_config.json")), 0);
    CU_ASSERT_EQUAL(symlink("../victim.txt", cli_path("ad/adapter_model.safetensors")), 0);
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --lora-rank 2 --lora-alpha 4 "
                       "--lora-targets q_proj --export-adapter ad --ckpt-dir ack",
                       hf_model, hf_tokens),
               0, cli_out, "exported adapter");
    link_replaced("ad/adapter_config.json");
    link_replaced("ad/adapter_model.safetensors");
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("st"), 0755), 0);
    CU_ASSERT_EQUAL(symlink("../victim.txt", cli_path("st/model.safetensors")), 0);
    CLI_EXPECT(cli_run("export ack/step_00000001.ckpt --safetensors st"), 0, cli_out, "exported");
    link_replaced("st/model.safetensors");
}

/* ---- failing writes ---- */

/* Every file under the four commands' output names holds "previous NAME" before; a failing
 * write must leave them so. */
static void previous(const char *name)
{
    char text[128];
    snprintf(text, sizeof text, "previous %s", name);
    cli_write(name, text);
}

static void still_previous(const char *name)
{
    char text[128];
    snprintf(text, sizeof text, "previous %s", name);
    CU_ASSERT(unchanged(name, text, strlen(text)));
}

static void test_write_faults(void)
{
    cli_write("a.txt", "0123456789abcdef");
    copy_in(tokens, "t.bin");
    copy_in(model, "m.onnx");
    CLI_EXPECT(cli_run("train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3 --log run.jsonl"), 0,
               cli_out, "trained");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --lora-rank 2 --lora-alpha 4 "
                       "--lora-targets q_proj --ckpt-dir fck",
                       hf_model, hf_tokens),
               0, cli_out, "trained");
    CU_ASSERT_EQUAL_FATAL(mkdir(cli_path("fad"), 0755) | mkdir(cli_path("fst"), 0755), 0);
    /* a checkpoint to keep: the same run again writes the same name */
    const char *ck_run = "train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3 --ckpt-dir pck";
    CLI_EXPECT(cli_run("%s", ck_run), 0, cli_out, "trained");
    size_t ck_len = 0;
    char *ck_before = bytes_of("pck/step_00000001.ckpt", &ck_len);
    CU_ASSERT(ck_len > 1000);
    const char *names[] = {"p.bin", "p_val.bin", "run.svg", "fad/adapter_config.json",
                           "fad/adapter_model.safetensors", "fst/model.safetensors"};
    for (int i = 0; i < 6; i++) previous(names[i]);
    const char *faults[] = {"ENOSPC", "EIO", "fsync", "rename"};
    for (int f = 0; f < 4; f++) {
        setenv("FP8RUN_TEST_WRITE_FAULT", faults[f], 1);
        CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o p.bin --val-fraction 0.5"), 1, cli_err, "p");
        CLI_EXPECT(cli_run("plot run.jsonl -o run.svg"), 1, cli_err, "run.svg");
        CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --lora-rank 2 "
                           "--lora-alpha 4 --lora-targets q_proj --export-adapter fad",
                           hf_model, hf_tokens),
                   1, cli_err, "fad/adapter_");
        CLI_EXPECT(cli_run("export fck/step_00000001.ckpt --safetensors fst"), 1, cli_err, "fst/");
        CLI_EXPECT(cli_run("%s", ck_run), 1, cli_err, "the previous file, if any, is kept");
        unsetenv("FP8RUN_TEST_WRITE_FAULT");
        for (int i = 0; i < 6; i++) still_previous(names[i]);
        CU_ASSERT(unchanged("pck/step_00000001.ckpt", ck_before, ck_len));
        CU_ASSERT_EQUAL(temporaries(".") + temporaries("fad") + temporaries("fst") + temporaries("pck"), 0);
    }
    free(ck_before);
}

/* ---- plot: scale, Unicode, absurd numbers ---- */

/* 1 when s[0..n) is valid UTF-8. */
static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 9;
        if (k == 9 || i + k >= n + (k == 0)) return k == 0;
        for (size_t j = 1; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return 0;
        i += k + 1;
    }
    return 1;
}

/* Every '&' in s starts an entity, and no text between tags holds '<' raw (a tag's '<' follows
 * '>' or a newline or starts the file). */
static int escaped(const char *s)
{
    for (const char *p = strchr(s, '&'); p; p = strchr(p + 1, '&'))
        if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) && strncmp(p, "&quot;", 6) &&
            strncmp(p, "&apos;", 6) && strncmp(p, "&#", 2))
            return 0;
    return 1;
}

static void test_plot_unicode_and_numbers(void)
{
    /* layer names of 3-byte characters, long enough to be cut; a title with markup */
    FILE *f = fopen(cli_path("u.jsonl"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char layer[400] = "/";
    for (int i = 0; i < 100; i++) strcat(layer, "\xe5\xb1\x82"); /* 层 */
    strcat(layer, "/MatMul");
    for (int s = 1; s <= 3; s++) {
        fprintf(f, "{\"step\": %d, \"loss\": %g, \"lr\": 0.001, \"grad_norm\": 1}\n", s, 3.0 / s);
        fprintf(f, "{\"step\": %d, \"fp8\": [{\"layer\": \"%s\", \"operand\": \"x\", \"amax\": 1.5, "
                   "\"range_use\": 0.5}, {\"layer\": \"<a&b>\\\"'\", \"operand\": \"w\", \"amax\": 2, "
                   "\"range_use\": 0.1}]}\n", s, layer);
    }
    /* absurd steps and values: dropped, with a note */
    fprintf(f, "{\"step\": 1e308, \"loss\": 1, \"lr\": 0.001, \"grad_norm\": 1}\n");
    fprintf(f, "{\"step\": -1e308, \"loss\": 1, \"lr\": 0.001, \"grad_norm\": 1}\n");
    fprintf(f, "{\"step\": 4, \"loss\": 1e308, \"lr\": 0.001, \"grad_norm\": -1e308}\n");
    fclose(f);
    char title[200] = "<b>R&D</b> ";
    for (int i = 0; i < 60; i++) strcat(title, "\xc3\xa9"); /* é */
    CLI_EXPECT(cli_run("plot u.jsonl -o u.svg --title '%s'", title), 0, cli_out, "wrote u.svg");
    size_t n = 0;
    char *svg = cli_slurp_tmp("u.svg", &n);
    CU_ASSERT(n > 0 && valid_utf8((const unsigned char *)svg, n));
    CU_ASSERT(escaped(svg));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "&lt;b&gt;R&amp;D"));
    CU_ASSERT_PTR_NULL(strstr(svg, "nan"));
    CU_ASSERT_PTR_NULL(strstr(svg, "inf"));
    CU_ASSERT_PTR_NULL(strstr(svg, "e+307"));
    CU_ASSERT_PTR_NULL(strstr(svg, "e+308"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "dropped"));
    free(svg);
}

static void test_plot_scale(void)
{
    /* 10^5 FP8 layers, two steps: one hash lookup per record, not a scan of every layer */
    const int L = getenv("FR_TEST_SANITIZE") ? 20000 : 100000;
    FILE *f = fopen(cli_path("big.jsonl"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int s = 1; s <= 2; s++) {
        fprintf(f, "{\"step\": %d, \"loss\": 2, \"lr\": 0.001, \"grad_norm\": 1}\n", s);
        fprintf(f, "{\"step\": %d, \"fp8\": [", s);
        for (int i = 0; i < L; i++)
            fprintf(f, "%s{\"layer\": \"/layers.%d/mlp/down_proj/MatMul\", \"operand\": \"x\", \"amax\": %d, "
                       "\"range_use\": 0.5}", i ? "," : "", i, 1 + i % 7);
        fprintf(f, "]}\n");
    }
    fclose(f);
    /* the command's CPU time (the machine may be shared: wall time says little) */
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    CLI_EXPECT(cli_run("plot big.jsonl -o big.svg"), 0, cli_out, "wrote big.svg");
    getrusage(RUSAGE_CHILDREN, &r1);
    double secs = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                  1e-6 * (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
    printf("\n  plot of %d layers: %.2f s of CPU", L, secs);
    /* not a speed target: a scan of every layer per record is ~1e10 steps here (minutes), the
       hashed lookup ~1 s; the bound sits far from both, so a loaded machine does not fail it */
    if (!getenv("FR_TEST_SANITIZE")) CU_ASSERT(secs < 15.0);
}

/* ---- empty values ---- */

static void test_empty_values(void)
{
    cli_write("a.txt", "text");
    copy_in(model, "m.onnx");
    copy_in(tokens, "t.bin");
    const char *cases[] = {
        "prepare --tokenizer bytes a.txt -o t2.bin --val-fraction ''",
        "prepare --tokenizer bytes a.txt -o t2.bin --eos ''",
        "prepare --tokenizer bytes a.txt -o ''",
        "prepare --tokenizer '' a.txt -o t2.bin",
        "prepare --tokenizer bytes a.txt -o t2.bin --val-out '' --val-fraction 0.5",
        "plot a.txt -o ''",
        "plot a.txt -o x.svg --title ''",
        "train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr ''",
        "train m.onnx --data '' --steps 1 --batch 1 --seq 8 --lr 1e-3",
        "train m.onnx --data t.bin --steps 1 --batch 1 --seq 8 --lr 1e-3 --log ''",
        "compile m.onnx --batch '' --seq 8 -o c.fbs",
        "eval m.onnx --data t.bin --batch 1 --seq 8 --dim ''",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) CLI_EXPECT(cli_run("%s", cases[i]), 2, cli_err, "empty");
}

static CU_TestInfo tests[] = {
    {"prepare never writes over its inputs", test_prepare_over_inputs},
    {"compile, train, bench, plot, export, run never write over their inputs", test_other_commands_over_inputs},
    {"FIFOs, devices and folders are refused by every reading command", test_non_regular_inputs},
    {"links at every name a command writes are replaced, not followed", test_links_at_outputs},
    {"failing writes keep the previous files and leave no temporary", test_write_faults},
    {"plot: UTF-8 labels, XML escapes, absurd numbers dropped", test_plot_unicode_and_numbers},
    {"plot: 10^5 FP8 layers in seconds", test_plot_scale},
    {"every option refuses an empty value", test_empty_values},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"safety_cli", suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
