/* cuDNN's FP8 SDPA (fr_cudnn_sdpa.fp8, the graphs of ops/cuda/attention_cudnn_graph.c, which no
 * node runs: docs/DESIGN.md says why) on fresh random inputs, against a float64 reference
 * computed from the very values the codes stand for:
 *  - forward: Q, K, V as E4M3 codes (scales from their amaxes), O as E4M3 codes by a scale
 *    from the reference's amax with 1.25x headroom (what delayed scaling with a margin gives); Stats against the
 *    reference's log-sum-exp within 1e-3 (the scores are exact products accumulated in
 *    float32), O decoded against the reference within 8% relative L2 (cuDNN quantizes P to
 *    E4M3 before P V and O has 3 mantissa bits: a few % expected), amax_s and amax_o within
 *    10% of the reference's max P (amax_s capped at 1: see run_case) and max |O|;
 *  - backward from those O codes and Stats with dO as E5M2 codes: dQ, dK, dV decoded against
 *    the reference (which reads O as decoded) within 15% relative L2 (E5M2 outputs and dS carry
 *    2 mantissa bits), amax_dp, amax_dq, amax_dk, amax_dv within 15%.
 * A descale not applied, a transposed operand or a wrong mask gives errors of order 1, so the
 * tolerances separate. Shapes: MHA and GQA, causal and not, head dim 128 (cuDNN's FP8 backward
 * takes only 128 on Hopper), T 64..256 and the Llama 1B's heads.
 * FR_ATTN_BENCH=1 adds timings (CUDA events) of the FP8 and bf16 graphs at the 1B attention
 * (B8, H16, KV8, T2048, D128, causal) and the 8B's (B2, H32, KV8, T4096), each engine
 * configuration the heuristics offer that runs (engine 0: what the nodes take), and whether
 * cuDNN takes the FP8 graphs with bf16 O and gradients: TFLOP/s of the causal pairs (forward
 * 4 B H T^2 D / 2, backward 2.5 x).
 * Skips, saying why, without a GPU, without a loadable cuDNN 9 or below compute capability 9. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_kernel.h"

#define E4M3_MAX 448.0
#define E5M2_MAX 57344.0
/* the outputs' scales leave this much headroom over the reference's amax: cuDNN's results differ
 * from it by their roundings, and a code past the format's largest is not a number */
#define HEADROOM 1.25

static fr_cuda_ctx *g_dnn;
static int g_ready = -1;

static int fp8_available(void)
{
    if (g_ready >= 0) return g_ready;
    g_ready = 0;
    if (!gpu_available()) return 0;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_dnn));
    if (fr_cuda_ctx_set_attention(g_dnn, "cudnn") != FR_OK) {
        printf("SKIP: %s\n", fr_last_error());
        return 0;
    }
    if (g_dnn->cc_major < 9) {
        printf("SKIP: cuDNN's FP8 attention needs compute capability 9.0 or newer (this GPU: %d)\n", g_dnn->cc_major);
        return 0;
    }
    printf("%s\n", fr_cudnn_describe());
    g_ready = 1;
    return 1;
}

static void *dev_put(const void *h, size_t bytes)
{
    void *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
    const cudaError_t e = h ? cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) : cudaMemset(d, 0, bytes ? bytes : 1);
    CU_ASSERT_EQUAL_FATAL(e, cudaSuccess);
    return d;
}

