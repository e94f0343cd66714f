/* AttentionQKV / AttentionQKVGrad on the CPU (ops/attention_qkv.h): the packed projection is
 * unpacked into [B, heads, T, D] copies with RoPE applied (each element in double, rounded
 * once, as ops/rotary.c computes it), the Attention / AttentionGrad CPU kernels run on them,
 * and the results are packed back (dQ, dK through RotaryGrad's formulas). The op is thereby
 * the unfused chain it replaces, bit for bit. bfloat16 tensors (X; O and dO of the backward;
 * O or dX by o_dtype / dx_dtype) go through float32 copies (run_adapted). */
#include <stdlib.h>
#include <string.h>

#include "ops/attention_qkv.h"
#include "ops/attention.h"
#include "ops/grad.h"

/* ---- geometry (shared with the CUDA launchers) ---- */

static fr_status table_stride(const fr_node *n, const char *what, int r, const int64_t *d, const fr_attn_qkv_geom *g,
                              int64_t *bstride)
{
    char s1[128];
    int64_t lead = 1;
    for (int k = 0; k + 2 < r; k++) lead *= d[k];
    if (r < 2 || d[r - 1] != g->rd || d[r - 2] != g->T || (lead != 1 && lead != g->B))
        return fr_node_error(n, FR_ERR_SHAPE, "%s table %s must be [.., T=%lld, rotary_dim=%lld] with leading dims of "
                             "product 1 or B=%lld", what, fr_shape_str(r, d, s1, sizeof s1), (long long)g->T,
                             (long long)g->rd, (long long)g->B);
    *bstride = lead == g->B && g->B > 1 ? g->T * g->rd : 0;
    return FR_OK;
}

fr_status fr_attn_qkv_geometry(const fr_node *n, int rx, const int64_t *dx, int rc, const int64_t *dc, int rs,
                               const int64_t *ds, fr_attn_qkv_geom *geo)
{
    memset(geo, 0, sizeof *geo);
    int64_t hq, hk, d, il, flat;
    FR_TRY(fr_node_attr_int(n, "heads", 0, &hq));
    FR_TRY(fr_node_attr_int(n, "kv_heads", 0, &hk));
    FR_TRY(fr_node_attr_int(n, "head_dim", 0, &d));
    FR_TRY(fr_node_attr_int(n, "interleaved", 0, &il));
    FR_TRY(fr_node_attr_int(n, "flat_output", 0, &flat));
    if (flat != 0 && flat != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "flat_output=%lld (0 or 1)", (long long)flat);
    if (hq < 1 || hk < 1 || hq % hk || d < 1 || (il != 0 && il != 1))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "heads=%lld, kv_heads=%lld, head_dim=%lld, interleaved=%lld: heads "
                             "must be a multiple of kv_heads >= 1, head_dim >= 1, interleaved 0 or 1",
                             (long long)hq, (long long)hk, (long long)d, (long long)il);
    const char *packing;
    FR_TRY(fr_node_attr_string(n, "packing", "sections", &packing));
    const int by_head = strcmp(packing, "heads") == 0;
    if (!by_head && strcmp(packing, "sections") != 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "packing '%s' (\"sections\" or \"heads\")", packing);
    char s1[128];
    if (by_head) { /* [B, T, H, (q | k | v)] */
        if (hq != hk)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "packing \"heads\" needs heads == kv_heads (%lld, %lld)",
                                 (long long)hq, (long long)hk);
        if (rx != 3 || dx[2] % hq || dx[2] / hq <= 2 * d)
            return fr_node_error(n, FR_ERR_SHAPE, "X %s must be [B, T, %lld * (2 * %lld + Dv)] (packing \"heads\")",
                                 fr_shape_str(rx, dx, s1, sizeof s1), (long long)hq, (long long)d);
    } else if (rx != 3 || dx[2] <= (hq + hk) * d || (dx[2] - (hq + hk) * d) % hk) {
        return fr_node_error(n, FR_ERR_SHAPE, "X %s must be [B, T, %lld * %lld + %lld * (%lld + Dv)]",
                             fr_shape_str(rx, dx, s1, sizeof s1), (long long)hq, (long long)d, (long long)hk,
                             (long long)d);
    }
    geo->B = dx[0], geo->T = dx[1], geo->W = dx[2];
    geo->Hq = hq, geo->Hk = hk, geo->D = d;
    geo->heads_packing = by_head;
    if (by_head) {
        const int64_t per = dx[2] / hq; /* one head's q, k and v */
        geo->Dv = per - 2 * d;
        geo->q_off = 0, geo->k_off = d, geo->v_off = 2 * d;
        geo->q_hs = geo->k_hs = geo->v_hs = per;
    } else {
        geo->Dv = (dx[2] - (hq + hk) * d) / hk;
        geo->q_off = 0, geo->k_off = hq * d, geo->v_off = (hq + hk) * d;
        geo->q_hs = geo->k_hs = d, geo->v_hs = geo->Dv;
    }
    geo->interleaved = (int)il;
    geo->flat_output = (int)flat;
    geo->rd = d;
    if ((dc != NULL) != (ds != NULL)) return fr_node_error(n, FR_ERR_GRAPH, "cos and sin come together or not at all");
    if (!dc) return FR_OK;
    FR_TRY(fr_node_attr_int(n, "rotary_dim", d, &geo->rd));
    if (geo->rd < 2 || geo->rd > d || geo->rd % 2)
        return fr_node_error(n, FR_ERR_SHAPE, "RoPE rotates an even number of features, from 2 to head_dim=%lld "
                             "(rotary_dim=%lld)", (long long)d, (long long)geo->rd);
    geo->rotary = 1;
    FR_TRY(table_stride(n, "cos", rc, dc, geo, &geo->cos_b));
    return table_stride(n, "sin", rs, ds, geo, &geo->sin_b);
}

