/* Shape op family: Shape, Size, Reshape, Squeeze, Unsqueeze, Flatten, ConstantOfShape, Range,
 * Constant.
 *
 * Everything here either reads only shapes (Shape, Size), reinterprets the same bytes under a
 * new shape (Reshape, Squeeze, Unsqueeze, Flatten: a plain copy, any dtype), or creates data
 * from attributes and constant inputs. Inputs that decide an output shape (Reshape's shape,
 * Squeeze/Unsqueeze axes, ConstantOfShape's shape, Range's start/limit/delta) must be
 * constant when infer() runs: fp8run plans static shapes once per session. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"

/* ---- helpers ---- */

/* An output shape must have non-negative dims whose element count fits in int64. */
static fr_status check_out_shape(const fr_node *n, int rank, const int64_t *dims)
{
    int64_t numel;
    fr_status st = fr_shape_numel(rank, dims, "output shape", &numel);
    if (st != FR_OK) return fr_node_error(n, st, "%s", fr_last_error());
    return FR_OK;
}

/* Reshape, Squeeze, Unsqueeze, Flatten: the row-major bytes do not change. */
static fr_status copy_bytes_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x || !y) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input or output missing");
    if (x->dtype != y->dtype || fr_tensor_numel(x) != fr_tensor_numel(y)) {
        char a[128], b[128];
        return fr_node_error(ctx->node, FR_ERR_SHAPE,
                             "output %s %s does not hold the input %s %s (re-run shape inference)",
                             fr_dtype_name(y->dtype), fr_shape_str(y->rank, y->dims, a, sizeof a),
                             fr_dtype_name(x->dtype), fr_shape_str(x->rank, x->dims, b, sizeof b));
    }
    if (y->nbytes) memcpy(y->data, x->data, y->nbytes);
    return FR_OK;
}

/* Normalize a list of axes against `rank`, refusing duplicates; seen[k] marks axis k. */
static fr_status norm_axes(const fr_node *n, int cnt, const int64_t *axes, int rank,
                           int seen[FR_MAX_RANK])
{
    memset(seen, 0, sizeof(int) * FR_MAX_RANK);
    for (int i = 0; i < cnt; i++) {
        int a;
        FR_TRY(fr_norm_axis(n, axes[i], rank, &a));
        if (seen[a])
            return fr_node_error(n, FR_ERR_SHAPE, "axis %lld is repeated in axes",
                                 (long long)axes[i]);
        seen[a] = 1;
    }
    return FR_OK;
}

/* ---- Shape (start/end from opset 15) ---- */

static fr_status shape_range(const fr_node *n, int64_t opset, int rank, int *lo, int *hi)
{
    int64_t s = 0, e = rank;
    if (opset >= 15) {
        FR_TRY(fr_node_attr_int(n, "start", 0, &s));
        FR_TRY(fr_node_attr_int(n, "end", rank, &e));
    }
    /* negative counts from the back, then both clamp to [0, rank] */
    if (s < 0) s += rank;
    if (e < 0) e += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    e = e < 0 ? 0 : e > rank ? rank : e;
    *lo = (int)s;
    *hi = e > s ? (int)e : (int)s;
    return FR_OK;
}

static fr_status shape_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    int lo, hi;
    FR_TRY(shape_range(n, fr_graph_opset(g, n->domain), x->rank, &lo, &hi));
    int64_t len = hi - lo;
    fr_infer_set(g, n, 0, FR_I64, 1, &len);
    return FR_OK;
}

/* Reads only the input's shape (constant folding passes a data-less header). */
static fr_status shape_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    int lo, hi;
    FR_TRY(shape_range(ctx->node, ctx->opset, x->rank, &lo, &hi));
    int64_t len = hi - lo;
    FR_TRY(fr_check_out(ctx->node, y, FR_I64, 1, &len));
    for (int k = lo; k < hi; k++) ((int64_t *)y->data)[k - lo] = x->dims[k];
    return FR_OK;
}

/* ---- Size ---- */

static fr_status size_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    fr_infer_set(g, n, 0, FR_I64, 0, NULL);
    return FR_OK;
}

