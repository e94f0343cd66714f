/* Open-addressing string map with FNV-1a hashing and linear probing. */
#include "graph/name_map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct fr_name_map {
    const char **keys;
    int *vals;
    size_t cap, count; /* cap is a power of two */
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

fr_status fr_name_map_new(fr_name_map **out)
{
    fr_name_map *m = fr_calloc(1, sizeof *m, "name map");
    if (!m) return FR_ERR_OOM;
    m->cap = 64;
    m->keys = fr_calloc(m->cap, sizeof *m->keys, "name map");
    m->vals = fr_calloc(m->cap, sizeof *m->vals, "name map");
    if (!m->keys || !m->vals) {
        fr_name_map_free(m);
        return FR_ERR_OOM;
    }
    *out = m;
    return FR_OK;
}

void fr_name_map_free(fr_name_map *m)
{
    if (!m) return;
    free(m->keys);
    free(m->vals);
    free(m);
}

void fr_name_map_clear(fr_name_map *m)
{
    memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->count = 0;
}

static fr_status grow(fr_name_map *m)
{
    size_t ncap = m->cap * 2;
    const char **nk = fr_calloc(ncap, sizeof *nk, "name map");
    int *nv = fr_calloc(ncap, sizeof *nv, "name map");
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return FR_ERR_OOM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = hash_str(m->keys[i]) & (ncap - 1);
        while (nk[j]) j = (j + 1) & (ncap - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    return FR_OK;
}

fr_status fr_name_map_put(fr_name_map *m, const char *key, int value)
{
    if ((m->count + 1) * 2 > m->cap) FR_TRY(grow(m));
    size_t j = hash_str(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0) {
            m->keys[j] = key;
            m->vals[j] = value;
            return FR_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = value;
    m->count++;
    return FR_OK;
}

int fr_name_map_get(const fr_name_map *m, const char *key)
{
    size_t j = hash_str(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0) return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}
