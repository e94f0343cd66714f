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
 * Beyond those (cuDNN only, against the float64 reference at the same tolerances): head dims
 * 160 and 256, D != Dv (192/128, 128/64, 64/256), sliding windows (2, 8, 64, longer than T),
 * softcap (causal or not, GQA), key padding (Sk = HF's attention_mask, Sq absent: exact; Sk =
 * Sq padded sequences: rows past a length, which cuDNN skips, compared as 0 with dO 0 there),
 * and their mixes (Gemma2's D256 + window + softcap, with padding); packed sequences (Sk = Sq,
 * seg_form packed) as cuDNN's variable-length sequences: windows of several examples of random
 * lengths (length 1 among them), a window that is one example, a padding tail, D 64, 128, 256,
 * GQA and MQA, a window, the deterministic backward; every row compared. Backwards cuDNN is not
 * trusted with (a window of one key; a window with cuDNN <= 9.15's padding workaround) are
 * refused under --attention cudnn and run by fp8run's kernels under auto, checked within 2e-2.
 * Also: --attention cudnn refuses, naming the node, what cuDNN does not take (fp32 precision,
 * a one-key backward); --attention auto runs fp8run's kernels there and says why.
 * Skips, saying why, without a GPU or without a loadable cuDNN 9.
 *
 * FR_ATTN_BENCH=1 adds timings (CUDA events) of cuDNN and fp8run's kernels at the reference
 * shapes, Llama 1B (B 8, H 16, KV 8, T 2048, D 128) and 125M (B 16, H 12, KV 4, T 1024, D 64),
 * causal bf16, in TFLOP/s of useful work (forward 4 B H T^2 D / 2, backward 2.5 x), the float32
 * <-> bf16 conversions around cuDNN included, and the same nodes on packed rows (4 examples of
 * T/4: cuDNN's variable-length form with its token-major copies); then cuDNN's SDPA itself (bf16 I/O) at B8 T2048,
 * H x D = 2048, D 64, 128, 256, for causal, causal + window 512, causal + padded sequences of
 * lengths 1024..2048, causal + softcap 50, causal packed sequences (4 examples of 512 per row):
 * TFLOP/s of the (query, key) pairs the mask keeps.
 * FR_ATTN_PROBE=1 prints which problems this cuDNN plans (head dims, D != Dv, masks, softcap;
 * forward, backward, deterministic backward). */
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

/* ---- head dims up to 256, D != Dv, sliding window, softcap, key padding ---- */

#ifdef FP8RUN_HAVE_CUDA
typedef struct ncase {
    int64_t b, h, kv, t, d, dv;
    int causal;
    int64_t window;
    float softcap;
    int pad; /* 0: none; 1: Sk = key mask, Sq absent (HF padding); 2: Sk = Sq (padded sequences);
              * 3: Sk = Sq packed sequences (ids 1, 1, 2, 2, 2, .., then 0 padding); 4: packed as SFT
              * windows are (window 0 one example; the others examples of random lengths 1 .. t/3, a
              * third of them of length 1, then a padding tail) */
    const char *name;
} ncase;

static int n_new, n_refused, n_fallback;
static fr_cuda_ctx *g_auto_new; /* --attention auto for the refused backwards */

/* Q [b, kv, g, t, d] with K/V [b, kv, 1, t, d|dv] (kv == h: [b, h, t, d]); Sk [b, t] int32. */
static fr_tensor *rnd(fr_rng *r, int rank, const int64_t *d) { return tt_randn(r, FR_F32, rank, d, 0, 1); }

static void set_new_attrs(tnode *t, const ncase *c, const char *prec)
{
    set_attrs(t, c->causal, prec);
    if (c->window) TN_ATTR(t, int, "window", c->window);
    if (c->softcap > 0) TN_ATTR(t, float, "softcap", c->softcap);
    if (c->pad) TN_ATTR(t, string, "seg_form", c->pad >= 3 ? "packed" : "padded");
}

/* Rows (of [rows, w] seen flat over the batch dims, t rows per problem) past the length of
 * their sequence zeroed: where the contract and cuDNN differ on query padding (Sk = Sq). */
static void zero_pad_rows(fr_tensor *x, int64_t t, int64_t w, int64_t per_seq, const int64_t *len)
{
    const int64_t rows = fr_tensor_numel(x) / w;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t seq = r / t / per_seq, i = r % t;
        if (i < len[seq]) continue;
        for (int64_t j = 0; j < w; j++) {
            if (x->dtype == FR_F64) ((double *)x->data)[r * w + j] = 0;
            else ((float *)x->data)[r * w + j] = 0;
        }
    }
}

/* The L2 norm of a float32 tensor. */
static double l2(const fr_tensor *x)
{
    double s = 0;
    for (int64_t i = 0; i < fr_tensor_numel(x); i++) s += (double)((const float *)x->data)[i] * ((const float *)x->data)[i];
    return sqrt(s);
}

/* Runs t on cuDNN: 1 when cuDNN ran it, 0 when it refused (reported; an error unless allowed). */
static int try_dnn(tnode *t, fr_tensor **out, const char *what, int must)
{
    const long long dn = g_dnn->attn_runs_cudnn;
    const fr_status st = tn_run_gpu_on(g_dnn, t, out);
    if (st == FR_ERR_UNSUPPORTED && !must) {
        printf("\n    cuDNN refuses %s: %s", what, fr_last_error());
        n_refused++;
        return 0;
    }
    if (st != FR_OK) fprintf(stderr, "\n    %s: %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    CU_ASSERT_EQUAL(g_dnn->attn_runs_cudnn, dn + 1);
    return 1;
}

static void run_new(fr_rng *r, const ncase *c, int must)
{
    const int64_t g = c->h / c->kv;
    const int gqa = c->kv != c->h;
    int64_t qd[5] = {c->b, c->kv, g, c->t, c->d}, kd[5] = {c->b, c->kv, 1, c->t, c->d},
            vd[5] = {c->b, c->kv, 1, c->t, c->dv}, q4[4] = {c->b, c->h, c->t, c->d}, v4[4] = {c->b, c->h, c->t, c->dv};
    const int rank = gqa ? 5 : 4;
    fr_tensor *Q = rnd(r, rank, gqa ? qd : q4), *K = rnd(r, rank, gqa ? kd : q4), *V = rnd(r, rank, gqa ? vd : v4);
    int64_t len[16];
    fr_tensor *Sk = NULL;
    if (c->pad) {
        const int64_t sd[2] = {c->b, c->t};
        FR_ASSERT_OK(fr_tensor_new(FR_I32, 2, sd, "Sk", &Sk));
        for (int64_t b = 0; c->pad == 4 && b < c->b; b++) {
            int32_t *row = (int32_t *)Sk->data + b * c->t, id = 0;
            int64_t j = 0;
            const int64_t used = b == 0 ? c->t : c->t - (int64_t)(fr_rng_uniform(r) * (double)(c->t / 4));
            while (j < used) {
                int64_t n = b == 0 ? c->t : fr_rng_uniform(r) < 0.33 ? 1 : 1 + (int64_t)(fr_rng_uniform(r) * (double)(c->t / 3));
                if (n > used - j) n = used - j;
                id++;
                for (int64_t e = 0; e < n; e++) row[j++] = id;
            }
            for (; j < c->t; j++) row[j] = 0;
        }
        for (int64_t b = 0; c->pad != 4 && b < c->b; b++) {
            len[b] = b == 0 ? c->t : 1 + (int64_t)(fr_rng_uniform(r) * (double)(c->t - 1)); /* 1 .. t */
            int32_t id = 1;
            for (int64_t j = 0; j < c->t; j++) {
                if (c->pad == 3 && j > 0 && j < len[b] && fr_rng_uniform(r) < 4.0 / (double)c->t) id++;
                ((int32_t *)Sk->data)[b * c->t + j] = j < len[b] ? (c->pad == 3 ? id : 1) : 0;
            }
        }
    }
    char what[256];
    snprintf(what, sizeof what, "%s (B%lld H%lld KV%lld T%lld D%lld Dv%lld causal=%d window=%lld softcap=%g pad=%d)",
             c->name, (long long)c->b, (long long)c->h, (long long)c->kv, (long long)c->t, (long long)c->d,
             (long long)c->dv, c->causal, (long long)c->window, (double)c->softcap, c->pad);
    const int with_sq = c->pad >= 2;
    fr_tensor *ins[6] = {Q, K, V, NULL, Sk, with_sq ? Sk : NULL};
    const int n_in = with_sq ? 6 : c->pad ? 5 : 3;
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, n_in, ins, 0u, 2);
    set_new_attrs(&f, c, "bf16");
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *dn[TN_MAX];
    const int ran = try_dnn(&f, dn, what, must);
    fr_tensor *Q64 = bf16_f64(Q), *K64 = bf16_f64(K), *V64 = bf16_f64(V);
    fr_tensor *r_ins[6] = {Q64, K64, V64, NULL, Sk, with_sq ? Sk : NULL};
    tnode rf;
    tn_init_domain(&rf, "ai.fp8run", "Attention", 1, n_in, r_ins, 0u, 2);
    set_new_attrs(&rf, c, "fp32");
    FR_ASSERT_OK(tn_run(&rf));
    fr_tensor *dO = tt_randn(r, FR_F32, rf.out[0]->rank, rf.out[0]->dims, 0, 1);
    const int64_t per_seq = c->h; /* rows of one sequence: heads x t */
    if (c->pad == 2) zero_pad_rows(dO, c->t, c->dv, per_seq, len); /* padding rows feed no loss */
    fr_tensor *dO64 = bf16_f64(dO);
    if (ran) {
        if (c->pad == 2) { /* query padding: outputs nobody reads (see attention_cudnn_node.cu) */
            zero_pad_rows(dn[0], c->t, c->dv, per_seq, len), zero_pad_rows(rf.out[0], c->t, c->dv, per_seq, len);
            zero_pad_rows(dn[1], c->t, 1, per_seq, len), zero_pad_rows(rf.out[1], c->t, 1, per_seq, len);
        }
        expect_close(dn[0], rf.out[0], TOL_REF, "O", "float64", what);
        expect_close(dn[1], rf.out[1], TOL_LSE, "LSE", "float64", what);
        /* backward from cuDNN's O and LSE (the reference from its own) */
        fr_tensor *bins[9] = {Q, K, V, dn[0], dn[1], dO, NULL, Sk, with_sq ? Sk : NULL};
        tnode b;
        tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, n_in + 3, bins, 0u, 3);
        set_new_attrs(&b, c, "bf16");
        FR_ASSERT_OK(tn_run(&b));
        fr_tensor *gdn[TN_MAX];
        const int bran = try_dnn(&b, gdn, what, must);
        fr_tensor *rb_ins[9] = {Q64, K64, V64, rf.out[0], rf.out[1], dO64, NULL, Sk, with_sq ? Sk : NULL};
        tnode rb;
        tn_init_domain(&rb, "ai.fp8run", "AttentionGrad", 1, n_in + 3, rb_ins, 0u, 3);
        set_new_attrs(&rb, c, "fp32");
        FR_ASSERT_OK(tn_run(&rb));
        static const char *names[3] = {"dQ", "dK", "dV"};
        if (bran && c->window == 1) {
            /* one key per row: softmax has no gradient, dQ = dK = 0 exactly in the reference (a
             * relative error means nothing); cuDNN's (bf16 O in Delta) must be small against dV */
            expect_close(gdn[2], rb.out[2], TOL_REF, "dV", "float64", what);
            const double dv = l2(gdn[2]);
            for (int o = 0; o < 2; o++)
                if (l2(gdn[o]) > TOL_REF * dv) {
                    fprintf(stderr, "\n    %s: %s: L2 %.3g > %g x dV's %.3g (0 in exact math)\n", what, names[o],
                            l2(gdn[o]), TOL_REF, dv);
                    CU_FAIL("cuDNN attention outside its tolerance");
                }
            n_new++;
        } else if (bran) {
            for (int o = 0; o < 3; o++) expect_close(gdn[o], rb.out[o], TOL_REF, names[o], "float64", what);
            n_new++;
        } else { /* refused: --attention auto runs it on fp8run's kernels, from cuDNN's forward */
            gpu_free_outputs(&b, gdn);
            if (!g_auto_new) { /* its own context: the refusal test reads g_auto's first note */
                FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_auto_new));
                FR_ASSERT_OK(fr_cuda_ctx_set_attention(g_auto_new, "auto"));
            }
            const long long own = g_auto_new->attn_runs_own;
            FR_ASSERT_OK(tn_run_gpu_on(g_auto_new, &b, gdn));
            CU_ASSERT_EQUAL(g_auto_new->attn_runs_own, own + 1);
            for (int o = 0; o < 3; o++) expect_close(gdn[o], rb.out[o], TOL_OWN, names[o], "float64", what);
            n_fallback++;
        }
        gpu_free_outputs(&b, gdn);
        tn_free(&rb);
        tn_free(&b);
    }
    gpu_free_outputs(&f, dn);
    tn_free(&rf);
    tn_free(&f);
    fr_tensor *all[] = {Q, K, V, dO, Q64, K64, V64, dO64, Sk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}
