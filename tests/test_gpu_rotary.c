/* GPU kernels of the fused rotary embedding (ops/cuda/rotary.cu) against the CPU kernels
 * (ops/rotary.c), fresh random N(0, 1) inputs: Rotary and RotaryGrad over ragged shapes (hd/2 a
 * multiple of 4: the float4 path; hd = 10, 6, 2: one pair per thread; empty), broadcast tables
 * ([T, hd], [1, 1, T, hd], per batch [B, 1, T, hd], [T, 1] broadcast along the last axis, cos
 * and sin of different shapes), float64, a 1B-layer-sized q ([2, 32, 512, 64]), and all of
 * these with interleaved=1; the partial rotary (rotary_dim < hd: the Pythia shape [2, 8, 64, 256]
 * with R 64 on the float4 path, R 4 of 16 and an odd hd 7 with R 2 one pair per thread, an
 * unaligned hd 6 with R 4; interleaved too), forward and backward.
 * Tolerance: 1e-5 relative L2 (the contract; float32 math against the CPU's once-rounded
 * double), float64 1e-12. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

typedef struct rcase {
    int rx, rc, rs;
    int64_t x[5], c[5], s[5];
} rcase;

static const rcase cases[] = {
    {2, 2, 2, {3, 8}, {3, 8}, {3, 8}},
    {4, 2, 2, {2, 3, 5, 64}, {5, 64}, {5, 64}},
    {4, 4, 4, {2, 4, 33, 128}, {1, 1, 33, 128}, {1, 1, 33, 128}},
    {5, 2, 2, {2, 2, 3, 17, 64}, {17, 64}, {17, 64}},
    {4, 4, 4, {3, 2, 7, 16}, {3, 1, 7, 16}, {3, 1, 7, 16}},
    {4, 2, 2, {2, 3, 9, 10}, {9, 10}, {9, 10}},
    {3, 2, 2, {4, 5, 6}, {5, 1}, {5, 1}},
    {3, 2, 1, {3, 11, 24}, {11, 24}, {24}},
    {2, 2, 2, {7, 2}, {7, 2}, {7, 2}},
    {3, 2, 2, {0, 3, 8}, {3, 8}, {3, 8}},
    {4, 2, 2, {2, 32, 512, 64}, {512, 64}, {512, 64}},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static void run_case_rd(fr_rng *rng, fr_dtype dt, const rcase *c, int grad, int interleaved, int64_t rd)
{
    fr_tensor *ins[3] = {tt_randn(rng, dt, c->rx, c->x, 0.0, 1.0), tt_randn(rng, dt, c->rc, c->c, 0.0, 1.0),
                         tt_randn(rng, dt, c->rs, c->s, 0.0, 1.0)};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", grad ? "RotaryGrad" : "Rotary", 1, 3, ins, 0u, 1);
    if (interleaved) TN_ATTR(&t, int, "interleaved", 1);
    if (rd) TN_ATTR(&t, int, "rotary_dim", rd);
    FR_ASSERT_OK(tn_run(&t));
    char what[256], sx[96], sc[96];
    fr_shape_str(c->rx, c->x, sx, sizeof sx);
    fr_shape_str(c->rc, c->c, sc, sizeof sc);
    snprintf(what, sizeof what, "%s %s X %s cos %s%s rotary_dim %lld", grad ? "RotaryGrad" : "Rotary",
             fr_dtype_name(dt), sx, sc, interleaved ? " interleaved" : "", (long long)rd);
    gpu_check(&t, dt == FR_F64 ? 1e-12 : 1e-5, what);
    tn_free(&t);
    for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
}

static void run_case_il(fr_rng *rng, fr_dtype dt, const rcase *c, int grad, int interleaved)
{
    run_case_rd(rng, dt, c, grad, interleaved, 0);
}

static void run_case(fr_rng *rng, fr_dtype dt, const rcase *c, int grad) { run_case_il(rng, dt, c, grad, 0); }

static void test_rotary(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_rotary_fwd");
    for (int i = 0; i < N_CASES; i++) run_case(&rng, FR_F32, &cases[i], 0);
}

static void test_rotary_grad(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_rotary_bwd");
    for (int i = 0; i < N_CASES; i++) run_case(&rng, FR_F32, &cases[i], 1);
}

static void test_float64(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_rotary_f64");
    for (int i = 0; i < N_CASES - 1; i++) {
        run_case(&rng, FR_F64, &cases[i], 0);
        run_case(&rng, FR_F64, &cases[i], 1);
    }
}

/* interleaved=1 (pairs 2p, 2p + 1): one pair per thread, forward and backward */
static void test_interleaved(void)
{
    if (!gpu_available()) return;
    fr_rng rng = fr_test_rng("gpu_rotary_interleaved");
    for (int i = 0; i < N_CASES; i++)
        for (int grad = 0; grad < 2; grad++) run_case_il(&rng, i % 3 ? FR_F32 : FR_F64, &cases[i], grad, 1);
}

/* rotary_dim < hd: the tables [.., R], the columns past R copied */
static void test_partial(void)
{
    if (!gpu_available()) return;
    static const struct {
        rcase c;
        int64_t rd;
    } pc[] = {
        {{4, 2, 2, {2, 8, 64, 256}, {64, 64}, {64, 64}}, 64},
        {{4, 4, 4, {2, 4, 11, 16}, {1, 1, 11, 4}, {1, 1, 11, 4}}, 4},
        {{3, 2, 2, {3, 5, 7}, {5, 2}, {5, 2}}, 2},
        {{3, 2, 2, {3, 5, 6}, {5, 4}, {5, 4}}, 4},
    };
    fr_rng rng = fr_test_rng("gpu_rotary_partial");
    for (size_t i = 0; i < sizeof pc / sizeof pc[0]; i++)
        for (int m = 0; m < 4; m++) /* bit 0: backward; bit 1: interleaved */
            run_case_rd(&rng, i == 3 ? FR_F64 : FR_F32, &pc[i].c, m & 1, m >> 1, pc[i].rd);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"Rotary == CPU (1e-5), broadcast tables, ragged", test_rotary},
        {"RotaryGrad == CPU (1e-5), broadcast tables, ragged", test_rotary_grad},
        {"float64 == CPU (1e-12)", test_float64},
        {"interleaved Rotary/RotaryGrad == CPU", test_interleaved},
        {"partial rotary (rotary_dim < hd) == CPU", test_partial},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_rotary", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
