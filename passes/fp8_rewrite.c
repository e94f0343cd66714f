/* FP8 compile, rewriting (fp8_compile_internal.h): a group of Linear candidates becomes one
 * ai.fp8run::Linear (+ Split when fused) with its FP8 state values and report entries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/strbuf.h"
#include "passes/autodiff.h"
#include "passes/fp8_compile_internal.h"

/* ---- rewriting ---- */

/* Turn node nid into an ai.fp8run::Linear named `name` with the given inputs/outputs. */
static fr_status node_become_linear(fr_graph *g, int nid, const char *name, int n_in, const int *in,
                                    int n_out, const int *out)
{
    FR_TRY(fr_node_reset(g, nid, "Linear", FR_DOMAIN_FP8RUN, name, n_in, in, n_out, out));
    g->nodes[nid].op = fr_linear_op("Linear");
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
    fr_strbuf nb = FR_STRBUF_INIT;
    fr_strbuf_printf(&nb, "fused(");
    for (int i = 0; i < nm; i++) {
        const cand *c = &p->c[members[i]];
        fr_strbuf_printf(&nb, "%s%s", i ? "," : "", g->values[bias ? c->bias : c->w].name);
    }
    fr_strbuf_printf(&nb, ")");
    char *name = fr_strbuf_take(&nb, "fused parameter name");
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
        if (!bias && c->transB == transB) {
            /* the same layout: whole rows (the loop below strides across rows, a cache miss per
               element: tens of seconds for an 8B model's Q/K/V and gate/up weights) */
            if (transB)
                memcpy(dst + off * K, src, (size_t)(c->N * K) * sizeof *dst);
            else
                for (int64_t k = 0; k < K; k++) memcpy(dst + k * Nt + off, src + k * c->N, (size_t)c->N * sizeof *dst);
        }
        for (int64_t j = 0; j < c->N && (bias || c->transB != transB); j++) {
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
    fr_strbuf b = FR_STRBUF_INIT;
    for (int i = 0; i < nm; i++) {
        const cand *c = &p->c[members[i]];
        fr_strbuf_printf(&b, "%s%s", i ? "," : "", weights ? p->g->values[c->w].name : p->g->nodes[c->node].name);
    }
    return fr_strbuf_take(&b, "fp8 report");
}

static void mark_dead_extras(pass *p, const cand *c, int keep_node)
{
    fr_graph *g = p->g;
    if (!keep_node) g->nodes[c->node].dead = 1;
    if (c->add_node >= 0) g->nodes[c->add_node].dead = 1;
    if (c->tnode >= 0 && p->uses[g->nodes[c->tnode].outputs[0]] == 1) g->nodes[c->tnode].dead = 1;
}

/* Rewrite one group (members in node order) into a Linear (+ Split). */
fr_status fr_fp8_rewrite_group(pass *p, const int *members, int nm, fr_lin_precision prec,
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
        fr_strbuf b = FR_STRBUF_INIT;
        fr_strbuf_printf(&b, "fused(");
        for (int i = 0; i < nm; i++) fr_strbuf_printf(&b, "%s%s", i ? "," : "", g->nodes[p->c[members[i]].node].name);
        fr_strbuf_printf(&b, ")");
        lname = fr_strbuf_take(&b, "fp8 compile");
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
        fr_strbuf b = FR_STRBUF_INIT;
        fr_strbuf_printf(&b, "fp8_state/%s", lname[0] == '/' ? lname + 1 : lname);
        L->state_prefix = fr_strbuf_take(&b, "fp8 report");
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

