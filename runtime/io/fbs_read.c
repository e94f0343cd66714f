/* Reading compiled graph files (.fbs; the layout is described in fbs.h). Everything in the
 * metadata is checked before use: a .fbs is hostile input like any model file. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/base64.h"
#include "graph/name_map.h"
#include "graph/onnx_io.h"
#include "ops/op.h"
#include "passes/pipeline.h"
#include "runtime/io/fbs.h"
#include "runtime/io/fbs_meta.h"
#include "graph/option_choices.h"

/* ---- format, shape, options ---- */

int fr_fbs_is_compiled(const fr_graph *g)
{
    for (int i = 0; g && i < g->n_metadata; i++)
        if (strcmp(g->metadata[i].key, FR_FBS_FORMAT_KEY) == 0) return 1;
    return 0;
}

fr_status fr_fbs_shape(const fr_graph *g, int64_t *batch, int64_t *seq)
{
    fr_fbs_meta m;
    fr_status st = fr_fbs_meta_open(g, fr_fbs_file_name(g, NULL), &m);
    if (st == FR_OK) st = fr_fbs_check_format(&m);
    if (st == FR_OK) st = fr_fbs_get_int(&m, 1, INT32_MAX, batch, "fp8run.batch");
    if (st == FR_OK) st = fr_fbs_get_int(&m, 1, INT32_MAX, seq, "fp8run.seq");
    fr_fbs_meta_close(&m);
    return st;
}

static fr_status read_spec(const fr_fbs_meta *m, fr_fbs_spec *s)
{
    const char *v;
    int k;
    int64_t x;
    FR_TRY(fr_fbs_get_int(m, 1, INT32_MAX, &s->batch, "fp8run.batch"));
    FR_TRY(fr_fbs_get_int(m, 1, INT32_MAX, &s->seq, "fp8run.seq"));
    FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.tokens_input"));
    FR_TRY(fr_fbs_dup_const(v, &s->tokens_input));
    fr_fp8_options_default(&s->fp8);
    FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_prec, &k, "fp8run.option.precision"));
    FR_TRY(fr_fbs_dup(fr_fbs_k_prec[k], &s->s_precision));
    FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_recipe, &k, "fp8run.option.recipe"));
    FR_TRY(fr_fbs_dup(fr_fbs_k_recipe[k], &s->s_recipe));
    FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_format, &k, "fp8run.option.fp8_format"));
    FR_TRY(fr_fbs_dup(fr_fbs_k_format[k], &s->s_format));
    FR_TRY(fr_fbs_get_str(m, 0, &v, "fp8run.option.fp8_exclude"));
    FR_TRY(fr_fbs_dup(v, &s->s_exclude));
    s->fp8.precision = s->s_precision;
    s->fp8.recipe = s->s_recipe;
    s->fp8.fp8_format = s->s_format;
    s->fp8.fp8_exclude = s->s_exclude;
    FR_TRY(fr_fbs_get_int(m, 0, 1000000, &x, "fp8run.option.bf16_boundary"));
    s->fp8.bf16_boundary = (int)x;
    FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &s->fp8.fuse, "fp8run.option.fuse"));
    FR_TRY(fr_fbs_get_int(m, 1, 4096, &x, "fp8run.option.pad_multiple"));
    s->fp8.pad_multiple = (int)x;
    FR_TRY(fr_fbs_get_int(m, -64, 64, &x, "fp8run.option.margin"));
    s->fp8.margin = (int)x;
    FR_TRY(fr_fbs_get_int(m, 1, 1 << 24, &x, "fp8run.option.amax_history"));
    s->fp8.amax_history_len = (int)x;
    FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_algo, &k, "fp8run.option.amax_algo"));
    s->fp8.amax_algo = k ? FR_AMAX_MOST_RECENT : FR_AMAX_MAX;
    FR_TRY(fr_fbs_get_int(m, 1, 1000000000, &x, "fp8run.option.interval"));
    s->fp8.interval = (int)x;
    FR_TRY(fr_fbs_get_str(m, 0, &v, "fp8run.option.logits_output"));
    FR_TRY(fr_fbs_dup_const(v, &s->logits_output));
    FR_TRY(fr_fbs_get_str(m, 0, &v, "fp8run.option.loss_output"));
    FR_TRY(fr_fbs_dup_const(v, &s->loss_output));
    FR_TRY(fr_fbs_get_str(m, 0, &v, "fp8run.option.train"));
    FR_TRY(fr_fbs_dup_const(v, &s->train_regex));
    FR_TRY(fr_fbs_get_str(m, 0, &v, "fp8run.option.freeze"));
    FR_TRY(fr_fbs_dup_const(v, &s->freeze_regex));
    int64_t nd;
    FR_TRY(fr_fbs_get_count(m, &nd, "fp8run.dims"));
    if (nd > 0) {
        s->dims = fr_calloc((size_t)nd, sizeof *s->dims, "compiled graph dims");
        if (!s->dims) return FR_ERR_OOM;
    }
    for (int i = 0; i < nd; i++) {
        char *name;
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.dim.%d.name", i));
        FR_TRY(fr_fbs_dup(v, &name));
        s->dims[s->n_dims].name = name;
        FR_TRY(fr_fbs_get_int(m, 0, INT64_MAX, &s->dims[s->n_dims++].value, "fp8run.dim.%d.value", i));
    }
    return FR_OK;
}

