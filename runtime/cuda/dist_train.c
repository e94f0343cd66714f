/* The device trainer's data-parallel hooks (dist_train.h). */
#include "runtime/cuda/dist_train.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/nccl_comm.h"
#include "runtime/dist.h"

struct fr_dist_train {
    fr_nccl *comm;
    fr_dist_bucket *buckets;
    int n_buckets;
    int *owner;            /* sharded: owner of each parameter; NULL otherwise */
    float *d_tmp;          /* sharded: a parameter's slot on its way from its owner */
    int64_t tmp_numel;
    cudaEvent_t ev;
    cudaEvent_t coll_ev;   /* recorded after the last step's reductions */
    int coll_queued;
};

static size_t bucket_bytes(void)
{
    const char *e = getenv("FP8RUN_DIST_BUCKET_MB");
    double mb = e && atof(e) > 0 ? atof(e) : 64.0;
    return (size_t)(mb * 1048576.0);
}

static const char *env_get(const char *name) { return getenv(name); }

fr_status fr_dist_train_new(const fr_trainer *t, fr_dist_train **out)
{
    *out = NULL;
    const fr_train_options *o = &t->opt;
    fr_dist_env env;
    FR_TRY(fr_dist_env_parse(env_get, &env)); /* MASTER_ADDR / MASTER_PORT */
    fr_dist_train *dt = fr_calloc(1, sizeof *dt, "data-parallel state");
    if (!dt) return FR_ERR_OOM;
    fr_status st = fr_nccl_new(o->rank, o->world_size, env.addr, env.port, o->nccl_comm, &dt->comm);
    int64_t *numel = fr_calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *numel, "data-parallel state");
    if (st == FR_OK && !numel) st = FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < t->n_params; i++) numel[i] = t->params[i].numel;
    if (st == FR_OK) st = fr_dist_plan_buckets(numel, t->n_params, sizeof(float), bucket_bytes(), &dt->buckets, &dt->n_buckets);
    if (st == FR_OK && o->shard_optimizer) {
        dt->owner = fr_calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *dt->owner, "optimizer shards");
        st = dt->owner ? fr_dist_partition(numel, t->n_params, o->world_size, dt->owner) : FR_ERR_OOM;
        for (int i = 0; i < t->n_params; i++)
            if (numel[i] > dt->tmp_numel) dt->tmp_numel = numel[i];
        if (st == FR_OK && cudaMalloc((void **)&dt->d_tmp, (size_t)(dt->tmp_numel ? dt->tmp_numel : 1) * sizeof(float)) != cudaSuccess)
            st = fr_error(FR_ERR_DEVICE, "out of device memory for the optimizer-state gather buffer");
    }
    if (st == FR_OK && (cudaEventCreateWithFlags(&dt->ev, cudaEventDisableTiming) != cudaSuccess ||
                        cudaEventCreateWithFlags(&dt->coll_ev, cudaEventDisableTiming) != cudaSuccess))
        st = fr_error(FR_ERR_DEVICE, "data-parallel state: cudaEventCreate failed");
    free(numel);
    if (st != FR_OK) {
        fr_dist_train_free(dt);
        return st;
    }
    *out = dt;
    return FR_OK;
}

void fr_dist_train_free(fr_dist_train *dt)
{
    if (!dt) return;
    fr_nccl_free(dt->comm);
    free(dt->buckets);
    free(dt->owner);
    cudaFree(dt->d_tmp);
    if (dt->ev) cudaEventDestroy(dt->ev);
    if (dt->coll_ev) cudaEventDestroy(dt->coll_ev);
    free(dt);
}

int fr_dist_train_broken(const fr_dist_train *dt) { return dt && fr_nccl_broken(dt->comm); }

int fr_dist_train_owner(const fr_dist_train *dt, int i) { return dt && dt->owner ? dt->owner[i] : -1; }

/* One grouped collective per bucket, last parameters first (the order the backward pass
   finishes them): op queues parameter i's. */
typedef fr_status (*param_op)(fr_dist_train *dt, int i, const void *ctx, cudaStream_t s);
static fr_status per_bucket(fr_dist_train *dt, param_op op, const void *ctx, cudaStream_t s)
{
    for (int k = 0; k < dt->n_buckets; k++) {
        const fr_dist_bucket *bk = &dt->buckets[k];
        FR_TRY(fr_nccl_group_start(dt->comm));
        fr_status st = FR_OK;
        for (int j = 0; j < bk->count && st == FR_OK; j++) st = op(dt, bk->first - j, ctx, s);
        fr_status ge = fr_nccl_group_end(dt->comm);
        FR_TRY(st);
        FR_TRY(ge);
    }
    return FR_OK;
}

