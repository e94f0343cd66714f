/* The GEMM results' copy-out and bias (fr_q_finish, fr_q_finish_bf16, declared in quantize.cuh):
 * the Linear family's last pass over a padded result, over the result in place to add the bias,
 * or over a float32 result adding the (bfloat16) bias and rounding once into a bfloat16 Y. */
#include <cuda_bf16.h>
#include <stdint.h>

#include "ops/cuda/quantize.cuh"

static int aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

/* The copy-out / bias pass runs over every GEMM result with a bias ([16384, 8192] float32 for a
 * 1B model's MLP up projection: 1 GB of traffic, as long as half the GEMM), so it must run at
 * the memory's speed. Each thread owns a fixed group of columns, keeps their bias in registers
 * and walks the rows (no index division per element); blockIdx.y strides over the rows, four
 * rows in flight per thread. Without a bias nothing is added (v + 0 would turn -0 into +0). */
constexpr int kFinThreads = 256;

__host__ __device__ constexpr int64_t fin_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ void add4(float4 &v, const float4 b)
{
    v.x += b.x;
    v.y += b.y;
    v.z += b.z;
    v.w += b.w;
}

/* float32, 4 columns a thread (cols, ldd multiples of 4; D, Y, bias 16-byte aligned): D and Y
 * may be the same buffer (the bias added in place), so no __restrict__ on them */
template <bool HasBias>
__global__ void __launch_bounds__(kFinThreads)
    finish_vec4_kernel(const float4 *D, int64_t ldd4, float4 *Y, int64_t rows, int64_t cols4, const float4 *bias)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols4) return;
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (HasBias) b = __ldg(bias + c);
    const int64_t step = gridDim.y;
    int64_t r = blockIdx.y;
    for (; r + 3 * step < rows; r += 4 * step) {
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = D[(r + u * step) * ldd4 + c];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            if (HasBias) add4(v[u], b);
            Y[(r + u * step) * cols4 + c] = v[u];
        }
    }
    for (; r < rows; r += step) {
        float4 v = D[r * ldd4 + c];
        if (HasBias) add4(v, b);
        Y[r * cols4 + c] = v;
    }
}

/* any T and layout: one column a thread */
template <typename T>
__global__ void __launch_bounds__(kFinThreads)
    finish_kernel(const T *D, int64_t ldd, T *Y, int64_t rows, int64_t cols, const T *bias)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const int64_t step = gridDim.y;
    if (bias) {
        const T b = bias[c];
        for (int64_t r = blockIdx.y; r < rows; r += step) Y[r * cols + c] = D[r * ldd + c] + b;
    } else {
        for (int64_t r = blockIdx.y; r < rows; r += step) Y[r * cols + c] = D[r * ldd + c];
    }
}

/* four bfloat16 (8 bytes, the lowest address in the low half) widened exactly */
__device__ __forceinline__ float4 bf16x4_to_float4(const uint2 u)
{
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}

/* float32 D (+ bfloat16 bias, widened) -> bfloat16 Y, 4 columns a thread (cols, ldd multiples of
 * 4; D 16-byte, Y and bias 8-byte aligned): the sum in float32, then one rounding */
template <bool HasBias>
__global__ void __launch_bounds__(kFinThreads)
    finish_bf16_vec4_kernel(const float4 *__restrict__ D, int64_t ldd4, uint2 *__restrict__ Y, int64_t rows,
                            int64_t cols4, const uint2 *__restrict__ bias)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols4) return;
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (HasBias) b = bf16x4_to_float4(__ldg(bias + c));
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        float4 v = D[r * ldd4 + c];
        if (HasBias) add4(v, b);
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        Y[r * cols4 + c] = make_uint2(*(const unsigned *)&lo, *(const unsigned *)&hi);
    }
}

__global__ void __launch_bounds__(kFinThreads)
    finish_bf16_kernel(const float *__restrict__ D, int64_t ldd, __nv_bfloat16 *__restrict__ Y, int64_t rows,
                       int64_t cols, const uint16_t *__restrict__ bias)
{
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const float b = bias ? __uint_as_float((unsigned)bias[c] << 16) : 0.f;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        Y[r * cols + c] = __float2bfloat16_rn(bias ? D[r * ldd + c] + b : D[r * ldd + c]);
}

/* gx blocks across the columns, gy row strides: about 2048 blocks in all (two waves of 8
 * blocks a multiprocessor on an H100 / H200), each thread then taking rows / gy rows */
static dim3 finish_grid(int64_t rows, int64_t col_units)
{
    const int64_t gx = fin_cdiv(col_units, kFinThreads);
    int64_t gy = fin_cdiv(2048, gx);
    if (gy > rows) gy = rows;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    return dim3((unsigned)gx, (unsigned)gy);
}

