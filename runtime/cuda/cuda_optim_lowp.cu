/* AdamW with bf16 / block-scaled fp8 moments and bf16 master weights on the device: the
 * multi-tensor layout of cuda_train_kernels.cu (one CUDA block per chunk), the element formats
 * and float32 arithmetic of runtime/train/optim_lowp.h, shared with the CPU optimizer, so on the same
 * gradients both write the same bytes. A CUDA block of FR_LOWP_BLOCK threads walks its chunk
 * one fp8 block at a time: each thread one element, then the block's absmax for its scale by warp
 * shuffles and one barrier (max is exact and order-free, so the scale equals the CPU's; a
 * shared-memory tree of 8 barriers a block made the 8B's update latency-bound). */
#include <cuda_runtime.h>
#include <math.h>

#include "runtime/cuda/cuda_train_kernels.h"
#include "runtime/train/optim_lowp.h"

static_assert(FR_MT_CHUNK % FR_LOWP_BLOCK == 0, "an fp8 block must not straddle two chunks");

/* The absmax over a warp, every lane getting it. fr_lowp_absmax is max with a NaN kept, exact
 * and order-free, so shuffles in any order give the CPU's result. */
__device__ float warp_absmax(float x)
{
    float a = fr_lowp_absmax(0.0f, x); /* as the CPU starts: -0 counts as +0, NaN stays */
    for (int o = 16; o > 0; o >>= 1) a = fr_lowp_absmax(a, __shfl_xor_sync(0xffffffffu, a, o));
    return a;
}

__global__ void k_adamw_lowp(const fr_mt_chunk *chunks, const fr_mt_entry *e, int use_acc, const fr_step_scalars *s,
                             fr_adamw_args a, int dt, int master_bf16, unsigned long long seed)
{
    /* the warps' absmaxes of m and sqrt(v), by the parity of the fp8 block: one barrier a block
       (a thread writes sh[p] again only after the next block's barrier, which every thread
       reaches after reading sh[p]) */
    __shared__ float sh[2][2][FR_LOWP_BLOCK / 32];
    if (!s->ok) return;
    const fr_mt_chunk c = chunks[blockIdx.x];
    const fr_mt_entry en = e[c.entry];
    const float *g = use_acc ? en.acc : en.g;
    const float div = (float)use_acc; /* > 1: the micro-batches' sum, divided here (fr_cuda_mt_check) */
    const long long w = s->tstep - a.base - 1; /* in [0, FR_OPT_WINDOW) by the queue's bound */
    fr_lowp_adamw f;
    f.decay = en.decay && a.decay_on;
    f.keep = a.keep;
    f.b1 = a.b1;
    f.one_b1 = a.one_b1;
    f.b2 = a.b2;
    f.one_b2 = a.one_b2;
    f.neg_step = a.neg_step[w];
    f.bc2_sqrt = a.bc2_sqrt[w];
    f.eps = a.eps;
    const uint64_t key = fr_lowp_sr_key(seed, s->tstep, c.entry);
    int par = 0;
    for (long long b0 = c.start; b0 < c.start + c.len; b0 += FR_LOWP_BLOCK, par ^= 1) {
        const long long k = b0 + threadIdx.x;
        const int on = k < c.start + c.len;
        float m = 0, v = 0;
        if (on) {
            if (dt == FR_OPT_STATE_F32) {
                m = en.s0[k];
                v = en.s1[k];
            } else if (dt == FR_OPT_STATE_BF16) {
                m = fr_lowp_from_bf16(((const uint16_t *)en.s0)[k]);
                v = fr_lowp_from_bf16(((const uint16_t *)en.s1)[k]);
            } else {
                m = fr_lowp_decode(((const uint8_t *)en.s0)[k], en.sc0[k / FR_LOWP_BLOCK]);
                const float r = fr_lowp_decode(((const uint8_t *)en.s1)[k], en.sc1[k / FR_LOWP_BLOCK]);
                v = FR_LOWP_MUL(r, r);
            }
            const float gm = use_acc > 1 ? __fdiv_rn(g[k], div) : g[k];
            const float gk = s->clip ? __fmul_rn(gm, s->coef) : gm;
            const float p = fr_lowp_adamw_elem(&f, en.p[k], gk, &m, &v);
            en.p[k] = master_bf16 ? fr_lowp_sr_bf16(p, key, k) : p;
            if (dt == FR_OPT_STATE_F32) {
                en.s0[k] = m;
                en.s1[k] = v;
            } else if (dt == FR_OPT_STATE_BF16) {
                ((uint16_t *)en.s0)[k] = fr_lowp_to_bf16(m);
                ((uint16_t *)en.s1)[k] = fr_lowp_to_bf16(v);
            }
        }
        if (dt != FR_OPT_STATE_FP8) continue; /* uniform across the block: no divergent barrier */
        const float r = FR_LOWP_SQRT(v);
        const float am = warp_absmax(on ? m : 0.0f), ar = warp_absmax(on ? r : 0.0f);
        if ((threadIdx.x & 31) == 0) {
            sh[par][0][threadIdx.x / 32] = am;
            sh[par][1][threadIdx.x / 32] = ar;
        }
        __syncthreads();
        float bm = sh[par][0][0], br = sh[par][1][0];
        for (int i = 1; i < FR_LOWP_BLOCK / 32; i++) {
            bm = fr_lowp_absmax(bm, sh[par][0][i]);
            br = fr_lowp_absmax(br, sh[par][1][i]);
        }
        const float sm = fr_lowp_block_scale(bm), sv = fr_lowp_block_scale(br);
        if (on) {
            ((uint8_t *)en.s0)[k] = fr_lowp_encode(m, sm);
            ((uint8_t *)en.s1)[k] = fr_lowp_encode(r, sv);
        }
        if (threadIdx.x == 0) {
            en.sc0[b0 / FR_LOWP_BLOCK] = sm;
            en.sc1[b0 / FR_LOWP_BLOCK] = sv;
        }
    }
}

extern "C" cudaError_t fr_cuda_mt_adamw_lowp(const fr_mt_chunk *chunks, int n_chunks, const fr_mt_entry *e,
                                             int use_acc, const fr_step_scalars *sc, fr_adamw_args a, int state_dtype,
                                             int master_bf16, unsigned long long seed, cudaStream_t s)
{
    if (n_chunks) k_adamw_lowp<<<n_chunks, FR_LOWP_BLOCK, 0, s>>>(chunks, e, use_acc, sc, a, state_dtype, master_bf16, seed);
    return cudaGetLastError();
}
