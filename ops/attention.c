/* Fused scaled-dot-product attention on the CPU: Attention (O, LSE) and AttentionGrad
 * (dQ, dK, dV), as ops/attention.h specifies. One (batch, head) problem at a time: the
 * products are BLAS GEMMs (cblas_sgemm for float32, cblas_dgemm for float64, the same calls
 * the unfused MatMul makes), the softmax runs in double per row. The [Tq, Tk] scratch is
 * allocated once per call, never [batch, Tq, Tk]. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/attention.h"

/* ---- attributes and geometry (shared with the CUDA launchers) ---- */

fr_status fr_attn_read_attrs(const fr_node *n, int64_t head_dim, fr_attn_attrs *a)
{
    int64_t causal, window;
    const char *prec;
    if (head_dim < 1) return fr_node_error(n, FR_ERR_SHAPE, "head dim %lld must be >= 1", (long long)head_dim);
    FR_TRY(fr_node_attr_float(n, "scale", (float)(1.0 / sqrt((double)head_dim)), &a->scale));
    FR_TRY(fr_node_attr_int(n, "causal", 0, &causal));
    FR_TRY(fr_node_attr_string(n, "precision", "fp32", &prec));
    FR_TRY(fr_node_attr_int(n, "window", 0, &window));
    if (causal != 0 && causal != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "causal=%lld must be 0 or 1", (long long)causal);
    if (window < 0 || (window > 0 && !causal))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "window=%lld must be >= 0, and needs causal=1 when > 0",
                             (long long)window);
    if (strcmp(prec, "fp32") != 0 && strcmp(prec, "bf16") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "precision '%s' must be fp32 or bf16", prec);
    if (!isfinite(a->scale))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "scale %g must be finite", (double)a->scale);
    const char *form;
    FR_TRY(fr_node_attr_float(n, "softcap", 0.0f, &a->softcap));
    FR_TRY(fr_node_attr_string(n, "seg_form", "general", &form));
    if (!(a->softcap >= 0.0f) || !isfinite(a->softcap))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "softcap %g must be finite and >= 0 (0: none)", (double)a->softcap);
    if (strcmp(form, "general") == 0)
        a->seg_form = FR_ATTN_SEG_GENERAL;
    else if (strcmp(form, "padded") == 0)
        a->seg_form = FR_ATTN_SEG_PADDED;
    else if (strcmp(form, "packed") == 0)
        a->seg_form = FR_ATTN_SEG_PACKED;
    else
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "seg_form '%s' must be general, padded or packed", form);
    a->causal = (int)causal;
    a->window = window;
    a->bf16 = prec[0] == 'b';
    return FR_OK;
}

fr_status fr_attn_geometry(const fr_node *n, int rq, const int64_t *dq, int rk, const int64_t *dk, int rv,
                           const int64_t *dv, int causal, fr_attn_geom *g)
{
    char s1[128], s2[128], s3[128];
    memset(g, 0, sizeof *g);
    if (rq < 2 || rk < 2 || rv != rk || rk > rq)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "Q %s, K %s, V %s: ranks must be >= 2, K and V of one rank, not above Q's",
                             fr_shape_str(rq, dq, s1, sizeof s1), fr_shape_str(rk, dk, s2, sizeof s2),
                             fr_shape_str(rv, dv, s3, sizeof s3));
    g->brank = rq - 2;
    g->Tq = dq[rq - 2];
    g->D = dq[rq - 1];
    g->Tk = dk[rk - 2];
    g->Dv = dv[rv - 1];
    int ok = dk[rk - 1] == g->D && dv[rv - 2] == g->Tk;
    for (int k = 0; ok && k < rk - 2; k++) ok = dk[k] == dv[k];
    for (int k = 0; ok && k < rk - 2; k++) { /* right-aligned: K's dim k sits on Q's dim off + k */
        int64_t qd = dq[rq - rk + k];
        ok = dk[k] == qd || dk[k] == 1;
    }
    if (!ok)
        return fr_node_error(n, FR_ERR_SHAPE,
                             "Q %s, K %s, V %s do not fit: K [.., Tk, D] and V [.., Tk, Dv] need one batch "
                             "shape that broadcasts to Q's and Q's D",
                             fr_shape_str(rq, dq, s1, sizeof s1), fr_shape_str(rk, dk, s2, sizeof s2),
                             fr_shape_str(rv, dv, s3, sizeof s3));
    if (causal && g->Tq != g->Tk)
        return fr_node_error(n, FR_ERR_SHAPE, "causal attention needs Tq == Tk (got %lld and %lld)",
                             (long long)g->Tq, (long long)g->Tk);
    g->batch = 1;
    g->kv_batch = 1;
    int64_t stride = 1;
    for (int k = g->brank - 1; k >= 0; k--) {
        g->qdims[k] = dq[k];
        g->batch *= dq[k];
        int kk = k - (rq - rk); /* K's dim index, < 0 where K has none */
        int64_t kd = kk >= 0 ? dk[kk] : 1;
        g->kv_stride[k] = kd == 1 ? 0 : stride;
        stride *= kd;
    }
    g->kv_batch = stride;
    return FR_OK;
}

