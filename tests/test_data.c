/* Token data loader (raw uint16/uint32 and llm.c files, random and sequential batches, state
 * save/restore, validation loader, every error) and the xoshiro256** generator behind it. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness.h"
#include "runtime/io/data.h"
#include "graph/rng.h"

static char dir[512];

static int setup(void)
{
    fr_test_tmpdir(dir, sizeof dir);
    return dir[0] ? 0 : 1;
}

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void put_le(unsigned char *p, uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

enum { RAW16, RAW32, LLMC16, LLMC32 };

/* Write tokens in one of the four layouts; returns the path. */
static const char *write_tokens(char *path, size_t n, const char *name, int fmt, const uint32_t *tok,
                                int64_t count)
{
    tmp_path(path, n, name);
    int w = (fmt == RAW16 || fmt == LLMC16) ? 2 : 4;
    size_t hdr = (fmt == LLMC16 || fmt == LLMC32) ? 1024 : 0;
    size_t len = hdr + (size_t)count * (size_t)w;
    unsigned char *b = calloc(len ? len : 1, 1);
    if (hdr) {
        put_le(b, fmt == LLMC16 ? FR_LLMC_MAGIC_U16 : FR_LLMC_MAGIC_U32, 4);
        put_le(b + 4, fmt == LLMC16 ? 1 : 7, 4);
        put_le(b + 8, (uint32_t)count, 4);
    }
    for (int64_t i = 0; i < count; i++) put_le(b + hdr + (size_t)i * (size_t)w, tok[i], w);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(b, 1, len, f), len);
    fclose(f);
    free(b);
    return path;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(data, 1, len, f), len);
    fclose(f);
}

static uint32_t *random_tokens(fr_rng *r, int64_t n, uint32_t vocab)
{
    uint32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)(fr_rng_uniform(r) * vocab);
    return t;
}

static fr_data_opts opts_bt(int64_t B, int64_t T, fr_data_order order, uint64_t seed)
{
    fr_data_opts o = fr_data_opts_default();
    o.batch = B;
    o.seq_len = T;
    o.order = order;
    o.seed = seed;
    return o;
}

static void expect_msg(const char *needle)
{
    if (!strstr(fr_last_error(), needle)) {
        fprintf(stderr, "\n  expected '%s' in: %s\n", needle, fr_last_error());
        CU_FAIL("error message");
    }
}

/* ===================== generator ===================== */

static void test_prng_known_answers(void)
{
    /* xoshiro256** from state {1, 2, 3, 4}, and splitmix64(0) seeding (values computed with an
     * independent Python transcription of both algorithms). */
    fr_prng r = {{1, 2, 3, 4}};
    const uint64_t want[6] = {0x2d00ull, 0x0ull, 0x5a007080ull, 0x10e0000000009d80ull, 0x10e0b61ce1009d80ull,
                              0x870021ce143ad00ull};
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(fr_prng_next(&r), want[i]);
    fr_prng_seed(&r, 0);
    CU_ASSERT_EQUAL(r.s[0], 0xe220a8397b1dcdafull);
    CU_ASSERT_EQUAL(r.s[1], 0x6e789e6aa1b965f4ull);
    CU_ASSERT_EQUAL(r.s[2], 0x06c45d188009454full);
    CU_ASSERT_EQUAL(r.s[3], 0xf88bb8a8724c81ecull);
}

static void test_prng_seed_and_state(void)
{
    fr_rng t = fr_test_rng("prng_state");
    uint64_t seed = (uint64_t)(fr_rng_uniform(&t) * 1e18);
    fr_prng a, b;
    fr_prng_seed(&a, seed);
    fr_prng_seed(&b, seed);
    for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(fr_prng_next(&a), fr_prng_next(&b));
    fr_prng_seed(&b, seed + 1);
    int same = 0;
    for (int i = 0; i < 100; i++) same += fr_prng_next(&a) == fr_prng_next(&b);
    CU_ASSERT(same < 3);
    /* save, draw, restore, draw again */
    uint8_t st[FR_PRNG_STATE_BYTES];
    fr_prng_get_state(&a, st);
    uint64_t first[50];
    for (int i = 0; i < 50; i++) first[i] = fr_prng_next(&a);
    fr_prng c;
    fr_prng_seed(&c, 99);
    FR_ASSERT_OK(fr_prng_set_state(&c, st, sizeof st));
    for (int i = 0; i < 50; i++) CU_ASSERT_EQUAL(fr_prng_next(&c), first[i]);
    /* the byte layout is little-endian words */
    fr_prng k = {{0x0807060504030201ull, 2, 3, 4}};
    fr_prng_get_state(&k, st);
    CU_ASSERT_EQUAL(st[0], 1);
    CU_ASSERT_EQUAL(st[7], 8);
    CU_ASSERT_EQUAL(st[8], 2);
    /* bad states */
    fr_prng before = c;
    CU_ASSERT_EQUAL(fr_prng_set_state(&c, st, 31), FR_ERR_PARSE);
    expect_msg("31 bytes");
    memset(st, 0, sizeof st);
    CU_ASSERT_EQUAL(fr_prng_set_state(&c, st, sizeof st), FR_ERR_PARSE);
    expect_msg("all zero");
    CU_ASSERT_EQUAL(memcmp(&c, &before, sizeof c), 0);
}

