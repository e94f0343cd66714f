/* Public API: sessions (a trainer on a backend): steps, evaluation, parameters, checkpoints
 * and export. A session whose step or checkpoint restore failed midway is marked broken,
 * because the trainer does not promise a consistent state after such a failure. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes/fast_path.h"
#include "runtime/api/api_internal.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/exec/perf_model.h"
#include "graph/safe_io.h"
#include "runtime/train/train_internal.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#endif

#define STATS_V1_SIZE offsetof(fp8run_step_stats, available)
#define STATS_AVAILABLE_SIZE (offsetof(fp8run_step_stats, available) + sizeof(int))
#define INFO_V1_SIZE sizeof(fp8run_value_info)
/* the API's queue limit is checked first; a trainer refusing below it would break the session */
_Static_assert(FP8RUN_MAX_QUEUED_STEPS == FR_TRAIN_MAX_QUEUED, "queued-step limits of the API and the trainer differ");
#define MEMORY_V1_SIZE sizeof(fp8run_memory_info)
#define FP8_STAT_V1_SIZE sizeof(fp8run_fp8_stat)

static api_err *slot_of(const fp8run_session *s) { return s ? (api_err *)&s->err : NULL; }

/* NULL session, or a broken one: the error (FP8RUN_OK when usable). */
static fp8run_status usable(const fp8run_session *s, const char *fn)
{
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    if (s->broken)
        return fr_api_error(slot_of(s), FP8RUN_ERR_STATE,
                            "%s: this session is unusable since an earlier failure (%s); destroy it and "
                            "resume from a checkpoint in a new session",
                            fn, s->broken_why);
    return FP8RUN_OK;
}

static void mark_broken(fp8run_session *s, const char *what)
{
    s->broken = 1;
    /* the message may be cut: it is quoted again inside later errors */
    if (snprintf(s->broken_why, sizeof s->broken_why, "%s: %.1500s", what, s->err.msg) < 0) s->broken_why[0] = '\0';
    fr_api_log(FP8RUN_LOG_ERROR, "session broken by a failed %s: %s", what, s->err.msg);
}

/* ---- life cycle ---- */

/* "auto" picks CUDA when the backend is built and a device answers; "cuda" without one is
 * FP8RUN_ERR_UNAVAILABLE (never a silent fallback). *out is the trainer's device option. */
static fp8run_status pick_backend(const char *fn, const char *want, const char **out)
{
    int n = 0;
    int have_gpu = fr_cuda_compiled() && fr_cuda_device_count(&n) == FR_OK && n > 0;
    fr_clear_error();
    if (!want || strcmp(want, "auto") == 0) {
        if (!have_gpu)
            fr_api_log(FP8RUN_LOG_INFO, "backend auto: using cpu (%s)",
                       fr_cuda_compiled() ? "no usable CUDA device" : "built without the CUDA backend");
        else
            fr_api_log(FP8RUN_LOG_INFO, "backend auto: using cuda (%d device%s)", n, n == 1 ? "" : "s");
        *out = have_gpu ? "cuda" : "cpu";
        return FP8RUN_OK;
    }
    if (strcmp(want, "cpu") == 0) {
        *out = "cpu";
        return FP8RUN_OK;
    }
    if (strcmp(want, "cuda") == 0) {
        if (!have_gpu)
            return fr_api_error(NULL, FP8RUN_ERR_UNAVAILABLE, "%s: backend 'cuda' is not available: %s; use 'cpu' or 'auto'",
                                fn, fr_cuda_compiled() ? "no usable CUDA device" : "this build has no CUDA backend");
        *out = "cuda";
        return FP8RUN_OK;
    }
    return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: unknown backend '%s': use 'cpu', 'cuda' or 'auto'", fn,
                        want);
}

