/* Trainer checkpoints (see trainer.h). Layout inside the runtime/io/checkpoint.h container:
 *   tensors (name, kind):
 *     (original parameter name, "param")         FP32 weights, original layout
 *     (original parameter name, <slot>)           optimizer state, slot = PyTorch's state key
 *                                                 ("exp_avg", "exp_avg_sq", "momentum_buffer")
 *     (amax value name, "amax_history")           FP8 delayed scaling: the amax ring buffer
 *     (amax value name, "fp8_scale")              [2] = scale, scale_inv
 *   entries:
 *     "format" = "fp8run-trainer-1", "step", "skipped_total", "bad_in_row", "optim.kind",
 *     "optim.step" (decimal text), "fp8:<amax name>" = "<pos> <updates>", "rng" (32 bytes),
 *     "data" (the loader's bytes, when given), "config" (JSON).
 * Format "fp8run-trainer-2": the same plus low-precision AdamW state or bf16 master weights
 * (runtime/train/train_ckpt_lowp.c); a run with FP32 state and master weights writes format 1.
 * Fused parameters (fp8/bf16 compile) are split into their members in both directions, so
 * the file does not depend on the precision. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/checkpoint.h"
#include "runtime/io/fbs.h"
#include "runtime/train/train_internal.h"

#define TR_CKPT_FORMAT "fp8run-trainer-1"
#define TR_CKPT_FORMAT_LOWP "fp8run-trainer-2"
const char *const fr_trainer_ckpt_formats[] = {TR_CKPT_FORMAT, TR_CKPT_FORMAT_LOWP, NULL};
/* Counters past these are no run's: a CRC-valid file holding them was crafted, and taking them
 * would overflow the counters as training goes on (2^48 steps of one token each is 9 years
 * at a billion steps per second). */
#define TR_MAX_STEP ((int64_t)1 << 48)
#define TR_MAX_BAD_IN_ROW ((int64_t)1 << 30)

