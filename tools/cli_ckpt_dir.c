/* Checkpoint-folder bookkeeping (see cli_ckpt_dir.h). */
#include "cli_ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cli_ckpt_set_add(cli_ckpt_set *s, int64_t step)
{
    int at = s->n;
    while (at > 0 && s->steps[at - 1] >= step) at--;
    if (at < s->n && s->steps[at] == step) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        int64_t *ns = realloc(s->steps, (size_t)cap * sizeof *ns);
        if (!ns) return cli_fail("out of memory");
        s->steps = ns;
        s->cap = cap;
    }
    memmove(s->steps + at + 1, s->steps + at, (size_t)(s->n - at) * sizeof *s->steps);
    s->steps[at] = step;
    s->n++;
    return 0;
}

void cli_ckpt_set_prune(cli_ckpt_set *s, const char *dir, int64_t keep, char *(*path_of)(const char *, int64_t))
{
    if (keep <= 0 || s->n <= keep) return;
    int drop = s->n - (int)keep;
    for (int i = 0; i < drop; i++) {
        char *p = path_of(dir, s->steps[i]);
        if (p && unlink(p) != 0 && errno != ENOENT)
            fprintf(stderr, "fp8run: warning: cannot remove old checkpoint '%s': %s\n", p, strerror(errno));
        free(p);
    }
    memmove(s->steps, s->steps + drop, (size_t)(s->n - drop) * sizeof *s->steps);
    s->n -= drop;
}

void cli_ckpt_set_free(cli_ckpt_set *s)
{
    free(s->steps);
    memset(s, 0, sizeof *s);
}

/* step_<digits>.ckpt.tmp.<pid>.<digits>, nothing more; *pid the writer's process. */
static int is_writer_tmp(const char *name, long *pid)
{
    unsigned long long step, k;
    int end = 0;
    if (sscanf(name, "step_%llu.ckpt.tmp.%ld.%llu%n", &step, pid, &k, &end) != 3 || end == 0 || name[end]) return 0;
    for (const char *c = name + 5; *c; c++) /* no signs or spaces that sscanf lets through */
        if (!(*c >= '0' && *c <= '9') && !strchr(".ckptm", *c)) return 0;
    return *pid > 0;
}

void cli_ckpt_clean_stale_tmp(const char *dir, struct timespec since)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        if (!is_writer_tmp(e->d_name, &pid)) continue;
        /* a writer that still runs (another run in this folder) keeps its file */
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p) break;
        snprintf(p, n, "%s/%s", dir, e->d_name);
        struct stat sb;
        /* last written before this run started (to the nanosecond: a run killed and resumed within
           the same second leaves its file too) */
        if (lstat(p, &sb) == 0 && S_ISREG(sb.st_mode) &&
            (sb.st_mtim.tv_sec < since.tv_sec ||
             (sb.st_mtim.tv_sec == since.tv_sec && sb.st_mtim.tv_nsec < since.tv_nsec))) {
            if (unlink(p) == 0)
                fprintf(stderr, "fp8run: removed '%s', a partial checkpoint of an interrupted run\n", p);
            else
                fprintf(stderr, "fp8run: warning: cannot remove partial checkpoint '%s': %s\n", p, strerror(errno));
        }
        free(p);
    }
    closedir(d);
}
