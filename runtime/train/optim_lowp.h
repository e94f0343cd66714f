/* Low-precision optimizer state and master weights: the element formats and the per-element
 * arithmetic shared by the CPU optimizer (runtime/train/optim_lowp.c) and the CUDA kernels, written
 * once here as inline functions so both produce the same bytes.
 *
 * State layout (per parameter, per AdamW slot; what a data-parallel shard must respect):
 *   fp32  numel float32.
 *   bf16  numel uint16 bfloat16 bit patterns, rounded to nearest even.
 *   fp8   numel uint8 E4M3 codes, then ceil(numel / FR_LOWP_BLOCK) float32 scales: block b
 *         covers elements [b*128, min(numel, (b+1)*128)) of the parameter's flat (row-major)
 *         layout; a shard boundary must fall on a multiple of 128 elements.
 *         exp_avg (m):     code = E4M3(m / s), s = absmax(m over the block) / 448.
 *         exp_avg_sq (v):  the block holds w = sqrt(v): code = E4M3(w / s), s = absmax(w) / 448;
 *                          v = (decode(code) * s)^2.
 *   Why sqrt(v): v is a square, so its dynamic range within a block is twice that of the
 *   gradients (in octaves). E4M3 with one scale covers 448 / 2^-9, about 2^17.8; a v stored
 *   directly underflows to 0 for elements 2^-8.9 below the block's largest gradient, and a zero
 *   v with a nonzero m turns the update m / (sqrt(v) + eps) into m / eps, a blow-up. Storing
 *   sqrt(v) covers gradients 2^17.8 apart, and the update only needs sqrt(v). (torchao's
 *   AdamWFp8 keeps both moments as E4M3 with per-block absmax scales; TE's FusedAdam likewise
 *   scales its FP8 moments; keeping the square root is the range care for v.) E4M3 rather
 *   than E5M2: 3 mantissa bits (relative step 2^-4) where the moments' range is already
 *   handled by the block scale.
 *   A step decodes, updates in float32 exactly as the FP32 AdamW does (runtime/train/optimizer.h),
 *   updates the parameter with the unquantized new moments, then stores them quantized.
 *   A block whose absmax is 0 stores scale 0 and zero codes. NaN/Inf moments store as NaN.
 *
 * Master weights bf16 (stochastic rounding): after each step, the float32 result p is rounded
 * to a bfloat16 value with probability proportional to its distance from the two neighbours:
 * bits(p) + r, truncated to the upper 16 bits, where r is the low 16 bits of a counter-based
 * hash of (seed, step, parameter index, element index) (splitmix64 finalizer). No generator
 * state: the seed (the trainer's --seed) and the step count, both checkpointed, reproduce it.
 * A finite value never rounds to Inf (it saturates to the largest bf16); NaN/Inf stay as they
 * are (NaN canonical). The parameter buffers hold the bf16 values in float32 on the CPU. */
#ifndef FR_OPTIM_LOWP_H
#define FR_OPTIM_LOWP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "graph/fp8_format.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define FR_LOWP_FN static inline __host__ __device__
#else
#define FR_LOWP_FN static inline
#endif

#define FR_LOWP_BLOCK 128

/* Float32 operations rounded one by one: on the device the rounding intrinsics keep nvcc from
 * contracting a product and a sum into an FMA (the CPU rounds both). */
#ifdef __CUDA_ARCH__
#define FR_LOWP_MUL(a, b) __fmul_rn((a), (b))
#define FR_LOWP_ADD(a, b) __fadd_rn((a), (b))
#define FR_LOWP_DIV(a, b) __fdiv_rn((a), (b))
#define FR_LOWP_SQRT(a) __fsqrt_rn(a)
#else
#define FR_LOWP_MUL(a, b) ((a) * (b))
#define FR_LOWP_ADD(a, b) ((a) + (b))
#define FR_LOWP_DIV(a, b) ((a) / (b))
#define FR_LOWP_SQRT(a) sqrtf(a)
#endif

typedef enum fr_opt_state_dtype {
    FR_OPT_STATE_F32 = 0,
    FR_OPT_STATE_BF16 = 1,
    FR_OPT_STATE_FP8 = 2
} fr_opt_state_dtype;

/* Bytes of one state slot of n elements in the dtype (codes plus scales for fp8). */
int64_t fr_lowp_state_bytes(fr_opt_state_dtype dt, int64_t n);
/* "fp32", "bf16", "fp8"; NULL for an unknown value. */
const char *fr_lowp_state_name(fr_opt_state_dtype dt);