static fr_status size_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *x = ctx->n_in > 0 ? ctx->in[0] : NULL;
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    if (!x) return fr_node_error(ctx->node, FR_ERR_GRAPH, "input missing");
    FR_TRY(fr_check_out(ctx->node, y, FR_I64, 0, NULL));
    *(int64_t *)y->data = fr_tensor_numel(x);
    return FR_OK;
}

/* ---- Reshape ---- */

/* Resolve the requested shape against the input: 0 copies the input's dim at that index
 * (unless allowzero, where 0 is a real zero-size dim), one -1 takes what is left. */
static fr_status reshape_target(const fr_node *n, int64_t opset, int in_rank,
                                const int64_t *in_dims, int cnt, const int64_t *shape, int *rank,
                                int64_t *dims)
{
    char ss[160], si[160];
    int64_t allowzero = 0, in_numel;
    if (opset >= 14) FR_TRY(fr_node_attr_int(n, "allowzero", 0, &allowzero));
    FR_TRY(fr_shape_numel(in_rank, in_dims, n->name, &in_numel));
    fr_shape_str(cnt > FR_MAX_RANK ? 0 : cnt, shape, ss, sizeof ss);
    fr_shape_str(in_rank, in_dims, si, sizeof si);
    if (cnt > FR_MAX_RANK)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "target shape has rank %d, fp8run supports up to %d", cnt,
                             FR_MAX_RANK);
    int infer_at = -1, has_zero = 0;
    int64_t known = 1;
    for (int i = 0; i < cnt; i++) {
        int64_t d = shape[i];
        if (d == -1) {
            if (infer_at >= 0)
                return fr_node_error(n, FR_ERR_SHAPE, "target shape %s has more than one -1", ss);
            infer_at = i;
            continue;
        }
        if (d < -1)
            return fr_node_error(n, FR_ERR_SHAPE, "target shape %s has an invalid dim %lld", ss,
                                 (long long)d);
        if (d == 0 && !allowzero) {
            if (i >= in_rank)
                return fr_node_error(n, FR_ERR_SHAPE,
                                     "target shape %s: 0 at index %d copies an input dim, but "
                                     "the input %s has rank %d",
                                     ss, i, si, in_rank);
            d = in_dims[i];
        }
        if (d == 0) has_zero = 1;
        dims[i] = d;
        if (d != 0 && known > INT64_MAX / d)
            return fr_node_error(n, FR_ERR_SHAPE, "target shape %s overflows int64", ss);
        known *= d;
    }
    if (allowzero && has_zero && infer_at >= 0)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "target shape %s has both 0 and -1, which allowzero=1 forbids", ss);
    if (infer_at >= 0) {
        if (known == 0 || in_numel % known != 0)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "cannot reshape input %s (%lld elements) to %s: the -1 dim "
                                 "cannot be inferred",
                                 si, (long long)in_numel, ss);
        dims[infer_at] = in_numel / known;
    } else if (known != in_numel) {
        return fr_node_error(n, FR_ERR_SHAPE,
                             "cannot reshape input %s (%lld elements) to %s (%lld elements)", si,
                             (long long)in_numel, ss, (long long)known);
    }
    *rank = cnt;
    return FR_OK;
}

/* A required integer list that opset `since` moved from attribute `name` to input 1 (Reshape's
 * shape, Unsqueeze's axes), read after checking the input count: *vals malloc'ed (`what` names
 * it), the caller frees it. */
static fr_status input_or_attr_ints(fr_graph *g, const fr_node *n, int64_t since, const char *name, const char *what,
                                    int *cnt, int64_t **vals)
{
    if (fr_graph_opset(g, n->domain) >= since) {
        FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
        return fr_infer_const_ints(g, n, 1, cnt, vals);
    }
    const int64_t *a;
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    FR_TRY(fr_node_attr_ints(n, name, cnt, &a));
    if (*cnt < 0) return fr_node_error(n, FR_ERR_GRAPH, "attribute '%s' is missing", name);
    *vals = fr_calloc((size_t)*cnt + 1, sizeof **vals, what);
    if (!*vals) return FR_ERR_OOM;
    if (*cnt) memcpy(*vals, a, (size_t)*cnt * sizeof **vals);
    return FR_OK;
}

