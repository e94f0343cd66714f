/* MatMul, Gemm and Einsum on the CUDA backend against the CPU kernels (ops/matmul.c,
 * ops/einsum.c), on fresh random inputs: every MatMul form of the CPU tests (1-D operands,
 * batch broadcasting both ways, the folded Linear case, zero-size M/N/K/batch), large products
 * spread over many thread blocks, every Gemm transA/transB/alpha/beta/C-broadcast combination,
 * float64, and the Einsum equations exporters emit.
 * Tolerances: float32 within 1e-5 relative L2 of the CPU (cuBLASLt sums in its own order, in
 * true float32: no TF32), float64 within 1e-12; Einsum sums in double in the CPU's order, so
 * its results must be bit-identical (0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

/* Run t on the CPU and the GPU and compare (gpu_check); print the case on failure. */
static int compare_node(tnode *t, double tol, const char *label)
{
    if (tn_run(t) != FR_OK) {
        gpu_print_case(label, t);
        fprintf(stderr, "    CPU run failed: %s\n", fr_last_error());
        return 0;
    }
    return gpu_check(t, tol, label);
}

/* ---- MatMul ---- */

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

static const struct { shp a, b; } mm_cases[] = {
    {{2, {3, 4}}, {2, {4, 5}}},
    {{1, {4}}, {2, {4, 5}}},
    {{2, {3, 4}}, {1, {4}}},
    {{1, {4}}, {1, {4}}},
    {{4, {2, 1, 3, 4}}, {3, {5, 4, 6}}},
    {{3, {5, 4, 6}}, {4, {2, 1, 6, 3}}},
    {{3, {2, 7, 8}}, {2, {8, 9}}},
    {{3, {1, 7, 8}}, {2, {8, 9}}},
    {{4, {3, 1, 7, 8}}, {3, {1, 8, 9}}},
    {{2, {3, 4}}, {3, {2, 4, 5}}},
    {{1, {4}}, {3, {2, 4, 5}}},
    {{3, {2, 3, 4}}, {1, {4}}},
    {{3, {2, 3, 4}}, {3, {2, 4, 5}}},
    {{3, {1, 3, 4}}, {3, {2, 4, 5}}},
    {{4, {2, 1, 3, 4}}, {4, {1, 3, 4, 2}}},
    {{2, {1, 1}}, {2, {1, 1}}},
    {{2, {0, 4}}, {2, {4, 5}}},
    {{2, {3, 0}}, {2, {0, 5}}},
    {{1, {0}}, {1, {0}}},
    {{3, {2, 3, 0}}, {3, {2, 0, 5}}},
    {{3, {2, 3, 0}}, {2, {0, 5}}},
    {{2, {3, 4}}, {2, {4, 0}}},
    {{3, {0, 3, 4}}, {2, {4, 5}}},
    {{3, {1, 3, 4}}, {3, {0, 4, 5}}},
    {{3, {4, 33, 65}}, {2, {65, 31}}},
    {{3, {3, 17, 40}}, {3, {3, 40, 23}}},
    /* GPU-specific: merged and unmerged batch dims, attention shapes, big enough for many
     * blocks and for cuBLASLt's tiled kernels with partial tiles */
    {{4, {2, 3, 33, 17}}, {4, {2, 3, 17, 29}}},   /* both batched: one merged batch */
    {{4, {2, 3, 33, 17}}, {4, {1, 3, 17, 29}}},   /* B broadcast over the outer dim */
    {{4, {2, 1, 33, 17}}, {4, {2, 3, 17, 29}}},   /* A broadcast over the inner dim */
    {{4, {1, 3, 33, 17}}, {3, {1, 17, 29}}},      /* B shared: folds into M */
    {{3, {4, 129, 257}}, {2, {257, 130}}},        /* folded Linear, odd dims */
    {{3, {8, 128, 64}}, {3, {8, 64, 128}}},       /* attention scores */
    {{2, {1000, 333}}, {2, {333, 517}}},          /* 517k outputs */
    {{1, {4097}}, {2, {4097, 3}}},                /* long K, GEMV */
    {{2, {2, 3000}}, {1, {3000}}},
};

