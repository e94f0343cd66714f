/* Low-precision AdamW state and bf16 master weights (runtime/train/optim_lowp.h):
 *  - fp8 block quantization against a float64 reference of E4M3 rounding (codes equal), and
 *    its round-trip error bound: 2^-4 relative (half a 3-bit mantissa step) for elements
 *    above the block's normal range, 2^-10 of the scale below it, plus float32 slack;
 *  - one AdamW step from zero state equals the FP32 optimizer's bit for bit (the update uses
 *    the unquantized new moments), and the stored moments are exactly the FP32 moments encoded;
 *  - stochastic bf16 rounding: always one of the two neighbours, unbiased (mean within 4
 *    standard errors over 20000 keys), deterministic for a key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "runtime/train/optimizer.h"

/* E4M3 round to nearest even in float64 (saturating at 448): the reference encoder. */
static double e4m3_ref(double y)
{
    double a = fabs(y);
    if (a == 0) return 0;
    int e;
    frexp(a, &e);                          /* a = f * 2^e, f in [0.5, 1) */
    int ex = e - 1 < -6 ? -6 : e - 1;      /* exponent of the grid: subnormals below 2^-6 */
    double step = ldexp(1.0, ex - 3);      /* 3 mantissa bits */
    double q = a / step, fl = floor(q), r = q - fl;
    double k = r > 0.5 ? fl + 1 : r < 0.5 ? fl : (fmod(fl, 2) == 0 ? fl : fl + 1);
    double v = k * step;
    if (v > 448) v = 448;
    return y < 0 ? -v : v;
}

static void fill_wide(fr_rng *r, float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)(fr_rng_normal(r) * exp2(floor(fr_rng_uniform(r) * 40) - 20)); /* 2^-20 .. 2^20 */
}

static void test_block_roundtrip(void)
{
    fr_rng r = fr_test_rng("block_roundtrip");
    enum { N = 128 * 37 + 45 }; /* a partial last block */
    static float x[N], back[N], scales[(N + 127) / 128];
    static uint8_t codes[N];
    fill_wide(&r, x, N);
    for (int k = 256; k < 384; k++) x[k] = 0; /* an all-zero block */
    fr_lowp_quantize_blocks(x, N, codes, scales);
    fr_lowp_dequantize_blocks(codes, scales, N, back);
    int bad_code = 0, bad_bound = 0;
    double worst = 0;
    for (int k = 0; k < N; k++) {
        float s = scales[k / 128];
        double amax = 0;
        for (int j = k / 128 * 128; j < N && j < k / 128 * 128 + 128; j++) amax = fmax(amax, fabs(x[j]));
        CU_ASSERT_EQUAL(s, (float)amax / 448.0f);
        if (s == 0) {
            bad_code += codes[k] != 0 || back[k] != 0;
            continue;
        }
        double y = (double)(x[k] / s); /* the float32 quotient the encoder sees */
        double ref = e4m3_ref(y);
        bad_code += fabs((double)fr_e4m3_to_f32(codes[k]) - ref) != 0;
        double err = fabs((double)back[k] - (double)x[k]);
        double bound = fmax(ldexp(fabs(x[k]), -4), ldexp((double)s, -10)) * (1 + 1e-6) + 1e-6 * fabs(x[k]);
        bad_bound += err > bound;
        if (fabs(x[k]) > ldexp(amax, -6)) worst = fmax(worst, err / fabs(x[k]));
    }
    printf(" (worst relative error of normal-range elements %.3g, bound 2^-4 = 0.0625) ", worst);
    CU_ASSERT_EQUAL(bad_code, 0);
    CU_ASSERT_EQUAL(bad_bound, 0);
    CU_ASSERT(worst <= 0.0625 * (1 + 1e-6));
}

/* Two optimizers, one FP32 and one with `dt`/`master`, on copies of the same parameters. */
typedef struct {
    float p32[300], plp[300], g[300];
    fr_optimizer *o32, *olp;
} pair;