FP8RUN_API fp8run_status fp8run_session_create(const fp8run_model *m, const char *backend,
                                               const fp8run_train_config *cfg, fp8run_session **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    const char *be = "cpu";
    fp8run_status ps = pick_backend(fn, backend, &be);
    if (ps != FP8RUN_OK) return ps;
    api_options ao;
    ps = fr_api_options(NULL, fn, cfg, &ao);
    if (ps != FP8RUN_OK) return ps;
    fp8run_session *s = calloc(1, sizeof *s);
    if (!s) {
        fr_api_options_free(&ao);
        return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    }
    s->backend = be;
    ao.o.device = be;
    fr_status st = fr_trainer_new(m->g, &ao.o, &s->t);
    fr_api_options_free(&ao);
    if (st != FR_OK) {
        free(s);
        return fr_api_fail(NULL, fn, st);
    }
    int64_t np = 0;
    for (int i = 0; i < fr_trainer_param_count(s->t); i++) np += fr_trainer_param_numel(s->t, i);
    fr_api_log(FP8RUN_LOG_INFO, "session on %s (%s): %lld parameters in %d tensors trained, %s, batch %lld x %lld, %d "
                                "micro-batch(es) per step",
               be, fr_trainer_device(s->t), (long long)np, fr_trainer_param_count(s->t), s->t->opt.precision, (long long)s->t->opt.batch,
               (long long)s->t->opt.seq_len, s->t->opt.grad_accum);
    *out = s;
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_session_destroy(fp8run_session *s)
{
    if (!s) return;
    fr_trainer_free(s->t);
    free(s->scratch);
    free(s->config_json);
    free(s->out_name);
    free(s->profile);
    free(s->slow_path);
    free(s->stats);
    free(s);
}

FP8RUN_API const char *fp8run_session_error(const fp8run_session *s) { return s ? s->err.msg : "no session (NULL)"; }
FP8RUN_API const char *fp8run_session_backend(const fp8run_session *s) { return s ? s->backend : NULL; }

/* ---- token windows ---- */

/* Check the windows (dtype, count, ids in [0, vocab)) and give them as int64. */
static fp8run_status windows_i64(fp8run_session *s, const char *fn, const void *w, fp8run_dtype dtype,
                                 size_t count, int k, const int64_t **out)
{
    const int64_t B = s->t->opt.batch, T = s->t->opt.seq_len, V = s->t->vocab;
    uint64_t want, ids8;
    /* a product that wraps could match a short buffer the session then reads past */
    if (__builtin_mul_overflow((uint64_t)k, (uint64_t)B, &want) || __builtin_mul_overflow(want, (uint64_t)(T + 1), &want) ||
        want > SIZE_MAX || __builtin_mul_overflow(want, (uint64_t)sizeof(int64_t), &ids8))
        return fr_api_error(&s->err, FP8RUN_ERR_OOM, "%s: %d micro-batch(es) of %lld windows of %lld+1 ids do not fit "
                            "in memory", fn, k, (long long)B, (long long)T);
    if (!w) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: windows is NULL", fn);
    if (dtype != FP8RUN_DTYPE_INT64 && dtype != FP8RUN_DTYPE_INT32)
        return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: token windows must be int64 or int32, not %s", fn,
                            fp8run_dtype_name(dtype));
    if ((uint64_t)count != want)
        return fr_api_error(&s->err, FP8RUN_ERR_SHAPE,
                            "%s: got %zu token ids; this session takes %d micro-batch(es) of %lld windows of "
                            "%lld+1 ids = %llu",
                            fn, count, k, (long long)B, (long long)T, (unsigned long long)want);
    if (dtype == FP8RUN_DTYPE_INT32) {
        if (s->scratch_n < count) {
            int64_t *n = realloc(s->scratch, count * sizeof *n);
            if (!n) return fr_api_error(&s->err, FP8RUN_ERR_OOM, "%s: out of memory for %zu token ids", fn, count);
            s->scratch = n;
            s->scratch_n = count;
        }
        const int32_t *src = w;
        for (size_t i = 0; i < count; i++) s->scratch[i] = src[i];
        w = s->scratch;
    }
    const int64_t *ids = w;
    const uint64_t per = (uint64_t)B * (uint64_t)(T + 1);
    for (size_t i = 0; i < count; i++)
        if (ids[i] < 0 || (V > 0 && ids[i] >= V))
            return fr_api_error(&s->err, FP8RUN_ERR_RANGE,
                                "%s: token id %lld (micro-batch %llu, window %llu, position %llu) is outside the "
                                "model's vocabulary [0, %lld)",
                                fn, (long long)ids[i], (unsigned long long)(i / per),
                                (unsigned long long)(i % per / (uint64_t)(T + 1)),
                                (unsigned long long)(i % (uint64_t)(T + 1)), (long long)V);
    *out = ids;
    return FP8RUN_OK;
}

/* ---- steps ---- */

