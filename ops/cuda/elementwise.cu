/* CUDA kernels of the elementwise family (see ops/cuda/cuda_kernel.h for the contract):
 * the table, and the host-side broadcast geometry and error flag shared by
 * elementwise_unary.cu (unary math, predicates, Cast, Clip, Identity, Dropout),
 * elementwise_binary.cu (arithmetic, comparisons, logic, Pow, Where, Expand) and
 * elementwise_grad.cu (ActivationGrad, PowGrad, FmodGrad, ExtremumGrad, ClipGrad).
 * Semantics are those of ops/unary.c, ops/binary.c and ops/elementwise_grad.c. */
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

/* ---- the table ---- */

#define EW_K(NAME, RUN, SCRATCH) {NAME, FR_DOMAIN_ONNX, RUN, SCRATCH}
#define EW_G(NAME, RUN, SCRATCH) {NAME, FR_DOMAIN_FP8RUN, RUN, SCRATCH}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_elementwise[] = {
    /* ops/unary.c: the rows of ops/ew_unary.def, then the rest */
#define FR_UNARY(ID, NAME, DOMAIN, OPSET, ATTRS, Y, YINT, GRAD) {NAME, DOMAIN, ew_unary_run, NULL},
#include "ops/ew_unary.def"
    {"Gelu", FR_DOMAIN_FP8RUN, ew_unary_run, NULL}, /* ai.fp8run::Gelu: the same op below opset 20 */
    EW_K("IsNaN", ew_pred_run, NULL),
    EW_K("IsInf", ew_pred_run, NULL),
    EW_K("Not", ew_pred_run, NULL),
    EW_K("Cast", ew_cast_run, NULL),
    EW_K("CastLike", ew_cast_run, NULL),
    EW_K("Clip", ew_clip_run, NULL),
    EW_K("Identity", ew_identity_run, NULL),
    EW_K("Dropout", ew_dropout_run, ew_flag_scratch),
    /* ops/binary.c: the ops of ops/ew_binary.def (those that can divide an integer by zero
     * get the error flag), then the rest */
#define FR_BIN_OP(ID, NAME, DOMAIN, OPSET, MATH, DTYPES, VARIADIC, GRAD)                     \
    {NAME, DOMAIN, ew_binary_run, FR_BM_RAISES_##MATH ? ew_flag_scratch : NULL},
#define FR_BIN_VARIANT(ID, NAME, DOMAIN, MATH, DTYPES, VARIADIC, GRAD) /* not an op */
#include "ops/ew_binary.def"
    EW_K("Pow", ew_pow_run, ew_flag_scratch),
    EW_K("Where", ew_where_run, NULL),
    EW_K("Expand", ew_expand_run, NULL),
    /* ops/elementwise_grad.c */
    EW_G("ActivationGrad", ew_activation_grad_run, NULL),
    EW_G("PowGrad", ew_pow_grad_run, NULL),
    EW_G("FmodGrad", ew_fmod_grad_run, NULL),
    EW_G("ExtremumGrad", ew_extremum_grad_run, ew_extremum_grad_scratch),
    EW_G("ClipGrad", ew_clip_grad_run, ew_clip_grad_scratch),
    {NULL, NULL, NULL, NULL},
};
