/* GPU gather family (ops/cuda/gather.cu) against the CPU kernels (ops/gather.c): Gather,
 * GatherElements, GatherND and the scatter-adds GatherGrad, GatherElementsGrad, GatherNDGrad.
 *
 * Every case runs the node on the CPU (tn_run) and on the device (tn_run_gpu) with the same
 * fresh random inputs. Forward ops move bytes, so they must be bit-exact (tolerance 0) for
 * every dtype (float32, int64, bool, float16, uint8, float64, int32, float8e4m3fn) and both
 * index dtypes, with negative and scalar indices, negative axes, empty dims, and sizes large
 * enough for many blocks and the 16-byte row path (an embedding lookup of a [8, 512] batch
 * into a [4000, 512] table). Scatter-adds: float32 within 1e-5 and float64 within 1e-12
 * relative L2 (the GPU adds in the CPU's order in double, so they are expected bit-identical:
 * the suite prints how many were), with heavily repeated indices, and bit-identical from one
 * GPU run to the next (determinism).
 *
 * Out-of-range indices: the device cannot fail a kernel, it records the error in the node's
 * scratch (see gather.cu); the run must not crash or touch memory out of bounds, must write
 * zeros for the bad elements (forward) or drop the bad rows (backward), and the device must
 * stay usable. tn_run_gpu may return FR_OK or FR_ERR_RANGE (once the runner reads the record).
 *
 * On a mismatch the case (op, attributes, input dtypes and shapes), the output, the first
 * differing element and both values are printed. Without a device the program prints SKIP. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? 1e-12 : 1e-5; }

/* Random indices in [-n, n) (n > 0). */
static fr_tensor *rand_indices(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, int64_t n)
{
    return tt_rand_ints(r, dt, rank, dims, -n, n - 1);
}

/* ---- Gather ---- */

static void test_gather_random(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4), q = (int)tt_rand_int(&r, 0, 3);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 7, 0.05);
        tt_rand_dims(&r, q, idims, 5, 0.05);
        if (dims[ax] == 0 && q == 0) dims[ax] = 1;
        if (dims[ax] == 0) idims[0] = 0;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, trial % 2 ? FR_I64 : FR_I32, q, idims, dims[ax] ? dims[ax] : 1);
        fr_tensor *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1);
        if (axis != 0 || trial % 2) TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "random");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
}

static void test_gather_large(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_large");
    static const struct {
        fr_dtype dt;
        int rank, q, axis;
        int64_t d[3], qd[2];
        const char *what;
    } cases[] = {
        {FR_F32, 2, 2, 0, {4000, 512}, {8, 512}, "embedding lookup, 16-byte rows"},
        {FR_BF16, 2, 2, 0, {1000, 100}, {4, 300}, "bf16 rows of 200 bytes (8-byte units)"},
        {FR_F16, 2, 1, 1, {300, 1001}, {777}, "float16 along the last axis (2-byte elements)"},
        {FR_U8, 3, 2, 1, {7, 513, 33}, {19, 23}, "uint8 rows of 33 bytes"},
        {FR_F64, 3, 1, -1, {60, 50, 40}, {1000}, "float64, axis -1, many repeats"},
        {FR_I64, 2, 0, 0, {100000, 3}, {0}, "scalar index into a tall table"},
        {FR_F8E4M3, 2, 2, 0, {256, 1024}, {33, 65}, "fp8 rows of 1 KiB"},
        {FR_F32, 3, 2, 2, {0, 5, 6}, {3, 4}, "empty outer dim"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int ax = cases[c].axis < 0 ? cases[c].axis + cases[c].rank : cases[c].axis;
        fr_tensor *x = tt_rand_bits(&r, cases[c].dt, cases[c].rank, cases[c].d);
        for (int it = 0; it < 2; it++) {
            fr_tensor *idx = rand_indices(&r, it ? FR_I32 : FR_I64, cases[c].q, cases[c].qd, cases[c].d[ax]);
            fr_tensor *ins[2] = {x, idx};
            tnode t;
            tn_init(&t, "Gather", 13, 2, ins, 0, 1);
            TN_ATTR(&t, int, "axis", cases[c].axis);
            FR_ASSERT_OK(tn_run(&t));
            gpu_check(&t, 0, cases[c].what);
            tn_free(&t);
            fr_tensor_free(idx);
        }
        fr_tensor_free(x);
    }
}

/* ---- GatherElements ---- */

static void test_gather_elements(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_elements");
    for (int trial = 0; trial < 250; trial++) {
        int big = trial % 25 == 24;
        int rank = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 60 : 5, 0.0);
        for (int k = 0; k < rank; k++)
            idims[k] = k == ax ? tt_rand_int(&r, 0, big ? 80 : 6)
                               : tt_rand_int(&r, fr_rng_uniform(&r) < 0.05 ? 0 : 1, dims[k]);
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, trial % 2 ? FR_I64 : FR_I32, rank, idims, dims[ax]), *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherElements", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    /* 210 000 elements along axis 0 and along the last axis */
    int64_t d[2] = {200, 1000};
    for (int a = 0; a < 2; a++) {
        fr_tensor *x = tt_rand_bits(&r, a ? FR_F16 : FR_F32, 2, d);
        int64_t dd[2] = {a ? 200 : 300, a ? 1050 : 700};
        fr_tensor *idx = rand_indices(&r, FR_I64, 2, dd, d[a]), *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
        TN_ATTR(&t, int, "axis", a ? -1 : 0);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "large");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
}

