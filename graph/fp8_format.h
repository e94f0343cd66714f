/* FP8 number formats (OCP E4M3FN and E5M2): exact float32 <-> fp8 conversion, bulk
 * quantize / dequantize with a scale, and amax.
 *
 * The float32 -> fp8 conversion matches NVIDIA's __nv_cvt_float_to_fp8() bit for bit (its
 * host fallback in cuda_fp8.hpp, which the sm_89+ `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`
 * instruction agrees with), so CPU emulation and GPU kernels produce the same bytes:
 *   - round to nearest, ties to even (on the float value, no double rounding);
 *   - |x| <= min_subnormal/2 -> signed zero (-0.0 -> 0x80);
 *   - saturate=1 (__NV_SATFINITE): finite overflow AND +-Inf -> +-max
 *     (E4M3 0x7E/0xFE = +-448, E5M2 0x7B/0xFB = +-57344). "Overflow" means the value
 *     rounds (RNE) past max: E4M3 |x| > 464, E5M2 |x| >= 61440; 464 itself ties to 448;
 *   - saturate=0 (__NV_NOSAT, ONNX Cast saturate=0): overflow and +-Inf -> E4M3 NaN
 *     0x7F/0xFF (sign kept), E5M2 +-Inf 0x7C/0xFC;
 *   - any NaN input (either sign, any payload) -> 0x7F in both formats (CUDA canonicalizes
 *     the NaN to 0x7FFFFFFF first, so the sign is dropped; for E5M2 0x7F is a quiet NaN).
 * Decoding is exact for all 256 codes; NaN codes (E4M3 S.1111.111, E5M2 S.11111.xx with
 * xx != 0) decode to the float 0x7FFFFFFF, sign dropped, as the sm_90 decoder
 * (cvt.rn.f16x2.e4m3x2 / e5m2x2, then half -> float) does; E5M2 S.11111.00 to +-Inf.
 * All of this was checked on an H100 for every float32 pattern and every code. */
#ifndef FR_FP8_FORMAT_H
#define FR_FP8_FORMAT_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" { /* C functions (here and in the graph headers), also when a CUDA file includes this */
#endif

#include "graph/dtype.h"
#include "graph/status.h"

#define FR_E4M3_MAX 448.0f
#define FR_E5M2_MAX 57344.0f
#define FR_E4M3_MIN_NORMAL 0.015625f          /* 2^-6 */
#define FR_E4M3_MIN_SUBNORMAL 0.001953125f    /* 2^-9 */
#define FR_E5M2_MIN_NORMAL 6.103515625e-05f   /* 2^-14 */
#define FR_E5M2_MIN_SUBNORMAL 1.52587890625e-05f /* 2^-16 */

/* Codes worth naming. */
#define FR_E4M3_MAX_CODE 0x7Eu
#define FR_E4M3_NAN_CODE 0x7Fu
#define FR_E5M2_MAX_CODE 0x7Bu
#define FR_E5M2_INF_CODE 0x7Cu
#define FR_E5M2_NAN_CODE 0x7Fu /* what conversion of a NaN produces */
#define FR_FP8_DECODED_NAN_BITS 0x7FFFFFFFu /* float bits a NaN code decodes to */

/* ---- scalar conversions (inline: they sit in kernels' inner loops; in CUDA files also device
 * functions, so the GPU's Cast runs this very code) ----
 * fr_f32_to_e4m3 / fr_f32_to_e5m2(x, saturate): saturate nonzero = SATFINITE, 0 = overflow
 * to NaN (E4M3) / Inf (E5M2). fr_e4m3_to_f32 / fr_e5m2_to_f32: exact decode.
 * Encoding works on the float's bit pattern with integer arithmetic only, so the result
 * does not depend on the FPU rounding mode or on FTZ/DAZ settings. */
#ifdef __CUDACC__
#define FR_FP8_FN static __host__ __device__ __forceinline__
#else
#define FR_FP8_FN static inline
#endif

/* A float's bit pattern, and back. */
FR_FP8_FN uint32_t fr_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

FR_FP8_FN float fr_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One encoder for both formats.
 *   man_bits  stored mantissa bits (3 / 2), bias: exponent bias (7 / 15)
 *   ovf_bits  float bit pattern of the smallest magnitude that rounds past max
 *   max_code  code of +max, ovf_code: code of a non-saturated overflow (NaN / Inf) */
