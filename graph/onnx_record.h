/* The torch.onnx (dynamo) exporter's record, read from ONNX IR-10 metadata_props onto the IR
 * for graph/params.h: InputSpec.kind and onnxscript's folded_from of a value (on its
 * TensorProto or on a value_info of its name), a node's fx_node text and name scopes, and the
 * graph's exported-program signature. Files without them import as before. */
#ifndef FR_ONNX_RECORD_H
#define FR_ONNX_RECORD_H

#include "graph/ir.h"
#include "schema/onnx.pb-c.h"

/* Keeps what v already has (the TensorProto's record wins over a value_info's). */
FR_NODISCARD fr_status fr_onnx_record_value(fr_value *v, Onnx__StringStringEntryProto *const *kv, size_t n);
FR_NODISCARD fr_status fr_onnx_record_node(fr_node *nd, const Onnx__NodeProto *np);
FR_NODISCARD fr_status fr_onnx_record_graph(fr_graph *g, const Onnx__GraphProto *gp);

#endif
