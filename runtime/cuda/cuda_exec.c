/* The CUDA executor (see cuda_exec.h): a liveness plan over one device arena, constants
 * uploaded once, views that alias their input, kernels queued on one stream. */
#include "runtime/cuda/cuda_exec.h"
#include "graph/env.h"
#include "ops/cuda/cuda_gemm.h"
#include "runtime/cuda/cuda_arena.h"
#include "runtime/cuda/cuda_graph.h"
#include "runtime/exec/perf_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* K_CODED: a frozen constant held on the device only as its readers' converted copies
 * (cuda_kernel.h, "Frozen weights"): no device block; primed from the host's values. */
enum { K_NONE = 0, K_CONST, K_SHARED, K_INPUT, K_POOL, K_VIEW, K_CODED };

struct fr_cuda_exec {
    fr_cuda_ctx *c;
    const fr_graph *g;
    int nv;
    fr_cuda_plan_env plan;       /* what scratch and persistent memory are planned for (c's when c) */
    fr_tensor *hdr;              /* per value: device tensor header */
    unsigned char *kind;         /* per value: K_* */
    int *root;                   /* per value: the value whose memory it uses (views) */
    size_t *off;                 /* per value: offset in its block (const / input / arena) */
    const fr_cuda_kernel_def **kern; /* per node; NULL for views */
    size_t *scratch_off, *scratch_bytes; /* per node, in the arena */
    size_t *persist_off, *persist_bytes; /* per node, in the persistent block (cuda_kernel.h) */
    uint64_t *persist_version;   /* per node: weights_version its persistent memory holds */
    int *persist_owner;          /* per node: the node whose persistent memory and version it uses */
    int64_t *opset;              /* per node */
    unsigned char *in_set;       /* per graph input */
    void *arena, *consts, *inputs, *persist;
    size_t arena_bytes, const_bytes, input_bytes, persist_total;
    size_t coded_bytes, coded_max; /* K_CODED values: their float32 bytes not held, the largest */
    int prime_pending;           /* the K_CODED values' copies are to be made before the next run */
    void *staging;               /* pinned host copy of the inputs block */
    cudaEvent_t staging_done;    /* recorded after the last copy out of staging */
    int staging_pending;
    fr_tensor **in_args, **out_args;
    /* profiling (FP8RUN_PROFILE=1): an event before each node, time summed per node. The first
       run is not counted: the GPU idles there while the host picks GEMM algorithms and loads
       modules, and that idle time would be charged to the node waiting for it. */
    cudaEvent_t *ev;
    double *node_ms;
    int runs, first_run_done;
    int prof_nodes;              /* FP8RUN_PROFILE=2: the slowest nodes too */
    fr_cuda_gemm_timer gt;       /* events around each cuBLASLt call (cuda_gemm.h) */
    double *gemm_ms;             /* per node: time inside cuBLASLt */
    /* what the arena holds where it reaches its size, by producing op (for the out-of-memory
       error and the profile): "peak at node N: 12 GiB in 48 values of Linear bf16, ..." */
    char *peak_text;
    fr_cuda_exec_hook hook;      /* called after each node is queued (data parallel: bucket launches) */
    void *hook_ctx;
    fr_cuda_graph *graph;        /* FP8RUN_CUDA_GRAPH: runs replayed from a capture (cuda_graph.h) */
    unsigned char *held;         /* per value: 1 = held for the whole run (fr_cuda_exec_new_held) */
    size_t held_bytes;
    int accumulate; /* the held values' producers add into them (fr_cuda_exec_set_accumulate) */
};

static size_t align_up(size_t n) { return (n + FR_ARENA_ALIGN - 1) / FR_ARENA_ALIGN * FR_ARENA_ALIGN; }

/* ---- construction ---- */

void fr_cuda_exec_free(fr_cuda_exec *e)
{
    if (!e) return;
    if (e->c) cudaStreamSynchronize(e->c->stream);
    fr_cuda_graph_free(e->graph);
    if (e->arena) cudaFree(e->arena);
    if (e->consts) cudaFree(e->consts);
    if (e->inputs) cudaFree(e->inputs);
    if (e->persist) cudaFree(e->persist);
    if (e->staging) cudaFreeHost(e->staging);
    if (e->staging_done) cudaEventDestroy(e->staging_done);
    for (int i = 0; e->ev && i <= e->g->n_nodes; i++)
        if (e->ev[i]) cudaEventDestroy(e->ev[i]);
    free(e->ev);
    free(e->node_ms);
    for (int i = 0; e->gt.ev && i < 2 * e->gt.cap; i++)
        if (e->gt.ev[i]) cudaEventDestroy(e->gt.ev[i]);
    free(e->gt.ev);
    free(e->gt.node);
    free(e->gemm_ms);
    free(e->peak_text);
    free(e->hdr);
    free(e->kind);
    free(e->root);
    free(e->off);
    free(e->kern);
    free(e->scratch_off);
    free(e->scratch_bytes);
    free(e->persist_off);
    free(e->persist_bytes);
    free(e->persist_version);
    free(e->persist_owner);
    free(e->opset);
    free(e->in_set);
    free(e->in_args);
    free(e->out_args);
    free(e->held);
    free(e);
}

