/* The rendezvous of dist.h: rank 0 hands a blob (the NCCL unique id) to the other ranks over
 * TCP. Every socket wait is bounded (poll with the remaining time) so a missing rank is an error,
 * never a hang. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/dist/dist.h"

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

static fr_status xfer(int fd, void *buf, size_t len, int sending, double deadline, const char *what)
{
    char *p = buf;
    while (len > 0) {
        int w = wait_fd(fd, sending ? POLLOUT : POLLIN, deadline);
        if (w <= 0) return fr_error(FR_ERR_DEVICE, "rendezvous: %s %s", what, w == 0 ? "timed out" : strerror(errno));
        ssize_t k = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k == 0) return fr_error(FR_ERR_DEVICE, "rendezvous: %s: the other side closed the connection", what);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return fr_error(FR_ERR_DEVICE, "rendezvous: %s: %s", what, strerror(errno));
        }
        p += k;
        len -= (size_t)k;
    }
    return FR_OK;
}

static fr_status serve(const struct sockaddr_in *sa, const char *addr, int port, int world, const void *blob,
                       size_t len, double deadline)
{
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0) return fr_error(FR_ERR_DEVICE, "rendezvous: socket: %s", strerror(errno));
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    fr_status st = FR_OK;
    if (bind(ls, (const struct sockaddr *)sa, sizeof *sa) != 0 || listen(ls, world) != 0)
        st = fr_error(FR_ERR_DEVICE, "rendezvous: rank 0 cannot listen on %s:%d: %s (set MASTER_PORT to a free port)",
                      addr, port, strerror(errno));
    for (int got = 1; st == FR_OK && got < world; got++) {
        int w = wait_fd(ls, POLLIN, deadline);
        if (w <= 0) {
            st = fr_error(FR_ERR_DEVICE, "rendezvous: only %d of %d ranks reached %s:%d in time", got, world, addr, port);
            break;
        }
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            st = fr_error(FR_ERR_DEVICE, "rendezvous: accept on %s:%d: %s", addr, port, strerror(errno));
            break;
        }
        uint32_t magic = 0;
        st = xfer(c, &magic, sizeof magic, 0, deadline, "reading a rank's hello");
        if (st == FR_OK && magic != 0x46503852u) st = fr_error(FR_ERR_DEVICE, "rendezvous: a stranger connected to %s:%d", addr, port);
        if (st == FR_OK) st = xfer(c, (void *)blob, len, 1, deadline, "sending the communicator id");
        close(c);
    }
    close(ls);
    return st;
}

static fr_status join(const struct sockaddr_in *sa, const char *addr, int port, void *blob, size_t len, double deadline)
{
    for (;;) {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) return fr_error(FR_ERR_DEVICE, "rendezvous: socket: %s", strerror(errno));
        if (connect(s, (const struct sockaddr *)sa, sizeof *sa) == 0) {
            uint32_t magic = 0x46503852u;
            fr_status st = xfer(s, &magic, sizeof magic, 1, deadline, "sending hello to rank 0");
            if (st == FR_OK) st = xfer(s, blob, len, 0, deadline, "receiving the communicator id from rank 0");
            close(s);
            return st;
        }
        int e = errno;
        close(s);
        if (now_s() >= deadline)
            return fr_error(FR_ERR_DEVICE, "rendezvous: rank 0 did not answer on %s:%d in time (%s)", addr, port, strerror(e));
        usleep(50 * 1000); /* rank 0 is not listening yet */
    }
}

fr_status fr_dist_exchange(const char *addr, int port, int rank, int world, void *blob, size_t len, double timeout_s)
{
    if (world <= 1) return FR_OK;
    if (rank < 0 || rank >= world) return fr_error(FR_ERR_INVALID_ARG, "rendezvous: rank %d of %d", rank, world);
    struct sockaddr_in sa;
    FR_TRY(resolve(addr, port, &sa));
    const double deadline = now_s() + timeout_s;
    return rank == 0 ? serve(&sa, addr, port, world, blob, len, deadline) : join(&sa, addr, port, blob, len, deadline);
}
