/* `fp8run train|eval|export` run as a program (FR_CLI): help, usage errors (exit 2), failures
 * (exit 1: token id >= vocab, file too short, unknown input), a training run with JSONL log,
 * validation, checkpoints and export, resume exactness through the CLI (losses of the resumed
 * steps equal the uninterrupted run's, as printed), a corrupted newest checkpoint skipped on
 * --resume, Ctrl-C (exit 130 with a checkpoint), the progress line on a terminal, eval of a
 * model and of a checkpoint, export of a checkpoint; and llama_tiny through the CLI following
 * PyTorch's losses (tests/fixtures/train). The small model is built here and saved as ONNX. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "tests/cli_runner.h"

/* ---- fixtures made here ---- */

static int add_init(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims)
{
    int vid;
    fr_tensor *t;
    if (fr_graph_add_value(g, name, &vid) != FR_OK || fr_tensor_new(dt, rank, dims, name, &t) != FR_OK ||
        fr_graph_set_initializer(g, vid, t) != FR_OK)
        return -1;
    return vid;
}

static int add_bt(fr_graph *g, const char *name, fr_dtype dt, int input)
{
    int vid;
    int64_t dims[3] = {-1, -1, 0};
    if (fr_graph_add_value(g, name, &vid) != FR_OK) return -1;
    fr_value_set_shape(&g->values[vid], dt, 2, dims);
    g->values[vid].dim_params[0] = strdup("batch");
    g->values[vid].dim_params[1] = strdup("seq");
    if (input) {
        g->values[vid].flags |= FR_VAL_INPUT;
        if (fr_graph_mark_input(g, vid) != FR_OK) return -1;
    }
    return vid;
}

static int node(fr_graph *g, const char *op, const char *out_name, int n_in, const int *in, int out)
{
    int nid;
    if (out < 0 && fr_graph_add_value(g, out_name, &out) != FR_OK) return -1;
    if (fr_graph_add_node(g, op, "", out_name, n_in, in, 1, &out, &nid) != FR_OK) return -1;
    return out;
}

/* logits = tanh(onehot(ids) @ E * gain) @ W + b, vocab V, written as ONNX (opset 17) */
static int write_tiny_model(const char *path, int64_t V, int64_t D, const char *extra_input)
{
    fr_rng r = fr_test_rng("tiny model");
    fr_graph *g;
    if (fr_graph_new(&g) != FR_OK) return 1;
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    g->name = strdup("tiny");
    int ids = add_bt(g, "input_ids", FR_I64, 1);
    if (extra_input) add_bt(g, extra_input, FR_I64, 1);
    int64_t dv = V, one = 1, de[2] = {V, D}, dd = D, dw[2] = {D, V};
    int range = add_init(g, "vocab_range", FR_I64, 1, &dv), axes = add_init(g, "axes", FR_I64, 1, &one);
    for (int64_t i = 0; i < V; i++) ((int64_t *)g->values[range].constant->data)[i] = i;
    ((int64_t *)g->values[axes].constant->data)[0] = 2;
    int E = add_init(g, "embed.weight", FR_F32, 2, de), gain = add_init(g, "gain", FR_F32, 1, &dd);
    int W = add_init(g, "head.weight", FR_F32, 2, dw), b = add_init(g, "head.bias", FR_F32, 1, &dv);
    fr_rng_fill_normal(&r, g->values[E].constant->data, V * D, 0.8f);
    fr_rng_fill(&r, g->values[gain].constant->data, D, 0.5f, 1.5f);
    fr_rng_fill_normal(&r, g->values[W].constant->data, D * V, 1.0f / sqrtf((float)D));
    fr_rng_fill_normal(&r, g->values[b].constant->data, V, 0.1f);
    int i1[2] = {ids, axes};
    int u = node(g, "Unsqueeze", "ids3", 2, i1, -1);
    int i2[2] = {u, range};
    int eq = node(g, "Equal", "onehot_b", 2, i2, -1);
    int oh = node(g, "Cast", "onehot", 1, &eq, -1);
    if (fr_node_set_attr_int(&g->nodes[g->values[oh].producer], "to", FR_F32) != FR_OK) return 1;
    int i3[2] = {oh, E};
    int h = node(g, "Einsum", "h", 2, i3, -1);
    if (fr_node_set_attr_string(&g->nodes[g->values[h].producer], "equation", "btv,vd->btd") != FR_OK) return 1;
    int i4[2] = {h, gain};
    int hg = node(g, "Mul", "hg", 2, i4, -1);
    int a = node(g, "Tanh", "a", 1, &hg, -1);
    int i5[2] = {a, W};
    int z = node(g, "Einsum", "z", 2, i5, -1);
    if (fr_node_set_attr_string(&g->nodes[g->values[z].producer], "equation", "btd,dv->btv") != FR_OK) return 1;
    int logits;
    if (fr_graph_add_value(g, "logits", &logits) != FR_OK) return 1;
    int64_t ld[3] = {-1, -1, V};
    fr_value_set_shape(&g->values[logits], FR_F32, 3, ld);
    g->values[logits].dim_params[0] = strdup("batch");
    g->values[logits].dim_params[1] = strdup("seq");
    int i6[2] = {z, b};
    node(g, "Add", "logits", 2, i6, logits);
    g->values[logits].flags |= FR_VAL_OUTPUT;
    if (fr_graph_mark_output(g, logits) != FR_OK) return 1;
    fr_status st = fr_onnx_save_file(g, path, NULL);
    if (st != FR_OK) fprintf(stderr, "%s\n", fr_last_error());
    fr_graph_free(g);
    return st != FR_OK;
}