#endif

/* Packed sequences (seg_form packed, Sk = Sq) as cuDNN's variable-length sequences, forward
 * and backward against the float64 reference (O, dQ, dK, dV 1e-2, LSE 1e-4, every row: the
 * padding tail is a sequence too): head dims 64, 128, 256, MHA, GQA, MQA, T a multiple of 128
 * and not, a window; the deterministic backward on one. Every run cuDNN's. */
static void test_packed_sequences(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!dnn_available()) return;
    if (fr_cudnn_version() < 90600 || g_dnn->cc_major < 9) {
        printf("\n    SKIP: cuDNN %zu on compute capability %d: packed sequences need cuDNN 9.6 and Hopper",
               fr_cudnn_version(), g_dnn->cc_major);
        return;
    }
    fr_rng r = fr_test_rng("gpu_attention_cudnn_packed");
    static const ncase cases[] = {
        {3, 4, 4, 256, 64, 64, 1, 0, 0, 4, "packed, D64"},
        {3, 4, 2, 200, 128, 128, 1, 0, 0, 4, "packed, D128, GQA"},
        {4, 8, 2, 384, 128, 128, 1, 0, 0, 4, "packed, GQA, 4 windows"},
        {2, 4, 2, 256, 128, 128, 1, 64, 0, 4, "packed, window 64"},
        {3, 2, 2, 200, 64, 64, 1, 0, 0, 3, "packed, random ids"},
    };
    const int before = n_new;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_new(&r, &cases[i], 1);
    g_dnn->deterministic = 1; /* its own plans (the problem key carries it) */
    run_new(&r, &cases[1], 1);
    g_dnn->deterministic = 0;
    printf("\n    %d packed cases (forward + backward) on cuDNN matched the float64 reference", n_new - before);
    CU_ASSERT_EQUAL(n_new - before, (int)(sizeof cases / sizeof cases[0]) + 1);
    /* head dim 256: cuDNN 9.14's variable-length backward was seen wrong there, so it is refused
     * and runs on fp8run's kernels (optional: a later cuDNN may be taken again) */
    static const ncase d256 = {2, 4, 1, 130, 256, 256, 1, 0, 0, 4, "packed, D256, MQA"};
    run_new(&r, &d256, 0);