static fr_status reshape_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int64_t opset = fr_graph_opset(g, n->domain);
    int cnt;
    int64_t *shape = NULL;
    FR_TRY(input_or_attr_ints(g, n, 5, "shape", "reshape target", &cnt, &shape));
    const fr_value *x = fr_node_in(g, n, 0);
    fr_status st = fr_holdable(n, "input", x->dtype);
    int rank = 0;
    int64_t dims[FR_MAX_RANK];
    if (st == FR_OK) st = reshape_target(n, opset, x->rank, x->dims, cnt, shape, &rank, dims);
    free(shape);
    FR_TRY(st);
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

/* ---- Squeeze (axes: attribute before opset 13, optional input from 13) ---- */

static fr_status squeeze_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int64_t opset = fr_graph_opset(g, n->domain);
    FR_TRY(fr_infer_require_inputs(g, n, 1, opset >= 13 ? 2 : 1));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    int cnt = -1;
    int64_t *axes = NULL;
    if (opset >= 13) {
        if (fr_node_in(g, n, 1)) FR_TRY(fr_infer_const_ints(g, n, 1, &cnt, &axes));
    } else {
        const int64_t *a;
        FR_TRY(fr_node_attr_ints(n, "axes", &cnt, &a));
        if (cnt >= 0) {
            axes = fr_calloc((size_t)cnt + 1, sizeof *axes, "squeeze axes");
            if (!axes) return FR_ERR_OOM;
            if (cnt) memcpy(axes, a, (size_t)cnt * sizeof *axes);
        }
    }
    int drop[FR_MAX_RANK];
    fr_status st = FR_OK;
    if (cnt < 0) { /* no axes: every 1-dim goes */
        for (int k = 0; k < x->rank; k++) drop[k] = x->dims[k] == 1;
    } else {
        st = norm_axes(n, cnt, axes, x->rank, drop);
        for (int k = 0; st == FR_OK && k < x->rank; k++) {
            if (drop[k] && x->dims[k] != 1) {
                char s[128];
                st = fr_node_error(
                    n, FR_ERR_SHAPE, "cannot squeeze axis %d of size %lld (input shape %s)", k,
                    (long long)x->dims[k], fr_shape_str(x->rank, x->dims, s, sizeof s));
            }
        }
    }
    free(axes);
    FR_TRY(st);
    int rank = 0;
    int64_t dims[FR_MAX_RANK];
    for (int k = 0; k < x->rank; k++)
        if (!drop[k]) dims[rank++] = x->dims[k];
    fr_infer_set(g, n, 0, x->dtype, rank, dims);
    return FR_OK;
}

/* ---- Unsqueeze (axes: attribute before opset 13, input from 13; negative axes count in the
 * output's rank) ---- */

static fr_status unsqueeze_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    int cnt;
    int64_t *axes = NULL;
    FR_TRY(input_or_attr_ints(g, n, 13, "axes", "unsqueeze axes", &cnt, &axes));
    const fr_value *x = fr_node_in(g, n, 0);
    fr_status st = fr_holdable(n, "input", x->dtype);
    int out_rank = x->rank + cnt, ins[FR_MAX_RANK];
    if (st == FR_OK && out_rank > FR_MAX_RANK)
        st = fr_node_error(n, FR_ERR_UNSUPPORTED, "output rank %d is above fp8run's limit of %d",
                           out_rank, FR_MAX_RANK);
    if (st == FR_OK) st = norm_axes(n, cnt, axes, out_rank, ins);
    free(axes);
    FR_TRY(st);
    int64_t dims[FR_MAX_RANK];
    for (int k = 0, j = 0; k < out_rank; k++) dims[k] = ins[k] ? 1 : x->dims[j++];
    fr_infer_set(g, n, 0, x->dtype, out_rank, dims);
    return FR_OK;
}

/* ---- Flatten: [prod(d[:axis]), prod(d[axis:])], axis in [-r, r] ---- */

