/* `fp8run train`, `fp8run eval` and `fp8run export`: the training loop around runtime/trainer.h
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
#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "runtime/fbs.h"
#include "runtime/trainer.h"

#define CLI_EXIT_INTERRUPTED 130
#define CKPT_PATTERN "step_%08lld.ckpt"

/* ---------------------------------------------------------------------------------------- */
/* help                                                                                      */
/* ---------------------------------------------------------------------------------------- */

void fr_cli_train_help(FILE *f)
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
            "schedule and optimizer:\n"
            "  --steps N               total steps (a resumed run continues up to N)\n"
            "  --batch B --seq T       windows per micro-batch and tokens per window\n"
            "  --grad-accum K          micro-batches per step (default 1)\n"
            "  --lr LR                 peak learning rate\n"
            "  --warmup N              linear warmup steps (default 0)\n"
            "  --min-lr LR             cosine decay to LR over the steps after warmup\n"
            "  --schedule constant|warmup_constant|cosine  (default: cosine with --min-lr,\n"
            "                          warmup_constant with --warmup, else constant)\n"
            "  --optimizer adamw|sgd   (default adamw)\n"
            "  --weight-decay W        (default 0.01 AdamW, 0 SGD; only on parameters of rank >= 2)\n"
            "  --beta1 B1 --beta2 B2 --eps E  AdamW (default 0.9, 0.999, 1e-8)\n"
            "  --momentum M            SGD momentum (default 0)\n"
            "  --grad-clip C           clip the global gradient norm to C (default 1; 0 = off)\n"
            "  --seed S                data order and the trainer's generator (default 0)\n"
            "  --max-bad-steps N       non-finite steps in a row before stopping (default 10)\n"
            "model:\n"
            "  --train REGEX           train only parameters whose name matches\n"
            "  --freeze REGEX          do not train parameters whose name matches\n"
            "  --loss-output NAME      the model computes its own scalar loss\n"
            "  --logits-output NAME    logits (default: the first float output of rank >= 2)\n"
            "  --tokens-input NAME     token ids input (default: the first int64/int32 input)\n"
            "  --ignore-index N        labels that do not count (default -100)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "precision:\n"
            "  --precision fp32|bf16|fp8   (default fp32)\n"
            "  --device auto|cuda|cpu  where to train (default auto: the GPU when one is usable)\n"
            "  --recipe delayed|current|block  FP8 scaling (default delayed)\n"
            "  --fp8-format hybrid|e4m3    (default hybrid: E4M3 forward, E5M2 gradients)\n"
            "  --amax-history N --amax-algo max|most_recent --fp8-margin M --fp8-interval K\n"
            "  --bf16-boundary N       Linear groups kept in BF16 at each end (default 1)\n"
            "  --no-fuse               do not fuse Linears that share their input (Q/K/V, gate/up)\n"
            "  --pad-multiple N        FP8 GEMM dims padded to multiples of N (default 16)\n"
            "  --fp8-exclude REGEX     Linears whose weight or node name matches stay BF16\n"
            "output:\n"
            "  --log FILE.jsonl        one JSON record per step and per validation\n"
            "  --log-every N           progress lines every N steps without a terminal (default 10)\n"
            "  --log-fp8 N             every N steps also a record of each FP8 operand (x, w, dy of\n"
            "                          every fp8 Linear): amax, scale, amax history max, range used\n"
            "                          (amax * scale / fp8 max; above 1 the top values saturated)\n"
            "  --ckpt-dir DIR          checkpoints DIR/step_NNNNNNNN.ckpt (at the end, on Ctrl-C)\n"
            "  --ckpt-every N          also every N steps\n"
            "  --ckpt-keep N           keep the newest N checkpoints (default 3; 0 = all)\n"
            "  --resume                continue from the newest valid checkpoint in --ckpt-dir\n"
            "  --export OUT.onnx       write the trained model (original graph and names)\n"
            "  -h, --help              show this help\n"
            "\n"
            "Ctrl-C finishes the current step, saves a checkpoint (with --ckpt-dir) and exits 130.\n");
}

void fr_cli_eval_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run eval MODEL|COMPILED.fbs|CKPT --data FILE --batch B --seq T [options]\n"
            "\n"
            "Mean next-token cross-entropy and perplexity of a model (ONNX) or of a training\n"
            "checkpoint's weights (the model comes from --model or the checkpoint's record) over\n"
            "sequential batches of B windows of T+1 tokens. Prints 'loss L perplexity P'.\n"
            "\n"
            "options:\n"
            "  --data FILE             tokens (raw uint16/uint32 or llm.c token file)\n"
            "  --data-dtype uint8|uint16|uint32\n"
            "  --batches N             batches to evaluate (default 0: the whole file)\n"
            "  --model MODEL           the ONNX model (or compiled graph) a checkpoint belongs to\n"
            "  --precision fp32|bf16|fp8   (default fp32)\n"
            "  --device auto|cuda|cpu  where to train (default auto: the GPU when one is usable)\n"
            "  --loss-output NAME --logits-output NAME --tokens-input NAME --ignore-index N\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  -h, --help              show this help\n");
}

void fr_cli_export_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run export CKPT [--model MODEL] -o OUT.onnx\n"
            "\n"
            "Write MODEL with the checkpoint's trained weights in its initializers (original names\n"
            "and layouts). A checkpoint holds weights only; the graph comes from --model, or from\n"
            "the model path the checkpoint recorded. Weights go to external data OUT.onnx.data\n"
            "when they add up to more than 1 GiB.\n"
            "\n"
            "options:\n"
            "  --model MODEL           the ONNX model that was trained, or the compiled graph (.fbs)\n"
            "                          it was trained as (the original model is written)\n"
            "  -o, --output OUT.onnx   where to write (required)\n"
            "  -h, --help              show this help\n");
}

