/* Element types. fr_dtype values are the ONNX TensorProto.DataType numbers, so no mapping
 * table is needed at import/export. Below the tensors and the FP8 formats, which both name
 * them. */
#ifndef FR_DTYPE_H
#define FR_DTYPE_H

#include <stddef.h>

typedef enum fr_dtype {
    FR_UNDEFINED = 0,
    FR_F32 = 1,
    FR_U8 = 2,
    FR_I8 = 3,
    FR_U16 = 4,
    FR_I16 = 5,
    FR_I32 = 6,
    FR_I64 = 7,
    FR_STRING = 8, /* never stored in tensors: imported only to give a clear error */
    FR_BOOL = 9,   /* one byte per element, 0 or 1 */
    FR_F16 = 10,
    FR_F64 = 11,
    FR_U32 = 12,
    FR_U64 = 13,
    FR_BF16 = 16,
    FR_F8E4M3 = 17, /* OCP E4M3FN */
    FR_F8E4M3FNUZ = 18,
    FR_F8E5M2 = 19,
    FR_F8E5M2FNUZ = 20
} fr_dtype;

/* Bytes per element; 0 for types fp8run cannot hold in a tensor. */
size_t fr_dtype_size(fr_dtype dt);
/* "float32", "int64", "float8e4m3fn", ...; "dtype(N)" style text for unknown numbers. */
const char *fr_dtype_name(fr_dtype dt);
int fr_dtype_is_float(fr_dtype dt); /* F16, BF16, F32, F64, FP8s */
int fr_dtype_is_int(fr_dtype dt);   /* signed or unsigned integers (not bool) */

#endif
