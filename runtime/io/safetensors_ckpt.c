/* Safetensors checkpoints: one file or an index of shards, FP8 block-scaled weights, and the
 * sharded writer (see safetensors.h). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/limits.h"
#include "graph/onnx_io_util.h"
#include "graph/safe_io.h"
#include "runtime/io/safetensors.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define SCALE_SUFFIX "_scale_inv"

void fr_st_ckpt_close(fr_st_ckpt *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_files; i++) fr_st_close(c->files[i]);
    free(c->files);
    free(c->e);
    free(c->path);
    free(c);
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const fr_st_entry *)a)->name, ((const fr_st_entry *)b)->name);
}

int fr_st_ckpt_find(const fr_st_ckpt *c, const char *name)
{
    if (!c || !name || c->n == 0) return -1;
    fr_st_entry key = {.name = name};
    const fr_st_entry *e = bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, entry_cmp);
    return e ? (int)(e - c->e) : -1;
}

static int is_fp8(fr_dtype dt) { return dt == FR_F8E4M3 || dt == FR_F8E5M2; }

/* The entry called base + suffix; -1 when absent (or the name does not fit). */
static int find_suffixed(const fr_st_ckpt *c, const char *base, size_t base_len, const char *suffix)
{
    char name[4096];
    if (base_len + strlen(suffix) >= sizeof name) return -1;
    memcpy(name, base, base_len);
    strcpy(name + base_len, suffix);
    return fr_st_ckpt_find(c, name);
}

int fr_st_ckpt_is_aux(const fr_st_ckpt *c, int i)
{
    const char *n = c->e[i].name;
    size_t len = strlen(n), sl = strlen(SCALE_SUFFIX);
    if (len <= sl || strcmp(n + len - sl, SCALE_SUFFIX) != 0) return 0;
    int w = find_suffixed(c, n, len - sl, "");
    return w >= 0 && is_fp8(c->e[w].t->dtype);
}

/* ---- opening ---- */

static fr_status add_file(fr_st_ckpt *c, fr_st_file *f)
{
    fr_st_file **nf = fr_realloc_array(c->files, (size_t)c->n_files + 1, sizeof *nf, "safetensors shards");
    if (!nf) {
        fr_st_close(f);
        return FR_ERR_OOM;
    }
    c->files = nf;
    c->files[c->n_files++] = f;
    return FR_OK;
}

static fr_status entries_of_single(fr_st_ckpt *c)
{
    const fr_st_file *f = c->files[0];
    c->e = fr_calloc((size_t)f->n + 1, sizeof *c->e, "safetensors entries");
    if (!c->e) return FR_ERR_OOM;
    for (int i = 0; i < f->n; i++) c->e[c->n++] = (fr_st_entry){f->t[i].name, 0, &f->t[i]};
    return FR_OK; /* already sorted by name */
}

/* The shard file called `file` (opened once), confined to dir. */
static fr_status shard(fr_st_ckpt *c, const char *dir, const char *file, int *idx)
{
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(fr_onnx_basename(c->files[i]->path), file) == 0 && strchr(file, '/') == NULL) {
            *idx = i;
            return FR_OK;
        }
    if (strchr(file, '/'))
        return fr_error(FR_ERR_PARSE, "safetensors index '%s': shard '%s' is not a plain file name in its folder",
                        c->path, file);
    int fd;
    /* no symlink, no second hard link: the index must not send us elsewhere (graph/safe_io.h) */
    fr_status ost = fr_open_beneath(dir, file, "safetensors shard", FR_OPEN_SINGLE_LINK, &fd, NULL);
    if (ost != FR_OK) return fr_error_context(ost, "safetensors index '%s'", c->path);
    char *full = fr_onnx_join(dir, file);
    if (!full) {
        close(fd);
        return FR_ERR_OOM;
    }
    fr_st_file *f;
    fr_status st = fr_st_open_fd(fd, full, &f);
    free(full);
    if (st != FR_OK) return st;
    FR_TRY(add_file(c, f));
    *idx = c->n_files - 1;
    return FR_OK;
}

