/* The public C API from several threads:
 *  - two sessions (created from ONE shared model, at the same time) train in two threads at
 *    once; every loss and the final weights equal, bit for bit, the same runs one at a time;
 *  - the thread-local last error: errors in one thread never show up in another's message. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/harness.h"

#define STEPS 6

typedef struct run {
    /* in */
    const fp8run_model *model;
    const char *precision;
    int64_t batch, seq;
    uint64_t seed;            /* the token windows */
    pthread_barrier_t *start; /* NULL: run now */
    /* out */
    fp8run_status st;
    char msg[1024];
    double loss[STEPS];
    float *weights;           /* the first trained parameter after the run */
    size_t n_weights;
} run;

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *train(void *arg)
{
    run *r = arg;
    fp8run_session *s = NULL;
    fp8run_train_config c;
    fp8run_status init = fp8run_train_config_init(&c, sizeof c); /* reported after the barrier */
    c.batch = r->batch;
    c.seq_len = r->seq;
    c.precision = r->precision;
    c.lr = 3e-3;
    c.grad_clip = 1.0;
    if (r->start) pthread_barrier_wait(r->start);
    r->st = init != FP8RUN_OK ? init : fp8run_session_create(r->model, "cpu", &c, &s);
    size_t n = (size_t)(r->batch * (r->seq + 1));
    int64_t *w = malloc(n * sizeof *w);
    uint64_t seed = r->seed;
    int64_t V = fp8run_session_vocab(s);
    for (int i = 0; i < STEPS && r->st == FP8RUN_OK && w; i++) {
        for (size_t j = 0; j < n; j++) w[j] = (int64_t)(next(&seed) % (uint64_t)V);
        fp8run_step_stats st = {.struct_size = sizeof st};
        r->st = fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, n, &st);
        r->loss[i] = st.loss;
    }
    if (r->st == FP8RUN_OK) {
        fp8run_value_info v = {.struct_size = sizeof v};
        r->st = fp8run_session_param(s, 0, &v);
        r->n_weights = (size_t)v.numel;
        r->weights = malloc(r->n_weights * sizeof(float));
        if (r->st == FP8RUN_OK && r->weights)
            r->st = fp8run_session_get_param(s, v.name, r->weights, r->n_weights);
    }
    if (r->st != FP8RUN_OK) snprintf(r->msg, sizeof r->msg, "%s", fp8run_last_error());
    free(w);
    fp8run_session_destroy(s);
    return NULL;
}

static void check_same(const run *a, const run *b)
{
    CU_ASSERT_EQUAL_FATAL(a->st, FP8RUN_OK);
    CU_ASSERT_EQUAL_FATAL(b->st, FP8RUN_OK);
    for (int i = 0; i < STEPS; i++) {
        if (memcmp(&a->loss[i], &b->loss[i], sizeof(double)) != 0)
            fprintf(stderr, "\n  %s step %d: %.17g alone, %.17g in a thread\n", a->precision, i, a->loss[i],
                    b->loss[i]);
        CU_ASSERT(memcmp(&a->loss[i], &b->loss[i], sizeof(double)) == 0);
    }
    CU_ASSERT_EQUAL_FATAL(a->n_weights, b->n_weights);
    CU_ASSERT(memcmp(a->weights, b->weights, a->n_weights * sizeof(float)) == 0);
}

static void test_two_sessions(void)
{
    char p[4096];
    fp8run_model *m;
    fp8run_status st = fp8run_model_load(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &m);
    if (st != FP8RUN_OK) fprintf(stderr, "\n  %s\n", fp8run_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FP8RUN_OK);
    run base[2] = {
        {.model = m, .precision = "fp32", .batch = 2, .seq = 8, .seed = 11},
        {.model = m, .precision = "fp8", .batch = 3, .seq = 6, .seed = 12},
    };
    run alone[2], threaded[2];
    for (int i = 0; i < 2; i++) { /* one at a time */
        alone[i] = base[i];
        train(&alone[i]);
        if (alone[i].st != FP8RUN_OK) fprintf(stderr, "\n  alone %d: %s\n", i, alone[i].msg);
        CU_ASSERT_EQUAL_FATAL(alone[i].st, FP8RUN_OK);
        CU_ASSERT(isfinite(alone[i].loss[STEPS - 1]));
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        threaded[i] = base[i];
        threaded[i].start = &start;
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, train, &threaded[i]), 0);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; i++) {
        if (threaded[i].st != FP8RUN_OK) fprintf(stderr, "\n  thread %d: %s\n", i, threaded[i].msg);
        check_same(&alone[i], &threaded[i]);
    }
    /* the two runs really differ (no shared state made them equal) */
    CU_ASSERT(alone[0].loss[0] != alone[1].loss[0]);
    for (int i = 0; i < 2; i++) {
        free(alone[i].weights);
        free(threaded[i].weights);
    }
    fp8run_model_destroy(m);
}

/* ---- thread-local errors ---- */

typedef struct err_run {
    const char *path; /* a missing file only this thread uses */
    pthread_barrier_t *start;
    int wrong;        /* times this thread saw another's message */
} err_run;

static void *provoke(void *arg)
{
    err_run *e = arg;
    pthread_barrier_wait(e->start);
    for (int i = 0; i < 200; i++) {
        fp8run_model *m;
        if (fp8run_model_load(e->path, &m) == FP8RUN_OK) {
            fp8run_model_destroy(m);
            e->wrong++;
            continue;
        }
        if (!strstr(fp8run_last_error(), e->path)) e->wrong++;
    }
    return NULL;
}

static void test_thread_local_errors(void)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    err_run e[2] = {{"/nonexistent/first-thread.onnx", &start, 0}, {"/nonexistent/second-thread.onnx", &start, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, provoke, &e[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    CU_ASSERT_EQUAL(e[0].wrong, 0);
    CU_ASSERT_EQUAL(e[1].wrong, 0);
    /* and this thread's message is its own */
    CU_ASSERT_PTR_NULL(strstr(fp8run_last_error(), "first-thread"));
    CU_ASSERT_PTR_NULL(strstr(fp8run_last_error(), "second-thread"));
}

static CU_TestInfo thread_tests[] = {
    {"two sessions in two threads == one at a time (bit-exact)", test_two_sessions},
    {"last error is per thread", test_thread_local_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api_threads", NULL, NULL, NULL, NULL, thread_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
