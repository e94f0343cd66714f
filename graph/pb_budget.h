/* A memory budget for protobuf-c decoding. protobuf-c allocates a struct for every (possibly
 * two-byte) submessage, so a hostile message could make it allocate ~150x its size: each
 * decode of a file's protobuf (ONNX and .fbs models, a checkpoint's index) goes through this
 * allocator, which refuses to pass FP8RUN_MAX_DECODE_BYTES (graph/limits.h). */
#ifndef FR_PB_BUDGET_H
#define FR_PB_BUDGET_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "graph/status.h"

typedef struct fr_pb_budget {
    size_t used, limit;
    int exceeded;             /* an allocation was refused for the budget */
    ProtobufCAllocator alloc; /* points at this struct: it must not move while in use */
} fr_pb_budget;

/* Set the budget for decoding `encoded_len` bytes: FP8RUN_MAX_DECODE_BYTES when set, else
 * 64 MiB + 40 x encoded_len (real files need a few times their size). */
FR_NODISCARD fr_status fr_pb_budget_init(fr_pb_budget *b, size_t encoded_len);

#endif
