/* Axis ranges and ticks (plot_axis.h). */
#include "plot_axis.h"

#include <math.h>
#include <stdio.h>

/* The nice step (1, 2 or 5 x 10^k) nearest above span / target. */
static double nice_step(double span, int target)
{
    double raw = span / target, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

void plot_axis_fit(plot_axis *a, double lo, double hi, int log)
{
    a->log = log;
    if (log) {
        if (hi <= lo) lo /= 2, hi *= 2;
        a->lo = pow(10, floor(log10(lo)));
        a->hi = pow(10, ceil(log10(hi)));
        /* within one decade: a tighter range reads better than a full decade of air */
        if (a->hi / a->lo <= 10 && hi / lo < 3) a->lo = lo / 1.2, a->hi = hi * 1.2;
        return;
    }
    if (hi <= lo) {
        double d = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= d, hi += d;
    }
    double step = nice_step(hi - lo, 5);
    a->lo = floor(lo / step) * step;
    a->hi = ceil(hi / step) * step;
}

double plot_axis_map(const plot_axis *a, double v)
{
    double t;
    if (a->log)
        t = v > 0 ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo)) : -0.05;
    else
        t = (v - a->lo) / (a->hi - a->lo);
    if (t < -0.05) t = -0.05;
    if (t > 1.05) t = 1.05;
    return a->px0 + t * (a->px1 - a->px0);
}

int plot_axis_ticks(const plot_axis *a, double *ticks)
{
    int n = 0;
    if (a->log && a->hi / a->lo < 10) { /* less than a decade: linear steps read better */
        double step = nice_step(a->hi - a->lo, 4);
        for (double v = ceil(a->lo / step) * step; v <= a->hi * 1.0001 && n < PLOT_MAX_TICKS; v += step) ticks[n++] = v;
        return n;
    }
    if (a->log) {
        double e0 = floor(log10(a->lo)), e1 = ceil(log10(a->hi));
        int decades = (int)(e1 - e0), every = decades > 10 ? (decades + 9) / 10 : 1;
        static const double sub[] = {1, 2, 5};
        for (double e = e0; e <= e1 && n < PLOT_MAX_TICKS; e += every)
            for (int k = 0; k < (decades <= 2 ? 3 : 1) && n < PLOT_MAX_TICKS; k++) {
                double v = sub[k] * pow(10, e);
                if (v >= a->lo * 0.999 && v <= a->hi * 1.001) ticks[n++] = v;
            }
        return n;
    }
    double step = nice_step(a->hi - a->lo, 5);
    for (double v = ceil(a->lo / step - 1e-9) * step; v <= a->hi + step * 1e-9 && n < PLOT_MAX_TICKS; v += step)
        ticks[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    return n;
}

const char *plot_tick_label(double v, char *buf, size_t n)
{
    double m = fabs(v);
    if (v == 0)
        snprintf(buf, n, "0");
    else if (m >= 1e6 && m < 1e9 && fmod(m, 1e4) == 0)
        snprintf(buf, n, "%gM", v / 1e6);
    else if (m >= 1e4 && m < 1e6 && fmod(m, 100) == 0)
        snprintf(buf, n, "%gk", v / 1e3);
    else if (m >= 1e-3 && m < 1e4)
        snprintf(buf, n, "%.4g", v);
    else
        snprintf(buf, n, "%.2g", v);
    return buf;
}
