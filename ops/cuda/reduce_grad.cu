/* CUDA kernels of ReduceGrad (ai.fp8run; ops/reduce_grad.c has the CPU kernel and the contract),
 * on the reduction engine (reduce_engine.cuh): the kernel table is in reduce.cu. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/cuda_util.cuh"
#include "ops/cuda/reduce_engine.cuh"

namespace {

/* ---------------------------------------------------------------- ReduceGrad ---- */

/* kind and the plan over x's shape (attribute `shape`) */
fr_status rg_plan(const fr_node *n, int n_in, red_kind *kind, RPlan *p)
{
    FR_TRY(fr_reduce_grad_kind(n, n_in, kind));
    int rank;
    int64_t dims[FR_MAX_RANK];
    unsigned char red[FR_MAX_RANK];
    FR_TRY(fr_reduce_grad_shape(n, &rank, dims, red));
    *p = plan_make(rank, dims, red);
    return FR_OK;
}

/* scratch: [aux: n_out doubles][zeros: n_out int64][reduction partials] */
size_t rg_aux_bytes(red_kind kind, const RPlan &p)
{
    if (kind == R_MAX || kind == R_MIN) return align_up((size_t)p.n_out * sizeof(double));
    if (kind == R_PROD) return align_up((size_t)p.n_out * sizeof(double)) + align_up((size_t)p.n_out * sizeof(long long));
    return 0;
}

fr_status rg_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    red_kind kind;
    RPlan p;
    FR_TRY(rg_plan(n, n->n_inputs, &kind, &p));
    *bytes = rg_aux_bytes(kind, p) ? rg_aux_bytes(kind, p) + plan_part_bytes(p) : 0;
    return FR_OK;
}

/* Max/Min: the elements equal to the result (NaN ties NaN) */
template <class T> struct LoadTie {
    const T *x, *y;
    __device__ double operator()(int64_t off, int64_t o, int64_t) const
    {
        const double a = (double)x[off], b = (double)y[o];
        return (a == b || (isnan(a) && isnan(b))) ? 1.0 : 0.0;
    }
};
template <class T> struct LoadPZ {
    const T *x;
    __device__ PZ operator()(int64_t off, int64_t, int64_t) const
    {
        const double v = (double)x[off];
        return v == 0 ? PZ{1.0, 1} : PZ{v, 0};
    }
};
struct StorePZ {
    double *p;
    long long *z;
    __device__ void operator()(int64_t o, PZ a) const
    {
        p[o] = a.p;
        z[o] = a.z;
    }
};

template <class T>
__global__ void __launch_bounds__(kThreads) rg_apply(RPlan p, int kind, const T *dy, const T *x, const T *y,
                                                    const double *aux, const long long *zeros, T *dx)
{
    const int64_t nx = p.n_in;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nx; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o;
        if (p.nr == 0) o = i;
        else if (p.row && p.nr == 1) o = i / p.count;       /* [kept..., reduced] */
        else if (!p.row && p.nr == 1 && p.kind[0]) o = i % p.n_out; /* [reduced, kept...] */
        else o = out_of_in(p, i);
        const double gv = (double)dy[o];
        double v;
        switch (kind) {
        case R_SUM: v = gv; break;
        case R_MEAN: v = gv / (double)p.count; break;
        case R_SUMSQ: v = 2.0 * (double)x[i] * gv; break;
        case R_L1: {
            const double xv = (double)x[i];
            v = (isnan(xv) ? xv : xv > 0 ? 1.0 : xv < 0 ? -1.0 : 0.0) * gv;
            break;
        }
        case R_L2: {
            const double yv = (double)y[o];
            v = yv == 0 ? 0.0 : (double)x[i] / yv * gv;
            break;
        }
        case R_LSE: v = exp((double)x[i] - (double)y[o]) * gv; break;
        case R_MAX:
        case R_MIN: {
            const double xv = (double)x[i], yv = (double)y[o];
            v = (xv == yv || (isnan(xv) && isnan(yv))) ? gv / aux[o] : 0.0;
            break;
        }
        default: { /* R_PROD */
            const double xv = (double)x[i];
            const long long z = zeros[o];
            v = z == 0 ? aux[o] / xv * gv : z == 1 ? (xv == 0 ? aux[o] * gv : 0.0) : 0.0;
            break;
        }
        }
        dx[i] = (T)v;
    }
}

template <class T> fr_status rg_run(const fr_cuda_kctx *k, red_kind kind, const RPlan &p)
{
    const T *dy = (const T *)k->in[0]->data;
    const T *x = k->n_in > 1 ? (const T *)k->in[1]->data : nullptr;
    const T *y = k->n_in > 2 ? (const T *)k->in[2]->data : nullptr;
    T *dx = (T *)k->out[0]->data;
    char *scr = (char *)k->scratch;
    double *aux = nullptr;
    long long *zeros = nullptr;
    const size_t aux_bytes = rg_aux_bytes(kind, p);
    void *part = plan_part_bytes(p) ? scr + aux_bytes : nullptr;
    if (kind == R_MAX || kind == R_MIN) {
        aux = (double *)scr;
        FR_TRY(red_launch(k, p, AddD{}, LoadTie<T>{x, y}, Store<double, double>{aux}, part, "ReduceGrad(ties)"));
    } else if (kind == R_PROD) {
        aux = (double *)scr;
        zeros = (long long *)(scr + align_up((size_t)p.n_out * sizeof(double)));
        FR_TRY(red_launch(k, p, ProdZ{}, LoadPZ<T>{x}, StorePZ{aux, zeros}, part, "ReduceGrad(prod)"));
    }
    rg_apply<T><<<grid_for(p.n_in, 65536), kThreads, 0, k->cu->stream>>>(p, (int)kind, dy, x, y, aux, zeros, dx);
    return fr_cuda_check_launch(k->node, "ReduceGrad");
}

fr_status rg_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    if (k->n_in < 1 || k->n_out < 1 || !k->out[0]) return fr_node_error(n, FR_ERR_GRAPH, "needs dy and an output");
    red_kind kind;
    RPlan p;
    FR_TRY(rg_plan(n, k->n_in, &kind, &p));
    const fr_tensor *dy = k->in[0];
    fr_tensor *dx = k->out[0];
    if (dy->dtype != FR_F32 && dy->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dy is %s (float32 or float64 supported)", fr_dtype_name(dy->dtype));
    int ok = dx->dtype == dy->dtype && fr_tensor_numel(dx) == p.n_in && fr_tensor_numel(dy) == p.n_out;
    for (int i = 1; ok && i < k->n_in; i++)
        ok = k->in[i]->dtype == dy->dtype && fr_tensor_numel(k->in[i]) == (i == 1 ? p.n_in : p.n_out);
    if (!ok) return fr_node_error(n, FR_ERR_SHAPE, "inputs/outputs do not match the attributes (re-run shape inference)");
    if (p.n_in == 0) return FR_OK;
    return dy->dtype == FR_F32 ? rg_run<float>(k, kind, p) : rg_run<double>(k, kind, p);
}

} /* namespace */

fr_status fr_reduce_grad_cuda(const fr_cuda_kctx *k) { return rg_cuda(k); }
fr_status fr_reduce_grad_scratch(const fr_graph *g, const fr_node *n, size_t *bytes) { return rg_scratch(g, n, bytes); }
