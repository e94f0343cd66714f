/* fp8run: FP8 training of ONNX models, as an embeddable C library.
 *
 * This is the only header a host program needs; it includes nothing of fp8run's internals.
 * Link with `pkg-config --cflags --libs fp8run` (add --static for the static library).
 *
 * Typical use (error checks left out; every call returns an fp8run_status):
 *
 *     fp8run_model *m;   fp8run_model_load("model.onnx", &m);
 *     fp8run_train_config cfg;   fp8run_train_config_init(&cfg, sizeof cfg);
 *     cfg.batch = 8; cfg.seq_len = 128; cfg.precision = "fp8"; cfg.lr = 3e-4;
 *     fp8run_session *s;   fp8run_session_create(m, "auto", &cfg, &s);
 *     fp8run_step_stats st = {.struct_size = sizeof st};
 *     fp8run_session_train_step(s, windows, FP8RUN_DTYPE_INT64, 8 * 129, &st);   (st.loss)
 *     fp8run_session_save(s, "run.ckpt", NULL);   fp8run_session_export(s, "trained.onnx");
 *     fp8run_session_destroy(s);   fp8run_model_destroy(m);
 *
 * ---- Conventions ----
 * Errors. Every call that can fail returns an fp8run_status; FP8RUN_OK is 0. A failing call
 * records a message that names the file, node, tensor or argument at fault:
 *   - fp8run_last_error(): the message of the last failed call made by THIS thread (thread-local;
 *     the only message for calls that fail before a handle exists, e.g. a load);
 *   - fp8run_model_error(m), fp8run_session_error(s), fp8run_data_error(d): the message of the
 *     last failed call on that handle.
 * Successful calls leave both messages as they were (like errno). The library never prints,
 * never exits or aborts; diagnostics go to the log callback (fp8run_set_log_callback).
 *
 * Threads. Calls on DIFFERENT handles may run in parallel from any threads: two sessions train
 * independently in two threads. One handle must not be used by two threads at the same time
 * (use your own lock), with one exception: a model may be read by several threads at once
 * (inspection, fp8run_session_create, fp8run_model_compile) as long as nobody modifies it
 * (fp8run_model_set_param, fp8run_model_apply_checkpoint) meanwhile; those threads should then
 * read fp8run_last_error() rather than fp8run_model_error(). A session keeps its own copy of
 * the model, so a model may be modified or destroyed after its sessions were created.
 *
 * Ownership. Handles are created by the create, load and open calls and freed by the matching
 * destroy or close call, which accepts NULL. Strings and info structs the library returns point
 * into the handle they came from and stay valid until that handle is destroyed, unless the
 * function says otherwise; never free them. Buffers and strings the caller passes in are only
 * read during the call (the library copies what it keeps).
 *
 * Structs and ABI. Every struct starts with `size_t struct_size`, which the caller sets to
 * sizeof(the struct): the init functions do it for input structs; for output structs write
 * `fp8run_value_info v = {.struct_size = sizeof v};`. Fields are only ever appended, so a program
 * compiled against an older header keeps working with a newer library: the library reads and
 * writes only the fields that fit in struct_size, and fields beyond it keep their defaults.
 * (Chosen over opaque option handles with setters because a struct is checked by the compiler,
 * is easy to fill from C and from ctypes, and the size prefix gives the same compatibility.)
 * A struct_size smaller than this ABI's first version of the struct is FP8RUN_ERR_INVALID_ARG;
 * a larger one (a newer header) is accepted when the bytes this library does not know are zero,
 * otherwise FP8RUN_ERR_UNSUPPORTED names the first unknown field offset. Check
 * fp8run_abi_version() == FP8RUN_ABI_VERSION at start-up to catch an incompatible library.
 *
 * Token windows. Training and evaluation take windows of T+1 consecutive token ids, row-major
 * B x (T+1) per micro-batch: the first T ids of a window are the model's input, the last T
 * the labels. Ids are int64 or int32 and must lie in [0, vocab). */
#ifndef FP8RUN_H
#define FP8RUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define FP8RUN_API __attribute__((visibility("default")))
#else
#define FP8RUN_API
#endif

#define FP8RUN_VERSION_MAJOR 0
#define FP8RUN_VERSION_MINOR 1
#define FP8RUN_VERSION_PATCH 0
/* Bumped on every incompatible change of this header (also the shared library's SONAME). */
#define FP8RUN_ABI_VERSION 1

