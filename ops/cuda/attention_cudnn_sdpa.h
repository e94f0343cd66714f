/* Internal to ops/cuda: one cuDNN SDPA problem (fr_cudnn_sdpa) and what cuDNN takes of it. The
 * graph builder (attention_cudnn_graph.c) defines the checks; the plan cache and execution
 * (attention_cudnn.c, declared in attention_cudnn.h) and the nodes use the type. It is its own
 * header so the graph builder's header does not include the plan cache's. */
#ifndef FR_ATTENTION_CUDNN_SDPA_H
#define FR_ATTENTION_CUDNN_SDPA_H

#include <stddef.h>
#include <stdint.h>

#include "ops/cuda/attention_cudnn_abi.h"

#ifdef __cplusplus
extern "C" { /* graph/status.h declares C functions, also when a .cu file includes it */
#endif

#include "graph/status.h"

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
    /* Variable-length sequences (packed examples, each its own sequence): > 0, the tokens
     * [ragged, ...] that b sequence slots of at most tq (== tk) tokens lie in, each slot
     * addressed by an int64 ragged offset (fr_cudnn_sdpa_io.off_*, [b + 1] elements from the
     * base pointer) instead of the batch stride (sq[0] .. so[0] unused), its length from
     * seq_q = seq_kv (padded is set too; unused slots have length 0). Stats and the backward's
     * row sums are token-major float32 [ragged, hq] (offsets off_stats), the float32 dQ
     * accumulator [ragged, hq, d] (off_acc): cuDNN 9.6 or newer, Hopper or newer. */
    int64_t ragged;
    int half;                           /* I/O dtype: 0 bf16, 1 fp16 (computation in float32) */
    /* FP8 I/O, cuDNN's FP8 SDPA (Hopper or newer, cuDNN 9.1 or newer): Q, K, V, O in E4M3, dO,
     * dQ, dK, dV in E5M2 (half unused), each with a float32 descale, the outputs with a scale and
     * an amax (graph UIDs UID_DESCALE_Q ..), the softmax P and the backward's dS quantized inside
     * with their own. Plain or causal only; the backward at head dims 128 on Hopper (where
     * cuDNN's FP8 backward also writes dQ, dK, dV only in FP8). The graphs are built and checked
     * without a device (fr_cudnn_sdpa_check_graph); no node runs them (on Hopper the FP8 backward
     * was slower than bf16's: docs/DESIGN.md). */
    int fp8;
    /* With fp8: O in bf16 (forward's output, backward's input; its descale then 1) and the
     * backward's dQ, dK, dV in bf16, the GEMMs still FP8: what a graph of bf16 neighbours would
     * read and write without a conversion pass. Whether cuDNN has an engine for it is asked
     * at prepare (refused: FR_ERR_UNSUPPORTED with cuDNN's reason; cuDNN 9.14 on an H200: no engine). */
    int fp8_bf16_io;
    /* Engine configurations that finalize passed over before the one taken (0: the heuristics'
     * first, what the nodes use): for timing cuDNN's other engines on a problem. */
    int engine_skip;
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
/* The graph of p for the cuDNN `api` of `version` (fr_cudnn_open), built and finalized without
 * a device: every tensor and operation descriptor, and the operation graph where cuDNN allows
 * that without a handle (*graph_finalized; then *n_ops operations). FR_OK, or the first cuDNN
 * refusal. For tests of the graphs on machines with cuDNN but no GPU. */
FR_NODISCARD fr_status fr_cudnn_sdpa_check_graph(const frdnn_api *api, size_t version, const fr_cudnn_sdpa *p,
                                                 int *graph_finalized, int *n_ops);

#ifdef __cplusplus
}
#endif

#endif
