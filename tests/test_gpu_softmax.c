/* GPU kernels of the softmax family (ops/cuda/softmax.cu, loss.cu) against the CPU kernels, on fresh
 * random inputs: Softmax / LogSoftmax on every axis under both opset conventions (opset < 13
 * flattens the trailing dims, >= 13 one axis; default axes), size-1 and empty dims, float32 and
 * float64, and shapes that take every kernel path (warp rows, 512-thread rows, vector and
 * scalar loads, strided rows of a non-last axis, vocabulary-sized rows); large logits, masked
 * (-inf) entries, all -inf, +inf and NaN rows; SoftmaxGrad / LogSoftmaxGrad (axis, flatten);
 * SoftmaxCrossEntropy(+Grad) with int64/int32 labels, ignore_index (default and custom, some
 * or all positions ignored), zero positions, V up to 131072, and out-of-range labels (the CPU
 * fails; the GPU records FR_ERR_RANGE in the device error word, reported after the run); bf16
 * logits and bf16 dlogits (dx_dtype) against the float32 GPU run on the same values.
 * Tolerances: float32 within 2e-6 relative L2 of the CPU (exp in float against the CPU's
 * double; the contract is 1e-5, which the cross-entropy gradient gets: see run_ce), float64
 * within 1e-12; non-finite values exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bf16_check.h"
#include "tests/gpu_harness.h"

#define TOL_F32 2e-6
#define TOL_F64 1e-12

static double tol_of(fr_dtype dt) { return dt == FR_F64 ? TOL_F64 : TOL_F32; }

typedef struct shp {
    int r;
    int64_t d[4];
} shp;

/* ---- Softmax / LogSoftmax ---- */

/* Forward on x; set_axis 0 leaves the opset's default. The CPU output stays in t (caller
 * frees) for the backward tests. */
static void sm_forward(tnode *t, fr_tensor *x, const char *op, int64_t opset, int axis, int set_axis, const char *note)
{
    tn_init(t, op, opset, 1, &x, 0, 1);
    if (set_axis) TN_ATTR(t, int, "axis", axis);
    FR_ASSERT_OK(tn_run(t));
    char what[200], sh[96];
    snprintf(what, sizeof what, "%s opset %lld %s x%s axis %d%s %s", op, (long long)opset, fr_dtype_name(x->dtype),
             fr_shape_str(x->rank, x->dims, sh, sizeof sh), axis, set_axis ? "" : " (default)", note);
    gpu_check(t, tol_of(x->dtype), what);
}

static void run_sm(fr_rng *r, fr_dtype dt, const char *op, int64_t opset, const shp *s, int axis, int set_axis,
                   double scale)
{
    fr_tensor *x = tt_randn(r, dt, s->r, s->d, 0.0, scale);
    tnode t;
    sm_forward(&t, x, op, opset, axis, set_axis, scale > 10 ? "(large logits)" : "");
    tn_free(&t);
    fr_tensor_free(x);
}

static const shp small_shapes[] = {
    {3, {2, 3, 4}}, {1, {5}}, {3, {3, 1, 4}}, {3, {2, 0, 3}}, {4, {4, 5, 6, 3}}, {2, {8, 1000}}, {2, {7, 1}},
};

static void test_softmax_axes(void)
{
    fr_rng r = fr_test_rng("gpu_softmax_axes");
    const char *ops[2] = {"Softmax", "LogSoftmax"};
    const int64_t opsets[3] = {11, 13, 1};
    int runs = 0;
    for (int oi = 0; oi < 2; oi++)
        for (int po = 0; po < 3; po++)
            for (size_t si = 0; si < sizeof small_shapes / sizeof small_shapes[0]; si++) {
                const shp *s = &small_shapes[si];
                fr_dtype dt = (oi + po + (int)si) % 3 == 0 ? FR_F64 : FR_F32;
                if (opsets[po] >= 13 || s->r >= 2) {
                    run_sm(&r, dt, ops[oi], opsets[po], s, 0, 0, 3.0);
                    runs++;
                }
                for (int axis = -s->r; axis < s->r; axis++) {
                    if (opsets[po] == 1 && axis < 0) continue;
                    run_sm(&r, dt, ops[oi], opsets[po], s, axis, 1, 3.0);
                    runs++;
                }
            }
    CU_ASSERT(runs > 100);
}

