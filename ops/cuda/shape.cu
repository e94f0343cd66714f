/* CUDA kernels of the shape ops (ops/shape.c; see ops/cuda/cuda_kernel.h for the contract):
 * Reshape, Squeeze, Unsqueeze, Flatten, Shape, Size, ConstantOfShape, Range, Constant.
 *
 * Everything but Range moves elements by size, never by type, so every dtype comes out
 * bit-exact. The small outputs of the shape ops are written by kernels that get the values as
 * launch parameters (never an async copy from a host buffer that may die before the copy
 * runs). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/layout_util.cuh"

namespace {

/* Reshape, Squeeze, Unsqueeze, Flatten: the same bytes under another shape. */
fr_status copy_bytes_run(const fr_cuda_kctx *k)
{
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x || !y) return fr_node_error(k->node, FR_ERR_GRAPH, "input or output missing");
    if (x->dtype != y->dtype || fr_tensor_numel(x) != fr_tensor_numel(y)) {
        char a[128], b[128];
        return fr_node_error(k->node, FR_ERR_SHAPE,
                             "output %s %s does not hold the input %s %s (re-run shape inference)",
                             fr_dtype_name(y->dtype), fr_shape_str(y->rank, y->dims, a, sizeof a),
                             fr_dtype_name(x->dtype), fr_shape_str(x->rank, x->dims, b, sizeof b));
    }
    if (y->nbytes && y->data != x->data)
        NODE_CUDA_TRY(k->node, cudaMemcpyAsync(y->data, x->data, y->nbytes, cudaMemcpyDeviceToDevice, k->cu->stream));
    return FR_OK;
}

/* Host values written by a kernel that gets them as launch parameters: the bytes are copied
 * at launch, so the host buffer may go away at once (an async copy from it could not). */
constexpr int kPayload = 2048;
struct payload {
    unsigned char b[kPayload];
};

__global__ void write_bytes_k(unsigned char *__restrict__ dst, payload p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = p.b[i];
}

fr_status write_host_bytes(const fr_cuda_kctx *k, void *dst, const void *src, size_t nbytes)
{
    for (size_t at = 0; at < nbytes; at += kPayload) {
        int c = (int)(nbytes - at < (size_t)kPayload ? nbytes - at : (size_t)kPayload);
        payload p;
        memcpy(p.b, (const char *)src + at, (size_t)c);
        write_bytes_k<<<(c + kThreads - 1) / kThreads, kThreads, 0, k->cu->stream>>>((unsigned char *)dst + at, p, c);
        FR_TRY(fr_cuda_check_launch(k->node, "write_bytes_k"));
    }
    return FR_OK;
}

fr_status shape_run(const fr_cuda_kctx *k)
{
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x) return fr_node_error(k->node, FR_ERR_GRAPH, "input missing");
    int64_t s = 0, e = x->rank, rank = x->rank;
    if (k->opset >= 15) {
        FR_TRY(fr_node_attr_int(k->node, "start", 0, &s));
        FR_TRY(fr_node_attr_int(k->node, "end", rank, &e));
    }
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    if (e < s) e = s;
    int64_t len = e - s;
    FR_TRY(fr_check_out(k->node, y, FR_I64, 1, &len));
    return write_host_bytes(k, y->data, x->dims + s, (size_t)len * sizeof(int64_t));
}

fr_status size_run(const fr_cuda_kctx *k)
{
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x) return fr_node_error(k->node, FR_ERR_GRAPH, "input missing");
    FR_TRY(fr_check_out(k->node, y, FR_I64, 0, NULL));
    int64_t v = fr_tensor_numel(x);
    return write_host_bytes(k, y->data, &v, sizeof v);
}

template <class T>
__global__ void fill_k(T *__restrict__ y, T v, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = v;
}

