/* The read rule and the write rule (see safe_io.h). */
#include "graph/safe_io.h"

#include "graph/env.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

static fr_status symlink_refused(const char *what, const char *path, int plen)
{
    return fr_error(FR_ERR_IO,
                    "%s '%s': '%.*s' is a symbolic link (refused: a link may point anywhere; put the file "
                    "itself there, e.g. cp -L)", what, path, plen, path);
}

/* Open `name` relative to dirfd (AT_FDCWD: the working folder) and check it; `path` is what
 * messages show. */
static fr_status open_at(int dirfd, const char *name, const char *path, const char *what, int flags, int *fd,
                         struct stat *sb)
{
    struct stat local;
    if (!sb) sb = &local;
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int f = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | ((flags & FR_OPEN_NOFOLLOW) ? O_NOFOLLOW : 0));
    if (f < 0) {
        if (errno == ELOOP && (flags & FR_OPEN_NOFOLLOW)) return symlink_refused(what, path, (int)strlen(path));
        return fr_error(FR_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    }
    fr_status st = FR_OK;
    int fl;
    if (fstat(f, sb) != 0)
        st = fr_error(FR_ERR_IO, "cannot stat %s '%s': %s", what, path, strerror(errno));
    else if (!S_ISREG(sb->st_mode))
        st = fr_error(FR_ERR_IO, "%s '%s' is %s, not a regular file (refused)", what, path, kind_of(sb->st_mode));
    else if ((flags & FR_OPEN_SINGLE_LINK) && sb->st_nlink > 1)
        st = fr_error(FR_ERR_IO, "%s '%s' has %lu hard links (refused: it may be a link to a file elsewhere)", what,
                      path, (unsigned long)sb->st_nlink);
    else if ((fl = fcntl(f, F_GETFL)) < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0)
        st = fr_error(FR_ERR_IO, "cannot use %s '%s': %s", what, path, strerror(errno));
    if (st != FR_OK) {
        close(f);
        return st;
    }
    *fd = f;
    return FR_OK;
}

fr_status fr_open_regular(const char *path, const char *what, int flags, int *fd, struct stat *sb)
{
    return open_at(AT_FDCWD, path, path, what, flags, fd, sb);
}

/* The next component of rel at or after *pos, skipping empty and "." ones: its start and
 * length; 0 when none is left. */
static int next_component(const char *rel, size_t *pos, size_t *start, size_t *len)
{
    size_t p = *pos;
    for (;;) {
        while (rel[p] == '/') p++;
        if (!rel[p]) {
            *pos = p;
            return 0;
        }
        size_t n = strcspn(rel + p, "/");
        if (n == 1 && rel[p] == '.') {
            p += n;
            continue;
        }
        *start = p;
        *len = n;
        *pos = p + n;
        return 1;
    }
}

/* The Hugging Face hub cache's own links: a snapshot file models--ORG--NAME/snapshots/REV/PATH
 * is a symlink "../../blobs/HASH" (one more "../" per folder of PATH) into its repository's
 * blobs/. Such a link, and only such a link, is followed: `up` is how many folders below the
 * snapshot the link stands, and dfd the folder holding it. Returns 1 when it was one (*st set). */
