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
 * (inspection, fp8run_session_create, fp8run_forward_create, fp8run_model_prepare, the compile,
 * report, FLOPs and export calls) as long as nobody modifies it
 * (fp8run_model_set_param, fp8run_model_apply_checkpoint) meanwhile; those threads should then
 * read fp8run_last_error() rather than fp8run_model_error(). A session keeps its own copy of
 * the model, as does a forward pass (and a prepared model is a model of its own), so a model
 * may be modified or destroyed after they were created.
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
/* on every call that returns an fp8run_status: the compiler warns when the status is dropped */
#define FP8RUN_NODISCARD __attribute__((warn_unused_result))
#else
#define FP8RUN_API
#define FP8RUN_NODISCARD
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
 * Host tensors and .npy files
 * ========================================================================================== */

/* A tensor in host memory: dtype, shape and row-major data. Who owns `data` is said by each
 * function that takes or fills one. */
typedef struct fp8run_tensor {
    size_t struct_size;
    const char *name;          /* the graph input or output it is for; NULL where none is meant */
    fp8run_dtype dtype;
    int rank;                  /* 0..FP8RUN_MAX_RANK */
    int64_t dims[FP8RUN_MAX_RANK];
    void *data;                /* nbytes bytes, row-major (may be NULL when nbytes is 0) */
    size_t nbytes;
} fp8run_tensor;

/* Bytes of one element; 0 for FP8RUN_DTYPE_STRING, _UNDEFINED and numbers fp8run does not know. */
FP8RUN_API size_t fp8run_dtype_size(fp8run_dtype dt);
/* Decode count elements of dtype dt at src (any number type: floats incl. float16, bfloat16 and
 * the FP8 formats fp8run computes in, integers, bool) into float32 at dst, exactly as fp8run
 * reads them (FP8 and bfloat16 values are exact in float32; large integers round).
 * FP8RUN_ERR_UNSUPPORTED for strings and types fp8run does not compute in. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_convert_to_float32(fp8run_dtype dt, const void *src, size_t count, float *dst);

/* NumPy .npy files (versions 1.0-3.0 read, 1.0 written; little-endian, C order). They are in
 * the API rather than in each tool because they are how fixtures, PyTorch dumps and NumPy hosts
 * exchange arrays with fp8run, and a file is untrusted input: one hardened reader serves the
 * library's tests, the CLI and host programs alike. */
/* 1 when dt has a NumPy type code (bfloat16 and FP8 have none: convert them to float32). */
FP8RUN_API int fp8run_npy_supports(fp8run_dtype dt);
/* Read a .npy file into *out (struct_size set by the caller; name set to NULL). out->data is
 * allocated by the library: free it with fp8run_npy_free. A malformed file is
 * FP8RUN_ERR_PARSE naming it. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_npy_load(const char *path, fp8run_tensor *out);
/* Free the data fp8run_npy_load allocated (data = NULL, nbytes = 0 afterwards); NULL is a no-op. */
FP8RUN_API void fp8run_npy_free(fp8run_tensor *t);
/* Write t as .npy (atomically: a temporary in the same folder, then renamed). t->nbytes must be
 * the shape's byte size. A dtype without a NumPy code is FP8RUN_ERR_UNSUPPORTED. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_npy_save(const char *path, const fp8run_tensor *t);

/* The files a command reads and writes, under the rules fp8run's own commands follow (the
 * README's "Files"): a file read by name must be a regular file (a FIFO, device or folder is
 * refused before anything blocks) of at most a stated size; a file written goes to a temporary
 * file in its folder, is fsync'ed and renamed into place, so the previous file stays whole
 * until the new one is, and a symbolic link at the name is replaced, never written through.
 * A command declares its inputs, then its outputs: an output that is one of the inputs (by
 * device and inode: any spelling, hard or symbolic link), two outputs naming one file, and an
 * output that is a folder, FIFO or device are refused with FP8RUN_ERR_INVALID_ARG (IO for a
 * missing folder), naming both files. `what` says what the file is in messages
 * ("training log"). */
typedef struct fp8run_files fp8run_files;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_files_create(fp8run_files **out);
FP8RUN_API void fp8run_files_destroy(fp8run_files *f);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_files_input(fp8run_files *f, const char *path, const char *what);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_files_output(fp8run_files *f, const char *path, const char *what);
/* Read all of a regular file of at most max_bytes into *data (malloc'ed, NUL-terminated after
 * *len bytes; free it with fp8run_file_free). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_read(const char *path, const char *what, uint64_t max_bytes,
                                                           char **data, size_t *len);
FP8RUN_API void fp8run_file_free(void *data);
/* Replace path's contents with the n_parts buffers, one after the other, under the write rule. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_write(const char *path, const void *const *parts,
                                                            const size_t *sizes, int n_parts);
/* The same in steps, for files that must replace their previous versions together: open
 * creates the temporary file, write appends, finish fsyncs it (the data is safe, not yet in
 * place), commit renames it over path (finishing first if needed) and frees the writer, whether
 * it succeeds or not; abort (NULL allowed) removes the temporary file and frees it. After a
 * failed write or finish, abort. */
typedef struct fp8run_file_writer fp8run_file_writer;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_writer_open(const char *path, fp8run_file_writer **out);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_writer_write(fp8run_file_writer *w, const void *data, size_t n);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_writer_finish(fp8run_file_writer *w);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_file_writer_commit(fp8run_file_writer *w);
FP8RUN_API void fp8run_file_writer_abort(fp8run_file_writer *w);

/* ============================================================================================
 * Models
 * ========================================================================================== */

typedef struct fp8run_model fp8run_model;

/* Load an ONNX model file (external data relative to its folder; paths that leave the folder
 * are refused). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_load(const char *path, fp8run_model **out);
/* Load from memory (copied; the buffer may be freed afterwards). `name` names the model in
 * messages only (may be NULL: "<memory>"): such a model has no path, and checkpoints of its
 * sessions record none. External data is refused. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_load_buffer(const void *data, size_t len, const char *name,
                                                  fp8run_model **out);
FP8RUN_API void fp8run_model_destroy(fp8run_model *m);
/* Last error on this model; never NULL. */
FP8RUN_API const char *fp8run_model_error(const fp8run_model *m);
/* The file it was loaded from; NULL for a buffer. */
FP8RUN_API const char *fp8run_model_path(const fp8run_model *m);

/* Graph inputs and outputs in model order (counts are 0 for a NULL model). */
FP8RUN_API int fp8run_model_input_count(const fp8run_model *m);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_input(const fp8run_model *m, int i, fp8run_value_info *info);
FP8RUN_API int fp8run_model_output_count(const fp8run_model *m);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_output(const fp8run_model *m, int i, fp8run_value_info *info);

/* Parameters: the float initializers (what training can update), in model order; for a compiled
 * graph (.fbs) the ones it records. */
FP8RUN_API int fp8run_model_param_count(const fp8run_model *m);
/* Elements in all of them. */
FP8RUN_API int64_t fp8run_model_param_elements(const fp8run_model *m);
/* How many of them held NaN or Inf values when the model was loaded (each also logged as a
 * warning naming it), and the i-th one's name (owned by the model) with its count of such
 * values; NULL past the end. `fp8run train --strict-weights` refuses such a model. */
FP8RUN_API int fp8run_model_nonfinite_params(const fp8run_model *m);
FP8RUN_API const char *fp8run_model_nonfinite_param(const fp8run_model *m, int i, int64_t *count);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_param(const fp8run_model *m, int i, fp8run_value_info *info);
/* Every float initializer in model order, trained or not. *trained (may be NULL): 1 for a
 * parameter. *why (may be NULL; a string owned by the model): where a parameter came from
 * ("parameter", "parameter, un-folded from 'val_93' (Transpose)", "float initializer") or why
 * another is not trained ("buffer", "constant tensor", "constant folded by the exporter",
 * "scalar", "feeds only non-differentiable inputs of Pow", "additive mask", "folded by the
 * exporter from parameter '...' ...: that parameter is not trained"). The rule is in README.md
 * ("Which initializers are trained"). */
FP8RUN_API int fp8run_model_float_initializer_count(const fp8run_model *m);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_float_initializer(const fp8run_model *m, int i, fp8run_value_info *info,
                                                        int *trained, const char **why);
