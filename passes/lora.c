/* LoRA adapters on the matched Linears (see lora.h). */
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/dropout.h"
#include "passes/lora.h"
#include "passes/pattern.h"

static int is_param_2d(const fr_graph *g, int v)
{
    return v >= 0 && (g->values[v].flags & FR_VAL_PARAM) && g->values[v].constant &&
           g->values[v].dtype == FR_F32 && g->values[v].rank == 2;
}

/* The base weight of node n (MatMul / Gemm) or -1; *in_out: stored [in, out]. */
static int base_weight(const fr_graph *g, const fr_node *n, int *in_out)
{
    int b = n->inputs[1], trans_b = 0;
    if (fr_is_onnx_op(n, "Gemm")) {
        int64_t ta = 0, tb = 0;
        float alpha = 1.0f;
        if (fr_node_attr_int(n, "transA", 0, &ta) != FR_OK || fr_node_attr_int(n, "transB", 0, &tb) != FR_OK ||
            fr_node_attr_float(n, "alpha", 1.0f, &alpha) != FR_OK || ta != 0 || alpha != 1.0f)
            return -1;
        trans_b = tb != 0;
    } else if (!fr_is_onnx_op(n, "MatMul")) {
        return -1;
    }
    if (is_param_2d(g, b)) {
        *in_out = !trans_b;
        return b;
    }
    const fr_node *t = fr_live_producer(g, b);
    if (trans_b || !t || !fr_is_onnx_op(t, "Transpose") || t->n_inputs != 1 || !is_param_2d(g, t->inputs[0]))
        return -1;
    int cnt;
    const int64_t *perm;
    if (fr_node_attr_ints(t, "perm", &cnt, &perm) != FR_OK || (cnt >= 0 && !(cnt == 2 && perm[0] == 1 && perm[1] == 0)))
        return -1;
    *in_out = 0;
    return t->inputs[0];
}

static fr_status add_node1(fr_graph *g, const char *op, const char *name, int a, int b, int out)
{
    int ins[2] = {a, b}, nid;
    return fr_graph_add_node(g, op, "", name, b < 0 ? 1 : 2, ins, 1, &out, &nid);
}

/* A new float32 value "<module>/<what>" (shape left to inference). */
static fr_status fresh(fr_graph *g, const char *module, const char *what, int *id)
{
    char name[512];
    snprintf(name, sizeof name, "%s/lora_%s", module, what);
    FR_TRY(fr_graph_add_unique_value(g, name, id));
    g->values[*id].dtype = FR_F32;
    return FR_OK;
}

/* A trained initializer named name [d0, d1]: U(-bound, bound) from rng, or zeros (rng NULL). */
static fr_status add_factor(fr_graph *g, const char *name, int64_t d0, int64_t d1, fr_prng *rng, double bound,
                            int *id)
{
    int64_t dims[2] = {d0, d1};
    fr_tensor *t;
    if (fr_graph_find_value(g, name) >= 0)
        return fr_error(FR_ERR_GRAPH, "lora: '%s' exists already (is that weight read by two Linears?)", name);
    FR_TRY(fr_tensor_new(FR_F32, 2, dims, name, &t));
    float *p = t->data;
    for (int64_t i = 0; rng && i < d0 * d1; i++) p[i] = (float)((2.0 * fr_prng_double(rng) - 1.0) * bound);
    fr_status st = fr_graph_add_value(g, name, id);
    if (st == FR_OK) return fr_graph_set_initializer(g, *id, t); /* float: marked trained */
    fr_tensor_free(t);
    return st;
}

static fr_status transposed(fr_graph *g, const char *module, const char *what, int src, int *out)
{
    FR_TRY(fresh(g, module, what, out));
    char name[560];
    snprintf(name, sizeof name, "%s/lora_%s_transpose", module, what);
    int nid;
    FR_TRY(fr_graph_add_node(g, "Transpose", "", name, 1, &src, 1, out, &nid));
    int64_t perm[2] = {1, 0};
    return fr_node_set_attr_ints(&g->nodes[nid], "perm", 2, perm);
}

