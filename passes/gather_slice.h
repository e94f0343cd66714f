/* One-index gathers as Slices: GatherND(x, [[i]]) (batch_dims 0) and Gather(x, [i], axis a),
 * the index a constant, become Slice(x, i, i + 1) on that axis: the same elements in the same
 * shape. Falcon's multi-query head split writes K and V so (fused[..., [-2], :]); as Slices the
 * attention staging reads them from the fused projection like Phi-3's, and their backward is a
 * Slice's (no scatter). */
#ifndef FR_GATHER_SLICE_H
#define FR_GATHER_SLICE_H

#include "graph/ir.h"

/* *count receives the number of gathers rewritten. */
FR_NODISCARD fr_status fr_gather_to_slice(fr_graph *g, int *count);

#endif
