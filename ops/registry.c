/* The op registry: all family tables, searched by (domain, op_type). */
#include <string.h>

#include "ops/linear_ce.h"
#include "ops/op.h"

static const fr_op_def *const families[] = {
    fr_ops_unary_math, fr_ops_unary, fr_ops_binary, fr_ops_reduce, fr_ops_reduce_grad, fr_ops_matmul, fr_ops_softmax,
    fr_ops_norm,  fr_ops_gather, fr_ops_shape,  fr_ops_layout, fr_ops_slice_tile, fr_ops_grad, fr_ops_loss, fr_ops_linear, fr_ops_elementwise_grad, fr_ops_einsum, fr_ops_cumsum,
    fr_ops_attention, fr_ops_attention_onnx, fr_ops_swiglu, fr_ops_swiglu_quant, fr_ops_rotary, fr_ops_dropout, fr_ops_attention_qkv,
    fr_ops_add_norm,
    fr_ops_add_layer_norm,
    fr_ops_linear_ce,
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

fr_status fr_graph_resolve_ops(fr_graph *g)
{
    for (int n = 0; n < g->n_nodes; n++) {
        fr_node *nd = &g->nodes[n];
        const fr_op_def *d = fr_op_find(nd->domain, nd->op_type);
        int64_t opset = fr_graph_opset(g, nd->domain);
        if (!d)
            return fr_error(FR_ERR_UNSUPPORTED,
                            "node '%s': op '%s' (domain '%s', opset %lld) is not supported by fp8run",
                            nd->name, nd->op_type, nd->domain[0] ? nd->domain : "ai.onnx",
                            (long long)opset);
        if (opset < d->min_opset)
            return fr_error(FR_ERR_UNSUPPORTED,
                            "node '%s': op '%s' at opset %lld is not supported (fp8run implements "
                            "opset %d and later for it)",
                            nd->name, nd->op_type, (long long)opset, d->min_opset);
        nd->op = d;
    }
    return FR_OK;
}
