/* Reading compiled graph files (.fbs; the layout is described in fbs.h). Everything in the
 * metadata is checked before use: a .fbs is hostile input like any model file. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/base64.h"
#include "graph/name_map.h"
#include "graph/onnx_io.h"
#include "passes/pipeline.h"
#include "runtime/fbs.h"
#include "runtime/option_choices.h"
#include "runtime/trainer.h"

/* ---- metadata lookup ---- */

typedef struct meta {
    const fr_graph *g;
    const char *what;   /* the file, for messages */
    fr_name_map *map;   /* fp8run.* key -> metadata index */
    int n_keys;
} meta;

static fr_status meta_open(const fr_graph *g, const char *what, meta *m)
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

static void meta_close(meta *m)
{
    fr_name_map_free(m->map);
    m->map = NULL;
}

static void vkey(char *key, size_t n, const char *fmt, va_list ap) { vsnprintf(key, n, fmt, ap); }

/* The value of a key (printf-formatted) or NULL; required keys that are absent are an error. */
static fr_status m_str(const meta *m, int required, const char **out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fr_status m_str(const meta *m, int required, const char **out, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(key, sizeof key, fmt, ap);
    va_end(ap);
    int i = fr_name_map_get(m->map, key);
    *out = i >= 0 ? m->g->metadata[i].value : NULL;
    if (!*out && required)
        return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' is missing", m->what, key);
    return FR_OK;
}

/* An integer in [lo, hi]. */
static fr_status m_int(const meta *m, int64_t lo, int64_t hi, int64_t *out, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static fr_status m_int(const meta *m, int64_t lo, int64_t hi, int64_t *out, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(key, sizeof key, fmt, ap);
    va_end(ap);
    const char *v;
    FR_TRY(m_str(m, 1, &v, "%s", key));
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
static fr_status m_choice(const meta *m, const char *const *choices, int *out, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fr_status m_choice(const meta *m, const char *const *choices, int *out, const char *fmt, ...)
{
    char key[256];
    va_list ap;
    va_start(ap, fmt);
    vkey(key, sizeof key, fmt, ap);
    va_end(ap);
    const char *v;
    FR_TRY(m_str(m, 1, &v, "%s", key));
    for (int i = 0; choices[i]; i++)
        if (strcmp(v, choices[i]) == 0) {
            *out = i;
            return FR_OK;
        }
    return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s' is malformed ('%.60s')", m->what, key, v);
}

static fr_status bad(const meta *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static fr_status bad(const meta *m, const char *key, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fr_error(FR_ERR_PARSE, "compiled graph '%s': metadata key '%s': %s", m->what, key, msg);
}

static fr_status dup_to(const char *s, char **out)
{
    *out = NULL;
    if (!s) return FR_OK;
    *out = fr_strdup(s, "compiled graph");
    return *out ? FR_OK : FR_ERR_OOM;
}

/* A copy owned by the decoded spec (freed by spec_free). */
static fr_status dup_const(const char *s, const char **out)
{
    char *d;
    FR_TRY(dup_to(s, &d));
    *out = d;
    return FR_OK;
}

/* A count: at most the number of fp8run keys (a hostile count must not allocate). */
static fr_status m_count(const meta *m, int64_t *out, const char *key)
{
    return m_int(m, 0, m->n_keys, out, "%s", key);
}

static const char *const k_bool[] = {"0", "1", NULL};
static const char *const k_prec[] = {FR_CHOICES_PRECISION NULL};
static const char *const k_recipe[] = {FR_CHOICES_RECIPE NULL};
static const char *const k_format[] = {FR_CHOICES_FP8_FORMAT NULL};
static const char *const k_algo[] = {FR_CHOICES_AMAX_ALGO NULL};
static const char *const k_operand[] = {"x", "w", "dy", NULL};
static const char *const k_fmt8[] = {"e4m3", "e5m2", NULL};
static const char *const k_source[] = {"inline", "compiled", "fused", "tied", NULL};

/* ---- format, shape, options ---- */

static fr_status check_format(const meta *m)
{
    const char *v;
    FR_TRY(m_str(m, 1, &v, FR_FBS_FORMAT_KEY));
    char want[16];
    snprintf(want, sizeof want, "%d", FR_FBS_FORMAT);
    if (strcmp(v, want) != 0)
        return fr_error(FR_ERR_UNSUPPORTED, "compiled graph '%s': metadata key '%s' is '%.40s'; this fp8run "
                        "reads format %d (recompile the model)", m->what, FR_FBS_FORMAT_KEY, v, FR_FBS_FORMAT);
    return FR_OK;
}

int fr_fbs_is_compiled(const fr_graph *g)
{
    for (int i = 0; g && i < g->n_metadata; i++)
        if (strcmp(g->metadata[i].key, FR_FBS_FORMAT_KEY) == 0) return 1;
    return 0;
}

static const char *file_name(const fr_graph *g, const char *what)
{
    return what ? what : g->source_path ? g->source_path : "<memory>";
}

fr_status fr_fbs_shape(const fr_graph *g, int64_t *batch, int64_t *seq)
{
    meta m;
    fr_status st = meta_open(g, file_name(g, NULL), &m);
    if (st == FR_OK) st = check_format(&m);
    if (st == FR_OK) st = m_int(&m, 1, INT32_MAX, batch, "fp8run.batch");
    if (st == FR_OK) st = m_int(&m, 1, INT32_MAX, seq, "fp8run.seq");
    meta_close(&m);
    return st;
}

static fr_status read_spec(const meta *m, fr_fbs_spec *s)
{
    const char *v;
    int k;
    int64_t x;
    FR_TRY(m_int(m, 1, INT32_MAX, &s->batch, "fp8run.batch"));
    FR_TRY(m_int(m, 1, INT32_MAX, &s->seq, "fp8run.seq"));
    FR_TRY(m_str(m, 1, &v, "fp8run.tokens_input"));
    FR_TRY(dup_const(v, &s->tokens_input));
    fr_fp8_options_default(&s->fp8);
    FR_TRY(m_choice(m, k_prec, &k, "fp8run.option.precision"));
    FR_TRY(dup_to(k_prec[k], &s->s_precision));
    FR_TRY(m_choice(m, k_recipe, &k, "fp8run.option.recipe"));
    FR_TRY(dup_to(k_recipe[k], &s->s_recipe));
    FR_TRY(m_choice(m, k_format, &k, "fp8run.option.fp8_format"));
    FR_TRY(dup_to(k_format[k], &s->s_format));
    FR_TRY(m_str(m, 0, &v, "fp8run.option.fp8_exclude"));
    FR_TRY(dup_to(v, &s->s_exclude));
    s->fp8.precision = s->s_precision;
    s->fp8.recipe = s->s_recipe;
    s->fp8.fp8_format = s->s_format;
    s->fp8.fp8_exclude = s->s_exclude;
    FR_TRY(m_int(m, 0, 1000000, &x, "fp8run.option.bf16_boundary"));
    s->fp8.bf16_boundary = (int)x;
    FR_TRY(m_choice(m, k_bool, &s->fp8.fuse, "fp8run.option.fuse"));
    FR_TRY(m_int(m, 1, 4096, &x, "fp8run.option.pad_multiple"));
    s->fp8.pad_multiple = (int)x;
    FR_TRY(m_int(m, -64, 64, &x, "fp8run.option.margin"));
    s->fp8.margin = (int)x;
    FR_TRY(m_int(m, 1, 1 << 24, &x, "fp8run.option.amax_history"));
    s->fp8.amax_history_len = (int)x;
    FR_TRY(m_choice(m, k_algo, &k, "fp8run.option.amax_algo"));
    s->fp8.amax_algo = k ? FR_AMAX_MOST_RECENT : FR_AMAX_MAX;
    FR_TRY(m_int(m, 1, 1000000000, &x, "fp8run.option.interval"));
    s->fp8.interval = (int)x;
    FR_TRY(m_str(m, 0, &v, "fp8run.option.logits_output"));
    FR_TRY(dup_const(v, &s->logits_output));
    FR_TRY(m_str(m, 0, &v, "fp8run.option.loss_output"));
    FR_TRY(dup_const(v, &s->loss_output));
    FR_TRY(m_str(m, 0, &v, "fp8run.option.train"));
    FR_TRY(dup_const(v, &s->train_regex));
    FR_TRY(m_str(m, 0, &v, "fp8run.option.freeze"));
    FR_TRY(dup_const(v, &s->freeze_regex));
    int64_t nd;
    FR_TRY(m_count(m, &nd, "fp8run.dims"));
    if (nd > 0) {
        s->dims = fr_calloc((size_t)nd, sizeof *s->dims, "compiled graph dims");
        if (!s->dims) return FR_ERR_OOM;
    }
    for (int i = 0; i < nd; i++) {
        char *name;
        FR_TRY(m_str(m, 1, &v, "fp8run.dim.%d.name", i));
        FR_TRY(dup_to(v, &name));
        s->dims[s->n_dims].name = name;
        FR_TRY(m_int(m, 0, INT64_MAX, &s->dims[s->n_dims++].value, "fp8run.dim.%d.value", i));
    }
    return FR_OK;
}

static void spec_free(fr_fbs_spec *s)
{
    free((char *)s->tokens_input);
    free((char *)s->logits_output);
    free((char *)s->loss_output);
    free((char *)s->train_regex);
    free((char *)s->freeze_regex);
    for (int i = 0; i < s->n_dims; i++) free((char *)s->dims[i].name);
    free(s->dims);
    free(s->ties);
    free(s->s_precision);
    free(s->s_recipe);
    free(s->s_format);
    free(s->s_exclude);
    memset(s, 0, sizeof *s);
}

/* ---- the fused table ---- */

void fr_fbs_fused_free(fr_fp8_fused *fused, int n)
{
    for (int i = 0; fused && i < n; i++) {
        for (int j = 0; j < fused[i].n_slices; j++) free(fused[i].slices[j].name);
        free(fused[i].slices);
        free(fused[i].name);
    }
    free(fused);
}

/* Parse the table and check it against the fused parameters of g (value ids from g). */
static fr_status read_fused(const meta *m, const fr_graph *g, fr_fp8_fused **out, int *n_out)
{
    int64_t n;
    *out = NULL;
    *n_out = 0;
    FR_TRY(m_count(m, &n, "fp8run.fused"));
    if (n == 0) return FR_OK;
    fr_fp8_fused *fs = fr_calloc((size_t)n, sizeof *fs, "compiled graph fused table");
    if (!fs) return FR_ERR_OOM;
    *out = fs;
    for (int i = 0; i < n; i++) {
        fr_fp8_fused *f = &fs[(*n_out)++];
        const char *v;
        int64_t x, ns;
        char key[128];
        f->value = -1;
        FR_TRY(m_str(m, 1, &v, "fp8run.fused.%d.name", i));
        FR_TRY(dup_to(v, &f->name));
        FR_TRY(m_choice(m, k_bool, &f->is_bias, "fp8run.fused.%d.is_bias", i));
        FR_TRY(m_choice(m, k_bool, &f->transB, "fp8run.fused.%d.transB", i));
        FR_TRY(m_int(m, f->is_bias ? 0 : 1, f->is_bias ? 0 : INT32_MAX, &x, "fp8run.fused.%d.K", i));
        f->K = x;
        FR_TRY(m_int(m, 1, m->n_keys, &ns, "fp8run.fused.%d.slices", i));
        f->slices = fr_calloc((size_t)ns, sizeof *f->slices, "compiled graph fused table");
        if (!f->slices) return FR_ERR_OOM;
        int64_t off = 0;
        for (int j = 0; j < ns; j++) {
            fr_fp8_slice *s = &f->slices[f->n_slices++];
            s->value = -1;
            s->is_bias = f->is_bias;
            FR_TRY(m_str(m, 1, &v, "fp8run.fused.%d.slice.%d.name", i, j));
            FR_TRY(dup_to(v, &s->name));
            FR_TRY(m_int(m, 0, INT32_MAX, &s->offset, "fp8run.fused.%d.slice.%d.offset", i, j));
            FR_TRY(m_int(m, 1, INT32_MAX, &s->size, "fp8run.fused.%d.slice.%d.size", i, j));
            FR_TRY(m_choice(m, k_bool, &s->transB, "fp8run.fused.%d.slice.%d.transB", i, j));
            FR_TRY(m_int(m, 1, 2, &x, "fp8run.fused.%d.slice.%d.rank", i, j));
            s->rank = (int)x;
            FR_TRY(m_str(m, 1, &v, "fp8run.fused.%d.slice.%d.dims", i, j));
            snprintf(key, sizeof key, "fp8run.fused.%d.slice.%d.dims", i, j);
            long long d0 = -1, d1 = -1;
            int used = 0;
            int got = s->rank == 2 ? sscanf(v, "%lld,%lld%n", &d0, &d1, &used) : sscanf(v, "%lld%n", &d0, &used);
            if (got != s->rank || v[used] || d0 < 0 || (s->rank == 2 && d1 < 0))
                return bad(m, key, "'%.60s' is not %d dims", v, s->rank);
            s->dims[0] = d0;
            s->dims[1] = s->rank == 2 ? d1 : 0;
            /* the slice must be where the previous one ended, with its original's shape */
            int ok = s->offset == off;
            if (f->is_bias)
                ok = ok && !s->transB && ((s->rank == 1 && d0 == s->size) || (s->rank == 2 && d0 == 1 && d1 == s->size));
            else
                ok = ok && s->rank == 2 && (s->transB ? d0 == s->size && d1 == f->K : d0 == f->K && d1 == s->size);
            if (!ok) return bad(m, key, "slice '%s' (offset %" PRId64 ", size %" PRId64 ") does not fit fused "
                                "parameter '%s'", s->name, s->offset, s->size, f->name);
            off += s->size;
        }
        /* the fused parameter itself: a float32 initializer of the concatenated shape */
        snprintf(key, sizeof key, "fp8run.fused.%d.name", i);
        int vid = fr_graph_find_value(g, f->name);
        const fr_tensor *t = vid >= 0 ? g->values[vid].constant : NULL;
        int ok = t && t->dtype == FR_F32 && (g->values[vid].flags & FR_VAL_INITIALIZER);
        if (ok && f->is_bias) ok = t->rank == 1 && t->dims[0] == off;
        else if (ok) ok = t->rank == 2 && (f->transB ? t->dims[0] == off && t->dims[1] == f->K
                                                     : t->dims[0] == f->K && t->dims[1] == off);
        if (!ok) return bad(m, key, "'%s' is not a float32 initializer of the size its %d slices add up to",
                            f->name, f->n_slices);
        f->value = vid;
    }
    return FR_OK;
}

fr_status fr_fbs_fused_table(const fr_graph *file, fr_fp8_fused **fused, int *n)
{
    meta m;
    *fused = NULL;
    *n = 0;
    fr_status st = meta_open(file, file_name(file, NULL), &m);
    if (st == FR_OK) st = check_format(&m);
    if (st == FR_OK) st = read_fused(&m, file, fused, n);
    meta_close(&m);
    if (st != FR_OK) {
        fr_fbs_fused_free(*fused, *n);
        *fused = NULL;
        *n = 0;
    }
    return st;
}

/* ---- re-tied copies ---- */

/* The ties, with source ids from g; copy ids -1 (the copies are not in the file). Their names
 * go to names[i] (pointing into the metadata). */
static fr_status read_ties(const meta *m, const fr_graph *g, fr_fbs_spec *s, const char ***names)
{
    int64_t n, x;
    *names = NULL;
    FR_TRY(m_count(m, &n, "fp8run.ties"));
    if (n == 0) return FR_OK;
    s->ties = fr_calloc((size_t)n, sizeof *s->ties, "compiled graph ties");
    *names = fr_calloc((size_t)n, sizeof **names, "compiled graph ties");
    if (!s->ties || !*names) return FR_ERR_OOM;
    for (int i = 0; i < n; i++) {
        fr_tie *t = &s->ties[s->n_ties++];
        const char *copy, *src;
        char key[96];
        FR_TRY(m_str(m, 1, &copy, "fp8run.tie.%d.copy", i));
        snprintf(key, sizeof key, "fp8run.tie.%d.source", i);
        FR_TRY(m_str(m, 1, &src, "%s", key));
        FR_TRY(m_int(m, 0, 1, &x, "fp8run.tie.%d.transposed", i));
        t->transposed = (int)x;
        t->copy = -1;
        t->source = fr_graph_find_value(g, src);
        const fr_tensor *st = t->source >= 0 ? g->values[t->source].constant : NULL;
        if (!st || st->dtype != FR_F32 || st->rank != 2 || !(g->values[t->source].flags & FR_VAL_INITIALIZER))
            return bad(m, key, "'%s' is not a 2-D float32 initializer of the graph", src);
        if (fr_graph_find_value(g, copy) >= 0)
            return bad(m, key, "the re-tied copy '%s' is also a value of the compiled graph", copy);
        (*names)[i] = copy;
    }
    return FR_OK;
}

/* source (transposed when the tie says so) into t, which has the copy's shape */
static int copy_tie(const fr_graph *g, const fr_tie *tie, fr_tensor *t)
{
    const fr_tensor *src = g->values[tie->source].constant;
    int64_t R = src->dims[0], C = src->dims[1];
    if (t->dtype != FR_F32 || t->rank != 2 || t->dims[0] != (tie->transposed ? C : R) ||
        t->dims[1] != (tie->transposed ? R : C))
        return 0;
    const float *a = src->data;
    float *b = t->data;
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) b[tie->transposed ? c * R + r : r * C + c] = a[r * C + c];
    return 1;
}

int fr_fbs_is_tied_copy(const fr_graph *file, const char *name)
{
    for (int i = 0; file && name && i < file->n_metadata; i++) {
        const char *k = file->metadata[i].key;
        size_t n = strlen(k);
        if (strncmp(k, "fp8run.tie.", 11) == 0 && n > 16 && strcmp(k + n - 5, ".copy") == 0 &&
            strcmp(file->metadata[i].value, name) == 0)
            return 1;
    }
    return 0;
}

/* ---- the original model ---- */

static const fr_fp8_slice *slice_named(const fr_fp8_fused *fs, int n, const char *name, const fr_fp8_fused **f)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < fs[i].n_slices; j++)
            if (strcmp(fs[i].slices[j].name, name) == 0) {
                *f = &fs[i];
                return &fs[i].slices[j];
            }
    return NULL;
}

/* Copy slice s of fused parameter f (data in `file`) into t (the original's layout). */
static void copy_slice(const fr_graph *file, const fr_fp8_fused *f, const fr_fp8_slice *s, fr_tensor *t)
{
    const float *fd = file->values[f->value].constant->data;
    float *od = t->data;
    int64_t Nt = 0, K = f->K;
    for (int j = 0; j < f->n_slices; j++) Nt += f->slices[j].size;
    for (int64_t n = 0; n < s->size; n++) {
        if (f->is_bias) {
            od[n] = fd[s->offset + n];
            continue;
        }
        for (int64_t k = 0; k < K; k++) {
            int64_t fi = f->transB ? (s->offset + n) * K + k : k * Nt + s->offset + n;
            int64_t oi = s->transB ? n * K + k : k * s->size + n;
            od[oi] = fd[fi];
        }
    }
}

static fr_status remove_input(fr_graph *g, int vid)
{
    int k = 0;
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] != vid) g->inputs[k++] = g->inputs[i];
    g->n_inputs = k;
    g->values[vid].flags &= ~FR_VAL_INPUT;
    return FR_OK;
}

