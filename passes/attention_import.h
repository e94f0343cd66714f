/* ONNX Attention (opset 23) imported onto ai.fp8run::Attention (ops/attention.h), so an opset-23
 * export runs, trains and compiles exactly as its opset-18 decomposition does once fused.
 *
 * Runs inside preparation, right after inference (static shapes, constants folded). Supported:
 * 4-D float32 Q [B, Hq, Tq, D], K [B, Hkv, Tk, D], V [B, Hkv, Tk, Dv] with Hq a multiple of Hkv
 * (GQA: query head h reads K/V head h / (Hq / Hkv), lowered as Q [B, Hkv, G, Tq, D] against
 * K/V [B, Hkv, 1, Tk, D] and reshaped back); scale; is_causal; attn_mask, bool (true keeps) or
 * float (added), broadcastable to [B, Hq, Tq, Tk]: a constant one that keeps all, is causal or
 * a causal sliding window becomes attributes, any other one the fused op's mask input (bool as
 * 0 / lowest float32, as the opset-18 export of the same model and onnxruntime do: a fully masked
 * row averages V uniformly; a float mask of -inf gives such a row 0). Errors, naming the node and the input or attribute:
 * 3-D inputs, past_key/past_value/nonpad_kv_seqlen, outputs past Y, softcap != 0, other dtypes
 * (checked already by the op's inference, ops/attention_onnx.c). */
#ifndef FR_ATTENTION_IMPORT_H
#define FR_ATTENTION_IMPORT_H

#include "graph/ir.h"

/* One ai.fp8run::Attention node (shared by this lowering and the fusion pass) writing y, with LSE
 * a new value and precision fp32, and the key segment ids Sk as its fifth input when seg_k >= 0
 * (the mask input then absent, or the fourth). groups > 1 (GQA): q [B, kv_heads * groups, Tq, D] is read as
 * [B, kv_heads, groups, Tq, D] (k, v must then be [B, kv_heads, 1, Tk, D|Dv]), a mask of rank
 * >= 3 likewise on its head dim (1 stays 1), and the output is reshaped back into y. */
typedef struct fr_attn_emit {
    int q, k, v, mask, y; /* mask: an additive float32 input, or -1 */
    int64_t kv_heads, groups;
    float scale;
    int causal;
    int64_t window;
    const char *base; /* the node's name; new values are named after it */
    int seg_k;        /* the key segment ids Sk [B, Tk] (an int input: key padding), or -1 */
} fr_attn_emit;
FR_NODISCARD fr_status fr_attn_emit_node(fr_graph *g, const fr_attn_emit *e);

/* x is the exporter's GQA expansion of K or V: Expand([B, KV, 1, T, d]) -> [B, KV, G, T, d], G >= 2
 * (reshaped: then Reshape to [B, KV * G, T, d], x being the Reshape's output). Sets *src (the
 * Expand's input), *kv, *groups. */
int fr_attn_expand_source(const fr_graph *g, int x, int reshaped, int *src, int64_t *kv, int64_t *groups);

/* *count receives the number of ONNX Attention nodes lowered. */
FR_NODISCARD fr_status fr_lower_onnx_attention(fr_graph *g, int *count);

#endif
