/* The trainer's backend interface (runtime/train/train_backend.h), used directly: a fake backend that
 * wraps the CPU one but queues like the GPU (its steps are counted when read back, not when
 * queued), can hold steps "running", and injects a device error at a chosen step, on the
 * llama_tiny fixture (B 2, T 8):
 *  - the trainer calls through the table: device name, memory and profile come from it, every
 *    step is queued once and read back once, in order; a step the backend still runs is not
 *    handed out by a poll that does not wait;
 *  - 6 steps queued ahead then polled on the fake == 6 synchronous CPU steps: statistics and
 *    weights bit for bit, and nothing counted before the read-back;
 *  - more than max_bad_steps skipped steps in a row with steps queued ahead: every step's error
 *    names that step as the CLI numbers it (stats.step + 1) with its own count in a row, on the
 *    fake and on the CPU alike (the step as numbered, not the one before it);
 *  - a device error injected when step N is read back while steps are queued after it: the poll
 *    (and a read-back forced by eval) names step N, the steps queued after it, and the node;
 *  - the backend is not changed under queued steps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"

enum { B = 2, T = 8, W = B * (T + 1) };

/* ---- the fake backend ---- */

static struct {
    int64_t fail_step;    /* read-back of this step (0-based) fails with an injected data error */
    int64_t running_from; /* steps from this one are still "running" (done 0) */
    int64_t slot_step[FR_TRAIN_MAX_QUEUED];
    int64_t queued[64], retired[64];
    int n_queued, n_retired;
} fake;

static void fake_reset(void)
{
    memset(&fake, 0, sizeof fake);
    fake.fail_step = -1;
    fake.running_from = INT64_MAX;
}

static fr_status fake_init(fr_trainer *t, void **state) { return tr_backend_cpu.init(t, state); }
static void fake_free(void *state) { tr_backend_cpu.free(state); }

/* The CPU runs the step now; the trainer learns its statistics at retire, as from a GPU. */
static fr_status fake_queue(fr_trainer *t, const int64_t *windows, int k, int slot, fr_train_stats *stats)
{
    FR_TRY(tr_backend_cpu.queue(t, windows, k, slot, stats));
    fake.slot_step[slot] = stats->step;
    if (fake.n_queued < 64) fake.queued[fake.n_queued++] = stats->step;
    return FR_OK;
}

static int fake_done(fr_trainer *t, int slot)
{
    (void)t;
    return fake.slot_step[slot] < fake.running_from;
}

static fr_status fake_retire(fr_trainer *t, int slot, int k, fr_train_stats *stats)
{
    if (fake.n_retired < 64) fake.retired[fake.n_retired++] = stats->step;
    if (stats->step != fake.slot_step[slot])
        return fr_error(FR_ERR_INTERNAL, "fake: slot %d holds step %lld, retired as step %lld", slot,
                        (long long)fake.slot_step[slot], (long long)stats->step);
    if (stats->step == fake.fail_step)
        return fr_error(FR_ERR_RANGE, "node 'fake/Gather' (Gather): index 70 is outside [0, 64) (injected)");
    return tr_backend_cpu.retire(t, slot, k, stats);
}

static fr_status fake_profile(const fr_trainer *t, char **text)
{
    (void)t;
    *text = strdup("fake profile");
    return *text ? FR_OK : FR_ERR_OOM;
}

static size_t fake_memory(const fr_trainer *t, size_t *used, size_t *total)
{
    (void)t;
    *used = 7;
    *total = 9;
    return 1234;
}

static const char *fake_name(const fr_trainer *t)
{
    (void)t;
    return "fake device";
}

static fr_train_backend_ops fake_ops(void)
{
    fr_train_backend_ops o = tr_backend_cpu; /* eval, pull, push: the CPU's */
    o.name = "fake";
    o.queues = 1;
    o.init = fake_init;
    o.free = fake_free;
    o.queue = fake_queue;
    o.done = fake_done;
    o.retire = fake_retire;
    o.profile = fake_profile;
    o.memory = fake_memory;
    o.device_name = fake_name;
    return o;
}
static fr_train_backend_ops g_fake;

/* ---- the model ---- */

static fr_graph *load_llama(void)
{
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    return g;
}

