/* GPU layout and shape ops (ops/cuda/layout.cu) against the CPU kernels (ops/layout.c,
 * ops/shape.c): Transpose, Concat, Split, Slice, Trilu, Tile, SliceGrad, TileGrad, Reshape,
 * Squeeze, Unsqueeze, Flatten, Shape, Size, ConstantOfShape, Range, Constant.
 *
 * Every case runs the node on the CPU (tn_run) and on the device (tn_run_gpu) with the same
 * fresh random inputs. Data movement must be bit-exact (tolerance 0) for every element size
 * and dtype (float32, int64, bool, float16, uint8, float64, int32, float8e4m3fn, bfloat16):
 * random shapes with negative axes, size-1 and empty dims, every opset form (Split's attribute,
 * input and num_outputs; Slice's attributes and inputs with negative and huge steps), and
 * large shapes that take each fast path (16-byte row copies, the shared-memory tile
 * transpose for last-two swaps, NCHW->NHWC and reversed perms, attention-head perms, pitched
 * Concat/Split copies). TileGrad sums: float32 within 1e-5, float64 within 1e-12 relative L2
 * (bit-identical expected when each output has few tiles; the chunked path for many tiles
 * adds in another grouping). Range must be bit-exact (no fused multiply-add).
 *
 * On a mismatch the case (op, attributes, input dtypes and shapes), the output, the first
 * differing element and both values are printed. Without a device the program prints SKIP. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? 1e-12 : 1e-5; }

/* Dtypes cycled through by the random cases: the harness's eight plus bfloat16. */
static fr_dtype dtype_at(int i)
{
    return i % (TT_N_DTYPES + 1) == TT_N_DTYPES ? FR_BF16 : tt_dtypes[i % (TT_N_DTYPES + 1)];
}

static void shuffle(fr_rng *r, int *p, int n)
{
    for (int k = 0; k < n; k++) p[k] = k;
    for (int k = n - 1; k > 0; k--) {
        int j = (int)tt_rand_int(r, 0, k), tmp = p[k];
        p[k] = p[j];
        p[j] = tmp;
    }
}

/* ---- Transpose ---- */

static void run_transpose(fr_tensor *x, const int *perm, const char *label)
{
    tnode t;
    tn_init(&t, "Transpose", 13, 1, &x, 0, 1);
    if (perm) {
        int64_t pv[FR_MAX_RANK];
        for (int k = 0; k < x->rank; k++) pv[k] = perm[k];
        TN_ATTR(&t, ints, "perm", x->rank, pv);
    }
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, label);
    tn_free(&t);
}

static void test_transpose(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_transpose");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 6), perm[FR_MAX_RANK];
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, rank > 4 ? 5 : 9, 0.05);
        fr_tensor *x = tt_rand_bits(&r, dtype_at(trial), rank, dims);
        shuffle(&r, perm, rank);
        run_transpose(x, trial % 5 == 0 ? NULL : perm, "random");
        fr_tensor_free(x);
    }
    static const struct {
        int rank;
        int64_t d[4];
        int perm[4];
        const char *what;
    } big[] = {
        {2, {1000, 1003}, {1, 0}, "2-D transpose"},
        {2, {1, 300}, {1, 0}, "row to column (a copy)"},
        {3, {4, 300, 257}, {0, 2, 1}, "batched last-two swap"},
        {4, {8, 128, 12, 64}, {0, 2, 1, 3}, "attention heads [B,T,H,D] -> [B,H,T,D]"},
        {4, {2, 64, 16, 3}, {0, 2, 1, 3}, "heads with a small last dim"},
        {4, {2, 64, 33, 35}, {0, 2, 3, 1}, "NCHW -> NHWC"},
        {4, {2, 33, 35, 64}, {0, 3, 1, 2}, "NHWC -> NCHW"},
        {3, {50, 60, 70}, {2, 1, 0}, "reversed"},
        {4, {6, 40, 50, 7}, {3, 1, 0, 2}, "mixed"},
        {4, {3, 0, 5, 2}, {3, 2, 1, 0}, "empty"},
        {2, {513, 129}, {1, 0}, "odd sizes"},
    };
    static const fr_dtype dts[] = {FR_F32, FR_U8, FR_F16, FR_F64, FR_BOOL, FR_F8E4M3, FR_I64, FR_BF16};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            if (d % 2 != i % 2 && d > 3) continue; /* keep the run short: all sizes, most dtypes */
            fr_tensor *x = tt_rand_bits(&r, dts[d], big[i].rank, big[i].d);
            run_transpose(x, big[i].perm, big[i].what);
            fr_tensor_free(x);
        }
    }
}

