/* The device trainer's data-parallel hooks (dist_train.h). */
#include "runtime/cuda/dist_train.h"

#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "runtime/cuda/cuda_exec.h"
#include "runtime/cuda/nccl_comm.h"
#include "runtime/dist/dist.h"

struct fr_dist_train {
    fr_nccl *comm;
    fr_dist_bucket *buckets;
    int n_buckets;
    int *owner;            /* sharded: owner of each parameter; NULL otherwise */
    int zero2;             /* gradients reduced to their owners only */
    float *d_tmp;          /* sharded: a parameter's slot on its way from its owner */
    int64_t tmp_numel;
    cudaEvent_t ev;
    cudaEvent_t coll_ev;   /* recorded after the last step's reductions */
    int coll_queued;
    /* buckets (fr_dist_train_attach) */
    fr_dist_tables tb;
    int overlap;
    cudaStream_t cs;       /* communication stream (overlap) */
    cudaEvent_t ev_ready, ev_join;
    int *ready;            /* per bucket: the node after which it may start */
    int *ch_first, *ch_count; /* per bucket: its chunks in tb.chunks (DDP) or tb.own_chunks (ZeRO-2) */
    /* the armed micro-batch */
    int armed, m, k, next;
};

static size_t bucket_bytes(void)
{
    const char *e = fr_env_get(FR_ENV_DIST_BUCKET_MB);
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
    if (st == FR_OK && (o->shard_optimizer || o->shard_gradients)) {
        dt->zero2 = o->shard_gradients != 0;
        dt->owner = fr_calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *dt->owner, "optimizer shards");
        st = dt->owner ? fr_dist_partition(numel, t->n_params, o->world_size, dt->owner) : FR_ERR_OOM;
        for (int i = 0; i < t->n_params; i++)
            if (numel[i] > dt->tmp_numel) dt->tmp_numel = numel[i];
        if (st == FR_OK && cudaMalloc((void **)&dt->d_tmp, (size_t)(dt->tmp_numel ? dt->tmp_numel : 1) * sizeof(float)) != cudaSuccess)
            st = fr_error(FR_ERR_DEVICE, "out of device memory for the optimizer-state gather buffer");
    }
    if (st == FR_OK && (cudaEventCreateWithFlags(&dt->ev, cudaEventDisableTiming) != cudaSuccess ||
                        cudaEventCreateWithFlags(&dt->coll_ev, cudaEventDisableTiming) != cudaSuccess ||
                        cudaEventCreateWithFlags(&dt->ev_ready, cudaEventDisableTiming) != cudaSuccess ||
                        cudaEventCreateWithFlags(&dt->ev_join, cudaEventDisableTiming) != cudaSuccess))
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
    free(dt->ready);
    free(dt->ch_first);
    free(dt->ch_count);
    cudaFree(dt->d_tmp);
    if (dt->cs) cudaStreamDestroy(dt->cs);
    if (dt->ev) cudaEventDestroy(dt->ev);
    if (dt->coll_ev) cudaEventDestroy(dt->coll_ev);
    if (dt->ev_ready) cudaEventDestroy(dt->ev_ready);
    if (dt->ev_join) cudaEventDestroy(dt->ev_join);
    free(dt);
}

int fr_dist_train_broken(const fr_dist_train *dt) { return dt && fr_nccl_broken(dt->comm); }

int fr_dist_train_owner(const fr_dist_train *dt, int i) { return dt && dt->owner ? dt->owner[i] : -1; }

int fr_dist_train_zero2(const fr_dist_train *dt) { return dt && dt->zero2; }

/* ---- gradient buckets ---- */

static fr_status hook(void *ctx, int node);

fr_status fr_dist_train_attach(fr_dist_train *dt, const fr_trainer *t, const fr_dist_tables *tb)
{
    dt->tb = *tb;
    const char *e = fr_env_get(FR_ENV_DIST_OVERLAP);
    dt->overlap = !(e && strcmp(e, "0") == 0);
    const int n = t->n_params, nb = dt->n_buckets;
    int *touch = fr_calloc((size_t)(n ? n : 1), sizeof *touch, "gradient buckets");
    int64_t *numel = fr_calloc((size_t)(n ? n : 1), sizeof *numel, "gradient buckets");
    dt->ready = fr_calloc((size_t)(nb ? nb : 1), sizeof *dt->ready, "gradient buckets");
    dt->ch_first = fr_calloc((size_t)(nb ? nb : 1), sizeof *dt->ch_first, "gradient buckets");
    dt->ch_count = fr_calloc((size_t)(nb ? nb : 1), sizeof *dt->ch_count, "gradient buckets");
    fr_status st = touch && numel && dt->ready && dt->ch_first && dt->ch_count ? FR_OK : FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < n; i++) {
        numel[i] = t->params[i].numel;
        touch[i] = fr_cuda_exec_last_touch(tb->ex, t->g->outputs[t->params[i].grad_out]);
    }
    if (st == FR_OK) fr_dist_bucket_ready(dt->buckets, nb, touch, dt->ready);
    if (st == FR_OK)
        st = fr_dist_bucket_chunks(numel, n, dt->zero2 ? dt->owner : NULL, fr_nccl_rank(dt->comm), FR_MT_CHUNK,
                                   dt->buckets, nb, dt->ch_first, dt->ch_count);
    free(touch);
    free(numel);
    FR_TRY(st);
    if (dt->overlap) {
        /* the highest priority: a bucket's kernels start as soon as the backward lets them */
        int lo = 0, hi = 0;
        if (cudaDeviceGetStreamPriorityRange(&lo, &hi) != cudaSuccess ||
            cudaStreamCreateWithPriority(&dt->cs, cudaStreamNonBlocking, hi) != cudaSuccess)
            return fr_error(FR_ERR_DEVICE, "data parallel: cannot create the communication stream");
        fr_cuda_exec_set_hook(tb->ex, hook, dt);
    }
    return FR_OK;
}

