/* Attention / AttentionGrad on the GPU with a sliding window, a mask input, softcap or segment
 * ids, where the tensor-core kernels do not run (see attention_masked.cuh): simple and exact
 * rather than fast. One block of 128 threads per query
 * row (forward, dQ) or per key (dK, dV: every query of every Q batch index reading that K/V,
 * in increasing order, so no atomics and bit-identical runs); the row's scores live in shared
 * memory (Tk floats), the softmax and all sums in float32 with fixed-order tree reductions.
 * Semantics as the CPU reference (ops/attention.c): s_ij = softcap(scale q_i.k_j) + M_ij over
 * the keys the causal bound, the window and the segment ids keep; a fully masked row gives O = 0, LSE = -inf and no
 * gradient; bf16 precision rounds Q, K, V, dO, P and dS where the CPU does. */
#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include "ops/cuda/attention_masked.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace {

constexpr int kT = 128;      /* threads per block */
constexpr int kMaxD = 256;   /* D and Dv up to this (kMaxD / kT accumulators per thread) */
constexpr int kAcc = kMaxD / kT;
constexpr size_t kMaxSmem = 200 * 1024;

struct MProb {
    int64_t batch, Tq, Tk, D, Dv, window;
    float scale;
    int causal, bf16, brank;
    int64_t qdims[FR_MAX_RANK], kv_stride[FR_MAX_RANK], mstride[FR_MAX_RANK];
    int64_t mrow, mcol;
    const float *mask; /* NULL: none */
    float softcap;     /* 0: none */
    const void *sk, *sq; /* segment ids (NULL: none; sq NULL: every query 1) */
    int seg64;
    int64_t seg_per_row;
};

/* offset of Q batch index b under per-dim strides (K/V batch index: kv_stride; mask: mstride) */
__device__ int64_t batch_off(const MProb &p, const int64_t *stride, int64_t b)
{
    int64_t off = 0;
    for (int k = p.brank - 1; k >= 0; k--) {
        off += (b % p.qdims[k]) * stride[k];
        b /= p.qdims[k];
    }
    return off;
}
__device__ int64_t kv_of(const MProb &p, int64_t b) { return batch_off(p, p.kv_stride, b); }
__device__ int64_t mask_off(const MProb &p, int64_t b) { return batch_off(p, p.mstride, b); }

__device__ __forceinline__ float rnd(const MProb &p, float x)
{
    return p.bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : x;
}

/* keys [lo, hi) that row i keeps (fr_attn_row_range) */
__device__ void keys_of(const MProb &p, int64_t i, int64_t *lo, int64_t *hi)
{
    *hi = p.causal ? i + 1 : p.Tk;
    *lo = p.window > 0 && i - p.window + 1 > 0 ? i - p.window + 1 : 0;
}

/* queries [lo, hi) that keep key j */
__device__ void queries_of(const MProb &p, int64_t j, int64_t *lo, int64_t *hi)
{
    *lo = p.causal ? j : 0;
    *hi = p.window > 0 && j + p.window < p.Tq ? j + p.window : p.Tq;
}

/* fixed-order tree reduction over the block (all threads call it) */
template <bool MAX> __device__ float block_reduce(float v, float *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = kT / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = MAX ? fmaxf(red[threadIdx.x], red[threadIdx.x + s]) : red[threadIdx.x] + red[threadIdx.x + s];
        __syncthreads();
    }
    const float r = red[0];
    __syncthreads();
    return r;
}

__device__ float dot(const MProb &p, const float *a, const float *b, int64_t n)
{
    float s = 0.f;
    for (int64_t d = 0; d < n; d++) s += rnd(p, a[d]) * rnd(p, b[d]);
    return s;
}

__device__ int64_t seg_id(const void *ids, int is64, int64_t i)
{
    return is64 ? ((const int64_t *)ids)[i] : (int64_t)((const int *)ids)[i];
}

/* s_ij of Q batch b (query row q, key row k); dcap (NULL: not wanted) receives the softcap's
 * derivative 1 - tanh^2 */
