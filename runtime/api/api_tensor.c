/* Public API: host tensors: element sizes, decoding any number type to float32, and .npy files
 * (runtime/io/npy.h, the one reader of that untrusted format). */
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/io/npy.h"

#define TENSOR_V1_SIZE sizeof(fp8run_tensor)

FP8RUN_API size_t fp8run_dtype_size(fp8run_dtype dt)
{
    if (dt == FP8RUN_DTYPE_STRING || dt == FP8RUN_DTYPE_UNDEFINED) return 0;
    return fr_dtype_size((fr_dtype)dt);
}

/* Number types fp8run computes in (fr_tensor_get_f64 decodes them). */
static int decodable(fp8run_dtype dt)
{
    fr_dtype d = (fr_dtype)dt;
    return fp8run_dtype_size(dt) > 0 && (fr_dtype_is_int(d) || d == FR_BOOL || d == FR_F32 || d == FR_F64 ||
                                         d == FR_F16 || d == FR_BF16 || d == FR_F8E4M3 || d == FR_F8E5M2);
}

FP8RUN_API fp8run_status fp8run_convert_to_float32(fp8run_dtype dt, const void *src, size_t count, float *dst)
{
    const char *fn = __func__;
    if (count && (!src || !dst))
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: %s is NULL", fn, !src ? "src" : "dst");
    if (!decodable(dt))
        return fr_api_error(NULL, FP8RUN_ERR_UNSUPPORTED, "%s: %s is not a number type fp8run decodes", fn,
                            fp8run_dtype_name(dt));
    /* a one-dimensional header over src: the runtime's own decoding, element by element */
    fr_tensor h;
    memset(&h, 0, sizeof h);
    h.dtype = (fr_dtype)dt;
    h.rank = 1;
    h.dims[0] = (int64_t)count;
    h.data = (void *)src;
    h.nbytes = count * fp8run_dtype_size(dt);
    for (size_t i = 0; i < count; i++) dst[i] = (float)fr_tensor_get_f64(&h, (int64_t)i);
    return FP8RUN_OK;
}

/* ---- .npy ---- */

FP8RUN_API int fp8run_npy_supports(fp8run_dtype dt)
{
    return dt != FP8RUN_DTYPE_UNDEFINED && fr_npy_descr((fr_dtype)dt) != NULL;
}

FP8RUN_API fp8run_status fp8run_npy_load(const char *path, fp8run_tensor *out)
{
    const char *fn = __func__;
    size_t use;
    fp8run_status ps = fr_api_check_out(NULL, fn, "out", out, TENSOR_V1_SIZE, sizeof *out, &use);
    if (ps != FP8RUN_OK) return ps;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    fr_tensor *t = NULL;
    fr_status st = fr_npy_load(path, &t);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    fp8run_tensor o;
    memset(&o, 0, sizeof o);
    o.struct_size = out->struct_size;
    o.dtype = (fp8run_dtype)t->dtype;
    o.rank = t->rank;
    memcpy(o.dims, t->dims, sizeof o.dims);
    o.nbytes = t->nbytes;
    /* the data moves to the caller: a tensor that does not own it is freed as a header */
    if (t->owns_data) {
        o.data = t->data;
        t->owns_data = 0;
    } else if (t->nbytes) {
        o.data = malloc(t->nbytes);
        if (!o.data) {
            fr_tensor_free(t);
            return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory for '%s' (%zu bytes)", fn, path, o.nbytes);
        }
        memcpy(o.data, t->data, t->nbytes);
    }
    fr_tensor_free(t);
    memcpy(out, &o, use);
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_npy_free(fp8run_tensor *t)
{
    if (!t) return;
    free(t->data);
    t->data = NULL;
    t->nbytes = 0;
}

fr_tensor fr_api_tensor_view(const fp8run_tensor *c)
{
    fr_tensor h;
    memset(&h, 0, sizeof h);
    h.dtype = (fr_dtype)c->dtype;
    h.rank = c->rank;
    memcpy(h.dims, c->dims, sizeof h.dims);
    h.data = c->data;
    h.nbytes = c->data ? c->nbytes : 0;
    return h;
}

FP8RUN_API fp8run_status fp8run_npy_save(const char *path, const fp8run_tensor *t)
{
    const char *fn = __func__;
    fp8run_tensor c;
    memset(&c, 0, sizeof c);
    fp8run_status ps = fr_api_read_in(NULL, fn, "tensor", t, TENSOR_V1_SIZE, &c, sizeof c);
    if (ps != FP8RUN_OK) return ps;
    if (!path || !path[0]) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: no path given", fn);
    if (c.rank < 0 || c.rank > FP8RUN_MAX_RANK)
        return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: rank %d is outside 0..%d", fn, c.rank, FP8RUN_MAX_RANK);
    int64_t n;
    fr_status st = fr_shape_numel(c.rank, c.dims, path, &n);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    size_t want = (size_t)n * fp8run_dtype_size(c.dtype);
    if (c.nbytes != want || (want && !c.data))
        return fr_api_error(NULL, FP8RUN_ERR_SHAPE, "%s: '%s': the tensor holds %zu bytes, its shape and dtype %zu", fn,
                            path, c.data ? c.nbytes : 0, want);
    fr_tensor h = fr_api_tensor_view(&c);
    return fr_api_fail(NULL, fn, fr_npy_save(path, &h));
}
