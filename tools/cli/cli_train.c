/* `fp8run train`, `fp8run eval` and `fp8run export`: the training loop around an fp8run session
 * (data loaders, progress, JSONL log, validation, checkpoints, Ctrl-C, export), evaluation of
 * a model or checkpoint, and export of a checkpoint's weights into the original model. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_ckpt_dir.h"
#include "cli_sft.h"
#include "cli_train_args.h"

#define CLI_EXIT_INTERRUPTED 130

/* ---------------------------------------------------------------------------------------- */
/* arguments shared by the commands                                                          */
/* ---------------------------------------------------------------------------------------- */


static const char *const k_orders[] = {"random", "sequential", NULL};

/* Options whose default the help does not print: required, or derived by train. */
static const char *const k_train_derived[] = {"batch", "seq_len", "lr", "lr_schedule", NULL};


/* ---------------------------------------------------------------------------------------- */
/* help                                                                                      */
/* ---------------------------------------------------------------------------------------- */


void cli_train_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run train MODEL --data FILE --steps N --batch B --seq T --lr LR [options]\n"
            "       fp8run train COMPILED.fbs --data FILE --steps N --lr LR [options]\n"
            "\n"
            "Train MODEL (ONNX) on the GPU when one is usable, else on the CPU (--device):\n"
            "next-token cross-entropy between the model's logits\n"
            "output and the token ids shifted by one (or the model's own scalar loss output).\n"
            "Each step takes B windows of T+1 tokens per micro-batch from the token file.\n"
            "--precision fp8 compiles the model on the fly; a compiled graph (fp8run compile) is\n"
            "trained as it is: batch, seq and the precision/recipe options come from it (another\n"
            "--batch/--seq is an error: compile again), export and checkpoints use the original\n"
            "model's names, and its checkpoints load into runs of the ONNX model and back.\n"
            "\n"
            "data:\n"
            "  --data FILE             training tokens: raw uint16/uint32 or llm.c token file\n"
            "  --data-dtype uint8|uint16|uint32  raw files' token width (default uint16; uint8:\n"
            "                          a text file's bytes, for byte-level models)\n"
            "  --data-order random|sequential  batches (default random, seeded by --seed)\n"
            "  --val FILE              validation tokens\n"
            "  --val-every N           validate every N steps (default: after the last step)\n"
            "  --val-batches N         batches per validation (default 20, fewer if the file is\n"
            "                          smaller; 0 = the whole file)\n"
            "run:\n"
            "  --steps N               total steps (a resumed run continues up to N)\n"
            "  --init-from DIR|FILE    start from a safetensors checkpoint (Hugging Face: a folder with\n"
            "                          model.safetensors or its sharded index, or one file), matched by\n"
            "                          parameter name; lists missing and unexpected names; a shape\n"
            "                          mismatch is an error (not used when --resume finds a checkpoint;\n"
            "                          trained parameters only: --freeze'd ones keep the model's values)\n"
            "  --strict-weights        refuse weights holding NaN or Inf, the model's or --init-from's\n"
            "                          (default: load them with a warning naming each tensor and\n"
            "                          its count)\n"
            "  --device auto|cuda|cpu  where to train (default auto: the GPU when one is usable)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "data parallel (NCCL, loaded at run time):\n"
            "  --gpus N                one process per GPU, each B windows of a global batch of N*B; also\n"
            "                          runs under a launcher setting RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT\n"
            "  --nnodes N              with --gpus G on each of N nodes: G*N ranks; start one `fp8run train`\n"
            "                          per node with the same MASTER_ADDR (node 0's address) and MASTER_PORT\n"
            "  --node-rank R           this node's place, 0 to N-1 (node 0 holds rank 0); `fp8run rendezvous`\n"
            "                          with the same options checks the launch without training\n"
            "output:\n"
            "  --log FILE.jsonl        one JSON record per step and per validation\n"
            "  --log-every N           read the loss back and print progress every N steps\n"
            "                          (default 10); the GPU runs ahead in between\n"
            "  --log-fp8 N             every N steps also a record of each FP8 operand (x, w, dy of\n"
            "                          every fp8 Linear): amax, scale, amax history max, range used\n"
            "                          (amax * scale / fp8 max; above 1 the top values saturated)\n"
            "  --ckpt-dir DIR          checkpoints DIR/step_NNNNNNNN.ckpt (at the end, on Ctrl-C)\n"
            "  --ckpt-every N          also every N steps\n"
            "  --ckpt-keep N           keep the newest N checkpoints (default 3; 0 = all)\n"
            "  --resume                continue from the newest valid checkpoint in --ckpt-dir\n"
            "  --export OUT.onnx       write the trained model (original graph and names; a LoRA run's\n"
            "                          adapters merged into their weights)\n"
            "  --export-adapter DIR    a LoRA run's adapters as PEFT writes them (adapter_model.safetensors,\n"
            "                          adapter_config.json)\n");
    train_args_help(f, FP8RUN_OPTION_TRAIN, "--batch, --seq and --lr", k_train_derived);
    fprintf(f, "\nCtrl-C finishes the current step, saves a checkpoint (with --ckpt-dir) and exits 130.\n");
}



/* ---------------------------------------------------------------------------------------- */
/* option values                                                                             */
/* ---------------------------------------------------------------------------------------- */


