/* CLI helpers: error output, option parsing, --dim lists, human-readable numbers. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

int cli_fail_status(void)
{
    const char *msg = fr_last_error();
    return cli_fail("%s", msg[0] ? msg : "unknown failure");
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
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        cli_usage(cmd, "%s needs a value", name);
        return -1;
    }
    *value = argv[++*i];
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
    fr_dim_binding *ni = realloc(d->items, (size_t)(d->n + 1) * sizeof *ni);
    if (!ni) return cli_fail("out of memory");
    d->items = ni;
    /* the name is the text before '=': copy it so the binding has a terminated string */
    size_t len = (size_t)(eq - arg);
    char *name = malloc(len + 1);
    if (!name) return cli_fail("out of memory");
    memcpy(name, arg, len);
    name[len] = '\0';
    d->items[d->n].name = name;
    d->items[d->n].value = v;
    d->n++;
    return 0;
}

void cli_dims_free(cli_dims *d)
{
    for (int i = 0; i < d->n; i++) free((char *)d->items[i].name);
    free(d->items);
    d->items = NULL;
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
