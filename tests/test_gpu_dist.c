/* Data-parallel training over NCCL on the GPU (label gpu: skips without a device, and says so
 * without NCCL).
 *
 *  - NCCL missing: FP8RUN_NCCL_LIBRARY pointing nowhere is a clear error naming the variable
 *    (a forked child, before anything loads NCCL here).
 *  - World size 1 through the NCCL path (gradients, loss, amaxes and flags all-reduced over one
 *    rank): fp32 and fp8 (delayed, current), 1 and 2 micro-batches, with and without the
 *    sharded optimizer (ZeRO-1) and sharded gradients (ZeRO-2): the same losses and weights as
 *    the plain GPU trainer (1e-6 relative). The buckets overlapped with the backward pass (the
 *    default) and after it (FP8RUN_DIST_OVERLAP=0): the same bits, losses and weights.
 *  - The memory plan of one of 2 ranks: sharding shrinks the optimizer state (ZeRO-1) and the
 *    accumulation buffers (ZeRO-2) to the largest rank's share.
 *  - A sharded run's checkpoint (moments gathered from their owner) continues in a plain
 *    trainer exactly as the sharded run continues.
 *  - With 2 or more GPUs, the CLI (fp8 delayed, llama_tiny, 8 steps): `--gpus 2 --batch 2`, also
 *    with --shard-optimizer, against one GPU with 2 micro-batches of 2 (the same GEMM shapes:
 *    losses within 1e-5 relative) and with --batch 4 (other GEMM shapes, so another summation
 *    order in fp8: within 2e-2); the 2-GPU checkpoint resumes on 1 GPU. Overlap off gives the
 *    same losses bit for bit; --shard-gradients (ZeRO-2) within 1e-5, also with 2 micro-batches
 *    against the unsharded 2-GPU run with 2 micro-batches.
 *  - Two ranks started as an external launcher would (RANK, WORLD_SIZE, ...): rank 1 killed
 *    mid-run, rank 0 stops with a NCCL error within FP8RUN_NCCL_TIMEOUT (15 s here) instead of
 *    hanging, and the last checkpoint resumes on one GPU. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_runner.h"
#include "tests/gpu_harness.h"
#include "graph/onnx_io.h"
#include "runtime/train/train_memory.h"
#include "runtime/train/trainer.h"
#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_probe.h"
#include "runtime/cuda/nccl_comm.h"
#endif

#ifdef FP8RUN_HAVE_CUDA
static int nccl_ok(void)
{
    static int ok = -1;
    if (ok < 0) {
        int v = 0;
        ok = fr_nccl_load(&v) == FR_OK;
        if (ok)
            printf("\n  (NCCL %d)", v);
        else
            printf("\n  SKIP: %s", fr_last_error());
    }
    return ok;
}
#endif

static void test_missing_library(void)
{
#ifdef FP8RUN_HAVE_CUDA
    pid_t p = fork();
    if (p == 0) { /* nothing here has loaded NCCL yet: the child tries the bad path first */
        setenv("FP8RUN_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        fr_status st = fr_nccl_load(NULL);
        _exit(st == FR_ERR_UNSUPPORTED && strstr(fr_last_error(), "FP8RUN_NCCL_LIBRARY") ? 0 : 1);
    }
    int ws = -1;
    waitpid(p, &ws, 0);
    CU_ASSERT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
#endif
}

static fr_graph *load_tiny(void)
{
    char p[600];
    fr_graph *g = NULL;
    if (fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g) != FR_OK)
        printf("\n  %s\n", fr_last_error());
    return g;
}

static fr_train_options opts(const char *precision, const char *recipe, int world, int shard)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 16;
    o.precision = precision;
    if (recipe) o.fp8.recipe = recipe;
    o.device = "cuda";
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.world_size = world;
    o.shard_optimizer = shard >= 1;
    o.shard_gradients = shard >= 2;
    return o;
}

/* steps of k micro-batches from a seeded stream; losses into out */
static void train(fr_trainer *t, int steps, int k, uint64_t seed, double *out)
{
    const int64_t n = (int64_t)k * fr_trainer_batch(t) * (fr_trainer_seq_len(t) + 1), V = fr_trainer_vocab(t);
    int64_t *w = malloc((size_t)n * sizeof *w);
    uint64_t s = seed * 2654435761u + 1;
    for (int i = 0; i < steps; i++) {
        for (int64_t e = 0; e < n; e++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            w[e] = (int64_t)((s >> 33) % (uint64_t)V);
        }
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, k, &st));
        CU_ASSERT_FALSE(st.skipped);
        out[i] = st.loss;
    }
    free(w);
}

