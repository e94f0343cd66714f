/* CUDA kernels of the gather family (see ops/cuda/cuda_kernel.h for the contract and
 * ops/gather.c for the semantics matched here): Gather, GatherElements, GatherND and their
 * scatter-add backward ops GatherGrad, GatherElementsGrad, GatherNDGrad (ai.fp8run).
 *
 * Forward ops move elements by size, never by type: a copied row is moved in the widest unit
 * (16, 8, 4, 2 or 1 bytes) that divides its byte length and the addresses, so every dtype
 * comes out bit-exact.
 *
 * Out-of-range indices. The CPU kernel checks every index first and fails with FR_ERR_RANGE.
 * A kernel cannot fail without a host synchronization, so every node of this family keeps an
 * error record (fr_gather_index_error) at offset 0 of its scratch: run() clears it on the
 * stream, the first thread that meets an index outside [-n, n) fills it in, and nothing is
 * read or written out of bounds (a forward element with a bad index is written as zero
 * bytes, a backward row with one is dropped). Whoever synchronizes the stream reads the
 * record back and turns it into the CPU's error message with fr_cuda_gather_index_error().
 *
 * Scatter-add is deterministic and adds in the CPU's order: each dy row gets its destination
 * row as a sort key, CUB's stable radix sort orders the (destination, source) pairs exactly
 * as the CPU's qsort by (dst, src) does, and one thread per (destination row, element) sums
 * its run of source rows in double in that order, starting from the first row (so a lone
 * -0.0 keeps its sign), and rounds once. No atomics: repeated indices, the embedding
 * gradient (a [B, T] batch of token ids into a [V, D] table), give the same bits on every
 * run and the same bits as the CPU. Rows that no index names are zeroed first. */
#include <cub/device/device_radix_sort.cuh>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/cuda/layout_util.cuh" /* kThreads, grid_for, GRID_STRIDE, unit_bytes, BY_UNIT */
#include "ops/gather_plan.h"

/* The record at offset 0 of every gather-family node's scratch (see above). */
typedef struct fr_gather_index_error {
    unsigned int code; /* 0: no error; 1: an index was out of range */
    int axis;          /* the data axis the index addresses */
    long long index;   /* its value */
    long long pos;     /* its flat position in the indices tensor */
    long long size;    /* the size of that axis */
} fr_gather_index_error;

