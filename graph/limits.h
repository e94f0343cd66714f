/* The budgets that bound what a file, or a plan made from one, may make fp8run allocate: one
 * table, each entry settable by an environment variable (a size in bytes, or a number with
 * K, M, G or T for powers of 1024). A refusal names the variable, so a user with a real need
 * knows what to raise. They are read at each use (no cache): a test or host program may set
 * them between calls, not while another thread reads them. */
#ifndef FR_LIMITS_H
#define FR_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#define FR_LIMIT_HEADER_DEFAULT ((uint64_t)100 * 1000 * 1000) /* safetensors' reference reader */

typedef enum fr_limit {
    /* FP8RUN_MAX_TENSOR_BYTES: one tensor decoded from a file (ONNX initializer or external
     * data, .npy) or one value that shape inference plans (Expand, ConstantOfShape, a graph
     * input's bound dims...); default 256 GiB, more than one GPU holds */
    FR_LIMIT_TENSOR_BYTES,
    /* FP8RUN_MAX_DECODE_BYTES: memory protobuf decoding of one ONNX/.fbs file or checkpoint
     * index may take; default 64 MiB + 40 x the encoded size (real files need a few times
     * their size; a crafted one ~150x) */
    FR_LIMIT_DECODE_BYTES,
    /* FP8RUN_MAX_HEADER_BYTES: a safetensors header or model.safetensors.index.json;
     * default 100 MB, the reference implementation's */
    FR_LIMIT_HEADER_BYTES,
    /* FP8RUN_MEMORY_LIMIT: host memory a CPU run may plan to use, when less than what the
     * system reports available (runtime/exec/host_memory.h); default: no such cap */
    FR_LIMIT_HOST_MEMORY,
    FR_LIMIT_COUNT
} fr_limit;

/* The limit's value; *is_set tells whether the variable is set (may be NULL). A default that
 * depends on the input (DECODE_BYTES) or none (HOST_MEMORY) gives 0 when unset. A value that
 * is not a positive size is FR_ERR_INVALID_ARG naming the variable. */
FR_NODISCARD fr_status fr_limit_get(fr_limit which, uint64_t *value, int *is_set);
/* The environment variable's name. */
const char *fr_limit_env(fr_limit which);

/* "1.5 GiB" style text of n bytes into buf. */
const char *fr_bytes_text(uint64_t n, char *buf, size_t len);

#endif
