/* CPU executor (see executor.h). The buffer plan is made once in fr_exec_new by walking the
 * nodes in order with a pool of free blocks, the way a run would allocate and free them;
 * fr_exec_run then only calls kernels. */
#include "runtime/exec/executor.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "runtime/exec/host_memory.h"

enum { SRC_NONE = 0, SRC_CONST, SRC_INPUT, SRC_POOL };

struct fr_exec {
    const fr_graph *g;
    int n_values;
    fr_tensor *hdr;          /* per value: the tensor header kernels see (inputs, pool values) */
    fr_tensor **ptr;         /* per value: what kernels read/write, NULL when never used */
    unsigned char *src;      /* per value: SRC_* */
    unsigned char *needed;   /* per graph input: some node reads it or it is a graph output */
    unsigned char *is_set;   /* per graph input: fr_exec_set_input was called */
    int64_t *opset;          /* per node */
    fr_tensor **in_args, **out_args; /* scratch for kernel calls, sized for the widest node */
    void **blocks;
    size_t *block_size;
    int n_blocks;
    size_t pool_bytes;
    size_t peak_bytes;       /* the most bytes of computed values alive at once in the plan */
    size_t input_bytes;
    int plan_only;           /* fr_exec_plan: sizes only, no buffers */
    int ran;
};

static fr_status not_prepared(const char *what, const char *name)
{
    return fr_error(FR_ERR_INVALID_ARG,
                    "the graph is not prepared for execution (run fr_prepare_forward): %s '%s'",
                    what, name);
}

static fr_status value_bytes(const fr_value *v, size_t *bytes)
{
    size_t es = fr_dtype_size(v->dtype);
    int64_t n;
    if (v->dtype == FR_UNDEFINED || v->rank < 0) return not_prepared("no dtype/shape for value", v->name);
    if (es == 0)
        return fr_error(FR_ERR_UNSUPPORTED, "value '%s' has dtype %s, which fp8run cannot hold",
                        v->name, fr_dtype_name(v->dtype));
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] < 0) return not_prepared("unknown dimension in value", v->name);
    FR_TRY(fr_shape_numel(v->rank, v->dims, v->name, &n));
    if ((uint64_t)n > SIZE_MAX || !fr_mul_size((size_t)n, es, bytes))
        return fr_error(FR_ERR_OOM, "value '%s': byte size overflows", v->name);
    return FR_OK;
}

static void set_header(fr_tensor *t, const fr_value *v, size_t bytes)
{
    memset(t, 0, sizeof *t);
    t->dtype = v->dtype;
    t->rank = v->rank;
    for (int d = 0; d < v->rank; d++) t->dims[d] = v->dims[d];
    t->nbytes = bytes;
    t->owns_data = 0;
}

void fr_exec_free(fr_exec *e)
{
    if (!e) return;
    if (e->hdr)
        for (int v = 0; v < e->n_values; v++)
            if (e->src[v] == SRC_INPUT) free(e->hdr[v].data);
    for (int b = 0; e->blocks && b < e->n_blocks; b++) free(e->blocks[b]);
    free(e->blocks);
    free(e->block_size);
    free(e->hdr);
    free(e->ptr);
    free(e->src);
    free(e->needed);
    free(e->is_set);
    free(e->opset);
    free(e->in_args);
    free(e->out_args);
    free(e);
}

/* ---- the pool plan ---- */

typedef struct plan {
    int *block_of;    /* per value: block index, -1 */
    int *free_list;   /* block indices currently free */
    int n_free;
} plan;

static fr_status grow_blocks(fr_exec *e)
{
    int ncap = e->n_blocks + 1;
    size_t *ns = fr_realloc_array(e->block_size, (size_t)ncap, sizeof *ns, "executor pool");
    if (!ns) return FR_ERR_OOM;
    e->block_size = ns;
    return FR_OK;
}

/* Best fit among free blocks; else grow the largest free block; else a new block. */
static fr_status take_block(fr_exec *e, plan *p, size_t need, int *out)
{
    int best = -1, largest = -1;
    for (int k = 0; k < p->n_free; k++) {
        int b = p->free_list[k];
        if (e->block_size[b] >= need && (best < 0 || e->block_size[b] < e->block_size[p->free_list[best]]))
            best = k;
        if (largest < 0 || e->block_size[b] > e->block_size[p->free_list[largest]]) largest = k;
    }
    int pick = best >= 0 ? best : largest;
    if (pick >= 0) {
        int b = p->free_list[pick];
        p->free_list[pick] = p->free_list[--p->n_free];
        if (e->block_size[b] < need) e->block_size[b] = need;
        *out = b;
        return FR_OK;
    }
    FR_TRY(grow_blocks(e));
    e->block_size[e->n_blocks] = need;
    *out = e->n_blocks++;
    return FR_OK;
}

