/* A small SVG writer for the CLI's plots (no dependency): shapes and text in user units, with
 * text escaped for XML. Colors and styles are plain SVG attribute values. */
#ifndef FP8RUN_TOOLS_SVG_H
#define FP8RUN_TOOLS_SVG_H

#include <stdio.h>

typedef struct svg {
    FILE *f;
} svg;

/* The document's opening tag (width x height), a white background and the font. */
void svg_begin(svg *s, FILE *f, double width, double height);
void svg_end(svg *s);
/* dash: NULL for solid, else a stroke-dasharray such as "4 3". */
void svg_line(svg *s, double x1, double y1, double x2, double y2, const char *color, double width, const char *dash);
void svg_rect(svg *s, double x, double y, double w, double h, const char *fill, const char *stroke);
/* A line through n points; NaN points break it into separate pieces. */
void svg_polyline(svg *s, const double *xs, const double *ys, int n, const char *color, double width,
                  const char *dash);
void svg_circle(svg *s, double cx, double cy, double r, const char *fill);
/* A small triangle pointing up with its tip at (x, y). */
void svg_triangle(svg *s, double x, double y, double size, const char *fill);
/* anchor: "start", "middle" or "end"; rotate: degrees about (x, y) (0: none). */
void svg_text(svg *s, double x, double y, double size, const char *anchor, const char *color, double rotate,
              const char *text);
/* Text with XML's special characters escaped, forbidden controls left out and bytes that are
 * no UTF-8 character written as U+FFFD: the document stays well-formed whatever the text. */
void svg_escaped(svg *s, const char *text);

#endif
