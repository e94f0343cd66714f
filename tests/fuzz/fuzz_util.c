/* Temporary files for the fuzz targets (see fuzz_util.h). */
#include "tests/fuzz/fuzz_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Called once by libFuzzer. Jansson seeds its hash tables from /dev/urandom unless told: a
 * fixed seed keeps the paths (and so the coverage a seeded `tools/fuzz.sh ci` run follows) the
 * same from run to run. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_object_seed(1);
    return 0;
}

const char *fuzz_dir(void)
{
    static char dir[256];
    if (!dir[0]) {
        /* a fixed folder (tools/fuzz.sh gives each target its own): the readers compare paths,
         * libFuzzer feeds what they compare back into its mutations, so a random name would
         * make a seeded run differ from the last */
        const char *fixed = getenv("FP8RUN_FUZZ_DIR");
        if (fixed && fixed[0]) {
            snprintf(dir, sizeof dir, "%s", fixed);
            if (mkdir(dir, 0700) != 0 && errno != EEXIST) dir[0] = '\0';
            return dir[0] ? dir : NULL;
        }
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/fp8run-fuzz-XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(dir)) {
            dir[0] = '\0';
            return NULL;
        }
    }
    return dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[512];
    const char *d = fuzz_dir();
    if (!d) return NULL;
    snprintf(path, sizeof path, "%s/%s", d, name);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    int ok = fwrite(data, 1, size, f) == size;
    ok &= fclose(f) == 0;
    return ok ? path : NULL;
}
