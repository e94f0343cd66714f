/* The CPU kernels of Linear, LinearGradData and LinearGradWeight (linear.h; attributes, shape
 * inference and the gradient rule: linear.c). Every float32 GEMM goes through gemm_f32(): each
 * operand is "prepared" into a float32 buffer holding exactly the values the GPU's tensor cores
 * multiply (fp32 copy, bf16-rounded, or fp8 codes times their scale_inv), zero-padded to the pad
 * multiple, and gemm_kseq() multiplies them with a fixed float32 summation order. float64 (fp32
 * precision, for gradient checks) uses cblas_dgemm. */
#include "ops/linear.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "graph/fp8_scaling.h"
#include "ops/swiglu.h"

typedef fr_lin_attrs lin_cfg;

static fr_status read_cfg(const fr_node *n, lin_cfg *c) { return fr_lin_read_attrs(n, c); }

static int delayed_fp8(const lin_cfg *c) { return c->prec == FR_LIN_FP8 && c->recipe == FR_LIN_DELAYED; }

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* dst[i] = bf16(src[i]): the bytes the GPU's bf16 operands hold (Xq, dYq in bf16 precision) */
static void round_bf16(const float *src, int64_t count, uint16_t *dst)
{
    for (int64_t i = 0; i < count; i++) dst[i] = fr_f32_to_bf16(src[i]);
}

/* ---- GEMM emulation ---- */

typedef struct operand {
    const float *src;      /* float32 storage [rows][cols], row-major (NULL when q is used) */
    const uint8_t *q;      /* or: saved fp8 codes [rows][cols] ... */
    const float *q_sinv;   /* ... with their scale_inv grid (blocks br x bc) */
    int64_t rows, cols;
    int trans;             /* the GEMM multiplies the transpose of the storage */
    fr_lin_precision prec;
    fr_dtype fmt;          /* fp8 format */
    int blockwise;         /* 1: br x bc blocks with their own scales; 0: one scale */
    int64_t br, bc;
    const float *scale;    /* per-tensor: the delayed scale, or NULL = from this tensor's amax */
    int margin;
    uint8_t *q_out;        /* optional copy of the codes [rows][cols] */
    float *sinv_out;       /* optional scale_inv ([1] or the block grid) */
    const char *what;      /* "node 'x' (Linear): weight 'w'" */
} operand;

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* Fill buf [rp][cp] (zeroed by the caller) with what the tensor cores multiply. */
static fr_status prepare_values(const operand *o, float *buf, int64_t cp)
{
    int64_t R = o->rows, C = o->cols;
    if (o->q) { /* saved fp8 codes: decode times the scale_inv of their block */
        float table[256];
        for (int c = 0; c < 256; c++)
            table[c] = o->fmt == FR_F8E4M3 ? fr_e4m3_to_f32((uint8_t)c) : fr_e5m2_to_f32((uint8_t)c);
        int64_t br = o->blockwise ? o->br : (R ? R : 1), bc = o->blockwise ? o->bc : (C ? C : 1);
        int64_t gc = ceil_div(C, bc);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                buf[r * cp + c] = table[o->q[r * C + c]] * o->q_sinv[(r / br) * gc + c / bc];
        return FR_OK;
    }
    switch (o->prec) {
    case FR_LIN_FP32:
        for (int64_t r = 0; r < R && C > 0; r++) memcpy(buf + r * cp, o->src + r * C, (size_t)C * sizeof(float));
        return FR_OK;
    case FR_LIN_BF16:
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++)
                buf[r * cp + c] = fr_bf16_to_f32(fr_f32_to_bf16(o->src[r * C + c]));
        return FR_OK;
    case FR_LIN_FP8:
        break;
    }
    if (o->blockwise)
        return fr_fp8_quantize_blocks(o->src, R, C, C, o->br, o->bc, o->fmt, o->margin, NULL,
                                      o->what, o->q_out, o->sinv_out, buf, cp);
    float scale;
    if (o->scale) {
        scale = *o->scale;
    } else {
        float amax = fr_amax(o->src, R * C);
        FR_TRY(fr_fp8_scale_from_amax(amax, o->fmt, o->margin, 1.0f, o->what, &scale));
    }
    FR_TRY(fr_fp8_quantize_blocks(o->src, R, C, C, R ? R : 1, C ? C : 1, o->fmt, o->margin, &scale,
                                  o->what, o->q_out, NULL, buf, cp));
    if (o->sinv_out) o->sinv_out[0] = 1.0f / scale;
    return FR_OK;
}

