/* FP8 (E4M3FN, E5M2) and BF16 number formats.
 *
 * The reference here is independent of graph/fp8_format.c: fp8 values are decoded by hand
 * from the bit fields with ldexp() in double, and float -> fp8 is found by walking the sorted
 * list of representable values and the exact midpoints between neighbours (a value equal to
 * a midpoint takes the even code). The library instead rounds the float's bit pattern with
 * integer arithmetic. BF16 is checked against a double-precision nearest-value choice.
 *
 * The sweep over float32 bit patterns is exhaustive (all 2^32, two threads; ~14 s at -O2 on
 * two cores) in optimized builds without sanitizers, else strided (~5 s under -O0 + ASan):
 * every 31st pattern plus every pattern near a rounding boundary, a power of two,
 * max/overflow, and all NaN patterns. FR_TEST_EXHAUSTIVE=1 / =0 forces one or the other.
 * The test prints which one it ran. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/tensor.h"
#include "tests/harness.h"
#include "graph/fp8_format.h"

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- hand decoding from the bit fields (double) ---- */

static double hand_e4m3(unsigned c)
{
    int s = (c >> 7) & 1, E = (c >> 3) & 15, M = c & 7;
    double v;
    if (E == 15 && M == 7) return NAN;
    if (E == 0) v = ldexp(M, 1 - 7 - 3);         /* 0.M * 2^(1-bias) */
    else v = ldexp(8 + M, E - 7 - 3);            /* 1.M * 2^(E-bias) */
    return s ? -v : v;
}

static double hand_e5m2(unsigned c)
{
    int s = (c >> 7) & 1, E = (c >> 2) & 31, M = c & 3;
    double v;
    if (E == 31) { if (M) return NAN; v = INFINITY; }
    else if (E == 0) v = ldexp(M, 1 - 15 - 2);
    else v = ldexp(4 + M, E - 15 - 2);
    return s ? -v : v;
}

/* ---- the midpoint-walk reference ----
 * vals[k] (k = 0..max_code) are the positive values in code order, vals[max_code + 1] the
 * value the next code would have with an unbounded exponent (480 / 65536): landing on it
 * means overflow. mid[k] = float bits of (vals[k] + vals[k+1]) / 2, exact in float. */
typedef struct ref_fmt {
    const char *name;
    unsigned max_code, ovf_nosat; /* code of non-saturated overflow: NaN 0x7F / Inf 0x7C */
    double vals[130];
    uint32_t mid[129];
} ref_fmt;

static ref_fmt REF_E4M3, REF_E5M2;

static int build_ref(ref_fmt *r, const char *name, unsigned max_code, unsigned ovf_nosat,
                     double next_after_max)
{
    r->name = name;
    r->max_code = max_code;
    r->ovf_nosat = ovf_nosat;
    for (unsigned k = 0; k <= max_code; k++)
        r->vals[k] = max_code == 0x7E ? hand_e4m3(k) : hand_e5m2(k);
    r->vals[max_code + 1] = next_after_max;
    int ok = 1;
    for (unsigned k = 0; k <= max_code; k++) {
        double m = 0.5 * (r->vals[k] + r->vals[k + 1]);
        ok &= r->vals[k] < r->vals[k + 1];
        ok &= (double)(float)m == m; /* the walk compares float bit patterns */
        r->mid[k] = bits_of((float)m);
    }
    return ok;
}

/* Expected magnitude index for positive float bits `a` (>= the previous call's a):
 * an index <= max_code is the code, max_code + 1 means overflow. */
static inline unsigned walk(const ref_fmt *r, unsigned *idx, uint32_t a)
{
    unsigned i = *idx;
    while (i <= r->max_code && a > r->mid[i]) i++;
    *idx = i;
    if (i <= r->max_code && a == r->mid[i]) return (i & 1) ? i + 1 : i; /* tie: even code */
    return i;
}

static inline uint8_t expect_code(const ref_fmt *r, unsigned k, int sat, unsigned sign)
{
    if (k > r->max_code) return (uint8_t)(sign | (sat ? r->max_code : r->ovf_nosat));
    return (uint8_t)(sign | k);
}

/* Slow random-access form of the same reference, for single values. */
static uint8_t ref_encode(const ref_fmt *r, float x, int sat)
{
    uint32_t u = bits_of(x), a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return 0x7F;
    unsigned idx = 0;
    return expect_code(r, walk(r, &idx, a), sat, (u >> 24) & 0x80u);
}

