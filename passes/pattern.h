/* Graph pattern matching for the fusion passes (attention_fuse, swiglu_fuse, rotary_fuse):
 * who reads a value, who produces it, which node an op is. A pass holds one fr_readers table,
 * rebuilds it after each rewrite (nodes marked dead stop counting) and frees it at the end. */
#ifndef FR_PATTERN_H
#define FR_PATTERN_H

#include "graph/ir.h"

struct fr_slice_plan; /* ops/layout_plan.h */

typedef struct fr_readers {
    fr_graph *g;
    int *count; /* per value: input slots of live nodes reading it, plus 1 if a graph output */
} fr_readers;

/* (Re)count the readers of every value of r->g; `who` names the pass in an out-of-memory
 * error. */
FR_NODISCARD fr_status fr_readers_refresh(fr_readers *r, const char *who);
void fr_readers_free(fr_readers *r);

/* The live node reading v when it is v's only reader (one input slot, not a graph output);
 * NULL otherwise. */
const fr_node *fr_sole_reader(const fr_readers *r, int v);
/* v's producer when it is live (NULL for inputs, constants and v < 0). */
const fr_node *fr_live_producer(const fr_graph *g, int v);
/* n is a live node of the default ONNX domain with this op_type. */
int fr_is_onnx_op(const fr_node *n, const char *op);
/* n (may be NULL) is a live two-input, one-output `op` reading v: its other input; else -1. */
int fr_binary_other(const fr_node *n, const char *op, int v);
/* The first live `op` node reading v (of any number of readers); NULL if none. */
const fr_node *fr_reader_op(const fr_readers *r, int v, const char *op);
/* A Reshape of x to dims (a new int64 initializer base/shape; inferred) writing *out when that is
 * >= 0 on entry, else a new value named after base (returned in *out). */
FR_NODISCARD fr_status fr_pattern_reshape(fr_graph *g, int x, int rank, const int64_t *dims, const char *base, int *out);
/* Same rank and dims. */
int fr_same_dims(const fr_value *a, const fr_value *b);
/* A fusion pass's loop over the nodes present at its start (nodes it adds are no candidates):
 * where match(ctx, node, m) says yes (filling the caller's match record m), fuse(ctx, m)
 * rewrites (the first time after importing the ai.fp8run opset); r is refreshed first and
 * after each rewrite (the caller frees it). When anything fused, the graph is compacted and
 * sorted. *count receives the rewrites. */
typedef int (*fr_match_fn)(void *ctx, int node, void *m);
typedef fr_status (*fr_rewrite_fn)(void *ctx, const void *m);
FR_NODISCARD fr_status fr_fuse_loop(fr_readers *r, const char *who, fr_match_fn match, fr_rewrite_fn fuse, void *ctx, void *m,
                       int *count);
/* fr_fuse_loop for a pass whose context is the readers table alone (match and fuse get the
 * fr_readers as ctx); the table is made and freed here. */
FR_NODISCARD fr_status fr_fuse_on_readers(fr_graph *g, const char *who, fr_match_fn match, fr_rewrite_fn fuse, void *m,
                                          int *count);
/* Marks the matched nodes dead[0..n) dead and writes "<name of the last>/<suffix>" into
 * base[size] (the fused node's name). */
void fr_fuse_kill(fr_graph *g, const int *dead, int n, const char *suffix, char *base, size_t size);
/* Input i of node n as a constant integer list (at most FR_MAX_RANK entries): 1 with *cnt
 * entries in vals (*cnt = -1 when the input is absent); 0 when present but no such list. */
int fr_pattern_const_ints(const fr_graph *g, const fr_node *n, int i, int *cnt, int64_t *vals);
/* A live Slice n whose starts, ends, axes and steps are constants (inputs, or attributes before
 * opset 10) resolved against its input's dims into *p (ops/layout_plan.h): 1, else 0. */
int fr_pattern_slice_plan(const fr_graph *g, const fr_node *n, struct fr_slice_plan *p);
/* A 1-D int64 initializer (n values) named after base into *out: a shape, sizes, axes, bounds. */
FR_NODISCARD fr_status fr_pattern_const_i64(fr_graph *g, const char *base, int n, const int64_t *vals, int *out);
/* v is a one-element numeric constant that is not trained (no FR_VAL_PARAM): 1 with its value
 * in *out; 0 otherwise. */
int fr_const_scalar(const fr_graph *g, int v, double *out);

/* ---- scalings several fusions take apart ---- */

/* x = Mul(y, s), Mul(s, y) or Div(y, s), s a finite nonzero untrained constant scalar, y no
 * constant and of x's dims, x float32 and read once: y, with *factor s (or 1/s) and *node the
 * Mul/Div; else -1. */
int fr_match_scalar_scale(const fr_readers *r, int x, double *factor, int *node);
/* x = Reshape/Transpose(..(Mul(y, s))..) (up to 4 layout nodes; OPT scales q_proj's output
 * before the head split), every value float32 and read once, the scaling as
 * fr_match_scalar_scale takes it: y, with *factor, *node (the Mul/Div) and *layout (the layout
 * node that reads the scaled value: reading y instead, the chain yields x / factor exactly);
 * else -1. */
int fr_match_scale_below_layout(const fr_readers *r, int x, double *factor, int *node, int *layout);
/* x = Mul(Tanh(Div(y, c)), c) (either operand order of the Mul; Mul(y, 1/c) for the Div when
 * 1/c is c's reciprocal within 1e-6), c a positive finite untrained constant scalar, the Tanh's
 * input and output float32 and read once (x's readers are the caller's to check): y, with *cap c
 * and nodes[3] the Div, Tanh and Mul; else -1. Gemma 2's softcap, of scores and of logits. */
int fr_match_softcap(const fr_readers *r, int x, double *cap, int nodes[3]);

#endif
