/* Hostile input and long-run hygiene through the CLI: external data through a
 * symbolic link, checkpoints crafted with valid CRCs over bad contents (a recorded model path
 * outside the working folder, through a symbolic link or cut short, a missing parameter,
 * impossible counters), --resume over only corrupt checkpoints, FIFOs given as files, token
 * ids at the vocabulary size, absurd option values, and the checkpoint folder: a run prunes
 * only what it wrote, removes the partial files of killed runs, and does not write through a
 * planted symlink when it trims its log. Every case must end with exit 1 or 2
 * and a message naming the file and the problem; none may crash (sanitizer reports are
 * failures) or hang (each command runs under timeout(1)). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fp8run.h>

#include "tests/cli_runner.h"
#include "runtime/api/api_internal.h"
#include "graph/base64.h"
#include "graph/onnx_io.h"
#include "tests/onnx_test_util.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/fbs.h"

#define P cli_path
#define TRAIN "train m.onnx --data tok.bin --batch 1 --seq 8 --lr 1e-3 --data-order sequential "

/* A refusal: exit 1 or 2, "fp8run: error" and both needles (NULL: none) in stderr, and no
 * sanitizer report. */
static void refused(int rc, const char *n1, const char *n2)
{
    int ok = (rc == 1 || rc == 2) && strstr(cli_err, "error") && (!n1 || strstr(cli_err, n1)) &&
             (!n2 || strstr(cli_err, n2)) && !strstr(cli_err, "Sanitizer") && !strstr(cli_err, "runtime error");
    if (!ok) cli_show(rc);
    CU_ASSERT(ok);
}

static int write_tokens(const char *path, int n, unsigned vocab, int bad_at)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)(i == bad_at ? vocab : (unsigned)(i * 7) % vocab);
        fwrite(&t, sizeof t, 1, f);
    }
    return fclose(f) != 0;
}

static int suite_init(void)
{
    if (cli_suite_init()) return 1;
    cli_wrap = "timeout -k 2 30";
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", model, P("m.onnx"));
    if (system(cmd) != 0 || write_tokens(P("tok.bin"), 600, 128, -1)) return 1;
    /* the checkpoint every crafted one starts from */
    return cli_run(TRAIN "--steps 2 --ckpt-dir base") != 0;
}

static int suite_clean(void)
{
    cli_wrap = "";
    return cli_suite_clean();
}

/* ---- crafted checkpoints: a real one rewritten (the writer computes a valid CRC) ---- */

typedef struct ck_edit {
    const char *drop_name, *drop_kind; /* this tensor is left out */
    const char *extra_name, *extra_kind; /* a [2] float tensor added */
    const char *key;       /* entry replaced by value (len vlen; 0: strlen) */
    const char *value;
    size_t vlen;
} ck_edit;

static const char *const entry_keys[] = {"format", "step", "skipped_total", "bad_in_row", "optim.kind",
                                         "optim.step", "rng", "data", "config"};

static void craft(const char *dst, const ck_edit *e)
{
    fr_ckpt *c;
    fr_ckpt_writer *w;
    FR_ASSERT_OK(fr_ckpt_open(P("base/step_00000002.ckpt"), &c));
    FR_ASSERT_OK(fr_ckpt_writer_open(P(dst), &w));
    for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
        const fr_ckpt_tensor *t = fr_ckpt_tensor_at(c, i);
        if (e->drop_name && strcmp(t->name, e->drop_name) == 0 && strcmp(t->kind, e->drop_kind) == 0) continue;
        FR_ASSERT_OK(fr_ckpt_write_tensor(w, t->name, t->kind, t->dtype, t->rank, t->dims, t->data));
    }
    if (e->extra_name) {
        const int64_t two = 2;
        const float v[2] = {1, 2};
        FR_ASSERT_OK(fr_ckpt_write_tensor(w, e->extra_name, e->extra_kind, FR_F32, 1, &two, v));
    }
    for (size_t k = 0; k < sizeof entry_keys / sizeof *entry_keys; k++) {
        const void *v;
        size_t len;
        if (e->key && strcmp(e->key, entry_keys[k]) == 0) {
            v = e->value;
            len = e->vlen ? e->vlen : strlen(e->value);
        } else {
            FR_ASSERT_OK(fr_ckpt_entry(c, entry_keys[k], &v, &len));
        }
        FR_ASSERT_OK(fr_ckpt_write_entry(w, entry_keys[k], v, len));
    }
    fr_ckpt_close(c);
    FR_ASSERT_OK(fr_ckpt_writer_commit(w));
}

