/* Residual + norm fusion: the residual stream's Add and the norm reading its sum become one
 * ai.fp8run::AddRMSNorm (ops/add_norm.c) or AddLayerNorm (ops/add_layer_norm.c) node with
 * outputs H (the sum, still read as the residual by the rest of the graph) and Y; its backward,
 * one AddRMSNormGrad / AddLayerNormGrad, takes H's gradient from its other readers as an
 * input, so the backward's Add of the two gradients of H goes too.
 *
 * Recognized, on the prepared graph (static shapes):
 *     h = Add(a, b)                      float32, a, b and h of one shape (no broadcast); for
 *                                        LayerNorm one addend may repeat over h's leading dims
 *                                        (a position embedding [1, T, D] + tokens [N, T, D])
 *     y = RMSNormalization(h, w)         ONNX opset 23 or ai.fp8run's, or
 *     y = LayerNormalization(h, w[, c])  one output (no Mean / InvStdDev); w (and c, of w's
 *                                        shape) float32 of exactly h's normalized dims (leading
 *                                        1s allowed)
 * For LayerNorm the norm may read v = Reshape(h) instead, when only that Reshape reads h (OPT
 * flattens the residual stream to [N T, D] before each norm): a and b are reshaped as h was
 * (Reshapes are views) and v becomes the fused node's H.
 * h may have any other readers and be a graph output; h and y keep their value ids, so the rest
 * of the graph is unchanged. A parallel attention + MLP block (GPT-NeoX, Falcon) reads its sum
 * with two LayerNorms: AddLayerNorm takes the second too (same axis and epsilon; its Y2), as the
 * statistics are the same. */
#ifndef FR_RESIDUAL_NORM_FUSE_H
#define FR_RESIDUAL_NORM_FUSE_H

#include <stddef.h>

#include "graph/ir.h"

/* *count receives the number of AddRMSNorm and AddLayerNorm nodes made. */
FR_NODISCARD fr_status fr_fuse_residual_norm(fr_graph *g, int *count);
/* 1 when norm node `node` and the Add before it would fuse; else 0 with the reason in why[n]
 * (for passes/fast_path.c). */
int fr_residual_norm_why(const fr_graph *g, int node, char *why, size_t n);

#endif
