/* MatMul (numpy matmul semantics) and Gemm, float32 through cblas_sgemm and float64 through
 * cblas_dgemm (OpenBLAS). Integer and narrow float dtypes are a clear FR_ERR_UNSUPPORTED.
 *
 * MatMul: a 1-D A is promoted to [1, K] and a 1-D B to [K, 1], and the added dim is removed
 * from the result; the batch dims (all but the last two) broadcast like numpy. When B has
 * no batch dims of its own (the Linear layer case, [B, T, d] x [d, n]) and A's batch is not
 * broadcast, the batch folds into M and the whole product is one GEMM.
 *
 * Gemm: Y = alpha * A' B' + beta * C with A' = transA ? A^T : A (likewise B'), C optional
 * and unidirectionally broadcast to [M, N]. beta == 0 ignores C entirely (so an inf or NaN
 * in C does not turn into NaN), as onnxruntime does.
 *
 * ai.fp8run::MatMul(A, B) {transA, transB, precision}: the batched product of activations the
 * FP8 compiler emits for bf16/fp8 training (attention scores and values; PyTorch's autocast
 * runs them in bf16 too). Both operands have rank >= 2; transA/transB transpose the last two
 * dims; batch dims broadcast like numpy. precision "bf16" rounds both operands to bf16
 * (round-to-nearest-even) and sums in float32, as the GPU's tensor cores do; "fp32" (default)
 * is exact float32. Its gradient is the same op with other transposes, so no Transpose copies
 * are made in the backward pass. */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/matmul.h"
#include "ops/op.h"

static int blas_dtype(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64; }

static fr_status dtype_error(const fr_node *n, fr_dtype dt)
{
    return fr_node_error(n, FR_ERR_UNSUPPORTED,
                         "input dtype %s is not supported (float32 or float64 only)",
                         fr_dtype_name(dt));
}

/* GEMM dims must fit BLAS's int. */
static fr_status check_blas_dims(const fr_node *n, int64_t M, int64_t N, int64_t K)
{
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "GEMM dims M=%lld N=%lld K=%lld exceed the BLAS int range",
                             (long long)M, (long long)N, (long long)K);
    return FR_OK;
}

/* One row-major GEMM C[M,N] = alpha * op(A) op(B) + beta * C, with M, N, K > 0. */
static void gemm(fr_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                 const void *A, const void *B, double beta, void *C)
{
    int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N);
    enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    if (dt == FR_F32)
        cblas_sgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, (float)alpha, A, lda, B, ldb,
                    (float)beta, C, (int)N);
    else
        cblas_dgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, alpha, A, lda, B, ldb, beta, C,
                    (int)N);
}

/* ---- MatMul ---- */

typedef struct mm_plan {
    int64_t M, K, N;
    int nb;                      /* broadcast batch rank */
    int64_t bdims[FR_MAX_RANK];  /* broadcast batch dims */
    int64_t sa[FR_MAX_RANK];     /* A's batch strides in elements (0 where broadcast) */
    int64_t sb[FR_MAX_RANK];     /* B's batch strides in elements */
    int64_t batch;               /* product of bdims */
    int b_shared;                /* one B matrix for every batch entry; then the batch dims
                                    all come from A, so A's matrices are contiguous */
    int out_rank;
    int64_t out_dims[FR_MAX_RANK];
} mm_plan;