static void craft_config(const char *dst, const char *config)
{
    ck_edit e = {.key = "config", .value = config};
    craft(dst, &e);
}

/* `fp8run export CKPT` opens the model the checkpoint records only when it lies below the
 * working folder; a record cut short is no record. */
static void test_recorded_model_path(void)
{
    craft_config("abs.ckpt", "{\"model\": \"/etc/passwd\", \"batch\": 1}");
    refused(cli_run("export abs.ckpt -o x.onnx"), "abs.ckpt", "'/etc/passwd', an absolute path");
    mkdir(P("other"), 0755);
    craft_config("up.ckpt", "{\"model\": \"other/../../m.onnx\"}");
    refused(cli_run("export up.ckpt -o x.onnx"), "up.ckpt", "with '..'");
    refused(cli_run("eval up.ckpt --data tok.bin --batch 1 --seq 8"), "up.ckpt", "give --model");
    /* cut inside the string, inside a \u escape, and an escaped NUL */
    const char *cut[] = {"{\"model\": \"m.onn", "{\"model\": \"m.onnx\\u00", "{\"model\": \"m.onnx\\",
                         "{\"model\": \"m\\u0000/../../etc/passwd\"}"};
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        craft_config("cut.ckpt", cut[i]);
        refused(cli_run("export cut.ckpt -o x.onnx"), "cut.ckpt", "does not record its model");
    }
    /* a record through a symbolic link, to a folder inside or a file inside: not followed */
    CU_ASSERT_EQUAL(symlink(".", P("lnkdir")), 0);
    CU_ASSERT_EQUAL(symlink("m.onnx", P("lnk.onnx")), 0);
    craft_config("lnk1.ckpt", "{\"model\": \"lnkdir/m.onnx\"}");
    refused(cli_run("export lnk1.ckpt -o x.onnx"), "lnk1.ckpt", "through the symbolic link 'lnkdir'");
    craft_config("lnk2.ckpt", "{\"model\": \"./lnk.onnx\"}");
    refused(cli_run("export lnk2.ckpt -o x.onnx"), "lnk2.ckpt", "through the symbolic link './lnk.onnx'");
    /* the same checkpoint with --model, and a well-formed relative record, export */
    CLI_EXPECT(cli_run("export abs.ckpt --model m.onnx -o x.onnx"), 0, cli_out, "exported x.onnx");
    craft_config("rel.ckpt", "{\"model\": \"m.onnx\"}");
    CLI_EXPECT(cli_run("export rel.ckpt -o y.onnx"), 0, cli_out, "exported y.onnx");
}

/* A parameter whose optimizer state is there but whose weights are not: an error naming it,
 * not the model's initial value exported as trained. */
static void test_missing_parameter(void)
{
    fr_ckpt *c;
    FR_ASSERT_OK(fr_ckpt_open(P("base/step_00000002.ckpt"), &c));
    const fr_ckpt_tensor *t = fr_ckpt_tensor_at(c, 3);
    CU_ASSERT_STRING_EQUAL_FATAL(t->kind, "param");
    char name[256];
    snprintf(name, sizeof name, "'%s'", t->name);
    ck_edit e = {.drop_name = t->name, .drop_kind = "param"};
    craft("noparam.ckpt", &e);
    fr_ckpt_close(c);
    refused(cli_run("export noparam.ckpt --model m.onnx -o x.onnx"), "noparam.ckpt", name);
    refused(cli_run("eval noparam.ckpt --model m.onnx --data tok.bin --batch 1 --seq 8"), "noparam.ckpt", name);
}

/* A CRC-valid checkpoint whose format entry names another format is refused by every reader
 * (resume, export, eval), naming the format found and the ones this build reads. */
