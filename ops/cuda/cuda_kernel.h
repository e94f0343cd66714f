/* The contract between the CUDA backend and its kernels (built only with the CUDA backend).
 *
 * Every op the CPU backend runs has a CUDA kernel in ops/cuda/<family>.cu, listed in that
 * family's table (fr_cuda_kernels_<family>[], terminated by an entry with op_type NULL) and
 * found by (domain, op_type) through fr_cuda_kernel_find. The graph, shapes, attributes and the
 * shape inference are the same as on the CPU: a kernel sees the node and its tensors, whose
 * `data` points to DEVICE memory (fr_tensor headers on the host; owns_data = 0).
 *
 * Rules for kernels:
 *  - everything goes on ctx->cu->stream; no cudaMalloc/cudaFree, no host synchronization
 *    (cudaDeviceSynchronize, cudaStreamSynchronize, cudaMemcpy without Async, reading a device
 *    value on the host): the step is one stream of work, capturable as a CUDA graph;
 *  - temporary device memory comes from ctx->scratch, sized once at plan time by the entry's
 *    `scratch` callback (NULL = none);
 *  - every CUDA / cuBLASLt call is checked (FR_CUDA_TRY / FR_CUBLAS_TRY, or fr_cuda_check_launch
 *    after a <<<>>> launch), and a failure names the node (fr_node_error);
 *  - results must match the CPU kernel: float32 ops within 1e-5 relative, FP8/BF16 conversions
 *    byte for byte (graph/fp8_format.h documents the exact rounding); what the CPU kernel
 *    accumulates in double, accumulate in float32 with a stable order (tree reductions) or in
 *    double where the tolerance needs it.
 *
 * Persistent memory and the weights version (the FP8 weight cast done once per optimizer step):
 *  - an entry with a `persist` callback gets that many bytes of device memory per node,
 *    allocated once by the executor outside the arena, zeroed, kept across runs and freed with
 *    the executor (ctx->persist; NULL when the callback says 0 bytes);
 *  - a kernel may keep there only values derived from graph CONSTANTS (parameters, FP8
 *    scaling state: what the trainer changes between runs, never a node) and write them when
 *    ctx->cu->weights_version differs from *ctx->persist_version (the version the memory was
 *    filled at; 0 = never), then set *ctx->persist_version to it; else it reuses them as they
 *    are (a weight's fp8 codes, scale_inv and amax, its bf16 copy). With gradient accumulation
 *    the weights are converted once per step instead of once per micro-batch;
 *  - why this is safe without any host synchronization: every change of a constant on the
 *    device is queued by the host, which adds 1 to weights_version with it (fr_cuda_weights_
 *    changed: after each step's optimizer and scaling update, whether or not the device skipped
 *    them; on every upload of a constant: fr_cuda_train_push, checkpoint load, set_param). The
 *    version is the context's, so every executor on it (the evaluation graph shares the training
 *    graph's parameters) sees the change; the stream orders the conversion after the update;
 *  - ctx->cu->weight_cache_off (FP8RUN_WEIGHT_CACHE=0 when the context was made; the trainer
 *    sets it before its executors where no run would reuse the copies: one micro-batch a step)
 *    keeps nothing: those kernels plan no persistent memory and convert into scratch on every
 *    run (the same bytes; tests compare both). The plan sees it as fr_cuda_plan_env.weight_cache.
 *    Kernels add each weight conversion they queue to ctx->cu->weight_casts (a host counter
 *    tests read).
 * Frozen weights held only as their converted copy (ctx->cu->codes_only, set by a LoRA trainer):
 * an entry with a `prime` callback converts input 1 into its persistent memory from a temporary
 * device copy the executor gives it, and sets *persist_version to FR_CUDA_VERSION_FROZEN; its
 * runs then never convert that input again (its `data` is NULL: the executor released the
 * float32 block; the values stay on the host). The executor primes again when the host changes
 * the weight or a constant the node reads with it (its scale). */
#ifndef FR_CUDA_KERNEL_H
#define FR_CUDA_KERNEL_H

#include <cublasLt.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" { /* the C headers below declare C functions, also when a .cu file includes them */
#endif

#include "ops/op.h"

#define FR_CUDA_WORKSPACE_BYTES ((size_t)64 << 20) /* cuBLASLt: 32 MiB+ recommended on Hopper */