static fr_status flatten_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_value *x = fr_node_in(g, n, 0);
    FR_TRY(fr_holdable(n, "input", x->dtype));
    int64_t axis;
    FR_TRY(fr_node_attr_int(n, "axis", 1, &axis));
    if (axis < -x->rank || axis > x->rank)
        return fr_node_error(n, FR_ERR_SHAPE, "axis %lld is out of range for rank %d",
                             (long long)axis, x->rank);
    if (axis < 0) axis += x->rank;
    int64_t d[2], numel;
    FR_TRY(fr_shape_numel((int)axis, x->dims, n->name, &d[0]));
    FR_TRY(fr_shape_numel(x->rank - (int)axis, x->dims + axis, n->name, &d[1]));
    FR_TRY(fr_shape_numel(x->rank, x->dims, n->name, &numel));
    fr_infer_set(g, n, 0, x->dtype, 2, d);
    return FR_OK;
}

/* ---- ConstantOfShape ---- */

/* The fill value: the 'value' attribute (a one-element tensor of any dtype), default float 0. */
static fr_status cos_value(const fr_node *n, const fr_tensor **val)
{
    const fr_attr *a = fr_node_attr(n, "value");
    *val = NULL;
    if (!a) return FR_OK;
    if (a->type != FR_ATTR_TENSOR || !a->t)
        return fr_node_error(n, FR_ERR_GRAPH, "attribute 'value' must be a tensor");
    FR_TRY(fr_holdable(n, "attribute 'value'", a->t->dtype));
    if (fr_tensor_numel(a->t) != 1)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "attribute 'value' must hold one element, it has %lld",
                             (long long)fr_tensor_numel(a->t));
    *val = a->t;
    return FR_OK;
}

static fr_status cos_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 1));
    const fr_tensor *val;
    FR_TRY(cos_value(n, &val));
    int cnt;
    int64_t shape[FR_MAX_RANK];
    FR_TRY(fr_infer_const_shape(g, n, 0, &cnt, shape));
    FR_TRY(check_out_shape(n, cnt, shape));
    fr_infer_set(g, n, 0, val ? val->dtype : FR_F32, cnt, shape);
    return FR_OK;
}

/* Fill `y` with copies of the `es`-byte element at `elem`, doubling the filled prefix. */
static void fill_bytes(fr_tensor *y, const void *elem, size_t es)
{
    if (!y->nbytes) return;
    char *p = y->data;
    memcpy(p, elem, es);
    size_t done = es;
    while (done < y->nbytes) {
        size_t c = done < y->nbytes - done ? done : y->nbytes - done;
        memcpy(p + done, p, c);
        done += c;
    }
}

static fr_status cos_cpu(const fr_kernel_ctx *ctx)
{
    const fr_tensor *val;
    FR_TRY(cos_value(ctx->node, &val));
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    fr_dtype dt = val ? val->dtype : FR_F32;
    if (!y || y->dtype != dt)
        return fr_node_error(ctx->node, FR_ERR_SHAPE,
                             "output is not a %s tensor (re-run shape inference)",
                             fr_dtype_name(dt));
    if (val) {
        fill_bytes(y, val->data, fr_dtype_size(dt));
    } else if (y->nbytes) {
        memset(y->data, 0, y->nbytes); /* float 0 is all-zero bytes */
    }
    return FR_OK;
}

/* ---- Range(start, limit, delta): length max(ceil((limit - start) / delta), 0) ---- */

static int range_dtype_ok(fr_dtype dt)
{
    return dt == FR_F32 || dt == FR_F64 || dt == FR_I16 || dt == FR_I32 || dt == FR_I64;
}

/* Element count from the three one-element tensors. Integers are counted exactly (the
 * difference of two int64 fits in uint64); floats subtract in their own type as the spec's
 * reference does, then divide in double. */
