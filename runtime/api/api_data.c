/* Public API: the token-file data loader (runtime/io/data.h) behind an opaque handle. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "graph/safe_io.h"
#include "runtime/io/sft_data.h"

/* the first struct: fields appended later (no_packing) are zero, their default, in an older one */
#define DATA_V1_SIZE offsetof(fp8run_data_config, no_packing)

static void data_defaults(fp8run_data_config *c)
{
    memset(c, 0, sizeof *c);
    c->batch = 1;
    c->seq_len = 1;
    c->order = FP8RUN_DATA_RANDOM;
    c->format = FP8RUN_DATA_AUTO;
    c->token_dtype = FP8RUN_DTYPE_UINT16;
}

FP8RUN_API fp8run_status fp8run_data_config_init(fp8run_data_config *cfg, size_t size)
{
    fp8run_data_config d;
    data_defaults(&d);
    return fr_api_struct_init(__func__, "fp8run_data_config", cfg, size, DATA_V1_SIZE, &d, sizeof d);
}

static fp8run_status to_opts(const char *fn, const fp8run_data_config *cfg, fr_data_opts *o)
{
    fp8run_data_config c;
    data_defaults(&c);
    if (cfg) {
        fp8run_status ps = fr_api_read_in(NULL, fn, "config", cfg, DATA_V1_SIZE, &c, sizeof c);
        if (ps != FP8RUN_OK) return ps;
    }
    if (c.batch < 1 || c.seq_len < 1)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: config.batch (%lld) and seq_len (%lld) must be >= 1", fn,
                            (long long)c.batch, (long long)c.seq_len);
    if (c.order != FP8RUN_DATA_RANDOM && c.order != FP8RUN_DATA_SEQUENTIAL)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: config.order %d is neither random (0) nor sequential (1)",
                            fn, (int)c.order);
    if (c.format != FP8RUN_DATA_AUTO && c.format != FP8RUN_DATA_RAW)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: config.format %d is neither auto (0) nor raw (1)", fn,
                            (int)c.format);
    if (c.token_dtype != FP8RUN_DTYPE_UINT16 && c.token_dtype != FP8RUN_DTYPE_UINT32 &&
        c.token_dtype != FP8RUN_DTYPE_UINT8)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: config.token_dtype must be uint16 or uint32 (or uint8: a text file's bytes), not %s", fn,
                            fp8run_dtype_name(c.token_dtype));
    if (c.vocab_size < 0 || c.max_batches < 0)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: config.vocab_size and max_batches must be >= 0", fn);
    *o = fr_data_opts_default();
    o->batch = c.batch;
    o->seq_len = c.seq_len;
    o->order = c.order == FP8RUN_DATA_SEQUENTIAL ? FR_DATA_SEQUENTIAL : FR_DATA_RANDOM;
    o->seed = c.seed;
    o->token_dtype = (fr_dtype)c.token_dtype;
    o->format = c.format == FP8RUN_DATA_RAW ? FR_DATA_RAW : FR_DATA_AUTO;
    o->vocab_size = c.vocab_size;
    o->no_mmap = c.no_mmap != 0;
    o->max_batches = c.max_batches;
    o->packing = !c.no_packing;
    return FP8RUN_OK;
}

static fp8run_status open_common(const char *fn, const char *path, const fp8run_data_config *cfg, int val,
                                 int64_t num_batches, fp8run_data_loader **out)
{
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if (num_batches < 0)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: num_batches must be >= 0, got %lld", fn,
                            (long long)num_batches);
    fr_data_opts o;
    fp8run_status ps = to_opts(fn, cfg, &o);
    if (ps != FP8RUN_OK) return ps;
    fp8run_data_loader *d = calloc(1, sizeof *d);
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    fr_status st = val ? fr_data_open_val(path, &o, num_batches, &d->dl) : fr_data_open(path, &o, &d->dl);
    if (st != FR_OK) {
        free(d);
        return fr_api_fail(NULL, NULL, st);
    }
    d->per_batch = o.batch * (o.seq_len + 1);
    *out = d;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_data_open(const char *path, const fp8run_data_config *cfg, fp8run_data_loader **out)
{
    return open_common(__func__, path, cfg, 0, 0, out);
}

FP8RUN_API fp8run_status fp8run_data_open_val(const char *path, const fp8run_data_config *cfg, int64_t num_batches,
                                              fp8run_data_loader **out)
{
    return open_common(__func__, path, cfg, 1, num_batches, out);
}

FP8RUN_API void fp8run_data_close(fp8run_data_loader *d)
{
    if (!d) return;
    fr_data_close(d->dl);
    free(d);
}

