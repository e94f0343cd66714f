/* The fused attention kernels (ops/cuda/attention.cu) against the CPU reference (ops/attention.c)
 * on fresh random inputs: Attention (O, LSE) and AttentionGrad (dQ, dK, dV, some omitted),
 * causal and not, grouped-query broadcasting ([B, KV, G, T, D] with K/V [B, KV, 1, T, D]) and
 * K/V shared by every batch ([T, D]), ragged lengths (1, 7, 65, 200; Tq != Tk), head dims 8,
 * 16, 64, 128 and 96, Dv != D; both paths: bf16 tensor cores (any D, Dv that are multiples
 * of 8 up to 256: attention_tc.cu) and the float32 kernels (fp32 precision; generic past 64/128).
 * Tolerances per output (relative L2): fp32 1e-5; bf16 1e-2 (O, dQ, dK, dV: the CPU rounds the
 * normalized P, the kernels exp(s - running max)) and 1e-5 for LSE. The kernels use no atomics:
 * two runs are compared byte for byte. float64 is refused (FR_ERR_UNSUPPORTED naming the node).
 * The sliding window and the mask input (tensor cores in bf16, attention_masked.cu in fp32) are
 * checked the same way; tests/test_gpu_flash.c covers every mask kind and head dim.
 *
 * FR_ATTN_BENCH=1 adds timings (CUDA events, bf16 and fp32, causal) of the two reference shapes, Llama
 * 1B (B 8, H 16, KV 8, T 2048, D 128) and 125M (B 16, H 12, KV 4, T 1024, D 64), forward and
 * backward, in TFLOP/s of useful (unmasked) work: forward 4 B H T^2 D / 2, backward 2.5 x. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#endif

#define TOL_F32 1e-5
#define TOL_BF16 1e-2

typedef struct acase {
    int rq;
    int64_t q[5]; /* Q's dims: batch dims, Tq, D */
    int rk;
    int64_t k[5]; /* K's dims: batch dims, Tk, D (V: the same with Dv) */
    int64_t Dv;
    int causal;
} acase;

static int cmp_out(tnode *t, fr_tensor *got, int o, const char *name, double tol, const char *what)
{
    const fr_tensor *want = t->out[o];
    if (!want) return 1;
    double e = gpu_rel_err(got, want);
    if (e <= tol) return 1;
    gpu_print_case(what, t);
    gpu_print_mismatch(name, got, want, e, tol);
    CU_FAIL("GPU attention output outside its tolerance");
    return 0;
}

/* Both GPU runs' outputs equal byte for byte */
static void check_same_bytes(tnode *t, fr_tensor **a, fr_tensor **b, const char *what)
{
    for (int o = 0; o < t->n_out; o++) {
        if (!a[o]) continue;
        if (!b[o] || memcmp(a[o]->data, b[o]->data, a[o]->nbytes) != 0) {
            gpu_print_case(what, t);
            fprintf(stderr, "    output %d differs between two runs\n", o);
            CU_FAIL("GPU attention is not deterministic");
        }
    }
}

static int n_cases;

/* The mask input of a case (mask_kind 1: [B0, 1.., Tq, Tk], batch row b0 drops its last b0 keys
 * and adds a finite bias elsewhere; 2: [Tq, Tk] with query row 1 fully masked), or NULL. */
static fr_tensor *make_mask(const acase *c, int mask_kind)
{
    if (!mask_kind) return NULL;
    const int64_t Tq = c->q[c->rq - 2], Tk = c->k[c->rk - 2];
    int64_t d[5] = {1, 1, 1, 1, 1};
    const int rank = mask_kind == 1 ? c->rq : 2;
    if (mask_kind == 1) d[0] = c->q[0];
    d[rank - 2] = Tq;
    d[rank - 1] = Tk;
    fr_tensor *m = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, rank, d, "mask", &m));
    for (int64_t e = 0; e < fr_tensor_numel(m); e++) {
        const int64_t j = e % Tk, i = e / Tk % Tq, b0 = e / (Tq * Tk);
        const int drop = mask_kind == 1 ? j >= Tk - b0 : i == 1;
        ((float *)m->data)[e] = drop ? -INFINITY : 0.5f * sinf(0.7f * (float)i + 1.3f * (float)j);
    }
    return m;
}