int fr_dist_train_arm(fr_dist_train *dt, int m, int k)
{
    dt->armed = dt->zero2 || m == k - 1;
    dt->m = m;
    dt->k = k;
    dt->next = 0;
    return dt->armed;
}

/* Bucket b of the armed micro-batch on stream s (after the compute stream's work so far). */
static fr_status launch(fr_dist_train *dt, int b, cudaStream_t s)
{
    const fr_dist_bucket *bk = &dt->buckets[b];
    const fr_mt_entry *E = dt->tb.entries;
    const int acc = dt->k > 1, last = dt->m == dt->k - 1;
    if (s != dt->tb.compute && (cudaEventRecord(dt->ev_ready, dt->tb.compute) != cudaSuccess ||
                                cudaStreamWaitEvent(s, dt->ev_ready, 0) != cudaSuccess))
        return fr_error(FR_ERR_DEVICE, "data parallel: cannot order gradient bucket %d after the backward pass", b);
    const fr_mt_chunk *ch = (dt->zero2 ? dt->tb.own_chunks : dt->tb.chunks) + dt->ch_first[b];
    const int nch = dt->ch_count[b];
    cudaError_t ce = cudaSuccess;
    if (acc && !dt->zero2) { /* the last micro-batch into the sums, then the mean, as alone */
        ce = fr_cuda_mt_accumulate(ch, nch, dt->tb.d_entries, dt->m == 0, s);
        if (ce == cudaSuccess) ce = fr_cuda_mt_divide(ch, nch, dt->tb.d_entries, (float)dt->k, s);
    }
    if (ce != cudaSuccess) return fr_error(FR_ERR_DEVICE, "data parallel: gradient bucket %d: %s", b, cudaGetErrorString(ce));
    FR_TRY(fr_nccl_group_start(dt->comm));
    fr_status st = FR_OK;
    for (int j = 0; j < bk->count && st == FR_OK; j++) {
        const int i = bk->first - j;
        const fr_mt_entry *e = &E[i];
        if (e->n <= 0) continue;
        if (dt->zero2)
            st = fr_nccl_reduce(dt->comm, (float *)e->g, (size_t)e->n, FR_NCCL_F32, FR_NCCL_AVG, dt->owner[i], s);
        else
            st = fr_nccl_allreduce(dt->comm, acc ? e->acc : (float *)e->g, (size_t)e->n, FR_NCCL_F32, FR_NCCL_AVG, s);
    }
    fr_status ge = fr_nccl_group_end(dt->comm);
    FR_TRY(st);
    FR_TRY(ge);
    if (acc && dt->zero2) { /* the owner's reduced micro-batch into its sums */
        ce = fr_cuda_mt_accumulate(ch, nch, dt->tb.d_entries, dt->m == 0, s);
        if (ce == cudaSuccess && last) ce = fr_cuda_mt_divide(ch, nch, dt->tb.d_entries, (float)dt->k, s);
        if (ce != cudaSuccess) return fr_error(FR_ERR_DEVICE, "data parallel: gradient bucket %d: %s", b, cudaGetErrorString(ce));
    }
    return FR_OK;
}

static fr_status hook(void *ctx, int node)
{
    fr_dist_train *dt = ctx;
    while (dt->armed && dt->next < dt->n_buckets && dt->ready[dt->next] <= node) FR_TRY(launch(dt, dt->next++, dt->cs));
    return FR_OK;
}

fr_status fr_dist_train_flush(fr_dist_train *dt)
{
    if (!dt->armed) return FR_OK;
    cudaStream_t s = dt->overlap ? dt->cs : dt->tb.compute;
    while (dt->next < dt->n_buckets) FR_TRY(launch(dt, dt->next++, s));
    dt->armed = 0;
    if (s != dt->tb.compute && (cudaEventRecord(dt->ev_join, s) != cudaSuccess ||
                                cudaStreamWaitEvent(dt->tb.compute, dt->ev_join, 0) != cudaSuccess))
        return fr_error(FR_ERR_DEVICE, "data parallel: cannot order the optimizer after the gradient all-reduces");
    return FR_OK;
}

fr_status fr_dist_train_sum_partials(fr_dist_train *dt, double *partial, int n)
{
    return n > 0 ? fr_nccl_allreduce(dt->comm, partial, (size_t)n, FR_NCCL_F64, FR_NCCL_SUM, dt->tb.compute) : FR_OK;
}

/* One grouped collective per bucket, last parameters first: op queues parameter i's. */
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
       before more are queued: a hung collective then stops this rank here, with about one step
       queued behind it, instead of the host blocking in a kernel launch once the stream's
       launch queue is full. The device stays busy: this step's forward and backward (and its
       gradient buckets) are already queued. */
    if (dt->coll_queued) FR_TRY(fr_nccl_wait_event(dt->comm, dt->coll_ev, "waiting for the previous step's all-reduce"));
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
