/* The API that gradient rules (fr_op_def.grad in the op files) use to emit backward nodes, and
 * single-node shape inference; implemented in ops/grad_emit.c. It lives in ops/ so that op files
 * need nothing from passes/; passes/autodiff.c drives the rules. */
#ifndef FR_OPS_GRAD_H
#define FR_OPS_GRAD_H

#include "ops/op.h"

/* Add a node computing op_type(inputs) with n_out fresh outputs named after the forward
 * node (e.g. "/h.0/attn/MatMul_grad/Transpose_3"), resolve its op and return its id in
 * *node_id (may be NULL) and the output value ids in out[]. Attributes may be set on
 * ctx->g->nodes[*node_id] afterwards; call fr_grad_finish() once they are set to infer the
 * output shapes. */
FR_NODISCARD fr_status fr_grad_node(fr_grad_ctx *ctx, const char *op_type, const char *domain, int n_in,
                       const int *in, int n_out, int *out, int *node_id);
/* Run shape inference for one node (after its attributes are set). */
FR_NODISCARD fr_status fr_grad_finish(fr_grad_ctx *ctx, int node_id);
/* For a node whose output i is the gradient of forward input i (i < n): ctx->din[i] = out[i]
 * where that gradient is needed; the other output slots are emptied, so they are not computed. */
void fr_grad_keep_needed(fr_grad_ctx *ctx, int node_id, int n, const int *out);
/* One-call form for nodes without attributes: emit + infer; returns the single output. */
FR_NODISCARD fr_status fr_grad_op1(fr_grad_ctx *ctx, const char *op_type, int n_in, const int *in, int *out);
/* Sum `grad` down to the shape of value `like` (undoing numpy broadcasting); *out = grad
 * unchanged when shapes already match. */
FR_NODISCARD fr_status fr_grad_sum_to(fr_grad_ctx *ctx, int grad, int like, int *out);
/* A new float constant value (not a parameter, never exported) holding `data`. */
FR_NODISCARD fr_status fr_grad_const(fr_grad_ctx *ctx, fr_dtype dt, int rank, const int64_t *dims,
                        const double *data, int *out);
/* A scalar constant with the dtype of value `like`. */
FR_NODISCARD fr_status fr_grad_scalar(fr_grad_ctx *ctx, double v, int like, int *out);

/* Run one node's shape inference (resolves its op first). Used by passes that add nodes. */
FR_NODISCARD fr_status fr_node_infer(fr_graph *g, int node_id);

#endif
