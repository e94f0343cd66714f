/* Fused scaled-dot-product attention (domain ai.fp8run): the contract shared by the CPU
 * reference (ops/attention.c), the fusion pass that emits it (passes/attention_fuse.c) and the
 * CUDA kernels (ops/cuda/attention.cu).
 *
 * Why: unfused, attention materializes [batch, heads, T, T] float32 scores, scaled scores,
 * masked scores and probabilities, forward and backward; at T = 2048 that is most of a Llama
 * step's time and memory. The fused op keeps only O and one float per query row (LSE) for the
 * backward, which recomputes the probabilities (flash attention).
 *
 * Attention(Q, K, V [, M [, Sk [, Sq]]]) -> (O, LSE)   (optional inputs: an empty name is absent)
 *   Q:   [..., Tq, D]  float32 (float64 allowed on the CPU for gradient checks; precision fp32)
 *   K:   [..., Tk, D]  same dtype; its batch dims (all but the last two) broadcast to Q's
 *                      numpy-style (right-aligned, size 1 or equal): grouped-query attention is
 *                      Q [B, KV, G, T, D] with K [B, KV, 1, T, D].
 *   V:   [..., Tk, Dv] same batch dims as K.
 *   M:   optional additive mask, Q's dtype, rank 2 .. Q's rank, broadcastable numpy-style to
 *        [Q's batch dims, Tq, Tk] (e.g. [B, 1, Tq, Tk] from a padding mask): s_ij gets + M_ij
 *        (in Q's dtype, after the scale, as an Add of the scores would). Causal and window
 *        still apply on top. A row whose scores are all -inf (fully masked) gives O_i = 0 and
 *        LSE_i = -inf, and no gradient: the rule of the exporter's Where(IsNaN(P), 0, P) guard
 *        (and of PyTorch's SDPA). M gets no gradient.
 *   Sk:  optional int32/int64 [R, Tk]: the segment id of each key. R is Q's batch count (one
 *        row per problem), Q's first batch dim (heads and groups broadcast: what producers
 *        emit, [B, T] for Q [B, H, T, D]) or 1. Key j is visible to query i only when
 *        Sk[r, j] == Sq[r, i] (on top of M, causal and window). Sk and Sq get no gradient.
 *   Sq:  optional (only with Sk), int32/int64 [R, Tq] with Sk's R: the segment id of each
 *        query; absent, every query has id 1. So Sk = HF's attention_mask (1 keep, 0 pad)
 *        with Sq absent is its padding rule; Sk = Sq = example id per token (0 on padding) is
 *        packed sequences; Sk = Sq = 1 on real tokens, 0 on padding is padded sequences.
 *   O:   [..., Tq, Dv] Q's batch dims, Q's dtype.
 *   LSE: [..., Tq]     float32 (Q's dtype when float64): for each query row, the natural log of
 *                      sum_j exp(s_ij - ...) written as m + log(l): log-sum-exp of the scaled,
 *                      masked scores s_ij = scale * (q_i . k_j) over unmasked j.
 *   O_i = sum_j softmax_j(s_i)_j v_j.
 * Attributes:
 *   scale      float (default 1/sqrt(D)); the scores are scale * Q K^T.
 *   causal     int 0|1 (default 0); 1 masks key j for query i when j > i (requires Tq == Tk).
 *              No row is then fully masked. (Other masks are not fused: the pass leaves them.)
 *   window     int >= 0 (default 0: none); with causal=1 only: key j is also masked for query i
 *              when i - j >= window (a sliding window of `window` keys ending at the query,
 *              Mistral's sliding_window). Row i keeps keys max(0, i - window + 1) .. i.
 *   softcap    float >= 0 (default 0: none). With c > 0 the scaled score s = scale * q.k
 *              becomes c * tanh(s / c) BEFORE M and the causal/window/segment masks apply
 *              (Gemma2's attn_logit_softcapping). Backward: dS_raw = dS * (1 - tanh^2(s / c)).
 *   seg_form   "general" (default) | "padded" | "packed": a promise about Sk/Sq that lets the
 *              GPU pick a kernel (checked by the CPU reference, which errors when it is false):
 *              padded: Sq absent or equal to Sk, each row of Sk 1..1 0..0 (right padding: a
 *              key length per row); packed: Sq absent or equal to Sk, each row of Sk positive
 *              non-decreasing ids (contiguous examples), then zeros (padding) to its end.
 *   precision  "fp32" (default) | "bf16". bf16 rounds Q, K, V to bf16 (round-to-nearest-even)
 *              before the products, sums every product in float32 (or wider), computes the
 *              softmax in float32, and rounds the probabilities to bf16 before P V, as the
 *              tensor cores do (and as the unfused ai.fp8run::MatMul{precision=bf16} pair did).
 *              The CPU reference rounds the normalized probabilities P; a flash kernel rounds
 *              exp(s - running max) instead: the two agree to bf16 rounding (tests: 1e-2
 *              relative L2). fp32 is exact float32 math (GPU within 1e-5 of the CPU).
 *
 * AttentionGrad(Q, K, V, O, LSE, dO [, M [, Sk [, Sq]]]) -> (dQ, dK, dV)
 *   Same attributes, mask and segments as the forward node. dQ, dK, dV have Q's, K's, V's shapes (dK and dV summed
 *   over the batch dims K/V broadcast over). With P_ij = exp(s_ij - LSE_i) (0 where masked),
 *   Delta_i = sum_d dO_id O_id:
 *     dV = P^T dO;  dP = dO V^T;  dS_ij = P_ij (dP_ij - Delta_i);
 *     dQ = scale * dS K;  dK = scale * dS^T Q.
 *   With softcap c > 0, dS is first multiplied by 1 - tanh^2(s_raw / c) (s_raw = scale q.k).
 *   bf16: Q, K, V, dO rounded to bf16 as operands of the products; P and dS rounded to bf16
 *   where they are GEMM operands (P in dV, dS in dQ and dK); Delta and the softmax in float32.
 *   Outputs that no gradient is needed for may be omitted (empty output names).
 *
 * The gradient rule of Attention emits one AttentionGrad node reading the forward's inputs and
 * outputs. */
