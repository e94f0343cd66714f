/* CLI runner for tests (see cli_runner.h). */
#include "tests/cli_runner.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char cli_tmp[512];
char *cli_out, *cli_err;
const char *cli_wrap = "";
static char last_args[4000]; /* for cli_show */

char *cli_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (len) *len = 0;
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = s ? fread(s, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    if (s) s[got] = '\0';
    fclose(f);
    if (len) *len = got;
    return s ? s : strdup("");
}

void cli_write(const char *name, const char *text)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", cli_tmp, name);
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

char *cli_slurp_tmp(const char *name, size_t *len)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", cli_tmp, name);
    return cli_slurp(p, len);
}

int cli_run(const char *fmt, ...)
{
    char cmd[6000], p[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_args, sizeof last_args, fmt, ap);
    va_end(ap);
    free(cli_out);
    free(cli_err);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' %s >'%s/stdout' 2>'%s/stderr' </dev/null", cli_tmp, cli_wrap, FR_CLI,
             last_args, cli_tmp, cli_tmp);
    int st = system(cmd);
    snprintf(p, sizeof p, "%s/stdout", cli_tmp);
    cli_out = cli_slurp(p, NULL);
    snprintf(p, sizeof p, "%s/stderr", cli_tmp);
    cli_err = cli_slurp(p, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void cli_show(int rc)
{
    fprintf(stderr, "\n  fp8run %s -> %d\n  stdout: %.3000s\n  stderr: %.3000s\n", last_args, rc,
            cli_out ? cli_out : "", cli_err ? cli_err : "");
}

const char *cli_path(const char *name)
{
    static char buf[8][700];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", cli_tmp, name);
    return buf[k];
}

int cli_suite_init(void)
{
    fr_test_tmpdir(cli_tmp, sizeof cli_tmp);
    return cli_tmp[0] ? 0 : 1;
}

int cli_suite_clean(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cli_tmp);
    free(cli_out);
    free(cli_err);
    cli_out = cli_err = NULL;
    return system(cmd) == 0 ? 0 : 1;
}

int cli_read_log(const char *path, double *losses, int max, int *val_records, int *skipped)
{
    char *s = cli_slurp(path, NULL), *line = s;
    int n = 0;
    *val_records = 0;
    if (skipped) *skipped = 0;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        long long step = -1;
        const char *ls = strstr(line, "\"loss\": ");
        if (sscanf(line, "{\"step\": %lld", &step) == 1 && ls && step >= 1 && step <= max) {
            losses[step - 1] = strtod(ls + 8, NULL);
            n++;
            CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"lr\": "));
            CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"grad_norm\": "));
            CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"tokens_per_s\": "));
            if (!skipped) {
                CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"skipped\": false"));
            } else if (!strstr(line, "\"skipped\": false")) {
                (*skipped)++;
            }
        } else if (strstr(line, "\"val_loss\": ")) {
            (*val_records)++;
        }
        line = nl ? nl + 1 : NULL;
    }
    free(s);
    return n;
}
