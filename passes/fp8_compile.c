/* The FP8 compile pass (see fp8_compile.h): find Linear layers, group the ones sharing an input,
 * decide precisions, rewrite into ai.fp8run::Linear (+ Split for fused groups), report. */
#include "fp8_compile.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff.h"

void fr_fp8_options_default(fr_fp8_options *o)
{
    memset(o, 0, sizeof *o);
    o->precision = "fp8";
    o->recipe = "delayed";
    o->fp8_format = "hybrid";
    o->bf16_boundary = 1;
    o->fp8_exclude = NULL;
    o->fuse = 1;
    o->pad_multiple = 16;
    o->margin = 0;
    o->amax_history_len = 1024;
    o->amax_algo = FR_AMAX_MAX;
    o->interval = 1;
}

/* ---- small string helpers ---- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t ncap = (b->cap + (size_t)k + 64) * 2;
        char *ns = realloc(b->s, ncap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
}

/* sb's string (owned by the caller) or NULL with FR_ERR_OOM recorded */
static char *sb_take(sbuf *b, const char *what)
{
    if (b->oom || !b->s) {
        free(b->s);
        if (b->oom) {
            fr_error(FR_ERR_OOM, "out of memory building %s", what);
            return NULL;
        }
        return fr_strdup("", what);
    }
    return b->s;
}

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

/* ---- candidates ---- */

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
    int frozen;        /* the weight is a constant (frozen_linears): never fused */
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
static fr_status detect(pass *p, int nid)
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

static fr_status count_uses(pass *p)
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

/* ---- rewriting ---- */

/* Turn node nid into an ai.fp8run::Linear named `name` with the given inputs/outputs. */
static fr_status node_become_linear(fr_graph *g, int nid, const char *name, int n_in, const int *in,
                                    int n_out, const int *out)
{
    char *nm = fr_strdup(name, "node name"), *op = fr_strdup("Linear", "node op"),
         *dom = fr_strdup(FR_DOMAIN_FP8RUN, "node domain");
    int *ni = fr_malloc((size_t)n_in * sizeof(int), "node inputs");
    int *no = fr_malloc((size_t)n_out * sizeof(int), "node outputs");
    if (!nm || !op || !dom || !ni || !no) {
        free(nm);
        free(op);
        free(dom);
        free(ni);
        free(no);
        return FR_ERR_OOM;
    }
    fr_node *n = &g->nodes[nid];
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->inputs);
    free(n->outputs);
    for (int i = 0; i < n->n_attrs; i++) fr_attr_clear(&n->attrs[i]);
    free(n->attrs);
    n->attrs = NULL;
    n->n_attrs = 0;
    n->name = nm;
    n->op_type = op;
    n->domain = dom;
    memcpy(ni, in, (size_t)n_in * sizeof(int));
    memcpy(no, out, (size_t)n_out * sizeof(int));
    n->inputs = ni;
    n->outputs = no;
    n->n_inputs = n_in;
    n->n_outputs = n_out;
    n->op = fr_linear_op("Linear");
    for (int o = 0; o < n_out; o++)
        if (out[o] >= 0) g->values[out[o]].producer = nid;
    return FR_OK;
}

/* A [1] float32 state value holding 1.0 (the scale before any update). */
static fr_status add_state_value(fr_graph *g, const char *prefix, const char *what, int *vid)
{
    char nm[1200];
    snprintf(nm, sizeof nm, "%s/%s", prefix, what);
    int64_t one = 1;
    fr_tensor *t;
    FR_TRY(fr_tensor_new(FR_F32, 1, &one, nm, &t));
    ((float *)t->data)[0] = 1.0f;
    fr_status st = fr_graph_add_unique_value(g, nm, vid);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    fr_value *v = &g->values[*vid];
    v->constant = t;
    v->flags |= FR_VAL_STATE;
    fr_value_set_shape(v, FR_F32, 1, &one);
    return FR_OK;
}

static fr_status add_named_value(fr_graph *g, const char *a, const char *b, int *vid)
{
    char nm[1200];
    snprintf(nm, sizeof nm, "%s/%s", a, b);
    return fr_graph_add_unique_value(g, nm, vid);
}

static fr_status add_state_entry(fr_fp8_report *r, int layer, fr_fp8_operand op, fr_dtype fmt,
                                 int scale, const char *amax_name, int amax)
{
    fr_fp8_state *ns = fr_realloc_array(r->states, (size_t)r->n_states + 1, sizeof *ns, "fp8 report");
    if (!ns) return FR_ERR_OOM;
    r->states = ns;
    fr_fp8_state *s = &ns[r->n_states++];
    s->layer = layer;
    s->operand = op;
    s->fmt = fmt;
    s->scale_value = scale;
    s->amax_value = amax;
    s->amax_name = fr_strdup(amax_name, "fp8 report");
    return s->amax_name ? FR_OK : FR_ERR_OOM;
}