static fr_status value_header(const fr_value *v, fr_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (v->dtype == FR_UNDEFINED || v->rank < 0)
        return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: value '%s' has no static shape (prepare the graph)",
                        v->name);
    int64_t n;
    FR_TRY(fr_shape_numel(v->rank, v->dims, v->name, &n));
    size_t es = fr_dtype_size(v->dtype);
    if (!es) return fr_error(FR_ERR_UNSUPPORTED, "CUDA executor: value '%s' has dtype %s", v->name,
                             fr_dtype_name(v->dtype));
    if (!fr_mul_size((size_t)n, es, &t->nbytes)) return fr_error(FR_ERR_OOM, "value '%s' is too large", v->name);
    t->dtype = v->dtype;
    t->rank = v->rank;
    memcpy(t->dims, v->dims, sizeof t->dims);
    t->owns_data = 0;
    return FR_OK;
}

static const fr_tensor *shared_constant(const fr_cuda_exec *share, const fr_value *v)
{
    if (!share) return NULL;
    int sv = fr_graph_find_value(share->g, v->name);
    if (sv < 0 || (share->kind[sv] != K_CONST && share->kind[sv] != K_SHARED)) return NULL;
    const fr_tensor *t = &share->hdr[sv];
    return t->nbytes == v->constant->nbytes && t->dtype == v->dtype ? t : NULL;
}

static fr_status classify(fr_cuda_exec *e, const fr_cuda_exec *share, int *last_use)
{
    const fr_graph *g = e->g;
    for (int v = 0; v < e->nv; v++) {
        e->root[v] = v;
        last_use[v] = -1;
    }
    for (int i = 0; i < g->n_inputs; i++) e->kind[g->inputs[i]] = K_INPUT;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead || !n->op) return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: node '%s' is not prepared", n->name);
        e->opset[i] = fr_graph_opset(g, n->domain);
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            if (g->values[v].constant && e->kind[v] == K_NONE) e->kind[v] = K_CONST;
            if (e->kind[v] == K_NONE)
                return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: node '%s' reads '%s' before anything computes it",
                                n->name, g->values[v].name);
        }
        int view = fr_node_is_view(n);
        if (!view) {
            e->kern[i] = fr_cuda_kernel_find(n->domain, n->op_type);
            if (!e->kern[i])
                return fr_error(FR_ERR_UNSUPPORTED, "node '%s': op %s%s%s has no CUDA kernel (run it on the CPU)",
                                n->name, n->domain[0] ? n->domain : "", n->domain[0] ? "::" : "", n->op_type);
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            if (e->kind[v] != K_NONE || g->values[v].constant)
                return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: node '%s' writes '%s', which is already held",
                                n->name, g->values[v].name);
            e->kind[v] = view && k == 0 ? K_VIEW : K_POOL;
            if (view && k == 0) e->root[v] = e->root[n->inputs[0]];
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (g->values[v].constant && e->kind[v] == K_NONE) e->kind[v] = K_CONST;
        if (e->kind[v] == K_NONE)
            return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: nothing computes graph output '%s'", g->values[v].name);
    }
    /* headers; shared constants point into `share` */
    for (int v = 0; v < e->nv; v++) {
        if (e->kind[v] == K_NONE) continue;
        FR_TRY(value_header(&g->values[v], &e->hdr[v]));
        if (e->kind[v] == K_CONST) {
            const fr_tensor *s = shared_constant(share, &g->values[v]);
            if (s) {
                e->kind[v] = K_SHARED;
                e->hdr[v].data = s->data;
            }
        }
    }
    /* liveness per root: graph outputs live on; the last reader otherwise */
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && last_use[e->root[n->inputs[k]]] != INT_MAX) last_use[e->root[n->inputs[k]]] = i;
    }
    for (int i = 0; i < g->n_outputs; i++) last_use[e->root[g->outputs[i]]] = INT_MAX;
    return FR_OK;
}

