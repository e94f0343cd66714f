/* Training-mode dropout's mask, written once for the CPU kernel (ops/dropout.c) and the CUDA
 * one (ops/cuda/dropout.cu), so both draw the same mask bit for bit.
 *
 * No generator state: whether element i of a node is kept is a counter-based hash of
 *     (seed, step, micro-batch, the node's stream, i)
 * built from splitmix64's finalizer (a bijective 64-bit mix; the same construction as the
 * stochastic rounding of --master-weights bf16, runtime/train/optim_lowp.h). The seed (--seed) and
 * the step count are checkpointed, so a resumed run draws the masks the uninterrupted run
 * would have, and the backward recomputes the forward's mask instead of storing it.
 *
 * Element i is dropped when the upper 32 bits of mix64(node_key + golden * (i + 1)) fall
 * below the threshold round(p * 2^32): probability p within 2^-33. A kept element is scaled
 * by 1 / (1 - p) (rounded once to float32), as torch.nn.Dropout does in training. */
#ifndef FR_DROPOUT_MASK_H
#define FR_DROPOUT_MASK_H

#include <stdint.h>

#ifdef __CUDACC__
#define FR_DROPOUT_FN static __host__ __device__ __forceinline__
#else
#define FR_DROPOUT_FN static inline
#endif

#define FR_DROPOUT_GOLDEN 0x9E3779B97F4A7C15ull
/* Keeps dropout's stream apart from stochastic rounding's under the same seed. */
#define FR_DROPOUT_DOMAIN 0xD50F0E17A5C3B2E1ull

FR_DROPOUT_FN uint64_t fr_dropout_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The key of one node in one micro-batch of one step; stream is the node's `seed` attribute. */
FR_DROPOUT_FN uint64_t fr_dropout_node_key(uint64_t seed, int64_t step, int64_t micro, uint64_t stream)
{
    uint64_t k = fr_dropout_mix64((seed ^ FR_DROPOUT_DOMAIN) + FR_DROPOUT_GOLDEN * (uint64_t)step);
    k = fr_dropout_mix64(k + (uint64_t)micro);
    return fr_dropout_mix64(k ^ fr_dropout_mix64(stream));
}

/* 32 uniform bits for element i under a node key. */
FR_DROPOUT_FN uint32_t fr_dropout_bits(uint64_t node_key, int64_t i)
{
    return (uint32_t)(fr_dropout_mix64(node_key + FR_DROPOUT_GOLDEN * ((uint64_t)i + 1u)) >> 32);
}

/* 1 when element i is kept (threshold: fr_dropout_threshold). */
FR_DROPOUT_FN int fr_dropout_keep(uint64_t node_key, int64_t i, uint32_t threshold)
{
    return fr_dropout_bits(node_key, i) >= threshold;
}

/* round(p * 2^32) for p in [0, 1): 0 keeps everything. Host side (the launcher computes it). */
static inline uint32_t fr_dropout_threshold(double p)
{
    if (!(p > 0)) return 0;
    double t = p * 4294967296.0 + 0.5;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* The scale of kept elements, 1 / (1 - p) rounded once to float32. */
static inline float fr_dropout_scale(double p) { return (float)(1.0 / (1.0 - p)); }

/* The name of the graph input the trainer feeds with the key of each micro-batch: int64 [3] =
 * {seed, step, micro-batch index within the step}. */
#define FR_DROPOUT_KEY_INPUT "fp8run.dropout_key"
#define FR_DROPOUT_KEY_LEN 3

#endif