/* A step's statistics into the caller's struct (its first `use` bytes). */
static void put_stats(fp8run_session *s, const fr_train_stats *ts, int available, fp8run_step_stats *stats, size_t use)
{
    fp8run_step_stats o;
    memset(&o, 0, sizeof o);
    o.struct_size = stats->struct_size;
    o.reason = "";
    o.available = available;
    if (available) {
        snprintf(s->reason, sizeof s->reason, "%s", ts->reason);
        o.step = ts->step;
        o.loss = ts->loss;
        o.grad_norm = ts->grad_norm;
        o.lr = ts->lr;
        o.skipped = ts->skipped;
        o.bad_in_a_row = ts->bad_in_a_row;
        o.reason = s->reason;
    }
    memcpy(stats, &o, use);
}

/* The status of a step's statistics: a skipped step is logged; FR_ERR_NUMERIC of a skipped
 * step (too many in a row) leaves the session consistent, any other failure breaks it. */
static fp8run_status step_result(fp8run_session *s, const char *fn, fr_status st, const fr_train_stats *ts)
{
    if (st == FR_OK && ts->skipped)
        fr_api_log(FP8RUN_LOG_WARN, "step %lld skipped (%d in a row): %s", (long long)ts->step + 1, ts->bad_in_a_row,
                   ts->reason);
    if (st == FR_OK) return FP8RUN_OK;
    fp8run_status ps = fr_api_fail(&s->err, fn, st);
    if (!(st == FR_ERR_NUMERIC && ts->skipped)) mark_broken(s, "training step");
    return ps;
}

/* Arguments of a step: the session usable and trainable, stats large enough, the windows. */
static fp8run_status step_args(fp8run_session *s, const char *fn, const void *windows, fp8run_dtype dtype,
                               size_t count, const int64_t **w)
{
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (s->t->opt.eval_only)
        return fr_api_error(&s->err, FP8RUN_ERR_STATE, "%s: this session was created for evaluation only", fn);
    return windows_i64(s, fn, windows, dtype, count, s->t->opt.grad_accum, w);
}

/* Read back every queued step before something that needs the counters or the weights
 * (evaluation, checkpoints, export, parameters): a data error found there breaks the session. */
static fp8run_status settle(fp8run_session *s, const char *fn)
{
    if (!s->t || fr_trainer_queued(s->t) == 0) return FP8RUN_OK;
    fr_status st = fr_trainer_retire_all(s->t);
    if (st == FR_OK) return FP8RUN_OK;
    fp8run_status ps = fr_api_fail(&s->err, fn, st);
    mark_broken(s, "training step");
    return ps;
}

/* A synchronous step's checks: the session usable, stats large enough (*use: the bytes of it
 * to fill), no queued step waiting for its statistics. */
static fp8run_status sync_step_args(fp8run_session *s, const char *fn, fp8run_step_stats *stats, size_t *use)
{
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (stats && (ps = fr_api_check_out(&s->err, fn, "stats", stats, STATS_V1_SIZE, sizeof *stats, use)) != FP8RUN_OK)
        return ps;
    if (fr_trainer_queued(s->t))
        return fr_api_error(&s->err, FP8RUN_ERR_STATE,
                            "%s: %d queued steps wait for fp8run_session_poll_stats; poll them before a synchronous "
                            "step",
                            fn, fr_trainer_queued(s->t));
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_session_train_step(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                                   size_t count, fp8run_step_stats *stats)
{
    const char *fn = __func__;
    size_t use = 0;
    fp8run_status ps = sync_step_args(s, fn, stats, &use);
    if (ps != FP8RUN_OK) return ps;
    const int64_t *w;
    if ((ps = step_args(s, fn, windows, dtype, count, &w)) != FP8RUN_OK) return ps;
    fr_train_stats ts;
    fr_status st = fr_trainer_step(s->t, w, s->t->opt.grad_accum, &ts);
    if (stats) put_stats(s, &ts, 1, stats, use);
    else snprintf(s->reason, sizeof s->reason, "%s", ts.reason);
    return step_result(s, fn, st, &ts);
}

FP8RUN_API fp8run_status fp8run_session_train_step_async(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                                         size_t count, int64_t *step)
{
    const char *fn = __func__;
    if (step) *step = -1;
    const int64_t *w;
    fp8run_status ps = step_args(s, fn, windows, dtype, count, &w);
    if (ps != FP8RUN_OK) return ps;
    if (fr_trainer_queued(s->t) >= FP8RUN_MAX_QUEUED_STEPS)
        return fr_api_error(&s->err, FP8RUN_ERR_STATE,
                            "%s: %d queued steps wait for fp8run_session_poll_stats (at most %d may)", fn,
                            fr_trainer_queued(s->t), FP8RUN_MAX_QUEUED_STEPS);
    fr_status st = fr_trainer_step_async(s->t, w, s->t->opt.grad_accum, step);
    if (st == FR_OK) return FP8RUN_OK;
    ps = fr_api_fail(&s->err, fn, st);
    mark_broken(s, "training step");
    return ps;
}

/* ---- SFT batches ---- */

/* The SFT step's or eval's arguments: windows (int64) as windows_i64 checks them, and the
 * segment ids and target flags beside them. */
static fp8run_status sft_args(fp8run_session *s, const char *fn, const int64_t *w, const int32_t *seg,
                              const uint8_t *tgt, size_t count, int k, const int64_t **out)
{
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!s->t->opt.sft)
        return fr_api_error(&s->err, FP8RUN_ERR_STATE, "%s: this session was not created for SFT batches "
                            "(config.sft = 1)", fn);
    if (!seg || !tgt) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: segments or targets is NULL", fn);
    return windows_i64(s, fn, w, FP8RUN_DTYPE_INT64, count, k, out);
}

