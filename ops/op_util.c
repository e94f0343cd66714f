/* Helpers shared by op implementations: node I/O access, error prefixes, inference
 * utilities and broadcasting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"

fr_value *fr_node_in(fr_graph *g, const fr_node *n, int i)
{
    if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0) return NULL;
    return &g->values[n->inputs[i]];
}

fr_value *fr_node_out(fr_graph *g, const fr_node *n, int i)
{
    if (i < 0 || i >= n->n_outputs || n->outputs[i] < 0) return NULL;
    return &g->values[n->outputs[i]];
}

fr_status fr_node_error(const fr_node *n, fr_status st, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fr_error(st, "node '%s' (%s): %s", n->name, n->op_type, msg);
}

fr_status fr_infer_require_inputs(fr_graph *g, const fr_node *n, int min, int max)
{
    if (n->n_inputs < min || n->n_inputs > max)
        return fr_node_error(n, FR_ERR_GRAPH, "has %d inputs, expected %d to %d", n->n_inputs,
                             min, max);
    for (int i = 0; i < min; i++) {
        fr_value *v = fr_node_in(g, n, i);
        if (!v) return fr_node_error(n, FR_ERR_GRAPH, "required input %d is missing", i);
        if (v->dtype == FR_UNDEFINED || v->rank < 0)
            return fr_node_error(n, FR_ERR_SHAPE, "input %d ('%s') has no known type/shape", i,
                                 v->name);
        for (int d = 0; d < v->rank; d++)
            if (v->dims[d] < 0)
                return fr_node_error(
                    n, FR_ERR_SHAPE,
                    "input '%s' has an unknown dimension %d%s%s%s: fp8run needs static shapes "
                    "(fix symbolic dims with --dim NAME=VALUE)",
                    v->name, d, v->dim_params[d] ? " ('" : "",
                    v->dim_params[d] ? v->dim_params[d] : "", v->dim_params[d] ? "')" : "");
    }
    return FR_OK;
}

void fr_infer_set(fr_graph *g, const fr_node *n, int i, fr_dtype dt, int rank,
                  const int64_t *dims)
{
    fr_value *v = fr_node_out(g, n, i);
    if (v) fr_value_set_shape(v, dt, rank, dims);
}

void fr_infer_same(fr_graph *g, const fr_node *n, int o, int i)
{
    fr_value *src = fr_node_in(g, n, i);
    if (src) fr_infer_set(g, n, o, src->dtype, src->rank, src->dims);
}

fr_status fr_infer_const_ints(fr_graph *g, const fr_node *n, int i, int *count,
                              int64_t **vals)
{
    fr_value *v = fr_node_in(g, n, i);
    *count = 0;
    *vals = NULL;
    if (!v) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    if (!v->constant)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "input '%s' must be a constant known when the session is built "
                             "(fp8run runs static shapes; fix symbolic dims with --dim)",
                             v->name);
    const fr_tensor *t = v->constant;
    if (!fr_dtype_is_int(t->dtype))
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' must be an integer tensor, got %s",
                             v->name, fr_dtype_name(t->dtype));
    if (t->rank > 1)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' must be 1-D, got rank %d", v->name,
                             t->rank);
    int64_t cnt = fr_tensor_numel(t);
    if (cnt > FR_MAX_RANK * 1024)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' has too many elements (%lld)", v->name,
                             (long long)cnt);
    int64_t *out = fr_calloc((size_t)(cnt ? cnt : 1), sizeof(int64_t), "shape values");
    if (!out) return FR_ERR_OOM;
    for (int64_t k = 0; k < cnt; k++) out[k] = fr_tensor_get_i64(t, k);
    *count = (int)cnt;
    *vals = out;
    return FR_OK;
}

fr_status fr_infer_const_shape(fr_graph *g, const fr_node *n, int i, int *rank, int64_t *dims)
{
    int cnt;
    int64_t *shape;
    FR_TRY(fr_infer_const_ints(g, n, i, &cnt, &shape));
    fr_status st = FR_OK;
    if (cnt > FR_MAX_RANK)
        st = fr_node_error(n, FR_ERR_UNSUPPORTED, "shape has rank %d, fp8run supports up to %d", cnt, FR_MAX_RANK);
    else if (cnt > 0)
        memcpy(dims, shape, (size_t)cnt * sizeof *dims);
    *rank = cnt;
    free(shape);
    return st;
}

fr_status fr_norm_axis(const fr_node *n, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank || (rank == 0 && axis != 0 && axis != -1))
        return fr_node_error(n, FR_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return FR_OK;
}

fr_status fr_broadcast_shape(const fr_node *n, int ra, const int64_t *da, int rb,
                             const int64_t *db, int *rout, int64_t *dout)
{
    int r = ra > rb ? ra : rb;
    for (int k = 0; k < r; k++) {
        int ia = ra - r + k, ib = rb - r + k;
        int64_t a = ia >= 0 ? da[ia] : 1, b = ib >= 0 ? db[ib] : 1;
        if (a == b || b == 1) {
            dout[k] = a;
        } else if (a == 1) {
            dout[k] = b;
        } else {
            char sa[128], sb[128];
            return fr_node_error(n, FR_ERR_SHAPE, "shapes %s and %s cannot be broadcast",
                                 fr_shape_str(ra, da, sa, sizeof sa),
                                 fr_shape_str(rb, db, sb, sizeof sb));
        }
    }
    *rout = r;
    return FR_OK;
}

void fr_contig_strides(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        strides[k] = s;
        s *= dims[k];
    }
}

void fr_broadcast_strides(int rsrc, const int64_t *dsrc, int rout, const int64_t *dout,
                          int64_t *strides)
{
    int64_t cs[FR_MAX_RANK];
    (void)dout;
    fr_contig_strides(rsrc, dsrc, cs);
    for (int k = 0; k < rout; k++) {
        int is = rsrc - rout + k;
        strides[k] = (is >= 0 && dsrc[is] != 1) ? cs[is] : 0;
    }
}

fr_status fr_holdable(const fr_node *n, const char *what, fr_dtype dt)
{
    if (fr_dtype_size(dt) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "%s has dtype %s, which fp8run cannot hold in a tensor", what,
                             fr_dtype_name(dt));
    return FR_OK;
}

fr_status fr_attr_bf16(const fr_node *n, const char *attr, int *bf16)
{
    const char *s;
    FR_TRY(fr_node_attr_string(n, attr, "float32", &s));
    *bf16 = strcmp(s, "bfloat16") == 0;
    if (!*bf16 && strcmp(s, "float32") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s '%s' is not one of float32, bfloat16", attr, s);
    return FR_OK;
}

fr_status fr_check_out(const fr_node *n, const fr_tensor *y, fr_dtype dt, int rank,
                       const int64_t *dims)
{
    int same = y && y->dtype == dt && y->rank == rank;
    for (int k = 0; same && k < rank; k++) same = y->dims[k] == dims[k];
    if (!same) {
        char a[128], b[128];
        return fr_node_error(n, FR_ERR_SHAPE,
                             "output tensor is %s %s, expected %s %s (re-run shape inference)",
                             y ? fr_dtype_name(y->dtype) : "missing",
                             y ? fr_shape_str(y->rank, y->dims, a, sizeof a) : "",
                             fr_dtype_name(dt), fr_shape_str(rank, dims, b, sizeof b));
    }
    return FR_OK;
}

void fr_store_acc(fr_tensor *y, const double *acc, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (y->dtype == FR_F64)
            ((double *)y->data)[i] = acc[i];
        else
            ((float *)y->data)[i] = (float)acc[i];
    }
}

int fr_node_is_view(const fr_node *n)
{
    if (n->domain[0] || n->n_inputs < 1 || n->inputs[0] < 0 || n->n_outputs < 1 || n->outputs[0] < 0) return 0;
    const char *op = n->op_type;
    if (strcmp(op, "Reshape") == 0 || strcmp(op, "Squeeze") == 0 || strcmp(op, "Unsqueeze") == 0 ||
        strcmp(op, "Flatten") == 0 || strcmp(op, "Identity") == 0)
        return n->n_outputs == 1;
    /* inference Dropout without a mask output is the identity */
    if (strcmp(op, "Dropout") == 0) return n->n_outputs == 1 || n->outputs[1] < 0;
    return 0;
}
