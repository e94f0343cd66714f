/* Public API: the model FLOPs of training (what MFU is computed from), by the accounting usual
 * for decoder transformers (PaLM, appendix B): 6 FLOPs per token for each parameter a matrix
 * product reads (forward 2, backward 4) plus 12 x width x seq per token for attention scores
 * and values, the width (heads x head dim) read from the prepared graph's Softmax nodes and the
 * MatMul that consumes their probabilities. */
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"

#define FLOPS_V1_SIZE sizeof(fp8run_flops_info)

/* Parameters read by MatMul/Gemm (directly or through a Transpose), in elements. */
static int64_t matmul_params(const fr_graph *g)
{
    int64_t n = 0;
    unsigned char *seen = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
    if (!seen) return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (strcmp(nd->op_type, "MatMul") != 0 && strcmp(nd->op_type, "Gemm") != 0) continue;
        for (int k = 0; k < nd->n_inputs && k < 2; k++) {
            int v = nd->inputs[k];
            if (v < 0) continue;
            if (g->values[v].producer >= 0) { /* through a Transpose of a parameter */
                const fr_node *p = &g->nodes[g->values[v].producer];
                if (strcmp(p->op_type, "Transpose") == 0 && p->n_inputs == 1) v = p->inputs[0];
            }
            if (v >= 0 && g->values[v].constant && (g->values[v].flags & FR_VAL_PARAM) && !seen[v]) {
                seen[v] = 1;
                n += fr_tensor_numel(g->values[v].constant);
            }
        }
    }
    free(seen);
    return n;
}

/* 12 x width x seq, width = heads (and groups) x head dim of an attention output o
 * ([..., seq, hd] with the heads in the middle dims); 0 below rank 3. */
static double attention_term(const fr_value *o, int64_t seq)
{
    if (o->rank < 3) return 0;
    double width = 1;
    for (int d = 1; d < o->rank - 2; d++) width *= (double)o->dims[d];
    return 12.0 * width * (double)o->dims[o->rank - 1] * (double)seq;
}

/* Attention FLOPs per token: summed over the Softmax nodes (the output of the MatMul reading
 * the probabilities, directly or through the exporter's NaN guard) and the fused ai.fp8run::Attention nodes (ONNX Attention-23 is lowered
 * onto these in preparation). */
static double attention_flops_per_token(const fr_graph *g, int64_t seq)
{
    double f = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->n_outputs >= 1 && strcmp(nd->op_type, "Attention") == 0 && strcmp(nd->domain, "ai.fp8run") == 0)
            f += attention_term(&g->values[nd->outputs[0]], seq);
        if (nd->n_outputs >= 1 && strcmp(nd->op_type, "AttentionQKV") == 0 && strcmp(nd->domain, "ai.fp8run") == 0) {
            const fr_value *o = &g->values[nd->outputs[0]]; /* [B, T, heads x Dv] */
            if (o->rank == 3) f += 12.0 * (double)o->dims[2] * (double)seq;
        }
        if (strcmp(nd->op_type, "Softmax") != 0 || nd->n_outputs < 1) continue;
        int p = nd->outputs[0];
        for (int j = 0; j < g->n_nodes; j++) /* past the exporter's guard Where(IsNaN(P), 0, P) */
            if (strcmp(g->nodes[j].op_type, "Where") == 0 && g->nodes[j].n_inputs == 3 && g->nodes[j].inputs[2] == p) {
                p = g->nodes[j].outputs[0];
                break;
            }
        for (int j = 0; j < g->n_nodes; j++) {
            const fr_node *m = &g->nodes[j];
            if (strcmp(m->op_type, "MatMul") != 0 || m->inputs[0] != p) continue;
            f += attention_term(&g->values[m->outputs[0]], seq);
            break;
        }
    }
    return f;
}

/* The input token ids go to, as the trainer picks it; NULL when there is none. */
static const char *tokens_input(const fr_graph *g, const char *given)
{
    if (given) return given;
    const char *rec = fr_fbs_is_compiled(g) ? fr_api_meta(g, "fp8run.tokens_input") : NULL;
    if (rec) return rec;
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        if (v->dtype == FR_I64 || v->dtype == FR_I32) return v->name;
    }
    return NULL;
}

FP8RUN_API fp8run_status fp8run_model_train_flops(const fp8run_model *m, const fp8run_train_config *cfg,
                                                  fp8run_flops_info *info)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_err *slot = (api_err *)&m->err;
    size_t use;
    fp8run_status ps = fr_api_check_out(slot, fn, "info", info, FLOPS_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    api_options ao;
    ps = fr_api_options(slot, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    const fr_train_options *o = &ao.o;
    /* the attention shapes need the graph prepared for B x T: a copy that borrows the weights */
    fr_graph *g = NULL;
    fr_status st = fr_train_clone_graph(m->g, 1, &g);
    if (st != FR_OK) {
        fr_api_options_free(&ao);
        return fr_api_fail(slot, fn, st);
    }
    const char *tok = tokens_input(m->g, o->tokens_input);
    fr_input_shape shape = {tok, 2, {o->batch, o->seq_len}};
    fr_prepare_options po;
    fr_prepare_options_default(&po);
    po.dims = o->dims;
    po.n_dims = o->n_dims;
    po.input_shapes = &shape;
    po.n_input_shapes = tok ? 1 : 0;
    int prepared = tok && fr_prepare_forward(g, &po, NULL) == FR_OK;
    if (!prepared) fr_clear_error(); /* the parameter term stands without the attention term */
    fp8run_flops_info f;
    memset(&f, 0, sizeof f);
    f.struct_size = info->struct_size;
    f.matmul_params = matmul_params(prepared ? g : m->g);
    f.attention_known = prepared;
    f.attention_flops_per_token = prepared ? attention_flops_per_token(g, o->seq_len) : 0;
    f.flops_per_token = 6.0 * (double)f.matmul_params + f.attention_flops_per_token;
    f.flops_per_step = f.flops_per_token * (double)o->batch * (double)o->seq_len * (double)o->grad_accum;
    fr_graph_free(g);
    fr_api_options_free(&ao);
    if (f.matmul_params < 0) return fr_api_error(slot, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    memcpy(info, &f, use);
    return FP8RUN_OK;
}
