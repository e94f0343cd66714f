/* The weight gradient's X operand, on the differentiated graph: what an fp8 Linear saves for its
 * LinearGradWeight when the backward keeps X anyway, or can remake it for almost nothing.
 *
 * An fp8 Linear saves Xq, X's E4M3 codes transposed, so that the float X may die after the
 * forward. Where the backward holds X past the weight gradient anyway (the O projection's input
 * is the attention output, which the attention's backward reads after it), Xq is a second copy:
 * at 1B, B8 x T2048, 32 MiB a layer held from the forward to the backward. Then
 *
 *   - kept X: LinearGradWeight reads X itself (with the forward's scale_x in the delayed recipe)
 *     and quantizes it as the forward did: the same scale and values give the same codes, so dW
 *     is the same bit for bit; the Linear writes no Xq.
 *   - remade X (`remake` on): X's producer is a pure elementwise op of the fused MLP (SwiGLU,
 *     Gelu) whose inputs the backward holds past the weight gradient anyway (SwiGLUGrad reads
 *     the gate/up output, Gelu's gradient its input): a copy of that producer, placed right
 *     before the LinearGradWeight, remakes X bit for bit, which the weight gradient quantizes.
 *     X's copy lives from there to the weight gradient only; Xq (88 MiB a layer at 1B) is not
 *     held. It costs one elementwise pass over the gate/up output in the backward.
 *     A one-input SwiGLU under a per-tensor recipe needs no copy at all: the weight gradient
 *     reads the gate/up output itself (attribute x_glu, ops/linear.h) and remakes X in the pass
 *     that quantizes it, one read of gate/up and no X written.
 *
 * Liveness is judged on the node order (the executors' order) and on view roots (a Reshape
 * aliases its input), so the pass never extends what a value's last reader already keeps.
 * Only fp8 weight gradients that read their Linear's Xq change; bf16 reads X's bf16 copy
 * already. */
#ifndef FR_WGRAD_OPERAND_H
#define FR_WGRAD_OPERAND_H

#include "graph/ir.h"

typedef struct fr_wgrad_operand_stats {
    int kept;   /* weight gradients reading the X the backward keeps */
    int remade; /* weight gradients reading a remade X */
    int fused;  /* of those, remade inside their own quantization (no copy of X) */
} fr_wgrad_operand_stats;

/* Rewrite g (forward and backward, in executable order); `remake` allows the producer copies. */
FR_NODISCARD fr_status fr_wgrad_operands(fr_graph *g, int remake, fr_wgrad_operand_stats *stats);

#endif
