/* Private pieces shared by the public C API's files (runtime/api_*.c): the handle structs,
 * error recording into the thread-local and per-handle messages, logging, and the checks of
 * size-prefixed structs. Not installed. */
#ifndef FR_API_INTERNAL_H
#define FR_API_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

#include "fp8run.h"
#include "graph/ir.h"
#include "passes/fp8_compile.h"
#include "runtime/io/data.h"
#include "runtime/io/fbs.h"
#include "graph/status.h"
#include "runtime/train/trainer.h"

#define API_MSG_BYTES 2048

/* A handle's last error message. */
typedef struct api_err {
    char msg[API_MSG_BYTES];
} api_err;

struct fp8run_model {
    api_err err;
    fr_graph *g;
    /* fp8run_value_info of params: indices into g->values, in initializer order */
    int *params;
    int n_params;
    fp8run_op_info *ops;      /* the op histogram (op_type strings owned), most frequent first */
    int n_ops;
    int n_nonfinite;          /* parameters holding NaN/Inf values at load: */
    int *nonfinite;           /*   their indices into params */
    int64_t *nonfinite_counts;/*   and how many such values each */
};

struct fp8run_session {
    api_err err;
    fr_trainer *t;
    const char *backend;      /* static string */
    int broken;               /* a step or load failed midway: only accessors and destroy work */
    char broken_why[API_MSG_BYTES];
    int64_t *scratch;         /* int32 windows widened to int64 */
    size_t scratch_n;
    char reason[256];         /* the last step's skip reason (fp8run_step_stats.reason) */
    char *config_json;
    char *out_name;           /* fp8run_value_info.name of eval outputs */
    char *profile;            /* fp8run_session_profile's text */
    char *slow_path;          /* fp8run_session_slow_path's text */
    char attention[512];      /* fp8run_session_attention's text */
    char gemm[512];           /* fp8run_session_gemm's text */
    fr_fp8_stat *stats;       /* the fp8run_session_fp8_stats snapshot */
    int n_stats;
};

struct fp8run_data_loader {
    api_err err;
    fr_data_loader *dl;
    int64_t per_batch;        /* B * (T+1) */
};

/* ---- errors (runtime/api/api_error.c) ---- */

/* Map an internal status onto the public one (the numbers agree). */
FR_NODISCARD fp8run_status fr_api_status(fr_status st);
/* After an internal call failed with st: copy its message (fr_last_error) into this thread's
 * API message and into `slot` (may be NULL), prefixed with "<fn>: " when fn is non-NULL and the
 * message does not start with it. Returns the public status; FP8RUN_OK for FR_OK. */
