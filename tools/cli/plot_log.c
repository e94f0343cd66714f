/* Reading training logs into a page of charts (plot_log.h). */
#include "plot_log.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *OPERANDS[PLOT_N_OPERANDS] = {"x", "w", "dy"};
static const char *PALETTE[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS (int)(sizeof PALETTE / sizeof PALETTE[0])
static const char *DASHES[] = {NULL, "6 3", "2 2", "8 3 2 3"};

/* Drop a character cut short at the end of buf (len bytes). */
static void utf8_trim_end(char *buf, size_t len)
{
    size_t k = len;
    while (k > 0 && ((unsigned char)buf[k - 1] & 0xc0) == 0x80) k--; /* back to the last lead byte */
    if (k == 0 || (unsigned char)buf[k - 1] < 0xc0) return;          /* ASCII last, or no lead */
    unsigned lead = (unsigned char)buf[k - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (len - (k - 1) < need) buf[k - 1] = '\0';
}

void plot_copy_utf8(char *buf, size_t n, const char *s)
{
    if (!n) return;
    size_t len = strlen(s);
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80) len--; /* s[len] starts a character */
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
}

void plot_run_label(const char *path, char *buf, size_t n)
{
    const char *b = strrchr(path, '/');
    plot_copy_utf8(buf, n, b ? b + 1 : path);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf) *dot = 0;
}

void plot_page_init(plot_page *pg, int n_runs)
{
    static const char *titles[] = {"loss (train, val dashed; skipped steps marked)", "learning rate", "tokens/s",
                                   "gradient norm"};
    static const int scales[] = {PLOT_AUTO, PLOT_AUTO, PLOT_LINEAR, PLOT_AUTO};
    static const char *fp8_titles[2 * PLOT_N_OPERANDS] = {
        "FP8 amax of x, per Linear", "FP8 amax of w, per Linear", "FP8 amax of dy, per Linear",
        "FP8 range use of x (amax*scale/max)", "FP8 range use of w (amax*scale/max)",
        "FP8 range use of dy (amax*scale/max)"};
    memset(pg, 0, sizeof *pg);
    pg->xlo = INFINITY;
    pg->xhi = -INFINITY;
    pg->n_runs = n_runs;
    for (int i = 0; i < P_FP8; i++) plot_panel_init(&pg->p[i], titles[i], scales[i]);
    for (int k = 0; k < PLOT_N_OPERANDS; k++) {
        plot_panel_init(&pg->p[P_FP8 + k], fp8_titles[k], PLOT_LOG);
        plot_panel_init(&pg->p[P_FP8 + PLOT_N_OPERANDS + k], fp8_titles[PLOT_N_OPERANDS + k], PLOT_LINEAR);
        pg->p[P_FP8 + PLOT_N_OPERANDS + k].ref = 1.0;
        pg->p[P_FP8 + PLOT_N_OPERANDS + k].ref_label = "saturates above 1";
    }
}

void plot_page_free(plot_page *pg)
{
    for (int i = 0; i < PLOT_N_PANELS; i++) plot_panel_free(&pg->p[i]);
    plot_index_free(&pg->layer_ix);
    for (int i = 0; i < pg->n_layers; i++) free(pg->layers[i]);
    free(pg->layers);
    pg->layers = NULL;
    pg->n_layers = 0;
}

/* A series name: the run's label before `what` when several runs are drawn. */
static const char *series_name(const plot_page *pg, const char *run, const char *what, char *buf, size_t n)
{
    if (pg->n_runs > 1)
        snprintf(buf, n, "%s %s", run, what);
    else
        snprintf(buf, n, "%s", what);
    return buf;
}

/* One point; a step or value no axis can place is dropped and counted (null values, NaN
 * here, stay: they are the gaps the log records). -1 when out of memory. */
static int add(plot_page *pg, int panel, const char *name, const char *label, const char *color, const char *dash,
               int style, double x, double y)
{
    if (!(fabs(x) <= PLOT_MAX_STEP) || fabs(y) > PLOT_MAX_VALUE) {
        pg->dropped++;
        return 0;
    }
    plot_series *s = plot_panel_series(&pg->p[panel], name, label, color, dash, style);
    if (!s || plot_series_add(s, x, y)) return -1;
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
 * "fused(/l.0/mlp/gate_proj/MatMul,/l.0/mlp/up_proj/MatMul)" -> "l.0/mlp/gate_proj+up_proj".
 * Cut on a character boundary when it does not fit. */
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
    if (o + 1 >= n) utf8_trim_end(buf, o);
}

