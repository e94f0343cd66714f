/* cuDNN's fused flash attention (--attention cudnn: ops/cuda/attention_cudnn*.c) on fresh
 * random inputs, forward (O, LSE) and backward (dQ, dK, dV), against
 *  - a CPU float64 reference: the fused op in float64 (precision fp32, exact math) on the
 *    inputs rounded to bf16, which is what cuDNN computes from. Tolerance (relative L2): 1e-2
 *    for O, dQ, dK, dV (cuDNN rounds P and dS to bf16 as GEMM operands, and its bf16 outputs
 *    carry 2^-9 relative rounding), 1e-4 for LSE (float32 softmax statistics);
 *  - fp8run's own kernels (bf16 tensor cores) on the same float32 inputs: 2e-2 relative L2
 *    (both within 1e-2 of the reference), LSE 1e-4.
 * Shapes: [B, H, T, D] and grouped-query [B, KV, G, T, D] with K/V [B, KV, 1, T, D] (and
 * MQA), causal and not, T not a multiple of 64 or 128 (65, 7, 130: cuDNN <= 9.15's padding
 * workaround in the backward) and multiples of 128 (256, 384), Tq != Tk, D 64 and 128: 20
 * cases, 40 cuDNN plans (each built once, which takes cuDNN a while: give the program a few
 * minutes). Every cuDNN run is checked to have been cuDNN's (the context's run counters), not
 * a fallback.
 * Also: --attention cudnn refuses, naming the node, what cuDNN does not take (fp32 precision,
 * a one-key backward); --attention auto runs fp8run's kernels there and says why.
 * Skips, saying why, without a GPU or without a loadable cuDNN 9.
 *
 * FR_ATTN_BENCH=1 adds timings (CUDA events) of cuDNN and fp8run's kernels at the reference
 * shapes, Llama 1B (B 8, H 16, KV 8, T 2048, D 128) and 125M (B 16, H 12, KV 4, T 1024, D 64),
 * causal bf16, in TFLOP/s of useful work (forward 4 B H T^2 D / 2, backward 2.5 x), the float32
 * <-> bf16 conversions around cuDNN included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_kernel.h"
#endif

#define TOL_REF 1e-2
#define TOL_OWN 2e-2
#define TOL_LSE 1e-4

#ifdef FP8RUN_HAVE_CUDA
static fr_cuda_ctx *g_dnn;  /* --attention cudnn */
static fr_cuda_ctx *g_auto; /* --attention auto */
static int g_ready = -1;
static int n_cases;

/* 1 when a GPU and cuDNN are there (contexts made); else says why once. */
static int dnn_available(void)
{
    if (g_ready >= 0) return g_ready;
    g_ready = 0;
    if (!gpu_available()) return 0;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_dnn));
    if (fr_cuda_ctx_set_attention(g_dnn, "cudnn") != FR_OK) {
        printf("SKIP: %s\n", fr_last_error());
        return 0;
    }
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_auto));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(g_auto, "auto"));
    printf("%s\n", fr_cudnn_describe());
    g_ready = 1;
    return 1;
}

/* Run on cuDNN (g_dnn), asserting cuDNN ran it. */
static void run_dnn(tnode *t, fr_tensor **out, const char *what)
{
    const long long dn = g_dnn->attn_runs_cudnn, own = g_dnn->attn_runs_own;
    const fr_status st = tn_run_gpu_on(g_dnn, t, out);
    if (st != FR_OK) fprintf(stderr, "\n    %s: %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(g_dnn->attn_runs_cudnn, dn + 1);
    CU_ASSERT_EQUAL(g_dnn->attn_runs_own, own);
}

static void expect_close(const fr_tensor *got, const fr_tensor *want, double tol, const char *name, const char *against,
                         const char *what)
{
    const double e = gpu_rel_l2(got, want);
    if (e <= tol) return;
    fprintf(stderr, "\n    %s: %s vs %s: relative L2 %.3g > %.3g\n", what, name, against, e, tol);
    CU_FAIL("cuDNN attention outside its tolerance");
}

/* x rounded to bf16 (round-to-nearest-even), as float64: what cuDNN reads. */
static fr_tensor *bf16_f64(const fr_tensor *x)
{
    fr_tensor *y = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F64, x->rank, x->dims, "bf16 as f64", &y));
    for (int64_t i = 0; i < fr_tensor_numel(x); i++)
        ((double *)y->data)[i] = (double)fr_bf16_to_f32(fr_f32_to_bf16(((const float *)x->data)[i]));
    return y;
}

typedef struct acase {
    int rq;
    int64_t q[5]; /* Q's dims: batch dims, Tq, D */
    int rk;
    int64_t k[5]; /* K's dims (V: the same with Dv = D) */
    int causal;
} acase;

