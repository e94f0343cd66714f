/* cuDNN's SDPA as operation graphs (the patterns cudnn-frontend builds, which its flash
 * engines match), through the descriptor builder (attention_cudnn_graph.h); the search for an
 * execution plan is attention_cudnn_plan.c. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/attention_cudnn_graph.h"
#include "ops/cuda/attention_cudnn_status.h"

/* ---------------------------------------------------------------- graph builder ---- */

void fr_cudnn_gb_fail_text(gb *b, const char *text)
{
    if (!b->failed) snprintf(b->why, sizeof b->why, "%s", text);
    b->failed = 1;
}

void fr_cudnn_gb_fail(gb *b, int status, const char *what)
{
    if (!b->failed) fr_cudnn_status_text(b->api, status, what, b->why, sizeof b->why);
    b->failed = 1;
}

void fr_cudnn_gb_free(gb *b)
{
    for (int i = b->n_all - 1; i >= 0; i--)
        if (b->all[i]) b->api->BackendDestroyDescriptor(b->all[i]); /* best effort: nothing to do on failure */
    free(b->all);
    b->all = NULL;
    b->n_all = b->cap_all = 0;
}

/* Keep d (made outside fr_cudnn_gb_new) to be destroyed with the rest; on failure destroys it. */
int fr_cudnn_gb_keep(gb *b, frdnn_desc d)
{
    if (b->n_all == b->cap_all) {
        int cap = b->cap_all ? 2 * b->cap_all : 64;
        frdnn_desc *a = realloc(b->all, (size_t)cap * sizeof *a);
        if (!a) {
            b->api->BackendDestroyDescriptor(d);
            fr_cudnn_gb_fail_text(b, "out of host memory for cuDNN descriptors");
            return -1;
        }
        b->all = a;
        b->cap_all = cap;
    }
    b->all[b->n_all++] = d;
    return 0;
}

frdnn_desc fr_cudnn_gb_new(gb *b, int type, const char *what)
{
    if (b->failed) return NULL;
    frdnn_desc d = NULL;
    int st = b->api->BackendCreateDescriptor(type, &d);
    if (st != FRDNN_STATUS_SUCCESS) {
        fr_cudnn_gb_fail(b, st, what);
        return NULL;
    }
    return fr_cudnn_gb_keep(b, d) == 0 ? d : NULL;
}

void fr_cudnn_gb_set(gb *b, frdnn_desc d, int name, int type, int64_t count, const void *v, const char *what)
{
    if (b->failed || !d) return;
    int st = b->api->BackendSetAttribute(d, name, type, count, v);
    if (st != FRDNN_STATUS_SUCCESS) fr_cudnn_gb_fail(b, st, what);
}

void fr_cudnn_gb_fin(gb *b, frdnn_desc d, const char *what)
{
    if (b->failed || !d) return;
    int st = b->api->BackendFinalize(d);
    if (st != FRDNN_STATUS_SUCCESS) fr_cudnn_gb_fail(b, st, what);
}

static void add_op(gb *b, frdnn_desc op, const char *what)
{
    fr_cudnn_gb_fin(b, op, what);
    if (b->failed) return;
    if (b->n_ops == (int)(sizeof b->ops / sizeof b->ops[0])) {
        fr_cudnn_gb_fail_text(b, "too many cuDNN operations (internal limit)");
        return;
    }
    b->ops[b->n_ops++] = op;
}

/* A 4-d shape: dims and element strides. */
typedef struct shp {
    int64_t d[4], s[4];
} shp;

static shp shape(int64_t d0, int64_t d1, int64_t d2, int64_t d3, const int64_t *s)
{
    shp r = {{d0, d1, d2, d3}, {s[0], s[1], s[2], s[3]}};
    return r;
}

