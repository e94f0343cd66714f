/* The host side of the CUDA elementwise launchers (elementwise_unary.cu, elementwise_binary.cu,
 * elementwise_grad.cu; see elementwise_util.cuh): the broadcast geometry and the error flag.
 * Below the launchers and the family's table (elementwise.cu), which call them. */
#include "ops/cuda/elementwise_util.cuh"

/* ---- broadcast geometry (the collapse of ops/elementwise_util.c) ---- */

fr_status ew_geom_many(const fr_node *node, const fr_tensor *out, int n_in, const fr_tensor *const *in,
                       int *rank, int64_t *dims, int64_t *st)
{
    const int r = out->rank;
    for (int k = 0; k < n_in; k++) {
        const fr_tensor *t = in[k];
        int ok = t && t->rank <= r;
        for (int d = 0; ok && d < t->rank; d++) {
            int64_t td = t->dims[d], od = out->dims[r - t->rank + d];
            ok = td == od || td == 1;
        }
        if (!ok) {
            char a[128] = "(missing)", b[128];
            if (t) fr_shape_str(t->rank, t->dims, a, sizeof a);
            return fr_node_error(node, FR_ERR_SHAPE, "input %d of shape %s does not broadcast to the output shape %s", k,
                                 a, fr_shape_str(r, out->dims, b, sizeof b));
        }
        fr_broadcast_strides(t->rank, t->dims, r, out->dims, st + (size_t)k * FR_MAX_RANK);
    }
    /* Drop size-1 dims; merge dim d into the previous kept one when every input's stride
     * there is its stride at d times dims[d] (the dense output always merges). In place:
     * the kept index never passes d. */
    int cr = 0;
    for (int d = 0; d < r; d++) {
        int64_t n = out->dims[d];
        if (n == 1) continue;
        int merge = cr > 0;
        for (int k = 0; merge && k < n_in; k++) {
            int64_t *s = st + (size_t)k * FR_MAX_RANK;
            merge = s[cr - 1] == s[d] * n;
        }
        if (merge) {
            dims[cr - 1] *= n;
            for (int k = 0; k < n_in; k++) st[(size_t)k * FR_MAX_RANK + cr - 1] = st[(size_t)k * FR_MAX_RANK + d];
        } else {
            dims[cr] = n;
            for (int k = 0; k < n_in; k++) st[(size_t)k * FR_MAX_RANK + cr] = st[(size_t)k * FR_MAX_RANK + d];
            cr++;
        }
    }
    if (cr == 0) { /* a single element (or an empty output whose dims are all 0/1: handled by n) */
        dims[0] = 1;
        for (int k = 0; k < n_in; k++) st[(size_t)k * FR_MAX_RANK] = 0;
        cr = 1;
    }
    *rank = cr;
    return FR_OK;
}

fr_status ew_geom(const fr_node *node, const fr_tensor *out, int n_in, const fr_tensor *const *in, EwGeom *g)
{
    memset(g, 0, sizeof *g);
    if (n_in < 1 || n_in > EW_MAX_IN)
        return fr_node_error(node, FR_ERR_INTERNAL, "elementwise kernel with %d inputs", n_in);
    g->n = fr_tensor_numel(out);
    FR_TRY(ew_geom_many(node, out, n_in, in, &g->rank, g->dims, &g->st[0][0]));
    if (g->n == 0) return FR_OK;
    for (int d = 0; d < g->rank; d++) ew_fastdiv_init(g->dims[d], &g->mul[d], &g->shr[d]);
    int64_t dense[FR_MAX_RANK];
    dense[g->rank - 1] = 1;
    for (int d = g->rank - 2; d >= 0; d--) dense[d] = dense[d + 1] * g->dims[d + 1];
    for (int k = 0; k < n_in; k++) {
        int is_dense = 1, is_single = 1;
        for (int d = 0; d < g->rank; d++) {
            is_dense &= g->st[k][d] == dense[d] || g->dims[d] == 1;
            is_single &= g->st[k][d] == 0;
        }
        g->step[k] = is_dense ? 1 : 0;
        if (!is_dense && !is_single) g->general = 1;
    }
    return FR_OK;
}

/* ---- the error flag ---- */

fr_status ew_flag_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    (void)n;
    *bytes = EW_FLAG_BYTES;
    return FR_OK;
}

fr_status ew_flag_begin(const fr_cuda_kctx *k, unsigned **flag)
{
    *flag = NULL;
    if (!k->scratch || k->scratch_bytes < sizeof(unsigned)) return FR_OK;
    *flag = (unsigned *)k->scratch;
    FR_CUDA_TRY(cudaMemsetAsync(*flag, 0, sizeof(unsigned), k->cu->stream));
    return FR_OK;
}
