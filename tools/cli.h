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
/* cli_last_error() as a failure. */
int cli_fail_status(void);
/* A usage error for command `cmd` (NULL: top level), with a pointer to --help; returns
 * CLI_EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option matching for "--name VALUE" and "--name=VALUE". When argv[*i] is option `name`,
 * sets *value (advancing *i past a separate value) and returns 1; returns -1 (after printing
 * a usage error) when the value is missing; 0 when argv[*i] is another argument. */
int cli_option(int argc, char **argv, int *i, const char *cmd, const char *name, const char **value);
int cli_is_help(const char *arg);

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
/* mkdir -p; a failure is reported (CLI_EXIT_FAIL). */
int cli_make_dirs(const char *dir);

/* tools/cli_dist.c: data-parallel training. Reads the torchrun-style environment into o
 * (world_size, rank, local_rank); *launcher = 1 when this process should start `gpus` ranks
 * instead (cli_dist_launch: exit code of the first rank that failed, else 0). */
int cli_dist_env(int gpus, fp8run_train_config *o, int *launcher);
int cli_dist_launch(int gpus);

/* tools/cli_compile.c */
int cli_compile(int argc, char **argv);
void cli_compile_help(FILE *f);
/* The FP8 recipe options (--precision, --recipe, --fp8-format, --bf16-boundary, --fp8-exclude,
 * --no-fuse, --pad-multiple, --amax-history, --amax-algo, --fp8-margin, --fp8-interval) into
 * c. Returns 1 when argv[*i] was one of them (*rc set: 0 or a usage exit code). */
int cli_recipe_option(const char *cmd, int argc, char **argv, int *i, fp8run_train_config *c, int *rc);
/* The recipe options plus --batch, --seq, --dim, --tokens-input, --logits-output,
 * --loss-output, --train, --freeze (compile and info). */
int cli_compile_parse(const char *cmd, int argc, char **argv, int *i, fp8run_train_config *c, cli_dims *dims,
                      int64_t *batch, int64_t *seq, int *rc);
#define CLI_RECIPE_HELP                                                                              \
    "  --precision fp8|bf16    (default fp8)\n"                                                      \
    "  --recipe delayed|current|block  FP8 scaling (default delayed)\n"                              \
    "  --fp8-format hybrid|e4m3    (default hybrid: E4M3 forward, E5M2 gradients)\n"                 \
    "  --bf16-boundary N       Linear groups kept in BF16 at each end (default 1)\n"                 \
    "  --fp8-exclude REGEX     Linears whose weight or node name matches stay BF16\n"                \
    "  --no-fuse               do not fuse Linears that share their input (Q/K/V, gate/up)\n"       \
    "  --no-fuse-attention     keep attention and RoPE unfused (MatMul, Softmax, MatMul; default: one fused node each)\n" \
    "  --no-fuse-swiglu        keep the SwiGLU activation unfused (Sigmoid, Mul, Mul; default: one fused node)\n" \
    "  --pad-multiple N        FP8 GEMM dims padded to multiples of N (default 16)\n"               \
    "  --amax-history N --amax-algo max|most_recent --fp8-margin M --fp8-interval K\n"             \
    "                          delayed scaling (default 1024, max, 0, 1)\n"

int cli_info(int argc, char **argv);
void cli_info_help(FILE *f);
int cli_run(int argc, char **argv);
void cli_run_help(FILE *f);
/* tools/cli_bench.c */
int cli_bench(int argc, char **argv);
void cli_bench_help(FILE *f);
/* tools/cli_generate.c */
int cli_generate(int argc, char **argv);
void cli_generate_help(FILE *f);
/* tools/cli_safetensors.c */
/* --init-from: load a safetensors checkpoint into the session's parameters and report. */
int cli_init_from(fp8run_session *s, const char *path);
/* export CKPT --safetensors DIR [--dtype fp32|bf16] [--max-shard-mb N]: the checkpoint's weights */
int cli_export_safetensors(const char *ckpt, const char *dir, const char *dtype, int64_t max_shard_mb);

/* tools/cli_train.c */
int cli_train(int argc, char **argv);
void cli_train_help(FILE *f);
int cli_eval(int argc, char **argv);
void cli_eval_help(FILE *f);
int cli_export(int argc, char **argv);
void cli_export_help(FILE *f);

#endif
