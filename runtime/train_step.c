/* The trainer's steps (see trainer.h): micro-batches, the optimizer update, skipped steps, the
 * queue of asynchronous steps, and eval. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runtime/train_internal.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h"
#endif

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

static fr_status check_windows(const fr_trainer *t, const int64_t *w, int k)
{
    int64_t n = (int64_t)k * t->opt.batch * (t->opt.seq_len + 1), V = t->vocab;
    for (int64_t i = 0; i < n; i++)
        if (w[i] < 0 || (V > 0 && w[i] >= V) || (t->tokens_dtype == FR_I32 && w[i] > INT32_MAX))
            return fr_error(FR_ERR_RANGE,
                            "token id %lld (micro-batch %lld, window %lld, position %lld) is outside "
                            "the model's vocabulary [0, %lld)",
                            (long long)w[i], (long long)(i / (n / k)),
                            (long long)(i % (n / k) / (t->opt.seq_len + 1)),
                            (long long)(i % (t->opt.seq_len + 1)), (long long)V);
    return FR_OK;
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

/* The counters of skipped steps once a step's result is known (stats->skipped), in step order;
 * more than max_bad_steps skipped steps in a row is FR_ERR_NUMERIC. */
static fr_status count_step(fr_trainer *t, fr_train_stats *stats)
{
    if (stats->step == t->stats_step) t->stats_skipped = stats->skipped;
    if (!stats->skipped) {
        t->bad_in_row = 0;
        return FR_OK;
    }
    stats->bad_in_a_row = ++t->bad_in_row;
    t->skipped_total++;
    if (t->bad_in_row > t->opt.max_bad_steps)
        return fr_error(FR_ERR_NUMERIC,
                        "%d steps in a row were not finite (more than the %d allowed); the last "
                        "one (step %lld): %s",
                        t->bad_in_row, t->opt.max_bad_steps, (long long)stats->step, stats->reason);
    return FR_OK;
}

/* One step on the CPU (stats->step and lr set by the caller): stats->loss, grad_norm, skipped
 * and reason; FR_OK also for a skipped step (the counters are the caller's). */
