/* The FP8 compile pass on graphs built here the way exporters write them: an attention block
 * with q/k/v MatMul+Add on one input and an o_proj through Transpose(W), a SwiGLU MLP
 * (gate/up/down), an LM head; a 2-D Gemm variant (transB 0/1, C biases, Gemm+Add, ineligible
 * alpha/beta/left-weight forms). Checks which layers became FP8, fusion (weights, biases,
 * Split, slices table), boundaries, the exclude regex, state values, the report text, syncing
 * fused parameters back, binding amax_dy after autodiff, and that the compiled graph computes
 * what the original does (fp32 to 1e-6, bf16/fp8 within their rounding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/linear.h"
#include "passes/autodiff.h"
#include "passes/fp8_compile.h"

/* ---- reference kernels for the standard ops these graphs use, taken only where the registry
 * does not have the op (yet): MatMul with a 2-D right operand, Gemm, 2-D Transpose, Split ---- */

static fr_status no_infer(fr_graph *g, int node_id)
{
    (void)g;
    (void)node_id;
    return FR_OK;
}

static fr_status ref_matmul(const fr_kernel_ctx *ctx)
{
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1];
    int64_t K = b->dims[0], N = b->dims[1], M = fr_tensor_numel(a) / (K ? K : 1);
    const float *av = a->data, *bv = b->data;
    float *y = ctx->out[0]->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)av[m * K + k] * bv[k * N + n];
            y[m * N + n] = (float)s;
        }
    return FR_OK;
}

static fr_status ref_gemm(const fr_kernel_ctx *ctx)
{
    const fr_tensor *a = ctx->in[0], *b = ctx->in[1], *c = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t tb, ta;
    float alpha, beta;
    FR_TRY(fr_node_attr_int(ctx->node, "transB", 0, &tb));
    FR_TRY(fr_node_attr_int(ctx->node, "transA", 0, &ta));
    FR_TRY(fr_node_attr_float(ctx->node, "alpha", 1.0f, &alpha));
    FR_TRY(fr_node_attr_float(ctx->node, "beta", 1.0f, &beta));
    int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
    int64_t N = tb ? b->dims[0] : b->dims[1];
    const float *av = a->data, *bv = b->data, *cv = c ? c->data : NULL;
    float *y = ctx->out[0]->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)(ta ? av[k * M + m] : av[m * K + k]) * (tb ? bv[n * K + k] : bv[k * N + n]);
            s *= alpha;
            if (cv) s += (double)beta * cv[fr_tensor_numel(c) == N ? n : m * N + n];
            y[m * N + n] = (float)s;
        }
    return FR_OK;
}

static fr_status ref_transpose(const fr_kernel_ctx *ctx)
{
    const fr_tensor *a = ctx->in[0];
    int64_t R = a->dims[0], C = a->dims[1];
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) ((float *)ctx->out[0]->data)[c * R + r] = ((float *)a->data)[r * C + c];
    return FR_OK;
}

static fr_status ref_split(const fr_kernel_ctx *ctx) /* along the last axis */
{
    const fr_tensor *a = ctx->in[0];
    int64_t C = a->dims[a->rank - 1], R = fr_tensor_numel(a) / C, off = 0;
    for (int o = 0; o < ctx->n_out; o++) {
        int64_t w = ctx->out[o]->dims[ctx->out[o]->rank - 1];
        for (int64_t r = 0; r < R; r++)
            memcpy((float *)ctx->out[o]->data + r * w, (const float *)a->data + r * C + off, (size_t)w * 4);
        off += w;
    }
    return FR_OK;
}

static const fr_op_def fallback_ops[] = {
    {"MatMul", "", 1, no_infer, ref_matmul, NULL, 0},
    {"Gemm", "", 1, no_infer, ref_gemm, NULL, 0},
    {"Transpose", "", 1, no_infer, ref_transpose, NULL, 0},
    {"Split", "", 1, no_infer, ref_split, NULL, 0},
    {0},
};

static void resolve(fr_graph *g)
{
    for (int n = 0; n < g->n_nodes; n++) {
        fr_node *nd = &g->nodes[n];
        if (nd->op) continue;
        nd->op = fr_op_find(nd->domain, nd->op_type);
        if (!nd->op && strcmp(nd->domain, FR_DOMAIN_FP8RUN) == 0) nd->op = fr_linear_op(nd->op_type);
        for (const fr_op_def *d = fallback_ops; !nd->op && d->op_type; d++)
            if (strcmp(d->op_type, nd->op_type) == 0) nd->op = d;
    }
}

/* ---- graph builders (shapes set here, as shape inference would) ---- */

static int input(fr_graph *g, fr_rng *r, const char *name, int rank, const int64_t *dims)
{
    int vid = fr_gc_add_input(g, r, name, FR_F32, rank, dims, NULL); /* constant data: the feed */
    g->values[vid].flags |= FR_VAL_INPUT;
    return vid;
}

static int param(fr_graph *g, fr_rng *r, const char *name, int rank, int64_t d0, int64_t d1)
{
    int64_t dims[2] = {d0, d1};
    int vid;
    fr_tensor *t;
    if (fr_graph_add_value(g, name, &vid) != FR_OK || fr_tensor_new(FR_F32, rank, dims, name, &t) != FR_OK)
        return -1;
    fr_rng_fill_normal(r, t->data, fr_tensor_numel(t), 0.3f);
    FR_ASSERT_OK(fr_graph_set_initializer(g, vid, t));
    return vid;
}