/* ---- Concat ---- */

static void test_concat(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_concat");
    for (int trial = 0; trial < 250; trial++) {
        int big = trial % 25 == 24;
        int rank = (int)tt_rand_int(&r, 1, 4), n_in = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 60 : 6, 0.05);
        fr_dtype dt = dtype_at(trial);
        fr_tensor *x[TN_MAX];
        for (int i = 0; i < n_in; i++) {
            int64_t d[FR_MAX_RANK];
            memcpy(d, dims, sizeof d);
            d[ax] = fr_rng_uniform(&r) < 0.1 ? 0 : tt_rand_int(&r, 1, big ? 90 : 5);
            x[i] = tt_rand_bits(&r, dt, rank, d);
        }
        tnode t;
        tn_init(&t, "Concat", trial % 9 == 8 ? 4 : 13, n_in, x, 0, 1);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        for (int i = 0; i < n_in; i++) fr_tensor_free(x[i]);
    }
    /* opset 1 without the attribute: axis 1 */
    int64_t a[3] = {4, 3, 5}, b[3] = {4, 7, 5};
    fr_tensor *x[2] = {tt_rand_bits(&r, FR_F32, 3, a), tt_rand_bits(&r, FR_F32, 3, b)};
    tnode t;
    tn_init(&t, "Concat", 1, 2, x, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "opset 1 default axis");
    tn_free(&t);
    fr_tensor_free(x[0]);
    fr_tensor_free(x[1]);
    /* large: the last axis with odd widths (narrow units), and the first axis (plain copies) */
    int64_t p[3] = {64, 100, 33}, q[3] = {64, 100, 64}, s[3] = {64, 100, 1};
    for (int c = 0; c < 4; c++) {
        fr_dtype dt = c == 0 ? FR_F32 : c == 1 ? FR_F16 : c == 2 ? FR_U8 : FR_F64;
        fr_tensor *y[3] = {tt_rand_bits(&r, dt, 3, p), tt_rand_bits(&r, dt, 3, q), tt_rand_bits(&r, dt, 3, s)};
        for (int ax = 1; ax < 3; ax++) {
            if (ax == 1) { /* same last dim for a concat along axis 1 */
                int64_t p1[3] = {64, 100, 33}, p2[3] = {64, 7, 33}, p3[3] = {64, 250, 33};
                fr_tensor *z[3] = {tt_rand_bits(&r, dt, 3, p1), tt_rand_bits(&r, dt, 3, p2),
                                   tt_rand_bits(&r, dt, 3, p3)};
                tn_init(&t, "Concat", 13, 3, z, 0, 1);
                TN_ATTR(&t, int, "axis", 1);
                FR_ASSERT_OK(tn_run(&t));
                gpu_check(&t, 0, "large, axis 1");
                tn_free(&t);
                for (int i = 0; i < 3; i++) fr_tensor_free(z[i]);
                continue;
            }
            tn_init(&t, "Concat", 13, 3, y, 0, 1);
            TN_ATTR(&t, int, "axis", -1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "large, last axis");
            tn_free(&t);
        }
        for (int i = 0; i < 3; i++) fr_tensor_free(y[i]);
    }
}

/* ---- Split ---- */

