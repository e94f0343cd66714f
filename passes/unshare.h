/* Undoing the exporter's merge of parameters that merely had equal values.
 *
 * torch.onnx.export (eval mode, the default) deduplicates initializers by VALUE: in a freshly
 * initialized model every norm gain is all ones and every bias all zeros, so the export keeps
 * one initializer and gives the others' names to Identity nodes reading it
 * ("m.model.norm.weight" = Identity("m.model.layers.0.input_layernorm.weight")). Trained as the
 * graph says, five separate RMSNorm gains would become one shared gain, and training would part
 * from PyTorch's at the first update.
 *
 * fr_unshare_params turns each such Identity back into an initializer of its own, named as the
 * Identity's output (the parameter's original name) and holding a copy of the data. Only
 * Identities of a trainable float initializer whose elements are all equal are undone: a tensor
 * with varied values shared through an Identity is a real tie, and stays shared. */
#ifndef FR_UNSHARE_H
#define FR_UNSHARE_H

#include "graph/ir.h"

/* *n_unshared (may be NULL) counts the parameters made separate. Compacts the graph. */
FR_NODISCARD fr_status fr_unshare_params(fr_graph *g, int *n_unshared);

#endif
