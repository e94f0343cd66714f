/* Linear-family nodes built twice over the same values: once with float32 X / dY, once with
 * those tensors in bfloat16 (ops/linear.h: a bfloat16 input must give the float32 input's
 * results bit for bit). Shared by tests/test_linear_bf16.c (CPU) and
 * tests/test_gpu_linear_bf16.c (the CUDA kernels).
 *
 * lp_make draws X and dY from N(0, sd) and truncates them to bfloat16 values (the float32
 * tensors hold exactly what the bfloat16 ones hold), W in float32, the delayed recipe's scales
 * from the amaxes (X over-scaled so some codes saturate). */
#ifndef FR_TESTS_LINEAR_PAIR_H
#define FR_TESTS_LINEAR_PAIR_H

#include "tests/op_harness.h"

typedef struct lp_case {
    const char *prec, *recipe; /* recipe NULL outside fp8 */
    const char *fmt;           /* fp8_format, NULL: default */
    int transB;
    int64_t lead0, lead1, K, N; /* X [lead0, lead1, K] (lead1 0: X [lead0, K]) */
} lp_case;

typedef struct lp_data {
    fr_tensor *xf, *xb, *dyf, *dyb, *w, *b, *sx, *sw, *sdy; /* sx, sw, sdy: delayed fp8 only */
    int64_t M;
} lp_data;

void lp_make(lp_data *d, const lp_case *c, fr_rng *r);
void lp_free(lp_data *d);

int lp_is_fp8(const lp_case *c);
int lp_is_block(const lp_case *c);
int lp_is_delayed(const lp_case *c);

typedef enum lp_kind {
    LP_FWD,   /* Linear(X, W, B, scales) -> every output of the precision (Y, Xq, ...); the bias
                 B with transB = 1 unless narrow (y_dtype bfloat16 takes none) */
    LP_DGRAD, /* LinearGradData(dY, W, scales) -> dX, amax_dy, dYq (+ scale_inv) where they exist */
    LP_WGRAD  /* LinearGradWeight(Xs, dY, scales) -> dW (+ amax_dy in fp8) */
} lp_kind;

/* Initializes t (tn_free after). x_bf / y_bf: the bfloat16 X / dY instead of the float32 ones.
 * narrow: y_dtype (LP_FWD) or dx_dtype (LP_DGRAD) "bfloat16". saved, saved_sinv (LP_WGRAD, fp8,
 * may be NULL): the forward's Xq and Xq_scale_inv as Xs. Returns t's output names. */
const char *const *lp_init(tnode *t, lp_kind kind, const lp_case *c, const lp_data *d, int x_bf, int y_bf,
                           int narrow, fr_tensor *saved, fr_tensor *saved_sinv);

/* Same dtype, shape and bytes (NULL == NULL); prints what differs under label. */
int lp_same(const char *label, const char *what, const fr_tensor *a, const fr_tensor *b);

/* A bfloat16 tensor that must be float32 tensor f rounded to nearest even (own rounding, not
 * the library's): returns the number of elements that differ (-1: not comparable), and in
 * *near those that are one bfloat16 ulp away or within abs_tol of f (a GPU GEMM writing bf16
 * may round a differently ordered sum; near zero, where the sum cancels, the order moves the
 * value by more than an ulp of it). */
int64_t lp_bf16_of(const fr_tensor *bf, const fr_tensor *f, double abs_tol, int64_t *near);

#endif
