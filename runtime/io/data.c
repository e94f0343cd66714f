/* Token files (raw uint16/uint32, llm.c) and the batch loader (see data.h). */
#include "runtime/io/data.h"
#include "graph/safe_io.h"
#include "runtime/io/sft_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define STATE_MARK "FRDATA01"

struct fr_data_loader {
    char *path;
    fr_data_opts opts;
    void *buf;            /* the mapping, or the malloc'ed copy of the file */
    size_t buf_len;
    int mapped;
    const unsigned char *tokens; /* first token's first byte */
    int tok_bytes;        /* 2 or 4 */
    int llmc;
    int64_t n;            /* tokens in the file */
    int64_t bt;           /* B*T: tokens a sequential batch advances */
    int64_t per_pass;     /* sequential: batches before wrapping */
    fr_prng rng;
    int64_t pos, epoch, batches;
    /* an SFT token file (runtime/io/sft_data.h): n counts windows, not tokens, and a batch is
       B of them (bt = B) */
    int sft;
    fr_sft_view sv;
    fr_sft_plan plan;
};

fr_data_opts fr_data_opts_default(void)
{
    fr_data_opts o;
    memset(&o, 0, sizeof o);
    o.batch = 1;
    o.seq_len = 1;
    o.order = FR_DATA_RANDOM;
    o.token_dtype = FR_U16;
    o.format = FR_DATA_AUTO;
    o.packing = 1;
    return o;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t tok_at(const fr_data_loader *dl, int64_t i)
{
    const unsigned char *p = dl->tokens + (size_t)i * (size_t)dl->tok_bytes;
    if (dl->tok_bytes == 1) return p[0];
    return dl->tok_bytes == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : le32(p);
}

static const char *width_name(int tok_bytes)
{
    return tok_bytes == 1 ? "uint8" : tok_bytes == 2 ? "uint16" : "uint32";
}

static fr_status check_opts(const char *path, const fr_data_opts *o)
{
    if (o->batch < 1 || o->seq_len < 1)
        return fr_error(FR_ERR_INVALID_ARG, "data loader for '%s': batch %lld and sequence length %lld must be >= 1",
                        path, (long long)o->batch, (long long)o->seq_len);
    if (o->seq_len > INT64_MAX / 2 / o->batch)
        return fr_error(FR_ERR_INVALID_ARG, "data loader for '%s': batch %lld x %lld is too large", path,
                        (long long)o->batch, (long long)o->seq_len);
    if (o->order != FR_DATA_RANDOM && o->order != FR_DATA_SEQUENTIAL)
        return fr_error(FR_ERR_INVALID_ARG, "data loader for '%s': unknown order %d", path, (int)o->order);
    if (o->format != FR_DATA_AUTO && o->format != FR_DATA_RAW)
        return fr_error(FR_ERR_INVALID_ARG, "data loader for '%s': unknown format %d", path, (int)o->format);
    if (o->token_dtype != FR_UNDEFINED && o->token_dtype != FR_U8 && o->token_dtype != FR_U16 &&
        o->token_dtype != FR_U32)
        return fr_error(FR_ERR_UNSUPPORTED, "data loader for '%s': token type %s is not supported "
                        "(raw token files hold uint8, uint16 or uint32)", path, fr_dtype_name(o->token_dtype));
    if (o->vocab_size < 0 || o->max_batches < 0)
        return fr_error(FR_ERR_INVALID_ARG, "data loader for '%s': negative vocabulary size or batch count", path);
    return FR_OK;
}

/* Map the file, or read it when mapping fails or is not wanted. */
static fr_status load_file(fr_data_loader *dl)
{
    int fd;
    struct stat sb;
    FR_TRY(fr_open_regular(dl->path, "token file", 0, &fd, &sb));
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return fr_error(FR_ERR_OOM, "token file '%s' (%lld bytes) does not fit the address space", dl->path,
                        (long long)sb.st_size);
    }
    size_t len = (size_t)sb.st_size;
    dl->buf_len = len;
    if (len == 0) {
        close(fd);
        return FR_OK;
    }
    if (!dl->opts.no_mmap) {
        void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            posix_madvise(m, len, dl->opts.order == FR_DATA_RANDOM ? POSIX_MADV_RANDOM : POSIX_MADV_SEQUENTIAL);
            dl->buf = m;
            dl->mapped = 1;
            close(fd);
            return FR_OK;
        }
    }
    dl->buf = fr_malloc(len, "token file contents");
    if (!dl->buf) {
        close(fd);
        return fr_error_context(FR_ERR_OOM, "reading token file '%s'", dl->path);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, (char *)dl->buf + got, len - got > (1u << 30) ? (1u << 30) : len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            close(fd);
            return fr_error(FR_ERR_IO, "reading token file '%s': %s", dl->path,
                            k < 0 ? strerror(e) : "file shrank while reading");
        }
        got += (size_t)k;
    }
    close(fd);
    return FR_OK;
}

