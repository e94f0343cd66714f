/* Graph pattern matching helpers (see pattern.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/layout_plan.h"
#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/pattern.h"

fr_status fr_readers_refresh(fr_readers *r, const char *who)
{
    const fr_graph *g = r->g;
    free(r->count);
    r->count = fr_calloc((size_t)g->n_values + 1, sizeof(int), who);
    if (!r->count) return FR_ERR_OOM;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) r->count[n->inputs[k]]++;
    }
    for (int i = 0; i < g->n_outputs; i++) r->count[g->outputs[i]]++;
    return FR_OK;
}

void fr_readers_free(fr_readers *r)
{
    free(r->count);
    r->count = NULL;
}

const fr_node *fr_sole_reader(const fr_readers *r, int v)
{
    if (v < 0 || r->count[v] != 1) return NULL;
    const fr_graph *g = r->g;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v) return n;
    }
    return NULL; /* the one reader is a graph output */
}

const fr_node *fr_live_producer(const fr_graph *g, int v)
{
    int p = v >= 0 ? g->values[v].producer : -1;
    return p >= 0 && !g->nodes[p].dead ? &g->nodes[p] : NULL;
}

int fr_is_onnx_op(const fr_node *n, const char *op) { return !n->dead && !n->domain[0] && strcmp(n->op_type, op) == 0; }

int fr_binary_other(const fr_node *n, const char *op, int v)
{
    if (!n || !fr_is_onnx_op(n, op) || n->n_inputs != 2 || n->n_outputs != 1) return -1;
    return n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : -1;
}

int fr_same_dims(const fr_value *a, const fr_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int k = 0; k < a->rank; k++)
        if (a->dims[k] != b->dims[k]) return 0;
    return 1;
}

int fr_const_scalar(const fr_graph *g, int v, double *out)
{
    if (v < 0 || (g->values[v].flags & FR_VAL_PARAM)) return 0;
    const fr_tensor *t = g->values[v].constant;
    if (!t || fr_tensor_numel(t) != 1 || t->dtype == FR_BOOL) return 0;
    *out = fr_tensor_get_f64(t, 0);
    return 1;
}

fr_status fr_fuse_loop(fr_readers *r, const char *who, fr_match_fn match, fr_rewrite_fn fuse, void *ctx, void *m,
                       int *count)
{
    fr_graph *g = r->g;
    *count = 0;
    fr_status st = fr_readers_refresh(r, who);
    const int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes && st == FR_OK; i++) {
        if (!match(ctx, i, m)) continue;
        if (*count == 0) st = fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1);
        if (st == FR_OK) st = fuse(ctx, m);
        if (st == FR_OK) st = fr_readers_refresh(r, who);
        if (st == FR_OK) (*count)++;
    }
    if (st == FR_OK && *count) {
        st = fr_graph_compact(g);
        if (st == FR_OK) st = fr_graph_toposort(g);
    }
    return st;
}

fr_status fr_fuse_on_readers(fr_graph *g, const char *who, fr_match_fn match, fr_rewrite_fn fuse, void *m,
                             int *count)
{
    fr_readers rd = {g, NULL};
    fr_status st = fr_fuse_loop(&rd, who, match, fuse, &rd, m, count);
    fr_readers_free(&rd);
    return st;
}

void fr_fuse_kill(fr_graph *g, const int *dead, int n, const char *suffix, char *base, size_t size)
{
    snprintf(base, size, "%s/%s", g->nodes[dead[n - 1]].name, suffix);
    for (int i = 0; i < n; i++) g->nodes[dead[i]].dead = 1;
}

fr_status fr_pattern_const_i64(fr_graph *g, const char *base, int n, const int64_t *vals, int *out)
{
    fr_tensor *t = NULL;
    const int64_t cnt = n;
    FR_TRY(fr_graph_add_unique_value(g, base, out));
    FR_TRY(fr_tensor_new(FR_I64, 1, &cnt, base, &t));
    memcpy(t->data, vals, sizeof(int64_t) * (size_t)n);
    return fr_graph_set_initializer(g, *out, t); /* owns t from here, even on failure */
}

fr_status fr_pattern_reshape(fr_graph *g, int x, int rank, const int64_t *dims, const char *base, int *out)
{
    char nm[512];
    int shape, nid;
    snprintf(nm, sizeof nm, "%s/shape", base);
    FR_TRY(fr_pattern_const_i64(g, nm, rank, dims, &shape));
    if (*out < 0) FR_TRY(fr_graph_add_unique_value(g, base, out));
    snprintf(nm, sizeof nm, "%s/Reshape", base);
    FR_TRY(fr_graph_add_node(g, "Reshape", FR_DOMAIN_ONNX, nm, 2, (int[]){x, shape}, 1, out, &nid));
    return fr_node_infer(g, nid);
}

const fr_node *fr_reader_op(const fr_readers *r, int v, const char *op)
{
    const fr_graph *g = r->g;
    for (int i = 0; v >= 0 && i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (!fr_is_onnx_op(n, op)) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == v) return n;
    }
    return NULL;
}

