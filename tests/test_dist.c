/* Data-parallel planning without a GPU (runtime/dist/dist.h): the launch environment, the gradient
 * buckets, the optimizer-state owners, the data split and the TCP rendezvous (forked ranks on
 * loopback), and the CLI's launcher (--gpus, the torchrun-style variables) as far as a CPU goes.
 * Sizes are random per run; the checks are the invariants each function promises. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_runner.h"
#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "runtime/dist/dist.h"
#include "runtime/train/trainer.h"

/* ---- a fake environment ---- */
static const char *fake_env[16][2];
static const char *fake_get(const char *name)
{
    for (int i = 0; i < 16 && fake_env[i][0]; i++)
        if (strcmp(fake_env[i][0], name) == 0) return fake_env[i][1];
    return NULL;
}
static void set_env(const char *const *kv)
{
    memset(fake_env, 0, sizeof fake_env);
    for (int i = 0; kv[2 * i]; i++) {
        fake_env[i][0] = kv[2 * i];
        fake_env[i][1] = kv[2 * i + 1];
    }
}

static void test_env(void)
{
    fr_dist_env e;
    set_env((const char *const[]){NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT_EQUAL(e.present, 0);
    CU_ASSERT_EQUAL(e.world, 1);
    CU_ASSERT_EQUAL(e.rank, 0);
    CU_ASSERT_STRING_EQUAL(e.addr, "127.0.0.1");
    CU_ASSERT_EQUAL(e.port, 29500);

    set_env((const char *const[]){"WORLD_SIZE", "8", "RANK", "5", "LOCAL_RANK", "1", "MASTER_ADDR", "node0",
                                  "MASTER_PORT", "1234", NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT_EQUAL(e.present, 1);
    CU_ASSERT_EQUAL(e.world, 8);
    CU_ASSERT_EQUAL(e.rank, 5);
    CU_ASSERT_EQUAL(e.local_rank, 1);
    CU_ASSERT_STRING_EQUAL(e.addr, "node0");
    CU_ASSERT_EQUAL(e.port, 1234);

    /* LOCAL_RANK defaults to RANK (one node) */
    set_env((const char *const[]){"WORLD_SIZE", "2", "RANK", "1", NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT_EQUAL(e.local_rank, 1);

    static const char *const bad[][6] = {
        {"WORLD_SIZE", "2", "RANK", "2", NULL, NULL},   /* rank not below world */
        {"WORLD_SIZE", "0", NULL, NULL, NULL, NULL},    /* world < 1 */
        {"WORLD_SIZE", "2x", NULL, NULL, NULL, NULL},   /* not a number */
        {"WORLD_SIZE", "2", "RANK", "-1", NULL, NULL},  /* negative */
        {"WORLD_SIZE", "2", "MASTER_PORT", "70000", NULL, NULL},
    };
    static const char *const bad_var[] = {"RANK", "WORLD_SIZE", "WORLD_SIZE", "RANK", "MASTER_PORT"};
    for (int i = 0; i < 5; i++) {
        set_env(bad[i]);
        CU_ASSERT_EQUAL(fr_dist_env_parse(fake_get, &e), FR_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), bad_var[i]));
    }
}

/* ---- buckets ---- */
static void test_buckets(void)
{
    fr_rng r = fr_test_rng("buckets");
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(fr_rng_uniform(&r) * 60);
        int64_t numel[64];
        for (int i = 0; i < n; i++) numel[i] = (int64_t)(fr_rng_uniform(&r) * 5000); /* empty ones too */
        size_t cap = 4 * (size_t)(1 + fr_rng_uniform(&r) * 8000);
        fr_dist_bucket *b;
        int nb;
        FR_ASSERT_OK(fr_dist_plan_buckets(numel, n, 4, cap, &b, &nb));
        /* every parameter once, in descending order, contiguous */
        int next = n - 1;
        for (int k = 0; k < nb; k++) {
            CU_ASSERT_EQUAL(b[k].first, next);
            CU_ASSERT(b[k].count >= 1);
            int64_t s = 0;
            for (int j = 0; j < b[k].count; j++) s += numel[b[k].first - j];
            CU_ASSERT_EQUAL(s, b[k].numel);
            /* within the budget unless a single parameter exceeds it */
            CU_ASSERT((size_t)s * 4 <= cap || b[k].count == 1);
            /* greedy: the next parameter did not fit */
            if (k + 1 < nb) CU_ASSERT((size_t)(s + numel[b[k + 1].first]) * 4 > cap);
            next -= b[k].count;
        }
        CU_ASSERT_EQUAL(next, -1);
        free(b);
    }
    fr_dist_bucket *b;
    int nb;
    FR_ASSERT_OK(fr_dist_plan_buckets(NULL, 0, 4, 64, &b, &nb));
    CU_ASSERT_EQUAL(nb, 0);
    free(b);
    CU_ASSERT_EQUAL(fr_dist_plan_buckets(NULL, 0, 4, 0, &b, &nb), FR_ERR_INVALID_ARG);
}

/* ---- overlap: when each bucket may start, and its chunks ---- */
static void test_bucket_ready(void)
{
    fr_rng r = fr_test_rng("bucket ready");
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(fr_rng_uniform(&r) * 60), touch[64], ready[64];
        int64_t numel[64];
        for (int i = 0; i < n; i++) {
            numel[i] = 1 + (int64_t)(fr_rng_uniform(&r) * 3000);
            /* mostly produced in reverse order (a backward pass), some early or never touched */
            touch[i] = fr_rng_uniform(&r) < 0.1 ? -1 : (n - i) * 10 + (int)(fr_rng_uniform(&r) * 25);
        }
        fr_dist_bucket *b;
        int nb;
        FR_ASSERT_OK(fr_dist_plan_buckets(numel, n, 4, 4 * (size_t)(1 + fr_rng_uniform(&r) * 6000), &b, &nb));
        fr_dist_bucket_ready(b, nb, touch, ready);
        int run = -1;
        for (int k = 0; k < nb; k++) {
            int mx = -1;
            for (int j = 0; j < b[k].count; j++)
                if (touch[b[k].first - j] > mx) mx = touch[b[k].first - j];
            /* not before its last gradient, nor before the bucket ahead of it: plan order */
            CU_ASSERT(ready[k] >= mx);
            CU_ASSERT(ready[k] >= run);
            run = mx > run ? mx : run;
            CU_ASSERT_EQUAL(ready[k], run); /* and no later than that */
        }
        free(b);
    }
}

static void test_bucket_chunks(void)
{
    fr_rng r = fr_test_rng("bucket chunks");
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(fr_rng_uniform(&r) * 40), world = 1 + (int)(fr_rng_uniform(&r) * 4);
        int64_t numel[40];
        int owner[40];
        const int64_t chunk = 1 + (int64_t)(fr_rng_uniform(&r) * 500);
        for (int i = 0; i < n; i++) numel[i] = (int64_t)(fr_rng_uniform(&r) * 2000); /* empty ones too */
        FR_ASSERT_OK(fr_dist_partition(numel, n, world, owner));
        fr_dist_bucket *b;
        int nb;
        FR_ASSERT_OK(fr_dist_plan_buckets(numel, n, 4, 4 * (size_t)(1 + fr_rng_uniform(&r) * 3000), &b, &nb));
        for (int rk = -1; rk < world; rk++) { /* -1: every parameter (DDP) */
            /* the chunk list the trainer builds: owned parameters in order, `chunk` elements each */
            int list[40 * 2001], len = 0, first[40], count[40], seen[40 * 2001] = {0};
            for (int i = 0; i < n; i++)
                if (rk < 0 || owner[i] == rk)
                    for (int64_t s = 0; s < numel[i]; s += chunk) list[len++] = i;
            FR_ASSERT_OK(fr_dist_bucket_chunks(numel, n, rk < 0 ? NULL : owner, rk, chunk, b, nb, first, count));
            for (int k = 0; k < nb; k++)
                for (int c = first[k]; c < first[k] + count[k]; c++) {
                    CU_ASSERT_FATAL(c >= 0 && c < len);
                    CU_ASSERT(list[c] <= b[k].first && list[c] > b[k].first - b[k].count); /* its own parameters */
                    seen[c]++;
                }
            for (int c = 0; c < len; c++) CU_ASSERT_EQUAL(seen[c], 1); /* every chunk in one bucket */
        }
        free(b);
    }
}

/* ---- optimizer-state owners ---- */
static void test_partition(void)
{
    fr_rng r = fr_test_rng("partition");
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(fr_rng_uniform(&r) * 200), world = 1 + (int)(fr_rng_uniform(&r) * 8);
        int64_t numel[200], maxn = 0, total = 0;
        int owner[200], again[200];
        for (int i = 0; i < n; i++) {
            numel[i] = 1 + (int64_t)(fr_rng_uniform(&r) * 100000);
            if (numel[i] > maxn) maxn = numel[i];
            total += numel[i];
        }
        FR_ASSERT_OK(fr_dist_partition(numel, n, world, owner));
        FR_ASSERT_OK(fr_dist_partition(numel, n, world, again));
        CU_ASSERT_EQUAL(memcmp(owner, again, (size_t)n * sizeof *owner), 0); /* deterministic */
        int64_t sum = 0, lo = -1, hi = 0;
        for (int rk = 0; rk < world; rk++) {
            int64_t o = fr_dist_owned_numel(numel, owner, n, rk);
            sum += o;
            if (lo < 0 || o < lo) lo = o;
            if (o > hi) hi = o;
        }
        for (int i = 0; i < n; i++) CU_ASSERT(owner[i] >= 0 && owner[i] < world);
        CU_ASSERT_EQUAL(sum, total);
        /* greedy largest-first: the heaviest rank exceeds the lightest by at most one parameter */
        CU_ASSERT(hi - lo <= maxn);
    }
    int owner[3];
    const int64_t eq[3] = {10, 10, 10};
    FR_ASSERT_OK(fr_dist_partition(eq, 3, 2, owner));
    CU_ASSERT(owner[0] == 0 && owner[1] == 1 && owner[2] == 0); /* ties: lower index, lower rank */
    CU_ASSERT_EQUAL(fr_dist_partition(eq, 3, 0, owner), FR_ERR_INVALID_ARG);
}