/* n uint16 tokens: a repeating pattern below V with one id `bad_at` (>= 0) set to V */
static int write_tokens(const char *path, int64_t n, int64_t V, int64_t bad_at)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    for (int64_t i = 0; i < n; i++) {
        uint16_t x = (uint16_t)(i == bad_at ? V : (i * 7 + i / 5) % V);
        fwrite(&x, 2, 1, f);
    }
    return fclose(f) != 0;
}

static const char *P(const char *name)
{
    static char buf[8][700];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", cli_tmp, name);
    return buf[k];
}

static int suite_init(void)
{
    if (cli_suite_init()) return 1;
    return write_tiny_model(P("tiny.onnx"), 17, 8, NULL) || write_tiny_model(P("mystery.onnx"), 17, 8, "mystery_input") ||
           write_tokens(P("tok.bin"), 700, 17, -1) || write_tokens(P("val.bin"), 200, 17, -1) ||
           write_tokens(P("bad.bin"), 700, 17, 333) || write_tokens(P("short.bin"), 9, 17, -1);
}


/* ---- tests ---- */

static void test_help_and_usage(void)
{
    CLI_EXPECT(cli_run("train --help"), 0, cli_out, "usage: fp8run train MODEL");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "--grad-accum"));
    CLI_EXPECT(cli_run("eval --help"), 0, cli_out, "usage: fp8run eval");
    CLI_EXPECT(cli_run("export --help"), 0, cli_out, "usage: fp8run export CKPT");
    CLI_EXPECT(cli_run("train tiny.onnx --steps 2 --batch 2 --seq 4 --lr 0.01"), 2, cli_err, "--data FILE is required");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "fp8run: error: "));
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps 2 --batch 2 --seq 4"), 2, cli_err,
               "--lr LR is required");
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps 2 --batch 2 --seq 4 --lr 0.1 --precision fp16"), 2,
               cli_err, "'fp16' is not one of fp32, bf16, fp8");
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps two --batch 2 --seq 4 --lr 0.1"), 2, cli_err, "--steps");
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps 2 --batch 2 --seq 4 --lr 0.1 --bogus"), 2, cli_err,
               "unknown option '--bogus'");
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps 2 --batch 2 --seq 4 --lr 0.1 --resume"), 2, cli_err,
               "--resume needs --ckpt-dir");
    CLI_EXPECT(cli_run("eval tiny.onnx --batch 2 --seq 4"), 2, cli_err, "--data FILE is required");
    CLI_EXPECT(cli_run("export x.ckpt"), 2, cli_err, "-o OUT.onnx is required");
}

