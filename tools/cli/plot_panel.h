/* One chart of a plot: a title, a y axis (linear or log, chosen from the data), a shared step
 * axis, series drawn as lines, markers or step events, and a legend on the right. */
#ifndef FP8RUN_TOOLS_PLOT_PANEL_H
#define FP8RUN_TOOLS_PLOT_PANEL_H

#include "svg.h"

enum plot_style { PLOT_LINE, PLOT_POINTS, PLOT_EVENTS /* x only: marks on the panel's bottom edge */ };
enum plot_scale { PLOT_AUTO, PLOT_LINEAR, PLOT_LOG };

/* A hash index of strings (borrowed: they must outlive it) to ints. */
typedef struct plot_index {
    const char **key;
    int *val;
    size_t cap, n;
} plot_index;
/* The value of key, -1 when absent. */
int plot_index_get(const plot_index *ix, const char *key);
/* Add key (not present yet); 0, or -1 when out of memory. */
int plot_index_put(plot_index *ix, const char *key, int val);
void plot_index_free(plot_index *ix);

typedef struct plot_series {
    char *name;  /* the key */
    char *label; /* the legend's text; series with the same label share one legend entry */
    const char *color;
    const char *dash; /* NULL: solid */
    int style;
    double *x, *y;
    int n, cap;
} plot_series;

typedef struct plot_panel {
    const char *title;
    int scale;     /* enum plot_scale; AUTO: log when every value is > 0 and they span >= 30x */
    double ref;    /* a dashed reference line at this y (NaN: none) */
    const char *ref_label;
    plot_series *s;
    int n, cap;
    plot_index by_name; /* series name -> index in s */
} plot_panel;

void plot_panel_init(plot_panel *p, const char *title, int scale);
/* The series named `name` (created, with this legend label (NULL: the name), color, dash and
 * style, when new); NULL when out of memory. */
plot_series *plot_panel_series(plot_panel *p, const char *name, const char *label, const char *color,
                               const char *dash, int style);
/* Append a point (non-finite y values are kept as gaps); 0, or -1 when out of memory. */
int plot_series_add(plot_series *s, double x, double y);
/* Any point to draw. */
int plot_panel_has_data(const plot_panel *p);
/* Draw into the box (x, y, w, h) with the step axis [xlo, xhi]. */
void plot_panel_draw(const plot_panel *p, svg *g, double x, double y, double w, double h, double xlo, double xhi);
void plot_panel_free(plot_panel *p);

#endif