static fr_trainer *trainer(const fr_graph *g, int max_bad, int on_fake)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.lr.max_lr = 3e-3;
    o.grad_clip = 1.0;
    o.max_bad_steps = max_bad;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    if (on_fake) FR_ASSERT_OK(tr_backend_use(t, &g_fake));
    return t;
}

/* Windows of fresh random ids in [1, V); poisoned ones hold token 0. */
static void windows(fr_rng *r, int64_t *w, int n, int64_t V)
{
    for (int i = 0; i < n * W; i++) w[i] = 1 + (int64_t)(fr_rng_uniform(r) * (double)(V - 1));
}

/* Token 0's embedding row NaN: a window holding token 0 makes a NaN loss; the others never read
 * the row. Returns the embedding's name (NULL when the model has none). */
static const char *poison(fr_trainer *t)
{
    const int64_t V = fr_trainer_vocab(t);
    for (int i = 0; i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        if (o->rank != 2 || o->dims[0] != V) continue;
        float *x = malloc((size_t)o->numel * sizeof *x);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        FR_ASSERT_OK(fr_trainer_get_param(t, o->name, x));
        for (int64_t e = 0; e < o->dims[1]; e++) x[e] = NAN;
        FR_ASSERT_OK(fr_trainer_set_param(t, o->name, x));
        free(x);
        return o->name;
    }
    return NULL;
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---- tests ---- */

static void test_calls_through_table(void)
{
    fr_rng r = fr_test_rng("calls_through_table");
    fake_reset();
    fr_graph *g = load_llama();
    fr_trainer *t = trainer(g, 10, 1);
    CU_ASSERT_STRING_EQUAL(fr_trainer_device(t), "fake device");
    size_t used = 0, total = 0;
    CU_ASSERT_EQUAL(fr_trainer_memory(t, &used, &total), 1234);
    CU_ASSERT_EQUAL(used, 7);
    CU_ASSERT_EQUAL(total, 9);
    char *prof = fr_trainer_profile(t);
    CU_ASSERT(prof && strcmp(prof, "fake profile") == 0);
    free(prof);
    CU_ASSERT_PTR_NULL(tr_cpu_exec(t)); /* not the CPU backend's trainer any more */

    const int64_t V = fr_trainer_vocab(t);
    int64_t w[4 * W];
    windows(&r, w, 4, V);
    for (int i = 0; i < 4; i++) FR_ASSERT_OK(fr_trainer_step_async(t, w + i * W, 1, NULL));
    CU_ASSERT_EQUAL(fake.n_queued, 4);
    CU_ASSERT_EQUAL(fake.n_retired, 0); /* nothing read back before it is asked for */
    /* steps 2 and 3 still run: a poll that does not wait hands out 0 and 1 only */
    fake.running_from = 2;
    fr_train_stats st;
    int got = 0, polled = 0;
    for (int i = 0; i < 4; i++) {
        FR_ASSERT_OK(fr_trainer_poll(t, 0, &st, &got));
        if (!got) break;
        CU_ASSERT_EQUAL(st.step, polled);
        polled++;
    }
    CU_ASSERT_EQUAL(polled, 2);
    CU_ASSERT_EQUAL(fake.n_retired, 2);
    CU_ASSERT_EQUAL(fr_trainer_queued(t), 2);
    FR_ASSERT_OK(fr_trainer_poll(t, 1, &st, &got)); /* waiting reads step 2 back all the same */
    CU_ASSERT(got && st.step == 2);
    fake.running_from = INT64_MAX;
    FR_ASSERT_OK(fr_trainer_poll(t, 0, &st, &got));
    CU_ASSERT(got && st.step == 3);
    CU_ASSERT_EQUAL(fake.n_retired, 4);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(fake.queued[i], i);
        CU_ASSERT_EQUAL(fake.retired[i], i);
    }
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* 6 steps (2 of them poisoned) queued ahead on the fake, polled at the end, against the same
 * steps taken one by one on the CPU backend. */
static void test_fake_equals_cpu(void)
{
    fr_rng r = fr_test_rng("fake_equals_cpu");
    fake_reset();
    fr_graph *g = load_llama();
    fr_trainer *c = trainer(g, 10, 0), *f = trainer(g, 10, 1);
    CU_ASSERT_STRING_EQUAL(fr_trainer_device(c), "CPU");
    CU_ASSERT_PTR_NOT_NULL(tr_cpu_exec(c));
    const char *emb = poison(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(emb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(poison(f));
    const int64_t V = fr_trainer_vocab(c);
    enum { N = 6 };
    int64_t w[N * W];
    windows(&r, w, N, V);
    w[1 * W + 3] = 0; /* steps 1 and 4 poisoned */
    w[4 * W + 7] = 0;
    fr_train_stats sc[N], sf[N];
    for (int i = 0; i < N; i++) FR_ASSERT_OK(fr_trainer_step(c, w + i * W, 1, &sc[i]));
    for (int i = 0; i < N; i++) FR_ASSERT_OK(fr_trainer_step_async(f, w + i * W, 1, NULL));
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(f), 0); /* counted when read back */
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(c), 2);
    int got;
    for (int i = 0; i < N; i++) {
        FR_ASSERT_OK(fr_trainer_poll(f, 1, &sf[i], &got));
        CU_ASSERT_EQUAL(got, 1);
    }
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(sf[i].step, sc[i].step);
        CU_ASSERT(bits_equal(sf[i].loss, sc[i].loss));
        CU_ASSERT(bits_equal(sf[i].grad_norm, sc[i].grad_norm));
        CU_ASSERT(bits_equal(sf[i].lr, sc[i].lr));
        CU_ASSERT_EQUAL(sf[i].skipped, sc[i].skipped);
        CU_ASSERT_EQUAL(sf[i].bad_in_a_row, sc[i].bad_in_a_row);
        CU_ASSERT_STRING_EQUAL(sf[i].reason, sc[i].reason);
        CU_ASSERT_EQUAL(sc[i].skipped, i == 1 || i == 4);
    }
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(f), 2);
    for (int i = 0; i < fr_trainer_param_count(c); i++) {
        const char *name = fr_trainer_param_name(c, i);
        const int64_t n = fr_trainer_param_numel(c, i);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        CU_ASSERT_FATAL(a && b);
        FR_ASSERT_OK(fr_trainer_get_param(c, name, a));
        FR_ASSERT_OK(fr_trainer_get_param(f, name, b));
        CU_ASSERT_EQUAL(memcmp(a, b, (size_t)n * sizeof *a), 0);
        free(a);
        free(b);
    }
    /* eval through the table: the same loss and logits */
    double lc, lf;
    FR_ASSERT_OK(fr_trainer_eval(c, w, &lc));
    FR_ASSERT_OK(fr_trainer_eval(f, w, &lf));
    CU_ASSERT(bits_equal(lc, lf));
    const fr_tensor *oc = fr_trainer_eval_output(c, NULL), *of = fr_trainer_eval_output(f, NULL);
    CU_ASSERT_FATAL(oc && of && oc->nbytes == of->nbytes);
    CU_ASSERT_EQUAL(memcmp(oc->data, of->data, oc->nbytes), 0);
    fr_trainer_free(c);
    fr_trainer_free(f);
    fr_graph_free(g);
}

