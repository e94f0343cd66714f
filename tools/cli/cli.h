/* Shared pieces of the fp8run CLI: the command table entry, error reporting with the exit
 * codes the CLI promises (1: the work failed, 2: the command line is wrong), and option
 * parsing helpers. Results go to stdout, everything else to stderr.
 *
 * The CLI is a host program of the public C API like any other: tools/ includes <fp8run.h>
 * and nothing of the library's internals. */
#ifndef FP8RUN_TOOLS_CLI_H
#define FP8RUN_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <fp8run.h>

#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    void (*help)(FILE *f);
} cli_command;

/* "fp8run: error: <message>" on stderr; return CLI_EXIT_FAIL. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The library's last error message (this thread's), as the CLI shows it: without the name of
 * the API function that reports it ("fp8run_session_create: "), which says nothing to a user of
 * the command line. */
const char *cli_last_error(void);

/* The commit this CLI was built from: "05e756c", "05e756c-dirty" or "unknown" (generated at
 * build time by tools/commit_stamp.cmake). */
const char *cli_commit(void);
/* cli_last_error() as a failure. */
int cli_fail_status(void);
/* For fp8run_*_config_init(&c, sizeof c), which fails only for a NULL struct or one smaller than
 * the first version's: neither can happen here, so a failure is a broken build. It is reported
 * and ends the program (the defaults are filled in void helpers and help printers). */
void cli_must(fp8run_status st);
/* A usage error for command `cmd` (NULL: top level), with a pointer to --help; returns
 * CLI_EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option matching for "--name VALUE" and "--name=VALUE". When argv[*i] is option `name`,
 * sets *value (advancing *i past a separate value) and returns 1; returns -1 (after printing
 * a usage error) when the value is missing or empty; 0 when argv[*i] is another argument. */
int cli_option(int argc, char **argv, int *i, const char *cmd, const char *name, const char **value);
int cli_is_help(const char *arg);
/* An integer option's value >= min into *out; a usage error (returned) otherwise. */
int cli_int64(const char *cmd, const char *opt, const char *text, int64_t min, int64_t *out);

/* A growing list of --dim bindings, as the API's configs take them (parallel arrays; the
 * names are owned). */
typedef struct cli_dims {
    const char **names;
    int64_t *values;
    int n;
} cli_dims;
/* Parse "NAME=VALUE" (VALUE a non-negative integer) and append; CLI_EXIT_USAGE on a bad
 * form (message printed), 0 on success. */
int cli_dims_add(cli_dims *d, const char *cmd, const char *arg);
void cli_dims_free(cli_dims *d);

/* "1.23M", "45.6K", "999" into buf. */
const char *cli_human_count(int64_t n, char *buf, size_t len);
/* "4.94 MiB", "512 B" into buf. */
const char *cli_human_bytes(uint64_t n, char *buf, size_t len);
/* A shape as "[2, 5, 3]" into buf. */
const char *cli_dims_text(int rank, const int64_t *dims, char *buf, size_t len);
/* A graph value's shape with its symbolic dims: "[batch, seq=8, 768]" ("?" for an unknown
 * unnamed dim, "(no shape)" for an unknown rank) into buf. */
const char *cli_shape_text(const fp8run_value_info *v, char *buf, size_t len);
/* mkdir -p; a failure (or an empty name) is reported (CLI_EXIT_FAIL). */
int cli_make_dirs(const char *dir);
/* Why a path read from a file may not be opened: NULL for a relative path below the working
 * folder that passes through no symbolic link; else "an absolute path", "a path with '..'" or
 * "a path through the symbolic link 'X'" (a static buffer). */
const char *cli_path_escape(const char *p);

/* tools/cli/cli_options.c: the training options (the library's table of fp8run_train_config). */
/* Which entries a command was given, by table index. */
typedef struct cli_given {
    unsigned char set[128];
} cli_given;
/* When argv[*i] is the flag of an option `command` (FP8RUN_OPTION_TRAIN, ...) takes: set it in c
 * (fp8run_train_config_set), mark it in given (may be NULL) and return 1 with *rc 0 or
 * CLI_EXIT_USAGE (message printed); 0 when argv[*i] is another argument. */
int cli_config_option(const char *cmd, unsigned command, int argc, char **argv, int *i, fp8run_train_config *c,
                      cli_given *given, int *rc);
/* Was option `name` (field or flag) given? */
int cli_config_given(const cli_given *given, const char *name);
/* Is arg (--flag or --flag=V) an option a compiled graph fixes? */
int cli_config_fixed_flag(const char *arg);
/* The help lines of the options `command` takes, their defaults read from c, except for the
 * fields in no_default (NULL-terminated, may be NULL): those the command requires or derives. */
