/* The ai.fp8run::Attention node that both the fusion of attention blocks (attention_fuse.c) and
 * the import of ONNX Attention (attention_import.c) emit, and the exporters' GQA expansion both
 * recognize. Below those two passes, so that each uses it without using the other. */
#ifndef FR_ATTENTION_EMIT_H
#define FR_ATTENTION_EMIT_H

#include "graph/ir.h"

/* One ai.fp8run::Attention node writing y, with LSE a new value and precision fp32, and the key
 * segment ids Sk as its fifth input when seg_k >= 0 (the mask input then absent, or the fourth).
 * groups > 1 (GQA): q [B, kv_heads * groups, Tq, D] is read as [B, kv_heads, groups, Tq, D] (k,
 * v must then be [B, kv_heads, 1, Tk, D|Dv]), a mask of rank >= 3 likewise on its head dim (1
 * stays 1), and the output is reshaped back into y. */
typedef struct fr_attn_emit {
    int q, k, v, mask, y; /* mask: an additive float32 input, or -1 */
    int64_t kv_heads, groups;
    float scale;
    int causal;
    int64_t window;
    const char *base; /* the node's name; new values are named after it */
    int seg_k;        /* the key segment ids Sk [B, Tk] (an int input: key padding), or -1 */
    float softcap;    /* scores c * tanh(s / c) before the mask (Gemma 2); 0: none */
} fr_attn_emit;
FR_NODISCARD fr_status fr_attn_emit_node(fr_graph *g, const fr_attn_emit *e);

/* x [B, H, ..] (rank 4) as [B, Hkv, G, ..] into *out (a new Reshape named after base and what); a
 * mask's head dim of 1 as [1, 1], lower ranks first padded to 4 with leading 1s. */
FR_NODISCARD fr_status fr_attn_split_heads(fr_graph *g, int x, int64_t Hkv, int64_t G, const char *base, const char *what,
                                           int *out);

/* x is the exporter's GQA expansion of K or V: Expand([B, KV, 1, T, d]) -> [B, KV, G, T, d], G >= 2
 * (reshaped: then Reshape to [B, KV * G, T, d], x being the Reshape's output). Sets *src (the
 * Expand's input), *kv, *groups. */
int fr_attn_expand_source(const fr_graph *g, int x, int reshaped, int *src, int64_t *kv, int64_t *groups);

#endif