/* The operand's values op(storage) as a zero-padded row-major buffer [round_up(rows of op)]
 * [round_up(cols of op)] (the transpose is materialized). */
static fr_status prepare(const operand *o, int64_t pad, float **out)
{
    int64_t rp = round_up(o->rows, pad), cp = round_up(o->cols, pad);
    size_t n = (size_t)(rp * cp > 0 ? rp * cp : 1);
    float *buf = fr_calloc(n, sizeof(float), "Linear GEMM operand");
    if (!buf) return FR_ERR_OOM;
    fr_status st = prepare_values(o, buf, cp);
    if (st == FR_OK && o->trans) {
        float *tb = fr_malloc(n * sizeof(float), "Linear GEMM operand");
        if (!tb) {
            st = FR_ERR_OOM;
        } else {
            for (int64_t r = 0; r < rp; r++)
                for (int64_t c = 0; c < cp; c++) tb[c * rp + r] = buf[r * cp + c];
            free(buf);
            buf = tb;
        }
    }
    if (st != FR_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return FR_OK;
}

/* C[M][N] = A[M][K] B[K][N], all dense row-major. Every element is summed in float32 in the
 * order k = 0, 1, ..., K-1 (the tiling only groups elements), so the result does not depend on
 * M, N, K, the tiling or threads: zero padding provably changes nothing. (A BLAS sgemm changes
 * its summation order with the matrix dims: padding M alone from 135 to 144 changed 225 of
 * 3915 results in a test with OpenBLAS.) */
/* The 4 x 16 tile keeps its accumulators in vector registers (GCC vector extensions: AVX
 * registers where the CPU has them, pairs of SSE registers otherwise; target_clones picks at run
 * time). The vector width changes nothing in the result: each C element still adds its K
 * products one by one in order, and ISO C mode never fuses a multiply and an add. */
typedef float fr_v8f __attribute__((vector_size(32)));

#define LOAD8(v, p) memcpy(&(v), (p), sizeof(fr_v8f)) /* unaligned; a macro: no vector ABI */

__attribute__((target_clones("avx2", "default")))
static void gemm_kseq(const float *A, const float *B, float *C, int64_t M, int64_t N, int64_t K)
{
    int64_t m0 = 0;
    for (; m0 + 4 <= M; m0 += 4) {
        const float *a0 = A + m0 * K, *a1 = a0 + K, *a2 = a1 + K, *a3 = a2 + K;
        int64_t n0 = 0;
        for (; n0 + 16 <= N; n0 += 16) {
            fr_v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
            for (int64_t k = 0; k < K; k++) {
                fr_v8f b0, b1;
                LOAD8(b0, B + k * N + n0);
                LOAD8(b1, B + k * N + n0 + 8);
                c00 += a0[k] * b0;
                c01 += a0[k] * b1;
                c10 += a1[k] * b0;
                c11 += a1[k] * b1;
                c20 += a2[k] * b0;
                c21 += a2[k] * b1;
                c30 += a3[k] * b0;
                c31 += a3[k] * b1;
            }
            float *c = C + m0 * N + n0;
            memcpy(c, &c00, 32);
            memcpy(c + 8, &c01, 32);
            memcpy(c + N, &c10, 32);
            memcpy(c + N + 8, &c11, 32);
            memcpy(c + 2 * N, &c20, 32);
            memcpy(c + 2 * N + 8, &c21, 32);
            memcpy(c + 3 * N, &c30, 32);
            memcpy(c + 3 * N + 8, &c31, 32);
        }
        for (; n0 < N; n0++)
            for (int i = 0; i < 4; i++) {
                float s = 0.0f;
                for (int64_t k = 0; k < K; k++) s += A[(m0 + i) * K + k] * B[k * N + n0];
                C[(m0 + i) * N + n0] = s;
            }
    }
    for (; m0 < M; m0++) {
        float *c = C + m0 * N;
        for (int64_t n = 0; n < N; n++) c[n] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float a = A[m0 * K + k];
            const float *b = B + k * N;
            for (int64_t n = 0; n < N; n++) c[n] += a * b[n];
        }
    }
}

