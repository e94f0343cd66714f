/* The arguments `fp8run train` and `fp8run eval` share: the training options of the command
 * (fp8run_train_config through runtime/train/train_config.def), data, device and shape, and how a
 * model or a checkpoint is opened. */
#ifndef FP8RUN_TOOLS_CLI_TRAIN_ARGS_H
#define FP8RUN_TOOLS_CLI_TRAIN_ARGS_H

#include <stdio.h>

#include "cli.h"

typedef struct train_args {
    const char *model, *data, *val, *log, *ckpt_dir, *export_path, *model_opt, *out;
    int64_t steps, batch, seq, val_every, val_batches, log_every, ckpt_every, ckpt_keep, batches;
    int have_steps, have_batch, have_seq, have_val_batches, resume;
    fp8run_data_order order;
    fp8run_dtype token_dtype;
    fp8run_train_config o;
    unsigned command;       /* FP8RUN_OPTION_TRAIN or FP8RUN_OPTION_EVAL: the options it takes */
    cli_given given;        /* which of them were given */
    const char *device;     /* --device */
    cli_dims dims;
    int64_t log_fp8;        /* --log-fp8 N: FP8 statistics every N steps (0: off) */
    const char *recipe_opt; /* the first precision/recipe option given (refused with a .fbs) */
    const char *init_from;  /* --init-from DIR|FILE (safetensors) */
    int gpus;               /* --gpus N (0: not given) */
    int nnodes, node_rank;  /* --nnodes N (0: not given), --node-rank R (-1: not given) */
    const char *adapter_dir; /* --export-adapter DIR (a LoRA run) */
    int strict_weights;      /* --strict-weights: --init-from refuses NaN/Inf weights */
} train_args;

/* The command's defaults (FP8RUN_OPTION_TRAIN or FP8RUN_OPTION_EVAL). */
void train_args_init(train_args *a, unsigned command);
/* --help's last lines: the command's training options with their defaults. */
void train_args_help(FILE *f, unsigned command, const char *required, const char *const *no_default);
/* Options train and eval share; 1 when argv[*i] was one (rc set), 0 if not. */
int train_args_option(const char *cmd, int argc, char **argv, int *i, train_args *a, int *rc);
/* After parsing: --batch and --seq as given (0: not given). */
void train_args_given_shape(train_args *a);
/* batch, seq and precision from a compiled graph (given ones must agree); an ONNX model needs
 * --batch and --seq. */
int train_args_shape_from_model(const char *cmd, train_args *a, const fp8run_model *m);
/* The data loader's options from the arguments (the model's vocabulary: vocab). */
fp8run_data_config train_args_data_config(const train_args *a, int64_t vocab);
/* A model path, or a checkpoint whose model comes from model_opt or its record. */
int cli_load_model_or_ckpt(const char *arg, const char *model_opt, fp8run_model **m);

#endif
