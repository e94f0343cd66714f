/* AttentionQKV / AttentionQKVGrad on the GPU (ops/cuda/attention_qkv.cu) against the CPU op
 * (ops/attention_qkv.c) on the same fresh random inputs:
 *  - precision fp32 (fp8run's float32 kernels on head-major copies): O, LSE, dX within 1e-5
 *    relative L2 of the CPU;
 *  - precision bf16 on fp8run's kernels (--attention fp8run) and on cuDNN (--attention cudnn,
 *    each run checked to have been cuDNN's through the context's counters; skipped, saying so,
 *    where cuDNN does not load): O and dX within 2e-2 relative L2 of the CPU's bf16 emulation
 *    (the CPU rounds the normalized probabilities, flash kernels the unnormalized ones, and
 *    cuDNN's outputs are bf16), LSE within 1e-4. The backward reads each path's own forward
 *    outputs, on the CPU and the GPU alike.
 * On cuDNN also head dim 256, a sliding window, softcap and all three (Gemma2's attention),
 * HF's key padding (Sk, no Sq), alone and with a window and softcap; packed SFT windows (Sk = Sq,
 * seg_form packed: one example filling a window, examples of length 1, a padding tail) as
 * cuDNN's variable-length sequences, head dims 64, 128 and 256, GQA and MQA, with a window.
 * Cases: GQA, MHA and MQA heads; RoPE half, interleaved and none; [T, D] and [B, 1, T, D]
 * tables; causal and not; T 33, 65, 97, 130, 256 (odd, not multiples of 64, and one); D 64 and
 * 128 (the vectorized staging kernels of attention_qkv_stage.cuh) and D 24 (not a multiple of
 * 16: the general one-element kernels); the 2-D output of GPT-2's rows. Each again with X in
 * bfloat16 (a narrowed Q/K/V projection, passes/narrow_activations.h; the CPU reference reads
 * the same bf16 X, which it widens exactly), at the same tolerances.
 * bfloat16 I/O (o_dtype, bfloat16 O / dO, dx_dtype), every case on fp8run's kernels (fp32 and
 * bf16 precision) and on cuDNN (a --deterministic context, --attention auto: cuDNN's
 * deterministic engines, or fp8run's kernels where cuDNN has none; printed), X bfloat16 in
 * every other case:
 *  - o_dtype bfloat16: O is the same build's float32 O rounded to bfloat16 bit for bit, LSE the
 *    same bits; the float32 O within 2e-2 (fp32: 1e-5) of the CPU's, the bfloat16 one within 2e-2;
 *  - AttentionQKVGrad with O, dO or both in bfloat16: dX the same bits as with the float32 O
 *    and dO of the same values; dx_dtype bfloat16 (float32 and bfloat16 O/dO): the float32 dX
 *    rounded bit for bit; the float32 dX within the tolerances above of the CPU's.
 *  - the same on the default --attention cudnn context (every run cuDNN's), whose backward may
 *    sum dQ in any order: forwards bit for bit as above, each backward within 2e-2 of the CPU's
 *    on the same inputs (dx_dtype bfloat16 compared by value). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_kernel.h"
#endif

#define TOL_F32 1e-5
#define TOL_BF16 2e-2
#define TOL_LSE 1e-4

#ifdef FP8RUN_HAVE_CUDA
typedef struct qcase {
    int64_t B, T, Hq, Hk, D;
    int rope, table, causal, flat; /* rope 0 none, 1 half, 2 interleaved; table 2 [T, D], 4 [B, 1, T, D] */
    int64_t window;
    float softcap;
    int seg; /* 0: none; 1: Sk = HF's attention_mask (right padding), Sq absent; 2: packed Sk = Sq;
              * 3: packed as SFT windows are (window 0 one example; the others examples of random
              * lengths 1 .. T/3, a third of them of length 1, then padding) */
} qcase;

static const qcase k_cases[] = {
    {2, 130, 4, 2, 64, 1, 2, 1, 0, 0, 0, 0},  {2, 256, 4, 4, 128, 2, 4, 1, 0, 0, 0, 0},
    {2, 65, 6, 2, 64, 0, 2, 1, 1, 0, 0, 0},   {1, 130, 8, 1, 128, 1, 4, 0, 0, 0, 0, 0},
    {2, 256, 4, 2, 128, 1, 2, 1, 0, 0, 0, 0}, {3, 33, 6, 3, 24, 1, 4, 1, 0, 0, 0, 0},
    {2, 97, 8, 2, 64, 2, 2, 1, 1, 0, 0, 0},
};

