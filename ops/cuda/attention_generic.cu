/* Flash attention, generic float32 path (dispatched from attention.cu): float32 precision with head
 * dims other than 64 / 128 (up to 256), or the cases the tensor-core and register-tiled paths
 * miss a condition of. SIMT float32, 32 x 32 tiles, exact float32 math (bf16 precision rounds
 * the operands, P and dS as the spec says). */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace fr_attn {
namespace {

constexpr int kMaxGenericD = 256; /* generic path: D and Dv up to this */

/* ---------------------------------------------------------------- generic float32 path ---- */

/* 32 x 32 tiles, 256 threads: thread t owns row t / 8 of the tile and columns t % 8 + 8 j. */
constexpr int GB = 32, kGenThreads = 256;

__device__ __forceinline__ float rnd(float x, int bf) { return bf ? __bfloat162float(__float2bfloat16_rn(x)) : x; }

/* rows [r0, r0 + GB) of a [rows, width] matrix into shared memory (leading dim ld), zeros past
 * `rows`, rounded to bf16 when bf */
__device__ __forceinline__ void load_tile(float *dst, int ld, const float *src, int r0, int rows, int width, int bf)
{
    for (int i = threadIdx.x; i < GB * width; i += kGenThreads) {
        const int r = i / width, d = i % width;
        dst[r * ld + d] = r0 + r < rows ? rnd(src[(int64_t)(r0 + r) * width + d], bf) : 0.f;
    }
}

/* Key tile k0 of K and V into shared sK, sV (leading dimensions LQ, LV), once every thread is
 * done with the last one. */
__device__ __forceinline__ void load_kv_tile(float *sK, int LQ, float *sV, int LV, const float *Kb, const float *Vb,
                                             int k0, int Tk, int D, int Dv, int bf)
{
    __syncthreads();
    load_tile(sK, LQ, Kb, k0, Tk, D, bf);
    load_tile(sV, LV, Vb, k0, Tk, Dv, bf);
    __syncthreads();
}

__device__ __forceinline__ float dot_s(const float *a, const float *b, int n)
{
    float acc = 0.f;
    for (int d = 0; d < n; d++) acc = fmaf(a[d], b[d], acc);
    return acc;
}

size_t gen_fwd_smem(int D, int Dv) { return sizeof(float) * (size_t)(2 * GB * (D + 1) + GB * (Dv + 1) + GB * (GB + 1)); }

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    fwd_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                float *__restrict__ O, float *__restrict__ LSE, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sQ = smf, *sK = sQ + GB * LQ, *sV = sK + GB * LQ, *sP = sV + GB * LV;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const auto [b, q0, kvb] = q_tile_of(p, GB);
    const int qrow = q0 + r;
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * Dv;
    load_tile(sQ, LQ, Q + b * p.Tq * D, q0, p.Tq, D, p.bf16);
    const int n_end = key_tiles(p, q0, GB, GB);
    float o[NJ], m = -INFINITY, l = 0.f;
#pragma unroll
    for (int j = 0; j < NJ; j++) o[j] = 0.f;
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * GB;
        load_kv_tile(sK, LQ, sV, LV, Kb, Vb, k0, p.Tk, D, Dv, p.bf16);
        float s[4], mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int kc = sub + 8 * u, key = k0 + kc;
            float v = dot_s(sQ + r * LQ, sK + kc * LQ, D) * p.scale;
            if (key >= p.Tk || (p.causal && key > qrow)) v = -INFINITY;
            s[u] = v;
            mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        const float mn = fmaxf(m, mx), base = mn == -INFINITY ? 0.f : mn;
        const float alpha = expf(m - base);
        float ps = 0.f;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const float pv = expf(s[u] - base);
            ps += pv;
            sP[r * LP + sub + 8 * u] = rnd(pv, p.bf16);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        ps += __shfl_xor_sync(0xffffffffu, ps, 4);
        l = l * alpha + ps;
        m = mn;
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = sub + 8 * j;
            if (col < Dv) {
                float acc = o[j] * alpha;
                for (int k = 0; k < GB; k++) acc = fmaf(sP[r * LP + k], sV[k * LV + col], acc);
                o[j] = acc;
            }
        }
    }
    if (qrow >= p.Tq) return;
    const float inv = 1.f / l;
    float *orow = O + (b * p.Tq + qrow) * Dv;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (sub + 8 * j < Dv) orow[sub + 8 * j] = o[j] * inv;
    if (LSE && sub == 0) LSE[b * p.Tq + qrow] = m + logf(l);
}

