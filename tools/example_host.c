/* fp8run_example: a host program that embeds fp8run through its public C API only.
 *
 *   fp8run_example MODEL.onnx [TOKENS] [-n STEPS] [-b BATCH] [-t SEQ] [-l LR] [-p PRECISION]
 *                  [-o OUTDIR]
 *
 * It loads the model, describes it, makes its own batches (from a raw uint16 token file when
 * TOKENS is given, else a synthetic "count upwards" sequence the model can learn), trains a few
 * steps printing each loss, reads a parameter back, saves a checkpoint and exports the trained
 * model into OUTDIR (default "."). Batches from TOKENS: window b of step s starts at token
 * ((s * B + b) * T) mod (n - T): consecutive windows, as tools that test against it expect.
 * Losses are printed with %.17g so other programs can compare them exactly. */
#include <fp8run.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_log(void *user, fp8run_log_level level, const char *msg)
{
    (void)user;
    static const char *const names[] = {"debug", "info", "warn", "error"};
    fprintf(stderr, "[fp8run %s] %s\n", names[level < 0 || level > 3 ? 0 : level], msg);
}

/* Print the library's message and leave. */
static int fail(const char *what, fp8run_status st, const char *msg)
{
    fprintf(stderr, "fp8run_example: %s failed (%s): %s\n", what, fp8run_status_name(st), msg);
    return 1;
}

static uint16_t *read_tokens(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    uint16_t *t = malloc(cap * sizeof *t);
    while (t) {
        len += fread(t + len, sizeof *t, cap - len, f);
        if (len < cap) break;
        uint16_t *nt = realloc(t, 2 * cap * sizeof *t);
        if (!nt) {
            free(t);
            t = NULL;
            break;
        }
        t = nt;
        cap *= 2;
    }
    fclose(f);
    *n = len;
    return t;
}

