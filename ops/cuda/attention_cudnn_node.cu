/* The fused Attention / AttentionGrad nodes on cuDNN (attention_cudnn.h): which nodes it takes,
 * their scratch, and the float32 <-> bf16 conversions around cuDNN's bf16 I/O.
 *
 * A node goes to cuDNN when --attention is cudnn or auto and: precision bf16 (cuDNN computes in
 * bf16 with float32 accumulation, as the op's bf16 contract says; fp32 precision stays exact on
 * fp8run's kernels), no additive mask input M, segment ids (Sk, Sq) only with seg_form padded,
 * K/V batch dims that map onto cuDNN's (batch, query heads, K/V heads) with query head h
 * reading K/V head h / group (MHA, GQA and MQA as the Llama graphs have them), and what this
 * cuDNN takes (fr_cudnn_sdpa_supported: head dims, causal, sliding window, softcap). Under auto
 * any other node runs fp8run's kernels (the context notes why); under cudnn it is an error
 * naming the node.
 *
 * Key padding (seg_form padded, the promise that each row of Sk is 1..1 0..0, checked by the
 * CPU reference): a small kernel counts each row's ones into cuDNN's per-batch lengths on the
 * stream (no host sync). Sq absent: every query sees the real keys (HF's attention_mask rule;
 * exact). Sq = Sk (padded sequences): queries past the length are padding, which cuDNN skips:
 * their O, LSE and gradients are 0 where the contract would let them attend to the padding
 * keys - outputs no loss reads (a padding row's result reaches a real row through nothing).
 * Packed sequences (seg_form packed, Sq = Sk) go to cuDNN as variable-length sequences
 * (fr_cudnn_sdpa.ragged, attention_cudnn_ragged.h): each run of equal ids in a window is its
 * own causal sequence, addressed by ragged offsets into token-major bf16 copies ([B, T, heads,
 * D]: the staging transposes), a small kernel turning the ids into offsets and lengths on the
 * stream; cuDNN's token-major Stats are transposed into (and, for the backward, out of) the
 * op's [B, heads, T] LSE. General ids stay on fp8run's kernels (cuDNN's document mask,
 * fr_cudnn_sdpa.segments, computes every tile and was seen wrong in the backward).
 *
 * The op's tensors are float32: Q, K, V (and O, dO in the backward) are rounded to bf16
 * (round-to-nearest-even, as the op's bf16 precision rounds them) into the scratch, and cuDNN's
 * bf16 results (O; dQ, dK, dV) widened back. LSE is cuDNN's Stats itself: float32 [.., Tq], the
 * natural-log log-sum-exp of the scaled scores, the format fp8run's kernels use, so either
 * implementation's forward feeds either backward. */
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_cudnn_ragged.h"
#include "ops/cuda/cuda_util.cuh"
extern "C" {
#include "ops/attention.h"
}

