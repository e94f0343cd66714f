/* Safetensors files: validated reading and atomic writing (see safetensors.h). */
#include "runtime/io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/limits.h"
#include "graph/onnx_io_util.h"
#include "graph/fp8_format.h"

static const struct {
    const char *s;
    fr_dtype dt;
} k_dtypes[] = {
    {"F64", FR_F64},  {"F32", FR_F32},         {"F16", FR_F16},         {"BF16", FR_BF16},
    {"I64", FR_I64},  {"I32", FR_I32},         {"I16", FR_I16},         {"I8", FR_I8},
    {"U64", FR_U64},  {"U32", FR_U32},         {"U16", FR_U16},         {"U8", FR_U8},
    {"BOOL", FR_BOOL}, {"F8_E4M3", FR_F8E4M3}, {"F8_E5M2", FR_F8E5M2},
};
#define N_DTYPES (int)(sizeof k_dtypes / sizeof k_dtypes[0])

fr_dtype fr_st_dtype_of(const char *s)
{
    for (int i = 0; s && i < N_DTYPES; i++)
        if (strcmp(s, k_dtypes[i].s) == 0) return k_dtypes[i].dt;
    return FR_UNDEFINED;
}

const char *fr_st_dtype_str(fr_dtype dt)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (k_dtypes[i].dt == dt) return k_dtypes[i].s;
    return NULL;
}

void fr_st_close(fr_st_file *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    for (int i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->t);
    free(f->meta);
    free(f->path);
    free(f);
}

/* ---- header ---- */

/* A non-negative JSON integer; 0 when v is anything else. */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static fr_status parse_metadata(fr_st_file *f, json_t *m)
{
    if (!json_is_object(m))
        return fr_error(FR_ERR_PARSE, "safetensors '%s': __metadata__ is not an object", f->path);
    f->meta = fr_calloc(2 * json_object_size(m) + 1, sizeof *f->meta, "safetensors metadata");
    if (!f->meta) return FR_ERR_OOM;
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return fr_error(FR_ERR_PARSE, "safetensors '%s': __metadata__ value of '%s' is not a string", f->path, k);
        char *ks = fr_strdup(k, "metadata key"), *vs = fr_strdup(json_string_value(v), "metadata value");
        f->meta[2 * f->n_meta] = ks;
        f->meta[2 * f->n_meta + 1] = vs;
        f->n_meta++;
        if (!ks || !vs) return FR_ERR_OOM;
    }
    return FR_OK;
}

