/* Dropout in training graphs: ai.fp8run::KeyedDropout (ops/dropout.h), whose mask is a hash of
 * the key the trainer feeds per micro-batch (ops/dropout_mask.h).
 *
 * The key is one graph input, FR_DROPOUT_KEY_INPUT, int64 [3] = {seed, step, micro-batch}; every
 * KeyedDropout reads it. Each node's stream (its `seed` attribute) is a hash of the node's name,
 * so two dropouts of a graph draw independent masks while a copy of a node (recompute, the
 * backward) draws the same one. */
#ifndef FR_PASSES_DROPOUT_H
#define FR_PASSES_DROPOUT_H

#include "graph/ir.h"

/* The key input of g, added as a graph input when absent (*vid its value id). A value of that
 * name that is not an int64 [3] graph input is FR_ERR_GRAPH. */
FR_NODISCARD fr_status fr_dropout_key(fr_graph *g, int *vid);

/* A KeyedDropout node named `name` with ratio p in (0, 1) reading x: *y is a new value named
 * `out_name` (x's dtype; its shape left to inference). */
FR_NODISCARD fr_status fr_dropout_add(fr_graph *g, int x, double p, const char *name, const char *out_name, int *y);

/* The `dropout` pass (before preparation): every ONNX Dropout in training mode becomes a
 * KeyedDropout with the same ratio, reading the key. Training mode: opset 12+ with a
 * training_mode input that is a constant (an initializer or a Constant node) true and a ratio
 * that is absent (0.5) or such a constant; opset < 7 with is_test 0 (its ratio attribute).
 * Ratio 0 stays the identity; a non-constant ratio or one outside [0, 1) stays ONNX Dropout,
 * which refuses training mode at inference with its own message. A node whose mask output
 * is read is FR_ERR_UNSUPPORTED naming it. Opset 7..11 have no mode and stay inference.
 * ONNX's `seed` attribute is not used: --seed keys the masks. *count: nodes rewritten. */
FR_NODISCARD fr_status fr_dropout_train(fr_graph *g, int *count);

/* For evaluation copies of a training graph: every KeyedDropout becomes the identity (its
 * readers read its input; one writing a graph output gets ratio 0), and the key, once no node
 * reads it, is no graph input any more. *count: nodes changed. */
FR_NODISCARD fr_status fr_dropout_strip(fr_graph *g, int *count);

#endif