/* ---- GatherND ---- */

/* Indices of shape idims (last dim m) valid for data dims after b batch dims. */
static fr_tensor *nd_indices(fr_rng *r, fr_dtype it, int q, const int64_t *idims, const int64_t *dims, int b, int m)
{
    fr_tensor *idx = tt_new(it, q, idims);
    int64_t ni = fr_tensor_numel(idx);
    for (int64_t j = 0; j < ni; j++) {
        int64_t size = dims[b + j % m];
        tt_set(idx, j, (double)tt_rand_int(r, -size, size - 1));
    }
    return idx;
}

static void test_gather_nd(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_nd");
    for (int trial = 0; trial < 250; trial++) {
        int b = trial % 3 == 0 ? 1 : trial % 7 == 0 ? 2 : 0, rank = b + (int)tt_rand_int(&r, 1, 3);
        int m = (int)tt_rand_int(&r, 1, rank - b), mid = (int)tt_rand_int(&r, 0, 2), q = b + mid + 1;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 6, 0.0);
        for (int k = 0; k < b; k++) idims[k] = dims[k];
        for (int k = b; k < q - 1; k++) idims[k] = fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, 4);
        idims[q - 1] = m;
        fr_tensor *x = tt_rand_bits(&r, tt_dtypes[trial % TT_N_DTYPES], rank, dims);
        fr_tensor *idx = nd_indices(&r, trial % 2 ? FR_I64 : FR_I32, q, idims, dims, b, m), *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherND", trial % 5 == 4 ? 11 : 13, 2, ins, trial % 4 == 0 ? 2u : 0u, 1);
        if (trial % 5 != 4 && (b || trial % 2)) TN_ATTR(&t, int, "batch_dims", b);
        if (trial % 5 == 4 && b) { /* opset 11 has no batch_dims */
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(idx);
            continue;
        }
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "random");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    static const struct {
        fr_dtype dt;
        int rank, q, b;
        int64_t d[3], qd[3];
    } cases[] = {
        {FR_F32, 3, 3, 1, {16, 64, 128}, {16, 100, 1}},
        {FR_F16, 3, 2, 0, {40, 50, 61}, {3000, 2}},
        {FR_I64, 3, 3, 2, {20, 30, 40}, {20, 30, 1}},
        {FR_U8, 2, 2, 0, {500, 300}, {400, 2}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_tensor *x = tt_rand_bits(&r, cases[c].dt, cases[c].rank, cases[c].d);
        fr_tensor *idx = nd_indices(&r, FR_I64, cases[c].q, cases[c].qd, cases[c].d, cases[c].b,
                                    (int)cases[c].qd[cases[c].q - 1]);
        fr_tensor *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
        TN_ATTR(&t, int, "batch_dims", cases[c].b);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, 0, "large");
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
}

/* ---- out-of-range indices: no crash, zeros for bad elements, the device stays usable ---- */

