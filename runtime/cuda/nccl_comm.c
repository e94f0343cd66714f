/* NCCL through dlopen, and a non-blocking communicator with bounded waits (nccl_comm.h). */
#include "runtime/cuda/nccl_comm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "graph/env.h"
#include "runtime/dist/dist.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define FR_HAVE_NCCL_H 1
#endif
#endif

#ifndef FR_HAVE_NCCL_H
/* built where nccl.h is absent: the data-parallel path says so */
fr_status fr_nccl_load(int *version)
{
    if (version) *version = 0;
    return fr_error(FR_ERR_UNSUPPORTED, "this fp8run was built without nccl.h: data-parallel training is unavailable");
}
fr_status fr_nccl_new(int rank, int world, const char *addr, int port, void *external, fr_nccl **out)
{
    (void)rank, (void)world, (void)addr, (void)port, (void)external;
    *out = NULL;
    return fr_nccl_load(NULL);
}
void fr_nccl_free(fr_nccl *c) { (void)c; }
int fr_nccl_rank(const fr_nccl *c) { (void)c; return 0; }
int fr_nccl_broken(const fr_nccl *c) { (void)c; return 0; }
int fr_nccl_world(const fr_nccl *c) { (void)c; return 1; }
fr_status fr_nccl_group_start(fr_nccl *c) { (void)c; return fr_nccl_load(NULL); }
fr_status fr_nccl_group_end(fr_nccl *c) { (void)c; return fr_nccl_load(NULL); }
fr_status fr_nccl_allreduce(fr_nccl *c, void *b, size_t n, fr_nccl_type t, fr_nccl_op o, cudaStream_t s)
{
    (void)c, (void)b, (void)n, (void)t, (void)o, (void)s;
    return fr_nccl_load(NULL);
}
fr_status fr_nccl_broadcast(fr_nccl *c, void *b, size_t n, fr_nccl_type t, int root, cudaStream_t s)
{
    (void)c, (void)b, (void)n, (void)t, (void)root, (void)s;
    return fr_nccl_load(NULL);
}
fr_status fr_nccl_reduce(fr_nccl *c, void *b, size_t n, fr_nccl_type t, fr_nccl_op o, int root, cudaStream_t s)
{
    (void)c, (void)b, (void)n, (void)t, (void)o, (void)root, (void)s;
    return fr_nccl_load(NULL);
}
fr_status fr_nccl_wait_event(fr_nccl *c, cudaEvent_t ev, const char *what)
{
    (void)c, (void)ev, (void)what;
    return fr_nccl_load(NULL);
}
#else

/* ---- the library ---- */

static struct {
    void *h;
    ncclResult_t (*GetVersion)(int *);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *);
    ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*CommFinalize)(ncclComm_t);
    ncclResult_t (*CommDestroy)(ncclComm_t);
    ncclResult_t (*CommAbort)(ncclComm_t);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
    const char *(*GetErrorString)(ncclResult_t);
    const char *(*GetLastError)(ncclComm_t);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
    ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*Reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
    int version;
    char err[1024];
} L;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static const char *const nccl_paths[] = {
    "libnccl.so.2",
    "libnccl.so",
    "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2",
    "/usr/local/cuda/lib64/libnccl.so.2",
    "/usr/local/cuda/lib/libnccl.so.2",
    "/usr/local/cuda-13.0/lib/libnccl.so.2",
    "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
    NULL,
};

static void load_lib(void)
{
    const char *env = fr_env_get(FR_ENV_NCCL_LIBRARY);
    char first[512] = "";
    if (env && *env) {
        L.h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!L.h) {
            snprintf(L.err, sizeof L.err, "NCCL: FP8RUN_NCCL_LIBRARY='%s' does not load: %s", env, dlerror());
            return;
        }
    }
    for (int i = 0; !L.h && nccl_paths[i]; i++) {
        L.h = dlopen(nccl_paths[i], RTLD_NOW | RTLD_LOCAL);
        const char *e = L.h ? NULL : dlerror();
        if (e && !first[0]) snprintf(first, sizeof first, "%s", e);
    }
    if (!L.h) {
        snprintf(L.err, sizeof L.err,
                 "NCCL (libnccl.so.2) was not found (%s); install it (the CUDA toolkit's NCCL, or pip "
                 "nvidia-nccl-cu13) or set FP8RUN_NCCL_LIBRARY to its path",
                 first);
        return;
    }
