/* FP8 scaling recipes: delayed-scaling scale sequences against hand-computed ones, the
 * current-recipe scale formula, and block quantization against a direct reference. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "graph/fp8_format.h"
#include "graph/fp8_scaling.h"

/* history 4, max, margin 1, interval 2, E4M3 (max 448): recomputed on updates 0, 2, 4, ...
 *   k  amax  history (ring)      recompute?  max   scale = 448 / max / 2
 *   0  4     4 . . .             yes         4     56
 *   1  16    4 16 . .            no                56
 *   2  2     4 16 2 .            yes         16    14
 *   3  1     4 16 2 1            no                14
 *   4  0.5   .5 16 2 1           yes         16    14
 *   5  0.25  .5 .25 2 1          no                14
 *   6  0     .5 .25 0 1          yes         1     224
 *   7  0     .5 .25 0 0          no                224
 *   8  0     0 .25 0 0           yes         .25   896
 *   9  0     0 0 0 0             no                896
 *  10  0     0 0 0 0             yes         0     896 (amax 0 keeps the old scale)
 *  11  3     0 0 0 3             no                896
 *   -  NaN   refused: FR_ERR_NUMERIC, nothing changes
 *   -  Inf   refused
 *  12  7     7 0 0 3             yes         7     32 */
static void test_delayed_max_sequence(void)
{
    fr_fp8_scaling_params p = {4, FR_AMAX_MAX, 1, 2, FR_F8E4M3};
    fr_fp8_scaling s;
    FR_ASSERT_OK(fr_fp8_scaling_init(&s, &p));
    CU_ASSERT_EQUAL(s.scale, 1.0f);
    CU_ASSERT_EQUAL(s.scale_inv, 1.0f);
    const float amax[12] = {4, 16, 2, 1, 0.5f, 0.25f, 0, 0, 0, 0, 0, 3};
    const float want[12] = {56, 56, 14, 14, 14, 14, 224, 224, 896, 896, 896, 896};
    for (int k = 0; k < 12; k++) {
        FR_ASSERT_OK(fr_fp8_scaling_update(&s, amax[k], "layer0/x"));
        CU_ASSERT_EQUAL(s.scale, want[k]);
        CU_ASSERT_EQUAL(s.scale_inv, 1.0f / want[k]);
        if (s.scale != want[k]) fprintf(stderr, "\n  update %d: scale %g, want %g\n", k, s.scale, want[k]);
    }
    /* a non-finite amax: refused, state byte-identical */
    fr_fp8_scaling before = s;
    float hist[4];
    memcpy(hist, s.history, sizeof hist);
    CU_ASSERT_EQUAL(fr_fp8_scaling_update(&s, NAN, "layer0/x"), FR_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "layer0/x"));
    CU_ASSERT_EQUAL(fr_fp8_scaling_update(&s, INFINITY, "layer0/x"), FR_ERR_NUMERIC);
    CU_ASSERT_EQUAL(fr_fp8_scaling_update(&s, -1.0f, "layer0/x"), FR_ERR_NUMERIC);
    CU_ASSERT_EQUAL(memcmp(hist, s.history, sizeof hist), 0);
    CU_ASSERT_EQUAL(s.pos, before.pos);
    CU_ASSERT_EQUAL(s.updates, before.updates);
    CU_ASSERT_EQUAL(s.scale, before.scale);
    CU_ASSERT_EQUAL(s.scale_inv, before.scale_inv);
    FR_ASSERT_OK(fr_fp8_scaling_update(&s, 7, "layer0/x"));
    CU_ASSERT_EQUAL(s.scale, 32.0f);
    CU_ASSERT_EQUAL(fr_fp8_scaling_amax(&s), 7.0f);
    fr_fp8_scaling_free(&s);
}

/* history 3, most_recent, margin 0, interval 1, E5M2 (max 57344):
 *   amax 1 -> 57344; 4 -> 14336; 0 -> keeps 14336; 2 -> 28672; 0.5 -> 114688 (the max over the
 *   history would be 2: most_recent ignores it) */
static void test_delayed_most_recent_sequence(void)
{
    fr_fp8_scaling_params p = {3, FR_AMAX_MOST_RECENT, 0, 1, FR_F8E5M2};
    fr_fp8_scaling s;
    FR_ASSERT_OK(fr_fp8_scaling_init(&s, &p));
    const float amax[5] = {1, 4, 0, 2, 0.5f}, want[5] = {57344, 14336, 14336, 28672, 114688};
    for (int k = 0; k < 5; k++) {
        FR_ASSERT_OK(fr_fp8_scaling_update(&s, amax[k], "layer3/dy"));
        CU_ASSERT_EQUAL(s.scale, want[k]);
    }
    fr_fp8_scaling_free(&s);
    /* negative margin scales up: 448 / 8 * 2^2 = 224; interval 3 recomputes on updates 0 and 3
     * only, and at 3 the history (length 2) holds {100, 2}: max 100 */
    fr_fp8_scaling_params p2 = {2, FR_AMAX_MAX, -2, 3, FR_F8E4M3};
    FR_ASSERT_OK(fr_fp8_scaling_init(&s, &p2));
    const float a2[4] = {8, 100, 100, 2}, w2[4] = {224, 224, 224, (448.0f / 100.0f) * 4.0f};
    for (int k = 0; k < 4; k++) {
        FR_ASSERT_OK(fr_fp8_scaling_update(&s, a2[k], "w"));
        CU_ASSERT_EQUAL(s.scale, w2[k]);
    }
    fr_fp8_scaling_free(&s);
}

