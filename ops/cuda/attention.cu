/* CUDA kernels of the fused attention op (ops/attention.h): Attention (O, LSE) and
 * AttentionGrad (dQ, dK, dV), flash style: no [T, T] matrix is ever stored.
 *
 * Four kernel families, chosen per node, each in its own file (what they share is in
 * attention_flash.cuh); this file holds the checks, the plan, the scratch and the dispatch:
 *  - tensor cores (attention_tc.cu, attention_tc_bwd.cu): precision bf16, D and Dv multiples
 *    of 8 up to 256, 16-byte aligned operands, every mask kind (causal, sliding window,
 *    softcap, segment ids Sk/Sq, an additive mask input); mma.sync m16n8k16 bf16 with float32
 *    accumulation on bf16 copies of the operands, FlashAttention-2 style.
 *  - float32 tiled (attention_f32.cu): precision fp32, D == Dv in {64, 128}, 16-byte aligned;
 *    SIMT float32, no TF32, 64 x 64 register-tiled blocks; causal only.
 *  - generic (attention_generic.cu): float32 precision with other head dims up to 256, or the
 *    cases above that miss a condition; SIMT float32, 32 x 32 tiles, exact float32 math (bf16
 *    precision rounds the operands, P and dS as the spec says); causal only.
 *  - masked (attention_masked.cu): the exact float32 path for every other mask kind (window,
 *    softcap, segment ids, mask input), and for bf16 precision where the tensor cores do not
 *    apply; simple rather than fast.
 * Backward (all): Delta_i = dO_i . O_i (double sum, float32 result, in scratch); one
 * kernel per (64-key block, K/V batch index) walks every query tile of every Q batch index
 * that reads this K/V (the GQA group, in increasing order) and keeps dK, dV in registers; one
 * kernel per (query block, Q batch index) walks the key tiles for dQ. No atomics: the results
 * are bit-identical run to run (so --deterministic needs nothing more here). Tiles outside
 * the causal / window / segment bounds are skipped, only tiles crossing one are masked element
 * by element. float64 is CPU-only (FR_ERR_UNSUPPORTED). cuDNN's path (--attention cudnn|auto)
 * runs first where it takes the node; it is not asked for softcap or segment ids. */
#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_flash.cuh"
#include "ops/cuda/attention_masked.cuh"
#include "ops/cuda/cuda_util.cuh"

namespace fr_attn {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* Delta_r = sum_d dO[r, d] O[r, d] (summed in double, lanes then a fixed tree); one warp per
 * row. dO16 (optional): dO rounded to bf16 for the tensor-core kernels. */
__global__ void __launch_bounds__(256) delta_kernel(const float *__restrict__ O, const float *__restrict__ dO,
                                                    float *__restrict__ delta, bf16 *__restrict__ dO16, int64_t rows,
                                                    int Dv)
{
    const int lane = threadIdx.x & 31;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
         r += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const float *o = O + r * Dv, *d = dO + r * Dv;
        double acc = 0.0;
        for (int i = lane; i < Dv; i += 32) {
            const float g = d[i];
            acc += (double)g * (double)o[i];
            if (dO16) dO16[r * Dv + i] = __float2bfloat16_rn(g);
        }
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, s);
        if (lane == 0) delta[r] = (float)acc;
    }
}

/* ---------------------------------------------------------------- host side ---- */

struct Plan {
    fr_attn_attrs a;
    fr_attn_geom geo;
    Prob p;
    bool tc;  /* tensor-core path (static conditions; alignment is checked at run time) */
    bool f32; /* register-tiled float32 path (likewise) */
    int64_t od[FR_MAX_RANK]; /* the shape of O (and dO): Q's with the last dim Dv */
};

fr_status make_plan(const fr_node *n, int rq, const int64_t *dq, int rk, const int64_t *dk, int rv, const int64_t *dv,
                    Plan *pl)
{
    FR_TRY(fr_attn_read_attrs(n, rq >= 1 ? dq[rq - 1] : 0, &pl->a));
    FR_TRY(fr_attn_geometry(n, rq, dq, rk, dk, rv, dv, pl->a.causal, &pl->geo));
    const fr_attn_geom &g = pl->geo;
    if (g.Tq > INT_MAX / 2 || g.Tk > INT_MAX / 2 || g.D > INT_MAX || g.Dv > INT_MAX)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "sequence lengths %lld, %lld are too long for the CUDA kernels",
                             (long long)g.Tq, (long long)g.Tk);
    Prob &p = pl->p;
    memset(&p, 0, sizeof p);
    p.batch = g.batch;
    p.kv_batch = g.kv_batch;
    p.Tq = (int)g.Tq;
    p.Tk = (int)g.Tk;
    p.D = (int)g.D;
    p.Dv = (int)g.Dv;
    p.scale = pl->a.scale;
    p.causal = pl->a.causal;
    p.bf16 = pl->a.bf16;
    p.map.brank = g.brank;
    for (int k = 0; k < g.brank; k++) {
        p.map.qdims[k] = g.qdims[k];
        p.map.kv_stride[k] = g.kv_stride[k];
    }
    p.map.group = fr_attn_kv_group(&g);
    pl->tc = pl->a.bf16 && tc_takes(g.D, g.Dv);
    pl->f32 = !pl->a.bf16 && g.D == g.Dv && (g.D == 64 || g.D == 128);
    memcpy(pl->od, dq, sizeof(int64_t) * (size_t)rq);
    pl->od[rq - 1] = g.Dv;
    return FR_OK;
}