static fr_status read_original(const meta *m, const fr_graph *file, const fr_fp8_fused *fs, int nf,
                               const fr_fbs_spec *spec, const char **tie_names, fr_graph **out)
{
    *out = NULL;
    const char *text;
    FR_TRY(m_str(m, 1, &text, "fp8run.original_model"));
    char what[600];
    snprintf(what, sizeof what, "compiled graph '%s', metadata key 'fp8run.original_model'", m->what);
    void *bytes;
    size_t len;
    FR_TRY(fr_base64_decode(text, strlen(text), what, &bytes, &len));
    fr_graph *o = NULL;
    fr_status st = fr_onnx_load_buffer(bytes, len, NULL, what, &o);
    free(bytes);
    FR_TRY(st);
    *out = o;
    if (file->source_path) {
        free(o->source_path);
        o->source_path = fr_strdup(file->source_path, "compiled graph");
        if (!o->source_path) return FR_ERR_OOM;
    }
    int64_t n, n_inputs;
    FR_TRY(m_int(m, 0, o->n_inputs, &n_inputs, "fp8run.original_inputs"));
    FR_TRY(m_count(m, &n, "fp8run.original_initializers"));
    int *order = fr_malloc((size_t)(n ? n : 1) * sizeof(int), "original initializers");
    if (!order) return FR_ERR_OOM;
    for (int i = 0; i < n && st == FR_OK; i++) {
        const char *name;
        int src;
        char key[128];
        snprintf(key, sizeof key, "fp8run.original_init.%d.name", i);
        st = m_str(m, 1, &name, "%s", key);
        if (st == FR_OK) st = m_choice(m, k_source, &src, "fp8run.original_init.%d.source", i);
        if (st != FR_OK) break;
        int vid = fr_graph_find_value(o, name);
        fr_value *v = vid >= 0 ? &o->values[vid] : NULL;
        for (int j = 0; v && j < i; j++)
            if (order[j] == vid) v = NULL; /* listed twice */
        if (src == 0) { /* inline: an initializer of the embedded model */
            if (!v || !(v->flags & FR_VAL_INITIALIZER) || !v->constant) {
                st = bad(m, key, "'%s' is not an initializer of the original model (or listed twice)", name);
                break;
            }
            order[i] = vid;
            continue;
        }
        /* moved out: a graph input of the embedded model stands for it */
        if (!v || !(v->flags & FR_VAL_INPUT) || v->rank < 0 || v->dtype == FR_UNDEFINED) {
            st = bad(m, key, "'%s' is not a typed stand-in input of the original model (or listed twice)", name);
            break;
        }
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] < 0) st = bad(m, key, "the stand-in of '%s' has an unknown dim", name);
        fr_tensor *t = NULL;
        if (st == FR_OK) st = fr_tensor_new(v->dtype, v->rank, v->dims, name, &t);
        if (st != FR_OK) break;
        if (src == 1) { /* the same initializer in the compiled graph */
            int cv = fr_graph_find_value(file, name);
            const fr_tensor *ct = cv >= 0 && (file->values[cv].flags & FR_VAL_INITIALIZER) ? file->values[cv].constant : NULL;
            int same = ct && ct->dtype == t->dtype && ct->rank == t->rank && ct->nbytes == t->nbytes;
            for (int d = 0; same && d < t->rank; d++) same = ct->dims[d] == t->dims[d];
            if (!same) st = bad(m, key, "the compiled graph has no initializer '%s' of the original's type and shape", name);
            else memcpy(t->data, ct->data, t->nbytes);
        } else if (src == 3) { /* a re-tied copy of a parameter */
            int ok = 0;
            for (int k = 0; k < spec->n_ties && !ok; k++)
                if (strcmp(tie_names[k], name) == 0) ok = copy_tie(file, &spec->ties[k], t);
            if (!ok) st = bad(m, key, "'%s' is not a re-tied copy of the original's shape", name);
        } else { /* a slice of a fused parameter */
            const fr_fp8_fused *f;
            const fr_fp8_slice *s = slice_named(fs, nf, name, &f);
            int64_t want = s ? (f->is_bias ? s->size : s->size * f->K) : -1;
            if (!s || t->dtype != FR_F32 || fr_tensor_numel(t) != want || t->rank != s->rank ||
                t->dims[0] != s->dims[0] || (s->rank == 2 && t->dims[1] != s->dims[1]))
                st = bad(m, key, "'%s' is not a slice of a fused parameter with the original's shape", name);
            else
                copy_slice(file, f, s, t);
        }
        if (st == FR_OK) st = remove_input(o, vid);
        if (st == FR_OK) {
            unsigned keep = v->flags & FR_VAL_OUTPUT;
            v->flags = keep;
            st = fr_graph_set_initializer(o, vid, t); /* appends to o->initializers */
            t = NULL;
        }
        fr_tensor_free(t);
        order[i] = vid;
    }
    if (st == FR_OK && o->n_initializers != n)
        st = bad(m, "fp8run.original_initializers", "lists %" PRId64 " initializers, the original model has %d", n,
                 o->n_initializers);
    if (st == FR_OK) {
        /* every initializer listed, no stand-in input left over */
        int listed = 0;
        for (int i = 0; i < o->n_initializers; i++)
            for (int j = 0; j < n; j++)
                if (order[j] == o->initializers[i]) {
                    listed++;
                    break;
                }
        if (listed != o->n_initializers)
            st = bad(m, "fp8run.original_initializers", "does not list every initializer of the original model");
    }
    if (st == FR_OK && o->n_inputs != n_inputs)
        st = bad(m, "fp8run.original_initializers", "%" PRId64 " stand-in inputs of the original model are not "
                 "listed (it has %d inputs, 'fp8run.original_inputs' says %" PRId64 ")", o->n_inputs - n_inputs,
                 o->n_inputs, n_inputs);
    if (st == FR_OK) memcpy(o->initializers, order, (size_t)n * sizeof(int)); /* the original order */
    free(order);
    return st;
}