/* C [M][N] = op(A) op(B) (+ bias[N]) with op(A) M x K, op(B) K x N; every dim padded to `pad`. */
static fr_status gemm_f32(const operand *a, const operand *b, int64_t M, int64_t N, int64_t K,
                          int64_t pad, const float *bias, float *C)
{
    float *av = NULL, *bv = NULL, *cbuf = NULL;
    fr_status st = prepare(a, pad, &av);
    if (st == FR_OK) st = prepare(b, pad, &bv);
    if (st != FR_OK || M == 0 || N == 0) goto done;
    int64_t Mp = round_up(M, pad), Np = round_up(N, pad), Kp = round_up(K, pad);
    float *cv = C;
    if (Mp != M || Np != N) {
        cbuf = fr_malloc((size_t)(Mp * Np) * sizeof(float), "Linear GEMM result");
        if (!cbuf) {
            st = FR_ERR_OOM;
            goto done;
        }
        cv = cbuf;
    }
    gemm_kseq(av, bv, cv, Mp, Np, Kp);
    if (cbuf)
        for (int64_t m = 0; m < M; m++) memcpy(C + m * N, cbuf + m * Np, (size_t)N * sizeof(float));
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) C[m * N + n] += bias[n];
done:
    free(av);
    free(bv);
    free(cbuf);
    return st;
}

/* float64 (fp32 precision): C = op(A) op(B) (+ bias) with the same zero padding. */
static fr_status gemm_f64(const double *A, int ta, const double *B, int tb, int64_t M, int64_t N,
                          int64_t K, int64_t pad, const double *bias, double *C)
{
    if (M == 0 || N == 0) return FR_OK;
    if (K == 0) {
        for (int64_t i = 0; i < M * N; i++) C[i] = 0.0;
    } else {
        int64_t Mp = round_up(M, pad), Np = round_up(N, pad), Kp = round_up(K, pad);
        int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        int64_t arp = round_up(ar, pad), acp = round_up(ac, pad), brp = round_up(br, pad), bcp = round_up(bc, pad);
        double *ap = NULL, *bp = NULL, *cp = NULL;
        if (pad > 1) {
            ap = fr_calloc((size_t)(arp * acp), sizeof(double), "Linear GEMM operand");
            bp = fr_calloc((size_t)(brp * bcp), sizeof(double), "Linear GEMM operand");
            cp = fr_calloc((size_t)(Mp * Np), sizeof(double), "Linear GEMM result");
            if (!ap || !bp || !cp) {
                free(ap);
                free(bp);
                free(cp);
                return FR_ERR_OOM;
            }
            for (int64_t r = 0; r < ar; r++) memcpy(ap + r * acp, A + r * ac, (size_t)ac * sizeof(double));
            for (int64_t r = 0; r < br; r++) memcpy(bp + r * bcp, B + r * bc, (size_t)bc * sizeof(double));
        }
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)Mp, (int)Np, (int)Kp, 1.0, ap ? ap : A, (int)(ap ? acp : ac), bp ? bp : B,
                    (int)(bp ? bcp : bc), 0.0, cp ? cp : C, (int)Np);
        if (cp)
            for (int64_t m = 0; m < M; m++) memcpy(C + m * N, cp + m * Np, (size_t)N * sizeof(double));
        free(ap);
        free(bp);
        free(cp);
    }
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) C[m * N + n] += bias[n];
    return FR_OK;
}