/* Copy parameter `name` (float32 or converted from float16/bfloat16/float64) into dst, which
 * holds `count` floats; count must equal the parameter's element count. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_get_param(fp8run_model *m, const char *name, float *dst, size_t count);
/* Overwrite a float32 parameter with count floats from src (sessions created later see it). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_set_param(fp8run_model *m, const char *name, const float *src,
                                                size_t count);
/* Put a training checkpoint's weights into the model's parameters (every "param" tensor of
 * the checkpoint must match a float32 parameter by name and shape). *n_applied (may be NULL)
 * counts them. Do this before fp8run_session_create when resuming, so frozen parameters agree
 * with the checkpoint, then fp8run_session_load. On error the tensors before the failing one
 * may already be applied: reload the model. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_apply_checkpoint(fp8run_model *m, const char *ckpt_path,
                                                       int *n_applied);
/* Write the model as ONNX (atomically; weights to "<file>.data" beyond 1 GiB). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_save(const fp8run_model *m, const char *path);
/* Write the ONNX model this model stands for: for a compiled graph (.fbs) the original model it
 * was compiled from, with the compiled graph's current weights under the original names and
 * layouts (what a session's export writes: apply a checkpoint first to export its weights); for
 * an ONNX model the same as fp8run_model_save. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_export(const fp8run_model *m, const char *path);

/* What the file says about itself. Strings point into the model ("" when the file has none). */
typedef struct fp8run_model_info {
    size_t struct_size;
    const char *producer_name, *producer_version;
    const char *graph_name;
    int64_t ir_version;
    int n_opsets;              /* fp8run_model_opset */
    int n_nodes;
    int n_initializers;        /* all of them: parameters, other constants, FP8 scaling state */
    uint64_t initializer_bytes;/* their data */
    int n_op_types;            /* distinct op types of the nodes: fp8run_model_op */
    int compiled;              /* 1: a compiled graph (.fbs, fp8run compile) */
} fp8run_model_info;

/* (A function named fp8run_model_info would clash with the struct's typedef name.) */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_get_info(const fp8run_model *m, fp8run_model_info *info);
/* Opset i: *domain ("" is the default domain, ai.onnx; points into the model) and *version
 * (either may be NULL). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_opset(const fp8run_model *m, int i, const char **domain, int64_t *version);

/* One entry of the op histogram. */
typedef struct fp8run_op_info {
    size_t struct_size;
    const char *op_type;       /* "MatMul"; "domain::Op" outside the default domain */
    int count;                 /* nodes of this type */
} fp8run_op_info;
/* Op type i of the histogram: most frequent first, equal counts by name. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_op(const fp8run_model *m, int i, fp8run_op_info *info);

/* ============================================================================================
 * Preparing a model and running its forward pass (CPU)
 * ========================================================================================== */

/* Which concrete shapes to prepare for. Symbolic dims get their values from dim_names /
 * dim_values, then from the shapes the inputs will be fed with (input_names / input_ranks /
 * input_dims: parallel arrays of n_inputs entries, dims of input i at input_dims[i]); every
 * graph input dim must end up known. */
typedef struct fp8run_prepare_config {
    size_t struct_size;
    const char *const *dim_names;   /* symbolic dims to fix, values >= 0 (default none) */
    const int64_t *dim_values;
    int n_dims;
    const char *const *input_names; /* shapes of inputs (default none) */
    const int *input_ranks;
    const int64_t *const *input_dims;
    int n_inputs;
} fp8run_prepare_config;

FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_prepare_config_init(fp8run_prepare_config *cfg, size_t size);

/* What preparation did. */
typedef struct fp8run_prepare_stats {
    size_t struct_size;
    int identities_removed;    /* Identity nodes rewired away */
    int nodes_folded;          /* nodes computed once at preparation (shape chains, constants) */
    int nodes_removed;         /* nodes dropped, the folded ones included */
} fp8run_prepare_stats;

/* A copy of m prepared for static shapes (cfg NULL: the model's own): Identity removal, shape
 * inference with constant folding, dead-node elimination, every value with a static shape. The
 * result is a model like any other (inspect it, save it; its inputs and outputs carry the
 * concrete dims, symbolic names kept). A dim that stays unknown, or a cfg name the model does
 * not have, is an error naming it. stats may be NULL. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_prepare(const fp8run_model *m, const fp8run_prepare_config *cfg,
                                              fp8run_model **out, fp8run_prepare_stats *stats);

/* Inference: a model prepared for one set of input shapes with a CPU executor, run on host
 * tensors. It keeps its own copy of the model. */
typedef struct fp8run_forward fp8run_forward;

FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_forward_create(const fp8run_model *m, const fp8run_prepare_config *cfg,
                                               fp8run_forward **out);
FP8RUN_API void fp8run_forward_destroy(fp8run_forward *f);
/* Last error on this handle; never NULL. */
FP8RUN_API const char *fp8run_forward_error(const fp8run_forward *f);
/* The prepared graph inputs (concrete shapes), in model order. */
FP8RUN_API int fp8run_forward_input_count(const fp8run_forward *f);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_forward_input(const fp8run_forward *f, int i, fp8run_value_info *info);
/* Copy t's data into the input t->name; its dtype and shape must be the prepared input's, and
 * nbytes their byte size (FP8RUN_ERR_SHAPE naming the input and both shapes otherwise). The
 * input keeps the value for later runs until set again. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_forward_set_input(fp8run_forward *f, const fp8run_tensor *t);
/* Run once; every input must have been set. A kernel error names the node. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_forward_run(fp8run_forward *f);
/* Graph outputs in model order, after a successful run: *out gets name, dtype, shape and
 * data, which point into f and stay valid until the next set_input, run or destroy. */
FP8RUN_API int fp8run_forward_output_count(const fp8run_forward *f);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_forward_output(const fp8run_forward *f, int i, fp8run_tensor *out);

/* ============================================================================================
 * Generated models
 * ========================================================================================== */

/* A Llama-style decoder as a PyTorch export writes it (opset 23): token embedding, per layer
 * RMSNorm, rotary attention with grouped-query heads (weights [in, out]), causal mask, SwiGLU
 * MLP; final RMSNorm and an untied LM head. Input input_ids int64 [batch, seq], output logits
 * float32 [batch, seq, vocab]. Weights N(0, 0.02) (output projections 0.02 / sqrt(2 layers)),
 * norm gains 1, deterministic from the seed. For benchmarks and tests at sizes no file has. */
typedef struct fp8run_llama_config {
    size_t struct_size;
    int64_t dim;               /* model width (split into heads of even size) */
    int64_t layers;
    int64_t heads;
    int64_t kv_heads;          /* divides heads */
    int64_t ffn;               /* MLP width */
    int64_t vocab;
    int64_t max_seq;           /* longest sequence the rotary tables cover */
    uint64_t seed;
} fp8run_llama_config;

/* The "tiny" preset (64 / 2 layers / 4 heads / 2 kv heads / ffn 176 / vocab 128 / max_seq 256,
 * seed 1) with struct_size = size. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_llama_config_init(fp8run_llama_config *cfg, size_t size);
/* Set the shape fields to a preset: "tiny", "125m" (768 / 12 / 12 / 4 / 2048 / 32768, max_seq
 * 2048) or "1b" (2048 / 16 / 16 / 8 / 5632 / 32768, max_seq 2048). The seed is left as it is.
 * Another name is FP8RUN_ERR_INVALID_ARG listing them. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_llama_config_preset(fp8run_llama_config *cfg, const char *preset);
/* Build the model (in memory: fp8run_model_save writes it, weights to "<file>.data" beyond
 * 1 GiB). Inconsistent sizes are FP8RUN_ERR_INVALID_ARG saying which. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_generate_llama(const fp8run_llama_config *cfg, fp8run_model **out);

/* ============================================================================================
 * Training configuration
 * ========================================================================================== */

