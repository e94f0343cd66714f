/* Fused attention on the packed QKV projection (domain ai.fp8run): the contract shared by the
 * CPU reference (ops/attention_qkv.c), the pass that emits it (passes/attention_io.c) and the
 * CUDA kernels (ops/cuda/attention_qkv.cu).
 *
 * Why: with the Q/K/V Linears fused, a Llama layer reads its attention inputs through a Split,
 * three Reshape + Transpose pairs to [B, heads, T, D] and two Rotary nodes, and writes its
 * output through a Transpose + Reshape back to [B, T, H * D]; the backward does the same in
 * reverse (RotaryGrad, Transposes, a Concat). Each is a float32 pass over an activation; on a
 * 1B step they cost more than the attention forward. This op reads the fused projection's
 * output where it lies, applies RoPE while it makes the operands the attention kernels read,
 * and writes O in the layout the output projection reads; its backward writes the gradient of
 * the packed projection output directly.
 *
 * AttentionQKV(X [, cos, sin [, Sk [, Sq [, q_norm, k_norm]]]]) -> (O, LSE)   (optional inputs: an empty
 *   name is absent)
 *   X:    [B, T, W] float32, or bfloat16 (a narrowed projection, passes/narrow_activations.h:
 *         widened exactly, the op is then the float32 op on those values; O, LSE, dX and
 *         the tables float32), or float64 on the CPU (gradient checks). Its columns, by
 *         attribute packing:
 *         "sections" (default; Llama's fused Q/K/V Linear and its Split, Phi-3's qkv_proj and
 *           its Slices): W = Hq * D + Hk * D + Hk * Dv: columns [0, Hq D) are Q (head h at
 *           h D), then K (Hk heads of D), then V (Hk heads of Dv);
 *         "heads" (GPT-NeoX / Pythia's query_key_value viewed [B, T, H, 3 D] and split per
 *           head): Hq = Hk = H, W = H * (2 D + Dv), head h's q, k and v at h (2 D + Dv) + 0,
 *           + D and + 2 D.
 *         A section's head h starts at q_off + h q_hs (and k_off, k_hs; v_off, v_hs) in the
 *         geometry below; nothing else differs between the two.
 *   cos, sin (both or neither): [.., T, R], X's computing dtype, their leading dims'
 *         product L 1 or B: element (b, t, j) at (L == B ? b T R : 0) + t R + j, R the
 *         attribute rotary_dim (default D; even, 2 <= R <= D). RoPE (ops/rotary.h,
 *         attributes interleaved and rotary_dim as there) rotates the first R features of
 *         each head of Q and K at token t with row t of the tables (the other D - R pass
 *         through: the partial rotary of GPT-NeoX and Phi), exactly as ai.fp8run::Rotary
 *         would on the heads.
 *   Sk, Sq: the segment ids of ops/attention.h (int32/int64 [B, T] or [B * Hq, T] or [1, T]),
 *         handed to the inner Attention as they are.
 *   O:    [B, T, Hq * Dv] X's computing dtype (fr_attn_qkv_dtype), or bfloat16 with attribute
 *         o_dtype "bfloat16" (default "float32": the computing dtype; bfloat16 needs a float32
 *         computation): the float32 O rounded to nearest even, LSE unchanged. O[b, t, h Dv + d] =
 *         Attention's O for query head h ([B T, Hq * Dv] with attribute flat_output=1, the
 *         rows the output projection reads when it is a 2-D Gemm).
 *   LSE:  [B, Hq, T] (float32; float64 for float64 X).
 *   Query head h reads K/V head h / (Hq / Hk) (Hq a multiple of Hk: MHA, GQA, MQA).
 * Attributes: heads (Hq), kv_heads (Hk), head_dim (D), packing, rotary_dim, interleaved (0|1), flat_output (0|1),
 *   o_dtype (AttentionQKV), dx_dtype (AttentionQKVGrad; each op ignores the other's), and
 *   Attention's
 *   scale, causal, window, precision, softcap, seg_form with the meaning of ops/attention.h. The result is, bit
 *   for bit on the CPU, Attention(Q', K', V) with Q' = Rotary(Q), K' = Rotary(K) the heads laid
 *   out [B, Hk, Hq / Hk, T, D] and [B, Hk, 1, T, D], O transposed back.
 *
 * q/k RMSNorm (Qwen3, Gemma3: per head; OLMo2: full width), inputs q_norm and k_norm after the
 *   segment ids of ops/attention.h (input 5 and 6 of AttentionQKV, both or neither; an absent
 *   input in between has an empty name): weights in the computing dtype, [D] (each head's D
 *   features normalized alone) or [heads * D] (each token's Q, or K, columns together).
 *   Applied to the Q and K columns before RoPE, exactly as RMSNormalization (ops/norm.h, the
 *   last axis) with attribute qk_norm_eps (default 1e-6) as its epsilon would on them. Packing
 *   "sections" and a whole rotary only (no architecture pairs the norm with the others).
 *
 * AttentionQKVGrad(X, O, LSE, dO [, cos, sin [, Sk [, Sq [, q_norm, k_norm]]]]) -> dX [, dq_norm,
 *   dk_norm] (the norm weights at inputs 8 and 9; their gradients, the sums over tokens and
 *   heads of RMSNormGrad's dScale, as outputs 1 and 2). dX's Q and K columns are
 *   RotaryGrad of AttentionGrad's dQ and dK, its V columns dV (same attributes). Q' and K' are
 *   recomputed from X (the forward keeps no rotated copy). O and dO have O's shape, and the
 *   computing dtype or (float32 computation) bfloat16, each independently: widened exactly, the
 *   result is the one for the float32 tensor of the same values. dX: the computing dtype, or
 *   bfloat16 with attribute dx_dtype "bfloat16" (the float32 dX rounded to nearest even). */
