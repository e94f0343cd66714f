/* Offsets over known lifetimes (runtime/exec/interval_plan.h), which the CUDA executor's arena
 * takes where it beats first fit: on random lifetimes no two buffers live at the same time share
 * a byte, every offset is aligned, the arena is what the offsets need and never below the most
 * bytes live at once; on a case first fit in execution order wastes, the plan reaches that
 * bound. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec/interval_plan.h"
#include "tests/harness.h"

#define ALIGN 256

static size_t up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* no overlap in both time and bytes; aligned; top = the highest end */
static int check(const fr_interval *v, int n, const size_t *off, size_t top)
{
    size_t hi = 0;
    int ok = 1;
    for (int i = 0; i < n; i++) {
        ok &= off[i] % ALIGN == 0;
        size_t end = off[i] + up(v[i].size ? v[i].size : 1);
        if (end > hi) hi = end;
        for (int j = i + 1; j < n; j++) {
            int time = v[i].first <= v[j].last && v[j].first <= v[i].last;
            size_t ej = off[j] + up(v[j].size ? v[j].size : 1);
            int bytes = off[i] < ej && off[j] < end;
            if (time && bytes) {
                if (ok) fprintf(stderr, "\n  buffers %d and %d share bytes while both live", i, j);
                ok = 0;
            }
        }
    }
    ok &= hi == top;
    return ok;
}

/* the online first fit the executor ran before (sizes aligned, free spans merged), for comparison */
static size_t first_fit(const fr_interval *v, int n, int positions)
{
    size_t *off = calloc((size_t)n, sizeof *off);
    unsigned char *used = calloc(1u << 16, 1); /* one flag per ALIGN-sized slot */
    size_t top = 0;
    for (int t = 0; off && used && t < positions; t++) {
        for (int i = 0; i < n; i++) {
            if (v[i].first != t) continue;
            size_t slots = up(v[i].size ? v[i].size : 1) / ALIGN, s = 0;
            for (size_t run = 0; s + run < (1u << 16); run++) {
                if (used[s + run]) {
                    s += run + 1;
                    run = (size_t)-1;
                } else if (run + 1 == slots) {
                    break;
                }
            }
            memset(&used[s], 1, slots);
            off[i] = s * ALIGN;
            if ((s + slots) * ALIGN > top) top = (s + slots) * ALIGN;
        }
        for (int i = 0; i < n; i++)
            if (v[i].last == t) memset(&used[off[i] / ALIGN], 0, up(v[i].size ? v[i].size : 1) / ALIGN);
    }
    free(off);
    free(used);
    return top;
}

static void test_random(void)
{
    fr_rng r = fr_test_rng("interval_plan");
    int better = 0, cases = 0;
    for (int c = 0; c < 60; c++) {
        const int n = 1 + (int)(fr_rng_uniform(&r) * 200), positions = 1 + (int)(fr_rng_uniform(&r) * 100);
        fr_interval *v = malloc((size_t)n * sizeof *v);
        size_t *off = malloc((size_t)n * sizeof *off);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v && off);
        for (int i = 0; i < n; i++) {
            int a = (int)(fr_rng_uniform(&r) * positions), b = (int)(fr_rng_uniform(&r) * positions);
            /* sizes from a few bytes to 40 slots, some zero (placed as one byte) */
            v[i] = (fr_interval){(size_t)(fr_rng_uniform(&r) * 40 * ALIGN), a < b ? a : b, a < b ? b : a};
            if (fr_rng_uniform(&r) < 0.05) v[i].last = INT_MAX; /* held to the end */
        }
        size_t top = 0;
        FR_ASSERT_OK(fr_interval_plan(v, n, ALIGN, off, &top));
        CU_ASSERT(check(v, n, off, top));
        int at = -2;
        size_t live = fr_interval_live_max(v, n, ALIGN, &at);
        CU_ASSERT(top >= live);
        CU_ASSERT(at >= 0 && at < positions);
        /* the bound is reached: at `at`, that many bytes are live */
        size_t sum = 0;
        for (int i = 0; i < n; i++) sum += v[i].first <= at && at <= v[i].last ? up(v[i].size ? v[i].size : 1) : 0;
        CU_ASSERT_EQUAL(sum, live);
        int last_pos = 0;
        for (int i = 0; i < n; i++) last_pos = v[i].first > last_pos ? v[i].first : last_pos;
        size_t ff = first_fit(v, n, last_pos + 1);
        better += top < ff;
        cases++;
        free(v);
        free(off);
    }
    printf("\n    smaller than first fit in %d of %d random cases", better, cases);
}

/* First fit in execution order: a long-lived buffer B made after a short-lived A of the same
 * size lands above A, and once A is gone, C (twice the size) fits under neither. Sizes first:
 * C and B take the bottom, A sits above B. 3 units live at most; first fit needs 4. */
static void test_staircase(void)
{
    const fr_interval v[3] = {{ALIGN, 0, 1}, {ALIGN, 1, 3}, {2 * ALIGN, 2, 3}};
    size_t off[3], top;
    FR_ASSERT_OK(fr_interval_plan(v, 3, ALIGN, off, &top));
    CU_ASSERT(check(v, 3, off, top));
    CU_ASSERT_EQUAL(fr_interval_live_max(v, 3, ALIGN, NULL), 3 * ALIGN);
    CU_ASSERT_EQUAL(top, 3 * ALIGN);
    CU_ASSERT_EQUAL(first_fit(v, 3, 4), 4 * ALIGN);
}

static void test_edges(void)
{
    size_t off[1] = {7}, top = 9;
    FR_ASSERT_OK(fr_interval_plan(NULL, 0, ALIGN, off, &top));
    CU_ASSERT_EQUAL(top, 0);
    const fr_interval one = {1, 0, 0};
    CU_ASSERT_EQUAL(fr_interval_plan(&one, 1, 100, off, &top), FR_ERR_INVALID_ARG);
    FR_ASSERT_OK(fr_interval_plan(&one, 1, ALIGN, off, &top));
    CU_ASSERT_EQUAL(off[0], 0);
    CU_ASSERT_EQUAL(top, ALIGN);
    /* a buffer held from before the first node to the end shares bytes with nothing */
    const fr_interval held[2] = {{ALIGN, -1, INT_MAX}, {ALIGN, 5, 6}};
    size_t o2[2];
    FR_ASSERT_OK(fr_interval_plan(held, 2, ALIGN, o2, &top));
    CU_ASSERT(o2[0] != o2[1]);
    CU_ASSERT_EQUAL(top, 2 * ALIGN);
}

static CU_TestInfo k_tests[] = {
    {"random lifetimes: no shared bytes while live, aligned, at least the live maximum", test_random},
    {"a staircase first fit wastes: the plan reaches the live maximum", test_staircase},
    {"no buffers, a bad alignment, one buffer, a held buffer", test_edges},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo k_suites[] = {
    {"interval_plan", NULL, NULL, NULL, NULL, k_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(k_suites); }
