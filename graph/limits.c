/* Budgets against hostile sizes (see limits.h). */
#include "graph/limits.h"

#include <stdio.h>
#include <stdlib.h>

#include "graph/env.h"

static const struct {
    fr_env env;
    uint64_t dflt; /* 0: none, or one that depends on the input */
} k_limits[FR_LIMIT_COUNT] = {
    [FR_LIMIT_TENSOR_BYTES] = {FR_ENV_MAX_TENSOR_BYTES, (uint64_t)256 << 30},
    [FR_LIMIT_DECODE_BYTES] = {FR_ENV_MAX_DECODE_BYTES, 0},
    [FR_LIMIT_HEADER_BYTES] = {FR_ENV_MAX_HEADER_BYTES, FR_LIMIT_HEADER_DEFAULT},
    [FR_LIMIT_HOST_MEMORY] = {FR_ENV_MEMORY_LIMIT, 0},
};

const char *fr_limit_env(fr_limit which)
{
    return (unsigned)which < FR_LIMIT_COUNT ? fr_env_name(k_limits[which].env) : "(unknown limit)";
}

/* "123", "64K", "1.5G": a positive size; 0 when it is not one. */
static uint64_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s) return 0;
    double mul = 1;
    switch (*end) {
    case 'K': case 'k': mul = 1024.0; end++; break;
    case 'M': case 'm': mul = 1024.0 * 1024; end++; break;
    case 'G': case 'g': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': case 't': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') end++;
    v *= mul;
    if (*end || !(v >= 1) || v >= 18446744073709551616.0) return 0; /* also NaN */
    return (uint64_t)v;
}

fr_status fr_limit_get(fr_limit which, uint64_t *value, int *is_set)
{
    if ((unsigned)which >= FR_LIMIT_COUNT) return fr_error(FR_ERR_INTERNAL, "unknown limit %d", (int)which);
    if (is_set) *is_set = 0;
    *value = k_limits[which].dflt;
    const char *s = fr_env_get(k_limits[which].env);
    if (!s || !s[0]) return FR_OK;
    uint64_t v = parse_size(s);
    if (!v)
        return fr_error(FR_ERR_INVALID_ARG,
                        "environment variable %s='%.40s' is not a size (a positive number of bytes, or with K, M, G or "
                        "T)", fr_env_name(k_limits[which].env), s);
    *value = v;
    if (is_set) *is_set = 1;
    return FR_OK;
}

const char *fr_bytes_text(uint64_t n, char *buf, size_t len)
{
    static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}
