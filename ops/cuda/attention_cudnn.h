/* cuDNN's fused flash attention (scaled dot-product attention, "SDPA") for the fused Attention
 * and AttentionGrad nodes (ops/attention.h), chosen by --attention (fr_cuda_ctx.attention).
 *
 * Why: fp8run's own kernels (attention_tc.cu) reach about 165 TFLOP/s forward and 133 backward
 * on H100; cuDNN's flash engines about 480 / 370 (causal, head dim 128).
 *
 * How: cuDNN 9's backend API (C) through dlopen, no link-time or build-time dependency
 * (attention_cudnn_abi.h declares the subset used). The operation graphs are the ones NVIDIA's
 * cudnn-frontend builds for its SDPA nodes (the flash engines match that pattern):
 *   forward:  S = Q K^T (float32) * scale, [causal: GEN_INDEX row/col, CMP_GE, BINARY_SELECT
 *             -inf], softmax as MAX, SUB, EXP, ADD-reduce, DIV, with Stats = max + log(sum)
 *             (float32 [b, h, s, 1]: the natural-log LSE fp8run's kernels write too), P in the
 *             I/O type, O = P V;
 *   backward: softmax_sum = sum(dO * O) per row, P = exp(scale Q K^T - Stats) (masked), dV =
 *             P^T dO, dS = P (dO V^T - softmax_sum) * scale, dK = dS^T Q, dQ = dS K through a
 *             float32 accumulator; grouped-query heads reduced into dK, dV.
 * Layouts are given by strides (dims in (batch, head, token, feature) order, feature stride 1),
 * so Q/K/V may be read in place from a fused QKV output once the graph hands them over that way.
 *
 * Plans (operation graph, heuristics, execution plan) are built once per context and problem
 * (fr_cudnn_sdpa_prepare, when the executor plans its scratch) and cached with cuDNN's handle in
 * the context; execution queues on the context's stream and synchronizes nothing. */
#ifndef FR_ATTENTION_CUDNN_H
#define FR_ATTENTION_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cuda/attention_cudnn_abi.h"
#include "ops/cuda/cuda_kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the library (attention_cudnn_load.c) ---- */

/* The places tried, in order, when $FP8RUN_CUDNN_LIBRARY is not set. */
extern const char *const fr_cudnn_default_paths[];
/* Open the cuDNN at `path` and resolve its entry points into *api; *lib gets the dlopen handle
 * and *version cudnnGetVersion() (>= 90000 required). No process state is touched (tests call
 * it directly). FR_ERR_UNSUPPORTED naming the path and the reason. */
FR_NODISCARD fr_status fr_cudnn_open(const char *path, frdnn_api *api, void **lib, size_t *version);
/* The process's cuDNN, opened once (thread-safe) from $FP8RUN_CUDNN_LIBRARY when set (only
 * there), else from fr_cudnn_default_paths: the API, or NULL with *why (static text). */
const frdnn_api *fr_cudnn(const char **why);
/* cudnnGetVersion() of the process's cuDNN, 0 when it does not load. */
size_t fr_cudnn_version(void);
/* "cuDNN 9.14.0 (libcudnn.so.9)", or "cuDNN unavailable: <why>" (static text). */
const char *fr_cudnn_describe(void);
/* fr_cudnn_sdpa_describe_support for the process's cuDNN and the first GPU's compute
 * capability (none: 0, the version's best), made once; "" when cuDNN does not load. */
const char *fr_cudnn_support_text(void);
/* "<what>: CUDNN_STATUS_... (cuDNN's last error message)" into buf. */
void fr_cudnn_status_text(const frdnn_api *api, int status, const char *what, char *buf, size_t n);

/* Record why fp8run's kernels ran a node where cuDNN was asked for (the first reason is kept). */
void fr_cuda_attention_note(fr_cuda_ctx *c, const char *why);
/* (fr_cuda_ctx_set_attention, fr_cuda_attention_parse, fr_cuda_attention_report: cuda_kernel.h) */

/* ---- fused SDPA (attention_cudnn.c) ---- */

/* One problem: Q [b, hq, tq, d], K [b, hk, tk, d], V [b, hk, tk, dv], O [b, hq, tq, dv] (query
 * head h reads K/V head h / (hq / hk)), Stats [b, hq, tq] float32 contiguous. The backward's dO
 * has O's strides, dQ Q's, dK K's and dV V's. */
typedef struct fr_cudnn_sdpa {
    int64_t b, hq, hk, tq, tk, d, dv;
    int64_t sq[4], sk[4], sv[4], so[4]; /* element strides, (batch, head, token, feature) */
    int causal;                         /* key j masked for query i when j > i (tq == tk) */
    int64_t window;                     /* with causal, > 0: key j also masked when i - j >= window */
    float softcap;                      /* > 0: scores s become softcap tanh(s / softcap) before the masks */
    /* Per-batch lengths (fr_cudnn_sdpa_io.seq_q, seq_kv): query i >= seq_q[b] and key j >=
     * seq_kv[b] masked (cuDNN's padding mask; the GEMMs stop there too). Rows past seq_q[b] get
     * O = 0 and no gradient; their Stats are cuDNN's (not read by anything that matters). */
    int padded;
    /* Segment ids per batch (fr_cudnn_sdpa_io.seg_q [b, tq], seg_kv [b, tk] int32): key j is
     * visible to query i only when seg_q[b, i] == seg_kv[b, j] (a document mask in the score
     * graph; no work is skipped). Not with padded; forward only (the backward was seen wrong
     * on cuDNN 9.14). The nodes do not route packed sequences here (fr_cudnn_seg_problem). */
    int segments;
    int half;                           /* I/O dtype: 0 bf16, 1 fp16 (computation in float32) */
    int backward;
    /* Only engines without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, and the backward graph as
     * cudnn-frontend's set_deterministic_algorithm builds it on Hopper: dQ = dS K written
     * directly (the engine's "dP workspace" variant) instead of through the float32 dQ
     * accumulator, which engines fill with atomic adds. fr_cudnn_sdpa_prepare / _run take it
     * from the context (fr_cuda_ctx.deterministic). */
    int deterministic;
} fr_cudnn_sdpa;

