/* LinearCrossEntropy (ops/linear_ce.h) on the CPU against the unfused chain it replaces:
 * Linear -> SoftmaxCrossEntropy, SoftmaxCrossEntropyGrad -> LinearGradData, LinearGradWeight,
 * each run as its own node. loss, dX and dW must be the same BYTES for fp32 and bf16 precision,
 * float32 and bfloat16 X, y_dtype / dx_dtype / the loss gradient's dx_dtype float32 and
 * bfloat16, both weight layouts, int64 and int32 labels, ignored rows, a dloss other than 1
 * (the SFT weight), chunk sizes that do and do not divide the rows (1, 3, 7, all, more than
 * all). Also: finite differences of the loss against dX and dW (float32), every row ignored,
 * the loss alone (no dloss), and the errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/op_harness.h"
#include "ops/linear_ce.h"

typedef struct lce_case {
    int64_t M, K, V;
    int transB, bf16, x_bf16, y_bf16, dx_bf16, dl_bf16, i32;
    int64_t chunk;
    double p_ignore;
    float dloss;
} lce_case;

typedef struct lce_data {
    fr_tensor *x, *w, *lb, *dl;
} lce_data;

static void make_data(const lce_case *c, fr_rng *r, lce_data *d)
{
    int64_t xd[2] = {c->M, c->K}, wd[2] = {c->transB ? c->V : c->K, c->transB ? c->K : c->V};
    d->x = tt_randn(r, FR_F32, 2, xd, 0, 1);
    if (c->x_bf16) { /* the values a bfloat16 X holds, as a bfloat16 tensor */
        fr_tensor *b = tt_new(FR_BF16, 2, xd);
        for (int64_t i = 0; i < c->M * c->K; i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)d->x->data)[i]);
        fr_tensor_free(d->x);
        d->x = b;
    }
    d->w = tt_randn(r, FR_F32, 2, wd, 0, 0.7);
    d->lb = tt_new(c->i32 ? FR_I32 : FR_I64, 1, &c->M);
    for (int64_t i = 0; i < c->M; i++)
        tt_set(d->lb, i, fr_rng_uniform(r) < c->p_ignore ? -100.0 : (double)tt_rand_int(r, 0, c->V - 1));
    d->dl = tt_scalar(FR_F32, c->dloss);
}

static void free_data(lce_data *d)
{
    fr_tensor_free(d->x);
    fr_tensor_free(d->w);
    fr_tensor_free(d->lb);
    fr_tensor_free(d->dl);
}

static void lin_attrs(tnode *t, const lce_case *c)
{
    TN_ATTR(t, int, "transB", c->transB);
    TN_ATTR(t, string, "precision", c->bf16 ? "bf16" : "fp32");
}

