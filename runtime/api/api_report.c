/* Public API: the FP8 compiler's report, as a self-contained copy (so it outlives the session
 * or the dry-run compile it came from), and fp8run_model_compile, the dry run. */
#include <stdlib.h>
#include <string.h>

#include "passes/fast_path.h"
#include "runtime/api/api_internal.h"
#include "runtime/train/train_internal.h"

#define LAYER_V1_SIZE sizeof(fp8run_layer_info)
#define SKIPPED_V1_SIZE sizeof(fp8run_skipped_info)
#define STATE_V1_SIZE sizeof(fp8run_scaling_info)
#define COMPILED_V1_SIZE sizeof(fp8run_compiled_info)
#define PASS_V1_SIZE sizeof(fp8run_pass_info)

/* What a compiled graph records besides its report (fp8run_compiled_info's arrays). */
typedef struct report_fbs {
    fp8run_compiled_info info;
    char *tokens_input, *train_regex, *freeze_regex;
    char **dim_names;
    int64_t *dim_values;
    char **tie_copies, **tie_sources;
    int *tie_transposed;
} report_fbs;

struct fp8run_report {
    char *precision;
    char *text;
    fp8run_layer_info *layers;
    int n_layers;
    fp8run_skipped_info *skipped;
    int n_skipped;
    int n_fp8, n_bf16, n_fp32;
    char **strings; /* every string the infos point to */
    int n_strings;
    fp8run_scaling_info *states; /* names point into layers[] */
    int n_states;
    report_fbs *fbs;             /* NULL unless it comes from a compiled graph */
    fr_pipeline_report passes;   /* names are the pipeline's (static) */
    char *slow_path;             /* fp8run_report_slow_path: NULL unless from a trainer */
};

static void fbs_free(report_fbs *f)
{
    if (!f) return;
    for (int i = 0; i < f->info.n_dims; i++) free(f->dim_names[i]);
    for (int i = 0; i < f->info.n_ties; i++) {
        free(f->tie_copies[i]);
        free(f->tie_sources[i]);
    }
    free(f->dim_names);
    free(f->dim_values);
    free(f->tie_copies);
    free(f->tie_sources);
    free(f->tie_transposed);
    free(f->tokens_input);
    free(f->train_regex);
    free(f->freeze_regex);
    free(f);
}

FP8RUN_API void fp8run_report_destroy(fp8run_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_strings; i++) free(r->strings[i]);
    free(r->strings);
    free(r->layers);
    free(r->skipped);
    free(r->precision);
    free(r->text);
    free(r->states);
    free(r->slow_path);
    fbs_free(r->fbs);
    free(r);
}

/* A copy owned by r (NULL stays NULL); 0 on OOM. */
static int keep(fp8run_report *r, const char *s, const char **out)
{
    *out = NULL;
    if (!s) return 1;
    char *c = strdup(s);
    if (!c) return 0;
    r->strings[r->n_strings++] = c;
    *out = c;
    return 1;
}

