/* Timing cuBLASLt's candidate algorithms per GEMM shape and the process-wide table of choices
 * (see gemm_tune.h, and cuda_gemm.h for what is chosen and when). */
#include "ops/cuda/gemm_tune.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the process's choices, per device model (name and SM count) and key ---- */

typedef struct tuned {
    char device[256];
    int sm_count;
    gemm_entry e; /* e.next unused */
    struct tuned *next;
} tuned;

static tuned *g_tuned;
static pthread_mutex_t g_tuned_mu = PTHREAD_MUTEX_INITIALIZER;

/* under g_tuned_mu */
static const tuned *tuned_find(const fr_cuda_ctx *cu, const gemm_key *k)
{
    for (const tuned *t = g_tuned; t; t = t->next)
        if (t->sm_count == cu->sm_count && strcmp(t->device, cu->name) == 0 && memcmp(&t->e.key, k, sizeof *k) == 0)
            return t;
    return NULL;
}

static void copy_choice(gemm_entry *dst, const gemm_entry *src)
{
    dst->algo = src->algo;
    dst->n_cand = src->n_cand;
    dst->timed = src->timed;
    dst->chosen = src->chosen;
    dst->ms_first = src->ms_first;
    dst->ms_best = src->ms_best;
}

/* ---- timing ---- */

#define CU_KEEP(call)                                                                   \
    do {                                                                                \
        cudaError_t ce_ = (call);                                                       \
        if (st == FR_OK && ce_ != cudaSuccess) st = fr_cuda_status(ce_, #call, __FILE__, __LINE__); \
    } while (0)

static cublasStatus_t run(fr_cuda_ctx *cu, const gemm_lt *l, const cublasLtMatmulAlgo_t *algo)
{
    return cublasLtMatmul(cu->lt, l->op, l->alpha, l->B, l->la, l->A, l->lb, l->beta, l->D, l->ld, l->D, l->ld, algo,
                          cu->workspace, cu->workspace_bytes, cu->stream);
}

/* ms[i]: candidate i's time per call, INFINITY where it cannot run (over the workspace, or
 * cuBLASLt refuses it). */
static fr_status time_all(fr_cuda_ctx *cu, const gemm_lt *l, const cublasLtMatmulHeuristicResult_t *res, int found,
                          float *ms)
{
    fr_status st = FR_OK;
    cudaEvent_t e0 = NULL, e1 = NULL;
    CU_KEEP(cudaEventCreate(&e0));
    CU_KEEP(cudaEventCreate(&e1));
    for (int i = 0; i < found && st == FR_OK; i++) {
        ms[i] = INFINITY;
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > cu->workspace_bytes) continue;
        if (run(cu, l, &res[i].algo) != CUBLAS_STATUS_SUCCESS) continue; /* warm-up (loads its kernel) */
        CU_KEEP(cudaEventRecord(e0, cu->stream));
        int ok = 1;
        for (int r = 0; r < FR_GEMM_TUNE_REPS && ok; r++) ok = run(cu, l, &res[i].algo) == CUBLAS_STATUS_SUCCESS;
        CU_KEEP(cudaEventRecord(e1, cu->stream));
        CU_KEEP(cudaEventSynchronize(e1));
        float t = 0;
        CU_KEEP(cudaEventElapsedTime(&t, e0, e1));
        if (ok && st == FR_OK) ms[i] = t / FR_GEMM_TUNE_REPS;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return st;
}

fr_status fr_gemm_tune(fr_cuda_ctx *cu, const gemm_lt *l, const cublasLtMatmulHeuristicResult_t *res, int found,
                       gemm_entry *e)
{
    e->algo = res[0].algo;
    e->n_cand = found;
    e->timed = 0;
    e->chosen = 0;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    FR_CUDA_TRY(cudaStreamIsCapturing(cu->stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) return FR_OK; /* no waiting inside a capture */
    pthread_mutex_lock(&g_tuned_mu);
    const tuned *t = tuned_find(cu, &e->key);
    if (t) copy_choice(e, &t->e);
    pthread_mutex_unlock(&g_tuned_mu);
    if (t) return FR_OK;

    float ms[FR_GEMM_CANDIDATES];
    if (found > FR_GEMM_CANDIDATES) found = FR_GEMM_CANDIDATES;
    FR_TRY(time_all(cu, l, res, found, ms));
    int best = 0;
    for (int i = 1; i < found; i++) /* another only when clearly faster: timing noise keeps the first */
        if (ms[i] < ms[best] * 0.99f) best = i;
    if (isinf(ms[best])) return FR_OK; /* none ran: the call itself will report cuBLASLt's error */
    e->algo = res[best].algo;
    e->timed = 1;
    e->chosen = best;
    e->ms_first = ms[0];
    e->ms_best = ms[best];

    tuned *nt = fr_calloc(1, sizeof *nt, "GEMM algorithm choice");
    if (!nt) return FR_ERR_OOM;
    snprintf(nt->device, sizeof nt->device, "%s", cu->name);
    nt->sm_count = cu->sm_count;
    nt->e = *e;
    nt->e.next = NULL;
    pthread_mutex_lock(&g_tuned_mu);
    t = tuned_find(cu, &e->key); /* another thread may have chosen meanwhile: its choice stands */
    if (t) {
        copy_choice(e, &t->e);
        free(nt);
    } else {
        nt->next = g_tuned;
        g_tuned = nt; /* kept until the process ends */
    }
    pthread_mutex_unlock(&g_tuned_mu);
    return FR_OK;
}
