/* libFuzzer: safetensors checkpoints as `train --init-from` opens and reads them
 * (fp8run_safetensors_open and the loads are thin layers over fr_st_ckpt_*, used here directly
 * so the target links the readers only). An input starting with '{' is a sharded set: the
 * index JSON, then up to MAX_SHARDS shard files, each after the separator line SEP, written
 * as model.safetensors.index.json and s1.safetensors, s2.safetensors, ... in one folder; any
 * other input is one model.safetensors in another folder. The folder is opened, then every
 * entry is read as float32 as a load does (fp8 weights with their block scales). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fuzz/fuzz_util.h"
#include "runtime/io/safetensors.h"

#define SEP "\n#shard#\n"
#define MAX_SHARDS 4

static void mkdirs(void)
{
    char d[300];
    snprintf(d, sizeof d, "%s/one", fuzz_dir());
    mkdir(d, 0755);
    snprintf(d, sizeof d, "%s/set", fuzz_dir());
    mkdir(d, 0755);
}

static const uint8_t *find_sep(const uint8_t *p, const uint8_t *end)
{
    size_t n = sizeof SEP - 1;
    for (; p + n <= end; p++)
        if (memcmp(p, SEP, n) == 0) return p;
    return NULL;
}

/* The sharded set's files; the folder path, or NULL. */
static const char *write_set(const uint8_t *data, size_t size)
{
    static char dir[300];
    const uint8_t *p = data, *end = data + size;
    char name[64];
    int k = 0;
    for (; k <= MAX_SHARDS; k++) {
        const uint8_t *s = find_sep(p, end);
        const uint8_t *stop = s && k < MAX_SHARDS ? s : end;
        if (k == 0)
            snprintf(name, sizeof name, "set/model.safetensors.index.json");
        else
            snprintf(name, sizeof name, "set/s%d.safetensors", k);
        if (!fuzz_write(name, p, (size_t)(stop - p))) return NULL;
        if (stop == end) break;
        p = stop + sizeof SEP - 1;
    }
    /* shards of an earlier input must not answer for this one */
    for (int j = k + 1; j <= MAX_SHARDS; j++) {
        char path[400];
        snprintf(path, sizeof path, "%s/set/s%d.safetensors", fuzz_dir(), j);
        unlink(path);
    }
    snprintf(dir, sizeof dir, "%s/set", fuzz_dir());
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (!fuzz_dir()) return 0;
        mkdirs();
        ready = 1;
    }
    const char *path;
    static char one[300];
    if (size && data[0] == '{') {
        path = write_set(data, size);
    } else {
        snprintf(one, sizeof one, "%s/one", fuzz_dir());
        path = fuzz_write("one/model.safetensors", data, size) ? one : NULL;
    }
    fr_st_ckpt *c;
    if (!path || fr_st_ckpt_open(path, &c) != FR_OK) return 0;
    for (int i = 0; i < c->n; i++) {
        const fr_st_tensor *t = c->e[i].t;
        (void)fr_st_ckpt_is_aux(c, i);
        (void)fr_st_meta(c->files[c->e[i].file], "format");
        if (fr_st_ckpt_find(c, c->e[i].name) != i) __builtin_trap(); /* the entry table is sorted */
        /* numel <= the file's bytes: every element takes at least one */
        float *dst = malloc(((size_t)t->numel + 1) * sizeof *dst);
        if (!dst) continue;
        fr_ignore_status(fr_st_ckpt_read_f32(c, i, dst)); /* refused or read: only no crash counts */
        free(dst);
    }
    fr_st_ckpt_close(c);
    return 0;
}