#ifndef FR_OPS_ATTENTION_QKV_H
#define FR_OPS_ATTENTION_QKV_H

#include "ops/op.h"

extern const fr_op_def fr_ops_attention_qkv[]; /* AttentionQKV, AttentionQKVGrad */

typedef struct fr_attn_qkv_geom {
    int64_t B, T, W, Hq, Hk, D, Dv;
    int64_t q_off, k_off, v_off; /* first column of each section */
    int64_t q_hs, k_hs, v_hs;    /* columns from one head of a section to the next */
    int heads_packing;           /* packing "heads" (else "sections") */
    int rotary, interleaved;
    int64_t rd;                  /* features of a Q or K head rotated (rotary_dim): D when whole */
    int flat_output;             /* O is [B T, Hq Dv] */
    int64_t cos_b, sin_b;        /* table strides per batch index (0: one table for all) */
    int qk_norm;                 /* q/k RMSNorm before RoPE (fr_attn_qkv_norm_geometry) */
    int64_t qn_len, kn_len;      /* the normalized row of Q and of K: D, or heads * D */
    float qk_norm_eps;
    /* the table row of token t is at t * rd */
} fr_attn_qkv_geom;

/* Checks a node's attributes and the shapes of X and the tables (rc = 0, dc = NULL: no tables)
 * and fills *geo; errors name the node. */
FR_NODISCARD fr_status fr_attn_qkv_geometry(const fr_node *n, int rx, const int64_t *dx, int rc, const int64_t *dc,
                                            int rs, const int64_t *ds, fr_attn_qkv_geom *geo);
/* Where the q/k norm weights are: inputs of AttentionQKV and of AttentionQKVGrad. */
#define FR_ATTN_QKV_QNORM 5
#define FR_ATTN_QKV_GRAD_QNORM 8

/* The q/k norm weights' shapes (both NULL: no norm) and attribute qk_norm_eps, into geo (its
 * heads and head dim already read by fr_attn_qkv_geometry); errors name the node. */
FR_NODISCARD fr_status fr_attn_qkv_norm_geometry(const fr_node *n, int rq, const int64_t *dq, int rk,
                                                 const int64_t *dk, fr_attn_qkv_geom *geo);
/* CPU (ops/attention_qkv_norm.c), dt float32 or float64: xn = X with its Q and K columns
 * normalized; and the backward, in place on dX (holding the gradient for xn's values on entry),
 * with the weights' gradients into dwq, dwk (NULL: not wanted). */
void fr_attn_qkv_norm_cpu(const fr_attn_qkv_geom *g, fr_dtype dt, const void *x, const void *wq, const void *wk,
                          void *xn);
FR_NODISCARD fr_status fr_attn_qkv_norm_grad_cpu(const fr_node *n, const fr_attn_qkv_geom *g, fr_dtype dt,
                                                 const void *x, const void *wq, const void *wk, void *dx, void *dwq,
                                                 void *dwk);

/* The dtype the op computes in and writes (O, LSE, dX; the tables'): float32 for bfloat16 X,
 * else X's. */
fr_dtype fr_attn_qkv_dtype(fr_dtype x);
/* The dtype of O (attr "o_dtype") or dX ("dx_dtype") for computing dtype dt: dt, or bfloat16
 * (float32 dt only); errors name the node. */
FR_NODISCARD fr_status fr_attn_qkv_out_dtype(const fr_node *n, const char *attr, fr_dtype dt, fr_dtype *out);
/* Whether AttentionQKVGrad takes O or dO of dtype v when computing in dt. */
int fr_attn_qkv_in_ok(fr_dtype dt, fr_dtype v);
/* The shapes the inner attention sees: which 0 = Q [B, Hk, G, T, D], 1 = K [B, Hk, 1, T, D],
 * 2 = V [B, Hk, 1, T, Dv], 3 = O [B, Hk, G, T, Dv], 4 = LSE [B, Hk, G, T]; returns the rank. */
int fr_attn_qkv_inner_dims(const fr_attn_qkv_geom *geo, int which, int64_t *dims);
/* O's shape (and dO's): returns the rank. */
int fr_attn_qkv_out_dims(const fr_attn_qkv_geom *geo, int64_t *dims);

#endif