/* "0.1.0" (static string). */
FP8RUN_API const char *fp8run_version(void);
/* FP8RUN_ABI_VERSION of the library actually loaded. */
FP8RUN_API int fp8run_abi_version(void);

/* ============================================================================================
 * Status, errors, logging
 * ========================================================================================== */

typedef enum fp8run_status {
    FP8RUN_OK = 0,
    FP8RUN_ERR_INVALID_ARG = 1,  /* NULL handle, bad option value, wrong size, unknown name */
    FP8RUN_ERR_IO = 2,           /* open/read/write/rename failed */
    FP8RUN_ERR_PARSE = 3,        /* malformed file: model, checkpoint, token file */
    FP8RUN_ERR_UNSUPPORTED = 4,  /* valid input fp8run does not handle (op, dtype, field) */
    FP8RUN_ERR_SHAPE = 5,        /* shape/dtype mismatch or unresolvable static shape */
    FP8RUN_ERR_OOM = 6,          /* allocation failed or size overflow */
    FP8RUN_ERR_RANGE = 7,        /* index out of range (token ids, Gather indices) */
    FP8RUN_ERR_GRAPH = 8,        /* structurally invalid model (cycle, dangling input) */
    FP8RUN_ERR_NUMERIC = 9,      /* too many non-finite steps in a row */
    FP8RUN_ERR_DEVICE = 10,      /* device (CUDA) failure */
    FP8RUN_ERR_INTERNAL = 11,    /* a bug in fp8run: please report it with the message */
    FP8RUN_ERR_UNAVAILABLE = 12, /* the backend asked for is not built in or has no device */
    FP8RUN_ERR_STATE = 13        /* the handle cannot do this now (e.g. a session whose step
                                    failed midway: destroy it and resume from a checkpoint) */
} fp8run_status;

/* "ok", "invalid argument", ... (static string; "unknown status" for other values). */
FP8RUN_API const char *fp8run_status_name(fp8run_status st);

/* This thread's last error message; never NULL ("" before any error). Valid until this thread's
 * next failing fp8run call. */
FP8RUN_API const char *fp8run_last_error(void);

typedef enum fp8run_log_level {
    FP8RUN_LOG_DEBUG = 0,
    FP8RUN_LOG_INFO = 1,
    FP8RUN_LOG_WARN = 2,
    FP8RUN_LOG_ERROR = 3
} fp8run_log_level;

/* Receives one message (without a trailing newline; valid during the call only). Called from
 * whichever thread is inside the library, possibly from several at once: make it thread-safe.
 * It must not call back into fp8run. */
typedef void (*fp8run_log_fn)(void *user, fp8run_log_level level, const char *message);

/* Process-wide log callback: messages at min_level and above go to fn(user, ...). fn = NULL
 * (the default) drops every message. Safe to call at any time from any thread. */
FP8RUN_API void fp8run_set_log_callback(fp8run_log_fn fn, void *user, fp8run_log_level min_level);

/* ============================================================================================
 * Element types and tensor descriptions
 * ========================================================================================== */

/* The ONNX TensorProto.DataType numbers. */
typedef enum fp8run_dtype {
    FP8RUN_DTYPE_UNDEFINED = 0,
    FP8RUN_DTYPE_FLOAT32 = 1,
    FP8RUN_DTYPE_UINT8 = 2,
    FP8RUN_DTYPE_INT8 = 3,
    FP8RUN_DTYPE_UINT16 = 4,
    FP8RUN_DTYPE_INT16 = 5,
    FP8RUN_DTYPE_INT32 = 6,
    FP8RUN_DTYPE_INT64 = 7,
    FP8RUN_DTYPE_STRING = 8,
    FP8RUN_DTYPE_BOOL = 9,
    FP8RUN_DTYPE_FLOAT16 = 10,
    FP8RUN_DTYPE_FLOAT64 = 11,
    FP8RUN_DTYPE_UINT32 = 12,
    FP8RUN_DTYPE_UINT64 = 13,
    FP8RUN_DTYPE_BFLOAT16 = 16,
    FP8RUN_DTYPE_FLOAT8E4M3FN = 17,
    FP8RUN_DTYPE_FLOAT8E4M3FNUZ = 18,
    FP8RUN_DTYPE_FLOAT8E5M2 = 19,
    FP8RUN_DTYPE_FLOAT8E5M2FNUZ = 20
} fp8run_dtype;

