/* Canonicalizing passes that turn an imported model into a graph the executor can run:
 * Identity removal, shape/dtype inference with constant folding, dead-node elimination, and
 * fr_prepare_forward, the pipeline that runs them in order.
 *
 * A prepared graph has: nodes in topological order, every node's op resolved, every value a
 * live node reads or writes with a dtype and a full static shape, no dead nodes, and constants
 * (initializers, folded values) held in value->constant. */
#ifndef FR_PASSES_H
#define FR_PASSES_H

#include "graph/ir.h"

/* A symbolic dimension fixed to a value (from --dim NAME=VALUE). */
typedef struct fr_dim_binding {
    const char *name;
    int64_t value;
} fr_dim_binding;

/* The concrete shape a caller will feed to a graph input (e.g. from a .npy file). Symbolic
 * dims of the input not fixed by fr_prepare_options.dims are taken from it, and unnamed
 * unknown dims too; fixed dims must match it. */
typedef struct fr_input_shape {
    const char *name;
    int rank;
    int64_t dims[FR_MAX_RANK];
} fr_input_shape;

/* Default cap on the element count of a folded output: folding a large tensor (a causal
 * mask of [seq, seq] for long sequences, a ConstantOfShape of a weight's size) would keep it
 * in the graph for the whole session and write it into exported models, while computing it
 * at run time costs little. Shape-carrying tensors are tiny and always far below the cap. */
#define FR_FOLD_MAX_ELEMENTS_DEFAULT ((int64_t)1 << 20)

typedef struct fr_prepare_options {
    const fr_dim_binding *dims;  /* not owned; n_dims entries; a name given twice is an error */
    int n_dims;
    const fr_input_shape *input_shapes; /* not owned; may be NULL */
    int n_input_shapes;
    /* Constant folding (default on). Off also means Shape is not folded, so graphs that
     * compute shapes at run time fail inference: only for tests and debugging. */
    int fold;
    int64_t fold_max_elements;   /* <= 0: FR_FOLD_MAX_ELEMENTS_DEFAULT */
} fr_prepare_options;

void fr_prepare_options_default(fr_prepare_options *o);

/* What the pipeline did (for `fp8run info` and tests). */
typedef struct fr_prepare_stats {
    int identities_removed;
    int nodes_folded;
    int nodes_removed;           /* by DCE, folded nodes included */
} fr_prepare_stats;

/* The whole forward pipeline: toposort, Identity removal, DCE, op resolution, fixing the
 * symbolic dims of graph inputs (an input dim still unknown afterwards is FR_ERR_SHAPE naming
 * the input and the dim, and the --dim flag to give), inference with folding, a check that
 * graph outputs match the shapes the model declares, DCE and compaction. opt may be NULL
 * (defaults: no dims, fold on); stats may be NULL. On failure the graph may be partly
 * rewritten: the caller discards it. */
FR_NODISCARD fr_status fr_prepare_forward(fr_graph *g, const fr_prepare_options *opt,
                             fr_prepare_stats *stats);

/* A value's shape as text for messages and `fp8run info`: "[batch, seq=8, 768]" (symbolic
 * names kept, "=N" once fixed; "?" for an unknown unnamed dim; "(no shape)" for rank -1).
 * Always terminated; returns buf. */
char *fr_value_shape_text(const fr_value *v, char *buf, size_t n);

/* ---- the individual passes ---- */

/* passes/identity.c: remove Identity nodes by rewiring their consumers to the Identity's
 * input. A graph output keeps its name: when an Identity writes a graph output, the node
 * producing its input writes the output value directly instead; when that is impossible (the
 * input is a graph input, a constant or another graph output) the Identity stays. The removed
 * nodes are compacted away. Needs a topologically sorted graph. */
FR_NODISCARD fr_status fr_remove_identities(fr_graph *g, int *n_removed);

/* passes/infer.c: inference in node order (the graph must be topologically sorted and its
 * ops resolved). After each node every output must have a dtype and a full static shape,
 * else FR_ERR_INTERNAL naming the op (a bug in its infer). With fold != 0, a node whose inputs
 * are all foldable constants (constant, and neither FR_VAL_PARAM nor FR_VAL_STATE: trainable
 * parameters and runtime state must stay live inputs) is run right away with its CPU kernel
 * and its outputs get value->constant and FR_VAL_FOLDED; Shape and Size fold whenever their
 * input's shape is static (they read no data). Nodes whose op has FR_OP_NO_FOLD, or an output
 * with more than max_elements elements, are not folded. Folded nodes stay in the graph, to be
 * removed by fr_dce. */
FR_NODISCARD fr_status fr_infer_graph(fr_graph *g, int fold, int64_t max_elements, int *n_folded);
/* Fold value vid on demand, past the cap fr_infer_graph used: where vid is computed from
 * foldable constants only (up to `depth` nodes up, no output over max_elements), run those
 * nodes now. *folded = 1 when vid then holds a constant. For passes that must read a value
 * the cap left unfolded (a [T, T] causal mask is 4M elements at T = 2048). */
FR_NODISCARD fr_status fr_fold_value(fr_graph *g, int vid, int64_t max_elements, int depth, int *folded);

/* passes/dce.c: mark dead every node none of whose outputs (outputs holding a constant do not
 * count: folded) reaches a graph output. Marks only (call fr_graph_compact). */
FR_NODISCARD fr_status fr_dce(fr_graph *g, int *n_removed);

#endif
