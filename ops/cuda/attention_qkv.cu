/* CUDA kernels of AttentionQKV / AttentionQKVGrad (ops/attention_qkv.h).
 *
 * Two paths, chosen per node as the plain Attention chooses (--attention, attention_cudnn.h):
 *  - cuDNN (precision bf16, cuDNN loads and takes the problem: head dims, masks, softcap,
 *    segment ids as attention_cudnn.h says; packed ids as variable-length sequences addressed
 *    by ragged offsets into the same token-major copy, statistics transposed between cuDNN's
 *    token-major Stats and the op's [B, Hq, T] LSE): one pass rounds the packed X to bf16 in its own layout (X already bf16 when narrowed: a copy then), RoPE applied to the Q and K columns; cuDNN reads Q, K,
 *    V from it by strides ([B, T, heads, D] is its "BSHD" layout) and writes O as
 *    [B, T, Hq, Dv], widened into the output. Backward: X staged the same way, O and dO rounded
 *    to bf16, cuDNN writes dQ, dK, dV into one packed bf16 buffer laid out as X, and one pass
 *    applies RoPE's transpose to the dQ and dK columns while it widens that into dX. Packed
 *    sequences' backward stages Q, K, V (and takes dQ, dK, dV) in three separate token-major
 *    buffers instead: cuDNN's variable-length backward was seen wrong on the interleaved row.
 *  - fp8run's kernels (ops/cuda/attention.cu, through its kernel table): X is unpacked into
 *    float32 [B, heads, T, D] copies (RoPE applied), the Attention / AttentionGrad kernels run on
 *    them (with the node's softcap and segment ids Sk, Sq), and O (or dQ, dK, dV) is packed back.
 * X may be bfloat16 (passes/narrow_activations.h): the staging kernels widen it as they load
 * it (16-byte loads of 8 elements), everything after is the float32 path's; on cuDNN's path
 * the sections that need no RoPE (V; all of X without RoPE) are read from X itself.
 * bfloat16 O (o_dtype), O and dO (backward inputs) and dX (dx_dtype): cuDNN's bf16 O is
 * written into the output and the bf16 O and dO read where they lie (16-byte aligned); cuDNN
 * writes dQ, dK, dV straight into a bf16 dX, RoPE's transpose then applied in place on the Q
 * and K columns only. fp8run's kernels path rounds (or widens) in its existing copies.
 * RoPE here is float32 math (within 1e-6 of the CPU's double). The staging passes run the
 * vectorized kernels of attention_qkv_stage.cuh where the shapes and pointers allow (head dims
 * of the usual sizes), else the one-element-per-thread kernels (both: attention_qkv_staging.cuh;
 * same bits either way). */
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_qkv_norm.cuh"
#include "ops/cuda/attention_qkv_staging.cuh"
#include "ops/cuda/cuda_util.cuh"
extern "C" {
#include "ops/attention.h"
#include "ops/attention_qkv.h"
}

