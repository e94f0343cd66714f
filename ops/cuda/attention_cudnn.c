/* cuDNN's fused flash attention: plans cached per context and problem, and their execution
 * (attention_cudnn.h). Every cuDNN call is checked; a refusal is the text of cuDNN's status and
 * last error message. */
#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_cudnn_graph.h"
#include "ops/cuda/attention_cudnn_status.h"

#define MAX_IO 32      /* non-virtual tensors of a graph (28 at most today: the FP8 backward) */
#define VPACK_CACHE 64 /* variant packs kept per plan (one per node and executor at the shapes trained) */
#define ALIGN 256

static size_t align_up(size_t v) { return (v + ALIGN - 1) / ALIGN * ALIGN; }

size_t fr_cudnn_sdpa_aux_bytes(const fr_cudnn_sdpa *p)
{
    if (!p->backward || p->fp8) return 0; /* the FP8 graph's row sums are virtual, dQ is written directly */
    /* ragged: token-major over the tokens the sequences lie in, not slots x longest */
    const size_t rows = (size_t)(p->ragged ? p->ragged : p->b * p->tq) * (size_t)p->hq;
    const size_t acc = p->deterministic ? 0 : align_up(rows * (size_t)p->d * sizeof(float));
    return acc + align_up(rows * sizeof(float));
}

/* ---------------------------------------------------------------- plans ---- */

typedef struct vpack {
    frdnn_desc vp;
    void *ptr[MAX_IO]; /* the data pointers it was made with (by-value scalars excluded) */
    void *workspace;
    float scale;       /* its by-value scale (the variant pack points here) */
} vpack;

typedef struct sdpa_plan {
    fr_cudnn_sdpa key;
    int ok;
    char why[640];
    gb b;              /* every descriptor (the plan's last) */
    frdnn_desc plan;
    int64_t plan_ws;
    int pad;
    char *seq;         /* device: [b] int32 tq, then at seq_kv [b] int32 tk (the padding workaround) */
    size_t seq_kv;
    float neg_inf, one, softcap, window; /* by-value scalars the variant packs point to */
    vpack vp[VPACK_CACHE];
    int n_vp, next_vp;
    struct sdpa_plan *next;
} sdpa_plan;

struct fr_cudnn_state {
    const frdnn_api *api;
    frdnn_handle h;
    sdpa_plan *plans;
};

static void plan_free(const frdnn_api *api, sdpa_plan *pl)
{
    for (int i = 0; i < pl->n_vp; i++)
        if (pl->vp[i].vp) api->BackendDestroyDescriptor(pl->vp[i].vp); /* best effort at teardown */
    fr_cudnn_gb_free(&pl->b);
    if (pl->seq) (void)cudaFree(pl->seq); /* teardown: nothing to do on failure */
    free(pl);
}

static void state_free(struct fr_cudnn_state *s)
{
    if (!s) return;
    for (sdpa_plan *pl = s->plans, *nx; pl; pl = nx) {
        nx = pl->next;
        plan_free(s->api, pl);
    }
    if (s->h) s->api->Destroy(s->h); /* best effort at teardown */
    free(s);
}

static int same_problem(const fr_cudnn_sdpa *a, const fr_cudnn_sdpa *b)
{
    return a->b == b->b && a->hq == b->hq && a->hk == b->hk && a->tq == b->tq && a->tk == b->tk && a->d == b->d &&
           a->dv == b->dv && a->causal == b->causal && a->window == b->window && a->softcap == b->softcap &&
           a->padded == b->padded && a->segments == b->segments && a->ragged == b->ragged && a->half == b->half &&
           a->backward == b->backward && a->fp8 == b->fp8 && a->fp8_bf16_io == b->fp8_bf16_io &&
           a->engine_skip == b->engine_skip && a->deterministic == b->deterministic &&
           memcmp(a->sq, b->sq, sizeof a->sq) == 0 && memcmp(a->sk, b->sk, sizeof a->sk) == 0 &&
           memcmp(a->sv, b->sv, sizeof a->sv) == 0 && memcmp(a->so, b->so, sizeof a->so) == 0;
}

