/* Writing compiled graph files (.fbs; the layout is described in fbs.h). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/base64.h"
#include "graph/onnx_io.h"
#include "runtime/io/fbs.h"

/* ---- metadata being built ---- */

typedef struct kvlist {
    fr_kv *kv;
    int n, cap;
} kvlist;

static fr_status kv_put_owned(kvlist *l, char *key, char *value)
{
    if (!key || !value) {
        free(key);
        free(value);
        return FR_ERR_OOM;
    }
    if (l->n == l->cap) {
        int ncap = l->cap ? l->cap * 2 : 64;
        fr_kv *nk = fr_realloc_array(l->kv, (size_t)ncap, sizeof *nk, "fbs metadata");
        if (!nk) {
            free(key);
            free(value);
            return FR_ERR_OOM;
        }
        l->kv = nk;
        l->cap = ncap;
    }
    l->kv[l->n].key = key;
    l->kv[l->n++].value = value;
    return FR_OK;
}

static char *vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (k < 0) return NULL;
    char *s = fr_malloc((size_t)k + 1, "fbs metadata");
    if (s) vsnprintf(s, (size_t)k + 1, fmt, ap);
    return s;
}

/* key (printf-formatted) = value (copied) */
static fr_status kv_str(kvlist *l, const char *value, const char *kfmt, ...) __attribute__((format(printf, 3, 4)));
static fr_status kv_str(kvlist *l, const char *value, const char *kfmt, ...)
{
    va_list ap;
    va_start(ap, kfmt);
    char *key = vformat(kfmt, ap);
    va_end(ap);
    return kv_put_owned(l, key, fr_strdup(value ? value : "", "fbs metadata"));
}

static fr_status kv_int(kvlist *l, int64_t value, const char *kfmt, ...) __attribute__((format(printf, 3, 4)));
static fr_status kv_int(kvlist *l, int64_t value, const char *kfmt, ...)
{
    va_list ap;
    va_start(ap, kfmt);
    char *key = vformat(kfmt, ap);
    va_end(ap);
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, value);
    return kv_put_owned(l, key, fr_strdup(num, "fbs metadata"));
}

static void kv_free(kvlist *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->kv[i].key);
        free(l->kv[i].value);
    }
    free(l->kv);
    memset(l, 0, sizeof *l);
}

static const char *operand_name(fr_fp8_operand o) { return o == FR_FP8_OPERAND_X ? "x" : o == FR_FP8_OPERAND_W ? "w" : "dy"; }

/* ---- the compiled part ---- */

static fr_status put_options(kvlist *l, const fr_fbs_spec *s, const fr_fp8_report *r)
{
    FR_TRY(kv_int(l, FR_FBS_FORMAT, FR_FBS_FORMAT_KEY));
    FR_TRY(kv_int(l, s->batch, "fp8run.batch"));
    FR_TRY(kv_int(l, s->seq, "fp8run.seq"));
    FR_TRY(kv_str(l, s->tokens_input, "fp8run.tokens_input"));
    /* the options as the report applied them (the report is what the graph was built with) */
    FR_TRY(kv_str(l, fr_lin_precision_name(r->precision), "fp8run.option.precision"));
    FR_TRY(kv_str(l, fr_lin_recipe_name(r->recipe), "fp8run.option.recipe"));
    FR_TRY(kv_str(l, r->e4m3_only ? "e4m3" : "hybrid", "fp8run.option.fp8_format"));
    FR_TRY(kv_int(l, r->bf16_boundary, "fp8run.option.bf16_boundary"));
    if (r->fp8_exclude) FR_TRY(kv_str(l, r->fp8_exclude, "fp8run.option.fp8_exclude"));
    FR_TRY(kv_int(l, r->fuse, "fp8run.option.fuse"));
    FR_TRY(kv_int(l, r->pad_multiple, "fp8run.option.pad_multiple"));
    FR_TRY(kv_int(l, r->margin, "fp8run.option.margin"));
    FR_TRY(kv_int(l, r->amax_history_len, "fp8run.option.amax_history"));
    FR_TRY(kv_str(l, fr_amax_algo_name(r->amax_algo), "fp8run.option.amax_algo"));
    FR_TRY(kv_int(l, r->interval, "fp8run.option.interval"));
    if (s->logits_output) FR_TRY(kv_str(l, s->logits_output, "fp8run.option.logits_output"));
    if (s->loss_output) FR_TRY(kv_str(l, s->loss_output, "fp8run.option.loss_output"));
    if (s->train_regex) FR_TRY(kv_str(l, s->train_regex, "fp8run.option.train"));
    if (s->freeze_regex) FR_TRY(kv_str(l, s->freeze_regex, "fp8run.option.freeze"));
    FR_TRY(kv_int(l, s->n_dims, "fp8run.dims"));
    for (int i = 0; i < s->n_dims; i++) {
        FR_TRY(kv_str(l, s->dims[i].name, "fp8run.dim.%d.name", i));
        FR_TRY(kv_int(l, s->dims[i].value, "fp8run.dim.%d.value", i));
    }
    return FR_OK;
}

