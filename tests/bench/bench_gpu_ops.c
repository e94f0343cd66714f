/* GPU micro-benchmark of the memory-bound kernels around a GPT-NeoX (Pythia-1B) layer at batch
 * 8 x seq 2048 (16384 tokens, hidden 2048, MLP 8192, QKV 6144): each kernel's time and its share
 * of the memory ceiling (bytes read + written at BENCH_TBPS TB/s, default 4.8: an H200).
 *
 *     build-cuda/bench_gpu_ops                 # all
 *     BENCH_TBPS=3.35 build-cuda/bench_gpu_ops # an H100 SXM's ceiling
 *     FR_TEST_ONLY=LayerNormGrad build-cuda/bench_gpu_ops # the LayerNorm backwards only
 *     FR_TEST_ONLY=RMSNormGrad build-cuda/bench_gpu_ops   # the RMSNorm backwards only
 *
 * Inputs are device buffers of the bytes 0x3c (tests/gpu_op_time.h); the numbers are timings,
 * never asserted (the GPU test programs check the results). Not a ctest: it takes ~10 s on a
 * GPU and says SKIP without one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"

#define TOKENS 16384
#define REPS 20

static double tbps(void)
{
    const char *e = getenv("BENCH_TBPS");
    double v = e ? atof(e) : 0;
    return v > 0 ? v : 4.8;
}

/* one line: name, ms, GB/s, % of the ceiling for `bytes` */
static void report(const char *name, double ms, double bytes)
{
    if (ms <= 0) return;
    const double gbs = bytes / (ms * 1e6);
    printf("\n    %-58s %8.3f ms %6.0f GB/s %5.1f%%", name, ms, gbs, 100.0 * gbs / (tbps() * 1e3));
}

/* ---- SumToShape: the bias gradients, dY [16384, N] -> [N] ---- */

static void bench_sum_to_shape(void)
{
    if (!gpu_available()) return;
    static const int64_t ns[4] = {6144, 2048, 8192, 2048}; /* QKV, dense, up, down */
    double per_layer = 0;
    for (int i = 0; i < 4; i++) {
        const int64_t d[2] = {TOKENS, ns[i]};
        fr_tensor x = gpu_shape_only(FR_F32, 2, d);
        fr_tensor *ins[1] = {&x};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SumToShape", 1, 1, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", 1, &ns[i]);
        double bytes = 0;
        const double ms = gpu_time_node(&t, REPS, &bytes);
        char name[96];
        snprintf(name, sizeof name, "SumToShape [16384, %lld] -> [%lld]", (long long)ns[i], (long long)ns[i]);
        report(name, ms, bytes);
        per_layer += ms;
        tn_free(&t);
    }
    printf("\n    SumToShape per step (16 layers x 4): %.2f ms\n", 16 * per_layer);
}

/* ---- Linear fp8 (current recipe, X's codes saved) with and without bias ---- */

static double time_linear(int64_t K, int64_t N, int bias)
{
    const int64_t xd[2] = {TOKENS, K}, wd[2] = {K, N}, bd[1] = {N};
    fr_tensor x = gpu_shape_only(FR_F32, 2, xd), w = gpu_shape_only(FR_F32, 2, wd), b = gpu_shape_only(FR_F32, 1, bd);
    fr_tensor *ins[3] = {&x, &w, &b};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Linear", 1, bias ? 3 : 2, ins, 0, 5);
    TN_ATTR(&t, string, "precision", "fp8");
    TN_ATTR(&t, string, "recipe", "current");
    TN_ATTR(&t, string, "state_prefix", "fp8_state/lin");
    double bytes = 0;
    const double ms = gpu_time_node(&t, REPS, &bytes);
    tn_free(&t);
    return ms;
}

static void bench_linear_bias(void)
{
    if (!gpu_available()) return;
    static const int64_t kn[4][2] = {{2048, 6144}, {2048, 2048}, {2048, 8192}, {8192, 2048}};
    double extra = 0;
    for (int i = 0; i < 4; i++) {
        const int64_t K = kn[i][0], N = kn[i][1];
        const double with = time_linear(K, N, 1), without = time_linear(K, N, 0);
        char name[128];
        snprintf(name, sizeof name, "Linear fp8 [16384, %lld] -> %lld, no bias", (long long)K, (long long)N);
        printf("\n    %-58s %8.3f ms", name, without);
        snprintf(name, sizeof name, "  + bias (the difference; ceiling: Y read + written)");
        report(name, with - without, 2.0 * TOKENS * (double)N * 4);
        extra += with - without;
    }
    printf("\n    bias passes per step (16 layers x 4): %.2f ms\n", 16 * extra);
}

