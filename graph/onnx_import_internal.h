/* Internals shared by the ONNX importer's files: the bounded protobuf decode
 * (graph/onnx_decode.c), TensorProto decoding with external data (graph/onnx_import_tensor.c) and
 * the graph building (graph/onnx_import.c). Not part of any public API. */
#ifndef FR_ONNX_IMPORT_INTERNAL_H
#define FR_ONNX_IMPORT_INTERNAL_H

#include <stddef.h>

#include "graph/ir.h"
#include "graph/pb_budget.h"
#include "schema/onnx.pb-c.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ONNX raw_data is little-endian and import copies it as is: a little-endian host is required"
#endif

typedef struct decoded_model {
    Onnx__ModelProto *m;
    fr_pb_budget budget; /* its allocator points at it: the struct must not move */
} decoded_model;

/* Decode a model file's bytes, bounded in nesting depth and memory before protobuf-c sees them
 * (`what` names the file in messages); a model without a graph is refused. */
FR_NODISCARD fr_status fr_onnx_decode_model(const void *data, size_t len, const char *what, decoded_model *d);
void fr_onnx_decoded_free(decoded_model *d);

typedef struct import_ctx {
    fr_graph *g;
    const Onnx__ModelProto *m;
    const char *model_dir; /* NULL: external data refused */
} import_ctx;

/* TensorProto -> new tensor. `what` names it in messages ("initializer 'w'"). *ext_loc (when
 * ext_loc is non-NULL) receives the external location or stays NULL. */
FR_NODISCARD fr_status fr_onnx_tensor_from_proto(const import_ctx *c, const Onnx__TensorProto *tp, const char *what,
                                                 fr_tensor **out, char **ext_loc);

#endif
