/* NCCL, loaded at run time (libfp8run does not link it), and one communicator.
 *
 * The library is found by dlopen: $FP8RUN_NCCL_LIBRARY, then libnccl.so.2 on the loader's path,
 * then the usual places (the CUDA toolkit, the nvidia-nccl pip wheels). When none loads, the
 * error lists what was tried and says how to point at one.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): every NCCL call returns at once
 * and its completion, and every queued collective's, is waited for by polling
 * ncclCommGetAsyncError against a deadline ($FP8RUN_NCCL_TIMEOUT seconds, default 600). A NCCL
 * error or a timeout aborts the communicator (ncclCommAbort) and is FR_ERR_DEVICE naming the
 * rank; every later call fails at once. NVLink multicast (NVLS) is never used:
 * NCCL_NVLS_ENABLE=0 is set in the environment when unset, before the communicator is made. */
#ifndef FR_NCCL_COMM_H
#define FR_NCCL_COMM_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "graph/status.h"

typedef struct fr_nccl fr_nccl;
typedef enum fr_nccl_type { FR_NCCL_F32, FR_NCCL_I32, FR_NCCL_F64 } fr_nccl_type;
typedef enum fr_nccl_op { FR_NCCL_SUM, FR_NCCL_MAX, FR_NCCL_AVG } fr_nccl_op;

/* Load NCCL once (thread-safe); FR_ERR_UNSUPPORTED with what was tried when it is missing.
 * *version (may be NULL) gets ncclGetVersion's code (e.g. 22809). */
FR_NODISCARD fr_status fr_nccl_load(int *version);

/* A communicator of `world` ranks on the current CUDA device. external (an ncclComm_t the
 * caller made, not owned) or NULL: one is made, the unique id coming from rank 0 over TCP on
 * addr:port (runtime/dist/dist.h; no socket for world 1). */
FR_NODISCARD fr_status fr_nccl_new(int rank, int world, const char *addr, int port, void *external, fr_nccl **out);
/* Destroy (or abort, after an error) an owned communicator. */
void fr_nccl_free(fr_nccl *c);
int fr_nccl_rank(const fr_nccl *c);
/* 1 once the communicator was aborted (its collectives may never finish on the device). */
int fr_nccl_broken(const fr_nccl *c);
int fr_nccl_world(const fr_nccl *c);

/* Collectives queued on stream s, in place. Between group_start and group_end several are
 * fused into one launch. */
FR_NODISCARD fr_status fr_nccl_group_start(fr_nccl *c);
FR_NODISCARD fr_status fr_nccl_group_end(fr_nccl *c);
FR_NODISCARD fr_status fr_nccl_allreduce(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, fr_nccl_op op, cudaStream_t s);
FR_NODISCARD fr_status fr_nccl_broadcast(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, int root, cudaStream_t s);
/* In place: root receives the reduction of every rank's buf; the others' buf is left as it was. */
FR_NODISCARD fr_status fr_nccl_reduce(fr_nccl *c, void *buf, size_t count, fr_nccl_type type, fr_nccl_op op, int root,
                                      cudaStream_t s);

/* Wait for ev (recorded after collectives) while watching the communicator: a NCCL error, or
 * the deadline passing, aborts it (what: the wait's purpose, for the message). */
FR_NODISCARD fr_status fr_nccl_wait_event(fr_nccl *c, cudaEvent_t ev, const char *what);

#endif