static fr_status put_entry_text(fr_ckpt_writer *w, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static fr_status put_entry_text(fr_ckpt_writer *w, const char *key, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return fr_ckpt_write_entry(w, key, buf, strlen(buf));
}

static int64_t max_orig_numel(const fr_trainer *t)
{
    int64_t m = 1;
    for (int i = 0; i < t->n_orig; i++)
        if (t->orig[i].numel > m) m = t->orig[i].numel;
    return m;
}

/* Optimizer slot `slot` of an original parameter, in its original layout. */
static void orig_state(fr_trainer *t, const tr_orig *o, int slot, float *dst)
{
    float *src = fr_optimizer_state(t->optim, o->param, slot);
    if (o->fused)
        tr_slice_copy(o->fused, o->slice, src, dst, 1);
    else
        memcpy(dst, src, (size_t)o->numel * sizeof(float));
}

static fr_status write_all_parts(fr_trainer *t, fr_ckpt_writer *w, const void *data_state, size_t data_len)
{
    float *buf = fr_malloc((size_t)max_orig_numel(t) * sizeof(float), "checkpoint buffer");
    if (!buf) return FR_ERR_OOM;
    fr_status st = FR_OK;
    if (t->has_report) st = fr_fp8_sync_params(t->g, &t->report, 1);
    for (int i = 0; st == FR_OK && i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        st = tr_orig_values(t, o, buf);
        if (st == FR_OK) st = fr_ckpt_write_tensor(w, o->name, "param", FR_F32, o->rank, o->dims, buf);
    }
    /* a re-tied copy is written with the values it stands for, so that applying the
     * checkpoint's weights to the model (eval, export, resume) keeps it tied */
    for (int i = 0; st == FR_OK && i < t->n_ties; i++) {
        const fr_value *sv = &t->g->values[t->ties[i].source], *cv = &t->g->values[t->ties[i].copy];
        const float *src = sv->constant->data;
        int64_t R = sv->dims[0], C = sv->dims[1];
        if (t->ties[i].transposed)
            for (int64_t r = 0; r < R; r++)
                for (int64_t k = 0; k < C; k++) buf[k * R + r] = src[r * C + k];
        else
            memcpy(buf, src, (size_t)(R * C) * sizeof(float));
        st = fr_ckpt_write_tensor(w, cv->name, "param", FR_F32, cv->rank, cv->dims, buf);
    }
    /* FP32 state in the original layout; other dtypes as the optimizer stores them */
    int slots = fr_optimizer_state_dtype(t->optim) == FR_OPT_STATE_F32 ? fr_optimizer_state_count(t->optim) : 0;
    if (st == FR_OK) st = tr_ckpt_write_lowp(t, w);
    for (int s = 0; st == FR_OK && s < slots; s++)
        for (int i = 0; st == FR_OK && i < t->n_orig; i++) {
            const tr_orig *o = &t->orig[i];
            orig_state(t, o, s, buf);
            st = fr_ckpt_write_tensor(w, o->name, fr_optimizer_state_name(t->optim, s), FR_F32, o->rank,
                                      o->dims, buf);
        }
    free(buf);
    for (int i = 0; st == FR_OK && i < t->n_states; i++) {
        const tr_state *s = &t->states[i];
        int64_t n = s->sc.p.history_len, two = 2;
        float sc[2] = {s->sc.scale, s->sc.scale_inv};
        char key[1200];
        st = fr_ckpt_write_tensor(w, s->st->amax_name, "amax_history", FR_F32, 1, &n, s->sc.history);
        if (st == FR_OK) st = fr_ckpt_write_tensor(w, s->st->amax_name, "fp8_scale", FR_F32, 1, &two, sc);
        snprintf(key, sizeof key, "fp8:%s", s->st->amax_name);
        if (st == FR_OK) st = put_entry_text(w, key, "%d %" PRId64, s->sc.pos, s->sc.updates);
    }
    FR_TRY(st);
    uint8_t rng[FR_PRNG_STATE_BYTES];
    fr_prng_get_state(&t->rng, rng);
    const char *format = tr_ckpt_lowp_used(t) ? TR_CKPT_FORMAT_LOWP : TR_CKPT_FORMAT;
    FR_TRY(fr_ckpt_write_entry(w, "format", format, strlen(format)));
    FR_TRY(put_entry_text(w, "step", "%" PRId64, t->step));
    FR_TRY(put_entry_text(w, "skipped_total", "%" PRId64, t->skipped_total));
    FR_TRY(put_entry_text(w, "bad_in_row", "%d", t->bad_in_row));
    FR_TRY(put_entry_text(w, "optim.kind", "%s", fr_optimizer_config(t->optim)->kind == FR_OPT_SGD ? "sgd" : "adamw"));
    FR_TRY(put_entry_text(w, "optim.step", "%" PRId64, fr_optimizer_step_count(t->optim)));
    FR_TRY(fr_ckpt_write_entry(w, "rng", rng, sizeof rng));
    if (data_state) FR_TRY(fr_ckpt_write_entry(w, "data", data_state, data_len));
    char *json;
    FR_TRY(fr_trainer_config_json(t, &json));
    st = fr_ckpt_write_entry(w, "config", json, strlen(json));
    free(json);
    return st;
}

fr_status fr_trainer_save(fr_trainer *t, const char *path, const void *data_state, size_t data_len)
{
    fr_ckpt_writer *w;
    if (t->opt.eval_only)
        return fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s': a trainer built for evaluation only has no training state to save", path);
    FR_TRY(tr_sync_host(t)); /* on every rank: gathering sharded state is collective */
    if (t->opt.rank > 0) return FR_OK; /* data parallel: rank 0 writes */
    FR_TRY(fr_ckpt_writer_open(path, &w));
    fr_status st = write_all_parts(t, w, data_state, data_len);
    if (st != FR_OK) {
        fr_ckpt_writer_abort(w);
        return st;
    }
    return fr_ckpt_writer_commit(w);
}

/* ---- loading ---- */

/* A decimal entry. */
static fr_status entry_i64(const fr_ckpt *c, const char *key, int64_t *out)
{
    const void *v;
    size_t len;
    char buf[64];
    FR_TRY(fr_ckpt_entry(c, key, &v, &len));
    if (len == 0 || len >= sizeof buf)
        return fr_error(FR_ERR_PARSE, "checkpoint '%s': entry '%s' is not a number", fr_ckpt_path(c), key);
    memcpy(buf, v, len);
    buf[len] = '\0';
    char *end;
    long long x = strtoll(buf, &end, 10);
    if (*end)
        return fr_error(FR_ERR_PARSE, "checkpoint '%s': entry '%s' is not a number ('%s')", fr_ckpt_path(c), key, buf);
    *out = x;
    return FR_OK;
}

static int entry_equals(const fr_ckpt *c, const char *key, const char *want)
{
    const void *v;
    size_t len;
    if (fr_ckpt_entry(c, key, &v, &len) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    return len == strlen(want) && memcmp(v, want, len) == 0;
}

static fr_status find_tensor(const fr_ckpt *c, const char *name, const char *kind, int rank,
                             const int64_t *dims, const fr_ckpt_tensor **out)
{
    const fr_ckpt_tensor *ct = fr_ckpt_find(c, name, kind);
    char a[256], b[256];
    if (!ct)
        return fr_error(FR_ERR_INVALID_ARG,
                        "checkpoint '%s' has no %s tensor for '%s' (was it written for another model, "
                        "another optimizer or other --train/--freeze choices?)",
                        fr_ckpt_path(c), kind, name);
    int same = ct->dtype == FR_F32 && ct->rank == rank;
    for (int d = 0; same && d < rank; d++) same = ct->dims[d] == dims[d];
    if (!same)
        return fr_error(FR_ERR_SHAPE, "checkpoint '%s': %s '%s' is %s %s, the model's is float32 %s",
                        fr_ckpt_path(c), kind, name, fr_dtype_name(ct->dtype),
                        fr_shape_str(ct->rank, ct->dims, a, sizeof a), fr_shape_str(rank, dims, b, sizeof b));
    *out = ct;
    return FR_OK;
}

/* Trained here, or a re-tied copy that follows a trained parameter. */
static int trains(const fr_trainer *t, const char *name)
{
    for (int i = 0; i < t->n_orig; i++)
        if (strcmp(t->orig[i].name, name) == 0) return 1;
    for (int i = 0; i < t->n_ties; i++)
        if (strcmp(t->g->values[t->ties[i].copy].name, name) == 0) return 1;
    return 0;
}

/* A parameter the checkpoint holds but this run does not train must be what the model has. */
static fr_status check_untrained(fr_trainer *t, const fr_ckpt *c, const fr_ckpt_tensor *ct)
{
    int vid = fr_graph_find_value(t->pristine, ct->name);
    const fr_tensor *mt = vid >= 0 ? t->pristine->values[vid].constant : NULL;
    if (!mt)
        return fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s' holds parameter '%s', which the model does not have",
                        fr_ckpt_path(c), ct->name);
    if (mt->nbytes != ct->nbytes || mt->dtype != ct->dtype || memcmp(mt->data, ct->data, ct->nbytes) != 0)
        return fr_error(FR_ERR_INVALID_ARG,
                        "checkpoint '%s' holds trained values of '%s', which this run does not train; "
                        "apply the checkpoint's weights to the model first (fr_train_apply_weights)",
                        fr_ckpt_path(c), ct->name);
    return FR_OK;
}

static fr_status load_params(fr_trainer *t, const fr_ckpt *c)
{
    int slots = t->optim && fr_optimizer_state_dtype(t->optim) == FR_OPT_STATE_F32 ? fr_optimizer_state_count(t->optim)
                                                                                    : 0;
    FR_TRY(tr_ckpt_load_lowp(t, c));
    for (int i = 0; i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        const fr_ckpt_tensor *ct;
        float *pdata = t->g->values[t->params[o->param].value].constant->data;
        FR_TRY(find_tensor(c, o->name, "param", o->rank, o->dims, &ct));
        if (o->fused)
            tr_slice_copy(o->fused, o->slice, pdata, (float *)ct->data, 0);
        else
            memcpy(pdata, ct->data, ct->nbytes);
        for (int s = 0; s < slots; s++) {
            float *sdata = fr_optimizer_state(t->optim, o->param, s);
            FR_TRY(find_tensor(c, o->name, fr_optimizer_state_name(t->optim, s), o->rank, o->dims, &ct));
            if (o->fused)
                tr_slice_copy(o->fused, o->slice, sdata, (float *)ct->data, 0);
            else
                memcpy(sdata, ct->data, ct->nbytes);
        }
    }
    /* the original initializers of fused parameters follow (export, eval of the originals) */
    if (t->has_report) FR_TRY(fr_fp8_sync_params(t->g, &t->report, 1));
    for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
        const fr_ckpt_tensor *ct = fr_ckpt_tensor_at(c, i);
        if (strcmp(ct->kind, "param") == 0 && !trains(t, ct->name)) FR_TRY(check_untrained(t, c, ct));
    }
    return FR_OK;
}