static fr_status plan_arena(fr_cuda_exec *e, const int *last_use)
{
    const fr_graph *g = e->g;
    fr_arena_plan p = {0};
    fr_status st = FR_OK;
    int *alloc_at = fr_malloc(sizeof(int) * (size_t)(e->nv ? e->nv : 1), "arena plan");
    int *free_at = fr_malloc(sizeof(int) * (size_t)(e->nv ? e->nv : 1), "arena plan");
    if (!alloc_at || !free_at) st = FR_ERR_OOM;
    for (int v = 0; st == FR_OK && v < e->nv; v++) alloc_at[v] = -1, free_at[v] = INT_MAX;
    int peak_at = -1;
    /* held values (gradient accumulators) first, never freed: nothing placed during a run
       shares their bytes, so they keep their contents from one run to the next */
    for (int v = 0; st == FR_OK && e->held && v < e->nv; v++) {
        if (!e->held[v]) continue;
        st = fr_arena_plan_alloc(&p, e->hdr[v].nbytes, &e->off[v]);
        alloc_at[v] = 0;
        e->held_bytes += align_up(e->hdr[v].nbytes);
    }
    for (int i = 0; st == FR_OK && i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (!e->kern[i]) continue; /* a view: nothing to place */
        size_t top_before = p.top;
        for (int k = 0; st == FR_OK && k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v >= 0 && e->kind[v] == K_POOL && !(e->held && e->held[v])) {
                st = fr_arena_plan_alloc(&p, e->hdr[v].nbytes, &e->off[v]);
                alloc_at[v] = i;
            }
        }
        size_t sb = 0;
        if (st == FR_OK) st = fr_cuda_kernel_scratch(e->kern[i], &e->plan, g, n, &sb);
        if (st == FR_OK && sb) {
            e->scratch_bytes[i] = sb;
            st = fr_arena_plan_alloc(&p, sb, &e->scratch_off[i]);
            if (st == FR_OK) st = fr_arena_plan_free(&p, e->scratch_off[i], sb);
        }
        /* memory read for the last time here (and outputs nobody reads) goes back */
        for (int pass = 0; st == FR_OK && pass < 2; pass++) {
            int cnt = pass ? n->n_outputs : n->n_inputs;
            const int *ids = pass ? n->outputs : n->inputs;
            for (int k = 0; st == FR_OK && k < cnt; k++) {
                if (ids[k] < 0) continue;
                int r = e->root[ids[k]];
                if (e->kind[r] != K_POOL || last_use[r] > i || e->off[r] == (size_t)-1) continue;
                st = fr_arena_plan_free(&p, e->off[r], e->hdr[r].nbytes);
                /* keep the offset for the header; mark freed by a tag bit of kind */
                if (st == FR_OK) e->kind[r] = K_POOL | 0x80, free_at[r] = i;
            }
        }
        if (p.top > top_before) peak_at = i;
    }
    for (int v = 0; v < e->nv; v++) e->kind[v] &= 0x7F;
    const fr_arena_lifetimes lt = {e->hdr, e->held, alloc_at, free_at, e->nv, e->scratch_bytes, g->n_nodes};
    if (st == FR_OK) st = fr_arena_replan(&lt, p.top, e->off, e->scratch_off, &e->arena_bytes, &peak_at);
    if (st == FR_OK && peak_at >= 0) st = fr_arena_peak_text(e->g, &lt, peak_at, e->arena_bytes, &e->peak_text);
    free(alloc_at);
    free(free_at);
    free(p.free);
    return st;
}

/* Whether a and b read the same values after their first input and have the same attributes
 * (kernel_def.persist_shareable: then their persistent memory holds the same bytes). */
static int same_but_first_input(const fr_node *a, const fr_node *b)
{
    if (a->n_inputs != b->n_inputs || a->n_attrs != b->n_attrs) return 0;
    for (int k = 1; k < a->n_inputs; k++)
        if (a->inputs[k] != b->inputs[k]) return 0;
    for (int k = 0; k < a->n_attrs; k++) {
        const fr_attr *x = &a->attrs[k], *y = &b->attrs[k];
        if (strcmp(x->name, y->name) != 0 || x->type != y->type || x->n != y->n || x->i != y->i ||
            memcmp(&x->f, &y->f, sizeof x->f) != 0 || (x->s == NULL) != (y->s == NULL) ||
            (x->s && (x->s_len != y->s_len || memcmp(x->s, y->s, x->s_len) != 0)) ||
            (x->ints && (!y->ints || memcmp(x->ints, y->ints, (size_t)x->n * sizeof *x->ints) != 0)) ||
            (x->floats && (!y->floats || memcmp(x->floats, y->floats, (size_t)x->n * sizeof *x->floats) != 0)) ||
            x->t || y->t || x->strings || y->strings) /* tensor and string-list attributes: not compared */
            return 0;
    }
    return 1;
}

/* K_CODED: the float32 constants (not parameters, not FP8 state, not graph outputs) that only
 * priming kernels with persistent memory read, and only as their input 1 (the weight). */
static fr_status mark_coded(fr_cuda_exec *e)
{
    const fr_graph *g = e->g;
    unsigned char *ok = fr_calloc((size_t)(e->nv ? e->nv : 1), 1, "CUDA executor"); /* 1 ok so far, 2 not */
    if (!ok) return FR_ERR_OOM;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            int good = k == 1 && e->kern[i] && e->kern[i]->prime && e->persist_bytes[i] > 0;
            ok[v] = good && ok[v] != 2 ? 1 : 2;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) ok[g->outputs[i]] = 2;
    for (int v = 0; v < e->nv; v++) {
        const fr_value *val = &g->values[v];
        if (ok[v] != 1 || e->kind[v] != K_CONST || !val->constant || val->dtype != FR_F32 || !e->hdr[v].nbytes ||
            (val->flags & (FR_VAL_PARAM | FR_VAL_STATE)))
            continue;
        e->kind[v] = K_CODED;
        e->coded_bytes += align_up(e->hdr[v].nbytes);
        if (e->hdr[v].nbytes > e->coded_max) e->coded_max = e->hdr[v].nbytes;
        e->prime_pending = 1;
    }
    free(ok);
    return FR_OK;
}

/* The held values (fr_cuda_exec_new_held): each a graph output of its own memory (no view, no
 * constant, no input), output 0 of a node whose kernel can add into it, read by no node (a
 * reader would see the sum of the runs so far). */
