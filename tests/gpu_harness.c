/* GPU op test support (see gpu_harness.h). */
#include "gpu_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FP8RUN_HAVE_CUDA
#include "runtime/cuda/cuda_kernel.h"
static fr_cuda_ctx *g_ctx;
#endif

int gpu_available(void)
{
    static int known = -1;
    if (known >= 0) return known;
#ifdef FP8RUN_HAVE_CUDA
    if (fr_cuda_ctx_create(-1, &g_ctx) == FR_OK) {
        known = 1;
        printf("GPU: %s (compute capability %d.%d, %d SMs)\n", g_ctx->name, g_ctx->cc_major, g_ctx->cc_minor,
               g_ctx->sm_count);
        return 1;
    }
    printf("SKIP: no CUDA device (%s); the GPU suites run where one is present\n", fr_last_error());
#else
    printf("SKIP: fp8run was built without the CUDA backend; the GPU suites need it\n");
#endif
    known = 0;
    return 0;
}

fr_status tn_run_gpu(tnode *t, fr_tensor **out)
{
    for (int o = 0; o < TN_MAX; o++) out[o] = NULL;
#ifdef FP8RUN_HAVE_CUDA
    if (!gpu_available()) return fr_error(FR_ERR_DEVICE, "no CUDA device");
    for (int o = 0; o < t->n_out; o++) {
        if (!t->out[o]) continue;
        const fr_tensor *c = t->out[o];
        FR_TRY(fr_tensor_new(c->dtype, c->rank, c->dims, "gpu output", &out[o]));
        if (out[o]->nbytes) memset(out[o]->data, 0x5A, out[o]->nbytes);
    }
    return fr_cuda_run_node(g_ctx, t->g, t->nid, t->in, out);
#else
    (void)t;
    return fr_error(FR_ERR_DEVICE, "built without the CUDA backend");
#endif
}

void gpu_free_outputs(tnode *t, fr_tensor **out)
{
    for (int o = 0; o < t->n_out && o < TN_MAX; o++) {
        fr_tensor_free(out[o]);
        out[o] = NULL;
    }
}

double gpu_rel_err(const fr_tensor *got, const fr_tensor *want)
{
    if (!got || !want || got->dtype != want->dtype || got->nbytes != want->nbytes) return INFINITY;
    int64_t n = fr_tensor_numel(want);
    if (want->dtype != FR_F32 && want->dtype != FR_F64)
        return memcmp(got->data, want->data, want->nbytes) == 0 ? 0.0 : INFINITY;
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double a = fr_tensor_get_f64(got, i), b = fr_tensor_get_f64(want, i);
        if (!isfinite(b) || !isfinite(a)) {
            if (!(isnan(a) && isnan(b)) && a != b) return INFINITY;
            continue;
        }
        d2 += (a - b) * (a - b);
        r2 += b * b;
    }
    if (r2 == 0) return d2 == 0 ? 0.0 : INFINITY;
    return sqrt(d2 / r2);
}

int gpu_test_main(CU_SuiteInfo *suites)
{
    if (!gpu_available()) return 0;
    int rc = fr_test_main(suites);
#ifdef FP8RUN_HAVE_CUDA
    fr_cuda_ctx_free(g_ctx);
    g_ctx = NULL;
#endif
    return rc;
}
