/* CUDA kernels of the reduce family (see ops/cuda/cuda_kernel.h for the contract):
 * ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSumExp, ArgMax/ArgMin and ReduceGrad
 * (ops/reduce.c), SumToShape and Dot (ops/grad_ops.c), CumSum (ops/cumsum.c), with the CPU
 * kernels' semantics: axes as attribute or constant input by opset, keepdims,
 * noop_with_empty_axes, the same identities for empty reductions, NaN rules and integer
 * wrapping.
 *
 * This file: Reduce*, ArgMax/ArgMin, SumToShape, Dot and the kernel table; ReduceGrad is in
 * reduce_grad.cu, CumSum in cumsum.cu, the reduction engine in reduce_engine.cuh. Everything is
 * validated on the host from the static shapes (but CumSum's run-time axis: cumsum.cu). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/reduce_engine.cuh"

namespace {

/* ---------------------------------------------------------------- Reduce* ---- */

struct RedDef {
    const char *op;
    red_kind kind;
    int axes_input_opset;
    int ints;
};

const RedDef red_defs[] = {
    {"ReduceSum", R_SUM, 13, 1},   {"ReduceMean", R_MEAN, 18, 1},     {"ReduceMax", R_MAX, 18, 1},
    {"ReduceMin", R_MIN, 18, 1},   {"ReduceProd", R_PROD, 18, 1},     {"ReduceSumSquare", R_SUMSQ, 18, 0},
    {"ReduceL1", R_L1, 18, 0},     {"ReduceL2", R_L2, 18, 0},         {"ReduceLogSumExp", R_LSE, 18, 0},
};

const RedDef *red_def_of(const fr_node *n)
{
    for (const RedDef &d : red_defs)
        if (strcmp(d.op, n->op_type) == 0) return &d;
    return nullptr;
}

