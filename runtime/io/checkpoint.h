/* Checkpoint files: named tensors (weights, optimizer state, scaling state) plus key/value
 * entries (step, RNG and data-loader state, configuration), with a CRC-32C over the whole
 * file that is verified on load. Layout: schema/checkpoint.proto.
 *
 * Writes are atomic: the writer streams into a temporary file in the destination folder
 * (created with O_EXCL|O_NOFOLLOW), fsyncs it, renames it over the destination and fsyncs the
 * folder. A crash at any point leaves either the old file or the new one, never a mix. */
#ifndef FR_CHECKPOINT_H
#define FR_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "graph/tensor.h"

typedef struct fr_ckpt_writer fr_ckpt_writer;

FR_NODISCARD fr_status fr_ckpt_writer_open(const char *path, fr_ckpt_writer **out);
/* Append a tensor; data is copied to the file immediately. */
FR_NODISCARD fr_status fr_ckpt_write_tensor(fr_ckpt_writer *w, const char *name, const char *kind,
                               fr_dtype dtype, int rank, const int64_t *dims, const void *data);
/* Add a key/value entry (copied). */
FR_NODISCARD fr_status fr_ckpt_write_entry(fr_ckpt_writer *w, const char *key, const void *value, size_t len);
/* Finish: metadata, trailer, fsync, rename over the destination. Frees w in all cases. */
FR_NODISCARD fr_status fr_ckpt_writer_commit(fr_ckpt_writer *w);
/* Give up: removes the temporary file and frees w. The destination is untouched. */
void fr_ckpt_writer_abort(fr_ckpt_writer *w);
/* The writer's write(2) and fsync(2); tests replace them to inject faults. */
extern ssize_t (*fr_ckpt_io_write)(int fd, const void *buf, size_t n);
extern int (*fr_ckpt_io_fsync)(int fd);

typedef struct fr_ckpt_tensor {
    const char *name, *kind;
    fr_dtype dtype;
    int rank;
    int64_t dims[FR_MAX_RANK];
    const void *data; /* points into the loaded file; valid until fr_ckpt_close */
    size_t nbytes;
} fr_ckpt_tensor;

typedef struct fr_ckpt fr_ckpt;

/* Read and verify a checkpoint (trailer, checksum, every tensor's bounds and size). A
 * truncated or corrupted file is FR_ERR_PARSE naming the file and what is wrong. */
FR_NODISCARD fr_status fr_ckpt_open(const char *path, fr_ckpt **out);
void fr_ckpt_close(fr_ckpt *c);
int fr_ckpt_tensor_count(const fr_ckpt *c);
const fr_ckpt_tensor *fr_ckpt_tensor_at(const fr_ckpt *c, int i);
/* NULL when absent. */
const fr_ckpt_tensor *fr_ckpt_find(const fr_ckpt *c, const char *name, const char *kind);
/* FR_OK with value and len pointing into the checkpoint, or FR_ERR_PARSE naming the key. */
FR_NODISCARD fr_status fr_ckpt_entry(const fr_ckpt *c, const char *key, const void **value, size_t *len);
/* The "format" entry is one of `known` (NULL-terminated): FR_ERR_PARSE otherwise, naming the
 * file, the format it holds and those this build reads. */
FR_NODISCARD fr_status fr_ckpt_check_format(const fr_ckpt *c, const char *const *known);
const char *fr_ckpt_path(const fr_ckpt *c);

#endif