namespace {

typedef __nv_bfloat16 bf16;

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/* Offsets of aligned buffers carved one after another out of one scratch block. */
struct Bump {
    size_t off = 0;
    size_t take(size_t bytes)
    {
        const size_t at = off;
        off += align_up(bytes);
        return at;
    }
};

fr_status node_of_graph(const fr_graph *g, const fr_node *n, int backward, Node *p)
{
    if (n->n_inputs < 1 || n->inputs[0] < 0) return fr_node_error(n, FR_ERR_GRAPH, "needs input X");
    const int ci = backward ? 4 : 1;
    const fr_value *x = &g->values[n->inputs[0]];
    const fr_value *c = n->n_inputs > ci + 1 && n->inputs[ci] >= 0 ? &g->values[n->inputs[ci]] : NULL;
    const fr_value *s = c && n->inputs[ci + 1] >= 0 ? &g->values[n->inputs[ci + 1]] : NULL;
    FR_TRY(node_of(n, x->rank, x->dims, c, s, p));
    const int si = backward ? 6 : 3; /* Sk, Sq after cos, sin */
    p->seg_rows = fr_attn_has_input(n, si) ? g->values[n->inputs[si]].dims[0] : 0;
    p->seg_q = fr_attn_has_input(n, si + 1);
    return qkv_norm::read_graph(g, n, backward, &p->q); /* the q/k norm's weights after them */
}

/* cuDNN's problem: Q, K, V read from the packed bf16 copy of X, O [B, T, Hq, Dv]. */
fr_cudnn_sdpa sdpa_of(const Node &p, int backward)
{
    const fr_attn_qkv_geom &q = p.q;
    fr_cudnn_sdpa s;
    memset(&s, 0, sizeof s);
    s.b = q.B, s.hq = q.Hq, s.hk = q.Hk, s.tq = q.T, s.tk = q.T, s.d = q.D, s.dv = q.Dv;
    const int64_t N = q.Hq * q.Dv;
    /* head to head: q_hs, k_hs, v_hs columns (the packing's); dQ, dK, dV are written so too */
    const int64_t sq[4] = {q.T * q.W, q.q_hs, q.W, 1}, sk[4] = {q.T * q.W, q.k_hs, q.W, 1};
    const int64_t sv[4] = {q.T * q.W, q.v_hs, q.W, 1}, so[4] = {q.T * N, q.Dv, N, 1};
    memcpy(s.sq, sq, sizeof sq), memcpy(s.sk, sk, sizeof sk), memcpy(s.sv, sv, sizeof sv), memcpy(s.so, so, sizeof so);
    s.causal = p.a.causal;
    s.window = p.a.window, s.softcap = p.a.softcap;
    s.backward = backward;
    return s;
}

/* Strides of section sec (0 Q, 1 K, 2 V) in its own token-major buffer [B, T, heads, D], where
 * sections_of places Q, K, V and so dQ, dK, dV for cuDNN's variable-length backward (on the
 * projection's interleaved row it was seen wrong: attention_cudnn_graph.c). O and dO are
 * token-major already. */
void split_strides_of(const fr_attn_qkv_geom &q, int sec, int64_t st[4])
{
    const int64_t heads = sec == 0 ? q.Hq : q.Hk, w = sec == 2 ? q.Dv : q.D;
    st[0] = q.T * heads * w, st[1] = w, st[2] = heads * w, st[3] = 1;
}

void split_strides(const Node &p, fr_cudnn_sdpa &s)
{
    split_strides_of(p.q, 0, s.sq), split_strides_of(p.q, 1, s.sk), split_strides_of(p.q, 2, s.sv);
}

/* Whether cuDNN may run the node (before planning): why not into why; segment ids' form into s. */
int cudnn_eligible(const Node &p, fr_cudnn_sdpa &s, int cc_major, int64_t per_window, char *why, size_t wn)
{
    const char *lib_why = NULL;
    if (!p.a.bf16) return snprintf(why, wn, "precision fp32 (cuDNN's attention computes in bf16)"), 0;
    if (p.seg_rows && !fr_cudnn_seg_problem(&s, p.a.seg_form, p.seg_q, p.seg_rows, per_window, why, wn)) return 0;
    if (s.backward && s.ragged) split_strides(p, s);
    if (!fr_cudnn_sdpa_supported(&s, fr_cudnn_version(), cc_major, why, wn)) return 0;
    if (!fr_cudnn(&lib_why)) return snprintf(why, wn, "%s", lib_why), 0;
    return 1;
}

struct CudnnLayout {
    size_t x16, o16, do16, dx16, stats, segs, ws, ws_bytes, total;
};

CudnnLayout cudnn_layout(const Node &p, const fr_cudnn_sdpa &s, int backward, size_t ws)
{
    CudnnLayout l = {};
    Bump bump;
    auto take = [&](size_t bytes) { return bump.take(bytes); };
    const fr_attn_qkv_geom &q = p.q;
    const size_t split = (size_t)(q.B * q.T * ((q.Hq + q.Hk) * q.D + q.Hk * q.Dv)); /* (s.ragged backward) */
    const size_t nx = backward && s.ragged && split > (size_t)(q.B * q.T * q.W) ? split : (size_t)(q.B * q.T * q.W);
    const size_t no = (size_t)(q.B * q.T * q.Hq * q.Dv);
    l.x16 = take(nx * 2), l.o16 = take(no * 2);
    if (backward) l.do16 = take(no * 2), l.dx16 = take(nx * 2);
    l.stats = take((size_t)(q.B * q.Hq * q.T) * sizeof(float));
    l.segs = take(fr_cudnn_seg_bytes(&s));
    l.ws = take(ws);
    l.ws_bytes = ws;
    l.total = bump.off;
    return l;
}

/* ---- fp8run's kernels on head-major copies ---- */

const fr_cuda_kernel_def *inner_def(int backward)
{
    return fr_cuda_kernel_find(FR_DOMAIN_FP8RUN, backward ? "AttentionGrad" : "Attention");
}

/* Whether the inner AttentionGrad of node p may run on cuDNN: packed sequences, where this op's
 * own cuDNN path declined them (its plan or scratch missing) and the inner node's float32 copies
 * may still take cuDNN's variable-length backward. */
bool inner_cudnn_backward(const Node &p, int backward)
{
    return backward && p.seg_rows && p.seg_q && p.a.seg_form == FR_ATTN_SEG_PACKED;
}

/* The inner node's scratch, from a graph of its shapes (the plain op's own planning): under env
 * (cuDNN's room too) where inner_cudnn_backward, else fp8run's kernels'. og: n's graph (the
 * segment ids' shapes). */
fr_status inner_scratch(const fr_cuda_plan_env *env, const fr_graph *og, const fr_node *n, const Node &p, int backward,
                        size_t *bytes)
{
    const fr_cuda_kernel_def *def = inner_def(backward);
    if (!def) return fr_node_error(n, FR_ERR_INTERNAL, "no CUDA kernel of the fused Attention");
    *bytes = 0;
    const bool dnn = env->attention != FR_CUDA_ATTN_FP8RUN && inner_cudnn_backward(p, backward);
    if (!def->scratch && !dnn) return FR_OK;
    fr_graph *g = NULL;
    FR_TRY(fr_graph_new(&g));
    static const char *const names[6] = {"q", "k", "v", "o", "lse", "do"};
    static const int which[6] = {0, 1, 2, 3, 4, 3};
    int ids[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1}, nid = -1;
    fr_status st = FR_OK;
    int nin = backward ? 6 : 3;
    for (int i = 0; i < nin && st == FR_OK; i++) {
        st = fr_graph_add_value(g, names[i], &ids[i]);
        if (st != FR_OK) break;
        int64_t d[5];
        const int r = fr_attn_qkv_inner_dims(&p.q, which[i], d);
        fr_value_set_shape(&g->values[ids[i]], FR_F32, r, d);
    }
    if (dnn) { /* no mask (input 6); Sk, Sq (7, 8) as n has them (its inputs 6, 7) */
        for (int i = 0; i < 2 && st == FR_OK; i++) {
            const fr_value *sv = &og->values[n->inputs[6 + i]];
            st = fr_graph_add_value(g, i ? "sq" : "sk", &ids[7 + i]);
            if (st == FR_OK) fr_value_set_shape(&g->values[ids[7 + i]], sv->dtype, sv->rank, sv->dims);
        }
        nin = 9;
    }
    if (st == FR_OK) st = fr_graph_add_node(g, backward ? "AttentionGrad" : "Attention", FR_DOMAIN_FP8RUN, n->name, nin,
                                            ids, 0, NULL, &nid);
    if (st == FR_OK) st = fr_node_copy_attrs(&g->nodes[nid], n); /* the inner node plans with n's attributes */
    if (st == FR_OK) st = dnn ? fr_cuda_kernel_scratch(def, env, g, &g->nodes[nid], bytes) : def->scratch(g, &g->nodes[nid], bytes);
    fr_graph_free(g);
    return st;
}

struct OwnLayout {
    size_t q, k, v, o, dout, dq, dk, dv, inner, total;
};

OwnLayout own_layout(const Node &p, int backward, size_t inner)
{
    OwnLayout l = {};
    Bump bump;
    auto take = [&](size_t bytes) { return bump.take(bytes); };
    const fr_attn_qkv_geom &q = p.q;
    const size_t nq = (size_t)(q.B * q.Hq * q.T * q.D) * 4, nk = (size_t)(q.B * q.Hk * q.T * q.D) * 4;
    const size_t nv = (size_t)(q.B * q.Hk * q.T * q.Dv) * 4, no = (size_t)(q.B * q.Hq * q.T * q.Dv) * 4;
    l.q = take(nq), l.k = take(nk), l.v = take(nv), l.o = take(no);
    if (backward) l.dout = take(no), l.dq = take(nq), l.dk = take(nk), l.dv = take(nv);
    l.inner = take(inner);
    l.total = bump.off;
    return l;
}

fr_tensor view_of(const Node &p, int which, void *data)
{
    fr_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = FR_F32;
    t.rank = fr_attn_qkv_inner_dims(&p.q, which, t.dims);
    int64_t n = 1;
    for (int i = 0; i < t.rank; i++) n *= t.dims[i];
    t.nbytes = (size_t)n * sizeof(float);
    t.data = data;
    return t;
}

/* Head-major layouts of the three sections (and of O: section 3). */
Lay head_major(const Node &p, int sec)
{
    const fr_attn_qkv_geom &q = p.q;
    const int64_t heads = sec == 0 || sec == 3 ? q.Hq : q.Hk, w = sec >= 2 ? q.Dv : q.D;
    return Lay{heads * q.T * w, q.T * w, w};
}

/* Packed layouts: the sections of X (Q, K, V), and O (sec 3) as [B, T, Hq, Dv]. */
Lay packed(const Node &p, int sec)
{
    const fr_attn_qkv_geom &q = p.q;
    if (sec == 3) return Lay{q.T * q.Hq * q.Dv, q.Dv, q.Hq * q.Dv};
    return Lay{q.T * q.W, sec == 0 ? q.q_hs : sec == 1 ? q.k_hs : q.v_hs, q.W};
}

fr_status check_launch(const fr_cuda_kctx *k, const char *what) { return fr_cuda_check_launch(k->node, what); }

/* Whether the three sections of a packed bf16 tensor laid out as X at base are 16-byte
 * aligned (what cuDNN requires of its pointers). */
bool sections_aligned(const Node &p, const void *base)
{
    const bf16 *b = (const bf16 *)base;
    return qkv_fast::aligned16(b) && qkv_fast::aligned16(b + p.q.k_off) && qkv_fast::aligned16(b + p.q.v_off);
}

/* cuDNN's Q, K, V (qkv[3]): the bf16 X itself where a section needs no RoPE (X bfloat16 and
 * aligned: all three without RoPE, V with it), else the staged packed copy x16. */
void stage_for_cudnn(const Node &p, const fr_tensor *X, const float *cs, const float *sn, bf16 *const *dst,
                     const Lay *ls, bool split, const bf16 **qkv, cudaStream_t stream)
{
    const fr_attn_qkv_geom &q = p.q;
    const int64_t off[3] = {q.q_off, q.k_off, q.v_off};
    const bf16 *xb = (const bf16 *)X->data;
    const bool direct = !split && X->dtype == FR_BF16 && sections_aligned(p, xb);
    qkv_fast::Geo8 g8;
    if (direct && !q.rotary) {
        for (int i = 0; i < 3; i++) qkv[i] = xb + off[i];
        return;
    }
    if (direct && qk_geo(p, cs, sn, &g8)) { /* only Q and K staged */
        qkv_fast::rope8_kernel<false, bf16, bf16, float><<<qkv_fast::blocks8(g8.n), 256, 0, stream>>>(
            g8, xb, nullptr, dst[0], dst[1], dst[2], lay8(ls[0]), lay8(ls[1]), lay8(ls[2]), cs, sn);
        qkv[0] = dst[0], qkv[1] = dst[1], qkv[2] = xb + q.v_off;
        return;
    }
    stage<bf16>(p, X, cs, sn, dst[0], dst[1], dst[2], ls, stream);
    for (int i = 0; i < 3; i++) qkv[i] = dst[i];
}

/* The three sections' places in a bf16 copy at base: X's own columns, or (split) the token-major
 * buffers one after another, with their layouts. */
void sections_of(const Node &p, bool split, bf16 *base, bf16 **sec, Lay *ls)
{
    const fr_attn_qkv_geom &q = p.q;
    if (!split) {
        sec[0] = base, sec[1] = base + q.k_off, sec[2] = base + q.v_off; /* (as X's staged copy always was) */
        for (int i = 0; i < 3; i++) ls[i] = packed(p, i);
        return;
    }
    const int64_t nq = q.B * q.T * q.Hq * q.D, nk = q.B * q.T * q.Hk * q.D;
    sec[0] = base, sec[1] = base + nq, sec[2] = base + nq + nk;
    for (int i = 0; i < 3; i++) {
        int64_t st[4];
        split_strides_of(q, i, st);
        ls[i] = Lay{st[0], st[1], st[2]};
    }
}

/* An O-like input t (float32 or bfloat16) as cuDNN reads it (*use): t itself when bfloat16
 * and aligned, else rounded (copied) into dst. */
fr_status o_for_cudnn(const Node &p, const fr_tensor *t, bf16 *dst, const void **use, cudaStream_t stream)
{
    const fr_attn_qkv_geom &q = p.q;
    const int64_t no = q.B * q.T * q.Hq * q.Dv;
    const unsigned n8 = units8(no);
    *use = dst;
    if (t->dtype == FR_BF16) {
        if (qkv_fast::aligned16(t->data)) *use = t->data;
        else FR_CUDA_TRY(cudaMemcpyAsync(dst, t->data, (size_t)no * 2, cudaMemcpyDeviceToDevice, stream));
        return FR_OK;
    }
    const float *src = (const float *)t->data;
    if (n8 && qkv_fast::aligned16(src))
        qkv_fast::convert8_kernel<float, bf16><<<qkv_fast::blocks8(n8), 256, 0, stream>>>(n8, src, dst, nullptr,
                                                                                          nullptr);
    else
        o_kernel<float, bf16><<<blocks_for(no), 256, 0, stream>>>(q.B, q.T, q.Hq * q.Dv, q.Dv, packed(p, 3), src, dst,
                                                                  nullptr, nullptr);
    return FR_OK;
}

/* ---- scratch ---- */

fr_status qkv_scratch_env(const fr_cuda_plan_env *env, const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const int backward = strcmp(n->op_type, "AttentionQKVGrad") == 0;
    Node p;
    FR_TRY(node_of_graph(g, n, backward, &p));
    const size_t norm = qkv_norm::reserve(p.q, backward); /* the q/k norm's, after either path's layout */
    /* fp8run's kernels on float32 head-major copies: planned only where they run (the inner
       node's scratch builds a graph of its own) */
    auto own = [&]() -> fr_status {
        size_t inner = 0;
        FR_TRY(inner_scratch(env, g, n, p, backward, &inner));
        *bytes = own_layout(p, backward, inner).total + norm;
        return FR_OK;
    };
    if (env->attention == FR_CUDA_ATTN_FP8RUN) return own();
    fr_cudnn_sdpa s = sdpa_of(p, backward);
    char why[512];
    if (!cudnn_eligible(p, s, env->cu ? env->cu->cc_major : 0, env->cu ? env->cu->ragged_per_window : 0, why, sizeof why)) {
        if (env->attention == FR_CUDA_ATTN_CUDNN)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "--attention cudnn: cuDNN cannot run this node: %s", why);
        if (env->cu) {
            char note[320];
            snprintf(note, sizeof note, "node '%s' (%s): %s", n->name, n->op_type, why);
            fr_cuda_attention_note(env->cu, note);
        }
        return own();
    }
    size_t ws = fr_cudnn_sdpa_aux_bytes(&s);
    if (env->cu) {
        const fr_status st = fr_cudnn_sdpa_prepare(env->cu, &s, &ws);
        if (st == FR_ERR_UNSUPPORTED && env->attention != FR_CUDA_ATTN_CUDNN) {
            fr_clear_error();
            return own();
        }
        if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
    }
    /* cuDNN takes the node (eligible, and prepared where the device is at hand, as try_cudnn will
       find it again): no room for fp8run's copies, which at 1B were 0.9 GiB of the backward's
       peak. A plan without a device (info --memory=cuda on any machine) predicts the same, with
       cuDNN's workspace estimated. */
    *bytes = cudnn_layout(p, s, backward, ws).total + norm;
    return FR_OK;
}