static int64_t t_lead(const fr_tensor *t)
{
    int64_t m = 1;
    for (int d = 0; d + 1 < t->rank; d++) m *= t->dims[d];
    return m;
}

static int64_t t_last(const fr_tensor *t) { return t->rank ? t->dims[t->rank - 1] : 1; }

/* GEMM dims must fit cblas's int */
static fr_status check_blas_dims(const fr_node *n, int64_t M, int64_t N, int64_t K, int64_t pad)
{
    int64_t lim = 0x7FFFFFFF - pad;
    if (M > lim || N > lim || K > lim)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "GEMM dims %lld x %lld x %lld exceed the BLAS "
                             "int range", (long long)M, (long long)N, (long long)K);
    return FR_OK;
}

static void what_str(char *buf, size_t n, const fr_kernel_ctx *ctx, const char *role, int idx)
{
    int vid = idx < ctx->node->n_inputs ? ctx->node->inputs[idx] : -1;
    snprintf(buf, n, "node '%s' (%s): %s '%s'", ctx->node->name, ctx->node->op_type, role,
             vid >= 0 ? ctx->g->values[vid].name : "?");
}

static const float *scale_in(const fr_kernel_ctx *ctx, int i, const lin_cfg *c)
{
    return delayed_fp8(c) && i < ctx->n_in && ctx->in[i] ? (const float *)ctx->in[i]->data : NULL;
}

static void write_amax(const fr_kernel_ctx *ctx, int o, const float *data, int64_t count)
{
    if (o < ctx->n_out && ctx->out[o]) ((float *)ctx->out[o]->data)[0] = fr_amax(data, count);
}

/* A float32 view of X / dY / Xs: the tensor's own data, or a bfloat16 tensor widened (exactly)
 * into *owned (freed by the caller), so everything after computes what it computes for the
 * float32 tensor of the same values. */
static fr_status as_f32(const fr_tensor *t, const float **out, float **owned)
{
    *owned = NULL;
    if (t->dtype != FR_BF16) {
        *out = t->data;
        return FR_OK;
    }
    int64_t n = fr_tensor_numel(t);
    float *f = fr_malloc((size_t)(n > 0 ? n : 1) * sizeof(float), "Linear bfloat16 input widened");
    if (!f) return FR_ERR_OOM;
    const uint16_t *b = t->data;
    for (int64_t i = 0; i < n; i++) f[i] = fr_bf16_to_f32(b[i]);
    *out = *owned = f;
    return FR_OK;
}

/* x_glu: X [M][K] remade from gate_up [M][2K] as SwiGLU on the CPU makes it (the same bits),
 * rounded to bfloat16 and widened back when that SwiGLU wrote bfloat16 */
static fr_status glu_x(const lin_cfg *c, const fr_tensor *gate_up, int64_t M, int64_t K, const float **out,
                       float **owned)
{
    float *x = fr_malloc((size_t)(M * K > 0 ? M * K : 1) * sizeof(float), "Linear weight gradient's remade X");
    if (!x) return FR_ERR_OOM;
    const fr_swiglu_geom geo = fr_swiglu_fused_geom(c->x_glu, M, K, gate_up->dtype, FR_F32);
    fr_swiglu_forward_cpu(&geo, gate_up->data, gate_up->data, x); /* up: at geo.up_off of the same rows */
    if (c->x_glu_bf16)
        for (int64_t i = 0; i < M * K; i++) x[i] = fr_bf16_to_f32(fr_f32_to_bf16(x[i]));
    *out = *owned = x;
    return FR_OK;
}

static operand x_operand(const float *x, int64_t M, int64_t K, const lin_cfg *c, int along_tokens)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.src = x;
    o.rows = M;
    o.cols = K;
    o.prec = c->prec;
    o.fmt = FR_F8E4M3;
    o.blockwise = c->recipe == FR_LIN_BLOCKWISE;
    o.br = along_tokens ? FR_LIN_BLOCK : 1;
    o.bc = along_tokens ? 1 : FR_LIN_BLOCK;
    o.margin = c->margin;
    return o;
}