static fr_cuda_ctx *g_dnn; /* --attention cudnn, NULL when cuDNN does not load */
static int g_dnn_tried, n_dnn_runs;
/* 1: packed sequences, whose backward runs on cuDNN (Q, K, V copied from the projection into
 * separate token-major buffers: on the interleaved row cuDNN's variable-length backward was seen
 * wrong, attention_cudnn_graph.c) at head dims up to 128, and on fp8run's kernels past that;
 * ctx is an --attention auto one */
static int g_bwd_own;

static fr_cuda_ctx *dnn_ctx(void)
{
    if (g_dnn_tried) return g_dnn;
    g_dnn_tried = 1;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_dnn));
    if (fr_cuda_ctx_set_attention(g_dnn, "cudnn") != FR_OK) {
        printf("\n  cuDNN path skipped: %s", fr_last_error());
        fr_clear_error();
        fr_cuda_ctx_free(g_dnn);
        g_dnn = NULL;
    }
    return g_dnn;
}

static void set_attrs(tnode *t, const qcase *c, const char *prec)
{
    TN_ATTR(t, int, "heads", c->Hq);
    TN_ATTR(t, int, "kv_heads", c->Hk);
    TN_ATTR(t, int, "head_dim", c->D);
    TN_ATTR(t, string, "precision", prec);
    if (c->causal) TN_ATTR(t, int, "causal", 1);
    if (c->rope == 2) TN_ATTR(t, int, "interleaved", 1);
    if (c->flat) TN_ATTR(t, int, "flat_output", 1);
    if (c->window) TN_ATTR(t, int, "window", c->window);
    if (c->softcap > 0) TN_ATTR(t, float, "softcap", c->softcap);
    if (c->seg) TN_ATTR(t, string, "seg_form", c->seg >= 2 ? "packed" : "padded");
}

/* Sk [B, T] int32 for c->seg: right padding of random length (row 0 full), examples 1, 2, .. */
static fr_tensor *make_sk(fr_rng *r, const qcase *c)
{
    if (!c->seg) return NULL;
    fr_tensor *sk = tt_new(FR_I32, 2, (int64_t[]){c->B, c->T});
    for (int64_t b = 0; c->seg == 3 && b < c->B; b++) {
        int32_t *row = (int32_t *)sk->data + b * c->T, id = 0;
        int64_t j = 0;
        const int64_t used = b == 0 ? c->T : c->T - (int64_t)(fr_rng_uniform(r) * (double)(c->T / 4));
        while (j < used) {
            int64_t len = b == 0 ? c->T : fr_rng_uniform(r) < 0.33 ? 1 : 1 + (int64_t)(fr_rng_uniform(r) * (double)(c->T / 3));
            if (len > used - j) len = used - j;
            id++;
            for (int64_t e = 0; e < len; e++) row[j++] = id;
        }
        for (; j < c->T; j++) row[j] = 0;
    }
    for (int64_t b = 0; c->seg != 3 && b < c->B; b++) {
        const int64_t len = b == 0 ? c->T : 1 + (int64_t)(fr_rng_uniform(r) * (double)(c->T - 1));
        int32_t id = 1;
        for (int64_t j = 0; j < c->T; j++) {
            if (c->seg == 2 && j > 0 && j < len && fr_rng_uniform(r) < 4.0 / (double)c->T) id++;
            ((int32_t *)sk->data)[b * c->T + j] = j < len ? (c->seg == 2 ? id : 1) : 0;
        }
    }
    return sk;
}

static void expect_close(const fr_tensor *got, const fr_tensor *want, double tol, const char *name, const char *what)
{
    const double e = gpu_rel_err(got, want);
    if (e <= tol) return;
    fprintf(stderr, "\n    %s: %s relative L2 %.3g > %.3g\n", what, name, e, tol);
    CU_FAIL("AttentionQKV on the GPU outside its tolerance");
}