/* Decide the format and the token count. */
static fr_status parse_layout(fr_data_loader *dl)
{
    const unsigned char *b = dl->buf;
    size_t len = dl->buf_len;
    uint32_t magic = len >= 4 ? le32(b) : 0;
    if (dl->opts.format == FR_DATA_AUTO && fr_sft_is_sft(b, len)) {
        FR_TRY(fr_sft_parse(b, len, dl->path, &dl->sv));
        FR_TRY(fr_sft_plan_windows(&dl->sv, dl->opts.seq_len, dl->opts.packing, &dl->plan));
        dl->sft = 1;
        dl->tok_bytes = dl->sv.width;
        dl->tokens = dl->sv.tokens;
        dl->n = dl->plan.windows;
        return FR_OK;
    }
    if (dl->opts.format == FR_DATA_AUTO && (magic == FR_LLMC_MAGIC_U16 || magic == FR_LLMC_MAGIC_U32)) {
        const size_t hdr = FR_LLMC_HEADER_INTS * 4;
        if (len < hdr)
            return fr_error(FR_ERR_PARSE, "token file '%s' starts with llm.c's magic %u but is only %zu bytes "
                            "(its header alone is %zu)", dl->path, magic, len, hdr);
        uint32_t version = le32(b + 4);
        int32_t count = (int32_t)le32(b + 8);
        uint32_t want_version = magic == FR_LLMC_MAGIC_U16 ? 1 : 7;
        if (version != want_version)
            return fr_error(FR_ERR_UNSUPPORTED, "llm.c token file '%s' (magic %u) has version %u; supported: "
                            "version 1 with magic %d (uint16 tokens), version 7 with magic %d (uint32 tokens)",
                            dl->path, magic, version, FR_LLMC_MAGIC_U16, FR_LLMC_MAGIC_U32);
        dl->tok_bytes = magic == FR_LLMC_MAGIC_U16 ? 2 : 4;
        if (count < 0)
            return fr_error(FR_ERR_PARSE, "llm.c token file '%s': header token count %d is negative",
                            dl->path, (int)count);
        uint64_t want = (uint64_t)hdr + (uint64_t)count * (uint64_t)dl->tok_bytes;
        if (want != (uint64_t)len)
            return fr_error(FR_ERR_PARSE, "llm.c token file '%s': the header says %d %s tokens (%llu bytes with "
                            "the header) but the file is %zu bytes", dl->path, (int)count,
                            width_name(dl->tok_bytes), (unsigned long long)want, len);
        dl->llmc = 1;
        dl->tokens = b + hdr;
        dl->n = count;
        return FR_OK;
    }
    dl->tok_bytes = dl->opts.token_dtype == FR_U32 ? 4 : dl->opts.token_dtype == FR_U8 ? 1 : 2;
    if (len % (size_t)dl->tok_bytes != 0)
        return fr_error(FR_ERR_PARSE, "token file '%s' is %zu bytes, not a whole number of %s tokens "
                        "(%d bytes each)", dl->path, len, width_name(dl->tok_bytes), dl->tok_bytes);
    dl->tokens = b;
    dl->n = (int64_t)(len / (size_t)dl->tok_bytes);
    return FR_OK;
}

