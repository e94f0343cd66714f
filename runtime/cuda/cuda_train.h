/* The trainer on a CUDA device (runtime/train/trainer.h with device "cuda"), the state of the trainer's
 * CUDA backend (runtime/train/train_backend.h; its table is in cuda_train_backend.c): every function
 * taking the trainer finds it in t->be_state.
 *
 * The training graph runs in a CUDA executor (cuda_exec.h); parameters, gradients, the
 * optimizer state and the delayed-scaling state live on the device. A step is queued without
 * a host synchronization until its end: micro-batches (each: inputs copied in, the graph run,
 * the loss and FP8 amaxes folded into device scalars, gradients accumulated), then the global
 * norm, a device-side decision whether the step is usable (finite loss, gradients and amaxes,
 * no kernel-reported error) with the clipping coefficient, the optimizer update of all
 * parameters in one launch, and the scaling update, both skipped on the device when the step
 * is not usable. The step's scalars (loss, norm, the decision, the optimizer step count, the
 * device error word) are copied into one slot of a pinned host ring with an event, and the
 * host does not wait: fr_cuda_train_retire reads a slot when its statistics are asked for
 * (in queue order), filling them exactly as the CPU trainer reports them. Nothing the host
 * computes for the next step depends on them: the optimizer step count (AdamW's bias
 * correction, SGD's first momentum) is counted on the device, the host passing the bias
 * corrections of every count the update may have (FR_OPT_WINDOW of them); a kernel-reported
 * data error is found when its step is retired, and the error word is cleared at the end of
 * every step so that one step's error never reaches the next.
 *
 * The host copies of parameters, optimizer state and scaling state (what checkpoints, export
 * and get_param read) are brought up to date by fr_cuda_train_pull, and the device ones from
 * the host by fr_cuda_train_push (after a checkpoint is loaded or a parameter set). */
#ifndef FR_CUDA_TRAIN_H
#define FR_CUDA_TRAIN_H

#include "runtime/train/train_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

struct fr_cuda_ctx;
typedef struct fr_cuda_train fr_cuda_train; /* the device trainer (cuda_train.c) */

/* Builds the device side for a built trainer (t->g, params, states, inputs) and uploads the
 * host's parameters and optimizer and scaling state; the caller makes it t->be_state. FP8
 * layers on a device below compute capability 8.9 are FR_ERR_UNSUPPORTED (no silent fallback). */
FR_NODISCARD fr_status fr_cuda_train_new(fr_trainer *t, int device, fr_cuda_train **out);
void fr_cuda_train_free(fr_cuda_train *d);
/* Queue one step (k micro-batches, learning rate lr) on the stream; its scalars go to ring slot
 * `slot` (0 <= slot < FR_TRAIN_MAX_QUEUED; at most that many steps are queued and not retired).
 * The windows are copied before it returns. */
FR_NODISCARD fr_status fr_cuda_train_queue(fr_trainer *t, const int64_t *windows, int k, double lr, int slot);
/* Wait for the step queued in `slot` and fill stats->loss, grad_norm, skipped and reason; the
 * host's optimizer step count follows an update. A data error a kernel reported during the
 * step is returned naming the node. Steps are retired in the order they were queued. */
FR_NODISCARD fr_status fr_cuda_train_retire(fr_trainer *t, int slot, int k, fr_train_stats *stats);
/* 1 when the step queued in `slot` has finished on the device (or its wait would fail: the
 * retire then reports why), 0 while it runs. */
int fr_cuda_train_done(fr_trainer *t, int slot);
FR_NODISCARD fr_status fr_cuda_train_eval(fr_trainer *t, const int64_t *windows, double *loss);
/* The host copy of the eval graph's output `name` after fr_cuda_train_eval, or NULL. */
const fr_tensor *fr_cuda_train_eval_output(fr_trainer *t, const char *name);
FR_NODISCARD fr_status fr_cuda_train_pull(fr_trainer *t);
FR_NODISCARD fr_status fr_cuda_train_push(fr_trainer *t);
/* The training executor's per-op GPU times (FP8RUN_PROFILE=1), malloc'ed, or NULL. */
FR_NODISCARD fr_status fr_cuda_train_profile(const fr_cuda_train *d, char **text);
/* Weight conversions (fp8 casts, bf16 copies of W) the Linear kernels queued so far on this
 * trainer's context (cuda_kernel.h: weight_casts): a counter for tests. */
long long fr_cuda_train_weight_casts(const fr_cuda_train *d);
/* Gradient accumulation in place (FP8RUN_GRAD_ACCUM_INPLACE, default on): with grad_accum > 1,
 * the parameters whose gradient is output 0 of a LinearGradWeight node that can add into it
 * (fr_cuda_wgrad_accumulable: fp32, bf16, per-tensor fp8 with unpadded dW), read by no node and
 * of no other parameter keep it in the executor across micro-batches, and their GEMMs add into
 * it (beta = 1) after the first micro-batch: no separate accumulation pass and no second
 * buffer for them. Off for data parallel training, CUDA graph replay and LoRA. Returns how many
 * parameters; param_on[i] (n_params entries, may be NULL) says which and vids (may be NULL,
 * n_params entries) receives their gradients' value ids in t->g. From the graph and options
 * alone: the memory plan (runtime/train/train_memory.c) asks it too. */
int fr_cuda_train_inplace_plan(const fr_trainer *t, unsigned char *param_on, int *vids);
/* Whether the training step replays a CUDA graph (cuda_graph.h): FP8RUN_CUDA_GRAPH 1, 0, or
 * auto (unset): on for one micro-batch a step on one GPU, not while FP8RUN_PROFILE times the
 * nodes. An unknown value is an error naming it. */
FR_NODISCARD fr_status fr_cuda_train_graph_wanted(const fr_train_options *o, int *on);
/* What the trainer allocated for gradient accumulation, for tests. */
typedef struct fr_cuda_grad_inplace_info {
    int params;         /* parameters accumulated in place */
    long long gemms;    /* weight-gradient GEMMs that added into their output so far */
    size_t acc_bytes;   /* the separate accumulation buffer (0 until a step of k > 1) */
    size_t held_bytes;  /* the executor's held gradients (inside arena_bytes) */
    size_t arena_bytes; /* the training executor's arena */
} fr_cuda_grad_inplace_info;
void fr_cuda_train_grad_inplace(const fr_cuda_train *d, fr_cuda_grad_inplace_info *out);
/* The training executor's CUDA graph (fr_cuda_train_graph_wanted, cuda_graph.h): its note into note
 * (n bytes; may be NULL) and its runs captured and replayed so far (0 when off). */
void fr_cuda_train_graph(const fr_cuda_train *d, char *note, size_t n, long long *captures, long long *replays);
/* "NVIDIA H100 80GB HBM3 (compute capability 9.0)" */
const char *fr_cuda_train_device_name(const fr_cuda_train *d);
/* The device context (what ran on it: fr_cuda_attention_report). */
const struct fr_cuda_ctx *fr_cuda_train_ctx(const fr_cuda_train *d);
/* Device memory the session holds: executors (arena, constants, inputs) and optimizer state. */
size_t fr_cuda_train_device_bytes(const fr_cuda_train *d);
/* The device's memory in use (by every process) and its size, from the driver. */
FR_NODISCARD fr_status fr_cuda_train_mem_info(const fr_cuda_train *d, size_t *used, size_t *total);

#ifdef __cplusplus
}
#endif

#endif