static void test_failures(void)
{
    CLI_EXPECT(cli_run("train tiny.onnx --data bad.bin --steps 40 --batch 2 --seq 5 --lr 0.01 --data-order sequential"),
               1, cli_err, "fp8run: error: ");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "vocabulary"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "bad.bin"));
    CLI_EXPECT(cli_run("train tiny.onnx --data short.bin --steps 4 --batch 2 --seq 5 --lr 0.01"), 1, cli_err,
               "short.bin");
    CLI_EXPECT(cli_run("train mystery.onnx --data tok.bin --steps 4 --batch 2 --seq 5 --lr 0.01"), 1, cli_err,
               "mystery_input");
    CLI_EXPECT(cli_run("train nowhere.onnx --data tok.bin --steps 4 --batch 2 --seq 5 --lr 0.01"), 1, cli_err,
               "nowhere.onnx");
    CLI_EXPECT(cli_run("eval tiny.onnx --data short.bin --batch 2 --seq 5"), 1, cli_err, "short.bin");
    CLI_EXPECT(cli_run("export tiny.onnx -o x.onnx"), 1, cli_err, "not an fp8run checkpoint");
}

static void test_train_log_ckpt_export(void)
{
    CLI_EXPECT(cli_run("train tiny.onnx --data tok.bin --steps 12 --batch 2 --seq 5 --lr 0.02 --data-order sequential "
                       "--log run.jsonl --log-every 5 --val val.bin --val-every 6 --val-batches 3 --ckpt-dir ck "
                       "--ckpt-every 4 --ckpt-keep 2 --export trained.onnx --warmup 2 --min-lr 0.002"),
               0, cli_out, "trained tiny.onnx: 12 steps");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "exported trained.onnx"));
    /* without a terminal: plain lines every --log-every steps, and the first and last */
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "step 1/12 loss"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "step 5/12 loss"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "step 12/12 loss"));
    CU_ASSERT_PTR_NULL(strstr(cli_err, "step 7/12 loss"));
    CU_ASSERT_PTR_NULL(strchr(cli_err, '\r'));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "val loss"));
    double losses[12];
    int vals;
    CU_ASSERT_EQUAL(cli_read_log(P("run.jsonl"), losses, 12, &vals, NULL), 12);
    CU_ASSERT_EQUAL(vals, 2); /* after step 6 and at the end */
    /* Single-batch losses are too noisy over 12 steps to order (seed 1795644062 rose);
     * that training lowers the loss is checked on the whole of val.bin below (l1 < l0).
     * Here: the log and the progress line report the same step-12 loss. */
    const char *last = strstr(cli_err, "step 12/12 loss");
    double shown = -1;
    CU_ASSERT_FATAL(last && sscanf(last, "step 12/12 loss %lf", &shown) == 1);
    CU_ASSERT(isfinite(losses[11]) && fabs(shown - losses[11]) <= 5e-4 * fabs(losses[11]) + 5e-4);
    /* --ckpt-keep 2: steps 8 and 12 remain */
    struct stat sb;
    CU_ASSERT_EQUAL(stat(P("ck/step_00000012.ckpt"), &sb), 0);
    CU_ASSERT_EQUAL(stat(P("ck/step_00000008.ckpt"), &sb), 0);
    CU_ASSERT_NOT_EQUAL(stat(P("ck/step_00000004.ckpt"), &sb), 0);

    /* eval of the model, of the exported model and of the checkpoint (model from its record) */
    CLI_EXPECT(cli_run("eval tiny.onnx --data val.bin --batch 2 --seq 5"), 0, cli_out, "loss ");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "perplexity"));
    double l0 = -1, l1 = -2, l2 = -3, ppl = 0;
    sscanf(cli_out, "loss %lf perplexity %lf", &l0, &ppl);
    CU_ASSERT(fabs(ppl - exp(l0)) <= 1e-3 * ppl);
    CLI_EXPECT(cli_run("eval trained.onnx --data val.bin --batch 2 --seq 5"), 0, cli_out, "loss ");
    sscanf(cli_out, "loss %lf", &l1);
    CLI_EXPECT(cli_run("eval ck/step_00000012.ckpt --data val.bin --batch 2 --seq 5"), 0, cli_out, "loss ");
    sscanf(cli_out, "loss %lf", &l2);
    CU_ASSERT(l1 < l0);
    CU_ASSERT_EQUAL(l1, l2);
    /* export of the checkpoint == the --export file's weights */
    CLI_EXPECT(cli_run("export ck/step_00000012.ckpt --model tiny.onnx -o again.onnx"), 0, cli_out,
               "exported again.onnx");
    fr_graph *a, *b;
    FR_ASSERT_OK(fr_onnx_load_file(P("trained.onnx"), &a));
    FR_ASSERT_OK(fr_onnx_load_file(P("again.onnx"), &b));
    CU_ASSERT_EQUAL_FATAL(a->n_initializers, b->n_initializers);
    for (int i = 0; i < a->n_initializers; i++) {
        const fr_value *va = &a->values[a->initializers[i]];
        int vb = fr_graph_find_value(b, va->name);
        CU_ASSERT_FATAL(vb >= 0);
        CU_ASSERT_EQUAL(va->constant->nbytes, b->values[vb].constant->nbytes);
        CU_ASSERT_EQUAL(memcmp(va->constant->data, b->values[vb].constant->data, va->constant->nbytes), 0);
    }
    fr_graph_free(a);
    fr_graph_free(b);
}

