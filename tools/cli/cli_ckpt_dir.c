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

/* ---- the checkpoint files of a folder ---- */

char *cli_ckpt_path(const char *dir, int64_t step)
{
    size_t n = strlen(dir) + 64;
    char *p = malloc(n);
    if (p) {
        int k = snprintf(p, n, "%s/", dir);
        snprintf(p + k, n - (size_t)k, CKPT_PATTERN, (long long)step);
    }
    return p;
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Steps of the checkpoint files in dir (step_NNNNNNNN.ckpt), newest first. */
static int list_ckpts(const char *dir, int64_t **steps, int *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : cli_fail("cannot read folder '%s': %s", dir, strerror(errno));
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        long long s;
        int end = 0;
        if (sscanf(e->d_name, "step_%lld.ckpt%n", &s, &end) != 1 || end == 0 || e->d_name[end] || s < 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(*steps, (size_t)cap * sizeof *ns);
            if (!ns) {
                closedir(d);
                return cli_fail("out of memory");
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(*steps, (size_t)*n, sizeof **steps, newest_first); /* a folder may hold very many */
    return 0;
}

/* The newest checkpoint that opens and verifies; corrupted ones are skipped with a warning.
 * *path = NULL when there is none; *ck (kept open: its data loader state) with it. */
int cli_ckpt_newest_valid(const char *dir, char **path, fp8run_checkpoint **ck)
{
    int64_t *steps;
    int n;
    *path = NULL;
    *ck = NULL;
    int rc = list_ckpts(dir, &steps, &n), skipped = 0;
    for (int i = 0; rc == 0 && i < n && !*path; i++) {
        char *p = cli_ckpt_path(dir, steps[i]);
        if (!p) {
            rc = cli_fail("out of memory");
        } else if (fp8run_checkpoint_open(p, ck) == FP8RUN_OK) {
            *path = p;
        } else {
            fprintf(stderr, "fp8run: warning: skipping checkpoint '%s': %s\n", p, cli_last_error());
            free(p);
            skipped++;
        }
    }
    free(steps);
    /* starting afresh over unusable checkpoints would silently throw the run away */
    if (rc == 0 && !*path && skipped)
        rc = cli_fail("--resume: none of the %d checkpoint file(s) in '%s' is usable (see the warnings); "
                      "move them away to start from step 0", skipped, dir);
    return rc;
}

/* On resume: the checkpoints of the run we continue (those that verify, up to its step) are
 * ours to prune; files that do not verify are left alone. */
int cli_ckpt_adopt(const char *dir, int64_t upto, cli_ckpt_set *mine)
{
    int64_t *steps;
    int n;
    int rc = list_ckpts(dir, &steps, &n);
    for (int i = 0; rc == 0 && i < n; i++) {
        if (steps[i] > upto) continue;
        char *p = cli_ckpt_path(dir, steps[i]);
        fp8run_checkpoint *ck = NULL;
        if (!p) rc = cli_fail("out of memory");
        else if (fp8run_checkpoint_open(p, &ck) == FP8RUN_OK && fp8run_checkpoint_step(ck) == steps[i])
            rc = cli_ckpt_set_add(mine, steps[i]);
        fp8run_checkpoint_close(ck);
        free(p);
    }
    free(steps);
    return rc;
}
