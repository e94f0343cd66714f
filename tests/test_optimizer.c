/* Optimizers (AdamW, SGD), gradient clipping and accumulation, learning-rate schedules.
 * References: the textbook update rules in double written here (tolerance 1e-6 relative to
 * each element's magnitude bound), and PyTorch's own results (tools/ref_optimizer.py fixtures,
 * torch 1.13 CPU: bit-exact for the optimizers; with clipping, 1e-6 relative to the element or,
 * for elements smaller than their tensor's RMS, to that RMS). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/optimizer.h"

#define STEPS 5
#define TOL 1e-6

/* ---- a set of test parameters: shapes cover matrices, rank 3, 1-D, scalar, and empty ---- */

typedef struct {
    int n;
    fr_opt_param p[8];
    float *data[8], *grad[8];
    int64_t numel[8];
} pset;

static void pset_init(pset *s, int n, const int *ranks, const int64_t (*dims)[4], fr_rng *r)
{
    static const char *names[] = {"w.weight", "w.bias", "emb", "norm.g", "conv", "empty", "s", "x"};
    memset(s, 0, sizeof *s);
    s->n = n;
    for (int i = 0; i < n; i++) {
        fr_opt_param *p = &s->p[i];
        p->name = names[i];
        p->rank = ranks[i];
        int64_t k = 1;
        for (int d = 0; d < ranks[i]; d++) {
            p->dims[d] = dims[i][d];
            k *= dims[i][d];
        }
        s->numel[i] = k;
        s->data[i] = malloc((size_t)(k ? k : 1) * sizeof(float));
        s->grad[i] = malloc((size_t)(k ? k : 1) * sizeof(float));
        fr_rng_fill_normal(r, s->data[i], k, 1.0f);
        p->data = s->data[i];
        p->grad = s->grad[i];
        p->decay = FR_DECAY_AUTO;
    }
}

static void pset_free(pset *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->data[i]);
        free(s->grad[i]);
    }
}

static const int std_ranks[] = {2, 1, 2, 1, 3, 2, 0};
static const int64_t std_dims[][4] = {{17, 9}, {9}, {11, 4}, {4}, {3, 1, 5}, {0, 4}, {0}};
#define STD_N 7

/* |x - ref| <= TOL * bound, where bound >= |ref| is a magnitude bound on the computation
 * (sums of absolute values of the terms), so cancellation does not make the test flaky. */
static int close_to(float x, double ref, double bound)
{
    if (isnan(x) || isnan(ref)) return 0;
    return fabs((double)x - ref) <= TOL * (bound > fabs(ref) ? bound : fabs(ref)) + 1e-30;
}

/* ---- AdamW vs a double reference ---- */

static void run_adamw_vs_double(double wd, int decay_1d, fr_opt_decay force0, fr_opt_decay force1)
{
    fr_rng r = fr_test_rng("adamw_double");
    pset s;
    pset_init(&s, STD_N, std_ranks, std_dims, &r);
    s.p[0].decay = force0;
    s.p[1].decay = force1;
    fr_opt_config c = fr_opt_config_adamw();
    c.weight_decay = wd;
    c.beta1 = 0.9;
    c.beta2 = 0.95;
    c.eps = 1e-8;
    c.decay_1d = decay_1d;
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, s.p, s.n, &o));
    CU_ASSERT_EQUAL(fr_optimizer_state_count(o), 2);

    double *P[8], *M[8], *V[8], *PB[8], *MB[8];
    for (int i = 0; i < s.n; i++) {
        size_t k = (size_t)(s.numel[i] ? s.numel[i] : 1);
        P[i] = calloc(k, sizeof(double));
        M[i] = calloc(k, sizeof(double));
        V[i] = calloc(k, sizeof(double));
        PB[i] = calloc(k, sizeof(double));
        MB[i] = calloc(k, sizeof(double));
        for (int64_t j = 0; j < s.numel[i]; j++) P[i][j] = s.data[i][j];
    }
    int decays[8];
    for (int i = 0; i < s.n; i++) {
        fr_opt_decay d = s.p[i].decay;
        decays[i] = d == FR_DECAY_ON || (d == FR_DECAY_AUTO && (s.p[i].rank >= 2 || decay_1d));
        CU_ASSERT_EQUAL(fr_optimizer_param_decays(o, i), decays[i]);
    }
    for (int t = 1; t <= STEPS; t++) {
        double lr = 1e-3 * (1.0 + fr_rng_uniform(&r));
        for (int i = 0; i < s.n; i++) fr_rng_fill_normal(&r, s.grad[i], s.numel[i], 0.3f * (float)(i + 1));
        FR_ASSERT_OK(fr_optimizer_step(o, lr));
        CU_ASSERT_EQUAL(fr_optimizer_step_count(o), t);
        double bc1 = 1 - pow(0.9, t), bc2 = 1 - pow(0.95, t);
        int bad = 0;
        for (int i = 0; i < s.n; i++) {
            float *m = fr_optimizer_state(o, i, 0), *v = fr_optimizer_state(o, i, 1);
            for (int64_t j = 0; j < s.numel[i]; j++) {
                double g = s.grad[i][j];
                double keep = decays[i] ? 1 - lr * wd : 1.0;
                P[i][j] *= keep;
                PB[i][j] = fabs(P[i][j]);
                M[i][j] = 0.9 * M[i][j] + 0.1 * g;
                MB[i][j] = 0.9 * MB[i][j] + 0.1 * fabs(g);
                V[i][j] = 0.95 * V[i][j] + 0.05 * g * g;
                double den = sqrt(V[i][j]) / sqrt(bc2) + 1e-8;
                double upd = lr / bc1 * M[i][j] / den;
                P[i][j] -= upd;
                /* the parameter's bound: its own magnitude plus the update's, in terms of MB */
                double pb = PB[i][j] + lr / bc1 * MB[i][j] / den;
                if (!close_to(s.data[i][j], P[i][j], pb) || !close_to(m[j], M[i][j], MB[i][j]) ||
                    !close_to(v[j], V[i][j], V[i][j])) {
                    if (!bad)
                        fprintf(stderr, "\n  AdamW step %d %s[%lld]: p %.9g vs %.9g, m %.9g vs %.9g, v %.9g vs %.9g\n",
                                t, s.p[i].name, (long long)j, s.data[i][j], P[i][j], m[j], M[i][j], v[j], V[i][j]);
                    bad++;
                }
                /* carry the float result forward so errors do not compound between steps */
                P[i][j] = s.data[i][j];
                M[i][j] = m[j];
                V[i][j] = v[j];
            }
        }
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* The gradients are inputs: a step never changes them (their values were checked above
     * against the same buffer, so check the state is really separate memory). */
    CU_ASSERT_PTR_NOT_EQUAL(fr_optimizer_state(o, 0, 0), fr_optimizer_state(o, 0, 1));
    for (int i = 0; i < s.n; i++) {
        free(P[i]);
        free(M[i]);
        free(V[i]);
        free(PB[i]);
        free(MB[i]);
    }
    fr_optimizer_free(o);
    pset_free(&s);
}

