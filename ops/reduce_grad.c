/* The backward op of the reductions (reduce.c): ReduceGrad (ai.fp8run).
 *
 * ReduceGrad(dy [, x [, y]]) {kind, axes, keepdims, shape} gives d(loss)/dx for every
 * reduction in one fused kernel: `kind` is the op name without "Reduce" ("Sum", "Max", ...),
 * `axes` the reduced axes of x resolved by the forward node (an empty list reduces none:
 * noop_with_empty_axes), `shape` the shape of x and keepdims the forward attribute (it only
 * decides dy's shape; the row-major layout is the same either way). Only the inputs a kind
 * needs are wired, so Sum and Mean do not keep x alive: Sum, Mean take dy; SumSquare, L1,
 * Prod take dy, x; Max, Min, L2, LogSumExp take dy, x, y (y = the forward output).
 *
 * Conventions follow PyTorch's backward formulas:
 *   Sum: dy;  Mean: dy / count;  SumSquare: 2 x dy;  L1: sign(x) dy (0 at 0);
 *   L2: x / y dy, 0 where y = 0;  LogSumExp: exp(x - y) dy;
 *   Max/Min: dy shared evenly between the elements equal to the result (torch.amax/amin);
 *     a NaN result counts the NaN elements as its ties (they are what the forward picked),
 *     a deliberate departure: torch's mask formula (x == y) matches nothing there and
 *     divides by a zero count, which spreads NaN over the whole group;
 *   Prod: the product of the other elements times dy, computed from a double product of the
 *     nonzero elements and their zero count, so one zero gets the product of the rest and
 *     two or more zeros give 0 everywhere (torch.prod). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "ops/reduce.h"

static const char *const rg_names[] = {"Sum",  "Mean",      "Max", "Min", "Prod",
                                       "SumSquare", "L1", "L2", "LogSumExp"};
static const red_kind rg_kinds[] = {R_SUM,  R_MEAN, R_MAX, R_MIN,
                                    R_PROD, R_SUMSQ, R_L1, R_L2, R_LSE};

typedef struct rg_cfg {
    red_kind kind;
    int rank;
    int64_t dims[FR_MAX_RANK];
    unsigned char red[FR_MAX_RANK];
    int out_rank;
    int64_t out_dims[FR_MAX_RANK];
} rg_cfg;

static int dims_eq(int ra, const int64_t *a, int rb, const int64_t *b)
{
    if (ra != rb) return 0;
    for (int k = 0; k < ra; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

fr_status fr_reduce_grad_kind(const fr_node *n, int n_in, red_kind *out)
{
    const char *kind;
    FR_TRY(fr_node_attr_string(n, "kind", NULL, &kind));
    if (!kind) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'kind' is required");
    size_t i = 0;
    while (i < sizeof rg_names / sizeof rg_names[0] && strcmp(rg_names[i], kind) != 0) i++;
    if (i == sizeof rg_names / sizeof rg_names[0])
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "kind '%s' is not a reduction", kind);
    *out = rg_kinds[i];
    if (n_in != fr_reduce_grad_inputs(*out))
        return fr_node_error(n, FR_ERR_GRAPH, "kind '%s' takes %d inputs, the node has %d", kind,
                             fr_reduce_grad_inputs(*out), n_in);
    return FR_OK;
}

fr_status fr_reduce_grad_shape(const fr_node *n, int *rank, int64_t *dims, unsigned char *red)
{
    int cnt;
    const int64_t *v;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > FR_MAX_RANK) return fr_node_error(n, FR_ERR_UNSUPPORTED, "shape has rank %d", cnt);
    *rank = cnt;
    for (int k = 0; k < cnt; k++) {
        if (v[k] < 0) return fr_node_error(n, FR_ERR_SHAPE, "shape has a negative dim");
        dims[k] = v[k];
    }
    FR_TRY(fr_node_attr_ints(n, "axes", &cnt, &v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'axes' is required");
    memset(red, 0, FR_MAX_RANK);
    for (int j = 0; j < cnt; j++) {
        int a;
        FR_TRY(fr_norm_axis(n, v[j], *rank, &a));
        red[a] = 1;
    }
    return FR_OK;
}

/* Attributes and input shapes; x / y may be NULL (then only their absence is checked). */
static fr_status rg_config(const fr_node *n, int n_in, fr_dtype dt, int dy_rank,
                           const int64_t *dy_dims, const fr_tensor *x, const fr_tensor *y,
                           rg_cfg *c)
{
    memset(c, 0, sizeof *c);
    FR_TRY(fr_reduce_grad_kind(n, n_in, &c->kind));
    if (dt != FR_F32 && dt != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dy is %s (float32 or float64 supported)",
                             fr_dtype_name(dt));
    FR_TRY(fr_reduce_grad_shape(n, &c->rank, c->dims, c->red));
    int keepdims = 1;
    FR_TRY(fr_reduce_bool_attr(n, "keepdims", 1, &keepdims));
    for (int k = 0; k < c->rank; k++) {
        if (!c->red[k])
            c->out_dims[c->out_rank++] = c->dims[k];
        else if (keepdims)
            c->out_dims[c->out_rank++] = 1;
    }
    char a[128], b[128];
    if (!dims_eq(dy_rank, dy_dims, c->out_rank, c->out_dims))
        return fr_node_error(n, FR_ERR_SHAPE, "dy has shape %s, the reduction gives %s",
                             fr_shape_str(dy_rank, dy_dims, a, sizeof a),
                             fr_shape_str(c->out_rank, c->out_dims, b, sizeof b));
    if (x && (x->dtype != dt || !dims_eq(x->rank, x->dims, c->rank, c->dims)))
        return fr_node_error(n, FR_ERR_SHAPE, "x is %s %s, expected %s %s", fr_dtype_name(x->dtype),
                             fr_shape_str(x->rank, x->dims, a, sizeof a), fr_dtype_name(dt),
                             fr_shape_str(c->rank, c->dims, b, sizeof b));
    if (y && (y->dtype != dt || !dims_eq(y->rank, y->dims, dy_rank, dy_dims)))
        return fr_node_error(n, FR_ERR_SHAPE, "y is %s %s, expected dy's %s %s",
                             fr_dtype_name(y->dtype), fr_shape_str(y->rank, y->dims, a, sizeof a),
                             fr_dtype_name(dt), fr_shape_str(dy_rank, dy_dims, b, sizeof b));
    return FR_OK;
}