/* Every step poisoned, max_bad_steps 3, all 8 queued before the first poll. */
static void numeric_run(const fr_graph *g, int on_fake)
{
    fr_rng r = fr_test_rng(on_fake ? "numeric_fake" : "numeric_cpu");
    fake_reset();
    fr_trainer *t = trainer(g, 3, on_fake);
    CU_ASSERT_PTR_NOT_NULL_FATAL(poison(t));
    enum { N = 8 };
    int64_t w[N * W];
    windows(&r, w, N, fr_trainer_vocab(t));
    for (int i = 0; i < N; i++) w[i * W + 2] = 0;
    for (int i = 0; i < N; i++) FR_ASSERT_OK(fr_trainer_step_async(t, w + i * W, 1, NULL));
    for (int i = 0; i < N; i++) {
        fr_train_stats st;
        int got = 0;
        fr_status s = fr_trainer_poll(t, 1, &st, &got);
        CU_ASSERT_EQUAL(got, 1);
        CU_ASSERT_EQUAL(st.step, i);
        CU_ASSERT_TRUE(st.skipped);
        CU_ASSERT_EQUAL(st.bad_in_a_row, i + 1);
        CU_ASSERT_EQUAL(s, i < 3 ? FR_OK : FR_ERR_NUMERIC);
        if (s != FR_ERR_NUMERIC) continue;
        /* the CLI warns "step <st.step + 1> skipped (<bad_in_a_row> in a row)": the error
           names the same step and count */
        char want_n[64], want_step[64];
        snprintf(want_n, sizeof want_n, "%d steps in a row", st.bad_in_a_row);
        snprintf(want_step, sizeof want_step, "the last one (step %lld)", (long long)st.step + 1);
        if (!strstr(fr_last_error(), want_n) || !strstr(fr_last_error(), want_step))
            printf("\n    step %d: '%s' lacks '%s' or '%s'", i, fr_last_error(), want_n, want_step);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), want_n));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), want_step));
    }
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(t), N);
    CU_ASSERT_EQUAL(fr_trainer_queued(t), 0);
    fr_trainer_free(t);
}

