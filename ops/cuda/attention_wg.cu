/* Flash attention forward on Hopper's warpgroup matrix products (wgmma, sm_90a builds), for
 * the same problems as attention_tc.cu's forward (precision bf16; D, Dv multiples of 8 up to
 * 256, the larger at least 64, padded to 64, 128 or 256; every mask kind) and with its
 * numbers: S = Q K^T and O += P V in bf16 with float32 accumulation, the online softmax in
 * registers, the same mask predicates (attention_mma.cuh). What differs is the matrix unit: a
 * warpgroup (4 warps) multiplies its 64 query rows by a whole key tile in one asynchronous
 * wgmma sequence reading K and V straight from shared memory (128-byte swizzled tiles,
 * ops/cuda/wgmma.cuh), where mma.sync needs every fragment brought to registers by ldmatrix
 * first. P stays in registers as the A operand of O += P V.
 *
 * A block is three warpgroups for 128 query rows of one Q batch index (the heaviest, last,
 * tiles first). Warpgroup 0 only loads: one of its threads has the tensor copy engine bring
 * key tiles of 128 (64 at a padded head dim of 256, so that O's 128 float32 registers a thread
 * fit) into rings of stages (K and V each their own), as boxes of a tensor map that land in
 * the swizzled layout wgmma reads and zero-fill past Tk and D; each stage's bytes complete its
 * `full` mbarrier (segment ids are stored by the whole warpgroup beside them). Before it
 * refills a stage it waits on the stage's `empty` mbarrier. Warpgroups 1 and 2 (64 query rows
 * each) wait on `full`, run the products and the softmax, and arrive on `empty`: no block
 * barrier per tile, and the consumers issue no load arithmetic. setmaxnreg moves registers
 * from the producer (40) to the consumers (232). Within a consumer, S of key tile j is issued
 * beside P V of tile j - 1 and its softmax runs under that product.
 *
 * Without extra masks (softcap, additive mask, segments) the scores stay raw until the
 * exponent, one FFMA each, and only tiles that cross an edge (causal diagonal, window, the
 * ends of Q and K) test keys one by one. H200, B8 H8 T2048 causal, kernel alone: head dim 128
 * 370 us for two warpgroups loading by cp.async with per-element masks, 265 with a cp.async
 * producer warpgroup and raw scores, 193 with the copy engine and batched Q staging; head dim
 * 256: 538, 484, 320; head dim 64 148 (mma.sync's forward 214) (bench/README.md). */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include <cuda.h> /* CUtensorMap and its encoder's type; the encoder is reached through the runtime */
#include <cudaTypedefs.h>

#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/cuda_util.cuh"

extern "C" {
#include "graph/env.h"
}