/* Concatenate the members' weights (or biases) into a new parameter; record the slices. */
static fr_status fuse_params(pass *p, const int *members, int nm, int bias, int transB, int64_t K,
                             int64_t Nt, int *out_vid)
{
    fr_graph *g = p->g;
    sbuf nb = {0};
    sb_printf(&nb, "fused(");
    for (int i = 0; i < nm; i++) {
        const cand *c = &p->c[members[i]];
        sb_printf(&nb, "%s%s", i ? "," : "", g->values[bias ? c->bias : c->w].name);
    }
    sb_printf(&nb, ")");
    char *name = sb_take(&nb, "fused parameter name");
    if (!name) return FR_ERR_OOM;
    fr_fp8_report *r = p->r;
    fr_fp8_fused *nf = fr_realloc_array(r->fused, (size_t)r->n_fused + 1, sizeof *nf, "fp8 report");
    if (!nf) {
        free(name);
        return FR_ERR_OOM;
    }
    r->fused = nf;
    fr_fp8_fused *f = &nf[r->n_fused++];
    memset(f, 0, sizeof *f);
    f->name = name;
    f->value = -1;
    f->is_bias = bias;
    f->transB = bias ? 0 : transB;
    f->K = bias ? 0 : K;
    f->slices = fr_calloc((size_t)nm, sizeof *f->slices, "fp8 report");
    if (!f->slices) return FR_ERR_OOM;
    int64_t dims[2] = {transB ? Nt : K, transB ? K : Nt};
    fr_tensor *t;
    if (bias)
        FR_TRY(fr_tensor_new(FR_F32, 1, &Nt, name, &t));
    else
        FR_TRY(fr_tensor_new(FR_F32, 2, dims, name, &t));
    float *dst = t->data;
    int64_t off = 0;
    for (int i = 0; i < nm; i++) {
        const cand *c = &p->c[members[i]];
        int src_vid = bias ? c->bias : c->w;
        fr_value *sv = &g->values[src_vid];
        const float *src = sv->constant->data;
        fr_fp8_slice *s = &f->slices[f->n_slices++];
        s->name = fr_strdup(sv->name, "fp8 report");
        if (!s->name) {
            fr_tensor_free(t);
            return FR_ERR_OOM;
        }
        s->value = src_vid;
        s->is_bias = bias;
        s->offset = off;
        s->size = c->N;
        s->transB = bias ? 0 : c->transB;
        s->rank = sv->rank;
        s->dims[0] = sv->dims[0];
        s->dims[1] = sv->rank > 1 ? sv->dims[1] : 0;
        for (int64_t j = 0; j < c->N; j++) {
            if (bias) {
                dst[off + j] = src[j];
                continue;
            }
            for (int64_t k = 0; k < K; k++) {
                float v = c->transB ? src[j * K + k] : src[k * c->N + j];
                if (transB)
                    dst[(off + j) * K + k] = v;
                else
                    dst[k * Nt + off + j] = v;
            }
        }
        off += c->N;
        sv->flags &= ~FR_VAL_PARAM; /* trained through the fused parameter now */
    }
    int vid;
    fr_status st = fr_graph_add_unique_value(g, name, &vid);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    fr_value *v = &g->values[vid];
    v->constant = t;
    v->flags |= FR_VAL_PARAM;
    fr_value_set_shape(v, FR_F32, t->rank, t->dims);
    f->value = vid;
    *out_vid = vid;
    return FR_OK;
}

static char *join_names(pass *p, const int *members, int nm, int weights)
{
    sbuf b = {0};
    for (int i = 0; i < nm; i++) {
        const cand *c = &p->c[members[i]];
        sb_printf(&b, "%s%s", i ? "," : "", weights ? p->g->values[c->w].name : p->g->nodes[c->node].name);
    }
    return sb_take(&b, "fp8 report");
}

static void mark_dead_extras(pass *p, const cand *c, int keep_node)
{
    fr_graph *g = p->g;
    if (!keep_node) g->nodes[c->node].dead = 1;
    if (c->add_node >= 0) g->nodes[c->add_node].dead = 1;
    if (c->tnode >= 0 && p->uses[g->nodes[c->tnode].outputs[0]] == 1) g->nodes[c->tnode].dead = 1;
}

