/* A CUDA graph of an executor's run (see cuda_graph.h). */
#include "runtime/cuda/cuda_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fr_cuda_graph {
    fr_cuda_graph_nodes n;
    char off[256];              /* why runs go node by node ("" while the graph is on) */
    cudaGraphExec_t exec;       /* the captured run, or NULL */
    size_t kernels;             /* nodes of the captured graph */
    uint64_t *before;           /* per node: the version before the capture */
    unsigned char *converted;   /* per node: the captured run converted its persistent memory */
    long long casts, runs_cudnn, runs_own; /* the host counters the captured run added */
    long long n_plain, n_capture, n_replay, n_recapture;
};

fr_status fr_cuda_graph_new(const fr_cuda_graph_nodes *n, const char *refusal, fr_cuda_graph **out)
{
    *out = NULL;
    fr_cuda_graph *g = fr_calloc(1, sizeof *g, "CUDA graph");
    if (!g) return FR_ERR_OOM;
    g->n = *n;
    size_t nn = (size_t)(n->n_nodes > 0 ? n->n_nodes : 1);
    g->before = fr_calloc(nn, sizeof *g->before, "CUDA graph versions");
    g->converted = fr_calloc(nn, 1, "CUDA graph conversions");
    if (!g->before || !g->converted) {
        fr_cuda_graph_free(g);
        return FR_ERR_OOM;
    }
    if (refusal) snprintf(g->off, sizeof g->off, "%s", refusal);
    *out = g;
    return FR_OK;
}

static void drop_exec(fr_cuda_graph *g)
{
    if (g->exec) cudaGraphExecDestroy(g->exec); /* teardown: nothing to do on failure */
    g->exec = NULL;
}

void fr_cuda_graph_free(fr_cuda_graph *g)
{
    if (!g) return;
    drop_exec(g);
    free(g->before);
    free(g->converted);
    free(g);
}

static int has_memory(const fr_cuda_graph *g, int i) { return g->n.bytes[i] && g->n.owner[i] == i; }

/* Whether replaying now queues every weight conversion the host would: a node whose memory is
 * stale (its version is not the context's, nor frozen) must have converted in the capture. */
static int replay_ok(const fr_cuda_graph *g)
{
    const uint64_t now = g->n.c->weights_version;
    for (int i = 0; i < g->n.n_nodes; i++) {
        if (!has_memory(g, i)) continue;
        const uint64_t v = g->n.version[i];
        if (v != now && v != FR_CUDA_VERSION_FROZEN && !g->converted[i]) return 0;
    }
    return 1;
}

/* The host's side of a replay: what the captured run's kernels set when they were queued. */
static void after_replay(fr_cuda_graph *g)
{
    fr_cuda_ctx *c = g->n.c;
    for (int i = 0; i < g->n.n_nodes; i++)
        if (g->converted[i]) g->n.version[i] = c->weights_version;
    c->weight_casts += g->casts;
    c->attn_runs_cudnn += g->runs_cudnn;
    c->attn_runs_own += g->runs_own;
}

static fr_status plain(fr_cuda_graph *g)
{
    g->n_plain++;
    return g->n.queue(g->n.ctx);
}

/* Capture the run, turning the graph off (and restoring what the host counted) when the stream
 * could not capture it; the run is then queued node by node. */
static fr_status capture(fr_cuda_graph *g)
{
    fr_cuda_ctx *c = g->n.c;
    const int nn = g->n.n_nodes;
    memcpy(g->before, g->n.version, (size_t)nn * sizeof *g->before);
    const long long casts = c->weight_casts, dn = c->attn_runs_cudnn, own = c->attn_runs_own;
    cudaGraph_t graph = NULL;
    cudaError_t ce = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    fr_status st = ce == cudaSuccess ? g->n.queue(g->n.ctx) : FR_OK;
    if (ce == cudaSuccess) {
        cudaError_t ee = cudaStreamEndCapture(c->stream, &graph);
        if (st == FR_OK && ee != cudaSuccess) ce = ee;
    }
    if (st == FR_OK && ce == cudaSuccess) ce = cudaGraphInstantiateWithFlags(&g->exec, graph, 0);
    if (st == FR_OK && ce == cudaSuccess) ce = cudaGraphGetNodes(graph, NULL, &g->kernels);
    if (graph) cudaGraphDestroy(graph);
    if (st == FR_OK && ce == cudaSuccess) {
        for (int i = 0; i < nn; i++) g->converted[i] = has_memory(g, i) && g->n.version[i] != g->before[i];
        g->casts = c->weight_casts - casts;
        g->runs_cudnn = c->attn_runs_cudnn - dn;
        g->runs_own = c->attn_runs_own - own;
        g->n_capture++;
        FR_CUDA_TRY(cudaGraphLaunch(g->exec, c->stream));
        return FR_OK;
    }
    /* nothing captured ran: the host's state goes back to before the capture */
    snprintf(g->off, sizeof g->off, "the run could not be captured (%s)",
             st != FR_OK ? fr_last_error() : cudaGetErrorString(ce));
    (void)cudaGetLastError(); /* a capture error is not sticky; clear it for the node-by-node run */
    drop_exec(g);
    memcpy(g->n.version, g->before, (size_t)nn * sizeof *g->before);
    c->weight_casts = casts;
    c->attn_runs_cudnn = dn;
    c->attn_runs_own = own;
    return plain(g);
}

fr_status fr_cuda_graph_run(fr_cuda_graph *g)
{
    if (g->off[0]) return plain(g);
    if (g->exec && replay_ok(g)) {
        FR_CUDA_TRY(cudaGraphLaunch(g->exec, g->n.c->stream));
        after_replay(g);
        g->n_replay++;
        return FR_OK;
    }
    if (g->exec) { /* a conversion the graph does not hold is due: capture it again */
        drop_exec(g);
        g->n_recapture++;
    }
    if (g->n_plain == 0) return plain(g); /* the first run tunes GEMMs and builds plans: never captured */
    return capture(g);
}

void fr_cuda_graph_counts(const fr_cuda_graph *g, long long *captures, long long *replays, long long *plain_runs)
{
    if (captures) *captures = g ? g->n_capture : 0;
    if (replays) *replays = g ? g->n_replay : 0;
    if (plain_runs) *plain_runs = g ? g->n_plain : 0;
}

void fr_cuda_graph_note(const fr_cuda_graph *g, char *buf, size_t n)
{
    if (!g) snprintf(buf, n, "CUDA graph off (FP8RUN_CUDA_GRAPH=1 captures the step)");
    else if (g->off[0])
        snprintf(buf, n, "CUDA graph off: %s (%lld runs node by node)", g->off, g->n_plain);
    else
        snprintf(buf, n, "CUDA graph: %lld of %lld runs replayed (%lld captures, %zu graph nodes)", g->n_replay,
                 g->n_replay + g->n_capture + g->n_plain, g->n_capture, g->kernels);
}