static void test_other_format(void)
{
    const char *formats[] = {"fp8run-trainer-9", "some-other-tool-1", ""};
    for (int i = 0; i < 3; i++) {
        ck_edit e = {.key = "format", .value = formats[i], .vlen = formats[i][0] ? 0 : 1};
        if (!formats[i][0]) e.value = "\xff"; /* not even text */
        char dir[64];
        snprintf(dir, sizeof dir, "fmt%d", i);
        mkdir(P(dir), 0755);
        char path[96];
        snprintf(path, sizeof path, "%s/step_00000002.ckpt", dir);
        craft(path, &e);
        const char *want = formats[i][0] ? formats[i] : "format";
        refused(cli_run(TRAIN "--steps 3 --ckpt-dir %s --resume", dir), want, "fp8run-trainer-1");
        refused(cli_run("export %s --model m.onnx -o x.onnx", path), want, "fp8run-trainer-1");
        refused(cli_run("eval %s --model m.onnx --data tok.bin --batch 1 --seq 8", path), want, "fp8run-trainer-1");
    }
}

/* CRC-valid checkpoints with counters no run reaches are refused on --resume. */
static void test_impossible_counters(void)
{
    const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"step", "9223372036854775807", "impossible step counters"},
        {"step", "99999999999999999999999", "impossible step counters"},
        {"bad_in_row", "2147483647", "impossible step counters"},
        {"skipped_total", "5", "impossible step counters"},
        {"step", "-3", "inconsistent step counters"},
        {"step", "2x", "not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", P("imp"), P("imp"));
        CU_ASSERT_EQUAL(system(cmd), 0);
        ck_edit e = {.key = cases[i].key, .value = cases[i].value};
        craft("imp/step_00000002.ckpt", &e);
        refused(cli_run(TRAIN "--steps 4 --ckpt-dir imp --resume"), "step_00000002.ckpt", cases[i].needle);
    }
}

/* --resume over a folder whose only checkpoint is corrupt fails instead of training from 0;
 * an empty folder still starts afresh. */
static void test_resume_corrupt_only(void)
{
    mkdir(P("corrupt"), 0755);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "head -c 5000 '%s' > '%s'", P("base/step_00000002.ckpt"),
             P("corrupt/step_00000002.ckpt"));
    CU_ASSERT_EQUAL(system(cmd), 0);
    refused(cli_run(TRAIN "--steps 3 --ckpt-dir corrupt --resume"), "corrupt", "none of the 1 checkpoint");
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(P("corrupt/step_00000003.ckpt"), &sb), 0);
    CLI_EXPECT(cli_run(TRAIN "--steps 1 --ckpt-dir fresh --resume"), 0, cli_err, "starting from step 0");
}

/* FIFOs (and folders) given as files are refused before anything reads them. */
static void test_fifos(void)
{
    CU_ASSERT_EQUAL_FATAL(mkfifo(P("fifo"), 0644), 0);
    refused(cli_run("train fifo --data tok.bin --steps 1 --batch 1 --seq 8 --lr 1e-3"), "'fifo'", "FIFO");
    refused(cli_run(TRAIN "--steps 1 --data fifo"), "'fifo'", "FIFO");
    refused(cli_run(TRAIN "--steps 1 --val fifo"), "'fifo'", "FIFO");
    refused(cli_run("export fifo -o x.onnx"), "fifo", NULL);
    refused(cli_run("eval fifo --data tok.bin --batch 1 --seq 8"), "fifo", NULL);
    refused(cli_run("info fifo"), "'fifo'", "FIFO");
    mkdir(P("fifodir"), 0755);
    CU_ASSERT_EQUAL_FATAL(mkfifo(P("fifodir/step_00000005.ckpt"), 0644), 0);
    refused(cli_run(TRAIN "--steps 6 --ckpt-dir fifodir --resume"), "fifodir", NULL);
    refused(cli_run(TRAIN "--steps 1 --data ."), "'.'", "folder");
}

/* Token ids equal to the vocabulary size are refused even where sampling would not reach
 * them in the steps asked for; absurd option values are refused before any work. */