static void test_split(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_split");
    for (int trial = 0; trial < 250; trial++) {
        int big = trial % 25 == 24;
        int rank = (int)tt_rand_int(&r, 1, 4), n_out = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int form = trial % 4; /* 0: opset 11 attr, 1: opset 13 input, 2: even, 3: opset 18 num_outputs */
        int64_t dims[FR_MAX_RANK], sizes[TN_MAX];
        tt_rand_dims(&r, rank, dims, big ? 50 : 6, 0.05);
        if (form == 2 || form == 3) {
            int64_t part = tt_rand_int(&r, 0, big ? 80 : 4);
            dims[ax] = part * n_out;
            if (form == 3 && n_out > 1 && part > 1) dims[ax] -= tt_rand_int(&r, 1, part - 1); /* smaller last */
        } else {
            dims[ax] = 0;
            for (int i = 0; i < n_out; i++) {
                sizes[i] = fr_rng_uniform(&r) < 0.15 ? 0 : tt_rand_int(&r, 1, big ? 80 : 5);
                dims[ax] += sizes[i];
            }
        }
        fr_tensor *x = tt_rand_bits(&r, dtype_at(trial), rank, dims);
        fr_tensor *sp = form == 1 ? tt_ints(FR_I64, n_out, sizes) : NULL, *ins[2] = {x, sp};
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
        if (n_out > 1 && trial % 7 == 3) tn_omit_output(&t, (int)tt_rand_int(&r, 0, n_out - 1));
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(sp);
    }
}

/* ---- Slice ---- */

static int64_t pick_bound(fr_rng *r, int64_t d, int i32)
{
    double u = fr_rng_uniform(r);
    if (u < 0.1) return i32 ? INT32_MAX : INT64_MAX;
    if (u < 0.2) return i32 ? INT32_MIN : INT64_MIN;
    return tt_rand_int(r, -d - 3, d + 3);
}

static void test_slice(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_slice");
    static const int64_t step_choices[] = {1, 2, 3, -1, -2, -3, INT64_MAX, INT64_MIN};
    for (int trial = 0; trial < 400; trial++) {
        int big = trial % 40 == 39;
        int rank = (int)tt_rand_int(&r, 1, 4), i32 = trial % 3 == 2, old_form = trial % 7 == 6;
        int64_t dims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 70 : 8, 0.05);
        fr_tensor *x = tt_rand_bits(&r, dtype_at(trial), rank, dims);
        int cnt = (int)tt_rand_int(&r, 1, rank), omit_axes = trial % 5 == 0;
        int omit_steps = old_form || trial % 4 == 1, perm[FR_MAX_RANK];
        shuffle(&r, perm, rank);
        int64_t starts[FR_MAX_RANK], ends[FR_MAX_RANK], axes[FR_MAX_RANK], steps[FR_MAX_RANK];
        for (int i = 0; i < cnt; i++) {
            int a = omit_axes ? i : perm[i];
            axes[i] = fr_rng_uniform(&r) < 0.5 ? a - rank : a;
            starts[i] = pick_bound(&r, dims[a], i32);
            ends[i] = pick_bound(&r, dims[a], i32);
            steps[i] = omit_steps ? 1 : step_choices[tt_rand_int(&r, 0, i32 ? 5 : 7)];
        }
        fr_dtype it = i32 ? FR_I32 : FR_I64;
        fr_tensor *ins[5] = {x, tt_ints(it, cnt, starts), tt_ints(it, cnt, ends),
                             omit_axes ? NULL : tt_ints(it, cnt, axes), omit_steps ? NULL : tt_ints(it, cnt, steps)};
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
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        for (int i = 0; i < 5; i++) fr_tensor_free(ins[i]);
    }
    /* large: rows (step 1 on the last dim: 16-byte units), reversed, strided, one column */
    static const struct {
        int64_t s[2], e[2], st[2];
        const char *what;
    } big[] = {
        {{0, 16}, {300, 400}, {1, 1}, "rows"},
        {{-1, 0}, {INT64_MIN, 400}, {-1, 1}, "rows reversed"},
        {{5, -1}, {290, INT64_MIN}, {2, -1}, "columns reversed"},
        {{1, 2}, {INT64_MAX, 397}, {3, 5}, "strided"},
        {{0, 7}, {300, 8}, {1, 1}, "one column"},
    };
    int64_t d[2] = {300, 400}, axes[2] = {0, 1};
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        for (int dt = 0; dt < 4; dt++) {
            fr_tensor *x = tt_rand_bits(&r, dt == 0 ? FR_F32 : dt == 1 ? FR_F16 : dt == 2 ? FR_U8 : FR_F64, 2, d);
            fr_tensor *ins[5] = {x, tt_ints(FR_I64, 2, big[c].s), tt_ints(FR_I64, 2, big[c].e),
                                 tt_ints(FR_I64, 2, axes), tt_ints(FR_I64, 2, big[c].st)};
            tnode t;
            tn_init(&t, "Slice", 13, 5, ins, 0x1eu, 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, big[c].what);
            tn_free(&t);
            for (int i = 0; i < 5; i++) fr_tensor_free(ins[i]);
        }
    }
}

