/* The trainer on a CUDA device (see cuda_train.h). */
#include "runtime/cuda/cuda_train.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "runtime/cuda/cuda_exec.h"
#include "runtime/cuda/cuda_graph.h"
#include "runtime/cuda/cuda_train_kernels.h"
#include "runtime/cuda/dist_train.h"
#include "graph/fp8_format.h"
#include "runtime/train/optim_lowp.h"

struct fr_cuda_train {
    fr_cuda_ctx *c;
    fr_cuda_exec *ex, *eval_ex;
    char name[320];
    /* parameters */
    int n_params;
    fr_mt_entry *entries;      /* host copy of the table */
    fr_mt_entry *d_entries;    /* device table */
    fr_mt_chunk *d_chunks;
    int n_chunks;
    float *opt_state;          /* device: optimizer slots of every parameter (bytes in the state dtype) */
    float *opt_scales;         /* device: fp8 state block scales */
    float *acc;                /* device: accumulated gradients (those not accumulated in place), when k > 1 */
    int acc_ready;             /* entries[].acc set (ensure_acc) */
    size_t acc_bytes;
    /* gradients accumulated in place (fr_cuda_train_inplace_plan): per parameter 1 when its
       weight-gradient GEMM adds into the executor's held gradient for micro-batches after the
       first; the separate accumulation covers the others' chunks only (d_acc_chunks) */
    unsigned char *inplace;
    int n_inplace;
    fr_mt_chunk *d_acc_chunks;
    int n_acc_chunks;
    double *d_partial;         /* per chunk sums of squares */
    /* step scalars */
    float *d_loss_sum;
    int *d_amax_bad;
    long long *d_opt_steps;    /* optimizer steps taken, counted on the device (k_check) */
    fr_step_scalars *d_scalars;
    fr_step_scalars *h_ring;   /* pinned: one slot per queued step (FR_TRAIN_MAX_QUEUED) */
    cudaEvent_t ring_ev[FR_TRAIN_MAX_QUEUED]; /* recorded after each slot's copy */
    /* FP8: amaxes of the states (first n_states) and of the watched current/block operands */
    int n_amax;
    const float **d_amax_ptrs;
    float *d_step_amax;
    fr_scaling_dev sd;         /* delayed-scaling state on the device */
    float **d_scale_out;
    /* eval outputs downloaded for fr_cuda_train_eval_output */
    fr_tensor **eval_host;
    int n_eval_host;
    int host_stale;            /* the device holds newer parameters/state than the host */
    fr_dist_train *dist;       /* data parallel (dist_train.h), or NULL */
    fr_mt_chunk *d_opt_chunks; /* sharded optimizer: the chunks of the parameters this rank owns */
    int n_opt_chunks;
    fr_mt_chunk *d_norm_chunks; /* sharded gradients: every chunk, those of other ranks' parameters empty */
    size_t extra_bytes;
};

/* a queued step's update is one of FR_OPT_WINDOW optimizer step counts (cuda_train_kernels.h) */
_Static_assert(FR_OPT_WINDOW >= FR_TRAIN_MAX_QUEUED, "the bias-correction window must cover every queued step");

#define CU(call)                                                                              \
    do {                                                                                      \
        if (st == FR_OK) {                                                                    \
            cudaError_t ce_ = (call);                                                         \
            if (ce_ != cudaSuccess) st = fr_cuda_status(ce_, #call, __FILE__, __LINE__);      \
        }                                                                                     \
    } while (0)

static fr_status dev_alloc(fr_cuda_train *d, void **p, size_t bytes)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return fr_error(FR_ERR_DEVICE, "out of device memory: %zu MiB more needed on %s (%s)", bytes >> 20, d->name,
                        cudaGetErrorString(e));
    d->extra_bytes += bytes;
    return FR_OK;
}

void fr_cuda_train_free(fr_cuda_train *d)
{
    if (!d) return;
    if (fr_dist_train_broken(d->dist)) { /* aborted collectives: waiting could hang; the process ends */
        fr_dist_train_free(d->dist);
        free(d->entries);
        free(d->inplace);
        free(d);
        return;
    }
    if (d->c) cudaStreamSynchronize(d->c->stream);
    fr_cuda_exec_free(d->eval_ex);
    fr_cuda_exec_free(d->ex);
    cudaFree(d->d_entries);
    cudaFree(d->d_chunks);
    cudaFree(d->d_opt_chunks);
    cudaFree(d->d_norm_chunks);
    fr_dist_train_free(d->dist);
    cudaFree(d->opt_state);
    cudaFree(d->opt_scales);
    cudaFree(d->acc);
    cudaFree(d->d_acc_chunks);
    free(d->inplace);
    cudaFree(d->d_partial);
    cudaFree(d->d_loss_sum);
    cudaFree(d->d_amax_bad);
    cudaFree(d->d_opt_steps);
    cudaFree(d->d_scalars);
    if (d->h_ring) cudaFreeHost(d->h_ring);
    for (int i = 0; i < FR_TRAIN_MAX_QUEUED; i++)
        if (d->ring_ev[i]) cudaEventDestroy(d->ring_ev[i]);
    cudaFree((void *)d->d_amax_ptrs);
    cudaFree(d->d_step_amax);
    cudaFree(d->sd.history);
    cudaFree(d->sd.pos);
    cudaFree(d->sd.updates);
    cudaFree(d->sd.scale);
    cudaFree(d->sd.fp8_max);
    cudaFree(d->d_scale_out);
    free(d->entries);
    for (int i = 0; i < d->n_eval_host; i++) fr_tensor_free(d->eval_host[i]);
    free(d->eval_host);
    fr_cuda_ctx_free(d->c);
    free(d);
}