namespace fr_attn {
namespace {

using namespace mma;
using namespace fr_wg;
using wg::tile_bytes;

constexpr int kFwdBM = 128, kFwdThreads = 384, kStages = 2;
template <int DP> __host__ __device__ constexpr int fwd_bn() { return DP == 256 ? 64 : 128; }
/* Q; kStages stages of K, V and the key ids; 4 kStages mbarriers; 1024 bytes of alignment */
template <int DP> constexpr size_t fwd_smem()
{
    return 1024 + tile_bytes<DP>(kFwdBM) +
           kStages * (2 * tile_bytes<DP>(fwd_bn<DP>()) + fwd_bn<DP>() * sizeof(int64_t)) +
           4 * kStages * sizeof(uint64_t);
}

template <int DP, bool X> __global__ void __launch_bounds__(kFwdThreads, 1)
    fwd_wg(const float *__restrict__ Q, const __grid_constant__ CUtensorMap tmK,
           const __grid_constant__ CUtensorMap tmV, float *__restrict__ O, float *__restrict__ LSE, Prob p, Masks mk)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = kFwdBM, BN = fwd_bn<DP>();
    extern __shared__ unsigned char smem_raw[];
    unsigned char *sQ = wg::smem_base(smem_raw), *sK = sQ + tile_bytes<DP>(BM);
    unsigned char *sV = sK + kStages * tile_bytes<DP>(BN);
    int64_t *sKid = reinterpret_cast<int64_t *>(sV + kStages * tile_bytes<DP>(BN));
    /* K (with its ids) and V have rings of their own: S of a tile runs while P V of the one
     * before still reads its V */
    uint64_t *full_k = reinterpret_cast<uint64_t *>(sKid + kStages * BN), *full_v = full_k + kStages;
    uint64_t *empty_k = full_v + kStages, *empty_v = empty_k + kStages;
    const int tid = threadIdx.x, warp = tid >> 5, wgi = warp >> 2;
    const auto [b, q0, kvb] = q_tile_of(p, BM);
    int j0, j1;
    int64_t srow;
    key_tile_range<X>(p, mk, b, q0, min(q0 + BM, p.Tq), BM, BN, &j0, &j1, &srow);
    if (tid == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full_k + s, X && mk.sk ? 1 + 128 : 1); /* the copies' bytes (and each thread's ids) */
            mbar_init(full_v + s, 1);
            mbar_init(empty_k + s, 256); /* each consumer thread */
            mbar_init(empty_v + s, 256);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wgi == 0) { /* ---- producer: one thread drives the tensor copy engine ---- */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        const bool ids = X && mk.sk; /* the key tiles' segment ids, by the whole warpgroup */
        if (!ids && tid != 0) return;
        constexpr uint32_t kTile = (uint32_t)tile_bytes<DP>(BN);
        for (int j = j0; j < j1; j++) {
            const int it = j - j0, s = it % kStages, k = it / kStages;
            if (k > 0) mbar_wait(empty_k + s, (k - 1) & 1);
            if (tid == 0) {
                mbar_expect_tx(full_k + s, kTile);
                for (int a = 0; a < DP / 64; a++) /* one 128-byte-wide atom of the tile a copy */
                    tma_load_3d(sK + s * kTile + a * BN * 128, &tmK, a * 64, j * BN, (int)kvb, full_k + s);
            }
            if (ids) {
                load_key_ids<128>(p, mk, srow, j * BN, BN, sKid + s * BN, tid);
                mbar_arrive(full_k + s);
            }
            if (tid != 0) continue;
            if (k > 0) mbar_wait(empty_v + s, (k - 1) & 1);
            mbar_expect_tx(full_v + s, kTile);
            for (int a = 0; a < DP / 64; a++)
                tma_load_3d(sV + s * kTile + a * BN * 128, &tmV, a * 64, j * BN, (int)kvb, full_v + s);
        }
        return;
    }

    /* ---- consumers: warpgroups 1 and 2, 64 query rows each ---- */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wgi - 1, w4 = warp & 3, lane = tid & 31, g = lane >> 2, c = lane & 3;
    const int wq0 = q0 + cw * 64;
    const float *Qb = Q + b * p.Tq * p.D;
    { /* this warpgroup's Q rows: float32 -> bf16, a thread's loads of 8 rows in flight at once
       * (one at a time, this staging was a tenth of the kernel's time) */
        constexpr int CH = DP / 8;
        const int ch = tid % CH, r1 = tid % 128 / CH;
        const bool col = ch * 8 < p.D;
#pragma unroll 8
        for (int rr = r1; rr < 64; rr += 128 / CH) {
            const int r = cw * 64 + rr;
            float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
            if (col && q0 + r < p.Tq) {
                const float4 *src = reinterpret_cast<const float4 *>(Qb + (int64_t)(q0 + r) * p.D + ch * 8);
                v0 = __ldg(src);
                v1 = __ldg(src + 1);
            }
            *reinterpret_cast<uint4 *>(sQ + sw_off<BM>(r, ch)) =
                make_uint4(pack_bf16(v0.x, v0.y), pack_bf16(v0.z, v0.w), pack_bf16(v1.x, v1.y), pack_bf16(v1.z, v1.w));
        }
    }
    fence_proxy_async();
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + cw) : "memory"); /* this warpgroup's Q rows */

    /* this thread's rows: h = 0 | 1 is row wq0 + 16 w4 + g (+ 8) */
    float o[DP / 2];
