/* The op contract. Every op is described once, in a table entry (fr_op_def) of its family's
 * file (ops/<family>.c), with:
 *   - its ONNX name and domain ("" = default ONNX domain, "ai.fp8run" = fp8run's own ops),
 *   - shape and dtype inference (infer),
 *   - the CPU kernel, float32 compute, the reference every other backend is judged against,
 *   - its gradient rule, written as more graph nodes (grad; NULL = not differentiable).
 * The registry (ops/registry.c) concatenates the family tables. */
#ifndef FR_OP_H
#define FR_OP_H

#include "graph/ir.h"

#define FR_DOMAIN_ONNX ""
#define FR_DOMAIN_FP8RUN "ai.fp8run"

/* Kernel call: inputs and outputs are host tensors; outputs are already allocated with the
 * dtype and shape that infer() gave (so a kernel never allocates its outputs). */
typedef struct fr_kernel_ctx {
    const fr_graph *g;
    const fr_node *node;
    int64_t opset;               /* opset version of the node's domain */
    int n_in, n_out;
    fr_tensor *const *in;        /* NULL entries for omitted optional inputs */
    fr_tensor *const *out;       /* NULL entries for omitted optional outputs */
} fr_kernel_ctx;

/* Gradient rule call (reverse-mode autodiff at graph level). For each output i, dout[i] is
 * the value id of d(loss)/d(output i), or -1 when no gradient flows into it. The rule adds
 * nodes to g (with fr_graph_add_node etc.) and sets din[i] to the value id holding
 * d(loss)/d(input i) for every input with need_din[i] != 0 (or -1 if it is identically 0).
 * The rule must give din[i] exactly the input's shape (reduce broadcast dims itself). */
typedef struct fr_grad_ctx {
    fr_graph *g;
    int node_id;                 /* the forward node; re-read g->nodes[node_id] after adds */
    int64_t opset;
    const int *dout;
    const int *need_din;
    int *din;
} fr_grad_ctx;

typedef struct fr_op_def {
    const char *op_type;
    const char *domain;
    int min_opset;               /* lowest opset of its domain whose semantics we implement */
    /* Set dtype and static shape of every output from the inputs (values in g; constant
     * inputs readable through value->constant). Errors name the node. */
    fr_status (*infer)(fr_graph *g, int node_id);
    fr_status (*cpu)(const fr_kernel_ctx *ctx);
    fr_status (*grad)(fr_grad_ctx *ctx);
    unsigned flags;
} fr_op_def;

/* op flags */
#define FR_OP_NO_FOLD 0x1u      /* never constant-fold (e.g. random ops) */

/* Registry lookup; NULL if unknown. */
const fr_op_def *fr_op_find(const char *domain, const char *op_type);
/* Look up every node's op in the registry; an unknown op/domain or an opset below what
 * fp8run supports is FR_ERR_UNSUPPORTED naming op, node and opset. (In ops/, not graph/ir.c,
 * so that graph/ needs nothing from ops/.) */
FR_NODISCARD fr_status fr_graph_resolve_ops(fr_graph *g);
/* Iterate all registered ops (i from 0 until NULL) — for `fp8run info --ops` and tests. */
const fr_op_def *fr_op_at(int i);

/* Family tables, each terminated by an entry with op_type == NULL. */
extern const fr_op_def fr_ops_unary_math[];  /* ops/unary_math.c: elementwise unary math (ops/ew_unary.def) */
extern const fr_op_def fr_ops_unary[];       /* ops/unary.c: IsNaN/IsInf/Not, Cast, Clip, Identity */
extern const fr_op_def fr_ops_binary[];      /* ops/binary.c: arithmetic, compare, logic, Where, Expand */
extern const fr_op_def fr_ops_reduce[];      /* ops/reduce.c: Reduce*, ArgMax/ArgMin */
extern const fr_op_def fr_ops_reduce_grad[]; /* ops/reduce_grad.c: ReduceGrad (ai.fp8run) */
extern const fr_op_def fr_ops_matmul[];      /* ops/matmul.c: MatMul, Gemm */
extern const fr_op_def fr_ops_softmax[];     /* ops/softmax.c: Softmax, LogSoftmax, SoftmaxGrad/LogSoftmaxGrad (ai.fp8run) */
extern const fr_op_def fr_ops_add_norm[];    /* ops/add_norm.c: AddRMSNorm, AddRMSNormGrad (ai.fp8run): residual Add + RMSNorm fused */
extern const fr_op_def fr_ops_add_layer_norm[]; /* ops/add_layer_norm.c: AddLayerNorm, AddLayerNormGrad (ai.fp8run): residual Add + LayerNorm fused */
extern const fr_op_def fr_ops_norm[];        /* ops/norm.c: LayerNormalization, RMSNormalization, LayerNormGrad/RMSNormGrad (ai.fp8run) */
extern const fr_op_def fr_ops_gather[];      /* ops/gather.c: Gather, GatherElements, GatherND and their scatter-add Grad ops (ai.fp8run) */
extern const fr_op_def fr_ops_shape[];       /* ops/shape.c: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, ConstantOfShape, Range, Constant */
extern const fr_op_def fr_ops_grad[];        /* ops/grad_ops.c: SumToShape and other backward helpers (ai.fp8run) */
extern const fr_op_def fr_ops_loss[];        /* ops/loss.c: SoftmaxCrossEntropy(+Grad) (ai.fp8run) */
extern const fr_op_def fr_ops_linear[];      /* ops/linear.c: Linear, LinearGradData, LinearGradWeight (ai.fp8run) */
extern const fr_op_def fr_ops_elementwise_grad[]; /* ops/elementwise_grad.c: ActivationGrad, PowGrad, FmodGrad, ExtremumGrad, ClipGrad (ai.fp8run) */
extern const fr_op_def fr_ops_einsum[];      /* ops/einsum.c: Einsum */
extern const fr_op_def fr_ops_cumsum[];      /* ops/cumsum.c: CumSum */
extern const fr_op_def fr_ops_layout[];      /* ops/layout.c: Transpose, Concat, Split */
extern const fr_op_def fr_ops_slice_tile[];  /* ops/slice_tile.c: Slice, Trilu, Tile, SliceGrad/TileGrad (ai.fp8run) */
extern const fr_op_def fr_ops_attention[];   /* ops/attention.c: Attention, AttentionGrad (ai.fp8run): fused attention, ops/attention.h */
extern const fr_op_def fr_ops_swiglu[];      /* ops/swiglu.c: SwiGLU, SwiGLUGrad (ai.fp8run): fused gate * sigmoid(gate) * up, ops/swiglu.h */
extern const fr_op_def fr_ops_swiglu_quant
    []; /* ops/swiglu_quant.c: SwiGLUQuantize (ai.fp8run): the SwiGLU output as E4M3 codes, ops/swiglu.h */
