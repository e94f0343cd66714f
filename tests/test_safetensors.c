/* Safetensors files (runtime/io/safetensors.c, safetensors_ckpt.c): the transformers fixture read
 * and written back byte for byte; BF16/F16/F64/FP8 and FP8 128x128 block-scaled reads against
 * a float64 reference decoded here independently; hostile headers and indexes refused with
 * messages naming the file and tensor; zero-size fp8 weights with huge dims; sharded writing
 * and reading. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/limits.h"
#include "tests/harness.h"
#include "runtime/io/safetensors.h"

/* ---- helpers ---- */

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* A file of: header length field `hlen`, the header text, then data_len bytes of 0x11. */
static void write_raw(const char *path, uint64_t hlen, const char *header, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 8; i++) fputc((int)((hlen >> (8 * i)) & 0xFF), f);
    fputs(header, f);
    for (size_t i = 0; i < data_len; i++) fputc(0x11, f);
    fclose(f);
}

static void write_hdr(const char *path, const char *header, size_t data_len)
{
    write_raw(path, strlen(header), header, data_len);
}

/* fr_st_open must fail with `want`, the message naming the file and `name` (when non-NULL). */
static void expect_refused(const char *path, fr_status want, const char *name, const char *why)
{
    fr_st_file *f = NULL;
    fr_status st = fr_st_open(path, &f);
    if (st != want || !strstr(fr_last_error(), path) || (name && !strstr(fr_last_error(), name)))
        fprintf(stderr, "\n  %s: status %d (want %d): %s\n", why, (int)st, (int)want, fr_last_error());
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    if (name) CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), name));
    fr_st_close(f);
}

/* ---- the transformers fixture ---- */

static void test_fixture_round_trip(void)
{
    char fx[512], dir[512], out[700];
    fr_fixture(fx, sizeof fx, "hf/llama_safetensors/model.safetensors");
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(fx, &f));
    CU_ASSERT_EQUAL(f->n, 21);
    CU_ASSERT_STRING_EQUAL(fr_st_meta(f, "format"), "pt");
    const fr_st_tensor *q = fr_st_find(f, "model.layers.1.self_attn.k_proj.weight");
    CU_ASSERT_FATAL(q != NULL);
    CU_ASSERT(q->dtype == FR_F32 && q->rank == 2 && q->dims[0] == 24 && q->dims[1] == 72);
    CU_ASSERT_PTR_NULL(fr_st_find(f, "model.layers.2.self_attn.k_proj.weight"));
    /* everything back out through the checkpoint writer, in name order as transformers wrote it */
    fr_st_out *o = calloc((size_t)f->n, sizeof *o);
    float **vals = calloc((size_t)f->n, sizeof *vals);
    CU_ASSERT_FATAL(o && vals);
    for (int i = 0; i < f->n; i++) {
        vals[i] = malloc((size_t)f->t[i].numel * sizeof(float));
        FR_ASSERT_OK(fr_st_read_f32(f, &f->t[i], vals[i]));
        o[i] = (fr_st_out){f->t[i].name, FR_F32, f->t[i].rank, f->t[i].dims, vals[i]};
    }
    fr_test_tmpdir(dir, sizeof dir);
    FR_ASSERT_OK(fr_st_ckpt_write(dir, o, f->n, 0));
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    size_t la, lb;
    unsigned char *a = slurp(fx, &la), *b = slurp(out, &lb);
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT_EQUAL(la, lb); /* the same header (compact JSON, same order) and the same bytes */
    CU_ASSERT(la == lb && memcmp(a, b, la) == 0);
    /* and through the checkpoint reader: every tensor equal */
    fr_st_ckpt *c;
    FR_ASSERT_OK(fr_st_ckpt_open(dir, &c));
    CU_ASSERT_EQUAL(c->n, f->n);
    for (int i = 0; i < f->n; i++) {
        int k = fr_st_ckpt_find(c, f->t[i].name);
        CU_ASSERT_FATAL(k >= 0);
        float *v = malloc((size_t)f->t[i].numel * sizeof(float));
        FR_ASSERT_OK(fr_st_ckpt_read_f32(c, k, v));
        CU_ASSERT(memcmp(v, vals[i], (size_t)f->t[i].numel * sizeof(float)) == 0);
        free(v);
        free(vals[i]);
    }
    fr_st_ckpt_close(c);
    free(a);
    free(b);
    free(o);
    free(vals);
    fr_st_close(f);
}