#endif
}

static void test_new_cases(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!dnn_available()) return;
    fr_rng r = fr_test_rng("gpu_attention_cudnn_new");
    static const ncase must[] = {
        {2, 2, 2, 130, 256, 256, 1, 0, 0, 0, "head dim 256, causal, T not a multiple of 64"},
        {1, 4, 2, 256, 256, 256, 0, 0, 0, 0, "head dim 256, GQA"},
        {2, 2, 2, 96, 160, 160, 1, 0, 0, 0, "head dim 160"},
        {2, 4, 2, 256, 128, 128, 1, 64, 0, 0, "sliding window 64, GQA"},
        {2, 2, 2, 256, 64, 64, 1, 2, 0, 0, "sliding window 2"},
        {2, 2, 2, 256, 64, 64, 1, 8, 0, 0, "sliding window 8"},
        {2, 2, 2, 200, 64, 64, 1, 1, 0, 0, "sliding window 1 (the diagonal only)"},
        {1, 2, 2, 130, 256, 256, 1, 500, 0, 0, "sliding window longer than T"},
        {2, 2, 2, 256, 128, 128, 1, 0, 0, 1, "key padding (HF attention_mask), causal"},
        {3, 2, 2, 200, 64, 64, 0, 0, 0, 1, "key padding, not causal"},
        {3, 4, 2, 256, 128, 128, 1, 0, 0, 2, "padded sequences (Sk = Sq), GQA"},
    };
    static const ncase maybe[] = {
        {2, 2, 2, 200, 64, 64, 1, 0, 2.0f, 0, "softcap 2, causal"},
        {2, 4, 2, 256, 128, 128, 0, 0, 5.0f, 0, "softcap 5, GQA, not causal"},
        {2, 2, 2, 130, 256, 256, 1, 64, 3.0f, 0, "Gemma2-like: D256, window, softcap"},
        {2, 2, 2, 256, 256, 256, 1, 100, 0, 2, "D256, window, padded sequences"},
        {2, 2, 2, 256, 256, 256, 1, 100, 4.0f, 2, "D256, window, softcap, padded sequences"},
        {2, 2, 2, 130, 192, 128, 1, 0, 0, 0, "D 192 != Dv 128"},
        {2, 2, 2, 130, 128, 64, 1, 0, 0, 0, "D 128 != Dv 64"},
        {2, 2, 2, 130, 64, 256, 1, 0, 0, 0, "D 64 != Dv 256"},
        /* with cuDNN <= 9.15's padding workaround (T not a multiple of 128) */
        {2, 2, 2, 200, 64, 64, 1, 8, 0, 0, "sliding window 8, T 200"},
        /* packed sequences as variable-length sequences (cuDNN 9.6+ on Hopper) */
        {3, 2, 2, 200, 64, 64, 1, 0, 0, 3, "packed sequences, causal"},
        {2, 4, 2, 256, 128, 128, 0, 0, 0, 3, "packed sequences, GQA, not causal"},
        {2, 2, 2, 256, 256, 256, 1, 100, 4.0f, 3, "D256, window, softcap, packed sequences"},
    };
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) run_new(&r, &must[i], 1);
    const int before = n_new;
    for (size_t i = 0; i < sizeof maybe / sizeof maybe[0]; i++) run_new(&r, &maybe[i], 0);
    if (g_auto_new) fr_cuda_ctx_free(g_auto_new), g_auto_new = NULL;
    printf("\n    %d cases (forward + backward) on cuDNN matched the float64 reference; %d refusals among %d "
           "optional ones (%d backwards then run by fp8run's kernels within %g)\n", n_new, n_refused,
           (int)(sizeof maybe / sizeof maybe[0]), n_fallback, TOL_OWN);
    CU_ASSERT_EQUAL(before, (int)(sizeof must / sizeof must[0]));
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

