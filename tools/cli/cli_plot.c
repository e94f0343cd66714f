/* fp8run plot: training logs (--log JSONL, with --log-fp8 records) drawn as one SVG page of
 * charts, several runs overlaid. Reading the records and laying out the page is here; the
 * charts are plot_panel.c, the SVG writer svg.c. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "plot_panel.h"

void cli_plot_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run plot RUN.jsonl [MORE.jsonl ...] -o OUT.svg [--title TEXT]\n"
            "\n"
            "Draws training logs (fp8run train --log FILE.jsonl) as an SVG page: train and\n"
            "validation loss, learning rate, tokens/s, gradient norm, skipped steps (red\n"
            "marks), and with --log-fp8 records each FP8 Linear's amax and range use\n"
            "(amax * scale / fp8 max; above 1 saturates) for its x, w and dy operands.\n"
            "Several logs are overlaid, one color (or dash) per run.\n"
            "\n"
            "options:\n"
            "  -o OUT.svg              the file to write (required)\n"
            "  --title TEXT            the page title (default: the log names)\n"
            "  -h, --help              show this help\n");
}

enum { P_LOSS, P_LR, P_TPS, P_GNORM, P_FP8 /* then amax and range use per operand */ };
#define N_OPERANDS 3
#define N_PANELS (P_FP8 + 2 * N_OPERANDS)
static const char *OPERANDS[N_OPERANDS] = {"x", "w", "dy"};
static const char *PALETTE[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS (int)(sizeof PALETTE / sizeof PALETTE[0])
static const char *DASHES[] = {NULL, "6 3", "2 2", "8 3 2 3"};

typedef struct page {
    plot_panel p[N_PANELS];
    double xlo, xhi;
    int n_runs, n_layers;
    char **layers; /* every FP8 layer seen, for one color per layer */
} page;

/* A series name: the run's label before `what` when several runs are drawn. */
static const char *series_name(const page *pg, const char *run, const char *what, char *buf, size_t n)
{
    if (pg->n_runs > 1)
        snprintf(buf, n, "%s %s", run, what);
    else
        snprintf(buf, n, "%s", what);
    return buf;
}

static int add(page *pg, int panel, const char *name, const char *label, const char *color, const char *dash,
               int style, double x, double y)
{
    plot_series *s = plot_panel_series(&pg->p[panel], name, label, color, dash, style);
    if (!s || plot_series_add(s, x, y)) return cli_fail("out of memory");
    if (x < pg->xlo) pg->xlo = x;
    if (x > pg->xhi) pg->xhi = x;
    return 0;
}

/* A number field; NaN when absent or null (the log writes non-finite values as null). */
static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* "/layers.0/mlp/down_proj/MatMul" -> "layers.0/mlp/down_proj"; a fused group
 * "fused(/l.0/mlp/gate_proj/MatMul,/l.0/mlp/up_proj/MatMul)" -> "l.0/mlp/gate_proj+up_proj". */
static void short_layer(const char *layer, char *buf, size_t n)
{
    size_t o = 0, dir = 0; /* dir: the length of the first name's folder, shared by the group */
    if (strncmp(layer, "fused(", 6) == 0) layer += 6;
    if (*layer == '/') layer++;
    const char *first = layer;
    for (const char *p = layer; *p && *p != ','; p++)
        if (*p == '/' && strncmp(p, "/MatMul", 7)) dir = (size_t)(p + 1 - layer);
    for (const char *p = layer; *p && o + 1 < n; p++) {
        if (strncmp(p, "/MatMul", 7) == 0 && (p[7] == 0 || p[7] == ',' || p[7] == ')')) {
            p += 6;
            continue;
        }
        if (*p == ')') continue;
        if (*p == ',') {
            buf[o++] = '+';
            if (p[1] == '/') p++;
            if (strncmp(p + 1, first, dir) == 0) p += dir;
            continue;
        }
        buf[o++] = *p;
    }
    buf[o] = 0;
}

static int layer_index(page *pg, const char *layer)
{
    for (int i = 0; i < pg->n_layers; i++)
        if (strcmp(pg->layers[i], layer) == 0) return i;
    char **l = realloc(pg->layers, (size_t)(pg->n_layers + 1) * sizeof *l);
    if (!l) return -1;
    pg->layers = l;
    if (!(l[pg->n_layers] = strdup(layer))) return -1;
    return pg->n_layers++;
}

/* A run's series `what` in a scalar chart: named by the run when several are drawn. */
static int add_scalar(page *pg, int panel, const char *run, const char *what, const char *color, const char *dash,
                      int style, double x, double y)
{
    char name[320];
    return add(pg, panel, series_name(pg, run, what, name, sizeof name), NULL, color, dash, style, x, y);
}

static int add_fp8(page *pg, int run, const char *label, double step, json_t *arr)
{
    size_t i;
    json_t *s;
    const char *dash = DASHES[run % 4];
    if (pg->n_runs > 1) /* a legend entry for the run's dash (a series without points) */
        for (int k = 0; k < 2 * N_OPERANDS; k++)
            if (!plot_panel_series(&pg->p[P_FP8 + k], label, label, "#555555", dash, PLOT_LINE))
                return cli_fail("out of memory");
    json_array_foreach(arr, i, s) {
        const char *layer = json_string_value(json_object_get(s, "layer"));
        const char *op = json_string_value(json_object_get(s, "operand"));
        int k = -1;
        for (int j = 0; op && j < N_OPERANDS; j++)
            if (strcmp(op, OPERANDS[j]) == 0) k = j;
        if (!layer || k < 0) continue;
        int li = layer_index(pg, layer);
        if (li < 0) return cli_fail("out of memory");
        char sl[160], name[320];
        short_layer(layer, sl, sizeof sl);
        snprintf(name, sizeof name, "%d %s", run, layer);
        /* one color per Linear, one dash per run; the legend names each Linear once */
        const char *color = PALETTE[li % N_COLORS];
        if (add(pg, P_FP8 + k, name, sl, color, dash, PLOT_LINE, step, num(s, "amax")) ||
            add(pg, P_FP8 + N_OPERANDS + k, name, sl, color, dash, PLOT_LINE, step, num(s, "range_use")))
            return CLI_EXIT_FAIL;
    }
    return 0;
}

static int add_record(page *pg, int run, const char *label, json_t *r)
{
    double step = num(r, "step");
    if (!isfinite(step)) return 0; /* not a step record */
    const char *color = PALETTE[run % N_COLORS];
    json_t *fp8 = json_object_get(r, "fp8");
    if (json_is_array(fp8)) return add_fp8(pg, run, label, step, fp8);
    if (json_object_get(r, "val_loss"))
        return add_scalar(pg, P_LOSS, label, "val", color, "5 3", PLOT_LINE, step, num(r, "val_loss"));
    if (!json_object_get(r, "loss")) return 0;
    int rc = add_scalar(pg, P_LOSS, label, "train", color, NULL, PLOT_LINE, step, num(r, "loss"));
    if (!rc) rc = add_scalar(pg, P_LR, label, "lr", color, NULL, PLOT_LINE, step, num(r, "lr"));
    if (!rc && isfinite(num(r, "tokens_per_s")))
        rc = add_scalar(pg, P_TPS, label, "tokens/s", color, NULL, PLOT_LINE, step, num(r, "tokens_per_s"));
    if (!rc) rc = add_scalar(pg, P_GNORM, label, "grad norm", color, NULL, PLOT_LINE, step, num(r, "grad_norm"));
    if (!rc && json_is_true(json_object_get(r, "skipped")))
        rc = add_scalar(pg, P_LOSS, label, "skipped", "#d62728", NULL, PLOT_EVENTS, step, 0);
    return rc;
}

/* "runs/a.jsonl" -> "a" */
static void run_label(const char *path, char *buf, size_t n)
{
    const char *b = strrchr(path, '/');
    snprintf(buf, n, "%s", b ? b + 1 : path);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf) *dot = 0;
}