namespace {

typedef __nv_bfloat16 bf16;

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

__global__ void to_bf16_kernel(const float *__restrict__ x, bf16 *__restrict__ y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void to_f32_kernel(const bf16 *__restrict__ x, float *__restrict__ y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __bfloat162float(x[i]);
}

/* [b, h, t, d] (head-major) <-> [b, t, h, d] (token-major), converting the element type:
 * element i of y in y's order. */
template <typename X, typename Y>
__global__ void transpose_kernel(const X *__restrict__ x, Y *__restrict__ y, int64_t b, int64_t h, int64_t t, int64_t d,
                                 int to_token_major)
{
    const int64_t n = b * h * t * d;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = i % d, r = i / d;
        int64_t src;
        if (to_token_major) { /* i = ((bi t + ti) h + hi) d + e */
            const int64_t hi = r % h, bt = r / h, ti = bt % t, bi = bt / t;
            src = ((bi * h + hi) * t + ti) * d + e;
        } else { /* i = ((bi h + hi) t + ti) d + e */
            const int64_t ti = r % t, bh = r / t, hi = bh % h, bi = bh / h;
            src = ((bi * t + ti) * h + hi) * d + e;
        }
        y[i] = (Y)x[src];
    }
}

unsigned blocks_for(int64_t n)
{
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

fr_status to_bf16(const fr_cuda_kctx *k, const float *x, bf16 *y, int64_t n)
{
    if (n == 0) return FR_OK;
    to_bf16_kernel<<<blocks_for(n), 256, 0, k->cu->stream>>>(x, y, n);
    return fr_cuda_check_launch(k->node, "Attention(cuDNN: to bf16)");
}

fr_status to_f32(const fr_cuda_kctx *k, const bf16 *x, float *y, int64_t n)
{
    if (n == 0) return FR_OK;
    to_f32_kernel<<<blocks_for(n), 256, 0, k->cu->stream>>>(x, y, n);
    return fr_cuda_check_launch(k->node, "Attention(cuDNN: to float32)");
}

/* float32 [b, h, t, d] rounded into bf16 [b, t, h, d] (ragged problems read token-major). */
fr_status to_bf16_tokens(const fr_cuda_kctx *k, const float *x, bf16 *y, int64_t b, int64_t h, int64_t t, int64_t d)
{
    const int64_t n = b * h * t * d;
    if (n == 0) return FR_OK;
    transpose_kernel<float, bf16><<<blocks_for(n), 256, 0, k->cu->stream>>>(x, y, b, h, t, d, 1);
    return fr_cuda_check_launch(k->node, "Attention(cuDNN: to bf16, token-major)");
}

/* bf16 [b, t, h, d] widened into float32 [b, h, t, d]. */
fr_status to_f32_heads(const fr_cuda_kctx *k, const bf16 *x, float *y, int64_t b, int64_t h, int64_t t, int64_t d)
{
    const int64_t n = b * h * t * d;
    if (n == 0) return FR_OK;
    transpose_kernel<bf16, float><<<blocks_for(n), 256, 0, k->cu->stream>>>(x, y, b, h, t, d, 0);
    return fr_cuda_check_launch(k->node, "Attention(cuDNN: to float32, head-major)");
}

/* (batch, query heads, K/V heads) of the geometry: query batch index i = b * hq + h reads K/V
 * index b * hk + h / (hq / hk). Tries the heads as Q's batch dims after the first (the usual
 * [B, H] and [B, KV, G] layouts), then all of them; 0 when no split fits (K/V shared across
 * the batch, say). */
int heads_of(const fr_attn_geom *g, int64_t *B, int64_t *Hq, int64_t *Hk)
{
    for (int t = 0; t <= g->brank; t++) {
        const int s = t < g->brank ? t + 1 : 0; /* first head dim: 1 .. brank, then 0 */
        int64_t hq = 1;
        for (int d = s; d < g->brank; d++) hq *= g->qdims[d];
        if (hq < 1 || g->batch % hq) continue;
        const int64_t b = g->batch / hq;
        if (b < 1 || g->kv_batch % b) continue;
        const int64_t hk = g->kv_batch / b;
        if (hk < 1 || hq % hk) continue;
        const int64_t group = hq / hk;
        int match = 1;
        for (int64_t i = 0; match && i < g->batch; i++)
            match = fr_attn_kv_index(g, i) == (i / hq) * hk + (i % hq) / group;
        if (match) {
            *B = b, *Hq = hq, *Hk = hk;
            return 1;
        }
    }
    return 0;
}

/* Shapes (and segment dtypes) of a node's inputs, from the graph (planning) or the tensors. */
struct Ins {
    int rq, rk, rv;
    const int64_t *dq, *dk, *dv;
    int has_mask;
    int rsk, rsq;
    const int64_t *dsk, *dsq; /* NULL: absent */
    fr_dtype tsk, tsq;
};

/* The cuDNN problem of node n: *ok = 1 and p, scale; or *ok = 0 and
 * why ("" for an empty problem, which no kernel runs). A node whose shapes are invalid is an
 * error (the op's own checks). */
fr_status problem_of(const fr_node *n, const Ins &in, int backward, int cc_major, int64_t per_window,
                     fr_cudnn_sdpa *p, float *scale, int *ok, char *why, size_t wn)
{
    *ok = 0;
    fr_attn_attrs a;
    FR_TRY(fr_attn_read_attrs(n, in.rq >= 1 ? in.dq[in.rq - 1] : 0, &a));
    fr_attn_geom g;
    FR_TRY(fr_attn_geometry(n, in.rq, in.dq, in.rk, in.dk, in.rv, in.dv, a.causal, &g));
    fr_attn_seg sg;
    FR_TRY(fr_attn_seg_geometry(n, &g, in.tsk, in.rsk, in.dsk, in.tsq, in.rsq, in.dsq, &sg));
    int64_t B = 0, Hq = 0, Hk = 0;
    if (!a.bf16)
        snprintf(why, wn, "precision fp32 (cuDNN's attention computes in bf16)");
    else if (in.has_mask)
        snprintf(why, wn, "an additive mask input M");
    else if (g.batch < 1 || g.Tq < 1 || g.Tk < 1 || g.D < 1 || g.Dv < 1)
        why[0] = 0;
    else if (!heads_of(&g, &B, &Hq, &Hk))
        snprintf(why, wn, "K/V batch dims that are not heads shared by groups of query heads");
    else {
        memset(p, 0, sizeof *p);
        p->b = B, p->hq = Hq, p->hk = Hk, p->tq = g.Tq, p->tk = g.Tk, p->d = g.D, p->dv = g.Dv;
        const int64_t sq[4] = {Hq * g.Tq * g.D, g.Tq * g.D, g.D, 1}, sk[4] = {Hk * g.Tk * g.D, g.Tk * g.D, g.D, 1};
        const int64_t sv[4] = {Hk * g.Tk * g.Dv, g.Tk * g.Dv, g.Dv, 1};
        const int64_t so[4] = {Hq * g.Tq * g.Dv, g.Tq * g.Dv, g.Dv, 1};
        memcpy(p->sq, sq, sizeof sq), memcpy(p->sk, sk, sizeof sk), memcpy(p->sv, sv, sizeof sv);
        memcpy(p->so, so, sizeof so);
        p->causal = a.causal;
        p->window = a.window;
        p->softcap = a.softcap;
        p->backward = backward;
        *scale = a.scale;
        *ok = !sg.has_k || fr_cudnn_seg_problem(p, a.seg_form, sg.has_q, sg.rows, per_window, why, wn);
        if (*ok && p->ragged) { /* the staging copies are token-major [B, T, heads, D] */
            const int64_t tq[4] = {g.Tq * Hq * g.D, g.D, Hq * g.D, 1}, tk[4] = {g.Tk * Hk * g.D, g.D, Hk * g.D, 1};
            const int64_t tv[4] = {g.Tk * Hk * g.Dv, g.Dv, Hk * g.Dv, 1};
            const int64_t to[4] = {g.Tq * Hq * g.Dv, g.Dv, Hq * g.Dv, 1};
            memcpy(p->sq, tq, sizeof tq), memcpy(p->sk, tk, sizeof tk), memcpy(p->sv, tv, sizeof tv);
            memcpy(p->so, to, sizeof to);
        }
        *ok = *ok && fr_cudnn_sdpa_supported(p, fr_cudnn_version(), cc_major, why, wn);
    }
    return FR_OK;
}

/* Where the node's buffers live in its scratch. */
struct Layout {
    size_t q, k, v, o, dout, dq, dk, dv, stats, segs, ws, ws_bytes, total;
};

Layout layout_of(const fr_cudnn_sdpa &p, size_t ws_bytes)
{
    Layout l = {};
    size_t off = 0;
    auto take = [&](size_t bytes) {
        const size_t at = off;
        off += align_up(bytes);
        return at;
    };
    const int64_t tq = p.ragged ? p.ragged : p.b * p.tq, tk = p.ragged ? p.ragged : p.b * p.tk; /* tokens */
    const size_t nq = (size_t)(tq * p.hq * p.d), nk = (size_t)(tk * p.hk * p.d);
    const size_t nv = (size_t)(tk * p.hk * p.dv), no = (size_t)(tq * p.hq * p.dv);
    l.q = take(nq * 2), l.k = take(nk * 2), l.v = take(nv * 2), l.o = take(no * 2);
    if (p.backward) l.dout = take(no * 2), l.dq = take(nq * 2), l.dk = take(nk * 2), l.dv = take(nv * 2);
    l.stats = take((size_t)(tq * p.hq) * sizeof(float));
    l.segs = take(fr_cudnn_seg_bytes(&p));
    l.ws = take(ws_bytes);
    l.ws_bytes = ws_bytes;
    l.total = off;
    return l;
}

/* A node cuDNN will not run: an error under --attention cudnn; else noted, and fp8run's kernels
 * run it. */
fr_status decline(fr_cuda_ctx *c, int attention, const fr_node *n, const char *why)
{
    if (attention == FR_CUDA_ATTN_CUDNN)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "--attention cudnn: cuDNN cannot run this node: %s", why);
    if (c) {
        char note[320];
        snprintf(note, sizeof note, "node '%s' (%s): %s", n->name, n->op_type, why);
        fr_cuda_attention_note(c, note);
    }
    return FR_OK;
}

/* What a refused fr_cudnn_sdpa_prepare said (its message), for the note. */
const char *refusal_text(char *buf, size_t n)
{
    snprintf(buf, n, "%s", fr_last_error());
    fr_clear_error();
    return buf;
}

fr_status run_named(fr_cuda_ctx *c, const fr_cudnn_sdpa *p, const fr_cudnn_sdpa_io *io, const fr_node *n)
{
    const fr_status st = fr_cudnn_sdpa_run(c, p, io);
    return st == FR_OK ? FR_OK : fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
}

/* seq_kv[b] = the keys of batch b's segment row that are not padding (id != 0: seg_form padded
 * promises 1..1 0..0); seq_q[b] the same with Sq (equal to Sk, promised), else Tq (HF's rule:
 * every query sees the real keys). One block per batch, on the stream: no host sync, so a CUDA
 * graph can capture it. */
template <typename T>
__global__ void seq_lengths_kernel(const T *__restrict__ sk, int64_t tk, int64_t hq, int64_t per_row, int has_q,
                                   int32_t tq, int32_t *__restrict__ seq_q, int32_t *__restrict__ seq_kv)
{
    __shared__ int warp_sum[32];
    const int64_t b = blockIdx.x, row = b * hq / per_row;
    int count = 0;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) count += sk[row * tk + j] != 0;
    for (int o = 16; o > 0; o >>= 1) count += __shfl_down_sync(0xffffffffu, count, o);
    if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) total += warp_sum[w];
        seq_kv[b] = total;
        seq_q[b] = has_q ? total : tq;
    }
}

