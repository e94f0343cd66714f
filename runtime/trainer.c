/* The trainer's life cycle and its steps (see trainer.h); the graph building is in
 * train_build.c, checkpoints in train_ckpt.c, export in train_export.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/fbs.h"
#include "graph/fp8_format.h"
#include "graph/option_choices.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/train_internal.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_train.h"
#endif

void fr_train_options_default(fr_train_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 1;
    o->seq_len = 1;
    o->ignore_index = -100;
    o->precision = "fp32";
    fr_fp8_options_default(&o->fp8);
    o->opt = fr_opt_config_adamw();
    o->lr.kind = FR_LR_CONSTANT;
    o->lr.max_lr = 1e-3;
    o->grad_clip = 0;
    o->grad_accum = 1;
    o->seed = 0;
    o->max_bad_steps = 10;
    o->retie = 1;
    o->unshare = 1;
    o->fuse_attention = 1;
    o->fuse_swiglu = 1;
    o->device = "cpu";
    o->recompute = "none";
}

/* ---- options ---- */

/* "auto" is CUDA when the backend is built and a device answers; "cuda" without one is an
 * error (never a silent fallback). */
static fr_status resolve_device(fr_trainer *t, const char *device)
{
    static const char *const devices[] = {FR_CHOICES_DEVICE NULL};
    int n = 0;
    if (fr_choice_find(devices, device) < 0)
        return fr_error(FR_ERR_INVALID_ARG, "device '%s': use cpu, cuda or auto", device);
    if (strcmp(device, "cpu") == 0) return FR_OK;
    fr_status st = fr_cuda_device_count(&n);
    if (st == FR_OK && n > 0) {
        t->use_cuda = 1;
        return FR_OK;
    }
    if (strcmp(device, "auto") == 0) {
        fr_clear_error();
        return FR_OK;
    }
    return st != FR_OK ? st : fr_error(FR_ERR_DEVICE, "device cuda: no CUDA device is present");
}

static fr_status copy_str(const char *src, char **dst, const char **field)
{
    *dst = NULL;
    if (!src) {
        *field = NULL;
        return FR_OK;
    }
    *dst = fr_strdup(src, "trainer options");
    if (!*dst) return FR_ERR_OOM;
    *field = *dst;
    return FR_OK;
}

static fr_status copy_options(fr_trainer *t, const fr_train_options *o)
{
    t->opt = *o;
    fr_train_options *c = &t->opt;
    if (o->eval_only) c->grad_clip = 0; /* nothing to clip: keep the config consistent */
    if (o->batch < 1 || o->seq_len < 1)
        return fr_error(FR_ERR_INVALID_ARG, "batch (%lld) and sequence length (%lld) must be >= 1",
                        (long long)o->batch, (long long)o->seq_len);
    if (o->grad_accum < 1)
        return fr_error(FR_ERR_INVALID_ARG, "gradient accumulation must be >= 1 micro-batch, got %d", o->grad_accum);
    if (o->max_bad_steps < 0)
        return fr_error(FR_ERR_INVALID_ARG, "max bad steps must be >= 0, got %d", o->max_bad_steps);
    if (!(o->grad_clip <= 0 || isfinite(o->grad_clip)))
        return fr_error(FR_ERR_INVALID_ARG, "gradient clipping norm must be finite");
    const char *prec = o->precision ? o->precision : "fp32";
    if (strcmp(prec, "fp32") != 0 && strcmp(prec, "bf16") != 0 && strcmp(prec, "fp8") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "precision '%s': use fp32, bf16 or fp8", prec);
    FR_TRY(fr_lr_schedule_check(&o->lr));
    FR_TRY(copy_str(o->tokens_input, &t->s_tokens, &c->tokens_input));
    FR_TRY(copy_str(o->logits_output, &t->s_logits, &c->logits_output));
    FR_TRY(copy_str(o->loss_output, &t->s_loss, &c->loss_output));
    FR_TRY(copy_str(o->train_regex, &t->s_train, &c->train_regex));
    FR_TRY(copy_str(o->freeze_regex, &t->s_freeze, &c->freeze_regex));
    FR_TRY(copy_str(prec, &t->s_precision, &c->precision));
    FR_TRY(resolve_device(t, o->device ? o->device : "cpu"));
    if (o->world_size <= 0) c->rank = c->local_rank = 0; /* alone: rank 0 writes checkpoints */
    if (o->world_size > 0 && (!t->use_cuda || o->rank < 0 || o->rank >= o->world_size || o->local_rank < 0))
        return fr_error(FR_ERR_INVALID_ARG, "data-parallel training (rank %d of %d, local rank %d) %s", o->rank,
                        o->world_size, o->local_rank, t->use_cuda ? "is inconsistent" : "needs the CUDA backend");
    if (o->world_size > 0 && o->shard_optimizer && (o->opt.state_dtype != FR_OPT_STATE_F32 || o->opt.master_bf16))
        return fr_error(FR_ERR_UNSUPPORTED, "--shard-optimizer keeps fp32 optimizer state and master weights only: "
                                            "drop --optimizer-state / --master-weights, or the sharding");
    FR_TRY(copy_str(o->fp8.recipe, &t->s_recipe, &c->fp8.recipe));
    FR_TRY(copy_str(o->fp8.fp8_format, &t->s_format, &c->fp8.fp8_format));
    FR_TRY(copy_str(o->fp8.fp8_exclude, &t->s_exclude, &c->fp8.fp8_exclude));
    FR_TRY(copy_str(o->lora.targets, &t->s_lora, &c->lora.targets));
    c->fp8.precision = c->precision;
    c->dims = NULL;
    if (o->n_dims > 0) {
        t->dims = fr_calloc((size_t)o->n_dims, sizeof *t->dims, "trainer options");
        if (!t->dims) return FR_ERR_OOM;
        for (int i = 0; i < o->n_dims; i++) {
            t->dims[i].value = o->dims[i].value;
            t->dims[i].name = fr_strdup(o->dims[i].name ? o->dims[i].name : "", "trainer options");
            if (!t->dims[i].name) return FR_ERR_OOM;
        }
        c->dims = t->dims;
    }
    return FR_OK;
}

