/* Gemm's attributes, read and checked alike by the CPU kernel (ops/matmul.c) and the CUDA
 * launcher (ops/cuda/matmul.cu). */
#ifndef FR_OPS_MATMUL_H
#define FR_OPS_MATMUL_H

#include "ops/op.h"

#ifdef __cplusplus
extern "C" { /* a C function, also when ops/cuda/matmul.cu includes this */
#endif

typedef struct fr_gemm_attrs {
    int ta, tb; /* transA, transB: 0 or 1 */
    float alpha, beta;
} fr_gemm_attrs;

FR_NODISCARD fr_status fr_gemm_read_attrs(const fr_node *n, fr_gemm_attrs *c);

#ifdef __cplusplus
}
#endif

#endif