typedef struct fp8run_train_config {
    size_t struct_size;
    /* ---- shapes ---- */
    int64_t batch;               /* B >= 1 windows per micro-batch (default 1) */
    int64_t seq_len;             /* T >= 1 tokens per window (default 1) */
    int grad_accum;              /* K >= 1 micro-batches per step (default 1). On a GPU, K > 1
                                    also keeps the weights' FP8/bf16 copies from one micro-batch
                                    to the next (FP8RUN_WEIGHT_CACHE): give the K the steps use */
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
    double grad_clip;            /* clip the global gradient norm to this; 0: off (default) */
    uint64_t seed;               /* the trainer's generator (default 0) */
    int max_bad_steps;           /* non-finite steps in a row before FP8RUN_ERR_NUMERIC (10) */
    int eval_only;               /* 1: no backward graph and no optimizer: evaluation only */
    /* ---- appended after 0.1.0: a caller whose struct_size ends before them gets the defaults ---- */
    int fuse_attention;          /* 1 (default): unfused attention (MatMul, scale, causal mask,
                                    Softmax, MatMul) becomes one fused node per layer, and the
                                    rotary embedding of q and of k one fused node each */
    int fuse_swiglu;             /* 1 (default): the SwiGLU activation Mul(Mul(gate, Sigmoid(gate)),
                                    up) becomes one fused node per layer */
    const char *recompute;       /* "none" (default) | "attention" | "mlp" | "full": the backward
                                    recomputes that part of each transformer block instead of
                                    keeping its activations (bit-identical results) */
    /* ---- data parallel over NCCL (CUDA; NCCL is loaded at run time: libnccl.so.2, or
     *      $FP8RUN_NCCL_LIBRARY) ---- */
    int world_size;              /* > 0: this session is rank `rank` of world_size data-parallel
                                    ranks (default 0: alone). Each step's windows are this rank's
                                    share of the global batch; gradients (averaged), the loss
                                    (averaged) and FP8 amaxes (max) are reduced across ranks, so
                                    every rank takes the same step. Only rank 0 writes checkpoints
                                    and exports (call save/export on every rank all the same) */
    int rank;                    /* 0 <= rank < world_size (default 0) */
    int local_rank;              /* the CUDA device of this rank (default 0) */
    void *nccl_comm;             /* an ncclComm_t of the caller's (not destroyed), or NULL (default):
                                    the session makes one, rank 0 sending its id over TCP on
                                    $MASTER_ADDR:$MASTER_PORT (default 127.0.0.1:29500) */
    int shard_optimizer;         /* 1: ZeRO-1, each rank keeps the optimizer state of its share of
                                    the parameters only (default 0) */
    const char *optimizer_state; /* AdamW moments "fp32" (default), "bf16", or "fp8" (E4M3, one
                                    float32 scale per 128 elements, v kept as sqrt(v)) */
    const char *master_weights;  /* "fp32" (default) or "bf16": AdamW rounds the parameters to
                                    bf16 stochastically after each step (keyed by seed) */
    int lora_rank;               /* 0 (default): no LoRA; R >= 1: rank-R adapters on the Linears
                                    whose weight name matches lora_targets, the rest frozen */
    double lora_alpha;           /* the adapters' update is scaled by lora_alpha / lora_rank (8) */
    const char *lora_targets;    /* POSIX extended regex over weight names (needed with a rank) */
    double lora_dropout;         /* dropout on the adapters' input, p in [0, 1) (default 0): training
                                    only, masks keyed by seed, step and micro-batch */
    const char *attention;       /* the fused attention's GPU kernels: "auto" (default: cuDNN 9's
                                    fused flash attention where it loads and takes the node,
                                    fp8run's kernels elsewhere), "cudnn" (cuDNN only, loaded at run
                                    time: libcudnn.so.9, or $FP8RUN_CUDNN_LIBRARY; an error where
                                    it cannot run) or "fp8run" (fp8run's kernels only). fp8run_session_attention
                                    says which ran */
    int shard_gradients;         /* 1: ZeRO-2, shard_optimizer and each gradient reduced to its
                                    parameter's owner only, which alone accumulates micro-batches
                                    (default 0) */
    int fuse_attention_io;       /* 1 (default): the Split of the fused Q/K/V projection, the head
                                    Transposes and the RoPE around each fused attention become part
                                    of it (one ai.fp8run::AttentionQKV node, passes/attention_io.h;
                                    1B fp8 on an H200: 181.7 -> 163.9 ms per step); 0 keeps them */
    int fp8_fast_accum;          /* 1 (default): on a GPU, the per-tensor fp8 forward GEMMs (Linear)
                                    accumulate in the FP8 tensor cores' fast mode (cuBLASLt's
                                    FAST_ACCUM, as Transformer Engine and torchao do for the
                                    forward: about 1e-3 relative off the exact sum); 0: exact.
                                    The gradients' GEMMs are always exact */
    int fuse_rmsnorm;            /* 1 (default): each RMSNorm an exporter wrote out (Pow/ReduceMean/
                                    Add/Sqrt/Reciprocal/Mul, Rsqrt, Gemma's 1 + w) becomes one
                                    ai.fp8run::RMSNormalization node; 0 keeps the ops */
    int narrow_activations;      /* 1 (default): in bf16/fp8 precision the activations and
                                    gradients only the bf16/fp8 Linears and the fused ops read
                                    (norm outputs, projections, SwiGLU, attention O, logits and
                                    their gradients) are written in bfloat16, as autocast does
                                    (half the bytes written, read and saved); the residual
                                    stream stays float32; 0 keeps everything float32 */
    int deterministic;           /* 1: on a GPU, a run repeats bit for bit: cuDNN's attention runs
                                    only through engines without CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
                                    (its dP-workspace backward; fp8run's kernels for a node no such
                                    engine takes) and the GEMMs use cuBLASLt's heuristic algorithm
                                    (no timing). 0 (default): fastest */
    int fuse_residual_norm;      /* 1 (default): each residual Add and the RMSNorm (LayerNorm) reading
                                    its sum become one ai.fp8run::AddRMSNorm (AddLayerNorm) node
                                    (forward and backward; not under recompute, whose regions are
                                    found from the Adds); 0 keeps them */
    int shard_parameters;        /* 1: ZeRO-3 / FSDP-style, each of world_size ranks keeps its slices of
                                    the masters, optimizer state and gradients (fp8run_shard_plan), the
                                    layers' weights all-gathered as FP8 codes one layer ahead. Planned
                                    (fp8run_model_predict_memory) and checkpointed in the per-name
                                    format; a session with it is refused (FP8RUN_ERR_UNSUPPORTED)
                                    until it has run on several GPUs (default 0) */
    const char *packing;         /* SFT data: "on" (default; NULL too) several examples per window,
                                    attention kept within each; "off" one per window, padded. Read
                                    by fp8run train/eval and Python when they open an SFT file */
    int sft;                     /* 1: the session trains on SFT batches (fp8run_session_*_sft):
                                    only target tokens count, token-weighted over the micro-batches
                                    of a step, and every fused attention node gets the batch's
                                    segment ids (examples do not see each other). 0 (default) */
    const char *chunked_lm_head; /* "on": the LM head Linear and the cross-entropy run as one op
                                    over chunks of tokens, so the [tokens, vocab] logits and
                                    their gradient are never whole in memory (fp32/bf16 heads
                                    without bias); "off"; "auto" (default; NULL too): on when
                                    training on a GPU, off on the CPU */
    int sft_max_examples;        /* SFT batches: the most examples one window holds (fp8run_sft_info's
                                    max_examples of the files the session will see; fp8run train/eval
                                    and Python set it). On a GPU it sizes cuDNN's variable-length
                                    attention: a plan has a sequence slot per possible example, and
                                    every empty one costs work in each attention call. A batch with
                                    more is refused. 0 (default): 63, what fp8run's packer allows */
} fp8run_train_config;

/* Fill *cfg with the defaults above and set cfg->struct_size = size. Pass sizeof *cfg. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_train_config_init(fp8run_train_config *cfg, size_t size);

/* ---- the options' table ----
 * The library declares every field of fp8run_train_config once, with its type, place, range,
 * choices, command-line flag and help. The `fp8run` commands build their parsers and help from
 * this table and the Python binding its struct; a host may use it the same way. */
typedef enum fp8run_option_type {
    FP8RUN_OPTION_INT = 0,        /* int */
    FP8RUN_OPTION_INT64 = 1,      /* int64_t */
    FP8RUN_OPTION_UINT64 = 2,     /* uint64_t */
    FP8RUN_OPTION_DOUBLE = 3,     /* double */
    FP8RUN_OPTION_STRING = 4,     /* const char * (NULL allowed) */
    FP8RUN_OPTION_CHOICE = 5,     /* const char *, one of choices */
    FP8RUN_OPTION_BOOL = 6,       /* int, 0 or 1 */
    FP8RUN_OPTION_DIM_NAMES = 7,  /* const char *const * (not settable as text) */
    FP8RUN_OPTION_DIM_VALUES = 8, /* const int64_t * (not settable as text) */
    FP8RUN_OPTION_POINTER = 9     /* void *, opaque (nccl_comm; not settable as text) */
} fp8run_option_type;

/* Which `fp8run` commands take an option's flag (fp8run_option_info.commands). */
#define FP8RUN_OPTION_TRAIN 0x01u
#define FP8RUN_OPTION_EVAL 0x02u
#define FP8RUN_OPTION_COMPILE 0x04u
#define FP8RUN_OPTION_INFO 0x08u
#define FP8RUN_OPTION_BENCH 0x10u
#define FP8RUN_OPTION_COMPILED 0x100u /* a compiled graph fixes it (training one refuses the flag) */

typedef struct fp8run_option_info {
    size_t struct_size;
    const char *name;             /* the field of fp8run_train_config, also its JSON key */
    int type;                     /* fp8run_option_type */
    size_t offset, size;          /* the field's place in fp8run_train_config */
    double min, max;              /* numbers: the range (inclusive) */
    const char *const *choices;   /* CHOICE: NULL-terminated, else NULL */
    const char *flag;             /* "--pad-multiple"; a BOOL's flag sets the opposite of its
                                     default ("--no-fuse"); NULL: not on the command line */
    const char *metavar;          /* the flag's value ("N"), NULL for BOOL and CHOICE */
    unsigned commands;            /* FP8RUN_OPTION_* */
    const char *help;             /* one line */
} fp8run_option_info;

