/* Attention I/O fusion: the layout ops around each fused attention become part of it.
 *
 * After the FP8 compiler fused the Q/K/V Linears, an attention block reads
 *     Split(X) -> q, k, v  (X [B, T, W], the fused projection's output, split on its last axis)
 *     q, k, v -> Reshape / Transpose chains (and ai.fp8run::Rotary on q and k) -> Attention
 *     Attention's O -> Reshape / Transpose chain -> Z [B, T, Hq * Dv] or [B T, Hq * Dv] (what the O
 *                                                   projection reads)
 * and becomes one ai.fp8run::AttentionQKV(X [, cos, sin]) -> (Z, LSE) (ops/attention_qkv.h).
 *
 * Matched, whatever the order of the Reshapes and Transposes: the chains' net effect is checked
 * element by element as strided views of X (and of Z): Attention's Q must be X's first Split
 * output laid out [B, heads.., T, D] with the heads in row-major order (head h at columns h D of
 * the section), K and V the second and third likewise; query head h must read K/V head
 * h / (Hq / Hk); Rotary (same tables and interleaving on q and k, none on v) anywhere in the q
 * and k chains where its tables follow the token (and the batch, or not) but not the head;
 * an RMSNormalization over the last axis before it on q and k alike (per head: rows of D; or
 * full width: [B, T, heads D]), its weight and epsilon becoming AttentionQKV's q/k norm;
 * every intermediate value read only by the next node of its chain (not a graph output); no
 * mask input; Attention's LSE unread. The Attention node's attributes carry over. Other graphs
 * are left as they are. */
#ifndef FR_ATTENTION_IO_H
#define FR_ATTENTION_IO_H

#include "graph/ir.h"

/* *count receives the number of AttentionQKV nodes made. */
FR_NODISCARD fr_status fr_fuse_attention_io(fr_graph *g, int *count);

/* Whether the layout of ai.fp8run::Attention node `node` of g is one the pass fuses (1), else 0
 * with the first reason it is not in why[0..n) ("it reads an additive mask tensor ..."). Other
 * readers of the values on the way (a backward's) are not held against it. g is not changed. */
int fr_attention_io_why(const fr_graph *g, int node, char *why, size_t n);

#endif
