/* The FP8 compile pass: turns the Linear layers of a prepared forward graph (shapes inferred)
 * into ai.fp8run::Linear nodes, chooses each one's precision, fuses Linears that share their
 * input, and reports what it did.
 *
 * 1. Linear layers are MatMul / Gemm nodes whose weight is a trainable 2-D float32 initializer
 *    (FR_VAL_PARAM), in the forms exporters emit:
 *      MatMul(X, W[K,N])                         -> transB 0
 *      MatMul(X, Transpose(W[N,K]))              -> transB 1 (the Transpose of a parameter)
 *      Gemm(X, W, C?) transB 0|1, alpha = beta = 1, transA = 0; C a bias parameter [N] / [1,N]
 *      any of these followed by Add(Y, b[N]) with a bias parameter (the bias is folded in).
 *    X is float32 of rank >= 1. Other MatMul/Gemm nodes that read a parameter stay as they are
 *    and are listed in the report with the reason ("not eligible: alpha != 1", ...).
 * 2. Fusion (opt->fuse): Linears that read the same X with the same precision decision and
 *    bias presence, whose weights (and biases) are used by nothing else, become one Linear over
 *    a new parameter "fused(a,b,c)" holding the weights concatenated along N (layout of the
 *    first member), followed by a Split (the 'split' sizes as a constant input at opset >= 13,
 *    as an attribute before) that gives back the original output values. Biases concatenate
 *    likewise. The original parameters stay in the graph as initializers (no longer
 *    FR_VAL_PARAM and unreferenced; later passes must keep them), and the report's fused table
 *    says where each one lives in the fused parameter, so fr_fp8_sync_params() can copy trained
 *    values back for export and checkpoints under the original names and layouts.
 * 3. Precision: with precision "fp8", the first and the last opt->bf16_boundary Linear groups
 *    in topological order (a fused group counts once; the last one is usually the LM head) and
 *    the Linears whose original weight name or original node name matches opt->fp8_exclude
 *    (POSIX extended regex) run in bf16; the rest in fp8. With "bf16" or "fp32" every Linear gets that precision.
 * 4. Padding: FP8 Linears get pad_multiple = opt->pad_multiple; the report gives per layer the
 *    zeros the GPU adds to K and N (the token dim is padded at run time).
 * 5. Delayed recipe: every FP8 Linear gets [1] float32 state values (FR_VAL_STATE, value 1.0)
 *    "fp8_state/<layer>/scale_x|scale_w|scale_dy" as inputs and "fp8_state/<layer>/amax_x|
 *    amax_w" outputs; its backward adds ".../amax_dy". The report lists them as fr_fp8_state
 *    entries (one per operand) so the trainer can keep a fr_fp8_scaling per operand: write its
 *    scale into scale_value before a step, feed the amax into fr_fp8_scaling_update() after.
 * 6. bf16 and fp8: MatMuls of two activations (attention's Q K^T and P V) become
 *    ai.fp8run::MatMul with precision bf16 (autocast runs them in bf16 too); a Transpose of
 *    the last two dims feeding one becomes its transA/transB flag.
 * Runs fr_graph_toposort before and after; dead nodes are removed (fr_graph_compact). */
#ifndef FR_FP8_COMPILE_H
#define FR_FP8_COMPILE_H

#include "graph/ir.h"
#include "ops/linear.h"
#include "graph/fp8_scaling.h"

typedef struct fr_fp8_options {
    const char *precision;   /* "fp8" | "bf16" | "fp32" */
    const char *recipe;      /* "delayed" | "current" | "block" */
    const char *fp8_format;  /* "hybrid" | "e4m3" */
    int bf16_boundary;       /* Linear groups kept bf16 at each end in fp8 mode; 0 = none */
    const char *fp8_exclude; /* regex on original weight or node names: matching Linears stay bf16; NULL = none */
    int fuse;                /* fuse Linears sharing their input */
    int pad_multiple;        /* FP8 GEMM dims padded to multiples of this (1..4096) */
    int margin;              /* scale = fp8_max / amax / 2^margin (all recipes) */
    int amax_history_len;    /* delayed recipe: history length, algorithm and interval */
    fr_amax_algo amax_algo;
    int interval;
    int frozen_linears;      /* 1: MatMul/Gemm whose weight is a 2-D float32 constant become
                                Linears too (unfused, no weight gradient): LoRA's frozen base */
} fr_fp8_options;

/* precision fp8, recipe delayed, hybrid, bf16_boundary 1, no exclude, fuse 1, pad 16, margin 0,
 * history 1024, max, interval 1 */
void fr_fp8_options_default(fr_fp8_options *o);

typedef enum fr_fp8_operand { FR_FP8_OPERAND_X = 0, FR_FP8_OPERAND_W = 1, FR_FP8_OPERAND_DY = 2 } fr_fp8_operand;

