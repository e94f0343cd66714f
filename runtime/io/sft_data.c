/* SFT token files and their windows (see sft_data.h). */
#include "runtime/io/sft_data.h"
#include "graph/safe_io.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int fr_sft_is_sft(const void *buf, size_t len)
{
    return len >= 8 && memcmp(buf, FR_SFT_MAGIC, 8) == 0;
}

fr_status fr_sft_parse(const void *buf, size_t len, const char *path, fr_sft_view *out)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (len < FR_SFT_HEADER || !fr_sft_is_sft(buf, len))
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': shorter than its %d-byte header or no '%s' magic", path,
                        FR_SFT_HEADER, FR_SFT_MAGIC);
    uint32_t version = rd32(b + 8), width = rd32(b + 12);
    uint64_t E = rd64(b + 16), N = rd64(b + 24), vocab = rd64(b + 32), eos = rd64(b + 40), ntgt = rd64(b + 48);
    if (version != 1)
        return fr_error(FR_ERR_UNSUPPORTED, "SFT token file '%s' has version %u; this fp8run reads version 1", path,
                        version);
    if (width != 2 && width != 4)
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': token width %u (2 or 4)", path, width);
    /* sizes checked before they are multiplied */
    if (E > len / 8 || N > len)
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': %llu examples of %llu tokens do not fit its %zu bytes",
                        path, (unsigned long long)E, (unsigned long long)N, len);
    uint64_t want = FR_SFT_HEADER + 8 * (E + 1) + (uint64_t)(width + 1) * N;
    if (want != len)
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': %llu examples and %llu tokens make %llu bytes, the file "
                        "has %zu", path, (unsigned long long)E, (unsigned long long)N, (unsigned long long)want, len);
    if (vocab > INT64_MAX || eos >= vocab || ntgt > N)
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': EOS %llu, vocabulary %llu, %llu targets of %llu tokens "
                        "do not agree", path, (unsigned long long)eos, (unsigned long long)vocab,
                        (unsigned long long)ntgt, (unsigned long long)N);
    out->offsets = b + FR_SFT_HEADER;
    out->tokens = out->offsets + 8 * (E + 1);
    out->targets = out->tokens + (size_t)width * N;
    out->width = (int)width;
    out->examples = (int64_t)E;
    out->tokens_n = (int64_t)N;
    out->vocab = (int64_t)vocab;
    out->eos = (int64_t)eos;
    out->target_tokens = (int64_t)ntgt;
    uint64_t prev = 0;
    for (uint64_t i = 0; i <= E; i++) {
        uint64_t o = rd64(out->offsets + 8 * i);
        if ((i == 0 && o != 0) || o < prev || o > N || (i == E && o != N))
            return fr_error(FR_ERR_PARSE, "SFT token file '%s': offset %llu of example %llu is out of order "
                            "(offsets start at 0, do not decrease and end at the %llu tokens)", path,
                            (unsigned long long)o, (unsigned long long)i, (unsigned long long)N);
        prev = o;
    }
    uint64_t count = 0;
    for (uint64_t i = 0; i < N; i++) {
        if (out->targets[i] > 1)
            return fr_error(FR_ERR_PARSE, "SFT token file '%s': target flag %u of token %llu (0 or 1)", path,
                            out->targets[i], (unsigned long long)i);
        count += out->targets[i];
    }
    if (count != ntgt)
        return fr_error(FR_ERR_PARSE, "SFT token file '%s': the header says %llu targets, the flags %llu", path,
                        (unsigned long long)ntgt, (unsigned long long)count);
    return FR_OK;
}

void fr_sft_example(const fr_sft_view *v, int64_t i, int64_t *start, int64_t *end)
{
    *start = (int64_t)rd64(v->offsets + 8 * i);
    *end = (int64_t)rd64(v->offsets + 8 * (i + 1));
}

