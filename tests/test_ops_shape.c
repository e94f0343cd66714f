/* Shape ops (ops/shape.c: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, ConstantOfShape,
 * Range, Constant) against references written here, on fresh random shapes and data of many
 * dtypes (the reshaping ops move bytes, so every dtype must come out bit-exact), including
 * rank-0 scalars, size-1 and empty dims, negative axes, both opset forms of Squeeze/Unsqueeze
 * axes (attribute < 13, input >= 13), Reshape's 0 / -1 / allowzero rules and Range's length
 * formula at int64 extremes. Integer results are exact; float Range values within 1e-6
 * relative (float32) / 1e-12 (float64) of a double reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"

/* y must hold exactly x's bytes (the reshaping ops) */
static void assert_same_bytes(const fr_tensor *y, const fr_tensor *x)
{
    CU_ASSERT_EQUAL_FATAL(y->nbytes, x->nbytes);
    if (x->nbytes) CU_ASSERT(memcmp(y->data, x->data, x->nbytes) == 0);
}

static int64_t numel_of(int rank, const int64_t *d)
{
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= d[k];
    return n;
}

/* ---- Shape, Size ---- */

/* The spec's dims[start:end] with python-style negative indices, clamped. */
static int ref_shape_slice(int rank, int has_s, int64_t s, int has_e, int64_t e, int *lo)
{
    if (!has_s) s = 0;
    if (!has_e) e = rank;
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    *lo = (int)s;
    return e > s ? (int)(e - s) : 0;
}

static void test_shape_size(void)
{
    fr_rng r = fr_test_rng("shape_size");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 6), opset = trial % 2 ? 15 : 13;
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 5, 0.1);
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        int has_s = opset >= 15 && fr_rng_uniform(&r) < 0.7,
            has_e = opset >= 15 && fr_rng_uniform(&r) < 0.7;
        int64_t s = tt_rand_int(&r, -8, 8), e = tt_rand_int(&r, -8, 8);
        tnode t;
        tn_init(&t, "Shape", opset, 1, &x, 0, 1);
        if (has_s) TN_ATTR(&t, int, "start", s);
        if (has_e) TN_ATTR(&t, int, "end", e);
        FR_ASSERT_OK(tn_run(&t));
        int lo;
        int64_t len = ref_shape_slice(rank, has_s, s, has_e, e, &lo);
        tt_assert_shape(t.out[0], FR_I64, 1, &len);
        for (int k = 0; k < len; k++) CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[k], dims[lo + k]);
        tn_free(&t);

        tn_init(&t, "Size", 13, 1, &x, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        tt_assert_shape(t.out[0], FR_I64, 0, NULL);
        CU_ASSERT_EQUAL(*(int64_t *)t.out[0]->data, numel_of(rank, dims));
        tn_free(&t);
        fr_tensor_free(x);
    }
    /* hand-checked start/end on [2, 3, 4, 5], and a data-less input (constant folding hands
     * Shape a header without data) */
    static const struct {
        int64_t s, e;
        int n;
        int64_t want[4];
    } cases[] = {{-3, -1, 2, {3, 4}},
                 {1, 100, 3, {3, 4, 5}},
                 {5, 6, 0, {0}},
                 {-100, 2, 2, {2, 3}},
                 {3, 1, 0, {0}}};
    fr_tensor hdr = {.dtype = FR_F32, .rank = 4, .dims = {2, 3, 4, 5}, .data = NULL};
    fr_tensor *hp = &hdr;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tnode t;
        tn_init(&t, "Shape", 15, 1, &hp, 0, 1);
        TN_ATTR(&t, int, "start", cases[c].s);
        TN_ATTR(&t, int, "end", cases[c].e);
        FR_ASSERT_OK(tn_run(&t));
        int64_t n = cases[c].n;
        tt_assert_shape(t.out[0], FR_I64, 1, &n);
        for (int k = 0; k < n; k++)
            CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[k], cases[c].want[k]);
        tn_free(&t);
    }
}

/* ---- Reshape ---- */