static fr_status average_grad(fr_dist_train *dt, int i, const void *ctx, cudaStream_t s)
{
    const fr_dist_step_bufs *b = ctx;
    const fr_mt_entry *e = &b->entries[i];
    if (e->n <= 0) return FR_OK;
    return fr_nccl_allreduce(dt->comm, b->use_acc ? e->acc : (float *)e->g, (size_t)e->n, FR_NCCL_F32, FR_NCCL_AVG, s);
}

static fr_status share_param(fr_dist_train *dt, int i, const void *ctx, cudaStream_t s)
{
    const fr_mt_entry *e = &((const fr_mt_entry *)ctx)[i];
    return e->n > 0 ? fr_nccl_broadcast(dt->comm, e->p, (size_t)e->n, FR_NCCL_F32, dt->owner[i], s) : FR_OK;
}

static fr_status mark_queued(fr_dist_train *dt, cudaStream_t s)
{
    if (cudaEventRecord(dt->coll_ev, s) != cudaSuccess) return fr_error(FR_ERR_DEVICE, "data parallel: cudaEventRecord failed");
    dt->coll_queued = 1;
    return FR_OK;
}

fr_status fr_dist_train_reduce(fr_dist_train *dt, const fr_dist_step_bufs *b, cudaStream_t s)
{
    /* The previous step's collectives must have finished (watched: a dead rank is a time-out)
       before more are queued: a hung collective then stops this rank here, with one step's
       forward and backward queued behind it, instead of the host blocking in a kernel launch
       once the stream's launch queue is full. The device stays busy: this step's forward and
       backward are already queued. */
    if (dt->coll_queued) FR_TRY(fr_nccl_wait_event(dt->comm, dt->coll_ev, "waiting for the previous step's all-reduce"));
    FR_TRY(per_bucket(dt, average_grad, b, s));
    FR_TRY(fr_nccl_group_start(dt->comm));
    fr_status st = fr_nccl_allreduce(dt->comm, b->loss_sum, 1, FR_NCCL_F32, FR_NCCL_AVG, s);
    if (st == FR_OK && b->n_amax > 0) st = fr_nccl_allreduce(dt->comm, b->amax, (size_t)b->n_amax, FR_NCCL_F32, FR_NCCL_MAX, s);
    if (st == FR_OK) st = fr_nccl_allreduce(dt->comm, b->amax_bad, 1, FR_NCCL_I32, FR_NCCL_MAX, s);
    if (st == FR_OK) st = fr_nccl_allreduce(dt->comm, b->error_words, 4, FR_NCCL_I32, FR_NCCL_MAX, s);
    fr_status ge = fr_nccl_group_end(dt->comm);
    FR_TRY(st);
    FR_TRY(ge);
    return mark_queued(dt, s);
}

fr_status fr_dist_train_share_params(fr_dist_train *dt, const fr_mt_entry *entries, int n, cudaStream_t s)
{
    (void)n;
    if (!dt->owner) return FR_OK;
    FR_TRY(per_bucket(dt, share_param, entries, s));
    return mark_queued(dt, s); /* the next step's wait covers these broadcasts too */
}

fr_status fr_dist_train_gather_slot(fr_dist_train *dt, int i, const float *src, int64_t numel, float *host,
                                    cudaStream_t s)
{
    if (numel <= 0) return FR_OK;
    const int mine = dt->owner[i] == fr_nccl_rank(dt->comm);
    if (mine && cudaMemcpyAsync(dt->d_tmp, src, (size_t)numel * sizeof(float), cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        return fr_error(FR_ERR_DEVICE, "gathering optimizer state: device copy failed");
    FR_TRY(fr_nccl_broadcast(dt->comm, dt->d_tmp, (size_t)numel, FR_NCCL_F32, dt->owner[i], s));
    if (cudaMemcpyAsync(host, dt->d_tmp, (size_t)numel * sizeof(float), cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaEventRecord(dt->ev, s) != cudaSuccess)
        return fr_error(FR_ERR_DEVICE, "gathering optimizer state: copy to the host failed");
    return fr_nccl_wait_event(dt->comm, dt->ev, "gathering optimizer state");
}

fr_status fr_dist_train_wait(fr_dist_train *dt, cudaEvent_t ev, const char *what)
{
    return fr_nccl_wait_event(dt->comm, ev, what);
}
