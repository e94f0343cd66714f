/* What the three flash-attention kernel families share (attention.cu dispatches; the families are
 * attention_tc.cu + attention_tc_bwd.cu: bf16 tensor cores with every mask kind,
 * attention_f32.cu: register-tiled float32, attention_generic.cu: any head dim up to 256): the
 * problem description, the Q -> K/V batch index map, cp.async helpers and the launchers each
 * family exports. */
#ifndef FR_ATTENTION_FLASH_CUH
#define FR_ATTENTION_FLASH_CUH

#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"
extern "C" {
#include "ops/attention.h"
}

namespace fr_attn {

typedef __nv_bfloat16 bf16;

/* Q batch index -> K/V batch index (fr_attn_kv_index, on the device). group > 0: the map is
 * b -> b / group (every head its own K/V, or grouped-query heads next to each other), found by
 * the host (fr_attn_kv_group), so that the dK/dV walks find a K/V index's queries without a
 * search of 64-bit divisions. */
struct KvMap {
    int brank;
    int64_t qdims[FR_MAX_RANK];
    int64_t kv_stride[FR_MAX_RANK];
    int64_t group;
};

__device__ __forceinline__ int64_t kv_of(const KvMap &m, int64_t b)
{
    if (m.group > 0) return b / m.group;
    int64_t kv = 0;
    for (int k = m.brank - 1; k >= 0; k--) {
        const int64_t d = m.qdims[k];
        kv += (b % d) * m.kv_stride[k];
        b /= d;
    }
    return kv;
}

/* The first Q batch index after `prev` that reads K/V index kv (batch: none). */
__device__ __forceinline__ int64_t next_q_of(const KvMap &m, int64_t batch, int64_t kv, int64_t prev)
{
    if (m.group > 0) {
        const int64_t b = prev + 1 > kv * m.group ? prev + 1 : kv * m.group;
        return b < (kv + 1) * m.group && b < batch ? b : batch;
    }
    for (int64_t b = prev + 1; b < batch; b++)
        if (kv_of(m, b) == kv) return b;
    return batch;
}

struct Prob {
    int64_t batch, kv_batch;
    int Tq, Tk, D, Dv;
    float scale;
    int causal, bf16;
    KvMap map;
};

/* The masks beyond causal (and the device pointers they read), for the tensor-core kernels:
 * every one is a predicate or a term evaluated per element on the tiles that need it. */
struct Masks {
    int64_t window;       /* 0: none */
    float softcap;        /* 0: none */
    float softcap_inv;    /* 1 / softcap */
    const void *sk, *sq;  /* segment ids (sk NULL: none; sq NULL: every query has id 1) */
    int seg64;            /* ids are int64 (else int32) */
    int seg_ranges;       /* seg_form padded or packed: key/query tiles outside the segments skipped */
    int64_t seg_per_row;  /* Q batch indices per row of Sk, Sq */
    const float *m;       /* additive mask (NULL: none) */
    int64_t mrow, mcol, mstride[FR_MAX_RANK];
    __host__ __device__ bool extra() const { return softcap > 0.f || sk != nullptr || m != nullptr; }
};

/* The query tile of this block (grid = query tiles of BM x Q batch, the heaviest, i.e. last,
 * tiles first): its Q batch index b, first row q0 and the K/V batch index kvb it reads. */
struct QTile {
    int64_t b;
    int q0;
    int64_t kvb;
};
__device__ __forceinline__ QTile q_tile_of(const Prob &p, int BM)
{
    const int nqb = (p.Tq + BM - 1) / BM;
    const int64_t b = blockIdx.x % p.batch;
    return QTile{b, (nqb - 1 - (int)(blockIdx.x / p.batch)) * BM, kv_of(p.map, b)};
}

/* How many key tiles of BN the query rows [q0, q0 + BM) read: all, or up to the diagonal. */
__device__ __forceinline__ int key_tiles(const Prob &p, int q0, int BM, int BN)
{
    const int nk = (p.Tk + BN - 1) / BN;
    return p.causal ? min(nk, (min(q0 + BM, p.Tq) - 1) / BN + 1) : nk;
}

/* ---------------------------------------------------------------- PTX helpers ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared, zero-filled when !valid (src is then not read) */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/* ---------------------------------------------------------------- host side ---- */

/* Scratch: forward (tensor cores) K16, V16; backward Delta, then (tensor cores) Q16, dO16,
 * K16, V16. */
struct Scratch {
    float *delta;
    bf16 *q16, *do16, *k16, *v16;
};

inline unsigned grid_of(int64_t blocks) { return (unsigned)(blocks < 1 ? 1 : blocks); }

template <class F> FR_NODISCARD fr_status set_smem(const fr_node *n, F *kernel, size_t bytes)
{
    if (bytes > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess)
            return fr_node_error(n, FR_ERR_DEVICE, "%zu bytes of shared memory per block: %s", bytes,
                                 cudaGetErrorString(e));
    }
    return FR_OK;
}

/* attention_tc.cu, attention_tc_bwd.cu: precision bf16, D and Dv multiples of 8 up to 256
 * (tc_takes), 16-byte aligned operands, every mask kind (mk). K, V (and Q, dO in the backward)
 * already rounded to bf16 (tc_to_bf16, into the scratch). */
inline bool tc_takes(int64_t D, int64_t Dv) { return D >= 8 && Dv >= 8 && D % 8 == 0 && Dv % 8 == 0 && D <= 256 && Dv <= 256; }
FR_NODISCARD fr_status tc_to_bf16(const fr_cuda_kctx *k, const float *x, bf16 *y, int64_t n);
FR_NODISCARD fr_status tc_fwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K,
                              const bf16 *V, float *O, float *L);
FR_NODISCARD fr_status tc_bwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ,
                              float *dK, float *dV, const float *LSE);

/* attention_wg.cu, attention_wg_bwd.cu: tc_fwd's and tc_bwd's problems on Hopper's wgmma, the
 * same inputs and numbers, where wg_takes(k, p): an sm_90a build on a device of compute
 * capability 9.0, a head dim of 64 or more (padded to 64, 128 or 256; warp-specialized, they
 * outrun the mma.sync kernels at 64 too: H200, B8 H8 T2048 causal, 232 / 239 TFLOP/s forward /
 * backward against 161 / 123), FP8RUN_FLASH_WGMMA not 0, and a
 * driver that encodes tensor maps (the forward's producer copies through them). */
bool wg_takes(const fr_cuda_kctx *k, const Prob &p);
FR_NODISCARD fr_status wg_fwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K,
                              const bf16 *V, float *O, float *L);
FR_NODISCARD fr_status wg_bwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const Scratch &s, float *dQ,
                              float *dK, float *dV, const float *LSE);

/* attention_f32.cu: precision fp32, D == Dv in {64, 128}, 16-byte aligned operands.
 * in: Q, K, V, O, LSE, dO; delta: Delta_i = dO_i . O_i */
FR_NODISCARD fr_status f32_fwd(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K, const float *V, float *O,
                  float *L);
FR_NODISCARD fr_status f32_bwd(const fr_cuda_kctx *k, const Prob &p, const float *const *in, const float *delta, float *dQ,
                  float *dK, float *dV);

/* attention_generic.cu: anything else with D, Dv <= 256 (FR_ERR_UNSUPPORTED past that) */
FR_NODISCARD fr_status generic_fwd(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K, const float *V, float *O,
                      float *L);
FR_NODISCARD fr_status generic_bwd(const fr_cuda_kctx *k, const Prob &p, const float *const *in, const float *delta, float *dQ,
                      float *dK, float *dV);

} /* namespace fr_attn */

#endif
