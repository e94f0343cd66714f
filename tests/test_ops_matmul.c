/* MatMul and Gemm (ops/matmul.c) against double-precision references written here, on fresh
 * random inputs: 1-D operands on either side, batch broadcasting in both directions
 * ([2,1,3,4] x [5,4,6]), the folded Linear case ([B,T,d] x [d,n]), zero-size M, N, K and
 * batch, float64, and every Gemm transA/transB/alpha/beta/C-broadcast combination.
 * Tolerance: float32 results within 1e-5 relative L2 of the double reference (float64 within
 * 1e-12); empty-K products must be exactly zero. Errors name the node and what is wrong. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* ---- MatMul ---- */

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

/* A, B and the expected output shape, written out by hand */
static const struct { shp a, b, y; } mm_cases[] = {
    {{2, {3, 4}}, {2, {4, 5}}, {2, {3, 5}}},
    {{1, {4}}, {2, {4, 5}}, {1, {5}}},
    {{2, {3, 4}}, {1, {4}}, {1, {3}}},
    {{1, {4}}, {1, {4}}, {0, {0}}},
    {{4, {2, 1, 3, 4}}, {3, {5, 4, 6}}, {4, {2, 5, 3, 6}}},
    {{3, {5, 4, 6}}, {4, {2, 1, 6, 3}}, {4, {2, 5, 4, 3}}},
    {{3, {2, 7, 8}}, {2, {8, 9}}, {3, {2, 7, 9}}},
    {{3, {1, 7, 8}}, {2, {8, 9}}, {3, {1, 7, 9}}},
    {{4, {3, 1, 7, 8}}, {3, {1, 8, 9}}, {4, {3, 1, 7, 9}}},
    {{2, {3, 4}}, {3, {2, 4, 5}}, {3, {2, 3, 5}}},
    {{1, {4}}, {3, {2, 4, 5}}, {2, {2, 5}}},
    {{3, {2, 3, 4}}, {1, {4}}, {2, {2, 3}}},
    {{3, {2, 3, 4}}, {3, {2, 4, 5}}, {3, {2, 3, 5}}},
    {{3, {1, 3, 4}}, {3, {2, 4, 5}}, {3, {2, 3, 5}}},
    {{4, {2, 1, 3, 4}}, {4, {1, 3, 4, 2}}, {4, {2, 3, 3, 2}}},
    {{2, {1, 1}}, {2, {1, 1}}, {2, {1, 1}}},
    {{2, {0, 4}}, {2, {4, 5}}, {2, {0, 5}}},
    {{2, {3, 0}}, {2, {0, 5}}, {2, {3, 5}}},
    {{1, {0}}, {1, {0}}, {0, {0}}},
    {{3, {2, 3, 0}}, {3, {2, 0, 5}}, {3, {2, 3, 5}}},
    {{3, {2, 3, 0}}, {2, {0, 5}}, {3, {2, 3, 5}}},
    {{2, {3, 4}}, {2, {4, 0}}, {2, {3, 0}}},
    {{3, {0, 3, 4}}, {2, {4, 5}}, {3, {0, 3, 5}}},
    {{3, {1, 3, 4}}, {3, {0, 4, 5}}, {3, {0, 3, 5}}},
    {{3, {4, 33, 65}}, {2, {65, 31}}, {3, {4, 33, 31}}},
    {{3, {3, 17, 40}}, {3, {3, 40, 23}}, {3, {3, 17, 23}}},
};

/* Independent reference: promote 1-D operands, broadcast batch dims, sum in double. */
static void mm_ref(const fr_tensor *a, const fr_tensor *b, const shp *ys, double *out)
{
    int ra = a->rank, rb = b->rank;
    int64_t M = ra >= 2 ? a->dims[ra - 2] : 1, K = a->dims[ra - 1];
    int64_t N = rb >= 2 ? b->dims[rb - 1] : 1;
    int nba = ra >= 2 ? ra - 2 : 0, nbb = rb >= 2 ? rb - 2 : 0;
    int nb = nba > nbb ? nba : nbb;
    int64_t bd[8], batch = 1;
    for (int k = 0; k < nb; k++) {
        int ia = k - (nb - nba), ib = k - (nb - nbb);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        bd[k] = da == 1 ? db : da;
        batch *= bd[k];
    }
    (void)ys;
    for (int64_t bi = 0; bi < batch; bi++) {
        /* batch coordinates -> A and B matrix index */
        int64_t rem = bi, ia_mat = 0, ib_mat = 0, mula = 1, mulb = 1;
        for (int k = nb - 1; k >= 0; k--) {
            int64_t c = rem % bd[k];
            rem /= bd[k];
            int ia = k - (nb - nba), ib = k - (nb - nbb);
            if (ia >= 0) {
                if (a->dims[ia] != 1) ia_mat += c * mula;
                mula *= a->dims[ia];
            }
            if (ib >= 0) {
                if (b->dims[ib] != 1) ib_mat += c * mulb;
                mulb *= b->dims[ib];
            }
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += fr_tensor_get_f64(a, ia_mat * M * K + m * K + k) *
                         fr_tensor_get_f64(b, ib_mat * K * N + k * N + j);
                out[(bi * M + m) * N + j] = s;
            }
    }
}