/* seg_q[b, i] = Sq[row, i], seg_kv[b, j] = Sk[row, j] (row = b * hq / per_row) as int32: the
 * document mask's ids per cuDNN batch. */
template <typename T>
__global__ void seg_ids_kernel(const T *__restrict__ sk, const T *__restrict__ sq, int64_t tk, int64_t tq, int64_t hq,
                               int64_t per_row, int32_t *__restrict__ seg_q, int32_t *__restrict__ seg_kv)
{
    const int64_t b = blockIdx.x, row = b * hq / per_row;
    for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) seg_kv[b * tk + j] = (int32_t)sk[row * tk + j];
    for (int64_t i = threadIdx.x; i < tq; i += blockDim.x) seg_q[b * tq + i] = (int32_t)sq[row * tq + i];
}

/* Where the ragged kernel writes: the sequences' first tokens (scratch), their lengths, and the
 * element offsets of each tensor (a token's offset is its index times the tensor's token
 * stride; NULL: not needed). */
struct RaggedOut {
    int32_t *start, *seq_q, *seq_kv;
    int64_t *off[6];
    int64_t stride[6];
};

constexpr int kRaggedThreads = 1024;

/* Packed ids into cuDNN's variable-length sequences (attention_cudnn_ragged.h; the host
 * reference fr_cudnn_ragged_reference is the same rule): one block over the whole batch, each
 * thread a contiguous chunk of tokens; a block-wide scan of the chunks' run starts numbers the
 * sequences in token order. More sequences than slots: the device error word (the node, the
 * count, the bound), and only the first slots are written. No host sync. */
