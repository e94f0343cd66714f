/* The CUDA device context, status conversion and the one-node runner (see cuda_kernel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "ops/cuda/cuda_kernel.h"

/* The amax kernels' block cap (see cuda_kernel.h), kept here with the other switches the
 * context reads from the environment; quantize.cu asks for it at each launch. 0: one wave. */
static int64_t g_quant_blocks;

int64_t fr_cuda_quant_blocks(void) { return g_quant_blocks; }

fr_status fr_cuda_status(cudaError_t e, const char *what, const char *file, int line)
{
    return fr_error(FR_ERR_DEVICE, "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e),
                    what, file, line);
}

fr_status fr_cublas_status(cublasStatus_t s, const char *what, const char *file, int line)
{
    return fr_error(FR_ERR_DEVICE, "cuBLASLt error %d (%s) in %s at %s:%d", (int)s, cublasLtGetStatusName(s), what,
                    file, line);
}

fr_status fr_cuda_check_launch(const fr_node *n, const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return FR_OK;
    return fr_node_error(n, FR_ERR_DEVICE, "CUDA kernel %s failed to launch: %s (%s)", kernel, cudaGetErrorName(e),
                         cudaGetErrorString(e));
}

fr_status fr_cuda_ctx_create(int device, fr_cuda_ctx **out)
{
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
        return fr_error(FR_ERR_DEVICE, "no usable CUDA device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    if (device < 0) FR_CUDA_TRY(cudaGetDevice(&device));
    if (device >= n) return fr_error(FR_ERR_DEVICE, "CUDA device %d does not exist (%d present)", device, n);
    fr_cuda_ctx *c = fr_calloc(1, sizeof *c, "CUDA context");
    if (!c) return FR_ERR_OOM;
    c->device = device;
    c->weights_version = 1; /* persistent memory starts at 0: the first run fills it */
    c->weight_cache_off = fr_env_is(FR_ENV_WEIGHT_CACHE, "0");
    c->gemm_tune = !fr_env_is(FR_ENV_GEMM_TUNE, "0");
    const char *qb = fr_env_get(FR_ENV_QUANT_BLOCKS);
    const int64_t qbn = qb ? atoll(qb) : 0;
    g_quant_blocks = qbn > 0 ? qbn : 0;
    fr_status st = FR_OK;
    struct cudaDeviceProp prop;
    FR_CUDA_KEEP(st, cudaSetDevice(device));
    FR_CUDA_KEEP(st, cudaGetDeviceProperties(&prop, device));
    if (st == FR_OK) {
        c->cc_major = prop.major;
        c->cc_minor = prop.minor;
        c->sm_count = prop.multiProcessorCount;
        c->mem_total = prop.totalGlobalMem;
        snprintf(c->name, sizeof c->name, "%s", prop.name);
    }
    FR_CUDA_KEEP(st, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    FR_CUDA_KEEP(st, cudaMalloc(&c->workspace, FR_CUDA_WORKSPACE_BYTES));
    FR_CUDA_KEEP(st, cudaMalloc((void **)&c->dev_error, 4 * sizeof(int)));
    FR_CUDA_KEEP(st, cudaMemset(c->dev_error, 0, 4 * sizeof(int)));
    if (st == FR_OK) {
        c->workspace_bytes = FR_CUDA_WORKSPACE_BYTES;
        cublasStatus_t s = cublasLtCreate(&c->lt);
        if (s != CUBLAS_STATUS_SUCCESS) st = fr_cublas_status(s, "cublasLtCreate", __FILE__, __LINE__);
    }
    if (st != FR_OK) {
        fr_cuda_ctx_free(c);
        return st;
    }
    *out = c;
    return FR_OK;
}

void fr_cuda_ctx_free(fr_cuda_ctx *c)
{
    if (!c) return;
    if (c->gemm_cache && c->gemm_cache_free) c->gemm_cache_free(c->gemm_cache);
    if (c->cudnn && c->cudnn_free) c->cudnn_free(c->cudnn);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->workspace) cudaFree(c->workspace);
    if (c->dev_error) cudaFree(c->dev_error);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

fr_status fr_cuda_check_error(fr_cuda_ctx *c, const fr_graph *g)
{
    int w[4] = {0, 0, 0, 0};
    FR_CUDA_TRY(cudaStreamSynchronize(c->stream));
    FR_CUDA_TRY(cudaMemcpy(w, c->dev_error, sizeof w, cudaMemcpyDeviceToHost));
    if (w[0] == 0) return FR_OK;
    FR_CUDA_TRY(cudaMemset(c->dev_error, 0, sizeof w));
    return fr_cuda_error_of_word(w, g);
}

fr_status fr_cuda_error_of_word(const int w[4], const fr_graph *g)
{
    if (w[0] == 0) return FR_OK;
    fr_status st = w[0] > 0 && w[0] <= FR_ERR_INTERNAL ? (fr_status)w[0] : FR_ERR_INTERNAL;
    if (g && w[1] >= 0 && w[1] < g->n_nodes)
        return fr_node_error(&g->nodes[w[1]], st, "on the GPU: %s (value %d, bound %d)",
                             st == FR_ERR_RANGE ? "index out of range" : fr_status_name(st), w[2], w[3]);
    return fr_error(st, "a CUDA kernel reported %s (node %d, value %d, bound %d)", fr_status_name(st), w[1], w[2],
                    w[3]);
}

/* ---- one node ---- */

static fr_status device_copy_of(const fr_tensor *h, int upload, fr_tensor **out)
{
    fr_tensor *d = fr_calloc(1, sizeof *d, "device tensor");
    if (!d) return FR_ERR_OOM;
    *d = *h;
    d->owns_data = 0;
    d->data = NULL;
    *out = d;
    size_t bytes = h->nbytes ? h->nbytes : 1;
    FR_CUDA_TRY(cudaMalloc(&d->data, bytes));
    if (upload && h->nbytes) FR_CUDA_TRY(cudaMemcpy(d->data, h->data, h->nbytes, cudaMemcpyHostToDevice));
    return FR_OK;
}

static void free_device_tensor(fr_tensor *d)
{
    if (!d) return;
    if (d->data) cudaFree(d->data);
    free(d);
}

fr_status fr_cuda_run_node(fr_cuda_ctx *c, const fr_graph *g, int node_id, fr_tensor *const *host_in,
                           fr_tensor *const *host_out)
{
    const fr_node *n = &g->nodes[node_id];
    const fr_cuda_kernel_def *k = fr_cuda_kernel_find(n->domain, n->op_type);
    if (!k)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "op %s%s%s has no CUDA kernel", n->domain[0] ? n->domain : "",
                             n->domain[0] ? "::" : "", n->op_type);
    fr_tensor **din = fr_calloc((size_t)n->n_inputs + 1, sizeof *din, "device inputs");
    fr_tensor **dout = fr_calloc((size_t)n->n_outputs + 1, sizeof *dout, "device outputs");
    void *scratch = NULL, *persist = NULL;
    size_t scratch_bytes = 0, persist_bytes = 0;
    uint64_t persist_version = 0;
    fr_status st = (!din || !dout) ? FR_ERR_OOM : FR_OK;
    for (int i = 0; st == FR_OK && i < n->n_inputs; i++)
        if (host_in[i]) st = device_copy_of(host_in[i], 1, &din[i]);
    for (int i = 0; st == FR_OK && i < n->n_outputs; i++)
        if (host_out[i]) st = device_copy_of(host_out[i], 0, &dout[i]);
    /* the uploads went through the legacy stream; the kernel runs on a non-blocking one */
    if (st == FR_OK) {
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) st = fr_cuda_status(e, "cudaDeviceSynchronize", __FILE__, __LINE__);
    }
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
    if (st == FR_OK) st = fr_cuda_kernel_scratch(k, &env, g, n, &scratch_bytes);
    if (st == FR_OK && scratch_bytes) {
        cudaError_t e = cudaMalloc(&scratch, scratch_bytes);
        if (e != cudaSuccess) st = fr_cuda_status(e, "cudaMalloc(scratch)", __FILE__, __LINE__);
    }
    if (st == FR_OK && k->persist) st = k->persist(&env, g, n, &persist_bytes);
    if (st == FR_OK && persist_bytes) {
        cudaError_t e = cudaMalloc(&persist, persist_bytes);
        if (e == cudaSuccess) e = cudaMemset(persist, 0, persist_bytes);
        if (e == cudaSuccess) e = cudaDeviceSynchronize(); /* the legacy stream's memset first */
        if (e != cudaSuccess) st = fr_cuda_status(e, "cudaMalloc(persist)", __FILE__, __LINE__);
    }
    if (st == FR_OK) {
        fr_cuda_kctx kc = {g, n, fr_graph_opset(g, n->domain), n->n_inputs, n->n_outputs, din, dout, c,
                           scratch, scratch_bytes, persist, persist_bytes, &persist_version};
        st = k->run(&kc);
    }
    if (st == FR_OK) {
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) st = fr_node_error(n, FR_ERR_DEVICE, "kernel failed: %s", cudaGetErrorString(e));
    }
    if (st == FR_OK) st = fr_cuda_check_error(c, g);
    for (int i = 0; st == FR_OK && i < n->n_outputs; i++)
        if (host_out[i] && host_out[i]->nbytes) {
            cudaError_t e = cudaMemcpy(host_out[i]->data, dout[i]->data, host_out[i]->nbytes, cudaMemcpyDeviceToHost);
            if (e != cudaSuccess) st = fr_cuda_status(e, "cudaMemcpy(output)", __FILE__, __LINE__);
        }
    for (int i = 0; din && i < n->n_inputs; i++) free_device_tensor(din[i]);
    for (int i = 0; dout && i < n->n_outputs; i++) free_device_tensor(dout[i]);
    free(din);
    free(dout);
    if (scratch) cudaFree(scratch);
    if (persist) cudaFree(persist);
    return st;
}