int fr_attn_qkv_inner_dims(const fr_attn_qkv_geom *geo, int which, int64_t *dims)
{
    const int64_t G = geo->Hq / geo->Hk;
    dims[0] = geo->B, dims[1] = geo->Hk, dims[2] = which == 0 || which >= 3 ? G : 1, dims[3] = geo->T;
    if (which == 4) return 4;
    dims[4] = which == 2 || which == 3 ? geo->Dv : geo->D;
    return 5;
}

int fr_attn_qkv_out_dims(const fr_attn_qkv_geom *geo, int64_t *dims)
{
    if (geo->flat_output) {
        dims[0] = geo->B * geo->T, dims[1] = geo->Hq * geo->Dv;
        return 2;
    }
    dims[0] = geo->B, dims[1] = geo->T, dims[2] = geo->Hq * geo->Dv;
    return 3;
}

/* ---- CPU kernels ---- */

/* One head row: y = RoPE(x) (grad 0) or RoPE^T(x) (grad 1), pairs as ops/rotary.h. */
#define ROPE_ROW(TY, x, c, s, y, D, il, grad)                                              \
    do {                                                                                  \
        const int64_t h_ = (D) / 2, step_ = (il) ? 2 : 1, off_ = (il) ? 1 : h_;          \
        for (int64_t p = 0; p < h_; p++) {                                                \
            const int64_t j = p * step_, k = j + off_;                                    \
            const double a = (x)[j], b = (x)[k], c0 = (c)[j], c1 = (c)[k], s0 = (s)[j], s1 = (s)[k]; \
            if (grad) {                                                                   \
                (y)[j] = (TY)(a * c0 + b * s1);                                            \
                (y)[k] = (TY)(b * c1 - a * s0);                                            \
            } else {                                                                      \
                (y)[j] = (TY)(a * c0 - b * s0);                                            \
                (y)[k] = (TY)(b * c1 + a * s1);                                            \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* Between the packed rows (X or dX, [B, T, W]) and the head-major copies [B, heads, T, D]:
 * to_heads 1 unpacks (RoPE forward on the first rd features of Q, K), 0 packs (RoPE transposed
 * on dQ, dK). sec 0, 1, 2:
 * Q, K, V; p: the packed tensor, h: the head-major one. */
#define MOVE(TY)                                                                                             \
    do {                                                                                                    \
        TY *P = p;                                                                                           \
        TY *Hh = h;                                                                                          \
        const TY *C = cs, *S = sn;                                                                           \
        for (int64_t b = 0; b < g->B; b++)                                                                  \
            for (int64_t t = 0; t < g->T; t++)                                                              \
                for (int64_t hd = 0; hd < heads; hd++) {                                                    \
                    TY *pr = P + (b * g->T + t) * g->W + off + hd * hs;                                      \
                    TY *hr = Hh + ((b * heads + hd) * g->T + t) * width;                                     \
                    int64_t done = 0; /* features rotated: the first rd */                                  \
                    if (rope) {                                                                             \
                        const TY *cr = C + b * g->cos_b + t * g->rd, *sr = S + b * g->sin_b + t * g->rd;     \
                        if (to_heads)                                                                       \
                            ROPE_ROW(TY, pr, cr, sr, hr, g->rd, g->interleaved, 0);                          \
                        else                                                                                \
                            ROPE_ROW(TY, hr, cr, sr, pr, g->rd, g->interleaved, 1);                          \
                        done = g->rd;                                                                       \
                    }                                                                                       \
                    if (to_heads)                                                                           \
                        memcpy(hr + done, pr + done, (size_t)(width - done) * sizeof(TY));                   \
                    else                                                                                    \
                        memcpy(pr + done, hr + done, (size_t)(width - done) * sizeof(TY));                   \
                }                                                                                           \
    } while (0)

static void move(const fr_attn_qkv_geom *g, fr_dtype dt, int sec, int to_heads, void *p, void *h, const void *cs,
                 const void *sn)
{
    const int64_t heads = sec == 0 ? g->Hq : g->Hk, width = sec == 2 ? g->Dv : g->D;
    const int64_t off = sec == 0 ? g->q_off : sec == 1 ? g->k_off : g->v_off;
    const int64_t hs = sec == 0 ? g->q_hs : sec == 1 ? g->k_hs : g->v_hs; /* head to head */
    const int rope = g->rotary && sec < 2;
    if (dt == FR_F32)
        MOVE(float);
    else
        MOVE(double);
}

/* O-like tensors between [B, T, Hq * Dv] (p) and [B, Hq, T, Dv] (h). */
static void move_o(const fr_attn_qkv_geom *g, size_t es, int to_heads, void *p, void *h)
{
    const size_t row = (size_t)g->Dv * es;
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t t = 0; t < g->T; t++)
            for (int64_t hd = 0; hd < g->Hq; hd++) {
                char *pr = (char *)p + (size_t)((b * g->T + t) * g->Hq + hd) * row;
                char *hr = (char *)h + (size_t)((b * g->Hq + hd) * g->T + t) * row;
                if (to_heads)
                    memcpy(hr, pr, row);
                else
                    memcpy(pr, hr, row);
            }
}

/* Head-major scratch tensors, shaped for the inner attention (fr_attn_qkv_inner_dims). */
typedef struct scratch {
    fr_tensor t[6]; /* Q, K, V, O, LSE, dO (dQ, dK, dV: the caller's) */
    void *mem;
} scratch;

static fr_status scratch_new(const fr_node *n, const fr_attn_qkv_geom *g, fr_dtype dt, int grad, scratch *s,
                             fr_tensor *dq, fr_tensor *dk, fr_tensor *dv)
{
    memset(s, 0, sizeof *s);
    const size_t es = fr_dtype_size(dt);
    fr_tensor *all[8] = {&s->t[0], &s->t[1], &s->t[2], &s->t[3], &s->t[4], &s->t[5], dq, dk};
    const int which[8] = {0, 1, 2, 3, 4, 3, 0, 1};
    const int count = grad ? 9 : 5;
    size_t off[9], total = 0;
    for (int i = 0; i < count; i++) {
        fr_tensor *t = i < 8 ? all[i] : dv;
        const int w = i < 8 ? which[i] : 2;
        memset(t, 0, sizeof *t);
        t->dtype = dt;
        t->rank = fr_attn_qkv_inner_dims(g, w, t->dims);
        t->nbytes = (size_t)fr_tensor_numel(t) * es;
        off[i] = total;
        total += (t->nbytes + 63) / 64 * 64;
    }
    if (!(s->mem = fr_malloc(total ? total : 1, "AttentionQKV scratch")))
        return fr_node_error(n, FR_ERR_OOM, "no memory for %zu bytes of head-major copies", total);
    for (int i = 0; i < count; i++) (i < 8 ? all[i] : dv)->data = (char *)s->mem + off[i];
    return FR_OK;
}

fr_dtype fr_attn_qkv_dtype(fr_dtype x) { return x == FR_BF16 ? FR_F32 : x; }

/* X's dtype and the tables' (the computing dtype, fr_attn_qkv_dtype) */
static fr_status check_dtypes(const fr_node *n, fr_dtype x, const fr_dtype *c, const fr_dtype *s)
{
    if (x != FR_F32 && x != FR_F64 && x != FR_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "X is %s: float32, bfloat16 (or float64) only", fr_dtype_name(x));
    const fr_dtype want = fr_attn_qkv_dtype(x);
    if ((c && *c != want) || (s && *s != want))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "the tables must be %s (X is %s)", fr_dtype_name(want),
                             fr_dtype_name(x));
    return FR_OK;
}

static fr_status read_geo(const fr_node *n, const fr_tensor *x, const fr_tensor *c, const fr_tensor *s,
                          fr_attn_qkv_geom *g)
{
    FR_TRY(check_dtypes(n, x->dtype, c ? &c->dtype : NULL, s ? &s->dtype : NULL));
    return fr_attn_qkv_geometry(n, x->rank, x->dims, c ? c->rank : 0, c ? c->dims : NULL, s ? s->rank : 0,
                                s ? s->dims : NULL, g);
}

/* The dtype written for attribute attr (o_dtype, dx_dtype: "float32", the default, or
 * "bfloat16") when the op computes in dt: dt itself, or bfloat16 (only from float32). */
fr_status fr_attn_qkv_out_dtype(const fr_node *n, const char *attr, fr_dtype dt, fr_dtype *out)
{
    int bf16;
    FR_TRY(fr_attr_bf16(n, attr, &bf16));
    if (!bf16) {
        *out = dt;
        return FR_OK;
    }
    if (dt != FR_F32)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%s bfloat16 needs a float32 computation (X float32 or "
                             "bfloat16; it computes in %s)", attr, fr_dtype_name(dt));
    *out = FR_BF16;
    return FR_OK;
}

int fr_attn_qkv_in_ok(fr_dtype dt, fr_dtype v) { return v == dt || (dt == FR_F32 && v == FR_BF16); }

/* A float32 stand-in for a bfloat16 tensor t (same shape): widened exactly (widen 1) or
 * uninitialized (an output, rounded back by the caller). */
static fr_status f32_copy(const fr_node *n, const fr_tensor *t, int widen, fr_tensor *w)
{
    *w = *t;
    const int64_t numel = fr_tensor_numel(t);
    w->dtype = FR_F32;
    w->nbytes = (size_t)numel * sizeof(float);
    if (!(w->data = fr_malloc(w->nbytes ? w->nbytes : 1, "AttentionQKV float32 copy")))
        return fr_node_error(n, FR_ERR_OOM, "no memory for %zu bytes of a float32 copy of a bfloat16 tensor",
                             w->nbytes);
    if (widen)
        for (int64_t i = 0; i < numel; i++) ((float *)w->data)[i] = fr_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return FR_OK;
}

/* The op with its bfloat16 tensors (X; O and dO of the backward; O or dX written as o_dtype /
 * dx_dtype say) through float32 copies: the inputs widened exactly, so the float32 kernel f
 * computes what it computes for float32 tensors of the same values, and the output rounded to
 * nearest even from that kernel's float32 result. */
static fr_status run_adapted(const fr_kernel_ctx *ctx, int backward, fr_status (*f)(const fr_kernel_ctx *))
{
    const fr_node *n = ctx->node;
    const char *attr = backward ? "dx_dtype" : "o_dtype";
    fr_dtype want;
    FR_TRY(fr_attn_qkv_out_dtype(n, attr, fr_attn_qkv_dtype(ctx->in[0]->dtype), &want));
    fr_tensor *y = ctx->out[0];
    if (y && y->dtype != want)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "output %s is %s, %s says %s", backward ? "dX" : "O",
                             fr_dtype_name(y->dtype), attr, fr_dtype_name(want));
    const int ins[3] = {0, 1, 3};
    const int n_ins = backward ? 3 : 1;
    int adapt = y && want == FR_BF16;
    for (int i = 0; i < n_ins; i++) adapt |= ctx->in[ins[i]]->dtype == FR_BF16;
    if (!adapt) return f(ctx);
    fr_tensor w[4], *in[10], *out[3];
    memset(w, 0, sizeof w);
    for (int i = 0; i < ctx->n_in && i < 10; i++) in[i] = ctx->in[i];
    for (int i = 0; i < ctx->n_out && i < 3; i++) out[i] = ctx->out[i];
    fr_status st = FR_OK;
    for (int i = 0; i < n_ins && st == FR_OK; i++)
        if (ctx->in[ins[i]]->dtype == FR_BF16 && (st = f32_copy(n, ctx->in[ins[i]], 1, &w[i])) == FR_OK)
            in[ins[i]] = &w[i];
    if (st == FR_OK && y && want == FR_BF16 && (st = f32_copy(n, y, 0, &w[3])) == FR_OK) out[0] = &w[3];
    if (st == FR_OK) {
        fr_kernel_ctx wc = *ctx;
        wc.in = in, wc.out = out;
        st = f(&wc);
    }
    if (st == FR_OK && out[0] == &w[3])
        for (int64_t i = 0, numel = fr_tensor_numel(y); i < numel; i++)
            ((uint16_t *)y->data)[i] = fr_f32_to_bf16(((const float *)w[3].data)[i]);
    for (int i = 0; i < 4; i++) free(w[i].data);
    return st;
}

