/* Public API: models (load from a file or memory, inspect, read and write parameters, apply a
 * checkpoint's weights, save). A model is an imported graph; sessions copy it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "runtime/api/api_internal.h"

#define INFO_V1_SIZE sizeof(fp8run_value_info)
#define MODEL_INFO_V1_SIZE sizeof(fp8run_model_info)
#define OP_INFO_V1_SIZE sizeof(fp8run_op_info)

/* The error slot of a model reached through a const pointer: messages are not model state. */
static api_err *slot_of(const fp8run_model *m) { return m ? (api_err *)&m->err : NULL; }

const char *fr_api_meta(const fr_graph *g, const char *key)
{
    for (int i = 0; i < g->n_metadata; i++)
        if (strcmp(g->metadata[i].key, key) == 0) return g->metadata[i].value;
    return NULL;
}

/* A compiled graph's float initializers include folded constants and the scaling state: its
 * parameters are the ones "fp8run.param.<i>" lists. A malformed list is left for the trainer
 * to report (it decodes the whole file); then the flags stand. Returns the count, -1 if none. */
static int compiled_params(const fr_graph *g, int *params)
{
    const char *count = fr_api_meta(g, "fp8run.params");
    char *end;
    long n = count ? strtol(count, &end, 10) : -1;
    if (!count || *end || n < 0 || n > g->n_initializers) return -1;
    for (long i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "fp8run.param.%ld", i);
        const char *name = fr_api_meta(g, key);
        int vid = name ? fr_graph_find_value(g, name) : -1;
        if (vid < 0 || !(g->values[vid].flags & FR_VAL_INITIALIZER) || !g->values[vid].constant ||
            g->values[vid].constant->dtype != FR_F32)
            return -1;
        params[i] = vid;
    }
    /* model order, as for any model */
    int k = 0;
    for (int i = 0; i < g->n_initializers; i++)
        for (long j = k; j < n; j++)
            if (params[j] == g->initializers[i]) {
                int t = params[k];
                params[k++] = params[j];
                params[j] = t;
                break;
            }
    return (int)n;
}

static int by_count(const void *a, const void *b)
{
    const fp8run_op_info *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->op_type, y->op_type);
}

/* The op histogram of the live nodes. 0 on OOM. */
static int histogram(fp8run_model *m)
{
    const fr_graph *g = m->g;
    m->ops = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *m->ops);
    if (!m->ops) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        char name[512];
        if (nd->domain[0])
            snprintf(name, sizeof name, "%s::%s", nd->domain, nd->op_type);
        else
            snprintf(name, sizeof name, "%s", nd->op_type);
        int k = 0;
        while (k < m->n_ops && strcmp(m->ops[k].op_type, name) != 0) k++;
        if (k == m->n_ops) {
            char *c = strdup(name);
            if (!c) return 0;
            m->ops[k].struct_size = sizeof m->ops[k];
            m->ops[k].op_type = c;
            m->n_ops++;
        }
        m->ops[k].count++;
    }
    qsort(m->ops, (size_t)m->n_ops, sizeof *m->ops, by_count);
    return 1;
}

/* NaN and Inf values in a float tensor (float32, bfloat16, float16, float64); 0 for others. */
static int64_t count_nonfinite(const fr_tensor *t)
{
    const int64_t n = fr_tensor_numel(t);
    int64_t bad = 0;
    if (t->dtype == FR_F32)
        for (int64_t i = 0; i < n; i++) bad += !isfinite(((const float *)t->data)[i]);
    else if (t->dtype == FR_F64)
        for (int64_t i = 0; i < n; i++) bad += !isfinite(((const double *)t->data)[i]);
    else if (t->dtype == FR_BF16 || t->dtype == FR_F16) /* exponent all ones: Inf or NaN */
        for (int64_t i = 0; i < n; i++) {
            const uint16_t u = ((const uint16_t *)t->data)[i];
            bad += t->dtype == FR_BF16 ? (u & 0x7F80) == 0x7F80 : (u & 0x7C00) == 0x7C00;
        }
    return bad;
}

