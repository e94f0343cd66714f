/* The rendezvous of dist.h: every rank meets rank 0 over TCP; rank 0 checks that the job is
 * whole (every rank once, the same world size and node count) and hands the blob (the NCCL
 * unique id) to all, or tells all why not. Every socket wait is bounded (poll with the
 * remaining time) so a missing or dead rank is an error naming it, never a hang.
 *
 * Wire format (network byte order): a rank's hello is HELLO_WORDS 32-bit words (magic,
 * version, rank, world, nnodes, node_rank + 1, local_rank, local_world, blob length) and its
 * host name (HOST_BYTES, NUL-padded); rank 0 answers with a status word and a length, then the
 * blob (status 0) or the reason as text (status 1). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "graph/env.h"
#include "runtime/dist/dist.h"

#define MAGIC 0x46503852u /* "FP8R" */
#define VERSION 2u
#define HELLO_WORDS 9
#define HOST_BYTES 64
#define REASON_BYTES 1024

typedef struct hello {
    uint32_t w[HELLO_WORDS];
    char host[HOST_BYTES];
} hello;
enum { H_MAGIC, H_VERSION, H_RANK, H_WORLD, H_NNODES, H_NODE, H_LOCAL, H_LOCAL_WORLD, H_LEN };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* wait for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error */
static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static fr_status resolve(const char *addr, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sa->sin_addr) == 1) return FR_OK;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(addr, NULL, &hints, &res);
    if (e != 0 || !res) return fr_error(FR_ERR_INVALID_ARG, "rendezvous address '%s': %s", addr, gai_strerror(e));
    sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return FR_OK;
}

/* move len bytes: 1 done, 0 timed out, -1 the other side closed, -2 a socket error (errno) */
static int io(int fd, void *buf, size_t len, int sending, double deadline)
{
    char *p = buf;
    while (len > 0) {
        int w = wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w <= 0) return w == 0 ? 0 : -2;
        ssize_t k = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k == 0) return -1;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return errno == ECONNRESET || errno == EPIPE ? -1 : -2;
        }
        p += k;
        len -= (size_t)k;
    }
    return 1;
}

static double knob(fr_env id)
{
    const char *v = fr_env_get(id);
    return v && atof(v) > 0 ? atof(v) : 0;
}

double fr_dist_rendezvous_timeout(void)
{
    double t = knob(FR_ENV_RENDEZVOUS_TIMEOUT);
    if (t <= 0) t = knob(FR_ENV_NCCL_TIMEOUT);
    return t > 0 ? t : 600.0;
}

/* "rank 3 (node 1, local rank 1, on host gpu7)" from a hello */
static const char *who(const hello *h, char *buf, size_t n)
{
    const int node = (int)h->w[H_NODE] - 1, nn = (int)h->w[H_NNODES];
    int k = snprintf(buf, n, "rank %u", h->w[H_RANK]);
    if (k > 0 && (size_t)k < n && node >= 0 && nn > 1)
        k += snprintf(buf + k, n - (size_t)k, " (node %d, local rank %u", node, h->w[H_LOCAL]);
    else if (k > 0 && (size_t)k < n)
        k += snprintf(buf + k, n - (size_t)k, " (");
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "%son host %.*s)", node >= 0 && nn > 1 ? ", " : "", HOST_BYTES - 1,
                 h->host[0] ? h->host : "?");
    return buf;
}

static void make_hello(const fr_dist_env *e, size_t len, hello *h)
{
    memset(h, 0, sizeof *h);
    const uint32_t v[HELLO_WORDS] = {MAGIC, VERSION, (uint32_t)e->rank, (uint32_t)e->world, (uint32_t)e->nnodes,
                                     (uint32_t)(e->node_rank + 1), (uint32_t)e->local_rank, (uint32_t)e->local_world,
                                     (uint32_t)len};
    for (int i = 0; i < HELLO_WORDS; i++) h->w[i] = v[i];
    if (gethostname(h->host, HOST_BYTES - 1) != 0) h->host[0] = '\0';
    h->host[HOST_BYTES - 1] = '\0';
}

static void hello_order(hello *h, int to_net)
{
    for (int i = 0; i < HELLO_WORDS; i++) h->w[i] = to_net ? htonl(h->w[i]) : ntohl(h->w[i]);
    h->host[HOST_BYTES - 1] = '\0';
}