static void test_params_and_defaults(void)
{
    fr_fp8_scaling_params p;
    fr_fp8_scaling s;
    fr_fp8_scaling_params_default(&p);
    CU_ASSERT_EQUAL(p.history_len, 1024);
    CU_ASSERT_EQUAL(p.algo, FR_AMAX_MAX);
    CU_ASSERT_EQUAL(p.margin, 0);
    CU_ASSERT_EQUAL(p.interval, 1);
    fr_fp8_scaling_params bad = p;
    bad.history_len = 0;
    CU_ASSERT_EQUAL(fr_fp8_scaling_init(&s, &bad), FR_ERR_INVALID_ARG);
    bad = p;
    bad.interval = 0;
    CU_ASSERT_EQUAL(fr_fp8_scaling_init(&s, &bad), FR_ERR_INVALID_ARG);
    bad = p;
    bad.fmt = FR_BF16;
    CU_ASSERT_EQUAL(fr_fp8_scaling_init(&s, &bad), FR_ERR_UNSUPPORTED);
    bad = p;
    bad.margin = 65;
    CU_ASSERT_EQUAL(fr_fp8_scaling_init(&s, &bad), FR_ERR_INVALID_ARG);
    fr_amax_algo a;
    FR_ASSERT_OK(fr_amax_algo_parse("most_recent", &a));
    CU_ASSERT_EQUAL(a, FR_AMAX_MOST_RECENT);
    CU_ASSERT_STRING_EQUAL(fr_amax_algo_name(a), "most_recent");
    CU_ASSERT_EQUAL(fr_amax_algo_parse("mean", &a), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "mean"));
    /* default history keeps the largest of 1024 amaxes */
    FR_ASSERT_OK(fr_fp8_scaling_init(&s, &p));
    fr_rng r = fr_test_rng("default_hist");
    float big = 0;
    for (int k = 0; k < 1500; k++) {
        float v = (float)(fr_rng_uniform(&r) * 100);
        if (k >= 1500 - 1024 && v > big) big = v;
        FR_ASSERT_OK(fr_fp8_scaling_update(&s, v, "x"));
    }
    CU_ASSERT_EQUAL(fr_fp8_scaling_amax(&s), big);
    CU_ASSERT_EQUAL(s.scale, 448.0f / big);
    fr_fp8_scaling_free(&s);
}