static fr_status run_reshape(tnode *t, int64_t opset, fr_tensor *x, int n, const int64_t *shape,
                             int allowzero)
{
    fr_tensor *st = tt_ints(FR_I64, n, shape), *ins[2] = {x, st};
    if (opset >= 5) {
        tn_init(t, "Reshape", opset, 2, ins, 2u, 1);
    } else {
        tn_init(t, "Reshape", opset, 1, ins, 0, 1);
        TN_ATTR(t, ints, "shape", n, shape);
    }
    if (allowzero >= 0) TN_ATTR(t, int, "allowzero", allowzero);
    fr_tensor_free(st);
    return tn_run(t);
}

static void test_reshape_random(void)
{
    fr_rng r = fr_test_rng("reshape");
    for (int trial = 0; trial < 300; trial++) {
        /* one list of factors grouped two ways gives two shapes of the same size */
        int nf = (int)tt_rand_int(&r, 1, 6);
        int64_t f[6], in_d[FR_MAX_RANK], out_d[FR_MAX_RANK];
        for (int i = 0; i < nf; i++) f[i] = fr_rng_uniform(&r) < 0.03 ? 0 : tt_rand_int(&r, 1, 4);
        int in_r = 0, out_r = 0;
        for (int i = 0; i < nf; i++) {
            if (i == 0 || fr_rng_uniform(&r) < 0.6)
                in_d[in_r++] = f[i];
            else
                in_d[in_r - 1] *= f[i];
        }
        for (int i = nf - 1; i > 0; i--) { /* shuffle for the target */
            int j = (int)tt_rand_int(&r, 0, i);
            int64_t tmp = f[i];
            f[i] = f[j];
            f[j] = tmp;
        }
        for (int i = 0; i < nf; i++) {
            if (i == 0 || fr_rng_uniform(&r) < 0.6)
                out_d[out_r++] = f[i];
            else
                out_d[out_r - 1] *= f[i];
        }
        /* request: 0 where the dim equals the input's at that index, one -1 when inferable
         * (with a zero-size target, 0 must mean 0: allowzero=1, and -1 is not allowed) */
        int64_t req[FR_MAX_RANK];
        int empty = numel_of(in_r, in_d) == 0;
        int neg = !empty && fr_rng_uniform(&r) < 0.5 ? (int)tt_rand_int(&r, 0, out_r - 1) : -1;
        for (int k = 0; k < out_r; k++) {
            req[k] = out_d[k];
            if (!empty && k < in_r && in_d[k] == out_d[k] && fr_rng_uniform(&r) < 0.5) req[k] = 0;
        }
        if (neg >= 0) req[neg] = -1;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], in_r, in_d);
        tnode t;
        fr_status st = run_reshape(&t, empty || trial % 3 ? 14 : 13, x, out_r, req, empty ? 1 : -1);
        if (st != FR_OK) fprintf(stderr, "\n  %s\n", fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        tt_assert_shape(t.out[0], x->dtype, out_r, out_d);
        assert_same_bytes(t.out[0], x);
        tn_free(&t);
        fr_tensor_free(x);
    }
}