fr_status fr_api_report_new(const fr_fp8_report *src, const char *precision, fp8run_report **out)
{
    *out = NULL;
    fp8run_report *r = calloc(1, sizeof *r);
    if (!r) return fr_error(FR_ERR_OOM, "out of memory for a compile report");
    int nl = src ? src->n_layers : 0, ns = src ? src->n_skipped : 0;
    r->precision = strdup(src ? fr_lin_precision_name(src->precision) : precision);
    r->layers = calloc((size_t)(nl ? nl : 1), sizeof *r->layers);
    r->skipped = calloc((size_t)(ns ? ns : 1), sizeof *r->skipped);
    r->strings = calloc((size_t)(6 * nl + 4 * ns + 1), sizeof *r->strings);
    int nst = src ? src->n_states : 0;
    r->states = calloc((size_t)(nst ? nst : 1), sizeof *r->states);
    int ok = r->precision && r->layers && r->skipped && r->strings && r->states;
    if (ok && src) {
        ok = fr_fp8_report_format(src, &r->text) == FR_OK;
    } else if (ok) {
        r->text = strdup("FP8 compile: not run (precision fp32: every Linear stays float32)\n");
        ok = r->text != NULL;
    }
    for (int i = 0; ok && i < nl; i++) {
        const fr_fp8_layer *l = &src->layers[i];
        fp8run_layer_info *d = &r->layers[i];
        d->struct_size = sizeof *d;
        ok = keep(r, l->name, &d->name) && keep(r, fr_lin_precision_name(l->precision), &d->precision) &&
             keep(r, l->why, &d->why) &&
             keep(r, l->precision == FR_LIN_FP8 ? fr_lin_recipe_name(l->recipe) : NULL, &d->recipe) &&
             keep(r, l->weights, &d->weights) && keep(r, l->sources, &d->sources);
        d->n_fused = l->n_fused;
        d->has_bias = l->has_bias;
        d->k = l->K;
        d->n = l->N;
        d->pad_multiple = l->pad_multiple;
        d->pad_k = l->pad_k;
        d->pad_n = l->pad_n;
    }
    for (int i = 0; ok && i < ns; i++) {
        const fr_fp8_skip *s = &src->skipped[i];
        fp8run_skipped_info *d = &r->skipped[i];
        d->struct_size = sizeof *d;
        ok = keep(r, s->node, &d->node) && keep(r, s->op_type, &d->op_type) && keep(r, s->weight, &d->weight) &&
             keep(r, s->reason, &d->reason);
    }
    for (int i = 0; ok && i < nst; i++) {
        /* fresh until fr_api_report_set_state says otherwise */
        const fr_fp8_state *st = &src->states[i];
        fp8run_scaling_info *d = &r->states[i];
        d->struct_size = sizeof *d;
        d->layer = st->layer >= 0 && st->layer < nl ? r->layers[st->layer].name : "";
        d->operand = st->operand == FR_FP8_OPERAND_X ? "x" : st->operand == FR_FP8_OPERAND_W ? "w" : "dy";
        d->format = st->fmt == FR_F8E5M2 ? "e5m2" : "e4m3";
        d->scale = 1;
    }
    if (!ok) {
        fp8run_report_destroy(r);
        return fr_error(FR_ERR_OOM, "out of memory copying the compile report");
    }
    r->n_states = nst;
    r->n_layers = nl;
    r->n_skipped = ns;
    if (src) {
        r->n_fp8 = src->n_fp8;
        r->n_bf16 = src->n_bf16;
        r->n_fp32 = src->n_fp32;
    }
    *out = r;
    return FR_OK;
}

FP8RUN_API const char *fp8run_report_precision(const fp8run_report *r) { return r ? r->precision : NULL; }
FP8RUN_API int fp8run_report_layer_count(const fp8run_report *r) { return r ? r->n_layers : 0; }
FP8RUN_API int fp8run_report_skipped_count(const fp8run_report *r) { return r ? r->n_skipped : 0; }
FP8RUN_API const char *fp8run_report_text(const fp8run_report *r) { return r ? r->text : NULL; }

FP8RUN_API int fp8run_report_linears(const fp8run_report *r, const char *precision)
{
    if (!r || !precision) return 0;
    if (strcmp(precision, "fp8") == 0) return r->n_fp8;
    if (strcmp(precision, "bf16") == 0) return r->n_bf16;
    if (strcmp(precision, "fp32") == 0) return r->n_fp32;
    return 0;
}