__device__ float score(const MProb &p, const float *q, const float *k, int64_t b, int64_t moff, int64_t i, int64_t j,
                       float *dcap = nullptr)
{
    float s = p.scale * dot(p, q, k, p.D);
    if (p.softcap > 0.f) {
        const float t = tanhf(s / p.softcap);
        s = p.softcap * t;
        if (dcap) *dcap = 1.f - t * t;
    }
    if (p.mask) s += p.mask[moff + i * p.mrow + j * p.mcol];
    if (p.sk) {
        const int64_t r = b / p.seg_per_row, qid = p.sq ? seg_id(p.sq, p.seg64, r * p.Tq + i) : 1;
        if (seg_id(p.sk, p.seg64, r * p.Tk + j) != qid) s = -INFINITY;
    }
    return s;
}

__global__ void __launch_bounds__(kT) mfwd(const float *Q, const float *K, const float *V, float *O, float *L, MProb p)
{
    extern __shared__ float sm[];
    __shared__ float red[kT];
    for (int64_t row = blockIdx.x; row < p.batch * p.Tq; row += gridDim.x) {
        const int64_t b = row / p.Tq, i = row % p.Tq, kv = kv_of(p, b), moff = p.mask ? mask_off(p, b) : 0;
        const float *q = Q + row * p.D, *kb = K + kv * p.Tk * p.D, *vb = V + kv * p.Tk * p.Dv;
        int64_t lo, hi;
        keys_of(p, i, &lo, &hi);
        float m = -INFINITY;
        for (int64_t j = lo + threadIdx.x; j < hi; j += kT) {
            sm[j] = score(p, q, kb + j * p.D, b, moff, i, j);
            m = fmaxf(m, sm[j]);
        }
        m = block_reduce<true>(m, red);
        if (m == -INFINITY) { /* fully masked */
            for (int64_t d = threadIdx.x; d < p.Dv; d += kT) O[row * p.Dv + d] = 0.f;
            if (L && threadIdx.x == 0) L[row] = -INFINITY;
            continue;
        }
        float sum = 0.f;
        for (int64_t j = lo + threadIdx.x; j < hi; j += kT) {
            sm[j] = expf(sm[j] - m);
            sum += sm[j];
        }
        sum = block_reduce<false>(sum, red);
        const float inv = 1.f / sum;
        for (int64_t j = lo + threadIdx.x; j < hi; j += kT) sm[j] = rnd(p, sm[j] * inv);
        __syncthreads();
        for (int64_t d = threadIdx.x; d < p.Dv; d += kT) {
            float acc = 0.f;
            for (int64_t j = lo; j < hi; j++) acc += sm[j] * rnd(p, vb[j * p.Dv + d]);
            O[row * p.Dv + d] = acc;
        }
        if (L && threadIdx.x == 0) L[row] = m + logf(sum);
        __syncthreads();
    }
}

/* Per query row: Delta_i = dO_i . O_i (into delta), dS_i in shared memory, dQ_i = scale dS_i K. */
__global__ void __launch_bounds__(kT) mdq(const float *Q, const float *K, const float *V, const float *O,
                                          const float *LSE, const float *dO, float *delta, float *dQ, MProb p)
{
    extern __shared__ float sm[];
    __shared__ float red[kT];
    for (int64_t row = blockIdx.x; row < p.batch * p.Tq; row += gridDim.x) {
        const int64_t b = row / p.Tq, i = row % p.Tq, kv = kv_of(p, b), moff = p.mask ? mask_off(p, b) : 0;
        const float *q = Q + row * p.D, *kb = K + kv * p.Tk * p.D, *vb = V + kv * p.Tk * p.Dv, *g = dO + row * p.Dv;
        float dl = 0.f;
        for (int64_t d = threadIdx.x; d < p.Dv; d += kT) dl += g[d] * O[row * p.Dv + d];
        dl = block_reduce<false>(dl, red);
        if (threadIdx.x == 0) delta[row] = dl;
        const float l = LSE[row];
        int64_t lo, hi;
        keys_of(p, i, &lo, &hi);
        if (l == -INFINITY) hi = lo; /* fully masked: no gradient */
        for (int64_t j = lo + threadIdx.x; j < hi; j += kT) {
            float dcap = 1.f;
            const float P = expf(score(p, q, kb + j * p.D, b, moff, i, j, &dcap) - l);
            sm[j] = rnd(p, P * (dot(p, g, vb + j * p.Dv, p.Dv) - dl) * dcap);
        }
        __syncthreads();
        for (int64_t d = threadIdx.x; dQ && d < p.D; d += kT) {
            float acc = 0.f;
            for (int64_t j = lo; j < hi; j++) acc += sm[j] * rnd(p, kb[j * p.D + d]);
            dQ[row * p.D + d] = p.scale * acc;
        }
        __syncthreads();
    }
}

