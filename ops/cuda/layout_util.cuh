/* What the CUDA kernels of the layout family (layout.cu), of the shape ops (shape.cu) and of the
 * gather family (gather.cu) share: launch shapes, the copy-unit choice, and reading constant
 * inputs on the host. Internal linkage: each file gets its own copy. */
#ifndef FR_LAYOUT_UTIL_CUH
#define FR_LAYOUT_UTIL_CUH

#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"

namespace {

constexpr int kThreads = 256;

#define NODE_CUDA_TRY(n, call)                                                                  \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess)                                                                  \
            return fr_node_error((n), FR_ERR_DEVICE, "%s failed: %s (%s)", #call,               \
                                 cudaGetErrorName(e_), cudaGetErrorString(e_));                  \
    } while (0)

unsigned grid_for(const fr_cuda_kctx *k, int64_t n)
{
    int64_t blocks = (n + kThreads - 1) / kThreads;
    int64_t cap = (int64_t)(k->cu->sm_count > 0 ? k->cu->sm_count : 128) * 16;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

#define GRID_STRIDE(IT, i, n)                                                                   \
    for (IT i = (IT)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (IT)gridDim.x * blockDim.x)

/* The widest unit (16, 8, 4, 2, 1 bytes, never below es) dividing every v[i]. */
int unit_bytes(size_t es, const int64_t *v, int n)
{
    int64_t w = 16;
    for (int i = 0; i < n; i++)
        while (w > (int64_t)es && v[i] % w) w >>= 1;
    return (int)w;
}

int64_t addr(const void *p) { return (int64_t)(uintptr_t)p; }

#define BY_UNIT(w, LAUNCH)                                                                      \
    switch (w) {                                                                                \
    case 1: LAUNCH(uint8_t); break;                                                             \
    case 2: LAUNCH(uint16_t); break;                                                            \
    case 4: LAUNCH(uint32_t); break;                                                            \
    case 8: LAUNCH(uint64_t); break;                                                            \
    default: LAUNCH(uint4); break;                                                              \
    }

const fr_tensor *kin(const fr_cuda_kctx *k, int i) { return i < k->n_in ? k->in[i] : NULL; }

/* The constant (initializer or folded) behind input i of the node, or NULL. */
const fr_tensor *const_input(const fr_cuda_kctx *k, int i)
{
    const fr_node *n = k->node;
    if (i >= n->n_inputs || n->inputs[i] < 0) return NULL;
    return k->g->values[n->inputs[i]].constant;
}

/* Integer values of a small 1-D (or scalar) constant input; *cnt = -1 when the input is
 * omitted. A present input that is not a graph constant is an error: shapes are static. */
FR_NODISCARD fr_status const_ints(const fr_cuda_kctx *k, int i, const char *what, int max, int *cnt, int64_t *vals)
{
    const fr_node *n = k->node;
    *cnt = -1;
    if (i >= n->n_inputs || n->inputs[i] < 0) return FR_OK;
    const fr_tensor *t = const_input(k, i);
    if (!t)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "%s must be a constant of the graph on the CUDA backend (it decides the plan)", what);
    if (!fr_dtype_is_int(t->dtype) || t->rank > 1)
        return fr_node_error(n, FR_ERR_SHAPE, "%s must be a 1-D integer tensor, got %s rank %d", what,
                             fr_dtype_name(t->dtype), t->rank);
    int64_t c = fr_tensor_numel(t);
    if (c > max)
        return fr_node_error(n, FR_ERR_SHAPE, "%s has %lld entries, at most %d expected", what, (long long)c, max);
    for (int64_t j = 0; j < c; j++) vals[j] = fr_tensor_get_i64(t, j);
    *cnt = (int)c;
    return FR_OK;
}

} /* namespace */

#endif
