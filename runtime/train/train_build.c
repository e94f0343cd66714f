/* Building the training graph from an imported model (see trainer.h): inputs and dims, the
 * graph passes (passes/pipeline.c: parameter selection, preparation, fusions, precision, in
 * the order listed there), loss head, the eval copy, autodiff, the passes on the backward
 * (recomputation), outputs, executor, optimizer and scaling state. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dropout_mask.h"
#include "ops/op.h"
#include "passes/autodiff.h"
#include "passes/dropout.h"
#include "passes/pipeline.h"
#include "passes/select_params.h"
#include "runtime/io/fbs.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"

/* ---- graph inputs ---- */

static int is_int_dtype(fr_dtype dt) { return dt == FR_I64 || dt == FR_I32; }

static fr_status find_tokens_input(fr_trainer *t, const fr_graph *g, int *vid)
{
    *vid = -1;
    if (t->opt.tokens_input) {
        int v = fr_graph_find_value(g, t->opt.tokens_input);
        if (v < 0 || !(g->values[v].flags & FR_VAL_INPUT))
            return fr_error(FR_ERR_INVALID_ARG, "the model has no input named '%s' (--tokens-input)",
                            t->opt.tokens_input);
        *vid = v;
    } else {
        for (int i = 0; i < g->n_inputs && *vid < 0; i++)
            if (is_int_dtype(g->values[g->inputs[i]].dtype)) *vid = g->inputs[i];
        if (*vid < 0)
            return fr_error(FR_ERR_INVALID_ARG,
                            "the model has no int64/int32 input to feed token ids to (name it with "
                            "the tokens input option)");
    }
    const fr_value *v = &g->values[*vid];
    if (!is_int_dtype(v->dtype))
        return fr_error(FR_ERR_UNSUPPORTED, "tokens input '%s' is %s; token ids need int64 or int32",
                        v->name, fr_dtype_name(v->dtype));
    if (v->rank != 2 && v->rank != -1)
        return fr_error(FR_ERR_SHAPE, "tokens input '%s' has rank %d; training feeds [batch, seq]",
                        v->name, v->rank);
    return FR_OK;
}

/* How the trainer feeds an input that is not the tokens: by its (Hugging Face) name. */
static fr_status classify_input(fr_trainer *t, const fr_value *v, const char *tokens, tr_feed *feed)
{
    if (t->opt.sft && tr_sft_feed(v->name, feed))
        return FR_OK;
    if (strcmp(v->name, "attention_mask") == 0)
        *feed = TR_FEED_ONES;
    else if (strcmp(v->name, "position_ids") == 0)
        *feed = TR_FEED_ARANGE;
    else if (strcmp(v->name, "token_type_ids") == 0)
        *feed = TR_FEED_ZEROS;
    else if (t->opt.loss_output && strcmp(v->name, "labels") == 0)
        *feed = TR_FEED_LABELS;
    else if (strcmp(v->name, FR_DROPOUT_KEY_INPUT) == 0 && v->dtype == FR_I64)
        *feed = TR_FEED_DROPOUT_KEY;
    else
        return fr_error(FR_ERR_UNSUPPORTED,
                        "the model has an input '%s' that training cannot feed: fp8run feeds the "
                        "token ids to '%s' and knows attention_mask (ones), position_ids (0..T-1), "
                        "token_type_ids (zeros)%s",
                        v->name, tokens, t->opt.loss_output ? " and labels" : "");
    switch (v->dtype) {
    case FR_I64: case FR_I32: case FR_F32: case FR_F64: case FR_BOOL: case FR_U8: case FR_I8:
        break;
    default:
        return fr_error(FR_ERR_UNSUPPORTED, "input '%s' has element type %s, which the trainer cannot fill",
                        v->name, fr_dtype_name(v->dtype));
    }
    return FR_OK;
}

/* The shape the trainer will feed to input v: [B, T] for rank 2 (or unknown rank), [T] for
 * rank 1; dims the model fixes stay (e.g. position_ids [1, seq]). */
static void feed_shape(const fr_trainer *t, const fr_value *v, fr_input_shape *s)
{
    s->name = v->name;
    if (v->rank == 1) {
        s->rank = 1;
        s->dims[0] = v->dims[0] >= 0 ? v->dims[0] : t->opt.seq_len;
        return;
    }
    s->rank = v->rank < 0 ? 2 : v->rank;
    for (int d = 0; d < s->rank; d++) {
        int64_t dflt = d == s->rank - 1 ? t->opt.seq_len : (d == 0 ? t->opt.batch : 1);
        s->dims[d] = v->rank >= 0 && v->dims[d] >= 0 ? v->dims[d] : dflt;
    }
}

/* ---- loss head ---- */