/* Input i of the kernel context, NULL when absent. */
static const fr_tensor *in_at(const fr_kernel_ctx *ctx, int i) { return ctx->n_in > i ? ctx->in[i] : NULL; }

/* The q/k norm weights at inputs i, i + 1 (absent: no norm) into g, checked against the
 * computing dtype dt. */
static fr_status read_norm(const fr_node *n, const fr_kernel_ctx *ctx, int i, fr_dtype dt, fr_attn_qkv_geom *g)
{
    const fr_tensor *wq = in_at(ctx, i), *wk = in_at(ctx, i + 1);
    if ((wq && wq->dtype != dt) || (wk && wk->dtype != dt))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "the q/k norm weights must be %s", fr_dtype_name(dt));
    return fr_attn_qkv_norm_geometry(n, wq ? wq->rank : 0, wq ? wq->dims : NULL, wk ? wk->rank : 0,
                                     wk ? wk->dims : NULL, g);
}

/* A copy of x with its Q and K columns normalized (*xn; free xn->data). */
static fr_status normalized_x(const fr_node *n, const fr_attn_qkv_geom *g, const fr_tensor *x, const fr_tensor *wq,
                              const fr_tensor *wk, fr_tensor *xn)
{
    *xn = *x;
    if (!(xn->data = fr_malloc(x->nbytes ? x->nbytes : 1, "AttentionQKV normalized X")))
        return fr_node_error(n, FR_ERR_OOM, "no memory for %zu bytes of the q/k-normalized X", x->nbytes);
    fr_attn_qkv_norm_cpu(g, x->dtype, x->data, wq->data, wk->data, xn->data);
    return FR_OK;
}

