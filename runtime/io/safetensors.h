/* Safetensors files: the checkpoint format Hugging Face models are published in.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 *     {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..],
 *      "data_offsets": [begin, end]}, ...}
 * and then the tensors' raw little-endian bytes, offsets relative to the end of the header.
 * The JSON is parsed with Jansson (strict RFC 8259, duplicate keys refused, 64-bit integers
 * with overflow detection).
 *
 * Files are hostile input, so fr_st_open refuses: a header length over FP8RUN_MAX_HEADER_BYTES (graph/limits.h) or past
 * the end of the file; malformed JSON; duplicate names; unknown dtype strings; shapes whose byte
 * size overflows or differs from end - begin; negative, inverted or out-of-file offsets; tensors
 * that overlap or leave holes (sorted by offset they must tile the data section exactly, as the
 * format requires); metadata values that are not strings; any other key in a tensor entry.
 * Every message names the file and the tensor. */
#ifndef FR_SAFETENSORS_H
#define FR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "graph/safe_io.h"
#include "graph/tensor.h"
#include "graph/status.h"


typedef struct fr_st_tensor {
    char *name;
    fr_dtype dtype;
    int rank;
    int64_t dims[FR_MAX_RANK];
    int64_t numel;
    uint64_t begin, end; /* byte offsets in the data section */
} fr_st_tensor;

typedef struct fr_st_file {
    char *path;
    int fd;
    uint64_t data_start; /* 8 + N */
    fr_st_tensor *t;     /* sorted by name */
    int n;
    char **meta;         /* __metadata__ as key, value, key, value, ... */
    int n_meta;
} fr_st_file;

/* The fp8run dtype of a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...);
 * FR_UNDEFINED when it is not one fp8run reads. */
fr_dtype fr_st_dtype_of(const char *s);
/* The safetensors string of a dtype; NULL when the format has none. */
const char *fr_st_dtype_str(fr_dtype dt);

/* Open and validate a file (the descriptor stays open for reads). */
FR_NODISCARD fr_status fr_st_open(const char *path, fr_st_file **out);
/* The same on an already opened descriptor (ownership taken, closed on failure); `path` names
 * the file in messages. */
FR_NODISCARD fr_status fr_st_open_fd(int fd, const char *path, fr_st_file **out);
void fr_st_close(fr_st_file *f);
/* The tensor called name; NULL when absent. */
const fr_st_tensor *fr_st_find(const fr_st_file *f, const char *name);
/* The value of metadata key `key`; NULL when absent. */
const char *fr_st_meta(const fr_st_file *f, const char *key);
/* Read bytes [off, off + n) of tensor t's data into dst. */
FR_NODISCARD fr_status fr_st_read(const fr_st_file *f, const fr_st_tensor *t, uint64_t off, void *dst, size_t n);
/* Tensor t as float32 (count = numel): F32, F64, F16, BF16, F8_E4M3, F8_E5M2 converted exactly
 * (F64 rounded to nearest); integer and bool tensors are FR_ERR_UNSUPPORTED. Read in chunks:
 * no buffer of the tensor's size besides dst. */
FR_NODISCARD fr_status fr_st_read_f32(const fr_st_file *f, const fr_st_tensor *t, float *dst);

/* ---- writing ---- */

typedef struct fr_st_out {
    const char *name;
    fr_dtype dtype;
    int rank;
    const int64_t *dims;
    const void *data;   /* numel * dtype size bytes (NULL allowed when 0) */
} fr_st_out;

/* Write n tensors (in the order given; the caller sorts) atomically to path, with metadata
 * `meta` (key, value pairs, n_meta pairs; may be NULL). The header is padded with spaces to a
 * multiple of 8 bytes, as the reference writer does, so the data stays aligned. */
FR_NODISCARD fr_status fr_st_write(const char *path, const fr_st_out *t, int n, const char *const *meta, int n_meta);
/* The same, written and fsync'ed but not yet in place: fr_atomic_commit(af) puts it there
 * (fr_atomic_abort drops it), so that files written together replace their previous versions
 * only when all of them were written. */
FR_NODISCARD fr_status fr_st_write_pending(const char *path, const fr_st_out *t, int n, const char *const *meta,
                                          int n_meta, fr_atomic_file *af);
/* Bytes a tensor takes (numel * size); 0 with *ok = 0 on overflow or an unwritable dtype. */
uint64_t fr_st_out_bytes(const fr_st_out *t, int *ok);

/* ---- checkpoints: one file or shards (runtime/io/safetensors_ckpt.c) ----
 * A checkpoint is a .safetensors file, a folder holding model.safetensors or
 * model.safetensors.index.json, or that index file itself. The index's "weight_map" maps every
 * tensor name to its shard, a file name that must stay inside the index's folder (also through
 * symlinks); every listed tensor must be in its shard and every shard tensor listed.
 *
 * FP8 weights as published FP8 releases ship them: an F8_E4M3 (or F8_E5M2) tensor W [R, C]
 * with a sibling "<W>_scale_inv" [ceil(R/128), ceil(C/128)] (F32, BF16 or F16) reads as
 * W[r][c] = q[r][c] * scale_inv[r/128][c/128], one float32 product (exact decode, one
 * correctly rounded multiply). The scale is consumed by that read (fr_st_ckpt_is_aux). An fp8
 * tensor with a "<W>_scale" sibling instead (per-tensor or per-channel conventions) is
 * FR_ERR_UNSUPPORTED rather than read without its scale. */
#define FR_ST_BLOCK 128

typedef struct fr_st_entry {
    const char *name;        /* points into the file's tensor */
    int file;                /* index into files */
    const fr_st_tensor *t;
} fr_st_entry;

typedef struct fr_st_ckpt {
    char *path;
    fr_st_file **files;
    int n_files;
    fr_st_entry *e;          /* sorted by name */
    int n;
} fr_st_ckpt;

FR_NODISCARD fr_status fr_st_ckpt_open(const char *path, fr_st_ckpt **out);
void fr_st_ckpt_close(fr_st_ckpt *c);
/* Index of the entry called name; -1 when absent. */
int fr_st_ckpt_find(const fr_st_ckpt *c, const char *name);
/* 1 when entry i is the block scale of an fp8 entry (read with it, not a weight itself). */
int fr_st_ckpt_is_aux(const fr_st_ckpt *c, int i);
/* Entry i as float32 (numel floats), dequantized as above. */
FR_NODISCARD fr_status fr_st_ckpt_read_f32(const fr_st_ckpt *c, int i, float *dst);
/* Write tensors as a checkpoint in folder dir (created if missing): model.safetensors when
 * they add up to at most max_shard_bytes (0: no limit), else model-0000K-of-0000N.safetensors
 * shards of at most max_shard_bytes each (a tensor larger than that alone in its shard) and
 * model.safetensors.index.json (metadata.total_size, weight_map). Tensors go in the given
 * order; metadata format "pt". */
FR_NODISCARD fr_status fr_st_ckpt_write(const char *dir, const fr_st_out *t, int n, uint64_t max_shard_bytes);

#endif