static fr_status pick_logits(fr_trainer *t, const fr_graph *g, int *vid)
{
    *vid = -1;
    if (t->opt.logits_output) {
        *vid = fr_graph_find_value(g, t->opt.logits_output);
        if (*vid < 0) return fr_error(FR_ERR_INVALID_ARG, "the model has no value named '%s' (logits output)", t->opt.logits_output);
    } else {
        for (int i = 0; i < g->n_outputs && *vid < 0; i++) {
            const fr_value *v = &g->values[g->outputs[i]];
            if ((v->dtype == FR_F32 || v->dtype == FR_F64) && v->rank >= 2) *vid = g->outputs[i];
        }
        if (*vid < 0)
            return fr_error(FR_ERR_INVALID_ARG,
                            "the model has no float output of rank >= 2 to use as logits (name the "
                            "logits output, or give the model's own scalar loss output)");
    }
    const fr_value *v = &g->values[*vid];
    int64_t rows;
    if (v->dtype != FR_F32 || v->rank < 2)
        return fr_error(FR_ERR_SHAPE, "logits '%s' must be float32 of rank >= 2, got %s rank %d",
                        v->name, fr_dtype_name(v->dtype), v->rank);
    FR_TRY(fr_shape_numel(v->rank - 1, v->dims, v->name, &rows));
    if (rows != t->opt.batch * t->opt.seq_len) {
        char s[256];
        return fr_error(FR_ERR_SHAPE,
                        "logits '%s' have shape %s: %lld positions, but the batch has %lld x %lld "
                        "tokens",
                        v->name, fr_shape_str(v->rank, v->dims, s, sizeof s), (long long)rows,
                        (long long)t->opt.batch, (long long)t->opt.seq_len);
    }
    return FR_OK;
}

/* Without logits the vocabulary is the row count of the embedding table the tokens index
 * (Gather(table, tokens) on axis 0); 0 when there is no such Gather. */
static int64_t embedding_rows(const fr_graph *g, int tokens)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        int64_t axis = 0;
        if (strcmp(n->op_type, "Gather") != 0 || n->domain[0] || n->n_inputs < 2 || n->inputs[1] != tokens) continue;
        if (fr_node_attr_int(n, "axis", 0, &axis) != FR_OK) {
            fr_clear_error();
            continue;
        }
        const fr_value *tab = n->inputs[0] >= 0 ? &g->values[n->inputs[0]] : NULL;
        if (axis == 0 && tab && tab->constant && tab->rank >= 1) return tab->dims[0];
    }
    return 0;
}

/* labels input + SoftmaxCrossEntropy(logits, labels) -> loss */
static fr_status add_loss_head(fr_trainer *t, fr_graph *g, int logits, int *loss, int *labels_out)
{
    int labels, nid;
    FR_TRY(fr_graph_add_unique_value(g, "labels", &labels));
    const fr_value *lv = &g->values[logits];
    fr_value_set_shape(&g->values[labels], FR_I64, lv->rank - 1, lv->dims);
    FR_TRY(fr_graph_mark_input(g, labels));
    FR_TRY(fr_graph_add_unique_value(g, "loss", loss));
    int in[2] = {logits, labels};
    *labels_out = labels;
    FR_TRY(fr_graph_add_node(g, "SoftmaxCrossEntropy", FR_DOMAIN_FP8RUN, "loss_head", 2, in, 1, loss, &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "ignore_index", t->opt.ignore_index));
    return fr_node_infer(g, nid);
}

static fr_status check_loss_value(const fr_graph *g, int vid)
{
    const fr_value *v = &g->values[vid];
    int64_t n = 0;
    if (v->rank >= 0) FR_TRY(fr_shape_numel(v->rank, v->dims, v->name, &n));
    if (v->dtype != FR_F32 || n != 1)
        return fr_error(FR_ERR_SHAPE, "loss output '%s' must be a float32 scalar, got %s with %lld elements",
                        v->name, fr_dtype_name(v->dtype), (long long)n);
    return FR_OK;
}

/* What the step's loss comes from: the loss output `loss` (--loss-output; the vocabulary from the
 * embedding behind the tokens input `tok`), or else the logits, whose name the trainer keeps. */
static fr_status pick_loss(fr_trainer *t, const fr_graph *g, int tok, int loss, int *logits)
{
    if (t->opt.loss_output) {
        FR_TRY(check_loss_value(g, loss));
        t->vocab = embedding_rows(g, tok);
        return FR_OK;
    }
    FR_TRY(pick_logits(t, g, logits));
    t->logits_name = fr_strdup(g->values[*logits].name, "trainer");
    if (!t->logits_name) return FR_ERR_OOM;
    t->vocab = g->values[*logits].dims[g->values[*logits].rank - 1];
    return FR_OK;
}

/* ---- outputs ---- */

static void reset_outputs(fr_graph *g)
{
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].flags &= ~FR_VAL_OUTPUT;
    g->n_outputs = 0;
}

/* Mark vid as an output (once); *index gets its position among the outputs. */
static fr_status add_output(fr_graph *g, int vid, int *index)
{
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == vid) {
            *index = i;
            return FR_OK;
        }
    FR_TRY(fr_graph_mark_output(g, vid));
    *index = g->n_outputs - 1;
    return FR_OK;
}