static fr_status rg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, n->n_inputs < 1 ? 1 : n->n_inputs, 3));
    const fr_value *dy = fr_node_in(g, n, 0), *xv = fr_node_in(g, n, 1), *yv = fr_node_in(g, n, 2);
    /* value shapes checked through header-only tensors */
    fr_tensor xt = {0}, yt = {0};
    if (xv) {
        xt.dtype = xv->dtype;
        xt.rank = xv->rank;
        memcpy(xt.dims, xv->dims, sizeof xt.dims);
    }
    if (yv) {
        yt.dtype = yv->dtype;
        yt.rank = yv->rank;
        memcpy(yt.dims, yv->dims, sizeof yt.dims);
    }
    rg_cfg c;
    FR_TRY(rg_config(n, n->n_inputs, dy->dtype, dy->rank, dy->dims, xv ? &xt : NULL,
                     yv ? &yt : NULL, &c));
    fr_infer_set(g, n, 0, dy->dtype, c.rank, c.dims);
    return FR_OK;
}

static inline double rgd(const void *p, int f64, int64_t i)
{
    return f64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

/* sign(x), 0 at 0, NaN kept */
static double sign_nan(double x) { return isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

/* Walk x in row-major order running the body with i (x offset) and o (dy/y offset). */
#define RG_WALK(...)                                                                           \
    do {                                                                                       \
        int64_t idx_[FR_MAX_RANK] = {0}, o_ = 0;                                               \
        for (int64_t i0_ = 0; i0_ < nx; i0_ += run) {                                          \
            for (int64_t j_ = 0; j_ < run; j_++) {                                             \
                const int64_t i = i0_ + j_, o = o_ + j_ * rs;                                  \
                __VA_ARGS__;                                                           \
            }                                                                                  \
            for (int k_ = c.rank - 2; k_ >= 0; k_--) {                                         \
                o_ += ys[k_];                                                                  \
                if (++idx_[k_] < c.dims[k_]) break;                                            \
                o_ -= ys[k_] * c.dims[k_];                                                     \
                idx_[k_] = 0;                                                                  \
            }                                                                                  \
        }                                                                                      \
    } while (0)

static fr_status rg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    for (int i = 0; i < ctx->n_in; i++)
        if (!ctx->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    if (ctx->n_in < 1 || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs dy and an output");
    const fr_tensor *dy = ctx->in[0], *x = ctx->n_in > 1 ? ctx->in[1] : NULL,
                    *y = ctx->n_in > 2 ? ctx->in[2] : NULL;
    fr_tensor *dx = ctx->out[0];
    rg_cfg c;
    FR_TRY(rg_config(n, ctx->n_in, dy->dtype, dy->rank, dy->dims, x, y, &c));
    FR_TRY(fr_check_out(n, dx, dy->dtype, c.rank, c.dims));
    int64_t nx = fr_tensor_numel(dx), ny = fr_tensor_numel(dy);
    if (!nx) return FR_OK;
    /* dy offsets: contiguous strides over the kept dims, 0 along reduced ones */
    int64_t ys[FR_MAX_RANK], s = 1, count = 1;
    for (int k = c.rank - 1; k >= 0; k--) {
        ys[k] = c.red[k] ? 0 : s;
        if (!c.red[k]) s *= c.dims[k];
        else count *= c.dims[k];
    }
    int64_t run = c.rank ? c.dims[c.rank - 1] : 1, rs = c.rank ? ys[c.rank - 1] : 0;
    const int f64 = dy->dtype == FR_F64;
    const void *g = dy->data, *xd = x ? x->data : NULL, *yd = y ? y->data : NULL;
    double *aux = NULL;   /* Max/Min: tie counts; Prod: product of the nonzero elements */
    int64_t *zeros = NULL; /* Prod: zero counts */
    if (c.kind == R_MAX || c.kind == R_MIN || c.kind == R_PROD) {
        aux = fr_malloc(sizeof(double) * (size_t)(ny ? ny : 1), "ReduceGrad counts");
        zeros = fr_calloc((size_t)(ny ? ny : 1), sizeof(int64_t), "ReduceGrad counts");
        if (!aux || !zeros) {
            free(aux);
            free(zeros);
            return FR_ERR_OOM;
        }
        for (int64_t o = 0; o < ny; o++) aux[o] = c.kind == R_PROD ? 1.0 : 0.0;
    }
#define TIE(a, b) ((a) == (b) || (isnan(a) && isnan(b)))
    if (c.kind == R_MAX || c.kind == R_MIN)
        RG_WALK({
            const double xv = rgd(xd, f64, i), yv = rgd(yd, f64, o);
            if (TIE(xv, yv)) aux[o] += 1.0;
        });
    if (c.kind == R_PROD)
        RG_WALK({
            const double xv = rgd(xd, f64, i);
            if (xv == 0)
                zeros[o]++;
            else
                aux[o] *= xv;
        });
    double *out64 = f64 ? dx->data : NULL;
    float *out32 = f64 ? NULL : dx->data;
#define RG_OUT(...)                                                                            \
    RG_WALK({                                                                                  \
        const double gv = rgd(g, f64, o);                                                      \
        const double v = (__VA_ARGS__);                                                        \
        if (f64)                                                                               \
            out64[i] = v;                                                                      \
        else                                                                                   \
            out32[i] = (float)v;                                                               \
    })
    switch (c.kind) {
    case R_SUM: RG_OUT(gv); break;
    case R_MEAN: RG_OUT(gv / (double)count); break;
    case R_SUMSQ: RG_OUT(2.0 * rgd(xd, f64, i) * gv); break;
    case R_L1: RG_OUT(sign_nan(rgd(xd, f64, i)) * gv); break;
    default: break;
    }
    if (c.kind == R_L2)
        RG_OUT(rgd(yd, f64, o) == 0 ? 0.0 : rgd(xd, f64, i) / rgd(yd, f64, o) * gv);
    if (c.kind == R_LSE) RG_OUT(exp(rgd(xd, f64, i) - rgd(yd, f64, o)) * gv);
    if (c.kind == R_MAX || c.kind == R_MIN)
        RG_OUT(TIE(rgd(xd, f64, i), rgd(yd, f64, o)) ? gv / aux[o] : 0.0);
    if (c.kind == R_PROD)
        RG_OUT(zeros[o] == 0   ? aux[o] / rgd(xd, f64, i) * gv
               : zeros[o] == 1 ? (rgd(xd, f64, i) == 0 ? aux[o] * gv : 0.0)
                               : 0.0);
#undef RG_OUT
#undef TIE
    free(aux);
    free(zeros);
    return FR_OK;
}

const fr_op_def fr_ops_reduce_grad[] = {
    {"ReduceGrad", FR_DOMAIN_FP8RUN, 1, rg_infer, rg_cpu, NULL, 0},
    {0},
};