static fr_status mm_make_plan(const fr_node *n, int ra, const int64_t *da, int rb,
                              const int64_t *db, mm_plan *p)
{
    char s1[128], s2[128];
    memset(p, 0, sizeof *p);
    if (ra < 1 || rb < 1)
        return fr_node_error(n, FR_ERR_SHAPE, "operands must have rank >= 1, got shapes %s and %s",
                             fr_shape_str(ra, da, s1, sizeof s1), fr_shape_str(rb, db, s2, sizeof s2));
    int ab = ra >= 2 ? ra - 2 : 0, bb = rb >= 2 ? rb - 2 : 0; /* batch ranks */
    p->M = ra >= 2 ? da[ra - 2] : 1;
    p->K = da[ra - 1];
    int64_t kb = rb >= 2 ? db[rb - 2] : db[0];
    p->N = rb >= 2 ? db[rb - 1] : 1;
    if (p->K != kb)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "inner dimensions differ: A %s has K=%lld, B %s has K=%lld",
                             fr_shape_str(ra, da, s1, sizeof s1), (long long)p->K,
                             fr_shape_str(rb, db, s2, sizeof s2), (long long)kb);
    FR_TRY(fr_broadcast_shape(n, ab, da, bb, db, &p->nb, p->bdims));
    fr_broadcast_strides(ab, da, p->nb, p->bdims, p->sa);
    fr_broadcast_strides(bb, db, p->nb, p->bdims, p->sb);
    p->batch = 1;
    p->b_shared = 1;
    for (int k = 0; k < p->nb; k++) {
        p->batch *= p->bdims[k];
        if (p->bdims[k] != 1 && p->sb[k] != 0) p->b_shared = 0;
        p->sa[k] *= p->M * p->K;
        p->sb[k] *= p->K * p->N;
    }
    p->out_rank = 0;
    for (int k = 0; k < p->nb; k++) p->out_dims[p->out_rank++] = p->bdims[k];
    if (ra >= 2) p->out_dims[p->out_rank++] = p->M;
    if (rb >= 2) p->out_dims[p->out_rank++] = p->N;
    return FR_OK;
}

static fr_status matmul_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1);
    if (a->dtype != b->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "A '%s' is %s but B '%s' is %s", a->name,
                             fr_dtype_name(a->dtype), b->name, fr_dtype_name(b->dtype));
    if (!blas_dtype(a->dtype)) return dtype_error(n, a->dtype);
    mm_plan p;
    FR_TRY(mm_make_plan(n, a->rank, a->dims, b->rank, b->dims, &p));
    fr_infer_set(g, n, 0, a->dtype, p.out_rank, p.out_dims);
    return FR_OK;
}

static fr_status matmul_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 2 || !ctx->in[0] || !ctx->in[1] || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs A and B and output Y");
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1];
    fr_tensor *y = ctx->out[0];
    if (a->dtype != b->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "A is %s but B is %s", fr_dtype_name(a->dtype),
                             fr_dtype_name(b->dtype));
    if (!blas_dtype(a->dtype)) return dtype_error(n, a->dtype);
    mm_plan p;
    FR_TRY(mm_make_plan(n, a->rank, a->dims, b->rank, b->dims, &p));
    FR_TRY(fr_check_out(n, y, a->dtype, p.out_rank, p.out_dims));
    if (p.batch == 0 || p.M == 0 || p.N == 0) return FR_OK;
    size_t es = fr_dtype_size(a->dtype);
    if (p.K == 0) { /* empty sum: zeros (BLAS would reject lda = 0) */
        memset(y->data, 0, y->nbytes);
        return FR_OK;
    }
    const char *A = a->data, *B = b->data;
    char *Y = y->data;
    if (p.b_shared) { /* fold the batch into M: one GEMM */
        int64_t rows = p.batch * p.M;
        FR_TRY(check_blas_dims(n, rows, p.N, p.K));
        gemm(a->dtype, 0, 0, rows, p.N, p.K, 1.0, A, B, 0.0, Y);
        return FR_OK;
    }
    FR_TRY(check_blas_dims(n, p.M, p.N, p.K));
    int64_t idx[FR_MAX_RANK] = {0};
    int64_t oa = 0, ob = 0; /* element offsets of the current A and B matrices */
    for (int64_t i = 0; i < p.batch; i++) {
        gemm(a->dtype, 0, 0, p.M, p.N, p.K, 1.0, A + (size_t)oa * es, B + (size_t)ob * es, 0.0,
             Y + (size_t)(i * p.M * p.N) * es);
        for (int k = p.nb - 1; k >= 0; k--) { /* odometer over the batch dims */
            oa += p.sa[k];
            ob += p.sb[k];
            if (++idx[k] < p.bdims[k]) break;
            oa -= p.sa[k] * idx[k];
            ob -= p.sb[k] * idx[k];
            idx[k] = 0;
        }
    }
    return FR_OK;
}

