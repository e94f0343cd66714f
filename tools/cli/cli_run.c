/* `fp8run run MODEL --input NAME=FILE.npy ... [--dim NAME=VALUE ...] --output-dir DIR`:
 * prepare the model for the given input shapes, run it on the CPU executor and write every
 * graph output to DIR/<name>.npy. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_run_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run run MODEL --input NAME=FILE.npy [--input ...] [--dim NAME=VALUE ...]\n"
            "                  --output-dir DIR\n"
            "\n"
            "Run the model's forward pass on the CPU and write each graph output to\n"
            "DIR/<output name>.npy in the output's dtype (DIR is created if needed; characters\n"
            "other than letters, digits, '.', '_' and '-' in output names become '_').\n"
            "bfloat16 and FP8 outputs, which NumPy has no type for, are written as float32\n"
            "(exactly). Every graph input needs an --input; its .npy dtype must be the input's.\n"
            "\n"
            "Symbolic dimensions not given with --dim are taken from the shapes of the input\n"
            "arrays (e.g. 'batch' and 'seq' from input_ids.npy of shape (2, 8)).\n"
            "\n"
            "options:\n"
            "  --input NAME=FILE.npy  value for graph input NAME (repeatable)\n"
            "  --dim NAME=VALUE       fix the symbolic dimension NAME (repeatable)\n"
            "  --output-dir DIR       where the outputs are written (required)\n"
            "  -h, --help             show this help\n");
}

typedef struct run_input {
    char *name;          /* owned */
    const char *file;    /* points into argv */
    fp8run_tensor t;     /* the array read from file (data from fp8run_npy_load) */
} run_input;

typedef struct run_args {
    const char *model, *out_dir;
    run_input *inputs;
    int n_inputs;
    cli_dims dims;
} run_args;

static void free_args(run_args *a)
{
    for (int i = 0; i < a->n_inputs; i++) {
        free(a->inputs[i].name);
        fp8run_npy_free(&a->inputs[i].t);
    }
    free(a->inputs);
    cli_dims_free(&a->dims);
}

static int add_input(run_args *a, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1]) return cli_usage("run", "--input expects NAME=FILE.npy, got '%s'", arg);
    for (int i = 0; i < a->n_inputs; i++)
        if (strncmp(a->inputs[i].name, arg, (size_t)(eq - arg)) == 0 &&
            a->inputs[i].name[eq - arg] == '\0')
            return cli_usage("run", "--input %.*s is given twice", (int)(eq - arg), arg);
    run_input *ni = realloc(a->inputs, (size_t)(a->n_inputs + 1) * sizeof *ni);
    if (!ni) return cli_fail("out of memory");
    a->inputs = ni;
    run_input *in = &a->inputs[a->n_inputs];
    memset(in, 0, sizeof *in);
    in->name = strndup(arg, (size_t)(eq - arg));
    if (!in->name) return cli_fail("out of memory");
    in->file = eq + 1;
    a->n_inputs++;
    return 0;
}

static int parse_args(int argc, char **argv, run_args *a, int *help)
{
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *val;
        int m;
        if (cli_is_help(argv[i])) {
            *help = 1;
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "run", "--input", &val)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : add_input(a, val);
        else if ((m = cli_option(argc, argv, &i, "run", "--dim", &val)) != 0)
            rc = m < 0 ? CLI_EXIT_USAGE : cli_dims_add(&a->dims, "run", val);
        else if ((m = cli_option(argc, argv, &i, "run", "--output-dir", &val)) != 0) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if (a->out_dir) rc = cli_usage("run", "--output-dir is given twice");
            else if (!val[0]) rc = cli_usage("run", "--output-dir is empty");
            else a->out_dir = val;
        } else if (argv[i][0] == '-' && argv[i][1])
            rc = cli_usage("run", "unknown option '%s'", argv[i]);
        else if (a->model)
            rc = cli_usage("run", "only one MODEL may be given (got '%s' and '%s')", a->model, argv[i]);
        else
            a->model = argv[i];
    }
    if (rc == 0 && !a->model) rc = cli_usage("run", "no MODEL given");
    if (rc == 0 && !a->out_dir) rc = cli_usage("run", "--output-dir DIR is required");
    return rc;
}

/* A file name for an output: unsafe characters become '_', no leading '.', unique among the
 * names already used (a suffix "_2", "_3", ... otherwise). */
