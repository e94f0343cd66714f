/* The operand checks that the fused residual + norm ops share (ops/add_norm.c: AddRMSNorm,
 * ops/add_layer_norm.c: AddLayerNorm), so both read a node's tensors and attributes alike. */
#ifndef FR_OPS_ADD_NORM_H
#define FR_OPS_ADD_NORM_H

#include "ops/norm.h"
#include "ops/op.h"

/* Scale (or a bias; `what` names it) covers exactly the normalized dims of X: right-aligned,
 * leading size-1 dims allowed, float32. */
FR_NODISCARD fr_status fr_add_norm_check_param(const fr_node *n, const fr_value *x, const fr_value *s,
                                               const fr_norm_cfg *c, const char *what);
/* Scale of X (fr_add_norm_check_param naming it "Scale"). */
FR_NODISCARD fr_status fr_add_norm_check_scale(const fr_node *n, const fr_value *x, const fr_value *s,
                                               const fr_norm_cfg *c);
/* x is float32, or bfloat16 when bf16_ok (B, dY); `what` names it in the error. */
FR_NODISCARD fr_status fr_add_norm_check_x(const fr_node *n, const fr_value *x, const char *what, int bf16_ok);
/* Y's dtype from the attribute y_dtype ("float32", the default, or "bfloat16"). */
FR_NODISCARD fr_status fr_add_norm_y_dtype(const fr_node *n, fr_dtype *dt);

/* AddLayerNorm's B against A: the rows of B (B repeats every that many rows of A, whose rows are
 * of len elements over the dims [axis, rank)), or 0 when B is not A's trailing dims from a dim at
 * or before axis on (leading 1s allowed). */
int64_t fr_add_layer_norm_b_rows(const fr_value *a, const fr_value *b, int axis, int64_t len);

#endif
