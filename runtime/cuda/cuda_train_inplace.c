/* What the device trainer decides from the graph and the options alone (cuda_train.h), so that
 * the trainer and the memory plan (runtime/train/train_memory.c) agree without a device: whether
 * the step replays a CUDA graph, and which parameters' gradients it accumulates in place. */
#include <string.h>

#include "graph/env.h"
#include "ops/cuda/cuda_kernel.h"
#include "runtime/cuda/cuda_train.h"

fr_status fr_cuda_train_graph_wanted(const fr_train_options *o, int *on)
{
    const char *v = fr_env_get(FR_ENV_CUDA_GRAPH);
    *on = 0;
    if (v && strcmp(v, "1") == 0) {
        *on = 1;
        return FR_OK;
    }
    if (v && strcmp(v, "0") == 0) return FR_OK;
    if (v && v[0] && strcmp(v, "auto") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "FP8RUN_CUDA_GRAPH=%s: auto (the default), 1 or 0", v);
    /* auto: where replay costs nothing else. With micro-batches it would turn in-place
       accumulation off (that costs memory at the sizes that accumulate); data parallel launches
       its all-reduces between nodes; profiling times every node */
    const char *prof = fr_env_get(FR_ENV_PROFILE);
    *on = o->grad_accum <= 1 && o->world_size <= 0 && !o->eval_only && !(prof && (prof[0] == '1' || prof[0] == '2'));
    return FR_OK;
}

int fr_cuda_train_inplace_plan(const fr_trainer *t, unsigned char *param_on, int *vids)
{
    const fr_train_options *o = &t->opt;
    const fr_graph *g = t->g;
    if (param_on && t->n_params) memset(param_on, 0, (size_t)t->n_params);
    /* off: the knob; one micro-batch; data parallel (its buckets are reduced and accumulated
       by dist_train.c); CUDA graph replay (the capture fixes each GEMM's beta); LoRA (kept
       simple: its adapters' gradients are small) */
    int graph = 0;
    if (fr_env_is(FR_ENV_GRAD_ACCUM_INPLACE, "0") || fr_cuda_train_graph_wanted(o, &graph) != FR_OK || graph) return 0;
    if (o->eval_only || o->grad_accum <= 1 || o->world_size > 0 || o->shard_parameters || t->lora.n > 0 || !g) return 0;
    int n = 0;
    for (int i = 0; i < t->n_params; i++) {
        const tr_param *p = &t->params[i];
        if (p->grad_out < 0 || p->grad_out >= g->n_outputs) continue;
        const int v = g->outputs[p->grad_out];
        const fr_value *val = &g->values[v];
        int64_t numel = 1;
        for (int r = 0; r < val->rank; r++) numel *= val->dims[r];
        const int pr = val->producer;
        if (val->dtype != FR_F32 || val->rank < 0 || numel != p->numel || val->constant || pr < 0 || pr >= g->n_nodes ||
            g->nodes[pr].outputs[0] != v || !fr_cuda_wgrad_accumulable(g, &g->nodes[pr]))
            continue;
        /* written by that GEMM alone, read by nothing, one parameter's gradient only */
        int ok = 1;
        for (int j = 0; ok && j < g->n_outputs; j++) ok = j == p->grad_out || g->outputs[j] != v;
        for (int j = 0; ok && j < g->n_nodes; j++)
            for (int k = 0; ok && k < g->nodes[j].n_inputs; k++) ok = g->nodes[j].inputs[k] != v;
        if (!ok) continue;
        if (param_on) param_on[i] = 1;
        if (vids) vids[n] = v;
        n++;
    }
    return n;
}
