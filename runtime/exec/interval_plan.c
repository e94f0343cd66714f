/* Greedy-by-size offsets over known lifetimes (interval_plan.h). */
#include "runtime/exec/interval_plan.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>


typedef struct placed {
    size_t off, size;
    int first, last;
} placed;

static const fr_interval *g_sort_v; /* qsort has no context argument in C11 */
static int g_sort_key;

static unsigned long long span(const fr_interval *x) { return (unsigned long long)((long long)x->last - x->first + 1); }

static int by_order(const void *a, const void *b)
{
    const fr_interval *x = &g_sort_v[*(const int *)a], *y = &g_sort_v[*(const int *)b];
    if (g_sort_key == 1 && span(x) != span(y)) return span(x) > span(y) ? -1 : 1;
    if (g_sort_key == 2) {
        long double ax = (long double)x->size * span(x), ay = (long double)y->size * span(y);
        if (ax != ay) return ax > ay ? -1 : 1;
    }
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    /* ties: the longer-lived first (they constrain more), then the earlier, then the index */
    if (span(x) != span(y)) return span(x) > span(y) ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

static size_t round_up(size_t n, size_t align) { return (n + align - 1) & ~(align - 1); }

/* One greedy placement in the order `key` sorts (0 size, 1 lifetime, 2 size x lifetime). */
static size_t place(const fr_interval *v, int n, size_t align, int key, int *order, placed *p, size_t *off)
{
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_v = v;
    g_sort_key = key;
    qsort(order, (size_t)n, sizeof *order, by_order);
    int np = 0;
    size_t top = 0;
    for (int k = 0; k < n; k++) {
        const fr_interval *it = &v[order[k]];
        const size_t size = round_up(it->size ? it->size : 1, align);
        /* the lowest offset where no buffer live at the same time lies in [at, at + size) */
        size_t at = 0;
        for (int j = 0; j < np && p[j].off < at + size; j++) /* offset order: later ones lie above */
            if (p[j].first <= it->last && it->first <= p[j].last && p[j].off + p[j].size > at)
                at = p[j].off + p[j].size;
        int pos = 0;
        while (pos < np && p[pos].off <= at) pos++;
        memmove(&p[pos + 1], &p[pos], (size_t)(np - pos) * sizeof *p);
        p[pos] = (placed){at, size, it->first, it->last};
        np++;
        off[order[k]] = at;
        if (at + size > top) top = at + size;
    }
    return top;
}

fr_status fr_interval_plan(const fr_interval *v, int n, size_t align, size_t *off, size_t *top)
{
    *top = 0;
    if (n <= 0) return FR_OK;
    if (!align || (align & (align - 1)))
        return fr_error(FR_ERR_INVALID_ARG, "interval plan: alignment %zu is not a power of two", align);
    int *order = fr_malloc((size_t)n * sizeof *order, "arena plan");
    placed *p = fr_malloc((size_t)n * sizeof *p, "arena plan"); /* sorted by offset */
    size_t *cand = fr_malloc((size_t)n * sizeof *cand, "arena plan");
    if (!order || !p || !cand) {
        free(order);
        free(p);
        free(cand);
        return FR_ERR_OOM;
    }
    /* no order wins everywhere: keep the smallest of three */
    for (int key = 0; key < 3; key++) {
        size_t t = place(v, n, align, key, order, p, cand);
        if (key == 0 || t < *top) {
            *top = t;
            memcpy(off, cand, (size_t)n * sizeof *off);
        }
    }
    free(order);
    free(p);
    free(cand);
    return FR_OK;
}

typedef struct event {
    int at;
    int add; /* 0: the bytes go (at a last position + 1), 1: they come */
    size_t size;
} event;

static int by_time(const void *a, const void *b)
{
    const event *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->add - y->add; /* what ends before a position goes before what starts there */
}

size_t fr_interval_live_max(const fr_interval *v, int n, size_t align, int *at)
{
    if (at) *at = -1;
    event *e = n > 0 ? fr_malloc((size_t)n * 2 * sizeof *e, "arena plan") : NULL;
    if (!e) return 0;
    for (int i = 0; i < n; i++) {
        size_t size = round_up(v[i].size ? v[i].size : 1, align);
        e[2 * i] = (event){v[i].first, 1, size};
        e[2 * i + 1] = (event){v[i].last == INT_MAX ? INT_MAX : v[i].last + 1, 0, size};
    }
    qsort(e, (size_t)n * 2, sizeof *e, by_time);
    size_t live = 0, best = 0;
    for (int i = 0; i < 2 * n; i++) {
        if (e[i].add)
            live += e[i].size;
        else
            live -= e[i].size;
        if (live > best) {
            best = live;
            if (at) *at = e[i].at;
        }
    }
    free(e);
    return best;
}
