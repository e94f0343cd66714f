/* The bfloat16 contract's checks (tests/bf16_check.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"

/* float32 bits rounded to bfloat16, nearest even (NaN kept a NaN) */
static uint16_t round_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float widen(uint16_t b)
{
    const uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

fr_tensor *bc_bf16_pair(fr_tensor *t)
{
    CU_ASSERT_EQUAL_FATAL(t->dtype, FR_F32);
    fr_tensor *b = tt_new(FR_BF16, t->rank, t->dims);
    float *f = t->data;
    uint16_t *h = b->data;
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        h[i] = round_bits(f[i]);
        f[i] = widen(h[i]);
    }
    return b;
}

int64_t bc_bits_diff(const char *label, const fr_tensor *a, const fr_tensor *b)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    if (a->dtype != b->dtype || fr_tensor_numel(a) != fr_tensor_numel(b)) {
        printf("\n  %s: %s[%lld] vs %s[%lld]", label, fr_dtype_name(a->dtype), (long long)fr_tensor_numel(a),
               fr_dtype_name(b->dtype), (long long)fr_tensor_numel(b));
        CU_FAIL("dtype or size differ");
        return -1;
    }
    const size_t es = fr_dtype_size(a->dtype);
    int64_t n = 0;
    for (int64_t i = 0; i < fr_tensor_numel(a); i++)
        if (memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es) != 0) {
            if (!n++) printf("\n  %s: element %lld: %.9g vs %.9g", label, (long long)i, fr_tensor_get_f64(a, i),
                             fr_tensor_get_f64(b, i));
        }
    if (n) printf(" (%lld elements differ)", (long long)n);
    return n;
}

int64_t bc_round_diff(const char *label, const fr_tensor *bf, const fr_tensor *f, int64_t *far)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(bf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL_FATAL(bf->dtype, FR_BF16);
    CU_ASSERT_EQUAL_FATAL(f->dtype, FR_F32);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(bf), fr_tensor_numel(f));
    const uint16_t *h = bf->data;
    const float *x = f->data;
    int64_t n = 0, nf = 0;
    for (int64_t i = 0; i < fr_tensor_numel(f); i++) {
        const uint16_t want = round_bits(x[i]);
        if (h[i] == want || (isnan(x[i]) && isnan(widen(h[i])))) continue;
        /* ulps apart: the bit patterns as a sign-magnitude order */
        const int32_t a = h[i] & 0x8000 ? -(int32_t)(h[i] & 0x7fff) : h[i], b = want & 0x8000 ? -(int32_t)(want & 0x7fff) : want;
        if (abs(a - b) > 1) nf++;
        if (!n++)
            printf("\n  %s: element %lld: 0x%04x (%.9g), the rounding of %.9g is 0x%04x", label, (long long)i, h[i],
                   widen(h[i]), x[i], want);
    }
    if (n) printf(" (%lld elements differ, %lld by more than one ulp)", (long long)n, (long long)nf);
    if (far) *far = nf;
    return n;
}

int bc_expect(const char *label, const fr_tensor *got, const fr_tensor *want)
{
    int64_t d;
    if (got && got->dtype == FR_BF16 && want && want->dtype == FR_F32)
        d = bc_round_diff(label, got, want, NULL);
    else
        d = bc_bits_diff(label, got, want);
    CU_ASSERT_EQUAL(d, 0);
    return d == 0;
}