static int all_zero(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void test_out_of_range(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_range");
    int64_t d[2] = {10, 4}, di[2] = {2, 4};
    fr_tensor *x = tt_rand_bits(&r, FR_F32, 2, d);
    for (int c = 0; c < 2; c++) {
        fr_tensor *idx = rand_indices(&r, c ? FR_I32 : FR_I64, 2, di, 10), *ins[2] = {x, idx};
        tt_set(idx, 3, 12);
        tt_set(idx, 6, -11);
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, 0, 1);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE); /* the CPU refuses; its output is allocated */
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        if (st != FR_OK && st != FR_ERR_RANGE) fprintf(stderr, "\n  Gather with bad index: %s\n", fr_last_error());
        CU_ASSERT(st == FR_OK || st == FR_ERR_RANGE);
        if (st == FR_ERR_RANGE) tn_assert_error("is out of range for axis 0 of size 10"); /* once the record is read */
        if (st == FR_OK) {
            int bad = 0;
            for (int j = 0; j < 8; j++) {
                int64_t v = fr_tensor_get_i64(idx, j);
                const char *row = (const char *)g[0]->data + j * 4 * sizeof(float);
                if (j == 3 || j == 6)
                    bad += !all_zero(row, 4 * sizeof(float));
                else
                    bad += memcmp(row, (const float *)x->data + (v < 0 ? v + 10 : v) * 4, 4 * sizeof(float)) != 0;
            }
            if (bad) fprintf(stderr, "\n  Gather with bad indices: %d rows wrong (bad rows must be zero)\n", bad);
            CU_ASSERT_EQUAL(bad, 0);
        }
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor_free(idx);
    }
    /* GatherElements and GatherND with one bad entry: the rest is still right, no crash */
    {
        fr_tensor *idx = rand_indices(&r, FR_I64, 2, d, 10), *ins[2] = {x, idx};
        tt_set(idx, 5, 10);
        tnode t;
        tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        CU_ASSERT(st == FR_OK || st == FR_ERR_RANGE);
        if (st == FR_OK) CU_ASSERT(all_zero((const char *)g[0]->data + 5 * sizeof(float), sizeof(float)));
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor_free(idx);
    }
    {
        int64_t dq[2] = {3, 2};
        fr_tensor *idx = tt_new(FR_I32, 2, dq), *ins[2] = {x, idx};
        int32_t v[6] = {1, 2, 0, 4, -3, -1}; /* the second tuple addresses column 4 of 4 */
        memcpy(idx->data, v, sizeof v);
        tnode t;
        tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        CU_ASSERT(st == FR_OK || st == FR_ERR_RANGE);
        if (st == FR_OK) {
            const float *y = (const float *)g[0]->data, *xv = (const float *)x->data;
            CU_ASSERT(memcmp(&y[0], &xv[1 * 4 + 2], 4) == 0);
            CU_ASSERT(all_zero((const char *)&y[1], 4));
            CU_ASSERT(memcmp(&y[2], &xv[7 * 4 + 3], 4) == 0);
        }
        gpu_free_outputs(&t, g);
        tn_free(&t);
        fr_tensor_free(idx);
    }
    /* GatherGrad: the bad row is dropped; the rest equals the CPU's result for the same dy
     * with that row zeroed and its index made valid */
    {
        int64_t dq[1] = {6}, dyd[2] = {6, 4};
        fr_tensor *idx = tt_new(FR_I64, 1, dq), *dy = tt_randn(&r, FR_F32, 2, dyd, 0, 1);
        int64_t v[6] = {1, 1, 12, -2, 0, 1};
        memcpy(idx->data, v, sizeof v);
        fr_tensor *ins[2] = {dy, idx};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherGrad", 1, 2, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", 2, d);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
        fr_tensor *g[TN_MAX];
        fr_status st = tn_run_gpu(&t, g);
        CU_ASSERT(st == FR_OK || st == FR_ERR_RANGE);
        tn_free(&t);
        if (st == FR_OK) {
            ((int64_t *)idx->data)[2] = 3;
            memset((float *)dy->data + 2 * 4, 0, 4 * sizeof(float));
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherGrad", 1, 2, ins, 0, 1);
            TN_ATTR(&t, ints, "shape", 2, d);
            FR_ASSERT_OK(tn_run(&t));
            double e = gpu_rel_err(g[0], t.out[0]);
            if (e > 1e-5) {
                gpu_print_case("GatherGrad with a bad index (row dropped)", &t);
                gpu_print_mismatch("output 0", g[0], t.out[0], e, 1e-5);
                CU_FAIL("GatherGrad with a bad index: mismatch");
            }
            tn_free(&t);
        }
        for (int o = 0; o < TN_MAX; o++) fr_tensor_free(g[o]);
        fr_tensor_free(idx);
        fr_tensor_free(dy);
    }
    /* the device is still fine: a normal Gather after the bad ones */
    fr_tensor *idx = rand_indices(&r, FR_I64, 2, di, 10), *ins[2] = {x, idx};
    tnode t;
    tn_init(&t, "Gather", 13, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 0, "after out-of-range runs");
    tn_free(&t);
    fr_tensor_free(idx);
    fr_tensor_free(x);
}

