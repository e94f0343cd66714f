/* Linear / LinearGradData / LinearGradWeight: forward and backward in fp32, bf16 and fp8 (each
 * recipe and format) against a reference written here from scratch (its own bf16 rounding, its
 * own fp8 rounding by nearest-code search, its own block amaxes, double-precision GEMMs);
 * padding changes nothing; gradcheck of the fp32 rule in float64; errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/linear.h"
#include "passes/autodiff.h"
#include "graph/fp8_format.h"

/* ---- reference numerics (independent of the library's conversion code paths) ---- */

/* bf16 round-to-nearest-even via frexp: keep 8 significant bits */
static float ref_bf16(float x)
{
    int e;
    double m = frexp((double)x, &e); /* x = m * 2^e, 0.5 <= |m| < 1 */
    return (float)ldexp(nearbyint(m * 256.0) / 256.0, e);
}

/* fp8 saturating round-to-nearest-even by searching the format's codes */
static uint8_t ref_fp8(float v, fr_dtype fmt)
{
    float mx = fmt == FR_F8E4M3 ? 448.0f : 57344.0f;
    uint8_t sign = (signbit(v) ? 0x80 : 0);
    float a = fabsf(v) > mx ? mx : fabsf(v);
    int best = 0;
    double bd = INFINITY;
    int last = fmt == FR_F8E4M3 ? 0x7E : 0x7B;
    for (int c = 0; c <= last; c++) {
        double val = fmt == FR_F8E4M3 ? fr_e4m3_to_f32((uint8_t)c) : fr_e5m2_to_f32((uint8_t)c);
        double d = fabs(val - a);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    return (uint8_t)(sign | best);
}

static float ref_decode(uint8_t c, fr_dtype fmt)
{
    return fmt == FR_F8E4M3 ? fr_e4m3_to_f32(c) : fr_e5m2_to_f32(c);
}

typedef enum { RP_FP32, RP_BF16, RP_FP8 } ref_prec;

/* Values an operand stored as [R][C] contributes: rounded / quantized as the GPU does.
 * br x bc blocks (0 = one per-tensor block), given = delayed scale or NULL (from amax). */
static void ref_operand(const float *x, int64_t R, int64_t C, ref_prec p, fr_dtype fmt, int64_t br,
                        int64_t bc, int margin, const float *given, double *out, uint8_t *codes,
                        float *sinv_grid)
{
    if (br == 0) br = R ? R : 1;
    if (bc == 0) bc = C ? C : 1;
    int64_t gr = (R + br - 1) / br, gc = (C + bc - 1) / bc;
    float *scales = malloc((size_t)(gr * gc + 1) * sizeof(float));
    for (int64_t bi = 0; bi < gr; bi++) /* each block's scale, block by block */
        for (int64_t bj = 0; bj < gc; bj++) {
            float m = 0;
            for (int64_t a = bi * br; a < R && a < (bi + 1) * br; a++)
                for (int64_t b = bj * bc; b < C && b < (bj + 1) * bc; b++) m = fmaxf(m, fabsf(x[a * C + b]));
            float mx = fmt == FR_F8E4M3 ? 448.0f : 57344.0f;
            scales[bi * gc + bj] = given ? *given : m == 0 ? 1.0f : mx / m / (float)ldexp(1.0, margin);
        }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            float v = x[i * C + j];
            if (p == RP_FP32) {
                out[i * C + j] = v;
                continue;
            }
            if (p == RP_BF16) {
                out[i * C + j] = ref_bf16(v);
                continue;
            }
            int64_t bi = i / br, bj = j / bc;
            float scale = scales[bi * gc + bj];
            uint8_t c = ref_fp8(v * scale, fmt);
            float sinv = 1.0f / scale;
            if (codes) codes[i * C + j] = c;
            if (sinv_grid) sinv_grid[bi * gc + bj] = sinv;
            out[i * C + j] = (double)(ref_decode(c, fmt) * sinv);
        }
    free(scales);
}

/* C[M][N] = A[M][K] B[K][N] with A(m,k) = a[m*sa0 + k*sa1], B(k,n) = b[k*sb0 + n*sb1] */
static void ref_gemm(const double *a, int64_t sa0, int64_t sa1, const double *b, int64_t sb0,
                     int64_t sb1, int64_t M, int64_t N, int64_t K, double *c)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += a[m * sa0 + k * sa1] * b[k * sb0 + n * sb1];
            c[m * N + n] = s;
        }
}