/* Entries of the table, in the struct's order (the first is batch; struct_size has none). */
FP8RUN_API int fp8run_train_config_option_count(void);
/* Entry i, 0 <= i < count; FP8RUN_ERR_INVALID_ARG otherwise. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_train_config_option(int i, fp8run_option_info *info);
/* The entry whose field name or flag is `name` ("pad_multiple" or "--pad-multiple"); -1 if none. */
FP8RUN_API int fp8run_train_config_find(const char *name);
/* Set an option from text, checking its range or choices: `name` is a field or a flag, and the
 * error (FP8RUN_ERR_INVALID_ARG) names it as given ("--pad-multiple: '5000' is not an integer
 * in 1..4096"). A BOOL given by its flag takes no value (NULL) and sets the opposite of its
 * default; by its field name it takes "0" or "1". A CHOICE is set to the library's own static
 * string, any other string to value itself (not copied). DIM_* fields are refused. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_train_config_set(fp8run_train_config *cfg, const char *name, const char *value);
/* The value of entry i of cfg as text ("16", "delayed", "1e-08", "" for a NULL string) into buf. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_train_config_get(const fp8run_train_config *cfg, int i, char *buf, size_t len);
/* The choices of an enumerated setting as a NULL-terminated list: an option's field name
 * ("recipe", "precision", ...) or "device" (fp8run_session_create's); NULL for another name. */
FP8RUN_API const char *const *fp8run_choices(const char *name);

/* ---- environment variables ---- */
/* Every environment variable fp8run reads (the library's, the CLI's, the Python package's and
 * the scripts'), from one table (graph/env_knobs.def; `fp8run info --env` prints it). */
typedef struct fp8run_env_info {
    size_t struct_size;
    const char *name;   /* "FP8RUN_PROFILE" */
    const char *type;   /* "BOOL", "INT", "NUMBER", "SIZE", "PATH" or "TEXT" */
    const char *dflt;   /* what an unset or empty variable means, as text */
    const char *reader; /* "LIBRARY", "CLI", "PYTHON", "SCRIPTS", "TESTS" or "CI" */
    const char *help;   /* one line */
    const char *value;  /* its value now; NULL when unset */
} fp8run_env_info;

/* Entries of the table. */
FP8RUN_API int fp8run_env_count(void);
/* Entry i, 0 <= i < count; FP8RUN_ERR_INVALID_ARG otherwise. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_env_knob(int i, fp8run_env_info *info);
/* The value of the table's variable `name` ("FP8RUN_PYTHON"); NULL when it is unset or the table
 * has no such variable: a host reads fp8run's variables through the table, so none goes
 * unlisted. */
FP8RUN_API const char *fp8run_env_get(const char *name);

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
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_compile(const fp8run_model *m, const fp8run_train_config *cfg,
                                              fp8run_report **out);
FP8RUN_API void fp8run_report_destroy(fp8run_report *r);
FP8RUN_API const char *fp8run_report_precision(const fp8run_report *r); /* "fp8" | "bf16" | "fp32" */
FP8RUN_API int fp8run_report_layer_count(const fp8run_report *r);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_report_layer(const fp8run_report *r, int i, fp8run_layer_info *info);
FP8RUN_API int fp8run_report_skipped_count(const fp8run_report *r);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_report_skipped(const fp8run_report *r, int i, fp8run_skipped_info *info);
/* Linear layers per precision (fused members counted each): precision "fp8", "bf16", "fp32". */
FP8RUN_API int fp8run_report_linears(const fp8run_report *r, const char *precision);
/* The whole report as text, one layer per paragraph (as `fp8run info` prints it). */
FP8RUN_API const char *fp8run_report_text(const fp8run_report *r);

/* One pass of the training pipeline (the graph passes before autodiff, in the order they ran:
 * `fp8run info` prints them). Reports of fp8run_model_compile and of sessions built from an
 * ONNX model have one per pass; those read from a compiled graph have none. */
typedef struct fp8run_pass_info {
    size_t struct_size;
    const char *name;            /* "fuse_attention" */
    const char *what;            /* what it does, one line */
    int ran;                     /* 0: turned off by its option */
    int changed;                 /* what it fused, removed or rewrote (nodes, parameters, Linears) */
    const char *detail;          /* "2 fused", "off (fuse_attention)" */
} fp8run_pass_info;
/* For a report of a model compiled for training (fp8run_model_compile, fp8run_session_report):
 * the nodes of the training graph off the fast path, one line per kind with the reason and the
 * first node's name (fp8run_session_slow_path, without times); NULL for a compiled graph's. */
FP8RUN_API const char *fp8run_report_slow_path(const fp8run_report *r);
FP8RUN_API int fp8run_report_pass_count(const fp8run_report *r);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_report_pass(const fp8run_report *r, int i, fp8run_pass_info *info);

/* Delayed-scaling state of one FP8 operand (x, w or dy of an fp8 Linear). */
typedef struct fp8run_scaling_info {
    size_t struct_size;
    const char *layer;           /* the Linear (fp8run_layer_info.name) */
    const char *operand;         /* "x" | "w" | "dy" */
    const char *format;          /* "e4m3" | "e5m2" */
    double scale;                /* the scale the next step quantizes with (1 while fresh) */
    double amax;                 /* the amax the next scale is computed from: the history's max
                                    or the most recent one (0 while fresh) */
    int64_t updates;             /* amaxes recorded so far (0: fresh) */
} fp8run_scaling_info;

/* The delayed recipe's scaling state, one entry per operand that has one (none under the other
 * recipes): fresh for fp8run_model_compile, the session's state when fp8run_session_report was
 * called, the recorded state for a compiled graph (fp8run_model_report). */
FP8RUN_API int fp8run_report_state_count(const fp8run_report *r);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_report_state(const fp8run_report *r, int i, fp8run_scaling_info *info);

/* ============================================================================================
 * Compiled graphs (.fbs)
 * ========================================================================================== */

/* A compiled graph is a model prepared for one batch x seq_len and compiled for FP8 or BF16
 * training, written as a valid ONNX file: fp8run_model_load reads it like any model
 * (fp8run_model_info.compiled is 1) and fp8run_session_create trains it without compiling again
 * (with its batch and seq_len only, like a TensorRT engine; its precision and recipe are fixed).
 * Its parameters (fp8run_model_param) are the ones it records; its other float initializers are
 * folded constants and scaling state. Sessions, checkpoints and export use the original
 * model's names, so checkpoints move between a compiled graph and its ONNX model. */

/* Compile m (an ONNX model) with cfg's precision ("fp8" or "bf16"), recipe and model options
 * for cfg's batch x seq_len exactly as fp8run_session_create does, and write the compiled graph
 * to path (atomically). The file is read back and checked; *report (may be NULL) receives its
 * recorded report (free it with fp8run_report_destroy). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_write_compiled(const fp8run_model *m, const fp8run_train_config *cfg,
                                                     const char *path, fp8run_report **report);
/* What a compiled graph is for, read from its metadata only (cheap: what a host needs before
 * creating a session): batch, seq_len and precision ("fp8" | "bf16", a static string); any
 * pointer may be NULL. FP8RUN_ERR_INVALID_ARG for a model that is not compiled,
 * FP8RUN_ERR_PARSE naming the metadata key that is missing or malformed. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_compiled_for(const fp8run_model *m, int64_t *batch, int64_t *seq_len,
                                                   const char **precision);
/* The recorded report of a compiled graph, with its scaling state and fp8run_report_compiled.
 * Decodes and checks the whole file as training it would (FP8RUN_ERR_PARSE naming the key at
 * fault). FP8RUN_ERR_INVALID_ARG for an ONNX model (use fp8run_model_compile). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_report(const fp8run_model *m, fp8run_report **out);

/* What a compiled graph records besides the layers. Strings and arrays point into the report. */
typedef struct fp8run_compiled_info {
    size_t struct_size;
    int format;                  /* version of the file format */
    int64_t batch, seq_len;      /* the shape it is specialized to */
    const char *tokens_input;    /* the input token ids are fed to */
    const char *train_regex;     /* trained parameters as given when compiling (NULL: all) */
    const char *freeze_regex;    /* ... and frozen ones (NULL: none) */
    int n_dims;                  /* other symbolic dims fixed when compiling */
    const char *const *dim_names;
    const int64_t *dim_values;
    int n_ties;                  /* initializers re-tied to an embedding table (a tied LM head
                                    the exporter had untied): tie_copies[i] follows
                                    tie_sources[i], transposed when tie_transposed[i] */
    const char *const *tie_copies;
    const char *const *tie_sources;
    const int *tie_transposed;
    int original_nodes;          /* the original model it holds (export and checkpoints use it) */
    int original_initializers;
} fp8run_compiled_info;

/* FP8RUN_ERR_INVALID_ARG for a report that does not come from a compiled graph. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_report_compiled(const fp8run_report *r, fp8run_compiled_info *info);

/* ============================================================================================
 * Sessions: training and evaluation
 * ========================================================================================== */

typedef struct fp8run_session fp8run_session;
typedef struct fp8run_data_loader fp8run_data_loader;

