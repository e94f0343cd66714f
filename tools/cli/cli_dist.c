/* `fp8run train --gpus N`: one process per GPU, and the torchrun-style environment a rank
 * reads (cli.h). The launcher starts this same binary N times with RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (a free loopback port), waits for them, and stops
 * the others (SIGTERM, then SIGKILL) as soon as one fails, naming it. */
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

static int env_num(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    long x = strtol(v, &end, 10);
    return *end || x < 0 || x > 1 << 20 ? -1 : (int)x;
}

int cli_dist_env(int gpus, fp8run_train_config *o, int *launcher)
{
    *launcher = 0;
    int world = env_num("WORLD_SIZE", 0);
    if (world < 0) return cli_fail("WORLD_SIZE='%s' is not a rank count", getenv("WORLD_SIZE"));
    if (world == 0) { /* not launched: --gpus N > 1 launches, --gpus 1 is the NCCL path alone */
        if (gpus > 1) *launcher = 1;
        if (gpus == 1) o->world_size = 1;
        return 0;
    }
    if (gpus > 0 && gpus != world)
        return cli_fail("--gpus %d, but this process was launched as one of WORLD_SIZE=%d ranks", gpus, world);
    int rank = env_num("RANK", 0), local = env_num("LOCAL_RANK", rank);
    if (rank < 0 || rank >= world || local < 0)
        return cli_fail("RANK='%s' / LOCAL_RANK='%s' do not fit WORLD_SIZE=%d", getenv("RANK") ? getenv("RANK") : "",
                        getenv("LOCAL_RANK") ? getenv("LOCAL_RANK") : "", world);
    o->world_size = world;
    o->rank = rank;
    o->local_rank = local;
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

int cli_dist_launch(int gpus)
{
    char **argv = own_argv();
    if (!argv) return cli_fail("--gpus: cannot read this process's command line");
    pid_t *pids = calloc((size_t)gpus, sizeof *pids);
    if (!pids) return cli_fail("out of memory");
    char port[16], world[16];
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(world, sizeof world, "%d", gpus);
    fprintf(stderr, "fp8run: starting %d ranks (one per GPU), rendezvous on 127.0.0.1:%s\n", gpus, port);
    int rc = 0;
    for (int r = 0; r < gpus && rc == 0; r++) {
        pid_t p = fork();
        if (p < 0) {
            rc = cli_fail("--gpus: fork: %s", strerror(errno));
            break;
        }
        if (p == 0) {
            char rank[16];
            snprintf(rank, sizeof rank, "%d", r);
            setenv("RANK", rank, 1);
            setenv("LOCAL_RANK", rank, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv("MASTER_PORT", port, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 0);
            setenv("NCCL_NVLS_ENABLE", "0", 0);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "fp8run: error: rank %d: exec: %s\n", r, strerror(errno));
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
            fprintf(stderr, "fp8run: error: rank %d exited with status %d; stopping the other ranks\n", r, WEXITSTATUS(ws));
        else
            fprintf(stderr, "fp8run: error: rank %d was killed by signal %d; stopping the other ranks\n", r, WTERMSIG(ws));
        rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : CLI_EXIT_FAIL;
        stop_all(pids, gpus);
    }
    free(pids);
    free(argv[0]);
    free(argv);
    return rc;
}
