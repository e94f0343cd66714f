/* Linear-family nodes over float32 and bfloat16 copies of the same values (linear_pair.h). */
#include "tests/linear_pair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/linear.h"

int lp_is_fp8(const lp_case *c) { return strcmp(c->prec, "fp8") == 0; }
int lp_is_block(const lp_case *c) { return lp_is_fp8(c) && c->recipe && strcmp(c->recipe, "block") == 0; }
int lp_is_delayed(const lp_case *c) { return lp_is_fp8(c) && (!c->recipe || strcmp(c->recipe, "delayed") == 0); }

static uint32_t bits_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

/* f's values truncated to bfloat16 in place; returns the bfloat16 tensor of the same values */
static fr_tensor *to_bf16_values(fr_tensor *f)
{
    fr_tensor *b = tt_new(FR_BF16, f->rank, f->dims);
    float *fv = f->data;
    uint16_t *bv = b->data;
    for (int64_t i = 0; i < fr_tensor_numel(f); i++) {
        uint32_t u = bits_of(fv[i]) & 0xFFFF0000u;
        memcpy(&fv[i], &u, 4);
        bv[i] = (uint16_t)(u >> 16);
    }
    return b;
}

static float amax(const fr_tensor *t)
{
    float m = 0;
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) m = fmaxf(m, fabsf(((const float *)t->data)[i]));
    return m;
}

static fr_tensor *scalar(float v)
{
    int64_t one = 1;
    fr_tensor *t = tt_new(FR_F32, 1, &one);
    ((float *)t->data)[0] = v;
    return t;
}

void lp_make(lp_data *d, const lp_case *c, fr_rng *r)
{
    memset(d, 0, sizeof *d);
    int64_t xd[3] = {c->lead0, c->lead1, c->K}, yd[3] = {c->lead0, c->lead1, c->N};
    int rank = c->lead1 ? 3 : 2;
    if (!c->lead1) {
        xd[1] = c->K;
        yd[1] = c->N;
    }
    int64_t wd[2] = {c->transB ? c->N : c->K, c->transB ? c->K : c->N};
    d->M = c->lead0 * (c->lead1 ? c->lead1 : 1);
    d->xf = tt_randn(r, FR_F32, rank, xd, 0, 1.5);
    d->dyf = tt_randn(r, FR_F32, rank, yd, 0, 0.01);
    d->w = tt_randn(r, FR_F32, 2, wd, 0, 0.05);
    d->b = tt_randn(r, FR_F32, 1, &c->N, 0, 1);
    d->xb = to_bf16_values(d->xf);
    d->dyb = to_bf16_values(d->dyf);
    if (lp_is_delayed(c)) {
        float ax = amax(d->xf), aw = amax(d->w), ay = amax(d->dyf);
        float dmax = c->fmt && strcmp(c->fmt, "e4m3") == 0 ? 448.0f : 57344.0f;
        d->sx = scalar(ax > 0 ? 448.0f / ax * 1.7f : 3.0f);
        d->sw = scalar(aw > 0 ? 448.0f / aw * 0.5f : 5.0f);
        d->sdy = scalar(ay > 0 ? dmax / ay * 0.9f : 1000.0f);
    }
}