/* A parameter holding NaN or Inf would poison the first step: each one is listed (indices
 * into params, with counts) for fp8run_model_nonfinite_param and logged as a warning. */
static int scan_nonfinite(fp8run_model *m)
{
    for (int i = 0; i < m->n_params; i++) {
        const fr_value *v = &m->g->values[m->params[i]];
        const int64_t bad = v->constant ? count_nonfinite(v->constant) : 0;
        if (!bad) continue;
        if (!m->nonfinite) {
            m->nonfinite = malloc((size_t)m->n_params * sizeof *m->nonfinite);
            m->nonfinite_counts = malloc((size_t)m->n_params * sizeof *m->nonfinite_counts);
            if (!m->nonfinite || !m->nonfinite_counts) return 0;
        }
        m->nonfinite[m->n_nonfinite] = i;
        m->nonfinite_counts[m->n_nonfinite++] = bad;
        fr_api_log(FP8RUN_LOG_WARN, "'%s': parameter '%s' holds %lld NaN/Inf values", m->g->source_path, v->name,
                   (long long)bad);
    }
    return 1;
}

FP8RUN_API int fp8run_model_nonfinite_params(const fp8run_model *m) { return m ? m->n_nonfinite : 0; }

FP8RUN_API const char *fp8run_model_nonfinite_param(const fp8run_model *m, int i, int64_t *count)
{
    if (!m || i < 0 || i >= m->n_nonfinite) return NULL;
    if (count) *count = m->nonfinite_counts[i];
    return m->g->values[m->params[m->nonfinite[i]]].name;
}

fp8run_status fr_api_model_wrap(fr_graph *g, fp8run_model **out)
{
    fp8run_model *m = calloc(1, sizeof *m);
    if (m) {
        m->g = g;
        m->params = malloc((size_t)(g->n_initializers ? g->n_initializers : 1) * sizeof(int));
    }
    if (!m || !m->params || !histogram(m)) {
        if (m) m->g = NULL;
        fp8run_model_destroy(m);
        fr_graph_free(g);
        return fr_api_error(NULL, FP8RUN_ERR_OOM, "out of memory for a model handle");
    }
    int n = fr_fbs_is_compiled(g) ? compiled_params(g, m->params) : -1;
    if (n < 0) {
        n = 0;
        for (int i = 0; i < g->n_initializers; i++) {
            const fr_value *v = &g->values[g->initializers[i]];
            if ((v->flags & FR_VAL_PARAM) && v->constant) m->params[n++] = g->initializers[i];
        }
    }
    m->n_params = n;
    if (!scan_nonfinite(m)) {
        fp8run_model_destroy(m);
        return fr_api_error(NULL, FP8RUN_ERR_OOM, "out of memory for a model handle");
    }
    *out = m;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_load(const char *path, fp8run_model **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    fr_graph *g;
    fr_status st = fr_onnx_load_file(path, &g);
    if (st != FR_OK) return fr_api_fail(NULL, NULL, st);
    if ((st = fr_api_check_recorded_options(g, NULL)) != FR_OK) { /* a .fbs's options, as flags are */
        fr_graph_free(g);
        return fr_api_fail(NULL, NULL, st);
    }
    fp8run_status ps = fr_api_model_wrap(g, out);
    if (ps == FP8RUN_OK)
        fr_api_log(FP8RUN_LOG_DEBUG, "loaded model '%s': %d nodes, %d inputs, %d outputs", path, g->n_nodes,
                   g->n_inputs, g->n_outputs);
    return ps;
}

FP8RUN_API fp8run_status fp8run_model_load_buffer(const void *data, size_t len, const char *name,
                                                  fp8run_model **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!data || len == 0) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: empty buffer", fn);
    fr_graph *g;
    fr_status st = fr_onnx_load_buffer(data, len, NULL, name ? name : "<memory>", &g);
    if (st != FR_OK) return fr_api_fail(NULL, NULL, st);
    if ((st = fr_api_check_recorded_options(g, NULL)) != FR_OK) {
        fr_graph_free(g);
        return fr_api_fail(NULL, NULL, st);
    }
    return fr_api_model_wrap(g, out);
}

