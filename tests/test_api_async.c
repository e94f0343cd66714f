/* Steps that do not wait for their statistics (fp8run_session_train_step_async and
 * fp8run_session_poll_stats) on the CPU backend, against fp8run_session_train_step:
 *  - the same batches give the same statistics bit for bit (loss, norm, lr, skipped, reason,
 *    bad_in_a_row), polled every 5 steps, and the same weights;
 *  - nothing queued: available = 0; train_step refuses while statistics wait; the queue bound;
 *  - a poisoned batch (one holding token 0, whose embedding row was set to NaN) is skipped exactly as in sync mode, and with max_bad_steps 0 its FP8RUN_ERR_NUMERIC comes from its poll, the
 *    session staying usable;
 *  - a save with queued steps reads them back (counters up to date), their statistics stay
 *    pollable, and the checkpoint equals the one of the synchronous run. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/harness.h"

#define API_OK(expr)                                                                                 \
    do {                                                                                             \
        fp8run_status s__ = (expr);                                                                  \
        if (s__ != FP8RUN_OK) fprintf(stderr, "\n  %s -> %d: %s\n", #expr, (int)s__, fp8run_last_error()); \
        CU_ASSERT_EQUAL_FATAL(s__, FP8RUN_OK);                                                       \
    } while (0)

enum { B = 2, T = 12, STEPS = 14 };

static fp8run_model *model(void)
{
    char p[600];
    fp8run_model *m = NULL;
    API_OK(fp8run_model_load(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &m));
    return m;
}

static fp8run_session *session(const fp8run_model *m, int max_bad)
{
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = B;
    c.seq_len = T;
    c.lr = 3e-3;
    c.grad_clip = 1.0;
    c.max_bad_steps = max_bad;
    fp8run_session *s = NULL;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    /* token 0's embedding row NaN: a batch holding token 0 has a NaN loss, the others never
       read the row (its gradient there is 0) */
    const int64_t V = fp8run_session_vocab(s);
    int found = 0;
    for (int i = 0; i < fp8run_session_param_count(s) && !found; i++) {
        fp8run_value_info pi = {.struct_size = sizeof pi};
        API_OK(fp8run_session_param(s, i, &pi));
        if (pi.rank != 2 || pi.dims[0] != V) continue;
        float *x = malloc((size_t)pi.numel * sizeof *x);
        API_OK(fp8run_session_get_param(s, pi.name, x, (size_t)pi.numel));
        for (int64_t e = 0; e < pi.dims[1]; e++) x[e] = NAN;
        API_OK(fp8run_session_set_param(s, pi.name, x, (size_t)pi.numel));
        free(x);
        found = 1;
    }
    CU_ASSERT(found);
    return s;
}

/* A batch of fresh random ids in [1, V), with one 0 when poisoned. */
static void batch(uint64_t *r, int64_t *w, int64_t V, int poisoned)
{
    for (int i = 0; i < B * (T + 1); i++) {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        w[i] = poisoned && i == 5 ? 0 : 1 + (int64_t)(*r % (uint64_t)(V - 1));
    }
}

typedef struct rec {
    fp8run_status st;
    fp8run_step_stats s;
    char reason[256];
} rec;

static void keep(rec *r, fp8run_status st, const fp8run_step_stats *s)
{
    r->st = st;
    r->s = *s;
    snprintf(r->reason, sizeof r->reason, "%s", s->reason ? s->reason : "");
}

static int same(const rec *a, const rec *b)
{
    return a->st == b->st && a->s.step == b->s.step && memcmp(&a->s.loss, &b->s.loss, sizeof(double)) == 0 &&
           memcmp(&a->s.grad_norm, &b->s.grad_norm, sizeof(double)) == 0 && a->s.lr == b->s.lr &&
           a->s.skipped == b->s.skipped && a->s.bad_in_a_row == b->s.bad_in_a_row && strcmp(a->reason, b->reason) == 0;
}

static void drain(fp8run_session *s, rec *out, int *n)
{
    while (fp8run_session_steps_queued(s) > 0) {
        fp8run_step_stats st = {.struct_size = sizeof st};
        fp8run_status ps = fp8run_session_poll_stats(s, 1, &st);
        CU_ASSERT_EQUAL_FATAL(st.available, 1);
        keep(&out[(*n)++], ps, &st);
    }
}