/* ---- AddLayerNorm / AddLayerNormGrad, the parallel block's two norms, [16384, 2048] ---- */

static void bench_add_layer_norm(void)
{
    if (!gpu_available()) return;
    const int64_t d[2] = {TOKENS, 2048}, dw[1] = {2048};
    fr_tensor x = gpu_shape_only(FR_F32, 2, d), p = gpu_shape_only(FR_F32, 1, dw);
    fr_tensor *fwd[6] = {&x, &x, &p, &p, &p, &p}, *bwd[6] = {&x, &x, &p, &x, &x, &p};
    for (int grad = 0; grad < 2; grad++) {
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, grad ? "AddLayerNormGrad" : "AddLayerNorm", 1, 6, grad ? bwd : fwd, 0,
                       grad ? 5 : 3);
        double bytes = 0;
        const double ms = gpu_time_node(&t, REPS, &bytes);
        report(grad ? "AddLayerNormGrad [16384, 2048], two norms, dH" : "AddLayerNorm [16384, 2048], two norms", ms,
               bytes);
        tn_free(&t);
    }
    printf("\n");
}

/* ---- the LayerNorm backwards at 16384 rows of 2048 (Pythia-1B), 1024 and 768 features ---- */

static void bench_norm_grads(void)
{
    if (!gpu_available()) return;
    static const int64_t lens[3] = {2048, 1024, 768};
    for (int li = 0; li < 3; li++) {
        const int64_t d[2] = {TOKENS, lens[li]}, dw[1] = {lens[li]};
        fr_tensor x = gpu_shape_only(FR_F32, 2, d), xb = gpu_shape_only(FR_BF16, 2, d), p = gpu_shape_only(FR_F32, 1, dw);
        /* AddLayerNormGrad: one norm with dH (float32 and bfloat16 dY), two norms with dH */
        for (int c = 0; c < 3; c++) {
            fr_tensor *ins[6] = {c == 1 ? &xb : &x, &x, &p, &x, &x, &p};
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddLayerNormGrad", 1, c == 2 ? 6 : 4, ins, 0, c == 2 ? 5 : 3);
            double bytes = 0;
            const double ms = gpu_time_node(&t, REPS, &bytes);
            char name[96];
            snprintf(name, sizeof name, "AddLayerNormGrad [16384, %lld] %s", (long long)lens[li],
                     c == 0 ? "dY f32, dH" : c == 1 ? "dY bf16, dH" : "two norms f32, dH");
            report(name, ms, bytes);
            tn_free(&t);
        }
        /* LayerNormGrad(dY, X, Scale, B) -> dX, dScale, dB */
        fr_tensor *ins[4] = {&x, &x, &p, &p};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "LayerNormGrad", 1, 4, ins, 0, 3);
        double bytes = 0;
        const double ms = gpu_time_node(&t, REPS, &bytes);
        char name[96];
        snprintf(name, sizeof name, "LayerNormGrad [16384, %lld] f32 (dX, dScale, dB)", (long long)lens[li]);
        report(name, ms, bytes);
        tn_free(&t);
    }
    printf("\n");
}

/* ---- the RMSNorm backwards at 16384 rows of 4096, 2048, 1024, 768 features: the team kernel
 * (default) and FP8RUN_RMS_BWD_TEAMS=0 (one row per block) ---- */

