/* Every op the CPU backend runs has a CUDA kernel (checked without a GPU: the registry is
 * compiled in every CUDA build, so CI checks it). Skips when fp8run is built without CUDA. */
#include <stdio.h>
#include <string.h>

#include "tests/harness.h"
#include "ops/op.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#endif

static void test_every_op_has_a_cuda_kernel(void)
{
#ifdef FP8RUN_HAVE_CUDA
    int n = 0, missing = 0;
    for (int i = 0; fr_op_at(i); i++, n++) {
        const fr_op_def *d = fr_op_at(i);
        if (!d->cpu) continue; /* lowered in preparation before any backend runs (ONNX Attention-23) */
        const fr_cuda_kernel_def *k = fr_cuda_kernel_find(d->domain, d->op_type);
        if (!k || !k->run) {
            printf("\n  no CUDA kernel for %s%s%s", d->domain, d->domain[0] ? "::" : "", d->op_type);
            missing++;
        }
    }
    /* and no kernel for an op the CPU does not know */
    for (int i = 0; fr_cuda_kernel_at(i); i++) {
        const fr_cuda_kernel_def *k = fr_cuda_kernel_at(i);
        if (!fr_op_find(k->domain, k->op_type)) {
            printf("\n  CUDA kernel for unknown op %s::%s", k->domain, k->op_type);
            missing++;
        }
    }
    printf(" (%d ops, all with CUDA kernels)", n);
    CU_ASSERT(n > 100);
    CU_ASSERT_EQUAL(missing, 0);
#else
    printf(" (SKIP: built without the CUDA backend)");
#endif
}

static CU_TestInfo tests[] = {
    {"every registered op has a CUDA kernel", test_every_op_has_a_cuda_kernel},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cuda_coverage", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
