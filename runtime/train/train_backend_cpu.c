/* The CPU backend of the trainer (runtime/train/train_backend.h): the training and eval graphs in CPU
 * executors (runtime/exec/executor.h). A step finishes inside queue; the host copies of parameters,
 * optimizer and scaling state are the ones it updates, so pull and push have nothing to do. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"

typedef struct cpu_state {
    fr_exec *ex;      /* the training graph; NULL for evaluation-only and plan-only trainers */
    fr_exec *eval_ex; /* the eval graph, built by the first eval */
} cpu_state;

static cpu_state *state_of(const fr_trainer *t) { return (cpu_state *)t->be_state; }

static fr_status cpu_init(fr_trainer *t, void **state)
{
    *state = NULL;
    cpu_state *s = fr_calloc(1, sizeof *s, "CPU trainer");
    if (!s) return FR_ERR_OOM;
    if (!t->opt.eval_only && !t->opt.plan_only) {
        fr_status st = fr_exec_new(t->g, &s->ex);
        if (st != FR_OK) {
            free(s);
            return st;
        }
    }
    *state = s;
    return FR_OK;
}

static void cpu_free(void *state)
{
    cpu_state *s = state;
    if (!s) return;
    fr_exec_free(s->ex);
    fr_exec_free(s->eval_ex);
    free(s);
}

/* ---- steps ---- */

/* The scales the next run quantizes with, into the state values both graphs read. */
static void write_scales(fr_trainer *t)
{
    for (int i = 0; i < t->n_states; i++) {
        fr_tensor *c = t->g->values[t->states[i].st->scale_value].constant;
        ((float *)c->data)[0] = t->states[i].sc.scale;
    }
}

static fr_status run_micro(fr_trainer *t, fr_exec *ex, tr_input *ins, int n, const int64_t *windows)
{
    FR_TRY(tr_fill_inputs(t, ins, n, windows));
    for (int i = 0; i < n; i++) FR_TRY(fr_exec_set_input(ex, ins[i].name, ins[i].t));
    return fr_exec_run(ex);
}

static float scalar_out(fr_exec *ex, int index)
{
    const fr_tensor *o = fr_exec_output_at(ex, index);
    return ((const float *)o->data)[0];
}

static void set_reason(fr_train_stats *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(fr_train_stats *s, const char *fmt, ...)
{
    if (s->reason[0]) return; /* keep the first reason */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->reason, sizeof s->reason, fmt, ap);
    va_end(ap);
}

/* The micro-batches of a step: losses summed, gradients accumulated into the parameters' acc,
 * the FP8 amaxes folded. *run_bad: a forward failed with FR_ERR_NUMERIC (current scaling met a
 * NaN/Inf amax), which skips the step. */
static fr_status run_micro_batches(fr_trainer *t, fr_exec *ex, const int64_t *windows, int k, fr_train_stats *stats,
                                   double *loss_sum, int *amax_bad, int *run_bad)
{
    const int64_t per = t->opt.batch * (t->opt.seq_len + 1);
    for (int m = 0; m < k; m++) {
        fr_status rs = run_micro(t, ex, t->inputs, t->n_inputs, windows + (int64_t)m * per);
        if (rs == FR_ERR_NUMERIC) {
            *run_bad = 1;
            set_reason(stats, "%s", fr_last_error());
            return FR_OK;
        }
        FR_TRY(rs);
        float loss = scalar_out(ex, t->loss_out);
        *loss_sum += loss;
        if (!isfinite(loss)) set_reason(stats, "loss is %g (micro-batch %d)", (double)loss, m);
        for (int i = 0; i < t->n_params; i++) {
            tr_param *p = &t->params[i];
            const float *g = fr_exec_output_at(ex, p->grad_out)->data;
            if (m == 0) {
                memcpy(p->acc, g, (size_t)p->numel * sizeof(float));
            } else {
                for (int64_t e = 0; e < p->numel; e++) p->acc[e] += g[e];
            }
        }
        for (int i = 0; i < t->n_states; i++) {
            tr_state *s = &t->states[i];
            if (s->amax_out < 0) continue;
            float a = scalar_out(ex, s->amax_out);
            if (!isfinite(a)) {
                *amax_bad = 1;
                set_reason(stats, "amax of '%s' is %g", s->st->amax_name, (double)a);
            } else if (a > s->step_amax) {
                s->step_amax = a;
            }
        }
        for (int i = 0; i < t->n_watch; i++) { /* current/block amaxes, for fr_trainer_fp8_stats */
            float a = scalar_out(ex, t->watch[i].amax_out);
            tr_watch *w = &t->watch[i];
            if (!isnan(w->step_amax) && !(a <= w->step_amax)) w->step_amax = a; /* a NaN sticks */
        }
    }
    return FR_OK;
}

/* One step (stats->step and lr set by the trainer): stats->loss, grad_norm, skipped and reason;
 * FR_OK also for a skipped step (the counters are the trainer's). */
