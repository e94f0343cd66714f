/* A CUDA graph of an executor's run (see cuda_graph.h). */
#include "runtime/cuda/cuda_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One captured run and what its capture did on the host. */
typedef struct slot {
    cudaGraphExec_t exec;       /* NULL: empty */
    size_t kernels;             /* nodes of the captured graph */
    unsigned char *converted;   /* per node: the captured run converted its persistent memory */
    long long casts, runs_cudnn, runs_own, runs_wgmma; /* the host counters the captured run added */
    long long used;             /* the run that last launched it (a capture replaces the oldest) */
} slot;

/* Two slots: with gradient accumulation a step's first micro-batch converts the weights and the
 * others do not, and each replays its own capture. */
#define SLOTS 2

struct fr_cuda_graph {
    fr_cuda_graph_nodes n;
    char off[256];              /* why runs go node by node ("" while the graph is on) */
    slot s[SLOTS];
    uint64_t *before;           /* per node: the version before the capture */
    long long n_plain, n_capture, n_replay;
};

static int has_memory(const fr_cuda_graph *g, int i) { return g->n.bytes[i] && g->n.owner[i] == i; }

/* 1 when the host would convert node i's persistent memory in this run: stale, not frozen */
static int due(const fr_cuda_graph *g, int i)
{
    const uint64_t v = g->n.version[i];
    return has_memory(g, i) && v != g->n.c->weights_version && v != FR_CUDA_VERSION_FROZEN;
}

/* 2: slot s converts exactly what is due; 1: at least that (converting unchanged weights again
 * gives the same bytes); 0: it misses a due conversion, converts a weight primed since (frozen:
 * no float32 on the device), or is empty. */
static int fits(const fr_cuda_graph *g, const slot *s)
{
    if (!s->exec) return 0;
    int exact = 1;
    for (int i = 0; i < g->n.n_nodes; i++) {
        const int d = due(g, i);
        if (d && !s->converted[i]) return 0;
        if (s->converted[i] && g->n.version[i] == FR_CUDA_VERSION_FROZEN) return 0; /* its float32 is gone */
        if (!d && s->converted[i]) exact = 0;
    }
    return exact ? 2 : 1;
}

fr_status fr_cuda_graph_new(const fr_cuda_graph_nodes *n, const char *refusal, fr_cuda_graph **out)
{
    *out = NULL;
    fr_cuda_graph *g = fr_calloc(1, sizeof *g, "CUDA graph");
    if (!g) return FR_ERR_OOM;
    g->n = *n;
    size_t nn = (size_t)(n->n_nodes > 0 ? n->n_nodes : 1);
    int ok = (g->before = fr_calloc(nn, sizeof *g->before, "CUDA graph versions")) != NULL;
    for (int k = 0; k < SLOTS && ok; k++) ok = (g->s[k].converted = fr_calloc(nn, 1, "CUDA graph conversions")) != NULL;
    if (!ok) {
        fr_cuda_graph_free(g);
        return FR_ERR_OOM;
    }
    if (refusal) snprintf(g->off, sizeof g->off, "%s", refusal);
    *out = g;
    return FR_OK;
}

static void drop_exec(slot *s)
{
    if (s->exec) cudaGraphExecDestroy(s->exec); /* teardown: nothing to do on failure */
    s->exec = NULL;
}

void fr_cuda_graph_free(fr_cuda_graph *g)
{
    if (!g) return;
    for (int k = 0; k < SLOTS; k++) {
        drop_exec(&g->s[k]);
        free(g->s[k].converted);
    }
    free(g->before);
    free(g);
}

/* Replay slot s, then move the host's side as its capture did: versions, counters. */
static fr_status replay(fr_cuda_graph *g, slot *s)
{
    fr_cuda_ctx *c = g->n.c;
    FR_CUDA_TRY(cudaGraphLaunch(s->exec, c->stream));
    for (int i = 0; i < g->n.n_nodes; i++)
        if (s->converted[i]) g->n.version[i] = c->weights_version;
    c->weight_casts += s->casts;
    c->attn_runs_cudnn += s->runs_cudnn;
    c->attn_runs_own += s->runs_own;
    c->attn_runs_wgmma += s->runs_wgmma;
    g->n_replay++;
    s->used = g->n_plain + g->n_capture + g->n_replay;
    return FR_OK;
}

static fr_status plain(fr_cuda_graph *g)
{
    g->n_plain++;
    return g->n.queue(g->n.ctx);
}

