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

#include "op_harness.h"

/* 1 when the CUDA backend is built and a device answers (the first call prints why not). */
int gpu_available(void);
/* Run t's node (already run on the CPU by tn_run, so its outputs are inferred and allocated)
 * on the device: out[o] receives a new host tensor per output (NULL for omitted ones), poisoned
 * with 0x5A bytes before the kernel so skipped elements show. */
fr_status tn_run_gpu(tnode *t, fr_tensor **out);
void gpu_free_outputs(tnode *t, fr_tensor **out);
/* ||got - want|| / ||want|| over float tensors (NaN must meet NaN, inf the same inf: else
 * +inf); for integer/bool/fp8 tensors 0 when every byte is equal, else +inf. */
double gpu_rel_err(const fr_tensor *got, const fr_tensor *want);
/* A main() for GPU test programs: SKIP (exit 0) without a device, else fr_test_main. */
int gpu_test_main(CU_SuiteInfo *suites);

#endif
