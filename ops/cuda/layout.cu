/* CUDA kernels of the layout family (see ops/cuda/cuda_kernel.h for the contract):
 * ops/layout.c and ops/slice_tile.c: Transpose, Concat, Split, Slice, Trilu, Tile, SliceGrad,
 * TileGrad (the shape ops of ops/shape.c are in shape.cu; what both use in layout_util.cuh).
 *
 * Everything but TileGrad moves elements by size (1, 2, 4, 8 bytes), never by
 * type, so every dtype comes out bit-exact. Transpose, Slice, Tile and SliceGrad share the
 * CPU's strided-view engine: the view drops size-1 dims and merges dims that stay contiguous,
 * then the copy takes the cheapest of
 *   - one cudaMemcpyAsync (the view is a contiguous block),
 *   - rows contiguous in the source (perms that keep the last dim, slices with step 1 on the
 *     last dim, tiles): a grid-stride copy in the widest unit (up to 16 bytes) that the row
 *     length, strides and addresses allow,
 *   - an output dim walking the source with stride 1 that is not the last (last-two-dims
 *     swaps, NCHW -> NHWC, any perm that moves the last dim): a 32 x 32 tile transpose
 *     through shared memory, so both reads and writes are coalesced,
 *   - otherwise one thread per element (negative or odd steps on the last dim).
 *
 * Inputs that decide shapes or plans (Slice starts/ends/axes/steps, Split sizes, Tile
 * repeats) live in device memory at run time; they are constants of the graph (infer()
 * insists), so the plan is read from the graph's constant values on the host, never from the
 * device. Trilu's k may be computed, so the kernel reads it from device memory itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/cuda_kernel.h"
#include "ops/layout_plan.h"
#include "ops/cuda/layout_util.cuh"

namespace {

/* ---- the strided-view engine ---- */

typedef fr_view view; /* the CPU's strided view (ops/layout_plan.h) */

/* One thread per element of the contiguous side: SCATTER 0 reads the strided source into a
 * contiguous dst, 1 writes a contiguous src into the strided dst. IT is the index type. */
template <class T, class IT, int SCATTER>
__global__ void view_copy_k(T *__restrict__ dst, const T *__restrict__ src, view v, IT n)
{
    GRID_STRIDE(IT, i, n)
    {
        IT r = i;
        int64_t off = 0;
        for (int k = v.rank - 1; k >= 0; k--) {
            IT d = (IT)v.dims[k];
            IT c = r % d;
            r /= d;
            off += (int64_t)c * v.stride[k];
        }
        if (SCATTER)
            dst[off] = src[i];
        else
            dst[i] = src[off];
    }
}

struct tile_params {
    int rank, j;                /* dim j has source stride 1; the last dim is the other */
    int64_t dims[FR_MAX_VIEW];
    int64_t stride[FR_MAX_VIEW];  /* source strides */
    int64_t ostride[FR_MAX_VIEW]; /* contiguous output strides */
    int64_t ntj, ntl, ntiles;   /* tiles along dim j, along the last dim, in all */
};

constexpr int kTile = 32, kTileRows = 8;

/* 32 x 32 tiles of (dim j, last dim): read along j (stride 1 in the source), write along the
 * last dim (stride 1 in the output), through shared memory. One tile per block iteration;
 * the other dims are the tile's batch. */
template <class T>
__global__ void __launch_bounds__(kTile *kTileRows) transpose_tiled_k(T *__restrict__ dst, const T *__restrict__ src,
                                                                       tile_params p)
{
    __shared__ T tile[kTile][kTile + 1];
    const int L = p.rank - 1, tx = threadIdx.x, ty = threadIdx.y;
    const int64_t dj = p.dims[p.j], dl = p.dims[L], sl = p.stride[L], oj = p.ostride[p.j];
    for (int64_t t = blockIdx.x; t < p.ntiles; t += gridDim.x) {
        int64_t tl = t % p.ntl, r = t / p.ntl, tj = r % p.ntj, b = r / p.ntj;
        int64_t sb = 0, db = 0;
        for (int k = L - 1; k >= 0; k--) {
            if (k == p.j) continue;
            int64_t c = b % p.dims[k];
            b /= p.dims[k];
            sb += c * p.stride[k];
            db += c * p.ostride[k];
        }
        const int64_t a0 = tj * kTile, l0 = tl * kTile;
        for (int q = ty; q < kTile; q += kTileRows) {
            int64_t a = a0 + tx, l = l0 + q;
            if (a < dj && l < dl) tile[q][tx] = src[sb + a + l * sl];
        }
        __syncthreads();
        for (int q = ty; q < kTile; q += kTileRows) {
            int64_t a = a0 + q, l = l0 + tx;
            if (a < dj && l < dl) dst[db + a * oj + l] = tile[tx][q];
        }
        __syncthreads();
    }
}

