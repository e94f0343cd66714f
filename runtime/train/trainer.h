/* The trainer: turns an imported model (an fr_graph straight from fr_onnx_load_file) into
 * training steps on a backend (the CPU or CUDA one, runtime/train/train_backend.h; opt.device).
 *
 * Building (fr_trainer_new):
 *   - a pristine deep copy of the model is kept for export (original names and layouts);
 *   - a training copy that borrows the pristine copy's initializers (graph_clone's shared
 *     mode: the model's weights are held once, not twice) goes through the graph passes of
 *     passes/pipeline.c, in the order listed there (fr_trainer's `passes` records what each
 *     did); in short, it is prepared
 *     (fr_prepare_forward) with the batch and sequence dims fixed
 *     from the tokens input's symbolic dims, the trained parameters chosen (float32
 *     initializers, filtered by the train/freeze regexes), compiled for the precision
 *     (fr_fp8_compile for bf16/fp8; fp32 is not rewritten), given a `labels` input [B, T] and
 *     an ai.fp8run::SoftmaxCrossEntropy loss head over the logits output (or the model's own
 *     scalar loss output), differentiated (fr_autodiff) w.r.t. the trained parameters, and its
 *     outputs replaced by: the loss, every gradient, every FP8 amax;
 *   - an eval copy of the forward graph shares every constant (the parameters included) with
 *     the training graph and outputs the loss plus the model's own outputs;
 *   - the optimizer reads the parameters in place (value->constant->data, which the executor
 *     also reads in place, so an update is seen by the next run) and the gradients from
 *     trainer-owned buffers that accumulate the micro-batches of a step.
 * Graph inputs other than the tokens are fed when their names are known: attention_mask ->
 * ones, position_ids -> 0..T-1 per row, token_type_ids -> zeros, labels (with a loss output)
 * -> the labels; any other input is an error naming it.
 *
 * A step (fr_trainer_step) takes K micro-batches of B windows of T+1 token ids (inputs are the
 * first T of each window, labels the last T), runs forward+backward K times summing the
 * gradients, averages them (g / K), clips them to the global norm (optional), and updates the
 * parameters with the schedule's learning rate. A step whose loss, gradients or FP8 amaxes are
 * not finite is skipped: weights, optimizer and scaling state stay exactly as they were; more
 * than max_bad_steps skipped steps in a row is FR_ERR_NUMERIC.
 *
 * A step whose forward fails with FR_ERR_NUMERIC (current/block FP8 scaling meeting a NaN or Inf
 * amax) is skipped the same way.
 *
 * Checkpoints (fr_trainer_save / fr_trainer_load, runtime/io/checkpoint.h container) hold the FP32
 * weights under their ORIGINAL names and layouts (fused parameters are split back), the
 * optimizer state per original parameter and slot, the step counters, the RNG state, FP8
 * delayed-scaling state, the data loader's state (bytes given by the caller) and the options
 * as JSON. A checkpoint of one precision loads into a trainer of another. Resuming is exact:
 * on the CPU every later loss equals, bit for bit, the one of the uninterrupted run.
 *
 * Not thread-safe; one trainer per thread. */
#ifndef FR_TRAINER_H
#define FR_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "passes/fp8_compile.h"
#include "passes/passes.h"
#include "passes/pipeline.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/optimizer.h"

