/* fp8run's flash attention on bf16 tensor cores (ops/cuda/attention_tc.cu, attention_tc_bwd.cu)
 * and the exact float32 path for the same masks (attention_masked.cu) against the CPU reference
 * (ops/attention.c), fresh random inputs, every mask kind x head dim, forward and backward:
 *  - mask kinds: causal; causal with a sliding window; softcap (causal); HF key padding (Sk,
 *    Sq absent, seg_form padded); packed sequences (Sk = Sq, seg_form packed, int32 ids);
 *    arbitrary ids with fully masked rows (seg_form general, not causal, Tq != Tk); an additive
 *    mask input (bias with -inf, not causal); softcap + window + padding + mask together;
 *  - head dims 64, 128, 256 and 80 (the 128 kernel with zero-padded columns), 40, Dv != D;
 *    on Hopper D 64 once more on the mma.sync kernels (FP8RUN_FLASH_WGMMA=0);
 *    GQA (Q [2, 2, 2, T, D], K/V [2, 2, 1, T, D]), T = 200 (several ragged tiles), T 700
 *    for four of them (every double-buffered tile refilled several times), and six shapes at
 *    the edges of the Hopper kernels' tensor copies (D 64 with Dv 128, D 256 with Dv 192, T 50,
 *    D 72, D 64 with Dv 32, D 48 with Dv 64);
 *  - tolerances (relative L2): bf16 1e-2 on O, dQ, dK, dV (the CPU rounds the normalized P,
 *    the kernels exp(s - running max)); LSE 1e-5, 2e-3 with softcap (tanh.approx, 2^-11);
 *    float32 precision 1e-5 everywhere;
 *  - two runs give the same bytes (no atomics);
 *  - rows that see no key: O = 0, LSE = -inf, no gradient;
 *  - AttentionQKV(Grad) hands softcap and Sk, Sq to these kernels (padded and packed, D 96).
 * Without a GPU every test says SKIP and passes.
 *
 * FR_FLASH_BENCH=1 adds TFLOP/s (useful, unmasked work: forward 4 x pairs x D per head,
 * backward 2.5 x that) at B 8, H 8, T 2048 for D 64, 128, 256: causal, sliding window 512,
 * key padding (a quarter of each sequence padded, causal) and softcap 50 (causal), fp8run's
 * kernels against cuDNN's (--attention cudnn; where it refuses the node, the reason). The node
 * is timed whole: the float32 <-> bf16 conversions around either are included.
 * FR_FLASH_BENCH=causal: the bench's causal rows only and none of the checks (one kernel
 * instantiation per head dim, for a profiler's per-kernel times). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#endif

enum { K_CAUSAL, K_WINDOW, K_SOFTCAP, K_PAD, K_PACKED, K_IDS, K_MASK, K_ALL, N_KINDS };
static const char *const kind_name[N_KINDS] = {"causal", "window", "softcap", "padding", "packed",
                                               "ids",    "mask",   "all"};

typedef struct fcase {
    int kind;
    int64_t T, Tk, D, Dv;
    const char *prec;
} fcase;

static int n_cases;

static int causal_of(int kind) { return kind != K_IDS && kind != K_MASK; }

/* FR_FLASH_BENCH=causal: the bench's causal rows and nothing else (for a profiler) */
static int bench_only(void)
{
    const char *e = getenv("FR_FLASH_BENCH");
    return e && strcmp(e, "causal") == 0;
}

/* Segment id of key (q 0) or query (q 1) t of row r. */
static int64_t seg_of(int kind, int q, int64_t r, int64_t t, int64_t T)
{
    switch (kind) {
    case K_PAD:
    case K_ALL: return t < T - 37 * (r + 1) ? 1 : 0;                /* keys only */
    case K_PACKED: return t < 50 ? 1 : t < 120 + 10 * r ? 2 : t < T - 9 ? 3 : 0;
    case K_IDS: return q && t % 17 == 3 ? 99 : (t / 7 + r + q * (t % 2)) % 3; /* 99: no key */
    default: return 1;
    }
}

