/* The device trainer's data-parallel side (cuda_train.c calls these hooks when
 * fr_train_options.world_size > 0).
 *
 * Every step, after the micro-batches and before the device decides whether the step is usable:
 * gradients are averaged across ranks (grouped all-reduces, one per bucket of
 * fr_dist_plan_buckets, last parameters first), the loss sum averaged, the FP8 amaxes (delayed
 * scaling state and the watched current/block operands) and the "not finite" flags taken as the
 * max over ranks. So every rank sees the same gradients, norm, amaxes and error words: the same
 * skip decision, the same update and the same scales. The reductions follow the backward pass
 * on the stream (they are not overlapped with it).
 *
 * With shard_optimizer (ZeRO-1) each parameter's optimizer state lives on its owner only
 * (fr_dist_partition); after the update the owners broadcast the parameters. Gathering the
 * state for a checkpoint is a collective: every rank pulls (fr_trainer_save on every rank, rank
 * 0 writes). */
#ifndef FR_DIST_TRAIN_H
#define FR_DIST_TRAIN_H

#include <cuda_runtime.h>

#include "runtime/cuda/cuda_train_kernels.h"
#include "runtime/train_internal.h"

typedef struct fr_dist_train fr_dist_train;

/* On the trainer's CUDA device (current). */
FR_NODISCARD fr_status fr_dist_train_new(const fr_trainer *t, fr_dist_train **out);
void fr_dist_train_free(fr_dist_train *dt);
/* The rank owning parameter i's optimizer state: every rank (-1) unless sharded. */
int fr_dist_train_owner(const fr_dist_train *dt, int i);
/* 1 when the communicator was aborted: work queued on the stream may never finish, so the
 * device side must not be waited for (cudaFree waits) when freeing. */
int fr_dist_train_broken(const fr_dist_train *dt);

/* Device buffers to reduce after a step's micro-batches (see above): the gradients of the
 * parameter table (entries[i].acc when use_acc, else entries[i].g), the step's scalars;
 * error_words: the context's 4-int error word. */
typedef struct fr_dist_step_bufs {
    const fr_mt_entry *entries; /* host copy of the table */
    int n, use_acc;
    float *loss_sum;
    float *amax;
    int n_amax;
    int *amax_bad;
    int *error_words;
} fr_dist_step_bufs;
FR_NODISCARD fr_status fr_dist_train_reduce(fr_dist_train *dt, const fr_dist_step_bufs *b, cudaStream_t s);
/* Sharded: the owners' parameters (entries[i].p) to every rank after the update (no-op when
 * not sharded). */
FR_NODISCARD fr_status fr_dist_train_share_params(fr_dist_train *dt, const fr_mt_entry *entries, int n, cudaStream_t s);
/* Sharded: parameter i's optimizer slot from its owner into host (numel floats); src is the
 * owner's device copy (ignored elsewhere). Collective: every rank calls it in the same order. */
FR_NODISCARD fr_status fr_dist_train_gather_slot(fr_dist_train *dt, int i, const float *src, int64_t numel, float *host,
                                    cudaStream_t s);
/* Wait for ev with the communicator watched (nccl_comm.h: errors and time-outs abort). */
FR_NODISCARD fr_status fr_dist_train_wait(fr_dist_train *dt, cudaEvent_t ev, const char *what);

#endif
