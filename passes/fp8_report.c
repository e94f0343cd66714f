/* FP8 compile report (fp8_compile.h): freeing, the text form, binding it to a graph and copying
 * trained values between the fused and the original parameters. */
#include <stdlib.h>
#include <string.h>

#include "graph/strbuf.h"
#include "passes/fp8_compile.h"

void fr_fp8_report_free(fr_fp8_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_layers; i++) {
        fr_fp8_layer *l = &r->layers[i];
        free(l->name);
        free(l->weights);
        free(l->sources);
        free(l->why);
        free(l->state_prefix);
    }
    for (int i = 0; i < r->n_skipped; i++) {
        free(r->skipped[i].node);
        free(r->skipped[i].op_type);
        free(r->skipped[i].weight);
        free(r->skipped[i].reason);
    }
    for (int i = 0; i < r->n_fused; i++) {
        for (int j = 0; j < r->fused[i].n_slices; j++) free(r->fused[i].slices[j].name);
        free(r->fused[i].slices);
        free(r->fused[i].name);
    }
    for (int i = 0; i < r->n_states; i++) free(r->states[i].amax_name);
    free(r->layers);
    free(r->skipped);
    free(r->fused);
    free(r->states);
    free(r->fp8_exclude);
    memset(r, 0, sizeof *r);
}

/* ---- report text ---- */

fr_status fr_fp8_report_format(const fr_fp8_report *r, char **text)
{
    fr_strbuf b = FR_STRBUF_INIT;
    int groups_fused = 0;
    for (int i = 0; i < r->n_layers; i++) groups_fused += r->layers[i].n_fused > 1;
    fr_strbuf_printf(&b, "FP8 compile: %d Linear layers in %d nodes (%d fused groups): fp8 %d, bf16 %d, fp32 %d\n",
              r->n_linears, r->n_layers, groups_fused, r->n_fp8, r->n_bf16, r->n_fp32);
    if (r->n_activation_matmuls)
        fr_strbuf_printf(&b, "  %d MatMuls of two activations (attention) run in bf16\n", r->n_activation_matmuls);
    if (r->n_attention) fr_strbuf_printf(&b, "  %d attention blocks fused (bf16)\n", r->n_attention);
    if (r->n_swiglu)
        fr_strbuf_printf(&b, "  %d SwiGLU activations fused (%d reading the gate/up Linear's output directly)\n",
                  r->n_swiglu, r->n_swiglu_one_input);
    fr_strbuf_printf(&b, "  precision %s", fr_lin_precision_name(r->precision));
    if (r->precision == FR_LIN_FP8)
        fr_strbuf_printf(&b, ", recipe %s, format %s, margin %d, bf16_boundary %d, pad %d%s%s%s",
                  fr_lin_recipe_name(r->recipe), r->e4m3_only ? "e4m3" : "hybrid (E4M3 fwd, E5M2 grads)",
                  r->margin, r->bf16_boundary, r->pad_multiple, r->fp8_exclude ? ", exclude '" : "",
                  r->fp8_exclude ? r->fp8_exclude : "", r->fp8_exclude ? "'" : "");
    if (r->precision == FR_LIN_FP8 && r->recipe == FR_LIN_DELAYED)
        fr_strbuf_printf(&b, "\n  delayed scaling: amax history %d, %s, interval %d; %d scaled operands",
                  r->amax_history_len, fr_amax_algo_name(r->amax_algo), r->interval, r->n_states);
    fr_strbuf_printf(&b, "\n");
    for (int i = 0; i < r->n_layers; i++) {
        const fr_fp8_layer *l = &r->layers[i];
        fr_strbuf_printf(&b, "  %-5s %s\n        weights %s; K x N = %lld x %lld%s%s", fr_lin_precision_name(l->precision),
                  l->name, l->weights, (long long)l->K, (long long)l->N, l->has_bias ? " + bias" : "",
                  l->transB ? " (W [N, K])" : " (W [K, N])");
        if (l->precision == FR_LIN_FP8)
            fr_strbuf_printf(&b, "; recipe %s; GPU pads K +%lld, N +%lld to multiples of %d (tokens padded at run time)",
                      fr_lin_recipe_name(l->recipe), (long long)l->pad_k, (long long)l->pad_n, l->pad_multiple);
        if (strncmp(l->why, "fp8", 3) == 0 && (l->why[3] == '\0' || l->why[3] == ';'))
            fr_strbuf_printf(&b, "\n        why: fp8 (eligible, not a boundary group, not excluded)%s\n", l->why + 3);
        else
            fr_strbuf_printf(&b, "\n        why: %s\n", l->why);
    }
    if (r->n_skipped) fr_strbuf_printf(&b, "  not converted:\n");
    for (int i = 0; i < r->n_skipped; i++) {
        const fr_fp8_skip *s = &r->skipped[i];
        fr_strbuf_printf(&b, "    %s '%s' (weight '%s'): %s\n", s->op_type, s->node, s->weight, s->reason);
    }
    for (int i = 0; i < r->n_fused; i++) {
        const fr_fp8_fused *f = &r->fused[i];
        fr_strbuf_printf(&b, "  fused parameter %s:", f->name);
        for (int j = 0; j < f->n_slices; j++)
            fr_strbuf_printf(&b, " %s [%lld, %lld)%s", f->slices[j].name, (long long)f->slices[j].offset,
                      (long long)(f->slices[j].offset + f->slices[j].size),
                      f->slices[j].is_bias ? "" : f->slices[j].transB ? " [N,K]" : " [K,N]");
        fr_strbuf_printf(&b, "\n");
    }
    *text = fr_strbuf_take(&b, "fp8 report text");
    return *text ? FR_OK : FR_ERR_OOM;
}