/* The masks of a node beyond causal for the tensor-core kernels: window, softcap, the segment
 * ids sk, sq and the additive mask m (NULL: absent), their shapes checked against the plan. */
fr_status masks_of(const fr_node *n, const Plan &pl, const fr_tensor *m, const fr_tensor *sk, const fr_tensor *sq,
                   Masks *mk)
{
    memset(mk, 0, sizeof *mk);
    mk->window = pl.a.window;
    mk->softcap = pl.a.softcap;
    mk->softcap_inv = pl.a.softcap > 0.f ? 1.f / pl.a.softcap : 0.f;
    fr_attn_seg sg;
    FR_TRY(fr_attn_seg_geometry(n, &pl.geo, sk ? sk->dtype : FR_I64, sk ? sk->rank : 0, sk ? sk->dims : NULL,
                                sq ? sq->dtype : FR_I64, sq ? sq->rank : 0, sq ? sq->dims : NULL, &sg));
    if (sk && sq && sk->dtype != sq->dtype)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "Sk is %s and Sq %s: the CUDA kernels take one id dtype",
                             fr_dtype_name(sk->dtype), fr_dtype_name(sq->dtype));
    mk->sk = sk ? sk->data : nullptr;
    mk->sq = sq ? sq->data : nullptr;
    mk->seg64 = sk && sk->dtype == FR_I64;
    mk->seg_per_row = sg.per_row;
    mk->seg_ranges = sk && pl.a.seg_form != FR_ATTN_SEG_GENERAL;
    fr_attn_mask mg;
    FR_TRY(fr_attn_mask_geometry(n, &pl.geo, m ? m->rank : 0, m ? m->dims : NULL, &mg));
    mk->m = m ? (const float *)m->data : nullptr;
    mk->mrow = mg.row;
    mk->mcol = mg.col;
    for (int i = 0; i < pl.geo.brank; i++) mk->mstride[i] = mg.bstride[i];
    return FR_OK;
}

/* cuDNN's path when the node allows it (attention_cudnn_node.cu decides: softcap, windows and
 * padded or packed segment ids where this cuDNN takes them): *ran = 1 when it ran the node;
 * --attention cudnn on a node it cannot take is an error naming the node. */
fr_status try_cudnn(const fr_cuda_kctx *k, const Plan &pl, int backward, int has_seg, int *ran)
{
    (void)pl, (void)has_seg;
    return fr_attn_cudnn_run(k, backward, ran);
}

fr_status plan_of_node(const fr_graph *g, const fr_node *n, Plan *pl)
{
    if (n->n_inputs < 3) return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V");
    const fr_value *v[3];
    for (int i = 0; i < 3; i++) {
        if (n->inputs[i] < 0) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
        v[i] = &g->values[n->inputs[i]];
    }
    return make_plan(n, v[0]->rank, v[0]->dims, v[1]->rank, v[1]->dims, v[2]->rank, v[2]->dims, pl);
}
size_t scratch_layout(const Plan &pl, bool grad, void *base, Scratch *s)
{
    const fr_attn_geom &g = pl.geo;
    char *b = (char *)base;
    size_t off = 0;
    auto take = [&](size_t bytes) {
        char *ptr = b ? b + off : nullptr;
        off += align_up(bytes);
        return ptr;
    };
    Scratch t = {};
    if (grad) t.delta = (float *)take((size_t)(g.batch * g.Tq) * sizeof(float));
    if (pl.tc) {
        if (grad) {
            t.q16 = (bf16 *)take((size_t)(g.batch * g.Tq * g.D) * sizeof(bf16));
            t.do16 = (bf16 *)take((size_t)(g.batch * g.Tq * g.Dv) * sizeof(bf16));
        }
        t.k16 = (bf16 *)take((size_t)(g.kv_batch * g.Tk * g.D) * sizeof(bf16));
        t.v16 = (bf16 *)take((size_t)(g.kv_batch * g.Tk * g.Dv) * sizeof(bf16));
    }
    if (s) *s = t;
    return off;
}