/* ---------------------------------------------------------------------------------------- */
/* option values                                                                             */
/* ---------------------------------------------------------------------------------------- */

static int parse_i64(const char *cmd, const char *opt, const char *text, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || !text[0] || *end || v < min)
        return cli_usage(cmd, "%s: '%s' is not an integer >= %lld", opt, text, (long long)min);
    *out = v;
    return 0;
}

static int parse_int(const char *cmd, const char *opt, const char *text, int64_t min, int *out)
{
    int64_t v;
    int rc = parse_i64(cmd, opt, text, min, &v);
    if (rc == 0 && v > 1000000000) return cli_usage(cmd, "%s: %s is too large", opt, text);
    if (rc == 0) *out = (int)v;
    return rc;
}

static int parse_f64(const char *cmd, const char *opt, const char *text, double min, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || !text[0] || *end || !isfinite(v) || v < min)
        return cli_usage(cmd, "%s: '%s' is not a number >= %g", opt, text, min);
    *out = v;
    return 0;
}

static int parse_choice(const char *cmd, const char *opt, const char *text, const char *const *choices,
                        int *out)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return cli_usage(cmd, "%s: '%s' is not one of %s", opt, text, list);
}

/* ---------------------------------------------------------------------------------------- */
/* arguments shared by the commands                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef struct train_args {
    const char *model, *data, *val, *log, *ckpt_dir, *export_path, *model_opt, *out;
    int64_t steps, batch, seq, val_every, val_batches, log_every, ckpt_every, ckpt_keep, batches;
    int have_steps, have_batch, have_seq, have_lr, have_warmup, have_min_lr, have_val_batches, resume;
    int optimizer;                         /* index into k_optimizers */
    double wd, beta1, beta2, eps, momentum; /* NAN: the optimizer's default */
    int schedule; /* -1: from the other options */
    int order;    /* fr_data_order */
    fr_dtype token_dtype;
    fr_train_options o;
    cli_dims dims;
    int64_t log_fp8;        /* --log-fp8 N: FP8 statistics every N steps (0: off) */
    int have_precision;
    const char *recipe_opt; /* the first precision/recipe option given (refused with a .fbs) */
} train_args;

static const char *const k_precisions[] = {"fp32", "bf16", "fp8", NULL};
static const char *const k_devices[] = {"auto", "cuda", "cpu", NULL};
static const char *const k_recipes[] = {"delayed", "current", "block", NULL};
static const char *const k_formats[] = {"hybrid", "e4m3", NULL};
static const char *const k_algos[] = {"max", "most_recent", NULL};
static const char *const k_optimizers[] = {"adamw", "sgd", NULL};
static const char *const k_schedules[] = {"constant", "warmup_constant", "cosine", NULL};
static const char *const k_dtypes[] = {"uint8", "uint16", "uint32", NULL};
static const fr_dtype k_dtype_of[] = {FR_U8, FR_U16, FR_U32};
static const char *const k_orders[] = {"random", "sequential", NULL};

static void args_init(train_args *a)
{
    memset(a, 0, sizeof *a);
    fr_train_options_default(&a->o);
    a->o.grad_clip = 1.0;
    a->o.device = "auto"; /* the GPU when one is usable; the CPU otherwise (and it says which) */
    a->val_batches = 20;
    a->log_every = 10;
    a->ckpt_keep = 3;
    a->schedule = -1;
    a->order = FR_DATA_RANDOM;
    a->token_dtype = FR_U16;
    a->wd = a->beta1 = a->beta2 = a->eps = a->momentum = NAN;
}

/* Options that train and eval share. Returns 1 when argv[*i] was one of them (rc set), 0 if not. */
static int common_option(const char *cmd, int argc, char **argv, int *i, train_args *a, int *rc)
{
    const char *v = NULL;
    int m, k;
#define OPT(name) ((m = cli_option(argc, argv, i, cmd, name, &v)) != 0)
    if (OPT("--data")) a->data = v;
    else if (OPT("--data-dtype")) {
        if (m > 0 && (*rc = parse_choice(cmd, "--data-dtype", v, k_dtypes, &k)) == 0) a->token_dtype = k_dtype_of[k];
    } else if (OPT("--batch")) {
        if (m > 0 && (*rc = parse_i64(cmd, "--batch", v, 1, &a->batch)) == 0) a->have_batch = 1;
    } else if (OPT("--seq")) {
        if (m > 0 && (*rc = parse_i64(cmd, "--seq", v, 1, &a->seq)) == 0) a->have_seq = 1;
    } else if (OPT("--precision")) {
        if (m > 0 && (*rc = parse_choice(cmd, "--precision", v, k_precisions, &k)) == 0) {
            a->o.precision = k_precisions[k];
            a->have_precision = 1;
        }
    } else if (OPT("--device")) {
        if (m > 0 && (*rc = parse_choice(cmd, "--device", v, k_devices, &k)) == 0) a->o.device = k_devices[k];
    } else if (OPT("--loss-output")) a->o.loss_output = v;
    else if (OPT("--logits-output")) a->o.logits_output = v;
    else if (OPT("--tokens-input")) a->o.tokens_input = v;
    else if (OPT("--ignore-index")) {
        int64_t x;
        if (m > 0 && (*rc = parse_i64(cmd, "--ignore-index", v, INT64_MIN, &x)) == 0) a->o.ignore_index = x;
    } else if (OPT("--dim")) {
        if (m > 0) *rc = cli_dims_add(&a->dims, cmd, v);
    } else
        return 0;
#undef OPT
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}