/* every kernel path at real sizes */
static void test_softmax_large(void)
{
    fr_rng r = fr_test_rng("gpu_softmax_large");
    static const struct {
        shp s;
        int64_t opset;
        int axis;
    } cases[] = {
        {{2, {64, 32768}}, 13, -1},   /* 512-thread rows, vector loads */
        {{2, {16, 50257}}, 13, -1},   /* 512-thread rows, scalar loads (odd length) */
        {{2, {3000, 100}}, 13, -1},   /* warp rows, vector loads */
        {{2, {1000, 77}}, 13, -1},    /* warp rows, scalar loads */
        {{3, {8, 1000, 16}}, 13, 1},  /* a non-last axis: strided rows */
        {{3, {4, 2049, 3}}, 13, 1},
        {{3, {16, 8, 512}}, 11, 1},   /* flattened trailing dims: rows of 4096 */
        {{2, {2, 131072}}, 13, 1},
        {{4, {2, 12, 128, 128}}, 13, -1}, /* attention scores */
        {{2, {70000, 8}}, 13, 0},     /* long strided rows, few of them */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int lg = 0; lg < 2; lg++) {
            fr_dtype dt = (c + (size_t)lg) % 4 == 3 ? FR_F64 : FR_F32;
            run_sm(&r, dt, lg ? "LogSoftmax" : "Softmax", cases[c].opset, &cases[c].s, cases[c].axis, 1,
                   c % 3 == 0 ? 30.0 : 2.0);
        }
    /* large logits: the max shift keeps exp() finite */
    const shp s1 = {2, {50, 3000}};
    for (int lg = 0; lg < 2; lg++) {
        run_sm(&r, FR_F32, lg ? "LogSoftmax" : "Softmax", 13, &s1, -1, 1, 400.0);
        run_sm(&r, FR_F32, lg ? "LogSoftmax" : "Softmax", 11, &small_shapes[4], 2, 1, 400.0);
    }
}

/* -inf entries (masks), all -inf rows, +inf and NaN rows, on warp and block rows and columns */
static void test_softmax_nonfinite(void)
{
    fr_rng r = fr_test_rng("gpu_softmax_nonfinite");
    const int64_t lens[3] = {4, 300, 5000};
    for (int li = 0; li < 3; li++) {
        int64_t d[2] = {12, lens[li]};
        fr_tensor *x = tt_randn(&r, FR_F32, 2, d, 0.0, 2.0);
        float *xv = x->data;
        const int64_t L = lens[li];
        for (int64_t j = 0; j < L; j++) xv[0 * L + j] = -INFINITY;        /* all -inf */
        for (int64_t j = 1; j < L; j += 2) xv[1 * L + j] = -INFINITY;     /* masked half */
        xv[2 * L + L / 2] = INFINITY;                                      /* +inf */
        xv[3 * L + 1] = NAN;                                               /* NaN */
        for (int64_t j = 1; j < L; j++) xv[4 * L + j] = -INFINITY;        /* one finite */
        xv[5 * L] = -INFINITY;                                             /* first masked */
        for (int64_t j = L / 2; j < L; j++) xv[6 * L + j] = -INFINITY;    /* causal-like */
        for (int lg = 0; lg < 2; lg++)
            for (int legacy = 0; legacy < 2; legacy++) {
                tnode t;
                sm_forward(&t, x, lg ? "LogSoftmax" : "Softmax", legacy ? 11 : 13, legacy ? 1 : -1, 1,
                           "(non-finite rows)");
                tn_free(&t);
                /* the same values along a non-last axis */
                if (!legacy) {
                    sm_forward(&t, x, lg ? "LogSoftmax" : "Softmax", 13, 0, 1, "(non-finite, axis 0)");
                    tn_free(&t);
                }
            }
        fr_tensor_free(x);
    }
    /* a causal mask over attention scores */
    int64_t da[3] = {4, 256, 256};
    fr_tensor *x = tt_randn(&r, FR_F32, 3, da, 0.0, 3.0);
    float *xv = x->data;
    for (int64_t h = 0; h < 4; h++)
        for (int64_t i = 0; i < 256; i++)
            for (int64_t j = i + 1; j < 256; j++) xv[(h * 256 + i) * 256 + j] = -INFINITY;
    tnode t;
    sm_forward(&t, x, "Softmax", 13, -1, 1, "(causal mask)");
    tn_free(&t);
    fr_tensor_free(x);
}