/* bfloat16, round to nearest even; every NaN -> 0x7FFF (as graph/tensor.c and the H100 do). */
FR_LOWP_FN uint16_t fr_lowp_to_bf16(float f)
{
    uint32_t x = fr_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

FR_LOWP_FN float fr_lowp_from_bf16(uint16_t b) { return fr_bits_f32((uint32_t)b << 16); }

/* splitmix64's finalizer: a bijective 64-bit mix. */
FR_LOWP_FN uint64_t fr_lowp_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The per-parameter key of one step's stochastic rounding. */
FR_LOWP_FN uint64_t fr_lowp_sr_key(uint64_t seed, int64_t step, int param)
{
    return fr_lowp_mix64(fr_lowp_mix64(seed + 0x9E3779B97F4A7C15ull * (uint64_t)step) + (uint64_t)(uint32_t)param);
}

/* Stochastic rounding of p to a bfloat16 value (returned as float32). */
FR_LOWP_FN float fr_lowp_sr_bf16(float p, uint64_t key, int64_t k)
{
    uint32_t u = fr_f32_bits(p);
    if ((u & 0x7f800000u) == 0x7f800000u) return fr_lowp_from_bf16(fr_lowp_to_bf16(p));
    uint32_t r = (uint32_t)(fr_lowp_mix64(key + (uint64_t)k) & 0xFFFFu);
    uint32_t s = u & 0x80000000u, a = u & 0x7fffffffu;
    uint32_t t = (a + r) & 0xFFFF0000u;
    if (t >= 0x7f800000u) t = 0x7f7f0000u; /* largest finite bf16 */
    return fr_bits_f32(s | t);
}

/* The scale of a block whose largest magnitude is absmax (0 for an all-zero block). */
FR_LOWP_FN float fr_lowp_block_scale(float absmax) { return FR_LOWP_DIV(absmax, FR_E4M3_MAX); }

/* E4M3 with saturation, round to nearest even: the sm_89+ conversion on the device, and
 * graph/fp8_format.h's bit-exact emulation of it on the host. */
FR_LOWP_FN uint8_t fr_lowp_e4m3(float x)
{
#ifdef __CUDA_ARCH__
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
#else
    return fr_f32_to_e4m3(x, 1);
#endif
}

FR_LOWP_FN float fr_lowp_e4m3_f32(uint8_t q)
{
#ifdef __CUDA_ARCH__
    return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3)));
#else
    return fr_e4m3_to_f32(q);
#endif
}

FR_LOWP_FN uint8_t fr_lowp_encode(float x, float scale)
{
    return scale == 0.0f ? (uint8_t)0 : fr_lowp_e4m3(FR_LOWP_DIV(x, scale));
}

FR_LOWP_FN float fr_lowp_decode(uint8_t q, float scale) { return FR_LOWP_MUL(fr_lowp_e4m3_f32(q), scale); }

/* absmax update that keeps a NaN (fmaxf would drop it). */
FR_LOWP_FN float fr_lowp_absmax(float acc, float x)
{
    float a = x < 0 ? -x : x;
    return (a > acc || a != a) ? a : acc;
}

/* The per-step AdamW factors, computed by runtime/train/optimizer.c exactly as its FP32 path does. */
typedef struct fr_lowp_adamw {
    int decay;            /* decoupled weight decay applies to this parameter */
    float keep;           /* (f)(1 - lr*wd) */
    float b1, one_b1, b2, one_b2, neg_step, bc2_sqrt, eps;
} fr_lowp_adamw;

/* One element's AdamW update in float32 (the order of runtime/train/optimizer.h); m and v are the
 * decoded moments, updated in place; returns the new parameter before any master rounding. */
FR_LOWP_FN float fr_lowp_adamw_elem(const fr_lowp_adamw *a, float p, float g, float *m, float *v)
{
    if (a->decay) p = FR_LOWP_MUL(p, a->keep);
    *m = fmaf(g, a->one_b1, FR_LOWP_MUL(*m, a->b1));
    *v = fmaf(FR_LOWP_MUL(g, a->one_b2), g, FR_LOWP_MUL(*v, a->b2));
    const float d = FR_LOWP_ADD(FR_LOWP_DIV(FR_LOWP_SQRT(*v), a->bc2_sqrt), a->eps);
    return FR_LOWP_ADD(p, FR_LOWP_DIV(FR_LOWP_MUL(a->neg_step, *m), d));
}

/* One parameter's AdamW step with state in `dt`: m/v point at the slot's storage (float,
 * uint16 or uint8 codes), ms/vs at the fp8 scales (NULL otherwise). master_bf16: stochastic
 * rounding with key (fr_lowp_sr_key). */
void fr_lowp_adamw_step(const fr_lowp_adamw *a, fr_opt_state_dtype dt, float *p, const float *g, int64_t n,
                        void *m, void *v, float *ms, float *vs, int master_bf16, uint64_t key);

/* ---- bulk conversions (runtime/train/optim_lowp.c) ---- */
/* Quantize n floats into fp8 blocks: codes[n], scales[ceil(n/128)]. */
void fr_lowp_quantize_blocks(const float *x, int64_t n, uint8_t *codes, float *scales);
/* The inverse: out[k] = decode(codes[k], scales[k / 128]). */
void fr_lowp_dequantize_blocks(const uint8_t *codes, const float *scales, int64_t n, float *out);

#endif