typedef struct fr_train_options {
    int64_t batch;             /* B >= 1 */
    int64_t seq_len;           /* T >= 1 */
    const char *tokens_input;  /* NULL: the first int64/int32 graph input */
    const char *logits_output; /* NULL: the first float graph output of rank >= 2 */
    const char *loss_output;   /* non-NULL: the model computes its own scalar loss (no loss head) */
    int64_t ignore_index;      /* labels equal to it do not count (default -100) */
    const char *train_regex;   /* POSIX extended regexes over parameter names; NULL = none: */
    const char *freeze_regex;  /* trained = float initializers matching train (all when NULL)
                                  and not matching freeze */
    const fr_dim_binding *dims;/* extra symbolic dims (--dim NAME=V); not owned */
    int n_dims;
    const char *precision;     /* "fp32" (default) | "bf16" | "fp8" */
    fr_fp8_options fp8;        /* recipe, format, boundaries, ... for bf16/fp8 (its precision
                                  field is ignored: `precision` above decides) */
    fr_opt_config opt;         /* default: AdamW, torch defaults */
    fr_lr_schedule lr;         /* default: constant 1e-3 */
    double grad_clip;          /* max global norm; <= 0: no clipping */
    int grad_accum;            /* K >= 1: micro-batches per step */
    uint64_t seed;             /* the trainer's generator and the dropout masks' key (checkpointed) */
    int max_bad_steps;         /* skipped steps allowed in a row (default 10) */
    int unshare;               /* 1 (default): parameters the exporter merged because their values
                                  were equal (Identity of an all-equal initializer, passes/
                                  unshare.h) are trained separately, under their own names */
    int retie;                 /* 1 (default): a parameter that is a bit-exact (transposed) copy of
                                  an embedding table reads the table again (passes/retie.h: a tied
                                  LM head that constant folding untied) */
    const char *device;        /* "cpu" (default) | "cuda" | "auto" (CUDA when a usable GPU is
                                  present, else the CPU) */
    const char *recompute;     /* "none" (default) | "attention" | "mlp" | "full" (passes/
                                  recompute.h): regions of each block the backward recomputes */
    fr_lora_options lora;      /* rank 0 (default): no LoRA; else adapters on the Linears whose
                                  weight matches lora.targets, the base frozen (passes/lora.h) */
    int eval_only;             /* 1: no backward graph, no optimizer: fr_trainer_eval only (and
                                  fr_trainer_load of the weights); fr_trainer_step/save refuse */
    /* data parallel over NCCL (runtime/dist/dist.h, CUDA only): world_size > 0 makes this trainer rank
       `rank` of world_size on CUDA device local_rank; its gradients, loss and FP8 amaxes are
       reduced across ranks every step; only rank 0 writes checkpoints and exports. 0: alone */
    int world_size, rank, local_rank;
    void *nccl_comm;           /* an ncclComm_t the caller made (not owned), or NULL: made here,
                                  its id sent by rank 0 over TCP on MASTER_ADDR:MASTER_PORT */
    int shard_optimizer;       /* 1: ZeRO-1, each rank keeps the optimizer state of the parameters
                                  it owns (fr_dist_partition) and broadcasts them after the update */
    int plan_only;             /* 1: build the graphs only, no executor, optimizer or device
                                  (fr_train_predict_memory, runtime/train/train_memory.h) */
    const char *attention;     /* the fused attention's GPU kernels: NULL or "auto" (default),
                                  "cudnn", "fp8run" (ops/cuda/attention_cudnn.h; --attention) */
    int sft_padded;            /* with sft: the batches hold one example per window (--packing
                                  off), so the attention nodes are promised seg_form "padded"
                                  (per-row key lengths) rather than "packed" */
    int chunked_lm_head;       /* --chunked-lm-head (passes/lm_head_fuse.h): 1 on, 0 off, -1 auto
                                  (fr_trainer_new makes it on for the CUDA backend) */
    int sft_max_examples;      /* with sft: the most examples a window holds (0: FR_SFT_MAX_EXAMPLES);
                                  sizes cuDNN's variable-length attention slots on the GPU */
    /* the plain switches, one int each, named, defaulted and documented by their FR_OPT_PLAIN
       line of runtime/train/train_config.def: fuse_attention (passes/attention_fuse.h and
       rotary_fuse.h), fuse_swiglu (passes/swiglu_fuse.h), shard_gradients (ZeRO-2,
       runtime/cuda/dist_train.h), fuse_attention_io (passes/attention_io.h), fp8_fast_accum
       (ops/cuda/cuda_gemm.h), ... */
#define FR_OPT(...)
#define FR_OPT_PLAIN(field, TYPE, ...) int field;
#include "runtime/train/train_config.def"
#undef FR_OPT
#undef FR_OPT_PLAIN
} fr_train_options;

void fr_train_options_default(fr_train_options *o);

typedef struct fr_train_stats {
    int64_t step;       /* index of this step (0-based; the lr schedule's step) */
    double loss;        /* mean of the micro-batches' losses */
    double grad_norm;   /* global norm of the averaged gradient, before clipping (NaN/Inf when
                           not finite) */
    double lr;
    int skipped;        /* 1: non-finite loss/gradients/amax, nothing was updated */
    int bad_in_a_row;   /* skipped steps in a row, this one included */
    char reason[256];   /* why it was skipped ("" otherwise) */
} fr_train_stats;

typedef struct fr_trainer fr_trainer;

/* Build a trainer for `model` (not modified; it may be freed afterwards). */
FR_NODISCARD fr_status fr_trainer_new(const fr_graph *model, const fr_train_options *opt, fr_trainer **out);
void fr_trainer_free(fr_trainer *t);

/* One optimizer step over k micro-batches: `windows` holds k * B * (T+1) token ids, row-major.
 * Token ids must be in [0, vocab) (FR_ERR_RANGE otherwise, nothing changed). A skipped step
 * returns FR_OK with stats->skipped = 1, unless it is more than max_bad_steps in a row:
 * FR_ERR_NUMERIC (stats filled in all the same). stats may be NULL. */
