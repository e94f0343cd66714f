/* ONNX Attention (opset 23) onto ai.fp8run::Attention (see attention_import.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/attention.h"
#include "passes/attention_fuse.h"
#include "passes/attention_import.h"
#include "passes/attention_mask.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/pattern.h"

/* Constant masks up to this many elements are folded to be classified (T = 8192). */
#define MASK_FOLD_MAX ((int64_t)1 << 26)

/* A float32 scalar initializer named after base. */
static fr_status add_scalar(fr_graph *g, const char *base, float x, int *vid)
{
    fr_tensor *t = NULL;
    FR_TRY(fr_graph_add_unique_value(g, base, vid));
    FR_TRY(fr_tensor_new(FR_F32, 0, NULL, "attention mask constant", &t));
    *(float *)t->data = x;
    FR_TRY(fr_graph_set_initializer(g, *vid, t)); /* owns t, even on failure */
    g->values[*vid].flags &= ~FR_VAL_PARAM;       /* a constant of the op, never trained */
    return FR_OK;
}

/* The run-time mask as the fused op's additive float32 input: bool masks through Where(M, 0,
 * lowest float32), the bias the opset-18 export of the same model adds (and onnxruntime's): a
 * fully masked row then averages V uniformly in both. */
static fr_status runtime_mask(fr_graph *g, int mask, const char *base, int *out)
{
    char nm[512];
    *out = mask;
    if (g->values[mask].dtype != FR_BOOL) return FR_OK;
    int zero, lowest, nid;
    snprintf(nm, sizeof nm, "%s/mask_zero", base);
    FR_TRY(add_scalar(g, nm, 0.0f, &zero));
    snprintf(nm, sizeof nm, "%s/mask_lowest", base);
    FR_TRY(add_scalar(g, nm, -FLT_MAX, &lowest));
    snprintf(nm, sizeof nm, "%s/mask_bias", base);
    FR_TRY(fr_graph_add_unique_value(g, nm, out));
    snprintf(nm, sizeof nm, "%s/Where_mask", base);
    FR_TRY(fr_graph_add_node(g, "Where", FR_DOMAIN_ONNX, nm, 3, (int[]){mask, zero, lowest}, 1, out, &nid));
    return fr_node_infer(g, nid);
}

/* x [B, H, ..] (rank 4) as [B, Hkv, G, ..]; a mask's head dim of 1 as [1, 1], lower ranks first
 * padded to 4 with leading 1s. */
static fr_status split_heads(fr_graph *g, int x, int64_t Hkv, int64_t G, const char *base, const char *what, int *out)
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
        FR_TRY(split_heads(g, e->q, e->kv_heads, e->groups, e->base, "Q", &in[0]));
        if (e->mask >= 0 && g->values[e->mask].rank >= 3)
            FR_TRY(split_heads(g, e->mask, e->kv_heads, e->groups, e->base, "mask", &in[3]));
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

static fr_status lower_one(fr_graph *g, int id)
{
    fr_node *n = &g->nodes[id];
    FR_TRY(fr_onnx_attention_check(g, n));
    const int q = n->inputs[0], k = n->inputs[1], v = n->inputs[2], y = n->outputs[0];
    int mask = n->n_inputs > 3 ? n->inputs[3] : -1;
    const fr_value *qv = &g->values[q], *kv = &g->values[k];
    const int64_t Hq = qv->dims[1], Hkv = kv->dims[1], G = Hq / Hkv, Tq = qv->dims[2], Tk = kv->dims[2];
    float scale;
    int64_t causal, window = 0;
    FR_TRY(fr_node_attr_float(n, "scale", (float)(1.0 / sqrt((double)qv->dims[3])), &scale));
    FR_TRY(fr_node_attr_int(n, "is_causal", 0, &causal));
    char base[480];
    snprintf(base, sizeof base, "%s/fused_attention", n->name);
    if (mask >= 0) { /* a constant mask that says no mask, causal or a window becomes attributes */
        int folded;
        FR_TRY(fr_fold_value(g, mask, MASK_FOLD_MAX, 4, &folded));
        const fr_tensor *t = g->values[mask].constant;
        int64_t w = 0;
        const int kind = t ? fr_attn_classify_mask(t, t->dtype == FR_BOOL, Tq, Tk, &w) : FR_ATTN_MASK_BAD;
        if (kind != FR_ATTN_MASK_BAD) mask = -1;
        if (kind == FR_ATTN_MASK_CAUSAL) {
            causal = 1;
            window = w;
        }
    }
    int seg = -1, note = 0;
    fr_attn_mask_info mi;
    if (mask >= 0 && !g->values[mask].constant) { /* computed at run time: read symbolically */
        const fr_value sv = {.rank = 4, .dims = {qv->dims[0], Hq, Tq, Tk}};
        const int kind = fr_attn_mask_symbolic(g, mask, g->values[mask].dtype == FR_BOOL, &sv, &mi);
        note = 1;
        if (kind != FR_ATTN_MASK_BAD) {
            mask = -1;
            seg = mi.seg;
            if (kind == FR_ATTN_MASK_CAUSAL) { /* is_causal on top of a causal mask: the same */
                window = mi.window;
                causal = 1;
            }
        }
    }
    fr_attn_emit e = {q, k, v, -1, y, Hkv, G, scale, (int)causal, window, base, seg};
    if (mask >= 0) FR_TRY(runtime_mask(g, mask, base, &e.mask));
    int k5, v5;
    int64_t kv1, g1, kv2, g2;
    if (G == 1 && fr_attn_expand_source(g, k, 1, &k5, &kv1, &g1) && fr_attn_expand_source(g, v, 1, &v5, &kv2, &g2) &&
        kv1 == kv2 && g1 == g2) { /* K, V expanded over the query heads by the exporter: their sources */
        e = (fr_attn_emit){q, k5, v5, e.mask, y, kv1, g1, scale, (int)causal, window, base, e.seg_k};
    } else if (G > 1) { /* K, V [B, Hkv, 1, Tk, D] */
        FR_TRY(split_heads(g, k, Hkv, 1, base, "K", &e.k));
        FR_TRY(split_heads(g, v, Hkv, 1, base, "V", &e.v));
    }
    g->nodes[id].dead = 1; /* y gets its new producer */
    FR_TRY(fr_attn_emit_node(g, &e));
    return note ? fr_attn_mask_note(g, base, &mi) : FR_OK;
}

fr_status fr_lower_onnx_attention(fr_graph *g, int *count)
{
    *count = 0;
    const int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead || n->domain[0] || strcmp(n->op_type, "Attention") != 0) continue;
        if (*count == 0) FR_TRY(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
        FR_TRY(lower_one(g, i));
        (*count)++;
    }
    if (!*count) return FR_OK;
    int removed; /* the exporter's Expands of K/V, read by nothing now */
    FR_TRY(fr_graph_compact(g));
    FR_TRY(fr_graph_toposort(g));
    FR_TRY(fr_dce(g, &removed));
    return removed ? fr_graph_compact(g) : FR_OK;
}