/* Build a session for `m` with `cfg` (NULL: the defaults) on a backend:
 *   "cpu"         the CPU reference backend (float32 with FP8/BF16 rounding emulated);
 *   "cuda"        the CUDA backend (device 0): FP8RUN_ERR_UNAVAILABLE when the library was built
 *                 without it or no usable GPU answers (the message says why);
 *   "auto"/NULL   CUDA when usable, else cpu; the choice is logged at INFO level.
 * The model is copied: it may be changed or destroyed afterwards. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_create(const fp8run_model *m, const char *backend,
                                               const fp8run_train_config *cfg, fp8run_session **out);
FP8RUN_API void fp8run_session_destroy(fp8run_session *s);
/* Last error on this session; never NULL. */
FP8RUN_API const char *fp8run_session_error(const fp8run_session *s);
/* "cpu" or "cuda" (what "auto" chose). */
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
    int available;               /* 1: the fields above describe step `step`; 0: no statistics
                                    (fp8run_session_poll_stats found none ready) */
} fp8run_step_stats;

/* One optimizer step: `windows` holds grad_accum micro-batches of B x (T+1) token ids of type
 * dtype (FP8RUN_DTYPE_INT64 or _INT32); `count` is the number of ids and must equal
 * grad_accum * B * (T+1). stats may be NULL. A skipped step (non-finite values) is FP8RUN_OK
 * with stats->skipped = 1 unless it is more than max_bad_steps in a row: FP8RUN_ERR_NUMERIC
 * (stats filled in all the same; the session stays usable). Bad arguments or token ids
 * change nothing. Any other failure (one inside the step) leaves the session broken: later
 * steps, evals, parameter reads/writes, saves, loads and exports fail with FP8RUN_ERR_STATE
 * (the accessors and destroy still work); resume from a checkpoint in a new session. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_train_step(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                                   size_t count, fp8run_step_stats *stats);
/* ---- Steps that do not wait for their statistics ----
 * fp8run_session_train_step waits for the step to finish (on a GPU: the host idles until the
 * device is done, then queues the next step while the device idles). These two calls let the
 * host run ahead: train_step_async queues a step and returns as soon as the token windows are
 * copied; poll_stats hands out the statistics of queued steps, oldest first, each exactly as
 * train_step would have returned it. Reading statistics is what synchronizes: poll only as
 * often as you need numbers (fp8run train polls every --log-every steps). On the CPU a step
 * runs inside train_step_async; only the hand-out differs.
 * Errors found on the device are reported late: by the poll of the step they belong to, a
 * data error a kernel detected (e.g. an index out of range, naming the node; the session is
 * then broken) or FP8RUN_ERR_NUMERIC for more than max_bad_steps skipped steps in a row (the
 * steps queued after it have run all the same; the session stays usable). Evaluation, saving,
 * loading, export, parameter and FP8-statistics reads and the report first read back every
 * queued step (keeping the statistics for poll_stats), so the same errors can surface there.
 * fp8run_session_train_step refuses while statistics wait to be polled. */
#define FP8RUN_MAX_QUEUED_STEPS 64 /* steps queued and not polled, at most */
/* Queue one step (arguments as fp8run_session_train_step); *step (may be NULL) gets its index.
 * Bad arguments or token ids change nothing; FP8RUN_ERR_STATE when FP8RUN_MAX_QUEUED_STEPS
 * steps wait to be polled. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_train_step_async(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                                         size_t count, int64_t *step);
/* The statistics of the oldest queued step not polled yet, and that step's status (see above).
 * wait = 1: wait for the device; wait = 0: stats->available = 0 when it has not finished yet.
 * stats->available = 0 when nothing is queued. stats must be large enough to hold `available`. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_poll_stats(fp8run_session *s, int wait, fp8run_step_stats *stats);
/* Steps queued whose statistics were not polled yet. */
FP8RUN_API int fp8run_session_steps_queued(const fp8run_session *s);

/* ---- SFT steps (a session created with config.sft = 1) ----
 * As train_step / train_step_async / eval with int64 windows, and beside them each token's
 * segment id and target flag (fp8run_data_next_sft's). The loss is next-token cross-entropy over
 * the labels whose token is a target of the same example: the mean over a step's target tokens,
 * weighted by token across its grad_accum micro-batches (gradients too), TRL's labels -100
 * convention; each example attends only to itself (the segment ids reach every fused attention
 * node; a model without one takes one example per window), and a position_ids input restarts
 * at each example. eval_sft: *n_targets (may be NULL) gets the labels that counted, the weight of
 * this batch's loss in a mean over several. A batch whose segment ids break their layout is
 * FP8RUN_ERR_INVALID_ARG and changes nothing. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_train_step_sft(fp8run_session *s, const int64_t *windows,
                                                                     const int32_t *segments, const uint8_t *targets,
                                                                     size_t count, fp8run_step_stats *stats);
/* all_targets > 0 (data parallel): the labels that count in the step's batches of every rank,
 * so that the mean is over all of them (each rank weighs its share); 0: this session's own. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_train_step_sft_async(fp8run_session *s, const int64_t *windows,
                                                                           const int32_t *segments,
                                                                           const uint8_t *targets, size_t count,
                                                                           int64_t all_targets, int64_t *step);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_eval_sft(fp8run_session *s, const int64_t *windows,
                                                               const int32_t *segments, const uint8_t *targets,
                                                               size_t count, double *loss, int64_t *n_targets);
/* 1 when packed examples see the positions they would see alone: the model takes position_ids
 * (restarted at each example) or a rotary embedding fp8run fused (only distances count); 0
 * when it computes absolute positions inside the graph (GPT-2's learned table), which then run
 * on across a packed window (packing off avoids that). */
FP8RUN_API int fp8run_session_sft_positions(const fp8run_session *s);
/* Loss of one micro-batch (B x (T+1) ids, count = B * (T+1)) without updating anything. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_eval(fp8run_session *s, const void *windows, fp8run_dtype dtype,
                                             size_t count, double *loss);
/* A model output of the last fp8run_session_eval (name NULL: the logits output), as float32:
 * info (may be NULL) gets its dtype and shape (info->name valid until the next call of this
 * function on s); dst (may be NULL to ask the shape only) receives count floats, count equal
 * to the output's element count. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_eval_output(fp8run_session *s, const char *name,
                                                    fp8run_value_info *info, float *dst, size_t count);

FP8RUN_API int64_t fp8run_session_batch(const fp8run_session *s);
FP8RUN_API int64_t fp8run_session_seq_len(const fp8run_session *s);
FP8RUN_API int fp8run_session_grad_accum(const fp8run_session *s);
/* The logits' last dim (token ids must be below it); 0 when unknown. */
FP8RUN_API int64_t fp8run_session_vocab(const fp8run_session *s);
/* Steps taken or skipped so far, queued ones included (a resumed session continues the count). */
FP8RUN_API int64_t fp8run_session_steps_done(const fp8run_session *s);
/* Skipped steps among those whose statistics were read back (all of them after a poll of the
 * last queued step, or a save). */
FP8RUN_API int64_t fp8run_session_steps_skipped(const fp8run_session *s);
/* The session's options as a JSON object (what checkpoints record); valid until the next call
 * of this function on s or its destruction. NULL on error. */
FP8RUN_API const char *fp8run_session_config_json(fp8run_session *s);
/* The compile report of this session (a copy; free it with fp8run_report_destroy). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_report(const fp8run_session *s, fp8run_report **out);
/* Where it runs: "CPU", or the GPU's name and compute capability. */
FP8RUN_API const char *fp8run_session_device(const fp8run_session *s);
/* The graph input the token ids are fed to. */
FP8RUN_API const char *fp8run_session_tokens_input(const fp8run_session *s);

typedef struct fp8run_memory_info {
    size_t struct_size;
    uint64_t planned_bytes;      /* what the session allocated for its steps: on a GPU the device
                                    memory (executors, optimizer state, workspace), on the CPU the
                                    executor pool plus parameters, gradients, optimizer state */
    uint64_t device_used_bytes;  /* the GPU's memory in use, from the driver (0 on the CPU) */
    uint64_t device_total_bytes; /* the GPU's memory (0 on the CPU) */
} fp8run_memory_info;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_memory(const fp8run_session *s, fp8run_memory_info *info);
/* With FP8RUN_PROFILE=1 in the environment when a GPU session was created: the time of every op
 * of the training graph over the steps so far, as a text table; NULL otherwise. Valid until
 * the next call on s. */
FP8RUN_API const char *fp8run_session_profile(fp8run_session *s);
/* The nodes of the session's training graph (forward and backward) that run off the fast path
 * (an attention not fused with its Q/K/V staging, the head Transposes, Split, Concat and RoPE
 * around it, a norm after a residual Add that no fusion took, an unfused q/k norm, ops the
 * fusions left), one line per kind with the reason, each kind's share of the step estimated
 * from every node's ceiling on this device, and a last line "warning: ..." when they take more
 * than 5% of it. (With FP8RUN_PROFILE=1, fp8run_session_profile ends with the same report on
 * the measured times.) NULL when it cannot be made. Valid until the next call on s. */
FP8RUN_API const char *fp8run_session_slow_path(fp8run_session *s);
/* Which kernels ran the fused attention (fp8run_train_config.attention) and why, counted over
 * the node runs so far: "cuDNN 9.14.0 (libcudnn.so.9) fused flash attention (64 of 64 runs)",
 * "fp8run kernels (--attention fp8run)", "fp8run kernels (<why cuDNN was not used>)", a mix,
 * or "CPU kernels"; where fp8run's Hopper (wgmma) kernels ran, the reason ends "; wgmma kernels
 * for N of its M runs". Valid until the next call on s. */