#pragma unroll
    for (int i = 0; i < DP / 2; i++) o[i] = 0.f;
    float m[2], l[2];
    int row[2];
    int64_t qid[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        m[h] = -INFINITY, l[h] = 0.f;
        row[h] = wq0 + w4 * 16 + g + h * 8;
        qid[h] = X && mk.sq && row[h] < p.Tq ? seg_at(mk.sq, mk.seg64, srow * p.Tq + row[h]) : 1;
    }
    const int64_t moff = X && mk.m ? mask_off(p, mk, b) : 0;
    const uint32_t aQ = smem_addr(sQ);
    const float sl2 = X ? 1.f : p.scale * kLog2e; /* X's scores are scaled by score2 */

    /* S of tile j -> P (float32, in place; `pack` makes the bf16 A operand of P V); alpha: O's
     * rescale, and l and m move with it. Without extra masks the scores stay raw until the
     * exponent (one FFMA each): the maximum of the raw scores scales to the maximum of the
     * scaled ones (scale > 0), and only tiles crossing an edge test keys one by one. */
    auto softmax = [&](float *sc, int j, int s, float *alpha) {
        const int k0 = j * BN;
        const int64_t *kid = sKid + s * BN;
        const bool edge = k0 + BN > p.Tk || wq0 + 64 > p.Tq || (p.causal && k0 + BN - 1 > wq0) ||
                          (mk.window > 0 && (int64_t)wq0 + 63 - k0 >= mk.window);
        if (X) {
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, key = k0 + t * 8 + 2 * c + (e & 1), i = row[h];
                    float v = -INFINITY;
                    if (!edge || !outside(p, mk, i, key))
                        v = score2<X>(p, mk, sc[t * 4 + e], i, key, moff, mk.sk ? kid[key - k0] : 0, qid[h], nullptr);
                    sc[t * 4 + e] = v;
                }
        } else if (edge) {
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + t * 8 + 2 * c + (e & 1);
                    sc[t * 4 + e] = outside(p, mk, row[e >> 1], key) ? -INFINITY : sc[t * 4 + e];
                }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            mx[0] = fmaxf(mx[0], fmaxf(sc[t * 4], sc[t * 4 + 1]));
            mx[1] = fmaxf(mx[1], fmaxf(sc[t * 4 + 2], sc[t * 4 + 3]));
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float mn = fmaxf(m[h], mx[h] * sl2);
            const float base = mn == -INFINITY ? 0.f : mn; /* a row with no key yet */
            alpha[h] = ex2(m[h] - base);
            m[h] = mn;
            mx[h] = base;
            l[h] *= alpha[h];
        }
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            const float p0 = ex2(fmaf(sc[t * 4], sl2, -mx[0])), p1 = ex2(fmaf(sc[t * 4 + 1], sl2, -mx[0]));
            const float p2 = ex2(fmaf(sc[t * 4 + 2], sl2, -mx[1])), p3 = ex2(fmaf(sc[t * 4 + 3], sl2, -mx[1]));
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            sc[t * 4] = p0, sc[t * 4 + 1] = p1, sc[t * 4 + 2] = p2, sc[t * 4 + 3] = p3;
        }
    };
    /* P (float32, in S's registers) -> bf16, the A operand of P V */
    auto pack = [&](const float *sc, uint32_t(*pa)[4]) {
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            pa[t >> 1][(t & 1) * 2] = pack_bf16(sc[t * 4], sc[t * 4 + 1]);
            pa[t >> 1][(t & 1) * 2 + 1] = pack_bf16(sc[t * 4 + 2], sc[t * 4 + 3]);
        }
    };

    /* The key tiles this warpgroup reads, ja .. jb - 1: the causal diagonal and the window cut
     * whole tiles from the block's range only at its ends. The tiles outside are waited for
     * and released all the same, as the rings' phases count every tile. */
    int ja = j0, jb = j1;
    if (mk.window > 0)
        while (ja < jb && (int64_t)wq0 - (ja * BN + BN - 1) >= mk.window) ja++;
    if (p.causal)
        while (jb > ja && (jb - 1) * BN > wq0 + 63) jb--;
    auto pass = [&](int j) {
        const int it = j - j0, s = it % kStages;
        const unsigned ph = (it / kStages) & 1;
        mbar_wait(full_k + s, ph);
        mbar_wait(full_v + s, ph);
        mbar_arrive(empty_k + s);
        mbar_arrive(empty_v + s);
    };
    for (int j = j0; j < ja; j++) pass(j);
    /* Tile j's K or V landed: waited for before the products are issued (a wait loop between
     * them would make ptxas serialize every wgmma) */
    auto landed = [&](uint64_t *full, int j) { mbar_wait(full + (j - j0) % kStages, ((j - j0) / kStages) & 1); };
    /* S = Q K^T of tile j, issued and committed */
    auto qk = [&](float *sc, int j) {
        const uint32_t aK = smem_addr(sK + (j - j0) % kStages * tile_bytes<DP>(BN));
#pragma unroll
        for (int kk = 0; kk < DP / 16; kk++)
            mma_ss<BN>(sc, wg_desc_k<BM>(aQ, cw * 64, kk), wg_desc_k<BN>(aK, 0, kk), kk > 0);
        wgmma_commit();
    };
    /* O += P V of tile j, issued and committed */
    auto pv = [&](uint32_t(*pa)[4], int j) {
        const uint32_t aV = smem_addr(sV + (j - j0) % kStages * tile_bytes<DP>(BN));
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) mma_rs<DP>(o, pa[kk], wg_desc_n<BN>(aV, kk), 1);
        wgmma_commit();
    };
    if (ja < jb) {
        uint32_t pa[BN / 16][4]; /* P of the tile before */
        {
            float sc[BN / 2], alpha[2];
            landed(full_k, ja);
            wgmma_fence();
            qk(sc, ja);
            wgmma_wait<0>();
            fence_regs<BN / 2>(sc);
            softmax(sc, ja, (ja - j0) % kStages, alpha); /* O is still 0: no rescale */
            mbar_arrive(empty_k + (ja - j0) % kStages);
            pack(sc, pa);
        }
        /* Tile j's S is issued before P V of tile j - 1, and its softmax runs while that product
         * does. O's rescale and P's bf16 registers wait for it: no register a product in flight
         * reads is written (ptxas would serialize the products). */
        for (int j = ja + 1; j < jb; j++) {
            float sc[BN / 2], alpha[2];
            landed(full_k, j);
            landed(full_v, j - 1);
            wgmma_fence();
            qk(sc, j);
            pv(pa, j - 1);
            wgmma_wait<1>(); /* S landed; P V may still run */
            fence_regs<BN / 2>(sc);
            softmax(sc, j, (j - j0) % kStages, alpha);
            mbar_arrive(empty_k + (j - j0) % kStages); /* K and its ids read */
            wgmma_wait<0>();
            fence_regs<DP / 2>(o);
            mbar_arrive(empty_v + (j - 1 - j0) % kStages);
            if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) /* no row's maximum moved: skip */
#pragma unroll
                for (int t = 0; t < DP / 8; t++) {
                    o[t * 4] *= alpha[0];
                    o[t * 4 + 1] *= alpha[0];
                    o[t * 4 + 2] *= alpha[1];
                    o[t * 4 + 3] *= alpha[1];
                }
            pack(sc, pa);
        }
        landed(full_v, jb - 1);
        wgmma_fence();
        pv(pa, jb - 1);
        wgmma_wait<0>();
        fence_regs<DP / 2>(o);
        mbar_arrive(empty_v + (jb - 1 - j0) % kStages);
    }
    for (int j = jb > ja ? jb : ja; j < j1; j++) pass(j);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (row[h] >= p.Tq) continue;
        const bool none = !(l[h] > 0.f); /* no key: O = 0, LSE = -inf (the CPU's rule) */
        const float inv = none ? 0.f : 1.f / l[h];
        float *orow = O + (b * p.Tq + row[h]) * p.Dv;
