/* The CUDA backend of the trainer (runtime/train/train_backend.h): the table over the device trainer
 * of cuda_train.h, whose steps are queued on a stream and retired from a pinned ring. */
#include "graph/env.h"
#include "ops/cuda/cuda_gemm.h"
#include "ops/cuda/cuda_kernel.h"
#include "runtime/cuda/cuda_train.h"
#include "runtime/train/train_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const fr_cuda_train *dev_of(const fr_trainer *t) { return (const fr_cuda_train *)t->be_state; }

/* A data-parallel rank trains on its local GPU; alone, on the current device. */
static fr_status cuda_init(fr_trainer *t, void **state)
{
    fr_cuda_train *d = NULL;
    *state = NULL;
    FR_TRY(fr_cuda_train_new(t, t->opt.world_size > 0 ? t->opt.local_rank : -1, &d));
    *state = d;
    return FR_OK;
}

static void cuda_free(void *state) { fr_cuda_train_free(state); }

static fr_status cuda_queue(fr_trainer *t, const int64_t *windows, int k, int slot, fr_train_stats *stats)
{
    return fr_cuda_train_queue(t, windows, k, stats->lr, slot);
}

static fr_status cuda_profile(const fr_trainer *t, char **text) { return fr_cuda_train_profile(dev_of(t), text); }

/* The driver's figures when it answers (0 otherwise); the bytes are the session's own. */
static size_t cuda_memory(const fr_trainer *t, size_t *device_used, size_t *device_total)
{
    *device_used = *device_total = 0;
    if (fr_cuda_train_mem_info(dev_of(t), device_used, device_total) != FR_OK) *device_used = *device_total = 0;
    return fr_cuda_train_device_bytes(dev_of(t));
}

static const char *cuda_device_name(const fr_trainer *t) { return fr_cuda_train_device_name(dev_of(t)); }

static void cuda_attention(const fr_trainer *t, char *buf, size_t n)
{
    fr_cuda_attention_report(fr_cuda_train_ctx(dev_of(t)), buf, n);
}

static void cuda_gemm(const fr_trainer *t, char *buf, size_t n)
{
    fr_cuda_gemm_report(fr_cuda_train_ctx(dev_of(t)), buf, n);
    const size_t used = strlen(buf); /* and what became of the CUDA graph (bench's gemm line) */
    if (used + 3 < n) {
        snprintf(buf + used, n - used, "; ");
        fr_cuda_train_graph(dev_of(t), buf + used + 2, n - used - 2, NULL, NULL);
    }
}

static const fr_train_backend_ops cuda_ops = {
    .name = "cuda",
    .queues = 1,
    .init = cuda_init,
    .free = cuda_free,
    .queue = cuda_queue,
    .done = fr_cuda_train_done,
    .retire = fr_cuda_train_retire,
    .eval = fr_cuda_train_eval,
    .eval_output = fr_cuda_train_eval_output,
    .pull = fr_cuda_train_pull,
    .push = fr_cuda_train_push,
    .profile = cuda_profile,
    .memory = cuda_memory,
    .device_name = cuda_device_name,
    .attention = cuda_attention,
    .gemm = cuda_gemm,
};

const fr_train_backend_ops *tr_backend_cuda(void) { return &cuda_ops; }