/* Rewrite one group (members in node order) into a Linear (+ Split). */
static fr_status rewrite_group(pass *p, const int *members, int nm, fr_lin_precision prec,
                               const char *why)
{
    fr_graph *g = p->g;
    fr_fp8_report *r = p->r;
    const cand *c0 = &p->c[members[0]];
    int nid = c0->node, x = c0->x, has_bias = c0->bias >= 0;
    int64_t K = c0->K, Nt = 0;
    for (int i = 0; i < nm; i++) Nt += p->c[members[i]].N;

    /* names */
    char *lname;
    if (nm == 1) {
        lname = fr_strdup(g->nodes[nid].name, "fp8 compile");
    } else {
        sbuf b = {0};
        sb_printf(&b, "fused(");
        for (int i = 0; i < nm; i++) sb_printf(&b, "%s%s", i ? "," : "", g->nodes[p->c[members[i]].node].name);
        sb_printf(&b, ")");
        lname = sb_take(&b, "fp8 compile");
    }
    if (!lname) return FR_ERR_OOM;
    fr_fp8_layer *nl = fr_realloc_array(r->layers, (size_t)r->n_layers + 1, sizeof *nl, "fp8 report");
    if (!nl) {
        free(lname);
        return FR_ERR_OOM;
    }
    r->layers = nl;
    int li = r->n_layers++;
    fr_fp8_layer *L = &nl[li];
    memset(L, 0, sizeof *L);
    L->name = lname;
    L->weights = join_names(p, members, nm, 1);
    L->sources = join_names(p, members, nm, 0);
    L->why = fr_strdup(why, "fp8 report");
    if (!L->weights || !L->sources || !L->why) return FR_ERR_OOM;
    L->n_fused = nm;
    L->K = K;
    L->N = Nt;
    L->has_bias = has_bias;
    L->precision = prec;
    L->recipe = p->recipe;
    L->pad_multiple = 1;
    int fp8 = prec == FR_LIN_FP8, delayed = fp8 && p->recipe == FR_LIN_DELAYED;
    if (fp8) {
        L->pad_multiple = p->opt->pad_multiple;
        L->pad_k = (K + L->pad_multiple - 1) / L->pad_multiple * L->pad_multiple - K;
        L->pad_n = (Nt + L->pad_multiple - 1) / L->pad_multiple * L->pad_multiple - Nt;
        sbuf b = {0};
        sb_printf(&b, "fp8_state/%s", lname[0] == '/' ? lname + 1 : lname);
        L->state_prefix = sb_take(&b, "fp8 report");
        if (!L->state_prefix) return FR_ERR_OOM;
    }
    r->n_linears += nm;
    if (prec == FR_LIN_FP8) r->n_fp8 += nm;
    else if (prec == FR_LIN_BF16) r->n_bf16 += nm;
    else r->n_fp32 += nm;

    /* weight / bias / output */
    int w = c0->w, b = c0->bias, y = c0->y, transB = c0->transB;
    if (nm > 1) {
        FR_TRY(fuse_params(p, members, nm, 0, transB, K, Nt, &w));
        if (has_bias) FR_TRY(fuse_params(p, members, nm, 1, transB, K, Nt, &b));
        FR_TRY(add_named_value(g, lname, "Y", &y));
    }
    L->transB = transB;

    int in[FR_LIN_N_IN] = {x, w, b, -1, -1, -1}, out[FR_LIN_N_OUT] = {y, -1, -1, -1, -1};
    int n_in = has_bias ? 3 : 2, n_out = 1;
    /* bf16: X's bf16 copy (the forward GEMM's operand anyway) is saved for the weight gradient
     * when this group's MatMuls are X's only readers: the float X then dies after the forward
     * (2 bytes per element kept instead of 4) and the backward need not round it again. With
     * other readers the float X might stay alive beside the copy, so then the rule keeps X. */
    int x_exclusive = g->values[x].producer >= 0 && p->uses[x] == nm && !(g->values[x].flags & FR_VAL_OUTPUT);
    if (fp8) {
        FR_TRY(add_named_value(g, lname, "Xq", &out[FR_LIN_OUT_XQ]));
        FR_TRY(add_named_value(g, lname, "Xq_scale_inv", &out[FR_LIN_OUT_XQ_SINV]));
        n_out = 3;
    } else if (prec == FR_LIN_BF16 && x_exclusive) {
        FR_TRY(add_named_value(g, lname, "Xq", &out[FR_LIN_OUT_XQ]));
        n_out = 2;
    }
    if (delayed) {
        FR_TRY(add_state_value(g, L->state_prefix, "scale_x", &in[FR_LIN_IN_SCALE_X]));
        FR_TRY(add_state_value(g, L->state_prefix, "scale_w", &in[FR_LIN_IN_SCALE_W]));
        FR_TRY(add_state_value(g, L->state_prefix, "scale_dy", &in[FR_LIN_IN_SCALE_DY]));
        FR_TRY(add_named_value(g, L->state_prefix, "amax_x", &out[FR_LIN_OUT_AMAX_X]));
        FR_TRY(add_named_value(g, L->state_prefix, "amax_w", &out[FR_LIN_OUT_AMAX_W]));
        n_in = 6;
        n_out = 5;
        char dy_name[1200];
        snprintf(dy_name, sizeof dy_name, "%s/amax_dy", L->state_prefix);
        FR_TRY(add_state_entry(r, li, FR_FP8_OPERAND_X, FR_F8E4M3, in[FR_LIN_IN_SCALE_X],
                               g->values[out[FR_LIN_OUT_AMAX_X]].name, out[FR_LIN_OUT_AMAX_X]));
        FR_TRY(add_state_entry(r, li, FR_FP8_OPERAND_W, FR_F8E4M3, in[FR_LIN_IN_SCALE_W],
                               g->values[out[FR_LIN_OUT_AMAX_W]].name, out[FR_LIN_OUT_AMAX_W]));
        FR_TRY(add_state_entry(r, li, FR_FP8_OPERAND_DY, r->e4m3_only ? FR_F8E4M3 : FR_F8E5M2,
                               in[FR_LIN_IN_SCALE_DY], dy_name, -1));
    }

    /* the first member's node becomes the Linear; the others (and folded Adds, Transposes) go */
    for (int i = 0; i < nm; i++) mark_dead_extras(p, &p->c[members[i]], i == 0);
    FR_TRY(node_become_linear(g, nid, lname, n_in, in, n_out, out));
    fr_node *n = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_int(n, "transB", transB));
    FR_TRY(fr_node_set_attr_string(n, "precision", fr_lin_precision_name(prec)));
    if (fp8) {
        FR_TRY(fr_node_set_attr_string(n, "recipe", fr_lin_recipe_name(p->recipe)));
        FR_TRY(fr_node_set_attr_string(n, "fp8_format", r->e4m3_only ? "e4m3" : "hybrid"));
        FR_TRY(fr_node_set_attr_int(n, "margin", p->opt->margin));
        FR_TRY(fr_node_set_attr_int(n, "pad_multiple", p->opt->pad_multiple));
        FR_TRY(fr_node_set_attr_string(n, "state_prefix", L->state_prefix));
    }
    FR_TRY(fr_node_set_attr_string(n, "weights", L->weights));
    FR_TRY(fr_node_infer(g, nid));
    if (nm == 1) return FR_OK;

    /* Split(Y, sizes) -> the members' outputs */
    const fr_value *yv = &g->values[y];
    int axis = yv->rank - 1, *souts = fr_malloc((size_t)nm * sizeof(int), "fp8 compile");
    int64_t *sizes = fr_malloc((size_t)nm * sizeof(int64_t), "fp8 compile");
    if (!souts || !sizes) {
        free(souts);
        free(sizes);
        return FR_ERR_OOM;
    }
    for (int i = 0; i < nm; i++) {
        souts[i] = p->c[members[i]].y;
        sizes[i] = p->c[members[i]].N;
    }
    int64_t opset = fr_graph_opset(g, "");
    int sin[2] = {y, -1}, sid;
    char sname[1200];
    snprintf(sname, sizeof sname, "%s/Split", lname);
    fr_status st = FR_OK;
    if (opset == 0 || opset >= 13) { /* 'split' became an input at opset 13 */
        int64_t cnt = nm;
        fr_tensor *t = NULL;
        st = fr_tensor_new(FR_I64, 1, &cnt, sname, &t);
        if (st == FR_OK) {
            memcpy(t->data, sizes, (size_t)nm * sizeof(int64_t));
            st = add_named_value(g, lname, "split_sizes", &sin[1]);
        }
        if (st == FR_OK) {
            fr_value *sv = &g->values[sin[1]];
            sv->constant = t;
            sv->flags |= FR_VAL_FOLDED;
            fr_value_set_shape(sv, FR_I64, 1, &cnt);
        } else {
            fr_tensor_free(t);
        }
    }
    if (st == FR_OK) st = fr_graph_add_node(g, "Split", "", sname, sin[1] >= 0 ? 2 : 1, sin, nm, souts, &sid);
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[sid], "axis", axis);
    if (st == FR_OK && sin[1] < 0) st = fr_node_set_attr_ints(&g->nodes[sid], "split", nm, sizes);
    if (st == FR_OK) g->nodes[sid].op = fr_op_find("", "Split"); /* resolved later if unknown now */
    free(souts);
    free(sizes);
    return st;
}