static int train_option(int argc, char **argv, int *i, train_args *a, int *rc)
{
    const char *v = NULL, *cmd = "train";
    int m, k;
    int64_t n;
#define OPT(name) ((m = cli_option(argc, argv, i, cmd, name, &v)) != 0)
#define VAL (m > 0)
    if (OPT("--val")) a->val = v;
    else if (OPT("--val-every")) { if (VAL) *rc = cli_int64(cmd, "--val-every", v, 0, &a->val_every); }
    else if (OPT("--val-batches")) {
        if (VAL && (*rc = cli_int64(cmd, "--val-batches", v, 0, &a->val_batches)) == 0) a->have_val_batches = 1;
    }
    else if (OPT("--data-order")) {
        if (VAL && (*rc = cli_choice(cmd, "--data-order", v, k_orders, &k)) == 0)
            a->order = k ? FP8RUN_DATA_SEQUENTIAL : FP8RUN_DATA_RANDOM;
    } else if (OPT("--steps")) {
        if (VAL && (*rc = cli_int64(cmd, "--steps", v, 1, &a->steps)) == 0) a->have_steps = 1;
    } else if (OPT("--log-fp8")) { if (VAL) *rc = cli_int64(cmd, "--log-fp8", v, 1, &a->log_fp8); }
    else if (OPT("--gpus")) { /* not a config field: this process launches the ranks (cli_dist.c) */
        if (VAL && (*rc = cli_int64(cmd, "--gpus", v, 1, &n)) == 0 && n > 1 << 20)
            *rc = cli_usage(cmd, "--gpus: %s is too large", v);
        if (VAL && *rc == 0) a->gpus = (int)n;
    }
    else if (cli_dist_option(cmd, argc, argv, i, &a->nnodes, &a->node_rank, rc)) m = 1;
    else if (OPT("--log")) a->log = v;
    else if (OPT("--log-every")) { if (VAL) *rc = cli_int64(cmd, "--log-every", v, 1, &a->log_every); }
    else if (OPT("--ckpt-dir")) a->ckpt_dir = v;
    else if (OPT("--ckpt-every")) { if (VAL) *rc = cli_int64(cmd, "--ckpt-every", v, 0, &a->ckpt_every); }
    else if (OPT("--ckpt-keep")) { if (VAL) *rc = cli_int64(cmd, "--ckpt-keep", v, 0, &a->ckpt_keep); }
    else if (strcmp(argv[*i], "--resume") == 0) { a->resume = 1; m = 1; }
    else if (OPT("--export-adapter")) a->adapter_dir = v;
    else if (OPT("--export")) a->export_path = v;
    else if (OPT("--init-from")) a->init_from = v;
    else if (strcmp(argv[*i], "--strict-weights") == 0) { a->strict_weights = 1; m = 1; }
    else
        return 0;
#undef VAL
#undef OPT
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}


static int parse_train(int argc, char **argv, train_args *a, int *help)
{
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (cli_is_help(argv[i])) {
            *help = 1;
            return 0;
        }
        if (!a->recipe_opt && cli_config_fixed_flag(argv[i])) a->recipe_opt = argv[i];
        if (train_args_option("train", argc, argv, &i, a, &rc) || train_option(argc, argv, &i, a, &rc)) continue;
        if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("train", "unknown option '%s'", argv[i]);
        else if (a->model)
            rc = cli_usage("train", "only one MODEL may be given (got '%s' and '%s')", a->model, argv[i]);
        else
            a->model = argv[i];
    }
    if (rc) return rc;
    if (!a->model) return cli_usage("train", "no MODEL given");
    if (!a->data) return cli_usage("train", "--data FILE is required");
    if (!a->have_steps) return cli_usage("train", "--steps N is required");
    /* --batch/--seq: required for an ONNX model, taken from a compiled graph (run_train) */
    if (a->log_fp8 && !a->log) return cli_usage("train", "--log-fp8 needs --log FILE.jsonl");
    if (!cli_config_given(&a->given, "lr")) return cli_usage("train", "--lr LR is required");
    if (a->resume && !a->ckpt_dir) return cli_usage("train", "--resume needs --ckpt-dir DIR");
    if (a->val_every && !a->val) return cli_usage("train", "--val-every needs --val FILE");
    if (a->ckpt_every && !a->ckpt_dir) return cli_usage("train", "--ckpt-every needs --ckpt-dir DIR");
    fp8run_train_config *c = &a->o;
    if (!cli_config_given(&a->given, "lr_schedule")) /* from the other options */
        c->lr_schedule = cli_config_given(&a->given, "min_lr")         ? "cosine"
                         : cli_config_given(&a->given, "warmup_steps") ? "warmup_constant"
                                                                       : "constant";
    const int cosine = strcmp(c->lr_schedule, "cosine") == 0;
    c->total_steps = a->steps;
    if (cosine && c->warmup_steps >= a->steps)
        return cli_usage("train", "--warmup %lld must be below --steps %lld for the cosine schedule",
                         (long long)c->warmup_steps, (long long)a->steps);
    if (cosine && c->min_lr > c->lr) return cli_usage("train", "--min-lr %g is above --lr %g", c->min_lr, c->lr);
    train_args_given_shape(a);
    c->batch = a->batch;
    c->seq_len = a->seq;
    c->dim_names = a->dims.names;
    c->dim_values = a->dims.values;
    c->n_dims = a->dims.n;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* files                                                                                     */