namespace {

constexpr size_t kErrBytes = 256; /* the record, padded so what follows stays aligned */

/* A LAUNCH for BY_UNIT: the caller's LAUNCH_I(T, I) with I the C type of its `idx` tensor. */
#define BY_INDEX(T)                                                                                                    \
    do {                                                                                                               \
        if (idx->dtype == FR_I64)                                                                                      \
            LAUNCH_I(T, int64_t);                                                                                      \
        else                                                                                                           \
            LAUNCH_I(T, int32_t);                                                                                      \
    } while (0)

__device__ void bad_index(fr_gather_index_error *e, int64_t v, int64_t pos, int axis, int64_t size)
{
    if (atomicCAS(&e->code, 0u, 1u) == 0u) {
        e->axis = axis;
        e->index = v;
        e->pos = pos;
        e->size = size;
    }
}

/* ---- forward kernels ---- */

/* y[o, j, e] = x[o, idx[j], e] in units of T; upr units per row. */
template <class T, class I>
__global__ void gather_rows_k(T *__restrict__ y, const T *__restrict__ x, const I *__restrict__ idx, int64_t cnt,
                              int64_t size, int64_t upr, int64_t total, int axis, fr_gather_index_error *err)
{
    GRID_STRIDE(int64_t, i, total)
    {
        int64_t row = i / upr, e = i - row * upr;
        int64_t o = row / cnt, j = row - o * cnt;
        int64_t v = (int64_t)idx[j];
        if (v < -size || v >= size) {
            if (e == 0) bad_index(err, v, j, axis, size);
            y[i] = T{};
            continue;
        }
        if (v < 0) v += size;
        y[i] = x[(o * size + v) * upr + e];
    }
}

struct ge_params {
    int rank, axis;
    int64_t size;
    int64_t idims[FR_MAX_RANK]; /* indices (= output) shape */
    int64_t ds[FR_MAX_RANK];    /* data strides in elements */
};

template <class T, class I>
__global__ void gather_elems_k(T *__restrict__ y, const T *__restrict__ x, const I *__restrict__ idx, int64_t cnt,
                               ge_params p, fr_gather_index_error *err)
{
    GRID_STRIDE(int64_t, j, cnt)
    {
        int64_t r = j, off = 0;
        for (int k = p.rank - 1; k >= 0; k--) {
            int64_t c = r % p.idims[k];
            r /= p.idims[k];
            if (k != p.axis) off += c * p.ds[k];
        }
        int64_t v = (int64_t)idx[j];
        if (v < -p.size || v >= p.size) {
            bad_index(err, v, j, p.axis, p.size);
            y[j] = T{};
            continue;
        }
        if (v < 0) v += p.size;
        y[j] = x[off + v * p.ds[p.axis]];
    }
}

struct gnd_params {
    int b, m;
    int64_t per_batch;           /* index tuples per batch */
    int64_t batch_rows;          /* source rows per batch */
    int64_t upr;                 /* units of T per row */
    int64_t size[FR_MAX_RANK];   /* sizes of the m addressed data dims */
    int64_t rstride[FR_MAX_RANK]; /* their strides in rows */
};

template <class T, class I>
__global__ void gather_nd_k(T *__restrict__ y, const T *__restrict__ x, const I *__restrict__ idx, int64_t total,
                            gnd_params p, fr_gather_index_error *err)
{
    GRID_STRIDE(int64_t, i, total)
    {
        int64_t row = i / p.upr, e = i - row * p.upr;
        int64_t src = (row / p.per_batch) * p.batch_rows;
        bool ok = true;
        for (int l = 0; l < p.m; l++) {
            int64_t v = (int64_t)idx[row * p.m + l], size = p.size[l];
            if (v < -size || v >= size) {
                if (e == 0) bad_index(err, v, row * p.m + l, p.b + l, size);
                ok = false;
                break;
            }
            if (v < 0) v += size;
            src += v * p.rstride[l];
        }
        y[i] = ok ? x[src * p.upr + e] : T{};
    }
}

/* Only the index check, for nodes whose output is empty (the CPU still rejects bad indices):
 * position j addresses axis axis0 + j % m of size sizes[j % m]. */
struct check_params {
    int m, axis0;
    int64_t sizes[FR_MAX_RANK];
};

template <class I>
__global__ void check_indices_k(const I *__restrict__ idx, int64_t cnt, check_params p, fr_gather_index_error *err)
{
    GRID_STRIDE(int64_t, j, cnt)
    {
        int l = (int)(j % p.m);
        int64_t v = (int64_t)idx[j], size = p.sizes[l];
        if (v < -size || v >= size) bad_index(err, v, j, p.axis0 + l, size);
    }
}

template <class I>
fr_status launch_check(const fr_cuda_kctx *k, const fr_tensor *idx, const check_params &p, fr_gather_index_error *err)
{
    int64_t cnt = fr_tensor_numel(idx);
    if (!cnt) return FR_OK;
    check_indices_k<I><<<grid_for(k, cnt), kThreads, 0, k->cu->stream>>>((const I *)idx->data, cnt, p, err);
    return fr_cuda_check_launch(k->node, "check_indices_k");
}

fr_status check_only(const fr_cuda_kctx *k, const fr_tensor *idx, const check_params &p, fr_gather_index_error *err)
{
    return idx->dtype == FR_I64 ? launch_check<int64_t>(k, idx, p, err) : launch_check<int32_t>(k, idx, p, err);
}

/* Inputs, the error record (cleared on the stream) and the output of a gather-family node. */
fr_status node_io(const fr_cuda_kctx *k, const fr_tensor **x, const fr_tensor **idx, fr_tensor **y,
                  fr_gather_index_error **err)
{
    const fr_node *n = k->node;
    *x = k->n_in > 0 ? k->in[0] : NULL;
    *idx = k->n_in > 1 ? k->in[1] : NULL;
    *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!*x || !*idx) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    FR_TRY(fr_gather_index_dtype_ok(n, (*idx)->dtype));
    if (!k->scratch || k->scratch_bytes < sizeof(fr_gather_index_error))
        return fr_node_error(n, FR_ERR_INTERNAL, "the index error record (scratch) is missing");
    *err = (fr_gather_index_error *)k->scratch;
    NODE_CUDA_TRY(n, cudaMemsetAsync(*err, 0, sizeof(fr_gather_index_error), k->cu->stream));
    return FR_OK;
}