static float *exec_f32(fr_cuda_exec *ex, int vid)
{
    fr_tensor *t = fr_cuda_exec_value(ex, vid);
    return t ? (float *)t->data : NULL;
}

/* whether this rank keeps (and updates) parameter i's optimizer state */
static int owns(const fr_cuda_train *d, const fr_trainer *t, int i)
{
    int o = fr_dist_train_owner(d->dist, i);
    return o < 0 || o == t->opt.rank;
}

/* sharded optimizer: the update runs over the owned parameters' chunks only */
static fr_status opt_chunks(fr_trainer *t, fr_cuda_train *d)
{
    fr_status st = FR_OK;
    int n = 0;
    for (int i = 0; i < t->n_params; i++)
        if (owns(d, t, i)) n += (int)((t->params[i].numel + FR_MT_CHUNK - 1) / FR_MT_CHUNK);
    fr_mt_chunk *chunks = fr_malloc((size_t)(n ? n : 1) * sizeof *chunks, "optimizer shard");
    if (!chunks) return FR_ERR_OOM;
    int c = 0;
    for (int i = 0; i < t->n_params; i++)
        for (int64_t s = 0; owns(d, t, i) && s < t->params[i].numel; s += FR_MT_CHUNK)
            chunks[c++] = (fr_mt_chunk){i, s, t->params[i].numel - s < FR_MT_CHUNK ? t->params[i].numel - s : FR_MT_CHUNK};
    d->n_opt_chunks = n;
    st = dev_alloc(d, (void **)&d->d_opt_chunks, (size_t)(n ? n : 1) * sizeof *chunks);
    CU(cudaMemcpy(d->d_opt_chunks, chunks, (size_t)n * sizeof *chunks, cudaMemcpyHostToDevice));
    free(chunks);
    if (st != FR_OK || !fr_dist_train_zero2(d->dist)) return st;
    /* the norm's chunks: the same places as d_chunks (the per-chunk sums are added across ranks),
       each rank summing its own parameters only */
    chunks = fr_malloc((size_t)(d->n_chunks ? d->n_chunks : 1) * sizeof *chunks, "optimizer shard");
    if (!chunks) return FR_ERR_OOM;
    c = 0;
    for (int i = 0; i < t->n_params; i++)
        for (int64_t s = 0; s < t->params[i].numel; s += FR_MT_CHUNK)
            chunks[c++] = (fr_mt_chunk){i, s, !owns(d, t, i) ? 0 : t->params[i].numel - s < FR_MT_CHUNK ? t->params[i].numel - s : FR_MT_CHUNK};
    st = dev_alloc(d, (void **)&d->d_norm_chunks, (size_t)(c ? c : 1) * sizeof *chunks);
    CU(cudaMemcpy(d->d_norm_chunks, chunks, (size_t)c * sizeof *chunks, cudaMemcpyHostToDevice));
    free(chunks);
    return st;
}

static fr_status build_params(fr_trainer *t, fr_cuda_train *d)
{
    fr_status st = FR_OK;
    const int slots = fr_optimizer_state_count(t->optim);
    d->n_params = t->n_params;
    d->entries = fr_calloc((size_t)(t->n_params ? t->n_params : 1), sizeof *d->entries, "device parameters");
    if (!d->entries) return FR_ERR_OOM;
    int n_chunks = 0;
    for (int i = 0; i < t->n_params; i++) n_chunks += (int)((t->params[i].numel + FR_MT_CHUNK - 1) / FR_MT_CHUNK);
    /* the optimizer's slots in its state dtype (runtime/train/optim_lowp.h), for the parameters whose
       state lives here (all unless sharded): per parameter, slot 0 then slot 1, each 4-byte
       aligned; fp8 block scales in a second arena. FR_MT_CHUNK is a multiple of FR_LOWP_BLOCK,
       so no fp8 block straddles two chunks. */
    const fr_opt_state_dtype sd = fr_optimizer_state_dtype(t->optim);
    const size_t es = sd == FR_OPT_STATE_F32 ? 4 : sd == FR_OPT_STATE_BF16 ? 2 : 1;
    size_t bytes = 0, nscales = 0;
    for (int i = 0; i < t->n_params; i++) {
        if (!owns(d, t, i)) continue;
        bytes += (((size_t)t->params[i].numel * es + 3) & ~(size_t)3) * (size_t)slots;
        if (sd == FR_OPT_STATE_FP8) nscales += (size_t)((t->params[i].numel + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK) * (size_t)slots;
    }
    if (bytes) FR_TRY(dev_alloc(d, (void **)&d->opt_state, bytes));
    if (bytes) CU(cudaMemset(d->opt_state, 0, bytes));
    if (nscales) FR_TRY(dev_alloc(d, (void **)&d->opt_scales, nscales * sizeof(float)));
    if (nscales) CU(cudaMemset(d->opt_scales, 0, nscales * sizeof(float)));
    unsigned char *cur = (unsigned char *)d->opt_state;
    float *scur = d->opt_scales;
    for (int i = 0; st == FR_OK && i < t->n_params; i++) {
        const tr_param *p = &t->params[i];
        fr_mt_entry *e = &d->entries[i];
        e->p = exec_f32(d->ex, p->value);
        fr_tensor *gt = fr_cuda_exec_output_at(d->ex, p->grad_out);
        e->g = gt ? gt->data : NULL;
        if (!e->p || !e->g)
            return fr_error(FR_ERR_INTERNAL, "device trainer: parameter '%s' or its gradient is not on the device",
                            t->g->values[p->value].name);
        e->n = p->numel;
        e->decay = fr_optimizer_param_decays(t->optim, i);
        if (!owns(d, t, i)) continue;
        const size_t sb = ((size_t)p->numel * es + 3) & ~(size_t)3;
        const int64_t nb = (p->numel + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
        if (slots > 0) e->s0 = (float *)cur;
        if (slots > 1) e->s1 = (float *)(cur + sb);
        cur += sb * (size_t)slots;
        if (sd == FR_OPT_STATE_FP8) {
            e->sc0 = scur;
            e->sc1 = scur + nb;
            scur += nb * slots;
        }
    }
    fr_mt_chunk *chunks = fr_malloc((size_t)(n_chunks ? n_chunks : 1) * sizeof *chunks, "device parameters");
    if (!chunks) return FR_ERR_OOM;
    int c = 0;
    for (int i = 0; i < t->n_params; i++)
        for (int64_t s = 0; s < t->params[i].numel; s += FR_MT_CHUNK)
            chunks[c++] = (fr_mt_chunk){i, s, t->params[i].numel - s < FR_MT_CHUNK ? t->params[i].numel - s : FR_MT_CHUNK};
    d->n_chunks = n_chunks;
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_chunks, (size_t)(n_chunks ? n_chunks : 1) * sizeof *chunks);
    CU(cudaMemcpy(d->d_chunks, chunks, (size_t)n_chunks * sizeof *chunks, cudaMemcpyHostToDevice));
    free(chunks);
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_entries, (size_t)(t->n_params ? t->n_params : 1) * sizeof(fr_mt_entry));
    CU(cudaMemcpy(d->d_entries, d->entries, (size_t)t->n_params * sizeof(fr_mt_entry), cudaMemcpyHostToDevice));
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_partial, (size_t)(n_chunks ? n_chunks : 1) * sizeof(double));
    if (st == FR_OK && fr_dist_train_owner(d->dist, 0) >= 0) st = opt_chunks(t, d);
    if (st == FR_OK && d->dist) {
        fr_dist_tables tb = {d->ex, d->entries, d->d_entries, d->d_chunks, d->d_opt_chunks, d->c->stream};
        st = fr_dist_train_attach(d->dist, t, &tb);
    }
    return st;
}

