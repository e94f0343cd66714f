/* File-system side of ONNX import/export: reading a model file, confining external-data
 * locations to the model's folder (no symlinks, no hard links), and atomic replacement of output
 * files (temporary file created with O_EXCL|O_NOFOLLOW in the same folder, fsync, rename).
 * Model files are hostile input, so every path and size is checked before it is used. */
#ifndef FR_ONNX_IO_UTIL_H
#define FR_ONNX_IO_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "graph/safe_io.h" /* fr_atomic_file: the write rule */
#include "graph/status.h"

/* Protobuf cannot encode or decode a message of 2 GiB or more. */
#define FR_ONNX_MAX_PROTO_BYTES ((uint64_t)INT32_MAX)
/* The newest opset of the default domain a model may import (ONNX 1.23 defines 28; two more
 * leave room for the next releases; 99 or 2^40 is a hostile file). */
#define FR_ONNX_MAX_OPSET 30

/* The folder part of `path` ("." when it has none), malloc'ed; NULL on OOM (error recorded). */
char *fr_onnx_dirname(const char *path);
/* The last component of `path` (points into path). */
const char *fr_onnx_basename(const char *path);
/* dir + "/" + name, malloc'ed; NULL on OOM. */
char *fr_onnx_join(const char *dir, const char *name);

/* Read a whole model file into malloc'ed memory. Refuses non-regular files and files larger
 * than FR_ONNX_MAX_PROTO_BYTES; every failure names the path. */
FR_NODISCARD fr_status fr_onnx_read_file(const char *path, void **data, size_t *len);

/* Open the external-data file `location` for reading (`what` names the tensor in messages). The location must be
 * relative, must not contain a ".." component, must not pass through a symlink (fr_open_beneath)
 * and must be a regular file with one hard link inside model_dir. Returns the descriptor and
 * the file's size. */
FR_NODISCARD fr_status fr_onnx_open_external(const char *model_dir, const char *location, const char *what,
                                int *fd, uint64_t *size);
/* pread exactly n bytes at offset; a short file is FR_ERR_PARSE naming `what`. */
FR_NODISCARD fr_status fr_onnx_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *what);

#endif
