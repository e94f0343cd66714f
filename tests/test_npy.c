/* .npy I/O: round trips of every dtype (random shapes and data, zero-sized and scalar arrays,
 * through memory and through files), byte-exact headers against what NumPy writes, v2/v3
 * headers, and every kind of malformed or unsupported file giving the right status and a
 * message naming the file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "runtime/io/npy.h"

static const fr_dtype all_dtypes[] = {FR_F32, FR_F64, FR_F16, FR_I64, FR_I32, FR_I16,
                                      FR_I8,  FR_U64, FR_U32, FR_U16, FR_U8,  FR_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof all_dtypes[0])

static fr_tensor *random_tensor(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t;
    if (fr_tensor_new(dt, rank, dims, "random", &t) != FR_OK) return NULL;
    unsigned char *b = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        b[i] = dt == FR_BOOL ? (unsigned char)(fr_rng_uniform(r) < 0.5) : (unsigned char)(fr_rng_uniform(r) * 256);
    return t;
}

static int same_tensor(const fr_tensor *a, const fr_tensor *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes) return 0;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return 0;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

static void test_round_trip_all_dtypes(void)
{
    fr_rng r = fr_test_rng("npy_round_trip");
    char dir[512], path[600];
    fr_test_tmpdir(dir, sizeof dir);
    CU_ASSERT_FATAL(dir[0] != '\0');
    for (int k = 0; k < N_DTYPES; k++) {
        for (int trial = 0; trial < 4; trial++) {
            int64_t dims[FR_MAX_RANK];
            int rank = trial == 0 ? 0 : 1 + (int)(fr_rng_uniform(&r) * 4);
            for (int d = 0; d < rank; d++) dims[d] = 1 + (int64_t)(fr_rng_uniform(&r) * 5);
            if (trial == 3) dims[rank - 1] = 0; /* a zero-sized array */
            fr_tensor *t = random_tensor(&r, all_dtypes[k], rank, dims), *back = NULL;
            CU_ASSERT_PTR_NOT_NULL_FATAL(t);
            void *buf;
            size_t len;
            FR_ASSERT_OK(fr_npy_save_buffer(t, &buf, &len));
            CU_ASSERT_EQUAL(((unsigned char *)buf)[8] + 10 + 0u, len - t->nbytes); /* v1 length */
            CU_ASSERT_EQUAL((len - t->nbytes) % 64, 0);
            FR_ASSERT_OK(fr_npy_load_buffer(buf, len, "buf", &back));
            CU_ASSERT(same_tensor(t, back));
            fr_tensor_free(back);
            free(buf);
            snprintf(path, sizeof path, "%s/%s_%d.npy", dir, fr_dtype_name(all_dtypes[k]), trial);
            FR_ASSERT_OK(fr_npy_save(path, t));
            FR_ASSERT_OK(fr_npy_load(path, &back));
            CU_ASSERT(same_tensor(t, back));
            if (!same_tensor(t, back)) fprintf(stderr, "\n  round trip failed for %s\n", path);
            fr_tensor_free(back);
            /* saving again replaces the file */
            FR_ASSERT_OK(fr_npy_save(path, t));
            unlink(path);
            fr_tensor_free(t);
        }
    }
    rmdir(dir);
}

