/* graph/safe_io.c's fr_open_beneath: files named by a file's contents follow no symlink, except
 * the Hugging Face hub cache's own link from a snapshot file to its repository's blob. The
 * write rule: file sets refuse outputs that are inputs (any spelling, hard or symbolic link)
 * or each other, and non-regular outputs; the writer leaves the previous file whole and no
 * temporary behind when a write, fsync or rename fails (FP8RUN_TEST_WRITE_FAULT). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/safe_io.h"
#include "tests/harness.h"

static char tmp[512];
static const char *HASH = "0123456789abcdef0123456789abcdef01234567";

static const char *P(const char *rel)
{
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, rel);
    return buf[k];
}

static int put(const char *rel, const char *text)
{
    FILE *f = fopen(P(rel), "wb");
    if (!f) return 1;
    fputs(text, f);
    return fclose(f) != 0;
}

/* Open rel below dir; on success returns the file's first bytes in got. */
static fr_status open_read(const char *dir, const char *rel, char *got, size_t n)
{
    int fd;
    fr_status st = fr_open_beneath(P(dir), rel, "shard", FR_OPEN_SINGLE_LINK, &fd, NULL);
    got[0] = '\0';
    if (st != FR_OK) return st;
    ssize_t r = read(fd, got, n - 1);
    got[r > 0 ? r : 0] = '\0';
    close(fd);
    return FR_OK;
}

static int suite_init(void)
{
    fr_test_tmpdir(tmp, sizeof tmp);
    /* models--org--name/{blobs/HASH, snapshots/rev/{a.bin, sub/b.bin}} as huggingface_hub writes */
    const char *dirs[] = {"hub", "hub/blobs", "hub/snapshots", "hub/snapshots/rev", "hub/snapshots/rev/sub",
                          "plain", "plain/blobs", "plain/other", "plain/other/rev"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (mkdir(P(dirs[i]), 0755) != 0) return 1;
    char blob[64];
    snprintf(blob, sizeof blob, "hub/blobs/%s", HASH);
    int bad = put(blob, "blob-bytes");
    snprintf(blob, sizeof blob, "plain/blobs/%s", HASH);
    bad |= put(blob, "plain-blob") | put("secret.txt", "secret");
    char link[128];
    snprintf(link, sizeof link, "../../blobs/%s", HASH);
    bad |= symlink(link, P("hub/snapshots/rev/a.bin"));
    snprintf(link, sizeof link, "../../../blobs/%s", HASH);
    bad |= symlink(link, P("hub/snapshots/rev/sub/b.bin"));
    snprintf(link, sizeof link, "../../blobs/%s", HASH); /* one "../" short for a file in sub/ */
    bad |= symlink(link, P("hub/snapshots/rev/sub/short.bin"));
    bad |= symlink("../../blobs/not-a-hash", P("hub/snapshots/rev/nohash.bin"));
    bad |= symlink("../../../secret.txt", P("hub/snapshots/rev/secret.bin"));
    bad |= symlink(P("secret.txt"), P("hub/snapshots/rev/abs.bin"));
    snprintf(link, sizeof link, "../../blobs/%s", HASH); /* the hub's link, but no snapshots/ beside blobs/ */
    bad |= symlink(link, P("plain/other/rev/c.bin"));
    return bad != 0;
}

static void test_hub_links_followed(void)
{
    char got[64];
    FR_ASSERT_OK(open_read("hub/snapshots/rev", "a.bin", got, sizeof got));
    CU_ASSERT_STRING_EQUAL(got, "blob-bytes");
    FR_ASSERT_OK(open_read("hub/snapshots/rev", "sub/b.bin", got, sizeof got));
    CU_ASSERT_STRING_EQUAL(got, "blob-bytes");
}

static void test_other_links_refused(void)
{
    char got[64];
    const char *cases[] = {"sub/short.bin", "nohash.bin", "secret.bin", "abs.bin"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        CU_ASSERT_EQUAL(open_read("hub/snapshots/rev", cases[i], got, sizeof got), FR_ERR_IO);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "is a symbolic link"));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), cases[i]));
        CU_ASSERT_STRING_EQUAL(got, "");
    }
    /* the same link outside a hub cache's layout */
    CU_ASSERT_EQUAL(open_read("plain/other/rev", "c.bin", got, sizeof got), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "is a symbolic link"));
    /* and a blob with a second hard link is still refused */
    char blob[128], twin[128];
    snprintf(blob, sizeof blob, "%s", P("hub/blobs/0123456789abcdef0123456789abcdef01234567"));
    snprintf(twin, sizeof twin, "%s", P("twin"));
    CU_ASSERT_EQUAL_FATAL(link(blob, twin), 0);
    CU_ASSERT_EQUAL(open_read("hub/snapshots/rev", "a.bin", got, sizeof got), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "hard links"));
    CU_ASSERT_EQUAL(unlink(twin), 0);
}

