/* CUDA kernel of Einsum (ops/einsum.c; see ops/cuda/cuda_kernel.h for the contract): one thread
 * per output element sums over the contracted letters in double, in the CPU kernel's order
 * (letters in order of first appearance, the last one fastest), so the results are
 * bit-identical to ops/einsum.c. */
#include <string.h>

#include "ops/cuda/cuda_kernel.h"

#define THREADS 256


#define ES_MAX_OPS 8
#define ES_MAX_SUM 16

typedef struct es_params {
    int n_ops, n_out, n_sum, f64;
    int64_t n_out_elems, n_sum_elems;
    int64_t out_size[FR_MAX_RANK];
    int64_t sum_size[ES_MAX_SUM];
    int64_t out_stride[ES_MAX_OPS][FR_MAX_RANK]; /* operand k's stride for output letter d */
    int64_t sum_stride[ES_MAX_OPS][ES_MAX_SUM];  /* ... and for summed letter s */
    const void *in[ES_MAX_OPS];
    void *out;
} es_params;

__global__ void einsum_kernel(es_params p)
{
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < p.n_out_elems;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t base[ES_MAX_OPS];
        for (int k = 0; k < p.n_ops; k++) base[k] = 0;
        int64_t rem = o;
        for (int d = p.n_out - 1; d >= 0; d--) {
            int64_t c = rem % p.out_size[d];
            rem /= p.out_size[d];
            for (int k = 0; k < p.n_ops; k++) base[k] += c * p.out_stride[k][d];
        }
        int64_t idx[ES_MAX_SUM], off[ES_MAX_OPS];
        for (int s = 0; s < p.n_sum; s++) idx[s] = 0;
        for (int k = 0; k < p.n_ops; k++) off[k] = base[k];
        double acc = 0.0;
        for (int64_t it = 0; it < p.n_sum_elems; it++) {
            double prod = 1.0; /* explicit roundings: no FMA contraction, the CPU's exact sums */
            for (int k = 0; k < p.n_ops; k++)
                prod = __dmul_rn(prod, p.f64 ? ((const double *)p.in[k])[off[k]]
                                             : (double)((const float *)p.in[k])[off[k]]);
            acc = __dadd_rn(acc, prod);
            for (int s = p.n_sum - 1; s >= 0; s--) { /* odometer, last summed letter fastest */
                idx[s]++;
                for (int k = 0; k < p.n_ops; k++) off[k] += p.sum_stride[k][s];
                if (idx[s] < p.sum_size[s]) break;
                for (int k = 0; k < p.n_ops; k++) off[k] -= p.sum_stride[k][s] * p.sum_size[s];
                idx[s] = 0;
            }
        }
        if (p.f64)
            ((double *)p.out)[o] = acc;
        else
            ((float *)p.out)[o] = (float)acc;
    }
}

/* Parse the equation (already validated by shape inference; checked again here). Letters are
 * numbered in order of first appearance, as in ops/einsum.c. */
