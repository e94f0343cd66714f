/* Bookkeeping of a training run's checkpoint folder: which checkpoints this run (or the run it
 * resumes) wrote, so that --ckpt-keep removes only those and never a file someone else put
 * there; and the clean-up of temporary files that killed runs left behind. */
#ifndef FP8RUN_TOOLS_CLI_CKPT_DIR_H
#define FP8RUN_TOOLS_CLI_CKPT_DIR_H

#include <stdint.h>
#include <time.h>

#include <fp8run.h>

typedef struct cli_ckpt_set {
    int64_t *steps; /* ascending */
    int n, cap;
} cli_ckpt_set;

/* Record that the checkpoint of `step` is ours (kept ascending, no duplicates); 0 or
 * CLI_EXIT_FAIL (out of memory). */
int cli_ckpt_set_add(cli_ckpt_set *s, int64_t step);
/* Remove our oldest checkpoints (path_of(dir, step), malloc'ed) until `keep` remain (0: keep
 * all). A file that cannot be removed is a warning. */
void cli_ckpt_set_prune(cli_ckpt_set *s, const char *dir, int64_t keep, char *(*path_of)(const char *, int64_t));
void cli_ckpt_set_free(cli_ckpt_set *s);

/* Remove DIR/step_N.ckpt.tmp.PID.K files (the checkpoint writer's exact temporary names) that
 * are older than `since` and whose writer process is gone; each removal is reported. */
void cli_ckpt_clean_stale_tmp(const char *dir, struct timespec since);


/* The checkpoint files a run writes: DIR/step_NNNNNNNN.ckpt */
#define CKPT_PATTERN "step_%08lld.ckpt"
/* DIR/step_N.ckpt, malloc'ed (NULL: out of memory). */
char *cli_ckpt_path(const char *dir, int64_t step);
/* The newest checkpoint of dir that opens and verifies (corrupted ones skipped with a warning):
 * *path (malloc'ed) and *ck kept open, or *path = NULL when there is none. */
int cli_ckpt_newest_valid(const char *dir, char **path, fp8run_checkpoint **ck);
/* On resume: the checkpoints up to step `upto` that verify are ours to prune. */
int cli_ckpt_adopt(const char *dir, int64_t upto, cli_ckpt_set *mine);

#endif