fr_status qkv_scratch(const fr_graph *g, const fr_node *n, size_t *bytes)
{
    const fr_cuda_plan_env env = {NULL, FR_CUDA_ATTN_FP8RUN, 1};
    return qkv_scratch_env(&env, g, n, bytes);
}

/* ---- run ---- */

/* cuDNN when the context's choice and the node allow it (*ran = 1). */
fr_status try_cudnn(const fr_cuda_kctx *k, const Node &p, int backward, int *ran)
{
    *ran = 0;
    fr_cuda_ctx *c = k->cu;
    const fr_node *n = k->node;
    if (c->attention == FR_CUDA_ATTN_FP8RUN) return FR_OK;
    fr_cudnn_sdpa s = sdpa_of(p, backward);
    char why[512];
    int ok = cudnn_eligible(p, s, c->cc_major, c->ragged_per_window, why, sizeof why);
    size_t ws = 0;
    if (ok) {
        const fr_status st = fr_cudnn_sdpa_prepare(c, &s, &ws);
        if (st == FR_ERR_UNSUPPORTED) {
            snprintf(why, sizeof why, "%s", fr_last_error());
            fr_clear_error();
            ok = 0;
        } else if (st != FR_OK) {
            return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
        }
    }
    const CudnnLayout l = ok ? cudnn_layout(p, s, backward, ws) : CudnnLayout{};
    if (ok && (!k->scratch || k->scratch_bytes < l.total + qkv_norm::reserve(p.q, backward)))
        snprintf(why, sizeof why, "its scratch (%zu bytes) was planned without cuDNN (%zu needed)", k->scratch_bytes,
                 l.total), ok = 0;
    if (!ok) {
        if (c->attention == FR_CUDA_ATTN_CUDNN)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "--attention cudnn: cuDNN cannot run this node: %s", why);
        char note[320];
        snprintf(note, sizeof note, "node '%s' (%s): %s", n->name, n->op_type, why);
        fr_cuda_attention_note(c, note);
        return FR_OK;
    }
    const fr_attn_qkv_geom &q = p.q;
    char *sc = (char *)k->scratch;
    bf16 *x16 = (bf16 *)(sc + l.x16), *o16 = (bf16 *)(sc + l.o16);
    const int64_t no = q.B * q.T * q.Hq * q.Dv, N = q.Hq * q.Dv;
    const unsigned n8 = units8(no);
    const int ci = backward ? 4 : 1;
    const float *cs = k->n_in > ci + 1 && k->in[ci] ? (const float *)k->in[ci]->data : nullptr;
    const float *sn = cs ? (const float *)k->in[ci + 1]->data : nullptr;
    cudaStream_t stream = c->stream;
    /* the variable-length backward: Q, K, V and dQ, dK, dV in separate token-major buffers */
    const bool split = backward && s.ragged;
    Lay ls[3];
    bf16 *sec[3];
    sections_of(p, split, x16, sec, ls);
    const Lay lo = packed(p, 3);
    const bf16 *qkv[3];
    /* with the q/k norm: the norm fused into the staging of Q and K where it can be, else Q and K
     * normalized into the staged copy (whatever was read from X before) */
    if (!q.qk_norm || !qkv_norm::stage_cudnn(k, p.q, backward, cs, sn, sec, ls, !split, qkv, stream)) {
        stage_for_cudnn(p, k->in[0], cs, sn, sec, ls, split, qkv, stream);
        if (q.qk_norm) qkv_norm::stage_copy(k, p.q, backward, cs, sn, sec, ls, qkv, stream);
    }
    FR_TRY(check_launch(k, "AttentionQKV(cuDNN: stage X)"));
    fr_cudnn_sdpa_io io;
    memset(&io, 0, sizeof io);
    io.q = qkv[0], io.k = qkv[1], io.v = qkv[2], io.o = o16;
    io.scale = p.a.scale;
    io.workspace = sc + l.ws;
    io.workspace_bytes = l.ws_bytes;
    const int si = backward ? 6 : 3; /* Sk, Sq after cos, sin */
    const fr_cudnn_segs segs = {k->n_in > si ? k->in[si] : NULL, k->n_in > si + 1 ? k->in[si + 1] : NULL};
    FR_TRY(fr_cudnn_seg_stage(k, &s, &segs, sc + l.segs, &io));
    float *stats = (float *)(sc + l.stats);
    const size_t stats_bytes = (size_t)(q.B * q.Hq * q.T) * sizeof(float);
    if (!backward) {
        fr_tensor *lse = k->n_out > 1 ? k->out[1] : NULL, *ot = k->out[0];
        /* ragged (packed sequences): token-major Stats in the scratch, transposed into LSE */
        const bool direct = lse && ((uintptr_t)lse->data & 15) == 0 && !s.ragged;
        io.stats = direct ? (float *)lse->data : stats;
        const bool o_direct = ot->dtype == FR_BF16 && qkv_fast::aligned16(ot->data); /* o_dtype bfloat16 */
        if (o_direct) io.o = ot->data;
        /* rows past a length, skipped (attention_cudnn_node.cu): 0; ragged sequences cover every row */
        const bool skipped = s.padded && segs.sq && !s.ragged;
        if (skipped) FR_CUDA_TRY(cudaMemsetAsync(io.o, 0, (size_t)no * 2, stream));
        if (skipped) FR_CUDA_TRY(cudaMemsetAsync(io.stats, 0, stats_bytes, stream));
        const fr_status st = fr_cudnn_sdpa_run(c, &s, &io);
        if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
        if (ot->dtype == FR_BF16) { /* [B, T, Hq, Dv] is the output's layout */
            if (!o_direct) FR_CUDA_TRY(cudaMemcpyAsync(ot->data, o16, (size_t)no * 2, cudaMemcpyDeviceToDevice, stream));
        } else if (n8 && qkv_fast::aligned16(ot->data)) {
            qkv_fast::convert8_kernel<bf16, float><<<qkv_fast::blocks8(n8), 256, 0, stream>>>(n8, o16, (float *)ot->data,
                                                                                              nullptr, nullptr);
        } else {
            o_kernel<float, bf16><<<blocks_for(no), 256, 0, stream>>>(q.B, q.T, N, q.Dv, lo, nullptr, nullptr, o16,
                                                                      (float *)ot->data);
        }
        FR_TRY(check_launch(k, "AttentionQKV(cuDNN: O)"));
        if (lse && s.ragged) FR_TRY(fr_cudnn_stats_transpose(k, stats, (float *)lse->data, q.B, q.Hq, q.T, 0));
        else if (lse && !direct)
            FR_CUDA_TRY(cudaMemcpyAsync(lse->data, stats, stats_bytes, cudaMemcpyDeviceToDevice, stream));
    } else {
        bf16 *do16 = (bf16 *)(sc + l.do16), *dx16 = (bf16 *)(sc + l.dx16);
        const fr_tensor *Ot = k->in[1], *dOt = k->in[3];
        const float *O = (const float *)Ot->data, *dO = (const float *)dOt->data;
        if (Ot->dtype == FR_F32 && dOt->dtype == FR_F32 && n8 && qkv_fast::aligned16(O) && qkv_fast::aligned16(dO)) {
            qkv_fast::convert8_kernel<float, bf16><<<dim3(qkv_fast::blocks8(n8), 2), 256, 0, stream>>>(n8, O, o16, dO,
                                                                                                       do16);
            io.o = o16, io.dout = do16; /* both in one launch */
        } else { /* bfloat16 ones read where they lie */
            const void *ou = NULL;
            FR_TRY(o_for_cudnn(p, Ot, o16, &ou, stream));
            FR_TRY(o_for_cudnn(p, dOt, do16, &io.dout, stream));
            io.o = (void *)ou; /* read only in the backward */
        }
        FR_TRY(check_launch(k, "AttentionQKVGrad(cuDNN: O, dO to bf16)"));
        const fr_tensor *lse = k->in[2];
        if (s.ragged) { /* cuDNN reads token-major statistics */
            FR_TRY(fr_cudnn_stats_transpose(k, (const float *)lse->data, stats, q.B, q.Hq, q.T, 1));
            io.stats = stats;
        } else if (((uintptr_t)lse->data & 15) == 0) {
            io.stats = (float *)lse->data;
        } else {
            FR_CUDA_TRY(cudaMemcpyAsync(stats, lse->data, stats_bytes, cudaMemcpyDeviceToDevice, stream));
            io.stats = stats;
        }
        /* dx_dtype bfloat16: cuDNN writes dQ, dK, dV into dX itself (then RoPE^T in place on
         * the Q and K columns) where the pointers and the vectorized kernel allow */
        fr_tensor *dxt = k->out[0];
        qkv_fast::Geo8 g8;
        const bool into_dx = !split && dxt->dtype == FR_BF16 && sections_aligned(p, dxt->data) &&
                             (!q.rotary || rot_geo(p, cs, sn, &g8));
        bf16 *dst = into_dx ? (bf16 *)dxt->data : dx16, *dsec[3];
        Lay dls[3]; /* (ls again: the gradients are laid out as Q, K, V were staged) */
        sections_of(p, split, dst, dsec, dls);
        io.dq = dsec[0], io.dk = dsec[1], io.dv = dsec[2];
        if (s.padded && !s.ragged) /* queries and keys past a length get no gradient: 0, not stale memory */
            FR_CUDA_TRY(cudaMemsetAsync(dst, 0, (size_t)(q.B * q.T * q.W) * 2, stream));
        const fr_status st = fr_cudnn_sdpa_run(c, &s, &io);
        if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
        int fused = 0; /* the q/k norm's backward fused with RoPE's transpose (and V's move when !into_dx) */
        if (q.qk_norm)
            FR_TRY(qkv_norm::grad_fast<bf16>(k, p.q, cs, sn, dsec[0], dsec[1], into_dx ? nullptr : dsec[2], dls,
                                             &fused));
        if (!into_dx && !fused) unstage_to<bf16>(p, dsec[0], dsec[1], dsec[2], dls, cs, sn, dxt, stream);
        if (q.qk_norm && !fused) /* Q and K columns again, RoPE transposed and the norm's backward (in place in dX) */
            FR_TRY(qkv_norm::grad<bf16>(k, p.q, cs, sn, dsec[0], dsec[1], dls[0], dls[1]));
        else if (!q.qk_norm && into_dx && q.rotary)
            qkv_fast::rope8_kernel<true, bf16, float, bf16><<<qkv_fast::blocks8(g8.n), 256, 0, stream>>>(
                g8, nullptr, dst, dsec[0], dsec[1], dsec[2], lay8(dls[0]), lay8(dls[1]), lay8(dls[2]), cs, sn);
        FR_TRY(check_launch(k, "AttentionQKVGrad(cuDNN: dX)"));
    }
    c->attn_runs_cudnn++;
    *ran = 1;
    return FR_OK;
}