/* One device context: the device, its stream, the cuBLASLt handle and workspace. */

typedef struct fr_cuda_ctx {
    int device;
    int cc_major, cc_minor;      /* compute capability */
    int sm_count;
    size_t mem_total;
    char name[256];
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;             /* cuBLASLt workspace (device) */
    size_t workspace_bytes;
    struct fr_cuda_gemm_cache *gemm_cache; /* cuBLASLt heuristics per GEMM shape, owned by the
                                              GEMM code, freed through gemm_cache_free */
    void (*gemm_cache_free)(struct fr_cuda_gemm_cache *);
    /* The device error word (4 ints, device memory, zeroed): a kernel that meets bad data (an
     * index out of range, a label >= the vocabulary) does not fail and does not synchronize;
     * it records the first error with fr_dev_error (ops/cuda/cuda_util.cuh): word[0] = code
     * (an fr_status), word[1] = node index in the graph, word[2], word[3] = details (e.g. the
     * bad index and the bound, truncated to int). Whoever synchronizes next (the executor,
     * the trainer) reads it and turns it into an error naming the node: fr_cuda_check_error. */
    int *dev_error;
    /* The weights version (see "Persistent memory" above): starts at 1, +1 on every change of
     * the device's constants; weight_cache_off: kernels recompute cached values every run;
     * weight_casts: weight conversions queued so far (a debug counter for tests). */
    uint64_t weights_version;
    int weight_cache_off;
    long long weight_casts;
    /* The fused attention's implementation (FR_CUDA_ATTN_*, --attention; fp8run's kernels unless
     * fr_cuda_ctx_set_attention says otherwise, before executors are built); cuDNN's handle and
     * plans (ops/cuda/attention_cudnn.c, freed through cudnn_free); what ran: node runs by each
     * implementation (attn_runs_wgmma: those of fp8run's that ran its Hopper wgmma kernels) and
     * why fp8run's ran where cuDNN was asked for (the first reason). */
    int attention;
    struct fr_cudnn_state *cudnn;
    void (*cudnn_free)(struct fr_cudnn_state *);
    long long attn_runs_cudnn, attn_runs_own, attn_runs_wgmma;
    char attn_note[320];
    /* GEMM choices (ops/cuda/cuda_gemm.h): fp8_fast_accum: the Linear forward's per-tensor fp8
     * GEMMs accumulate in the tensor cores' fast mode (0 at creation: the exact path the CPU
     * reference matches; the trainer sets its option); gemm_tune: time cuBLASLt's candidates per
     * shape (FP8RUN_GEMM_TUNE=0 when the context was made: the heuristic's first); gemm_timer:
     * the profiling executor's events around each cuBLASLt call (NULL when not profiling). */
    int fp8_fast_accum;
    int gemm_tune;
    struct fr_cuda_gemm_timer *gemm_timer;
    /* 1: executors built on this context keep a frozen weight that only priming kernels read
       as their converted copy alone (see "Frozen weights" above); a LoRA trainer sets it */
    int codes_only;
    /* --deterministic (the trainer sets it before any executor): the same bits run to run.
     * cuDNN's attention plans take only engines without the NONDETERMINISTIC numerical note, on
     * the backward graph without a float32 dQ accumulator (attention_cudnn.h); gemm_tune is 0. */
    int deterministic;
    /* The most sequences one window of packed segment ids holds (the trainer sets it from
     * sft_max_examples before any executor; 0: FR_CUDNN_RAGGED_PER_WINDOW): cuDNN's
     * variable-length plans have that many sequence slots a window (attention_cudnn_ragged.h). */
    int64_t ragged_per_window;
    /* accumulate_out: set by the executor around one node's run only (0 otherwise): 1 = add the
     * result into output 0 instead of writing it, for a LinearGradWeight whose dW is the
     * trainer's in-place gradient accumulator (fr_cuda_wgrad_accumulable; the runs after a
     * step's first micro-batch); wgrad_accumulated: such GEMMs queued so far (a host counter
     * tests read). */
    int accumulate_out;
    long long wgrad_accumulated;
} fr_cuda_ctx;

/* *persist_version of a node whose kept copy was primed from a released weight: never stale. */
#define FR_CUDA_VERSION_FROZEN UINT64_MAX