/* Each graph input's own buffer. */
static fr_status alloc_inputs(fr_exec *e)
{
    for (int v = 0; v < e->n_values; v++)
        if (e->src[v] == SRC_INPUT && e->hdr[v].nbytes) {
            e->hdr[v].data = fr_calloc(1, e->hdr[v].nbytes, e->g->values[v].name);
            if (!e->hdr[v].data) return FR_ERR_OOM;
        }
    return FR_OK;
}

static fr_status make_plan(fr_exec *e, const int *last_use)
{
    const fr_graph *g = e->g;
    plan p = {0};
    fr_status st = FR_OK;
    p.block_of = fr_malloc((size_t)e->n_values * sizeof(int), "executor plan");
    /* at most one free entry per value ever computed */
    p.free_list = fr_malloc((size_t)e->n_values * sizeof(int), "executor plan");
    if (!p.block_of || !p.free_list) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int v = 0; v < e->n_values; v++) p.block_of[v] = -1;
    size_t live = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0 || e->hdr[v].nbytes == 0) continue;
            st = take_block(e, &p, e->hdr[v].nbytes, &p.block_of[v]);
            if (st != FR_OK) goto done;
            live += e->hdr[v].nbytes;
        }
        if (live > e->peak_bytes) e->peak_bytes = live;
        /* inputs read for the last time, and outputs nobody reads, give their block back;
         * outputs were placed before this, so a node never writes into its own inputs */
        for (int pass = 0; pass < 2; pass++) {
            int cnt = pass ? n->n_outputs : n->n_inputs;
            const int *ids = pass ? n->outputs : n->inputs;
            for (int k = 0; k < cnt; k++) {
                int v = ids[k];
                if (v < 0 || p.block_of[v] < 0 || e->src[v] != SRC_POOL) continue;
                if (last_use[v] > i) continue;
                p.free_list[p.n_free++] = p.block_of[v];
                p.block_of[v] = -2 - p.block_of[v]; /* released; keeps the block number */
                live -= e->hdr[v].nbytes;
            }
        }
    }
    e->blocks = fr_calloc((size_t)(e->n_blocks ? e->n_blocks : 1), sizeof(void *), "executor pool");
    if (!e->blocks) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int b = 0; b < e->n_blocks; b++)
        e->pool_bytes = e->pool_bytes > SIZE_MAX - e->block_size[b] ? SIZE_MAX : e->pool_bytes + e->block_size[b];
    /* the whole plan is known: refuse it before allocating when the machine cannot hold it */
    int big = -1;
    for (int v = 0; v < e->n_values; v++)
        if ((e->src[v] == SRC_POOL || e->src[v] == SRC_INPUT) && (big < 0 || e->hdr[v].nbytes > e->hdr[big].nbytes))
            big = v;
    if (!e->plan_only) st = fr_host_memory_check_plan(g, e->pool_bytes, e->n_blocks, e->input_bytes, big);
    if (st == FR_OK && !e->plan_only) st = alloc_inputs(e);
    for (int b = 0; st == FR_OK && b < e->n_blocks && !e->plan_only; b++) {
        e->blocks[b] = fr_malloc(e->block_size[b], "executor pool block");
        if (!e->blocks[b]) st = FR_ERR_OOM;
    }
    if (st != FR_OK) goto done;
    for (int v = 0; v < e->n_values; v++) {
        if (e->src[v] != SRC_POOL) continue;
        int b = p.block_of[v];
        if (b <= -2) b = -2 - b;
        e->hdr[v].data = b >= 0 ? e->blocks[b] : NULL;
    }
done:
    free(p.block_of);
    free(p.free_list);
    return st;
}

/* ---- construction ---- */

