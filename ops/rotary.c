/* Fused rotary embedding on the CPU: Rotary and RotaryGrad as ops/rotary.h specifies. Each
 * element is computed in double from its float inputs and rounded once. */
#include <string.h>

#include "ops/grad.h"
#include "ops/rotary.h"

/* ---- geometry (shared with the CUDA launchers) ---- */

/* cos or sin: one dtype with X, broadcasting to X's rotated columns (xd: X's shape, its last
 * dim rotary_dim) without enlarging them. */
static fr_status check_table(const fr_node *n, const fr_value *x, const int64_t *xd, const fr_value *t)
{
    char s1[128], s2[128];
    if (t->dtype != x->dtype)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "inputs '%s' (%s) and '%s' (%s) must share one dtype", x->name,
                             fr_dtype_name(x->dtype), t->name, fr_dtype_name(t->dtype));
    int ok = t->rank <= x->rank;
    for (int k = 0; ok && k < t->rank; k++) {
        int64_t td = t->dims[t->rank - 1 - k], d = xd[x->rank - 1 - k];
        ok = td == d || td == 1;
    }
    if (!ok)
        return fr_node_error(n, FR_ERR_SHAPE, "table '%s' %s does not broadcast to '%s' %s%s (it may not enlarge it)",
                             t->name, fr_shape_str(t->rank, t->dims, s1, sizeof s1), x->name,
                             fr_shape_str(x->rank, xd, s2, sizeof s2),
                             xd[x->rank - 1] != x->dims[x->rank - 1] ? " (its rotated columns)" : "");
    return FR_OK;
}

fr_status fr_rotary_geometry(const fr_graph *g, const fr_node *n, fr_rotary_geom *geo)
{
    memset(geo, 0, sizeof *geo);
    if (n->n_inputs != 3)
        return fr_node_error(n, FR_ERR_GRAPH, "takes (X, cos, sin), got %d inputs", n->n_inputs);
    for (int i = 0; i < 3; i++)
        if (n->inputs[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_value *x = &g->values[n->inputs[0]], *c = &g->values[n->inputs[1]], *s = &g->values[n->inputs[2]];
    char s1[128];
    if (x->dtype != FR_F32 && x->dtype != FR_F64)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input '%s' is %s: float32 (or float64) only", x->name,
                             fr_dtype_name(x->dtype));
    if (x->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "input '%s' is a scalar", x->name);
    const int64_t hd = x->dims[x->rank - 1];
    int64_t rd;
    FR_TRY(fr_node_attr_int(n, "rotary_dim", hd, &rd));
    if (!fr_node_attr(n, "rotary_dim") && hd % 2)
        return fr_node_error(n, FR_ERR_SHAPE, "input '%s' %s: its last dim (the head size) must be even", x->name,
                             fr_shape_str(x->rank, x->dims, s1, sizeof s1));
    if (rd < 2 || rd > hd || rd % 2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute rotary_dim=%lld: even, from 2 to the head size %lld",
                             (long long)rd, (long long)hd);
    int64_t xr[FR_MAX_RANK]; /* the rotated columns' shape, what the tables broadcast to */
    memcpy(xr, x->dims, sizeof(int64_t) * (size_t)x->rank);
    xr[x->rank - 1] = rd;
    FR_TRY(check_table(n, x, xr, c));
    FR_TRY(check_table(n, x, xr, s));
    int64_t cst[FR_MAX_RANK], sst[FR_MAX_RANK];
    fr_broadcast_strides(c->rank, c->dims, x->rank, xr, cst);
    fr_broadcast_strides(s->rank, s->dims, x->rank, xr, sst);
    int64_t il;
    FR_TRY(fr_node_attr_int(n, "interleaved", 0, &il));
    if (il != 0 && il != 1) return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute interleaved=%lld (0 or 1)", (long long)il);
    geo->interleaved = (int)il;
    const int r = x->rank;
    geo->hd = hd;
    geo->rd = rd;
    geo->cos_last = cst[r - 1];
    geo->sin_last = sst[r - 1];
    geo->rows = 1;
    /* row dims from the innermost out: drop size-1 dims, merge a dim into the inner one when
       both tables step over it as one longer dim */
    int64_t d[FR_MAX_RANK], cs[FR_MAX_RANK], ss[FR_MAX_RANK];
    int nd = 0;
    for (int k = r - 2; k >= 0; k--) {
        const int64_t xd = x->dims[k];
        geo->rows *= xd;
        if (xd == 1) continue;
        if (nd > 0 && cst[k] == cs[nd - 1] * d[nd - 1] && sst[k] == ss[nd - 1] * d[nd - 1]) {
            d[nd - 1] *= xd;
            continue;
        }
        d[nd] = xd;
        cs[nd] = cst[k];
        ss[nd] = sst[k];
        nd++;
    }
    geo->nd = nd;
    for (int k = 0; k < nd; k++) { /* outermost first */
        geo->dims[k] = d[nd - 1 - k];
        geo->cos_stride[k] = cs[nd - 1 - k];
        geo->sin_stride[k] = ss[nd - 1 - k];
    }
    return FR_OK;
}

/* Offsets of row r's cos and sin rows. */
static void row_offsets(const fr_rotary_geom *geo, int64_t r, int64_t *co, int64_t *so)
{
    int64_t c = 0, s = 0;
    for (int k = geo->nd - 1; k >= 0; k--) {
        const int64_t i = r % geo->dims[k];
        r /= geo->dims[k];
        c += i * geo->cos_stride[k];
        s += i * geo->sin_stride[k];
    }
    *co = c;
    *so = s;
}

/* grad = 0: Y from X; grad = 1: dX from dY (the formulas of rotary.h). */
#define ROTARY_RUN(T)                                                                   \
    do {                                                                                \
        const T *xp = ctx->in[0]->data, *cp = ctx->in[1]->data, *sp = ctx->in[2]->data; \
        T *yp = ctx->out[0]->data;                                                      \
        const int64_t h = geo.rd / 2, cl = geo.cos_last, sl = geo.sin_last;             \
        const int64_t step = geo.interleaved ? 2 : 1, off = geo.interleaved ? 1 : h;    \
        for (int64_t r = 0; r < geo.rows; r++) {                                        \
            int64_t co, so;                                                             \
            row_offsets(&geo, r, &co, &so);                                             \
            const T *xr = xp + r * geo.hd, *cr = cp + co, *sr = sp + so;                \
            T *yr = yp + r * geo.hd;                                                    \
            for (int64_t p = 0; p < h; p++) {                                           \
                const int64_t j = p * step, k = j + off; /* the pair's two columns */   \
                const double a = xr[j], b = xr[k];                                      \
                const double c0 = cr[j * cl], c1 = cr[k * cl];                          \
                const double s0 = sr[j * sl], s1 = sr[k * sl];                          \
                if (grad) {                                                             \
                    yr[j] = (T)(a * c0 + b * s1);                                       \
                    yr[k] = (T)(b * c1 - a * s0);                                       \
                } else {                                                                \
                    yr[j] = (T)(a * c0 - b * s0);                                       \
                    yr[k] = (T)(b * c1 + a * s1);                                       \
                }                                                                       \
            }                                                                           \
            for (int64_t j = geo.rd; j < geo.hd; j++) yr[j] = xr[j]; /* not rotated */ \
        }                                                                               \
    } while (0)

static fr_status rotary_run(const fr_kernel_ctx *ctx, int grad)
{
    const fr_node *n = ctx->node;
    fr_rotary_geom geo;
    FR_TRY(fr_rotary_geometry(ctx->g, n, &geo));
    const fr_value *x = &ctx->g->values[n->inputs[0]];
    FR_TRY(fr_check_out(n, ctx->out[0], x->dtype, x->rank, x->dims));
    if (x->dtype == FR_F32)
        ROTARY_RUN(float);
    else
        ROTARY_RUN(double);
    return FR_OK;
}

static fr_status rotary_cpu(const fr_kernel_ctx *ctx) { return rotary_run(ctx, 0); }
static fr_status rotaryg_cpu(const fr_kernel_ctx *ctx) { return rotary_run(ctx, 1); }

static fr_status rotary_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 3, 3));
    if (n->n_outputs != 1 || n->outputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs one output");
    fr_rotary_geom geo;
    FR_TRY(fr_rotary_geometry(g, n, &geo));
    fr_infer_same(g, n, 0, 0);
    return FR_OK;
}