/* Dims d, packed row-major. */
static shp packed(int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    const int64_t s[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return shape(d0, d1, d2, d3, s);
}

enum { T_VIRTUAL = 1, T_BY_VALUE = 2 };

/* A tensor; rg (NULL: none): its ragged offsets, which replace the batch stride. */
static frdnn_desc tensor_rg(gb *b, int64_t uid, int dtype, const shp *s, int flags, frdnn_desc rg)
{
    frdnn_desc t = fr_cudnn_gb_new(b, FRDNN_TENSOR_DESCRIPTOR, "cudnnBackendCreateDescriptor(TENSOR)");
    const int64_t align = 16;
    const bool yes = true;
    SET(t, TENSOR_DATA_TYPE, DATA_TYPE, 1, &dtype);
    SET(t, TENSOR_DIMENSIONS, INT64, 4, s->d);
    SET(t, TENSOR_STRIDES, INT64, 4, s->s);
    SET(t, TENSOR_UNIQUE_ID, INT64, 1, &uid);
    SET(t, TENSOR_BYTE_ALIGNMENT, INT64, 1, &align);
    if (flags & T_VIRTUAL) SET(t, TENSOR_IS_VIRTUAL, BOOLEAN, 1, &yes);
    if (flags & T_BY_VALUE) SET(t, TENSOR_IS_BY_VALUE, BOOLEAN, 1, &yes);
    if (rg) SETD(t, TENSOR_RAGGED_OFFSET_DESC, rg);
    fr_cudnn_gb_fin(b, t, "cudnnBackendFinalize(TENSOR)");
    return b->failed ? NULL : t;
}

static frdnn_desc tensor(gb *b, int64_t uid, int dtype, const shp *s, int flags)
{
    return tensor_rg(b, uid, dtype, s, flags, NULL);
}

/* The ragged offsets of a tensor: int64 [slots + 1, 1, 1, 1], in elements. */
static frdnn_desc offsets(gb *b, int64_t uid, int64_t slots)
{
    const shp s = shape(slots + 1, 1, 1, 1, (const int64_t[4]){1, 1, 1, 1});
    return tensor(b, uid, FRDNN_DATA_INT64, &s, 0);
}

/* A virtual (intermediate) tensor. */
static frdnn_desc vt(gb *b, int dtype, const shp *s) { return tensor(b, b->next_uid++, dtype, s, T_VIRTUAL); }

/* The ragged offsets of a problem's tensors (all NULL when it is not ragged). */
typedef struct ragged {
    frdnn_desc q, k, v, o, stats, acc;
} ragged;

static ragged ragged_of(gb *b, const fr_cudnn_sdpa *p)
{
    ragged r = {0};
    if (!p->ragged) return r;
    r.q = offsets(b, UID_OFF_Q, p->b), r.k = offsets(b, UID_OFF_K, p->b), r.v = offsets(b, UID_OFF_V, p->b);
    r.o = offsets(b, UID_OFF_O, p->b), r.stats = offsets(b, UID_OFF_STATS, p->b);
    if (p->backward && !p->deterministic) r.acc = offsets(b, UID_OFF_ACC, p->b);
    return r;
}

/* A scalar passed by value (host pointer in the variant pack): dims and strides all 1. */
static frdnn_desc scalar(gb *b, int64_t uid, int dtype)
{
    const shp one = packed(1, 1, 1, 1);
    return tensor(b, uid, dtype, &one, T_BY_VALUE);
}

/* c = a b over the last two dims (batch dims broadcast: K/V heads shared by a query group);
 * m/n/k: optional int32 [b, 1, 1, 1] tensors that bound the GEMM's extents per batch. */
static void op_matmul(gb *b, frdnn_desc a, frdnn_desc bm, frdnn_desc c, frdnn_desc m, frdnn_desc n, frdnn_desc k)
{
    frdnn_desc md = fr_cudnn_gb_new(b, FRDNN_MATMUL_DESCRIPTOR, "cudnnBackendCreateDescriptor(MATMUL)");
    const int comp = FRDNN_DATA_FLOAT;
    SET(md, MATMUL_COMP_TYPE, DATA_TYPE, 1, &comp);
    fr_cudnn_gb_fin(b, md, "cudnnBackendFinalize(MATMUL)");
    frdnn_desc op =
        fr_cudnn_gb_new(b, FRDNN_OPERATION_MATMUL_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATION_MATMUL)");
    SETD(op, OPERATION_MATMUL_ADESC, a);
    SETD(op, OPERATION_MATMUL_BDESC, bm);
    SETD(op, OPERATION_MATMUL_CDESC, c);
    SETD(op, OPERATION_MATMUL_DESC, md);
    if (m) SETD(op, OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m);
    if (n) SETD(op, OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n);
    if (k) SETD(op, OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k);
    add_op(b, op, "cudnnBackendFinalize(OPERATION_MATMUL)");
}

/* y = mode(x[, bx][, t]) computed in `prec`; axis: GEN_INDEX's dimension (else unused). */
static void op_pw(gb *b, int mode, int prec, frdnn_desc x, frdnn_desc bx, frdnn_desc t, frdnn_desc y, int64_t axis)
{
    frdnn_desc pw = fr_cudnn_gb_new(b, FRDNN_POINTWISE_DESCRIPTOR, "cudnnBackendCreateDescriptor(POINTWISE)");
    SET(pw, POINTWISE_MODE, POINTWISE_MODE, 1, &mode);
    SET(pw, POINTWISE_MATH_PREC, DATA_TYPE, 1, &prec);
    if (mode == FRDNN_POINTWISE_GEN_INDEX) SET(pw, POINTWISE_AXIS, INT64, 1, &axis);
    fr_cudnn_gb_fin(b, pw, "cudnnBackendFinalize(POINTWISE)");
    frdnn_desc op =
        fr_cudnn_gb_new(b, FRDNN_OPERATION_POINTWISE_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATION_POINTWISE)");
    SETD(op, OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    SETD(op, OPERATION_POINTWISE_XDESC, x);
    SETD(op, OPERATION_POINTWISE_YDESC, y);
    if (bx) SETD(op, OPERATION_POINTWISE_BDESC, bx);
    if (t) SETD(op, OPERATION_POINTWISE_TDESC, t);
    add_op(b, op, "cudnnBackendFinalize(OPERATION_POINTWISE)");
}

/* dx = the backward of an activation `mode` (TANH_BWD: dy (1 - tanh^2 x)), in float32. */
static void op_pw_bwd(gb *b, int mode, frdnn_desc dy, frdnn_desc x, frdnn_desc dx)
{
    frdnn_desc pw = fr_cudnn_gb_new(b, FRDNN_POINTWISE_DESCRIPTOR, "cudnnBackendCreateDescriptor(POINTWISE)");
    const int prec = FRDNN_DATA_FLOAT;
    SET(pw, POINTWISE_MODE, POINTWISE_MODE, 1, &mode);
    SET(pw, POINTWISE_MATH_PREC, DATA_TYPE, 1, &prec);
    fr_cudnn_gb_fin(b, pw, "cudnnBackendFinalize(POINTWISE)");
    frdnn_desc op =
        fr_cudnn_gb_new(b, FRDNN_OPERATION_POINTWISE_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATION_POINTWISE)");
    SETD(op, OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    SETD(op, OPERATION_POINTWISE_XDESC, x);
    SETD(op, OPERATION_POINTWISE_DYDESC, dy);
    SETD(op, OPERATION_POINTWISE_DXDESC, dx);
    add_op(b, op, "cudnnBackendFinalize(OPERATION_POINTWISE)");
}

/* Float32 pointwise ops, the common case. */
static void pw(gb *b, int mode, frdnn_desc x, frdnn_desc bx, frdnn_desc y)
{
    op_pw(b, mode, FRDNN_DATA_FLOAT, x, bx, NULL, y, 0);
}

/* y = reduction of x over the dims where y has extent 1 (float32). */
static void op_reduce(gb *b, int mode, frdnn_desc x, frdnn_desc y)
{
    frdnn_desc rd = fr_cudnn_gb_new(b, FRDNN_REDUCTION_DESCRIPTOR, "cudnnBackendCreateDescriptor(REDUCTION)");
    const int comp = FRDNN_DATA_FLOAT;
    SET(rd, REDUCTION_COMP_TYPE, DATA_TYPE, 1, &comp);
    SET(rd, REDUCTION_OPERATOR, REDUCTION_OPERATOR_TYPE, 1, &mode);
    fr_cudnn_gb_fin(b, rd, "cudnnBackendFinalize(REDUCTION)");
    frdnn_desc op =
        fr_cudnn_gb_new(b, FRDNN_OPERATION_REDUCTION_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATION_REDUCTION)");
    SETD(op, OPERATION_REDUCTION_DESC, rd);
    SETD(op, OPERATION_REDUCTION_XDESC, x);
    SETD(op, OPERATION_REDUCTION_YDESC, y);
    add_op(b, op, "cudnnBackendFinalize(OPERATION_REDUCTION)");
}

/* y: x seen through other dims/strides (a transposed view, no data moved). */
static void op_reshape(gb *b, frdnn_desc x, frdnn_desc y)
{
    frdnn_desc op =
        fr_cudnn_gb_new(b, FRDNN_OPERATION_RESHAPE_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATION_RESHAPE)");
    SETD(op, OPERATION_RESHAPE_XDESC, x);
    SETD(op, OPERATION_RESHAPE_YDESC, y);
    add_op(b, op, "cudnnBackendFinalize(OPERATION_RESHAPE)");
}

/* Scores x [b, h, tq, tk] with key j > query i set to neg_inf: row and column indices
 * (GEN_INDEX, int32), row >= col (CMP_GE), BINARY_SELECT(x, neg_inf, keep) - the causal mask
 * as cudnn-frontend's diagonal band (right bound 0, top-left) writes it for cuDNN < 9.21. */
static frdnn_desc causal_mask(gb *b, frdnn_desc x, const shp *s, frdnn_desc neg_inf)
{
    frdnn_desc row = vt(b, FRDNN_DATA_INT32, s), col = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    frdnn_desc keep = vt(b, FRDNN_DATA_BOOLEAN, s);
    op_pw(b, FRDNN_POINTWISE_CMP_GE, FRDNN_DATA_BOOLEAN, row, col, NULL, keep, 0);
    frdnn_desc y = vt(b, FRDNN_DATA_FLOAT, s);
    op_pw(b, FRDNN_POINTWISE_BINARY_SELECT, FRDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    return y;
}

/* Scores outside [0, seq_q) x [0, seq_kv) set to neg_inf (cudnn-frontend's padding mask). The
 * backward uses it with the full lengths on cuDNN <= 9.15.0 when tk is not a multiple of 128,
 * as cudnn-frontend does to avoid a bug there. */
static frdnn_desc padding_mask(gb *b, frdnn_desc x, const shp *s, frdnn_desc seq_q, frdnn_desc seq_kv,
                               frdnn_desc neg_inf)
{
    frdnn_desc row = vt(b, FRDNN_DATA_INT32, s), col = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_INT32, x, NULL, NULL, row, 2);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_INT32, x, NULL, NULL, col, 3);
    frdnn_desc in_q = vt(b, FRDNN_DATA_BOOLEAN, s), in_kv = vt(b, FRDNN_DATA_BOOLEAN, s);
    op_pw(b, FRDNN_POINTWISE_CMP_LT, FRDNN_DATA_BOOLEAN, row, seq_q, NULL, in_q, 0);
    op_pw(b, FRDNN_POINTWISE_CMP_LT, FRDNN_DATA_BOOLEAN, col, seq_kv, NULL, in_kv, 0);
    frdnn_desc keep = vt(b, FRDNN_DATA_BOOLEAN, s);
    op_pw(b, FRDNN_POINTWISE_LOGICAL_AND, FRDNN_DATA_BOOLEAN, in_q, in_kv, NULL, keep, 0);
    frdnn_desc y = vt(b, FRDNN_DATA_FLOAT, s);
    op_pw(b, FRDNN_POINTWISE_BINARY_SELECT, FRDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    return y;
}

/* Scores x with key j masked for query i when i - j >= window (the window scalar, float by
 * value): keep where col + window > row, the left bound of cudnn-frontend's diagonal band
 * (top-left aligned), its own GEN_INDEX pair as there. */
static frdnn_desc window_mask(gb *b, frdnn_desc x, const shp *s, frdnn_desc window, frdnn_desc neg_inf)
{
    frdnn_desc row = vt(b, FRDNN_DATA_INT32, s), col = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    frdnn_desc far = vt(b, FRDNN_DATA_FLOAT, s);
    op_pw(b, FRDNN_POINTWISE_ADD, FRDNN_DATA_FLOAT, col, window, NULL, far, 0);
    frdnn_desc keep = vt(b, FRDNN_DATA_BOOLEAN, s);
    op_pw(b, FRDNN_POINTWISE_CMP_GT, FRDNN_DATA_BOOLEAN, far, row, NULL, keep, 0);
    frdnn_desc y = vt(b, FRDNN_DATA_FLOAT, s);
    op_pw(b, FRDNN_POINTWISE_BINARY_SELECT, FRDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    return y;
}

/* Scores x with key j masked for query i unless their segment ids agree (a document mask as
 * cudnn-frontend's flexible-graph tests write it): the column index compared with itself gives
 * ones of the scores' shape, which times seg_q [b, 1, tq, 1] and seg_kv [b, 1, 1, tk] broadcast
 * the ids over rows and columns; CMP_EQ of the two selects. */
static frdnn_desc segment_mask(gb *b, frdnn_desc x, const shp *s, frdnn_desc seg_q, frdnn_desc seg_kv,
                               frdnn_desc neg_inf)
{
    frdnn_desc col = vt(b, FRDNN_DATA_INT32, s), ones = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_GEN_INDEX, FRDNN_DATA_INT32, x, NULL, NULL, col, 3);
    op_pw(b, FRDNN_POINTWISE_CMP_LE, FRDNN_DATA_FLOAT, col, col, NULL, ones, 0);
    frdnn_desc rows = vt(b, FRDNN_DATA_INT32, s), cols = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_MUL, FRDNN_DATA_FLOAT, ones, seg_q, NULL, rows, 0);
    op_pw(b, FRDNN_POINTWISE_MUL, FRDNN_DATA_FLOAT, ones, seg_kv, NULL, cols, 0);
    frdnn_desc keep = vt(b, FRDNN_DATA_INT32, s);
    op_pw(b, FRDNN_POINTWISE_CMP_EQ, FRDNN_DATA_FLOAT, rows, cols, NULL, keep, 0);
    frdnn_desc y = vt(b, FRDNN_DATA_FLOAT, s);
    op_pw(b, FRDNN_POINTWISE_BINARY_SELECT, FRDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    return y;
}

/* The segment id tensors of p. */
static void seg_tensors(gb *b, const fr_cudnn_sdpa *p, frdnn_desc *seg_q, frdnn_desc *seg_kv)
{
    const shp q = shape(p->b, 1, p->tq, 1, (const int64_t[4]){p->tq, p->tq, 1, 1});
    const shp k = shape(p->b, 1, 1, p->tk, (const int64_t[4]){p->tk, p->tk, p->tk, 1});
    *seg_q = tensor(b, UID_SEG_Q, FRDNN_DATA_INT32, &q, 0);
    *seg_kv = tensor(b, UID_SEG_KV, FRDNN_DATA_INT32, &k, 0);
}

/* c tanh(x / c) (Gemma2's logit softcapping) as cudnn-frontend's Softcap score modifier writes
 * it: DIV, TANH_FWD, MUL; *inner gets x / c, which the backward's derivative reads. */
static frdnn_desc softcap_fwd(gb *b, frdnn_desc x, const shp *s, frdnn_desc cap, frdnn_desc *inner)
{
    frdnn_desc u = vt(b, FRDNN_DATA_FLOAT, s), t = vt(b, FRDNN_DATA_FLOAT, s), y = vt(b, FRDNN_DATA_FLOAT, s);
    pw(b, FRDNN_POINTWISE_DIV, x, cap, u);
    pw(b, FRDNN_POINTWISE_TANH_FWD, u, NULL, t);
    pw(b, FRDNN_POINTWISE_MUL, t, cap, y);
    *inner = u;
    return y;
}

/* dS through the cap: (dS c) (1 - tanh^2(x / c)) / c, the modifier's backward (MUL, TANH_BWD,
 * DIV: the engines match that pattern; the c's cancel). */
static frdnn_desc softcap_bwd(gb *b, frdnn_desc ds, const shp *s, frdnn_desc cap, frdnn_desc inner)
{
    frdnn_desc m = vt(b, FRDNN_DATA_FLOAT, s), d = vt(b, FRDNN_DATA_FLOAT, s), y = vt(b, FRDNN_DATA_FLOAT, s);
    pw(b, FRDNN_POINTWISE_MUL, ds, cap, m);
    op_pw_bwd(b, FRDNN_POINTWISE_TANH_BWD, m, inner, d);
    pw(b, FRDNN_POINTWISE_DIV, d, cap, y);
    return y;
}

static int io_type(const fr_cudnn_sdpa *p) { return p->half ? FRDNN_DATA_HALF : FRDNN_DATA_BFLOAT16; }

/* The shapes both graphs use. */
typedef struct shapes {
    shp q, kt, v, o, scores, rows, one;
    shp stats, acc; /* Stats (and the row sums) and the dQ accumulator, non-virtual */
    shp vt, k;      /* the backward's views: V^T of V, K of K^T (dK's layout) */
    shp tr;         /* the scores transposed, [b, hq, tk, tq]: P^T and dS^T */
} shapes;

static shapes shapes_of(const fr_cudnn_sdpa *p)
{
    shapes s;
    const int64_t kt[4] = {p->sk[0], p->sk[1], p->sk[3], p->sk[2]}; /* K^T: a view of K */
    s.q = shape(p->b, p->hq, p->tq, p->d, p->sq);
    s.kt = shape(p->b, p->hk, p->d, p->tk, kt);
    s.v = shape(p->b, p->hk, p->tk, p->dv, p->sv);
    s.o = shape(p->b, p->hq, p->tq, p->dv, p->so);
    s.scores = packed(p->b, p->hq, p->tq, p->tk);
    s.rows = packed(p->b, p->hq, p->tq, 1); /* Stats: [b, hq, tq] float32, contiguous */
    s.one = packed(1, 1, 1, 1);
    s.stats = s.rows;
    s.acc = packed(p->b, p->hq, p->tq, p->d);
    s.vt = shape(p->b, p->hk, p->dv, p->tk, (const int64_t[4]){p->sv[0], p->sv[1], p->sv[3], p->sv[2]});
    s.k = shape(p->b, p->hk, p->tk, p->d, p->sk);
    s.tr = shape(p->b, p->hq, p->tk, p->tq, (const int64_t[4]){p->hq * p->tq * p->tk, p->tq * p->tk, 1, p->tk});
    if (p->ragged) { /* token-major, as each sequence's offsets address them */
        s.stats = shape(p->b, p->hq, p->tq, 1, (const int64_t[4]){p->hq * p->tq, 1, p->hq, 1});
        s.acc = shape(p->b, p->hq, p->tq, p->d, (const int64_t[4]){p->hq * p->tq * p->d, p->d, p->hq * p->d, 1});
    }
    return s;
}

/* The lengths [b, 1, 1, 1] int32 of the padding mask (the caller's or the workaround's). */
static void seq_tensors(gb *b, const fr_cudnn_sdpa *p, frdnn_desc *seq_q, frdnn_desc *seq_kv)
{
    const shp seq = shape(p->b, 1, 1, 1, (const int64_t[4]){1, 1, 1, 1});
    *seq_q = tensor(b, UID_SEQ_Q, FRDNN_DATA_INT32, &seq, 0);
    *seq_kv = tensor(b, UID_SEQ_KV, FRDNN_DATA_INT32, &seq, 0);
}

/* The masks after the scale, in cudnn-frontend's order: [softcap], [padding]; the causal and
 * window bounds come after the backward's subtraction of Stats, so they are separate. */
static frdnn_desc causal_window(gb *b, const fr_cudnn_sdpa *p, frdnn_desc x, const shp *s, frdnn_desc neg_inf)
{
    if (p->causal) x = causal_mask(b, x, s, neg_inf);
    if (p->window > 0) x = window_mask(b, x, s, scalar(b, UID_WINDOW, FRDNN_DATA_FLOAT), neg_inf);
    return x;
}

/* The softmax of scores x as a new tensor of type p_type, with its statistics written to
 * stats: max, SUB, EXP, sum, LOG, ADD (Stats = max + log(sum exp(x - max))), then DIV. */
static frdnn_desc softmax_stats(gb *b, frdnn_desc x, const shapes *s, frdnn_desc stats, int p_type)
{
    const int f32 = FRDNN_DATA_FLOAT;
    frdnn_desc mx = vt(b, f32, &s->rows), xm = vt(b, f32, &s->scores), e = vt(b, f32, &s->scores);
    op_reduce(b, FRDNN_REDUCE_TENSOR_MAX, x, mx);
    pw(b, FRDNN_POINTWISE_SUB, x, mx, xm);
    pw(b, FRDNN_POINTWISE_EXP, xm, NULL, e);
    frdnn_desc sum = vt(b, f32, &s->rows), lg = vt(b, f32, &s->rows);
    op_reduce(b, FRDNN_REDUCE_TENSOR_ADD, e, sum);
    pw(b, FRDNN_POINTWISE_LOG, sum, NULL, lg);
    pw(b, FRDNN_POINTWISE_ADD, mx, lg, stats);
    frdnn_desc P = vt(b, p_type, &s->scores);
    pw(b, FRDNN_POINTWISE_DIV, e, sum, P);
    return P;
}

/* Forward: O = softmax(mask(softcap(scale Q K^T))) V and Stats = the rows' log-sum-exp. */
static void graph_fwd(gb *b, const fr_cudnn_sdpa *p)
{
    const shapes s = shapes_of(p);
    const int io = io_type(p), f32 = FRDNN_DATA_FLOAT;
    const ragged rg = ragged_of(b, p);
    frdnn_desc Q = tensor_rg(b, UID_Q, io, &s.q, 0, rg.q), KT = tensor_rg(b, UID_K, io, &s.kt, 0, rg.k);
    frdnn_desc V = tensor_rg(b, UID_V, io, &s.v, 0, rg.v), O = tensor_rg(b, UID_O, io, &s.o, 0, rg.o);
    frdnn_desc stats = tensor_rg(b, UID_STATS, f32, &s.stats, 0, rg.stats), scale = scalar(b, UID_SCALE, f32);
    frdnn_desc seq_q = NULL, seq_kv = NULL;
    if (p->padded) seq_tensors(b, p, &seq_q, &seq_kv);
    frdnn_desc neg_inf = p->causal || p->padded || p->segments ? scalar(b, UID_NEG_INF, f32) : NULL;
    frdnn_desc seg_q = NULL, seg_kv = NULL;
    if (p->segments) seg_tensors(b, p, &seg_q, &seg_kv);

    frdnn_desc qk = vt(b, f32, &s.scores), x = vt(b, f32, &s.scores), inner = NULL;
    op_matmul(b, Q, KT, qk, seq_q, seq_kv, NULL);
    pw(b, FRDNN_POINTWISE_MUL, qk, scale, x);
    if (p->softcap > 0) x = softcap_fwd(b, x, &s.scores, scalar(b, UID_SOFTCAP, f32), &inner);
    if (p->padded) x = padding_mask(b, x, &s.scores, seq_q, seq_kv, neg_inf);
    if (p->segments) x = segment_mask(b, x, &s.scores, seg_q, seg_kv, neg_inf);
    x = causal_window(b, p, x, &s.scores, neg_inf);
    /* the second GEMM's A operand is in the I/O type */
    op_matmul(b, softmax_stats(b, x, &s, stats, io), V, O, seq_q, NULL, seq_kv);
}

/* d = dims of one of the gradients when K/V heads are shared: the GEMM gives per-query-head
 * results [b, hq, tk, n] that a reduction sums into [b, hk, tk, n]. */
static void grad_kv(gb *b, const fr_cudnn_sdpa *p, frdnn_desc a, frdnn_desc bm, frdnn_desc out, int64_t n,
                    frdnn_desc seq_q, frdnn_desc seq_kv)
{
    if (p->hq == p->hk) {
        op_matmul(b, a, bm, out, seq_kv, NULL, seq_q);
        return;
    }
    const shp full = packed(p->b, p->hq, p->tk, n);
    frdnn_desc per_head = vt(b, io_type(p), &full);
    op_matmul(b, a, bm, per_head, seq_kv, NULL, seq_q);
    op_reduce(b, FRDNN_REDUCE_TENSOR_ADD, per_head, out);
}

/* sum_d dO O per row, [b, hq, tq, 1] float32: the start of both backwards (the product's strides
 * as cudnn-frontend gives them). */
static frdnn_desc row_sums(gb *b, const fr_cudnn_sdpa *p, const shapes *s, frdnn_desc dO, frdnn_desc O)
{
    const int64_t dd_st[4] = {p->hq * p->tq * p->dv, p->tq * p->dv, p->hq * p->dv, 1};
    const shp dd_shape = shape(p->b, p->hq, p->tq, p->dv, dd_st);
    frdnn_desc dd = vt(b, FRDNN_DATA_FLOAT, &dd_shape), rsum = vt(b, FRDNN_DATA_FLOAT, &s->rows);
    pw(b, FRDNN_POINTWISE_MUL, dO, O, dd);
    op_reduce(b, FRDNN_REDUCE_TENSOR_ADD, dd, rsum);
    return rsum;
}

/* Backward from O, Stats and dO (cudnn-frontend's SDPA backward without dropout or bias). */
static void graph_bwd(gb *b, const fr_cudnn_sdpa *p, int pad, size_t version)
{
    const shapes s = shapes_of(p);
    const int io = io_type(p), f32 = FRDNN_DATA_FLOAT;
    const ragged rg = ragged_of(b, p);
    frdnn_desc Q = tensor_rg(b, UID_Q, io, &s.q, 0, rg.q), KT = tensor_rg(b, UID_K, io, &s.kt, 0, rg.k);
    frdnn_desc VT = tensor_rg(b, UID_V, io, &s.vt, 0, rg.v), O = tensor_rg(b, UID_O, io, &s.o, 0, rg.o);
    frdnn_desc stats = tensor_rg(b, UID_STATS, f32, &s.stats, 0, rg.stats);
    frdnn_desc dO = tensor_rg(b, UID_DO, io, &s.o, 0, rg.o);
    frdnn_desc dQ = tensor_rg(b, UID_DQ, io, &s.q, 0, rg.q), dK = tensor_rg(b, UID_DK, io, &s.k, 0, rg.k);
    frdnn_desc dV = tensor_rg(b, UID_DV, io, &s.v, 0, rg.v);
    frdnn_desc scale = scalar(b, UID_SCALE, f32), one = scalar(b, UID_ONE, f32);
    frdnn_desc neg_inf = p->causal || pad || p->segments ? scalar(b, UID_NEG_INF, f32) : NULL;
    frdnn_desc seg_q = NULL, seg_kv = NULL;
    if (p->segments) seg_tensors(b, p, &seg_q, &seg_kv);
    frdnn_desc sum = tensor_rg(b, UID_SUM, f32, &s.stats, 0, rg.stats);
    frdnn_desc seq_q = NULL, seq_kv = NULL, cap = NULL, inner = NULL;
    if (pad) seq_tensors(b, p, &seq_q, &seq_kv);
    if (p->softcap > 0) cap = scalar(b, UID_SOFTCAP, f32);

    /* softmax_sum = sum_d dO * O (times 1: the dropout scale the pattern expects) */
    pw(b, FRDNN_POINTWISE_MUL, row_sums(b, p, &s, dO, O), one, sum);

    /* P = exp(scale Q K^T - Stats), masked */
    frdnn_desc qk = vt(b, f32, &s.scores), x = vt(b, f32, &s.scores);
    op_matmul(b, Q, KT, qk, seq_q, seq_kv, NULL);
    pw(b, FRDNN_POINTWISE_MUL, qk, scale, x);
    if (cap) x = softcap_fwd(b, x, &s.scores, cap, &inner);
    if (pad) x = padding_mask(b, x, &s.scores, seq_q, seq_kv, neg_inf);
    if (p->segments) x = segment_mask(b, x, &s.scores, seg_q, seg_kv, neg_inf);
    frdnn_desc xs = vt(b, f32, &s.scores);
    pw(b, FRDNN_POINTWISE_SUB, x, stats, xs);
    if (pad && version >= 90000 && version < 91000) /* cudnn-frontend masks again there */
        xs = padding_mask(b, xs, &s.scores, seq_q, seq_kv, neg_inf);
    xs = causal_window(b, p, xs, &s.scores, neg_inf);
    frdnn_desc P = vt(b, f32, &s.scores);
    pw(b, FRDNN_POINTWISE_EXP, xs, NULL, P);

    /* dV = P^T dO */
    frdnn_desc PT = vt(b, io, &s.tr);
    op_reshape(b, P, PT);
    grad_kv(b, p, PT, dO, dV, p->dv, seq_q, seq_kv);

    /* dS = P (dO V^T - softmax_sum) scale */
    frdnn_desc dP = vt(b, f32, &s.scores), d1 = vt(b, f32, &s.scores), d2 = vt(b, f32, &s.scores);
    frdnn_desc dS = vt(b, f32, &s.scores);
    op_matmul(b, dO, VT, dP, seq_q, seq_kv, NULL);
    pw(b, FRDNN_POINTWISE_SUB, dP, sum, d1);
    pw(b, FRDNN_POINTWISE_MUL, d1, P, d2);
    if (cap) d2 = softcap_bwd(b, d2, &s.scores, cap, inner);
    pw(b, FRDNN_POINTWISE_MUL, d2, scale, dS);

    /* dK = dS^T Q */
    frdnn_desc dST = vt(b, io, &s.tr);
    op_reshape(b, dS, dST);
    grad_kv(b, p, dST, Q, dK, p->d, seq_q, seq_kv);

    /* dQ = dS K: through the float32 accumulator, or (deterministic) written directly */
    frdnn_desc K = tensor_rg(b, b->next_uid++, f32, &s.k, T_VIRTUAL, rg.k); /* K's offsets, as K's view */
    op_reshape(b, KT, K);
    if (p->deterministic) {
        op_matmul(b, dS, K, dQ, seq_q, NULL, seq_kv);
        return;
    }
    frdnn_desc dq_acc = tensor_rg(b, UID_DQ_ACC, f32, &s.acc, 0, rg.acc);
    op_matmul(b, dS, K, dq_acc, seq_q, NULL, seq_kv);
    pw(b, FRDNN_POINTWISE_IDENTITY, dq_acc, NULL, dQ);
}

/* ---------------------------------------------------------------- FP8 ---- */

/* A float32 [1, 1, 1, 1] in device memory: a descale, a scale or an amax. */
static frdnn_desc dev1(gb *b, int64_t uid)
{
    const shp one = packed(1, 1, 1, 1);
    return tensor(b, uid, FRDNN_DATA_FLOAT, &one, 0);
}

/* x k as a new float32 tensor of shape s. */
static frdnn_desc times(gb *b, frdnn_desc x, frdnn_desc k, const shp *s)
{
    frdnn_desc y = vt(b, FRDNN_DATA_FLOAT, s);
    pw(b, FRDNN_POINTWISE_MUL, x, k, y);
    return y;
}

/* cudnn-frontend's FP8 matmul: r = da db (a b), the GEMM's [b, hq, ..] summed into c's K/V
 * heads first where they are fewer (grouped); c = sc r in c's format and amax = max |r| (the
 * amax is of the product before its scale). full: the GEMM's shape, cs: c's, packed. */
static void matmul_fp8(gb *b, frdnn_desc a, frdnn_desc bm, const shp *full, const shp *cs, int grouped, frdnn_desc da,
                       frdnn_desc db, frdnn_desc sc, frdnn_desc c, frdnn_desc amax)
{
    frdnn_desc x = vt(b, FRDNN_DATA_FLOAT, full);
    op_matmul(b, a, bm, x, NULL, NULL, NULL);
    if (grouped) {
        frdnn_desc heads = vt(b, FRDNN_DATA_FLOAT, cs);
        op_reduce(b, FRDNN_REDUCE_TENSOR_ADD, x, heads);
        x = heads;
    }
    frdnn_desc r = times(b, times(b, x, da, cs), db, cs);
    pw(b, FRDNN_POINTWISE_MUL, r, sc, c);
    op_reduce(b, FRDNN_REDUCE_TENSOR_AMAX, r, amax);
}

/* scale descale_q descale_k Q K^T, causal-masked where p is: the scores both FP8 graphs start
 * from (the descales after the softmax scale, as cudnn-frontend orders them). */
static frdnn_desc scores_fp8(gb *b, const fr_cudnn_sdpa *p, const shapes *s, frdnn_desc Q, frdnn_desc KT,
                             frdnn_desc scale, frdnn_desc dq, frdnn_desc dk)
{
    frdnn_desc x = vt(b, FRDNN_DATA_FLOAT, &s->scores);
    op_matmul(b, Q, KT, x, NULL, NULL, NULL);
    x = times(b, times(b, times(b, x, scale, &s->scores), dq, &s->scores), dk, &s->scores);
    return p->causal ? causal_mask(b, x, &s->scores, scalar(b, UID_NEG_INF, FRDNN_DATA_FLOAT)) : x;
}

/* Forward in FP8: P = softmax(scores) (Stats as in bf16), amax_s = max P, P in E4M3 by
 * scale_s, O = descale_s descale_v P V in E4M3 by scale_o with amax_o. */
static void graph_fwd_fp8(gb *b, const fr_cudnn_sdpa *p)
{
    const shapes s = shapes_of(p);
    const int e4 = FRDNN_DATA_FP8_E4M3, f32 = FRDNN_DATA_FLOAT;
    frdnn_desc Q = tensor(b, UID_Q, e4, &s.q, 0), KT = tensor(b, UID_K, e4, &s.kt, 0);
    const int ot = p->fp8_bf16_io ? FRDNN_DATA_BFLOAT16 : e4;
    frdnn_desc V = tensor(b, UID_V, e4, &s.v, 0), O = tensor(b, UID_O, ot, &s.o, 0);
    frdnn_desc stats = tensor(b, UID_STATS, f32, &s.stats, 0), scale = scalar(b, UID_SCALE, f32);
    frdnn_desc x = scores_fp8(b, p, &s, Q, KT, scale, dev1(b, UID_DESCALE_Q), dev1(b, UID_DESCALE_K));
    frdnn_desc P = softmax_stats(b, x, &s, stats, f32), P8 = vt(b, e4, &s.scores);
    op_reduce(b, FRDNN_REDUCE_TENSOR_AMAX, P, dev1(b, UID_AMAX_S));
    pw(b, FRDNN_POINTWISE_MUL, P, dev1(b, UID_SCALE_S), P8);
    const shp o = packed(p->b, p->hq, p->tq, p->dv);
    matmul_fp8(b, P8, V, &o, &o, 0, dev1(b, UID_DESCALE_S), dev1(b, UID_DESCALE_V), dev1(b, UID_SCALE_O), O,
               dev1(b, UID_AMAX_O));
}

/* Backward in FP8 (cudnn-frontend's FP8 SDPA backward, per-tensor scales): E = exp(scores -
 * Stats) and its E4M3 codes by scale_s; dV = P^T dO; dS = scale (dO V^T - descaled sum_d dO O) E
 * in E5M2 by scale_dp (amax_dp); dQ = dS K, dK = dS^T Q; each gradient E5M2 with its amax. */
static void graph_bwd_fp8(gb *b, const fr_cudnn_sdpa *p)
{
    const shapes s = shapes_of(p);
    const int e4 = FRDNN_DATA_FP8_E4M3, e5 = FRDNN_DATA_FP8_E5M2, f32 = FRDNN_DATA_FLOAT;
    frdnn_desc Q = tensor(b, UID_Q, e4, &s.q, 0), KT = tensor(b, UID_K, e4, &s.kt, 0);
    const int ot = p->fp8_bf16_io ? FRDNN_DATA_BFLOAT16 : e4, gt = p->fp8_bf16_io ? FRDNN_DATA_BFLOAT16 : e5;
    frdnn_desc VT = tensor(b, UID_V, e4, &s.vt, 0), O = tensor(b, UID_O, ot, &s.o, 0);
    frdnn_desc stats = tensor(b, UID_STATS, f32, &s.stats, 0), dO = tensor(b, UID_DO, e5, &s.o, 0);
    frdnn_desc dQ = tensor(b, UID_DQ, gt, &s.q, 0), dK = tensor(b, UID_DK, gt, &s.k, 0);
    frdnn_desc dV = tensor(b, UID_DV, gt, &s.v, 0), scale = scalar(b, UID_SCALE, f32);
    frdnn_desc d_q = dev1(b, UID_DESCALE_Q), d_k = dev1(b, UID_DESCALE_K), d_do = dev1(b, UID_DESCALE_DO);
    frdnn_desc d_dp = dev1(b, UID_DESCALE_DP);
    const int grouped = p->hq != p->hk;

    /* softmax_sum = descale_dO descale_O sum_d dO O */
    frdnn_desc sum = times(b, times(b, row_sums(b, p, &s, dO, O), d_do, &s.rows), dev1(b, UID_DESCALE_O), &s.rows);

    /* E = exp(scores - Stats); dV = descale_s descale_dO (scale_s E)^T dO */
    frdnn_desc x = scores_fp8(b, p, &s, Q, KT, scale, d_q, d_k), xs = vt(b, f32, &s.scores);
    frdnn_desc E = vt(b, f32, &s.scores), E8 = vt(b, e4, &s.scores);
    pw(b, FRDNN_POINTWISE_SUB, x, stats, xs);
    pw(b, FRDNN_POINTWISE_EXP, xs, NULL, E);
    pw(b, FRDNN_POINTWISE_MUL, E, dev1(b, UID_SCALE_S), E8);
    frdnn_desc ET = vt(b, e4, &s.tr);
    op_reshape(b, E8, ET);
    const shp fv = packed(p->b, p->hq, p->tk, p->dv), rv = packed(p->b, p->hk, p->tk, p->dv);
    matmul_fp8(b, ET, dO, &fv, &rv, grouped, dev1(b, UID_DESCALE_S), d_do, dev1(b, UID_SCALE_DV), dV,
               dev1(b, UID_AMAX_DV));

    /* dS = scale (descale_dO descale_V dO V^T - softmax_sum) E, its E5M2 codes by scale_dp */
    frdnn_desc dp = vt(b, f32, &s.scores), d1 = vt(b, f32, &s.scores), d2 = vt(b, f32, &s.scores);
    op_matmul(b, dO, VT, dp, NULL, NULL, NULL);
    dp = times(b, times(b, dp, d_do, &s.scores), dev1(b, UID_DESCALE_V), &s.scores);
    pw(b, FRDNN_POINTWISE_SUB, dp, sum, d1);
    pw(b, FRDNN_POINTWISE_MUL, d1, E, d2);
    frdnn_desc dS = times(b, d2, scale, &s.scores), dS8 = vt(b, e5, &s.scores);
    op_reduce(b, FRDNN_REDUCE_TENSOR_AMAX, dS, dev1(b, UID_AMAX_DP));
    pw(b, FRDNN_POINTWISE_MUL, dS, dev1(b, UID_SCALE_DP), dS8);

    /* dQ = descale_dp descale_k dS K; dK = descale_dp descale_q dS^T Q */
    frdnn_desc K = tensor(b, b->next_uid++, e4, &s.k, T_VIRTUAL);
    op_reshape(b, KT, K);
    const shp fq = packed(p->b, p->hq, p->tq, p->d);
    matmul_fp8(b, dS8, K, &fq, &fq, 0, d_dp, d_k, dev1(b, UID_SCALE_DQ), dQ, dev1(b, UID_AMAX_DQ));
    frdnn_desc dST = vt(b, e5, &s.tr);
    op_reshape(b, dS8, dST);
    const shp fk = packed(p->b, p->hq, p->tk, p->d), rk = packed(p->b, p->hk, p->tk, p->d);
    matmul_fp8(b, dST, Q, &fk, &rk, grouped, d_dp, d_q, dev1(b, UID_SCALE_DK), dK, dev1(b, UID_AMAX_DK));
}

int fr_cudnn_needs_padding(const fr_cudnn_sdpa *p, size_t version)
{
    return p->backward && !p->fp8 && !p->padded && p->tk % 128 != 0 && version <= 91500;
}

void fr_cudnn_graph(gb *b, const fr_cudnn_sdpa *p, size_t version)
{
    b->next_uid = UID_VIRTUAL;
    if (p->fp8)
        p->backward ? graph_bwd_fp8(b, p) : graph_fwd_fp8(b, p);
    else if (p->backward)
        graph_bwd(b, p, p->padded || fr_cudnn_needs_padding(p, version), version);
    else
        graph_fwd(b, p);
}
