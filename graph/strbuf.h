/* A growable string for text the library assembles piece by piece (reports, names, JSON).
 * Appends never fail loudly: an allocation failure sets `oom` and later appends do nothing, so a
 * builder is written straight through and checked once at the end (fr_strbuf_take). Base layer:
 * depends on status.h only. */
#ifndef FR_STRBUF_H
#define FR_STRBUF_H

#include <stddef.h>

#include "graph/status.h"

typedef struct fr_strbuf {
    char *s; /* NUL-terminated once anything was appended; NULL before */
    size_t len, cap;
    int oom; /* an append failed: the text is incomplete */
} fr_strbuf;

#define FR_STRBUF_INIT {NULL, 0, 0, 0}

void fr_strbuf_append(fr_strbuf *b, const char *s);
void fr_strbuf_printf(fr_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The text, now owned by the caller ("" when nothing was appended); NULL with FR_ERR_OOM
 * recorded ("out of memory building <what>") when an append failed. Leaves b empty. */
char *fr_strbuf_take(fr_strbuf *b, const char *what);

/* Drop the text (after an error elsewhere); b is empty again. */
void fr_strbuf_free(fr_strbuf *b);

#endif