static void test_reshape_rules(void)
{
    fr_rng r = fr_test_rng("reshape_rules");
    static const struct {
        int in_r;
        int64_t in[4];
        int n;
        int64_t req[4];
        int opset, allowzero;
        fr_status want;
        int out_r;
        int64_t out[4];
        const char *msg;
    } cases[] = {
        {3, {2, 3, 4}, 2, {4, -1}, 14, -1, FR_OK, 2, {4, 6}, NULL},
        {3, {2, 3, 4}, 2, {0, -1}, 14, -1, FR_OK, 2, {2, 12}, NULL},
        {3, {2, 3, 4}, 3, {0, 0, -1}, 13, -1, FR_OK, 3, {2, 3, 4}, NULL},
        {3, {2, 3, 4}, 2, {3, 8}, 4, -1, FR_OK, 2, {3, 8}, NULL}, /* opset 4: attribute */
        {3, {2, 0, 3}, 2, {0, 6}, 14, 1, FR_OK, 2, {0, 6}, NULL}, /* allowzero: a real 0 */
        {3, {2, 0, 3}, 2, {0, -1}, 14, 0, FR_OK, 2, {2, 0}, NULL},
        {3, {2, 0, 3}, 2, {0, 6}, 14, 0, FR_ERR_SHAPE, 0, {0}, "[2, 0, 3]"},
        {3, {2, 0, 3}, 2, {-1, 0}, 14, 0, FR_ERR_SHAPE, 0, {0}, "-1"},
        {0, {0}, 2, {1, 1}, 14, -1, FR_OK, 2, {1, 1}, NULL},
        {1, {1}, 0, {0}, 14, -1, FR_OK, 0, {0}, NULL},
        {3, {2, 3, 4}, 2, {5, 5}, 14, -1, FR_ERR_SHAPE, 0, {0}, "[5, 5]"},
        {3, {2, 3, 4}, 2, {-1, -1}, 14, -1, FR_ERR_SHAPE, 0, {0}, "more than one -1"},
        {2, {2, 3}, 3, {0, 0, 0}, 14, -1, FR_ERR_SHAPE, 0, {0}, "rank 2"},
        {3, {2, 0, 3}, 2, {0, -1}, 14, 1, FR_ERR_SHAPE, 0, {0}, "allowzero"},
        {2, {2, 3}, 2, {-2, 3}, 14, -1, FR_ERR_SHAPE, 0, {0}, "-2"},
        {2, {2, 3}, 2, {4, -1}, 14, -1, FR_ERR_SHAPE, 0, {0}, "[2, 3]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_tensor *x = tt_rand_bits(&r, c % 2 ? FR_I64 : FR_BOOL, cases[c].in_r, cases[c].in);
        tnode t;
        fr_status st =
            run_reshape(&t, cases[c].opset, x, cases[c].n, cases[c].req, cases[c].allowzero);
        if (st != cases[c].want)
            fprintf(stderr, "\n  case %zu: %d %s\n", c, (int)st, fr_last_error());
        CU_ASSERT_EQUAL(st, cases[c].want);
        if (st == FR_OK && cases[c].want == FR_OK) {
            tt_assert_shape(t.out[0], x->dtype, cases[c].out_r, cases[c].out);
            assert_same_bytes(t.out[0], x);
        } else if (cases[c].msg) {
            tn_assert_error(cases[c].msg);
            if (strstr(cases[c].msg, "[5, 5]"))
                tn_assert_error("[2, 3, 4]"); /* both shapes */
        }
        tn_free(&t);
        fr_tensor_free(x);
    }
    /* the shape must be a constant */
    int64_t d[2] = {2, 3}, s[1] = {6};
    fr_tensor *x = tt_new(FR_F32, 2, d), *sh = tt_ints(FR_I64, 1, s), *ins[2] = {x, sh};
    tnode t;
    tn_init(&t, "Reshape", 14, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(sh);
}

/* ---- Squeeze / Unsqueeze ---- */

/* axes given as attribute (opset 11) or constant input (13); n_axes < 0: none */
static fr_status run_axes_op(tnode *t, const char *op, int64_t opset, fr_tensor *x, int n_axes,
                             const int64_t *axes)
{
    fr_tensor *at = n_axes >= 0 ? tt_ints(FR_I64, n_axes, axes) : NULL, *ins[2] = {x, at};
    if (opset >= 13) {
        tn_init(t, op, opset, at ? 2 : 1, ins, 2u, 1);
    } else {
        tn_init(t, op, opset, 1, ins, 0, 1);
        if (n_axes >= 0) TN_ATTR(t, ints, "axes", n_axes, axes);
    }
    fr_tensor_free(at);
    return tn_run(t);
}

static void test_squeeze(void)
{
    fr_rng r = fr_test_rng("squeeze");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 5), opset = trial % 2 ? 13 : 11;
        int64_t dims[FR_MAX_RANK], axes[FR_MAX_RANK], od[FR_MAX_RANK];
        for (int k = 0; k < rank; k++)
            dims[k] = fr_rng_uniform(&r) < 0.5 ? 1 : tt_rand_int(&r, 0, 4);
        int all = trial % 5 == 0, n_axes = 0, out_r = 0;
        for (int k = 0; k < rank; k++) {
            int drop = dims[k] == 1 && (all || fr_rng_uniform(&r) < 0.6);
            if (drop && !all) axes[n_axes++] = fr_rng_uniform(&r) < 0.5 ? k - rank : k;
            if (!drop) od[out_r++] = dims[k];
        }
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        tnode t;
        FR_ASSERT_OK(run_axes_op(&t, "Squeeze", opset, x, all ? -1 : n_axes, axes));
        tt_assert_shape(t.out[0], x->dtype, out_r, od);
        assert_same_bytes(t.out[0], x);
        tn_free(&t);
        fr_tensor_free(x);
    }
    int64_t d[3] = {1, 3, 1}, ax1[1] = {1}, dup[2] = {0, -3};
    fr_tensor *x = tt_new(FR_F32, 3, d);
    for (int opset = 11; opset <= 13; opset += 2) {
        tnode t;
        CU_ASSERT_EQUAL(run_axes_op(&t, "Squeeze", opset, x, 1, ax1), FR_ERR_SHAPE);
        tn_assert_error("size 3");
        tn_free(&t);
        CU_ASSERT_EQUAL(run_axes_op(&t, "Squeeze", opset, x, 2, dup), FR_ERR_SHAPE);
        tn_assert_error("repeated");
        tn_free(&t);
    }
    fr_tensor_free(x);
}