FR_NODISCARD fp8run_status fr_api_fail(api_err *slot, const char *fn, fr_status st);
/* Record a message of the API's own (printf-style) and return st. */
FR_NODISCARD fp8run_status fr_api_error(api_err *slot, fp8run_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Drop the status of the three above on purpose: in calls that answer NULL or a count (the
 * message is what is wanted), or when the status being returned was already taken. */
static inline void fr_api_ignore(fp8run_status ps) { (void)ps; }

/* ---- logging (runtime/api/api_error.c) ---- */
void fr_api_log(fp8run_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- size-prefixed structs (runtime/api/api_error.c) ---- */

/* Validate an input struct of `known` bytes this library knows, whose first field is its
 * struct_size; `min` is the size of its first ABI version. On success *use = bytes to copy
 * (min(struct_size, known)). Bytes beyond `known` must be zero. */
fp8run_status fr_api_check_in(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                              size_t known, size_t *use);
/* An output struct: struct_size must be >= min. *use = min(struct_size, known). */
fp8run_status fr_api_check_out(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                               size_t known, size_t *use);

/* fr_api_check_in, then the caller's struct copied over *dst (`known` bytes holding defaults) as
 * far as both reach. */
fp8run_status fr_api_read_in(api_err *slot, const char *fn, const char *what, const void *p, size_t min,
                             void *dst, size_t known);
/* The body of a *_init(cfg, size) function for the public struct `type`: size checked against
 * `min` (its first ABI version), the caller's size bytes zeroed, our `defaults` (`known` bytes)
 * copied in as far as size reaches, struct_size (the first field) set to size. */
fp8run_status fr_api_struct_init(const char *fn, const char *type, void *p, size_t size, size_t min,
                                 const void *defaults, size_t known);

/* Fill a public value info (local copy, then the caller's first `use` bytes) from a value. */
void fr_api_value_info(const fr_value *v, fp8run_value_info *out, size_t use);
/* Same from a bare name/dtype/shape. */
void fr_api_shape_info(const char *name, fr_dtype dt, int rank, const int64_t *dims, fp8run_value_info *out,
                       size_t use);

/* ---- tensors (runtime/api/api_tensor.c) ---- */

/* An fr_tensor header over a caller's tensor (rank already checked): its memory, not copied. */
fr_tensor fr_api_tensor_view(const fp8run_tensor *c);

/* ---- models (runtime/api/api_model.c) ---- */

/* A model handle around g (ownership taken: g is freed on failure). Parameters are the
 * FR_VAL_PARAM initializers, or for a compiled graph the ones its metadata lists. */
fp8run_status fr_api_model_wrap(fr_graph *g, fp8run_model **out);
/* The value of metadata key `key`, NULL when absent. */
const char *fr_api_meta(const fr_graph *g, const char *key);
/* A dims list checked and converted (names and values >= min_value); *out NULL when n is 0.
 * `what` names the config in messages ("config"). Caller frees *out. */
fp8run_status fr_api_dims(api_err *slot, const char *fn, const char *const *names, const int64_t *values, int n,
                          int64_t min_value, fr_dim_binding **out);

/* ---- the options' table (runtime/api/api_options.c, from runtime/train/train_config.def) ---- */

/* The defaults of every fp8run_train_config field. */
void fr_api_config_defaults(fp8run_train_config *c);
/* A compiled graph's recorded options through the option table (runtime/api/api_fbs_options.c);
 * FR_OK for an ONNX model. what: the file, for messages (NULL: the graph's source path). */
FR_NODISCARD fr_status fr_api_check_recorded_options(const fr_graph *g, const char *what);
/* Every option's range and choices; the error names fn and the field ("config.pad_multiple"). */
fp8run_status fr_api_config_check(api_err *slot, const char *fn, const fp8run_train_config *c);
/* The library's static string for choice `value` of setting `name` (an option or "device"),
 * NULL when it is not one. */
const char *fr_api_choice(const char *name, const char *value);

/* ---- configuration (runtime/api/api_config.c) ---- */

/* A train config turned into trainer options. Strings of `o` point into the caller's config
 * (valid for the call) and into `dims` (owned here). */
typedef struct api_options {
    fr_train_options o;
    fr_dim_binding *dims;
} api_options;
fp8run_status fr_api_options(api_err *slot, const char *fn, const fp8run_train_config *cfg, api_options *out);
void fr_api_options_free(api_options *o);

/* ---- report (runtime/api/api_report.c) ---- */
/* A report that copies r (NULL: an fp32 report with no layers); its scaling states are fresh. */
FR_NODISCARD fr_status fr_api_report_new(const fr_fp8_report *r, const char *precision, fp8run_report **out);
/* The report of a trainer, with its current scaling state. */
FR_NODISCARD fr_status fr_api_report_from_trainer(const fr_trainer *t, fp8run_report **out);
/* Scaling state i (report order) as it is in sc. */
void fr_api_report_set_state(fp8run_report *r, int i, const fr_fp8_scaling *sc);
/* What each pass of the training pipeline did (copied). */
void fr_api_report_set_passes(fp8run_report *r, const fr_pipeline_report *p);
/* The nodes of g off the fast path (passes/fast_path.h), as fp8run_report_slow_path's text. */
FR_NODISCARD fr_status fr_api_report_set_slow_path(fp8run_report *r, const fr_graph *g);
/* A report of a decoded compiled graph: layers, recorded scaling state and what the file
 * records besides (fp8run_report_compiled). */
FR_NODISCARD fr_status fr_api_report_from_fbs(const fr_fbs *f, fp8run_report **out);

#endif