static void test_adamw_decay_auto(void) { run_adamw_vs_double(0.1, 0, FR_DECAY_AUTO, FR_DECAY_AUTO); }
static void test_adamw_no_decay(void) { run_adamw_vs_double(0.0, 0, FR_DECAY_AUTO, FR_DECAY_AUTO); }
static void test_adamw_decay_1d(void) { run_adamw_vs_double(0.2, 1, FR_DECAY_AUTO, FR_DECAY_AUTO); }
/* forced flags: the matrix excluded, the bias included */
static void test_adamw_decay_forced(void) { run_adamw_vs_double(0.2, 0, FR_DECAY_OFF, FR_DECAY_ON); }

/* The weight decay must make a difference the test above can see: with wd the matrix after
 * 5 steps differs from the one without by ~5*lr*wd*|p| >> the tolerance. */
static void test_adamw_decay_is_visible(void)
{
    fr_rng r = fr_test_rng("adamw_visible");
    float p1[64], p2[64], g[64];
    fr_rng_fill_normal(&r, p1, 64, 1.0f);
    memcpy(p2, p1, sizeof p1);
    fr_rng_fill_normal(&r, g, 64, 1.0f);
    fr_opt_param a = {"m", p1, g, 2, {8, 8}, FR_DECAY_AUTO}, b = {"m", p2, g, 2, {8, 8}, FR_DECAY_AUTO};
    fr_opt_config c = fr_opt_config_adamw(), c0 = c;
    c.weight_decay = 0.1;
    c0.weight_decay = 0;
    fr_optimizer *o1, *o2;
    FR_ASSERT_OK(fr_optimizer_create(&c, &a, 1, &o1));
    FR_ASSERT_OK(fr_optimizer_create(&c0, &b, 1, &o2));
    for (int t = 0; t < STEPS; t++) {
        FR_ASSERT_OK(fr_optimizer_step(o1, 1e-3));
        FR_ASSERT_OK(fr_optimizer_step(o2, 1e-3));
    }
    CU_ASSERT(fr_rel_l2(p1, p2, 64) > 100 * TOL);
    fr_optimizer_free(o1);
    fr_optimizer_free(o2);
}

/* ---- SGD vs a double reference ---- */

