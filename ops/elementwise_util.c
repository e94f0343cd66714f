/* Broadcast iteration shared by the elementwise op families (see elementwise_util.h). */
#include "ops/elementwise_util.h"

#include <string.h>

fr_status fr_ew_run(const fr_node *node, int n_ops, fr_tensor *const *ops, fr_ew_fn fn,
                    void *arg)
{
    const fr_tensor *out = ops[0];
    const int r = out->rank;
    int64_t st[FR_EW_MAX_OPS][FR_MAX_RANK];
    size_t es[FR_EW_MAX_OPS];

    if (n_ops < 1 || n_ops > FR_EW_MAX_OPS)
        return fr_node_error(node, FR_ERR_INTERNAL, "elementwise run with %d operands", n_ops);
    for (int k = 0; k < n_ops; k++) {
        const fr_tensor *t = ops[k];
        int ok = t->rank <= r;
        for (int d = 0; ok && d < t->rank; d++) {
            int64_t td = t->dims[d], od = out->dims[r - t->rank + d];
            ok = td == od || td == 1;
        }
        if (!ok) {
            char a[128], b[128];
            return fr_node_error(node, FR_ERR_SHAPE,
                                 "operand %d of shape %s does not broadcast to the output shape %s",
                                 k, fr_shape_str(t->rank, t->dims, a, sizeof a),
                                 fr_shape_str(r, out->dims, b, sizeof b));
        }
        es[k] = fr_dtype_size(t->dtype);
        fr_broadcast_strides(t->rank, t->dims, r, out->dims, st[k]);
    }
    if (fr_tensor_numel(out) == 0) return FR_OK;

    /* Collapse: drop size-1 dims; merge dim d into the previous kept dim when every operand's
     * stride there equals its stride at d times dims[d] (contiguous or broadcast alike). */
    int64_t cd[FR_MAX_RANK], cs[FR_EW_MAX_OPS][FR_MAX_RANK];
    int cr = 0;
    for (int d = 0; d < r; d++) {
        int64_t n = out->dims[d];
        if (n == 1) continue;
        int merge = cr > 0;
        for (int k = 0; merge && k < n_ops; k++) merge = cs[k][cr - 1] == st[k][d] * n;
        if (merge) {
            cd[cr - 1] *= n;
            for (int k = 0; k < n_ops; k++) cs[k][cr - 1] = st[k][d];
        } else {
            cd[cr] = n;
            for (int k = 0; k < n_ops; k++) cs[k][cr] = st[k][d];
            cr++;
        }
    }
    if (cr == 0) { /* every operand is a single element */
        cd[0] = 1;
        for (int k = 0; k < n_ops; k++) cs[k][0] = 0;
        cr = 1;
    }

    /* The innermost kept dim is contiguous (stride 1) or broadcast (stride 0) for every
     * operand: later dims all have size 1. */
    int64_t step[FR_EW_MAX_OPS];
    char *p[FR_EW_MAX_OPS];
    for (int k = 0; k < n_ops; k++) {
        step[k] = cs[k][cr - 1] ? 1 : 0;
        p[k] = (char *)ops[k]->data;
    }
    step[0] = 1;
    const int64_t inner = cd[cr - 1];
    int64_t outer = 1, idx[FR_MAX_RANK] = {0};
    for (int d = 0; d < cr - 1; d++) outer *= cd[d];
    for (int64_t o = 0; o < outer; o++) {
        fn(inner, p, step, arg);
        for (int d = cr - 2; d >= 0; d--) { /* odometer over the outer dims */
            idx[d]++;
            for (int k = 0; k < n_ops; k++) p[k] += cs[k][d] * (int64_t)es[k];
            if (idx[d] < cd[d]) break;
            for (int k = 0; k < n_ops; k++) p[k] -= cs[k][d] * cd[d] * (int64_t)es[k];
            idx[d] = 0;
        }
    }
    return FR_OK;
}

/* Inner run of a broadcast copy; arg points at the element size. */
static void copy_run(int64_t n, char *const *p, const int64_t *step, void *arg)
{
    const size_t es = *(const size_t *)arg;
    if (step[1]) {
        memcpy(p[0], p[1], (size_t)n * es);
        return;
    }
    switch (es) { /* repeat one element; typed stores for the usual sizes */
    case 1: memset(p[0], *(const unsigned char *)p[1], (size_t)n); break;
    case 2: {
        uint16_t v;
        memcpy(&v, p[1], 2);
        for (int64_t i = 0; i < n; i++) ((uint16_t *)(void *)p[0])[i] = v;
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p[1], 4);
        for (int64_t i = 0; i < n; i++) ((uint32_t *)(void *)p[0])[i] = v;
        break;
    }
    case 8: {
        uint64_t v;
        memcpy(&v, p[1], 8);
        for (int64_t i = 0; i < n; i++) ((uint64_t *)(void *)p[0])[i] = v;
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) memcpy(p[0] + (size_t)i * es, p[1], es);
    }
}

fr_status fr_ew_broadcast_copy(const fr_node *node, fr_tensor *dst, const fr_tensor *src)
{
    if (dst->dtype != src->dtype)
        return fr_node_error(node, FR_ERR_SHAPE, "copy from %s to %s", fr_dtype_name(src->dtype),
                             fr_dtype_name(dst->dtype));
    size_t es = fr_dtype_size(dst->dtype);
    if (es == 0)
        return fr_node_error(node, FR_ERR_UNSUPPORTED, "dtype %s cannot be held in a tensor",
                             fr_dtype_name(dst->dtype));
    fr_tensor *ops[2] = {dst, (fr_tensor *)src};
    return fr_ew_run(node, 2, ops, copy_run, &es);
}

fr_status fr_ew_same_numel(const fr_kernel_ctx *ctx, const fr_tensor *x, const fr_tensor *y)
{
    if (!x || !y || fr_tensor_numel(x) != fr_tensor_numel(y))
        return fr_node_error(ctx->node, FR_ERR_SHAPE,
                             "output does not match the input's element count (re-run shape "
                             "inference)");
    return FR_OK;
}
