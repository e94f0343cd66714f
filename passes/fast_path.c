/* What runs off the fast path (see fast_path.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/attention_io.h"
#include "passes/fast_path.h"
#include "passes/pattern.h"
#include "passes/residual_norm_fuse.h"

#define NEAR_DEPTH 6 /* glue nodes walked from a node to an attention */

/* The readers of each value, as one array (CSR). */
typedef struct readers {
    int *start, *node;
} readers;

static fr_status readers_make(const fr_graph *g, readers *r)
{
    r->start = calloc((size_t)g->n_values + 1, sizeof(int));
    int total = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) total += g->nodes[i].n_inputs;
    r->node = malloc(sizeof(int) * (size_t)(total ? total : 1));
    int *fill = calloc((size_t)g->n_values + 1, sizeof(int));
    if (!r->start || !r->node || !fill) {
        free(r->start), free(r->node), free(fill);
        return fr_error(FR_ERR_OOM, "fast path check: no memory for the readers of %d values", g->n_values);
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0) r->start[g->nodes[i].inputs[k] + 1]++;
    for (int v = 0; v < g->n_values; v++) r->start[v + 1] += r->start[v];
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++) {
            const int v = g->nodes[i].inputs[k];
            if (v >= 0) r->node[r->start[v] + fill[v]++] = i;
        }
    free(fill);
    return FR_OK;
}

static int is(const fr_node *n, const char *op) { return strcmp(n->op_type, op) == 0; }

static int is_attention(const fr_node *n) { return is(n, "Attention") || is(n, "AttentionGrad"); }

static int is_norm(const fr_node *n) { return is(n, "RMSNormalization") || is(n, "LayerNormalization"); }