static void safe_name(const char *name, char **used, int n_used, char *buf, size_t n)
{
    size_t k = 0;
    for (const char *s = name; *s && k + 1 < n && k < 200; s++) {
        char c = *s;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || (c == '.' && k > 0);
        buf[k++] = ok ? c : '_';
    }
    buf[k] = '\0';
    if (k == 0) snprintf(buf, n, "output");
    char base[201];
    snprintf(base, sizeof base, "%s", buf);
    for (int suffix = 2;; suffix++) {
        int clash = 0;
        for (int i = 0; i < n_used && !clash; i++) clash = strcmp(used[i], buf) == 0;
        if (!clash) return;
        snprintf(buf, n, "%s_%d", base, suffix);
    }
}

/* One output as .npy; bfloat16 / FP8 have no NumPy code: widened to float32, which represents
 * them exactly. */
static int write_output(const fp8run_tensor *t, const char *path)
{
    fp8run_tensor w = *t;
    float *wide = NULL;
    int widen = !fp8run_npy_supports(t->dtype) && (t->dtype == FP8RUN_DTYPE_BFLOAT16 ||
                                                   t->dtype == FP8RUN_DTYPE_FLOAT8E4M3FN ||
                                                   t->dtype == FP8RUN_DTYPE_FLOAT8E5M2);
    int rc = 0;
    if (widen) {
        size_t es = fp8run_dtype_size(t->dtype), n = es ? t->nbytes / es : 0;
        wide = malloc((n ? n : 1) * sizeof *wide);
        if (!wide) return cli_fail("output '%s': out of memory", t->name);
        w.dtype = FP8RUN_DTYPE_FLOAT32;
        w.data = wide;
        w.nbytes = n * sizeof *wide;
        if (fp8run_convert_to_float32(t->dtype, t->data, n, wide) != FP8RUN_OK) rc = -1;
    }
    if (rc == 0 && fp8run_npy_save(path, &w) != FP8RUN_OK) rc = -1;
    if (rc == 0) {
        char shp[256];
        printf("%s -> %s (%s %s%s)\n", t->name, path, fp8run_dtype_name(w.dtype),
               cli_dims_text(w.rank, w.dims, shp, sizeof shp), widen ? ", widened" : "");
    } else {
        rc = cli_fail("output '%s': %s", t->name, cli_last_error());
    }
    free(wide);
    return rc;
}

/* The .npy files the outputs go to: refused when one is an input (the model or an --input
 * file, by any name) or two are one file, before any is written. */
static int check_outputs(const fp8run_forward *f, const char *dir, const run_args *a)
{
    int n = fp8run_forward_output_count(f), rc = 0;
    cli_file *in = calloc((size_t)a->n_inputs + 1, sizeof *in), *out = calloc((size_t)(n ? n : 1), sizeof *out);
    char **paths = calloc((size_t)(n ? n : 1), sizeof *paths), **used = calloc((size_t)(n ? n : 1), sizeof *used);
    if (!in || !out || !paths || !used) rc = cli_fail("out of memory");
    for (int i = 0; rc == 0 && i < a->n_inputs; i++) in[i] = (cli_file){a->inputs[i].file, "input .npy (--input)"};
    if (rc == 0) in[a->n_inputs] = (cli_file){a->model, "model"};
    for (int i = 0; rc == 0 && i < n; i++) {
        fp8run_tensor t = {.struct_size = sizeof t};
        if (fp8run_forward_output(f, i, &t) != FP8RUN_OK) {
            rc = cli_fail_status();
            break;
        }
        char fname[256];
        safe_name(t.name, used, i, fname, sizeof fname);
        size_t plen = strlen(dir) + strlen(fname) + 8;
        used[i] = strdup(fname);
        paths[i] = malloc(plen);
        if (!used[i] || !paths[i]) {
            rc = cli_fail("out of memory");
            break;
        }
        snprintf(paths[i], plen, "%s/%s.npy", dir, fname);
        out[i] = (cli_file){paths[i], "output .npy"};
    }
    if (rc == 0) rc = cli_check_files(in, a->n_inputs + 1, out, n);
    for (int i = 0; paths && used && i < n; i++) free(paths[i]), free(used[i]);
    free(paths), free(used), free(in), free(out);
    return rc;
}

