/* Public API: the options' table of fp8run_train_config, derived from runtime/train/train_config.def:
 * the defaults, the checks of a config, setting an option from text, and the table the library
 * exports for the CLI and the Python binding. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "graph/option_choices.h"

/* C type of each option type */
#define CT_INT int
#define CT_INT64 int64_t
#define CT_UINT64 uint64_t
#define CT_DOUBLE double
#define CT_STRING const char *
#define CT_CHOICE const char *
#define CT_BOOL int
#define CT_DIM_NAMES const char *const *
#define CT_DIM_VALUES const int64_t *
#define CT_POINTER void *

/* each line's field has the line's type */
#define FR_OPT(f, T, d, lo, hi, ch, fl, mv, cmds, help)                                                \
    _Static_assert(_Generic(((fp8run_train_config *)0)->f, CT_##T: 1, default: 0),                    \
                   "runtime/train/train_config.def: fp8run_train_config." #f " is not of type " #T);
#include "runtime/train/train_config.def"
#undef FR_OPT

/* the choices of each line (an empty list for the others) */
#define FR_OPT(f, T, d, lo, hi, ch, fl, mv, cmds, help) static const char *const ch_##f[] = {FR_CHOICES_##ch NULL};
#include "runtime/train/train_config.def"
#undef FR_OPT

static const fp8run_option_info k_table[] = {
#define FR_OPT(f, T, d, lo, hi, ch, fl, mv, cmds, help)                                                \
    {0, #f, FP8RUN_OPTION_##T, offsetof(fp8run_train_config, f), sizeof(CT_##T), (lo), (hi),          \
     FP8RUN_OPTION_##T == FP8RUN_OPTION_CHOICE ? ch_##f : NULL, fl, mv, cmds, help},
#include "runtime/train/train_config.def"
#undef FR_OPT
};
#define N_OPTIONS ((int)(sizeof k_table / sizeof k_table[0]))

static const char *const k_devices[] = {FR_CHOICES_DEVICE NULL};

void fr_api_config_defaults(fp8run_train_config *c)
{
    memset(c, 0, sizeof *c);
#define FR_OPT(f, T, d, lo, hi, ch, fl, mv, cmds, help) c->f = (d);
#include "runtime/train/train_config.def"
#undef FR_OPT
}

/* ---- reading and writing a field ---- */

static void *field(fp8run_train_config *c, const fp8run_option_info *e) { return (char *)c + e->offset; }
static const void *cfield(const fp8run_train_config *c, const fp8run_option_info *e)
{
    return (const char *)c + e->offset;
}

/* Integer fields as long long (uint64 seeds above INT64_MAX are not range-checked). */
static long long get_int(const fp8run_train_config *c, const fp8run_option_info *e)
{
    int i;
    int64_t l;
    if (e->type == FP8RUN_OPTION_INT || e->type == FP8RUN_OPTION_BOOL) {
        memcpy(&i, cfield(c, e), sizeof i);
        return i;
    }
    memcpy(&l, cfield(c, e), sizeof l);
    return l;
}


/* " in lo..hi", " >= lo" or "" (no bound an integer reaches) */
static const char *int_range(const fp8run_option_info *e, char *buf, size_t len)
{
    if (e->min <= -1e18 && e->max >= 1e18)
        buf[0] = '\0';
    else if (e->max >= 1e18)
        snprintf(buf, len, " >= %lld", (long long)e->min);
    else
        snprintf(buf, len, " in %lld..%lld", (long long)e->min, (long long)e->max);
    return buf;
}

static void choice_list(const char *const *ch, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; ch[i]; i++) {
        strncat(buf, i ? ", " : "", len - strlen(buf) - 1);
        strncat(buf, ch[i], len - strlen(buf) - 1);
    }
}

static int one_of(const char *v, const char *const *choices)
{
    for (int i = 0; v && choices[i]; i++)
        if (strcmp(v, choices[i]) == 0) return i;
    return -1;
}

const char *fr_api_choice(const char *name, const char *value)
{
    const char *const *ch = fp8run_choices(name);
    int k = ch ? one_of(value, ch) : -1;
    return k >= 0 ? ch[k] : NULL;
}

fp8run_status fr_api_config_check(api_err *slot, const char *fn, const fp8run_train_config *c)
{
    char buf[256];
    for (int i = 0; i < N_OPTIONS; i++) {
        const fp8run_option_info *e = &k_table[i];
        if (e->type == FP8RUN_OPTION_CHOICE) {
            const char *v;
            memcpy(&v, cfield(c, e), sizeof v);
            if (one_of(v, e->choices) >= 0) continue;
            choice_list(e->choices, buf, sizeof buf);
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.%s is %s%s%s; use one of %s", fn, e->name,
                                v ? "'" : "", v ? v : "NULL", v ? "'" : "", buf);
        }
        if (e->type == FP8RUN_OPTION_INT || e->type == FP8RUN_OPTION_INT64) {
            long long v = get_int(c, e);
            if ((double)v >= e->min && (double)v <= e->max) continue;
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.%s (%lld) must be an integer%s", fn,
                                e->name, v, int_range(e, buf, sizeof buf));
        }
        if (e->type == FP8RUN_OPTION_DOUBLE) {
            double v;
            memcpy(&v, cfield(c, e), sizeof v);
            if (!(v < e->min || v > e->max)) continue; /* NaN passes: weight_decay's "default" */
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.%s (%g) must be >= %g", fn, e->name, v,
                                e->min);
        }
    }
    return FP8RUN_OK;
}