static void test_prng_below(void)
{
    fr_rng t = fr_test_rng("prng_below");
    fr_prng r;
    fr_prng_seed(&r, (uint64_t)(fr_rng_uniform(&t) * 1e18));
    CU_ASSERT_EQUAL(fr_prng_below(&r, 0), 0);
    CU_ASSERT_EQUAL(fr_prng_below(&r, 1), 0);
    /* small n: every value hit, none out of range, roughly uniform (chi-square, 9 dof:
     * P(chi2 > 40) < 1e-5) */
    int64_t counts[10] = {0};
    const int N = 100000;
    for (int i = 0; i < N; i++) {
        uint64_t v = fr_prng_below(&r, 10);
        CU_ASSERT_FATAL(v < 10);
        counts[v]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 10; i++) chi2 += (counts[i] - N / 10.0) * (counts[i] - N / 10.0) / (N / 10.0);
    CU_ASSERT(chi2 < 40);
    /* n = 3 * 2^62: plain x % n would return values below 2^62 half of the time instead of a
     * third of the time. */
    const uint64_t n = 3ull << 62;
    int low = 0;
    for (int i = 0; i < 30000; i++) {
        uint64_t v = fr_prng_below(&r, n);
        CU_ASSERT_FATAL(v < n);
        low += v < (1ull << 62);
    }
    CU_ASSERT(fabs(low / 30000.0 - 1.0 / 3.0) < 0.02);
    /* floats and doubles in [0, 1) */
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        double d = fr_prng_double(&r);
        float f = fr_prng_float(&r);
        CU_ASSERT_FATAL(d >= 0 && d < 1 && f >= 0 && f < 1);
        sum += d;
    }
    CU_ASSERT(fabs(sum / 10000 - 0.5) < 0.02);
}

/* The jump must equal 2^128 single steps. The state transition is linear over GF(2), so
 * compute its 256x256 matrix from unit vectors, square it 128 times, and apply it. */
typedef struct {
    uint64_t col[256][4];
} gf2mat;

static void mat_apply(const gf2mat *m, const uint64_t v[4], uint64_t out[4])
{
    uint64_t acc[4] = {0, 0, 0, 0};
    for (int j = 0; j < 256; j++)
        if (v[j / 64] >> (j % 64) & 1)
            for (int k = 0; k < 4; k++) acc[k] ^= m->col[j][k];
    memcpy(out, acc, sizeof acc);
}

static void test_prng_jump(void)
{
    gf2mat *m = malloc(sizeof *m), *sq = malloc(sizeof *sq);
    for (int j = 0; j < 256; j++) {
        fr_prng e = {{0, 0, 0, 0}};
        e.s[j / 64] = 1ull << (j % 64);
        fr_prng_next(&e);
        memcpy(m->col[j], e.s, sizeof e.s);
    }
    for (int i = 0; i < 128; i++) {
        for (int j = 0; j < 256; j++) mat_apply(m, m->col[j], sq->col[j]);
        gf2mat *tmp = m;
        m = sq;
        sq = tmp;
    }
    fr_rng t = fr_test_rng("prng_jump");
    fr_prng a;
    fr_prng_seed(&a, (uint64_t)(fr_rng_uniform(&t) * 1e18));
    uint64_t want[4];
    mat_apply(m, a.s, want);
    fr_prng_jump(&a);
    CU_ASSERT_EQUAL(memcmp(a.s, want, sizeof want), 0);
    free(m);
    free(sq);
}

/* ===================== token files ===================== */

/* Each layout: the loader reads the same tokens back, sequentially, as int32 and int64,
 * mapped and read. */