static void test_resume_exact(void)
{
    const char *common = "train tiny.onnx --data tok.bin --batch 2 --seq 5 --lr 0.02 --seed 7 --grad-accum 2 "
                         "--warmup 2 --min-lr 0.001";
    double full[10], resumed[10];
    int vals;
    CLI_EXPECT(cli_run("%s --steps 10 --log full.jsonl", common), 0, cli_out, "10 steps");
    CU_ASSERT_EQUAL(cli_read_log(P("full.jsonl"), full, 10, &vals, NULL), 10);
    CLI_EXPECT(cli_run("%s --steps 10 --log part.jsonl --ckpt-dir rck --ckpt-every 4 --ckpt-keep 0", common), 0,
               cli_out, "10 steps");
    /* corrupt the newest checkpoint: --resume skips it with a warning and takes step 8 */
    FILE *f = fopen(P("rck/step_00000010.ckpt"), "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 200, SEEK_SET);
    const int byte = fgetc(f); /* flipped: a constant may be what is there already */
    CU_ASSERT_FATAL(byte != EOF);
    fseek(f, 200, SEEK_SET);
    fputc(byte ^ 0xff, f);
    fclose(f);
    CLI_EXPECT(cli_run("%s --steps 10 --log part.jsonl --ckpt-dir rck --resume", common), 0, cli_err,
               "skipping checkpoint");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "step_00000010.ckpt"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "resumed from"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "at step 8"));
    for (int i = 0; i < 10; i++) resumed[i] = NAN;
    /* the log continues: steps 9 and 10 of the first run were dropped, then written again */
    CU_ASSERT_EQUAL(cli_read_log(P("part.jsonl"), resumed, 10, &vals, NULL), 10);
    for (int s = 8; s < 10; s++) {
        if (full[s] != resumed[s]) printf("\n  step %d: %.9g vs %.9g", s + 1, full[s], resumed[s]);
        CU_ASSERT_EQUAL(full[s], resumed[s]);
    }
    /* nothing left to do */
    CLI_EXPECT(cli_run("%s --steps 10 --ckpt-dir rck --resume", common), 0, cli_out, "10 steps");
}