FP8RUN_API const char *fp8run_session_attention(fp8run_session *s);
/* How the GEMMs ran: on a GPU the cuBLASLt algorithms chosen ("cuBLASLt: 12 GEMM shapes, 9 timed
 * among up to 8 candidates, 3 took another than the heuristic's first (...)") and whether the fp8
 * forward GEMMs accumulate fast (fp8run_train_config.fp8_fast_accum); "CPU kernels (...)" on the
 * CPU. Valid until the next call on s. */
FP8RUN_API const char *fp8run_session_gemm(fp8run_session *s);
/* cuDNN as this library finds it, loading it if need be (no device needed): "cuDNN 9.19.0
 * (libcudnn.so.9)", "cuDNN unavailable: <why>", or that the build has no CUDA backend; *version
 * (may be NULL) gets cudnnGetVersion() (91900 for 9.19.0), 0 when it is not usable. */
FP8RUN_API const char *fp8run_cudnn_info(int *version);
/* What fused attention fp8run hands to that cuDNN on this machine's first GPU (its compute
 * capability; where there is none, the version's best on Hopper): "head dims multiples of 8 up
 * to 256 (D != Dv allowed), causal, key padding (seg_form padded), sliding window, softcap";
 * "" when cuDNN is not usable or the build has no CUDA backend. */
FP8RUN_API const char *fp8run_cudnn_attention_support(void);

/* One FP8 operand (x, w or dy) of an fp8 Linear as of the last step. A number the recipe does
 * not have is NaN, with has_amax / has_scale 0 and `note` saying why (never estimated). */
typedef struct fp8run_fp8_stat {
    size_t struct_size;
    const char *layer;           /* the Linear (fp8run_layer_info.name) */
    const char *operand;         /* "x" | "w" | "dy" */
    const char *recipe;          /* "delayed" | "current" | "block" */
    const char *format;          /* "e4m3" | "e5m2" */
    int64_t step;                /* the step the numbers are from (fp8run_step_stats.step); -1
                                    before the first */
    int has_amax;
    double amax;                 /* max |value| of the operand over the step's micro-batches */
    int has_scale;
    double scale;                /* the scale the step quantized with */
    double next_scale;           /* delayed: the scale the next step uses */
    double history_max;          /* delayed: the amax the next scale comes from */
    int64_t updates;             /* delayed: amaxes recorded so far */
    double fp8_max;              /* the format's largest finite value */
    double range_use;            /* amax * scale / fp8_max: above 1 the largest values clipped */
    int saturated;               /* range_use > 1 */
    const char *note;            /* why a number is missing; "" otherwise */
} fp8run_fp8_stat;

/* Take a snapshot of the FP8 statistics of the last step (one read of the device on a GPU):
 * *count = 3 per fp8 Linear (x, w, dy) in report order; 0 for fp32/bf16 and evaluation-only
 * sessions. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_fp8_stats(fp8run_session *s, int *count);
/* Entry i of the last snapshot; strings valid until the next snapshot or destroy. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_fp8_stat(const fp8run_session *s, int i, fp8run_fp8_stat *info);

/* Trained parameters under their original names and layouts (fused ones by their members). */
FP8RUN_API int fp8run_session_param_count(const fp8run_session *s);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_param(const fp8run_session *s, int i, fp8run_value_info *info);
/* Copy a trained parameter's FP32 values into dst (count floats = its element count). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_get_param(fp8run_session *s, const char *name, float *dst,
                                                  size_t count);
/* Overwrite a trained parameter with count floats (the optimizer state is left as it is). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_set_param(fp8run_session *s, const char *name, const float *src,
                                                  size_t count);

/* Write a checkpoint atomically: weights, optimizer and FP8 scaling state, step counters,
 * generator, the options, and (when data is non-NULL) the data loader's position. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_save(fp8run_session *s, const char *path,
                                             const fp8run_data_loader *data);
/* Restore a checkpoint written for the same model (any precision). When data is non-NULL the
 * checkpoint must hold a loader state, which is restored into it. Resuming is exact: later
 * losses equal those of the uninterrupted run bit for bit. A file that is missing or not a
 * checkpoint changes nothing; a failure while restoring (corrupt file, another model) leaves
 * the session broken (FP8RUN_ERR_STATE afterwards). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_load(fp8run_session *s, const char *path, fp8run_data_loader *data);
/* Write the original model with the trained weights (original names and layouts) as ONNX. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_export(fp8run_session *s, const char *path);
/* A LoRA session's adapters (config.lora_rank > 0) in PEFT's layout, which peft loads:
 * dir/adapter_model.safetensors (base_model.model.<module>.lora_A.weight [r, in] and lora_B.weight
 * [out, r], float32) and dir/adapter_config.json. fp8run_session_export writes the merged model
 * (W + lora_alpha / lora_rank * B A). FP8RUN_ERR_INVALID_ARG for a session without LoRA. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_export_adapter(fp8run_session *s, const char *dir);

/* The parameters of a session and the bytes they take where it trains. */
typedef struct fp8run_param_bytes {
    size_t struct_size;
    int64_t trained;         /* trained elements (a LoRA run: the adapters) */
    int64_t trained_bytes;   /* with their gradients and optimizer state */
    int64_t frozen;          /* a LoRA run's frozen base parameters (0 otherwise) */
    int64_t frozen_bytes;    /* as held on the device (or host) */
} fp8run_param_bytes;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_param_bytes(const fp8run_session *s, fp8run_param_bytes *out);

/* ============================================================================================
 * Training cost
 * ========================================================================================== */

/* Model FLOPs of training, counted as usual for decoder transformers (PaLM, appendix B):
 * 6 per token for every parameter a matrix product reads (forward 2, backward 4; embedding
 * tables, read by a Gather, are not counted), plus 12 x width x seq_len per token for attention
 * scores and values, width summed over the Softmax nodes (heads x head dim of the MatMul that
 * reads the probabilities). */
typedef struct fp8run_flops_info {
    size_t struct_size;
    int64_t matmul_params;       /* parameters read by MatMul/Gemm, directly or transposed */
    int attention_known;         /* 0: the model could not be prepared for cfg's shapes, the
                                    attention term is 0 */
    double attention_flops_per_token;
    double flops_per_token;      /* 6 x matmul_params + attention_flops_per_token */
    double flops_per_step;       /* flops_per_token x batch x seq_len x grad_accum */
} fp8run_flops_info;

/* For the model as it is and cfg's batch, seq_len, grad_accum and dims (the tokens input:
 * cfg->tokens_input, a compiled graph's recorded one, or the first int64/int32 input); m is not
 * changed. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_train_flops(const fp8run_model *m, const fp8run_train_config *cfg,
                                                  fp8run_flops_info *info);

/* The peak memory a training run of m under cfg will hold, predicted before it runs: the
 * trainer's graphs are built on the host and the executor's own liveness planner runs without
 * allocating. backend "cuda" (the GPU plan; needs fp8run built with CUDA, not a device), "cpu",
 * or NULL / "auto" (cuda when built with it). A GPU session checks the same prediction against
 * the device's free memory before allocating (FP8RUN_MEMORY_CHECK=0 skips the check). */
typedef struct fp8run_memory_report {
    size_t struct_size;
    int gpu;                     /* 1: the CUDA plan */
    uint64_t params;             /* FP32 parameters (GPU: every constant of the training graph) */
    uint64_t grads;              /* gradient accumulation buffers (CPU; GPU when grad_accum > 1);
                                    a step's gradients are graph outputs, inside activations,
                                    except on the GPU those accumulated in place by their
                                    weight-gradient GEMMs (FP8RUN_GRAD_ACCUM_INPLACE), counted
                                    here and not in activations */
    uint64_t optimizer_state;    /* in cfg's optimizer_state dtype (fp8: codes + block scales) */
    uint64_t fp8_weights;        /* GPU: FP8 codes of the weights the kernels keep */
    uint64_t activations;        /* the training graph's planned pool / arena (values, scratch) */
    uint64_t eval_activations;   /* GPU: the evaluation graph's arena (first validation on) */
    uint64_t inputs;             /* token / label buffers */
    uint64_t workspace;          /* GPU: cuBLASLt workspace */
    uint64_t total;              /* the sum */
    /* ---- appended: a caller whose struct_size ends before them does not get them ---- */
    uint64_t gathered_weights;   /* shard_parameters: the layers' weights gathered at once (the one
                                    computing and the one prefetched), in their gathered element */
    uint64_t lm_head_saved;      /* chunked LM head (on, or auto on a GPU): the bytes of logits and their gradient the
                                    training graph no longer holds whole (less its chunk buffer);
                                    already left out of activations */
    uint64_t lm_heads_fused;     /* chunked LM head: LM heads made LinearCrossEntropy (0: the head
                                    did not qualify, e.g. fp32 precision's MatMul head or an fp8 head) */
    char activations_peak[512];  /* GPU: where the training graph's arena peaks, what is live there
                                    by producing op, largest first ("" for the CPU plan) */
    char backward_passes[1024];  /* what the graph passes after autodiff did (the weight gradients'
                                    operands, --recompute, the FP8-emitting producers, the chunked
                                    LM head): "name: detail" a line, in the order they ran */
} fp8run_memory_report;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_predict_memory(const fp8run_model *m, const fp8run_train_config *cfg,
                                                     const char *backend, fp8run_memory_report *report);

