/* ONNX Attention (opset 23): shape inference only. Preparation lowers every such node onto
 * ai.fp8run::Attention (passes/attention_import.c) right after inference, so the op has no
 * kernel or gradient of its own: the fused op's are the ones that run. Inference checks the
 * subset the lowering supports, so an unsupported node fails early, naming the attribute. */
#include "ops/attention.h"

fr_status fr_onnx_attention_check(const fr_graph *g, const fr_node *n)
{
    int64_t i64;
    float f;
    if (n->n_inputs < 3) return fr_node_error(n, FR_ERR_GRAPH, "Attention needs inputs Q, K, V");
    for (int i = 4; i < n->n_inputs; i++)
        if (n->inputs[i] >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input %d ('%s': past_key/past_value/nonpad_kv_seqlen, a KV "
                                 "cache) is not supported", i, g->values[n->inputs[i]].name);
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i] >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "output %d ('%s': present_key/present_value/"
                                 "qk_matmul_output) is not supported", i, g->values[n->outputs[i]].name);
    FR_TRY(fr_node_attr_float(n, "softcap", 0.0f, &f));
    if (f != 0.0f) return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute softcap=%g is not supported", (double)f);
    FR_TRY(fr_node_attr_int(n, "is_causal", 0, &i64));
    if (i64 != 0 && i64 != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute is_causal=%lld must be 0 or 1", (long long)i64);
    const fr_value *q = &g->values[n->inputs[0]], *k = &g->values[n->inputs[1]], *v = &g->values[n->inputs[2]];
    if (q->rank != 4 || k->rank != 4 || v->rank != 4)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "Q, K, V of ranks %d, %d, %d: only 4-D [batch, heads, seq, dim] "
                             "inputs are supported (3-D ones with q_num_heads/kv_num_heads are not)", q->rank, k->rank,
                             v->rank);
    if (q->dtype != FR_F32 || k->dtype != FR_F32 || v->dtype != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "Q, K, V must be float32 (got %s, %s, %s)", fr_dtype_name(q->dtype),
                             fr_dtype_name(k->dtype), fr_dtype_name(v->dtype));
    if (k->dims[1] < 1 || q->dims[1] % k->dims[1] != 0 || k->dims[1] != v->dims[1] || q->dims[0] != k->dims[0] ||
        k->dims[0] != v->dims[0] || q->dims[3] != k->dims[3] || k->dims[2] != v->dims[2]) {
        char s1[128], s2[128], s3[128];
        return fr_node_error(n, FR_ERR_SHAPE, "Q %s, K %s, V %s do not fit [B, Hq, Tq, D], [B, Hkv, Tk, D], "
                             "[B, Hkv, Tk, Dv] with Hq a multiple of Hkv",
                             fr_shape_str(q->rank, q->dims, s1, sizeof s1), fr_shape_str(k->rank, k->dims, s2, sizeof s2),
                             fr_shape_str(v->rank, v->dims, s3, sizeof s3));
    }
    if (i64 && q->dims[2] != k->dims[2])
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "is_causal=1 with Tq %lld != Tk %lld is not supported",
                             (long long)q->dims[2], (long long)k->dims[2]);
    if (n->n_inputs > 3 && n->inputs[3] >= 0) {
        const fr_value *m = &g->values[n->inputs[3]];
        if (m->dtype != FR_BOOL && m->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "attn_mask '%s' is %s: bool or float32 only", m->name,
                                 fr_dtype_name(m->dtype));
        int ok = m->rank >= 1 && m->rank <= 4;
        const int64_t want[4] = {q->dims[0], q->dims[1], q->dims[2], k->dims[2]};
        for (int d = 0; ok && d < m->rank; d++) ok = m->dims[d] == 1 || m->dims[d] == want[4 - m->rank + d];
        if (!ok) {
            char s1[128];
            return fr_node_error(n, FR_ERR_SHAPE, "attn_mask '%s' %s does not broadcast to [B, Hq, Tq, Tk]", m->name,
                                 fr_shape_str(m->rank, m->dims, s1, sizeof s1));
        }
    }
    return FR_OK;
}

static fr_status onnx_attn_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 7));
    FR_TRY(fr_onnx_attention_check(g, n));
    const fr_value *q = fr_node_in(g, n, 0), *v = fr_node_in(g, n, 2);
    const int64_t y[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    fr_infer_set(g, n, 0, FR_F32, 4, y);
    return FR_OK;
}

const fr_op_def fr_ops_attention_onnx[] = {
    {"Attention", FR_DOMAIN_ONNX, 23, onnx_attn_infer, NULL, NULL, FR_OP_NO_FOLD},
    {0},
};
