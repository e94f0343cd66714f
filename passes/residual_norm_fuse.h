/* Residual + RMSNorm fusion: the residual stream's Add and the RMSNorm reading its sum become one
 * ai.fp8run::AddRMSNorm node (ops/add_norm.c) with outputs H (the sum, still read as the
 * residual by the rest of the graph) and Y; its backward, one AddRMSNormGrad, takes H's gradient
 * from its other readers as an input, so the backward's Add of the two gradients of H goes too.
 *
 * Recognized, on the prepared graph (static shapes):
 *     h = Add(a, b)                      float32, a, b and h of one shape (no broadcast)
 *     y = RMSNormalization(h, w)         ONNX opset 23 or ai.fp8run's, one output, w float32
 *                                        of exactly h's normalized dims (leading 1s allowed)
 * h may have any other readers and be a graph output; h and y keep their value ids, so the rest
 * of the graph is unchanged. */
#ifndef FR_RESIDUAL_NORM_FUSE_H
#define FR_RESIDUAL_NORM_FUSE_H

#include "graph/ir.h"

/* *count receives the number of AddRMSNorm nodes made. */
FR_NODISCARD fr_status fr_fuse_residual_norm(fr_graph *g, int *count);

#endif
