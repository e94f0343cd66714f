/* `fp8run train --gpus N [--nnodes M --node-rank R]`: one process per GPU, and the
 * torchrun-style environment a rank reads (cli.h). The launcher starts this same binary N times
 * with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NNODES, NODE_RANK, MASTER_ADDR and
 * MASTER_PORT set (one node: a free loopback port; several: node 0's address and port, which
 * every node's launcher is given), waits for them, and stops the others (SIGTERM, then SIGKILL)
 * as soon as one fails, naming it. Ranks of other nodes learn of it through the rendezvous
 * (rank 0 names the rank that left) or NCCL's watchdog (FP8RUN_NCCL_TIMEOUT). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_dist_option(const char *cmd, int argc, char **argv, int *i, int *nnodes, int *node_rank, int *rc)
{
    const char *v = NULL;
    int64_t n;
    int m;
    if ((m = cli_option(argc, argv, i, cmd, "--nnodes", &v)) != 0) {
        if (m > 0 && (*rc = cli_int64(cmd, "--nnodes", v, 1, &n)) == 0 && n > 1 << 16)
            *rc = cli_usage(cmd, "--nnodes: %s is too large", v);
        if (m > 0 && *rc == 0) *nnodes = (int)n;
        if (m < 0) *rc = CLI_EXIT_USAGE;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, cmd, "--node-rank", &v)) != 0) {
        if (m > 0 && (*rc = cli_int64(cmd, "--node-rank", v, 0, &n)) == 0 && n >= 1 << 16)
            *rc = cli_usage(cmd, "--node-rank: %s is too large", v);
        if (m > 0 && *rc == 0) *node_rank = (int)n;
        if (m < 0) *rc = CLI_EXIT_USAGE;
        return 1;
    }
    return 0;
}

int cli_dist_env(int gpus, int nnodes, int node_rank, fp8run_train_config *o, int *launcher)
{
    *launcher = 0;
    fp8run_dist_env e = {.struct_size = sizeof e};
    if (fp8run_dist_env_read(&e) != FP8RUN_OK) return cli_fail_status(); /* names the variables */
    if (!e.present) { /* not launched: --gpus N > 1 or --nnodes launches, --gpus 1 is the NCCL path alone */
        if (nnodes > 1 && gpus < 1) return cli_fail("--nnodes %d needs --gpus G, the ranks of each node", nnodes);
        if (nnodes > 1 && node_rank < 0) return cli_fail("--nnodes %d needs --node-rank R (0 on the node of rank 0)", nnodes);
        if (node_rank >= 0 && nnodes < 1) return cli_fail("--node-rank %d needs --nnodes N", node_rank);
        if (node_rank >= 0 && node_rank >= nnodes)
            return cli_fail("--node-rank %d is not below --nnodes %d", node_rank, nnodes);
        if (gpus > 1 || nnodes > 1) *launcher = 1;
        if (gpus == 1 && nnodes <= 1) o->world_size = 1;
        return 0;
    }
    /* a rank: the launcher's command line came with it, and must say what the environment says */
    const int per_node = e.local_world_size > 0 ? e.local_world_size : e.world_size;
    if (gpus > 0 && gpus != per_node)
        return cli_fail("--gpus %d, but this process was launched as one of WORLD_SIZE=%d ranks (%d on its node)", gpus,
                        e.world_size, per_node);
    if (nnodes > 0 && nnodes != e.nnodes)
        return cli_fail("--nnodes %d, but this process was launched as one of %d nodes (NNODES / GROUP_WORLD_SIZE, "
                        "or WORLD_SIZE / LOCAL_WORLD_SIZE)", nnodes, e.nnodes);
    if (node_rank >= 0 && node_rank != e.node_rank)
        return cli_fail("--node-rank %d, but this process was launched on node %d (NODE_RANK / GROUP_RANK)", node_rank,
                        e.node_rank);
    o->world_size = e.world_size;
    o->rank = e.rank;
    o->local_rank = e.local_rank;
    return 0;
}

/* a loopback port nobody listens on now (the kernel's choice) */
static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), port = 29500;
    struct sockaddr_in a;
    socklen_t n = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &n) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0) close(s);
    return port;
}

/* this process's own argv, from /proc (cli_train sees only its command's arguments) */
static char **own_argv(void)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf && !feof(f)) {
        if (len == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) break;
            buf = nb;
        }
        len += fread(buf + len, 1, cap - len, f);
        if (ferror(f)) break;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = '\0';
    int n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == '\0';
    char **argv = calloc((size_t)n + 1, sizeof *argv);
    if (!argv) return NULL;
    for (size_t i = 0, k = 0; i < len && (int)k < n; i += strlen(buf + i) + 1) argv[k++] = buf + i;
    return argv;
}

