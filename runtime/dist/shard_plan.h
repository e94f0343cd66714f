/* Sharded parameters (ZeRO-3 / FSDP-style), the parts that need no GPU: which rank owns which
 * slice of every parameter, in what order the layers' weights are gathered and freed, and the
 * gather/scatter between a whole tensor (the per-name checkpoint format) and its shards.
 *
 * A parameter is cut along one dimension (`dim`: 0, or the output-feature dimension of a
 * Linear weight, the rows of the K-major layout the FP8 GEMM reads) into world equal slices of
 * `shard` indices each, the last ones padded: rank r owns indices [r*shard, min((r+1)*shard,
 * extent)) of that dimension. Every rank allocates the same `shard` slices (the masters, the
 * optimizer state and the gradients, each 1/N of the whole plus at most one granule per
 * parameter), so an all-gather of equal pieces puts the whole tensor, in order, at the front of
 * the gathered buffer, its padding at the end: no copy after the collective (for a cut along
 * dim 0 of the layout gathered: a Linear weight cut along its output features is gathered in
 * the K-major layout its codes are quantized into, each rank transposing its own slice).
 *
 * `shard` is a multiple of a granule: enough indices that each rank's piece is a whole number
 * of 16-byte vectors both as float32 masters and as the gathered element (1 byte: FP8 codes,
 * 2: bf16, 4: float32); with 128x128 block scaling, also whole 128-index blocks, so each rank
 * quantizes its own blocks and their scales travel with the codes. A per-tensor scale is the
 * same on every rank (the delayed recipe's state is reduced over the ranks; the current
 * recipe's amax is all-reduced before quantizing), so the codes of all shards agree.
 *
 * Units: parameters are gathered a layer at a time. A parameter's unit is its layer (the name
 * up to the first ".<number>.", as exporters name blocks: model.layers.3.mlp...); parameters
 * outside the layers form one unit before them (embeddings) and one after (final norm, head);
 * a name with no module path at all (TorchScript's onnx::MatMul_576) joins the unit of the
 * parameter before it.
 * The schedule is the order a step issues its collectives in (the same on every rank): the
 * forward gathers unit u+1 while unit u computes (prefetch one ahead) and frees unit u after
 * it (the last unit stays for the backward); the backward walks the units in reverse,
 * prefetching u-1, then frees unit u's weights and reduce-scatters its gradients. */
#ifndef FR_SHARD_PLAN_H
#define FR_SHARD_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"
#include "graph/tensor.h"

typedef struct fr_shard_spec {
    const char *name;
    int rank;
    const int64_t *dims;
    int dim;            /* the dimension cut (0 .. rank-1; 0 for a scalar) */
    int gather_bytes;   /* bytes of a gathered element: 1 (FP8 codes), 2 (bf16), 4 (float32) */
    int block;          /* 0, or 128: 128x128 block scales, whole blocks per rank */
} fr_shard_spec;

typedef struct fr_shard_param {
    char *name;
    int rank;
    int64_t dims[FR_MAX_RANK];
    int dim, gather_bytes, block;
    int64_t numel;
    int64_t extent;     /* dims[dim] (1 for a scalar) */
    int64_t outer;      /* product of the dims before dim */
    int64_t inner;      /* product of the dims after dim */
    int64_t granule;    /* indices of dim per alignment granule */
    int64_t shard;      /* indices of dim each rank holds (a multiple of granule) */
    int unit;
} fr_shard_param;

typedef enum fr_shard_op {
    FR_SHARD_GATHER,         /* start the all-gather of a unit's weights (comm stream) */
    FR_SHARD_FORWARD,        /* the unit's forward (waits for its gather) */
    FR_SHARD_BACKWARD,       /* the unit's backward (waits for its gather) */
    FR_SHARD_FREE,           /* release the unit's gathered weights */
    FR_SHARD_REDUCE_SCATTER, /* its gradients: each rank keeps the sum of its slices */
} fr_shard_op;

typedef struct fr_shard_step {
    fr_shard_op op;
    int unit;
} fr_shard_step;

typedef struct fr_shard_unit {
    char *name;          /* "model.layers.3", "(before the layers)", "(after the layers)" */
    int n_params;
    size_t gather_bytes; /* the gathered weights: world * shard slices of every parameter, in
                            their gathered element, plus block scales */
    size_t grad_bytes;   /* the unit's whole float32 gradients before the reduce-scatter */
} fr_shard_unit;

typedef struct fr_shard_plan {
    int world;
    int n_params, n_units, n_steps;
    fr_shard_param *params;
    fr_shard_unit *units;
    fr_shard_step *steps;
    size_t peak_gathered;   /* most gathered-weight bytes held at once along the schedule */
} fr_shard_plan;

/* Plan n parameters over world ranks (params in the model's order: the forward's, roughly).
 * A spec's dim out of range, a gather_bytes other than 1/2/4 or block other than 0/128 is
 * FR_ERR_INVALID_ARG naming the parameter. */
FR_NODISCARD fr_status fr_shard_plan_new(const fr_shard_spec *specs, int n, int world, fr_shard_plan **out);
void fr_shard_plan_free(fr_shard_plan *p);
/* The index of parameter `name`, -1 when the plan has none. */
int fr_shard_plan_find(const fr_shard_plan *p, const char *name);

/* Parameter i on rank r: the indices of dim it owns, [*first, *first + *count) (count may be 0
 * for the last ranks of a small parameter). Its elements: outer * count * inner. */
void fr_shard_slice(const fr_shard_plan *p, int i, int rank, int64_t *first, int64_t *count);
/* Elements a rank allocates for parameter i (padded: the same on every rank). */
int64_t fr_shard_alloc_numel(const fr_shard_plan *p, int i);
/* Elements rank r really owns, over all parameters. */
int64_t fr_shard_owned_numel(const fr_shard_plan *p, int rank);
/* Elements every rank allocates, over all parameters (masters, gradients; state per element). */
int64_t fr_shard_alloc_total(const fr_shard_plan *p);

/* Rank r's shard of parameter i from the whole tensor `full` (float32, numel): written into
 * `shard` (fr_shard_alloc_numel floats: outer x shard x inner, padding zero). */
void fr_shard_scatter(const fr_shard_plan *p, int i, int rank, const float *full, float *shard);
/* The whole tensor from every rank's shard (shards[r], as fr_shard_scatter writes them). */
void fr_shard_gather(const fr_shard_plan *p, int i, const float *const *shards, float *full);

/* The plan as text: totals per rank, the units with their gathered bytes, the schedule's peak.
 * malloc'ed; NULL on allocation failure. */
char *fr_shard_plan_text(const fr_shard_plan *p);

#endif