/* The tables cos, sin at inputs i, i + 1 (both NULL: none; omitted inputs may stand before the
 * segment ids). */
static fr_status tables_at(const fr_kernel_ctx *ctx, int i, const fr_tensor **c, const fr_tensor **sn)
{
    *c = ctx->n_in > i + 1 ? ctx->in[i] : NULL;
    *sn = ctx->n_in > i + 1 ? ctx->in[i + 1] : NULL;
    if ((*c != NULL) != (*sn != NULL))
        return fr_node_error(ctx->node, FR_ERR_GRAPH, "cos and sin come together or not at all");
    return FR_OK;
}

/* The op on float32 (or float64) tensors only (run_adapted feeds it). */
static fr_status qkv_core(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0], *c, *sn;
    FR_TRY(tables_at(ctx, 1, &c, &sn));
    fr_attn_qkv_geom g;
    FR_TRY(read_geo(n, x, c, sn, &g));
    const fr_dtype dt = x->dtype;
    FR_TRY(read_norm(n, ctx, FR_ATTN_QKV_QNORM, dt, &g));
    int64_t od[3];
    const int orank = fr_attn_qkv_out_dims(&g, od);
    FR_TRY(fr_check_out(n, ctx->out[0], dt, orank, od));
    fr_tensor *lse = ctx->n_out > 1 ? ctx->out[1] : NULL;
    if (lse) FR_TRY(fr_check_out(n, lse, dt, 3, (int64_t[]){g.B, g.Hq, g.T}));
    fr_tensor xn;
    if (g.qk_norm) {
        FR_TRY(normalized_x(n, &g, x, ctx->in[FR_ATTN_QKV_QNORM], ctx->in[FR_ATTN_QKV_QNORM + 1], &xn));
        x = &xn;
    }
    scratch s;
    fr_tensor unused[3];
    const fr_status sst = scratch_new(n, &g, dt, 0, &s, &unused[0], &unused[1], &unused[2]);
    if (sst != FR_OK) {
        if (g.qk_norm) free(xn.data);
        return sst;
    }
    for (int sec = 0; sec < 3; sec++)
        move(&g, dt, sec, 1, x->data, s.t[sec].data, c ? c->data : NULL, sn ? sn->data : NULL);
    if (g.qk_norm) free(xn.data);
    /* the segment ids (inputs 3, 4) go to the inner Attention's Sk, Sq (its inputs 4, 5) */
    fr_tensor *in[6] = {&s.t[0], &s.t[1], &s.t[2], NULL, ctx->n_in > 3 ? ctx->in[3] : NULL,
                        ctx->n_in > 4 ? ctx->in[4] : NULL};
    fr_tensor *out[2] = {&s.t[3], &s.t[4]};
    fr_kernel_ctx ic = {ctx->g, n, 1, in[5] ? 6 : in[4] ? 5 : 3, 2, in, out};
    fr_status st = fr_ops_attention[0].cpu(&ic); /* Attention: the same attributes */
    if (st == FR_OK) {
        move_o(&g, fr_dtype_size(dt), 0, ctx->out[0]->data, s.t[3].data);
        if (lse && lse->nbytes) memcpy(lse->data, s.t[4].data, lse->nbytes);
    }
    free(s.mem);
    return st;
}