static void test_unsqueeze(void)
{
    fr_rng r = fr_test_rng("unsqueeze");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 4), opset = trial % 2 ? 13 : 11;
        int n_axes = (int)tt_rand_int(&r, 1, 3), out_r = rank + n_axes;
        int64_t dims[FR_MAX_RANK], axes[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 4, 0.1);
        int is_new[FR_MAX_RANK] = {0};
        for (int i = 0; i < n_axes; i++) { /* distinct positions in the output */
            int a;
            do a = (int)tt_rand_int(&r, 0, out_r - 1);
            while (is_new[a]);
            is_new[a] = 1;
            axes[i] = fr_rng_uniform(&r) < 0.5 ? a - out_r : a; /* negative: of the output rank */
        }
        for (int k = 0, j = 0; k < out_r; k++) od[k] = is_new[k] ? 1 : dims[j++];
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        tnode t;
        FR_ASSERT_OK(run_axes_op(&t, "Unsqueeze", opset, x, n_axes, axes));
        tt_assert_shape(t.out[0], x->dtype, out_r, od);
        assert_same_bytes(t.out[0], x);
        tn_free(&t);
        fr_tensor_free(x);
    }
    int64_t d[2] = {3, 4}, ax[2] = {-1, 0}, want[4] = {1, 3, 4, 1}, dup[2] = {1, -3}, far[1] = {3};
    fr_tensor *x = tt_new(FR_I64, 2, d);
    for (int opset = 11; opset <= 13; opset += 2) {
        tnode t;
        FR_ASSERT_OK(run_axes_op(&t, "Unsqueeze", opset, x, 2, ax));
        tt_assert_shape(t.out[0], FR_I64, 4, want);
        tn_free(&t);
        CU_ASSERT_EQUAL(run_axes_op(&t, "Unsqueeze", opset, x, 2, dup), FR_ERR_SHAPE);
        tn_assert_error("repeated");
        tn_free(&t);
        CU_ASSERT_EQUAL(run_axes_op(&t, "Unsqueeze", opset, x, 1, far), FR_ERR_SHAPE);
        tn_assert_error("axis 3");
        tn_free(&t);
    }
    /* opset 13: the axes input must be constant */
    fr_tensor *at = tt_ints(FR_I64, 1, ax), *ins[2] = {x, at};
    tnode t;
    tn_init(&t, "Unsqueeze", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    fr_tensor_free(at);
    fr_tensor_free(x);
}

/* ---- Flatten ---- */

