/* ONNX import: TensorProto -> tensor. Every tensor's data size is checked against dtype x shape
 * before anything is allocated; external data is confined to the model's folder
 * (graph/onnx_io_util.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/onnx_import_internal.h"
#include "graph/limits.h"
#include "graph/onnx_io_util.h"

/* The typed field ONNX stores each dtype in (when raw_data is not used). */
enum { TF_FLOAT, TF_INT32, TF_INT64, TF_DOUBLE, TF_UINT64, TF_COUNT };
static const char *const tf_names[TF_COUNT] = {"float_data", "int32_data", "int64_data",
                                               "double_data", "uint64_data"};

static int typed_field_of(fr_dtype dt)
{
    switch (dt) {
    case FR_F32: return TF_FLOAT;
    case FR_I64: return TF_INT64;
    case FR_F64: return TF_DOUBLE;
    case FR_U32: case FR_U64: return TF_UINT64;
    default: return TF_INT32; /* every other holdable dtype, per the TensorProto spec */
    }
}

/* int32_data carries narrow ints and the bit patterns of 16- and 8-bit floats. Values out of
 * range would silently wrap, so they are refused. */
static fr_status from_int32(fr_tensor *t, const int32_t *src, const char *what)
{
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        int32_t v = src[i];
        int32_t lo, hi;
        switch (t->dtype) {
        case FR_I32: lo = INT32_MIN; hi = INT32_MAX; break;
        case FR_I16: lo = INT16_MIN; hi = INT16_MAX; break;
        case FR_U16: lo = 0; hi = UINT16_MAX; break;
        case FR_I8: lo = INT8_MIN; hi = INT8_MAX; break;
        case FR_U8: lo = 0; hi = UINT8_MAX; break;
        case FR_BOOL: lo = 0; hi = 1; break;
        case FR_F16: case FR_BF16: lo = INT16_MIN; hi = UINT16_MAX; break; /* bits, maybe sign-extended */
        default: lo = INT8_MIN; hi = UINT8_MAX; break;                     /* fp8 bits */
        }
        if (v < lo || v > hi)
            return fr_error(FR_ERR_PARSE, "%s: int32_data[%lld] = %d is out of range for %s", what,
                            (long long)i, (int)v, fr_dtype_name(t->dtype));
        switch (fr_dtype_size(t->dtype)) {
        case 4: ((int32_t *)t->data)[i] = v; break;
        case 2: ((uint16_t *)t->data)[i] = (uint16_t)((uint32_t)v & 0xffffu); break;
        default: ((uint8_t *)t->data)[i] = (uint8_t)((uint32_t)v & 0xffu); break;
        }
    }
    return FR_OK;
}

/* Strict non-negative decimal, as ONNX writes external-data offsets and lengths. */
static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

typedef struct ext_ref {
    const char *location;
    uint64_t offset, length;
    int has_length;
} ext_ref;

static fr_status parse_external(const Onnx__TensorProto *tp, const char *what, ext_ref *e)
{
    memset(e, 0, sizeof *e);
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = tp->external_data[i];
        const char *k = kv->key ? kv->key : "", *v = kv->value ? kv->value : "";
        if (strcmp(k, "location") == 0) {
            e->location = v;
        } else if (strcmp(k, "offset") == 0) {
            if (!parse_u64(v, &e->offset))
                return fr_error(FR_ERR_PARSE, "%s: external data offset '%s' is not a number", what, v);
        } else if (strcmp(k, "length") == 0) {
            if (!parse_u64(v, &e->length))
                return fr_error(FR_ERR_PARSE, "%s: external data length '%s' is not a number", what, v);
            e->has_length = 1;
        } /* "checksum" and unknown keys carry nothing we need */
    }
    if (!e->location) return fr_error(FR_ERR_PARSE, "%s: external data has no 'location' entry", what);
    return FR_OK;
}