static fr_status load_scaling(fr_trainer *t, const fr_ckpt *c)
{
    for (int i = 0; i < t->n_states; i++) {
        tr_state *s = &t->states[i];
        const fr_ckpt_tensor *h = fr_ckpt_find(c, s->st->amax_name, "amax_history");
        if (!h) continue; /* optional: a bf16/fp32 checkpoint starts the scaling afresh */
        int64_t n = s->sc.p.history_len, two = 2, pos, updates;
        const fr_ckpt_tensor *sc;
        char key[1200];
        FR_TRY(find_tensor(c, s->st->amax_name, "amax_history", 1, &n, &h));
        FR_TRY(find_tensor(c, s->st->amax_name, "fp8_scale", 1, &two, &sc));
        snprintf(key, sizeof key, "fp8:%s", s->st->amax_name);
        const void *v;
        size_t len;
        char buf[96];
        FR_TRY(fr_ckpt_entry(c, key, &v, &len));
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, v, len);
        buf[len] = '\0';
        long long p = -1, u = -1;
        if (sscanf(buf, "%lld %lld", &p, &u) != 2 || p < 0 || p >= n || u < 0 || u > TR_MAX_STEP)
            return fr_error(FR_ERR_PARSE, "checkpoint '%s': entry '%s' is malformed ('%s')", fr_ckpt_path(c), key, buf);
        pos = p;
        updates = u;
        const float *scale = sc->data;
        if (!(scale[0] > 0) || !(scale[1] > 0))
            return fr_error(FR_ERR_PARSE, "checkpoint '%s': scale of '%s' is not positive", fr_ckpt_path(c),
                            s->st->amax_name);
        memcpy(s->sc.history, h->data, (size_t)n * sizeof(float));
        s->sc.pos = (int)pos;
        s->sc.updates = updates;
        s->sc.scale = scale[0];
        s->sc.scale_inv = scale[1];
    }
    return FR_OK;
}