/* n floats of device memory, left unset (outputs) */
static float *dev_empty(int64_t n)
{
    float *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d, (size_t)n * sizeof(float)), cudaSuccess);
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
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
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
    float *o = dev_empty(nq), *lse = dev_empty(B * H * T), *dq = dev_empty(nq), *dk = dev_empty(nk), *dv = dev_empty(nk);
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
    /* packed: 4 examples of T/4 a row as the nodes run them in SFT (variable-length sequences, 5
       slots a window as sft_max_examples 4 sizes them; the token-major copies included) */
    int32_t *hs = malloc((size_t)(B * T) * 4), *seg = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(hs);
    for (int64_t i = 0; i < B * T; i++) hs[i] = (int32_t)(1 + (i % T) / (T / 4));
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&seg, (size_t)(B * T) * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(seg, hs, (size_t)(B * T) * 4, cudaMemcpyHostToDevice), cudaSuccess);
    free(hs);
    int64_t sd[2] = {B, T};
    fr_tensor ts = dev_tensor(2, sd, seg);
    ts.dtype = FR_I32;
    fr_tensor *pfin[6] = {&tq, &tk, &tv, NULL, &ts, &ts}, *pbin[9] = {&tq, &tk, &tv, &to, &tl, &tdo, NULL, &ts, &ts};
    tnode pf, pb;
    tn_init_domain(&pf, "ai.fp8run", "Attention", 1, 6, pfin, 0u, 2);
    set_attrs(&pf, 1, "bf16");
    TN_ATTR(&pf, string, "seg_form", "packed");
    tn_init_domain(&pb, "ai.fp8run", "AttentionGrad", 1, 9, pbin, 0u, 3);
    set_attrs(&pb, 1, "bf16");
    TN_ATTR(&pb, string, "seg_form", "packed");
    const int64_t keep = g_dnn->ragged_per_window;
    g_dnn->ragged_per_window = 5;
    const double pflops = flops / 4, pfms = time_node(g_dnn, &pf, pfin, 6, fout, 2, 10);
    const double pbms = time_node(g_dnn, &pb, pbin, 9, bout, 3, 10);
    g_dnn->deterministic = 1; /* the backward without the float32 dQ accumulator (its own plan) */
    const double dbms = time_node(g_dnn, &pb, pbin, 9, bout, 3, 10);
    g_dnn->deterministic = 0;
    g_dnn->ragged_per_window = keep;
    printf("    %s cuDNN   packed 4 x T/4: forward %8.3f ms %6.1f TFLOP/s, backward %8.3f ms %6.1f TFLOP/s "
           "(deterministic %8.3f ms)\n", name, pfms, pflops / (pfms * 1e9), pbms, 2.5 * pflops / (pbms * 1e9), dbms);
    /* fp8run's kernels on the same packed rows: they skip the key tiles outside a block's segments */
    const double ofms = time_node(own, &pf, pfin, 6, fout, 2, 10), obms = time_node(own, &pb, pbin, 9, bout, 3, 10);
    printf("    %s fp8run  packed 4 x T/4: forward %8.3f ms %6.1f TFLOP/s, backward %8.3f ms %6.1f TFLOP/s\n", name,
           ofms, pflops / (ofms * 1e9), obms, 2.5 * pflops / (obms * 1e9));
    tn_free(&pb);
    tn_free(&pf);
    cudaFree(seg);
    fflush(stdout);
    fr_cuda_ctx_free(own);
    tn_free(&b);
    tn_free(&f);
    float *bufs[] = {q, k, v, dout, o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}