template <typename T>
__global__ void ragged_kernel(const T *__restrict__ sk, int64_t windows, int64_t tlen, int64_t hq, int64_t per_row,
                              int64_t slots, RaggedOut o, int *err, int node)
{
    __shared__ long long part[kRaggedThreads];
    const int64_t n = windows * tlen, chunk = (n + blockDim.x - 1) / blockDim.x;
    const int64_t lo = threadIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    auto first = [&](int64_t i) {
        const int64_t r = i / tlen, j = i % tlen, row = r * hq / per_row;
        return j == 0 || sk[row * tlen + j] != sk[row * tlen + j - 1];
    };
    long long c = 0;
    for (int64_t i = lo; i < hi; i++) c += first(i);
    part[threadIdx.x] = c;
    __syncthreads();
    for (unsigned step = 1; step < blockDim.x; step <<= 1) { /* inclusive scan (Hillis-Steele) */
        const long long add = threadIdx.x >= step ? part[threadIdx.x - step] : 0;
        __syncthreads();
        part[threadIdx.x] += add;
        __syncthreads();
    }
    const long long total = part[blockDim.x - 1];
    long long k = part[threadIdx.x] - c;
    for (int64_t i = lo; i < hi; i++)
        if (first(i)) {
            if (k < slots) o.start[k] = (int32_t)i;
            k++;
        }
    __syncthreads(); /* every start written (global memory, one block) */
    if (threadIdx.x == 0 && total > slots) fr_dev_error(err, FR_ERR_UNSUPPORTED, node, total, slots);
    const int64_t used = total < slots ? total : slots;
    for (int64_t q = threadIdx.x; q <= slots; q += blockDim.x) {
        int64_t st = n, len = 0;
        if (q < used) {
            st = o.start[q];
            const int64_t next = q + 1 < used ? o.start[q + 1] : total > used ? st + 1 : n;
            const int64_t end = (st / tlen + 1) * tlen;
            len = (next < end ? next : end) - st;
        }
        if (q < slots) o.seq_q[q] = (int32_t)len, o.seq_kv[q] = (int32_t)len;
        for (int t = 0; t < 6; t++)
            if (o.off[t]) o.off[t][q] = st * o.stride[t];
    }
}

