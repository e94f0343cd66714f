/* Kernel timings for the GPU op tests (tests/gpu_op_time.h). */
#include <string.h>

#include "tests/gpu_harness.h"
#include "tests/gpu_op_time.h"
#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
#include "ops/grad.h"
#endif

fr_tensor gpu_shape_only(fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
    return t;
}

#ifdef FP8RUN_HAVE_CUDA
/* a device tensor of value vid's dtype and shape; NULL for vid < 0 */
static fr_tensor *dev_of(const fr_graph *g, int vid, fr_tensor *t, double *bytes)
{
    if (vid < 0) return NULL;
    const fr_value *v = &g->values[vid];
    *t = gpu_shape_only(v->dtype, v->rank, v->dims);
    t->nbytes = (size_t)fr_tensor_numel(t) * fr_dtype_size(v->dtype);
    *bytes += (double)t->nbytes;
    if (t->nbytes) {
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&t->data, t->nbytes), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMemset(t->data, 0x3c, t->nbytes), cudaSuccess);
    }
    return t;
}
#endif

double gpu_time_node(tnode *t, int reps, double *bytes)
{
    *bytes = 0;
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx *c = gpu_ctx();
    if (!c) return -1;
    FR_ASSERT_OK(fr_node_infer(t->g, t->nid));
    const fr_node *n = tn_node(t);
    const fr_cuda_kernel_def *k = fr_cuda_kernel_find(n->domain, n->op_type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    fr_tensor din[TN_MAX], dout[TN_MAX], *in[TN_MAX], *out[TN_MAX];
    for (int i = 0; i < t->n_in; i++) in[i] = dev_of(t->g, t->in_vid[i], &din[i], bytes);
    for (int o = 0; o < t->n_out; o++) out[o] = dev_of(t->g, t->out_vid[o], &dout[o], bytes);
    size_t sb = 0;
    void *scratch = NULL;
    const fr_cuda_plan_env env = fr_cuda_plan_env_of(c);
    FR_ASSERT_OK(fr_cuda_kernel_scratch(k, &env, t->g, n, &sb));
    if (sb) CU_ASSERT_EQUAL_FATAL(cudaMalloc(&scratch, sb), cudaSuccess);
    fr_cuda_kctx kc;
    memset(&kc, 0, sizeof kc);
    kc.g = t->g;
    kc.node = n;
    kc.opset = 1;
    kc.n_in = t->n_in;
    kc.n_out = t->n_out;
    kc.in = in;
    kc.out = out;
    kc.cu = c;
    kc.scratch = scratch;
    kc.scratch_bytes = sb;
    cudaEvent_t e0, e1;
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e0), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaEventCreate(&e1), cudaSuccess);
    for (int i = 0; i < 2; i++) FR_ASSERT_OK(k->run(&kc));
    cudaEventRecord(e0, c->stream);
    for (int i = 0; i < reps; i++) FR_ASSERT_OK(k->run(&kc));
    cudaEventRecord(e1, c->stream);
    CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (scratch) cudaFree(scratch);
    for (int i = 0; i < t->n_in; i++)
        if (in[i]) cudaFree(in[i]->data);
    for (int o = 0; o < t->n_out; o++)
        if (out[o]) cudaFree(out[o]->data);
    return reps > 0 ? ms / reps : 0;
#else
    (void)t;
    (void)reps;
    return -1;
#endif
}