int64_t fr_attn_kv_index(const fr_attn_geom *g, int64_t b)
{
    int64_t kv = 0;
    for (int k = g->brank - 1; k >= 0; k--) {
        int64_t i = b % g->qdims[k];
        b /= g->qdims[k];
        kv += i * g->kv_stride[k];
    }
    return kv;
}

int64_t fr_attn_kv_group(const fr_attn_geom *g)
{
    /* K/V's own dims are row-major over Q's (kv_stride) and its broadcast dims have stride 0:
     * b -> b / G exactly when no dim of K/V's own lies inside (after) a broadcast one, the
     * broadcast dims then being the innermost G indices. Dims of 1 count for neither. */
    if (g->kv_batch < 1 || g->batch % g->kv_batch) return 0;
    int broadcast = 0;
    for (int k = 0; k < g->brank; k++) {
        if (g->qdims[k] == 1) continue;
        if (g->kv_stride[k] == 0)
            broadcast = 1;
        else if (broadcast)
            return 0;
    }
    return g->batch / g->kv_batch;
}

fr_status fr_attn_mask_geometry(const fr_node *n, const fr_attn_geom *g, int rm, const int64_t *dm, fr_attn_mask *m)
{
    memset(m, 0, sizeof *m);
    if (!dm) return FR_OK;
    const int rq = g->brank + 2;
    int ok = rm >= 2 && rm <= rq && (dm[rm - 2] == g->Tq || dm[rm - 2] == 1) && (dm[rm - 1] == g->Tk || dm[rm - 1] == 1);
    for (int k = 0; ok && k < rm - 2; k++) {
        const int64_t qd = g->qdims[g->brank - (rm - 2) + k];
        ok = dm[k] == qd || dm[k] == 1;
    }
    if (!ok) {
        char s1[128];
        return fr_node_error(n, FR_ERR_SHAPE, "mask %s does not broadcast to the scores [.., %lld, %lld]",
                             fr_shape_str(rm, dm, s1, sizeof s1), (long long)g->Tq, (long long)g->Tk);
    }
    m->present = 1;
    m->col = dm[rm - 1] == 1 ? 0 : 1;
    m->row = dm[rm - 2] == 1 ? 0 : dm[rm - 1];
    int64_t stride = dm[rm - 2] * dm[rm - 1];
    for (int k = g->brank - 1; k >= 0; k--) {
        const int km = k - (g->brank - (rm - 2)); /* M's dim index, < 0 where M has none */
        const int64_t md = km >= 0 ? dm[km] : 1;
        m->bstride[k] = md == 1 ? 0 : stride;
        stride *= md;
    }
    return FR_OK;
}

int64_t fr_attn_mask_offset(const fr_attn_geom *g, const fr_attn_mask *m, int64_t b)
{
    int64_t off = 0;
    for (int k = g->brank - 1; k >= 0; k--) {
        off += (b % g->qdims[k]) * m->bstride[k];
        b /= g->qdims[k];
    }
    return off;
}

fr_status fr_attn_seg_geometry(const fr_node *n, const fr_attn_geom *g, fr_dtype tk, int rk, const int64_t *dk,
                               fr_dtype tq, int rq, const int64_t *dq, fr_attn_seg *s)
{
    memset(s, 0, sizeof *s);
    s->per_row = 1;
    if (!dk) {
        if (dq) return fr_node_error(n, FR_ERR_GRAPH, "input Sq (query segment ids) needs Sk (key segment ids)");
        return FR_OK;
    }
    char s1[128], s2[128];
    for (int w = 0; w < 2; w++) {
        const fr_dtype t = w ? tq : tk;
        if ((w == 0 || dq) && t != FR_I32 && t != FR_I64)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "segment ids %s are %s: int32 or int64", w ? "Sq" : "Sk",
                                 fr_dtype_name(t));
    }
    const int64_t q0 = g->brank > 0 ? g->qdims[0] : 1;
    const int64_t rows = rk == 2 ? dk[0] : -1;
    if (rk != 2 || dk[1] != g->Tk || (rows != g->batch && rows != q0 && rows != 1))
        return fr_node_error(n, FR_ERR_SHAPE, "Sk %s must be [R, Tk=%lld] with R = %lld (one row per problem), %lld "
                             "(Q's first dim) or 1", fr_shape_str(rk, dk, s1, sizeof s1), (long long)g->Tk,
                             (long long)g->batch, (long long)q0);
    if (dq && (rq != 2 || dq[0] != rows || dq[1] != g->Tq))
        return fr_node_error(n, FR_ERR_SHAPE, "Sq %s must be [R, Tq] = [%lld, %lld] (Sk is %s)",
                             fr_shape_str(rq, dq, s1, sizeof s1), (long long)rows, (long long)g->Tq,
                             fr_shape_str(rk, dk, s2, sizeof s2));
    s->has_k = 1;
    s->has_q = dq != NULL;
    s->rows = rows;
    /* rows == batch first: with one problem per first-dim index both rules agree */
    s->per_row = rows == g->batch || g->batch == 0 ? 1 : rows == q0 ? g->batch / q0 : g->batch;
    return FR_OK;
}