static void run_case_masked(fr_rng *r, const acase *c, const char *prec, unsigned omit, int64_t window, int mask_kind);

/* Forward and backward of one case; omit: bit i omits gradient output i. */
static void run_case(fr_rng *r, const acase *c, const char *prec, unsigned omit)
{
    run_case_masked(r, c, prec, omit, 0, 0);
}

/* ... with a sliding window (c->causal) and a mask input (make_mask). */
static void run_case_masked(fr_rng *r, const acase *c, const char *prec, unsigned omit, int64_t window, int mask_kind)
{
    const int bf = strcmp(prec, "bf16") == 0;
    int64_t vd[5];
    memcpy(vd, c->k, sizeof vd);
    vd[c->rk - 1] = c->Dv;
    fr_tensor *Q = tt_randn(r, FR_F32, c->rq, c->q, 0, 1), *K = tt_randn(r, FR_F32, c->rk, c->k, 0, 1),
              *V = tt_randn(r, FR_F32, c->rk, vd, 0, 1);
    char what[256], s1[64], s2[64];
    snprintf(what, sizeof what, "Attention %s causal=%d window=%lld mask=%d Q %s K %s Dv %lld", prec, c->causal,
             (long long)window, mask_kind, fr_shape_str(c->rq, c->q, s1, sizeof s1),
             fr_shape_str(c->rk, c->k, s2, sizeof s2), (long long)c->Dv);
    const double tol = bf ? TOL_BF16 : TOL_F32;

    fr_tensor *M = make_mask(c, mask_kind), *ins[4] = {Q, K, V, M};
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, M ? 4 : 3, ins, 0u, 2);
    if (c->causal) TN_ATTR(&f, int, "causal", 1);
    if (window) TN_ATTR(&f, int, "window", window);
    TN_ATTR(&f, string, "precision", prec);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *g1[TN_MAX], *g2[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&f, g1));
    cmp_out(&f, g1[0], 0, "O", tol, what);
    cmp_out(&f, g1[1], 1, "LSE", TOL_F32, what);
    FR_ASSERT_OK(tn_run_gpu(&f, g2));
    check_same_bytes(&f, g1, g2, what);
    gpu_free_outputs(&f, g1);
    gpu_free_outputs(&f, g2);

    /* backward from the CPU's O and LSE */
    fr_tensor *dO = tt_randn(r, FR_F32, f.out[0]->rank, f.out[0]->dims, 0, 1);
    fr_tensor *bins[7] = {Q, K, V, f.out[0], f.out[1], dO, M};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, M ? 7 : 6, bins, 0u, 3);
    if (c->causal) TN_ATTR(&b, int, "causal", 1);
    if (window) TN_ATTR(&b, int, "window", window);
    TN_ATTR(&b, string, "precision", prec);
    for (int o = 0; o < 3; o++)
        if (omit & (1u << o)) tn_omit_output(&b, o);
    FR_ASSERT_OK(tn_run(&b));
    char bwhat[300];
    snprintf(bwhat, sizeof bwhat, "AttentionGrad (omitted mask %u) of %s", omit, what);
    FR_ASSERT_OK(tn_run_gpu(&b, g1));
    static const char *names[3] = {"dQ", "dK", "dV"};
    const int64_t Tk = c->k[c->rk - 2];
    for (int o = 0; o < 3; o++) {
        CU_ASSERT((g1[o] == NULL) == ((omit >> o) & 1u));
        if (!g1[o]) continue;
        if (Tk == 1 && o < 2 && !bf) {
            /* one key: the softmax has no gradient, dQ = dK = 0 exactly, and both sides hold
               only the rounding noise of dP - Delta (terms of dO's size): measured against dO */
            double d2 = 0, r2 = 0;
            for (int64_t i = 0; i < fr_tensor_numel(g1[o]); i++) {
                double e = fr_tensor_get_f64(g1[o], i) - fr_tensor_get_f64(b.out[o], i);
                d2 += e * e;
            }
            for (int64_t i = 0; i < fr_tensor_numel(dO); i++) r2 += fr_tensor_get_f64(dO, i) * fr_tensor_get_f64(dO, i);
            CU_ASSERT(sqrt(d2 / r2) <= tol);
            continue;
        }
        cmp_out(&b, g1[o], o, names[o], tol, bwhat);
    }
    FR_ASSERT_OK(tn_run_gpu(&b, g2));
    check_same_bytes(&b, g1, g2, bwhat);
    gpu_free_outputs(&b, g1);
    gpu_free_outputs(&b, g2);
    n_cases++;

    tn_free(&b);
    tn_free(&f);
    fr_tensor_free(dO);
    fr_tensor_free(M);
    fr_tensor_free(Q);
    fr_tensor_free(K);
    fr_tensor_free(V);
}

