/* Checks of the bfloat16 contract shared by the AddRMSNorm and SwiGLU tests (CPU:
 * tests/test_add_norm_bf16.c, tests/test_swiglu_bf16.c; GPU: tests/test_gpu_add_norm.c,
 * tests/test_gpu_swiglu.c): a bfloat16 input gives the bits of the float32 input of the same
 * values, and a bfloat16 output is the float32 output rounded to nearest even.
 * The rounding here is written out (not fr_f32_to_bf16), so the library's is checked too. */
#ifndef FR_TESTS_BF16_CHECK_H
#define FR_TESTS_BF16_CHECK_H

#include "tests/op_harness.h"

/* Rounds every element of float32 t to a bfloat16 value in place (t then holds exactly what a
 * bfloat16 tensor can) and returns that bfloat16 tensor (caller frees). */
fr_tensor *bc_bf16_pair(fr_tensor *t);
/* The number of elements whose bytes differ between a and b (same dtype and count; else
 * asserts and returns -1); prints the first under label. */
int64_t bc_bits_diff(const char *label, const fr_tensor *a, const fr_tensor *b);
/* The number of elements of bfloat16 bf that are not float32 f rounded to nearest even;
 * *far (may be NULL) gets those more than one bfloat16 ulp away. Prints the first. */
int64_t bc_round_diff(const char *label, const fr_tensor *bf, const fr_tensor *f, int64_t *far);
/* got (an output of a case with bfloat16 inputs or outputs) against want (the same output of
 * the all-float32 case): bfloat16 got must be want rounded, float32 got want's bits. Asserts;
 * returns 1 when they agree. */
int bc_expect(const char *label, const fr_tensor *got, const fr_tensor *want);

#endif