#pragma unroll
        for (int t = 0; t < DP / 8; t++)
            if (t * 8 < p.Dv)
                *reinterpret_cast<float2 *>(orow + t * 8 + 2 * c) =
                    make_float2(o[t * 4 + 2 * h] * inv, o[t * 4 + 2 * h + 1] * inv);
        if (LSE && c == 0) LSE[b * p.Tq + row[h]] = none ? -INFINITY : m[h] * kLn2 + logf(l[h]);
    }
#elif defined(__CUDA_ARCH__)
    __trap(); /* built without sm_90a: never launched (wg_takes), and loud if it is */
#endif
}

template <int DP, bool X> fr_status fwd_launch(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q,
                                               const bf16 *K, const bf16 *V, float *O, float *L)
{
    const size_t smem = fwd_smem<DP>();
    FR_TRY(set_smem(k->node, fwd_wg<DP, X>, smem));
    CUtensorMap tmK, tmV;
    FR_TRY(wg::tile_map(k->node, "K", &tmK, K, p.kv_batch, p.Tk, p.D, fwd_bn<DP>()));
    FR_TRY(wg::tile_map(k->node, "V", &tmV, V, p.kv_batch, p.Tk, p.Dv, fwd_bn<DP>()));
    const int64_t blocks = (int64_t)((p.Tq + kFwdBM - 1) / kFwdBM) * p.batch;
    fwd_wg<DP, X><<<grid_of(blocks), kFwdThreads, smem, k->cu->stream>>>(Q, tmK, tmV, O, L, p, mk);
    return fr_cuda_check_launch(k->node, "Attention(wgmma, producer warpgroup)");
}

} /* namespace */