/* The nodes between an attention and its projections that the staging would do in place. */
static int is_glue(const fr_node *n)
{
    static const char *const ops[] = {"Reshape",    "Transpose", "Unsqueeze", "Squeeze", "Flatten",          "Rotary",
                                      "RotaryGrad", "Split",     "Concat",    "Slice",   "RMSNormalization", "Expand"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (is(n, ops[i])) return 1;
    return 0;
}

/* Whether node i reaches an unfused attention within `depth` glue nodes: forward through the
 * readers of its outputs, or backward through the producers of its inputs. */
static int near_attention(const fr_graph *g, const readers *rd, int i, int forward, int depth)
{
    const fr_node *n = &g->nodes[i];
    if (forward) {
        for (int o = 0; o < n->n_outputs; o++) {
            const int v = n->outputs[o];
            for (int k = v >= 0 ? rd->start[v] : 0; v >= 0 && k < rd->start[v + 1]; k++) {
                const fr_node *r = &g->nodes[rd->node[k]];
                if (is_attention(r)) return 1;
                if (depth > 0 && is_glue(r) && near_attention(g, rd, rd->node[k], 1, depth - 1)) return 1;
            }
        }
        return 0;
    }
    for (int k = 0; k < n->n_inputs; k++) {
        const fr_node *p = n->inputs[k] >= 0 ? fr_live_producer(g, n->inputs[k]) : NULL;
        if (!p) continue;
        if (is_attention(p)) return 1;
        if (depth > 0 && is_glue(p) && near_attention(g, rd, (int)(p - g->nodes), 0, depth - 1)) return 1;
    }
    return 0;
}

/* The forward norm of a norm gradient: the live norm reading its X (input 1), or -1. */
static int forward_norm(const fr_graph *g, const readers *rd, const fr_node *grad)
{
    const int x = grad->n_inputs > 1 ? grad->inputs[1] : -1;
    for (int k = x >= 0 ? rd->start[x] : 0; x >= 0 && k < rd->start[x + 1]; k++)
        if (is_norm(&g->nodes[rd->node[k]]) && g->nodes[rd->node[k]].inputs[0] == x) return rd->node[k];
    return -1;
}

/* p (a norm's input's producer, may be NULL) is a residual Add, or a Reshape of one (OPT
 * flattens the residual stream before each norm) */
static int after_add(const fr_graph *g, const fr_node *p)
{
    if (p && fr_is_onnx_op(p, "Reshape") && p->n_inputs >= 1 && p->inputs[0] >= 0) p = fr_live_producer(g, p->inputs[0]);
    return p && fr_is_onnx_op(p, "Add");
}

/* Why norm node i is off the fast path (why[0] = 0: it is on it). */
static void norm_why(const fr_graph *g, const readers *rd, int i, char *why, size_t n)
{
    const fr_node *nd = &g->nodes[i];
    const fr_node *p = nd->inputs[0] >= 0 ? fr_live_producer(g, nd->inputs[0]) : NULL;
    const int rms = is(nd, "RMSNormalization");
    const char *fused = rms ? "AddRMSNorm" : "AddLayerNorm";
    char w[300];
    why[0] = 0;
    if (rms && near_attention(g, rd, i, 1, NEAR_DEPTH))
        snprintf(why, n, "a q/k norm of an attention that is not fused (AttentionQKV would apply it)");
    else if (after_add(g, p) && fr_residual_norm_why(g, i, w, sizeof w))
        snprintf(why, n,
                 "after a residual Add that fuse_residual_norm would take (%s): it is off "
                 "(--no-fuse-residual-norm, or --recompute) or did not run",
                 fused);
    else if (after_add(g, p))
        snprintf(why, n, "after a residual Add that fuse_residual_norm does not take (%s): %s", fused, w);
    else if (p && strcmp(p->domain, FR_DOMAIN_FP8RUN) == 0 && (is(p, "AddLayerNorm") || is(p, "AddRMSNorm")))
        snprintf(why, n,
                 "reads the sum of a fused %s that did not take it (AddRMSNorm takes one norm, AddLayerNorm two "
                 "of one axis and epsilon): it reads the sum again and its gradient costs one more Add",
                 p->op_type);
}

/* The kind of (op, why), added when new; past FR_SLOW_MAX_KINDS the last kind takes the rest. */
static int kind_of(fr_slow_report *r, const char *op, const char *why, int node)
{
    for (int k = 0; k < r->n_kinds; k++)
        if (strcmp(r->kinds[k].op, op) == 0 && strcmp(r->kinds[k].why, why) == 0) return k;
    if (r->n_kinds == FR_SLOW_MAX_KINDS) {
        fr_slow_kind *last = &r->kinds[FR_SLOW_MAX_KINDS - 1];
        snprintf(last->op, sizeof last->op, "(others)");
        snprintf(last->why, sizeof last->why, "more kinds than listed");
        return FR_SLOW_MAX_KINDS - 1;
    }
    fr_slow_kind *k = &r->kinds[r->n_kinds];
    snprintf(k->op, sizeof k->op, "%s", op);
    snprintf(k->why, sizeof k->why, "%s", why);
    k->first = node;
    return r->n_kinds++;
}

fr_status fr_fast_path_check(const fr_graph *g, fr_slow_report *r)
{
    memset(r, 0, sizeof *r);
    if (!(r->kind_of = malloc(sizeof(int) * (size_t)(g->n_nodes ? g->n_nodes : 1))))
        return fr_error(FR_ERR_OOM, "fast path check: no memory for %d nodes", g->n_nodes);
    readers rd;
    fr_status st = readers_make(g, &rd);
    if (st != FR_OK) {
        fr_slow_report_free(r);
        return st;
    }
    static const char *const left[] = {"Softmax", "ReduceMean", "Erf", "Tanh", "Sigmoid"};
    char why[400];
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        r->kind_of[i] = -1;
        if (n->dead) continue;
        r->n_nodes++;
        why[0] = 0;
        if (is(n, "Attention") && strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0) {
            char w[320];
            if (!fr_attention_io_why(g, i, w, sizeof w))
                snprintf(why, sizeof why, "not fused with its Q/K/V staging (AttentionQKV): %s", w);
            else
                snprintf(why, sizeof why,
                         "not fused with its Q/K/V staging (AttentionQKV), which would take it: "
                         "fuse_attention_io is off (--no-fuse-attention-io) or did not run");
        } else if (is(n, "AttentionGrad")) {
            snprintf(why, sizeof why, "the backward of an Attention not fused with its staging (above)");
        } else if (is(n, "Transpose") || is(n, "Split") || is(n, "Concat") || is(n, "Rotary") || is(n, "RotaryGrad")) {
            if (near_attention(g, &rd, i, 1, NEAR_DEPTH) || near_attention(g, &rd, i, 0, NEAR_DEPTH))
                snprintf(why, sizeof why, "%s around an attention not fused with its staging",
                         is(n, "Rotary") || is(n, "RotaryGrad") ? "RoPE" : "head layout");
        } else if (is_norm(n)) {
            norm_why(g, &rd, i, why, sizeof why);
        } else if (is(n, "RMSNormGrad") || is(n, "LayerNormGrad")) {
            const int f = forward_norm(g, &rd, n);
            if (f >= 0) {
                char w[320];
                norm_why(g, &rd, f, w, sizeof w);
                if (w[0]) snprintf(why, sizeof why, "the backward of a norm %s", w);
            }
        } else if (!n->domain[0]) {
            for (size_t k = 0; k < sizeof left / sizeof left[0]; k++)
                if (is(n, left[k]))
                    snprintf(why, sizeof why,
                             "left by the fusions (no attention, norm, GELU or SwiGLU pattern "
                             "took it)");
        }
        if (!why[0]) continue;
        const int k = kind_of(r, n->op_type, why, i);
        r->kinds[k].count++;
        r->kind_of[i] = k;
        r->n_slow++;
    }
    free(rd.start);
    free(rd.node);
    return FR_OK;
}