template <class T>
fr_status launch_view(const fr_cuda_kctx *k, void *dst, const void *src, const view &v, int64_t n, int scatter)
{
    cudaStream_t st = k->cu->stream;
    unsigned grid = grid_for(k, n);
    if (n <= INT32_MAX) {
        if (scatter)
            view_copy_k<T, uint32_t, 1><<<grid, kThreads, 0, st>>>((T *)dst, (const T *)src, v, (uint32_t)n);
        else
            view_copy_k<T, uint32_t, 0><<<grid, kThreads, 0, st>>>((T *)dst, (const T *)src, v, (uint32_t)n);
    } else {
        if (scatter)
            view_copy_k<T, uint64_t, 1><<<grid, kThreads, 0, st>>>((T *)dst, (const T *)src, v, (uint64_t)n);
        else
            view_copy_k<T, uint64_t, 0><<<grid, kThreads, 0, st>>>((T *)dst, (const T *)src, v, (uint64_t)n);
    }
    return fr_cuda_check_launch(k->node, "view_copy_k");
}

template <class T>
fr_status launch_tiled(const fr_cuda_kctx *k, void *dst, const void *src, const tile_params &p)
{
    int64_t cap = (int64_t)(k->cu->sm_count > 0 ? k->cu->sm_count : 128) * 16;
    unsigned grid = (unsigned)(p.ntiles < cap ? p.ntiles : cap);
    transpose_tiled_k<T><<<grid, dim3(kTile, kTileRows), 0, k->cu->stream>>>((T *)dst, (const T *)src, p);
    return fr_cuda_check_launch(k->node, "transpose_tiled_k");
}

/* scatter 0: contiguous dst <- src through v; scatter 1: dst through v <- contiguous src. */
fr_status view_copy(const fr_cuda_kctx *k, void *dst, const void *src, view v, size_t es, int scatter)
{
    const fr_node *n = k->node;
    if (!fr_view_simplify(&v)) return FR_OK;
    char *d = (char *)dst;
    const char *s = (const char *)src;
    if (scatter)
        d += v.offset * (int64_t)es;
    else
        s += v.offset * (int64_t)es;
    int64_t numel = 1;
    for (int i = 0; i < v.rank; i++) numel *= v.dims[i];
    if (v.rank == 0 || (v.rank == 1 && v.stride[0] == 1)) {
        NODE_CUDA_TRY(n, cudaMemcpyAsync(d, s, (size_t)numel * es, cudaMemcpyDeviceToDevice, k->cu->stream));
        return FR_OK;
    }
    const int L = v.rank - 1;
    if (v.stride[L] == 1) {
        /* rows contiguous on both sides: widen the element to the largest unit that fits */
        int64_t cand[FR_MAX_VIEW + 3];
        int c = 0;
        cand[c++] = v.dims[L] * (int64_t)es;
        cand[c++] = addr(d);
        cand[c++] = addr(s);
        for (int i = 0; i < L; i++) cand[c++] = v.stride[i] * (int64_t)es;
        int w = unit_bytes(es, cand, c);
        int64_t f = w / (int64_t)es;
        v.dims[L] /= f;
        for (int i = 0; i < L; i++) v.stride[i] /= f;
        numel /= f;
#define LAUNCH(T) return launch_view<T>(k, d, s, v, numel, scatter)
        BY_UNIT(w, LAUNCH);
#undef LAUNCH
    }
    if (!scatter && v.stride[L] != 0) {
        int j = -1;
        for (int i = 0; i < L; i++)
            if (v.stride[i] == 1) j = i;
        if (j >= 0 && v.dims[j] >= 4 && v.dims[L] >= 4) {
            tile_params p;
            memset(&p, 0, sizeof p);
            p.rank = v.rank;
            p.j = j;
            for (int i = 0; i < v.rank; i++) {
                p.dims[i] = v.dims[i];
                p.stride[i] = v.stride[i];
            }
            int64_t acc = 1;
            for (int i = L; i >= 0; i--) {
                p.ostride[i] = acc;
                acc *= v.dims[i];
            }
            p.ntj = (v.dims[j] + kTile - 1) / kTile;
            p.ntl = (v.dims[L] + kTile - 1) / kTile;
            p.ntiles = p.ntj * p.ntl * (numel / (v.dims[j] * v.dims[L]));
#define LAUNCH(T) return launch_tiled<T>(k, d, s, p)
            BY_UNIT((int)es, LAUNCH);
#undef LAUNCH
        }
    }
#define LAUNCH(T) return launch_view<T>(k, d, s, v, numel, scatter)
    BY_UNIT((int)es, LAUNCH);
#undef LAUNCH
    return FR_OK;
}