fr_status fr_attn_seg_check_form(const fr_node *n, int seg_form, const void *sk, fr_dtype tk, const void *sq,
                                 fr_dtype tq, int64_t rows, int64_t Tk, int64_t Tq)
{
    if (seg_form == FR_ATTN_SEG_GENERAL || !sk) return FR_OK;
    const char *form = seg_form == FR_ATTN_SEG_PADDED ? "padded" : "packed";
    if (sq && Tq != Tk)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "seg_form %s: Sq must be absent or equal to Sk (Tq %lld != Tk %lld)",
                             form, (long long)Tq, (long long)Tk);
    for (int64_t r = 0; r < rows; r++) {
        int64_t prev = 1;
        for (int64_t j = 0; j < Tk; j++) {
            const int64_t id = fr_attn_seg_at(sk, tk, r * Tk + j);
            if (sq && fr_attn_seg_at(sq, tq, r * Tq + j) != id)
                return fr_node_error(n, FR_ERR_UNSUPPORTED, "seg_form %s: Sq differs from Sk at row %lld, position %lld",
                                     form, (long long)r, (long long)j);
            /* padded: 1 then 0 only; packed: positive non-decreasing, then 0 to the end */
            const int ok = seg_form == FR_ATTN_SEG_PADDED ? (id == 1 && prev == 1) || id == 0
                                                          : (id >= prev && prev > 0) || id == 0;
            if (!ok)
                return fr_node_error(n, FR_ERR_UNSUPPORTED, "seg_form %s: Sk row %lld has id %lld at position %lld "
                                     "after %lld (%s)", form, (long long)r, (long long)id, (long long)j,
                                     (long long)prev, seg_form == FR_ATTN_SEG_PADDED
                                         ? "ones, then zeros"
                                         : "positive non-decreasing ids, then zeros");
            prev = id;
        }
    }
    return FR_OK;
}

/* ---- shared checks ---- */

static int float_dtype(fr_dtype dt) { return dt == FR_F32 || dt == FR_F64; }

static fr_status check_dtypes(const fr_node *n, int bf16, fr_dtype q, fr_dtype k, fr_dtype v)
{
    if (!float_dtype(q) || k != q || v != q)
        return fr_node_error(n, FR_ERR_UNSUPPORTED,
                             "Q, K, V are %s, %s, %s: they must share one dtype, float32 (or float64)",
                             fr_dtype_name(q), fr_dtype_name(k), fr_dtype_name(v));
    if (bf16 && q != FR_F32) return fr_node_error(n, FR_ERR_UNSUPPORTED, "bf16 precision needs float32 inputs");
    return FR_OK;
}

/* O's and LSE's shapes: Q's batch dims, then [Tq, Dv] and [Tq]. */
static void out_shapes(int rq, const int64_t *dq, const fr_attn_geom *g, int64_t *od, int64_t *ld)
{
    memcpy(od, dq, sizeof(int64_t) * (size_t)rq);
    od[rq - 1] = g->Dv;
    memcpy(ld, dq, sizeof(int64_t) * (size_t)(rq - 1));
}

/* What every entry point (shape inference and kernel, forward and backward) derives first from
 * the attributes and Q, K, V: the attributes, the dtypes checked, the geometry, O's and LSE's
 * shapes. ATTN_SETUP takes Q, K, V as fr_value (inference) or fr_tensor (kernels). */
static fr_status attn_setup(const fr_node *n, fr_dtype qt, int rq, const int64_t *dq, fr_dtype kt, int rk,
                            const int64_t *dk, fr_dtype vt, int rv, const int64_t *dv, fr_attn_attrs *a,
                            fr_attn_geom *geo, int64_t *od, int64_t *ld)
{
    FR_TRY(fr_attn_read_attrs(n, rq >= 1 ? dq[rq - 1] : 0, a));
    FR_TRY(check_dtypes(n, a->bf16, qt, kt, vt));
    FR_TRY(fr_attn_geometry(n, rq, dq, rk, dk, rv, dv, a->causal, geo));
    out_shapes(rq, dq, geo, od, ld);
    return FR_OK;
}
#define ATTN_SETUP(n, q, k, v, a, geo, od, ld)                                                               \
    attn_setup(n, (q)->dtype, (q)->rank, (q)->dims, (k)->dtype, (k)->rank, (k)->dims, (v)->dtype, (v)->rank, \
               (v)->dims, a, geo, od, ld)

static fr_status check_blas(const fr_node *n, const fr_attn_geom *g)
{
    if (g->Tq > INT_MAX || g->Tk > INT_MAX || g->D > INT_MAX || g->Dv > INT_MAX)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attention dims exceed the BLAS int range");
    return FR_OK;
}

/* Row-major GEMM C[M,N] = alpha * op(A) op(B) + beta * C on float32 or float64 data. Any dim may
 * be 0 (K = 0: C = beta * C): the leading dims stay >= 1, as BLAS requires (it would otherwise
 * report an illegal parameter on stdout and leave C unwritten). */