/* BF16 reference: the nearer of the two bf16 neighbours in double, ties to the even one,
 * with the value past the largest finite bf16 taken as 2^128 (IEEE overflow -> Inf). */
static inline uint16_t ref_bf16_pos(uint32_t a)
{
    uint32_t lo = a & 0xFFFF0000u, hi = lo + 0x10000u;
    if (lo == a) return (uint16_t)(a >> 16);
    double d = float_of(a), vlo = float_of(lo);
    double vhi = hi == 0x7F800000u ? ldexp(1.0, 128) : (double)float_of(hi);
    double dl = d - vlo, dh = vhi - d;
    if (dl < dh) return (uint16_t)(lo >> 16);
    if (dh < dl) return (uint16_t)(hi >> 16);
    return (uint16_t)((((lo >> 16) & 1u) ? hi : lo) >> 16);
}

/* ---- the sweep ---- */

enum { C_E4_SAT, C_E4_NOSAT, C_E5_SAT, C_E5_NOSAT, C_BF16, C_COUNT };
static const char *CHECK_NAMES[C_COUNT] = {"e4m3 sat", "e4m3 nosat", "e5m2 sat", "e5m2 nosat",
                                           "bf16"};

typedef struct sweep {
    uint32_t lo, hi, stride;       /* positive patterns lo, lo+stride, ... < hi */
    const uint32_t *list;          /* or an ascending list of positive patterns */
    size_t nlist;
    uint64_t checked;              /* float patterns checked (both signs count) */
    uint64_t bad[C_COUNT];
    uint32_t first_bad[C_COUNT];
    unsigned got[C_COUNT], want[C_COUNT];
} sweep;

static void record(sweep *s, int c, uint32_t u, unsigned got, unsigned want)
{
    if (s->bad[c]++ == 0) { s->first_bad[c] = u; s->got[c] = got; s->want[c] = want; }
}

/* Check +a and -a in all five conversions against the reference. */
static inline void check_pattern(sweep *s, uint32_t a, unsigned *i4, unsigned *i5)
{
    unsigned k4 = walk(&REF_E4M3, i4, a), k5 = walk(&REF_E5M2, i5, a);
    uint16_t wb = ref_bf16_pos(a);
    for (unsigned sg = 0; sg < 2; sg++) {
        uint32_t u = a | (sg << 31);
        float x = float_of(u);
        unsigned sign = sg << 7;
        uint8_t g0 = fr_f32_to_e4m3(x, 1), g1 = fr_f32_to_e4m3(x, 0);
        uint8_t g2 = fr_f32_to_e5m2(x, 1), g3 = fr_f32_to_e5m2(x, 0);
        uint16_t g4 = fr_f32_to_bf16(x);
        uint8_t w0 = expect_code(&REF_E4M3, k4, 1, sign), w1 = expect_code(&REF_E4M3, k4, 0, sign);
        uint8_t w2 = expect_code(&REF_E5M2, k5, 1, sign), w3 = expect_code(&REF_E5M2, k5, 0, sign);
        uint16_t w4 = (uint16_t)(wb | (sg << 15));
        if ((g0 != w0) | (g1 != w1) | (g2 != w2) | (g3 != w3) | (g4 != w4)) {
            if (g0 != w0) record(s, C_E4_SAT, u, g0, w0);
            if (g1 != w1) record(s, C_E4_NOSAT, u, g1, w1);
            if (g2 != w2) record(s, C_E5_SAT, u, g2, w2);
            if (g3 != w3) record(s, C_E5_NOSAT, u, g3, w3);
            if (g4 != w4) record(s, C_BF16, u, g4, w4);
        }
    }
    s->checked += 2;
}

static void *sweep_run(void *arg)
{
    sweep *s = arg;
    unsigned i4 = 0, i5 = 0;
    if (s->list) {
        for (size_t j = 0; j < s->nlist; j++) check_pattern(s, s->list[j], &i4, &i5);
    } else {
        for (uint64_t a = s->lo; a < s->hi; a += s->stride) check_pattern(s, (uint32_t)a, &i4, &i5);
    }
    return NULL;
}

/* NaN patterns: every fp8 conversion gives 0x7F; bf16 gives the canonical NaN 0x7FFF, as
 * the H100's __float2bfloat16_rn does. */