/* Rows of `width` bytes: dst row r (pitch dpitch) = src row r (pitch spitch). Concat and
 * Split, one launch per part. */
template <class T, class IT>
__global__ void copy2d_k(T *__restrict__ dst, int64_t dpitch, const T *__restrict__ src, int64_t spitch, IT width,
                         IT n)
{
    GRID_STRIDE(IT, i, n)
    {
        IT r = i / width, c = i - r * width;
        dst[(int64_t)r * dpitch + c] = src[(int64_t)r * spitch + c];
    }
}

template <class T>
fr_status launch_2d(const fr_cuda_kctx *k, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                    int64_t rows)
{
    int64_t w = (int64_t)sizeof(T), n = rows * (width / w);
    unsigned grid = grid_for(k, n);
    if (n <= INT32_MAX)
        copy2d_k<T, uint32_t><<<grid, kThreads, 0, k->cu->stream>>>((T *)dst, dpitch / w, (const T *)src, spitch / w,
                                                                      (uint32_t)(width / w), (uint32_t)n);
    else
        copy2d_k<T, uint64_t><<<grid, kThreads, 0, k->cu->stream>>>((T *)dst, dpitch / w, (const T *)src, spitch / w,
                                                                      (uint64_t)(width / w), (uint64_t)n);
    return fr_cuda_check_launch(k->node, "copy2d_k");
}

/* All sizes in bytes. */
fr_status copy2d(const fr_cuda_kctx *k, char *dst, int64_t dpitch, const char *src, int64_t spitch, int64_t width,
                 int64_t rows, size_t es)
{
    if (!rows || !width) return FR_OK;
    if (rows == 1 || (dpitch == width && spitch == width)) {
        NODE_CUDA_TRY(k->node,
                      cudaMemcpyAsync(dst, src, (size_t)(rows * width), cudaMemcpyDeviceToDevice, k->cu->stream));
        return FR_OK;
    }
    int64_t cand[5] = {width, dpitch, spitch, addr(dst), addr(src)};
    int w = unit_bytes(es, cand, 5);
#define LAUNCH(T) return launch_2d<T>(k, dst, dpitch, src, spitch, width, rows)
    BY_UNIT(w, LAUNCH);
#undef LAUNCH
    return FR_OK;
}

/* ---- Transpose ---- */

fr_status transpose_run(const fr_cuda_kctx *k)
{
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x) return fr_node_error(k->node, FR_ERR_GRAPH, "input missing");
    int perm[FR_MAX_RANK];
    FR_TRY(fr_transpose_perm(k->node, x->rank, perm));
    view v;
    fr_view_permute(&v, x->rank, x->dims, perm);
    FR_TRY(fr_check_out(k->node, y, x->dtype, x->rank, v.dims));
    return view_copy(k, y->data, x->data, v, fr_dtype_size(x->dtype), 0);
}

/* ---- Concat ---- */