void fr_data_close(fr_data_loader *dl)
{
    if (!dl) return;
    if (dl->mapped)
        munmap(dl->buf, dl->buf_len);
    else
        free(dl->buf);
    fr_sft_plan_free(&dl->plan);
    free(dl->path);
    free(dl);
}

void fr_data_reset(fr_data_loader *dl)
{
    fr_prng_seed(&dl->rng, dl->opts.seed);
    dl->pos = 0;
    dl->epoch = 0;
    dl->batches = 0;
}

static fr_status open_common(const char *path, const fr_data_opts *opts, fr_data_loader **out)
{
    if (!path || !opts || !out) return fr_error(FR_ERR_INVALID_ARG, "fr_data_open: NULL argument");
    *out = NULL;
    FR_TRY(check_opts(path, opts));
    fr_data_loader *dl = fr_calloc(1, sizeof *dl, "data loader");
    if (!dl) return FR_ERR_OOM;
    dl->opts = *opts;
    if (dl->opts.token_dtype == FR_UNDEFINED) dl->opts.token_dtype = FR_U16;
    dl->path = fr_strdup(path, "data loader path");
    fr_status st = dl->path ? load_file(dl) : FR_ERR_OOM;
    if (st == FR_OK) st = parse_layout(dl);
    if (st == FR_OK && dl->sft) {
        if (dl->n < opts->batch)
            st = fr_error(FR_ERR_SHAPE, "SFT file '%s' fills %lld windows of %lld tokens (%lld examples); one batch "
                          "needs %lld", path, (long long)dl->n, (long long)opts->seq_len + 1,
                          (long long)dl->sv.examples, (long long)opts->batch);
        dl->bt = opts->batch;
    } else if (st == FR_OK) {
        int64_t B = opts->batch, T = opts->seq_len;
        if (dl->n < B * (T + 1))
            st = fr_error(FR_ERR_SHAPE, "'%s' holds %lld tokens; one batch of %lld x (%lld+1) needs %lld", path,
                          (long long)dl->n, (long long)B, (long long)T, (long long)(B * (T + 1)));
        dl->bt = B * T;
    }
    if (st != FR_OK) {
        fr_data_close(dl);
        return st;
    }
    /* A sequential pass holds every batch start p = k*B*T with p + B*T + 1 <= n (SFT: every
     * window, the last batch filled up with empty ones: an evaluation sees every example). */
    dl->per_pass = dl->sft ? (dl->n + dl->bt - 1) / dl->bt : (dl->n - 1) / dl->bt;
    if (dl->opts.max_batches > 0 && dl->opts.max_batches < dl->per_pass) dl->per_pass = dl->opts.max_batches;
    fr_data_reset(dl);
    *out = dl;
    return FR_OK;
}

fr_status fr_data_open(const char *path, const fr_data_opts *opts, fr_data_loader **out)
{
    return open_common(path, opts, out);
}

fr_status fr_data_open_val(const char *path, const fr_data_opts *opts, int64_t num_batches,
                           fr_data_loader **out)
{
    if (!opts || num_batches < 0)
        return fr_error(FR_ERR_INVALID_ARG, "validation loader for '%s': bad options or batch count",
                        path ? path : "(null)");
    fr_data_opts o = *opts;
    o.order = FR_DATA_SEQUENTIAL;
    o.max_batches = num_batches;
    FR_TRY(open_common(path, &o, out));
    fr_data_loader *dl = *out;
    if (num_batches > 0 && num_batches > dl->per_pass) {
        int64_t need = num_batches > (INT64_MAX - 1) / dl->bt ? INT64_MAX : num_batches * dl->bt + 1;
        fr_status st = fr_error(FR_ERR_SHAPE, "'%s' holds %lld tokens; %lld validation batches of %lld x %lld "
                                "(+1) need %lld", path, (long long)dl->n, (long long)num_batches,
                                (long long)o.batch, (long long)o.seq_len, (long long)need);
        fr_data_close(dl);
        *out = NULL;
        return st;
    }
    return FR_OK;
}

