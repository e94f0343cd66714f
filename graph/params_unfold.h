/* Un-folding a parameter the exporter folded with a scalar through one elementwise op
 * (internal to graph/params.c), and the rows of a position table a static export folded.
 *
 * Gemma's RMSNorm reads 1 + w; onnxscript folds it into one initializer ("add_4", folded_from
 * ['model.layers.0.input_layernorm.weight', 'val_3']), and merges the five equal norms' copies
 * into it. The op is the fx node's (the value's name: add_N, sub_N, mul_N); the scalar is an
 * initializer of the list when the file holds it, else the literal beside `self.<leaf>` in the
 * source line of the readers' stack trace ("output * (1.0 + self.weight.float())"), all
 * readers agreeing. w = inverse(v) is kept only where op(w) == v bit for bit in every element;
 * otherwise nothing changes (the constant stays, reported lost). The value becomes Op(w, c);
 * an all-equal w read inside other modules that own an unheld parameter of the same leaf name
 * (model.layers.0.post_attention_layernorm + ".weight") gives each its own copy and Op. */
#ifndef FR_PARAMS_UNFOLD_H
#define FR_PARAMS_UNFOLD_H

#include "graph/ir.h"

/* 1 when `name` is a PARAMETER target of the exporter's signature. */
typedef int (*fr_param_pred)(const void *ctx, const char *name);

/* *done = 1 when initializer fid was un-folded as above. */
FR_NODISCARD fr_status fr_params_unfold_scalar(fr_graph *g, int fid, fr_param_pred is_param, const void *ctx, int *done);

/* A static export's position embedding ("embedding_1" [1, T, D], folded from Gather(table,
 * arange) or a position_ids slice): the file holds only rows 0..T-1 of `table`, and not the
 * table's length, so the table itself cannot be rebuilt. Those rows train as a parameter
 * named "<table>[0:T]" [T, D] (the table's row layout; Reshape gives the value back); a
 * lookup without that evidence trains as stored. *done = 1 for either. */
FR_NODISCARD fr_status fr_params_unfold_rows(fr_graph *g, int fid, const char *table, int *done);

#endif
