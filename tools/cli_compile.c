/* `fp8run compile MODEL -o OUT.fbs --batch B --seq T [recipe options]`: prepare a model for
 * one batch x seq and compile it for FP8 (or BF16) training, written as a compiled graph file
 * that `fp8run train OUT.fbs` trains without compiling again (fp8run_model_write_compiled).
 * Also the recipe options `info` shares. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

void cli_compile_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run compile MODEL -o OUT.fbs --batch B --seq T [options]\n"
            "\n"
            "Prepare MODEL (ONNX) for B windows of T tokens and compile it for FP8 training, as\n"
            "`fp8run train --precision fp8` does on the fly, and write the compiled graph: a valid\n"
            "ONNX file (ai.fp8run::Linear nodes, fused weights, the FP8 scaling state, the\n"
            "decisions and the original model in its metadata). `fp8run train OUT.fbs` trains it\n"
            "without compiling again; export and checkpoints use the original names.\n"
            "\n"
            "A compiled graph is specialized to B x T (shape computations are folded), like a\n"
            "TensorRT engine: training it with another --batch/--seq is an error; compile again.\n"
            "\n"
            "options:\n"
            "  -o, --output OUT.fbs    where to write (required)\n"
            "  --batch B --seq T       the shape to specialize to (required)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  --tokens-input NAME --logits-output NAME --loss-output NAME   as for train\n"
            "  --train REGEX --freeze REGEX   trained parameters (a frozen Linear is not converted)\n"
            CLI_RECIPE_HELP
            "  -h, --help              show this help\n"
            "\n"
            "Example:\n"
            "  fp8run compile model.onnx -o model.fbs --batch 8 --seq 512 --recipe delayed\n"
            "  fp8run info model.fbs\n"
            "  fp8run train model.fbs --data tokens.bin --steps 1000 --lr 3e-4\n");
}

/* ---- option values ---- */

static int parse_int_in(const char *cmd, const char *opt, const char *text, long long lo, long long hi, int *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || !text[0] || *end || v < lo || v > hi)
        return cli_usage(cmd, "%s: '%s' is not an integer in %lld..%lld", opt, text, lo, hi);
    *out = (int)v;
    return 0;
}

static int parse_one_of(const char *cmd, const char *opt, const char *text, const char *const *choices, int *out)
{
    char list[200] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return cli_usage(cmd, "%s: '%s' is not one of %s", opt, text, list);
}

static const char *const k_precisions[] = {"fp32", "bf16", "fp8", NULL};
static const char *const k_recipes[] = {"delayed", "current", "block", NULL};
static const char *const k_formats[] = {"hybrid", "e4m3", NULL};
static const char *const k_algos[] = {"max", "most_recent", NULL};

int cli_recipe_option(const char *cmd, int argc, char **argv, int *i, fp8run_train_config *c, int *rc)
{
    const char *v = NULL;
    int m, k;
#define OPT(name) ((m = cli_option(argc, argv, i, cmd, name, &v)) != 0)
    if (OPT("--precision")) {
        if (m > 0 && (*rc = parse_one_of(cmd, "--precision", v, k_precisions, &k)) == 0) c->precision = k_precisions[k];
    } else if (OPT("--recipe")) {
        if (m > 0 && (*rc = parse_one_of(cmd, "--recipe", v, k_recipes, &k)) == 0) c->recipe = k_recipes[k];
    } else if (OPT("--fp8-format")) {
        if (m > 0 && (*rc = parse_one_of(cmd, "--fp8-format", v, k_formats, &k)) == 0) c->fp8_format = k_formats[k];
    } else if (OPT("--bf16-boundary")) {
        if (m > 0) *rc = parse_int_in(cmd, "--bf16-boundary", v, 0, 1000000, &c->bf16_boundary);
    } else if (OPT("--fp8-exclude")) {
        if (m > 0) c->fp8_exclude = v;
    } else if (strcmp(argv[*i], "--no-fuse") == 0) {
        c->fuse = 0;
        m = 1;
    } else if (strcmp(argv[*i], "--no-fuse-attention") == 0) {
        c->fuse_attention = 0;
        m = 1;
    } else if (strcmp(argv[*i], "--no-fuse-swiglu") == 0) {
        c->fuse_swiglu = 0;
        m = 1;
    } else if (OPT("--pad-multiple")) {
        if (m > 0) *rc = parse_int_in(cmd, "--pad-multiple", v, 1, 4096, &c->pad_multiple);
    } else if (OPT("--amax-history")) {
        if (m > 0) *rc = parse_int_in(cmd, "--amax-history", v, 1, 1 << 24, &c->amax_history_len);
    } else if (OPT("--amax-algo")) {
        if (m > 0 && (*rc = parse_one_of(cmd, "--amax-algo", v, k_algos, &k)) == 0) c->amax_algo = k_algos[k];
    } else if (OPT("--fp8-margin")) {
        if (m > 0) *rc = parse_int_in(cmd, "--fp8-margin", v, -64, 64, &c->fp8_margin);
    } else if (OPT("--fp8-interval")) {
        if (m > 0) *rc = parse_int_in(cmd, "--fp8-interval", v, 1, 1000000000, &c->fp8_interval);
    } else {
        return 0;
    }
#undef OPT
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}