/* ---- dtype conversions against an independent float64 decode ---- */

/* value of a binary float with `eb` exponent and `mb` mantissa bits (IEEE-like, with inf/nan
 * when ieee_special, else E4M3FN's all-ones NaN only) */
static double ref_decode(uint32_t bits, int eb, int mb, int ieee_special)
{
    int sign = (bits >> (eb + mb)) & 1;
    uint32_t e = (bits >> mb) & ((1u << eb) - 1), m = bits & ((1u << mb) - 1);
    int bias = (1 << (eb - 1)) - 1;
    double v;
    if (ieee_special && e == (1u << eb) - 1) v = m ? NAN : INFINITY;
    else if (!ieee_special && e == (1u << eb) - 1 && m == (1u << mb) - 1) v = NAN;
    else if (e == 0) v = ldexp((double)m, 1 - bias - mb);
    else v = ldexp((double)(m | (1u << mb)), (int)e - bias - mb);
    return sign ? -v : v;
}

static int same_float(float got, double want)
{
    if (isnan(want)) return isnan(got);
    return got == (float)want && !signbit(got) == !signbit(want);
}

static void test_dtype_conversions(void)
{
    fr_rng r = fr_test_rng("safetensors_dtypes");
    char dir[512], path[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/dtypes.safetensors", dir);
    enum { N = 4096 };
    static uint16_t h16[N], b16[N];
    static uint8_t e4[256], e5[256];
    static double f64[N];
    for (int i = 0; i < N; i++) {
        h16[i] = i < 2048 ? (uint16_t)(i * 32 + (i & 31)) : (uint16_t)(fr_rng_uniform(&r) * 65536);
        b16[i] = (uint16_t)(fr_rng_uniform(&r) * 65536);
        f64[i] = fr_rng_normal(&r) * ldexp(1.0, (int)(fr_rng_uniform(&r) * 200) - 100);
    }
    for (int i = 0; i < 256; i++) e4[i] = e5[i] = (uint8_t)i;
    int64_t dn = N, d8 = 256, d2[2] = {16, 16};
    fr_st_out o[] = {{"f16", FR_F16, 1, &dn, h16}, {"bf16", FR_BF16, 1, &dn, b16}, {"f64", FR_F64, 1, &dn, f64},
                     {"e4m3", FR_F8E4M3, 2, d2, e4}, {"e5m2", FR_F8E5M2, 1, &d8, e5}};
    FR_ASSERT_OK(fr_st_write(path, o, 5, NULL, 0));
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(path, &f));
    float *v = malloc(N * sizeof *v);
    int bad = 0;
    FR_ASSERT_OK(fr_st_read_f32(f, fr_st_find(f, "f16"), v));
    for (int i = 0; i < N; i++) bad += !same_float(v[i], ref_decode(h16[i], 5, 10, 1));
    FR_ASSERT_OK(fr_st_read_f32(f, fr_st_find(f, "bf16"), v));
    for (int i = 0; i < N; i++) bad += !same_float(v[i], ref_decode(b16[i], 8, 7, 1));
    FR_ASSERT_OK(fr_st_read_f32(f, fr_st_find(f, "f64"), v));
    for (int i = 0; i < N; i++) bad += !same_float(v[i], (double)(float)f64[i]);
    FR_ASSERT_OK(fr_st_read_f32(f, fr_st_find(f, "e4m3"), v));
    for (int i = 0; i < 256; i++) bad += !same_float(v[i], ref_decode((uint32_t)i, 4, 3, 0));
    FR_ASSERT_OK(fr_st_read_f32(f, fr_st_find(f, "e5m2"), v));
    for (int i = 0; i < 256; i++) bad += !same_float(v[i], ref_decode((uint32_t)i, 5, 2, 1));
    CU_ASSERT_EQUAL(bad, 0);
    free(v);
    fr_st_close(f);
}