/* ---- the data split: the ranks' shares put together are the global step ---- */
static void test_split(void)
{
    fr_rng r = fr_test_rng("split");
    const int k = 3, world = 4;
    const int64_t B = 2, win = 5, per = B * win;
    int64_t global[3 * 4 * 2 * 5], back[3 * 4 * 2 * 5], local[3 * 2 * 5];
    for (size_t i = 0; i < sizeof global / sizeof *global; i++) global[i] = (int64_t)(fr_rng_uniform(&r) * 1e6);
    for (int rk = 0; rk < world; rk++) {
        fr_dist_split_windows(global, local, k, B, win, rk, world);
        /* micro-batch m of rank rk is windows [rk*B, (rk+1)*B) of global micro-batch m */
        for (int m = 0; m < k; m++) memcpy(back + ((int64_t)m * world + rk) * per, local + m * per, (size_t)per * sizeof *local);
    }
    CU_ASSERT_EQUAL(memcmp(global, back, sizeof global), 0);
}

/* ---- a checkpoint taken with N ranks resumes with M: the layout is the unsharded one ----
 * The optimizer state is gathered from its owners into every parameter's slots (the usual
 * checkpoint), and a resumed run takes each owner's share of it again; the loader reads the
 * global batch (N x B windows per micro-batch) whatever N, so its position carries over when
 * N x B does. Simulated here with the real partitions and splits for N and M ranks. */