static int64_t tok_at(const fr_sft_view *v, int64_t i)
{
    const unsigned char *p = v->tokens + (size_t)i * (size_t)v->width;
    return v->width == 2 ? (int64_t)(p[0] | p[1] << 8) : (int64_t)rd32(p);
}

int64_t fr_sft_pack(const int64_t *len, int64_t n, int64_t cap, int64_t *window_of)
{
    int64_t open_id[FR_SFT_OPEN_WINDOWS], open_fill[FR_SFT_OPEN_WINDOWS], open_count[FR_SFT_OPEN_WINDOWS];
    int64_t n_open = 0, windows = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = 0;
        while (k < n_open && (open_fill[k] + len[i] > cap || open_count[k] == FR_SFT_MAX_EXAMPLES)) k++;
        if (k == n_open) { /* a new window; the oldest one closes when too many are open */
            if (n_open == FR_SFT_OPEN_WINDOWS) {
                memmove(open_id, open_id + 1, (size_t)(n_open - 1) * sizeof *open_id);
                memmove(open_fill, open_fill + 1, (size_t)(n_open - 1) * sizeof *open_fill);
                memmove(open_count, open_count + 1, (size_t)(n_open - 1) * sizeof *open_count);
                k = --n_open;
            }
            open_id[k] = windows++;
            open_fill[k] = 0;
            open_count[k] = 0;
            n_open++;
        }
        open_fill[k] += len[i];
        open_count[k]++;
        window_of[i] = open_id[k];
    }
    return windows;
}

fr_status fr_sft_plan_windows(const fr_sft_view *v, int64_t T, int packing, fr_sft_plan *out)
{
    memset(out, 0, sizeof *out);
    if (T < 1) return fr_error(FR_ERR_INVALID_ARG, "SFT windows of %lld tokens", (long long)T);
    const int64_t cap = T + 1, E = v->examples;
    int64_t *len = fr_malloc((size_t)(E ? E : 1) * sizeof *len, "SFT windows");
    int64_t *win = fr_malloc((size_t)(E ? E : 1) * sizeof *win, "SFT windows");
    out->order = fr_malloc((size_t)(E ? E : 1) * sizeof *out->order, "SFT windows");
    out->first = fr_calloc((size_t)E + 2, sizeof *out->first, "SFT windows");
    if (!len || !win || !out->order || !out->first) {
        free(len);
        free(win);
        fr_sft_plan_free(out);
        return FR_ERR_OOM;
    }
    for (int64_t i = 0; i < E; i++) {
        int64_t s, e;
        fr_sft_example(v, i, &s, &e);
        len[i] = e - s;
        if (len[i] > cap) {
            len[i] = cap;
            out->truncated++;
        }
        out->slots_used += len[i];
        for (int64_t j = s + 1; j < s + len[i]; j++) out->target_labels += v->targets[j];
        win[i] = i;
    }
    out->windows = packing ? fr_sft_pack(len, E, cap, win) : E;
    /* examples grouped by window, file order within each (a counting sort) */
    for (int64_t i = 0; i < E; i++) out->first[win[i] + 1]++;
    for (int64_t w = 0; w < out->windows; w++) out->first[w + 1] += out->first[w];
    for (int64_t i = 0; i < E; i++) out->order[out->first[win[i]]++] = i;
    for (int64_t w = out->windows; w > 0; w--) out->first[w] = out->first[w - 1];
    out->first[0] = 0;
    free(len);
    free(win);
    return FR_OK;
}

void fr_sft_plan_free(fr_sft_plan *p)
{
    free(p->first);
    free(p->order);
    p->first = p->order = NULL;
}

void fr_sft_window(const fr_sft_view *v, const fr_sft_plan *p, int64_t w, int64_t T, int64_t *tokens,
                   int32_t *segments, uint8_t *targets)
{
    int64_t slot = 0;
    int32_t seg = 0;
    for (int64_t k = p->first[w]; k < p->first[w + 1]; k++) {
        int64_t s, e;
        fr_sft_example(v, p->order[k], &s, &e);
        if (e - s > T + 1) e = s + T + 1;
        seg++;
        for (int64_t j = s; j < e; j++, slot++) {
            if (tokens) tokens[slot] = tok_at(v, j);
            if (segments) segments[slot] = seg;
            if (targets) targets[slot] = j > s ? v->targets[j] : 0;
        }
    }
    for (; slot <= T; slot++) {
        if (tokens) tokens[slot] = v->eos;
        if (segments) segments[slot] = 0;
        if (targets) targets[slot] = 0;
    }
}