/* The ragged problem's scratch: starts [slots + 1] int32, lengths [slots] int32 twice, then the
 * six offset arrays [slots + 1] int64. */
size_t ragged_bytes(int64_t slots)
{
    return align_up((size_t)(slots + 1) * 4) + 2 * align_up((size_t)slots * 4) + 6 * align_up((size_t)(slots + 1) * 8);
}

template <typename T>
void launch_ragged(const fr_cuda_kctx *k, const fr_cudnn_sdpa *p, const fr_cudnn_segs *s, int64_t per_row, void *mem,
                   fr_cudnn_sdpa_io *io)
{
    char *m = (char *)mem;
    const int64_t slots = p->b;
    RaggedOut o;
    memset(&o, 0, sizeof o);
    o.start = (int32_t *)m, m += align_up((size_t)(slots + 1) * 4);
    o.seq_q = (int32_t *)m, m += align_up((size_t)slots * 4);
    o.seq_kv = (int32_t *)m, m += align_up((size_t)slots * 4);
    const int64_t stride[6] = {p->sq[2], p->sk[2], p->sv[2], p->so[2], p->hq, p->hq * p->d};
    for (int t = 0; t < 6; t++) {
        o.off[t] = (int64_t *)m, m += align_up((size_t)(slots + 1) * 8);
        o.stride[t] = stride[t];
    }
    ragged_kernel<T><<<1, kRaggedThreads, 0, k->cu->stream>>>((const T *)s->sk->data, p->ragged / p->tq, p->tq, p->hq,
                                                             per_row, slots, o, k->cu->dev_error, fr_node_index(k));
    io->seq_q = o.seq_q, io->seq_kv = o.seq_kv;
    io->off_q = o.off[0], io->off_k = o.off[1], io->off_v = o.off[2], io->off_o = o.off[3];
    io->off_stats = o.off[4], io->off_acc = o.off[5];
}

template <typename T>
void launch_segs(const fr_cudnn_sdpa *p, const fr_cudnn_segs *s, int64_t per_row, cudaStream_t st, int32_t *a,
                 int32_t *b)
{
    const unsigned grid = (unsigned)p->b;
    if (p->padded)
        seq_lengths_kernel<T><<<grid, 256, 0, st>>>((const T *)s->sk->data, p->tk, p->hq, per_row, s->sq != NULL,
                                                    (int32_t)p->tq, a, b);
    else
        seg_ids_kernel<T><<<grid, 256, 0, st>>>((const T *)s->sk->data, (const T *)s->sq->data, p->tk, p->tq, p->hq,
                                                per_row, a, b);
}

} /* namespace */

/* Q batch indices (b * hq + h) per row of Sk with `rows` rows, for b sequences of hq heads: one
 * per problem, per sequence (heads broadcast) or one for all; 0 when none fits. */
static int64_t per_row_of(int64_t b, int64_t hq, int64_t rows)
{
    const int64_t batch = b * hq;
    return rows == batch ? 1 : rows == b ? hq : rows == 1 ? batch : 0;
}

extern "C" int fr_cudnn_seg_problem(fr_cudnn_sdpa *p, int form, int has_q, int64_t rows, int64_t per_window, char *why,
                                    size_t n)
{
    const int64_t per_row = per_row_of(p->b, p->hq, rows);
    if (form == FR_ATTN_SEG_GENERAL)
        return snprintf(why, n, "segment ids with seg_form general (cuDNN takes padded and packed, where no row is "
                                "fully masked)"), 0;
    if (per_row < 1 || per_row % p->hq != 0)
        return snprintf(why, n, "segment ids that differ between the heads of a sequence (cuDNN's are per batch)"), 0;
    /* Packed sequences: each example its own variable-length sequence (fr_cudnn_sdpa.ragged),
     * not cuDNN's document mask (fr_cudnn_sdpa.segments), which is evaluated on every tile (on
     * an H200 with cuDNN 9.14 its forward ran 31 to 78 TFLOP/s of kept pairs) and whose
     * backward was seen wrong. The caller lays the tensors out token-major. */
    if (form == FR_ATTN_SEG_PACKED) {
        if (!has_q)
            return snprintf(why, n, "packed segment ids without Sq (every query is then in example 1; cuDNN takes "
                                    "Sq = Sk)"), 0;
        if (p->tq != p->tk)
            return snprintf(why, n, "packed sequences with Tq != Tk"), 0;
        p->ragged = p->b * p->tq;
        p->b = fr_cudnn_ragged_slots(p->b, p->tq, per_window);
        p->padded = 1;
        return 1;
    }
    p->padded = form == FR_ATTN_SEG_PADDED;
    return 1;
}