/* ---- the device side ---- */

fr_status tr_sync_host(fr_trainer *t)
{
    if (t) FR_TRY(fr_trainer_retire_all(t)); /* the counters first, in step order */
#ifdef FP8RUN_HAVE_CUDA
    if (t && t->dev) return fr_cuda_train_pull(t);
#endif
    (void)t;
    return FR_OK;
}

fr_status tr_sync_device(fr_trainer *t)
{
    if (t) FR_TRY(fr_trainer_retire_all(t));
#ifdef FP8RUN_HAVE_CUDA
    if (t && t->dev) return fr_cuda_train_push(t);
#endif
    (void)t;
    return FR_OK;
}

char *fr_trainer_profile(const fr_trainer *t)
{
    char *s = NULL;
#ifdef FP8RUN_HAVE_CUDA
    if (t && t->dev && fr_cuda_train_profile(t->dev, &s) != FR_OK) s = NULL;
#endif
    (void)t;
    return s;
}

size_t fr_trainer_memory(const fr_trainer *t, size_t *device_used, size_t *device_total)
{
    if (device_used) *device_used = 0;
    if (device_total) *device_total = 0;
#ifdef FP8RUN_HAVE_CUDA
    if (t->dev) {
        size_t u = 0, tot = 0;
        if (fr_cuda_train_mem_info(t->dev, &u, &tot) == FR_OK) {
            if (device_used) *device_used = u;
            if (device_total) *device_total = tot;
        }
        return fr_cuda_train_device_bytes(t->dev);
    }
#endif
    size_t b = t->ex ? fr_exec_pool_bytes(t->ex) : 0;
    int slots = t->optim ? fr_optimizer_state_count(t->optim) : 0;
    fr_opt_state_dtype sd = t->optim ? fr_optimizer_state_dtype(t->optim) : FR_OPT_STATE_F32;
    for (int i = 0; i < t->n_params; i++)
        b += (size_t)t->params[i].numel * sizeof(float) * 3 +
             (size_t)fr_lowp_state_bytes(sd, t->params[i].numel) * (size_t)slots;
    return b;
}

const char *fr_trainer_device(const fr_trainer *t)
{
#ifdef FP8RUN_HAVE_CUDA
    if (t && t->dev) return fr_cuda_train_device_name(t->dev);
#endif
    (void)t;
    return "CPU";
}

/* ---- life cycle ---- */