static fr_status range_len(const fr_node *n, const fr_tensor *s, const fr_tensor *l,
                           const fr_tensor *d, int64_t *len)
{
    if (fr_dtype_is_int(s->dtype)) {
        int64_t a = fr_tensor_get_i64(s, 0), b = fr_tensor_get_i64(l, 0),
                c = fr_tensor_get_i64(d, 0);
        if (c == 0) return fr_node_error(n, FR_ERR_SHAPE, "delta is 0");
        uint64_t span, step;
        if (c > 0) {
            if (b <= a) {
                *len = 0;
                return FR_OK;
            }
            span = (uint64_t)b - (uint64_t)a;
            step = (uint64_t)c;
        } else {
            if (b >= a) {
                *len = 0;
                return FR_OK;
            }
            span = (uint64_t)a - (uint64_t)b;
            step = (uint64_t)0 - (uint64_t)c;
        }
        *len = (int64_t)((span - 1) / step + 1);
        return FR_OK;
    }
    double q;
    if (s->dtype == FR_F32) {
        float a = ((const float *)s->data)[0], b = ((const float *)l->data)[0];
        float c = ((const float *)d->data)[0];
        if (c == 0) return fr_node_error(n, FR_ERR_SHAPE, "delta is 0");
        q = (double)(b - a) / (double)c;
    } else {
        double a = ((const double *)s->data)[0], b = ((const double *)l->data)[0];
        double c = ((const double *)d->data)[0];
        if (c == 0) return fr_node_error(n, FR_ERR_SHAPE, "delta is 0");
        q = (b - a) / c;
    }
    if (isnan(q) || q > 4e18)
        return fr_node_error(n, FR_ERR_SHAPE, "start/limit/delta give no finite length");
    q = ceil(q);
    *len = q > 0 ? (int64_t)q : 0;
    return FR_OK;
}

static fr_status range_check_inputs(const fr_node *n, const fr_tensor *const t[3])
{
    static const char *names[3] = {"start", "limit", "delta"};
    for (int i = 0; i < 3; i++) {
        if (!t[i]) return fr_node_error(n, FR_ERR_GRAPH, "input '%s' is missing", names[i]);
        if (t[i]->dtype != t[0]->dtype)
            return fr_node_error(n, FR_ERR_SHAPE, "'%s' is %s but 'start' is %s", names[i],
                                 fr_dtype_name(t[i]->dtype), fr_dtype_name(t[0]->dtype));
        if (fr_tensor_numel(t[i]) != 1 || t[i]->rank > 1)
            return fr_node_error(n, FR_ERR_SHAPE, "'%s' must be a scalar", names[i]);
    }
    if (!range_dtype_ok(t[0]->dtype))
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "dtype %s is not supported (float32, float64, int16, int32, int64)",
                             fr_dtype_name(t[0]->dtype));
    return FR_OK;
}

static fr_status range_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    const fr_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        const fr_value *v = fr_node_in(g, n, i);
        if (!range_dtype_ok(v->dtype))
            return fr_node_error(
                n, FR_ERR_UNSUPPORTED,
                "dtype %s is not supported (float32, float64, int16, int32, int64)",
                fr_dtype_name(v->dtype));
        if (!v->constant)
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "input '%s' must be a constant known when the session is built "
                                 "(fp8run runs static shapes; fix symbolic dims with --dim)",
                                 v->name);
        t[i] = v->constant;
    }
    FR_TRY(range_check_inputs(n, t));
    int64_t len;
    FR_TRY(range_len(n, t[0], t[1], t[2], &len));
    fr_infer_set(g, n, 0, t[0]->dtype, 1, &len);
    return FR_OK;
}

/* output[i] = start + i * delta; integer products wrap through unsigned arithmetic, which
 * lands on the exact in-range value. */
static fr_status range_cpu(const fr_kernel_ctx *ctx)
{
    if (ctx->n_in < 3) return fr_node_error(ctx->node, FR_ERR_GRAPH, "inputs missing");
    const fr_tensor *t[3] = {ctx->in[0], ctx->in[1], ctx->in[2]};
    FR_TRY(range_check_inputs(ctx->node, t));
    int64_t len;
    FR_TRY(range_len(ctx->node, t[0], t[1], t[2], &len));
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    FR_TRY(fr_check_out(ctx->node, y, t[0]->dtype, 1, &len));
    switch (t[0]->dtype) {
    case FR_F32: {
        float s = ((const float *)t[0]->data)[0], d = ((const float *)t[2]->data)[0];
        for (int64_t i = 0; i < len; i++) ((float *)y->data)[i] = s + (float)i * d;
        break;
    }
    case FR_F64: {
        double s = ((const double *)t[0]->data)[0], d = ((const double *)t[2]->data)[0];
        for (int64_t i = 0; i < len; i++) ((double *)y->data)[i] = s + (double)i * d;
        break;
    }
    default: {
        uint64_t s = (uint64_t)fr_tensor_get_i64(t[0], 0), d = (uint64_t)fr_tensor_get_i64(t[2], 0);
        for (int64_t i = 0; i < len; i++) {
            int64_t v = (int64_t)(s + (uint64_t)i * d);
            if (y->dtype == FR_I64)
                ((int64_t *)y->data)[i] = v;
            else if (y->dtype == FR_I32)
                ((int32_t *)y->data)[i] = (int32_t)v;
            else
                ((int16_t *)y->data)[i] = (int16_t)v;
        }
        break;
    }
    }
    return FR_OK;
}