/* ---------------------------------------------------------------------------------------- */






/* A resumed run continues the JSONL log: records of steps after the checkpoint (written by the
 * run that was interrupted) are dropped so every step appears once. */
static int trim_log(const char *path, int64_t step)
{
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return 0;
    /* the read rule: a FIFO or a device named as the log is refused, not waited on */
    char *data;
    size_t dlen;
    if (fp8run_file_read(path, "training log", (uint64_t)4 << 30, &data, &dlen) != FP8RUN_OK) return cli_fail_status();
    FILE *in = dlen ? fmemopen(data, dlen, "r") : NULL;
    if (!in) { /* an empty log has nothing to drop */
        fp8run_file_free(data);
        return dlen ? cli_fail("out of memory") : 0;
    }
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) {
        fclose(in);
        return cli_fail("out of memory");
    }
    /* a fresh name (O_EXCL) in the log's folder: a predictable one could be a planted symlink */
    snprintf(tmp, n, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !out) close(fd);
    int rc = out ? 0 : cli_fail("cannot write a temporary file next to '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (rc == 0 && (len = getline(&line, &cap, in)) > 0) {
        long long s = -1;
        if (sscanf(line, "{\"step\": %lld", &s) == 1 && s > step) continue;
        if (fwrite(line, 1, (size_t)len, out) != (size_t)len) rc = cli_fail("writing '%s': %s", tmp, strerror(errno));
    }
    free(line);
    fclose(in);
    fp8run_file_free(data);
    if (out && fclose(out) != 0 && rc == 0) rc = cli_fail("writing '%s': %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = cli_fail("replacing log '%s': %s", path, strerror(errno));
    if (rc != 0 && fd >= 0) remove(tmp);
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* progress                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted = 0;
static int g_quiet = 0; /* data parallel: ranks other than 0 print no progress */

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *hms(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "--:--");
        return buf;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%02ld:%02ld", t / 60, t % 60);
    return buf;
}

typedef struct loop {
    train_args *a;
    fp8run_model *m;
    fp8run_session *t;
    fp8run_data_loader *dl, *vl;
    FILE *log;
    int tty;
    int line_open;     /* a \r progress line is on the terminal */
    double t0;         /* start of this run */
    int64_t first;     /* step this run started at */
    double train_s;    /* time spent in steps this run (queuing them and waiting for them) */
    double win_s;      /* train_s when statistics were last read back */
    int64_t win_done;  /* steps read back by then */
    int64_t tokens_per_step;
    int64_t targets[FP8RUN_MAX_QUEUED_STEPS]; /* SFT: the target tokens of step s at s % the size */
    int64_t last_ckpt; /* step of the last checkpoint written (-1: none) */
    cli_ckpt_set mine; /* checkpoints of this run (and of the run it resumes): --ckpt-keep prunes these */
} loop;

static void end_line(loop *L)
{
    if (L->line_open) {
        fputc('\n', stderr);
        L->line_open = 0;
    }
}

static void progress(loop *L, int64_t done, const fp8run_step_stats *s)
{
    int64_t total = L->a->steps, ran = done - L->first;
    double el = now_s() - L->t0, tps = L->train_s > 0 ? (double)(ran * L->tokens_per_step) / L->train_s : 0;
    double eta = ran > 0 ? el / (double)ran * (double)(total - done) : NAN;
    char e1[32], e2[32];
    if (g_quiet) return;
    if (L->tty) {
        fprintf(stderr, "\rstep %lld/%lld | loss %.4f | lr %.2e | %.0f tok/s | %s elapsed | ETA %s   ",
                (long long)done, (long long)total, s->loss, s->lr, tps, hms(el, e1, sizeof e1), hms(eta, e2, sizeof e2));
        fflush(stderr);
        L->line_open = 1;
    } else if (done % L->a->log_every == 0 || done == total || ran == 1) {
        fprintf(stderr, "step %lld/%lld loss %.4f lr %.3e grad_norm %.4f tok/s %.0f elapsed %s eta %s\n",
                (long long)done, (long long)total, s->loss, s->lr, s->grad_norm, tps, hms(el, e1, sizeof e1),
                hms(eta, e2, sizeof e2));
    }
}

static void log_json_num(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ", \"%s\": %.9g", key, v);
    else
        fprintf(f, ", \"%s\": null", key); /* JSON has no NaN/Inf */
}

static void log_step(loop *L, int64_t done, const fp8run_step_stats *s, double tps)
{
    if (!L->log) return;
    fprintf(L->log, "{\"step\": %lld", (long long)done);
    log_json_num(L->log, "loss", s->loss);
    log_json_num(L->log, "lr", s->lr);
    log_json_num(L->log, "grad_norm", s->grad_norm);
    log_json_num(L->log, "tokens_per_s", tps);
    if (L->a->o.sft) fprintf(L->log, ", \"target_tokens\": %lld", (long long)L->targets[s->step % FP8RUN_MAX_QUEUED_STEPS]);
    fprintf(L->log, ", \"skipped\": %s}\n", s->skipped ? "true" : "false");
    fflush(L->log);
}

static void log_json_str(FILE *f, const char *v)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* --log-fp8: one record with every FP8 operand's amax and scale (what saturates). Numbers the
 * recipe does not have are null, with a note saying why. */
