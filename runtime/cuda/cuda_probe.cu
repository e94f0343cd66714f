/* Device discovery through the CUDA runtime. */
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_probe.h"

extern "C" int fr_cuda_compiled(void) { return 1; }

extern "C" fr_status fr_cuda_device_count(int *count)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    *count = 0;
    if (e != cudaSuccess)
        return fr_error(FR_ERR_DEVICE, "no usable CUDA device: %s", cudaGetErrorString(e));
    *count = n;
    return FR_OK;
}