/* ---- building one Linear ---- */

typedef struct lcase {
    int rank;
    int64_t lead[3]; /* leading dims of X */
    int64_t K, N;
    int transB, bias;
    const char *prec, *recipe, *fmt;
    int margin;
    int64_t pad;
    int save_xq;
    fr_dtype dt;
} lcase;

typedef struct lgraph {
    fr_graph *g;
    int node;
    int x, w, b, sx, sw, sdy;
    int y, xq, xs, ax, aw;
    int64_t M;
    float scale_x, scale_w, scale_dy;
} lgraph;

static int const_scalar(fr_graph *g, const char *name, float v)
{
    int64_t one = 1;
    int vid;
    fr_tensor *t;
    if (fr_graph_add_value(g, name, &vid) != FR_OK || fr_tensor_new(FR_F32, 1, &one, name, &t) != FR_OK)
        return -1;
    ((float *)t->data)[0] = v;
    fr_value *val = &g->values[vid];
    val->constant = t;
    fr_value_set_shape(val, FR_F32, 1, &one);
    return vid;
}

static int is_delayed_fp8(const lcase *c) { return strcmp(c->prec, "fp8") == 0 && strcmp(c->recipe, "delayed") == 0; }

static float arr_amax(const float *x, int64_t n)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* Builds X, W, B, scales and the Linear node; returns FR_OK. */
static fr_status build(lgraph *L, const lcase *c, fr_rng *r)
{
    memset(L, 0, sizeof *L);
    L->g = fr_gc_new_graph(17);
    fr_graph *g = L->g;
    int64_t xd[4], wd[2] = {c->transB ? c->N : c->K, c->transB ? c->K : c->N};
    L->M = 1;
    for (int i = 0; i < c->rank - 1; i++) {
        xd[i] = c->lead[i];
        L->M *= c->lead[i];
    }
    xd[c->rank - 1] = c->K;
    L->x = fr_gc_add_input(g, r, "X", c->dt, c->rank, xd, NULL);
    L->w = fr_gc_add_input(g, r, "W", c->dt, 2, wd, NULL);
    L->b = c->bias ? fr_gc_add_input(g, r, "B", c->dt, 1, &c->N, NULL) : -1;
    L->sx = L->sw = L->sdy = -1;
    if (is_delayed_fp8(c)) {
        /* X deliberately over-scaled (some values saturate), W under-scaled */
        int64_t nx = L->M * c->K;
        L->scale_x = 448.0f / arr_amax(g->values[L->x].constant->data, nx) * 1.7f;
        L->scale_w = 448.0f / arr_amax(g->values[L->w].constant->data, c->K * c->N) * 0.25f;
        L->scale_dy = 1000.0f;
        if (nx == 0) L->scale_x = 3.0f;
        if (c->K * c->N == 0) L->scale_w = 5.0f;
        L->sx = const_scalar(g, "fp8_state/lin/scale_x", L->scale_x);
        L->sw = const_scalar(g, "fp8_state/lin/scale_w", L->scale_w);
        L->sdy = const_scalar(g, "fp8_state/lin/scale_dy", L->scale_dy);
    }
    int fp8 = strcmp(c->prec, "fp8") == 0, bf16 = strcmp(c->prec, "bf16") == 0;
    FR_TRY(fr_graph_add_value(g, "Y", &L->y));
    L->xq = L->xs = L->ax = L->aw = -1;
    if ((fp8 || bf16) && c->save_xq) FR_TRY(fr_graph_add_value(g, "Xq", &L->xq));
    if (fp8 && c->save_xq) FR_TRY(fr_graph_add_value(g, "Xq_sinv", &L->xs));
    if (fp8) {
        FR_TRY(fr_graph_add_value(g, "fp8_state/lin/amax_x", &L->ax));
        FR_TRY(fr_graph_add_value(g, "fp8_state/lin/amax_w", &L->aw));
    }
    int in[6] = {L->x, L->w, L->b, L->sx, L->sw, L->sdy}, out[5] = {L->y, L->xq, L->xs, L->ax, L->aw};
    int n_in = is_delayed_fp8(c) ? 6 : (c->bias ? 3 : 2), n_out = fp8 ? 5 : bf16 && c->save_xq ? 2 : 1;
    FR_TRY(fr_graph_add_node(g, "Linear", "ai.fp8run", "lin", n_in, in, n_out, out, &L->node));
    fr_node *nd = &g->nodes[L->node];
    nd->op = fr_linear_op("Linear");
    FR_TRY(fr_node_set_attr_int(nd, "transB", c->transB));
    FR_TRY(fr_node_set_attr_string(nd, "precision", c->prec));
    if (c->recipe) FR_TRY(fr_node_set_attr_string(nd, "recipe", c->recipe));
    if (c->fmt) FR_TRY(fr_node_set_attr_string(nd, "fp8_format", c->fmt));
    if (c->margin) FR_TRY(fr_node_set_attr_int(nd, "margin", c->margin));
    if (c->pad != 1) FR_TRY(fr_node_set_attr_int(nd, "pad_multiple", c->pad));
    FR_TRY(fr_node_set_attr_string(nd, "state_prefix", "fp8_state/lin"));
    return fr_node_infer(g, L->node);
}