static void test_numeric_names_step(void)
{
    fr_graph *g = load_llama();
    numeric_run(g, 1);
    numeric_run(g, 0);
    fr_graph_free(g);
}

/* The read-back of step index `fail` fails (a kernel-reported data error) with n steps queued;
 * `via_eval`: found by the read-back eval forces instead of by a poll. */
static void injected_error(const fr_graph *g, int n, int fail, int via_eval)
{
    fr_rng r = fr_test_rng("injected_error");
    fake_reset();
    fr_trainer *t = trainer(g, 10, 1);
    fake.fail_step = fail;
    int64_t w[8 * W];
    windows(&r, w, n, fr_trainer_vocab(t));
    for (int i = 0; i < n; i++) FR_ASSERT_OK(fr_trainer_step_async(t, w + i * W, 1, NULL));
    fr_train_stats st;
    int got = 0;
    fr_status s = FR_OK;
    if (via_eval) {
        double loss;
        s = fr_trainer_eval(t, w, &loss);
    } else {
        for (int i = 0; i <= fail && s == FR_OK; i++) {
            s = fr_trainer_poll(t, 1, &st, &got);
            if (i < fail) CU_ASSERT(s == FR_OK && got && st.step == i);
        }
        CU_ASSERT_EQUAL(got, 0); /* the failed step hands out no statistics */
        CU_ASSERT_EQUAL(st.step, fail);
        CU_ASSERT_EQUAL(fr_trainer_queued(t), n - fail); /* it stays the oldest */
    }
    CU_ASSERT_EQUAL(s, FR_ERR_RANGE);
    char want[160];
    if (fail == n - 1)
        snprintf(want, sizeof want, "step %d: node 'fake/Gather'", fail + 1);
    else if (fail == n - 2)
        snprintf(want, sizeof want, "step %d (step %d was queued after it): node 'fake/Gather'", fail + 1, fail + 2);
    else
        snprintf(want, sizeof want, "step %d (steps %d to %d were queued after it): node 'fake/Gather'", fail + 1,
                 fail + 2, n);
    if (!strstr(fr_last_error(), want)) printf("\n    '%s' lacks '%s'", fr_last_error(), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), want));
    /* the backend stays while steps wait for their poll */
    CU_ASSERT_EQUAL(tr_backend_use(t, &tr_backend_cpu), FR_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(fr_trainer_device(t), "fake device");
    fr_trainer_free(t);
}

static void test_device_error_names_step(void)
{
    fr_graph *g = load_llama();
    injected_error(g, 7, 4, 0); /* steps 6 and 7 queued after step 5 */
    injected_error(g, 6, 4, 0); /* one step after it */
    injected_error(g, 3, 2, 0); /* the last one queued */
    injected_error(g, 5, 1, 1); /* eval reads the queue back first */
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"the trainer calls through the table; poll without wait leaves running steps", test_calls_through_table},
    {"6 steps queued ahead on the fake == 6 CPU steps, bit for bit", test_fake_equals_cpu},
    {"too many skipped in a row, queued ahead: each error names its step and count", test_numeric_names_step},
    {"an injected read-back error names the step, the steps after it and the node", test_device_error_names_step},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"train_backend", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    g_fake = fake_ops();
    return fr_test_main(suites);
}