static fr_status cpu_step(fr_trainer *t, const int64_t *windows, int k, fr_train_stats *stats)
{
    const int64_t per = t->opt.batch * (t->opt.seq_len + 1);
    write_scales(t);
    for (int i = 0; i < t->n_states; i++) {
        t->states[i].step_amax = 0.0f;
        t->states[i].step_scale = t->states[i].sc.scale;
    }
    for (int i = 0; i < t->n_watch; i++) t->watch[i].step_amax = 0.0f;

    double loss_sum = 0;
    int amax_bad = 0, run_bad = 0;
    for (int m = 0; m < k && !run_bad; m++) {
        fr_status rs = run_micro(t, t->ex, t->inputs, t->n_inputs, windows + (int64_t)m * per);
        if (rs == FR_ERR_NUMERIC) { /* e.g. current scaling met a NaN/Inf amax: skip the step */
            run_bad = 1;
            set_reason(stats, "%s", fr_last_error());
            break;
        }
        FR_TRY(rs);
        float loss = scalar_out(t->ex, t->loss_out);
        loss_sum += loss;
        if (!isfinite(loss)) set_reason(stats, "loss is %g (micro-batch %d)", (double)loss, m);
        for (int i = 0; i < t->n_params; i++) {
            tr_param *p = &t->params[i];
            const float *g = fr_exec_output_at(t->ex, p->grad_out)->data;
            if (m == 0) {
                memcpy(p->acc, g, (size_t)p->numel * sizeof(float));
            } else {
                for (int64_t e = 0; e < p->numel; e++) p->acc[e] += g[e];
            }
        }
        for (int i = 0; i < t->n_states; i++) {
            tr_state *s = &t->states[i];
            if (s->amax_out < 0) continue;
            float a = scalar_out(t->ex, s->amax_out);
            if (!isfinite(a)) {
                amax_bad = 1;
                set_reason(stats, "amax of '%s' is %g", s->st->amax_name, (double)a);
            } else if (a > s->step_amax) {
                s->step_amax = a;
            }
        }
        for (int i = 0; i < t->n_watch; i++) { /* current/block amaxes, for fr_trainer_fp8_stats */
            float a = scalar_out(t->ex, t->watch[i].amax_out);
            tr_watch *w = &t->watch[i];
            if (!isnan(w->step_amax) && !(a <= w->step_amax)) w->step_amax = a; /* a NaN sticks */
        }
    }
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

/* ---- queued steps ---- */

/* A queued step once its result is known: the counters, and the status its poll returns. */
static fr_status settle(fr_trainer *t, tr_queued *q)
{
    q->st = count_step(t, &q->stats);
    if (q->st != FR_OK) {
        snprintf(q->err, sizeof q->err, "%s", fr_last_error());
        fr_clear_error();
    }
    q->retired = 1;
    return FR_OK;
}

/* Read back queue entry i (the oldest one not read back). */
static fr_status retire(fr_trainer *t, int i)
{
    tr_queued *q = &t->queue[i];
    if (q->retired) return FR_OK;
#ifdef FP8RUN_HAVE_CUDA
    if (t->dev) {
        FR_TRY(fr_cuda_train_retire(t, i, q->k, &q->stats));
        return settle(t, q);
    }
#endif
    return fr_error(FR_ERR_INTERNAL, "queued step %lld was not run", (long long)q->stats.step);
}

fr_status fr_trainer_step_async(fr_trainer *t, const int64_t *windows, int k, int64_t *step)
{
    if (step) *step = -1;
    if (!t || !windows || k < 1) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_step: no trainer, no tokens or k < 1");
    if (t->opt.eval_only) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_step: this trainer was built for evaluation only");
    if (t->q_len >= FR_TRAIN_MAX_QUEUED)
        return fr_error(FR_ERR_INVALID_ARG,
                        "fr_trainer_step: %d queued steps wait for their statistics to be polled (at most %d may)",
                        t->q_len, FR_TRAIN_MAX_QUEUED);
    FR_TRY(check_windows(t, windows, k));
    if (!t->queue) {
        t->queue = fr_calloc(FR_TRAIN_MAX_QUEUED, sizeof *t->queue, "queued steps");
        if (!t->queue) return FR_ERR_OOM;
    }
    const int slot = (t->q_head + t->q_len) % FR_TRAIN_MAX_QUEUED;
    tr_queued *q = &t->queue[slot];
    memset(q, 0, sizeof *q);
    q->k = k;
    q->stats.step = t->step;
    q->stats.lr = fr_lr_at(&t->opt.lr, t->step);
    t->stats_step = q->stats.step;
    t->stats_skipped = 0;
#ifdef FP8RUN_HAVE_CUDA
    if (t->dev) { /* the whole step on the GPU; the counters as on the CPU when it is read back */
        FR_TRY(fr_cuda_train_queue(t, windows, k, q->stats.lr, slot));
        t->step++;
        t->q_len++;
        if (step) *step = q->stats.step;
        return FR_OK;
    }
#endif
    FR_TRY(cpu_step(t, windows, k, &q->stats));
    t->step++;
    t->q_len++;
    if (step) *step = q->stats.step;
    return settle(t, q);
}

fr_status fr_trainer_poll(fr_trainer *t, int wait, fr_train_stats *stats, int *got)
{
    *got = 0;
    if (!t || !stats) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_poll: no trainer or stats");
    if (t->q_len == 0) return FR_OK;
    tr_queued *q = &t->queue[t->q_head];
#ifdef FP8RUN_HAVE_CUDA
    if (!q->retired && !wait && t->dev && !fr_cuda_train_done(t, t->q_head)) return FR_OK;
#else
    (void)wait; /* CPU steps are retired when queued */
#endif
    fr_status st = retire(t, t->q_head);
    *stats = q->stats;
    if (st != FR_OK) return st;
    *got = 1;
    t->q_head = (t->q_head + 1) % FR_TRAIN_MAX_QUEUED;
    t->q_len--;
    return q->st == FR_OK ? FR_OK : fr_error(q->st, "%s", q->err);
}

int fr_trainer_queued(const fr_trainer *t) { return t ? t->q_len : 0; }

fr_status fr_trainer_retire_all(fr_trainer *t)
{
    for (int i = 0; i < t->q_len; i++) FR_TRY(retire(t, (t->q_head + i) % FR_TRAIN_MAX_QUEUED));
    return FR_OK;
}

fr_status fr_trainer_step(fr_trainer *t, const int64_t *windows, int k, fr_train_stats *stats)
{
    fr_train_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (t && t->q_len)
        return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_step: %d queued steps were not polled (fr_trainer_poll)",
                        t->q_len);
    FR_TRY(fr_trainer_step_async(t, windows, k, NULL));
    int got;
    return fr_trainer_poll(t, 1, stats, &got);
}

fr_status fr_trainer_eval(fr_trainer *t, const int64_t *windows, double *loss)
{
    if (!t || !windows) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_eval: no trainer or tokens");
    t->eval_ran = 0;
    FR_TRY(check_windows(t, windows, 1));
    FR_TRY(fr_trainer_retire_all(t)); /* queued steps are read back first, in order */
#ifdef FP8RUN_HAVE_CUDA
    if (t->dev) {
        FR_TRY(fr_cuda_train_eval(t, windows, loss));
        t->eval_ran = 1;
        return FR_OK;
    }
#endif
    if (!t->eval_ex) FR_TRY(fr_exec_new(t->eval_g, &t->eval_ex));
    write_scales(t);
    FR_TRY(run_micro(t, t->eval_ex, t->eval_inputs, t->n_eval_inputs, windows));
    t->eval_ran = 1;
    if (loss) *loss = scalar_out(t->eval_ex, t->eval_loss_out);
    return FR_OK;
}

const fr_tensor *fr_trainer_eval_output(fr_trainer *t, const char *name)
{
    if (!t || !t->eval_ran) return NULL;
    if (!name) name = t->logits_name ? t->logits_name : (t->n_model_outputs ? t->model_outputs[0] : NULL);
#ifdef FP8RUN_HAVE_CUDA
    if (t->dev) return fr_cuda_train_eval_output(t, name);
#endif
    return name ? fr_exec_output(t->eval_ex, name) : NULL;
}