fr_status bool_attr(const fr_node *n, const char *name, int64_t dflt, int *out)
{
    int64_t v;
    FR_TRY(fr_node_attr_int(n, name, dflt, &v));
    if (v != 0 && v != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s=%lld must be 0 or 1", name, (long long)v);
    *out = (int)v;
    return FR_OK;
}

/* Which axes of x (rank, dims) the node reduces, as ops/reduce.c decides. */
fr_status red_axes(const fr_graph *g, const fr_node *n, int64_t opset, const RedDef *d, int rank,
                   unsigned char *red)
{
    int keepdims, noop = 0;
    FR_TRY(bool_attr(n, "keepdims", 1, &keepdims));
    const int from_input = !(opset >= 1 && opset < d->axes_input_opset);
    int cnt;
    const int64_t *attr;
    FR_TRY(fr_node_attr_ints(n, "axes", &cnt, &attr));
    int64_t vals[1024];
    const int64_t *axes = attr;
    if (from_input) {
        FR_TRY(bool_attr(n, "noop_with_empty_axes", 0, &noop));
        if (cnt >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "axes is an input from opset %d on, not an attribute",
                                 d->axes_input_opset);
        cnt = -1;
        if (n->n_inputs > 1 && n->inputs[1] >= 0) {
            const fr_tensor *t = const_input(g, n, 1);
            if (!t)
                return fr_node_error(n, FR_ERR_SHAPE, "the axes input must be a constant (static shapes)");
            if (!fr_dtype_is_int(t->dtype) || t->rank > 1)
                return fr_node_error(n, FR_ERR_SHAPE, "axes must be a 1-D integer tensor");
            int64_t c = fr_tensor_numel(t);
            if (c > 1024) return fr_node_error(n, FR_ERR_SHAPE, "axes has %lld entries", (long long)c);
            for (int64_t i = 0; i < c; i++) vals[i] = fr_tensor_get_i64(t, i);
            cnt = (int)c;
            axes = vals;
        }
    } else if (n->n_inputs > 1) {
        return fr_node_error(n, FR_ERR_GRAPH, "takes axes as an attribute before opset %d", d->axes_input_opset);
    }
    memset(red, 0, FR_MAX_RANK);
    if (cnt <= 0) {
        for (int k = 0; k < rank; k++) red[k] = !noop;
    } else {
        if (rank == 0) return fr_node_error(n, FR_ERR_SHAPE, "axes given for a rank-0 input");
        for (int i = 0; i < cnt; i++) {
            int a;
            FR_TRY(fr_norm_axis(n, axes[i], rank, &a));
            red[a] = 1;
        }
    }
    return FR_OK;
}

/* loaders: (input offset, output index, reduced index) -> the value folded */
template <class T> struct LoadF { /* float inputs folded into double, transformed by kind */
    const T *x;
    int kind;
    const double *shift; /* LogSumExp: the per-output max */
    __device__ double operator()(int64_t off, int64_t o, int64_t) const
    {
        const double v = (double)x[off];
        switch (kind) {
        case R_SUMSQ: case R_L2: return v * v;
        case R_L1: return fabs(v);
        case R_LSE: return exp(v - shift[o]);
        default: return v;
        }
    }
};
template <class T> struct LoadRaw {
    const T *x;
    __device__ T operator()(int64_t off, int64_t, int64_t) const { return x[off]; }
};
template <class T> struct LoadI {
    const T *x;
    __device__ long long operator()(int64_t off, int64_t, int64_t) const { return (long long)x[off]; }
};

/* finishers: (output index, accumulator) -> output */
template <class T> struct FinF {
    T *y;
    int kind;
    int64_t count;
    const double *shift;
    __device__ void operator()(int64_t o, double v) const
    {
        switch (kind) {
        case R_MEAN: v = count ? v / (double)count : (double)NAN; break;
        case R_L2: v = sqrt(v); break;
        case R_LSE: {
            const double s = shift[o];
            v = isfinite(s) ? s + log(v) : s; /* a non-finite max is the result itself */
            break;
        }
        default: break;
        }
        y[o] = (T)v;
    }
};
template <class T> struct FinI {
    T *y;
    int mean;
    int64_t count;
    __device__ void operator()(int64_t o, long long v) const
    {
        if (mean) {
            if (sizeof(T) == 4) v = (long long)(int32_t)(uint32_t)(unsigned long long)v; /* the wrapped sum */
            v = count ? v / count : 0;
        }
        y[o] = (T)(unsigned long long)v;
    }
};

fr_status red_plan_node(const fr_graph *g, const fr_node *n, int64_t opset, const RedDef **d, RPlan *p)
{
    *d = red_def_of(n);
    if (!*d) return fr_node_error(n, FR_ERR_INTERNAL, "not a reduction");
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs input data");
    const fr_value *x = &g->values[n->inputs[0]];
    unsigned char red[FR_MAX_RANK];
    FR_TRY(red_axes(g, n, opset, *d, x->rank, red));
    *p = plan_make(x->rank, x->dims, red);
    return FR_OK;
}

fr_status red_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const RedDef *d;
    RPlan p;
    FR_TRY(red_plan_node(g, n, fr_graph_opset(g, n->domain), &d, &p));
    *bytes = plan_part_bytes(p) + (d->kind == R_LSE ? align_up((size_t)p.n_out * sizeof(double)) : 0);
    if (d->kind == R_SUM || d->kind == R_MEAN) {
        const size_t cb = colsum_part_bytes(colsum_plan(p));
        if (cb > *bytes) *bytes = cb;
    }
    return FR_OK;
}

