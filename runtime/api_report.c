/* Public API: the FP8 compiler's report, as a self-contained copy (so it outlives the session
 * or the dry-run compile it came from), and fp8run_model_compile, the dry run. */
#include <stdlib.h>
#include <string.h>

#include "runtime/api_internal.h"

#define LAYER_V1_SIZE sizeof(fp8run_layer_info)
#define SKIPPED_V1_SIZE sizeof(fp8run_skipped_info)

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
};

FP8RUN_API void fp8run_report_destroy(fp8run_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_strings; i++) free(r->strings[i]);
    free(r->strings);
    free(r->layers);
    free(r->skipped);
    free(r->precision);
    free(r->text);
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
    int ok = r->precision && r->layers && r->skipped && r->strings;
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
    if (!ok) {
        fp8run_report_destroy(r);
        return fr_error(FR_ERR_OOM, "out of memory copying the compile report");
    }
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
    const char *fn = "fp8run_report_layer";
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
    const char *fn = "fp8run_report_skipped";
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
    const char *fn = "fp8run_model_compile";
    api_err *slot = m ? (api_err *)&m->err : NULL;
    if (!out) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_options ao;
    fp8run_status ps = fr_api_options(slot, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    /* the trainer's own compile, without backward graph or optimizer: the report is exactly
     * what a session with this config would get */
    ao.o.eval_only = 1;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(m->g, &ao.o, &t);
    if (st == FR_OK) st = fr_api_report_new(fr_trainer_fp8_report(t), ao.o.precision, out);
    fr_trainer_free(t);
    fr_api_options_free(&ao);
    return fr_api_fail(slot, fn, st);
}