static void weights_equal(fp8run_session *a, fp8run_session *b)
{
    int bad = 0;
    for (int i = 0; i < fp8run_session_param_count(a); i++) {
        fp8run_value_info pi = {.struct_size = sizeof pi};
        API_OK(fp8run_session_param(a, i, &pi));
        float *x = malloc((size_t)pi.numel * sizeof *x), *y = malloc((size_t)pi.numel * sizeof *y);
        API_OK(fp8run_session_get_param(a, pi.name, x, (size_t)pi.numel));
        API_OK(fp8run_session_get_param(b, pi.name, y, (size_t)pi.numel));
        bad += memcmp(x, y, (size_t)pi.numel * sizeof *x) != 0;
        free(x);
        free(y);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Sync and async runs over the same batches (poisoned where poison(i)); async polls every 5. */
static void compare(int max_bad, int (*poison)(int), int *n_numeric)
{
    fp8run_model *m = model();
    fp8run_session *sy = session(m, max_bad), *as = session(m, max_bad);
    const int64_t V = fp8run_session_vocab(sy);
    int64_t w[B * (T + 1)];
    rec a[STEPS], b[STEPS];
    int nb = 0;
    uint64_t r1 = 0x9e3779b97f4a7c15ull, r2 = r1;
    for (int i = 0; i < STEPS; i++) {
        batch(&r1, w, V, poison(i));
        fp8run_step_stats st = {.struct_size = sizeof st};
        keep(&a[i], fp8run_session_train_step(sy, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, &st), &st);
        CU_ASSERT_EQUAL(st.available, 1);
        batch(&r2, w, V, poison(i));
        int64_t idx = -7;
        API_OK(fp8run_session_train_step_async(as, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, &idx));
        CU_ASSERT_EQUAL(idx, i);
        if ((i + 1) % 5 == 0) drain(as, b, &nb);
    }
    drain(as, b, &nb);
    CU_ASSERT_EQUAL_FATAL(nb, STEPS);
    int diff = 0, numeric = 0, skipped = 0;
    for (int i = 0; i < STEPS; i++) {
        diff += !same(&a[i], &b[i]);
        numeric += b[i].st == FP8RUN_ERR_NUMERIC;
        skipped += b[i].s.skipped;
        if (!same(&a[i], &b[i]))
            printf("\n  step %d: sync %d %.9g %d '%s', async %d %.9g %d '%s'", i, (int)a[i].st, a[i].s.loss,
                   a[i].s.skipped, a[i].reason, (int)b[i].st, b[i].s.loss, b[i].s.skipped, b[i].reason);
    }
    CU_ASSERT_EQUAL(diff, 0);
    CU_ASSERT_EQUAL(fp8run_session_steps_skipped(as), fp8run_session_steps_skipped(sy));
    CU_ASSERT_EQUAL(fp8run_session_steps_skipped(as), skipped);
    CU_ASSERT_EQUAL(fp8run_session_steps_done(as), STEPS);
    weights_equal(sy, as);
    printf(" (%d steps, %d skipped, %d numeric errors; losses %.4f -> %.4f)", STEPS, skipped, numeric, b[0].s.loss,
           b[STEPS - 1].s.loss);
    *n_numeric = numeric;
    fp8run_session_destroy(sy);
    fp8run_session_destroy(as);
    fp8run_model_destroy(m);
}

static int none(int i) { (void)i; return 0; }
static int some(int i) { return i == 3 || i == 7 || i == 8; }

static void test_same_as_sync(void)
{
    int n;
    compare(10, none, &n);
    CU_ASSERT_EQUAL(n, 0);
}

static void test_skipped_as_sync(void)
{
    int n;
    compare(10, some, &n);
    CU_ASSERT_EQUAL(n, 0);
}

/* max_bad_steps 0: every poisoned step is FP8RUN_ERR_NUMERIC at its poll, like the sync step */
static void test_numeric_at_poll(void)
{
    int n;
    compare(0, some, &n);
    CU_ASSERT_EQUAL(n, 3);
}

static void test_queue_rules(void)
{
    fp8run_model *m = model();
    fp8run_session *s = session(m, 10);
    const int64_t V = fp8run_session_vocab(s);
    int64_t w[B * (T + 1)];
    uint64_t r = 12345;
    batch(&r, w, V, 0);
    fp8run_step_stats st = {.struct_size = sizeof st};
    st.available = 7;
    API_OK(fp8run_session_poll_stats(s, 1, &st)); /* nothing queued */
    CU_ASSERT_EQUAL(st.available, 0);
    /* a struct without `available` is refused by poll (it could not say "none") */
    fp8run_step_stats small = {.struct_size = offsetof(fp8run_step_stats, available)};
    CU_ASSERT_EQUAL(fp8run_session_poll_stats(s, 1, &small), FP8RUN_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fp8run_session_poll_stats(s, 1, NULL), FP8RUN_ERR_INVALID_ARG);
    /* bad ids change nothing */
    w[3] = V;
    CU_ASSERT_EQUAL(fp8run_session_train_step_async(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL),
                    FP8RUN_ERR_RANGE);
    CU_ASSERT_EQUAL(fp8run_session_steps_queued(s), 0);
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 0);
    w[3] = 1;
    API_OK(fp8run_session_train_step_async(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL));
    CU_ASSERT_EQUAL(fp8run_session_steps_queued(s), 1);
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 1);
    /* a synchronous step while statistics wait is refused, changing nothing */
    CU_ASSERT_EQUAL(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, &st), FP8RUN_ERR_STATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_session_error(s), "poll"));
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 1);
    /* the bound */
    for (int i = 1; i < FP8RUN_MAX_QUEUED_STEPS; i++)
        API_OK(fp8run_session_train_step_async(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL));
    CU_ASSERT_EQUAL(fp8run_session_train_step_async(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL),
                    FP8RUN_ERR_STATE);
    CU_ASSERT_EQUAL(fp8run_session_steps_queued(s), FP8RUN_MAX_QUEUED_STEPS);
    /* the CPU runs a step when it is queued: poll without waiting has it */
    st.available = 0;
    API_OK(fp8run_session_poll_stats(s, 0, &st));
    CU_ASSERT_EQUAL(st.available, 1);
    CU_ASSERT_EQUAL(st.step, 0);
    CU_ASSERT_EQUAL(fp8run_session_steps_queued(s), FP8RUN_MAX_QUEUED_STEPS - 1);
    API_OK(fp8run_session_train_step_async(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL));
    int n = 0;
    while (fp8run_session_steps_queued(s) > 0) {
        API_OK(fp8run_session_poll_stats(s, 1, &st));
        CU_ASSERT_EQUAL(st.step, 1 + n);
        n++;
    }
    CU_ASSERT_EQUAL(n, FP8RUN_MAX_QUEUED_STEPS);
    API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, &st)); /* allowed again */
    CU_ASSERT_EQUAL(st.step, FP8RUN_MAX_QUEUED_STEPS + 1);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* A save with queued steps: the counters are read back first, the statistics stay pollable,
 * and the file equals the one of the synchronous run (same weights, counters, state). */