/* "float32", "int64", ... (static string). */
FP8RUN_API const char *fp8run_dtype_name(fp8run_dtype dt);

#define FP8RUN_MAX_RANK 8

/* A graph input/output or a parameter. Strings point into the handle that filled it in. */
typedef struct fp8run_value_info {
    size_t struct_size;
    const char *name;
    fp8run_dtype dtype;        /* FP8RUN_DTYPE_UNDEFINED when the model does not say */
    int rank;                  /* -1 when the model does not say */
    int64_t dims[FP8RUN_MAX_RANK];              /* -1 for a dim not known (symbolic or unnamed) */
    const char *dim_names[FP8RUN_MAX_RANK];     /* symbolic dim names ("batch", "seq") or NULL */
    int64_t numel;             /* element count; -1 when some dim is not known */
} fp8run_value_info;

/* ============================================================================================
 * Models
 * ========================================================================================== */

typedef struct fp8run_model fp8run_model;

/* Load an ONNX model file (external data relative to its folder; paths that leave the folder
 * are refused). */
FP8RUN_API fp8run_status fp8run_model_load(const char *path, fp8run_model **out);
/* Load from memory (copied; the buffer may be freed afterwards). `name` names the model in
 * messages only (may be NULL: "<memory>"): such a model has no path, and checkpoints of its
 * sessions record none. External data is refused. */
FP8RUN_API fp8run_status fp8run_model_load_buffer(const void *data, size_t len, const char *name,
                                                  fp8run_model **out);
FP8RUN_API void fp8run_model_destroy(fp8run_model *m);
/* Last error on this model; never NULL. */
FP8RUN_API const char *fp8run_model_error(const fp8run_model *m);
/* The file it was loaded from; NULL for a buffer. */
FP8RUN_API const char *fp8run_model_path(const fp8run_model *m);

/* Graph inputs and outputs in model order (counts are 0 for a NULL model). */
FP8RUN_API int fp8run_model_input_count(const fp8run_model *m);
FP8RUN_API fp8run_status fp8run_model_input(const fp8run_model *m, int i, fp8run_value_info *info);
FP8RUN_API int fp8run_model_output_count(const fp8run_model *m);
FP8RUN_API fp8run_status fp8run_model_output(const fp8run_model *m, int i, fp8run_value_info *info);

/* Parameters: the float initializers (what training can update), in model order. */
FP8RUN_API int fp8run_model_param_count(const fp8run_model *m);
/* Elements in all of them. */
FP8RUN_API int64_t fp8run_model_param_elements(const fp8run_model *m);
FP8RUN_API fp8run_status fp8run_model_param(const fp8run_model *m, int i, fp8run_value_info *info);
/* Copy parameter `name` (float32 or converted from float16/bfloat16/float64) into dst, which
 * holds `count` floats; count must equal the parameter's element count. */
FP8RUN_API fp8run_status fp8run_model_get_param(fp8run_model *m, const char *name, float *dst, size_t count);
/* Overwrite a float32 parameter with count floats from src (sessions created later see it). */
FP8RUN_API fp8run_status fp8run_model_set_param(fp8run_model *m, const char *name, const float *src,
                                                size_t count);
/* Put a training checkpoint's weights into the model's parameters (every "param" tensor of
 * the checkpoint must match a float32 parameter by name and shape). *n_applied (may be NULL)
 * counts them. Do this before fp8run_session_create when resuming, so frozen parameters agree
 * with the checkpoint, then fp8run_session_load. On error the tensors before the failing one
 * may already be applied: reload the model. */
FP8RUN_API fp8run_status fp8run_model_apply_checkpoint(fp8run_model *m, const char *ckpt_path,
                                                       int *n_applied);
/* Write the model as ONNX (atomically; weights to "<file>.data" beyond 1 GiB). */
FP8RUN_API fp8run_status fp8run_model_save(const fp8run_model *m, const char *path);

/* ============================================================================================
 * Training configuration
 * ========================================================================================== */