/* ---- Trilu ---- */

static void test_trilu(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_trilu");
    static const struct {
        int rank;
        int64_t d[4];
    } shapes[] = {{4, {2, 3, 5, 4}}, {2, {4, 4}},     {3, {3, 1, 6}},    {3, {2, 0, 3}},
                  {2, {5, 2}},       {2, {1, 1}},     {3, {2, 40, 33}},  {3, {3, 257, 300}},
                  {2, {1000, 130}}};
    static const int64_t ks[] = {0, -1, 2, 100, -100, INT64_MAX, INT64_MIN, 37};
    int trial = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int upper = 0; upper <= 1; upper++) {
            for (int ki = -1; ki < (int)(sizeof ks / sizeof ks[0]); ki++, trial++) {
                fr_tensor *x = tt_rand_bits(&r, dtype_at(trial), shapes[si].rank, shapes[si].d);
                fr_dtype kdt = trial % 3 == 2 && ks[ki < 0 ? 0 : ki] == (int32_t)ks[ki < 0 ? 0 : ki] ? FR_I32 : FR_I64;
                fr_tensor *kt = tt_new(kdt, 0, NULL), *ins[2] = {x, kt};
                int64_t k = ki < 0 ? 0 : ks[ki];
                if (kdt == FR_I64)
                    *(int64_t *)kt->data = k;
                else
                    *(int32_t *)kt->data = (int32_t)k;
                tnode t;
                tn_init(&t, "Trilu", 14, ki < 0 ? 1 : 2, ins, trial % 2 ? 2u : 0u, 1);
                if (upper == 0 || trial % 3) TN_ATTR(&t, int, "upper", upper);
                FR_ASSERT_OK(tn_run(&t));
                gpu_check(&t, 0, "trilu");
                tn_free(&t);
                fr_tensor_free(x);
                fr_tensor_free(kt);
            }
        }
    }
}

/* ---- Tile ---- */

static void test_tile(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_tile");
    for (int trial = 0; trial < 250; trial++) {
        int big = trial % 25 == 24;
        int rank = (int)tt_rand_int(&r, 1, 4);
        int64_t dims[FR_MAX_RANK], reps[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 40 : 5, 0.05);
        for (int k = 0; k < rank; k++) reps[k] = fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, big ? 5 : 3);
        fr_tensor *x = tt_rand_bits(&r, dtype_at(trial), rank, dims);
        fr_tensor *rt = tt_ints(trial % 2 ? FR_I64 : FR_I32, rank, reps), *ins[2] = {x, rt};
        tnode t;
        tn_init(&t, "Tile", 13, 2, ins, 2u, 1);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(rt);
    }
    static const struct {
        int rank;
        int64_t d[3], reps[3];
    } big[] = {{2, {128, 256}, {4, 3}}, {3, {1, 1000, 1}, {100, 1, 7}}, {1, {3}, {50000}}, {3, {7, 9, 11}, {9, 7, 5}}};
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        for (int dt = 0; dt < 3; dt++) {
            fr_tensor *x = tt_rand_bits(&r, dt == 0 ? FR_F32 : dt == 1 ? FR_F16 : FR_F64, big[c].rank, big[c].d);
            fr_tensor *rt = tt_ints(FR_I64, big[c].rank, big[c].reps), *ins[2] = {x, rt};
            tnode t;
            tn_init(&t, "Tile", 13, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "large");
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(rt);
        }
    }
}

