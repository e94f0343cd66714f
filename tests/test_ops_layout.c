/* Layout ops (ops/layout.c: Transpose, Concat, Split, Slice, Trilu, Tile) against references
 * written here by coordinate mapping, on fresh random inputs of many dtypes (float32, int64,
 * bool, float16, uint8, float64, int32, float8e4m3fn: the ops move bytes, so every dtype must
 * come out bit-exact), with negative axes, size-1 and empty dims, and sizes large enough for
 * the kernels' fast paths (blocked 2-D transpose, row copies). All comparisons are exact. */
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* ---- Transpose ---- */

/* y = transpose(x, perm) (perm NULL = reversed), checked against the coordinate mapping. */
static void check_transpose(fr_tensor *x, const int *perm)
{
    tnode t;
    tn_init(&t, "Transpose", 13, 1, &x, 0, 1);
    int p[FR_MAX_RANK];
    int64_t pv[FR_MAX_RANK], od[FR_MAX_RANK];
    for (int k = 0; k < x->rank; k++) {
        p[k] = perm ? perm[k] : x->rank - 1 - k;
        pv[k] = p[k];
        od[k] = x->dims[p[k]];
    }
    if (perm) TN_ATTR(&t, ints, "perm", x->rank, pv);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    tt_assert_shape(y, x->dtype, x->rank, od);
    int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK], ci[FR_MAX_RANK];
    for (int64_t i = 0; i < n; i++) {
        tt_unravel(i, y->rank, y->dims, c);
        for (int k = 0; k < x->rank; k++) ci[p[k]] = c[k];
        bad += !tt_same_elem(y, i, x, tt_ravel(ci, x->rank, x->dims));
    }
    CU_ASSERT_EQUAL(bad, 0);
    tn_free(&t);
}

static void test_transpose(void)
{
    fr_rng r = fr_test_rng("transpose");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 5);
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 5, 0.05);
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        int perm[FR_MAX_RANK];
        for (int k = 0; k < rank; k++) perm[k] = k;
        for (int k = rank - 1; k > 0; k--) { /* Fisher-Yates */
            int j = (int)tt_rand_int(&r, 0, k), tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
        check_transpose(x, trial % 5 == 0 ? NULL : perm);
        fr_tensor_free(x);
    }
    /* the fast paths: 2-D, last-two swap (blocked), attention heads [0,2,1,3], at sizes not
     * multiple of the tile */
    static const struct {
        int rank;
        int64_t d[4];
        int perm[4];
    } big[] = {
        {2, {130, 71}, {1, 0}},
        {2, {1, 300}, {1, 0}},
        {3, {3, 67, 45}, {0, 2, 1}},
        {4, {2, 37, 5, 16}, {0, 2, 1, 3}},
        {4, {2, 5, 37, 16}, {0, 2, 1, 3}},
        {4, {2, 3, 33, 40}, {0, 1, 3, 2}},
        {4, {3, 4, 5, 6}, {3, 2, 1, 0}},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        for (int d = 0; d < TT_N_DTYPES; d++) {
            fr_tensor *x = tt_rand_bits(&r, tt_dtypes[d], big[i].rank, big[i].d);
            check_transpose(x, big[i].perm);
            fr_tensor_free(x);
        }
    }
}

