/* Host-side planning of the layout ops (see layout_plan.h). */
#include "ops/layout_plan.h"

#include <string.h>

/* ---- the strided view ---- */

int fr_view_simplify(fr_view *v)
{
    int r = 0;
    for (int k = 0; k < v->rank; k++) {
        if (v->dims[k] == 0) return 0;
        if (v->dims[k] == 1) continue;
        if (r > 0 && v->stride[r - 1] == v->stride[k] * v->dims[k]) {
            v->dims[r - 1] *= v->dims[k];
            v->stride[r - 1] = v->stride[k];
            continue;
        }
        v->dims[r] = v->dims[k];
        v->stride[r] = v->stride[k];
        r++;
    }
    v->rank = r;
    return 1;
}

void fr_view_permute(fr_view *v, int rank, const int64_t *dims, const int *perm)
{
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(rank, dims, cs);
    memset(v, 0, sizeof *v);
    v->rank = rank;
    for (int k = 0; k < rank; k++) {
        v->dims[k] = dims[perm[k]];
        v->stride[k] = cs[perm[k]];
    }
}

void fr_view_slice(fr_view *v, int rank, const int64_t *dims, const int64_t *start,
                   const int64_t *step, const int64_t *len)
{
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(rank, dims, cs);
    memset(v, 0, sizeof *v);
    v->rank = rank;
    for (int k = 0; k < rank; k++) {
        v->dims[k] = len[k];
        v->stride[k] = cs[k] * step[k];
        v->offset += cs[k] * start[k];
    }
}

void fr_view_tile(fr_view *v, int rank, const int64_t *dims, const int64_t *reps)
{
    int64_t cs[FR_MAX_RANK];
    fr_contig_strides(rank, dims, cs);
    memset(v, 0, sizeof *v);
    v->rank = 2 * rank;
    for (int k = 0; k < rank; k++) {
        v->dims[2 * k] = reps[k];
        v->stride[2 * k] = 0;
        v->dims[2 * k + 1] = dims[k];
        v->stride[2 * k + 1] = cs[k];
    }
}

/* ---- Transpose, Split, Slice, Tile ---- */

fr_status fr_transpose_perm(const fr_node *n, int rank, int *perm)
{
    int cnt;
    const int64_t *p;
    FR_TRY(fr_node_attr_ints(n, "perm", &cnt, &p));
    if (cnt < 0) { /* default: reverse the dims */
        for (int k = 0; k < rank; k++) perm[k] = rank - 1 - k;
        return FR_OK;
    }
    if (cnt != rank)
        return fr_node_error(n, FR_ERR_SHAPE, "perm has %d entries for an input of rank %d", cnt,
                             rank);
    int seen[FR_MAX_RANK] = {0};
    for (int k = 0; k < rank; k++) {
        if (p[k] < 0 || p[k] >= rank || seen[p[k]])
            return fr_node_error(n, FR_ERR_SHAPE, "perm is not a permutation of 0..%d", rank - 1);
        seen[p[k]] = 1;
        perm[k] = (int)p[k];
    }
    return FR_OK;
}

fr_status fr_split_sizes(const fr_node *n, int64_t opset, int64_t dim, int cnt,
                         const int64_t *split, int n_out, int64_t *sizes)
{
    int64_t num_outputs = 0;
    if (opset >= 18) FR_TRY(fr_node_attr_int(n, "num_outputs", 0, &num_outputs));
    if (cnt >= 0) {
        if (num_outputs)
            return fr_node_error(n, FR_ERR_GRAPH, "has both 'split' and 'num_outputs'");
        if (cnt != n_out)
            return fr_node_error(n, FR_ERR_SHAPE, "split has %d entries for %d outputs", cnt,
                                 n_out);
        int64_t sum = 0;
        for (int i = 0; i < cnt; i++) {
            if (split[i] < 0 || split[i] > dim - sum)
                return fr_node_error(n, FR_ERR_SHAPE,
                                     "split sizes do not add up to the axis size %lld "
                                     "(entry %d is %lld)",
                                     (long long)dim, i, (long long)split[i]);
            sizes[i] = split[i];
            sum += split[i];
        }
        if (sum != dim)
            return fr_node_error(n, FR_ERR_SHAPE, "split sizes add up to %lld, the axis has %lld",
                                 (long long)sum, (long long)dim);
        return FR_OK;
    }
    if (num_outputs) {
        if (num_outputs != n_out)
            return fr_node_error(n, FR_ERR_GRAPH, "num_outputs is %lld but the node has %d outputs",
                                 (long long)num_outputs, n_out);
        int64_t chunk = dim / n_out + (dim % n_out != 0);
        int64_t last = dim - chunk * (n_out - 1);
        if (last < 0)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "an axis of size %lld cannot be split into %d chunks of %lld",
                                 (long long)dim, n_out, (long long)chunk);
        for (int i = 0; i < n_out; i++) sizes[i] = i < n_out - 1 ? chunk : last;
        return FR_OK;
    }
    if (dim % n_out != 0)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "an axis of size %lld does not split evenly into %d outputs (give "
                             "'split' sizes)",
                             (long long)dim, n_out);
    for (int i = 0; i < n_out; i++) sizes[i] = dim / n_out;
    return FR_OK;
}

