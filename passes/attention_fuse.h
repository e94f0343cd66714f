/* Attention fusion: the unfused scaled-dot-product attention of exported models becomes one
 * ai.fp8run::Attention node (ops/attention.h), so neither pass keeps [B, H, T, T] tensors.
 *
 * Runs after fr_prepare_forward (static shapes, constants folded) and before the FP8
 * compiler. Recognized, float32 throughout:
 *     S = MatMul(Q, KT)                      KT [.., D, Tk]; Q [.., Tq, D] with the scores' batch dims;
 *                                            each operand optionally * c or / c (the dynamo
 *                                            exporter splits sqrt(scale) over q and k^T)
 *     S = S * c  or  S / c                   optional, c a constant scalar (the scale multiplies up)
 *     S = S + M                              optional, M a constant [.., Tq, Tk] that is 0 where kept
 *       or Where(C, S, m)                    and -inf / <= -1e30 where dropped: no mask, causal, or
 *                                            causal with a sliding window (window attribute); C a
 *                                            constant bool mask of the same kinds, m <= -1e30;
 *                                            or M computed at run time (broadcastable to S: the
 *                                            dynamic exports' padding mask), fused as the op's
 *                                            mask input only with the guard below
 *     P = Softmax(S) over the last axis      (opset >= 13, or legacy with the last axis)
 *     P = Where(IsNaN(P), 0, P)              optional, the exporter's guard (fully masked rows)
 *     O = MatMul(P, V)                       V [.., Tk, Dv], its batch dims K's
 * with no-op Casts (float32 to float32) allowed between the steps. Every intermediate must be
 * read only by the next step (not a graph output). K comes from KT through the exporter's
 * Reshape/Transpose{0,2,1}/Reshape chain (GQA: K/V = Reshape(Expand([B, KV, 1, T, d])): the op
 * reads the Expands' inputs, Q split to [B, KV, G, Tq, D]), a Transpose of KT (composed; none
 * when it only swapped the last two dims), or a new Transpose. O keeps its value, so the rest
 * of the graph is unchanged; the nodes replaced are removed. The Attention nodes get precision
 * "fp32" (the FP8 compiler sets "bf16" for bf16/fp8 training). */
#ifndef FR_ATTENTION_FUSE_H
#define FR_ATTENTION_FUSE_H

#include "graph/ir.h"

/* *count receives the number of attention blocks fused. */
FR_NODISCARD fr_status fr_fuse_attention(fr_graph *g, int *count);

#endif