/* ---- precision decisions ---- */

typedef struct grp {
    int *m;
    int n;
} grp;

/* Is node t a Transpose that swaps the last two dims of its input (and keeps the others)? */
static int swaps_last2(const fr_graph *g, const fr_node *t)
{
    if (t->dead || strcmp(t->op_type, "Transpose") != 0 || t->domain[0] || t->n_inputs != 1 || t->inputs[0] < 0)
        return 0;
    const fr_attr *a = fr_node_attr(t, "perm");
    int r = g->values[t->inputs[0]].rank;
    if (!a || a->type != FR_ATTR_INTS || a->n != r || r < 2) return 0;
    for (int k = 0; k < r - 2; k++)
        if (a->ints[k] != k) return 0;
    return a->ints[r - 2] == r - 1 && a->ints[r - 1] == r - 2;
}

static int n_readers(const fr_graph *g, int v)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) n += !g->nodes[i].dead && g->nodes[i].inputs[k] == v;
    for (int i = 0; i < g->n_outputs; i++) n += g->outputs[i] == v;
    return n;
}

/* bf16/fp8 training: the MatMuls of two activations (attention scores and values) become
 * ai.fp8run::MatMul with precision bf16, as autocast runs them; a Transpose of the last two
 * dims feeding one of them (the keys, transposed for Q K^T) becomes its transA/transB flag, so
 * no transposed copy is made, forward or backward. */
