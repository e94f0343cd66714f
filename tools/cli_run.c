/* `fp8run run MODEL --input NAME=FILE.npy ... [--dim NAME=VALUE ...] --output-dir DIR`:
 * prepare the model for the given input shapes, run it on the CPU executor and write every
 * graph output to DIR/<name>.npy. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "graph/onnx_io.h"
#include "runtime/executor.h"
#include "runtime/npy.h"

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
    fr_tensor *t;
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
        fr_tensor_free(a->inputs[i].t);
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

/* mkdir -p */
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
    if (rc == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        rc = cli_fail("'%s' is not a folder", dir);
    free(p);
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

/* bfloat16 / FP8 have no NumPy code: widen to float32, which represents them exactly. */
static fr_status widen_if_needed(const fr_tensor *t, fr_tensor **wide)
{
    *wide = NULL;
    if (fr_npy_descr(t->dtype) || !fr_dtype_is_float(t->dtype)) return FR_OK;
    FR_TRY(fr_tensor_new(FR_F32, t->rank, t->dims, "output as float32", wide));
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ((float *)(*wide)->data)[i] = (float)fr_tensor_get_f64(t, i);
    return FR_OK;
}

static int write_outputs(const fr_exec *e, const char *dir)
{
    int n = fr_exec_n_outputs(e), rc = 0;
    char **used = calloc((size_t)(n ? n : 1), sizeof *used);
    if (!used) return cli_fail("out of memory");
    for (int i = 0; i < n && rc == 0; i++) {
        const char *name = fr_exec_output_name(e, i);
        const fr_tensor *t = fr_exec_output_at(e, i);
        char fname[256], shp[256];
        safe_name(name, used, i, fname, sizeof fname);
        used[i] = strdup(fname);
        size_t plen = strlen(dir) + strlen(fname) + 8;
        char *path = malloc(plen);
        if (!used[i] || !path) {
            free(path);
            rc = cli_fail("out of memory");
            break;
        }
        snprintf(path, plen, "%s/%s.npy", dir, fname);
        fr_tensor *wide = NULL;
        if (widen_if_needed(t, &wide) != FR_OK || fr_npy_save(path, wide ? wide : t) != FR_OK) {
            rc = cli_fail("output '%s': %s", name, fr_last_error());
        } else {
            const fr_tensor *w = wide ? wide : t;
            printf("%s -> %s (%s %s%s)\n", name, path, fr_dtype_name(w->dtype),
                   fr_shape_str(w->rank, w->dims, shp, sizeof shp), wide ? ", widened" : "");
        }
        fr_tensor_free(wide);
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
    fr_graph *g = NULL;
    fr_exec *e = NULL;
    fr_input_shape *shapes = calloc((size_t)(a.n_inputs ? a.n_inputs : 1), sizeof *shapes);
    if (!shapes) rc = cli_fail("out of memory");
    for (int i = 0; i < a.n_inputs && rc == 0; i++) {
        run_input *in = &a.inputs[i];
        if (fr_npy_load(in->file, &in->t) != FR_OK) {
            rc = cli_fail("--input %s: %s", in->name, fr_last_error());
            break;
        }
        shapes[i].name = in->name;
        shapes[i].rank = in->t->rank;
        memcpy(shapes[i].dims, in->t->dims, sizeof shapes[i].dims);
    }
    if (rc == 0 && fr_onnx_load_file(a.model, &g) != FR_OK) rc = cli_fail_status();
    /* every graph input needs a value: say which flag is missing before anything runs */
    for (int i = 0; rc == 0 && i < g->n_inputs; i++) {
        const char *name = g->values[g->inputs[i]].name;
        int given = 0;
        for (int k = 0; k < a.n_inputs && !given; k++) given = strcmp(a.inputs[k].name, name) == 0;
        if (!given) rc = cli_fail("model input '%s' has no value: add --input %s=FILE.npy", name, name);
    }
    if (rc == 0) {
        fr_prepare_options opt;
        fr_prepare_options_default(&opt);
        opt.dims = a.dims.items;
        opt.n_dims = a.dims.n;
        opt.input_shapes = shapes;
        opt.n_input_shapes = a.n_inputs;
        if (fr_prepare_forward(g, &opt, NULL) != FR_OK || fr_exec_new(g, &e) != FR_OK)
            rc = cli_fail_status();
    }
    for (int i = 0; i < a.n_inputs && rc == 0; i++)
        if (fr_exec_set_input(e, a.inputs[i].name, a.inputs[i].t) != FR_OK)
            rc = cli_fail("%s (from '%s')", fr_last_error(), a.inputs[i].file);
    if (rc == 0 && fr_exec_run(e) != FR_OK) rc = cli_fail_status();
    if (rc == 0) rc = make_dirs(a.out_dir);
    if (rc == 0) rc = write_outputs(e, a.out_dir);
    fr_exec_free(e);
    fr_graph_free(g);
    free(shapes);
    free_args(&a);
    return rc;
}