/* ranks missing from have[] as "2, 3, 7-9" */
static void missing_text(const int *have, int world, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int r = 1; r < world && k + 24 < n; r++) {
        if (have[r] >= 0) continue;
        int e = r;
        while (e + 1 < world && have[e + 1] < 0) e++;
        k += (size_t)snprintf(buf + k, n - k, "%s%d", k ? ", " : "", r);
        if (e > r) k += (size_t)snprintf(buf + k, n - k, "%s%d", e == r + 1 ? ", " : "-", e);
        r = e;
    }
    if (k + 24 >= n) snprintf(buf + k, n - k, ", ...");
}

/* rank 0's answer to one rank: status 0 and the blob, or 1 and the reason */
static int answer(int fd, int ok, const void *body, size_t len, double deadline)
{
    uint32_t head[2] = {htonl(ok ? 0u : 1u), htonl((uint32_t)len)};
    return io(fd, head, sizeof head, 1, deadline) == 1 && io(fd, (void *)body, len, 1, deadline) == 1;
}

typedef struct server {
    const fr_dist_env *e;
    int W;
    int *fd;         /* per rank: its connection, -1 until it came */
    hello *h;        /* per rank: what it said */
    char reason[REASON_BYTES];
} server;

/* every rank that came (and `extra`, a connection not yet a rank) gets the reason */
static fr_status fail_all(server *sv, int extra)
{
    const double until = now_s() + 2.0; /* best effort: a dead peer must not hold the others */
    for (int r = 1; r < sv->W; r++)
        if (sv->fd[r] >= 0) answer(sv->fd[r], 0, sv->reason, strlen(sv->reason), until);
    if (extra >= 0) {
        answer(extra, 0, sv->reason, strlen(sv->reason), until);
        close(extra);
    }
    return fr_error(FR_ERR_DEVICE, "rendezvous: %s", sv->reason);
}

/* a new connection's hello: 0 taken, 1 ignored (not an fp8run rank), -1 the job cannot go on */
static int admit(server *sv, int c, size_t len, double deadline)
{
    hello h;
    /* a stranger (a port scanner) that says nothing must not hold the rendezvous */
    double until = now_s() + 10.0 < deadline ? now_s() + 10.0 : deadline;
    if (io(c, &h, sizeof h, 0, until) != 1) {
        close(c);
        return 1;
    }
    hello_order(&h, 0);
    if (h.w[H_MAGIC] != MAGIC) {
        close(c);
        return 1;
    }
    char a[160], b[160];
    const fr_dist_env *e = sv->e;
    const uint32_t r = h.w[H_RANK];
    if (h.w[H_VERSION] != VERSION)
        snprintf(sv->reason, sizeof sv->reason, "a process on host %s speaks rendezvous version %u, rank 0 version %u "
                 "(different fp8run builds)", h.host, h.w[H_VERSION], VERSION);
    else if (h.w[H_WORLD] != (uint32_t)sv->W)
        snprintf(sv->reason, sizeof sv->reason, "%s was launched with WORLD_SIZE=%u, rank 0 with %d", who(&h, a, sizeof a),
                 h.w[H_WORLD], sv->W);
    else if (r == 0 || r >= (uint32_t)sv->W)
        snprintf(sv->reason, sizeof sv->reason, "a process on host %s claims rank %u of %d (rank 0 is taken)", h.host, r,
                 sv->W);
    else if (sv->fd[r] >= 0)
        snprintf(sv->reason, sizeof sv->reason, "two processes claim rank %u: %s and %s (check NODE_RANK on each node)", r,
                 who(&sv->h[r], a, sizeof a), who(&h, b, sizeof b));
    else if (e->nnodes > 0 && h.w[H_NNODES] > 0 && h.w[H_NNODES] != (uint32_t)e->nnodes)
        snprintf(sv->reason, sizeof sv->reason, "%s was launched for %u nodes, rank 0 for %d", who(&h, a, sizeof a),
                 h.w[H_NNODES], e->nnodes);
    else if (h.w[H_LEN] != (uint32_t)len)
        snprintf(sv->reason, sizeof sv->reason, "%s expects a %u-byte id, rank 0 sends %zu (different fp8run builds)",
                 who(&h, a, sizeof a), h.w[H_LEN], len);
    else {
        sv->fd[r] = c;
        sv->h[r] = h;
        return 0;
    }
    (void)fail_all(sv, c);
    return -1;
}