static fr_status qkvg_core(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const fr_tensor *x = ctx->in[0], *o = ctx->in[1], *lse = ctx->in[2], *dout = ctx->in[3], *c, *sn;
    FR_TRY(tables_at(ctx, 4, &c, &sn));
    fr_attn_qkv_geom g;
    FR_TRY(read_geo(n, x, c, sn, &g));
    const fr_dtype dt = x->dtype;
    FR_TRY(read_norm(n, ctx, FR_ATTN_QKV_GRAD_QNORM, dt, &g));
    const fr_tensor *wq = in_at(ctx, FR_ATTN_QKV_GRAD_QNORM), *wk = in_at(ctx, FR_ATTN_QKV_GRAD_QNORM + 1);
    fr_tensor *dw[2] = {ctx->n_out > 1 ? ctx->out[1] : NULL, ctx->n_out > 2 ? ctx->out[2] : NULL};
    if ((dw[0] || dw[1]) && !g.qk_norm)
        return fr_node_error(n, FR_ERR_GRAPH, "outputs dq_norm, dk_norm need inputs q_norm, k_norm");
    if (dw[0]) FR_TRY(fr_check_out(n, dw[0], dt, wq->rank, wq->dims));
    if (dw[1]) FR_TRY(fr_check_out(n, dw[1], dt, wk->rank, wk->dims));
    int64_t od[3];
    const int orank = fr_attn_qkv_out_dims(&g, od);
    FR_TRY(fr_check_out(n, o, dt, orank, od));
    FR_TRY(fr_check_out(n, dout, dt, orank, od));
    FR_TRY(fr_check_out(n, lse, dt, 3, (int64_t[]){g.B, g.Hq, g.T}));
    fr_tensor *dx = ctx->out[0];
    if (!dx) return FR_OK;
    FR_TRY(fr_check_out(n, dx, dt, 3, x->dims));
    const fr_tensor *x0 = x; /* the unnormalized X, for the norm's backward */
    fr_tensor xn;
    if (g.qk_norm) {
        FR_TRY(normalized_x(n, &g, x, wq, wk, &xn));
        x = &xn;
    }
    scratch s;
    fr_tensor dq, dk, dv;
    const fr_status sst = scratch_new(n, &g, dt, 1, &s, &dq, &dk, &dv);
    if (sst != FR_OK) {
        if (g.qk_norm) free(xn.data);
        return sst;
    }
    const void *cd = c ? c->data : NULL, *sd = sn ? sn->data : NULL;
    for (int sec = 0; sec < 3; sec++) move(&g, dt, sec, 1, x->data, s.t[sec].data, cd, sd);
    if (g.qk_norm) free(xn.data);
    const size_t es = fr_dtype_size(dt);
    move_o(&g, es, 1, o->data, s.t[3].data);
    move_o(&g, es, 1, dout->data, s.t[5].data);
    if (lse->nbytes) memcpy(s.t[4].data, lse->data, lse->nbytes);
    /* the segment ids (inputs 6, 7) go to the inner AttentionGrad's Sk, Sq (its inputs 7, 8) */
    fr_tensor *in[9] = {&s.t[0], &s.t[1], &s.t[2], &s.t[3], &s.t[4], &s.t[5], NULL,
                        ctx->n_in > 6 ? ctx->in[6] : NULL, ctx->n_in > 7 ? ctx->in[7] : NULL};
    fr_tensor *out[3] = {&dq, &dk, &dv};
    fr_kernel_ctx ic = {ctx->g, n, 1, in[8] ? 9 : in[7] ? 8 : 6, 3, in, out};
    fr_status st = fr_ops_attention[1].cpu(&ic); /* AttentionGrad */
    if (st == FR_OK) {
        void *hs[3] = {dq.data, dk.data, dv.data};
        for (int sec = 0; sec < 3; sec++) move(&g, dt, sec, 0, dx->data, hs[sec], cd, sd);
        if (g.qk_norm) /* dX holds the gradient for the normalized columns */
            st = fr_attn_qkv_norm_grad_cpu(n, &g, dt, x0->data, wq->data, wk->data, dx->data,
                                           dw[0] ? dw[0]->data : NULL, dw[1] ? dw[1]->data : NULL);
    }
    free(s.mem);
    return st;
}