static int layer_index(plot_page *pg, const char *layer)
{
    int i = plot_index_get(&pg->layer_ix, layer);
    if (i >= 0) return i;
    char **l = pg->n_layers % 64 ? pg->layers : realloc(pg->layers, (size_t)(pg->n_layers + 64) * sizeof *l);
    if (!l) return -1;
    pg->layers = l;
    if (!(l[pg->n_layers] = strdup(layer))) return -1;
    if (plot_index_put(&pg->layer_ix, l[pg->n_layers], pg->n_layers)) {
        free(l[pg->n_layers]);
        return -1;
    }
    return pg->n_layers++;
}

/* A run's series `what` in a scalar chart: named by the run when several are drawn. */
static int add_scalar(plot_page *pg, int panel, const char *run, const char *what, const char *color,
                      const char *dash, int style, double x, double y)
{
    char name[320];
    return add(pg, panel, series_name(pg, run, what, name, sizeof name), NULL, color, dash, style, x, y);
}

static int add_fp8(plot_page *pg, int run, const char *label, double step, json_t *arr)
{
    size_t i;
    json_t *s;
    const char *dash = DASHES[run % 4];
    if (pg->n_runs > 1) /* a legend entry for the run's dash (a series without points) */
        for (int k = 0; k < 2 * PLOT_N_OPERANDS; k++)
            if (!plot_panel_series(&pg->p[P_FP8 + k], label, label, "#555555", dash, PLOT_LINE)) return -1;
    json_array_foreach(arr, i, s) {
        const char *layer = json_string_value(json_object_get(s, "layer"));
        const char *op = json_string_value(json_object_get(s, "operand"));
        int k = -1;
        for (int j = 0; op && j < PLOT_N_OPERANDS; j++)
            if (strcmp(op, OPERANDS[j]) == 0) k = j;
        if (!layer || k < 0) continue;
        int li = layer_index(pg, layer);
        if (li < 0) return -1;
        char sl[160], name[320];
        short_layer(layer, sl, sizeof sl);
        snprintf(name, sizeof name, "%d %s", run, layer);
        if (strlen(layer) + 12 >= sizeof name) /* too long to be its own key: its index is */
            snprintf(name, sizeof name, "%d #%d", run, li);
        /* one color per Linear, one dash per run; the legend names each Linear once */
        const char *color = PALETTE[li % N_COLORS];
        if (add(pg, P_FP8 + k, name, sl, color, dash, PLOT_LINE, step, num(s, "amax")) ||
            add(pg, P_FP8 + PLOT_N_OPERANDS + k, name, sl, color, dash, PLOT_LINE, step, num(s, "range_use")))
            return -1;
    }
    return 0;
}

static int add_record(plot_page *pg, int run, const char *label, json_t *r)
{
    double step = num(r, "step");
    if (isnan(step)) return 0; /* not a step record */
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

int plot_page_read(plot_page *pg, int run, const char *label, const char *data, size_t len, const char *path,
                   char *err, size_t errlen)
{
    int lineno = 0, records = 0;
    for (size_t at = 0; at < len;) {
        const char *line = data + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + (nl != NULL);
        lineno++;
        size_t blank = 0;
        while (blank < n && strchr(" \t\r", line[blank])) blank++;
        if (blank == n) continue;
        json_error_t je;
        /* JSON_DISALLOW_NULL is not wanted (null is a gap); a NUL byte in a line is refused */
        json_t *r = json_loadb(line, n, 0, &je);
        if (!json_is_object(r)) {
            snprintf(err, errlen, "%s:%d: not a JSON record: %s", path, lineno, r ? "not an object" : je.text);
            json_decref(r);
            return -1;
        }
        int rc = add_record(pg, run, label, r);
        json_decref(r);
        if (rc) {
            snprintf(err, errlen, "%s:%d: out of memory", path, lineno);
            return -1;
        }
        records++;
    }
    if (records == 0) {
        snprintf(err, errlen, "%s has no records (write one with fp8run train --log FILE)", path);
        return -1;
    }
    return 0;
}
