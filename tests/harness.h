/* Shared test utilities: running CUnit suites, random inputs, error norms, fixture paths. */
#ifndef FR_TEST_HARNESS_H
#define FR_TEST_HARNESS_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>

/* Run the suites with CUnit's basic runner (verbose); returns the process exit code
 * (0 when every assertion passed). */
int fr_test_main(CU_SuiteInfo *suites);

/* Deterministic per-test random numbers (xorshift64*): seed from the test name plus a
 * run-time salt (FR_TEST_SEED env, default: time-based so inputs are fresh each run; the seed
 * is printed on failure). */
typedef struct fr_rng { uint64_t s; } fr_rng;
fr_rng fr_test_rng(const char *test_name);
double fr_rng_uniform(fr_rng *r);           /* [0, 1) */
double fr_rng_normal(fr_rng *r);            /* N(0, 1) */
void fr_rng_fill(fr_rng *r, float *x, int64_t n, float lo, float hi);
void fr_rng_fill_normal(fr_rng *r, float *x, int64_t n, float stddev);

/* ||a - b|| / ||b|| in double; returns +inf when any value is NaN. */
double fr_rel_l2(const float *a, const float *b, int64_t n);
double fr_rel_l2_d(const float *a, const double *b, int64_t n);
double fr_max_abs_diff(const float *a, const float *b, int64_t n);

/* FR_FIXTURES "/" rel into buf. */
const char *fr_fixture(char *buf, size_t n, const char *rel);
/* A fresh temporary directory (mkdtemp under $TMPDIR or /tmp); returns its path in buf. */
const char *fr_test_tmpdir(char *buf, size_t n);

/* A TCP port on 127.0.0.1 that nothing listens on now, picked by the kernel (bind to port 0),
 * for tests that start ranks meeting there: a port made from the pid can fall in the range
 * the kernel hands out to client sockets, and be taken. 0 when no socket could be made. */
int fr_test_free_port(void);

/* CU_ASSERT that reports the library's last error when a status is not FR_OK. */
#define FR_ASSERT_OK(expr)                                                                  \
    do {                                                                                    \
        fr_status st__ = (expr);                                                            \
        if (st__ != FR_OK) fprintf(stderr, "\n  %s -> %d: %s\n", #expr, (int)st__, fr_last_error()); \
        CU_ASSERT_EQUAL_FATAL(st__, FR_OK);                                                 \
    } while (0)

#endif