/* An FP8 release's weight: W = q * scale_inv per 128x128 block, one float32 product. */
static void test_fp8_block_scales(void)
{
    fr_rng r = fr_test_rng("safetensors_fp8_blocks");
    char dir[512], path[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/fp8.safetensors", dir);
    enum { R = 300, C = 260, SR = 3, SC = 3 };
    static uint8_t q[R * C];
    static float s32[SR * SC];
    static uint16_t sb16[SR * SC];
    for (int i = 0; i < R * C; i++) {
        q[i] = (uint8_t)(fr_rng_uniform(&r) * 256);
        if ((q[i] & 0x7F) == 0x7F) q[i] = 0x3F; /* no NaN codes */
    }
    for (int i = 0; i < SR * SC; i++) {
        s32[i] = (float)(fr_rng_uniform(&r) * 3e-3 + 1e-5);
        sb16[i] = (uint16_t)(0x3A00 + (int)(fr_rng_uniform(&r) * 0x300)); /* bf16 in [2^-11, 2^-5) */
    }
    int64_t wd[2] = {R, C}, sd[2] = {SR, SC}, bad_sd[2] = {SR, SC - 1};
    fr_st_out o[] = {{"a.weight", FR_F8E4M3, 2, wd, q},       {"a.weight_scale_inv", FR_F32, 2, sd, s32},
                     {"b.weight", FR_F8E4M3, 2, wd, q},       {"b.weight_scale_inv", FR_BF16, 2, sd, sb16},
                     {"c.weight", FR_F8E4M3, 2, wd, q},       {"c.weight_scale", FR_F32, 2, sd, s32},
                     {"d.weight", FR_F8E4M3, 2, wd, q},       {"d.weight_scale_inv", FR_F32, 2, bad_sd, s32},
                     {"e.weight", FR_F8E4M3, 2, wd, q}};
    FR_ASSERT_OK(fr_st_ckpt_write(dir, o, 9, 0));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    fr_st_ckpt *c;
    FR_ASSERT_OK(fr_st_ckpt_open(path, &c));
    float *v = malloc((size_t)R * C * sizeof *v);
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        FR_ASSERT_OK(fr_st_ckpt_read_f32(c, fr_st_ckpt_find(c, pass ? "b.weight" : "a.weight"), v));
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                int k = (i / 128) * SC + j / 128;
                double s = pass ? ref_decode(sb16[k], 8, 7, 1) : (double)s32[k];
                bad += !same_float(v[i * C + j], (double)(float)(ref_decode(q[i * C + j], 4, 3, 0) * s));
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(fr_st_ckpt_is_aux(c, fr_st_ckpt_find(c, "a.weight_scale_inv")));
    CU_ASSERT(!fr_st_ckpt_is_aux(c, fr_st_ckpt_find(c, "c.weight_scale")));
    CU_ASSERT(!fr_st_ckpt_is_aux(c, fr_st_ckpt_find(c, "a.weight")));
    /* another scale convention is refused, not read unscaled; a wrong block grid too */
    CU_ASSERT_EQUAL(fr_st_ckpt_read_f32(c, fr_st_ckpt_find(c, "c.weight"), v), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "c.weight_scale"));
    CU_ASSERT_EQUAL(fr_st_ckpt_read_f32(c, fr_st_ckpt_find(c, "d.weight"), v), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "d.weight_scale_inv"));
    /* no scale at all: the codes' own values */
    FR_ASSERT_OK(fr_st_ckpt_read_f32(c, fr_st_ckpt_find(c, "e.weight"), v));
    for (int i = 0; i < R * C; i++) bad += !same_float(v[i], ref_decode(q[i], 4, 3, 0));
    CU_ASSERT_EQUAL(bad, 0);
    free(v);
    fr_st_ckpt_close(c);
}

/* ---- hostile files ---- */