static void run_sgd_vs_double(double wd, double mom, double damp, int nesterov)
{
    fr_rng r = fr_test_rng("sgd_double");
    pset s;
    pset_init(&s, STD_N, std_ranks, std_dims, &r);
    fr_opt_config c = fr_opt_config_sgd();
    c.weight_decay = wd;
    c.momentum = mom;
    c.dampening = damp;
    c.nesterov = nesterov;
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, s.p, s.n, &o));
    CU_ASSERT_EQUAL(fr_optimizer_state_count(o), mom != 0 ? 1 : 0);
    float *gcopy = malloc(17 * 9 * sizeof(float));
    for (int t = 1; t <= STEPS; t++) {
        double lr = 0.05 * (1.0 + fr_rng_uniform(&r));
        for (int i = 0; i < s.n; i++) fr_rng_fill_normal(&r, s.grad[i], s.numel[i], 0.5f);
        /* expected values from the floats before the step */
        int bad = 0;
        double *expect_p[8], *expect_b[8], *bound_p[8], *bound_b[8];
        for (int i = 0; i < s.n; i++) {
            size_t k = (size_t)(s.numel[i] ? s.numel[i] : 1);
            expect_p[i] = malloc(k * sizeof(double));
            expect_b[i] = malloc(k * sizeof(double));
            bound_p[i] = malloc(k * sizeof(double));
            bound_b[i] = malloc(k * sizeof(double));
            float *buf = mom != 0 ? fr_optimizer_state(o, i, 0) : NULL;
            int dec = s.p[i].rank >= 2;
            for (int64_t j = 0; j < s.numel[i]; j++) {
                double p = s.data[i][j], g = s.grad[i][j];
                double d = dec ? g + wd * p : g, db = fabs(g) + (dec ? wd * fabs(p) : 0);
                double b = 0, bb = 0;
                if (buf) {
                    b = t == 1 ? d : mom * buf[j] + (1 - damp) * d;
                    bb = t == 1 ? db : mom * fabs(buf[j]) + (1 - damp) * db;
                    if (nesterov) {
                        d = d + mom * b;
                        db = db + mom * bb;
                    } else {
                        d = b;
                        db = bb;
                    }
                }
                expect_p[i][j] = p - lr * d;
                bound_p[i][j] = fabs(p) + lr * db;
                expect_b[i][j] = b;
                bound_b[i][j] = bb;
            }
        }
        memcpy(gcopy, s.grad[0], 17 * 9 * sizeof(float));
        FR_ASSERT_OK(fr_optimizer_step(o, lr));
        CU_ASSERT_EQUAL(memcmp(gcopy, s.grad[0], 17 * 9 * sizeof(float)), 0); /* grads untouched */
        for (int i = 0; i < s.n; i++) {
            float *buf = mom != 0 ? fr_optimizer_state(o, i, 0) : NULL;
            for (int64_t j = 0; j < s.numel[i]; j++) {
                int ok = close_to(s.data[i][j], expect_p[i][j], bound_p[i][j]) &&
                         (!buf || close_to(buf[j], expect_b[i][j], bound_b[i][j]));
                if (!ok && !bad)
                    fprintf(stderr, "\n  SGD step %d %s[%lld]: p %.9g vs %.9g\n", t, s.p[i].name, (long long)j,
                            s.data[i][j], expect_p[i][j]);
                bad += !ok;
            }
            free(expect_p[i]);
            free(expect_b[i]);
            free(bound_p[i]);
            free(bound_b[i]);
        }
        CU_ASSERT_EQUAL(bad, 0);
    }
    free(gcopy);
    fr_optimizer_free(o);
    pset_free(&s);
}

static void test_sgd_plain(void) { run_sgd_vs_double(0.0, 0.0, 0.0, 0); }
static void test_sgd_plain_wd(void) { run_sgd_vs_double(0.01, 0.0, 0.0, 0); }
static void test_sgd_momentum_wd(void) { run_sgd_vs_double(0.01, 0.9, 0.0, 0); }
static void test_sgd_dampening(void) { run_sgd_vs_double(0.0, 0.8, 0.3, 0); }
static void test_sgd_nesterov(void) { run_sgd_vs_double(0.001, 0.9, 0.0, 1); }

/* ---- PyTorch fixtures (tools/ref_optimizer.py) ---- */

typedef struct {
    const unsigned char *p, *end;
} reader;

static int rd(reader *r, void *out, size_t n)
{
    if ((size_t)(r->end - r->p) < n) return 0;
    memcpy(out, r->p, n); /* the fixtures are little-endian, like every host we build for */
    r->p += n;
    return 1;
}

static double rms(const float *x, int64_t n)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return n ? sqrt(ss / (double)n) : 0;
}

/* Relative to the element, or to the tensor's RMS for elements much smaller than it (state
 * like exp_avg cancels down to values whose own magnitude says nothing about the rounding). */
static int close_to_tensor(float x, float want, double tensor_rms)
{
    double scale = fabs(want) > tensor_rms ? fabs(want) : tensor_rms;
    return fabs((double)x - want) <= TOL * scale;
}