static fr_status serve(const struct sockaddr_in *sa, const fr_dist_env *e, const void *blob, size_t len,
                       double deadline, double timeout_s)
{
    const int W = e->world;
    server sv = {.e = e, .W = W};
    sv.fd = fr_malloc((size_t)W * sizeof *sv.fd, "rendezvous");
    sv.h = fr_calloc((size_t)W, sizeof *sv.h, "rendezvous");
    struct pollfd *pf = fr_malloc((size_t)W * sizeof *pf, "rendezvous");
    int *pr = fr_malloc((size_t)W * sizeof *pr, "rendezvous");
    if (!sv.fd || !sv.h || !pf || !pr) {
        free(sv.fd);
        free(sv.h);
        free(pf);
        free(pr);
        return FR_ERR_OOM;
    }
    for (int r = 0; r < W; r++) sv.fd[r] = -1;
    fr_status st = FR_OK;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0) st = fr_error(FR_ERR_DEVICE, "rendezvous: socket: %s", strerror(errno));
    int one = 1;
    if (st == FR_OK) setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (st == FR_OK && (bind(ls, (const struct sockaddr *)sa, sizeof *sa) != 0 || listen(ls, W < 4096 ? W : 4096) != 0))
        st = fr_error(FR_ERR_DEVICE, "rendezvous: rank 0 cannot listen on %s:%d: %s (set MASTER_PORT to a free port)",
                      e->addr, e->port, strerror(errno));
    int got = 1;
    while (st == FR_OK && got < W) {
        /* the listening socket, and every rank that came: a joined rank sends nothing more, so
           its socket turning readable means it closed (it died) */
        int np = 0;
        pf[np] = (struct pollfd){ls, POLLIN, 0};
        pr[np++] = 0;
        for (int r = 1; r < W; r++)
            if (sv.fd[r] >= 0) {
                pf[np] = (struct pollfd){sv.fd[r], POLLIN, 0};
                pr[np++] = r;
            }
        const double left = deadline - now_s();
        int k = left > 0 ? poll(pf, (nfds_t)np, (int)(left * 1000) + 1) : 0;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            st = fr_error(FR_ERR_DEVICE, "rendezvous: poll: %s", strerror(errno));
            break;
        }
        if (k == 0) {
            char miss[512];
            sv.fd[0] = 0; /* rank 0 is here */
            missing_text(sv.fd, W, miss, sizeof miss);
            sv.fd[0] = -1;
            snprintf(sv.reason, sizeof sv.reason, "rank%s %s of %d did not reach %s:%d within %.0f s (%d came; "
                     "FP8RUN_RENDEZVOUS_TIMEOUT sets the limit)", W - got > 1 ? "s" : "", miss, W, e->addr, e->port,
                     timeout_s, got);
            st = fail_all(&sv, -1);
            break;
        }
        for (int i = 1; i < np && st == FR_OK; i++) {
            if (!pf[i].revents) continue;
            char junk[64];
            const ssize_t n = recv(pf[i].fd, junk, sizeof junk, MSG_DONTWAIT);
            if (n > 0) continue; /* stray bytes (dropped, so poll does not wake for them again): not a close */
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            const int r = pr[i];
            char a[160];
            close(sv.fd[r]);
            sv.fd[r] = -1;
            snprintf(sv.reason, sizeof sv.reason, "%s left before all %d ranks had come: its connection closed (the "
                     "process stopped or was killed)", who(&sv.h[r], a, sizeof a), W);
            st = fail_all(&sv, -1);
        }
        if (st == FR_OK && (pf[0].revents & POLLIN)) {
            int c = accept(ls, NULL, NULL);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
                st = fr_error(FR_ERR_DEVICE, "rendezvous: accept on %s:%d: %s", e->addr, e->port, strerror(errno));
                break;
            }
            int a = admit(&sv, c, len, deadline);
            if (a < 0) st = fr_error(FR_ERR_DEVICE, "rendezvous: %s", sv.reason);
            if (a == 0) got++;
        }
    }
    /* the job is whole: every rank gets the id */
    for (int r = 1; st == FR_OK && r < W; r++)
        if (!answer(sv.fd[r], 1, blob, len, deadline)) {
            char a[160];
            snprintf(sv.reason, sizeof sv.reason, "%s stopped while rank 0 sent the id", who(&sv.h[r], a, sizeof a));
            close(sv.fd[r]);
            sv.fd[r] = -1;
            st = fail_all(&sv, -1);
        }
    for (int r = 1; r < W; r++)
        if (sv.fd[r] >= 0) close(sv.fd[r]);
    if (ls >= 0) close(ls);
    free(sv.fd);
    free(sv.h);
    free(pf);
    free(pr);
    return st;
}

