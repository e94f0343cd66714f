/* The SVG writer (svg.h). Numbers are written with two decimals: enough for pixels, small files. */
#include "svg.h"

#include <math.h>

void svg_begin(svg *s, FILE *f, double width, double height)
{
    s->f = f;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            width, height, width, height);
    svg_rect(s, 0, 0, width, height, "#ffffff", NULL);
}

void svg_end(svg *s) { fprintf(s->f, "</svg>\n"); }

static void stroke(svg *s, const char *color, double width, const char *dash)
{
    fprintf(s->f, " fill=\"none\" stroke=\"%s\" stroke-width=\"%.2f\"", color, width);
    if (dash) fprintf(s->f, " stroke-dasharray=\"%s\"", dash);
}

void svg_line(svg *s, double x1, double y1, double x2, double y2, const char *color, double width, const char *dash)
{
    fprintf(s->f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", x1, y1, x2, y2);
    stroke(s, color, width, dash);
    fprintf(s->f, "/>\n");
}

void svg_rect(svg *s, double x, double y, double w, double h, const char *fill, const char *stroke_color)
{
    fprintf(s->f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"", x, y, w, h,
            fill ? fill : "none");
    if (stroke_color) fprintf(s->f, " stroke=\"%s\"", stroke_color);
    fprintf(s->f, "/>\n");
}

void svg_polyline(svg *s, const double *xs, const double *ys, int n, const char *color, double width,
                  const char *dash)
{
    int open = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(xs[i]) || !isfinite(ys[i])) {
            if (open) {
                fprintf(s->f, "\"");
                stroke(s, color, width, dash);
                fprintf(s->f, " stroke-linejoin=\"round\"/>\n");
            }
            open = 0;
            continue;
        }
        fprintf(s->f, open ? " %.2f,%.2f" : "<polyline points=\"%.2f,%.2f", xs[i], ys[i]);
        open = 1;
    }
    if (open) {
        fprintf(s->f, "\"");
        stroke(s, color, width, dash);
        fprintf(s->f, " stroke-linejoin=\"round\"/>\n");
    }
}

void svg_circle(svg *s, double cx, double cy, double r, const char *fill)
{
    fprintf(s->f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"%s\"/>\n", cx, cy, r, fill);
}

void svg_triangle(svg *s, double x, double y, double size, const char *fill)
{
    fprintf(s->f, "<polygon points=\"%.2f,%.2f %.2f,%.2f %.2f,%.2f\" fill=\"%s\"/>\n", x, y, x - size / 2,
            y + size, x + size / 2, y + size, fill);
}

/* The length of the valid UTF-8 character at p (1-4), or 0 when p starts none: a stray or
 * missing continuation byte, an overlong form, a surrogate, beyond U+10FFFF, or U+FFFE/U+FFFF
 * (which XML does not allow either). */
static int utf8_char(const unsigned char *p)
{
    unsigned c = p[0];
    if (c < 0x80) return 1;
    int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0; /* also stops at the NUL of a cut string */
    if (n == 3) {
        unsigned cp = (c & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
        if (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff) return 0;
    }
    if (n == 4) {
        unsigned cp = (c & 0x07u) << 18 | (p[1] & 0x3fu) << 12;
        if (cp < 0x10000 || cp > 0x10ffff) return 0;
    }
    return n;
}

void svg_escaped(svg *s, const char *text)
{
    /* the document must stay well-formed XML whatever the text: markup escaped, controls XML
     * forbids left out, and bytes that are no UTF-8 character (a label cut in the middle of one,
     * a log in another encoding) shown as U+FFFD */
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = utf8_char(p);
        if (n == 0) {
            fputs("\xef\xbf\xbd", s->f);
            p++;
            continue;
        }
        switch (*p) {
        case '<': fputs("&lt;", s->f); break;
        case '>': fputs("&gt;", s->f); break;
        case '&': fputs("&amp;", s->f); break;
        case '"': fputs("&quot;", s->f); break;
        default:
            if (n > 1 || *p >= 0x20 || *p == '\t') fwrite(p, 1, (size_t)n, s->f);
        }
        p += n;
    }
}

void svg_text(svg *s, double x, double y, double size, const char *anchor, const char *color, double rotate,
              const char *text)
{
    fprintf(s->f, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" text-anchor=\"%s\" fill=\"%s\"", x, y, size, anchor,
            color);
    if (rotate != 0) fprintf(s->f, " transform=\"rotate(%.1f %.2f %.2f)\"", rotate, x, y);
    fprintf(s->f, ">");
    svg_escaped(s, text);
    fprintf(s->f, "</text>\n");
}