FP8RUN_API fp8run_status fp8run_report_layer(const fp8run_report *r, int i, fp8run_layer_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!r) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: report is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, LAYER_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= r->n_layers)
        return fr_api_error(NULL, FP8RUN_ERR_RANGE, "%s: layer index %d is outside [0, %d)", fn, i, r->n_layers);
    fp8run_layer_info l = r->layers[i];
    l.struct_size = info->struct_size;
    memcpy(info, &l, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_report_skipped(const fp8run_report *r, int i, fp8run_skipped_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!r) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: report is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, SKIPPED_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= r->n_skipped)
        return fr_api_error(NULL, FP8RUN_ERR_RANGE, "%s: index %d is outside [0, %d)", fn, i, r->n_skipped);
    fp8run_skipped_info s = r->skipped[i];
    s.struct_size = info->struct_size;
    memcpy(info, &s, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_compile(const fp8run_model *m, const fp8run_train_config *cfg,
                                              fp8run_report **out)
{
    const char *fn = __func__;
    api_err *slot = m ? (api_err *)&m->err : NULL;
    if (!out) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_options ao;
    fp8run_status ps = fr_api_options(slot, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    fr_status st;
    if (strcmp(ao.o.precision, "fp32") != 0 && !fr_fbs_is_compiled(m->g)) {
        /* the trainer's own preparation and compile pass, nothing after it: the report is
         * exactly what a session with this config would get */
        fr_graph *cg = NULL;
        fr_fp8_report rep;
        memset(&rep, 0, sizeof rep);
        fr_pipeline_report passes;
        st = fr_train_compile_graph_passes(m->g, &ao.o, &cg, &rep, &passes);
        if (st == FR_OK) st = fr_api_report_new(&rep, ao.o.precision, out);
        if (st == FR_OK) fr_api_report_set_passes(*out, &passes);
        if (st == FR_OK) st = fr_api_report_set_slow_path(*out, cg); /* the forward graph the passes made */
        fr_fp8_report_free(&rep);
        fr_graph_free(cg);
    } else {
        /* fp32 (nothing to compile, but the model is checked as a session would) and compiled
         * graphs (their report is read from the file): an evaluation-only trainer */
        ao.o.eval_only = 1;
        fr_trainer *t = NULL;
        st = fr_trainer_new(m->g, &ao.o, &t);
        if (st == FR_OK) st = fr_api_report_from_trainer(t, out);
        fr_trainer_free(t);
    }
    fr_api_options_free(&ao);
    return fr_api_fail(slot, fn, st);
}

/* ---- the pipeline's passes ---- */

void fr_api_report_set_passes(fp8run_report *r, const fr_pipeline_report *p)
{
    if (r && p) r->passes = *p;
}

fr_status fr_api_report_set_slow_path(fp8run_report *r, const fr_graph *g)
{
    fr_slow_report sr;
    FR_TRY(fr_fast_path_check(g, &sr));
    free(r->slow_path);
    r->slow_path = NULL;
    const fr_status st = fr_slow_report_text(&sr, g, NULL, 0, 0, &r->slow_path);
    fr_slow_report_free(&sr);
    return st;
}

FP8RUN_API const char *fp8run_report_slow_path(const fp8run_report *r) { return r ? r->slow_path : NULL; }

FP8RUN_API int fp8run_report_pass_count(const fp8run_report *r) { return r ? r->passes.n : 0; }

FP8RUN_API fp8run_status fp8run_report_pass(const fp8run_report *r, int i, fp8run_pass_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!r) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: report is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, PASS_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= r->passes.n)
        return fr_api_error(NULL, FP8RUN_ERR_RANGE, "%s: pass index %d is outside [0, %d)", fn, i, r->passes.n);
    const fr_pass_result *res = &r->passes.pass[i];
    const fr_pass *p = fr_pipeline_find(res->name);
    fp8run_pass_info s = {.struct_size = info->struct_size, .name = res->name, .what = p ? p->what : "",
                          .ran = res->ran, .changed = res->changed, .detail = res->detail};
    memcpy(info, &s, use);
    return FP8RUN_OK;
}

/* ---- scaling state ---- */

void fr_api_report_set_state(fp8run_report *r, int i, const fr_fp8_scaling *sc)
{
    if (i < 0 || i >= r->n_states) return;
    r->states[i].scale = sc->scale;
    r->states[i].amax = fr_fp8_scaling_amax(sc);
    r->states[i].updates = sc->updates;
}

FP8RUN_API int fp8run_report_state_count(const fp8run_report *r) { return r ? r->n_states : 0; }

FP8RUN_API fp8run_status fp8run_report_state(const fp8run_report *r, int i, fp8run_scaling_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!r) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: report is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, STATE_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= r->n_states)
        return fr_api_error(NULL, FP8RUN_ERR_RANGE, "%s: state index %d is outside [0, %d)", fn, i, r->n_states);
    fp8run_scaling_info s = r->states[i];
    s.struct_size = info->struct_size;
    memcpy(info, &s, use);
    return FP8RUN_OK;
}

/* ---- compiled graphs ---- */

/* A copy of s, NULL staying NULL; 0 on OOM. */
static int dup_opt(const char *s, char **out)
{
    *out = s ? strdup(s) : NULL;
    return !s || *out;
}

