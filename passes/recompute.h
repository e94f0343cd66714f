/* Activation recomputation (--recompute none|attention|mlp|full), a pass on the differentiated
 * graph (after passes/autodiff.c appended the backward).
 *
 * Regions come from the graph's structure: a residual Add is an Add(r, b) whose input r is an
 * ancestor of its other input b; its branch is every forward node on a path from r to b. A
 * branch holding an ai.fp8run::Attention (or a Softmax: unfused attention) is an attention
 * region (RMSNorm, QKV Linear, Rotary, Attention, output Linear), any other branch holding a
 * Linear or MatMul an MLP region (RMSNorm, gate/up Linear, SwiGLU, down Linear). `full` joins an
 * attention branch, its residual Add and the MLP branch that reads that Add (directly, or through
 * single-input nodes such as a post-LN block's LayerNorm): the whole block but its last Add
 * (whose output, the next block's input, stays the checkpoint).
 *
 * For each chosen region, the backward's reads of values computed inside it are redirected to a
 * copy of the region's forward nodes (those needed for the values read), placed right before
 * the first backward node reading one of them, so the executors' liveness plans free the
 * originals after their last forward use. A region's sinks (nodes whose outputs no other region
 * node reads: the output projection) are not copied: what the backward reads of their outputs
 * (e.g. the Linear's saved Xq) stays as computed.
 *
 * Bit-identity: a copy is the same op with the same attributes reading the same inputs (the
 * parameters, the region's input, the delayed recipe's scale states), so it computes the same
 * bits: the current/block recipes' scales come from the same amaxes of the same tensors. Copied
 * Linears get no amax_x/amax_w outputs, so the delayed-scaling history and the reported
 * statistics see each amax once. Dropout's mask (ai.fp8run::KeyedDropout) is a hash of its key
 * input and its attributes, so a copy replays the forward's mask; a node whose op is not pure
 * would have to be refused here once one exists. */
#ifndef FR_RECOMPUTE_H
#define FR_RECOMPUTE_H

#include "graph/ir.h"

typedef enum fr_recompute_mode {
    FR_RECOMPUTE_NONE = 0,
    FR_RECOMPUTE_ATTENTION = 1,
    FR_RECOMPUTE_MLP = 2,
    FR_RECOMPUTE_FULL = 3
} fr_recompute_mode;

/* "none" | "attention" | "mlp" | "full"; another string is FR_ERR_INVALID_ARG naming it. */
FR_NODISCARD fr_status fr_recompute_parse(const char *s, fr_recompute_mode *out);

typedef struct fr_recompute_stats {
    int regions;      /* regions of the chosen kind found */
    int nodes;        /* forward nodes copied */
    int reads;        /* backward input slots redirected to a copy */
} fr_recompute_stats;

/* Rewrite g (its nodes [0, n_forward) the forward, the rest the backward, in executable order).
 * Nodes are reordered (producers rebuilt); value ids stay. */
FR_NODISCARD fr_status fr_recompute(fr_graph *g, int n_forward, fr_recompute_mode mode, fr_recompute_stats *stats);

#endif