typedef struct fp8run_train_config {
    size_t struct_size;
    /* ---- shapes ---- */
    int64_t batch;               /* B >= 1 windows per micro-batch (default 1) */
    int64_t seq_len;             /* T >= 1 tokens per window (default 1) */
    int grad_accum;              /* K >= 1 micro-batches per step (default 1) */
    /* ---- precision and the FP8 compiler ---- */
    const char *precision;       /* "fp32" (default) | "bf16" | "fp8" */
    const char *recipe;          /* "delayed" (default) | "current" | "block" */
    const char *fp8_format;      /* "hybrid" (default: E4M3 forward, E5M2 gradients) | "e4m3" */
    int bf16_boundary;           /* Linear groups kept in BF16 at each end in fp8 (default 1) */
    int fuse;                    /* 1 (default): fuse Linears that share their input */
    int pad_multiple;            /* FP8 GEMM dims padded to multiples of this (default 16) */
    int fp8_margin;              /* scale = fp8_max / amax / 2^margin (default 0) */
    int amax_history_len;        /* delayed recipe (default 1024) */
    int fp8_interval;            /* delayed recipe: steps between scale updates (default 1) */
    const char *amax_algo;       /* delayed recipe: "max" (default) | "most_recent" */
    const char *fp8_exclude;     /* POSIX extended regex on weight names: matching Linears stay
                                    BF16 (default NULL: none) */
    /* ---- which graph values ---- */
    const char *tokens_input;    /* NULL (default): the first int64/int32 graph input */
    const char *logits_output;   /* NULL: the first float output of rank >= 2 */
    const char *loss_output;     /* non-NULL: the model computes its own scalar loss */
    int64_t ignore_index;        /* labels equal to it do not count (default -100) */
    const char *train_regex;     /* parameters trained: matching train (all when NULL) ... */
    const char *freeze_regex;    /* ... and not matching freeze (NULL: none) */
    const char *const *dim_names;/* other symbolic dims to fix: n_dims names and values */
    const int64_t *dim_values;
    int n_dims;
    /* ---- optimizer and schedule ---- */
    const char *optimizer;       /* "adamw" (default) | "sgd" */
    double weight_decay;         /* NaN (default): the optimizer's (AdamW 0.01, SGD 0); applied
                                    to parameters of rank >= 2 unless decay_1d */
    double beta1, beta2, eps;    /* AdamW (default 0.9, 0.999, 1e-8) */
    double momentum, dampening;  /* SGD (default 0, 0) */
    int nesterov;                /* SGD (default 0) */
    int decay_1d;                /* 1: decay rank-0/1 parameters too (default 0) */
    const char *lr_schedule;     /* "constant" (default) | "warmup_constant" | "cosine" */
    double lr;                   /* peak learning rate (default 1e-3) */
    double min_lr;               /* cosine: final learning rate (default 0) */
    int64_t warmup_steps;        /* linear warmup (default 0) */
    int64_t total_steps;         /* cosine: steps of the whole run (default 0; needed > warmup) */
    double grad_clip;            /* clip the global gradient norm to this; <= 0: off (default) */
    uint64_t seed;               /* the trainer's generator (default 0) */
    int max_bad_steps;           /* non-finite steps in a row before FP8RUN_ERR_NUMERIC (10) */
    int eval_only;               /* 1: no backward graph and no optimizer: evaluation only */
} fp8run_train_config;

/* Fill *cfg with the defaults above and set cfg->struct_size = size. Pass sizeof *cfg. */
FP8RUN_API fp8run_status fp8run_train_config_init(fp8run_train_config *cfg, size_t size);

/* ============================================================================================
 * The FP8 compiler's report
 * ========================================================================================== */

typedef struct fp8run_report fp8run_report;

/* One Linear node of the compiled graph (several original Linears when fused). */
typedef struct fp8run_layer_info {
    size_t struct_size;
    const char *name;            /* the Linear node */
    const char *precision;       /* "fp8" | "bf16" | "fp32" */
    const char *why;             /* why this precision (boundary layer, regex, requested, ...) */
    const char *recipe;          /* "delayed" | "current" | "block" (fp8 layers), else NULL */
    const char *weights;         /* original weight name(s), comma-separated */
    const char *sources;         /* original node name(s), comma-separated */
    int n_fused;                 /* original Linears fused into this node (1: not fused) */
    int has_bias;
    int64_t k, n;                /* GEMM contraction and output dims */
    int pad_multiple;            /* 1: no padding */
    int64_t pad_k, pad_n;        /* zeros the GPU adds to K and N */
} fp8run_layer_info;

/* A MatMul/Gemm with a trainable weight that was left as it is, and why. */
typedef struct fp8run_skipped_info {
    size_t struct_size;
    const char *node, *op_type, *weight, *reason;
} fp8run_skipped_info;

