/* Multi-node launch without a GPU (runtime/dist/dist_env.c, dist_rendezvous.c, the CLI's
 * launcher): the node variables (NNODES / NODE_RANK / LOCAL_WORLD_SIZE, torchrun's GROUP_*)
 * and their consistency checks; ranks as forked processes meeting over loopback as one job of
 * two nodes; a rank that dies or is claimed twice, or rank 0 dying, ends every rank in bounded
 * time with a message naming it; and two `fp8run rendezvous` launchers on one host that know
 * each other only through MASTER_ADDR/MASTER_PORT and their node ranks. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/dist/dist.h"
#include "tests/cli_runner.h"
#include "tests/harness.h"

static const char *fake_env[20][2];
static const char *fake_get(const char *name)
{
    for (int i = 0; i < 20 && fake_env[i][0]; i++)
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

static void test_env_nodes(void)
{
    fr_dist_env e;
    /* fp8run's launcher on node 1 of 2, two GPUs each */
    set_env((const char *const[]){"WORLD_SIZE", "4", "RANK", "3", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "NNODES",
                                  "2", "NODE_RANK", "1", "MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500", NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT(e.world == 4 && e.rank == 3 && e.local_rank == 1 && e.local_world == 2 && e.nnodes == 2 && e.node_rank == 1);
    char buf[80];
    CU_ASSERT_STRING_EQUAL(fr_dist_rank_text(&e, 2, buf, sizeof buf), "rank 2 (node 1, local rank 0)");
    /* torchrun's names: GROUP_RANK / GROUP_WORLD_SIZE */
    set_env((const char *const[]){"WORLD_SIZE", "8", "RANK", "5", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4",
                                  "GROUP_WORLD_SIZE", "2", "GROUP_RANK", "1", "MASTER_ADDR", "h0", "MASTER_PORT", "1",
                                  NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT(e.nnodes == 2 && e.node_rank == 1 && e.local_world == 4);
    /* derived: NNODES alone gives the ranks per node, then the node and local rank */
    set_env((const char *const[]){"WORLD_SIZE", "6", "RANK", "4", "NNODES", "3", "MASTER_ADDR", "h0", "MASTER_PORT", "1",
                                  NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT(e.local_world == 2 && e.node_rank == 2 && e.local_rank == 0);
    /* one node by default (LOCAL_RANK = RANK) */
    set_env((const char *const[]){"WORLD_SIZE", "2", "RANK", "1", NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT(e.nnodes == 1 && e.node_rank == 0 && e.local_world == 2 && e.local_rank == 1);
    /* an older launcher: LOCAL_RANK differs from RANK, nothing else said: the node is unknown */
    set_env((const char *const[]){"WORLD_SIZE", "4", "RANK", "3", "LOCAL_RANK", "1", NULL});
    FR_ASSERT_OK(fr_dist_env_parse(fake_get, &e));
    CU_ASSERT(e.local_world == 0 && e.nnodes == 0 && e.node_rank == -1);

    static const struct {
        const char *kv[20];
        const char *needle;
    } bad[] = {
        {{"WORLD_SIZE", "4", "RANK", "3", "NNODES", "3", NULL}, "do not split evenly over NNODES=3"},
        {{"WORLD_SIZE", "4", "RANK", "3", "LOCAL_WORLD_SIZE", "3", NULL}, "not a multiple of LOCAL_WORLD_SIZE=3"},
        {{"WORLD_SIZE", "4", "RANK", "3", "LOCAL_WORLD_SIZE", "2", "NNODES", "4", NULL}, "NNODES=4 x LOCAL_WORLD_SIZE=2"},
        {{"WORLD_SIZE", "4", "RANK", "3", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2", NULL}, "LOCAL_RANK=2 is not below"},
        {{"WORLD_SIZE", "4", "RANK", "3", "NNODES", "2", "NODE_RANK", "2", "MASTER_ADDR", "a", "MASTER_PORT", "1", NULL},
         "NODE_RANK=2 is not below NNODES=2"},
        {{"WORLD_SIZE", "4", "RANK", "3", "NODE_RANK", "0", "LOCAL_WORLD_SIZE", "2", NULL},
         "RANK=3 is not NODE_RANK=0 x 2 ranks per node + LOCAL_RANK=1"},
        {{"WORLD_SIZE", "4", "RANK", "3", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2", NULL},
         "RANK=3 with 2 ranks per node is local rank 1 of node 1, not LOCAL_RANK=0"},
        {{"WORLD_SIZE", "4", "RANK", "3", "NODE_RANK", "1", "GROUP_RANK", "0", NULL}, "NODE_RANK=1 and GROUP_RANK=0 disagree"},
        {{"WORLD_SIZE", "4", "RANK", "3", "NNODES", "2", NULL}, "MASTER_ADDR and MASTER_PORT are not set"},
        {{"WORLD_SIZE", "4", "RANK", "3", "NNODES", "2", "MASTER_ADDR", "a", NULL}, "MASTER_PORT is not set"},
        {{"WORLD_SIZE", "4", "RANK", "0", "NNODES", "x", NULL}, "NNODES='x'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_env(bad[i].kv);
        CU_ASSERT_EQUAL(fr_dist_env_parse(fake_get, &e), FR_ERR_INVALID_ARG);
        if (!strstr(fr_last_error(), bad[i].needle)) printf("\n  case %zu: %s", i, fr_last_error());
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), bad[i].needle));
    }
}

/* ---- ranks as processes ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fr_dist_env env_of(int rank, int world, int nnodes, int port)
{
    fr_dist_env e;
    memset(&e, 0, sizeof e);
    e.rank = rank;
    e.world = world;
    e.nnodes = nnodes;
    e.local_world = world / nnodes;
    e.node_rank = rank / e.local_world;
    e.local_rank = rank % e.local_world;
    e.port = port;
    e.present = 1;
    strcpy(e.addr, "127.0.0.1");
    return e;
}

/* fork a rank: it meets, checks the id, and writes "ok" or its error into rank<tag>.txt */
static pid_t start_rank(fr_dist_env e, const unsigned char *want, const char *tag, double timeout)
{
    pid_t p = fork();
    if (p != 0) return p;
    unsigned char id[32];
    if (e.rank == 0)
        memcpy(id, want, sizeof id);
    else
        memset(id, 0, sizeof id);
    fr_status st = fr_dist_rendezvous(&e, id, sizeof id, timeout);
    char name[64];
    snprintf(name, sizeof name, "rank%s.txt", tag);
    FILE *f = fopen(cli_path(name), "w");
    if (f) {
        fputs(st == FR_OK ? (memcmp(id, want, sizeof id) == 0 ? "ok" : "wrong id") : fr_last_error(), f);
        fclose(f);
    }
    _exit(st == FR_OK ? 0 : 1);
}

static int finish(pid_t p)
{
    int ws = -1;
    waitpid(p, &ws, 0);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

static char *said(const char *tag)
{
    char name[64];
    snprintf(name, sizeof name, "rank%s.txt", tag);
    return cli_slurp_tmp(name, NULL);
}

static void test_two_nodes_meet(void)
{
    unsigned char id[32];
    fr_rng r = fr_test_rng("rendezvous nodes");
    for (int i = 0; i < 32; i++) id[i] = (unsigned char)(fr_rng_uniform(&r) * 256);
    const int port = fr_test_free_port();
    pid_t p[4];
    char tag[4][8];
    for (int rk = 3; rk >= 0; rk--) { /* rank 0 last: the others wait for it */
        snprintf(tag[rk], sizeof tag[rk], "m%d", rk);
        p[rk] = start_rank(env_of(rk, 4, 2, port), id, tag[rk], 20.0);
    }
    for (int rk = 0; rk < 4; rk++) {
        CU_ASSERT_EQUAL(finish(p[rk]), 0);
        char *s = said(tag[rk]);
        CU_ASSERT_STRING_EQUAL(s, "ok");
        free(s);
    }
}

/* rank 2 comes, then is killed (SIGKILL) while rank 3 has not come: ranks 0 and 1 fail at once,
 * naming rank 2, long before the time limit */
static void test_rank_dies(void)
{
    unsigned char id[32] = {7};
    const int port = fr_test_free_port();
    const double t0 = now_s();
    pid_t p0 = start_rank(env_of(0, 4, 2, port), id, "d0", 30.0);
    pid_t p1 = start_rank(env_of(1, 4, 2, port), id, "d1", 30.0);
    pid_t p2 = start_rank(env_of(2, 4, 2, port), id, "d2", 30.0);
    usleep(1500 * 1000); /* rank 2 has met rank 0 and waits (a loaded machine starts processes slowly) */
    kill(p2, SIGKILL);
    finish(p2);
    CU_ASSERT_EQUAL(finish(p0), 1);
    CU_ASSERT_EQUAL(finish(p1), 1);
    const double took = now_s() - t0;
    CU_ASSERT(took < 10.0);
    char *s0 = said("d0"), *s1 = said("d1");
    if (!strstr(s0, "rank 2 (node 1, local rank 0") || !strstr(s1, "rank 0 stopped the job: rank 2 (node 1"))
        printf("\n  rank 0: %s\n  rank 1: %s\n", s0, s1);
    CU_ASSERT_PTR_NOT_NULL(strstr(s0, "rank 2 (node 1, local rank 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s0, "left before all 4 ranks had come"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s1, "rank 0 stopped the job: rank 2 (node 1"));
    free(s0);
    free(s1);

    /* rank 0 dies: the others say so at once */
    const int port2 = fr_test_free_port();
    const double t1 = now_s();
    p0 = start_rank(env_of(0, 3, 1, port2), id, "z0", 30.0);
    p1 = start_rank(env_of(1, 3, 1, port2), id, "z1", 30.0);
    usleep(1500 * 1000);
    kill(p0, SIGKILL);
    finish(p0);
    CU_ASSERT_EQUAL(finish(p1), 1);
    CU_ASSERT(now_s() - t1 < 10.0);
    s1 = said("z1");
    CU_ASSERT_PTR_NOT_NULL(strstr(s1, "rank 0 at 127.0.0.1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s1, "closed the connection"));
    free(s1);
}

/* launched differently: a rank claimed twice, another world size; every rank is told */
static void test_launched_differently(void)
{
    unsigned char id[32] = {1};
    const int port = fr_test_free_port();
    pid_t a = start_rank(env_of(1, 3, 1, port), id, "t1", 20.0);
    usleep(100 * 1000);
    pid_t b = start_rank(env_of(1, 3, 1, port), id, "t2", 20.0);
    usleep(400 * 1000);
    pid_t z = start_rank(env_of(0, 3, 1, port), id, "t0", 20.0);
    CU_ASSERT_EQUAL(finish(z), 1);
    CU_ASSERT_EQUAL(finish(a), 1);
    CU_ASSERT_EQUAL(finish(b), 1);
    char *s0 = said("t0"), *s1 = said("t1"), *s2 = said("t2");
    CU_ASSERT_PTR_NOT_NULL(strstr(s0, "two processes claim rank 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s1, "two processes claim rank 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s2, "two processes claim rank 1"));
    free(s0);
    free(s1);
    free(s2);

    const int port2 = fr_test_free_port();
    fr_dist_env odd = env_of(1, 4, 1, port2);
    pid_t c = start_rank(odd, id, "w1", 20.0);
    usleep(200 * 1000);
    pid_t d = start_rank(env_of(0, 2, 1, port2), id, "w0", 20.0);
    CU_ASSERT_EQUAL(finish(d), 1);
    CU_ASSERT_EQUAL(finish(c), 1);
    s1 = said("w1");
    CU_ASSERT_PTR_NOT_NULL(strstr(s1, "was launched with WORLD_SIZE=4, rank 0 with 2"));
    free(s1);
}

/* ---- the CLI: two launchers, one per "node", meet as one job ---- */
static void test_cli_two_launchers(void)
{
    char port[16], cmd[1600];
    snprintf(port, sizeof port, "%d", fr_test_free_port());
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    /* node 1's launcher, started first, in the background */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' rendezvous --gpus 2 --nnodes 2 --node-rank 1 >node1.out 2>node1.err",
             cli_tmp, FR_CLI);
    pid_t n1 = fork();
    if (n1 == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    CLI_EXPECT(cli_run("rendezvous --gpus 2 --nnodes 2 --node-rank 0 --timeout 30"), 0, cli_out, "rank 0 of 4");
    CU_ASSERT_EQUAL(finish(n1), 0);
    char *out1 = cli_slurp_tmp("node1.out", NULL);
    /* all four ranks, one job id */
    const char *job = strstr(cli_out, "job ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(job);
    char id[40] = "";
    sscanf(job + 4, "%39s", id);
    CU_ASSERT_EQUAL(strlen(id), 32);
    const char *lines[] = {"rank 0 of 4 (node 0 of 2, local rank 0 of 2)", "rank 1 of 4 (node 0 of 2, local rank 1 of 2)",
                           "rank 2 of 4 (node 1 of 2, local rank 0 of 2)", "rank 3 of 4 (node 1 of 2, local rank 1 of 2)"};
    for (int k = 0; k < 4; k++) {
        const char *in = k < 2 ? cli_out : out1, *at = strstr(in, lines[k]);
        if (!at) printf("\n  missing '%s' in:\n%s", lines[k], in);
        CU_ASSERT_PTR_NOT_NULL(at);
        if (at) CU_ASSERT_PTR_NOT_NULL(strstr(at, id));
    }
    free(out1);

    /* node 1 never starts: node 0's ranks fail within the limit, naming the missing ranks */
    snprintf(port, sizeof port, "%d", fr_test_free_port());
    setenv("MASTER_PORT", port, 1);
    setenv("FP8RUN_RENDEZVOUS_TIMEOUT", "1", 1);
    const double t0 = now_s();
    CLI_EXPECT(cli_run("rendezvous --gpus 2 --nnodes 2 --node-rank 0"), 1, cli_err, "ranks 2, 3 of 4 did not reach");
    CU_ASSERT(now_s() - t0 < 15.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "FP8RUN_RENDEZVOUS_TIMEOUT"));
    unsetenv("FP8RUN_RENDEZVOUS_TIMEOUT");
    /* what the launcher refuses */
    CLI_EXPECT(cli_run("rendezvous --gpus 2 --nnodes 2"), 1, cli_err, "needs --node-rank");
    CLI_EXPECT(cli_run("rendezvous --gpus 2 --nnodes 2 --node-rank 2"), 1, cli_err, "not below --nnodes 2");
    CLI_EXPECT(cli_run("rendezvous"), 2, cli_err, "nothing to meet");
    unsetenv("MASTER_PORT");
    CLI_EXPECT(cli_run("rendezvous --gpus 2 --nnodes 2 --node-rank 1"), 1, cli_err, "set MASTER_ADDR");
    unsetenv("MASTER_ADDR");
    /* under a launcher: the environment is checked, and the command line must agree with it */
    setenv("WORLD_SIZE", "4", 1);
    setenv("RANK", "3", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("NODE_RANK", "0", 1);
    CLI_EXPECT(cli_run("rendezvous"), 1, cli_err, "RANK=3 is not NODE_RANK=0 x 2 ranks per node");
    setenv("NODE_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    CLI_EXPECT(cli_run("rendezvous --gpus 4"), 1, cli_err, "launched as one of WORLD_SIZE=4 ranks (2 on its node)");
    CLI_EXPECT(cli_run("rendezvous --nnodes 2 --node-rank 0"), 1, cli_err, "launched on node 1");
    unsetenv("WORLD_SIZE");
    unsetenv("RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("NODE_RANK");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
}


/* start `fp8run rendezvous ARGS` in the background (the shell replaced by it: the pid is the
 * launcher's), output to NAME.out / NAME.err */
static pid_t start_cli(const char *args, const char *name)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' rendezvous %s >%s.out 2>%s.err", cli_tmp, FR_CLI, args, name, name);
    pid_t p = fork();
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return p;
}

/* two launchers of a three-node job (node 2 never comes, so the meeting waits); one of node 1's
 * ranks is killed (SIGKILL) while it waits: both launchers stop at once, not at the 60 s limit,
 * and node 0's ranks name the rank that died */
static void test_cli_rank_killed(void)
{
    char port[16], path[64];
    snprintf(port, sizeof port, "%d", fr_test_free_port());
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port, 1);
    setenv("FP8RUN_RENDEZVOUS_TIMEOUT", "60", 1);
    const double t0 = now_s();
    pid_t n0 = start_cli("--gpus 2 --nnodes 3 --node-rank 0", "k0");
    pid_t n1 = start_cli("--gpus 2 --nnodes 3 --node-rank 1", "k1");
    unsetenv("FP8RUN_RENDEZVOUS_TIMEOUT");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    /* node 1's ranks, once both are started and have met rank 0 */
    pid_t kids[2] = {0, 0};
    for (int tries = 0; tries < 100 && !kids[1]; tries++) {
        usleep(100 * 1000);
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)n1, (int)n1);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        int a = 0, b = 0;
        if (fscanf(f, "%d %d", &a, &b) == 2) kids[0] = a, kids[1] = b;
        fclose(f);
    }
    CU_ASSERT_FATAL(kids[1] > 0);
    usleep(2000 * 1000); /* node 1's ranks have met rank 0 and wait for node 2 */
    kill(kids[1], SIGKILL); /* local rank 1 of node 1: rank 3 */
    const int rc0 = finish(n0), rc1 = finish(n1);
    const double took = now_s() - t0;
    char *e0 = cli_slurp_tmp("k0.err", NULL), *e1 = cli_slurp_tmp("k1.err", NULL);
    /* rank 0 sees sockets only: it names the first of node 1's ranks whose connection closed,
       rank 3 itself or rank 2 when node 1's launcher stopped it first (seen on a loaded machine) */
    const int named = (strstr(e0, "rank 3 (node 1, local rank 1, on host") || strstr(e0, "rank 2 (node 1, local rank 0, on host")) &&
                      strstr(e0, "left before all 6 ranks had come");
    if (rc0 != 1 || rc1 == 0 || !named || took > 20.0)
        printf("\n  %.1f s, node 0 -> %d: %s\n  node 1 -> %d: %s\n", took, rc0, e0, rc1, e1);
    CU_ASSERT_EQUAL(rc0, 1);
    CU_ASSERT(rc1 != 0);
    CU_ASSERT(named);
    /* node 1: its launcher names whichever of its ranks it reaps first, rank 3 killed or rank 2
       stopped by rank 0, which names rank 3 itself */
    CU_ASSERT(strstr(e1, "rank 3 was killed by signal 9") || strstr(e1, "rank 0 stopped the job: rank 3 (node 1"));
    CU_ASSERT(took < 20.0); /* the death, not the 60 s limit, ended it */
    free(e0);
    free(e1);
}

static CU_TestInfo tests[] = {
    {"node variables and their checks", test_env_nodes},
    {"two nodes' ranks meet as one job", test_two_nodes_meet},
    {"a rank that dies is named, in bounded time", test_rank_dies},
    {"launched differently: named to every rank", test_launched_differently},
    {"CLI: two launchers, --nnodes / --node-rank", test_cli_two_launchers},
    {"CLI: a rank killed while the job meets", test_cli_rank_killed},
    CU_TEST_INFO_NULL};
static CU_SuiteInfo suites[] = {{"rendezvous", cli_suite_init, cli_suite_clean, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