fr_status fr_fbs_original(const fr_graph *file, fr_graph **original)
{
    meta m;
    fr_fp8_fused *fs = NULL;
    int nf = 0;
    *original = NULL;
    fr_status st = meta_open(file, file_name(file, NULL), &m);
    if (st == FR_OK) st = check_format(&m);
    fr_fbs_spec spec;
    const char **tie_names = NULL;
    memset(&spec, 0, sizeof spec);
    if (st == FR_OK) st = read_fused(&m, file, &fs, &nf);
    if (st == FR_OK) st = read_ties(&m, file, &spec, &tie_names);
    if (st == FR_OK) st = read_original(&m, file, fs, nf, &spec, tie_names, original);
    if (st != FR_OK) {
        fr_graph_free(*original);
        *original = NULL;
    }
    free(tie_names);
    free(spec.ties);
    fr_fbs_fused_free(fs, nf);
    meta_close(&m);
    return st;
}

/* ---- the report ---- */

static fr_status read_layer_list(const meta *m, const fr_graph *g, fr_fp8_report *r, int64_t n,
                                 const fr_name_map *nodes, int *node_of);

static fr_status read_layers(const meta *m, const fr_graph *g, fr_fp8_report *r)
{
    int64_t n;
    FR_TRY(m_count(m, &n, "fp8run.layers"));
    if (n == 0) return FR_OK;
    r->layers = fr_calloc((size_t)n, sizeof *r->layers, "compiled graph report");
    int *node_of = fr_calloc((size_t)n, sizeof *node_of, "compiled graph report");
    fr_name_map *nodes = NULL; /* node name -> id: one pass, not one per layer */
    fr_status st = r->layers && node_of ? fr_name_map_new(&nodes) : FR_ERR_OOM;
    for (int j = 0; st == FR_OK && j < g->n_nodes; j++)
        if (fr_name_map_get(nodes, g->nodes[j].name) < 0) st = fr_name_map_put(nodes, g->nodes[j].name, j);
    if (st == FR_OK) st = read_layer_list(m, g, r, n, nodes, node_of);
    if (st == FR_OK) st = fr_fbs_check_layers(g, r, node_of, m->what);
    fr_name_map_free(nodes);
    free(node_of);
    return st;
}