fr_status err_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    (void)g;
    (void)n;
    *bytes = kErrBytes;
    return FR_OK;
}

/* ---- Gather ---- */

fr_status gather_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    fr_gather_index_error *err;
    FR_TRY(node_io(k, &x, &idx, &y, &err));
    int axis, rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_shape(n, x->rank, x->dims, idx->rank, idx->dims, axis, &rank, dims));
    FR_TRY(fr_check_out(n, y, x->dtype, rank, dims));
    int64_t size = x->dims[axis], cnt = fr_tensor_numel(idx), outer = 1, inner = 1;
    if (!y->nbytes) {
        check_params p = {1, axis, {size}};
        return check_only(k, idx, p, err);
    }
    for (int kk = 0; kk < axis; kk++) outer *= x->dims[kk];
    for (int kk = axis + 1; kk < x->rank; kk++) inner *= x->dims[kk];
    size_t es = fr_dtype_size(x->dtype);
    int64_t v[3] = {inner * (int64_t)es, addr(x->data), addr(y->data)};
    int w = unit_bytes(es, v, 3);
    int64_t upr = (int64_t)(inner * (int64_t)es / w), total = outer * cnt * upr;
    unsigned grid = grid_for(k, total);
#define LAUNCH_I(T, I)                                                                          \
    gather_rows_k<T, I><<<grid, kThreads, 0, k->cu->stream>>>((T *)y->data, (const T *)x->data,  \
                                                              (const I *)idx->data, cnt, size, upr, total, axis, err)
    BY_UNIT(w, BY_INDEX);
#undef LAUNCH_I
    return fr_cuda_check_launch(n, "gather_rows_k");
}

/* ---- GatherElements ---- */

fr_status gather_elements_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    fr_gather_index_error *err;
    FR_TRY(node_io(k, &x, &idx, &y, &err));
    int axis;
    FR_TRY(fr_gather_axis(n, x->rank, &axis));
    FR_TRY(fr_gather_elements_shapes(n, x->rank, x->dims, idx->rank, idx->dims, axis));
    FR_TRY(fr_check_out(n, y, x->dtype, idx->rank, idx->dims));
    int64_t cnt = fr_tensor_numel(idx);
    if (!cnt) return FR_OK;
    ge_params p;
    memset(&p, 0, sizeof p);
    p.rank = idx->rank;
    p.axis = axis;
    p.size = x->dims[axis];
    for (int kk = 0; kk < idx->rank; kk++) p.idims[kk] = idx->dims[kk];
    fr_contig_strides(x->rank, x->dims, p.ds);
    unsigned grid = grid_for(k, cnt);
#define LAUNCH_I(T, I)                                                                          \
    gather_elems_k<T, I><<<grid, kThreads, 0, k->cu->stream>>>((T *)y->data, (const T *)x->data, \
                                                               (const I *)idx->data, cnt, p, err)
    BY_UNIT((int)fr_dtype_size(x->dtype), BY_INDEX);
#undef LAUNCH_I
    return fr_cuda_check_launch(n, "gather_elems_k");
}

/* ---- GatherND ---- */