void lp_free(lp_data *d)
{
    fr_tensor *all[] = {d->xf, d->xb, d->dyf, d->dyb, d->w, d->b, d->sx, d->sw, d->sdy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
    memset(d, 0, sizeof *d);
}

static void set_attrs(tnode *t, const lp_case *c)
{
    TN_ATTR(t, int, "transB", c->transB);
    TN_ATTR(t, string, "precision", c->prec);
    if (c->recipe) TN_ATTR(t, string, "recipe", c->recipe);
    if (c->fmt) TN_ATTR(t, string, "fp8_format", c->fmt);
    TN_ATTR(t, string, "state_prefix", "fp8_state/lp");
}

const char *const *lp_init(tnode *t, lp_kind kind, const lp_case *c, const lp_data *d, int x_bf, int y_bf,
                           int narrow, fr_tensor *saved, fr_tensor *saved_sinv)
{
    static const char *const fnames[5] = {"Y", "Xq", "Xq_scale_inv", "amax_x", "amax_w"};
    static const char *const dnames[4] = {"dX", "amax_dy", "dYq", "dYq_scale_inv"};
    static const char *const wnames[2] = {"dW", "amax_dy"};
    int fp8 = lp_is_fp8(c), dl = lp_is_delayed(c);
    fr_tensor *x = x_bf ? d->xb : d->xf, *dy = y_bf ? d->dyb : d->dyf;
    if (kind == LP_FWD) {
        fr_tensor *b = c->transB && !narrow ? d->b : NULL;
        fr_tensor *in[6] = {x, d->w, b, d->sx, d->sw, d->sdy};
        tn_init_domain(t, FR_DOMAIN_FP8RUN, "Linear", 1, dl ? 6 : b ? 3 : 2, in, 0, fp8 ? 5 : 2);
        set_attrs(t, c);
        if (narrow) TN_ATTR(t, string, "y_dtype", "bfloat16");
        return fnames;
    }
    if (kind == LP_DGRAD) {
        fr_tensor *in[4] = {dy, d->w, d->sw, d->sdy};
        tn_init_domain(t, FR_DOMAIN_FP8RUN, "LinearGradData", 1, dl ? 4 : 2, in, 0, fp8 && lp_is_block(c) ? 2 : fp8 ? 4 : 3);
        if (!fp8) tn_omit_output(t, 1); /* bf16: dX and dY's bf16 copy */
        set_attrs(t, c);
        if (narrow) TN_ATTR(t, string, "dx_dtype", "bfloat16");
        return dnames;
    }
    fr_tensor *xs = saved ? saved : x, *xsc = saved ? saved_sinv : d->sx;
    fr_tensor *in[4] = {xs, dy, xsc, d->sdy};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "LinearGradWeight", 1, dl ? 4 : saved ? 3 : 2, in, 0, fp8 ? 2 : 1);
    set_attrs(t, c);
    return wnames;
}

int lp_same(const char *label, const char *what, const fr_tensor *a, const fr_tensor *b)
{
    if (!a && !b) return 1;
    int ok = a && b && a->dtype == b->dtype && a->rank == b->rank && a->nbytes == b->nbytes;
    for (int i = 0; ok && i < a->rank; i++) ok = a->dims[i] == b->dims[i];
    if (ok && a->nbytes && memcmp(a->data, b->data, a->nbytes) != 0) {
        size_t i = 0;
        const uint8_t *pa = a->data, *pb = b->data;
        while (pa[i] == pb[i]) i++;
        fprintf(stderr, "\n  %s: %s differs from byte %zu on (of %zu)\n", label, what, i, a->nbytes);
        return 0;
    }
    if (!ok)
        fprintf(stderr, "\n  %s: %s missing or of another dtype / shape (%s vs %s)\n", label, what,
                a ? fr_dtype_name(a->dtype) : "none", b ? fr_dtype_name(b->dtype) : "none");
    return ok;
}

/* round to nearest even on the bits (finite values; NaN kept a quiet NaN) */
static uint16_t ref_round_bf16(float v)
{
    uint32_t u = bits_of(v);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

int64_t lp_bf16_of(const fr_tensor *bf, const fr_tensor *f, double abs_tol, int64_t *near)
{
    *near = 0;
    if (!bf || !f || bf->dtype != FR_BF16 || f->dtype != FR_F32 || fr_tensor_numel(bf) != fr_tensor_numel(f))
        return -1;
    int64_t bad = 0;
    const uint16_t *b = bf->data;
    const float *fv = f->data;
    for (int64_t i = 0; i < fr_tensor_numel(f); i++) {
        uint16_t want = ref_round_bf16(fv[i]);
        if (b[i] == want) continue;
        bad++;
        uint32_t u = (uint32_t)b[i] << 16;
        float got;
        memcpy(&got, &u, 4);
        int ulp1 = (b[i] & 0x8000) == (want & 0x8000) && abs((int)(b[i] & 0x7FFF) - (int)(want & 0x7FFF)) == 1;
        if (ulp1 || fabs((double)got - fv[i]) <= abs_tol) (*near)++;
    }
    return bad;
}
