/* What the files of the FP8 compile pass share (private to passes/fp8_*.c): the Linear candidates
 * the detection finds and the pass state the rewriting and the precision decisions work on.
 * fp8_compile.c runs the pass (options, grouping, precision decisions), fp8_detect.c finds the
 * candidates, fp8_rewrite.c rewrites a group into a Linear (+ Split), fp8_report.c formats and
 * applies the report. */
#ifndef FR_FP8_COMPILE_INTERNAL_H
#define FR_FP8_COMPILE_INTERNAL_H

#include "passes/fp8_compile.h"

typedef struct cand {
    int node;          /* the MatMul / Gemm */
    int x, w, bias;    /* value ids (bias -1) */
    int transB;
    int tnode;         /* Transpose node feeding W, or -1 */
    int add_node;      /* folded bias Add, or -1 */
    int y;             /* the value the Linear must produce */
    int64_t K, N;
    int excluded;
    int exclusive;     /* weight, its Transpose and bias are used by this Linear only */
    int frozen;        /* the weight is a constant (fr_fp8_options.frozen_linears): never fused */
    int group;
} cand;

typedef struct pass {
    fr_graph *g;
    const fr_fp8_options *opt;
    fr_fp8_report *r;
    int *uses;         /* per value: node inputs reading it, +1 for graph outputs */
    int *consumer;     /* per value: one node reading it */
    cand *c;
    int nc;
    fr_lin_precision prec;
    fr_lin_recipe recipe;
} pass;

/* p->uses and p->consumer for the graph as it is (fp8_detect.c) */
FR_NODISCARD fr_status fr_fp8_count_uses(pass *p);
/* node nid: a Linear candidate appended to p->c, a report skip entry, or nothing (fp8_detect.c) */
FR_NODISCARD fr_status fr_fp8_detect(pass *p, int nid);
/* Rewrite one group (members: indices into p->c, node order) into a Linear (+ Split), with its
 * precision and the reason for the report (fp8_rewrite.c). */
FR_NODISCARD fr_status fr_fp8_rewrite_group(pass *p, const int *members, int nm, fr_lin_precision prec, const char *why);

#endif