/* Emit the backward with dY = a random constant; returns dX, dW, dB value ids. */
static fr_status build_grad(lgraph *L, fr_rng *r, const lcase *c, int *dy, int din[3])
{
    fr_graph *g = L->g;
    const fr_value *yv = &g->values[L->y];
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, yv->dims, sizeof dims);
    *dy = fr_gc_add_input(g, r, "dY", c->dt, yv->rank, dims, NULL);
    int dout[5] = {*dy, -1, -1, -1, -1}, need[7] = {1, 1, c->bias, 0, 0, 0, 0}, d[7];
    for (int i = 0; i < 7; i++) d[i] = -1;
    fr_grad_ctx ctx = {g, L->node, 1, dout, need, d};
    FR_TRY(fr_linear_op("Linear")->grad(&ctx));
    for (int i = 0; i < 3; i++) din[i] = d[i];
    return FR_OK;
}

static const float *T(fr_graph *g, fr_tensor **t, int vid)
{
    return g->values[vid].constant ? g->values[vid].constant->data : t[vid]->data;
}

static double rel_l2(const float *a, const double *b, int64_t n)
{
    double r = fr_rel_l2_d(a, b, n);
    return r;
}

/* Run forward + backward and compare everything with the reference. Returns 1 when good. */
static int check_case(const lcase *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    lgraph L;
    int ok = 1;
    if (build(&L, c, &r) != FR_OK) {
        fprintf(stderr, "\n  %s: build failed: %s\n", label, fr_last_error());
        return 0;
    }
    fr_graph *g = L.g;
    int dy, din[3];
    if (build_grad(&L, &r, c, &dy, din) != FR_OK) {
        fprintf(stderr, "\n  %s: gradient rule failed: %s\n", label, fr_last_error());
        fr_graph_free(g);
        return 0;
    }
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    if (fr_gc_run(g, t) != FR_OK) {
        fprintf(stderr, "\n  %s: run failed: %s\n", label, fr_last_error());
        fr_gc_free_tensors(g, t);
        free(t);
        fr_graph_free(g);
        return 0;
    }
    int64_t M = L.M, K = c->K, N = c->N;
    const float *x = T(g, t, L.x), *w = T(g, t, L.w), *dyv = T(g, t, dy);
    const float *b = c->bias ? T(g, t, L.b) : NULL;
    ref_prec p = strcmp(c->prec, "fp8") == 0 ? RP_FP8 : strcmp(c->prec, "bf16") == 0 ? RP_BF16 : RP_FP32;
    int block = p == RP_FP8 && strcmp(c->recipe, "block") == 0;
    int dl = is_delayed_fp8(c);
    fr_dtype dyf = c->fmt && strcmp(c->fmt, "e4m3") == 0 ? FR_F8E4M3 : FR_F8E5M2;
    size_t nmk = (size_t)(M * K + 1), nkn = (size_t)(K * N + 1), nmn = (size_t)(M * N + 1);
    double *xd = malloc(nmk * 8), *wdv = malloc(nkn * 8), *dyd = malloc(nmn * 8);
    double *xd2 = malloc(nmk * 8), *dyd2 = malloc(nmn * 8), *ref = malloc((nmk + nkn + nmn) * 8);
    uint8_t *xcodes = malloc(nmk);
    float *xsinv = malloc(nmk * 4 + 4);
    int64_t wr = c->transB ? N : K, wc = c->transB ? K : N;
    xsinv[0] = dl ? 1.0f / L.scale_x : 1.0f; /* per-tensor scale of an empty X (amax 0 -> 1) */
    /* forward operands: X in 1x128 blocks along K, W in 128x128 tiles (or per tensor) */
    ref_operand(x, M, K, p, FR_F8E4M3, block ? 1 : 0, block ? 128 : 0, c->margin, dl ? &L.scale_x : NULL, xd,
                xcodes, xsinv);
    ref_operand(w, wr, wc, p, FR_F8E4M3, block ? 128 : 0, block ? 128 : 0, c->margin, dl ? &L.scale_w : NULL,
                wdv, NULL, NULL);
    int64_t ws0 = c->transB ? 1 : N, ws1 = c->transB ? K : 1; /* W(k, n) strides */
    ref_gemm(xd, K, 1, wdv, ws0, ws1, M, N, K, ref);
    if (b)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) ref[m * N + n] += b[n];
    double e = rel_l2(T(g, t, L.y), ref, M * N);
    if (!(e <= 1e-6)) {
        fprintf(stderr, "\n  %s: forward rel err %g\n", label, e);
        ok = 0;
    }
    if (p == RP_FP8) {
        const float *ax = T(g, t, L.ax), *aw = T(g, t, L.aw);
        if (ax[0] != arr_amax(x, M * K) || aw[0] != arr_amax(w, K * N)) {
            fprintf(stderr, "\n  %s: amax outputs wrong\n", label);
            ok = 0;
        }
    }
    /* saved activation: per tensor = the forward's codes transposed, [K, M]; block = 128x1
     * blocks along tokens, X's shape */
    if (p == RP_FP8 && c->save_xq) {
        if (block)
            ref_operand(x, M, K, p, FR_F8E4M3, 128, 1, c->margin, NULL, xd2, xcodes, xsinv);
        const uint8_t *q = (const uint8_t *)T(g, t, L.xq);
        const float *s = T(g, t, L.xs);
        const fr_value *qv = &g->values[L.xq];
        int64_t ns = block ? ((M + 127) / 128) * K : 1;
        int same = block ? qv->rank == c->rank : qv->rank == 2 && qv->dims[0] == K && qv->dims[1] == M;
        for (int64_t m = 0; same && m < M; m++)
            for (int64_t k = 0; same && k < K; k++) same = q[block ? m * K + k : k * M + m] == xcodes[m * K + k];
        if (!same || (ns && memcmp(s, xsinv, (size_t)ns * 4) != 0)) {
            fprintf(stderr, "\n  %s: saved Xq / scale_inv differ from the reference\n", label);
            ok = 0;
        }
    }
    /* bf16: the saved Xq is X rounded to bf16, and the weight gradient reads it (and the data
     * gradient's bf16 dY, bit-equal to dY rounded) instead of X and dY */
    if (p == RP_BF16) {
        const fr_node *gw = &g->nodes[g->values[din[1]].producer];
        const fr_node *gd = &g->nodes[g->values[din[0]].producer];
        int good = gd->n_outputs == 3 && gd->outputs[2] >= 0 && gw->n_inputs == 2 &&
                   gw->inputs[0] == (c->save_xq ? L.xq : L.x) && gw->inputs[1] == gd->outputs[2];
        for (int pass = 0; good && pass < 2; pass++) {
            int vid = pass ? gd->outputs[2] : L.xq;
            const float *src = pass ? dyv : x;
            int64_t n = pass ? M * N : M * K;
            if (!pass && !c->save_xq) continue;
            good = g->values[vid].dtype == FR_BF16;
            const uint16_t *q = (const uint16_t *)t[vid]->data;
            for (int64_t i = 0; good && i < n; i++) good = fr_bf16_to_f32(q[i]) == ref_bf16(src[i]);
        }
        if (!good) {
            fprintf(stderr, "\n  %s: bf16 Xq / dYq handed to the weight gradient missing or wrong\n", label);
            ok = 0;
        }
    }
    /* data gradient: dY per tensor or 1x128 along N; W as in the forward */
    ref_operand(dyv, M, N, p, dyf, block ? 1 : 0, block ? 128 : 0, c->margin, dl ? &L.scale_dy : NULL, dyd,
                NULL, NULL);
    ref_gemm(dyd, N, 1, wdv, ws1, ws0, M, K, N, ref); /* dX(m,k) = sum_n dY(m,n) W(k,n) */
    e = rel_l2(T(g, t, din[0]), ref, M * K);
    if (!(e <= 1e-6)) {
        fprintf(stderr, "\n  %s: dX rel err %g\n", label, e);
        ok = 0;
    }
    /* weight gradient: X and dY quantized along tokens (128x1 blocks) or per tensor */
    ref_operand(x, M, K, p, FR_F8E4M3, block ? 128 : 0, block ? 1 : 0, c->margin, dl ? &L.scale_x : NULL, xd2,
                NULL, NULL);
    ref_operand(dyv, M, N, p, dyf, block ? 128 : 0, block ? 1 : 0, c->margin, dl ? &L.scale_dy : NULL, dyd2,
                NULL, NULL);
    if (c->transB)
        ref_gemm(dyd2, 1, N, xd2, K, 1, N, K, M, ref); /* dW(n,k) = sum_m dY(m,n) X(m,k) */
    else
        ref_gemm(xd2, 1, K, dyd2, N, 1, K, N, M, ref);
    e = rel_l2(T(g, t, din[1]), ref, K * N);
    if (!(e <= 1e-6)) {
        fprintf(stderr, "\n  %s: dW rel err %g\n", label, e);
        ok = 0;
    }
    if (c->bias) {
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t m = 0; m < M; m++) s += dyv[m * N + n];
            ref[n] = s;
        }
        e = rel_l2(T(g, t, din[2]), ref, N);
        if (!(e <= 1e-6)) {
            fprintf(stderr, "\n  %s: dB rel err %g\n", label, e);
            ok = 0;
        }
    }
    if (dl) { /* the backward reports amax(dY) under the state name */
        int av = fr_graph_find_value(g, "fp8_state/lin/amax_dy");
        if (av < 0 || T(g, t, av)[0] != arr_amax(dyv, M * N)) {
            fprintf(stderr, "\n  %s: amax_dy missing or wrong\n", label);
            ok = 0;
        }
    }
    free(xd);
    free(wdv);
    free(dyd);
    free(xd2);
    free(dyd2);
    free(ref);
    free(xcodes);
    free(xsinv);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
    return ok;
}

