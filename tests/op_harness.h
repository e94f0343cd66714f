/* Forward op tests: run one node the way the executor does, and the small tensor helpers
 * those tests share.
 *
 * tn_* (test node): a graph holding the single node "node_under_test" whose inputs are graph
 * inputs or constants (initializers, which infer() can read); tn_run() calls infer(),
 * allocates every output from the inferred dtype and shape, and calls the CPU kernel.
 *
 *     fr_tensor *ins[2] = {x, axes};
 *     tnode t;
 *     tn_init(&t, "ReduceSum", 13, 2, ins, 2u, 1);   // input 1 is a constant
 *     TN_ATTR(&t, int, "keepdims", 0);
 *     FR_ASSERT_OK(tn_run(&t));                       // t.out[0] holds the result
 *     tn_free(&t);
 *
 * tt_* (test tensor): make tensors from values or from an fr_rng, compare results. */
#ifndef FR_OP_HARNESS_H
#define FR_OP_HARNESS_H

#include "graph/ir.h"
#include "tests/harness.h"
#include "ops/op.h"

#define TN_MAX 10 /* inputs / outputs a test node can have */

typedef struct tnode {
    fr_graph *g;
    int nid, n_in, n_out;
    int in_vid[TN_MAX], out_vid[TN_MAX]; /* -1: omitted */
    fr_tensor *in[TN_MAX];  /* the caller's tensors (not owned), or the constant's clone */
    fr_tensor *out[TN_MAX]; /* owned; allocated by tn_run, NULL for omitted outputs */
} tnode;

/* A graph importing opset `opset` of `domain`, holding one node `op` (named
 * "node_under_test") with n_in inputs and n_out outputs. ins[i] == NULL is an omitted optional
 * input; bit i of const_mask makes input i a constant (an initializer holding a clone of
 * ins[i]), otherwise it is a graph input with ins[i]'s dtype and shape and tn_run hands the
 * kernel ins[i] itself. */
void tn_init_domain(tnode *t, const char *domain, const char *op, int64_t opset, int n_in,
                    fr_tensor *const *ins, unsigned const_mask, int n_out);
/* tn_init_domain in the default ONNX domain. */
void tn_init(tnode *t, const char *op, int64_t opset, int n_in, fr_tensor *const *ins,
             unsigned const_mask, int n_out);
/* Omit optional output o (the node gets -1 there; t->out[o] stays NULL). */
void tn_omit_output(tnode *t, int o);
/* The node, to adjust before tn_run (the pointer is valid until the graph changes). */
fr_node *tn_node(tnode *t);
/* Set an attribute on the node, asserting success: TN_ATTR(&t, int, "axis", 1),
 * TN_ATTR(&t, ints, "perm", 3, perm); kind is a fr_node_set_attr_<kind> suffix. */
#define TN_ATTR(t, kind, ...) FR_ASSERT_OK(fr_node_set_attr_##kind(tn_node(t), __VA_ARGS__))
/* infer(), outputs allocated from the inferred shapes, then the kernel. Outputs start as 0x5A
 * bytes so an element the kernel skips cannot pass for a right answer. Returns the first
 * failing status (outputs allocated so far stay in t->out). */
fr_status tn_run(tnode *t);
/* Frees the graph and the outputs still in t->out (set one to NULL to keep it). */
void tn_free(tnode *t);
/* Asserts that the last error names the node under test and contains `what`. */
void tn_assert_error(const char *what);

/* A Gemm (opset 13) on random normal inputs, the case shared by the CPU and GPU tests: A is
 * [M, K] ([K, M] with ta), B [K, N] ([N, K] with tb), C has shape #ci of TT_GEMM_N_C: none,
 * scalar, [1], [N], [1, N], [M, 1], [M, N], [1, 1]. set_attrs: set transA, transB, alpha and
 * beta (else the node keeps the defaults). ins receives A, B, C (NULL: none), which the caller
 * frees after tn_free. */
