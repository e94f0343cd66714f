/* Host-side shape checks of the gather family (see gather_plan.h). */
#include "ops/gather_plan.h"

#include <string.h>

fr_status fr_gather_index_dtype_ok(const fr_node *n, fr_dtype dt)
{
    if (dt != FR_I64 && dt != FR_I32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "indices must be int64 or int32, got %s",
                             fr_dtype_name(dt));
    return FR_OK;
}

fr_status fr_gather_axis(const fr_node *n, int rank, int *axis)
{
    int64_t a;
    FR_TRY(fr_node_attr_int(n, "axis", 0, &a));
    if (rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "data must have rank >= 1");
    return fr_norm_axis(n, a, rank, axis);
}

fr_status fr_gather_shape(const fr_node *n, int r, const int64_t *dd, int q, const int64_t *di,
                          int axis, int *rank, int64_t *dims)
{
    if (q + r - 1 > FR_MAX_RANK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "output rank %d is above fp8run's limit of %d",
                             q + r - 1, FR_MAX_RANK);
    int o = 0;
    for (int k = 0; k < axis; k++) dims[o++] = dd[k];
    for (int k = 0; k < q; k++) dims[o++] = di[k];
    for (int k = axis + 1; k < r; k++) dims[o++] = dd[k];
    *rank = o;
    return FR_OK;
}

fr_status fr_gather_elements_shapes(const fr_node *n, int r, const int64_t *dd, int q,
                                    const int64_t *di, int axis)
{
    char a[128], b[128];
    if (q != r)
        return fr_node_error(n, FR_ERR_SHAPE, "indices %s must have the rank of data %s",
                             fr_shape_str(q, di, a, sizeof a), fr_shape_str(r, dd, b, sizeof b));
    for (int k = 0; k < r; k++)
        if (k != axis && di[k] > dd[k])
            return fr_node_error(
                n, FR_ERR_SHAPE,
                "indices %s exceed data %s in dim %d (only the axis may differ freely)",
                fr_shape_str(q, di, a, sizeof a), fr_shape_str(r, dd, b, sizeof b), k);
    return FR_OK;
}

fr_status fr_gather_nd_shape(const fr_node *n, int64_t b, int r, const int64_t *dd, int q,
                             const int64_t *di, int *rank, int64_t *dims)
{
    char a[128], s[128];
    fr_shape_str(q, di, a, sizeof a);
    fr_shape_str(r, dd, s, sizeof s);
    if (r < 1 || q < 1)
        return fr_node_error(n, FR_ERR_SHAPE, "data %s and indices %s must have rank >= 1", s, a);
    if (b < 0 || b >= (q < r ? q : r))
        return fr_node_error(n, FR_ERR_SHAPE,
                             "batch_dims %lld must be below the ranks of data %s "
                             "and indices %s",
                             (long long)b, s, a);
    for (int k = 0; k < b; k++)
        if (di[k] != dd[k])
            return fr_node_error(n, FR_ERR_SHAPE, "batch dim %d differs: data %s, indices %s", k, s,
                                 a);
    int64_t m = di[q - 1];
    if (m < 1 || m > r - b)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "the last dim of indices %s must be in 1..%lld for "
                             "data %s",
                             a, (long long)(r - b), s);
    int o = 0;
    for (int k = 0; k < q - 1; k++) dims[o++] = di[k];
    for (int k = (int)(b + m); k < r; k++) dims[o++] = dd[k];
    *rank = o;
    return FR_OK;
}

fr_status fr_gather_nd_batch_dims(const fr_node *n, int64_t opset, int64_t *b)
{
    *b = 0;
    if (opset >= 12) FR_TRY(fr_node_attr_int(n, "batch_dims", 0, b));
    return FR_OK;
}

static int is_f(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64; }

/* The `shape` attribute: the forward data's shape. */
static fr_status grad_shape_attr(const fr_node *n, int *rank, int64_t *dims)
{
    int cnt;
    const int64_t *v;
    FR_TRY(fr_node_attr_ints(n, "shape", &cnt, &v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (cnt > FR_MAX_RANK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "shape has rank %d, above fp8run's limit %d",
                             cnt, FR_MAX_RANK);
    for (int k = 0; k < cnt; k++)
        if (v[k] < 0) return fr_node_error(n, FR_ERR_SHAPE, "shape has a negative dim");
    if (cnt) memcpy(dims, v, sizeof(int64_t) * (size_t)cnt);
    *rank = cnt;
    return FR_OK;
}

static fr_status dy_matches(const fr_node *n, fr_dtype dt, int rank, const int64_t *dims,
                            int want_rank, const int64_t *want)
{
    if (!is_f(dt))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dy is %s (float32 or float64 supported)",
                             fr_dtype_name(dt));
    int ok = rank == want_rank;
    for (int k = 0; ok && k < rank; k++) ok = dims[k] == want[k];
    if (!ok) {
        char a[128], b[128];
        return fr_node_error(n, FR_ERR_SHAPE, "dy has shape %s, the forward output had %s",
                             fr_shape_str(rank, dims, a, sizeof a),
                             fr_shape_str(want_rank, want, b, sizeof b));
    }
    return FR_OK;
}

int fr_gather_scatter_kind(const fr_node *n)
{
    return strcmp(n->op_type, "GatherGrad") == 0           ? 0
           : strcmp(n->op_type, "GatherElementsGrad") == 0 ? 1
                                                           : 2;
}

fr_status fr_gather_scatter_check(const fr_node *n, int kind, fr_dtype dy_dt, int dy_rank,
                                  const int64_t *dy_dims, fr_dtype idx_dt, int q, const int64_t *di,
                                  int *rank, int64_t *dims, int *axis_or_b)
{
    FR_TRY(fr_gather_index_dtype_ok(n, idx_dt));
    FR_TRY(grad_shape_attr(n, rank, dims));
    int fr = 0;
    int64_t fd[FR_MAX_RANK];
    if (kind == 0) {
        FR_TRY(fr_gather_axis(n, *rank, axis_or_b));
        FR_TRY(fr_gather_shape(n, *rank, dims, q, di, *axis_or_b, &fr, fd));
    } else if (kind == 1) {
        FR_TRY(fr_gather_axis(n, *rank, axis_or_b));
        FR_TRY(fr_gather_elements_shapes(n, *rank, dims, q, di, *axis_or_b));
        fr = q;
        memcpy(fd, di, sizeof(int64_t) * (size_t)q);
    } else {
        int64_t b;
        FR_TRY(fr_node_attr_int(n, "batch_dims", 0, &b));
        FR_TRY(fr_gather_nd_shape(n, b, *rank, dims, q, di, &fr, fd));
        *axis_or_b = (int)b;
    }
    return dy_matches(n, dy_dt, dy_rank, dy_dims, fr, fd);
}