#endif

#ifdef FP8RUN_HAVE_CUDA
/* n random bf16 values (uniform in [-1.7, 1.7)) on the device */
static void *dev_bf16(fr_rng *r, int64_t n)
{
    uint16_t *h = malloc((size_t)n * 2);
    void *d = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    for (int64_t i = 0; i < n; i++) h[i] = fr_f32_to_bf16((float)(3.4 * fr_rng_uniform(r) - 1.7));
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d, (size_t)n * 2), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    free(h);
    return d;
}

/* ms per fr_cudnn_sdpa_run of p (two warm-up runs, then reps), or -1 (refused: why printed) */
static double time_sdpa(const fr_cudnn_sdpa *p, fr_cudnn_sdpa_io *io, int reps)
{
    size_t ws = 0;
    if (fr_cudnn_sdpa_prepare(g_dnn, p, &ws) != FR_OK) {
        printf("      refused: %s\n", fr_last_error());
        return -1;
    }
    void *w = NULL;
    if (ws) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&w, ws), cudaSuccess);
    io->workspace = w, io->workspace_bytes = ws;
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    for (int i = 0; i < 2; i++) FR_ASSERT_OK(fr_cudnn_sdpa_run(g_dnn, p, io));
    CU_ASSERT_EQUAL(cudaEventRecord(e0, g_dnn->stream), cudaSuccess);
    for (int i = 0; i < reps; i++) FR_ASSERT_OK(fr_cudnn_sdpa_run(g_dnn, p, io));
    CU_ASSERT_EQUAL(cudaEventRecord(e1, g_dnn->stream), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    if (w) cudaFree(w);
    return ms / reps;
}