/* the accumulation buffers, on the first step with more than one micro-batch */
static fr_status ensure_acc(fr_trainer *t, fr_cuda_train *d)
{
    if (d->acc_ready) return FR_OK;
    /* sharded gradients: only the owner accumulates (dist_train.h); a gradient accumulated in
       place is its own accumulator (the executor holds it across micro-batches) */
    const int z2 = fr_dist_train_zero2(d->dist);
    int64_t total = 0;
    for (int i = 0; i < t->n_params; i++)
        total += (!z2 || owns(d, t, i)) && !(d->inplace && d->inplace[i]) ? t->params[i].numel : 0;
    if (total) FR_TRY(dev_alloc(d, (void **)&d->acc, (size_t)total * sizeof(float)));
    d->acc_bytes = (size_t)total * sizeof(float);
    int64_t off = 0;
    for (int i = 0; i < t->n_params; i++) {
        if (z2 && !owns(d, t, i)) continue;
        if (d->inplace && d->inplace[i]) {
            d->entries[i].acc = (float *)d->entries[i].g;
            continue;
        }
        d->entries[i].acc = d->acc + off;
        off += t->params[i].numel;
    }
    d->acc_ready = 1;
    fr_status st = FR_OK;
    CU(cudaMemcpy(d->d_entries, d->entries, (size_t)t->n_params * sizeof(fr_mt_entry), cudaMemcpyHostToDevice));
    CU(cudaDeviceSynchronize()); /* legacy stream copy before the step's non-blocking stream */
    return st;
}

/* The executor, holding the gradients accumulated in place (fr_cuda_exec_new_held), and the
 * chunks of the gradients that the separate pass still accumulates. */
static fr_status build_exec(fr_trainer *t, fr_cuda_train *d)
{
    d->inplace = fr_calloc((size_t)(t->n_params ? t->n_params : 1), 1, "device parameters");
    int *vids = fr_malloc((size_t)(t->n_params ? t->n_params : 1) * sizeof *vids, "device parameters");
    if (!d->inplace || !vids) {
        free(vids);
        return FR_ERR_OOM;
    }
    d->n_inplace = fr_cuda_train_inplace_plan(t, d->inplace, vids);
    fr_status st = d->n_inplace ? fr_cuda_exec_new_held(d->c, t->g, vids, d->n_inplace, &d->ex)
                                : fr_cuda_exec_new(d->c, t->g, NULL, &d->ex);
    free(vids);
    return st;
}

static fr_status build_acc_chunks(fr_trainer *t, fr_cuda_train *d)
{
    if (!d->n_inplace) return FR_OK;
    fr_status st = FR_OK;
    int n = 0;
    for (int i = 0; i < t->n_params; i++)
        if (!d->inplace[i]) n += (int)((t->params[i].numel + FR_MT_CHUNK - 1) / FR_MT_CHUNK);
    fr_mt_chunk *chunks = fr_malloc((size_t)(n ? n : 1) * sizeof *chunks, "device parameters");
    if (!chunks) return FR_ERR_OOM;
    int c = 0;
    for (int i = 0; i < t->n_params; i++)
        for (int64_t s = 0; !d->inplace[i] && s < t->params[i].numel; s += FR_MT_CHUNK)
            chunks[c++] =
                (fr_mt_chunk){i, s, t->params[i].numel - s < FR_MT_CHUNK ? t->params[i].numel - s : FR_MT_CHUNK};
    d->n_acc_chunks = n;
    st = dev_alloc(d, (void **)&d->d_acc_chunks, (size_t)(n ? n : 1) * sizeof *chunks);
    CU(cudaMemcpy(d->d_acc_chunks, chunks, (size_t)n * sizeof *chunks, cudaMemcpyHostToDevice));
    free(chunks);
    return st;
}