/* [2, H, T, D] with K/V [2, H, T, D] */
static acase plain(int64_t T, int64_t D, int causal)
{
    acase c = {4, {2, 3, T, D}, 4, {2, 3, T, D}, D, causal};
    return c;
}
/* GQA: Q [2, 2, G=3, T, D], K/V [2, 2, 1, T, D] */
static acase gqa(int64_t T, int64_t D, int causal)
{
    acase c = {5, {2, 2, 3, T, D}, 5, {2, 2, 1, T, D}, D, causal};
    return c;
}

static void test_tensor_cores(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_tc");
    static const int64_t Ts[4] = {1, 7, 65, 200};
    static const int64_t Ds[2] = {64, 128};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < 4; ti++)
            for (int causal = 0; causal < 2; causal++) {
                acase a = gqa(Ts[ti], Ds[di], causal);
                run_case(&r, &a, "bf16", 0u);
                acase p = plain(Ts[ti], Ds[di], causal);
                run_case(&r, &p, "bf16", ti == 2 ? 2u : 0u); /* dK omitted once */
            }
    /* Tq != Tk (not causal); K/V shared by the whole batch */
    acase x = {4, {2, 3, 33, 64}, 2, {70, 64}, 64, 0};
    run_case(&r, &x, "bf16", 0u);
    acase y = {3, {4, 130, 128}, 3, {1, 129, 128}, 128, 0};
    run_case(&r, &y, "bf16", 1u); /* dQ omitted */
    acase z = {4, {1, 2, 256, 128}, 4, {1, 1, 256, 128}, 128, 1};
    run_case(&r, &z, "bf16", 4u); /* dV omitted */
}

