/* CLI helpers: error output, option parsing, --dim lists, human-readable numbers and shapes,
 * folders. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fp8run: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

const char *cli_last_error(void)
{
    const char *m = fp8run_last_error();
    /* "fp8run_<name>: " */
    if (strncmp(m, "fp8run_", 7) == 0) {
        const char *p = m + 7;
        while ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_') p++;
        if (p[0] == ':' && p[1] == ' ') m = p + 2;
    }
    return m;
}

int cli_fail_status(void)
{
    const char *msg = cli_last_error();
    return cli_fail("%s", msg[0] ? msg : "unknown failure");
}

void cli_must(fp8run_status st)
{
    if (st == FP8RUN_OK) return;
    cli_fail_status();
    exit(CLI_EXIT_FAIL);
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fp8run: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Run 'fp8run %s --help' for usage.\n", cmd);
    else
        fprintf(stderr, "Run 'fp8run --help' for usage.\n");
    return CLI_EXIT_USAGE;
}

int cli_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int cli_option(int argc, char **argv, int *i, const char *cmd, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
    } else if (a[n] != '\0') {
        return 0;
    } else if (*i + 1 >= argc) {
        cli_usage(cmd, "%s needs a value", name);
        return -1;
    } else {
        *value = argv[++*i];
    }
    /* no option takes an empty value: '' is a mistake (an unset shell variable), never 0 */
    if (!(*value)[0]) {
        cli_usage(cmd, "%s: an empty value", name);
        return -1;
    }
    return 1;
}

int cli_dims_add(cli_dims *d, const char *cmd, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char *end = NULL;
    if (!eq || eq == arg || !eq[1])
        return cli_usage(cmd, "--dim expects NAME=VALUE, got '%s'", arg);
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (errno || *end || v < 0 || eq[1] == '-' || eq[1] == '+' || eq[1] == ' ')
        return cli_usage(cmd, "--dim %s: VALUE must be a non-negative integer", arg);
    const char **nn = realloc(d->names, (size_t)(d->n + 1) * sizeof *nn);
    if (!nn) return cli_fail("out of memory");
    d->names = nn;
    int64_t *nv = realloc(d->values, (size_t)(d->n + 1) * sizeof *nv);
    if (!nv) return cli_fail("out of memory");
    d->values = nv;
    /* the name is the text before '=': copy it so the binding has a terminated string */
    char *name = strndup(arg, (size_t)(eq - arg));
    if (!name) return cli_fail("out of memory");
    d->names[d->n] = name;
    d->values[d->n] = v;
    d->n++;
    return 0;
}

void cli_dims_free(cli_dims *d)
{
    for (int i = 0; i < d->n; i++) free((char *)d->names[i]);
    free(d->names);
    free(d->values);
    d->names = NULL;
    d->values = NULL;
    d->n = 0;
}