static void gemm(fr_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                 const void *B, double beta, void *C)
{
    int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N), ldc = (int)N;
    lda = lda > 1 ? lda : 1;
    ldb = ldb > 1 ? ldb : 1;
    ldc = ldc > 1 ? ldc : 1;
    enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    if (dt == FR_F32)
        cblas_sgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, (float)alpha, A, lda, B, ldb, (float)beta, C,
                    ldc);
    else
        cblas_dgemm(CblasRowMajor, oa, ob, (int)M, (int)N, (int)K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static float bf16_round(float x) { return fr_bf16_to_f32(fr_f32_to_bf16(x)); }

/* A float32 tensor's data rounded to bf16 (NULL tensor -> NULL with *st FR_OK). */
static float *bf16_copy(const fr_tensor *t, fr_status *st)
{
    *st = FR_OK;
    if (!t) return NULL;
    int64_t n = fr_tensor_numel(t);
    float *c = fr_malloc((size_t)(n ? n : 1) * sizeof(float), "bf16 attention operand");
    if (!c) {
        *st = FR_ERR_OOM;
        return NULL;
    }
    const float *x = t->data;
    for (int64_t i = 0; i < n; i++) c[i] = bf16_round(x[i]);
    return c;
}

void fr_attn_row_range(const fr_attn_attrs *a, int64_t Tk, int64_t i, int64_t *lo, int64_t *hi)
{
    *hi = a->causal ? i + 1 : Tk;
    *lo = a->window > 0 && i - a->window + 1 > 0 ? i - a->window + 1 : 0;
}

/* ---- Attention ---- */

/* The optional mask input idx of a node being inferred: Q's dtype, broadcastable to the scores. */
static fr_status infer_mask(fr_graph *g, const fr_node *n, int idx, const fr_attn_geom *geo, fr_dtype dt)
{
    if (n->n_inputs <= idx || n->inputs[idx] < 0) return FR_OK;
    const fr_value *m = fr_node_in(g, n, idx);
    if (m->dtype != dt)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mask '%s' is %s, must be %s like Q (an additive mask)", m->name,
                             fr_dtype_name(m->dtype), fr_dtype_name(dt));
    fr_attn_mask mg;
    return fr_attn_mask_geometry(n, geo, m->rank, m->dims, &mg);
}

/* The optional segment inputs Sk (index idx) and Sq (idx + 1) of a node being inferred. */
static fr_status infer_segs(fr_graph *g, const fr_node *n, int idx, const fr_attn_geom *geo)
{
    const fr_value *sk = fr_node_in(g, n, idx), *sq = fr_node_in(g, n, idx + 1);
    fr_attn_seg sg;
    return fr_attn_seg_geometry(n, geo, sk ? sk->dtype : FR_I64, sk ? sk->rank : 0, sk ? sk->dims : NULL,
                                sq ? sq->dtype : FR_I64, sq ? sq->rank : 0, sq ? sq->dims : NULL, &sg);
}

static fr_status attn_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 6));
    if (n->n_outputs < 1 || n->n_outputs > 2 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs output O (and optionally LSE)");
    const fr_value *q = fr_node_in(g, n, 0), *k = fr_node_in(g, n, 1), *v = fr_node_in(g, n, 2);
    fr_attn_attrs a;
    fr_attn_geom geo;
    int64_t od[FR_MAX_RANK], ld[FR_MAX_RANK];
    FR_TRY(ATTN_SETUP(n, q, k, v, &a, &geo, od, ld));
    const fr_dtype dt = q->dtype;
    FR_TRY(infer_mask(g, n, 3, &geo, dt));
    FR_TRY(infer_segs(g, n, 4, &geo));
    fr_infer_set(g, n, 0, dt, q->rank, od);
    fr_infer_set(g, n, 1, dt, q->rank - 1, ld);
    return FR_OK;
}

/* Softmax of one scores row s[0..len) in place (P, normalized, zeros past len up to Tk);
 * returns the row's log-sum-exp. */
#define SOFTMAX_ROW(T)                                                                       \
    do {                                                                                     \
        double m = -INFINITY, sum = 0.0;                                                     \
        for (int64_t j = 0; j < len; j++)                                                    \
            if ((double)s[j] > m || isnan((double)s[j])) m = s[j];                           \
        if (m == -INFINITY) { /* fully masked: P = 0 (the exporter's IsNaN guard) */         \
            for (int64_t j = 0; j < tk; j++) s[j] = 0;                                       \
            return m;                                                                        \
        }                                                                                    \
        for (int64_t j = 0; j < len; j++) {                                                  \
            double e = exp((double)s[j] - m);                                                \
            sum += e;                                                                        \
            s[j] = (T)e;                                                                     \
        }                                                                                    \
        double inv = 1.0 / sum;                                                              \
        for (int64_t j = 0; j < len; j++) s[j] = (T)((double)s[j] * inv);                    \
        for (int64_t j = len; j < tk; j++) s[j] = 0;                                         \
        return m + log(sum);                                                                 \
    } while (0)

static double softmax_row_f32(float *s, int64_t len, int64_t tk) { SOFTMAX_ROW(float); }
static double softmax_row_f64(double *s, int64_t len, int64_t tk) { SOFTMAX_ROW(double); }