/* ---- SoftmaxGrad / LogSoftmaxGrad ---- */

static void run_smg(fr_rng *r, fr_dtype dt, int lg, int legacy, const shp *s, int axis)
{
    fr_tensor *x = tt_randn(r, dt, s->r, s->d, 0.0, 2.0);
    tnode f;
    tn_init(&f, lg ? "LogSoftmax" : "Softmax", legacy ? 11 : 13, 1, &x, 0, 1);
    TN_ATTR(&f, int, "axis", axis);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *dy = tt_randn(r, dt, s->r, s->d, 0.0, 1.0);
    fr_tensor *ins[2] = {dy, f.out[0]};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, lg ? "LogSoftmaxGrad" : "SoftmaxGrad", 1, 2, ins, 0, 1);
    int a = axis < 0 ? axis + s->r : axis;
    TN_ATTR(&t, int, "axis", a);
    if (legacy) TN_ATTR(&t, int, "flatten", 1);
    FR_ASSERT_OK(tn_run(&t));
    char what[200], sh[96];
    snprintf(what, sizeof what, "%s %s y%s axis %d flatten=%d", lg ? "LogSoftmaxGrad" : "SoftmaxGrad",
             fr_dtype_name(dt), fr_shape_str(s->r, s->d, sh, sizeof sh), a, legacy);
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    tn_free(&f);
    fr_tensor_free(x);
    fr_tensor_free(dy);
}

static void test_softmax_grad(void)
{
    fr_rng r = fr_test_rng("gpu_softmax_grad");
    int runs = 0;
    for (size_t si = 0; si < sizeof small_shapes / sizeof small_shapes[0]; si++) {
        const shp *s = &small_shapes[si];
        for (int axis = 0; axis < s->r; axis++)
            for (int lg = 0; lg < 2; lg++)
                for (int legacy = 0; legacy < 2; legacy++) {
                    run_smg(&r, (lg + legacy + axis) % 3 == 0 ? FR_F64 : FR_F32, lg, legacy, s, axis);
                    runs++;
                }
    }
    static const shp big[] = {{2, {64, 32768}}, {2, {16, 50257}}, {2, {3000, 100}}, {2, {1000, 77}},
                              {3, {8, 1000, 16}}, {4, {2, 12, 128, 128}}};
    for (size_t b = 0; b < sizeof big / sizeof big[0]; b++)
        for (int lg = 0; lg < 2; lg++) {
            int axis = big[b].r == 3 ? 1 : -1;
            run_smg(&r, b == 2 ? FR_F64 : FR_F32, lg, 0, &big[b], axis);
            runs++;
        }
    run_smg(&r, FR_F32, 1, 1, &big[5], 1); /* flatten: rows of 12 * 128 * 128 */
    CU_ASSERT(runs > 50);
}

/* ---- SoftmaxCrossEntropy (+Grad) ---- */

/* logits [lead..., V]; labels random in [0, V) with a fraction `p_ignore` set to ignore */
static void run_ce(fr_rng *r, fr_dtype dt, fr_dtype lbt, int rank, const int64_t *d, double p_ignore, int64_t ignore,
                   int set_ignore, double scale)
{
    fr_tensor *lg = tt_randn(r, dt, rank, d, 0.0, scale);
    const int64_t V = d[rank - 1];
    fr_tensor *lb = tt_new(lbt, rank - 1, d);
    const int64_t rows = fr_tensor_numel(lb);
    for (int64_t i = 0; i < rows; i++)
        tt_set(lb, i, fr_rng_uniform(r) < p_ignore ? (double)ignore : (double)tt_rand_int(r, 0, V - 1));
    char sh[96], what[256];
    fr_shape_str(rank, d, sh, sizeof sh);
    fr_tensor *ins[2] = {lg, lb};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropy", 1, 2, ins, 0, 1);
    if (set_ignore) TN_ATTR(&t, int, "ignore_index", ignore);
    FR_ASSERT_OK(tn_run(&t));
    snprintf(what, sizeof what, "SoftmaxCrossEntropy %s logits%s labels %s ignore_index=%lld (p=%.2f)",
             fr_dtype_name(dt), sh, fr_dtype_name(lbt), (long long)ignore, p_ignore);
    gpu_check(&t, tol_of(dt), what);
    tn_free(&t);
    fr_tensor *dl = tt_scalar(dt, 0.5 + fr_rng_uniform(r));
    fr_tensor *gins[3] = {dl, lg, lb};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropyGrad", 1, 3, gins, 0, 1);
    if (set_ignore) TN_ATTR(&t, int, "ignore_index", ignore);
    FR_ASSERT_OK(tn_run(&t));
    snprintf(what, sizeof what, "SoftmaxCrossEntropyGrad %s logits%s labels %s ignore_index=%lld (p=%.2f)",
             fr_dtype_name(dt), sh, fr_dtype_name(lbt), (long long)ignore, p_ignore);
    /* float32: the contract's 1e-5. dlogits = p - onehot nearly cancels where the label's
       logit dominates its row, so a few short rows (a [1, 5] case with logits at N(0, 4)) can
       have a norm small enough that float32 exp's rounding is 5e-6 of it (seen on an H200) */
    gpu_check(&t, dt == FR_F64 ? TOL_F64 : 1e-5, what);
    tn_free(&t);
    fr_tensor_free(dl);
    fr_tensor_free(lg);
    fr_tensor_free(lb);
}