/* cuDNN's state of context c (the handle on c's device and stream), made on first use. */
static fr_status state_of(fr_cuda_ctx *c, struct fr_cudnn_state **out)
{
    const char *why = NULL;
    const frdnn_api *api = fr_cudnn(&why);
    if (!api) return fr_error(FR_ERR_UNSUPPORTED, "%s", why);
    if (c->cudnn) {
        *out = c->cudnn;
        return FR_OK;
    }
    int cur = -1;
    FR_CUDA_TRY(cudaGetDevice(&cur));
    if (cur != c->device)
        return fr_error(FR_ERR_DEVICE, "cuDNN: the context's device %d is not the current one (%d)", c->device, cur);
    struct fr_cudnn_state *s = calloc(1, sizeof *s);
    if (!s) return fr_error(FR_ERR_OOM, "out of memory for cuDNN's state");
    s->api = api;
    char text[640];
    int st = api->Create(&s->h);
    if (st == FRDNN_STATUS_SUCCESS) st = api->SetStream(s->h, (void *)c->stream);
    else s->h = NULL;
    if (st != FRDNN_STATUS_SUCCESS) {
        fr_cudnn_status_text(api, st, "cudnnCreate / cudnnSetStream", text, sizeof text);
        state_free(s);
        return fr_error(FR_ERR_DEVICE, "%s", text);
    }
    c->cudnn = s;
    c->cudnn_free = state_free;
    *out = s;
    return FR_OK;
}

/* Build the plan of p (pl->ok = 0 and pl->why when cuDNN refuses it). Errors other than a
 * refusal (out of memory, a CUDA failure) are returned. */
static fr_status build(struct fr_cudnn_state *s, const fr_cudnn_sdpa *p, sdpa_plan *pl)
{
    const size_t version = fr_cudnn_version();
    pl->key = *p;
    /* older cuDNN, and cudnn-frontend's FP8 graphs on any, want the lowest finite float */
    pl->neg_inf = version < 91000 || p->fp8 ? -FLT_MAX : -INFINITY;
    pl->one = 1.0f;
    pl->softcap = p->softcap;
    pl->window = (float)p->window; /* cudnn-frontend's left bound is a float */
    pl->pad = fr_cudnn_needs_padding(p, version);
    gb *b = &pl->b;
    b->api = s->api;
    fr_cudnn_graph(b, p, version);
    frdnn_desc og = fr_cudnn_op_graph(b, s->h);
    if (!b->failed && fr_cudnn_find_plan(b, s->h, og, p->deterministic, p->engine_skip, &pl->plan, &pl->plan_ws) == 0)
        pl->ok = 1;
    if (!pl->ok) {
        snprintf(pl->why, sizeof pl->why, "%s", b->why);
        fr_cudnn_gb_free(b); /* a refused problem keeps only its reason */
        return FR_OK;
    }
    if (pl->pad) { /* the lengths, constant per plan: made once, here (not in a step) */
        const size_t n = (size_t)p->b;
        pl->seq_kv = align_up(n * sizeof(int32_t)); /* each 16-byte aligned, as declared */
        int32_t *h = calloc(2 * pl->seq_kv, 1);
        if (!h) return fr_error(FR_ERR_OOM, "out of memory for cuDNN's sequence lengths");
        for (size_t i = 0; i < n; i++) h[i] = (int32_t)p->tq, h[pl->seq_kv / sizeof *h + i] = (int32_t)p->tk;
        cudaError_t e = cudaMalloc((void **)&pl->seq, 2 * pl->seq_kv);
        if (e == cudaSuccess) e = cudaMemcpy(pl->seq, h, 2 * pl->seq_kv, cudaMemcpyHostToDevice);
        free(h);
        if (e != cudaSuccess) return fr_cuda_status(e, "cudaMalloc/cudaMemcpy(cuDNN sequence lengths)", __FILE__, __LINE__);
    }
    return FR_OK;
}

/* p as this context runs it: --deterministic is the context's. */
static fr_cudnn_sdpa on_ctx(const fr_cuda_ctx *c, const fr_cudnn_sdpa *p)
{
    fr_cudnn_sdpa q = *p;
    q.deterministic = c->deterministic != 0;
    return q;
}

fr_status fr_cudnn_sdpa_prepare(fr_cuda_ctx *c, const fr_cudnn_sdpa *problem, size_t *workspace)
{
    *workspace = 0;
    const fr_cudnn_sdpa q = on_ctx(c, problem), *p = &q;
    char why[512];
    if (!fr_cudnn_sdpa_supported(p, fr_cudnn_version(), c->cc_major, why, sizeof why))
        return fr_error(FR_ERR_UNSUPPORTED, "cuDNN attention: %s", why);
    struct fr_cudnn_state *s = NULL;
    FR_TRY(state_of(c, &s));
    sdpa_plan *pl = s->plans;
    while (pl && !same_problem(&pl->key, p)) pl = pl->next;
    if (!pl) {
        pl = calloc(1, sizeof *pl);
        if (!pl) return fr_error(FR_ERR_OOM, "out of memory for a cuDNN plan");
        fr_status st = build(s, p, pl);
        if (st != FR_OK) {
            plan_free(s->api, pl);
            return st;
        }
        pl->next = s->plans;
        s->plans = pl;
    }
    if (!pl->ok) return fr_error(FR_ERR_UNSUPPORTED, "cuDNN attention: no engine takes it: %s", pl->why);
    *workspace = fr_cudnn_sdpa_aux_bytes(p) + (size_t)pl->plan_ws;
    return FR_OK;
}

