/* unary op family (placeholder table; the family's kernels are being written). */
#include "op.h"

const fr_op_def fr_ops_unary[] = {
    {0},
};