fr_status fr_trainer_load(fr_trainer *t, const char *path, void **data_state, size_t *data_len)
{
    if (data_state) *data_state = NULL;
    if (data_len) *data_len = 0;
    fr_ckpt *c;
    FR_TRY(tr_sync_host(t)); /* what the checkpoint does not hold stays as the device had it */
    FR_TRY(fr_ckpt_open(path, &c));
    fr_status st = FR_OK;
    const char *kind = !t->optim ? NULL : fr_optimizer_config(t->optim)->kind == FR_OPT_SGD ? "sgd" : "adamw";
    int64_t step = 0, skipped = 0, bad = 0, ostep = 0;
    if ((st = fr_ckpt_check_format(c, fr_trainer_ckpt_formats)) != FR_OK) goto done;
    if (kind && !entry_equals(c, "optim.kind", kind)) {
        st = fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s' holds the state of another optimizer than %s", path, kind);
        goto done;
    }
    st = tr_ckpt_check_lowp(t, c);
    if (st == FR_OK) st = load_params(t, c);
    if (st == FR_OK) st = load_scaling(t, c);
    if (st == FR_OK) st = entry_i64(c, "step", &step);
    if (st == FR_OK) st = entry_i64(c, "skipped_total", &skipped);
    if (st == FR_OK) st = entry_i64(c, "bad_in_row", &bad);
    if (st == FR_OK) st = entry_i64(c, "optim.step", &ostep);
    if (st == FR_OK && (step < 0 || skipped < 0 || bad < 0 || ostep < 0 || ostep > step))
        st = fr_error(FR_ERR_PARSE, "checkpoint '%s': inconsistent step counters", path);
    else if (st == FR_OK && (step > TR_MAX_STEP || skipped > step || bad > skipped || bad > TR_MAX_BAD_IN_ROW))
        st = fr_error(FR_ERR_PARSE,
                      "checkpoint '%s': impossible step counters (step %" PRId64 ", %" PRId64 " skipped, %" PRId64
                      " bad in a row; at most %" PRId64 " steps, skipped <= step, bad in a row <= skipped)",
                      path, step, skipped, bad, TR_MAX_STEP);
    if (st == FR_OK && t->optim) st = fr_optimizer_set_step_count(t->optim, ostep);
    if (st == FR_OK) {
        const void *v;
        size_t len;
        st = fr_ckpt_entry(c, "rng", &v, &len);
        if (st == FR_OK) st = fr_prng_set_state(&t->rng, v, len);
    }
    if (st == FR_OK && data_state) {
        const void *v;
        size_t len;
        if (fr_ckpt_entry(c, "data", &v, &len) == FR_OK) {
            *data_state = fr_malloc(len ? len : 1, "checkpoint data state");
            if (!*data_state) {
                st = FR_ERR_OOM;
            } else {
                memcpy(*data_state, v, len);
                if (data_len) *data_len = len;
            }
        } else {
            fr_clear_error();
        }
    }
    if (st == FR_OK) {
        t->step = step;
        t->skipped_total = skipped;
        t->bad_in_row = (int)bad;
    }
    if (st == FR_OK) st = tr_sync_device(t);
done:
    fr_ckpt_close(c);
    if (st != FR_OK && !strstr(fr_last_error(), path)) st = fr_error_context(st, "loading checkpoint '%s'", path);
    return st;
}