/* fr_cuda_ctx.attention: which kernels run the fused Attention / AttentionGrad nodes (the order
 * of FR_CHOICES_ATTENTION, graph/option_choices.h). */
enum { FR_CUDA_ATTN_FP8RUN = 0, FR_CUDA_ATTN_CUDNN = 1, FR_CUDA_ATTN_AUTO = 2 };

/* --attention ("fp8run", "cudnn", "auto"; NULL: "fp8run") on context c, before executors are
 * built (ops/cuda/attention_cudnn_load.c). "cudnn" fails (FR_ERR_UNSUPPORTED, saying why) when
 * cuDNN does not load or the GPU is older than compute capability 8.0; "auto" then keeps
 * fp8run's kernels and notes why. */
FR_NODISCARD fr_status fr_cuda_ctx_set_attention(struct fr_cuda_ctx *c, const char *choice);
/* FR_CUDA_ATTN_* of a choice, -1 when it is none of them (NULL: FR_CUDA_ATTN_FP8RUN). */
int fr_cuda_attention_parse(const char *choice);
/* Which attention ran on c and why: "cuDNN 9.14.0 (libcudnn.so.9) fused flash attention (64 of
 * 64 runs)", "fp8run kernels (--attention fp8run)", or the mix with the first reason cuDNN was
 * not used. */
void fr_cuda_attention_report(const struct fr_cuda_ctx *c, char *buf, size_t n);
/* Why every attention run on c so far was fp8run's own kernels (cuDNN's reason, or "--attention
 * fp8run"); NULL when cuDNN ran any, none ran, or c is NULL. */
const char *fr_cuda_attention_generic(const struct fr_cuda_ctx *c);

/* What a kernel's scratch and persistent memory may depend on besides the node: the context
 * (NULL when the executor only plans sizes, fr_cuda_exec_plan_with), the attention choice
 * planned for, and whether converted weights are kept between runs (!cu->weight_cache_off). */
typedef struct fr_cuda_plan_env {
    struct fr_cuda_ctx *cu;
    int attention;
    int weight_cache;
} fr_cuda_plan_env;

/* The weight cache as a kernel's run sees it (cuda_kernel.h, "Persistent memory"). */
static inline int fr_cuda_weight_cache(const struct fr_cuda_ctx *c) { return !c->weight_cache_off; }

/* What executors on context c plan for. */
static inline fr_cuda_plan_env fr_cuda_plan_env_of(struct fr_cuda_ctx *c)
{
    const fr_cuda_plan_env env = {c, c->attention, fr_cuda_weight_cache(c)};
    return env;
}

/* The host queued (or made) a change of parameters or scaling state on the device. */
static inline void fr_cuda_weights_changed(fr_cuda_ctx *c) { c->weights_version++; }

typedef struct fr_cuda_kctx {
    const fr_graph *g;
    const fr_node *node;
    int64_t opset;
    int n_in, n_out;
    fr_tensor *const *in;        /* device tensors; NULL for omitted optional inputs */
    fr_tensor *const *out;       /* device tensors, allocated with infer()'s dtype and shape */
    fr_cuda_ctx *cu;
    void *scratch;               /* this node's temporary device memory (or NULL) */
    size_t scratch_bytes;
    void *persist;               /* this node's persistent device memory (or NULL) */
    size_t persist_bytes;
    uint64_t *persist_version;   /* host: weights_version persist was filled at (0 = never) */
} fr_cuda_kctx;

typedef struct fr_cuda_kernel_def {
    const char *op_type;
    const char *domain;
    fr_status (*run)(const fr_cuda_kctx *k);
    /* bytes of scratch the node needs (shapes are static, so this is known at plan time);
     * NULL = none */
    fr_status (*scratch)(const fr_graph *g, const fr_node *n, size_t *bytes);
    /* bytes of persistent memory the node keeps across runs (see above); NULL = none */
    fr_status (*persist)(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes);
    /* instead of `scratch` when set: scratch that depends on the context's choices (the
       attention implementation), which may build device plans when env->cu is set */
    fr_status (*scratch_env)(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes);
    /* 1: the persistent memory is a function of the inputs after the first and the attributes
       only (a weight's codes), so nodes of this kernel that agree on those share one copy and
       its version (a recomputed Linear reuses its forward's codes: passes/recompute.h) */
    int persist_shareable;
    /* NULL, or: convert input 1 (a temporary device copy in k->in[1]) into the persistent
       memory now and mark it FR_CUDA_VERSION_FROZEN (see "Frozen weights" above) */
    fr_status (*prime)(const fr_cuda_kctx *k);
} fr_cuda_kernel_def;