static fr_status build_fp8(fr_trainer *t, fr_cuda_train *d)
{
    fr_status st = FR_OK;
    d->n_amax = t->n_states + t->n_watch;
    if (d->n_amax == 0) return FR_OK;
    const float **ptrs = fr_calloc((size_t)d->n_amax, sizeof *ptrs, "device fp8 state");
    float **outs = fr_calloc((size_t)(t->n_states ? t->n_states : 1), sizeof *outs, "device fp8 state");
    float *fmax = fr_calloc((size_t)(t->n_states ? t->n_states : 1), sizeof *fmax, "device fp8 state");
    if (!ptrs || !outs || !fmax) st = FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < d->n_amax; i++) {
        int out = i < t->n_states ? t->states[i].amax_out : t->watch[i - t->n_states].amax_out;
        fr_tensor *a = out >= 0 ? fr_cuda_exec_output_at(d->ex, out) : NULL;
        /* a scaling state whose amax the graph never computes (a frozen LoRA base Linear's
           weight and output gradient: no backward node reads them) keeps its scale and history,
           as on the CPU: a NULL pointer here, skipped by the kernels */
        if (!a && !(i < t->n_states && out < 0)) {
            st = fr_error(FR_ERR_INTERNAL, "device trainer: an FP8 amax is not a graph output");
            break;
        }
        ptrs[i] = a ? a->data : NULL;
    }
    for (int i = 0; st == FR_OK && i < t->n_states; i++) {
        outs[i] = exec_f32(d->ex, t->states[i].st->scale_value);
        fmax[i] = fr_fp8_max(t->states[i].sc.p.fmt);
        if (!outs[i]) st = fr_error(FR_ERR_INTERNAL, "device trainer: scale '%s' is not on the device",
                                    t->g->values[t->states[i].st->scale_value].name);
    }
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_amax_ptrs, (size_t)d->n_amax * sizeof *ptrs);
    CU(cudaMemcpy((void *)d->d_amax_ptrs, ptrs, (size_t)d->n_amax * sizeof *ptrs, cudaMemcpyHostToDevice));
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_step_amax, (size_t)d->n_amax * sizeof(float));
    int n = t->n_states;
    if (n && st == FR_OK) {
        const fr_fp8_scaling_params *p = &t->states[0].sc.p;
        d->sd.history_len = p->history_len;
        d->sd.interval = p->interval;
        d->sd.algo = p->algo == FR_AMAX_MOST_RECENT;
        d->sd.margin = p->margin;
        st = dev_alloc(d, (void **)&d->sd.history, (size_t)n * (size_t)p->history_len * sizeof(float));
        if (st == FR_OK) st = dev_alloc(d, (void **)&d->sd.pos, (size_t)n * sizeof(int));
        if (st == FR_OK) st = dev_alloc(d, (void **)&d->sd.updates, (size_t)n * sizeof(long long));
        if (st == FR_OK) st = dev_alloc(d, (void **)&d->sd.scale, (size_t)n * sizeof(float));
        if (st == FR_OK) st = dev_alloc(d, (void **)&d->sd.fp8_max, (size_t)n * sizeof(float));
        if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_scale_out, (size_t)n * sizeof(float *));
        CU(cudaMemcpy(d->sd.fp8_max, fmax, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(d->d_scale_out, outs, (size_t)n * sizeof(float *), cudaMemcpyHostToDevice));
        d->sd.scale_out = d->d_scale_out;
    }
    free(ptrs);
    free(outs);
    free(fmax);
    return st;
}