static void test_flatten(void)
{
    fr_rng r = fr_test_rng("flatten");
    for (int trial = 0; trial < 200; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 5);
        int64_t dims[FR_MAX_RANK], od[2] = {1, 1};
        tt_rand_dims(&r, rank, dims, 4, 0.1);
        int64_t axis = tt_rand_int(&r, -rank, rank), a = axis < 0 ? axis + rank : axis;
        for (int k = 0; k < rank; k++) od[k < a ? 0 : 1] *= dims[k];
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        tnode t;
        tn_init(&t, "Flatten", 13, 1, &x, 0, 1);
        if (axis != 1 || trial % 2) TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        tt_assert_shape(t.out[0], x->dtype, 2, od);
        assert_same_bytes(t.out[0], x);
        tn_free(&t);
        fr_tensor_free(x);
    }
    int64_t d[2] = {2, 3};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    tnode t;
    tn_init(&t, "Flatten", 13, 1, &x, 0, 1);
    TN_ATTR(&t, int, "axis", -3);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("axis -3");
    tn_free(&t);
    fr_tensor_free(x);
}

/* ---- ConstantOfShape ---- */

static void test_constant_of_shape(void)
{
    fr_rng r = fr_test_rng("constant_of_shape");
    for (int trial = 0; trial < 100; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 4), with_value = trial % 4 != 0;
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 5, 0.1);
        fr_dtype dt = with_value ? tt_dtypes[trial % TT_N_DTYPES] : FR_F32;
        int64_t one = 1;
        fr_tensor *val = tt_rand_bits(&r, dt, trial % 2 ? 1 : 0, &one); /* [1] or a scalar */
        fr_tensor *sh = tt_ints(FR_I64, rank, dims);
        tnode t;
        tn_init(&t, "ConstantOfShape", 20, 1, &sh, 1u, 1);
        if (with_value) TN_ATTR(&t, tensor, "value", val);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        tt_assert_shape(y, dt, rank, dims);
        size_t es = fr_dtype_size(dt);
        static const uint8_t zeros[8] = {0};
        int64_t n = fr_tensor_numel(y), bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += memcmp((char *)y->data + i * (int64_t)es,
                          with_value ? val->data : (const void *)zeros, es) != 0;
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(val);
        fr_tensor_free(sh);
    }
    int64_t two = 2, s[2] = {2, 3}, sneg[2] = {2, -1};
    fr_tensor *val2 = tt_new(FR_F32, 1, &two), *sh = tt_ints(FR_I64, 2, s);
    fr_tensor *shn = tt_ints(FR_I64, 2, sneg);
    tnode t;
    tn_init(&t, "ConstantOfShape", 20, 1, &sh, 1u, 1);
    TN_ATTR(&t, tensor, "value", val2);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("one element");
    tn_free(&t);
    tn_init(&t, "ConstantOfShape", 20, 1, &sh, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    tn_init(&t, "ConstantOfShape", 20, 1, &shn, 1u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("negative");
    tn_free(&t);
    fr_tensor_free(val2);
    fr_tensor_free(sh);
    fr_tensor_free(shn);
}

/* ---- Range ---- */

static fr_status run_range(tnode *t, fr_tensor *s, fr_tensor *l, fr_tensor *d, unsigned mask)
{
    fr_tensor *ins[3] = {s, l, d};
    tn_init(t, "Range", 11, 3, ins, mask, 1);
    return tn_run(t);
}

static void test_range(void)
{
    fr_rng r = fr_test_rng("range");
    static const fr_dtype rdt[] = {FR_I64, FR_I32, FR_I16, FR_F32, FR_F64};
    for (int trial = 0; trial < 300; trial++) {
        fr_dtype dt = rdt[trial % 5];
        int is_int = dt != FR_F32 && dt != FR_F64;
        double s, l, d;
        if (is_int) {
            s = (double)tt_rand_int(&r, -20, 20);
            l = (double)tt_rand_int(&r, -20, 20);
            do d = (double)tt_rand_int(&r, -5, 5);
            while (d == 0);
        } else {
            s = -20 + 40 * fr_rng_uniform(&r);
            l = -20 + 40 * fr_rng_uniform(&r);
            d = (fr_rng_uniform(&r) < 0.5 ? -1 : 1) * (0.1 + 3 * fr_rng_uniform(&r));
            if (dt == FR_F32) s = (float)s, l = (float)l, d = (float)d;
        }
        fr_tensor *st = tt_scalar(dt, s), *lt = tt_scalar(dt, l), *dtt = tt_scalar(dt, d);
        tnode t;
        FR_ASSERT_OK(run_range(&t, st, lt, dtt, 7u));
        /* reference length: count the steps */
        int64_t n = 0;
        while (d > 0 ? s + (double)n * d < l : s + (double)n * d > l) n++;
        tt_assert_shape(t.out[0], dt, 1, &n);
        double bad = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = s + (double)i * d, got = fr_tensor_get_f64(t.out[0], i);
            double tol = dt == FR_F32   ? 1e-6 * (fabs(s) + fabs(l) + fabs(d))
                         : dt == FR_F64 ? 1e-12 * (fabs(s) + fabs(l))
                                        : 0;
            if (fabs(got - want) > tol) bad++;
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(st);
        fr_tensor_free(lt);
        fr_tensor_free(dtt);
    }
}

static void test_range_exact_and_errors(void)
{
    /* int64 extremes: the length and values are exact */
    fr_tensor *s = tt_new(FR_I64, 0, NULL), *l = tt_new(FR_I64, 0, NULL);
    fr_tensor *d = tt_new(FR_I64, 0, NULL);
    *(int64_t *)s->data = INT64_MIN + 5;
    *(int64_t *)l->data = INT64_MAX;
    *(int64_t *)d->data = (int64_t)1 << 62;
    tnode t;
    FR_ASSERT_OK(run_range(&t, s, l, d, 7u));
    int64_t four = 4;
    tt_assert_shape(t.out[0], FR_I64, 1, &four);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[i],
                        (int64_t)((uint64_t)(INT64_MIN + 5) + ((uint64_t)i << 62)));
    tn_free(&t);
    *(int64_t *)s->data = INT64_MAX;
    *(int64_t *)l->data = INT64_MIN;
    *(int64_t *)d->data = INT64_MIN;
    FR_ASSERT_OK(run_range(&t, s, l, d, 7u));
    int64_t two = 2;
    tt_assert_shape(t.out[0], FR_I64, 1, &two);
    CU_ASSERT_EQUAL(((int64_t *)t.out[0]->data)[1], -1);
    tn_free(&t);
    /* empty ranges */
    *(int64_t *)s->data = 0;
    *(int64_t *)l->data = 5;
    *(int64_t *)d->data = -1;
    FR_ASSERT_OK(run_range(&t, s, l, d, 7u));
    int64_t zero = 0;
    tt_assert_shape(t.out[0], FR_I64, 1, &zero);
    tn_free(&t);
    /* float32 0..1 step 0.1: ceil(1 / 0.1f) = 10 */
    fr_tensor *fs = tt_scalar(FR_F32, 0), *fl = tt_scalar(FR_F32, 1), *fd = tt_scalar(FR_F32, 0.1);
    FR_ASSERT_OK(run_range(&t, fs, fl, fd, 7u));
    int64_t ten = 10;
    tt_assert_shape(t.out[0], FR_F32, 1, &ten);
    tn_free(&t);
    /* errors: delta 0, not constant, mixed dtypes, unsupported dtype */
    *(int64_t *)d->data = 0;
    CU_ASSERT_EQUAL(run_range(&t, s, l, d, 7u), FR_ERR_SHAPE);
    tn_assert_error("delta");
    tn_free(&t);
    *(int64_t *)d->data = 1;
    CU_ASSERT_EQUAL(run_range(&t, s, l, d, 5u), FR_ERR_SHAPE);
    tn_assert_error("constant");
    tn_free(&t);
    CU_ASSERT_EQUAL(run_range(&t, s, fl, d, 7u), FR_ERR_SHAPE);
    tn_assert_error("float32");
    tn_free(&t);
    fr_tensor *b = tt_new(FR_BOOL, 0, NULL);
    CU_ASSERT_EQUAL(run_range(&t, b, b, b, 7u), FR_ERR_UNSUPPORTED);
    tn_assert_error("bool");
    tn_free(&t);
    fr_tensor_free(b);
    fr_tensor_free(s);
    fr_tensor_free(l);
    fr_tensor_free(d);
    fr_tensor_free(fs);
    fr_tensor_free(fl);
    fr_tensor_free(fd);
}