/* Copy window [start, start+T] into row b of out, checking ids. */
static fr_status copy_window(const fr_data_loader *dl, int64_t start, int64_t b, fr_dtype dt, void *out)
{
    int64_t w = dl->opts.seq_len + 1;
    int64_t vocab = dl->opts.vocab_size;
    for (int64_t j = 0; j < w; j++) {
        uint32_t id = tok_at(dl, start + j);
        if (vocab > 0 && (int64_t)id >= vocab)
            return fr_error(FR_ERR_RANGE, "token file '%s': token id %u at position %lld is >= the vocabulary "
                            "size %lld", dl->path, id, (long long)(start + j), (long long)vocab);
        if (dt == FR_I32) {
            if (id > INT32_MAX)
                return fr_error(FR_ERR_RANGE, "token file '%s': token id %u at position %lld does not fit int32",
                                dl->path, id, (long long)(start + j));
            ((int32_t *)out)[b * w + j] = (int32_t)id;
        } else {
            ((int64_t *)out)[b * w + j] = (int64_t)id;
        }
    }
    return FR_OK;
}

/* After a batch: the epoch count (random: windows drawn / windows, as tokens for token files). */
static void count_batch(fr_data_loader *dl)
{
    dl->batches++;
    if (dl->opts.order == FR_DATA_RANDOM) { /* epochs = units drawn / n, without overflowing batches * bt */
        int64_t q = dl->batches / dl->n, r = dl->batches % dl->n;
        dl->epoch = q * dl->bt + (r <= INT64_MAX / dl->bt ? r * dl->bt / dl->n
                                                           : (int64_t)((double)r * (double)dl->bt / (double)dl->n));
        return;
    }
    dl->pos += dl->bt;
    if (dl->pos / dl->bt >= dl->per_pass) {
        dl->pos = 0;
        dl->epoch++;
    }
}

fr_status fr_data_next(fr_data_loader *dl, fr_dtype out_dtype, void *windows)
{
    if (!dl || !windows) return fr_error(FR_ERR_INVALID_ARG, "fr_data_next: NULL argument");
    if (out_dtype != FR_I32 && out_dtype != FR_I64)
        return fr_error(FR_ERR_UNSUPPORTED, "data loader for '%s': batches of %s are not supported (int32 or int64)",
                        dl->path, fr_dtype_name(out_dtype));
    if (dl->sft)
        return fr_error(FR_ERR_INVALID_ARG, "'%s' is an SFT token file: its batches come with segment ids and "
                        "target flags (fr_data_next_sft)", dl->path);
    const int64_t B = dl->opts.batch, T = dl->opts.seq_len;
    if (dl->opts.order == FR_DATA_RANDOM) {
        fr_prng saved = dl->rng;
        for (int64_t b = 0; b < B; b++) {
            int64_t start = (int64_t)fr_prng_below(&dl->rng, (uint64_t)(dl->n - T));
            fr_status st = copy_window(dl, start, b, out_dtype, windows);
            if (st != FR_OK) {
                dl->rng = saved;
                return st;
            }
        }
        count_batch(dl);
        return FR_OK;
    }
    for (int64_t b = 0; b < B; b++) FR_TRY(copy_window(dl, dl->pos + b * T, b, out_dtype, windows));
    count_batch(dl);
    return FR_OK;
}

fr_status fr_data_next_sft(fr_data_loader *dl, int64_t *windows, int32_t *segments, uint8_t *targets,
                           int64_t *n_labels)
{
    if (!dl || !windows || !segments || !targets)
        return fr_error(FR_ERR_INVALID_ARG, "fr_data_next_sft: NULL argument");
    if (!dl->sft)
        return fr_error(FR_ERR_INVALID_ARG, "'%s' is a token file, not an SFT token file (prepare --sft)", dl->path);
    const int64_t B = dl->opts.batch, T = dl->opts.seq_len, W = T + 1, V = dl->opts.vocab_size;
    fr_prng saved = dl->rng;
    int64_t labels = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t w = dl->opts.order == FR_DATA_RANDOM ? (int64_t)fr_prng_below(&dl->rng, (uint64_t)dl->n) : dl->pos + b;
        if (w < dl->n) {
            fr_sft_window(&dl->sv, &dl->plan, w, T, windows + b * W, segments + b * W, targets + b * W);
        } else { /* past the last window: all padding, nothing counts */
            for (int64_t j = 0; j < W; j++) windows[b * W + j] = dl->sv.eos;
            memset(segments + b * W, 0, (size_t)W * sizeof *segments);
            memset(targets + b * W, 0, (size_t)W);
        }
        for (int64_t j = 0; j < W; j++) {
            if (V > 0 && windows[b * W + j] >= V) {
                dl->rng = saved;
                return fr_error(FR_ERR_RANGE, "SFT file '%s': token id %lld in window %lld (of %lld) is >= the "
                                "vocabulary size %lld", dl->path, (long long)windows[b * W + j], (long long)w,
                                (long long)dl->n, (long long)V);
            }
            if (j > 0) labels += targets[b * W + j] && segments[b * W + j] && segments[b * W + j] == segments[b * W + j - 1];
        }
    }
    if (n_labels) *n_labels = labels;
    count_batch(dl);
    return FR_OK;
}