static void test_tokens_and_values(void)
{
    CU_ASSERT_EQUAL_FATAL(write_tokens(P("tok128.bin"), 600, 128, 590), 0);
    refused(cli_run(TRAIN "--steps 1 --data tok128.bin"), "tok128.bin", "token id 128 at position 590");
    refused(cli_run(TRAIN "--steps 1 --val tok128.bin"), "tok128.bin", "token id 128");
    refused(cli_run(TRAIN "--steps 1 --eps 0"), "eps 0", "> 0");
    refused(cli_run(TRAIN "--steps 1 --eps 1e-60"), "eps", "> 0");
    refused(cli_run(TRAIN "--steps 1 --ckpt-dir ''"), "--ckpt-dir: an empty value", NULL);
    refused(cli_run("generate llama --layers 1000000000 -o g.onnx"), "1000000000 layers", NULL);
    refused(cli_run("generate llama --dim 2147483648 --heads 1 --kv-heads 1 -o g.onnx"), "parameters", NULL);
    /* 2^31 x 64 x 2 = 2.7e11 parameters: under the absolute bound, over any test machine's memory */
    refused(cli_run("generate llama --vocab 2147483648 -o g.onnx"), "of memory this process may take", NULL);
}

/* --ckpt-keep prunes only this run's checkpoints: neither another run's (a fresh run in a
 * used folder) nor junk named like one; a resumed run prunes the run it continues. */
static void test_prune_only_own(void)
{
    char cmd[1400];
    mkdir(P("keep"), 0755);
    for (int s = 100; s <= 102; s++) {
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/keep/step_%08d.ckpt'", P("base/step_00000002.ckpt"), cli_tmp, s);
        CU_ASSERT_EQUAL(system(cmd), 0);
    }
    FILE *f = fopen(P("keep/step_00000009.ckpt"), "w");
    fputs("junk", f);
    fclose(f);
    CLI_EXPECT(cli_run(TRAIN "--steps 4 --ckpt-dir keep --ckpt-every 1 --ckpt-keep 1"), 0, cli_out, "4 steps");
    struct stat sb;
    const char *kept[] = {"keep/step_00000100.ckpt", "keep/step_00000101.ckpt", "keep/step_00000102.ckpt",
                          "keep/step_00000009.ckpt", "keep/step_00000004.ckpt"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) CU_ASSERT_EQUAL(stat(P(kept[i]), &sb), 0);
    for (int s = 1; s <= 3; s++) {
        char n[64];
        snprintf(n, sizeof n, "keep/step_%08d.ckpt", s);
        CU_ASSERT_NOT_EQUAL(stat(P(n), &sb), 0);
    }
    /* resuming a run prunes that run's older checkpoints with its own */
    CLI_EXPECT(cli_run(TRAIN "--steps 3 --ckpt-dir own --ckpt-every 1 --ckpt-keep 0"), 0, cli_out, "3 steps");
    CLI_EXPECT(cli_run(TRAIN "--steps 5 --ckpt-dir own --ckpt-every 1 --ckpt-keep 2 --resume"), 0, cli_out, "5 steps");
    for (int s = 1; s <= 5; s++) {
        char n[64];
        snprintf(n, sizeof n, "own/step_%08d.ckpt", s);
        CU_ASSERT_EQUAL(stat(P(n), &sb) == 0, s >= 4);
    }
}

/* Partial checkpoints of killed runs (the writer's exact temporary names, from a process that
 * is gone, older than this run) are removed; other files are not. */
static void test_stale_tmp_cleanup(void)
{
    /* a process that has exited: its pid is free (and, in this short window, not reused) */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    mkdir(P("tmpd"), 0755);
    char stale[128], alive[128];
    snprintf(stale, sizeof stale, "tmpd/step_00000007.ckpt.tmp.%ld.0", (long)dead);
    snprintf(alive, sizeof alive, "tmpd/step_00000007.ckpt.tmp.%ld.0", (long)getpid());
    const char *names[] = {stale, alive, "tmpd/step_00000007.ckpt.tmp.x", "tmpd/notes.tmp.1.0"};
    struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        FILE *f = fopen(P(names[i]), "w");
        fputs("partial", f);
        fclose(f);
        utimes(P(names[i]), old);
    }
    CLI_EXPECT(cli_run(TRAIN "--steps 1 --ckpt-dir tmpd"), 0, cli_err, "partial checkpoint of an interrupted run");
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(P(stale), &sb), 0);
    for (size_t i = 1; i < sizeof names / sizeof *names; i++) CU_ASSERT_EQUAL(stat(P(names[i]), &sb), 0);
}

