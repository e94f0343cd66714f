/* Fault injection into checkpoint saving: the writer's write(2) and fsync(2) are
 * replaced (runtime/io/checkpoint.h) to fail with ENOSPC or EIO after k bytes, or to write short.
 * A failed save must return FR_ERR_IO naming the file and the cause, leave the checkpoint that
 * was there intact and loadable, and leave no temporary file; short writes must still produce
 * a correct checkpoint. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/harness.h"
#include "runtime/io/checkpoint.h"

static char dir[400], path[600];

enum { NT = 3, NE = 4096 };
static float data[2][NT][NE];

static ssize_t fail_after_left; /* bytes still written before the fault */
static int fail_errno;
static size_t short_max; /* > 0: each write moves at most this many bytes */

static ssize_t faulty_write(int fd, const void *buf, size_t n)
{
    if (short_max && n > short_max) n = short_max;
    if (fail_errno && fail_after_left <= 0) {
        errno = fail_errno;
        return -1;
    }
    if (fail_errno && (ssize_t)n > fail_after_left) n = (size_t)fail_after_left;
    ssize_t k = write(fd, buf, n);
    if (k > 0 && fail_errno) fail_after_left -= k;
    return k;
}

static int fsync_errno;
static int faulty_fsync(int fd)
{
    if (fsync_errno) {
        errno = fsync_errno;
        return -1;
    }
    return fsync(fd);
}

static fr_status save(int which)
{
    fr_ckpt_writer *w;
    FR_TRY(fr_ckpt_writer_open(path, &w));
    for (int t = 0; t < NT; t++) {
        char name[16];
        int64_t n = NE;
        snprintf(name, sizeof name, "t%d", t);
        fr_status st = fr_ckpt_write_tensor(w, name, "param", FR_F32, 1, &n, data[which][t]);
        if (st != FR_OK) {
            fr_ckpt_writer_abort(w);
            return st;
        }
    }
    const char *tag = which ? "second" : "first";
    fr_status st = fr_ckpt_write_entry(w, "tag", tag, strlen(tag));
    if (st != FR_OK) {
        fr_ckpt_writer_abort(w);
        return st;
    }
    return fr_ckpt_writer_commit(w);
}

/* The file at `path` is checkpoint `which`, complete. */
static void expect_is(int which)
{
    fr_ckpt *c;
    FR_ASSERT_OK(fr_ckpt_open(path, &c));
    CU_ASSERT_EQUAL(fr_ckpt_tensor_count(c), NT);
    for (int t = 0; t < NT; t++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", t);
        const fr_ckpt_tensor *ct = fr_ckpt_find(c, name, "param");
        CU_ASSERT_PTR_NOT_NULL_FATAL(ct);
        CU_ASSERT_EQUAL(memcmp(ct->data, data[which][t], sizeof data[which][t]), 0);
    }
    const void *v;
    size_t len;
    FR_ASSERT_OK(fr_ckpt_entry(c, "tag", &v, &len));
    CU_ASSERT_EQUAL(len, strlen(which ? "second" : "first"));
    fr_ckpt_close(c);
}

/* Only the checkpoint itself is in the folder. */
static void expect_no_leftovers(void)
{
    DIR *d = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    struct dirent *e;
    int others = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "c.ckpt")) {
            fprintf(stderr, "\n  left behind: %s\n", e->d_name);
            others++;
        }
    closedir(d);
    CU_ASSERT_EQUAL(others, 0);
}

static int suite_init(void)
{
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/c.ckpt", dir);
    fr_rng r = fr_test_rng("hostile faults");
    for (int w = 0; w < 2; w++)
        for (int t = 0; t < NT; t++) fr_rng_fill(&r, data[w][t], NE, -1, 1);
    return dir[0] ? 0 : 1;
}

static int suite_clean(void)
{
    fr_ckpt_io_write = write;
    fr_ckpt_io_fsync = fsync;
    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}

static void test_write_faults(void)
{
    FR_ASSERT_OK(save(0));
    expect_is(0);
    fr_ckpt_io_write = faulty_write;
    const ssize_t at[] = {0, 1, 16, 100, 4096, 20000, 49000, (ssize_t)sizeof data[0] + 30};
    const int errs[] = {ENOSPC, EIO};
    for (size_t e = 0; e < sizeof errs / sizeof *errs; e++)
        for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
            fail_errno = errs[e];
            fail_after_left = at[i];
            fr_status st = save(1);
            fail_errno = 0;
            CU_ASSERT_EQUAL(st, FR_ERR_IO);
            const char *m = fr_last_error();
            if (!strstr(m, path) || !strstr(m, strerror(errs[e])))
                fprintf(stderr, "\n  fault at %zd: %s\n", at[i], m);
            CU_ASSERT_PTR_NOT_NULL(strstr(m, path));
            CU_ASSERT_PTR_NOT_NULL(strstr(m, strerror(errs[e])));
            expect_is(0);
            expect_no_leftovers();
        }
    fr_ckpt_io_write = write;
}

static void test_fsync_fault(void)
{
    FR_ASSERT_OK(save(0));
    fr_ckpt_io_fsync = faulty_fsync;
    fsync_errno = EIO;
    CU_ASSERT_EQUAL(save(1), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), path));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fsync"));
    fsync_errno = 0;
    fr_ckpt_io_fsync = fsync;
    expect_is(0);
    expect_no_leftovers();
}

/* Short writes (a pipe-like or interrupted device) are continued, not taken for failures. */
static void test_short_writes(void)
{
    FR_ASSERT_OK(save(0));
    fr_ckpt_io_write = faulty_write;
    const size_t sizes[] = {1, 7, 4093};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        short_max = sizes[i];
        FR_ASSERT_OK(save(i % 2 ? 0 : 1));
        short_max = 0;
        expect_is(i % 2 ? 0 : 1);
        expect_no_leftovers();
    }
    fr_ckpt_io_write = write;
}

/* 100 SIGKILLs at random points of a process that saves checkpoints over one another: after
 * each, the file opens and holds one of the two checkpoints whole. The killed writer's
 * temporary files are the only leftovers (the CLI removes them on its next run). */
static void test_kills(void)
{
    fr_rng r = fr_test_rng("hostile kills");
    FR_ASSERT_OK(save(0));
    int loadable = 0, kills = 0;
    const int n = getenv("FR_TEST_SANITIZE") ? 30 : 100;
    for (int k = 0; k < n; k++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0;; i++)
                if (save(i % 2) != FR_OK) _exit(3);
        }
        struct timespec ts = {0, (long)(fr_rng_uniform(&r) * 20e6)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        fr_ckpt *c;
        if (fr_ckpt_open(path, &c) != FR_OK) {
            fprintf(stderr, "\n  after kill %d: %s\n", k, fr_last_error());
            continue;
        }
        const void *v;
        size_t len;
        int which = fr_ckpt_entry(c, "tag", &v, &len) == FR_OK && len == 6;
        fr_ckpt_close(c);
        expect_is(which);
        loadable++;
    }
    CU_ASSERT_EQUAL(kills, n);
    CU_ASSERT_EQUAL(loadable, n);
    fprintf(stderr, "(%d kills, %d loadable) ", kills, loadable);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/c.ckpt.tmp.*", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

static CU_TestInfo tests[] = {
    {"ENOSPC/EIO at any byte: the old checkpoint stays, the error names it", test_write_faults},
    {"fsync failure: the old checkpoint stays", test_fsync_fault},
    {"short writes still make a correct checkpoint", test_short_writes},
    {"100 SIGKILLs while saving: every one leaves a loadable checkpoint", test_kills},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"hostile_faults", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