/* ---- ai.fp8run::MatMul ---- */

typedef struct mmx_cfg {
    int ta, tb, bf16;
} mmx_cfg;

static fr_status mmx_attrs(const fr_node *n, mmx_cfg *c)
{
    int64_t ta, tb;
    const char *prec;
    FR_TRY(fr_node_attr_int(n, "transA", 0, &ta));
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    FR_TRY(fr_node_attr_string(n, "precision", "fp32", &prec));
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "transA=%lld / transB=%lld must be 0 or 1", (long long)ta,
                             (long long)tb);
    if (strcmp(prec, "fp32") != 0 && strcmp(prec, "bf16") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "precision '%s' must be fp32 or bf16", prec);
    c->ta = (int)ta;
    c->tb = (int)tb;
    c->bf16 = prec[0] == 'b';
    return FR_OK;
}

/* The shapes the product sees: the last two dims swapped where transposed. */
static fr_status mmx_shapes(const fr_node *n, const mmx_cfg *c, int ra, const int64_t *da, int rb,
                            const int64_t *db, int64_t *oa, int64_t *ob)
{
    if (ra < 2 || rb < 2)
        return fr_node_error(n, FR_ERR_SHAPE, "operands must have rank >= 2 (ranks %d and %d)", ra, rb);
    memcpy(oa, da, sizeof(int64_t) * (size_t)ra);
    memcpy(ob, db, sizeof(int64_t) * (size_t)rb);
    if (c->ta) oa[ra - 2] = da[ra - 1], oa[ra - 1] = da[ra - 2];
    if (c->tb) ob[rb - 2] = db[rb - 1], ob[rb - 1] = db[rb - 2];
    return FR_OK;
}

static fr_status mmx_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 2));
    mmx_cfg c;
    FR_TRY(mmx_attrs(n, &c));
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1);
    if (a->dtype != b->dtype || !blas_dtype(a->dtype)) return dtype_error(n, a->dtype != FR_F32 ? a->dtype : b->dtype);
    if (c.bf16 && a->dtype != FR_F32) return fr_node_error(n, FR_ERR_UNSUPPORTED, "bf16 precision needs float32 inputs");
    int64_t oa[FR_MAX_RANK], ob[FR_MAX_RANK];
    FR_TRY(mmx_shapes(n, &c, a->rank, a->dims, b->rank, b->dims, oa, ob));
    mm_plan p;
    FR_TRY(mm_make_plan(n, a->rank, oa, b->rank, ob, &p));
    fr_infer_set(g, n, 0, a->dtype, p.out_rank, p.out_dims);
    return FR_OK;
}

/* x rounded to bf16 (round-to-nearest-even), as float32 */
static float *bf16_copy(const fr_tensor *t)
{
    int64_t n = fr_tensor_numel(t);
    float *c = fr_malloc((size_t)(n ? n : 1) * sizeof(float), "bf16 operand");
    if (!c) return NULL;
    const float *x = t->data;
    for (int64_t i = 0; i < n; i++) c[i] = fr_bf16_to_f32(fr_f32_to_bf16(x[i]));
    return c;
}