static void sweep_nans(sweep *s)
{
    for (uint32_t a = 0x7F800001u; a != 0x80000000u; a++) {
        for (unsigned sg = 0; sg < 2; sg++) {
            uint32_t u = a | (sg << 31);
            float x = float_of(u);
            uint8_t g[4] = {fr_f32_to_e4m3(x, 1), fr_f32_to_e4m3(x, 0), fr_f32_to_e5m2(x, 1),
                            fr_f32_to_e5m2(x, 0)};
            for (int c = 0; c < 4; c++)
                if (g[c] != 0x7F) record(s, c, u, g[c], 0x7F);
            uint16_t b = fr_f32_to_bf16(x);
            if (b != 0x7FFFu) record(s, C_BF16, u, b, 0x7FFFu);
            s->checked++;
        }
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Patterns near every place where the answer changes or an edge case lives. */
static uint32_t *boundary_list(size_t *n)
{
    size_t cap = 1u << 20, k = 0;
    uint32_t *l = malloc(cap * sizeof *l);
    if (!l) return NULL;
#define ADD_NEAR(p, d)                                                              \
    do {                                                                            \
        for (int64_t q_ = (int64_t)(p) - (d); q_ <= (int64_t)(p) + (d); q_++)       \
            if (q_ >= 0 && q_ <= 0x7F800000 && k < cap) l[k++] = (uint32_t)q_;      \
    } while (0)
    for (unsigned i = 0; i <= REF_E4M3.max_code; i++) ADD_NEAR(REF_E4M3.mid[i], 4);
    for (unsigned i = 0; i <= REF_E5M2.max_code; i++) ADD_NEAR(REF_E5M2.mid[i], 4);
    for (unsigned i = 0; i <= REF_E4M3.max_code; i++) ADD_NEAR(bits_of((float)REF_E4M3.vals[i]), 2);
    for (unsigned i = 0; i <= REF_E5M2.max_code; i++) ADD_NEAR(bits_of((float)REF_E5M2.vals[i]), 2);
    for (uint32_t e = 0; e <= 255; e++) ADD_NEAR(e << 23, 3);            /* binade edges */
    for (uint32_t h = 0; h < 0x7F80u; h++) ADD_NEAR((h << 16) | 0x8000u, 1); /* bf16 ties */
    ADD_NEAR(0x7F7FFFFFu, 3);
#undef ADD_NEAR
    qsort(l, k, sizeof *l, cmp_u32);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m == 0 || l[i] != l[m - 1]) l[m++] = l[i];
    *n = m;
    return l;
}

enum { STRIDE = 31 }; /* odd, so the strided sweep still sees every low-bit pattern */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void test_sweep(void)
{
    const char *env = getenv("FR_TEST_EXHAUSTIVE");
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)
    int full = !env || atoi(env) != 0;
#else
    int full = env && atoi(env) != 0; /* unoptimized / sanitized: the full sweep is too slow */
#endif
    double t0 = now_s();
    enum { NT = 2 };
    sweep s[NT + 2];
    memset(s, 0, sizeof s);
    const uint32_t end = 0x7F800001u; /* positive patterns up to and including +Inf */
    uint32_t stride = full ? 1u : STRIDE;
    for (int t = 0; t < NT; t++) {
        /* split at a stride multiple so the union is exactly every stride-th pattern */
        uint64_t steps = ((uint64_t)end + stride - 1) / stride;
        s[t].lo = (uint32_t)(steps * (uint64_t)t / NT * stride);
        s[t].hi = t == NT - 1 ? end : (uint32_t)(steps * (uint64_t)(t + 1) / NT * stride);
        s[t].stride = stride;
    }
    size_t nlist = 0;
    uint32_t *list = NULL;
    if (!full) {
        list = boundary_list(&nlist);
        CU_ASSERT_PTR_NOT_NULL_FATAL(list);
        s[NT].list = list;
        s[NT].nlist = nlist;
    }
    pthread_t th[NT];
    int started[NT] = {0};
    for (int t = 0; t < NT; t++) started[t] = pthread_create(&th[t], NULL, sweep_run, &s[t]) == 0;
    if (!full) sweep_run(&s[NT]);
    sweep_nans(&s[NT + 1]);
    for (int t = 0; t < NT; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else sweep_run(&s[t]); /* no thread: do the share here */
    }
    free(list);
    uint64_t checked = 0, bad[C_COUNT] = {0};
    for (int t = 0; t < NT + 2; t++) {
        checked += s[t].checked;
        for (int c = 0; c < C_COUNT; c++) {
            if (s[t].bad[c] && !bad[c])
                printf("\n  %s mismatch: input 0x%08X (%g): got 0x%X, reference 0x%X",
                       CHECK_NAMES[c], (unsigned)s[t].first_bad[c],
                       (double)float_of(s[t].first_bad[c]), s[t].got[c], s[t].want[c]);
            bad[c] += s[t].bad[c];
        }
    }
    printf("\n  %s sweep: %llu float32 patterns x 5 conversions (e4m3/e5m2 sat+nosat, bf16) in "
           "%.1f s%s\n", full ? "EXHAUSTIVE" : "STRIDED (every 31st + boundaries + all NaNs)",
           (unsigned long long)checked, now_s() - t0,
           full ? "" : "; FR_TEST_EXHAUSTIVE=1 for all 2^32");
    fflush(stdout);
    if (full) CU_ASSERT_EQUAL(checked, 1ull << 32);
    for (int c = 0; c < C_COUNT; c++) CU_ASSERT_EQUAL(bad[c], 0);
}