static void spec_free(fr_fbs_spec *s)
{
    free((char *)s->tokens_input);
    free((char *)s->logits_output);
    free((char *)s->loss_output);
    free((char *)s->train_regex);
    free((char *)s->freeze_regex);
    for (int i = 0; i < s->n_dims; i++) free((char *)s->dims[i].name);
    free(s->dims);
    free(s->ties);
    free(s->s_precision);
    free(s->s_recipe);
    free(s->s_format);
    free(s->s_exclude);
    memset(s, 0, sizeof *s);
}

/* ---- the report ---- */

static fr_status read_layer_list(const fr_fbs_meta *m, const fr_graph *g, fr_fp8_report *r, int64_t n,
                                 const fr_name_map *nodes, int *node_of);

static fr_status read_layers(const fr_fbs_meta *m, const fr_graph *g, fr_fp8_report *r)
{
    int64_t n;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.layers"));
    if (n == 0) return FR_OK;
    r->layers = fr_calloc((size_t)n, sizeof *r->layers, "compiled graph report");
    int *node_of = fr_calloc((size_t)n, sizeof *node_of, "compiled graph report");
    fr_name_map *nodes = NULL; /* node name -> id: one pass, not one per layer */
    fr_status st = r->layers && node_of ? fr_name_map_new(&nodes) : FR_ERR_OOM;
    for (int j = 0; st == FR_OK && j < g->n_nodes; j++)
        if (fr_name_map_get(nodes, g->nodes[j].name) < 0) st = fr_name_map_put(nodes, g->nodes[j].name, j);
    if (st == FR_OK) st = read_layer_list(m, g, r, n, nodes, node_of);
    if (st == FR_OK) st = fr_fbs_check_layers(g, r, node_of, m->what);
    fr_name_map_free(nodes);
    free(node_of);
    return st;
}