FR_NODISCARD fr_status fr_trainer_step(fr_trainer *t, const int64_t *windows, int k, fr_train_stats *stats);

/* ---- steps that do not wait ----
 * fr_trainer_step waits for the step's result (on a GPU: the device finishing it). These queue
 * a step and return at once; its statistics are read back later, in step order, when asked for.
 * On the CPU a queued step runs inside fr_trainer_step_async (CPU steps are synchronous); only
 * when its statistics are handed out differs. */
/* Steps that may be queued and not yet polled. */
#define FR_TRAIN_MAX_QUEUED 64
/* Queue one step (arguments as fr_trainer_step); *step (may be NULL) gets its index. The
 * windows are copied before it returns. Bad arguments or token ids change nothing;
 * FR_ERR_INVALID_ARG when FR_TRAIN_MAX_QUEUED steps wait for fr_trainer_poll. On a GPU nothing
 * waits for the device; an error found there later (a kernel-reported data error) is returned
 * by the call that reads that step back, naming the step and the steps queued after it. Any
 * other error leaves the trainer unusable. Error messages number steps from 1 (the CLI's
 * numbering: step N is the one whose fr_train_stats.step is N - 1). */
FR_NODISCARD fr_status fr_trainer_step_async(fr_trainer *t, const int64_t *windows, int k, int64_t *step);
/* The statistics of the oldest queued step not polled yet, and the status fr_trainer_step would
 * have returned for it: FR_OK (skipped steps included), FR_ERR_NUMERIC for more than
 * max_bad_steps skipped steps in a row (the steps queued after it have run all the same), or
 * a data error a kernel reported, naming the node (the trainer is then unusable). wait = 1
 * waits for the device; wait = 0 sets *got = 0 when that step has not finished yet. *got = 0
 * (FR_OK) when nothing is queued. */
FR_NODISCARD fr_status fr_trainer_poll(fr_trainer *t, int wait, fr_train_stats *stats, int *got);
/* Steps queued whose statistics were not polled yet. */
int fr_trainer_queued(const fr_trainer *t);
/* Read back every queued step from the device now (they stay for fr_trainer_poll) so that the
 * counters (skipped steps, optimizer steps) are up to date: what eval, save, load, export and
 * parameter access do first. Returns the first data error found (the trainer is then
 * unusable); FR_ERR_NUMERIC of a step is kept for its poll. */
FR_NODISCARD fr_status fr_trainer_retire_all(fr_trainer *t);

/* ---- SFT batches (a trainer built with opt.sft; runtime/train/train_sft.c) ----
 * As fr_trainer_step / _async / fr_trainer_eval, with per window token a segment id (int32:
 * 1, 2, ... for the examples in the window, in runs from its start, 0 on the padding after
 * them) and a target flag (1: the token is a label the loss counts). Position j's label is
 * token j + 1 when that is a target of the same example, else ignore_index. The loss is the
 * mean over the step's target tokens (token-weighted across its k micro-batches), and each
 * example attends only to itself. Eval: *n_targets (may be NULL) gets the labels that counted. */
FR_NODISCARD fr_status fr_trainer_step_sft(fr_trainer *t, const int64_t *windows, const int32_t *segments,
                                           const uint8_t *targets, int k, fr_train_stats *stats);
/* all_targets > 0: the labels that count in the step's batches of every data-parallel rank
 * (what one global batch holds): each rank then weighs its micro-batches by their share of
 * them, so that the ranks' averaged loss and gradients are the mean over all of them. 0: this
 * rank's own. */
FR_NODISCARD fr_status fr_trainer_step_sft_async(fr_trainer *t, const int64_t *windows, const int32_t *segments,
                                                 const uint8_t *targets, int k, int64_t all_targets, int64_t *step);
FR_NODISCARD fr_status fr_trainer_eval_sft(fr_trainer *t, const int64_t *windows, const int32_t *segments,
                                           const uint8_t *targets, double *loss, int64_t *n_targets);
/* 1 when a packed example sees the positions it would see alone: the graph takes position_ids
 * (fed per example) or embeds positions by rotation (fused Rotary / AttentionQKV tables: only
 * distances count); 0 when it computes absolute positions itself (GPT-2's learned table from an
 * in-graph arange), which then run on across a window. */
int fr_trainer_sft_positions(const fr_trainer *t);

/* Loss of one micro-batch (B windows of T+1 ids) without updating anything. Afterwards the
 * model's own outputs of that run are available through fr_trainer_eval_output. */
