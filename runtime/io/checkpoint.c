/* Checkpoint writer and verified reader (see checkpoint.h and schema/checkpoint.proto). */
#include "runtime/io/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/name_map.h"
#include "runtime/io/crc32c.h"
#include "graph/limits.h"
#include "graph/pb_budget.h"
#include "graph/safe_io.h"
#include "schema/checkpoint.pb-c.h"

#define CKPT_MAGIC "FP8RCKPT"
#define CKPT_END "FP8R-END"
#define CKPT_VERSION 1u
#define CKPT_ALIGN 64u
#define TRAILER_BYTES 32u

struct fr_ckpt_writer {
    int fd;
    char *path, *tmp_path;
    uint64_t off;
    uint32_t crc;
    Fp8run__CheckpointTensor **tensors;
    size_t n_tensors;
    Fp8run__CheckpointEntry **entries;
    size_t n_entries;
};

/* The I/O the writer does, replaceable by tests (fault injection: ENOSPC, EIO, short writes). */
ssize_t (*fr_ckpt_io_write)(int fd, const void *buf, size_t n) = write;
int (*fr_ckpt_io_fsync)(int fd) = fsync;

static fr_status write_all(fr_ckpt_writer *w, const void *data, size_t n)
{
    const unsigned char *p = data;
    w->crc = fr_crc32c(w->crc, data, n);
    int fault = fr_write_fault("write"); /* FP8RUN_TEST_WRITE_FAULT, as every write under the rule */
    if (fault && n)
        return fr_error(FR_ERR_IO, "writing checkpoint '%s' failed: %s (the previous file, if any, is kept)", w->path,
                        strerror(fault));
    while (n) {
        ssize_t k = fr_ckpt_io_write(w->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return fr_error(FR_ERR_IO, "writing checkpoint '%s' failed: %s (the previous file, if any, is kept)",
                            w->path, k < 0 ? strerror(errno) : "nothing written");
        p += k;
        n -= (size_t)k;
        w->off += (uint64_t)k;
    }
    return FR_OK;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static void free_meta_arrays(fr_ckpt_writer *w)
{
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i]->name);
        free(w->tensors[i]->kind);
        free(w->tensors[i]->dims);
        free(w->tensors[i]);
    }
    for (size_t i = 0; i < w->n_entries; i++) {
        free(w->entries[i]->key);
        free(w->entries[i]->value.data);
        free(w->entries[i]);
    }
    free(w->tensors);
    free(w->entries);
}