static fr_status dce(fr_graph *g)
{
    int n = 0;
    FR_TRY(fr_dce(g, &n));
    return n ? fr_graph_compact(g) : FR_OK;
}

/* ---- feeding ---- */

static fr_status make_inputs(fr_trainer *t, const fr_graph *g, const char *tokens, const char *labels,
                             tr_input **out, int *n_out)
{
    tr_input *ins = fr_calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *ins, "trainer inputs");
    if (!ins) return FR_ERR_OOM;
    *out = ins;
    *n_out = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        tr_input *in = &ins[(*n_out)++];
        if (strcmp(v->name, tokens) == 0)
            in->feed = TR_FEED_TOKENS;
        else if (labels && strcmp(v->name, labels) == 0)
            in->feed = TR_FEED_LABELS;
        else
            FR_TRY(classify_input(t, v, tokens, &in->feed));
        in->name = fr_strdup(v->name, "trainer inputs");
        if (!in->name) return FR_ERR_OOM;
        FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &in->t));
        if ((in->feed == TR_FEED_TOKENS || in->feed == TR_FEED_LABELS) &&
            fr_tensor_numel(in->t) != t->opt.batch * t->opt.seq_len) {
            char s[256];
            return fr_error(FR_ERR_SHAPE, "input '%s' has shape %s after preparation, expected %lld x %lld tokens",
                            v->name, fr_shape_str(v->rank, v->dims, s, sizeof s), (long long)t->opt.batch,
                            (long long)t->opt.seq_len);
        }
        if (in->feed == TR_FEED_DROPOUT_KEY) {
            if (fr_tensor_numel(in->t) != FR_DROPOUT_KEY_LEN)
                return fr_error(FR_ERR_SHAPE, "input '%s' must be int64 [%d]", v->name, FR_DROPOUT_KEY_LEN);
            ((int64_t *)in->t->data)[1] = -1; /* no step fed yet */
        }
        if (in->feed == TR_FEED_LABELS && !is_int_dtype(v->dtype))
            return fr_error(FR_ERR_UNSUPPORTED, "labels input '%s' is %s; it needs int64 or int32",
                            v->name, fr_dtype_name(v->dtype));
    }
    return FR_OK;
}

static void put(fr_tensor *t, int64_t i, int64_t v)
{
    switch (t->dtype) {
    case FR_I64: ((int64_t *)t->data)[i] = v; break;
    case FR_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case FR_F32: ((float *)t->data)[i] = (float)v; break;
    case FR_F64: ((double *)t->data)[i] = (double)v; break;
    case FR_BOOL: case FR_U8: ((uint8_t *)t->data)[i] = (uint8_t)(v != 0 ? (v & 0xff) : 0); break;
    case FR_I8: ((int8_t *)t->data)[i] = (int8_t)v; break;
    default: break;
    }
}

fr_status tr_fill_inputs(fr_trainer *t, tr_input *ins, int n, const int64_t *windows)
{
    const int64_t B = t->opt.batch, T = t->opt.seq_len, V = t->vocab;
    float weight = 1.0f;
    if (t->opt.sft) FR_TRY(tr_sft_micro(t, windows, &weight));
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j <= T; j++) {
            int64_t id = windows[b * (T + 1) + j];
            if (id < 0 || (V > 0 && id >= V) || (t->tokens_dtype == FR_I32 && id > INT32_MAX))
                return fr_error(FR_ERR_RANGE,
                                "token id %lld (window %lld, position %lld) is outside the model's "
                                "vocabulary [0, %lld)",
                                (long long)id, (long long)b, (long long)j, (long long)V);
        }
    for (int i = 0; i < n; i++) {
        fr_tensor *x = ins[i].t;
        if (ins[i].feed == TR_FEED_DROPOUT_KEY) {
            /* The micro-batch counts up within a step. Data-parallel rank r's micro-batch m reads
             * the global window chunk m*W + r (fr_dist_split_windows), so it keys its masks as
             * that chunk: N GPUs draw the masks one GPU with N times the accumulation would. */
            int64_t *k = x->data;
            int64_t W = t->opt.world_size > 0 ? t->opt.world_size : 1, r = t->opt.world_size > 0 ? t->opt.rank : 0;
            k[2] = k[1] == t->step ? k[2] + W : r;
            k[0] = (int64_t)t->opt.seed;
            k[1] = t->step;
            continue;
        }
        if (ins[i].feed == TR_FEED_LOSS_WEIGHT) {
            ((float *)x->data)[0] = weight;
            continue;
        }
        int64_t numel = fr_tensor_numel(x), last = x->rank > 0 ? x->dims[x->rank - 1] : 1;
        const int sft = t->opt.sft && numel == B * T; /* [B, T]: per example (train_sft.c) */
        for (int64_t e = 0; e < numel; e++) {
            int64_t b = e / T, j = e % T, v = 0;
            switch (ins[i].feed) {
            case TR_FEED_TOKENS: v = windows[b * (T + 1) + j]; break;
            case TR_FEED_LABELS: v = sft ? t->sft_labels[e] : windows[b * (T + 1) + j + 1]; break;
            case TR_FEED_ONES: v = 1; break;
            case TR_FEED_ARANGE: v = sft ? t->sft_pos[e] : last > 0 ? e % last : 0; break;
            case TR_FEED_SEGMENTS: v = t->sft_seg[(windows - t->sft_windows) + b * (T + 1) + j]; break;
            case TR_FEED_ZEROS: case TR_FEED_DROPOUT_KEY: case TR_FEED_LOSS_WEIGHT: v = 0; break;
            }
            put(x, e, v);
        }
    }
    return FR_OK;
}