const char *cli_human_count(int64_t n, char *buf, size_t len)
{
    static const char *const suffix[] = {"", "K", "M", "G", "T"};
    double v = (double)n;
    int k = 0;
    while (v >= 999.5 && k < 4) {
        v /= 1000.0;
        k++;
    }
    if (k == 0)
        snprintf(buf, len, "%lld", (long long)n);
    else
        snprintf(buf, len, v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s", v, suffix[k]);
    return buf;
}

const char *cli_human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const suffix[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int k = 0;
    while (v >= 1023.5 && k < 4) {
        v /= 1024.0;
        k++;
    }
    if (k == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, suffix[k]);
    return buf;
}

const char *cli_dims_text(int rank, const int64_t *dims, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

const char *cli_shape_text(const fp8run_value_info *v, char *buf, size_t len)
{
    if (v->rank < 0) {
        snprintf(buf, len, "(no shape)");
        return buf;
    }
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < v->rank && d < FP8RUN_MAX_RANK && off < len; d++) {
        const char *sep = d ? ", " : "";
        const char *name = v->dim_names[d];
        if (name && v->dims[d] >= 0)
            off += (size_t)snprintf(buf + off, len - off, "%s%s=%lld", sep, name, (long long)v->dims[d]);
        else if (name)
            off += (size_t)snprintf(buf + off, len - off, "%s%s", sep, name);
        else if (v->dims[d] >= 0)
            off += (size_t)snprintf(buf + off, len - off, "%s%lld", sep, (long long)v->dims[d]);
        else
            off += (size_t)snprintf(buf + off, len - off, "%s?", sep);
    }
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

const char *cli_path_escape(const char *p)
{
    static char why[600];
    if (!p[0] || p[0] == '/') return "an absolute path";
    for (const char *s = p; *s;) {
        size_t n = strcspn(s, "/");
        if (n == 2 && s[0] == '.' && s[1] == '.') return "a path with '..'";
        s += n;
        if (*s) s++;
    }
    /* each prefix in turn: a link anywhere on the way may point out of the folder */
    char *q = strdup(p);
    if (!q) return "a path that could not be checked (out of memory)";
    const char *res = NULL;
    for (char *s = q;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = '\0';
        struct stat sb;
        if (q[0] && lstat(q, &sb) == 0 && S_ISLNK(sb.st_mode)) {
            snprintf(why, sizeof why, "a path through the symbolic link '%.500s'", q);
            res = why;
        }
        *s = c;
        if (res || !c) break;
    }
    free(q);
    return res;
}

int cli_make_dirs(const char *dir)
{
    if (!dir[0]) return cli_fail("an empty folder name was given");
    char *p = strdup(dir);
    if (!p) return cli_fail("out of memory");
    int rc = 0;
    for (char *s = p + 1; rc == 0; s++) {
        int last = *s == '\0';
        if (*s != '/' && !last) continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) rc = cli_fail("cannot create folder '%s': %s", p, strerror(errno));
        *s = c;
        if (last) break;
    }
    struct stat sb;
    if (rc == 0 && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) rc = cli_fail("'%s' is not a folder", dir);
    free(p);
    return rc;
}

const char *const cli_shape_options[] = {"batch", "seq_len", NULL};

int cli_int64(const char *cmd, const char *opt, const char *text, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || !text[0] || *end || v < min)
        return cli_usage(cmd, "%s: '%s' is not an integer >= %lld", opt, text, (long long)min);
    *out = v;
    return 0;
}

FILE *cli_open_log(const char *path, int append)
{
    /* O_NOFOLLOW: a link planted at the name is refused, never written through; O_NONBLOCK so
       that a FIFO there cannot block the open; the kind is checked on the descriptor */
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
    if (fd < 0) {
        cli_fail("cannot open log '%s': %s", path,
                 errno == ELOOP ? "it is a symbolic link (refused: a link may point anywhere)" : strerror(errno));
        return NULL;
    }
    struct stat sb;
    int fl;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        cli_fail("log '%s' is not a regular file (refused)", path);
        close(fd);
        return NULL;
    }
    if (!append && ftruncate(fd, 0) != 0) { /* only now: a FIFO or device is never truncated */
        cli_fail("cannot truncate log '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *f = (fl = fcntl(fd, F_GETFL)) >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        cli_fail("cannot open log '%s': %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int cli_check_files(const cli_file *inputs, int n_in, const cli_file *outputs, int n_out)
{
    fp8run_files *f;
    if (fp8run_files_create(&f) != FP8RUN_OK) return cli_fail_status();
    fp8run_status ps = FP8RUN_OK;
    for (int i = 0; i < n_in && ps == FP8RUN_OK; i++)
        if (inputs[i].path) ps = fp8run_files_input(f, inputs[i].path, inputs[i].what);
    for (int i = 0; i < n_out && ps == FP8RUN_OK; i++)
        if (outputs[i].path) ps = fp8run_files_output(f, outputs[i].path, outputs[i].what);
    fp8run_files_destroy(f);
    return ps == FP8RUN_OK ? 0 : cli_fail_status();
}