template <class T> fr_status red_run_float(const fr_cuda_kctx *k, const RedDef *d, const RPlan &p, const T *x, T *y)
{
    char *scr = (char *)k->scratch;
    void *part = plan_part_bytes(p) ? scr : nullptr;
    switch (d->kind) {
    case R_MAX:
    case R_MIN:
        return red_launch(k, p, ExtF<T>{d->kind == R_MAX}, LoadRaw<T>{x}, Store<T, T>{y}, part, d->op);
    case R_PROD:
        return red_launch(k, p, MulD{}, LoadF<T>{x, R_SUM, nullptr}, FinF<T>{y, R_PROD, p.count, nullptr}, part,
                          d->op);
    case R_LSE: {
        double *shift = (double *)(scr + plan_part_bytes(p));
        FR_TRY(red_launch(k, p, ExtF<T>{1}, LoadRaw<T>{x}, Store<double, T>{shift}, part, d->op));
        return red_launch(k, p, AddD{}, LoadF<T>{x, R_LSE, shift}, FinF<T>{y, R_LSE, p.count, shift}, part, d->op);
    }
    default:
        if (sizeof(T) == 4 && (d->kind == R_SUM || d->kind == R_MEAN)) {
            const ColPlan c = colsum_plan(p);
            if (colsum_usable(c, x, k->scratch) && k->scratch_bytes >= colsum_part_bytes(c))
                return colsum_launch(k, c, (const float *)x, FinF<T>{y, d->kind, p.count, nullptr}, k->scratch, d->op);
        }
        return red_launch(k, p, AddD{}, LoadF<T>{x, d->kind, nullptr}, FinF<T>{y, d->kind, p.count, nullptr}, part,
                          d->op);
    }
}

template <class T> fr_status red_run_int(const fr_cuda_kctx *k, const RedDef *d, const RPlan &p, const T *x, T *y)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    const long long lo = sizeof(T) == 4 ? (long long)INT32_MIN : (long long)INT64_MIN;
    const long long hi = sizeof(T) == 4 ? (long long)INT32_MAX : (long long)INT64_MAX;
    switch (d->kind) {
    case R_SUM:
    case R_MEAN:
        return red_launch(k, p, IAdd{}, LoadI<T>{x}, FinI<T>{y, d->kind == R_MEAN, p.count}, part, d->op);
    case R_PROD: return red_launch(k, p, IMul{}, LoadI<T>{x}, FinI<T>{y, 0, p.count}, part, d->op);
    case R_MAX:
    case R_MIN:
        return red_launch(k, p, IExt{d->kind == R_MAX, lo, hi}, LoadI<T>{x}, FinI<T>{y, 0, p.count}, part, d->op);
    default: return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "integer input");
    }
}

fr_status red_check_out(const fr_node *n, const fr_tensor *y, fr_dtype dt, int64_t n_out)
{
    if (!y || y->dtype != dt || fr_tensor_numel(y) != n_out)
        return fr_node_error(n, FR_ERR_SHAPE, "output must be %s with %lld elements (re-run shape inference)",
                             fr_dtype_name(dt), (long long)n_out);
    return FR_OK;
}

fr_status red_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs input data and an output");
    const RedDef *d;
    RPlan p;
    FR_TRY(red_plan_node(k->g, n, k->opset, &d, &p));
    const fr_tensor *x = k->in[0];
    fr_tensor *y = k->out[0];
    FR_TRY(red_check_out(n, y, x->dtype, p.n_out));
    switch (x->dtype) {
    case FR_F32: return red_run_float(k, d, p, (const float *)x->data, (float *)y->data);
    case FR_F64: return red_run_float(k, d, p, (const double *)x->data, (double *)y->data);
    case FR_I32:
        if (d->ints) return red_run_int(k, d, p, (const int32_t *)x->data, (int32_t *)y->data);
        break;
    case FR_I64:
        if (d->ints) return red_run_int(k, d, p, (const int64_t *)x->data, (int64_t *)y->data);
        break;
    default: break;
    }
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
}

/* ---------------------------------------------------------------- ArgMax / ArgMin ---- */