FR_NODISCARD fr_status fr_trainer_eval(fr_trainer *t, const int64_t *windows, double *loss);
/* The model's output `name` (NULL: the logits output, or the first output) of the last
 * fr_trainer_eval; NULL when there is none. Valid until the next eval or fr_trainer_free. */
const fr_tensor *fr_trainer_eval_output(fr_trainer *t, const char *name);

/* ---- what was built ---- */
int64_t fr_trainer_steps_done(const fr_trainer *t);   /* steps taken or skipped so far */
int64_t fr_trainer_skipped_total(const fr_trainer *t); /* of the steps read back */
int64_t fr_trainer_vocab(const fr_trainer *t);        /* logits' last dim; 0 when unknown */
int64_t fr_trainer_batch(const fr_trainer *t);
int64_t fr_trainer_seq_len(const fr_trainer *t);
int fr_trainer_grad_accum(const fr_trainer *t);
const char *fr_trainer_tokens_input(const fr_trainer *t);
/* Trained parameters in ORIGINAL names (fused ones listed by their members). */
int fr_trainer_param_count(const fr_trainer *t);
const char *fr_trainer_param_name(const fr_trainer *t, int i);
int64_t fr_trainer_param_numel(const fr_trainer *t, int i);
/* Parameter `name` (original name) as FP32 values in its original layout, copied into dst
 * (fr_trainer_param_numel elements). FR_ERR_INVALID_ARG when it is not trained here. */
FR_NODISCARD fr_status fr_trainer_get_param(fr_trainer *t, const char *name, float *dst);
/* Overwrite trained parameter `name` (original name and layout, fr_trainer_param_numel
 * elements) from src; its optimizer state stays. */
FR_NODISCARD fr_status fr_trainer_set_param(fr_trainer *t, const char *name, const float *src);
/* The compile report (bf16/fp8), NULL for fp32. */
const fr_fp8_report *fr_trainer_fp8_report(const fr_trainer *t);

/* ---- FP8 statistics (what `fp8run train --log-fp8 N` logs) ---- */
/* One FP8 operand (x, w or dy) of an fp8 Linear as of the last step. Numbers not available
 * are NaN, with has_amax / has_scale 0 and `note` saying why (never invented). */
typedef struct fr_fp8_stat {
    const char *layer;      /* the Linear's name (report layers[].name) */
    const char *operand;    /* "x", "w" or "dy" */
    const char *recipe;     /* "delayed", "current" or "block" */
    const char *format;     /* "e4m3" or "e5m2" */
    int64_t step;           /* the step these numbers are from; -1 before the first */
    int has_amax;
    double amax;            /* max |value| of the operand over the step's micro-batches */
    int has_scale;          /* one per-tensor scale exists (delayed, current) */
    double scale;           /* the scale the step quantized with (current: the one of the
                               micro-batch with the largest amax) */
    double next_scale;      /* delayed: the scale the next step uses (after this step's update) */
    double history_max;     /* delayed: the amax the next recompute uses (max over the history,
                               or the most recent one) */
    int64_t updates;        /* delayed: amaxes recorded so far */
    double fp8_max;         /* the format's largest finite value */
    double range_use;       /* amax * scale / fp8_max: above 1, the largest values were clipped */
    int saturated;          /* range_use > 1 */
    const char *note;       /* why something is missing; "" otherwise */
} fr_fp8_stat;
/* Fill up to `max` records (out may be NULL) and return how many there are: three per fp8
 * Linear (x, w, dy), in report order. 0 for fp32/bf16 and evaluation-only trainers. Strings
 * stay valid until fr_trainer_free. */
int fr_trainer_fp8_stats(const fr_trainer *t, fr_fp8_stat *out, int max);

/* ---- compiled graphs (runtime/io/fbs.h) ---- */
/* fr_trainer_new also accepts a compiled graph file (.fbs) as imported by fr_onnx_load_file:
 * it is not compiled again; its report, scaling state and original model (for export and
 * checkpoints under the original names) come from the file. Its batch x seq must equal
 * opt->batch x opt->seq_len (a clear error says to recompile otherwise); opt->precision
 * "fp32" (the default) or the file's precision; the precision and recipe options are the
 * file's (opt->fp8 is ignored); --train/--freeze narrow the recorded parameters. */

/* Prepare `model` (an imported ONNX model) for opt->batch x opt->seq_len and compile it for
 * opt->precision ("bf16" or "fp8") exactly as fr_trainer_new does, and return the compiled
 * forward graph (the caller frees it and the report). */