/* Per key j of K/V batch kv: dV_j = sum P_ij dO_i, dK_j = scale sum dS_ij q_i over the queries
 * of every Q batch index reading kv, kT queries at a time. */
__global__ void __launch_bounds__(kT) mdkdv(const float *Q, const float *K, const float *V, const float *LSE,
                                            const float *dO, const float *delta, float *dK, float *dV, MProb p,
                                            int64_t kv_batch)
{
    __shared__ float pc[kT], dsc[kT];
    for (int64_t key = blockIdx.x; key < kv_batch * p.Tk; key += gridDim.x) {
        const int64_t kv = key / p.Tk, j = key % p.Tk;
        const float *kj = K + key * p.D, *vj = V + key * p.Dv;
        float ak[kAcc] = {}, av[kAcc] = {};
        int64_t ilo, ihi;
        queries_of(p, j, &ilo, &ihi);
        for (int64_t b = 0; b < p.batch; b++) {
            if (kv_of(p, b) != kv) continue;
            const int64_t moff = p.mask ? mask_off(p, b) : 0;
            for (int64_t c = ilo; c < ihi; c += kT) {
                const int64_t i = c + threadIdx.x, row = b * p.Tq + i;
                float P = 0.f, dS = 0.f;
                if (i < ihi && LSE[row] != -INFINITY) {
                    float dcap = 1.f;
                    P = expf(score(p, Q + row * p.D, kj, b, moff, i, j, &dcap) - LSE[row]);
                    dS = rnd(p, P * (dot(p, dO + row * p.Dv, vj, p.Dv) - delta[row]) * dcap);
                }
                pc[threadIdx.x] = rnd(p, P);
                dsc[threadIdx.x] = dS;
                __syncthreads();
                const int64_t n = ihi - c < kT ? ihi - c : kT;
                for (int t = 0; t < kAcc; t++) {
                    const int64_t d = threadIdx.x + t * kT;
                    for (int64_t r = 0; r < n; r++) {
                        const int64_t rr = b * p.Tq + c + r;
                        if (d < p.Dv) av[t] += pc[r] * rnd(p, dO[rr * p.Dv + d]);
                        if (d < p.D) ak[t] += dsc[r] * rnd(p, Q[rr * p.D + d]);
                    }
                }
                __syncthreads();
            }
        }
        for (int t = 0; t < kAcc; t++) {
            const int64_t d = threadIdx.x + t * kT;
            if (dV && d < p.Dv) dV[key * p.Dv + d] = av[t];
            if (dK && d < p.D) dK[key * p.D + d] = p.scale * ak[t];
        }
    }
}

unsigned grid_for(int64_t blocks) { return (unsigned)(blocks < 1 ? 1 : blocks > (1 << 20) ? (1 << 20) : blocks); }

template <class F> fr_status smem_for(const fr_node *n, F *kernel, size_t bytes)
{
    if (bytes > kMaxSmem)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "Tk = %zu keys: too many for the masked/windowed attention kernel "
                             "(up to %zu)", bytes / sizeof(float), kMaxSmem / sizeof(float));
    if (bytes <= 48 * 1024) return FR_OK;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess)
        return fr_node_error(n, FR_ERR_DEVICE, "%zu bytes of shared memory per block: %s", bytes, cudaGetErrorString(e));
    return FR_OK;
}