static fr_status read_layer_list(const meta *m, const fr_graph *g, fr_fp8_report *r, int64_t n,
                                 const fr_name_map *nodes, int *node_of)
{
    for (int i = 0; i < n; i++) {
        fr_fp8_layer *L = &r->layers[r->n_layers++];
        const char *v;
        int k;
        int64_t x;
        char key[128];
        snprintf(key, sizeof key, "fp8run.layer.%d.name", i);
        FR_TRY(m_str(m, 1, &v, "%s", key));
        FR_TRY(dup_to(v, &L->name));
        FR_TRY(m_str(m, 1, &v, "fp8run.layer.%d.weights", i));
        FR_TRY(dup_to(v, &L->weights));
        FR_TRY(m_str(m, 1, &v, "fp8run.layer.%d.sources", i));
        FR_TRY(dup_to(v, &L->sources));
        FR_TRY(m_str(m, 1, &v, "fp8run.layer.%d.why", i));
        FR_TRY(dup_to(v, &L->why));
        FR_TRY(m_int(m, 1, m->n_keys, &x, "fp8run.layer.%d.n_fused", i));
        L->n_fused = (int)x;
        FR_TRY(m_int(m, 1, INT32_MAX, &L->K, "fp8run.layer.%d.K", i));
        FR_TRY(m_int(m, 1, INT32_MAX, &L->N, "fp8run.layer.%d.N", i));
        FR_TRY(m_choice(m, k_bool, &L->transB, "fp8run.layer.%d.transB", i));
        FR_TRY(m_choice(m, k_bool, &L->has_bias, "fp8run.layer.%d.has_bias", i));
        FR_TRY(m_choice(m, k_prec, &k, "fp8run.layer.%d.precision", i));
        L->precision = (fr_lin_precision)k;
        FR_TRY(m_choice(m, k_recipe, &k, "fp8run.layer.%d.recipe", i));
        L->recipe = (fr_lin_recipe)k;
        FR_TRY(m_int(m, 1, 4096, &x, "fp8run.layer.%d.pad_multiple", i));
        L->pad_multiple = (int)x;
        FR_TRY(m_int(m, 0, 4095, &L->pad_k, "fp8run.layer.%d.pad_k", i));
        FR_TRY(m_int(m, 0, 4095, &L->pad_n, "fp8run.layer.%d.pad_n", i));
        FR_TRY(m_str(m, L->precision == FR_LIN_FP8, &v, "fp8run.layer.%d.state_prefix", i));
        FR_TRY(dup_to(v, &L->state_prefix));
        /* the layer is a Linear node of the graph whose weight has the recorded K x N */
        node_of[i] = fr_name_map_get(nodes, L->name);
        const fr_node *nd = node_of[i] >= 0 ? &g->nodes[node_of[i]] : NULL;
        if (!nd || strcmp(nd->op_type, "Linear") != 0 || strcmp(nd->domain, FR_DOMAIN_FP8RUN) != 0 || nd->n_inputs < 2)
            return bad(m, key, "no ai.fp8run::Linear node named '%s' in the graph", L->name);
        const char *prec;
        int64_t tb;
        if (fr_node_attr_string(nd, "precision", "fp32", &prec) != FR_OK || fr_node_attr_int(nd, "transB", 0, &tb) != FR_OK) {
            fr_clear_error();
            return bad(m, key, "node '%s' has malformed attributes", L->name);
        }
        const fr_value *w = nd->inputs[1] >= 0 ? &g->values[nd->inputs[1]] : NULL;
        int64_t K = w && w->rank == 2 ? (tb ? w->dims[1] : w->dims[0]) : -1;
        int64_t N = w && w->rank == 2 ? (tb ? w->dims[0] : w->dims[1]) : -1;
        if (strcmp(prec, fr_lin_precision_name(L->precision)) != 0 || tb != L->transB || K != L->K || N != L->N)
            return bad(m, key, "node '%s' (precision %s, transB %lld, K x N %lld x %lld) does not match the record",
                       L->name, prec, (long long)tb, (long long)K, (long long)N);
        r->n_linears += L->n_fused;
        if (L->precision == FR_LIN_FP8) r->n_fp8 += L->n_fused;
        else if (L->precision == FR_LIN_BF16) r->n_bf16 += L->n_fused;
        else r->n_fp32 += L->n_fused;
    }
    /* the activation MatMuls the pass lowered are in the graph itself */
    for (int i = 0; i < g->n_nodes; i++)
        r->n_activation_matmuls += strcmp(g->nodes[i].op_type, "MatMul") == 0 &&
                                   strcmp(g->nodes[i].domain, "ai.fp8run") == 0;
    for (int i = 0; i < g->n_nodes; i++)
        r->n_attention += strcmp(g->nodes[i].op_type, "Attention") == 0 && strcmp(g->nodes[i].domain, "ai.fp8run") == 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "SwiGLU") == 0 && strcmp(g->nodes[i].domain, "ai.fp8run") == 0) {
            r->n_swiglu++;
            r->n_swiglu_one_input += g->nodes[i].n_inputs == 1;
        }
    return FR_OK;
}

