/* The Linear op family (domain ai.fp8run): a GEMM with a trainable weight, run in fp32, bf16
 * or fp8, and its two backward GEMMs. The CPU kernels emulate the GPU exactly up to the GEMM's
 * float32 summation order: every operand is rounded (bf16) or quantized (fp8) into the very
 * bytes the GPU kernels produce, then multiplied in float32.
 *
 * Linear(X [..., K], W, B?, scale_x?, scale_w?, scale_dy?)
 *        -> (Y [..., N], Xq?, Xq_scale_inv?, amax_x?, amax_w?)
 *   W: [K, N] when transB = 0 (MatMul / Gemm layout), [N, K] when transB = 1 (torch Linear).
 *   B: [N] (or [1, N] as Gemm's C, with X of rank >= 2), added in float32 after the GEMM.
 *   scale_x, scale_w, scale_dy: [1] float32 state values of the delayed recipe (the scales
 *     known before the step); required in fp8 precision with recipe "delayed" (scale_dy is read
 *     only by the backward nodes the gradient rule emits), absent otherwise.
 *   Y = X @ op(W) + B, float32 (float64 when X/W/B are float64: fp32 precision only).
 *   X: W's dtype, or bfloat16 with a float32 W in bf16 / fp8 precision (a narrowed activation):
 *     widened exactly, so every output equals the float32 X of the same values bit for bit (in
 *     bf16 Xq is X's bytes; in fp8 the codes, scales and amax are the float32 tensor's).
 *   X may also be float8e4m3fn, fp8 precision with the delayed recipe only: X's codes as an fp8
 *     producer (SwiGLUQuantize, ops/swiglu.h) wrote them with this node's scale_x, multiplied
 *     with scale_inv = 1 / scale_x: Y equals the Linear of the float X they came from, bit for
 *     bit. Then the node has no Xq, Xq_scale_inv or amax_x output (the producer writes amax).
 *   Xq (bf16, fp8): X as the weight-gradient GEMM consumes it, saved for the backward so the
 *     float copy of X need not be kept. fp8, quantized to E4M3:
 *       delayed, current: the very codes the forward GEMM used, TRANSPOSED to [K, M] (M =
 *         numel(X) / K tokens: token-contiguous, the layout the weight-gradient GEMM reads, as
 *         LinearGradData's dYq); the GPU writes them in the pass that quantizes X for the
 *         forward GEMM (whose row-major codes are scratch), so the backward transposes nothing;
 *       block: X's shape [..., K], X in 128x1 blocks along the token dim.
 *     bf16: bfloat16, X's shape, X rounded to nearest even (the forward GEMM's operand).
 *   Xq_scale_inv (fp8 only, present iff Xq is): [1] (per-tensor) or [ceil(M/128), K] (block),
 *     where M = numel(X) / K is the token count.
 *   amax_x, amax_w (fp8 only): [1] float32, max |X| and max |W| of this step (NaN if any NaN,
 *     else Inf if any Inf): the delayed recipe's history update reads them.
 * Attributes:
 *   transB       int 0|1 (default 0)
 *   precision    "fp32" (default) | "bf16" | "fp8"
 *   recipe       "delayed" (default) | "current" | "block"   (fp8 only)
 *   fp8_format   "hybrid" (default: E4M3 forward, E5M2 output gradients) | "e4m3"
 *   margin       int (default 0): scale = fp8_max / amax / 2^margin for current/block scales
 *   pad_multiple int >= 1 (default 1): GEMM dims M, N, K are padded with zeros to multiples of
 *                this, as the GPU does for FP8 GEMMs; on the CPU the kernels really pad, so a
 *                test can show it changes nothing
 *   y_dtype      "float32" (default: W's dtype) | "bfloat16": Y = bf16(float32 GEMM sum +
 *                bf16(bias)), the float32 bias rounded to bfloat16 first (as autocast casts it,
 *                and as cuBLASLt's bf16-output BIAS epilogue takes it), then one rounding of the
 *                sum, both to nearest even; bf16 and fp8 precision with a float32 W only. The pass narrow_activations sets it where
 *                every reader of Y takes bfloat16 (SwiGLU, Gelu, AttentionQKV, the norms' branch
 *                input): half the bytes written, read and saved.
 *   dx_dtype     "float32" (default: W's dtype) | "bfloat16" (LinearGradData only; bf16 and fp8
 *                precision): dX rounded to bfloat16 from the float32 GEMM result (the GPU's GEMM
 *                writes it in bf16 directly). The gradient rule copies it like every attribute;
 *                only LinearGradData reads it.
 *   weights      string, bookkeeping: the original weight name(s), comma-separated
 *   state_prefix string, bookkeeping: prefix of this layer's state value names
 *                ("<prefix>/amax_dy" names the backward's amax output)
 * fp8 scales: delayed: the scale inputs; current: fp8_max / amax(tensor) / 2^margin (amax 0
 * -> 1; a NaN/Inf amax is FR_ERR_NUMERIC naming the node and tensor, so the step is skipped);
 * block: one such scale per 1x128 block of X / dY along the contraction dim, per 128x128 tile
 * of W. dY is E5M2 in the hybrid format, E4M3 in "e4m3"; X and W are always E4M3.
 *
 * LinearGradData(dY [..., N], W, scale_w?, scale_dy?) -> (dX [..., K], amax_dy?, dYq?, dYq_scale_inv?)
 *   dX = dY @ op(W)^T with the forward's W quantization (same scale, same bytes) and dY
 *   quantized per tensor or in 1x128 blocks along N. dY: W's dtype, or bfloat16 with a float32
 *   W in bf16 / fp8 precision (widened exactly: the float32 dY's results bit for bit). dX: W's
 *   dtype (float32 for a bfloat16 dY), bfloat16 with dx_dtype "bfloat16".
 *   dYq, dYq_scale_inv (per-tensor fp8 recipes only, together): the codes of dY this GEMM
 *   used, TRANSPOSED to [N, M] (M = tokens: the layout the weight-gradient GEMM reads), in the
 *   dY format, and their scale_inv [1]: dY is quantized once for both backward GEMMs.
 *   dYq alone (bf16 precision; outputs 1 and 3 absent): dY rounded to bfloat16, dY's shape and
 *   layout (the bf16 GEMM reads any transpose), the operand this GEMM used: dY is rounded once.
 *   dY may also be codes in the dY format (float8e5m2 in hybrid), fp8 precision with the delayed
 *   recipe and a float32 W only: dY's codes as an fp8 producer (SwiGLUGradQuantize, ops/swiglu.h)
 *   wrote them with this node's scale_dy, multiplied with scale_inv = 1 / scale_dy: dX equals the
 *   data gradient of the float dY they came from, bit for bit. Then the node has no amax_dy, dYq
 *   or dYq_scale_inv output (the producer writes them).
 * LinearGradWeight(Xs, Ys, xs_scale?, ys_scale?) -> (dW, amax_dy?)
 *   dW (W's shape and layout, float32) = X^T dY (transB = 0) or dY^T X (transB = 1).
 *   Xs is either the saved Xq (float8e4m3fn [K, M] for the per-tensor recipes, X's shape for
 *   "block"; xs_scale = the Xq_scale_inv output) or X itself
 *   (float; xs_scale = scale_x for the delayed recipe, absent otherwise), quantized along the
 *   token dim; Ys is either dY [..., N] (float; ys_scale = scale_dy for the delayed recipe,
 *   absent otherwise), quantized likewise (128x1 blocks for "block"), or the dYq output of
 *   LinearGradData (ys_scale = dYq_scale_inv; per-tensor recipes; then no amax_dy here).
 *   bf16 precision: Xs may be the forward's bf16 Xq and Ys the data gradient's bf16 dYq (each
 *   independently; no scale inputs), dW float32. The result is the same bit for bit either way.
 *   fp8 precision: Xs (unquantized) and Ys (dY) may each be bfloat16 instead of float32 (a
 *   narrowed X / dY), quantized exactly as the float32 tensor of the same values.
 *   x_glu (fp8, per-tensor recipes; set by passes/wgrad_operand.c): Xs is not X but the input
 *   gate_up [..., 2K] of the one-input SwiGLU (ops/swiglu.h) that made X, whose activation
 *   attribute x_glu repeats ("silu", "gelu_tanh", "gelu"); x_glu_dtype "bfloat16" (default
 *   "float32") when that SwiGLU's y_dtype was bfloat16. X = SwiGLU(Xs) computed as the SwiGLU
 *   kernel of the same backend computes it (the same bits), then quantized as above: the weight
 *   gradient remakes X inside its own quantization pass instead of reading a copy.
 * Both backward nodes carry the forward's attributes. The gradient rule of Linear emits them,
 * plus SumToShape(dY) for the bias; amax_dy goes on the data-gradient node (on the weight-
 * gradient node when X needs no gradient), named "<state_prefix>/amax_dy". With both
 * gradients and a per-tensor fp8 recipe the weight gradient reads dYq (dY^T codes), in bf16
 * precision dYq (dY's bf16 copy); with the forward's Xq it reads Xq instead of X. A bfloat16
 * X gets a float32 gradient (dX in W's dtype; autodiff carries a bf16 value's gradient in
 * float32). */
