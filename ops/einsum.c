/* Einsum (ONNX opset 12+): explicit or implicit equations over any number of operands, each
 * letter one index; repeated letters within one operand (diagonals) and '...' are refused
 * with a clear error. Exporters emit it for small products (torch.outer / einsum in rotary
 * embeddings, "bhqd,bhkd->bhqk" attention), so the kernel is a direct loop over every index
 * combination, accumulated in double: simple and exact rather than fast. The gradient of
 * operand k is the Einsum of the output gradient with the other operands onto k's letters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"

#define EINSUM_MAX_OPS 8

typedef struct einsum_spec {
    int n_ops;
    char in[EINSUM_MAX_OPS][FR_MAX_RANK + 1];
    char out[FR_MAX_RANK + 1];
    int n_letters;
    char letters[52];
    int64_t size[52];
} einsum_spec;

static int letter_index(const einsum_spec *s, char c)
{
    for (int i = 0; i < s->n_letters; i++)
        if (s->letters[i] == c) return i;
    return -1;
}

static fr_status parse(const fr_node *n, const char *eq, int n_ops, einsum_spec *s)
{
    memset(s, 0, sizeof *s);
    const char *arrow = strstr(eq, "->");
    int k = 0, len = 0;
    if (strstr(eq, "..."))
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s': '...' (ellipsis) is not supported", eq);
    for (const char *p = eq; *p && (!arrow || p < arrow); p++) {
        if (*p == ' ') continue;
        if (*p == ',') {
            if (++k >= EINSUM_MAX_OPS) return fr_node_error(n, FR_ERR_UNSUPPORTED, "too many operands");
            len = 0;
            continue;
        }
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return fr_node_error(n, FR_ERR_GRAPH, "equation '%s': unexpected character '%c'", eq, *p);
        if (len >= FR_MAX_RANK) return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s': operand rank > %d", eq, FR_MAX_RANK);
        if (strchr(s->in[k], *p))
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "equation '%s': a letter repeated within one operand (diagonal) is not supported", eq);
        s->in[k][len++] = *p;
        if (letter_index(s, *p) < 0) s->letters[s->n_letters++] = *p;
    }
    s->n_ops = k + 1;
    if (s->n_ops != n_ops)
        return fr_node_error(n, FR_ERR_GRAPH, "equation '%s' has %d operands but the node has %d inputs", eq, s->n_ops, n_ops);
    if (arrow) {
        int o = 0;
        for (const char *p = arrow + 2; *p; p++) {
            if (*p == ' ') continue;
            if (letter_index(s, *p) < 0 || strchr(s->out, *p) || o >= FR_MAX_RANK)
                return fr_node_error(n, FR_ERR_GRAPH, "equation '%s': bad output letter '%c'", eq, *p);
            s->out[o++] = *p;
        }
    } else { /* implicit: letters appearing once, alphabetical */
        int o = 0;
        for (char c = 'A'; c <= 'z'; c++) {
            int cnt = 0;
            for (int i = 0; i < s->n_ops; i++) cnt += strchr(s->in[i], c) != NULL;
            if (cnt == 1 && o < FR_MAX_RANK) s->out[o++] = c;
        }
    }
    return FR_OK;
}

static fr_status bind_sizes(const fr_node *n, einsum_spec *s, fr_value *const *ins)
{
    for (int i = 0; i < s->n_letters; i++) s->size[i] = -1;
    for (int k = 0; k < s->n_ops; k++) {
        if ((int)strlen(s->in[k]) != ins[k]->rank)
            return fr_node_error(n, FR_ERR_SHAPE, "operand %d has rank %d, the equation gives it %zu letters", k,
                                 ins[k]->rank, strlen(s->in[k]));
        for (int d = 0; d < ins[k]->rank; d++) {
            int li = letter_index(s, s->in[k][d]);
            int64_t sz = ins[k]->dims[d];
            if (s->size[li] < 0 || s->size[li] == 1) s->size[li] = sz;
            else if (sz != 1 && sz != s->size[li])
                return fr_node_error(n, FR_ERR_SHAPE, "index '%c' has sizes %lld and %lld", s->in[k][d],
                                     (long long)s->size[li], (long long)sz);
        }
    }
    return FR_OK;
}

static fr_status einsum_infer(fr_graph *g, int node_id)
{
    const fr_node *n = &g->nodes[node_id];
    FR_TRY(fr_infer_require_inputs(g, n, 1, EINSUM_MAX_OPS));
    const char *eq;
    FR_TRY(fr_node_attr_string(n, "equation", NULL, &eq));
    if (!eq) return fr_node_error(n, FR_ERR_GRAPH, "attribute 'equation' is required");
    einsum_spec s;
    FR_TRY(parse(n, eq, n->n_inputs, &s));
    fr_value *ins[EINSUM_MAX_OPS];
    for (int k = 0; k < n->n_inputs; k++) {
        ins[k] = fr_node_in(g, n, k);
        if (ins[k]->dtype != FR_F32 && ins[k]->dtype != FR_F64)
            return fr_node_error(n, FR_ERR_UNSUPPORTED, "dtype %s (float32/float64 only)", fr_dtype_name(ins[k]->dtype));
        if (ins[k]->dtype != ins[0]->dtype) return fr_node_error(n, FR_ERR_SHAPE, "operands differ in dtype");
    }
    FR_TRY(bind_sizes(n, &s, ins));
    int64_t dims[FR_MAX_RANK];
    int r = (int)strlen(s.out);
    for (int d = 0; d < r; d++) dims[d] = s.size[letter_index(&s, s.out[d])];
    fr_infer_set(g, n, 0, ins[0]->dtype, r, dims);
    return FR_OK;
}