/* node with one output of the given shape; returns the output value */
static int op(fr_graph *g, const char *type, const char *name, int n_in, const int *in, int rank,
              const int64_t *dims)
{
    int out, nid;
    char on[256];
    snprintf(on, sizeof on, "%s_out", name);
    if (fr_graph_add_value(g, on, &out) != FR_OK) return -1;
    fr_value_set_shape(&g->values[out], FR_F32, rank, dims);
    if (fr_graph_add_node(g, type, "", name, n_in, in, 1, &out, &nid) != FR_OK) return -1;
    return out;
}

static int op2(fr_graph *g, const char *type, const char *name, int a, int b, int rank, const int64_t *dims)
{
    int in[2] = {a, b};
    return op(g, type, name, 2, in, rank, dims);
}

static int transposed(fr_graph *g, const char *name, int w)
{
    const fr_value *wv = &g->values[w];
    int64_t d[2] = {wv->dims[1], wv->dims[0]};
    int t = op(g, "Transpose", name, 1, &w, 2, d);
    int64_t perm[2] = {1, 0};
    FR_ASSERT_OK(fr_node_set_attr_ints(&g->nodes[g->n_nodes - 1], "perm", 2, perm));
    return t;
}

/* Block A (rank-3 activations [2, 5, 16], opset 17):
 *   q|k|v = MatMul(x, W[16,16]) + bias  (k's Add has the bias first)
 *   ctx = q * sigmoid(k) + v;  o = MatMul(ctx, Transpose(o.weight[16,16]));  h1 = x + o
 *   gate|up = MatMul(h1, Transpose(W[32,16]));  act = gate * sigmoid(gate) * up
 *   down = MatMul(act, Transpose(down.weight[16,32]));  h2 = h1 + down
 *   logits = MatMul(h2, lm_head.weight[16,11])  -> graph output */
static fr_graph *build_block_a(uint64_t seed, int *logits)
{
    fr_rng r = {seed};
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d16[3] = {2, 5, 16}, d32[3] = {2, 5, 32}, d11[3] = {2, 5, 11};
    int x = input(g, &r, "x", 3, d16);
    int qw = param(g, &r, "q.weight", 2, 16, 16), qb = param(g, &r, "q.bias", 1, 16, 0);
    int kw = param(g, &r, "k.weight", 2, 16, 16), kb = param(g, &r, "k.bias", 1, 16, 0);
    int vw = param(g, &r, "v.weight", 2, 16, 16), vb = param(g, &r, "v.bias", 1, 16, 0);
    int ow = param(g, &r, "o.weight", 2, 16, 16);
    int gw = param(g, &r, "gate.weight", 2, 32, 16), uw = param(g, &r, "up.weight", 2, 32, 16);
    int dw = param(g, &r, "down.weight", 2, 16, 32), lw = param(g, &r, "lm_head.weight", 2, 16, 11);
    int q = op2(g, "Add", "q_proj/Add", op2(g, "MatMul", "q_proj/MatMul", x, qw, 3, d16), qb, 3, d16);
    int k = op2(g, "Add", "k_proj/Add", kb, op2(g, "MatMul", "k_proj/MatMul", x, kw, 3, d16), 3, d16);
    int v = op2(g, "Add", "v_proj/Add", op2(g, "MatMul", "v_proj/MatMul", x, vw, 3, d16), vb, 3, d16);
    int ctx = op2(g, "Add", "ctx", op2(g, "Mul", "qk", q, op(g, "Sigmoid", "sk", 1, &k, 3, d16), 3, d16), v, 3, d16);
    int o = op2(g, "MatMul", "o_proj/MatMul", ctx, transposed(g, "o_proj/T", ow), 3, d16);
    int h1 = op2(g, "Add", "res1", x, o, 3, d16);
    int gate = op2(g, "MatMul", "gate_proj/MatMul", h1, transposed(g, "gate_proj/T", gw), 3, d32);
    int up = op2(g, "MatMul", "up_proj/MatMul", h1, transposed(g, "up_proj/T", uw), 3, d32);
    int silu = op2(g, "Mul", "silu", gate, op(g, "Sigmoid", "sg", 1, &gate, 3, d32), 3, d32);
    int act = op2(g, "Mul", "act", silu, up, 3, d32);
    int down = op2(g, "MatMul", "down_proj/MatMul", act, transposed(g, "down_proj/T", dw), 3, d16);
    int h2 = op2(g, "Add", "res2", h1, down, 3, d16);
    *logits = op2(g, "MatMul", "lm_head/MatMul", h2, lw, 3, d11);
    FR_ASSERT_OK(fr_graph_mark_output(g, *logits));
    return g;
}