static fr_status lower_activation_matmuls(fr_graph *g, int *count)
{
    *count = 0;
    const fr_op_def *mmx = fr_op_find(FR_DOMAIN_FP8RUN, "MatMul");
    if (!mmx) return fr_error(FR_ERR_INTERNAL, "ai.fp8run::MatMul is not registered");
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead || n->domain[0] || strcmp(n->op_type, "MatMul") != 0 || n->n_inputs != 2) continue;
        int eligible = 1;
        for (int k = 0; k < 2; k++) {
            const fr_value *v = n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
            eligible = eligible && v && v->dtype == FR_F32 && v->rank >= 2 && !v->constant &&
                       !(v->flags & FR_VAL_PARAM);
        }
        if (!eligible) continue;
        int trans[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            int v = n->inputs[k], p = g->values[v].producer;
            if (p >= 0 && swaps_last2(g, &g->nodes[p]) && n_readers(g, v) == 1) {
                n->inputs[k] = g->nodes[p].inputs[0];
                g->nodes[p].dead = 1; /* removed with the other dead nodes */
                trans[k] = 1;
            }
        }
        free(n->domain);
        n->domain = fr_strdup(FR_DOMAIN_FP8RUN, "fp8 compile");
        if (!n->domain) return FR_ERR_OOM;
        n->op = mmx;
        FR_TRY(fr_node_set_attr_string(n, "precision", "bf16"));
        if (trans[0]) FR_TRY(fr_node_set_attr_int(n, "transA", 1));
        if (trans[1]) FR_TRY(fr_node_set_attr_int(n, "transB", 1));
        FR_TRY(mmx->infer(g, i));
        (*count)++;
    }
    return *count ? fr_graph_compact(g) : FR_OK;
}

/* bf16/fp8 training: fused attention (ai.fp8run::Attention, emitted before this pass) runs its
 * products in bf16 too, as the unfused MatMuls above would. */
static fr_status attention_to_bf16(fr_graph *g, int *count)
{
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0 || strcmp(n->op_type, "Attention") != 0) continue;
        FR_TRY(fr_node_set_attr_string(n, "precision", "bf16"));
        (*count)++;
    }
    return FR_OK;
}