#ifndef FR_OPS_ATTENTION_H
#define FR_OPS_ATTENTION_H

#include "ops/op.h"

extern const fr_op_def fr_ops_attention[];      /* Attention, AttentionGrad */
extern const fr_op_def fr_ops_attention_onnx[]; /* ONNX Attention (opset 23): inference only */
/* The subset of ONNX Attention that passes/attention_import.c lowers (inputs inferred); errors
 * name the node and the input or attribute. */
FR_NODISCARD fr_status fr_onnx_attention_check(const fr_graph *g, const fr_node *n);

/* A node's attributes, parsed and checked (shared by the CPU kernels and the CUDA launchers).
 * `head_dim` is D, used for the default scale. Errors name the node. */
enum { FR_ATTN_SEG_GENERAL = 0, FR_ATTN_SEG_PADDED = 1, FR_ATTN_SEG_PACKED = 2 };
typedef struct fr_attn_attrs {
    float scale;
    int causal;
    int64_t window; /* 0: none */
    int bf16;
    float softcap;  /* 0: none */
    int seg_form;   /* FR_ATTN_SEG_* */
} fr_attn_attrs;
FR_NODISCARD fr_status fr_attn_read_attrs(const fr_node *n, int64_t head_dim, fr_attn_attrs *a);

/* The problem's geometry from the shapes of Q and K/V (checked: ranks >= 2 and equal after
 * broadcasting, D equal, K/V batch dims broadcastable to Q's, Tq == Tk when causal).
 * Q batch index b (row-major over Q's batch dims, 0 <= b < batch) reads K/V batch index
 * kv_index(b), computed from the strides below (0 on broadcast dims). */