fr_status concat_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (k->n_in < 1) return fr_node_error(n, FR_ERR_GRAPH, "has no inputs");
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_tensor *x0 = k->in[0];
    if (x0->rank < 1) return fr_node_error(n, FR_ERR_SHAPE, "inputs must have rank >= 1");
    int64_t a;
    if (!fr_node_attr(n, "axis") && k->opset >= 4) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'axis' is missing");
    FR_TRY(fr_node_attr_int(n, "axis", 1, &a));
    int axis;
    FR_TRY(fr_norm_axis(n, a, x0->rank, &axis));
    int64_t dims[FR_MAX_RANK];
    for (int i = 0; i < x0->rank; i++) dims[i] = x0->dims[i];
    dims[axis] = 0;
    for (int i = 0; i < k->n_in; i++) {
        const fr_tensor *x = k->in[i];
        int ok = x->dtype == x0->dtype && x->rank == x0->rank;
        for (int d = 0; ok && d < x0->rank; d++) ok = d == axis || x->dims[d] == x0->dims[d];
        if (!ok) {
            char s1[128], s2[128];
            return fr_node_error(n, FR_ERR_SHAPE,
                                 "input %d is %s %s, which does not match input 0's %s %s outside axis %d", i,
                                 fr_dtype_name(x->dtype), fr_shape_str(x->rank, x->dims, s1, sizeof s1),
                                 fr_dtype_name(x0->dtype), fr_shape_str(x0->rank, x0->dims, s2, sizeof s2), axis);
        }
        dims[axis] += x->dims[axis];
    }
    FR_TRY(fr_check_out(n, y, x0->dtype, x0->rank, dims));
    if (!y->nbytes) return FR_OK;
    int64_t es = (int64_t)fr_dtype_size(x0->dtype), outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int d = axis + 1; d < x0->rank; d++) inner *= dims[d];
    int64_t pitch = dims[axis] * inner * es, at = 0;
    for (int i = 0; i < k->n_in; i++) {
        int64_t chunk = k->in[i]->dims[axis] * inner * es;
        FR_TRY(copy2d(k, (char *)y->data + at, pitch, (const char *)k->in[i]->data, chunk, chunk, outer, (size_t)es));
        at += chunk;
    }
    return FR_OK;
}

/* ---- Split ---- */

fr_status split_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = kin(k, 0);
    if (!x) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    if (k->n_out < 1) return fr_node_error(n, FR_ERR_GRAPH, "has no outputs");
    int64_t a;
    int axis;
    FR_TRY(fr_node_attr_int(n, "axis", 0, &a));
    FR_TRY(fr_norm_axis(n, a, x->rank, &axis));
    /* explicit sizes: the attribute before opset 13, the (constant) input from 13 */
    int cnt = -1;
    int64_t *split = (int64_t *)fr_calloc((size_t)k->n_out + 1, sizeof(int64_t), "split sizes");
    int64_t *sizes = (int64_t *)fr_calloc((size_t)k->n_out + 1, sizeof(int64_t), "split sizes");
    fr_status st = split && sizes ? FR_OK : FR_ERR_OOM;
    if (st == FR_OK && k->opset < 13) {
        const int64_t *v;
        st = fr_node_attr_ints(n, "split", &cnt, &v);
        if (st == FR_OK && cnt > k->n_out)
            st = fr_node_error(n, FR_ERR_SHAPE, "split has %d entries for %d outputs", cnt, k->n_out);
        if (st == FR_OK && cnt > 0) memcpy(split, v, sizeof(int64_t) * (size_t)cnt);
    } else if (st == FR_OK) {
        st = const_ints(k, 1, "split", k->n_out, &cnt, split);
    }
    if (st == FR_OK) st = fr_split_sizes(n, k->opset, x->dims[axis], cnt, split, k->n_out, sizes);
    int64_t dims[FR_MAX_RANK];
    for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d];
    for (int i = 0; st == FR_OK && i < k->n_out; i++) {
        dims[axis] = sizes[i];
        if (k->out[i]) st = fr_check_out(n, k->out[i], x->dtype, x->rank, dims);
    }
    int64_t es = (int64_t)fr_dtype_size(x->dtype), outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    int64_t pitch = x->dims[axis] * inner * es, at = 0;
    for (int i = 0; st == FR_OK && i < k->n_out; i++) {
        int64_t chunk = sizes[i] * inner * es;
        if (k->out[i])
            st = copy2d(k, (char *)k->out[i]->data, chunk, (const char *)x->data + at, pitch, chunk, outer, (size_t)es);
        at += chunk;
    }
    free(split);
    free(sizes);
    return st;
}

/* ---- Slice ---- */