static fr_status read_skipped(const meta *m, fr_fp8_report *r)
{
    int64_t n;
    FR_TRY(m_count(m, &n, "fp8run.skipped"));
    if (n == 0) return FR_OK;
    r->skipped = fr_calloc((size_t)n, sizeof *r->skipped, "compiled graph report");
    if (!r->skipped) return FR_ERR_OOM;
    for (int i = 0; i < n; i++) {
        fr_fp8_skip *s = &r->skipped[r->n_skipped++];
        const char *v;
        FR_TRY(m_str(m, 1, &v, "fp8run.skip.%d.node", i));
        FR_TRY(dup_to(v, &s->node));
        FR_TRY(m_str(m, 1, &v, "fp8run.skip.%d.op_type", i));
        FR_TRY(dup_to(v, &s->op_type));
        FR_TRY(m_str(m, 1, &v, "fp8run.skip.%d.weight", i));
        FR_TRY(dup_to(v, &s->weight));
        FR_TRY(m_str(m, 1, &v, "fp8run.skip.%d.reason", i));
        FR_TRY(dup_to(v, &s->reason));
    }
    return FR_OK;
}

/* An initializer of g named `name` with the given dtype and element count, or -1. */
static int init_of(const fr_graph *g, const char *name, fr_dtype dt, int64_t numel)
{
    int vid = fr_graph_find_value(g, name);
    if (vid < 0 || !(g->values[vid].flags & FR_VAL_INITIALIZER)) return -1;
    const fr_tensor *t = g->values[vid].constant;
    return t && t->dtype == dt && fr_tensor_numel(t) == numel && t->rank == 1 ? vid : -1;
}