fr_status constant_of_shape_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_attr *a = fr_node_attr(n, "value");
    const fr_tensor *val = NULL;
    if (a) {
        if (a->type != FR_ATTR_TENSOR || !a->t)
            return fr_node_error(n, FR_ERR_GRAPH, "attribute 'value' must be a tensor");
        if (fr_dtype_size(a->t->dtype) == 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute 'value' has dtype %s, which fp8run cannot hold",
                                 fr_dtype_name(a->t->dtype));
        if (fr_tensor_numel(a->t) != 1)
            return fr_node_error(n, FR_ERR_SHAPE, "attribute 'value' must hold one element, it has %lld",
                                 (long long)fr_tensor_numel(a->t));
        val = a->t;
    }
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    fr_dtype dt = val ? val->dtype : FR_F32;
    if (!y || y->dtype != dt)
        return fr_node_error(n, FR_ERR_SHAPE, "output is not a %s tensor (re-run shape inference)", fr_dtype_name(dt));
    if (!y->nbytes) return FR_OK;
    size_t es = fr_dtype_size(dt);
    unsigned char bytes[8] = {0};
    if (val) memcpy(bytes, val->data, es);
    int zero = 1;
    for (size_t i = 0; i < es; i++) zero = zero && bytes[i] == 0;
    if (zero) {
        NODE_CUDA_TRY(n, cudaMemsetAsync(y->data, 0, y->nbytes, k->cu->stream));
        return FR_OK;
    }
    int64_t cnt = fr_tensor_numel(y);
    unsigned grid = grid_for(k, cnt);
#define LAUNCH(T)                                                                               \
    do {                                                                                        \
        T v_;                                                                                   \
        memcpy(&v_, bytes, sizeof v_);                                                          \
        fill_k<T><<<grid, kThreads, 0, k->cu->stream>>>((T *)y->data, v_, cnt);                 \
    } while (0)
    switch (es) {
    case 1: LAUNCH(uint8_t); break;
    case 2: LAUNCH(uint16_t); break;
    case 4: LAUNCH(uint32_t); break;
    default: LAUNCH(uint64_t); break;
    }
#undef LAUNCH
    return fr_cuda_check_launch(n, "fill_k");
}

/* Range: y[i] = start + i * delta computed on the device from the device scalars, rounded
 * exactly as the CPU (no fused multiply-add); integers wrap through uint64 like the CPU. */
template <class T>
__global__ void range_k(T *__restrict__ y, const T *__restrict__ start, const T *__restrict__ delta, int64_t n)
{
    const T s = *start, d = *delta;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (sizeof(T) == 4 && T(0.5) != T(0)) {
            y[i] = __fadd_rn(s, __fmul_rn((float)i, d));
        } else if constexpr (sizeof(T) == 8 && T(0.5) != T(0)) {
            y[i] = __dadd_rn(s, __dmul_rn((double)i, d));
        } else {
            y[i] = (T)(int64_t)((uint64_t)(int64_t)s + (uint64_t)i * (uint64_t)(int64_t)d);
        }
    }
}

fr_status range_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3) return fr_node_error(n, FR_ERR_GRAPH, "inputs missing");
    static const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        const fr_tensor *t = k->in[i];
        if (!t) return fr_node_error(n, FR_ERR_GRAPH, "input '%s' is missing", names[i]);
        if (t->dtype != k->in[0]->dtype)
            return fr_node_error(n, FR_ERR_SHAPE, "'%s' is %s but 'start' is %s", names[i], fr_dtype_name(t->dtype),
                                 fr_dtype_name(k->in[0]->dtype));
        if (fr_tensor_numel(t) != 1 || t->rank > 1)
            return fr_node_error(n, FR_ERR_SHAPE, "'%s' must be a scalar", names[i]);
    }
    fr_dtype dt = k->in[0]->dtype;
    if (dt != FR_F32 && dt != FR_F64 && dt != FR_I16 && dt != FR_I32 && dt != FR_I64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s is not supported (float32, float64, int16, int32, int64)",
                             fr_dtype_name(dt));
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!y || y->dtype != dt || y->rank != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "output is not a 1-D %s tensor (re-run shape inference)",
                             fr_dtype_name(dt));
    int64_t len = y->dims[0];
    if (!len) return FR_OK;
    const void *s = k->in[0]->data, *d = k->in[2]->data;
    unsigned grid = grid_for(k, len);
    cudaStream_t st = k->cu->stream;
    switch (dt) {
    case FR_F32:
        range_k<float><<<grid, kThreads, 0, st>>>((float *)y->data, (const float *)s, (const float *)d, len);
        break;
    case FR_F64:
        range_k<double><<<grid, kThreads, 0, st>>>((double *)y->data, (const double *)s, (const double *)d, len);
        break;
    case FR_I16:
        range_k<int16_t><<<grid, kThreads, 0, st>>>((int16_t *)y->data, (const int16_t *)s, (const int16_t *)d, len);
        break;
    case FR_I32:
        range_k<int32_t><<<grid, kThreads, 0, st>>>((int32_t *)y->data, (const int32_t *)s, (const int32_t *)d, len);
        break;
    default:
        range_k<int64_t><<<grid, kThreads, 0, st>>>((int64_t *)y->data, (const int64_t *)s, (const int64_t *)d, len);
        break;
    }
    return fr_cuda_check_launch(n, "range_k");
}