FR_FP8_FN uint8_t fr_fp8_encode_(uint32_t u, int saturate, unsigned man_bits, unsigned bias,
                                  uint32_t ovf_bits, uint8_t max_code, uint8_t ovf_code)
{
    uint8_t s = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7Fu; /* NaN: canonical, sign dropped (as CUDA does) */
    if (a >= ovf_bits) return (uint8_t)(s | (saturate ? max_code : ovf_code)); /* incl. Inf */
    if (a >= (127u - bias + 1u) << 23) {
        /* normal: rebias the exponent, then round the mantissa to nearest even; a carry
         * out of the mantissa correctly bumps the exponent (never past max, see above) */
        uint32_t r = a - ((127u - bias) << 23);
        unsigned sh = 23u - man_bits;
        r += ((1u << (sh - 1)) - 1u) + ((r >> sh) & 1u);
        return (uint8_t)(s | (r >> sh));
    }
    /* subnormal target: value = m * 2^(e - 150); code = round(value / 2^(1 - bias - man_bits)) */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7FFFFFu) | (e ? 0x800000u : 0u);
    unsigned sh = 150u + 1u - bias - man_bits - (e ? e : 1u);
    if (sh >= 25u) return s; /* m < 2^24 <= half: below half the smallest subnormal */
    uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
    q += (rem > half) | ((rem == half) & (q & 1u));
    return (uint8_t)(s | q);
}

/* E4M3: max 448 = 1.75 * 2^8; the next step would be 480, so |x| > 464 overflows
 * (464 itself ties to the even code 0x7E). 0x43E80001 is the float just above 464. */
FR_FP8_FN uint8_t fr_f32_to_e4m3(float x, int saturate)
{
    return fr_fp8_encode_(fr_f32_bits(x), saturate, 3u, 7u, 0x43E80001u, FR_E4M3_MAX_CODE,
                          FR_E4M3_NAN_CODE);
}

/* E5M2: max 57344 = 1.75 * 2^15; the next step is 2^16 (Inf), so |x| >= 61440 overflows
 * (61440 ties to the even code 0x7C). 0x47700000 is 61440. */
FR_FP8_FN uint8_t fr_f32_to_e5m2(float x, int saturate)
{
    return fr_fp8_encode_(fr_f32_bits(x), saturate, 2u, 15u, 0x47700000u, FR_E5M2_MAX_CODE,
                          FR_E5M2_INF_CODE);
}

FR_FP8_FN float fr_e4m3_to_f32(uint8_t q)
{
    uint32_t s = (uint32_t)(q & 0x80u) << 24;
    uint32_t e = (q >> 3) & 0xFu, m = q & 0x7u;
    if ((q & 0x7Fu) == 0x7Fu) return fr_bits_f32(FR_FP8_DECODED_NAN_BITS);
    if (e == 0) return fr_bits_f32(s | fr_f32_bits((float)m * 0x1p-9f)); /* exact */
    return fr_bits_f32(s | ((e + 127u - 7u) << 23) | (m << 20));
}

FR_FP8_FN float fr_e5m2_to_f32(uint8_t q)
{
    uint32_t s = (uint32_t)(q & 0x80u) << 24;
    uint32_t e = (q >> 2) & 0x1Fu, m = q & 0x3u;
    if (e == 31u) return fr_bits_f32(m ? FR_FP8_DECODED_NAN_BITS : (s | 0x7F800000u));
    if (e == 0) return fr_bits_f32(s | fr_f32_bits((float)m * 0x1p-16f));
    return fr_bits_f32(s | ((e + 127u - 15u) << 23) | (m << 21));
}

/* 1 when the fp8 code is NaN in the format `fmt` (FR_F8E4M3 or FR_F8E5M2), else 0. */
int fr_fp8_is_nan(uint8_t q, fr_dtype fmt);
/* The format's largest finite value (448 / 57344); 0 for any other dtype. */
float fr_fp8_max(fr_dtype fmt);

/* out[i] = cvt_sat(x[i] * scale). The product is formed in float32 (one rounding), then
 * converted, as the GPU kernels do. fmt is FR_F8E4M3 or FR_F8E5M2, anything else
 * (including the FNUZ variants) is FR_ERR_UNSUPPORTED. n == 0 is allowed (pointers may be NULL). */
FR_NODISCARD fr_status fr_fp8_quantize(const float *x, int64_t n, float scale, fr_dtype fmt, uint8_t *out);
/* out[i] = cvt(x[i]) with the chosen saturation (ONNX Cast / CastLike to fp8). */
FR_NODISCARD fr_status fr_fp8_convert(const float *x, int64_t n, fr_dtype fmt, int saturate, uint8_t *out);
/* out[i] = decode(q[i]) * scale_inv (float32 product). */
FR_NODISCARD fr_status fr_fp8_dequantize(const uint8_t *q, int64_t n, float scale_inv, fr_dtype fmt, float *out);

/* max |x[i]|: a quiet NaN if any element is NaN, else +Inf if any is +-Inf, else the finite
 * maximum; 0 for n == 0. Callers decide what a non-finite amax means for the scale. */
float fr_amax(const float *x, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