static void test_generic(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_generic");
    static const int64_t Ts[4] = {1, 7, 65, 200};
    static const int64_t Ds[5] = {8, 16, 64, 128, 96};
    for (int di = 0; di < 5; di++)
        for (int ti = 0; ti < 4; ti++)
            for (int causal = 0; causal < 2; causal++) {
                acase a = (ti + causal) % 2 ? gqa(Ts[ti], Ds[di], causal) : plain(Ts[ti], Ds[di], causal);
                run_case(&r, &a, "fp32", 0u);
            }
    /* bf16 precision with D not 64/128, or Dv != D (the tensor cores' padded head dims) */
    acase b1 = gqa(65, 96, 1);
    run_case(&r, &b1, "bf16", 0u);
    acase b2 = plain(40, 16, 0);
    run_case(&r, &b2, "bf16", 0u);
    acase b3 = {4, {2, 2, 50, 64}, 4, {2, 2, 50, 64}, 32, 1}; /* Dv 32 != D 64 */
    run_case(&r, &b3, "bf16", 0u);
    /* fp32: Dv != D, Tq != Tk, D at the generic limit, K/V shared by the batch */
    acase c1 = {4, {2, 3, 33, 16}, 4, {2, 1, 70, 16}, 24, 0};
    run_case(&r, &c1, "fp32", 0u);
    acase c2 = {3, {2, 37, 256}, 2, {37, 256}, 256, 1};
    run_case(&r, &c2, "fp32", 2u);
    acase c3 = {3, {3, 20, 64}, 3, {3, 20, 64}, 64, 1};
    run_case(&r, &c3, "fp32", 5u); /* dK only */
    /* the tiled float32 kernels (D = Dv in {64, 128}) over several 64-row tiles, GQA as at the
       bench shapes (groups of 3 and 2), ragged and aligned lengths */
    acase f1 = {5, {1, 2, 3, 300, 64}, 5, {1, 2, 1, 300, 64}, 64, 1};
    run_case(&r, &f1, "fp32", 0u);
    acase f2 = {5, {1, 2, 2, 256, 128}, 5, {1, 2, 1, 256, 128}, 128, 1};
    run_case(&r, &f2, "fp32", 0u);
    acase f3 = {4, {2, 2, 130, 128}, 4, {2, 2, 190, 128}, 128, 0};
    run_case(&r, &f3, "fp32", 2u);
}

/* attention_masked.cu: sliding windows, mask inputs (padding, bias, a fully masked row), both
 * precisions, GQA, Tq != Tk with a mask, lengths past one 128-thread block. */
static void test_masked(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_masked");
    static const int64_t Ts[3] = {7, 65, 200};
    for (int ti = 0; ti < 3; ti++)
        for (int bf = 0; bf < 2; bf++) {
            const char *prec = bf ? "bf16" : "fp32";
            acase a = gqa(Ts[ti], 64, 1);
            run_case_masked(&r, &a, prec, 0u, 6, 0);
            acase p = plain(Ts[ti], 16, 1);
            run_case_masked(&r, &p, prec, ti == 1 ? 2u : 0u, 3, 1);
            acase n = plain(Ts[ti], 128, 0);
            run_case_masked(&r, &n, prec, 0u, 0, ti == 0 ? 2 : 1);
        }
    acase x = {4, {2, 3, 33, 32}, 4, {2, 3, 70, 32}, 24, 0}; /* Tq != Tk, Dv != D, bias mask */
    run_case_masked(&r, &x, "fp32", 0u, 0, 2);
    acase y = {5, {2, 2, 2, 150, 64}, 5, {2, 2, 1, 150, 64}, 64, 1}; /* GQA, window, padding */
    run_case_masked(&r, &y, "fp32", 1u, 40, 1);
}

static void test_refusals(void)
{
    if (!gpu_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_f64");
    int64_t d[3] = {2, 5, 8};
    fr_tensor *Q = tt_randn(&r, FR_F64, 3, d, 0, 1), *K = tt_randn(&r, FR_F64, 3, d, 0, 1),
              *V = tt_randn(&r, FR_F64, 3, d, 0, 1);
    fr_tensor *ins[3] = {Q, K, V};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "Attention", 1, 3, ins, 0u, 2);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *g[TN_MAX];
    CU_ASSERT_EQUAL(tn_run_gpu(&t, g), FR_ERR_UNSUPPORTED);
    tn_assert_error("float64");
    gpu_free_outputs(&t, g);
    tn_free(&t);
    fr_tensor_free(Q);
    fr_tensor_free(K);
    fr_tensor_free(V);
}

/* ---- FR_ATTN_BENCH=1: timings of the reference shapes ---- */

#ifdef FP8RUN_HAVE_CUDA
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