static report_fbs *fbs_copy(const fr_fbs *f)
{
    const fr_fbs_spec *s = &f->spec;
    report_fbs *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    int nd = s->n_dims, nt = s->n_ties;
    c->dim_names = calloc((size_t)(nd ? nd : 1), sizeof *c->dim_names);
    c->dim_values = calloc((size_t)(nd ? nd : 1), sizeof *c->dim_values);
    c->tie_copies = calloc((size_t)(nt ? nt : 1), sizeof *c->tie_copies);
    c->tie_sources = calloc((size_t)(nt ? nt : 1), sizeof *c->tie_sources);
    c->tie_transposed = calloc((size_t)(nt ? nt : 1), sizeof *c->tie_transposed);
    int ok = c->dim_names && c->dim_values && c->tie_copies && c->tie_sources && c->tie_transposed &&
             dup_opt(s->tokens_input, &c->tokens_input) && dup_opt(s->train_regex, &c->train_regex) &&
             dup_opt(s->freeze_regex, &c->freeze_regex);
    for (int i = 0; ok && i < nd; i++) {
        ok = dup_opt(s->dims[i].name, &c->dim_names[i]);
        c->dim_values[i] = s->dims[i].value;
        c->info.n_dims = i + 1;
    }
    for (int i = 0; ok && i < nt; i++) {
        const fr_tie *t = &s->ties[i];
        c->info.n_ties = i + 1;
        ok = dup_opt(f->graph->values[t->copy].name, &c->tie_copies[i]) &&
             dup_opt(f->graph->values[t->source].name, &c->tie_sources[i]);
        c->tie_transposed[i] = t->transposed != 0;
    }
    if (!ok) {
        fbs_free(c);
        return NULL;
    }
    fp8run_compiled_info *in = &c->info;
    in->struct_size = sizeof *in;
    in->format = FR_FBS_FORMAT;
    in->batch = s->batch;
    in->seq_len = s->seq;
    in->tokens_input = c->tokens_input;
    in->train_regex = c->train_regex;
    in->freeze_regex = c->freeze_regex;
    in->dim_names = (const char *const *)c->dim_names;
    in->dim_values = c->dim_values;
    in->tie_copies = (const char *const *)c->tie_copies;
    in->tie_sources = (const char *const *)c->tie_sources;
    in->tie_transposed = c->tie_transposed;
    in->original_nodes = f->original ? f->original->n_nodes : 0;
    in->original_initializers = f->original ? f->original->n_initializers : 0;
    return c;
}

fr_status fr_api_report_from_trainer(const fr_trainer *t, fp8run_report **out)
{
    FR_TRY(fr_api_report_new(fr_trainer_fp8_report(t), t->opt.precision, out));
    fr_api_report_set_passes(*out, &t->passes);
    fr_status sst = fr_api_report_set_slow_path(*out, t->g);
    if (sst != FR_OK) {
        fp8run_report_destroy(*out);
        *out = NULL;
        return sst;
    }
    if (t->n_states == 0) return FR_OK;
    /* the scaling state as the session has it (the device's, on a GPU) */
    fr_status st = tr_sync_host((fr_trainer *)t);
    if (st != FR_OK) {
        fp8run_report_destroy(*out);
        *out = NULL;
        return st;
    }
    for (int i = 0; i < t->n_states; i++)
        fr_api_report_set_state(*out, (int)(t->states[i].st - t->report.states), &t->states[i].sc);
    return FR_OK;
}

fr_status fr_api_report_from_fbs(const fr_fbs *f, fp8run_report **out)
{
    FR_TRY(fr_api_report_new(&f->report, NULL, out));
    fp8run_report *r = *out;
    for (int i = 0; i < f->n_states; i++) fr_api_report_set_state(r, i, &f->states[i]);
    r->fbs = fbs_copy(f);
    if (!r->fbs) {
        fp8run_report_destroy(r);
        *out = NULL;
        return fr_error(FR_ERR_OOM, "out of memory copying the compiled graph's description");
    }
    return FR_OK;
}

FP8RUN_API fp8run_status fp8run_report_compiled(const fp8run_report *r, fp8run_compiled_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!r) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: report is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, COMPILED_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (!r->fbs)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG,
                            "%s: this report does not come from a compiled graph (fp8run_model_report, "
                            "fp8run_model_write_compiled)",
                            fn);
    fp8run_compiled_info c = r->fbs->info;
    c.struct_size = info->struct_size;
    memcpy(info, &c, use);
    return FP8RUN_OK;
}
