/* The CUDA executor's arena plan: first fit over a list of free spans, sorted by offset and
 * merged on free; the arena grows at its top when no span fits (a free span at the top is
 * absorbed). The lifetimes it finds are then placed again largest first, and the smaller plan
 * kept (fr_arena_replan). Offsets only: nothing here touches a device. */
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

/* The lifetimes first fit found, for fr_arena_replan: per value its bytes (hdr[v].nbytes),
 * whether it is held (never shares bytes; held may be NULL) and alloc_at / free_at (alloc_at
 * -1: not in the arena; free_at INT_MAX: never freed), per node its scratch bytes (0: none). */
typedef struct fr_arena_lifetimes {
    const fr_tensor *hdr;
    const unsigned char *held;
    const int *alloc_at, *free_at;
    int nv;
    const size_t *scratch_bytes;
    int n_nodes;
} fr_arena_lifetimes;

/* The same buffers placed largest first over those lifetimes (runtime/exec/interval_plan.h).
 * *arena_bytes is the smaller of that plan's size and first_fit (first fit's). When the new
 * plan is smaller, off[v] and scratch_off[i] are replaced and *peak_at set to the node where
 * the most bytes are live; otherwise they are left as first fit made them. */
FR_NODISCARD fr_status fr_arena_replan(const fr_arena_lifetimes *lt, size_t first_fit, size_t *off, size_t *scratch_off,
                                       size_t *arena_bytes, int *peak_at);

/* What the arena holds where it reaches its size (the out-of-memory error, the profile and info
 * --memory): the values of g live at node `at` (lt's alloc_at[v] <= at <= free_at[v]), their
 * bytes summed by producing op, largest first, and node at's scratch: "the arena peaks at node
 * N ... with 12 GiB of values and 1 GiB of its scratch live in 14 GiB; values by producing op:
 * Linear bf16 9 GiB (48), ...", malloc'ed into *out (what *out held is freed; it is left as it
 * was on failure). */
FR_NODISCARD fr_status fr_arena_peak_text(const fr_graph *g, const fr_arena_lifetimes *lt, int at, size_t arena_bytes,
                                          char **out);

#endif