static void check_format(int fmt, const char *name, uint32_t vocab)
{
    fr_rng r = fr_test_rng(name);
    const int64_t n = 1000, B = 3, T = 7;
    uint32_t *tok = random_tokens(&r, n, vocab);
    char path[600];
    write_tokens(path, sizeof path, name, fmt, tok, n);
    for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
        fr_data_opts o = opts_bt(B, T, FR_DATA_SEQUENTIAL, 0);
        o.token_dtype = fmt == RAW32 ? FR_U32 : FR_U16;
        o.no_mmap = no_mmap;
        o.vocab_size = vocab;
        fr_data_loader *dl;
        FR_ASSERT_OK(fr_data_open(path, &o, &dl));
        CU_ASSERT_EQUAL(fr_data_num_tokens(dl), n);
        CU_ASSERT_EQUAL(fr_data_is_llmc(dl), fmt == LLMC16 || fmt == LLMC32);
        CU_ASSERT_EQUAL(fr_data_token_dtype(dl), (fmt == RAW16 || fmt == LLMC16) ? FR_U16 : FR_U32);
        CU_ASSERT_EQUAL(fr_data_is_mapped(dl), !no_mmap);
        CU_ASSERT_STRING_EQUAL(fr_data_path(dl), path);
        int32_t w32[3 * 8];
        int64_t w64[3 * 8];
        int bad = 0;
        for (int k = 0; k < 5; k++) {
            fr_dtype dt = k % 2 ? FR_I64 : FR_I32;
            FR_ASSERT_OK(fr_data_next(dl, dt, dt == FR_I32 ? (void *)w32 : (void *)w64));
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j <= T; j++) {
                    int64_t v = dt == FR_I32 ? w32[b * (T + 1) + j] : w64[b * (T + 1) + j];
                    bad += v != (int64_t)tok[k * B * T + b * T + j];
                }
        }
        CU_ASSERT_EQUAL(bad, 0);
        fr_data_close(dl);
    }
    free(tok);
}

static void test_raw_u16(void) { check_format(RAW16, "raw16.bin", 65535); }
static void test_raw_u32(void) { check_format(RAW32, "raw32.bin", 2000000000u); }
static void test_llmc_u16(void) { check_format(LLMC16, "llmc16.bin", 50257); }
static void test_llmc_u32(void) { check_format(LLMC32, "llmc32.bin", 128256); }

/* uint8: a text file's bytes are the tokens */
static void test_raw_u8(void)
{
    const char text[] = "fp8run trains a byte-level model on this text as it is.\n";
    char path[600];
    tmp_path(path, sizeof path, "text.txt");
    write_bytes(path, text, sizeof text - 1);
    fr_data_opts o = opts_bt(2, 4, FR_DATA_SEQUENTIAL, 0);
    o.token_dtype = FR_U8;
    o.vocab_size = 128;
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    CU_ASSERT_EQUAL(fr_data_num_tokens(dl), (int64_t)sizeof text - 1);
    CU_ASSERT_EQUAL(fr_data_token_dtype(dl), FR_U8);
    int64_t w[2 * 5];
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 5; j++) CU_ASSERT_EQUAL(w[b * 5 + j], (unsigned char)text[b * 4 + j]);
    fr_data_close(dl);
    /* a byte >= the vocabulary is a clear error, as for wider tokens */
    const unsigned char high[16] = {'a', 'b', 200, 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o'};
    write_bytes(path, high, sizeof high);
    o.vocab_size = 128;
    fr_status st = fr_data_open(path, &o, &dl);
    if (st == FR_OK) {
        st = fr_data_next(dl, FR_I64, w);
        fr_data_close(dl);
    }
    CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
    expect_msg("200");
}

/* FR_DATA_RAW reads a file that happens to start with llm.c's magic as plain tokens. */
static void test_raw_forced(void)
{
    uint32_t tok[600];
    for (int i = 0; i < 600; i++) tok[i] = (uint32_t)i;
    char path[600];
    write_tokens(path, sizeof path, "forced.bin", LLMC32, tok, 600);
    fr_data_opts o = opts_bt(2, 3, FR_DATA_SEQUENTIAL, 0);
    o.format = FR_DATA_RAW;
    o.token_dtype = FR_U32;
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    CU_ASSERT_FALSE(fr_data_is_llmc(dl));
    CU_ASSERT_EQUAL(fr_data_num_tokens(dl), 256 + 600);
    int64_t w[8];
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    CU_ASSERT_EQUAL(w[0], FR_LLMC_MAGIC_U32);
    CU_ASSERT_EQUAL(w[1], 7);
    CU_ASSERT_EQUAL(w[2], 600);
    fr_data_close(dl);
}