/* ---- fused parameters ---- */

void tr_slice_copy(const fr_fp8_fused *f, const fr_fp8_slice *s, float *fused_buf, float *orig_buf,
                   int to_original)
{
    int64_t Nt = 0, K = f->K;
    for (int j = 0; j < f->n_slices; j++) Nt += f->slices[j].size;
    for (int64_t n = 0; n < s->size; n++) {
        if (f->is_bias) {
            if (to_original)
                orig_buf[n] = fused_buf[s->offset + n];
            else
                fused_buf[s->offset + n] = orig_buf[n];
            continue;
        }
        for (int64_t k = 0; k < K; k++) {
            int64_t fi = f->transB ? (s->offset + n) * K + k : k * Nt + s->offset + n;
            int64_t oi = s->transB ? n * K + k : k * s->size + n;
            if (to_original)
                orig_buf[oi] = fused_buf[fi];
            else
                fused_buf[fi] = orig_buf[oi];
        }
    }
}

fr_status tr_orig_values(fr_trainer *t, const tr_orig *o, float *dst)
{
    float *src = t->g->values[t->params[o->param].value].constant->data;
    if (o->fused)
        tr_slice_copy(o->fused, o->slice, src, dst, 1);
    else if (dst != src) /* the pristine copy's own storage, which the training copy shares */
        memcpy(dst, src, (size_t)o->numel * sizeof(float));
    return FR_OK;
}

static fr_status add_orig(fr_trainer *t, int param, const fr_fp8_fused *f, const fr_fp8_slice *s)
{
    tr_orig *no = fr_realloc_array(t->orig, (size_t)t->n_orig + 1, sizeof *no, "trainer parameters");
    if (!no) return FR_ERR_OOM;
    t->orig = no;
    tr_orig *o = &no[t->n_orig++];
    memset(o, 0, sizeof *o);
    int vid = s ? s->value : t->params[param].value;
    const fr_value *v = &t->g->values[vid];
    o->name = v->name;
    o->value = vid;
    o->param = param;
    o->fused = f;
    o->slice = s;
    o->rank = v->rank;
    memcpy(o->dims, v->dims, sizeof o->dims);
    return fr_shape_numel(v->rank, v->dims, v->name, &o->numel);
}

/* ---- the build ---- */

static fr_status build_params(fr_trainer *t, int loss)
{
    fr_graph *g = t->g;
    int n = 0;
    for (int i = 0; i < g->n_values; i++)
        if ((g->values[i].flags & FR_VAL_PARAM) && g->values[i].constant) n++;
    int *wrt = fr_malloc((size_t)(n ? n : 1) * sizeof(int), "autodiff");
    int *grads = fr_malloc((size_t)(n ? n : 1) * sizeof(int), "autodiff");
    fr_status st = (!wrt || !grads) ? FR_ERR_OOM : FR_OK;
    if (st == FR_OK) {
        n = 0;
        for (int i = 0; i < g->n_values; i++)
            if ((g->values[i].flags & FR_VAL_PARAM) && g->values[i].constant) wrt[n++] = i;
        if (t->opt.eval_only)
            for (int i = 0; i < n; i++) grads[i] = -2; /* no backward: every parameter kept */
        else
            st = fr_autodiff(g, loss, n, wrt, grads);
    }
    if (st == FR_OK) {
        t->params = fr_calloc((size_t)(n ? n : 1), sizeof *t->params, "trainer parameters");
        if (!t->params) st = FR_ERR_OOM;
    }
    for (int i = 0; st == FR_OK && i < n; i++) {
        if (grads[i] == -1) continue; /* does not influence the loss: left alone, as torch does */
        tr_param *p = &t->params[t->n_params++];
        p->value = wrt[i];
        p->grad_value = grads[i];
        p->fused = -1;
        st = fr_shape_numel(g->values[wrt[i]].rank, g->values[wrt[i]].dims, g->values[wrt[i]].name, &p->numel);
        for (int f = 0; st == FR_OK && t->has_report && f < t->report.n_fused; f++)
            if (t->report.fused[f].value == wrt[i]) p->fused = f;
    }
    if (st == FR_OK && t->n_params == 0)
        st = fr_error(FR_ERR_INVALID_ARG, "none of the %d trained parameters influences the loss", n);
    free(wrt);
    free(grads);
    return st;
}