static fr_tensor *seg_tensor(const fcase *c, int q, int64_t rows, int64_t T)
{
    const fr_dtype dt = c->kind == K_PACKED ? FR_I32 : FR_I64;
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_tensor_new(dt, 2, (int64_t[]){rows, T}, q ? "Sq" : "Sk", &t));
    for (int64_t i = 0; i < rows * T; i++) {
        const int64_t id = seg_of(c->kind, q, i / T, i % T, T);
        if (dt == FR_I32)
            ((int32_t *)t->data)[i] = (int32_t)id;
        else
            ((int64_t *)t->data)[i] = id;
    }
    return t;
}

/* [B0 = 2, 1, 1, Tq, Tk]: bias with -inf on a pattern (row 5 fully masked) */
static fr_tensor *mask_tensor(int64_t Tq, int64_t Tk)
{
    fr_tensor *m = NULL;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 5, (int64_t[]){2, 1, 1, Tq, Tk}, "mask", &m));
    for (int64_t e = 0; e < fr_tensor_numel(m); e++) {
        const int64_t j = e % Tk, i = e / Tk % Tq, b = e / (Tq * Tk);
        const int drop = i == 5 || (i * 3 + j * 7 + b) % 11 == 0;
        ((float *)m->data)[e] = drop ? -INFINITY : 0.7f * sinf(0.3f * (float)i - 0.9f * (float)j + (float)b);
    }
    return m;
}

static void set_attrs(tnode *t, const fcase *c)
{
    TN_ATTR(t, int, "causal", causal_of(c->kind));
    TN_ATTR(t, string, "precision", c->prec);
    if (c->kind == K_WINDOW || c->kind == K_ALL) TN_ATTR(t, int, "window", 45);
    if (c->kind == K_SOFTCAP || c->kind == K_ALL) TN_ATTR(t, float, "softcap", 1.5f);
    if (c->kind == K_PAD || c->kind == K_ALL) TN_ATTR(t, string, "seg_form", "padded");
    if (c->kind == K_PACKED) TN_ATTR(t, string, "seg_form", "packed");
}

static int compare(tnode *t, fr_tensor *got, int o, const char *name, double tol, const char *what)
{
    if (!t->out[o]) return 1;
    const double e = gpu_rel_err(got, t->out[o]);
    if (e <= tol) return 1;
    gpu_print_case(what, t);
    gpu_print_mismatch(name, got, t->out[o], e, tol);
    CU_FAIL("GPU flash attention output outside its tolerance");
    return 0;
}

static void same_bytes(tnode *t, fr_tensor **a, fr_tensor **b, const char *what)
{
    for (int o = 0; o < t->n_out; o++)
        if (a[o] && (!b[o] || memcmp(a[o]->data, b[o]->data, a[o]->nbytes) != 0)) {
            gpu_print_case(what, t);
            fprintf(stderr, "    output %d differs between two runs\n", o);
            CU_FAIL("GPU flash attention is not deterministic");
        }
}

