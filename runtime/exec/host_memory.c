/* Host memory still available to this process (see host_memory.h). */
#include "runtime/exec/host_memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "graph/env.h"
#include "graph/limits.h"

int fr_host_memory_check_off(void)
{
    const char *mc = fr_env_get(FR_ENV_MEMORY_CHECK);
    return mc && strcmp(mc, "0") == 0;
}

static void take(fr_host_memory *m, uint64_t v, const char *source)
{
    if (v < m->available) {
        m->available = v;
        snprintf(m->source, sizeof m->source, "%s", source);
    }
}

/* The value after `key` in a "Key:   123 kB" file, in bytes; 0 when absent. */
static uint64_t kb_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t kl = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            unsigned long long kb = strtoull(line + kl + 1, NULL, 10);
            v = kb > UINT64_MAX / 1024 ? UINT64_MAX : (uint64_t)kb * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* One number from a file ("max": UINT64_MAX); 0 when unreadable. */
static uint64_t file_number(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = "";
    uint64_t v = 0;
    if (fgets(buf, sizeof buf, f)) v = strncmp(buf, "max", 3) == 0 ? UINT64_MAX : strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

/* cgroup v2: the tightest memory.max - memory.current from this process's cgroup up. */
static void cgroup_limit(fr_host_memory *m)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[512], path[700];
    char rel[512] = "";
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(rel, sizeof rel, "%s", line + 3);
            rel[strcspn(rel, "\n")] = '\0';
            break;
        }
    fclose(f);
    if (rel[0] != '/') return;
    for (int depth = 0; depth < 32; depth++) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(rel, "/") == 0 ? "" : rel);
        uint64_t max = file_number(path);
        if (max && max != UINT64_MAX) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", strcmp(rel, "/") == 0 ? "" : rel);
            uint64_t cur = file_number(path);
            take(m, cur < max ? max - cur : 0, "the cgroup's memory.max");
        }
        char *slash = strrchr(rel, '/');
        if (!slash || slash == rel) {
            if (strcmp(rel, "/") == 0) break;
            strcpy(rel, "/");
        } else {
            *slash = '\0';
        }
    }
}

static void rlimits(fr_host_memory *m)
{
    struct rlimit rl;
    long page = sysconf(_SC_PAGESIZE);
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && page > 0) {
        unsigned long long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (f) {
            if (fscanf(f, "%llu", &pages) != 1) pages = 0;
            fclose(f);
        }
        uint64_t used = (uint64_t)pages * (uint64_t)page;
        take(m, (uint64_t)rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0, "RLIMIT_AS (ulimit -v)");
    }
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        uint64_t used = kb_field("/proc/self/status", "VmData");
        take(m, (uint64_t)rl.rlim_cur > used ? (uint64_t)rl.rlim_cur - used : 0, "RLIMIT_DATA (ulimit -d)");
    }
}

fr_status fr_host_memory_available(fr_host_memory *m)
{
    m->available = UINT64_MAX;
    snprintf(m->source, sizeof m->source, "nothing to go by");
    uint64_t avail = kb_field("/proc/meminfo", "MemAvailable");
    if (avail) {
        take(m, avail, "MemAvailable");
    } else {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) take(m, (uint64_t)pages * (uint64_t)page, "free memory");
    }
    cgroup_limit(m);
    rlimits(m);
    uint64_t cap;
    int set;
    FR_TRY(fr_limit_get(FR_LIMIT_HOST_MEMORY, &cap, &set));
    if (set) take(m, cap, "FP8RUN_MEMORY_LIMIT");
    return FR_OK;
}

fr_status fr_host_memory_check_plan(const fr_graph *g, size_t pool_bytes, int n_blocks, size_t input_bytes, int big)
{
    uint64_t need = (uint64_t)pool_bytes + (uint64_t)input_bytes;
    if (need < FR_HOST_CHECK_MIN_BYTES || fr_host_memory_check_off()) return FR_OK;
    fr_host_memory m;
    FR_TRY(fr_host_memory_available(&m));
    if (need <= m.available) return FR_OK;
    uint64_t big_bytes = 0;
    int64_t n;
    if (big >= 0 && fr_shape_numel(g->values[big].rank, g->values[big].dims, "", &n) == FR_OK)
        big_bytes = (uint64_t)n * fr_dtype_size(g->values[big].dtype);
    char t[5][32], shp[160] = "", by[600] = "";
    if (big >= 0) {
        const fr_value *x = &g->values[big];
        fr_shape_str(x->rank, x->dims, shp, sizeof shp);
        if (x->producer >= 0 && x->producer < g->n_nodes)
            snprintf(by, sizeof by, " of node '%.200s' (%.60s)", g->nodes[x->producer].name, g->nodes[x->producer].op_type);
        else
            snprintf(by, sizeof by, " (a graph input)");
    }
    return fr_error(FR_ERR_OOM,
                    "the CPU plan%s%s%s needs %s (computed values %s in %d block(s), inputs %s), and this process may "
                    "take %s more (%s): nothing was allocated. Its largest value is '%.200s' %s %s, %s%s; smaller "
                    "inputs (batch, sequence, --dim values) shrink it. FP8RUN_MEMORY_CHECK=0 skips this check",
                    g->source_path ? " of '" : "", g->source_path ? g->source_path : "", g->source_path ? "'" : "",
                    fr_bytes_text(need, t[0], sizeof t[0]), fr_bytes_text(pool_bytes, t[1], sizeof t[1]), n_blocks,
                    fr_bytes_text(input_bytes, t[2], sizeof t[2]), fr_bytes_text(m.available, t[3], sizeof t[3]),
                    m.source, big >= 0 ? g->values[big].name : "?", big >= 0 ? fr_dtype_name(g->values[big].dtype) : "",
                    shp, fr_bytes_text(big_bytes, t[4], sizeof t[4]), by);
}