void fr_fast_path_generic_attention(fr_slow_report *r, const fr_graph *g, const char *why)
{
    static const char *const ops[] = {"Attention", "AttentionGrad", "AttentionQKV", "AttentionQKVGrad"};
    char w[400];
    snprintf(w, sizeof w, "ran on fp8run's own attention kernels, not cuDNN's flash attention: %s", why);
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead || r->kind_of[i] >= 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0) continue;
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
            if (is(n, ops[k])) {
                const int kd = kind_of(r, n->op_type, w, i);
                r->kinds[kd].count++;
                r->kind_of[i] = kd;
                r->n_slow++;
            }
    }
}

void fr_slow_report_free(fr_slow_report *r)
{
    free(r->kind_of);
    r->kind_of = NULL;
}

double fr_slow_share(const fr_slow_report *r, const fr_graph *g, const double *node_ms, double total_ms)
{
    if (!node_ms || !(total_ms > 0)) return 0;
    double t = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (r->kind_of[i] >= 0) t += node_ms[i];
    return t / total_ms;
}

/* Appends to a growing string. */
typedef struct buf {
    char *s;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int w = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return;
        if (b->s && b->n + (size_t)w < b->cap) {
            b->n += (size_t)w;
            return;
        }
        const size_t cap = (b->cap + (size_t)w + 256) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = cap;
    }
}

fr_status fr_slow_report_text(const fr_slow_report *r, const fr_graph *g, const double *node_ms, double total_ms,
                              int estimated, char **text)
{
    buf b = {NULL, 0, 0, 0};
    if (r->n_slow == 0) {
        put(&b, "off the fast path: nothing (%d nodes)\n", r->n_nodes);
    } else {
        const double share = fr_slow_share(r, g, node_ms, total_ms);
        put(&b, "off the fast path: %d of %d nodes", r->n_slow, r->n_nodes);
        if (node_ms && total_ms > 0)
            put(&b, ", %.1f%% of the GPU time%s", 100 * share,
                estimated ? " (estimated from each node's ceiling)" : "");
        put(&b, "\n");
        for (int k = 0; k < r->n_kinds; k++) {
            const fr_slow_kind *kd = &r->kinds[k];
            put(&b, "  %4d %-20s", kd->count, kd->op);
            if (node_ms && total_ms > 0) {
                double t = 0;
                for (int i = 0; i < g->n_nodes; i++)
                    if (r->kind_of[i] == k) t += node_ms[i];
                put(&b, " %5.1f%%", 100 * t / total_ms);
            }
            put(&b, "  %s (first '%s')\n", kd->why, g->nodes[kd->first].name);
        }
        if (node_ms && total_ms > 0 && share > 0.05)
            put(&b, "warning: %.1f%% of the GPU time%s is in %d nodes off the fast path (listed above)\n", 100 * share,
                estimated ? " (estimated)" : "", r->n_slow);
    }
    if (b.oom) {
        free(b.s);
        return fr_error(FR_ERR_OOM, "fast path report: out of memory");
    }
    *text = b.s;
    return FR_OK;
}