/* States: the table, the scales (flagged FR_VAL_STATE), history and counters (read, then
 * taken out of g so they are neither parameters nor exported again). */
static fr_status read_states(const meta *m, fr_graph *g, fr_fp8_report *r, const fr_fbs_spec *spec,
                             fr_fp8_scaling **out, int *n_out)
{
    int64_t n, want = 0;
    *out = NULL;
    *n_out = 0;
    FR_TRY(m_count(m, &n, "fp8run.states"));
    /* every fp8 layer of the delayed recipe has its three operands' state (distinct, below) */
    for (int i = 0; i < r->n_layers; i++) want += 3 * (r->layers[i].precision == FR_LIN_FP8 && r->layers[i].recipe == FR_LIN_DELAYED);
    if (n != want)
        return bad(m, "fp8run.states", "%" PRId64 " states for %" PRId64 " operands of delayed-recipe fp8 layers", n, want);
    if (n == 0) return FR_OK;
    r->states = fr_calloc((size_t)n, sizeof *r->states, "compiled graph report");
    fr_fp8_scaling *scs = fr_calloc((size_t)n, sizeof *scs, "compiled graph scaling state");
    *out = scs;
    if (!r->states || !scs) return FR_ERR_OOM;
    const int64_t H = spec->fp8.amax_history_len;
    for (int i = 0; i < n; i++) {
        fr_fp8_state *s = &r->states[r->n_states++];
        const char *v;
        int k;
        int64_t x;
        char key[128], name[1400];
        FR_TRY(m_int(m, 0, r->n_layers - 1, &x, "fp8run.state.%d.layer", i));
        s->layer = (int)x;
        s->amax_value = -1;
        s->scale_value = -1;
        FR_TRY(m_choice(m, k_operand, &k, "fp8run.state.%d.operand", i));
        s->operand = (fr_fp8_operand)k;
        FR_TRY(m_choice(m, k_fmt8, &k, "fp8run.state.%d.format", i));
        s->fmt = k ? FR_F8E5M2 : FR_F8E4M3;
        FR_TRY(m_str(m, 1, &v, "fp8run.state.%d.amax", i));
        FR_TRY(dup_to(v, &s->amax_name));
        snprintf(key, sizeof key, "fp8run.state.%d.layer", i);
        const fr_fp8_layer *L = &r->layers[s->layer];
        if (L->precision != FR_LIN_FP8 || L->recipe != FR_LIN_DELAYED)
            return bad(m, key, "layer '%s' is not an fp8 layer of the delayed recipe", L->name);
        snprintf(key, sizeof key, "fp8run.state.%d.scale", i);
        FR_TRY(m_str(m, 1, &v, "%s", key));
        s->scale_value = init_of(g, v, FR_F32, 1);
        if (s->scale_value < 0) return bad(m, key, "'%s' is not a [1] float32 initializer", v);
        float scale = ((const float *)g->values[s->scale_value].constant->data)[0];
        if (!(scale > 0) || !isfinite(scale)) return bad(m, key, "scale %g is not finite and > 0", (double)scale);
        const fr_node *nd = NULL; /* the layer's Linear reads this scale in the operand's slot */
        for (int j = 0; j < g->n_nodes && !nd; j++)
            if (strcmp(g->nodes[j].name, L->name) == 0) nd = &g->nodes[j];
        int slot = FR_LIN_IN_SCALE_X + (int)s->operand;
        if (!nd || slot >= nd->n_inputs || nd->inputs[slot] != s->scale_value)
            return bad(m, key, "'%s' is not the %s scale input of Linear '%s'", v, k_operand[s->operand], L->name);
        g->values[s->scale_value].flags = (g->values[s->scale_value].flags & ~FR_VAL_PARAM) | FR_VAL_STATE;
        if (s->operand != FR_FP8_OPERAND_DY) {
            s->amax_value = fr_graph_find_value(g, s->amax_name);
            if (s->amax_value < 0 || g->values[s->amax_value].producer < 0)
                return bad(m, key, "amax '%s' is not produced by the graph", s->amax_name);
        }
        /* history and counters */
        snprintf(name, sizeof name, "%s/history", s->amax_name);
        int hv = init_of(g, name, FR_F32, H);
        snprintf(name, sizeof name, "%s/counters", s->amax_name);
        int cv = init_of(g, name, FR_I64, 2);
        snprintf(key, sizeof key, "fp8run.state.%d.amax", i);
        if (hv < 0 || cv < 0)
            return bad(m, key, "'%s/history' ([%" PRId64 "] float32) or '%s/counters' ([2] int64) is missing",
                       s->amax_name, H, s->amax_name);
        const float *hist = g->values[hv].constant->data;
        const int64_t *cnt = g->values[cv].constant->data;
        for (int64_t j = 0; j < H; j++)
            if (!(hist[j] >= 0) || !isfinite(hist[j])) return bad(m, key, "amax history entry %" PRId64 " is %g", j, (double)hist[j]);
        if (cnt[0] < 0 || cnt[0] >= H || cnt[1] < 0)
            return bad(m, key, "counters (%" PRId64 ", %" PRId64 ") are out of range", cnt[0], cnt[1]);
        fr_fp8_scaling_params p = {(int)H, spec->fp8.amax_algo, spec->fp8.margin, spec->fp8.interval, s->fmt};
        FR_TRY(fr_fp8_scaling_init(&scs[*n_out], &p));
        fr_fp8_scaling *sc = &scs[(*n_out)++];
        memcpy(sc->history, hist, (size_t)H * sizeof(float));
        sc->pos = (int)cnt[0];
        sc->updates = cnt[1];
        sc->scale = scale;
        sc->scale_inv = 1.0f / scale;
        for (int j = 0; j < i; j++)
            if (r->states[j].layer == s->layer && r->states[j].operand == s->operand)
                return bad(m, key, "operand %s of layer '%s' has two states", k_operand[s->operand], L->name);
        int drop[2] = {hv, cv};
        for (int d = 0; d < 2; d++) {
            fr_value *dv = &g->values[drop[d]];
            fr_tensor_free(dv->constant);
            dv->constant = NULL;
            dv->flags &= ~(FR_VAL_INITIALIZER | FR_VAL_PARAM);
            int kk = 0;
            for (int j = 0; j < g->n_initializers; j++)
                if (g->initializers[j] != drop[d]) g->initializers[kk++] = g->initializers[j];
            g->n_initializers = kk;
        }
    }
    return FR_OK;
}