/* ---- Constant ---- */

/* Which of Constant's mutually exclusive value attributes the node carries. */
static fr_status constant_attr(const fr_node *n, const fr_attr **out)
{
    static const char *names[] = {"value",      "value_float",  "value_floats",  "value_int",
                                  "value_ints", "value_string", "value_strings", "sparse_value"};
    const fr_attr *found = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_attr *a = fr_node_attr(n, names[i]);
        if (!a) continue;
        if (found)
            return fr_node_error(n, FR_ERR_GRAPH,
                                 "has both '%s' and '%s'; exactly one value "
                                 "attribute is allowed",
                                 found->name, a->name);
        found = a;
    }
    if (!found) return fr_node_error(n, FR_ERR_GRAPH, "has no value attribute");
    if (strcmp(found->name, "sparse_value") == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "sparse_value constants are not supported");
    if (strncmp(found->name, "value_string", 12) == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s: string tensors are not supported",
                             found->name);
    fr_attr_type want = strcmp(found->name, "value") == 0          ? FR_ATTR_TENSOR
                        : strcmp(found->name, "value_float") == 0  ? FR_ATTR_FLOAT
                        : strcmp(found->name, "value_floats") == 0 ? FR_ATTR_FLOATS
                        : strcmp(found->name, "value_int") == 0    ? FR_ATTR_INT
                                                                   : FR_ATTR_INTS;
    int ok = found->type == want || (want == FR_ATTR_FLOAT && found->type == FR_ATTR_INT);
    if (!ok || (want == FR_ATTR_TENSOR && !found->t))
        return fr_node_error(n, FR_ERR_GRAPH, "attribute '%s' has the wrong type (%d)", found->name,
                             (int)found->type);
    if (want == FR_ATTR_TENSOR) FR_TRY(fr_holdable(n, "attribute 'value'", found->t->dtype));
    *out = found;
    return FR_OK;
}

static void constant_shape(const fr_attr *a, fr_dtype *dt, int *rank, int64_t *dims)
{
    switch (a->type) {
    case FR_ATTR_TENSOR:
        *dt = a->t->dtype;
        *rank = a->t->rank;
        memcpy(dims, a->t->dims, sizeof(int64_t) * (size_t)a->t->rank);
        return;
    case FR_ATTR_FLOATS: *dt = FR_F32, *rank = 1, dims[0] = a->n; return;
    case FR_ATTR_INTS: *dt = FR_I64, *rank = 1, dims[0] = a->n; return;
    default: /* value_float (FLOAT, or an INT written for it) / value_int */
        *dt = strcmp(a->name, "value_int") == 0 ? FR_I64 : FR_F32;
        *rank = 0;
        return;
    }
}

static fr_status constant_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 0, 0));
    const fr_attr *a;
    FR_TRY(constant_attr(n, &a));
    fr_dtype dt;
    int rank;
    int64_t dims[FR_MAX_RANK];
    constant_shape(a, &dt, &rank, dims);
    fr_infer_set(g, n, 0, dt, rank, dims);
    return FR_OK;
}

