/* Reading compiled graph files (fbs.h), the parts that give back the original model: the fused
 * table, the re-tied copies and the original graph. */
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
#include "runtime/io/fbs.h"
#include "runtime/io/fbs_meta.h"
#include "graph/option_choices.h"

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
fr_status fr_fbs_read_fused(const fr_fbs_meta *m, const fr_graph *g, fr_fp8_fused **out, int *n_out)
{
    int64_t n;
    *out = NULL;
    *n_out = 0;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.fused"));
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
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.fused.%d.name", i));
        FR_TRY(fr_fbs_dup(v, &f->name));
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &f->is_bias, "fp8run.fused.%d.is_bias", i));
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &f->transB, "fp8run.fused.%d.transB", i));
        FR_TRY(fr_fbs_get_int(m, f->is_bias ? 0 : 1, f->is_bias ? 0 : INT32_MAX, &x, "fp8run.fused.%d.K", i));
        f->K = x;
        FR_TRY(fr_fbs_get_int(m, 1, m->n_keys, &ns, "fp8run.fused.%d.slices", i));
        f->slices = fr_calloc((size_t)ns, sizeof *f->slices, "compiled graph fused table");
        if (!f->slices) return FR_ERR_OOM;
        int64_t off = 0;
        for (int j = 0; j < ns; j++) {
            fr_fp8_slice *s = &f->slices[f->n_slices++];
            s->value = -1;
            s->is_bias = f->is_bias;
            FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.fused.%d.slice.%d.name", i, j));
            FR_TRY(fr_fbs_dup(v, &s->name));
            FR_TRY(fr_fbs_get_int(m, 0, INT32_MAX, &s->offset, "fp8run.fused.%d.slice.%d.offset", i, j));
            FR_TRY(fr_fbs_get_int(m, 1, INT32_MAX, &s->size, "fp8run.fused.%d.slice.%d.size", i, j));
            FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &s->transB, "fp8run.fused.%d.slice.%d.transB", i, j));
            FR_TRY(fr_fbs_get_int(m, 1, 2, &x, "fp8run.fused.%d.slice.%d.rank", i, j));
            s->rank = (int)x;
            FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.fused.%d.slice.%d.dims", i, j));
            snprintf(key, sizeof key, "fp8run.fused.%d.slice.%d.dims", i, j);
            long long d0 = -1, d1 = -1;
            int used = 0;
            int got = s->rank == 2 ? sscanf(v, "%lld,%lld%n", &d0, &d1, &used) : sscanf(v, "%lld%n", &d0, &used);
            if (got != s->rank || v[used] || d0 < 0 || (s->rank == 2 && d1 < 0))
                return fr_fbs_bad(m, key, "'%.60s' is not %d dims", v, s->rank);
            s->dims[0] = d0;
            s->dims[1] = s->rank == 2 ? d1 : 0;
            /* the slice must be where the previous one ended, with its original's shape */
            int ok = s->offset == off;
            if (f->is_bias)
                ok = ok && !s->transB && ((s->rank == 1 && d0 == s->size) || (s->rank == 2 && d0 == 1 && d1 == s->size));
            else
                ok = ok && s->rank == 2 && (s->transB ? d0 == s->size && d1 == f->K : d0 == f->K && d1 == s->size);
            if (!ok) return fr_fbs_bad(m, key, "slice '%s' (offset %" PRId64 ", size %" PRId64 ") does not fit fused "
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
        if (!ok) return fr_fbs_bad(m, key, "'%s' is not a float32 initializer of the size its %d slices add up to",
                            f->name, f->n_slices);
        f->value = vid;
    }
    return FR_OK;
}

