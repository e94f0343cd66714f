/* Public API: checkpoint files as things to inspect (step, recorded options and model path,
 * parameters) without a session. The file is verified when opened and then closed again: the
 * handle keeps copies of what describes it, not the weights. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/io/checkpoint.h"
#include "graph/safe_io.h"

#define INFO_V1_SIZE sizeof(fp8run_value_info)

typedef struct ckpt_param {
    char *name;
    int rank;
    int64_t dims[FR_MAX_RANK];
} ckpt_param;

struct fp8run_checkpoint {
    int64_t step;
    char *config;
    char *model_path;
    int has_data;
    void *data;       /* the data loader state (has_data) */
    size_t data_len;
    ckpt_param *params;
    int n_params;
};

FP8RUN_API int fp8run_is_checkpoint(const char *path)
{
    FILE *f;
    if (!path || fr_fopen_regular(path, "checkpoint", 0, &f, NULL) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    char magic[8];
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == sizeof magic && memcmp(magic, "FP8RCKPT", sizeof magic) == 0;
}

FP8RUN_API void fp8run_checkpoint_close(fp8run_checkpoint *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_params; i++) free(c->params[i].name);
    free(c->params);
    free(c->config);
    free(c->model_path);
    free(c->data);
    free(c);
}

/* The string value of "key" at the top level of the trainer's config JSON (the writer escapes
 * only '"', '\\' and control characters as \u00XX); NULL when absent or null. */
static char *json_string(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(json, pat);
    if (!p) return NULL;
    p += strlen(pat);
    char *out = malloc(strlen(p) + 1), *o = out;
    if (!out) return NULL;
    for (; *p && *p != '"'; p++) {
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        p++;
        if (*p == 'u') {
            /* exactly four hex digits (a truncated escape must not move p past the end) */
            unsigned v = 0;
            int k = 0;
            for (; k < 4 && isxdigit((unsigned char)p[1 + k]); k++)
                v = v * 16 + (unsigned)(isdigit((unsigned char)p[1 + k]) ? p[1 + k] - '0' : (p[1 + k] | 32) - 'a' + 10);
            if (k < 4 || v == 0) { /* malformed, or a NUL that would cut the path short */
                free(out);
                return NULL;
            }
            *o++ = (char)v;
            p += 4;
        } else if (*p) {
            *o++ = *p;
        } else {
            break;
        }
    }
    if (*p != '"') { /* the string is not closed: a truncated record */
        free(out);
        return NULL;
    }
    *o = '\0';
    return out;
}

static fr_status read_ckpt(const fr_ckpt *k, fp8run_checkpoint *c)
{
    const void *v;
    size_t len;
    c->step = -1;
    if (fr_ckpt_entry(k, "step", &v, &len) == FR_OK && len > 0 && len < 32) {
        char buf[32];
        memcpy(buf, v, len);
        buf[len] = '\0';
        char *end;
        long long s = strtoll(buf, &end, 10);
        if (!*end && s >= 0) c->step = s;
    }
    if (fr_ckpt_entry(k, "config", &v, &len) == FR_OK) {
        c->config = fr_malloc(len + 1, "checkpoint config");
        if (!c->config) return FR_ERR_OOM;
        memcpy(c->config, v, len);
        c->config[len] = '\0';
        c->model_path = json_string(c->config, "model");
    }
    c->has_data = fr_ckpt_entry(k, "data", &v, &len) == FR_OK;
    if (c->has_data) {
        c->data = fr_malloc(len ? len : 1, "checkpoint data loader state");
        if (!c->data) return FR_ERR_OOM;
        memcpy(c->data, v, len);
        c->data_len = len;
    }
    fr_clear_error(); /* absent entries are not errors here */
    int n = fr_ckpt_tensor_count(k);
    c->params = fr_calloc((size_t)(n ? n : 1), sizeof *c->params, "checkpoint parameters");
    if (!c->params) return FR_ERR_OOM;
    for (int i = 0; i < n; i++) {
        const fr_ckpt_tensor *t = fr_ckpt_tensor_at(k, i);
        if (strcmp(t->kind, "param") != 0) continue;
        ckpt_param *p = &c->params[c->n_params];
        p->name = fr_strdup(t->name, "checkpoint parameter name");
        if (!p->name) return FR_ERR_OOM;
        p->rank = t->rank;
        memcpy(p->dims, t->dims, sizeof p->dims);
        c->n_params++;
    }
    return FR_OK;
}

FP8RUN_API fp8run_status fp8run_checkpoint_open(const char *path, fp8run_checkpoint **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    fr_ckpt *k;
    fr_status st = fr_ckpt_open(path, &k);
    if (st != FR_OK) return fr_api_fail(NULL, NULL, st);
    fp8run_checkpoint *c = calloc(1, sizeof *c);
    if (!c) st = fr_error(FR_ERR_OOM, "out of memory for a checkpoint handle");
    if (st == FR_OK) st = read_ckpt(k, c);
    fr_ckpt_close(k);
    if (st != FR_OK) {
        fp8run_checkpoint_close(c);
        return fr_api_fail(NULL, fn, st);
    }
    *out = c;
    return FP8RUN_OK;
}

FP8RUN_API int64_t fp8run_checkpoint_step(const fp8run_checkpoint *c) { return c ? c->step : -1; }
FP8RUN_API const char *fp8run_checkpoint_config_json(const fp8run_checkpoint *c) { return c ? c->config : NULL; }
FP8RUN_API const char *fp8run_checkpoint_model_path(const fp8run_checkpoint *c) { return c ? c->model_path : NULL; }
FP8RUN_API int fp8run_checkpoint_has_data_state(const fp8run_checkpoint *c) { return c ? c->has_data : 0; }
FP8RUN_API int fp8run_checkpoint_param_count(const fp8run_checkpoint *c) { return c ? c->n_params : 0; }

FP8RUN_API fp8run_status fp8run_checkpoint_param(const fp8run_checkpoint *c, int i, fp8run_value_info *info)
{
    const char *fn = __func__;
    size_t use;
    if (!c) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: checkpoint is NULL", fn);
    fp8run_status ps = fr_api_check_out(NULL, fn, "info", info, INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= c->n_params)
        return fr_api_error(NULL, FP8RUN_ERR_RANGE, "%s: parameter index %d is outside [0, %d)", fn, i, c->n_params);
    fr_api_shape_info(c->params[i].name, FR_F32, c->params[i].rank, c->params[i].dims, info, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_checkpoint_data_state(const fp8run_checkpoint *c, const void **data, size_t *len)
{
    const char *fn = __func__;
    if (!c) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: checkpoint is NULL", fn);
    if (!data || !len) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, !data ? "data" : "len");
    *data = NULL;
    *len = 0;
    if (!c->has_data) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: the checkpoint holds no data loader state", fn);
    *data = c->data;
    *len = c->data_len;
    return FP8RUN_OK;
}