static fr_status mark_held(fr_cuda_exec *e, const int *held, int n_held, const int *last_use)
{
    const fr_graph *g = e->g;
    if (n_held <= 0) return FR_OK;
    e->held = fr_calloc((size_t)(e->nv ? e->nv : 1), 1, "CUDA executor");
    if (!e->held) return FR_ERR_OOM;
    for (int h = 0; h < n_held; h++) {
        const int v = held[h];
        if (v < 0 || v >= e->nv) return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: held value %d out of range", v);
        const fr_value *val = &g->values[v];
        const int p = val->producer;
        if (e->kind[v] != K_POOL || e->root[v] != v || last_use[v] != INT_MAX || p < 0 || p >= g->n_nodes ||
            g->nodes[p].n_outputs < 1 || g->nodes[p].outputs[0] != v || !fr_cuda_wgrad_accumulable(g, &g->nodes[p]))
            return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: '%s' is no weight gradient to hold", val->name);
        e->held[v] = 1;
    }
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] >= 0 && e->held[e->root[g->nodes[i].inputs[k]]])
                return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: node '%s' reads a held value", g->nodes[i].name);
    return FR_OK;
}

static fr_status build(fr_cuda_ctx *c, const fr_graph *g, const fr_cuda_exec *share, int plan_only, int attention,
                       int flags, const int *held, int n_held, fr_cuda_exec **out)
{
    *out = NULL;
    if ((!c && !plan_only) || !g) return fr_error(FR_ERR_INVALID_ARG, "fr_cuda_exec_new: no context or graph");
    fr_cuda_exec *e = fr_calloc(1, sizeof *e, "CUDA executor");
    if (!e) return FR_ERR_OOM;
    e->c = c;
    e->g = g;
    e->nv = g->n_values;
    if (c) {
        e->plan = fr_cuda_plan_env_of(c);
    } else {
        const fr_cuda_plan_env planned = {NULL, attention, !(flags & FR_CUDA_PLAN_NO_WEIGHT_CACHE)};
        e->plan = planned;
    }
    size_t nv = (size_t)(e->nv ? e->nv : 1), nn = (size_t)(g->n_nodes ? g->n_nodes : 1);
    int *last_use = fr_malloc(nv * sizeof(int), "CUDA executor");
    e->hdr = fr_calloc(nv, sizeof *e->hdr, "CUDA executor");
    e->kind = fr_calloc(nv, 1, "CUDA executor");
    e->root = fr_malloc(nv * sizeof(int), "CUDA executor");
    e->off = fr_malloc(nv * sizeof(size_t), "CUDA executor");
    e->kern = fr_calloc(nn, sizeof *e->kern, "CUDA executor");
    e->scratch_off = fr_calloc(nn, sizeof(size_t), "CUDA executor");
    e->scratch_bytes = fr_calloc(nn, sizeof(size_t), "CUDA executor");
    e->persist_off = fr_calloc(nn, sizeof(size_t), "CUDA executor");
    e->persist_bytes = fr_calloc(nn, sizeof(size_t), "CUDA executor");
    e->persist_version = fr_calloc(nn, sizeof(uint64_t), "CUDA executor");
    e->persist_owner = fr_calloc(nn, sizeof(int), "CUDA executor");
    e->opset = fr_calloc(nn, sizeof(int64_t), "CUDA executor");
    e->in_set = fr_calloc((size_t)(g->n_inputs ? g->n_inputs : 1), 1, "CUDA executor");
    fr_status st = FR_OK;
    if (!last_use || !e->hdr || !e->kind || !e->root || !e->off || !e->kern || !e->scratch_off || !e->scratch_bytes ||
        !e->persist_off || !e->persist_bytes || !e->persist_version || !e->persist_owner || !e->opset || !e->in_set)
        st = FR_ERR_OOM;
    int widest = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].n_inputs > widest) widest = g->nodes[i].n_inputs;
        if (g->nodes[i].n_outputs > widest) widest = g->nodes[i].n_outputs;
    }
    if (st == FR_OK) {
        e->in_args = fr_calloc((size_t)widest, sizeof(fr_tensor *), "CUDA executor");
        e->out_args = fr_calloc((size_t)widest, sizeof(fr_tensor *), "CUDA executor");
        if (!e->in_args || !e->out_args) st = FR_ERR_OOM;
    }
    for (int v = 0; st == FR_OK && v < e->nv; v++) e->off[v] = (size_t)-1;
    if (st == FR_OK) st = classify(e, share, last_use);
    if (st == FR_OK) st = mark_held(e, held, n_held, last_use);
    if (st == FR_OK) st = plan_arena(e, last_use);
    /* persistent memory of the kernels that keep some (cuda_kernel.h): one block */
    for (int i = 0; st == FR_OK && i < g->n_nodes; i++) {
        e->persist_owner[i] = i;
        if (!e->kern[i] || !e->kern[i]->persist) continue;
        st = e->kern[i]->persist(&e->plan, g, &g->nodes[i], &e->persist_bytes[i]);
        for (int j = 0; st == FR_OK && e->persist_bytes[i] && e->kern[i]->persist_shareable && j < i; j++)
            if (e->persist_owner[j] == j && e->kern[j] == e->kern[i] && e->persist_bytes[j] == e->persist_bytes[i] &&
                same_but_first_input(&g->nodes[j], &g->nodes[i])) {
                e->persist_owner[i] = j;
                e->persist_off[i] = e->persist_off[j];
                break;
            }
        if (st == FR_OK && e->persist_bytes[i] && e->persist_owner[i] == i) {
            e->persist_off[i] = e->persist_total;
            e->persist_total += align_up(e->persist_bytes[i]);
        }
    }
    if (st == FR_OK && e->plan.weight_cache && (c ? c->codes_only : flags & FR_CUDA_PLAN_CODES_ONLY))
        st = mark_coded(e);
    /* constants and inputs: one block each */
    for (int v = 0; st == FR_OK && v < e->nv; v++) {
        if (e->kind[v] == K_CONST) {
            e->off[v] = e->const_bytes;
            e->const_bytes += align_up(e->hdr[v].nbytes ? e->hdr[v].nbytes : 1);
        } else if (e->kind[v] == K_INPUT) {
            e->off[v] = e->input_bytes;
            e->input_bytes += align_up(e->hdr[v].nbytes ? e->hdr[v].nbytes : 1);
        }
    }
    if (plan_only) /* fr_cuda_exec_plan: the sizes are known, nothing is allocated */
        goto finish;
    if (e->arena_bytes) FR_CUDA_KEEP(st, cudaMalloc(&e->arena, e->arena_bytes));
    if (e->const_bytes) FR_CUDA_KEEP(st, cudaMalloc(&e->consts, e->const_bytes));
    if (e->persist_total) {
        FR_CUDA_KEEP(st, cudaMalloc(&e->persist, e->persist_total));
        FR_CUDA_KEEP(st, cudaMemset(e->persist, 0, e->persist_total));
    }
    if (e->input_bytes) {
        FR_CUDA_KEEP(st, cudaMalloc(&e->inputs, e->input_bytes));
        FR_CUDA_KEEP(st, cudaMallocHost(&e->staging, e->input_bytes));
    }
    FR_CUDA_KEEP(st, cudaEventCreateWithFlags(&e->staging_done, cudaEventDisableTiming));
    const char *prof = fr_env_get(FR_ENV_PROFILE);
    if (st == FR_OK && prof && (prof[0] == '1' || prof[0] == '2')) {
        e->prof_nodes = prof[0] == '2';
        e->ev = fr_calloc((size_t)g->n_nodes + 1, sizeof *e->ev, "profile events");
        e->node_ms = fr_calloc((size_t)g->n_nodes + 1, sizeof *e->node_ms, "profile times");
        e->gemm_ms = fr_calloc((size_t)g->n_nodes + 1, sizeof *e->gemm_ms, "profile GEMM times");
        int gemms = 8; /* two cuBLASLt calls per GEMM node at most are timed, a few spare */
        for (int i = 0; i < g->n_nodes; i++) {
            const char *op = g->nodes[i].op_type;
            gemms += 2 * (strncmp(op, "Linear", 6) == 0 || strcmp(op, "MatMul") == 0 || strcmp(op, "Gemm") == 0 ||
                          strcmp(op, "Einsum") == 0);
        }
        e->gt.cap = gemms;
        e->gt.ev = fr_calloc((size_t)gemms * 2, sizeof *e->gt.ev, "profile GEMM events");
        e->gt.node = fr_calloc((size_t)gemms, sizeof *e->gt.node, "profile GEMM nodes");
        if (!e->ev || !e->node_ms || !e->gemm_ms || !e->gt.ev || !e->gt.node) st = FR_ERR_OOM;
        for (int i = 0; st == FR_OK && i <= g->n_nodes; i++) FR_CUDA_KEEP(st, cudaEventCreate(&e->ev[i]));
        for (int i = 0; st == FR_OK && i < 2 * gemms; i++) FR_CUDA_KEEP(st, cudaEventCreate(&e->gt.ev[i]));
    }
    if (st != FR_OK && st == FR_ERR_DEVICE)
        st = fr_error_context(st, "allocating %zu MiB of device memory for '%s' (arena %zu MiB, constants %zu MiB, "
                              "converted weights %zu MiB; %s)",
                              (e->arena_bytes + e->const_bytes + e->input_bytes + e->persist_total) >> 20,
                              g->name ? g->name : "the graph", e->arena_bytes >> 20, e->const_bytes >> 20,
                              e->persist_total >> 20, e->peak_text ? e->peak_text : "");
    for (int v = 0; st == FR_OK && v < e->nv; v++) {
        switch (e->kind[v]) {
        case K_CONST:
            e->hdr[v].data = (char *)e->consts + e->off[v];
            if (e->hdr[v].nbytes)
                FR_CUDA_KEEP(st, cudaMemcpy(e->hdr[v].data, g->values[v].constant->data, e->hdr[v].nbytes,
                                            cudaMemcpyHostToDevice));
            break;
        case K_INPUT: e->hdr[v].data = (char *)e->inputs + e->off[v]; break;
        case K_POOL: e->hdr[v].data = (char *)e->arena + e->off[v]; break;
        default: break;
        }
    }
    /* views last: their root is placed now (roots come before their views in value order or not) */
    for (int v = 0; st == FR_OK && v < e->nv; v++)
        if (e->kind[v] == K_VIEW) e->hdr[v].data = e->hdr[e->root[v]].data;
    /* the constants went through the legacy stream, which the executor's non-blocking stream
     * does not wait for */
    FR_CUDA_KEEP(st, cudaDeviceSynchronize());