static void matmul_cases(fr_dtype dt, double tol)
{
    fr_rng r = fr_test_rng(dt == FR_F32 ? "gpu_matmul_f32" : "gpu_matmul_f64");
    int n_cases = (int)(sizeof mm_cases / sizeof mm_cases[0]);
    for (int c = 0; c < n_cases; c++) {
        fr_tensor *a = tt_randn(&r, dt, mm_cases[c].a.r, mm_cases[c].a.d, 0, 1);
        fr_tensor *b = tt_randn(&r, dt, mm_cases[c].b.r, mm_cases[c].b.d, 0, 1);
        fr_tensor *ins[2] = {a, b};
        tnode t;
        tn_init(&t, "MatMul", 13, 2, ins, 0, 1);
        char label[256], s1[96], s2[96];
        snprintf(label, sizeof label, "MatMul %s x %s %s", fr_shape_str(a->rank, a->dims, s1, sizeof s1),
                 fr_shape_str(b->rank, b->dims, s2, sizeof s2), fr_dtype_name(dt));
        CU_ASSERT(compare_node(&t, tol, label));
        tn_free(&t);
        fr_tensor_free(a);
        fr_tensor_free(b);
    }
}

static void test_matmul_f32(void) { matmul_cases(FR_F32, 1e-5); }
static void test_matmul_f64(void) { matmul_cases(FR_F64, 1e-12); }

/* Integers and mixed dtypes: the GPU kernel refuses them like the CPU (shape inference does it
 * first; run on the GPU directly to see the kernel's own message). */
static void test_matmul_errors(void)
{
    fr_rng r = fr_test_rng("gpu_matmul_errors");
    int64_t d34[2] = {3, 4}, d45[2] = {4, 5};
    fr_tensor *a = tt_randn(&r, FR_F32, 2, d34, 0, 1), *b = tt_randn(&r, FR_F32, 2, d45, 0, 1);
    fr_tensor *ins[2] = {a, b};
    tnode t;
    tn_init(&t, "MatMul", 13, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *g[TN_MAX];
    /* wrong dtype slipped past inference: the kernel names it */
    a->dtype = FR_I32;
    b->dtype = FR_I32;
    CU_ASSERT_EQUAL(tn_run_gpu(&t, g), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "int32"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "node_under_test"));
    gpu_free_outputs(&t, g);
    a->dtype = FR_F32;
    b->dtype = FR_F32;
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- Gemm ---- */

static int run_gemm(fr_rng *r, fr_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha,
                    float beta, int ci, int set_attrs, double tol)
{
    fr_tensor *ins[3];
    tnode t;
    tn_init_gemm(&t, r, dt, M, N, K, ta, tb, alpha, beta, ci, set_attrs, ins);
    char label[256];
    snprintf(label, sizeof label, "Gemm %s M=%lld N=%lld K=%lld transA=%d transB=%d alpha=%g beta=%g C#%d",
             fr_dtype_name(dt), (long long)M, (long long)N, (long long)K, ta, tb, alpha, beta, ci);
    int ok = compare_node(&t, tol, label);
    tn_free(&t);
    for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
    return ok;
}

static void test_gemm_combos(void)
{
    fr_rng r = fr_test_rng("gpu_gemm_combos");
    const float alphas[] = {1.0f, 0.37f, -2.0f}, betas[] = {1.0f, 0.0f, -0.6f};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int ai = 0; ai < 3; ai++)
                for (int bi = 0; bi < 3; bi++)
                    for (int ci = 0; ci < TT_GEMM_N_C; ci++) {
                        int64_t M = 1 + (int64_t)(fr_rng_uniform(&r) * 20);
                        int64_t N = 1 + (int64_t)(fr_rng_uniform(&r) * 20);
                        int64_t K = 1 + (int64_t)(fr_rng_uniform(&r) * 30);
                        CU_ASSERT(run_gemm(&r, FR_F32, M, N, K, ta, tb, alphas[ai], betas[bi], ci, 1, 1e-5));
                    }
    CU_ASSERT(run_gemm(&r, FR_F32, 5, 6, 7, 0, 0, 1.0f, 1.0f, 6, 0, 1e-5)); /* default attributes */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            CU_ASSERT(run_gemm(&r, FR_F64, 9, 4, 11, ta, tb, 0.5f, 2.0f, 4, 1, 1e-12));
            CU_ASSERT(run_gemm(&r, FR_F64, 130, 67, 200, ta, tb, 1.0f, 1.0f, 6, 1, 1e-12));
            CU_ASSERT(run_gemm(&r, FR_F32, 300, 257, 515, ta, tb, 0.8f, -1.0f, 5, 1, 1e-5)); /* many tiles */
        }
    CU_ASSERT(run_gemm(&r, FR_F32, 1, 1, 1, 1, 0, 1.0f, 1.0f, 1, 1, 1e-5));
    CU_ASSERT(run_gemm(&r, FR_F32, 3, 4, 0, 0, 1, 1.0f, 0.5f, 6, 1, 1e-6)); /* K = 0: Y = beta C */
    CU_ASSERT(run_gemm(&r, FR_F32, 3, 4, 0, 0, 0, 1.0f, 1.0f, 0, 1, 0.0));  /* K = 0, no C: zeros */
    CU_ASSERT(run_gemm(&r, FR_F64, 3, 4, 0, 1, 0, 1.0f, 1.0f, 0, 1, 0.0));
    CU_ASSERT(run_gemm(&r, FR_F32, 0, 4, 5, 0, 0, 1.0f, 1.0f, 3, 1, 0.0));  /* M = 0 */
    CU_ASSERT(run_gemm(&r, FR_F32, 3, 0, 5, 1, 0, 1.0f, 1.0f, 0, 1, 0.0));  /* N = 0 */
}