int fr_pattern_const_ints(const fr_graph *g, const fr_node *n, int i, int *cnt, int64_t *vals)
{
    *cnt = -1;
    if (i >= n->n_inputs || n->inputs[i] < 0) return 1;
    const fr_tensor *t = g->values[n->inputs[i]].constant;
    if (!t || !fr_dtype_is_int(t->dtype) || t->rank > 1 || fr_tensor_numel(t) > FR_MAX_RANK) return 0;
    *cnt = (int)fr_tensor_numel(t);
    for (int k = 0; k < *cnt; k++) vals[k] = fr_tensor_get_i64(t, k);
    return 1;
}

int fr_pattern_slice_plan(const fr_graph *g, const fr_node *n, fr_slice_plan *p)
{
    if (!fr_is_onnx_op(n, "Slice") || n->n_inputs < 1 || n->inputs[0] < 0) return 0;
    const fr_value *X = &g->values[n->inputs[0]];
    int cnt, n_ends, n_axes, n_steps;
    int64_t st[FR_MAX_RANK], en[FR_MAX_RANK], ax[FR_MAX_RANK], sp[FR_MAX_RANK];
    if (fr_graph_opset(g, "") < 10 || n->n_inputs == 1) {
        if (fr_slice_attr(n, "starts", 1, &cnt, st) != FR_OK || fr_slice_attr(n, "ends", 1, &n_ends, en) != FR_OK ||
            fr_slice_attr(n, "axes", 0, &n_axes, ax) != FR_OK) {
            fr_clear_error();
            return 0;
        }
        n_steps = -1;
    } else if (!fr_pattern_const_ints(g, n, 1, &cnt, st) || !fr_pattern_const_ints(g, n, 2, &n_ends, en) ||
               !fr_pattern_const_ints(g, n, 3, &n_axes, ax) || !fr_pattern_const_ints(g, n, 4, &n_steps, sp) ||
               cnt < 0 || n_ends < 0) {
        return 0;
    }
    if (X->rank < 1 || fr_slice_resolve(n, X->rank, X->dims, cnt, st, n_ends, en, n_axes, ax, n_steps, sp, p) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    return 1;
}

int fr_match_scalar_scale(const fr_readers *r, int x, double *factor, int *node)
{
    const fr_graph *g = r->g;
    const fr_node *n = fr_live_producer(g, x);
    if (!n || r->count[x] != 1 || g->values[x].dtype != FR_F32 || n->n_inputs != 2) return -1;
    const int div = fr_is_onnx_op(n, "Div");
    if (!div && !fr_is_onnx_op(n, "Mul")) return -1;
    double s;
    const int k = div ? 1 : fr_const_scalar(g, n->inputs[1], &s) ? 1 : 0; /* the constant side */
    if (!fr_const_scalar(g, n->inputs[k], &s) || s == 0 || !isfinite(s) || n->inputs[1 - k] < 0 ||
        g->values[n->inputs[1 - k]].constant || !fr_same_dims(&g->values[n->inputs[1 - k]], &g->values[x]))
        return -1;
    *factor = div ? 1.0 / s : s;
    *node = (int)(n - g->nodes);
    return n->inputs[1 - k];
}

int fr_match_scale_below_layout(const fr_readers *r, int x, double *factor, int *node, int *layout)
{
    const fr_graph *g = r->g;
    int v = x;
    *layout = -1;
    for (int steps = 0; steps < 4; steps++) {
        const fr_node *n = fr_live_producer(g, v);
        if (!n || r->count[v] != 1 || g->values[v].dtype != FR_F32) return -1;
        if (!(fr_is_onnx_op(n, "Reshape") || fr_is_onnx_op(n, "Transpose")) || n->n_inputs < 1) break;
        *layout = (int)(n - g->nodes);
        v = n->inputs[0];
    }
    return *layout < 0 ? -1 : fr_match_scalar_scale(r, v, factor, node);
}

int fr_match_softcap(const fr_readers *r, int x, double *cap, int nodes[3])
{
    const fr_graph *g = r->g;
    const fr_node *mul = fr_live_producer(g, x);
    double c, inner;
    if (!mul || !fr_is_onnx_op(mul, "Mul") || mul->n_inputs != 2) return -1;
    const int k = fr_const_scalar(g, mul->inputs[1], &c) ? 1 : fr_const_scalar(g, mul->inputs[0], &c) ? 0 : -1;
    if (k < 0 || !(c > 0) || !isfinite(c)) return -1;
    const int t = mul->inputs[1 - k];
    const fr_node *th = fr_live_producer(g, t);
    if (!th || !fr_is_onnx_op(th, "Tanh") || th->n_inputs != 1 || r->count[t] != 1 || g->values[t].dtype != FR_F32)
        return -1;
    const int d = th->inputs[0];
    const fr_node *dv = fr_live_producer(g, d);
    if (!dv || r->count[d] != 1 || g->values[d].dtype != FR_F32 || dv->n_inputs != 2 ||
        !fr_const_scalar(g, dv->inputs[1], &inner))
        return -1;
    if (fr_is_onnx_op(dv, "Div") ? (float)inner != (float)c : !fr_is_onnx_op(dv, "Mul") || fabs(inner * c - 1.0) > 1e-6)
        return -1;
    *cap = c;
    nodes[0] = (int)(dv - g->nodes);
    nodes[1] = (int)(th - g->nodes);
    nodes[2] = (int)(mul - g->nodes);
    return dv->inputs[0];
}
