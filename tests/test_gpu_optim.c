/* The device AdamW, the default float32 kernel (runtime/cuda/cuda_train_kernels.cu: float4
 * loads where aligned, one parameter deliberately not) and the one with bf16 / fp8 moments and
 * bf16 master weights (runtime/cuda/cuda_optim_lowp.cu), against the CPU optimizer
 * (runtime/train/optimizer.c, optim_lowp.c), bit for bit: the same parameters and gradients, 4 steps (two of them reading a sum of 3 micro-batches that
 * the device divides itself, use_acc 3); after each, the parameters, the stored
 * moments and the fp8 block scales must be byte-identical. Parameters cover a partial fp8
 * block, one element, and one spanning two multi-tensor chunks (FR_MT_CHUNK) with a partial
 * tail; the matrices decay, the vectors do not. With the float32 kernel, the gradient norm's
 * partial sums (fr_cuda_mt_sumsq) against a double sum on the host within 1e-12.
 * Also the memory prediction (runtime/train/train_memory.h) of a GPU llama_tiny fp8 session with fp8
 * moments against the device bytes the session allocated (fr_trainer_memory, before any
 * evaluation): within 1 MiB + 2% (the session's small buffers, FP8 scaling state, are not
 * predicted), and a session whose prediction exceeds the free memory (a batch far too large)
 * fails before allocating, naming what would fit (a budget just short of the fp32-state figure:
 * --optimizer-state fp8; a batch far too large: --batch and --recompute). FR_OPTIM_BENCH=1 times
 * the default AdamW and the norm's sums at the 1B's size. Skips without a device (label gpu). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu_harness.h"
#include "runtime/train/optimizer.h"
#ifdef FP8RUN_HAVE_CUDA
#include <cuda_runtime.h>

#include "graph/onnx_io.h"
#include "runtime/cuda/cuda_train_kernels.h"
#include "runtime/train/train_memory.h"
#include "runtime/train/train_internal.h"

#define NP 4
static const int64_t k_numel[NP] = {300, 1, FR_MT_CHUNK + 200, 128};
static const int k_rank[NP] = {2, 1, 2, 1};

static int64_t slot_bytes(fr_opt_state_dtype dt, int64_t n)
{
    return n * (dt == FR_OPT_STATE_F32 ? 4 : dt == FR_OPT_STATE_BF16 ? 2 : 1);
}

#define CUOK(x) CU_ASSERT_EQUAL_FATAL((x), cudaSuccess)

/* plain: the default optimizer's kernel (fr_cuda_mt_adamw: float32 state and master, float4
 * loads where aligned), with the last parameter one float off 16-byte alignment (its one-float
 * loop), and the gradient norm's partial sums (fr_cuda_mt_sumsq) against a double sum */