finish:
    free(last_use);
    if (st != FR_OK) {
        fr_cuda_exec_free(e);
        return st;
    }
    *out = e;
    return FR_OK;
}

/* ---- inputs ---- */

fr_status fr_cuda_exec_set_input(fr_cuda_exec *e, const char *name, const fr_tensor *t)
{
    const fr_graph *g = e->g;
    int idx = -1;
    for (int i = 0; i < g->n_inputs && name; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0) idx = i;
    if (idx < 0) return fr_error(FR_ERR_INVALID_ARG, "the graph has no input named '%s'", name ? name : "(null)");
    int v = g->inputs[idx];
    fr_tensor *dst = &e->hdr[v];
    int same = t && t->dtype == dst->dtype && t->rank == dst->rank && t->nbytes >= dst->nbytes;
    for (int d = 0; same && d < t->rank; d++) same = t->dims[d] == dst->dims[d];
    if (!same) {
        char want[256];
        return fr_error(FR_ERR_SHAPE, "input '%s': expected %s %s", name, fr_dtype_name(dst->dtype),
                        fr_shape_str(dst->rank, dst->dims, want, sizeof want));
    }
    if (dst->nbytes) {
        /* the staging copy of this input may still be in flight from the last run */
        if (e->staging_pending) FR_CUDA_TRY(cudaEventSynchronize(e->staging_done));
        e->staging_pending = 0;
        char *stage = (char *)e->staging + e->off[v];
        memcpy(stage, t->data, dst->nbytes);
        FR_CUDA_TRY(cudaMemcpyAsync(dst->data, stage, dst->nbytes, cudaMemcpyHostToDevice, e->c->stream));
    }
    e->in_set[idx] = 1;
    return FR_OK;
}

