/* Drawing one chart (plot_panel.h): frame, grid, ticks, series and legend. */
#include "plot_panel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plot_axis.h"

#define LEGEND_W 215.0
#define LEGEND_MAX 14 /* entries shown; the rest are counted */

/* FNV-1a: the keys are layer and series names, not chosen against us beyond slowing a plot */
static size_t hash_of(const char *k)
{
    size_t h = (size_t)1469598103934665603ULL;
    for (const unsigned char *p = (const unsigned char *)k; *p; p++) h = (h ^ *p) * (size_t)1099511628211ULL;
    return h;
}

int plot_index_get(const plot_index *ix, const char *key)
{
    if (!ix->cap) return -1;
    for (size_t i = hash_of(key) & (ix->cap - 1);; i = (i + 1) & (ix->cap - 1)) {
        if (!ix->key[i]) return -1;
        if (strcmp(ix->key[i], key) == 0) return ix->val[i];
    }
}

int plot_index_put(plot_index *ix, const char *key, int val)
{
    if (2 * (ix->n + 1) > ix->cap) { /* at most half full: short probes */
        size_t cap = ix->cap ? 2 * ix->cap : 64;
        plot_index big = {calloc(cap, sizeof *big.key), calloc(cap, sizeof *big.val), cap, 0};
        if (!big.key || !big.val) {
            free(big.key), free(big.val);
            return -1;
        }
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->key[i]) plot_index_put(&big, ix->key[i], ix->val[i]);
        plot_index_free(ix);
        *ix = big;
    }
    size_t i = hash_of(key) & (ix->cap - 1);
    while (ix->key[i]) i = (i + 1) & (ix->cap - 1);
    ix->key[i] = key;
    ix->val[i] = val;
    ix->n++;
    return 0;
}

void plot_index_free(plot_index *ix)
{
    free(ix->key);
    free(ix->val);
    memset(ix, 0, sizeof *ix);
}

void plot_panel_init(plot_panel *p, const char *title, int scale)
{
    memset(p, 0, sizeof *p);
    p->title = title;
    p->scale = scale;
    p->ref = NAN;
}

plot_series *plot_panel_series(plot_panel *p, const char *name, const char *label, const char *color,
                               const char *dash, int style)
{
    int at = plot_index_get(&p->by_name, name);
    if (at >= 0) return &p->s[at];
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        plot_series *s = realloc(p->s, (size_t)cap * sizeof *s);
        if (!s) return NULL;
        p->s = s, p->cap = cap;
    }
    plot_series *s = &p->s[p->n];
    memset(s, 0, sizeof *s);
    if (!(s->name = strdup(name)) || !(s->label = strdup(label ? label : name)) ||
        plot_index_put(&p->by_name, s->name, p->n)) {
        free(s->name), free(s->label);
        return NULL;
    }
    s->color = color, s->dash = dash, s->style = style;
    p->n++;
    return s;
}

int plot_series_add(plot_series *s, double x, double y)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return -1;
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return -1;
        s->y = ny, s->cap = cap;
    }
    s->x[s->n] = x, s->y[s->n] = y, s->n++;
    return 0;
}

int plot_panel_has_data(const plot_panel *p)
{
    for (int i = 0; i < p->n; i++)
        for (int j = 0; j < p->s[i].n; j++)
            if (p->s[i].style == PLOT_EVENTS || isfinite(p->s[i].y[j])) return 1;
    return 0;
}

/* The y range of the drawn values (and the reference line); returns 0 when there is none. */
static int y_range(const plot_panel *p, double *lo, double *hi, int *all_pos)
{
    *lo = INFINITY, *hi = -INFINITY, *all_pos = 1;
    for (int i = 0; i < p->n; i++) {
        if (p->s[i].style == PLOT_EVENTS) continue;
        for (int j = 0; j < p->s[i].n; j++) {
            double v = p->s[i].y[j];
            if (!isfinite(v)) continue;
            if (v < *lo) *lo = v;
            if (v > *hi) *hi = v;
            if (v <= 0) *all_pos = 0;
        }
    }
    if (isfinite(p->ref)) {
        if (p->ref < *lo) *lo = p->ref;
        if (p->ref > *hi) *hi = p->ref;
        if (p->ref <= 0) *all_pos = 0;
    }
    return isfinite(*lo);
}

static void draw_axes(svg *g, const plot_axis *xa, const plot_axis *ya, double top, double bottom)
{
    double t[PLOT_MAX_TICKS];
    char buf[32];
    int n = plot_axis_ticks(ya, t);
    for (int i = 0; i < n; i++) {
        double py = plot_axis_map(ya, t[i]);
        svg_line(g, xa->px0, py, xa->px1, py, "#e4e4e4", 1, NULL);
        svg_text(g, xa->px0 - 5, py + 4, 11, "end", "#333333", 0, plot_tick_label(t[i], buf, sizeof buf));
    }
    n = plot_axis_ticks(xa, t);
    for (int i = 0; i < n; i++) {
        double px = plot_axis_map(xa, t[i]);
        svg_line(g, px, top, px, bottom, "#f0f0f0", 1, NULL);
        svg_line(g, px, bottom, px, bottom + 4, "#333333", 1, NULL);
        svg_text(g, px, bottom + 16, 11, "middle", "#333333", 0, plot_tick_label(t[i], buf, sizeof buf));
    }
    svg_rect(g, xa->px0, top, xa->px1 - xa->px0, bottom - top, NULL, "#888888");
}