/* ============================================================================================
 * Checkpoint files
 * ========================================================================================== */

typedef struct fp8run_checkpoint fp8run_checkpoint;

/* 1 when the file starts like an fp8run checkpoint (nothing else is checked), else 0. */
FP8RUN_API int fp8run_is_checkpoint(const char *path);
/* Read and verify a checkpoint (checksum, bounds) and keep what describes it. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_checkpoint_open(const char *path, fp8run_checkpoint **out);
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
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_checkpoint_param(const fp8run_checkpoint *c, int i, fp8run_value_info *info);
/* The data loader state it holds (*data points into c, *len bytes: what fp8run_data_set_state
 * takes). FP8RUN_ERR_INVALID_ARG when it holds none. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_checkpoint_data_state(const fp8run_checkpoint *c, const void **data, size_t *len);

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
    fp8run_dtype token_dtype;    /* raw files: UINT16 (default), UINT32, or UINT8 (a text
                                    file's bytes, for byte-level models) */
    int no_mmap;                 /* 1: read the file instead of mapping it */
    int64_t vocab_size;          /* > 0: every id of a batch must be below it (default 0) */
    int64_t max_batches;         /* sequential, > 0: wrap after this many batches (default 0) */
    int no_packing;              /* SFT files: 0 (default) several examples per window, 1 one
                                    example per window, padded */
} fp8run_data_config;

FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_config_init(fp8run_data_config *cfg, size_t size);

/* Open a token file for training batches. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_open(const char *path, const fp8run_data_config *cfg,
                                          fp8run_data_loader **out);
/* A validation loader: sequential, num_batches batches per pass (0: as many as the file holds);
 * each pass sees the same batches. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_open_val(const char *path, const fp8run_data_config *cfg,
                                              int64_t num_batches, fp8run_data_loader **out);
FP8RUN_API void fp8run_data_close(fp8run_data_loader *d);
FP8RUN_API const char *fp8run_data_error(const fp8run_data_loader *d);

/* The next count / (B*(T+1)) batches (count a positive multiple of B*(T+1); one step of
 * grad_accum micro-batches at once) as int64 or int32 windows. On error the loader's state is
 * as before the call. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_next(fp8run_data_loader *d, fp8run_dtype dtype, void *windows,
                                          size_t count);
/* Back to the first batch (generator re-seeded). */
FP8RUN_API void fp8run_data_reset(fp8run_data_loader *d);
FP8RUN_API int64_t fp8run_data_num_tokens(const fp8run_data_loader *d);
FP8RUN_API fp8run_dtype fp8run_data_token_dtype(const fp8run_data_loader *d); /* UINT16, UINT32 or UINT8 */
FP8RUN_API int64_t fp8run_data_batches_done(const fp8run_data_loader *d);   /* since open/reset */
FP8RUN_API int64_t fp8run_data_epoch(const fp8run_data_loader *d);          /* completed epochs */
/* Sequential: batches in one pass. Random: tokens / (B*T). */
FP8RUN_API int64_t fp8run_data_batches_per_epoch(const fp8run_data_loader *d);
/* Check every id of the whole file against vocab_size (FP8RUN_ERR_RANGE names the first bad one). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_check_tokens(fp8run_data_loader *d, int64_t vocab_size);

/* The loader's position as an opaque byte string of fp8run_data_state_size() bytes, to store
 * with your own checkpoints (fp8run_session_save stores it for you). */
FP8RUN_API size_t fp8run_data_state_size(void);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_get_state(const fp8run_data_loader *d, void *buf, size_t len);
/* Restore a state saved by a loader with the same file, batch shape and order (else
 * FP8RUN_ERR_INVALID_ARG; the loader is unchanged on error). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_set_state(fp8run_data_loader *d, const void *buf, size_t len);

/* ---- Supervised fine-tuning data (SFT token files) ----
 * `fp8run prepare --sft` (python/fp8run/sft.py, or fp8run_sft_prepare_bytes for byte-level
 * models) writes an SFT token file: examples of token ids, each token flagged a target (a label
 * the loss counts) or not; the layout is in python/fp8run/sft.py. fp8run_data_open recognizes it
 * by its header. Its batches are B windows of T + 1 tokens filled with examples: several per
 * window in file order (packing, the default), or one each (config.no_packing = 1), padded at
 * the end with the file's EOS id; an example longer than T + 1 tokens is cut. With them come,
 * per token, a segment id (int32: 1, 2, ... for the examples of the window, 0 on padding) and
 * a target flag (uint8). fp8run_data_next refuses an SFT file (the flags would be lost). */
FP8RUN_API int fp8run_data_is_sft(const fp8run_data_loader *d);
/* 1 when the file at path starts with an SFT token file's header (0 also when unreadable). */
FP8RUN_API int fp8run_file_is_sft(const char *path);
typedef struct fp8run_sft_info {
    size_t struct_size;
    int64_t examples;      /* in the file */
    int64_t windows;       /* the windows they fill at this loader's T and packing */
    int64_t truncated;     /* examples cut to T + 1 tokens */
    int64_t tokens;        /* example tokens in the windows (the rest is padding) */
    int64_t target_labels; /* labels that count, over all windows */
    int64_t eos;           /* the padding id */
    int64_t vocab;         /* the vocabulary the file was made for */
    int64_t max_examples;  /* the most examples one window holds (fp8run_train_config.sft_max_examples) */
} fp8run_sft_info;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_sft_info(const fp8run_data_loader *d, fp8run_sft_info *info);
/* The next count / (B x (T+1)) batches: token ids, segment ids and target flags (count each);
 * *n_labels (may be NULL) gets how many of their labels count. On error nothing is taken. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_data_next_sft(fp8run_data_loader *d, int64_t *windows, int32_t *segments,
                                                            uint8_t *targets, size_t count, int64_t *n_labels);

/* JSONL examples into an SFT token file of byte tokens (vocabulary 256, EOS 0), for byte-level
 * models, without Python: {"prompt","completion"} lines (targets: the completion and EOS) and
 * {"messages":[{"role","content"},..]} lines, each message "ROLE: CONTENT\n" (targets: the
 * assistant's "CONTENT\n", and the final EOS after an assistant's last message). Examples over
 * max_tokens (> 0) are cut or dropped; one left without a target is dropped; a bad line is an
 * error naming file:line, or skipped and counted. The last val_fraction of the examples go to
 * val_out. python/fp8run/sft.py writes the same bytes. */
typedef struct fp8run_sft_prepare_config {
    size_t struct_size;
    const char *const *files;
    int n_files;
    const char *out, *val_out;
    double val_fraction;
    int64_t max_tokens;   /* 0: no limit */
    int drop_long;        /* 1: drop examples over max_tokens (0: cut them) */
    int train_on_prompt;  /* 1: every token a target */
    int skip_bad_lines;
} fp8run_sft_prepare_config;
typedef struct fp8run_sft_summary {
    size_t struct_size;
    int64_t examples, train_examples, val_examples, tokens, target_tokens;
    int64_t bad_lines, truncated, dropped, no_target;
    int64_t windows_packed; /* with max_tokens: windows of max_tokens that packing fills */
} fp8run_sft_summary;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_sft_prepare_config_init(fp8run_sft_prepare_config *cfg, size_t size);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_sft_prepare_bytes(const fp8run_sft_prepare_config *cfg,
                                                                fp8run_sft_summary *summary);

/* ============================================================================================
 * Safetensors checkpoints (Hugging Face weights in and out)
 * ========================================================================================== */

typedef struct fp8run_safetensors fp8run_safetensors;

/* Open a safetensors checkpoint: a .safetensors file, a folder holding model.safetensors or
 * model.safetensors.index.json (shards named by its weight_map, confined to the folder), or
 * that index file. The files are validated as hostile input (header length, offsets against the
 * file, dtype and shape against the bytes, no overlap): FP8RUN_ERR_PARSE names the file and the
 * tensor. Tensors stay in the files; they are read when asked for. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_safetensors_open(const char *path, fp8run_safetensors **out);
FP8RUN_API void fp8run_safetensors_close(fp8run_safetensors *st);
FP8RUN_API const char *fp8run_safetensors_error(const fp8run_safetensors *st);
/* Its tensors in name order, with their stored dtype and shape (names valid until close). */
FP8RUN_API int fp8run_safetensors_tensor_count(const fp8run_safetensors *st);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_safetensors_tensor(const fp8run_safetensors *st, int i, fp8run_value_info *info);
/* Tensor `name` as count float32 values: F32, F16, BF16, F64 and FP8 exactly (F64 rounded);
 * an F8_E4M3 weight with a "<name>_scale_inv" tensor of 128x128 block scales (as published FP8
 * releases ship them) is dequantized, W = q * scale_inv per block, one float32 product. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_safetensors_read(fp8run_safetensors *st, const char *name, float *dst, size_t count);

/* What a load matched. The name arrays point into the fp8run_safetensors handle and stay valid
 * until its next load or its close. */
