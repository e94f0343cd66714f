/* CUDA kernels of the gather family (see runtime/cuda/cuda_kernel.h for the contract). */
#include "../../runtime/cuda/cuda_kernel.h"

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_gather[] = {
    {NULL, NULL, NULL, NULL},
};