static fr_status build(const fr_graph *g, int plan_only, fr_exec **out)
{
    *out = NULL;
    if (!g) return fr_error(FR_ERR_INVALID_ARG, "fr_exec_new: no graph");
    fr_exec *e = fr_calloc(1, sizeof *e, "executor");
    if (!e) return FR_ERR_OOM;
    e->g = g;
    e->plan_only = plan_only;
    e->n_values = g->n_values;
    size_t nv = (size_t)(g->n_values ? g->n_values : 1);
    size_t ni = (size_t)(g->n_inputs ? g->n_inputs : 1);
    int *last_use = fr_malloc(nv * sizeof(int), "executor liveness");
    e->hdr = fr_calloc(nv, sizeof *e->hdr, "executor tensors");
    e->ptr = fr_calloc(nv, sizeof *e->ptr, "executor tensors");
    e->src = fr_calloc(nv, 1, "executor tensors");
    e->needed = fr_calloc(ni, 1, "executor inputs");
    e->is_set = fr_calloc(ni, 1, "executor inputs");
    e->opset = fr_calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof(int64_t), "executor nodes");
    fr_status st = FR_OK;
    if (!last_use || !e->hdr || !e->ptr || !e->src || !e->needed || !e->is_set || !e->opset) {
        st = FR_ERR_OOM;
        goto fail;
    }
    for (int v = 0; v < g->n_values; v++) last_use[v] = -1;
    for (int i = 0; i < g->n_outputs; i++) last_use[g->outputs[i]] = INT_MAX;

    /* where each value lives, checking the node order as we go */
    int widest = 1;
    for (int i = 0; i < g->n_inputs; i++) e->src[g->inputs[i]] = SRC_INPUT;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead) {
            st = not_prepared("dead node still in the graph:", n->name);
            goto fail;
        }
        if (!n->op || !n->op->cpu) {
            st = n->op ? fr_error(FR_ERR_UNSUPPORTED, "node '%s' (%s): the op has no CPU kernel",
                                  n->name, n->op_type)
                       : not_prepared("op not resolved for node", n->name);
            goto fail;
        }
        e->opset[i] = fr_graph_opset(g, n->domain);
        if (n->n_inputs > widest) widest = n->n_inputs;
        if (n->n_outputs > widest) widest = n->n_outputs;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            if (g->values[v].constant) {
                e->src[v] = SRC_CONST;
            } else if (e->src[v] == SRC_NONE) {
                st = fr_error(FR_ERR_INVALID_ARG,
                              "the graph is not prepared for execution: node '%s' (%s) reads '%s' "
                              "before any node computes it",
                              n->name, n->op_type, g->values[v].name);
                goto fail;
            }
            if (last_use[v] != INT_MAX) last_use[v] = i;
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            if (e->src[v] != SRC_NONE || g->values[v].constant) {
                st = fr_error(FR_ERR_INVALID_ARG,
                              "the graph is not prepared for execution: node '%s' (%s) writes "
                              "'%s', which is an input, a constant or written before",
                              n->name, n->op_type, g->values[v].name);
                goto fail;
            }
            e->src[v] = SRC_POOL;
        }
    }
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        if (g->values[v].constant) e->src[v] = SRC_CONST;
        if (e->src[v] == SRC_NONE) {
            st = not_prepared("nothing computes graph output", g->values[v].name);
            goto fail;
        }
    }

    /* headers and sizes; graph inputs get their own buffers */
    for (int v = 0; v < g->n_values; v++) {
        const fr_value *val = &g->values[v];
        size_t bytes = 0;
        switch (e->src[v]) {
        case SRC_CONST:
            e->ptr[v] = val->constant;
            break;
        case SRC_INPUT:
        case SRC_POOL:
            st = value_bytes(val, &bytes);
            if (st != FR_OK) goto fail;
            set_header(&e->hdr[v], val, bytes);
            e->ptr[v] = &e->hdr[v];
            if (e->src[v] == SRC_INPUT) /* allocated after the memory check (make_plan) */
                e->input_bytes = e->input_bytes > SIZE_MAX - bytes ? SIZE_MAX : e->input_bytes + bytes;
            break;
        default:
            break;
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        e->needed[i] = last_use[v] >= 0;
    }
    e->in_args = fr_calloc((size_t)widest, sizeof(fr_tensor *), "executor scratch");
    e->out_args = fr_calloc((size_t)widest, sizeof(fr_tensor *), "executor scratch");
    if (!e->in_args || !e->out_args) {
        st = FR_ERR_OOM;
        goto fail;
    }
    st = make_plan(e, last_use);
    if (st != FR_OK) goto fail;
    free(last_use);
    *out = e;
    return FR_OK;
fail:
    free(last_use);
    fr_exec_free(e);
    return st;
}

fr_status fr_exec_new(const fr_graph *g, fr_exec **out) { return build(g, 0, out); }

fr_status fr_exec_plan(const fr_graph *g, size_t *pool_bytes, size_t *input_bytes)
{
    fr_exec *e;
    FR_TRY(build(g, 1, &e));
    *pool_bytes = e->pool_bytes;
    if (input_bytes) *input_bytes = e->input_bytes;
    fr_exec_free(e);
    return FR_OK;
}

/* ---- inputs ---- */

int fr_exec_n_inputs(const fr_exec *e) { return e->g->n_inputs; }