FP8RUN_API fp8run_status fp8run_session_train_step_sft_async(fp8run_session *s, const int64_t *windows,
                                                             const int32_t *segments, const uint8_t *targets,
                                                             size_t count, int64_t all_targets, int64_t *step)
{
    const char *fn = __func__;
    if (step) *step = -1;
    const int64_t *w;
    fp8run_status ps = sft_args(s, fn, windows, segments, targets, count, s ? s->t->opt.grad_accum : 1, &w);
    if (ps != FP8RUN_OK) return ps;
    if (s->t->opt.eval_only)
        return fr_api_error(&s->err, FP8RUN_ERR_STATE, "%s: this session was created for evaluation only", fn);
    if (fr_trainer_queued(s->t) >= FP8RUN_MAX_QUEUED_STEPS)
        return fr_api_error(&s->err, FP8RUN_ERR_STATE, "%s: %d queued steps wait for fp8run_session_poll_stats", fn,
                            fr_trainer_queued(s->t));
    fr_status st = fr_trainer_step_sft_async(s->t, w, segments, targets, s->t->opt.grad_accum, all_targets, step);
    if (st == FR_OK) return FP8RUN_OK;
    ps = fr_api_fail(&s->err, fn, st);
    if (st != FR_ERR_INVALID_ARG && st != FR_ERR_RANGE) mark_broken(s, "training step"); /* bad batches change nothing */
    return ps;
}

FP8RUN_API fp8run_status fp8run_session_train_step_sft(fp8run_session *s, const int64_t *windows,
                                                       const int32_t *segments, const uint8_t *targets, size_t count,
                                                       fp8run_step_stats *stats)
{
    const char *fn = __func__;
    size_t use = 0;
    fp8run_status ps = sync_step_args(s, fn, stats, &use);
    if (ps != FP8RUN_OK) return ps;
    if ((ps = fp8run_session_train_step_sft_async(s, windows, segments, targets, count, 0, NULL)) != FP8RUN_OK) return ps;
    fr_train_stats ts;
    memset(&ts, 0, sizeof ts);
    int got = 0;
    fr_status st = fr_trainer_poll(s->t, 1, &ts, &got);
    if (stats) put_stats(s, &ts, 1, stats, use);
    else snprintf(s->reason, sizeof s->reason, "%s", ts.reason);
    return step_result(s, fn, st, &ts);
}

FP8RUN_API fp8run_status fp8run_session_eval_sft(fp8run_session *s, const int64_t *windows, const int32_t *segments,
                                                 const uint8_t *targets, size_t count, double *loss,
                                                 int64_t *n_targets)
{
    const char *fn = __func__;
    const int64_t *w;
    fp8run_status ps = sft_args(s, fn, windows, segments, targets, count, 1, &w);
    if (ps != FP8RUN_OK) return ps;
    if (!loss) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: loss is NULL", fn);
    if ((ps = settle(s, fn)) != FP8RUN_OK) return ps;
    return fr_api_fail(&s->err, fn, fr_trainer_eval_sft(s->t, w, segments, targets, loss, n_targets));
}

FP8RUN_API int fp8run_session_sft_positions(const fp8run_session *s)
{
    return s && s->t ? fr_trainer_sft_positions(s->t) : 0;
}