fr_status slice_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    int cnt[4];
    int64_t vals[4][FR_MAX_RANK];
    if (k->opset < 10) {
        FR_TRY(fr_slice_attr(n, "starts", 1, &cnt[0], vals[0]));
        FR_TRY(fr_slice_attr(n, "ends", 1, &cnt[1], vals[1]));
        FR_TRY(fr_slice_attr(n, "axes", 0, &cnt[2], vals[2]));
        cnt[3] = -1;
    } else {
        static const char *names[4] = {"starts", "ends", "axes", "steps"};
        for (int i = 0; i < 4; i++) {
            FR_TRY(const_ints(k, i + 1, names[i], FR_MAX_RANK, &cnt[i], vals[i]));
            if (i < 2 && cnt[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input '%s' is missing", names[i]);
        }
    }
    fr_slice_plan p;
    FR_TRY(
        fr_slice_resolve(n, x->rank, x->dims, cnt[0], vals[0], cnt[1], vals[1], cnt[2], vals[2], cnt[3], vals[3], &p));
    FR_TRY(fr_check_out(n, y, x->dtype, x->rank, p.len));
    view v;
    fr_view_slice(&v, x->rank, x->dims, p.start, p.step, p.len);
    return view_copy(k, y->data, x->data, v, fr_dtype_size(x->dtype), 0);
}

/* ---- Trilu ---- */

/* k as int64, from any integer dtype (fr_tensor_get_i64's conversions). */
__device__ int64_t read_k(const void *p, int dt)
{
    switch (dt) {
    case FR_I64: return *(const int64_t *)p;
    case FR_I32: return *(const int32_t *)p;
    case FR_U32: return *(const uint32_t *)p;
    case FR_I16: return *(const int16_t *)p;
    case FR_U16: return *(const uint16_t *)p;
    case FR_I8: return *(const int8_t *)p;
    case FR_U8: return *(const uint8_t *)p;
    case FR_U64: return (int64_t) * (const uint64_t *)p;
    default: return 0;
    }
}

template <class T, class IT>
__global__ void trilu_k(T *__restrict__ y, const T *__restrict__ x, IT R, IT C, IT n, const void *kp, int kdt,
                        int upper)
{
    int64_t kv = kp ? read_k(kp, kdt) : 0;
    /* clamp as the CPU does: beyond [-R-1, C+1] a row keeps all or nothing */
    int64_t kc = kv < -(int64_t)R - 1 ? -(int64_t)R - 1 : kv > (int64_t)C + 1 ? (int64_t)C + 1 : kv;
    GRID_STRIDE(IT, i, n)
    {
        IT rc = i / C;
        int64_t j = (int64_t)(i - rc * C), row = (int64_t)(rc % R), t = row + kc;
        bool keep = upper ? j >= t : j <= t;
        y[i] = keep ? x[i] : T{};
    }
}

fr_status trilu_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = kin(k, 0), *kt = kin(k, 1);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    if (x->rank < 2) return fr_node_error(n, FR_ERR_SHAPE, "input must have rank >= 2, got %d", x->rank);
    int64_t upper;
    FR_TRY(fr_node_attr_int(n, "upper", 1, &upper));
    if (kt && (!fr_dtype_is_int(kt->dtype) || fr_tensor_numel(kt) != 1))
        return fr_node_error(n, FR_ERR_SHAPE, "k must be an integer scalar");
    FR_TRY(fr_check_out(n, y, x->dtype, x->rank, x->dims));
    int64_t cnt = fr_tensor_numel(x);
    if (!cnt) return FR_OK;
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    const void *kp = kt ? kt->data : NULL;
    int kdt = kt ? (int)kt->dtype : 0, up = upper != 0;
    unsigned grid = grid_for(k, cnt);
    cudaStream_t st = k->cu->stream;
#define LAUNCH(T)                                                                               \
    do {                                                                                        \
        if (cnt <= INT32_MAX)                                                                   \
            trilu_k<T, uint32_t><<<grid, kThreads, 0, st>>>((T *)y->data, (const T *)x->data, (uint32_t)R, \
                                                            (uint32_t)C, (uint32_t)cnt, kp, kdt, up);      \
        else                                                                                    \
            trilu_k<T, uint64_t><<<grid, kThreads, 0, st>>>((T *)y->data, (const T *)x->data, (uint64_t)R, \
                                                            (uint64_t)C, (uint64_t)cnt, kp, kdt, up);      \
    } while (0)
    BY_UNIT((int)fr_dtype_size(x->dtype), LAUNCH);
#undef LAUNCH
    return fr_cuda_check_launch(n, "trilu_k");
}

