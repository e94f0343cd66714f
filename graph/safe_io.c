/* Regular-file checks before reading (see safe_io.h). */
#include "graph/safe_io.h"

#include <errno.h>
#include <fcntl.h>
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

fr_status fr_open_regular(const char *path, const char *what, int flags, int *fd, struct stat *sb)
{
    struct stat local;
    if (!sb) sb = &local;
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | ((flags & FR_OPEN_NOFOLLOW) ? O_NOFOLLOW : 0));
    if (f < 0) {
        if (errno == ELOOP && (flags & FR_OPEN_NOFOLLOW))
            return fr_error(FR_ERR_IO, "%s '%s' is a symbolic link (refused)", what, path);
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