static fr_status put_ties(kvlist *l, const fr_graph *cg, const fr_fbs_spec *s)
{
    FR_TRY(kv_int(l, s->n_ties, "fp8run.ties"));
    for (int i = 0; i < s->n_ties; i++) {
        const fr_tie *t = &s->ties[i];
        if (t->copy < 0 || t->copy >= cg->n_values || t->source < 0 || t->source >= cg->n_values)
            return fr_error(FR_ERR_INTERNAL, "fbs: tie %d has no values in the compiled graph", i);
        FR_TRY(kv_str(l, cg->values[t->copy].name, "fp8run.tie.%d.copy", i));
        FR_TRY(kv_str(l, cg->values[t->source].name, "fp8run.tie.%d.source", i));
        FR_TRY(kv_int(l, t->transposed, "fp8run.tie.%d.transposed", i));
    }
    return FR_OK;
}

static fr_status put_report(kvlist *l, const fr_fp8_report *r)
{
    FR_TRY(kv_int(l, r->n_layers, "fp8run.layers"));
    for (int i = 0; i < r->n_layers; i++) {
        const fr_fp8_layer *L = &r->layers[i];
        FR_TRY(kv_str(l, L->name, "fp8run.layer.%d.name", i));
        FR_TRY(kv_str(l, L->weights, "fp8run.layer.%d.weights", i));
        FR_TRY(kv_str(l, L->sources, "fp8run.layer.%d.sources", i));
        FR_TRY(kv_int(l, L->n_fused, "fp8run.layer.%d.n_fused", i));
        FR_TRY(kv_int(l, L->K, "fp8run.layer.%d.K", i));
        FR_TRY(kv_int(l, L->N, "fp8run.layer.%d.N", i));
        FR_TRY(kv_int(l, L->transB, "fp8run.layer.%d.transB", i));
        FR_TRY(kv_int(l, L->has_bias, "fp8run.layer.%d.has_bias", i));
        FR_TRY(kv_str(l, fr_lin_precision_name(L->precision), "fp8run.layer.%d.precision", i));
        FR_TRY(kv_str(l, fr_lin_recipe_name(L->recipe), "fp8run.layer.%d.recipe", i));
        FR_TRY(kv_str(l, L->why, "fp8run.layer.%d.why", i));
        FR_TRY(kv_int(l, L->pad_multiple, "fp8run.layer.%d.pad_multiple", i));
        FR_TRY(kv_int(l, L->pad_k, "fp8run.layer.%d.pad_k", i));
        FR_TRY(kv_int(l, L->pad_n, "fp8run.layer.%d.pad_n", i));
        if (L->state_prefix) FR_TRY(kv_str(l, L->state_prefix, "fp8run.layer.%d.state_prefix", i));
    }
    FR_TRY(kv_int(l, r->n_skipped, "fp8run.skipped"));
    for (int i = 0; i < r->n_skipped; i++) {
        const fr_fp8_skip *s = &r->skipped[i];
        FR_TRY(kv_str(l, s->node, "fp8run.skip.%d.node", i));
        FR_TRY(kv_str(l, s->op_type, "fp8run.skip.%d.op_type", i));
        FR_TRY(kv_str(l, s->weight, "fp8run.skip.%d.weight", i));
        FR_TRY(kv_str(l, s->reason, "fp8run.skip.%d.reason", i));
    }
    FR_TRY(kv_int(l, r->n_fused, "fp8run.fused"));
    for (int i = 0; i < r->n_fused; i++) {
        const fr_fp8_fused *f = &r->fused[i];
        FR_TRY(kv_str(l, f->name, "fp8run.fused.%d.name", i));
        FR_TRY(kv_int(l, f->is_bias, "fp8run.fused.%d.is_bias", i));
        FR_TRY(kv_int(l, f->transB, "fp8run.fused.%d.transB", i));
        FR_TRY(kv_int(l, f->K, "fp8run.fused.%d.K", i));
        FR_TRY(kv_int(l, f->n_slices, "fp8run.fused.%d.slices", i));
        for (int j = 0; j < f->n_slices; j++) {
            const fr_fp8_slice *s = &f->slices[j];
            char dims[64];
            if (s->rank == 2)
                snprintf(dims, sizeof dims, "%" PRId64 ",%" PRId64, s->dims[0], s->dims[1]);
            else
                snprintf(dims, sizeof dims, "%" PRId64, s->dims[0]);
            FR_TRY(kv_str(l, s->name, "fp8run.fused.%d.slice.%d.name", i, j));
            FR_TRY(kv_int(l, s->offset, "fp8run.fused.%d.slice.%d.offset", i, j));
            FR_TRY(kv_int(l, s->size, "fp8run.fused.%d.slice.%d.size", i, j));
            FR_TRY(kv_int(l, s->transB, "fp8run.fused.%d.slice.%d.transB", i, j));
            FR_TRY(kv_int(l, s->rank, "fp8run.fused.%d.slice.%d.rank", i, j));
            FR_TRY(kv_str(l, dims, "fp8run.fused.%d.slice.%d.dims", i, j));
        }
    }
    return FR_OK;
}