fr_status gather_nd_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x, *idx;
    fr_tensor *y;
    fr_gather_index_error *err;
    FR_TRY(node_io(k, &x, &idx, &y, &err));
    int64_t b;
    FR_TRY(fr_gather_nd_batch_dims(n, k->opset, &b));
    int rank;
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_gather_nd_shape(n, b, x->rank, x->dims, idx->rank, idx->dims, &rank, dims));
    FR_TRY(fr_check_out(n, y, x->dtype, rank, dims));
    int m = (int)idx->dims[idx->rank - 1];
    if (!y->nbytes) {
        check_params c;
        memset(&c, 0, sizeof c);
        c.m = m;
        c.axis0 = (int)b;
        for (int l = 0; l < m; l++) c.sizes[l] = x->dims[b + l];
        return check_only(k, idx, c, err);
    }
    int64_t ds[FR_MAX_RANK], per_batch = 1, inner = 1;
    fr_contig_strides(x->rank, x->dims, ds);
    for (int kk = (int)b; kk < idx->rank - 1; kk++) per_batch *= idx->dims[kk];
    for (int kk = (int)(b + m); kk < x->rank; kk++) inner *= x->dims[kk];
    gnd_params p;
    memset(&p, 0, sizeof p);
    p.b = (int)b;
    p.m = m;
    p.per_batch = per_batch;
    /* y is not empty, so inner > 0 and every stride below is a whole number of rows */
    p.batch_rows = b > 0 ? ds[b - 1] / inner : 0;
    for (int l = 0; l < m; l++) {
        p.size[l] = x->dims[b + l];
        p.rstride[l] = ds[b + l] / inner;
    }
    size_t es = fr_dtype_size(x->dtype);
    int64_t v[3] = {inner * (int64_t)es, addr(x->data), addr(y->data)};
    int w = unit_bytes(es, v, 3);
    p.upr = (int64_t)(inner * (int64_t)es / w);
    int64_t total = fr_tensor_numel(y) * (int64_t)es / w;
    unsigned grid = grid_for(k, total);
#define LAUNCH_I(T, I)                                                                          \
    gather_nd_k<T, I><<<grid, kThreads, 0, k->cu->stream>>>((T *)y->data, (const T *)x->data,    \
                                                            (const I *)idx->data, total, p, err)
    BY_UNIT(w, BY_INDEX);
#undef LAUNCH_I
    return fr_cuda_check_launch(n, "gather_nd_k");
}

/* ==== backward: deterministic scatter-add (see the top of the file) ==== */

/* Everything the scatter of one node needs, from shapes alone (plan time and run time). */
struct scatter_geom {
    int kind;                  /* 0 GatherGrad, 1 GatherElementsGrad, 2 GatherNDGrad */
    int rank, a;               /* output (= forward data) rank; axis, or batch_dims for kind 2 */
    int64_t dims[FR_MAX_RANK]; /* output shape */
    int q;                     /* indices rank */
    int64_t idims[FR_MAX_RANK];
    int64_t cnt;               /* indices count */
    int64_t rows;              /* dy rows (each scattered to one output row) */
    int64_t inner;             /* elements per row */
    int64_t ndst;              /* output rows; also the key of a dropped (bad) row */
    int key64;                 /* keys need 64 bits */
    int end_bit;               /* bits the radix sort looks at */
    /* scratch layout (byte offsets; 0 = absent) */
    size_t keys_in, keys_out, vals_in, vals_out, temp, temp_bytes, total;
};

size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

template <class K>
cudaError_t sort_pairs(void *temp, size_t &bytes, const K *kin, K *kout, const uint32_t *vin, uint32_t *vout,
                       int64_t n, int end_bit, cudaStream_t s)
{
    return cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, vin, vout, n, 0, end_bit, s);
}

/* The shape checks of ops/gather.c (fr_gather_scatter_check), then the row geometry and the
 * scratch layout (the CUB temporary size is a host-side query). */
