/* Public API: version, status names, the thread-local and per-handle error messages, the log
 * callback, and the checks of size-prefixed structs. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "runtime/api/api_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)

FP8RUN_API const char *fp8run_version(void)
{
    return STR(FP8RUN_VERSION_MAJOR) "." STR(FP8RUN_VERSION_MINOR) "." STR(FP8RUN_VERSION_PATCH);
}

FP8RUN_API int fp8run_abi_version(void) { return FP8RUN_ABI_VERSION; }

FP8RUN_API const char *fp8run_status_name(fp8run_status st)
{
    switch (st) {
    case FP8RUN_ERR_UNAVAILABLE: return "unavailable";
    case FP8RUN_ERR_STATE: return "invalid state";
    default: break;
    }
    if ((int)st < 0 || (int)st > FP8RUN_ERR_INTERNAL) return "unknown status";
    return fr_status_name((fr_status)st);
}

FP8RUN_API const char *fp8run_dtype_name(fp8run_dtype dt) { return fr_dtype_name((fr_dtype)dt); }

/* ---- messages ---- */

static _Thread_local char api_msg[API_MSG_BYTES];

FP8RUN_API const char *fp8run_last_error(void) { return api_msg; }

fp8run_status fr_api_status(fr_status st)
{
    /* the public enum keeps the internal numbers; anything newer is a bug worth reporting */
    if ((int)st < 0 || (int)st > FR_ERR_INTERNAL) return FP8RUN_ERR_INTERNAL;
    return (fp8run_status)st;
}

static void store(api_err *slot, const char *text)
{
    if (text != api_msg) snprintf(api_msg, sizeof api_msg, "%s", text);
    if (slot) snprintf(slot->msg, sizeof slot->msg, "%s", api_msg);
}

fp8run_status fr_api_fail(api_err *slot, const char *fn, fr_status st)
{
    if (st == FR_OK) return FP8RUN_OK;
    const char *m = fr_last_error();
    if (!m[0]) m = fr_status_name(st);
    if (fn && strncmp(m, fn, strlen(fn)) != 0)
        snprintf(api_msg, sizeof api_msg, "%s: %s", fn, m);
    else
        snprintf(api_msg, sizeof api_msg, "%s", m);
    store(slot, api_msg);
    fr_api_log(FP8RUN_LOG_DEBUG, "error: %s", api_msg);
    return fr_api_status(st);
}

fp8run_status fr_api_error(api_err *slot, fp8run_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(api_msg, sizeof api_msg, fmt, ap);
    va_end(ap);
    store(slot, api_msg);
    fr_api_log(FP8RUN_LOG_DEBUG, "error: %s", api_msg);
    return st;
}

/* ---- log callback ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static fp8run_log_fn log_fn;
static void *log_user;
static fp8run_log_level log_min = FP8RUN_LOG_INFO;

FP8RUN_API void fp8run_set_log_callback(fp8run_log_fn fn, void *user, fp8run_log_level min_level)
{
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    log_min = min_level;
    pthread_mutex_unlock(&log_lock);
}

void fr_api_log(fp8run_log_level level, const char *fmt, ...)
{
    pthread_mutex_lock(&log_lock);
    fp8run_log_fn fn = log_fn;
    void *user = log_user;
    int wanted = fn && level >= log_min;
    pthread_mutex_unlock(&log_lock);
    if (!wanted) return;
    char buf[API_MSG_BYTES + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fn(user, level, buf); /* outside the lock: a slow callback must not serialize the library */
}

/* ---- size-prefixed structs ---- */

/* An input (`in`) or output struct of the caller's: there, its struct_size at least `min`, and
 * for an input the bytes beyond the `known` ones of this library zero. */
static fp8run_status check_struct(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                                  size_t known, int in, size_t *use)
{
    if (!p) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, what);
    size_t size;
    memcpy(&size, p, sizeof size);
    if (size < min)
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG,
                            "%s: %s.struct_size is %zu, below the %zu bytes of its first version (set it to %s)", fn,
                            what, size, min, in ? "sizeof, or use the *_init function" : "sizeof before the call");
    /* a newer header's fields this library does not know: fine while they are left at zero */
    const unsigned char *b = p;
    for (size_t i = known; in && i < size; i++)
        if (b[i])
            return fr_api_error(slot, FP8RUN_ERR_UNSUPPORTED,
                                "%s: %s sets a field at byte offset %zu that this fp8run (%s, %zu-byte "
                                "struct) does not know; upgrade the library",
                                fn, what, i, fp8run_version(), known);
    *use = size < known ? size : known;
    return FP8RUN_OK;
}

fp8run_status fr_api_check_in(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                              size_t known, size_t *use)
{
    return check_struct(slot, fn, what, p, min, known, 1, use);
}

fp8run_status fr_api_check_out(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                               size_t known, size_t *use)
{
    return check_struct(slot, fn, what, p, min, known, 0, use);
}

fp8run_status fr_api_read_in(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                             void *dst, size_t known)
{
    size_t use;
    fp8run_status ps = fr_api_check_in(slot, fn, what, p, min, known, &use);
    if (ps == FP8RUN_OK) memcpy(dst, p, use);
    return ps;
}

fp8run_status fr_api_struct_init(const char *fn, const char *type, void *p, size_t size, size_t min,
                                 const void *defaults, size_t known)
{
    if (!p) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: cfg is NULL", fn);
    if (size < min)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG,
                            "%s: size %zu is below the %zu bytes of the first %s (pass sizeof cfg)", fn, size, min,
                            type);
    /* a newer caller's struct: its fields beyond ours are zeroed, which means "default" */
    memset(p, 0, size);
    memcpy(p, defaults, size < known ? size : known);
    memcpy(p, &size, sizeof size); /* struct_size, the first field */
    return FP8RUN_OK;
}

void fr_api_shape_info(const char *name, fr_dtype dt, int rank, const int64_t *dims, fp8run_value_info *out,
                       size_t use)
{
    fp8run_value_info v;
    memset(&v, 0, sizeof v);
    v.struct_size = out->struct_size;
    v.name = name;
    v.dtype = (fp8run_dtype)dt;
    v.rank = rank;
    v.numel = rank >= 0 ? 1 : -1;
    int zero = 0;
    for (int d = 0; d < rank && d < FP8RUN_MAX_RANK; d++) {
        v.dims[d] = dims[d];
        zero |= dims[d] == 0;
        /* a product past int64 (hostile dims) is as unknown as a symbolic dim */
        if (dims[d] < 0 || (v.numel >= 0 && __builtin_mul_overflow(v.numel, dims[d], &v.numel))) v.numel = -1;
    }
    if (zero && rank >= 0) v.numel = 0; /* an empty tensor, whatever its other dims */
    memcpy(out, &v, use);
}

void fr_api_value_info(const fr_value *val, fp8run_value_info *out, size_t use)
{
    fp8run_value_info v;
    v.struct_size = out->struct_size;
    fr_api_shape_info(val->name, val->dtype, val->rank, val->dims, &v, sizeof v);
    for (int d = 0; d < val->rank && d < FP8RUN_MAX_RANK; d++) v.dim_names[d] = val->dim_params[d];
    memcpy(out, &v, use);
}