static void run_case(fr_rng *r, const fcase *c)
{
    const int bf = c->prec[0] == 'b';
    const int64_t Tq = c->T, Tk = causal_of(c->kind) ? c->T : c->Tk;
    int64_t qd[5] = {2, 2, 2, Tq, c->D}, kd[5] = {2, 2, 1, Tk, c->D}, vd[5] = {2, 2, 1, Tk, c->Dv};
    fr_tensor *Q = tt_randn(r, FR_F32, 5, qd, 0, 1), *K = tt_randn(r, FR_F32, 5, kd, 0, 1),
              *V = tt_randn(r, FR_F32, 5, vd, 0, 1);
    const int segs = c->kind == K_PAD || c->kind == K_PACKED || c->kind == K_IDS || c->kind == K_ALL;
    /* padding: one row per Q first-dim index; the others one per problem (8 rows) */
    const int64_t rows = c->kind == K_PAD || c->kind == K_ALL ? 2 : 8;
    fr_tensor *Sk = segs ? seg_tensor(c, 0, rows, Tk) : NULL;
    fr_tensor *Sq = segs && c->kind != K_PAD && c->kind != K_ALL ? seg_tensor(c, 1, rows, Tq) : NULL;
    fr_tensor *M = c->kind == K_MASK || c->kind == K_ALL ? mask_tensor(Tq, Tk) : NULL;
    char what[200];
    snprintf(what, sizeof what, "flash %s %s D %lld Dv %lld Tq %lld Tk %lld", kind_name[c->kind], c->prec,
             (long long)c->D, (long long)c->Dv, (long long)Tq, (long long)Tk);
    const int softcap = c->kind == K_SOFTCAP || c->kind == K_ALL;
    const double tol = bf ? 1e-2 : 1e-5, ltol = bf && softcap ? 2e-3 : 1e-5;

    fr_tensor *ins[6] = {Q, K, V, M, Sk, Sq};
    const int n_in = Sq ? 6 : Sk ? 5 : M ? 4 : 3;
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, n_in, ins, 0u, 2);
    set_attrs(&f, c);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *g1[TN_MAX], *g2[TN_MAX];
    FR_ASSERT_OK(tn_run_gpu(&f, g1));
    compare(&f, g1[0], 0, "O", tol, what);
    compare(&f, g1[1], 1, "LSE", ltol, what);
    FR_ASSERT_OK(tn_run_gpu(&f, g2));
    same_bytes(&f, g1, g2, what);
    gpu_free_outputs(&f, g1);
    gpu_free_outputs(&f, g2);

    fr_tensor *dO = tt_randn(r, FR_F32, f.out[0]->rank, f.out[0]->dims, 0, 1);
    fr_tensor *bins[9] = {Q, K, V, f.out[0], f.out[1], dO, M, Sk, Sq};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, n_in + 3, bins, 0u, 3);
    set_attrs(&b, c);
    FR_ASSERT_OK(tn_run(&b));
    char bwhat[260];
    snprintf(bwhat, sizeof bwhat, "AttentionGrad of %s", what);
    FR_ASSERT_OK(tn_run_gpu(&b, g1));
    static const char *names[3] = {"dQ", "dK", "dV"};
    for (int o = 0; o < 3; o++) compare(&b, g1[o], o, names[o], tol, bwhat);
    FR_ASSERT_OK(tn_run_gpu(&b, g2));
    same_bytes(&b, g1, g2, bwhat);
    gpu_free_outputs(&b, g1);
    gpu_free_outputs(&b, g2);
    n_cases++;
    tn_free(&b);
    tn_free(&f);
    fr_tensor *all[] = {Q, K, V, dO, Sk, Sq, M};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}

static void test_bf16_kinds_dims(void)
{
    if (!gpu_available() || bench_only()) return;
    fr_rng r = fr_test_rng(__func__);
    static const int64_t Ds[5][2] = {{64, 64}, {128, 128}, {256, 256}, {80, 80}, {128, 64}};
    for (int di = 0; di < 5; di++)
        for (int k = 0; k < N_KINDS; k++) {
            const fcase c = {k, 200, 170, Ds[di][0], Ds[di][1], "bf16"};
            run_case(&r, &c);
        }
    const fcase odd = {K_CAUSAL, 33, 33, 40, 40, "bf16"}; /* D 40: the 64 kernel, one short tile */
    run_case(&r, &odd);
    /* T 700: five and more key tiles of 128, so every double buffer is refilled while a
       neighbour tile is read (a missing barrier shows here, not at T 200) */
    static const fcase longer[4] = {{K_CAUSAL, 700, 700, 128, 128, "bf16"},
                                    {K_ALL, 700, 700, 64, 64, "bf16"},
                                    {K_WINDOW, 700, 700, 256, 256, "bf16"},
                                    {K_MASK, 700, 650, 128, 64, "bf16"}};
    for (int i = 0; i < 4; i++) run_case(&r, &longer[i]);
    /* the Hopper kernels' tensor copies at their edges: K's second 64-column box wholly past D
       (D 64, Dv 128), D != Dv at a padded 256, fewer keys than one key tile, D 72, and at a
       padded 64 a V (D 64, Dv 32) or a Q/K (D 48, Dv 64) narrower than the tile */
    static const fcase edges[6] = {{K_CAUSAL, 200, 200, 64, 128, "bf16"}, {K_ALL, 200, 170, 256, 192, "bf16"},
                                   {K_CAUSAL, 50, 50, 128, 128, "bf16"},  {K_WINDOW, 200, 200, 72, 72, "bf16"},
                                   {K_ALL, 200, 170, 64, 32, "bf16"},     {K_CAUSAL, 200, 200, 48, 64, "bf16"}};
    for (int i = 0; i < 6; i++) run_case(&r, &edges[i]);
    /* head dim 64 on the mma.sync kernels too (what GPUs without sm_90a run; on Hopper the
       wgmma ones take it unless FP8RUN_FLASH_WGMMA=0, read at every launch) */
    CU_ASSERT_EQUAL_FATAL(setenv("FP8RUN_FLASH_WGMMA", "0", 1), 0);
    for (int k = 0; k < N_KINDS; k++) {
        const fcase c = {k, 200, 170, 64, 64, "bf16"};
        run_case(&r, &c);
    }
    unsetenv("FP8RUN_FLASH_WGMMA");
}