/* ms per run of node t's CUDA kernel (warm-up, then `reps` runs between events) */
static double time_node(fr_cuda_ctx *c, tnode *t, fr_tensor **in, int n_in, fr_tensor **out, int n_out, int reps)
{
    const fr_node *n = tn_node(t);
    const fr_cuda_kernel_def *k = fr_cuda_kernel_find(n->domain, n->op_type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    size_t sb = 0;
    void *scratch = NULL;
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
    FR_ASSERT_OK(fr_cuda_kernel_scratch(k, &env, t->g, n, &sb));
    if (sb) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&scratch, sb), cudaSuccess);
    fr_cuda_kctx kc = {t->g, n, 1, n_in, n_out, in, out, c, scratch, sb, NULL, 0, NULL};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    FR_ASSERT_OK(k->run(&kc));
    FR_ASSERT_OK(k->run(&kc));
    cudaEventRecord(e0, c->stream);
    for (int i = 0; i < reps; i++) FR_ASSERT_OK(k->run(&kc));
    cudaEventRecord(e1, c->stream);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (scratch) cudaFree(scratch);
    printf("      (scratch %.1f MiB)\n", (double)sb / (1 << 20));
    return ms / reps;
}

static void bench_shape(fr_cuda_ctx *c, const char *name, int64_t B, int64_t H, int64_t KV, int64_t T, int64_t D,
                        const char *prec)
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
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, 3, fin, 0u, 2);
    TN_ATTR(&f, int, "causal", 1);
    TN_ATTR(&f, string, "precision", prec);
    const double fms = time_node(c, &f, fin, 3, fout, 2, 10);
    printf("    %s %s causal forward:  %8.3f ms  %6.1f TFLOP/s\n", name, prec, fms, flops / (fms * 1e9));

    fr_tensor *bin[6] = {&tq, &tk, &tv, &to, &tl, &tdo}, *bout[3] = {&tdq, &tdk, &tdv};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, 6, bin, 0u, 3);
    TN_ATTR(&b, int, "causal", 1);
    TN_ATTR(&b, string, "precision", prec);
    const double bms = time_node(c, &b, bin, 6, bout, 3, 10);
    printf("    %s %s causal backward: %8.3f ms  %6.1f TFLOP/s\n", name, prec, bms, 2.5 * flops / (bms * 1e9));
    fflush(stdout);
    tn_free(&b);
    tn_free(&f);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(dout);
    cudaFree(o);
    cudaFree(lse);
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
}
#endif

static void test_bench(void)
{
    const char *e = getenv("FR_ATTN_BENCH");
    if (!e || strcmp(e, "1") != 0 || !gpu_available()) return;
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &c));
    printf("\n");
    bench_shape(c, "llama-1b  B8 H16 KV8 T2048 D128", 8, 16, 8, 2048, 128, "bf16");
    bench_shape(c, "llama-125m B16 H12 KV4 T1024 D64", 16, 12, 4, 1024, 64, "bf16");
    bench_shape(c, "llama-1b  B8 H16 KV8 T2048 D128", 8, 16, 8, 2048, 128, "fp32");
    bench_shape(c, "llama-125m B16 H12 KV4 T1024 D64", 16, 12, 4, 1024, 64, "fp32");
    fr_cuda_ctx_free(c);
#endif
}

static void test_report(void)
{
    if (!gpu_available()) return;
    printf("\n    %d attention cases (forward + backward, each run twice) matched the CPU\n", n_cases);
    CU_ASSERT(n_cases > 60);
}

static CU_TestInfo tests[] = {
    {"bf16 tensor cores (D 64, 128): ragged, causal, GQA, omitted outputs, deterministic", test_tensor_cores},
    {"float32 kernels (tiled D 64, 128; generic D 8..256), Dv != D, Tq != Tk, bf16 rounding", test_generic},
    {"sliding window and mask input (attention_masked.cu), fp32 and bf16", test_masked},
    {"float64 is refused naming the node", test_refusals},
    {"FR_ATTN_BENCH=1: reference shapes", test_bench},
    {"case count", test_report},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_attention", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