static void set_attrs(tnode *t, int causal, const char *prec)
{
    if (causal) TN_ATTR(t, int, "causal", 1);
    TN_ATTR(t, string, "precision", prec);
}

static void run_case(fr_rng *r, const acase *c)
{
    fr_tensor *Q = tt_randn(r, FR_F32, c->rq, c->q, 0, 1), *K = tt_randn(r, FR_F32, c->rk, c->k, 0, 1),
              *V = tt_randn(r, FR_F32, c->rk, c->k, 0, 1);
    char what[256], s1[64], s2[64];
    snprintf(what, sizeof what, "causal=%d Q %s K %s", c->causal, fr_shape_str(c->rq, c->q, s1, sizeof s1),
             fr_shape_str(c->rk, c->k, s2, sizeof s2));
    /* forward: cuDNN, fp8run's kernels, the float64 reference */
    fr_tensor *ins[3] = {Q, K, V};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, 3, ins, 0u, 2);
    set_attrs(&f, c->causal, "bf16");
    FR_ASSERT_OK(tn_run(&f)); /* shapes (and the CPU's bf16 emulation, unused here) */
    fr_tensor *dn[TN_MAX], *own[TN_MAX];
    run_dnn(&f, dn, what);
    FR_ASSERT_OK(tn_run_gpu(&f, own));
    fr_tensor *Q64 = bf16_f64(Q), *K64 = bf16_f64(K), *V64 = bf16_f64(V), *r_ins[3] = {Q64, K64, V64};
    tnode rf;
    tn_init_domain(&rf, "ai.fp8run", "Attention", 1, 3, r_ins, 0u, 2);
    set_attrs(&rf, c->causal, "fp32");
    FR_ASSERT_OK(tn_run(&rf));
    expect_close(dn[0], rf.out[0], TOL_REF, "O", "float64", what);
    expect_close(dn[1], rf.out[1], TOL_LSE, "LSE", "float64", what);
    expect_close(dn[0], own[0], TOL_OWN, "O", "fp8run", what);
    expect_close(dn[1], own[1], TOL_LSE, "LSE", "fp8run", what);

    /* backward from cuDNN's O and LSE (the reference from its own) */
    fr_tensor *dO = tt_randn(r, FR_F32, dn[0]->rank, dn[0]->dims, 0, 1);
    fr_tensor *bins[6] = {Q, K, V, dn[0], dn[1], dO};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, 6, bins, 0u, 3);
    set_attrs(&b, c->causal, "bf16");
    FR_ASSERT_OK(tn_run(&b));
    fr_tensor *gdn[TN_MAX], *gown[TN_MAX];
    run_dnn(&b, gdn, what);
    FR_ASSERT_OK(tn_run_gpu(&b, gown));
    fr_tensor *dO64 = bf16_f64(dO), *rb_ins[6] = {Q64, K64, V64, rf.out[0], rf.out[1], dO64};
    tnode rb;
    tn_init_domain(&rb, "ai.fp8run", "AttentionGrad", 1, 6, rb_ins, 0u, 3);
    set_attrs(&rb, c->causal, "fp32");
    FR_ASSERT_OK(tn_run(&rb));
    static const char *names[3] = {"dQ", "dK", "dV"};
    for (int o = 0; o < 3; o++) {
        expect_close(gdn[o], rb.out[o], TOL_REF, names[o], "float64", what);
        expect_close(gdn[o], gown[o], TOL_OWN, names[o], "fp8run", what);
    }
    n_cases++;
    gpu_free_outputs(&b, gdn);
    gpu_free_outputs(&b, gown);
    gpu_free_outputs(&f, dn);
    gpu_free_outputs(&f, own);
    tn_free(&rb);
    tn_free(&b);
    tn_free(&rf);
    tn_free(&f);
    fr_tensor *all[] = {Q, K, V, dO, Q64, K64, V64, dO64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}
#endif

static void test_against_reference(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!dnn_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_cudnn");
    static const int64_t Ts[2] = {65, 256}; /* not a multiple of 64 (nor 128), and one */
    static const int64_t Ds[2] = {64, 128};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 2; ti++)
            for (int causal = 0; causal < 2; causal++) {
                const int64_t T = Ts[ti], D = Ds[di];
                acase p = {4, {2, 3, T, D}, 4, {2, 3, T, D}, causal};
                run_case(&r, &p);
                acase g = {5, {2, 2, 3, T, D}, 5, {2, 2, 1, T, D}, causal}; /* GQA, groups of 3 */
                run_case(&r, &g);
            }
    acase t = {5, {2, 2, 3, 7, 64}, 5, {2, 2, 1, 7, 64}, 1}; /* shorter than one tile */
    run_case(&r, &t);
    acase m = {4, {1, 4, 130, 64}, 4, {1, 1, 130, 64}, 1}; /* MQA */
    run_case(&r, &m);
    acase x = {4, {2, 3, 33, 64}, 4, {2, 3, 70, 64}, 0}; /* Tq != Tk */
    run_case(&r, &x);
    acase y = {5, {1, 2, 2, 384, 128}, 5, {1, 2, 1, 384, 128}, 1}; /* several tiles, GQA as Llama 1B */
    run_case(&r, &y);
    printf("\n    %d cases (forward + backward) matched the float64 reference and fp8run's kernels\n", n_cases);
    CU_ASSERT(n_cases == 20);
