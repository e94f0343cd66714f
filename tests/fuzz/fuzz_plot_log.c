/* libFuzzer: the training-log reader of `fp8run plot` (tools/cli/plot_log.c) on arbitrary
 * bytes as one log (and the same bytes as a second run), then the page drawn as SVG into
 * memory (plot_panel.c, plot_axis.c, svg.c): records of any shape, absurd numbers, layer names
 * cut anywhere, invalid UTF-8. The drawn page must be UTF-8 throughout and hold no NaN or
 * infinite coordinate (a finding aborts). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
/* the CLI's reader, compiled into this target from tools/cli/ (CMakeLists.txt), its header found
   through that folder: tests/ do not include tools/ otherwise */
#include <plot_log.h>

/* Valid UTF-8 and no "nan"/"inf" number anywhere in the page. */
static int page_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80) return 0;
        i += k;
    }
    /* numbers are written "%.2f" inside tags, where a NaN or infinity would print as nan / inf;
       text (the labels) is escaped, so every '<' starts a tag and its '>' ends it */
    for (const char *t = memchr(s, '<', n); t; t = memchr(t + 1, '<', n - (size_t)(t + 1 - s))) {
        const char *end = memchr(t, '>', n - (size_t)(t - s));
        if (!end) return 0;
        for (const char *p = t; p + 3 <= end; p++)
            if (!strncmp(p, "nan", 3) || !strncmp(p, "inf", 3)) return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    plot_page pg;
    plot_page_init(&pg, 2);
    char err[600];
    int ok = plot_page_read(&pg, 0, "fuzz\xc3", (const char *)data, size, "fuzz.jsonl", err, sizeof err) == 0 &&
             plot_page_read(&pg, 1, "again", (const char *)data, size, "fuzz.jsonl", err, sizeof err) == 0;
    if (ok) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) abort();
        svg g;
        svg_begin(&g, f, 1240, 600);
        for (int i = 0; i < PLOT_N_PANELS; i++)
            if (plot_panel_has_data(&pg.p[i])) plot_panel_draw(&pg.p[i], &g, 0, 44, 620, 290, pg.xlo, pg.xhi);
        svg_end(&g);
        fclose(f);
        if (!page_ok(text, len)) abort();
        free(text);
    }
    plot_page_free(&pg);
    return 0;
}