static fr_status read_layer_list(const fr_fbs_meta *m, const fr_graph *g, fr_fp8_report *r, int64_t n,
                                 const fr_name_map *nodes, int *node_of)
{
    for (int i = 0; i < n; i++) {
        fr_fp8_layer *L = &r->layers[r->n_layers++];
        const char *v;
        int k;
        int64_t x;
        char key[128];
        snprintf(key, sizeof key, "fp8run.layer.%d.name", i);
        FR_TRY(fr_fbs_get_str(m, 1, &v, "%s", key));
        FR_TRY(fr_fbs_dup(v, &L->name));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.layer.%d.weights", i));
        FR_TRY(fr_fbs_dup(v, &L->weights));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.layer.%d.sources", i));
        FR_TRY(fr_fbs_dup(v, &L->sources));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.layer.%d.why", i));
        FR_TRY(fr_fbs_dup(v, &L->why));
        FR_TRY(fr_fbs_get_int(m, 1, m->n_keys, &x, "fp8run.layer.%d.n_fused", i));
        L->n_fused = (int)x;
        FR_TRY(fr_fbs_get_int(m, 1, INT32_MAX, &L->K, "fp8run.layer.%d.K", i));
        FR_TRY(fr_fbs_get_int(m, 1, INT32_MAX, &L->N, "fp8run.layer.%d.N", i));
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &L->transB, "fp8run.layer.%d.transB", i));
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_bool, &L->has_bias, "fp8run.layer.%d.has_bias", i));
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_prec, &k, "fp8run.layer.%d.precision", i));
        L->precision = (fr_lin_precision)k;
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_recipe, &k, "fp8run.layer.%d.recipe", i));
        L->recipe = (fr_lin_recipe)k;
        FR_TRY(fr_fbs_get_int(m, 1, 4096, &x, "fp8run.layer.%d.pad_multiple", i));
        L->pad_multiple = (int)x;
        FR_TRY(fr_fbs_get_int(m, 0, 4095, &L->pad_k, "fp8run.layer.%d.pad_k", i));
        FR_TRY(fr_fbs_get_int(m, 0, 4095, &L->pad_n, "fp8run.layer.%d.pad_n", i));
        FR_TRY(fr_fbs_get_str(m, L->precision == FR_LIN_FP8, &v, "fp8run.layer.%d.state_prefix", i));
        FR_TRY(fr_fbs_dup(v, &L->state_prefix));
        /* the layer is a Linear node of the graph whose weight has the recorded K x N */
        node_of[i] = fr_name_map_get(nodes, L->name);
        const fr_node *nd = node_of[i] >= 0 ? &g->nodes[node_of[i]] : NULL;
        if (!nd || strcmp(nd->op_type, "Linear") != 0 || strcmp(nd->domain, FR_DOMAIN_FP8RUN) != 0 || nd->n_inputs < 2)
            return fr_fbs_bad(m, key, "no ai.fp8run::Linear node named '%s' in the graph", L->name);
        const char *prec;
        int64_t tb;
        if (fr_node_attr_string(nd, "precision", "fp32", &prec) != FR_OK || fr_node_attr_int(nd, "transB", 0, &tb) != FR_OK) {
            fr_clear_error();
            return fr_fbs_bad(m, key, "node '%s' has malformed attributes", L->name);
        }
        const fr_value *w = nd->inputs[1] >= 0 ? &g->values[nd->inputs[1]] : NULL;
        int64_t K = w && w->rank == 2 ? (tb ? w->dims[1] : w->dims[0]) : -1;
        int64_t N = w && w->rank == 2 ? (tb ? w->dims[0] : w->dims[1]) : -1;
        if (strcmp(prec, fr_lin_precision_name(L->precision)) != 0 || tb != L->transB || K != L->K || N != L->N)
            return fr_fbs_bad(m, key, "node '%s' (precision %s, transB %lld, K x N %lld x %lld) does not match the record",
                       L->name, prec, (long long)tb, (long long)K, (long long)N);
        r->n_linears += L->n_fused;
        if (L->precision == FR_LIN_FP8) r->n_fp8 += L->n_fused;
        else if (L->precision == FR_LIN_BF16) r->n_bf16 += L->n_fused;
        else r->n_fp32 += L->n_fused;
    }
    /* the activation MatMuls the pass lowered are in the graph itself */
    for (int i = 0; i < g->n_nodes; i++)
        r->n_activation_matmuls += strcmp(g->nodes[i].op_type, "MatMul") == 0 &&
                                   strcmp(g->nodes[i].domain, "ai.fp8run") == 0;
    for (int i = 0; i < g->n_nodes; i++)
        r->n_attention += (strcmp(g->nodes[i].op_type, "Attention") == 0 || strcmp(g->nodes[i].op_type, "AttentionQKV") == 0) &&
                          strcmp(g->nodes[i].domain, "ai.fp8run") == 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, "SwiGLU") == 0 && strcmp(g->nodes[i].domain, "ai.fp8run") == 0) {
            r->n_swiglu++;
            r->n_swiglu_one_input += g->nodes[i].n_inputs == 1;
        }
    return FR_OK;
}

static fr_status read_skipped(const fr_fbs_meta *m, fr_fp8_report *r)
{
    int64_t n;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.skipped"));
    if (n == 0) return FR_OK;
    r->skipped = fr_calloc((size_t)n, sizeof *r->skipped, "compiled graph report");
    if (!r->skipped) return FR_ERR_OOM;
    for (int i = 0; i < n; i++) {
        fr_fp8_skip *s = &r->skipped[r->n_skipped++];
        const char *v;
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.skip.%d.node", i));
        FR_TRY(fr_fbs_dup(v, &s->node));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.skip.%d.op_type", i));
        FR_TRY(fr_fbs_dup(v, &s->op_type));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.skip.%d.weight", i));
        FR_TRY(fr_fbs_dup(v, &s->weight));
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.skip.%d.reason", i));
        FR_TRY(fr_fbs_dup(v, &s->reason));
    }
    return FR_OK;
}