#endif
}

/* What cuDNN does not take: an error naming the node under --attention cudnn, fp8run's kernels
 * (and the reason noted) under auto. */
static void test_refusals_and_fallback(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!dnn_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_cudnn_refusals");
    int64_t d[4] = {1, 2, 16, 64};
    fr_tensor *Q = tt_randn(&r, FR_F32, 4, d, 0, 1), *K = tt_randn(&r, FR_F32, 4, d, 0, 1),
              *V = tt_randn(&r, FR_F32, 4, d, 0, 1), *ins[3] = {Q, K, V};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, 3, ins, 0u, 2);
    set_attrs(&f, 1, "fp32"); /* exact float32: not cuDNN's */
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *g[TN_MAX];
    CU_ASSERT_EQUAL(tn_run_gpu_on(g_dnn, &f, g), FR_ERR_UNSUPPORTED);
    tn_assert_error("--attention cudnn");
    tn_assert_error("precision fp32");
    gpu_free_outputs(&f, g);
    const long long own = g_auto->attn_runs_own, dn = g_auto->attn_runs_cudnn;
    FR_ASSERT_OK(tn_run_gpu_on(g_auto, &f, g));
    CU_ASSERT_EQUAL(g_auto->attn_runs_own, own + 1);
    CU_ASSERT_EQUAL(g_auto->attn_runs_cudnn, dn);
    CU_ASSERT(gpu_rel_err(g[0], f.out[0]) <= 1e-5); /* fp8run's float32 kernels ran it */
    CU_ASSERT_PTR_NOT_NULL(strstr(g_auto->attn_note, "precision fp32"));
    char rep[512];
    fr_cuda_attention_report(g_auto, rep, sizeof rep);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep, "fp8run kernels"));
    gpu_free_outputs(&f, g);
    tn_free(&f);

    /* one query and one key: cuDNN's backward refuses it */
    int64_t d1[4] = {1, 2, 1, 64};
    fr_tensor *q1 = tt_randn(&r, FR_F32, 4, d1, 0, 1), *k1 = tt_randn(&r, FR_F32, 4, d1, 0, 1),
              *v1 = tt_randn(&r, FR_F32, 4, d1, 0, 1), *o1 = tt_randn(&r, FR_F32, 4, d1, 0, 1),
              *do1 = tt_randn(&r, FR_F32, 4, d1, 0, 1), *l1 = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 3, d1, "lse", &l1));
    for (int64_t i = 0; i < fr_tensor_numel(l1); i++) ((float *)l1->data)[i] = 0.5f;
    fr_tensor *bins[6] = {q1, k1, v1, o1, l1, do1};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, 6, bins, 0u, 3);
    set_attrs(&b, 0, "bf16");
    FR_ASSERT_OK(tn_run(&b));
    CU_ASSERT_EQUAL(tn_run_gpu_on(g_dnn, &b, g), FR_ERR_UNSUPPORTED);
    tn_assert_error("s_q = s_kv = 1");
    gpu_free_outputs(&b, g);
    FR_ASSERT_OK(tn_run_gpu_on(g_auto, &b, g));
    CU_ASSERT(gpu_rel_err(g[2], b.out[2]) <= TOL_REF); /* dV = dO (one key), fp8run's bf16 kernels */
    gpu_free_outputs(&b, g);
    tn_free(&b);
    fr_tensor *all[] = {Q, K, V, q1, k1, v1, o1, do1, l1};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
#endif
}

/* ---- FR_ATTN_BENCH=1 ---- */

