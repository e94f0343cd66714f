/* The two rules for the files fp8run touches by name, in one place.
 *
 * Reading (models, external data, token files, text, logs, .npy, checkpoints) treats every
 * file as hostile input: only regular files are read, and that is checked on the open
 * descriptor before any read can block (a FIFO or device given as a path would otherwise hang
 * us); a whole-file read is size-checked first.
 *
 * Writing (token files, SVG pages, adapters, safetensors exports, the files fp8run names
 * itself beside them) goes to a temporary file created in the target's folder (O_EXCL |
 * O_NOFOLLOW: never something planted there), fsync, then rename over the target: the
 * previous file stays whole until the new one is, and a symbolic link at the target is
 * replaced, never written through. A command first declares its inputs and outputs in an
 * fr_file_set, which refuses an output that is one of the inputs (by device and inode, so
 * by any spelling or link), two outputs that name one file, and outputs that are not
 * regular files (a folder, a FIFO, a device). */
#ifndef FR_SAFE_IO_H
#define FR_SAFE_IO_H

#include <stdint.h>
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

/* Read all of `path` (opened as fr_open_regular does) into malloc'ed memory with a NUL byte
 * after the len bytes, so text can be parsed as a string. A file larger than max_bytes is
 * refused before anything is read, naming it and both sizes. */
FR_NODISCARD fr_status fr_read_regular(const char *path, const char *what, int flags, uint64_t max_bytes,
                                       char **data, size_t *len);

/* ---- writing ---- */

/* The files one command reads and writes. */
typedef struct fr_file_entry {
    char *path, *what;
    int output;
    int have_id;       /* dev/ino below are an existing file's (an input, or an output that exists) */
    dev_t dev;
    ino_t ino;
    dev_t dir_dev;     /* an output: its folder and last component, the name rename() replaces */
    ino_t dir_ino;
    char *base;
} fr_file_entry;
typedef struct fr_file_set {
    fr_file_entry *v;
    int n, cap;
} fr_file_set;

/* Declare an input (a file that need not exist yet: the reader reports that). Refused when it
 * is one of the outputs declared so far. */
FR_NODISCARD fr_status fr_file_set_input(fr_file_set *s, const char *path, const char *what);
/* Declare an output: refused when it is (or is a link to) one of the inputs, when another
 * output names the same file, when it names something other than a regular file or a
 * symbolic link (which is replaced, not followed), and when its folder does not exist. */
FR_NODISCARD fr_status fr_file_set_output(fr_file_set *s, const char *path, const char *what);
void fr_file_set_free(fr_file_set *s);

/* A file being written under the rule: data goes to `tmp`, commit renames it over `path`. */
typedef struct fr_atomic_file {
    char *path;
    char *tmp;
    int fd;
} fr_atomic_file;

/* Create the temporary file next to `path` (never following a symlink); refuses a target
 * that exists and is neither a regular file nor a symbolic link. */
FR_NODISCARD fr_status fr_atomic_open(const char *path, fr_atomic_file *f);
FR_NODISCARD fr_status fr_atomic_write(fr_atomic_file *f, const void *data, size_t n);
/* fsync and close the temporary file (the data is durable, not yet visible). */
FR_NODISCARD fr_status fr_atomic_finish(fr_atomic_file *f);
/* Rename the finished temporary file over `path` and fsync the folder; frees f's strings. */
FR_NODISCARD fr_status fr_atomic_commit(fr_atomic_file *f);
/* Remove the temporary file and free f's strings; safe to call twice. */
void fr_atomic_abort(fr_atomic_file *f);
/* All of one buffer as the new contents of path (open, write, finish, commit; abort on failure). */
FR_NODISCARD fr_status fr_atomic_write_file(const char *path, const void *data, size_t n);

/* Fault injection for the tests of the rule (never set in use): the environment variable
 * FP8RUN_TEST_WRITE_FAULT = "ENOSPC" or "EIO" makes every write to a temporary file under the
 * rule write half its bytes and then fail with that error; "fsync" makes its fsync fail with
 * EIO; "rename" makes the final rename fail with EIO. */
int fr_write_fault(const char *stage);

#endif
