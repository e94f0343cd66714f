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
#include "tests/harness.h"

/* A constant input value named `name` filled with random N(0,1) values (float) or the given
 * integer data (ints may be NULL for float inputs). Returns its value id. */
int fr_gc_add_input(fr_graph *g, fr_rng *r, const char *name, fr_dtype dt, int rank,
                    const int64_t *dims, const int64_t *ints);
/* Runs the check; returns the worst relative L2 error over the inputs in wrt (each input's
 * ||numeric - analytic|| / max(||numeric||, 1e-12)) and prints a line per input on failure.
 * Returns +inf when something failed to build or run (the message is printed). */
double fr_gradcheck(fr_graph *g, fr_rng *r, int out_vid, int n_wrt, const int *wrt);

/* ---- building test graphs ---- */

/* An empty graph importing the default ONNX domain at `opset` (NULL when out of memory). */
fr_graph *fr_gc_new_graph(int64_t opset);
/* Add a node with n_out fresh outputs named after it, not yet inferred (set attributes, then
 * fr_node_infer); outs receives the output values; returns the node id. */
int fr_gc_node(fr_graph *g, const char *op, const char *domain, int n_in, const int *in, int n_out, int *outs);
/* A one-output node of the default domain, inferred; returns its output value. */
int fr_gc_op1(fr_graph *g, const char *op, int n_in, const int *in);
/* How many nodes of g have this op_type. */
int fr_gc_count_nodes(const fr_graph *g, const char *op);
/* A constant float64/float32 input (see fr_gc_add_input) holding v[0..numel). */
int fr_gc_add_values(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims, const double *v);

/* Move a float input's random values at least `margin` away from 0 (keeping their sign), off
 * the kink of Abs, Relu and the like. */
void fr_gc_away_from_zero(fr_graph *g, int vid, double margin);

/* ---- checking ---- */

/* fr_gradcheck, asserting its error is below tol (printed with `what` when not); returns it. */
double fr_gc_check(fr_graph *g, fr_rng *r, int out_vid, int n_wrt, const int *wrt, const char *what, double tol);
/* loss = Dot(out, R) with R = dy[0..numel(out)); differentiates it with respect to wrt
 * (grads[] receives the gradient values) and runs the whole graph: returns the computed
 * tensors by value id (fr_gc_free_tensors, then free). */
fr_tensor **fr_gc_backprop(fr_graph *g, int out_vid, const double *dy, int n_wrt, const int *wrt, int *grads);
/* Value vid's tensor: its constant, else the one computed into t. */
const fr_tensor *fr_gc_value(const fr_graph *g, fr_tensor **t, int vid);
/* Asserts that value `vid` (a constant, or computed into t) holds want[0..n): equal within
 * tol relative, NaN meeting NaN; prints each element that is not. */
void fr_gc_expect(fr_graph *g, fr_tensor **t, int vid, const double *want, int64_t n, double tol, const char *what);
/* ||a - b|| / ||b|| over the elements in double (||a - b|| when b is all zero); +inf when a is
 * NULL or its element count differs from b's. */
double fr_gc_rel_l2(const fr_tensor *a, const fr_tensor *b);

/* Run every node of g in order on the CPU, values held in a table indexed by value id
 * (constants read in place). tensors[vid] receives owned tensors for computed values.
 * Used by gradcheck and by tests that need no executor. */
fr_status fr_gc_run(fr_graph *g, fr_tensor **tensors);
void fr_gc_free_tensors(fr_graph *g, fr_tensor **tensors);

#endif