/* The mask input (NULL: none), checked against the geometry and Q's dtype. */
static fr_status read_mask(const fr_node *n, const fr_tensor *mt, const fr_attn_geom *geo, fr_dtype dt,
                           fr_attn_mask *mg)
{
    if (mt && mt->dtype != dt)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "mask is %s, must be %s like Q (an additive mask)",
                             fr_dtype_name(mt->dtype), fr_dtype_name(dt));
    return fr_attn_mask_geometry(n, geo, mt ? mt->rank : 0, mt ? mt->dims : NULL, mg);
}

/* The kernels' setup: ATTN_SETUP, then the mask input mt (NULL: none) and the output (forward)
 * or input (backward) O checked against it. */
/* What both kernels know of a node once kernel_setup has read it. */
typedef struct {
    fr_attn_attrs a;
    fr_attn_geom geo;
    fr_attn_mask mg;
    fr_attn_seg sg;
    const fr_tensor *sk, *sq; /* the segment ids (NULL: absent) */
    int64_t od[FR_MAX_RANK], ld[FR_MAX_RANK]; /* the shapes of O and of LSE */
} attn_node;

static fr_status kernel_setup(const fr_node *n, const fr_tensor *q, const fr_tensor *k, const fr_tensor *v,
                              const fr_tensor *mt, const fr_tensor *sk, const fr_tensor *sq, const fr_tensor *o,
                              attn_node *su)
{
    FR_TRY(ATTN_SETUP(n, q, k, v, &su->a, &su->geo, su->od, su->ld));
    FR_TRY(read_mask(n, mt, &su->geo, q->dtype, &su->mg));
    FR_TRY(fr_attn_seg_geometry(n, &su->geo, sk ? sk->dtype : FR_I64, sk ? sk->rank : 0, sk ? sk->dims : NULL,
                                sq ? sq->dtype : FR_I64, sq ? sq->rank : 0, sq ? sq->dims : NULL, &su->sg));
    su->sk = sk;
    su->sq = sq;
    if (sk)
        FR_TRY(fr_attn_seg_check_form(n, su->a.seg_form, sk->data, sk->dtype, sq ? sq->data : NULL,
                                      sq ? sq->dtype : FR_I64, su->sg.rows, su->geo.Tk, su->geo.Tq));
    return fr_check_out(n, o, q->dtype, q->rank, su->od);
}

/* Scores row i of problem b += its mask row. */
static void add_mask_row(fr_dtype dt, void *row, const fr_tensor *mt, const fr_attn_mask *mg, int64_t off, int64_t i,
                         int64_t Tk)
{
    if (!mg->present) return;
    const int64_t base = off + i * mg->row;
    if (dt == FR_F32)
        for (int64_t j = 0; j < Tk; j++) ((float *)row)[j] += ((const float *)mt->data)[base + j * mg->col];
    else
        for (int64_t j = 0; j < Tk; j++) ((double *)row)[j] += ((const double *)mt->data)[base + j * mg->col];
}

/* Element x of a float32 or float64 buffer. */
static double get_f(fr_dtype dt, const void *p, int64_t x)
{
    return dt == FR_F32 ? (double)((const float *)p)[x] : ((const double *)p)[x];
}
static void set_f(fr_dtype dt, void *p, int64_t x, double v)
{
    if (dt == FR_F32)
        ((float *)p)[x] = (float)v;
    else
        ((double *)p)[x] = v;
}

/* S = softcap(scale Q K^T) + mask, -inf where the segments differ: the [Tq, Tk] scores of
 * problem b (Qb, Kb: its Q and its K). dcap (NULL: not wanted; softcap only) receives
 * d softcap(s) / ds = 1 - tanh^2(s / c) per score. */
static void scores(fr_dtype dt, const attn_node *su, const fr_tensor *mt, int64_t b, const void *Qb, const void *Kb,
                   void *S, void *dcap)
{
    const fr_attn_attrs *a = &su->a;
    const fr_attn_geom *geo = &su->geo;
    const int64_t Tq = geo->Tq, Tk = geo->Tk;
    gemm(dt, 0, 1, Tq, Tk, geo->D, a->scale, Qb, Kb, 0.0, S);
    if (a->softcap > 0.0f) {
        const double c = a->softcap;
        for (int64_t x = 0; x < Tq * Tk; x++) {
            const double t = tanh(get_f(dt, S, x) / c);
            set_f(dt, S, x, c * t);
            if (dcap) set_f(dt, dcap, x, 1.0 - t * t);
        }
    }
    const int64_t moff = fr_attn_mask_offset(geo, &su->mg, b);
    for (int64_t i = 0; i < Tq; i++)
        add_mask_row(dt, (char *)S + (size_t)(i * Tk) * fr_dtype_size(dt), mt, &su->mg, moff, i, Tk);
    if (!su->sk) return;
    const int64_t r = fr_attn_seg_row(&su->sg, b);
    for (int64_t i = 0; i < Tq; i++) {
        const int64_t qid = su->sq ? fr_attn_seg_at(su->sq->data, su->sq->dtype, r * Tq + i) : 1;
        for (int64_t j = 0; j < Tk; j++)
            if (fr_attn_seg_at(su->sk->data, su->sk->dtype, r * Tk + j) != qid) set_f(dt, S, i * Tk + j, -INFINITY);
    }
}

