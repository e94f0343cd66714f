/* The first-fit arena plan of the CUDA executor (cuda_arena.h). */
#include "runtime/cuda/cuda_arena.h"

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