fr_status make_prob(const fr_node *n, const fr_attn_attrs *a, const fr_attn_geom *g, const fr_tensor *mask,
                    const fr_tensor *sk, const fr_tensor *sq, MProb *p)
{
    memset(p, 0, sizeof *p);
    if (g->D > kMaxD || g->Dv > kMaxD)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "head dims D = %lld, Dv = %lld: the masked/windowed attention "
                             "kernel takes up to %d", (long long)g->D, (long long)g->Dv, kMaxD);
    fr_attn_mask mg;
    FR_TRY(fr_attn_mask_geometry(n, g, mask ? mask->rank : 0, mask ? mask->dims : NULL, &mg));
    p->batch = g->batch;
    p->Tq = g->Tq;
    p->Tk = g->Tk;
    p->D = g->D;
    p->Dv = g->Dv;
    p->window = a->window;
    p->scale = a->scale;
    p->causal = a->causal;
    p->bf16 = a->bf16;
    p->brank = g->brank;
    for (int k = 0; k < g->brank; k++) {
        p->qdims[k] = g->qdims[k];
        p->kv_stride[k] = g->kv_stride[k];
        p->mstride[k] = mg.bstride[k];
    }
    p->mrow = mg.row;
    p->mcol = mg.col;
    p->mask = mask ? (const float *)mask->data : nullptr;
    fr_attn_seg sg;
    FR_TRY(fr_attn_seg_geometry(n, g, sk ? sk->dtype : FR_I64, sk ? sk->rank : 0, sk ? sk->dims : NULL,
                                sq ? sq->dtype : FR_I64, sq ? sq->rank : 0, sq ? sq->dims : NULL, &sg));
    if (sk && sq && sk->dtype != sq->dtype)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "Sk is %s and Sq %s: the CUDA kernels take one id dtype",
                             fr_dtype_name(sk->dtype), fr_dtype_name(sq->dtype));
    p->softcap = a->softcap;
    p->sk = sk ? sk->data : nullptr;
    p->sq = sq ? sq->data : nullptr;
    p->seg64 = sk && sk->dtype == FR_I64;
    p->seg_per_row = sg.per_row;
    return FR_OK;
}

} /* namespace */

fr_status fr_attn_masked_fwd(const fr_cuda_kctx *k, const fr_attn_attrs *a, const fr_attn_geom *g, const float *Q,
                             const float *K, const float *V, const fr_tensor *mask, const fr_tensor *sk,
                             const fr_tensor *sq, float *O, float *LSE)
{
    MProb p;
    FR_TRY(make_prob(k->node, a, g, mask, sk, sq, &p));
    const size_t smem = (size_t)g->Tk * sizeof(float);
    FR_TRY(smem_for(k->node, mfwd, smem));
    mfwd<<<grid_for(g->batch * g->Tq), kT, smem, k->cu->stream>>>(Q, K, V, O, LSE, p);
    return fr_cuda_check_launch(k->node, "Attention(masked/windowed)");
}

fr_status fr_attn_masked_bwd(const fr_cuda_kctx *k, const fr_attn_attrs *a, const fr_attn_geom *g,
                             const float *const *in, const fr_tensor *mask, const fr_tensor *sk,
                             const fr_tensor *sq, float *delta, float *dQ, float *dK, float *dV)
{
    MProb p;
    FR_TRY(make_prob(k->node, a, g, mask, sk, sq, &p));
    const size_t smem = (size_t)g->Tk * sizeof(float);
    FR_TRY(smem_for(k->node, mdq, smem));
    cudaStream_t st = k->cu->stream;
    mdq<<<grid_for(g->batch * g->Tq), kT, smem, st>>>(in[0], in[1], in[2], in[3], in[4], in[5], delta, dQ, p);
    FR_TRY(fr_cuda_check_launch(k->node, "AttentionGrad(dQ, masked/windowed)"));
    if (!dK && !dV) return FR_OK;
    mdkdv<<<grid_for(g->kv_batch * g->Tk), kT, 0, st>>>(in[0], in[1], in[2], in[4], in[5], delta, dK, dV, p,
                                                         g->kv_batch);
    return fr_cuda_check_launch(k->node, "AttentionGrad(dK, dV, masked/windowed)");
}
