/* The CUDA executor: runs a prepared graph on one device, node by node, with the kernels of
 * ops/cuda/cuda_kernel.h, all on the context's stream.
 *
 * Memory, planned once from the static shapes (nothing is allocated per run):
 *  - constants (initializers, folded values, FP8 state) are uploaded once into one device
 *    block; the trainer updates parameters and state there, in place. An executor built with
 *    `share` uses the device copy of every constant of the same name that `share` holds (the
 *    evaluation graph reads the training graph's parameters);
 *  - graph inputs get their own buffers, filled from the host through pinned staging memory;
 *  - values computed by nodes, and each node's kernel scratch, live in one arena at offsets
 *    from a liveness plan (first fit); graph outputs keep theirs until the next run;
 *  - kernels that keep values across runs (a weight's fp8 codes: cuda_kernel.h) get their
 *    persistent memory in one more block, zeroed at build (nodes of a kernel marked
 *    persist_shareable that read the same weight with the same attributes share one copy:
 *    a recomputed Linear's codes are its forward's); uploading a constant
 *    (fr_cuda_exec_upload_constant) moves the context's weights_version;
 *  - on a context with codes_only, a frozen float32 constant that only kernels with a `prime`
 *    callback read as their weight gets no device block: its readers' converted copies are made
 *    from the host's values before the first run (and after fr_cuda_exec_reprime or an upload
 *    of it); fr_cuda_exec_value is NULL for it and a download leaves the host's values as they are;
 *  - view ops (Reshape, Squeeze, Unsqueeze, Flatten, Identity, inference Dropout) do not copy:
 *    their output is the input's memory, and the node is not run.
 * Ownership: the executor borrows the graph and the context, which must outlive it. */
#ifndef FR_CUDA_EXEC_H
#define FR_CUDA_EXEC_H

#include "ops/cuda/cuda_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fr_cuda_exec fr_cuda_exec;

/* An op without a CUDA kernel is FR_ERR_UNSUPPORTED naming node and op. */
FR_NODISCARD fr_status fr_cuda_exec_new(fr_cuda_ctx *c, const fr_graph *g, const fr_cuda_exec *share, fr_cuda_exec **out);
void fr_cuda_exec_free(fr_cuda_exec *e);

/* fr_cuda_exec_new(c, g, NULL, out) with the n_held values `held` (value ids of g) held for the
 * whole run: placed in the arena before anything else and never shared, so what a run leaves in
 * them is still there at the next. Each must be a graph output that is output 0 of a
 * LinearGradWeight node which can add into it (fr_cuda_wgrad_accumulable) and that no node
 * reads; else FR_ERR_INVALID_ARG. The trainer holds the parameter gradients it accumulates in
 * place across micro-batches (runtime/cuda/cuda_train.c). */
FR_NODISCARD fr_status fr_cuda_exec_new_held(fr_cuda_ctx *c, const fr_graph *g, const int *held, int n_held,
                                             fr_cuda_exec **out);
/* on = 1: the next runs' producers of the held values add into them (GEMM beta = 1) instead of
 * writing them; 0: they write them. FR_ERR_INTERNAL for on = 1 when nothing is held or the runs
 * are replayed from a CUDA graph (the capture fixed the GEMMs). */
FR_NODISCARD fr_status fr_cuda_exec_set_accumulate(fr_cuda_exec *e, int on);
/* Bytes of the held values (in the arena's count). */
size_t fr_cuda_exec_held_bytes(const fr_cuda_exec *e);

/* Copy host tensor t into graph input `name` (same checks as fr_exec_set_input). The copy is
 * queued on the stream; t may be reused as soon as this returns. */
FR_NODISCARD fr_status fr_cuda_exec_set_input(fr_cuda_exec *e, const char *name, const fr_tensor *t);
/* Queue every node. Kernel-detected data errors (fr_dev_error) surface at the next
 * synchronizing call (fr_cuda_exec_sync, a download). */
FR_NODISCARD fr_status fr_cuda_exec_run(fr_cuda_exec *e);
/* A function called after each node's kernels are queued (also after a view node), with the
 * node's index; an error stops the run. One per executor (NULL: none). The data-parallel
 * trainer launches a gradient bucket's all-reduce as soon as its last gradient is queued. */
typedef fr_status (*fr_cuda_exec_hook)(void *ctx, int node);
void fr_cuda_exec_set_hook(fr_cuda_exec *e, fr_cuda_exec_hook hook, void *ctx);
/* The last node that reads or writes the memory of value vid (through views too), or -1 when
 * none does (a constant, an input no node reads). */
int fr_cuda_exec_last_touch(const fr_cuda_exec *e, int vid);
/* Wait for the stream and turn a recorded device error into a status naming the node. */
FR_NODISCARD fr_status fr_cuda_exec_sync(fr_cuda_exec *e);