#ifndef FR_OPS_LINEAR_H
#define FR_OPS_LINEAR_H

#include "ops/op.h"

extern const fr_op_def fr_ops_linear[]; /* Linear, LinearGradData, LinearGradWeight */

/* input / output slots of Linear */
enum {
    FR_LIN_IN_X = 0,
    FR_LIN_IN_W = 1,
    FR_LIN_IN_B = 2,
    FR_LIN_IN_SCALE_X = 3,
    FR_LIN_IN_SCALE_W = 4,
    FR_LIN_IN_SCALE_DY = 5,
    FR_LIN_N_IN = 6
};
enum {
    FR_LIN_OUT_Y = 0,
    FR_LIN_OUT_XQ = 1,
    FR_LIN_OUT_XQ_SINV = 2,
    FR_LIN_OUT_AMAX_X = 3,
    FR_LIN_OUT_AMAX_W = 4,
    FR_LIN_N_OUT = 5
};

#define FR_LIN_BLOCK 128 /* block edge of the "block" recipe */

typedef enum fr_lin_precision { FR_LIN_FP32 = 0, FR_LIN_BF16 = 1, FR_LIN_FP8 = 2 } fr_lin_precision;
typedef enum fr_lin_recipe { FR_LIN_DELAYED = 0, FR_LIN_CURRENT = 1, FR_LIN_BLOCKWISE = 2 } fr_lin_recipe;

