/* Compiled graph files (.fbs): what `fp8run compile` writes and `fp8run train x.fbs` trains.
 *
 * A .fbs is a valid ONNX ModelProto (opset_import lists ai.fp8run; onnx.checker accepts it
 * apart from the custom domain) holding:
 *   - the compiled forward graph: the model prepared for ONE batch x seq (shape chains folded,
 *     every dim concrete, no dim_param left) and rewritten by fr_fp8_compile into
 *     ai.fp8run::Linear nodes. Like a TensorRT engine, it is specialized: another batch or
 *     sequence length needs another compile. Fused weights are stored once: the original
 *     initializers the compile pass keeps for export are left out (the slice table below
 *     rebuilds them);
 *   - the delayed-scaling state as initializers: "fp8_state/<layer>/scale_<x|w|dy>" (the
 *     graph's own [1] state inputs) plus, per scaled operand, "<amax name>/history" ([H] float)
 *     and "<amax name>/counters" ([2] int64: ring position, updates), so a file written from a
 *     running trainer carries its complete scaling state;
 *   - metadata_props, one key per item so no value needs escaping (keys below, values plain
 *     text, integers in decimal):
 *       fp8run.format = "1"                 (FR_FBS_FORMAT; other versions are refused)
 *       fp8run.batch, fp8run.seq            the shape it is specialized to
 *       fp8run.tokens_input                 the input fed with token ids
 *       fp8run.option.<name>                compile options: precision, recipe, fp8_format,
 *                                           bf16_boundary, fuse, pad_multiple, margin,
 *                                           amax_history, amax_algo, interval; fp8_exclude,
 *                                           logits_output, loss_output, train, freeze when set
 *       fp8run.dims, fp8run.dim.<i>.name|value        extra --dim bindings
 *       fp8run.params, fp8run.param.<i>     the trainable initializers (other float
 *                                           initializers are folded constants or frozen)
 *       fp8run.layers, fp8run.layer.<i>.<field>       every Linear of the report: name,
 *                                           weights, sources, n_fused, K, N, transB, has_bias,
 *                                           precision, recipe, why, pad_multiple, pad_k, pad_n,
 *                                           state_prefix (fp8 only)
 *       fp8run.skipped, fp8run.skip.<i>.node|op_type|weight|reason   MatMul/Gemm left alone
 *       fp8run.fused, fp8run.fused.<i>.name|is_bias|transB|K|slices and
 *       fp8run.fused.<i>.slice.<j>.name|offset|size|transB|rank|dims   where each original
 *                                           parameter lives in a fused one (dims "d0,d1")
 *       fp8run.states, fp8run.state.<i>.layer|operand|format|scale|amax   delayed-recipe
 *                                           operands (operand x|w|dy, format e4m3|e5m2,
 *                                           scale/amax: value names)
 *       fp8run.ties, fp8run.tie.<i>.copy|source|transposed   initializers the trainer re-tied
 *                                           to an embedding table (passes/retie.h): the copy
 *                                           is not in the compiled graph; it follows `source`
 *       fp8run.original_model               the ORIGINAL ModelProto, base64: every initializer
 *                                           whose values the compiled graph holds (same name,
 *                                           or a fused slice) is moved out of it (it becomes a
 *                                           graph input there, so the text stays small and
 *                                           importable); the rest (constants the compile
 *                                           folded away) keep their data
 *       fp8run.original_inputs              the original model's own input count
 *       fp8run.original_initializers, fp8run.original_init.<i>.name|source   the original
 *                                           initializer order; source "inline" (in the
 *                                           embedded model), "compiled" (same name in the
 *                                           compiled graph), "fused" (a slice) or "tied" (a
 *                                           re-tied copy of a compiled parameter)
 * so export from a .fbs writes the original graph with the original initializer names,
 * order and layouts.
 *
 * .fbs files are hostile input like any model: every key is checked (present, well formed,
 * in range, consistent with the graph) and a problem is FR_ERR_PARSE naming the file and the
 * key. */
#ifndef FR_FBS_H
#define FR_FBS_H

#include <stdint.h>

#include "graph/ir.h"
#include "passes/fp8_compile.h"
#include "passes/passes.h"
#include "passes/retie.h"
#include "graph/fp8_scaling.h"

#define FR_FBS_FORMAT 1
#define FR_FBS_FORMAT_KEY "fp8run.format"

