/* GPU op tests: run the node of a tnode (tests/op_harness.h) on the CUDA backend with the same
 * inputs as on the CPU, and compare.
 *
 *     if (!gpu_available()) return;          // prints one SKIP line per program
 *     tnode t; tn_init(&t, "Softmax", 13, 1, ins, 0u, 1);
 *     FR_ASSERT_OK(tn_run(&t));              // CPU reference into t.out
 *     fr_tensor *g[TN_MAX];
 *     FR_ASSERT_OK(tn_run_gpu(&t, g));       // GPU results, same shapes (caller frees)
 *     CU_ASSERT(gpu_rel_err(g[0], t.out[0]) <= 1e-5);
 *
 * Without the CUDA backend or without a device, gpu_available() is 0 and the programs pass
 * after saying so: CI has no GPU. */
#ifndef FR_GPU_HARNESS_H
#define FR_GPU_HARNESS_H

#include "tests/op_harness.h"
#include "runtime/train/trainer.h"

/* 1 when the CUDA backend is built and a device answers (the first call prints why not). */
int gpu_available(void);
/* The context tn_run_gpu runs on (a fr_cuda_ctx; NULL without a device), for tests that set
 * its choices (fp8_fast_accum, gemm_tune). */
struct fr_cuda_ctx *gpu_ctx(void);
/* Run t's node (already run on the CPU by tn_run, so its outputs are inferred and allocated)
 * on the device: out[o] receives a new host tensor per output (NULL for omitted ones), poisoned
 * with 0x5A bytes before the kernel so skipped elements show. */
fr_status tn_run_gpu(tnode *t, fr_tensor **out);
/* The same on context ctx (NULL: the harness's), e.g. one with another --attention choice. */
fr_status tn_run_gpu_on(struct fr_cuda_ctx *ctx, tnode *t, fr_tensor **out);
void gpu_free_outputs(tnode *t, fr_tensor **out);
/* ||got - want|| / ||want|| over float tensors (NaN must meet NaN, inf the same inf: else
 * +inf); for integer/bool/fp8 tensors 0 when every byte is equal, else +inf. */
double gpu_rel_err(const fr_tensor *got, const fr_tensor *want);
/* gpu_rel_err with the float denominator at least floor_norm: for results whose natural scale
 * is known (an input's norm) and whose own norm can fall far below it by cancellation, as
 * dy * f'(v) does near a root of f'. */
double gpu_rel_err_floor(const fr_tensor *got, const fr_tensor *want, double floor_norm);
/* ||got - want|| / ||want|| between float tensors of any float dtypes (bf16 against float64,
 * say), by value; INFINITY on a count mismatch or any non-finite element. */
double gpu_rel_l2(const fr_tensor *got, const fr_tensor *want);

/* ---- comparing with a readable report (on stderr), shared by the GPU test programs ---- */

/* Element i as its value and its bytes: "1.5 (0x3fc00000)". */
void gpu_print_elem(const fr_tensor *x, int64_t i);
/* The case: `what`, the node's op with its attributes, every input's dtype and shape. */
void gpu_print_case(const char *what, tnode *t);
/* One output that failed its tolerance (err = gpu_rel_err(got, want) > tol), named `name`:
 * dtype, shape, error, how many elements differ (beyond 10 x tol relative for float32/64,
 * NaN meeting NaN; any byte for other dtypes), the first and the largest of them with both
 * values. Returns the flat index of the first (-1: none single out, only the norm fails). */
int64_t gpu_print_mismatch(const char *name, const fr_tensor *got, const fr_tensor *want, double err, double tol);
/* Called after an output's mismatch report with the first differing element (i >= 0), to
 * print what a program knows about it (the inputs there, say). */
typedef void (*gpu_at_fn)(tnode *t, const fr_tensor *want, int64_t i);
/* t already ran on the CPU (tn_run): run it on the GPU and compare every output within tol
 * (gpu_rel_err; 0: bit for bit). On failure prints the case once and each mismatch, then
 * asserts (CU_ASSERT); returns 1 when all match. */
int gpu_check(tnode *t, double tol, const char *what);
/* gpu_check, calling at (may be NULL) after each mismatch report. */
int gpu_check_at(tnode *t, double tol, const char *what, gpu_at_fn at);
/* gpu_check_at measuring float outputs with gpu_rel_err_floor(floor_norm). */
int gpu_check_floor(tnode *t, double tol, double floor_norm, const char *what, gpu_at_fn at);
/* Outputs that gpu_check passed under a tolerance > 0, bit-identical to the CPU or only
 * within the tolerance (programs print them: the GPU is meant to add in the CPU's order). */
extern int gpu_n_exact, gpu_n_close;

/* ||a's parameters - b's|| / ||b's|| over every parameter of a (by name; b must have them). */
double gpu_params_rel_diff(fr_trainer *a, fr_trainer *b);

/* The trainers' test model: a generated Llama of d 64, 2 layers, 4/2 heads, ffn 128, vocab 256,
 * max length 32 (every Linear's dims multiples of 16, so the fp8 paths take no padding). */
fr_graph *gpu_tiny_llama(void);
/* n token ids below vocab from the xorshift64 state *s (a fixed batch stream per seed). */
void gpu_windows(uint64_t *s, int64_t *w, int64_t n, int64_t vocab);

/* A main() for GPU test programs: SKIP (exit 0) without a device, else fr_test_main. */
int gpu_test_main(CU_SuiteInfo *suites);

#endif
