/* SFT token files (prepare --sft) in `fp8run train` and `fp8run eval`: the loss over target
 * tokens, token-weighted (fp8run_session_*_sft in include/fp8run.h). */
#ifndef FP8RUN_TOOLS_CLI_SFT_H
#define FP8RUN_TOOLS_CLI_SFT_H

#include "cli_train_args.h"

/* Before the session: config.sft set when --data is an SFT token file (1 returned), and
 * --packing checked to be used only with one. */
int cli_sft_setup(const char *cmd, train_args *a);
/* Before the session, batch and seq known: config.sft_max_examples from the SFT files (--data
 * and --val, when given), the most examples any of their windows holds at this --seq and
 * --packing (left 0 when a file does not open: its loader says why later). */
void cli_sft_size(const train_args *a, fp8run_train_config *o);
/* After the session: a warning when packing would shift a model's absolute positions. */
void cli_sft_warn_positions(const train_args *a, fp8run_session *t);
/* A one-line description of an SFT loader (examples, windows, truncated, target tokens,
 * how full the windows are) to stderr. */
void cli_sft_describe(const char *what, fp8run_data_loader *d, int64_t seq);
/* The mean loss over every target token of a validation loader (every batch of it, each
 * weighted by its target count) and the count. */
int cli_sft_eval(fp8run_session *t, fp8run_data_loader *d, double *loss, int64_t *targets);

#endif