static void dev_get(void *h, const void *d, size_t bytes)
{
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

static float *dev_scalar(double v)
{
    const float f = (float)v;
    return (float *)dev_put(&f, sizeof f);
}

static double get_scalar(const float *d)
{
    float f = 0;
    dev_get(&f, d, sizeof f);
    return f;
}

static double amax_of(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Codes of x in E4M3 (e5 0) or E5M2 at scale (saturating), and into x the values they stand
 * for (code / scale): what cuDNN reads. */
static uint8_t *encode(double *x, int64_t n, int e5, double scale)
{
    uint8_t *c = malloc((size_t)n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)(x[i] * scale);
        c[i] = e5 ? fr_f32_to_e5m2(v, 1) : fr_f32_to_e4m3(v, 1);
        x[i] = (double)(e5 ? fr_e5m2_to_f32(c[i]) : fr_e4m3_to_f32(c[i])) / scale;
    }
    return c;
}

static void decode(const uint8_t *c, int64_t n, int e5, double scale, double *x)
{
    for (int64_t i = 0; i < n; i++) x[i] = (double)(e5 ? fr_e5m2_to_f32(c[i]) : fr_e4m3_to_f32(c[i])) / scale;
}

static double rel_l2(const double *got, const double *want, int64_t n)
{
    double e = 0, w = 0;
    for (int64_t i = 0; i < n; i++) e += (got[i] - want[i]) * (got[i] - want[i]), w += want[i] * want[i];
    return sqrt(e / (w > 0 ? w : 1));
}

static double *randn(fr_rng *r, int64_t n)
{
    double *x = malloc((size_t)n * sizeof *x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    for (int64_t i = 0; i < n; i++) x[i] = fr_rng_normal(r);
    return x;
}

static void packed4(int64_t h, int64_t t, int64_t d, int64_t *s) { s[0] = h * t * d, s[1] = t * d, s[2] = d, s[3] = 1; }

static fr_cudnn_sdpa problem(int64_t b, int64_t hq, int64_t hk, int64_t t, int64_t d, int causal, int fp8, int backward)
{
    fr_cudnn_sdpa p;
    memset(&p, 0, sizeof p);
    p.b = b, p.hq = hq, p.hk = hk, p.tq = p.tk = t, p.d = p.dv = d;
    packed4(hq, t, d, p.sq), packed4(hk, t, d, p.sk), packed4(hk, t, d, p.sv), packed4(hq, t, d, p.so);
    p.causal = causal, p.fp8 = fp8, p.backward = backward;
    return p;
}

/* The float64 reference of one problem: forward (P kept [b, hq, t, t], O, LSE) and, given dO
 * and the O the backward reads, dQ, dK, dV and max |dS|. */
typedef struct ref {
    double *P, *O, *lse, *dQ, *dK, *dV, amax_ds;
} ref;

static void ref_forward(const fr_cudnn_sdpa *p, const double *Q, const double *K, const double *V, double scale, ref *r)
{
    const int64_t T = p->tq, D = p->d, g = p->hq / p->hk;
    r->P = calloc((size_t)(p->b * p->hq * T * T), sizeof(double));
    r->O = calloc((size_t)(p->b * p->hq * T * D), sizeof(double));
    r->lse = calloc((size_t)(p->b * p->hq * T), sizeof(double));
    CU_ASSERT_FATAL(r->P && r->O && r->lse);
    for (int64_t b = 0; b < p->b; b++)
        for (int64_t h = 0; h < p->hq; h++) {
            const double *q = Q + (b * p->hq + h) * T * D, *k = K + (b * p->hk + h / g) * T * D;
            const double *v = V + (b * p->hk + h / g) * T * D;
            double *P = r->P + (b * p->hq + h) * T * T, *o = r->O + (b * p->hq + h) * T * D;
            for (int64_t i = 0; i < T; i++) {
                const int64_t n = p->causal ? i + 1 : T;
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < n; j++) {
                    double s = 0;
                    for (int64_t e = 0; e < D; e++) s += q[i * D + e] * k[j * D + e];
                    P[i * T + j] = s * scale;
                    m = fmax(m, P[i * T + j]);
                }
                for (int64_t j = 0; j < n; j++) l += exp(P[i * T + j] - m);
                r->lse[(b * p->hq + h) * T + i] = m + log(l);
                for (int64_t j = 0; j < n; j++) P[i * T + j] = exp(P[i * T + j] - m) / l;
                for (int64_t j = 0; j < n; j++)
                    for (int64_t e = 0; e < D; e++) o[i * D + e] += P[i * T + j] * v[j * D + e];
            }
        }
}

static void ref_backward(const fr_cudnn_sdpa *p, const double *Q, const double *K, const double *V, const double *O,
                         const double *dO, double scale, ref *r)
{
    const int64_t T = p->tq, D = p->d, g = p->hq / p->hk;
    r->dQ = calloc((size_t)(p->b * p->hq * T * D), sizeof(double));
    r->dK = calloc((size_t)(p->b * p->hk * T * D), sizeof(double));
    r->dV = calloc((size_t)(p->b * p->hk * T * D), sizeof(double));
    CU_ASSERT_FATAL(r->dQ && r->dK && r->dV);
    r->amax_ds = 0;
    for (int64_t b = 0; b < p->b; b++)
        for (int64_t h = 0; h < p->hq; h++) {
            const int64_t qo = (b * p->hq + h) * T * D, ko = (b * p->hk + h / g) * T * D;
            const double *P = r->P + (b * p->hq + h) * T * T;
            for (int64_t i = 0; i < T; i++) {
                const int64_t n = p->causal ? i + 1 : T;
                double rowsum = 0;
                for (int64_t e = 0; e < D; e++) rowsum += dO[qo + i * D + e] * O[qo + i * D + e];
                for (int64_t j = 0; j < n; j++) {
                    double dp = 0;
                    for (int64_t e = 0; e < D; e++) dp += dO[qo + i * D + e] * V[ko + j * D + e];
                    const double ds = P[i * T + j] * (dp - rowsum) * scale;
                    r->amax_ds = fmax(r->amax_ds, fabs(ds));
                    for (int64_t e = 0; e < D; e++) {
                        r->dV[ko + j * D + e] += P[i * T + j] * dO[qo + i * D + e];
                        r->dQ[qo + i * D + e] += ds * K[ko + j * D + e];
                        r->dK[ko + j * D + e] += ds * Q[qo + i * D + e];
                    }
                }
            }
        }
}

static void ref_free(ref *r) { free(r->P), free(r->O), free(r->lse), free(r->dQ), free(r->dK), free(r->dV); }

static void expect_within(double got, double want, double tol, const char *name, const char *what)
{
    const double e = fabs(got - want) / fmax(fabs(want), 1e-30);
    printf("      %s: %s %.4g (reference %.4g, %.2g off)\n", what, name, got, want, e);
    if (e > tol) CU_FAIL("cuDNN FP8 attention outside its tolerance");
}

/* p planned (a refusal reported with cuDNN's reason), its workspace allocated into io, run and
 * waited for. */
static void run_sdpa(const fr_cudnn_sdpa *p, fr_cudnn_sdpa_io *io, const char *what)
{
    size_t ws = 0;
    const fr_status st = fr_cudnn_sdpa_prepare(g_dnn, p, &ws);
    if (st != FR_OK) fprintf(stderr, "\n    %s %s: %s\n", what, p->backward ? "backward" : "forward", fr_last_error());
    FR_ASSERT_OK(st);
    io->workspace = ws ? dev_put(NULL, ws) : NULL, io->workspace_bytes = ws;
    FR_ASSERT_OK(fr_cudnn_sdpa_run(g_dnn, p, io));
    CU_ASSERT_EQUAL_FATAL(cudaStreamSynchronize(g_dnn->stream), cudaSuccess);
}

/* One problem forward and backward on cuDNN's FP8 graphs against the float64 reference. */
static void run_case(fr_rng *rng, int64_t B, int64_t HQ, int64_t HK, int64_t T, int64_t D, int causal)
{
    char what[128];
    snprintf(what, sizeof what, "B%lld H%lld KV%lld T%lld D%lld%s", (long long)B, (long long)HQ, (long long)HK,
             (long long)T, (long long)D, causal ? " causal" : "");
    printf("\n    %s\n", what);
    const int64_t nq = B * HQ * T * D, nk = B * HK * T * D, nrow = B * HQ * T;
    const double scale = 1.0 / sqrt((double)D);
    double *Q = randn(rng, nq), *K = randn(rng, nk), *V = randn(rng, nk), *dO = randn(rng, nq);
    const double sq = E4M3_MAX / amax_of(Q, nq), sk = E4M3_MAX / amax_of(K, nk), sv = E4M3_MAX / amax_of(V, nk);
    const double sdo = E5M2_MAX / amax_of(dO, nq);
    uint8_t *cq = encode(Q, nq, 0, sq), *ck = encode(K, nk, 0, sk), *cv = encode(V, nk, 0, sv),
            *cdo = encode(dO, nq, 1, sdo);
    ref r;
    memset(&r, 0, sizeof r);
    ref_forward(&(fr_cudnn_sdpa){.b = B, .hq = HQ, .hk = HK, .tq = T, .tk = T, .d = D, .causal = causal}, Q, K, V,
                scale, &r);
    const double so = E4M3_MAX / (HEADROOM * amax_of(r.O, nq)), ss = E4M3_MAX;

    /* forward */
    fr_cudnn_sdpa pf = problem(B, HQ, HK, T, D, causal, 1, 0);
    fr_cudnn_sdpa_io io;
    memset(&io, 0, sizeof io);
    io.q = dev_put(cq, (size_t)nq), io.k = dev_put(ck, (size_t)nk), io.v = dev_put(cv, (size_t)nk);
    io.o = dev_put(NULL, (size_t)nq), io.stats = dev_put(NULL, (size_t)nrow * sizeof(float));
    io.scale = (float)scale;
    float *d_q = dev_scalar(1 / sq), *d_k = dev_scalar(1 / sk), *d_v = dev_scalar(1 / sv), *d_s = dev_scalar(1 / ss);
    float *s_s = dev_scalar(ss), *s_o = dev_scalar(so), *a_s = dev_scalar(0), *a_o = dev_scalar(0);
    io.descale_q = d_q, io.descale_k = d_k, io.descale_v = d_v, io.descale_s = d_s, io.scale_s = s_s, io.scale_o = s_o;
    io.amax_s = a_s, io.amax_o = a_o;
    run_sdpa(&pf, &io, what);
    uint8_t *co = malloc((size_t)nq);
    float *lse = malloc((size_t)nrow * sizeof(float));
    double *O = malloc((size_t)nq * sizeof(double));
    CU_ASSERT_FATAL(co && lse && O);
    dev_get(co, io.o, (size_t)nq), dev_get(lse, io.stats, (size_t)nrow * sizeof(float));
    decode(co, nq, 0, so, O);
    double lse_err = 0, pmax = 0;
    for (int64_t i = 0; i < nrow; i++) lse_err = fmax(lse_err, fabs(lse[i] - r.lse[i]));
    for (int64_t i = 0; i < B * HQ * T * T; i++) pmax = fmax(pmax, r.P[i]);
    const double o_err = rel_l2(O, r.O, nq);
    printf("      forward: O relative L2 %.4f (tolerance 0.08), Stats max error %.2g (1e-3)\n", o_err, lse_err);
    CU_ASSERT(o_err <= 0.08);
    CU_ASSERT(lse_err <= 1e-3);
    /* P <= 1 by construction, but cuDNN's amax_s also counts a last partial tile's padded rows
       (seen: 1.75 at T 130): a user of it takes min(amax_s, 1), and so does this check */
    expect_within(fmin(get_scalar(a_s), 1.0), pmax, 0.10, "amax_s", "forward");
    expect_within(get_scalar(a_o), amax_of(r.O, nq), 0.10, "amax_o", "forward");

    /* backward: from the forward's O codes and Stats */
    ref_backward(&pf, Q, K, V, O, dO, scale, &r);
    const double sdp = E5M2_MAX / (HEADROOM * r.amax_ds), sdq = E5M2_MAX / (HEADROOM * amax_of(r.dQ, nq));
    const double sdk = E5M2_MAX / (HEADROOM * amax_of(r.dK, nk)), sdv = E5M2_MAX / (HEADROOM * amax_of(r.dV, nk));
    fr_cudnn_sdpa pb = problem(B, HQ, HK, T, D, causal, 1, 1);
    fr_cudnn_sdpa_io bo = io;
    bo.dout = dev_put(cdo, (size_t)nq);
    bo.dq = dev_put(NULL, (size_t)nq), bo.dk = dev_put(NULL, (size_t)nk), bo.dv = dev_put(NULL, (size_t)nk);
    float *d_o = dev_scalar(1 / so), *d_do = dev_scalar(1 / sdo), *d_dp = dev_scalar(1 / sdp);
    float *s_dp = dev_scalar(sdp), *s_dq = dev_scalar(sdq), *s_dk = dev_scalar(sdk), *s_dv = dev_scalar(sdv);
    float *a_dp = dev_scalar(0), *a_dq = dev_scalar(0), *a_dk = dev_scalar(0), *a_dv = dev_scalar(0);
    bo.descale_o = d_o, bo.descale_do = d_do, bo.descale_dp = d_dp, bo.scale_dp = s_dp, bo.scale_dq = s_dq;
    bo.scale_dk = s_dk, bo.scale_dv = s_dv, bo.amax_dp = a_dp, bo.amax_dq = a_dq, bo.amax_dk = a_dk, bo.amax_dv = a_dv;
    run_sdpa(&pb, &bo, what);
    uint8_t *cg = malloc((size_t)nq);
    double *G = malloc((size_t)nq * sizeof(double));
    CU_ASSERT_FATAL(cg && G);
    const struct {
        const char *name;
        const void *dev;
        int64_t n;
        double scale;
        const double *want;
        const float *amax;
    } grads[3] = {
        {"dQ", bo.dq, nq, sdq, r.dQ, a_dq}, {"dK", bo.dk, nk, sdk, r.dK, a_dk}, {"dV", bo.dv, nk, sdv, r.dV, a_dv}};
    for (int i = 0; i < 3; i++) {
        dev_get(cg, grads[i].dev, (size_t)grads[i].n);
        decode(cg, grads[i].n, 1, grads[i].scale, G);
        const double e = rel_l2(G, grads[i].want, grads[i].n);
        printf("      backward: %s relative L2 %.4f (tolerance 0.15)\n", grads[i].name, e);
        CU_ASSERT(e <= 0.15);
        expect_within(get_scalar(grads[i].amax), amax_of(grads[i].want, grads[i].n), 0.15, grads[i].name, "amax");
    }
    expect_within(get_scalar(a_dp), r.amax_ds, 0.15, "amax_dp", "backward");
    const void *frees[] = {io.q,         io.k, io.v, io.o, io.stats, io.workspace, bo.dout, bo.dq, bo.dk, bo.dv,
                           bo.workspace, d_q,  d_k,  d_v,  d_s,      s_s,          s_o,     a_s,   a_o,   d_o,
                           d_do,         d_dp, s_dp, s_dq, s_dk,     s_dv,         a_dp,    a_dq,  a_dk,  a_dv};
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++)
        if (frees[i]) cudaFree((void *)frees[i]);
    free(cg), free(G), free(co), free(lse), free(O), free(cq), free(ck), free(cv), free(cdo);
    free(Q), free(K), free(V), free(dO);
    ref_free(&r);
}