static void check_path(fr_opt_state_dtype dt, int master, int plain)
{
    fr_rng r = fr_test_rng("gpu_optim");
    float *p[NP], *g[NP];
    fr_opt_param ps[NP];
    fr_mt_entry e[NP];
    memset(e, 0, sizeof e);
    int n_chunks = 0;
    for (int i = 0; i < NP; i++) n_chunks += (int)((k_numel[i] + FR_MT_CHUNK - 1) / FR_MT_CHUNK);
    fr_mt_chunk *chunks = malloc((size_t)n_chunks * sizeof *chunks);
    int c = 0;
    char names[NP][8];
    for (int i = 0; i < NP; i++) {
        const int64_t n = k_numel[i];
        p[i] = malloc((size_t)n * sizeof(float));
        g[i] = malloc((size_t)n * sizeof(float));
        for (int64_t k = 0; k < n; k++) p[i][k] = (float)fr_rng_normal(&r);
        snprintf(names[i], sizeof names[i], "p%d", i);
        ps[i] = (fr_opt_param){names[i], p[i], g[i], k_rank[i], {0}, FR_DECAY_AUTO};
        if (k_rank[i] == 2) {
            ps[i].dims[0] = n / 4 ? 4 : 1;
            ps[i].dims[1] = n / ps[i].dims[0];
        } else {
            ps[i].dims[0] = n;
        }
        for (int64_t s = 0; s < n; s += FR_MT_CHUNK) chunks[c++] = (fr_mt_chunk){i, s, n - s < FR_MT_CHUNK ? n - s : FR_MT_CHUNK};
    }
    fr_opt_config cfg = fr_opt_config_adamw();
    cfg.weight_decay = 0.1;
    cfg.state_dtype = dt;
    cfg.master_bf16 = master;
    cfg.sr_seed = 1234;
    fr_optimizer *o;
    FR_ASSERT_OK(fr_optimizer_create(&cfg, ps, NP, &o)); /* bf16 master: rounds p to bf16 first */
    /* the device copies, from the (rounded) starting values and the zero state */
    for (int i = 0; i < NP; i++) {
        const int64_t n = k_numel[i], nb = (n + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
        const int off = plain && i == NP - 1; /* floats past an aligned start */
        float *b[5];
        for (int j = 0; j < 5; j++) CUOK(cudaMalloc((void **)&b[j], (size_t)(n + off) * 4));
        e[i].p = b[0] + off, e[i].g = b[1] + off, e[i].acc = b[2] + off, e[i].s0 = b[3] + off, e[i].s1 = b[4] + off;
        CUOK(cudaMemset(e[i].s0, 0, (size_t)slot_bytes(dt, n)));
        CUOK(cudaMemset(e[i].s1, 0, (size_t)slot_bytes(dt, n)));
        if (dt == FR_OPT_STATE_FP8) {
            CUOK(cudaMalloc((void **)&e[i].sc0, (size_t)nb * 4));
            CUOK(cudaMalloc((void **)&e[i].sc1, (size_t)nb * 4));
        }
        CUOK(cudaMemcpy(e[i].p, p[i], (size_t)n * 4, cudaMemcpyHostToDevice));
        e[i].n = n;
        e[i].decay = fr_optimizer_param_decays(o, i);
    }
    fr_mt_entry *de;
    fr_mt_chunk *dc;
    fr_step_scalars *dsc;
    CUOK(cudaMalloc((void **)&de, sizeof e));
    CUOK(cudaMalloc((void **)&dc, (size_t)n_chunks * sizeof *chunks));
    CUOK(cudaMalloc((void **)&dsc, sizeof(fr_step_scalars)));
    CUOK(cudaMemcpy(de, e, sizeof e, cudaMemcpyHostToDevice));
    CUOK(cudaMemcpy(dc, chunks, (size_t)n_chunks * sizeof *chunks, cudaMemcpyHostToDevice));
    const double lr = 3e-3;
    int bad = 0;
    double *dpart;
    CUOK(cudaMalloc((void **)&dpart, (size_t)n_chunks * sizeof(double)));
    for (int t = 1; t <= 4; t++) {
        /* even steps: the device reads the sum of 3 micro-batches from acc and divides it itself
           (use_acc 3); the CPU gets the quotient, rounded once as __fdiv_rn rounds */
        const int use_acc = t % 2 ? 0 : 3;
        for (int i = 0; i < NP; i++) {
            float *sum = malloc((size_t)k_numel[i] * 4);
            for (int64_t k = 0; k < k_numel[i]; k++) {
                const float v = (float)(fr_rng_normal(&r) * exp2(floor(fr_rng_uniform(&r) * 24) - 12));
                sum[k] = use_acc ? v * 3.0f : v;
                g[i][k] = use_acc ? sum[k] / 3.0f : v;
            }
            CUOK(cudaMemcpy(use_acc ? (void *)e[i].acc : (void *)e[i].g, sum, (size_t)k_numel[i] * 4,
                            cudaMemcpyHostToDevice));
            free(sum);
        }
        FR_ASSERT_OK(fr_optimizer_step(o, lr));
        fr_step_scalars sc;
        memset(&sc, 0, sizeof sc);
        sc.ok = 1;
        sc.tstep = t;
        CUOK(cudaMemcpy(dsc, &sc, sizeof sc, cudaMemcpyHostToDevice));
        fr_adamw_args a;
        memset(&a, 0, sizeof a);
        a.keep = (float)(1.0 - lr * cfg.weight_decay);
        a.decay_on = 1;
        a.b1 = (float)cfg.beta1;
        a.one_b1 = (float)(1.0 - cfg.beta1);
        a.b2 = (float)cfg.beta2;
        a.one_b2 = (float)(1.0 - cfg.beta2);
        a.eps = (float)cfg.eps;
        a.base = t - 1;
        a.neg_step[0] = (float)(-(lr / (1.0 - pow(cfg.beta1, (double)t))));
        a.bc2_sqrt[0] = (float)sqrt(1.0 - pow(cfg.beta2, (double)t));
        if (plain) {
            double want = 0, got = 0, *part = malloc((size_t)n_chunks * sizeof(double));
            CU_ASSERT_PTR_NOT_NULL_FATAL(part);
            for (int i = 0; i < NP; i++)
                for (int64_t k = 0; k < k_numel[i]; k++) want += (double)g[i][k] * (double)g[i][k];
            CUOK(fr_cuda_mt_sumsq(dc, n_chunks, de, use_acc, dpart, 0));
            CUOK(cudaMemcpy(part, dpart, (size_t)n_chunks * sizeof(double), cudaMemcpyDeviceToHost));
            for (int i = 0; i < n_chunks; i++) got += part[i];
            free(part);
            if (fabs(got - want) > 1e-12 * want) printf("\n  step %d: sum of squares %.17g, want %.17g", t, got, want);
            CU_ASSERT(fabs(got - want) <= 1e-12 * want);
            CUOK(fr_cuda_mt_adamw(dc, n_chunks, de, use_acc, dsc, a, 0));
        } else {
            CUOK(fr_cuda_mt_adamw_lowp(dc, n_chunks, de, use_acc, dsc, a, (int)dt, master, cfg.sr_seed, 0));
        }
        CUOK(cudaDeviceSynchronize());
        for (int i = 0; i < NP; i++) {
            const int64_t n = k_numel[i], nb = (n + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
            void *buf = malloc((size_t)n * 4);
            CUOK(cudaMemcpy(buf, e[i].p, (size_t)n * 4, cudaMemcpyDeviceToHost));
            int pb = memcmp(buf, p[i], (size_t)n * 4) != 0;
            for (int s = 0; s < 2; s++) {
                float *scales;
                const void *host = fr_optimizer_state_raw(o, i, s, &scales);
                CUOK(cudaMemcpy(buf, s ? (void *)e[i].s1 : (void *)e[i].s0, (size_t)slot_bytes(dt, n), cudaMemcpyDeviceToHost));
                pb += memcmp(buf, host, (size_t)slot_bytes(dt, n)) != 0;
                if (!scales) continue;
                CUOK(cudaMemcpy(buf, s ? e[i].sc1 : e[i].sc0, (size_t)nb * 4, cudaMemcpyDeviceToHost));
                pb += memcmp(buf, scales, (size_t)nb * 4) != 0;
            }
            if (pb) printf("\n  %s state, %s master: step %d, parameter %d differs from the CPU", fr_lowp_state_name(dt),
                           master ? "bf16" : "fp32", t, i);
            bad += pb;
            free(buf);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    for (int i = 0; i < NP; i++) {
        const int off = plain && i == NP - 1;
        cudaFree(e[i].p - off);
        cudaFree((void *)(e[i].g - off));
        cudaFree(e[i].acc - off);
        cudaFree((float *)e[i].s0 - off);
        cudaFree((float *)e[i].s1 - off);
        cudaFree(e[i].sc0);
        cudaFree(e[i].sc1);
        free(p[i]);
        free(g[i]);
    }
    cudaFree(de);
    cudaFree(dc);
    cudaFree(dsc);
    cudaFree(dpart);
    free(chunks);
    fr_optimizer_free(o);
}

static void test_memory_prediction(void)
{
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 4;
    o.seq_len = 64;
    o.precision = o.fp8.precision = "fp8";
    o.opt.state_dtype = FR_OPT_STATE_FP8;
    o.device = "cuda";
    fr_train_memory m;
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &m));
    /* what info --memory prints: where the arena peaks, by producing op */
    CU_ASSERT_PTR_NOT_NULL(strstr(m.peak, "the arena peaks at node"));
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    size_t used = 0, total = 0;
    size_t actual = fr_trainer_memory(t, &used, &total);
    size_t pred = m.total - m.eval_activations; /* the evaluation executor is built at the first evaluation */
    double diff = (double)actual - (double)pred;
    printf(" (predicted %zu B without evaluation, the session allocated %zu B: diff %.0f B) ", pred, actual, diff);
    CU_ASSERT(fabs(diff) <= 1048576.0 + 0.02 * (double)actual);
    fr_trainer_free(t);
    /* the refusal names what would fit, whatever the card's size: a budget (the free memory
       the check is given) just below the fp32-state prediction and at least the fp8-state one
       must name --optimizer-state fp8 as fitting; the same run with fp8 state passes it */
    o.opt.state_dtype = FR_OPT_STATE_F32;
    fr_train_memory m32;
    FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &m32));
    CU_ASSERT(m32.optimizer_state > m.optimizer_state);
    CU_ASSERT_EQUAL(m32.total - m32.optimizer_state, m.total - m.optimizer_state);
    fr_train_options po = o;
    po.plan_only = 1;
    po.device = "cpu";
    fr_trainer *pt = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &po, &pt));
    CU_ASSERT_EQUAL(tr_memory_check(pt, m32.total - 1), FR_ERR_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--optimizer-state fp8 needs"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "(fits)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "nothing was allocated"));
    CU_ASSERT_EQUAL(tr_memory_check(pt, m32.total), FR_OK);
    fr_trainer_free(pt);
    /* a batch far beyond any device: refused before the executors allocate; activations are
       what does not fit, so it names a smaller batch and recomputation */
    o.batch = 1 << 14;
    fr_train_memory mb;
    do { /* doubled until the prediction is twice the card, whatever its size */
        o.batch *= 2;
        FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &mb));
    } while ((double)mb.total < 2.0 * (double)total && o.batch < (1 << 26));
    printf(" (batch %lld: %.1f GiB predicted on a %.1f GiB card) ", (long long)o.batch, (double)mb.total / 1073741824.0,
           (double)total / 1073741824.0);
    CU_ASSERT((double)mb.total >= 2.0 * (double)total);
    fr_trainer *big = NULL;
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &big), FR_ERR_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "nothing was allocated"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--batch "));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--recompute"));
    printf(" (%s) ", fr_last_error());
    fr_graph_free(g);
}