static lcase base_case(const char *prec, const char *recipe)
{
    lcase c = {3, {2, 19, 0}, 300, 200, 1, 1, prec, recipe, NULL, 0, 1, 1, FR_F32};
    return c;
}

static void test_fp32_forward_backward(void)
{
    lcase c = base_case("fp32", NULL);
    CU_ASSERT(check_case(&c, "fp32_tb1"));
    c.transB = 0;
    c.rank = 2;
    c.lead[0] = 33;
    CU_ASSERT(check_case(&c, "fp32_tb0"));
    c.bias = 0;
    c.rank = 1; /* X [K] -> Y [N] */
    CU_ASSERT(check_case(&c, "fp32_rank1"));
}

static void test_bf16_forward_backward(void)
{
    lcase c = base_case("bf16", NULL);
    CU_ASSERT(check_case(&c, "bf16_tb1"));
    c.transB = 0;
    c.bias = 0;
    CU_ASSERT(check_case(&c, "bf16_tb0"));
    c.save_xq = 0; /* the weight gradient rounds X itself */
    CU_ASSERT(check_case(&c, "bf16_tb0_nosave"));
}

static void test_fp8_recipes(void)
{
    const char *recipes[3] = {"delayed", "current", "block"};
    for (int ri = 0; ri < 3; ri++)
        for (int tb = 0; tb < 2; tb++)
            for (int f = 0; f < 2; f++) {
                lcase c = base_case("fp8", recipes[ri]);
                c.transB = tb;
                c.fmt = f ? "e4m3" : "hybrid";
                c.margin = ri == 1 ? 1 : 0;
                c.bias = tb;
                if (ri == 2) { /* several token blocks, partial K and N blocks */
                    c.lead[0] = 3;
                    c.lead[1] = 100;
                }
                char label[64];
                snprintf(label, sizeof label, "fp8_%s_tb%d_%s", recipes[ri], tb, c.fmt);
                CU_ASSERT(check_case(&c, label));
            }
    /* without the saved Xq the weight gradient re-quantizes X: same result */
    lcase c = base_case("fp8", "current");
    c.save_xq = 0;
    CU_ASSERT(check_case(&c, "fp8_current_nosave"));
    c.recipe = "block";
    CU_ASSERT(check_case(&c, "fp8_block_nosave"));
}