/* fp8run's kernels on one mask kind of bench_masks (0 causal, 1 window W, 2 padding with the
 * lengths hlen, 3 softcap 50, 4 packed ids seg): the Attention and AttentionGrad nodes on
 * float32 [B, H, T, D] tensors (their bf16 roundings of K and V included), ms into *fms, *bms. */
static void own_masks(int kind, int64_t B, int64_t H, int64_t T, int64_t D, int64_t W, const int32_t *hlen,
                      const int32_t *dseg, double *fms, double *bms)
{
    fr_rng r = fr_test_rng("own_masks");
    const int64_t n = B * H * T * D, qd[5] = {B, H, 1, T, D}, ld[4] = {B, H, 1, T}, sd[2] = {B, T};
    float *q = dev_random(&r, n), *k = dev_random(&r, n), *v = dev_random(&r, n), *dout = dev_random(&r, n);
    float *o = dev_empty(n), *lse = dev_empty(B * H * T), *dq = dev_empty(n), *dk = dev_empty(n), *dv = dev_empty(n);
    int32_t *ids = NULL; /* padding: 1 on the first hlen[b] tokens of row b, 0 after; packed: dseg */
    if (kind == 2) {
        int32_t *h = malloc((size_t)(B * T) * 4);
        CU_ASSERT_PTR_NOT_NULL_FATAL(h);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) h[b * T + t] = t < hlen[b] ? 1 : 0;
        CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&ids, (size_t)(B * T) * 4), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMemcpy(ids, h, (size_t)(B * T) * 4, cudaMemcpyHostToDevice), cudaSuccess);
        free(h);
    }
    fr_tensor tq = dev_tensor(5, qd, q), tk = dev_tensor(5, qd, k), tv = dev_tensor(5, qd, v), to = dev_tensor(5, qd, o),
              tl = dev_tensor(4, ld, lse), tdo = dev_tensor(5, qd, dout), tdq = dev_tensor(5, qd, dq),
              tdk = dev_tensor(5, qd, dk), tdv = dev_tensor(5, qd, dv);
    fr_tensor ts = dev_tensor(2, sd, kind == 2 ? (void *)ids : (void *)dseg);
    ts.dtype = FR_I32;
    const int segs = kind == 2 || kind == 4;
    fr_tensor *fin[6] = {&tq, &tk, &tv, NULL, &ts, &ts}, *fout[2] = {&to, &tl};
    fr_tensor *bin[9] = {&tq, &tk, &tv, &to, &tl, &tdo, NULL, &ts, &ts}, *bout[3] = {&tdq, &tdk, &tdv};
    tnode f, b;
    tn_init_domain(&f, "ai.fp8run", "Attention", 1, segs ? 6 : 3, fin, 0u, 2);
    tn_init_domain(&b, "ai.fp8run", "AttentionGrad", 1, segs ? 9 : 6, bin, 0u, 3);
    tnode *both[2] = {&f, &b};
    for (int i = 0; i < 2; i++) {
        set_attrs(both[i], 1, "bf16");
        if (kind == 1) TN_ATTR(both[i], int, "window", W);
        if (kind == 3) TN_ATTR(both[i], float, "softcap", 50.0f);
        if (segs) TN_ATTR(both[i], string, "seg_form", kind == 2 ? "padded" : "packed");
    }
    fr_cuda_ctx *own = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &own));
    *fms = time_node(own, &f, fin, segs ? 6 : 3, fout, 2, 5);
    *bms = time_node(own, &b, bin, segs ? 9 : 6, bout, 3, 5);
    fr_cuda_ctx_free(own);
    tn_free(&b);
    tn_free(&f);
    float *bufs[] = {q, k, v, dout, o, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    if (ids) cudaFree(ids);
}