size_t gen_dq_smem(int D, int Dv) { return sizeof(float) * (size_t)(2 * GB * (D + 1) + 2 * GB * (Dv + 1) + GB * (GB + 1)); }

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    dq_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
               const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
               float *__restrict__ dQ, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sQ = smf, *sK = sQ + GB * LQ, *sdO = sK + GB * LQ, *sV = sdO + GB * LV, *sS = sV + GB * LV;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const auto [b, q0, kvb] = q_tile_of(p, GB);
    const int qrow = q0 + r;
    const float *Kb = K + kvb * p.Tk * D, *Vb = V + kvb * p.Tk * Dv;
    load_tile(sQ, LQ, Q + b * p.Tq * D, q0, p.Tq, D, p.bf16);
    load_tile(sdO, LV, dO + b * p.Tq * Dv, q0, p.Tq, Dv, p.bf16);
    const bool live = qrow < p.Tq;
    const float lse = live ? LSE[b * p.Tq + qrow] : 0.f, dl = live ? Delta[b * p.Tq + qrow] : 0.f;
    const int n_end = key_tiles(p, q0, GB, GB);
    float dq[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) dq[j] = 0.f;
    for (int jt = 0; jt < n_end; jt++) {
        const int k0 = jt * GB;
        load_kv_tile(sK, LQ, sV, LV, Kb, Vb, k0, p.Tk, D, Dv, p.bf16);
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int kc = sub + 8 * u, key = k0 + kc;
            float ds = 0.f;
            if (live && key < p.Tk && !(p.causal && key > qrow)) {
                const float pv = expf(dot_s(sQ + r * LQ, sK + kc * LQ, D) * p.scale - lse);
                ds = pv * (dot_s(sdO + r * LV, sV + kc * LV, Dv) - dl);
            }
            sS[r * LP + kc] = rnd(ds, p.bf16);
        }
        __syncwarp();
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            const int col = sub + 8 * j;
            if (col < D) {
                float acc = dq[j];
                for (int k = 0; k < GB; k++) acc = fmaf(sS[r * LP + k], sK[k * LQ + col], acc);
                dq[j] = acc;
            }
        }
    }
    if (!live) return;
    float *qr = dQ + (b * p.Tq + qrow) * D;
#pragma unroll
    for (int j = 0; j < NJ; j++)
        if (sub + 8 * j < D) qr[sub + 8 * j] = dq[j] * p.scale;
}

size_t gen_dkdv_smem(int D, int Dv)
{
    return sizeof(float) * (size_t)(2 * GB * (D + 1) + 2 * GB * (Dv + 1) + 2 * GB * (GB + 1) + 2 * GB);
}

template <int NJ>
__global__ void __launch_bounds__(kGenThreads)
    dkdv_generic(const float *__restrict__ Q, const float *__restrict__ K, const float *__restrict__ V,
                 const float *__restrict__ dO, const float *__restrict__ LSE, const float *__restrict__ Delta,
                 float *__restrict__ dK, float *__restrict__ dV, Prob p)
{
    extern __shared__ float smf[];
    const int D = p.D, Dv = p.Dv, LQ = D + 1, LV = Dv + 1, LP = GB + 1;
    float *sK = smf, *sQ = sK + GB * LQ, *sV = sQ + GB * LQ, *sdO = sV + GB * LV, *sP = sdO + GB * LV,
          *sS = sP + GB * LP, *sL = sS + GB * LP, *sDl = sL + GB;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    const int64_t kvb = blockIdx.x % p.kv_batch;
    const int n0 = (int)(blockIdx.x / p.kv_batch) * GB, key = n0 + r;
    load_tile(sK, LQ, K + kvb * p.Tk * D, n0, p.Tk, D, p.bf16);
    load_tile(sV, LV, V + kvb * p.Tk * Dv, n0, p.Tk, Dv, p.bf16);
    const int nq = (p.Tq + GB - 1) / GB, i0 = p.causal ? n0 / GB : 0;
    float dk[NJ], dv[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) dk[j] = dv[j] = 0.f;
    for (int64_t qb = next_q_of(p.map, p.batch, kvb, -1); qb < p.batch; qb = next_q_of(p.map, p.batch, kvb, qb))
        for (int it = i0; it < nq; it++) {
            const int t0 = it * GB;
            __syncthreads();
            load_tile(sQ, LQ, Q + qb * p.Tq * D, t0, p.Tq, D, p.bf16);
            load_tile(sdO, LV, dO + qb * p.Tq * Dv, t0, p.Tq, Dv, p.bf16);
            for (int i = threadIdx.x; i < GB; i += kGenThreads) {
                const bool ok = t0 + i < p.Tq;
                sL[i] = ok ? LSE[qb * p.Tq + t0 + i] : 0.f;
                sDl[i] = ok ? Delta[qb * p.Tq + t0 + i] : 0.f;
            }
            __syncthreads();
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int qc = sub + 8 * u, q = t0 + qc;
                float pv = 0.f, ds = 0.f;
                if (q < p.Tq && key < p.Tk && !(p.causal && key > q)) {
                    pv = expf(dot_s(sQ + qc * LQ, sK + r * LQ, D) * p.scale - sL[qc]);
                    ds = pv * (dot_s(sdO + qc * LV, sV + r * LV, Dv) - sDl[qc]);
                }
                sP[r * LP + qc] = rnd(pv, p.bf16);
                sS[r * LP + qc] = rnd(ds, p.bf16);
            }
            __syncwarp();
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int col = sub + 8 * j;
                if (col < Dv) {
                    float acc = dv[j];
                    for (int q = 0; q < GB; q++) acc = fmaf(sP[r * LP + q], sdO[q * LV + col], acc);
                    dv[j] = acc;
                }
                if (col < D) {
                    float acc = dk[j];
                    for (int q = 0; q < GB; q++) acc = fmaf(sS[r * LP + q], sQ[q * LQ + col], acc);
                    dk[j] = acc;
                }
            }
        }
    if (key >= p.Tk) return;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int col = sub + 8 * j;
        if (dK && col < D) dK[(kvb * p.Tk + key) * D + col] = dk[j] * p.scale;
        if (dV && col < Dv) dV[(kvb * p.Tk + key) * Dv + col] = dv[j];
    }
}
/* ---------------------------------------------------------------- launchers ---- */