/* Block B (2-D [6, 16], Gemm forms; opset given):
 *   q = Gemm(x, q.weight[8,16], q.bias[8], transB=1); k = Gemm(x, k.weight[8,16], k.bias[1,8],
 *   transB=1); v = Gemm(x, v.weight[16,8], v.bias[8]) (transB=0)
 *   ctx = q * sigmoid(k) + v;  o = Gemm(ctx, o.weight[16,8], o.bias[16], transB=1)
 *   s = Gemm(o, s.weight[16,16], transB=1, alpha=0.5)      -> not eligible
 *   b2 = Gemm(s, b2.weight[16,16], b2.c[16], beta=2)         -> not eligible
 *   wl = MatMul(left.weight[6,6], b2)                        -> weight on the left
 *   att = MatMul(o, Transpose(o))  (activation x activation: not a Linear, not reported)
 *   head = Gemm(wl, head.weight[10,16], transB=1) + head.bias[10]  -> logits */
static fr_graph *build_block_b(uint64_t seed, int64_t opset, int *logits, int *att)
{
    fr_rng r = {seed};
    fr_graph *g = fr_gc_new_graph(opset);
    int64_t d16[2] = {6, 16}, d8[2] = {6, 8}, d10[2] = {6, 10}, d66[2] = {6, 6};
    int x = input(g, &r, "x", 2, d16);
    int qw = param(g, &r, "q.weight", 2, 8, 16), qb = param(g, &r, "q.bias", 1, 8, 0);
    int kw = param(g, &r, "k.weight", 2, 8, 16), kb = param(g, &r, "k.bias", 2, 1, 8);
    int vw = param(g, &r, "v.weight", 2, 16, 8), vb = param(g, &r, "v.bias", 1, 8, 0);
    int ow = param(g, &r, "o.weight", 2, 16, 8), ob = param(g, &r, "o.bias", 1, 16, 0);
    int sw = param(g, &r, "s.weight", 2, 16, 16), b2w = param(g, &r, "b2.weight", 2, 16, 16);
    int b2c = param(g, &r, "b2.c", 1, 16, 0), lw = param(g, &r, "left.weight", 2, 6, 6);
    int hw = param(g, &r, "head.weight", 2, 10, 16), hb = param(g, &r, "head.bias", 1, 10, 0);
    int in3[3];
    in3[0] = x, in3[1] = qw, in3[2] = qb;
    int q = op(g, "Gemm", "q_gemm", 3, in3, 2, d8);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "transB", 1));
    in3[1] = kw, in3[2] = kb;
    int k = op(g, "Gemm", "k_gemm", 3, in3, 2, d8);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "transB", 1));
    in3[1] = vw, in3[2] = vb;
    int v = op(g, "Gemm", "v_gemm", 3, in3, 2, d8);
    int ctx = op2(g, "Add", "ctx", op2(g, "Mul", "qk", q, op(g, "Sigmoid", "sk", 1, &k, 2, d8), 2, d8), v, 2, d8);
    in3[0] = ctx, in3[1] = ow, in3[2] = ob;
    int o = op(g, "Gemm", "o_gemm", 3, in3, 2, d16);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "transB", 1));
    int s = op2(g, "Gemm", "s_gemm", o, sw, 2, d16);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "transB", 1));
    FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[g->n_nodes - 1], "alpha", 0.5f));
    in3[0] = s, in3[1] = b2w, in3[2] = b2c;
    int b2 = op(g, "Gemm", "b2_gemm", 3, in3, 2, d16);
    FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[g->n_nodes - 1], "beta", 2.0f));
    int wl = op2(g, "MatMul", "left_matmul", lw, b2, 2, d16);
    int ot = transposed(g, "o_T", o);
    *att = op2(g, "MatMul", "att", o, ot, 2, d66);
    int head = op2(g, "Gemm", "head_gemm", wl, hw, 2, d10);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "transB", 1));
    *logits = op2(g, "Add", "head_add", head, hb, 2, d10);
    FR_ASSERT_OK(fr_graph_mark_output(g, *logits));
    FR_ASSERT_OK(fr_graph_mark_output(g, *att));
    return g;
}

/* ---- helpers ---- */

static const fr_fp8_layer *layer_with_weight(const fr_fp8_report *r, const char *w)
{
    for (int i = 0; i < r->n_layers; i++) {
        const char *p = r->layers[i].weights;
        size_t n = strlen(w);
        while (p && *p) {
            if (strncmp(p, w, n) == 0 && (p[n] == ',' || p[n] == '\0')) return &r->layers[i];
            p = strchr(p, ',');
            if (p) p++;
        }
    }
    return NULL;
}

static int count_ops(const fr_graph *g, const char *type)
{
    int c = 0;
    for (int n = 0; n < g->n_nodes; n++) c += strcmp(g->nodes[n].op_type, type) == 0;
    return c;
}

/* run and return a copy of value `vid` */
static float *run_copy(fr_graph *g, int vid, int64_t *n, fr_status *st)
{
    resolve(g);
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    *st = fr_gc_run(g, t);
    float *out = NULL;
    if (*st == FR_OK) {
        const fr_tensor *tv = g->values[vid].constant ? g->values[vid].constant : t[vid];
        *n = fr_tensor_numel(tv);
        out = malloc((size_t)*n * 4 + 4);
        memcpy(out, tv->data, (size_t)*n * 4);
    } else {
        fprintf(stderr, "\n  run failed: %s\n", fr_last_error());
    }
    fr_gc_free_tensors(g, t);
    free(t);
    return out;
}

static uint64_t seed_of(const char *name)
{
    fr_rng r = fr_test_rng(name);
    return r.s;
}

/* ---- tests ---- */