fr_status arg_plan(const fr_node *n, int rank, const int64_t *dims, RPlan *p)
{
    int64_t axis;
    int keepdims, last, a;
    FR_TRY(fr_node_attr_int(n, "axis", 0, &axis));
    FR_TRY(bool_attr(n, "keepdims", 1, &keepdims));
    FR_TRY(bool_attr(n, "select_last_index", 0, &last));
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 1");
    FR_TRY(fr_norm_axis(n, axis, rank, &a));
    unsigned char red[FR_MAX_RANK] = {0};
    red[a] = 1;
    *p = plan_make(rank, dims, red);
    if (dims[a] == 0 && p->n_out > 0) return fr_node_error(n, FR_ERR_SHAPE, "axis %d is empty: no index to return", a);
    return FR_OK;
}

fr_status arg_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one input");
    const fr_value *x = &g->values[n->inputs[0]];
    RPlan p;
    FR_TRY(arg_plan(n, x->rank, x->dims, &p));
    *bytes = plan_part_bytes(p);
    return FR_OK;
}

template <class T> struct LoadArg {
    const T *x;
    __device__ ArgAcc<T> operator()(int64_t off, int64_t, int64_t r) const { return ArgAcc<T>{x[off], r}; }
};
template <class T> struct FinArg {
    int64_t *y;
    __device__ void operator()(int64_t o, ArgAcc<T> a) const { y[o] = a.i < 0 ? 0 : a.i; }
};

template <class T> fr_status arg_run(const fr_cuda_kctx *k, const RPlan &p, int max, int last)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, ArgCb<T>{max, last}, LoadArg<T>{(const T *)k->in[0]->data},
                      FinArg<T>{(int64_t *)k->out[0]->data}, part, k->node->op_type);
}

fr_status arg_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = k->in[0];
    RPlan p;
    FR_TRY(arg_plan(n, x->rank, x->dims, &p));
    FR_TRY(red_check_out(n, k->out[0], FR_I64, p.n_out));
    int last = 0;
    FR_TRY(bool_attr(n, "select_last_index", 0, &last));
    const int max = strcmp(n->op_type, "ArgMax") == 0;
    switch (x->dtype) {
    case FR_F32: return arg_run<float>(k, p, max, last);
    case FR_F64: return arg_run<double>(k, p, max, last);
    case FR_I32: return arg_run<int32_t>(k, p, max, last);
    case FR_I64: return arg_run<long long>(k, p, max, last);
    default: return fr_node_error(n, FR_ERR_UNSUPPORTED, "input dtype %s is not supported", fr_dtype_name(x->dtype));
    }
}

/* ---------------------------------------------------------------- SumToShape, Dot ---- */

fr_status sum_to_plan(const fr_node *n, int rx, const int64_t *dx, RPlan *p)
{
    int cnt;
    const int64_t *shape;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &shape));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > rx) return fr_node_error(n, FR_ERR_SHAPE, "target rank %d exceeds input rank %d", cnt, rx);
    unsigned char red[FR_MAX_RANK] = {0};
    for (int k = 0; k < rx; k++) {
        if (k < rx - cnt) {
            red[k] = 1;
            continue;
        }
        const int64_t t = shape[k - (rx - cnt)];
        if (t != 1 && t != dx[k])
            return fr_node_error(n, FR_ERR_SHAPE, "cannot sum dim %d of size %lld to size %lld", k, (long long)dx[k],
                                 (long long)t);
        red[k] = t == 1 && dx[k] != 1;
    }
    *p = plan_make(rx, dx, red);
    return FR_OK;
}

fr_status sum_to_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one input");
    const fr_value *x = &g->values[n->inputs[0]];
    RPlan p;
    FR_TRY(sum_to_plan(n, x->rank, x->dims, &p));
    *bytes = plan_part_bytes(p);
    if (x->dtype == FR_F32) {
        const size_t cb = colsum_part_bytes(colsum_plan(p));
        if (cb > *bytes) *bytes = cb;
    }
    return FR_OK;
}