/* An O-like input (float32, or bfloat16 widened) into the head-major float32 copy h. */
void o_head_major(const Node &p, const Lay &l, const fr_tensor *t, float *h, cudaStream_t stream)
{
    if (t->dtype == FR_BF16)
        o_move<bf16, float>(p, l, (const bf16 *)t->data, h, nullptr, nullptr, stream);
    else
        o_move<float, float>(p, l, (const float *)t->data, h, nullptr, nullptr, stream);
}

/* fp8run's kernels on head-major float32 copies. */
fr_status run_own(const fr_cuda_kctx *k, const Node &p, int backward)
{
    const fr_cuda_kernel_def *def = inner_def(backward);
    /* the inner node's scratch is what the plan left after the copies (qkv_scratch sized it), so
     * no graph is built here per run */
    const OwnLayout l = own_layout(p, backward, 0);
    const size_t need = l.total + qkv_norm::reserve(p.q, backward);
    if (!def || !k->scratch || k->scratch_bytes < need)
        return fr_node_error(k->node, FR_ERR_INTERNAL, "scratch of %zu bytes, %zu needed", k->scratch_bytes, need);
    char *sc = (char *)k->scratch;
    float *Q = (float *)(sc + l.q), *K = (float *)(sc + l.k), *V = (float *)(sc + l.v), *O = (float *)(sc + l.o);
    const int ci = backward ? 4 : 1;
    const float *cs = k->n_in > ci + 1 && k->in[ci] ? (const float *)k->in[ci]->data : nullptr;
    const float *sn = cs ? (const float *)k->in[ci + 1]->data : nullptr;
    cudaStream_t stream = k->cu->stream;
    const Lay hs[3] = {head_major(p, 0), head_major(p, 1), head_major(p, 2)}, ho = head_major(p, 3);
    if (!p.q.qk_norm || !qkv_norm::stage_fast<float>(k, p.q, backward, cs, sn, Q, K, V, hs, stream)) {
        stage<float>(p, k->in[0], cs, sn, Q, K, V, hs, stream);
        if (p.q.qk_norm) qkv_norm::stage<float>(k, p.q, backward, cs, sn, Q, K, hs[0], hs[1], stream);
    }
    FR_TRY(check_launch(k, "AttentionQKV(stage X)"));
    fr_tensor tq = view_of(p, 0, Q), tk = view_of(p, 1, K), tv = view_of(p, 2, V), to = view_of(p, 3, O);
    fr_cuda_kctx ik = *k;
    ik.scratch = sc + l.inner;
    ik.scratch_bytes = k->scratch_bytes - l.inner - qkv_norm::reserve(p.q, backward);
    fr_cuda_ctx *c = k->cu;
    const int choice = c->attention;
    /* the inner node runs fp8run's kernels; packed sequences' backward may take cuDNN there (it
     * declines to fp8run's kernels itself when its plan or scratch is not there) */
    if (!inner_cudnn_backward(p, backward)) c->attention = FR_CUDA_ATTN_FP8RUN;
    fr_status st;
    if (!backward) {
        fr_tensor tl = view_of(p, 4, k->n_out > 1 && k->out[1] ? k->out[1]->data : nullptr);
        /* the segment ids (inputs 3, 4) are the inner node's Sk, Sq (its inputs 4, 5) */
        fr_tensor *sk = k->n_in > 3 ? k->in[3] : nullptr, *sq = k->n_in > 4 ? k->in[4] : nullptr;
        fr_tensor *in[6] = {&tq, &tk, &tv, nullptr, sk, sq}, *out[2] = {&to, tl.data ? &tl : nullptr};
        ik.in = in, ik.n_in = sq ? 6 : sk ? 5 : 3, ik.out = out, ik.n_out = 2;
        st = def->run(&ik);
        c->attention = choice;
        FR_TRY(st);
        if (k->out[0]->dtype == FR_BF16) /* o_dtype bfloat16: rounded in the same pass */
            o_move<bf16, float>(p, ho, nullptr, nullptr, O, (bf16 *)k->out[0]->data, stream);
        else
            o_move<float, float>(p, ho, nullptr, nullptr, O, (float *)k->out[0]->data, stream);
        return check_launch(k, "AttentionQKV(O)");
    }
    float *dO = (float *)(sc + l.dout), *dQ = (float *)(sc + l.dq), *dK = (float *)(sc + l.dk),
          *dV = (float *)(sc + l.dv);
    o_head_major(p, ho, k->in[1], O, stream);
    o_head_major(p, ho, k->in[3], dO, stream);
    FR_TRY(check_launch(k, "AttentionQKVGrad(O, dO)"));
    fr_tensor tl = view_of(p, 4, k->in[2]->data), tdo = view_of(p, 3, dO);
    fr_tensor tdq = view_of(p, 0, dQ), tdk = view_of(p, 1, dK), tdv = view_of(p, 2, dV);
    fr_tensor *sk = k->n_in > 6 ? k->in[6] : nullptr, *sq = k->n_in > 7 ? k->in[7] : nullptr;
    fr_tensor *in[9] = {&tq, &tk, &tv, &to, &tl, &tdo, nullptr, sk, sq}, *out[3] = {&tdq, &tdk, &tdv};
    ik.in = in, ik.n_in = sq ? 9 : sk ? 8 : 6, ik.out = out, ik.n_out = 3;
    st = def->run(&ik);
    c->attention = choice;
    FR_TRY(st);
    int fused = 0; /* the q/k norm's backward fused with the unstaging of Q and K */
    if (p.q.qk_norm) FR_TRY(qkv_norm::grad_fast<float>(k, p.q, cs, sn, dQ, dK, dV, hs, &fused));
    if (fused) return FR_OK; /* (launches checked) */
    unstage_to<float>(p, dQ, dK, dV, hs, cs, sn, k->out[0], stream);
    if (p.q.qk_norm) return qkv_norm::grad<float>(k, p.q, cs, sn, dQ, dK, hs[0], hs[1]); /* (checks the launches) */
    return check_launch(k, "AttentionQKVGrad(dX)");
}