/* Compile a copy of the model with cfg's precision options for cfg's batch and sequence (the
 * model is not changed) and report what the compiler did, without building a session. The
 * report of fp32 has no layers. *out is freed with fp8run_report_destroy. */
FP8RUN_API fp8run_status fp8run_model_compile(const fp8run_model *m, const fp8run_train_config *cfg,
                                              fp8run_report **out);
FP8RUN_API void fp8run_report_destroy(fp8run_report *r);
FP8RUN_API const char *fp8run_report_precision(const fp8run_report *r); /* "fp8" | "bf16" | "fp32" */
FP8RUN_API int fp8run_report_layer_count(const fp8run_report *r);
FP8RUN_API fp8run_status fp8run_report_layer(const fp8run_report *r, int i, fp8run_layer_info *info);
FP8RUN_API int fp8run_report_skipped_count(const fp8run_report *r);
FP8RUN_API fp8run_status fp8run_report_skipped(const fp8run_report *r, int i, fp8run_skipped_info *info);
/* Linear layers per precision (fused members counted each): precision "fp8", "bf16", "fp32". */
FP8RUN_API int fp8run_report_linears(const fp8run_report *r, const char *precision);
/* The whole report as text, one layer per paragraph (as `fp8run info` prints it). */
FP8RUN_API const char *fp8run_report_text(const fp8run_report *r);

/* ============================================================================================
 * Sessions: training and evaluation
 * ========================================================================================== */

typedef struct fp8run_session fp8run_session;
typedef struct fp8run_data_loader fp8run_data_loader;

/* Build a session for `m` with `cfg` (NULL: the defaults) on a backend:
 *   "cpu"         the CPU reference backend (float32 with FP8/BF16 rounding emulated);
 *   "cuda"        the CUDA backend: FP8RUN_ERR_UNAVAILABLE until it exists in this build;
 *   "auto"/NULL   the best available (today: cpu; the choice is logged at INFO level).
 * The model is copied: it may be changed or destroyed afterwards. */
FP8RUN_API fp8run_status fp8run_session_create(const fp8run_model *m, const char *backend,
                                               const fp8run_train_config *cfg, fp8run_session **out);
FP8RUN_API void fp8run_session_destroy(fp8run_session *s);
/* Last error on this session; never NULL. */
FP8RUN_API const char *fp8run_session_error(const fp8run_session *s);
/* "cpu" (or "cuda" later). */
FP8RUN_API const char *fp8run_session_backend(const fp8run_session *s);

typedef struct fp8run_step_stats {
    size_t struct_size;
    int64_t step;                /* 0-based index of this step (the schedule's step) */
    double loss;                 /* mean over the micro-batches */
    double grad_norm;            /* global norm of the averaged gradient before clipping */
    double lr;                   /* learning rate used */
    int skipped;                 /* 1: the loss, gradients or FP8 amaxes were not finite and
                                    nothing was updated */
    int bad_in_a_row;            /* skipped steps in a row, this one included */
    const char *reason;          /* why it was skipped ("" otherwise); valid until the next step */
} fp8run_step_stats;

/* One optimizer step: `windows` holds grad_accum micro-batches of B x (T+1) token ids of type
 * dtype (FP8RUN_DTYPE_INT64 or _INT32); `count` is the number of ids and must equal
 * grad_accum * B * (T+1). stats may be NULL. A skipped step (non-finite values) is FP8RUN_OK
 * with stats->skipped = 1 unless it is more than max_bad_steps in a row: FP8RUN_ERR_NUMERIC
 * (stats filled in all the same; the session stays usable). Bad arguments or token ids
 * change nothing. Any other failure (one inside the step) leaves the session broken: later
 * steps, evals, parameter reads/writes, saves, loads and exports fail with FP8RUN_ERR_STATE
 * (the accessors and destroy still work); resume from a checkpoint in a new session. */
FP8RUN_API fp8run_status fp8run_session_train_step(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                                   size_t count, fp8run_step_stats *stats);
/* Loss of one micro-batch (B x (T+1) ids, count = B * (T+1)) without updating anything. */
FP8RUN_API fp8run_status fp8run_session_eval(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                             size_t count, double *loss);
/* A model output of the last fp8run_session_eval (name NULL: the logits output), as float32:
 * info (may be NULL) gets its dtype and shape (info->name valid until the next call of this
 * function on s); dst (may be NULL to ask the shape only) receives count floats, count equal
 * to the output's element count. */