/* Parse / name the attribute strings ("fp32"/"bf16"/"fp8", "delayed"/"current"/"block").
 * An unknown string is FR_ERR_UNSUPPORTED naming it. */
FR_NODISCARD fr_status fr_lin_precision_parse(const char *s, fr_lin_precision *out);
const char *fr_lin_precision_name(fr_lin_precision p);
FR_NODISCARD fr_status fr_lin_recipe_parse(const char *s, fr_lin_recipe *out);
const char *fr_lin_recipe_name(fr_lin_recipe r);

/* A Linear family node's attributes, parsed and checked (shared by the CPU kernels and the
 * CUDA launchers, so both read a node the same way). Errors name the node. */
typedef struct fr_lin_attrs {
    int transB;
    fr_lin_precision prec;
    fr_lin_recipe recipe;
    fr_dtype dy_fmt;     /* FR_F8E5M2 (hybrid) or FR_F8E4M3 */
    int margin;
    int64_t pad;         /* pad_multiple */
    int y_bf16;          /* y_dtype "bfloat16": Linear writes Y in bfloat16 */
    int dx_bf16;         /* dx_dtype "bfloat16": LinearGradData writes dX in bfloat16 */
    int x_glu;           /* LinearGradWeight's x_glu: -1 (Xs is X) or FR_GLU_* (Xs is a GLU's gate_up) */
    int x_glu_bf16;      /* x_glu_dtype "bfloat16": that GLU's output rounded to bfloat16 */
} fr_lin_attrs;
FR_NODISCARD fr_status fr_lin_read_attrs(const fr_node *n, fr_lin_attrs *a);

/* A Linear's saved X (Xq, and Xq_scale_inv where it has one) that no live node reads and no
 * graph output is: the Linear writes none (its outputs become -1). 1 when dropped. Passes that
 * make the weight gradient read X itself call it. */
int fr_lin_drop_unread_xq(fr_graph *g, fr_node *lin);

/* The op definitions, for callers that add these nodes before the registry knows them. */
const fr_op_def *fr_linear_op(const char *op_type);

/* The CPU kernels (linear_cpu.c), for the op table in linear.c. */
FR_NODISCARD fr_status fr_linear_cpu(const fr_kernel_ctx *ctx);
FR_NODISCARD fr_status fr_linear_grad_data_cpu(const fr_kernel_ctx *ctx);
FR_NODISCARD fr_status fr_linear_grad_weight_cpu(const fr_kernel_ctx *ctx);

#endif