static void check(fr_opt_state_dtype dt, int master) { check_path(dt, master, 0); }

/* FR_OPTIM_BENCH=1: the default AdamW and the norm's sums over the Llama 1B's 889M parameters
 * (one entry, zero state, ones as gradient), ms and GB/s a run (AdamW reads p, g, m, v and writes
 * p, m, v: 28 bytes an element; the sums read g: 4). */
static void test_bench(void)
{
    const char *b = getenv("FR_OPTIM_BENCH");
    if (!b || strcmp(b, "1") != 0) return;
    const int64_t n = (int64_t)889 * 1000 * 1000;
    const int n_chunks = (int)((n + FR_MT_CHUNK - 1) / FR_MT_CHUNK);
    fr_mt_chunk *chunks = malloc((size_t)n_chunks * sizeof *chunks);
    CU_ASSERT_PTR_NOT_NULL_FATAL(chunks);
    for (int i = 0; i < n_chunks; i++) {
        const int64_t s0 = (int64_t)i * FR_MT_CHUNK;
        chunks[i] = (fr_mt_chunk){0, s0, n - s0 < FR_MT_CHUNK ? n - s0 : FR_MT_CHUNK};
    }
    fr_mt_entry e;
    memset(&e, 0, sizeof e);
    float *g = NULL;
    CUOK(cudaMalloc((void **)&e.p, (size_t)n * 4));
    CUOK(cudaMalloc((void **)&g, (size_t)n * 4));
    CUOK(cudaMalloc((void **)&e.s0, (size_t)n * 4));
    CUOK(cudaMalloc((void **)&e.s1, (size_t)n * 4));
    CUOK(cudaMemset(e.p, 0, (size_t)n * 4));
    CUOK(cudaMemset(e.s0, 0, (size_t)n * 4));
    CUOK(cudaMemset(e.s1, 0, (size_t)n * 4));
    CUOK(cudaMemset(g, 0x3f, (size_t)n * 4)); /* 0.747 each */
    e.g = g, e.n = n, e.decay = 1;
    fr_mt_entry *de;
    fr_mt_chunk *dc;
    fr_step_scalars *dsc;
    double *dpart;
    CUOK(cudaMalloc((void **)&de, sizeof e));
    CUOK(cudaMalloc((void **)&dc, (size_t)n_chunks * sizeof *chunks));
    CUOK(cudaMalloc((void **)&dsc, sizeof(fr_step_scalars)));
    CUOK(cudaMalloc((void **)&dpart, (size_t)n_chunks * sizeof(double)));
    CUOK(cudaMemcpy(de, &e, sizeof e, cudaMemcpyHostToDevice));
    CUOK(cudaMemcpy(dc, chunks, (size_t)n_chunks * sizeof *chunks, cudaMemcpyHostToDevice));
    fr_step_scalars sc;
    memset(&sc, 0, sizeof sc);
    sc.ok = 1, sc.tstep = 1;
    CUOK(cudaMemcpy(dsc, &sc, sizeof sc, cudaMemcpyHostToDevice));
    fr_adamw_args a;
    memset(&a, 0, sizeof a);
    a.keep = 0.9999f, a.decay_on = 1, a.b1 = 0.9f, a.one_b1 = 0.1f, a.b2 = 0.95f, a.one_b2 = 0.05f, a.eps = 1e-8f;
    for (int i = 0; i < FR_OPT_WINDOW; i++) a.neg_step[i] = -3e-4f, a.bc2_sqrt[i] = 0.5f;
    cudaEvent_t e0, e1;
    CUOK(cudaEventCreate(&e0));
    CUOK(cudaEventCreate(&e1));
    const int reps = 5;
    for (int which = 0; which < 2; which++) {
        CUOK(which ? fr_cuda_mt_sumsq(dc, n_chunks, de, 0, dpart, 0)
                   : fr_cuda_mt_adamw(dc, n_chunks, de, 0, dsc, a, 0));
        CUOK(cudaEventRecord(e0, 0));
        for (int r = 0; r < reps; r++) /* tstep stays 1: base 0, window 0 every run */
            CUOK(which ? fr_cuda_mt_sumsq(dc, n_chunks, de, 0, dpart, 0)
                       : fr_cuda_mt_adamw(dc, n_chunks, de, 0, dsc, a, 0));
        CUOK(cudaEventRecord(e1, 0));
        CUOK(cudaEventSynchronize(e1));
        float ms = 0;
        CUOK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= reps;
        const double bytes = (double)n * (which ? 4 : 28);
        printf("\n    %s over %lld parameters: %.3f ms, %.0f GB/s", which ? "gradient norm's sums" : "AdamW (fp32)",
               (long long)n, ms, bytes / ms / 1e6);
    }
    printf("\n");
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFree(e.p), cudaFree(g), cudaFree(e.s0), cudaFree(e.s1);
    cudaFree(de), cudaFree(dc), cudaFree(dsc), cudaFree(dpart);
    free(chunks);
}
static void test_plain(void) { check_path(FR_OPT_STATE_F32, 0, 1); }
static void test_f32_master(void) { check(FR_OPT_STATE_F32, 1); }
static void test_bf16(void) { check(FR_OPT_STATE_BF16, 0); }
static void test_bf16_master(void) { check(FR_OPT_STATE_BF16, 1); }
static void test_fp8(void) { check(FR_OPT_STATE_FP8, 0); }
static void test_fp8_master(void) { check(FR_OPT_STATE_FP8, 1); }
#endif

static CU_TestInfo tests[] = {
#ifdef FP8RUN_HAVE_CUDA
    {"fp32 state and master (the default kernel, aligned and not), the norm's sums: GPU == CPU", test_plain},
    {"fp32 state, bf16 master: GPU == CPU bit for bit", test_f32_master},
    {"memory prediction vs the session's allocation; too large refused", test_memory_prediction},
    {"bf16 state: GPU == CPU bit for bit", test_bf16},
    {"bf16 state, bf16 master: GPU == CPU bit for bit", test_bf16_master},
    {"fp8 state: GPU == CPU bit for bit", test_fp8},
    {"fp8 state, bf16 master: GPU == CPU bit for bit", test_fp8_master},
    {"FR_OPTIM_BENCH=1: AdamW and the norm's sums at 889M parameters", test_bench},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"gpu_optim", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return gpu_test_main(suites); }