static fr_status mmx_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in != 2 || !ctx->in[0] || !ctx->in[1] || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs A and B and output Y");
    mmx_cfg c;
    FR_TRY(mmx_attrs(n, &c));
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1];
    fr_tensor *y = ctx->out[0];
    if (a->dtype != b->dtype || !blas_dtype(a->dtype)) return dtype_error(n, a->dtype);
    int64_t oa[FR_MAX_RANK], ob[FR_MAX_RANK];
    FR_TRY(mmx_shapes(n, &c, a->rank, a->dims, b->rank, b->dims, oa, ob));
    mm_plan p;
    FR_TRY(mm_make_plan(n, a->rank, oa, b->rank, ob, &p));
    FR_TRY(fr_check_out(n, y, a->dtype, p.out_rank, p.out_dims));
    if (p.batch == 0 || p.M == 0 || p.N == 0) return FR_OK;
    if (p.K == 0) {
        memset(y->data, 0, y->nbytes);
        return FR_OK;
    }
    FR_TRY(check_blas_dims(n, p.M, p.N, p.K));
    float *ra = NULL, *rb = NULL;
    if (c.bf16 && (!(ra = bf16_copy(a)) || !(rb = bf16_copy(b)))) {
        free(ra);
        return FR_ERR_OOM;
    }
    size_t es = fr_dtype_size(a->dtype);
    const char *A = ra ? (const char *)ra : a->data, *B = rb ? (const char *)rb : b->data;
    char *Y = y->data;
    int64_t idx[FR_MAX_RANK] = {0}, offa = 0, offb = 0;
    for (int64_t i = 0; i < p.batch; i++) {
        gemm(a->dtype, c.ta, c.tb, p.M, p.N, p.K, 1.0, A + (size_t)offa * es, B + (size_t)offb * es, 0.0,
             Y + (size_t)(i * p.M * p.N) * es);
        for (int k = p.nb - 1; k >= 0; k--) {
            offa += p.sa[k];
            offb += p.sb[k];
            if (++idx[k] < p.bdims[k]) break;
            offa -= p.sa[k] * idx[k];
            offb -= p.sb[k] * idx[k];
            idx[k] = 0;
        }
    }
    free(ra);
    free(rb);
    return FR_OK;
}

/* ---- Gemm ---- */

fr_status fr_gemm_read_attrs(const fr_node *n, fr_gemm_attrs *c)
{
    int64_t ta, tb;
    FR_TRY(fr_node_attr_int(n, "transA", 0, &ta));
    FR_TRY(fr_node_attr_int(n, "transB", 0, &tb));
    FR_TRY(fr_node_attr_float(n, "alpha", 1.0f, &c->alpha));
    FR_TRY(fr_node_attr_float(n, "beta", 1.0f, &c->beta));
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "transA=%lld / transB=%lld must be 0 or 1",
                             (long long)ta, (long long)tb);
    c->ta = (int)ta;
    c->tb = (int)tb;
    return FR_OK;
}

/* M, N, K from A's and B's shapes; C (crank >= 0 when present) must broadcast to [M, N]. */
static fr_status gemm_dims(const fr_node *n, const fr_gemm_attrs *c, int ra, const int64_t *da,
                           int rb, const int64_t *db, int rc, const int64_t *dc, int64_t *M,
                           int64_t *N, int64_t *K)
{
    char s1[128], s2[128];
    if (ra != 2 || rb != 2)
        return fr_node_error(n, FR_ERR_SHAPE, "A %s and B %s must both be 2-D",
                             fr_shape_str(ra, da, s1, sizeof s1), fr_shape_str(rb, db, s2, sizeof s2));
    *M = c->ta ? da[1] : da[0];
    *K = c->ta ? da[0] : da[1];
    int64_t kb = c->tb ? db[1] : db[0];
    *N = c->tb ? db[0] : db[1];
    if (*K != kb)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "inner dimensions differ: A %s (transA=%d) and B %s (transB=%d)",
                             fr_shape_str(ra, da, s1, sizeof s1), c->ta,
                             fr_shape_str(rb, db, s2, sizeof s2), c->tb);
    if (rc >= 0) {
        int64_t mn[2] = {*M, *N};
        int ok = rc <= 2;
        for (int k = 0; ok && k < rc; k++) {
            int64_t d = dc[k], want = mn[2 - rc + k];
            ok = d == want || d == 1;
        }
        if (!ok)
            return fr_node_error(n, FR_ERR_SHAPE, "C %s does not broadcast to [%lld, %lld]",
                                 fr_shape_str(rc, dc, s1, sizeof s1), (long long)*M, (long long)*N);
    }
    return FR_OK;
}