/* cuDNN's SDPA itself (bf16 in and out, no conversions) at B8 T2048, H x D = 2048: TFLOP/s of
 * the work the mask leaves (4 D per kept (query, key) pair forward, 2.5 x that backward); then
 * fp8run's kernels on the same problem (own_masks: node level, float32 in and out). */
static void bench_masks(int64_t D)
{
    const int64_t B = 8, T = 2048, H = 2048 / D, W = 512;
    fr_rng r = fr_test_rng("bench_masks");
    const int64_t n = B * H * T * D, rows = B * H * T;
    void *q = dev_bf16(&r, n), *k = dev_bf16(&r, n), *v = dev_bf16(&r, n), *o = dev_bf16(&r, n),
         *dout = dev_bf16(&r, n), *dq = dev_bf16(&r, n), *dk = dev_bf16(&r, n), *dv = dev_bf16(&r, n);
    float *stats = NULL;
    int32_t *seq = NULL, hlen[2 * 8];
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&stats, (size_t)rows * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&seq, 2 * 64), cudaSuccess);
    double pad_pairs = 0; /* padded sequences of lengths T/2 .. T (Sk = Sq), causal */
    for (int b = 0; b < 8; b++) {
        hlen[b] = (int32_t)(T / 2 + (T / 2) * b / 7);
        hlen[8 + b] = hlen[b];
        pad_pairs += (double)hlen[b] * (double)(hlen[b] + 1) / 2;
    }
    int32_t hseq[32] = {0};
    memcpy(hseq, hlen, 8 * 4), memcpy(hseq + 16, hlen + 8, 8 * 4); /* seq_q at 0, seq_kv at 64 bytes */
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(seq, hseq, sizeof hseq, cudaMemcpyHostToDevice), cudaSuccess);
    int32_t *seg = NULL, *hseg = malloc((size_t)(B * T) * 4); /* packed: 4 examples of T/4 per row */
    CU_ASSERT_PTR_NOT_NULL_FATAL(hseg);
    for (int64_t i = 0; i < B * T; i++) hseg[i] = (int32_t)(1 + (i % T) / (T / 4));
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&seg, (size_t)(B * T) * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(seg, hseg, (size_t)(B * T) * 4, cudaMemcpyHostToDevice), cudaSuccess);
    free(hseg);
    const double packed_pairs = 4.0 * (double)(T / 4) * (double)(T / 4 + 1) / 2;
    const double causal_pairs = (double)T * (double)(T + 1) / 2;
    const double window_pairs = (double)W * (double)(W + 1) / 2 + (double)(T - W) * (double)W;
    static const char *kinds[5] = {"causal", "window 512", "padding", "softcap 50", "packed 4"};
    for (int kind = 0; kind < 5; kind++) {
        fr_cudnn_sdpa p;
        memset(&p, 0, sizeof p);
        p.b = B, p.hq = H, p.hk = H, p.tq = T, p.tk = T, p.d = D, p.dv = D;
        const int64_t st[4] = {H * T * D, T * D, D, 1};
        memcpy(p.sq, st, sizeof st), memcpy(p.sk, st, sizeof st), memcpy(p.sv, st, sizeof st), memcpy(p.so, st, sizeof st);
        p.causal = 1;
        p.window = kind == 1 ? W : 0;
        p.padded = kind == 2;
        p.softcap = kind == 3 ? 50.0f : 0;
        p.segments = kind == 4;
        const double pairs =
            (kind == 1 ? window_pairs : kind == 2 ? pad_pairs / B : kind == 4 ? packed_pairs : causal_pairs) *
            (double)(B * H);
        const double flops = 4.0 * (double)D * pairs;
        fr_cudnn_sdpa_io io;
        memset(&io, 0, sizeof io);
        io.q = q, io.k = k, io.v = v, io.o = o, io.stats = stats, io.dout = dout, io.dq = dq, io.dk = dk, io.dv = dv;
        io.seq_q = seq, io.seq_kv = seq + 16;
        io.seg_q = seg, io.seg_kv = seg;
        io.scale = 1.0f / sqrtf((float)D);
        const double fms = time_sdpa(&p, &io, 10);
        p.backward = 1;
        const double bms = fms > 0 ? time_sdpa(&p, &io, 10) : -1;
        printf("    cuDNN B8 T2048 H%-2lld D%-3lld %-10s forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms %6.1f "
               "TFLOP/s\n", (long long)H, (long long)D, kinds[kind], fms, fms > 0 ? flops / (fms * 1e9) : 0, bms,
               bms > 0 ? 2.5 * flops / (bms * 1e9) : 0);
        double ofms = 0, obms = 0;
        own_masks(kind, B, H, T, D, W, hlen, seg, &ofms, &obms);
        printf("    fp8run B8 T2048 H%-2lld D%-3lld %-10s forward %7.3f ms %6.1f TFLOP/s, backward %7.3f ms %6.1f "
               "TFLOP/s\n", (long long)H, (long long)D, kinds[kind], ofms, flops / (ofms * 1e9), obms,
               2.5 * flops / (obms * 1e9));
        fflush(stdout);
    }
    void *bufs[] = {q, k, v, o, dout, dq, dk, dv, stats, seq, seg};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