/* the largest relative L2 distance of one trained tensor (b the reference) */
static double weights_diff(fr_trainer *a, fr_trainer *b)
{
    double worst = 0;
    int64_t cap = 0;
    for (int i = 0; i < fr_trainer_param_count(a); i++)
        if (fr_trainer_param_numel(a, i) > cap) cap = fr_trainer_param_numel(a, i);
    float *x = malloc((size_t)(2 * cap) * sizeof *x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    for (int i = 0; i < fr_trainer_param_count(a); i++) {
        const int64_t n = fr_trainer_param_numel(a, i);
        FR_ASSERT_OK(fr_trainer_get_param(a, fr_trainer_param_name(a, i), x));
        FR_ASSERT_OK(fr_trainer_get_param(b, fr_trainer_param_name(a, i), x + cap));
        const double r = fr_rel_l2(x, x + cap, n);
        if (!(r <= worst)) worst = r;
    }
    free(x);
    return worst;
}

static double worst_rel(const double *a, const double *b, int n)
{
    double w = 0;
    for (int i = 0; i < n; i++) {
        double r = fabs(a[i] - b[i]) / fabs(b[i]);
        if (!(r <= w)) w = r;
    }
    return w;
}

static void check_world1(const char *precision, const char *recipe, int shard)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!nccl_ok()) return;
    fr_graph *g = load_tiny();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options op = opts(precision, recipe, 0, 0), od = opts(precision, recipe, 1, shard);
    fr_trainer *tp, *td;
    FR_ASSERT_OK(fr_trainer_new(g, &op, &tp));
    FR_ASSERT_OK(fr_trainer_new(g, &od, &td));
    double lp[8], ld[8];
    train(tp, 4, 1, 3, lp);
    train(td, 4, 1, 3, ld);
    train(tp, 4, 2, 4, lp + 4); /* accumulation: the reduced buffers are the accumulators */
    train(td, 4, 2, 4, ld + 4);
    double wl = worst_rel(ld, lp, 8), wd = weights_diff(td, tp);
    printf(" (%s%s%s: losses %.4f..%.4f, worst rel diff %.1e, weights %.1e)", precision, recipe ? " " : "",
           recipe ? recipe : "", lp[0], lp[7], wl, wd);
    CU_ASSERT(wl <= 1e-6);
    CU_ASSERT(wd <= 1e-6);
    fr_trainer_free(tp);
    fr_trainer_free(td);
    fr_graph_free(g);
#else
    (void)precision, (void)recipe, (void)shard;
#endif
}

static void test_world1_fp32(void) { check_world1("fp32", NULL, 0); }
static void test_world1_fp8_delayed(void) { check_world1("fp8", "delayed", 0); }
static void test_world1_fp8_current(void) { check_world1("fp8", "current", 0); }
static void test_world1_sharded(void) { check_world1("fp8", "delayed", 1); }
static void test_world1_zero2(void) { check_world1("fp8", "delayed", 2); }

/* the buckets during the backward pass or after it: the same collectives, the same bits */
static void test_world1_overlap_bits(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!nccl_ok()) return;
    fr_graph *g = load_tiny();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    for (int shard = 0; shard <= 2; shard += 2) {
        fr_train_options o = opts("fp8", "delayed", 1, shard);
        fr_trainer *ton, *toff;
        unsetenv("FP8RUN_DIST_OVERLAP");
        FR_ASSERT_OK(fr_trainer_new(g, &o, &ton));
        setenv("FP8RUN_DIST_OVERLAP", "0", 1);
        FR_ASSERT_OK(fr_trainer_new(g, &o, &toff));
        unsetenv("FP8RUN_DIST_OVERLAP");
        double a[8], b[8];
        train(ton, 4, 1, 5, a);
        train(toff, 4, 1, 5, b);
        train(ton, 4, 2, 6, a + 4);
        train(toff, 4, 2, 6, b + 4);
        const double wd = weights_diff(ton, toff);
        printf(" (%s: worst rel loss diff %.1e, weights %.1e)", shard ? "ZeRO-2" : "DDP", worst_rel(a, b, 8), wd);
        CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
        CU_ASSERT(wd == 0);
        fr_trainer_free(ton);
        fr_trainer_free(toff);
    }
    fr_graph_free(g);