static void describe(const fp8run_model *m)
{
    printf("model %s: %d inputs, %d outputs, %lld parameters in %d tensors\n", fp8run_model_path(m),
           fp8run_model_input_count(m), fp8run_model_output_count(m), (long long)fp8run_model_param_elements(m),
           fp8run_model_param_count(m));
    for (int i = 0; i < fp8run_model_input_count(m); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if (fp8run_model_input(m, i, &v) != FP8RUN_OK) continue;
        printf("  input %s %s [", v.name, fp8run_dtype_name(v.dtype));
        for (int d = 0; d < v.rank; d++) {
            if (v.dim_names[d])
                printf("%s%s", d ? ", " : "", v.dim_names[d]);
            else
                printf("%s%lld", d ? ", " : "", (long long)v.dims[d]);
        }
        printf("]\n");
    }
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_path = NULL, *outdir = ".", *precision = "fp32";
    int steps = 3;
    int64_t B = 2, T = 8;
    double lr = 1e-3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] == '-' && a[1] && !a[2] && !v) {
            fprintf(stderr, "fp8run_example: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "-n") == 0) steps = atoi(argv[++i]);
        else if (strcmp(a, "-b") == 0) B = atoll(argv[++i]);
        else if (strcmp(a, "-t") == 0) T = atoll(argv[++i]);
        else if (strcmp(a, "-l") == 0) lr = atof(argv[++i]);
        else if (strcmp(a, "-p") == 0) precision = argv[++i];
        else if (strcmp(a, "-o") == 0) outdir = argv[++i];
        else if (!model_path) model_path = a;
        else if (!tokens_path) tokens_path = a;
        else {
            fprintf(stderr, "usage: fp8run_example MODEL.onnx [TOKENS] [-n STEPS] [-b B] [-t T] [-l LR] "
                            "[-p fp32|bf16|fp8] [-o OUTDIR]\n");
            return 2;
        }
    }
    if (!model_path || steps < 1 || B < 1 || T < 1) {
        fprintf(stderr, "usage: fp8run_example MODEL.onnx [TOKENS] [-n STEPS] [-b B] [-t T] [-l LR] "
                        "[-p fp32|bf16|fp8] [-o OUTDIR]\n");
        return 2;
    }
    if (fp8run_abi_version() != FP8RUN_ABI_VERSION) {
        fprintf(stderr, "fp8run_example: built for ABI %d, the library is ABI %d\n", FP8RUN_ABI_VERSION,
                fp8run_abi_version());
        return 1;
    }
    fp8run_set_log_callback(on_log, NULL, FP8RUN_LOG_INFO);
    printf("fp8run %s\n", fp8run_version());

    fp8run_model *m = NULL;
    fp8run_status st = fp8run_model_load(model_path, &m);
    if (st != FP8RUN_OK) return fail("loading the model", st, fp8run_last_error());
    describe(m);

    fp8run_train_config cfg;
    st = fp8run_train_config_init(&cfg, sizeof cfg);
    if (st != FP8RUN_OK) {
        fp8run_model_destroy(m);
        return fail("initializing the training config", st, fp8run_last_error());
    }
    cfg.batch = B;
    cfg.seq_len = T;
    cfg.precision = precision;
    cfg.lr = lr;
    fp8run_session *s = NULL;
    st = fp8run_session_create(m, "auto", &cfg, &s);
    if (st != FP8RUN_OK) {
        fp8run_model_destroy(m);
        return fail("creating the session", st, fp8run_last_error());
    }
    const int64_t V = fp8run_session_vocab(s), per = B * (T + 1);

    size_t n_tok = 0;
    uint16_t *tok = NULL;
    if (tokens_path) {
        tok = read_tokens(tokens_path, &n_tok);
        if (!tok || n_tok < (size_t)T + 2) {
            fprintf(stderr, "fp8run_example: cannot read enough tokens from '%s'\n", tokens_path);
            free(tok);
            fp8run_session_destroy(s);
            fp8run_model_destroy(m);
            return 1;
        }
    }
    int64_t *w = malloc((size_t)per * sizeof *w);
    int rc = w ? 0 : 1;
    for (int step = 0; step < steps && rc == 0; step++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j <= T; j++) {
                int64_t id;
                if (tok) {
                    int64_t start = ((int64_t)step * B + b) * T % ((int64_t)n_tok - T);
                    id = tok[start + j];
                } else {
                    id = (step + 3 * b + j) % V; /* count upwards: a pattern worth learning */
                }
                w[b * (T + 1) + j] = id;
            }
        fp8run_step_stats stats = {.struct_size = sizeof stats};
        st = fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, (size_t)per, &stats);
        if (st != FP8RUN_OK)
            rc = fail("a training step", st, fp8run_session_error(s));
        else
            printf("step %lld loss %.17g\n", (long long)stats.step, stats.loss);
    }

    /* read a trained parameter back */
    if (rc == 0 && fp8run_session_param_count(s) > 0) {
        fp8run_value_info p = {.struct_size = sizeof p};
        fp8run_status pst = fp8run_session_param(s, 0, &p);
        float *vals = pst == FP8RUN_OK ? malloc((size_t)p.numel * sizeof *vals) : NULL;
        if (vals && fp8run_session_get_param(s, p.name, vals, (size_t)p.numel) == FP8RUN_OK)
            printf("parameter %s: %lld values, first %g\n", p.name, (long long)p.numel, (double)vals[0]);
        else
            rc = fail("reading a parameter", pst != FP8RUN_OK ? pst : FP8RUN_ERR_INVALID_ARG,
                      fp8run_session_error(s));
        free(vals);
    }

    /* checkpoint and export */
    char path[4096];
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/example.ckpt", outdir);
        st = fp8run_session_save(s, path, NULL);
        if (st != FP8RUN_OK)
            rc = fail("saving the checkpoint", st, fp8run_session_error(s));
        else
            printf("checkpoint %s\n", path);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/example_trained.onnx", outdir);
        st = fp8run_session_export(s, path);
        if (st != FP8RUN_OK)
            rc = fail("exporting", st, fp8run_session_error(s));
        else
            printf("exported %s\n", path);
    }
    free(w);
    free(tok);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
    return rc;
}