void cli_config_help(FILE *f, unsigned command, const fp8run_train_config *c, const char *const *no_default);
/* {"batch", "seq_len", NULL}: what compile, bench and eval require (no default in their help). */
extern const char *const cli_shape_options[];
/* Parse a choice: *out = its index, or a usage error "OPT: 'TEXT' is not one of ..." (returned). */
int cli_choice(const char *cmd, const char *opt, const char *text, const char *const *choices, int *out);

/* tools/cli/cli_dist.c: data-parallel training. Reads the torchrun-style environment into o
 * (world_size, rank, local_rank; checked by fp8run_dist_env_read); *launcher = 1 when this
 * process should start `gpus` ranks instead: node node_rank of nnodes (0 and -1: one node)
 * (cli_dist_launch: exit code of the first rank that failed, else 0). A rank started by the
 * launcher runs the same command line: its --gpus/--nnodes/--node-rank must agree with its
 * environment. */
int cli_dist_env(int gpus, int nnodes, int node_rank, fp8run_train_config *o, int *launcher);
int cli_dist_launch(int gpus, int nnodes, int node_rank);
/* --nnodes N / --node-rank R of train and rendezvous: 1 when argv[*i] was one (*rc set). */
int cli_dist_option(const char *cmd, int argc, char **argv, int *i, int *nnodes, int *node_rank, int *rc);

/* tools/cli/cli_rendezvous.c */
int cli_rendezvous(int argc, char **argv);
void cli_rendezvous_help(FILE *f);

/* tools/cli/cli_compile.c */
int cli_compile(int argc, char **argv);
void cli_compile_help(FILE *f);
/* compile's and info's defaults: the library's, with precision fp8. */
void cli_compile_defaults(fp8run_train_config *o);
/* The options compile and info take (the training options marked for `command`, and --dim)
 * into c and dims. Returns 1 when argv[*i] was one of them (*rc set: 0 or a usage exit code). */
int cli_compile_parse(const char *cmd, unsigned command, int argc, char **argv, int *i, fp8run_train_config *c,
                      cli_dims *dims, cli_given *given, int *rc);

int cli_info(int argc, char **argv);
void cli_info_help(FILE *f);
int cli_run(int argc, char **argv);
void cli_run_help(FILE *f);
/* tools/cli/cli_bench.c */
int cli_bench(int argc, char **argv);
void cli_bench_help(FILE *f);
/* tools/cli/cli_generate.c */
int cli_generate(int argc, char **argv);
void cli_generate_help(FILE *f);
/* tools/cli/cli_safetensors.c */
/* --init-from: load a safetensors checkpoint into the session's parameters and report. */
/* A file of a command, for cli_check_files. */
typedef struct cli_file {
    const char *path, *what;
} cli_file;
/* The write rule's refusals before any work (fp8run_files): no output is one of the inputs by
 * any name or link, no two outputs one file, no output a folder, FIFO or device. NULL paths are
 * skipped. 0, or CLI_EXIT_FAIL after the message. */
int cli_check_files(const cli_file *inputs, int n_in, const cli_file *outputs, int n_out);
/* into s, else into m; flags: FP8RUN_LOAD_STRICT_WEIGHTS or 0 (NaN/Inf tensors warned) */
int cli_init_from(fp8run_session *s, fp8run_model *m, const char *path, int flags);
/* The training log for appending (append) or anew: a regular file opened without following a
 * link (a FIFO or a link there is refused with a message); NULL after printing the failure. */
FILE *cli_open_log(const char *path, int append);
/* export CKPT --safetensors DIR [--dtype fp32|bf16] [--max-shard-mb N]: the checkpoint's weights */
int cli_export_safetensors(const char *ckpt, const char *dir, const char *dtype, int64_t max_shard_mb);

/* tools/cli/cli_prepare.c */
int cli_prepare(int argc, char **argv);
void cli_prepare_help(FILE *f);
/* tools/cli/cli_sample.c */
int cli_sample(int argc, char **argv);
void cli_sample_help(FILE *f);
/* tools/cli/cli_python.c: run `script` of the fp8run Python package (prepare.py, tokens.py)
 * with python3 ($FP8RUN_PYTHON) and args; input (may be NULL) is its standard input, and with
 * output non-NULL its standard output is captured there (malloc'ed). Exit 2 of the script is
 * CLI_EXIT_USAGE, another failure CLI_EXIT_FAIL (its messages went to stderr). */
int cli_python(const char *script, int argc, char **argv, const char *input, char **output);
/* tools/cli/cli_plot.c */
int cli_plot(int argc, char **argv);
void cli_plot_help(FILE *f);

/* tools/cli/cli_train.c */
int cli_train(int argc, char **argv);
void cli_train_help(FILE *f);
int cli_eval(int argc, char **argv);
void cli_eval_help(FILE *f);
int cli_export(int argc, char **argv);
void cli_export_help(FILE *f);

#endif