/* current recipe: scale = fp8_max / amax / 2^margin in float32 */
static void test_scale_from_amax(void)
{
    fr_rng r = fr_test_rng("scale_from_amax");
    float s;
    for (int i = 0; i < 200; i++) {
        float amax = (float)exp((fr_rng_uniform(&r) - 0.5) * 40);
        FR_ASSERT_OK(fr_fp8_scale_from_amax(amax, FR_F8E4M3, 0, 1.0f, "x", &s));
        CU_ASSERT_EQUAL(s, 448.0f / amax);
        FR_ASSERT_OK(fr_fp8_scale_from_amax(amax, FR_F8E5M2, 3, 1.0f, "x", &s));
        CU_ASSERT_EQUAL(s, (57344.0f / amax) / 8.0f);
    }
    FR_ASSERT_OK(fr_fp8_scale_from_amax(0.0f, FR_F8E4M3, 0, 5.0f, "x", &s));
    CU_ASSERT_EQUAL(s, 5.0f);
    FR_ASSERT_OK(fr_fp8_scale_from_amax(1e-45f, FR_F8E4M3, 0, 1.0f, "x", &s)); /* overflows */
    CU_ASSERT_EQUAL(s, FLT_MAX);
    FR_ASSERT_OK(fr_fp8_scale_from_amax(FLT_MAX, FR_F8E4M3, 64, 1.0f, "x", &s)); /* underflows */
    CU_ASSERT_EQUAL(s, FLT_MIN);
    CU_ASSERT(isfinite(1.0f / s));
    s = 9.0f;
    CU_ASSERT_EQUAL(fr_fp8_scale_from_amax(NAN, FR_F8E4M3, 0, 1.0f, "node 'fc1'", &s), FR_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fc1"));
    CU_ASSERT_EQUAL(fr_fp8_scale_from_amax(INFINITY, FR_F8E4M3, 0, 1.0f, "x", &s), FR_ERR_NUMERIC);
    CU_ASSERT_EQUAL(s, 9.0f);
    CU_ASSERT_EQUAL(fr_fp8_scale_from_amax(1.0f, FR_F16, 0, 1.0f, "x", &s), FR_ERR_UNSUPPORTED);
}

/* Reference block quantization, coded directly: every element looks up its own block's amax by
 * scanning the block. */
static int check_blocks(fr_rng *r, int64_t R, int64_t C, int64_t br, int64_t bc, fr_dtype fmt,
                        int margin, const float *given, int zero_block)
{
    int64_t ld = C + 3, ldd = C + 1;
    int64_t gr = (R + br - 1) / br, gc = (C + bc - 1) / bc;
    float *x = malloc((size_t)(R * ld + 1) * sizeof(float));
    float *deq = malloc((size_t)(R * ldd + 1) * sizeof(float));
    float *si = malloc((size_t)(gr * gc + 1) * sizeof(float));
    uint8_t *q = malloc((size_t)(R * C + 1));
    for (int64_t i = 0; i < R * ld; i++) x[i] = (float)(fr_rng_normal(r) * exp(fr_rng_normal(r) * 3));
    if (zero_block && R > 0 && C > 0) /* first block all zeros: its scale must be 1 */
        for (int64_t i = 0; i < br && i < R; i++)
            for (int64_t j = 0; j < bc && j < C; j++) x[i * ld + j] = 0.0f;
    fr_status st = fr_fp8_quantize_blocks(x, R, C, ld, br, bc, fmt, margin, given, "t", q, si, deq, ldd);
    int bad = st != FR_OK;
    for (int64_t i = 0; i < R && !bad; i++)
        for (int64_t j = 0; j < C && !bad; j++) {
            int64_t bi = i / br, bj = j / bc;
            float scale;
            if (given) {
                scale = *given;
            } else {
                float m = 0;
                for (int64_t a = bi * br; a < (bi + 1) * br && a < R; a++)
                    for (int64_t b = bj * bc; b < (bj + 1) * bc && b < C; b++)
                        m = fmaxf(m, fabsf(x[a * ld + b]));
                scale = m == 0 ? 1.0f : ldexpf(fr_fp8_max(fmt) / m, -margin);
            }
            float v = x[i * ld + j] * scale;
            uint8_t code = fmt == FR_F8E4M3 ? fr_f32_to_e4m3(v, 1) : fr_f32_to_e5m2(v, 1);
            float dec = fmt == FR_F8E4M3 ? fr_e4m3_to_f32(code) : fr_e5m2_to_f32(code);
            if (q[i * C + j] != code || si[bi * gc + bj] != 1.0f / scale ||
                deq[i * ldd + j] != dec * (1.0f / scale)) {
                fprintf(stderr, "\n  block quantization mismatch at (%lld, %lld) of %lldx%lld\n",
                        (long long)i, (long long)j, (long long)R, (long long)C);
                bad = 1;
            }
        }
    if (zero_block && !given && R > 0 && C > 0 && si[0] != 1.0f) bad = 1;
    free(x);
    free(deq);
    free(si);
    free(q);
    return !bad;
}

/* current and block recipes on hand-picked amaxes:
 *   current, E4M3: amax 3.5 -> 448 / 3.5 = 128; margin 1 -> 64; E5M2 amax 7 -> 8192
 *   1x128 blocks of a 2 x 256 matrix with block amaxes {2, 0; 448, 0.5}:
 *     scales {224, 1 (amax 0); 1, 896}; the element 2 -> 2 * 224 = 448 = code 0x7E */
static void test_hand_computed_scales(void)
{
    float s;
    FR_ASSERT_OK(fr_fp8_scale_from_amax(3.5f, FR_F8E4M3, 0, 1.0f, "x", &s));
    CU_ASSERT_EQUAL(s, 128.0f);
    FR_ASSERT_OK(fr_fp8_scale_from_amax(3.5f, FR_F8E4M3, 1, 1.0f, "x", &s));
    CU_ASSERT_EQUAL(s, 64.0f);
    FR_ASSERT_OK(fr_fp8_scale_from_amax(7.0f, FR_F8E5M2, 0, 1.0f, "x", &s));
    CU_ASSERT_EQUAL(s, 8192.0f);
    static float x[2 * 256];
    memset(x, 0, sizeof x);
    x[5] = -2.0f;
    x[6] = 1.0f;
    x[256 + 0] = 448.0f;
    x[256 + 200] = 0.5f;
    x[256 + 201] = -0.25f;
    uint8_t q[512];
    float sinv[4], deq[512];
    FR_ASSERT_OK(fr_fp8_quantize_blocks(x, 2, 256, 256, 1, 128, FR_F8E4M3, 0, NULL, "t", q, sinv, deq, 256));
    CU_ASSERT_EQUAL(sinv[0], 1.0f / 224.0f);
    CU_ASSERT_EQUAL(sinv[1], 1.0f);
    CU_ASSERT_EQUAL(sinv[2], 1.0f);
    CU_ASSERT_EQUAL(sinv[3], 1.0f / 896.0f);
    CU_ASSERT_EQUAL(q[5], 0xFE);           /* -448 */
    CU_ASSERT_EQUAL(q[6], 0x76);           /* 224 = 1.75 * 2^7: exponent 14, mantissa 6 */
    CU_ASSERT_EQUAL(q[256 + 0], 0x7E);     /* 448 with scale 1 */
    CU_ASSERT_EQUAL(q[256 + 200], 0x7E);   /* 0.5 * 896 = 448 */
    CU_ASSERT_EQUAL(q[256 + 201], 0xF6);   /* -224 */
    CU_ASSERT_EQUAL(deq[5], -2.0f);
    CU_ASSERT_EQUAL(deq[256 + 201], -0.25f);
    CU_ASSERT_EQUAL(q[7], 0);
}

static void test_block_quantization(void)
{
    fr_rng r = fr_test_rng("blocks");
    float given = 3.5f;
    CU_ASSERT(check_blocks(&r, 5, 300, 1, 128, FR_F8E4M3, 0, NULL, 1));   /* 1x128 along C */
    CU_ASSERT(check_blocks(&r, 300, 7, 128, 1, FR_F8E5M2, 0, NULL, 1));   /* 128x1 along R */
    CU_ASSERT(check_blocks(&r, 200, 260, 128, 128, FR_F8E4M3, 0, NULL, 1)); /* weight tiles */
    CU_ASSERT(check_blocks(&r, 33, 17, 33, 17, FR_F8E4M3, 1, NULL, 0));   /* per tensor, current */
    CU_ASSERT(check_blocks(&r, 33, 17, 33, 17, FR_F8E5M2, 0, &given, 0)); /* per tensor, given */
    CU_ASSERT(check_blocks(&r, 1, 1, 1, 128, FR_F8E4M3, 0, NULL, 0));
    CU_ASSERT(check_blocks(&r, 0, 9, 1, 128, FR_F8E4M3, 0, NULL, 0));     /* empty */
    CU_ASSERT(check_blocks(&r, 4, 0, 1, 128, FR_F8E4M3, 0, NULL, 0));

    /* NaN / Inf in one block: refused, naming the block */
    float x[2 * 256];
    for (int i = 0; i < 512; i++) x[i] = (float)fr_rng_normal(&r);
    x[256 + 130] = NAN;
    CU_ASSERT_EQUAL(fr_fp8_quantize_blocks(x, 2, 256, 256, 1, 128, FR_F8E4M3, 0, NULL, "node 'fc'",
                                           NULL, NULL, NULL, 0), FR_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "block (1, 1)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fc"));
    x[256 + 130] = -INFINITY;
    CU_ASSERT_EQUAL(fr_fp8_quantize_blocks(x, 2, 256, 256, 2, 256, FR_F8E4M3, 0, NULL, "t", NULL,
                                           NULL, NULL, 0), FR_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "infinite"));
    /* with a given scale, NaN just quantizes to the NaN code (the amax reports it later) */
    uint8_t q[512];
    x[256 + 130] = NAN;
    FR_ASSERT_OK(fr_fp8_quantize_blocks(x, 2, 256, 256, 2, 256, FR_F8E4M3, 0, &given, "t", q, NULL,
                                        NULL, 0));
    CU_ASSERT_EQUAL(q[256 + 130], FR_E4M3_NAN_CODE);
    float zero = 0.0f;
    CU_ASSERT_EQUAL(fr_fp8_quantize_blocks(x, 2, 256, 256, 2, 256, FR_F8E4M3, 0, &zero, "t", q, NULL,
                                           NULL, 0), FR_ERR_NUMERIC);
    CU_ASSERT_EQUAL(fr_fp8_quantize_blocks(x, 2, 256, 256, 0, 256, FR_F8E4M3, 0, NULL, "t", q, NULL,
                                           NULL, 0), FR_ERR_INVALID_ARG);
}

static CU_TestInfo tests[] = {
    {"delayed_max_sequence", test_delayed_max_sequence},
    {"delayed_most_recent_sequence", test_delayed_most_recent_sequence},
    {"params_and_defaults", test_params_and_defaults},
    {"scale_from_amax", test_scale_from_amax},
    {"hand_computed_scales", test_hand_computed_scales},
    {"block_quantization", test_block_quantization},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"fp8_scaling", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