static void pair_new(pair *q, fr_opt_state_dtype dt, int master, fr_rng *r)
{
    for (int i = 0; i < 300; i++) {
        q->p32[i] = (float)fr_rng_normal(r);
        q->g[i] = (float)(fr_rng_normal(r) * exp2(floor(fr_rng_uniform(r) * 16) - 8));
    }
    if (master)
        for (int i = 0; i < 300; i++) q->p32[i] = fr_bf16_to_f32(fr_f32_to_bf16(q->p32[i]));
    memcpy(q->plp, q->p32, sizeof q->p32);
    fr_opt_config c = fr_opt_config_adamw();
    fr_opt_param a = {"w", q->p32, q->g, 2, {10, 30}, FR_DECAY_AUTO};
    FR_ASSERT_OK(fr_optimizer_create(&c, &a, 1, &q->o32));
    c.state_dtype = dt;
    c.master_bf16 = master;
    c.sr_seed = 7;
    a.data = q->plp;
    FR_ASSERT_OK(fr_optimizer_create(&c, &a, 1, &q->olp));
}

static void pair_free(pair *q)
{
    fr_optimizer_free(q->o32);
    fr_optimizer_free(q->olp);
}

static void test_first_step_exact(void)
{
    fr_rng r = fr_test_rng("first_step_exact");
    for (int dt = FR_OPT_STATE_BF16; dt <= FR_OPT_STATE_FP8; dt++) {
        pair q;
        pair_new(&q, (fr_opt_state_dtype)dt, 0, &r);
        FR_ASSERT_OK(fr_optimizer_step(q.o32, 1e-2));
        FR_ASSERT_OK(fr_optimizer_step(q.olp, 1e-2));
        CU_ASSERT_EQUAL(memcmp(q.p32, q.plp, sizeof q.p32), 0);
        CU_ASSERT_PTR_NULL(fr_optimizer_state(q.olp, 0, 0)); /* not FP32 */
        for (int s = 0; s < 2; s++) {
            const float *ref = fr_optimizer_state(q.o32, 0, s);
            float *scales;
            const void *raw = fr_optimizer_state_raw(q.olp, 0, s, &scales);
            int bad = 0;
            if (dt == FR_OPT_STATE_BF16) {
                CU_ASSERT_PTR_NULL(scales);
                for (int k = 0; k < 300; k++) bad += ((const uint16_t *)raw)[k] != fr_f32_to_bf16(ref[k]);
            } else {
                float want[300], wsc[3];
                uint8_t wc[300];
                for (int k = 0; k < 300; k++) want[k] = s ? sqrtf(ref[k]) : ref[k];
                fr_lowp_quantize_blocks(want, 300, wc, wsc);
                bad += memcmp(wc, raw, 300) != 0 || memcmp(wsc, scales, sizeof wsc) != 0;
            }
            CU_ASSERT_EQUAL(bad, 0);
        }
        pair_free(&q);
    }
}