/* X's values rounded to bfloat16, in a bfloat16 tensor (X itself is freed) */
static fr_tensor *to_bf16(fr_tensor *X)
{
    fr_tensor *b = tt_new(FR_BF16, X->rank, X->dims);
    for (int64_t i = 0; i < fr_tensor_numel(X); i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)X->data)[i]);
    fr_tensor_free(X);
    return b;
}

/* Real RoPE tables (cos^2 + sin^2 = 1), [T, D] or [B, 1, T, D] */
static void make_tables(const qcase *c, fr_tensor **pcs, fr_tensor **psn)
{
    const int rank = c->table == 4 ? 4 : 2;
    const int64_t d2[2] = {c->T, c->D}, d4[4] = {c->B, 1, c->T, c->D};
    fr_tensor *cs = tt_new(FR_F32, rank, rank == 4 ? d4 : d2);
    fr_tensor *sn = tt_new(FR_F32, rank, rank == 4 ? d4 : d2);
    const int64_t rows = fr_tensor_numel(cs) / c->D;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < c->D; j++) {
            const int64_t f = c->rope == 2 ? j / 2 : j % (c->D / 2);
            const double a = (double)(i % c->T + (i / c->T) * 3) * pow(10000.0, -2.0 * (double)f / (double)c->D);
            ((float *)cs->data)[i * c->D + j] = (float)cos(a);
            ((float *)sn->data)[i * c->D + j] = (float)sin(a);
        }
    *pcs = cs, *psn = sn;
}