/* ---- SliceGrad ---- */

/* A random valid (start, step, len) for a dim of size d. */
static void rand_slice_dim(fr_rng *r, int64_t d, int64_t *start, int64_t *step, int64_t *len)
{
    static const int64_t steps[] = {1, 1, 2, 3, -1, -2, 5};
    *start = 0;
    *step = 1;
    *len = 0;
    if (d == 0) return;
    int64_t st = steps[tt_rand_int(r, 0, 6)], s = tt_rand_int(r, 0, d - 1);
    int64_t room = st > 0 ? (d - 1 - s) / st + 1 : s / -st + 1; /* elements that fit */
    *len = fr_rng_uniform(r) < 0.05 ? 0 : tt_rand_int(r, 1, room);
    *start = s;
    *step = *len > 1 ? st : 1;
}

static void test_slice_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_slice_grad");
    for (int trial = 0; trial < 250; trial++) {
        int big = trial % 25 == 24;
        int rank = (int)tt_rand_int(&r, 0, 4);
        int64_t shape[FR_MAX_RANK], starts[FR_MAX_RANK], steps[FR_MAX_RANK], len[FR_MAX_RANK];
        tt_rand_dims(&r, rank, shape, big ? 300 : 8, 0.05);
        for (int k = 0; k < rank; k++) rand_slice_dim(&r, shape[k], &starts[k], &steps[k], &len[k]);
        fr_dtype dt = trial % 3 ? FR_F32 : FR_F64;
        fr_tensor *dy = tt_randn(&r, dt, rank, len, 0, 1);
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SliceGrad", 1, 1, &dy, 0, 1);
        TN_ATTR(&t, ints, "shape", rank, shape);
        TN_ATTR(&t, ints, "starts", rank, starts);
        TN_ATTR(&t, ints, "steps", rank, steps);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(dy);
    }
    /* large: rows (16-byte units), reversed columns */
    int64_t shape[2] = {300, 512}, s1[2] = {10, 8}, st1[2] = {1, 1}, l1[2] = {200, 496};
    int64_t s2[2] = {299, 511}, st2[2] = {-2, -1}, l2[2] = {150, 512};
    for (int c = 0; c < 4; c++) {
        fr_dtype dt = c % 2 ? FR_F64 : FR_F32;
        fr_tensor *dy = tt_randn(&r, dt, 2, c < 2 ? l1 : l2, 0, 1);
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SliceGrad", 1, 1, &dy, 0, 1);
        TN_ATTR(&t, ints, "shape", 2, shape);
        TN_ATTR(&t, ints, "starts", 2, c < 2 ? s1 : s2);
        TN_ATTR(&t, ints, "steps", 2, c < 2 ? st1 : st2);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, c < 2 ? "large rows" : "large reversed");
        tn_free(&t);
        fr_tensor_free(dy);
    }
}

/* ---- TileGrad ---- */

static void test_tile_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_tile_grad");
    for (int trial = 0; trial < 200; trial++) {
        int rank = (int)tt_rand_int(&r, 0, 4);
        int64_t shape[FR_MAX_RANK], dd[FR_MAX_RANK];
        tt_rand_dims(&r, rank, shape, 6, 0.05);
        for (int k = 0; k < rank; k++) dd[k] = shape[k] * (fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, 4));
        fr_dtype dt = trial % 3 ? FR_F32 : FR_F64;
        fr_tensor *dy = tt_randn(&r, dt, rank, dd, 0, 1);
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "TileGrad", 1, 1, &dy, 0, 1);
        TN_ATTR(&t, ints, "shape", rank, shape);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, tol_of(dt), "random");
        tn_free(&t);
        fr_tensor_free(dy);
    }
    /* many outputs (one pass), few outputs with many tiles (chunked), one output */
    static const struct {
        int rank;
        int64_t shape[3], reps[3];
        const char *what;
    } big[] = {
        {2, {300, 512}, {2, 3}, "many outputs"},
        {1, {3}, {100000}, "3 outputs, 100000 tiles"},
        {2, {2, 3}, {1000, 100}, "6 outputs, 100000 tiles"},
        {3, {4, 1, 5}, {30, 700, 2}, "20 outputs, 42000 tiles"},
        {1, {1}, {300000}, "one output"},
    };
    for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
        for (int f = 0; f < 2; f++) {
            fr_dtype dt = f ? FR_F64 : FR_F32;
            int64_t dd[3];
            for (int k = 0; k < big[c].rank; k++) dd[k] = big[c].shape[k] * big[c].reps[k];
            fr_tensor *dy = tt_randn(&r, dt, big[c].rank, dd, 0.5, 1);
            tnode t;
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "TileGrad", 1, 1, &dy, 0, 1);
            TN_ATTR(&t, ints, "shape", big[c].rank, big[c].shape);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, tol_of(dt), big[c].what);
            tn_free(&t);
            fr_tensor_free(dy);
        }
    }
}