/* cuDNN's documented limits for p (no device needed): 1 when p is within them, else 0 with
 * why. cc_major: the GPU's compute capability (0: not known yet). */
int fr_cudnn_sdpa_supported(const fr_cudnn_sdpa *p, size_t version, int cc_major, char *why, size_t n);
/* What fp8run routes to cuDNN with this version on a GPU of compute capability cc_major (0: not
 * known), in words ("head dims multiples of 8 up to 256, causal, sliding window, ..."), into buf. */
void fr_cudnn_sdpa_describe_support(size_t version, int cc_major, char *buf, size_t n);
/* Workspace bytes an execution needs besides the plan's own: the backward's float32 dQ
 * accumulator and dO . O row sums (cudnn-frontend's share of the workspace). */
size_t fr_cudnn_sdpa_aux_bytes(const fr_cudnn_sdpa *p);
/* Build (once per context and problem) the execution plan of p on c's device and give the
 * workspace bytes an execution needs (aux + the plan's). FR_ERR_UNSUPPORTED with cuDNN's reason
 * when no engine takes p (remembered: asking again answers the same). */
FR_NODISCARD fr_status fr_cudnn_sdpa_prepare(fr_cuda_ctx *c, const fr_cudnn_sdpa *p, size_t *workspace);

typedef struct fr_cudnn_sdpa_io {
    const void *q, *k, *v;
    void *o;         /* forward: written; backward: read */
    float *stats;    /* forward: written; backward: read */
    const void *dout; /* backward */
    void *dq, *dk, *dv;
    const int32_t *seq_q, *seq_kv; /* padded: [b] int32 on the device, 16-byte aligned */
    const int32_t *seg_q, *seg_kv; /* segments: [b, tq], [b, tk] int32 on the device, likewise */
    float scale;
    void *workspace; /* 16-byte aligned, fr_cudnn_sdpa_prepare's bytes */
    size_t workspace_bytes;
} fr_cudnn_sdpa_io;
/* Queue p on c's stream (preparing it first if needed). Every pointer 16-byte aligned. */
FR_NODISCARD fr_status fr_cudnn_sdpa_run(fr_cuda_ctx *c, const fr_cudnn_sdpa *p, const fr_cudnn_sdpa_io *io);

/* The graph of p for the cuDNN `api` of `version` (fr_cudnn_open), built and finalized without
 * a device: every tensor and operation descriptor, and the operation graph where cuDNN allows
 * that without a handle (*graph_finalized; then *n_ops operations). FR_OK, or the first cuDNN
 * refusal. For tests of the graphs on machines with cuDNN but no GPU. */
FR_NODISCARD fr_status fr_cudnn_sdpa_check_graph(const frdnn_api *api, size_t version, const fr_cudnn_sdpa *p,
                                                 int *graph_finalized, int *n_ops);

/* ---- the nodes (attention_cudnn_node.cu) ---- */

/* Segment ids (Sk, Sq) of a node, as cuDNN takes them. */
typedef struct fr_cudnn_segs {
    const fr_tensor *sk, *sq; /* on the device, int32 or int64 [rows, T]; sq NULL: absent */
} fr_cudnn_segs;
/* p->padded (seg_form padded: per-sequence lengths) for segment ids of seg_form `form`
 * (FR_ATTN_SEG_*) whose Sk has `rows` rows (b * hq: one per problem; b: one per sequence, heads
 * broadcast; or 1): 1, or 0 and why (general ids, packed sequences, ids that differ between a
 * sequence's heads). */
int fr_cudnn_seg_problem(fr_cudnn_sdpa *p, int form, int has_q, int64_t rows, char *why, size_t n);
/* Device bytes fr_cudnn_seg_stage needs for p (0 without segment ids). */
size_t fr_cudnn_seg_bytes(const fr_cudnn_sdpa *p);
/* The lengths (padded) or per-batch int32 ids (segments) from s into mem (256-byte aligned,
 * fr_cudnn_seg_bytes), io pointed at them: small kernels on k's stream, no host sync. */
FR_NODISCARD fr_status fr_cudnn_seg_stage(const fr_cuda_kctx *k, const fr_cudnn_sdpa *p, const fr_cudnn_segs *s,
                                          void *mem, fr_cudnn_sdpa_io *io);

/* Scratch for cuDNN to run node n of g (0 when it will not: choice fp8run, or a node or shape
 * cuDNN does not take under choice auto). With a device (env->cu) the plan is built here;
 * choice cudnn makes a node cuDNN cannot run an error naming it. */
FR_NODISCARD fr_status fr_attn_cudnn_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                             int backward, size_t *bytes);
/* Run the node of k with cuDNN when the context's choice and the node allow it: *ran = 1; else
 * *ran = 0 and fp8run's kernels run it (choice auto; choice cudnn is then an error). Inputs and
 * outputs already checked by the caller. */
FR_NODISCARD fr_status fr_attn_cudnn_run(const fr_cuda_kctx *k, int backward, int *ran);

#ifdef __cplusplus
}
#endif

#endif
