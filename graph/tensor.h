/* Host tensors: a dense row-major array of one element type (graph/dtype.h) with a static
 * shape. */
#ifndef FR_TENSOR_H
#define FR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "graph/dtype.h"
#include "graph/status.h"

#define FR_MAX_RANK 8

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
/* Bytes of a dtype x dims tensor, checked: a negative dim, an element count or byte size that
 * overflows, or more than FR_LIMIT_TENSOR_BYTES is an error naming `what` and the shape
 * (FR_ERR_SHAPE for a negative dim, FR_ERR_OOM otherwise). */
FR_NODISCARD fr_status fr_shape_bytes(fr_dtype dt, int rank, const int64_t *dims, const char *what, size_t *bytes);

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