static int read_log(page *pg, int run, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail("cannot open %s: %s", path, strerror(errno));
    char label[128], *line = NULL;
    size_t cap = 0;
    run_label(path, label, sizeof label);
    int rc = 0, lineno = 0, records = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        json_error_t err;
        json_t *r = json_loads(line, 0, &err);
        if (!json_is_object(r)) {
            rc = cli_fail("%s:%d: not a JSON record: %s", path, lineno, r ? "not an object" : err.text);
        } else {
            rc = add_record(pg, run, label, r);
            records++;
        }
        json_decref(r);
    }
    free(line);
    fclose(f);
    if (rc == 0 && records == 0) rc = cli_fail("%s has no records (write one with fp8run train --log FILE)", path);
    return rc;
}

static void set_titles(page *pg)
{
    static const char *titles[] = {"loss (train, val dashed; skipped steps marked)", "learning rate", "tokens/s",
                                   "gradient norm"};
    static const int scales[] = {PLOT_AUTO, PLOT_AUTO, PLOT_LINEAR, PLOT_AUTO};
    static char fp8_titles[2 * N_OPERANDS][80];
    for (int i = 0; i < P_FP8; i++) plot_panel_init(&pg->p[i], titles[i], scales[i]);
    for (int k = 0; k < N_OPERANDS; k++) {
        snprintf(fp8_titles[k], sizeof fp8_titles[k], "FP8 amax of %s, per Linear", OPERANDS[k]);
        snprintf(fp8_titles[N_OPERANDS + k], sizeof fp8_titles[0], "FP8 range use of %s (amax*scale/max)",
                 OPERANDS[k]);
        plot_panel_init(&pg->p[P_FP8 + k], fp8_titles[k], PLOT_LOG);
        plot_panel_init(&pg->p[P_FP8 + N_OPERANDS + k], fp8_titles[N_OPERANDS + k], PLOT_LINEAR);
        pg->p[P_FP8 + N_OPERANDS + k].ref = 1.0;
        pg->p[P_FP8 + N_OPERANDS + k].ref_label = "saturates above 1";
    }
}