static fr_status join(const struct sockaddr_in *sa, const fr_dist_env *e, void *blob, size_t len, double deadline,
                      double timeout_s)
{
    char me[160];
    hello h;
    make_hello(e, len, &h);
    who(&h, me, sizeof me);
    hello_order(&h, 1);
    for (;;) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return fr_error(FR_ERR_DEVICE, "rendezvous: socket: %s", strerror(errno));
        if (connect(s, (const struct sockaddr *)sa, sizeof *sa) == 0) {
            fr_status st = FR_OK;
            uint32_t head[2];
            /* rank 0 answers when the job is whole or has failed: it says why by its own deadline,
               so this side waits a little longer for the reason */
            int k = io(s, &h, sizeof h, 1, deadline);
            if (k == 1) k = io(s, head, sizeof head, 0, deadline + 5.0);
            if (k == 1) {
                head[0] = ntohl(head[0]);
                head[1] = ntohl(head[1]);
                if (head[0] == 0 && head[1] == (uint32_t)len)
                    k = io(s, blob, len, 0, deadline + 5.0);
                else if (head[0] == 1 && head[1] < REASON_BYTES) {
                    char why[REASON_BYTES];
                    memset(why, 0, sizeof why);
                    k = io(s, why, head[1], 0, deadline + 5.0);
                    if (k == 1) st = fr_error(FR_ERR_DEVICE, "rendezvous: %s: rank 0 stopped the job: %s", me, why);
                } else
                    st = fr_error(FR_ERR_DEVICE, "rendezvous: %s: %s:%d answered with something else than an fp8run "
                                  "rank 0", me, e->addr, e->port);
            }
            if (st == FR_OK && k == 0)
                st = fr_error(FR_ERR_DEVICE, "rendezvous: %s: no word from rank 0 at %s:%d within %.0f s (the job's "
                              "other ranks did not all come)", me, e->addr, e->port, timeout_s);
            else if (st == FR_OK && k == -1)
                st = fr_error(FR_ERR_DEVICE, "rendezvous: %s: rank 0 at %s:%d closed the connection before the "
                              "rendezvous ended (rank 0 stopped or was killed)", me, e->addr, e->port);
            else if (st == FR_OK && k < 0)
                st = fr_error(FR_ERR_DEVICE, "rendezvous: %s: talking to rank 0 at %s:%d: %s", me, e->addr, e->port,
                              strerror(errno));
            close(s);
            return st;
        }
        int err = errno;
        close(s);
        if (now_s() >= deadline)
            return fr_error(FR_ERR_DEVICE, "rendezvous: %s: rank 0 did not answer on %s:%d within %.0f s (%s)", me,
                            e->addr, e->port, timeout_s, strerror(err));
        usleep(50 * 1000); /* rank 0 is not listening yet */
    }
}

fr_status fr_dist_rendezvous(const fr_dist_env *e, void *blob, size_t len, double timeout_s)
{
    if (e->world <= 1) return FR_OK;
    if (e->rank < 0 || e->rank >= e->world) return fr_error(FR_ERR_INVALID_ARG, "rendezvous: rank %d of %d", e->rank, e->world);
    if (len >= UINT32_MAX) return fr_error(FR_ERR_INVALID_ARG, "rendezvous: a %zu-byte id", len);
    const double set = knob(FR_ENV_RENDEZVOUS_TIMEOUT);
    if (set > 0) timeout_s = set;
    struct sockaddr_in sa;
    FR_TRY(resolve(e->addr, e->port, &sa));
    const double deadline = now_s() + timeout_s;
    return e->rank == 0 ? serve(&sa, e, blob, len, deadline, timeout_s) : join(&sa, e, blob, len, deadline, timeout_s);
}

fr_status fr_dist_exchange(const char *addr, int port, int rank, int world, void *blob, size_t len, double timeout_s)
{
    fr_dist_env e;
    memset(&e, 0, sizeof e);
    e.rank = rank;
    e.world = world;
    e.node_rank = -1;
    e.port = port;
    e.present = 1;
    if (strlen(addr) >= sizeof e.addr) return fr_error(FR_ERR_INVALID_ARG, "rendezvous address '%.40s...' is too long", addr);
    strcpy(e.addr, addr);
    return fr_dist_rendezvous(&e, blob, len, timeout_s);
}
