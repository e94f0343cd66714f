/* cuDNN loaded at run time (dlopen), --attention, and the report of which attention ran (see
 * attention_cudnn.h). Nothing links against cuDNN: where it is missing, too old or broken, the
 * choice "auto" keeps fp8run's kernels and says why, and "cudnn" fails saying why. */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "graph/option_choices.h"
#include "ops/cuda/attention_cudnn.h"

/* The ABI constants of attention_cudnn_abi.h, checked against cuDNN's own header when this
 * build has it (the values are the library's ABI; a mismatch would be a typo here). */
#if defined(__has_include)
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define CHECK_ABI(ours, theirs) _Static_assert((int)(ours) == (int)(theirs), #ours " != " #theirs)
CHECK_ABI(FRDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS);
CHECK_ABI(FRDNN_POINTWISE_DESCRIPTOR, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
CHECK_ABI(FRDNN_ENGINE_DESCRIPTOR, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
CHECK_ABI(FRDNN_ENGINECFG_DESCRIPTOR, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
CHECK_ABI(FRDNN_ENGINEHEUR_DESCRIPTOR, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
CHECK_ABI(FRDNN_EXECUTION_PLAN_DESCRIPTOR, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
CHECK_ABI(FRDNN_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
CHECK_ABI(FRDNN_OPERATIONGRAPH_DESCRIPTOR, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
CHECK_ABI(FRDNN_VARIANT_PACK_DESCRIPTOR, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
CHECK_ABI(FRDNN_TENSOR_DESCRIPTOR, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
CHECK_ABI(FRDNN_MATMUL_DESCRIPTOR, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
CHECK_ABI(FRDNN_OPERATION_MATMUL_DESCRIPTOR, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
CHECK_ABI(FRDNN_REDUCTION_DESCRIPTOR, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
CHECK_ABI(FRDNN_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
CHECK_ABI(FRDNN_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
CHECK_ABI(FRDNN_ATTR_POINTWISE_MODE, CUDNN_ATTR_POINTWISE_MODE);
CHECK_ABI(FRDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_ATTR_POINTWISE_MATH_PREC);
CHECK_ABI(FRDNN_ATTR_POINTWISE_AXIS, CUDNN_ATTR_POINTWISE_AXIS);
CHECK_ABI(FRDNN_ATTR_ENGINEHEUR_MODE, CUDNN_ATTR_ENGINEHEUR_MODE);
CHECK_ABI(FRDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
CHECK_ABI(FRDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_ATTR_ENGINEHEUR_RESULTS);
CHECK_ABI(FRDNN_ATTR_ENGINECFG_ENGINE, CUDNN_ATTR_ENGINECFG_ENGINE);
CHECK_ABI(FRDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE);
CHECK_ABI(FRDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
CHECK_ABI(FRDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
CHECK_ABI(FRDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC);
CHECK_ABI(FRDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
CHECK_ABI(FRDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_ATTR_OPERATIONGRAPH_OPS);
CHECK_ABI(FRDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
CHECK_ABI(FRDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_ATTR_TENSOR_DATA_TYPE);
CHECK_ABI(FRDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_ATTR_TENSOR_DIMENSIONS);
CHECK_ABI(FRDNN_ATTR_TENSOR_STRIDES, CUDNN_ATTR_TENSOR_STRIDES);
CHECK_ABI(FRDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_ATTR_TENSOR_UNIQUE_ID);
CHECK_ABI(FRDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
CHECK_ABI(FRDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
CHECK_ABI(FRDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC);
CHECK_ABI(FRDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
CHECK_ABI(FRDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
CHECK_ABI(FRDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
CHECK_ABI(FRDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_ATTR_MATMUL_COMP_TYPE);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_ATTR_OPERATION_MATMUL_DESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC);
CHECK_ABI(FRDNN_ATTR_REDUCTION_OPERATOR, CUDNN_ATTR_REDUCTION_OPERATOR);
CHECK_ABI(FRDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_ATTR_REDUCTION_COMP_TYPE);
CHECK_ABI(FRDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
CHECK_ABI(FRDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
CHECK_ABI(FRDNN_TYPE_HANDLE, CUDNN_TYPE_HANDLE);
CHECK_ABI(FRDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE);
CHECK_ABI(FRDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN);
CHECK_ABI(FRDNN_TYPE_INT64, CUDNN_TYPE_INT64);
CHECK_ABI(FRDNN_TYPE_VOID_PTR, CUDNN_TYPE_VOID_PTR);
CHECK_ABI(FRDNN_TYPE_HEUR_MODE, CUDNN_TYPE_HEUR_MODE);
CHECK_ABI(FRDNN_TYPE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE);
CHECK_ABI(FRDNN_NUMERICAL_NOTE_NONDETERMINISTIC, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
CHECK_ABI(FRDNN_TYPE_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE);
CHECK_ABI(FRDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR);
CHECK_ABI(FRDNN_TYPE_REDUCTION_OPERATOR_TYPE, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE);
CHECK_ABI(FRDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
CHECK_ABI(FRDNN_DATA_HALF, CUDNN_DATA_HALF);
CHECK_ABI(FRDNN_DATA_INT32, CUDNN_DATA_INT32);
CHECK_ABI(FRDNN_DATA_INT64, CUDNN_DATA_INT64);
CHECK_ABI(FRDNN_DATA_BFLOAT16, CUDNN_DATA_BFLOAT16);
CHECK_ABI(FRDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
CHECK_ABI(FRDNN_POINTWISE_ADD, CUDNN_POINTWISE_ADD);
CHECK_ABI(FRDNN_POINTWISE_MUL, CUDNN_POINTWISE_MUL);
CHECK_ABI(FRDNN_POINTWISE_DIV, CUDNN_POINTWISE_DIV);
CHECK_ABI(FRDNN_POINTWISE_SUB, CUDNN_POINTWISE_SUB);
CHECK_ABI(FRDNN_POINTWISE_EXP, CUDNN_POINTWISE_EXP);
CHECK_ABI(FRDNN_POINTWISE_LOG, CUDNN_POINTWISE_LOG);
CHECK_ABI(FRDNN_POINTWISE_IDENTITY, CUDNN_POINTWISE_IDENTITY);
CHECK_ABI(FRDNN_POINTWISE_TANH_FWD, CUDNN_POINTWISE_TANH_FWD);
CHECK_ABI(FRDNN_POINTWISE_TANH_BWD, CUDNN_POINTWISE_TANH_BWD);
CHECK_ABI(FRDNN_POINTWISE_CMP_EQ, CUDNN_POINTWISE_CMP_EQ);
CHECK_ABI(FRDNN_POINTWISE_CMP_GT, CUDNN_POINTWISE_CMP_GT);
CHECK_ABI(FRDNN_POINTWISE_CMP_LE, CUDNN_POINTWISE_CMP_LE);
CHECK_ABI(FRDNN_POINTWISE_CMP_GE, CUDNN_POINTWISE_CMP_GE);
CHECK_ABI(FRDNN_POINTWISE_CMP_LT, CUDNN_POINTWISE_CMP_LT);
CHECK_ABI(FRDNN_POINTWISE_LOGICAL_AND, CUDNN_POINTWISE_LOGICAL_AND);
CHECK_ABI(FRDNN_POINTWISE_GEN_INDEX, CUDNN_POINTWISE_GEN_INDEX);
CHECK_ABI(FRDNN_POINTWISE_BINARY_SELECT, CUDNN_POINTWISE_BINARY_SELECT);
CHECK_ABI(FRDNN_REDUCE_TENSOR_ADD, CUDNN_REDUCE_TENSOR_ADD);
CHECK_ABI(FRDNN_REDUCE_TENSOR_MAX, CUDNN_REDUCE_TENSOR_MAX);
CHECK_ABI(FRDNN_HEUR_MODE_FALLBACK, CUDNN_HEUR_MODE_FALLBACK);
CHECK_ABI(FRDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_A);
#undef CHECK_ABI
#endif
#endif

/* ---- opening a library ---- */

const char *const fr_cudnn_default_paths[] = {
    "libcudnn.so.9", /* the loader's path: LD_LIBRARY_PATH, the ld.so cache */
    "/usr/local/cuda/lib64/libcudnn.so.9",
    "/usr/local/cuda/lib/libcudnn.so.9",
    "/usr/local/cuda-13.0/lib/libcudnn.so.9",
    "/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
    "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
    NULL,
};

/* 0 and the API, or -1 and why. */
static int open_lib(const char *path, frdnn_api *api, void **lib, size_t *version, char *why, size_t n)
{
    memset(api, 0, sizeof *api);
    *lib = NULL;
    *version = 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : "dlopen failed");
        return -1;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cudnnGetVersion", (void **)&api->GetVersion},
        {"cudnnGetErrorString", (void **)&api->GetErrorString},
        {"cudnnGetLastErrorString", (void **)&api->GetLastErrorString},
        {"cudnnCreate", (void **)&api->Create},
        {"cudnnDestroy", (void **)&api->Destroy},
        {"cudnnSetStream", (void **)&api->SetStream},
        {"cudnnBackendCreateDescriptor", (void **)&api->BackendCreateDescriptor},
        {"cudnnBackendDestroyDescriptor", (void **)&api->BackendDestroyDescriptor},
        {"cudnnBackendFinalize", (void **)&api->BackendFinalize},
        {"cudnnBackendSetAttribute", (void **)&api->BackendSetAttribute},
        {"cudnnBackendGetAttribute", (void **)&api->BackendGetAttribute},
        {"cudnnBackendExecute", (void **)&api->BackendExecute},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, n, "%s lacks %s (not cuDNN 9?)", path, syms[i].name);
            dlclose(h);
            memset(api, 0, sizeof *api);
            return -1;
        }
    }
    const size_t v = api->GetVersion();
    if (v < 90000 || v >= 100000) {
        snprintf(why, n, "%s is cuDNN %zu.%zu.%zu; fp8run needs cuDNN 9 (9.0 or newer)", path, v / 10000,
                 v / 100 % 100, v % 100);
        dlclose(h);
        memset(api, 0, sizeof *api);
        return -1;
    }
    *lib = h;
    *version = v;
    return 0;
}

fr_status fr_cudnn_open(const char *path, frdnn_api *api, void **lib, size_t *version)
{
    char why[512];
    if (!path || !*path) return fr_error(FR_ERR_INVALID_ARG, "fr_cudnn_open: no path");
    if (open_lib(path, api, lib, version, why, sizeof why) != 0)
        return fr_error(FR_ERR_UNSUPPORTED, "cuDNN: %s", why);
    return FR_OK;
}

/* ---- the process's cuDNN ---- */

static struct {
    frdnn_api api;
    void *lib;
    size_t version;
    char path[256];
    char why[768];    /* empty when loaded */
    char text[1024];  /* fr_cudnn_describe */
} G;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load_once(void)
{
    char why[512] = "";
    const char *env = fr_env_get(FR_ENV_CUDNN_LIBRARY);
    if (env && *env) {
        if (open_lib(env, &G.api, &G.lib, &G.version, why, sizeof why) != 0)
            snprintf(G.why, sizeof G.why, "FP8RUN_CUDNN_LIBRARY='%s' does not load: %s", env, why);
        else
            snprintf(G.path, sizeof G.path, "%s", env);
    } else {
        char first[512] = "";
        for (int i = 0; fr_cudnn_default_paths[i] && !G.lib; i++) {
            if (open_lib(fr_cudnn_default_paths[i], &G.api, &G.lib, &G.version, why, sizeof why) == 0)
                snprintf(G.path, sizeof G.path, "%s", fr_cudnn_default_paths[i]);
            else if (!first[0] || strstr(why, "cannot open") == NULL)
                snprintf(first, sizeof first, "%s", why); /* a library that is there but unusable says more */
        }
        if (!G.lib)
            snprintf(G.why, sizeof G.why,
                     "libcudnn.so.9 was not found or not usable (%s); install cuDNN 9 (the CUDA toolkit's, or pip "
                     "nvidia-cudnn-cu13) or set FP8RUN_CUDNN_LIBRARY to its path",
                     first);
    }
    if (G.lib)
        snprintf(G.text, sizeof G.text, "cuDNN %zu.%zu.%zu (%s)", G.version / 10000, G.version / 100 % 100,
                 G.version % 100, G.path);
    else
        snprintf(G.text, sizeof G.text, "cuDNN unavailable: %s", G.why);
}

const frdnn_api *fr_cudnn(const char **why)
{
    pthread_once(&g_once, load_once);
    if (why) *why = G.lib ? "" : G.why;
    return G.lib ? &G.api : NULL;
}

size_t fr_cudnn_version(void) { return fr_cudnn(NULL) ? G.version : 0; }

const char *fr_cudnn_describe(void)
{
    pthread_once(&g_once, load_once);
    return G.text;
}

static char g_support[512];
static pthread_once_t g_support_once = PTHREAD_ONCE_INIT;

static void support_once(void)
{
    const size_t version = fr_cudnn_version();
    if (!version) return;
    int count = 0, cc = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 &&
        cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess)
        cc = 0; /* not known: the version's best */
    (void)cudaGetLastError(); /* no GPU is not an error here */
    fr_cudnn_sdpa_describe_support(version, cc, g_support, sizeof g_support);
}

const char *fr_cudnn_support_text(void)
{
    pthread_once(&g_support_once, support_once);
    return g_support;
}

/* ---- --attention ---- */

int fr_cuda_attention_parse(const char *choice)
{
    static const char *const names[] = {FR_CHOICES_ATTENTION NULL};
    if (!choice) return FR_CUDA_ATTN_AUTO; /* the default */
    return fr_choice_find(names, choice);
}

void fr_cuda_attention_note(fr_cuda_ctx *c, const char *why)
{
    if (!c || c->attn_note[0]) return;
    size_t len = strlen(why); /* cut to fit */
    if (len >= sizeof c->attn_note) len = sizeof c->attn_note - 1;
    memcpy(c->attn_note, why, len);
    c->attn_note[len] = 0;
}

fr_status fr_cuda_ctx_set_attention(fr_cuda_ctx *c, const char *choice)
{
    const int a = fr_cuda_attention_parse(choice);
    if (a < 0) return fr_error(FR_ERR_INVALID_ARG, "--attention '%s': use fp8run, cudnn or auto", choice);
    const char *why = NULL;
    char note[1100] = "";
    if (a != FR_CUDA_ATTN_FP8RUN && !fr_cudnn(&why))
        snprintf(note, sizeof note, "%s", why);
    else if (a != FR_CUDA_ATTN_FP8RUN && c->cc_major < 8)
        snprintf(note, sizeof note, "cuDNN's fused flash attention needs compute capability 8.0 or newer; %s has %d.%d",
                 c->name, c->cc_major, c->cc_minor);
    if (note[0] && a == FR_CUDA_ATTN_CUDNN)
        return fr_error(FR_ERR_UNSUPPORTED, "--attention cudnn: %s (--attention auto falls back to fp8run's kernels)",
                        note);
    c->attention = note[0] ? FR_CUDA_ATTN_FP8RUN : a; /* auto without cuDNN: nothing to try per node */
    c->attn_note[0] = 0;
    if (note[0]) fr_cuda_attention_note(c, note);
    return FR_OK;
}

const char *fr_cuda_attention_generic(const fr_cuda_ctx *c)
{
    if (!c || c->attn_runs_cudnn > 0 || c->attn_runs_own == 0) return NULL;
    return c->attn_note[0] ? c->attn_note : "--attention fp8run";
}

void fr_cuda_attention_report(const fr_cuda_ctx *c, char *buf, size_t n)
{
    const long long dn = c->attn_runs_cudnn, own = c->attn_runs_own, wg = c->attn_runs_wgmma;
    char why[sizeof c->attn_note + 64];
    snprintf(why, sizeof why, "%s", c->attn_note[0] ? c->attn_note : "--attention fp8run");
    if (wg > 0) /* which of fp8run's kernels: its Hopper ones, or the mma.sync / float32 ones */
        snprintf(why + strlen(why), sizeof why - strlen(why), "; wgmma kernels for %lld of its %lld runs", wg, own);
    const char *det = c->deterministic ? ", deterministic engines (--deterministic)" : "";
    if (dn == 0 && (own > 0 || c->attention == FR_CUDA_ATTN_FP8RUN))
        snprintf(buf, n, "fp8run kernels (%s)", why);
    else if (dn == 0)
        snprintf(buf, n, "%s fused flash attention (--attention %s; no attention has run yet)", fr_cudnn_describe(),
                 c->attention == FR_CUDA_ATTN_CUDNN ? "cudnn" : "auto");
    else if (own == 0)
        snprintf(buf, n, "%s fused flash attention (%lld of %lld runs%s)", fr_cudnn_describe(), dn, dn, det);
    else
        snprintf(buf, n, "%s fused flash attention for %lld of %lld runs%s, fp8run kernels for the rest (%s)",
                 fr_cudnn_describe(), dn, dn + own, det, why);
}