/* ---- the exported table ---- */

FP8RUN_API int fp8run_train_config_option_count(void) { return N_OPTIONS; }

FP8RUN_API fp8run_status fp8run_train_config_option(int i, fp8run_option_info *info)
{
    size_t use;
    fp8run_status ps = fr_api_check_out(NULL, __func__, "info", info, sizeof *info, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    if (i < 0 || i >= N_OPTIONS)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: option %d is out of range (%d options)", __func__, i,
                            N_OPTIONS);
    size_t size = info->struct_size;
    memcpy(info, &k_table[i], use);
    info->struct_size = size;
    return FP8RUN_OK;
}

FP8RUN_API int fp8run_train_config_find(const char *name)
{
    for (int i = 0; name && i < N_OPTIONS; i++)
        if (strcmp(name, k_table[i].name) == 0 || (k_table[i].flag && strcmp(name, k_table[i].flag) == 0)) return i;
    return -1;
}

FP8RUN_API const char *const *fp8run_choices(const char *name)
{
    if (name && strcmp(name, "device") == 0) return k_devices;
    int i = fp8run_train_config_find(name);
    return i >= 0 ? k_table[i].choices : NULL;
}

/* ---- values as text ---- */

/* fn: the API function (fp8run_train_config_set) */
static fp8run_status bad_value(const char *fn, const char *name, const char *v, const char *what, const char *range)
{
    return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s: '%s' is not %s%s", fn, name, v, what, range);
}

