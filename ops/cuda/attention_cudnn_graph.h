/* Internal to ops/cuda: the operation graphs of cuDNN's SDPA (attention_cudnn_graph.c) and
 * their execution plans (attention_cudnn_plan.c), shared with the plan cache and execution
 * (attention_cudnn.c). */
#ifndef FR_ATTENTION_CUDNN_GRAPH_H
#define FR_ATTENTION_CUDNN_GRAPH_H

#include "ops/cuda/attention_cudnn_sdpa.h"

/* Unique ids of the graphs' non-virtual tensors (the variant pack names them by these). */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_SCALE,
    UID_NEG_INF,
    UID_ONE,
    UID_SUM,    /* backward: sum_d dO * O per row (workspace) */
    UID_DQ_ACC, /* backward: float32 dQ accumulator (workspace) */
    UID_SEQ_Q,  /* [b] int32 query lengths: the caller's (padded), or tq (the backward's padding
                 * workaround, plan's device memory) */
    UID_SEQ_KV, /* [b] int32 key lengths, likewise */
    UID_SOFTCAP, /* float by value: the cap c of c tanh(s / c) */
    UID_WINDOW,  /* float by value: the sliding window's length */
    UID_SEG_Q,   /* [b, 1, tq, 1] int32 segment ids of the queries */
    UID_SEG_KV,  /* [b, 1, 1, tk] int32 segment ids of the keys */
    UID_OFF_Q,   /* ragged: [b + 1] int64 offsets of Q and dQ */
    UID_OFF_K,   /* of K and dK (and the backward's view of K) */
    UID_OFF_V,   /* of V and dV */
    UID_OFF_O,   /* of O and dO */
    UID_OFF_STATS, /* of Stats and the row sums */
    UID_OFF_ACC, /* of the float32 dQ accumulator */
    /* FP8 (fr_cudnn_sdpa.fp8): float32 [1, 1, 1, 1] device tensors. Descales multiply a
     * product of codes back to values (1 / the scale its codes were made with); scales make the
     * codes of an output (P and dS inside, O, dQ, dK, dV out); amaxes are the outputs' and P's
     * and dS's largest magnitudes before their scale, for the next step's scales. */
    UID_DESCALE_Q,
    UID_DESCALE_K,
    UID_DESCALE_V,
    UID_DESCALE_O,
    UID_DESCALE_DO,
    UID_DESCALE_S,
    UID_DESCALE_DP,
    UID_SCALE_S,
    UID_SCALE_O,
    UID_SCALE_DP,
    UID_SCALE_DQ,
    UID_SCALE_DK,
    UID_SCALE_DV,
    UID_AMAX_S,
    UID_AMAX_O,
    UID_AMAX_DP,
    UID_AMAX_DQ,
    UID_AMAX_DK,
    UID_AMAX_DV,
    UID_VIRTUAL = 100, /* virtual tensors from here */
};

/* Descriptors are made through the builder, which keeps them all (destroyed with the plan, so
 * the plan never outlives what it was finalized from) and stops at the first failure. */
typedef struct gb {
    const frdnn_api *api;
    frdnn_desc *all;
    int n_all, cap_all;
    frdnn_desc ops[64];
    int n_ops;
    int64_t next_uid;
    int failed;
    char why[640];
} gb;

/* Destroy every descriptor b made (last first). */
void fr_cudnn_gb_free(gb *b);
/* Keep d (made outside the builder) to be destroyed with the rest: 0, or -1 (d destroyed). */
int fr_cudnn_gb_keep(gb *b, frdnn_desc d);
/* Stop b at its first failure: text, or cuDNN's status in words after `what`. */
void fr_cudnn_gb_fail_text(gb *b, const char *text);
void fr_cudnn_gb_fail(gb *b, int status, const char *what);
/* A new descriptor of this type, kept by b (NULL once b failed). */
frdnn_desc fr_cudnn_gb_new(gb *b, int type, const char *what);
/* Set an attribute of d / finalize d; nothing once b failed, a refusal fails b. */
void fr_cudnn_gb_set(gb *b, frdnn_desc d, int name, int type, int64_t count, const void *v, const char *what);
void fr_cudnn_gb_fin(gb *b, frdnn_desc d, const char *what);
/* Attribute NAME of d (a builder named b in scope), of type TYPE: n values at v; SETD: one descriptor. */
#define SET(d, NAME, TYPE, n, v) \
    fr_cudnn_gb_set(b, d, FRDNN_ATTR_##NAME, FRDNN_TYPE_##TYPE, n, v, "cudnnBackendSetAttribute(" #NAME ")")
#define SETD(d, NAME, x) SET(d, NAME, BACKEND_DESCRIPTOR, 1, &(x))
/* 1 when the backward of p needs cudnn-frontend's padding-mask workaround on this version
 * (full lengths from the plan's own memory; never with p->padded, whose mask covers it). */
int fr_cudnn_needs_padding(const fr_cudnn_sdpa *p, size_t version);
/* The operations of p's graph into b (b->failed and b->why on the first refusal). */
void fr_cudnn_graph(gb *b, const fr_cudnn_sdpa *p, size_t version);
/* The finalized operation graph of b's operations (h may be NULL), or NULL (b->failed). */
frdnn_desc fr_cudnn_op_graph(gb *b, frdnn_handle h);
/* The first engine configuration the heuristics offer (mode A, then the fallback list) that
 * finalizes into an execution plan (deterministic: whose engine has no NONDETERMINISTIC
 * numerical note), after skip such ones: 0 with *plan (kept by b) and its workspace bytes, or -1
 * (b->why says why). */
int fr_cudnn_find_plan(gb *b, frdnn_handle h, frdnn_desc og, int deterministic, int skip, frdnn_desc *plan,
                       int64_t *workspace);

#endif