/* FR_VAL_PARAM exactly on the recorded parameters. */
static fr_status read_params(const meta *m, fr_graph *g)
{
    int64_t n;
    FR_TRY(m_count(m, &n, "fp8run.params"));
    for (int i = 0; i < g->n_values; i++) g->values[i].flags &= ~FR_VAL_PARAM;
    for (int i = 0; i < n; i++) {
        const char *v;
        char key[64];
        snprintf(key, sizeof key, "fp8run.param.%d", i);
        FR_TRY(m_str(m, 1, &v, "%s", key));
        int vid = fr_graph_find_value(g, v);
        if (vid < 0 || !(g->values[vid].flags & FR_VAL_INITIALIZER) || !g->values[vid].constant ||
            g->values[vid].constant->dtype != FR_F32)
            return bad(m, key, "'%s' is not a float32 initializer of the graph", v);
        g->values[vid].flags |= FR_VAL_PARAM;
    }
    return FR_OK; /* the other float initializers are constants: folded values, frozen weights */
}

/* The original members of fused parameters, as the compile pass leaves them in its graph:
 * initializers (not trained) holding the slice values; report value ids point at them. */
static fr_status add_slice_values(fr_graph *g, fr_fp8_report *r)
{
    for (int i = 0; i < r->n_fused; i++)
        for (int j = 0; j < r->fused[i].n_slices; j++) {
            fr_fp8_slice *s = &r->fused[i].slices[j];
            if (fr_graph_find_value(g, s->name) >= 0)
                return fr_error(FR_ERR_PARSE, "metadata key 'fp8run.fused.%d.slice.%d.name': '%s' is also a value of "
                                "the compiled graph", i, j, s->name);
            fr_tensor *t;
            int vid;
            FR_TRY(fr_tensor_new(FR_F32, s->rank, s->dims, s->name, &t));
            fr_status st = fr_graph_add_value(g, s->name, &vid);
            if (st == FR_OK) st = fr_graph_set_initializer(g, vid, t);
            else fr_tensor_free(t);
            FR_TRY(st);
            g->values[vid].flags &= ~FR_VAL_PARAM;
            s->value = vid;
        }
    return fr_fp8_sync_params(g, r, 1);
}

