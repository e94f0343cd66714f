/* The arena plan of the CUDA executor: first fit, then largest first (cuda_arena.h). */
#include "runtime/cuda/cuda_arena.h"
#include "runtime/exec/interval_plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t n) { return (n + FR_ARENA_ALIGN - 1) / FR_ARENA_ALIGN * FR_ARENA_ALIGN; }

fr_status fr_arena_plan_alloc(fr_arena_plan *p, size_t size, size_t *off)
{
    size = align_up(size ? size : 1);
    for (int i = 0; i < p->n_free; i++)
        if (p->free[i].size >= size) {
            *off = p->free[i].off;
            p->free[i].off += size;
            p->free[i].size -= size;
            if (p->free[i].size == 0) {
                memmove(&p->free[i], &p->free[i + 1], (size_t)(p->n_free - i - 1) * sizeof(fr_arena_span));
                p->n_free--;
            }
            return FR_OK;
        }
    /* grow the arena; a free span at its end is absorbed */
    if (p->n_free && p->free[p->n_free - 1].off + p->free[p->n_free - 1].size == p->top) {
        *off = p->free[p->n_free - 1].off;
        p->top = *off + size;
        p->n_free--;
        return FR_OK;
    }
    *off = p->top;
    p->top += size;
    return FR_OK;
}

fr_status fr_arena_plan_free(fr_arena_plan *p, size_t off, size_t size)
{
    size = align_up(size ? size : 1);
    int i = 0;
    while (i < p->n_free && p->free[i].off < off) i++;
    if (p->n_free == p->cap) {
        int ncap = p->cap ? p->cap * 2 : 64;
        fr_arena_span *ns = fr_realloc_array(p->free, (size_t)ncap, sizeof *ns, "CUDA arena plan");
        if (!ns) return FR_ERR_OOM;
        p->free = ns;
        p->cap = ncap;
    }
    memmove(&p->free[i + 1], &p->free[i], (size_t)(p->n_free - i) * sizeof(fr_arena_span));
    p->free[i] = (fr_arena_span){off, size};
    p->n_free++;
    if (i + 1 < p->n_free && p->free[i].off + p->free[i].size == p->free[i + 1].off) { /* merge right */
        p->free[i].size += p->free[i + 1].size;
        memmove(&p->free[i + 1], &p->free[i + 2], (size_t)(p->n_free - i - 2) * sizeof(fr_arena_span));
        p->n_free--;
    }
    if (i > 0 && p->free[i - 1].off + p->free[i - 1].size == p->free[i].off) { /* merge left */
        p->free[i - 1].size += p->free[i].size;
        memmove(&p->free[i], &p->free[i + 1], (size_t)(p->n_free - i - 1) * sizeof(fr_arena_span));
        p->n_free--;
    }
    return FR_OK;
}

/* ---- the same buffers, largest first ---- */

fr_status fr_arena_replan(const fr_arena_lifetimes *lt, size_t first_fit, size_t *off, size_t *scratch_off,
                          size_t *arena_bytes, int *peak_at)
{
    *arena_bytes = first_fit;
    int n = 0;
    for (int v = 0; v < lt->nv; v++) n += lt->alloc_at[v] >= 0;
    for (int i = 0; i < lt->n_nodes; i++) n += lt->scratch_bytes[i] > 0;
    if (n == 0) return FR_OK;
    fr_interval *iv = fr_malloc((size_t)n * sizeof *iv, "arena plan");
    int *who = fr_malloc((size_t)n * sizeof *who, "arena plan"); /* value id, or -1 - node for scratch */
    size_t *o = fr_malloc((size_t)n * sizeof *o, "arena plan");
    fr_status st = iv && who && o ? FR_OK : FR_ERR_OOM;
    int k = 0;
    for (int v = 0; st == FR_OK && v < lt->nv; v++) {
        if (lt->alloc_at[v] < 0) continue;
        /* held values share bytes with nothing, ever: they live before the first node too */
        const int held = lt->held && lt->held[v];
        iv[k] = (fr_interval){lt->hdr[v].nbytes, held ? -1 : lt->alloc_at[v], held ? INT_MAX : lt->free_at[v]};
        who[k++] = v;
    }
    for (int i = 0; st == FR_OK && i < lt->n_nodes; i++)
        if (lt->scratch_bytes[i]) {
            iv[k] = (fr_interval){lt->scratch_bytes[i], i, i};
            who[k++] = -1 - i;
        }
    size_t top = 0;
    if (st == FR_OK) st = fr_interval_plan(iv, n, FR_ARENA_ALIGN, o, &top);
    if (st == FR_OK && top < *arena_bytes) {
        for (int j = 0; j < n; j++) {
            if (who[j] >= 0)
                off[who[j]] = o[j];
            else
                scratch_off[-1 - who[j]] = o[j];
        }
        *arena_bytes = top;
        int at = -1;
        fr_interval_live_max(iv, n, FR_ARENA_ALIGN, &at);
        if (at >= 0 && at < lt->n_nodes) *peak_at = at;
    }
    free(iv);
    free(who);
    free(o);
    return st;
}

