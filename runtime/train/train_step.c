/* The trainer's steps (see trainer.h): the queue of steps and its counters (skipped steps in a
 * row), and eval. The graphs run on the trainer's backend (runtime/train/train_backend.h). Messages
 * number steps from 1 (step N is the one with fr_train_stats.step N - 1), as the CLI does. */
#include <stdio.h>
#include <string.h>

#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"

/* ---- steps ---- */

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
                        t->bad_in_row, t->opt.max_bad_steps, (long long)stats->step + 1, stats->reason);
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

/* An error reading back a step names it, and the steps queued after it: on a device an
 * asynchronous failure is found by the first read-back after it happened. */
static fr_status step_error(const fr_trainer *t, fr_status st, int64_t step)
{
    if (t->step - 1 <= step) return fr_error_context(st, "step %lld", (long long)step + 1);
    if (t->step - 1 == step + 1)
        return fr_error_context(st, "step %lld (step %lld was queued after it)", (long long)step + 1,
                                (long long)step + 2);
    return fr_error_context(st, "step %lld (steps %lld to %lld were queued after it)", (long long)step + 1,
                            (long long)step + 2, (long long)t->step);
}

/* Read back queue entry i (the oldest one not read back). */
static fr_status retire(fr_trainer *t, int i)
{
    tr_queued *q = &t->queue[i];
    if (q->retired) return FR_OK;
    fr_status st = t->be->retire(t, i, q->k, &q->stats);
    if (st != FR_OK) return step_error(t, st, q->stats.step);
    return settle(t, q);
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
    FR_TRY(t->be->queue(t, windows, k, slot, &q->stats));
    t->step++;
    t->q_len++;
    if (step) *step = q->stats.step;
    return t->be->queues ? FR_OK : retire(t, slot); /* finished: counted now */
}

fr_status fr_trainer_poll(fr_trainer *t, int wait, fr_train_stats *stats, int *got)
{
    *got = 0;
    if (!t || !stats) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_poll: no trainer or stats");
    if (t->q_len == 0) return FR_OK;
    tr_queued *q = &t->queue[t->q_head];
    if (!q->retired && !wait && !t->be->done(t, t->q_head)) return FR_OK;
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
    FR_TRY(t->be->eval(t, windows, loss));
    t->eval_ran = 1;
    return FR_OK;
}

const fr_tensor *fr_trainer_eval_output(fr_trainer *t, const char *name)
{
    if (!t || !t->eval_ran) return NULL;
    if (!name) name = t->logits_name ? t->logits_name : (t->n_model_outputs ? t->model_outputs[0] : NULL);
    return name ? t->be->eval_output(t, name) : NULL;
}
