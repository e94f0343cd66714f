/* Budgeted protobuf-c allocator (see pb_budget.h). */
#include "graph/pb_budget.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/limits.h"

/* Each block carries its size in a header so frees are accounted. */
#define BUDGET_HDR 16
_Static_assert(alignof(max_align_t) <= BUDGET_HDR, "allocation header keeps malloc alignment");

static void *budget_alloc(void *data, size_t size)
{
    fr_pb_budget *b = data;
    if (size > b->limit - b->used || b->limit - b->used - size < BUDGET_HDR) {
        b->exceeded = 1;
        return NULL;
    }
    unsigned char *p = malloc(size + BUDGET_HDR);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    b->used += size + BUDGET_HDR;
    return p + BUDGET_HDR;
}

static void budget_free(void *data, void *ptr)
{
    if (!ptr) return;
    fr_pb_budget *b = data;
    unsigned char *p = (unsigned char *)ptr - BUDGET_HDR;
    size_t size;
    memcpy(&size, p, sizeof size);
    b->used -= size + BUDGET_HDR;
    free(p);
}

fr_status fr_pb_budget_init(fr_pb_budget *b, size_t encoded_len)
{
    uint64_t v;
    int set;
    b->used = 0;
    b->exceeded = 0;
    FR_TRY(fr_limit_get(FR_LIMIT_DECODE_BYTES, &v, &set));
    if (set) {
        b->limit = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    } else {
        /* real models need a few times their size (a small attribute is ~20x); two-byte empty
         * submessages cost ~150x */
        size_t extra;
        b->limit = fr_mul_size(encoded_len, 40, &extra) && extra <= SIZE_MAX - ((size_t)64 << 20)
                       ? ((size_t)64 << 20) + extra
                       : SIZE_MAX;
    }
    b->alloc.alloc = budget_alloc;
    b->alloc.free = budget_free;
    b->alloc.allocator_data = b;
    return FR_OK;
}
