/* Memory prediction of a training configuration (see train_memory.h). */
#include "runtime/train/train_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "graph/limits.h"
#include "passes/lm_head_fuse.h"
#include "runtime/dist/dist.h"
#include "runtime/exec/host_memory.h"
#include "runtime/train/train_internal.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "runtime/cuda/cuda_exec.h"
#include "runtime/cuda/cuda_train.h"
#endif

/* Data parallel with sharding (runtime/dist/dist.h): the rank holding the most keeps the optimizer
 * state of its parameters only (ZeRO-1) and, with sharded gradients (ZeRO-2), their
 * accumulation buffers only. */
static fr_status shard(const fr_trainer *t, fr_train_memory *out)
{
    const fr_train_options *o = &t->opt;
    const int n = t->n_params, W = o->world_size;
    if (W < 2 || !(o->shard_optimizer || o->shard_gradients) || o->eval_only || n == 0) return FR_OK;
    int64_t *numel = fr_malloc((size_t)n * sizeof *numel, "memory plan");
    int *owner = fr_malloc((size_t)n * sizeof *owner, "memory plan");
    fr_status st = numel && owner ? FR_OK : FR_ERR_OOM;
    for (int i = 0; st == FR_OK && i < n; i++) numel[i] = t->params[i].numel;
    if (st == FR_OK) st = fr_dist_partition(numel, n, W, owner);
    size_t state = 0, grads = 0;
    for (int r = 0; st == FR_OK && r < W; r++) {
        size_t s = 0, g = 0;
        for (int i = 0; i < n; i++)
            if (owner[i] == r) {
                s += fr_opt_state_bytes(&o->opt, numel[i]);
                g += (size_t)numel[i] * sizeof(float);
            }
        if (s > state) state = s;
        if (g > grads) grads = g;
    }
    if (st == FR_OK) {
        out->optimizer_state = state;
        if (o->shard_gradients && out->grads) out->grads = grads;
    }
    free(numel);
    free(owner);
    return st;
}

/* Sharded parameters (ZeRO-3, shard_plan.h), on either backend's plan: the masters, the
 * optimizer state and the gradient buffers are each rank's padded slices (the same on every
 * rank); the weights are held whole only for the units being gathered, in their gathered
 * element (FP8 codes for the FP8 Linears: they replace the persistent codes of every weight).
 * The step's gradients inside the activations stay as the executor plans them today. */
static fr_status shard_params(const fr_trainer *t, fr_train_memory *out)
{
    const fr_train_options *o = &t->opt;
    if (!o->shard_parameters || o->world_size < 2 || o->eval_only) return FR_OK;
    fr_shard_plan *p = NULL;
    FR_TRY(tr_shard_plan(t, o->world_size, &p));
    size_t whole = 0, mine = 0, state = 0;
    for (int i = 0; i < p->n_params; i++) {
        const int64_t a = fr_shard_alloc_numel(p, i);
        whole += (size_t)p->params[i].numel * sizeof(float);
        mine += (size_t)a * sizeof(float);
        state += fr_opt_state_bytes(&o->opt, a);
    }
    out->params = out->params >= whole ? out->params - whole + mine : mine; /* GPU: other constants stay */
    out->optimizer_state = state;
    if (out->grads) out->grads = mine;
    out->fp8_weights = 0;
    out->gathered = p->peak_gathered;
    fr_shard_plan_free(p);
    return FR_OK;
}

/* (train_internal.h) Here, with the memory it decides, below the LoRA code and the backends
 * that ask. */
int tr_lora_codes_only(const fr_trainer *t)
{
    const char *keep = fr_env_get(FR_ENV_LORA_KEEP_BASE);
    return t->lora.n > 0 && !(keep && strcmp(keep, "1") == 0);
}

int tr_weight_cache(const fr_trainer *t)
{
    const char *wc = fr_env_get(FR_ENV_WEIGHT_CACHE);
    if (wc && strcmp(wc, "auto") != 0) return strcmp(wc, "0") != 0;
    return t->opt.eval_only || t->opt.grad_accum > 1 || tr_lora_codes_only(t);
}