static fr_status build_optimizer(fr_trainer *t)
{
    fr_graph *g = t->g;
    fr_opt_param *ps = fr_calloc((size_t)t->n_params, sizeof *ps, "optimizer parameters");
    if (!ps) return FR_ERR_OOM;
    fr_status st = FR_OK;
    for (int i = 0; i < t->n_params && st == FR_OK; i++) {
        tr_param *p = &t->params[i];
        const fr_value *v = &g->values[p->value];
        p->acc = t->opt.eval_only ? NULL : fr_calloc((size_t)(p->numel ? p->numel : 1), sizeof(float), v->name);
        if (!p->acc && !t->opt.eval_only) {
            st = FR_ERR_OOM;
            break;
        }
        ps[i].name = v->name;
        ps[i].data = v->constant->data;
        ps[i].grad = p->acc;
        ps[i].rank = v->rank;
        memcpy(ps[i].dims, v->dims, sizeof ps[i].dims);
        ps[i].decay = FR_DECAY_AUTO;
    }
    fr_opt_config oc = t->opt.opt;
    oc.sr_seed = t->opt.seed; /* bf16 master weights: stochastic rounding keyed by the run's seed */
    if (st == FR_OK && !t->opt.eval_only) st = fr_optimizer_create(&oc, ps, t->n_params, &t->optim);
    free(ps);
    for (int i = 0; st == FR_OK && i < t->n_params; i++) {
        const tr_param *p = &t->params[i];
        if (p->fused < 0) {
            st = add_orig(t, i, NULL, NULL);
            continue;
        }
        const fr_fp8_fused *f = &t->report.fused[p->fused];
        for (int s = 0; st == FR_OK && s < f->n_slices; s++) st = add_orig(t, i, f, &f->slices[s]);
    }
    return st;
}

static fr_status build_states(fr_trainer *t)
{
    if (!t->has_report || t->report.n_states == 0) return FR_OK;
    t->states = fr_calloc((size_t)t->report.n_states, sizeof *t->states, "fp8 scaling state");
    if (!t->states) return FR_ERR_OOM;
    for (int i = 0; i < t->report.n_states; i++) {
        tr_state *s = &t->states[t->n_states++];
        s->st = &t->report.states[i];
        s->amax_out = -1;
        fr_fp8_scaling_params sp;
        fr_fp8_scaling_params_default(&sp);
        sp.history_len = t->opt.fp8.amax_history_len;
        sp.algo = t->opt.fp8.amax_algo;
        sp.margin = t->opt.fp8.margin;
        sp.interval = t->opt.fp8.interval;
        sp.fmt = s->st->fmt;
        FR_TRY(fr_fp8_scaling_init(&s->sc, &sp));
        if (i < t->n_init_states && t->init_states[i].p.history_len == sp.history_len) {
            const fr_fp8_scaling *in = &t->init_states[i]; /* recorded in the compiled graph */
            memcpy(s->sc.history, in->history, (size_t)sp.history_len * sizeof(float));
            s->sc.pos = in->pos;
            s->sc.updates = in->updates;
            s->sc.scale = in->scale;
            s->sc.scale_inv = in->scale_inv;
        }
        s->step_scale = s->sc.scale;
        if (s->st->amax_value >= 0 && !t->opt.eval_only) FR_TRY(add_output(t->g, s->st->amax_value, &s->amax_out));
    }
    return FR_OK;
}

/* The eval graph: a copy of the forward + loss graph borrowing every constant of the training
 * graph, whose outputs are the loss and the model's own outputs. */
static fr_status build_eval_graph(fr_trainer *t, int loss)
{
    fr_graph *g = t->g;
    int *saved = NULL, n_saved = g->n_outputs, idx;
    if (n_saved) {
        saved = fr_malloc((size_t)n_saved * sizeof(int), "eval graph");
        if (!saved) return FR_ERR_OOM;
        memcpy(saved, g->outputs, (size_t)n_saved * sizeof(int));
    }
    reset_outputs(g);
    fr_status st = add_output(g, loss, &t->eval_loss_out);
    t->model_outputs = fr_calloc((size_t)(n_saved ? n_saved : 1), sizeof(char *), "eval graph");
    if (st == FR_OK && !t->model_outputs) st = FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < n_saved; i++) {
        if (saved[i] == loss) continue;
        st = add_output(g, saved[i], &idx);
        if (st == FR_OK) {
            t->model_outputs[t->n_model_outputs] = fr_strdup(g->values[saved[i]].name, "eval graph");
            if (!t->model_outputs[t->n_model_outputs++]) st = FR_ERR_OOM;
        }
    }
    free(saved);
    if (st == FR_OK) st = fr_train_clone_graph(g, 1, &t->eval_g);
    int n_dropouts;
    if (st == FR_OK) st = fr_dropout_strip(t->eval_g, &n_dropouts); /* evaluation has no dropout */
    if (st == FR_OK) st = dce(t->eval_g);
    reset_outputs(g);
    return st;
}