static operand w_operand(const fr_tensor *w, const lin_cfg *c, int trans)
{
    operand o;
    memset(&o, 0, sizeof o);
    o.src = w->data;
    o.rows = w->dims[0];
    o.cols = w->dims[1];
    o.trans = trans;
    o.prec = c->prec;
    o.fmt = FR_F8E4M3;
    o.blockwise = c->recipe == FR_LIN_BLOCKWISE;
    o.br = o.bc = FR_LIN_BLOCK;
    o.margin = c->margin;
    return o;
}

static operand dy_operand(const float *dy, int64_t M, int64_t N, const lin_cfg *c, int along_tokens)
{
    operand o = x_operand(dy, M, N, c, along_tokens);
    o.fmt = c->dy_fmt;
    return o;
}

/* codes [R][C] -> t [C][R]: the saved Xq, dYq (the layout the weight-gradient GEMM reads) */
static void transpose_codes(const uint8_t *codes, int64_t R, int64_t C, uint8_t *t)
{
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < C; j++) t[j * R + r] = codes[r * C + j];
}

/* op(A) op(B) (+ bias) into out: float32, or computed in float32 and rounded once to
 * bfloat16 (y_dtype / dx_dtype "bfloat16"), as the GPU's GEMM writes a bfloat16 result. A
 * bfloat16 out adds the bias rounded to bfloat16 first, as autocast does and as cuBLASLt's
 * bf16-output BIAS epilogue takes it (a bfloat16 bias vector). */
static fr_status gemm_out(const operand *a, const operand *b, int64_t M, int64_t N, int64_t K, int64_t pad,
                          const float *bias, fr_tensor *out)
{
    if (out->dtype != FR_BF16) return gemm_f32(a, b, M, N, K, pad, bias, out->data);
    float *f = fr_malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(float), "Linear float32 result");
    float *bb = bias ? fr_malloc((size_t)(N > 0 ? N : 1) * sizeof(float), "Linear bias rounded to bfloat16") : NULL;
    if (!f || (bias && !bb)) {
        free(f);
        free(bb);
        return FR_ERR_OOM;
    }
    for (int64_t n = 0; bb && n < N; n++) bb[n] = fr_bf16_to_f32(fr_f32_to_bf16(bias[n]));
    fr_status st = gemm_f32(a, b, M, N, K, pad, bb, f);
    if (st == FR_OK) round_bf16(f, M * N, out->data);
    free(f);
    free(bb);
    return st;
}

/* The scale_inv of codes an fp8 producer wrote with the delayed scale (absent, not finite or
 * not > 0: the quantization's FR_ERR_NUMERIC naming the operand) */
static fr_status codes_sinv(const fr_tensor *scale, const char *what, float *sinv)
{
    const float s = scale ? ((const float *)scale->data)[0] : 0.0f;
    if (!(s > 0.0f) || isinf(s))
        return fr_error(FR_ERR_NUMERIC, "%s: scale %g must be finite and > 0", what, (double)s);
    *sinv = 1.0f / s;
    return FR_OK;
}

/* Linear on X as E4M3 codes an fp8 producer wrote with scale_x (ops/linear.h): the GEMM
 * multiplies them with scale_inv = 1 / scale_x, what quantizing X here would have given */