static void test_split(void)
{
    int64_t win[2 * 5] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int64_t in[8], lab[8];
    FR_ASSERT_OK(fr_data_split(win, FR_I64, 2, 4, in, lab));
    const int64_t want_in[8] = {1, 2, 3, 4, 6, 7, 8, 9}, want_lab[8] = {2, 3, 4, 5, 7, 8, 9, 10};
    CU_ASSERT_EQUAL(memcmp(in, want_in, sizeof in), 0);
    CU_ASSERT_EQUAL(memcmp(lab, want_lab, sizeof lab), 0);
    int32_t w32[5] = {5, 6, 7, 8, 9}, i32[4], l32[4];
    FR_ASSERT_OK(fr_data_split(w32, FR_I32, 1, 4, i32, l32));
    CU_ASSERT(i32[0] == 5 && i32[3] == 8 && l32[0] == 6 && l32[3] == 9);
    CU_ASSERT_EQUAL(fr_data_split(w32, FR_F32, 1, 4, i32, l32), FR_ERR_UNSUPPORTED);
}

/* ===================== random order ===================== */

/* tokens[i] = i, so every window must be i, i+1, ..., i+T with 0 <= i <= n-T-1, and the
 * starts must be the generator's draws below n-T, in order. */
static void test_random_windows(void)
{
    const int64_t n = 60, B = 4, T = 9;
    uint32_t tok[60];
    for (int i = 0; i < n; i++) tok[i] = (uint32_t)i;
    char path[600];
    write_tokens(path, sizeof path, "iota.bin", RAW32, tok, n);
    fr_rng t = fr_test_rng("random_windows");
    uint64_t seed = (uint64_t)(fr_rng_uniform(&t) * 1e18);
    fr_data_opts o = opts_bt(B, T, FR_DATA_RANDOM, seed);
    o.token_dtype = FR_U32;
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    fr_prng ref;
    fr_prng_seed(&ref, seed);
    int seen_first = 0, seen_last = 0, bad = 0;
    int64_t w[4 * 10];
    for (int k = 0; k < 200; k++) {
        FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
        for (int64_t b = 0; b < B; b++) {
            int64_t s = w[b * (T + 1)];
            bad += s < 0 || s > n - T - 1 || s != (int64_t)fr_prng_below(&ref, (uint64_t)(n - T));
            for (int64_t j = 0; j <= T; j++) bad += w[b * (T + 1) + j] != s + j;
            seen_first += s == 0;
            seen_last += s == n - T - 1;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(seen_first > 0 && seen_last > 0);
    CU_ASSERT_EQUAL(fr_data_batches(dl), 200);
    CU_ASSERT_EQUAL(fr_data_epoch(dl), 200 * B * T / n);
    CU_ASSERT_EQUAL(fr_data_position(dl), 0);
    fr_data_close(dl);
}

static void test_random_reproducible_and_restorable(void)
{
    fr_rng r = fr_test_rng("random_restore");
    const int64_t n = 5000, B = 4, T = 16;
    uint32_t *tok = random_tokens(&r, n, 50000);
    char path[600];
    write_tokens(path, sizeof path, "rr.bin", LLMC16, tok, n);
    uint64_t seed = (uint64_t)(fr_rng_uniform(&r) * 1e18);
    fr_data_opts o = opts_bt(B, T, FR_DATA_RANDOM, seed);
    fr_data_loader *a, *b;
    FR_ASSERT_OK(fr_data_open(path, &o, &a));
    FR_ASSERT_OK(fr_data_open(path, &o, &b));
    int32_t wa[4 * 17], wb[4 * 17], saved[3][4 * 17];
    for (int k = 0; k < 7; k++) {
        FR_ASSERT_OK(fr_data_next(a, FR_I32, wa));
        FR_ASSERT_OK(fr_data_next(b, FR_I32, wb));
        CU_ASSERT_EQUAL(memcmp(wa, wb, sizeof wa), 0); /* same seed, same batches */
    }
    /* save, draw 3, restore, draw 3 again: identical */
    uint8_t st[FR_DATA_STATE_BYTES];
    fr_data_get_state(a, st);
    for (int k = 0; k < 3; k++) FR_ASSERT_OK(fr_data_next(a, FR_I32, saved[k]));
    FR_ASSERT_OK(fr_data_set_state(a, st, sizeof st));
    CU_ASSERT_EQUAL(fr_data_batches(a), 7);
    for (int k = 0; k < 3; k++) {
        FR_ASSERT_OK(fr_data_next(a, FR_I32, wa));
        CU_ASSERT_EQUAL(memcmp(wa, saved[k], sizeof wa), 0);
    }
    /* ... and into a fresh loader opened with another seed */
    fr_data_opts o2 = o;
    o2.seed = seed ^ 0x5555;
    fr_data_loader *c;
    FR_ASSERT_OK(fr_data_open(path, &o2, &c));
    FR_ASSERT_OK(fr_data_set_state(c, st, sizeof st));
    for (int k = 0; k < 3; k++) {
        FR_ASSERT_OK(fr_data_next(c, FR_I32, wa));
        CU_ASSERT_EQUAL(memcmp(wa, saved[k], sizeof wa), 0);
    }
    /* a different seed gives different batches; reset goes back to the seed's first batch */
    fr_data_reset(c);
    FR_ASSERT_OK(fr_data_next(c, FR_I32, wa));
    fr_data_reset(b);
    FR_ASSERT_OK(fr_data_next(b, FR_I32, wb));
    CU_ASSERT_NOT_EQUAL(memcmp(wa, wb, sizeof wa), 0);
    fr_data_loader *d;
    FR_ASSERT_OK(fr_data_open(path, &o, &d));
    FR_ASSERT_OK(fr_data_next(d, FR_I32, wa));
    CU_ASSERT_EQUAL(memcmp(wa, wb, sizeof wa), 0);
    fr_data_close(a);
    fr_data_close(b);
    fr_data_close(c);
    fr_data_close(d);
    free(tok);
}

/* ===================== sequential order ===================== */

static void test_sequential_wrap(void)
{
    /* n = 3 full batches of B*T plus a tail of 5: three batches per epoch, the tail skipped */
    const int64_t B = 2, T = 5, n = 3 * B * T + 5;
    uint32_t tok[64];
    for (int i = 0; i < n; i++) tok[i] = (uint32_t)(1000 + i);
    char path[600];
    write_tokens(path, sizeof path, "seq.bin", RAW16, tok, n);
    fr_data_opts o = opts_bt(B, T, FR_DATA_SEQUENTIAL, 0);
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    CU_ASSERT_EQUAL(fr_data_batches_per_epoch(dl), 3);
    int64_t w[2 * 6];
    int bad = 0;
    for (int k = 0; k < 8; k++) {
        CU_ASSERT_EQUAL(fr_data_position(dl), (k % 3) * B * T);
        CU_ASSERT_EQUAL(fr_data_epoch(dl), k / 3);
        FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
        int64_t p = (k % 3) * B * T;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j <= T; j++) bad += w[b * (T + 1) + j] != 1000 + p + b * T + j;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(fr_data_epoch(dl), 2);
    CU_ASSERT_EQUAL(fr_data_batches(dl), 8);
    /* save mid-epoch, restore in a fresh loader */
    uint8_t st[FR_DATA_STATE_BYTES];
    fr_data_get_state(dl, st);
    int64_t want[2 * 6];
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, want));
    fr_data_loader *d2;
    FR_ASSERT_OK(fr_data_open(path, &o, &d2));
    FR_ASSERT_OK(fr_data_set_state(d2, st, sizeof st));
    CU_ASSERT_EQUAL(fr_data_epoch(d2), 2);
    FR_ASSERT_OK(fr_data_next(d2, FR_I64, w));
    CU_ASSERT_EQUAL(memcmp(w, want, sizeof w), 0);
    fr_data_close(d2);
    fr_data_close(dl);

    /* an exact fit: n = 2*B*T + 1 gives two batches and no tail */
    write_tokens(path, sizeof path, "seq2.bin", RAW16, tok, 2 * B * T + 1);
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    CU_ASSERT_EQUAL(fr_data_batches_per_epoch(dl), 2);
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    CU_ASSERT_EQUAL(w[2 * 6 - 1], 1000 + 2 * B * T); /* the file's last token */
    CU_ASSERT_EQUAL(fr_data_epoch(dl), 1);
    CU_ASSERT_EQUAL(fr_data_position(dl), 0);
    fr_data_close(dl);
}