fr_status generic_fits(const fr_node *n, const Prob &p)
{
    if (p.D > kMaxGenericD || p.Dv > kMaxGenericD)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "head dims D = %d, Dv = %d: the CUDA kernels take up to %d (bf16 tensor cores: 64, 128)",
                             p.D, p.Dv, kMaxGenericD);
    return FR_OK;
}

template <int NJ> fr_status fwd_gen_launch(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K,
                                           const float *V, float *O, float *L)
{
    const size_t smem = gen_fwd_smem(p.D, p.Dv);
    FR_TRY(set_smem(k->node, fwd_generic<NJ>, smem));
    const int64_t blocks = (int64_t)((p.Tq + GB - 1) / GB) * p.batch;
    fwd_generic<NJ><<<grid_of(blocks), kGenThreads, smem, k->cu->stream>>>(Q, K, V, O, L, p);
    return fr_cuda_check_launch(k->node, "Attention(float32)");
}

template <int NJ> fr_status bwd_gen_launch(const fr_cuda_kctx *k, const Prob &p, const float *const *in,
                                           const float *delta, float *dQ, float *dK, float *dV)
{
    cudaStream_t st = k->cu->stream;
    const float *Q = in[0], *K = in[1], *V = in[2], *LSE = in[4], *dO = in[5];
    if (dK || dV) {
        const size_t smem = gen_dkdv_smem(p.D, p.Dv);
        FR_TRY(set_smem(k->node, dkdv_generic<NJ>, smem));
        const int64_t blocks = (int64_t)((p.Tk + GB - 1) / GB) * p.kv_batch;
        dkdv_generic<NJ><<<grid_of(blocks), kGenThreads, smem, st>>>(Q, K, V, dO, LSE, delta, dK, dV, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, float32)"));
    }
    if (dQ) {
        const size_t smem = gen_dq_smem(p.D, p.Dv);
        FR_TRY(set_smem(k->node, dq_generic<NJ>, smem));
        const int64_t blocks = (int64_t)((p.Tq + GB - 1) / GB) * p.batch;
        dq_generic<NJ><<<grid_of(blocks), kGenThreads, smem, st>>>(Q, K, V, dO, LSE, delta, dQ, p);
        FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, float32)"));
    }
    return FR_OK;
}

} /* namespace */

fr_status generic_fwd(const fr_cuda_kctx *k, const Prob &p, const float *Q, const float *K, const float *V, float *O,
                      float *L)
{
    FR_TRY(generic_fits(k->node, p));
    return (p.D <= 64 && p.Dv <= 64) ? fwd_gen_launch<8>(k, p, Q, K, V, O, L) : fwd_gen_launch<32>(k, p, Q, K, V, O, L);
}

fr_status generic_bwd(const fr_cuda_kctx *k, const Prob &p, const float *const *in, const float *delta, float *dQ,
                      float *dK, float *dV)
{
    FR_TRY(generic_fits(k->node, p));
    return (p.D <= 64 && p.Dv <= 64) ? bwd_gen_launch<8>(k, p, in, delta, dQ, dK, dV)
                                     : bwd_gen_launch<32>(k, p, in, delta, dQ, dK, dV);
}

} /* namespace fr_attn */