/* Is value vid read by a live node or a graph output? */
static unsigned char *used_marks(const fr_graph *g)
{
    unsigned char *used = fr_calloc((size_t)g->n_values + 1, 1, "fbs export marks");
    if (!used) return NULL;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) used[n->inputs[k]] = 1;
    }
    for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]] = 1;
    return used;
}

/* A new initializer `name` holding t (taken) in graph c. */
static fr_status add_init(fr_graph *c, const char *name, fr_tensor *t)
{
    int vid;
    fr_status st = fr_graph_add_value(c, name, &vid);
    if (st == FR_OK) return fr_graph_set_initializer(c, vid, t);
    fr_tensor_free(t);
    return st;
}

/* The scaling state: scales into the graph's own state values (replacing the borrowed
 * tensors), history and counters as extra initializers, the states table as metadata. */
static fr_status put_states(kvlist *l, fr_graph *c, const fr_fp8_report *r, const fr_fbs_spec *spec,
                            const fr_fp8_scaling *states)
{
    FR_TRY(kv_int(l, r->n_states, "fp8run.states"));
    for (int i = 0; i < r->n_states; i++) {
        const fr_fp8_state *s = &r->states[i];
        const fr_fp8_scaling *sc = states ? &states[i] : NULL;
        if (s->scale_value < 0 || s->scale_value >= c->n_values || !c->values[s->scale_value].constant)
            return fr_error(FR_ERR_INTERNAL, "fbs: scale of '%s' is not in the compiled graph", s->amax_name);
        fr_value *sv = &c->values[s->scale_value];
        FR_TRY(kv_int(l, s->layer, "fp8run.state.%d.layer", i));
        FR_TRY(kv_str(l, operand_name(s->operand), "fp8run.state.%d.operand", i));
        FR_TRY(kv_str(l, s->fmt == FR_F8E5M2 ? "e5m2" : "e4m3", "fp8run.state.%d.format", i));
        FR_TRY(kv_str(l, sv->name, "fp8run.state.%d.scale", i));
        FR_TRY(kv_str(l, s->amax_name, "fp8run.state.%d.amax", i));
        int64_t H = sc ? sc->p.history_len : spec->fp8.amax_history_len, two = 2;
        fr_tensor *scale, *hist, *cnt;
        FR_TRY(fr_tensor_new(FR_F32, 1, &(int64_t){1}, sv->name, &scale));
        ((float *)scale->data)[0] = sc ? sc->scale : 1.0f;
        fr_tensor_free(sv->constant);
        sv->constant = scale;
        char name[1400];
        snprintf(name, sizeof name, "%s/history", s->amax_name);
        FR_TRY(fr_tensor_new(FR_F32, 1, &H, name, &hist));
        if (sc) memcpy(hist->data, sc->history, (size_t)H * sizeof(float));
        FR_TRY(add_init(c, name, hist));
        snprintf(name, sizeof name, "%s/counters", s->amax_name);
        FR_TRY(fr_tensor_new(FR_I64, 1, &two, name, &cnt));
        ((int64_t *)cnt->data)[0] = sc ? sc->pos : 0;
        ((int64_t *)cnt->data)[1] = sc ? sc->updates : 0;
        FR_TRY(add_init(c, name, cnt));
    }
    return FR_OK;
}