/* Many steps: the low-precision parameters stay close to the FP32 ones. */
static void test_tracks_fp32(void)
{
    fr_rng r = fr_test_rng("tracks_fp32");
    for (int dt = FR_OPT_STATE_F32; dt <= FR_OPT_STATE_FP8; dt++)
        for (int master = 0; master <= 1; master++) {
            if (dt == FR_OPT_STATE_F32 && !master) continue;
            pair q;
            pair_new(&q, (fr_opt_state_dtype)dt, master, &r);
            double worst = 0;
            for (int step = 0; step < 50; step++) {
                for (int i = 0; i < 300; i++) q.g[i] = (float)(fr_rng_normal(&r) * 0.1 + 0.01 * q.p32[i]);
                FR_ASSERT_OK(fr_optimizer_step(q.o32, 1e-3));
                FR_ASSERT_OK(fr_optimizer_step(q.olp, 1e-3));
            }
            /* without bf16 master: the moments' quantization moves the parameters by a small
               part of the 50 steps' travel (<= 0.05 at lr 1e-3). With it, stochastic rounding is
               a random walk of variance <= ulp(p) * |step| per step: sd <= sqrt(50 * ulp * 2e-3)
               (Adam's step is ~lr, at most a few lr), checked at 6 sd; and it is unbiased: the
               mean difference is within 4 standard errors of 0. */
            double mean = 0, ms = 0;
            for (int i = 0; i < 300; i++) {
                double d = (double)q.plp[i] - (double)q.p32[i];
                double sd = master ? sqrt(50 * ldexp(fabs(q.p32[i]), -7) * 2e-3) : 0;
                worst = fmax(worst, fabs(d) - 6 * sd);
                mean += d / 300;
                ms += d * d / 300;
            }
            printf(" (%s state, %s master: worst parameter difference beyond the bound %.3g, mean %.2g) ",
                   fr_lowp_state_name((fr_opt_state_dtype)dt), master ? "bf16" : "fp32", worst, mean);
            CU_ASSERT(worst < 0.005);
            CU_ASSERT(fabs(mean) <= 4 * sqrt(ms / 300) + 1e-7);
            if (master)
                for (int i = 0; i < 300; i++) CU_ASSERT_EQUAL(q.plp[i], fr_bf16_to_f32(fr_f32_to_bf16(q.plp[i])));
            pair_free(&q);
        }
}

static void test_stochastic_rounding(void)
{
    fr_rng r = fr_test_rng("stochastic_rounding");
    for (int t = 0; t < 20; t++) {
        float x = (float)(fr_rng_normal(&r) * exp2(floor(fr_rng_uniform(&r) * 20) - 10));
        uint32_t u;
        memcpy(&u, &x, 4);
        uint32_t lo_bits = u & 0xFFFF0000u;
        float lo, hi;
        memcpy(&lo, &lo_bits, 4);
        uint32_t hi_bits = lo_bits + 0x10000u;
        memcpy(&hi, &hi_bits, 4);
        double sum = 0;
        const int n = 20000;
        for (int k = 0; k < n; k++) {
            float y = fr_lowp_sr_bf16(x, fr_lowp_sr_key(3, t, 0), k);
            CU_ASSERT(y == lo || y == hi);
            sum += y;
        }
        double d = fabs((double)hi - (double)lo);
        double se = d / 2 / sqrt((double)n); /* at most: a Bernoulli's sd is <= 1/2 */
        CU_ASSERT(fabs(sum / n - (double)x) <= 4 * se);
        CU_ASSERT_EQUAL(fr_lowp_sr_bf16(x, 99, 5), fr_lowp_sr_bf16(x, 99, 5));
    }
    /* never rounds a finite value to Inf */
    float big = 3.3895e38f;
    for (int k = 0; k < 100; k++) CU_ASSERT(isfinite(fr_lowp_sr_bf16(big, 1, k)));
    CU_ASSERT(isnan(fr_lowp_sr_bf16(NAN, 1, 0)));
}

static void test_sgd_refuses(void)
{
    float p[4] = {0}, g[4] = {0};
    fr_opt_config c = fr_opt_config_sgd();
    c.state_dtype = FR_OPT_STATE_FP8;
    fr_opt_param a = {"w", p, g, 1, {4}, FR_DECAY_AUTO};
    fr_optimizer *o = NULL;
    CU_ASSERT_EQUAL(fr_optimizer_create(&c, &a, 1, &o), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(o);
    CU_ASSERT_EQUAL(fr_lowp_state_bytes(FR_OPT_STATE_FP8, 129), 129 + 8);
    CU_ASSERT_EQUAL(fr_lowp_state_bytes(FR_OPT_STATE_BF16, 129), 258);
}

static CU_TestInfo tests[] = {
    {"fp8 block round trip vs float64", test_block_roundtrip},
    {"first step equals FP32", test_first_step_exact},
    {"tracks FP32 over 50 steps", test_tracks_fp32},
    {"stochastic bf16 rounding", test_stochastic_rounding},
    {"SGD refuses; sizes", test_sgd_refuses},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"optim_lowp", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