/* An initializer of g named `name` with the given dtype and element count, or -1. */
static int init_of(const fr_graph *g, const char *name, fr_dtype dt, int64_t numel)
{
    int vid = fr_graph_find_value(g, name);
    if (vid < 0 || !(g->values[vid].flags & FR_VAL_INITIALIZER)) return -1;
    const fr_tensor *t = g->values[vid].constant;
    return t && t->dtype == dt && fr_tensor_numel(t) == numel && t->rank == 1 ? vid : -1;
}

/* States: the table, the scales (flagged FR_VAL_STATE), history and counters (read, then
 * taken out of g so they are neither parameters nor exported again). */
static fr_status read_states(const fr_fbs_meta *m, fr_graph *g, fr_fp8_report *r, const fr_fbs_spec *spec,
                             fr_fp8_scaling **out, int *n_out)
{
    int64_t n, want = 0;
    *out = NULL;
    *n_out = 0;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.states"));
    /* every fp8 layer of the delayed recipe has its three operands' state (distinct, below) */
    for (int i = 0; i < r->n_layers; i++) want += 3 * (r->layers[i].precision == FR_LIN_FP8 && r->layers[i].recipe == FR_LIN_DELAYED);
    if (n != want)
        return fr_fbs_bad(m, "fp8run.states", "%" PRId64 " states for %" PRId64 " operands of delayed-recipe fp8 layers", n, want);
    if (n == 0) return FR_OK;
    r->states = fr_calloc((size_t)n, sizeof *r->states, "compiled graph report");
    fr_fp8_scaling *scs = fr_calloc((size_t)n, sizeof *scs, "compiled graph scaling state");
    *out = scs;
    if (!r->states || !scs) return FR_ERR_OOM;
    const int64_t H = spec->fp8.amax_history_len;
    for (int i = 0; i < n; i++) {
        fr_fp8_state *s = &r->states[r->n_states++];
        const char *v;
        int k;
        int64_t x;
        char key[128], name[1400];
        FR_TRY(fr_fbs_get_int(m, 0, r->n_layers - 1, &x, "fp8run.state.%d.layer", i));
        s->layer = (int)x;
        s->amax_value = -1;
        s->scale_value = -1;
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_operand, &k, "fp8run.state.%d.operand", i));
        s->operand = (fr_fp8_operand)k;
        FR_TRY(fr_fbs_get_choice(m, fr_fbs_k_fmt8, &k, "fp8run.state.%d.format", i));
        s->fmt = k ? FR_F8E5M2 : FR_F8E4M3;
        FR_TRY(fr_fbs_get_str(m, 1, &v, "fp8run.state.%d.amax", i));
        FR_TRY(fr_fbs_dup(v, &s->amax_name));
        snprintf(key, sizeof key, "fp8run.state.%d.layer", i);
        const fr_fp8_layer *L = &r->layers[s->layer];
        if (L->precision != FR_LIN_FP8 || L->recipe != FR_LIN_DELAYED)
            return fr_fbs_bad(m, key, "layer '%s' is not an fp8 layer of the delayed recipe", L->name);
        snprintf(key, sizeof key, "fp8run.state.%d.scale", i);
        FR_TRY(fr_fbs_get_str(m, 1, &v, "%s", key));
        s->scale_value = init_of(g, v, FR_F32, 1);
        if (s->scale_value < 0) return fr_fbs_bad(m, key, "'%s' is not a [1] float32 initializer", v);
        float scale = ((const float *)g->values[s->scale_value].constant->data)[0];
        if (!(scale > 0) || !isfinite(scale)) return fr_fbs_bad(m, key, "scale %g is not finite and > 0", (double)scale);
        const fr_node *nd = NULL; /* the layer's Linear reads this scale in the operand's slot */
        for (int j = 0; j < g->n_nodes && !nd; j++)
            if (strcmp(g->nodes[j].name, L->name) == 0) nd = &g->nodes[j];
        int slot = FR_LIN_IN_SCALE_X + (int)s->operand;
        if (!nd || slot >= nd->n_inputs || nd->inputs[slot] != s->scale_value)
            return fr_fbs_bad(m, key, "'%s' is not the %s scale input of Linear '%s'", v, fr_fbs_k_operand[s->operand], L->name);
        g->values[s->scale_value].flags = (g->values[s->scale_value].flags & ~FR_VAL_PARAM) | FR_VAL_STATE;
        if (s->operand != FR_FP8_OPERAND_DY) {
            s->amax_value = fr_graph_find_value(g, s->amax_name);
            if (s->amax_value < 0 || g->values[s->amax_value].producer < 0)
                return fr_fbs_bad(m, key, "amax '%s' is not produced by the graph", s->amax_name);
        }
        /* history and counters */
        snprintf(name, sizeof name, "%s/history", s->amax_name);
        int hv = init_of(g, name, FR_F32, H);
        snprintf(name, sizeof name, "%s/counters", s->amax_name);
        int cv = init_of(g, name, FR_I64, 2);
        snprintf(key, sizeof key, "fp8run.state.%d.amax", i);
        if (hv < 0 || cv < 0)
            return fr_fbs_bad(m, key, "'%s/history' ([%" PRId64 "] float32) or '%s/counters' ([2] int64) is missing",
                       s->amax_name, H, s->amax_name);
        const float *hist = g->values[hv].constant->data;
        const int64_t *cnt = g->values[cv].constant->data;
        for (int64_t j = 0; j < H; j++)
            if (!(hist[j] >= 0) || !isfinite(hist[j])) return fr_fbs_bad(m, key, "amax history entry %" PRId64 " is %g", j, (double)hist[j]);
        if (cnt[0] < 0 || cnt[0] >= H || cnt[1] < 0)
            return fr_fbs_bad(m, key, "counters (%" PRId64 ", %" PRId64 ") are out of range", cnt[0], cnt[1]);
        fr_fp8_scaling_params p = {(int)H, spec->fp8.amax_algo, spec->fp8.margin, spec->fp8.interval, s->fmt};
        FR_TRY(fr_fp8_scaling_init(&scs[*n_out], &p));
        fr_fp8_scaling *sc = &scs[(*n_out)++];
        memcpy(sc->history, hist, (size_t)H * sizeof(float));
        sc->pos = (int)cnt[0];
        sc->updates = cnt[1];
        sc->scale = scale;
        sc->scale_inv = 1.0f / scale;
        for (int j = 0; j < i; j++)
            if (r->states[j].layer == s->layer && r->states[j].operand == s->operand)
                return fr_fbs_bad(m, key, "operand %s of layer '%s' has two states", fr_fbs_k_operand[s->operand], L->name);
        int drop[2] = {hv, cv};
        for (int d = 0; d < 2; d++) {
            fr_value *dv = &g->values[drop[d]];
            fr_tensor_free(dv->constant);
            dv->constant = NULL;
            dv->flags &= ~(FR_VAL_INITIALIZER | FR_VAL_PARAM);
            int kk = 0;
            for (int j = 0; j < g->n_initializers; j++)
                if (g->initializers[j] != drop[d]) g->initializers[kk++] = g->initializers[j];
            g->n_initializers = kk;
        }
    }
    return FR_OK;
}