fr_status tr_memory_of(fr_trainer *t, int gpu, fr_train_memory *out)
{
    memset(out, 0, sizeof *out);
    out->gpu = gpu;
#ifndef FP8RUN_HAVE_CUDA
    if (gpu) return fr_error(FR_ERR_UNSUPPORTED, "memory prediction for a GPU: fp8run was built without the CUDA backend");
#endif
    const fr_train_options *o = &t->opt;
    fr_status st = FR_OK;
    size_t numel = 0;
    for (int i = 0; i < t->n_params; i++) {
        numel += (size_t)t->params[i].numel;
        if (!o->eval_only) out->optimizer_state += fr_opt_state_bytes(&o->opt, t->params[i].numel);
    }
    if (!gpu) {
        out->params = numel * sizeof(float);
        out->grads = o->eval_only ? 0 : numel * sizeof(float);
        if (!o->eval_only) st = fr_exec_plan(t->g, &out->activations, &out->inputs);
    }
#ifdef FP8RUN_HAVE_CUDA
    if (gpu && !o->eval_only) {
        fr_cuda_exec_sizes s, se;
        const int attn = fr_cuda_attention_parse(o->attention); /* cuDNN's attention has its own scratch */
        /* the context's choices as fr_cuda_train_new makes them: a LoRA run's frozen base as its
           Linears' codes only (tr_lora_codes_only), the weight cache (tr_weight_cache) */
        const int codes = (tr_lora_codes_only(t) ? FR_CUDA_PLAN_CODES_ONLY : 0) |
                          (tr_weight_cache(t) ? 0 : FR_CUDA_PLAN_NO_WEIGHT_CACHE);
        /* gradients accumulated in place (cuda_train.h) are held in the executor's arena for the
           whole run and need no accumulation buffer; the others get one when grad_accum > 1 */
        const size_t np = (size_t)(t->n_params ? t->n_params : 1);
        unsigned char *on = fr_calloc(np, 1, "memory plan");
        int *held = fr_malloc(np * sizeof *held, "memory plan");
        if (!on || !held) st = FR_ERR_OOM;
        int graph = 0; /* a value the trainer would refuse: the plan refuses it too */
        if (st == FR_OK) st = fr_cuda_train_graph_wanted(o, &graph);
        (void)graph; /* what it changes here, fr_cuda_train_inplace_plan reads itself */
        const int n_held = st == FR_OK ? fr_cuda_train_inplace_plan(t, on, held) : 0;
        size_t acc = 0;
        for (int i = 0; i < t->n_params; i++) acc += on && on[i] ? 0 : (size_t)t->params[i].numel * sizeof(float);
        if (st == FR_OK)
            st = fr_cuda_exec_plan_held(t->g, attn < 0 ? FR_CUDA_ATTN_FP8RUN : attn, codes, held, n_held, &s);
        if (st == FR_OK) st = fr_cuda_exec_plan_codes(t->eval_g, attn < 0 ? FR_CUDA_ATTN_FP8RUN : attn, codes, &se);
        free(on);
        free(held);
        out->params = s.consts;
        out->grads = o->grad_accum > 1 ? acc + s.held : 0;
        out->fp8_weights = s.persist;
        out->activations = s.arena - s.held;
        memcpy(out->peak, s.peak, sizeof out->peak);
        out->eval_activations = se.arena + se.persist;
        out->inputs = s.inputs + se.inputs;
        out->workspace = FR_CUDA_WORKSPACE_BYTES;
    }
#endif
    if (!o->eval_only) {
        out->lm_head_saved = fr_lm_head_saved_bytes(t->g);
        for (int i = 0; i < t->g->n_nodes; i++) out->lm_heads_fused += strcmp(t->g->nodes[i].op_type, "LinearCrossEntropy") == 0;
    }
    if (st == FR_OK && gpu && !o->shard_parameters) st = shard(t, out);
    if (st == FR_OK) st = shard_params(t, out);
    out->total = out->params + out->grads + out->optimizer_state + out->fp8_weights + out->activations +
                 out->eval_activations + out->inputs + out->workspace + out->gathered;
    return st;
}

void fr_train_memory_text(const fr_train_memory *m, char *buf, size_t n)
{
    const double M = 1024.0 * 1024.0;
    snprintf(buf, n,
             "%.1f MiB (parameters %.1f, gradient buffers %.1f, optimizer state %.1f, FP8 weight codes %.1f, "
             "activations %.1f, evaluation %.1f, inputs %.1f, workspace %.1f, gathered weights %.1f)",
             (double)m->total / M, (double)m->params / M, (double)m->grads / M, (double)m->optimizer_state / M,
             (double)m->fp8_weights / M, (double)m->activations / M, (double)m->eval_activations / M,
             (double)m->inputs / M, (double)m->workspace / M, (double)m->gathered / M);
}

/* Refuse a configuration of m that does not fit `budget` bytes, with what would fit. `where`
 * says what the budget is ("the GPU has 10.00 GiB free"). */