#ifdef FP8RUN_HAVE_CUDA
static float *dev_random(fr_rng *r, int64_t n)
{
    float *h = malloc((size_t)n * sizeof(float)), *d = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    fr_rng_fill(r, h, n, -1.7f, 1.7f);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d, (size_t)n * sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(d, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    free(h);
    return d;
}

static fr_tensor dev_tensor(int rank, const int64_t *dims, void *data)
{
    fr_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = FR_F32;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    t.data = data;
    t.nbytes = (size_t)fr_tensor_numel(&t) * sizeof(float);
    return t;
}

/* ms per run of t's node on c (scratch planned for c, two warm-up runs, then `reps`) */
static double time_node(fr_cuda_ctx *c, tnode *t, fr_tensor **in, int n_in, fr_tensor **out, int n_out, int reps)
{
    const fr_node *n = tn_node(t);
    const fr_cuda_kernel_def *k = fr_cuda_kernel_find(n->domain, n->op_type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    size_t sb = 0;
    void *scratch = NULL;
    const fr_cuda_plan_env env = {c, c->attention};
    FR_ASSERT_OK(fr_cuda_kernel_scratch(k, &env, t->g, n, &sb));
    if (sb) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&scratch, sb), cudaSuccess);
    fr_cuda_kctx kc = {t->g, n, 1, n_in, n_out, in, out, c, scratch, sb, NULL, 0, NULL};
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    FR_ASSERT_OK(k->run(&kc));
    FR_ASSERT_OK(k->run(&kc));
    CU_ASSERT_EQUAL(cudaEventRecord(e0, c->stream), cudaSuccess);
    for (int i = 0; i < reps; i++) FR_ASSERT_OK(k->run(&kc));
    CU_ASSERT_EQUAL(cudaEventRecord(e1, c->stream), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (scratch) cudaFree(scratch);
    return ms / reps;
}

static void bench_shape(const char *name, int64_t B, int64_t H, int64_t KV, int64_t T, int64_t D)
{
    fr_rng r = fr_test_rng(name);
    const int64_t G = H / KV;
    int64_t qd[5] = {B, KV, G, T, D}, kd[5] = {B, KV, 1, T, D}, ld[4] = {B, KV, G, T};
    const int64_t nq = B * H * T * D, nk = B * KV * T * D;
    float *q = dev_random(&r, nq), *k = dev_random(&r, nk), *v = dev_random(&r, nk), *dout = dev_random(&r, nq);
    float *o = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&o, (size_t)nq * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&lse, (size_t)(B * H * T) * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&dq, (size_t)nq * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&dk, (size_t)nk * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&dv, (size_t)nk * 4), cudaSuccess);
    fr_tensor tq = dev_tensor(5, qd, q), tk = dev_tensor(5, kd, k), tv = dev_tensor(5, kd, v),
              to = dev_tensor(5, qd, o), tl = dev_tensor(4, ld, lse), tdo = dev_tensor(5, qd, dout),
              tdq = dev_tensor(5, qd, dq), tdk = dev_tensor(5, kd, dk), tdv = dev_tensor(5, kd, dv);
    const double flops = 4.0 * (double)B * (double)H * (double)T * (double)T * (double)D / 2;
    fr_tensor *fin[3] = {&tq, &tk, &tv}, *fout[2] = {&to, &tl};
    fr_tensor *bin[6] = {&tq, &tk, &tv, &to, &tl, &tdo}, *bout[3] = {&tdq, &tdk, &tdv};
    tnode f, b;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, 3, fin, 0u, 2);
    set_attrs(&f, 1, "bf16");
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, 6, bin, 0u, 3);
    set_attrs(&b, 1, "bf16");
    fr_cuda_ctx *own = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &own));
    fr_cuda_ctx *ctx[2] = {own, g_dnn};
    for (int i = 0; i < 2; i++) {
        const double fms = time_node(ctx[i], &f, fin, 3, fout, 2, 10), bms = time_node(ctx[i], &b, bin, 6, bout, 3, 10);
        printf("    %s %-7s forward %8.3f ms %6.1f TFLOP/s, backward %8.3f ms %6.1f TFLOP/s\n", name,
               i ? "cuDNN" : "fp8run", fms, flops / (fms * 1e9), bms, 2.5 * flops / (bms * 1e9));
    }
    fflush(stdout);
    fr_cuda_ctx_free(own);
    tn_free(&b);
    tn_free(&f);
    float *bufs[] = {q, k, v, dout, o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}
#endif

static void test_bench(void)
{
#ifdef FP8RUN_HAVE_CUDA
    const char *e = getenv("FR_ATTN_BENCH");
    if (!e || strcmp(e, "1") != 0 || !dnn_available()) return;
    printf("\n");
    bench_shape("llama-1b   B8 H16 KV8 T2048 D128", 8, 16, 8, 2048, 128);
    bench_shape("llama-125m B16 H12 KV4 T1024 D64", 16, 12, 4, 1024, 64);
#endif
}

static CU_TestInfo tests[] = {
    {"cuDNN forward and backward vs float64 and fp8run's kernels (MHA, GQA, MQA, causal, ragged T)",
     test_against_reference},
    {"--attention cudnn refuses what cuDNN does not take; auto falls back, saying why", test_refusals_and_fallback},
    {"FR_ATTN_BENCH=1: cuDNN vs fp8run at the reference shapes", test_bench},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_attention_cudnn", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