static fr_status gemm_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 2, 3));
    fr_gemm_attrs c;
    FR_TRY(fr_gemm_read_attrs(n, &c));
    const fr_value *a = fr_node_in(g, n, 0), *b = fr_node_in(g, n, 1), *cv = fr_node_in(g, n, 2);
    if (cv) FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    if (!blas_dtype(a->dtype)) return dtype_error(n, a->dtype);
    if (b->dtype != a->dtype || (cv && cv->dtype != a->dtype))
        return fr_node_error(n, FR_ERR_SHAPE, "A is %s but B is %s%s%s", fr_dtype_name(a->dtype),
                             fr_dtype_name(b->dtype), cv ? " and C is " : "",
                             cv ? fr_dtype_name(cv->dtype) : "");
    int64_t dims[2], K;
    FR_TRY(gemm_dims(n, &c, a->rank, a->dims, b->rank, b->dims, cv ? cv->rank : -1,
                     cv ? cv->dims : NULL, &dims[0], &dims[1], &K));
    fr_infer_set(g, n, 0, a->dtype, 2, dims);
    return FR_OK;
}

/* Y = beta * C broadcast to [M, N]. */
static void fill_beta_c(fr_tensor *y, const fr_tensor *c, double beta, int64_t M, int64_t N)
{
    int64_t rs = 0, cs = 0; /* C's row and column strides (0 where broadcast) */
    if (c->rank == 2) {
        rs = c->dims[0] == 1 ? 0 : c->dims[1];
        cs = c->dims[1] == 1 ? 0 : 1;
    } else if (c->rank == 1) {
        cs = c->dims[0] == 1 ? 0 : 1;
    }
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < N; j++) {
            int64_t src = m * rs + j * cs;
            if (y->dtype == FR_F32)
                ((float *)y->data)[m * N + j] = (float)(beta * ((const float *)c->data)[src]);
            else
                ((double *)y->data)[m * N + j] = beta * ((const double *)c->data)[src];
        }
}

static fr_status gemm_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 2 || ctx->n_in > 3 || !ctx->in[0] || !ctx->in[1] || ctx->n_out < 1)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs A, B (C optional) and output Y");
    fr_gemm_attrs c;
    FR_TRY(fr_gemm_read_attrs(n, &c));
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1], *ct = ctx->n_in > 2 ? ctx->in[2] : NULL;
    fr_tensor *y = ctx->out[0];
    if (!blas_dtype(a->dtype)) return dtype_error(n, a->dtype);
    if (b->dtype != a->dtype || (ct && ct->dtype != a->dtype))
        return fr_node_error(n, FR_ERR_SHAPE, "A, B and C must have one dtype");
    int64_t M, N, K;
    FR_TRY(gemm_dims(n, &c, a->rank, a->dims, b->rank, b->dims, ct ? ct->rank : -1,
                     ct ? ct->dims : NULL, &M, &N, &K));
    int64_t dims[2] = {M, N};
    FR_TRY(fr_check_out(n, y, a->dtype, 2, dims));
    if (M == 0 || N == 0) return FR_OK;
    FR_TRY(check_blas_dims(n, M, N, K));
    int use_c = ct && c.beta != 0.0f;
    if (use_c)
        fill_beta_c(y, ct, (double)c.beta, M, N);
    else
        memset(y->data, 0, y->nbytes);
    if (K > 0)
        gemm(a->dtype, c.ta, c.tb, M, N, K, (double)c.alpha, a->data, b->data, use_c ? 1.0 : 0.0,
             y->data);
    return FR_OK;
}

/* ---- gradient rules ---- */