/* FR_VAL_PARAM exactly on the recorded parameters. */
static fr_status read_params(const fr_fbs_meta *m, fr_graph *g)
{
    int64_t n;
    FR_TRY(fr_fbs_get_count(m, &n, "fp8run.params"));
    for (int i = 0; i < g->n_values; i++) g->values[i].flags &= ~FR_VAL_PARAM;
    for (int i = 0; i < n; i++) {
        const char *v;
        char key[64];
        snprintf(key, sizeof key, "fp8run.param.%d", i);
        FR_TRY(fr_fbs_get_str(m, 1, &v, "%s", key));
        int vid = fr_graph_find_value(g, v);
        if (vid < 0 || !(g->values[vid].flags & FR_VAL_INITIALIZER) || !g->values[vid].constant ||
            g->values[vid].constant->dtype != FR_F32)
            return fr_fbs_bad(m, key, "'%s' is not a float32 initializer of the graph", v);
        g->values[vid].flags |= FR_VAL_PARAM;
    }
    return FR_OK; /* the other float initializers are constants: folded values, frozen weights */
}

/* The original members of fused parameters, as the compile pass leaves them in its graph:
 * initializers (not trained) holding the slice values; report value ids point at them. */
static fr_status add_slice_values(fr_graph *g, fr_fp8_report *r)
{
    for (int i = 0; i < r->n_fused; i++)
        for (int j = 0; j < r->fused[i].n_slices; j++) {
            fr_fp8_slice *s = &r->fused[i].slices[j];
            if (fr_graph_find_value(g, s->name) >= 0)
                return fr_error(FR_ERR_PARSE, "metadata key 'fp8run.fused.%d.slice.%d.name': '%s' is also a value of "
                                "the compiled graph", i, j, s->name);
            fr_tensor *t;
            int vid;
            FR_TRY(fr_tensor_new(FR_F32, s->rank, s->dims, s->name, &t));
            fr_status st = fr_graph_add_value(g, s->name, &vid);
            if (st == FR_OK) st = fr_graph_set_initializer(g, vid, t);
            else fr_tensor_free(t);
            FR_TRY(st);
            g->values[vid].flags &= ~FR_VAL_PARAM;
            s->value = vid;
        }
    return fr_fp8_sync_params(g, r, 1);
}