FP8RUN_API fp8run_status fp8run_session_eval_output(fp8run_session *s, const char *name,
                                                    fp8run_value_info *info, float *dst, size_t count);

FP8RUN_API int64_t fp8run_session_batch(const fp8run_session *s);
FP8RUN_API int64_t fp8run_session_seq_len(const fp8run_session *s);
FP8RUN_API int fp8run_session_grad_accum(const fp8run_session *s);
/* The logits' last dim (token ids must be below it); 0 when unknown. */
FP8RUN_API int64_t fp8run_session_vocab(const fp8run_session *s);
/* Steps taken or skipped so far (a resumed session continues the count). */
FP8RUN_API int64_t fp8run_session_steps_done(const fp8run_session *s);
FP8RUN_API int64_t fp8run_session_steps_skipped(const fp8run_session *s);
/* The session's options as a JSON object (what checkpoints record); valid until the next call
 * of this function on s or its destruction. NULL on error. */
FP8RUN_API const char *fp8run_session_config_json(fp8run_session *s);
/* The compile report of this session (a copy; free it with fp8run_report_destroy). */
FP8RUN_API fp8run_status fp8run_session_report(const fp8run_session *s, fp8run_report **out);

/* Trained parameters under their original names and layouts (fused ones by their members). */
FP8RUN_API int fp8run_session_param_count(const fp8run_session *s);
FP8RUN_API fp8run_status fp8run_session_param(const fp8run_session *s, int i, fp8run_value_info *info);
/* Copy a trained parameter's FP32 values into dst (count floats = its element count). */
FP8RUN_API fp8run_status fp8run_session_get_param(fp8run_session *s, const char *name, float *dst,
                                                  size_t count);
/* Overwrite a trained parameter with count floats (the optimizer state is left as it is). */
FP8RUN_API fp8run_status fp8run_session_set_param(fp8run_session *s, const char *name, const float *src,
                                                  size_t count);

/* Write a checkpoint atomically: weights, optimizer and FP8 scaling state, step counters,
 * generator, the options, and (when data is non-NULL) the data loader's position. */
FP8RUN_API fp8run_status fp8run_session_save(fp8run_session *s, const char *path,
                                             const fp8run_data_loader *data);
/* Restore a checkpoint written for the same model (any precision). When data is non-NULL the
 * checkpoint must hold a loader state, which is restored into it. Resuming is exact: later
 * losses equal those of the uninterrupted run bit for bit. A file that is missing or not a
 * checkpoint changes nothing; a failure while restoring (corrupt file, another model) leaves
 * the session broken (FP8RUN_ERR_STATE afterwards). */
FP8RUN_API fp8run_status fp8run_session_load(fp8run_session *s, const char *path, fp8run_data_loader *data);
/* Write the original model with the trained weights (original names and layouts) as ONNX. */
FP8RUN_API fp8run_status fp8run_session_export(fp8run_session *s, const char *path);

/* ============================================================================================
 * Checkpoint files
 * ========================================================================================== */

typedef struct fp8run_checkpoint fp8run_checkpoint;

/* 1 when the file starts like an fp8run checkpoint (nothing else is checked), else 0. */
FP8RUN_API int fp8run_is_checkpoint(const char *path);
/* Read and verify a checkpoint (checksum, bounds) and keep what describes it. */
FP8RUN_API fp8run_status fp8run_checkpoint_open(const char *path, fp8run_checkpoint **out);
FP8RUN_API void fp8run_checkpoint_close(fp8run_checkpoint *c);
/* Steps the run had taken; -1 when the file is not a trainer checkpoint. */
FP8RUN_API int64_t fp8run_checkpoint_step(const fp8run_checkpoint *c);
/* The options it was written with (JSON object), NULL when absent. */
FP8RUN_API const char *fp8run_checkpoint_config_json(const fp8run_checkpoint *c);
/* The model file the run trained (from the config), NULL when not recorded. */
FP8RUN_API const char *fp8run_checkpoint_model_path(const fp8run_checkpoint *c);
/* 1 when it holds a data loader state. */
FP8RUN_API int fp8run_checkpoint_has_data_state(const fp8run_checkpoint *c);
/* Its "param" tensors (the trained weights). */
FP8RUN_API int fp8run_checkpoint_param_count(const fp8run_checkpoint *c);
FP8RUN_API fp8run_status fp8run_checkpoint_param(const fp8run_checkpoint *c, int i, fp8run_value_info *info);