/* ---- tables ---- */

static int same_float(float a, double b)
{
    if (isnan(b)) return isnan(a);
    return (double)a == b && !signbit(a) == !signbit(b);
}

static void test_tables(void)
{
    CU_ASSERT_FATAL(build_ref(&REF_E4M3, "e4m3", 0x7E, 0x7F, 480.0));
    CU_ASSERT_FATAL(build_ref(&REF_E5M2, "e5m2", 0x7B, 0x7C, 65536.0));
    int n4 = 0, n5 = 0, nan4 = 0, nan5 = 0;
    for (unsigned c = 0; c < 256; c++) {
        n4 += same_float(fr_e4m3_to_f32((uint8_t)c), hand_e4m3(c));
        n5 += same_float(fr_e5m2_to_f32((uint8_t)c), hand_e5m2(c));
        nan4 += fr_fp8_is_nan((uint8_t)c, FR_F8E4M3);
        nan5 += fr_fp8_is_nan((uint8_t)c, FR_F8E5M2);
        CU_ASSERT_EQUAL(fr_fp8_is_nan((uint8_t)c, FR_F8E4M3), isnan(hand_e4m3(c)) != 0);
        CU_ASSERT_EQUAL(fr_fp8_is_nan((uint8_t)c, FR_F8E5M2), isnan(hand_e5m2(c)) != 0);
    }
    CU_ASSERT_EQUAL(n4, 256);
    CU_ASSERT_EQUAL(n5, 256);
    CU_ASSERT_EQUAL(bits_of(fr_e4m3_to_f32(0xFF)), FR_FP8_DECODED_NAN_BITS); /* as CUDA */
    CU_ASSERT_EQUAL(bits_of(fr_e5m2_to_f32(0xFD)), FR_FP8_DECODED_NAN_BITS);
    CU_ASSERT_EQUAL(nan4, 2); /* 0x7F, 0xFF */
    CU_ASSERT_EQUAL(nan5, 6); /* S.11111.{01,10,11} */
    /* format constants, from the bit fields */
    CU_ASSERT_EQUAL(FR_E4M3_MAX, 448.0f);
    CU_ASSERT_EQUAL(fr_e4m3_to_f32(0x7E), 448.0f);
    CU_ASSERT_EQUAL(fr_e4m3_to_f32(0xFE), -448.0f);
    CU_ASSERT_EQUAL(fr_e4m3_to_f32(0x08), ldexpf(1, -6));
    CU_ASSERT_EQUAL(fr_e4m3_to_f32(0x01), ldexpf(1, -9));
    CU_ASSERT_EQUAL(FR_E4M3_MIN_NORMAL, ldexpf(1, -6));
    CU_ASSERT_EQUAL(FR_E4M3_MIN_SUBNORMAL, ldexpf(1, -9));
    CU_ASSERT_EQUAL(FR_E5M2_MAX, 57344.0f);
    CU_ASSERT_EQUAL(fr_e5m2_to_f32(0x7B), 57344.0f);
    CU_ASSERT_EQUAL(fr_e5m2_to_f32(0x04), ldexpf(1, -14));
    CU_ASSERT_EQUAL(fr_e5m2_to_f32(0x01), ldexpf(1, -16));
    CU_ASSERT_EQUAL(FR_E5M2_MIN_NORMAL, ldexpf(1, -14));
    CU_ASSERT_EQUAL(FR_E5M2_MIN_SUBNORMAL, ldexpf(1, -16));
    CU_ASSERT(isinf(fr_e5m2_to_f32(0x7C)) && fr_e5m2_to_f32(0x7C) > 0);
    CU_ASSERT(isinf(fr_e5m2_to_f32(0xFC)) && fr_e5m2_to_f32(0xFC) < 0);
    CU_ASSERT(signbit(fr_e4m3_to_f32(0x80)) && fr_e4m3_to_f32(0x80) == 0.0f);
    CU_ASSERT(signbit(fr_e5m2_to_f32(0x80)) && fr_e5m2_to_f32(0x80) == 0.0f);
    CU_ASSERT_EQUAL(fr_fp8_max(FR_F8E4M3), 448.0f);
    CU_ASSERT_EQUAL(fr_fp8_max(FR_F8E5M2), 57344.0f);
    CU_ASSERT_EQUAL(fr_fp8_max(FR_F8E4M3FNUZ), 0.0f);
    /* every finite code round-trips; E5M2 Inf saturates to max or stays Inf */
    for (unsigned c = 0; c < 256; c++) {
        if (!isnan(hand_e4m3(c))) {
            CU_ASSERT_EQUAL(fr_f32_to_e4m3(fr_e4m3_to_f32((uint8_t)c), 1), c);
            CU_ASSERT_EQUAL(fr_f32_to_e4m3(fr_e4m3_to_f32((uint8_t)c), 0), c);
        }
        double v = hand_e5m2(c);
        if (!isnan(v) && !isinf(v)) {
            CU_ASSERT_EQUAL(fr_f32_to_e5m2(fr_e5m2_to_f32((uint8_t)c), 1), c);
            CU_ASSERT_EQUAL(fr_f32_to_e5m2(fr_e5m2_to_f32((uint8_t)c), 0), c);
        }
    }
    CU_ASSERT_EQUAL(fr_f32_to_e5m2(fr_e5m2_to_f32(0xFC), 1), 0xFB);
    CU_ASSERT_EQUAL(fr_f32_to_e5m2(fr_e5m2_to_f32(0xFC), 0), 0xFC);
}