/* Resuming with --log trims the log through a fresh temporary file: a planted symlink at the
 * old predictable name is not written through. */
static void test_log_trim_symlink(void)
{
    CLI_EXPECT(cli_run(TRAIN "--steps 2 --ckpt-dir lg --log lg.jsonl"), 0, cli_out, "2 steps");
    FILE *f = fopen(P("victim.txt"), "w");
    fputs("precious\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(symlink(P("victim.txt"), P("lg.jsonl.trim")), 0);
    CLI_EXPECT(cli_run(TRAIN "--steps 3 --ckpt-dir lg --log lg.jsonl --resume"), 0, cli_out, "3 steps");
    char *v = cli_slurp(P("victim.txt"), NULL);
    CU_ASSERT_STRING_EQUAL(v, "precious\n");
    free(v);
    char *log = cli_slurp(P("lg.jsonl"), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "{\"step\": 3"));
    free(log);
    /* no temporary file is left next to the log */
    char cmd[800];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep '^lg\\.jsonl\\.' | grep -qv '^lg\\.jsonl\\.trim$'", cli_tmp);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
}

/* Checkpoints and exports replace a planted symlink at their destination (temporary file with
 * O_EXCL|O_NOFOLLOW, then rename) instead of writing through it. */
static void test_no_write_through_symlinks(void)
{
    FILE *f = fopen(P("victim2.txt"), "w");
    fputs("precious\n", f);
    fclose(f);
    mkdir(P("sl"), 0755);
    CU_ASSERT_EQUAL(symlink(P("victim2.txt"), P("sl/step_00000001.ckpt")), 0);
    CU_ASSERT_EQUAL(symlink(P("victim2.txt"), P("sl_out.onnx")), 0);
    CLI_EXPECT(cli_run(TRAIN "--steps 1 --ckpt-dir sl --export sl_out.onnx"), 0, cli_out, "1 steps");
    CLI_EXPECT(cli_run("export sl/step_00000001.ckpt --model m.onnx -o sl_out.onnx"), 0, cli_out, "exported");
    char *v = cli_slurp(P("victim2.txt"), NULL);
    CU_ASSERT_STRING_EQUAL(v, "precious\n");
    free(v);
    struct stat sb;
    CU_ASSERT(lstat(P("sl/step_00000001.ckpt"), &sb) == 0 && S_ISREG(sb.st_mode));
    CU_ASSERT(lstat(P("sl_out.onnx"), &sb) == 0 && S_ISREG(sb.st_mode));
}

/* Shape information on dims whose product overflows int64: unknown (-1), not signed overflow;
 * an empty dim makes it 0 whatever the others. */
static void test_shape_info_overflow(void)
{
    const int64_t big[3] = {(int64_t)1 << 62, 4, 3}, empty[3] = {(int64_t)1 << 62, 4, 0};
    fp8run_value_info v = {.struct_size = sizeof v};
    fr_api_shape_info("x", FR_F32, 3, big, &v, sizeof v);
    CU_ASSERT_EQUAL(v.numel, -1);
    CU_ASSERT_EQUAL(v.dims[0], (int64_t)1 << 62);
    fr_api_shape_info("x", FR_F32, 3, empty, &v, sizeof v);
    CU_ASSERT_EQUAL(v.numel, 0);
    const int64_t fine[2] = {3, 5};
    fr_api_shape_info("x", FR_F32, 2, fine, &v, sizeof v);
    CU_ASSERT_EQUAL(v.numel, 15);
}

/* Names far longer than any buffer a message is built in: refused cleanly on resume and export
 * (a UBSan error before). */