static void stop_all(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], SIGTERM);
    for (int tries = 0; tries < 100; tries++) { /* 10 s to stop cleanly */
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0) continue;
            if (waitpid(pids[i], NULL, WNOHANG) == 0)
                left++;
            else
                pids[i] = 0; /* reaped */
        }
        if (!left) return;
        usleep(100 * 1000);
    }
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], SIGKILL);
}

int cli_dist_launch(int gpus, int nnodes, int node_rank)
{
    if (nnodes < 1) nnodes = 1;
    if (node_rank < 0) node_rank = 0;
    const char *addr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
    /* several nodes meet at node 0's address and a port agreed on beforehand; one node picks a
       free loopback port itself */
    if (nnodes > 1 && (!addr || !*addr || !mport || !*mport))
        return cli_fail("--nnodes %d: set MASTER_ADDR (node 0's address) and MASTER_PORT (a free port there) on "
                        "every node", nnodes);
    char **argv = own_argv();
    if (!argv) return cli_fail("--gpus: cannot read this process's command line");
    pid_t *pids = calloc((size_t)gpus, sizeof *pids);
    if (!pids) {
        free(argv[0]);
        free(argv);
        return cli_fail("out of memory");
    }
    char port[16], world[16], lws[16], nn[16], nr[16];
    if (nnodes > 1)
        snprintf(port, sizeof port, "%s", mport);
    else
        snprintf(port, sizeof port, "%d", free_port());
    snprintf(world, sizeof world, "%d", gpus * nnodes);
    snprintf(lws, sizeof lws, "%d", gpus);
    snprintf(nn, sizeof nn, "%d", nnodes);
    snprintf(nr, sizeof nr, "%d", node_rank);
    if (nnodes > 1)
        fprintf(stderr, "fp8run: node %d of %d: starting ranks %d-%d of %d (one per GPU), rendezvous on %s:%s\n",
                node_rank, nnodes, node_rank * gpus, node_rank * gpus + gpus - 1, gpus * nnodes, addr, port);
    else
        fprintf(stderr, "fp8run: starting %d ranks (one per GPU), rendezvous on 127.0.0.1:%s\n", gpus, port);
    int rc = 0;
    for (int r = 0; r < gpus && rc == 0; r++) {
        pid_t p = fork();
        if (p < 0) {
            rc = cli_fail("--gpus: fork: %s", strerror(errno));
            break;
        }
        if (p == 0) {
            char rank[16], local[16];
            snprintf(rank, sizeof rank, "%d", node_rank * gpus + r);
            snprintf(local, sizeof local, "%d", r);
            setenv("RANK", rank, 1);
            setenv("LOCAL_RANK", local, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv("LOCAL_WORLD_SIZE", lws, 1);
            setenv("NNODES", nn, 1);
            setenv("NODE_RANK", nr, 1);
            unsetenv("GROUP_WORLD_SIZE"); /* an outer launcher's names would contradict ours */
            unsetenv("GROUP_RANK");
            setenv("MASTER_PORT", port, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 0);
            setenv("NCCL_NVLS_ENABLE", "0", 0);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "fp8run: error: rank %s: exec: %s\n", rank, strerror(errno));
            _exit(127);
        }
        pids[r] = p;
    }
    /* Ctrl-C reaches the ranks (one process group): they save and stop; this one waits for them */
    signal(SIGINT, SIG_IGN);
    /* the first rank to fail stops the others; its exit code is ours */
    for (int left = gpus; left > 0 && rc == 0;) {
        int ws;
        pid_t p = wait(&ws);
        if (p < 0) break;
        int r = 0;
        while (r < gpus && pids[r] != p) r++;
        if (r == gpus) continue;
        pids[r] = 0;
        left--;
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) continue;
        if (WIFEXITED(ws))
            fprintf(stderr, "fp8run: error: rank %d exited with status %d; stopping the other ranks\n",
                    node_rank * gpus + r, WEXITSTATUS(ws));
        else
            fprintf(stderr, "fp8run: error: rank %d was killed by signal %d; stopping the other ranks\n",
                    node_rank * gpus + r, WTERMSIG(ws));
        rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : CLI_EXIT_FAIL;
        stop_all(pids, gpus);
    }
    free(pids);
    free(argv[0]);
    free(argv);
    return rc;
}