static void test_against_reference(void)
{
    if (!fp8_available()) return;
    fr_rng r = fr_test_rng("attention_fp8");
    run_case(&r, 2, 4, 4, 64, 128, 0);
    run_case(&r, 2, 4, 2, 128, 128, 1);
    run_case(&r, 1, 16, 8, 256, 128, 1); /* the Llama 1B's heads */
    run_case(&r, 1, 8, 1, 130, 128, 1);  /* MQA, T not a multiple of 64 */
}

/* ms per run of p on zeroed inputs (two warm-up runs, then reps), or -1 (refused: why printed) */
static double time_sdpa(const fr_cudnn_sdpa *p, int reps)
{
    size_t ws = 0;
    if (fr_cudnn_sdpa_prepare(g_dnn, p, &ws) != FR_OK) {
        printf("      refused: %s\n", fr_last_error());
        return -1;
    }
    const size_t n = (size_t)(p->b * p->hq * p->tq * p->d) * (p->fp8 && !p->fp8_bf16_io ? 1 : 2);
    fr_cudnn_sdpa_io io;
    memset(&io, 0, sizeof io);
    void *bufs[9];
    for (int i = 0; i < 9; i++) bufs[i] = dev_put(NULL, n);
    io.q = bufs[0], io.k = bufs[1], io.v = bufs[2], io.o = bufs[3], io.dout = bufs[4], io.dq = bufs[5];
    io.dk = bufs[6], io.dv = bufs[7];
    io.stats = dev_put(NULL, (size_t)(p->b * p->hq * p->tq) * sizeof(float));
    float *one = dev_scalar(1), *amax[6];
    for (int i = 0; i < 6; i++) amax[i] = dev_scalar(0);
    io.descale_q = io.descale_k = io.descale_v = io.descale_o = io.descale_do = io.descale_s = io.descale_dp = one;
    io.scale_s = io.scale_o = io.scale_dp = io.scale_dq = io.scale_dk = io.scale_dv = one;
    io.amax_s = amax[0], io.amax_o = amax[1], io.amax_dp = amax[2], io.amax_dq = amax[3], io.amax_dk = amax[4];
    io.amax_dv = amax[5];
    io.scale = (float)(1.0 / sqrt((double)p->d));
    io.workspace = ws ? dev_put(NULL, ws) : NULL, io.workspace_bytes = ws;
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    for (int i = 0; i < 2; i++) FR_ASSERT_OK(fr_cudnn_sdpa_run(g_dnn, p, &io));
    CU_ASSERT_EQUAL(cudaEventRecord(e0, g_dnn->stream), cudaSuccess);
    for (int i = 0; i < reps; i++) FR_ASSERT_OK(fr_cudnn_sdpa_run(g_dnn, p, &io));
    CU_ASSERT_EQUAL(cudaEventRecord(e1, g_dnn->stream), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    for (int i = 0; i < 9; i++) cudaFree(bufs[i]);
    for (int i = 0; i < 6; i++) cudaFree(amax[i]);
    cudaFree((void *)io.stats), cudaFree(one);
    if (io.workspace) cudaFree(io.workspace);
    return ms / reps;
}

/* ms of forward and backward of one variant with the heuristics' k-th runnable engine (-1:
 * refused, cuDNN's reason printed by time_sdpa) */
static void time_variant(int64_t B, int64_t H, int64_t KV, int64_t T, int64_t D, int fp8, int bf16_io, int k,
                         double *fm, double *bm)
{
    fr_cudnn_sdpa f = problem(B, H, KV, T, D, 1, fp8, 0), g = problem(B, H, KV, T, D, 1, fp8, 1);
    f.fp8_bf16_io = g.fp8_bf16_io = bf16_io;
    f.engine_skip = g.engine_skip = k;
    *fm = time_sdpa(&f, 10), *bm = time_sdpa(&g, 10);
}

static void bench_shape(int64_t B, int64_t H, int64_t KV, int64_t T, int64_t D)
{
    const double pairs = (double)B * H * T * (T + 1) / 2, fwd = 4 * pairs * D;
    printf("\n    cuDNN SDPA at B%lld H%lld KV%lld T%lld D%lld causal (TFLOP/s of the causal pairs)\n", (long long)B,
           (long long)H, (long long)KV, (long long)T, (long long)D);
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int k = 0; k < 8; k++) { /* the heuristics' first (what the nodes take), then the others */
            double fm, bm;
            time_variant(B, H, KV, T, D, fp8, 0, k, &fm, &bm);
            if (fm < 0 && bm < 0) break;
            printf("      %s, engine %d: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s)\n",
                   fp8 ? "fp8 " : "bf16", k, fm, fm > 0 ? fwd / fm / 1e9 : 0.0, bm,
                   bm > 0 ? 2.5 * fwd / bm / 1e9 : 0.0);
        }
    double fm, bm;
    time_variant(B, H, KV, T, D, 1, 1, 0, &fm, &bm);
    printf("      fp8 with bf16 O and dQ, dK, dV: forward %s, backward %s\n", fm < 0 ? "refused" : "runs",
           bm < 0 ? "refused" : "runs");
}

static void test_bench(void)
{
    const char *b = getenv("FR_ATTN_BENCH");
    if (!b || strcmp(b, "1") != 0 || !fp8_available()) return;
    bench_shape(8, 16, 8, 2048, 128); /* the Llama 1B's attention at its bench shape */
    bench_shape(2, 32, 8, 4096, 128); /* the Llama-3-8B shape's at B2 x T4096 */
}
#else
static void test_against_reference(void) { printf("SKIP: built without the CUDA backend\n"); }
static void test_bench(void) {}
#endif

static CU_TestInfo tests[] = {
    {"cuDNN FP8 SDPA forward and backward vs float64 (MHA, GQA, MQA, causal, D 128)", test_against_reference},
    {"FR_ATTN_BENCH=1: cuDNN FP8 against bf16 SDPA at the Llama 1B attention", test_bench},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_attention_fp8", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