static int refused(fr_status st, const char *n1, const char *n2)
{
    int ok = st != FR_OK && strstr(fr_last_error(), n1) && (!n2 || strstr(fr_last_error(), n2));
    if (!ok) printf("\n  expected a refusal naming [%s] [%s]: %s", n1, n2 ? n2 : "", fr_last_error());
    return ok;
}

static void test_file_sets(void)
{
    CU_ASSERT_EQUAL_FATAL(mkdir(P("w"), 0755), 0);
    CU_ASSERT_EQUAL_FATAL(put("w/in.txt", "input") | put("w/other.txt", "x"), 0);
    CU_ASSERT_EQUAL_FATAL(link(P("w/in.txt"), P("w/hard")) | symlink("in.txt", P("w/soft")), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(P("w/fifo"), 0644) | mkdir(P("w/dir"), 0755), 0);
    char spelled[800], as_input[4][800]; /* P()'s buffers are reused: copies */
    snprintf(spelled, sizeof spelled, "%s/./dir/../in.txt", P("w"));
    const char *names[] = {"w/in.txt", NULL, "w/hard", "w/soft"};
    for (int i = 0; i < 4; i++) snprintf(as_input[i], sizeof as_input[i], "%s", names[i] ? P(names[i]) : spelled);
    for (int i = 0; i < 4; i++) {
        fr_file_set s = {0};
        FR_ASSERT_OK(fr_file_set_input(&s, P("w/in.txt"), "text file"));
        FR_ASSERT_OK(fr_file_set_input(&s, P("w/missing.txt"), "text file")); /* its reader says so */
        fr_status st = fr_file_set_output(&s, as_input[i], "token file");
        if (st == FR_OK) printf("\n  %s accepted", as_input[i]);
        CU_ASSERT(refused(st, "would destroy the input", "in.txt"));
        fr_file_set_free(&s);
    }
    /* declared the other way round: the output first */
    fr_file_set s = {0};
    FR_ASSERT_OK(fr_file_set_output(&s, P("w/in.txt"), "token file"));
    CU_ASSERT(refused(fr_file_set_input(&s, P("w/hard"), "text file"), "would be overwritten", "hard"));
    fr_file_set_free(&s);
    /* two outputs naming one file, existing or not, by two spellings */
    snprintf(spelled, sizeof spelled, "%s/dir/../new.bin", P("w"));
    FR_ASSERT_OK(fr_file_set_input(&s, P("w/in.txt"), "text file"));
    FR_ASSERT_OK(fr_file_set_output(&s, P("w/new.bin"), "token file"));
    CU_ASSERT(refused(fr_file_set_output(&s, spelled, "validation file"), "are the same file", "new.bin"));
    FR_ASSERT_OK(fr_file_set_output(&s, P("w/other.txt"), "log"));
    CU_ASSERT(refused(fr_file_set_output(&s, P("w/other.txt"), "svg"), "are the same file", NULL));
    /* what is not a regular file, and a folder that is not there */
    CU_ASSERT(refused(fr_file_set_output(&s, P("w/fifo"), "svg"), "a FIFO", "regular files only"));
    CU_ASSERT(refused(fr_file_set_output(&s, P("w/dir"), "svg"), "a folder", NULL));
    CU_ASSERT(refused(fr_file_set_output(&s, "/dev/null", "svg"), "a device", NULL));
    CU_ASSERT(refused(fr_file_set_output(&s, P("w/nowhere/x"), "svg"), "does not exist", NULL));
    CU_ASSERT(refused(fr_file_set_output(&s, "", "svg"), "empty", NULL));
    fr_file_set_free(&s);
}