static int train_option(int argc, char **argv, int *i, train_args *a, int *rc)
{
    const char *v = NULL, *cmd = "train";
    int m, k;
    fr_train_options *o = &a->o;
#define OPT(name) ((m = cli_option(argc, argv, i, cmd, name, &v)) != 0)
#define VAL (m > 0)
    if (OPT("--val")) a->val = v;
    else if (OPT("--val-every")) { if (VAL) *rc = parse_i64(cmd, "--val-every", v, 0, &a->val_every); }
    else if (OPT("--val-batches")) {
        if (VAL && (*rc = parse_i64(cmd, "--val-batches", v, 0, &a->val_batches)) == 0) a->have_val_batches = 1;
    }
    else if (OPT("--data-order")) {
        if (VAL && (*rc = parse_choice(cmd, "--data-order", v, k_orders, &k)) == 0) a->order = k;
    } else if (OPT("--steps")) {
        if (VAL && (*rc = parse_i64(cmd, "--steps", v, 1, &a->steps)) == 0) a->have_steps = 1;
    } else if (OPT("--grad-accum")) { if (VAL) *rc = parse_int(cmd, "--grad-accum", v, 1, &o->grad_accum); }
    else if (OPT("--lr")) {
        if (VAL && (*rc = parse_f64(cmd, "--lr", v, 0, &o->lr.max_lr)) == 0) a->have_lr = 1;
    } else if (OPT("--warmup")) {
        if (VAL && (*rc = parse_i64(cmd, "--warmup", v, 0, &o->lr.warmup_steps)) == 0) a->have_warmup = 1;
    } else if (OPT("--min-lr")) {
        if (VAL && (*rc = parse_f64(cmd, "--min-lr", v, 0, &o->lr.min_lr)) == 0) a->have_min_lr = 1;
    } else if (OPT("--schedule")) {
        if (VAL) *rc = parse_choice(cmd, "--schedule", v, k_schedules, &a->schedule);
    } else if (OPT("--optimizer")) {
        if (VAL) *rc = parse_choice(cmd, "--optimizer", v, k_optimizers, &a->optimizer);
    } else if (OPT("--weight-decay")) { if (VAL) *rc = parse_f64(cmd, "--weight-decay", v, 0, &a->wd); }
    else if (OPT("--beta1")) { if (VAL) *rc = parse_f64(cmd, "--beta1", v, 0, &a->beta1); }
    else if (OPT("--beta2")) { if (VAL) *rc = parse_f64(cmd, "--beta2", v, 0, &a->beta2); }
    else if (OPT("--eps")) { if (VAL) *rc = parse_f64(cmd, "--eps", v, 0, &a->eps); }
    else if (OPT("--momentum")) { if (VAL) *rc = parse_f64(cmd, "--momentum", v, 0, &a->momentum); }
    else if (OPT("--grad-clip")) { if (VAL) *rc = parse_f64(cmd, "--grad-clip", v, 0, &o->grad_clip); }
    else if (OPT("--seed")) {
        int64_t s;
        if (VAL && (*rc = parse_i64(cmd, "--seed", v, 0, &s)) == 0) o->seed = (uint64_t)s;
    } else if (OPT("--max-bad-steps")) { if (VAL) *rc = parse_int(cmd, "--max-bad-steps", v, 0, &o->max_bad_steps); }
    else if (OPT("--train")) o->train_regex = VAL ? v : NULL;
    else if (OPT("--freeze")) o->freeze_regex = VAL ? v : NULL;
    else if (OPT("--recipe")) {
        if (VAL && (*rc = parse_choice(cmd, "--recipe", v, k_recipes, &k)) == 0) o->fp8.recipe = k_recipes[k];
    } else if (OPT("--fp8-format")) {
        if (VAL && (*rc = parse_choice(cmd, "--fp8-format", v, k_formats, &k)) == 0) o->fp8.fp8_format = k_formats[k];
    } else if (OPT("--amax-history")) { if (VAL) *rc = parse_int(cmd, "--amax-history", v, 1, &o->fp8.amax_history_len); }
    else if (OPT("--amax-algo")) {
        if (VAL && (*rc = parse_choice(cmd, "--amax-algo", v, k_algos, &k)) == 0) o->fp8.amax_algo = k ? FR_AMAX_MOST_RECENT : FR_AMAX_MAX;
    } else if (OPT("--fp8-margin")) {
        int64_t x;
        if (VAL && (*rc = parse_i64(cmd, "--fp8-margin", v, -64, &x)) == 0) {
            if (x > 64) *rc = cli_usage(cmd, "--fp8-margin: %s is outside -64..64", v);
            else o->fp8.margin = (int)x;
        }
    } else if (OPT("--fp8-interval")) { if (VAL) *rc = parse_int(cmd, "--fp8-interval", v, 1, &o->fp8.interval); }
    else if (OPT("--bf16-boundary")) { if (VAL) *rc = parse_int(cmd, "--bf16-boundary", v, 0, &o->fp8.bf16_boundary); }
    else if (OPT("--fp8-exclude")) o->fp8.fp8_exclude = VAL ? v : NULL;
    else if (strcmp(argv[*i], "--no-fuse") == 0) { o->fp8.fuse = 0; m = 1; }
    else if (OPT("--pad-multiple")) { if (VAL) *rc = parse_int(cmd, "--pad-multiple", v, 1, &o->fp8.pad_multiple); }
    else if (OPT("--log-fp8")) { if (VAL) *rc = parse_i64(cmd, "--log-fp8", v, 1, &a->log_fp8); }
    else if (OPT("--log")) a->log = v;
    else if (OPT("--log-every")) { if (VAL) *rc = parse_i64(cmd, "--log-every", v, 1, &a->log_every); }
    else if (OPT("--ckpt-dir")) a->ckpt_dir = v;
    else if (OPT("--ckpt-every")) { if (VAL) *rc = parse_i64(cmd, "--ckpt-every", v, 0, &a->ckpt_every); }
    else if (OPT("--ckpt-keep")) { if (VAL) *rc = parse_i64(cmd, "--ckpt-keep", v, 0, &a->ckpt_keep); }
    else if (strcmp(argv[*i], "--resume") == 0) { a->resume = 1; m = 1; }
    else if (OPT("--export")) a->export_path = v;
    else
        return 0;
#undef VAL
#undef OPT
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}

