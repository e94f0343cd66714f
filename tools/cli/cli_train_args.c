/* The arguments `fp8run train` and `fp8run eval` share (cli_train_args.h). */
#include <stdlib.h>
#include <string.h>

#include "cli_train_args.h"

static const char *const k_dtypes[] = {"uint8", "uint16", "uint32", NULL};
static const fp8run_dtype k_dtype_of[] = {FP8RUN_DTYPE_UINT8, FP8RUN_DTYPE_UINT16, FP8RUN_DTYPE_UINT32};

void train_args_init(train_args *a, unsigned command)
{
    memset(a, 0, sizeof *a);
    cli_must(fp8run_train_config_init(&a->o, sizeof a->o));
    a->o.grad_clip = 1.0; /* the command's default; the API's is 0 (off) */
    a->command = command;
    a->device = "auto"; /* the GPU when one is usable; the CPU otherwise (and it says which) */
    a->val_batches = 20;
    a->log_every = 10;
    a->ckpt_keep = 3;
    a->order = FP8RUN_DATA_RANDOM;
    a->token_dtype = FP8RUN_DTYPE_UINT16;
    a->node_rank = -1;
}

/* --help, then the training options of the command with its defaults. */
void train_args_help(FILE *f, unsigned command, const char *required, const char *const *no_default)
{
    train_args a;
    train_args_init(&a, command);
    fprintf(f, "  -h, --help              show this help\n"
               "training options (%s required for an ONNX model):\n", required);
    cli_config_help(f, command, &a.o, no_default);
}

/* Options that train and eval share, the training options of the command included. Returns 1
 * when argv[*i] was one of them (rc set), 0 if not. */
int train_args_option(const char *cmd, int argc, char **argv, int *i, train_args *a, int *rc)
{
    const char *v = NULL;
    int m, k;
    if (cli_config_option(cmd, a->command, argc, argv, i, &a->o, &a->given, rc)) return 1;
#define OPT(name) ((m = cli_option(argc, argv, i, cmd, name, &v)) != 0)
    if (OPT("--data")) a->data = v;
    else if (OPT("--data-dtype")) {
        if (m > 0 && (*rc = cli_choice(cmd, "--data-dtype", v, k_dtypes, &k)) == 0) a->token_dtype = k_dtype_of[k];
    } else if (OPT("--device")) {
        if (m > 0 && (*rc = cli_choice(cmd, "--device", v, fp8run_choices("device"), &k)) == 0) a->device = v;
    } else if (OPT("--dim")) {
        if (m > 0) *rc = cli_dims_add(&a->dims, cmd, v);
    } else
        return 0;
#undef OPT
    if (m < 0) *rc = CLI_EXIT_USAGE;
    return 1;
}

/* After parsing: --batch and --seq as given (0: not given; a compiled graph gives them). */
void train_args_given_shape(train_args *a)
{
    a->have_batch = cli_config_given(&a->given, "batch");
    a->have_seq = cli_config_given(&a->given, "seq_len");
    a->batch = a->have_batch ? a->o.batch : 0;
    a->seq = a->have_seq ? a->o.seq_len : 0;
}

/* batch, seq and precision: a compiled graph fixes them (given ones must agree); an ONNX model
 * needs --batch and --seq. */
int train_args_shape_from_model(const char *cmd, train_args *a, const fp8run_model *m)
{
    fp8run_model_info mi = {.struct_size = sizeof mi};
    if (fp8run_model_get_info(m, &mi) != FP8RUN_OK) return cli_fail_status();
    if (!mi.compiled) {
        if (!a->have_batch || !a->have_seq) return cli_usage(cmd, "--batch B and --seq T are required");
        return 0;
    }
    int64_t b, s;
    const char *prec;
    const char *path = fp8run_model_path(m) ? fp8run_model_path(m) : a->model;
    if (fp8run_model_compiled_for(m, &b, &s, &prec) != FP8RUN_OK) return cli_fail_status();
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
    if (cli_config_given(&a->given, "precision") && strcmp(a->o.precision, prec) != 0)
        return cli_fail("'%s' is compiled for precision %s, not %s: recompile it with --precision %s", path, prec,
                        a->o.precision, a->o.precision);
    a->o.precision = prec; /* a static string */
    return 0;
}

/* Load the model of a MODEL|CKPT argument: a checkpoint's weights go into --model or the model
 * its config names. */
int cli_load_model_or_ckpt(const char *arg, const char *model_opt, fp8run_model **m)
{
    *m = NULL;
    if (!fp8run_is_checkpoint(arg)) {
        if (fp8run_model_load(arg, m) != FP8RUN_OK) return cli_fail_status();
        return 0;
    }
    fp8run_checkpoint *ck = NULL;
    const char *mp = model_opt, *why;
    int rc = 0;
    if (!model_opt) {
        if (fp8run_checkpoint_open(arg, &ck) != FP8RUN_OK) return cli_fail_status();
        mp = fp8run_checkpoint_model_path(ck);
        if (!mp) rc = cli_fail("checkpoint '%s' does not record its model: give --model MODEL", arg);
        /* the file is not trusted to name what we open: only a path below the working folder,
           through no symbolic link */
        else if ((why = cli_path_escape(mp)) != NULL)
            rc = cli_fail("checkpoint '%s' records its model as '%s', %s (not opened): give --model MODEL", arg, mp,
                          why);
    }
    if (rc == 0 && fp8run_model_load(mp, m) != FP8RUN_OK)
        rc = cli_fail("%s%s", cli_last_error(), model_opt ? "" : " (the model the checkpoint records; give --model MODEL)");
    else if (rc == 0 && fp8run_model_apply_checkpoint(*m, arg, NULL) != FP8RUN_OK)
        rc = cli_fail_status();
    fp8run_checkpoint_close(ck);
    return rc;
}

/* The data loader options both commands share. */
fp8run_data_config train_args_data_config(const train_args *a, int64_t vocab)
{
    fp8run_data_config d;
    cli_must(fp8run_data_config_init(&d, sizeof d));
    d.batch = a->batch;
    d.seq_len = a->seq;
    d.order = a->order;
    d.seed = a->o.seed;
    d.token_dtype = a->token_dtype;
    d.vocab_size = vocab;
    d.no_packing = a->o.packing && strcmp(a->o.packing, "off") == 0; /* SFT token files */
    return d;
}