/* Header bytes exactly as NumPy 1.x/2.x np.save writes them. */
static void test_header_matches_numpy(void)
{
    static const struct {
        fr_dtype dt;
        int rank;
        int64_t dims[3];
        const char *text;
    } cases[] = {
        {FR_F32, 2, {2, 3}, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"},
        {FR_I64, 1, {5}, "{'descr': '<i8', 'fortran_order': False, 'shape': (5,), }"},
        {FR_F64, 0, {0}, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }"},
        {FR_BOOL, 3, {2, 0, 3}, "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 0, 3), }"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_tensor *t;
        FR_ASSERT_OK(fr_tensor_new(cases[c].dt, cases[c].rank, cases[c].dims, "t", &t));
        void *buf;
        size_t len;
        FR_ASSERT_OK(fr_npy_save_buffer(t, &buf, &len));
        const unsigned char *b = buf;
        CU_ASSERT_EQUAL(len, 128 + t->nbytes);
        CU_ASSERT(memcmp(b, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
        size_t tl = strlen(cases[c].text);
        CU_ASSERT(memcmp(b + 10, cases[c].text, tl) == 0);
        int pad_ok = 1;
        for (size_t i = 10 + tl; i < 127; i++) pad_ok &= b[i] == ' ';
        CU_ASSERT(pad_ok);
        CU_ASSERT_EQUAL(b[127], '\n');
        free(buf);
        fr_tensor_free(t);
    }
}

/* A .npy image with the given version and header text, then `data_len` bytes of data. */
static unsigned char *make_npy(int major, const char *text, size_t data_len, size_t *len)
{
    size_t tl = strlen(text), prefix = major == 1 ? 10 : 12;
    unsigned char *b = calloc(1, prefix + tl + data_len + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    b[8] = (unsigned char)(tl & 0xff);
    b[9] = (unsigned char)(tl >> 8);
    memcpy(b + prefix, text, tl);
    for (size_t i = 0; i < data_len; i++) b[prefix + tl + i] = (unsigned char)(i % 2);
    *len = prefix + tl + data_len;
    return b;
}

static void test_v2_v3_and_variants(void)
{
    size_t len;
    fr_tensor *t;
    for (int major = 1; major <= 3; major++) {
        unsigned char *b = make_npy(major, "{'descr': '<i2', 'fortran_order': False, 'shape': (3, 2), }\n", 12, &len);
        FR_ASSERT_OK(fr_npy_load_buffer(b, len, "v", &t));
        CU_ASSERT_EQUAL(t->dtype, FR_I16);
        CU_ASSERT_EQUAL(t->rank, 2);
        CU_ASSERT_EQUAL(t->dims[0], 3);
        CU_ASSERT_EQUAL(((int16_t *)t->data)[1], 256); /* bytes 0,1 little-endian */
        fr_tensor_free(t);
        free(b);
    }
    /* double quotes, no spaces, other key order, Python 2 longs, '<u1' for '|u1' */
    unsigned char *b = make_npy(1, "{\"shape\":(2L,2L),\"fortran_order\":False,\"descr\":\"<u1\"}", 4, &len);
    FR_ASSERT_OK(fr_npy_load_buffer(b, len, "v", &t));
    CU_ASSERT_EQUAL(t->dtype, FR_U8);
    CU_ASSERT_EQUAL(t->dims[1], 2);
    fr_tensor_free(t);
    free(b);
    /* Fortran order of a 1-D array is the same bytes */
    b = make_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, &len);
    FR_ASSERT_OK(fr_npy_load_buffer(b, len, "v", &t));
    CU_ASSERT_EQUAL(t->dims[0], 2);
    fr_tensor_free(t);
    free(b);
}

static void expect_error(const char *text, size_t data_len, int major, fr_status want,
                         const char *needle)
{
    size_t len;
    unsigned char *b = make_npy(major, text, data_len, &len);
    fr_tensor *t = NULL;
    fr_status st = fr_npy_load_buffer(b, len, "case.npy", &t);
    if (st != want || !strstr(fr_last_error(), "case.npy") || (needle && !strstr(fr_last_error(), needle)))
        fprintf(stderr, "\n  header %s -> %d '%s' (want %d, '%s')\n", text, (int)st, fr_last_error(),
                (int)want, needle ? needle : "");
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "case.npy"));
    if (needle) CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), needle));
    CU_ASSERT_PTR_NULL(t);
    fr_tensor_free(t);
    free(b);
}