/* ---- Reshape, Squeeze, Unsqueeze, Flatten ---- */

static void test_reshape_family(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_reshape");
    for (int trial = 0; trial < 4 * 9; trial++) {
        int op = trial % 4, big = trial >= 27;
        fr_dtype dt = dtype_at(trial / 4);
        int64_t d[4] = {big ? 64 : 3, 1, big ? 1000 : 5, trial % 5 == 0 ? 0 : 2};
        fr_tensor *x = tt_rand_bits(&r, dt, 4, d);
        tnode t;
        if (op == 0) {
            int64_t shp[3] = {-1, d[1] * d[2], 2}, z[2] = {-1, 2};
            fr_tensor *s = trial % 5 == 0 ? tt_ints(FR_I64, 2, z) : tt_ints(FR_I64, 3, shp), *ins[2] = {x, s};
            tn_init(&t, "Reshape", 14, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "reshape");
            tn_free(&t);
            fr_tensor_free(s);
        } else if (op == 1) {
            int64_t ax[1] = {1};
            fr_tensor *a = tt_ints(FR_I64, 1, ax), *ins[2] = {x, a};
            tn_init(&t, "Squeeze", 13, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "squeeze");
            tn_free(&t);
            fr_tensor_free(a);
        } else if (op == 2) {
            int64_t ax[2] = {0, -1};
            fr_tensor *a = tt_ints(FR_I64, 2, ax), *ins[2] = {x, a};
            tn_init(&t, "Unsqueeze", 13, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "unsqueeze");
            tn_free(&t);
            fr_tensor_free(a);
        } else {
            tn_init(&t, "Flatten", 13, 1, &x, 0, 1);
            TN_ATTR(&t, int, "axis", trial % 3 - 1);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "flatten");
            tn_free(&t);
        }
        fr_tensor_free(x);
    }
}

/* ---- Shape, Size, ConstantOfShape, Range, Constant ---- */

static void test_shape_size(void)
{
    if (!gpu_available()) return;
    int64_t d[5] = {2, 0, 7, 1, 300};
    static const int64_t se[][2] = {{0, 5}, {1, 3}, {-2, 100}, {3, 1}, {-100, -1}};
    for (int rank = 0; rank <= 5; rank++) {
        fr_tensor *x = tt_new(FR_F16, rank, d);
        for (size_t c = 0; c < sizeof se / sizeof se[0]; c++) {
            tnode t;
            tn_init(&t, "Shape", c ? 15 : 13, 1, &x, 0, 1);
            if (c) {
                TN_ATTR(&t, int, "start", se[c][0]);
                TN_ATTR(&t, int, "end", se[c][1]);
            }
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "shape");
            tn_free(&t);
        }
        tnode t;
        tn_init(&t, "Size", 13, 1, &x, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "size");
        tn_free(&t);
        fr_tensor_free(x);
    }
}