static void test_resume_other_count(void)
{
    fr_rng r = fr_test_rng("resume other count");
    for (int trial = 0; trial < 20; trial++) {
        const int n = 1 + (int)(fr_rng_uniform(&r) * 30);
        const int N = 1 << (int)(fr_rng_uniform(&r) * 3), M = 1 << (int)(fr_rng_uniform(&r) * 3);
        int64_t numel[30];
        float state[30][8], shard[8][30][8], ckpt[30][8], again[30][8];
        int ownN[30], ownM[30];
        for (int i = 0; i < n; i++) {
            numel[i] = 1 + (int64_t)(fr_rng_uniform(&r) * 8);
            for (int e = 0; e < 8; e++) state[i][e] = (float)fr_rng_uniform(&r);
        }
        FR_ASSERT_OK(fr_dist_partition(numel, n, N, ownN));
        FR_ASSERT_OK(fr_dist_partition(numel, n, M, ownM));
        memset(shard, 0, sizeof shard);
        for (int i = 0; i < n; i++) memcpy(shard[ownN[i]][i], state[i], sizeof state[i]); /* N ranks' shares */
        for (int i = 0; i < n; i++) memcpy(ckpt[i], shard[ownN[i]][i], sizeof ckpt[i]);  /* gathered: saved */
        memset(shard, 0, sizeof shard);
        for (int rk = 0; rk < M; rk++) /* resumed: each of M ranks takes what it owns */
            for (int i = 0; i < n; i++)
                if (ownM[i] == rk) memcpy(shard[rk][i], ckpt[i], sizeof ckpt[i]);
        for (int i = 0; i < n; i++) memcpy(again[i], shard[ownM[i]][i], sizeof again[i]);
        for (int i = 0; i < n; i++) CU_ASSERT_EQUAL(memcmp(again[i], state[i], (size_t)numel[i] * sizeof(float)), 0);
        /* the data: global micro-batches of G = 8 windows, N ranks of G/N and M of G/M */
        const int64_t G = 8, win = 3, k = 2;
        int64_t global[2 * 8 * 3], backN[2 * 8 * 3], backM[2 * 8 * 3], local[2 * 8 * 3];
        for (int i = 0; i < 2 * 8 * 3; i++) global[i] = (int64_t)(fr_rng_uniform(&r) * 1e6);
        for (int rk = 0; rk < N; rk++) {
            fr_dist_split_windows(global, local, (int)k, G / N, win, rk, N);
            for (int m = 0; m < k; m++)
                memcpy(backN + (m * G + rk * (G / N)) * win, local + m * (G / N) * win, (size_t)((G / N) * win) * sizeof *local);
        }
        for (int rk = 0; rk < M; rk++) {
            fr_dist_split_windows(global, local, (int)k, G / M, win, rk, M);
            for (int m = 0; m < k; m++)
                memcpy(backM + (m * G + rk * (G / M)) * win, local + m * (G / M) * win, (size_t)((G / M) * win) * sizeof *local);
        }
        CU_ASSERT_EQUAL(memcmp(backN, global, sizeof global), 0);
        CU_ASSERT_EQUAL(memcmp(backM, global, sizeof global), 0);
    }
}