static void draw_series(svg *g, const plot_series *s, const plot_axis *xa, const plot_axis *ya, double bottom)
{
    if (s->style == PLOT_EVENTS) {
        for (int j = 0; j < s->n; j++) svg_triangle(g, plot_axis_map(xa, s->x[j]), bottom - 9, 8, s->color);
        return;
    }
    double *px = malloc((size_t)(s->n ? s->n : 1) * sizeof *px), *py = malloc((size_t)(s->n ? s->n : 1) * sizeof *py);
    if (!px || !py) {
        free(px), free(py);
        return;
    }
    for (int j = 0; j < s->n; j++) {
        int ok = isfinite(s->y[j]) && (!ya->log || s->y[j] > 0);
        px[j] = plot_axis_map(xa, s->x[j]);
        py[j] = ok ? plot_axis_map(ya, s->y[j]) : NAN;
    }
    if (s->style == PLOT_LINE) svg_polyline(g, px, py, s->n, s->color, 1.6, s->dash);
    /* points, and lone line points that a polyline would not show */
    for (int j = 0; j < s->n; j++) {
        int lone = !isfinite(j ? py[j - 1] : NAN) && !isfinite(j + 1 < s->n ? py[j + 1] : NAN);
        if (isfinite(py[j]) && (s->style == PLOT_POINTS || lone)) svg_circle(g, px[j], py[j], 2.8, s->color);
    }
    free(px), free(py);
}

/* Keep the end of a long label (the part that tells layers apart): its last `keep` bytes,
 * moved forward to the start of a UTF-8 character, after "...". */
static void label_tail(const char *label, char *buf, size_t n, size_t keep)
{
    size_t len = strlen(label);
    if (len <= keep + 3) {
        snprintf(buf, n, "%s", label);
        return;
    }
    const char *t = label + len - keep;
    while (*t && ((unsigned char)*t & 0xc0) == 0x80) t++;
    snprintf(buf, n, "...%s", t);
}

static void draw_legend(const plot_panel *p, svg *g, double x, double y)
{
    int shown = 0, entries = 0;
    char buf[64];
    /* one entry per label, first come first shown: a hash of the labels seen, not a scan */
    plot_index seen = {0};
    char *first = calloc((size_t)(p->n ? p->n : 1), 1);
    if (!first) return;
    for (int i = 0; i < p->n; i++)
        if (plot_index_get(&seen, p->s[i].label) < 0) {
            if (plot_index_put(&seen, p->s[i].label, i)) break;
            first[i] = 1;
            entries++;
        }
    plot_index_free(&seen);
    for (int i = 0; i < p->n; i++) {
        if (!first[i]) continue;
        if (shown == LEGEND_MAX) {
            snprintf(buf, sizeof buf, "+ %d more", entries - shown);
            svg_text(g, x + 26, y + 14 * shown + 4, 10.5, "start", "#555555", 0, buf);
            break;
        }
        const plot_series *s = &p->s[i];
        double ly = y + 14 * shown;
        if (s->style == PLOT_LINE) svg_line(g, x, ly, x + 20, ly, s->color, 2, s->dash);
        if (s->style == PLOT_POINTS) svg_circle(g, x + 10, ly, 3, s->color);
        if (s->style == PLOT_EVENTS) svg_triangle(g, x + 10, ly - 4, 8, s->color);
        label_tail(s->label, buf, sizeof buf, 27);
        svg_text(g, x + 26, ly + 4, 10.5, "start", "#222222", 0, buf);
        shown++;
    }
    free(first);
}

void plot_panel_draw(const plot_panel *p, svg *g, double x, double y, double w, double h, double xlo, double xhi)
{
    double top = y + 28, bottom = y + h - 26, left = x + 58, right = x + w - LEGEND_W;
    svg_text(g, left, y + 18, 13.5, "start", "#111111", 0, p->title);
    double lo, hi;
    int all_pos;
    if (!y_range(p, &lo, &hi, &all_pos)) lo = 0, hi = 1, all_pos = 0;
    int log = p->scale == PLOT_LOG ? all_pos : p->scale == PLOT_AUTO ? all_pos && hi / lo >= 30 : 0;
    plot_axis xa = {.px0 = left, .px1 = right}, ya = {.px0 = bottom, .px1 = top};
    plot_axis_fit(&xa, xlo, xhi, 0);
    plot_axis_fit(&ya, lo, hi, log);
    if (log) svg_text(g, right, y + 18, 10.5, "end", "#777777", 0, "log scale");
    draw_axes(g, &xa, &ya, top, bottom);
    svg_text(g, (left + right) / 2, y + h - 1, 10.5, "middle", "#555555", 0, "step");
    if (isfinite(p->ref)) {
        double py = plot_axis_map(&ya, p->ref);
        svg_line(g, left, py, right, py, "#cc0000", 1, "5 4");
        if (p->ref_label) svg_text(g, right - 4, py - 4, 10, "end", "#cc0000", 0, p->ref_label);
    }
    for (int i = 0; i < p->n; i++) draw_series(g, &p->s[i], &xa, &ya, bottom);
    draw_legend(p, g, right + 14, top + 6);
}

void plot_panel_free(plot_panel *p)
{
    for (int i = 0; i < p->n; i++) free(p->s[i].name), free(p->s[i].label), free(p->s[i].x), free(p->s[i].y);
    free(p->s);
    plot_index_free(&p->by_name);
    memset(p, 0, sizeof *p);
}
