/* The trainer's private state, shared by runtime/train/trainer.c (life cycle), train_step.c (steps),
 * train_build.c (graphs), train_ckpt.c (checkpoints), train_export.c and the backends
 * (runtime/train/train_backend.h). Not part of the public API. */
#ifndef FR_TRAIN_INTERNAL_H
#define FR_TRAIN_INTERNAL_H

#include "passes/pipeline.h"
#include "passes/retie.h"
#include "runtime/exec/executor.h"
#include "graph/fp8_scaling.h"
#include "graph/rng.h"
#include "runtime/train/trainer.h"

struct fr_train_backend_ops; /* runtime/train/train_backend.h */

/* One optimizer parameter: a trained value of the training graph (possibly a fused one). */
typedef struct tr_param {
    int value;          /* value id in the training graph */
    int grad_value;     /* its gradient's value id */
    int grad_out;       /* index of the gradient among the executor's outputs */
    float *acc;         /* gradient summed over the micro-batches of a step (trainer-owned) */
    int64_t numel;
    int fused;          /* index into the fp8 report's fused table, -1 when not fused */
} tr_param;

/* A trained parameter under its original name and layout (what checkpoints and export see). */
typedef struct tr_orig {
    const char *name;   /* the original value's name (owned by the training graph) */
    int value;          /* the original value id in the training graph */
    int param;          /* index into params (and the optimizer) */
    const fr_fp8_fused *fused; /* non-NULL: lives in a slice of a fused parameter */
    const fr_fp8_slice *slice;
    int rank;
    int64_t dims[FR_MAX_RANK];
    int64_t numel;
} tr_orig;

/* Delayed-scaling state of one FP8 operand. */
typedef struct tr_state {
    const fr_fp8_state *st;
    fr_fp8_scaling sc;
    int amax_out;       /* executor output index of its amax, -1 when the graph has none */
    float step_amax;    /* max over the micro-batches of the running step */
    float step_scale;   /* the scale the last step quantized with (for fr_trainer_fp8_stats) */
} tr_state;

/* The amax of an FP8 operand of the current / block recipes (no scaling state): the trainer
 * adds the Linear's amax_x / amax_w outputs so --log-fp8 can show them. */
typedef struct tr_watch {
    int layer;          /* index into report.layers */
    fr_fp8_operand operand;
    int value;          /* the amax value in the training graph */
    int amax_out;       /* its executor output index */
    float step_amax;    /* max over the micro-batches of the last step */
} tr_watch;

/* A step queued by fr_trainer_step_async, until fr_trainer_poll hands its statistics out. */
typedef struct tr_queued {
    fr_train_stats stats;      /* step and lr when queued; the rest once retired */
    int k;                     /* micro-batches */
    int retired;               /* the statistics are read back (always on the CPU) */
    fr_status st;              /* FR_OK or FR_ERR_NUMERIC (too many skipped in a row) */
    char err[512];             /* the message of st */
} tr_queued;

/* A graph input the trainer feeds itself. */
typedef enum tr_feed {
    TR_FEED_TOKENS, TR_FEED_LABELS, TR_FEED_ONES, TR_FEED_ARANGE, TR_FEED_ZEROS,
    TR_FEED_DROPOUT_KEY, /* {seed, step, micro-batch} (passes/dropout.h) */
    TR_FEED_SEGMENTS, TR_FEED_LOSS_WEIGHT /* SFT batches (runtime/train/train_sft.c) */
} tr_feed;
typedef struct tr_input {
    char *name;
    tr_feed feed;
    fr_tensor *t;       /* the buffer fed to the executor (shape and dtype of the input) */
} tr_input;

struct fr_trainer {
    fr_train_options opt;      /* strings below are the trainer's copies */
    char *s_tokens, *s_logits, *s_loss, *s_train, *s_freeze, *s_precision, *s_recipe,
        *s_format, *s_exclude, *s_lora, *s_lora_exclude;
    fr_dim_binding *dims;
    char *model_path;          /* the model's source path for the config, or NULL */

    fr_graph *pristine;        /* the model as imported, for export */
    fr_graph *g;               /* training graph */
    fr_graph *eval_g;          /* forward + loss, constants borrowed from g */
    fr_fp8_report report;
    int has_report;