#endif
}

/* one of 2 ranks' memory plan: ZeRO-1 shares the optimizer state, ZeRO-2 the accumulators too */
static void test_memory_plan_shards(void)
{
#ifdef FP8RUN_HAVE_CUDA
    fr_graph *g = load_tiny();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_memory m[3];
    for (int shard = 0; shard <= 2; shard++) {
        fr_train_options o = opts("fp8", "delayed", 2, shard);
        o.grad_accum = 2;
        FR_ASSERT_OK(fr_train_predict_memory(g, &o, 1, &m[shard]));
    }
    printf(" (optimizer state %zu / %zu / %zu bytes, accumulators %zu / %zu / %zu)", m[0].optimizer_state,
           m[1].optimizer_state, m[2].optimizer_state, m[0].grads, m[1].grads, m[2].grads);
    CU_ASSERT(m[1].optimizer_state < m[0].optimizer_state && m[1].optimizer_state * 2 >= m[0].optimizer_state);
    CU_ASSERT_EQUAL(m[2].optimizer_state, m[1].optimizer_state);
    CU_ASSERT_EQUAL(m[1].grads, m[0].grads);
    CU_ASSERT(m[2].grads < m[0].grads && m[2].grads * 2 >= m[0].grads);
    CU_ASSERT_EQUAL(m[0].total - m[2].total, (m[0].optimizer_state - m[2].optimizer_state) + (m[0].grads - m[2].grads));
    fr_graph_free(g);
#endif
}

/* the sharded run's checkpoint holds every moment: a plain trainer continues identically */
static void test_sharded_checkpoint(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!nccl_ok()) return;
    fr_graph *g = load_tiny();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options od = opts("fp8", "delayed", 1, 1), op = opts("fp8", "delayed", 0, 0);
    fr_trainer *td, *tp;
    FR_ASSERT_OK(fr_trainer_new(g, &od, &td));
    double a[6], b[3];
    train(td, 3, 1, 9, a);
    char dir[512], path[600];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/sharded.ckpt", dir);
    FR_ASSERT_OK(fr_trainer_save(td, path, NULL, 0));
    FR_ASSERT_OK(fr_trainer_new(g, &op, &tp));
    FR_ASSERT_OK(fr_trainer_load(tp, path, NULL, NULL));
    train(td, 3, 1, 10, a + 3);
    train(tp, 3, 1, 10, b);
    double wl = worst_rel(b, a + 3, 3), wd = weights_diff(tp, td);
    printf(" (continued: worst rel diff %.1e, weights %.1e)", wl, wd);
    CU_ASSERT(wl <= 1e-6);
    CU_ASSERT(wd <= 1e-6);
    unlink(path);
    rmdir(dir);
    fr_trainer_free(td);
    fr_trainer_free(tp);
    fr_graph_free(g);
#endif
}

/* ---- two GPUs through the CLI ---- */