extern const fr_op_def fr_ops_rotary[];      /* ops/rotary.c: Rotary, RotaryGrad (ai.fp8run): fused x * cos + rotate_half(x) * sin, ops/rotary.h */
extern const fr_op_def fr_ops_attention_onnx[]; /* ops/attention_onnx.c: ONNX Attention (opset 23), inference only */
extern const fr_op_def fr_ops_attention_qkv[]; /* ops/attention_qkv.c: AttentionQKV, AttentionQKVGrad (ai.fp8run), ops/attention_qkv.h */
extern const fr_op_def fr_ops_dropout[];     /* ops/dropout.c: Dropout, KeyedDropout, ops/dropout.h */

/* ---- helpers for op implementations (ops/op_util.c) ---- */

/* Input/output value of a node, NULL if index out of range or omitted (-1). */
fr_value *fr_node_in(fr_graph *g, const fr_node *n, int i);
fr_value *fr_node_out(fr_graph *g, const fr_node *n, int i);

/* Error helpers that prefix "node 'NAME' (OpType): ". */
FR_NODISCARD fr_status fr_node_error(const fr_node *n, fr_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Infer helpers. fr_infer_require_inputs checks input count range and that each required
 * input (index < min) has known dtype and shape. */
FR_NODISCARD fr_status fr_infer_require_inputs(fr_graph *g, const fr_node *n, int min, int max);
/* Set output i's dtype and shape. */
void fr_infer_set(fr_graph *g, const fr_node *n, int i, fr_dtype dt, int rank,
                  const int64_t *dims);
/* Copy input i's dtype/shape to output o. */
void fr_infer_same(fr_graph *g, const fr_node *n, int o, int i);
/* Require a constant integer 1-D (or scalar) input (shape tensors, axes); on success *vals
 * is malloc'ed (caller frees) with *count elements. Non-constant -> FR_ERR_SHAPE explaining
 * that fp8run needs static shapes. */
FR_NODISCARD fr_status fr_infer_const_ints(fr_graph *g, const fr_node *n, int i, int *count,
                              int64_t **vals);
/* A shape given as constant input i (Expand's, ConstantOfShape's): fr_infer_const_ints, at most
 * FR_MAX_RANK entries, copied into dims[*rank]. */
FR_NODISCARD fr_status fr_infer_const_shape(fr_graph *g, const fr_node *n, int i, int *rank, int64_t *dims);
/* Normalize an axis in [-rank, rank) to [0, rank); error names the node. */
FR_NODISCARD fr_status fr_norm_axis(const fr_node *n, int64_t axis, int rank, int *out);

/* Numpy-style broadcast of two shapes; error names the node. */
FR_NODISCARD fr_status fr_broadcast_shape(const fr_node *n, int ra, const int64_t *da, int rb,
                             const int64_t *db, int *rout, int64_t *dout);
/* Strides (in elements) of `src` shape broadcast against an output shape of rank `rout`
 * (right-aligned; broadcast dims get stride 0). */
void fr_broadcast_strides(int rsrc, const int64_t *dsrc, int rout, const int64_t *dout,
                          int64_t *strides);
/* Row-major contiguous strides of a shape. */
void fr_contig_strides(int rank, const int64_t *dims, int64_t *strides);

/* y[i] = acc[i] for i < n, rounded once to y's dtype (float64, else float32): the store of the
 * kernels that accumulate in double. */
void fr_store_acc(fr_tensor *y, const double *acc, int64_t n);

/* Infer-time check that a value's dtype can be held in a tensor (`what` names it). */
FR_NODISCARD fr_status fr_holdable(const fr_node *n, const char *what, fr_dtype dt);
/* An output-dtype attribute (y_dtype, o_dtype, dx_dtype: "float32", the default, or
 * "bfloat16", passes/narrow_activations.h): *bf16 = 1 for "bfloat16"; another value is an
 * error naming the node and the attribute. What bfloat16 needs of the op is the op's check. */
FR_NODISCARD fr_status fr_attr_bf16(const fr_node *n, const char *attr, int *bf16);
/* A node whose output is a view of its input 0 (the CUDA executor aliases it; no kernel runs):
 * a default-domain Reshape, Squeeze, Unsqueeze, Flatten or Identity with one output, or an
 * inference Dropout without its mask output. Liveness plans and profiles share this. */
int fr_node_is_view(const fr_node *n);
/* Kernel-side check that the executor handed an output of the dtype and shape that infer()
 * gave (y may be NULL: missing). Shared by the CPU kernels and the CUDA launchers. */
FR_NODISCARD fr_status fr_check_out(const fr_node *n, const fr_tensor *y, fr_dtype dt, int rank,
                       const int64_t *dims);

#endif
