/* Parallel attention + MLP blocks (Phi, GPT-J style): Q, K, V and the MLP's input projection
 * all read one LayerNorm's output, so the FP8 compiler fuses the four into one Linear and one
 * Split [q | k | v | fc1]. The attention staging (fuse_attention_io) reads a Split into Q, K and
 * V alone. This pass splits such a Split in two steps, Split [qkv | fc1] then Split(qkv) into
 * q, k, v, when three consecutive outputs reach the Q, K and V inputs of one fused Attention
 * through layout, Rotary and RMSNormalization nodes only: the same bytes, one GEMM still, and
 * the staging then reads the qkv part as a sequential block's projection. */
#ifndef FR_QKV_SPLIT_REGROUP_H
#define FR_QKV_SPLIT_REGROUP_H

#include "graph/ir.h"

/* *count receives the number of Splits regrouped. */
FR_NODISCARD fr_status fr_regroup_qkv_splits(fr_graph *g, int *count);

#endif