static fr_status parse_entry(fr_st_file *f, const char *name, json_t *e, fr_st_tensor *t)
{
    const char *p = f->path;
    if (!name[0]) return fr_error(FR_ERR_PARSE, "safetensors '%s': a tensor has an empty name", p);
    if (!json_is_object(e)) return fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s' is not an object", p, name);
    json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) || json_array_size(off) != 2 ||
        json_object_size(e) != 3)
        return fr_error(FR_ERR_PARSE,
                        "safetensors '%s': tensor '%s' must have exactly dtype (string), shape (array) and "
                        "data_offsets ([begin, end])", p, name);
    t->dtype = fr_st_dtype_of(json_string_value(dt));
    if (t->dtype == FR_UNDEFINED)
        return fr_error(FR_ERR_UNSUPPORTED, "safetensors '%s': tensor '%s' has dtype '%s', which fp8run does not read",
                        p, name, json_string_value(dt));
    if (json_array_size(sh) > FR_MAX_RANK)
        return fr_error(FR_ERR_UNSUPPORTED, "safetensors '%s': tensor '%s' has rank %zu (at most %d)", p, name,
                        json_array_size(sh), FR_MAX_RANK);
    t->rank = (int)json_array_size(sh);
    size_t bytes = fr_dtype_size(t->dtype);
    t->numel = 1;
    for (int d = 0; d < t->rank; d++) {
        uint64_t v;
        size_t nb;
        if (!json_u64(json_array_get(sh, (size_t)d), &v) || v > INT64_MAX)
            return fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s': dim %d is not a non-negative integer", p,
                            name, d);
        t->dims[d] = (int64_t)v;
        if (!fr_mul_size(bytes, (size_t)v, &nb) || (uint64_t)nb > INT64_MAX)
            return fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s': the shape's byte size overflows", p, name);
        bytes = nb;
        t->numel *= (int64_t)v; /* bounded by bytes */
    }
    if (!json_u64(json_array_get(off, 0), &t->begin) || !json_u64(json_array_get(off, 1), &t->end) ||
        t->end < t->begin)
        return fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s': data_offsets are not [begin, end] with "
                        "0 <= begin <= end", p, name);
    if (t->end - t->begin != (uint64_t)bytes)
        return fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s': data_offsets span %llu bytes, its dtype and "
                        "shape need %zu", p, name, (unsigned long long)(t->end - t->begin), bytes);
    t->name = fr_strdup(name, "tensor name");
    return t->name ? FR_OK : FR_ERR_OOM;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const fr_st_tensor *)a)->name, ((const fr_st_tensor *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
    const fr_st_tensor *x = *(const fr_st_tensor *const *)a, *y = *(const fr_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Sorted by offset the tensors must tile [0, data_len) exactly: no overlap, no hole. */
static fr_status check_tiling(const fr_st_file *f, uint64_t data_len)
{
    const fr_st_tensor **o = fr_calloc((size_t)f->n + 1, sizeof *o, "safetensors offsets");
    if (!o) return FR_ERR_OOM;
    for (int i = 0; i < f->n; i++) o[i] = &f->t[i];
    qsort(o, (size_t)f->n, sizeof *o, by_offset);
    uint64_t at = 0;
    fr_status st = FR_OK;
    for (int i = 0; i < f->n && st == FR_OK; i++) {
        if (o[i]->end > data_len)
            st = fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s' ends at byte %llu, past the end of the data "
                          "(%llu bytes: the file is truncated)", f->path, o[i]->name,
                          (unsigned long long)o[i]->end, (unsigned long long)data_len);
        else if (o[i]->begin != at)
            st = fr_error(FR_ERR_PARSE, "safetensors '%s': tensor '%s' starts at byte %llu where byte %llu was "
                          "expected (%s)", f->path, o[i]->name, (unsigned long long)o[i]->begin,
                          (unsigned long long)at, o[i]->begin < at ? "it overlaps the tensor before" : "a hole");
        at = o[i]->end;
    }
    if (st == FR_OK && at != data_len)
        st = fr_error(FR_ERR_PARSE, "safetensors '%s': %llu bytes after the last tensor belong to none", f->path,
                      (unsigned long long)(data_len - at));
    free(o);
    return st;
}

static fr_status parse_header(fr_st_file *f, const char *text, size_t len, uint64_t data_len)
{
    json_error_t jerr;
    if (len == 0 || text[0] != '{')
        return fr_error(FR_ERR_PARSE, "safetensors '%s': the header does not start with '{'", f->path);
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fr_error(FR_ERR_PARSE, "safetensors '%s': header JSON: %s (line %d, column %d)", f->path, jerr.text,
                        jerr.line, jerr.column);
    fr_status st = FR_OK;
    f->t = fr_calloc(json_object_size(root) + 1, sizeof *f->t, "safetensors tensors");
    if (!f->t) st = FR_ERR_OOM;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (st != FR_OK) break;
        if (strcmp(k, "__metadata__") == 0) {
            st = parse_metadata(f, v);
        } else {
            st = parse_entry(f, k, v, &f->t[f->n]);
            if (f->t[f->n].name) f->n++;
        }
    }
    json_decref(root);
    if (st != FR_OK) return st;
    qsort(f->t, (size_t)f->n, sizeof *f->t, by_name);
    return check_tiling(f, data_len);
}

fr_status fr_st_open_fd(int fd, const char *path, fr_st_file **out)
{
    *out = NULL;
    fr_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return fr_error(FR_ERR_OOM, "out of memory opening safetensors '%s'", path);
    }
    f->fd = fd;
    f->path = fr_strdup(path, "path");
    if (!f->path) {
        fr_st_close(f);
        return FR_ERR_OOM;
    }
    struct stat sb;
    unsigned char le[8];
    fr_status st = FR_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = fr_error(FR_ERR_IO, "safetensors '%s' is not a regular file", path);
    else if ((uint64_t)sb.st_size < 8)
        st = fr_error(FR_ERR_PARSE, "safetensors '%s': %lld bytes, shorter than the 8-byte header length", path,
                      (long long)sb.st_size);
    else
        st = fr_onnx_pread_all(fd, le, 8, 0, path);
    if (st != FR_OK) {
        fr_st_close(f);
        return st;
    }
    uint64_t n = 0, size = (uint64_t)sb.st_size;
    for (int i = 7; i >= 0; i--) n = n << 8 | le[i];
    uint64_t cap = 0;
    st = fr_limit_get(FR_LIMIT_HEADER_BYTES, &cap, NULL);
    if (st == FR_OK && (n > cap || n > size - 8))
        st = fr_error(FR_ERR_PARSE, "safetensors '%s': header length %llu is over %s (%llu bytes)%s", path,
                      (unsigned long long)n, n > cap ? "the limit" : "the file's size",
                      (unsigned long long)(n > cap ? cap : size - 8),
                      n > cap ? " (FP8RUN_MAX_HEADER_BYTES raises it)" : "");
    if (st != FR_OK) {
        fr_st_close(f);
        return st;
    }
    char *text = fr_malloc((size_t)n + 1, "safetensors header");
    st = text ? fr_onnx_pread_all(fd, text, (size_t)n, 8, path) : FR_ERR_OOM;
    f->data_start = 8 + n;
    if (st == FR_OK) st = parse_header(f, text, (size_t)n, size - 8 - n);
    free(text);
    if (st != FR_OK) {
        fr_st_close(f);
        return st;
    }
    *out = f;
    return FR_OK;
}

