/* What runs off the fast path: the nodes of a prepared (or trained: forward and backward)
 * graph that the fusions would have taken on a Llama-shaped model but did not here, each with
 * the reason, so that `fp8run info` and `fp8run bench` can say why a model is slower than its
 * size suggests.
 *
 * Off the fast path:
 *   Attention / AttentionGrad  not fused with its Q/K/V staging (AttentionQKV): the reason
 *                              passes/attention_io.h gives for the forward node
 *   Transpose, Split, Concat, Rotary, RotaryGrad
 *                              next to an unfused attention (through layout nodes): the head
 *                              layout and RoPE the staging would do in place
 *   RMSNormalization, LayerNormalization (and their Grad)
 *                              after a residual Add that no Add+norm fusion took (AddRMSNorm,
 *                              AddLayerNorm; why not, from passes/residual_norm_fuse.h), the
 *                              norm reading a fused node's sum that it did not take, or a
 *                              q/k norm feeding an unfused attention
 *   Softmax, ReduceMean, Erf, Tanh, Sigmoid
 *                              left by the fusions (passes/unfused_check.h)
 * Everything else (including a model's lone first or final norm) counts as on it. */
#ifndef FR_FAST_PATH_H
#define FR_FAST_PATH_H

#include "graph/ir.h"

#define FR_SLOW_MAX_KINDS 24

typedef struct fr_slow_kind {
    char op[32];
    char why[400];
    int count, first; /* nodes of this kind, the first one's id */
} fr_slow_kind;

typedef struct fr_slow_report {
    int n_kinds, n_slow, n_nodes;          /* kinds, nodes off the fast path, live nodes */
    fr_slow_kind kinds[FR_SLOW_MAX_KINDS]; /* (kinds past the last one go into it) */
    int *kind_of;                          /* per node id: its kind, -1 on the fast path (g->n_nodes) */
} fr_slow_report;

/* Classifies every live node of g. */
FR_NODISCARD fr_status fr_fast_path_check(const fr_graph *g, fr_slow_report *r);
/* Marks the attention nodes (Attention, AttentionQKV and their gradients) not marked yet as
 * off the fast path: they ran on fp8run's own kernels, not cuDNN's flash attention, for `why`
 * (the executor knows; the graph does not). */
void fr_fast_path_generic_attention(fr_slow_report *r, const fr_graph *g, const char *why);
void fr_slow_report_free(fr_slow_report *r);

/* The report as text (malloc'ed): one line per kind, "  17 RMSNormGrad  why (first 'name')",
 * after a header line. With node_ms (per node id, summed over runs, or NULL) and total_ms (of
 * all nodes, same runs), each kind's time and share too, and a last line "warning: ..." when
 * the nodes off the fast path take more than 5% of it; `estimated` says the times are
 * ceilings, not measurements. */
FR_NODISCARD fr_status fr_slow_report_text(const fr_slow_report *r, const fr_graph *g, const double *node_ms,
                                           double total_ms, int estimated, char **text);

/* The share (0..1) of total_ms in nodes off the fast path. */
double fr_slow_share(const fr_slow_report *r, const fr_graph *g, const double *node_ms, double total_ms);

#endif
