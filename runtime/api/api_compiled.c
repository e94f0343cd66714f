/* Public API: compiled graphs (.fbs, runtime/io/fbs.h): writing one from an ONNX model, what one
 * is for (read cheaply from its metadata), and its recorded report with what else it records. */
#include <string.h>

#include "ops/linear.h"
#include "runtime/api/api_internal.h"

static api_err *slot_of(const fp8run_model *m) { return m ? (api_err *)&m->err : NULL; }

static const char *model_name(const fp8run_model *m) { return m->g->source_path ? m->g->source_path : "<memory>"; }

FP8RUN_API fp8run_status fp8run_model_write_compiled(const fp8run_model *m, const fp8run_train_config *cfg,
                                                     const char *path, fp8run_report **report)
{
    const char *fn = __func__;
    if (report) *report = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_err *slot = slot_of(m);
    if (!path || !path[0]) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if (fr_fbs_is_compiled(m->g))
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: '%s' is already a compiled graph: compile the original ONNX model",
                            fn, model_name(m));
    api_options ao;
    fp8run_status ps = fr_api_options(slot, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    if (strcmp(ao.o.precision, "fp32") == 0) {
        fr_api_options_free(&ao);
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG,
                            "%s: precision fp32 leaves the model as it is: compile for fp8 or bf16", fn);
    }
    fr_status st = fr_train_compile(m->g, &ao.o, path);
    fr_api_options_free(&ao);
    /* what was written reads back: the whole file is checked as training it would */
    fr_fbs f;
    memset(&f, 0, sizeof f);
    if (st == FR_OK) st = fr_fbs_load(path, &f);
    if (st == FR_OK && report) st = fr_api_report_from_fbs(&f, report);
    fr_fbs_free(&f);
    return fr_api_fail(slot, fn, st);
}

FP8RUN_API fp8run_status fp8run_model_compiled_for(const fp8run_model *m, int64_t *batch, int64_t *seq_len,
                                                   const char **precision)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    api_err *slot = slot_of(m);
    if (!fr_fbs_is_compiled(m->g))
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: '%s' is not a compiled graph", fn, model_name(m));
    int64_t b, s;
    fr_status st = fr_fbs_shape(m->g, &b, &s);
    if (st != FR_OK) return fr_api_fail(slot, fn, st);
    /* the trainer checks the whole file when it decodes it; this is the key a host needs first */
    const char *prec = fr_api_meta(m->g, "fp8run.option.precision");
    fr_lin_precision lp;
    if (!prec || fr_lin_precision_parse(prec, &lp) != FR_OK || lp == FR_LIN_FP32) {
        fr_clear_error();
        return fr_api_error(slot, FP8RUN_ERR_PARSE,
                            "%s: compiled graph '%s': metadata key 'fp8run.option.precision' is missing or malformed", fn,
                            model_name(m));
    }
    if (batch) *batch = b;
    if (seq_len) *seq_len = s;
    if (precision) *precision = fr_lin_precision_name(lp);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_report(const fp8run_model *m, fp8run_report **out)
{
    const char *fn = __func__;
    api_err *slot = slot_of(m);
    if (!out) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!fr_fbs_is_compiled(m->g))
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG,
                            "%s: '%s' is not a compiled graph: fp8run_model_compile reports what compiling it would do",
                            fn, model_name(m));
    fr_fbs f;
    fr_status st = fr_fbs_decode(m->g, NULL, &f);
    if (st == FR_OK) st = fr_api_report_from_fbs(&f, out);
    fr_fbs_free(&f);
    return fr_api_fail(slot, fn, st);
}