static void test_constant_of_shape(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_cos");
    static const int64_t shapes[][3] = {{3, 4, 5}, {0, 2, 3}, {300, 700, 1}, {1, 1, 1}};
    static const fr_dtype dts[] = {FR_UNDEFINED, FR_F32, FR_I64, FR_BOOL, FR_F16, FR_U8, FR_F64, FR_I32, FR_F8E4M3};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t v = 0; v < sizeof dts / sizeof dts[0]; v++) {
            fr_tensor *sh = tt_ints(FR_I64, 3, shapes[s]);
            tnode t;
            tn_init(&t, "ConstantOfShape", 13, 1, &sh, 1u, 1);
            if (dts[v] != FR_UNDEFINED) {
                int64_t one = 1;
                fr_tensor *val = tt_rand_bits(&r, dts[v], 1, &one);
                if (v == 5) memset(val->data, 0, val->nbytes); /* zero: the memset path */
                TN_ATTR(&t, tensor, "value", val);
                fr_tensor_free(val);
            }
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, "constant of shape");
            tn_free(&t);
            fr_tensor_free(sh);
        }
    }
}

static void test_range(void)
{
    if (!gpu_available()) return;
    static const struct {
        fr_dtype dt;
        double s, l, d;
    } cases[] = {
        {FR_F32, 0.1, 1e4, 0.37},       {FR_F32, -3.5, 2.25, 0.125}, {FR_F32, 1e3, -1e3, -0.013},
        {FR_F64, 0.1, 3e5, 0.7},        {FR_F64, 5, 5, 1},           {FR_I16, -300, 30000, 7},
        {FR_I32, 100000, -200000, -3},  {FR_I64, -5, 400000, 1},     {FR_I64, 10, 0, -1},
        {FR_F32, 16777216.0, 16777300.0, 1.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_tensor *ins[3] = {tt_scalar(cases[c].dt, cases[c].s), tt_scalar(cases[c].dt, cases[c].l),
                             tt_scalar(cases[c].dt, cases[c].d)};
        tnode t;
        tn_init(&t, "Range", 13, 3, ins, 7u, 1);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "range");
        tn_free(&t);
        for (int i = 0; i < 3; i++) fr_tensor_free(ins[i]);
    }
}

static void test_constant(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_constant");
    int64_t dims[3][2] = {{3000, 1}, {7, 3}, {0, 4}};
    for (int c = 0; c < 3; c++) {
        fr_tensor *v = tt_rand_bits(&r, c == 1 ? FR_F16 : FR_F32, 2, dims[c]);
        tnode t;
        tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
        TN_ATTR(&t, tensor, "value", v);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, c == 0 ? "value tensor of 12 KB (several launches)" : "value tensor");
        tn_free(&t);
        fr_tensor_free(v);
    }
    fr_tensor *s = tt_scalar(FR_I64, -123456789012.0);
    tnode t;
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, tensor, "value", s);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "scalar tensor");
    tn_free(&t);
    fr_tensor_free(s);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, float, "value_float", 3.25f);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "value_float");
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, int, "value_int", -77);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "value_int");
    tn_free(&t);
    float fl[700];
    int64_t il[5] = {1, -2, 3, INT64_MAX, INT64_MIN};
    for (int i = 0; i < 700; i++) fl[i] = (float)fr_rng_normal(&r);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, floats, "value_floats", 700, fl);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "value_floats");
    tn_free(&t);
    tn_init(&t, "Constant", 13, 0, NULL, 0, 1);
    TN_ATTR(&t, ints, "value_ints", 5, il);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "value_ints");
    tn_free(&t);
}

static void test_report(void)
{
    if (!gpu_available()) return;
    printf("\n  TileGrad: %d of %d cases bit-identical to the CPU (the rest within tolerance)\n", gpu_n_exact,
           gpu_n_exact + gpu_n_close);
}

static CU_TestInfo layout_tests[] = {
    {"transpose", test_transpose},
    {"concat", test_concat},
    {"split", test_split},
    {"slice", test_slice},
    {"trilu", test_trilu},
    {"tile", test_tile},
    {"slice_grad", test_slice_grad},
    {"tile_grad", test_tile_grad},
    {"reshape_family", test_reshape_family},
    {"shape_size", test_shape_size},
    {"constant_of_shape", test_constant_of_shape},
    {"range", test_range},
    {"constant", test_constant},
    {"report", test_report},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_layout", NULL, NULL, NULL, NULL, layout_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
