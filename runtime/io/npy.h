/* NumPy .npy files: the format of `np.save` / `np.load`.
 * Reads versions 1.0, 2.0 and 3.0 (they differ only in the header length field and header
 * text encoding); writes 1.0. Little-endian data only, C order only.
 *
 * dtypes: '<f4' float32, '<f8' float64, '<f2' float16, '<i8' '<i4' '<i2' '|i1',
 * '<u8' '<u4' '<u2' '|u1', '|b1' bool (1-byte types also accepted with '<' or '=').
 * bfloat16 and the FP8 types have no NumPy type code: saving them is FR_ERR_UNSUPPORTED
 * (convert to float32 first, which is exact); `fp8run run` writes such outputs as float32.
 *
 * Files are untrusted: a malformed header, a big-endian or structured dtype, Fortran order,
 * a shape whose byte size overflows or exceeds the file, and truncated or trailing data are
 * clear errors naming the file (FR_ERR_PARSE, or FR_ERR_UNSUPPORTED for valid but unhandled
 * content). */
#ifndef FR_NPY_H
#define FR_NPY_H

#include <stddef.h>

#include "graph/tensor.h"

/* Read a .npy file into a new tensor (caller frees with fr_tensor_free). */
FR_NODISCARD fr_status fr_npy_load(const char *path, fr_tensor **out);
/* The same from memory; `what` names the buffer in messages. */
FR_NODISCARD fr_status fr_npy_load_buffer(const void *data, size_t len, const char *what, fr_tensor **out);

/* Write t as a .npy v1.0 file (replacing the file: written to a temporary in the same folder,
 * then renamed). */
FR_NODISCARD fr_status fr_npy_save(const char *path, const fr_tensor *t);
/* The same into a malloc'ed buffer (caller frees). */
FR_NODISCARD fr_status fr_npy_save_buffer(const fr_tensor *t, void **data, size_t *len);

/* NumPy type code of a dtype ("<f4"), NULL when NumPy has none. */
const char *fr_npy_descr(fr_dtype dt);

#endif