/* The pipeline's options (passes/pipeline.h), by their names in fr_train_options. */
fr_status tr_pass_option(const void *opts, const char *name, int *on)
{
    static const struct { const char *name; size_t off; } k_flags[] = {
        {"unshare", offsetof(fr_train_options, unshare)},
        {"retie", offsetof(fr_train_options, retie)},
#define FR_OPT(...)
#define FR_OPT_PLAIN(field, ...) {#field, offsetof(fr_train_options, field)},
#include "runtime/train/train_config.def"
#undef FR_OPT
#undef FR_OPT_PLAIN
    };
    const fr_train_options *o = opts;
    if (strcmp(name, "lora") == 0) {
        *on = o->lora.rank > 0;
        return FR_OK;
    }
    if (strcmp(name, "precision") == 0) { /* fp32 is not rewritten */
        *on = strcmp(o->precision, "fp32") != 0;
        return FR_OK;
    }
    if (strcmp(name, "chunked_lm_head") == 0) {
        *on = o->chunked_lm_head;
        return FR_OK;
    }
    if (strcmp(name, "recompute") == 0) {
        *on = o->recompute && strcmp(o->recompute, "none") != 0;
        return FR_OK;
    }
    if (strcmp(name, "fuse_residual_norm") == 0) { /* recompute finds its regions from the residual Adds */
        *on = o->fuse_residual_norm && (!o->recompute || strcmp(o->recompute, "none") == 0);
        return FR_OK;
    }
    for (size_t i = 0; i < sizeof k_flags / sizeof k_flags[0]; i++)
        if (strcmp(name, k_flags[i].name) == 0) {
            *on = *(const int *)((const char *)o + k_flags[i].off) != 0;
            return FR_OK;
        }
    return fr_error(FR_ERR_INTERNAL, "the pipeline's option '%s' is not a trainer option", name);
}

fr_status tr_build_forward(fr_trainer *t, const fr_graph *model, int *tok_out, int *loss_out, int *logits_out)
{
    fr_graph *g;
    /* the pipeline's passes see this, never the trainer */
    fr_pass_ctx pc = {.opts = &t->opt, .option = tr_pass_option, .train_regex = t->opt.train_regex,
                      .freeze_regex = t->opt.freeze_regex, .dims = t->dims, .n_dims = t->opt.n_dims,
                      .fp8 = t->opt.fp8, .report = &t->report, .compiled = &t->has_report, .ties = &t->ties,
                      .n_ties = &t->n_ties, .n_unshared = &t->n_unshared, .results = &t->passes,
                      .lora = &t->opt.lora, .rng = &t->rng, .lora_out = &t->lora};
    fr_prng_seed(&t->rng, t->opt.seed); /* LoRA's A draws from it (seeded again for the data) */
    pc.fp8.precision = t->opt.precision;
    if (t->opt.lora.rank > 0) { /* the adapters' GEMMs stay bf16 (tiny, and trained from zero) */
        const char *ad = "\\.lora_[AB]\\.weight$", *user = t->opt.fp8.fp8_exclude;
        size_t n = strlen(ad) + (user ? strlen(user) : 0) + 8;
        t->s_lora_exclude = fr_malloc(n, "trainer options");
        if (!t->s_lora_exclude) return FR_ERR_OOM;
        snprintf(t->s_lora_exclude, n, user ? "(%s)|%s" : "%.0s%s", user ? user : "", ad);
        pc.fp8.fp8_exclude = t->s_lora_exclude;
        pc.fp8.frozen_linears = 1; /* the frozen base runs in fp8 / bf16 too */
    }
    FR_TRY(fr_train_clone_graph(model, 0, &t->pristine));
    pc.g = t->pristine;
    FR_TRY(fr_pipeline_run(&pc, FR_STAGE_MODEL));
    /* The training copy borrows the pristine copy's initializers: the passes put what they
       change (folds, fused parameters) in tensors of their own, so the two share every weight
       the training leaves alone and every trained one (export writes the trained values into
       the pristine copy: for these they are already there). A copy of its own cost the model's
       size again in host memory, for the whole run (32 GB at 8B in float32). */
    FR_TRY(fr_train_clone_graph(t->pristine, 1, &t->g));
    pc.g = g = t->g;
    if (model->source_path) {
        t->model_path = fr_strdup(model->source_path, "trainer");
        if (!t->model_path) return FR_ERR_OOM;
    }

    /* inputs: the tokens, then every other input must be one we can feed */
    int tok;
    FR_TRY(find_tokens_input(t, g, &tok));
    t->tokens_dtype = g->values[tok].dtype;
    fr_input_shape *shapes = fr_calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof *shapes, "input shapes");
    if (!shapes) return FR_ERR_OOM;
    int n_shapes = 0;
    fr_status st = FR_OK;
    for (int i = 0; i < g->n_inputs && st == FR_OK; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        tr_feed feed;
        if (g->inputs[i] != tok) st = classify_input(t, v, g->values[tok].name, &feed);
        /* the masks read from an input fed all ones keep every key: the attention fusion then
           drops their padding part (plain causal attention, no segment input) */
        if (st == FR_OK && g->inputs[i] != tok && feed == TR_FEED_ONES) g->values[g->inputs[i]].flags |= FR_VAL_ONES;
        if (st == FR_OK) feed_shape(t, v, &shapes[n_shapes++]);
    }
    /* the tokens first: its symbolic dims fix the others' */
    for (int i = 0; i < n_shapes; i++)
        if (strcmp(shapes[i].name, g->values[tok].name) == 0 && i > 0) {
            fr_input_shape tmp = shapes[0];
            shapes[0] = shapes[i];
            shapes[i] = tmp;
        }
    int loss_vid = -1;
    if (st == FR_OK && t->opt.loss_output) {
        loss_vid = fr_graph_find_value(g, t->opt.loss_output);
        if (loss_vid < 0)
            st = fr_error(FR_ERR_INVALID_ARG, "the model has no value named '%s' (loss output)", t->opt.loss_output);
        else if (!(g->values[loss_vid].flags & FR_VAL_OUTPUT))
            st = add_output(g, loss_vid, &(int){0});
    }
    if (st == FR_OK && t->opt.logits_output && !t->opt.loss_output) {
        int lv = fr_graph_find_value(g, t->opt.logits_output);
        if (lv < 0)
            st = fr_error(FR_ERR_INVALID_ARG, "the model has no value named '%s' (logits output)", t->opt.logits_output);
        else if (!(g->values[lv].flags & FR_VAL_OUTPUT))
            st = add_output(g, lv, &(int){0});
    }
    /* the imported graph's passes, from choosing the trained parameters to preparation */
    pc.input_shapes = shapes;
    pc.n_input_shapes = n_shapes;
    if (st == FR_OK) st = fr_pipeline_run(&pc, FR_STAGE_IMPORTED);
    pc.input_shapes = NULL;
    free(shapes);
    FR_TRY(st);

    /* the loss */
    int logits = -1;
    FR_TRY(pick_loss(t, g, tok, loss_vid, &logits));

    /* the prepared graph's passes: fusions and the FP8 compiler (passes/pipeline.c says the
       order and why) */
    FR_TRY(fr_pipeline_run(&pc, FR_STAGE_PREPARED));
    if (logits >= 0) logits = fr_graph_find_value(g, t->logits_name);
    *tok_out = tok;
    *loss_out = loss_vid;
    *logits_out = logits;
    return FR_OK;
}