/* y = node(x, W) becomes y = Add(node(x, W), MatMul(Mul(MatMul(x', A^T), s), B^T)), x' = x, or
 * KeyedDropout(x) with --lora-dropout p > 0 (PEFT's lora_dropout: each adapter its own mask). */
static fr_status adapt(fr_graph *g, int nid, int w, int in_out, int scale, const fr_lora_options *o, fr_prng *rng,
                       fr_lora_adapter *ad)
{
    const fr_value *wv = &g->values[w];
    ad->in = wv->dims[in_out ? 0 : 1];
    ad->out = wv->dims[in_out ? 1 : 0];
    ad->w_in_out = in_out;
    size_t len = strlen(wv->name);
    const char *suffix = ".weight";
    size_t sl = strlen(suffix);
    size_t ml = len > sl && strcmp(wv->name + len - sl, suffix) == 0 ? len - sl : len;
    ad->weight = fr_strdup(wv->name, "lora");
    ad->module = fr_calloc(ml + 1, 1, "lora");
    ad->a = fr_calloc(ml + 40, 1, "lora");
    ad->b = fr_calloc(ml + 40, 1, "lora");
    if (!ad->weight || !ad->module || !ad->a || !ad->b) return FR_ERR_OOM;
    memcpy(ad->module, wv->name, ml);
    snprintf(ad->a, ml + 40, "base_model.model.%s.lora_A.weight", ad->module);
    snprintf(ad->b, ml + 40, "base_model.model.%s.lora_B.weight", ad->module);

    int a, b, at, bt, h, hs, d, ybase;
    FR_TRY(add_factor(g, ad->a, o->rank, ad->in, rng, 1.0 / sqrt((double)ad->in), &a));
    FR_TRY(add_factor(g, ad->b, ad->out, o->rank, NULL, 0, &b));
    FR_TRY(transposed(g, ad->module, "A", a, &at));
    FR_TRY(transposed(g, ad->module, "B", b, &bt));
    FR_TRY(fresh(g, ad->module, "h", &h));
    FR_TRY(fresh(g, ad->module, "hs", &hs));
    FR_TRY(fresh(g, ad->module, "delta", &d));
    FR_TRY(fresh(g, ad->module, "base", &ybase));
    int x = g->nodes[nid].inputs[0], y = g->nodes[nid].outputs[0];
    g->values[ybase].dtype = g->values[y].dtype;
    g->nodes[nid].outputs[0] = ybase;
    g->values[ybase].producer = nid;
    char name[560], out[560];
    if (o->dropout > 0) {
        snprintf(name, sizeof name, "%s/lora_dropout", ad->module);
        snprintf(out, sizeof out, "%s/lora_x_dropped", ad->module);
        FR_TRY(fr_dropout_add(g, x, o->dropout, name, out, &x));
    }
    snprintf(name, sizeof name, "%s/lora_A_matmul", ad->module);
    FR_TRY(add_node1(g, "MatMul", name, x, at, h));
    snprintf(name, sizeof name, "%s/lora_scale", ad->module);
    FR_TRY(add_node1(g, "Mul", name, h, scale, hs));
    snprintf(name, sizeof name, "%s/lora_B_matmul", ad->module);
    FR_TRY(add_node1(g, "MatMul", name, hs, bt, d));
    snprintf(name, sizeof name, "%s/lora_add", ad->module);
    return add_node1(g, "Add", name, ybase, d, y);
}

