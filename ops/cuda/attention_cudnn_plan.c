/* The operation graph of a builder's operations and the search for an execution plan among
 * the engine configurations cuDNN's heuristics offer (attention_cudnn_graph.h). */
#include <stdio.h>

#include "ops/cuda/attention_cudnn_graph.h"
#include "ops/cuda/attention_cudnn_status.h"

/* The handle attributes of operation graphs and plans: required by early cuDNN 9, deprecated in
 * later ones (which take the device from the handle at execution): set where accepted. */
static void set_handle(const frdnn_api *api, frdnn_desc d, int name, frdnn_handle h)
{
    if (d && h) (void)api->BackendSetAttribute(d, name, FRDNN_TYPE_HANDLE, 1, &h); /* refused: not needed there */
}

frdnn_desc fr_cudnn_op_graph(gb *b, frdnn_handle h)
{
    frdnn_desc og = fr_cudnn_gb_new(b, FRDNN_OPERATIONGRAPH_DESCRIPTOR, "cudnnBackendCreateDescriptor(OPERATIONGRAPH)");
    SET(og, OPERATIONGRAPH_OPS, BACKEND_DESCRIPTOR, b->n_ops, b->ops);
    if (!b->failed) set_handle(b->api, og, FRDNN_ATTR_OPERATIONGRAPH_HANDLE, h);
    fr_cudnn_gb_fin(b, og, "cudnnBackendFinalize(OPERATIONGRAPH)");
    return b->failed ? NULL : og;
}

/* 1 when the engine of configuration cfg carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC (or its
 * notes cannot be read: not known to be deterministic), else 0. */
static int nondeterministic(const frdnn_api *api, frdnn_desc cfg)
{
    frdnn_desc eng = NULL;
    if (api->BackendCreateDescriptor(FRDNN_ENGINE_DESCRIPTOR, &eng) != FRDNN_STATUS_SUCCESS) return 1;
    int64_t n = 0;
    int notes[32] = {0}, bad = 1; /* cudnnBackendNumericalNote_t is int-sized; room beyond 9.x's count */
    if (api->BackendGetAttribute(cfg, FRDNN_ATTR_ENGINECFG_ENGINE, FRDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
            FRDNN_STATUS_SUCCESS &&
        n == 1 &&
        api->BackendGetAttribute(eng, FRDNN_ATTR_ENGINE_NUMERICAL_NOTE, FRDNN_TYPE_NUMERICAL_NOTE,
                                 FRDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == FRDNN_STATUS_SUCCESS) {
        bad = 0;
        for (int64_t i = 0; i < n && i < 32; i++) bad |= notes[i] == FRDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
    api->BackendDestroyDescriptor(eng); /* only read from */
    return bad;
}

int fr_cudnn_find_plan(gb *b, frdnn_handle h, frdnn_desc og, int deterministic, int skip, frdnn_desc *plan,
                       int64_t *workspace)
{
    const frdnn_api *api = b->api;
    char last[640] = "no engine configuration";
    int skipped = 0; /* deterministic: configurations passed over for their engine's note */
    const int modes[2] = {FRDNN_HEUR_MODE_A, FRDNN_HEUR_MODE_FALLBACK};
    for (int m = 0; m < 2 && !b->failed; m++) {
        frdnn_desc heur = fr_cudnn_gb_new(b, FRDNN_ENGINEHEUR_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINEHEUR)");
        SETD(heur, ENGINEHEUR_OPERATION_GRAPH, og);
        SET(heur, ENGINEHEUR_MODE, HEUR_MODE, 1, &modes[m]);
        fr_cudnn_gb_fin(b, heur, "cudnnBackendFinalize(ENGINEHEUR)");
        if (b->failed) break;
        int64_t count = 0;
        int st = api->BackendGetAttribute(heur, FRDNN_ATTR_ENGINEHEUR_RESULTS, FRDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                          NULL);
        if (st != FRDNN_STATUS_SUCCESS) {
            fr_cudnn_status_text(api, st, "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", last, sizeof last);
            continue;
        }
        if (count <= 0) continue;
        if (count > 64) count = 64;
        frdnn_desc cfg[64];
        for (int64_t i = 0; i < count; i++)
            cfg[i] = fr_cudnn_gb_new(b, FRDNN_ENGINECFG_DESCRIPTOR, "cudnnBackendCreateDescriptor(ENGINECFG)");
        if (b->failed) break;
        int64_t got = 0;
        st = api->BackendGetAttribute(heur, FRDNN_ATTR_ENGINEHEUR_RESULTS, FRDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                      cfg);
        if (st != FRDNN_STATUS_SUCCESS) {
            fr_cudnn_status_text(api, st, "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", last, sizeof last);
            continue;
        }
        for (int64_t i = 0; i < got && i < count; i++) {
            if (deterministic && nondeterministic(api, cfg[i])) {
                skipped++;
                continue;
            }
            frdnn_desc pl = NULL;
            st = api->BackendCreateDescriptor(FRDNN_EXECUTION_PLAN_DESCRIPTOR, &pl);
            if (st != FRDNN_STATUS_SUCCESS) {
                fr_cudnn_gb_fail(b, st, "cudnnBackendCreateDescriptor(EXECUTION_PLAN)");
                return -1;
            }
            set_handle(api, pl, FRDNN_ATTR_EXECUTION_PLAN_HANDLE, h);
            st = api->BackendSetAttribute(pl, FRDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, FRDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                          &cfg[i]);
            if (st == FRDNN_STATUS_SUCCESS) st = api->BackendFinalize(pl);
            int64_t ws = 0, n = 0;
            if (st == FRDNN_STATUS_SUCCESS)
                st = api->BackendGetAttribute(pl, FRDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, FRDNN_TYPE_INT64, 1, &n,
                                              &ws);
            if (st == FRDNN_STATUS_SUCCESS && n == 1 && ws >= 0 && skip > 0) { /* runs, but passed over */
                skip--;
                snprintf(last, sizeof last, "no engine configuration past the skipped ones");
                api->BackendDestroyDescriptor(pl);
                continue;
            }
            if (st == FRDNN_STATUS_SUCCESS && n == 1 && ws >= 0) {
                if (fr_cudnn_gb_keep(b, pl) != 0) return -1;
                *plan = pl;
                *workspace = ws;
                return 0;
            }
            if (st == FRDNN_STATUS_SUCCESS)
                snprintf(last, sizeof last, "the plan reports no workspace size");
            else
                fr_cudnn_status_text(api, st, "execution plan of the heuristics' choice", last, sizeof last);
            api->BackendDestroyDescriptor(pl); /* this configuration does not run: try the next */
        }
    }
    if (!b->failed && skipped)
        snprintf(last, sizeof last,
                 "no deterministic engine (--deterministic: %d configuration%s with "
                 "CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC skipped)",
                 skipped, skipped == 1 ? "" : "s");
    if (!b->failed) fr_cudnn_gb_fail_text(b, last);
    return -1;
}