/* The same masks on the exact float32 path (precision fp32). */
static void test_fp32_kinds(void)
{
    if (!gpu_available() || bench_only()) return;
    fr_rng r = fr_test_rng(__func__);
    for (int k = 0; k < N_KINDS; k++) {
        const fcase c = {k, 90, 70, 64, 64, "fp32"};
        run_case(&r, &c);
    }
    const fcase wide = {K_ALL, 70, 70, 256, 256, "fp32"};
    run_case(&r, &wide);
}

/* AttentionQKV with softcap and segment ids (fp8run's kernels on its head-major copies), GQA,
 * D 96, bf16: O, LSE and dX against the CPU. */
static void test_qkv_segments(void)
{
    if (!gpu_available() || bench_only()) return;
    fr_rng r = fr_test_rng(__func__);
    const int64_t B = 2, T = 150, Hq = 4, Hk = 2, D = 96, W = (Hq + Hk) * D + Hk * D;
    for (int packed = 0; packed < 2; packed++) {
        const fcase c = {packed ? K_PACKED : K_PAD, T, T, D, D, "bf16"};
        fr_tensor *X = tt_randn(&r, FR_F32, 3, (int64_t[]){B, T, W}, 0, 1);
        fr_tensor *Sk = seg_tensor(&c, 0, B, T), *Sq = packed ? seg_tensor(&c, 1, B, T) : NULL;
        fr_tensor *ins[5] = {X, NULL, NULL, Sk, Sq};
        tnode f;
        tn_init_domain(&f, "ai.fp8run", "AttentionQKV", 1, Sq ? 5 : 4, ins, 0u, 2);
        TN_ATTR(&f, int, "heads", Hq);
        TN_ATTR(&f, int, "kv_heads", Hk);
        TN_ATTR(&f, int, "head_dim", D);
        set_attrs(&f, &c);
        TN_ATTR(&f, float, "softcap", 2.0f);
        FR_ASSERT_OK(tn_run(&f));
        fr_tensor *g[TN_MAX];
        FR_ASSERT_OK(tn_run_gpu(&f, g));
        compare(&f, g[0], 0, "O", 1e-2, "AttentionQKV segments");
        compare(&f, g[1], 1, "LSE", 2e-3, "AttentionQKV segments");
        gpu_free_outputs(&f, g);
        fr_tensor *dO = tt_randn(&r, FR_F32, f.out[0]->rank, f.out[0]->dims, 0, 1);
        fr_tensor *bins[8] = {X, f.out[0], f.out[1], dO, NULL, NULL, Sk, Sq};
        tnode b;
        tn_init_domain(&b, "ai.fp8run", "AttentionQKVGrad", 1, Sq ? 8 : 7, bins, 0u, 1);
        TN_ATTR(&b, int, "heads", Hq);
        TN_ATTR(&b, int, "kv_heads", Hk);
        TN_ATTR(&b, int, "head_dim", D);
        set_attrs(&b, &c);
        TN_ATTR(&b, float, "softcap", 2.0f);
        FR_ASSERT_OK(tn_run(&b));
        FR_ASSERT_OK(tn_run_gpu(&b, g));
        compare(&b, g[0], 0, "dX", 1e-2, "AttentionQKVGrad segments");
        gpu_free_outputs(&b, g);
        n_cases++;
        tn_free(&b);
        tn_free(&f);
        fr_tensor_free(dO);
        fr_tensor_free(X);
        fr_tensor_free(Sk);
        fr_tensor_free(Sq);
    }
}

/* ---- FR_FLASH_BENCH=1 ---- */