fr_status attn_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    Plan pl;
    FR_TRY(plan_of_node(g, n, &pl));
    *bytes = scratch_layout(pl, strcmp(n->op_type, "AttentionGrad") == 0, nullptr, nullptr);
    return FR_OK;
}

/* With --attention cudnn|auto: room for whichever of cuDNN's path and these kernels runs. */
fr_status attn_scratch_env(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes)
{
    FR_TRY(attn_scratch(g, n, bytes));
    size_t dn = 0;
    FR_TRY(fr_attn_cudnn_scratch(env, g, n, strcmp(n->op_type, "AttentionGrad") == 0, &dn));
    if (dn > *bytes) *bytes = dn;
    return FR_OK;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }
fr_status check_f32(const fr_node *n, const fr_tensor *const *t, int count)
{
    for (int i = 0; i < count; i++) {
        if (t[i]->dtype == FR_F64)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "float64 attention runs on the CPU only (float32 on the GPU)");
        if (t[i]->dtype != FR_F32)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "input %d is %s: the CUDA kernels take float32", i,
                                 fr_dtype_name(t[i]->dtype));
    }
    return FR_OK;
}
/* ---- Attention ---- */
fr_status attn_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 3 || k->n_in > 6 || !k->in[0] || !k->in[1] || !k->in[2] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V (and optionally M, Sk, Sq) and output O");
    const fr_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2], *mask = k->n_in > 3 ? k->in[3] : NULL;
    fr_tensor *o = k->out[0], *lse = k->n_out > 1 ? k->out[1] : NULL;
    const fr_tensor *sk = k->n_in > 4 ? k->in[4] : NULL, *sq = k->n_in > 5 ? k->in[5] : NULL;
    Plan pl;
    FR_TRY(make_plan(n, q->rank, q->dims, kk->rank, kk->dims, v->rank, v->dims, &pl));
    FR_TRY(check_f32(n, k->in, 3));
    if (mask) FR_TRY(check_f32(n, &mask, 1));
    Masks mk;
    FR_TRY(masks_of(n, pl, mask, sk, sq, &mk));
    const Prob &p = pl.p;
    FR_TRY(fr_check_out(n, o, FR_F32, q->rank, pl.od));
    if (lse) FR_TRY(fr_check_out(n, lse, FR_F32, q->rank - 1, q->dims));
    if (p.batch == 0 || p.Tq == 0 || p.Dv == 0) return FR_OK;
    if (p.Tk == 0 || p.D == 0)
        return fr_node_error(n, FR_ERR_SHAPE, "Tk and D must be >= 1 (a row with no key has no softmax)");
    int ran = 0; /* cuDNN's flash attention when --attention asks for it and takes the node */
    FR_TRY(try_cudnn(k, pl, 0, sk != NULL, &ran));
    if (ran) return FR_OK;
    const float *Q = (const float *)q->data, *K = (const float *)kk->data, *V = (const float *)v->data;
    float *O = (float *)o->data, *L = lse ? (float *)lse->data : nullptr;
    if (pl.tc && aligned16(Q) && aligned16(K) && aligned16(V) && aligned16(O)) { /* O: float2 stores */
        Scratch s;
        const size_t need = scratch_layout(pl, false, k->scratch, &s);
        if (!k->scratch || k->scratch_bytes < need)
            return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
        FR_TRY(tc_to_bf16(k, K, s.k16, p.kv_batch * p.Tk * p.D));
        FR_TRY(tc_to_bf16(k, V, s.v16, p.kv_batch * p.Tk * p.Dv));
        return tc_fwd(k, p, mk, Q, s.k16, s.v16, O, L);
    }
    if (mask || sk || pl.a.window > 0 || pl.a.softcap > 0.f) /* the float32 flash kernels know only causal */
        return fr_attn_masked_fwd(k, &pl.a, &pl.geo, Q, K, V, mask, sk, sq, O, L);
    if (pl.f32 && aligned16(Q) && aligned16(K) && aligned16(V) && aligned16(O))
        return f32_fwd(k, p, Q, K, V, O, L);
    return generic_fwd(k, p, Q, K, V, O, L);
}

