/* ONNX Attention (opset 23) onto ai.fp8run::Attention (see attention_import.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/attention.h"
#include "passes/attention_emit.h"
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

/* Q scaled before the head split (fr_match_scale_below_layout: OPT scales q_proj's output,
 * then splits the heads, then runs sdpa with scale 1): the factor goes into *scale, the layout
 * node reads the unscaled value, the Mul goes. Scaling commutes with the layout exactly; the
 * fused op then scales Q K^T once. */
static fr_status peel_q_scale(fr_graph *g, int q, float *scale)
{
    fr_readers rd = {g, NULL};
    FR_TRY(fr_readers_refresh(&rd, "ONNX Attention lowering"));
    double f;
    int nd, lay;
    const int y = fr_match_scale_below_layout(&rd, q, &f, &nd, &lay);
    fr_readers_free(&rd);
    if (y < 0) return FR_OK;
    *scale = (float)((double)*scale * f);
    g->nodes[lay].inputs[0] = y;
    g->nodes[nd].dead = 1;
    return FR_OK;
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
    FR_TRY(peel_q_scale(g, q, &scale));
    n = &g->nodes[id];
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
    fr_attn_emit e = {q, k, v, -1, y, Hkv, G, scale, (int)causal, window, base, seg, 0.0f};
    if (mask >= 0) FR_TRY(runtime_mask(g, mask, base, &e.mask));
    int k5, v5;
    int64_t kv1, g1, kv2, g2;
    if (G == 1 && fr_attn_expand_source(g, k, 1, &k5, &kv1, &g1) && fr_attn_expand_source(g, v, 1, &v5, &kv2, &g2) &&
        kv1 == kv2 && g1 == g2) { /* K, V expanded over the query heads by the exporter: their sources */
        e = (fr_attn_emit){q, k5, v5, e.mask, y, kv1, g1, scale, (int)causal, window, base, e.seg_k, 0.0f};
    } else if (G > 1) { /* K, V [B, Hkv, 1, Tk, D] */
        FR_TRY(fr_attn_split_heads(g, k, Hkv, 1, base, "K", &e.k));
        FR_TRY(fr_attn_split_heads(g, v, Hkv, 1, base, "V", &e.v));
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