/* Open and bounds-check an external tensor's bytes, then read them into a new tensor. */
static fr_status read_external(const import_ctx *c, const Onnx__TensorProto *tp, const char *what,
                               fr_dtype dt, int rank, const int64_t *dims, size_t bytes,
                               fr_tensor **out, char **ext_loc)
{
    ext_ref e;
    size_t checked; /* FP8RUN_MAX_TENSOR_BYTES before any file is opened */
    FR_TRY(fr_shape_bytes(dt, rank, dims, what, &checked));
    FR_TRY(parse_external(tp, what, &e));
    if (!c->model_dir)
        return fr_error(FR_ERR_INVALID_ARG,
                        "%s: uses external data '%s', but the model was loaded from memory without a "
                        "folder to find it in", what, e.location);
    int fd;
    uint64_t fsize;
    FR_TRY(fr_onnx_open_external(c->model_dir, e.location, what, &fd, &fsize));
    fr_status st = FR_OK;
    if (e.offset > fsize)
        st = fr_error(FR_ERR_PARSE, "%s: external data offset %llu is past the end of '%s' (%llu bytes)",
                      what, (unsigned long long)e.offset, e.location, (unsigned long long)fsize);
    else if (e.has_length && e.length > fsize - e.offset)
        st = fr_error(FR_ERR_PARSE,
                      "%s: external data offset %llu + length %llu is past the end of '%s' (%llu bytes)",
                      what, (unsigned long long)e.offset, (unsigned long long)e.length, e.location,
                      (unsigned long long)fsize);
    else if (e.has_length && e.length != (uint64_t)bytes)
        st = fr_error(FR_ERR_PARSE,
                      "%s: external data length %llu does not match dtype %s x shape (%zu bytes)",
                      what, (unsigned long long)e.length, fr_dtype_name(dt), bytes);
    else if ((uint64_t)bytes > fsize - e.offset)
        st = fr_error(FR_ERR_PARSE,
                      "%s: needs %zu bytes of external data at offset %llu, but '%s' holds only %llu there",
                      what, bytes, (unsigned long long)e.offset, e.location,
                      (unsigned long long)(fsize - e.offset));
    /* a file of holes passes every size check and would be read as gigabytes of zeros: a
     * large tensor must be mostly stored (1/8: compressing file systems report less) */
    struct stat sb;
    if (st == FR_OK && bytes >= ((size_t)64 << 20) && fstat(fd, &sb) == 0 &&
        (uint64_t)sb.st_blocks * 512u < (uint64_t)bytes / 8)
        st = fr_error(FR_ERR_PARSE,
                      "%s: external data '%s' is a sparse file: %llu bytes stored for a tensor of %zu bytes (refused)",
                      what, e.location, (unsigned long long)sb.st_blocks * 512u, bytes);
    fr_tensor *t = NULL;
    if (st == FR_OK) st = fr_tensor_new(dt, rank, dims, what, &t);
    if (st == FR_OK && bytes) st = fr_onnx_pread_all(fd, t->data, bytes, e.offset, what);
    close(fd);
    if (st == FR_OK && ext_loc) {
        *ext_loc = fr_strdup(e.location, "external location");
        if (!*ext_loc) st = FR_ERR_OOM;
    }
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

/* fr_onnx_tensor_from_proto (onnx_import_internal.h) */
fr_status fr_onnx_tensor_from_proto(const import_ctx *c, const Onnx__TensorProto *tp,
                                    const char *what, fr_tensor **out, char **ext_loc)
{
    *out = NULL;
    if (ext_loc) *ext_loc = NULL;
    fr_dtype dt = tp->has_data_type ? (fr_dtype)tp->data_type : FR_UNDEFINED;
    if (dt == FR_UNDEFINED) return fr_error(FR_ERR_PARSE, "%s: tensor has no data_type", what);
    if (dt == FR_STRING)
        return fr_error(FR_ERR_UNSUPPORTED, "%s: STRING tensors are not supported by fp8run", what);
    size_t es = fr_dtype_size(dt);
    if (es == 0)
        return fr_error(FR_ERR_UNSUPPORTED, "%s: tensor data type %d (%s) is not supported by fp8run",
                        what, (int)tp->data_type, fr_dtype_name(dt));
    if (tp->segment)
        return fr_error(FR_ERR_UNSUPPORTED,
                        "%s: segmented tensors (TensorProto.segment) are not supported", what);
    if (tp->n_dims > FR_MAX_RANK)
        return fr_error(FR_ERR_UNSUPPORTED, "%s: rank %zu is more than fp8run's maximum of %d", what,
                        tp->n_dims, FR_MAX_RANK);
    int rank = (int)tp->n_dims;
    int64_t numel;
    FR_TRY(fr_shape_numel(rank, tp->dims, what, &numel));
    size_t bytes;
    if ((uint64_t)numel > SIZE_MAX || !fr_mul_size((size_t)numel, es, &bytes))
        return fr_error(FR_ERR_OOM, "%s: byte size of dtype %s x %lld elements overflows", what,
                        fr_dtype_name(dt), (long long)numel);
    char shp[160];
    fr_shape_str(rank, tp->dims, shp, sizeof shp);
    if (tp->n_string_data)
        return fr_error(FR_ERR_PARSE, "%s: dtype %s tensor carries string_data", what, fr_dtype_name(dt));

    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return read_external(c, tp, what, dt, rank, tp->dims, bytes, out, ext_loc);

    size_t counts[TF_COUNT] = {tp->n_float_data, tp->n_int32_data, tp->n_int64_data,
                               tp->n_double_data, tp->n_uint64_data};
    int want = typed_field_of(dt);
    for (int f = 0; f < TF_COUNT; f++)
        if (counts[f] && (f != want || tp->has_raw_data))
            return fr_error(FR_ERR_PARSE, "%s: dtype %s tensor carries %zu values in %s%s", what,
                            fr_dtype_name(dt), counts[f], tf_names[f],
                            tp->has_raw_data ? " besides raw_data" : ", which that dtype does not use");
    if (tp->has_raw_data) {
        if (tp->raw_data.len != bytes)
            return fr_error(FR_ERR_PARSE,
                            "%s: raw_data holds %zu bytes, but dtype %s x shape %s needs %zu", what,
                            tp->raw_data.len, fr_dtype_name(dt), shp, bytes);
    } else if (counts[want] != (size_t)numel) {
        return fr_error(FR_ERR_PARSE, "%s: %s holds %zu values, but shape %s has %lld elements", what,
                        tf_names[want], counts[want], shp, (long long)numel);
    }
    fr_tensor *t;
    FR_TRY(fr_tensor_new(dt, rank, tp->dims, what, &t));
    fr_status st = FR_OK;
    if (bytes == 0) {
        /* nothing to copy */
    } else if (tp->has_raw_data) {
        memcpy(t->data, tp->raw_data.data, bytes);
    } else {
        switch (want) {
        case TF_FLOAT: memcpy(t->data, tp->float_data, bytes); break;
        case TF_INT64: memcpy(t->data, tp->int64_data, bytes); break;
        case TF_DOUBLE: memcpy(t->data, tp->double_data, bytes); break;
        case TF_UINT64:
            if (dt == FR_U64) {
                memcpy(t->data, tp->uint64_data, bytes);
                break;
            }
            for (int64_t i = 0; i < numel; i++) {
                if (tp->uint64_data[i] > UINT32_MAX) {
                    st = fr_error(FR_ERR_PARSE, "%s: uint64_data[%lld] = %llu is out of range for uint32",
                                  what, (long long)i, (unsigned long long)tp->uint64_data[i]);
                    break;
                }
                ((uint32_t *)t->data)[i] = (uint32_t)tp->uint64_data[i];
            }
            break;
        default: st = from_int32(t, tp->int32_data, what); break;
        }
    }
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}