static fr_status constant_cpu(const fr_kernel_ctx *ctx)
{
    const fr_attr *a;
    FR_TRY(constant_attr(ctx->node, &a));
    fr_dtype dt;
    int rank;
    int64_t dims[FR_MAX_RANK];
    constant_shape(a, &dt, &rank, dims);
    fr_tensor *y = ctx->n_out > 0 ? ctx->out[0] : NULL;
    FR_TRY(fr_check_out(ctx->node, y, dt, rank, dims));
    switch (a->type) {
    case FR_ATTR_TENSOR:
        if (y->nbytes) memcpy(y->data, a->t->data, y->nbytes);
        break;
    case FR_ATTR_FLOATS:
        if (a->n) memcpy(y->data, a->floats, (size_t)a->n * sizeof(float));
        break;
    case FR_ATTR_INTS:
        if (a->n) memcpy(y->data, a->ints, (size_t)a->n * sizeof(int64_t));
        break;
    case FR_ATTR_FLOAT: *(float *)y->data = a->f; break;
    default: /* INT: value_int, or value_float written as a whole number */
        if (dt == FR_I64)
            *(int64_t *)y->data = a->i;
        else
            *(float *)y->data = (float)a->i;
        break;
    }
    return FR_OK;
}

/* ---- gradient rules of Reshape, Squeeze, Unsqueeze, Flatten ----
 *
 * All four keep the row-major bytes, so d(input) is dy reshaped back to the input's static
 * shape. The rule emits a standard ONNX Reshape (shape as a constant int64 input from opset 5,
 * the 'shape' attribute before) rather than an fp8run op: every backend already runs
 * Reshape as a copy (or an alias), and the backward graph stays readable as plain ONNX. From
 * opset 14 allowzero=1 is set when the shape has a 0 dim, so a zero-size dim is not read as
 * "copy dy's dim". */
static fr_status reshape_back(fr_grad_ctx *ctx)
{
    if (!ctx->need_din[0] || ctx->dout[0] < 0) return FR_OK;
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const fr_value *x = &g->values[n->inputs[0]], *dy = &g->values[ctx->dout[0]];
    int rank = x->rank, same = dy->rank == x->rank, has_zero = 0;
    int64_t dims[FR_MAX_RANK];
    double dd[FR_MAX_RANK + 1];
    for (int k = 0; k < rank; k++) {
        dims[k] = x->dims[k];
        dd[k] = (double)x->dims[k];
        has_zero |= dims[k] == 0;
        same = same && dy->dims[k] == dims[k];
    }
    if (same) { /* e.g. a Reshape to the shape it already had */
        ctx->din[0] = ctx->dout[0];
        return FR_OK;
    }
    int64_t opset = fr_graph_opset(g, FR_DOMAIN_ONNX), len = rank;
    int nid;
    if (opset >= 5) {
        int in[2] = {ctx->dout[0], -1};
        FR_TRY(fr_grad_const(ctx, FR_I64, 1, &len, dd, &in[1]));
        FR_TRY(fr_grad_node(ctx, "Reshape", FR_DOMAIN_ONNX, 2, in, 1, &ctx->din[0], &nid));
        if (opset >= 14 && has_zero)
            FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "allowzero", 1));
    } else {
        FR_TRY(fr_grad_node(ctx, "Reshape", FR_DOMAIN_ONNX, 1, &ctx->dout[0], 1, &ctx->din[0],
                            &nid));
        FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "shape", rank, dims));
    }
    return fr_grad_finish(ctx, nid);
}

/* ---- the table ---- */

const fr_op_def fr_ops_shape[] = {
    {"Shape", FR_DOMAIN_ONNX, 1, shape_infer, shape_cpu, NULL, 0},
    {"Size", FR_DOMAIN_ONNX, 1, size_infer, size_cpu, NULL, 0},
    {"Reshape", FR_DOMAIN_ONNX, 1, reshape_infer, copy_bytes_cpu, reshape_back, 0},
    {"Squeeze", FR_DOMAIN_ONNX, 1, squeeze_infer, copy_bytes_cpu, reshape_back, 0},
    {"Unsqueeze", FR_DOMAIN_ONNX, 1, unsqueeze_infer, copy_bytes_cpu, reshape_back, 0},
    {"Flatten", FR_DOMAIN_ONNX, 1, flatten_infer, copy_bytes_cpu, reshape_back, 0},
    {"ConstantOfShape", FR_DOMAIN_ONNX, 9, cos_infer, cos_cpu, NULL, 0},
    {"Range", FR_DOMAIN_ONNX, 11, range_infer, range_cpu, NULL, 0},
    {"Constant", FR_DOMAIN_ONNX, 1, constant_infer, constant_cpu, NULL, 0},
    {0},
};