static int open_hub_blob(int dfd, const char *name, int up, const char *rel, const char *what, int flags,
                         int *fd, struct stat *sb, fr_status *st)
{
    char target[PATH_MAX];
    ssize_t n = readlinkat(dfd, name, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = '\0';
    const char *p = target;
    for (int i = 0; i < up + 2; i++, p += 3)
        if (strncmp(p, "../", 3) != 0) return 0;
    if (strncmp(p, "blobs/", 6) != 0) return 0;
    const char *hash = p + 6;
    size_t hl = strlen(hash);
    if (hl < 40 || hl > 64 || strspn(hash, "0123456789abcdef") != hl) return 0;
    /* the folder two above the snapshot's root must be the cache's "snapshots" layout */
    int cur = dup(dfd);
    for (int i = 0; cur >= 0 && i < up + 2; i++) {
        int nd = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(cur);
        cur = nd;
    }
    if (cur < 0) return 0;
    int snaps = openat(cur, "snapshots", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int blobs = snaps >= 0 ? openat(cur, "blobs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    close(cur);
    if (snaps >= 0) close(snaps);
    if (blobs < 0) return 0;
    *st = open_at(blobs, hash, rel, what, flags | FR_OPEN_NOFOLLOW, fd, sb);
    close(blobs);
    return 1;
}

fr_status fr_open_beneath(const char *dir, const char *rel, const char *what, int flags, int *fd, struct stat *sb)
{
    *fd = -1;
    if (!rel[0]) return fr_error(FR_ERR_IO, "%s: an empty path", what);
    if (rel[0] == '/')
        return fr_error(FR_ERR_IO, "%s '%s' is an absolute path (refused: it must lie inside '%s')", what, rel, dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return fr_error(FR_ERR_IO, "%s '%s': cannot open the folder '%s': %s", what, rel, dir, strerror(errno));
    size_t pos = 0, s, n;
    fr_status st = FR_OK;
    int depth = 0; /* folders of rel entered */
    int have = next_component(rel, &pos, &s, &n);
    if (!have) st = fr_error(FR_ERR_IO, "%s '%s' names the folder '%s' itself, not a file", what, rel, dir);
    while (st == FR_OK && have) {
        char comp[NAME_MAX + 1];
        size_t s2, n2, pos2 = pos;
        int last = !next_component(rel, &pos2, &s2, &n2);
        if (n == 2 && rel[s] == '.' && rel[s + 1] == '.') {
            st = fr_error(FR_ERR_IO, "%s '%s' climbs out of its folder with '..' (refused)", what, rel);
            break;
        }
        if (n > NAME_MAX) {
            st = fr_error(FR_ERR_IO, "%s '%s': a component is longer than %d bytes", what, rel, NAME_MAX);
            break;
        }
        memcpy(comp, rel + s, n);
        comp[n] = '\0';
        if (last) {
            /* the message shows rel; a symlink there is refused by O_NOFOLLOW (ELOOP), unless it
             * is the hub cache's link to its blob */
            if (!open_hub_blob(dfd, comp, depth, rel, what, flags, fd, sb, &st))
                st = open_at(dfd, comp, rel, what, flags | FR_OPEN_NOFOLLOW, fd, sb);
            break;
        }
        int nd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nd < 0) {
            int err = errno;
            struct stat lsb;
            if (fstatat(dfd, comp, &lsb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lsb.st_mode))
                st = symlink_refused(what, rel, (int)(s + n));
            else
                st = fr_error(FR_ERR_IO, "cannot open %s '%s': '%.*s': %s", what, rel, (int)(s + n), rel,
                              strerror(err));
            break;
        }
        close(dfd);
        dfd = nd;
        depth++;
        pos = pos2;
        s = s2;
        n = n2;
    }
    close(dfd);
    return st;
}

fr_status fr_fopen_regular(const char *path, const char *what, int flags, FILE **out, struct stat *sb)
{
    int fd;
    *out = NULL;
    FR_TRY(fr_open_regular(path, what, flags, &fd, sb));
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fr_status st = fr_error(FR_ERR_IO, "cannot read %s '%s': %s", what, path, strerror(errno));
        close(fd);
        return st;
    }
    *out = f;
    return FR_OK;
}

fr_status fr_read_regular(const char *path, const char *what, int flags, uint64_t max_bytes, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    int fd;
    struct stat sb;
    FR_TRY(fr_open_regular(path, what, flags, &fd, &sb));
    if ((uint64_t)sb.st_size > max_bytes || (uint64_t)sb.st_size >= SIZE_MAX) {
        close(fd);
        return fr_error(FR_ERR_IO, "%s '%s' is %llu bytes, more than the %llu a %s may have (refused)", what, path,
                        (unsigned long long)sb.st_size, (unsigned long long)max_bytes, what);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = fr_malloc(n + 1, what);
    if (!buf) {
        close(fd);
        return fr_error_context(FR_ERR_OOM, "reading %s '%s'", what, path);
    }
    size_t got = 0;
    fr_status st = FR_OK;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) st = fr_error(FR_ERR_IO, "reading %s '%s' failed: %s", what, path, strerror(errno));
        else if (r == 0)
            st = fr_error(FR_ERR_IO, "%s '%s' shrank while it was read (%zu of %zu bytes)", what, path, got, n);
        if (st != FR_OK) break;
        got += (size_t)r;
    }
    close(fd);
    if (st != FR_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return FR_OK;
}

/* ---- the write rule ---- */

int fr_write_fault(const char *stage)
{
    const char *f = fr_env_get(FR_ENV_TEST_WRITE_FAULT);
    if (!f || !*f) return 0;
    if (strcmp(stage, "write") == 0) {
        if (strcmp(f, "ENOSPC") == 0) return ENOSPC;
        if (strcmp(f, "EIO") == 0) return EIO;
        return 0;
    }
    return strcmp(f, stage) == 0 ? EIO : 0;
}

/* The folder part of path ("." when it has none, "/" for "/x"), malloc'ed. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 1;
    if (slash && n == 0) n = 1;
    char *d = fr_malloc(n + 1, "folder name");
    if (!d) return NULL;
    memcpy(d, slash ? path : ".", n);
    d[n] = '\0';
    return d;
}

static const char *base_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void entry_free(fr_file_entry *e)
{
    free(e->path);
    free(e->what);
    free(e->base);
}

void fr_file_set_free(fr_file_set *s)
{
    for (int i = 0; i < s->n; i++) entry_free(&s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

static fr_status set_push(fr_file_set *s, fr_file_entry *e)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        fr_file_entry *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) {
            entry_free(e);
            return fr_error(FR_ERR_OOM, "out of memory for the list of files");
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = *e;
    return FR_OK;
}

/* Is the existing file (dev, ino) input e, or e an output that (dev, ino) would replace? */
static int same_file(const fr_file_entry *e, dev_t dev, ino_t ino)
{
    return e->have_id && e->dev == dev && e->ino == ino;
}

fr_status fr_file_set_input(fr_file_set *s, const char *path, const char *what)
{
    fr_file_entry e = {0};
    struct stat sb;
    if (stat(path, &sb) == 0) {
        e.have_id = 1;
        e.dev = sb.st_dev;
        e.ino = sb.st_ino;
        for (int i = 0; i < s->n; i++)
            if (s->v[i].output && same_file(&s->v[i], sb.st_dev, sb.st_ino))
                return fr_error(FR_ERR_INVALID_ARG,
                                "%s '%s' is the same file as the %s '%s' this would write (refused: it would be "
                                "overwritten)", what, path, s->v[i].what, s->v[i].path);
    }
    e.path = fr_strdup(path, "file name");
    e.what = fr_strdup(what, "file name");
    if (!e.path || !e.what) {
        entry_free(&e);
        return FR_ERR_OOM;
    }
    return set_push(s, &e);
}

fr_status fr_file_set_output(fr_file_set *s, const char *path, const char *what)
{
    if (!path[0]) return fr_error(FR_ERR_INVALID_ARG, "%s: an empty file name", what);
    size_t plen = strlen(path);
    if (path[plen - 1] == '/') return fr_error(FR_ERR_INVALID_ARG, "%s '%s' names a folder, not a file", what, path);
    fr_file_entry e = {0};
    struct stat lsb, sb, dsb;
    char *dir = dir_of(path);
    if (!dir) return FR_ERR_OOM;
    int dir_ok = stat(dir, &dsb) == 0 && S_ISDIR(dsb.st_mode);
    fr_status st = FR_OK;
    if (!dir_ok)
        st = fr_error(FR_ERR_IO, "%s '%s': its folder '%s' does not exist (create it first)", what, path, dir);
    free(dir);
    if (st != FR_OK) return st;
    e.dir_dev = dsb.st_dev;
    e.dir_ino = dsb.st_ino;
    if (lstat(path, &lsb) == 0) {
        if (S_ISDIR(lsb.st_mode)) return fr_error(FR_ERR_IO, "%s '%s' is a folder, not a file (refused)", what, path);
        if (!S_ISREG(lsb.st_mode) && !S_ISLNK(lsb.st_mode))
            return fr_error(FR_ERR_IO, "%s '%s' is %s: fp8run writes regular files only (refused)", what, path,
                            kind_of(lsb.st_mode));
        e.have_id = 1;
        e.dev = lsb.st_dev;
        e.ino = lsb.st_ino;
        /* a link is replaced, not followed; still, a link to an input says the user meant that file */
        int linked = S_ISLNK(lsb.st_mode) && stat(path, &sb) == 0;
        for (int i = 0; i < s->n; i++) {
            const fr_file_entry *o = &s->v[i];
            if (o->output) continue;
            if (same_file(o, lsb.st_dev, lsb.st_ino) || (linked && same_file(o, sb.st_dev, sb.st_ino)))
                return fr_error(FR_ERR_INVALID_ARG,
                                "%s '%s' is %sthe %s '%s' (refused: writing it would destroy the input)", what, path,
                                same_file(o, lsb.st_dev, lsb.st_ino) ? "the same file as " : "a link to ", o->what,
                                o->path);
        }
    }
    e.base = fr_strdup(base_of(path), "file name");
    e.path = fr_strdup(path, "file name");
    e.what = fr_strdup(what, "file name");
    if (!e.base || !e.path || !e.what) {
        entry_free(&e);
        return FR_ERR_OOM;
    }
    for (int i = 0; i < s->n; i++) {
        const fr_file_entry *o = &s->v[i];
        if (!o->output) continue;
        if ((o->dir_dev == e.dir_dev && o->dir_ino == e.dir_ino && strcmp(o->base, e.base) == 0) ||
            (e.have_id && same_file(o, e.dev, e.ino))) {
            st = fr_error(FR_ERR_INVALID_ARG, "%s '%s' and %s '%s' are the same file (refused: one would overwrite "
                          "the other)", o->what, o->path, what, path);
            entry_free(&e);
            return st;
        }
    }
    e.output = 1;
    return set_push(s, &e);
}

fr_status fr_atomic_open(const char *path, fr_atomic_file *f)
{
    f->fd = -1;
    f->tmp = NULL;
    f->path = NULL;
    struct stat lsb;
    if (lstat(path, &lsb) == 0 && !S_ISREG(lsb.st_mode) && !S_ISLNK(lsb.st_mode))
        return fr_error(FR_ERR_IO, "'%s' is %s: fp8run writes regular files only (refused)", path,
                        S_ISDIR(lsb.st_mode) ? "a folder" : kind_of(lsb.st_mode));
    f->path = fr_strdup(path, "output path");
    char *dir = dir_of(path);
    size_t n = strlen(path) + 64;
    char *tmp = fr_malloc(n, "temporary path");
    if (!f->path || !dir || !tmp) {
        free(dir);
        free(tmp);
        fr_atomic_abort(f);
        return FR_ERR_OOM;
    }
    /* a hidden name in the destination folder, so rename() stays on one file system;
     * O_EXCL|O_NOFOLLOW: never open something an attacker placed there */
    int err = 0;
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(tmp, n, "%s/.%s.tmp.%ld.%d", dir, base_of(path), (long)getpid(), attempt);
        f->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f->fd >= 0) break;
        err = errno;
        if (err != EEXIST) break;
    }
    free(dir);
    if (f->fd < 0) { /* nothing was created: tmp is not ours to unlink */
        fr_status st = fr_error(FR_ERR_IO, "cannot create a temporary file next to '%s': %s", path,
                                strerror(err));
        free(tmp);
        fr_atomic_abort(f);
        return st;
    }
    f->tmp = tmp;
    return FR_OK;
}