static void test_block_a_default(void)
{
    int logits;
    fr_graph *g = build_block_a(seed_of("block_a"), &logits);
    fr_fp8_options o;
    fr_fp8_options_default(&o);
    fr_fp8_report r;
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(r.n_linears, 8);
    CU_ASSERT_EQUAL(r.n_layers, 5);
    CU_ASSERT_EQUAL(r.n_fp8, 4);
    CU_ASSERT_EQUAL(r.n_bf16, 4);
    CU_ASSERT_EQUAL(r.n_skipped, 0);
    CU_ASSERT_EQUAL(fr_graph_opset(g, "ai.fp8run"), 1); /* the domain is imported */
    const fr_fp8_layer *qkv = layer_with_weight(&r, "q.weight"), *lm = layer_with_weight(&r, "lm_head.weight");
    const fr_fp8_layer *ol = layer_with_weight(&r, "o.weight"), *gu = layer_with_weight(&r, "gate.weight");
    const fr_fp8_layer *dl = layer_with_weight(&r, "down.weight");
    CU_ASSERT_FATAL(qkv && lm && ol && gu && dl);
    /* q/k/v fused, first group -> bf16 */
    CU_ASSERT_EQUAL(qkv->n_fused, 3);
    CU_ASSERT_STRING_EQUAL(qkv->weights, "q.weight,k.weight,v.weight");
    CU_ASSERT_EQUAL(qkv->precision, FR_LIN_BF16);
    CU_ASSERT_PTR_NOT_NULL(strstr(qkv->why, "boundary: first"));
    CU_ASSERT_PTR_NOT_NULL(strstr(qkv->why, "fused 3"));
    CU_ASSERT_EQUAL(qkv->K, 16);
    CU_ASSERT_EQUAL(qkv->N, 48);
    CU_ASSERT(qkv->has_bias);
    CU_ASSERT_EQUAL(qkv->transB, 0);
    CU_ASSERT_EQUAL(qkv->pad_multiple, 1);
    /* LM head: last -> bf16 */
    CU_ASSERT_EQUAL(lm->precision, FR_LIN_BF16);
    CU_ASSERT_PTR_NOT_NULL(strstr(lm->why, "LM head"));
    CU_ASSERT_EQUAL(lm->pad_multiple, 1); /* bf16 GEMMs need no padding */
    CU_ASSERT_EQUAL(lm->pad_n, 0);
    /* o_proj via Transpose(W): fp8, transB=1; gate/up fused; down fp8 */
    CU_ASSERT_EQUAL(ol->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(ol->transB, 1);
    CU_ASSERT_EQUAL(ol->n_fused, 1);
    CU_ASSERT_EQUAL(gu->n_fused, 2);
    CU_ASSERT_STRING_EQUAL(gu->weights, "gate.weight,up.weight");
    CU_ASSERT_EQUAL(gu->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(gu->N, 64);
    CU_ASSERT_EQUAL(gu->transB, 1);
    CU_ASSERT_EQUAL(dl->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(dl->K, 32);
    CU_ASSERT_EQUAL(dl->pad_multiple, 16);
    CU_ASSERT_EQUAL(dl->pad_k, 0);
    CU_ASSERT_STRING_EQUAL(dl->why, "fp8");
    CU_ASSERT_STRING_EQUAL(dl->state_prefix, "fp8_state/down_proj/MatMul");
    /* the graph: 5 Linears, 2 Splits, no MatMul/Transpose left, folded Adds gone */
    CU_ASSERT_EQUAL(count_ops(g, "Linear"), 5);
    CU_ASSERT_EQUAL(count_ops(g, "Split"), 2);
    CU_ASSERT_EQUAL(count_ops(g, "MatMul"), 0);
    CU_ASSERT_EQUAL(count_ops(g, "Transpose"), 0);
    CU_ASSERT_EQUAL(count_ops(g, "Add"), 3); /* ctx, res1, res2 */
    /* Split at opset 17: sizes as a constant input */
    for (int n = 0; n < g->n_nodes; n++) {
        const fr_node *nd = &g->nodes[n];
        if (strcmp(nd->op_type, "Split") != 0) continue;
        CU_ASSERT_EQUAL(nd->n_inputs, 2);
        const fr_tensor *s = g->values[nd->inputs[1]].constant;
        CU_ASSERT_FATAL(s != NULL);
        CU_ASSERT_EQUAL(((int64_t *)s->data)[0], nd->n_outputs == 3 ? 16 : 32);
        int64_t axis;
        FR_ASSERT_OK(fr_node_attr_int(nd, "axis", -99, &axis));
        CU_ASSERT_EQUAL(axis, 2);
    }
    /* delayed state: 3 operands per fp8 layer, scale values are [1] = 1.0 state */
    CU_ASSERT_EQUAL(r.n_states, 9);
    for (int i = 0; i < r.n_states; i++) {
        const fr_fp8_state *s = &r.states[i];
        const fr_value *sv = &g->values[s->scale_value];
        CU_ASSERT(sv->flags & FR_VAL_STATE);
        CU_ASSERT(!(sv->flags & FR_VAL_PARAM));
        CU_ASSERT_EQUAL(((float *)sv->constant->data)[0], 1.0f);
        CU_ASSERT_EQUAL(r.layers[s->layer].precision, FR_LIN_FP8);
        CU_ASSERT_EQUAL(s->fmt, s->operand == FR_FP8_OPERAND_DY ? FR_F8E5M2 : FR_F8E4M3);
        CU_ASSERT_EQUAL(s->amax_value < 0, s->operand == FR_FP8_OPERAND_DY);
    }
    /* fused parameters: new params; the originals are no longer trained but kept */
    CU_ASSERT_EQUAL(r.n_fused, 3); /* qkv weight, qkv bias, gate/up weight */
    int fw = fr_graph_find_value(g, "fused(q.weight,k.weight,v.weight)");
    CU_ASSERT_FATAL(fw >= 0);
    CU_ASSERT(g->values[fw].flags & FR_VAL_PARAM);
    CU_ASSERT_EQUAL(g->values[fw].dims[0], 16);
    CU_ASSERT_EQUAL(g->values[fw].dims[1], 48);
    int kw = fr_graph_find_value(g, "k.weight");
    CU_ASSERT(!(g->values[kw].flags & FR_VAL_PARAM));
    CU_ASSERT(g->values[kw].flags & FR_VAL_INITIALIZER);
    /* W[k][16 + j] of the fused weight is k.weight[k][j] */
    const float *f = g->values[fw].constant->data, *kv = g->values[kw].constant->data;
    int same = 1;
    for (int kk = 0; kk < 16; kk++)
        for (int j = 0; j < 16; j++) same &= f[kk * 48 + 16 + j] == kv[kk * 16 + j];
    CU_ASSERT(same);
    CU_ASSERT_EQUAL(fr_graph_param_count(g), 16 * 48 + 48 + 16 * 16 + 64 * 16 + 16 * 32 + 16 * 11);
    /* the report text */
    char *text = NULL;
    FR_ASSERT_OK(fr_fp8_report_format(&r, &text));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "8 Linear layers in 5 nodes (2 fused groups): fp8 4, bf16 4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fused parameter fused(gate.weight,up.weight): gate.weight [0, 32) [N,K] up.weight [32, 64) [N,K]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "GPU pads K +0, N +0"));
    if (getenv("FR_VERBOSE")) fprintf(stderr, "\n%s", text);
    free(text);
    fr_fp8_report_free(&r);
    fr_graph_free(g);
}

/* compiled (fp32) computes what the original computes; bf16 and fp8 approximately */
static void test_block_a_outputs(void)
{
    uint64_t seed = seed_of("block_a_out");
    const char *precs[5] = {"fp32", "bf16", "fp8", "fp8", "fp8"};
    const char *recipes[5] = {"delayed", "delayed", "delayed", "current", "block"};
    const double tol[5] = {1e-6, 4e-2, 0.3, 0.3, 0.3}; /* fp8: 5 chained layers of E4M3 (2^-4 rounding): seen 0.06 .. 0.15 */
    int logits;
    fr_graph *g0 = build_block_a(seed, &logits);
    int64_t n0;
    fr_status st;
    float *ref = run_copy(g0, logits, &n0, &st);
    CU_ASSERT_FATAL(ref != NULL);
    fr_graph_free(g0);
    for (int i = 0; i < 5; i++) {
        fr_graph *g = build_block_a(seed, &logits);
        fr_fp8_options o;
        fr_fp8_options_default(&o);
        o.precision = precs[i];
        o.recipe = recipes[i];
        o.bf16_boundary = 0;
        fr_fp8_report r;
        FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
        CU_ASSERT_EQUAL(r.n_layers, 5);
        int64_t n;
        float *y = run_copy(g, logits, &n, &st);
        CU_ASSERT_FATAL(y != NULL);
        CU_ASSERT_EQUAL(n, n0);
        double e = fr_rel_l2(y, ref, n);
        if (!(e <= tol[i]) || getenv("FR_VERBOSE")) fprintf(stderr, "\n  %s/%s: rel err %g\n", precs[i], recipes[i], e);
        CU_ASSERT(e <= tol[i]);
        if (i >= 1) CU_ASSERT(e > 0); /* rounding really happened */
        free(y);
        fr_fp8_report_free(&r);
        fr_graph_free(g);
    }
    free(ref);
}

static void test_block_a_options(void)
{
    int logits;
    fr_fp8_options o;
    fr_fp8_report r;
    /* exclude regex (by original weight name) */
    fr_graph *g = build_block_a(seed_of("opts"), &logits);
    fr_fp8_options_default(&o);
    o.fp8_exclude = "^(o|down)\\.weight$";
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(layer_with_weight(&r, "o.weight")->precision, FR_LIN_BF16);
    CU_ASSERT_PTR_NOT_NULL(strstr(layer_with_weight(&r, "down.weight")->why, "excluded by fp8_exclude"));
    CU_ASSERT_EQUAL(layer_with_weight(&r, "up.weight")->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(r.n_fp8, 2);
    fr_fp8_report_free(&r);
    fr_graph_free(g);
    /* excluding one of q/k/v splits the group: k alone, q+v fused */
    g = build_block_a(seed_of("opts"), &logits);
    o.fp8_exclude = "^k\\.";
    o.bf16_boundary = 0;
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(layer_with_weight(&r, "k.weight")->n_fused, 1);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "k.weight")->precision, FR_LIN_BF16);
    CU_ASSERT_STRING_EQUAL(layer_with_weight(&r, "q.weight")->weights, "q.weight,v.weight");
    CU_ASSERT_EQUAL(layer_with_weight(&r, "q.weight")->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(r.n_fp8, 7);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "lm_head.weight")->pad_n, 5); /* fp8 now: 11 -> 16 */
    CU_ASSERT_EQUAL(layer_with_weight(&r, "lm_head.weight")->pad_k, 0);
    fr_fp8_report_free(&r);
    fr_graph_free(g);
    /* bf16_boundary 2: groups 0, 1 and 3, 4 stay bf16; only gate/up is fp8 */
    g = build_block_a(seed_of("opts"), &logits);
    fr_fp8_options_default(&o);
    o.bf16_boundary = 2;
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(r.n_fp8, 2);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "gate.weight")->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "o.weight")->precision, FR_LIN_BF16);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "down.weight")->precision, FR_LIN_BF16);
    fr_fp8_report_free(&r);
    fr_graph_free(g);
    /* no fusion: 8 layers, no Split; the first group is q alone */
    g = build_block_a(seed_of("opts"), &logits);
    fr_fp8_options_default(&o);
    o.fuse = 0;
    o.recipe = "current";
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(r.n_layers, 8);
    CU_ASSERT_EQUAL(count_ops(g, "Split"), 0);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "q.weight")->precision, FR_LIN_BF16);
    CU_ASSERT_EQUAL(layer_with_weight(&r, "k.weight")->precision, FR_LIN_FP8);
    CU_ASSERT_EQUAL(r.n_states, 0); /* only the delayed recipe has state */
    for (int n = 0; n < g->n_nodes; n++)
        if (strcmp(g->nodes[n].op_type, "Linear") == 0) {
            const char *p;
            FR_ASSERT_OK(fr_node_attr_string(&g->nodes[n], "precision", "", &p));
            CU_ASSERT(g->nodes[n].n_inputs <= 3); /* no state inputs outside the delayed recipe */
            if (strcmp(p, "fp8") == 0) {
                CU_ASSERT_EQUAL(g->nodes[n].n_outputs, 3);
            } else { /* bf16 saves X's bf16 copy (Xq) only where the Linear is X's only reader */
                int x = g->nodes[n].inputs[0], readers = 0;
                for (int m = 0; m < g->n_nodes; m++)
                    for (int i = 0; !g->nodes[m].dead && i < g->nodes[m].n_inputs; i++) readers += g->nodes[m].inputs[i] == x;
                CU_ASSERT_EQUAL(g->nodes[n].n_outputs, readers == 1 ? 2 : 1);
                if (g->nodes[n].n_outputs == 2) CU_ASSERT_EQUAL(g->values[g->nodes[n].outputs[1]].dtype, FR_BF16);
            }
        }
    fr_fp8_report_free(&r);
    fr_graph_free(g);
    /* precision bf16 everywhere */
    g = build_block_a(seed_of("opts"), &logits);
    fr_fp8_options_default(&o);
    o.precision = "bf16";
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
    CU_ASSERT_EQUAL(r.n_bf16, 8);
    CU_ASSERT_EQUAL(r.n_fp8, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.layers[2].why, "precision bf16 requested"));
    fr_fp8_report_free(&r);
    fr_graph_free(g);
    /* bad options */
    g = build_block_a(seed_of("opts"), &logits);
    fr_fp8_options_default(&o);
    o.fp8_exclude = "(unclosed";
    CU_ASSERT_EQUAL(fr_fp8_compile(g, &o, &r), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "(unclosed"));
    fr_fp8_options_default(&o);
    o.precision = "fp16";
    CU_ASSERT_EQUAL(fr_fp8_compile(g, &o, &r), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fp16"));
    fr_fp8_options_default(&o);
    o.interval = 0;
    CU_ASSERT_EQUAL(fr_fp8_compile(g, &o, &r), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(count_ops(g, "Linear"), 0); /* nothing was rewritten */
    /* shapes not inferred */
    fr_value_set_shape(&g->values[fr_graph_find_value(g, "x")], FR_UNDEFINED, -1, NULL);
    fr_fp8_options_default(&o);
    CU_ASSERT_EQUAL(fr_fp8_compile(g, &o, &r), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "q_proj/MatMul"));
    fr_graph_free(g);
}

