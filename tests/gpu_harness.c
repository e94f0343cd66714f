/* GPU op test support (see gpu_harness.h). */
#include "tests/gpu_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/train/llama_gen.h"

#ifdef FP8RUN_HAVE_CUDA
#include "ops/cuda/cuda_kernel.h"
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

struct fr_cuda_ctx *gpu_ctx(void)
{
#ifdef FP8RUN_HAVE_CUDA
    return gpu_available() ? g_ctx : NULL;
#else
    return NULL;
#endif
}

fr_status tn_run_gpu(tnode *t, fr_tensor **out) { return tn_run_gpu_on(NULL, t, out); }

fr_status tn_run_gpu_on(struct fr_cuda_ctx *ctx, tnode *t, fr_tensor **out)
{
    for (int o = 0; o < TN_MAX; o++) out[o] = NULL;
#ifdef FP8RUN_HAVE_CUDA
    if (!ctx && !gpu_available()) return fr_error(FR_ERR_DEVICE, "no CUDA device");
    for (int o = 0; o < t->n_out; o++) {
        if (!t->out[o]) continue;
        const fr_tensor *c = t->out[o];
        FR_TRY(fr_tensor_new(c->dtype, c->rank, c->dims, "gpu output", &out[o]));
        if (out[o]->nbytes) memset(out[o]->data, 0x5A, out[o]->nbytes);
    }
    return fr_cuda_run_node(ctx ? ctx : g_ctx, t->g, t->nid, t->in, out);
#else
    (void)ctx;
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

double gpu_rel_err(const fr_tensor *got, const fr_tensor *want) { return gpu_rel_err_floor(got, want, 0); }

double gpu_rel_err_floor(const fr_tensor *got, const fr_tensor *want, double floor_norm)
{
    if (!got || !want || got->dtype != want->dtype || got->nbytes != want->nbytes) return INFINITY;
    int64_t n = fr_tensor_numel(want);
    const int exact_bytes = memcmp(got->data, want->data, want->nbytes) == 0;
    if (want->dtype != FR_F32 && want->dtype != FR_F64 && (want->dtype != FR_BF16 || exact_bytes))
        return exact_bytes ? 0.0 : INFINITY;
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
    if (want->dtype == FR_F32 || want->dtype == FR_F64) r2 = fmax(r2, floor_norm * floor_norm);
    if (r2 == 0) return d2 == 0 && (exact_bytes || want->dtype != FR_BF16) ? 0.0 : INFINITY;
    /* bfloat16 (a Linear's y_dtype) compares by value, but bytes that differ are never 0 */
    return want->dtype == FR_BF16 ? fmax(sqrt(d2 / r2), 1e-300) : sqrt(d2 / r2);
}

double gpu_rel_l2(const fr_tensor *got, const fr_tensor *want)
{
    if (!got || !want || fr_tensor_numel(got) != fr_tensor_numel(want)) return INFINITY;
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < fr_tensor_numel(want); i++) {
        const double a = fr_tensor_get_f64(got, i), b = fr_tensor_get_f64(want, i);
        if (!isfinite(a) || !isfinite(b)) return INFINITY;
        d2 += (a - b) * (a - b);
        r2 += b * b;
    }
    return r2 > 0 ? sqrt(d2 / r2) : (d2 == 0 ? 0 : INFINITY);
}

/* ---- comparing with a readable report ---- */

void gpu_print_elem(const fr_tensor *x, int64_t i)
{
    size_t es = fr_dtype_size(x->dtype);
    const unsigned char *p = (const unsigned char *)x->data + (size_t)i * es;
    fprintf(stderr, "%.17g (0x", fr_tensor_get_f64(x, i));
    for (size_t b = es; b-- > 0;) fprintf(stderr, "%02x", p[b]); /* most significant byte first */
    fprintf(stderr, ")");
}

void gpu_print_case(const char *what, tnode *t)
{
    const fr_node *nd = tn_node(t);
    char s[160];
    fprintf(stderr, "\n  case: %s\n    node: %s%s%s {", what, nd->domain, nd->domain[0] ? "::" : "", nd->op_type);
    for (int a = 0; a < nd->n_attrs; a++) {
        const fr_attr *x = &nd->attrs[a];
        fprintf(stderr, " %s", x->name);
        if (x->type == FR_ATTR_INT)
            fprintf(stderr, "=%lld", (long long)x->i);
        else if (x->type == FR_ATTR_FLOAT)
            fprintf(stderr, "=%g", x->f);
        else if (x->type == FR_ATTR_STRING)
            fprintf(stderr, "=%s", x->s);
        else if (x->type == FR_ATTR_INTS)
            fprintf(stderr, "=%s", fr_shape_str(x->n > FR_MAX_RANK ? FR_MAX_RANK : x->n, x->ints, s, sizeof s));
    }
    fprintf(stderr, " }\n");
    for (int i = 0; i < t->n_in; i++) {
        if (!t->in[i])
            fprintf(stderr, "    input %d: omitted\n", i);
        else
            fprintf(stderr, "    input %d: %s %s\n", i, fr_dtype_name(t->in[i]->dtype),
                    fr_shape_str(t->in[i]->rank, t->in[i]->dims, s, sizeof s));
    }
}

