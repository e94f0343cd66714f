/* Data-parallel training: the parts that need no GPU.
 *
 *   - the launch environment (torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
 *     MASTER_PORT), parsed by a pure function over a getenv-like callback;
 *   - the rendezvous: rank 0 hands a small blob (the NCCL unique id) to every other rank over
 *     TCP on MASTER_ADDR:MASTER_PORT (loopback unless the address says otherwise);
 *   - the gradient buckets: parameters grouped, in reverse order (the order the backward pass
 *     produces their gradients), into buckets of at most a byte budget, each bucket one
 *     grouped all-reduce;
 *   - the optimizer-state shards (ZeRO-1): every parameter owned by one rank, chosen greedily
 *     so that the ranks hold about the same number of elements; only the owner keeps its
 *     AdamW moments and updates it, then broadcasts the new values. With the gradients
 *     sharded too (ZeRO-2) each bucket is reduced to its parameters' owners only, and only
 *     they accumulate micro-batches;
 *   - the data split: rank r of N takes windows [r*B, (r+1)*B) of every micro-batch of the
 *     global batch of N*B windows, so N ranks compute the step one rank computes with N*B.
 * The NCCL side is runtime/cuda/nccl_*.c. */
#ifndef FR_DIST_H
#define FR_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

/* ---- launch environment ---- */
/* A rank's place in the job, as a launcher sets it: WORLD_SIZE, RANK, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun and `fp8run train --gpus N`), and the
 * node: NNODES / NODE_RANK (launch scripts, `fp8run train --nnodes N --node-rank R`) or
 * GROUP_WORLD_SIZE / GROUP_RANK (torchrun's names for the same). Ranks are numbered node by
 * node: rank = node_rank * local_world + local_rank, every node running local_world ranks. */
typedef struct fr_dist_env {
    int rank, world, local_rank;
    int local_world;      /* ranks per node: LOCAL_WORLD_SIZE, else WORLD_SIZE / NNODES, else
                             WORLD_SIZE when LOCAL_RANK = RANK (one node); 0: unknown */
    int nnodes;           /* NNODES (GROUP_WORLD_SIZE), else WORLD_SIZE / local_world; 0: unknown */
    int node_rank;        /* NODE_RANK (GROUP_RANK), else rank / local_world; -1: unknown */
    char addr[256];       /* MASTER_ADDR (default 127.0.0.1) */
    int port;             /* MASTER_PORT (default 29500) */
    int present;          /* 1: WORLD_SIZE was set (launched by fp8run --gpus or a launcher) */
} fr_dist_env;
typedef const char *(*fr_getenv_fn)(const char *name);
/* Parse the variables through get (getenv in production). Absent WORLD_SIZE: world 1, rank 0,
 * present 0. Malformed or inconsistent values (a rank or node past its count, a rank that is
 * not node_rank * local_world + local_rank, NNODES that does not divide WORLD_SIZE, NODE_RANK
 * and GROUP_RANK that disagree, several nodes without MASTER_ADDR and MASTER_PORT) are
 * FR_ERR_INVALID_ARG naming the variables and their values. */
FR_NODISCARD fr_status fr_dist_env_parse(fr_getenv_fn get, fr_dist_env *out);
/* "rank 5 (node 1, local rank 1)", or "rank 5" when the node is unknown. */
const char *fr_dist_rank_text(const fr_dist_env *e, int rank, char *buf, size_t n);

/* ---- rendezvous ---- */
/* Every rank of the job meets rank 0 on addr:port over TCP: each sends who it is (rank, world
 * size, node, blob length); rank 0 waits until every rank 1..world-1 has come exactly once,
 * then sends each the `len` bytes of blob (the NCCL unique id). All ranks leave together or
 * fail together with the reason: a rank claimed twice, a rank whose WORLD_SIZE / NNODES /
 * blob length differ from rank 0's, a rank whose connection closes before the end (it died:
 * named), ranks missing at the deadline (named). Rank 0 sends that reason to the ranks that
 * came, so each fails with it; a rank that loses rank 0 says so. Every wait ends by
 * timeout_s (FP8RUN_RENDEZVOUS_TIMEOUT, when set, takes its place). Errors are FR_ERR_DEVICE. */
FR_NODISCARD fr_status fr_dist_rendezvous(const fr_dist_env *e, void *blob, size_t len, double timeout_s);
/* The rendezvous of rank of world on addr:port, the node unknown (the NCCL communicator's). */
FR_NODISCARD fr_status fr_dist_exchange(const char *addr, int port, int rank, int world, void *blob, size_t len,
                           double timeout_s);
/* The rendezvous' time limit: FP8RUN_RENDEZVOUS_TIMEOUT, else FP8RUN_NCCL_TIMEOUT, else 600 s. */
double fr_dist_rendezvous_timeout(void);

/* ---- gradient buckets ---- */
typedef struct fr_dist_bucket {
    int first;            /* the bucket holds params[first .. first-count+1] (descending) */
    int count;
    int64_t numel;        /* elements in the bucket */
} fr_dist_bucket;
/* Buckets over n parameters of numel[i] elements of elem_size bytes, in descending index
 * order, each at most bucket_bytes (a larger parameter is a bucket of its own). *out is
 * malloc'ed (n_out may be 0 when n is 0). */
FR_NODISCARD fr_status fr_dist_plan_buckets(const int64_t *numel, int n, size_t elem_size, size_t bucket_bytes,
                               fr_dist_bucket **out, int *n_out);

/* Overlap with the backward pass: ready[k] is the executor node after which bucket k may start,
 * the last node touching any of its gradients (last_touch[i] per parameter, -1: none), made
 * non-decreasing over k so the buckets start in plan order (every rank issues its collectives in
 * that order, whatever the graph). */
void fr_dist_bucket_ready(const fr_dist_bucket *b, int nb, const int *last_touch, int *ready);
/* The chunks (runs of `chunk` elements, parameter by parameter, in parameter order) of the
 * parameters rank owns (owner NULL: all of them): bucket k's are [first[k], first[k] + count[k])
 * of that list. */
FR_NODISCARD fr_status fr_dist_bucket_chunks(const int64_t *numel, int n, const int *owner, int rank, int64_t chunk,
                                             const fr_dist_bucket *b, int nb, int *first, int *count);

/* ---- optimizer-state shards ---- */
/* owner[i] in [0, world): parameters taken in descending size (ties: lower index first), each
 * given to the rank holding the fewest elements so far (ties: the lowest rank). Deterministic:
 * every rank computes the same table. */
FR_NODISCARD fr_status fr_dist_partition(const int64_t *numel, int n, int world, int *owner);
/* Elements rank r owns under owner[]. */
int64_t fr_dist_owned_numel(const int64_t *numel, const int *owner, int n, int rank);

/* ---- data ---- */
/* Copy rank r's share of a global step: `global` holds k micro-batches of world*batch windows of
 * `win` ids; `local` receives k micro-batches of batch windows (windows r*batch ..). */
void fr_dist_split_windows(const int64_t *global, int64_t *local, int k, int64_t batch, int64_t win, int rank,
                           int world);

#endif