static void test_validation_loader(void)
{
    fr_rng r = fr_test_rng("val_loader");
    const int64_t n = 700, B = 2, T = 8;
    uint32_t *tok = random_tokens(&r, n, 1000);
    char path[600];
    write_tokens(path, sizeof path, "val.bin", RAW16, tok, n);
    fr_data_opts o = opts_bt(B, T, FR_DATA_RANDOM, 1); /* order is overridden */
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open_val(path, &o, 3, &dl));
    CU_ASSERT_EQUAL(fr_data_options(dl)->order, FR_DATA_SEQUENTIAL);
    CU_ASSERT_EQUAL(fr_data_batches_per_epoch(dl), 3);
    int32_t pass[3][2 * 9], w[2 * 9];
    for (int k = 0; k < 3; k++) FR_ASSERT_OK(fr_data_next(dl, FR_I32, pass[k]));
    int bad = 0;
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 2 * 9; j++) bad += pass[k][j] != (int32_t)tok[k * B * T + (j / 9) * T + j % 9];
    CU_ASSERT_EQUAL(bad, 0);
    /* the next pass sees the same batches */
    for (int k = 0; k < 3; k++) {
        FR_ASSERT_OK(fr_data_next(dl, FR_I32, w));
        CU_ASSERT_EQUAL(memcmp(w, pass[k], sizeof w), 0);
    }
    /* reset mid-pass rewinds */
    FR_ASSERT_OK(fr_data_next(dl, FR_I32, w));
    fr_data_reset(dl);
    FR_ASSERT_OK(fr_data_next(dl, FR_I32, w));
    CU_ASSERT_EQUAL(memcmp(w, pass[0], sizeof w), 0);
    fr_data_close(dl);
    /* 0 batches: as many as fit, (n-1) / (B*T) */
    FR_ASSERT_OK(fr_data_open_val(path, &o, 0, &dl));
    CU_ASSERT_EQUAL(fr_data_batches_per_epoch(dl), (n - 1) / (B * T));
    fr_data_close(dl);
    /* more than fit: clear error */
    dl = (fr_data_loader *)1;
    CU_ASSERT_EQUAL(fr_data_open_val(path, &o, 50, &dl), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NULL(dl);
    char msg[900];
    snprintf(msg, sizeof msg, "'%s' holds 700 tokens; 50 validation batches of 2 x 8 (+1) need 801", path);
    expect_msg(msg);
    free(tok);
}