/* Reshape(x, dims) as a backward node; x itself when it already has that shape. */
static fr_status emit_reshape(fr_grad_ctx *ctx, int x, int rank, const int64_t *dims, int *out)
{
    const fr_value *xv = &ctx->g->values[x];
    int same = xv->rank == rank;
    for (int k = 0; same && k < rank; k++) same = xv->dims[k] == dims[k];
    if (same) {
        *out = x;
        return FR_OK;
    }
    double d[FR_MAX_RANK];
    for (int k = 0; k < rank; k++) d[k] = (double)dims[k];
    int64_t r = rank;
    int shp, nid;
    FR_TRY(fr_grad_const(ctx, FR_I64, 1, &r, d, &shp));
    int in[2] = {x, shp};
    FR_TRY(fr_grad_node(ctx, "Reshape", FR_DOMAIN_ONNX, 2, in, 1, out, &nid));
    /* a zero-size dim is a real dim here, not "copy the input's" */
    if (ctx->opset >= 14) FR_TRY(fr_node_set_attr_int(&ctx->g->nodes[nid], "allowzero", 1));
    return fr_grad_finish(ctx, nid);
}

/* Transpose of the last two dims (rank >= 2). */
static fr_status emit_swap_last2(fr_grad_ctx *ctx, int x, int *out)
{
    int rank = ctx->g->values[x].rank, nid;
    int64_t perm[FR_MAX_RANK];
    for (int k = 0; k < rank; k++) perm[k] = k;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    FR_TRY(fr_grad_node(ctx, "Transpose", FR_DOMAIN_ONNX, 1, &x, 1, out, &nid));
    FR_TRY(fr_node_set_attr_ints(&ctx->g->nodes[nid], "perm", rank, perm));
    return fr_grad_finish(ctx, nid);
}

/* Gemm(a, b) with the given transposes and alpha, no C. */
static fr_status emit_gemm(fr_grad_ctx *ctx, int a, int b, int ta, int tb, float alpha, int *out)
{
    int in[2] = {a, b}, nid;
    FR_TRY(fr_grad_node(ctx, "Gemm", FR_DOMAIN_ONNX, 2, in, 1, out, &nid));
    fr_node *n = &ctx->g->nodes[nid];
    if (ta) FR_TRY(fr_node_set_attr_int(n, "transA", 1));
    if (tb) FR_TRY(fr_node_set_attr_int(n, "transB", 1));
    if (alpha != 1.0f) FR_TRY(fr_node_set_attr_float(n, "alpha", alpha));
    return fr_grad_finish(ctx, nid);
}

/* ai.fp8run::MatMul(a, b) with the given transposes and the forward node's precision */
static fr_status emit_mmx(fr_grad_ctx *ctx, int a, int b, int ta, int tb, const char *prec, int *out)
{
    int in[2] = {a, b}, nid;
    FR_TRY(fr_grad_node(ctx, "MatMul", FR_DOMAIN_FP8RUN, 2, in, 1, out, &nid));
    fr_node *n = &ctx->g->nodes[nid];
    if (ta) FR_TRY(fr_node_set_attr_int(n, "transA", 1));
    if (tb) FR_TRY(fr_node_set_attr_int(n, "transB", 1));
    if (strcmp(prec, "fp32") != 0) FR_TRY(fr_node_set_attr_string(n, "precision", prec));
    return fr_grad_finish(ctx, nid);
}

/* Y = op(A) op(B) (op: transpose of the last two dims where set). With tA = 0,
 * dA = dY op(B)^T = MatMul(dY, B, 0, !tB); with tA = 1, dA = op(B) dY^T = MatMul(B, dY, tB, 1).
 * With tB = 0, dB = op(A)^T dY = MatMul(A, dY, !tA, 0); with tB = 1, dB = dY^T op(A) =
 * MatMul(dY, A, 1, tA). Broadcast batch dims are summed back. */