#define SYM(f)                                                                                  \
    do {                                                                                        \
        *(void **)&L.f = dlsym(L.h, "nccl" #f);                                                 \
        if (!L.f) {                                                                             \
            snprintf(L.err, sizeof L.err, "NCCL: the loaded library lacks nccl" #f " (too old?)"); \
            return;                                                                             \
        }                                                                                       \
    } while (0)
    SYM(GetVersion);
    SYM(GetUniqueId);
    SYM(CommInitRankConfig);
    SYM(CommFinalize);
    SYM(CommDestroy);
    SYM(CommAbort);
    SYM(CommGetAsyncError);
    SYM(GetErrorString);
    SYM(GetLastError);
    SYM(GroupStart);
    SYM(Reduce);
    SYM(GroupEnd);
    SYM(AllReduce);
    SYM(Broadcast);
#undef SYM
    if (L.GetVersion(&L.version) != ncclSuccess || L.version < 21400)
        snprintf(L.err, sizeof L.err, "NCCL %d is too old: fp8run needs 2.14 or newer (non-blocking communicators)",
                 L.version);
}

fr_status fr_nccl_load(int *version)
{
    pthread_once(&load_once, load_lib);
    if (version) *version = L.version;
    if (L.err[0]) return fr_error(FR_ERR_UNSUPPORTED, "%s", L.err);
    return FR_OK;
}

/* ---- the communicator ---- */

struct fr_nccl {
    ncclComm_t comm;
    int owned, rank, world, broken;
    double timeout_s;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* abort an owned communicator (its kernels stop; every later call fails at once); the caller's
   own communicator is left to the caller */
static void abort_comm(fr_nccl *c)
{
    if (c->owned && c->comm) L.CommAbort(c->comm);
    if (c->owned) c->comm = NULL;
    c->broken = 1;
}

static fr_status fail(fr_nccl *c, ncclResult_t r, const char *what)
{
    char last[512] = "";
    if (c->comm && !c->broken) snprintf(last, sizeof last, "%s", L.GetLastError(c->comm));
    abort_comm(c);
    return fr_error(FR_ERR_DEVICE, "NCCL: rank %d of %d: %s: %s%s%s; the communicator is %s", c->rank, c->world, what,
                    r == ncclInProgress ? "timed out (FP8RUN_NCCL_TIMEOUT)" : L.GetErrorString(r), last[0] ? ": " : "",
                    last, c->owned ? "aborted" : "broken (the caller's: abort it)");
}

/* wait for the communicator's pending calls (non-blocking mode) */
static fr_status settle(fr_nccl *c, ncclResult_t r, const char *what)
{
    if (c->broken) return fr_error(FR_ERR_DEVICE, "NCCL: rank %d: the communicator was aborted after an earlier error", c->rank);
    const double deadline = now_s() + c->timeout_s;
    while (r == ncclInProgress) {
        if (now_s() > deadline) return fail(c, r, what);
        usleep(100);
        if (L.CommGetAsyncError(c->comm, &r) != ncclSuccess) break;
    }
    if (r != ncclSuccess) return fail(c, r, what);
    return FR_OK;
}

fr_status fr_nccl_new(int rank, int world, const char *addr, int port, void *external, fr_nccl **out)
{
    *out = NULL;
    FR_TRY(fr_nccl_load(NULL));
    if (world < 1 || rank < 0 || rank >= world) return fr_error(FR_ERR_INVALID_ARG, "NCCL: rank %d of %d", rank, world);
    fr_nccl *c = fr_calloc(1, sizeof *c, "NCCL communicator");
    if (!c) return FR_ERR_OOM;
    c->rank = rank;
    c->world = world;
    const char *to = fr_env_get(FR_ENV_NCCL_TIMEOUT);
    c->timeout_s = to && atof(to) > 0 ? atof(to) : 600.0;
    if (external) {
        c->comm = (ncclComm_t)external;
        *out = c;
        return FR_OK;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* never NVLink multicast */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    fr_status st = FR_OK;
    if (rank == 0 && L.GetUniqueId(&id) != ncclSuccess)
        st = fr_error(FR_ERR_DEVICE, "NCCL: ncclGetUniqueId failed (rank 0)");
    if (st == FR_OK) st = fr_dist_exchange(addr, port, rank, world, &id, sizeof id, c->timeout_s);
    if (st == FR_OK) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        ncclResult_t r = L.CommInitRankConfig(&c->comm, world, id, rank, &cfg);
        c->owned = 1;
        if (r != ncclSuccess && r != ncclInProgress) {
            st = fr_error(FR_ERR_DEVICE, "NCCL: ncclCommInitRankConfig (rank %d of %d): %s", rank, world,
                          L.GetErrorString(r));
            abort_comm(c);
        } else {
            st = settle(c, r, "making the communicator");
        }
    }
    if (st != FR_OK) {
        fr_nccl_free(c);
        return st;
    }
    *out = c;
    return FR_OK;
}

void fr_nccl_free(fr_nccl *c)
{
    if (!c) return;
    if (c->owned && c->comm && !c->broken) {
        ncclResult_t r = L.CommFinalize(c->comm);
        if (settle(c, r, "finalizing") != FR_OK) fr_clear_error(); /* aborted by settle */
        if (c->comm) L.CommDestroy(c->comm);
    }
    free(c);
}

int fr_nccl_rank(const fr_nccl *c) { return c->rank; }
int fr_nccl_broken(const fr_nccl *c) { return c && c->broken; }
int fr_nccl_world(const fr_nccl *c) { return c->world; }

fr_status fr_nccl_group_start(fr_nccl *c)
{
    if (c->broken) return settle(c, ncclSuccess, "");
    ncclResult_t r = L.GroupStart();
    return r == ncclSuccess ? FR_OK : fail(c, r, "ncclGroupStart");
}

fr_status fr_nccl_group_end(fr_nccl *c)
{
    if (c->broken) return settle(c, ncclSuccess, "");
    return settle(c, L.GroupEnd(), "queuing grouped collectives");
}

static ncclDataType_t nccl_type(fr_nccl_type t)
{
    return t == FR_NCCL_I32 ? ncclInt32 : t == FR_NCCL_F64 ? ncclFloat64 : ncclFloat32;
}

static ncclRedOp_t nccl_op(fr_nccl_op op) { return op == FR_NCCL_MAX ? ncclMax : op == FR_NCCL_AVG ? ncclAvg : ncclSum; }

fr_status fr_nccl_reduce(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, fr_nccl_op op, int root, cudaStream_t s)
{
    if (c->broken) return settle(c, ncclSuccess, "");
    return settle(c, L.Reduce(buf, buf, count, nccl_type(type), nccl_op(op), root, c->comm, s), "reduce");
}

fr_status fr_nccl_allreduce(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, fr_nccl_op op, cudaStream_t s)
{
    ncclRedOp_t o = nccl_op(op);
    if (c->broken) return settle(c, ncclSuccess, "");
    return settle(c, L.AllReduce(buf, buf, count, nccl_type(type), o, c->comm, s), "all-reduce");
}

fr_status fr_nccl_broadcast(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, int root, cudaStream_t s)
{
    if (c->broken) return settle(c, ncclSuccess, "");
    return settle(c, L.Broadcast(buf, buf, count, nccl_type(type), root, c->comm, s), "broadcast");
}

fr_status fr_nccl_wait_event(fr_nccl *c, cudaEvent_t ev, const char *what)
{
    if (c->broken) return settle(c, ncclSuccess, what);
    const double deadline = now_s() + c->timeout_s;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return FR_OK;
        if (e != cudaErrorNotReady) return fr_error(FR_ERR_DEVICE, "CUDA: %s: %s", what, cudaGetErrorString(e));
        ncclResult_t r = ncclSuccess;
        if (L.CommGetAsyncError(c->comm, &r) != ncclSuccess || (r != ncclSuccess && r != ncclInProgress))
            return fail(c, r, what);
        if (now_s() > deadline) return fail(c, ncclInProgress, what);
        usleep(200);
    }
}

#endif