/* A checkpoint parameter that lives in a slice of a fused parameter of a compiled graph. */
static fr_status apply_to_slice(fr_graph *g, const fr_fp8_fused *fs, int nf, const fr_ckpt *c,
                                const fr_ckpt_tensor *ct, int *applied)
{
    *applied = 0;
    for (int i = 0; i < nf; i++)
        for (int j = 0; j < fs[i].n_slices; j++) {
            const fr_fp8_slice *s = &fs[i].slices[j];
            if (strcmp(s->name, ct->name) != 0) continue;
            const fr_ckpt_tensor *chk;
            FR_TRY(find_tensor(c, ct->name, "param", s->rank, s->dims, &chk));
            tr_slice_copy(&fs[i], s, g->values[fs[i].value].constant->data, (float *)chk->data, 0);
            *applied = 1;
            return FR_OK;
        }
    return FR_OK;
}

/* Every parameter with optimizer state was trained, so its weights must be there too: without
 * them the model's initial value would pass for the trained one. */
static fr_status check_params_present(const fr_ckpt *c)
{
    for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
        const fr_ckpt_tensor *ct = fr_ckpt_tensor_at(c, i);
        if (strcmp(ct->kind, "param") == 0 || strcmp(ct->kind, "amax_history") == 0 ||
            strcmp(ct->kind, "fp8_scale") == 0)
            continue;
        if (!fr_ckpt_find(c, ct->name, "param"))
            return fr_error(FR_ERR_PARSE,
                            "checkpoint '%s' holds optimizer state '%s' of parameter '%s' but not the parameter's "
                            "weights (the file is incomplete)",
                            fr_ckpt_path(c), ct->kind, ct->name);
    }
    return FR_OK;
}

