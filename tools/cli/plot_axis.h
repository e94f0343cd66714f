/* A plot axis: a data range mapped onto pixels, linear or logarithmic, with "nice" ticks
 * (1, 2, 5 x 10^k steps; powers of ten on a log axis) and short tick labels. */
#ifndef FP8RUN_TOOLS_PLOT_AXIS_H
#define FP8RUN_TOOLS_PLOT_AXIS_H

#include <stddef.h>

#define PLOT_MAX_TICKS 16

typedef struct plot_axis {
    double lo, hi;   /* the data range shown (after plot_axis_fit: widened to nice bounds) */
    int log;         /* logarithmic (base 10); lo and hi > 0 */
    double px0, px1; /* the pixels of lo and hi (px1 < px0 for a y axis) */
} plot_axis;

/* Set the range to cover [lo, hi] (finite; lo <= hi) with nice ends; a log axis needs lo > 0.
 * An empty range is widened around its value. */
void plot_axis_fit(plot_axis *a, double lo, double hi, int log);
/* The pixel of value v (clamped a little outside the range so a wild value stays drawable). */
double plot_axis_map(const plot_axis *a, double v);
/* The tick values inside the range, ascending; returns how many (<= PLOT_MAX_TICKS). */
int plot_axis_ticks(const plot_axis *a, double *ticks);
/* "0.5", "1200", "12k", "3e-04", "1.5M": short and exact enough for a tick. */
const char *plot_tick_label(double v, char *buf, size_t n);

#endif