/* Capture the run into slot s and launch it, turning the graph off (and restoring what the
 * host counted) when the stream could not capture it; the run is then queued node by node. */
static fr_status capture(fr_cuda_graph *g, slot *s)
{
    fr_cuda_ctx *c = g->n.c;
    const int nn = g->n.n_nodes;
    drop_exec(s);
    memcpy(g->before, g->n.version, (size_t)nn * sizeof *g->before);
    const long long casts = c->weight_casts, dn = c->attn_runs_cudnn, own = c->attn_runs_own,
                    wg = c->attn_runs_wgmma;
    cudaGraph_t graph = NULL;
    cudaError_t ce = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    fr_status st = ce == cudaSuccess ? g->n.queue(g->n.ctx) : FR_OK;
    if (ce == cudaSuccess) {
        cudaError_t ee = cudaStreamEndCapture(c->stream, &graph);
        if (st == FR_OK && ee != cudaSuccess) ce = ee;
    }
    if (st == FR_OK && ce == cudaSuccess) ce = cudaGraphInstantiateWithFlags(&s->exec, graph, 0);
    if (st == FR_OK && ce == cudaSuccess) ce = cudaGraphGetNodes(graph, NULL, &s->kernels);
    if (graph) cudaGraphDestroy(graph);
    if (st == FR_OK && ce == cudaSuccess) {
        for (int i = 0; i < nn; i++) s->converted[i] = has_memory(g, i) && g->n.version[i] != g->before[i];
        s->casts = c->weight_casts - casts;
        s->runs_cudnn = c->attn_runs_cudnn - dn;
        s->runs_own = c->attn_runs_own - own;
        s->runs_wgmma = c->attn_runs_wgmma - wg;
        g->n_capture++;
        s->used = g->n_plain + g->n_capture + g->n_replay;
        FR_CUDA_TRY(cudaGraphLaunch(s->exec, c->stream)); /* the host's side moved while capturing */
        return FR_OK;
    }
    /* nothing captured ran: the host's state goes back to before the capture */
    snprintf(g->off, sizeof g->off, "the run could not be captured (%s)",
             st != FR_OK ? fr_last_error() : cudaGetErrorString(ce));
    (void)cudaGetLastError(); /* a capture error is not sticky; clear it for the node-by-node run */
    for (int k = 0; k < SLOTS; k++) drop_exec(&g->s[k]);
    memcpy(g->n.version, g->before, (size_t)nn * sizeof *g->before);
    c->weight_casts = casts;
    c->attn_runs_cudnn = dn;
    c->attn_runs_own = own;
    c->attn_runs_wgmma = wg;
    return plain(g);
}

fr_status fr_cuda_graph_run(fr_cuda_graph *g)
{
    if (g->off[0]) return plain(g);
    if (g->n_plain == 0) return plain(g); /* the first run tunes GEMMs and builds plans: never captured */
    int best = -1, fit = 0;
    for (int k = 0; k < SLOTS; k++) {
        const int f = fits(g, &g->s[k]);
        if (f > fit) best = k, fit = f;
    }
    if (fit == 2) return replay(g, &g->s[best]);
    for (int k = 0; k < SLOTS; k++) /* an empty slot: capture exactly this run's conversions */
        if (!g->s[k].exec) return capture(g, &g->s[k]);
    if (fit == 1) return replay(g, &g->s[best]);
    slot *s = &g->s[0]; /* none fits: capture again into the one launched longest ago */
    for (int k = 1; k < SLOTS; k++)
        if (g->s[k].used < s->used) s = &g->s[k];
    return capture(g, s);
}

void fr_cuda_graph_counts(const fr_cuda_graph *g, long long *captures, long long *replays, long long *plain_runs)
{
    if (captures) *captures = g ? g->n_capture : 0;
    if (replays) *replays = g ? g->n_replay : 0;
    if (plain_runs) *plain_runs = g ? g->n_plain : 0;
}

void fr_cuda_graph_note(const fr_cuda_graph *g, char *buf, size_t n)
{
    if (!g) snprintf(buf, n, "CUDA graph off (FP8RUN_CUDA_GRAPH=1 captures the step also with micro-batches)");
    else if (g->off[0])
        snprintf(buf, n, "CUDA graph off: %s (%lld runs node by node)", g->off, g->n_plain);
    else
        snprintf(buf, n, "CUDA graph: %lld of %lld runs replayed (%lld captures, %zu graph nodes)", g->n_replay,
                 g->n_replay + g->n_capture + g->n_plain, g->n_capture, g->s[0].kernels);
}
