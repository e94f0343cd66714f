/* Rotary embedding fusion: RoPE written out as exporters and fp8run generate write it,
 *     Y = Add(Mul(x, cos), Mul(Concat(Neg(x2), x1), sin))       (rotate_half)
 * becomes one ai.fp8run::Rotary(x, cos, sin) node (ops/rotary.h), forward and backward one
 * pass each instead of seven and as many backward nodes.
 *
 * Runs after fr_prepare_forward (static shapes, constants folded), next to the attention
 * fusion. Recognized, float32: any operand order of the Add and of both Muls; x1, x2 the two
 * halves of x's last axis (hd even), either two Slices of x (constant starts/ends/axes, steps 1
 * or absent; x1 = [0, hd/2), x2 = [hd/2, hd)) or the two outputs of a Split of x on the last
 * axis into equal halves; Concat on the last axis; cos, sin broadcasting to x's shape without
 * enlarging it, and needing no gradient (no trainable parameter, FR_VAL_PARAM, upstream: a
 * constant table, or one computed from constants and inputs); the two Muls, the Concat, the
 * Neg and the halves read only inside the pattern (not graph outputs). Y keeps its value, so
 * the rest of the graph is unchanged; the replaced nodes are removed.
 * The interleaved (GPT-J, rotate_every_two) form too, as torch.stack and flatten export it:
 *     rot = Reshape(Concat(Unsqueeze(Neg(x2), -1), Unsqueeze(x1, -1), axis -1)) to x's shape,
 *     x1 = Slice(x, 0::2), x2 = Slice(x, 1::2) on the last axis
 * becomes Rotary with interleaved=1 (its tables repeat each frequency twice, as the model's).
 * Then the partial rotary (GPT-NeoX / Pythia, Phi, StableLM rotate the first R features of a
 * head only), once its rotated part is a Rotary:
 *     Y = Concat(Rotary(Slice(x, 0:R)), Slice(x, R:hd)) on the last axis
 * (constant Slices of the last axis only, step 1, each read once; the Rotary whole on its
 * input) becomes one Rotary(x, cos, sin) with attribute rotary_dim = R, the tables unchanged. */
#ifndef FR_ROTARY_FUSE_H
#define FR_ROTARY_FUSE_H

#include "graph/ir.h"

/* *count receives the number of RoPEs fused: Rotary nodes made, and partial rotaries around a
 * Rotary the import made (a partial rotary around one made here counts once). */
FR_NODISCARD fr_status fr_fuse_rotary(fr_graph *g, int *count);

#endif