extern "C" size_t fr_cudnn_seg_bytes(const fr_cudnn_sdpa *p)
{
    if (p->ragged) return ragged_bytes(p->b);
    if (p->padded) return 2 * align_up((size_t)p->b * sizeof(int32_t));
    if (p->segments) return align_up((size_t)(p->b * p->tq) * sizeof(int32_t)) + align_up((size_t)(p->b * p->tk) * 4);
    return 0;
}

extern "C" fr_status fr_cudnn_stats_transpose(const fr_cuda_kctx *k, const float *x, float *y, int64_t b, int64_t h,
                                              int64_t t, int to_token_major)
{
    const int64_t n = b * h * t;
    if (n == 0) return FR_OK;
    transpose_kernel<float, float><<<blocks_for(n), 256, 0, k->cu->stream>>>(x, y, b, h, t, 1, to_token_major);
    return fr_cuda_check_launch(k->node, to_token_major ? "Attention(cuDNN: LSE to token-major Stats)"
                                                        : "Attention(cuDNN: token-major Stats to LSE)");
}

extern "C" fr_status fr_cudnn_seg_stage(const fr_cuda_kctx *k, const fr_cudnn_sdpa *p, const fr_cudnn_segs *s, void *mem,
                                        fr_cudnn_sdpa_io *io)
{
    if (!p->padded && !p->segments) return FR_OK;
    if (!s->sk || (p->segments && !s->sq))
        return fr_node_error(k->node, FR_ERR_INTERNAL, "cuDNN attention: segment ids missing at run time");
    if (s->sq && s->sq->dtype != s->sk->dtype)
        return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "Sk is %s and Sq %s: cuDNN's path takes one dtype for both",
                             fr_dtype_name(s->sk->dtype), fr_dtype_name(s->sq->dtype));
    /* ragged: per_row counts the Q batch indices of the windows, not of the slots */
    const int64_t seqs = p->ragged ? p->ragged / p->tq : p->b;
    const int64_t per_row = per_row_of(seqs, p->hq, s->sk->rank == 2 ? s->sk->dims[0] : 0);
    if (per_row < 1 || per_row % p->hq || (p->ragged && s->sk->dims[1] != p->tq))
        return fr_node_error(k->node, FR_ERR_INTERNAL, "cuDNN attention: segment ids of another shape at run time");
    if (p->ragged) {
        if (s->sk->dtype == FR_I64) launch_ragged<int64_t>(k, p, s, per_row, mem, io);
        else launch_ragged<int32_t>(k, p, s, per_row, mem, io);
        return fr_cuda_check_launch(k->node, "Attention(cuDNN: sequences of the packed ids)");
    }
    int32_t *a = (int32_t *)mem;
    int32_t *b = (int32_t *)((char *)mem + align_up((size_t)(p->padded ? p->b : p->b * p->tq) * sizeof(int32_t)));
    if (s->sk->dtype == FR_I64) launch_segs<int64_t>(p, s, per_row, k->cu->stream, a, b);
    else launch_segs<int32_t>(p, s, per_row, k->cu->stream, a, b);
    if (p->padded) io->seq_q = a, io->seq_kv = b;
    else io->seg_q = a, io->seg_kv = b;
    return fr_cuda_check_launch(k->node, p->padded ? "Attention(cuDNN: key lengths from Sk)"
                                                   : "Attention(cuDNN: segment ids from Sk, Sq)");
}