static fr_status mmx_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dY = ctx->dout[0];
    if (dY < 0) return FR_OK;
    mmx_cfg c;
    FR_TRY(mmx_attrs(n, &c));
    const int A = n->inputs[0], B = n->inputs[1];
    const char *prec = c.bf16 ? "bf16" : "fp32";
    if (ctx->need_din[0]) {
        int d;
        if (!c.ta)
            FR_TRY(emit_mmx(ctx, dY, B, 0, !c.tb, prec, &d));
        else
            FR_TRY(emit_mmx(ctx, B, dY, c.tb, 1, prec, &d));
        FR_TRY(fr_grad_sum_to(ctx, d, A, &ctx->din[0]));
    }
    if (ctx->need_din[1]) {
        int d;
        if (!c.tb)
            FR_TRY(emit_mmx(ctx, A, dY, !c.ta, 0, prec, &d));
        else
            FR_TRY(emit_mmx(ctx, dY, A, 1, c.ta, prec, &d));
        FR_TRY(fr_grad_sum_to(ctx, d, B, &ctx->din[1]));
    }
    return FR_OK;
}

static fr_status emit_matmul(fr_grad_ctx *ctx, int a, int b, int *out)
{
    int in[2] = {a, b}, nid;
    FR_TRY(fr_grad_node(ctx, "MatMul", FR_DOMAIN_ONNX, 2, in, 1, out, &nid));
    return fr_grad_finish(ctx, nid);
}

/* Y = A @ B (numpy matmul). dA = dY @ B^T, dB = A^T @ dY, with 1-D operands promoted to
 * matrices ([K] -> [1, K] for A, [K, 1] for B) and broadcast batch dims summed back.
 * When B has no batch dims (the Linear layer case, [.., T, K] x [K, N]) A's batch folds into
 * the rows and both gradients are single 2-D Gemms: the weight gradient is one [K, N]
 * product instead of a per-batch stack that is summed afterwards. */
static fr_status matmul_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int A = n->inputs[0], B = n->inputs[1], dY = ctx->dout[0];
    const int needA = ctx->need_din[0], needB = ctx->need_din[1];
    if (dY < 0) return FR_OK;
    /* shapes copied: g->values moves as the rule adds values */
    const int ra = g->values[A].rank, rb = g->values[B].rank;
    int64_t da[FR_MAX_RANK], db[FR_MAX_RANK];
    memcpy(da, g->values[A].dims, sizeof(int64_t) * (size_t)ra);
    memcpy(db, g->values[B].dims, sizeof(int64_t) * (size_t)rb);
    mm_plan p;
    FR_TRY(mm_make_plan(n, ra, da, rb, db, &p));
    const int64_t K = p.K, N = p.N;

    if (rb <= 2) {
        const int64_t P = p.batch * p.M; /* rows of A with its batch folded in */
        int64_t a2d[2] = {P, K}, b2d[2] = {K, N}, y2d[2] = {P, N};
        int A2 = A, B2 = B, dY2;
        FR_TRY(emit_reshape(ctx, dY, 2, y2d, &dY2));
        if (needA) {
            int dA2;
            if (rb == 1) FR_TRY(emit_reshape(ctx, B, 2, b2d, &B2));
            FR_TRY(emit_gemm(ctx, dY2, B2, 0, 1, 1.0f, &dA2)); /* [P, K] */
            FR_TRY(emit_reshape(ctx, dA2, ra, da, &ctx->din[0]));
        }
        if (needB) {
            int dB2;
            FR_TRY(emit_reshape(ctx, A, 2, a2d, &A2));
            FR_TRY(emit_gemm(ctx, A2, dY2, 1, 0, 1.0f, &dB2)); /* [K, N] */
            FR_TRY(emit_reshape(ctx, dB2, rb, db, &ctx->din[1]));
        }
        return FR_OK;
    }

    /* B batched: batch-wise products over the broadcast batch dims, then summed back */
    int A1 = A, dY1 = dY;
    if (ra == 1) {
        int64_t a1d[2] = {1, K}, y1d[FR_MAX_RANK];
        int r = 0;
        for (int k = 0; k < p.nb; k++) y1d[r++] = p.bdims[k];
        y1d[r++] = 1;
        y1d[r++] = N;
        FR_TRY(emit_reshape(ctx, A, 2, a1d, &A1));
        FR_TRY(emit_reshape(ctx, dY, r, y1d, &dY1));
    }
    if (needA) {
        int Bt, dA1;
        FR_TRY(emit_swap_last2(ctx, B, &Bt));
        FR_TRY(emit_matmul(ctx, dY1, Bt, &dA1)); /* [batch.., M, K] */
        /* for a 1-D A the target [K] right-aligns with K: the unit M dim is summed too */
        FR_TRY(fr_grad_sum_to(ctx, dA1, A, &ctx->din[0]));
    }
    if (needB) {
        int At, dB1;
        FR_TRY(emit_swap_last2(ctx, A1, &At));
        FR_TRY(emit_matmul(ctx, At, dY1, &dB1)); /* [batch.., K, N] */
        FR_TRY(fr_grad_sum_to(ctx, dB1, B, &ctx->din[1]));
    }
    return FR_OK;
}