static void bench_rms_norm_grads(void)
{
    if (!gpu_available()) return;
    static const int64_t lens[4] = {4096, 2048, 1024, 768};
    const char *prev = getenv("FP8RUN_RMS_BWD_TEAMS");
    char saved[32] = "";
    if (prev) snprintf(saved, sizeof saved, "%s", prev);
    for (int li = 0; li < 4; li++) {
        const int64_t d[2] = {TOKENS, lens[li]}, dw[1] = {lens[li]};
        fr_tensor x = gpu_shape_only(FR_F32, 2, d), xb = gpu_shape_only(FR_BF16, 2, d),
                  p = gpu_shape_only(FR_F32, 1, dw);
        for (int teams = 1; teams >= 0; teams--) {
            setenv("FP8RUN_RMS_BWD_TEAMS", teams ? "1" : "0", 1);
            /* AddRMSNormGrad(dY, H, Scale[, dH]) -> dX, dScale: dY f32 with dH, dY bf16 with dH, f32 without */
            for (int c = 0; c < 3; c++) {
                fr_tensor *ins[4] = {c == 1 ? &xb : &x, &x, &p, &x};
                tnode t;
                tn_init_domain(&t, FR_DOMAIN_FP8RUN, "AddRMSNormGrad", 1, c == 2 ? 3 : 4, ins, 0, 2);
                double bytes = 0;
                const double ms = gpu_time_node(&t, REPS, &bytes);
                char name[96];
                snprintf(name, sizeof name, "AddRMSNormGrad [16384, %lld] %s%s", (long long)lens[li],
                         c == 0   ? "dY f32, dH"
                         : c == 1 ? "dY bf16, dH"
                                  : "dY f32",
                         teams ? "" : " (TEAMS=0)");
                report(name, ms, bytes);
                tn_free(&t);
            }
            /* RMSNormGrad(dY, X, Scale) -> dX, dScale: the same kernels */
            fr_tensor *ins[3] = {&x, &x, &p};
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "RMSNormGrad", 1, 3, ins, 0, 2);
            double bytes = 0;
            const double ms = gpu_time_node(&t, REPS, &bytes);
            char name[96];
            snprintf(name, sizeof name, "RMSNormGrad [16384, %lld] f32 (dX, dScale)%s", (long long)lens[li],
                     teams ? "" : " (TEAMS=0)");
            report(name, ms, bytes);
            tn_free(&t);
        }
    }
    if (prev)
        setenv("FP8RUN_RMS_BWD_TEAMS", saved, 1);
    else
        unsetenv("FP8RUN_RMS_BWD_TEAMS");
    printf("\n");
}

/* ---- Gelu and its gradient, [16384, 8192] float32 ---- */

static void bench_gelu(void)
{
    if (!gpu_available()) return;
    const int64_t d[2] = {TOKENS, 8192};
    fr_tensor x = gpu_shape_only(FR_F32, 2, d);
    fr_tensor *one[1] = {&x}, *two[2] = {&x, &x};
    static const char *const approx[2] = {"none", "tanh"};
    for (int a = 0; a < 2; a++) {
        tnode t;
        double bytes = 0, ms;
        char name[96];
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "Gelu", 1, 1, one, 0, 1);
        TN_ATTR(&t, string, "approximate", approx[a]);
        ms = gpu_time_node(&t, REPS, &bytes);
        snprintf(name, sizeof name, "Gelu approximate=%s [16384, 8192]", approx[a]);
        report(name, ms, bytes);
        tn_free(&t);
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "ActivationGrad", 1, 2, two, 0, 1);
        TN_ATTR(&t, string, "op", "Gelu");
        TN_ATTR(&t, string, "approximate", approx[a]);
        ms = gpu_time_node(&t, REPS, &bytes);
        snprintf(name, sizeof name, "ActivationGrad Gelu approximate=%s [16384, 8192]", approx[a]);
        report(name, ms, bytes);
        tn_free(&t);
    }
    printf("\n");
}

static CU_TestInfo benches[] = {
    {"SumToShape (bias gradients)", bench_sum_to_shape},
    {"Linear fp8 bias pass", bench_linear_bias},
    {"AddLayerNorm / AddLayerNormGrad", bench_add_layer_norm},
    {"AddLayerNormGrad / LayerNormGrad at 2048, 1024, 768 features", bench_norm_grads},
    {"AddRMSNormGrad / RMSNormGrad at 4096, 2048, 1024, 768 features, teams and TEAMS=0", bench_rms_norm_grads},
    {"Gelu / ActivationGrad", bench_gelu},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"bench_gpu_ops", NULL, NULL, NULL, NULL, benches}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