static fr_status run_pass(pass *p, regex_t *re)
{
    fr_graph *g = p->g;
    FR_TRY(fr_graph_toposort(g));
    FR_TRY(count_uses(p));
    for (int n = 0; n < g->n_nodes; n++) FR_TRY(detect(p, n));
    for (int i = 0; i < p->nc; i++)
        /* by weight name or, for exports whose weights are anonymous ("onnx::MatMul_12"), by
           the node name ("/h.0/mlp/c_proj/MatMul") */
        p->c[i].excluded = re && (regexec(re, g->values[p->c[i].w].name, 0, NULL, 0) == 0 ||
                                  regexec(re, g->nodes[p->c[i].node].name, 0, NULL, 0) == 0);

    /* groups: same input, both exclusive, same exclusion and bias presence; node order */
    grp *gs = fr_calloc((size_t)p->nc + 1, sizeof *gs, "fp8 compile");
    int ng = 0;
    fr_status st = gs ? FR_OK : FR_ERR_OOM;
    for (int i = 0; i < p->nc && st == FR_OK; i++) {
        if (p->c[i].group >= 0) continue;
        grp *G = &gs[ng];
        G->m = fr_malloc((size_t)(p->nc - i) * sizeof(int), "fp8 compile");
        if (!G->m) {
            st = FR_ERR_OOM;
            break;
        }
        p->c[i].group = ng;
        G->m[G->n++] = i;
        const cand *ci = &p->c[i];
        for (int j = i + 1; p->opt->fuse && ci->exclusive && !ci->frozen && j < p->nc; j++) {
            cand *cj = &p->c[j];
            if (cj->group < 0 && cj->exclusive && !cj->frozen && cj->x == ci->x && cj->excluded == ci->excluded &&
                (cj->bias >= 0) == (ci->bias >= 0)) {
                cj->group = ng;
                G->m[G->n++] = j;
            }
        }
        ng++;
    }
    for (int gi = 0; gi < ng && st == FR_OK; gi++) {
        const grp *G = &gs[gi];
        const cand *c0 = &p->c[G->m[0]];
        fr_lin_precision prec = p->prec;
        char why[1400];
        int B = p->opt->bf16_boundary;
        if (p->prec != FR_LIN_FP8) {
            snprintf(why, sizeof why, "precision %s requested", fr_lin_precision_name(p->prec));
        } else if (c0->excluded) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "excluded by fp8_exclude '%s'", p->opt->fp8_exclude);
        } else if (gi < B) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "boundary: first Linear group%s (bf16_boundary %d)",
                     gi ? "s" : "", B);
        } else if (gi >= ng - B) {
            prec = FR_LIN_BF16;
            snprintf(why, sizeof why, "boundary: last Linear group%s (LM head) (bf16_boundary %d)",
                     gi < ng - 1 ? "s" : "", B);
        } else {
            snprintf(why, sizeof why, "fp8");
        }
        size_t wl = strlen(why);
        if (G->n > 1) {
            snprintf(why + wl, sizeof why - wl, "; fused %d Linears sharing input '%s'", G->n,
                     g->values[c0->x].name);
        } else if (p->opt->fuse && !c0->exclusive) {
            for (int j = 0; j < p->nc; j++)
                if (j != G->m[0] && p->c[j].x == c0->x) {
                    snprintf(why + wl, sizeof why - wl, "; not fused: its weight or bias is also "
                             "used elsewhere");
                    break;
                }
        }
        st = rewrite_group(p, G->m, G->n, prec, why);
    }
    for (int gi = 0; gi < ng; gi++) free(gs[gi].m);
    free(gs);
    FR_TRY(st);
    if (ng > 0) FR_TRY(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1)); /* valid ONNX */
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}

fr_status fr_fp8_compile(fr_graph *g, const fr_fp8_options *opt, fr_fp8_report *report)
{
    memset(report, 0, sizeof *report);
    fr_fp8_options dflt;
    if (!opt) {
        fr_fp8_options_default(&dflt);
        opt = &dflt;
    }
    pass p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.opt = opt;
    p.r = report;
    if (fr_lin_precision_parse(opt->precision ? opt->precision : "(null)", &p.prec) != FR_OK ||
        fr_lin_recipe_parse(opt->recipe ? opt->recipe : "(null)", &p.recipe) != FR_OK)
        return fr_error_context(FR_ERR_INVALID_ARG, "fp8 compile");
    const char *fmt = opt->fp8_format ? opt->fp8_format : "(null)";
    if (strcmp(fmt, "hybrid") != 0 && strcmp(fmt, "e4m3") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: fp8_format '%s' is not one of hybrid, e4m3", fmt);
    if (opt->bf16_boundary < 0 || opt->pad_multiple < 1 || opt->pad_multiple > 4096 ||
        opt->margin < -64 || opt->margin > 64)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: bf16_boundary %d, pad_multiple %d or margin "
                        "%d out of range (>= 0, 1..4096, -64..64)", opt->bf16_boundary,
                        opt->pad_multiple, opt->margin);
    fr_fp8_scaling_params sp = {opt->amax_history_len, opt->amax_algo, opt->margin, opt->interval, FR_F8E4M3};
    fr_fp8_scaling probe;
    FR_TRY(fr_fp8_scaling_init(&probe, &sp)); /* validates the delayed recipe's parameters */
    fr_fp8_scaling_free(&probe);
    regex_t re;
    int have_re = opt->fp8_exclude && opt->fp8_exclude[0];
    if (have_re) {
        int rc = regcomp(&re, opt->fp8_exclude, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char msg[256];
            regerror(rc, &re, msg, sizeof msg);
            return fr_error(FR_ERR_INVALID_ARG, "fp8 compile: fp8_exclude '%s' is not a valid regular "
                            "expression: %s", opt->fp8_exclude, msg);
        }
    }
    report->precision = p.prec;
    report->recipe = p.recipe;
    report->e4m3_only = strcmp(fmt, "e4m3") == 0;
    report->bf16_boundary = opt->bf16_boundary;
    report->fuse = opt->fuse;
    report->pad_multiple = opt->pad_multiple;
    report->margin = opt->margin;
    report->amax_history_len = opt->amax_history_len;
    report->amax_algo = opt->amax_algo;
    report->interval = opt->interval;
    fr_status st = FR_OK;
    if (have_re) {
        report->fp8_exclude = fr_strdup(opt->fp8_exclude, "fp8 report");
        if (!report->fp8_exclude) st = FR_ERR_OOM;
    }
    if (st == FR_OK) st = run_pass(&p, have_re ? &re : NULL);
    if (st == FR_OK && p.prec != FR_LIN_FP32) st = lower_activation_matmuls(g, &report->n_activation_matmuls);
    if (st == FR_OK && p.prec != FR_LIN_FP32) st = attention_to_bf16(g, &report->n_attention);
    if (have_re) regfree(&re);
    free(p.uses);
    free(p.consumer);
    free(p.c);
    if (st != FR_OK) {
        fr_error_context(st, "fp8 compile");
        fr_fp8_report_free(report);
    }
    return st;
}