static fp8run_status set_number(const char *fn, fp8run_train_config *c, const fp8run_option_info *e,
                                const char *name, const char *v)
{
    char range[96], *end;
    errno = 0;
    if (e->type == FP8RUN_OPTION_DOUBLE) {
        double x = strtod(v, &end);
        snprintf(range, sizeof range, " >= %g", e->min);
        if (errno || !v[0] || *end || !isfinite(x) || x < e->min || x > e->max)
            return bad_value(fn, name, v, "a number", range);
        memcpy(field(c, e), &x, sizeof x);
        return FP8RUN_OK;
    }
    int_range(e, range, sizeof range);
    if (e->type == FP8RUN_OPTION_UINT64) {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || !v[0] || *end || strchr(v, '-')) return bad_value(fn, name, v, "an integer", range);
        uint64_t u = x;
        memcpy(field(c, e), &u, sizeof u);
        return FP8RUN_OK;
    }
    long long x = strtoll(v, &end, 10);
    if (errno || !v[0] || *end || (double)x < e->min || (double)x > e->max)
        return bad_value(fn, name, v, "an integer", range);
    if (e->type == FP8RUN_OPTION_INT) {
        int i = (int)x;
        memcpy(field(c, e), &i, sizeof i);
    } else {
        int64_t l = x;
        memcpy(field(c, e), &l, sizeof l);
    }
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_train_config_set(fp8run_train_config *cfg, const char *name, const char *value)
{
    int i = fp8run_train_config_find(name);
    if (!cfg || i < 0)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s", __func__,
                            !cfg ? "cfg is NULL" : "no option of that name");
    const fp8run_option_info *e = &k_table[i];
    int by_flag = name[0] == '-';
    if (e->type == FP8RUN_OPTION_BOOL) {
        int d = 0, x;
        fp8run_train_config def;
        fr_api_config_defaults(&def);
        memcpy(&d, cfield(&def, e), sizeof d);
        if (by_flag && value)
            return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s takes no value (got '%s')", __func__, name,
                                value);
        if (by_flag)
            x = !d;
        else if (value && (strcmp(value, "0") == 0 || strcmp(value, "1") == 0))
            x = value[0] == '1';
        else
            return bad_value(__func__, name, value ? value : "(null)", "0 or 1", "");
        memcpy(field(cfg, e), &x, sizeof x);
        return FP8RUN_OK;
    }
    if (e->type == FP8RUN_OPTION_DIM_NAMES || e->type == FP8RUN_OPTION_DIM_VALUES ||
        e->type == FP8RUN_OPTION_POINTER)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s is not set from text", __func__, name);
    if (!value) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s needs a value", __func__, name);
    if (e->type == FP8RUN_OPTION_CHOICE) {
        int k = one_of(value, e->choices);
        char list[256];
        choice_list(e->choices, list, sizeof list);
        if (k < 0) return bad_value(__func__, name, value, "one of ", list);
        memcpy(field(cfg, e), &e->choices[k], sizeof(const char *));
        return FP8RUN_OK;
    }
    if (e->type == FP8RUN_OPTION_STRING) {
        memcpy(field(cfg, e), &value, sizeof value);
        return FP8RUN_OK;
    }
    return set_number(__func__, cfg, e, name, value);
}

FP8RUN_API fp8run_status fp8run_train_config_get(const fp8run_train_config *cfg, int i, char *buf, size_t len)
{
    if (!cfg || !buf || len == 0 || i < 0 || i >= N_OPTIONS)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: cfg, buf or option %d is invalid", __func__, i);
    const fp8run_option_info *e = &k_table[i];
    const void *p = cfield(cfg, e);
    switch (e->type) {
    case FP8RUN_OPTION_UINT64: {
        uint64_t u;
        memcpy(&u, p, sizeof u);
        snprintf(buf, len, "%llu", (unsigned long long)u);
        break;
    }
    case FP8RUN_OPTION_DOUBLE: {
        double d;
        memcpy(&d, p, sizeof d);
        snprintf(buf, len, "%g", d);
        break;
    }
    case FP8RUN_OPTION_STRING:
    case FP8RUN_OPTION_CHOICE: {
        const char *s;
        memcpy(&s, p, sizeof s);
        snprintf(buf, len, "%s", s ? s : "");
        break;
    }
    case FP8RUN_OPTION_DIM_NAMES:
    case FP8RUN_OPTION_DIM_VALUES:
    case FP8RUN_OPTION_POINTER:
        snprintf(buf, len, "%s", "");
        break;
    default:
        snprintf(buf, len, "%lld", get_int(cfg, e));
    }
    return FP8RUN_OK;
}