/* ---- AttentionGrad ---- */
fr_status attng_cuda(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    if (k->n_in < 6 || k->n_in > 9 || k->n_out != 3)
        return fr_node_error(n, FR_ERR_GRAPH, "needs inputs Q, K, V, O, LSE, dO (and M, Sk, Sq) and outputs dQ, dK, dV");
    for (int i = 0; i < 6; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    const fr_tensor *mask = k->n_in > 6 ? k->in[6] : NULL;
    const fr_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2];
    fr_tensor *dq = k->out[0], *dk = k->out[1], *dv = k->out[2];
    const fr_tensor *sk = k->n_in > 7 ? k->in[7] : NULL, *sq = k->n_in > 8 ? k->in[8] : NULL;
    Plan pl;
    FR_TRY(make_plan(n, q->rank, q->dims, kk->rank, kk->dims, v->rank, v->dims, &pl));
    FR_TRY(check_f32(n, k->in, 6));
    if (mask) FR_TRY(check_f32(n, &mask, 1));
    Masks mk;
    FR_TRY(masks_of(n, pl, mask, sk, sq, &mk));
    const Prob &p = pl.p;
    FR_TRY(fr_check_out(n, k->in[3], FR_F32, q->rank, pl.od));
    FR_TRY(fr_check_out(n, k->in[5], FR_F32, q->rank, pl.od));
    FR_TRY(fr_check_out(n, k->in[4], FR_F32, q->rank - 1, q->dims));
    if (dq) FR_TRY(fr_check_out(n, dq, FR_F32, q->rank, q->dims));
    if (dk) FR_TRY(fr_check_out(n, dk, FR_F32, kk->rank, kk->dims));
    if (dv) FR_TRY(fr_check_out(n, dv, FR_F32, v->rank, v->dims));
    if (!dq && !dk && !dv) return FR_OK;
    cudaStream_t st = k->cu->stream;
    if (p.batch == 0 || p.Tq == 0 || p.Tk == 0) { /* no term: zero gradients, as on the CPU */
        fr_tensor *outs[3] = {dq, dk, dv};
        for (int i = 0; i < 3; i++)
            if (outs[i] && outs[i]->nbytes) FR_CUDA_TRY(cudaMemsetAsync(outs[i]->data, 0, outs[i]->nbytes, st));
        return FR_OK;
    }
    if (p.D == 0 || p.Dv == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "head dims D = %d, Dv = %d: the CUDA kernels need both >= 1", p.D,
                             p.Dv);
    int ran = 0; /* cuDNN's flash attention when --attention asks for it and takes the node */
    FR_TRY(try_cudnn(k, pl, 1, sk != NULL, &ran));
    if (ran) return FR_OK;
    const float *in[6];
    for (int i = 0; i < 6; i++) in[i] = (const float *)k->in[i]->data;
    bool tc = pl.tc;
    for (int i = 0; i < 6; i++) tc = tc && aligned16(in[i]);
    const fr_tensor *grads[3] = {dq, dk, dv}; /* written with float2 stores */
    for (int i = 0; i < 3; i++) tc = tc && (!grads[i] || aligned16(grads[i]->data));
    if (!tc) pl.tc = false; /* the generic path needs Delta only (the scratch may be larger) */
    Scratch s;
    const size_t need = scratch_layout(pl, true, k->scratch, &s);
    if (!k->scratch || k->scratch_bytes < need)
        return fr_node_error(n, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
    float *dQ = dq ? (float *)dq->data : nullptr, *dK = dk ? (float *)dk->data : nullptr,
          *dV = dv ? (float *)dv->data : nullptr;
    if (!tc && (mask || sk || pl.a.window > 0 || pl.a.softcap > 0.f)) /* the exact float32 kernels */
        return fr_attn_masked_bwd(k, &pl.a, &pl.geo, in, mask, sk, sq, s.delta, dQ, dK, dV);
    const int64_t rows = p.batch * p.Tq;
    const int64_t dblocks = (rows + 7) / 8;
    delta_kernel<<<grid_of(dblocks > 65536 ? 65536 : dblocks), 256, 0, st>>>(in[3], in[5], s.delta,
                                                                              tc ? s.do16 : nullptr, rows, p.Dv);
    FR_TRY(fr_cuda_check_launch(n, "AttentionGrad(Delta)"));
    if (tc) {
        FR_TRY(tc_to_bf16(k, in[0], s.q16, rows * p.D));
        FR_TRY(tc_to_bf16(k, in[1], s.k16, p.kv_batch * p.Tk * p.D));
        FR_TRY(tc_to_bf16(k, in[2], s.v16, p.kv_batch * p.Tk * p.Dv));
        return tc_bwd(k, p, mk, s, dQ, dK, dV, in[4]);
    }
    bool f32 = pl.f32;
    for (int i = 0; i < 6; i++) f32 = f32 && aligned16(in[i]);
    f32 = f32 && aligned16(dQ) && aligned16(dK) && aligned16(dV); /* (null is aligned) */
    if (f32) return f32_bwd(k, p, in, s.delta, dQ, dK, dV);
    return generic_bwd(k, p, in, s.delta, dQ, dK, dV);
}

} /* namespace */
} /* namespace fr_attn */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_attention[] = {
    {"Attention", FR_DOMAIN_FP8RUN, fr_attn::attn_cuda, fr_attn::attn_scratch, NULL, fr_attn::attn_scratch_env},
    {"AttentionGrad", FR_DOMAIN_FP8RUN, fr_attn::attng_cuda, fr_attn::attn_scratch, NULL, fr_attn::attn_scratch_env},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};