static void test_hostile_headers(void)
{
    char dir[512], p[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/bad.safetensors", dir);
    const char *ok1 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    write_hdr(p, ok1, 8);
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(p, &f));
    fr_st_close(f);

    write_hdr(p, ok1, 5); /* truncated data */
    expect_refused(p, FR_ERR_PARSE, "'x'", "truncated");
    write_hdr(p, ok1, 12); /* trailing bytes no tensor owns */
    expect_refused(p, FR_ERR_PARSE, NULL, "trailing");
    write_raw(p, UINT64_MAX, ok1, 8);
    expect_refused(p, FR_ERR_PARSE, "header length", "huge header length");
    write_raw(p, strlen(ok1) + 9, ok1, 8); /* past the end of the file */
    expect_refused(p, FR_ERR_PARSE, "header length", "header past the end");
    write_raw(p, FR_LIMIT_HEADER_DEFAULT + 1, ok1, 0);
    CU_ASSERT_EQUAL(truncate(p, (off_t)FR_LIMIT_HEADER_DEFAULT + 100), 0); /* sparse: a big file, a bigger header */
    expect_refused(p, FR_ERR_PARSE, "over the limit (100000000 bytes)", "header over the limit");
    FILE *tiny = fopen(p, "wb");
    fputs("abc", tiny);
    fclose(tiny);
    expect_refused(p, FR_ERR_PARSE, NULL, "shorter than 8 bytes");

    static const struct {
        const char *hdr;
        size_t data;
        fr_status st;
        const char *name;
    } cases[] = {
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, FR_ERR_PARSE, "'y'"}, /* overlap */
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, FR_ERR_PARSE, "'y'"}, /* hole */
        {"{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FR_ERR_UNSUPPORTED, "F33"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,800]}}", 8, FR_ERR_PARSE, "'x'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,8],\"data_offsets\":[0,8]}}", 8, FR_ERR_PARSE,
         "'x'"}, /* byte size overflows */
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, FR_ERR_PARSE, "'x'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, FR_ERR_PARSE, "'x'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1}}", 8, FR_ERR_PARSE, "'x'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, FR_ERR_PARSE, "'x'"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FR_ERR_PARSE, "x"}, /* duplicate */
        {"{\"__metadata__\":{\"a\":1},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         FR_ERR_PARSE, "__metadata__"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, FR_ERR_PARSE, NULL}, /* bad JSON */
        {"[1,2]", 0, FR_ERR_PARSE, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_hdr(p, cases[i].hdr, cases[i].data);
        expect_refused(p, cases[i].st, cases[i].name, cases[i].hdr);
    }
}

/* Zero-size fp8 weights whose other dim is huge (found by tests/fuzz/fuzz_safetensors.c): the
 * block grid of [INT64_MAX, 0] is computed without overflow, and [2^40, 0] reads at once rather
 * than walking 2^40 empty rows; a grid that does not match is still refused. */
static void test_fp8_zero_size(void)
{
    char dir[512], p[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/z.safetensors", dir);
    static const struct {
        const char *hdr;
        fr_status want;
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]},"
         "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[72057594037927936,0],\"data_offsets\":[0,0]}}",
         FR_OK},
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1099511627776,0],\"data_offsets\":[0,0]},"
         "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[8589934592,0],\"data_offsets\":[0,0]}}",
         FR_OK},
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]},"
         "\"w_scale_inv\":{\"dtype\":\"F32\",\"shape\":[72057594037927935,0],\"data_offsets\":[0,0]}}",
         FR_ERR_SHAPE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_hdr(p, cases[i].hdr, 0);
        fr_st_ckpt *c;
        FR_ASSERT_OK(fr_st_ckpt_open(p, &c));
        int k = fr_st_ckpt_find(c, "w");
        CU_ASSERT_FATAL(k >= 0);
        CU_ASSERT_EQUAL(c->e[k].t->numel, 0);
        float sink[1] = {42.0f};
        fr_status st = fr_st_ckpt_read_f32(c, k, sink);
        if (st != cases[i].want) fprintf(stderr, "\n  case %zu: %d %s\n", i, (int)st, fr_last_error());
        CU_ASSERT_EQUAL(st, cases[i].want);
        CU_ASSERT_EQUAL(sink[0], 42.0f); /* nothing written for no element */
        if (st != FR_OK) CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "w_scale_inv"));
        fr_st_ckpt_close(c);
    }
}

/* ---- shards ---- */