/* The compiled graph as it goes into the file: concrete dims only, the initializers live
 * nodes read (the original members of fused parameters and constants folded away go), the
 * trainable ones listed. */
static fr_status shape_compiled(fr_graph *c, kvlist *l)
{
    for (int i = 0; i < c->n_values; i++)
        for (int d = 0; d < FR_MAX_RANK; d++) {
            free(c->values[i].dim_params[d]);
            c->values[i].dim_params[d] = NULL;
        }
    unsigned char *used = used_marks(c);
    if (!used) return FR_ERR_OOM;
    int n = 0, n_params = 0;
    for (int i = 0; i < c->n_initializers; i++) {
        int vid = c->initializers[i];
        if (used[vid]) {
            c->initializers[n++] = vid;
        } else {
            fr_tensor_free(c->values[vid].constant); /* a borrowed header: frees no data */
            c->values[vid].constant = NULL;
            c->values[vid].flags &= ~(FR_VAL_INITIALIZER | FR_VAL_PARAM);
        }
    }
    c->n_initializers = n;
    free(used);
    for (int i = 0; i < c->n_values; i++)
        if ((c->values[i].flags & FR_VAL_PARAM) && c->values[i].constant) n_params++;
    FR_TRY(kv_int(l, n_params, "fp8run.params"));
    n = 0;
    for (int i = 0; i < c->n_values; i++)
        if ((c->values[i].flags & FR_VAL_PARAM) && c->values[i].constant)
            FR_TRY(kv_str(l, c->values[i].name, "fp8run.param.%d", n++));
    return FR_OK;
}

/* ---- the original model ---- */

static const fr_fp8_slice *find_slice(const fr_fp8_report *r, const char *name, const fr_fp8_fused **f)
{
    for (int i = 0; i < r->n_fused; i++)
        for (int j = 0; j < r->fused[i].n_slices; j++)
            if (strcmp(r->fused[i].slices[j].name, name) == 0) {
                *f = &r->fused[i];
                return &r->fused[i].slices[j];
            }
    return NULL;
}