/* One precision on one context (NULL: the harness's, --attention fp8run); xbf: X in bfloat16. */
static void run_case(fr_rng *r, const qcase *c, const char *prec, fr_cuda_ctx *ctx, int xbf)
{
    const int64_t W = (c->Hq + 2 * c->Hk) * c->D;
    fr_tensor *X = tt_randn(r, FR_F32, 3, (int64_t[]){c->B, c->T, W}, 0, 1), *cs = NULL, *sn = NULL;
    if (xbf) X = to_bf16(X);
    if (c->rope) make_tables(c, &cs, &sn);
    char what[200];
    snprintf(what, sizeof what, "%s%s %s B%lld T%lld Hq%lld Hk%lld D%lld rope%d table%d causal%d flat%d window%lld softcap%g",
             prec, xbf ? " X bf16" : "", ctx ? "cuDNN" : "fp8run", (long long)c->B, (long long)c->T, (long long)c->Hq,
             (long long)c->Hk, (long long)c->D, c->rope, c->table, c->causal, c->flat, (long long)c->window,
             (double)c->softcap);
    const int bf = strcmp(prec, "bf16") == 0;
    const double tol = bf ? TOL_BF16 : TOL_F32;
    fr_tensor *Sk = make_sk(r, c);
    fr_tensor *ins[5] = {X, cs, sn, Sk, c->seg >= 2 ? Sk : NULL};
    const int n_in = c->seg >= 2 ? 5 : c->seg ? 4 : c->rope ? 3 : 1;
    tnode f;
    tn_init_domain(&f, "ai.fp8run", "AttentionQKV", 1, n_in, ins, 0u, 2);
    set_attrs(&f, c, prec);
    FR_ASSERT_OK(tn_run(&f));
    fr_tensor *go[TN_MAX];
    const long long before = ctx ? ctx->attn_runs_cudnn : 0;
    fr_status st = tn_run_gpu_on(ctx, &f, go);
    if (st != FR_OK) fprintf(stderr, "\n    %s: %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before + 1);
    expect_close(go[0], f.out[0], tol, "O", what);
    expect_close(go[1], f.out[1], bf ? TOL_LSE : TOL_F32, "LSE", what);
    /* backward from the GPU's forward outputs */
    fr_tensor *dO = tt_randn(r, FR_F32, go[0]->rank, go[0]->dims, 0, 1);
    fr_tensor *bins[8] = {X, go[0], go[1], dO, cs, sn, Sk, c->seg >= 2 ? Sk : NULL};
    tnode b;
    tn_init_domain(&b, "ai.fp8run", "AttentionQKVGrad", 1, c->seg ? n_in + 3 : c->rope ? 6 : 4, bins, 0u, 1);
    set_attrs(&b, c, prec);
    FR_ASSERT_OK(tn_run(&b));
    fr_tensor *gb[TN_MAX];
    const long long before_b = ctx ? ctx->attn_runs_cudnn : 0;
    st = tn_run_gpu_on(ctx, &b, gb);
    if (st != FR_OK) fprintf(stderr, "\n    %s (backward): %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
    if (ctx) CU_ASSERT_EQUAL(ctx->attn_runs_cudnn, before_b + (g_bwd_own && c->D > 128 ? 0 : 1));
    expect_close(gb[0], b.out[0], tol, "dX", what);
    n_dnn_runs += ctx != NULL;
    gpu_free_outputs(&b, gb);
    gpu_free_outputs(&f, go);
    tn_free(&b);
    tn_free(&f);
    fr_tensor_free(dO);
    fr_tensor_free(X);
    fr_tensor_free(cs);
    fr_tensor_free(sn);
    fr_tensor_free(Sk);
}

/* ---- bfloat16 I/O ---- */

static fr_cuda_ctx *g_det; /* --deterministic, --attention auto */

static fr_cuda_ctx *det_ctx(void)
{
    if (!g_det) {
        FR_ASSERT_OK(fr_cuda_ctx_create(-1, &g_det));
        FR_ASSERT_OK(fr_cuda_ctx_set_attention(g_det, "auto"));
        g_det->deterministic = 1;
    }
    return g_det;
}

static void bf16_pair(const fr_tensor *t, fr_tensor **b, fr_tensor **w)
{
    *b = tt_new(FR_BF16, t->rank, t->dims);
    *w = tt_new(FR_F32, t->rank, t->dims);
    for (int64_t i = 0; i < fr_tensor_numel(t); i++) {
        const uint16_t h = fr_f32_to_bf16(((const float *)t->data)[i]);
        ((uint16_t *)(*b)->data)[i] = h;
        ((float *)(*w)->data)[i] = fr_bf16_to_f32(h);
    }
}

static int same_bits(const fr_tensor *a, const fr_tensor *b)
{
    return a && b && a->dtype == b->dtype && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

/* y (bfloat16) is f (float32) rounded to nearest even, element for element */
static int is_rounding(const fr_tensor *y, const fr_tensor *f)
{
    if (!y || !f || y->dtype != FR_BF16 || f->dtype != FR_F32 || fr_tensor_numel(y) != fr_tensor_numel(f)) return 0;
    for (int64_t i = 0; i < fr_tensor_numel(f); i++)
        if (((const uint16_t *)y->data)[i] != fr_f32_to_bf16(((const float *)f->data)[i])) return 0;
    return 1;
}

static void check(int ok, const char *what, const char *msg)
{
    if (!ok) fprintf(stderr, "\n    %s: %s\n", what, msg);
    CU_ASSERT(ok);
}

/* The node on the CPU (t->out) and on ctx: the GPU's outputs into go (the caller frees them). */
static void run_both(fr_cuda_ctx *ctx, tnode *t, fr_tensor **go, const char *what)
{
    FR_ASSERT_OK(tn_run(t));
    const fr_status st = tn_run_gpu_on(ctx, t, go);
    if (st != FR_OK) fprintf(stderr, "\n    %s: %s\n", what, fr_last_error());
    FR_ASSERT_OK(st);
}

static void bwd_node(tnode *b, const qcase *c, const char *prec, fr_tensor **ins, int dx_bf16)
{
    tn_init_domain(b, "ai.fp8run", "AttentionQKVGrad", 1, c->rope ? 6 : 4, ins, 0u, 1);
    set_attrs(b, c, prec);
    if (dx_bf16) TN_ATTR(b, string, "dx_dtype", "bfloat16");
}

static int n_io_dnn, n_io_own;

/* exact 0 (the default cuDNN context, whose backward may accumulate dQ in any order): the
 * backwards within the tolerance of the CPU's instead of bit for bit. */
static void io_case(fr_rng *r, const qcase *c, const char *prec, fr_cuda_ctx *ctx, int xbf, int exact)
{
    const int64_t W = (c->Hq + 2 * c->Hk) * c->D;
    fr_tensor *X = tt_randn(r, FR_F32, 3, (int64_t[]){c->B, c->T, W}, 0, 1), *cs = NULL, *sn = NULL;
    if (xbf) X = to_bf16(X);
    if (c->rope) make_tables(c, &cs, &sn);
    char what[200];
    snprintf(what, sizeof what, "bf16 I/O %s%s %s B%lld T%lld Hq%lld Hk%lld D%lld rope%d causal%d flat%d", prec,
             xbf ? " X bf16" : "", ctx ? "det ctx" : "fp8run", (long long)c->B, (long long)c->T, (long long)c->Hq,
             (long long)c->Hk, (long long)c->D, c->rope, c->causal, c->flat);
    const double tol = strcmp(prec, "bf16") == 0 ? TOL_BF16 : TOL_F32;
    const long long dn0 = ctx ? ctx->attn_runs_cudnn : 0;
    /* forward: float32 O and o_dtype bfloat16 */
    fr_tensor *ins[3] = {X, cs, sn}, *g32[TN_MAX], *g16[TN_MAX];
    tnode f32, f16;
    tn_init_domain(&f32, "ai.fp8run", "AttentionQKV", 1, c->rope ? 3 : 1, ins, 0u, 2);
    tn_init_domain(&f16, "ai.fp8run", "AttentionQKV", 1, c->rope ? 3 : 1, ins, 0u, 2);
    set_attrs(&f32, c, prec);
    set_attrs(&f16, c, prec);
    TN_ATTR(&f16, string, "o_dtype", "bfloat16");
    run_both(ctx, &f32, g32, what);
    run_both(ctx, &f16, g16, what);
    check(is_rounding(g16[0], g32[0]), what, "o_dtype bfloat16: O is not the float32 O rounded");
    check(same_bits(g16[1], g32[1]), what, "o_dtype bfloat16: LSE differs");
    expect_close(g32[0], f32.out[0], tol, "O vs CPU", what);
    expect_close(g16[0], f16.out[0], TOL_BF16, "bfloat16 O vs CPU (by value)", what); /* roundings may differ */
    /* backward: O (the GPU's, bf16 values), dO; float32 first */
    fr_tensor *ob, *ow, *dob, *dow, *d = tt_randn(r, FR_F32, g32[0]->rank, g32[0]->dims, 0, 1);
    bf16_pair(g32[0], &ob, &ow);
    bf16_pair(d, &dob, &dow);
    fr_tensor *bins[6] = {X, ow, g32[1], dow, cs, sn}, *ref[TN_MAX];
    tnode b;
    bwd_node(&b, c, prec, bins, 0);
    const long long dn_f = ctx ? ctx->attn_runs_cudnn - dn0 : 0;
    run_both(ctx, &b, ref, what);
    expect_close(ref[0], b.out[0], tol, "dX vs CPU", what);
    tn_free(&b);
    int runs = 1;
    for (int m = 0; m < 6; m++) { /* O, dO, both bfloat16 (dX float32); then dx_dtype bfloat16 */
        const int bits = m < 3 ? m + 1 : m - 3; /* bit 0: O bfloat16, 1: dO */
        bins[1] = bits & 1 ? ob : ow, bins[3] = bits & 2 ? dob : dow;
        fr_tensor *g[TN_MAX];
        bwd_node(&b, c, prec, bins, m >= 3);
        run_both(ctx, &b, g, what);
        runs++;
        char msg[120];
        snprintf(msg, sizeof msg, "O %s, dO %s, dx_dtype %s: %s", bits & 1 ? "bf16" : "f32", bits & 2 ? "bf16" : "f32",
                 m >= 3 ? "bfloat16" : "float32", m >= 3 ? "not the float32 dX rounded" : "not the float32 dX's bits");
        if (exact)
            check(m >= 3 ? is_rounding(g[0], ref[0]) : same_bits(g[0], ref[0]), what, msg);
        else
            expect_close(g[0], b.out[0], tol, msg, what);
        gpu_free_outputs(&b, g);
        tn_free(&b);
    }
    if (ctx && !exact) {
        check(ctx->attn_runs_cudnn - dn0 == 2 + runs, what, "not every run on cuDNN");
    } else if (ctx) { /* the forwards on one path, the backwards on one (cuDNN's deterministic engines, or
                  fp8run's kernels where cuDNN has none for the shape): the bits compared come from one */
        const long long dn_b = ctx->attn_runs_cudnn - dn0 - dn_f;
        check(dn_f == 0 || dn_f == 2, what, "the two forwards split between cuDNN and fp8run's kernels");
        check(dn_b == 0 || dn_b == runs, what, "the backwards split between cuDNN and fp8run's kernels");
        n_io_dnn += dn_b == runs, n_io_own += dn_b == 0;
    }
    fr_tensor_free(ref[0]);
    gpu_free_outputs(&f32, g32);
    gpu_free_outputs(&f16, g16);
    tn_free(&f32);
    tn_free(&f16);
    fr_tensor *all[] = {X, cs, sn, ob, ow, dob, dow, d};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fr_tensor_free(all[i]);
}
#endif

/* 0: fp32 fp8run, 1: bf16 fp8run, 2: bf16 deterministic context, 3: bf16 cuDNN (default) */
static void io_cases(int path)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!gpu_available()) return;
    fr_cuda_ctx *ctx = path == 2 ? det_ctx() : path == 3 ? dnn_ctx() : NULL;
    if (path == 3 && !ctx) return;
    static const char *const seeds[4] = {"gpu_qkv_io_fp32", "gpu_qkv_io_bf16_own", "gpu_qkv_io_bf16_det",
                                         "gpu_qkv_io_bf16_cudnn"};
    fr_rng r = fr_test_rng(seeds[path]);
    n_io_dnn = n_io_own = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++)
        io_case(&r, &k_cases[i], path ? "bf16" : "fp32", ctx, (int)(i % 2), path != 3);
    if (path == 2)
        printf("\n  %d cases' backwards on cuDNN's deterministic engines, %d on fp8run's kernels", n_io_dnn, n_io_own);
#else
    (void)path;
#endif
}

