/* The fused attention node and the GQA expansion it reads (see attention_emit.h). */
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/attention_emit.h"
#include "passes/pattern.h"

fr_status fr_attn_split_heads(fr_graph *g, int x, int64_t Hkv, int64_t G, const char *base, const char *what, int *out)
{
    const fr_value *v = &g->values[x];
    int64_t d4[4] = {1, 1, 1, 1};
    memcpy(d4 + 4 - v->rank, v->dims, sizeof(int64_t) * (size_t)v->rank);
    const int one = d4[1] == 1;
    const int64_t d5[5] = {d4[0], one ? 1 : Hkv, one ? 1 : G, d4[2], d4[3]};
    char nm[512];
    snprintf(nm, sizeof nm, "%s/%s5", base, what);
    *out = -1;
    return fr_pattern_reshape(g, x, 5, d5, nm, out);
}

int fr_attn_expand_source(const fr_graph *g, int x, int reshaped, int *src, int64_t *kv, int64_t *groups)
{
    const fr_node *r = reshaped ? fr_live_producer(g, x) : NULL;
    if (reshaped && (!r || !fr_is_onnx_op(r, "Reshape"))) return 0;
    const int ex = reshaped ? r->inputs[0] : x;
    const fr_node *e = fr_live_producer(g, ex);
    if (!e || !fr_is_onnx_op(e, "Expand")) return 0;
    const fr_value *in = &g->values[e->inputs[0]], *out = &g->values[ex], *xv = &g->values[x];
    if (in->rank != 5 || out->rank != 5 || in->dims[2] != 1 || out->dims[2] < 2) return 0;
    for (int d = 0; d < 5; d++)
        if (d != 2 && in->dims[d] != out->dims[d]) return 0;
    if (reshaped && (xv->rank != 4 || xv->dims[0] != out->dims[0] || xv->dims[1] != out->dims[1] * out->dims[2] ||
                     xv->dims[2] != out->dims[3] || xv->dims[3] != out->dims[4]))
        return 0;
    *src = e->inputs[0];
    *kv = out->dims[1];
    *groups = out->dims[2];
    return 1;
}

fr_status fr_attn_emit_node(fr_graph *g, const fr_attn_emit *e)
{
    char nm[512];
    int in[5] = {e->q, e->k, e->v, e->mask, e->seg_k}, out[2] = {e->y, -1}, nid;
    if (e->groups > 1) {
        FR_TRY(fr_attn_split_heads(g, e->q, e->kv_heads, e->groups, e->base, "Q", &in[0]));
        if (e->mask >= 0 && g->values[e->mask].rank >= 3)
            FR_TRY(fr_attn_split_heads(g, e->mask, e->kv_heads, e->groups, e->base, "mask", &in[3]));
        snprintf(nm, sizeof nm, "%s/O5", e->base);
        FR_TRY(fr_graph_add_unique_value(g, nm, &out[0]));
    }
    snprintf(nm, sizeof nm, "%s/LSE", e->base);
    FR_TRY(fr_graph_add_unique_value(g, nm, &out[1]));
    const int n_in = in[4] >= 0 ? 5 : in[3] >= 0 ? 4 : 3;
    FR_TRY(fr_graph_add_node(g, "Attention", FR_DOMAIN_FP8RUN, e->base, n_in, in, 2, out, &nid));
    fr_node *n = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_float(n, "scale", e->scale));
    FR_TRY(fr_node_set_attr_int(n, "causal", e->causal));
    if (e->window > 0) FR_TRY(fr_node_set_attr_int(n, "window", e->window));
    if (e->softcap > 0.0f) FR_TRY(fr_node_set_attr_float(n, "softcap", e->softcap));
    FR_TRY(fr_node_set_attr_string(n, "precision", "fp32"));
    FR_TRY(fr_node_infer(g, nid));
    if (e->groups == 1) return FR_OK;
    const fr_value *y = &g->values[e->y];
    int o = e->y;
    int64_t dy[FR_MAX_RANK];
    memcpy(dy, y->dims, sizeof(int64_t) * (size_t)y->rank);
    snprintf(nm, sizeof nm, "%s/O", e->base);
    return fr_pattern_reshape(g, out[0], y->rank, dy, nm, &o);
}