/* Re-tied copies as the re-tie pass leaves them: initializers (not trained) that nothing reads,
 * holding their source's values, so export and checkpoints can write them. */
static fr_status add_tie_values(fr_graph *g, fr_fbs_spec *s, const char **names)
{
    for (int i = 0; i < s->n_ties; i++) {
        fr_tie *t = &s->ties[i];
        const fr_tensor *src = g->values[t->source].constant;
        int64_t dims[2] = {t->transposed ? src->dims[1] : src->dims[0], t->transposed ? src->dims[0] : src->dims[1]};
        fr_tensor *c;
        int vid;
        FR_TRY(fr_tensor_new(FR_F32, 2, dims, names[i], &c));
        fr_fbs_copy_tie(g, t, c);
        fr_status st = fr_graph_add_value(g, names[i], &vid);
        if (st == FR_OK) st = fr_graph_set_initializer(g, vid, c);
        else fr_tensor_free(c);
        FR_TRY(st);
        g->values[vid].flags &= ~FR_VAL_PARAM;
        t->copy = vid;
    }
    return FR_OK;
}

static fr_status decode_graph(const fr_fbs_meta *m, const fr_graph *file, fr_fbs *out, const char **tie_names);

static fr_status decode(const fr_fbs_meta *m, const fr_graph *file, fr_fbs *out)
{
    fr_fbs_spec *s = &out->spec;
    fr_fp8_report *r = &out->report;
    FR_TRY(fr_fbs_check_format(m));
    FR_TRY(read_spec(m, s));
    int tok = fr_graph_find_value(file, s->tokens_input);
    if (tok < 0 || !(file->values[tok].flags & FR_VAL_INPUT))
        return fr_fbs_bad(m, "fp8run.tokens_input", "'%s' is not an input of the graph", s->tokens_input);
    /* the report's options */
    FR_TRY(fr_lin_precision_parse(s->fp8.precision, &r->precision));
    FR_TRY(fr_lin_recipe_parse(s->fp8.recipe, &r->recipe));
    r->e4m3_only = strcmp(s->fp8.fp8_format, "e4m3") == 0;
    r->bf16_boundary = s->fp8.bf16_boundary;
    r->fuse = s->fp8.fuse;
    r->pad_multiple = s->fp8.pad_multiple;
    r->margin = s->fp8.margin;
    FR_TRY(fr_fbs_dup(s->fp8.fp8_exclude, &r->fp8_exclude));
    r->amax_history_len = s->fp8.amax_history_len;
    r->amax_algo = s->fp8.amax_algo;
    r->interval = s->fp8.interval;

    const char **tie_names = NULL;
    FR_TRY(fr_fbs_read_fused(m, file, &r->fused, &r->n_fused));
    fr_status st = fr_fbs_read_ties(m, file, s, &tie_names);
    if (st == FR_OK) st = fr_fbs_read_original(m, file, r->fused, r->n_fused, s, tie_names, &out->original);
    if (st == FR_OK) st = decode_graph(m, file, out, tie_names);
    free(tie_names);
    return st;
}

/* The per-layer records that only inform (weights, why: info and the --log-fp8 records show
 * them; training does not read them) are still checked against the graph: each weight a value
 * of the original model, a reason given, and no fused group when the options say no fusion. */