static void test_long_names(void)
{
    size_t n = 70000;
    char *name = malloc(n + 1);
    memset(name, 'n', n);
    name[n] = '\0';
    const char *kinds[] = {"param", "exp_avg", "amax_history"};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", P("long"), P("long"));
        CU_ASSERT_EQUAL(system(cmd), 0);
        ck_edit e = {.extra_name = name, .extra_kind = kinds[i]};
        craft("long/step_00000002.ckpt", &e);
        int rc = cli_run(TRAIN "--steps 3 --ckpt-dir long --resume");
        if (i < 2) refused(rc, "step_00000002.ckpt", "nnnnnnnn");
        else CU_ASSERT_EQUAL(rc, 0); /* scaling state of an amax no run has: not looked at */
        rc = cli_run("export long/step_00000002.ckpt --model m.onnx -o x.onnx");
        if (i < 2) refused(rc, "step_00000002.ckpt", "nnnnnnnn");
        else CU_ASSERT_EQUAL(rc, 0);
    }
    /* over-long entry values: each refused or ignored, never read past */
    const char *keys[] = {"rng", "data", "optim.kind", "format", "step", "config"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", P("long"), P("long"));
        CU_ASSERT_EQUAL(system(cmd), 0);
        ck_edit e = {.key = keys[i], .value = name, .vlen = n};
        craft("long/step_00000002.ckpt", &e);
        int rc = cli_run(TRAIN "--steps 3 --ckpt-dir long --resume");
        if (strcmp(keys[i], "config") != 0) refused(rc, "step_00000002.ckpt", NULL);
        CU_ASSERT(!strstr(cli_err, "Sanitizer") && !strstr(cli_err, "runtime error"));
        rc = cli_run("export long/step_00000002.ckpt -o x.onnx");
        CU_ASSERT(!strstr(cli_err, "Sanitizer") && !strstr(cli_err, "runtime error"));
        CU_ASSERT(rc == 0 || rc == 1);
    }
    free(name);
}

/* A tensor listed twice is refused; 10^5 tensors open and are looked up in linear time (the
 * lookups were a scan each: quadratic on a crafted file). */
static void test_ckpt_index(void)
{
    fr_ckpt *c;
    FR_ASSERT_OK(fr_ckpt_open(P("base/step_00000002.ckpt"), &c));
    char name[256];
    snprintf(name, sizeof name, "%s", fr_ckpt_tensor_at(c, 0)->name);
    fr_ckpt_close(c);
    ck_edit e = {.extra_name = name, .extra_kind = "param"};
    craft("twice.ckpt", &e);
    CU_ASSERT_EQUAL(fr_ckpt_open(P("twice.ckpt"), &c), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "listed twice"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "twice.ckpt"));
    refused(cli_run("export twice.ckpt --model m.onnx -o x.onnx"), "twice.ckpt", "listed twice");

    const int n = getenv("FR_TEST_SANITIZE") ? 20000 : 100000;
    fr_ckpt_writer *w;
    FR_ASSERT_OK(fr_ckpt_writer_open(P("many.ckpt"), &w));
    const int64_t zero = 0;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "t%d", i);
        FR_ASSERT_OK(fr_ckpt_write_tensor(w, name, "param", FR_F32, 1, &zero, NULL));
    }
    FR_ASSERT_OK(fr_ckpt_writer_commit(w));
    alarm(30);
    FR_ASSERT_OK(fr_ckpt_open(P("many.ckpt"), &c));
    int found = 0;
    for (int i = n - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "t%d", i);
        found += fr_ckpt_find(c, name, "param") == fr_ckpt_tensor_at(c, i);
    }
    alarm(0);
    CU_ASSERT_EQUAL(found, n);
    CU_ASSERT_PTR_NULL(fr_ckpt_find(c, "t0", "exp_avg"));
    fr_ckpt_close(c);
}

/* A compiled graph whose metadata was edited: each edit that no compile writes is refused on
 * load, naming the file and the layer. */
