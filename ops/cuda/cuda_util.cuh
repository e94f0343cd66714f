/* Device helpers shared by the CUDA kernels. */
#ifndef FR_CUDA_UTIL_CUH
#define FR_CUDA_UTIL_CUH

#include <string.h>

#include "ops/cuda/cuda_kernel.h"

/* Record the first error of a step in the context's device error word (see cuda_kernel.h). */
__device__ inline void fr_dev_error(int *word, int code, int node_index, long long value, long long bound)
{
    if (atomicCAS(word, 0, code) == 0) {
        word[1] = node_index;
        word[2] = (int)value;
        word[3] = (int)bound;
    }
}

/* __shfl_down_sync of a value of any type made of whole 32-bit words (a double, a struct of
 * partial sums), word by word: the tree reductions of softmax_rows.cuh and reduce_engine.cuh. */
template <class A> __device__ __forceinline__ A fr_shfl_down(A v, int d)
{
    static_assert(sizeof(A) % 4 == 0, "whole 32-bit words");
    int w[sizeof(A) / 4];
    memcpy(w, &v, sizeof(A));
#pragma unroll
    for (int i = 0; i < (int)(sizeof(A) / 4); i++) w[i] = __shfl_down_sync(0xffffffffu, w[i], d);
    memcpy(&v, w, sizeof(A));
    return v;
}

/* The node's index in its graph, for fr_dev_error. */
static inline int fr_node_index(const fr_cuda_kctx *k) { return (int)(k->node - k->g->nodes); }

/* Blocks for n elements at `threads` per block, capped for grid-stride loops. */
static inline unsigned fr_grid_for(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

#endif