/* "at flat 7 [1, 3]: GPU 1.5 (0x3fc00000), CPU 1.25 (0x3fa00000)" */
static void print_pair(const fr_tensor *got, const fr_tensor *want, int64_t i)
{
    char s[160];
    int64_t c[FR_MAX_RANK];
    if (want->rank) tt_unravel(i, want->rank, want->dims, c);
    fprintf(stderr, "at flat %lld %s: GPU ", (long long)i, fr_shape_str(want->rank, c, s, sizeof s));
    gpu_print_elem(got, i);
    fprintf(stderr, ", CPU ");
    gpu_print_elem(want, i);
    fprintf(stderr, "\n");
}

int64_t gpu_print_mismatch(const char *name, const fr_tensor *got, const fr_tensor *want, double err, double tol)
{
    char s[160];
    fprintf(stderr, "    %s: %s %s, relative L2 error %g > %g\n", name, fr_dtype_name(want->dtype),
            fr_shape_str(want->rank, want->dims, s, sizeof s), err, tol);
    if (!got || got->dtype != want->dtype || got->nbytes != want->nbytes) {
        fprintf(stderr, "    the GPU output has another dtype or size\n");
        return -1;
    }
    int64_t n = fr_tensor_numel(want), first = -1, worst = -1, count = 0;
    double wd = -1;
    const int flt = want->dtype == FR_F32 || want->dtype == FR_F64;
    for (int64_t i = 0; i < n; i++) {
        double a = fr_tensor_get_f64(got, i), b = fr_tensor_get_f64(want, i);
        int bad;
        if (!flt)
            bad = !tt_same_elem(got, i, want, i);
        else if (!isfinite(a) || !isfinite(b))
            bad = !(isnan(a) && isnan(b)) && a != b;
        else /* 10 x tol: single out the outliers, not the rounding every element has */
            bad = fabs(a - b) > 10 * tol * fabs(b) + (tol > 0 ? 1e-300 : 0);
        if (!bad) continue;
        count++;
        if (first < 0) first = i;
        double d = isfinite(a - b) ? fabs(a - b) : INFINITY;
        if (d > wd) {
            wd = d;
            worst = i;
        }
    }
    if (first < 0) {
        fprintf(stderr, "    no single element differs beyond 10 x tol: only the norm does\n");
        return -1;
    }
    fprintf(stderr, "    %lld of %lld elements differ; first ", (long long)count, (long long)n);
    print_pair(got, want, first);
    if (worst != first) {
        fprintf(stderr, "    largest ");
        print_pair(got, want, worst);
    }
    return first;
}

int gpu_n_exact, gpu_n_close;

int gpu_check_at(tnode *t, double tol, const char *what, gpu_at_fn at) { return gpu_check_floor(t, tol, 0, what, at); }

int gpu_check_floor(tnode *t, double tol, double floor_norm, const char *what, gpu_at_fn at)
{
    fr_tensor *g[TN_MAX];
    fr_status st = tn_run_gpu(t, g);
    if (st != FR_OK) {
        gpu_print_case(what, t);
        fprintf(stderr, "    GPU run failed (%s): %s\n", fr_status_name(st), fr_last_error());
        CU_FAIL("GPU run failed");
        gpu_free_outputs(t, g);
        return 0;
    }
    int ok = 1;
    for (int o = 0; o < t->n_out; o++) {
        const fr_tensor *want = t->out[o];
        if (!want) continue;
        double e = gpu_rel_err_floor(g[o], want, floor_norm);
        if (e <= tol) {
            /* within e <= tol the dtypes and sizes match */
            if (tol > 0) {
                if (!want->nbytes || memcmp(g[o]->data, want->data, want->nbytes) == 0)
                    gpu_n_exact++;
                else
                    gpu_n_close++;
            }
            continue;
        }
        if (ok) gpu_print_case(what, t);
        ok = 0;
        char name[32];
        snprintf(name, sizeof name, "output %d", o);
        int64_t i = gpu_print_mismatch(name, g[o], want, e, tol);
        if (at && i >= 0) at(t, want, i);
    }
    CU_ASSERT(ok);
    gpu_free_outputs(t, g);
    return ok;
}

int gpu_check(tnode *t, double tol, const char *what) { return gpu_check_at(t, tol, what, NULL); }

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

fr_graph *gpu_tiny_llama(void)
{
    fr_llama_config c = {64, 2, 4, 2, 128, 256, 32, 11};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&c, &g));
    return g;
}

void gpu_windows(uint64_t *s, int64_t *w, int64_t n, int64_t vocab)
{
    for (int64_t i = 0; i < n; i++) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        w[i] = (int64_t)(*s % (uint64_t)vocab);
    }
}

double gpu_params_rel_diff(fr_trainer *a, fr_trainer *b)
{
    double d2 = 0, r2 = 0;
    for (int i = 0; i < fr_trainer_param_count(a); i++) {
        const char *name = fr_trainer_param_name(a, i);
        int64_t n = fr_trainer_param_numel(a, i);
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        FR_ASSERT_OK(fr_trainer_get_param(a, name, x));
        FR_ASSERT_OK(fr_trainer_get_param(b, name, y));
        for (int64_t e = 0; e < n; e++) {
            d2 += ((double)x[e] - y[e]) * ((double)x[e] - y[e]);
            r2 += (double)y[e] * y[e];
        }
        free(x);
        free(y);
    }
    return sqrt(d2 / (r2 > 0 ? r2 : 1));
}