fr_status scatter_plan(const fr_node *n, fr_dtype dy_dt, int dy_rank, const int64_t *dy_dims, fr_dtype idx_dt, int q,
                       const int64_t *di, scatter_geom *s)
{
    memset(s, 0, sizeof *s);
    s->kind = fr_gather_scatter_kind(n);
    FR_TRY(fr_gather_scatter_check(n, s->kind, dy_dt, dy_rank, dy_dims, idx_dt, q, di, &s->rank, s->dims, &s->a));
    s->q = q;
    for (int kk = 0; kk < q; kk++) s->idims[kk] = di[kk];
    s->cnt = 1;
    for (int kk = 0; kk < q; kk++) s->cnt *= di[kk];
    int64_t numel = 1, outer = 1;
    for (int kk = 0; kk < s->rank; kk++) numel *= s->dims[kk];
    s->inner = 1;
    if (s->kind == 0) {
        for (int kk = 0; kk < s->a; kk++) outer *= s->dims[kk];
        for (int kk = s->a + 1; kk < s->rank; kk++) s->inner *= s->dims[kk];
        s->rows = outer * s->cnt;
    } else if (s->kind == 1) {
        s->rows = s->cnt;
    } else {
        int64_t m = di[q - 1];
        for (int kk = s->a + (int)m; kk < s->rank; kk++) s->inner *= s->dims[kk];
        s->rows = s->cnt / m;
    }
    s->total = kErrBytes;
    if (!numel || !s->rows || !s->inner) return FR_OK; /* nothing to add: no sort */
    if (s->rows > (int64_t)UINT32_MAX)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "%lld rows to scatter, at most %u supported", (long long)s->rows,
                             UINT32_MAX);
    s->ndst = numel / s->inner;
    s->key64 = (uint64_t)s->ndst >= (uint64_t)UINT32_MAX;
    s->end_bit = 64 - __builtin_clzll((unsigned long long)s->ndst);
    size_t ks = s->key64 ? 8 : 4, r = (size_t)s->rows, off = kErrBytes;
    s->keys_in = off;
    off += align256(r * ks);
    s->keys_out = off;
    off += align256(r * ks);
    s->vals_in = off;
    off += align256(r * 4);
    s->vals_out = off;
    off += align256(r * 4);
    size_t tb = 0;
    cudaError_t e = s->key64 ? sort_pairs<uint64_t>(NULL, tb, NULL, NULL, NULL, NULL, s->rows, s->end_bit, 0)
                             : sort_pairs<uint32_t>(NULL, tb, NULL, NULL, NULL, NULL, s->rows, s->end_bit, 0);
    int devices = 0;
    if (e != cudaSuccess && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
        /* no device (a memory prediction on a machine without a GPU: train_memory.h): CUB reads
           the device's properties, so bound its temporary instead: its own copies of the keys
           and values, plus histograms and look-back tiles (under a byte a key and 4 MiB) */
        (void)cudaGetLastError();
        e = cudaSuccess;
        tb = r * (ks + 4 + 1) + ((size_t)4 << 20);
    }
    if (e != cudaSuccess)
        return fr_node_error(n, FR_ERR_DEVICE, "cub::DeviceRadixSort size query failed: %s", cudaGetErrorString(e));
    s->temp = off;
    s->temp_bytes = tb;
    s->total = off + align256(tb);
    return FR_OK;
}

fr_status scatter_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 2 || n->inputs[0] < 0 || n->inputs[1] < 0)
        return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    const fr_value *dy = &g->values[n->inputs[0]], *iv = &g->values[n->inputs[1]];
    scatter_geom s;
    FR_TRY(scatter_plan(n, dy->dtype, dy->rank, dy->dims, iv->dtype, iv->rank, iv->dims, &s));
    *bytes = s.total;
    return FR_OK;
}

struct key_params {
    int kind, a, q, m;
    int64_t cnt, rows, ndst, inner;
    int64_t dims[FR_MAX_RANK];  /* output shape */
    int64_t ds[FR_MAX_RANK];    /* its strides in elements */
    int64_t idims[FR_MAX_RANK]; /* indices shape */
    int64_t per_batch;          /* kind 2: index tuples per batch */
};

