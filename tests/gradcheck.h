/* Gradient checks: compare the backward graph that fr_autodiff builds from an op's gradient
 * rule with central differences, both computed in float64 (or float32 with a looser
 * tolerance for ops that have no float64 kernel).
 *
 * Build a graph whose inputs are constant values (fr_gc_add_input), add the node(s) under
 * test with the usual IR builders (infer them with fr_node_infer), then call fr_gradcheck on
 * the output: it adds loss = Dot(out, R) with a fixed random R, differentiates with respect
 * to the inputs flagged differentiable, and checks every element (up to a cap per input). */
#ifndef FR_GRADCHECK_H
#define FR_GRADCHECK_H

#include "graph/ir.h"
#include "harness.h"

/* A constant input value named `name` filled with random N(0,1) values (float) or the given
 * integer data (ints may be NULL for float inputs). Returns its value id. */
int fr_gc_add_input(fr_graph *g, fr_rng *r, const char *name, fr_dtype dt, int rank,
                    const int64_t *dims, const int64_t *ints);
/* Runs the check; returns the worst relative L2 error over the inputs in wrt (each input's
 * ||numeric - analytic|| / max(||numeric||, 1e-12)) and prints a line per input on failure.
 * Returns +inf when something failed to build or run (the message is printed). */
double fr_gradcheck(fr_graph *g, fr_rng *r, int out_vid, int n_wrt, const int *wrt);

/* Run every node of g in order on the CPU, values held in a table indexed by value id
 * (constants read in place). tensors[vid] receives owned tensors for computed values.
 * Used by gradcheck and by tests that need no executor. */
fr_status fr_gc_run(fr_graph *g, fr_tensor **tensors);
void fr_gc_free_tensors(fr_graph *g, fr_tensor **tensors);

#endif
