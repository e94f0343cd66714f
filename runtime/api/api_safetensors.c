/* Public API: safetensors checkpoints. Open one (a file, a folder, a sharded index), read its
 * tensors as float32, load it by name into a session's trained parameters or a model's
 * parameters (with a report of matched, missing and unexpected names), and write a model's or a
 * session's parameters as a Hugging Face checkpoint. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/train_params.h"

struct fp8run_safetensors {
    api_err err;
    fr_st_ckpt *c;
    char **names;        /* the last load report's names (owned), matched then missing then unexpected,
                            then those holding NaN/Inf */
    int n_names;
    int64_t *nonfinite;  /* the last load's count of NaN/Inf values per checkpoint entry */
};

#define REPORT_V1_SIZE offsetof(fp8run_load_report, n_nonfinite)
#define DEFAULT_SHARD_BYTES ((uint64_t)5 * 1000 * 1000 * 1000) /* transformers' default 5GB */

static void free_names(fp8run_safetensors *st)
{
    for (int i = 0; i < st->n_names; i++) free(st->names[i]);
    free(st->names);
    st->names = NULL;
    st->n_names = 0;
    free(st->nonfinite);
    st->nonfinite = NULL;
}

FP8RUN_API fp8run_status fp8run_safetensors_open(const char *path, fp8run_safetensors **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    fp8run_safetensors *st = calloc(1, sizeof *st);
    if (!st) return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    fr_status s = fr_st_ckpt_open(path, &st->c);
    if (s != FR_OK) {
        free(st);
        return fr_api_fail(NULL, fn, s);
    }
    *out = st;
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_safetensors_close(fp8run_safetensors *st)
{
    if (!st) return;
    free_names(st);
    fr_st_ckpt_close(st->c);
    free(st);
}

FP8RUN_API const char *fp8run_safetensors_error(const fp8run_safetensors *st) { return st ? st->err.msg : ""; }

FP8RUN_API int fp8run_safetensors_tensor_count(const fp8run_safetensors *st) { return st ? st->c->n : 0; }

FP8RUN_API fp8run_status fp8run_safetensors_tensor(const fp8run_safetensors *st, int i, fp8run_value_info *info)
{
    const char *fn = __func__;
    if (!st) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: handle is NULL", fn);
    api_err *slot = (api_err *)&st->err;
    size_t use;
    fp8run_status ps = fr_api_check_out(slot, fn, "info", info, sizeof(fp8run_value_info), sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= st->c->n)
        return fr_api_error(slot, FP8RUN_ERR_RANGE, "%s: tensor index %d is outside [0, %d)", fn, i, st->c->n);
    const fr_st_tensor *t = st->c->e[i].t;
    fr_api_shape_info(t->name, t->dtype, t->rank, t->dims, info, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_safetensors_read(fp8run_safetensors *st, const char *name, float *dst, size_t count)
{
    const char *fn = __func__;
    if (!st) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: handle is NULL", fn);
    if (!name || (!dst && count))
        return fr_api_error(&st->err, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, name ? "dst" : "name");
    int k = fr_st_ckpt_find(st->c, name);
    if (k < 0)
        return fr_api_error(&st->err, FP8RUN_ERR_INVALID_ARG, "%s: '%s' holds no tensor '%s'", fn, st->c->path, name);
    if ((uint64_t)st->c->e[k].t->numel != (uint64_t)count)
        return fr_api_error(&st->err, FP8RUN_ERR_SHAPE, "%s: tensor '%s' has %lld elements, the buffer %zu", fn, name,
                            (long long)st->c->e[k].t->numel, count);
    return fr_api_fail(&st->err, fn, fr_st_ckpt_read_f32(st->c, k, dst));
}

/* ---- loading by name ---- */

/* Where the weights go: a session's trained parameters or a model's parameters, through the
 * same public calls a host would make. */
typedef struct target {
    void *h;
    api_err *slot;
    int n;
    fp8run_status (*info)(void *h, int i, fp8run_value_info *vi);
    fp8run_status (*set)(void *h, const char *name, const float *src, size_t count);
    fr_trainer *trainer; /* a session's: every parameter written in one device round trip */
} target;

/* The checkpoint entries to read, in the order the trainer asks for them; rows[i] > 0: only
 * the first rows[i] rows of the entry (a table of which the model holds rows 0..T-1). */
typedef struct fill_ctx {
    const fr_st_ckpt *c;
    const int *entry, *rows;
    int64_t *nonfinite; /* per checkpoint entry */
} fill_ctx;

static fr_status read_rows(const fr_st_ckpt *c, int k, int rows, float *dst)
{
    if (rows <= 0) return fr_st_ckpt_read_f32(c, k, dst);
    const fr_st_tensor *t = c->e[k].t;
    float *all = fr_malloc((size_t)t->numel * sizeof *all, "safetensors table");
    if (!all) return FR_ERR_OOM;
    fr_status s = fr_st_ckpt_read_f32(c, k, all);
    if (s == FR_OK) memcpy(dst, all, (size_t)rows * (size_t)t->dims[1] * sizeof *all);
    free(all);
    return s;
}

/* read_rows, counting the NaN and Inf values read into nonfinite[k] */
static fr_status read_counted(const fr_st_ckpt *c, int k, int rows, float *dst, int64_t *nonfinite)
{
    FR_TRY(read_rows(c, k, rows, dst));
    const fr_st_tensor *t = c->e[k].t;
    size_t count = rows > 0 ? (size_t)rows * (size_t)t->dims[1] : (size_t)t->numel;
    int64_t bad = 0;
    for (size_t j = 0; j < count; j++) bad += !isfinite(dst[j]);
    nonfinite[k] = bad;
    return FR_OK;
}

static fr_status fill_one(void *ctx, int i, float *dst)
{
    const fill_ctx *f = ctx;
    return read_counted(f->c, f->entry[i], f->rows[i], dst, f->nonfinite);
}

/* A parameter named "<table>[0:T]" [T, D] (graph/params_unfold.h: the rows of a position
 * table a static export holds) reads the first T rows of the checkpoint's <table> [P, D]:
 * its entry, T in *rows; -1 when there is none such. */
static int table_rows(const fr_st_ckpt *c, const fp8run_value_info *vi, int *rows)
{
    char base[1024];
    size_t n = strlen(vi->name);
    const char *b = strrchr(vi->name, '[');
    long long t;
    int used = 0;
    if (!b || n >= sizeof base || vi->rank != 2 || sscanf(b, "[0:%lld]%n", &t, &used) != 1 ||
        b + used != vi->name + n || t != vi->dims[0])
        return -1;
    memcpy(base, vi->name, (size_t)(b - vi->name));
    base[b - vi->name] = '\0';
    int k = fr_st_ckpt_find(c, base);
    if (k < 0 || c->e[k].t->rank != 2 || c->e[k].t->dims[1] != vi->dims[1] || c->e[k].t->dims[0] < t) return -1;
    *rows = (int)t;
    return k;
}

static fp8run_status session_info(void *h, int i, fp8run_value_info *vi) { return fp8run_session_param(h, i, vi); }
static fp8run_status model_info(void *h, int i, fp8run_value_info *vi) { return fp8run_model_param(h, i, vi); }
static fp8run_status model_set(void *h, const char *n, const float *s, size_t c) { return fp8run_model_set_param(h, n, s, c); }

static int same_shape(const fp8run_value_info *p, const fr_st_tensor *t)
{
    if (p->rank != t->rank) return 0;
    for (int d = 0; d < t->rank; d++)
        if (p->dims[d] != t->dims[d]) return 0;
    return 1;
}

static void shape_text(int rank, const int64_t *dims, char *buf, size_t n) { fr_shape_str(rank, dims, buf, n); }

/* Names of one report list, joined for a message: the first few, then a count. */
static void name_list(char *const *names, int n, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < n && i < 4; i++) {
        strncat(buf, i ? ", '" : "'", len - strlen(buf) - 1);
        strncat(buf, names[i], len - strlen(buf) - 1);
        strncat(buf, "'", len - strlen(buf) - 1);
    }
    if (n > 4) snprintf(buf + strlen(buf), len - strlen(buf), " and %d more", n - 4);
}

static fp8run_status push_name(fp8run_safetensors *st, const char *name)
{
    char *c = strdup(name);
    if (!c) return FP8RUN_ERR_OOM;
    st->names[st->n_names++] = c;
    return FP8RUN_OK;
}

/* FP8RUN_LOAD_STRICT_WEIGHTS: every matched tensor read once before anything is written; one
 * holding NaN or Inf refuses the load, naming the first few and their counts. */
static fp8run_status scan_nonfinite(fp8run_safetensors *st, const char *fn, const target *tg, const int *param_of,
                                    const int *rows_of, size_t max_numel)
{
    const fr_st_ckpt *c = st->c;
    float *buf = malloc(max_numel * sizeof *buf);
    if (!buf) return fr_api_error(tg->slot, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    char list[600] = "";
    int n_bad = 0;
    fp8run_status ps = FP8RUN_OK;
    for (int i = 0; i < tg->n && ps == FP8RUN_OK; i++) {
        if (param_of[i] < 0) continue;
        fr_status s = read_counted(c, param_of[i], rows_of[i], buf, st->nonfinite);
        if (s != FR_OK) ps = fr_api_fail(tg->slot, fn, s);
        else if (st->nonfinite[param_of[i]] > 0 && n_bad++ < 4)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s'%s' (%lld)", n_bad > 1 ? ", " : "",
                     c->e[param_of[i]].name, (long long)st->nonfinite[param_of[i]]);
    }
    free(buf);
    if (ps == FP8RUN_OK && n_bad)
        ps = fr_api_error(tg->slot, FP8RUN_ERR_NUMERIC, "%s: '%s' has %d tensors holding NaN/Inf values: %s%s; nothing "
                          "was loaded (strict weights)", fn, c->path, n_bad, list, n_bad > 4 ? " and more" : "");
    return ps;
}

/* Match every parameter against the checkpoint; nothing is written when a shape differs (or,
 * strict, when a name is missing or unexpected). */
static fp8run_status load_into(fp8run_safetensors *st, const char *fn, const target *tg, int flags,
                               fp8run_load_report *report)
{
    size_t use = 0;
    fp8run_status ps = FP8RUN_OK;
    if (report) ps = fr_api_check_out(tg->slot, fn, "report", report, REPORT_V1_SIZE, sizeof *report, &use);
    if (ps != FP8RUN_OK) return ps;
    if (flags & ~(FP8RUN_LOAD_STRICT | FP8RUN_LOAD_STRICT_WEIGHTS))
        return fr_api_error(tg->slot, FP8RUN_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, (unsigned)flags);
    const fr_st_ckpt *c = st->c;
    free_names(st);
    st->names = calloc((size_t)tg->n + 2 * (size_t)c->n + 1, sizeof *st->names);
    st->nonfinite = calloc((size_t)c->n + 1, sizeof *st->nonfinite);
    int *param_of = malloc(((size_t)tg->n + 1) * sizeof *param_of);  /* checkpoint entry of parameter i */
    int *rows_of = calloc((size_t)tg->n + 1, sizeof *rows_of);        /* > 0: its first rows only */
    char *used = calloc((size_t)c->n + 1, 1);
    if (!st->names || !st->nonfinite || !param_of || !rows_of || !used) ps = fr_api_error(tg->slot, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    int n_match = 0, n_miss = 0, n_unexp = 0;
    size_t max_numel = 1;
    for (int pass = 0; pass < 2 && ps == FP8RUN_OK; pass++) /* matched names first, then missing */
        for (int i = 0; i < tg->n && ps == FP8RUN_OK; i++) {
            fp8run_value_info vi = {.struct_size = sizeof vi};
            if ((ps = tg->info(tg->h, i, &vi)) != FP8RUN_OK) break;
            int k = fr_st_ckpt_find(c, vi.name);
            if (pass == 1) {
                if (param_of[i] < 0 && (ps = push_name(st, vi.name)) == FP8RUN_OK) n_miss++;
                continue;
            }
            if (k < 0) k = table_rows(c, &vi, &rows_of[i]);
            param_of[i] = k;
            if (k < 0) continue;
            if (!rows_of[i] && !same_shape(&vi, c->e[k].t)) {
                char a[160], b[160];
                shape_text(vi.rank, vi.dims, a, sizeof a);
                shape_text(c->e[k].t->rank, c->e[k].t->dims, b, sizeof b);
                ps = fr_api_error(tg->slot, FP8RUN_ERR_SHAPE, "%s: parameter '%s' is %s, the checkpoint '%s' has %s: "
                                  "nothing was loaded", fn, vi.name, a, c->path, b);
                break;
            }
            used[k] = 1;
            if ((size_t)vi.numel > max_numel) max_numel = (size_t)vi.numel;
            if ((ps = push_name(st, vi.name)) == FP8RUN_OK) n_match++;
        }
    for (int k = 0; k < c->n && ps == FP8RUN_OK; k++)
        if (!used[k] && !fr_st_ckpt_is_aux(c, k) && (ps = push_name(st, c->e[k].name)) == FP8RUN_OK) n_unexp++;
    if (ps == FP8RUN_OK && (flags & FP8RUN_LOAD_STRICT) && (n_miss || n_unexp)) {
        char m[600], u[600];
        name_list(st->names + n_match, n_miss, m, sizeof m);
        name_list(st->names + n_match + n_miss, n_unexp, u, sizeof u);
        ps = fr_api_error(tg->slot, FP8RUN_ERR_INVALID_ARG, "%s: '%s' does not match the parameters: %d missing%s%s, "
                          "%d unexpected%s%s; nothing was loaded", fn, c->path, n_miss, n_miss ? " " : "", m, n_unexp,
                          n_unexp ? " " : "", u);
    }
    if (ps == FP8RUN_OK && (flags & FP8RUN_LOAD_STRICT_WEIGHTS))
        ps = scan_nonfinite(st, fn, tg, param_of, rows_of, max_numel);
    if (ps == FP8RUN_OK && tg->trainer) {
        /* the matched entries in parameter order (param_of is compacted in place) */
        int k = 0;
        for (int i = 0; i < tg->n; i++)
            if (param_of[i] >= 0) {
                rows_of[k] = rows_of[i];
                param_of[k++] = param_of[i];
            }
        fill_ctx fc = {c, param_of, rows_of, st->nonfinite};
        ps = fr_api_fail(tg->slot, fn, fr_trainer_fill_params(tg->trainer, n_match, (const char *const *)st->names,
                                                              fill_one, &fc));
        max_numel = 0; /* done: no per-parameter copies below */
    }
    float *buf = ps == FP8RUN_OK && max_numel ? malloc(max_numel * sizeof *buf) : NULL;
    if (ps == FP8RUN_OK && max_numel && !buf) ps = fr_api_error(tg->slot, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    for (int i = 0, j = 0; i < tg->n && ps == FP8RUN_OK && buf; i++) {
        if (param_of[i] < 0) continue;
        const fr_st_tensor *t = c->e[param_of[i]].t;
        fr_status s = read_counted(c, param_of[i], rows_of[i], buf, st->nonfinite);
        size_t count = rows_of[i] ? (size_t)rows_of[i] * (size_t)t->dims[1] : (size_t)t->numel;
        if (s != FR_OK) ps = fr_api_fail(tg->slot, fn, s);
        else ps = tg->set(tg->h, st->names[j++], buf, count);
    }
    free(buf);
    free(rows_of);
    free(param_of);
    free(used);
    int n_bad = 0;
    for (int k = 0; k < c->n && ps == FP8RUN_OK; k++)
        if (st->nonfinite[k] > 0) {
            fr_api_log(FP8RUN_LOG_WARN, "'%s': tensor '%s' holds %lld NaN/Inf values (loaded as they are)", c->path,
                       c->e[k].name, (long long)st->nonfinite[k]);
            st->nonfinite[n_bad] = st->nonfinite[k]; /* compacted, as the names are listed */
            if ((ps = push_name(st, c->e[k].name)) == FP8RUN_OK) n_bad++;
        }
    if (report && ps == FP8RUN_OK) {
        fp8run_load_report r;
        memset(&r, 0, sizeof r);
        r.struct_size = report->struct_size;
        r.n_matched = n_match;
        r.n_missing = n_miss;
        r.n_unexpected = n_unexp;
        r.matched = (const char *const *)st->names;
        r.missing = (const char *const *)st->names + n_match;
        r.unexpected = (const char *const *)st->names + n_match + n_miss;
        r.n_nonfinite = n_bad;
        r.nonfinite = (const char *const *)st->names + n_match + n_miss + n_unexp;
        r.nonfinite_counts = st->nonfinite;
        memcpy(report, &r, use);
    }
    if (ps == FP8RUN_OK)
        fr_api_log(FP8RUN_LOG_INFO, "loaded '%s': %d parameters matched, %d missing, %d unexpected", c->path, n_match,
                   n_miss, n_unexp);
    return ps;
}

FP8RUN_API fp8run_status fp8run_session_load_safetensors(fp8run_session *s, fp8run_safetensors *st, int flags,
                                                         fp8run_load_report *report)
{
    const char *fn = __func__;
    if (!s || !st) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, s ? "checkpoint" : "session");
    if (s->broken || fr_trainer_queued(s->t))
        return fr_api_error(&s->err, FP8RUN_ERR_STATE, "%s: %s", fn,
                            s->broken ? "this session is unusable since an earlier failure"
                                      : "steps are queued: poll them first (load before training)");
    target tg = {s, &s->err, fp8run_session_param_count(s), session_info, NULL, s->t};
    return load_into(st, fn, &tg, flags, report);
}

FP8RUN_API fp8run_status fp8run_model_load_safetensors(fp8run_model *m, fp8run_safetensors *st, int flags,
                                                       fp8run_load_report *report)
{
    const char *fn = __func__;
    if (!m || !st) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, m ? "checkpoint" : "model");
    target tg = {m, &m->err, fp8run_model_param_count(m), model_info, model_set, NULL};
    return load_into(st, fn, &tg, flags, report);
}

/* ---- writing ---- */

typedef fp8run_status (*get_fn)(void *h, const char *name, float *dst, size_t count);
static fp8run_status session_get(void *h, const char *n, float *d, size_t c) { return fp8run_session_get_param(h, n, d, c); }
static fp8run_status model_get(void *h, const char *n, float *d, size_t c) { return fp8run_model_get_param(h, n, d, c); }

static int out_by_name(const void *a, const void *b)
{
    return strcmp(((const fr_st_out *)a)->name, ((const fr_st_out *)b)->name);
}

/* Every parameter in `dtype`, sorted by name as save_pretrained writes them. */
static fp8run_status save_from(const char *fn, const target *tg, get_fn get, const char *dir, fp8run_dtype dtype,
                               uint64_t max_shard_bytes)
{
    if (!dir || !dir[0]) return fr_api_error(tg->slot, FP8RUN_ERR_INVALID_ARG, "%s: no folder given", fn);
    if (dtype == FP8RUN_DTYPE_UNDEFINED) dtype = FP8RUN_DTYPE_FLOAT32;
    if (dtype != FP8RUN_DTYPE_FLOAT32 && dtype != FP8RUN_DTYPE_BFLOAT16 && dtype != FP8RUN_DTYPE_FLOAT16)
        return fr_api_error(tg->slot, FP8RUN_ERR_UNSUPPORTED, "%s: dtype %s: only float32, bfloat16 and float16 are "
                            "written", fn, fp8run_dtype_name(dtype));
    if (max_shard_bytes == 0) max_shard_bytes = DEFAULT_SHARD_BYTES;
    fr_st_out *o = calloc((size_t)tg->n + 1, sizeof *o);
    fp8run_value_info *vi = calloc((size_t)tg->n + 1, sizeof *vi);
    void **data = calloc((size_t)tg->n + 1, sizeof *data);
    fp8run_status ps = o && vi && data ? FP8RUN_OK : fr_api_error(tg->slot, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    for (int i = 0; i < tg->n && ps == FP8RUN_OK; i++) {
        vi[i].struct_size = sizeof vi[i];
        if ((ps = tg->info(tg->h, i, &vi[i])) != FP8RUN_OK) break;
        size_t n = (size_t)vi[i].numel;
        float *f = malloc((n ? n : 1) * sizeof *f);
        data[i] = f;
        if (!f) ps = fr_api_error(tg->slot, FP8RUN_ERR_OOM, "%s: out of memory for parameter '%s'", fn, vi[i].name);
        else ps = get(tg->h, vi[i].name, f, n);
        if (ps == FP8RUN_OK && dtype != FP8RUN_DTYPE_FLOAT32) { /* narrowed in place, round to nearest even */
            uint16_t *h = data[i];
            for (size_t j = 0; j < n; j++) h[j] = dtype == FP8RUN_DTYPE_BFLOAT16 ? fr_f32_to_bf16(f[j]) : fr_f32_to_f16(f[j]);
        }
        o[i] = (fr_st_out){vi[i].name, (fr_dtype)dtype, vi[i].rank, vi[i].dims, data[i]};
    }
    if (ps == FP8RUN_OK) {
        qsort(o, (size_t)tg->n, sizeof *o, out_by_name);
        ps = fr_api_fail(tg->slot, fn, fr_st_ckpt_write(dir, o, tg->n, max_shard_bytes));
    }
    for (int i = 0; data && i < tg->n; i++) free(data[i]);
    free(data);
    free(vi);
    free(o);
    return ps;
}

FP8RUN_API fp8run_status fp8run_model_save_safetensors(fp8run_model *m, const char *dir, fp8run_dtype dtype,
                                                       uint64_t max_shard_bytes)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    target tg = {m, &m->err, fp8run_model_param_count(m), model_info, NULL, NULL};
    return save_from(fn, &tg, model_get, dir, dtype, max_shard_bytes);
}

FP8RUN_API fp8run_status fp8run_session_save_safetensors(fp8run_session *s, const char *dir, fp8run_dtype dtype,
                                                         uint64_t max_shard_bytes)
{
    const char *fn = __func__;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    target tg = {s, &s->err, fp8run_session_param_count(s), session_info, NULL, NULL};
    return save_from(fn, &tg, session_get, dir, dtype, max_shard_bytes);
}

/* A checkpoint's "param" tensors (the trainer's names and layouts) as a save target. */
typedef struct ckpt_params {
    fr_ckpt *c;
    const fr_ckpt_tensor **p;
} ckpt_params;

static fp8run_status ckpt_info(void *h, int i, fp8run_value_info *vi)
{
    const fr_ckpt_tensor *t = ((ckpt_params *)h)->p[i];
    fr_api_shape_info(t->name, t->dtype, t->rank, t->dims, vi, sizeof *vi);
    vi->numel = (int64_t)(t->nbytes / sizeof(float));
    return FP8RUN_OK;
}

static fp8run_status ckpt_get(void *h, const char *name, float *dst, size_t count)
{
    const fr_ckpt_tensor *t = fr_ckpt_find(((ckpt_params *)h)->c, name, "param");
    memcpy(dst, t->data, count * sizeof *dst); /* count is the tensor's (ckpt_info) */
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_checkpoint_save_safetensors(const char *ckpt_path, const char *dir, fp8run_dtype dtype,
                                                            uint64_t max_shard_bytes)
{
    const char *fn = __func__;
    if (!ckpt_path || !ckpt_path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no checkpoint path", fn);
    ckpt_params cp = {0};
    fr_status s = fr_ckpt_open(ckpt_path, &cp.c);
    if (s != FR_OK) return fr_api_fail(NULL, fn, s);
    if ((s = fr_ckpt_check_format(cp.c, fr_trainer_ckpt_formats)) != FR_OK) {
        fr_ckpt_close(cp.c);
        return fr_api_fail(NULL, fn, s);
    }
    int n = 0, total = fr_ckpt_tensor_count(cp.c);
    cp.p = calloc((size_t)total + 1, sizeof *cp.p);
    fp8run_status ps = cp.p ? FP8RUN_OK : fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    for (int i = 0; i < total && ps == FP8RUN_OK; i++) {
        const fr_ckpt_tensor *t = fr_ckpt_tensor_at(cp.c, i);
        if (strcmp(t->kind, "param") != 0) continue;
        if (t->dtype != FR_F32)
            ps = fr_api_error(NULL, FP8RUN_ERR_PARSE, "%s: '%s': parameter '%s' is %s, not float32", fn, ckpt_path,
                              t->name, fr_dtype_name(t->dtype));
        cp.p[n++] = t;
    }
    target tg = {&cp, NULL, n, ckpt_info, NULL, NULL};
    if (ps == FP8RUN_OK) ps = save_from(fn, &tg, ckpt_get, dir, dtype, max_shard_bytes);
    free(cp.p);
    fr_ckpt_close(cp.c);
    return ps;
}