FP8RUN_API void fp8run_model_destroy(fp8run_model *m)
{
    if (!m) return;
    fr_graph_free(m->g);
    free(m->params);
    free(m->nonfinite);
    free(m->nonfinite_counts);
    for (int i = 0; i < m->n_ops; i++) free((char *)m->ops[i].op_type);
    free(m->ops);
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
    return value_at(m, __func__, "input", m ? m->g->inputs : NULL, m ? m->g->n_inputs : 0, i, info);
}

FP8RUN_API fp8run_status fp8run_model_output(const fp8run_model *m, int i, fp8run_value_info *info)
{
    return value_at(m, __func__, "output", m ? m->g->outputs : NULL, m ? m->g->n_outputs : 0, i,
                    info);
}

FP8RUN_API fp8run_status fp8run_model_param(const fp8run_model *m, int i, fp8run_value_info *info)
{
    return value_at(m, __func__, "parameter", m ? m->params : NULL, m ? m->n_params : 0, i, info);
}

static int is_float_init(const fr_value *v)
{
    return v->constant && (v->flags & FR_VAL_INITIALIZER) && fr_dtype_is_float(v->dtype);
}

FP8RUN_API int fp8run_model_float_initializer_count(const fp8run_model *m)
{
    int n = 0;
    for (int i = 0; m && i < m->g->n_initializers; i++) n += is_float_init(&m->g->values[m->g->initializers[i]]);
    return n;
}

FP8RUN_API fp8run_status fp8run_model_float_initializer(const fp8run_model *m, int i, fp8run_value_info *info,
                                                        int *trained, const char **why)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    int n = fp8run_model_float_initializer_count(m);
    if (i < 0 || i >= n)
        return fr_api_error(slot_of(m), FP8RUN_ERR_RANGE, "%s: index %d is outside [0, %d)", fn, i, n);
    int k = 0, vid = -1;
    for (int j = 0; vid < 0; j++)
        if (is_float_init(&m->g->values[m->g->initializers[j]]) && k++ == i) vid = m->g->initializers[j];
    fp8run_status ps = value_at(m, fn, "float initializer", &vid, 1, 0, info);
    if (ps != FP8RUN_OK) return ps;
    const fr_value *v = &m->g->values[vid];
    if (trained) *trained = (v->flags & FR_VAL_PARAM) != 0;
    if (why) *why = v->param_note ? v->param_note : (v->flags & FR_VAL_PARAM) ? "float initializer" : "";
    return FP8RUN_OK;
}

/* The parameter called name, checked against count; NULL with the error recorded. */
static fr_tensor *find_param(fp8run_model *m, const char *fn, const char *name, const void *buf, size_t count,
                             fp8run_status *ps)
{
    *ps = FP8RUN_ERR_INVALID_ARG;
    if (!m) {
        *ps = fr_api_error(NULL, *ps, "%s: model is NULL", fn);
        return NULL;
    }
    if (!name || !buf) {
        *ps = fr_api_error(&m->err, *ps, "%s: %s is NULL", fn, !name ? "name" : "the buffer");
        return NULL;
    }
    for (int i = 0; i < m->n_params; i++) {
        fr_value *v = &m->g->values[m->params[i]];
        if (strcmp(v->name, name) != 0) continue;
        int64_t n = fr_tensor_numel(v->constant);
        if ((uint64_t)n != (uint64_t)count) {
            *ps = fr_api_error(&m->err, FP8RUN_ERR_SHAPE, "%s: parameter '%s' has %lld elements, the buffer %zu",
                               fn, name, (long long)n, count);
            return NULL;
        }
        *ps = FP8RUN_OK;
        return v->constant;
    }
    *ps = fr_api_error(&m->err, *ps, "%s: the model has no parameter (float initializer) named '%s'", fn, name);
    return NULL;
}

