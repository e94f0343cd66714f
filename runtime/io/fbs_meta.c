/* Checked access to a compiled graph's fp8run.* metadata (fbs_meta.h). */
#include "runtime/io/fbs_meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/option_choices.h"

fr_status fr_fbs_meta_open(const fr_graph *g, const char *what, fr_fbs_meta *m)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->what = what;
    FR_TRY(fr_name_map_new(&m->map));
    for (int i = 0; i < g->n_metadata; i++) {
        const char *k = g->metadata[i].key;
        if (strncmp(k, "fp8run.", 7) != 0) continue;
        if (fr_name_map_get(m->map, k) >= 0)
            return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' appears twice", what, k);
        FR_TRY(fr_name_map_put(m->map, k, i));
        m->n_keys++;
    }
    return FR_OK;
}

void fr_fbs_meta_close(fr_fbs_meta *m)
{
    fr_name_map_free(m->map);
    m->map = NULL;
}

static void vkey(char *key, size_t n, const char *fmt, va_list ap) { vsnprintf(key, n, fmt, ap); }

/* char key[256]: the key the printf-style (fmt, ...) of the enclosing variadic getter names */
#define KEY_FROM_ARGS(key, fmt)                                                                  \
    char key[256];                                                                               \
    do {                                                                                         \
        va_list ap_;                                                                             \
        va_start(ap_, fmt);                                                                      \
        vkey(key, sizeof key, fmt, ap_);                                                         \
        va_end(ap_);                                                                             \
    } while (0)

/* The value of a key (printf-formatted) or NULL; required keys that are absent are an error. */
fr_status fr_fbs_get_str(const fr_fbs_meta *m, int required, const char **out, const char *fmt, ...)
{
    KEY_FROM_ARGS(key, fmt);
    int i = fr_name_map_get(m->map, key);
    *out = i >= 0 ? m->g->metadata[i].value : NULL;
    if (!*out && required)
        return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' is missing", m->what, key);
    return FR_OK;
}

/* An integer in [lo, hi]. */
fr_status fr_fbs_get_int(const fr_fbs_meta *m, int64_t lo, int64_t hi, int64_t *out, const char *fmt, ...)
{
    KEY_FROM_ARGS(key, fmt);
    const char *v;
    FR_TRY(fr_fbs_get_str(m, 1, &v, "%s", key));
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || !v[0] || *end || x < lo || x > hi)
        return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' is malformed ('%.60s'; "
                        "want an integer in [%" PRId64 ", %" PRId64 "])", m->what, key, v, lo, hi);
    *out = x;
    return FR_OK;
}

/* One of `choices`; *out its index. */
fr_status fr_fbs_get_choice(const fr_fbs_meta *m, const char *const *choices, int *out, const char *fmt, ...)
{
    KEY_FROM_ARGS(key, fmt);
    const char *v;
    FR_TRY(fr_fbs_get_str(m, 1, &v, "%s", key));
    for (int i = 0; choices[i]; i++)
        if (strcmp(v, choices[i]) == 0) {
            *out = i;
            return FR_OK;
        }
    return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' is malformed ('%.60s')", m->what, key, v);
}

fr_status fr_fbs_bad(const fr_fbs_meta *m, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s': %s", m->what, key, msg);
}

fr_status fr_fbs_dup(const char *s, char **out)
{
    *out = NULL;
    if (!s) return FR_OK;
    *out = fr_strdup(s, "compiled graph");
    return *out ? FR_OK : FR_ERR_OOM;
}

/* A copy owned by the decoded spec (freed by spec_free). */
fr_status fr_fbs_dup_const(const char *s, const char **out)
{
    char *d;
    FR_TRY(fr_fbs_dup(s, &d));
    *out = d;
    return FR_OK;
}

/* A count: at most the number of fp8run keys (a hostile count must not allocate). */
fr_status fr_fbs_get_count(const fr_fbs_meta *m, int64_t *out, const char *key)
{
    return fr_fbs_get_int(m, 0, m->n_keys, out, "%s", key);
}

const char *const fr_fbs_k_bool[] = {"0", "1", NULL};
const char *const fr_fbs_k_prec[] = {FR_CHOICES_PRECISION NULL};
const char *const fr_fbs_k_recipe[] = {FR_CHOICES_RECIPE NULL};
const char *const fr_fbs_k_format[] = {FR_CHOICES_FP8_FORMAT NULL};
const char *const fr_fbs_k_algo[] = {FR_CHOICES_AMAX_ALGO NULL};
const char *const fr_fbs_k_operand[] = {"x", "w", "dy", NULL};
const char *const fr_fbs_k_fmt8[] = {"e4m3", "e5m2", NULL};
const char *const fr_fbs_k_source[] = {"inline", "compiled", "fused", "tied", NULL};

fr_status fr_fbs_check_format(const fr_fbs_meta *m)
{
    const char *v;
    FR_TRY(fr_fbs_get_str(m, 1, &v, FR_FBS_FORMAT_KEY));
    char want[16];
    snprintf(want, sizeof want, "%d", FR_FBS_FORMAT);
    if (strcmp(v, want) != 0)
        return fr_error(FR_ERR_UNSUPPORTED, "compiled graph '%s': metadata key '%s' is '%.40s'; this fp8run "
                        "reads format %d (recompile the model)", m->what, FR_FBS_FORMAT_KEY, v, FR_FBS_FORMAT);
    return FR_OK;
}

const char *fr_fbs_file_name(const fr_graph *g, const char *what)
{
    return what ? what : g->source_path ? g->source_path : "<memory>";
}