static void test_transpose_errors(void)
{
    int64_t d[3] = {2, 3, 4};
    fr_tensor *x = tt_new(FR_F32, 3, d);
    tnode t;
    int64_t bad1[3] = {0, 0, 1}, bad2[2] = {1, 0};
    tn_init(&t, "Transpose", 13, 1, &x, 0, 1);
    TN_ATTR(&t, ints, "perm", 3, bad1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("permutation");
    tn_free(&t);
    tn_init(&t, "Transpose", 13, 1, &x, 0, 1);
    TN_ATTR(&t, ints, "perm", 2, bad2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank 3");
    tn_free(&t);
    fr_tensor_free(x);
}

/* ---- Concat ---- */

static void test_concat(void)
{
    fr_rng r = fr_test_rng("concat");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4), n_in = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        fr_dtype dt = tt_dtypes[trial % TT_N_DTYPES];
        int64_t dims[FR_MAX_RANK], od[FR_MAX_RANK], starts[5] = {0};
        tt_rand_dims(&r, rank, dims, 4, 0.05);
        fr_tensor *x[4];
        memcpy(od, dims, sizeof od);
        od[ax] = 0;
        for (int i = 0; i < n_in; i++) {
            /* zero-size parts too */
            dims[ax] = fr_rng_uniform(&r) < 0.2 ? 0 : tt_rand_int(&r, 1, 4);
            x[i] = tt_rand_bits(&r, dt, rank, dims);
            starts[i + 1] = starts[i] + dims[ax];
            od[ax] += dims[ax];
        }
        tnode t;
        tn_init(&t, "Concat", 13, n_in, x, 0, 1);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, dt, rank, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, rank, od, c);
            int p = 0;
            while (c[ax] >= starts[p + 1]) p++;
            c[ax] -= starts[p];
            bad += !tt_same_elem(y, i, x[p], tt_ravel(c, rank, x[p]->dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        for (int i = 0; i < n_in; i++) fr_tensor_free(x[i]);
    }
}

static void test_concat_errors(void)
{
    int64_t a[2] = {2, 3}, b[2] = {3, 3};
    fr_tensor *x[2] = {tt_new(FR_F32, 2, a), tt_new(FR_F32, 2, b)};
    tnode t;
    tn_init(&t, "Concat", 13, 2, x, 0, 1);
    TN_ATTR(&t, int, "axis", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("[3, 3]");
    tn_free(&t);
    tn_init(&t, "Concat", 13, 2, x, 0, 1);
    TN_ATTR(&t, int, "axis", 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("axis 2");
    tn_free(&t);
    fr_tensor_free(x[1]);
    x[1] = tt_new(FR_I64, 2, a);
    tn_init(&t, "Concat", 13, 2, x, 0, 1);
    TN_ATTR(&t, int, "axis", 0);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("int64");
    tn_free(&t);
    fr_tensor_free(x[0]);
    fr_tensor_free(x[1]);
}

/* ---- Split ---- */

/* Run Split and check each output against the slice of x it should hold. */
static void check_split_outputs(tnode *t, const fr_tensor *x, int ax, int n_out,
                                const int64_t *sizes)
{
    int64_t off = 0, c[FR_MAX_RANK], od[FR_MAX_RANK];
    for (int o = 0; o < n_out; o++) {
        memcpy(od, x->dims, sizeof od);
        od[ax] = sizes[o];
        fr_tensor *y = t->out[o];
        tt_assert_shape(y, x->dtype, x->rank, od);
        int64_t n = fr_tensor_numel(y), bad = 0;
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, x->rank, od, c);
            c[ax] += off;
            bad += !tt_same_elem(y, i, x, tt_ravel(c, x->rank, x->dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        off += sizes[o];
    }
}

static void test_split(void)
{
    fr_rng r = fr_test_rng("split");
    for (int trial = 0; trial < 200; trial++) {
        int form =
            trial % 4; /* 0: attr (opset 11), 1: input (13), 2: equal (13), 3: num_outputs (18) */
        int rank = (int)tt_rand_int(&r, 1, 4), n_out = (int)tt_rand_int(&r, 1, 5);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], sizes[8];
        tt_rand_dims(&r, rank, dims, 4, 0.05);
        if (form <= 1) { /* uneven sizes, zeros allowed */
            dims[ax] = 0;
            for (int o = 0; o < n_out; o++) dims[ax] += sizes[o] = tt_rand_int(&r, 0, 4);
        } else if (form == 2) {
            dims[ax] = n_out * tt_rand_int(&r, 0, 3);
            for (int o = 0; o < n_out; o++) sizes[o] = dims[ax] / n_out;
        } else { /* ceil-sized chunks, smaller last one (opset 18) */
            int64_t chunk = tt_rand_int(&r, 1, 4);
            dims[ax] = chunk * (n_out - 1) + tt_rand_int(&r, n_out > 1 ? 1 : 0, chunk);
            if (dims[ax] == 0) dims[ax] = 1;
            chunk = (dims[ax] + n_out - 1) / n_out;
            for (int o = 0; o < n_out; o++)
                sizes[o] = o < n_out - 1 ? chunk : dims[ax] - chunk * (n_out - 1);
        }
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *split = tt_ints(FR_I64, n_out, sizes);
        fr_tensor *ins[2] = {x, split};
        tnode t;
        if (form == 0) {
            tn_init(&t, "Split", 11, 1, ins, 0, n_out);
            TN_ATTR(&t, ints, "split", n_out, sizes);
        } else if (form == 1) {
            tn_init(&t, "Split", 13, 2, ins, 2u, n_out);
        } else if (form == 2) {
            tn_init(&t, "Split", 13, 1, ins, 0, n_out);
        } else {
            tn_init(&t, "Split", 18, 1, ins, 0, n_out);
            TN_ATTR(&t, int, "num_outputs", n_out);
        }
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        check_split_outputs(&t, x, ax, n_out, sizes);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(split);
    }
}

static void test_split_uneven_and_errors(void)
{
    fr_rng r = fr_test_rng("split_uneven");
    /* opset 18 num_outputs: 7 -> 3,3,1 and 10 -> 3,3,3,1 */
    static const struct {
        int64_t dim;
        int n;
        int64_t sizes[4];
    } cases[] = {{7, 3, {3, 3, 1}}, {10, 4, {3, 3, 3, 1}}, {6, 3, {2, 2, 2}}, {3, 4, {1, 1, 1, 0}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t d[2] = {2, cases[i].dim};
        fr_tensor *x = tt_rand_bits(&r, FR_F32, 2, d);
        tnode t;
        tn_init(&t, "Split", 18, 1, &x, 0, cases[i].n);
        TN_ATTR(&t, int, "axis", -1);
        TN_ATTR(&t, int, "num_outputs", cases[i].n);
        FR_ASSERT_OK(tn_run(&t));
        check_split_outputs(&t, x, 1, cases[i].n, cases[i].sizes);
        tn_free(&t);
        fr_tensor_free(x);
    }
    int64_t d[1] = {7}, s2[2] = {3, 3}, s3[2] = {3, 4};
    fr_tensor *x = tt_rand_bits(&r, FR_I64, 1, d), *sp = tt_ints(FR_I64, 2, s2);
    fr_tensor *sp_ok = tt_ints(FR_I64, 2, s3);
    fr_tensor *ins[2] = {x, sp};
    tnode t;
    tn_init(&t, "Split", 13, 1, ins, 0, 2); /* 7 does not split evenly in two */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("evenly");
    tn_free(&t);
    tn_init(&t, "Split", 13, 2, ins, 2u, 2); /* sizes add up to 6, not 7 */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("7");
    tn_free(&t);
    ins[1] = sp_ok;
    tn_init(&t, "Split", 18, 2, ins, 2u, 2); /* split and num_outputs together */
    TN_ATTR(&t, int, "num_outputs", 2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("num_outputs");
    tn_free(&t);
    tn_init(&t, "Split", 13, 2, ins, 0, 2); /* split sizes not constant */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(sp);
    fr_tensor_free(sp_ok);
}

/* ---- Slice ---- */

/* The spec's effective start/end for one axis, then the selected indices by stepping
 * (independent of the kernel's closed-form length). Returns the count. */
static int64_t ref_slice_axis(int64_t d, int64_t s, int64_t e, int64_t st, int64_t *sel)
{
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (st > 0) {
        s = s < 0 ? 0 : s > d ? d : s;
        e = e < 0 ? 0 : e > d ? d : e;
    } else {
        s = s < 0 ? 0 : s > d - 1 ? d - 1 : s;
        e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
    }
    int64_t n = 0;
    for (int64_t i = s; st > 0 ? i < e : i > e; i += st) {
        if (i < 0 || i >= d) break; /* only reachable for d == 0, where the clamp range is empty */
        sel[n++] = i;
        if ((st > 0 && i > INT64_MAX - st) || (st < 0 && i < INT64_MIN - st)) break;
    }
    return n;
}

static int64_t pick_bound(fr_rng *r, int64_t d, int i32)
{
    double u = fr_rng_uniform(r);
    if (u < 0.1) return i32 ? INT32_MAX : INT64_MAX;
    if (u < 0.2) return i32 ? INT32_MIN : INT64_MIN;
    return tt_rand_int(r, -d - 3, d + 3);
}

static void test_slice(void)
{
    fr_rng r = fr_test_rng("slice");
    static const int64_t step_choices[] = {1, 2, 3, -1, -2, -3, INT64_MAX, INT64_MIN};
    for (int trial = 0; trial < 400; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4), i32 = trial % 3 == 2;
        int old_form = trial % 7 == 6; /* opset 9: attributes, unit steps */
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 6, 0.05);
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        int cnt = (int)tt_rand_int(&r, 1, rank), omit_axes = trial % 5 == 0;
        int omit_steps = old_form || trial % 4 == 1;
        int perm[FR_MAX_RANK];
        for (int k = 0; k < rank; k++) perm[k] = k;
        for (int k = rank - 1; k > 0; k--) {
            int j = (int)tt_rand_int(&r, 0, k), tmp = perm[k];
            perm[k] = perm[j];
            perm[j] = tmp;
        }
        int64_t starts[FR_MAX_RANK], ends[FR_MAX_RANK], axes[FR_MAX_RANK], steps[FR_MAX_RANK];
        int64_t sel[FR_MAX_RANK][16], len[FR_MAX_RANK];
        for (int k = 0; k < rank; k++) { /* untouched axes keep everything */
            len[k] = dims[k];
            for (int64_t j = 0; j < dims[k]; j++) sel[k][j] = j;
        }
        for (int i = 0; i < cnt; i++) {
            int a = omit_axes ? i : perm[i];
            axes[i] = fr_rng_uniform(&r) < 0.5 ? a - rank : a;
            starts[i] = pick_bound(&r, dims[a], i32);
            ends[i] = pick_bound(&r, dims[a], i32);
            steps[i] = omit_steps ? 1 : step_choices[tt_rand_int(&r, 0, i32 ? 5 : 7)];
            len[a] = ref_slice_axis(dims[a], starts[i], ends[i], steps[i], sel[a]);
        }
        fr_dtype it = i32 ? FR_I32 : FR_I64;
        fr_tensor *ins[5] = {x, tt_ints(it, cnt, starts), tt_ints(it, cnt, ends),
                             omit_axes ? NULL : tt_ints(it, cnt, axes),
                             omit_steps ? NULL : tt_ints(it, cnt, steps)};
        tnode t;
        if (old_form) {
            tn_init(&t, "Slice", 9, 1, ins, 0, 1);
            TN_ATTR(&t, ints, "starts", cnt, starts);
            TN_ATTR(&t, ints, "ends", cnt, ends);
            if (!omit_axes) TN_ATTR(&t, ints, "axes", cnt, axes);
        } else {
            tn_init(&t, "Slice", 13, omit_steps ? (omit_axes ? 3 : 4) : 5, ins, 0x1eu, 1);
        }
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, x->dtype, rank, len);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, rank, len, c);
            for (int k = 0; k < rank; k++) c[k] = sel[k][c[k]];
            bad += !tt_same_elem(y, i, x, tt_ravel(c, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        for (int i = 0; i < 5; i++) fr_tensor_free(ins[i]);
    }
}

/* Hand-checked cases on arange(10), spelled out from the spec text. */
static void test_slice_fixed(void)
{
    static const struct {
        int64_t s, e, st;
        int n;
        int64_t want[10];
    } cases[] = {
        {-1, INT64_MIN, -1, 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
        {20, -20, -3, 4, {9, 6, 3, 0}},
        {-100, INT64_MIN, -1, 1, {0}}, /* start clamps to 0 for negative steps */
        {2, INT64_MAX, INT64_MAX, 1, {2}},
        {9, INT64_MIN, INT64_MIN, 1, {9}},
        {INT64_MIN, INT64_MAX, 3, 4, {0, 3, 6, 9}},
        {-3, -1, 1, 2, {7, 8}},
        {5, 5, 1, 0, {0}},
        {5, 2, 1, 0, {0}},
        {2, 5, -1, 0, {0}},
        {-11, 3, 1, 3, {0, 1, 2}},
        {3, -11, -1, 4, {3, 2, 1, 0}},
    };
    int64_t d = 10;
    fr_tensor *x = tt_new(FR_I64, 1, &d);
    for (int i = 0; i < 10; i++) ((int64_t *)x->data)[i] = i;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t zero = 0;
        fr_tensor *ins[5] = {x, tt_ints(FR_I64, 1, &cases[c].s), tt_ints(FR_I64, 1, &cases[c].e),
                             tt_ints(FR_I64, 1, &zero), tt_ints(FR_I64, 1, &cases[c].st)};
        tnode t;
        tn_init(&t, "Slice", 13, 5, ins, 0x1eu, 1);
        FR_ASSERT_OK(tn_run(&t));
        int64_t nd = cases[c].n;
        tt_assert_shape(t.out[0], FR_I64, 1, &nd);
        for (int i = 0; i < cases[c].n; i++)
            CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[i], cases[c].want[i]);
        tn_free(&t);
        for (int i = 1; i < 5; i++) fr_tensor_free(ins[i]);
    }
    fr_tensor_free(x);
}

static void test_slice_errors(void)
{
    int64_t d[2] = {4, 5}, s[2] = {0, 0}, e[2] = {2, 2}, ax_dup[2] = {1, -1}, st0[2] = {1, 0};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    fr_tensor *ins[5] = {x, tt_ints(FR_I64, 2, s), tt_ints(FR_I64, 2, e),
                         tt_ints(FR_I64, 2, ax_dup), NULL};
    tnode t;
    tn_init(&t, "Slice", 13, 4, ins, 0xeu, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("twice");
    tn_free(&t);
    fr_tensor_free(ins[3]);
    ins[3] = NULL;
    ins[4] = tt_ints(FR_I64, 2, st0);
    tn_init(&t, "Slice", 13, 5, ins, 0x1eu, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("step");
    tn_free(&t);
    tn_init(&t, "Slice", 13, 3, ins, 0x4u, 1); /* starts not constant */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    for (int i = 1; i < 5; i++) fr_tensor_free(ins[i]);
    fr_tensor_free(x);
}

/* ---- Trilu ---- */

static void test_trilu(void)
{
    fr_rng r = fr_test_rng("trilu");
    static const struct {
        int rank;
        int64_t d[4];
    } shapes[] = {{4, {2, 3, 5, 4}}, {2, {4, 4}}, {3, {3, 1, 6}},  {3, {2, 0, 3}},
                  {2, {5, 2}},       {2, {1, 1}}, {3, {2, 40, 33}}};
    static const int64_t ks[] = {0, -1, 2, 100, -100, INT64_MAX, INT64_MIN};
    static const fr_dtype tdt[] = {FR_F32, FR_BOOL, FR_I64, FR_F16};
    int trial = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int upper = 0; upper <= 1; upper++) {
            for (int ki = -1; ki < (int)(sizeof ks / sizeof ks[0]); ki++, trial++) {
                fr_dtype dt = tdt[trial % 4];
                fr_tensor *x = tt_rand_bits(&r, dt, shapes[si].rank, shapes[si].d);
                int64_t k = ki < 0 ? 0 : ks[ki];
                fr_tensor *kt = tt_new(FR_I64, 0, NULL), *ins[2] = {x, kt};
                *(int64_t *)kt->data = k;
                /* k: omitted, constant, or a runtime input (it is only read by the kernel) */
                tnode t;
                tn_init(&t, "Trilu", 14, ki < 0 ? 1 : 2, ins, trial % 2 ? 2u : 0u, 1);
                if (upper == 0 || trial % 3) TN_ATTR(&t, int, "upper", upper);
                FR_ASSERT_OK(tn_run(&t));
                fr_tensor *y = t.out[0];
                tt_assert_shape(y, dt, x->rank, x->dims);
                int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
                size_t es = fr_dtype_size(dt);
                static const uint8_t zeros[8] = {0};
                for (int64_t i = 0; i < n; i++) {
                    tt_unravel(i, x->rank, x->dims, c);
                    double diff = (double)c[x->rank - 1] - (double)c[x->rank - 2];
                    int keep = upper ? diff >= (double)k : diff <= (double)k;
                    if (keep)
                        bad += !tt_same_elem(y, i, x, i);
                    else
                        bad += memcmp((char *)y->data + i * (int64_t)es, zeros, es) != 0;
                }
                CU_ASSERT_EQUAL(bad, 0);
                tn_free(&t);
                fr_tensor_free(x);
                fr_tensor_free(kt);
            }
        }
    }
    int64_t d1 = 4;
    fr_tensor *v = tt_new(FR_F32, 1, &d1);
    tnode t;
    tn_init(&t, "Trilu", 14, 1, &v, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("rank");
    tn_free(&t);
    fr_tensor_free(v);
}

/* ---- Tile ---- */

static void test_tile(void)
{
    fr_rng r = fr_test_rng("tile");
    for (int trial = 0; trial < 250; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4);
        int64_t dims[FR_MAX_RANK], reps[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 4, 0.05);
        for (int k = 0; k < rank; k++) {
            reps[k] = fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, 3);
            od[k] = dims[k] * reps[k];
        }
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *rt = tt_ints(trial % 2 ? FR_I64 : FR_I32, rank, reps), *ins[2] = {x, rt};
        tnode t;
        tn_init(&t, "Tile", 13, 2, ins, 2u, 1);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, x->dtype, rank, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            tt_unravel(i, rank, od, c);
            for (int k = 0; k < rank; k++) c[k] %= dims[k];
            bad += !tt_same_elem(y, i, x, tt_ravel(c, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(rt);
    }
    int64_t d[2] = {2, 3}, r1[1] = {2}, rneg[2] = {1, -1};
    fr_tensor *x = tt_new(FR_F32, 2, d), *a = tt_ints(FR_I64, 1, r1), *b = tt_ints(FR_I64, 2, rneg);
    fr_tensor *ins[2] = {x, a};
    tnode t;
    tn_init(&t, "Tile", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("repeats");
    tn_free(&t);
    ins[1] = b;
    tn_init(&t, "Tile", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("negative");
    tn_free(&t);
    tn_init(&t, "Tile", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

static void test_unsupported_dtype(void)
{
    int64_t d[2] = {2, 2};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    tnode t;
    tn_init(&t, "Transpose", 13, 1, &x, 0, 1);
    t.g->values[t.in_vid[0]].dtype = FR_STRING; /* importable, never holdable */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("string");
    tn_free(&t);
    fr_tensor_free(x);
}

static void test_registered(void)
{
    const char *names[] = {"Transpose", "Concat", "Split", "Slice", "Trilu", "Tile"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo layout_tests[] = {
    {"registered", test_registered},
    {"transpose", test_transpose},
    {"transpose_errors", test_transpose_errors},
    {"concat", test_concat},
    {"concat_errors", test_concat_errors},
    {"split", test_split},
    {"split_uneven_and_errors", test_split_uneven_and_errors},
    {"slice", test_slice},
    {"slice_fixed", test_slice_fixed},
    {"slice_errors", test_slice_errors},
    {"trilu", test_trilu},
    {"tile", test_tile},
    {"unsupported_dtype", test_unsupported_dtype},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_layout", NULL, NULL, NULL, NULL, layout_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fr_test_main(suites);
}