fr_status fr_cuda_train_new(fr_trainer *t, int device, fr_cuda_train **out)
{
    *out = NULL;
    fr_cuda_train *d = fr_calloc(1, sizeof *d, "device trainer");
    if (!d) return FR_ERR_OOM;
    fr_status st = fr_cuda_ctx_create(device, &d->c);
    if (st == FR_OK) st = fr_cuda_ctx_set_attention(d->c, t->opt.attention); /* --attention, before any executor */
    if (st == FR_OK) d->c->fp8_fast_accum = t->opt.fp8_fast_accum;
    if (st == FR_OK) d->c->codes_only = tr_lora_codes_only(t); /* the frozen base as its codes only */
    if (st == FR_OK) d->c->weight_cache_off = !tr_weight_cache(t); /* before any executor plans it */
    /* packed SFT: the examples a window holds, and its padding run, each a cuDNN sequence */
    if (st == FR_OK && t->opt.sft && !t->opt.sft_padded && t->opt.sft_max_examples > 0)
        d->c->ragged_per_window = t->opt.sft_max_examples + 1;
    if (st == FR_OK && t->opt.deterministic) { /* before any executor plans cuDNN or GEMMs */
        d->c->deterministic = 1;
        d->c->gemm_tune = 0; /* timed picks can differ between processes on a near tie */
    }
    if (st == FR_OK) {
        snprintf(d->name, sizeof d->name, "%s (compute capability %d.%d)", d->c->name, d->c->cc_major, d->c->cc_minor);
        int cc = d->c->cc_major * 10 + d->c->cc_minor;
        if (t->has_report && t->report.n_fp8 > 0 && cc < 89)
            st = fr_error(FR_ERR_UNSUPPORTED,
                          "FP8 training needs a GPU of compute capability 8.9 or newer (Ada, Hopper); %s has %d.%d. "
                          "Use --precision bf16, or --device cpu",
                          d->c->name, d->c->cc_major, d->c->cc_minor);
        if (st == FR_OK && t->has_report && t->report.n_fp8 > 0 && cublasLtGetVersion() < 120000)
            st = fr_error(FR_ERR_UNSUPPORTED, "FP8 GEMMs need cuBLASLt 12.0 or newer; this one is %zu",
                          cublasLtGetVersion());
    }
    if (st == FR_OK && !t->opt.eval_only && t->opt.world_size > 0) st = fr_dist_train_new(t, &d->dist);
    /* the prediction (runtime/train/train_memory.h) against the free memory, before any executor
       allocates: too large fails here with the sizes and what would fit. The context's
       workspace is allocated already and counted in the prediction. FP8RUN_MEMORY_CHECK=0 skips. */
    const char *mc = fr_env_get(FR_ENV_MEMORY_CHECK);
    if (st == FR_OK && !t->opt.eval_only && !(mc && strcmp(mc, "0") == 0)) {
        size_t fr = 0, tot = 0;
        CU(cudaMemGetInfo(&fr, &tot));
        if (st == FR_OK) st = tr_memory_check(t, fr + d->c->workspace_bytes);
    }
    if (st == FR_OK && !t->opt.eval_only) st = build_exec(t, d);
    if (st == FR_OK && !t->opt.eval_only) st = build_params(t, d);
    if (st == FR_OK && !t->opt.eval_only) st = build_acc_chunks(t, d);
    if (st == FR_OK && !t->opt.eval_only) st = build_fp8(t, d);
    int graph = 0;
    if (st == FR_OK) st = fr_cuda_train_graph_wanted(&t->opt, &graph);
    if (st == FR_OK && d->ex && graph)
        st = fr_cuda_exec_use_graph(d->ex, d->dist ? "data parallel (all-reduces are launched between nodes)" : NULL);
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_loss_sum, sizeof(float));
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_amax_bad, sizeof(int));
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_opt_steps, sizeof(long long));
    if (st == FR_OK) st = dev_alloc(d, (void **)&d->d_scalars, sizeof(fr_step_scalars));
    CU(cudaMallocHost((void **)&d->h_ring, FR_TRAIN_MAX_QUEUED * sizeof(fr_step_scalars)));
    for (int i = 0; i < FR_TRAIN_MAX_QUEUED; i++) CU(cudaEventCreateWithFlags(&d->ring_ev[i], cudaEventDisableTiming));
    if (st != FR_OK) {
        fr_cuda_train_free(d);
        return st;
    }
    void *was = t->be_state;
    t->be_state = d; /* what push reads */
    st = fr_cuda_train_push(t); /* scaling state and optimizer state (fresh, or restored later) */
    t->be_state = was;
    if (st != FR_OK) {
        fr_cuda_train_free(d);
        return st;
    }
    *out = d;
    return FR_OK;
}

const char *fr_cuda_train_device_name(const fr_cuda_train *d) { return d->name; }
const struct fr_cuda_ctx *fr_cuda_train_ctx(const fr_cuda_train *d) { return d->c; }
long long fr_cuda_train_weight_casts(const fr_cuda_train *d) { return d->c->weight_casts; }

void fr_cuda_train_grad_inplace(const fr_cuda_train *d, fr_cuda_grad_inplace_info *out)
{
    out->params = d->n_inplace;
    out->gemms = d->c->wgrad_accumulated;
    out->acc_bytes = d->acc_bytes;
    out->held_bytes = d->ex ? fr_cuda_exec_held_bytes(d->ex) : 0;
    out->arena_bytes = d->ex ? fr_cuda_exec_arena_bytes(d->ex) : 0;
}

void fr_cuda_train_graph(const fr_cuda_train *d, char *note, size_t n, long long *captures, long long *replays)
{
    const fr_cuda_graph *g = d->ex ? fr_cuda_exec_graph(d->ex) : NULL;
    if (note && n) fr_cuda_graph_note(g, note, n);
    fr_cuda_graph_counts(g, captures, replays, NULL);
}

fr_status fr_cuda_train_profile(const fr_cuda_train *d, char **text)
{
    *text = NULL;
    return d->ex ? fr_cuda_exec_profile(d->ex, text) : FR_OK;
}

size_t fr_cuda_train_device_bytes(const fr_cuda_train *d)
{
    size_t b = d->extra_bytes + d->c->workspace_bytes;
    if (d->ex)
        b += fr_cuda_exec_arena_bytes(d->ex) + fr_cuda_exec_const_bytes(d->ex) + fr_cuda_exec_input_bytes(d->ex) +
             fr_cuda_exec_persist_bytes(d->ex);
    if (d->eval_ex)
        b += fr_cuda_exec_arena_bytes(d->eval_ex) + fr_cuda_exec_const_bytes(d->eval_ex) +
             fr_cuda_exec_input_bytes(d->eval_ex) + fr_cuda_exec_persist_bytes(d->eval_ex);
    return b;
}

fr_status fr_cuda_train_mem_info(const fr_cuda_train *d, size_t *used, size_t *total)
{
    size_t fr = 0, tot = 0;
    (void)d;
    FR_CUDA_TRY(cudaMemGetInfo(&fr, &tot));
    *used = tot - fr;
    *total = tot;
    return FR_OK;
}

/* ---- host <-> device ---- */