fr_status fr_q_finish(cudaStream_t s, const fr_node *n, fr_dtype dt, const void *D, int64_t ldd, void *Y,
                      int64_t rows, int64_t cols, const void *bias)
{
    if (rows * cols == 0) return FR_OK;
    if (D == Y && ldd == cols && !bias) return FR_OK;
    if (fin_cdiv(cols, kFinThreads) > 0x7fffffff)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM result of %lld columns", (long long)cols);
    if (dt == FR_BF16) { /* a bfloat16 Y with a bias goes through fr_q_finish_bf16 */
        if (bias) return fr_node_error(n, FR_ERR_INTERNAL, "a bfloat16 GEMM result with a bias (a bug in fp8run)");
        finish_kernel<__nv_bfloat16><<<finish_grid(rows, cols), kFinThreads, 0, s>>>(
            (const __nv_bfloat16 *)D, ldd, (__nv_bfloat16 *)Y, rows, cols, NULL);
    } else if (dt == FR_F64) {
        finish_kernel<double><<<finish_grid(rows, cols), kFinThreads, 0, s>>>((const double *)D, ldd, (double *)Y,
                                                                              rows, cols, (const double *)bias);
    } else if (cols % 4 == 0 && ldd % 4 == 0 && aligned16(D) && aligned16(Y) && aligned16(bias)) {
        const dim3 g = finish_grid(rows, cols / 4);
        if (bias)
            finish_vec4_kernel<true><<<g, kFinThreads, 0, s>>>((const float4 *)D, ldd / 4, (float4 *)Y, rows, cols / 4,
                                                               (const float4 *)bias);
        else
            finish_vec4_kernel<false><<<g, kFinThreads, 0, s>>>((const float4 *)D, ldd / 4, (float4 *)Y, rows,
                                                                cols / 4, NULL);
    } else {
        finish_kernel<float><<<finish_grid(rows, cols), kFinThreads, 0, s>>>((const float *)D, ldd, (float *)Y, rows,
                                                                             cols, (const float *)bias);
    }
    return fr_cuda_check_launch(n, "GEMM output copy / bias");
}

fr_status fr_q_finish_bf16(cudaStream_t s, const fr_node *n, const float *D, int64_t ldd, void *Y, int64_t rows,
                           int64_t cols, const void *bias)
{
    if (rows * cols == 0) return FR_OK;
    if ((const void *)D == Y) return fr_node_error(n, FR_ERR_INTERNAL, "bf16 GEMM finish in place (a bug in fp8run)");
    if (fin_cdiv(cols, kFinThreads) > 0x7fffffff)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM result of %lld columns", (long long)cols);
    if (cols % 4 == 0 && ldd % 4 == 0 && aligned16(D) && (uintptr_t)Y % 8 == 0 && (uintptr_t)bias % 8 == 0) {
        const dim3 g = finish_grid(rows, cols / 4);
        if (bias)
            finish_bf16_vec4_kernel<true><<<g, kFinThreads, 0, s>>>((const float4 *)D, ldd / 4, (uint2 *)Y, rows,
                                                                    cols / 4, (const uint2 *)bias);
        else
            finish_bf16_vec4_kernel<false><<<g, kFinThreads, 0, s>>>((const float4 *)D, ldd / 4, (uint2 *)Y, rows,
                                                                     cols / 4, NULL);
    } else {
        finish_bf16_kernel<<<finish_grid(rows, cols), kFinThreads, 0, s>>>(D, ldd, (__nv_bfloat16 *)Y, rows, cols,
                                                                           (const uint16_t *)bias);
    }
    return fr_cuda_check_launch(n, "GEMM output bf16 rounding / bias");
}

fr_status fr_q_gemm_out(fr_cuda_ctx *cu, const fr_node *n, const fr_gemm *g, fr_dtype y_type, void *Y, int64_t rows,
                        int64_t cols, const void *bias, void *buf)
{
    const int padded = g->M != rows || g->N != cols, bias_bf16 = bias && y_type == FR_BF16;
    fr_gemm d = *g;
    d.d_type = y_type;
    if (bias && !padded && y_type != FR_F64) { /* float64: fp32 precision's own bias pass */
        int done;
        d.D = Y;
        d.bias = bias;
        d.bias_type = bias_bf16 ? FR_BF16 : FR_F32; /* a bfloat16 Y: the bias's bf16 copy (D's type) */
        FR_TRY(fr_cuda_gemm_bias(cu, n, &d, &done));
        if (done) return FR_OK;
        d.bias = NULL;
    }
    d.D = padded || bias_bf16 ? buf : Y;
    if (bias_bf16) d.d_type = FR_F32;
    FR_TRY(fr_cuda_gemm(cu, n, &d));
    if (bias_bf16) return fr_q_finish_bf16(cu->stream, n, (const float *)buf, g->N, Y, rows, cols, bias);
    return fr_q_finish(cu->stream, n, y_type, d.D, g->N, Y, rows, cols, bias);
}