static void test_state_errors(void)
{
    uint32_t tok[400];
    for (int i = 0; i < 400; i++) tok[i] = (uint32_t)i;
    char path[600];
    write_tokens(path, sizeof path, "st.bin", RAW16, tok, 400);
    fr_data_opts o = opts_bt(2, 10, FR_DATA_SEQUENTIAL, 0);
    fr_data_loader *a, *b;
    FR_ASSERT_OK(fr_data_open(path, &o, &a));
    int64_t w[2 * 11];
    FR_ASSERT_OK(fr_data_next(a, FR_I64, w));
    uint8_t st[FR_DATA_STATE_BYTES], good[FR_DATA_STATE_BYTES], mine[FR_DATA_STATE_BYTES];
    fr_data_get_state(a, st);
    memcpy(good, st, sizeof st);
    fr_data_opts o2 = opts_bt(4, 10, FR_DATA_SEQUENTIAL, 0);
    FR_ASSERT_OK(fr_data_open(path, &o2, &b));
    fr_data_get_state(b, mine);
    CU_ASSERT_EQUAL(fr_data_set_state(b, st, sizeof st), FR_ERR_INVALID_ARG);
    expect_msg("saved for sequential batches of 2 x 10 over 400 tokens");
    expect_msg("has sequential batches of 4 x 10");
    fr_data_get_state(b, st);
    CU_ASSERT_EQUAL(memcmp(st, mine, sizeof st), 0); /* unchanged */
    memcpy(st, good, sizeof st);
    CU_ASSERT_EQUAL(fr_data_set_state(a, st, sizeof st - 1), FR_ERR_PARSE);
    st[0] ^= 1;
    CU_ASSERT_EQUAL(fr_data_set_state(a, st, sizeof st), FR_ERR_PARSE);
    expect_msg("not a saved state");
    memcpy(st, good, sizeof st);
    st[40] = 7; /* position 7: not a batch start */
    CU_ASSERT_EQUAL(fr_data_set_state(a, st, sizeof st), FR_ERR_INVALID_ARG);
    expect_msg("position 7 is not a batch start");
    memcpy(st, good, sizeof st);
    memset(st + 64, 0, 32); /* zero generator state */
    CU_ASSERT_EQUAL(fr_data_set_state(a, st, sizeof st), FR_ERR_PARSE);
    expect_msg("st.bin");
    fr_data_close(a);
    fr_data_close(b);
}

/* ===================== errors ===================== */

static void expect_open_error(const char *path, const fr_data_opts *o, fr_status want, const char *needle)
{
    fr_data_loader *dl = (fr_data_loader *)1;
    CU_ASSERT_EQUAL(fr_data_open(path, o, &dl), want);
    CU_ASSERT_PTR_NULL(dl);
    expect_msg(needle);
}