/* Hand-picked values with the answers written out (the CUDA rules from fp8_format.h). */
static void test_named_cases(void)
{
    struct { float x; uint8_t e4s, e4n, e5s, e5n; } T[] = {
        {0.0f, 0x00, 0x00, 0x00, 0x00},
        {-0.0f, 0x80, 0x80, 0x80, 0x80},
        {INFINITY, 0x7E, 0x7F, 0x7B, 0x7C},
        {-INFINITY, 0xFE, 0xFF, 0xFB, 0xFC},
        {448.0f, 0x7E, 0x7E, 0x5F, 0x5F},        /* e5m2: 448 = 1.75*2^8 exact */
        {464.0f, 0x7E, 0x7E, 0x5F, 0x5F},        /* e4m3 tie 448|480 -> even 0x7E */
        {0x1.d00002p8f, 0x7E, 0x7F, 0x5F, 0x5F}, /* just above 464 */
        {-0x1.d00002p8f, 0xFE, 0xFF, 0xDF, 0xDF},
        {480.0f, 0x7E, 0x7F, 0x60, 0x60},
        {1e30f, 0x7E, 0x7F, 0x7B, 0x7C},
        {57344.0f, 0x7E, 0x7F, 0x7B, 0x7B},
        {61439.996f, 0x7E, 0x7F, 0x7B, 0x7B},    /* below the e5m2 overflow tie */
        {61440.0f, 0x7E, 0x7F, 0x7B, 0x7C},      /* tie 57344|65536 -> even 0x7C = overflow */
        {-61440.0f, 0xFE, 0xFF, 0xFB, 0xFC},
        {1.0f, 0x38, 0x38, 0x3C, 0x3C},
        {1.0625f, 0x38, 0x38, 0x3C, 0x3C},       /* e4m3 tie 1|1.125 -> even */
        {1.1875f, 0x3A, 0x3A, 0x3D, 0x3D},       /* e4m3 tie 1.125|1.25 -> even 0x3A */
        {0x1p-9f, 0x01, 0x01, 0x18, 0x18},       /* e4m3 min subnormal */
        {0x1p-10f, 0x00, 0x00, 0x14, 0x14},      /* tie 0|2^-9 -> 0 */
        {0x1.000002p-10f, 0x01, 0x01, 0x14, 0x14},
        {-0x1p-10f, 0x80, 0x80, 0x94, 0x94},     /* underflow keeps the sign */
        {0x3p-10f, 0x02, 0x02, 0x1A, 0x1A},      /* tie 1|2 (x 2^-9) -> even 2 */
        {0x1p-16f, 0x00, 0x00, 0x01, 0x01},      /* e5m2 min subnormal */
        {0x1p-17f, 0x00, 0x00, 0x00, 0x00},      /* tie -> 0 */
        {0x3p-17f, 0x00, 0x00, 0x02, 0x02},      /* tie 1|2 -> 2 */
        {0x1.fp-7f, 0x08, 0x08, 0x24, 0x24},     /* rounds up into the min normal */
        {0x1p-149f, 0x00, 0x00, 0x00, 0x00},     /* float subnormal */
        {-0x1p-149f, 0x80, 0x80, 0x80, 0x80},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        uint8_t g[4] = {fr_f32_to_e4m3(T[i].x, 1), fr_f32_to_e4m3(T[i].x, 0),
                        fr_f32_to_e5m2(T[i].x, 1), fr_f32_to_e5m2(T[i].x, 0)};
        uint8_t w[4] = {T[i].e4s, T[i].e4n, T[i].e5s, T[i].e5n};
        for (int c = 0; c < 4; c++) {
            if (g[c] != w[c]) printf("\n  %a (%s): got 0x%02X want 0x%02X", (double)T[i].x,
                                     CHECK_NAMES[c], g[c], w[c]);
            CU_ASSERT_EQUAL(g[c], w[c]);
        }
    }
    /* NaNs of either sign and any payload -> 0x7F */
    uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu,
                       0x7FA00000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        float x = float_of(nans[i]);
        CU_ASSERT_EQUAL(fr_f32_to_e4m3(x, 1), 0x7F);
        CU_ASSERT_EQUAL(fr_f32_to_e4m3(x, 0), 0x7F);
        CU_ASSERT_EQUAL(fr_f32_to_e5m2(x, 1), 0x7F);
        CU_ASSERT_EQUAL(fr_f32_to_e5m2(x, 0), 0x7F);
    }
    /* bf16 */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(1.0f), 0x3F80);
    CU_ASSERT_EQUAL(fr_f32_to_bf16(float_of(0x3F808000u)), 0x3F80); /* tie -> even */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(float_of(0x3F818000u)), 0x3F82); /* tie -> even (up) */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX -> Inf */
    CU_ASSERT_EQUAL(fr_f32_to_bf16(-0.0f), 0x8000);
    for (unsigned h = 0; h < 0x10000u; h++) { /* bf16 -> f32 is a 16-bit shift, all codes */
        uint32_t u = bits_of(fr_bf16_to_f32((uint16_t)h));
        CU_ASSERT_EQUAL_FATAL(u, (uint32_t)h << 16);
    }
}