int64_t fr_sft_labels(const int64_t *tokens, const int32_t *segments, const uint8_t *targets, int64_t T,
                      int64_t ignore_index, int64_t *labels)
{
    int64_t n = 0;
    for (int64_t j = 0; j < T; j++) {
        int counts = targets[j + 1] && segments[j + 1] != 0 && segments[j + 1] == segments[j];
        if (labels) labels[j] = counts ? tokens[j + 1] : ignore_index;
        n += counts;
    }
    return n;
}

void fr_sft_positions(const int32_t *segments, int64_t T, int64_t *positions)
{
    int64_t start = 0;
    for (int64_t j = 0; j < T; j++) {
        if (j > 0 && segments[j] != segments[j - 1]) start = j;
        positions[j] = segments[j] ? j - start : 0;
    }
}

/* ---- writing byte-level examples ---- */

typedef struct ex_buf {
    uint8_t *tok, *tgt;
    size_t n, cap;
} ex_buf;

static int ex_put(ex_buf *b, const char *s, size_t len, int target)
{
    /* An empty prompt or answer comes with s == NULL (an empty JSON string); memcpy must not
     * see it even for zero bytes. */
    if (len == 0) return 0;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len) cap *= 2;
        uint8_t *t = realloc(b->tok, cap), *g = t ? realloc(b->tgt, cap) : NULL;
        if (t) b->tok = t;
        if (!t || !g) return -1;
        b->tgt = g;
        b->cap = cap;
    }
    memcpy(b->tok + b->n, s, len);
    memset(b->tgt + b->n, target ? 1 : 0, len);
    b->n += len;
    return 0;
}

/* One line's example appended to all (its bytes, targets) and its end to ends; a bad line
 * returns a message in why. */
static int line_example(json_t *rec, int train_on_prompt, ex_buf *all, const char **why)
{
    json_t *msgs = json_is_object(rec) ? json_object_get(rec, "messages") : NULL;
    size_t start = all->n;
    int last_target = 1, oom = 0;
    if (!json_is_object(rec)) {
        *why = "not a JSON object";
        return 1;
    }
    if (msgs) {
        if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
            *why = "\"messages\" is not a non-empty list";
            return 1;
        }
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            json_t *m = json_array_get(msgs, i);
            json_t *r = json_object_get(m, "role"), *c = json_object_get(m, "content");
            if (!json_is_object(m) || !json_is_string(r) || !json_is_string(c)) {
                *why = "a message is not {\"role\": string, \"content\": string}";
                all->n = start;
                return 1;
            }
        }
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            json_t *m = json_array_get(msgs, i);
            json_t *r = json_object_get(m, "role"), *c = json_object_get(m, "content");
            int a = strcmp(json_string_value(r), "assistant") == 0;
            oom |= ex_put(all, json_string_value(r), json_string_length(r), 0);
            oom |= ex_put(all, ": ", 2, 0);
            oom |= ex_put(all, json_string_value(c), json_string_length(c), a);
            oom |= ex_put(all, "\n", 1, a);
            last_target = a;
        }
    } else {
        json_t *p = json_object_get(rec, "prompt"), *c = json_object_get(rec, "completion");
        if (!json_is_string(p) || !json_is_string(c)) {
            *why = "neither {\"prompt\": string, \"completion\": string} nor {\"messages\": [...]}";
            return 1;
        }
        oom |= ex_put(all, json_string_value(p), json_string_length(p), 0);
        oom |= ex_put(all, json_string_value(c), json_string_length(c), 1);
    }
    oom |= ex_put(all, "", 1, last_target); /* EOS 0 */
    if (oom) return -1;
    if (train_on_prompt) memset(all->tgt + start, 1, all->n - start);
    all->tgt[start] = 0; /* nothing predicts an example's first token */
    return 0;
}