/* Runs replayed from a CUDA graph captured after the first run (cuda_graph.h); refusal: NULL,
 * else why every run stays node by node (said in the graph's note). Profiling refuses it, and
 * a run with a hook set goes node by node. */
struct fr_cuda_graph;
FR_NODISCARD fr_status fr_cuda_exec_use_graph(fr_cuda_exec *e, const char *refusal);
/* The executor's graph (NULL: not asked for). */
const struct fr_cuda_graph *fr_cuda_exec_graph(const fr_cuda_exec *e);

/* The device tensor of value vid (a constant, an input, a graph output, or any computed value
 * whose memory is still its own), or NULL. The header is the executor's. */
fr_tensor *fr_cuda_exec_value(fr_cuda_exec *e, int vid);
/* Graph output i (device tensor) or NULL. */
fr_tensor *fr_cuda_exec_output_at(fr_cuda_exec *e, int i);
/* Copy value vid to host memory (synchronizes; checks the device error word). */
FR_NODISCARD fr_status fr_cuda_exec_download(fr_cuda_exec *e, int vid, void *dst, size_t bytes);
/* After the host changed a constant's data (checkpoint load), send it again; and the other
 * way, before the host reads a constant the device updated (export, checkpoint save). */
FR_NODISCARD fr_status fr_cuda_exec_upload_constant(fr_cuda_exec *e, int vid);
FR_NODISCARD fr_status fr_cuda_exec_download_constant(fr_cuda_exec *e, int vid);

/* With FP8RUN_PROFILE=1 in the environment when the executor was built, every run waits for
 * the GPU and times each node and each cuBLASLt call in it; this is the per-op summary with
 * each op's ceiling (runtime/exec/perf_model.h; FP8RUN_PROFILE=2 adds the slowest nodes), malloc'ed;
 * NULL when not profiling. */
FR_NODISCARD fr_status fr_cuda_exec_profile(const fr_cuda_exec *e, char **text);

/* The plan of fr_cuda_exec_new(c, g, NULL) without a device or any allocation: the bytes it
 * would take for the arena, constants, inputs and kernels' persistent memory (FP8 weight codes). */
typedef struct fr_cuda_exec_sizes {
    size_t arena, consts, inputs, persist;
    size_t coded; /* float32 bytes of frozen weights held only as codes (not in consts) */
    size_t held;  /* bytes of the held values (fr_cuda_exec_new_held), part of arena */
    char peak[512]; /* where the arena peaks and what is live there, by producing op ("" if empty) */
} fr_cuda_exec_sizes;
FR_NODISCARD fr_status fr_cuda_exec_plan(const fr_graph *g, fr_cuda_exec_sizes *out);
/* The same with the fused attention's kernels as `attention` (FR_CUDA_ATTN_*) would choose them
 * (cuDNN's scratch counted without its plan's own workspace, which only a device can tell). */
FR_NODISCARD fr_status fr_cuda_exec_plan_with(const fr_graph *g, int attention, fr_cuda_exec_sizes *out);
/* The same for a context whose choices `flags` gives: FR_CUDA_PLAN_CODES_ONLY (codes_only set:
 * cuda_kernel.h, "Frozen weights"), FR_CUDA_PLAN_NO_WEIGHT_CACHE (weight_cache_off set: the
 * weights' converted copies in scratch, not in persistent memory). */
enum { FR_CUDA_PLAN_CODES_ONLY = 1, FR_CUDA_PLAN_NO_WEIGHT_CACHE = 2 };
FR_NODISCARD fr_status fr_cuda_exec_plan_codes(const fr_graph *g, int attention, int flags, fr_cuda_exec_sizes *out);

/* The same for fr_cuda_exec_new_held's executor. */
FR_NODISCARD fr_status fr_cuda_exec_plan_held(const fr_graph *g, int attention, int flags, const int *held, int n_held,
                                              fr_cuda_exec_sizes *out);

/* Frozen weights held only as codes (built on a context with codes_only): the float32 bytes
 * not held on the device; fr_cuda_exec_reprime makes the codes again from the host's values
 * before the next run (after the host changed a scale those nodes read). */
size_t fr_cuda_exec_coded_bytes(const fr_cuda_exec *e);
void fr_cuda_exec_reprime(fr_cuda_exec *e);

/* Bytes planned: the arena (computed values and scratch), constants (0 for shared ones), inputs. */
size_t fr_cuda_exec_arena_bytes(const fr_cuda_exec *e);
size_t fr_cuda_exec_const_bytes(const fr_cuda_exec *e);
size_t fr_cuda_exec_input_bytes(const fr_cuda_exec *e);
/* Bytes of the kernels' persistent memory (cuda_kernel.h: weights converted once per version). */
size_t fr_cuda_exec_persist_bytes(const fr_cuda_exec *e);

#ifdef __cplusplus
}
#endif

#endif