/* Does slice s of fused parameter f (in the compiled graph) hold exactly `orig`'s values? */
static fr_status slice_matches(const fr_graph *cg, const fr_fp8_fused *f, const fr_fp8_slice *s,
                               const fr_tensor *orig, int *match)
{
    *match = 0;
    const fr_tensor *ft = f->value >= 0 && f->value < cg->n_values ? cg->values[f->value].constant : NULL;
    if (!ft || ft->dtype != FR_F32 || !orig || orig->dtype != FR_F32) return FR_OK;
    int64_t Nt = 0, K = f->K, numel = fr_tensor_numel(orig);
    for (int j = 0; j < f->n_slices; j++) Nt += f->slices[j].size;
    if (numel != (f->is_bias ? s->size : s->size * K) || fr_tensor_numel(ft) != (f->is_bias ? Nt : Nt * K))
        return FR_OK;
    const float *fd = ft->data, *od = orig->data;
    for (int64_t n = 0; n < s->size; n++) {
        if (f->is_bias) {
            if (memcmp(&fd[s->offset + n], &od[n], sizeof(float)) != 0) return FR_OK;
            continue;
        }
        for (int64_t k = 0; k < K; k++) {
            int64_t fi = f->transB ? (s->offset + n) * K + k : k * Nt + s->offset + n;
            int64_t oi = s->transB ? n * K + k : k * s->size + n;
            if (memcmp(&fd[fi], &od[oi], sizeof(float)) != 0) return FR_OK;
        }
    }
    *match = 1;
    return FR_OK;
}

/* Is `orig` a (transposed) copy of a tie's source in the compiled graph? */
static int tie_matches(const fr_graph *cg, const fr_fbs_spec *spec, const char *name, const fr_tensor *orig)
{
    for (int i = 0; i < spec->n_ties; i++) {
        const fr_tie *t = &spec->ties[i];
        if (strcmp(cg->values[t->copy].name, name) != 0) continue;
        const fr_tensor *src = cg->values[t->source].constant;
        if (!src || !orig || src->dtype != FR_F32 || orig->dtype != FR_F32 || src->rank != 2 || orig->rank != 2)
            return 0;
        int64_t R = src->dims[0], C = src->dims[1];
        if (orig->dims[0] != (t->transposed ? C : R) || orig->dims[1] != (t->transposed ? R : C)) return 0;
        const float *a = src->data, *b = orig->data;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                if (memcmp(&a[r * C + c], &b[t->transposed ? c * R + r : r * C + c], sizeof(float)) != 0) return 0;
        return 1;
    }
    return 0;
}

static int same_tensor(const fr_tensor *a, const fr_tensor *b)
{
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return memcmp(a->data, b->data, a->nbytes) == 0;
}

/* The original model, base64: initializers whose values the compiled file holds (checked
 * byte for byte) become graph inputs there; the initializer order and sources go to l. */