static void test_empty_dims(void)
{
    const char *precs[3] = {"fp32", "bf16", "fp8"};
    for (int p = 0; p < 3; p++) {
        lcase c = base_case(precs[p], "current");
        c.rank = 2;
        c.lead[0] = 0; /* no tokens */
        CU_ASSERT(check_case(&c, "empty_tokens"));
        c.lead[0] = 5;
        c.K = 0; /* Y = bias */
        CU_ASSERT(check_case(&c, "empty_k"));
        c.K = 7;
        c.N = 0;
        CU_ASSERT(check_case(&c, "empty_n"));
    }
}

/* Build + run one case and return the outputs Y, dX, dW (copied). */
static int run_outputs(const lcase *c, const char *seed_label, float **out3, int64_t *sizes)
{
    fr_rng r = fr_test_rng(seed_label);
    lgraph L;
    if (build(&L, c, &r) != FR_OK) return 0;
    int dy, din[3];
    if (build_grad(&L, &r, c, &dy, din) != FR_OK) return 0;
    fr_tensor **t = calloc((size_t)L.g->n_values, sizeof *t);
    if (fr_gc_run(L.g, t) != FR_OK) {
        fprintf(stderr, "\n  run failed: %s\n", fr_last_error());
        return 0;
    }
    int ids[3] = {L.y, din[0], din[1]};
    for (int i = 0; i < 3; i++) {
        sizes[i] = fr_tensor_numel(t[ids[i]]);
        out3[i] = malloc((size_t)sizes[i] * 4 + 4);
        memcpy(out3[i], t[ids[i]]->data, (size_t)sizes[i] * 4);
    }
    fr_gc_free_tensors(L.g, t);
    free(t);
    fr_graph_free(L.g);
    return 1;
}