static fr_status attn_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 3 || ctx->n_in > 6 || !ctx->in[0] || !ctx->in[1] || !ctx->in[2] || ctx->n_out < 1 || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V (and optionally M, Sk, Sq) and output O");
    const fr_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2], *mt = ctx->n_in > 3 ? ctx->in[3] : NULL;
    const fr_tensor *sk = ctx->n_in > 4 ? ctx->in[4] : NULL, *sq = ctx->n_in > 5 ? ctx->in[5] : NULL;
    fr_tensor *o = ctx->out[0], *lse = ctx->n_out > 1 ? ctx->out[1] : NULL;
    attn_node su;
    FR_TRY(kernel_setup(n, q, k, v, mt, sk, sq, o, &su));
    const fr_dtype dt = q->dtype;
    if (lse) FR_TRY(fr_check_out(n, lse, dt, q->rank - 1, su.ld));
    FR_TRY(check_blas(n, &su.geo));
    if (su.geo.batch == 0 || su.geo.Tq == 0) return FR_OK; /* Dv = 0: no O, but LSE is still due */
    if (su.geo.Tk == 0 || su.geo.D == 0)
        return fr_node_error(n, FR_ERR_SHAPE, "Tk and D must be >= 1 (a row with no key has no softmax)");

    const size_t es = fr_dtype_size(dt);
    fr_status st = FR_OK;
    float *rq = NULL, *rk = NULL, *rv = NULL;
    void *S = NULL;
    if (su.a.bf16) {
        rq = bf16_copy(q, &st);
        if (st == FR_OK) rk = bf16_copy(k, &st);
        if (st == FR_OK) rv = bf16_copy(v, &st);
    }
    if (st == FR_OK && !(S = fr_malloc((size_t)(su.geo.Tq * su.geo.Tk) * es, "attention scores")))
        st = FR_ERR_OOM;
    if (st != FR_OK) goto done;
    const char *Q = rq ? (const char *)rq : q->data, *K = rk ? (const char *)rk : k->data,
               *V = rv ? (const char *)rv : v->data;
    const int64_t Tq = su.geo.Tq, Tk = su.geo.Tk, D = su.geo.D, Dv = su.geo.Dv;
    for (int64_t b = 0; b < su.geo.batch; b++) {
        const int64_t kv = fr_attn_kv_index(&su.geo, b);
        const char *Qb = Q + (size_t)(b * Tq * D) * es, *Kb = K + (size_t)(kv * Tk * D) * es,
                   *Vb = V + (size_t)(kv * Tk * Dv) * es;
        scores(dt, &su, mt, b, Qb, Kb, S, NULL);
        for (int64_t i = 0; i < Tq; i++) {
            int64_t lo, hi;
            fr_attn_row_range(&su.a, Tk, i, &lo, &hi);
            double l;
            if (dt == FR_F32) { /* keys before lo: zeros; the softmax zeroes those from hi on */
                float *row = (float *)S + i * Tk;
                for (int64_t j = 0; j < lo; j++) row[j] = 0.0f;
                l = softmax_row_f32(row + lo, hi - lo, Tk - lo);
                if (su.a.bf16)
                    for (int64_t j = lo; j < hi; j++) row[j] = bf16_round(row[j]);
            } else {
                double *row = (double *)S + i * Tk;
                for (int64_t j = 0; j < lo; j++) row[j] = 0.0;
                l = softmax_row_f64(row + lo, hi - lo, Tk - lo);
            }
            if (lse) {
                if (dt == FR_F32)
                    ((float *)lse->data)[b * Tq + i] = (float)l;
                else
                    ((double *)lse->data)[b * Tq + i] = l;
            }
        }
        gemm(dt, 0, 0, Tq, Dv, Tk, 1.0, S, Vb, 0.0, (char *)o->data + (size_t)(b * Tq * Dv) * es);
    }
done:
    free(rq);
    free(rk);
    free(rv);
    free(S);
    return st;
}

/* The backward is one AttentionGrad node reading the forward's inputs and outputs (LSE
 * included); outputs whose gradient nobody needs are left empty. */
static fr_status attn_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    if (ctx->dout[0] < 0 || !(ctx->need_din[0] || ctx->need_din[1] || ctx->need_din[2])) return FR_OK;
    if (n->n_outputs < 2 || n->outputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "the gradient needs the LSE output (output 1)");
    const int masked = fr_attn_has_input(n, 3);
    if (masked && ctx->need_din[3])
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "the mask input '%s' gets no gradient (it must not depend on a "
                             "trained parameter)", g->values[n->inputs[3]].name);
    /* M, Sk, Sq pass through at 6, 7, 8 (omitted ones stay empty; trailing ones are dropped);
     * the integer segment ids get no gradient */
    int in[9] = {n->inputs[0], n->inputs[1], n->inputs[2], n->outputs[0], n->outputs[1], ctx->dout[0], -1, -1, -1};
    int n_in = 6;
    for (int i = 3; i < 6; i++)
        if (fr_attn_has_input(n, i)) {
            in[i + 3] = n->inputs[i];
            n_in = i + 4;
        }
    int out[3], nid;
    FR_TRY(fr_grad_node(ctx, "AttentionGrad", FR_DOMAIN_FP8RUN, n_in, in, 3, out, &nid));
    n = &g->nodes[ctx->node_id];
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_copy_attrs(gn, n)); /* the gradient node reads the forward's attributes */
    fr_grad_keep_needed(ctx, nid, 3, out);
    return fr_grad_finish(ctx, nid);
}

