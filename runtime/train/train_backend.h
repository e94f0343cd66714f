/* The trainer's backend: a table of functions (in the style of ggml's backend interface) that
 * runs the training and evaluation graphs of a built trainer. The trainer (trainer.c,
 * train_step.c) owns what every backend shares: options, graphs, parameters, the optimizer,
 * scaling state, the queue of steps and its counters. A backend owns where and how the graphs
 * run: executors, device buffers, the device copies of parameters and optimizer state.
 *
 * Backends: the CPU one (runtime/train/train_backend_cpu.c, always built) and the CUDA one
 * (runtime/cuda/cuda_train_backend.c, over runtime/cuda/cuda_train.h). A trainer holds
 * `be` (the table) and `be_state` (what be->init made); it never asks which backend it is on.
 *
 * A step goes: queue (slot s of the trainer's ring) -> done (polled, optional wait) -> retire
 * (its statistics) -> the trainer counts it (skipped steps in a row). A backend whose `queues`
 * is 0 finishes a step inside queue (the CPU): the trainer retires and counts it at once. One
 * with `queues` 1 (the GPU) returns before the step runs; its steps are retired in queue order,
 * at most FR_TRAIN_MAX_QUEUED of them in flight. Every function below is set (no NULLs). */
#ifndef FR_TRAIN_BACKEND_H
#define FR_TRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "graph/tensor.h"
#include "runtime/exec/executor.h"

/* Only pointers to the trainer and its step statistics cross the table, so the interface stays
 * below the trainer that calls it (runtime/train/trainer.h, train_internal.h define them). */
typedef struct fr_trainer fr_trainer;
typedef struct fr_train_stats fr_train_stats;

typedef struct fr_train_backend_ops {
    const char *name; /* "cpu", "cuda" */
    int queues;       /* 1: queue returns before the step has run (see above) */

    /* Build the backend's state for the built trainer t (graphs, parameters, states, inputs),
     * the host's parameter and optimizer values as its starting point. *state is what every
     * call below finds in t->be_state; free(NULL) does nothing. */
    fr_status (*init)(fr_trainer *t, void **state);
    void (*free)(void *state);

    /* Queue one step of k micro-batches (windows: k x B x (T+1), copied before it returns) at
     * ring slot `slot`. stats->step and lr are set; a backend that does not queue fills the
     * rest (loss, grad_norm, skipped, reason), one that queues leaves it to retire. An error
     * leaves the trainer unusable (nothing about the step is counted). */
    fr_status (*queue)(fr_trainer *t, const int64_t *windows, int k, int slot, fr_train_stats *stats);
    /* 1 when the step queued at `slot` has finished (or waiting for it would fail: retire says
     * why), 0 while it runs. */
    int (*done)(fr_trainer *t, int slot);
    /* Wait for the step at `slot` (the oldest not retired) and complete *stats as queue's
     * comment says: FR_OK for a skipped step too (skipped = 1, reason); an error (a data error a
     * kernel reported, naming the node; a device failure) leaves the trainer unusable. */
    fr_status (*retire)(fr_trainer *t, int slot, int k, fr_train_stats *stats);

    /* Loss of one micro-batch on the eval graph (loss may be NULL), after which eval_output
     * hands out the eval graph's output `name` (host memory, valid until the next eval), or
     * NULL when there is none. */
    fr_status (*eval)(fr_trainer *t, const int64_t *windows, double *loss);
    const fr_tensor *(*eval_output)(fr_trainer *t, const char *name);

    /* The host copies (parameters, optimizer and scaling state, the last step's amaxes) brought
     * up to date from the backend, and the backend's from the host's. Queued steps are retired
     * first by the caller. No-ops where the host copies are the backend's own. */
    fr_status (*pull)(fr_trainer *t);
    fr_status (*push)(fr_trainer *t);

    /* Per-op times of the training graph (malloc'ed text) or *text NULL. */
    fr_status (*profile)(const fr_trainer *t, char **text);
    /* The bytes the backend holds for the trainer (fr_trainer_memory), and the device's memory
     * in use and size (both 0 without a device). */
    size_t (*memory)(const fr_trainer *t, size_t *device_used, size_t *device_total);
    /* "CPU", or the GPU's name and compute capability. */
    const char *(*device_name)(const fr_trainer *t);
    /* Which kernels run the fused attention nodes, and why (e.g. cuDNN or fp8run's own), into
     * buf (n bytes). */
    void (*attention)(const fr_trainer *t, char *buf, size_t n);
    /* How the GEMMs run: algorithms chosen, fast accumulation (ops/cuda/cuda_gemm.h), into buf. */
    void (*gemm)(const fr_trainer *t, char *buf, size_t n);
} fr_train_backend_ops;

/* The CPU backend. */
extern const fr_train_backend_ops tr_backend_cpu;
/* The CUDA backend; NULL in a build without it (runtime/cuda/cuda_absent.c). */
const fr_train_backend_ops *tr_backend_cuda(void);

/* Put a trainer on backend `be`: the host copies brought up to date from the current backend
 * (if any), its state freed, be's built (t->be, t->be_state). fr_trainer_new calls it; tests
 * put a trainer on a backend of their own with it. No queued step may be waiting for its poll.
 * On failure the trainer has no backend state and may only be freed. */
FR_NODISCARD fr_status tr_backend_use(fr_trainer *t, const fr_train_backend_ops *be);

/* The CPU backend's training executor of t (tests read its memory plan); NULL on another
 * backend or when there is none (evaluation-only or plan-only trainers). */
fr_exec *tr_cpu_exec(const fr_trainer *t);

#endif