    fr_optimizer *optim;
    tr_param *params;
    int n_params;
    tr_orig *orig;
    int n_orig;
    tr_state *states;
    int n_states;
    tr_watch *watch;
    int n_watch;
    int64_t stats_step;        /* step the FP8 amaxes above describe; -1 before the first */
    int stats_skipped;         /* that step was skipped (its amaxes may be partial) */
    fr_fp8_scaling *init_states; /* scaling state read from a compiled graph file, consumed by
                                    the build (report.states order); NULL otherwise */
    int n_init_states;

    tr_input *inputs;          /* every training-graph input */
    int n_inputs;
    tr_input *eval_inputs;     /* the same for the eval graph (no labels when a loss head) */
    int n_eval_inputs;
    int loss_out;              /* executor output index of the loss */
    char *loss_name;
    int eval_loss_out;
    char *logits_name;         /* NULL with a loss output */
    char **model_outputs;      /* the model's outputs, as the eval graph outputs them */
    int n_model_outputs;
    int eval_ran;
    fr_dtype tokens_dtype;
    int64_t vocab;

    int64_t step;              /* steps taken or skipped (queued ones included) */
    tr_queued *queue;          /* FR_TRAIN_MAX_QUEUED entries, a ring from q_head */
    int q_head, q_len;
    int64_t skipped_total;
    int bad_in_row;
    fr_prng rng;
    fr_tie *ties;              /* tied copies re-tied in g (their values follow the source) */
    int n_ties;
    int n_unshared;            /* parameters made separate again (passes/unshare.h) */
    fr_pipeline_report passes; /* what each pass of the pipeline did (passes/pipeline.h);
                                  empty for a compiled graph file */
    fr_lora_result lora;       /* the adapters the lora pass added (passes/lora.h); n 0 without */
    int use_cuda;              /* the device resolved from opt.device (the backend fr_trainer_new
                                  picks; a plan_only trainer plans for it on the CPU one) */
    /* SFT batches (runtime/train/train_sft.c): the batch of the step or eval being fed (its k
       micro-batches' windows, segment ids and target flags; NULL outside those calls), the
       labels that count in it, and the scratch rows of one micro-batch */
    const int64_t *sft_windows;
    const int32_t *sft_seg;
    const uint8_t *sft_tgt;
    int sft_k;
    int64_t sft_total;         /* the labels the weights divide by (all ranks' when given) */
    int sft_ranks;             /* ranks that average the weighted losses: 1, or the world size */
    int64_t *sft_labels, *sft_pos; /* B x T */
    int sft_attention;         /* fused attention nodes given the segment ids */
    const struct fr_train_backend_ops *be; /* where the graphs run (runtime/train/train_backend.h) */
    void *be_state;            /* be's own state (be->init), NULL before it */
};

/* train_build.c: everything fr_trainer_new builds after copying the options. A compiled graph
 * file (runtime/io/fbs.h) is recognized by its metadata and not compiled again. */
FR_NODISCARD fr_status tr_build(fr_trainer *t, const fr_graph *model);
/* The first half of tr_build for an ONNX model: t->pristine, t->g prepared and compiled
 * (t->report), *tok the tokens input, *loss the model's loss output or -1, *logits the logits
 * or -1. fr_train_compile stops here. */
FR_NODISCARD fr_status tr_build_forward(fr_trainer *t, const fr_graph *model, int *tok, int *loss, int *logits);
/* The trainer's options by name for the pipeline's entries (fr_pass_option_fn; opts is an
 * fr_train_options). */
FR_NODISCARD fr_status tr_pass_option(const void *opts, const char *name, int *on);
/* train_build_fbs.c: a compiled graph's recorded options adopted (conflicts named), and
 * --train/--freeze applied to its recorded parameters. */
struct fr_fbs_spec;
FR_NODISCARD fr_status tr_adopt_spec(fr_trainer *t, const struct fr_fbs_spec *s, const char *path);
FR_NODISCARD fr_status tr_narrow_params(fr_trainer *t, fr_graph *g);
/* Bring the host copies of parameters, optimizer and scaling state up to date from the device
 * (before save, export, get_param), and the device from the host (after load, set_param).
 * No-ops on the CPU. In train_step.c, after the queued steps. */
FR_NODISCARD fr_status tr_sync_host(fr_trainer *t);
FR_NODISCARD fr_status tr_sync_device(fr_trainer *t);
/* train_sft.c: the segment ids wired into every fused attention node (sets t->sft_attention),
 * the loss multiplied by the feed's weight (*loss becomes the product), the names of the two
 * inputs (1 and *feed set when `name` is one), the scratch rows, and micro-batch `windows`'s
 * labels and positions into them with its loss weight. */