static void test_io_fp32(void) { io_cases(0); }
static void test_io_bf16_own(void) { io_cases(1); }
static void test_io_bf16_det(void) { io_cases(2); }
static void test_io_bf16_cudnn(void) { io_cases(3); }

static void fp32_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_fp32_xbf16" : "test_fp32");
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "fp32", NULL, xbf);
#else
    (void)xbf;
#endif
}

static void bf16_own_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_bf16_own_xbf16" : "test_bf16_own");
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "bf16", NULL, xbf);
#else
    (void)xbf;
#endif
}

static void bf16_cudnn_cases(int xbf)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) return;
    fr_rng r = fr_test_rng(xbf ? "gpu_qkv_bf16_cudnn_xbf16" : "test_bf16_cudnn");
    n_dnn_runs = 0;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) run_case(&r, &k_cases[i], "bf16", c, xbf);
    printf("\n  %d cases on cuDNN", n_dnn_runs);
#else
    (void)xbf;
#endif
}

/* What cuDNN takes beyond the Llama shapes: head dim 256, sliding window, softcap (Gemma2's),
 * HF's key padding (segment ids, exact on cuDNN). */
static void test_bf16_cudnn_masks(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = dnn_ctx();
    if (!c) return;
    static const qcase more[] = {
        {2, 130, 4, 2, 256, 1, 2, 1, 0, 0, 0, 0},   {2, 256, 4, 2, 128, 1, 2, 1, 0, 64, 0, 0},
        {2, 200, 4, 4, 64, 2, 2, 1, 1, 0, 5.0f, 0}, {2, 130, 2, 2, 256, 1, 4, 1, 0, 64, 3.0f, 0},
        {3, 130, 4, 2, 64, 1, 2, 1, 0, 0, 0, 1},  {2, 256, 4, 2, 128, 0, 2, 1, 0, 64, 3.0f, 1},
    };
    fr_rng r = fr_test_rng("gpu_qkv_bf16_cudnn_masks");
    n_dnn_runs = 0;
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run_case(&r, &more[i], "bf16", c, 0);
    printf("\n  %d cases on cuDNN", n_dnn_runs);
    CU_ASSERT_EQUAL(n_dnn_runs, (int)(sizeof more / sizeof more[0]));
#endif
}