/* Is arg one of the options a compiled graph fixes (--name or --name=value)? */
static int is_recipe_flag(const char *arg)
{
    static const char *const names[] = {"--recipe", "--fp8-format", "--amax-history", "--amax-algo", "--fp8-margin",
                                        "--fp8-interval", "--bf16-boundary", "--fp8-exclude", "--no-fuse",
                                        "--pad-multiple", NULL};
    for (int k = 0; names[k]; k++) {
        size_t n = strlen(names[k]);
        if (strncmp(arg, names[k], n) == 0 && (arg[n] == '\0' || arg[n] == '=')) return 1;
    }
    return 0;
}

static int parse_train(int argc, char **argv, train_args *a, int *help)
{
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        if (cli_is_help(argv[i])) {
            *help = 1;
            return 0;
        }
        if (!a->recipe_opt && is_recipe_flag(argv[i])) a->recipe_opt = argv[i];
        if (common_option("train", argc, argv, &i, a, &rc) || train_option(argc, argv, &i, a, &rc)) continue;
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
    if (!a->have_lr) return cli_usage("train", "--lr LR is required");
    if (a->resume && !a->ckpt_dir) return cli_usage("train", "--resume needs --ckpt-dir DIR");
    if (a->val_every && !a->val) return cli_usage("train", "--val-every needs --val FILE");
    if (a->ckpt_every && !a->ckpt_dir) return cli_usage("train", "--ckpt-every needs --ckpt-dir DIR");
    fr_opt_config *c = &a->o.opt;
    *c = a->optimizer ? fr_opt_config_sgd() : fr_opt_config_adamw();
    if (!isnan(a->wd)) c->weight_decay = a->wd;
    if (!isnan(a->beta1)) c->beta1 = a->beta1;
    if (!isnan(a->beta2)) c->beta2 = a->beta2;
    if (!isnan(a->eps)) c->eps = a->eps;
    if (!isnan(a->momentum)) c->momentum = a->momentum;
    fr_lr_schedule *s = &a->o.lr;
    s->kind = a->schedule >= 0 ? (fr_lr_kind)a->schedule
              : a->have_min_lr ? FR_LR_COSINE
              : a->have_warmup ? FR_LR_WARMUP_CONSTANT
                               : FR_LR_CONSTANT;
    s->total_steps = a->steps;
    if (s->kind == FR_LR_COSINE && s->warmup_steps >= a->steps)
        return cli_usage("train", "--warmup %lld must be below --steps %lld for the cosine schedule",
                         (long long)s->warmup_steps, (long long)a->steps);
    if (s->kind == FR_LR_COSINE && s->min_lr > s->max_lr)
        return cli_usage("train", "--min-lr %g is above --lr %g", s->min_lr, s->max_lr);
    a->o.batch = a->batch;
    a->o.seq_len = a->seq;
    a->o.dims = a->dims.items;
    a->o.n_dims = a->dims.n;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* files                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static int make_dirs(const char *dir)
{
    char *p = strdup(dir);
    if (!p) return cli_fail("out of memory");
    int rc = 0;
    for (char *s = p + 1; rc == 0; s++) {
        int last = *s == '\0';
        if (*s != '/' && !last) continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) rc = cli_fail("cannot create folder '%s': %s", p, strerror(errno));
        *s = c;
        if (last) break;
    }
    struct stat sb;
    if (rc == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) rc = cli_fail("'%s' is not a folder", dir);
    free(p);
    return rc;
}

static char *ckpt_path(const char *dir, int64_t step)
{
    size_t n = strlen(dir) + 64;
    char *p = malloc(n);
    if (p) {
        int k = snprintf(p, n, "%s/", dir);
        snprintf(p + k, n - (size_t)k, CKPT_PATTERN, (long long)step);
    }
    return p;
}

