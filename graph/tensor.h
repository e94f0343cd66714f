/* Element types and host tensors.
 * fr_dtype values are the ONNX TensorProto.DataType numbers, so no mapping table is needed
 * at import/export. A tensor is a dense row-major array with a static shape. */
#ifndef FR_TENSOR_H
#define FR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#define FR_MAX_RANK 8

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

typedef struct fr_tensor {
    fr_dtype dtype;
    int rank;
    int64_t dims[FR_MAX_RANK];
    void *data;     /* host memory, row-major; may be NULL when numel == 0 */
    size_t nbytes;
    int owns_data;  /* free data with the tensor */
} fr_tensor;

/* Element count of a shape, with overflow and negative-dim checks. Returns FR_OK or
 * FR_ERR_SHAPE/FR_ERR_OOM with a message that includes `what`. */
FR_NODISCARD fr_status fr_shape_numel(int rank, const int64_t *dims, const char *what, int64_t *numel);
int64_t fr_tensor_numel(const fr_tensor *t);

/* New tensor with zeroed, owned storage. `what` names it in error messages. */
FR_NODISCARD fr_status fr_tensor_new(fr_dtype dt, int rank, const int64_t *dims, const char *what,
                        fr_tensor **out);
/* New tensor that owns a copy of `src`. */
FR_NODISCARD fr_status fr_tensor_clone(const fr_tensor *src, const char *what, fr_tensor **out);
void fr_tensor_free(fr_tensor *t);

/* "[2, 3, 4]" into buf (always terminated). Returns buf. */
char *fr_shape_str(int rank, const int64_t *dims, char *buf, size_t n);

/* Scalar accessors used by shape logic on small integer tensors (I64/I32 only).
 * fr_tensor_get_i64 reads element i of an integer or bool tensor as int64. */
int64_t fr_tensor_get_i64(const fr_tensor *t, int64_t i);
/* Read element i of any numeric tensor as double (F16/BF16/FP8 decoded). */
double fr_tensor_get_f64(const fr_tensor *t, int64_t i);

/* IEEE half <-> float, exact (round-to-nearest-even on narrowing). */
float fr_f16_to_f32(uint16_t h);
uint16_t fr_f32_to_f16(float f);
/* bfloat16 <-> float, exact (round-to-nearest-even on narrowing, NaN preserved). */
float fr_bf16_to_f32(uint16_t b);
uint16_t fr_f32_to_bf16(float f);

#endif