static int write_outputs(const fp8run_forward *f, const char *dir)
{
    int n = fp8run_forward_output_count(f), rc = 0;
    char **used = calloc((size_t)(n ? n : 1), sizeof *used);
    if (!used) return cli_fail("out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        fp8run_tensor t = {.struct_size = sizeof t};
        if (fp8run_forward_output(f, i, &t) != FP8RUN_OK) {
            rc = cli_fail_status();
            break;
        }
        char fname[256];
        safe_name(t.name, used, i, fname, sizeof fname);
        used[i] = strdup(fname);
        size_t plen = strlen(dir) + strlen(fname) + 8;
        char *path = malloc(plen);
        if (!used[i] || !path) {
            free(path);
            rc = cli_fail("out of memory");
            break;
        }
        snprintf(path, plen, "%s/%s.npy", dir, fname);
        rc = write_output(&t, path);
        free(path);
    }
    for (int i = 0; i < n; i++) free(used[i]);
    free(used);
    return rc;
}

int cli_run(int argc, char **argv)
{
    run_args a = {0};
    int help = 0;
    int rc = parse_args(argc, argv, &a, &help);
    if (help) {
        cli_run_help(stdout);
        free_args(&a);
        return 0;
    }
    if (rc != 0) {
        free_args(&a);
        return rc;
    }
    fp8run_model *m = NULL;
    fp8run_forward *f = NULL;
    const char **names = calloc((size_t)(a.n_inputs ? a.n_inputs : 1), sizeof *names);
    int *ranks = calloc((size_t)(a.n_inputs ? a.n_inputs : 1), sizeof *ranks);
    const int64_t **dims = calloc((size_t)(a.n_inputs ? a.n_inputs : 1), sizeof *dims);
    if (!names || !ranks || !dims) rc = cli_fail("out of memory");
    for (int i = 0; i < a.n_inputs && rc == 0; i++) {
        run_input *in = &a.inputs[i];
        in->t.struct_size = sizeof in->t;
        if (fp8run_npy_load(in->file, &in->t) != FP8RUN_OK) {
            rc = cli_fail("--input %s: %s", in->name, cli_last_error());
            break;
        }
        in->t.name = in->name;
        names[i] = in->name;
        ranks[i] = in->t.rank;
        dims[i] = in->t.dims;
    }
    if (rc == 0 && fp8run_model_load(a.model, &m) != FP8RUN_OK) rc = cli_fail_status();
    /* every graph input needs a value: say which flag is missing before anything runs */
    for (int i = 0; rc == 0 && i < fp8run_model_input_count(m); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if (fp8run_model_input(m, i, &v) != FP8RUN_OK) {
            rc = cli_fail_status();
            break;
        }
        int given = 0;
        for (int k = 0; k < a.n_inputs && !given; k++) given = strcmp(a.inputs[k].name, v.name) == 0;
        if (!given) rc = cli_fail("model input '%s' has no value: add --input %s=FILE.npy", v.name, v.name);
    }
    if (rc == 0) {
        /* prepared for the arrays' shapes (and --dim), run on the CPU */
        fp8run_prepare_config pc;
        cli_must(fp8run_prepare_config_init(&pc, sizeof pc));
        pc.dim_names = a.dims.names;
        pc.dim_values = a.dims.values;
        pc.n_dims = a.dims.n;
        pc.input_names = names;
        pc.input_ranks = ranks;
        pc.input_dims = dims;
        pc.n_inputs = a.n_inputs;
        if (fp8run_forward_create(m, &pc, &f) != FP8RUN_OK) rc = cli_fail_status();
    }
    fp8run_model_destroy(m); /* the forward pass has its own copy */
    for (int i = 0; i < a.n_inputs && rc == 0; i++)
        if (fp8run_forward_set_input(f, &a.inputs[i].t) != FP8RUN_OK)
            rc = cli_fail("%s (from '%s')", cli_last_error(), a.inputs[i].file);
    if (rc == 0 && fp8run_forward_run(f) != FP8RUN_OK) rc = cli_fail_status();
    if (rc == 0) rc = cli_make_dirs(a.out_dir);
    if (rc == 0) rc = check_outputs(f, a.out_dir, &a);
    if (rc == 0) rc = write_outputs(f, a.out_dir);
    fp8run_forward_destroy(f);
    free(names);
    free(ranks);
    free(dims);
    free_args(&a);
    return rc;
}