FR_NODISCARD fr_status fr_train_compile_graph(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                 fr_fp8_report *report);
/* The same, and what each pass of the pipeline did (passes/pipeline.h; may be NULL). */
FR_NODISCARD fr_status fr_train_compile_graph_passes(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                        fr_fp8_report *report, fr_pipeline_report *passes);
/* The same, written as a compiled graph file (fr_fbs_save) at `path`. */
FR_NODISCARD fr_status fr_train_compile(const fr_graph *model, const fr_train_options *opt, const char *path);
/* The options as a JSON object (malloc'ed; caller frees). */
FR_NODISCARD fr_status fr_trainer_config_json(const fr_trainer *t, char **json);
/* The optimizer (read-only use: state inspection in tests). */
fr_optimizer *fr_trainer_optimizer(fr_trainer *t);
/* Per-op GPU times of the training graph when FP8RUN_PROFILE=1 was set at fr_trainer_new
 * (malloc'ed text), NULL otherwise. */
char *fr_trainer_profile(const fr_trainer *t);
/* Where the trainer runs: "CPU", or the GPU's name and compute capability. */
const char *fr_trainer_device(const fr_trainer *t);
/* Which kernels run the fused attention nodes (fp8run_session_attention), into buf. */
void fr_trainer_attention(const fr_trainer *t, char *buf, size_t n);
/* How the GEMMs run (fp8run_session_gemm), into buf. */
void fr_trainer_gemm(const fr_trainer *t, char *buf, size_t n);
/* Memory the trainer planned for its step (bytes): on a GPU the device memory it allocated
 * (executors, optimizer state, workspace), on the CPU the executor's pool plus parameters,
 * gradients and optimizer state. *device_used / *device_total (may be NULL) get the GPU's
 * memory in use and size from the driver, 0 on the CPU. */
size_t fr_trainer_memory(const fr_trainer *t, size_t *device_used, size_t *device_total);

/* ---- checkpoints (runtime/train/train_ckpt.c) ---- */
/* Write a checkpoint atomically. data_state (may be NULL) is stored as entry "data". */
FR_NODISCARD fr_status fr_trainer_save(fr_trainer *t, const char *path, const void *data_state, size_t data_len);
/* Restore everything from a checkpoint: every trained parameter (by original name; a missing
 * one or one of another shape is an error naming it), its optimizer state, the step counters,
 * the generator, the FP8 scaling state when both sides have it. A parameter the checkpoint
 * holds but this trainer does not train must equal the model's value (else the model was not
 * given the checkpoint's weights first: fr_train_apply_weights). *data_state (malloc'ed, may be
 * NULL when absent) receives the loader state bytes; pass NULL to ignore them. An evaluation-only
 * trainer restores the weights (and counters) only. On error the trainer may be partly
 * restored: discard it. */
FR_NODISCARD fr_status fr_trainer_load(fr_trainer *t, const char *path, void **data_state, size_t *data_len);
/* The "format" entries of the checkpoints the trainer writes (NULL-terminated): every reader of
 * a checkpoint checks it (fr_ckpt_check_format). */
extern const char *const fr_trainer_ckpt_formats[];

/* Write the "param" tensors of a checkpoint into the float initializers of the same names of
 * `g` (an imported model, before fr_trainer_new or export). A tensor whose initializer is
 * missing or has another shape is an error naming it; *n_applied (may be NULL) counts them. */
FR_NODISCARD fr_status fr_train_apply_weights(fr_graph *g, const char *ckpt_path, int *n_applied);
/* A checkpoint's "config" entry (NUL-terminated copy, malloc'ed) or NULL when absent. */
FR_NODISCARD fr_status fr_train_ckpt_config(const char *ckpt_path, char **json);

/* ---- export (runtime/train/train_export.c) ---- */
/* The original model with the trained values in its initializers (original names and
 * layouts), saved with fr_onnx_save_file; weights go to external data "<file>.data" when they
 * add up to more than 1 GiB. */
FR_NODISCARD fr_status fr_trainer_export(fr_trainer *t, const char *path);
/* A LoRA run's adapters in PEFT's layout: dir/adapter_model.safetensors and
 * dir/adapter_config.json (runtime/train/train_lora.c). */
FR_NODISCARD fr_status fr_trainer_export_adapter(fr_trainer *t, const char *dir);
/* Parameters and the bytes they take where the run trains (device or host): trained ones with
 * their gradient and optimizer state; a LoRA run's frozen base weights. */
typedef struct fr_param_bytes {
    int64_t trained, trained_bytes;
    int64_t frozen, frozen_bytes;
} fr_param_bytes;
void fr_trainer_param_bytes(const fr_trainer *t, fr_param_bytes *b);

#endif