static void test_ctrl_c(void)
{
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && exec '%s' train tiny.onnx --data tok.bin --batch 2 --seq 5 --lr 0.01 --steps 100000000 "
             "--ckpt-dir intr --log intr.jsonl >intr.out 2>intr.err </dev/null",
             cli_tmp, FR_CLI);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* wait until a few steps are logged */
    struct stat sb;
    for (int i = 0; i < 600; i++) {
        if (stat(P("intr.jsonl"), &sb) == 0 && sb.st_size > 300) break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 130);
    char *err = cli_slurp(P("intr.err"), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "interrupted after step"));
    long long step = -1;
    const char *k = strstr(err, "interrupted after step ");
    if (k) step = strtoll(k + strlen("interrupted after step "), NULL, 10);
    char ck[64];
    snprintf(ck, sizeof ck, "intr/step_%08lld.ckpt", step);
    CU_ASSERT_EQUAL(stat(P(ck), &sb), 0);
    /* the log holds exactly the steps taken, the last one complete */
    char *log = cli_slurp(P("intr.jsonl"), NULL);
    long long lines = 0;
    for (const char *c = log; *c; c++) lines += *c == '\n';
    CU_ASSERT_EQUAL(lines, step);
    CU_ASSERT(strlen(log) > 0 && log[strlen(log) - 1] == '\n');
    free(log);
    free(err);
}

/* On a terminal: one progress line rewritten with '\r' (util-linux `script` gives a pty). */
static void test_progress_on_terminal(void)
{
    if (system("script -qec true /dev/null >/dev/null 2>&1") != 0) {
        printf("SKIP: no `script` to run under a terminal\n");
        return;
    }
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && script -qec \"'%s' train tiny.onnx --data tok.bin --batch 2 --seq 5 --lr 0.01 --steps 6\" "
             "/dev/null >tty.out 2>&1 </dev/null",
             cli_tmp, FR_CLI);
    CU_ASSERT_EQUAL(system(cmd), 0);
    char *s = cli_slurp(P("tty.out"), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "\rstep 6/6 | loss "));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "tok/s"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "ETA"));
    free(s);
}

/* The fixture Llama through the CLI follows PyTorch (tools/gen_train_reference.py). */
static void test_llama_cli_follows_pytorch(void)
{
    char model[600], data[600], refp[600], line[256];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(data, sizeof data, "train/tokens.bin");
    fr_fixture(refp, sizeof refp, "train/llama_tiny_adamw_losses.txt");
    double ref[20], got[20];
    int n = 0, vals;
    FILE *f = fopen(refp, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    while (n < 20 && fgets(line, sizeof line, f))
        if (line[0] != '#') ref[n++] = strtod(line, NULL);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(n, 20);
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 20 --batch 2 --seq 13 --lr 1e-3 --weight-decay 0.1 --beta2 0.95 "
                       "--grad-clip 1 --data-order sequential --log llama.jsonl --export llama_trained.onnx",
                       model, data),
               0, cli_out, "20 steps");
    CU_ASSERT_EQUAL_FATAL(cli_read_log(P("llama.jsonl"), got, 20, &vals, NULL), 20);
    for (int s = 0; s < 20; s++) CU_ASSERT(fabs(got[s] - ref[s]) <= 1e-4 * fabs(ref[s]));
}

static CU_TestInfo tests[] = {
    {"help and usage errors (exit 2)", test_help_and_usage},
    {"failures (exit 1): token id >= vocab, short file, unknown input", test_failures},
    {"train: log, validation, checkpoints, export; eval; export CKPT", test_train_log_ckpt_export},
    {"--resume is exact and skips a corrupted checkpoint", test_resume_exact},
    {"Ctrl-C: checkpoint and exit 130", test_ctrl_c},
    {"progress line on a terminal", test_progress_on_terminal},
    {"llama_tiny via the CLI follows PyTorch", test_llama_cli_follows_pytorch},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"train_cli", suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