extern "C" fr_status fr_attn_cudnn_scratch(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n,
                                           int backward, size_t *bytes)
{
    *bytes = 0;
    if (env->attention == FR_CUDA_ATTN_FP8RUN) return FR_OK;
    const int want = backward ? 6 : 3;
    if (n->n_inputs < want) return fr_node_error(n, FR_ERR_GRAPH, "needs %d inputs", want);
    const fr_value *v[3];
    for (int i = 0; i < 3; i++) {
        if (n->inputs[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
        v[i] = &g->values[n->inputs[i]];
    }
    const int m_in = backward ? 6 : 3; /* M, then Sk, Sq */
    const fr_value *sk = fr_attn_has_input(n, m_in + 1) ? &g->values[n->inputs[m_in + 1]] : NULL;
    const fr_value *sq = fr_attn_has_input(n, m_in + 2) ? &g->values[n->inputs[m_in + 2]] : NULL;
    const Ins in = {v[0]->rank, v[1]->rank, v[2]->rank, v[0]->dims, v[1]->dims, v[2]->dims,
                    fr_attn_has_input(n, m_in), sk ? sk->rank : 0, sq ? sq->rank : 0, sk ? sk->dims : NULL,
                    sq ? sq->dims : NULL, sk ? sk->dtype : FR_I32, sq ? sq->dtype : FR_I32};
    fr_cudnn_sdpa p;
    float scale = 0;
    int ok = 0;
    char why[512];
    FR_TRY(problem_of(n, in, backward, env->cu ? env->cu->cc_major : 0, env->cu ? env->cu->ragged_per_window : 0, &p, &scale, &ok, why, sizeof why));
    const char *lib_why = NULL;
    if (ok && !fr_cudnn(&lib_why)) snprintf(why, sizeof why, "%s", lib_why), ok = 0;
    if (!ok) return why[0] ? decline(env->cu, env->attention, n, why) : FR_OK;
    size_t ws = fr_cudnn_sdpa_aux_bytes(&p); /* without a device: the plan's own workspace is not known */
    if (env->cu) {
        const fr_status st = fr_cudnn_sdpa_prepare(env->cu, &p, &ws);
        if (st == FR_ERR_UNSUPPORTED) return decline(env->cu, env->attention, n, refusal_text(why, sizeof why));
        if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
    }
    *bytes = layout_of(p, ws).total;
    return FR_OK;
}

extern "C" fr_status fr_attn_cudnn_run(const fr_cuda_kctx *k, int backward, int *ran)
{
    *ran = 0;
    fr_cuda_ctx *c = k->cu;
    const fr_node *n = k->node;
    if (c->attention == FR_CUDA_ATTN_FP8RUN) {
        c->attn_runs_own++;
        return FR_OK;
    }
    const fr_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2];
    const int m_in = backward ? 6 : 3; /* M, then Sk, Sq */
    const fr_tensor *mt = k->n_in > m_in ? k->in[m_in] : NULL, *sk = k->n_in > m_in + 1 ? k->in[m_in + 1] : NULL,
                    *sq = k->n_in > m_in + 2 ? k->in[m_in + 2] : NULL;
    const Ins in = {q->rank, kk->rank, v->rank, q->dims, kk->dims, v->dims, mt != NULL, sk ? sk->rank : 0,
                    sq ? sq->rank : 0, sk ? sk->dims : NULL, sq ? sq->dims : NULL, sk ? sk->dtype : FR_I32,
                    sq ? sq->dtype : FR_I32};
    fr_cudnn_sdpa p;
    float scale = 0;
    int ok = 0;
    char why[512];
    FR_TRY(problem_of(n, in, backward, c->cc_major, c->ragged_per_window, &p, &scale, &ok, why, sizeof why));
    size_t ws = 0;
    if (ok) {
        const fr_status st = fr_cudnn_sdpa_prepare(c, &p, &ws);
        if (st == FR_ERR_UNSUPPORTED) refusal_text(why, sizeof why), ok = 0;
        else if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
    }
    const Layout l = ok ? layout_of(p, ws) : Layout{};
    if (ok && (!k->scratch || k->scratch_bytes < l.total))
        snprintf(why, sizeof why, "its scratch (%zu bytes) was planned without cuDNN (%zu needed)", k->scratch_bytes,
                 l.total), ok = 0;
    if (!ok) {
        FR_TRY(decline(c, c->attention, n, why));
        c->attn_runs_own++;
        return FR_OK;
    }
    char *s = (char *)k->scratch;
    bf16 *q16 = (bf16 *)(s + l.q), *k16 = (bf16 *)(s + l.k), *v16 = (bf16 *)(s + l.v), *o16 = (bf16 *)(s + l.o);
    const int64_t W = p.ragged ? p.ragged / p.tq : p.b; /* windows (batch of the op's tensors) */
    const int64_t nq = W * p.hq * p.tq * p.d, nk = W * p.hk * p.tk * p.d, nv = W * p.hk * p.tk * p.dv;
    const int64_t no = W * p.hq * p.tq * p.dv, rows = W * p.hq * p.tq;
    cudaStream_t st = c->stream;
    /* float32 into bf16: as laid out, or (ragged) token-major */
    auto in16 = [&](const float *x, bf16 *y, int64_t h, int64_t t, int64_t d) {
        return p.ragged ? to_bf16_tokens(k, x, y, W, h, t, d) : to_bf16(k, x, y, W * h * t * d);
    };
    auto out32 = [&](const bf16 *x, float *y, int64_t h, int64_t t, int64_t d) {
        return p.ragged ? to_f32_heads(k, x, y, W, h, t, d) : to_f32(k, x, y, W * h * t * d);
    };
    FR_TRY(in16((const float *)q->data, q16, p.hq, p.tq, p.d));
    FR_TRY(in16((const float *)kk->data, k16, p.hk, p.tk, p.d));
    FR_TRY(in16((const float *)v->data, v16, p.hk, p.tk, p.dv));
    fr_cudnn_sdpa_io io;
    memset(&io, 0, sizeof io);
    io.q = q16, io.k = k16, io.v = v16, io.o = o16;
    io.scale = scale;
    io.workspace = s + l.ws;
    io.workspace_bytes = l.ws_bytes;
    const fr_cudnn_segs segs = {sk, sq};
    FR_TRY(fr_cudnn_seg_stage(k, &p, &segs, s + l.segs, &io));
    float *stats = (float *)(s + l.stats);
    if (!backward) {
        fr_tensor *lse = k->n_out > 1 ? k->out[1] : NULL;
        /* else through the scratch (ragged: token-major there, transposed into LSE) */
        const bool direct = lse && ((uintptr_t)lse->data & 15) == 0 && !p.ragged;
        io.stats = direct ? (float *)lse->data : stats;
        if (p.padded && sq && !p.ragged) { /* rows past a length are skipped: 0 there, not stale scratch */
            FR_CUDA_TRY(cudaMemsetAsync(o16, 0, (size_t)no * sizeof(bf16), st));
            FR_CUDA_TRY(cudaMemsetAsync(io.stats, 0, (size_t)rows * sizeof(float), st));
        }
        FR_TRY(run_named(c, &p, &io, n));
        FR_TRY(out32(o16, (float *)k->out[0]->data, p.hq, p.tq, p.dv));
        if (lse && p.ragged)
            FR_TRY(fr_cudnn_stats_transpose(k, stats, (float *)lse->data, W, p.hq, p.tq, 0));
        else if (lse && !direct)
            FR_CUDA_TRY(cudaMemcpyAsync(lse->data, stats, (size_t)rows * sizeof(float), cudaMemcpyDeviceToDevice, st));
    } else {
        bf16 *do16 = (bf16 *)(s + l.dout), *dq16 = (bf16 *)(s + l.dq), *dk16 = (bf16 *)(s + l.dk);
        bf16 *dv16 = (bf16 *)(s + l.dv);
        FR_TRY(in16((const float *)k->in[3]->data, o16, p.hq, p.tq, p.dv));
        FR_TRY(in16((const float *)k->in[5]->data, do16, p.hq, p.tq, p.dv));
        const fr_tensor *lse = k->in[4];
        if (p.ragged) { /* cuDNN reads token-major statistics */
            FR_TRY(fr_cudnn_stats_transpose(k, (const float *)lse->data, stats, W, p.hq, p.tq, 1));
            io.stats = stats;
        } else if (((uintptr_t)lse->data & 15) == 0)
            io.stats = (float *)lse->data; /* read only */
        else {
            FR_CUDA_TRY(cudaMemcpyAsync(stats, lse->data, (size_t)rows * sizeof(float), cudaMemcpyDeviceToDevice, st));
            io.stats = stats;
        }
        io.dout = do16, io.dq = dq16, io.dk = dk16, io.dv = dv16;
        if (p.padded && !p.ragged) { /* keys (and queries) past a length get no gradient: 0, not stale scratch */
            FR_CUDA_TRY(cudaMemsetAsync(dq16, 0, (size_t)nq * sizeof(bf16), st));
            FR_CUDA_TRY(cudaMemsetAsync(dk16, 0, (size_t)nk * sizeof(bf16), st));
            FR_CUDA_TRY(cudaMemsetAsync(dv16, 0, (size_t)nv * sizeof(bf16), st));
        }
        FR_TRY(run_named(c, &p, &io, n));
        if (k->out[0]) FR_TRY(out32(dq16, (float *)k->out[0]->data, p.hq, p.tq, p.d));
        if (k->out[1]) FR_TRY(out32(dk16, (float *)k->out[1]->data, p.hk, p.tk, p.d));
        if (k->out[2]) FR_TRY(out32(dv16, (float *)k->out[2]->data, p.hk, p.tk, p.dv));
    }
    c->attn_runs_cudnn++;
    *ran = 1;
    return FR_OK;
}
