/* Helpers shared by the ONNX import/export tests (see onnx_test_util.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "onnx_test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static void **kept;
static int n_kept, cap_kept;

void *keep(void *p)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    if (n_kept == cap_kept) {
        cap_kept = cap_kept ? cap_kept * 2 : 256;
        kept = realloc(kept, (size_t)cap_kept * sizeof *kept);
        CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
    }
    kept[n_kept++] = p;
    return p;
}

void free_kept(void) /* also releases the arena itself */
{
    for (int i = 0; i < n_kept; i++) free(kept[i]);
    free(kept);
    kept = NULL;
    n_kept = cap_kept = 0;
}

char *kstr(const char *s) { return keep(strdup(s)); }

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void rm_rf(const char *dir)
{
    if (dir && dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void write_bytes(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(d, 1, n, f), n);
    fclose(f);
}
