/* FP8 bulk conversions, quantize/dequantize and amax. The scalar conversions are inline in
 * fp8_format.h so that CPU kernels (and these loops) compile them into their inner loops. */
#include "graph/fp8_format.h"

#include <math.h>

int fr_fp8_is_nan(uint8_t q, fr_dtype fmt)
{
    if (fmt == FR_F8E4M3) return (q & 0x7Fu) == 0x7Fu;
    if (fmt == FR_F8E5M2) return (q & 0x7Fu) > 0x7Cu;
    return 0;
}

float fr_fp8_max(fr_dtype fmt)
{
    if (fmt == FR_F8E4M3) return FR_E4M3_MAX;
    if (fmt == FR_F8E5M2) return FR_E5M2_MAX;
    return 0.0f;
}

static fr_status check_fmt(fr_dtype fmt, const char *fn)
{
    if (fmt == FR_F8E4M3 || fmt == FR_F8E5M2) return FR_OK;
    return fr_error(FR_ERR_UNSUPPORTED, "%s: dtype %s is not an fp8 format fp8run handles "
                    "(float8e4m3fn or float8e5m2)", fn, fr_dtype_name(fmt));
}

static fr_status check_args(const void *in, int64_t n, const void *out, const char *fn)
{
    if (n < 0)
        return fr_error(FR_ERR_INVALID_ARG, "%s: negative element count %lld", fn, (long long)n);
    if (n > 0 && (!in || !out)) return fr_error(FR_ERR_INVALID_ARG, "%s: NULL buffer", fn);
    return FR_OK;
}

fr_status fr_fp8_quantize(const float *x, int64_t n, float scale, fr_dtype fmt, uint8_t *out)
{
    FR_TRY(check_fmt(fmt, "fp8 quantize"));
    FR_TRY(check_args(x, n, out, "fp8 quantize"));
    if (fmt == FR_F8E4M3)
        for (int64_t i = 0; i < n; i++) out[i] = fr_f32_to_e4m3(x[i] * scale, 1);
    else
        for (int64_t i = 0; i < n; i++) out[i] = fr_f32_to_e5m2(x[i] * scale, 1);
    return FR_OK;
}

fr_status fr_fp8_convert(const float *x, int64_t n, fr_dtype fmt, int saturate, uint8_t *out)
{
    FR_TRY(check_fmt(fmt, "fp8 convert"));
    FR_TRY(check_args(x, n, out, "fp8 convert"));
    if (fmt == FR_F8E4M3)
        for (int64_t i = 0; i < n; i++) out[i] = fr_f32_to_e4m3(x[i], saturate);
    else
        for (int64_t i = 0; i < n; i++) out[i] = fr_f32_to_e5m2(x[i], saturate);
    return FR_OK;
}

fr_status fr_fp8_dequantize(const uint8_t *q, int64_t n, float scale_inv, fr_dtype fmt, float *out)
{
    FR_TRY(check_fmt(fmt, "fp8 dequantize"));
    FR_TRY(check_args(q, n, out, "fp8 dequantize"));
    float table[256]; /* 256 decodes are cheaper than n branches for any real tensor */
    for (int c = 0; c < 256; c++)
        table[c] = fmt == FR_F8E4M3 ? fr_e4m3_to_f32((uint8_t)c) : fr_e5m2_to_f32((uint8_t)c);
    for (int64_t i = 0; i < n; i++) out[i] = table[q[i]] * scale_inv;
    return FR_OK;
}

float fr_amax(const float *x, int64_t n)
{
    float m = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        nan |= a != a;
        m = a > m ? a : m;
    }
    return nan ? fr_bits_f32(0x7FC00000u) : m;
}