int fr_data_is_sft(const fr_data_loader *dl) { return dl && dl->sft; }

void fr_data_sft_info(const fr_data_loader *dl, fr_data_sft_stats *s)
{
    memset(s, 0, sizeof *s);
    if (!dl || !dl->sft) return;
    s->examples = dl->sv.examples;
    s->windows = dl->plan.windows;
    s->truncated = dl->plan.truncated;
    s->tokens = dl->plan.slots_used;
    s->target_labels = dl->plan.target_labels;
    s->eos = dl->sv.eos;
    s->vocab = dl->sv.vocab;
    for (int64_t w = 0; w < dl->plan.windows; w++) {
        const int64_t k = dl->plan.first[w + 1] - dl->plan.first[w];
        if (k > s->max_examples) s->max_examples = k;
    }
}

fr_status fr_data_split(const void *windows, fr_dtype dtype, int64_t batch, int64_t seq_len, void *inputs,
                        void *labels)
{
    if (!windows || !inputs || !labels || batch < 0 || seq_len < 1)
        return fr_error(FR_ERR_INVALID_ARG, "fr_data_split: bad arguments");
    if (dtype != FR_I32 && dtype != FR_I64)
        return fr_error(FR_ERR_UNSUPPORTED, "fr_data_split: %s windows are not supported (int32 or int64)",
                        fr_dtype_name(dtype));
    size_t es = fr_dtype_size(dtype), row = (size_t)seq_len * es;
    const char *w = windows;
    for (int64_t b = 0; b < batch; b++) {
        const char *src = w + (size_t)b * (row + es);
        memcpy((char *)inputs + (size_t)b * row, src, row);
        memcpy((char *)labels + (size_t)b * row, src + es, row);
    }
    return FR_OK;
}

fr_status fr_data_check_tokens(const fr_data_loader *dl, int64_t vocab_size)
{
    if (!dl || vocab_size < 1) return fr_error(FR_ERR_INVALID_ARG, "fr_data_check_tokens: bad arguments");
    if (dl->sft && dl->sv.eos >= vocab_size)
        return fr_error(FR_ERR_RANGE, "SFT file '%s': its EOS id %lld (padding) is >= the vocabulary size %lld",
                        dl->path, (long long)dl->sv.eos, (long long)vocab_size);
    const int64_t n = dl->sft ? dl->sv.tokens_n : dl->n;
    for (int64_t i = 0; i < n; i++) {
        uint32_t id = tok_at(dl, i);
        if ((int64_t)id >= vocab_size)
            return fr_error(FR_ERR_RANGE, "token file '%s': token id %u at position %lld is >= the vocabulary "
                            "size %lld", dl->path, id, (long long)i, (long long)vocab_size);
    }
    return FR_OK;
}

const char *fr_data_path(const fr_data_loader *dl) { return dl->path; }
int64_t fr_data_num_tokens(const fr_data_loader *dl) { return dl->n; }
fr_dtype fr_data_token_dtype(const fr_data_loader *dl)
{
    return dl->tok_bytes == 1 ? FR_U8 : dl->tok_bytes == 2 ? FR_U16 : FR_U32;
}
int fr_data_is_llmc(const fr_data_loader *dl) { return dl->llmc; }
int fr_data_is_mapped(const fr_data_loader *dl) { return dl->mapped; }
const fr_data_opts *fr_data_options(const fr_data_loader *dl) { return &dl->opts; }
int64_t fr_data_batches(const fr_data_loader *dl) { return dl->batches; }
int64_t fr_data_epoch(const fr_data_loader *dl) { return dl->epoch; }
int64_t fr_data_position(const fr_data_loader *dl) { return dl->pos; }