static void test_sharded(void)
{
    fr_rng r = fr_test_rng("safetensors_sharded");
    char dir[512], p[700];
    fr_test_tmpdir(dir, sizeof dir);
    enum { NT = 7, NE = 1000 };
    static float v[NT][NE];
    char names[NT][32];
    int64_t dims[2] = {10, 100};
    fr_st_out o[NT];
    for (int i = 0; i < NT; i++) {
        fr_rng_fill(&r, v[i], NE, -1, 1);
        snprintf(names[i], sizeof names[i], "layer.%d.w", i);
        o[i] = (fr_st_out){names[i], FR_F32, 2, dims, v[i]};
    }
    /* 4000 bytes each, 9000 per shard: pairs, the last alone; a stale single file goes */
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FR_ASSERT_OK(fr_st_ckpt_write(dir, o, 1, 0));
    CU_ASSERT_EQUAL(access(p, F_OK), 0);
    FR_ASSERT_OK(fr_st_ckpt_write(dir, o, NT, 9000));
    CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/model-00004-of-00004.safetensors", dir);
    CU_ASSERT_EQUAL(access(p, F_OK), 0);
    fr_st_ckpt *c;
    FR_ASSERT_OK(fr_st_ckpt_open(dir, &c));
    CU_ASSERT_EQUAL(c->n_files, 4);
    CU_ASSERT_EQUAL(c->n, NT);
    float got[NE];
    for (int i = 0; i < NT; i++) {
        int k = fr_st_ckpt_find(c, names[i]);
        CU_ASSERT_FATAL(k >= 0);
        CU_ASSERT_EQUAL(c->e[k].file, c->n_files ? k / 2 : 0);
        FR_ASSERT_OK(fr_st_ckpt_read_f32(c, k, got));
        CU_ASSERT(memcmp(got, v[i], sizeof got) == 0);
    }
    fr_st_ckpt_close(c);
    /* the index file itself opens too */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FR_ASSERT_OK(fr_st_ckpt_open(p, &c));
    CU_ASSERT_EQUAL(c->n, NT);
    fr_st_ckpt_close(c);
    /* hostile indexes */
    static const struct {
        const char *json;
        const char *needle;
    } bad[] = {
        {"{\"weight_map\":{\"layer.0.w\":\"../model-00001-of-00004.safetensors\"}}", "../"},
        {"{\"weight_map\":{\"layer.0.w\":\"/etc/passwd\"}}", "/etc/passwd"},
        {"{\"weight_map\":{\"layer.9.w\":\"model-00001-of-00004.safetensors\"}}", "layer.9.w"},
        {"{\"weight_map\":{\"layer.0.w\":\"model-00001-of-00004.safetensors\"}}", "layer.1.w"}, /* unlisted */
        {"{\"weight_map\":{\"layer.0.w\":\"model-00002-of-00004.safetensors\"}}", "layer.0.w"},
        {"{\"weight_map\":[]}", "weight_map"},
        {"{\"weight_map\":{\"layer.0.w\":3}}", "layer.0.w"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(p, "wb");
        fputs(bad[i].json, f);
        fclose(f);
        c = NULL;
        fr_status st = fr_st_ckpt_open(p, &c);
        if (st == FR_OK || !strstr(fr_last_error(), bad[i].needle))
            fprintf(stderr, "\n  index %s: %d %s\n", bad[i].json, (int)st, fr_last_error());
        CU_ASSERT_NOT_EQUAL(st, FR_OK);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), bad[i].needle));
        CU_ASSERT_PTR_NULL(c);
    }
    /* a folder with neither file */
    fr_test_tmpdir(dir, sizeof dir);
    CU_ASSERT_EQUAL(fr_st_ckpt_open(dir, &c), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), dir));
}

static void test_write_errors(void)
{
    char dir[512], p[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/w.safetensors", dir);
    float x[2] = {1, 2};
    int64_t d = 2;
    fr_st_out o[] = {{"a", FR_F32, 1, &d, x}, {"a", FR_F32, 1, &d, x}};
    CU_ASSERT_EQUAL(fr_st_write(p, o, 2, NULL, 0), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'a'"));
    fr_st_out s = {"s", FR_STRING, 1, &d, x};
    CU_ASSERT_EQUAL(fr_st_write(p, &s, 1, NULL, 0), FR_ERR_UNSUPPORTED);
    CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0); /* nothing left behind */
}

static CU_TestInfo tests[] = {
    {"fixture_round_trip", test_fixture_round_trip},
    {"dtype_conversions", test_dtype_conversions},
    {"fp8_block_scales", test_fp8_block_scales},
    {"hostile_headers", test_hostile_headers},
    {"fp8_zero_size", test_fp8_zero_size},
    {"sharded", test_sharded},
    {"write_errors", test_write_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"safetensors", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
