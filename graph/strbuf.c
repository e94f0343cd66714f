/* fr_strbuf (strbuf.h): vsnprintf into the free room, grow and retry when it does not fit. */
#include "graph/strbuf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void strbuf_vprintf(fr_strbuf *b, const char *fmt, va_list ap0)
{
    while (!b->oom) {
        va_list ap;
        va_copy(ap, ap0);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        /* checked growth: at least the text and its NUL, doubled */
        if (b->cap > SIZE_MAX / 2 - 64 || (size_t)k > SIZE_MAX / 2 - 64 - b->cap) {
            b->oom = 1;
            return;
        }
        size_t ncap = (b->cap + (size_t)k + 64) * 2;
        char *ns = realloc(b->s, ncap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
}

void fr_strbuf_printf(fr_strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void fr_strbuf_append(fr_strbuf *b, const char *s) { fr_strbuf_printf(b, "%s", s); }

char *fr_strbuf_take(fr_strbuf *b, const char *what)
{
    char *s = b->s;
    const int oom = b->oom;
    *b = (fr_strbuf)FR_STRBUF_INIT;
    if (oom) {
        free(s);
        fr_ignore_status(fr_error(FR_ERR_OOM, "out of memory building %s", what)); /* NULL says it */
        return NULL;
    }
    return s ? s : fr_strdup("", what);
}

void fr_strbuf_free(fr_strbuf *b)
{
    free(b->s);
    *b = (fr_strbuf)FR_STRBUF_INIT;
}
