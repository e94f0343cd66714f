/* Hopper warpgroup matrix products (wgmma, sm_90a) for fp8run's own kernels: the fences and
 * group waits around them, the shared-memory matrix descriptor, and the 128-byte-swizzled tile
 * layout both operand orientations read.
 *
 * A tile of R rows x C bf16 columns (C a multiple of 64) is kept as C / 64 "atoms" of R rows x
 * 128 bytes, atom after atom; inside an atom the 16-byte chunk ch of row r sits at chunk
 * ch ^ (r % 8). Tiles start on 1024-byte boundaries (the swizzle repeats every 8 rows of 128
 * bytes, and the hardware applies it to address bits). The same bytes serve as
 *  - a K-major operand (rows = M or N, columns = the reduction): the k16 step kk starts at
 *    atom kk / 4, byte (kk % 4) * 32; stride between 8-row groups 1024 (wg_desc_k);
 *  - an N-major B operand (rows = the reduction, columns = N): the k16 step kk starts at row
 *    16 kk; stride between 8-row groups 1024, between atoms R * 128 (wg_desc_n).
 * This is how a [keys, D] tile of K feeds S = Q K^T and the same layout of V feeds O += P V. */
#ifndef FR_WGMMA_CUH
#define FR_WGMMA_CUH

#include <stdint.h>

#include "ops/cuda/wgmma_ops.cuh"

namespace fr_wg {

/* Byte offset of 16-byte chunk ch of row r in a swizzled tile of R rows. */
template <int R> __host__ __device__ constexpr uint32_t sw_off(int r, int ch)
{
    return (uint32_t)((ch >> 3) * R * 128 + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ uint64_t desc128(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}
/* K-major operand: k16 step kk of a tile of R rows at shared address base (+ row0 rows) */
template <int R> __device__ __forceinline__ uint64_t wg_desc_k(uint32_t base, int row0, int kk)
{
    return desc128(base + (uint32_t)((kk >> 2) * R * 128 + row0 * 128 + (kk & 3) * 32), 16, 1024);
}
/* N-major B operand: k16 step kk (rows 16 kk ..) of a tile of R rows */
template <int R> __device__ __forceinline__ uint64_t wg_desc_n(uint32_t base, int kk)
{
    return desc128(base + (uint32_t)(kk * 16 * 128), R * 128, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory written through the generic proxy (stores, cp.async) that wgmma reads next:
 * each writing thread fences before the barrier that publishes it. (Tensor copies land through
 * the async proxy already.) */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* The accumulators as the program reads them only after the wait: keeps the compiler from
 * moving their reads (or writes) across the wgmma group boundaries. */
template <int N> __device__ __forceinline__ void fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (m64nN) = A . B (+ d): A, B K-major in shared memory */
template <int N> __device__ __forceinline__ void mma_ss(float *d, uint64_t da, uint64_t db, int acc)
{
    static_assert(N == 32 || N == 64 || N == 128, "generated shapes: tools/gen_wgmma.py");
    if constexpr (N == 32)
        wgmma_ss_n32(d, da, db, acc);
    else if constexpr (N == 64)
        wgmma_ss_n64(d, da, db, acc);
    else
        wgmma_ss_n128(d, da, db, acc);
}
/* d (m64nN) = A . B (+ d): A from registers, B N-major in shared memory */
template <int N> __device__ __forceinline__ void mma_rs(float *d, const uint32_t *a, uint64_t db, int acc)
{
    static_assert(N == 64 || N == 128 || N == 256, "generated shapes: tools/gen_wgmma.py");
    if constexpr (N == 64)
        wgmma_rs_n64(d, a, db, acc);
    else if constexpr (N == 128)
        wgmma_rs_n128(d, a, db, acc);
    else
        wgmma_rs_n256(d, a, db, acc);
}

} /* namespace fr_wg */

#endif