/* float32 inputs; X (a narrowed projection) and the backward's O and dO also bfloat16 (the
 * staging reads them, the computation is float32 as ever) */
fr_status check_f32(const fr_cuda_kctx *k, int backward)
{
    for (int i = 0; i < k->n_in && i < (backward ? 6 : 3); i++) { /* (then the segment ids: integers) */
        const int bf_ok = i == 0 || (backward && (i == 1 || i == 3));
        if (k->in[i] && k->in[i]->dtype != FR_F32 && !(bf_ok && k->in[i]->dtype == FR_BF16))
            return fr_node_error(k->node, FR_ERR_UNSUPPORTED, "input %d is %s: the CUDA kernels take float32%s", i,
                                 fr_dtype_name(k->in[i]->dtype), bf_ok ? " or bfloat16" : "");
    }
    return FR_OK;
}

fr_status run(const fr_cuda_kctx *k, int backward)
{
    const fr_node *n = k->node;
    if (k->n_in < (backward ? 4 : 1) || !k->in[0] || k->n_out < 1 || !k->out[0])
        return fr_node_error(n, FR_ERR_GRAPH, backward ? "needs inputs X, O, LSE, dO and output dX"
                                                       : "needs input X and output O");
    for (int i = 0; backward && i < 4; i++)
        if (!k->in[i]) return fr_node_error(n, FR_ERR_GRAPH, "input %d is missing", i);
    FR_TRY(check_f32(k, backward));
    fr_dtype yt; /* O's (o_dtype) or dX's (dx_dtype) */
    FR_TRY(fr_attn_qkv_out_dtype(n, backward ? "dx_dtype" : "o_dtype", FR_F32, &yt));
    const int ci = backward ? 4 : 1;
    const fr_tensor *c = k->n_in > ci + 1 ? k->in[ci] : NULL, *s = k->n_in > ci + 1 ? k->in[ci + 1] : NULL;
    Node p;
    const fr_tensor *x = k->in[0];
    fr_value cv, sv; /* the tables' shapes, as node_of reads them */
    memset(&cv, 0, sizeof cv), memset(&sv, 0, sizeof sv);
    if (c) cv.rank = c->rank, memcpy(cv.dims, c->dims, sizeof c->dims);
    if (s) sv.rank = s->rank, memcpy(sv.dims, s->dims, sizeof s->dims);
    FR_TRY(node_of(n, x->rank, x->dims, c ? &cv : NULL, s ? &sv : NULL, &p));
    const int si = backward ? 6 : 3; /* Sk, Sq after cos, sin */
    p.seg_rows = k->n_in > si && k->in[si] ? k->in[si]->dims[0] : 0, p.seg_q = k->n_in > si + 1 && k->in[si + 1];
    FR_TRY(qkv_norm::read_run(k, backward, &p.q)); /* the q/k norm's weights, and the gradients' outputs */
    const fr_attn_qkv_geom &q = p.q;
    int64_t od[3];
    const int orank = fr_attn_qkv_out_dims(&q, od);
    const int64_t ld[3] = {q.B, q.Hq, q.T};
    if (!backward) {
        FR_TRY(fr_check_out(n, k->out[0], yt, orank, od));
        if (k->n_out > 1 && k->out[1]) FR_TRY(fr_check_out(n, k->out[1], FR_F32, 3, ld));
    } else {
        FR_TRY(fr_check_out(n, k->in[1], k->in[1]->dtype, orank, od)); /* dtypes: check_f32 */
        FR_TRY(fr_check_out(n, k->in[3], k->in[3]->dtype, orank, od));
        FR_TRY(fr_check_out(n, k->in[2], FR_F32, 3, ld));
        FR_TRY(fr_check_out(n, k->out[0], yt, 3, x->dims));
    }
    if (q.B == 0 || q.T == 0) return backward ? qkv_norm::zero_grads(k) : FR_OK;
    int ran = 0;
    FR_TRY(try_cudnn(k, p, backward, &ran));
    if (ran) return FR_OK;
    return run_own(k, p, backward);
}

fr_status qkv_cuda(const fr_cuda_kctx *k) { return run(k, 0); }
fr_status qkvg_cuda(const fr_cuda_kctx *k) { return run(k, 1); }

} /* namespace */

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_attention_qkv[] = {
    {"AttentionQKV", FR_DOMAIN_FP8RUN, qkv_cuda, qkv_scratch, NULL, qkv_scratch_env},
    {"AttentionQKVGrad", FR_DOMAIN_FP8RUN, qkvg_cuda, qkv_scratch, NULL, qkv_scratch_env},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};