static fr_status read_index(fr_st_ckpt *c, const char *index_path, const char *dir)
{
    json_error_t jerr;
    void *data;
    size_t len;
    struct stat sb;
    uint64_t cap;
    FR_TRY(fr_limit_get(FR_LIMIT_HEADER_BYTES, &cap, NULL));
    if (stat(index_path, &sb) == 0 && (uint64_t)sb.st_size > cap) /* refused before reading */
        return fr_error(FR_ERR_PARSE, "safetensors index '%s': %lld bytes, over the limit of %llu (%s raises it)",
                        index_path, (long long)sb.st_size, (unsigned long long)cap, fr_limit_env(FR_LIMIT_HEADER_BYTES));
    FR_TRY(fr_onnx_read_file(index_path, &data, &len));
    json_t *root = len <= cap ? json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    free(data);
    if (!root)
        return fr_error(FR_ERR_PARSE, "safetensors index '%s': %s", index_path,
                        len > cap ? "over the FP8RUN_MAX_HEADER_BYTES limit" : jerr.text);
    json_t *wm = json_object_get(root, "weight_map");
    fr_status st = json_is_object(wm) ? FR_OK
                                      : fr_error(FR_ERR_PARSE, "safetensors index '%s': no \"weight_map\" object",
                                                 index_path);
    if (st == FR_OK) c->e = fr_calloc(json_object_size(wm) + 1, sizeof *c->e, "safetensors entries");
    if (st == FR_OK && !c->e) st = FR_ERR_OOM;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        int fi = -1;
        if (st != FR_OK) break;
        if (!json_is_string(v)) {
            st = fr_error(FR_ERR_PARSE, "safetensors index '%s': weight_map['%s'] is not a file name", index_path, k);
            break;
        }
        st = shard(c, dir, json_string_value(v), &fi);
        const fr_st_tensor *t = st == FR_OK ? fr_st_find(c->files[fi], k) : NULL;
        if (st == FR_OK && !t)
            st = fr_error(FR_ERR_PARSE, "safetensors index '%s': tensor '%s' is not in its shard '%s'", index_path, k,
                          json_string_value(v));
        if (st == FR_OK) c->e[c->n++] = (fr_st_entry){t->name, fi, t};
    }
    json_decref(root);
    /* every shard tensor must be one the index maps to that shard */
    if (st == FR_OK) qsort(c->e, (size_t)c->n, sizeof *c->e, entry_cmp);
    for (int i = 0; i < c->n_files && st == FR_OK; i++)
        for (int j = 0; j < c->files[i]->n && st == FR_OK; j++) {
            int e = fr_st_ckpt_find(c, c->files[i]->t[j].name);
            if (e < 0 || c->e[e].file != i)
                st = fr_error(FR_ERR_PARSE, "safetensors index '%s': tensor '%s' of shard '%s' is not mapped to it by "
                              "the weight_map", index_path, c->files[i]->t[j].name, c->files[i]->path);
        }
    return st;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

fr_status fr_st_ckpt_open(const char *path, fr_st_ckpt **out)
{
    *out = NULL;
    fr_st_ckpt *c = calloc(1, sizeof *c);
    if (!c) return fr_error(FR_ERR_OOM, "out of memory opening '%s'", path);
    c->path = fr_strdup(path, "path");
    fr_status st = c->path ? FR_OK : FR_ERR_OOM;
    char *index = NULL, *single = NULL, *dir = NULL;
    if (st == FR_OK && is_dir(path)) {
        index = fr_onnx_join(path, INDEX_NAME);
        single = fr_onnx_join(path, SINGLE_NAME);
        dir = fr_strdup(path, "path");
        if (!index || !single || !dir) st = FR_ERR_OOM;
        else if (access(index, F_OK) != 0) {
            free(index);
            index = NULL;
            if (access(single, F_OK) != 0)
                st = fr_error(FR_ERR_IO, "folder '%s' holds neither " SINGLE_NAME " nor " INDEX_NAME, path);
        }
    } else if (st == FR_OK && ends_with(path, ".index.json")) {
        index = fr_strdup(path, "path");
        dir = fr_onnx_dirname(path);
        if (!index || !dir) st = FR_ERR_OOM;
    } else if (st == FR_OK) {
        single = fr_strdup(path, "path");
        if (!single) st = FR_ERR_OOM;
    }
    if (st == FR_OK && index) {
        free(c->path);
        c->path = index;
        index = NULL;
        st = read_index(c, c->path, dir);
    } else if (st == FR_OK) {
        fr_st_file *f;
        st = fr_st_open(single, &f);
        if (st == FR_OK) st = add_file(c, f);
        if (st == FR_OK) st = entries_of_single(c);
    }
    free(index);
    free(single);
    free(dir);
    if (st != FR_OK) {
        fr_st_ckpt_close(c);
        return st;
    }
    *out = c;
    return FR_OK;
}

/* ---- reading with FP8 block scales ---- */

/* a + b - 1 would overflow for a dim near INT64_MAX (a zero-size tensor's other dim) */
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