/* ---- scatter-adds ---- */

/* Indices drawn mostly from a few values so rows repeat (the embedding-gradient case). */
static fr_tensor *repeating_indices(fr_rng *r, fr_dtype it, int rank, const int64_t *dims, int64_t n)
{
    fr_tensor *idx = tt_new(it, rank, dims);
    int64_t cnt = fr_tensor_numel(idx), hot = n < 4 ? n : 4;
    for (int64_t j = 0; j < cnt; j++) {
        int64_t v = fr_rng_uniform(r) < 0.5 ? tt_rand_int(r, 0, hot - 1) : tt_rand_int(r, 0, n - 1);
        if (fr_rng_uniform(r) < 0.3) v -= n; /* the same rows, counted from the end */
        tt_set(idx, j, (double)v);
    }
    return idx;
}

static void test_gather_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_grad");
    for (int trial = 0; trial < 200; trial++) {
        int rank = (int)tt_rand_int(&r, 1, 4), q = (int)tt_rand_int(&r, 0, 3);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, 6, 0.05);
        tt_rand_dims(&r, q, idims, 6, 0.05);
        if (dims[ax] == 0) dims[ax] = 1;
        fr_dtype dt = trial % 3 ? FR_F32 : FR_F64;
        fr_tensor *idx = repeating_indices(&r, trial % 2 ? FR_I64 : FR_I32, q, idims, dims[ax]);
        int o = 0;
        for (int k = 0; k < ax; k++) od[o++] = dims[k];
        for (int k = 0; k < q; k++) od[o++] = idims[k];
        for (int k = ax + 1; k < rank; k++) od[o++] = dims[k];
        fr_tensor *dy = tt_randn(&r, dt, o, od, 0, 1), *ins[2] = {dy, idx};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherGrad", 1, 2, ins, trial % 4 == 0 ? 2u : 0u, 1);
        TN_ATTR(&t, ints, "shape", rank, dims);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, tol_of(dt), "random");
        tn_free(&t);
        fr_tensor_free(dy);
        fr_tensor_free(idx);
    }
}

/* The embedding gradient: [8, 512] token ids into a [V, 256] table, many ids repeated (a
 * third of the batch is 4 hot ids), float32 and float64; two GPU runs give the same bits. */
static void test_embedding_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_embedding_grad");
    static const int64_t vocab[2] = {5000, 70000};
    for (int c = 0; c < 4; c++) {
        fr_dtype dt = c % 2 ? FR_F64 : FR_F32;
        int64_t V = vocab[c / 2], D = c / 2 ? 64 : 256, qd[2] = {8, 512}, dd[3] = {8, 512, D}, shape[2] = {V, D};
        fr_tensor *idx = repeating_indices(&r, c / 2 ? FR_I32 : FR_I64, 2, qd, V);
        fr_tensor *dy = tt_randn(&r, dt, 3, dd, 0, 1), *ins[2] = {dy, idx};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherGrad", 1, 2, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", 2, shape);
        FR_ASSERT_OK(tn_run(&t));
        char label[64];
        snprintf(label, sizeof label, "embedding gradient V=%lld D=%lld", (long long)V, (long long)D);
        gpu_check(&t, tol_of(dt), label);
        fr_tensor *g1[TN_MAX], *g2[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu(&t, g1));
        FR_ASSERT_OK(tn_run_gpu(&t, g2));
        int same = memcmp(g1[0]->data, g2[0]->data, g1[0]->nbytes) == 0;
        if (!same) fprintf(stderr, "\n  %s: two GPU runs differ (not deterministic)\n", label);
        CU_ASSERT(same);
        gpu_free_outputs(&t, g1);
        gpu_free_outputs(&t, g2);
        tn_free(&t);
        fr_tensor_free(dy);
        fr_tensor_free(idx);
    }
    /* every token the same id: one run of 4096 rows into one destination row */
    int64_t V = 100, D = 300, qd[2] = {8, 512}, dd[3] = {8, 512, 300}, shape[2] = {V, D};
    fr_tensor *idx = tt_new(FR_I64, 2, qd), *dy = tt_randn(&r, FR_F32, 3, dd, 0, 1), *ins[2] = {dy, idx};
    for (int64_t j = 0; j < 8 * 512; j++) ((int64_t *)idx->data)[j] = j % 2 ? 7 : 7 - V;
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherGrad", 1, 2, ins, 0, 1);
    TN_ATTR(&t, ints, "shape", 2, shape);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, 1e-5, "all tokens one id");
    tn_free(&t);
    fr_tensor_free(dy);
    fr_tensor_free(idx);
}

