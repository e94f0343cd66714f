/* graph/safe_io.c's fr_open_beneath: files named by a file's contents follow no symlink, except
 * the Hugging Face hub cache's own link from a snapshot file to its repository's blob. */
#include <fcntl.h>
#include <stdio.h>
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

static CU_TestInfo tests[] = {
    {"the hub cache's snapshot -> blob links are followed", test_hub_links_followed},
    {"every other symlink is refused, naming it", test_other_links_refused},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"safe_io", suite_init, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
