/* Built when fp8run is compiled without the CUDA backend: the device queries answer
 * "no CUDA" so callers can give a clear message, and the trainer has no CUDA backend. */
#include "runtime/cuda/cuda_probe.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"

int fr_cuda_compiled(void) { return 0; }

fr_status fr_cuda_device_count(int *count)
{
    *count = 0;
    return fr_error(FR_ERR_DEVICE, "fp8run was built without the CUDA backend (FP8RUN_CUDA=OFF or no nvcc)");
}

const fr_train_backend_ops *tr_backend_cuda(void) { return NULL; }