static void test_open_errors(void)
{
    char path[600], msg[900];
    fr_data_opts o = opts_bt(4, 128, FR_DATA_RANDOM, 0);
    /* missing */
    tmp_path(path, sizeof path, "missing.bin");
    expect_open_error(path, &o, FR_ERR_IO, "missing.bin");
    expect_msg(strerror(ENOENT));
    /* a directory */
    expect_open_error(dir, &o, FR_ERR_IO, "not a regular file");
    /* unreadable (skipped as root, who reads anything) */
    uint32_t tok[1200];
    for (int i = 0; i < 1200; i++) tok[i] = (uint32_t)(i % 300);
    write_tokens(path, sizeof path, "noread.bin", RAW16, tok, 1200);
    chmod(path, 0);
    if (geteuid() != 0) expect_open_error(path, &o, FR_ERR_IO, "noread.bin");
    /* too short: the brief's example */
    write_tokens(path, sizeof path, "f.bin", RAW16, tok, 100);
    snprintf(msg, sizeof msg, "'%s' holds 100 tokens; one batch of 4 x (128+1) needs 516", path);
    expect_open_error(path, &o, FR_ERR_SHAPE, msg);
    o.order = FR_DATA_SEQUENTIAL;
    expect_open_error(path, &o, FR_ERR_SHAPE, msg);
    /* exactly B*(T+1) is enough */
    write_tokens(path, sizeof path, "f516.bin", RAW16, tok, 516);
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    fr_data_close(dl);
    /* empty */
    write_bytes(tmp_path(path, sizeof path, "empty.bin"), "", 0);
    expect_open_error(path, &o, FR_ERR_SHAPE, "holds 0 tokens");
    /* odd byte count for uint16, and not a multiple of 4 for uint32 */
    unsigned char junk[1031];
    memset(junk, 1, sizeof junk);
    write_bytes(tmp_path(path, sizeof path, "odd.bin"), junk, 1031);
    expect_open_error(path, &o, FR_ERR_PARSE, "is 1031 bytes, not a whole number of uint16 tokens");
    write_bytes(tmp_path(path, sizeof path, "odd32.bin"), junk, 1030);
    o.token_dtype = FR_U32;
    expect_open_error(path, &o, FR_ERR_PARSE, "is 1030 bytes, not a whole number of uint32 tokens");
    o.token_dtype = FR_I64;
    expect_open_error(path, &o, FR_ERR_UNSUPPORTED, "int64");
    o.token_dtype = FR_U16;
    /* llm.c: count does not match the size */
    write_tokens(path, sizeof path, "llmc_bad.bin", LLMC16, tok, 1000);
    FILE *f = fopen(path, "r+b");
    unsigned char cnt[4];
    put_le(cnt, 1001, 4);
    fseek(f, 8, SEEK_SET);
    fwrite(cnt, 1, 4, f);
    fclose(f);
    expect_open_error(path, &o, FR_ERR_PARSE, "header says 1001 uint16 tokens (3026 bytes with the header) but the file is 3024 bytes");
    expect_msg("llmc_bad.bin");
    /* llm.c: negative count */
    f = fopen(path, "r+b");
    put_le(cnt, 0xFFFFFFFFu, 4);
    fseek(f, 8, SEEK_SET);
    fwrite(cnt, 1, 4, f);
    fclose(f);
    expect_open_error(path, &o, FR_ERR_PARSE, "negative");
    /* llm.c: wrong version */
    write_tokens(path, sizeof path, "llmc_ver.bin", LLMC16, tok, 1000);
    f = fopen(path, "r+b");
    put_le(cnt, 2, 4);
    fseek(f, 4, SEEK_SET);
    fwrite(cnt, 1, 4, f);
    fclose(f);
    expect_open_error(path, &o, FR_ERR_UNSUPPORTED, "has version 2");
    /* llm.c: truncated header */
    unsigned char hdr[600];
    memset(hdr, 0, sizeof hdr);
    put_le(hdr, FR_LLMC_MAGIC_U16, 4);
    write_bytes(tmp_path(path, sizeof path, "llmc_short.bin"), hdr, sizeof hdr);
    expect_open_error(path, &o, FR_ERR_PARSE, "is only 600 bytes");
    /* bad options */
    write_tokens(path, sizeof path, "ok.bin", RAW16, tok, 1200);
    fr_data_opts z = opts_bt(0, 16, FR_DATA_RANDOM, 0);
    expect_open_error(path, &z, FR_ERR_INVALID_ARG, "must be >= 1");
    z = opts_bt(4, 16, (fr_data_order)5, 0);
    expect_open_error(path, &z, FR_ERR_INVALID_ARG, "unknown order");
    z = opts_bt(INT64_MAX / 4, INT64_MAX / 4, FR_DATA_RANDOM, 0);
    expect_open_error(path, &z, FR_ERR_INVALID_ARG, "too large");
    /* an unsupported batch dtype */
    z = opts_bt(4, 16, FR_DATA_RANDOM, 0);
    FR_ASSERT_OK(fr_data_open(path, &z, &dl));
    float fb[4 * 17];
    CU_ASSERT_EQUAL(fr_data_next(dl, FR_F32, fb), FR_ERR_UNSUPPORTED);
    expect_msg("float32");
    fr_data_close(dl);
}

/* Token ids >= vocabulary size: the batch fails naming file, position and id, and the loader
 * state does not move; a whole-file scan finds the first such id. */