/* ---- AttentionGrad ---- */

static fr_status attng_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 6, 9));
    if (n->n_outputs != 3) return fr_node_error(n, FR_ERR_GRAPH, "needs 3 outputs dQ, dK, dV (empty when not needed)");
    const fr_value *q = fr_node_in(g, n, 0), *k = fr_node_in(g, n, 1), *v = fr_node_in(g, n, 2),
                   *o = fr_node_in(g, n, 3), *lse = fr_node_in(g, n, 4), *dout = fr_node_in(g, n, 5);
    fr_attn_attrs a;
    fr_attn_geom geo;
    int64_t od[FR_MAX_RANK], ld[FR_MAX_RANK];
    FR_TRY(ATTN_SETUP(n, q, k, v, &a, &geo, od, ld));
    const fr_value *chk[3] = {o, dout, lse};
    for (int c = 0; c < 3; c++) {
        const fr_value *x = chk[c];
        int r = c == 2 ? q->rank - 1 : q->rank;
        const int64_t *want = c == 2 ? ld : od;
        int same = x->dtype == q->dtype && x->rank == r;
        for (int d = 0; same && d < r; d++) same = x->dims[d] == want[d];
        if (!same) {
            char s1[128], s2[128];
            return fr_node_error(n, FR_ERR_SHAPE, "input '%s' is %s %s, expected %s %s", x->name,
                                 fr_dtype_name(x->dtype), fr_shape_str(x->rank, x->dims, s1, sizeof s1),
                                 fr_dtype_name(q->dtype), fr_shape_str(r, want, s2, sizeof s2));
        }
    }
    FR_TRY(infer_mask(g, n, 6, &geo, q->dtype));
    FR_TRY(infer_segs(g, n, 7, &geo));
    for (int i = 0; i < 3; i++) fr_infer_same(g, n, i, i);
    return FR_OK;
}