/* ---- compiled graph files ---- */

static fr_status build_rest(fr_trainer *t, int tok, int loss, int logits);

static fr_status build_compiled(fr_trainer *t, const fr_graph *model)
{
    const char *path = model->source_path ? model->source_path : "<compiled graph>";
    fr_fbs f;
    FR_TRY(fr_fbs_decode(model, path, &f));
    fr_status st = tr_adopt_spec(t, &f.spec, path);
    if (st == FR_OK) {
        t->g = f.graph;
        t->pristine = f.original;
        t->report = f.report;
        t->has_report = 1;
        t->init_states = f.states;
        t->n_init_states = f.n_states;
        t->ties = f.spec.ties; /* re-tied at compile time: export and checkpoints follow them */
        t->n_ties = f.spec.n_ties;
        f.spec.ties = NULL;
        f.spec.n_ties = 0;
        f.graph = f.original = NULL;
        f.states = NULL;
        f.n_states = 0;
        memset(&f.report, 0, sizeof f.report);
    }
    fr_fbs_free(&f);
    FR_TRY(st);
    if (model->source_path) {
        t->model_path = fr_strdup(model->source_path, "trainer");
        if (!t->model_path) return FR_ERR_OOM;
    }
    fr_graph *g = t->g;
    if (t->opt.train_regex || t->opt.freeze_regex) FR_TRY(tr_narrow_params(t, g));
    int tok, loss = -1, logits = -1;
    FR_TRY(find_tokens_input(t, g, &tok));
    t->tokens_dtype = g->values[tok].dtype;
    if (t->opt.loss_output) {
        loss = fr_graph_find_value(g, t->opt.loss_output);
        if (loss < 0)
            return fr_error(FR_ERR_INVALID_ARG, "the compiled graph has no value named '%s' (loss output)", t->opt.loss_output);
    }
    FR_TRY(pick_loss(t, g, tok, loss, &logits));
    return build_rest(t, tok, loss, logits);
}

/* FP8 Linears of the current / block recipes get amax_x / amax_w outputs (the compile pass
 * gives them to the delayed recipe only), so fr_trainer_fp8_stats can report them. */