FP8RUN_API const char *fp8run_data_error(const fp8run_data_loader *d) { return d ? d->err.msg : "no data loader (NULL)"; }

FP8RUN_API fp8run_status fp8run_data_next(fp8run_data_loader *d, fp8run_dtype dtype, void *windows, size_t count)
{
    const char *fn = __func__;
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader is NULL", fn);
    if (!windows) return fr_api_error(&d->err, FP8RUN_ERR_INVALID_ARG, "%s: windows is NULL", fn);
    if (dtype != FP8RUN_DTYPE_INT64 && dtype != FP8RUN_DTYPE_INT32)
        return fr_api_error(&d->err, FP8RUN_ERR_INVALID_ARG, "%s: windows must be int64 or int32, not %s", fn,
                            fp8run_dtype_name(dtype));
    const uint64_t per = (uint64_t)d->per_batch;
    if (count == 0 || (uint64_t)count % per != 0)
        return fr_api_error(&d->err, FP8RUN_ERR_SHAPE,
                            "%s: %zu token ids is not a positive multiple of one batch (B x (T+1) = %llu)", fn, count,
                            (unsigned long long)per);
    uint8_t saved[FR_DATA_STATE_BYTES];
    fr_data_get_state(d->dl, saved);
    size_t esize = dtype == FP8RUN_DTYPE_INT64 ? 8 : 4;
    for (uint64_t b = 0; b < (uint64_t)count / per; b++) {
        fr_status st = fr_data_next(d->dl, (fr_dtype)dtype, (char *)windows + b * per * esize);
        if (st != FR_OK) {
            /* the batches already taken are given back: the state is as before the call */
            fp8run_status ps = fr_api_fail(&d->err, fn, st);
            /* the state was taken from this loader a moment ago, so it cannot be refused; the
             * error being returned is the one that counts */
            fr_ignore_status(fr_data_set_state(d->dl, saved, sizeof saved));
            return ps;
        }
    }
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_data_reset(fp8run_data_loader *d)
{
    if (d) fr_data_reset(d->dl);
}

FP8RUN_API int64_t fp8run_data_num_tokens(const fp8run_data_loader *d) { return d ? fr_data_num_tokens(d->dl) : 0; }
FP8RUN_API fp8run_dtype fp8run_data_token_dtype(const fp8run_data_loader *d)
{
    return d ? (fp8run_dtype)fr_data_token_dtype(d->dl) : FP8RUN_DTYPE_UNDEFINED;
}
FP8RUN_API int64_t fp8run_data_batches_done(const fp8run_data_loader *d) { return d ? fr_data_batches(d->dl) : 0; }
FP8RUN_API int64_t fp8run_data_epoch(const fp8run_data_loader *d) { return d ? fr_data_epoch(d->dl) : 0; }
FP8RUN_API int64_t fp8run_data_batches_per_epoch(const fp8run_data_loader *d)
{
    return d ? fr_data_batches_per_epoch(d->dl) : 0;
}

FP8RUN_API fp8run_status fp8run_data_check_tokens(fp8run_data_loader *d, int64_t vocab_size)
{
    const char *fn = __func__;
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader is NULL", fn);
    if (vocab_size < 1)
        return fr_api_error(&d->err, FP8RUN_ERR_INVALID_ARG, "%s: vocab_size must be >= 1, got %lld", fn,
                            (long long)vocab_size);
    return fr_api_fail(&d->err, fn, fr_data_check_tokens(d->dl, vocab_size));
}

FP8RUN_API size_t fp8run_data_state_size(void) { return FR_DATA_STATE_BYTES; }

FP8RUN_API fp8run_status fp8run_data_get_state(const fp8run_data_loader *d, void *buf, size_t len)
{
    const char *fn = __func__;
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader is NULL", fn);
    api_err *slot = (api_err *)&d->err;
    if (!buf) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: buf is NULL", fn);
    if (len != FR_DATA_STATE_BYTES)
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: the state is %d bytes (fp8run_data_state_size()), got a %zu-byte buffer",
                            fn, FR_DATA_STATE_BYTES, len);
    fr_data_get_state(d->dl, buf);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_data_set_state(fp8run_data_loader *d, const void *buf, size_t len)
{
    const char *fn = __func__;
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader is NULL", fn);
    if (!buf) return fr_api_error(&d->err, FP8RUN_ERR_INVALID_ARG, "%s: buf is NULL", fn);
    return fr_api_fail(&d->err, fn, fr_data_set_state(d->dl, buf, len));
}

/* ---- SFT token files ---- */

FP8RUN_API int fp8run_data_is_sft(const fp8run_data_loader *d) { return d ? fr_data_is_sft(d->dl) : 0; }

FP8RUN_API int fp8run_file_is_sft(const char *path)
{
    char head[8];
    FILE *f = NULL;
    /* only a regular file is read: a FIFO given as a path would block the open */
    if (!path || fr_fopen_regular(path, "token file", 0, &f, NULL) != FR_OK) {
        fr_clear_error();
        return 0;
    }
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return fr_sft_is_sft(head, n);
}

FP8RUN_API fp8run_status fp8run_data_sft_info(const fp8run_data_loader *d, fp8run_sft_info *info)
{
    const char *fn = __func__;
    if (!d || !info) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader or info is NULL", fn);
    size_t use = 0;
    /* max_examples came later: an older caller's struct ends before it */
    fp8run_status ps = fr_api_check_out((api_err *)&d->err, fn, "info", info, offsetof(fp8run_sft_info, max_examples),
                                        sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    fr_data_sft_stats s;
    fr_data_sft_info(d->dl, &s);
    fp8run_sft_info o = {info->struct_size, s.examples, s.windows, s.truncated, s.tokens, s.target_labels, s.eos,
                         s.vocab, s.max_examples};
    memcpy(info, &o, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_data_next_sft(fp8run_data_loader *d, int64_t *windows, int32_t *segments,
                                              uint8_t *targets, size_t count, int64_t *n_labels)
{
    const char *fn = __func__;
    if (!d) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: data loader is NULL", fn);
    if (!windows || !segments || !targets)
        return fr_api_error(&d->err, FP8RUN_ERR_INVALID_ARG, "%s: windows, segments or targets is NULL", fn);
    const uint64_t per = (uint64_t)d->per_batch;
    if (count == 0 || (uint64_t)count % per != 0)
        return fr_api_error(&d->err, FP8RUN_ERR_SHAPE, "%s: %zu ids is not a positive multiple of one batch (B x "
                            "(T+1) = %llu)", fn, count, (unsigned long long)per);
    uint8_t saved[FR_DATA_STATE_BYTES];
    fr_data_get_state(d->dl, saved);
    int64_t total = 0;
    for (uint64_t b = 0; b < (uint64_t)count / per; b++) {
        int64_t n = 0;
        fr_status st = fr_data_next_sft(d->dl, windows + b * per, segments + b * per, targets + b * per, &n);
        if (st != FR_OK) {
            fp8run_status ps = fr_api_fail(&d->err, fn, st);
            fr_ignore_status(fr_data_set_state(d->dl, saved, sizeof saved)); /* as fp8run_data_next */
            return ps;
        }
        total += n;
    }
    if (n_labels) *n_labels = total;
    return FP8RUN_OK;
}

#define SFTP_V1_SIZE sizeof(fp8run_sft_prepare_config)

FP8RUN_API fp8run_status fp8run_sft_prepare_config_init(fp8run_sft_prepare_config *cfg, size_t size)
{
    fp8run_sft_prepare_config d;
    memset(&d, 0, sizeof d);
    return fr_api_struct_init(__func__, "fp8run_sft_prepare_config", cfg, size, SFTP_V1_SIZE, &d, sizeof d);
}

FP8RUN_API fp8run_status fp8run_sft_prepare_bytes(const fp8run_sft_prepare_config *cfg, fp8run_sft_summary *summary)
{
    const char *fn = __func__;
    fp8run_sft_prepare_config c;
    memset(&c, 0, sizeof c);
    fp8run_status ps = fr_api_read_in(NULL, fn, "config", cfg, SFTP_V1_SIZE, &c, sizeof c);
    if (ps != FP8RUN_OK) return ps;
    if (!summary || summary->struct_size < sizeof *summary)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: summary is NULL or smaller than fp8run_sft_summary", fn);
    fr_sft_prepare p = {c.files, c.n_files, c.out, c.val_out, c.val_fraction, c.max_tokens, c.drop_long != 0,
                        c.train_on_prompt != 0, c.skip_bad_lines != 0};
    fr_sft_summary s;
    fr_status st = fr_sft_prepare_bytes(&p, &s);
    fp8run_sft_summary o = {summary->struct_size, s.examples, s.train_examples, s.val_examples, s.tokens,
                            s.target_tokens, s.bad_lines, s.truncated, s.dropped, s.no_target, s.windows_packed};
    *summary = o;
    return fr_api_fail(NULL, fn, st);
}
