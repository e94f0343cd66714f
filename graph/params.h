/* Which initializers are trained.
 *
 * With the dynamo exporter's record (torch.onnx.export(..., dynamo=True), ONNX IR 10
 * metadata_props): the parameters are the initializers whose InputSpec.kind is PARAMETER, under
 * the module's names. The exporter also rewrites what it stores, and each rewrite is undone so
 * that training, checkpoints and the exported model see the module's parameters:
 *  - folded: onnxscript folds W^T of a Linear into an initializer ("val_93", folded_from
 *    ['...q_proj.weight']). Such a 2-D initializer folded from exactly one parameter becomes
 *    Transpose(W) again, W an initializer of the module's name and layout ([out, in]).
 *  - merged by value: equal initializers are stored once (all RMSNorm gains are ones). The node
 *    reading it names the parameter it meant in its fx_node text; an all-equal initializer
 *    read under several parameters' names is split into one copy per name. One with varied
 *    values read under several names is a real tie (LM head = embedding) and stays one, named
 *    as the module's first (named_parameters() keeps that one).
 *  - folded with a scalar (Gemma's 1 + w) or to the rows a static export reads (position
 *    tables): see params_unfold.h.
 * BUFFER, CONSTANT_TENSOR and other folded initializers (masks, rotary tables) are constants.
 *
 * Without the record every float initializer is trained except, by rule: scalars (one
 * element: exponents, epsilons); tensors read only at non-differentiable inputs (Pow exponent,
 * Where condition, shapes, axes, indices); additive masks (every element 0 or <= -1e30, at
 * least one of the latter).
 *
 * Each float initializer's param_note says where a trained one came from ("parameter",
 * "parameter, un-folded from 'val_93' (Transpose)") or why one is not trained. */
#ifndef FR_PARAMS_H
#define FR_PARAMS_H

#include "graph/ir.h"

/* Sets FR_VAL_PARAM and param_note on g's float initializers, rewriting folded and merged
 * parameters as above (g topologically sorted again). *n_lost (may be NULL) counts
 * initializers folded from a parameter through ops that cannot be undone: that parameter
 * is not trained (its note says so). */
FR_NODISCARD fr_status fr_params_select(fr_graph *g, int *n_lost);

#endif