fr_status fr_st_ckpt_read_f32(const fr_st_ckpt *c, int i, float *dst)
{
    const fr_st_entry *e = &c->e[i];
    const fr_st_file *f = c->files[e->file];
    FR_TRY(fr_st_read_f32(f, e->t, dst));
    if (!is_fp8(e->t->dtype)) return FR_OK;
    size_t len = strlen(e->name);
    int s = find_suffixed(c, e->name, len, SCALE_SUFFIX);
    if (s < 0) {
        int other = find_suffixed(c, e->name, len, "_scale");
        if (other >= 0)
            return fr_error(FR_ERR_UNSUPPORTED, "safetensors '%s': fp8 tensor '%s' comes with '%s' (a per-tensor or "
                            "per-channel scale); only 128x128 block scales ('%s" SCALE_SUFFIX "') are read", f->path,
                            e->name, c->e[other].name, e->name);
        return FR_OK; /* plain fp8 values */
    }
    const fr_st_tensor *w = e->t, *st = c->e[s].t;
    if (w->rank != 2 || st->rank != 2 || st->dims[0] != ceil_div(w->dims[0], FR_ST_BLOCK) ||
        st->dims[1] != ceil_div(w->dims[1], FR_ST_BLOCK))
        return fr_error(FR_ERR_SHAPE, "safetensors '%s': fp8 weight '%s' %s: its block scale '%s' must be [%lld, %lld] "
                        "(128x128 blocks of a 2-D weight)", f->path, e->name, w->rank == 2 ? "[R, C]" : "is not 2-D",
                        c->e[s].name, (long long)ceil_div(w->rank > 0 ? w->dims[0] : 0, FR_ST_BLOCK),
                        (long long)ceil_div(w->rank > 1 ? w->dims[1] : 0, FR_ST_BLOCK));
    float *scale = fr_malloc((size_t)st->numel * sizeof *scale + 1, "block scales");
    if (!scale) return FR_ERR_OOM;
    fr_status r = fr_st_read_f32(c->files[c->e[s].file], st, scale);
    const int64_t R = w->dims[0], C = w->dims[1], SC = st->dims[1];
    /* C == 0: no element, however many rows a zero-size weight claims */
    for (int64_t row = 0; r == FR_OK && C > 0 && row < R; row++) {
        const float *srow = scale + (row / FR_ST_BLOCK) * SC;
        for (int64_t col = 0; col < C; col++) dst[row * C + col] *= srow[col / FR_ST_BLOCK];
    }
    free(scale);
    return r;
}

/* ---- writing ---- */

static fr_status write_index(const char *dir, const fr_st_out *t, int n, const int *shard_of, int n_shards,
                             uint64_t total)
{
    char name[64];
    json_t *root = json_object(), *meta = json_object(), *wm = json_object();
    int ok = root && meta && wm && json_object_set(root, "metadata", meta) == 0 &&
             json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) == 0 &&
             json_object_set(root, "weight_map", wm) == 0;
    for (int i = 0; ok && i < n; i++) {
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", shard_of[i] + 1, n_shards);
        ok = json_object_set_new(wm, t[i].name, json_string(name)) == 0;
    }
    char *js = ok ? json_dumps(root, JSON_INDENT(2)) : NULL;
    json_decref(meta);
    json_decref(wm);
    json_decref(root);
    char *path = fr_onnx_join(dir, INDEX_NAME);
    fr_status st = js && path ? FR_OK : fr_error(FR_ERR_OOM, "cannot build the safetensors index for '%s'", dir);
    fr_atomic_file af;
    if (st == FR_OK) st = fr_atomic_open(path, &af);
    if (st == FR_OK) {
        st = fr_atomic_write(&af, js, strlen(js));
        if (st == FR_OK) st = fr_atomic_write(&af, "\n", 1);
        if (st == FR_OK) st = fr_atomic_finish(&af);
        if (st == FR_OK) st = fr_atomic_commit(&af);
        else fr_atomic_abort(&af);
    }
    free(js);
    free(path);
    return st;
}

/* A file of the other layout left from an earlier export would shadow this one. */
static void remove_stale(const char *dir, const char *name)
{
    char *p = fr_onnx_join(dir, name);
    if (p) unlink(p);
    free(p);
}

fr_status fr_st_ckpt_write(const char *dir, const fr_st_out *t, int n, uint64_t max_shard_bytes)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fr_error(FR_ERR_IO, "cannot create folder '%s': %s", dir, strerror(errno));
    if (!is_dir(dir)) return fr_error(FR_ERR_IO, "'%s' is not a folder", dir);
    int *shard_of = fr_calloc((size_t)n + 1, sizeof *shard_of, "shard table");
    if (!shard_of) return FR_ERR_OOM;
    uint64_t total = 0, in_shard = 0;
    int k = 0;
    fr_status st = FR_OK;
    for (int i = 0; i < n && st == FR_OK; i++) {
        int ok;
        uint64_t b = fr_st_out_bytes(&t[i], &ok);
        if (!ok) st = fr_error(FR_ERR_UNSUPPORTED, "'%s': tensor '%s' (%s) cannot be written as safetensors", dir,
                               t[i].name, fr_dtype_name(t[i].dtype));
        if (max_shard_bytes && in_shard > 0 && in_shard + b > max_shard_bytes) {
            k++;
            in_shard = 0;
        }
        shard_of[i] = k;
        in_shard += b;
        total += b;
    }
    const int n_shards = n ? k + 1 : 1;
    static const char *const meta[] = {"format", "pt"};
    char name[64], *path = NULL;
    for (int s = 0, first = 0; s < n_shards && st == FR_OK; s++) {
        int last = first;
        while (last < n && shard_of[last] == s) last++;
        if (n_shards == 1) snprintf(name, sizeof name, SINGLE_NAME);
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        path = fr_onnx_join(dir, name);
        st = path ? fr_st_write(path, t + first, last - first, meta, 1) : FR_ERR_OOM;
        free(path);
        first = last;
    }
    if (st == FR_OK && n_shards > 1) st = write_index(dir, t, n, shard_of, n_shards, total);
    if (st == FR_OK) remove_stale(dir, n_shards > 1 ? SINGLE_NAME : INDEX_NAME);
    free(shard_of);
    return st;
}
