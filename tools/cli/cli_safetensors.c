/* Safetensors in the CLI: `fp8run train --init-from DIR|FILE` (Hugging Face weights into the
 * session's parameters, with a report of what matched) and `fp8run export CKPT --safetensors
 * DIR` (the trained weights as a Hugging Face checkpoint). */
#include <string.h>

#include "cli.h"

/* The first few names of a report list, then a count. */
static void print_names(const char *what, const char *const *names, int n)
{
    if (n == 0) return;
    fprintf(stderr, "  %d %s:", n, what);
    for (int i = 0; i < n && i < 8; i++) fprintf(stderr, " %s", names[i]);
    if (n > 8) fprintf(stderr, " ... (%d more)", n - 8);
    fputc('\n', stderr);
}

int cli_init_from(fp8run_session *s, fp8run_model *m, const char *path, int flags)
{
    fp8run_safetensors *st = NULL;
    if (fp8run_safetensors_open(path, &st) != FP8RUN_OK) return cli_fail("--init-from: %s", cli_last_error());
    fp8run_load_report r = {.struct_size = sizeof r};
    int rc = 0;
    if ((s ? fp8run_session_load_safetensors(s, st, flags, &r) : fp8run_model_load_safetensors(m, st, flags, &r)) !=
        FP8RUN_OK) {
        rc = cli_fail("--init-from: %s", cli_last_error());
    } else {
        fprintf(stderr, "init from %s: %d parameters loaded, %d missing (kept from the model), %d unexpected (ignored)\n",
                path, r.n_matched, r.n_missing, r.n_unexpected);
        print_names("missing", r.missing, r.n_missing);
        print_names("unexpected", r.unexpected, r.n_unexpected);
        for (int i = 0; i < r.n_nonfinite; i++)
            fprintf(stderr, "fp8run: warning: --init-from: tensor '%s' holds %lld NaN/Inf values (loaded as they are; "
                    "--strict-weights refuses them)\n", r.nonfinite[i], (long long)r.nonfinite_counts[i]);
        if (r.n_matched == 0) rc = cli_fail("--init-from: no parameter of the model is in '%s'", path);
    }
    fp8run_safetensors_close(st);
    return rc;
}

/* 1 when the run the checkpoint records chose its trained parameters (--train/--freeze): then
 * the frozen ones are not in it. The config is the trainer's JSON ("key": value). */
static int chose_params(const char *ckpt)
{
    fp8run_checkpoint *c = NULL;
    int chose = 0;
    if (fp8run_checkpoint_open(ckpt, &c) != FP8RUN_OK) return 0;
    const char *js = fp8run_checkpoint_config_json(c);
    static const char *const keys[] = {"\"train\":", "\"freeze\":"};
    for (int k = 0; js && k < 2; k++) {
        const char *p = strstr(js, keys[k]);
        if (!p) continue;
        p += strlen(keys[k]);
        while (*p == ' ') p++;
        if (strncmp(p, "null", 4) != 0) chose = 1;
    }
    fp8run_checkpoint_close(c);
    return chose;
}

/* Parameters that hold only rows 0..T-1 of a table ("transformer.wpe.weight[0:11]", a static
 * export's position embedding): transformers will not take them for the table. */
static void warn_partial_tables(const char *ckpt, const char *dir)
{
    fp8run_checkpoint *c = NULL;
    if (fp8run_checkpoint_open(ckpt, &c) != FP8RUN_OK) return;
    for (int i = 0; i < fp8run_checkpoint_param_count(c); i++) {
        fp8run_value_info vi = {.struct_size = sizeof vi};
        const char *b;
        if (fp8run_checkpoint_param(c, i, &vi) == FP8RUN_OK && (b = strstr(vi.name, "[0:")) != NULL)
            fprintf(stderr, "fp8run: warning: '%s' in %s holds only those rows of '%.*s' (the ONNX file held no "
                            "other row): a Hugging Face model will not load it as the table\n",
                    vi.name, dir, (int)(b - vi.name), vi.name);
    }
    fp8run_checkpoint_close(c);
}

int cli_export_safetensors(const char *ckpt, const char *dir, const char *dtype, int64_t max_shard_mb)
{
    fp8run_dtype dt = FP8RUN_DTYPE_FLOAT32;
    if (dtype && strcmp(dtype, "bf16") == 0) dt = FP8RUN_DTYPE_BFLOAT16;
    else if (dtype && strcmp(dtype, "fp32") != 0)
        return cli_usage("export", "--dtype: '%s' is not one of fp32, bf16", dtype);
    if (cli_make_dirs(dir) != 0) return CLI_EXIT_FAIL;
    uint64_t max = max_shard_mb > 0 ? (uint64_t)max_shard_mb * 1000 * 1000 : 0;
    if (fp8run_checkpoint_save_safetensors(ckpt, dir, dt, max) != FP8RUN_OK) return cli_fail_status();
    if (chose_params(ckpt))
        fprintf(stderr, "fp8run: warning: the run trained only some parameters (--train/--freeze): the frozen ones "
                        "are not in the checkpoint nor in %s\n", dir);
    warn_partial_tables(ckpt, dir);
    printf("exported the weights of %s (%s) to %s\n", ckpt, dt == FP8RUN_DTYPE_BFLOAT16 ? "bf16" : "fp32", dir);
    return 0;
}