#ifdef FP8RUN_HAVE_CUDA
static void *dev_upload(const void *h, size_t bytes)
{
    void *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
    if (h) CU_ASSERT_EQUAL_FATAL(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
}

static float *dev_random(fr_rng *r, int64_t n)
{
    float *h = malloc((size_t)n * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    fr_rng_fill(r, h, n, -1.7f, 1.7f);
    float *d = dev_upload(h, (size_t)n * sizeof(float));
    free(h);
    return d;
}

static fr_tensor dev_tensor(fr_dtype dt, int rank, const int64_t *dims, void *data)
{
    fr_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    t.data = data;
    t.nbytes = (size_t)fr_tensor_numel(&t) * fr_dtype_size(dt);
    return t;
}

/* ms per run of t's node on c, or -1 when the node is refused (the message in why) */
static double time_node(fr_cuda_ctx *c, tnode *t, fr_tensor **in, int n_in, fr_tensor **out, int n_out, char *why,
                        size_t wn)
{
    const fr_node *n = tn_node(t);
    const fr_cuda_kernel_def *k = fr_cuda_kernel_find(n->domain, n->op_type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    size_t sb = 0;
    void *scratch = NULL;
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
    if (fr_cuda_kernel_scratch(k, &env, t->g, n, &sb) != FR_OK) { /* cuDNN refuses at planning */
        snprintf(why, wn, "%s", fr_last_error());
        fr_clear_error();
        return -1;
    }
    if (sb) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&scratch, sb), cudaSuccess);
    fr_cuda_kctx kc = {t->g, n, 1, n_in, n_out, in, out, c, scratch, sb, NULL, 0, NULL};
    double ms = -1;
    if (k->run(&kc) != FR_OK) {
        snprintf(why, wn, "%s", fr_last_error());
        fr_clear_error();
    } else {
        const int reps = 10;
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        FR_ASSERT_OK(k->run(&kc));
        cudaEventRecord(e0, c->stream);
        for (int i = 0; i < reps; i++) FR_ASSERT_OK(k->run(&kc));
        cudaEventRecord(e1, c->stream);
        CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
        float f = 0;
        cudaEventElapsedTime(&f, e0, e1);
        ms = f / reps;
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }
    if (scratch) cudaFree(scratch);
    return ms;
}

/* One bench row: D, mask kind (K_CAUSAL, K_WINDOW, K_PAD, K_SOFTCAP), both implementations. */
static void bench_row(fr_cuda_ctx *own, fr_cuda_ctx *dnn, int64_t D, int kind)
{
    const int64_t B = 8, H = 8, T = 2048, W = 512, pad = T / 4;
    fr_rng r = fr_test_rng("flash_bench");
    int64_t qd[4] = {B, H, T, D}, ld[3] = {B, H, T}, sd[2] = {B, T};
    const int64_t nq = B * H * T * D;
    float *q = dev_random(&r, nq), *k = dev_random(&r, nq), *v = dev_random(&r, nq), *dout = dev_random(&r, nq);
    float *o = dev_upload(NULL, (size_t)nq * 4), *lse = dev_upload(NULL, (size_t)(B * H * T) * 4);
    float *dq = dev_upload(NULL, (size_t)nq * 4), *dk = dev_upload(NULL, (size_t)nq * 4),
          *dv = dev_upload(NULL, (size_t)nq * 4);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)(B * T));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
    for (int64_t i = 0; i < B * T; i++) ids[i] = i % T < T - pad ? 1 : 0;
    void *sk = dev_upload(ids, sizeof(int64_t) * (size_t)(B * T));
    free(ids);
    /* useful (query, key) pairs per head */
    double pairs = 0;
    for (int64_t i = 0; i < T; i++) {
        int64_t hi = i + 1, lo = kind == K_WINDOW && i - W + 1 > 0 ? i - W + 1 : 0;
        if (kind == K_PAD && hi > T - pad) hi = T - pad;
        pairs += (double)(hi - lo);
    }
    const double flops = 4.0 * (double)(B * H) * pairs * (double)D;
    fr_tensor tq = dev_tensor(FR_F32, 4, qd, q), tk = dev_tensor(FR_F32, 4, qd, k), tv = dev_tensor(FR_F32, 4, qd, v),
              to = dev_tensor(FR_F32, 4, qd, o), tl = dev_tensor(FR_F32, 3, ld, lse),
              tdo = dev_tensor(FR_F32, 4, qd, dout), tdq = dev_tensor(FR_F32, 4, qd, dq),
              tdk = dev_tensor(FR_F32, 4, qd, dk), tdv = dev_tensor(FR_F32, 4, qd, dv),
              tsk = dev_tensor(FR_I64, 2, sd, sk);
    const int segs = kind == K_PAD;
    fr_tensor *fin[5] = {&tq, &tk, &tv, NULL, &tsk}, *fout[2] = {&to, &tl};
    fr_tensor *bin[8] = {&tq, &tk, &tv, &to, &tl, &tdo, NULL, &tsk}, *bout[3] = {&tdq, &tdk, &tdv};
    /* the CPU never runs these nodes: shapes only (tn_init_domain reads dims and dtypes) */
    tnode f, b;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, segs ? 5 : 3, fin, 0u, 2);
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, segs ? 8 : 6, bin, 0u, 3);
    tnode *both[2] = {&f, &b};
    for (int i = 0; i < 2; i++) {
        TN_ATTR(both[i], int, "causal", 1);
        TN_ATTR(both[i], string, "precision", "bf16");
        if (kind == K_WINDOW) TN_ATTR(both[i], int, "window", W);
        if (kind == K_SOFTCAP) TN_ATTR(both[i], float, "softcap", 50.f);
        if (segs) TN_ATTR(both[i], string, "seg_form", "padded");
    }
    fr_cuda_ctx *ctx[2] = {own, dnn};
    for (int i = 0; i < 2 && ctx[i]; i++) {
        char why[400] = "";
        const double fms = time_node(ctx[i], &f, fin, segs ? 5 : 3, fout, 2, why, sizeof why);
        const double bms = fms < 0 ? -1 : time_node(ctx[i], &b, bin, segs ? 8 : 6, bout, 3, why, sizeof why);
        if (fms < 0 || bms < 0)
            printf("    D %3lld %-8s %-7s refused: %.200s\n", (long long)D, kind_name[kind], i ? "cuDNN" : "fp8run",
                   why);
        else
            printf("    D %3lld %-8s %-7s forward %8.3f ms %6.1f TFLOP/s   backward %8.3f ms %6.1f TFLOP/s\n",
                   (long long)D, kind_name[kind], i ? "cuDNN" : "fp8run", fms, flops / (fms * 1e9), bms,
                   2.5 * flops / (bms * 1e9));
        fflush(stdout);
    }
    tn_free(&b);
    tn_free(&f);
    void *bufs[] = {q, k, v, dout, o, lse, dq, dk, dv, sk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}