static int write_page(page *pg, const char *out, const char *title)
{
    const double W = 620, H = 290, TOP = 44;
    int order[N_PANELS], n = 0;
    /* amax and range use of an operand side by side */
    static const int layout[] = {P_LOSS, P_LR, P_TPS, P_GNORM, P_FP8, P_FP8 + 3, P_FP8 + 1, P_FP8 + 4, P_FP8 + 2,
                                 P_FP8 + 5};
    for (int i = 0; i < N_PANELS; i++)
        if (plot_panel_has_data(&pg->p[layout[i]])) order[n++] = layout[i];
    FILE *f = fopen(out, "w");
    if (!f) return cli_fail("cannot write %s: %s", out, strerror(errno));
    svg g;
    svg_begin(&g, f, 2 * W, TOP + H * ((n + 1) / 2) + 10);
    svg_text(&g, 20, 28, 17, "start", "#111111", 0, title);
    for (int i = 0; i < n; i++)
        plot_panel_draw(&pg->p[order[i]], &g, (i % 2) * W, TOP + (i / 2) * H, W, H, pg->xlo, pg->xhi);
    svg_end(&g);
    if (ferror(f) | fclose(f)) return cli_fail("writing %s failed", out);
    return 0;
}

int cli_plot(int argc, char **argv)
{
    const char *out = NULL, *title = NULL;
    const char **logs = calloc((size_t)argc, sizeof *logs);
    int n_logs = 0, rc = 0;
    if (!logs) return cli_fail("out of memory");
    for (int i = 1; i < argc && rc == 0; i++) {
        int r;
        if (cli_is_help(argv[i])) {
            cli_plot_help(stdout);
            free(logs);
            return 0;
        }
        if ((r = cli_option(argc, argv, &i, "plot", "-o", &out)) || (r = cli_option(argc, argv, &i, "plot", "--title", &title))) {
            if (r < 0) rc = CLI_EXIT_USAGE;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = cli_usage("plot", "unknown option '%s'", argv[i]);
        } else {
            logs[n_logs++] = argv[i];
        }
    }
    if (rc == 0 && n_logs == 0) rc = cli_usage("plot", "give at least one log (fp8run train --log FILE.jsonl)");
    if (rc == 0 && !out) rc = cli_usage("plot", "-o OUT.svg is required");
    page pg = {.xlo = INFINITY, .xhi = -INFINITY, .n_runs = n_logs};
    set_titles(&pg);
    for (int i = 0; i < n_logs && rc == 0; i++) rc = read_log(&pg, i, logs[i]);
    if (rc == 0) {
        char deftitle[512] = "fp8run:";
        for (int i = 0; i < n_logs; i++) {
            char l[128];
            run_label(logs[i], l, sizeof l);
            size_t len = strlen(deftitle);
            snprintf(deftitle + len, sizeof deftitle - len, "%s %s", i ? "," : "", l);
        }
        rc = write_page(&pg, out, title ? title : deftitle);
    }
    if (rc == 0) printf("wrote %s\n", out);
    for (int i = 0; i < N_PANELS; i++) plot_panel_free(&pg.p[i]);
    for (int i = 0; i < pg.n_layers; i++) free(pg.layers[i]);
    free(pg.layers);
    free(logs);
    return rc;
}