/* Re-tied copies as the re-tie pass leaves them: initializers (not trained) that nothing reads,
 * holding their source's values, so export and checkpoints can write them. */
static fr_status add_tie_values(fr_graph *g, fr_fbs_spec *s, const char **names)
{
    for (int i = 0; i < s->n_ties; i++) {
        fr_tie *t = &s->ties[i];
        const fr_tensor *src = g->values[t->source].constant;
        int64_t dims[2] = {t->transposed ? src->dims[1] : src->dims[0], t->transposed ? src->dims[0] : src->dims[1]};
        fr_tensor *c;
        int vid;
        FR_TRY(fr_tensor_new(FR_F32, 2, dims, names[i], &c));
        copy_tie(g, t, c);
        fr_status st = fr_graph_add_value(g, names[i], &vid);
        if (st == FR_OK) st = fr_graph_set_initializer(g, vid, c);
        else fr_tensor_free(c);
        FR_TRY(st);
        g->values[vid].flags &= ~FR_VAL_PARAM;
        t->copy = vid;
    }
    return FR_OK;
}

static fr_status decode_graph(const meta *m, const fr_graph *file, fr_fbs *out, const char **tie_names);

static fr_status decode(const meta *m, const fr_graph *file, fr_fbs *out)
{
    fr_fbs_spec *s = &out->spec;
    fr_fp8_report *r = &out->report;
    FR_TRY(check_format(m));
    FR_TRY(read_spec(m, s));
    int tok = fr_graph_find_value(file, s->tokens_input);
    if (tok < 0 || !(file->values[tok].flags & FR_VAL_INPUT))
        return bad(m, "fp8run.tokens_input", "'%s' is not an input of the graph", s->tokens_input);
    /* the report's options */
    FR_TRY(fr_lin_precision_parse(s->fp8.precision, &r->precision));
    FR_TRY(fr_lin_recipe_parse(s->fp8.recipe, &r->recipe));
    r->e4m3_only = strcmp(s->fp8.fp8_format, "e4m3") == 0;
    r->bf16_boundary = s->fp8.bf16_boundary;
    r->fuse = s->fp8.fuse;
    r->pad_multiple = s->fp8.pad_multiple;
    r->margin = s->fp8.margin;
    FR_TRY(dup_to(s->fp8.fp8_exclude, &r->fp8_exclude));
    r->amax_history_len = s->fp8.amax_history_len;
    r->amax_algo = s->fp8.amax_algo;
    r->interval = s->fp8.interval;

    const char **tie_names = NULL;
    FR_TRY(read_fused(m, file, &r->fused, &r->n_fused));
    fr_status st = read_ties(m, file, s, &tie_names);
    if (st == FR_OK) st = read_original(m, file, r->fused, r->n_fused, s, tie_names, &out->original);
    if (st == FR_OK) st = decode_graph(m, file, out, tie_names);
    free(tie_names);
    return st;
}

static fr_status decode_graph(const meta *m, const fr_graph *file, fr_fbs *out, const char **tie_names)
{
    fr_fbs_spec *s = &out->spec;
    fr_fp8_report *r = &out->report;
    FR_TRY(fr_train_clone_graph(file, 0, &out->graph));
    fr_graph *g = out->graph;
    FR_TRY(read_params(m, g));
    FR_TRY(fr_graph_toposort(g));
    FR_TRY(fr_graph_resolve_ops(g));
    FR_TRY(read_layers(m, g, r));
    FR_TRY(read_skipped(m, r));
    FR_TRY(read_states(m, g, r, s, &out->states, &out->n_states));
    for (int i = 0; i < r->n_fused; i++)
        if (!(g->values[r->fused[i].value].flags & FR_VAL_PARAM))
            return bad(m, "fp8run.params", "fused parameter '%s' is not listed as a parameter", r->fused[i].name);
    /* the pipeline's steps the file does not record (every dim is concrete: preparation only
       resolves ops and re-infers shapes) */
    FR_TRY(fr_pipeline_reload(g));
    FR_TRY(add_slice_values(g, r));
    FR_TRY(add_tie_values(g, s, tie_names));
    for (int i = 0; i < s->n_ties; i++)
        if (!(g->values[s->ties[i].source].flags & FR_VAL_PARAM))
            return bad(m, "fp8run.ties", "the source '%s' of a re-tied copy is not a parameter",
                       g->values[s->ties[i].source].name);
    return FR_OK;
}

fr_status fr_fbs_decode(const fr_graph *file, const char *what, fr_fbs *out)
{
    memset(out, 0, sizeof *out);
    if (!file) return fr_error(FR_ERR_INVALID_ARG, "fr_fbs_decode: no graph");
    what = file_name(file, what);
    meta m;
    fr_status st = meta_open(file, what, &m);
    if (st == FR_OK) st = decode(&m, file, out);
    meta_close(&m);
    if (st != FR_OK) {
        if (!strstr(fr_last_error(), what)) fr_error_context(st, "compiled graph '%s'", what);
        fr_fbs_free(out);
    }
    return st;
}

fr_status fr_fbs_load(const char *path, fr_fbs *out)
{
    memset(out, 0, sizeof *out);
    fr_graph *g;
    FR_TRY(fr_onnx_load_file(path, &g));
    fr_status st;
    if (!fr_fbs_is_compiled(g))
        st = fr_error(FR_ERR_PARSE, "'%s' is not a compiled graph (no '%s' metadata key; compile it with "
                      "fp8run compile)", path, FR_FBS_FORMAT_KEY);
    else
        st = fr_fbs_decode(g, path, out);
    fr_graph_free(g);
    return st;
}

void fr_fbs_free(fr_fbs *f)
{
    if (!f) return;
    fr_graph_free(f->graph);
    fr_graph_free(f->original);
    fr_fp8_report_free(&f->report);
    spec_free(&f->spec);
    for (int i = 0; i < f->n_states; i++) fr_fp8_scaling_free(&f->states[i]);
    free(f->states);
    memset(f, 0, sizeof *f);
}