/* pad_multiple 16 pads M, N, K with zeros inside the kernels: results are identical */
static void test_padding_identical(void)
{
    const char *precs[5] = {"fp32", "bf16", "fp8", "fp8", "fp8"};
    const char *recipes[5] = {NULL, NULL, "delayed", "current", "block"};
    for (int i = 0; i < 5; i++) {
        lcase c = base_case(precs[i], recipes[i]);
        c.lead[0] = 3;
        c.lead[1] = 45; /* M = 135 */
        c.K = 141;
        c.N = 29;
        c.transB = i & 1;
        float *a[3], *b[3];
        int64_t sa[3], sb[3];
        CU_ASSERT_FATAL(run_outputs(&c, "pad", a, sa));
        c.pad = 16;
        CU_ASSERT_FATAL(run_outputs(&c, "pad", b, sb));
        for (int k = 0; k < 3; k++) {
            CU_ASSERT_EQUAL(sa[k], sb[k]);
            double d = fr_max_abs_diff(a[k], b[k], sa[k]);
            if (d != 0) fprintf(stderr, "\n  padding changed output %d of %s/%s by %g\n", k, precs[i],
                                recipes[i] ? recipes[i] : "", d);
            CU_ASSERT(d == 0);
            free(a[k]);
            free(b[k]);
        }
    }
    /* and the padded result is still the right one */
    lcase c = base_case("fp8", "block");
    c.pad = 16;
    c.K = 141;
    c.N = 29;
    CU_ASSERT(check_case(&c, "pad_fp8_block"));
}

/* fp32 gradient rule against central differences, float64 */
static void test_gradcheck_f64(void)
{
    for (int tb = 0; tb < 2; tb++) {
        fr_rng r = fr_test_rng(tb ? "gc_tb1" : "gc_tb0");
        lcase c = {3, {2, 3, 0}, 5, 4, tb, 1, "fp32", NULL, NULL, 0, tb ? 16 : 1, 0, FR_F64};
        lgraph L;
        FR_ASSERT_OK(build(&L, &c, &r));
        int wrt[3] = {L.x, L.w, L.b};
        double err = fr_gradcheck(L.g, &r, L.y, 3, wrt);
        CU_ASSERT(err < 1e-6);
        fr_graph_free(L.g);
    }
}