static void writer_free(fr_ckpt_writer *w)
{
    free_meta_arrays(w);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

fr_status fr_ckpt_writer_open(const char *path, fr_ckpt_writer **out)
{
    *out = NULL;
    fr_ckpt_writer *w = fr_calloc(1, sizeof *w, "checkpoint writer");
    if (!w) return FR_ERR_OOM;
    w->fd = -1;
    size_t n = strlen(path) + 32;
    w->path = fr_strdup(path, "checkpoint path");
    w->tmp_path = fr_malloc(n, "checkpoint path");
    if (!w->path || !w->tmp_path) {
        writer_free(w);
        return FR_ERR_OOM;
    }
    for (int attempt = 0; attempt < 100 && w->fd < 0; attempt++) {
        snprintf(w->tmp_path, n, "%s.tmp.%ld.%d", path, (long)getpid(), attempt);
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (w->fd < 0 && errno != EEXIST) break;
    }
    if (w->fd < 0) {
        fr_status st = fr_error(FR_ERR_IO, "cannot create checkpoint file next to '%s': %s", path,
                                strerror(errno));
        writer_free(w);
        return st;
    }
    unsigned char hdr[16];
    memcpy(hdr, CKPT_MAGIC, 8);
    put_u32(hdr + 8, CKPT_VERSION);
    put_u32(hdr + 12, 0);
    fr_status st = write_all(w, hdr, sizeof hdr);
    if (st != FR_OK) {
        fr_ckpt_writer_abort(w);
        return st;
    }
    *out = w;
    return FR_OK;
}

static fr_status pad_to(fr_ckpt_writer *w, uint64_t align)
{
    static const unsigned char zeros[CKPT_ALIGN];
    uint64_t rem = w->off % align;
    return rem ? write_all(w, zeros, (size_t)(align - rem)) : FR_OK;
}

fr_status fr_ckpt_write_tensor(fr_ckpt_writer *w, const char *name, const char *kind,
                               fr_dtype dtype, int rank, const int64_t *dims, const void *data)
{
    int64_t numel;
    size_t es = fr_dtype_size(dtype), nbytes;
    FR_TRY(fr_shape_numel(rank, dims, name, &numel));
    if (!es || !fr_mul_size((size_t)numel, es, &nbytes))
        return fr_error(FR_ERR_INVALID_ARG, "checkpoint tensor '%s': bad dtype or size", name);
    FR_TRY(pad_to(w, CKPT_ALIGN));
    Fp8run__CheckpointTensor *t = fr_calloc(1, sizeof *t, "checkpoint tensor");
    Fp8run__CheckpointTensor **arr =
        fr_realloc_array(w->tensors, w->n_tensors + 1, sizeof *arr, "checkpoint index");
    if (!t || !arr) {
        free(t);
        if (arr) w->tensors = arr;
        return FR_ERR_OOM;
    }
    w->tensors = arr;
    fp8run__checkpoint_tensor__init(t);
    t->name = fr_strdup(name, "checkpoint tensor name");
    t->kind = fr_strdup(kind, "checkpoint tensor kind");
    t->dims = fr_calloc((size_t)(rank > 0 ? rank : 1), sizeof(int64_t), "checkpoint dims");
    w->tensors[w->n_tensors++] = t;
    if (!t->name || !t->kind || !t->dims) return FR_ERR_OOM;
    t->n_dims = (size_t)rank;
    memcpy(t->dims, dims, (size_t)rank * sizeof(int64_t));
    t->has_dtype = t->has_offset = t->has_nbytes = 1;
    t->dtype = (int32_t)dtype;
    t->offset = w->off;
    t->nbytes = nbytes;
    return nbytes ? write_all(w, data, nbytes) : FR_OK;
}

fr_status fr_ckpt_write_entry(fr_ckpt_writer *w, const char *key, const void *value, size_t len)
{
    Fp8run__CheckpointEntry *e = fr_calloc(1, sizeof *e, "checkpoint entry");
    Fp8run__CheckpointEntry **arr =
        fr_realloc_array(w->entries, w->n_entries + 1, sizeof *arr, "checkpoint entries");
    if (!e || !arr) {
        free(e);
        if (arr) w->entries = arr;
        return FR_ERR_OOM;
    }
    w->entries = arr;
    fp8run__checkpoint_entry__init(e);
    e->key = fr_strdup(key, "checkpoint entry key");
    e->value.data = fr_malloc(len, "checkpoint entry");
    w->entries[w->n_entries++] = e;
    if (!e->key || !e->value.data) return FR_ERR_OOM;
    if (len) memcpy(e->value.data, value, len);
    e->value.len = len;
    e->has_value = 1;
    return FR_OK;
}

static fr_status fsync_dir_of(const char *path)
{
    char *copy = fr_strdup(path, "path");
    if (!copy) return FR_ERR_OOM;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(copy);
    if (dfd < 0) return FR_OK; /* best effort: the rename itself has happened */
    fsync(dfd);
    close(dfd);
    return FR_OK;
}

fr_status fr_ckpt_writer_commit(fr_ckpt_writer *w)
{
    Fp8run__CheckpointMeta meta;
    fp8run__checkpoint_meta__init(&meta);
    meta.has_format_version = 1;
    meta.format_version = CKPT_VERSION;
    meta.n_tensors = w->n_tensors;
    meta.tensors = w->tensors;
    meta.n_entries = w->n_entries;
    meta.entries = w->entries;
    size_t mlen = fp8run__checkpoint_meta__get_packed_size(&meta);
    unsigned char *mbuf = fr_malloc(mlen, "checkpoint metadata");
    fr_status st = mbuf ? FR_OK : FR_ERR_OOM;
    uint64_t moff = w->off;
    if (st == FR_OK) {
        fp8run__checkpoint_meta__pack(&meta, mbuf);
        st = write_all(w, mbuf, mlen);
    }
    free(mbuf);
    if (st == FR_OK) {
        unsigned char tr[TRAILER_BYTES];
        put_u64(tr, moff);
        put_u64(tr + 8, mlen);
        uint32_t crc = fr_crc32c(w->crc, tr, 16);
        put_u32(tr + 16, crc);
        put_u32(tr + 20, 0);
        memcpy(tr + 24, CKPT_END, 8);
        st = write_all(w, tr, sizeof tr);
    }
    if (st == FR_OK && (fr_write_fault("fsync") || fr_ckpt_io_fsync(w->fd) != 0))
        st = fr_error(FR_ERR_IO, "fsync of checkpoint '%s' failed: %s (the previous file, if any, is kept)", w->path,
                      strerror(fr_write_fault("fsync") ? EIO : errno));
    if (close(w->fd) != 0 && st == FR_OK)
        st = fr_error(FR_ERR_IO, "closing checkpoint '%s' failed: %s", w->tmp_path, strerror(errno));
    w->fd = -1;
    if (st == FR_OK && (fr_write_fault("rename") || rename(w->tmp_path, w->path) != 0))
        st = fr_error(FR_ERR_IO, "cannot move checkpoint into place at '%s': %s (the previous file, if any, is kept)",
                      w->path, strerror(fr_write_fault("rename") ? EIO : errno));
    if (st != FR_OK) {
        unlink(w->tmp_path);
    } else {
        st = fsync_dir_of(w->path);
    }
    writer_free(w);
    return st;
}

void fr_ckpt_writer_abort(fr_ckpt_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    unlink(w->tmp_path);
    writer_free(w);
}

/* ---- reader ---- */

struct fr_ckpt {
    char *path;
    unsigned char *map;
    size_t size;
    Fp8run__CheckpointMeta *meta;
    fr_pb_budget budget; /* meta's allocator (FP8RUN_MAX_DECODE_BYTES): c must not move */
    fr_ckpt_tensor *tensors;
    char **keys;       /* "kind\x1fname" per tensor, for `index` */
    fr_name_map *index; /* key -> tensor: lookups stay O(1) on a file with millions of tensors */
};

void fr_ckpt_close(fr_ckpt *c)
{
    if (!c) return;
    if (c->keys)
        for (size_t i = 0; i < c->meta->n_tensors; i++) free(c->keys[i]);
    free(c->keys);
    fr_name_map_free(c->index);
    if (c->meta) fp8run__checkpoint_meta__free_unpacked(c->meta, &c->budget.alloc);
    if (c->map) munmap(c->map, c->size);
    free(c->tensors);
    free(c->path);
    free(c);
}

static fr_status bad(fr_ckpt *c, const char *what)
{
    fr_status st = fr_error(FR_ERR_PARSE, "checkpoint '%s' is not usable: %s", c->path, what);
    fr_ckpt_close(c);
    return st;
}

static char *tensor_key(const char *name, const char *kind)
{
    size_t a = strlen(kind), b = strlen(name);
    char *k = fr_malloc(a + b + 2, "checkpoint index key");
    if (k) {
        memcpy(k, kind, a);
        k[a] = '\x1f';
        memcpy(k + a + 1, name, b + 1);
    }
    return k;
}

static fr_status index_tensors(fr_ckpt *c)
{
    size_t n = c->meta->n_tensors;
    if (n > INT_MAX) return fr_error(FR_ERR_PARSE, "it lists %zu tensors", n);
    c->keys = fr_calloc(n + 1, sizeof *c->keys, "checkpoint index");
    if (!c->keys) return FR_ERR_OOM;
    FR_TRY(fr_name_map_new(&c->index));
    for (size_t i = 0; i < n; i++) {
        c->keys[i] = tensor_key(c->tensors[i].name, c->tensors[i].kind);
        if (!c->keys[i]) return FR_ERR_OOM;
        if (fr_name_map_get(c->index, c->keys[i]) >= 0)
            return fr_error(FR_ERR_PARSE, "tensor '%.200s' (%.100s) is listed twice", c->tensors[i].name,
                            c->tensors[i].kind);
        FR_TRY(fr_name_map_put(c->index, c->keys[i], (int)i));
    }
    return FR_OK;
}

fr_status fr_ckpt_open(const char *path, fr_ckpt **out)
{
    *out = NULL;
    fr_ckpt *c = fr_calloc(1, sizeof *c, "checkpoint");
    if (!c) return FR_ERR_OOM;
    c->path = fr_strdup(path, "checkpoint path");
    if (!c->path) {
        free(c);
        return FR_ERR_OOM;
    }
    int fd;
    struct stat sb;
    fr_status ost = fr_open_regular(path, "checkpoint", 0, &fd, &sb);
    if (ost != FR_OK) {
        fr_ckpt_close(c);
        return ost;
    }
    c->size = (size_t)sb.st_size;
    if (c->size < 16 + TRAILER_BYTES) {
        close(fd);
        return bad(c, "the file is truncated (too short for header and trailer)");
    }
    void *m = mmap(NULL, c->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fr_status st = fr_error(FR_ERR_IO, "cannot map checkpoint '%s': %s", path, strerror(errno));
        fr_ckpt_close(c);
        return st;
    }
    c->map = m;
    if (memcmp(c->map, CKPT_MAGIC, 8) != 0) return bad(c, "wrong magic (not an fp8run checkpoint)");
    if (get_u32(c->map + 8) != CKPT_VERSION) {
        char msg[160];
        snprintf(msg, sizeof msg, "its container is version %u; this build reads version %u", get_u32(c->map + 8),
                 CKPT_VERSION);
        return bad(c, msg);
    }
    const unsigned char *tr = c->map + c->size - TRAILER_BYTES;
    if (memcmp(tr + 24, CKPT_END, 8) != 0)
        return bad(c, "the end marker is missing (the file is truncated or was not completely written)");
    uint64_t moff = get_u64(tr), mlen = get_u64(tr + 8);
    uint32_t crc = fr_crc32c(0, c->map, c->size - TRAILER_BYTES);
    crc = fr_crc32c(crc, tr, 16);
    if (crc != get_u32(tr + 16)) return bad(c, "checksum mismatch (the file is corrupted)");
    if (moff < 16 || moff > c->size - TRAILER_BYTES || mlen != c->size - TRAILER_BYTES - moff)
        return bad(c, "the metadata position is inconsistent");
    fr_status bst = fr_pb_budget_init(&c->budget, (size_t)mlen);
    if (bst != FR_OK) {
        fr_ckpt_close(c);
        return bst;
    }
    c->meta = fp8run__checkpoint_meta__unpack(&c->budget.alloc, (size_t)mlen, c->map + moff);
    if (!c->meta && c->budget.exceeded) {
        char msg[200];
        snprintf(msg, sizeof msg, "decoding its index needs more than %zu bytes of memory (%s raises the limit)",
                 c->budget.limit, fr_limit_env(FR_LIMIT_DECODE_BYTES));
        return bad(c, msg);
    }
    if (!c->meta) return bad(c, "the metadata does not decode");
    if (c->meta->has_format_version && c->meta->format_version != CKPT_VERSION) {
        char msg[160];
        snprintf(msg, sizeof msg, "its index is format version %u; this build reads version %u",
                 (unsigned)c->meta->format_version, CKPT_VERSION);
        return bad(c, msg);
    }
    c->tensors = fr_calloc(c->meta->n_tensors + 1, sizeof *c->tensors, "checkpoint index");
    if (!c->tensors) {
        fr_ckpt_close(c);
        return FR_ERR_OOM;
    }
    for (size_t i = 0; i < c->meta->n_tensors; i++) {
        const Fp8run__CheckpointTensor *t = c->meta->tensors[i];
        fr_ckpt_tensor *o = &c->tensors[i];
        char msg[512];
        int64_t numel;
        size_t es = fr_dtype_size((fr_dtype)t->dtype), want;
        if (!t->name || !t->kind || t->n_dims > FR_MAX_RANK || !es) {
            snprintf(msg, sizeof msg, "tensor #%zu has a bad name, rank or dtype", i);
            return bad(c, msg);
        }
        if (fr_shape_numel((int)t->n_dims, t->dims, t->name, &numel) != FR_OK ||
            !fr_mul_size((size_t)numel, es, &want) || want != t->nbytes || t->offset < 16 ||
            t->offset > moff || t->nbytes > moff - t->offset) {
            snprintf(msg, sizeof msg, "tensor '%s' (%s) has a size or position that does not fit the file",
                     t->name, t->kind);
            return bad(c, msg);
        }
        o->name = t->name;
        o->kind = t->kind;
        o->dtype = (fr_dtype)t->dtype;
        o->rank = (int)t->n_dims;
        for (int d = 0; d < o->rank; d++) o->dims[d] = t->dims[d];
        o->data = c->map + t->offset;
        o->nbytes = (size_t)t->nbytes;
    }
    fr_status st = index_tensors(c);
    if (st != FR_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fr_last_error()); /* bad() formats into the error buffer */
        if (st == FR_ERR_PARSE) return bad(c, msg);
        fr_ckpt_close(c);
        return st;
    }
    *out = c;
    return FR_OK;
}