/* ---- rendezvous over loopback ---- */
static int free_port(void) { return fr_test_free_port(); }

static void test_rendezvous(void)
{
    const int world = 3, port = free_port();
    unsigned char blob[128];
    fr_rng r = fr_test_rng("rendezvous");
    for (int i = 0; i < 128; i++) blob[i] = (unsigned char)(fr_rng_uniform(&r) * 256);
    pid_t kids[2];
    for (int rk = 1; rk < world; rk++) {
        kids[rk - 1] = fork();
        if (kids[rk - 1] == 0) {
            unsigned char got[128] = {0};
            fr_status st = fr_dist_exchange("127.0.0.1", port, rk, world, got, sizeof got, 20.0);
            _exit(st == FR_OK && memcmp(got, blob, sizeof got) == 0 ? 0 : 1);
        }
    }
    usleep(200 * 1000); /* the others retry until rank 0 listens */
    FR_ASSERT_OK(fr_dist_exchange("127.0.0.1", port, 0, world, blob, sizeof blob, 20.0));
    for (int i = 0; i < world - 1; i++) {
        int ws = -1;
        waitpid(kids[i], &ws, 0);
        CU_ASSERT(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    }
}

/* a missing rank is an error in bounded time, on both sides */
static void test_rendezvous_timeout(void)
{
    unsigned char blob[16] = {1};
    CU_ASSERT_EQUAL(fr_dist_exchange("127.0.0.1", free_port() + 1, 1, 2, blob, sizeof blob, 0.3), FR_ERR_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "did not answer"));
    CU_ASSERT_EQUAL(fr_dist_exchange("127.0.0.1", free_port() + 2, 0, 3, blob, sizeof blob, 0.3), FR_ERR_DEVICE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "ranks 1, 2 of 3 did not reach"));
}