static void test_crafted_fbs(void)
{
    CLI_EXPECT(cli_run("compile m.onnx -o c.fbs --batch 1 --seq 8 --precision fp8"), 0, cli_out, "c.fbs");
    /* an embedded original model whose weights are external data: /etc/passwd, or a file next
     * to the .fbs; the embedded model has no folder, so neither is opened */
    char *orig[3];
    size_t tl;
    /* a symlink next to the .fbs, named by the embedded model: not opened either */
    CU_ASSERT_EQUAL(symlink("m.onnx", P("lnk.bin")), 0);
    for (int k = 0; k < 3; k++) {
        mbuild b;
        mb_init(&b, 17);
        int64_t d[1] = {4};
        Onnx__TensorProto *w = mk_tensor("w", FR_F32, 1, d);
        set_external(w, k == 2 ? "lnk.bin" : k ? "m.onnx" : "/etc/passwd", "0", "16");
        b.init[b.g.n_initializer++] = w;
        mb_node(&b, "Identity", "id", "w", "y");
        b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
        size_t len;
        void *bytes = mb_pack(&b, &len);
        FR_ASSERT_OK(fr_base64_encode(bytes, len, &orig[k], &tl));
        free_kept();
    }
    const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"fp8run.original_model", orig[0], "'/etc/passwd', but the model was loaded from memory"},
        {"fp8run.original_model", orig[1], "'m.onnx', but the model was loaded from memory"},
        {"fp8run.original_model", orig[2], "'lnk.bin', but the model was loaded from memory"},
        {"fp8run.layer.1.state_prefix", "", "empty or over-long state prefix"},
        {"fp8run.layer.1.state_prefix", "fp8_state/elsewhere", "its node another"},
        {"fp8run.layer.2.state_prefix", NULL, "its node another"}, /* NULL: layer 1's value */
        {"fp8run.layer.2.name", NULL, "does not match the record"},
        {"fp8run.layer.1.sources", "a,b,c,d,e,f,g", "lists 7 sources"},
        /* recorded options go through the option table, as flags do */
        {"fp8run.option.margin", "65", "fp8run.option.margin"},
        {"fp8run.option.margin", "-1x", "fp8run.option.margin"},
        {"fp8run.option.fuse", "2", "fp8run.option.fuse"},
        {"fp8run.option.fuse", "0", "0 (no fusion), but the file holds"},
        {"fp8run.option.amax_history", "0", "fp8run.option.amax_history"},
        {"fp8run.option.interval", "", "fp8run.option.interval"},
        {"fp8run.option.recipe", "sometimes", "fp8run.option.recipe"},
        {"fp8run.option.precision", "fp4", "fp8run.option.precision"},
        /* per-layer records, informative or not, match the graph */
        {"fp8run.layer.1.weights", "nothing_like_it", "'nothing_like_it' is no weight of the model"},
        {"fp8run.layer.1.why", "", "fp8run.layer.1.why"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fr_graph *g;
        FR_ASSERT_OK(fr_onnx_load_file(P("c.fbs"), &g));
        char key0[128];
        snprintf(key0, sizeof key0, "%s", cases[i].key);
        if (strncmp(key0, "fp8run.layer.", 13) == 0) key0[13] = '1'; /* the same key of layer 1 (an fp8 one: layer 0 is bf16, the boundary) */
        const char *v0 = NULL;
        int at = -1;
        for (int k = 0; k < g->n_metadata; k++) {
            if (strcmp(g->metadata[k].key, key0) == 0) v0 = g->metadata[k].value;
            if (strcmp(g->metadata[k].key, cases[i].key) == 0) at = k;
        }
        CU_ASSERT_FATAL(at >= 0 && v0);
        char *nv = strdup(cases[i].value ? cases[i].value : v0);
        free(g->metadata[at].value);
        g->metadata[at].value = nv;
        FR_ASSERT_OK(fr_onnx_save_file(g, P("crafted.fbs"), NULL));
        fr_graph_free(g);
        fr_fbs f;
        CU_ASSERT_NOT_EQUAL(fr_fbs_load(P("crafted.fbs"), &f), FR_OK);
        if (!strstr(fr_last_error(), cases[i].needle) || !strstr(fr_last_error(), "crafted.fbs"))
            fprintf(stderr, "\n  %s: %s\n", cases[i].key, fr_last_error());
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), cases[i].needle));
        refused(cli_run("info crafted.fbs"), "crafted.fbs", cases[i].needle);
        refused(cli_run("train crafted.fbs --data tok.bin --steps 1 --lr 1e-3"), "crafted.fbs", cases[i].needle);
    }
    /* the recorded options through the option table when the API loads the file: the flags'
     * own messages, ranges and choices (the reader's bounds above are the same or wider) */
    const struct {
        const char *key, *value, *needle;
    } table[] = {
        {"fp8run.option.margin", "65", "fp8_margin: '65' is not an integer in -64..64"},
        {"fp8run.option.fuse", "2", "fuse: '2' is not 0 or 1"},
        {"fp8run.option.amax_history", "0", "amax_history_len: '0' is not an integer in 1.."},
        {"fp8run.option.interval", "", "fp8run.option.interval': an empty value"},
        {"fp8run.option.recipe", "sometimes", "recipe: 'sometimes' is not one of"},
        {"fp8run.option.fp8_exclude", "", "fp8run.option.fp8_exclude': an empty value"},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        fr_graph *g;
        FR_ASSERT_OK(fr_onnx_load_file(P("c.fbs"), &g));
        int at = -1;
        for (int k = 0; k < g->n_metadata; k++)
            if (strcmp(g->metadata[k].key, table[i].key) == 0) at = k;
        if (at < 0) { /* an optional one the compile did not record */
            fr_kv *kv = realloc(g->metadata, (size_t)(g->n_metadata + 1) * sizeof *kv);
            CU_ASSERT_PTR_NOT_NULL_FATAL(kv);
            g->metadata = kv;
            at = g->n_metadata++;
            kv[at].key = strdup(table[i].key);
            kv[at].value = NULL;
        }
        free(g->metadata[at].value);
        g->metadata[at].value = strdup(table[i].value);
        FR_ASSERT_OK(fr_onnx_save_file(g, P("crafted.fbs"), NULL));
        fr_graph_free(g);
        refused(cli_run("info crafted.fbs"), "crafted.fbs", table[i].needle);
        refused(cli_run("train crafted.fbs --data tok.bin --steps 1 --lr 1e-3"), "crafted.fbs", table[i].needle);
    }
    for (int k = 0; k < 3; k++) free(orig[k]);
}