static fr_status einsum_run(const fr_cuda_kctx *k)
{
    const fr_node *n = k->node;
    const char *eq;
    FR_TRY(fr_node_attr_string(n, "equation", NULL, &eq));
    if (!eq) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'equation' is required");
    if (strstr(eq, "..."))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s': '...' (ellipsis) is not supported", eq);
    char in[ES_MAX_OPS][FR_MAX_RANK + 1], out[FR_MAX_RANK + 1], letters[53];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    memset(letters, 0, sizeof letters);
    int n_ops = 0, len = 0, n_letters = 0;
    const char *arrow = strstr(eq, "->");
    for (const char *c = eq; *c && (!arrow || c < arrow); c++) {
        if (*c == ' ') continue;
        if (*c == ',') {
            if (++n_ops >= ES_MAX_OPS) return fr_node_error(n, FR_ERR_UNSUPPORTED, "too many operands");
            len = 0;
            continue;
        }
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')) || len >= FR_MAX_RANK ||
            strchr(in[n_ops], *c))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s' is not supported", eq);
        in[n_ops][len++] = *c;
        if (!strchr(letters, *c)) letters[n_letters++] = *c;
    }
    n_ops++;
    if (n_ops != k->n_in)
        return fr_node_error(n, FR_ERR_GRAPH, "equation '%s' has %d operands but the node has %d inputs", eq, n_ops,
                             k->n_in);
    int n_out = 0;
    if (arrow) {
        for (const char *c = arrow + 2; *c; c++) {
            if (*c == ' ') continue;
            if (!strchr(letters, *c) || strchr(out, *c) || n_out >= FR_MAX_RANK)
                return fr_node_error(n, FR_ERR_GRAPH, "equation '%s': bad output letter '%c'", eq, *c);
            out[n_out++] = *c;
        }
    } else {
        for (char c = 'A'; c <= 'z'; c++) {
            int cnt = 0;
            for (int i = 0; i < n_ops; i++) cnt += strchr(in[i], c) != NULL;
            if (cnt == 1 && n_out < FR_MAX_RANK) out[n_out++] = c;
        }
    }
    /* letter sizes (size-1 dims broadcast) */
    int64_t size[52];
    for (int i = 0; i < n_letters; i++) size[i] = -1;
    for (int op = 0; op < n_ops; op++) {
        const fr_tensor *t = k->in[op];
        if (!t || t->rank != (int)strlen(in[op]) || t->dtype != k->in[0]->dtype ||
            (t->dtype != FR_F32 && t->dtype != FR_F64))
            return fr_node_error(n, FR_ERR_SHAPE, "operand %d does not match the equation '%s'", op, eq);
        for (int d = 0; d < t->rank; d++) {
            int li = (int)(strchr(letters, in[op][d]) - letters);
            if (size[li] < 0 || size[li] == 1)
                size[li] = t->dims[d];
            else if (t->dims[d] != 1 && t->dims[d] != size[li])
                return fr_node_error(n, FR_ERR_SHAPE, "index '%c' has sizes %lld and %lld", in[op][d],
                                     (long long)size[li], (long long)t->dims[d]);
        }
    }
    es_params p;
    memset(&p, 0, sizeof p);
    p.n_ops = n_ops;
    p.n_out = n_out;
    p.f64 = k->in[0]->dtype == FR_F64;
    p.out = k->out[0]->data;
    int sum_letter[52], n_sum = 0;
    for (int li = 0; li < n_letters; li++)
        if (!strchr(out, letters[li])) {
            if (n_sum >= ES_MAX_SUM)
                return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s' sums over more than %d letters", eq,
                                     ES_MAX_SUM);
            sum_letter[n_sum++] = li;
        }
    p.n_sum = n_sum;
    p.n_out_elems = 1;
    for (int d = 0; d < n_out; d++) {
        p.out_size[d] = size[strchr(letters, out[d]) - letters];
        p.n_out_elems *= p.out_size[d];
    }
    p.n_sum_elems = 1;
    for (int s = 0; s < n_sum; s++) {
        p.sum_size[s] = size[sum_letter[s]];
        p.n_sum_elems *= p.sum_size[s];
    }
    for (int op = 0; op < n_ops; op++) {
        const fr_tensor *t = k->in[op];
        p.in[op] = t->data;
        int64_t stride = 1;
        for (int d = t->rank - 1; d >= 0; d--) {
            char c = in[op][d];
            int64_t st = t->dims[d] == 1 ? 0 : stride;
            stride *= t->dims[d];
            const char *po = strchr(out, c);
            if (po) {
                p.out_stride[op][po - out] = st;
            } else {
                int li = (int)(strchr(letters, c) - letters);
                for (int s = 0; s < n_sum; s++)
                    if (sum_letter[s] == li) p.sum_stride[op][s] = st;
            }
        }
    }
    const fr_tensor *y = k->out[0];
    if (fr_tensor_numel(y) != p.n_out_elems || y->dtype != k->in[0]->dtype)
        return fr_node_error(n, FR_ERR_SHAPE, "output does not have the inferred shape (re-run shape inference)");
    if (p.n_out_elems == 0) return FR_OK;
    int64_t blocks = (p.n_out_elems + THREADS - 1) / THREADS;
    if (blocks > 65536) blocks = 65536; /* the grid-stride loop covers the rest */
    einsum_kernel<<<(unsigned)blocks, THREADS, 0, k->cu->stream>>>(p);
    return fr_cuda_check_launch(n, "einsum");
}

extern "C" const fr_cuda_kernel_def fr_cuda_kernels_einsum[] = {
    {"Einsum", FR_DOMAIN_ONNX, einsum_run, NULL},
    {NULL, NULL, NULL, NULL},
};