int64_t fr_data_batches_per_epoch(const fr_data_loader *dl)
{
    return dl->opts.order == FR_DATA_SEQUENTIAL ? dl->per_pass : dl->n / dl->bt;
}

/* State layout, every field a little-endian uint64 except the marker and the generator:
 *   0 "FRDATA01" | 8 order | 16 B | 24 T | 32 token count | 40 position | 48 epoch |
 *   56 batches | 64 generator state (32 bytes, fr_prng_get_state) */
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void fr_data_get_state(const fr_data_loader *dl, uint8_t out[FR_DATA_STATE_BYTES])
{
    memcpy(out, STATE_MARK, 8);
    put64(out + 8, (uint64_t)dl->opts.order);
    put64(out + 16, (uint64_t)dl->opts.batch);
    put64(out + 24, (uint64_t)dl->opts.seq_len);
    put64(out + 32, (uint64_t)dl->n);
    put64(out + 40, (uint64_t)dl->pos);
    put64(out + 48, (uint64_t)dl->epoch);
    put64(out + 56, (uint64_t)dl->batches);
    fr_prng_get_state(&dl->rng, out + 64);
}

fr_status fr_data_set_state(fr_data_loader *dl, const void *bytes, size_t len)
{
    if (!dl || !bytes) return fr_error(FR_ERR_INVALID_ARG, "fr_data_set_state: NULL argument");
    const uint8_t *p = bytes;
    if (len != FR_DATA_STATE_BYTES || memcmp(p, STATE_MARK, 8) != 0)
        return fr_error(FR_ERR_PARSE, "data-loader state for '%s' is not a saved state (%zu bytes, expected %d "
                        "starting with %s)", dl->path, len, FR_DATA_STATE_BYTES, STATE_MARK);
    uint64_t order = get64(p + 8), B = get64(p + 16), T = get64(p + 24), n = get64(p + 32);
    if (order != (uint64_t)dl->opts.order || B != (uint64_t)dl->opts.batch || T != (uint64_t)dl->opts.seq_len ||
        n != (uint64_t)dl->n)
        return fr_error(FR_ERR_INVALID_ARG, "data-loader state was saved for %s batches of %llu x %llu over %llu "
                        "tokens; the loader for '%s' has %s batches of %lld x %lld over %lld tokens",
                        order == FR_DATA_SEQUENTIAL ? "sequential" : "random", (unsigned long long)B,
                        (unsigned long long)T, (unsigned long long)n, dl->path,
                        dl->opts.order == FR_DATA_SEQUENTIAL ? "sequential" : "random", (long long)dl->opts.batch,
                        (long long)dl->opts.seq_len, (long long)dl->n);
    uint64_t pos = get64(p + 40), epoch = get64(p + 48), batches = get64(p + 56);
    int bad_pos = dl->opts.order == FR_DATA_RANDOM
                      ? pos != 0
                      : (pos % (uint64_t)dl->bt != 0 || pos / (uint64_t)dl->bt >= (uint64_t)dl->per_pass);
    if (bad_pos || epoch > INT64_MAX || batches > INT64_MAX)
        return fr_error(FR_ERR_INVALID_ARG, "data-loader state for '%s': position %llu is not a batch start of "
                        "this loader", dl->path, (unsigned long long)pos);
    fr_prng rng;
    fr_status st = fr_prng_set_state(&rng, p + 64, FR_PRNG_STATE_BYTES);
    if (st != FR_OK) return fr_error_context(st, "data-loader state for '%s'", dl->path);
    dl->rng = rng;
    dl->pos = (int64_t)pos;
    dl->epoch = (int64_t)epoch;
    dl->batches = (int64_t)batches;
    return FR_OK;
}