namespace wg {

/* The driver's tensor-map encoder, looked up once through the runtime (NULL: none) */
PFN_cuTensorMapEncodeTiled_v12000 tmap_encoder()
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            f = nullptr;
        }
        return (PFN_cuTensorMapEncodeTiled_v12000)f;
    }();
    return fn;
}

/* The tensor map of bf16 x [batches, rows, W] that the forward's producer copies R rows by 64
 * columns at a time, 128-byte swizzled (the atoms of ops/cuda/wgmma.cuh): rows from `rows` on
 * and columns from W on read as zeros. */
fr_status tile_map(const fr_node *n, const char *what, CUtensorMap *m, const bf16 *x, int64_t batches, int rows, int W,
                   int R)
{
    const cuuint64_t dims[3] = {(cuuint64_t)W, (cuuint64_t)rows, (cuuint64_t)batches};
    const cuuint64_t strides[2] = {(cuuint64_t)W * sizeof(bf16), (cuuint64_t)rows * W * sizeof(bf16)};
    const cuuint32_t box[3] = {64, (cuuint32_t)R, 1}, step[3] = {1, 1, 1};
    const CUresult r = tmap_encoder()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)x, dims, strides, box, step,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return fr_node_error(n, FR_ERR_DEVICE,
                             "the tensor map of %s [%lld, %d, %d] (bf16 at %p) was refused (CUresult %d)", what,
                             (long long)batches, rows, W, (const void *)x, (int)r);
    return FR_OK;
}

} /* namespace wg */

bool wg_takes(const fr_cuda_kctx *k, const Prob &p)
{
#ifdef FP8RUN_SM90A /* sm_90a code runs on compute capability 9.0 only (a build for 90a;100a has both) */
    return k->cu->cc_major == 9 && k->cu->cc_minor == 0 && (p.D >= 64 || p.Dv >= 64) &&
           !fr_env_is(FR_ENV_FLASH_WGMMA, "0") && wg::tmap_encoder() != nullptr;
#else
    (void)k, (void)p;
    return false;
#endif
}

fr_status wg_fwd(const fr_cuda_kctx *k, const Prob &p, const Masks &mk, const float *Q, const bf16 *K, const bf16 *V,
                 float *O, float *L)
{
    const bool x = mk.extra() || !(p.scale > 0.f); /* the raw scores' maximum needs a positive scale */
    switch (wg::padded_dim(p)) {
    case 64: return x ? fwd_launch<64, true>(k, p, mk, Q, K, V, O, L) : fwd_launch<64, false>(k, p, mk, Q, K, V, O, L);
    case 128:
        return x ? fwd_launch<128, true>(k, p, mk, Q, K, V, O, L) : fwd_launch<128, false>(k, p, mk, Q, K, V, O, L);
    default:
        return x ? fwd_launch<256, true>(k, p, mk, Q, K, V, O, L) : fwd_launch<256, false>(k, p, mk, Q, K, V, O, L);
    }
}

} /* namespace fr_attn */