static fr_status check_layer_records(const fr_fbs_meta *m, const fr_graph *orig, const fr_fp8_report *r)
{
    if (!r->fuse && r->n_fused > 0)
        return fr_fbs_bad(m, "fp8run.option.fuse", "0 (no fusion), but the file holds %d fused parameters",
                          r->n_fused);
    for (int i = 0; i < r->n_layers; i++) {
        const fr_fp8_layer *L = &r->layers[i];
        char key[64];
        snprintf(key, sizeof key, "fp8run.layer.%d.why", i);
        if (!L->why || !L->why[0]) return fr_fbs_bad(m, key, "empty (every layer records why it has its precision)");
        if (!r->fuse && L->n_fused > 1)
            return fr_fbs_bad(m, "fp8run.option.fuse", "0 (no fusion), but layer '%s' fuses %d Linears", L->name,
                              L->n_fused);
        snprintf(key, sizeof key, "fp8run.layer.%d.weights", i);
        for (const char *p = L->weights; p && *p;) {
            size_t n = strcspn(p, ",");
            char name[1024];
            if (n == 0 || n >= sizeof name) return fr_fbs_bad(m, key, "an empty or over-long weight name");
            memcpy(name, p, n);
            name[n] = '\0';
            int v = fr_graph_find_value(orig, name);
            if (v < 0 || !orig->values[v].constant)
                return fr_fbs_bad(m, key, "'%s' is no weight of the model", name);
            p += n + (p[n] == ',');
        }
    }
    return FR_OK;
}

static fr_status decode_graph(const fr_fbs_meta *m, const fr_graph *file, fr_fbs *out, const char **tie_names)
{
    fr_fbs_spec *s = &out->spec;
    fr_fp8_report *r = &out->report;
    FR_TRY(fr_train_clone_graph(file, 0, &out->graph));
    fr_graph *g = out->graph;
    FR_TRY(read_params(m, g));
    FR_TRY(fr_graph_toposort(g));
    FR_TRY(fr_graph_resolve_ops(g));
    FR_TRY(read_layers(m, g, r));
    FR_TRY(check_layer_records(m, out->original ? out->original : file, r));
    FR_TRY(read_skipped(m, r));
    FR_TRY(read_states(m, g, r, s, &out->states, &out->n_states));
    for (int i = 0; i < r->n_fused; i++)
        if (!(g->values[r->fused[i].value].flags & FR_VAL_PARAM))
            return fr_fbs_bad(m, "fp8run.params", "fused parameter '%s' is not listed as a parameter", r->fused[i].name);
    /* the pipeline's steps the file does not record (every dim is concrete: preparation only
       resolves ops and re-infers shapes) */
    FR_TRY(fr_pipeline_reload(g));
    FR_TRY(add_slice_values(g, r));
    FR_TRY(add_tie_values(g, s, tie_names));
    for (int i = 0; i < s->n_ties; i++)
        if (!(g->values[s->ties[i].source].flags & FR_VAL_PARAM))
            return fr_fbs_bad(m, "fp8run.ties", "the source '%s' of a re-tied copy is not a parameter",
                       g->values[s->ties[i].source].name);
    return FR_OK;
}

fr_status fr_fbs_decode(const fr_graph *file, const char *what, fr_fbs *out)
{
    memset(out, 0, sizeof *out);
    if (!file) return fr_error(FR_ERR_INVALID_ARG, "fr_fbs_decode: no graph");
    what = fr_fbs_file_name(file, what);
    fr_fbs_meta m;
    fr_status st = fr_fbs_meta_open(file, what, &m);
    if (st == FR_OK) st = decode(&m, file, out);
    fr_fbs_meta_close(&m);
    if (st != FR_OK) {
        if (!strstr(fr_last_error(), what)) st = fr_error_context(st, "compiled graph '%s'", what);
        fr_fbs_free(out);
    }
    return st;
}

fr_status fr_fbs_load(const char *path, fr_fbs *out)
{
    memset(out, 0, sizeof *out);
    fr_graph *g;
    FR_TRY(fr_onnx_load_file(path, &g));
    fr_status st;
    if (!fr_fbs_is_compiled(g))
        st = fr_error(FR_ERR_PARSE, "'%s' is not a compiled graph (no '%s' metadata key; compile it with "
                      "fp8run compile)", path, FR_FBS_FORMAT_KEY);
    else
        st = fr_fbs_decode(g, path, out);
    fr_graph_free(g);
    return st;
}

void fr_fbs_free(fr_fbs *f)
{
    if (!f) return;
    fr_graph_free(f->graph);
    fr_graph_free(f->original);
    fr_fp8_report_free(&f->report);
    spec_free(&f->spec);
    for (int i = 0; i < f->n_states; i++) fr_fp8_scaling_free(&f->states[i]);
    free(f->states);
    memset(f, 0, sizeof *f);
}
