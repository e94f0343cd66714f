/* Host tensors and half/bfloat16 conversions. */
#include "graph/tensor.h"

#include "graph/fp8_format.h"
#include "graph/limits.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fr_status fr_shape_numel(int rank, const int64_t *dims, const char *what, int64_t *numel)
{
    if (rank < 0 || rank > FR_MAX_RANK)
        return fr_error(FR_ERR_SHAPE, "%s: rank %d is outside 0..%d", what, rank, FR_MAX_RANK);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return fr_error(FR_ERR_SHAPE, "%s: dimension %d is negative (%lld)", what, i,
                            (long long)dims[i]);
        if (dims[i] != 0 && n > INT64_MAX / dims[i])
            return fr_error(FR_ERR_OOM, "%s: element count of shape overflows int64", what);
        n *= dims[i];
    }
    *numel = n;
    return FR_OK;
}

int64_t fr_tensor_numel(const fr_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

fr_status fr_shape_bytes(fr_dtype dt, int rank, const int64_t *dims, const char *what, size_t *bytes)
{
    char shp[200];
    if (rank < 0 || rank > FR_MAX_RANK)
        return fr_error(FR_ERR_SHAPE, "%s: rank %d is outside 0..%d", what, rank, FR_MAX_RANK);
    size_t es = fr_dtype_size(dt);
    uint64_t n = 1;
    int over = 0, empty = 0;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0)
            return fr_error(FR_ERR_SHAPE, "%s: dimension %d of %s is negative", what, i,
                            fr_shape_str(rank, dims, shp, sizeof shp));
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 0) empty = 1;
        else if (n > (uint64_t)INT64_MAX / (uint64_t)dims[i]) over = 1;
        else n *= (uint64_t)dims[i];
    }
    if (empty) {
        *bytes = 0; /* whatever the other dims */
        return FR_OK;
    }
    if (over || n > SIZE_MAX / (es ? es : 1))
        return fr_error(FR_ERR_OOM, "%s: %s %s has more elements than memory can address", what, fr_dtype_name(dt),
                        fr_shape_str(rank, dims, shp, sizeof shp));
    uint64_t b = n * es, cap;
    FR_TRY(fr_limit_get(FR_LIMIT_TENSOR_BYTES, &cap, NULL));
    if (b > cap) {
        char t1[32], t2[32];
        return fr_error(FR_ERR_OOM, "%s: %s %s is %s, more than the %s of one tensor (%s=%llu raises it)", what,
                        fr_dtype_name(dt), fr_shape_str(rank, dims, shp, sizeof shp), fr_bytes_text(b, t1, sizeof t1),
                        fr_bytes_text(cap, t2, sizeof t2), fr_limit_env(FR_LIMIT_TENSOR_BYTES), (unsigned long long)b);
    }
    *bytes = (size_t)b;
    return FR_OK;
}

fr_status fr_tensor_new(fr_dtype dt, int rank, const int64_t *dims, const char *what,
                        fr_tensor **out)
{
    int64_t n;
    size_t es = fr_dtype_size(dt), bytes;
    *out = NULL;
    if (es == 0)
        return fr_error(FR_ERR_UNSUPPORTED, "%s: dtype %s cannot be held in a tensor", what,
                        fr_dtype_name(dt));
    FR_TRY(fr_shape_numel(rank, dims, what, &n));
    FR_TRY(fr_shape_bytes(dt, rank, dims, what, &bytes)); /* also FP8RUN_MAX_TENSOR_BYTES */
    fr_tensor *t = fr_calloc(1, sizeof *t, what);
    if (!t) return FR_ERR_OOM;
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->nbytes = bytes;
    t->owns_data = 1;
    if (bytes) {
        t->data = calloc(1, bytes);
        if (!t->data) {
            free(t);
            return fr_error(FR_ERR_OOM, "out of memory allocating %zu bytes for %s", bytes, what);
        }
    }
    *out = t;
    return FR_OK;
}

fr_status fr_tensor_clone(const fr_tensor *src, const char *what, fr_tensor **out)
{
    FR_TRY(fr_tensor_new(src->dtype, src->rank, src->dims, what, out));
    if (src->nbytes) memcpy((*out)->data, src->data, src->nbytes);
    return FR_OK;
}

void fr_tensor_free(fr_tensor *t)
{
    if (!t) return;
    if (t->owns_data) free(t->data);
    free(t);
}

char *fr_shape_str(int rank, const int64_t *dims, char *buf, size_t n)
{
    size_t off = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (int i = 0; i < rank && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}

int64_t fr_tensor_get_i64(const fr_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case FR_I64: return ((const int64_t *)t->data)[i];
    case FR_I32: return ((const int32_t *)t->data)[i];
    case FR_U32: return ((const uint32_t *)t->data)[i];
    case FR_I16: return ((const int16_t *)t->data)[i];
    case FR_U16: return ((const uint16_t *)t->data)[i];
    case FR_I8: return ((const int8_t *)t->data)[i];
    case FR_U8: case FR_BOOL: return ((const uint8_t *)t->data)[i];
    case FR_U64: return (int64_t)((const uint64_t *)t->data)[i];
    default: return (int64_t)fr_tensor_get_f64(t, i);
    }
}

double fr_tensor_get_f64(const fr_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case FR_F32: return ((const float *)t->data)[i];
    case FR_F64: return ((const double *)t->data)[i];
    case FR_F16: return fr_f16_to_f32(((const uint16_t *)t->data)[i]);
    case FR_BF16: return fr_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case FR_F8E4M3: return fr_e4m3_to_f32(((const uint8_t *)t->data)[i]);
    case FR_F8E5M2: return fr_e5m2_to_f32(((const uint8_t *)t->data)[i]);
    case FR_U64: return (double)((const uint64_t *)t->data)[i];
    default:
        if (fr_dtype_is_int(t->dtype) || t->dtype == FR_BOOL) return (double)fr_tensor_get_i64(t, i);
        return NAN;
    }
}

float fr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return fr_bits_f32(bits);
}

uint16_t fr_f32_to_f16(float f)
{
    uint32_t x = fr_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00u | (ax > 0x7f800000u ? (uint16_t)(0x200u | ((ax >> 13) & 0x3ffu)) : 0);
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* result is subnormal or zero: fixed-point at 2^-24 */
        if (ax < 0x33000000u) return sign; /* < 2^-25: rounds to zero */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value = m * 2^(e-150); want units of 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint32_t q = ((ax >> 13) - ((127 - 15) << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) q++;
    return sign | (uint16_t)q;
}

float fr_bf16_to_f32(uint16_t b) { return fr_bits_f32((uint32_t)b << 16); }

uint16_t fr_f32_to_bf16(float f)
{
    uint32_t x = fr_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu; /* every NaN -> 0x7FFF, as the H100's cvt does */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}