/* ============================================================================================
 * Token data loader
 * ========================================================================================== */

typedef enum fp8run_data_order {
    FP8RUN_DATA_RANDOM = 0,      /* each window's start drawn uniformly (seeded) */
    FP8RUN_DATA_SEQUENTIAL = 1   /* consecutive non-overlapping windows, wrapping at the end */
} fp8run_data_order;

typedef enum fp8run_data_format {
    FP8RUN_DATA_AUTO = 0,        /* llm.c token file when it starts with its magic, else raw */
    FP8RUN_DATA_RAW = 1          /* raw little-endian uint16/uint32 ids */
} fp8run_data_format;

typedef struct fp8run_data_config {
    size_t struct_size;
    int64_t batch;               /* B >= 1 (default 1) */
    int64_t seq_len;             /* T >= 1 (default 1) */
    fp8run_data_order order;     /* default FP8RUN_DATA_RANDOM */
    fp8run_data_format format;   /* default FP8RUN_DATA_AUTO */
    uint64_t seed;               /* random order (default 0) */
    fp8run_dtype token_dtype;    /* raw files: UINT16 (default) or UINT32 */
    int no_mmap;                 /* 1: read the file instead of mapping it */
    int64_t vocab_size;          /* > 0: every id of a batch must be below it (default 0) */
    int64_t max_batches;         /* sequential, > 0: wrap after this many batches (default 0) */
} fp8run_data_config;

FP8RUN_API fp8run_status fp8run_data_config_init(fp8run_data_config *cfg, size_t size);

/* Open a token file for training batches. */
FP8RUN_API fp8run_status fp8run_data_open(const char *path, const fp8run_data_config *cfg,
                                          fp8run_data_loader **out);
/* A validation loader: sequential, num_batches batches per pass (0: as many as the file holds);
 * each pass sees the same batches. */
FP8RUN_API fp8run_status fp8run_data_open_val(const char *path, const fp8run_data_config *cfg,
                                              int64_t num_batches, fp8run_data_loader **out);
FP8RUN_API void fp8run_data_close(fp8run_data_loader *d);
FP8RUN_API const char *fp8run_data_error(const fp8run_data_loader *d);

/* The next count / (B*(T+1)) batches (count a positive multiple of B*(T+1); one step of
 * grad_accum micro-batches at once) as int64 or int32 windows. On error the loader's state is
 * as before the call. */
FP8RUN_API fp8run_status fp8run_data_next(fp8run_data_loader *d, fp8run_dtype dtype, void *windows,
                                          size_t count);
/* Back to the first batch (generator re-seeded). */
FP8RUN_API void fp8run_data_reset(fp8run_data_loader *d);
FP8RUN_API int64_t fp8run_data_num_tokens(const fp8run_data_loader *d);
FP8RUN_API fp8run_dtype fp8run_data_token_dtype(const fp8run_data_loader *d); /* UINT16 or UINT32 */
FP8RUN_API int64_t fp8run_data_batches_done(const fp8run_data_loader *d);   /* since open/reset */
FP8RUN_API int64_t fp8run_data_epoch(const fp8run_data_loader *d);          /* completed epochs */
/* Sequential: batches in one pass. Random: tokens / (B*T). */
FP8RUN_API int64_t fp8run_data_batches_per_epoch(const fp8run_data_loader *d);
/* Check every id of the whole file against vocab_size (FP8RUN_ERR_RANGE names the first bad one). */
FP8RUN_API fp8run_status fp8run_data_check_tokens(fp8run_data_loader *d, int64_t vocab_size);

/* The loader's position as an opaque byte string of fp8run_data_state_size() bytes, to store
 * with your own checkpoints (fp8run_session_save stores it for you). */
FP8RUN_API size_t fp8run_data_state_size(void);
FP8RUN_API fp8run_status fp8run_data_get_state(const fp8run_data_loader *d, void *buf, size_t len);
/* Restore a state saved by a loader with the same file, batch shape and order (else
 * FP8RUN_ERR_INVALID_ARG; the loader is unchanged on error). */
FP8RUN_API fp8run_status fp8run_data_set_state(fp8run_data_loader *d, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
