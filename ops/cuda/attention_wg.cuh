/* What the wgmma flash-attention kernels (attention_wg.cu: forward, attention_wg_bwd.cu: dQ
 * and dK, dV) share: the 1024-byte aligned start of their shared memory, and tile loads by
 * cp.async into the swizzled layout of ops/cuda/wgmma.cuh. The backward's blocks are kThreads
 * (two warpgroups); the forward's add a producer warpgroup (ops/cuda/mbarrier.cuh). */
#ifndef FR_ATTENTION_WG_CUH
#define FR_ATTENTION_WG_CUH

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/wgmma.cuh"

namespace fr_attn {
namespace wg {

constexpr int kThreads = 256; /* two warpgroups */

/* bytes of a bf16 tile of `rows` rows at padded head dim DP */
template <int DP> __host__ __device__ constexpr size_t tile_bytes(int rows) { return (size_t)rows * DP * sizeof(bf16); }

/* the dynamic shared memory, rounded up to the swizzle's 1024-byte period (launches ask for
 * 1024 bytes more than they use) */
__device__ __forceinline__ unsigned char *smem_base(unsigned char *raw)
{
    return reinterpret_cast<unsigned char *>(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}

/* Rows r0 .. r0 + R - 1 of bf16 [rows, W] x -> a swizzled tile of R rows x DP columns by
 * cp.async from the block's kThreads (not committed); rows from `rows` on and columns from W on are
 * zero-filled. A thread keeps one 16-byte column chunk and steps over rows, so its addresses
 * are one base and constant strides (the index arithmetic was a third of the backward's
 * instructions). */
template <int R, int DP>
__device__ __forceinline__ void load_sw(unsigned char *dst, const bf16 *x, int W, int r0, int rows, int tid)
{
    constexpr int CH = DP / 8, NT = kThreads; /* chunks a row, threads */
    static_assert(NT % CH == 0 && R * CH % NT == 0, "whole rows per pass, whole passes per tile");
    const int ch = tid % CH, rt = tid / CH;
    const bool col = ch * 8 < W;
    const bf16 *src = x + ((int64_t)r0 + rt) * W + ch * 8;
#pragma unroll 1
    for (int u = 0; u < R * CH / NT; u++) {
        const int r = rt + u * (NT / CH);
        const bool ok = col && r0 + r < rows;
        cp_async16(dst + fr_wg::sw_off<R>(r, ch), ok ? src + (int64_t)u * (NT / CH) * W : x, ok);
    }
}

/* cp.async tiles landed (and ordinary stores made) by this thread, made visible to the
 * tensor cores' reads after the barrier that follows */
__device__ __forceinline__ void tiles_landed()
{
    cp_async_wait_all();
    fr_wg::fence_proxy_async();
}

} /* namespace wg */
} /* namespace fr_attn */

#endif
