/* D = beta * D over a [rows][cols] matrix with leading dim ld (see cuda_gemm.h): the GEMM of
 * K == 0, which the GEMM wrapper (cuda_gemm.c) runs here since cuBLASLt has nothing to multiply. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_gemm.h"

#define THREADS 256

template <typename T>
__global__ void scale_matrix_kernel(T *d, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                                    double beta)
{
    int64_t total = rows * cols * batch;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
        T *p = d + b * stride + r * ld + c;
        *p = beta == 0.0 ? T(0) : T((double)*p * beta); /* beta 0: no NaN from 0 * inf */
    }
}

__global__ void scale_matrix_bf16_kernel(__nv_bfloat16 *d, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                         int64_t stride, float beta)
{
    int64_t total = rows * cols * batch;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / (rows * cols), r = (i / cols) % rows, c = i % cols;
        __nv_bfloat16 *p = d + b * stride + r * ld + c;
        *p = beta == 0.0f ? __float2bfloat16_rn(0.0f) : __float2bfloat16_rn(__bfloat162float(*p) * beta);
    }
}

extern "C" fr_status fr_cuda_scale_matrix(fr_cuda_ctx *cu, const fr_node *n, fr_dtype dt, void *D, int64_t rows,
                                          int64_t cols, int64_t ld, int64_t batch, int64_t stride, double beta)
{
    if (batch < 1) batch = 1;
    int64_t total = rows * cols * batch;
    if (total == 0) return FR_OK;
    if (beta == 1.0) return FR_OK;
    int64_t blocks = (total + THREADS - 1) / THREADS;
    if (blocks > 65536) blocks = 65536; /* the grid-stride loops cover the rest */
    unsigned grid = (unsigned)blocks;
    if (dt == FR_F32)
        scale_matrix_kernel<float><<<grid, THREADS, 0, cu->stream>>>((float *)D, rows, cols, ld, batch, stride, beta);
    else if (dt == FR_F64)
        scale_matrix_kernel<double><<<grid, THREADS, 0, cu->stream>>>((double *)D, rows, cols, ld, batch, stride, beta);
    else if (dt == FR_BF16)
        scale_matrix_bf16_kernel<<<grid, THREADS, 0, cu->stream>>>((__nv_bfloat16 *)D, rows, cols, ld, batch, stride,
                                                                   (float)beta);
    else
        return n ? fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM output dtype %s", fr_dtype_name(dt))
                 : fr_error(FR_ERR_UNSUPPORTED, "GEMM output dtype %s", fr_dtype_name(dt));
    return fr_cuda_check_launch(n, "scale_matrix");
}
