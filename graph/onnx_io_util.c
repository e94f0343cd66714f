/* File-system helpers for ONNX import/export (see onnx_io_util.h). */
#include "graph/onnx_io_util.h"

#include "graph/safe_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *fr_onnx_dirname(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return fr_strdup(".", "model folder");
    size_t n = (size_t)(slash - path);
    if (n == 0) n = 1; /* "/model.onnx" lives in "/" */
    char *d = fr_malloc(n + 1, "model folder");
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

const char *fr_onnx_basename(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

char *fr_onnx_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = fr_malloc(a + b + 2, "path");
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

fr_status fr_onnx_read_file(const char *path, void **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd;
    struct stat sb;
    FR_TRY(fr_open_regular(path, "model", 0, &fd, &sb));
    if ((uint64_t)sb.st_size > FR_ONNX_MAX_PROTO_BYTES) {
        close(fd);
        return fr_error(FR_ERR_UNSUPPORTED,
                        "model '%s' is %lld bytes, more than protobuf's 2 GiB limit for one "
                        "message (large weights belong in ONNX external data files)",
                        path, (long long)sb.st_size);
    }
    size_t n = (size_t)sb.st_size;
    unsigned char *buf = fr_malloc(n, "model file contents");
    if (!buf) {
        close(fd);
        return fr_error_context(FR_ERR_OOM, "reading model '%s'", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            fr_status st = r < 0 ? fr_error(FR_ERR_IO, "reading model '%s' failed: %s", path, strerror(errno))
                                 : fr_error(FR_ERR_IO, "model '%s' shrank while it was read (%zu of %zu bytes)",
                                            path, got, n);
            free(buf);
            close(fd);
            return st;
        }
        got += (size_t)r;
    }
    close(fd);
    *data = buf;
    *len = n;
    return FR_OK;
}

/* True when one '/'-separated component of p is "..". */
static int has_dotdot(const char *p)
{
    while (*p) {
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

fr_status fr_onnx_open_external(const char *model_dir, const char *location, const char *what,
                                int *fd, uint64_t *size)
{
    *fd = -1;
    *size = 0;
    if (!location || !location[0])
        return fr_error(FR_ERR_PARSE, "%s: external data without a location", what);
    if (location[0] == '/')
        return fr_error(FR_ERR_PARSE,
                        "%s: external data location '%s' is an absolute path (refused: it "
                        "must be relative to the model's folder)", what, location);
    if (has_dotdot(location))
        return fr_error(FR_ERR_PARSE,
                        "%s: external data location '%s' climbs out of the model's folder "
                        "with '..' (refused)", what, location);
    /* every component is opened without following a symlink (graph/safe_io.h): a link inside
     * the folder is refused as well as one out of it, since its target may move. A hard link
     * is refused: its other name may lie anywhere (onnx/onnx#7686). */
    int f;
    struct stat sb;
    fr_status st = fr_open_beneath(model_dir, location, "external data location", FR_OPEN_SINGLE_LINK, &f, &sb);
    if (st != FR_OK) return fr_error_context(st, "%s", what);
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return FR_OK;
}

fr_status fr_onnx_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *what)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (unsigned char *)buf + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fr_error(FR_ERR_IO, "%s: read failed: %s", what, strerror(errno));
        if (r == 0)
            return fr_error(FR_ERR_PARSE, "%s: the file ended after %zu of %zu bytes", what, got, n);
        got += (size_t)r;
    }
    return FR_OK;
}