fr_status fr_fp8_report_bind(const fr_graph *g, fr_fp8_report *r, int allow_missing)
{
    for (int i = 0; i < r->n_states; i++) {
        fr_fp8_state *s = &r->states[i];
        if (s->amax_value >= 0) continue;
        s->amax_value = fr_graph_find_value(g, s->amax_name);
        if (s->amax_value < 0 && !allow_missing)
            return fr_error(FR_ERR_GRAPH, "fp8 state: the amax value '%s' of layer '%s' is not in the "
                            "graph (was the backward built?)", s->amax_name, r->layers[s->layer].name);
    }
    return FR_OK;
}

fr_status fr_fp8_sync_params(fr_graph *g, const fr_fp8_report *r, int to_original)
{
    for (int i = 0; i < r->n_fused; i++) {
        const fr_fp8_fused *f = &r->fused[i];
        fr_tensor *ft = f->value >= 0 && f->value < g->n_values ? g->values[f->value].constant : NULL;
        int64_t Nt = 0;
        for (int j = 0; j < f->n_slices; j++) Nt += f->slices[j].size;
        if (!ft || ft->dtype != FR_F32 || fr_tensor_numel(ft) != (f->is_bias ? Nt : Nt * f->K))
            return fr_error(FR_ERR_GRAPH, "fp8 sync: fused parameter '%s' is missing or has the wrong "
                            "size", f->name);
        float *fd = ft->data;
        int64_t K = f->K;
        for (int j = 0; j < f->n_slices; j++) {
            const fr_fp8_slice *s = &f->slices[j];
            fr_tensor *ot = s->value >= 0 && s->value < g->n_values ? g->values[s->value].constant : NULL;
            if (!ot || ot->dtype != FR_F32 || fr_tensor_numel(ot) != (f->is_bias ? s->size : s->size * K))
                return fr_error(FR_ERR_GRAPH, "fp8 sync: original parameter '%s' is missing or has the "
                                "wrong size", s->name);
            float *od = ot->data;
            for (int64_t n = 0; n < s->size; n++) {
                if (f->is_bias) {
                    if (to_original) od[n] = fd[s->offset + n];
                    else fd[s->offset + n] = od[n];
                    continue;
                }
                for (int64_t k = 0; k < K; k++) {
                    int64_t fi = f->transB ? (s->offset + n) * K + k : k * Nt + s->offset + n;
                    int64_t oi = s->transB ? n * K + k : k * s->size + n;
                    if (to_original) od[oi] = fd[fi];
                    else fd[fi] = od[oi];
                }
            }
        }
    }
    return FR_OK;
}
