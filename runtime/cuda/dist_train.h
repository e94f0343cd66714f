/* The device trainer's data-parallel side (cuda_train.c calls these hooks when
 * fr_train_options.world_size > 0).
 *
 * Gradients are averaged across ranks in buckets (fr_dist_plan_buckets, last parameters first),
 * one grouped collective per bucket. With overlap (the default; FP8RUN_DIST_OVERLAP=0 turns it
 * off) the executor's node hook starts a bucket on a communication stream as soon as the
 * backward pass has queued the last node touching its gradients (an event: the host never
 * waits), so the all-reduces run under the rest of the backward; after the run the compute
 * stream waits for the communication stream, and the optimizer runs after that. Without
 * overlap the same collectives, the same buckets in the same order, run on the compute stream
 * after the backward: the results are the same bits. With micro-batches (grad_accum > 1) only
 * the last one's buckets go out: each bucket first adds that micro-batch into the accumulated
 * gradients and divides by k (the elementwise arithmetic of the single-GPU path), then reduces.
 *
 * Then the loss sum is averaged, the FP8 amaxes (delayed scaling state and the watched
 * current/block operands) and the "not finite" flags maxed over ranks. So every rank sees the
 * same gradients, norm, amaxes and error words: the same skip decision, update and scales.
 *
 * With shard_optimizer (ZeRO-1) each parameter's optimizer state lives on its owner only
 * (fr_dist_partition); after the update the owners broadcast the parameters. With
 * shard_gradients (ZeRO-2) a bucket is reduced (grouped ncclReduce, in place) to each of its
 * parameters' owners instead of all-reduced, every micro-batch: an owner alone holds the
 * reduced gradient, accumulates it (accumulation buffers for its parameters only) and updates;
 * the gradient norm is the sum of the ranks' per-chunk sums of squares (each chunk summed on
 * its owner, zero elsewhere: the sum is exact). Gathering the state for a checkpoint is a
 * collective: every rank pulls (fr_trainer_save on every rank, rank 0 writes). */
#ifndef FR_DIST_TRAIN_H
#define FR_DIST_TRAIN_H

#include <cuda_runtime.h>

#include "runtime/cuda/cuda_train_kernels.h"
#include "runtime/train/train_internal.h"

typedef struct fr_dist_train fr_dist_train;

/* On the trainer's CUDA device (current). */
FR_NODISCARD fr_status fr_dist_train_new(const fr_trainer *t, fr_dist_train **out);
void fr_dist_train_free(fr_dist_train *dt);
/* The rank owning parameter i's optimizer state: every rank (-1) unless sharded. */
int fr_dist_train_owner(const fr_dist_train *dt, int i);
/* 1 when the communicator was aborted: work queued on the stream may never finish, so the
 * device side must not be waited for (cudaFree waits) when freeing. */
int fr_dist_train_broken(const fr_dist_train *dt);

/* The trainer's device tables the buckets work on, and its executor (for the node hook). */
typedef struct fr_dist_tables {
    struct fr_cuda_exec *ex;
    const fr_mt_entry *entries;    /* host copy of the table (its acc pointers set later) */
    const fr_mt_entry *d_entries;
    const fr_mt_chunk *chunks;     /* every parameter's chunks, in parameter order */
    const fr_mt_chunk *own_chunks; /* sharded gradients: this rank's parameters' chunks */
    cudaStream_t compute;
} fr_dist_tables;
FR_NODISCARD fr_status fr_dist_train_attach(fr_dist_train *dt, const fr_trainer *t, const fr_dist_tables *tb);
/* 1: gradients sharded (ZeRO-2). */
int fr_dist_train_zero2(const fr_dist_train *dt);
/* Before micro-batch m of k is queued: whether its gradients go out (DDP: the last one; ZeRO-2:
 * every one); use_acc: the step accumulates (k > 1). Arms the node hook when overlapping. */
int fr_dist_train_arm(fr_dist_train *dt, int m, int k);
/* After an armed micro-batch's run is queued: the buckets not started yet (all without
 * overlap), then the compute stream waits for them. */
FR_NODISCARD fr_status fr_dist_train_flush(fr_dist_train *dt);
/* ZeRO-2: sum the per-chunk sums of squares over ranks (n doubles, on the compute stream). */
FR_NODISCARD fr_status fr_dist_train_sum_partials(fr_dist_train *dt, double *partial, int n);

/* Device buffers to reduce after a step's micro-batches (see above): the gradients of the
 * parameter table (entries[i].acc when use_acc, else entries[i].g), the step's scalars;
 * error_words: the context's 4-int error word. */
typedef struct fr_dist_step_bufs {
    const fr_mt_entry *entries; /* host copy of the table (unused: the buckets went out already) */
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