/* ---- Tile: output dim k = input dim k * repeats[k]; a repeat walks the input with stride 0 ---- */

fr_status tile_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *x = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!x || !kin(k, 1)) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    if (!y || y->dtype != x->dtype || y->rank != x->rank)
        return fr_node_error(n, FR_ERR_SHAPE, "output is not a tiling of the input (re-run shape inference)");
    int64_t reps[FR_MAX_RANK];
    int cnt;
    FR_TRY(const_ints(k, 1, "repeats", FR_MAX_RANK, &cnt, reps));
    int64_t dims[FR_MAX_RANK];
    FR_TRY(fr_tile_dims(n, x->rank, x->dims, cnt, reps, dims));
    FR_TRY(fr_check_out(n, y, x->dtype, x->rank, dims));
    view v;
    fr_view_tile(&v, x->rank, x->dims, reps);
    return view_copy(k, y->data, x->data, v, fr_dtype_size(x->dtype), 0);
}

/* ---- SliceGrad / TileGrad (ai.fp8run; float32 / float64 dy) ---- */

fr_status slice_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *dy = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!dy) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    int rank;
    const int64_t *shape, *starts, *steps;
    FR_TRY(fr_slice_grad_check(n, dy->dtype, dy->rank, dy->dims, &rank, &shape, &starts, &steps));
    FR_TRY(fr_check_out(n, y, dy->dtype, rank, shape));
    if (y->nbytes) NODE_CUDA_TRY(n, cudaMemsetAsync(y->data, 0, y->nbytes, k->cu->stream));
    if (!fr_tensor_numel(dy)) return FR_OK;
    view v; /* the slice's view, the output being the strided side */
    fr_view_slice(&v, rank, shape, starts, steps, dy->dims);
    return view_copy(k, y->data, dy->data, v, fr_dtype_size(dy->dtype), 1);
}

/* TileGrad: y[m] = sum over tiles q (in dy's order) of dy[q * shape + m], in double from +0.0
 * like the CPU. With few outputs and many tiles the tiles are cut into S chunks summed into a
 * double scratch row each, then the chunks in order (deterministic, within rounding of the
 * CPU's single running sum). */
struct tg_geom {
    int rank;
    int64_t shape[FR_MAX_RANK], reps[FR_MAX_RANK], dyst[FR_MAX_RANK], tst[FR_MAX_RANK];
    int64_t ny, ntiles, chunk, parts;
};

fr_status tile_grad_plan(const fr_node *n, fr_dtype dt, int dy_rank, const int64_t *dy_dims, tg_geom *g)
{
    memset(g, 0, sizeof *g);
    const int64_t *shape;
    FR_TRY(fr_tile_grad_check(n, dt, dy_rank, dy_dims, &g->rank, &shape));
    fr_contig_strides(g->rank, dy_dims, g->dyst);
    g->ny = 1;
    g->ntiles = 1;
    for (int i = 0; i < g->rank; i++) {
        g->shape[i] = shape[i];
        g->reps[i] = shape[i] ? dy_dims[i] / shape[i] : 0;
        g->tst[i] = shape[i] * g->dyst[i];
        g->ny *= shape[i];
        g->ntiles *= g->reps[i];
    }
    g->parts = 1;
    g->chunk = g->ntiles;
    if (g->ny > 0 && g->ny < (1 << 16) && g->ntiles > 64) {
        int64_t want = ((int64_t)1 << 18) / g->ny; /* about 256K threads in all */
        if (want > g->ntiles / 16) want = g->ntiles / 16; /* at least 16 tiles per chunk */
        if (want > 1) {
            g->chunk = (g->ntiles + want - 1) / want;
            g->parts = (g->ntiles + g->chunk - 1) / g->chunk;
        }
    }
    return FR_OK;
}

fr_status tile_grad_scratch(const fr_graph *gr, const fr_node *n, size_t *bytes)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    const fr_value *dy = &gr->values[n->inputs[0]];
    tg_geom g;
    FR_TRY(tile_grad_plan(n, dy->dtype, dy->rank, dy->dims, &g));
    *bytes = g.parts > 1 ? (size_t)(g.parts * g.ny) * sizeof(double) : 0;
    return FR_OK;
}