static fr_status put_original(kvlist *l, const fr_graph *original, const fr_graph *cg, const fr_graph *c,
                              const fr_fp8_report *r, const fr_fbs_spec *spec)
{
    fr_graph *o;
    FR_TRY(fr_train_clone_graph(original, 1, &o));
    fr_status st = kv_int(l, o->n_inputs, "fp8run.original_inputs"); /* stand-ins come after */
    if (st == FR_OK) st = kv_int(l, o->n_initializers, "fp8run.original_initializers");
    int kept = 0;
    for (int i = 0; st == FR_OK && i < o->n_initializers; i++) {
        int vid = o->initializers[i];
        fr_value *v = &o->values[vid];
        const char *source = "inline";
        const fr_fp8_fused *f = NULL;
        const fr_fp8_slice *s = find_slice(r, v->name, &f);
        int cv = fr_graph_find_value(c, v->name), match = 0;
        if (s) {
            st = slice_matches(cg, f, s, v->constant, &match);
            if (match) source = "fused";
        } else if (cv >= 0 && (c->values[cv].flags & FR_VAL_INITIALIZER) && same_tensor(c->values[cv].constant, v->constant)) {
            source = "compiled";
        } else if (tie_matches(cg, spec, v->name, v->constant)) {
            source = "tied";
        }
        if (st == FR_OK) st = kv_str(l, v->name, "fp8run.original_init.%d.name", i);
        if (st == FR_OK) st = kv_str(l, source, "fp8run.original_init.%d.source", i);
        if (st != FR_OK) break;
        if (strcmp(source, "inline") == 0) {
            o->initializers[kept++] = vid;
            continue;
        }
        /* moved out: a typed graph input stands in for it, so the text stays importable */
        fr_tensor_free(v->constant); /* borrowed header */
        v->constant = NULL;
        v->flags &= ~(FR_VAL_INITIALIZER | FR_VAL_PARAM);
        st = fr_graph_mark_input(o, vid);
    }
    if (st == FR_OK) o->n_initializers = kept;
    void *bytes = NULL;
    size_t len = 0;
    char *text = NULL;
    if (st == FR_OK) st = fr_onnx_save_buffer(o, &bytes, &len);
    if (st == FR_OK) st = fr_base64_encode(bytes, len, &text, NULL);
    if (st == FR_OK) st = kv_put_owned(l, fr_strdup("fp8run.original_model", "fbs metadata"), text);
    free(bytes);
    fr_graph_free(o);
    return st;
}

fr_status fr_fbs_save(const fr_graph *compiled, const fr_fp8_report *report, const fr_graph *original,
                      const fr_fbs_spec *spec, const fr_fp8_scaling *states, const char *path)
{
    if (!compiled || !report || !original || !spec || !path)
        return fr_error(FR_ERR_INVALID_ARG, "fr_fbs_save: missing argument");
    if (!spec->tokens_input || spec->batch < 1 || spec->seq < 1)
        return fr_error(FR_ERR_INVALID_ARG, "fr_fbs_save: the spec needs the tokens input, batch and seq");
    for (int i = 0; i < original->n_metadata; i++)
        if (strcmp(original->metadata[i].key, FR_FBS_FORMAT_KEY) == 0)
            return fr_error(FR_ERR_INVALID_ARG, "fr_fbs_save: the original model is itself a compiled graph");
    fr_graph *c;
    kvlist l = {0};
    FR_TRY(fr_train_clone_graph(compiled, 1, &c));
    /* the model's own metadata stays; fp8run's keys follow */
    fr_status st = FR_OK;
    for (int i = 0; st == FR_OK && i < c->n_metadata; i++)
        if (strncmp(c->metadata[i].key, "fp8run.", 7) != 0)
            st = kv_str(&l, c->metadata[i].value, "%s", c->metadata[i].key);
    if (st == FR_OK) st = put_options(&l, spec, report);
    if (st == FR_OK) st = shape_compiled(c, &l);
    if (st == FR_OK) st = put_report(&l, report);
    if (st == FR_OK) st = put_ties(&l, compiled, spec);
    if (st == FR_OK) st = put_states(&l, c, report, spec, states);
    if (st == FR_OK) st = put_original(&l, original, compiled, c, report, spec);
    if (st == FR_OK) {
        for (int i = 0; i < c->n_metadata; i++) {
            free(c->metadata[i].key);
            free(c->metadata[i].value);
        }
        free(c->metadata);
        c->metadata = l.kv;
        c->n_metadata = l.n;
        memset(&l, 0, sizeof l);
        st = fr_train_save_model(c, path);
    }
    kv_free(&l);
    fr_graph_free(c);
    if (st != FR_OK && !strstr(fr_last_error(), path)) st = fr_error_context(st, "writing compiled graph '%s'", path);
    return st;
}