FP8RUN_API fp8run_status fp8run_session_poll_stats(fp8run_session *s, int wait, fp8run_step_stats *stats)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!stats) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: stats is NULL", fn);
    size_t use = 0;
    ps = fr_api_check_out(&s->err, fn, "stats", stats, STATS_AVAILABLE_SIZE, sizeof *stats, &use);
    if (ps != FP8RUN_OK) return ps;
    fr_train_stats ts;
    memset(&ts, 0, sizeof ts);
    int got = 0;
    fr_status st = fr_trainer_poll(s->t, wait, &ts, &got);
    put_stats(s, &ts, got, stats, use);
    if (!got && st == FR_OK) return FP8RUN_OK;
    return step_result(s, fn, st, &ts);
}

FP8RUN_API int fp8run_session_steps_queued(const fp8run_session *s) { return s ? fr_trainer_queued(s->t) : 0; }

FP8RUN_API fp8run_status fp8run_session_eval(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                             size_t count, double *loss)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!loss) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: loss is NULL", fn);
    const int64_t *w;
    ps = windows_i64(s, fn, windows, dtype, count, 1, &w);
    if (ps != FP8RUN_OK || (ps = settle(s, fn)) != FP8RUN_OK) return ps;
    /* evaluation changes no training state: a failure leaves the session usable */
    return fr_api_fail(&s->err, fn, fr_trainer_eval(s->t, w, loss));
}

FP8RUN_API fp8run_status fp8run_session_eval_output(fp8run_session *s, const char *name, fp8run_value_info *info,
                                                    float *dst, size_t count)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    size_t use = 0;
    if (info && (ps = fr_api_check_out(&s->err, fn, "info", info, INFO_V1_SIZE, sizeof *info, &use)) != FP8RUN_OK)
        return ps;
    const fr_tensor *t = fr_trainer_eval_output(s->t, name);
    if (!t)
        return fr_api_error(&s->err, s->t->eval_ran ? FP8RUN_ERR_INVALID_ARG : FP8RUN_ERR_STATE,
                            s->t->eval_ran ? "%s: the model has no output named '%s'"
                                           : "%s: no evaluation has run yet (output '%s')",
                            fn, name ? name : "(logits)");
    const char *oname = name ? name : s->t->logits_name ? s->t->logits_name : s->t->model_outputs[0];
    char *copy = strdup(oname);
    if (!copy) return fr_api_error(&s->err, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    free(s->out_name);
    s->out_name = copy;
    if (info) fr_api_shape_info(s->out_name, t->dtype, t->rank, t->dims, info, use);
    if (!dst) return FP8RUN_OK;
    int64_t n = fr_tensor_numel(t);
    if ((uint64_t)n != (uint64_t)count)
        return fr_api_error(&s->err, FP8RUN_ERR_SHAPE, "%s: output '%s' has %lld elements, the buffer %zu", fn,
                            s->out_name, (long long)n, count);
    if (t->dtype != FR_F32)
        return fr_api_error(&s->err, FP8RUN_ERR_UNSUPPORTED, "%s: output '%s' is %s, not float32", fn, s->out_name,
                            fr_dtype_name(t->dtype));
    memcpy(dst, t->data, count * sizeof(float));
    return FP8RUN_OK;
}

/* ---- what was built ---- */

FP8RUN_API int64_t fp8run_session_batch(const fp8run_session *s) { return s ? fr_trainer_batch(s->t) : 0; }
FP8RUN_API int64_t fp8run_session_seq_len(const fp8run_session *s) { return s ? fr_trainer_seq_len(s->t) : 0; }
FP8RUN_API int fp8run_session_grad_accum(const fp8run_session *s) { return s ? fr_trainer_grad_accum(s->t) : 0; }
FP8RUN_API int64_t fp8run_session_vocab(const fp8run_session *s) { return s ? fr_trainer_vocab(s->t) : 0; }
FP8RUN_API int64_t fp8run_session_steps_done(const fp8run_session *s) { return s ? fr_trainer_steps_done(s->t) : 0; }
FP8RUN_API int64_t fp8run_session_steps_skipped(const fp8run_session *s)
{
    return s ? fr_trainer_skipped_total(s->t) : 0;
}