fr_status fr_slice_resolve(const fr_node *n, int rank, const int64_t *dims, int cnt,
                           const int64_t *starts, int n_ends, const int64_t *ends, int n_axes,
                           const int64_t *axes, int n_steps, const int64_t *steps, fr_slice_plan *p)
{
    if (n_ends != cnt || (n_axes >= 0 && n_axes != cnt) || (n_steps >= 0 && n_steps != cnt))
        return fr_node_error(n, FR_ERR_SHAPE,
                             "starts, ends, axes and steps must have the same length (%d, %d, "
                             "%d, %d)",
                             cnt, n_ends, n_axes, n_steps);
    int seen[FR_MAX_RANK] = {0};
    for (int k = 0; k < rank; k++) {
        p->start[k] = 0;
        p->step[k] = 1;
        p->len[k] = dims[k];
    }
    for (int i = 0; i < cnt; i++) {
        int a;
        FR_TRY(fr_norm_axis(n, n_axes >= 0 ? axes[i] : i, rank, &a));
        if (seen[a]) return fr_node_error(n, FR_ERR_SHAPE, "axis %d is sliced twice", a);
        seen[a] = 1;
        int64_t d = dims[a], s = starts[i], e = ends[i], st = n_steps >= 0 ? steps[i] : 1;
        if (st == 0) return fr_node_error(n, FR_ERR_SHAPE, "step for axis %d is 0", a);
        if (s < 0) s += d;
        if (e < 0) e += d;
        int64_t len;
        if (d == 0) { /* nothing to select (the spec's clamp range [0, d-1] is empty) */
            len = 0;
        } else if (st > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            len = e > s ? (e - s - 1) / st + 1 : 0;
        } else {
            s = s < 0 ? 0 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            len = s > e ? (int64_t)((uint64_t)(s - e - 1) / ((uint64_t)0 - (uint64_t)st)) + 1 : 0;
        }
        p->start[a] = len ? s : 0;
        p->step[a] = len > 1 ? st : 1; /* |step| < dim when it is used: no stride overflow */
        p->len[a] = len;
    }
    return FR_OK;
}

fr_status fr_slice_attr(const fr_node *n, const char *name, int required, int *cnt, int64_t *vals)
{
    const int64_t *a;
    FR_TRY(fr_node_attr_ints(n, name, cnt, &a));
    if (*cnt < 0 && required)
        return fr_node_error(n, FR_ERR_GRAPH, "attribute '%s' is missing", name);
    if (*cnt > FR_MAX_RANK)
        return fr_node_error(n, FR_ERR_SHAPE, "'%s' has %d entries, at most %d expected", name,
                             *cnt, FR_MAX_RANK);
    if (*cnt > 0) memcpy(vals, a, sizeof(int64_t) * (size_t)*cnt);
    return FR_OK;
}