#define TT_GEMM_N_C 8
void tn_init_gemm(tnode *t, fr_rng *r, fr_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha,
                  float beta, int ci, int set_attrs, fr_tensor **ins);

/* Shapes of a normalization's Scale / B relative to X (rank xr, dims xd) and the normalized
 * axis (>= 0), for the CPU and GPU norm tests: EXACT X.dims[axis:]; LAST [X.dims[-1]]; LEAD1
 * [1] + X.dims[axis:]; FULL X.dims (varies per row); SIZE1 X.dims[axis:] with its first dim
 * set to 1. Writes d, returns the rank. */
typedef enum tt_pshape { TT_P_EXACT, TT_P_LAST, TT_P_LEAD1, TT_P_FULL, TT_P_SIZE1 } tt_pshape;
int tt_param_shape(tt_pshape p, int xr, const int64_t *xd, int axis, int64_t *d);

/* ---- test tensors ---- */

/* Dtypes of every element size and kind that data-movement ops must copy bit-exactly. */
extern const fr_dtype tt_dtypes[];
#define TT_N_DTYPES 8

/* A zeroed tensor (asserts the allocation). */
fr_tensor *tt_new(fr_dtype dt, int rank, const int64_t *dims);
/* 1-D int64 or int32 tensor holding v[0..n) (shape, axes, repeats inputs). */
fr_tensor *tt_ints(fr_dtype dt, int n, const int64_t *v);
/* Rank-0 tensor holding v (converted as tt_set does). */
fr_tensor *tt_scalar(fr_dtype dt, double v);
/* float32 [1] tensor holding v (the Linear family's scale state inputs). */
fr_tensor *tt_scalar1(float v);
/* The values of a float32 or bfloat16 tensor as a new float32 array (caller frees). */
float *tt_floats(const fr_tensor *t);
/* Element i = v converted to the dtype (float32/64, int8/16/32/64, uint8, bool = v != 0). */
void tt_set(fr_tensor *t, int64_t i, double v);

/* Uniform integer in [lo, hi]. */
int64_t tt_rand_int(fr_rng *r, int64_t lo, int64_t hi);
/* Random dims in [1, max], each 0 with probability p_zero. */
void tt_rand_dims(fr_rng *r, int rank, int64_t *dims, int64_t max, double p_zero);
/* Random tensors. Bool elements are always a fair 0/1.
 * uniform: floats uniform in [lo, hi), integer dtypes uniform integers in [lo, hi]. */
fr_tensor *tt_rand_uniform(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double lo,
                           double hi);
/* Uniform integers in [lo, hi] in any numeric dtype (floats too: ties, integral exponents). */
fr_tensor *tt_rand_ints(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, int64_t lo,
                        int64_t hi);
/* mean + sd * N(0, 1); integer dtypes get the rounded value. */
fr_tensor *tt_randn(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double mean,
                    double sd);
/* Random bytes (bools a fair 0/1), for ops that move bits: any pattern must survive. */
fr_tensor *tt_rand_bits(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims);

/* Row-major coordinates <-> flat index. */
void tt_unravel(int64_t i, int rank, const int64_t *dims, int64_t *c);
int64_t tt_ravel(const int64_t *c, int rank, const int64_t *dims);
/* Flat index in src of element i of out, src broadcast to out's shape (numpy rules). */
int64_t tt_bcast_index(const fr_tensor *src, const fr_tensor *out, int64_t i);

/* Asserts y is non-NULL with dtype dt and exactly this shape (fatal on rank and dims). */
void tt_assert_shape(const fr_tensor *y, fr_dtype dt, int rank, const int64_t *dims);
/* Element yi of y has the same bytes as element xi of x (same dtype). */
int tt_same_elem(const fr_tensor *y, int64_t yi, const fr_tensor *x, int64_t xi);
/* Relative L2 error of y's first n elements (read as double) against ref; non-finite values
 * must agree exactly (NaN with NaN) and are left out of the norm, else +inf. */
double tt_rel_err(const fr_tensor *y, const double *ref, int64_t n);

#endif