void fr_fp8_report_free(fr_fp8_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_layers; i++) {
        fr_fp8_layer *l = &r->layers[i];
        free(l->name);
        free(l->weights);
        free(l->sources);
        free(l->why);
        free(l->state_prefix);
    }
    for (int i = 0; i < r->n_skipped; i++) {
        free(r->skipped[i].node);
        free(r->skipped[i].op_type);
        free(r->skipped[i].weight);
        free(r->skipped[i].reason);
    }
    for (int i = 0; i < r->n_fused; i++) {
        for (int j = 0; j < r->fused[i].n_slices; j++) free(r->fused[i].slices[j].name);
        free(r->fused[i].slices);
        free(r->fused[i].name);
    }
    for (int i = 0; i < r->n_states; i++) free(r->states[i].amax_name);
    free(r->layers);
    free(r->skipped);
    free(r->fused);
    free(r->states);
    free(r->fp8_exclude);
    memset(r, 0, sizeof *r);
}

/* ---- report text ---- */

fr_status fr_fp8_report_format(const fr_fp8_report *r, char **text)
{
    sbuf b = {0};
    int groups_fused = 0;
    for (int i = 0; i < r->n_layers; i++) groups_fused += r->layers[i].n_fused > 1;
    sb_printf(&b, "FP8 compile: %d Linear layers in %d nodes (%d fused groups): fp8 %d, bf16 %d, fp32 %d\n",
              r->n_linears, r->n_layers, groups_fused, r->n_fp8, r->n_bf16, r->n_fp32);
    if (r->n_activation_matmuls)
        sb_printf(&b, "  %d MatMuls of two activations (attention) run in bf16\n", r->n_activation_matmuls);
    if (r->n_attention) sb_printf(&b, "  %d attention blocks fused (bf16)\n", r->n_attention);
    if (r->n_swiglu)
        sb_printf(&b, "  %d SwiGLU activations fused (%d reading the gate/up Linear's output directly)\n",
                  r->n_swiglu, r->n_swiglu_one_input);
    sb_printf(&b, "  precision %s", fr_lin_precision_name(r->precision));
    if (r->precision == FR_LIN_FP8)
        sb_printf(&b, ", recipe %s, format %s, margin %d, bf16_boundary %d, pad %d%s%s%s",
                  fr_lin_recipe_name(r->recipe), r->e4m3_only ? "e4m3" : "hybrid (E4M3 fwd, E5M2 grads)",
                  r->margin, r->bf16_boundary, r->pad_multiple, r->fp8_exclude ? ", exclude '" : "",
                  r->fp8_exclude ? r->fp8_exclude : "", r->fp8_exclude ? "'" : "");
    if (r->precision == FR_LIN_FP8 && r->recipe == FR_LIN_DELAYED)
        sb_printf(&b, "\n  delayed scaling: amax history %d, %s, interval %d; %d scaled operands",
                  r->amax_history_len, fr_amax_algo_name(r->amax_algo), r->interval, r->n_states);
    sb_printf(&b, "\n");
    for (int i = 0; i < r->n_layers; i++) {
        const fr_fp8_layer *l = &r->layers[i];
        sb_printf(&b, "  %-5s %s\n        weights %s; K x N = %lld x %lld%s%s", fr_lin_precision_name(l->precision),
                  l->name, l->weights, (long long)l->K, (long long)l->N, l->has_bias ? " + bias" : "",
                  l->transB ? " (W [N, K])" : " (W [K, N])");
        if (l->precision == FR_LIN_FP8)
            sb_printf(&b, "; recipe %s; GPU pads K +%lld, N +%lld to multiples of %d (tokens padded at run time)",
                      fr_lin_recipe_name(l->recipe), (long long)l->pad_k, (long long)l->pad_n, l->pad_multiple);
        if (strncmp(l->why, "fp8", 3) == 0 && (l->why[3] == '\0' || l->why[3] == ';'))
            sb_printf(&b, "\n        why: fp8 (eligible, not a boundary group, not excluded)%s\n", l->why + 3);
        else
            sb_printf(&b, "\n        why: %s\n", l->why);
    }
    if (r->n_skipped) sb_printf(&b, "  not converted:\n");
    for (int i = 0; i < r->n_skipped; i++) {
        const fr_fp8_skip *s = &r->skipped[i];
        sb_printf(&b, "    %s '%s' (weight '%s'): %s\n", s->op_type, s->node, s->weight, s->reason);
    }
    for (int i = 0; i < r->n_fused; i++) {
        const fr_fp8_fused *f = &r->fused[i];
        sb_printf(&b, "  fused parameter %s:", f->name);
        for (int j = 0; j < f->n_slices; j++)
            sb_printf(&b, " %s [%lld, %lld)%s", f->slices[j].name, (long long)f->slices[j].offset,
                      (long long)(f->slices[j].offset + f->slices[j].size),
                      f->slices[j].is_bias ? "" : f->slices[j].transB ? " [N,K]" : " [K,N]");
        sb_printf(&b, "\n");
    }
    *text = sb_take(&b, "fp8 report text");
    return *text ? FR_OK : FR_ERR_OOM;
}

