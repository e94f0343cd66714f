/* Shared test utilities (see harness.h). */
#include "tests/harness.h"

#include <CUnit/Basic.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "graph/status.h"

static uint64_t salt;

int fr_test_main(CU_SuiteInfo *suites)
{
    const char *env = getenv("FR_TEST_SEED");
    salt = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("random seed: FR_TEST_SEED=%llu\n", (unsigned long long)salt);
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        fprintf(stderr, "suite registration failed: %s\n", CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    /* FR_TEST_ONLY=TEXT runs only the tests whose name holds TEXT (the rest inactive, not
     * failed): a slow GPU program's one test on a device whose time is counted. */
    const char *only = getenv("FR_TEST_ONLY");
    if (only && *only) {
        CU_set_fail_on_inactive(CU_FALSE);
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
            for (CU_pTest t = s->pTest; t; t = t->pNext)
                if (!strstr(t->pName, only)) CU_set_test_active(t, CU_FALSE);
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

fr_rng fr_test_rng(const char *test_name)
{
    uint64_t h = 1469598103934665603ull ^ salt;
    for (const char *p = test_name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    fr_rng r = {h ? h : 1};
    return r;
}

static uint64_t next_u64(fr_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

double fr_rng_uniform(fr_rng *r) { return (double)(next_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double fr_rng_normal(fr_rng *r)
{
    double u1 = fr_rng_uniform(r), u2 = fr_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void fr_rng_fill(fr_rng *r, float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * fr_rng_uniform(r));
}

void fr_rng_fill_normal(fr_rng *r, float *x, int64_t n, float stddev)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(stddev * fr_rng_normal(r));
}

double fr_rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double fr_rel_l2_d(const float *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

double fr_max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return INFINITY;
        if (d > m) m = d;
    }
    return m;
}

const char *fr_fixture(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", FR_FIXTURES, rel);
    return buf;
}

const char *fr_test_tmpdir(char *buf, size_t n)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, n, "%s/fp8run-test-XXXXXX", base && base[0] ? base : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
    return buf;
}

int fr_test_free_port(void)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}