FP8RUN_API const char *fp8run_session_config_json(fp8run_session *s)
{
    if (!s) {
        fr_api_ignore(fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", __func__));
        return NULL;
    }
    char *j;
    fr_status st = fr_trainer_config_json(s->t, &j);
    if (st != FR_OK) {
        fr_api_ignore(fr_api_fail(&s->err, __func__, st));
        return NULL;
    }
    free(s->config_json);
    s->config_json = j;
    return j;
}

FP8RUN_API fp8run_status fp8run_session_report(const fp8run_session *s, fp8run_report **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(slot_of(s), FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    fp8run_status ps = s->broken ? FP8RUN_OK : settle((fp8run_session *)s, fn);
    if (ps != FP8RUN_OK) return ps;
    return fr_api_fail(slot_of(s), fn, fr_api_report_from_trainer(s->t, out));
}

FP8RUN_API const char *fp8run_session_device(const fp8run_session *s) { return s ? fr_trainer_device(s->t) : NULL; }
FP8RUN_API const char *fp8run_session_tokens_input(const fp8run_session *s)
{
    return s ? fr_trainer_tokens_input(s->t) : NULL;
}

FP8RUN_API fp8run_status fp8run_session_memory(const fp8run_session *s, fp8run_memory_info *info)
{
    const char *fn = __func__;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    size_t use;
    fp8run_status ps = fr_api_check_out(slot_of(s), fn, "info", info, MEMORY_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    size_t used = 0, total = 0;
    fp8run_memory_info m;
    memset(&m, 0, sizeof m);
    m.struct_size = info->struct_size;
    m.planned_bytes = fr_trainer_memory(s->t, &used, &total);
    m.device_used_bytes = used;
    m.device_total_bytes = total;
    memcpy(info, &m, use);
    return FP8RUN_OK;
}

FP8RUN_API const char *fp8run_session_profile(fp8run_session *s)
{
    if (!s) return NULL;
    free(s->profile);
    s->profile = fr_trainer_profile(s->t);
    return s->profile;
}

FP8RUN_API const char *fp8run_session_slow_path(fp8run_session *s)
{
    if (!s) return NULL;
    free(s->slow_path);
    s->slow_path = NULL;
    const fr_graph *g = s->t->g;
    /* each node's time estimated by its ceiling on this device (no profile needed) */
    double *ms = calloc((size_t)g->n_nodes + 1, sizeof(double)), total = 0;
    fr_device_peaks pk;
    fr_slow_report sr;
    if (!ms || fr_device_peaks_for(fr_trainer_device(s->t), &pk) != FR_OK || fr_fast_path_check(g, &sr) != FR_OK) {
        free(ms);
        fr_clear_error();
        return NULL;
    }
    /* attention that never ran on cuDNN (the context's counts, in its summary) */
    char attn[512];
    fr_trainer_attention(s->t, attn, sizeof attn);
    if (strncmp(attn, "fp8run kernels (", 16) == 0) {
        attn[strlen(attn) - 1] = 0; /* "fp8run kernels (why)" -> why */
        fr_fast_path_generic_attention(&sr, g, attn + 16);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        fr_node_cost c;
        fr_node_cost_of(g, &g->nodes[i], &c);
        ms[i] = fr_ceiling_ms(&c, &pk, NULL);
        total += ms[i];
    }
    if (fr_slow_report_text(&sr, g, total > 0 ? ms : NULL, total, 1, &s->slow_path) != FR_OK) fr_clear_error();
    fr_slow_report_free(&sr);
    free(ms);
    return s->slow_path;
}

FP8RUN_API const char *fp8run_session_attention(fp8run_session *s)
{
    if (!s) return NULL;
    fr_trainer_attention(s->t, s->attention, sizeof s->attention);
    return s->attention;
}

FP8RUN_API const char *fp8run_session_gemm(fp8run_session *s)
{
    if (!s) return NULL;
    fr_trainer_gemm(s->t, s->gemm, sizeof s->gemm);
    return s->gemm;
}

FP8RUN_API const char *fp8run_cudnn_info(int *version)
{
#ifdef FP8RUN_HAVE_CUDA
    const char *text = fr_cudnn_describe(); /* loads it once */
    if (version) *version = (int)fr_cudnn_version();
    return text;
#else
    if (version) *version = 0;
    return "cuDNN not used: this fp8run was built without the CUDA backend";
#endif
}

FP8RUN_API const char *fp8run_cudnn_attention_support(void)
{
#ifdef FP8RUN_HAVE_CUDA
    return fr_cudnn_support_text();
#else
    return "";
#endif
}

FP8RUN_API fp8run_status fp8run_session_fp8_stats(fp8run_session *s, int *count)
{
    const char *fn = __func__;
    if (count) *count = 0;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    if (!count) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: count is NULL", fn);
    fp8run_status ps = s->broken ? FP8RUN_OK : settle(s, fn);
    if (ps != FP8RUN_OK) return ps;
    const fr_fp8_report *r = fr_trainer_fp8_report(s->t);
    int cap = r ? 3 * r->n_layers : 0;
    fr_fp8_stat *st = calloc((size_t)(cap ? cap : 1), sizeof *st);
    if (!st) return fr_api_error(&s->err, FP8RUN_ERR_OOM, "%s: out of memory for %d entries", fn, cap);
    /* one call: on a GPU each reads the device's state */
    int n = fr_trainer_fp8_stats(s->t, st, cap);
    if (n > cap) n = cap; /* cannot happen: three per fp8 Linear of the report */
    free(s->stats);
    s->stats = st;
    s->n_stats = n;
    *count = n;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_session_fp8_stat(const fp8run_session *s, int i, fp8run_fp8_stat *info)
{
    const char *fn = __func__;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    size_t use;
    fp8run_status ps = fr_api_check_out(slot_of(s), fn, "info", info, FP8_STAT_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= s->n_stats)
        return fr_api_error(slot_of(s), FP8RUN_ERR_RANGE,
                            "%s: index %d is outside [0, %d) (take a snapshot with fp8run_session_fp8_stats)", fn, i,
                            s->n_stats);
    const fr_fp8_stat *x = &s->stats[i];
    fp8run_fp8_stat o;
    memset(&o, 0, sizeof o);
    o.struct_size = info->struct_size;
    o.layer = x->layer;
    o.operand = x->operand;
    o.recipe = x->recipe;
    o.format = x->format;
    o.step = x->step;
    o.has_amax = x->has_amax;
    o.amax = x->amax;
    o.has_scale = x->has_scale;
    o.scale = x->scale;
    o.next_scale = x->next_scale;
    o.history_max = x->history_max;
    o.updates = x->updates;
    o.fp8_max = x->fp8_max;
    o.range_use = x->range_use;
    o.saturated = x->saturated;
    o.note = x->note ? x->note : "";
    memcpy(info, &o, use);
    return FP8RUN_OK;
}

/* ---- parameters ---- */

FP8RUN_API int fp8run_session_param_count(const fp8run_session *s) { return s ? fr_trainer_param_count(s->t) : 0; }

FP8RUN_API fp8run_status fp8run_session_param(const fp8run_session *s, int i, fp8run_value_info *info)
{
    const char *fn = __func__;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    size_t use;
    fp8run_status ps = fr_api_check_out(slot_of(s), fn, "info", info, INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    int n = s->t->n_orig;
    if (i < 0 || i >= n)
        return fr_api_error(slot_of(s), FP8RUN_ERR_RANGE, "%s: parameter index %d is outside [0, %d)", fn, i, n);
    const tr_orig *o = &s->t->orig[i];
    fr_api_shape_info(o->name, FR_F32, o->rank, o->dims, info, use);
    return FP8RUN_OK;
}

/* The trained parameter called name, its size checked against count. */
static fp8run_status find_orig(fp8run_session *s, const char *fn, const char *name, const void *buf, size_t count,
                               const tr_orig **out)
{
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!name || !buf)
        return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, !name ? "name" : "the buffer");
    for (int i = 0; i < s->t->n_orig; i++) {
        const tr_orig *o = &s->t->orig[i];
        if (strcmp(o->name, name) != 0) continue;
        if ((uint64_t)o->numel != (uint64_t)count)
            return fr_api_error(&s->err, FP8RUN_ERR_SHAPE, "%s: parameter '%s' has %lld elements, the buffer %zu", fn,
                                name, (long long)o->numel, count);
        *out = o;
        return FP8RUN_OK;
    }
    return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG,
                        "%s: '%s' is not a parameter this session trains (see fp8run_session_param)", fn, name);
}

FP8RUN_API fp8run_status fp8run_session_get_param(fp8run_session *s, const char *name, float *dst, size_t count)
{
    const char *fn = __func__;
    const tr_orig *o;
    fp8run_status ps = find_orig(s, fn, name, dst, count, &o);
    if (ps != FP8RUN_OK || (ps = settle(s, fn)) != FP8RUN_OK) return ps;
    return fr_api_fail(&s->err, fn, fr_trainer_get_param(s->t, name, dst));
}

FP8RUN_API fp8run_status fp8run_session_set_param(fp8run_session *s, const char *name, const float *src,
                                                  size_t count)
{
    const char *fn = __func__;
    const tr_orig *o;
    fp8run_status ps = find_orig(s, fn, name, src, count, &o);
    if (ps != FP8RUN_OK || (ps = settle(s, fn)) != FP8RUN_OK) return ps;
    (void)o;
    return fr_api_fail(&s->err, fn, fr_trainer_set_param(s->t, name, src));
}

/* ---- checkpoints and export ---- */

FP8RUN_API fp8run_status fp8run_session_save(fp8run_session *s, const char *path, const fp8run_data_loader *data)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!path || !path[0]) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if ((ps = settle(s, fn)) != FP8RUN_OK) return ps;
    uint8_t ds[FR_DATA_STATE_BYTES];
    if (data) fr_data_get_state(data->dl, ds);
    ps = fr_api_fail(&s->err, fn, fr_trainer_save(s->t, path, data ? ds : NULL, data ? sizeof ds : 0));
    if (ps == FP8RUN_OK)
        fr_api_log(FP8RUN_LOG_INFO, "checkpoint '%s' saved at step %lld", path, (long long)fr_trainer_steps_done(s->t));
    return ps;
}