static fr_status expose_amaxes(fr_trainer *t)
{
    fr_graph *g = t->g;
    if (t->opt.eval_only) return FR_OK; /* no steps, no statistics */
    for (int li = 0; t->has_report && li < t->report.n_layers; li++) {
        const fr_fp8_layer *L = &t->report.layers[li];
        if (L->precision != FR_LIN_FP8 || L->recipe == FR_LIN_DELAYED) continue;
        int nid = -1;
        for (int i = 0; i < g->n_nodes && nid < 0; i++)
            if (!g->nodes[i].dead && strcmp(g->nodes[i].name, L->name) == 0 && strcmp(g->nodes[i].op_type, "Linear") == 0) nid = i;
        if (nid < 0) return fr_error(FR_ERR_INTERNAL, "fp8 layer '%s' has no Linear node", L->name);
        fr_node *n = &g->nodes[nid];
        if (n->n_outputs >= FR_LIN_N_OUT) continue;
        int *no = fr_realloc_array(n->outputs, FR_LIN_N_OUT, sizeof(int), "Linear outputs");
        if (!no) return FR_ERR_OOM;
        n->outputs = no;
        for (int o = n->n_outputs; o < FR_LIN_N_OUT; o++) no[o] = -1;
        n->n_outputs = FR_LIN_N_OUT;
        const char *prefix = L->state_prefix ? L->state_prefix : L->name;
        const char *what[2] = {"amax_x", "amax_w"};
        for (int k = 0; k < 2; k++) {
            char nm[1200];
            int vid;
            snprintf(nm, sizeof nm, "%s/%s", prefix, what[k]);
            FR_TRY(fr_graph_add_unique_value(g, nm, &vid));
            g->nodes[nid].outputs[FR_LIN_OUT_AMAX_X + k] = vid;
            g->values[vid].producer = nid;
            tr_watch *nw = fr_realloc_array(t->watch, (size_t)t->n_watch + 1, sizeof *nw, "fp8 amax watch");
            if (!nw) return FR_ERR_OOM;
            t->watch = nw;
            nw[t->n_watch++] = (tr_watch){li, k ? FR_FP8_OPERAND_W : FR_FP8_OPERAND_X, vid, -1, 0.0f};
        }
        FR_TRY(fr_node_infer(g, nid));
    }
    return FR_OK;
}

fr_status tr_build(fr_trainer *t, const fr_graph *model)
{
    if (fr_fbs_is_compiled(model)) return build_compiled(t, model);
    int tok, loss, logits;
    FR_TRY(tr_build_forward(t, model, &tok, &loss, &logits));
    return build_rest(t, tok, loss, logits);
}

/* From the compiled forward graph on: amax outputs, loss head, eval graph, backward, outputs,
 * executor, optimizer, scaling state, input buffers. */
static fr_status build_rest(fr_trainer *t, int tok, int loss, int logits)
{
    fr_graph *g = t->g;
    FR_TRY(expose_amaxes(t));
    int labels = -1;
    if (t->opt.sft) FR_TRY(tr_sft_wire(t, g));
    if (!t->opt.loss_output) FR_TRY(add_loss_head(t, g, logits, &loss, &labels));
    if (t->opt.sft) FR_TRY(tr_sft_weight(t, g, &loss));
    if (t->opt.sft) FR_TRY(tr_sft_alloc(t));
    t->loss_name = fr_strdup(g->values[loss].name, "trainer");
    if (!t->loss_name) return FR_ERR_OOM;

    FR_TRY(build_eval_graph(t, loss));

    /* backward; outputs: loss, gradients, amaxes */
    FR_TRY(add_output(g, loss, &t->loss_out));
    int n_forward = g->n_nodes;
    FR_TRY(build_params(t, loss));
    if (!t->opt.eval_only) {
        for (int i = 0; i < t->n_params; i++)
            FR_TRY(add_output(g, t->params[i].grad_value, &t->params[i].grad_out));
        if (t->has_report) FR_TRY(fr_fp8_report_bind(g, &t->report, 1));
        for (int i = 0; i < t->n_watch; i++) FR_TRY(add_output(g, t->watch[i].value, &t->watch[i].amax_out));
    }
    FR_TRY(build_states(t));
    if (!t->opt.eval_only) {
        /* the passes on the backward (passes/pipeline.c) */
        fr_pass_ctx pc = {.g = g, .opts = &t->opt, .option = tr_pass_option, .n_forward = n_forward,
                          .recompute = t->opt.recompute, .results = &t->passes};
        FR_TRY(fr_pipeline_run(&pc, FR_STAGE_DIFFERENTIATED));
        FR_TRY(dce(g)); /* the backend's executors are built on it (runtime/train/train_backend.h) */
        FR_TRY(fr_train_host_memory_check(t)); /* CPU: the plan against the host's memory (train_memory.h) */
    }
    if (!t->opt.plan_only) FR_TRY(build_optimizer(t));

    const char *tokens = g->values[tok].name;
    const char *lname = labels >= 0 ? g->values[labels].name : NULL;
    FR_TRY(make_inputs(t, g, tokens, lname, &t->inputs, &t->n_inputs));
    FR_TRY(make_inputs(t, t->eval_g, tokens, lname, &t->eval_inputs, &t->n_eval_inputs));
    fr_prng_seed(&t->rng, t->opt.seed);
    t->stats_step = -1;
    return FR_OK;
}
