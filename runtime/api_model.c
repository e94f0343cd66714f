/* Public API: models (load from a file or memory, inspect, read and write parameters, apply a
 * checkpoint's weights, save). A model is an imported graph; sessions copy it. */
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "runtime/api_internal.h"

#define INFO_V1_SIZE sizeof(fp8run_value_info)

/* The error slot of a model reached through a const pointer: messages are not model state. */
static api_err *slot_of(const fp8run_model *m) { return m ? (api_err *)&m->err : NULL; }

static fp8run_status wrap(fr_graph *g, fp8run_model **out)
{
    fp8run_model *m = calloc(1, sizeof *m);
    int n = 0;
    if (m) m->params = malloc((size_t)(g->n_initializers ? g->n_initializers : 1) * sizeof(int));
    if (!m || !m->params) {
        free(m);
        fr_graph_free(g);
        return fr_api_error(NULL, FP8RUN_ERR_OOM, "out of memory for a model handle");
    }
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_value *v = &g->values[g->initializers[i]];
        if ((v->flags & FR_VAL_PARAM) && v->constant) m->params[n++] = g->initializers[i];
    }
    m->g = g;
    m->n_params = n;
    *out = m;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_load(const char *path, fp8run_model **out)
{
    const char *fn = "fp8run_model_load";
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    fr_graph *g;
    fr_status st = fr_onnx_load_file(path, &g);
    if (st != FR_OK) return fr_api_fail(NULL, NULL, st);
    fp8run_status ps = wrap(g, out);
    if (ps == FP8RUN_OK)
        fr_api_log(FP8RUN_LOG_DEBUG, "loaded model '%s': %d nodes, %d inputs, %d outputs", path, g->n_nodes,
                   g->n_inputs, g->n_outputs);
    return ps;
}

FP8RUN_API fp8run_status fp8run_model_load_buffer(const void *data, size_t len, const char *name,
                                                  fp8run_model **out)
{
    const char *fn = "fp8run_model_load_buffer";
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!data || len == 0) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: empty buffer", fn);
    fr_graph *g;
    fr_status st = fr_onnx_load_buffer(data, len, NULL, name ? name : "<memory>", &g);
    if (st != FR_OK) return fr_api_fail(NULL, NULL, st);
    return wrap(g, out);
}

FP8RUN_API void fp8run_model_destroy(fp8run_model *m)
{
    if (!m) return;
    fr_graph_free(m->g);
    free(m->params);
    free(m);
}

FP8RUN_API const char *fp8run_model_error(const fp8run_model *m) { return m ? m->err.msg : "no model (NULL)"; }
FP8RUN_API const char *fp8run_model_path(const fp8run_model *m) { return m ? m->g->source_path : NULL; }

/* ---- inputs, outputs, parameters ---- */

FP8RUN_API int fp8run_model_input_count(const fp8run_model *m) { return m ? m->g->n_inputs : 0; }
FP8RUN_API int fp8run_model_output_count(const fp8run_model *m) { return m ? m->g->n_outputs : 0; }
FP8RUN_API int fp8run_model_param_count(const fp8run_model *m) { return m ? m->n_params : 0; }

FP8RUN_API int64_t fp8run_model_param_elements(const fp8run_model *m)
{
    int64_t n = 0;
    for (int i = 0; m && i < m->n_params; i++) n += fr_tensor_numel(m->g->values[m->params[i]].constant);
    return n;
}

