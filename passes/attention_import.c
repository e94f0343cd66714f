/* ONNX Attention (opset 23) onto ai.fp8run::Attention (see attention_import.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../ops/attention.h"
#include "attention_fuse.h"
#include "attention_import.h"
#include "autodiff.h"
#include "passes.h"
#include "pattern.h"

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

/* The run-time mask as the fused op's additive float32 input, in the fused problem's batch
 * layout (heads split into [Hkv, G] when G > 1): bool masks through Where(M, 0, lowest float32),
 * the bias the opset-18 export of the same model adds (and onnxruntime's): a fully masked row
 * then averages V uniformly in both. */
static fr_status runtime_mask(fr_graph *g, int mask, int64_t Hkv, int64_t G, const char *base, int *out)
{
    char nm[512];
    *out = mask;
    if (g->values[mask].dtype == FR_BOOL) {
        int zero, ninf, nid;
        snprintf(nm, sizeof nm, "%s/mask_zero", base);
        FR_TRY(add_scalar(g, nm, 0.0f, &zero));
        snprintf(nm, sizeof nm, "%s/mask_lowest", base);
        FR_TRY(add_scalar(g, nm, -FLT_MAX, &ninf));
        snprintf(nm, sizeof nm, "%s/mask_bias", base);
        FR_TRY(fr_graph_add_unique_value(g, nm, out));
        snprintf(nm, sizeof nm, "%s/Where_mask", base);
        FR_TRY(fr_graph_add_node(g, "Where", FR_DOMAIN_ONNX, nm, 3, (int[]){mask, zero, ninf}, 1, out, &nid));
        FR_TRY(fr_node_infer(g, nid));
    }
    if (G == 1) return FR_OK;
    const fr_value *m = &g->values[*out];
    int64_t d4[4] = {1, 1, 1, 1}, d5[5];
    memcpy(d4 + 4 - m->rank, m->dims, sizeof(int64_t) * (size_t)m->rank);
    d5[0] = d4[0];
    d5[1] = d4[1] == 1 ? 1 : Hkv;
    d5[2] = d4[1] == 1 ? 1 : G;
    d5[3] = d4[2];
    d5[4] = d4[3];
    snprintf(nm, sizeof nm, "%s/mask5", base);
    int x = *out;
    *out = -1;
    return fr_pattern_reshape(g, x, 5, d5, nm, out);
}

/* Q [B, H, T, D] as [B, Hkv, G, T, D] (K, V: G = 1). */
static fr_status split_heads(fr_graph *g, int x, int64_t Hkv, int64_t G, const char *base, const char *what, int *out)
{
    const fr_value *v = &g->values[x];
    const int64_t d5[5] = {v->dims[0], Hkv, G, v->dims[2], v->dims[3]};
    char nm[512];
    snprintf(nm, sizeof nm, "%s/%s5", base, what);
    *out = -1;
    return fr_pattern_reshape(g, x, 5, d5, nm, out);
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
    int in[4] = {q, k, v, -1}, out[2] = {y, -1}, nid;
    if (mask >= 0) FR_TRY(runtime_mask(g, mask, Hkv, G, base, &in[3]));
    if (G > 1) {
        FR_TRY(split_heads(g, q, Hkv, G, base, "Q", &in[0]));
        FR_TRY(split_heads(g, k, Hkv, 1, base, "K", &in[1]));
        FR_TRY(split_heads(g, v, Hkv, 1, base, "V", &in[2]));
        char nm[512];
        snprintf(nm, sizeof nm, "%s/O5", base);
        FR_TRY(fr_graph_add_unique_value(g, nm, &out[0]));
    }
    char nm[512];
    snprintf(nm, sizeof nm, "%s/LSE", base);
    FR_TRY(fr_graph_add_unique_value(g, nm, &out[1]));
    g->nodes[id].dead = 1; /* y gets its new producer below */
    FR_TRY(fr_graph_add_node(g, "Attention", FR_DOMAIN_FP8RUN, base, in[3] >= 0 ? 4 : 3, in, 2, out, &nid));
    n = &g->nodes[nid];
    FR_TRY(fr_node_set_attr_float(n, "scale", scale));
    FR_TRY(fr_node_set_attr_int(n, "causal", causal));
    if (window > 0) FR_TRY(fr_node_set_attr_int(n, "window", window));
    FR_TRY(fr_node_set_attr_string(n, "precision", "fp32"));
    FR_TRY(fr_node_infer(g, nid));
    if (G > 1) {
        const int64_t dy[4] = {g->values[q].dims[0], Hq, Tq, g->values[v].dims[3]};
        int o = y;
        snprintf(nm, sizeof nm, "%s/O", base);
        FR_TRY(fr_pattern_reshape(g, out[0], 4, dy, nm, &o));
    }
    return FR_OK;
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
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}
