/* The CUDA executor's arena plan: first fit over a list of free spans, sorted by offset and
 * merged on free; the arena grows at its top when no span fits (a free span at the top is
 * absorbed). Offsets only: nothing here touches a device. */
#ifndef FR_CUDA_ARENA_H
#define FR_CUDA_ARENA_H

#include <stddef.h>

#include "graph/ir.h"

#define FR_ARENA_ALIGN 256 /* cudaMalloc's alignment; keeps every tensor 16-byte vector friendly */

typedef struct fr_arena_span {
    size_t off, size;
} fr_arena_span;

typedef struct fr_arena_plan {
    fr_arena_span *free;
    int n_free, cap;
    size_t top; /* the arena's size so far */
} fr_arena_plan;

/* Place `size` bytes (rounded up to FR_ARENA_ALIGN) at *off. */
FR_NODISCARD fr_status fr_arena_plan_alloc(fr_arena_plan *p, size_t size, size_t *off);
/* Give back what fr_arena_plan_alloc placed at off with that size. */
FR_NODISCARD fr_status fr_arena_plan_free(fr_arena_plan *p, size_t off, size_t size);

#endif