/* the CPU backend refuses data parallelism with a clear message */
static void test_cpu_refuses(void)
{
    char path[512];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 1;
    o.seq_len = 8;
    o.world_size = 2;
    o.rank = 1;
    fr_trainer *t = NULL;
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "needs the CUDA backend"));
    CU_ASSERT_PTR_NULL(t);
    fr_graph_free(g);
}

/* the CLI's side: --gpus launches ranks that report their failure, the environment is checked */
static void test_cli_launch(void)
{
    char model[600], tok[700];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    snprintf(tok, sizeof tok, "%s/tok.bin", cli_tmp);
    FILE *f = fopen(tok, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 2000; i++) fputc(i % 100, f), fputc(0, f); /* uint16 ids below the vocabulary */
    fclose(f);
    const char *args = "--data tok.bin --batch 2 --seq 8 --steps 2 --lr 0.01 --device cpu";
    /* two ranks start; each fails (data parallel needs CUDA) and the launcher names one */
    CLI_EXPECT(cli_run("train %s %s --gpus 2", model, args), 1, cli_err, "needs the CUDA backend");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "starting 2 ranks"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "exited with status 1; stopping the other ranks"));
    /* under a launcher: the variables must fit, and --gpus agree with them */
    setenv("WORLD_SIZE", "2", 1);
    setenv("RANK", "5", 1);
    CLI_EXPECT(cli_run("train %s %s", model, args), 1, cli_err, "RANK=5 is not below WORLD_SIZE=2");
    setenv("RANK", "1", 1);
    CLI_EXPECT(cli_run("train %s %s --gpus 3", model, args), 1, cli_err, "launched as one of WORLD_SIZE=2");
    CLI_EXPECT(cli_run("train %s %s", model, args), 1, cli_err, "rank 1 of 2");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    /* alone, nothing changed */
    CLI_EXPECT(cli_run("train %s %s", model, args), 0, cli_out, "trained");
}

static CU_TestInfo tests[] = {
    {"launch environment", test_env},
    {"gradient buckets", test_buckets},
    {"bucket start nodes (overlap)", test_bucket_ready},
    {"bucket chunk ranges (all, owned)", test_bucket_chunks},
    {"optimizer-state owners", test_partition},
    {"checkpoint resumes on another rank count", test_resume_other_count},
    {"data split", test_split},
    {"rendezvous over loopback", test_rendezvous},
    {"rendezvous time-outs", test_rendezvous_timeout},
    {"CPU backend refuses", test_cpu_refuses},
    {"CLI: --gpus and the launcher's variables", test_cli_launch},
    CU_TEST_INFO_NULL};
static CU_SuiteInfo suites[] = {{"dist", cli_suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
