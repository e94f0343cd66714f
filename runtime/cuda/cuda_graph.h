/* A CUDA graph of an executor's run (FP8RUN_CUDA_GRAPH; the trainer's default turns it on for one
 * micro-batch a step on one GPU: runtime/cuda/cuda_train.h): the nodes' kernels of one
 * run captured once from the stream and replayed with one cudaGraphLaunch, so the step's
 * thousands of short kernels go without the host's launch gaps.
 *
 * Why a frozen run is the same run: the executor's memory is planned once (every pointer a
 * kernel gets is fixed), inputs are staged into their buffers before the run, the kernels
 * neither synchronize nor allocate (ops/cuda/cuda_kernel.h), and per-run values (dropout keys,
 * FP8 scales, the optimizer step) are device tensors, not launch arguments. What the host still
 * decides per run is handled here:
 *  - the first run is never captured: it times cuBLASLt's candidates (gemm_tune.c), builds
 *    cuDNN plans and loads modules, which waits on the device;
 *  - a kernel's weight conversion (cuda_kernel.h, "Persistent memory") is decided on the host
 *    by comparing versions. A capture holds the conversions its run queued; up to two captures
 *    are kept (with gradient accumulation the first micro-batch converts, the others do not).
 *    A run replays the capture that converts exactly what the host would convert now; else it
 *    is captured into a free slot; else a capture that converts at least that is replayed
 *    (converting unchanged weights again gives the same bytes); else one is captured again.
 *    After a replay the host's versions and counters move as the captured run moved them;
 *  - a capture that fails (a call the stream cannot capture) turns the graph off for the
 *    executor, with the reason in the note, and the run is queued node by node.
 * Data parallel (a hook launches all-reduces between nodes) and profiling (events per node)
 * are refused by whoever enables the graph. */
#ifndef FR_CUDA_GRAPH_H
#define FR_CUDA_GRAPH_H

#include "ops/cuda/cuda_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the graph needs of its executor: arrays that live as long as it. */
typedef struct fr_cuda_graph_nodes {
    fr_cuda_ctx *c;
    int n_nodes;
    uint64_t *version;          /* per node: the weights_version its persistent memory holds */
    const int *owner;           /* per node: the node whose persistent memory it uses */
    const size_t *bytes;        /* per node: persistent bytes (0: none) */
    fr_status (*queue)(void *ctx); /* queues the run's nodes on c->stream */
    void *ctx;
} fr_cuda_graph_nodes;

typedef struct fr_cuda_graph fr_cuda_graph;

/* refusal: NULL to capture, else why runs go node by node (kept for the note). */
FR_NODISCARD fr_status fr_cuda_graph_new(const fr_cuda_graph_nodes *n, const char *refusal, fr_cuda_graph **out);
void fr_cuda_graph_free(fr_cuda_graph *g);
/* One run: replayed, captured (then launched), or queued node by node. */
FR_NODISCARD fr_status fr_cuda_graph_run(fr_cuda_graph *g);
/* Runs so far by way: captures, replays, node by node. */
void fr_cuda_graph_counts(const fr_cuda_graph *g, long long *captures, long long *replays, long long *plain);
/* "CUDA graph: 9 of 10 runs replayed (1 capture, 2301 kernel nodes)" or "CUDA graph off: why". */
void fr_cuda_graph_note(const fr_cuda_graph *g, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