/* Y = alpha * A' B' + beta * C, A' = transA ? A^T : A, B' likewise:
 *   dA' = alpha dY B'^T, dB' = alpha A'^T dY, dC = beta * (dY summed to C's shape).
 * Written back through the transposes, each is one Gemm with the right flags. */
static fr_status gemm_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    const int dY = ctx->dout[0];
    if (dY < 0) return FR_OK;
    fr_gemm_attrs c;
    FR_TRY(fr_gemm_read_attrs(n, &c));
    const int A = n->inputs[0], B = n->inputs[1], C = n->n_inputs > 2 ? n->inputs[2] : -1;
    const int needC = C >= 0 && ctx->need_din[2];
    if (ctx->need_din[0]) {
        if (c.ta) /* dA = alpha (B' dY^T) */
            FR_TRY(emit_gemm(ctx, B, dY, c.tb, 1, c.alpha, &ctx->din[0]));
        else      /* dA = alpha (dY B'^T) */
            FR_TRY(emit_gemm(ctx, dY, B, 0, !c.tb, c.alpha, &ctx->din[0]));
    }
    if (ctx->need_din[1]) {
        if (c.tb) /* dB = alpha (dY^T A') */
            FR_TRY(emit_gemm(ctx, dY, A, 1, c.ta, c.alpha, &ctx->din[1]));
        else      /* dB = alpha (A'^T dY) */
            FR_TRY(emit_gemm(ctx, A, dY, !c.ta, 0, c.alpha, &ctx->din[1]));
    }
    /* beta == 0: the forward ignores C, so its gradient is identically zero (din stays -1) */
    if (needC && c.beta != 0.0f) {
        int dC;
        FR_TRY(fr_grad_sum_to(ctx, dY, C, &dC));
        if (c.beta == 1.0f) {
            ctx->din[2] = dC;
        } else {
            int bs;
            FR_TRY(fr_grad_scalar(ctx, (double)c.beta, dC, &bs));
            int in[2] = {dC, bs};
            FR_TRY(fr_grad_op1(ctx, "Mul", 2, in, &ctx->din[2]));
        }
    }
    return FR_OK;
}

const fr_op_def fr_ops_matmul[] = {
    {"MatMul", FR_DOMAIN_ONNX, 1, matmul_infer, matmul_cpu, matmul_grad, 0},
    /* opset 7: C broadcasts unidirectionally (the older `broadcast` attribute is gone) */
    {"Gemm", FR_DOMAIN_ONNX, 7, gemm_infer, gemm_cpu, gemm_grad, 0},
    {"MatMul", FR_DOMAIN_FP8RUN, 1, mmx_infer, mmx_cpu, mmx_grad, 0},
    {0},
};
