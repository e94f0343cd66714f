/* The CPU executor: runs a prepared graph (passes/passes.h: fr_prepare_forward) node by node
 * with each op's CPU kernel.
 *
 * Memory: everything is allocated when the executor is built, nothing per run. Each graph
 * input gets its own buffer. Values computed by nodes live in a pool of blocks planned from
 * the static shapes: a block is handed to a value when its node runs and returns to the pool
 * after the value's last reader, so later values reuse it (graph outputs keep theirs).
 * Constants (initializers, folded values) are read in place from the graph, never copied.
 *
 * Ownership: the executor borrows the graph, which must outlive it and must not change while
 * it exists. Tensors it returns belong to it. */
#ifndef FR_EXECUTOR_H
#define FR_EXECUTOR_H

#include "graph/ir.h"

typedef struct fr_exec fr_exec;

/* Build an executor for a prepared graph. A graph that is not prepared (unresolved op, a value
 * without a static shape, nodes out of order) is FR_ERR_INVALID_ARG naming what is wrong. */
FR_NODISCARD fr_status fr_exec_new(const fr_graph *g, fr_exec **out);
void fr_exec_free(fr_exec *e);

/* Copy t's data into the graph input `name`. Its dtype and shape must equal the prepared
 * input's (FR_ERR_SHAPE naming the input and both shapes otherwise). t stays the caller's;
 * the input keeps this value for later runs until set again. */
FR_NODISCARD fr_status fr_exec_set_input(fr_exec *e, const char *name, const fr_tensor *t);

/* Graph inputs in model order, as prepared (dtype and static shape). */
int fr_exec_n_inputs(const fr_exec *e);
const fr_value *fr_exec_input(const fr_exec *e, int i);

/* Run every node once. Each input some node reads must have been set. A kernel error is
 * returned with its message naming the node. */
FR_NODISCARD fr_status fr_exec_run(fr_exec *e);

/* Graph outputs in model order, after a successful run (NULL before, or after a failed run).
 * The tensors are the executor's: valid until the next fr_exec_run, fr_exec_set_input or
 * fr_exec_free. */
int fr_exec_n_outputs(const fr_exec *e);
const char *fr_exec_output_name(const fr_exec *e, int i);
const fr_tensor *fr_exec_output_at(const fr_exec *e, int i);
/* By name; NULL when no graph output has that name or nothing was run. */
const fr_tensor *fr_exec_output(const fr_exec *e, const char *name);

/* The pool planned for computed values: bytes in all blocks and their count (input buffers
 * and constants not included). */
size_t fr_exec_pool_bytes(const fr_exec *e);
/* The same plan without building anything: what fr_exec_new(g) would give as
 * fr_exec_pool_bytes, and the bytes of its input buffers (input_bytes may be NULL). */
FR_NODISCARD fr_status fr_exec_plan(const fr_graph *g, size_t *pool_bytes, size_t *input_bytes);
int fr_exec_pool_blocks(const fr_exec *e);
/* The most bytes of computed values alive at once as the nodes run (what the pool would need
 * without fragmentation). */
size_t fr_exec_peak_bytes(const fr_exec *e);

#endif
