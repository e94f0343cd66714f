/* ai.fp8run::MatMul on the GPU against the CPU: every transpose combination, GQA-style batch
 * broadcasting (folded into M on the GPU), fp32 (1e-5 relative L2) and bf16 (operands rounded
 * to bf16 on the tensor cores; 1e-2 as every BF16 GEMM), including attention-sized shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

static void check(fr_rng *r, int rank, const int64_t *da, const int64_t *db, int ta, int tb, const char *prec)
{
    fr_tensor *A = tt_randn(r, FR_F32, rank, da, 0, 1), *B = tt_randn(r, FR_F32, rank, db, 0, 1);
    fr_tensor *ins[2] = {A, B};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "MatMul", 1, 2, ins, 0u, 1);
    if (ta) TN_ATTR(&t, int, "transA", 1);
    if (tb) TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "precision", prec);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, strcmp(prec, "bf16") == 0 ? 1e-2 : 1e-5, "every transpose, GQA batch broadcasting");
    tn_free(&t);
    fr_tensor_free(A);
    fr_tensor_free(B);
}

static void test_shapes(void)
{
    fr_rng r = fr_test_rng("gpu_mmx");
    static const char *precs[2] = {"fp32", "bf16"};
    for (int p = 0; p < 2; p++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                /* [2, 3, G=4, M, K] x [2, 3, 1, K, N]: queries of 4 heads share one KV head */
                int64_t M = 33, K = 20, N = 17;
                int64_t da[5] = {2, 3, 4, ta ? K : M, ta ? M : K}, db[5] = {2, 3, 1, tb ? N : K, tb ? K : N};
                check(&r, 5, da, db, ta, tb, precs[p]);
                int64_t ea[3] = {5, ta ? K : M, ta ? M : K}, eb[3] = {5, tb ? N : K, tb ? K : N};
                check(&r, 3, ea, eb, ta, tb, precs[p]);
                int64_t fb[3] = {1, tb ? N : K, tb ? K : N}; /* B broadcast over the whole batch */
                check(&r, 3, ea, fb, ta, tb, precs[p]);
            }
    /* attention-sized: scores [1, 4, 3, 512, 64] x keys^T [1, 4, 1, 512, 64] (transB) */
    int64_t qa[5] = {1, 4, 3, 512, 64}, kb[5] = {1, 4, 1, 512, 64};
    check(&r, 5, qa, kb, 0, 1, "bf16");
    int64_t pa[5] = {1, 4, 3, 512, 512}, vb[5] = {1, 4, 1, 512, 64};
    check(&r, 5, pa, vb, 0, 0, "bf16");
    check(&r, 5, pa, vb, 0, 0, "fp32");
}

static CU_TestInfo tests[] = {
    {"ai.fp8run::MatMul: transposes, GQA broadcast, fp32 and bf16 vs CPU", test_shapes},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_matmul_bf16", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