fr_status fr_fbs_fused_table(const fr_graph *file, fr_fp8_fused **fused, int *n)
{
    fr_fbs_meta m;
    *fused = NULL;
    *n = 0;
    fr_status st = fr_fbs_meta_open(file, fr_fbs_file_name(file, NULL), &m);
    if (st == FR_OK) st = fr_fbs_check_format(&m);
    if (st == FR_OK) st = fr_fbs_read_fused(&m, file, fused, n);
    fr_fbs_meta_close(&m);
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
fr_status fr_fbs_read_ties(const fr_fbs_meta *m, const fr_graph *g, fr_fbs_spec *s, const char ***names)
{
    int64_t n, x;
    *names = NULL;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.ties"));
    if (n == 0) return FR_OK;
    s->ties = fr_calloc((size_t)n, sizeof *s->ties, "compiled graph ties");
    *names = fr_calloc((size_t)n, sizeof **names, "compiled graph ties");
    if (!s->ties || !*names) return FR_ERR_OOM;
    for (int i = 0; i < n; i++) {
        fr_tie *t = &s->ties[s->n_ties++];
        const char *copy, *src;
        char key[96];
        FR_TRY(fr_fbs_get_str(m, 1, &copy, "fp8run.tie.%d.copy", i));
        snprintf(key, sizeof key, "fp8run.tie.%d.source", i);
        FR_TRY(fr_fbs_get_str(m, 1, &src, "%s", key));
        FR_TRY(fr_fbs_get_int(m, 0, 1, &x, "fp8run.tie.%d.transposed", i));
        t->transposed = (int)x;
        t->copy = -1;
        t->source = fr_graph_find_value(g, src);
        const fr_tensor *st = t->source >= 0 ? g->values[t->source].constant : NULL;
        if (!st || st->dtype != FR_F32 || st->rank != 2 || !(g->values[t->source].flags & FR_VAL_INITIALIZER))
            return fr_fbs_bad(m, key, "'%s' is not a 2-D float32 initializer of the graph", src);
        if (fr_graph_find_value(g, copy) >= 0)
            return fr_fbs_bad(m, key, "the re-tied copy '%s' is also a value of the compiled graph", copy);
        (*names)[i] = copy;
    }
    return FR_OK;
}

/* source (transposed when the tie says so) into t, which has the copy's shape */
int fr_fbs_copy_tie(const fr_graph *g, const fr_tie *tie, fr_tensor *t)
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

fr_status fr_fbs_read_original(const fr_fbs_meta *m, const fr_graph *file, const fr_fp8_fused *fs, int nf,
                               const fr_fbs_spec *spec, const char **tie_names, fr_graph **out)
{
    *out = NULL;
    const char *text;
    FR_TRY(fr_fbs_get_str(m, 1, &text, "fp8run.original_model"));
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
    FR_TRY(fr_fbs_get_int(m, 0, o->n_inputs, &n_inputs, "fp8run.original_inputs"));
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.original_initializers"));
    int *order = fr_malloc((size_t)(n ? n : 1) * sizeof(int), "original initializers");
    if (!order) return FR_ERR_OOM;
    for (int i = 0; i < n && st == FR_OK; i++) {
        const char *name;
        int src;
        char key[128];
        snprintf(key, sizeof key, "fp8run.original_init.%d.name", i);
        st = fr_fbs_get_str(m, 1, &name, "%s", key);
        if (st == FR_OK) st = fr_fbs_get_choice(m, fr_fbs_k_source, &src, "fp8run.original_init.%d.source", i);
        if (st != FR_OK) break;
        int vid = fr_graph_find_value(o, name);
        fr_value *v = vid >= 0 ? &o->values[vid] : NULL;
        for (int j = 0; v && j < i; j++)
            if (order[j] == vid) v = NULL; /* listed twice */
        if (src == 0) { /* inline: an initializer of the embedded model */
            if (!v || !(v->flags & FR_VAL_INITIALIZER) || !v->constant) {
                st = fr_fbs_bad(m, key, "'%s' is not an initializer of the original model (or listed twice)", name);
                break;
            }
            order[i] = vid;
            continue;
        }
        /* moved out: a graph input of the embedded model stands for it */
        if (!v || !(v->flags & FR_VAL_INPUT) || v->rank < 0 || v->dtype == FR_UNDEFINED) {
            st = fr_fbs_bad(m, key, "'%s' is not a typed stand-in input of the original model (or listed twice)", name);
            break;
        }
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] < 0) st = fr_fbs_bad(m, key, "the stand-in of '%s' has an unknown dim", name);
        fr_tensor *t = NULL;
        if (st == FR_OK) st = fr_tensor_new(v->dtype, v->rank, v->dims, name, &t);
        if (st != FR_OK) break;
        if (src == 1) { /* the same initializer in the compiled graph */
            int cv = fr_graph_find_value(file, name);
            const fr_tensor *ct = cv >= 0 && (file->values[cv].flags & FR_VAL_INITIALIZER) ? file->values[cv].constant : NULL;
            int same = ct && ct->dtype == t->dtype && ct->rank == t->rank && ct->nbytes == t->nbytes;
            for (int d = 0; same && d < t->rank; d++) same = ct->dims[d] == t->dims[d];
            if (!same) st = fr_fbs_bad(m, key, "the compiled graph has no initializer '%s' of the original's type and shape", name);
            else memcpy(t->data, ct->data, t->nbytes);
        } else if (src == 3) { /* a re-tied copy of a parameter */
            int ok = 0;
            for (int k = 0; k < spec->n_ties && !ok; k++)
                if (strcmp(tie_names[k], name) == 0) ok = fr_fbs_copy_tie(file, &spec->ties[k], t);
            if (!ok) st = fr_fbs_bad(m, key, "'%s' is not a re-tied copy of the original's shape", name);
        } else { /* a slice of a fused parameter */
            const fr_fp8_fused *f;
            const fr_fp8_slice *s = slice_named(fs, nf, name, &f);
            int64_t want = s ? (f->is_bias ? s->size : s->size * f->K) : -1;
            if (!s || t->dtype != FR_F32 || fr_tensor_numel(t) != want || t->rank != s->rank ||
                t->dims[0] != s->dims[0] || (s->rank == 2 && t->dims[1] != s->dims[1]))
                st = fr_fbs_bad(m, key, "'%s' is not a slice of a fused parameter with the original's shape", name);
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
        st = fr_fbs_bad(m, "fp8run.original_initializers", "lists %" PRId64 " initializers, the original model has %d", n,
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
            st = fr_fbs_bad(m, "fp8run.original_initializers", "does not list every initializer of the original model");
    }
    if (st == FR_OK && o->n_inputs != n_inputs)
        st = fr_fbs_bad(m, "fp8run.original_initializers", "%" PRId64 " stand-in inputs of the original model are not "
                 "listed (it has %d inputs, 'fp8run.original_inputs' says %" PRId64 ")", o->n_inputs - n_inputs,
                 o->n_inputs, n_inputs);
    if (st == FR_OK) memcpy(o->initializers, order, (size_t)n * sizeof(int)); /* the original order */
    free(order);
    return st;
}

fr_status fr_fbs_original(const fr_graph *file, fr_graph **original)
{
    fr_fbs_meta m;
    fr_fp8_fused *fs = NULL;
    int nf = 0;
    *original = NULL;
    fr_status st = fr_fbs_meta_open(file, fr_fbs_file_name(file, NULL), &m);
    if (st == FR_OK) st = fr_fbs_check_format(&m);
    fr_fbs_spec spec;
    const char **tie_names = NULL;
    memset(&spec, 0, sizeof spec);
    if (st == FR_OK) st = fr_fbs_read_fused(&m, file, &fs, &nf);
    if (st == FR_OK) st = fr_fbs_read_ties(&m, file, &spec, &tie_names);
    if (st == FR_OK) st = fr_fbs_read_original(&m, file, fs, nf, &spec, tie_names, original);
    if (st != FR_OK) {
        fr_graph_free(*original);
        *original = NULL;
    }
    free(tie_names);
    free(spec.ties);
    fr_fbs_fused_free(fs, nf);
    fr_fbs_meta_close(&m);
    return st;
}