/* The variant pack of these pointers (made once, then reused: a step's pointers repeat). */
static fr_status vpack_of(struct fr_cudnn_state *s, sdpa_plan *pl, const int64_t *uid, void *const *ptr, int n,
                          const unsigned char *by_value, void *workspace, float scale, frdnn_desc *out)
{
    for (int i = 0; i < pl->n_vp; i++) {
        vpack *v = &pl->vp[i];
        int same = v->workspace == workspace && v->scale == scale;
        for (int k = 0; same && k < n; k++) same = by_value[k] || v->ptr[k] == ptr[k];
        if (same) {
            *out = v->vp;
            return FR_OK;
        }
    }
    vpack *v = &pl->vp[pl->n_vp < VPACK_CACHE ? pl->n_vp++ : pl->next_vp++ % VPACK_CACHE];
    if (v->vp) s->api->BackendDestroyDescriptor(v->vp); /* evicted: nothing to do on failure */
    memset(v, 0, sizeof *v);
    v->workspace = workspace;
    v->scale = scale;
    void *data[MAX_IO];
    for (int k = 0; k < n; k++) {
        v->ptr[k] = ptr[k];
        data[k] = uid[k] == UID_SCALE ? (void *)&v->scale : ptr[k];
    }
    const frdnn_api *api = s->api;
    char text[640];
    int st = api->BackendCreateDescriptor(FRDNN_VARIANT_PACK_DESCRIPTOR, &v->vp);
    if (st == FRDNN_STATUS_SUCCESS)
        st = api->BackendSetAttribute(v->vp, FRDNN_ATTR_VARIANT_PACK_WORKSPACE, FRDNN_TYPE_VOID_PTR, 1, &workspace);
    if (st == FRDNN_STATUS_SUCCESS)
        st = api->BackendSetAttribute(v->vp, FRDNN_ATTR_VARIANT_PACK_DATA_POINTERS, FRDNN_TYPE_VOID_PTR, n, data);
    if (st == FRDNN_STATUS_SUCCESS)
        st = api->BackendSetAttribute(v->vp, FRDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, FRDNN_TYPE_INT64, n, uid);
    if (st == FRDNN_STATUS_SUCCESS) st = api->BackendFinalize(v->vp);
    if (st != FRDNN_STATUS_SUCCESS) {
        fr_cudnn_status_text(api, st, "cuDNN variant pack", text, sizeof text);
        if (v->vp) api->BackendDestroyDescriptor(v->vp); /* failed: dropped */
        memset(v, 0, sizeof *v);
        return fr_error(FR_ERR_DEVICE, "%s", text);
    }
    *out = v->vp;
    return FR_OK;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

fr_status fr_cudnn_sdpa_run(fr_cuda_ctx *c, const fr_cudnn_sdpa *problem, const fr_cudnn_sdpa_io *io)
{
    size_t need = 0;
    FR_TRY(fr_cudnn_sdpa_prepare(c, problem, &need));
    const fr_cudnn_sdpa q = on_ctx(c, problem), *p = &q;
    struct fr_cudnn_state *s = c->cudnn;
    sdpa_plan *pl = s->plans;
    while (pl && !same_problem(&pl->key, p)) pl = pl->next;
    if (!pl || !pl->ok) return fr_error(FR_ERR_INTERNAL, "cuDNN attention: the prepared plan is missing");
    if (io->workspace_bytes < need || (need && !io->workspace))
        return fr_error(FR_ERR_INTERNAL, "cuDNN attention: workspace of %zu bytes, %zu needed", io->workspace_bytes, need);
    char *ws = (char *)io->workspace;
    const size_t rows = (size_t)(p->ragged ? p->ragged : p->b * p->tq) * (size_t)p->hq;
    const size_t acc_bytes = rows * (size_t)p->d * sizeof(float);
    void *dq_acc = p->deterministic || p->fp8 ? NULL : ws; /* deterministic, FP8: no accumulator */
    void *sum = p->backward ? ws + (p->deterministic ? 0 : align_up(acc_bytes)) : NULL;
    void *plan_ws = ws ? ws + fr_cudnn_sdpa_aux_bytes(p) : NULL;
    int64_t uid[MAX_IO];
    void *ptr[MAX_IO];
    unsigned char by_value[MAX_IO] = {0};
    int n = 0;
#define ARG(u, x) (uid[n] = (u), ptr[n] = (void *)(x), by_value[n] = 0, n++)
#define VAL(u, x) (uid[n] = (u), ptr[n] = (void *)(x), by_value[n] = 1, n++)
    ARG(UID_Q, io->q);
    ARG(UID_K, io->k);
    ARG(UID_V, io->v);
    ARG(UID_O, io->o);
    ARG(UID_STATS, io->stats);
    VAL(UID_SCALE, NULL); /* the variant pack's own copy of the scale */
    if (p->causal || pl->pad || p->padded || p->segments) VAL(UID_NEG_INF, &pl->neg_inf);
    if (p->segments) {
        ARG(UID_SEG_Q, io->seg_q);
        ARG(UID_SEG_KV, io->seg_kv);
    }
    if (p->softcap > 0) VAL(UID_SOFTCAP, &pl->softcap);
    if (p->window > 0) VAL(UID_WINDOW, &pl->window);
    if (p->padded) {
        ARG(UID_SEQ_Q, io->seq_q);
        ARG(UID_SEQ_KV, io->seq_kv);
    }
    if (p->ragged) {
        ARG(UID_OFF_Q, io->off_q);
        ARG(UID_OFF_K, io->off_k);
        ARG(UID_OFF_V, io->off_v);
        ARG(UID_OFF_O, io->off_o);
        ARG(UID_OFF_STATS, io->off_stats);
        if (p->backward && !p->deterministic) ARG(UID_OFF_ACC, io->off_acc);
    }
    if (p->fp8) {
        ARG(UID_DESCALE_Q, io->descale_q);
        ARG(UID_DESCALE_K, io->descale_k);
        ARG(UID_DESCALE_V, io->descale_v);
        ARG(UID_DESCALE_S, io->descale_s);
        ARG(UID_SCALE_S, io->scale_s);
    }
    if (p->fp8 && !p->backward) {
        ARG(UID_SCALE_O, io->scale_o);
        ARG(UID_AMAX_S, io->amax_s);
        ARG(UID_AMAX_O, io->amax_o);
    } else if (p->fp8) {
        ARG(UID_DO, io->dout);
        ARG(UID_DQ, io->dq);
        ARG(UID_DK, io->dk);
        ARG(UID_DV, io->dv);
        ARG(UID_DESCALE_O, io->descale_o);
        ARG(UID_DESCALE_DO, io->descale_do);
        ARG(UID_DESCALE_DP, io->descale_dp);
        ARG(UID_SCALE_DP, io->scale_dp);
        ARG(UID_SCALE_DQ, io->scale_dq);
        ARG(UID_SCALE_DK, io->scale_dk);
        ARG(UID_SCALE_DV, io->scale_dv);
        ARG(UID_AMAX_DP, io->amax_dp);
        ARG(UID_AMAX_DQ, io->amax_dq);
        ARG(UID_AMAX_DK, io->amax_dk);
        ARG(UID_AMAX_DV, io->amax_dv);
    } else if (p->backward) {
        ARG(UID_DO, io->dout);
        ARG(UID_DQ, io->dq);
        ARG(UID_DK, io->dk);
        ARG(UID_DV, io->dv);
        VAL(UID_ONE, &pl->one);
        ARG(UID_SUM, sum);
        if (!p->deterministic) ARG(UID_DQ_ACC, dq_acc);
        if (pl->pad) {
            ARG(UID_SEQ_Q, pl->seq);
            ARG(UID_SEQ_KV, pl->seq + pl->seq_kv);
        }
    }
#undef ARG
#undef VAL
    for (int k = 0; k < n; k++)
        if (!by_value[k] && (!ptr[k] || !aligned16(ptr[k])))
            return fr_error(FR_ERR_INVALID_ARG, "cuDNN attention: tensor %d is %s", (int)uid[k],
                            ptr[k] ? "not 16-byte aligned" : "missing");
    if (p->backward && dq_acc && fr_cudnn_version() < 90600) /* cudnn-frontend clears the accumulator there */
        FR_CUDA_TRY(cudaMemsetAsync(dq_acc, 0, acc_bytes, c->stream));
    frdnn_desc vp = NULL;
    FR_TRY(vpack_of(s, pl, uid, ptr, n, by_value, plan_ws, io->scale, &vp));
    int st = s->api->BackendExecute(s->h, pl->plan, vp);
    if (st != FRDNN_STATUS_SUCCESS) {
        char text[640];
        fr_cudnn_status_text(s->api, st, p->backward ? "cudnnBackendExecute(attention backward)"
                                                     : "cudnnBackendExecute(attention forward)",
                             text, sizeof text);
        return fr_error(FR_ERR_DEVICE, "%s", text);
    }
    return FR_OK;
}