/* Packed SFT windows (seg_form packed, Sk = Sq) on cuDNN as variable-length sequences: head
 * dims 64, 128, 256, GQA, MHA and MQA, RoPE, X float32 and bfloat16. The forward is cuDNN's on
 * the projection; the backward cuDNN's on separate token-major copies of Q, K, V (cuDNN 9.14's
 * variable-length backward on the interleaved projection was seen wrong), fp8run's at head dim
 * 256 (--attention auto). */
static void test_bf16_cudnn_packed(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!dnn_ctx()) return;
    if (fr_cudnn_version() < 90600 || g_dnn->cc_major < 9) {
        printf("\n  SKIP: cuDNN %zu on compute capability %d: packed sequences need cuDNN 9.6 and Hopper",
               fr_cudnn_version(), g_dnn->cc_major);
        return;
    }
    fr_cuda_ctx *c = NULL;
    FR_ASSERT_OK(fr_cuda_ctx_create(-1, &c));
    FR_ASSERT_OK(fr_cuda_ctx_set_attention(c, "auto"));
    static const qcase packed[] = {
        {3, 256, 4, 2, 64, 1, 2, 1, 0, 0, 0, 3},  {2, 200, 4, 4, 128, 1, 2, 1, 0, 0, 0, 3},
        {2, 130, 4, 1, 256, 2, 2, 1, 0, 0, 0, 3}, {4, 97, 8, 2, 64, 1, 2, 1, 1, 0, 0, 3},
        {2, 256, 4, 2, 128, 0, 2, 1, 0, 64, 0, 3},
    };
    fr_rng r = fr_test_rng("gpu_qkv_bf16_cudnn_packed");
    const long long before = c->attn_runs_cudnn;
    g_bwd_own = 1;
    for (int xbf = 0; xbf < 2; xbf++)
        for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++) run_case(&r, &packed[i], "bf16", c, xbf);
    g_bwd_own = 0;
    long long want = 0;
    for (size_t i = 0; i < sizeof packed / sizeof packed[0]; i++) want += 2 * (packed[i].D > 128 ? 1 : 2);
    printf("\n  %lld packed runs on cuDNN (forwards, and backwards at head dims up to 128)", c->attn_runs_cudnn - before);
    CU_ASSERT_EQUAL(c->attn_runs_cudnn - before, want);
    fr_cuda_ctx_free(c);