const fr_value *fr_exec_input(const fr_exec *e, int i)
{
    if (i < 0 || i >= e->g->n_inputs) return NULL;
    return &e->g->values[e->g->inputs[i]];
}

fr_status fr_exec_set_input(fr_exec *e, const char *name, const fr_tensor *t)
{
    const fr_graph *g = e->g;
    int idx = -1;
    for (int i = 0; i < g->n_inputs && name; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0) idx = i;
    if (idx < 0) {
        char names[512];
        size_t off = 0;
        names[0] = '\0';
        for (int i = 0; i < g->n_inputs && off < sizeof names; i++)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s'%s'", i ? ", " : "",
                                    g->values[g->inputs[i]].name);
        return fr_error(FR_ERR_INVALID_ARG, "the graph has no input named '%s' (its inputs: %s)",
                        name ? name : "(null)", g->n_inputs ? names : "none");
    }
    int v = g->inputs[idx];
    fr_tensor *dst = &e->hdr[v];
    int same = t && t->dtype == dst->dtype && t->rank == dst->rank;
    for (int d = 0; same && d < t->rank; d++) same = t->dims[d] == dst->dims[d];
    if (!same) {
        char want[256], got[256];
        fr_shape_str(dst->rank, dst->dims, want, sizeof want);
        if (t)
            fr_shape_str(t->rank, t->dims, got, sizeof got);
        else
            snprintf(got, sizeof got, "nothing");
        return fr_error(FR_ERR_SHAPE, "input '%s': expected %s %s, got %s %s", name,
                        fr_dtype_name(dst->dtype), want, t ? fr_dtype_name(t->dtype) : "", got);
    }
    if (dst->nbytes) {
        if (!t->data || t->nbytes < dst->nbytes)
            return fr_error(FR_ERR_INVALID_ARG, "input '%s': the tensor holds %zu bytes, %zu needed",
                            name, t->data ? t->nbytes : 0, dst->nbytes);
        memcpy(dst->data, t->data, dst->nbytes);
    }
    e->is_set[idx] = 1;
    e->ran = 0;
    return FR_OK;
}

/* ---- running ---- */

fr_status fr_exec_run(fr_exec *e)
{
    const fr_graph *g = e->g;
    e->ran = 0;
    for (int i = 0; i < g->n_inputs; i++)
        if (e->needed[i] && !e->is_set[i])
            return fr_error(FR_ERR_INVALID_ARG, "input '%s' was not set before the run",
                            g->values[g->inputs[i]].name);
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            e->in_args[k] = n->inputs[k] >= 0 ? e->ptr[n->inputs[k]] : NULL;
        for (int k = 0; k < n->n_outputs; k++) {
            fr_tensor *t = n->outputs[k] >= 0 ? e->ptr[n->outputs[k]] : NULL;
            /* Kernels are tested on fresh zeroed tensors (fr_tensor_new); a reused block must
             * look the same, so a kernel that accumulates into its output stays correct. */
            if (t && t->nbytes) memset(t->data, 0, t->nbytes);
            e->out_args[k] = t;
        }
        fr_kernel_ctx ctx = {g, n, e->opset[i], n->n_inputs, n->n_outputs, e->in_args, e->out_args};
        fr_status st = n->op->cpu(&ctx);
        if (st != FR_OK) {
            if (!strstr(fr_last_error(), n->name))
                st = fr_error_context(st, "node '%s' (%s)", n->name, n->op_type);
            return st;
        }
    }
    e->ran = 1;
    return FR_OK;
}

/* ---- outputs ---- */

int fr_exec_n_outputs(const fr_exec *e) { return e->g->n_outputs; }

const char *fr_exec_output_name(const fr_exec *e, int i)
{
    if (i < 0 || i >= e->g->n_outputs) return NULL;
    return e->g->values[e->g->outputs[i]].name;
}

const fr_tensor *fr_exec_output_at(const fr_exec *e, int i)
{
    if (!e->ran || i < 0 || i >= e->g->n_outputs) return NULL;
    return e->ptr[e->g->outputs[i]];
}

const fr_tensor *fr_exec_output(const fr_exec *e, const char *name)
{
    for (int i = 0; name && i < e->g->n_outputs; i++)
        if (strcmp(e->g->values[e->g->outputs[i]].name, name) == 0) return fr_exec_output_at(e, i);
    return NULL;
}

size_t fr_exec_pool_bytes(const fr_exec *e) { return e->pool_bytes; }
int fr_exec_pool_blocks(const fr_exec *e) { return e->n_blocks; }
size_t fr_exec_peak_bytes(const fr_exec *e) { return e->peak_bytes; }