/* One operand under the delayed recipe. */
typedef struct fr_fp8_state {
    int layer;               /* index into report->layers */
    fr_fp8_operand operand;
    fr_dtype fmt;            /* format the scale is for (E4M3, or E5M2 for dY in hybrid) */
    int scale_value;         /* value id of the [1] float32 scale (FR_VAL_STATE) */
    char *amax_name;         /* name of the [1] amax value the step writes */
    int amax_value;          /* its id; -1 for dY until fr_fp8_report_bind() after autodiff */
} fr_fp8_state;

/* Where one original parameter lives inside a fused one. */
typedef struct fr_fp8_slice {
    char *name;              /* original initializer name */
    int value;               /* its value id (kept in the graph) */
    int is_bias;
    int64_t offset, size;    /* along N (output features) in the fused parameter */
    int transB;              /* original weight layout: 1 = [N, K], 0 = [K, N]; 0 for biases */
    int rank;                /* original shape */
    int64_t dims[2];
} fr_fp8_slice;

typedef struct fr_fp8_fused {
    char *name;              /* "fused(q.weight,k.weight,v.weight)" */
    int value;               /* the fused parameter's value id (FR_VAL_PARAM) */
    int is_bias;
    int transB;              /* layout of a fused weight */
    int64_t K;               /* fused weight: contraction dim (0 for biases) */
    int n_slices;
    fr_fp8_slice *slices;
} fr_fp8_fused;

typedef struct fr_fp8_layer {
    char *name;              /* the Linear node's name */
    char *weights;           /* original weight name(s), comma-separated */
    char *sources;           /* original node name(s), comma-separated */
    int n_fused;             /* original Linears in this node (1 = not fused) */
    int64_t K, N;
    int transB, has_bias;
    fr_lin_precision precision;
    fr_lin_recipe recipe;    /* meaningful for fp8 */
    char *why;               /* why this precision (boundary, regex, requested, ...) */
    int pad_multiple;        /* 1 = none */
    int64_t pad_k, pad_n;    /* zeros the GPU adds to K and N */
    char *state_prefix;      /* "fp8_state/<layer>" (fp8 only) or NULL */
} fr_fp8_layer;

/* A MatMul/Gemm with a trainable weight that stays as it is. */
typedef struct fr_fp8_skip {
    char *node, *op_type, *weight, *reason;
} fr_fp8_skip;

typedef struct fr_fp8_report {
    fr_lin_precision precision;
    fr_lin_recipe recipe;
    int e4m3_only;           /* fp8_format "e4m3" */
    int bf16_boundary, fuse, pad_multiple, margin;
    char *fp8_exclude;       /* copy or NULL */
    int amax_history_len, interval;
    fr_amax_algo amax_algo;
    fr_fp8_layer *layers;    /* in topological order */
    int n_layers;
    fr_fp8_skip *skipped;
    int n_skipped;
    fr_fp8_fused *fused;
    int n_fused;
    fr_fp8_state *states;
    int n_states;
    int n_linears;           /* original Linear layers converted (fused members counted each) */
    int n_fp8, n_bf16, n_fp32; /* of those, per precision */
    int n_activation_matmuls; /* MatMuls of two activations run in bf16 (attention) */
    int n_attention;         /* fused ai.fp8run::Attention nodes (passes/attention_fuse.h), run in bf16 */
    int n_swiglu;            /* fused ai.fp8run::SwiGLU nodes (passes/swiglu_fuse.h, run after this
                                compiler by the trainer) */
    int n_swiglu_one_input;  /* of those, reading the fused gate/up Linear's output directly */
} fr_fp8_report;

/* Compile. On failure the graph may be partly rewritten (the caller discards it); the report
 * is freed and zeroed. */
FR_NODISCARD fr_status fr_fp8_compile(fr_graph *g, const fr_fp8_options *opt, fr_fp8_report *report);
void fr_fp8_report_free(fr_fp8_report *r);

/* Human-readable report for `fp8run info`; *text is malloc'ed (caller frees). */
FR_NODISCARD fr_status fr_fp8_report_format(const fr_fp8_report *r, char **text);

/* After autodiff: find the amax_dy values by name (states whose amax_value is -1). A state
 * whose amax is missing is FR_ERR_GRAPH naming it (unless allow_missing: the layer's X and W
 * need no gradient, e.g. a frozen layer). */
FR_NODISCARD fr_status fr_fp8_report_bind(const fr_graph *g, fr_fp8_report *r, int allow_missing);

/* Copy parameters between the fused ones and the original initializers (with the original
 * layouts): to_original = 1 before export / checkpoint under original names, 0 after loading
 * original values (resume, fine-tune from a checkpoint). */
FR_NODISCARD fr_status fr_fp8_sync_params(fr_graph *g, const fr_fp8_report *r, int to_original);

#endif
