/* The attention mask an exporter computes from the model's inputs, read symbolically.
 *
 * A dynamic-shape export (and every export with an `attention_mask` input) builds its mask at
 * run time: transformers' sdpa_mask as torch.onnx (dynamo) writes it is
 *     q = Range(0, T) (via Unsqueeze), k = the same on the last axis,
 *     causal = LessOrEqual(k, q), window = Greater(k, q - W) (Mistral, Gemma2's sliding layers),
 *     pad = GatherND(Cast(attention_mask, bool), Concat(batch index, k index)),
 *     mask = And(And(True, causal), pad) ->  Where(mask, 0, lowest float32)  added to the scores
 * (opset 23: the bool mask goes to Attention's attn_mask). Folding it is no option at real sizes
 * ([B, 1, T, T] per step, and attention_mask is an input), so each value of the chain is
 * described instead as a function of its coordinates: integer positions are affine forms of
 * the coordinates (Range, Unsqueeze, Expand, Reshape of unit dims, Add, Sub, Mul by a constant,
 * Cast, integer-valued constant ramps), booleans a conjunction of atoms "affine form <= 0" and
 * "input[b, k] != 0" (comparisons, And, Not of one comparison, GatherND of the input at a
 * (batch, key) index tuple, constant causal / window masks), the additive mask Where(atoms, 0,
 * <= -1e30). No tensor is built, whatever B and T.
 *
 * The conjunction then classifies, against the scores [B, .., Tq, Tk]: "k <= q" is causal,
 * "q - k < W" a sliding window of W keys (with causal), atoms true at every position drop, and
 * input[b, k] with b the scores' batch coordinate and k the key's is key padding: the fused op's
 * segment input Sk = that input (ops/attention.h: key k visible iff Sk[b, k] == 1 with Sq absent,
 * HF's 0/1 attention_mask exactly). An input flagged FR_VAL_ONES (the trainer feeds it all ones)
 * keeps every key: no Sk at all. Anything else (other atoms, a trained value in the chain, ops
 * outside the list) is no match, with the reason. */
#ifndef FR_ATTENTION_MASK_H
#define FR_ATTENTION_MASK_H

#include "graph/ir.h"

typedef struct fr_attn_mask_info {
    int kind;       /* FR_ATTN_MASK_BAD / _NONE / _CAUSAL (passes/attention_fuse.h) */
    int64_t window; /* with _CAUSAL: 0, or W: keys q - W < k <= q */
    int seg;        /* the input read as key padding (the fused op's Sk), or -1 */
    int ones;       /* the input marked all ones whose key padding was dropped, or -1 */
    char why[192];  /* _BAD: why it is no causal / window / padding mask */
} fr_attn_mask_info;

/* Mask value x as scores s ([.., Tq, Tk], its first dim the batch) see it, broadcast from the
 * right: boolean (true keeps; Where's condition, Attention-23's bool attn_mask) or additive (0
 * keeps, <= -1e30 drops). Returns info->kind. */
int fr_attn_mask_symbolic(const fr_graph *g, int x, int boolean, const fr_value *s, fr_attn_mask_info *info);

/* "causal, window 6, key padding 'attention_mask' -> Sk" for a fused attention's mask: into buf. */
void fr_attn_mask_describe(const fr_attn_mask_info *m, const fr_graph *g, char *buf, size_t n);

/* The fused node `name` (ai.fp8run::Attention) records how its run-time mask was taken, as its
 * doc string FR_ATTN_MASK_NOTE + fr_attn_mask_describe's text (the report pass and `fp8run info`
 * read it). */
#define FR_ATTN_MASK_NOTE "mask: "
FR_NODISCARD fr_status fr_attn_mask_note(fr_graph *g, const char *name, const fr_attn_mask_info *m);

/* Every fused attention of g (Attention, AttentionQKV) by how it masks, grouped, into detail:
 * "2 attentions: 2 causal, key padding 'attention_mask' -> Sk"; *dense receives the number left
 * with a dense additive mask (the slow kernels). */
FR_NODISCARD fr_status fr_attn_mask_report(const fr_graph *g, int *dense, char *detail, size_t size);

#endif