static void test_block_b_gemm(void)
{
    for (int variant = 0; variant < 2; variant++) {
        int64_t opset = variant ? 11 : 17;
        uint64_t seed = seed_of("block_b");
        int logits, att;
        fr_graph *g0 = build_block_b(seed, opset, &logits, &att);
        int64_t n0, na0;
        fr_status st;
        float *ref = run_copy(g0, logits, &n0, &st);
        float *ref_att = run_copy(g0, att, &na0, &st);
        CU_ASSERT_FATAL(ref && ref_att);
        fr_graph_free(g0);

        fr_graph *g = build_block_b(seed, opset, &logits, &att);
        fr_fp8_options o;
        fr_fp8_options_default(&o);
        o.precision = "fp32";
        fr_fp8_report r;
        FR_ASSERT_OK(fr_fp8_compile(g, &o, &r));
        CU_ASSERT_EQUAL(r.n_linears, 5);
        CU_ASSERT_EQUAL(r.n_layers, 3);
        CU_ASSERT_EQUAL(r.n_skipped, 3);
        const char *want[3][2] = {{"s_gemm", "alpha != 1"}, {"b2_gemm", "beta != 1"},
                                  {"left_matmul", "left operand"}};
        for (int i = 0; i < 3 && i < r.n_skipped; i++) {
            CU_ASSERT_STRING_EQUAL(r.skipped[i].node, want[i][0]);
            CU_ASSERT_PTR_NOT_NULL(strstr(r.skipped[i].reason, want[i][1]));
        }
        CU_ASSERT_EQUAL(count_ops(g, "Gemm"), 2);
        CU_ASSERT_EQUAL(count_ops(g, "MatMul"), 2); /* left_matmul, att */
        CU_ASSERT_EQUAL(count_ops(g, "Transpose"), 1); /* of an activation: kept */
        const fr_fp8_layer *qkv = layer_with_weight(&r, "v.weight"), *head = layer_with_weight(&r, "head.weight");
        CU_ASSERT_FATAL(qkv && head);
        CU_ASSERT_EQUAL(qkv->n_fused, 3);
        CU_ASSERT_EQUAL(qkv->transB, 1); /* the first member's layout */
        CU_ASSERT(head->has_bias);       /* Gemm + Add folded */
        CU_ASSERT_EQUAL(count_ops(g, "Add"), 1); /* ctx only */
        /* mixed layouts and a [1, 8] bias in the slices table */
        CU_ASSERT_EQUAL(r.n_fused, 2);
        const fr_fp8_fused *fw = &r.fused[0], *fb = &r.fused[1];
        CU_ASSERT_FATAL(fw->n_slices == 3 && fb->n_slices == 3 && !fw->is_bias && fb->is_bias);
        CU_ASSERT_STRING_EQUAL(fw->slices[2].name, "v.weight");
        CU_ASSERT_EQUAL(fw->slices[2].transB, 0);
        CU_ASSERT_EQUAL(fw->slices[1].transB, 1);
        CU_ASSERT_EQUAL(fw->slices[2].offset, 16);
        CU_ASSERT_EQUAL(fb->slices[1].rank, 2);
        CU_ASSERT_EQUAL(fb->slices[1].dims[1], 8);
        const fr_node *split = NULL;
        for (int n = 0; n < g->n_nodes; n++)
            if (strcmp(g->nodes[n].op_type, "Split") == 0) split = &g->nodes[n];
        CU_ASSERT_FATAL(split != NULL);
        if (opset < 13) { /* 'split' is an attribute before opset 13 */
            int cnt;
            const int64_t *sz;
            FR_ASSERT_OK(fr_node_attr_ints(split, "split", &cnt, &sz));
            CU_ASSERT_EQUAL(split->n_inputs, 1);
            CU_ASSERT_EQUAL(cnt, 3);
            CU_ASSERT(cnt == 3 && sz[0] == 8 && sz[1] == 8 && sz[2] == 8);
        } else {
            CU_ASSERT_EQUAL(split->n_inputs, 2);
        }
        /* same outputs as the original graph */
        int64_t n, na;
        float *y = run_copy(g, logits, &n, &st), *ya = run_copy(g, att, &na, &st);
        CU_ASSERT_FATAL(y && ya);
        CU_ASSERT(fr_rel_l2(y, ref, n) <= 1e-6);
        CU_ASSERT(fr_rel_l2(ya, ref_att, na) <= 1e-6);
        free(y);
        free(ya);

        /* sync: fused -> originals, with the original layouts */
        fr_tensor *ft = g->values[fw->value].constant;
        for (int64_t i = 0; i < fr_tensor_numel(ft); i++) ((float *)ft->data)[i] = (float)i;
        fr_tensor *bt = g->values[fb->value].constant;
        for (int64_t i = 0; i < fr_tensor_numel(bt); i++) ((float *)bt->data)[i] = (float)(1000 + i);
        FR_ASSERT_OK(fr_fp8_sync_params(g, &r, 1));
        const float *vv = g->values[fr_graph_find_value(g, "v.weight")].constant->data; /* [K=16, N=8] */
        const float *kv = g->values[fr_graph_find_value(g, "k.weight")].constant->data; /* [N=8, K=16] */
        const float *kb = g->values[fr_graph_find_value(g, "k.bias")].constant->data;
        /* fused [24, 16]: row 16 + j is v's column j; row 8 + j is k's row j */
        CU_ASSERT_EQUAL(vv[3 * 8 + 5], (float)((16 + 5) * 16 + 3));
        CU_ASSERT_EQUAL(kv[2 * 16 + 7], (float)((8 + 2) * 16 + 7));
        CU_ASSERT_EQUAL(kb[4], 1000.0f + 12);
        /* and back: originals -> fused */
        for (int64_t i = 0; i < fr_tensor_numel(ft); i++) ((float *)ft->data)[i] = -1.0f;
        FR_ASSERT_OK(fr_fp8_sync_params(g, &r, 0));
        int back = 1;
        for (int64_t i = 0; i < fr_tensor_numel(ft); i++) back &= ((float *)ft->data)[i] == (float)i;
        CU_ASSERT(back);
        /* a missing original is an error naming it */
        fr_tensor *save = g->values[fw->slices[0].value].constant;
        g->values[fw->slices[0].value].constant = NULL;
        CU_ASSERT_EQUAL(fr_fp8_sync_params(g, &r, 1), FR_ERR_GRAPH);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "q.weight"));
        g->values[fw->slices[0].value].constant = save;
        char *text;
        FR_ASSERT_OK(fr_fp8_report_format(&r, &text));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "Gemm 's_gemm' (weight 's.weight'): not eligible: alpha != 1"));
        free(text);
        fr_fp8_report_free(&r);
        fr_graph_free(g);
        free(ref);
        free(ref_att);
    }
}

