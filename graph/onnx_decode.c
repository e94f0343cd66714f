/* ONNX import, first stage: decode a (hostile) model file with protobuf-c, bounded in message
 * nesting depth (walked over the wire format before protobuf-c sees the bytes) and in memory
 * (a budgeting allocator). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/limits.h"
#include "graph/onnx_import_internal.h"
#include "graph/onnx_io_util.h"

/* protobuf's own default recursion limit */
#define MAX_NESTING 100

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) { /* at most 10 bytes */
        if (*p >= end) return 0;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

/* protobuf-c recurses once per nested message with no limit, so a small file nesting
 * messages a million deep would overflow the stack. Walk the wire format first, descending
 * only into fields the schema declares as messages (exactly where protobuf-c recurses).
 * Returns 1 when well formed, 0 when malformed, -1 when nested too deep, -2 when a string
 * that names something (all but doc strings) holds a NUL: protobuf-c cuts it there, so an
 * external-data location "w.bin\0../../x" would mean one file to us and another to a tool
 * that reads the whole string (*nul_in: "Message.field"). */
static int check_nesting(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                         int depth, char *nul_in, size_t nul_len)
{
    if (depth > MAX_NESTING) return -1;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return 0;
        uint64_t num = key >> 3;
        switch (key & 7) {
        case 0:
            if (!read_varint(&p, end, &v)) return 0;
            break;
        case 1:
            if (end - p < 8) return 0;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return 0;
            p += 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            const ProtobufCFieldDescriptor *f =
                num <= UINT_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)num) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                int r = check_nesting(f->descriptor, p, p + v, depth + 1, nul_in, nul_len);
                if (r != 1) return r;
            } else if (f && f->type == PROTOBUF_C_TYPE_STRING && strcmp(f->name, "doc_string") != 0 &&
                       memchr(p, 0, v)) {
                snprintf(nul_in, nul_len, "%s.%s", d->short_name, f->name);
                return -2;
            }
            p += v;
            break;
        }
        default: /* groups and reserved wire types: ONNX has none */
            return 0;
        }
    }
    return 1;
}

void fr_onnx_decoded_free(decoded_model *d)
{
    if (d->m) onnx__model_proto__free_unpacked(d->m, &d->budget.alloc);
    d->m = NULL;
}

fr_status fr_onnx_decode_model(const void *data, size_t len, const char *what, decoded_model *d)
{
    d->m = NULL;
    if (len == 0) return fr_error(FR_ERR_PARSE, "'%s' is empty, not an ONNX model", what);
    if ((uint64_t)len > FR_ONNX_MAX_PROTO_BYTES)
        return fr_error(FR_ERR_UNSUPPORTED,
                        "'%s' is %zu bytes, more than protobuf's 2 GiB limit for one message "
                        "(large weights belong in ONNX external data files)", what, len);
    char nul_in[128];
    int r = check_nesting(&onnx__model_proto__descriptor, data, (const uint8_t *)data + len, 0, nul_in,
                          sizeof nul_in);
    if (r == -2)
        return fr_error(FR_ERR_PARSE, "'%s' is not a valid ONNX model (a %s string holds a NUL byte)", what, nul_in);
    if (r < 0)
        return fr_error(FR_ERR_PARSE,
                        "'%s' is not a valid ONNX model (messages nested deeper than %d levels)",
                        what, MAX_NESTING);
    if (r == 0)
        return fr_error(FR_ERR_PARSE, "'%s' is not a valid ONNX model (protobuf decode failed)", what);
    FR_TRY(fr_pb_budget_init(&d->budget, len)); /* graph/pb_budget.h: FP8RUN_MAX_DECODE_BYTES */
    d->m = onnx__model_proto__unpack(&d->budget.alloc, len, data);
    if (!d->m) {
        if (d->budget.exceeded)
            return fr_error(FR_ERR_PARSE,
                            "'%s' is not a valid ONNX model (decoding it needs more than %zu bytes "
                            "of memory, far more than a real model of its size; %s raises the limit)",
                            what, d->budget.limit, fr_limit_env(FR_LIMIT_DECODE_BYTES));
        return fr_error(FR_ERR_PARSE, "'%s' is not a valid ONNX model (protobuf decode failed)", what);
    }
    if (!d->m->graph) {
        fr_onnx_decoded_free(d);
        return fr_error(FR_ERR_PARSE, "'%s' is not a valid ONNX model (it has no graph)", what);
    }
    return FR_OK;
}