static void test_save_settles(void)
{
    char dir[512], pa[600], pb[600];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(pa, sizeof pa, "%s/sync.ckpt", dir);
    snprintf(pb, sizeof pb, "%s/async.ckpt", dir);
    fp8run_model *m = model();
    fp8run_session *sy = session(m, 10), *as = session(m, 10);
    const int64_t V = fp8run_session_vocab(sy);
    int64_t w[B * (T + 1)];
    uint64_t r1 = 99, r2 = 99;
    for (int i = 0; i < 6; i++) {
        batch(&r1, w, V, i == 2);
        API_OK(fp8run_session_train_step(sy, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL));
        batch(&r2, w, V, i == 2);
        API_OK(fp8run_session_train_step_async(as, w, FP8RUN_DTYPE_INT64, sizeof w / sizeof *w, NULL));
    }
    API_OK(fp8run_session_save(sy, pa, NULL));
    API_OK(fp8run_session_save(as, pb, NULL));
    CU_ASSERT_EQUAL(fp8run_session_steps_queued(as), 6);
    CU_ASSERT_EQUAL(fp8run_session_steps_skipped(as), 1);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    CU_ASSERT_FATAL(fa && fb);
    int c1, c2, differ = 0;
    long len = 0;
    do {
        c1 = fgetc(fa);
        c2 = fgetc(fb);
        differ |= c1 != c2;
        len++;
    } while (c1 != EOF && c2 != EOF);
    fclose(fa);
    fclose(fb);
    CU_ASSERT_EQUAL(differ, 0);
    CU_ASSERT(len > 1000);
    int n = 0, skipped = 0;
    while (fp8run_session_steps_queued(as) > 0) {
        fp8run_step_stats st = {.struct_size = sizeof st};
        API_OK(fp8run_session_poll_stats(as, 0, &st));
        CU_ASSERT_EQUAL(st.step, n);
        skipped += st.skipped;
        n++;
    }
    CU_ASSERT_EQUAL(n, 6);
    CU_ASSERT_EQUAL(skipped, 1);
    remove(pa);
    remove(pb);
    remove(dir);
    fp8run_session_destroy(sy);
    fp8run_session_destroy(as);
    fp8run_model_destroy(m);
}

static CU_TestInfo tests[] = {
    {"async steps == sync steps, polled every 5 (bit for bit)", test_same_as_sync},
    {"poisoned batches skipped exactly as in sync mode", test_skipped_as_sync},
    {"max_bad_steps 0: FP8RUN_ERR_NUMERIC from the step's poll", test_numeric_at_poll},
    {"queue rules: none queued, sync refused, bound, order", test_queue_rules},
    {"save with queued steps: same checkpoint, statistics kept", test_save_settles},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api_async", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