static fr_status attng_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 6 || ctx->n_in > 9 || ctx->n_out != 3)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V, O, LSE, dO (and M, Sk, Sq) and outputs dQ, dK, dV");
    for (int i = 0; i < 6; i++)
        if (!ctx->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_tensor *q = ctx->in[0], *k = ctx->in[1], *v = ctx->in[2], *o = ctx->in[3], *lse = ctx->in[4],
                    *dout = ctx->in[5], *mt = ctx->n_in > 6 ? ctx->in[6] : NULL;
    const fr_tensor *sk = ctx->n_in > 7 ? ctx->in[7] : NULL, *sq = ctx->n_in > 8 ? ctx->in[8] : NULL;
    fr_tensor *dq = ctx->out[0], *dk = ctx->out[1], *dv = ctx->out[2];
    attn_node su;
    FR_TRY(kernel_setup(n, q, k, v, mt, sk, sq, o, &su));
    const fr_dtype dt = q->dtype;
    FR_TRY(fr_check_out(n, dout, dt, q->rank, su.od));
    FR_TRY(fr_check_out(n, lse, dt, q->rank - 1, su.ld));
    if (dq) FR_TRY(fr_check_out(n, dq, dt, q->rank, q->dims));
    if (dk) FR_TRY(fr_check_out(n, dk, dt, k->rank, k->dims));
    if (dv) FR_TRY(fr_check_out(n, dv, dt, v->rank, v->dims));
    FR_TRY(check_blas(n, &su.geo));
    /* an empty tensor may have no buffer at all (memset of NULL is undefined even for 0 bytes) */
    if (dq && dq->nbytes) memset(dq->data, 0, dq->nbytes);
    if (dk && dk->nbytes) memset(dk->data, 0, dk->nbytes);
    if (dv && dv->nbytes) memset(dv->data, 0, dv->nbytes);
    if (su.geo.batch == 0 || su.geo.Tq == 0 || su.geo.Tk == 0 || (!dq && !dk && !dv)) return FR_OK;

    const int64_t Tq = su.geo.Tq, Tk = su.geo.Tk, D = su.geo.D, Dv = su.geo.Dv;
    const size_t es = fr_dtype_size(dt);
    fr_status st = FR_OK;
    float *rq = NULL, *rk = NULL, *rv = NULL, *rdo = NULL;
    void *P = NULL, *dP = NULL, *dcap = NULL;
    double *delta = NULL;
    if (su.a.bf16) {
        rq = bf16_copy(q, &st);
        if (st == FR_OK) rk = bf16_copy(k, &st);
        if (st == FR_OK) rv = bf16_copy(v, &st);
        if (st == FR_OK) rdo = bf16_copy(dout, &st);
    }
    if (st == FR_OK && (!(P = fr_malloc((size_t)(Tq * Tk) * es, "attention probabilities")) ||
                        !(dP = fr_malloc((size_t)(Tq * Tk) * es, "attention probability gradient")) ||
                        !(delta = fr_malloc((size_t)Tq * sizeof(double), "attention row terms")) ||
                        (su.a.softcap > 0.0f &&
                         !(dcap = fr_malloc((size_t)(Tq * Tk) * es, "attention softcap derivative")))))
        st = FR_ERR_OOM;
    if (st != FR_OK) goto done;
    const char *Q = rq ? (const char *)rq : q->data, *K = rk ? (const char *)rk : k->data,
               *V = rv ? (const char *)rv : v->data, *dO = rdo ? (const char *)rdo : dout->data;
    for (int64_t b = 0; b < su.geo.batch; b++) {
        const int64_t kv = fr_attn_kv_index(&su.geo, b);
        const char *Qb = Q + (size_t)(b * Tq * D) * es, *Kb = K + (size_t)(kv * Tk * D) * es,
                   *Vb = V + (size_t)(kv * Tk * Dv) * es, *dOb = dO + (size_t)(b * Tq * Dv) * es;
        /* P = exp(scale Q K^T - LSE), 0 where masked */
        scores(dt, &su, mt, b, Qb, Kb, P, dcap);
        for (int64_t i = 0; i < Tq; i++) {
            int64_t lo, hi;
            fr_attn_row_range(&su.a, Tk, i, &lo, &hi);
            double sum = 0.0; /* Delta_i = dO_i . O_i, from the unrounded dO */
            if (dt == FR_F32) {
                float *row = (float *)P + i * Tk;
                const float l = ((const float *)lse->data)[b * Tq + i];
                if (l == -INFINITY) hi = lo; /* a fully masked row: P = 0 */
                for (int64_t j = 0; j < Tk; j++)
                    row[j] = j >= lo && j < hi ? (float)exp((double)row[j] - (double)l) : 0.0f;
                const float *oi = (const float *)o->data + (b * Tq + i) * Dv,
                            *di = (const float *)dout->data + (b * Tq + i) * Dv;
                for (int64_t d = 0; d < Dv; d++) sum += (double)oi[d] * (double)di[d];
            } else {
                double *row = (double *)P + i * Tk;
                const double l = ((const double *)lse->data)[b * Tq + i];
                if (l == -INFINITY) hi = lo;
                for (int64_t j = 0; j < Tk; j++) row[j] = j >= lo && j < hi ? exp(row[j] - l) : 0.0;
                const double *oi = (const double *)o->data + (b * Tq + i) * Dv,
                             *di = (const double *)dout->data + (b * Tq + i) * Dv;
                for (int64_t d = 0; d < Dv; d++) sum += oi[d] * di[d];
            }
            delta[i] = sum;
        }
        if (dq || dk) { /* dP = dO V^T, then dS = P (dP - Delta) in place, from the unrounded P */
            gemm(dt, 0, 1, Tq, Tk, Dv, 1.0, dOb, Vb, 0.0, dP);
            for (int64_t i = 0; i < Tq; i++) {
                if (dt == FR_F32) {
                    const float *pr = (const float *)P + i * Tk;
                    float *dr = (float *)dP + i * Tk;
                    for (int64_t j = 0; j < Tk; j++) dr[j] = (float)((double)pr[j] * ((double)dr[j] - delta[i]));
                    if (dcap) /* through the softcap: dS_raw = dS (1 - tanh^2) */
                        for (int64_t j = 0; j < Tk; j++) dr[j] = (float)((double)dr[j] * ((const float *)dcap)[i * Tk + j]);
                    if (su.a.bf16)
                        for (int64_t j = 0; j < Tk; j++) dr[j] = bf16_round(dr[j]);
                } else {
                    const double *pr = (const double *)P + i * Tk;
                    double *dr = (double *)dP + i * Tk;
                    for (int64_t j = 0; j < Tk; j++) dr[j] = pr[j] * (dr[j] - delta[i]);
                    if (dcap)
                        for (int64_t j = 0; j < Tk; j++) dr[j] *= ((const double *)dcap)[i * Tk + j];
                }
            }
        }
        if (dv) { /* dV += P^T dO (summed over the Q batches sharing this K/V) */
            if (su.a.bf16)
                for (int64_t x = 0; x < Tq * Tk; x++) ((float *)P)[x] = bf16_round(((float *)P)[x]);
            gemm(dt, 1, 0, Tk, Dv, Tq, 1.0, P, dOb, 1.0, (char *)dv->data + (size_t)(kv * Tk * Dv) * es);
        }
        if (dq) gemm(dt, 0, 0, Tq, D, Tk, su.a.scale, dP, Kb, 0.0, (char *)dq->data + (size_t)(b * Tq * D) * es);
        if (dk) gemm(dt, 1, 0, Tk, D, Tq, su.a.scale, dP, Qb, 1.0, (char *)dk->data + (size_t)(kv * Tk * D) * es);
    }
done:
    free(rq);
    free(rk);
    free(rv);
    free(rdo);
    free(P);
    free(dP);
    free(dcap);
    free(delta);
    return st;
}

const fr_op_def fr_ops_attention[] = {
    {"Attention", FR_DOMAIN_FP8RUN, 1, attn_infer, attn_cpu, attn_grad, 0},
    {"AttentionGrad", FR_DOMAIN_FP8RUN, 1, attng_infer, attng_cpu, NULL, 0},
    {0},
};