static fr_status apply(fr_graph *g, const fr_lora_options *o, fr_prng *rng, const regex_t *re, fr_lora_result *r)
{
    /* the base Linears first (their weights are still parameters), then freeze, then adapt */
    int n0 = g->n_nodes, *match = fr_calloc((size_t)(n0 ? n0 : 1), sizeof *match, "lora");
    if (!match) return FR_ERR_OOM;
    int n = 0;
    for (int i = 0; i < n0; i++) {
        const fr_node *nd = &g->nodes[i];
        int in_out = 0, w = nd->dead || nd->n_inputs < 2 || nd->n_outputs < 1 ? -1 : base_weight(g, nd, &in_out);
        match[i] = -1;
        if (w >= 0 && regexec(re, g->values[w].name, 0, NULL, 0) == 0) {
            match[i] = w | (in_out << 30);
            n++;
        }
    }
    fr_status st = FR_OK;
    if (n == 0)
        st = fr_error(FR_ERR_INVALID_ARG, "--lora-targets '%s' matches no Linear weight of the model (`fp8run info` "
                      "lists the parameters; e.g. 'q_proj|v_proj')", o->targets);
    r->ad = st == FR_OK ? fr_calloc((size_t)n, sizeof *r->ad, "lora adapters") : NULL;
    if (st == FR_OK && !r->ad) st = FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < g->n_values; i++) {
        fr_value *v = &g->values[i];
        if (!(v->flags & FR_VAL_PARAM) || !v->constant) continue;
        v->flags &= ~FR_VAL_PARAM; /* the base model is frozen */
        r->frozen_params += fr_tensor_numel(v->constant);
        r->frozen_bytes += (int64_t)v->constant->nbytes;
    }
    int scale = -1;
    if (st == FR_OK) { /* one shared scalar s = alpha / r (a constant) */
        fr_tensor *t;
        st = fr_tensor_new(FR_F32, 0, NULL, "lora scale", &t);
        if (st == FR_OK) {
            *(float *)t->data = (float)r->scale;
            st = fr_graph_add_unique_value(g, "lora_scaling", &scale);
            if (st == FR_OK) st = fr_graph_set_initializer(g, scale, t);
            else fr_tensor_free(t);
            if (st == FR_OK) g->values[scale].flags &= ~FR_VAL_PARAM;
        }
    }
    for (int i = 0; st == FR_OK && i < n0; i++)
        if (match[i] >= 0) st = adapt(g, i, match[i] & ((1 << 30) - 1), match[i] >> 30, scale, o, rng, &r->ad[r->n++]);
    free(match);
    if (st == FR_OK) st = fr_graph_toposort(g);
    return st;
}

fr_status fr_lora_apply(fr_graph *g, const fr_lora_options *o, fr_prng *rng, fr_lora_result *out)
{
    memset(out, 0, sizeof *out);
    if (o->rank < 1 || !o->targets || !o->targets[0])
        return fr_error(FR_ERR_INVALID_ARG, "LoRA needs a rank >= 1 (--lora-rank) and target modules (--lora-targets "
                        "REGEX over weight names)");
    if (!(o->dropout >= 0 && o->dropout < 1))
        return fr_error(FR_ERR_INVALID_ARG, "--lora-dropout %g: must be in [0, 1)", o->dropout);
    if (!isfinite(o->alpha) || o->alpha <= 0)
        return fr_error(FR_ERR_INVALID_ARG, "--lora-alpha %g: must be > 0", o->alpha);
    regex_t re;
    int rc = regcomp(&re, o->targets, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[256];
        regerror(rc, &re, msg, sizeof msg);
        return fr_error(FR_ERR_INVALID_ARG, "--lora-targets regex '%s': %s", o->targets, msg);
    }
    out->scale = o->alpha / o->rank;
    fr_status st = apply(g, o, rng, &re, out);
    regfree(&re);
    if (st != FR_OK) fr_lora_result_free(out);
    return st;
}

void fr_lora_result_free(fr_lora_result *r)
{
    for (int i = 0; r->ad && i < r->n; i++) {
        free(r->ad[i].module);
        free(r->ad[i].weight);
        free(r->ad[i].a);
        free(r->ad[i].b);
    }
    free(r->ad);
    memset(r, 0, sizeof *r);
}

const fr_lora_adapter *fr_lora_find(const fr_lora_result *r, const char *name)
{
    for (int i = 0; name && i < r->n; i++)
        if (strcmp(r->ad[i].a, name) == 0 || strcmp(r->ad[i].b, name) == 0) return &r->ad[i];
    return NULL;
}
