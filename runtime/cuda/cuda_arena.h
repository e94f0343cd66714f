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

/* What the arena holds where it reaches its size (the out-of-memory error and the profile): the
 * values of g live at node `at` (alloc_at[v] <= at <= free_at[v]; alloc_at -1: not in the arena),
 * their bytes hdr[v].nbytes summed by producing op, largest first: "the arena peaks at node N ...
 * with 12 GiB live in 14 GiB; largest by producing op: Linear bf16 9 GiB (48), ...", malloc'ed
 * into *out (what *out held is freed; it is left as it was on failure). */
FR_NODISCARD fr_status fr_arena_peak_text(const fr_graph *g, const fr_tensor *hdr, int at, const int *alloc_at,
                                          const int *free_at, size_t arena_bytes, char **out);

#endif