/* ---- Constant ---- */

static void test_constant(void)
{
    fr_rng r = fr_test_rng("constant");
    for (int d = 0; d < TT_N_DTYPES; d++) { /* value: a tensor of any dtype and shape */
        int64_t dims[3];
        int rank = (int)tt_rand_int(&r, 0, 3);
        tt_rand_dims(&r, rank, dims, 4, 0.1);
        fr_tensor *v = tt_rand_bits(&r, tt_dtypes[d], rank, dims);
        tnode t;
        tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
        TN_ATTR(&t, tensor, "value", v);
        FR_ASSERT_OK(tn_run(&t));
        tt_assert_shape(t.out[0], v->dtype, rank, dims);
        assert_same_bytes(t.out[0], v);
        tn_free(&t);
        fr_tensor_free(v);
    }
    tnode t;
    float fv = (float)fr_rng_normal(&r), fs[3] = {(float)fr_rng_normal(&r), 2.5f, -1};
    int64_t iv = tt_rand_int(&r, -1000, 1000), is[2] = {tt_rand_int(&r, -1000, 1000), INT64_MIN};
    int64_t three = 3, two = 2, zero = 0;
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, float, "value_float", fv);
    FR_ASSERT_OK(tn_run(&t));
    tt_assert_shape(t.out[0], FR_F32, 0, NULL);
    CU_ASSERT_EQUAL(*(float *)t.out[0]->data, fv);
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, floats, "value_floats", 3, fs);
    FR_ASSERT_OK(tn_run(&t));
    tt_assert_shape(t.out[0], FR_F32, 1, &three);
    CU_ASSERT(memcmp(t.out[0]->data, fs, sizeof fs) == 0);
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, int, "value_int", iv);
    FR_ASSERT_OK(tn_run(&t));
    tt_assert_shape(t.out[0], FR_I64, 0, NULL);
    CU_ASSERT_EQUAL(*(int64_t *)t.out[0]->data, iv);
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, ints, "value_ints", 2, is);
    FR_ASSERT_OK(tn_run(&t));
    tt_assert_shape(t.out[0], FR_I64, 1, &two);
    CU_ASSERT(memcmp(t.out[0]->data, is, sizeof is) == 0);
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, ints, "value_ints", 0, is);
    FR_ASSERT_OK(tn_run(&t));
    tt_assert_shape(t.out[0], FR_I64, 1, &zero);
    tn_free(&t);
    /* unsupported and malformed */
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, string, "value_string", "hello");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("string");
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, string, "sparse_value", "x");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("sparse_value");
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("no value");
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, int, "value_int", 1);
    TN_ATTR(&t, float, "value_float", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_assert_error("exactly one");
    tn_free(&t);
}

static void test_unsupported_dtype(void)
{
    int64_t d[2] = {2, 3}, s[1] = {6};
    fr_tensor *x = tt_new(FR_F32, 2, d), *sh = tt_ints(FR_I64, 1, s), *ins[2] = {x, sh};
    tnode t;
    tn_init(&t, "Reshape", 14, 2, ins, 2u, 1);
    t.g->values[t.in_vid[0]].dtype = FR_STRING;
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("string");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(sh);
}

static void test_registered(void)
{
    const char *names[] = {"Shape",           "Size",  "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                           "ConstantOfShape", "Range", "Constant"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo shape_tests[] = {
    {"registered", test_registered},
    {"shape_size", test_shape_size},
    {"reshape_random", test_reshape_random},
    {"reshape_rules", test_reshape_rules},
    {"squeeze", test_squeeze},
    {"unsqueeze", test_unsqueeze},
    {"flatten", test_flatten},
    {"constant_of_shape", test_constant_of_shape},
    {"range", test_range},
    {"range_exact_and_errors", test_range_exact_and_errors},
    {"constant", test_constant},
    {"unsupported_dtype", test_unsupported_dtype},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_shape", NULL, NULL, NULL, NULL, shape_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fr_test_main(suites);
}
