/* ONNX opset 23's RotaryEmbedding, lowered onto ai.fp8run::Rotary (ops/rotary.h), so it runs,
 * differentiates and runs on CUDA exactly as the fused RoPE of older opsets does.
 *
 * RotaryEmbedding(X, cos_cache, sin_cache[, position_ids]), attributes interleaved (0|1),
 * rotary_embedding_dim (0 = the whole head), num_heads. X is [B, N, S, H] (4D) or [B, S, N*H]
 * (3D, num_heads required); the caches are [B, S, R/2], or [P, R/2] indexed by position_ids
 * [B, S]. It becomes, with c = Concat(cos, cos) (R wide) and s likewise, unsqueezed over the
 * head axis so they broadcast to X's layout:
 *     x4 = X (4D) | Reshape(X, [0, 0, num_heads, -1]) (3D)
 *     xr = x4[..., :R], xp = x4[..., R:]            (only when R is a part of the head)
 *     y  = Concat(Rotary(xr, c, s), xp)              (reshaped back to 3D)
 * and when interleaved, Rotary's interleaved=1 with c = [c0, c0, c1, c1, ..] (Unsqueeze,
 * Concat and Reshape of the small table).
 * cos/sin gathered by position_ids first when given. No gradient flows to the caches (as for
 * the fused RoPE). Bad attributes or shapes are FR_ERR_UNSUPPORTED naming the node and the
 * attribute. Runs before ops are resolved (fr_prepare_forward), so it needs X's rank from the
 * model's shapes. */
#ifndef FR_ROTARY_EMBEDDING_H
#define FR_ROTARY_EMBEDDING_H

#include "graph/ir.h"

/* *count (may be NULL) receives the number of RotaryEmbedding nodes lowered. */
FR_NODISCARD fr_status fr_lower_rotary_embedding(fr_graph *g, int *count);

#endif