#endif
}

static void test_fp32(void) { fp32_cases(0); }
static void test_bf16_own(void) { bf16_own_cases(0); }
static void test_bf16_cudnn(void) { bf16_cudnn_cases(0); }
static void test_fp32_xbf16(void) { fp32_cases(1); }
static void test_bf16_own_xbf16(void) { bf16_own_cases(1); }
static void test_bf16_cudnn_xbf16(void) { bf16_cudnn_cases(1); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32},
        {"bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own},
        {"bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn},
        {"bf16 on cuDNN, head dim 256, sliding window, softcap, segments vs CPU: 2e-2 (skipped without cuDNN)",
         test_bf16_cudnn_masks},
        {"packed SFT windows, bf16 on cuDNN's variable-length sequences vs CPU: 2e-2 (skipped without cuDNN)",
         test_bf16_cudnn_packed},
        {"bfloat16 X, fp32 (fp8run's float32 kernels) vs CPU: 1e-5", test_fp32_xbf16},
        {"bfloat16 X, bf16 on fp8run's kernels vs CPU: 2e-2", test_bf16_own_xbf16},
        {"bfloat16 X, bf16 on cuDNN vs CPU: 2e-2 (skipped without cuDNN)", test_bf16_cudnn_xbf16},
        {"bf16 I/O, fp32 on fp8run's kernels: o_dtype/dx_dtype == rounding, bf16 O/dO == f32 bits", test_io_fp32},
        {"bf16 I/O, bf16 on fp8run's kernels: the same", test_io_bf16_own},
        {"bf16 I/O, bf16 on a deterministic context (cuDNN where it has engines): the same", test_io_bf16_det},
        {"bf16 I/O, bf16 on cuDNN: o_dtype == rounding, backwards vs CPU 2e-2 (skipped without cuDNN)",
         test_io_bf16_cudnn},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"gpu_attention_qkv", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    const int rc = gpu_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    if (g_dnn) fr_cuda_ctx_free(g_dnn);
    if (g_det) fr_cuda_ctx_free(g_det);
#endif
    return rc;
}