#endif

static void test_bench(void)
{
    const char *e = getenv("FR_FLASH_BENCH");
    const int causal_only = bench_only(); /* one kernel per head dim: profilers */
    if (!e || (strcmp(e, "1") != 0 && !causal_only) || !gpu_available()) return;
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *own = NULL, *dnn = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &own));
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &dnn));
    if (fr_cuda_ctx_set_attention(dnn, "cudnn") != FR_OK) {
        printf("\n    (no cuDNN: %s)", fr_last_error());
        fr_clear_error();
        fr_cuda_ctx_free(dnn);
        dnn = NULL;
    }
    printf("\n    B 8, H 8, T 2048, bf16; TFLOP/s of useful work (fwd 4 pairs D, bwd 2.5x)\n");
    static const int64_t Ds[3] = {64, 128, 256};
    static const int kinds[4] = {K_CAUSAL, K_WINDOW, K_PAD, K_SOFTCAP};
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < (causal_only ? 1 : 4); ki++) bench_row(own, dnn, Ds[di], kinds[ki]);
    fr_cuda_ctx_free(own);
    if (dnn) fr_cuda_ctx_free(dnn);
#endif
}

static void test_report(void)
{
    if (!gpu_available() || bench_only()) return;
    printf("\n    %d flash attention cases (forward + backward, each run twice) matched the CPU\n", n_cases);
    CU_ASSERT(n_cases == 5 * N_KINDS + 1 + 4 + 6 + N_KINDS + N_KINDS + 1 + 2);
}

static CU_TestInfo tests[] = {
    {"bf16 tensor cores: every mask kind x D 64, 128, 256, 80, 128/64; deterministic", test_bf16_kinds_dims},
    {"float32 exact path: every mask kind", test_fp32_kinds},
    {"AttentionQKV with softcap and segment ids (padded, packed), bf16", test_qkv_segments},
    {"FR_FLASH_BENCH=1: TFLOP/s vs cuDNN at B8 H8 T2048", test_bench},
    {"case count", test_report},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_flash", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
