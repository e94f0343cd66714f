/* Memory a training configuration will take, predicted before anything is allocated: the
 * trainer's graphs are built (fr_train_options.plan_only) and the executors' own planners run
 * in plan-only mode (runtime/exec/executor.c's block pool on the CPU, runtime/cuda/cuda_exec.c's
 * liveness arena on the GPU), so the activation figure is the plan the run will use. */
#ifndef FR_TRAIN_MEMORY_H
#define FR_TRAIN_MEMORY_H

#include <stddef.h>

#include "runtime/dist/shard_plan.h"
#include "runtime/train/trainer.h"

typedef struct fr_train_memory {
    int gpu;                 /* 1: the CUDA backend's plan; 0: the CPU executor's */
    size_t params;           /* FP32 master weights (GPU: every constant of the training graph) */
    size_t grads;            /* gradient accumulation buffers (CPU always; GPU when grad_accum > 1);
                                the gradients a step produces are graph outputs, in activations,
                                except on the GPU those accumulated in place (their GEMMs add
                                into them: cuda_train.h), which are counted here instead */
    size_t optimizer_state;  /* AdamW / SGD slots in their dtype (fp8: codes plus block scales) */
    size_t fp8_weights;      /* GPU: the kernels' persistent FP8 codes of the weights */
    size_t activations;      /* the executor's planned pool / arena: every computed value, kernel
                                scratch, gradients (training graph) */
    size_t eval_activations; /* GPU: the evaluation graph's arena (built at the first validation) */
    size_t inputs;           /* token and label buffers */
    size_t workspace;        /* GPU: cuBLASLt workspace */
    size_t gathered;         /* --shard-parameters: the layers' gathered weights held at once (the
                                unit computing and the one prefetched; shard_plan.h) */
    size_t total;            /* the sum: the peak the run holds */
    size_t lm_head_saved;    /* --chunked-lm-head on: logits and dlogits not held whole (not in
                                total: the plan has left them out already) */
    int lm_heads_fused;      /* the LinearCrossEntropy nodes of the training graph */
    char peak[512];          /* GPU: where the training arena peaks and what is live there, by
                                producing op ("" when not planned) */
    char backward_passes[1024]; /* what the passes on the differentiated graph did (the memory's
                                   wgrad operands, recomputation, fp8 producers, chunked head):
                                   "name: detail" a line, in the order they ran */
} fr_train_memory;

/* Predict for `model` under `opt` on the GPU (gpu = 1; needs the CUDA backend built, not a
 * device) or the CPU. Builds the graphs on the host (the model's weights are copied once). */
FR_NODISCARD fr_status fr_train_predict_memory(const fr_graph *model, const fr_train_options *opt, int gpu, fr_train_memory *out);

/* On the CPU, before the trainer's executor and optimizer allocate: the prediction (less the
 * weights, which are loaded) against the host memory this process may still take
 * (runtime/exec/host_memory.h). Too much is FR_ERR_OOM with the sizes and what would fit (fp8
 * optimizer state, a smaller --batch or --seq, --recompute), before anything is allocated.
 * FR_OK on the GPU (runtime/cuda/cuda_train.c checks the device), in plan-only builds and with
 * FP8RUN_MEMORY_CHECK=0. */
FR_NODISCARD fr_status fr_train_host_memory_check(fr_trainer *t);

/* The sharding plan of t's parameters over world ranks (runtime/train/train_shard.c), in the
 * order the step first reads them (not t->params' order: find them by name). */
FR_NODISCARD fr_status tr_shard_plan(const fr_trainer *t, int world, fr_shard_plan **out);

/* The text "params 1.2 GiB, ..." of m (for errors and `fp8run info --memory`). */
void fr_train_memory_text(const fr_train_memory *m, char *buf, size_t n);

#endif