/* ---- running ---- */

/* The nodes of one run, in order, on the context's stream. */
static fr_status run_nodes(fr_cuda_exec *e)
{
    const fr_graph *g = e->g;
    for (int i = 0; i < g->n_nodes; i++) {
        e->gt.node_now = i;
        if (e->ev) FR_CUDA_TRY(cudaEventRecord(e->ev[i], e->c->stream));
        if (!e->kern[i]) {
            if (e->hook) FR_TRY(e->hook(e->hook_ctx, i));
            continue;
        }
        const fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++) e->in_args[k] = n->inputs[k] >= 0 ? &e->hdr[n->inputs[k]] : NULL;
        for (int k = 0; k < n->n_outputs; k++) e->out_args[k] = n->outputs[k] >= 0 ? &e->hdr[n->outputs[k]] : NULL;
        void *scratch = e->scratch_bytes[i] ? (char *)e->arena + e->scratch_off[i] : NULL;
        void *persist = e->persist_bytes[i] ? (char *)e->persist + e->persist_off[i] : NULL;
        fr_cuda_kctx k = {g, n, e->opset[i], n->n_inputs, n->n_outputs, e->in_args, e->out_args, e->c,
                          scratch, e->scratch_bytes[i], persist, e->persist_bytes[i],
                          &e->persist_version[e->persist_owner[i]]};
        e->c->accumulate_out = e->accumulate && n->n_outputs > 0 && n->outputs[0] >= 0 && e->held[n->outputs[0]];
        fr_status st = e->kern[i]->run(&k);
        e->c->accumulate_out = 0;
        if (st != FR_OK) {
            if (!strstr(fr_last_error(), n->name))
                st = fr_error_context(st, "node '%s' (%s) on the GPU", n->name, n->op_type);
            return st;
        }
        if (e->hook) FR_TRY(e->hook(e->hook_ctx, i));
    }
    return FR_OK;
}

/* The converted copies of the K_CODED values, from the host's float32 values through one
 * temporary device buffer: the arena when it is large enough (nothing in it is live between
 * runs that this run would not write again), else a buffer freed after the stream drains. */
static fr_status prime_coded(fr_cuda_exec *e)
{
    const fr_graph *g = e->g;
    /* not the arena when it holds accumulators (fr_cuda_exec_new_held): they are live between runs */
    void *tmp = e->arena_bytes >= e->coded_max && !e->held ? e->arena : NULL, *own = NULL;
    if (!tmp) FR_CUDA_TRY(cudaMalloc(&own, e->coded_max));
    if (own) tmp = own;
    fr_status st = FR_OK;
    for (int v = 0; st == FR_OK && v < e->nv; v++) {
        if (e->kind[v] != K_CODED) continue;
        FR_CUDA_KEEP(st, cudaMemcpyAsync(tmp, g->values[v].constant->data, e->hdr[v].nbytes, cudaMemcpyHostToDevice,
                                         e->c->stream));
        fr_tensor w = e->hdr[v];
        w.data = tmp;
        for (int i = 0; st == FR_OK && i < g->n_nodes; i++) {
            const fr_node *n = &g->nodes[i];
            if (n->n_inputs < 2 || n->inputs[1] != v || e->persist_owner[i] != i) continue; /* a sharer: its owner's */
            for (int k = 0; k < n->n_inputs; k++) e->in_args[k] = n->inputs[k] >= 0 ? &e->hdr[n->inputs[k]] : NULL;
            for (int k = 0; k < n->n_outputs; k++) e->out_args[k] = n->outputs[k] >= 0 ? &e->hdr[n->outputs[k]] : NULL;
            e->in_args[1] = &w;
            fr_cuda_kctx k = {g, n, e->opset[i], n->n_inputs, n->n_outputs, e->in_args, e->out_args, e->c, NULL, 0,
                              (char *)e->persist + e->persist_off[i], e->persist_bytes[i], &e->persist_version[i]};
            st = e->kern[i]->prime(&k);
        }
    }
    if (own) {
        FR_CUDA_KEEP(st, cudaStreamSynchronize(e->c->stream));
        cudaFree(own);
    }
    if (st == FR_OK) e->prime_pending = 0;
    return st;
}

