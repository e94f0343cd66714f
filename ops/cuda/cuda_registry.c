/* The CUDA kernel registry: the family tables of ops/cuda/<family>.cu, searched by (domain, op). */
#include <string.h>

#include "ops/cuda/cuda_kernel.h"

extern const fr_cuda_kernel_def fr_cuda_kernels_linear_ce[]; /* LinearCrossEntropy (ops/cuda/linear_ce.cu) */

static const fr_cuda_kernel_def *const families[] = {
    fr_cuda_kernels_elementwise, fr_cuda_kernels_reduce, fr_cuda_kernels_softmax, fr_cuda_kernels_loss, fr_cuda_kernels_norm,
    fr_cuda_kernels_gather,      fr_cuda_kernels_layout, fr_cuda_kernels_shape, fr_cuda_kernels_matmul,  fr_cuda_kernels_einsum, fr_cuda_kernels_linear,
    fr_cuda_kernels_attention,   fr_cuda_kernels_swiglu, fr_cuda_kernels_swiglu_quant, fr_cuda_kernels_rotary, fr_cuda_kernels_dropout,
    fr_cuda_kernels_attention_qkv, fr_cuda_kernels_add_norm,
    fr_cuda_kernels_add_layer_norm,
    fr_cuda_kernels_linear_ce,
};
#define N_FAMILIES (int)(sizeof families / sizeof families[0])

const fr_cuda_kernel_def *fr_cuda_kernel_at(int i)
{
    for (int f = 0; f < N_FAMILIES; f++)
        for (const fr_cuda_kernel_def *d = families[f]; d->op_type; d++)
            if (i-- == 0) return d;
    return NULL;
}

const fr_cuda_kernel_def *fr_cuda_kernel_find(const char *domain, const char *op_type)
{
    for (int f = 0; f < N_FAMILIES; f++)
        for (const fr_cuda_kernel_def *d = families[f]; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && strcmp(d->domain, domain) == 0) return d;
    return NULL;
}