/* the rule emits the documented nodes */
static void test_gradient_nodes(void)
{
    fr_rng r = fr_test_rng("grad_nodes");
    lcase c = base_case("fp8", "delayed");
    c.K = 8;
    c.N = 4;
    lgraph L;
    FR_ASSERT_OK(build(&L, &c, &r));
    int dy, din[3];
    FR_ASSERT_OK(build_grad(&L, &r, &c, &dy, din));
    fr_graph *g = L.g;
    const fr_node *gd = &g->nodes[g->values[din[0]].producer];
    const fr_node *gw = &g->nodes[g->values[din[1]].producer];
    CU_ASSERT_STRING_EQUAL(gd->op_type, "LinearGradData");
    CU_ASSERT_STRING_EQUAL(gw->op_type, "LinearGradWeight");
    CU_ASSERT_STRING_EQUAL(g->nodes[g->values[din[2]].producer].op_type, "SumToShape");
    CU_ASSERT_EQUAL(gd->inputs[1], L.w);
    CU_ASSERT_EQUAL(gd->inputs[2], L.sw);
    CU_ASSERT_EQUAL(gd->inputs[3], L.sdy);
    CU_ASSERT_EQUAL(gw->inputs[0], L.xq); /* the saved codes, not X */
    CU_ASSERT_EQUAL(gw->inputs[2], L.xs);
    CU_ASSERT_EQUAL(gd->n_outputs, 4);
    CU_ASSERT_EQUAL(gw->n_outputs, 1);
    CU_ASSERT_STRING_EQUAL(g->values[gd->outputs[1]].name, "fp8_state/lin/amax_dy");
    /* dY is quantized once: the data gradient hands its codes over, transposed [N, M] */
    CU_ASSERT_EQUAL(gw->inputs[1], gd->outputs[2]);
    CU_ASSERT_EQUAL(gw->inputs[3], gd->outputs[3]);
    /* the saved X codes are transposed likewise, [K, M]; the weight gradient refuses others */
    fr_value *xq = &g->values[L.xq];
    int64_t M = g->values[gd->outputs[2]].dims[1], kt[2] = {c.K, M}, bad1[2] = {c.K, M + 1};
    CU_ASSERT(xq->rank == 2 && xq->dims[0] == c.K && xq->dims[1] == M);
    int gw_id = g->values[din[1]].producer;
    const fr_value *xv = &g->values[L.x];
    fr_value_set_shape(xq, FR_F8E4M3, xv->rank, xv->dims); /* X's shape: the block recipe's layout */
    CU_ASSERT_EQUAL(fr_node_infer(g, gw_id), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "[K, tokens]"));
    fr_value_set_shape(xq, FR_F8E4M3, 2, bad1);
    CU_ASSERT_EQUAL(fr_node_infer(g, gw_id), FR_ERR_SHAPE);
    fr_value_set_shape(xq, FR_F8E4M3, 2, kt);
    FR_ASSERT_OK(fr_node_infer(g, gw_id));
    CU_ASSERT_EQUAL(g->values[gd->outputs[2]].dtype, FR_F8E5M2);
    CU_ASSERT_EQUAL(g->values[gd->outputs[2]].rank, 2);
    CU_ASSERT_EQUAL(g->values[gd->outputs[2]].dims[0], c.N);
    CU_ASSERT_EQUAL(g->values[gd->outputs[2]].dims[1], L.M);
    CU_ASSERT_EQUAL(g->values[din[1]].dtype, FR_F32);
    fr_graph_free(g);

    /* X needs no gradient: amax_dy moves to the weight-gradient node */
    FR_ASSERT_OK(build(&L, &c, &r));
    g = L.g;
    int64_t yd[3];
    memcpy(yd, g->values[L.y].dims, sizeof yd);
    dy = fr_gc_add_input(g, &r, "dY", FR_F32, 3, yd, NULL);
    int dout[5] = {dy, -1, -1, -1, -1}, need[7] = {0, 1, 0, 0, 0, 0, 0}, d[7] = {-1, -1, -1, -1, -1, -1, -1};
    fr_grad_ctx ctx = {g, L.node, 1, dout, need, d};
    FR_ASSERT_OK(fr_linear_op("Linear")->grad(&ctx));
    CU_ASSERT_EQUAL(d[0], -1);
    gw = &g->nodes[g->values[d[1]].producer];
    CU_ASSERT_EQUAL(gw->n_outputs, 2);
    CU_ASSERT_STRING_EQUAL(g->values[gw->outputs[1]].name, "fp8_state/lin/amax_dy");
    fr_graph_free(g);
}

