/* Gather ops (ops/gather.c: Gather, GatherElements, GatherND) against references written here
 * by coordinate mapping, on fresh random data of many dtypes (float32, int64, bool, float16,
 * uint8, float64, int32, float8e4m3fn: gathers copy bytes, so results must be bit-exact) and
 * random int64/int32 indices of any rank (scalars included) with negative values, negative
 * axes, size-1 and empty dims. Out-of-range indices must give FR_ERR_RANGE with a message that
 * names the node, the index, its position and the axis. All comparisons are exact. */
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* Random indices in [-n, n) (n > 0) of the given dtype and shape. */
static fr_tensor *rand_indices(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, int64_t n)
{
    return tt_rand_ints(r, dt, rank, dims, -n, n - 1);
}

/* ---- Gather ---- */

static void test_gather(void)
{
    fr_rng r = fr_test_rng("gather");
    for (int trial = 0; trial < 400; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4), q = (int)tt_rand_int(&r, 0, 3);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 5, 0.05);
        tt_rand_dims(&r, q, idims, 3, 0.05);
        if (dims[ax] == 0 && q == 0) dims[ax] = 1; /* a scalar index needs something to pick */
        if (dims[ax] == 0) idims[0] = 0;
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, it, q, idims, dims[ax] ? dims[ax] : 1),
                  *ins[2] = {x, idx};
        int o = 0;
        for (int k = 0; k < ax; k++) od[o++] = dims[k];
        for (int k = 0; k < q; k++) od[o++] = idims[k];
        for (int k = ax + 1; k < rank; k++) od[o++] = dims[k];
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1); /* constant indices too */
        if (axis != 0 || trial % 2) TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, x->dtype, o, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK], xc[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, o, od, c);
            int64_t v = fr_tensor_get_i64(idx, tt_ravel(c + ax, q, idims));
            for (int k = 0; k < rank; k++)
                xc[k] = k < ax ? c[k] : k == ax ? (v < 0 ? v + dims[ax] : v) : c[k + q - 1];
            bad += !tt_same_elem(y, i, x, tt_ravel(xc, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
}

static void test_gather_out_of_range(void)
{
    fr_rng r = fr_test_rng("gather_range");
    int64_t d[2] = {10, 4}, di[2] = {2, 4};
    fr_tensor *x = tt_rand_bits(&r, FR_F32, 2, d);
    for (int c = 0; c < 2; c++) { /* index read at run time, then a constant caught by infer */
        fr_tensor *idx = rand_indices(&r, FR_I64, 2, di, 10), *ins[2] = {x, idx};
        tt_set(idx, 1 * 4 + 3, 12);
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, c ? 2u : 0u, 1);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
        tn_assert_error("node 'node_under_test' (Gather): index 12 at position [1, 3] is "
                              "out of range for axis 0 of size 10");
        tn_free(&t);
        fr_tensor_free(idx);
    }
    /* int32, negative past the start, along axis -1 */
    fr_tensor *idx = rand_indices(&r, FR_I32, 2, di, 4), *ins[2] = {x, idx};
    tt_set(idx, 2, -5);
    tnode t;
    tn_init(&t, "Gather", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "axis", -1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    tn_assert_error("index -5 at position [0, 2] is out of range for axis 1 of size 4");
    tn_free(&t);
    fr_tensor_free(idx);
    /* a scalar index; the boundary values -n and n-1 are fine, n is not */
    static const int64_t vals[3] = {-10, 9, 10};
    for (int k = 0; k < 3; k++) {
        fr_tensor *s = tt_new(FR_I64, 0, NULL), *in2[2] = {x, s};
        *(int64_t *)s->data = vals[k];
        tn_init(&t, "Gather", 13, 2, in2, 0, 1);
        fr_status st = tn_run(&t);
        if (k < 2) {
            CU_ASSERT_EQUAL(st, FR_OK);
            if (st == FR_OK) {
                int64_t row = vals[k] < 0 ? vals[k] + 10 : vals[k];
                CU_ASSERT(memcmp(t.out[0]->data, (float *)x->data + row * 4, 4 * sizeof(float)) ==
                          0);
            }
        } else {
            CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
            tn_assert_error("index 10 at position [] is out of range");
        }
        tn_free(&t);
        fr_tensor_free(s);
    }
    /* float indices are unsupported */
    fr_tensor *fi = tt_new(FR_F32, 1, di), *in3[2] = {x, fi};
    tn_init(&t, "Gather", 13, 2, in3, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("float32");
    tn_free(&t);
    fr_tensor_free(fi);
    fr_tensor_free(x);
}

/* ---- GatherElements ---- */

static void test_gather_elements(void)
{
    fr_rng r = fr_test_rng("gather_elements");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 4, 0.0);
        for (int k = 0; k < rank; k++) /* the axis may be any length; others up to data's */
            idims[k] = k == ax ? tt_rand_int(&r, 0, 5)
                               : tt_rand_int(&r, fr_rng_uniform(&r) < 0.05 ? 0 : 1, dims[k]);
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, it, rank, idims, dims[ax]), *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherElements", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, x->dtype, rank, idims);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, rank, idims, c);
            int64_t v = fr_tensor_get_i64(idx, i);
            c[ax] = v < 0 ? v + dims[ax] : v;
            bad += !tt_same_elem(y, i, x, tt_ravel(c, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    /* errors: out of range (named), rank mismatch, indices larger than data off the axis */
    int64_t d[2] = {3, 4}, di[2] = {2, 4}, dbig[2] = {2, 5};
    fr_tensor *x = tt_rand_bits(&r, FR_BOOL, 2, d), *idx = rand_indices(&r, FR_I64, 2, di, 3);
    tt_set(idx, 5, -4);
    fr_tensor *ins[2] = {x, idx};
    tnode t;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    tn_assert_error("index -4 at position [1, 1] is out of range for axis 0 of size 3");
    tn_free(&t);
    fr_tensor *i1 = rand_indices(&r, FR_I64, 1, di, 3), *ib = rand_indices(&r, FR_I64, 2, dbig, 3);
    ins[1] = i1;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank");
    tn_free(&t);
    ins[1] = ib;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("[2, 5]");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(idx);
    fr_tensor_free(i1);
    fr_tensor_free(ib);
}

/* ---- GatherND ---- */

static void test_gather_nd(void)
{
    fr_rng r = fr_test_rng("gather_nd");
    for (int trial = 0; trial < 300; trial++) {
        int b = trial % 3 == 0 ? 1 : 0, rank = b + (int)tt_rand_int(&r, 1, 3);
        int m = (int)tt_rand_int(&r, 1, rank - b), mid = (int)tt_rand_int(&r, 0, 2);
        int q = b + mid + 1;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 4, 0.0);
        for (int k = 0; k < b; k++) idims[k] = dims[k];
        for (int k = b; k < q - 1; k++)
            idims[k] = fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, 3);
        idims[q - 1] = m;
        int o = 0;
        for (int k = 0; k < q - 1; k++) od[o++] = idims[k];
        for (int k = b + m; k < rank; k++) od[o++] = dims[k];
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = tt_new(it, q, idims), *ins[2] = {x, idx};
        int64_t ni = fr_tensor_numel(idx);
        for (int64_t j = 0; j < ni; j++) {
            int64_t size = dims[b + j % m];
            tt_set(idx, j, tt_rand_int(&r, -size, size - 1));
        }
        tnode t;
        tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
        if (b || trial % 2) TN_ATTR(&t, int, "batch_dims", b);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, x->dtype, o, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK], xc[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, o, od, c);
            int64_t tuple = tt_ravel(c, q - 1, idims) * m; /* first entry of the index tuple */
            for (int k = 0; k < b; k++) xc[k] = c[k];
            for (int l = 0; l < m; l++) {
                int64_t v = fr_tensor_get_i64(idx, tuple + l);
                xc[b + l] = v < 0 ? v + dims[b + l] : v;
            }
            for (int k = b + m; k < rank; k++) xc[k] = c[q - 1 + k - b - m];
            bad += !tt_same_elem(y, i, x, tt_ravel(xc, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    /* errors: an out-of-range entry names the data axis it addresses; batch dims must match */
    int64_t d[3] = {2, 3, 4}, di[2] = {2, 2}, dib[3] = {3, 1, 1};
    fr_tensor *x = tt_rand_bits(&r, FR_F32, 3, d), *idx = tt_new(FR_I64, 2, di), *ins[2] = {x, idx};
    int64_t v[4] = {1, 2, 0, 3};
    memcpy(idx->data, v, sizeof v);
    tnode t;
    tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    tn_assert_error("index 3 at position [1, 1] is out of range for axis 1 of size 3");
    tn_free(&t);
    fr_tensor *ib = tt_new(FR_I64, 3, dib);
    ins[1] = ib;
    tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
    TN_ATTR(&t, int, "batch_dims", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("batch dim 0");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(idx);
    fr_tensor_free(ib);
}

static void test_registered(void)
{
    const char *names[] = {"Gather", "GatherElements", "GatherND"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo gather_tests[] = {
    {"registered", test_registered},
    {"gather", test_gather},
    {"gather_out_of_range", test_gather_out_of_range},
    {"gather_elements", test_gather_elements},
    {"gather_nd", test_gather_nd},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_gather", NULL, NULL, NULL, NULL, gather_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fr_test_main(suites);
}
