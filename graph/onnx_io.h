/* ONNX import and export (protobuf-c, schema/onnx.proto).
 * Import reads every tensor encoding (raw_data, typed fields, external data), all dtypes
 * fp8run holds, opset imports, graph inputs/outputs with symbolic dims, and attributes.
 * Model files are hostile input: external-data locations that are absolute or escape the
 * model's folder (also through symlinks) are refused; offsets/lengths past the end of the
 * data file, raw_data whose length does not match dtype x shape, and shapes whose element
 * count overflows are clear errors naming the tensor and file. */
#ifndef FR_ONNX_IO_H
#define FR_ONNX_IO_H

#include <stddef.h>

#include "graph/ir.h"

/* Load a model file. External data is resolved relative to the file's folder. */
FR_NODISCARD fr_status fr_onnx_load_file(const char *path, fr_graph **out);
/* Load from memory. `model_dir` is the folder external data is relative to; NULL refuses
 * external data. `what` names the buffer in messages (e.g. "<memory>"). */
FR_NODISCARD fr_status fr_onnx_load_buffer(const void *data, size_t len, const char *model_dir,
                              const char *what, fr_graph **out);

typedef struct fr_onnx_save_options {
    /* When non-NULL, initializers of at least `external_min_bytes` bytes are written to this
     * file (a plain file name, created inside the output file's folder; never a path) and
     * referenced as ONNX external data. NULL: everything inline (protobuf's 2 GiB limit
     * applies; the save fails clearly beyond it). */
    const char *external_data_name;
    size_t external_min_bytes;
} fr_onnx_save_options;

/* Write the graph as an ONNX model. The file is written atomically (temporary file in the
 * same folder, fsync, rename) and never through a symlink. opt may be NULL. */
FR_NODISCARD fr_status fr_onnx_save_file(const fr_graph *g, const char *path, const fr_onnx_save_options *opt);
/* fr_onnx_save_file choosing external data by size: when the initializers add up to more than
 * 1 GiB, those of at least 1 KiB go to "<file>.data" next to it; else everything inline. */
FR_NODISCARD fr_status fr_train_save_model(const fr_graph *g, const char *path);
/* Serialize into a malloc'ed buffer (caller frees); all data inline. */
FR_NODISCARD fr_status fr_onnx_save_buffer(const fr_graph *g, void **data, size_t *len);

#endif