static int read_losses(const char *path, double *out, int max)
{
    char *s = cli_slurp(path, NULL);
    int n = 0;
    for (char *line = s; line && *line && n < max;) {
        long long step;
        const char *l = strstr(line, "\"loss\": ");
        if (sscanf(line, "{\"step\": %lld", &step) == 1 && l && step == n + 1) out[n++] = strtod(l + 8, NULL);
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    free(s);
    return n;
}

#ifdef FP8RUN_HAVE_CUDA
/* two GPUs and NCCL, or a SKIP line */
static int two_gpus(void)
{
    int n = 0;
    if (fr_cuda_device_count(&n) != FR_OK || n < 2) {
        printf(" SKIP: %d GPU(s), this needs 2", n);
        return 0;
    }
    return nccl_ok();
}
#endif

static void test_two_gpus_cli(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!two_gpus()) return;
    char model[600], tok[700];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    snprintf(tok, sizeof tok, "%s/tok.bin", cli_tmp);
    FILE *f = fopen(tok, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 40000; i++) {
        uint16_t x = (uint16_t)((i * 37 + i / 7) % 100);
        fwrite(&x, 2, 1, f);
    }
    fclose(f);
    const char *common = "--data tok.bin --seq 16 --steps 8 --lr 1e-3 --precision fp8 --device cuda --log-every 1";
    double one[8], acc[8], two[8], sh[8], off[8], z2[8], tacc[8], z2acc[8];
    CLI_EXPECT(cli_run("train %s %s --batch 4 --log one.jsonl", model, common), 0, cli_out, "trained");
    CLI_EXPECT(cli_run("train %s %s --batch 2 --grad-accum 2 --log acc.jsonl", model, common), 0, cli_out, "trained");
    CLI_EXPECT(cli_run("train %s %s --batch 2 --gpus 2 --log two.jsonl --ckpt-dir ck", model, common), 0, cli_out,
               "trained");
    CLI_EXPECT(cli_run("train %s %s --batch 2 --gpus 2 --shard-optimizer --log sh.jsonl", model, common), 0, cli_out,
               "trained");
    setenv("FP8RUN_DIST_OVERLAP", "0", 1);
    CLI_EXPECT(cli_run("train %s %s --batch 2 --gpus 2 --log off.jsonl", model, common), 0, cli_out, "trained");
    unsetenv("FP8RUN_DIST_OVERLAP");
    CLI_EXPECT(cli_run("train %s %s --batch 2 --gpus 2 --shard-gradients --log z2.jsonl", model, common), 0, cli_out,
               "trained");
    CLI_EXPECT(cli_run("train %s %s --batch 1 --grad-accum 2 --gpus 2 --log tacc.jsonl", model, common), 0, cli_out,
               "trained");
    CLI_EXPECT(cli_run("train %s %s --batch 1 --grad-accum 2 --gpus 2 --shard-gradients --log z2acc.jsonl", model,
                       common),
               0, cli_out, "trained");
    const char *more[4] = {"off", "z2", "tacc", "z2acc"};
    double *mv[4] = {off, z2, tacc, z2acc};
    for (int q = 0; q < 4; q++) {
        char pq[700];
        snprintf(pq, sizeof pq, "%s/%s.jsonl", cli_tmp, more[q]);
        CU_ASSERT_EQUAL(read_losses(pq, mv[q], 8), 8);
    }
    char p0[700], p1[700], p2[700], p3[700];
    snprintf(p0, sizeof p0, "%s/acc.jsonl", cli_tmp);
    snprintf(p1, sizeof p1, "%s/one.jsonl", cli_tmp);
    snprintf(p2, sizeof p2, "%s/two.jsonl", cli_tmp);
    snprintf(p3, sizeof p3, "%s/sh.jsonl", cli_tmp);
    CU_ASSERT_EQUAL(read_losses(p0, acc, 8), 8);
    CU_ASSERT_EQUAL(read_losses(p1, one, 8), 8);
    CU_ASSERT_EQUAL(read_losses(p2, two, 8), 8);
    CU_ASSERT_EQUAL(read_losses(p3, sh, 8), 8);
    /* the same GEMM shapes (B=2 on each GPU, or 2 micro-batches of 2 on one): the same sums */
    double w2 = worst_rel(two, acc, 8), w3 = worst_rel(sh, acc, 8), w4 = worst_rel(two, one, 8);
    printf(" (2 GPUs x B=2 vs 1 GPU x 2 micro-batches of 2: losses %.4f..%.4f, worst rel diff %.1e, sharded %.1e; vs 1 "
           "GPU x B=4 (other GEMM shapes): %.1e)",
           acc[0], acc[7], w2, w3, w4);
    CU_ASSERT(w2 <= 1e-5);
    CU_ASSERT(w3 <= 1e-5);
    CU_ASSERT(w4 <= 2e-2); /* fp8 on another reduction order, 8 fast-moving steps */
    const double wz = worst_rel(z2, two, 8), wza = worst_rel(z2acc, tacc, 8);
    printf(" (overlap off: %s; ZeRO-2 vs DDP: %.1e, with 2 micro-batches %.1e)",
           memcmp(off, two, sizeof off) == 0 ? "the same losses" : "OTHER LOSSES", wz, wza);
    CU_ASSERT_EQUAL(memcmp(off, two, sizeof off), 0);
    CU_ASSERT(wz <= 1e-5);
    CU_ASSERT(wza <= 1e-5);
    /* the 2-GPU checkpoint resumes on one GPU with the same global batch */
    CLI_EXPECT(cli_run("train %s --data tok.bin --seq 16 --steps 10 --lr 1e-3 --precision fp8 --device cuda --batch 4 "
                       "--ckpt-dir ck --resume",
                       model),
               0, cli_err, "resumed from");
#endif
}