template <class T>
__global__ void tile_grad_k(T *__restrict__ y, double *__restrict__ part, const T *__restrict__ dy, tg_geom g)
{
    int64_t total = g.ny * g.parts;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = t / g.ny, e = t - s * g.ny;
        int64_t rem = e, base = 0;
        for (int k = g.rank - 1; k >= 0; k--) {
            int64_t c = rem % g.shape[k];
            rem /= g.shape[k];
            base += c * g.dyst[k];
        }
        int64_t q0 = s * g.chunk, q1 = q0 + g.chunk < g.ntiles ? q0 + g.chunk : g.ntiles;
        int64_t qc[FR_MAX_RANK], off = 0;
        rem = q0;
        for (int k = g.rank - 1; k >= 0; k--) {
            qc[k] = rem % g.reps[k];
            rem /= g.reps[k];
            off += qc[k] * g.tst[k];
        }
        double acc = 0.0;
        for (int64_t q = q0; q < q1; q++) {
            acc += (double)dy[base + off];
            for (int k = g.rank - 1; k >= 0; k--) { /* next tile, in dy's order */
                off += g.tst[k];
                if (++qc[k] < g.reps[k]) break;
                off -= g.tst[k] * g.reps[k];
                qc[k] = 0;
            }
        }
        if (g.parts == 1)
            y[e] = (T)acc;
        else
            part[s * g.ny + e] = acc;
    }
}

template <class T>
__global__ void tile_grad_sum_k(T *__restrict__ y, const double *__restrict__ part, int64_t ny, int64_t parts)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < ny; e += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int64_t s = 0; s < parts; s++) acc += part[s * ny + e];
        y[e] = (T)acc;
    }
}

template <class T>
fr_status tile_grad_launch(const fr_cuda_kctx *k, fr_tensor *y, const fr_tensor *dy, const tg_geom &g)
{
    double *part = (double *)k->scratch;
    cudaStream_t st = k->cu->stream;
    tile_grad_k<T><<<grid_for(k, g.ny * g.parts), kThreads, 0, st>>>((T *)y->data, part, (const T *)dy->data, g);
    FR_TRY(fr_cuda_check_launch(k->node, "tile_grad_k"));
    if (g.parts == 1) return FR_OK;
    tile_grad_sum_k<T><<<grid_for(k, g.ny), kThreads, 0, st>>>((T *)y->data, part, g.ny, g.parts);
    return fr_cuda_check_launch(k->node, "tile_grad_sum_k");
}

fr_status tile_grad_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const fr_tensor *dy = kin(k, 0);
    fr_tensor *y = k->n_out > 0 ? k->out[0] : NULL;
    if (!dy) return fr_node_error(n, FR_ERR_GRAPH, "input missing");
    tg_geom g;
    FR_TRY(tile_grad_plan(n, dy->dtype, dy->rank, dy->dims, &g));
    FR_TRY(fr_check_out(n, y, dy->dtype, g.rank, g.shape));
    if (!g.ny) return FR_OK;
    if (!g.ntiles) { /* no tile: zeros (dy is empty) */
        NODE_CUDA_TRY(n, cudaMemsetAsync(y->data, 0, y->nbytes, k->cu->stream));
        return FR_OK;
    }
    if (g.parts > 1 && (!k->scratch || k->scratch_bytes < (size_t)(g.parts * g.ny) * sizeof(double)))
        return fr_node_error(n, FR_ERR_INTERNAL, "TileGrad scratch is missing or too small");
    return dy->dtype == FR_F64 ? tile_grad_launch<double>(k, y, dy, g) : tile_grad_launch<float>(k, y, dy, g);
}

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_layout[] = {
    {"Transpose", FR_DOMAIN_ONNX, transpose_run, NULL},
    {"Concat", FR_DOMAIN_ONNX, concat_run, NULL},
    {"Split", FR_DOMAIN_ONNX, split_run, NULL},
    {"Slice", FR_DOMAIN_ONNX, slice_run, NULL},
    {"Trilu", FR_DOMAIN_ONNX, trilu_run, NULL},
    {"Tile", FR_DOMAIN_ONNX, tile_run, NULL},
    {"SliceGrad", FR_DOMAIN_FP8RUN, slice_grad_run, NULL},
    {"TileGrad", FR_DOMAIN_FP8RUN, tile_grad_run, tile_grad_scratch},
    {NULL, NULL, NULL, NULL},
};
