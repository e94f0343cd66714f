/* Regular-file checks before reading (see safe_io.h). */
#include "graph/safe_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
