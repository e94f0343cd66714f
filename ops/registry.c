/* The op registry: all family tables, searched by (domain, op_type). */
#include <string.h>

#include "attention.h"
#include "op.h"

static const fr_op_def *const families[] = {
    fr_ops_unary_math, fr_ops_unary, fr_ops_binary, fr_ops_reduce, fr_ops_reduce_grad, fr_ops_matmul, fr_ops_softmax,
    fr_ops_norm,  fr_ops_gather, fr_ops_shape,  fr_ops_layout, fr_ops_slice_tile, fr_ops_grad, fr_ops_loss, fr_ops_linear, fr_ops_elementwise_grad, fr_ops_einsum, fr_ops_cumsum,
    fr_ops_attention, fr_ops_attention_onnx, fr_ops_swiglu, fr_ops_rotary,
};

const fr_op_def *fr_op_at(int i)
{
    if (i < 0) return NULL;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        for (const fr_op_def *d = families[f]; d->op_type; d++) {
            if (i-- == 0) return d;
        }
    }
    return NULL;
}

const fr_op_def *fr_op_find(const char *domain, const char *op_type)
{
    if (!domain || strcmp(domain, "ai.onnx") == 0) domain = "";
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        for (const fr_op_def *d = families[f]; d->op_type; d++) {
            if (strcmp(d->op_type, op_type) == 0 && strcmp(d->domain, domain) == 0) return d;
        }
    }
    return NULL;
}