typedef struct fr_attn_geom {
    int64_t batch;       /* product of Q's batch dims */
    int64_t kv_batch;    /* product of K's batch dims */
    int64_t Tq, Tk, D, Dv;
    int brank;           /* number of batch dims (Q's) */
    int64_t qdims[FR_MAX_RANK];      /* Q's batch dims */
    int64_t kv_stride[FR_MAX_RANK];  /* K/V batch stride (in batch units) per Q batch dim */
} fr_attn_geom;
FR_NODISCARD fr_status fr_attn_geometry(const fr_node *n, int rq, const int64_t *dq, int rk, const int64_t *dk, int rv,
                           const int64_t *dv, int causal, fr_attn_geom *g);
/* Where the mask M of a problem lives: element (b, i, j) is at offset(b) + i * row + j * col
 * (strides 0 on broadcast dims). present = 0: no mask. */
typedef struct fr_attn_mask {
    int present;
    int64_t bstride[FR_MAX_RANK]; /* per Q batch dim */
    int64_t row, col;
} fr_attn_mask;
/* Checks M's shape (rank rm, dims dm) against the geometry; rm = 0 and dm = NULL: no mask. */
FR_NODISCARD fr_status fr_attn_mask_geometry(const fr_node *n, const fr_attn_geom *g, int rm, const int64_t *dm, fr_attn_mask *m);
int64_t fr_attn_mask_offset(const fr_attn_geom *g, const fr_attn_mask *m, int64_t b);
/* The segment inputs Sk, Sq of a problem (absent: has_k = 0). Row r of Sk/Sq serves Q batch
 * index b = r * per_row .. (r + 1) * per_row - 1. */
typedef struct fr_attn_seg {
    int has_k, has_q;
    int64_t rows;    /* Sk's (and Sq's) first dim */
    int64_t per_row; /* Q batch indices per row */
} fr_attn_seg;
/* Checks the dtypes (int32 or int64) and shapes of Sk (rk = 0, dk = NULL: absent) and Sq
 * (likewise) against the geometry; errors name the node. */
FR_NODISCARD fr_status fr_attn_seg_geometry(const fr_node *n, const fr_attn_geom *g, fr_dtype tk, int rk,
                                            const int64_t *dk, fr_dtype tq, int rq, const int64_t *dq,
                                            fr_attn_seg *s);
/* Row of Sk/Sq that Q batch index b reads. */
static inline int64_t fr_attn_seg_row(const fr_attn_seg *s, int64_t b) { return b / s->per_row; }
/* Element i of an int32 or int64 segment tensor. */
static inline int64_t fr_attn_seg_at(const void *data, fr_dtype dt, int64_t i)
{
    return dt == FR_I32 ? (int64_t)((const int32_t *)data)[i] : ((const int64_t *)data)[i];
}
/* Checks the seg_form promise of attrs a on the values of Sk and Sq (NULL: absent; rows of
 * Tk and Tq ids, `rows` of them); errors name the node and the row at fault. */
FR_NODISCARD fr_status fr_attn_seg_check_form(const fr_node *n, int seg_form, const void *sk, fr_dtype tk,
                                              const void *sq, fr_dtype tq, int64_t rows, int64_t Tk, int64_t Tq);
/* Whether a node has input i (present and not an omitted optional input). */
static inline int fr_attn_has_input(const fr_node *n, int i) { return n->n_inputs > i && n->inputs[i] >= 0; }

/* K/V batch index of Q batch index b. */
int64_t fr_attn_kv_index(const fr_attn_geom *g, int64_t b);
/* G when every Q batch index b reads K/V index b / G (one K/V per head, or grouped-query heads
 * next to each other), else 0; from the dims alone, no walk over the indices. The CUDA kernels'
 * walks then find a K/V index's queries without a search. */
int64_t fr_attn_kv_group(const fr_attn_geom *g);
/* The keys row i keeps: [*lo, *hi) (causal and window applied). */
void fr_attn_row_range(const fr_attn_attrs *a, int64_t Tk, int64_t i, int64_t *lo, int64_t *hi);

#endif
