/* RMSNorm fusion: RMSNorm written out by an exporter becomes one RMSNormalization node
 * (ops/norm.c: statistics in double, one fused RMSNormGrad for the backward) in the ai.fp8run
 * domain, so a graph of any opset carries it (ONNX's own RMSNormalization needs opset 23).
 *
 * Recognized, x float32 of rank >= 1, y of x's shape:
 *     ms = ReduceMean(Pow(x, 2))              over the last axis only, keepdims=1
 *                                             (Mul(x, x) for the Pow is accepted too)
 *     s  = Sqrt(Add(ms, eps))                 eps a one-element constant >= 0
 *     n  = Mul(x, Reciprocal(s))              torch.rsqrt as today's dynamo exporter writes it
 *        | Mul(x, Div(1, s)) | Div(x, s)      the same by division
 *        | Mul(x, Pow(Add(ms, eps), -0.5))    the Rsqrt form as a power
 *     y  = Mul(n, w)                          w float32, broadcasting to x without enlarging it
 *                                             (Gemma's 1 + w: Add(1, w) or its folded constant)
 * either operand order of every Mul and Add; the exponent, eps and -0.5 constants that are not
 * trained; every intermediate read only by the next step and no graph output. y keeps its
 * value id, so the rest of the graph is unchanged. */
#ifndef FR_RMSNORM_FUSE_H
#define FR_RMSNORM_FUSE_H

#include "graph/ir.h"

/* *count receives the number of RMSNormalization nodes made. */
FR_NODISCARD fr_status fr_fuse_rmsnorm(fr_graph *g, int *count);

#endif