static void test_vocab_errors(void)
{
    const int64_t n = 2000;
    uint32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int64_t i = 0; i < n; i++) tok[i] = (uint32_t)(i % 100);
    tok[1234] = 777;
    char path[600];
    write_tokens(path, sizeof path, "vocab.bin", LLMC16, tok, n);
    fr_data_opts o = opts_bt(2, 10, FR_DATA_SEQUENTIAL, 0);
    o.vocab_size = 100;
    fr_data_loader *dl;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    /* batches before position 1234 are fine: batch k covers [20k, 20k + 20] */
    int64_t w[2 * 11];
    for (int k = 0; k < 61; k++) FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    uint8_t before[FR_DATA_STATE_BYTES], after[FR_DATA_STATE_BYTES];
    fr_data_get_state(dl, before);
    CU_ASSERT_EQUAL(fr_data_next(dl, FR_I64, w), FR_ERR_RANGE);
    char msg[900];
    snprintf(msg, sizeof msg, "token file '%s': token id 777 at position 1234 is >= the vocabulary size 100", path);
    expect_msg(msg);
    fr_data_get_state(dl, after);
    CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
    CU_ASSERT_EQUAL(fr_data_next(dl, FR_I64, w), FR_ERR_RANGE); /* the same batch again */
    /* a whole-file scan */
    CU_ASSERT_EQUAL(fr_data_check_tokens(dl, 100), FR_ERR_RANGE);
    expect_msg("at position 1234");
    FR_ASSERT_OK(fr_data_check_tokens(dl, 778));
    fr_data_close(dl);

    /* random order: the failing batch leaves the generator where it was */
    o = opts_bt(4, 50, FR_DATA_RANDOM, 3);
    o.vocab_size = 100;
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    int64_t wr[4 * 51];
    int failures = 0;
    for (int k = 0; k < 50; k++) {
        fr_data_get_state(dl, before);
        fr_status st = fr_data_next(dl, FR_I64, wr);
        if (st != FR_OK) {
            CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
            expect_msg("token id 777 at position 1234");
            fr_data_get_state(dl, after);
            CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
            failures++;
            break;
        }
    }
    CU_ASSERT(failures == 1); /* 50 batches of 4 windows of 51 tokens hit token 1234 w.p. ~1 - 1e-9 */
    fr_data_close(dl);

    /* uint32 ids beyond int32 */
    uint32_t big[300];
    for (int i = 0; i < 300; i++) big[i] = (uint32_t)i;
    big[5] = 3000000000u;
    write_tokens(path, sizeof path, "big.bin", LLMC32, big, 300);
    o = opts_bt(2, 10, FR_DATA_SEQUENTIAL, 0);
    FR_ASSERT_OK(fr_data_open(path, &o, &dl));
    int32_t w32[2 * 11];
    CU_ASSERT_EQUAL(fr_data_next(dl, FR_I32, w32), FR_ERR_RANGE);
    expect_msg("token id 3000000000 at position 5 does not fit int32");
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    CU_ASSERT_EQUAL(w[5], 3000000000ll);
    fr_data_close(dl);
    free(tok);
}

static CU_TestInfo prng_tests[] = {
    {"known answers", test_prng_known_answers},
    {"seeding, save/restore state", test_prng_seed_and_state},
    {"uniform below n without bias", test_prng_below},
    {"jump == 2^128 steps (GF(2) matrix power)", test_prng_jump},
    CU_TEST_INFO_NULL};
static CU_TestInfo format_tests[] = {
    {"raw uint16", test_raw_u16},
    {"raw uint32", test_raw_u32},
    {"raw uint8 (text bytes)", test_raw_u8},
    {"llm.c uint16 (v1)", test_llmc_u16},
    {"llm.c uint32 (v7)", test_llmc_u32},
    {"raw forced over a magic", test_raw_forced},
    {"split inputs/labels", test_split},
    CU_TEST_INFO_NULL};
static CU_TestInfo order_tests[] = {
    {"random windows in range, from the generator", test_random_windows},
    {"random: reproducible, save/restore", test_random_reproducible_and_restorable},
    {"sequential wrap-around and epochs", test_sequential_wrap},
    {"validation loader", test_validation_loader},
    {"state errors", test_state_errors},
    CU_TEST_INFO_NULL};
static CU_TestInfo error_tests[] = {
    {"open errors", test_open_errors},
    {"token ids vs vocabulary", test_vocab_errors},
    CU_TEST_INFO_NULL};

static CU_SuiteInfo suites[] = {
    {"prng", NULL, NULL, NULL, NULL, prng_tests},
    {"formats", setup, NULL, NULL, NULL, format_tests},
    {"orders", setup, NULL, NULL, NULL, order_tests},
    {"errors", setup, NULL, NULL, NULL, error_tests},
    CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