/* One optimizer slot of parameter i, in its stored dtype, with its fp8 block scales. */
static fr_status copy_state(fr_trainer *t, fr_cuda_train *d, int i, int s, int to_device)
{
    fr_status st = FR_OK;
    float *scales;
    void *host = fr_optimizer_state_raw(t->optim, i, s, &scales);
    const fr_mt_entry *e = &d->entries[i];
    void *dev = s ? (void *)e->s1 : (void *)e->s0;
    const int64_t n = t->params[i].numel;
    const fr_opt_state_dtype sd = fr_optimizer_state_dtype(t->optim);
    const size_t bytes = (size_t)n * (sd == FR_OPT_STATE_F32 ? 4u : sd == FR_OPT_STATE_BF16 ? 2u : 1u);
    const enum cudaMemcpyKind k = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    CU(cudaMemcpy(to_device ? dev : host, to_device ? host : dev, bytes, k));
    if (scales) {
        float *dsc = s ? e->sc1 : e->sc0;
        const size_t sb = (size_t)((n + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK) * sizeof(float);
        CU(cudaMemcpy(to_device ? (void *)dsc : (void *)scales, to_device ? (void *)scales : (void *)dsc, sb, k));
    }
    return st;
}

fr_status fr_cuda_train_pull(fr_trainer *t)
{
    fr_cuda_train *d = t->be_state;
    if (!d || !d->host_stale || !d->ex) return FR_OK;
    fr_status st = fr_cuda_exec_sync(d->ex);
    const int slots = fr_optimizer_state_count(t->optim);
    for (int i = 0; st == FR_OK && i < t->n_params; i++) {
        st = fr_cuda_exec_download_constant(d->ex, t->params[i].value);
        for (int s = 0; s < slots && st == FR_OK; s++) {
            if (fr_dist_train_owner(d->dist, i) >= 0) /* sharded (fp32 state only): from its owner */
                st = fr_dist_train_gather_slot(d->dist, i, s ? d->entries[i].s1 : d->entries[i].s0,
                                               t->params[i].numel, fr_optimizer_state(t->optim, i, s), d->c->stream);
            else
                st = copy_state(t, d, i, s, 0);
        }
    }
    for (int i = 0; st == FR_OK && i < t->n_states; i++) {
        fr_fp8_scaling *sc = &t->states[i].sc;
        long long upd = 0;
        CU(cudaMemcpy(sc->history, d->sd.history + (size_t)i * (size_t)sc->p.history_len,
                      (size_t)sc->p.history_len * sizeof(float), cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(&sc->pos, d->sd.pos + i, sizeof(int), cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(&upd, d->sd.updates + i, sizeof upd, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(&sc->scale, d->sd.scale + i, sizeof(float), cudaMemcpyDeviceToHost));
        sc->updates = upd;
        sc->scale_inv = 1.0f / sc->scale;
        ((float *)t->g->values[t->states[i].st->scale_value].constant->data)[0] = sc->scale;
    }
    if (st == FR_OK && d->n_amax) {
        float *a = fr_malloc((size_t)d->n_amax * sizeof(float), "fp8 amaxes");
        if (!a) return FR_ERR_OOM;
        CU(cudaMemcpy(a, d->d_step_amax, (size_t)d->n_amax * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; st == FR_OK && i < t->n_states; i++) /* < 0: no amax computed (kept) */
            if (a[i] >= 0.0f) t->states[i].step_amax = a[i];
        for (int i = 0; st == FR_OK && i < t->n_watch; i++) t->watch[i].step_amax = a[t->n_states + i];
        free(a);
    }
    if (st == FR_OK) d->host_stale = 0;
    return st;
}

fr_status fr_cuda_train_push(fr_trainer *t)
{
    fr_cuda_train *d = t->be_state;
    if (!d) return FR_OK;
    if (!d->ex) { /* evaluation only: the eval executor uploads the host values when rebuilt */
        fr_cuda_exec_free(d->eval_ex);
        d->eval_ex = NULL;
        return FR_OK;
    }
    fr_status st = fr_cuda_exec_sync(d->ex);
    const int slots = fr_optimizer_state_count(t->optim);
    for (int i = 0; st == FR_OK && i < t->n_params; i++) {
        st = fr_cuda_exec_upload_constant(d->ex, t->params[i].value);
        for (int s = 0; s < slots && st == FR_OK && owns(d, t, i); s++) st = copy_state(t, d, i, s, 1);
    }
    for (int i = 0; st == FR_OK && i < t->n_states; i++) {
        const fr_fp8_scaling *sc = &t->states[i].sc;
        long long upd = sc->updates;
        CU(cudaMemcpy(d->sd.history + (size_t)i * (size_t)sc->p.history_len, sc->history,
                      (size_t)sc->p.history_len * sizeof(float), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(d->sd.pos + i, &sc->pos, sizeof(int), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(d->sd.updates + i, &upd, sizeof upd, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(d->sd.scale + i, &sc->scale, sizeof(float), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(exec_f32(d->ex, t->states[i].st->scale_value), &sc->scale, sizeof(float),
                      cudaMemcpyHostToDevice));
    }
    if (st == FR_OK) { /* the step count the next update's bias correction starts from */
        long long n = (long long)fr_optimizer_step_count(t->optim);
        CU(cudaMemcpy(d->d_opt_steps, &n, sizeof n, cudaMemcpyHostToDevice));
    }
    /* the copies above used the legacy stream; the step runs on a non-blocking one */
    CU(cudaDeviceSynchronize());
    fr_cuda_weights_changed(d->c); /* parameters and scales came from the host (also on failure) */
    fr_cuda_exec_reprime(d->ex);      /* frozen weights' codes: made again with the scales pushed */
    fr_cuda_exec_reprime(d->eval_ex);
    if (st == FR_OK) d->host_stale = 0;
    return st;
}

/* ---- steps ---- */

static fr_status feed(fr_trainer *t, fr_cuda_exec *ex, tr_input *ins, int n, const int64_t *windows)
{
    FR_TRY(tr_fill_inputs(t, ins, n, windows));
    for (int i = 0; i < n; i++) FR_TRY(fr_cuda_exec_set_input(ex, ins[i].name, ins[i].t));
    return FR_OK;
}

static void set_reason(fr_train_stats *s, const char *msg)
{
    if (!s->reason[0]) snprintf(s->reason, sizeof s->reason, "%s", msg);
}

fr_status fr_cuda_train_queue(fr_trainer *t, const int64_t *windows, int k, double lr, int slot)
{
    fr_cuda_train *d = t->be_state;
    fr_status st = FR_OK;
    cudaStream_t s = d->c->stream;
    const int64_t per = t->opt.batch * (t->opt.seq_len + 1);
    if (slot < 0 || slot >= FR_TRAIN_MAX_QUEUED)
        return fr_error(FR_ERR_INTERNAL, "device trainer: statistics slot %d outside [0, %d)", slot, FR_TRAIN_MAX_QUEUED);
    if (k > 1) FR_TRY(ensure_acc(t, d));
    const float *loss = exec_f32(d->ex, t->g->outputs[t->loss_out]);
    CU(cudaMemsetAsync(d->d_amax_bad, 0, sizeof(int), s));
    /* in place: micro-batches after the first add their weight gradients into the held ones in
       the GEMMs; the separate pass accumulates the other gradients only */
    const int inplace = k > 1 && d->n_inplace > 0;
    const fr_mt_chunk *acc_chunks = inplace ? d->d_acc_chunks : d->d_chunks;
    const int n_acc_chunks = inplace ? d->n_acc_chunks : d->n_chunks;
    for (int m = 0; st == FR_OK && m < k; m++) {
        st = feed(t, d->ex, t->inputs, t->n_inputs, windows + (int64_t)m * per);
        if (st == FR_OK && inplace) st = fr_cuda_exec_set_accumulate(d->ex, m > 0);
        /* data parallel: this micro-batch's gradient buckets go out during (overlap) or after
           its backward pass, accumulating as they go (dist_train.h) */
        const int out = d->dist && fr_dist_train_arm(d->dist, m, k);
        if (st == FR_OK) st = fr_cuda_exec_run(d->ex);
        if (st == FR_OK && out) st = fr_dist_train_flush(d->dist);
        CU(fr_cuda_micro_scalars(loss, d->d_loss_sum, m == 0, d->d_amax_ptrs, d->n_amax, d->d_step_amax, d->d_amax_bad, s));
        if (k > 1 && !out) CU(fr_cuda_mt_accumulate(acc_chunks, n_acc_chunks, d->d_entries, m == 0, s));
    }
    if (inplace) fr_ignore_status(fr_cuda_exec_set_accumulate(d->ex, 0)); /* off never fails */
    /* the gradients the norm and the optimizer read: 0 this run's; 1 the accumulated ones, which
       data parallel training divided while reducing; k the sum of k micro-batches, which they
       divide themselves as they read it (no pass of its own: at 8B 64 GB of traffic a step) */
    const int use_acc = k > 1 ? (d->dist ? 1 : k) : 0;
    if (d->dist && st == FR_OK) { /* every rank: the same loss, amaxes and flags */
        fr_dist_step_bufs b = {d->entries, t->n_params, k > 1, d->d_loss_sum, d->d_step_amax, d->n_amax, d->d_amax_bad,
                               d->c->dev_error};
        st = fr_dist_train_reduce(d->dist, &b, s);
    }
    fr_mt_chunk *ochunks = d->d_opt_chunks ? d->d_opt_chunks : d->d_chunks;
    const int n_ochunks = d->d_opt_chunks ? d->n_opt_chunks : d->n_chunks;
    const double clip = t->opt.grad_clip > 0 ? t->opt.grad_clip : 0.0;
    if (d->d_norm_chunks) { /* sharded gradients: each rank sums its own chunks (dist_train.h) */
        CU(fr_cuda_mt_sumsq(d->d_norm_chunks, d->n_chunks, d->d_entries, use_acc, d->d_partial, s));
        if (st == FR_OK) st = fr_dist_train_sum_partials(d->dist, d->d_partial, d->n_chunks);
        CU(fr_cuda_mt_check_partials(d->d_partial, d->n_chunks, d->d_loss_sum, k, d->c->dev_error, d->d_amax_bad, clip,
                                     d->d_opt_steps, d->d_scalars, s));
    } else {
        CU(fr_cuda_mt_check(d->d_chunks, d->n_chunks, d->d_entries, use_acc, d->d_partial, d->d_loss_sum, k,
                            d->c->dev_error, d->d_amax_bad, clip, d->d_opt_steps, d->d_scalars, s));
    }
    const fr_opt_config *c = fr_optimizer_config(t->optim);
    if (c->kind == FR_OPT_ADAMW) {
        /* whether the earlier queued steps were skipped is known on the device only: the bias
           corrections of every step count this update may be, the device picks its own */
        fr_adamw_args a;
        a.keep = (float)(1.0 - lr * c->weight_decay);
        a.decay_on = c->weight_decay != 0;
        a.b1 = (float)c->beta1;
        a.one_b1 = (float)(1.0 - c->beta1);
        a.b2 = (float)c->beta2;
        a.one_b2 = (float)(1.0 - c->beta2);
        a.eps = (float)c->eps;
        a.base = (long long)fr_optimizer_step_count(t->optim);
        for (int i = 0; i < FR_OPT_WINDOW; i++) {
            const double tstep = (double)(a.base + 1 + i);
            const double bc1 = 1.0 - pow(c->beta1, tstep), bc2 = 1.0 - pow(c->beta2, tstep);
            a.neg_step[i] = (float)(-(lr / bc1));
            a.bc2_sqrt[i] = (float)sqrt(bc2);
        }
        if (c->state_dtype == FR_OPT_STATE_F32 && !c->master_bf16)
            CU(fr_cuda_mt_adamw(ochunks, n_ochunks, d->d_entries, use_acc, d->d_scalars, a, s));
        else
            CU(fr_cuda_mt_adamw_lowp(ochunks, n_ochunks, d->d_entries, use_acc, d->d_scalars, a, (int)c->state_dtype,
                                     c->master_bf16, (unsigned long long)c->sr_seed, s));
    } else {
        fr_sgd_args a;
        a.wd = (float)c->weight_decay;
        a.decay_on = c->weight_decay != 0;
        a.mom = (float)c->momentum;
        a.one_damp = (float)(1.0 - c->dampening);
        a.neg_lr = (float)(-lr);
        a.momentum_on = fr_optimizer_state_count(t->optim) > 0;
        a.nesterov = c->nesterov;
        CU(fr_cuda_mt_sgd(ochunks, n_ochunks, d->d_entries, use_acc, d->d_scalars, a, s));
    }
    if (d->dist && st == FR_OK) st = fr_dist_train_share_params(d->dist, d->entries, t->n_params, s);
    if (t->n_states) CU(fr_cuda_scaling_update(d->sd, t->n_states, d->d_step_amax, d->d_scalars, s));
    /* parameters and scales may have changed: the next run converts the weights again. Also
       when the device skips the update (its decision is not known here, and one conversion per
       skipped step costs nothing worth a host read) and when queuing failed part way. */
    fr_cuda_weights_changed(d->c);
    /* the error word goes with the step's statistics and starts clean for the next step */
    CU(cudaMemcpyAsync((char *)d->d_scalars + offsetof(fr_step_scalars, err), d->c->dev_error, 4 * sizeof(int),
                       cudaMemcpyDeviceToDevice, s));
    CU(cudaMemsetAsync(d->c->dev_error, 0, 4 * sizeof(int), s));
    CU(cudaMemcpyAsync(&d->h_ring[slot], d->d_scalars, sizeof(fr_step_scalars), cudaMemcpyDeviceToHost, s));
    CU(cudaEventRecord(d->ring_ev[slot], s));
    if (st == FR_OK) d->host_stale = 1;
    return st;
}

int fr_cuda_train_done(fr_trainer *t, int slot)
{
    if (slot < 0 || slot >= FR_TRAIN_MAX_QUEUED) return 1;
    cudaError_t e = cudaEventQuery(((fr_cuda_train *)t->be_state)->ring_ev[slot]);
    return e != cudaErrorNotReady;
}

fr_status fr_cuda_train_retire(fr_trainer *t, int slot, int k, fr_train_stats *stats)
{
    fr_cuda_train *d = t->be_state;
    fr_status st = FR_OK;
    if (slot < 0 || slot >= FR_TRAIN_MAX_QUEUED)
        return fr_error(FR_ERR_INTERNAL, "device trainer: statistics slot %d outside [0, %d)", slot, FR_TRAIN_MAX_QUEUED);
    if (d->dist) /* a stuck or failed collective is an error, not a hang */
        st = fr_dist_train_wait(d->dist, d->ring_ev[slot], "waiting for a training step");
    CU(cudaEventSynchronize(d->ring_ev[slot]));
    if (st != FR_OK) return st;
    const fr_step_scalars *h = &d->h_ring[slot];
    stats->loss = h->loss_sum / k;
    stats->grad_norm = h->norm;
    if (!h->ok) {
        if (h->err[0] != 0) {
            fr_status e = fr_cuda_error_of_word(h->err, t->g);
            if (e != FR_ERR_NUMERIC) return e; /* a data error (index out of range): fail */
            set_reason(stats, fr_last_error()); /* current/block scaling met a NaN/Inf amax: skip, like the CPU */
        }
        if (!isfinite(stats->loss)) {
            char r[64];
            snprintf(r, sizeof r, "loss is %g", stats->loss);
            set_reason(stats, r);
        } else if (!isfinite(stats->grad_norm)) {
            char r[64];
            snprintf(r, sizeof r, "gradient norm is %g", stats->grad_norm);
            set_reason(stats, r);
        } else {
            set_reason(stats, "an FP8 amax is not finite");
        }
        stats->skipped = 1;
        return FR_OK;
    }
    const int64_t before = fr_optimizer_step_count(t->optim);
    if (h->tstep != (long long)before + 1)
        return fr_error(FR_ERR_INTERNAL, "device trainer: the device counted optimizer step %lld, the host %lld",
                        h->tstep, (long long)before + 1);
    return fr_optimizer_set_step_count(t->optim, h->tstep);
}

fr_status fr_cuda_train_eval(fr_trainer *t, const int64_t *windows, double *loss)
{
    fr_cuda_train *d = t->be_state;
    if (!d->eval_ex) FR_TRY(fr_cuda_exec_new(d->c, t->eval_g, d->ex, &d->eval_ex));
    FR_TRY(feed(t, d->eval_ex, t->eval_inputs, t->n_eval_inputs, windows));
    FR_TRY(fr_cuda_exec_run(d->eval_ex));
    float l = 0;
    FR_TRY(fr_cuda_exec_download(d->eval_ex, t->eval_g->outputs[t->eval_loss_out], &l, sizeof l));
    if (loss) *loss = l;
    return FR_OK;
}

const fr_tensor *fr_cuda_train_eval_output(fr_trainer *t, const char *name)
{
    fr_cuda_train *d = t->be_state;
    if (!d || !d->eval_ex || !name) return NULL;
    const fr_graph *g = t->eval_g;
    for (int i = 0; i < g->n_outputs; i++) {
        const fr_value *v = &g->values[g->outputs[i]];
        if (strcmp(v->name, name) != 0) continue;
        if (!d->eval_host) {
            d->eval_host = fr_calloc((size_t)g->n_outputs, sizeof *d->eval_host, "eval outputs");
            if (!d->eval_host) return NULL;
            d->n_eval_host = g->n_outputs;
        }
        if (!d->eval_host[i] && fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &d->eval_host[i]) != FR_OK)
            return NULL;
        if (fr_cuda_exec_download(d->eval_ex, g->outputs[i], d->eval_host[i]->data, d->eval_host[i]->nbytes) != FR_OK)
            return NULL;
        return d->eval_host[i];
    }
    return NULL;
}
