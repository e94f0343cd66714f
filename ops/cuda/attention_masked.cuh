/* Attention and AttentionGrad on the GPU, exact float32, for what the float32 flash kernels of
 * attention.cu do not take: a sliding window (attribute window > 0), softcap, segment ids or a
 * mask input (ops/attention.h). See attention_masked.cu. Pointers are device memory; the
 * node's shapes are checked already. */
#ifndef FR_ATTENTION_MASKED_CUH
#define FR_ATTENTION_MASKED_CUH

#include "ops/cuda/cuda_kernel.h"
extern "C" {
#include "ops/attention.h"
}

/* mask, sk, sq: the mask input's and segment ids' tensors (NULL: none). */
FR_NODISCARD fr_status fr_attn_masked_fwd(const fr_cuda_kctx *k, const fr_attn_attrs *a, const fr_attn_geom *g, const float *Q,
                             const float *K, const float *V, const fr_tensor *mask, const fr_tensor *sk,
                             const fr_tensor *sq, float *O, float *LSE);
/* in: Q, K, V, O, LSE, dO; delta: batch * Tq floats of scratch; dQ/dK/dV may be NULL. */
FR_NODISCARD fr_status fr_attn_masked_bwd(const fr_cuda_kctx *k, const fr_attn_attrs *a, const fr_attn_geom *g,
                             const float *const *in, const fr_tensor *mask, const fr_tensor *sk,
                             const fr_tensor *sq, float *delta, float *dQ, float *dK, float *dV);

#endif
