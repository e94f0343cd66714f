/* LayerNormalization / RMSNormalization: the attributes and row split that the CPU kernels
 * (ops/norm.c) and the CUDA launchers (ops/cuda/norm.cu) share, so both read and check a node
 * the same way. */
#ifndef FR_OPS_NORM_H
#define FR_OPS_NORM_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* a C function, also when ops/cuda/norm.cu includes this */
#endif

typedef struct fr_norm_cfg {
    int axis;
    float eps;
    int64_t rows, len; /* rows of `len` contiguous elements */
} fr_norm_cfg;

/* The attributes (axis, epsilon, stash_type) of a norm node whose X has shape dims[rank], and X
 * split into rows over the normalized dims [axis, rank). */
FR_NODISCARD fr_status fr_norm_config(const fr_node *n, int rank, const int64_t *dims, fr_norm_cfg *c);

#ifdef __cplusplus
}
#endif

#endif