static void test_malformed_headers(void)
{
    const fr_status P = FR_ERR_PARSE, U = FR_ERR_UNSUPPORTED;
    expect_error("'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 1, P, "'{'");
    expect_error("{'descr': '<f4', 'shape': (2,), }", 8, 1, P, "required");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, 1, P, "'x'");
    expect_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, 1, P, "repeated");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 8, 1, P, "tuple");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, 1, P, "non-negative");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", 8, 1, P, "trailing comma");
    expect_error("{'descr': '<f4', 'fortran_order': false, 'shape': (2,), }", 8, 1, P, "True or False");
    expect_error("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", 8, 1, P, NULL);
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", 8, 1, P, "after");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8, 1, P, NULL);
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8, 1, P, "overflows");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 64), }", 8, 1, P, "too large");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8, 1, P, "truncated");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 8, 1, P, "after");
    /* unsupported but well-formed */
    expect_error("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, 1, U, "big-endian");
    expect_error("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, 1, U, "<c8");
    expect_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1), }", 8, 1, U, "Fortran");
    expect_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, 1, U, "structured");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4, 1, U, "dimensions");
    expect_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 4, U, "version");

    /* prefix problems */
    fr_tensor *t = NULL;
    CU_ASSERT_EQUAL(fr_npy_load_buffer("\x93NUMPX\x01\x00\x00\x00", 10, "case.npy", &t), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "magic"));
    CU_ASSERT_EQUAL(fr_npy_load_buffer("\x93NUMPY\x01", 7, "case.npy", &t), FR_ERR_PARSE);
    CU_ASSERT_EQUAL(fr_npy_load_buffer("\x93NUMPY\x01\x00\xff\x00{", 11, "case.npy", &t), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "truncated .npy header"));
    CU_ASSERT_PTR_NULL(t);
}

static void test_bool_values_checked(void)
{
    size_t len;
    unsigned char *b = make_npy(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", 3, &len);
    b[len - 1] = 7;
    fr_tensor *t = NULL;
    CU_ASSERT_EQUAL(fr_npy_load_buffer(b, len, "case.npy", &t), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "byte value 7 at element 2"));
    free(b);
}

static void test_file_errors(void)
{
    char dir[512], path[600];
    fr_test_tmpdir(dir, sizeof dir);
    CU_ASSERT_FATAL(dir[0] != '\0');
    fr_tensor *t = NULL, *back = NULL;
    int64_t dims[2] = {4, 5};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, dims, "t", &t));
    snprintf(path, sizeof path, "%s/trunc.npy", dir);
    FR_ASSERT_OK(fr_npy_save(path, t));
    CU_ASSERT_EQUAL(truncate(path, 128 + 40), 0); /* half the data */
    CU_ASSERT_EQUAL(fr_npy_load(path, &back), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "truncated"));
    CU_ASSERT_EQUAL(truncate(path, 50), 0); /* inside the header */
    CU_ASSERT_EQUAL(fr_npy_load(path, &back), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    CU_ASSERT_EQUAL(truncate(path, 3), 0);
    CU_ASSERT_EQUAL(fr_npy_load(path, &back), FR_ERR_PARSE);
    CU_ASSERT_PTR_NULL(back);
    unlink(path);
    CU_ASSERT_EQUAL(fr_npy_load(path, &back), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    CU_ASSERT_EQUAL(fr_npy_load(dir, &back), FR_ERR_IO);
    /* no NumPy code for bfloat16: a clear error, never a wrong file */
    fr_tensor *bf;
    FR_ASSERT_OK(fr_tensor_new(FR_BF16, 2, dims, "bf", &bf));
    snprintf(path, sizeof path, "%s/bf.npy", dir);
    CU_ASSERT_EQUAL(fr_npy_save(path, bf), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "bfloat16"));
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    CU_ASSERT_PTR_NULL(fr_npy_descr(FR_F8E4M3));
    snprintf(path, sizeof path, "%s/no/such/dir/x.npy", dir);
    CU_ASSERT_EQUAL(fr_npy_save(path, t), FR_ERR_IO);
    fr_tensor_free(bf);
    fr_tensor_free(t);
    rmdir(dir);
}

static CU_TestInfo npy_tests[] = {
    {"round_trip_all_dtypes", test_round_trip_all_dtypes},
    {"header_matches_numpy", test_header_matches_numpy},
    {"v2_v3_and_variants", test_v2_v3_and_variants},
    {"malformed_headers", test_malformed_headers},
    {"bool_values_checked", test_bool_values_checked},
    {"file_errors", test_file_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"npy", NULL, NULL, NULL, NULL, npy_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
