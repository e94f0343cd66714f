/* CUDA kernels of the matmul family (see runtime/cuda/cuda_kernel.h for the contract). */
#include "../../runtime/cuda/cuda_kernel.h"

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_matmul[] = {
    {NULL, NULL, NULL, NULL},
};