/* run node `op` of domain ai.fp8run on ins; its outputs move to out[] */
static void run(const char *op, int n_in, fr_tensor **ins, int n_out, const lce_case *c, int which, fr_tensor **out)
{
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, n_in, ins, 0u, n_out);
    if (which == 0 || which == 3 || which == 4) lin_attrs(&t, c);
    if (which == 0 && c->y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    if (which == 3 && c->dx_bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    if (which == 2 && c->dl_bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    FR_ASSERT_OK(tn_run(&t));
    for (int o = 0; o < n_out; o++) {
        out[o] = t.out[o];
        t.out[o] = NULL;
    }
    tn_free(&t);
}

/* the unfused chain: loss, dX, dW */
static void unfused(const lce_case *c, const lce_data *d, fr_tensor **res)
{
    fr_tensor *y, *dy;
    run("Linear", 2, (fr_tensor *[]){d->x, d->w}, 1, c, 0, &y);
    run("SoftmaxCrossEntropy", 2, (fr_tensor *[]){y, d->lb}, 1, c, 1, &res[0]);
    run("SoftmaxCrossEntropyGrad", 3, (fr_tensor *[]){d->dl, y, d->lb}, 1, c, 2, &dy);
    run("LinearGradData", 2, (fr_tensor *[]){dy, d->w}, 1, c, 3, &res[1]);
    run("LinearGradWeight", 2, (fr_tensor *[]){d->x, dy}, 1, c, 4, &res[2]);
    fr_tensor_free(y);
    fr_tensor_free(dy);
}

static fr_status fused_run(const lce_case *c, const lce_data *d, int n_out, int with_dloss, fr_tensor **res)
{
    tnode t;
    fr_tensor *ins[4] = {d->x, d->w, d->lb, d->dl};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "LinearCrossEntropy", 1, with_dloss ? 4 : 3, ins, 0u, n_out);
    lin_attrs(&t, c);
    if (c->y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    if (c->dx_bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    TN_ATTR(&t, int, "chunk_rows", c->chunk);
    fr_status st = tn_run(&t);
    for (int o = 0; o < n_out; o++) {
        res[o] = t.out[o];
        t.out[o] = NULL;
    }
    tn_free(&t);
    return st;
}

static int same_bytes(const char *label, const char *what, const fr_tensor *a, const fr_tensor *b)
{
    int ok = a && b && a->dtype == b->dtype && fr_tensor_numel(a) == fr_tensor_numel(b) &&
             memcmp(a->data, b->data, (size_t)fr_tensor_numel(a) * fr_dtype_size(a->dtype)) == 0;
    if (!ok && a && b && a->dtype == b->dtype) {
        int64_t n = fr_tensor_numel(a), diff = 0, first = -1;
        size_t es = fr_dtype_size(a->dtype);
        for (int64_t i = 0; i < n; i++)
            if (memcmp((const char *)a->data + i * es, (const char *)b->data + i * es, es) != 0) {
                diff++;
                if (first < 0) first = i;
            }
        fprintf(stderr, "\n  %s: %s differs in %lld of %lld elements (first %lld)\n", label, what, (long long)diff,
                (long long)n, (long long)first);
    } else if (!ok) {
        fprintf(stderr, "\n  %s: %s missing or of another dtype\n", label, what);
    }
    return ok;
}

static int check(const lce_case *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    lce_data d;
    make_data(c, &r, &d);
    fr_tensor *a[3] = {0}, *b[3] = {0};
    unfused(c, &d, a);
    FR_ASSERT_OK(fused_run(c, &d, 3, 1, b));
    int ok = same_bytes(label, "loss", b[0], a[0]) & same_bytes(label, "dX", b[1], a[1]) &
             same_bytes(label, "dW", b[2], a[2]);
    if (ok && c->dx_bf16) ok = b[1]->dtype == FR_BF16;
    /* the loss alone (no dloss, no gradients) is the same loss */
    fr_tensor *l1 = NULL;
    FR_ASSERT_OK(fused_run(c, &d, 1, 0, &l1));
    ok &= same_bytes(label, "loss without gradients", l1, a[0]);
    fr_tensor_free(l1);
    for (int i = 0; i < 3; i++) {
        fr_tensor_free(a[i]);
        fr_tensor_free(b[i]);
    }
    free_data(&d);
    return ok;
}

static void test_bit_for_bit(void)
{
    const int64_t chunks[] = {1, 3, 7, 37, 64};
    for (int prec = 0; prec < 2; prec++)
        for (int tb = 0; tb < 2; tb++)
            for (int ci = 0; ci < 5; ci++)
                for (int v = 0; v < (prec ? 6 : 1); v++) { /* bf16: which narrowed tensors */
                    lce_case c = {37, 24, 53, tb, prec, 0, 0, 0, 0, ci & 1, chunks[ci], 0.25, ci == 2 ? 0.37f : 1.0f};
                    c.x_bf16 = v == 1 || v == 5;
                    c.y_bf16 = v == 2 || v == 5;
                    c.dx_bf16 = v == 3 || v == 5;
                    c.dl_bf16 = v == 4 || v == 5;
                    char label[200];
                    snprintf(label, sizeof label, "%s transB=%d chunk=%lld x%d y%d dx%d dl%d", prec ? "bf16" : "fp32", tb,
                             (long long)c.chunk, c.x_bf16, c.y_bf16, c.dx_bf16, c.dl_bf16);
                    CU_ASSERT(check(&c, label));
                }
    /* a larger vocabulary than rows and hidden, and hidden not a multiple of anything */
    lce_case big = {129, 13, 300, 1, 1, 1, 1, 1, 1, 0, 50, 0.1, 1.0f};
    CU_ASSERT(check(&big, "bf16 M129 K13 V300 chunk 50"));
    lce_case all = {9, 8, 11, 1, 0, 0, 0, 0, 0, 0, 4, 1.0, 1.0f}; /* every row ignored: loss 0, zero gradients */
    CU_ASSERT(check(&all, "every row ignored"));
    fr_rng r = fr_test_rng("every row ignored values");
    lce_data d;
    make_data(&all, &r, &d);
    fr_tensor *b[3];
    FR_ASSERT_OK(fused_run(&all, &d, 3, 1, b));
    CU_ASSERT_EQUAL(((float *)b[0]->data)[0], 0.0f);
    int zero = 1;
    for (int64_t i = 0; i < fr_tensor_numel(b[1]); i++) zero &= ((float *)b[1]->data)[i] == 0.0f;
    for (int64_t i = 0; i < fr_tensor_numel(b[2]); i++) zero &= ((float *)b[2]->data)[i] == 0.0f;
    CU_ASSERT(zero);
    for (int i = 0; i < 3; i++) fr_tensor_free(b[i]);
    free_data(&d);
}

/* central differences of the float32 loss against dX and dW (dloss = 1) */
static void test_finite_differences(void)
{
    for (int tb = 0; tb < 2; tb++) {
        lce_case c = {7, 5, 9, tb, 0, 0, 0, 0, 0, 0, 3, 0.2, 1.0f};
        fr_rng r = fr_test_rng(tb ? "fd transB" : "fd");
        lce_data d;
        make_data(&c, &r, &d);
        tt_set(d.lb, 0, 4.0); /* at least one counted row */
        fr_tensor *g[3];
        FR_ASSERT_OK(fused_run(&c, &d, 3, 1, g));
        const double h = 1e-2;
        double worst = 0;
        for (int which = 0; which < 2; which++) {
            fr_tensor *p = which ? d.w : d.x, *gr = g[1 + which];
            for (int64_t i = 0; i < fr_tensor_numel(p); i++) {
                float *v = (float *)p->data + i, keep = *v;
                fr_tensor *lp, *lm;
                *v = (float)(keep + h);
                FR_ASSERT_OK(fused_run(&c, &d, 1, 0, &lp));
                *v = (float)(keep - h);
                FR_ASSERT_OK(fused_run(&c, &d, 1, 0, &lm));
                *v = keep;
                const double fd = ((double)((float *)lp->data)[0] - ((float *)lm->data)[0]) / (2 * h);
                const double an = ((float *)gr->data)[i], err = fabs(fd - an) / (1e-3 + fabs(an));
                if (err > worst) worst = err;
                fr_tensor_free(lp);
                fr_tensor_free(lm);
            }
        }
        if (worst > 2e-2) fprintf(stderr, "\n  finite differences transB=%d: worst relative error %.3g\n", tb, worst);
        CU_ASSERT(worst <= 2e-2);
        for (int i = 0; i < 3; i++) fr_tensor_free(g[i]);
        free_data(&d);
    }
}

static void test_errors(void)
{
    lce_case c = {5, 4, 6, 1, 0, 0, 0, 0, 0, 0, 2, 0.0, 1.0f};
    fr_rng r = fr_test_rng("errors");
    lce_data d;
    make_data(&c, &r, &d);
    fr_tensor *o[3] = {0};
    tt_set(d.lb, 3, 6.0); /* == V */
    CU_ASSERT_EQUAL(fused_run(&c, &d, 3, 1, o), FR_ERR_RANGE);
    tn_assert_error("outside the vocabulary");
    for (int i = 0; i < 3; i++) fr_tensor_free(o[i]);
    tt_set(d.lb, 3, 1.0);
    memset(o, 0, sizeof o);
    CU_ASSERT_EQUAL(fused_run(&c, &d, 3, 0, o), FR_ERR_GRAPH); /* gradients need dloss */
    tn_assert_error("dloss");
    for (int i = 0; i < 3; i++) fr_tensor_free(o[i]);
    tnode t;
    fr_tensor *ins[4] = {d.x, d.w, d.lb, d.dl};
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "LinearCrossEntropy", 1, 4, ins, 0u, 3);
    TN_ATTR(&t, int, "transB", 1);
    TN_ATTR(&t, string, "precision", "fp8");
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_assert_error("fp8");
    tn_free(&t);
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, "LinearCrossEntropy", 1, 4, ins, 0u, 3);
    TN_ATTR(&t, int, "transB", 0); /* W [6, 4] read as [K=6, V=4]: X's last dim 4 != 6 */
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_assert_error("does not match weight");
    tn_free(&t);
    free_data(&d);
}

static void test_chunk_rows(void)
{
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(16384, 128256), 512); /* 256 MiB / (128256 x 4) = 523 -> 512 */
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(16384, 32000), 2048);
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(100, 32000), 100);
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(100000, 1 << 22), 128); /* at least 128 rows */
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(0, 10), 1);
}

static CU_TestInfo tests[] = {
    {"loss, dX, dW == the unfused chain, bit for bit", test_bit_for_bit},
    {"finite differences", test_finite_differences},
    {"errors", test_errors},
    {"chunk rows", test_chunk_rows},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"linear_ce", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