static fp8run_status value_at(const fp8run_model *m, const char *fn, const char *what, const int *ids, int n,
                              int i, fp8run_value_info *info)
{
    size_t use;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    fp8run_status ps = fr_api_check_out(slot_of(m), fn, "info", info, INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= n)
        return fr_api_error(slot_of(m), FP8RUN_ERR_RANGE, "%s: %s index %d is outside [0, %d)", fn, what, i, n);
    fr_api_value_info(&m->g->values[ids[i]], info, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_input(const fp8run_model *m, int i, fp8run_value_info *info)
{
    return value_at(m, "fp8run_model_input", "input", m ? m->g->inputs : NULL, m ? m->g->n_inputs : 0, i, info);
}

FP8RUN_API fp8run_status fp8run_model_output(const fp8run_model *m, int i, fp8run_value_info *info)
{
    return value_at(m, "fp8run_model_output", "output", m ? m->g->outputs : NULL, m ? m->g->n_outputs : 0, i,
                    info);
}

FP8RUN_API fp8run_status fp8run_model_param(const fp8run_model *m, int i, fp8run_value_info *info)
{
    return value_at(m, "fp8run_model_param", "parameter", m ? m->params : NULL, m ? m->n_params : 0, i, info);
}

/* The parameter called name, checked against count; NULL with the error recorded. */
static fr_tensor *find_param(fp8run_model *m, const char *fn, const char *name, const void *buf, size_t count,
                             fp8run_status *ps)
{
    *ps = FP8RUN_ERR_INVALID_ARG;
    if (!m) {
        fr_api_error(NULL, *ps, "%s: model is NULL", fn);
        return NULL;
    }
    if (!name || !buf) {
        fr_api_error(&m->err, *ps, "%s: %s is NULL", fn, !name ? "name" : "the buffer");
        return NULL;
    }
    for (int i = 0; i < m->n_params; i++) {
        fr_value *v = &m->g->values[m->params[i]];
        if (strcmp(v->name, name) != 0) continue;
        int64_t n = fr_tensor_numel(v->constant);
        if ((uint64_t)n != (uint64_t)count) {
            *ps = FP8RUN_ERR_SHAPE;
            fr_api_error(&m->err, *ps, "%s: parameter '%s' has %lld elements, the buffer %zu", fn, name,
                         (long long)n, count);
            return NULL;
        }
        *ps = FP8RUN_OK;
        return v->constant;
    }
    fr_api_error(&m->err, *ps, "%s: the model has no parameter (float initializer) named '%s'", fn, name);
    return NULL;
}

FP8RUN_API fp8run_status fp8run_model_get_param(fp8run_model *m, const char *name, float *dst, size_t count)
{
    fp8run_status ps;
    fr_tensor *t = find_param(m, "fp8run_model_get_param", name, dst, count, &ps);
    if (!t) return ps;
    if (t->dtype == FR_F32) {
        memcpy(dst, t->data, count * sizeof(float));
    } else {
        for (size_t i = 0; i < count; i++) dst[i] = (float)fr_tensor_get_f64(t, (int64_t)i);
    }
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_set_param(fp8run_model *m, const char *name, const float *src,
                                                size_t count)
{
    fp8run_status ps;
    fr_tensor *t = find_param(m, "fp8run_model_set_param", name, src, count, &ps);
    if (!t) return ps;
    if (t->dtype != FR_F32)
        return fr_api_error(&m->err, FP8RUN_ERR_UNSUPPORTED,
                            "fp8run_model_set_param: parameter '%s' is %s; only float32 parameters can be set", name,
                            fr_dtype_name(t->dtype));
    memcpy(t->data, src, count * sizeof(float));
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_apply_checkpoint(fp8run_model *m, const char *ckpt_path, int *n_applied)
{
    const char *fn = "fp8run_model_apply_checkpoint";
    if (n_applied) *n_applied = 0;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!ckpt_path) return fr_api_error(&m->err, FP8RUN_ERR_INVALID_ARG, "%s: no checkpoint path", fn);
    return fr_api_fail(&m->err, fn, fr_train_apply_weights(m->g, ckpt_path, n_applied));
}

FP8RUN_API fp8run_status fp8run_model_save(const fp8run_model *m, const char *path)
{
    const char *fn = "fp8run_model_save";
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!path || !path[0]) return fr_api_error(slot_of(m), FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    return fr_api_fail(slot_of(m), fn, fr_train_save_model(m->g, path));
}