static fr_status refuse(const fr_trainer *t, const fr_train_memory *m, size_t budget, const char *where)
{
    char text[512], hint[512] = "";
    size_t h = 0;
    const double G = 1024.0 * 1024.0 * 1024.0;
    /* what would fit: fp8 moments; a smaller batch (activations scale with it, the rest not) */
    if (t->opt.opt.kind == FR_OPT_ADAMW && t->opt.opt.state_dtype != FR_OPT_STATE_FP8) {
        fr_opt_config c = t->opt.opt;
        c.state_dtype = FR_OPT_STATE_FP8;
        size_t s8 = 0;
        for (int i = 0; i < t->n_params; i++) s8 += fr_opt_state_bytes(&c, t->params[i].numel);
        size_t with = m->total - m->optimizer_state + s8;
        if (with <= budget || m->optimizer_state >= m->total / 4) /* else it would not be what matters */
            h += (size_t)snprintf(hint + h, sizeof hint - h, " --optimizer-state fp8 needs %.2f GiB%s;",
                                  (double)with / G, with <= budget ? " (fits)" : "");
    }
    size_t fixed = m->total - m->activations - m->eval_activations;
    size_t act = m->activations + m->eval_activations;
    if (fixed < budget && act > 0 && t->opt.batch > 1) {
        int64_t b = (int64_t)((double)t->opt.batch * (double)(budget - fixed) / (double)act);
        if (b >= 1 && h < sizeof hint)
            h += (size_t)snprintf(hint + h, sizeof hint - h, " --batch %lld (with --grad-accum to keep the step's tokens) "
                                  "fits by the activations' share;", (long long)b);
    }
    if (act > 0 && fixed < budget && t->opt.batch == 1 && t->opt.seq_len > 1 && h < sizeof hint) {
        int64_t s = (int64_t)((double)t->opt.seq_len * (double)(budget - fixed) / (double)act);
        if (s >= 1)
            h += (size_t)snprintf(hint + h, sizeof hint - h, " --seq %lld or shorter fits by the activations' share;",
                                  (long long)s);
    }
    if (!m->gpu && t->opt.grad_accum > 1 && m->inputs > budget / 2 && h < sizeof hint) {
        /* the CPU's inputs are mostly the step's token windows, one share per micro-batch */
        size_t per = m->inputs / (size_t)t->opt.grad_accum, rest = fixed - m->inputs;
        long long k = per && rest < budget ? (long long)((budget - rest) / per) : 0;
        if (k >= 1)
            h += (size_t)snprintf(hint + h, sizeof hint - h, " --grad-accum %lld keeps fewer token windows;",
                                  k < t->opt.grad_accum ? k : (long long)t->opt.grad_accum - 1);
    }
    if (act >= m->total / 4 && (!t->opt.recompute || strcmp(t->opt.recompute, "full") != 0) && h < sizeof hint)
        h += (size_t)snprintf(hint + h, sizeof hint - h, " --recompute attention|mlp|full keeps fewer activations;");
    size_t model = m->params + m->grads + m->optimizer_state + m->fp8_weights + m->workspace;
    if (model >= budget && h < sizeof hint)
        snprintf(hint + h, sizeof hint - h, " the weights, gradients and optimizer state alone need %.2f GiB: a "
                 "smaller model or more memory;", (double)model / G);
    fr_train_memory_text(m, text, sizeof text);
    return fr_error(m->gpu ? FR_ERR_DEVICE : FR_ERR_OOM, "this configuration needs %s, and %s: nothing was allocated. "
                    "Options:%s FP8RUN_MEMORY_CHECK=0 skips this check", text, where, hint);
}

fr_status tr_memory_check(fr_trainer *t, size_t free_bytes)
{
    fr_train_memory m;
    FR_TRY(tr_memory_of(t, 1, &m));
    if (m.total <= free_bytes) return FR_OK;
    char where[96];
    snprintf(where, sizeof where, "the GPU has %.2f GiB free", (double)free_bytes / (1024.0 * 1024.0 * 1024.0));
    return refuse(t, &m, free_bytes, where);
}

fr_status fr_train_host_memory_check(fr_trainer *t)
{
    if (t->use_cuda || t->opt.plan_only || fr_host_memory_check_off()) return FR_OK;
    fr_train_memory m;
    FR_TRY(tr_memory_of(t, 0, &m));
    /* a step's token windows, which the caller holds: grad_accum x batch x (seq+1) int64 */
    uint64_t win = 8, parts[3] = {(uint64_t)t->opt.grad_accum, (uint64_t)t->opt.batch, (uint64_t)t->opt.seq_len + 1};
    for (int i = 0; i < 3; i++) win = __builtin_mul_overflow(win, parts[i], &win) ? UINT64_MAX : win;
    if (win > SIZE_MAX - m.total) win = SIZE_MAX - m.total;
    m.inputs += (size_t)win;
    m.total += (size_t)win;
    /* the weights are in memory already (the model's graph): the rest is still to come */
    size_t need = m.total - m.params;
    if (need < FR_HOST_CHECK_MIN_BYTES) return FR_OK;
    fr_host_memory h;
    FR_TRY(fr_host_memory_available(&h));
    if (need <= h.available) return FR_OK;
    char where[160], t1[32], t2[32];
    snprintf(where, sizeof where, "this process may take %s more (%s), besides the %s of weights already loaded",
             fr_bytes_text(h.available, t1, sizeof t1), h.source, fr_bytes_text(m.params, t2, sizeof t2));
    size_t budget = h.available > SIZE_MAX - m.params ? SIZE_MAX : (size_t)h.available + m.params;
    return refuse(t, &m, budget, where);
}