fr_status fr_trainer_new(const fr_graph *model, const fr_train_options *opt, fr_trainer **out)
{
    *out = NULL;
    if (!model || !opt) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_new: no model or options");
    fr_trainer *t = fr_calloc(1, sizeof *t, "trainer");
    if (!t) return FR_ERR_OOM;
    fr_status st = copy_options(t, opt);
    if (st == FR_OK) st = tr_build(t, model);
#ifdef FP8RUN_HAVE_CUDA
    if (st == FR_OK && t->use_cuda && !t->opt.plan_only)
        st = fr_cuda_train_new(t, t->opt.world_size > 0 ? t->opt.local_rank : -1, &t->dev);
#endif
    if (st != FR_OK) {
        if (model->source_path) st = fr_error_context(st, "while building the trainer for '%s'", model->source_path);
        fr_trainer_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

static void free_inputs(tr_input *ins, int n)
{
    for (int i = 0; ins && i < n; i++) {
        free(ins[i].name);
        fr_tensor_free(ins[i].t);
    }
    free(ins);
}

void fr_trainer_free(fr_trainer *t)
{
    if (!t) return;
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_train_free(t->dev);
#endif
    fr_exec_free(t->ex);
    fr_exec_free(t->eval_ex);
    fr_optimizer_free(t->optim);
    free(t->queue);
    for (int i = 0; i < t->n_params; i++) free(t->params[i].acc);
    free(t->params);
    free(t->orig);
    free(t->ties);
    for (int i = 0; i < t->n_states; i++) fr_fp8_scaling_free(&t->states[i].sc);
    free(t->states);
    free(t->watch);
    for (int i = 0; i < t->n_init_states; i++) fr_fp8_scaling_free(&t->init_states[i]);
    free(t->init_states);
    if (t->has_report) fr_fp8_report_free(&t->report);
    free_inputs(t->inputs, t->n_inputs);
    free_inputs(t->eval_inputs, t->n_eval_inputs);
    for (int i = 0; i < t->n_model_outputs; i++) free(t->model_outputs[i]);
    free(t->model_outputs);
    free(t->loss_name);
    free(t->logits_name);
    fr_graph_free(t->eval_g); /* borrows g's constants: free it first */
    fr_graph_free(t->g);
    fr_graph_free(t->pristine);
    free(t->s_tokens);
    free(t->s_logits);
    free(t->s_loss);
    free(t->s_train);
    free(t->s_freeze);
    free(t->s_precision);
    free(t->s_recipe);
    free(t->s_format);
    free(t->s_exclude);
    free(t->s_lora);
    free(t->s_lora_exclude);
    fr_lora_result_free(&t->lora);
    for (int i = 0; t->dims && i < t->opt.n_dims; i++) free((char *)t->dims[i].name);
    free(t->dims);
    free(t->model_path);
    free(t);
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

/* ---- accessors ---- */

int64_t fr_trainer_steps_done(const fr_trainer *t) { return t->step; }
int64_t fr_trainer_skipped_total(const fr_trainer *t) { return t->skipped_total; }
int64_t fr_trainer_vocab(const fr_trainer *t) { return t->vocab; }
int64_t fr_trainer_batch(const fr_trainer *t) { return t->opt.batch; }
int64_t fr_trainer_seq_len(const fr_trainer *t) { return t->opt.seq_len; }
int fr_trainer_grad_accum(const fr_trainer *t) { return t->opt.grad_accum; }
const fr_fp8_report *fr_trainer_fp8_report(const fr_trainer *t) { return t->has_report ? &t->report : NULL; }
fr_optimizer *fr_trainer_optimizer(fr_trainer *t) { return t->optim; }
int fr_trainer_param_count(const fr_trainer *t) { return t->n_orig; }

const char *fr_trainer_tokens_input(const fr_trainer *t)
{
    for (int i = 0; i < t->n_inputs; i++)
        if (t->inputs[i].feed == TR_FEED_TOKENS) return t->inputs[i].name;
    return NULL;
}

const char *fr_trainer_param_name(const fr_trainer *t, int i)
{
    return i >= 0 && i < t->n_orig ? t->orig[i].name : NULL;
}

int64_t fr_trainer_param_numel(const fr_trainer *t, int i)
{
    return i >= 0 && i < t->n_orig ? t->orig[i].numel : 0;
}

fr_status fr_trainer_set_param(fr_trainer *t, const char *name, const float *src)
{
    FR_TRY(tr_sync_host(t));
    for (int i = 0; name && i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        if (strcmp(o->name, name) != 0) continue;
        float *dst = t->g->values[t->params[o->param].value].constant->data;
        if (o->fused) {
            /* into its slice of the fused parameter; the original initializer follows (export) */
            tr_slice_copy(o->fused, o->slice, dst, (float *)src, 0);
            FR_TRY(fr_fp8_sync_params(t->g, &t->report, 1));
        } else {
            memcpy(dst, src, (size_t)o->numel * sizeof(float));
        }
        return tr_sync_device(t);
    }
    return fr_error(FR_ERR_INVALID_ARG, "'%s' is not a parameter this trainer trains", name ? name : "(null)");
}

fr_status fr_trainer_get_param(fr_trainer *t, const char *name, float *dst)
{
    FR_TRY(tr_sync_host(t));
    for (int i = 0; name && i < t->n_orig; i++)
        if (strcmp(t->orig[i].name, name) == 0) return tr_orig_values(t, &t->orig[i], dst);
    return fr_error(FR_ERR_INVALID_ARG, "'%s' is not a parameter this trainer trains", name ? name : "(null)");
}

/* ---- FP8 statistics (--log-fp8) ---- */

static const char *operand_str(fr_fp8_operand o) { return o == FR_FP8_OPERAND_X ? "x" : o == FR_FP8_OPERAND_W ? "w" : "dy"; }

static fr_dtype operand_fmt(const fr_fp8_report *r, fr_fp8_operand o)
{
    return o == FR_FP8_OPERAND_DY && !r->e4m3_only ? FR_F8E5M2 : FR_F8E4M3;
}

/* One record per operand of every fp8 Linear: delayed layers from their scaling state, the
 * others from the amaxes the step computed (dY has none outside the delayed recipe: the
 * record says so instead of inventing one). */
int fr_trainer_fp8_stats(const fr_trainer *t, fr_fp8_stat *out, int max)
{
    int n = 0;
    if (!t || !t->has_report || t->opt.eval_only) return 0;
    /* the device's amaxes and scales into the host copies (the state is logically const) */
    if (tr_sync_host((fr_trainer *)t) != FR_OK) return 0;
    const fr_fp8_report *r = &t->report;
    for (int li = 0; li < r->n_layers; li++) {
        const fr_fp8_layer *L = &r->layers[li];
        if (L->precision != FR_LIN_FP8) continue;
        for (int op = 0; op < 3; op++, n++) {
            if (!out || n >= max) continue;
            fr_fp8_stat *s = &out[n];
            memset(s, 0, sizeof *s);
            s->layer = L->name;
            s->operand = operand_str((fr_fp8_operand)op);
            s->recipe = fr_lin_recipe_name(L->recipe);
            s->format = operand_fmt(r, (fr_fp8_operand)op) == FR_F8E5M2 ? "e5m2" : "e4m3";
            s->fp8_max = fr_fp8_max(operand_fmt(r, (fr_fp8_operand)op));
            s->step = t->stats_step;
            s->amax = s->scale = s->next_scale = s->history_max = s->range_use = NAN;
            s->note = t->stats_skipped ? "the step was skipped (non-finite values): its amaxes may be partial" : "";
            if (t->stats_step < 0) {
                s->note = "no step taken yet";
                continue;
            }
            if (L->recipe == FR_LIN_DELAYED) {
                const tr_state *ts = NULL;
                for (int i = 0; i < t->n_states && !ts; i++)
                    if (t->states[i].st->layer == li && (int)t->states[i].st->operand == op) ts = &t->states[i];
                if (!ts || ts->amax_out < 0) {
                    s->note = "no amax: the operand is not computed in training (no gradient needed)";
                    continue;
                }
                s->has_amax = s->has_scale = 1;
                s->amax = ts->step_amax;
                s->scale = ts->step_scale;
                s->next_scale = ts->sc.scale;
                s->history_max = fr_fp8_scaling_amax(&ts->sc);
                s->updates = ts->sc.updates;
                s->range_use = s->amax * s->scale / s->fp8_max;
                s->saturated = s->range_use > 1.0;
                continue;
            }
            const tr_watch *w = NULL;
            for (int i = 0; i < t->n_watch && !w; i++)
                if (t->watch[i].layer == li && (int)t->watch[i].operand == op) w = &t->watch[i];
            if (!w) {
                s->note = L->recipe == FR_LIN_CURRENT
                              ? "no amax: the current recipe scales dY inside the backward GEMM and exposes no amax"
                              : "no amax: the block recipe scales dY per 1x128 block inside the backward GEMM";
                continue;
            }
            s->has_amax = 1;
            s->amax = w->step_amax;
            if (L->recipe == FR_LIN_CURRENT) {
                /* the scale of the micro-batch with the largest amax: its own amax maps to the
                   format's max (less the margin), so nothing saturates */
                float sc;
                if (fr_fp8_scale_from_amax(w->step_amax, operand_fmt(r, (fr_fp8_operand)op), r->margin, 1.0f, L->name,
                                           &sc) == FR_OK) {
                    s->has_scale = 1;
                    s->scale = s->next_scale = sc;
                    s->range_use = s->amax * s->scale / s->fp8_max;
                } else {
                    fr_clear_error();
                }
            } else {
                s->note = op == FR_FP8_OPERAND_X ? "block recipe: one scale per 1x128 block, no per-tensor scale"
                                                 : "block recipe: one scale per 128x128 tile, no per-tensor scale";
            }
        }
    }
    return n;
}

/* ---- compiled graph files ---- */

/* A trainer holding just the compiled forward graph of `model` (tr_build_forward): what
 * fr_trainer_new builds before the loss head. *tok: the tokens input. */
static fr_status compile_forward(const fr_graph *model, const fr_train_options *opt, fr_trainer **out, int *tok)
{
    *out = NULL;
    if (!model || !opt) return fr_error(FR_ERR_INVALID_ARG, "compile: no model or options");
    const char *name = model->source_path ? model->source_path : "the model";
    if (fr_fbs_is_compiled(model))
        return fr_error(FR_ERR_INVALID_ARG, "'%s' is already a compiled graph: compile the original model", name);
    const char *prec = opt->precision ? opt->precision : "fp32";
    if (strcmp(prec, "fp8") != 0 && strcmp(prec, "bf16") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "compile: precision '%s': a compiled graph is bf16 or fp8 (fp32 trains "
                        "the ONNX model as it is)", prec);
    fr_trainer *t = fr_calloc(1, sizeof *t, "trainer");
    if (!t) return FR_ERR_OOM;
    int loss, logits;
    fr_status st = copy_options(t, opt);
    if (st == FR_OK) st = tr_build_forward(t, model, tok, &loss, &logits);
    if (st != FR_OK) {
        if (!strstr(fr_last_error(), name)) st = fr_error_context(st, "compiling '%s'", name);
        fr_trainer_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

fr_status fr_train_compile_graph(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                 fr_fp8_report *report)
{
    return fr_train_compile_graph_passes(model, opt, compiled, report, NULL);
}

fr_status fr_train_compile_graph_passes(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                        fr_fp8_report *report, fr_pipeline_report *passes)
{
    fr_trainer *t;
    int tok;
    *compiled = NULL;
    memset(report, 0, sizeof *report);
    FR_TRY(compile_forward(model, opt, &t, &tok));
    *compiled = t->g;
    *report = t->report;
    if (passes) *passes = t->passes;
    t->g = NULL;
    t->has_report = 0;
    fr_trainer_free(t);
    return FR_OK;
}

fr_status fr_train_compile(const fr_graph *model, const fr_train_options *opt, const char *path)
{
    fr_trainer *t;
    int tok;
    if (opt->lora.rank > 0) /* the file would not record which parameters are adapters */
        return fr_error(FR_ERR_UNSUPPORTED, "LoRA is not compiled into graph files: train the ONNX model with "
                        "--lora-rank");
    FR_TRY(compile_forward(model, opt, &t, &tok));
    fr_fbs_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.batch = t->opt.batch;
    spec.seq = t->opt.seq_len;
    spec.tokens_input = t->g->values[tok].name;
    spec.logits_output = t->opt.logits_output;
    spec.loss_output = t->opt.loss_output;
    spec.train_regex = t->opt.train_regex;
    spec.freeze_regex = t->opt.freeze_regex;
    spec.dims = t->dims;
    spec.n_dims = t->opt.n_dims;
    spec.fp8 = t->opt.fp8;
    spec.ties = t->ties;
    spec.n_ties = t->n_ties;
    /* the pristine model (parameters the exporter merged made separate again) is what export
       and checkpoints of a run see */
    fr_status st = fr_fbs_save(t->g, &t->report, t->pristine, &spec, NULL, path);
    fr_trainer_free(t);
    return st;
}

/* ---- the options as JSON (checkpoint "config" entry) ---- */

typedef struct jbuf {
    char *s;
    size_t len, cap;
    int oom;
} jbuf;

static void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jb_printf(jbuf *b, const char *fmt, ...)
{
    while (!b->oom) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = vsnprintf(b->s ? b->s + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t ncap = (b->cap + (size_t)k + 256) * 2;
        char *ns = realloc(b->s, ncap);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = ncap;
    }
}

static void jb_quoted(jbuf *b, const char *v)
{
    jb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            jb_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            jb_printf(b, "\\u%04x", *p);
        else
            jb_printf(b, "%c", *p);
    }
    jb_printf(b, "\"");
}

static void jb_str(jbuf *b, const char *key, const char *v)
{
    jb_printf(b, "\"%s\": ", key);
    if (v)
        jb_quoted(b, v);
    else
        jb_printf(b, "null");
}

fr_status fr_trainer_config_json(const fr_trainer *t, char **json)
{
    const fr_train_options *o = &t->opt;
    jbuf b = {0};
    jb_printf(&b, "{");
    jb_str(&b, "model", t->model_path);
    jb_printf(&b, ", \"batch\": %lld, \"seq_len\": %lld, ", (long long)o->batch, (long long)o->seq_len);
    jb_str(&b, "tokens_input", fr_trainer_tokens_input(t));
    jb_printf(&b, ", ");
    jb_str(&b, "logits_output", t->logits_name);
    jb_printf(&b, ", ");
    jb_str(&b, "loss_output", o->loss_output);
    jb_printf(&b, ", \"ignore_index\": %lld, ", (long long)o->ignore_index);
    jb_str(&b, "train", o->train_regex);
    jb_printf(&b, ", ");
    jb_str(&b, "freeze", o->freeze_regex);
    jb_printf(&b, ", \"dims\": {");
    for (int i = 0; i < o->n_dims; i++) {
        if (i) jb_printf(&b, ", ");
        jb_quoted(&b, o->dims[i].name);
        jb_printf(&b, ": %lld", (long long)o->dims[i].value);
    }
    jb_printf(&b, "}, ");
    jb_str(&b, "precision", o->precision);
    if (strcmp(o->precision, "fp32") != 0) {
        jb_printf(&b, ", \"fp8\": {");
        jb_str(&b, "recipe", o->fp8.recipe);
        jb_printf(&b, ", ");
        jb_str(&b, "format", o->fp8.fp8_format);
        jb_printf(&b, ", \"bf16_boundary\": %d, ", o->fp8.bf16_boundary);
        jb_str(&b, "exclude", o->fp8.fp8_exclude);
        jb_printf(&b, ", \"fuse\": %d, \"pad_multiple\": %d, \"margin\": %d, \"amax_history\": %d, "
                      "\"amax_algo\": \"%s\", \"interval\": %d}",
                  o->fp8.fuse, o->fp8.pad_multiple, o->fp8.margin, o->fp8.amax_history_len,
                  fr_amax_algo_name(o->fp8.amax_algo), o->fp8.interval);
    }
    const fr_opt_config *c = &o->opt;
    jb_printf(&b, ", \"optimizer\": {\"kind\": \"%s\", \"weight_decay\": %.17g, \"beta1\": %.17g, "
                  "\"beta2\": %.17g, \"eps\": %.17g, \"momentum\": %.17g, \"dampening\": %.17g, "
                  "\"nesterov\": %d, \"decay_1d\": %d, \"state_dtype\": \"%s\", \"master_weights\": \"%s\"}",
              c->kind == FR_OPT_SGD ? "sgd" : "adamw", c->weight_decay, c->beta1, c->beta2, c->eps,
              c->momentum, c->dampening, c->nesterov, c->decay_1d, fr_lowp_state_name(c->state_dtype),
              c->master_bf16 ? "bf16" : "fp32");
    jb_printf(&b, ", \"lr\": {\"schedule\": \"%s\", \"max_lr\": %.17g, \"min_lr\": %.17g, "
                  "\"warmup\": %lld, \"total\": %lld}",
              fr_lr_kind_name(o->lr.kind), o->lr.max_lr, o->lr.min_lr, (long long)o->lr.warmup_steps,
              (long long)o->lr.total_steps);
    if (o->lora.rank > 0) { /* read back by tr_lora_merge_ckpt (export of a checkpoint) */
        jb_printf(&b, ", \"lora\": {\"rank\": %d, \"alpha\": %.17g, ", o->lora.rank, o->lora.alpha);
        jb_str(&b, "targets", o->lora.targets);
        jb_printf(&b, "}");
    }
    jb_printf(&b, ", \"grad_clip\": %.17g, \"grad_accum\": %d, \"seed\": %llu, \"max_bad_steps\": %d}",
              o->grad_clip, o->grad_accum, (unsigned long long)o->seed, o->max_bad_steps);
    if (b.oom) {
        free(b.s);
        return fr_error(FR_ERR_OOM, "out of memory writing the trainer's configuration");
    }
    *json = b.s;
    return FR_OK;
}