fr_status fr_st_open(const char *path, fr_st_file **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fr_error(FR_ERR_IO, "cannot open safetensors '%s': %s", path, strerror(errno));
    return fr_st_open_fd(fd, path, out);
}

const fr_st_tensor *fr_st_find(const fr_st_file *f, const char *name)
{
    if (!f || !name || f->n == 0) return NULL;
    fr_st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, by_name);
}

const char *fr_st_meta(const fr_st_file *f, const char *key)
{
    for (int i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

/* ---- reading ---- */

fr_status fr_st_read(const fr_st_file *f, const fr_st_tensor *t, uint64_t off, void *dst, size_t n)
{
    if (off > t->end - t->begin || n > t->end - t->begin - off)
        return fr_error(FR_ERR_INTERNAL, "safetensors '%s': read of %zu bytes at %llu outside tensor '%s'", f->path, n,
                        (unsigned long long)off, t->name);
    fr_status st = fr_onnx_pread_all(f->fd, dst, n, f->data_start + t->begin + off, f->path);
    if (st != FR_OK) return fr_error_context(st, "tensor '%s'", t->name);
    return FR_OK;
}

static float decode(fr_dtype dt, const unsigned char *p)
{
    uint16_t h;
    switch (dt) {
    case FR_F64: {
        double d;
        memcpy(&d, p, 8);
        return (float)d;
    }
    case FR_F16: memcpy(&h, p, 2); return fr_f16_to_f32(h);
    case FR_BF16: memcpy(&h, p, 2); return fr_bf16_to_f32(h);
    case FR_F8E4M3: return fr_e4m3_to_f32(*p);
    case FR_F8E5M2: return fr_e5m2_to_f32(*p);
    default: return 0.0f; /* F32 is copied, other types refused before */
    }
}

fr_status fr_st_read_f32(const fr_st_file *f, const fr_st_tensor *t, float *dst)
{
    fr_dtype dt = t->dtype;
    size_t es = fr_dtype_size(dt);
    if (dt == FR_F32) return fr_st_read(f, t, 0, dst, (size_t)(t->end - t->begin));
    if (dt != FR_F64 && dt != FR_F16 && dt != FR_BF16 && dt != FR_F8E4M3 && dt != FR_F8E5M2)
        return fr_error(FR_ERR_UNSUPPORTED, "safetensors '%s': tensor '%s' is %s, not a floating-point type", f->path,
                        t->name, fr_st_dtype_str(dt));
    enum { CHUNK = 1 << 16 };
    unsigned char *buf = fr_malloc(CHUNK * es, "safetensors read buffer");
    if (!buf) return FR_ERR_OOM;
    fr_status st = FR_OK;
    for (int64_t i = 0; i < t->numel && st == FR_OK; i += CHUNK) {
        int64_t k = t->numel - i < CHUNK ? t->numel - i : CHUNK;
        st = fr_st_read(f, t, (uint64_t)i * es, buf, (size_t)k * es);
        for (int64_t j = 0; st == FR_OK && j < k; j++) dst[i + j] = decode(dt, buf + (size_t)j * es);
    }
    free(buf);
    return st;
}

/* ---- writing ---- */

uint64_t fr_st_out_bytes(const fr_st_out *t, int *ok)
{
    size_t b = fr_dtype_size(t->dtype), nb;
    *ok = fr_st_dtype_str(t->dtype) != NULL && t->rank >= 0 && t->rank <= FR_MAX_RANK;
    for (int d = 0; *ok && d < t->rank; d++) {
        *ok = t->dims[d] >= 0 && fr_mul_size(b, (size_t)t->dims[d], &nb);
        b = nb;
    }
    return *ok ? (uint64_t)b : 0;
}

/* The header JSON (compact; keys: metadata, then tensors in the given order). */
static fr_status header_json(const char *path, const fr_st_out *t, int n, const char *const *meta, int n_meta,
                             char **out)
{
    fr_status st = FR_OK;
    json_t *root = json_object(), *m = json_object();
    int ok = root && m && json_object_set_new(root, "__metadata__", m) == 0;
    for (int i = 0; ok && i < n_meta; i++) {
        json_t *s = json_string(meta[2 * i + 1]);
        ok = s && json_object_set_new(m, meta[2 * i], s) == 0;
    }
    uint64_t at = 0;
    for (int i = 0; ok && i < n; i++) {
        int good;
        uint64_t nb = fr_st_out_bytes(&t[i], &good);
        json_t *e = json_object(), *sh = json_array(), *off = json_array();
        json_t *ds = good ? json_string(fr_st_dtype_str(t[i].dtype)) : NULL;
        ok = good && e && sh && off && ds;
        for (int d = 0; ok && d < t[i].rank; d++) ok = json_array_append_new(sh, json_integer(t[i].dims[d])) == 0;
        ok = ok && json_array_append_new(off, json_integer((json_int_t)at)) == 0 &&
             json_array_append_new(off, json_integer((json_int_t)(at + nb))) == 0;
        ok = ok && json_object_set(e, "dtype", ds) == 0 && json_object_set(e, "shape", sh) == 0 &&
             json_object_set(e, "data_offsets", off) == 0;
        if (ok && json_object_get(root, t[i].name)) {
            st = fr_error(FR_ERR_INVALID_ARG, "safetensors '%s': tensor '%s' given twice", path, t[i].name);
            ok = 0;
        } else if (!good) {
            st = fr_error(FR_ERR_UNSUPPORTED, "safetensors '%s': tensor '%s' (%s) cannot be written", path, t[i].name,
                     fr_dtype_name(t[i].dtype));
        }
        ok = ok && json_object_set(root, t[i].name, e) == 0;
        json_decref(e);
        json_decref(sh);
        json_decref(off);
        json_decref(ds);
        at += nb;
    }
    *out = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (*out) return FR_OK;
    return st != FR_OK ? st
                       : fr_error(FR_ERR_OOM, "safetensors '%s': the header cannot be built (out of memory, or a name "
                                  "that is not UTF-8)", path);
}

fr_status fr_st_write_pending(const char *path, const fr_st_out *t, int n, const char *const *meta, int n_meta,
                              fr_atomic_file *af)
{
    af->fd = -1;
    af->tmp = af->path = NULL;
    char *js;
    FR_TRY(header_json(path, t, n, meta, n_meta, &js));
    size_t len = strlen(js), padded = (len + 7) / 8 * 8;
    char *hdr = fr_malloc(8 + padded, "safetensors header");
    if (!hdr) {
        free(js);
        return FR_ERR_OOM;
    }
    for (int i = 0; i < 8; i++) hdr[i] = (char)(((uint64_t)padded >> (8 * i)) & 0xFF);
    memcpy(hdr + 8, js, len);
    memset(hdr + 8 + len, ' ', padded - len);
    free(js);
    fr_status st = fr_atomic_open(path, af);
    if (st == FR_OK) st = fr_atomic_write(af, hdr, 8 + padded);
    for (int i = 0; st == FR_OK && i < n; i++) {
        int ok;
        uint64_t nb = fr_st_out_bytes(&t[i], &ok);
        if (nb) st = fr_atomic_write(af, t[i].data, (size_t)nb);
    }
    free(hdr);
    if (st == FR_OK) st = fr_atomic_finish(af);
    if (st != FR_OK) fr_atomic_abort(af);
    return st;
}

fr_status fr_st_write(const char *path, const fr_st_out *t, int n, const char *const *meta, int n_meta)
{
    fr_atomic_file af;
    FR_TRY(fr_st_write_pending(path, t, n, meta, n_meta, &af));
    return fr_atomic_commit(&af);
}