static void test_errors(void)
{
    fr_rng r = fr_test_rng("errors");
    lgraph L;
    /* current recipe: a NaN in X is a numeric error naming the node and the tensor */
    lcase c = base_case("fp8", "current");
    c.K = 16;
    c.N = 8;
    FR_ASSERT_OK(build(&L, &c, &r));
    ((float *)L.g->values[L.x].constant->data)[5] = NAN;
    fr_tensor **t = calloc((size_t)L.g->n_values, sizeof *t);
    CU_ASSERT_EQUAL(fr_gc_run(L.g, t), FR_ERR_NUMERIC);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'lin'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'X'"));
    fr_gc_free_tensors(L.g, t);
    free(t);
    fr_graph_free(L.g);
    /* delayed recipe: a NaN quantizes to NaN and the amax output reports it */
    c.recipe = "delayed";
    FR_ASSERT_OK(build(&L, &c, &r));
    ((float *)L.g->values[L.x].constant->data)[5] = NAN;
    t = calloc((size_t)L.g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(L.g, t));
    CU_ASSERT(isnan(((float *)t[L.ax]->data)[0]));
    /* X[0][5] is the saved codes' [5][0] ([K, M]: transposed) */
    CU_ASSERT_EQUAL(L.g->values[L.xq].rank, 2);
    CU_ASSERT_EQUAL(((uint8_t *)t[L.xq]->data)[5 * L.g->values[L.xq].dims[1]], FR_E4M3_NAN_CODE);
    fr_gc_free_tensors(L.g, t);
    free(t);
    /* delayed without its scale inputs */
    fr_node *nd = &L.g->nodes[L.node];
    nd->n_inputs = 3;
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "scale_x"));
    nd->n_inputs = 6;
    FR_ASSERT_OK(fr_node_infer(L.g, L.node));
    /* unsupported attribute values */
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "precision", "fp4"));
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fp4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "lin"));
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "precision", "fp8"));
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "recipe", "mxfp8"));
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_UNSUPPORTED);
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "recipe", "delayed"));
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "fp8_format", "e5m2"));
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_UNSUPPORTED);
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "fp8_format", "hybrid"));
    FR_ASSERT_OK(fr_node_set_attr_int(nd, "transB", 2));
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_UNSUPPORTED);
    FR_ASSERT_OK(fr_node_set_attr_int(nd, "transB", 0)); /* W [8,16] read as [K=8, N=16]: K mismatch */
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'W'"));
    FR_ASSERT_OK(fr_node_set_attr_int(nd, "transB", 1));
    nd->n_outputs = 2; /* Xq without its scale */
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_GRAPH);
    nd->n_outputs = 5;
    FR_ASSERT_OK(fr_node_set_attr_string(nd, "precision", "bf16")); /* scale inputs are fp8-only */
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "scale_x"));
    nd->n_inputs = 3; /* so are the outputs Xq, amax */
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_GRAPH);
    fr_graph_free(L.g);
    /* float64 only in fp32 precision */
    lcase d = {2, {3, 0, 0}, 4, 5, 0, 0, "bf16", NULL, NULL, 0, 1, 0, FR_F64};
    CU_ASSERT_EQUAL(build(&L, &d, &r), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float64"));
    fr_graph_free(L.g);
    /* a bias of the wrong length */
    lcase e = base_case("fp32", NULL);
    e.K = 4;
    e.N = 3;
    FR_ASSERT_OK(build(&L, &e, &r));
    int64_t five = 5;
    int bad = fr_gc_add_input(L.g, &r, "B5", FR_F32, 1, &five, NULL);
    L.g->nodes[L.node].inputs[2] = bad;
    CU_ASSERT_EQUAL(fr_node_infer(L.g, L.node), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "B5"));
    fr_graph_free(L.g);
    /* delayed: the gradient rule needs scale_dy */
    lcase f = base_case("fp8", "delayed");
    f.K = 4;
    f.N = 3;
    FR_ASSERT_OK(build(&L, &f, &r));
    L.g->nodes[L.node].n_inputs = 5;
    int dyv;
    int din[3];
    CU_ASSERT_EQUAL(build_grad(&L, &r, &f, &dyv, din), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "scale_dy"));
    fr_graph_free(L.g);
}

static CU_TestInfo tests[] = {
    {"fp32_forward_backward", test_fp32_forward_backward},
    {"bf16_forward_backward", test_bf16_forward_backward},
    {"fp8_recipes", test_fp8_recipes},
    {"empty_dims", test_empty_dims},
    {"padding_identical", test_padding_identical},
    {"gradcheck_f64", test_gradcheck_f64},
    {"gradient_nodes", test_gradient_nodes},
    {"errors", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"linear", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
