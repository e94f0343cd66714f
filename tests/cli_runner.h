/* Running the fp8run CLI from tests: one temporary working folder per program, the command's
 * stdout and stderr captured as text, exit codes returned. */
#ifndef FR_CLI_RUNNER_H
#define FR_CLI_RUNNER_H

#include <stddef.h>

#include "tests/harness.h"

extern char cli_tmp[512];         /* the working folder (cli_suite_init) */
extern char *cli_out, *cli_err;   /* the last command's stdout and stderr */
/* Put before the program on the command line (default ""): e.g. "timeout -k 2 20", so that a
 * command that hangs ends with exit 124 instead of hanging the test. */
extern const char *cli_wrap;

/* Run `fp8run ARGS` (printf-style, shell-quoted by the caller) in cli_tmp, stdin /dev/null;
 * returns its exit code (-1 when it did not exit normally). */
int cli_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print the last command, its exit code and output (on a failed expectation). */
void cli_show(int rc);
/* The whole file as a NUL-terminated string (malloc'ed; "" when unreadable); *len may be NULL. */
char *cli_slurp(const char *path, size_t *len);
/* cli_tmp "/" name (one of 8 rotating buffers). */
const char *cli_path(const char *name);
/* losses[step-1] from the step records of a `fp8run train --log` JSONL file (each checked for
 * lr, grad_norm and tokens_per_s); returns the number of step records and counts validation
 * records in *val_records. Skipped steps are counted in *skipped, or, when skipped is NULL,
 * each step is checked to be "skipped": false. */
int cli_read_log(const char *path, double *losses, int max, int *val_records, int *skipped);
/* Write text to cli_tmp/name (a failed assertion when it cannot). */
void cli_write(const char *name, const char *text);
/* cli_slurp of cli_tmp/name. */
char *cli_slurp_tmp(const char *name, size_t *len);
/* CUnit suite init/cleanup: create / remove cli_tmp. */
int cli_suite_init(void);
int cli_suite_clean(void);

/* The command exits with want_rc and `text` (cli_out or cli_err) contains needle. */
#define CLI_EXPECT(call, want_rc, text, needle)                     \
    do {                                                            \
        int rc_ = (call);                                           \
        int ok_ = rc_ == (want_rc) && strstr((text), (needle));     \
        if (!ok_) cli_show(rc_);                                    \
        CU_ASSERT(ok_);                                             \
    } while (0)

#endif