/* ---- a rank that dies: the other one stops with a NCCL error, the checkpoint stays ---- */

#ifdef FP8RUN_HAVE_CUDA
/* one rank of 2 as an external launcher starts it (torchrun-style variables), output to files */
static pid_t spawn_rank(int rank, int port, const char *args)
{
    pid_t p = fork();
    if (p != 0) return p;
    char v[32], log[700];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    setenv("FP8RUN_NCCL_TIMEOUT", "15", 1);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    snprintf(log, sizeof log, "%s/rank%d.err", cli_tmp, rank);
    if (chdir(cli_tmp) != 0 || !freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(126);
    execl("/bin/sh", "sh", "-c", args, (char *)NULL);
    _exit(127);
}
#endif

static void test_rank_dies(void)
{
#ifdef FP8RUN_HAVE_CUDA
    if (!two_gpus()) return;
    char model[600], cmd[2000], ck[700], err[700];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    snprintf(cmd, sizeof cmd,
             "exec %s train %s --data tok.bin --seq 16 --batch 2 --steps 1000000 --lr 1e-3 --precision fp8 --device "
             "cuda --ckpt-dir dead --ckpt-every 20",
             FR_CLI, model);
    const int port = fr_test_free_port();
    pid_t r0 = spawn_rank(0, port, cmd), r1 = spawn_rank(1, port, cmd);
    snprintf(ck, sizeof ck, "%s/dead/step_00000040.ckpt", cli_tmp);
    int waited = 0;
    while (access(ck, F_OK) != 0 && waited < 600) { /* 60 s for two checkpoints */
        usleep(100 * 1000);
        waited++;
    }
    CU_ASSERT(access(ck, F_OK) == 0);
    kill(r1, SIGKILL);
    int ws = -1, s0 = -1;
    waitpid(r1, &ws, 0);
    for (waited = 0; waited < 900 && waitpid(r0, &s0, WNOHANG) == 0; waited++) usleep(100 * 1000); /* 90 s */
    if (waited >= 900) {
        kill(r0, SIGKILL);
        waitpid(r0, &s0, 0);
    }
    snprintf(err, sizeof err, "%s/rank0.err", cli_tmp);
    char *text = cli_slurp(err, NULL);
    printf(" (rank 0 stopped %.1f s after rank 1 was killed: %.200s)", waited / 10.0, text);
    CU_ASSERT(waited < 900);
    CU_ASSERT(WIFEXITED(s0) && WEXITSTATUS(s0) != 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "NCCL"));
    free(text);
    /* the last checkpoint is whole: one GPU resumes from it with the same global batch */
    CLI_EXPECT(cli_run("train %s --data tok.bin --seq 16 --batch 4 --steps 41 --lr 1e-3 --precision fp8 --device cuda "
                       "--ckpt-dir dead --resume",
                       model),
               0, cli_err, "resumed from");
#endif
}

static CU_TestInfo tests[] = {
    {"NCCL missing: a clear error", test_missing_library},
    {"world size 1: fp32", test_world1_fp32},
    {"world size 1: fp8 delayed", test_world1_fp8_delayed},
    {"world size 1: fp8 current", test_world1_fp8_current},
    {"world size 1: sharded optimizer", test_world1_sharded},
    {"world size 1: sharded gradients (ZeRO-2)", test_world1_zero2},
    {"world size 1: overlap on and off, the same bits", test_world1_overlap_bits},
    {"memory plan of a rank: ZeRO-1, ZeRO-2", test_memory_plan_shards},
    {"sharded checkpoint continues unsharded", test_sharded_checkpoint},
    {"2 GPUs (CLI) = 1 GPU with 2x batch", test_two_gpus_cli},
    {"a rank dies: the other stops, the checkpoint stays", test_rank_dies},
    CU_TEST_INFO_NULL};
static CU_SuiteInfo suites[] = {{"dist", cli_suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void)
{
    /* the CLI runs compared across processes take the heuristic's GEMM algorithms: timed choices
       are per process, and a near tie may go another way in another one (ops/cuda/cuda_gemm.h) */
    setenv("FP8RUN_GEMM_TUNE", "0", 1);
    return gpu_test_main(suites);
}