/* Constant: the attribute's bytes, written by kernels (values as launch parameters). */
fr_status constant_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    static const char *names[] = {"value",      "value_float",  "value_floats",  "value_int",
                                  "value_ints", "value_string", "value_strings", "sparse_value"};
    const fr_attr *a = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_attr *c = fr_node_attr(n, names[i]);
        if (!c) continue;
        if (a) return fr_node_error(n, FR_ERR_GRAPH, "has both '%s' and '%s'; exactly one value attribute is allowed",
                                    a->name, c->name);
        a = c;
    }
    if (!a) return fr_node_error(n, FR_ERR_GRAPH, "has no value attribute");
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!y) return fr_node_error(n, FR_ERR_GRAPH, "output missing");
    const void *src = NULL;
    size_t nbytes = 0;
    float f;
    int64_t iv;
    fr_dtype dt = FR_UNDEFINED;
    int rank = 0;
    int64_t dims[FR_MAX_RANK];
    if (strcmp(a->name, "value") == 0 && a->type == FR_ATTR_TENSOR && a->t) {
        dt = a->t->dtype;
        rank = a->t->rank;
        for (int i = 0; i < rank; i++) dims[i] = a->t->dims[i];
        src = a->t->data;
        nbytes = a->t->nbytes;
    } else if (strcmp(a->name, "value_floats") == 0 && a->type == FR_ATTR_FLOATS) {
        dt = FR_F32;
        rank = 1;
        dims[0] = a->n;
        src = a->floats;
        nbytes = (size_t)a->n * sizeof(float);
    } else if (strcmp(a->name, "value_ints") == 0 && a->type == FR_ATTR_INTS) {
        dt = FR_I64;
        rank = 1;
        dims[0] = a->n;
        src = a->ints;
        nbytes = (size_t)a->n * sizeof(int64_t);
    } else if (strcmp(a->name, "value_int") == 0 && a->type == FR_ATTR_INT) {
        dt = FR_I64;
        iv = a->i;
        src = &iv;
        nbytes = sizeof iv;
    } else if (strcmp(a->name, "value_float") == 0 && (a->type == FR_ATTR_FLOAT || a->type == FR_ATTR_INT)) {
        dt = FR_F32;
        f = a->type == FR_ATTR_FLOAT ? a->f : (float)a->i;
        src = &f;
        nbytes = sizeof f;
    } else {
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute '%s' (type %d) is not supported", a->name, (int)a->type);
    }
    FR_TRY(fr_check_out(n, y, dt, rank, dims));
    if (nbytes != y->nbytes) return fr_node_error(n, FR_ERR_SHAPE, "the value's size does not match the output");
    return write_host_bytes(k, y->data, src, nbytes);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_shape[] = {
    {"Reshape", FR_DOMAIN_ONNX, copy_bytes_run, NULL},
    {"Squeeze", FR_DOMAIN_ONNX, copy_bytes_run, NULL},
    {"Unsqueeze", FR_DOMAIN_ONNX, copy_bytes_run, NULL},
    {"Flatten", FR_DOMAIN_ONNX, copy_bytes_run, NULL},
    {"Shape", FR_DOMAIN_ONNX, shape_run, NULL},
    {"Size", FR_DOMAIN_ONNX, size_run, NULL},
    {"ConstantOfShape", FR_DOMAIN_ONNX, constant_of_shape_run, NULL},
    {"Range", FR_DOMAIN_ONNX, range_run, NULL},
    {"Constant", FR_DOMAIN_ONNX, constant_run, NULL},
    {NULL, NULL, NULL, NULL},
};