typedef struct fp8run_load_report {
    size_t struct_size;
    int n_matched;                   /* parameters loaded from the checkpoint */
    int n_missing;                   /* parameters the checkpoint lacks (left as they were) */
    int n_unexpected;                /* checkpoint tensors no parameter takes (block scales read
                                        with their weight are not listed) */
    const char *const *matched;
    const char *const *missing;
    const char *const *unexpected;
    /* appended after 0.1.0: the loaded tensors that hold NaN or Inf values (each also logged as
       a warning naming it and its count), and how many values each */
    int n_nonfinite;
    const char *const *nonfinite;
    const int64_t *nonfinite_counts;
} fp8run_load_report;

/* Flags of the load calls: missing or unexpected names are an error (nothing loaded). */
#define FP8RUN_LOAD_STRICT 1
/* A tensor holding NaN or Inf values is an error naming it and the count (nothing loaded);
 * without it such tensors load as they are, with a warning (`fp8run train --strict-weights`). */
#define FP8RUN_LOAD_STRICT_WEIGHTS 2

/* Load the checkpoint's tensors into the session's trained parameters by name (the names of
 * fp8run_session_param; the optimizer state is left as it is: load before the first step).
 * A parameter whose shape differs from its tensor's is FP8RUN_ERR_SHAPE naming both, and
 * nothing is loaded; so is a missing or unexpected name with FP8RUN_LOAD_STRICT. report may be
 * NULL. A read error midway (an unreadable shard) leaves the parameters before it loaded. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_load_safetensors(fp8run_session *s, fp8run_safetensors *st, int flags,
                                                         fp8run_load_report *report);
/* The same into a model's float32 parameters (fp8run_model_param), before creating sessions:
 * frozen parameters then take the checkpoint's values too. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_load_safetensors(fp8run_model *m, fp8run_safetensors *st, int flags,
                                                       fp8run_load_report *report);
/* Write the parameters (fp8run_model_param / fp8run_session_param names and shapes, sorted by
 * name, as transformers' save_pretrained writes them) into folder dir (created when missing):
 * dir/model.safetensors, or shards of at most max_shard_bytes (0: 5 GB, transformers' default)
 * named model-0000K-of-0000N.safetensors with model.safetensors.index.json. dtype: FLOAT32
 * (default for UNDEFINED), BFLOAT16 or FLOAT16 (rounded to nearest even). Files are replaced
 * atomically; a model.safetensors or index left from an export of the other layout is removed. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_save_safetensors(fp8run_model *m, const char *dir, fp8run_dtype dtype,
                                                       uint64_t max_shard_bytes);
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_session_save_safetensors(fp8run_session *s, const char *dir, fp8run_dtype dtype,
                                                         uint64_t max_shard_bytes);
/* The same for the weights a training checkpoint holds: its "param" tensors, under the names
 * and layouts the trainer saves them (fp8run_checkpoint_param). Parameters the run did not
 * train (--freeze) are not in a checkpoint and so not written. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_checkpoint_save_safetensors(const char *ckpt_path, const char *dir, fp8run_dtype dtype,
                                                            uint64_t max_shard_bytes);

/* ============================================================================================
 * Several GPUs and nodes: the launch environment, the rendezvous, sharded parameters
 * ========================================================================================== */

/* Where this process sits in a job, from the variables a launcher sets: WORLD_SIZE, RANK,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, `fp8run train --gpus`), and
 * the node: NNODES / NODE_RANK, or torchrun's GROUP_WORLD_SIZE / GROUP_RANK. Ranks are numbered
 * node by node (rank = node_rank * local_world_size + local_rank). */
typedef struct fp8run_dist_env {
    size_t struct_size;
    int present;                 /* 1: WORLD_SIZE is set (launched); 0: alone (world_size 1) */
    int world_size, rank, local_rank;
    int local_world_size;        /* ranks per node; 0: unknown (LOCAL_RANK differs from RANK and
                                    neither LOCAL_WORLD_SIZE nor NNODES says) */
    int nnodes;                  /* 0: unknown */
    int node_rank;               /* -1: unknown */
    char master_addr[256];       /* default 127.0.0.1 */
    int master_port;             /* default 29500 */
} fp8run_dist_env;
/* Read and check this process's environment: FP8RUN_ERR_INVALID_ARG naming the variables when
 * they do not fit together (a rank past its count, RANK not NODE_RANK x LOCAL_WORLD_SIZE +
 * LOCAL_RANK, NNODES not dividing WORLD_SIZE, several nodes without MASTER_ADDR/MASTER_PORT). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_dist_env_read(fp8run_dist_env *env);
/* Meet the job's other ranks at env's MASTER_ADDR:MASTER_PORT over TCP: rank 0 waits for every
 * rank once, checks that they were launched alike (world size, node count), and hands its len
 * bytes of id to all (what the NCCL communicator is made from; any bytes of the caller's).
 * Returns when the whole job has met; else every rank fails with the reason naming the rank at
 * fault: one that dies (its connection closes) or never comes, one claimed twice. Waits at most
 * timeout_s seconds (<= 0: $FP8RUN_RENDEZVOUS_TIMEOUT, else $FP8RUN_NCCL_TIMEOUT, else 600;
 * FP8RUN_RENDEZVOUS_TIMEOUT, when set, always takes its place). FP8RUN_ERR_DEVICE on failure. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_dist_rendezvous(const fp8run_dist_env *env, void *id, size_t len,
                                                                 double timeout_s);

/* Sharded parameters (train_config.shard_parameters): each parameter cut along one dimension
 * into world_size equal slices (the last ones padded), rank r owning indices [r*shard,
 * (r+1)*shard) of it; slices aligned to 16 bytes as float32 and as the gathered element (FP8
 * codes, bf16 or float32), whole 128-blocks under the block recipe. Parameters are gathered a
 * layer at a time (a unit: the name up to its first ".<number>."). Checkpoints stay whole tensors
 * by name: fp8run_shard_scatter cuts one for a rank, fp8run_shard_gather puts it back, for any
 * rank count. */
typedef struct fp8run_shard_plan fp8run_shard_plan;
/* The plan of the parameters a session of m under cfg trains, over world_size ranks (the FP8
 * compiler's decisions choose each weight's cut and gathered element). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_model_shard_plan(const fp8run_model *m, const fp8run_train_config *cfg,
                                                                  int world_size, fp8run_shard_plan **out);
/* A plan of n float32 tensors (a checkpoint's, say: fp8run_checkpoint_param), each cut along
 * dim 0 and gathered as float32. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_shard_plan_create(const fp8run_value_info *params, int n, int world_size,
                                                                   fp8run_shard_plan **out);
FP8RUN_API void fp8run_shard_plan_destroy(fp8run_shard_plan *p);
/* Totals, balance, the units and their gathered bytes, as text (owned by the plan). */
FP8RUN_API const char *fp8run_shard_plan_text(const fp8run_shard_plan *p);
FP8RUN_API int fp8run_shard_plan_param_count(const fp8run_shard_plan *p);
typedef struct fp8run_shard_info {
    size_t struct_size;
    const char *name;            /* owned by the plan */
    int unit;                    /* its gather unit, in the order the forward pass needs them */
    int dim;                     /* the dimension cut */
    int gather_bytes;            /* 1: FP8 codes, 2: bf16, 4: float32 */
    int64_t extent;              /* the cut dimension's size */
    int64_t shard;               /* indices of it per rank (padded) */
    int64_t numel;               /* the whole tensor's elements */
    int64_t shard_numel;         /* elements each rank allocates for it */
} fp8run_shard_info;
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_shard_plan_param(const fp8run_shard_plan *p, int i, fp8run_shard_info *info);
/* Rank's part of parameter `name`: indices [*first, *first + *count) of its cut dimension. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_shard_plan_slice(const fp8run_shard_plan *p, const char *name, int rank,
                                                                  int64_t *first, int64_t *count);
/* Rank's shard of `name` from the whole tensor (full_count = its numel floats) into shard
 * (shard_count = shard_numel floats; padding zeroed). */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_shard_scatter(const fp8run_shard_plan *p, const char *name, int rank,
                                                               const float *full, size_t full_count, float *shard,
                                                               size_t shard_count);
/* The whole tensor `name` from every rank's shard (shards[0 .. world_size-1], shard_numel floats
 * each), bit for bit what was cut. */
FP8RUN_API FP8RUN_NODISCARD fp8run_status fp8run_shard_gather(const fp8run_shard_plan *p, const char *name,
                                                              const float *const *shards, size_t shard_count, float *full,
                                                              size_t full_count);

#ifdef __cplusplus
}
#endif

#endif