static fr_status linear_codes(const fr_kernel_ctx *ctx, const lin_cfg *c, int64_t M, int64_t N, int64_t K)
{
    const fr_tensor *w = ctx->in[1], *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const fr_tensor *sx = ctx->n_in > FR_LIN_IN_SCALE_X ? ctx->in[FR_LIN_IN_SCALE_X] : NULL;
    char wx[600], ww[600];
    what_str(wx, sizeof wx, ctx, "input", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    float sinv;
    FR_TRY(codes_sinv(sx, wx, &sinv));
    operand a = x_operand(NULL, M, K, c, 0), bw = w_operand(w, c, c->transB);
    a.q = ctx->in[0]->data;
    a.q_sinv = &sinv;
    a.what = wx;
    bw.scale = scale_in(ctx, FR_LIN_IN_SCALE_W, c);
    bw.what = ww;
    FR_TRY(gemm_out(&a, &bw, M, N, K, c->pad, b ? b->data : NULL, ctx->out[0]));
    write_amax(ctx, FR_LIN_OUT_AMAX_W, w->data, fr_tensor_numel(w));
    return FR_OK;
}

/* Linear on float32 values x [M][K] (X itself, or a bfloat16 X widened) */
static fr_status linear_f32(const fr_kernel_ctx *ctx, const lin_cfg *c, const float *x, int64_t M, int64_t N,
                            int64_t K)
{
    const fr_tensor *w = ctx->in[1], *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    char wx[600], ww[600];
    what_str(wx, sizeof wx, ctx, "input", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    fr_tensor *xq = ctx->n_out > FR_LIN_OUT_XQ ? ctx->out[FR_LIN_OUT_XQ] : NULL;
    fr_tensor *xs = ctx->n_out > FR_LIN_OUT_XQ_SINV ? ctx->out[FR_LIN_OUT_XQ_SINV] : NULL;
    operand a = x_operand(x, M, K, c, 0), bw = w_operand(w, c, c->transB);
    a.scale = scale_in(ctx, FR_LIN_IN_SCALE_X, c);
    a.what = wx;
    bw.scale = scale_in(ctx, FR_LIN_IN_SCALE_W, c);
    bw.what = ww;
    uint8_t *codes = NULL;
    if (c->prec == FR_LIN_FP8 && !a.blockwise && xq) { /* per tensor: the GEMM's own codes, saved transposed */
        codes = fr_malloc((size_t)(M * K > 0 ? M * K : 1), "X codes");
        if (!codes) return FR_ERR_OOM;
        a.q_out = codes;
        a.sinv_out = xs->data;
    }
    fr_status st = gemm_out(&a, &bw, M, N, K, c->pad, b ? b->data : NULL, ctx->out[0]);
    if (st == FR_OK && codes) transpose_codes(codes, M, K, xq->data);
    free(codes);
    FR_TRY(st);
    if (c->prec == FR_LIN_BF16 && xq) round_bf16(x, M * K, xq->data); /* a bfloat16 X: its own bytes */
    if (c->prec == FR_LIN_FP8 && a.blockwise && xq) /* wgrad wants X in 128x1 blocks */
        FR_TRY(fr_fp8_quantize_blocks(x, M, K, K, FR_LIN_BLOCK, 1, FR_F8E4M3, c->margin, NULL, wx, xq->data,
                                      xs->data, NULL, 0));
    write_amax(ctx, FR_LIN_OUT_AMAX_X, x, M * K);
    write_amax(ctx, FR_LIN_OUT_AMAX_W, w->data, fr_tensor_numel(w));
    return FR_OK;
}

static fr_status check_act_dtype(const fr_node *n, const fr_tensor *t)
{
    if (t->dtype != FR_F32 && t->dtype != FR_BF16)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s", fr_dtype_name(t->dtype));
    return FR_OK;
}

fr_status fr_linear_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *x = ctx->in[0], *w = ctx->in[1], *b = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t K = c.transB ? w->dims[1] : w->dims[0], N = c.transB ? w->dims[0] : w->dims[1];
    int64_t M = t_lead(x);
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    if (x->dtype == FR_F64)
        return gemm_f64(x->data, 0, w->data, c.transB, M, N, K, c.pad, b ? b->data : NULL, ctx->out[0]->data);
    if (x->dtype == FR_F8E4M3) return linear_codes(ctx, &c, M, N, K);
    FR_TRY(check_act_dtype(n, x));
    const float *xv;
    float *owned;
    FR_TRY(as_f32(x, &xv, &owned));
    fr_status st = linear_f32(ctx, &c, xv, M, N, K);
    free(owned);
    return st;
}

/* LinearGradData on float32 values dy [M][N] (dY itself, or a bfloat16 dY widened) */
static fr_status grad_data_f32(const fr_kernel_ctx *ctx, const lin_cfg *c, const float *dy, int64_t M, int64_t N,
                               int64_t K)
{
    const fr_tensor *w = ctx->in[1];
    char wd[600], ww[600];
    what_str(wd, sizeof wd, ctx, "output gradient", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    operand a = dy_operand(dy, M, N, c, 0), bw = w_operand(w, c, !c->transB);
    a.scale = scale_in(ctx, 3, c);
    a.what = wd;
    bw.scale = scale_in(ctx, 2, c);
    bw.what = ww;
    fr_tensor *dyq = ctx->n_out > 2 ? ctx->out[2] : NULL, *dyq_sinv = ctx->n_out > 3 ? ctx->out[3] : NULL;
    if (c->prec == FR_LIN_BF16 && dyq) /* dY's bf16 copy for the weight gradient, dY's layout */
        round_bf16(dy, M * N, dyq->data);
    uint8_t *codes = NULL;
    if (dyq && dyq_sinv) { /* the GEMM's own codes, kept and handed over transposed */
        codes = fr_malloc((size_t)(M * N > 0 ? M * N : 1), "dY codes");
        if (!codes) return FR_ERR_OOM;
        a.q_out = codes;
        a.sinv_out = dyq_sinv->data;
    }
    fr_status st = gemm_out(&a, &bw, M, K, N, c->pad, NULL, ctx->out[0]);
    if (st == FR_OK && codes) transpose_codes(codes, M, N, dyq->data);
    free(codes);
    FR_TRY(st);
    write_amax(ctx, 1, dy, M * N);
    return FR_OK;
}

/* LinearGradData on dY as codes an fp8 producer wrote with scale_dy (ops/linear.h): the GEMM
 * multiplies them with scale_inv = 1 / scale_dy, what quantizing dY here would have given */
static fr_status grad_data_codes(const fr_kernel_ctx *ctx, const lin_cfg *c, int64_t M, int64_t N, int64_t K)
{
    const fr_tensor *w = ctx->in[1], *sdy = ctx->n_in > 3 ? ctx->in[3] : NULL;
    char wd[600], ww[600];
    what_str(wd, sizeof wd, ctx, "output gradient", 0);
    what_str(ww, sizeof ww, ctx, "weight", 1);
    float sinv;
    FR_TRY(codes_sinv(sdy, wd, &sinv));
    operand a = dy_operand(NULL, M, N, c, 0), bw = w_operand(w, c, !c->transB);
    a.q = ctx->in[0]->data;
    a.q_sinv = &sinv;
    a.what = wd;
    bw.scale = scale_in(ctx, 2, c);
    bw.what = ww;
    return gemm_out(&a, &bw, M, K, N, c->pad, NULL, ctx->out[0]);
}

fr_status fr_linear_grad_data_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *dy = ctx->in[0], *w = ctx->in[1];
    int64_t K = c.transB ? w->dims[1] : w->dims[0], N = c.transB ? w->dims[0] : w->dims[1];
    int64_t M = t_lead(dy);
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    /* dX [M,K] = dY [M,N] op(W)^T: W [K,N] is used transposed, W [N,K] as stored */
    if (dy->dtype == FR_F64)
        return gemm_f64(dy->data, 0, w->data, !c.transB, M, K, N, c.pad, NULL, ctx->out[0]->data);
    if (dy->dtype == FR_F8E5M2 || dy->dtype == FR_F8E4M3) return grad_data_codes(ctx, &c, M, N, K);
    FR_TRY(check_act_dtype(n, dy));
    const float *dv;
    float *owned;
    FR_TRY(as_f32(dy, &dv, &owned));
    fr_status st = grad_data_f32(ctx, &c, dv, M, N, K);
    free(owned);
    return st;
}

/* LinearGradWeight on float32 views of Xs / dY (a bfloat16 one widened; codes as they are) */
static fr_status grad_weight_f32(const fr_kernel_ctx *ctx, const lin_cfg *c, const float *xv, const float *dv,
                                 int64_t M, int64_t N, int64_t K)
{
    const fr_tensor *xs = ctx->in[0], *dy = ctx->in[1], *s = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int dyq = dy->dtype == FR_F8E4M3 || dy->dtype == FR_F8E5M2; /* [N, M] codes from LinearGradData */
    char wx[600], wd[600];
    what_str(wx, sizeof wx, ctx, "input", 0);
    what_str(wd, sizeof wd, ctx, "output gradient", 1);
    operand ox = x_operand(xv, M, K, c, 1), od = dy_operand(dv, M, N, c, 1);
    ox.what = wx;
    od.what = wd;
    od.scale = scale_in(ctx, 3, c);
    if (dyq) { /* the same values as quantizing dY here: stored transposed */
        od.src = NULL;
        od.scale = NULL;
        od.q = dy->data;
        od.q_sinv = ctx->in[3]->data;
        od.rows = N;
        od.cols = M;
    }
    int xt = xs->dtype == FR_F8E4M3 && !ox.blockwise; /* saved per tensor: [K, M] codes */
    if (xs->dtype == FR_F8E4M3) {
        ox.src = NULL;
        ox.q = xs->data;
        ox.q_sinv = s->data;
        if (xt) {
            ox.rows = K;
            ox.cols = M;
        }
    } else {
        ox.scale = scale_in(ctx, 2, c);
    }
    operand *a = c->transB ? &od : &ox, *b = c->transB ? &ox : &od;
    a->trans = 1;
    if (dyq) od.trans = !od.trans;
    if (xt) ox.trans = !ox.trans;
    FR_TRY(gemm_f32(a, b, c->transB ? N : K, c->transB ? K : N, M, c->pad, NULL, ctx->out[0]->data));
    if (!dyq) write_amax(ctx, 1, dv, M * N);
    return FR_OK;
}

fr_status fr_linear_grad_weight_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    lin_cfg c;
    FR_TRY(read_cfg(n, &c));
    const fr_tensor *xs = ctx->in[0], *dy = ctx->in[1];
    fr_tensor *dw = ctx->out[0];
    int dyq = dy->dtype == FR_F8E4M3 || dy->dtype == FR_F8E5M2; /* [N, M] codes from LinearGradData */
    int xt = xs->dtype == FR_F8E4M3 && c.recipe != FR_LIN_BLOCKWISE; /* the saved Xq: [K, M] codes */
    if (xt && xs->rank != 2) return fr_node_error(n, FR_ERR_SHAPE, "the saved input must be 2-D [K, tokens]");
    int64_t M = dyq ? dy->dims[1] : t_lead(dy), K = xt ? xs->dims[0] : t_last(xs), N = dyq ? dy->dims[0] : t_last(dy);
    if (c.x_glu >= 0) K /= 2; /* Xs is gate_up [M, 2K] */
    FR_TRY(check_blas_dims(n, M, N, K, c.pad));
    /* transB=0: dW [K,N] = X^T dY; transB=1: dW [N,K] = dY^T X (contraction over tokens) */
    if (dy->dtype == FR_F64) {
        if (c.transB) return gemm_f64(dy->data, 1, xs->data, 0, N, K, M, c.pad, NULL, dw->data);
        return gemm_f64(xs->data, 1, dy->data, 0, K, N, M, c.pad, NULL, dw->data);
    }
    /* bf16 precision rounds a widened bfloat16 tensor back to its own bytes: the saved Xq / dYq
     * multiplied as they are; fp8 quantizes the widened values as float32 */
    const float *xv = NULL, *dv = NULL;
    float *xo = NULL, *yo = NULL;
    fr_status st = c.x_glu >= 0 ? glu_x(&c, xs, M, K, &xv, &xo) : xs->dtype == FR_F8E4M3 ? FR_OK : as_f32(xs, &xv, &xo);
    if (st == FR_OK && !dyq) st = as_f32(dy, &dv, &yo);
    if (st == FR_OK) st = grad_weight_f32(ctx, &c, xv, dv, M, N, K);
    free(xo);
    free(yo);
    return st;
}