static void test_cross_entropy(void)
{
    fr_rng r = fr_test_rng("gpu_cross_entropy");
    static const shp shapes[] = {{2, {1, 5}},     {2, {7, 1000}},   {3, {4, 75, 2048}}, {2, {33, 2049}},
                                 {2, {300, 32768}}, {3, {2, 37, 50257}}, {2, {8, 131072}}, {2, {0, 10}},
                                 {2, {5000, 64}},  {1, {9}}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        fr_dtype dt = s % 4 == 1 ? FR_F64 : FR_F32, lbt = s % 2 ? FR_I32 : FR_I64;
        run_ce(&r, dt, lbt, shapes[s].r, shapes[s].d, 0.0, -100, 0, 2.0);
        run_ce(&r, dt, lbt == FR_I32 ? FR_I64 : FR_I32, shapes[s].r, shapes[s].d, 0.3, -100, s % 2, 4.0);
        if (shapes[s].d[shapes[s].r - 1] > 3) /* a custom ignore_index inside the vocabulary */
            run_ce(&r, dt, lbt, shapes[s].r, shapes[s].d, 0.2, 3, 1, 1.0);
        run_ce(&r, dt, lbt, shapes[s].r, shapes[s].d, 1.0, -1, 1, 1.0); /* all ignored: loss 0 */
    }
}

/* bfloat16 logits (a narrowed LM head) and dx_dtype bfloat16: the loss and float32 dlogits
 * equal the float32 run on the same values bit for bit (same per-thread arithmetic), and bf16
 * dlogits are exactly that run's dlogits rounded to nearest even; the float32 run is the one
 * test_cross_entropy checks against the CPU. */
