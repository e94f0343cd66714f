/* FP8 compile, detection (fp8_compile_internal.h): which MatMul / Gemm nodes are Linear layers
 * (a parameter weight, optionally through a Transpose, with a folded bias), and why the others
 * that read a parameter are not. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8_compile_internal.h"

/* ---- graph queries ---- */

static int is_param(const fr_graph *g, int vid)
{
    return vid >= 0 && (g->values[vid].flags & FR_VAL_PARAM) && g->values[vid].constant;
}

static int is_op(const fr_node *n, const char *op) { return strcmp(n->op_type, op) == 0 && n->domain[0] == '\0'; }

/* A Linear's weight: a trained parameter, or with frozen_linears a 2-D float32 constant (LoRA's
 * frozen base: converted, never fused, no weight gradient) */
static int is_weight(const fr_graph *g, const fr_fp8_options *o, int vid)
{
    if (is_param(g, vid)) return 1;
    const fr_value *v = vid >= 0 ? &g->values[vid] : NULL;
    return o->frozen_linears && v && v->constant && v->dtype == FR_F32 && v->rank == 2 && !(v->flags & FR_VAL_STATE);
}

static fr_status add_skip(pass *p, int nid, int w, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static fr_status add_skip(pass *p, int nid, int w, const char *fmt, ...)
{
    fr_fp8_report *r = p->r;
    fr_fp8_skip *ns = fr_realloc_array(r->skipped, (size_t)r->n_skipped + 1, sizeof *ns, "fp8 report");
    if (!ns) return FR_ERR_OOM;
    r->skipped = ns;
    fr_fp8_skip *s = &ns[r->n_skipped++];
    memset(s, 0, sizeof *s);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const fr_node *n = &p->g->nodes[nid];
    s->node = fr_strdup(n->name, "fp8 report");
    s->op_type = fr_strdup(n->op_type, "fp8 report");
    s->weight = fr_strdup(w >= 0 ? p->g->values[w].name : "", "fp8 report");
    s->reason = fr_strdup(msg, "fp8 report");
    if (!s->node || !s->op_type || !s->weight || !s->reason) return FR_ERR_OOM;
    return FR_OK;
}

/* W of a MatMul/Gemm operand: a parameter, or Transpose(parameter) with perm [1, 0]. */
static int weight_of(pass *p, int vid, int *flip, int *tnode)
{
    fr_graph *g = p->g;
    *flip = 0;
    *tnode = -1;
    if (vid < 0) return -1;
    if (is_weight(g, p->opt, vid)) return vid;
    int pr = g->values[vid].producer;
    if (pr < 0 || !is_op(&g->nodes[pr], "Transpose") || g->nodes[pr].n_inputs != 1) return -1;
    int src = g->nodes[pr].inputs[0];
    if (!is_weight(g, p->opt, src) || g->values[src].rank != 2) return -1;
    int cnt;
    const int64_t *perm;
    if (fr_node_attr_ints(&g->nodes[pr], "perm", &cnt, &perm) != FR_OK) return -1;
    if (cnt >= 0 && !(cnt == 2 && perm[0] == 1 && perm[1] == 0)) return -1;
    *flip = 1;
    *tnode = pr;
    return src;
}

/* Fold Add(Y, b) / Add(b, Y) with a bias parameter into the candidate. */
static void fold_bias_add(pass *p, cand *c)
{
    fr_graph *g = p->g;
    int y = c->y;
    if (p->uses[y] != 1 || (g->values[y].flags & FR_VAL_OUTPUT)) return;
    int an = p->consumer[y];
    const fr_node *a = &g->nodes[an];
    if (!is_op(a, "Add") || a->n_inputs != 2 || a->n_outputs != 1 || a->outputs[0] < 0) return;
    int b = a->inputs[0] == y ? a->inputs[1] : a->inputs[0];
    if (b == y || !is_param(g, b)) return;
    const fr_value *bv = &g->values[b], *yv = &g->values[y], *ov = &g->values[a->outputs[0]];
    int xrank = g->values[c->x].rank;
    int shape_ok = bv->dtype == FR_F32 && ((bv->rank == 1 && bv->dims[0] == c->N) ||
                                           (bv->rank == 2 && bv->dims[0] == 1 && bv->dims[1] == c->N && xrank >= 2));
    if (!shape_ok || ov->rank != yv->rank || ov->dtype != yv->dtype) return;
    for (int d = 0; d < yv->rank; d++)
        if (ov->dims[d] != yv->dims[d]) return;
    c->bias = b;
    c->add_node = an;
    c->y = a->outputs[0];
}

/* Examine one node; appends a candidate or a skip entry (or ignores non-Linear GEMMs). */
fr_status fr_fp8_detect(pass *p, int nid)
{
    fr_graph *g = p->g;
    const fr_node *n = &g->nodes[nid];
    int matmul = is_op(n, "MatMul"), gemm = is_op(n, "Gemm");
    if (!matmul && !gemm) return FR_OK;
    if (n->n_outputs < 1 || n->outputs[0] < 0 || n->n_inputs < 2) return FR_OK;
    int a = n->inputs[0], flip, tnode;
    int w = weight_of(p, n->inputs[1], &flip, &tnode);
    if (w < 0) {
        if (is_param(g, a))
            return add_skip(p, nid, a, "not eligible: the weight is the left operand (W @ X)");
        return FR_OK; /* activation x activation: not a Linear */
    }
    cand c;
    memset(&c, 0, sizeof c);
    c.node = nid;
    c.x = a;
    c.w = w;
    c.bias = -1;
    c.tnode = tnode;
    c.add_node = -1;
    c.y = n->outputs[0];
    c.group = -1;
    c.transB = flip;
    if (gemm) {
        float alpha, beta;
        int64_t ta, tb;
        FR_TRY(fr_node_attr_float(n, "alpha", 1.0f, &alpha));
        FR_TRY(fr_node_attr_float(n, "beta", 1.0f, &beta));
        FR_TRY(fr_node_attr_int(n, "transA", 0, &ta));
        FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
        if (ta != 0) return add_skip(p, nid, w, "not eligible: transA = %lld", (long long)ta);
        if (alpha != 1.0f) return add_skip(p, nid, w, "not eligible: alpha != 1 (alpha = %g)", (double)alpha);
        c.transB = (int)(tb != 0) ^ flip;
    }
    const fr_value *xv = &g->values[a], *wv = &g->values[w];
    if (xv->rank < 0 || xv->dtype == FR_UNDEFINED)
        return fr_error(FR_ERR_SHAPE, "fp8 compile: node '%s' (%s): input '%s' has no inferred shape "
                        "(run shape inference before the fp8 pass)", n->name, n->op_type, xv->name);
    if (wv->rank != 2) return add_skip(p, nid, w, "not eligible: the weight is %d-D, not 2-D", wv->rank);
    if (wv->dtype != FR_F32)
        return add_skip(p, nid, w, "not eligible: the weight is %s (float32 master weights needed)",
                        fr_dtype_name(wv->dtype));
    if (xv->dtype != FR_F32)
        return add_skip(p, nid, w, "not eligible: the input '%s' is %s, not float32", xv->name,
                        fr_dtype_name(xv->dtype));
    if (xv->rank < 1 || (gemm && xv->rank != 2))
        return add_skip(p, nid, w, "not eligible: the input '%s' has rank %d", xv->name, xv->rank);
    c.K = c.transB ? wv->dims[1] : wv->dims[0];
    c.N = c.transB ? wv->dims[0] : wv->dims[1];
    if (xv->dims[xv->rank - 1] != c.K)
        return fr_error(FR_ERR_SHAPE, "fp8 compile: node '%s' (%s): input '%s' does not match weight "
                        "'%s' (K = %lld)", n->name, n->op_type, xv->name, wv->name, (long long)c.K);
    if (gemm && n->n_inputs > 2 && n->inputs[2] >= 0) {
        float beta;
        FR_TRY(fr_node_attr_float(n, "beta", 1.0f, &beta));
        if (beta != 1.0f) return add_skip(p, nid, w, "not eligible: beta != 1 (beta = %g)", (double)beta);
        int cb = n->inputs[2];
        const fr_value *cv = &g->values[cb];
        int ok = is_param(g, cb) && cv->dtype == FR_F32 &&
                 ((cv->rank == 1 && cv->dims[0] == c.N) || (cv->rank == 2 && cv->dims[0] == 1 && cv->dims[1] == c.N));
        if (!ok) return add_skip(p, nid, w, "not eligible: C '%s' is not a bias parameter of shape [%lld]",
                                 cv->name, (long long)c.N);
        c.bias = cb;
    }
    if (c.bias < 0) fold_bias_add(p, &c);
    c.frozen = !is_param(g, w);
    c.exclusive = p->uses[w] == 1 && (tnode < 0 || p->uses[g->nodes[tnode].outputs[0]] == 1) &&
                  (c.bias < 0 || p->uses[c.bias] == 1);
    cand *nc = fr_realloc_array(p->c, (size_t)p->nc + 1, sizeof *nc, "fp8 compile");
    if (!nc) return FR_ERR_OOM;
    p->c = nc;
    p->c[p->nc++] = c;
    return FR_OK;
}

fr_status fr_fp8_count_uses(pass *p)
{
    fr_graph *g = p->g;
    p->uses = fr_calloc((size_t)g->n_values + 1, sizeof(int), "fp8 compile");
    p->consumer = fr_malloc(((size_t)g->n_values + 1) * sizeof(int), "fp8 compile");
    if (!p->uses || !p->consumer) return FR_ERR_OOM;
    for (int v = 0; v < g->n_values; v++) p->consumer[v] = -1;
    for (int n = 0; n < g->n_nodes; n++) {
        const fr_node *nd = &g->nodes[n];
        if (nd->dead) continue;
        for (int i = 0; i < nd->n_inputs; i++)
            if (nd->inputs[i] >= 0) {
                p->uses[nd->inputs[i]]++;
                p->consumer[nd->inputs[i]] = n;
            }
    }
    for (int i = 0; i < g->n_outputs; i++) p->uses[g->outputs[i]]++;
    return FR_OK;
}

