/* What the fusions left: after them, the ops that mean a pattern was not recognized are
 * counted and named, so `fp8run info` and the training log say so instead of a model training
 * at a fraction of its speed in silence. It changes nothing in the graph.
 *
 * Counted (ONNX domain): Softmax (an attention left as MatMul/Softmax/MatMul), ReduceMean (a
 * norm written out: RMSNorm, or LayerNorm below opset 17), Erf, Tanh and Sigmoid (MLP
 * activations: GELU, GELU-tanh, SiLU). A model may use them on purpose elsewhere (a
 * classifier's Tanh, a gate's Sigmoid): the report is a hint, never an error. */
#ifndef FR_UNFUSED_CHECK_H
#define FR_UNFUSED_CHECK_H

#include <stddef.h>

#include "graph/ir.h"

/* *left receives the number of such nodes; detail (n bytes) the summary, e.g.
 * "nothing left unfused" or "3 left unfused: Softmax 2 (first 'attn/Softmax_12'), Erf 1". */
FR_NODISCARD fr_status fr_unfused_check(const fr_graph *g, int *left, char *detail, size_t n);

#endif