/* beta = 0 ignores C: inf / NaN in C do not reach Y */
static void test_gemm_beta_zero_ignores_c(void)
{
    fr_rng r = fr_test_rng("gpu_gemm_beta_zero");
    int64_t da[2] = {2, 3}, db[2] = {3, 4}, dc[1] = {4};
    fr_tensor *a = tt_randn(&r, FR_F32, 2, da, 0, 1), *b = tt_randn(&r, FR_F32, 2, db, 0, 1);
    fr_tensor *c = tt_new(FR_F32, 1, dc);
    for (int i = 0; i < 4; i++) ((float *)c->data)[i] = i % 2 ? INFINITY : NAN;
    fr_tensor *ins[3] = {a, b, c};
    tnode t;
    tn_init(&t, "Gemm", 11, 3, ins, 0, 1);
    TN_ATTR(&t, float, "beta", 0.0f);
    CU_ASSERT(compare_node(&t, 1e-5, "Gemm beta=0 with inf/NaN C"));
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
    fr_tensor_free(c);
}

/* ---- Einsum ---- */

static const struct {
    const char *eq;
    int n;
    shp s[3];
} es_cases[] = {
    {"i,j->ij", 2, {{1, {7}}, {1, {5}}}},                      /* torch.outer (rotary) */
    {"i,j->ij", 2, {{1, {4096}}, {1, {64}}}},                  /* rotary table, 262k outputs */
    {"bhqd,bhkd->bhqk", 2, {{4, {2, 3, 4, 5}}, {4, {1, 3, 6, 5}}}},
    {"bhqd,bhkd->bhqk", 2, {{4, {2, 4, 33, 16}}, {4, {2, 4, 35, 16}}}},
    {"bhqk,bhkd->bhqd", 2, {{4, {2, 2, 9, 11}}, {4, {2, 2, 11, 8}}}},
    {"ij,jk", 2, {{2, {3, 4}}, {2, {4, 2}}}},                  /* implicit output "ik" */
    {"ij,jk->ik", 2, {{2, {0, 4}}, {2, {4, 2}}}},              /* empty output */
    {"ij,jk->ik", 2, {{2, {3, 0}}, {2, {0, 2}}}},              /* empty sum: zeros */
    {"ij->", 1, {{2, {37, 41}}}},                              /* full reduction */
    {"ij->ji", 1, {{2, {5, 3}}}},
    {"bij,bjk,bkl->bil", 3, {{3, {2, 3, 4}}, {3, {2, 4, 5}}, {3, {1, 5, 2}}}},
    {"i,i->", 2, {{1, {1000}}, {1, {1000}}}},
};

static void test_einsum(void)
{
    fr_rng r = fr_test_rng("gpu_einsum");
    for (int c = 0; c < (int)(sizeof es_cases / sizeof es_cases[0]); c++)
        for (int f = 0; f < 2; f++) {
            fr_dtype dt = f ? FR_F64 : FR_F32;
            fr_tensor *ins[3] = {NULL, NULL, NULL};
            for (int i = 0; i < es_cases[c].n; i++)
                ins[i] = tt_randn(&r, dt, es_cases[c].s[i].r, es_cases[c].s[i].d, 0, 1);
            tnode t;
            tn_init(&t, "Einsum", 12, es_cases[c].n, ins, 0, 1);
            TN_ATTR(&t, string, "equation", es_cases[c].eq);
            char label[128];
            snprintf(label, sizeof label, "Einsum '%s' %s (bit-identical)", es_cases[c].eq, fr_dtype_name(dt));
            CU_ASSERT(compare_node(&t, 0.0, label));
            tn_free(&t);
            for (int i = 0; i < es_cases[c].n; i++) fr_tensor_free(ins[i]);
        }
}

static CU_TestInfo tests[] = {
    {"MatMul float32: every CPU-test form plus large/batched ones", test_matmul_f32},
    {"MatMul float64", test_matmul_f64},
    {"MatMul kernel refuses integer operands", test_matmul_errors},
    {"Gemm transA/transB/alpha/beta/C combinations, float64, empty dims", test_gemm_combos},
    {"Gemm beta=0 ignores C", test_gemm_beta_zero_ignores_c},
    {"Einsum equations used by exporters", test_einsum},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_matmul", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