FP8RUN_API fp8run_status fp8run_model_get_param(fp8run_model *m, const char *name, float *dst, size_t count)
{
    fp8run_status ps;
    fr_tensor *t = find_param(m, __func__, name, dst, count, &ps);
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
    fr_tensor *t = find_param(m, __func__, name, src, count, &ps);
    if (!t) return ps;
    if (t->dtype != FR_F32)
        return fr_api_error(&m->err, FP8RUN_ERR_UNSUPPORTED,
                            "%s: parameter '%s' is %s; only float32 parameters can be set", __func__, name,
                            fr_dtype_name(t->dtype));
    memcpy(t->data, src, count * sizeof(float));
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_apply_checkpoint(fp8run_model *m, const char *ckpt_path, int *n_applied)
{
    const char *fn = __func__;
    if (n_applied) *n_applied = 0;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!ckpt_path) return fr_api_error(&m->err, FP8RUN_ERR_INVALID_ARG, "%s: no checkpoint path", fn);
    return fr_api_fail(&m->err, fn, fr_train_apply_weights(m->g, ckpt_path, n_applied));
}

FP8RUN_API fp8run_status fp8run_model_save(const fp8run_model *m, const char *path)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!path || !path[0]) return fr_api_error(slot_of(m), FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    return fr_api_fail(slot_of(m), fn, fr_train_save_model(m->g, path));
}

FP8RUN_API fp8run_status fp8run_model_export(const fp8run_model *m, const char *path)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (!path || !path[0]) return fr_api_error(slot_of(m), FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if (!fr_fbs_is_compiled(m->g)) return fr_api_fail(slot_of(m), fn, fr_train_save_model(m->g, path));
    /* the original model the compiled graph holds, with its current weights */
    fr_graph *orig = NULL;
    fr_status st = fr_fbs_original(m->g, &orig);
    if (st == FR_OK) st = fr_train_save_model(orig, path);
    fr_graph_free(orig);
    return fr_api_fail(slot_of(m), fn, st);
}

/* ---- what the file says about itself ---- */

FP8RUN_API fp8run_status fp8run_model_get_info(const fp8run_model *m, fp8run_model_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    fp8run_status ps = fr_api_check_out(slot_of(m), fn, "info", info, MODEL_INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    const fr_graph *g = m->g;
    fp8run_model_info o;
    memset(&o, 0, sizeof o);
    o.struct_size = info->struct_size;
    o.producer_name = g->producer_name ? g->producer_name : "";
    o.producer_version = g->producer_version ? g->producer_version : "";
    o.graph_name = g->name ? g->name : "";
    o.ir_version = g->ir_version;
    o.n_opsets = g->n_opsets;
    o.n_nodes = g->n_nodes;
    o.n_initializers = g->n_initializers;
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_tensor *c = g->values[g->initializers[i]].constant;
        if (c) o.initializer_bytes += c->nbytes;
    }
    o.n_op_types = m->n_ops;
    o.compiled = fr_fbs_is_compiled(g);
    memcpy(info, &o, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_opset(const fp8run_model *m, int i, const char **domain, int64_t *version)
{
    const char *fn = __func__;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (i < 0 || i >= m->g->n_opsets)
        return fr_api_error(slot_of(m), FP8RUN_ERR_RANGE, "%s: opset index %d is outside [0, %d)", fn, i,
                            m->g->n_opsets);
    if (domain) *domain = m->g->opsets[i].domain ? m->g->opsets[i].domain : "";
    if (version) *version = m->g->opsets[i].version;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_op(const fp8run_model *m, int i, fp8run_op_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    fp8run_status ps = fr_api_check_out(slot_of(m), fn, "info", info, OP_INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= m->n_ops)
        return fr_api_error(slot_of(m), FP8RUN_ERR_RANGE, "%s: op type index %d is outside [0, %d)", fn, i, m->n_ops);
    fp8run_op_info o = m->ops[i];
    o.struct_size = info->struct_size;
    memcpy(info, &o, use);
    return FP8RUN_OK;
}