/* A kernel's scratch bytes under env (scratch_env, else scratch, else 0). */
FR_NODISCARD static inline fr_status fr_cuda_kernel_scratch(const fr_cuda_kernel_def *k,
                                                            const fr_cuda_plan_env *env, const fr_graph *g,
                                                            const fr_node *n, size_t *bytes)
{
    *bytes = 0;
    if (k->scratch_env) return k->scratch_env(env, g, n, bytes);
    return k->scratch ? k->scratch(g, n, bytes) : FR_OK;
}

/* The kernel for (domain, op_type), or NULL. */
const fr_cuda_kernel_def *fr_cuda_kernel_find(const char *domain, const char *op_type);
/* Iterate all kernels (i from 0 until NULL), for coverage checks. */
const fr_cuda_kernel_def *fr_cuda_kernel_at(int i);

/* The family tables (ops/cuda/<family>.cu). */
extern const fr_cuda_kernel_def fr_cuda_kernels_elementwise[]; /* unary, binary, Where, Expand, Cast, Clip, Pow, *Grad of elementwise */
extern const fr_cuda_kernel_def fr_cuda_kernels_reduce[];      /* Reduce*, ArgMax/Min, ReduceGrad, SumToShape, Dot, CumSum */
extern const fr_cuda_kernel_def fr_cuda_kernels_softmax[];     /* Softmax, LogSoftmax and grads */
extern const fr_cuda_kernel_def fr_cuda_kernels_loss[];        /* SoftmaxCrossEntropy(+Grad) (ops/cuda/loss.cu) */
extern const fr_cuda_kernel_def fr_cuda_kernels_add_norm[];    /* AddRMSNorm(Grad): residual Add + RMSNorm (ops/cuda/add_norm.cu) */
extern const fr_cuda_kernel_def fr_cuda_kernels_add_layer_norm[]; /* AddLayerNorm(Grad): residual Add + LayerNorm (ops/cuda/add_layer_norm.cu) */
extern const fr_cuda_kernel_def fr_cuda_kernels_norm[];        /* LayerNormalization, RMSNormalization and grads */
extern const fr_cuda_kernel_def fr_cuda_kernels_gather[];      /* Gather family and scatter-add grads */
extern const fr_cuda_kernel_def fr_cuda_kernels_layout[];      /* Transpose, Concat, Split, Slice, Trilu, Tile, grads */
extern const fr_cuda_kernel_def fr_cuda_kernels_shape[];       /* reshapes, shape ops (ops/cuda/shape.cu) */
extern const fr_cuda_kernel_def fr_cuda_kernels_matmul[];      /* MatMul, Gemm */
extern const fr_cuda_kernel_def fr_cuda_kernels_einsum[];      /* Einsum (ops/cuda/einsum.cu) */
extern const fr_cuda_kernel_def fr_cuda_kernels_linear[];      /* Linear, LinearGradData, LinearGradWeight */
extern const fr_cuda_kernel_def fr_cuda_kernels_attention[];   /* Attention, AttentionGrad (fused, flash style) */
extern const fr_cuda_kernel_def fr_cuda_kernels_attention_qkv[]; /* AttentionQKV(Grad): attention on the packed QKV projection */
extern const fr_cuda_kernel_def fr_cuda_kernels_swiglu[];      /* SwiGLU, SwiGLUGrad (fused gate * sigmoid(gate) * up) */
extern const fr_cuda_kernel_def fr_cuda_kernels_swiglu_quant[]; /* SwiGLUQuantize (the SwiGLU output as E4M3 codes) */
extern const fr_cuda_kernel_def fr_cuda_kernels_rotary[];      /* Rotary, RotaryGrad (fused x * cos + rotate_half(x) * sin) */
extern const fr_cuda_kernel_def fr_cuda_kernels_dropout[];     /* KeyedDropout (training-mode dropout, ops/dropout.h) */