/* Examples e0 .. e1-1 of b as an SFT token file in memory (*buf malloc'ed, *len bytes). */
static fr_status build_file(const ex_buf *b, const size_t *ends, int64_t e0, int64_t e1, unsigned char **buf,
                            size_t *len)
{
    size_t base = e0 ? ends[e0 - 1] : 0, n = ends[e1 - 1] - base;
    *len = FR_SFT_HEADER + 8 * (size_t)(e1 - e0 + 1) + 3 * n;
    unsigned char *p = *buf = fr_calloc(1, *len, "SFT token file");
    if (!p) return FR_ERR_OOM;
    uint64_t ntgt = 0;
    for (size_t i = 0; i < n; i++) ntgt += b->tgt[base + i];
    memcpy(p, FR_SFT_MAGIC, 8);
    uint64_t fields[6] = {(uint64_t)(e1 - e0), n, 256, 0, ntgt, 0};
    p[8] = 1;  /* version */
    p[12] = 2; /* uint16 tokens */
    for (int k = 0; k < 6; k++)
        for (int i = 0; i < 8; i++) p[16 + 8 * k + i] = (unsigned char)(fields[k] >> (8 * i));
    unsigned char *o = p + FR_SFT_HEADER;
    for (int64_t e = e0 - 1; e < e1; e++, o += 8) {
        uint64_t off = (e < e0 ? base : ends[e]) - base;
        for (int i = 0; i < 8; i++) o[i] = (unsigned char)(off >> (8 * i));
    }
    for (size_t i = 0; i < n; i++, o += 2) o[0] = b->tok[base + i]; /* o[1] stays 0: bytes < 256 */
    if (n) memcpy(o, b->tgt + base, n);
    return FR_OK;
}

/* The training and validation files written in full before either replaces its previous
 * version (graph/safe_io.h's write rule). */
static fr_status write_files(const char *const *paths, unsigned char *const *bufs, const size_t *lens, int n)
{
    fr_atomic_file f[2];
    memset(f, 0, sizeof f);
    for (int k = 0; k < n; k++) f[k].fd = -1;
    fr_status st = FR_OK;
    for (int k = 0; k < n && st == FR_OK; k++) {
        st = fr_atomic_open(paths[k], &f[k]);
        if (st == FR_OK) st = fr_atomic_write(&f[k], bufs[k], lens[k]);
        if (st == FR_OK) st = fr_atomic_finish(&f[k]);
    }
    for (int k = 0; k < n && st == FR_OK; k++) st = fr_atomic_commit(&f[k]);
    for (int k = 0; k < n; k++) fr_atomic_abort(&f[k]);
    return st;
}