static void test_read_rule(void)
{
    char *d = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(put("r.txt", "twelve bytes"), 0);
    FR_ASSERT_OK(fr_read_regular(P("r.txt"), "log", 0, 12, &d, &n));
    CU_ASSERT_EQUAL(n, 12);
    CU_ASSERT_STRING_EQUAL(d, "twelve bytes"); /* NUL-terminated */
    free(d);
    CU_ASSERT(refused(fr_read_regular(P("r.txt"), "log", 0, 11, &d, &n), "is 12 bytes, more than the 11", "r.txt"));
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT(refused(fr_read_regular("/dev/zero", "log", 0, 100, &d, &n), "a device", NULL));
    CU_ASSERT_EQUAL_FATAL(mkfifo(P("r.fifo"), 0644), 0);
    CU_ASSERT(refused(fr_read_regular(P("r.fifo"), "log", 0, 100, &d, &n), "a FIFO", NULL)); /* without blocking */
    CU_ASSERT(refused(fr_read_regular(tmp, "log", 0, 100, &d, &n), "a folder", NULL));
}

/* Names in folder `dir` (below tmp) other than `keep`: a temporary left behind. */
static int strays(const char *dir)
{
    DIR *d = opendir(P(dir));
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, ".v.bin.tmp", 10) == 0) n++;
    closedir(d);
    return n;
}

static void test_write_rule(void)
{
    CU_ASSERT_EQUAL_FATAL(mkdir(P("o"), 0755), 0);
    CU_ASSERT_EQUAL_FATAL(put("o/victim", "keep") | put("o/v.bin", "previous"), 0);
    char got[64];
    const char *faults[] = {"ENOSPC", "EIO", "fsync", "rename"};
    for (int i = 0; i < 4; i++) {
        setenv("FP8RUN_TEST_WRITE_FAULT", faults[i], 1);
        CU_ASSERT(refused(fr_atomic_write_file(P("o/v.bin"), "new contents", 12), "v.bin",
                          "the previous file, if any, is kept"));
        unsetenv("FP8RUN_TEST_WRITE_FAULT");
        FILE *f = fopen(P("o/v.bin"), "rb");
        size_t r = f ? fread(got, 1, sizeof got - 1, f) : 0;
        if (f) fclose(f);
        got[r] = 0;
        CU_ASSERT_STRING_EQUAL(got, "previous");
        CU_ASSERT_EQUAL(strays("o"), 0);
    }
    /* a link at the name is replaced, its target untouched */
    CU_ASSERT_EQUAL_FATAL(unlink(P("o/v.bin")) | symlink("victim", P("o/v.bin")), 0);
    FR_ASSERT_OK(fr_atomic_write_file(P("o/v.bin"), "new", 3));
    struct stat sb;
    CU_ASSERT(lstat(P("o/v.bin"), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 3);
    CU_ASSERT(stat(P("o/victim"), &sb) == 0 && sb.st_size == 4);
    /* a FIFO at the name is not replaced */
    CU_ASSERT_EQUAL_FATAL(mkfifo(P("o/f"), 0644), 0);
    CU_ASSERT(refused(fr_atomic_write_file(P("o/f"), "x", 1), "a FIFO", NULL));
    CU_ASSERT(lstat(P("o/f"), &sb) == 0 && S_ISFIFO(sb.st_mode));
}

static CU_TestInfo tests[] = {
    {"the hub cache's snapshot -> blob links are followed", test_hub_links_followed},
    {"every other symlink is refused, naming it", test_other_links_refused},
    {"file sets: outputs are never inputs nor each other", test_file_sets},
    {"the read rule: regular files of a stated size", test_read_rule},
    {"the write rule: faults keep the previous file, links are replaced", test_write_rule},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"safe_io", suite_init, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