static void test_gather_elements_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_elements_grad");
    for (int trial = 0; trial < 150; trial++) {
        int big = trial % 30 == 29;
        int rank = (int)tt_rand_int(&r, 1, 4);
        int axis = (int)tt_rand_int(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 50 : 5, 0.0);
        for (int k = 0; k < rank; k++)
            idims[k] = k == ax ? tt_rand_int(&r, 0, big ? 100 : 7)
                               : tt_rand_int(&r, fr_rng_uniform(&r) < 0.05 ? 0 : 1, dims[k]);
        fr_dtype dt = trial % 3 ? FR_F32 : FR_F64;
        fr_tensor *idx = repeating_indices(&r, trial % 2 ? FR_I64 : FR_I32, rank, idims, dims[ax]);
        fr_tensor *dy = tt_randn(&r, dt, rank, idims, 0, 1), *ins[2] = {dy, idx};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherElementsGrad", 1, 2, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", rank, dims);
        TN_ATTR(&t, int, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, tol_of(dt), big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(dy);
        fr_tensor_free(idx);
    }
}

static void test_gather_nd_grad(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_gather_nd_grad");
    for (int trial = 0; trial < 150; trial++) {
        int big = trial % 30 == 29;
        int b = trial % 3 == 0 ? 1 : 0, rank = b + (int)tt_rand_int(&r, 1, 3);
        int m = (int)tt_rand_int(&r, 1, rank - b), mid = (int)tt_rand_int(&r, 0, 2), q = b + mid + 1;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        tt_rand_dims(&r, rank, dims, big ? 40 : 5, 0.0);
        for (int k = 0; k < b; k++) idims[k] = dims[k];
        for (int k = b; k < q - 1; k++)
            idims[k] = fr_rng_uniform(&r) < 0.05 ? 0 : tt_rand_int(&r, 1, big ? 300 : 4);
        idims[q - 1] = m;
        int o = 0;
        for (int k = 0; k < q - 1; k++) od[o++] = idims[k];
        for (int k = b + m; k < rank; k++) od[o++] = dims[k];
        fr_dtype dt = trial % 3 ? FR_F32 : FR_F64;
        fr_tensor *idx = nd_indices(&r, trial % 2 ? FR_I64 : FR_I32, q, idims, dims, b, m);
        fr_tensor *dy = tt_randn(&r, dt, o, od, 0, 1), *ins[2] = {dy, idx};
        tnode t;
        tn_init_domain(&t, FR_DOMAIN_FP8RUN, "GatherNDGrad", 1, 2, ins, 0, 1);
        TN_ATTR(&t, ints, "shape", rank, dims);
        TN_ATTR(&t, int, "batch_dims", b);
        FR_ASSERT_OK(tn_run(&t));
        gpu_check(&t, tol_of(dt), big ? "random, large" : "random");
        tn_free(&t);
        fr_tensor_free(dy);
        fr_tensor_free(idx);
    }
}

static void test_report(void)
{
    if (!gpu_available()) return;
    printf("\n  scatter-adds: %d of %d bit-identical to the CPU (the rest within tolerance)\n", gpu_n_exact,
           gpu_n_exact + gpu_n_close);
}

static CU_TestInfo gather_tests[] = {
    {"gather_random", test_gather_random},
    {"gather_large", test_gather_large},
    {"gather_elements", test_gather_elements},
    {"gather_nd", test_gather_nd},
    {"out_of_range", test_out_of_range},
    {"gather_grad", test_gather_grad},
    {"embedding_grad", test_embedding_grad},
    {"gather_elements_grad", test_gather_elements_grad},
    {"gather_nd_grad", test_gather_nd_grad},
    {"report", test_report},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_gather", NULL, NULL, NULL, NULL, gather_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