/* FR_ATTN_PROBE=1: which problems this cuDNN builds a plan for (B2 H4 T512; head dims, D != Dv,
 * masks, softcap), forward and backward, default and deterministic engines. */
static void probe(void)
{
    static const struct {
        int64_t d, dv, window;
        float softcap;
        int padded;
    } cs[] = {
        {64, 64, 0, 0, 0},    {128, 128, 0, 0, 0},  {160, 160, 0, 0, 0},  {192, 192, 0, 0, 0}, {256, 256, 0, 0, 0},
        {192, 128, 0, 0, 0},  {128, 64, 0, 0, 0},   {64, 256, 0, 0, 0},   {256, 128, 0, 0, 0}, {128, 128, 128, 0, 0},
        {256, 256, 128, 0, 0}, {128, 128, 0, 30, 0}, {256, 256, 0, 30, 0}, {128, 128, 0, 0, 1}, {256, 256, 0, 0, 1},
        {256, 256, 128, 30, 0}, {256, 256, 128, 0, 1}, {256, 256, 128, 30, 1},
    };
    fr_cuda_ctx *det = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &det));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(det, "cudnn"));
    det->deterministic = 1;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int bw = 0; bw < 3; bw++) {
            fr_cudnn_sdpa p;
            memset(&p, 0, sizeof p);
            p.b = 2, p.hq = 4, p.hk = 4, p.tq = 512, p.tk = 512, p.d = cs[i].d, p.dv = cs[i].dv;
            const int64_t sq[4] = {4 * 512 * p.d, 512 * p.d, p.d, 1}, sv[4] = {4 * 512 * p.dv, 512 * p.dv, p.dv, 1};
            memcpy(p.sq, sq, sizeof sq), memcpy(p.sk, sq, sizeof sq), memcpy(p.sv, sv, sizeof sv), memcpy(p.so, sv, sizeof sv);
            p.causal = 1, p.window = cs[i].window, p.softcap = cs[i].softcap, p.padded = cs[i].padded;
            p.backward = bw > 0;
            size_t ws = 0;
            const fr_status st = fr_cudnn_sdpa_prepare(bw == 2 ? det : g_dnn, &p, &ws);
            printf("    probe D%-3lld Dv%-3lld window %-3lld softcap %-2g padded %d %-13s %s\n", (long long)p.d,
                   (long long)p.dv, (long long)p.window, (double)p.softcap, p.padded,
                   bw == 0 ? "forward" : bw == 1 ? "backward" : "bwd determ.", st == FR_OK ? "ok" : fr_last_error());
        }
    fr_cuda_ctx_free(det);
    fflush(stdout);
}
#endif

static void test_bench(void)
{
#ifdef FP8RUN_HAVE_CUDA
    const char *pr = getenv("FR_ATTN_PROBE");
    if (pr && strcmp(pr, "1") == 0 && dnn_available()) {
        printf("\n");
        probe();
    }
    const char *e = getenv("FR_ATTN_BENCH");
    if (!e || strcmp(e, "1") != 0 || !dnn_available()) return;
    printf("\n");
    bench_shape("llama-1b   B8 H16 KV8 T2048 D128", 8, 16, 8, 2048, 128);
    bench_shape("llama-125m B16 H12 KV4 T1024 D64", 16, 12, 4, 1024, 64);
    for (int64_t D = 64; D <= 256; D *= 2) bench_masks(D);
#endif
}

static CU_TestInfo tests[] = {
    {"cuDNN forward and backward vs float64 and fp8run's kernels (MHA, GQA, MQA, causal, ragged T)",
     test_against_reference},
    {"cuDNN: head dims to 256, D != Dv, sliding window, softcap, key padding vs float64", test_new_cases},
    {"cuDNN: packed sequences as variable-length sequences vs float64 (D 64, 128, 256, GQA, deterministic)",
     test_packed_sequences},
    {"--attention cudnn refuses what cuDNN does not take; auto falls back, saying why", test_refusals_and_fallback},
    {"FR_ATTN_BENCH=1: cuDNN vs fp8run at the reference shapes, cuDNN by head dim and mask; FR_ATTN_PROBE=1",
     test_bench},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_attention_cudnn", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
