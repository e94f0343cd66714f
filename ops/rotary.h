/* Fused rotary position embedding (domain ai.fp8run): the contract shared by the CPU reference
 * (ops/rotary.c), the fusion pass that emits it (passes/rotary_fuse.c) and the CUDA kernels
 * (ops/cuda/rotary.cu).
 *
 * Why: RoPE written out, x * cos + rotate_half(x) * sin with rotate_half(x) =
 * Concat(Neg(x[..., h:]), x[..., :h]) (h = hd / 2), runs two Slices, a Neg, a Concat, two Muls
 * and an Add per q and per k of every layer, and its backward as many again (SliceGrad, Neg,
 * Mul, Add), each over a [B, heads, T, hd] float32 tensor. The fused op reads x once and
 * writes y once, and its backward is one pass too.
 *
 * Rotary(X, cos, sin) -> Y
 *   X [..., hd], hd even; cos and sin broadcast to X's shape (numpy rules, they never enlarge
 *   it: typically [T, hd] or [1, 1, T, hd] tables); one dtype, float32 (float64 for gradient
 *   checks). With h = hd / 2, for j < h:
 *       Y[j]     = X[j] * cos[j]         - X[j + h] * sin[j]
 *       Y[j + h] = X[j + h] * cos[j + h] + X[j] * sin[j + h]
 *
 * Attribute rotary_dim R (default hd: all of it): the partial rotary of GPT-NeoX / Pythia, Phi
 *   and StableLM. Only the first R columns (R even, 2 <= R <= hd) are rotated, as the formulas
 *   below say with hd read as R (h = R / 2, the tables' last dim R, or 1); columns R.. hd - 1
 *   pass through (Y[j] = X[j], and dX[j] = dY[j] in RotaryGrad). Exactly what HF's
 *   Concat(Rotary(x[..., :R]), x[..., R:]) computes (passes/rotary_fuse.c folds that into it).
 *   RotaryGrad carries it too.
 *
 * Attribute interleaved (default 0): 1 pairs columns (2p, 2p + 1) instead of (p, p + h), the
 *   GPT-J layout: the formulas below with j = 2p and j + h read as 2p + 1 (cos and sin indexed
 *   by the column as always, so a table for it repeats each frequency twice: [c0, c0, c1, ..]).
 *   RotaryGrad carries it too.
 *
 * RotaryGrad(dY, cos, sin) -> dX = dY * cos + rotate_half^T(dY * sin), rotate_half^T(z) =
 *   Concat(z[..., h:], -z[..., :h]):
 *       dX[j]     = dY[j] * cos[j]         + dY[j + h] * sin[j + h]
 *       dX[j + h] = dY[j + h] * cos[j + h] - dY[j] * sin[j]
 *
 * No gradient flows to cos and sin: the gradient rule of Rotary emits one RotaryGrad for X and
 * is an error naming the node when the autodiff asks for d/dcos or d/dsin (the fusion pass only
 * fuses tables that need no gradient).
 * CPU: every element computed in double and rounded once (within an ulp of the unfused float32
 * chain, which rounds after each op). CUDA: float32 math, within 1e-5 relative. */
#ifndef FR_OPS_ROTARY_H
#define FR_OPS_ROTARY_H

#include "ops/op.h"

extern const fr_op_def fr_ops_rotary[]; /* Rotary, RotaryGrad */

/* The problem as rows of hd elements, the first rd of them rotated (rotary_dim; rd == hd when
 * the rotary is whole). Row r of X (at r * hd) has index (i_0, .., i_{nd-1}) over
 * the collapsed row dims (outermost first); its cos row starts at sum_k i_k * cos_stride[k] and
 * element j of it is at that + j * cos_last (cos_last 0 when cos is broadcast along the last
 * axis); the same for sin. Adjacent row dims that both tables walk contiguously (or both
 * broadcast) are merged, so a [B, H, T, hd] X with a [T, hd] table has nd = 2. */
typedef struct fr_rotary_geom {
    int64_t rows, hd, rd;
    int nd;
    int64_t dims[FR_MAX_RANK];
    int64_t cos_stride[FR_MAX_RANK], sin_stride[FR_MAX_RANK];
    int64_t cos_last, sin_last;
    int interleaved; /* pairs (2p, 2p + 1) rather than (p, p + hd / 2) */
} fr_rotary_geom;

/* Checks dtypes and shapes of a Rotary / RotaryGrad node's inputs (X or dY, cos, sin) and
 * fills *geo; errors name the node. */
FR_NODISCARD fr_status fr_rotary_geometry(const fr_graph *g, const fr_node *n, fr_rotary_geom *geo);

#endif
