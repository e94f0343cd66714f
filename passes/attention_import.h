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

/* *count receives the number of ONNX Attention nodes lowered. */
FR_NODISCARD fr_status fr_lower_onnx_attention(fr_graph *g, int *count);

#endif