fr_status fr_atomic_write(fr_atomic_file *f, const void *data, size_t n)
{
    const unsigned char *p = data;
    int fault = fr_write_fault("write");
    if (fault && n > 0) { /* half of it lands, as on a disk that fills up */
        ssize_t w = write(f->fd, p, n / 2);
        (void)w;
        return fr_error(FR_ERR_IO, "writing '%s' failed: %s (the previous file, if any, is kept)", f->path,
                        strerror(fault));
    }
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return fr_error(FR_ERR_IO, "writing '%s' failed: %s (the previous file, if any, is kept)", f->path,
                            w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return FR_OK;
}

fr_status fr_atomic_finish(fr_atomic_file *f)
{
    fr_status st = FR_OK;
    int fault = fr_write_fault("fsync");
    if (fault || fsync(f->fd) != 0)
        st = fr_error(FR_ERR_IO, "fsync of '%s' failed: %s (the previous file, if any, is kept)", f->path,
                      strerror(fault ? fault : errno));
    if (close(f->fd) != 0 && st == FR_OK)
        st = fr_error(FR_ERR_IO, "closing '%s' failed: %s", f->path, strerror(errno));
    f->fd = -1;
    return st;
}

fr_status fr_atomic_commit(fr_atomic_file *f)
{
    /* rename() replaces a symlink at `path` itself; it never writes through it */
    int fault = fr_write_fault("rename");
    if (fault || rename(f->tmp, f->path) != 0) {
        fr_status st = fr_error(FR_ERR_IO, "cannot move the new file into place at '%s': %s (the previous file, "
                                "if any, is kept)", f->path, strerror(fault ? fault : errno));
        fr_atomic_abort(f);
        return st;
    }
    char *dir = dir_of(f->path);
    if (dir) { /* best effort: the rename has happened; this makes it durable */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    return FR_OK;
}

void fr_atomic_abort(fr_atomic_file *f)
{
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
}

fr_status fr_atomic_write_file(const char *path, const void *data, size_t n)
{
    fr_atomic_file f;
    FR_TRY(fr_atomic_open(path, &f));
    fr_status st = fr_atomic_write(&f, data, n);
    if (st == FR_OK) st = fr_atomic_finish(&f);
    if (st == FR_OK) return fr_atomic_commit(&f);
    fr_atomic_abort(&f);
    return st;
}