/* External data through a symbolic link inside the model's folder: every command that loads
 * the model refuses it, naming the model file, the tensor and the location. */
static void test_external_symlink(void)
{
    mbuild b;
    mb_init(&b, 17);
    int64_t d[1] = {4};
    Onnx__TensorProto *w = mk_tensor("w", FR_F32, 1, d);
    set_external(w, "w.bin", "0", "16");
    b.init[b.g.n_initializer++] = w;
    mb_node(&b, "Identity", "id", "w", "y");
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    mkdir(P("ext"), 0755);
    mb_save(&b, P("ext/e.onnx"));
    free_kept();
    cli_write("ext/data.bin", "0123456789abcdef");
    CU_ASSERT_EQUAL(symlink("data.bin", P("ext/w.bin")), 0);
    refused(cli_run("info ext/e.onnx"), "ext/e.onnx", "initializer 'w': external data location 'w.bin': 'w.bin' is a "
                                                      "symbolic link");
    refused(cli_run("run ext/e.onnx --output-dir o"), "ext/e.onnx", "'w.bin' is a symbolic link");
    /* the file itself in its place: loads */
    CU_ASSERT_EQUAL(unlink(P("ext/w.bin")), 0);
    CU_ASSERT_EQUAL(rename(P("ext/data.bin"), P("ext/w.bin")), 0);
    CLI_EXPECT(cli_run("run ext/e.onnx --output-dir o"), 0, cli_err, "");
}

static CU_TestInfo tests[] = {
    {"external data through a symbolic link in the folder", test_external_symlink},
    {"export CKPT: a recorded model path outside the folder or cut short", test_recorded_model_path},
    {"export CKPT: a parameter missing is an error naming it", test_missing_parameter},
    {"resume: impossible counters in a CRC-valid checkpoint", test_impossible_counters},
    {"resume, export, eval: a checkpoint of another format", test_other_format},
    {"resume: only corrupt checkpoints is a failure", test_resume_corrupt_only},
    {"FIFOs and folders as files are refused without hanging", test_fifos},
    {"token ids at the vocabulary size, absurd values", test_tokens_and_values},
    {"--ckpt-keep prunes only this run's checkpoints", test_prune_only_own},
    {"partial checkpoints of killed runs are cleaned", test_stale_tmp_cleanup},
    {"log trim does not write through a planted symlink", test_log_trim_symlink},
    {"shape info: dims that overflow int64", test_shape_info_overflow},
    {"checkpoints and exports do not write through symlinks", test_no_write_through_symlinks},
    {"over-long tensor names in a checkpoint", test_long_names},
    {"checkpoint index: duplicates refused, 10^5 tensors in linear time", test_ckpt_index},
    {"compiled graph: crafted layer metadata refused", test_crafted_fbs},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"hostile", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