static fr_status queue_nodes(void *e) { return run_nodes(e); }

fr_status fr_cuda_exec_use_graph(fr_cuda_exec *e, const char *refusal)
{
    const fr_cuda_graph_nodes n = {e->c, e->g->n_nodes, e->persist_version, e->persist_owner, e->persist_bytes,
                                   queue_nodes, e};
    fr_cuda_graph_free(e->graph);
    e->graph = NULL;
    return fr_cuda_graph_new(&n, e->ev ? "profiling (FP8RUN_PROFILE times every node)" : refusal, &e->graph);
}

const fr_cuda_graph *fr_cuda_exec_graph(const fr_cuda_exec *e) { return e->graph; }

void fr_cuda_exec_reprime(fr_cuda_exec *e)
{
    if (e && e->coded_bytes) e->prime_pending = 1;
}

size_t fr_cuda_exec_coded_bytes(const fr_cuda_exec *e) { return e->coded_bytes; }

fr_status fr_cuda_exec_run(fr_cuda_exec *e)
{
    const fr_graph *g = e->g;
    for (int i = 0; i < g->n_inputs; i++)
        if (!e->in_set[i] && e->hdr[g->inputs[i]].nbytes)
            return fr_error(FR_ERR_INVALID_ARG, "input '%s' was not set before the run", g->values[g->inputs[i]].name);
    if (e->prime_pending) FR_TRY(prime_coded(e));
    FR_CUDA_TRY(cudaEventRecord(e->staging_done, e->c->stream));
    e->staging_pending = 1;
    e->gt.used = 0;
    e->c->gemm_timer = e->ev ? &e->gt : NULL; /* this run's GEMMs are timed for this executor */
    fr_status st = e->graph && !e->ev && !e->hook ? fr_cuda_graph_run(e->graph) : run_nodes(e);
    e->c->gemm_timer = NULL;
    FR_TRY(st);
    if (e->ev) { /* profiling only: wait for the run and add each node's time */
        FR_CUDA_TRY(cudaEventRecord(e->ev[g->n_nodes], e->c->stream));
        FR_CUDA_TRY(cudaEventSynchronize(e->ev[g->n_nodes]));
        if (!e->first_run_done) {
            e->first_run_done = 1;
            return FR_OK;
        }
        for (int i = 0; i < g->n_nodes; i++) {
            float ms = 0;
            FR_CUDA_TRY(cudaEventElapsedTime(&ms, e->ev[i], e->ev[i + 1]));
            e->node_ms[i] += ms;
        }
        for (int k = 0; k < e->gt.used; k++) {
            float ms = 0;
            FR_CUDA_TRY(cudaEventElapsedTime(&ms, e->gt.ev[2 * k], e->gt.ev[2 * k + 1]));
            if (e->gt.node[k] >= 0 && e->gt.node[k] < g->n_nodes) e->gemm_ms[e->gt.node[k]] += ms;
        }
        e->runs++;
    }
    return FR_OK;
}

fr_status fr_cuda_exec_profile(const fr_cuda_exec *e, char **text)
{
    *text = NULL;
    if (!e->ev || e->runs == 0) return FR_OK;
    const fr_profile_input in = {e->g, e->node_ms, e->gemm_ms, e->runs, e->c ? e->c->name : NULL, e->peak_text,
                                 e->prof_nodes, fr_cuda_attention_generic(e->c)}; /* (passes/fast_path.h) */
    return fr_profile_text(&in, text); /* runtime/exec/perf_model.c: with each op's ceiling */
}

fr_status fr_cuda_exec_sync(fr_cuda_exec *e) { return fr_cuda_check_error(e->c, e->g); }

/* ---- values ---- */

fr_tensor *fr_cuda_exec_value(fr_cuda_exec *e, int vid)
{
    if (vid < 0 || vid >= e->nv || e->kind[vid] == K_NONE || e->kind[vid] == K_CODED) return NULL;
    return &e->hdr[vid];
}

void fr_cuda_exec_set_hook(fr_cuda_exec *e, fr_cuda_exec_hook hook, void *ctx)
{
    e->hook = hook;
    e->hook_ctx = ctx;
}

int fr_cuda_exec_last_touch(const fr_cuda_exec *e, int vid)
{
    if (vid < 0 || vid >= e->nv) return -1;
    const int r = e->root[vid];
    int last = -1;
    for (int i = 0; i < e->g->n_nodes; i++) {
        const fr_node *n = &e->g->nodes[i];
        if (!e->kern[i]) continue; /* a view moves no data */
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0 && e->root[n->inputs[k]] == r) last = i;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && e->root[n->outputs[k]] == r) last = i;
    }
    return last;
}

fr_tensor *fr_cuda_exec_output_at(fr_cuda_exec *e, int i)
{
    return i < 0 || i >= e->g->n_outputs ? NULL : fr_cuda_exec_value(e, e->g->outputs[i]);
}

fr_status fr_cuda_exec_download(fr_cuda_exec *e, int vid, void *dst, size_t bytes)
{
    fr_tensor *t = fr_cuda_exec_value(e, vid);
    if (!t || bytes > t->nbytes)
        return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: value %d is not held or is smaller than %zu bytes", vid,
                        bytes);
    FR_TRY(fr_cuda_exec_sync(e));
    if (bytes) FR_CUDA_TRY(cudaMemcpy(dst, t->data, bytes, cudaMemcpyDeviceToHost));
    return FR_OK;
}