static fr_status cpu_queue(fr_trainer *t, const int64_t *windows, int k, int slot, fr_train_stats *stats)
{
    (void)slot;
    cpu_state *cs = state_of(t);
    if (!cs || !cs->ex)
        return fr_error(FR_ERR_INTERNAL, "CPU trainer: no training executor (an evaluation- or plan-only trainer)");
    write_scales(t);
    for (int i = 0; i < t->n_states; i++) {
        t->states[i].step_amax = 0.0f;
        t->states[i].step_scale = t->states[i].sc.scale;
    }
    for (int i = 0; i < t->n_watch; i++) t->watch[i].step_amax = 0.0f;

    double loss_sum = 0;
    int amax_bad = 0, run_bad = 0;
    FR_TRY(run_micro_batches(t, cs->ex, windows, k, stats, &loss_sum, &amax_bad, &run_bad));
    stats->loss = run_bad ? NAN : loss_sum / k;
    if (k > 1 && !run_bad) FR_TRY(fr_optimizer_average_grads(t->optim, k));

    int grads_bad = 0;
    if (run_bad) {
        stats->grad_norm = NAN;
    } else if (t->opt.grad_clip > 0) {
        fr_status st = fr_optimizer_clip_grad_norm(t->optim, t->opt.grad_clip, &stats->grad_norm);
        if (st == FR_ERR_NUMERIC) {
            grads_bad = 1;
            set_reason(stats, "%s", fr_last_error());
        } else if (st != FR_OK) {
            return st;
        }
    } else {
        stats->grad_norm = fr_optimizer_grad_norm(t->optim);
        if (!isfinite(stats->grad_norm)) {
            grads_bad = 1;
            set_reason(stats, "gradient norm is %g", stats->grad_norm);
        }
    }
    if (run_bad || !isfinite(stats->loss) || grads_bad || amax_bad) {
        stats->skipped = 1;
        return FR_OK;
    }
    FR_TRY(fr_optimizer_step(t->optim, stats->lr));
    for (int i = 0; i < t->n_states; i++) {
        tr_state *s = &t->states[i];
        if (s->amax_out >= 0) FR_TRY(fr_fp8_scaling_update(&s->sc, s->step_amax, s->st->amax_name));
    }
    return FR_OK;
}

/* Steps finish inside queue: always done, and their statistics are complete already. */
static int cpu_done(fr_trainer *t, int slot)
{
    (void)t;
    (void)slot;
    return 1;
}

static fr_status cpu_retire(fr_trainer *t, int slot, int k, fr_train_stats *stats)
{
    (void)t;
    (void)slot;
    (void)k;
    (void)stats;
    return FR_OK;
}

/* ---- eval ---- */

static fr_status cpu_eval(fr_trainer *t, const int64_t *windows, double *loss)
{
    cpu_state *cs = state_of(t);
    if (!cs) return fr_error(FR_ERR_INTERNAL, "CPU trainer: no backend state");
    if (!cs->eval_ex) FR_TRY(fr_exec_new(t->eval_g, &cs->eval_ex));
    write_scales(t);
    FR_TRY(run_micro(t, cs->eval_ex, t->eval_inputs, t->n_eval_inputs, windows));
    if (loss) *loss = scalar_out(cs->eval_ex, t->eval_loss_out);
    return FR_OK;
}

static const fr_tensor *cpu_eval_output(fr_trainer *t, const char *name)
{
    cpu_state *cs = state_of(t);
    return cs && cs->eval_ex && name ? fr_exec_output(cs->eval_ex, name) : NULL;
}

/* ---- the host copies are the backend's ---- */

static fr_status cpu_pull(fr_trainer *t)
{
    (void)t;
    return FR_OK;
}

static fr_status cpu_push(fr_trainer *t)
{
    (void)t;
    return FR_OK;
}

/* ---- what it holds ---- */

static fr_status cpu_profile(const fr_trainer *t, char **text)
{
    (void)t;
    *text = NULL; /* per-op times are the GPU executor's */
    return FR_OK;
}

/* The executor's pool plus each parameter's value, gradient and accumulator (fp32) and its
 * optimizer slots in their stored dtype. */
static size_t cpu_memory(const fr_trainer *t, size_t *device_used, size_t *device_total)
{
    const cpu_state *cs = state_of(t);
    *device_used = *device_total = 0;
    size_t b = cs && cs->ex ? fr_exec_pool_bytes(cs->ex) : 0;
    int slots = t->optim ? fr_optimizer_state_count(t->optim) : 0;
    fr_opt_state_dtype sd = t->optim ? fr_optimizer_state_dtype(t->optim) : FR_OPT_STATE_F32;
    for (int i = 0; i < t->n_params; i++)
        b += (size_t)t->params[i].numel * sizeof(float) * 3 +
             (size_t)fr_lowp_state_bytes(sd, t->params[i].numel) * (size_t)slots;
    return b;
}

static const char *cpu_device_name(const fr_trainer *t)
{
    (void)t;
    return "CPU";
}

static void cpu_attention(const fr_trainer *t, char *buf, size_t n)
{
    (void)t;
    snprintf(buf, n, "CPU kernels");
}

static void cpu_gemm(const fr_trainer *t, char *buf, size_t n)
{
    (void)t;
    snprintf(buf, n, "CPU kernels (exact float32/float64 sums)");
}

const fr_train_backend_ops tr_backend_cpu = {
    .name = "cpu",
    .queues = 0,
    .init = cpu_init,
    .free = cpu_free,
    .queue = cpu_queue,
    .done = cpu_done,
    .retire = cpu_retire,
    .eval = cpu_eval,
    .eval_output = cpu_eval_output,
    .pull = cpu_pull,
    .push = cpu_push,
    .profile = cpu_profile,
    .memory = cpu_memory,
    .device_name = cpu_device_name,
    .attention = cpu_attention,
    .gemm = cpu_gemm,
};

fr_exec *tr_cpu_exec(const fr_trainer *t)
{
    return t && t->be == &tr_backend_cpu && t->be_state ? state_of(t)->ex : NULL;
}
