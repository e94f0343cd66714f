/* Per-thread last-error storage and checked allocation. */
#include "graph/status.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FR_ERRBUF 2048
static _Thread_local char fr_errbuf[FR_ERRBUF];

fr_status fr_error(fr_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fr_errbuf, sizeof fr_errbuf, fmt, ap);
    va_end(ap);
    return st;
}

fr_status fr_error_context(fr_status st, const char *fmt, ...)
{
    char old[FR_ERRBUF];
    memcpy(old, fr_errbuf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(fr_errbuf, sizeof fr_errbuf, fmt, ap);
    va_end(ap);
    if (k >= 0 && (size_t)k + 3 < sizeof fr_errbuf) {
        size_t room = sizeof fr_errbuf - (size_t)k;
        fr_errbuf[k] = ':';
        fr_errbuf[k + 1] = ' ';
        size_t len = strlen(old);
        if (len > room - 3) len = room - 3;
        memcpy(fr_errbuf + k + 2, old, len);
        fr_errbuf[k + 2 + len] = '\0';
    }
    return st;
}

const char *fr_last_error(void) { return fr_errbuf; }
void fr_clear_error(void) { fr_errbuf[0] = '\0'; }

const char *fr_status_name(fr_status st)
{
    switch (st) {
    case FR_OK: return "ok";
    case FR_ERR_INVALID_ARG: return "invalid argument";
    case FR_ERR_IO: return "i/o error";
    case FR_ERR_PARSE: return "parse error";
    case FR_ERR_UNSUPPORTED: return "unsupported";
    case FR_ERR_SHAPE: return "shape error";
    case FR_ERR_OOM: return "out of memory";
    case FR_ERR_RANGE: return "out of range";
    case FR_ERR_GRAPH: return "invalid graph";
    case FR_ERR_NUMERIC: return "numeric error";
    case FR_ERR_DEVICE: return "device error";
    case FR_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

int fr_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* The allocation helpers answer NULL on failure: the message is what fr_error is called for, the
 * status has nowhere to go (the caller returns FR_ERR_OOM itself). */
void *fr_malloc(size_t n, const char *what)
{
    void *p = malloc(n ? n : 1);
    if (!p) fr_ignore_status(fr_error(FR_ERR_OOM, "out of memory allocating %zu bytes for %s", n, what));
    return p;
}

void *fr_calloc(size_t count, size_t size, const char *what)
{
    size_t n;
    if (!fr_mul_size(count, size, &n)) {
        fr_ignore_status(fr_error(FR_ERR_OOM, "size overflow allocating %zu x %zu bytes for %s", count, size, what));
        return NULL;
    }
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fr_ignore_status(fr_error(FR_ERR_OOM, "out of memory allocating %zu bytes for %s", n, what));
    return p;
}

void *fr_realloc_array(void *p, size_t count, size_t size, const char *what)
{
    size_t n;
    if (!fr_mul_size(count, size, &n)) {
        fr_ignore_status(fr_error(FR_ERR_OOM, "size overflow allocating %zu x %zu bytes for %s", count, size, what));
        return NULL;
    }
    void *q = realloc(p, n ? n : 1);
    if (!q) fr_ignore_status(fr_error(FR_ERR_OOM, "out of memory allocating %zu bytes for %s", n, what));
    return q;
}

char *fr_strdup(const char *s, const char *what)
{
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *p = fr_malloc(n, what);
    if (p) memcpy(p, s, n);
    return p;
}