/* ---- the report of the peak ---- */

typedef struct peak_row {
    char key[96];
    size_t bytes;
    int values;
} peak_row;

static int cmp_peak(const void *a, const void *b)
{
    size_t x = ((const peak_row *)a)->bytes, y = ((const peak_row *)b)->bytes;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The op a value's bytes are charged to: its producer's type (with a Linear's precision). */
static void producer_key(const fr_graph *g, int v, char *key, size_t n)
{
    int p = g->values[v].producer;
    const fr_node *nd = p >= 0 ? &g->nodes[p] : NULL;
    const char *prec = NULL;
    if (nd && strcmp(nd->domain, "ai.fp8run") == 0 && strncmp(nd->op_type, "Linear", 6) == 0)
        fr_ignore_status(fr_node_attr_string(nd, "precision", "fp32", &prec)); /* a label: NULL leaves it off */
    snprintf(key, n, "%s%s%s", nd ? nd->op_type : "(input)", prec ? " " : "", prec ? prec : "");
}

fr_status fr_arena_peak_text(const fr_graph *g, const fr_arena_lifetimes *lt, int at, size_t arena_bytes, char **out)
{
    const fr_tensor *hdr = lt->hdr;
    const int *alloc_at = lt->alloc_at, *free_at = lt->free_at;
    const size_t scratch = at >= 0 && at < lt->n_nodes ? lt->scratch_bytes[at] : 0; /* its own node's only */
    peak_row *rows = fr_calloc((size_t)g->n_values + 1, sizeof *rows, "memory report");
    if (!rows) return FR_ERR_OOM;
    int n = 0;
    size_t live = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (alloc_at[v] < 0 || alloc_at[v] > at || free_at[v] < at) continue;
        char key[96];
        producer_key(g, v, key, sizeof key);
        int k = 0;
        while (k < n && strcmp(rows[k].key, key) != 0) k++;
        if (k == n) snprintf(rows[n++].key, sizeof rows[0].key, "%s", key);
        rows[k].bytes += hdr[v].nbytes;
        rows[k].values++;
        live += hdr[v].nbytes;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_peak);
    size_t cap = 300 + 80 * 8;
    char *s = fr_malloc(cap, "memory report");
    if (!s) {
        free(rows);
        return FR_ERR_OOM;
    }
    size_t off = (size_t)snprintf(
        s, cap,
        "the arena peaks at node '%s' (%s, %d of %d) with %zu MiB of values and %zu MiB of its "
        "scratch live in %zu MiB; values by producing op:",
        g->nodes[at].name, g->nodes[at].op_type, at, g->n_nodes, live >> 20, scratch >> 20, arena_bytes >> 20);
    for (int k = 0; k < n && k < 8 && off < cap; k++)
        off += (size_t)snprintf(s + off, cap - off, "%s %s %zu MiB (%d)", k ? "," : "", rows[k].key,
                                rows[k].bytes >> 20, rows[k].values);
    free(rows);
    free(*out);
    *out = s;
    return FR_OK;
}