/* Whether LinearGradWeight node n can add its dW into output 0 in place (ctx accumulate_out):
 * the GEMM writes that float32 [rows][cols] buffer whole and directly, i.e. fp32 precision on
 * float32 operands, bf16, or a per-tensor fp8 recipe whose result dims are multiples of 16 (no
 * padded copy-out). Not the block fp8 recipe: its block-scaled GEMMs are left as they are
 * (beta = 0). From the graph alone, so a plan without a device agrees (ops/cuda/linear.cu). */
int fr_cuda_wgrad_accumulable(const fr_graph *g, const fr_node *n);

/* ---- error checking (ops/cuda/cuda_ctx.c) ---- */
FR_NODISCARD fr_status fr_cuda_status(cudaError_t e, const char *what, const char *file, int line);
FR_NODISCARD fr_status fr_cublas_status(cublasStatus_t s, const char *what, const char *file, int line);
/* After a kernel launch: the launch error, if any, as a status naming the node. */
FR_NODISCARD fr_status fr_cuda_check_launch(const fr_node *n, const char *kernel);

#define FR_CUDA_TRY(call)                                                              \
    do {                                                                               \
        cudaError_t fr_cu_e_ = (call);                                                 \
        if (fr_cu_e_ != cudaSuccess) return fr_cuda_status(fr_cu_e_, #call, __FILE__, __LINE__); \
    } while (0)
/* For a run of calls cleaned up together: while the local status st is FR_OK, make the call and
 * keep its failure in st (later calls are then skipped). */
#define FR_CUDA_KEEP(st, call)                                                         \
    do {                                                                               \
        if ((st) == FR_OK) {                                                           \
            cudaError_t fr_cu_e_ = (call);                                             \
            if (fr_cu_e_ != cudaSuccess) (st) = fr_cuda_status(fr_cu_e_, #call, __FILE__, __LINE__); \
        }                                                                              \
    } while (0)
#define FR_CUBLAS_TRY(call)                                                            \
    do {                                                                               \
        cublasStatus_t fr_cb_s_ = (call);                                              \
        if (fr_cb_s_ != CUBLAS_STATUS_SUCCESS)                                         \
            return fr_cublas_status(fr_cb_s_, #call, __FILE__, __LINE__);              \
    } while (0)

/* Read the device error word (synchronizes the stream); FR_OK when no kernel recorded an
 * error, else that error naming the node of g (g may be NULL) and the details; the word is
 * cleared. */
FR_NODISCARD fr_status fr_cuda_check_error(fr_cuda_ctx *c, const fr_graph *g);
/* The same for a copy of the word taken earlier (the trainer keeps one per queued step). */
FR_NODISCARD fr_status fr_cuda_error_of_word(const int word[4], const fr_graph *g);

/* ---- the context (ops/cuda/cuda_ctx.c) ---- */
/* Open device `device` (-1: the current one): stream, cuBLASLt handle, workspace. The
 * environment's switches are read here (weight cache, GEMM tuning, the quantizers' block
 * count) and handed to the code that uses them: kernels never read the environment. */
FR_NODISCARD fr_status fr_cuda_ctx_create(int device, fr_cuda_ctx **out);
void fr_cuda_ctx_free(fr_cuda_ctx *c);
/* The most blocks the amax-reducing quantize kernels launch (ops/cuda/quantize.cu); 0 (the
 * default) is one wave of the device, 8 blocks a multiprocessor. A few blocks make each loop
 * over many tiles (tests: FP8RUN_QUANT_BLOCKS, read by the last context created). Process-wide. */
int64_t fr_cuda_quant_blocks(void);

/* Run one node on the device with host inputs and host outputs (the outputs already allocated
 * with infer()'s shapes): uploads, plans scratch, runs the kernel, downloads, synchronizes.
 * For tests and one-off runs; the executor plans all of this once. FR_ERR_UNSUPPORTED naming
 * the op when it has no CUDA kernel. */
FR_NODISCARD fr_status fr_cuda_run_node(fr_cuda_ctx *c, const fr_graph *g, int node_id, fr_tensor *const *host_in,
                           fr_tensor *const *host_out);

#ifdef __cplusplus
}
#endif

#endif