static void run_mm_case(fr_rng *r, fr_dtype dt, int c, double tol)
{
    fr_tensor *a = tt_randn(r, dt, mm_cases[c].a.r, mm_cases[c].a.d, 0, 1);
    fr_tensor *b = tt_randn(r, dt, mm_cases[c].b.r, mm_cases[c].b.d, 0, 1);
    fr_tensor *ins[2] = {a, b};
    tnode t;
    tn_init(&t, "MatMul", 13, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    tt_assert_shape(y, dt, mm_cases[c].y.r, mm_cases[c].y.d);
    int64_t cnt = fr_tensor_numel(y);
    double *ref = malloc(sizeof(double) * (size_t)(cnt ? cnt : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    mm_ref(a, b, &mm_cases[c].y, ref);
    double err = tt_rel_err(y, ref, cnt);
    CU_ASSERT(err <= tol);
    if (!(err <= tol))
        fprintf(stderr, "\n  MatMul case %d (%s): rel err %g\n", c, fr_dtype_name(dt), err);
    /* empty K: exactly zero */
    if (mm_cases[c].a.d[mm_cases[c].a.r - 1] == 0)
        for (int64_t i = 0; i < cnt; i++) CU_ASSERT_EQUAL(fr_tensor_get_f64(y, i), 0.0);
    free(ref);
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

static void test_matmul_f32(void)
{
    fr_rng r = fr_test_rng("matmul_f32");
    for (int c = 0; c < (int)(sizeof mm_cases / sizeof mm_cases[0]); c++)
        run_mm_case(&r, FR_F32, c, 1e-5);
}

static void test_matmul_f64(void)
{
    fr_rng r = fr_test_rng("matmul_f64");
    for (int c = 0; c < (int)(sizeof mm_cases / sizeof mm_cases[0]); c++)
        run_mm_case(&r, FR_F64, c, 1e-12);
}

/* A Linear-sized product through the folded single-GEMM path; checks against the reference
 * on a sample of rows spread over the batch. */
static void test_matmul_linear_large(void)
{
    fr_rng r = fr_test_rng("matmul_linear_large");
    int64_t da[3] = {4, 64, 96}, db[2] = {96, 80};
    fr_tensor *a = tt_randn(&r, FR_F32, 3, da, 0, 1), *b = tt_randn(&r, FR_F32, 2, db, 0, 1);
    fr_tensor *ins[2] = {a, b};
    tnode t;
    tn_init(&t, "MatMul", 9, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    const float *A = a->data, *B = b->data, *Y = t.out[0]->data;
    double num = 0, den = 0;
    for (int64_t row = 0; row < 4 * 64; row += 7)
        for (int64_t j = 0; j < 80; j++) {
            double s = 0;
            for (int64_t k = 0; k < 96; k++) s += (double)A[row * 96 + k] * B[k * 80 + j];
            num += (Y[row * 80 + j] - s) * (Y[row * 80 + j] - s);
            den += s * s;
        }
    CU_ASSERT(sqrt(num / den) <= 1e-5);
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

static void test_matmul_errors(void)
{
    fr_rng r = fr_test_rng("matmul_errors");
    tnode t;
    /* integer operands: unsupported, named */
    int64_t d34[2] = {3, 4}, d45[2] = {4, 5}, d54[2] = {5, 4};
    fr_tensor *ai = tt_randn(&r, FR_I32, 2, d34, 0, 1), *bi = tt_randn(&r, FR_I32, 2, d45, 0, 1);
    fr_tensor *ins[2] = {ai, bi};
    tn_init(&t, "MatMul", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("int32");
    tn_free(&t);
    /* inner dims differ */
    fr_tensor *a = tt_randn(&r, FR_F32, 2, d34, 0, 1), *b = tt_randn(&r, FR_F32, 2, d54, 0, 1);
    fr_tensor *ins2[2] = {a, b};
    tn_init(&t, "MatMul", 13, 2, ins2, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("inner dimensions");
    tn_free(&t);
    /* batch dims that do not broadcast */
    int64_t d234[3] = {2, 3, 4}, d345[3] = {3, 4, 5};
    fr_tensor *a3 = tt_randn(&r, FR_F32, 3, d234, 0, 1), *b3 = tt_randn(&r, FR_F32, 3, d345, 0, 1);
    fr_tensor *ins3[2] = {a3, b3};
    tn_init(&t, "MatMul", 13, 2, ins3, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("broadcast");
    tn_free(&t);
    /* a rank-0 operand */
    fr_tensor *s = tt_randn(&r, FR_F32, 0, NULL, 0, 1);
    fr_tensor *ins4[2] = {s, b};
    tn_init(&t, "MatMul", 13, 2, ins4, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank >= 1");
    tn_free(&t);
    /* mixed dtypes */
    fr_tensor *b64 = tt_randn(&r, FR_F64, 2, d45, 0, 1);
    fr_tensor *ins5[2] = {a, b64};
    tn_init(&t, "MatMul", 13, 2, ins5, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("float64");
    tn_free(&t);
    fr_tensor *to_free[] = {ai, bi, a, b, a3, b3, s, b64};
    for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) fr_tensor_free(to_free[i]);
}

/* ---- Gemm ---- */

static void run_gemm(fr_rng *r, fr_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb,
                     float alpha, float beta, int ci, int set_attrs, double tol)
{
    fr_tensor *ins[3];
    tnode t;
    tn_init_gemm(&t, r, dt, M, N, K, ta, tb, alpha, beta, ci, set_attrs, ins);
    const fr_tensor *a = ins[0], *b = ins[1], *c = ins[2];
    FR_ASSERT_OK(tn_run(&t));
    int64_t dy[2] = {M, N};
    tt_assert_shape(t.out[0], dt, 2, dy);
    double *ref = malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    /* the error is measured against the size of the terms, not of their sum: a single output
     * element can cancel (M = N = 1), and float32 rounding is relative to sum |a||b| */
    double d2 = 0, abs2 = 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
                double p = fr_tensor_get_f64(a, ta ? k * M + m : m * K + k) *
                           fr_tensor_get_f64(b, tb ? j * K + k : k * N + j);
                s += p;
                sa += p < 0 ? -p : p;
            }
            s *= alpha;
            sa *= alpha < 0 ? -alpha : alpha;
            if (c) {
                int64_t ci_ = 0;
                if (c->rank == 2)
                    ci_ = (c->dims[0] == 1 ? 0 : m * c->dims[1]) + (c->dims[1] == 1 ? 0 : j);
                if (c->rank == 1) ci_ = c->dims[0] == 1 ? 0 : j;
                s += (double)beta * fr_tensor_get_f64(c, ci_);
                double bc = (double)beta * fr_tensor_get_f64(c, ci_);
                sa += bc < 0 ? -bc : bc;
            }
            ref[m * N + j] = s;
            double dd = fr_tensor_get_f64(t.out[0], m * N + j) - s;
            d2 += dd * dd;
            abs2 += sa * sa;
        }
    double err = tt_rel_err(t.out[0], ref, M * N);
    if (isfinite(err) && abs2 > 0) err = sqrt(d2 / abs2); /* relative to the terms' size */
    CU_ASSERT(err <= tol);
    if (!(err <= tol))
        fprintf(stderr, "\n  Gemm M=%lld N=%lld K=%lld ta=%d tb=%d alpha=%g beta=%g C#%d: err %g\n",
                (long long)M, (long long)N, (long long)K, ta, tb, alpha, beta, ci, err);
    free(ref);
    tn_free(&t);
    for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
}

static void test_gemm_combos(void)
{
    fr_rng r = fr_test_rng("gemm_combos");
    const float alphas[] = {1.0f, 0.37f, -2.0f}, betas[] = {1.0f, 0.0f, -0.6f};
    int count = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int ai = 0; ai < 3; ai++)
                for (int bi = 0; bi < 3; bi++)
                    for (int ci = 0; ci < TT_GEMM_N_C; ci++) {
                        int64_t M = 1 + (int64_t)(fr_rng_uniform(&r) * 20);
                        int64_t N = 1 + (int64_t)(fr_rng_uniform(&r) * 20);
                        int64_t K = 1 + (int64_t)(fr_rng_uniform(&r) * 30);
                        run_gemm(&r, FR_F32, M, N, K, ta, tb, alphas[ai], betas[bi], ci, 1, 1e-5);
                        count++;
                    }
    CU_ASSERT_EQUAL(count, 2 * 2 * 3 * 3 * 8);
    /* default attributes (alpha = beta = 1, no transposes), float64, size-1 and empty dims */
    run_gemm(&r, FR_F32, 5, 6, 7, 0, 0, 1.0f, 1.0f, 6, 0, 1e-5);
    run_gemm(&r, FR_F64, 9, 4, 11, 1, 1, 0.5f, 2.0f, 4, 1, 1e-12);
    run_gemm(&r, FR_F32, 1, 1, 1, 1, 0, 1.0f, 1.0f, 1, 1, 1e-5);
    run_gemm(&r, FR_F32, 3, 4, 0, 0, 1, 1.0f, 0.5f, 6, 1, 1e-6);  /* K = 0: Y = beta C */
    run_gemm(&r, FR_F32, 3, 4, 0, 0, 0, 1.0f, 1.0f, 0, 1, 0.0);   /* K = 0, no C: zeros */
    run_gemm(&r, FR_F32, 0, 4, 5, 0, 0, 1.0f, 1.0f, 3, 1, 0.0);   /* M = 0 */
    run_gemm(&r, FR_F32, 3, 0, 5, 1, 0, 1.0f, 1.0f, 0, 1, 0.0);   /* N = 0 */
}

/* beta = 0 ignores C: an infinite C must not make NaN (onnxruntime does the same). */
static void test_gemm_beta_zero_ignores_c(void)
{
    fr_rng r = fr_test_rng("gemm_beta_zero");
    int64_t da[2] = {2, 3}, db[2] = {3, 4}, dc[1] = {4};
    fr_tensor *a = tt_randn(&r, FR_F32, 2, da, 0, 1), *b = tt_randn(&r, FR_F32, 2, db, 0, 1);
    fr_tensor *c = tt_new(FR_F32, 1, dc);
    for (int i = 0; i < 4; i++) ((float *)c->data)[i] = i % 2 ? INFINITY : NAN;
    fr_tensor *ins[3] = {a, b, c};
    tnode t;
    tn_init(&t, "Gemm", 11, 3, ins, 0, 1);
    TN_ATTR(&t, float, "beta", 0.0f);
    FR_ASSERT_OK(tn_run(&t));
    const float *A = a->data, *B = b->data, *Y = t.out[0]->data;
    for (int m = 0; m < 2; m++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 3; k++) s += (double)A[m * 3 + k] * B[k * 4 + j];
            CU_ASSERT(fabs(Y[m * 4 + j] - s) <= 1e-5 * (1 + fabs(s)));
        }
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
    fr_tensor_free(c);
}

static void test_gemm_errors(void)
{
    fr_rng r = fr_test_rng("gemm_errors");
    tnode t;
    int64_t d34[2] = {3, 4}, d45[2] = {4, 5}, d35x[2] = {4, 5}, d345[3] = {3, 4, 5};
    fr_tensor *a = tt_randn(&r, FR_F32, 2, d34, 0, 1), *b = tt_randn(&r, FR_F32, 2, d45, 0, 1);
    /* C that does not broadcast to [3, 5] */
    fr_tensor *c = tt_randn(&r, FR_F32, 2, d35x, 0, 1);
    fr_tensor *ins[3] = {a, b, c};
    tn_init(&t, "Gemm", 13, 3, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("does not broadcast");
    tn_free(&t);
    /* transA = 2 */
    tn_init(&t, "Gemm", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "transA", 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("transA");
    tn_free(&t);
    /* transB makes K mismatch */
    tn_init(&t, "Gemm", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "transB", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("inner dimensions");
    tn_free(&t);
    /* 3-D operand */
    fr_tensor *a3 = tt_randn(&r, FR_F32, 3, d345, 0, 1);
    fr_tensor *ins3[2] = {a3, b};
    tn_init(&t, "Gemm", 13, 2, ins3, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("2-D");
    tn_free(&t);
    /* int32 */
    fr_tensor *ai = tt_randn(&r, FR_I32, 2, d34, 0, 1), *bi = tt_randn(&r, FR_I32, 2, d45, 0, 1);
    fr_tensor *ins4[2] = {ai, bi};
    tn_init(&t, "Gemm", 13, 2, ins4, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("int32");
    tn_free(&t);
    fr_tensor *to_free[] = {a, b, c, a3, ai, bi};
    for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) fr_tensor_free(to_free[i]);
}

static CU_TestInfo matmul_tests[] = {
    {"MatMul float32 shapes vs double reference", test_matmul_f32},
    {"MatMul float64 shapes vs double reference", test_matmul_f64},
    {"MatMul folded Linear-sized product", test_matmul_linear_large},
    {"MatMul errors", test_matmul_errors},
    {"Gemm transA/transB/alpha/beta/C combinations", test_gemm_combos},
    {"Gemm beta=0 ignores C", test_gemm_beta_zero_ignores_c},
    {"Gemm errors", test_gemm_errors},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"ops_matmul", NULL, NULL, NULL, NULL, matmul_tests},
                             CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
