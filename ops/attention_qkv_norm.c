/* The q/k RMSNorm of AttentionQKV (ops/attention_qkv.h): its geometry, shared with the CUDA
 * launchers, and the CPU reference.
 *
 * Why a separate step on the CPU: the op is defined as the unfused chain (RMSNormalization on
 * the Q and K heads, then RoPE, then Attention), so the CPU normalizes a copy of X's Q and K
 * columns with RMSNormalization's own arithmetic (ops/norm.c: the row's mean square in double,
 * y = (x * inv * w) rounded once) and hands that copy to the unnormalized op; the backward
 * takes the unnormalized op's gradient for that copy and applies RMSNormGrad's formulas
 * (dx = inv (g - xh mean(g xh)), g = dy w, xh = x inv; dw = sum dy xh in row order). Bit for
 * bit the chain it replaces. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_qkv.h"

fr_status fr_attn_qkv_norm_geometry(const fr_node *n, int rq, const int64_t *dq, int rk, const int64_t *dk,
                                    fr_attn_qkv_geom *geo)
{
    geo->qk_norm = 0;
    geo->qn_len = geo->kn_len = 0;
    if (!dq && !dk) return FR_OK;
    if (!dq || !dk) return fr_node_error(n, FR_ERR_GRAPH, "q_norm and k_norm come together or not at all");
    if (geo->heads_packing || (geo->rotary && geo->rd < geo->D))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "the q/k norm takes packing \"sections\" and a whole rotary only "
                             "(here %s%s)", geo->heads_packing ? "packing \"heads\"" : "",
                             geo->rotary && geo->rd < geo->D ? " a partial rotary" : "");
    FR_TRY(fr_node_attr_float(n, "qk_norm_eps", 1e-6f, &geo->qk_norm_eps));
    if (!(geo->qk_norm_eps >= 0.f))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "qk_norm_eps=%g must be >= 0", (double)geo->qk_norm_eps);
    const int r[2] = {rq, rk};
    const int64_t *d[2] = {dq, dk}, heads[2] = {geo->Hq, geo->Hk};
    int64_t len[2];
    for (int s = 0; s < 2; s++) {
        int64_t numel = 1;
        for (int k = 0; k < r[s]; k++) numel *= d[s][k];
        /* one weight of the head dim (every head normalized alone) or of the section's width
           (each token's heads normalized together, OLMo2's full-width form) */
        const int ok = r[s] >= 1 && d[s][r[s] - 1] == numel && (numel == geo->D || numel == heads[s] * geo->D);
        if (!ok) {
            char s1[128];
            return fr_node_error(n, FR_ERR_SHAPE, "%s %s must be [%lld] (per head) or [%lld] (full width)",
                                 s ? "k_norm" : "q_norm", fr_shape_str(r[s], d[s], s1, sizeof s1), (long long)geo->D,
                                 (long long)(heads[s] * geo->D));
        }
        len[s] = numel;
    }
    geo->qk_norm = 1;
    geo->qn_len = len[0], geo->kn_len = len[1];
    return FR_OK;
}

static double get(fr_dtype dt, const void *p, int64_t i)
{
    return dt == FR_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

static void put(fr_dtype dt, void *p, int64_t i, double v)
{
    if (dt == FR_F32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

/* 1 / sqrt(mean(x^2) + eps) of the row at base, as ops/norm.c's row_stats computes it. */
static double row_inv(fr_dtype dt, const void *x, int64_t base, int64_t len, float eps)
{
    double var = 0.0;
    for (int64_t j = 0; j < len; j++) {
        const double v = get(dt, x, base + j) - 0.0;
        var += v * v;
    }
    var /= (double)len;
    return 1.0 / sqrt(var + (double)eps);
}

void fr_attn_qkv_norm_cpu(const fr_attn_qkv_geom *g, fr_dtype dt, const void *x, const void *wq, const void *wk,
                          void *xn)
{
    memcpy(xn, x, (size_t)(g->B * g->T * g->W) * fr_dtype_size(dt));
    for (int s = 0; s < 2; s++) {
        const int64_t len = s ? g->kn_len : g->qn_len, off = s ? g->k_off : g->q_off;
        const int64_t rows = (s ? g->Hk : g->Hq) * g->D / len;
        const void *w = s ? wk : wq;
        for (int64_t bt = 0; bt < g->B * g->T; bt++)
            for (int64_t r = 0; r < rows; r++) {
                const int64_t base = bt * g->W + off + r * len;
                const double inv = row_inv(dt, x, base, len, g->qk_norm_eps);
                for (int64_t j = 0; j < len; j++) put(dt, xn, base + j, get(dt, x, base + j) * inv * get(dt, w, j));
            }
    }
}

fr_status fr_attn_qkv_norm_grad_cpu(const fr_node *n, const fr_attn_qkv_geom *g, fr_dtype dt, const void *x,
                                    const void *wq, const void *wk, void *dx, void *dwq, void *dwk)
{
    const int64_t most = g->qn_len > g->kn_len ? g->qn_len : g->kn_len;
    double *acc = fr_calloc((size_t)most, sizeof(double), "q/k norm weight gradient");
    if (!acc) return fr_node_error(n, FR_ERR_OOM, "no memory for the q/k norm weight gradient");
    for (int s = 0; s < 2; s++) {
        const int64_t len = s ? g->kn_len : g->qn_len, off = s ? g->k_off : g->q_off;
        const int64_t rows = (s ? g->Hk : g->Hq) * g->D / len;
        const void *w = s ? wk : wq;
        memset(acc, 0, (size_t)len * sizeof(double));
        for (int64_t bt = 0; bt < g->B * g->T; bt++)
            for (int64_t r = 0; r < rows; r++) {
                const int64_t base = bt * g->W + off + r * len;
                const double inv = row_inv(dt, x, base, len, g->qk_norm_eps);
                double sgx = 0.0;
                for (int64_t j = 0; j < len; j++) {
                    const double xh = get(dt, x, base + j) * inv, gy = get(dt, dx, base + j);
                    sgx += gy * get(dt, w, j) * xh;
                    acc[j] += gy * xh;
                }
                const double mgx = sgx / (double)len;
                for (int64_t j = 0; j < len; j++) { /* in place: element j reads only its own dy */
                    const double xh = get(dt, x, base + j) * inv;
                    const double gj = get(dt, dx, base + j) * get(dt, w, j);
                    put(dt, dx, base + j, inv * (gj - 0.0 - xh * mgx));
                }
            }
        void *dw = s ? dwk : dwq;
        if (dw)
            for (int64_t j = 0; j < len; j++) put(dt, dw, j, acc[j]);
    }
    free(acc);
    return FR_OK;
}