/* Model options shared by compile and info. */
static int model_option(const char *cmd, int argc, char **argv, int *i, fp8run_train_config *o, cli_dims *dims,
                        int64_t *batch, int64_t *seq, int *rc)
{
    const char *v = NULL;
    int m;
    int x = 0;
    if ((m = cli_option(argc, argv, i, cmd, "--batch", &v)) != 0) {
        if (m > 0 && (*rc = parse_int_in(cmd, "--batch", v, 1, 1 << 30, &x)) == 0) *batch = x;
    } else if ((m = cli_option(argc, argv, i, cmd, "--seq", &v)) != 0) {
        if (m > 0 && (*rc = parse_int_in(cmd, "--seq", v, 1, 1 << 30, &x)) == 0) *seq = x;
    } else if ((m = cli_option(argc, argv, i, cmd, "--dim", &v)) != 0) {
        if (m > 0) *rc = cli_dims_add(dims, cmd, v);
    } else if ((m = cli_option(argc, argv, i, cmd, "--tokens-input", &v)) != 0) {
        o->tokens_input = v;
    } else if ((m = cli_option(argc, argv, i, cmd, "--logits-output", &v)) != 0) {
        o->logits_output = v;
    } else if ((m = cli_option(argc, argv, i, cmd, "--loss-output", &v)) != 0) {
        o->loss_output = v;
    } else if ((m = cli_option(argc, argv, i, cmd, "--train", &v)) != 0) {
        o->train_regex = v;
    } else if ((m = cli_option(argc, argv, i, cmd, "--freeze", &v)) != 0) {
        o->freeze_regex = v;
    } else {
        return 0;
    }
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}

int cli_compile_parse(const char *cmd, int argc, char **argv, int *i, fp8run_train_config *o, cli_dims *dims,
                      int64_t *batch, int64_t *seq, int *rc)
{
    return cli_recipe_option(cmd, argc, argv, i, o, rc) || model_option(cmd, argc, argv, i, o, dims, batch, seq, rc);
}

int cli_compile(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    fp8run_train_config o;
    fp8run_train_config_init(&o, sizeof o);
    o.precision = "fp8";
    cli_dims dims = {0};
    int64_t batch = 0, seq = 0;
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_compile_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
        if (cli_compile_parse("compile", argc, argv, &i, &o, &dims, &batch, &seq, &rc)) continue;
        if ((m = cli_option(argc, argv, &i, "compile", "-o", &v)) != 0 ||
            (m = cli_option(argc, argv, &i, "compile", "--output", &v)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : (out = v, 0);
        else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("compile", "unknown option '%s'", argv[i]);
        else if (model)
            rc = cli_usage("compile", "only one MODEL may be given (got '%s' and '%s')", model, argv[i]);
        else
            model = argv[i];
    }
    if (rc == 0 && !model) rc = cli_usage("compile", "no MODEL given");
    if (rc == 0 && !out) rc = cli_usage("compile", "-o OUT.fbs is required");
    if (rc == 0 && (!batch || !seq))
        rc = cli_usage("compile", "--batch B and --seq T are required (a compiled graph is specialized to them)");
    if (rc == 0 && strcmp(o.precision, "fp32") == 0)
        rc = cli_usage("compile", "--precision fp32 leaves the model as it is: compile for fp8 or bf16, or "
                       "train the ONNX model");
    if (rc != 0) {
        cli_dims_free(&dims);
        return rc;
    }
    o.batch = batch;
    o.seq_len = seq;
    o.dim_names = dims.names;
    o.dim_values = dims.values;
    o.n_dims = dims.n;
    fp8run_model *m = NULL;
    fp8run_model_info mi = {.struct_size = sizeof mi};
    fp8run_report *r = NULL;
    if (fp8run_model_load(model, &m) != FP8RUN_OK || fp8run_model_get_info(m, &mi) != FP8RUN_OK)
        rc = cli_fail_status();
    else if (mi.compiled)
        rc = cli_fail("'%s' is already a compiled graph: compile the original ONNX model", model);
    else if (fp8run_model_write_compiled(m, &o, out, &r) != FP8RUN_OK) /* reads what it wrote back */
        rc = cli_fail_status();
    if (rc == 0) {
        struct stat sb;
        char sz[32];
        printf("compiled %s -> %s (%s): batch %lld x seq %lld, precision %s\n", model, out,
               cli_human_bytes(stat(out, &sb) == 0 ? (uint64_t)sb.st_size : 0, sz, sizeof sz), (long long)batch,
               (long long)seq, o.precision);
        fputs(fp8run_report_text(r), stdout);
    }
    fp8run_report_destroy(r);
    fp8run_model_destroy(m);
    cli_dims_free(&dims);
    return rc;
}
