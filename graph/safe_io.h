/* Opening the files fp8run reads (models, external data, token files, .npy, checkpoints) as
 * hostile input: only regular files are read, and that is checked on the open descriptor
 * before any read can block (a FIFO or device given as a path would otherwise hang us). */
#ifndef FR_SAFE_IO_H
#define FR_SAFE_IO_H

#include <stdio.h>
#include <sys/stat.h>

#include "graph/status.h"

enum {
    FR_OPEN_NOFOLLOW = 1,    /* the last component must not be a symlink */
    FR_OPEN_SINGLE_LINK = 2, /* refuse a file with more than one hard link (a link to elsewhere) */
};

/* Open `path` read-only (O_CLOEXEC). Refuses what is not a regular file, with `what` (e.g.
 * "token file") and the path in the message; *fd is blocking again on return. sb may be NULL. */
FR_NODISCARD fr_status fr_open_regular(const char *path, const char *what, int flags, int *fd, struct stat *sb);
/* Open `rel`, a path below the folder `dir` named by a file's contents (external data, a shard
 * of an index), following no symlink on the way: each component is opened with O_NOFOLLOW
 * from the one before, so neither a linked folder nor a linked file is entered, wherever it
 * points (onnx/onnx#7686 refuses them too). One exception, so that downloads load where
 * huggingface_hub put them: in its cache (models--ORG--NAME/{snapshots/REV,blobs}) a file
 * that is exactly the hub's link "../../blobs/HASH" to its own repository's blob is read.
 * Absolute paths and ".." are refused; `dir` itself is the caller's and may be a link. The last component is checked as fr_open_regular
 * does (flags: FR_OPEN_SINGLE_LINK); messages show `what` and rel. */
FR_NODISCARD fr_status fr_open_beneath(const char *dir, const char *rel, const char *what, int flags, int *fd,
                                       struct stat *sb);
/* The same as a stdio stream ("rb"). */
FR_NODISCARD fr_status fr_fopen_regular(const char *path, const char *what, int flags, FILE **f, struct stat *sb);

#endif
