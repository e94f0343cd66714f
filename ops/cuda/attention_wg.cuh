/* What the wgmma flash-attention kernels (attention_wg.cu: forward, attention_wg_bwd.cu: dQ
 * and dK, dV) share: the 1024-byte aligned start of their shared memory, the tensor maps that
 * let the copy engine fill the swizzled tiles of ops/cuda/wgmma.cuh, and the element loops'
 * edge dispatch. Each kernel's block is a producer warpgroup and two consumer warpgroups that
 * meet on mbarriers (ops/cuda/mbarrier.cuh). */
#ifndef FR_ATTENTION_WG_CUH
#define FR_ATTENTION_WG_CUH

#include <cuda.h> /* CUtensorMap and its encoder's type; the encoder is reached through the runtime */
#include <cudaTypedefs.h>

#include <type_traits>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/wgmma.cuh"

namespace fr_attn {
namespace wg {

/* attention_wg.cu: the driver's tensor-map encoder (NULL: none), and the tensor map of bf16
 * x [batches, rows, W] copied R rows by 64 columns at a time, 128-byte swizzled (the atoms of
 * ops/cuda/wgmma.cuh): rows from `rows` on and columns from W on read as zeros. */
PFN_cuTensorMapEncodeTiled_v12000 tmap_encoder();
FR_NODISCARD fr_status tile_map(const fr_node *n, const char *what, CUtensorMap *m, const bf16 *x, int64_t batches,
                                int rows, int W, int R);

/* f(std::true_type) where a tile crosses an edge and its element loop must test keys one by
 * one, f(std::false_type) where none can be masked: two copies of the loop, each without the
 * other's test. X (extra masks) tests the edges at run time, in one copy. */
template <bool X, class F> __device__ __forceinline__ void by_edge(bool edge, F &f)
{
    if (!X && edge)
        f(std::true_type{});
    else
        f(std::false_type{});
}

/* The padded head dim of a problem wg_takes (attention_flash.cuh): the larger of D and Dv
 * rounded up to 64, 128 or 256, the DP the forward and backward kernels are instantiated at. */
inline int padded_dim(const Prob &p)
{
    const int64_t w = p.D > p.Dv ? p.D : p.Dv;
    return w <= 64 ? 64 : w <= 128 ? 128 : 256;
}

/* bytes of a bf16 tile of `rows` rows at padded head dim DP */
template <int DP> __host__ __device__ constexpr size_t tile_bytes(int rows) { return (size_t)rows * DP * sizeof(bf16); }

/* the dynamic shared memory, rounded up to the swizzle's 1024-byte period (launches ask for
 * 1024 bytes more than they use) */
__device__ __forceinline__ unsigned char *smem_base(unsigned char *raw)
{
    return reinterpret_cast<unsigned char *>(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}

} /* namespace wg */
} /* namespace fr_attn */

#endif