/* keys[r] = the output row dy row r adds into (ndst when its index is bad), vals[r] = r. */
template <class I, class K>
__global__ void scatter_keys_k(K *__restrict__ keys, uint32_t *__restrict__ vals, const I *__restrict__ idx,
                               key_params p, fr_gather_index_error *err)
{
    GRID_STRIDE(int64_t, r, p.rows)
    {
        int64_t key = 0;
        bool ok = true;
        if (p.kind == 0) {
            int64_t o = r / p.cnt, j = r - o * p.cnt, size = p.dims[p.a];
            int64_t v = (int64_t)idx[j];
            if (v < -size || v >= size) {
                if (o == 0) bad_index(err, v, j, p.a, size);
                ok = false;
            } else {
                key = o * size + (v < 0 ? v + size : v);
            }
        } else if (p.kind == 1) {
            int64_t rem = r, off = 0, size = p.dims[p.a];
            for (int k = p.q - 1; k >= 0; k--) {
                int64_t c = rem % p.idims[k];
                rem /= p.idims[k];
                if (k != p.a) off += c * p.ds[k];
            }
            int64_t v = (int64_t)idx[r];
            if (v < -size || v >= size) {
                bad_index(err, v, r, p.a, size);
                ok = false;
            } else {
                key = off + (v < 0 ? v + size : v) * p.ds[p.a];
            }
        } else {
            /* the forward kernel's addressing, in elements, then divided into rows */
            int64_t off = p.a > 0 ? (r / p.per_batch) * p.ds[p.a - 1] : 0;
            for (int l = 0; l < p.m && ok; l++) {
                int64_t v = (int64_t)idx[r * p.m + l], size = p.dims[p.a + l];
                if (v < -size || v >= size) {
                    bad_index(err, v, r * p.m + l, p.a + l, size);
                    ok = false;
                } else {
                    off += (v < 0 ? v + size : v) * p.ds[p.a + l];
                }
            }
            key = off / p.inner;
        }
        keys[r] = ok ? (K)key : (K)p.ndst;
        vals[r] = (uint32_t)r;
    }
}

/* For each run of equal keys (sorted, stable): y row key = sum of its dy rows in order, in
 * double, from the first row on. One thread per (row of the sorted list, element); only the
 * first row of a run works. */
template <class T, class K>
__global__ void segment_sum_k(T *__restrict__ y, const T *__restrict__ dy, const K *__restrict__ keys,
                              const uint32_t *__restrict__ vals, int64_t rows, int64_t inner, K dropped)
{
    GRID_STRIDE(int64_t, t, rows * inner)
    {
        int64_t i = t / inner, e = t - i * inner;
        K key = keys[i];
        if (key == dropped || (i > 0 && keys[i - 1] == key)) continue;
        double acc = (double)dy[(int64_t)vals[i] * inner + e];
        for (int64_t j = i + 1; j < rows && keys[j] == key; j++) acc += (double)dy[(int64_t)vals[j] * inner + e];
        y[(int64_t)key * inner + e] = (T)acc;
    }
}

template <class T, class I, class K>
fr_status scatter_launch(const fr_cuda_kctx *k, const scatter_geom &s, const key_params &p, const fr_tensor *dy,
                         const fr_tensor *idx, fr_tensor *y, fr_gather_index_error *err)
{
    const fr_node *n = k->node;
    char *base = (char *)k->scratch;
    K *kin = (K *)(base + s.keys_in), *kout = (K *)(base + s.keys_out);
    uint32_t *vin = (uint32_t *)(base + s.vals_in), *vout = (uint32_t *)(base + s.vals_out);
    cudaStream_t st = k->cu->stream;
    scatter_keys_k<I, K><<<grid_for(k, s.rows), kThreads, 0, st>>>(kin, vin, (const I *)idx->data, p, err);
    FR_TRY(fr_cuda_check_launch(n, "scatter_keys_k"));
    size_t tb = s.temp_bytes;
    NODE_CUDA_TRY(n, sort_pairs<K>(base + s.temp, tb, kin, kout, vin, vout, s.rows, s.end_bit, st));
    int64_t work = s.rows * s.inner;
    segment_sum_k<T, K><<<grid_for(k, work), kThreads, 0, st>>>((T *)y->data, (const T *)dy->data, kout, vout,
                                                                 s.rows, s.inner, (K)s.ndst);
    return fr_cuda_check_launch(n, "segment_sum_k");
}