fr_status fr_fp8_report_bind(const fr_graph *g, fr_fp8_report *r, int allow_missing)
{
    for (int i = 0; i < r->n_states; i++) {
        fr_fp8_state *s = &r->states[i];
        if (s->amax_value >= 0) continue;
        s->amax_value = fr_graph_find_value(g, s->amax_name);
        if (s->amax_value < 0 && !allow_missing)
            return fr_error(FR_ERR_GRAPH, "fp8 state: the amax value '%s' of layer '%s' is not in the "
                            "graph (was the backward built?)", s->amax_name, r->layers[s->layer].name);
    }
    return FR_OK;
}

fr_status fr_fp8_sync_params(fr_graph *g, const fr_fp8_report *r, int to_original)
{
    for (int i = 0; i < r->n_fused; i++) {
        const fr_fp8_fused *f = &r->fused[i];
        fr_tensor *ft = f->value >= 0 && f->value < g->n_values ? g->values[f->value].constant : NULL;
        int64_t Nt = 0;
        for (int j = 0; j < f->n_slices; j++) Nt += f->slices[j].size;
        if (!ft || ft->dtype != FR_F32 || fr_tensor_numel(ft) != (f->is_bias ? Nt : Nt * f->K))
            return fr_error(FR_ERR_GRAPH, "fp8 sync: fused parameter '%s' is missing or has the wrong "
                            "size", f->name);
        float *fd = ft->data;
        int64_t K = f->K;
        for (int j = 0; j < f->n_slices; j++) {
            const fr_fp8_slice *s = &f->slices[j];
            fr_tensor *ot = s->value >= 0 && s->value < g->n_values ? g->values[s->value].constant : NULL;
            if (!ot || ot->dtype != FR_F32 || fr_tensor_numel(ot) != (f->is_bias ? s->size : s->size * K))
                return fr_error(FR_ERR_GRAPH, "fp8 sync: original parameter '%s' is missing or has the "
                                "wrong size", s->name);
            float *od = ot->data;
            for (int64_t n = 0; n < s->size; n++) {
                if (f->is_bias) {
                    if (to_original) od[n] = fd[s->offset + n];
                    else fd[s->offset + n] = od[n];
                    continue;
                }
                for (int64_t k = 0; k < K; k++) {
                    int64_t fi = f->transB ? (s->offset + n) * K + k : k * Nt + s->offset + n;
                    int64_t oi = s->transB ? n * K + k : k * s->size + n;
                    if (to_original) od[oi] = fd[fi];
                    else fd[fi] = od[oi];
                }
            }
        }
    }
    return FR_OK;
}