static void run_fixture(const char *name)
{
    char path[512], file[64];
    snprintf(file, sizeof file, "optim/%s.bin", name);
    fr_fixture(path, sizeof path, file);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len);
    CU_ASSERT_EQUAL_FATAL(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    reader r = {buf, buf + len};
    char magic[8];
    int32_t hdr[6];
    double hp[7], lrs[16];
    CU_ASSERT_FATAL(rd(&r, magic, 8) && memcmp(magic, "FROPTFX1", 8) == 0);
    CU_ASSERT_FATAL(rd(&r, hdr, sizeof hdr) && rd(&r, hp, sizeof hp));
    int kind = hdr[0], np = hdr[1], steps = hdr[2], clip = hdr[5];
    CU_ASSERT_FATAL(np > 0 && np <= 8 && steps > 0 && steps <= 16);
    CU_ASSERT_FATAL(rd(&r, lrs, (size_t)steps * sizeof(double)));
    fr_opt_config c = kind == 1 ? fr_opt_config_adamw() : fr_opt_config_sgd();
    c.nesterov = hdr[3];
    c.decay_1d = hdr[4];
    c.weight_decay = hp[0];
    c.beta1 = hp[1];
    c.beta2 = hp[2];
    c.eps = hp[3];
    c.momentum = hp[4];
    c.dampening = hp[5];
    double max_norm = hp[6];
    fr_opt_param ps[8];
    float *data[8], *grad[8];
    int64_t numel[8];
    memset(ps, 0, sizeof ps);
    static const char *pn[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    for (int i = 0; i < np; i++) {
        int32_t rank = -1;
        CU_ASSERT_FATAL(rd(&r, &rank, 4) && rank >= 0 && rank <= 4);
        ps[i].name = pn[i];
        ps[i].rank = rank;
        numel[i] = 1;
        for (int d = 0; d < rank; d++) {
            CU_ASSERT_FATAL(rd(&r, &ps[i].dims[d], 8));
            numel[i] *= ps[i].dims[d];
        }
    }
    for (int i = 0; i < np; i++) {
        data[i] = malloc((size_t)numel[i] * 4);
        grad[i] = malloc((size_t)numel[i] * 4);
        CU_ASSERT_FATAL(rd(&r, data[i], (size_t)numel[i] * 4));
        ps[i].data = data[i];
        ps[i].grad = grad[i];
    }
    const unsigned char *grads_at = r.p;
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < np; i++) r.p += numel[i] * 4;
    double norms[16];
    if (clip) CU_ASSERT_FATAL(rd(&r, norms, (size_t)steps * sizeof(double)));
    const unsigned char *after_at = r.p;
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < np; i++) r.p += numel[i] * 4;
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, ps, np, &o));
    int slots = fr_optimizer_state_count(o);
    size_t state_bytes = 0;
    for (int i = 0; i < np; i++) state_bytes += (size_t)numel[i] * 4 * (size_t)slots;
    CU_ASSERT_FATAL(r.p + state_bytes == r.end && r.p <= r.end);

    int64_t n_total = 0, n_exact = 0, n_bad = 0;
    const unsigned char *g = grads_at, *a = after_at;
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < np; i++) {
            memcpy(grad[i], g, (size_t)numel[i] * 4);
            g += numel[i] * 4;
        }
        if (clip) {
            double norm;
            FR_ASSERT_OK(fr_optimizer_clip_grad_norm(o, max_norm, &norm));
            CU_ASSERT(fabs(norm - norms[t]) <= TOL * norms[t]);
        }
        FR_ASSERT_OK(fr_optimizer_step(o, lrs[t]));
        for (int i = 0; i < np; i++) {
            const float *want = (const float *)a;
            for (int64_t j = 0; j < numel[i]; j++) {
                n_total++;
                n_exact += data[i][j] == want[j];
                n_bad += !close_to_tensor(data[i][j], want[j], rms(want, numel[i]));
            }
            a += numel[i] * 4;
        }
    }
    for (int s = 0; s < slots; s++)
        for (int i = 0; i < np; i++) {
            const float *want = (const float *)r.p, *have = fr_optimizer_state(o, i, s);
            for (int64_t j = 0; j < numel[i]; j++) {
                n_total++;
                n_exact += have[j] == want[j];
                n_bad += !close_to_tensor(have[j], want[j], rms(want, numel[i]));
            }
            r.p += numel[i] * 4;
        }
    CU_ASSERT_EQUAL(n_bad, 0);
    /* Without clipping (whose norm torch sums in float32, in its own order) the results are
     * bit-identical; with it, the clip factor can differ in the last bit. */
    if (!clip) CU_ASSERT_EQUAL(n_exact, n_total);
    if (n_bad || (!clip && n_exact != n_total))
        fprintf(stderr, "\n  %s: %lld of %lld values differ beyond 1e-6, %lld bit-exact\n", name, (long long)n_bad,
                (long long)n_total, (long long)n_exact);
    fr_optimizer_free(o);
    for (int i = 0; i < np; i++) {
        free(data[i]);
        free(grad[i]);
    }
    free(buf);
}

static void test_torch_adamw_wd(void) { run_fixture("adamw_wd"); }
static void test_torch_adamw_nowd(void) { run_fixture("adamw_nowd"); }
static void test_torch_adamw_decay1d(void) { run_fixture("adamw_decay1d"); }
static void test_torch_adamw_clip(void) { run_fixture("adamw_clip"); }
static void test_torch_sgd_plain(void) { run_fixture("sgd_plain"); }
static void test_torch_sgd_momentum_wd(void) { run_fixture("sgd_momentum_wd"); }
static void test_torch_sgd_nesterov(void) { run_fixture("sgd_nesterov"); }
static void test_torch_sgd_dampening(void) { run_fixture("sgd_dampening"); }

/* ---- clipping ---- */