/* Steps of the checkpoint files in dir (step_NNNNNNNN.ckpt), newest first. */
static int list_ckpts(const char *dir, int64_t **steps, int *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : cli_fail("cannot read folder '%s': %s", dir, strerror(errno));
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        long long s;
        int end = 0;
        if (sscanf(e->d_name, "step_%lld.ckpt%n", &s, &end) != 1 || end == 0 || e->d_name[end] || s < 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(*steps, (size_t)cap * sizeof *ns);
            if (!ns) {
                closedir(d);
                return cli_fail("out of memory");
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* newest first */
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            int64_t t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return 0;
}

/* The newest checkpoint that opens and verifies; corrupted ones are skipped with a warning.
 * *path = NULL when there is none. */
static int newest_valid_ckpt(const char *dir, char **path)
{
    int64_t *steps;
    int n;
    *path = NULL;
    int rc = list_ckpts(dir, &steps, &n);
    for (int i = 0; rc == 0 && i < n && !*path; i++) {
        char *p = ckpt_path(dir, steps[i]);
        fr_ckpt *c;
        if (!p) {
            rc = cli_fail("out of memory");
        } else if (fr_ckpt_open(p, &c) == FR_OK) {
            fr_ckpt_close(c);
            *path = p;
        } else {
            fprintf(stderr, "fp8run: warning: skipping checkpoint '%s': %s\n", p, fr_last_error());
            free(p);
        }
    }
    free(steps);
    return rc;
}

/* Remove all but the newest `keep` checkpoints (0 keeps all). */
static void prune_ckpts(const char *dir, int64_t keep)
{
    int64_t *steps;
    int n;
    if (keep <= 0 || list_ckpts(dir, &steps, &n) != 0) return;
    for (int i = (int)keep; i < n; i++) {
        char *p = ckpt_path(dir, steps[i]);
        if (p && unlink(p) != 0) fprintf(stderr, "fp8run: warning: cannot remove old checkpoint '%s': %s\n", p, strerror(errno));
        free(p);
    }
    free(steps);
}

/* The "model" field of a checkpoint's config JSON (malloc'ed) or NULL. */
static char *config_model_path(const char *json)
{
    const char *k = json ? strstr(json, "\"model\": \"") : NULL;
    if (!k) return NULL;
    k += strlen("\"model\": \"");
    char *out = malloc(strlen(k) + 1), *o = out;
    if (!out) return NULL;
    for (; *k && *k != '"'; k++) {
        if (*k == '\\' && k[1]) {
            k++;
            if (*k == 'u') { /* only control characters are \u-escaped by the writer */
                unsigned c = 0;
                if (sscanf(k + 1, "%4x", &c) != 1) break;
                *o++ = (char)c;
                k += 4;
                continue;
            }
        }
        *o++ = *k;
    }
    *o = '\0';
    return out;
}

static int is_checkpoint_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[8] = {0};
    if (!f) return 0;
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == 8 && memcmp(magic, "FP8RCKPT", 8) == 0;
}

/* A resumed run continues the JSONL log: records of steps after the checkpoint (written by the
 * run that was interrupted) are dropped so every step appears once. */
static int trim_log(const char *path, int64_t step)
{
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? 0 : cli_fail("cannot read log '%s': %s", path, strerror(errno));
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) {
        fclose(in);
        return cli_fail("out of memory");
    }
    snprintf(tmp, n, "%s.trim", path);
    FILE *out = fopen(tmp, "w");
    int rc = out ? 0 : cli_fail("cannot write '%s': %s", tmp, strerror(errno));
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
    if (out && fclose(out) != 0 && rc == 0) rc = cli_fail("writing '%s': %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = cli_fail("replacing log '%s': %s", path, strerror(errno));
    if (rc != 0) remove(tmp);
    free(tmp);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* progress                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted = 0;

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
    fr_trainer *t;
    fr_data_loader *dl, *vl;
    FILE *log;
    int tty;
    int line_open;     /* a \r progress line is on the terminal */
    double t0;         /* start of this run */
    int64_t first;     /* step this run started at */
    double train_s;    /* time spent in steps this run */
    int64_t tokens_per_step;
    int64_t last_ckpt; /* step of the last checkpoint written (-1: none) */
} loop;

static void end_line(loop *L)
{
    if (L->line_open) {
        fputc('\n', stderr);
        L->line_open = 0;
    }
}

static void progress(loop *L, int64_t done, const fr_train_stats *s)
{
    int64_t total = L->a->steps, ran = done - L->first;
    double el = now_s() - L->t0, tps = L->train_s > 0 ? (double)(ran * L->tokens_per_step) / L->train_s : 0;
    double eta = ran > 0 ? el / (double)ran * (double)(total - done) : NAN;
    char e1[32], e2[32];
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

static void log_step(loop *L, int64_t done, const fr_train_stats *s, double tps)
{
    if (!L->log) return;
    fprintf(L->log, "{\"step\": %lld", (long long)done);
    log_json_num(L->log, "loss", s->loss);
    log_json_num(L->log, "lr", s->lr);
    log_json_num(L->log, "grad_norm", s->grad_norm);
    log_json_num(L->log, "tokens_per_s", tps);
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
    int n = fr_trainer_fp8_stats(L->t, NULL, 0);
    if (!L->log || n == 0) return 0;
    fr_fp8_stat *st = calloc((size_t)n, sizeof *st);
    if (!st) return cli_fail("out of memory");
    fr_trainer_fp8_stats(L->t, st, n);
    FILE *f = L->log;
    fprintf(f, "{\"step\": %lld, \"fp8\": [", (long long)done);
    for (int i = 0; i < n; i++) {
        const fr_fp8_stat *s = &st[i];
        fprintf(f, "%s{\"layer\": ", i ? ", " : "");
        log_json_str(f, s->layer);
        fprintf(f, ", \"operand\": \"%s\", \"recipe\": \"%s\", \"format\": \"%s\"", s->operand, s->recipe, s->format);
        log_json_num(f, "amax", s->has_amax ? s->amax : NAN);
        log_json_num(f, "scale", s->has_scale ? s->scale : NAN);
        if (strcmp(s->recipe, "delayed") == 0) {
            log_json_num(f, "next_scale", s->next_scale);
            log_json_num(f, "history_max", s->history_max);
            fprintf(f, ", \"updates\": %lld", (long long)s->updates);
        }
        log_json_num(f, "fp8_max", s->fp8_max);
        if (s->has_amax && s->has_scale) {
            log_json_num(f, "range_use", s->range_use);
            fprintf(f, ", \"saturated\": %s", s->saturated ? "true" : "false");
        }
        if (s->note[0]) {
            fprintf(f, ", \"note\": ");
            log_json_str(f, s->note);
        }
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    fflush(f);
    free(st);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* the training loop                                                                         */
/* ---------------------------------------------------------------------------------------- */

static int validate(loop *L, int64_t done)
{
    const int64_t B = L->a->batch, T = L->a->seq;
    int64_t *w = malloc((size_t)(B * (T + 1)) * sizeof *w);
    if (!w) return cli_fail("out of memory");
    fr_data_reset(L->vl);
    int64_t n = fr_data_batches_per_epoch(L->vl);
    double sum = 0;
    int rc = 0;
    for (int64_t b = 0; b < n && rc == 0; b++) {
        double l;
        if (fr_data_next(L->vl, FR_I64, w) != FR_OK || fr_trainer_eval(L->t, w, &l) != FR_OK)
            rc = cli_fail("validation: %s", fr_last_error());
        else
            sum += l;
    }
    free(w);
    if (rc) return rc;
    double vl = sum / (double)n;
    end_line(L);
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
    char *p = ckpt_path(L->a->ckpt_dir, done);
    if (!p) return cli_fail("out of memory");
    uint8_t ds[FR_DATA_STATE_BYTES];
    fr_data_get_state(L->dl, ds);
    int rc = 0;
    if (fr_trainer_save(L->t, p, ds, sizeof ds) != FR_OK) {
        rc = cli_fail("saving checkpoint: %s", fr_last_error());
    } else {
        end_line(L);
        fprintf(stderr, "checkpoint: %s\n", p);
        L->last_ckpt = done;
        prune_ckpts(L->a->ckpt_dir, L->a->ckpt_keep);
    }
    free(p);
    return rc;
}

static int train_loop(loop *L)
{
    train_args *a = L->a;
    const int K = a->o.grad_accum;
    const int64_t per = a->batch * (a->seq + 1);
    int64_t *w = malloc((size_t)(K * per) * sizeof *w);
    if (!w) return cli_fail("out of memory");
    int rc = 0;
    int64_t done = fr_trainer_steps_done(L->t);
    L->first = done;
    L->t0 = now_s();
    while (done < a->steps && rc == 0) {
        for (int k = 0; k < K && rc == 0; k++)
            if (fr_data_next(L->dl, FR_I64, w + k * per) != FR_OK) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", fr_last_error());
                save_ckpt(L, done); /* what was trained so far is kept */
                end_line(L);
                rc = cli_fail("%s", msg);
            }
        if (rc) break;
        fr_train_stats s;
        double t1 = now_s();
        fr_status st = fr_trainer_step(L->t, w, K, &s);
        double dt = now_s() - t1;
        L->train_s += dt;
        if (st != FR_OK && st != FR_ERR_NUMERIC) {
            rc = cli_fail("step %lld: %s", (long long)done + 1, fr_last_error());
            break;
        }
        done++;
        log_step(L, done, &s, dt > 0 ? (double)L->tokens_per_step / dt : 0);
        if (a->log_fp8 && done % a->log_fp8 == 0) rc = log_fp8(L, done);
        if (s.skipped) {
            end_line(L);
            fprintf(stderr, "fp8run: warning: step %lld skipped (%d in a row): %s\n", (long long)done, s.bad_in_a_row,
                    s.reason);
        }
        if (st == FR_ERR_NUMERIC) { /* too many bad steps: keep what we have, then stop */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", fr_last_error());
            save_ckpt(L, done);
            end_line(L);
            rc = cli_fail("%s", msg);
            break;
        }
        progress(L, done, &s);
        if (L->vl && a->val_every && done % a->val_every == 0 && done < a->steps) rc = validate(L, done);
        if (rc == 0 && a->ckpt_every && done % a->ckpt_every == 0) rc = save_ckpt(L, done);
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
    free(w);
    end_line(L);
    if (rc == 0 && L->vl) rc = validate(L, done);
    if (rc == 0) rc = save_ckpt(L, done);
    return rc;
}

static int open_loaders(loop *L)
{
    train_args *a = L->a;
    fr_data_opts d = fr_data_opts_default();
    d.batch = a->batch;
    d.seq_len = a->seq;
    d.order = (fr_data_order)a->order;
    d.seed = a->o.seed;
    d.token_dtype = a->token_dtype;
    d.vocab_size = fr_trainer_vocab(L->t);
    if (fr_data_open(a->data, &d, &L->dl) != FR_OK) return cli_fail("--data: %s", fr_last_error());
    if (a->val && fr_data_open_val(a->val, &d, a->val_batches, &L->vl) != FR_OK) {
        /* the default batch count on a small file: take what the file holds */
        if (a->have_val_batches || fr_data_open_val(a->val, &d, 0, &L->vl) != FR_OK)
            return cli_fail("--val: %s", fr_last_error());
    }
    return 0;
}

/* batch, seq and precision: a compiled graph fixes them (given ones must agree); an ONNX model
 * needs --batch and --seq. */
static int shape_from_model(const char *cmd, train_args *a, const fr_graph *g)
{
    if (!fr_fbs_is_compiled(g)) {
        if (!a->have_batch || !a->have_seq) return cli_usage(cmd, "--batch B and --seq T are required");
        return 0;
    }
    int64_t b, s;
    const char *path = g->source_path ? g->source_path : a->model;
    if (fr_fbs_shape(g, &b, &s) != FR_OK) return cli_fail_status();
    if ((a->have_batch && a->batch != b) || (a->have_seq && a->seq != s))
        return cli_fail("'%s' is compiled for --batch %lld --seq %lld (a compiled graph is specialized to its "
                        "shapes): recompile it with `fp8run compile MODEL -o %s --batch %lld --seq %lld`, or train "
                        "the ONNX model", path, (long long)b, (long long)s, path,
                        (long long)(a->have_batch ? a->batch : b), (long long)(a->have_seq ? a->seq : s));
    if (a->recipe_opt)
        return cli_usage(cmd, "%s: the precision and recipe options of a compiled graph are fixed when compiling "
                         "(fp8run compile ... %s)", a->recipe_opt, a->recipe_opt);
    a->batch = a->o.batch = b;
    a->seq = a->o.seq_len = s;
    /* the recorded precision (the trainer checks the whole file when it decodes it) */
    const char *prec = NULL;
    for (int i = 0; i < g->n_metadata && !prec; i++)
        if (strcmp(g->metadata[i].key, "fp8run.option.precision") == 0) prec = g->metadata[i].value;
    fr_lin_precision lp;
    if (!prec || fr_lin_precision_parse(prec, &lp) != FR_OK)
        return cli_fail("compiled graph '%s': metadata key 'fp8run.option.precision' is missing or malformed", path);
    prec = fr_lin_precision_name(lp);
    if (a->have_precision && strcmp(a->o.precision, prec) != 0)
        return cli_fail("'%s' is compiled for precision %s, not %s: recompile it with --precision %s", path, prec,
                        a->o.precision, a->o.precision);
    a->o.precision = prec; /* a static string */
    return 0;
}

static int run_train(train_args *a)
{
    loop L;
    memset(&L, 0, sizeof L);
    L.a = a;
    L.last_ckpt = -1;
    L.tty = isatty(STDERR_FILENO);
    fr_graph *g = NULL;
    char *resume = NULL;
    int rc = 0;
    if (fr_onnx_load_file(a->model, &g) != FR_OK) rc = cli_fail_status();
    if (rc == 0) rc = shape_from_model("train", a, g);
    L.tokens_per_step = a->batch * a->seq * a->o.grad_accum;
    if (rc == 0 && a->ckpt_dir) rc = make_dirs(a->ckpt_dir);
    if (rc == 0 && a->resume) rc = newest_valid_ckpt(a->ckpt_dir, &resume);
    if (rc == 0 && a->resume && !resume)
        fprintf(stderr, "fp8run: no checkpoint in '%s': starting from step 0\n", a->ckpt_dir);
    /* the checkpoint's weights into the model first, so frozen ones agree too */
    if (rc == 0 && resume && fr_train_apply_weights(g, resume, NULL) != FR_OK) rc = cli_fail_status();
    if (rc == 0 && fr_trainer_new(g, &a->o, &L.t) != FR_OK) rc = cli_fail_status();
    if (rc == 0) rc = open_loaders(&L);
    if (rc == 0 && resume) {
        void *ds = NULL;
        size_t len = 0;
        if (fr_trainer_load(L.t, resume, &ds, &len) != FR_OK)
            rc = cli_fail_status();
        else if (!ds)
            rc = cli_fail("checkpoint '%s' has no data loader state", resume);
        else if (fr_data_set_state(L.dl, ds, len) != FR_OK)
            rc = cli_fail("resuming from '%s': %s", resume, fr_last_error());
        free(ds);
        if (rc == 0) {
            L.last_ckpt = fr_trainer_steps_done(L.t);
            fprintf(stderr, "resumed from %s at step %lld\n", resume, (long long)fr_trainer_steps_done(L.t));
        }
    }
    if (rc == 0 && a->log && resume) rc = trim_log(a->log, fr_trainer_steps_done(L.t));
    if (rc == 0 && a->log) {
        L.log = fopen(a->log, resume ? "a" : "w");
        if (!L.log) rc = cli_fail("cannot open log '%s': %s", a->log, strerror(errno));
    }
    if (rc == 0 && a->log_fp8 && fr_trainer_fp8_stats(L.t, NULL, 0) == 0)
        fprintf(stderr, "fp8run: warning: --log-fp8: this run has no fp8 Linear (precision %s): nothing to log\n",
                a->o.precision);
    if (rc == 0) {
        char n1[32];
        int64_t np = 0;
        for (int i = 0; i < fr_trainer_param_count(L.t); i++) np += fr_trainer_param_numel(L.t, i);
        fprintf(stderr, "training %s on %s: %s parameters in %d tensors, %s, %lld x %lld x %d tokens per step, %lld steps\n",
                a->model, fr_trainer_device(L.t), cli_human_count(np, n1, sizeof n1), fr_trainer_param_count(L.t),
                a->o.precision, (long long)a->batch, (long long)a->seq, a->o.grad_accum, (long long)a->steps);
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
        if (fr_trainer_export(L.t, a->export_path) != FR_OK)
            rc = cli_fail("--export: %s", fr_last_error());
        else
            printf("exported %s\n", a->export_path);
    }
    if (rc == 0)
        printf("trained %s: %lld steps (%lld skipped)\n", a->model, (long long)fr_trainer_steps_done(L.t),
               (long long)fr_trainer_skipped_total(L.t));
    if (L.log) fclose(L.log);
    fr_data_close(L.dl);
    fr_data_close(L.vl);
    fr_trainer_free(L.t);
    fr_graph_free(g);
    free(resume);
    return rc;
}

int fr_cli_train(int argc, char **argv)
{
    train_args a;
    args_init(&a);
    int help = 0, rc = parse_train(argc, argv, &a, &help);
    if (help) {
        fr_cli_train_help(stdout);
        rc = 0;
    } else if (rc == 0) {
        rc = run_train(&a);
    }
    cli_dims_free(&a.dims);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* eval                                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Load the model of a MODEL|CKPT argument: a checkpoint's weights go into --model or the model
 * its config names. */
static int load_model_or_ckpt(const char *arg, const char *model_opt, fr_graph **g)
{
    *g = NULL;
    if (!is_checkpoint_file(arg)) {
        if (fr_onnx_load_file(arg, g) != FR_OK) return cli_fail_status();
        return 0;
    }
    char *json = NULL, *mp = NULL;
    int rc = 0;
    if (!model_opt) {
        if (fr_train_ckpt_config(arg, &json) != FR_OK) return cli_fail_status();
        mp = config_model_path(json);
        free(json);
        if (!mp) return cli_fail("checkpoint '%s' does not record its model: give --model MODEL", arg);
    }
    if (fr_onnx_load_file(model_opt ? model_opt : mp, g) != FR_OK)
        rc = cli_fail("%s%s", fr_last_error(), model_opt ? "" : " (the model the checkpoint records; give --model MODEL)");
    else if (fr_train_apply_weights(*g, arg, NULL) != FR_OK)
        rc = cli_fail_status();
    free(mp);
    return rc;
}

int fr_cli_eval(int argc, char **argv)
{
    train_args a;
    args_init(&a);
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            fr_cli_eval_help(stdout);
            cli_dims_free(&a.dims);
            return 0;
        }
        if (common_option("eval", argc, argv, &i, &a, &rc)) continue;
        if ((m = cli_option(argc, argv, &i, "eval", "--batches", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : parse_i64("eval", "--batches", v, 0, &a.batches);
        else if ((m = cli_option(argc, argv, &i, "eval", "--model", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (a.model_opt = v, 0);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("eval", "unknown option '%s'", argv[i]);
        else if (a.model)
            rc = cli_usage("eval", "only one MODEL|CKPT may be given (got '%s' and '%s')", a.model, argv[i]);
        else
            a.model = argv[i];
    }
    if (rc == 0 && !a.model) rc = cli_usage("eval", "no MODEL or CKPT given");
    if (rc == 0 && !a.data) rc = cli_usage("eval", "--data FILE is required");
    fr_graph *g = NULL;
    fr_trainer *t = NULL;
    fr_data_loader *dl = NULL;
    int64_t *w = NULL;
    if (rc == 0) rc = load_model_or_ckpt(a.model, a.model_opt, &g);
    if (rc == 0) rc = shape_from_model("eval", &a, g); /* a compiled graph gives batch x seq */
    if (rc == 0) {
        a.o.batch = a.batch;
        a.o.seq_len = a.seq;
        a.o.dims = a.dims.items;
        a.o.n_dims = a.dims.n;
        a.o.eval_only = 1;
        if (fr_trainer_new(g, &a.o, &t) != FR_OK) rc = cli_fail_status();
    }
    if (rc == 0) {
        fr_data_opts d = fr_data_opts_default();
        d.batch = a.batch;
        d.seq_len = a.seq;
        d.token_dtype = a.token_dtype;
        d.vocab_size = fr_trainer_vocab(t);
        if (fr_data_open_val(a.data, &d, a.batches, &dl) != FR_OK) rc = cli_fail("--data: %s", fr_last_error());
    }
    w = malloc((size_t)(a.batch * (a.seq + 1)) * sizeof *w);
    if (rc == 0 && !w) rc = cli_fail("out of memory");
    if (rc == 0) {
        int64_t n = fr_data_batches_per_epoch(dl);
        double sum = 0;
        for (int64_t b = 0; b < n && rc == 0; b++) {
            double l;
            if (fr_data_next(dl, FR_I64, w) != FR_OK || fr_trainer_eval(t, w, &l) != FR_OK)
                rc = cli_fail_status();
            else
                sum += l;
        }
        if (rc == 0) {
            double loss = sum / (double)n;
            printf("loss %.6f perplexity %.4f (%lld batches of %lld x %lld tokens)\n", loss, exp(loss), (long long)n,
                   (long long)a.batch, (long long)a.seq);
        }
    }
    free(w);
    fr_data_close(dl);
    fr_trainer_free(t);
    fr_graph_free(g);
    cli_dims_free(&a.dims);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* export                                                                                    */
/* ---------------------------------------------------------------------------------------- */

int fr_cli_export(int argc, char **argv)
{
    const char *ckpt = NULL, *model = NULL, *out = NULL;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            fr_cli_export_help(stdout);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "export", "--model", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (model = v, 0);
        else if ((m = cli_option(argc, argv, &i, "export", "-o", &v)) != 0 ||
                 (m = cli_option(argc, argv, &i, "export", "--output", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (out = v, 0);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("export", "unknown option '%s'", argv[i]);
        else if (ckpt)
            rc = cli_usage("export", "only one CKPT may be given (got '%s' and '%s')", ckpt, argv[i]);
        else
            ckpt = argv[i];
    }
    if (rc) return rc;
    if (!ckpt) return cli_usage("export", "no CKPT given");
    if (!out) return cli_usage("export", "-o OUT.onnx is required");
    if (!is_checkpoint_file(ckpt)) return cli_fail("'%s' is not an fp8run checkpoint", ckpt);
    fr_graph *g = NULL, *orig = NULL;
    rc = load_model_or_ckpt(ckpt, model, &g);
    /* a compiled graph: the original model it holds, with the checkpoint's weights */
    if (rc == 0 && fr_fbs_is_compiled(g)) {
        if (fr_fbs_original(g, &orig) != FR_OK) rc = cli_fail_status();
    }
    if (rc == 0 && fr_train_save_model(orig ? orig : g, out) != FR_OK) rc = cli_fail_status();
    fr_graph_free(orig);
    if (rc == 0) printf("exported %s (weights from %s)\n", out, ckpt);
    fr_graph_free(g);
    return rc;
}