static int log_fp8(loop *L, int64_t done)
{
    int n = 0;
    if (!L->log) return 0;
    if (fp8run_session_fp8_stats(L->t, &n) != FP8RUN_OK) return cli_fail_status();
    if (n == 0) return 0;
    FILE *f = L->log;
    /* each record names the module parameters its Linear reads, not only the node */
    fp8run_report *r = NULL;
    if (fp8run_session_report(L->t, &r) != FP8RUN_OK) return cli_fail_status();
    fprintf(f, "{\"step\": %lld, \"fp8\": [", (long long)done);
    for (int i = 0; i < n; i++) {
        fp8run_fp8_stat s = {.struct_size = sizeof s};
        if (fp8run_session_fp8_stat(L->t, i, &s) != FP8RUN_OK) {
            fp8run_report_destroy(r);
            return cli_fail_status();
        }
        fprintf(f, "%s{\"layer\": ", i ? ", " : "");
        log_json_str(f, s.layer);
        for (int k = 0; k < fp8run_report_layer_count(r); k++) {
            fp8run_layer_info li = {.struct_size = sizeof li};
            if (fp8run_report_layer(r, k, &li) != FP8RUN_OK || strcmp(li.name, s.layer) != 0) continue;
            fprintf(f, ", \"weights\": ");
            log_json_str(f, li.weights);
            break;
        }
        fprintf(f, ", \"operand\": \"%s\", \"recipe\": \"%s\", \"format\": \"%s\"", s.operand, s.recipe, s.format);
        log_json_num(f, "amax", s.has_amax ? s.amax : NAN);
        log_json_num(f, "scale", s.has_scale ? s.scale : NAN);
        if (strcmp(s.recipe, "delayed") == 0) {
            log_json_num(f, "next_scale", s.next_scale);
            log_json_num(f, "history_max", s.history_max);
            fprintf(f, ", \"updates\": %lld", (long long)s.updates);
        }
        log_json_num(f, "fp8_max", s.fp8_max);
        if (s.has_amax && s.has_scale) {
            log_json_num(f, "range_use", s.range_use);
            fprintf(f, ", \"saturated\": %s", s.saturated ? "true" : "false");
        }
        if (s.note[0]) {
            fprintf(f, ", \"note\": ");
            log_json_str(f, s.note);
        }
        fputc('}', f);
    }
    fp8run_report_destroy(r);
    fprintf(f, "]}\n");
    fflush(f);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* the training loop                                                                         */
/* ---------------------------------------------------------------------------------------- */

static int validate(loop *L, int64_t done)
{
    const int64_t B = L->a->batch, T = L->a->seq;
    const size_t per = (size_t)(B * (T + 1));
    int64_t n = fp8run_data_batches_per_epoch(L->vl), targets = 0;
    double sum = 0;
    int rc = 0;
    int64_t *w = L->a->o.sft ? NULL : malloc(per * sizeof *w);
    if (L->a->o.sft) { /* the mean over every target token */
        rc = cli_sft_eval(L->t, L->vl, &sum, &targets);
        n = 1;
    } else if (!w) {
        return cli_fail("out of memory");
    }
    fp8run_data_reset(L->vl);
    for (int64_t b = 0; b < n && rc == 0 && !L->a->o.sft; b++) {
        double l;
        if (fp8run_data_next(L->vl, FP8RUN_DTYPE_INT64, w, per) != FP8RUN_OK ||
            fp8run_session_eval(L->t, w, FP8RUN_DTYPE_INT64, per, &l) != FP8RUN_OK)
            rc = cli_fail("validation: %s", cli_last_error());
        else
            sum += l;
    }
    free(w);
    if (rc) return rc;
    double vl = sum / (double)n;
    end_line(L);
    if (!g_quiet && L->a->o.sft)
        fprintf(stderr, "step %lld: val loss %.4f (perplexity %.2f, %lld target tokens)\n", (long long)done, vl,
                exp(vl), (long long)targets);
    else if (!g_quiet)
        fprintf(stderr, "step %lld: val loss %.4f (perplexity %.2f, %lld batches)\n", (long long)done, vl, exp(vl),
                (long long)n);
    if (L->log) {
        fprintf(L->log, "{\"step\": %lld", (long long)done);
        log_json_num(L->log, "val_loss", vl);
        fprintf(L->log, "}\n");
        fflush(L->log);
    }
    return 0;
}

static int save_ckpt(loop *L, int64_t done)
{
    if (!L->a->ckpt_dir || L->last_ckpt == done) return 0;
    char *p = cli_ckpt_path(L->a->ckpt_dir, done);
    if (!p) return cli_fail("out of memory");
    int rc = 0;
    if (fp8run_session_save(L->t, p, L->dl) != FP8RUN_OK) { /* with the loader's position */
        rc = cli_fail("saving checkpoint: %s", cli_last_error());
    } else {
        end_line(L);
        L->last_ckpt = done;
        if (!g_quiet) { /* rank 0 wrote it and keeps the folder */
            fprintf(stderr, "checkpoint: %s\n", p);
            rc = cli_ckpt_set_add(&L->mine, done);
            cli_ckpt_set_prune(&L->mine, L->a->ckpt_dir, L->a->ckpt_keep, cli_ckpt_path);
        }
    }
    free(p);
    return rc;
}

/* Read back the statistics of every queued step, in order: one JSONL record, the skip warning
 * and the progress line per step (tokens/s over the steps since the last read-back). This is
 * the only place the loop waits for the GPU, every --log-every steps (and before validation,
 * checkpoints, --log-fp8 records and at the end). *numeric: a step went over --max-bad-steps
 * (msg gets why; the steps queued after it are read back all the same). */
static int drain(loop *L, int *numeric, char *msg, size_t msg_len)
{
    typedef struct polled {
        fp8run_step_stats s;
        char reason[256];
    } polled;
    static polled got[FP8RUN_MAX_QUEUED_STEPS];
    int n = 0, rc = 0;
    double t1 = now_s();
    while (n < FP8RUN_MAX_QUEUED_STEPS && fp8run_session_steps_queued(L->t) > 0) {
        polled *p = &got[n];
        p->s = (fp8run_step_stats){.struct_size = sizeof p->s};
        /* a failed read-back's message names the step (and the steps queued after it) */
        fp8run_status st = fp8run_session_poll_stats(L->t, 1, &p->s);
        if (st != FP8RUN_OK && st != FP8RUN_ERR_NUMERIC) {
            rc = cli_fail("%s", cli_last_error());
            break;
        }
        if (!p->s.available) break;
        snprintf(p->reason, sizeof p->reason, "%s", p->s.reason);
        p->s.reason = p->reason;
        if (st == FP8RUN_ERR_NUMERIC && !*numeric) {
            *numeric = 1;
            snprintf(msg, msg_len, "%s", cli_last_error());
        }
        n++;
    }
    L->train_s += now_s() - t1; /* the wait for the device is the steps' time */
    if (n == 0) return rc;
    const int64_t last = got[n - 1].s.step + 1;
    const double win = L->train_s - L->win_s;
    const double tps = win > 0 ? (double)((last - L->win_done) * L->tokens_per_step) / win : 0;
    L->win_s = L->train_s;
    L->win_done = last;
    int over = 0;
    for (int i = 0; i < n; i++) {
        const fp8run_step_stats *s = &got[i].s;
        const int64_t done = s->step + 1;
        log_step(L, done, s, tps);
        if (s->skipped && !g_quiet) {
            end_line(L);
            fprintf(stderr, "fp8run: warning: step %lld skipped (%d in a row): %s\n", (long long)done, s->bad_in_a_row,
                    s->reason);
        }
        over |= *numeric && s->skipped && s->bad_in_a_row > L->a->o.max_bad_steps;
        if (!over) progress(L, done, s);
    }
    return rc;
}

static int world_of(const train_args *a) { return a->o.world_size > 0 ? a->o.world_size : 1; }

static int train_loop(loop *L)
{
    train_args *a = L->a;
    const int K = a->o.grad_accum;
    const size_t per = (size_t)(a->batch * (a->seq + 1));
    const int W = world_of(a), R = a->o.rank;
    /* K x W x B x (T+1) ids, checked before allocating (the session's memory check counted them) */
    size_t n_w, n_gw, bytes;
    if (__builtin_mul_overflow((size_t)K, per, &n_w) || __builtin_mul_overflow(n_w, (size_t)W, &n_gw) ||
        __builtin_mul_overflow(n_gw, sizeof(int64_t), &bytes))
        return cli_fail("--grad-accum %d x %d process(es) x --batch %lld x (--seq %lld + 1) token ids overflow the "
                        "address space", K, W, (long long)a->batch, (long long)a->seq);
    int64_t *w = malloc(n_w * sizeof *w), *gw = W > 1 ? malloc(n_gw * sizeof *w) : w;
    /* SFT: each token's segment id and target flag beside it (cli_sft.h) */
    const int sft = a->o.sft;
    int32_t *seg = sft ? malloc(n_w * sizeof *seg) : NULL, *gseg = sft && W > 1 ? malloc(n_gw * sizeof *seg) : seg;
    uint8_t *tgt = sft ? malloc(n_w) : NULL, *gtgt = sft && W > 1 ? malloc(n_gw) : tgt;
    int rc = 0, numeric = 0; /* out of memory: straight to the frees below */
    if (!w || !gw || (sft && (!seg || !gseg || !tgt || !gtgt)))
        rc = cli_fail("out of memory for the step's token windows (%zu ids)", n_gw);
    char msg[2048];
    int64_t done = fp8run_session_steps_done(L->t);
    L->first = L->win_done = done;
    L->t0 = now_s();
    while (done < a->steps && rc == 0) {
        /* micro-batch by micro-batch, as the checkpoint's loader position counts them */
        int64_t step_targets = 0;
        for (int k = 0; k < K && rc == 0; k++) {
            const size_t at = (size_t)k * (size_t)W * per;
            int64_t nt = 0;
            fp8run_status ds = sft ? fp8run_data_next_sft(L->dl, gw + at, gseg + at, gtgt + at, (size_t)W * per, &nt)
                                   : fp8run_data_next(L->dl, FP8RUN_DTYPE_INT64, gw + at, (size_t)W * per);
            step_targets += nt;
            if (ds != FP8RUN_OK) {
                char why[16];
                snprintf(msg, sizeof msg, "%s", cli_last_error());
                if (drain(L, &numeric, why, sizeof why) == 0) save_ckpt(L, done); /* what was trained so far is kept */
                end_line(L);
                rc = cli_fail("%s", msg);
            }
        }
        if (rc) break;
        for (int k = 0; k < K && W > 1; k++) { /* this rank's windows of each micro-batch */
            const size_t to = (size_t)k * per, from = ((size_t)k * (size_t)W + (size_t)R) * per;
            memcpy(w + to, gw + from, per * sizeof *w);
            if (sft) memcpy(seg + to, gseg + from, per * sizeof *seg);
            if (sft) memcpy(tgt + to, gtgt + from, per);
        }
        /* all ranks' labels (each read the global batch): the log's count and the SFT weights' */
        L->targets[done % FP8RUN_MAX_QUEUED_STEPS] = step_targets;
        /* queued without waiting for the GPU: the statistics are read back by drain() */
        double t1 = now_s();
        fp8run_status st = sft ? fp8run_session_train_step_sft_async(L->t, w, seg, tgt, (size_t)K * per,
                                                                     W > 1 ? step_targets : 0, NULL)
                               : fp8run_session_train_step_async(L->t, w, FP8RUN_DTYPE_INT64, (size_t)K * per, NULL);
        L->train_s += now_s() - t1;
        if (st != FP8RUN_OK) {
            rc = cli_fail("step %lld: %s", (long long)done + 1, cli_last_error());
            break;
        }
        done++;
        const int val_due = L->vl && a->val_every && done % a->val_every == 0 && done < a->steps;
        const int ckpt_due = a->ckpt_every && done % a->ckpt_every == 0;
        const int fp8_due = a->log_fp8 && done % a->log_fp8 == 0;
        if (done % a->log_every == 0 || done == a->steps || done - L->first == 1 || val_due || ckpt_due || fp8_due ||
            g_interrupted || fp8run_session_steps_queued(L->t) >= FP8RUN_MAX_QUEUED_STEPS)
            rc = drain(L, &numeric, msg, sizeof msg);
        if (rc == 0 && fp8_due) rc = log_fp8(L, done);
        if (rc == 0 && numeric) { /* too many bad steps: keep what we have, then stop */
            save_ckpt(L, done);
            end_line(L);
            rc = cli_fail("%s", msg);
            break;
        }
        if (rc == 0 && val_due) rc = validate(L, done);
        if (rc == 0 && ckpt_due) rc = save_ckpt(L, done);
        if (rc == 0 && g_interrupted) {
            rc = save_ckpt(L, done);
            end_line(L);
            if (rc == 0) {
                fprintf(stderr, "fp8run: interrupted after step %lld%s\n", (long long)done,
                        a->ckpt_dir ? "; checkpoint saved" : " (no --ckpt-dir: nothing saved)");
                rc = CLI_EXIT_INTERRUPTED;
            }
        }
    }
    if (gw != w) free(gw);
    if (gseg != seg) free(gseg);
    if (gtgt != tgt) free(gtgt);
    free(w);
    free(seg);
    free(tgt);
    end_line(L);
    if (rc == 0 && L->vl) rc = validate(L, done);
    if (rc == 0) rc = save_ckpt(L, done);
    return rc;
}


static int open_loaders(loop *L)
{
    train_args *a = L->a;
    fp8run_data_config d = train_args_data_config(a, fp8run_session_vocab(L->t));
    d.batch *= world_of(a); /* every rank reads the global batch and takes its share */
    if (fp8run_data_open(a->data, &d, &L->dl) != FP8RUN_OK) return cli_fail("--data: %s", cli_last_error());
    d.batch = a->batch;
    if (a->val && fp8run_data_open_val(a->val, &d, a->val_batches, &L->vl) != FP8RUN_OK) {
        /* the default batch count on a small file: take what the file holds */
        if (a->have_val_batches || fp8run_data_open_val(a->val, &d, 0, &L->vl) != FP8RUN_OK)
            return cli_fail("--val: %s", cli_last_error());
    }
    /* every id once, up front (a linear pass): an id the sampler reaches late or never would
     * otherwise fail hours in, or never, and the run would pass for sound */
    if (d.vocab_size > 0 && fp8run_data_check_tokens(L->dl, d.vocab_size) != FP8RUN_OK)
        return cli_fail("--data: %s", cli_last_error());
    if (d.vocab_size > 0 && L->vl && fp8run_data_check_tokens(L->vl, d.vocab_size) != FP8RUN_OK)
        return cli_fail("--val: %s", cli_last_error());
    return 0;
}


/* Resume: the checkpoint's weights into the model first (so frozen ones agree too), then, once
 * the session exists, everything else and the loader's position. */
static int resume_session(loop *L, const char *resume, const fp8run_checkpoint *ck)
{
    const void *ds = NULL;
    size_t len = 0;
    if (fp8run_session_load(L->t, resume, NULL) != FP8RUN_OK) return cli_fail_status();
    if (fp8run_checkpoint_data_state(ck, &ds, &len) != FP8RUN_OK)
        return cli_fail("checkpoint '%s' has no data loader state", resume);
    if (fp8run_data_set_state(L->dl, ds, len) != FP8RUN_OK)
        return cli_fail("resuming from '%s': %s", resume, cli_last_error());
    L->last_ckpt = fp8run_session_steps_done(L->t);
    int rc = cli_ckpt_adopt(L->a->ckpt_dir, L->last_ckpt, &L->mine);
    if (rc) return rc;
    if (!g_quiet) fprintf(stderr, "resumed from %s at step %lld\n", resume, (long long)fp8run_session_steps_done(L->t));
    return 0;
}

/* The write rule's refusals before any work: no output (the log, the exports) is one of the
 * inputs (the model, the token files, the safetensors start) by any name, nor another output.
 * (Checkpoints are named by the run in their own folder.) */
static int check_train_files(const train_args *a)
{
    fp8run_files *f;
    if (fp8run_files_create(&f) != FP8RUN_OK) return cli_fail_status();
    fp8run_status ps = fp8run_files_input(f, a->model, "model");
    if (ps == FP8RUN_OK) ps = fp8run_files_input(f, a->data, "token file (--data)");
    if (ps == FP8RUN_OK && a->val) ps = fp8run_files_input(f, a->val, "token file (--val)");
    if (ps == FP8RUN_OK && a->init_from) ps = fp8run_files_input(f, a->init_from, "safetensors (--init-from)");
    if (ps == FP8RUN_OK && a->log) ps = fp8run_files_output(f, a->log, "training log (--log)");
    if (ps == FP8RUN_OK && a->export_path) ps = fp8run_files_output(f, a->export_path, "export (--export)");
    struct stat sb;
    if (a->adapter_dir && stat(a->adapter_dir, &sb) == 0) { /* else the export creates it: nothing to overwrite */
        static const char *const names[] = {"adapter_model.safetensors", "adapter_config.json"};
        for (int k = 0; k < 2 && ps == FP8RUN_OK; k++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", a->adapter_dir, names[k]);
            ps = fp8run_files_output(f, p, "adapter file (--export-adapter)");
        }
    }
    fp8run_files_destroy(f);
    return ps == FP8RUN_OK ? 0 : cli_fail_status();
}

static int run_train(train_args *a)
{
    loop L;
    memset(&L, 0, sizeof L);
    L.a = a;
    L.last_ckpt = -1;
    L.tty = isatty(STDERR_FILENO);
    char *resume = NULL;
    fp8run_checkpoint *ck = NULL;
    int rc = check_train_files(a);
    if (rc == 0 && fp8run_model_load(a->model, &L.m) != FP8RUN_OK) rc = cli_fail_status();
    if (rc == 0) rc = train_args_shape_from_model("train", a, L.m);
    /* the model's own weights are what trains when nothing replaces them */
    const int n_bad = rc == 0 && !a->init_from && !a->resume ? fp8run_model_nonfinite_params(L.m) : 0;
    const int refuse = n_bad > 0 && a->strict_weights;
    for (int i = 0; i < n_bad && i < 8; i++) {
        int64_t count = 0;
        const char *name = fp8run_model_nonfinite_param(L.m, i, &count);
        fprintf(stderr, "fp8run: %s: '%s': parameter '%s' holds %lld NaN/Inf values\n", refuse ? "error" : "warning",
                a->model, name, (long long)count);
    }
    if (n_bad > 8) fprintf(stderr, "fp8run: ... %d parameters in all hold NaN/Inf values\n", n_bad);
    if (refuse) {
        fprintf(stderr, "fp8run: error: --strict-weights refuses them\n");
        rc = 1;
    }
    L.tokens_per_step = a->batch * a->seq * a->o.grad_accum;
    if (rc == 0 && a->ckpt_dir) rc = cli_make_dirs(a->ckpt_dir);
    if (rc == 0 && a->ckpt_dir && !g_quiet) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        cli_ckpt_clean_stale_tmp(a->ckpt_dir, now);
    }
    if (rc == 0 && a->resume) rc = cli_ckpt_newest_valid(a->ckpt_dir, &resume, &ck);
    if (rc == 0 && a->resume && !resume)
        fprintf(stderr, "fp8run: no checkpoint in '%s': starting from step 0\n", a->ckpt_dir);
    /* (a LoRA checkpoint's adapters would be merged into the base: the session restores them) */
    if (rc == 0 && resume && a->o.lora_rank == 0 && fp8run_model_apply_checkpoint(L.m, resume, NULL) != FP8RUN_OK)
        rc = cli_fail_status();
    /* LoRA freezes the base, which checkpoints do not hold: its weights go into the model */
    const int lora = a->o.lora_rank > 0;
    const int wflags = a->strict_weights ? FP8RUN_LOAD_STRICT_WEIGHTS : 0;
    if (rc == 0 && a->init_from && lora) rc = cli_init_from(NULL, L.m, a->init_from, wflags);
    if (rc == 0) rc = cli_sft_setup("train", a);
    if (rc == 0) cli_sft_size(a, &a->o);
    if (rc == 0 && fp8run_session_create(L.m, a->device, &a->o, &L.t) != FP8RUN_OK) rc = cli_fail_status();
    /* the session has its own copy: the loaded weights (the model's size in host memory) go now */
    fp8run_model_destroy(L.m);
    L.m = NULL;
    if (rc == 0 && a->init_from && !resume && !lora) rc = cli_init_from(L.t, NULL, a->init_from, wflags);
    if (rc == 0 && a->init_from && resume && !lora) fprintf(stderr, "fp8run: --init-from not used: resuming from %s\n", resume);
    if (rc == 0) rc = open_loaders(&L);
    if (rc == 0 && a->o.sft && !g_quiet) cli_sft_describe("--data", L.dl, a->seq);
    if (rc == 0 && !g_quiet) cli_sft_warn_positions(a, L.t);
    if (rc == 0 && resume) rc = resume_session(&L, resume, ck);
    if (g_quiet) a->log = NULL; /* rank 0 logs */
    if (rc == 0 && a->log && resume) rc = trim_log(a->log, fp8run_session_steps_done(L.t));
    if (rc == 0 && a->log) {
        L.log = cli_open_log(a->log, resume != NULL);
        if (!L.log) rc = CLI_EXIT_FAIL;
    }
    int n_fp8 = 0;
    if (rc == 0 && a->log_fp8 && fp8run_session_fp8_stats(L.t, &n_fp8) == FP8RUN_OK && n_fp8 == 0)
        fprintf(stderr, "fp8run: warning: --log-fp8: this run has no fp8 Linear (precision %s): nothing to log\n",
                a->o.precision);
    if (rc == 0) {
        char n1[32];
        int64_t np = 0;
        int n_params = fp8run_session_param_count(L.t);
        for (int i = 0; i < n_params; i++) {
            fp8run_value_info pi = {.struct_size = sizeof pi};
            if (fp8run_session_param(L.t, i, &pi) == FP8RUN_OK) np += pi.numel;
        }
        if (!g_quiet) fprintf(stderr, "training %s on %s: %s parameters in %d tensors, %s, %lld x %lld x %d tokens per step, %lld steps",
                a->model, fp8run_session_device(L.t), cli_human_count(np, n1, sizeof n1), n_params, a->o.precision,
                (long long)a->batch, (long long)a->seq, a->o.grad_accum, (long long)a->steps);
        fp8run_param_bytes pb = {.struct_size = sizeof pb};
        if (!g_quiet && fp8run_session_param_bytes(L.t, &pb) == FP8RUN_OK && pb.trained > 0)
            fprintf(stderr, "; %.1f bytes per trained parameter", (double)pb.trained_bytes / (double)pb.trained);
        if (!g_quiet && fp8run_session_param_bytes(L.t, &pb) == FP8RUN_OK && pb.frozen > 0)
            fprintf(stderr, ", %s frozen at %.1f bytes each", cli_human_count(pb.frozen, n1, sizeof n1),
                    (double)pb.frozen_bytes / (double)pb.frozen);
        if (!g_quiet) fprintf(stderr, "\n");
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        rc = train_loop(&L);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
    }
    if (rc == 0 && a->export_path) {
        if (fp8run_session_export(L.t, a->export_path) != FP8RUN_OK)
            rc = cli_fail("--export: %s", cli_last_error());
        else if (!g_quiet)
            printf("exported %s\n", a->export_path);
    }
    if (rc == 0 && a->adapter_dir && !g_quiet) { /* rank 0 only, as the other exports */
        if (fp8run_session_export_adapter(L.t, a->adapter_dir) != FP8RUN_OK)
            rc = cli_fail("--export-adapter: %s", cli_last_error());
        else
            printf("exported adapter %s\n", a->adapter_dir);
    }
    if (rc == 0 && !g_quiet) { /* on a GPU: which attention kernels and GEMM algorithms ran */
        const char *attn = fp8run_session_attention(L.t);
        if (attn && strncmp(attn, "CPU", 3) != 0) printf("attention: %s\n", attn);
        const char *gemm = attn && strncmp(attn, "CPU", 3) != 0 ? fp8run_session_gemm(L.t) : NULL;
        if (gemm) printf("gemm: %s\n", gemm);
        const char *prof = fp8run_session_profile(L.t); /* FP8RUN_PROFILE=1: GPU time per op over the run */
        if (prof) fputs(prof, stdout);
    }
    if (rc == 0 && !g_quiet)
        printf("trained %s: %lld steps (%lld skipped)\n", a->model, (long long)fp8run_session_steps_done(L.t),
               (long long)fp8run_session_steps_skipped(L.t));
    if (L.log) fclose(L.log);
    fp8run_data_close(L.dl);
    fp8run_data_close(L.vl);
    fp8run_session_destroy(L.t);
    fp8run_model_destroy(L.m);
    fp8run_checkpoint_close(ck);
    cli_ckpt_set_free(&L.mine);
    free(resume);
    return rc;
}

int cli_train(int argc, char **argv)
{
    train_args a;
    train_args_init(&a, FP8RUN_OPTION_TRAIN);
    int help = 0, rc = parse_train(argc, argv, &a, &help);
    if (help) {
        cli_train_help(stdout);
        rc = 0;
    } else if (rc == 0) {
        int launcher = 0;
        rc = cli_dist_env(a.gpus, a.nnodes, a.node_rank, &a.o, &launcher);
        g_quiet = a.o.rank > 0;
        if (rc == 0) rc = launcher ? cli_dist_launch(a.gpus, a.nnodes, a.node_rank) : run_train(&a);
    }
    cli_dims_free(&a.dims);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* eval                                                                                      */
/* ---------------------------------------------------------------------------------------- */



/* ---------------------------------------------------------------------------------------- */
/* export                                                                                    */
/* ---------------------------------------------------------------------------------------- */