static fr_status read_lines(const fr_sft_prepare *p, const char *path, ex_buf *all, size_t **ends, size_t *n_ends,
                            size_t *cap_ends, fr_sft_summary *s)
{
    FILE *f = NULL;
    FR_TRY(fr_fopen_regular(path, ".jsonl file", 0, &f, NULL)); /* a FIFO or a device is refused */
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    fr_status st = FR_OK;
    for (long lineno = 1; st == FR_OK && (len = getline(&line, &lcap, f)) >= 0; lineno++) {
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)len) continue;
        json_error_t jerr;
        json_t *rec = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &jerr);
        const char *why = NULL;
        char jwhy[256];
        size_t start = all->n;
        int r = 1;
        if (!rec) {
            snprintf(jwhy, sizeof jwhy, "not JSON (%s)", jerr.text);
            why = jwhy;
        } else {
            r = line_example(rec, p->train_on_prompt, all, &why);
            json_decref(rec);
        }
        if (r < 0) {
            st = fr_error(FR_ERR_OOM, "out of memory reading '%s'", path);
            break;
        }
        if (r > 0) {
            all->n = start;
            if (!p->skip_bad_lines)
                st = fr_error(FR_ERR_PARSE, "%s:%ld: %s (--skip-bad-lines skips such lines)", path, lineno, why);
            s->bad_lines++;
            continue;
        }
        size_t n = all->n - start;
        if (p->max_tokens > 0 && (int64_t)n > p->max_tokens) {
            if (p->drop_long) {
                all->n = start;
                s->dropped++;
                continue;
            }
            all->n = start + (size_t)p->max_tokens;
            s->truncated++;
        }
        int any = 0;
        for (size_t i = start; i < all->n; i++) any |= all->tgt[i];
        if (!any) {
            all->n = start;
            s->no_target++;
            continue;
        }
        if (*n_ends == *cap_ends) {
            size_t c = *cap_ends ? 2 * *cap_ends : 1024;
            size_t *e = realloc(*ends, c * sizeof *e);
            if (!e) {
                st = fr_error(FR_ERR_OOM, "out of memory reading '%s'", path);
                break;
            }
            *ends = e;
            *cap_ends = c;
        }
        (*ends)[(*n_ends)++] = all->n;
    }
    free(line);
    fclose(f);
    return st;
}

fr_status fr_sft_prepare_bytes(const fr_sft_prepare *p, fr_sft_summary *s)
{
    memset(s, 0, sizeof *s);
    if (!p || !p->out || p->n_files < 1 || !(p->val_fraction >= 0 && p->val_fraction < 1))
        return fr_error(FR_ERR_INVALID_ARG, "fr_sft_prepare_bytes: no output, no input files or a val fraction "
                        "outside [0, 1)");
    ex_buf all = {0};
    size_t *ends = NULL, n_ends = 0, cap_ends = 0;
    fr_status st = FR_OK;
    for (int i = 0; i < p->n_files && st == FR_OK; i++) st = read_lines(p, p->files[i], &all, &ends, &n_ends, &cap_ends, s);
    int64_t E = (int64_t)n_ends;
    if (st == FR_OK && E == 0) st = fr_error(FR_ERR_INVALID_ARG, "no usable examples in the input files");
    /* half away from zero, as prepare.py rounds */
    int64_t n_val = (int64_t)((double)E * p->val_fraction + 0.5);
    if (st == FR_OK && p->val_fraction > 0 && (n_val == 0 || n_val == E))
        st = fr_error(FR_ERR_INVALID_ARG, "%lld examples are too few to split %g of them off for validation",
                      (long long)E, p->val_fraction);
    unsigned char *bufs[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    const char *paths[2] = {p->out, p->val_out};
    if (st == FR_OK) st = build_file(&all, ends, 0, E - n_val, &bufs[0], &lens[0]);
    if (st == FR_OK && n_val) st = build_file(&all, ends, E - n_val, E, &bufs[1], &lens[1]);
    if (st == FR_OK) st = write_files(paths, bufs, lens, n_val ? 2 : 1);
    free(bufs[0]);
    free(bufs[1]);
    if (st == FR_OK) {
        s->examples = E;
        s->train_examples = E - n_val;
        s->val_examples = n_val;
        s->tokens = (int64_t)all.n;
        for (size_t i = 0; i < all.n; i++) s->target_tokens += all.tgt[i];
        if (p->max_tokens > 0) {
            int64_t *len = malloc((size_t)E * sizeof *len), *win = malloc((size_t)E * sizeof *win);
            for (int64_t e = 0; len && win && e < E; e++) len[e] = (int64_t)(ends[e] - (e ? ends[e - 1] : 0));
            if (len && win) s->windows_packed = fr_sft_pack(len, E, p->max_tokens, win);
            else st = fr_error(FR_ERR_OOM, "out of memory counting the packed windows");
            free(len);
            free(win);
        }
    }
    free(all.tok);
    free(all.tgt);
    free(ends);
    return st;
}