static double get(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static fr_status einsum_cpu(const fr_kernel_ctx *ctx)
{
    const fr_node *n = ctx->node;
    const char *eq;
    FR_TRY(fr_node_attr_string(n, "equation", NULL, &eq));
    einsum_spec s;
    FR_TRY(parse(n, eq, ctx->n_in, &s));
    fr_value tmp[EINSUM_MAX_OPS], *ins[EINSUM_MAX_OPS];
    for (int k = 0; k < ctx->n_in; k++) {
        memset(&tmp[k], 0, sizeof tmp[k]);
        fr_value_set_shape(&tmp[k], ctx->in[k]->dtype, ctx->in[k]->rank, ctx->in[k]->dims);
        ins[k] = &tmp[k];
    }
    FR_TRY(bind_sizes(n, &s, ins));
    /* strides of each operand and of the output per letter (0 where absent or broadcast) */
    int64_t st[EINSUM_MAX_OPS + 1][52] = {{0}};
    for (int k = 0; k <= s.n_ops; k++) {
        const char *spec = k < s.n_ops ? s.in[k] : s.out;
        const fr_tensor *t = k < s.n_ops ? ctx->in[k] : ctx->out[0];
        int64_t stride = 1;
        for (int d = (int)strlen(spec) - 1; d >= 0; d--) {
            int li = letter_index(&s, spec[d]);
            st[k][li] = t->dims[d] == 1 ? 0 : stride;
            stride *= t->dims[d];
        }
    }
    fr_tensor *y = ctx->out[0];
    int64_t ny = fr_tensor_numel(y), total = 1;
    for (int i = 0; i < s.n_letters; i++) total *= s.size[i];
    double *acc = fr_calloc((size_t)(ny ? ny : 1), sizeof(double), "Einsum accumulator");
    if (!acc) return FR_ERR_OOM;
    int64_t idx[52] = {0}, off[EINSUM_MAX_OPS + 1] = {0};
    for (int64_t it = 0; it < total; it++) {
        double p = 1;
        for (int k = 0; k < s.n_ops; k++) p *= get(ctx->in[k], off[k]);
        acc[off[s.n_ops]] += p;
        for (int li = s.n_letters - 1; li >= 0; li--) { /* odometer over every letter */
            idx[li]++;
            for (int k = 0; k <= s.n_ops; k++) off[k] += st[k][li];
            if (idx[li] < s.size[li]) break;
            for (int k = 0; k <= s.n_ops; k++) off[k] -= st[k][li] * s.size[li];
            idx[li] = 0;
        }
    }
    fr_store_acc(y, acc, ny);
    free(acc);
    return FR_OK;
}

/* d out / d operand k: Einsum("out,others->k") of dY with the other operands. Letters of k
 * that appear nowhere else would need a broadcast, which this form cannot express. */
static fr_status einsum_grad(fr_grad_ctx *ctx)
{
    const fr_node *n = &ctx->g->nodes[ctx->node_id];
    const char *eq;
    FR_TRY(fr_node_attr_string(n, "equation", NULL, &eq));
    einsum_spec s;
    FR_TRY(parse(n, eq, n->n_inputs, &s));
    for (int k = 0; k < s.n_ops; k++) {
        if (!ctx->need_din[k] || ctx->dout[0] < 0) continue;
        char geq[128];
        int inputs[EINSUM_MAX_OPS], m = 0;
        size_t off = (size_t)snprintf(geq, sizeof geq, "%s", s.out);
        inputs[m++] = ctx->dout[0];
        for (int j = 0; j < s.n_ops; j++) {
            if (j == k) continue;
            off += (size_t)snprintf(geq + off, sizeof geq - off, ",%s", s.in[j]);
            inputs[m++] = n->inputs[j];
        }
        snprintf(geq + off, sizeof geq - off, "->%s", s.in[k]);
        for (const char *c = s.in[k]; *c; c++) {
            int seen = strchr(s.out, *c) != NULL;
            for (int j = 0; j < s.n_ops && !seen; j++) seen = j != k && strchr(s.in[j], *c);
            if (!seen)
                return fr_node_error(n, FR_ERR_UNSUPPORTED,
                                     "gradient of operand %d: index '%c' is summed within that operand alone", k, *c);
        }
        int out, nid;
        FR_TRY(fr_grad_node(ctx, "Einsum", "", m, inputs, 1, &out, &nid));
        FR_TRY(fr_node_set_attr_string(&ctx->g->nodes[nid], "equation", geq));
        FR_TRY(fr_grad_finish(ctx, nid));
        /* an operand broadcast along a size-1 dim gets its gradient summed back */
        FR_TRY(fr_grad_sum_to(ctx, out, n->inputs[k], &ctx->din[k]));
        n = &ctx->g->nodes[ctx->node_id];
    }
    return FR_OK;
}

const fr_op_def fr_ops_einsum[] = {
    {"Einsum", FR_DOMAIN_ONNX, 12, einsum_infer, einsum_cpu, einsum_grad, 0},
    {0},
};