static fr_status constant_of(fr_cuda_exec *e, int vid, fr_tensor **t)
{
    *t = fr_cuda_exec_value(e, vid);
    if (!*t || (e->kind[vid] != K_CONST && e->kind[vid] != K_SHARED) || !e->g->values[vid].constant)
        return fr_error(FR_ERR_INVALID_ARG, "CUDA executor: value '%s' is not a constant on the device",
                        vid >= 0 && vid < e->nv ? e->g->values[vid].name : "?");
    return FR_OK;
}

fr_status fr_cuda_exec_upload_constant(fr_cuda_exec *e, int vid)
{
    if (vid >= 0 && vid < e->nv && e->kind[vid] == K_CODED) { /* read from the host when primed */
        FR_CUDA_TRY(cudaStreamSynchronize(e->c->stream));
        fr_cuda_weights_changed(e->c);
        e->prime_pending = 1;
        return FR_OK;
    }
    fr_tensor *t;
    FR_TRY(constant_of(e, vid, &t));
    FR_CUDA_TRY(cudaStreamSynchronize(e->c->stream));
    fr_cuda_weights_changed(e->c); /* what kernels derived from the constants is stale */
    if (t->nbytes)
        FR_CUDA_TRY(cudaMemcpyAsync(t->data, e->g->values[vid].constant->data, t->nbytes, cudaMemcpyHostToDevice,
                                    e->c->stream));
    FR_CUDA_TRY(cudaStreamSynchronize(e->c->stream)); /* the host buffer may change after return */
    return FR_OK;
}

fr_status fr_cuda_exec_download_constant(fr_cuda_exec *e, int vid)
{
    if (vid >= 0 && vid < e->nv && e->kind[vid] == K_CODED) return FR_OK; /* the device never changes it */
    fr_tensor *t;
    FR_TRY(constant_of(e, vid, &t));
    FR_TRY(fr_cuda_exec_sync(e));
    if (t->nbytes)
        FR_CUDA_TRY(cudaMemcpy(e->g->values[vid].constant->data, t->data, t->nbytes, cudaMemcpyDeviceToHost));
    return FR_OK;
}

size_t fr_cuda_exec_arena_bytes(const fr_cuda_exec *e) { return e->arena_bytes; }
size_t fr_cuda_exec_const_bytes(const fr_cuda_exec *e) { return e->const_bytes; }
size_t fr_cuda_exec_input_bytes(const fr_cuda_exec *e) { return e->input_bytes; }
size_t fr_cuda_exec_persist_bytes(const fr_cuda_exec *e) { return e->persist_total; }

fr_status fr_cuda_exec_new(fr_cuda_ctx *c, const fr_graph *g, const fr_cuda_exec *share, fr_cuda_exec **out)
{
    return build(c, g, share, 0, c ? c->attention : FR_CUDA_ATTN_FP8RUN, 0, NULL, 0, out);
}

fr_status fr_cuda_exec_new_held(fr_cuda_ctx *c, const fr_graph *g, const int *held, int n_held, fr_cuda_exec **out)
{
    return build(c, g, NULL, 0, c ? c->attention : FR_CUDA_ATTN_FP8RUN, 0, held, n_held, out);
}

fr_status fr_cuda_exec_set_accumulate(fr_cuda_exec *e, int on)
{
    if (on && (!e->held || e->graph)) /* a CUDA graph would replay the GEMMs as captured */
        return fr_error(FR_ERR_INTERNAL, "CUDA executor: accumulation without held values or with CUDA graph replay");
    e->accumulate = on != 0;
    return FR_OK;
}

size_t fr_cuda_exec_held_bytes(const fr_cuda_exec *e) { return e->held_bytes; }

fr_status fr_cuda_exec_plan(const fr_graph *g, fr_cuda_exec_sizes *out)
{
    return fr_cuda_exec_plan_with(g, FR_CUDA_ATTN_FP8RUN, out);
}

fr_status fr_cuda_exec_plan_with(const fr_graph *g, int attention, fr_cuda_exec_sizes *out)
{
    return fr_cuda_exec_plan_codes(g, attention, 0, out);
}

fr_status fr_cuda_exec_plan_codes(const fr_graph *g, int attention, int flags, fr_cuda_exec_sizes *out)
{
    return fr_cuda_exec_plan_held(g, attention, flags, NULL, 0, out);
}

fr_status fr_cuda_exec_plan_held(const fr_graph *g, int attention, int flags, const int *held, int n_held,
                                 fr_cuda_exec_sizes *out)
{
    fr_cuda_exec *e = NULL;
    memset(out, 0, sizeof *out);
    fr_status st = build(NULL, g, NULL, 1, attention, flags, held, n_held, &e);
    if (e) {
        out->arena = e->arena_bytes;
        out->consts = e->const_bytes;
        out->inputs = e->input_bytes;
        out->persist = e->persist_total;
        out->coded = e->coded_bytes;
        out->held = e->held_bytes;
        if (e->peak_text) snprintf(out->peak, sizeof out->peak, "%s", e->peak_text);
    }
    fr_cuda_exec_free(e);
    return st;
}
