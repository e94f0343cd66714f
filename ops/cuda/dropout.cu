/* CUDA kernel of ai.fp8run::KeyedDropout (ops/dropout.h): the mask of ops/dropout_mask.h, the
 * same bits as the CPU kernel (ops/dropout.c), y = x * (keep ? s : 0) with the scale the host
 * computes as the CPU does: float32 multiply for float32, float16 and bfloat16 (the 16-bit
 * conversions bit for bit as graph/tensor.c's, elementwise_util.cuh), double for float64.
 * A NaN input gives a NaN (the device's canonical one, where the CPU keeps the payload).
 *
 * One element per thread, grid-stride; each thread derives the node's key from the device key
 * tensor {seed, step, micro-batch} (three 64-bit mixes), so nothing is read back to the host and
 * the step stays one stream of work. The backward is this op on dy. */
#include <stdint.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/dropout_mask.h"
extern "C" {
#include "ops/dropout.h"
}

namespace {

template <fr_dtype DT>
__global__ void keyed_dropout_kernel(const void *x, void *y, int64_t n, const int64_t *key, uint64_t stream,
                                     uint32_t thr, float s, double sd)
{
    const uint64_t nk = fr_dropout_node_key((uint64_t)key[0], key[1], key[2], stream);
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const bool keep = fr_dropout_keep(nk, i, thr);
        if (DT == FR_F32) {
            ((float *)y)[i] = ((const float *)x)[i] * (keep ? s : 0.0f);
        } else if (DT == FR_F64) {
            ((double *)y)[i] = ((const double *)x)[i] * (keep ? sd : 0.0);
        } else if (DT == FR_F16) {
            ((uint16_t *)y)[i] = ew_f32_to_f16(ew_f16_to_f32(((const uint16_t *)x)[i]) * (keep ? s : 0.0f));
        } else {
            ((uint16_t *)y)[i] = ew_f32_to_bf16(ew_bf16_to_f32(((const uint16_t *)x)[i]) * (keep ? s : 0.0f));
        }
    }
}

template <fr_dtype DT>
fr_status launch(const fr_cuda_kctx *k, const fr_tensor *x, fr_tensor *y, const fr_tensor *key, uint64_t stream,
                 float ratio)
{
    const int64_t n = fr_tensor_numel(x);
    if (n == 0) return FR_OK;
    const uint32_t thr = fr_dropout_threshold(ratio);
    const float s = fr_dropout_scale(ratio);
    const double sd = 1.0 / (1.0 - (double)ratio);
    keyed_dropout_kernel<DT><<<ew_blocks(k, n), EW_THREADS, 0, k->cu->stream>>>(
        x->data, y->data, n, (const int64_t *)key->data, stream, thr, s, sd);
    return fr_cuda_check_launch(k->node, "KeyedDropout");
}

fr_status keyed_dropout_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 2 || k->n_out < 1 || !k->in[0] || !k->in[1] || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs x, key and output y");
    const fr_tensor *x = k->in[0], *key = k->in[1];
    fr_tensor *y = k->out[0];
    if (fr_tensor_numel(y) != fr_tensor_numel(x) || y->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output %s [%lld] differs from input %s [%lld]", fr_dtype_name(y->dtype),
                             (long long)fr_tensor_numel(y), fr_dtype_name(x->dtype), (long long)fr_tensor_numel(x));
    if (key->dtype != FR_I64 || fr_tensor_numel(key) != FR_DROPOUT_KEY_LEN)
        return fr_node_error(n, FR_ERR_SHAPE, "key must be int64 [%d]", FR_DROPOUT_KEY_LEN);
    float ratio;
    uint64_t stream;
    FR_TRY(fr_keyed_dropout_params(n, &ratio, &stream));
    switch (x->dtype) {
    case FR_F32: return launch<FR_F32>(k, x, y, key, stream, ratio);
    case FR_F64: return launch<FR_F64>(k, x, y, key, stream, ratio);
    case FR_F16: return launch<FR_F16>(k, x, y, key, stream, ratio);
    case FR_BF16: return launch<FR_BF16>(k, x, y, key, stream, ratio);
    default:
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported (float32, float64, float16, "
                             "bfloat16)", fr_dtype_name(x->dtype));
    }
}

} // namespace

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_dropout[] = {
    {"KeyedDropout", FR_DOMAIN_FP8RUN, keyed_dropout_run, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