/* ---- bulk API ---- */

static uint32_t rng_u32(fr_rng *r) { return (uint32_t)(fr_rng_uniform(r) * 4294967296.0); }

static void test_bulk(void)
{
    fr_rng r = fr_test_rng("fp8_bulk");
    enum { N = 20000 };
    float *x = malloc(N * sizeof *x), *back = malloc(N * sizeof *back);
    uint8_t *q = malloc(N);
    CU_ASSERT_FATAL(x && back && q);
    fr_dtype fmts[2] = {FR_F8E4M3, FR_F8E5M2};
    for (int f = 0; f < 2; f++) {
        const ref_fmt *ref = f == 0 ? &REF_E4M3 : &REF_E5M2;
        double (*hand)(unsigned) = f == 0 ? hand_e4m3 : hand_e5m2;
        /* mixed inputs: normal around 1, random bit patterns (all exponents, Inf, NaN) */
        for (int i = 0; i < N; i++) x[i] = i % 2 ? (float)fr_rng_normal(&r) : float_of(rng_u32(&r));
        float scale = (float)(0.5 + 300.0 * fr_rng_uniform(&r));
        float scale_inv = 1.0f / scale;
        FR_ASSERT_OK(fr_fp8_quantize(x, N, scale, fmts[f], q));
        int bad = 0, bad_deq = 0, bad_err = 0;
        for (int i = 0; i < N; i++) bad += q[i] != ref_encode(ref, x[i] * scale, 1);
        CU_ASSERT_EQUAL(bad, 0);
        FR_ASSERT_OK(fr_fp8_dequantize(q, N, scale_inv, fmts[f], back));
        for (int i = 0; i < N; i++) {
            /* decoded value times scale_inv, rounded once to float */
            double want = hand(q[i]) * (double)scale_inv;
            bad_deq += !(isnan(want) ? isnan(back[i]) : back[i] == (float)want);
            /* quantization error of in-range normals: at most half an ulp (2^-4 / 2^-3 rel) */
            double xs = (double)x[i] * scale, ax = fabs(xs);
            double lo = f == 0 ? 0x1p-6 : 0x1p-14, hi = f == 0 ? 448.0 : 57344.0;
            if (ax >= lo && ax <= hi) {
                double rel = fabs(hand(q[i]) - xs) / ax;
                bad_err += rel > (f == 0 ? 0x1p-4 : 0x1p-3);
            }
        }
        CU_ASSERT_EQUAL(bad_deq, 0);
        CU_ASSERT_EQUAL(bad_err, 0);
        for (int sat = 0; sat < 2; sat++) {
            FR_ASSERT_OK(fr_fp8_convert(x, N, fmts[f], sat, q));
            bad = 0;
            for (int i = 0; i < N; i++) bad += q[i] != ref_encode(ref, x[i], sat);
            CU_ASSERT_EQUAL(bad, 0);
        }
    }
    /* amax */
    for (int i = 0; i < N; i++) x[i] = (float)(100.0 * fr_rng_normal(&r));
    double m = 0;
    for (int i = 0; i < N; i++) m = fmax(m, fabs((double)x[i]));
    CU_ASSERT_EQUAL(fr_amax(x, N), (float)m);
    CU_ASSERT_EQUAL(fr_amax(x, 0), 0.0f);
    float neg[3] = {-0.0f, -5.0f, 3.0f};
    CU_ASSERT_EQUAL(fr_amax(neg, 3), 5.0f);
    CU_ASSERT(!signbit(fr_amax(neg, 1)) && fr_amax(neg, 1) == 0.0f);
    int pos = (int)(fr_rng_uniform(&r) * N);
    x[pos] = -INFINITY;
    CU_ASSERT(isinf(fr_amax(x, N)) && fr_amax(x, N) > 0);
    x[(pos + 1 + (int)(fr_rng_uniform(&r) * (N - 1))) % N] = -NAN;
    CU_ASSERT(isnan(fr_amax(x, N)));
    x[pos] = NAN;
    CU_ASSERT(isnan(fr_amax(x, N)));
    /* errors */
    CU_ASSERT_EQUAL(fr_fp8_quantize(x, N, 1.0f, FR_F8E4M3FNUZ, q), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float8e4m3fnuz"));
    CU_ASSERT_EQUAL(fr_fp8_dequantize(q, N, 1.0f, FR_F32, x), FR_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(fr_fp8_convert(x, N, FR_F8E5M2FNUZ, 1, q), FR_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(fr_fp8_quantize(x, -1, 1.0f, FR_F8E4M3, q), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_fp8_quantize(NULL, 4, 1.0f, FR_F8E4M3, q), FR_ERR_INVALID_ARG);
    FR_ASSERT_OK(fr_fp8_quantize(NULL, 0, 1.0f, FR_F8E4M3, NULL));
    FR_ASSERT_OK(fr_fp8_dequantize(NULL, 0, 1.0f, FR_F8E5M2, NULL));
    free(x);
    free(back);
    free(q);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"tables: all 256 codes vs bit fields", test_tables}, /* builds the reference: first */
        {"named cases (ties, max, Inf, NaN, -0)", test_named_cases},
        {"float32 sweep vs midpoint reference", test_sweep},
        {"quantize/dequantize/convert/amax", test_bulk},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"fp8_format", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