static void test_clip(void)
{
    fr_rng r = fr_test_rng("clip");
    pset s;
    pset_init(&s, STD_N, std_ranks, std_dims, &r);
    fr_opt_config c = fr_opt_config_sgd();
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, s.p, s.n, &o));
    for (int i = 0; i < s.n; i++) fr_rng_fill_normal(&r, s.grad[i], s.numel[i], 2.0f);
    /* reference norm: per-parameter partial sums (a different order than the library's) */
    double ss = 0;
    for (int i = 0; i < s.n; i++) {
        double part = 0;
        for (int64_t j = s.numel[i] - 1; j >= 0; j--) part += (double)s.grad[i][j] * s.grad[i][j];
        ss += part;
    }
    double ref = sqrt(ss);
    CU_ASSERT(fabs(fr_optimizer_grad_norm(o) - ref) <= 1e-12 * ref);

    float *orig[8];
    for (int i = 0; i < s.n; i++) {
        orig[i] = malloc((size_t)(s.numel[i] ? s.numel[i] : 1) * sizeof(float));
        memcpy(orig[i], s.grad[i], (size_t)s.numel[i] * sizeof(float));
    }
    /* max_norm above the norm: nothing changes */
    double norm = -1;
    FR_ASSERT_OK(fr_optimizer_clip_grad_norm(o, ref * 1.5, &norm));
    CU_ASSERT(fabs(norm - ref) <= 1e-12 * ref);
    for (int i = 0; i < s.n; i++)
        CU_ASSERT_EQUAL(memcmp(orig[i], s.grad[i], (size_t)s.numel[i] * sizeof(float)), 0);
    /* below: every element times (float)(max / (norm + 1e-6)) */
    double max_norm = ref / 3.0;
    FR_ASSERT_OK(fr_optimizer_clip_grad_norm(o, max_norm, &norm));
    CU_ASSERT(fabs(norm - ref) <= 1e-12 * ref);
    float coef = (float)(max_norm / (ref + 1e-6));
    int bad = 0;
    for (int i = 0; i < s.n; i++)
        for (int64_t j = 0; j < s.numel[i]; j++) bad += s.grad[i][j] != orig[i][j] * coef;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(fabs(fr_optimizer_grad_norm(o) - max_norm) <= 1e-6 * max_norm);
    /* max_norm == norm: torch still scales by norm / (norm + 1e-6) < 1 */
    for (int i = 0; i < s.n; i++) memcpy(s.grad[i], orig[i], (size_t)s.numel[i] * sizeof(float));
    FR_ASSERT_OK(fr_optimizer_clip_grad_norm(o, ref, &norm));
    coef = (float)(ref / (ref + 1e-6));
    bad = 0;
    for (int i = 0; i < s.n; i++)
        for (int64_t j = 0; j < s.numel[i]; j++) bad += s.grad[i][j] != orig[i][j] * coef;
    CU_ASSERT_EQUAL(bad, 0);

    /* non-finite: error naming the parameter and element, gradients untouched */
    const float bad_vals[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < s.n; i++) memcpy(s.grad[i], orig[i], (size_t)s.numel[i] * sizeof(float));
        s.grad[2][7] = bad_vals[k];
        memcpy(orig[2], s.grad[2], (size_t)s.numel[2] * sizeof(float));
        norm = 0;
        CU_ASSERT_EQUAL(fr_optimizer_clip_grad_norm(o, 1.0, &norm), FR_ERR_NUMERIC);
        CU_ASSERT(!isfinite(norm));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'emb'"));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "element 7"));
        for (int i = 0; i < s.n; i++)
            CU_ASSERT_EQUAL(memcmp(orig[i], s.grad[i], (size_t)s.numel[i] * sizeof(float)), 0);
        orig[2][7] = 1.0f;
    }
    /* bad max_norm */
    CU_ASSERT_EQUAL(fr_optimizer_clip_grad_norm(o, 0.0, &norm), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_optimizer_clip_grad_norm(o, -1.0, &norm), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_optimizer_clip_grad_norm(o, NAN, &norm), FR_ERR_INVALID_ARG);
    for (int i = 0; i < s.n; i++) free(orig[i]);
    fr_optimizer_free(o);
    pset_free(&s);
}

/* ---- accumulation helpers ---- */

static void test_accumulation(void)
{
    fr_rng r = fr_test_rng("accum");
    pset s;
    pset_init(&s, STD_N, std_ranks, std_dims, &r);
    fr_opt_config c = fr_opt_config_adamw();
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, s.p, s.n, &o));
    for (int i = 0; i < s.n; i++) fr_rng_fill(&r, s.grad[i], s.numel[i], -3, 3);
    float keep[17 * 9];
    memcpy(keep, s.grad[0], sizeof keep);
    FR_ASSERT_OK(fr_optimizer_average_grads(o, 3));
    int bad = 0;
    for (int j = 0; j < 17 * 9; j++) bad += s.grad[0][j] != keep[j] / 3.0f;
    CU_ASSERT_EQUAL(bad, 0);
    memcpy(s.grad[0], keep, sizeof keep);
    fr_optimizer_scale_grads(o, 0.25);
    bad = 0;
    for (int j = 0; j < 17 * 9; j++) bad += s.grad[0][j] != keep[j] * 0.25f;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(fr_optimizer_average_grads(o, 0), FR_ERR_INVALID_ARG);
    s.grad[1][0] = -1.0f;
    fr_optimizer_zero_grads(o);
    bad = 0;
    for (int i = 0; i < s.n; i++)
        for (int64_t j = 0; j < s.numel[i]; j++) bad += s.grad[i][j] != 0.0f || signbit(s.grad[i][j]);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(fr_optimizer_grad_norm(o), 0.0);
    fr_optimizer_free(o);
    pset_free(&s);
}

/* ---- state access and a checkpoint-style round trip ---- */