/* What a .fbs records besides the graph and the report. Strings are owned by whoever filled
 * the struct (fr_fbs_free frees the decoded ones). */
typedef struct fr_fbs_spec {
    int64_t batch, seq;
    const char *tokens_input;
    const char *logits_output, *loss_output; /* NULL when not given at compile time */
    const char *train_regex, *freeze_regex;  /* NULL when not given */
    fr_dim_binding *dims;
    int n_dims;
    fr_fp8_options fp8;                /* precision, recipe, format, ...; strings point into
                                          the owned copies below when decoded */
    fr_tie *ties;                      /* re-tied copies (passes/retie.h), value ids in the
                                          compiled graph; owned when decoded */
    int n_ties;
    char *s_precision, *s_recipe, *s_format, *s_exclude;
} fr_fbs_spec;

/* A decoded .fbs. */
typedef struct fr_fbs {
    fr_graph *graph;          /* compiled forward graph, prepared (ops resolved, shapes
                                 inferred); FR_VAL_PARAM exactly on the recorded parameters,
                                 FR_VAL_STATE on the scales; the original members of fused
                                 parameters and re-tied copies are rebuilt as plain initializers
                                 (as the compile and re-tie passes leave them), so report and
                                 tie value ids are valid in it */
    fr_fp8_report report;     /* as the compile pass made it (amax_dy ids -1 until bound) */
    fr_graph *original;       /* the original model, every initializer with its data */
    fr_fbs_spec spec;
    fr_fp8_scaling *states;   /* per report state: the recorded scaling state */
    int n_states;
} fr_fbs;

/* Cross-check a layer table read from `what` against graph g (node_of[i]: the node of layer i):
 * source and weight counts match n_fused; FP8 state prefixes are non-empty, at most 1000
 * characters, the node's own, and distinct; no layer twice. FR_ERR_PARSE naming the layer. */
FR_NODISCARD fr_status fr_fbs_check_layers(const fr_graph *g, const fr_fp8_report *r, const int *node_of, const char *what);

/* 1 when g (as imported) carries the fp8run.format key. */
int fr_fbs_is_compiled(const fr_graph *g);
/* The batch and sequence length a compiled graph is specialized to (FR_ERR_PARSE naming the
 * key when missing/malformed). */
FR_NODISCARD fr_status fr_fbs_shape(const fr_graph *g, int64_t *batch, int64_t *seq);

/* Write a .fbs (atomically, as fr_onnx_save_file). compiled: the graph fr_fp8_compile
 * produced (prepared for spec->batch x spec->seq); original: the model it was compiled from,
 * as imported; states: n = report->n_states scaling states to record, or NULL for fresh ones
 * (scale 1, empty history, with spec->fp8's history length). */
FR_NODISCARD fr_status fr_fbs_save(const fr_graph *compiled, const fr_fp8_report *report, const fr_graph *original,
                      const fr_fbs_spec *spec, const fr_fp8_scaling *states, const char *path);

/* Decode an imported .fbs graph (not modified). `what` names it in messages (NULL: its
 * source path). On failure *out is zeroed. */
FR_NODISCARD fr_status fr_fbs_decode(const fr_graph *file, const char *what, fr_fbs *out);
/* fr_onnx_load_file + fr_fbs_decode (a file without the format key is FR_ERR_PARSE). */
FR_NODISCARD fr_status fr_fbs_load(const char *path, fr_fbs *out);
void fr_fbs_free(fr_fbs *f);

/* The original model of an imported .fbs, with every initializer's data (taken from the
 * compiled graph's current values: a checkpoint applied to the .fbs graph shows). */
FR_NODISCARD fr_status fr_fbs_original(const fr_graph *file, fr_graph **original);

/* The fused-parameter table of an imported .fbs (value ids of the fused parameters in `file`;
 * slice value ids -1: the originals are not in the file). Caller frees with
 * fr_fbs_fused_free. */
FR_NODISCARD fr_status fr_fbs_fused_table(const fr_graph *file, fr_fp8_fused **fused, int *n);
void fr_fbs_fused_free(fr_fp8_fused *fused, int n);
/* 1 when `name` is a re-tied copy recorded in an imported .fbs (its values follow its source,
 * so a checkpoint's copy of it has nothing to add). */
int fr_fbs_is_tied_copy(const fr_graph *file, const char *name);

#endif