static fr_status qkv_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 1 || !ctx->in[0] || ctx->n_out < 1 || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs input X and output O");
    if (ctx->n_in > 7)
        return fr_node_error(n, FR_ERR_GRAPH, "%d inputs: X [, cos, sin [, Sk [, Sq [, q_norm, k_norm]]]]", ctx->n_in);
    return run_adapted(ctx, 0, qkv_core);
}

static fr_status qkvg_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    if (ctx->n_in < 4 || ctx->n_out < 1 || ctx->n_out > 3 || !ctx->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs X, O, LSE, dO (and cos, sin) and output dX");
    for (int i = 0; i < 4; i++)
        if (!ctx->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    if (ctx->n_in > 10)
        return fr_node_error(n, FR_ERR_GRAPH, "%d inputs: X, O, LSE, dO [, cos, sin [, Sk [, Sq [, q_norm, k_norm]]]]",
                             ctx->n_in);
    return run_adapted(ctx, 1, qkvg_core);
}

/* ---- inference and the gradient rule ---- */

/* The q/k norm weights at inputs i, i + 1 (absent: none), of the computing dtype dt. */
static fr_status infer_norm(fr_graph *g, const fr_node *n, int i, fr_dtype dt, fr_attn_qkv_geom *geo)
{
    const fr_value *wq = fr_node_in(g, n, i), *wk = fr_node_in(g, n, i + 1);
    if ((wq && wq->dtype != dt) || (wk && wk->dtype != dt))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "the q/k norm weights must be %s", fr_dtype_name(dt));
    return fr_attn_qkv_norm_geometry(n, wq ? wq->rank : 0, wq ? wq->dims : NULL, wk ? wk->rank : 0,
                                     wk ? wk->dims : NULL, geo);
}

