/* Status codes and the per-thread "last error" message.
 * Library code never prints or exits: a failing call records a message naming the
 * file/node/tensor at fault with fr_error() and returns the status up the stack. */
#ifndef FR_STATUS_H
#define FR_STATUS_H

#include <stddef.h>

typedef enum fr_status {
    FR_OK = 0,
    FR_ERR_INVALID_ARG = 1, /* caller passed something unusable (NULL, bad option value) */
    FR_ERR_IO = 2,          /* open/read/write/rename failed */
    FR_ERR_PARSE = 3,       /* malformed file: protobuf, .npy, checkpoint */
    FR_ERR_UNSUPPORTED = 4, /* valid input we do not handle: op, attribute value, dtype */
    FR_ERR_SHAPE = 5,       /* shape/dtype mismatch or unresolvable static shape */
    FR_ERR_OOM = 6,         /* allocation failed or size overflow */
    FR_ERR_RANGE = 7,       /* index out of range (Gather, token ids, ...) */
    FR_ERR_GRAPH = 8,       /* structural: cycle, dangling input, duplicate name */
    FR_ERR_NUMERIC = 9,     /* non-finite loss/gradients where they must be finite */
    FR_ERR_DEVICE = 10,     /* CUDA / cuBLASLt failure or unusable device */
    FR_ERR_INTERNAL = 11    /* a bug in fp8run: please report */
} fr_status;

/* On a function returning a status: GCC/clang warn when a caller drops the result. Every
 * fr_status function declared in the library's headers carries it (build with
 * -Werror=unused-result to find the call sites that ignore one). */
#if defined(__GNUC__) || defined(__clang__)
#define FR_NODISCARD __attribute__((warn_unused_result))
#else
#define FR_NODISCARD
#endif

/* Drop a status on purpose: only where an error is already being returned (cleanup on a
 * failure path) or the call is best effort. Say why at the call site. A (void) cast does not
 * silence warn_unused_result in GCC; passing the value to this function does. */
static inline void fr_ignore_status(fr_status st) { (void)st; }

/* Record a printf-style message as this thread's last error and return `st`.
 * Usage: return fr_error(FR_ERR_SHAPE, "node '%s' (MatMul): ...", name); */
FR_NODISCARD fr_status fr_error(fr_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepend context to the current message ("while loading 'x.onnx': <old message>"),
 * keeping the status. Returns `st`. */
FR_NODISCARD fr_status fr_error_context(fr_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *fr_last_error(void);   /* never NULL; "" when no error was recorded */
void fr_clear_error(void);
const char *fr_status_name(fr_status st);

/* Propagate a failing status. */
#define FR_TRY(expr)                              \
    do {                                          \
        fr_status fr_try_st_ = (expr);            \
        if (fr_try_st_ != FR_OK) return fr_try_st_; \
    } while (0)

/* Checked allocation helpers: on failure they record FR_ERR_OOM with `what` in the message
 * and return NULL. Sizes are checked for multiplication overflow. */
void *fr_malloc(size_t n, const char *what);
void *fr_calloc(size_t count, size_t size, const char *what);
void *fr_realloc_array(void *p, size_t count, size_t size, const char *what);
char *fr_strdup(const char *s, const char *what);
/* a*b with overflow detection; returns 0 on overflow (and *out untouched) */
int fr_mul_size(size_t a, size_t b, size_t *out);

#endif
