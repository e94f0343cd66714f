/* Slices moved above the Transpose they read: Slice(Transpose(x, perm), axes) becomes
 * Transpose(Slice(x, perm[axes]), perm), the same elements in the same order, when every reader
 * of the Transpose is such a Slice (constant starts, ends, axes; the Transpose then goes).
 * Falcon splits its fused query_key_value for multi-query attention this way (K and V gathered
 * from a head-major transpose): hoisted, Q, K and V are Slices of one tensor, which the
 * attention staging reads from the fused projection. Runs after gather_to_slice. */
#ifndef FR_SLICE_HOIST_H
#define FR_SLICE_HOIST_H

#include "graph/ir.h"

/* *count receives the number of Slices moved. */
FR_NODISCARD fr_status fr_hoist_slices(fr_graph *g, int *count);

#endif