/* The segment ids Sk (input idx) and Sq (idx + 1), checked as the inner Attention takes them
 * (Q [B, Hk, G, T, D]: rows B * Hq, B or 1). */
static fr_status infer_segs(fr_graph *g, const fr_node *n, int idx, const fr_attn_qkv_geom *q)
{
    const fr_value *sk = fr_node_in(g, n, idx), *sq = fr_node_in(g, n, idx + 1);
    int64_t dq[5], dk[5], dv[5];
    const int rq = fr_attn_qkv_inner_dims(q, 0, dq), rk = fr_attn_qkv_inner_dims(q, 1, dk);
    fr_attn_qkv_inner_dims(q, 2, dv);
    fr_attn_attrs a;
    fr_attn_geom geo;
    fr_attn_seg sg;
    FR_TRY(fr_attn_read_attrs(n, q->D, &a));
    FR_TRY(fr_attn_geometry(n, rq, dq, rk, dk, rk, dv, a.causal, &geo));
    return fr_attn_seg_geometry(n, &geo, sk ? sk->dtype : FR_I64, sk ? sk->rank : 0, sk ? sk->dims : NULL,
                                sq ? sq->dtype : FR_I64, sq ? sq->rank : 0, sq ? sq->dims : NULL, &sg);
}

static fr_status qkv_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, 7));
    if (n->n_outputs < 1 || n->n_outputs > 2 || n->outputs[0] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "needs output O (and optionally LSE)");
    const fr_value *x = fr_node_in(g, n, 0), *c = fr_node_in(g, n, 1), *s = fr_node_in(g, n, 2);
    FR_TRY(check_dtypes(n, x->dtype, c ? &c->dtype : NULL, s ? &s->dtype : NULL));
    const fr_dtype dt = fr_attn_qkv_dtype(x->dtype);
    fr_attn_qkv_geom geo;
    FR_TRY(fr_attn_qkv_geometry(n, x->rank, x->dims, c ? c->rank : 0, c ? c->dims : NULL, s ? s->rank : 0,
                                s ? s->dims : NULL, &geo));
    fr_attn_attrs a; /* Attention's attributes, checked */
    FR_TRY(fr_attn_read_attrs(n, geo.D, &a));
    if (a.causal && geo.T < 1) return fr_node_error(n, FR_ERR_SHAPE, "T must be >= 1");
    FR_TRY(infer_segs(g, n, 3, &geo));
    FR_TRY(infer_norm(g, n, FR_ATTN_QKV_QNORM, dt, &geo));
    fr_dtype odt;
    FR_TRY(fr_attn_qkv_out_dtype(n, "o_dtype", dt, &odt));
    int64_t od[3];
    const int orank = fr_attn_qkv_out_dims(&geo, od);
    fr_infer_set(g, n, 0, odt, orank, od);
    fr_infer_set(g, n, 1, dt, 3, (int64_t[]){geo.B, geo.Hq, geo.T});
    return FR_OK;
}

