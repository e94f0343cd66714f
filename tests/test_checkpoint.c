/* Checkpoint container: round trip, verification of truncated/corrupted files, atomicity. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/harness.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/crc32c.h"

static char dir[512];

static int setup(void)
{
    fr_test_tmpdir(dir, sizeof dir);
    return dir[0] ? 0 : 1;
}

/* Write a checkpoint with n random tensors; returns the data in bufs (caller frees). */
static void write_ckpt(const char *path, fr_rng *r, int n, float **bufs, int64_t *sizes)
{
    fr_ckpt_writer *w;
    FR_ASSERT_OK(fr_ckpt_writer_open(path, &w));
    for (int i = 0; i < n; i++) {
        int64_t dims[2] = {1 + (int64_t)(fr_rng_uniform(r) * 50), 1 + (int64_t)(fr_rng_uniform(r) * 9)};
        sizes[i] = dims[0] * dims[1];
        bufs[i] = malloc((size_t)sizes[i] * sizeof(float));
        fr_rng_fill(r, bufs[i], sizes[i], -3, 3);
        char nm[32];
        snprintf(nm, sizeof nm, "layer%d.weight", i);
        FR_ASSERT_OK(fr_ckpt_write_tensor(w, nm, i % 2 ? "adam_m" : "param", FR_F32, 2, dims, bufs[i]));
    }
    int64_t step = 1234;
    FR_ASSERT_OK(fr_ckpt_write_entry(w, "step", &step, sizeof step));
    FR_ASSERT_OK(fr_ckpt_writer_commit(w));
}

static void test_round_trip(void)
{
    fr_rng r = fr_test_rng("ckpt_rt");
    char path[600];
    snprintf(path, sizeof path, "%s/a.ckpt", dir);
    float *bufs[5];
    int64_t sizes[5];
    write_ckpt(path, &r, 5, bufs, sizes);
    fr_ckpt *c;
    FR_ASSERT_OK(fr_ckpt_open(path, &c));
    CU_ASSERT_EQUAL(fr_ckpt_tensor_count(c), 5);
    for (int i = 0; i < 5; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "layer%d.weight", i);
        const fr_ckpt_tensor *t = fr_ckpt_find(c, nm, i % 2 ? "adam_m" : "param");
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(t->nbytes, (size_t)sizes[i] * 4);
        CU_ASSERT_EQUAL(memcmp(t->data, bufs[i], t->nbytes), 0);
        CU_ASSERT_EQUAL(((uintptr_t)t->data) % 64, 0);
        free(bufs[i]);
    }
    CU_ASSERT_PTR_NULL(fr_ckpt_find(c, "layer0.weight", "adam_m"));
    const void *v;
    size_t len;
    FR_ASSERT_OK(fr_ckpt_entry(c, "step", &v, &len));
    CU_ASSERT_EQUAL(len, 8);
    CU_ASSERT_EQUAL(*(const int64_t *)v, 1234);
    CU_ASSERT_EQUAL(fr_ckpt_entry(c, "nope", &v, &len), FR_ERR_PARSE);
    fr_ckpt_close(c);
}

static void corrupt_and_expect(const char *path, long at, int truncate_to, const char *needle)
{
    struct stat sb;
    stat(path, &sb);
    if (truncate_to) {
        CU_ASSERT_EQUAL(truncate(path, at), 0);
    } else {
        int fd = open(path, O_RDWR);
        unsigned char b;
        CU_ASSERT_EQUAL(pread(fd, &b, 1, at), 1);
        b ^= 0x10;
        CU_ASSERT_EQUAL(pwrite(fd, &b, 1, at), 1);
        close(fd);
    }
    fr_ckpt *c;
    CU_ASSERT_EQUAL(fr_ckpt_open(path, &c), FR_ERR_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), needle));
}

static void test_corruption(void)
{
    fr_rng r = fr_test_rng("ckpt_bad");
    char path[600];
    float *bufs[3];
    int64_t sizes[3];
    snprintf(path, sizeof path, "%s/b.ckpt", dir);
    for (int k = 0; k < 3; k++) {
        write_ckpt(path, &r, 3, bufs, sizes);
        for (int i = 0; i < 3; i++) free(bufs[i]);
        struct stat sb;
        stat(path, &sb);
        long at = 16 + (long)(fr_rng_uniform(&r) * (double)(sb.st_size - 48));
        if (k == 0) corrupt_and_expect(path, at, 0, "checksum"); /* one flipped bit anywhere */
        if (k == 1) corrupt_and_expect(path, at, 1, "truncated"); /* cut short */
        if (k == 2) corrupt_and_expect(path, 10, 1, "truncated");
    }
    fr_ckpt *c;
    CU_ASSERT_EQUAL(fr_ckpt_open("/nonexistent/x.ckpt", &c), FR_ERR_IO);
}

/* A writer killed mid-save leaves the previous checkpoint intact and loadable */
static void test_atomic(void)
{
    fr_rng r = fr_test_rng("ckpt_atomic");
    char path[600];
    float *bufs[2];
    int64_t sizes[2];
    snprintf(path, sizeof path, "%s/c.ckpt", dir);
    write_ckpt(path, &r, 2, bufs, sizes);
    pid_t pid = fork();
    if (pid == 0) {
        fr_ckpt_writer *w;
        if (fr_ckpt_writer_open(path, &w) != FR_OK) _exit(3);
        float junk[1024] = {0};
        int64_t d[1] = {1024};
        if (fr_ckpt_write_tensor(w, "x", "param", FR_F32, 1, d, junk) != FR_OK) _exit(5);
        raise(SIGKILL); /* dies before commit */
        _exit(4);
    }
    int status;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFSIGNALED(status));
    fr_ckpt *c;
    FR_ASSERT_OK(fr_ckpt_open(path, &c));
    const fr_ckpt_tensor *t = fr_ckpt_find(c, "layer0.weight", "param");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(memcmp(t->data, bufs[0], t->nbytes), 0);
    fr_ckpt_close(c);
    /* abort leaves the destination as it was */
    fr_ckpt_writer *w;
    FR_ASSERT_OK(fr_ckpt_writer_open(path, &w));
    fr_ckpt_writer_abort(w);
    FR_ASSERT_OK(fr_ckpt_open(path, &c));
    fr_ckpt_close(c);
    free(bufs[0]);
    free(bufs[1]);
}

static void test_crc32c_vectors(void)
{
    /* RFC 3720 test vectors */
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    CU_ASSERT_EQUAL(fr_crc32c(0, zeros, 32), 0x8A9136AAu);
    CU_ASSERT_EQUAL(fr_crc32c(0, ones, 32), 0x62A8AB43u);
    CU_ASSERT_EQUAL(fr_crc32c(0, inc, 32), 0x46DD794Eu);
    CU_ASSERT_EQUAL(fr_crc32c(0, "123456789", 9), 0xE3069283u);
    /* streaming in pieces equals one pass */
    CU_ASSERT_EQUAL(fr_crc32c(fr_crc32c(0, inc, 13), inc + 13, 19), 0x46DD794Eu);
}

static CU_TestInfo tests[] = {
    {"round_trip", test_round_trip},
    {"corruption", test_corruption},
    {"atomic", test_atomic},
    {"crc32c_vectors", test_crc32c_vectors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"checkpoint", setup, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