int fr_ckpt_tensor_count(const fr_ckpt *c) { return (int)c->meta->n_tensors; }

const fr_ckpt_tensor *fr_ckpt_tensor_at(const fr_ckpt *c, int i)
{
    return (i >= 0 && (size_t)i < c->meta->n_tensors) ? &c->tensors[i] : NULL;
}

const fr_ckpt_tensor *fr_ckpt_find(const fr_ckpt *c, const char *name, const char *kind)
{
    char *k = tensor_key(name, kind);
    int i = k ? fr_name_map_get(c->index, k) : -1;
    free(k);
    return i >= 0 ? &c->tensors[i] : NULL;
}

fr_status fr_ckpt_entry(const fr_ckpt *c, const char *key, const void **value, size_t *len)
{
    for (size_t i = 0; i < c->meta->n_entries; i++) {
        const Fp8run__CheckpointEntry *e = c->meta->entries[i];
        if (e->key && strcmp(e->key, key) == 0) {
            *value = e->value.data;
            *len = e->value.len;
            return FR_OK;
        }
    }
    return fr_error(FR_ERR_PARSE, "checkpoint '%s' has no '%s' entry", c->path, key);
}

const char *fr_ckpt_path(const fr_ckpt *c) { return c->path; }

fr_status fr_ckpt_check_format(const fr_ckpt *c, const char *const *known)
{
    const void *v = NULL;
    size_t len = 0;
    if (fr_ckpt_entry(c, "format", &v, &len) != FR_OK) len = 0;
    fr_clear_error();
    for (int i = 0; known[i]; i++)
        if (len == strlen(known[i]) && memcmp(v, known[i], len) == 0) return FR_OK;
    char found[80], list[200] = "";
    int printable = len > 0 && len < sizeof found;
    for (size_t i = 0; printable && i < len; i++) printable = ((const unsigned char *)v)[i] >= 0x20 &&
                                                             ((const unsigned char *)v)[i] < 0x7f;
    if (printable)
        snprintf(found, sizeof found, "'%.*s'", (int)len, (const char *)v);
    else
        snprintf(found, sizeof found, len ? "a format entry that is not text" : "no format entry");
    for (int i = 0; known[i]; i++) {
        size_t o = strlen(list);
        snprintf(list + o, sizeof list - o, "%s'%s'", i ? (known[i + 1] ? ", " : " or ") : "", known[i]);
    }
    return fr_error(FR_ERR_PARSE, "checkpoint '%s' has format %s; this build reads %s (refused: it was not written "
                    "by the fp8run trainer, or by a newer one)", c->path, found, list);
}
