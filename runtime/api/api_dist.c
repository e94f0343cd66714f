/* Public API: the launch environment, the rendezvous (runtime/dist/dist.h) and sharding plans
 * (runtime/dist/shard_plan.h). Errors go to this thread's message (no handle owns them). */
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/dist/dist.h"
#include "runtime/dist/shard_plan.h"
#include "runtime/train/train_memory.h"

#define ENV_V1_SIZE sizeof(fp8run_dist_env)
#define INFO_V1_SIZE sizeof(fp8run_shard_info)

struct fp8run_shard_plan {
    fr_shard_plan *p;
    char *text;
};

/* a launcher's variables are the process's own: read through getenv */
static const char *process_env(const char *name) { return getenv(name); }

FP8RUN_API fp8run_status fp8run_dist_env_read(fp8run_dist_env *env)
{
    size_t use;
    fp8run_status ps = fr_api_check_out(NULL, __func__, "env", env, ENV_V1_SIZE, sizeof *env, &use);
    if (ps != FP8RUN_OK) return ps;
    fr_dist_env e;
    fr_status st = fr_dist_env_parse(process_env, &e);
    if (st != FR_OK) return fr_api_fail(NULL, __func__, st);
    fp8run_dist_env r;
    memset(&r, 0, sizeof r);
    r.struct_size = env->struct_size;
    r.present = e.present;
    r.world_size = e.world;
    r.rank = e.rank;
    r.local_rank = e.local_rank;
    r.local_world_size = e.local_world;
    r.nnodes = e.nnodes;
    r.node_rank = e.node_rank;
    memcpy(r.master_addr, e.addr, sizeof r.master_addr);
    r.master_port = e.port;
    memcpy(env, &r, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_dist_rendezvous(const fp8run_dist_env *env, void *id, size_t len, double timeout_s)
{
    const char *fn = __func__;
    if (!env || env->struct_size < ENV_V1_SIZE)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: env is NULL or older than this library's", fn);
    if (!id && len) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: id is NULL", fn);
    if (!memchr(env->master_addr, '\0', sizeof env->master_addr))
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: env.master_addr is not a string", fn);
    fr_dist_env e;
    memset(&e, 0, sizeof e);
    e.present = env->present;
    e.world = env->world_size;
    e.rank = env->rank;
    e.local_rank = env->local_rank;
    e.local_world = env->local_world_size;
    e.nnodes = env->nnodes;
    e.node_rank = env->node_rank;
    memcpy(e.addr, env->master_addr, sizeof e.addr);
    e.port = env->master_port;
    if (e.world < 1 || e.port < 1 || e.port > 65535)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: world size %d, port %d", fn, e.world, e.port);
    fr_status st = fr_dist_rendezvous(&e, id, len, timeout_s > 0 ? timeout_s : fr_dist_rendezvous_timeout());
    return st == FR_OK ? FP8RUN_OK : fr_api_fail(NULL, fn, st);
}

static fp8run_status wrap(const char *fn, fr_shard_plan *p, fp8run_shard_plan **out)
{
    fp8run_shard_plan *h = fr_calloc(1, sizeof *h, "shard plan");
    char *text = h ? fr_shard_plan_text(p) : NULL;
    if (!h || !text) {
        free(h);
        fr_shard_plan_free(p);
        return fr_api_fail(NULL, fn, FR_ERR_OOM);
    }
    h->p = p;
    h->text = text;
    *out = h;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_shard_plan(const fp8run_model *m, const fp8run_train_config *cfg, int world_size,
                                                 fp8run_shard_plan **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    if (world_size < 1) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: world size %d", fn, world_size);
    api_options ao;
    fp8run_status ps = fr_api_options(NULL, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    ao.o.plan_only = 1; /* the graphs and the FP8 decisions only: nothing runs */
    ao.o.device = "cpu";
    ao.o.world_size = 0;
    fr_trainer *t = NULL;
    fr_shard_plan *p = NULL;
    fr_status st = fr_trainer_new(m->g, &ao.o, &t);
    if (st == FR_OK) st = tr_shard_plan(t, world_size, &p);
    fr_trainer_free(t);
    fr_api_options_free(&ao);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    return wrap(fn, p, out);
}

FP8RUN_API fp8run_status fp8run_shard_plan_create(const fp8run_value_info *params, int n, int world_size,
                                                  fp8run_shard_plan **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (n < 0 || (n > 0 && !params)) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %d parameters", fn, n);
    fr_shard_spec *s = fr_calloc((size_t)(n ? n : 1), sizeof *s, "shard plan");
    if (!s) return fr_api_fail(NULL, fn, FR_ERR_OOM);
    for (int i = 0; i < n; i++) {
        if (params[i].rank < 0 || params[i].rank > FP8RUN_MAX_RANK || !params[i].name) {
            free(s);
            return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: parameter %d has no name or a rank of %d", fn, i,
                                params[i].rank);
        }
        s[i] = (fr_shard_spec){params[i].name, params[i].rank, params[i].dims, 0, 4, 0};
    }
    fr_shard_plan *p = NULL;
    fr_status st = fr_shard_plan_new(s, n, world_size, &p);
    free(s);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    return wrap(fn, p, out);
}

FP8RUN_API void fp8run_shard_plan_destroy(fp8run_shard_plan *p)
{
    if (!p) return;
    fr_shard_plan_free(p->p);
    free(p->text);
    free(p);
}

FP8RUN_API const char *fp8run_shard_plan_text(const fp8run_shard_plan *p) { return p ? p->text : NULL; }

FP8RUN_API int fp8run_shard_plan_param_count(const fp8run_shard_plan *p) { return p ? p->p->n_params : 0; }

FP8RUN_API fp8run_status fp8run_shard_plan_param(const fp8run_shard_plan *p, int i, fp8run_shard_info *info)
{
    size_t use;
    fp8run_status ps = fr_api_check_out(NULL, __func__, "info", info, INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (!p || i < 0 || i >= p->p->n_params)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: parameter %d is out of range", __func__, i);
    const fr_shard_param *q = &p->p->params[i];
    fp8run_shard_info r = {.struct_size = info->struct_size,
                           .name = q->name,
                           .unit = q->unit,
                           .dim = q->dim,
                           .gather_bytes = q->gather_bytes,
                           .extent = q->extent,
                           .shard = q->shard,
                           .numel = q->numel,
                           .shard_numel = fr_shard_alloc_numel(p->p, i)};
    memcpy(info, &r, use);
    return FP8RUN_OK;
}

/* parameter `name` of p, and rank checked */
static fp8run_status lookup(const char *fn, const fp8run_shard_plan *p, const char *name, int rank, int *i)
{
    if (!p || !name) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: plan or name is NULL", fn);
    *i = fr_shard_plan_find(p->p, name);
    if (*i < 0) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: the plan has no parameter '%s'", fn, name);
    if (rank < 0 || rank >= p->p->world)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: rank %d of %d", fn, rank, p->p->world);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_shard_plan_slice(const fp8run_shard_plan *p, const char *name, int rank, int64_t *first,
                                                 int64_t *count)
{
    int i;
    fp8run_status ps = lookup(__func__, p, name, rank, &i);
    if (ps != FP8RUN_OK) return ps;
    if (!first || !count) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: first or count is NULL", __func__);
    fr_shard_slice(p->p, i, rank, first, count);
    return FP8RUN_OK;
}

static fp8run_status sizes(const char *fn, const fp8run_shard_plan *p, int i, size_t full_count, size_t shard_count)
{
    const size_t numel = (size_t)p->p->params[i].numel, per = (size_t)fr_shard_alloc_numel(p->p, i);
    if (full_count != numel || shard_count != per)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: parameter '%s' has %zu elements and shards of %zu, not "
                            "%zu and %zu", fn, p->p->params[i].name, numel, per, full_count, shard_count);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_shard_scatter(const fp8run_shard_plan *p, const char *name, int rank, const float *full,
                                              size_t full_count, float *shard, size_t shard_count)
{
    int i;
    fp8run_status ps = lookup(__func__, p, name, rank, &i);
    if (ps == FP8RUN_OK) ps = sizes(__func__, p, i, full_count, shard_count);
    if (ps != FP8RUN_OK) return ps;
    if ((!full && full_count) || (!shard && shard_count))
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: a NULL buffer", __func__);
    fr_shard_scatter(p->p, i, rank, full, shard);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_shard_gather(const fp8run_shard_plan *p, const char *name, const float *const *shards,
                                             size_t shard_count, float *full, size_t full_count)
{
    int i;
    fp8run_status ps = lookup(__func__, p, name, 0, &i);
    if (ps == FP8RUN_OK) ps = sizes(__func__, p, i, full_count, shard_count);
    if (ps != FP8RUN_OK) return ps;
    if (!shards || (!full && full_count)) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: a NULL buffer", __func__);
    for (int r = 0; r < p->p->world; r++)
        if (!shards[r] && shard_count)
            return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: rank %d's shard is NULL", __func__, r);
    fr_shard_gather(p->p, i, shards, full);
    return FP8RUN_OK;
}