static fr_status qkvg_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 4, 10));
    if (n->n_outputs < 1 || n->n_outputs > 3)
        return fr_node_error(n, FR_ERR_GRAPH, "needs output dX (and dq_norm, dk_norm)");
    const fr_value *x = fr_node_in(g, n, 0), *c = fr_node_in(g, n, 4), *s = fr_node_in(g, n, 5);
    FR_TRY(check_dtypes(n, x->dtype, c ? &c->dtype : NULL, s ? &s->dtype : NULL));
    const fr_dtype dt = fr_attn_qkv_dtype(x->dtype); /* LSE's (O's, dO's: or bfloat16) */
    fr_dtype dxt;
    FR_TRY(fr_attn_qkv_out_dtype(n, "dx_dtype", dt, &dxt));
    fr_attn_qkv_geom geo;
    FR_TRY(fr_attn_qkv_geometry(n, x->rank, x->dims, c ? c->rank : 0, c ? c->dims : NULL, s ? s->rank : 0,
                                s ? s->dims : NULL, &geo));
    int64_t od[3];
    const int orank = fr_attn_qkv_out_dims(&geo, od);
    const int64_t ld[3] = {geo.B, geo.Hq, geo.T};
    for (int i = 1; i < 4; i++) {
        const fr_value *v = fr_node_in(g, n, i);
        const int64_t *want = i == 2 ? ld : od;
        const int r = i == 2 ? 3 : orank;
        int same = (i == 2 ? v->dtype == dt : fr_attn_qkv_in_ok(dt, v->dtype)) && v->rank == r;
        for (int d = 0; same && d < r; d++) same = v->dims[d] == want[d];
        if (!same) {
            char s1[128], s2[128];
            return fr_node_error(n, FR_ERR_SHAPE, "input '%s' is %s %s, expected %s%s %s", v->name,
                                 fr_dtype_name(v->dtype), fr_shape_str(v->rank, v->dims, s1, sizeof s1),
                                 fr_dtype_name(dt), i != 2 && dt == FR_F32 ? " (or bfloat16)" : "",
                                 fr_shape_str(r, want, s2, sizeof s2));
        }
    }
    FR_TRY(infer_segs(g, n, 6, &geo));
    FR_TRY(infer_norm(g, n, FR_ATTN_QKV_GRAD_QNORM, dt, &geo));
    if (n->n_outputs > 1 && !geo.qk_norm)
        return fr_node_error(n, FR_ERR_GRAPH, "outputs dq_norm, dk_norm need inputs q_norm, k_norm");
    fr_infer_set(g, n, 0, dxt, x->rank, x->dims);
    for (int o = 1; o < n->n_outputs; o++) {
        const fr_value *w = fr_node_in(g, n, FR_ATTN_QKV_GRAD_QNORM + o - 1);
        fr_infer_set(g, n, o, dt, w->rank, w->dims);
    }
    return FR_OK;
}

/* One AttentionQKVGrad reading X, the forward's O and LSE, dO and the tables. */
static fr_status qkv_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    for (int i = 1; i < n->n_inputs && i < 3; i++) /* (the segment ids, 3 and 4, are integers: no gradient) */
        if (ctx->need_din[i] && n->inputs[i] >= 0)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "no gradient with respect to the rotary table '%s': RoPE "
                                 "treats cos and sin as constants", g->values[n->inputs[i]].name);
    const int qn = FR_ATTN_QKV_QNORM, norm = n->n_inputs > qn + 1 && n->inputs[qn] >= 0;
    const int want_w = norm && (ctx->need_din[qn] || ctx->need_din[qn + 1]);
    if (ctx->dout[0] < 0 || (!ctx->need_din[0] && !want_w)) return FR_OK;
    if (n->n_outputs < 2 || n->outputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "the gradient needs the LSE output (output 1)");
    const int rope = n->n_inputs > 2 && n->inputs[1] >= 0;
    int in[10] = {n->inputs[0], n->outputs[0], n->outputs[1], ctx->dout[0], rope ? n->inputs[1] : -1,
                  rope ? n->inputs[2] : -1, -1, -1, norm ? n->inputs[qn] : -1, norm ? n->inputs[qn + 1] : -1};
    int n_in = norm ? 10 : rope ? 6 : 4;
    for (int i = 3; i < 5; i++) /* Sk, Sq pass through at 6, 7 */
        if (n->n_inputs > i && n->inputs[i] >= 0) {
            in[i + 3] = n->inputs[i];
            if (n_in < i + 4) n_in = i + 4;
        }
    int out[3], nid;
    FR_TRY(fr_grad_node(ctx, "AttentionQKVGrad", FR_DOMAIN_FP8RUN, n_in, in, want_w ? 3 : 1, out, &nid));
    n = &g->nodes[ctx->node_id];
    fr_node *gn = &g->nodes[nid];
    FR_TRY(fr_node_copy_attrs(gn, n)); /* the gradient node reads the forward's attributes */
    /* (dX is always written: the norm weights' gradients come from it) */
    if (ctx->need_din[0]) ctx->din[0] = out[0];
    if (want_w && ctx->need_din[qn]) ctx->din[qn] = out[1];
    if (want_w && ctx->need_din[qn + 1]) ctx->din[qn + 1] = out[2];
    return fr_grad_finish(ctx, nid);
}

const fr_op_def fr_ops_attention_qkv[] = {
    {"AttentionQKV", FR_DOMAIN_FP8RUN, 1, qkv_infer, qkv_cpu, qkv_grad, 0},
    {"AttentionQKVGrad", FR_DOMAIN_FP8RUN, 1, qkvg_infer, qkvg_cpu, NULL, 0},
    {0},
};
