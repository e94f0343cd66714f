/* How much host memory this process may still take, asked before a CPU plan is allocated: a
 * plan the machine cannot hold fails with the sizes instead of being allocated (Linux
 * overcommits: the allocation would succeed and the run die later, in the OOM killer or in
 * swap). The figure is the smallest of: MemAvailable (/proc/meminfo; free pages when it is
 * absent), the cgroup v2 memory.max less memory.current of this process's cgroup and its
 * parents, RLIMIT_AS less the address space in use, RLIMIT_DATA less the data in use, and
 * FP8RUN_MEMORY_LIMIT (graph/limits.h). FP8RUN_MEMORY_CHECK=0 turns the checks off, as it does
 * the CUDA session's. */
#ifndef FR_HOST_MEMORY_H
#define FR_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "graph/status.h"

typedef struct fr_host_memory {
    uint64_t available; /* bytes; UINT64_MAX when nothing could be read */
    char source[48];    /* which figure gave it: "MemAvailable", "cgroup memory.max", ... */
} fr_host_memory;

/* Plans smaller than this are not checked (reading /proc for each small executor would only
 * cost time). */
#define FR_HOST_CHECK_MIN_BYTES ((uint64_t)64 << 20)

/* Read the figures. Fails only on a bad FP8RUN_MEMORY_LIMIT. */
FR_NODISCARD fr_status fr_host_memory_available(fr_host_memory *out);

/* A CPU executor's plan for g (pool blocks and input buffers; `largest` the id of its largest
 * value, or -1) against what is available: FR_ERR_OOM with the sizes, the largest value and
 * what to change when it cannot fit. FR_OK for plans under FR_HOST_CHECK_MIN_BYTES or with
 * FP8RUN_MEMORY_CHECK=0. */
FR_NODISCARD fr_status fr_host_memory_check_plan(const fr_graph *g, size_t pool_bytes, int n_blocks,
                                                 size_t input_bytes, int largest);

/* 1 when FP8RUN_MEMORY_CHECK=0 asks for no check. */
int fr_host_memory_check_off(void);

#endif