/* dX = RotaryGrad(dY, cos, sin); the tables get no gradient (see rotary.h). */
static fr_status rotary_grad(fr_grad_ctx *ctx)
{
    fr_graph *g = ctx->g;
    const fr_node *n = &g->nodes[ctx->node_id];
    for (int i = 1; i < 3; i++)
        if (ctx->need_din[i])
            return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                 "no gradient with respect to the rotary table '%s' (input %d): Rotary treats cos "
                                 "and sin as constants (freeze what they are computed from with --freeze, or, "
                                 "for a RoPE the trainer fused, train it unfused with --no-fuse-attention)",
                                 g->values[n->inputs[i]].name, i);
    if (ctx->dout[0] < 0 || !ctx->need_din[0]) return FR_OK;
    int in[3] = {ctx->dout[0], n->inputs[1], n->inputs[2]}, out, nid;
    int64_t il, rd;
    FR_TRY(fr_node_attr_int(n, "interleaved", 0, &il));
    FR_TRY(fr_node_attr_int(n, "rotary_dim", 0, &rd));
    FR_TRY(fr_grad_node(ctx, "RotaryGrad", FR_DOMAIN_FP8RUN, 3, in, 1, &out, &nid));
    if (il) FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "interleaved", il));
    if (rd) FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "rotary_dim", rd));
    ctx->din[0] = out;
    return fr_grad_finish(ctx, nid);
}

const fr_op_def fr_ops_rotary[] = {
    {"Rotary", FR_DOMAIN_FP8RUN, 1, rotary_infer, rotary_cpu, rotary_grad, 0},
    {"RotaryGrad", FR_DOMAIN_FP8RUN, 1, rotary_infer, rotaryg_cpu, NULL, 0},
    {0},
};
