/* Hopper's shared-memory mbarriers (sm_90) as fp8run's warp-specialized kernels use them: a
 * producer signals that a stage of tiles landed (`full`: its tensor copies' bytes), consumers
 * signal that they are done reading it (`empty`), and each side waits on the other's phase
 * instead of a block barrier.
 * A barrier counts arrivals; a phase completes when `count` arrivals came, and waiters name the
 * phase by its parity (0, 1, 0, ...). */
#ifndef FR_MBARRIER_CUH
#define FR_MBARRIER_CUH

#include <stdint.h>

namespace fr_wg {

__device__ __forceinline__ uint32_t mbar_addr(const uint64_t *b) { return (uint32_t)__cvta_generic_to_shared(b); }

/* by one thread, then fence_mbar_init and a block barrier before any use */
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* one arrival, releasing this thread's earlier stores to the waiters */
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mbar_addr(b)) : "memory");
}

/* one arrival once every cp.async this thread issued so far has landed (counted in `count`:
 * noinc) */
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t *b)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mbar_addr(b)) : "memory");
}

/* one arrival that also expects `bytes` of bulk copies to complete on b (the phase then waits
 * for both) */
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar_addr(b)), "r"(bytes) : "memory");
}

/* The tensor copy engine: box (c0, c1, c2) of the tensor map at generic address tmap (a
 * __grid_constant__ kernel parameter) into shared memory at dst, its bytes counted on b. */
__device__ __forceinline__ void tma_load_3d(void *dst, const void *tmap, int c0, int c1, int c2, uint64_t *b)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(mbar_addr(b))
                 : "memory");
}

/* until the phase of this parity completed (acquiring what its arrivals released) */
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" ::"r"(mbar_addr(b)),
                 "r"(parity)
                 : "memory");
}

} /* namespace fr_wg */

#endif