/* weights shared by two MatMuls (tied) are converted but never fused */
static void test_shared_weight_not_fused(void)
{
    fr_rng r = fr_test_rng("shared");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {4, 8};
    int x = input(g, &r, "x", 2, d);
    int w = param(g, &r, "tied.weight", 2, 8, 8), w2 = param(g, &r, "other.weight", 2, 8, 8);
    int a = op2(g, "MatMul", "a", x, w, 2, d);
    int b = op2(g, "MatMul", "b", x, w2, 2, d);
    int c = op2(g, "MatMul", "c", op2(g, "Add", "ab", a, b, 2, d), w, 2, d);
    FR_ASSERT_OK(fr_graph_mark_output(g, c));
    fr_fp8_options o;
    fr_fp8_options_default(&o);
    o.bf16_boundary = 0;
    fr_fp8_report rep;
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &rep));
    CU_ASSERT_EQUAL(rep.n_layers, 3);
    CU_ASSERT_EQUAL(rep.n_fused, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep.layers[0].why, "not fused"));
    CU_ASSERT(g->values[w].flags & FR_VAL_PARAM);
    fr_fp8_report_free(&rep);
    fr_graph_free(g);
}

/* delayed state through autodiff: amax_dy bound after the backward; amax values computed */
static void test_state_after_autodiff(void)
{
    fr_rng r = fr_test_rng("state_ad");
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {4, 8};
    int x = input(g, &r, "x", 2, d);
    int w1 = param(g, &r, "w1", 2, 8, 8), w2 = param(g, &r, "w2", 2, 8, 8), w3 = param(g, &r, "w3", 2, 8, 8);
    int h1 = op2(g, "MatMul", "l1", x, w1, 2, d);
    int h2 = op2(g, "MatMul", "l2", h1, w2, 2, d);
    int y = op2(g, "MatMul", "l3", h2, w3, 2, d);
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    fr_fp8_options o;
    fr_fp8_options_default(&o);
    fr_fp8_report rep;
    FR_ASSERT_OK(fr_fp8_compile(g, &o, &rep));
    CU_ASSERT_EQUAL(rep.n_fp8, 1);
    CU_ASSERT_EQUAL(rep.n_states, 3);
    CU_ASSERT_EQUAL(fr_fp8_report_bind(g, &rep, 0), FR_ERR_GRAPH); /* no backward yet */
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "amax_dy"));
    resolve(g);
    int rv = fr_gc_add_input(g, &r, "R", FR_F32, 2, d, NULL), loss, nid, in[2] = {y, rv};
    FR_ASSERT_OK(fr_graph_add_value(g, "loss", &loss));
    FR_ASSERT_OK(fr_graph_add_node(g, "Dot", "ai.fp8run", "dot", 2, in, 1, &loss, &nid));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    int wrt[3] = {fr_graph_find_value(g, "w1"), fr_graph_find_value(g, "w2"), fr_graph_find_value(g, "w3")}, grads[3];
    FR_ASSERT_OK(fr_autodiff(g, loss, 3, wrt, grads));
    FR_ASSERT_OK(fr_fp8_report_bind(g, &rep, 0));
    const fr_fp8_state *sdy = NULL, *sx = NULL;
    for (int i = 0; i < rep.n_states; i++) {
        if (rep.states[i].operand == FR_FP8_OPERAND_DY) sdy = &rep.states[i];
        if (rep.states[i].operand == FR_FP8_OPERAND_X) sx = &rep.states[i];
    }
    CU_ASSERT_FATAL(sdy && sx && sdy->amax_value >= 0);
    CU_ASSERT_STRING_EQUAL(sdy->amax_name, "fp8_state/l2/amax_dy");
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t);
    FR_ASSERT_OK(fr_gc_run(g, t));
    /* amax_x of l2 is max |h1|, amax_dy is max |dL/dh2| = max |R w3^T| (w3 via bf16: any > 0) */
    float m = 0;
    for (int i = 0; i < 32; i++) m = fmaxf(m, fabsf(((float *)t[h1]->data)[i]));
    CU_ASSERT_EQUAL(((float *)t[sx->amax_value]->data)[0], m);
    CU_ASSERT(((float *)t[sdy->amax_value]->data)[0] > 0);
    for (int i = 0; i < 3; i++) CU_ASSERT(grads[i] >= 0);
    fr_gc_free_tensors(g, t);
    free(t);
    fr_fp8_report_free(&rep);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"block_a_default", test_block_a_default},
    {"block_a_outputs", test_block_a_outputs},
    {"block_a_options", test_block_a_options},
    {"block_b_gemm", test_block_b_gemm},
    {"shared_weight_not_fused", test_shared_weight_not_fused},
    {"state_after_autodiff", test_state_after_autodiff},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"fp8_compile", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