FP8RUN_API fp8run_status fp8run_session_load(fp8run_session *s, const char *path, fp8run_data_loader *data)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!path || !path[0]) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    /* a missing file or one that is no checkpoint is refused before anything changes */
    FILE *f;
    if (fr_fopen_regular(path, "checkpoint", 0, &f, NULL) != FR_OK) return fr_api_fail(&s->err, fn, FR_ERR_IO);
    fclose(f);
    if (!fp8run_is_checkpoint(path))
        return fr_api_error(&s->err, FP8RUN_ERR_PARSE, "%s: '%s' is not an fp8run checkpoint", fn, path);
    if ((ps = settle(s, fn)) != FP8RUN_OK) return ps;
    void *ds = NULL;
    size_t len = 0;
    fr_status st = fr_trainer_load(s->t, path, data ? &ds : NULL, data ? &len : NULL);
    if (st != FR_OK) {
        ps = fr_api_fail(&s->err, fn, st);
        mark_broken(s, "checkpoint restore");
        return ps;
    }
    if (data && !ds) {
        ps = fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG,
                          "%s: checkpoint '%s' holds no data loader state (pass data = NULL to restore the rest "
                          "only); the session was restored, the loader was not",
                          fn, path);
    } else if (data) {
        st = fr_data_set_state(data->dl, ds, len);
        if (st != FR_OK) {
            ps = fr_api_fail(&s->err, fn, st);
            fr_api_ignore(fr_api_fail(&data->err, fn, st)); /* the same failure, in the loader's own slot */
        }
    }
    free(ds);
    if (ps == FP8RUN_OK)
        fr_api_log(FP8RUN_LOG_INFO, "checkpoint '%s' restored at step %lld", path,
                   (long long)fr_trainer_steps_done(s->t));
    return ps;
}