static void roundtrip(fr_opt_config c)
{
    fr_rng r = fr_test_rng("state_roundtrip");
    pset a, b;
    pset_init(&a, STD_N, std_ranks, std_dims, &r);
    fr_rng r2 = fr_test_rng("state_roundtrip");
    pset_init(&b, STD_N, std_ranks, std_dims, &r2); /* same initial values */
    fr_optimizer *oa, *ob;
    FR_ASSERT_OK(fr_optimizer_create(&c, a.p, a.n, &oa));
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < a.n; i++) fr_rng_fill_normal(&r, a.grad[i], a.numel[i], 1.0f);
        FR_ASSERT_OK(fr_optimizer_step(oa, 0.01));
    }
    /* "checkpoint": weights, state by (parameter name, slot name), step count */
    for (int i = 0; i < a.n; i++) memcpy(b.data[i], a.data[i], (size_t)a.numel[i] * sizeof(float));
    /* b's parameters listed in reverse order: restore must go by name */
    fr_opt_param rev[8];
    for (int i = 0; i < b.n; i++) rev[i] = b.p[b.n - 1 - i];
    FR_ASSERT_OK(fr_optimizer_create(&c, rev, b.n, &ob));
    CU_ASSERT_EQUAL(fr_optimizer_state_count(oa), fr_optimizer_state_count(ob));
    for (int i = 0; i < a.n; i++) {
        const fr_opt_param *pa = fr_optimizer_param(oa, i);
        int j = fr_optimizer_find_param(ob, pa->name);
        CU_ASSERT_EQUAL_FATAL(j, b.n - 1 - i);
        CU_ASSERT_EQUAL(fr_optimizer_param_numel(ob, j), fr_optimizer_param_numel(oa, i));
        for (int s = 0; s < fr_optimizer_state_count(oa); s++) {
            int sb = fr_optimizer_find_state(ob, fr_optimizer_state_name(oa, s));
            CU_ASSERT_EQUAL_FATAL(sb, s);
            memcpy(fr_optimizer_state(ob, j, sb), fr_optimizer_state(oa, i, s),
                   (size_t)fr_optimizer_param_numel(oa, i) * sizeof(float));
        }
    }
    FR_ASSERT_OK(fr_optimizer_set_step_count(ob, fr_optimizer_step_count(oa)));
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < a.n; i++) {
            fr_rng_fill_normal(&r, a.grad[i], a.numel[i], 1.0f);
            memcpy(b.grad[i], a.grad[i], (size_t)a.numel[i] * sizeof(float));
        }
        FR_ASSERT_OK(fr_optimizer_step(oa, 0.01));
        FR_ASSERT_OK(fr_optimizer_step(ob, 0.01));
    }
    for (int i = 0; i < a.n; i++)
        CU_ASSERT_EQUAL(memcmp(a.data[i], b.data[i], (size_t)a.numel[i] * sizeof(float)), 0);
    CU_ASSERT_EQUAL(fr_optimizer_step_count(ob), 5);
    fr_optimizer_free(oa);
    fr_optimizer_free(ob);
    pset_free(&a);
    pset_free(&b);
}

static void test_state_roundtrip_adamw(void) { roundtrip(fr_opt_config_adamw()); }

static void test_state_roundtrip_sgd(void)
{
    fr_opt_config c = fr_opt_config_sgd();
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    roundtrip(c);
}

static void test_state_access(void)
{
    fr_rng r = fr_test_rng("state_access");
    pset s;
    pset_init(&s, STD_N, std_ranks, std_dims, &r);
    fr_opt_config c = fr_opt_config_adamw();
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, s.p, s.n, &o));
    CU_ASSERT_EQUAL(fr_optimizer_param_count(o), STD_N);
    CU_ASSERT_STRING_EQUAL(fr_optimizer_state_name(o, 0), "exp_avg");
    CU_ASSERT_STRING_EQUAL(fr_optimizer_state_name(o, 1), "exp_avg_sq");
    CU_ASSERT_PTR_NULL(fr_optimizer_state_name(o, 2));
    CU_ASSERT_EQUAL(fr_optimizer_find_state(o, "momentum_buffer"), -1);
    CU_ASSERT_EQUAL(fr_optimizer_find_param(o, "emb"), 2);
    CU_ASSERT_EQUAL(fr_optimizer_find_param(o, "nope"), -1);
    CU_ASSERT_PTR_NULL(fr_optimizer_state(o, STD_N, 0));
    CU_ASSERT_PTR_NULL(fr_optimizer_state(o, 0, 2));
    CU_ASSERT_EQUAL(fr_optimizer_param_numel(o, 4), 15);
    CU_ASSERT_EQUAL(fr_optimizer_param_numel(o, 5), 0);
    CU_ASSERT_EQUAL(fr_optimizer_param_numel(o, 6), 1);
    /* names are copies */
    CU_ASSERT_PTR_NOT_EQUAL(fr_optimizer_param(o, 0)->name, s.p[0].name);
    /* state zeroed and disjoint: fill each slot with its own value, then check */
    for (int i = 0; i < STD_N; i++)
        for (int sl = 0; sl < 2; sl++) {
            float *st = fr_optimizer_state(o, i, sl);
            for (int64_t j = 0; j < s.numel[i]; j++) {
                CU_ASSERT_EQUAL(st[j], 0.0f);
                st[j] = (float)(i * 2 + sl);
            }
        }
    int bad = 0;
    for (int i = 0; i < STD_N; i++)
        for (int sl = 0; sl < 2; sl++) {
            float *st = fr_optimizer_state(o, i, sl);
            for (int64_t j = 0; j < s.numel[i]; j++) bad += st[j] != (float)(i * 2 + sl);
        }
    CU_ASSERT_EQUAL(bad, 0);
    /* re-binding buffers */
    float nd[36], ng[36];
    memset(ng, 0, sizeof ng);
    for (int j = 0; j < 36; j++) nd[j] = 1.0f;
    FR_ASSERT_OK(fr_optimizer_bind(o, 2, nd, ng));
    CU_ASSERT_PTR_EQUAL(fr_optimizer_param(o, 2)->data, nd);
    CU_ASSERT_EQUAL(fr_optimizer_bind(o, 2, NULL, ng), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_optimizer_bind(o, 99, nd, ng), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_optimizer_set_step_count(o, -1), FR_ERR_INVALID_ARG);
    fr_optimizer_free(o);

    fr_opt_config sg = fr_opt_config_sgd();
    FR_ASSERT_OK(fr_optimizer_create(&sg, s.p, s.n, &o));
    CU_ASSERT_EQUAL(fr_optimizer_state_count(o), 0);
    CU_ASSERT_PTR_NULL(fr_optimizer_state(o, 0, 0));
    fr_optimizer_free(o);
    sg.momentum = 0.5;
    FR_ASSERT_OK(fr_optimizer_create(&sg, s.p, s.n, &o));
    CU_ASSERT_EQUAL(fr_optimizer_state_count(o), 1);
    CU_ASSERT_STRING_EQUAL(fr_optimizer_state_name(o, 0), "momentum_buffer");
    fr_optimizer_free(o);
    /* no parameters at all is fine */
    FR_ASSERT_OK(fr_optimizer_create(&c, NULL, 0, &o));
    FR_ASSERT_OK(fr_optimizer_step(o, 0.1));
    CU_ASSERT_EQUAL(fr_optimizer_grad_norm(o), 0.0);
    fr_optimizer_free(o);
    pset_free(&s);
}