fr_status fr_train_apply_weights(fr_graph *g, const char *ckpt_path, int *n_applied)
{
    fr_ckpt *c;
    int n = 0, nf = 0;
    fr_fp8_fused *fs = NULL;
    if (n_applied) *n_applied = 0;
    /* a compiled graph holds fused parameters: their members are written into their slices */
    if (fr_fbs_is_compiled(g)) FR_TRY(fr_fbs_fused_table(g, &fs, &nf));
    fr_status st = fr_ckpt_open(ckpt_path, &c);
    if (st != FR_OK) {
        fr_fbs_fused_free(fs, nf);
        return st;
    }
    st = fr_ckpt_check_format(c, fr_trainer_ckpt_formats);
    if (st == FR_OK) st = check_params_present(c);
    for (int i = 0; st == FR_OK && i < fr_ckpt_tensor_count(c); i++) {
        const fr_ckpt_tensor *ct = fr_ckpt_tensor_at(c, i);
        if (strcmp(ct->kind, "param") != 0) continue;
        int vid = fr_graph_find_value(g, ct->name);
        fr_tensor *mt = vid >= 0 ? g->values[vid].constant : NULL;
        if (!mt || !(g->values[vid].flags & FR_VAL_INITIALIZER)) {
            int applied = 0;
            if (tr_lora_is_adapter_name(ct->name)) continue; /* merged below */
            if (fs || fr_fbs_is_compiled(g)) {
                if (fr_fbs_is_tied_copy(g, ct->name)) continue; /* follows its source */
            }
            st = apply_to_slice(g, fs, nf, c, ct, &applied);
            if (st == FR_OK && applied) {
                n++;
                continue;
            }
            if (st == FR_OK)
                st = fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s' holds parameter '%s', which the model has no initializer for",
                              ckpt_path, ct->name);
            break;
        }
        const fr_ckpt_tensor *chk;
        st = find_tensor(c, ct->name, "param", mt->rank, mt->dims, &chk);
        if (st == FR_OK && mt->dtype != FR_F32)
            st = fr_error(FR_ERR_SHAPE, "model initializer '%s' is %s, the checkpoint's is float32", ct->name,
                          fr_dtype_name(mt->dtype));
        if (st == FR_OK) {
            memcpy(mt->data, ct->data, ct->nbytes);
            n++;
        }
    }
    int n_lora = 0;
    if (st == FR_OK) st = tr_lora_merge_ckpt(g, c, &n_lora); /* a LoRA run's: W + s B A */
    n += n_lora;
    fr_ckpt_close(c);
    fr_fbs_fused_free(fs, nf);
    if (st == FR_OK && n == 0)
        st = fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s' holds no parameters", ckpt_path);
    if (n_applied) *n_applied = n;
    return st;
}

fr_status fr_train_ckpt_config(const char *ckpt_path, char **json)
{
    fr_ckpt *c;
    *json = NULL;
    FR_TRY(fr_ckpt_open(ckpt_path, &c));
    fr_status fst = fr_ckpt_check_format(c, fr_trainer_ckpt_formats);
    if (fst != FR_OK) {
        fr_ckpt_close(c);
        return fst;
    }
    const void *v;
    size_t len;
    if (fr_ckpt_entry(c, "config", &v, &len) == FR_OK) {
        *json = fr_malloc(len + 1, "checkpoint config");
        if (!*json) {
            fr_ckpt_close(c);
            return FR_ERR_OOM;
        }
        memcpy(*json, v, len);
        (*json)[len] = '\0';
    } else {
        fr_clear_error();
    }
    fr_ckpt_close(c);
    return FR_OK;
}