template <class T> fr_status sum_to_run(const fr_cuda_kctx *k, const RPlan &p)
{
    if (sizeof(T) == 4) {
        const ColPlan c = colsum_plan(p);
        if (colsum_usable(c, k->in[0]->data, k->scratch) && k->scratch_bytes >= colsum_part_bytes(c))
            return colsum_launch(k, c, (const float *)k->in[0]->data, FinF<T>{(T *)k->out[0]->data, R_SUM, p.count, nullptr},
                                 k->scratch, "SumToShape");
    }
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, AddD{}, LoadF<T>{(const T *)k->in[0]->data, R_SUM, nullptr},
                      FinF<T>{(T *)k->out[0]->data, R_SUM, p.count, nullptr}, part, "SumToShape");
}

fr_status sum_to_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 1 || !k->in[0] || k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "needs one input and one output");
    const fr_tensor *x = k->in[0];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(x->dtype));
    RPlan p;
    FR_TRY(sum_to_plan(n, x->rank, x->dims, &p));
    FR_TRY(red_check_out(n, k->out[0], x->dtype, p.n_out));
    return x->dtype == FR_F32 ? sum_to_run<float>(k, p) : sum_to_run<double>(k, p);
}

RPlan dot_plan(int rank, const int64_t *dims)
{
    int64_t numel = 1;
    for (int k = 0; k < rank; k++) numel *= dims[k];
    const unsigned char red[1] = {1};
    return plan_make(1, &numel, red);
}

fr_status dot_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs");
    const fr_value *a = &g->values[n->inputs[0]];
    *bytes = plan_part_bytes(dot_plan(a->rank, a->dims));
    return FR_OK;
}

template <class T> struct LoadDot {
    const T *a, *b;
    __device__ double operator()(int64_t off, int64_t, int64_t) const { return (double)a[off] * (double)b[off]; }
};

template <class T> fr_status dot_run(const fr_cuda_kctx *k, const RPlan &p)
{
    void *part = plan_part_bytes(p) ? k->scratch : nullptr;
    return red_launch(k, p, AddD{}, LoadDot<T>{(const T *)k->in[0]->data, (const T *)k->in[1]->data},
                      Store<T, double>{(T *)k->out[0]->data}, part, "Dot");
}

fr_status dot_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in != 2 || !k->in[0] || !k->in[1] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs two inputs and one output");
    const fr_tensor *a = k->in[0], *b = k->in[1];
    if ((a->dtype != FR_F32 && a->dtype != FR_F64) || b->dtype != a->dtype || a->nbytes != b->nbytes ||
        k->out[0]->dtype != a->dtype || fr_tensor_numel(k->out[0]) != 1)
        return fr_node_error(n, FR_ERR_SHAPE, "inputs must be float tensors of one shape and dtype");
    RPlan p = dot_plan(a->rank, a->dims);
    return a->dtype == FR_F32 ? dot_run<float>(k, p) : dot_run<double>(k, p);
}

} /* namespace */

#define RED_K(NAME) {NAME, FR_DOMAIN_ONNX, red_cuda, red_scratch}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_reduce[] = {
    RED_K("ReduceSum"),
    RED_K("ReduceMean"),
    RED_K("ReduceMax"),
    RED_K("ReduceMin"),
    RED_K("ReduceProd"),
    RED_K("ReduceSumSquare"),
    RED_K("ReduceL1"),
    RED_K("ReduceL2"),
    RED_K("ReduceLogSumExp"),
    {"ArgMax", FR_DOMAIN_ONNX, arg_cuda, arg_scratch},
    {"ArgMin", FR_DOMAIN_ONNX, arg_cuda, arg_scratch},
    {"ReduceGrad", FR_DOMAIN_FP8RUN, fr_reduce_grad_cuda, fr_reduce_grad_scratch},
    {"SumToShape", FR_DOMAIN_FP8RUN, sum_to_cuda, sum_to_scratch},
    {"Dot", FR_DOMAIN_FP8RUN, dot_cuda, dot_scratch},
    {"CumSum", FR_DOMAIN_ONNX, fr_cumsum_cuda, NULL},
    {NULL, NULL, NULL, NULL},
};