fr_status fr_tile_dims(const fr_node *n, int rank, const int64_t *dims, int cnt,
                       const int64_t *reps, int64_t *out)
{
    if (cnt != rank)
        return fr_node_error(n, FR_ERR_SHAPE, "repeats has %d entries for an input of rank %d", cnt,
                             rank);
    for (int k = 0; k < rank; k++) {
        if (reps[k] < 0)
            return fr_node_error(n, FR_ERR_SHAPE, "repeats[%d] = %lld is negative", k,
                                 (long long)reps[k]);
        if (reps[k] && dims[k] > INT64_MAX / reps[k])
            return fr_node_error(n, FR_ERR_SHAPE, "tiled dim %d overflows", k);
        out[k] = dims[k] * reps[k];
    }
    int64_t numel;
    fr_status st = fr_shape_numel(rank, out, "tiled output", &numel);
    if (st != FR_OK) return fr_node_error(n, st, "%s", fr_last_error());
    return FR_OK;
}

/* ---- SliceGrad, TileGrad ---- */

static fr_status float_dy(const fr_node *n, fr_dtype dt)
{
    if (dt == FR_F32 || dt == FR_F64) return FR_OK;
    return fr_node_error(n, FR_ERR_UNSUPPORTED, "dy is %s (float32 or float64 supported)",
                         fr_dtype_name(dt));
}

/* An ints attribute with exactly `rank` entries. */
static fr_status rank_ints(const fr_node *n, const char *name, int rank, const int64_t **v)
{
    int cnt;
    FR_TRY(fr_node_attr_ints(n, name, &cnt, v));
    if (cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute '%s' is required", name);
    if (cnt != rank)
        return fr_node_error(n, FR_ERR_SHAPE, "attribute '%s' has %d entries for rank %d", name,
                             cnt, rank);
    return FR_OK;
}

static fr_status shape_attr(const fr_node *n, int *rank, const int64_t **dims)
{
    FR_TRY(fr_node_attr_ints(n, "shape", rank, dims));
    if (*rank < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'shape' is required");
    if (*rank > FR_MAX_RANK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "shape has rank %d, above fp8run's limit %d",
                             *rank, FR_MAX_RANK);
    for (int k = 0; k < *rank; k++)
        if ((*dims)[k] < 0) return fr_node_error(n, FR_ERR_SHAPE, "shape has a negative dim");
    return FR_OK;
}

fr_status fr_slice_grad_check(const fr_node *n, fr_dtype dt, int rank, const int64_t *dims,
                              int *out_rank, const int64_t **shape, const int64_t **starts,
                              const int64_t **steps)
{
    FR_TRY(float_dy(n, dt));
    FR_TRY(shape_attr(n, out_rank, shape));
    if (rank != *out_rank)
        return fr_node_error(n, FR_ERR_SHAPE, "dy has rank %d, shape has %d", rank, *out_rank);
    FR_TRY(rank_ints(n, "starts", rank, starts));
    FR_TRY(rank_ints(n, "steps", rank, steps));
    for (int k = 0; k < rank; k++) {
        int64_t d = (*shape)[k], s = (*starts)[k], st = (*steps)[k], len = dims[k];
        if (!len) continue;
        /* first and last written positions inside [0, d); steps bounded so no overflow */
        int ok = st != 0 && st > -d - 1 && st < d + 1 && s >= 0 && s < d;
        if (ok && len > 1) {
            ok = len <= d;
            int64_t last = s + (len - 1) * st;
            ok = ok && last >= 0 && last < d;
        }
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "dim %d: %lld elements from %lld in steps of %lld do not fit in "
                                 "%lld",
                                 k, (long long)len, (long long)s, (long long)st, (long long)d);
    }
    return FR_OK;
}

fr_status fr_tile_grad_check(const fr_node *n, fr_dtype dt, int rank, const int64_t *dims,
                             int *out_rank, const int64_t **shape)
{
    FR_TRY(float_dy(n, dt));
    FR_TRY(shape_attr(n, out_rank, shape));
    int ok = rank == *out_rank;
    for (int k = 0; ok && k < rank; k++)
        ok = (*shape)[k] ? dims[k] % (*shape)[k] == 0 : dims[k] == 0;
    if (!ok) {
        char a[128], b[128];
        return fr_node_error(n, FR_ERR_SHAPE, "dy %s is not a tiling of %s",
                             fr_shape_str(rank, dims, a, sizeof a),
                             fr_shape_str(*out_rank, *shape, b, sizeof b));
    }
    return FR_OK;
}