FR_NODISCARD fr_status tr_sft_wire(fr_trainer *t, fr_graph *g);
FR_NODISCARD fr_status tr_sft_weight(fr_trainer *t, fr_graph *g, int *loss);
int tr_sft_feed(const char *name, tr_feed *feed);
FR_NODISCARD fr_status tr_sft_alloc(fr_trainer *t);
FR_NODISCARD fr_status tr_sft_micro(fr_trainer *t, const int64_t *windows, float *weight);
/* Fill the inputs of one micro-batch (windows: B x (T+1)) into `ins`. */
FR_NODISCARD fr_status tr_fill_inputs(fr_trainer *t, tr_input *ins, int n, const int64_t *windows);
/* Copy between a fused parameter-shaped buffer and one slice in its original layout. */
void tr_slice_copy(const fr_fp8_fused *f, const fr_fp8_slice *s, float *fused_buf, float *orig_buf,
                   int to_original);
/* train_lora.c: 1 when `name` is a LoRA adapter (not in the pristine model). tr_lora_merge puts
 * merged copies W + s B A in place of pg's base weights, *base keeping the bases (also on
 * failure); tr_lora_unmerge puts them back and frees *base. */
int tr_lora_is_adapter(const fr_trainer *t, const char *name);
/* 1 when the GPU holds this LoRA run's frozen base only as its Linears' converted copies (the
 * float32 values stay on the host): LoRA, and not FP8RUN_LORA_KEEP_BASE=1 (which keeps the
 * float32 base on the device too, for comparison). In train_memory.c. */
int tr_lora_codes_only(const fr_trainer *t);
/* 1 when the GPU keeps the weights' converted copies (fp8 codes, bf16 copies) between runs
 * (ops/cuda/cuda_kernel.h, "Persistent memory"): where later runs read them again, i.e. with
 * several micro-batches a step (grad_accum), a LoRA base held as its codes, or evaluation alone.
 * Otherwise every training run follows a weight change, so they are made in scratch instead
 * and hold no memory for the whole run. Recomputation alone does not turn it on: a recomputed
 * Linear then converts W again (a pass over W), which costs less than the whole model's codes
 * held for the step in a run that chose recomputation to save memory. FP8RUN_WEIGHT_CACHE=1 / 0
 * decides instead. In train_memory.c. */
int tr_weight_cache(const fr_trainer *t);
FR_NODISCARD fr_status tr_lora_merge(fr_trainer *t, fr_graph *pg, fr_tensor ***base);
/* A checkpoint's adapters (by their PEFT names) merged into the model g's weights, with the
 * rank and alpha its options record; *n_merged counts the adapter tensors used. */
struct fr_ckpt;
int tr_lora_is_adapter_name(const char *name);
FR_NODISCARD fr_status tr_lora_merge_ckpt(fr_graph *g, const struct fr_ckpt *c, int *n_merged);
void tr_lora_unmerge(fr_trainer *t, fr_graph *pg, fr_tensor **base);
/* Gather an original parameter's values (original layout) into dst. */
FR_NODISCARD fr_status tr_orig_values(fr_trainer *t, const tr_orig *o, float *dst);

/* Low-precision optimizer state in checkpoints (runtime/train/train_ckpt_lowp.c): whether this run
 * uses it (then the file's format is "fp8run-trainer-2"), write it, check that a file's state
 * and master dtypes match the run's, and load it. */
struct fr_ckpt_writer;
struct fr_ckpt;
int tr_ckpt_lowp_used(const fr_trainer *t);
/* Memory of a built trainer (runtime/train/train_memory.c; t may be a plan_only one), and the check a
 * GPU session makes before allocating: FR_ERR_DEVICE naming the sizes and the options that would
 * fit when the prediction exceeds free_bytes. */
struct fr_train_memory;
FR_NODISCARD fr_status tr_memory_of(fr_trainer *t, int gpu, struct fr_train_memory *out);
FR_NODISCARD fr_status tr_memory_check(fr_trainer *t, size_t free_bytes);
FR_NODISCARD fr_status tr_ckpt_write_lowp(fr_trainer *t, struct fr_ckpt_writer *w);
FR_NODISCARD fr_status tr_ckpt_check_lowp(fr_trainer *t, const struct fr_ckpt *c);
FR_NODISCARD fr_status tr_ckpt_load_lowp(fr_trainer *t, const struct fr_ckpt *c);

#endif