static void test_cross_entropy_bf16(void)
{
    fr_rng r = fr_test_rng("gpu_cross_entropy_bf16");
    static const shp shapes[] = {{2, {7, 1000}},  {3, {4, 75, 2048}}, {2, {33, 2049}}, {2, {300, 32768}},
                                 {2, {5000, 64}}, {2, {3, 128256}},   {2, {9, 2056}}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rank = shapes[s].r;
        const int64_t *d = shapes[s].d, V = d[rank - 1];
        fr_tensor *lf = tt_randn(&r, FR_F32, rank, d, 0.0, 3.0), *lb = bc_bf16_pair(lf); /* lf: lb's twin */
        fr_tensor *lab = tt_new(FR_I64, rank - 1, d), *dl = tt_scalar(FR_F32, 0.5 + fr_rng_uniform(&r));
        for (int64_t i = 0; i < fr_tensor_numel(lab); i++)
            tt_set(lab, i, fr_rng_uniform(&r) < 0.1 ? -100.0 : (double)tt_rand_int(&r, 0, V - 1));
        fr_tensor *out[6][TN_MAX];
        tnode t[6];
        for (int k = 0; k < 6; k++) { /* 0, 1: forward f32 / bf16; 2..5: grad (f32|bf16 logits) x (f32|bf16 dx) */
            fr_tensor *lg = k % 2 ? lb : lf, *ins[2] = {lg, lab}, *gins[3] = {dl, lg, lab};
            if (k < 2) tn_init_domain(&t[k], FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropy", 1, 2, ins, 0, 1);
            else tn_init_domain(&t[k], FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropyGrad", 1, 3, gins, 0, 1);
            if (k >= 4) TN_ATTR(&t[k], string, "dx_dtype", "bfloat16");
            FR_ASSERT_OK(tn_run(&t[k]));
            FR_ASSERT_OK(tn_run_gpu(&t[k], out[k]));
        }
        char sh[96];
        fr_shape_str(rank, d, sh, sizeof sh);
        const int64_t n = fr_tensor_numel(lf);
        CU_ASSERT_EQUAL(out[1][0]->dtype, FR_F32);
        int same_loss = memcmp(out[0][0]->data, out[1][0]->data, 4) == 0;
        int same_dx = out[3][0]->dtype == FR_F32 && memcmp(out[2][0]->data, out[3][0]->data, (size_t)n * 4) == 0;
        int64_t off = 0;
        for (int k = 4; k < 6; k++) {
            CU_ASSERT_EQUAL_FATAL(out[k][0]->dtype, FR_BF16);
            off += bc_round_diff("bf16 dlogits", out[k][0], out[2][0], NULL);
        }
        if (!same_loss || !same_dx || off)
            printf("\n  logits %s: bf16 loss %s, bf16-logit dlogits %s, %lld bf16 dlogits differ from the rounding", sh,
                   same_loss ? "same" : "DIFFERS", same_dx ? "same" : "DIFFER", (long long)off);
        CU_ASSERT(same_loss);
        CU_ASSERT(same_dx);
        CU_ASSERT_EQUAL(off, 0);
        for (int k = 0; k < 6; k++) {
            gpu_free_outputs(&t[k], out[k]);
            tn_free(&t[k]);
        }
        fr_tensor_free(lf);
        fr_tensor_free(lb);
        fr_tensor_free(lab);
        fr_tensor_free(dl);
    }
}

/* Non-finite logits on the long rows (float statistics) and the generic ones: all -inf, masked
 * entries (the label's among them), +inf, NaN, one finite entry; loss and dlogits as the CPU's,
 * non-finite values exactly. */
static void test_cross_entropy_nonfinite(void)
{
    fr_rng r = fr_test_rng("gpu_cross_entropy_nonfinite");
    const int64_t lens[3] = {3000, 4096, 2049}; /* long rows of 8-element units, and not */
    for (int li = 0; li < 3; li++) {
        const int64_t L = lens[li];
        int64_t d[2] = {9, L};
        fr_tensor *x = tt_randn(&r, FR_F32, 2, d, 0.0, 2.0), *lb = tt_new(FR_I64, 1, d);
        float *xv = x->data;
        for (int64_t j = 0; j < L; j++) xv[0 * L + j] = -INFINITY;      /* all -inf */
        for (int64_t j = 1; j < L; j += 2) xv[1 * L + j] = -INFINITY;   /* masked half, label masked */
        xv[2 * L + L / 2] = INFINITY;                                   /* +inf */
        xv[3 * L + 1] = NAN;                                            /* NaN */
        for (int64_t j = 1; j < L; j++) xv[4 * L + j] = -INFINITY;      /* one finite, the label */
        for (int64_t j = 0; j < L - 40; j++) xv[5 * L + j] = -INFINITY; /* finite only in the last trip */
        for (int64_t j = L / 2; j < L; j++) xv[6 * L + j] = -INFINITY;  /* causal-like */
        xv[7 * L + 5] = 80.f;                                           /* a large logit (exp overflows float) */
        const int64_t labels[9] = {3, 1, 7, 0, 0, L - 1, 2, 5, 6};
        for (int i = 0; i < 9; i++) tt_set(lb, i, (double)labels[i]);
        /* rows 4.. have finite losses: their mean is a real check of the forward's statistics
         * (the mean over all rows is NaN) */
        int64_t d4[2] = {5, L};
        fr_tensor *x4 = tt_new(FR_F32, 2, d4), *lb4 = tt_new(FR_I64, 1, d4);
        memcpy(x4->data, xv + 4 * L, (size_t)(5 * L) * sizeof(float));
        for (int i = 0; i < 5; i++) tt_set(lb4, i, (double)labels[4 + i]);
        fr_tensor *dl = tt_scalar(FR_F32, 0.75);
        for (int k = 0; k < 4; k++) {
            const int grad = k % 2;
            fr_tensor *xs = k < 2 ? x : x4, *ls = k < 2 ? lb : lb4;
            fr_tensor *ins[2] = {xs, ls}, *gins[3] = {dl, xs, ls};
            tnode t;
            const char *op = grad ? "SoftmaxCrossEntropyGrad" : "SoftmaxCrossEntropy";
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, grad ? 3 : 2, grad ? gins : ins, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            if (k == 2) CU_ASSERT(isfinite(((const float *)t.out[0]->data)[0]));
            char what[128];
            snprintf(what, sizeof what, "%s %s rows of %lld", op, k < 2 ? "non-finite" : "finite-loss", (long long)L);
            gpu_check(&t, TOL_F32, what);
            tn_free(&t);
        }
        fr_tensor_free(x4);
        fr_tensor_free(lb4);
        fr_tensor_free(dl);
        fr_tensor_free(x);
        fr_tensor_free(lb);
    }
}

/* A label outside [0, V): FR_ERR_RANGE on the CPU; the kernels record it in the device error
 * word (and go on with NaN), which fr_cuda_run_node reads after synchronizing: the same status,
 * naming the node. The word is cleared, so the next run is fine. */
static void test_cross_entropy_bad_label(void)
{
    fr_rng r = fr_test_rng("gpu_cross_entropy_bad");
    int64_t d[2] = {6, 3000};
    fr_tensor *lg = tt_randn(&r, FR_F32, 2, d, 0, 1);
    fr_tensor *lb = tt_new(FR_I64, 1, d);
    fr_tensor *dl = tt_scalar(FR_F32, 1.0);
    for (int grad = 0; grad < 2; grad++)
        for (int bad = 0; bad < 2; bad++) {
            for (int i = 0; i < 6; i++) tt_set(lb, i, i == 2 ? (bad ? 3000 : -5) : i);
            fr_tensor *ins[2] = {lg, lb}, *gins[3] = {dl, lg, lb};
            tnode t;
            const char *op = grad ? "SoftmaxCrossEntropyGrad" : "SoftmaxCrossEntropy";
            tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, grad ? 3 : 2, grad ? gins : ins, 0, 1);
            CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
            CU_ASSERT_PTR_NOT_NULL_FATAL(t.out[0]);
            fr_tensor *g[TN_MAX];
            fr_status st = tn_run_gpu(&t, g);
            if (st != FR_ERR_RANGE)
                fprintf(stderr, "\n  %s with label %d: GPU gave %s (%s), want FR_ERR_RANGE\n", op, bad ? 3000 : -5,
                        fr_status_name(st), fr_last_error());
            CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
            tn_assert_error("out of range");
            gpu_free_outputs(&t, g);
            tn_free(&t);
        }
    /* the error word was cleared */
    for (int i = 0; i < 6; i++) tt_set(lb, i, i);
    fr_tensor *ins[2] = {lg, lb};
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "SoftmaxCrossEntropy", 1, 2, ins, 0, 1);
    FR_ASSERT_OK(tn_run(&t));
    gpu_check(&t, TOL_F32, "SoftmaxCrossEntropy after a device error");
    tn_free(&t);
    fr_tensor_free(dl);
    fr_tensor_free(lg);
    fr_tensor_free(lb);
}

static CU_TestInfo tests[] = {
    {"Softmax/LogSoftmax all axes, both opset conventions", test_softmax_axes},
    {"Softmax/LogSoftmax at real sizes (every kernel path)", test_softmax_large},
    {"Softmax/LogSoftmax non-finite rows", test_softmax_nonfinite},
    {"SoftmaxGrad/LogSoftmaxGrad", test_softmax_grad},
    {"SoftmaxCrossEntropy(+Grad)", test_cross_entropy},
    {"SoftmaxCrossEntropy(+Grad) label out of range", test_cross_entropy_bad_label},
    {"SoftmaxCrossEntropy(+Grad) non-finite logits", test_cross_entropy_nonfinite},
    {"SoftmaxCrossEntropy(+Grad) on bf16 logits, dx_dtype bf16 == the float32 run", test_cross_entropy_bf16},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"gpu_softmax", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return gpu_test_main(suites);
}
