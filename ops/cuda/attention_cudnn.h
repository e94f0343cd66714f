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
#include "ops/cuda/attention_cudnn_sdpa.h"
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
/* (fr_cudnn_status_text: attention_cudnn_status.h) */

/* Record why fp8run's kernels ran a node where cuDNN was asked for (the first reason is kept). */
void fr_cuda_attention_note(fr_cuda_ctx *c, const char *why);
/* (fr_cuda_ctx_set_attention, fr_cuda_attention_parse, fr_cuda_attention_report: cuda_kernel.h) */

/* ---- fused SDPA (attention_cudnn.c) ---- */

/* (the problem, fr_cudnn_sdpa, and what cuDNN takes of it: attention_cudnn_sdpa.h) */

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
    /* ragged: [b + 1] int64 element offsets of each sequence's first token in Q (and dQ), K (dK),
     * V (dV), O (dO), Stats (and the row sums), the dQ accumulator; 16-byte aligned */
    const int64_t *off_q, *off_k, *off_v, *off_o, *off_stats, *off_acc;
    /* fp8 (fr_cudnn_sdpa.fp8): float32 scalars in device memory, 16-byte aligned: the inputs'
     * descales (1 / the scale their codes were made with), the codes' scales of P, dS and the
     * outputs, and the amaxes cuDNN writes (forward: descale q k v s, scale s o, amax s o;
     * backward: descale q k v o do s dp, scale s dp dq dk dv, amax dp dq dk dv) */
    const float *descale_q, *descale_k, *descale_v, *descale_o, *descale_do, *descale_s, *descale_dp;
    const float *scale_s, *scale_o, *scale_dp, *scale_dq, *scale_dk, *scale_dv;
    float *amax_s, *amax_o, *amax_dp, *amax_dq, *amax_dk, *amax_dv;
    float scale;
    void *workspace; /* 16-byte aligned, fr_cudnn_sdpa_prepare's bytes */
    size_t workspace_bytes;
} fr_cudnn_sdpa_io;
/* Queue p on c's stream (preparing it first if needed). Every pointer 16-byte aligned. */
FR_NODISCARD fr_status fr_cudnn_sdpa_run(fr_cuda_ctx *c, const fr_cudnn_sdpa *p, const fr_cudnn_sdpa_io *io);

/* ---- the nodes (attention_cudnn_node.cu) ---- */

/* Segment ids (Sk, Sq) of a node, as cuDNN takes them. */
typedef struct fr_cudnn_segs {
    const fr_tensor *sk, *sq; /* on the device, int32 or int64 [rows, T]; sq NULL: absent */
} fr_cudnn_segs;
/* p->padded (seg_form padded: per-sequence lengths) for segment ids of seg_form `form`
 * (FR_ATTN_SEG_*) whose Sk has `rows` rows (b * hq: one per problem; b: one per sequence, heads
 * broadcast; or 1): 1, or 0 and why (general ids, packed ids without Sq, ids that differ between
 * a sequence's heads). Packed ids make p ragged (b becomes the slots, per_window a window or 0
 * for the default: fr_cudnn_ragged_slots; fr_cudnn_sdpa.ragged the tokens); the caller then lays
 * Q, K, V, O out token-major. */
int fr_cudnn_seg_problem(fr_cudnn_sdpa *p, int form, int has_q, int64_t rows, int64_t per_window, char *why, size_t n);
/* Device bytes fr_cudnn_seg_stage needs for p (0 without segment ids). */
size_t fr_cudnn_seg_bytes(const fr_cudnn_sdpa *p);
/* The lengths (padded) or per-batch int32 ids (segments) from s into mem (256-byte aligned,
 * fr_cudnn_seg_bytes), io pointed at them: small kernels on k's stream, no host sync. */
FR_NODISCARD fr_status fr_cudnn_seg_stage(const fr_cuda_kctx *k, const fr_cudnn_sdpa *p, const fr_cudnn_segs *s,
                                          void *mem, fr_cudnn_sdpa_io *io);

/* Statistics between the op's LSE [b, h, t] and cuDNN's token-major ragged Stats [b, t, h]
 * (float32; to_token_major 1: LSE into Stats, 0: back), on k's stream. */
FR_NODISCARD fr_status fr_cudnn_stats_transpose(const fr_cuda_kctx *k, const float *x, float *y, int64_t b, int64_t h,
                                                int64_t t, int to_token_major);

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