static void expect_create_error(const fr_opt_config *c, const fr_opt_param *p, int n, fr_status want,
                                const char *needle)
{
    fr_optimizer *o = (fr_optimizer *)1;
    fr_status st = fr_optimizer_create(c, p, n, &o);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NULL(o);
    if (!strstr(fr_last_error(), needle)) {
        fprintf(stderr, "\n  expected '%s' in: %s\n", needle, fr_last_error());
        CU_FAIL("message");
    }
}

static void test_errors(void)
{
    float d[4] = {0}, g[4] = {0};
    fr_opt_param p[2] = {{"w", d, g, 2, {2, 2}, FR_DECAY_AUTO}, {"w", d, g, 1, {4}, FR_DECAY_AUTO}};
    fr_opt_config c = fr_opt_config_adamw();
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "'w' is listed twice");
    p[1].name = "b";
    p[1].data = NULL;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "'b' has a NULL data");
    p[1].data = d;
    p[1].grad = NULL;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "'b' has a NULL gradient");
    p[1].grad = g;
    p[1].rank = 9;
    expect_create_error(&c, p, 2, FR_ERR_SHAPE, "'b' has rank 9");
    p[1].rank = 1;
    p[1].dims[0] = -4;
    expect_create_error(&c, p, 2, FR_ERR_SHAPE, "b");
    p[1].dims[0] = 4;
    p[1].name = "";
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "parameter 1 has no name");
    p[1].name = "b";
    c.beta1 = 1.0;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "beta1");
    c = fr_opt_config_adamw();
    c.beta2 = -0.1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "beta2");
    c = fr_opt_config_adamw();
    c.eps = -1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "eps");
    c.eps = 1e-8;
    c.weight_decay = -0.1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "weight_decay");
    c = fr_opt_config_sgd();
    c.nesterov = 1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "nesterov");
    c.momentum = 0.9;
    c.dampening = 0.1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "nesterov");
    c = fr_opt_config_sgd();
    c.momentum = -1;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "momentum");
    c.kind = (fr_opt_kind)7;
    expect_create_error(&c, p, 2, FR_ERR_INVALID_ARG, "unknown kind");

    c = fr_opt_config_adamw();
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&c, p, 2, &o));
    CU_ASSERT_EQUAL(fr_optimizer_step(o, -1e-3), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_optimizer_step(o, NAN), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "learning rate"));
    CU_ASSERT_EQUAL(fr_optimizer_step_count(o), 0); /* a refused step is not counted */
    fr_optimizer_free(o);
}

/* ---- learning-rate schedules ---- */

