/* Offsets for buffers whose lifetimes are known before a run: the executor's values and scratch
 * buffers, each live over an interval of node positions. Two buffers may share bytes only when
 * their intervals do not meet.
 *
 * Why not first fit in execution order alone: placing each buffer when it is made cannot know
 * what will be made later, and a training step's long-lived saved activations, made between
 * short-lived ones, end up scattered with gaps no later buffer fits. At 1B (B8 x T2048) with the
 * chunked LM head that left 1.8 GiB of the CUDA arena empty at its peak. Placing the largest
 * buffers first, each at the lowest offset free over its whole interval (greedy by size, as
 * TFLite's planner does), packs the same buffers close to the most bytes ever live at once. The
 * CUDA executor keeps whichever of the two plans is smaller. Offsets only: nothing here
 * allocates the arena. */
#ifndef FR_INTERVAL_PLAN_H
#define FR_INTERVAL_PLAN_H

#include <stddef.h>

#include "graph/status.h"

typedef struct fr_interval {
    size_t size;     /* bytes; rounded up to the plan's alignment */
    int first, last; /* live at node positions first..last inclusive (first <= last) */
} fr_interval;

/* off[i] for each of the n intervals, aligned to `align` (a power of two), and *top, the arena
 * size they need. */
FR_NODISCARD fr_status fr_interval_plan(const fr_interval *v, int n, size_t align, size_t *off, size_t *top);

/* The most bytes live at one position (sizes rounded to `align`): no plan needs less. */
size_t fr_interval_live_max(const fr_interval *v, int n, size_t align, int *at);

#endif