fr_status scatter_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *dy, *idx;
    fr_tensor *y;
    fr_gather_index_error *err;
    FR_TRY(node_io(k, &dy, &idx, &y, &err));
    scatter_geom s;
    FR_TRY(scatter_plan(n, dy->dtype, dy->rank, dy->dims, idx->dtype, idx->rank, idx->dims, &s));
    FR_TRY(fr_check_out(n, y, dy->dtype, s.rank, s.dims));
    if (k->scratch_bytes < s.total)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch has %zu bytes, the scatter needs %zu", k->scratch_bytes,
                             s.total);
    if (y->nbytes) NODE_CUDA_TRY(n, cudaMemsetAsync(y->data, 0, y->nbytes, k->cu->stream));
    if (!s.ndst) { /* nothing to add; the indices are still checked */
        if (!s.cnt) return FR_OK;
        check_params c;
        memset(&c, 0, sizeof c);
        if (s.kind == 2) {
            c.m = (int)idx->dims[idx->rank - 1];
            for (int l = 0; l < c.m; l++) c.sizes[l] = s.dims[s.a + l];
        } else {
            c.m = 1;
            c.sizes[0] = s.dims[s.a];
        }
        c.axis0 = s.a;
        return check_only(k, idx, c, err);
    }
    key_params p;
    memset(&p, 0, sizeof p);
    p.kind = s.kind;
    p.a = s.a;
    p.q = s.q;
    p.m = s.kind == 2 ? (int)idx->dims[idx->rank - 1] : 1;
    p.cnt = s.cnt;
    p.rows = s.rows;
    p.ndst = s.ndst;
    p.inner = s.inner;
    for (int kk = 0; kk < s.rank; kk++) p.dims[kk] = s.dims[kk];
    fr_contig_strides(s.rank, s.dims, p.ds);
    for (int kk = 0; kk < s.q; kk++) p.idims[kk] = s.idims[kk];
    p.per_batch = 1;
    if (s.kind == 2)
        for (int kk = s.a; kk < s.q - 1; kk++) p.per_batch *= s.idims[kk];
    int f64 = dy->dtype == FR_F64, i64 = idx->dtype == FR_I64;
#define PICK(T, I)                                                                              \
    return s.key64 ? scatter_launch<T, I, uint64_t>(k, s, p, dy, idx, y, err)                   \
                   : scatter_launch<T, I, uint32_t>(k, s, p, dy, idx, y, err)
    if (f64) {
        if (i64) PICK(double, int64_t);
        PICK(double, int32_t);
    }
    if (i64) PICK(float, int64_t);
    PICK(float, int32_t);
#undef PICK
}

} /* namespace */

/* The CPU's error for a record read back from a gather-family node's scratch (FR_OK when it
 * holds none): "index V at position [..] is out of range for axis A of size S", naming the
 * node, with the position in the coordinates of the node's indices. */
extern "C" fr_status fr_cuda_gather_index_error(const fr_graph *g, const fr_node *n, const void *record)
{
    fr_gather_index_error e;
    memcpy(&e, record, sizeof e);
    if (!e.code) return FR_OK;
    int64_t pos[FR_MAX_RANK] = {0}, j = e.pos;
    int q = 0;
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const fr_value *iv = &g->values[n->inputs[1]];
        q = iv->rank > 0 ? iv->rank : 0;
        for (int kk = q - 1; kk >= 0; kk--) {
            int64_t d = iv->dims[kk];
            pos[kk] = d > 0 ? j % d : 0;
            j = d > 0 ? j / d : 0;
        }
    }
    char ps[160];
    return fr_node_error(n, FR_ERR_RANGE, "index %lld at position %s is out of range for axis %d of size %lld",
                         e.index, fr_shape_str(q, pos, ps, sizeof ps), e.axis, e.size);
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_gather[] = {
    {"Gather", FR_DOMAIN_ONNX, gather_run, err_scratch},
    {"GatherElements", FR_DOMAIN_ONNX, gather_elements_run, err_scratch},
    {"GatherND", FR_DOMAIN_ONNX, gather_nd_run, err_scratch},
    {"GatherGrad", FR_DOMAIN_FP8RUN, scatter_run, scatter_scratch},
    {"GatherElementsGrad", FR_DOMAIN_FP8RUN, scatter_run, scatter_scratch},
    {"GatherNDGrad", FR_DOMAIN_FP8RUN, scatter_run, scatter_scratch},
    {NULL, NULL, NULL, NULL},
};