static void test_lr_schedules(void)
{
    const double mx = 6e-4, mn = 6e-5;
    fr_lr_schedule s = {FR_LR_CONSTANT, mx, 0, 0, 0};
    FR_ASSERT_OK(fr_lr_schedule_check(&s));
    CU_ASSERT_EQUAL(fr_lr_at(&s, 0), mx);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 123456), mx);

    s = (fr_lr_schedule){FR_LR_WARMUP_CONSTANT, mx, 0, 10, 0};
    FR_ASSERT_OK(fr_lr_schedule_check(&s));
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 0), mx / 10, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 4), mx * 5 / 10, 1e-18);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 9), mx);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 10), mx);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 1000000), mx);
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, -5), mx / 10, 1e-18);

    /* cosine: W = 10, S = 110, so r = (step - 10) / 100 */
    s = (fr_lr_schedule){FR_LR_COSINE, mx, mn, 10, 110};
    FR_ASSERT_OK(fr_lr_schedule_check(&s));
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 0), 6e-5, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 9), 6e-4, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 10), 6e-4, 1e-18);            /* r = 0 */
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 35), mn + 0.8535533905932737 * (mx - mn), 1e-17); /* r = 1/4 */
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 60), 3.3e-4, 1e-17);          /* r = 1/2: the midpoint */
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 85), mn + 0.1464466094067262 * (mx - mn), 1e-17); /* r = 3/4 */
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 110), mn, 1e-18);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 5000), mn);
    /* monotone: up during warmup, down after */
    for (int64_t t = 1; t < 200; t++) {
        if (t < 10) CU_ASSERT(fr_lr_at(&s, t) > fr_lr_at(&s, t - 1));
        if (t > 10 && t <= 110) CU_ASSERT(fr_lr_at(&s, t) < fr_lr_at(&s, t - 1));
    }
    /* no warmup: step 0 is max_lr */
    s = (fr_lr_schedule){FR_LR_COSINE, mx, 0, 0, 4};
    CU_ASSERT_EQUAL(fr_lr_at(&s, 0), mx);
    CU_ASSERT_DOUBLE_EQUAL(fr_lr_at(&s, 2), mx / 2, 1e-18);
    CU_ASSERT_EQUAL(fr_lr_at(&s, 4), 0.0);

    /* invalid configurations */
    s = (fr_lr_schedule){FR_LR_COSINE, mx, mn, 10, 10};
    CU_ASSERT_EQUAL(fr_lr_schedule_check(&s), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "must exceed"));
    s = (fr_lr_schedule){FR_LR_COSINE, mx, 2 * mx, 10, 100};
    CU_ASSERT_EQUAL(fr_lr_schedule_check(&s), FR_ERR_INVALID_ARG);
    s = (fr_lr_schedule){FR_LR_CONSTANT, -1, 0, 0, 0};
    CU_ASSERT_EQUAL(fr_lr_schedule_check(&s), FR_ERR_INVALID_ARG);
    s = (fr_lr_schedule){FR_LR_WARMUP_CONSTANT, mx, 0, -1, 0};
    CU_ASSERT_EQUAL(fr_lr_schedule_check(&s), FR_ERR_INVALID_ARG);
    s = (fr_lr_schedule){(fr_lr_kind)9, mx, 0, 0, 0};
    CU_ASSERT_EQUAL(fr_lr_schedule_check(&s), FR_ERR_INVALID_ARG);

    fr_lr_kind k;
    FR_ASSERT_OK(fr_lr_kind_parse("cosine", &k));
    CU_ASSERT_EQUAL(k, FR_LR_COSINE);
    FR_ASSERT_OK(fr_lr_kind_parse("warmup_constant", &k));
    CU_ASSERT_EQUAL(k, FR_LR_WARMUP_CONSTANT);
    CU_ASSERT_STRING_EQUAL(fr_lr_kind_name(FR_LR_CONSTANT), "constant");
    CU_ASSERT_EQUAL(fr_lr_kind_parse("linear", &k), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'linear'"));
}

static CU_TestInfo adamw_tests[] = {
    {"decay auto (matrices only)", test_adamw_decay_auto},
    {"no weight decay", test_adamw_no_decay},
    {"decay_1d: every parameter decays", test_adamw_decay_1d},
    {"forced decay flags", test_adamw_decay_forced},
    {"weight decay is visible", test_adamw_decay_is_visible},
    CU_TEST_INFO_NULL};
static CU_TestInfo sgd_tests[] = {
    {"plain", test_sgd_plain},
    {"plain + weight decay", test_sgd_plain_wd},
    {"momentum + weight decay", test_sgd_momentum_wd},
    {"dampening", test_sgd_dampening},
    {"nesterov", test_sgd_nesterov},
    CU_TEST_INFO_NULL};
static CU_TestInfo torch_tests[] = {
    {"AdamW wd=0.1, 1-D excluded", test_torch_adamw_wd},
    {"AdamW wd=0", test_torch_adamw_nowd},
    {"AdamW decay_1d", test_torch_adamw_decay1d},
    {"AdamW + clip_grad_norm_", test_torch_adamw_clip},
    {"SGD plain", test_torch_sgd_plain},
    {"SGD momentum + wd", test_torch_sgd_momentum_wd},
    {"SGD nesterov", test_torch_sgd_nesterov},
    {"SGD dampening", test_torch_sgd_dampening},
    CU_TEST_INFO_NULL};
static CU_TestInfo grad_tests[] = {
    {"clip_grad_norm", test_clip},
    {"accumulation helpers", test_accumulation},
    CU_TEST_INFO_NULL};
static CU_TestInfo state_tests[] = {
    {"accessors", test_state_access},
    {"AdamW save/restore by name", test_state_roundtrip_adamw},
    {"SGD save/restore by name", test_state_roundtrip_sgd},
    {"errors", test_errors},
    CU_TEST_INFO_NULL};
static CU_TestInfo lr_tests[] = {
    {"schedules", test_lr_schedules},
    CU_TEST_INFO_NULL};

static CU_SuiteInfo suites[] = {
    {"adamw_vs_double", NULL, NULL, NULL, NULL, adamw_tests},
    {"sgd_vs_double", NULL, NULL, NULL, NULL, sgd_tests},
    {"vs_pytorch", NULL, NULL, NULL, NULL, torch_tests},
    {"gradients", NULL, NULL, NULL, NULL, grad_tests},
    {"state", NULL, NULL, NULL, NULL, state_tests},
    {"lr_schedule", NULL, NULL, NULL, NULL, lr_tests},
    CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