FP8RUN_API fp8run_status fp8run_session_export(fp8run_session *s, const char *path)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!path || !path[0]) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if ((ps = settle(s, fn)) != FP8RUN_OK) return ps;
    return fr_api_fail(&s->err, fn, fr_trainer_export(s->t, path));
}

FP8RUN_API fp8run_status fp8run_session_export_adapter(fp8run_session *s, const char *dir)
{
    const char *fn = __func__;
    fp8run_status ps = usable(s, fn);
    if (ps != FP8RUN_OK) return ps;
    if (!dir || !dir[0]) return fr_api_error(&s->err, FP8RUN_ERR_INVALID_ARG, "%s: no folder given", fn);
    if ((ps = settle(s, fn)) != FP8RUN_OK) return ps;
    return fr_api_fail(&s->err, fn, fr_trainer_export_adapter(s->t, dir));
}

FP8RUN_API fp8run_status fp8run_session_param_bytes(const fp8run_session *s, fp8run_param_bytes *out)
{
    const char *fn = __func__;
    if (!s) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: session is NULL", fn);
    size_t use;
    fp8run_status ps = fr_api_check_out(slot_of(s), fn, "out", out, sizeof *out, sizeof *out, &use);
    if (ps != FP8RUN_OK) return ps;
    fr_param_bytes b;
    fr_trainer_param_bytes(s->t, &b);
    fp8run_param_bytes r = {use, b.trained, b.trained_bytes, b.frozen, b.frozen_bytes};
    memcpy(out, &r, use);
    return FP8RUN_OK;
}
