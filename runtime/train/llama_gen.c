/* A Llama-style decoder built as an ONNX graph (see runtime/train/llama_gen.h). Moved here from the
 * CLI so that tools build models through the public API (fp8run_model_generate_llama). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/exec/host_memory.h"
#include "runtime/train/llama_gen.h"
#include "graph/rng.h"

/* ---- a small graph builder ---- */

/* dims 0 and 1 of v are the symbolic batch and seq */
static fr_status symbolic(fr_value *v)
{
    v->dim_params[0] = fr_strdup("batch", "dim");
    v->dim_params[1] = fr_strdup("seq", "dim");
    return v->dim_params[0] && v->dim_params[1] ? FR_OK : FR_ERR_OOM;
}

typedef struct gb {
    fr_graph *g;
    fr_prng rng;
    fr_status st;
    int n;            /* counter for unique names */
    const char *scope;
} gb;

static int new_value(gb *b, const char *base)
{
    int v = -1;
    char name[256];
    snprintf(name, sizeof name, "%s/%s_%d", b->scope, base, b->n++);
    if (b->st == FR_OK) b->st = fr_graph_add_unique_value(b->g, name, &v);
    return v;
}

/* A node with one output; returns the output value (-1 after an error). */
static int node(gb *b, const char *op, int n_in, const int *in)
{
    if (b->st != FR_OK) return -1;
    int out = new_value(b, op), nid;
    char name[256];
    snprintf(name, sizeof name, "%s/%s_%d", b->scope, op, b->n++);
    if (b->st == FR_OK) b->st = fr_graph_add_node(b->g, op, "", name, n_in, in, 1, &out, &nid);
    return b->st == FR_OK ? out : -1;
}

static fr_node *last(gb *b) { return &b->g->nodes[b->g->n_nodes - 1]; }

static int node1(gb *b, const char *op, int a) { return node(b, op, 1, (int[]){a}); }
static int node2(gb *b, const char *op, int a, int c) { return node(b, op, 2, (int[]){a, c}); }

/* A Constant node holding t (takes ownership). */
static int constant(gb *b, fr_tensor *t)
{
    int v = node(b, "Constant", 0, NULL);
    if (b->st == FR_OK) b->st = fr_node_set_attr_tensor(last(b), "value", t);
    fr_tensor_free(t);
    return v;
}

static int const_i64(gb *b, int n, const int64_t *vals)
{
    fr_tensor *t = NULL;
    int64_t dims[1] = {n};
    if (b->st == FR_OK) b->st = fr_tensor_new(FR_I64, 1, dims, "constant", &t);
    if (b->st != FR_OK) return -1;
    memcpy(t->data, vals, (size_t)n * sizeof(int64_t));
    return constant(b, t);
}

static int const_f32_scalar(gb *b, float v)
{
    fr_tensor *t = NULL;
    if (b->st == FR_OK) b->st = fr_tensor_new(FR_F32, 0, NULL, "constant", &t);
    if (b->st != FR_OK) return -1;
    ((float *)t->data)[0] = v;
    return constant(b, t);
}

/* ---- N(0, std) weights ----
 * One Box-Muller pair from two uniforms: x[0] and, when `both`, x[1]. The only place the
 * transform is written, so the serial and the threaded paths give the same bits. */
static void box_muller(double u1, double u2, float std, float *x, int both)
{
    double r = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)), a = 2 * M_PI * u2;
    x[0] = (float)(std * r * cos(a));
    if (both) x[1] = (float)(std * r * sin(a));
}

/* The generator's stream is sequential and cheap; the transform costs ~50x a draw. Large
 * weights (an 8B model's 8e9 values: minutes on one core) draw a chunk's uniforms in order on
 * the calling thread while worker threads transform the previous chunk: the same values as the
 * serial loop, in a fraction of the time on a many-core host. */
#define GEN_PAR_MIN ((int64_t)1 << 22) /* smaller tensors: the serial loop */
#define GEN_CHUNK ((int64_t)1 << 22)   /* values per chunk (even) */
#define GEN_MAX_THREADS 32

typedef struct gen_job {
    const double *u; /* 2 uniforms per pair */
    float *x;
    int64_t n;       /* values of this job (the last may be odd) */
    float std;
} gen_job;

static void *gen_run(void *arg)
{
    const gen_job *j = arg;
    for (int64_t i = 0; i < j->n; i += 2) box_muller(j->u[i], j->u[i + 1], j->std, j->x + i, i + 1 < j->n);
    return NULL;
}

static int64_t gen_draw(fr_prng *r, double *u, int64_t n)
{
    const int64_t pairs = (n + 1) / 2;
    for (int64_t k = 0; k < 2 * pairs; k++) u[k] = fr_prng_double(r);
    return pairs;
}

static fr_status normal_parallel(fr_prng *r, float *x, int64_t n, float std)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = cpus > 1 ? (int)(cpus - 1 < GEN_MAX_THREADS ? cpus - 1 : GEN_MAX_THREADS) : 0;
    double *u[2] = {fr_malloc((size_t)GEN_CHUNK * sizeof(double), "weights"),
                    fr_malloc((size_t)GEN_CHUNK * sizeof(double), "weights")};
    if (!u[0] || !u[1]) {
        free(u[0]);
        free(u[1]);
        return FR_ERR_OOM;
    }
    pthread_t th[GEN_MAX_THREADS];
    gen_job jobs[GEN_MAX_THREADS];
    int64_t c0 = 0, cn = n < GEN_CHUNK ? n : GEN_CHUNK;
    gen_draw(r, u[0], cn);
    for (int cur = 0; c0 < n; cur ^= 1) {
        /* the chunk at c0 (uniforms in u[cur]) split over the workers, pairs kept whole */
        const int64_t pairs = (cn + 1) / 2;
        int started = 0;
        for (int w = 0; w < workers; w++) {
            int64_t p0 = pairs * w / workers, p1 = pairs * (w + 1) / workers;
            if (p1 == p0) continue;
            int64_t e0 = 2 * p0, e1 = 2 * p1 < cn ? 2 * p1 : cn;
            jobs[started] = (gen_job){u[cur] + e0, x + c0 + e0, e1 - e0, std};
            if (pthread_create(&th[started], NULL, gen_run, &jobs[started]) != 0) gen_run(&jobs[started]);
            else started++;
        }
        /* the next chunk's uniforms meanwhile (same order as the serial loop's draws) */
        const int64_t n0 = c0 + cn, nn = n - n0 < GEN_CHUNK ? n - n0 : GEN_CHUNK;
        if (nn > 0) gen_draw(r, u[cur ^ 1], nn);
        if (workers == 0) {
            gen_job one = {u[cur], x + c0, cn, std};
            gen_run(&one);
        }
        for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
        c0 = n0;
        cn = nn;
    }
    free(u[0]);
    free(u[1]);
    return FR_OK;
}

/* A trainable weight initializer N(0, std) (std 0: ones). */
static int weight(gb *b, const char *name, int rank, const int64_t *dims, float std)
{
    int v = -1;
    fr_tensor *t = NULL;
    if (b->st == FR_OK) b->st = fr_tensor_new(FR_F32, rank, dims, name, &t);
    if (b->st == FR_OK) b->st = fr_graph_add_value(b->g, name, &v);
    if (b->st != FR_OK) {
        fr_tensor_free(t);
        return -1;
    }
    float *x = t->data;
    int64_t n = fr_tensor_numel(t);
    if (std != 0 && n >= GEN_PAR_MIN) {
        b->st = normal_parallel(&b->rng, x, n, std);
    } else {
        for (int64_t i = 0; i < n; i += 2) { /* Box-Muller pairs */
            double u1 = fr_prng_double(&b->rng), u2 = fr_prng_double(&b->rng);
            if (std == 0) {
                x[i] = 1.0f;
                if (i + 1 < n) x[i + 1] = 1.0f;
            } else {
                box_muller(u1, u2, std, x + i, i + 1 < n);
            }
        }
    }
    if (b->st != FR_OK) {
        fr_tensor_free(t);
        return -1;
    }
    b->st = fr_graph_set_initializer(b->g, v, t);
    return v;
}

static int slice_last(gb *b, int x, int64_t start, int64_t end)
{
    int s = const_i64(b, 1, &start), e = const_i64(b, 1, &end), ax = const_i64(b, 1, (int64_t[]){-1});
    return node(b, "Slice", 4, (int[]){x, s, e, ax});
}

static int transpose(gb *b, int x, int n, const int64_t *perm)
{
    int v = node1(b, "Transpose", x);
    if (b->st == FR_OK) b->st = fr_node_set_attr_ints(last(b), "perm", n, perm);
    return v;
}

static int reshape(gb *b, int x, int n, const int64_t *shape) { return node2(b, "Reshape", x, const_i64(b, n, shape)); }

static int rmsnorm(gb *b, int x, const char *wname, int64_t d)
{
    int w = weight(b, wname, 1, &d, 0);
    int v = node2(b, "RMSNormalization", x, w);
    if (b->st == FR_OK) b->st = fr_node_set_attr_float(last(b), "epsilon", 1e-5f);
    if (b->st == FR_OK) b->st = fr_node_set_attr_int(last(b), "axis", -1);
    return v;
}

/* x * cos + rotate_half(x) * sin; x [..., T, hd], cos/sin [T, hd] */
static int rope(gb *b, int x, int cosv, int sinv, int64_t hd)
{
    int x1 = slice_last(b, x, 0, hd / 2), x2 = slice_last(b, x, hd / 2, hd);
    int rot = node2(b, "Concat", node1(b, "Neg", x2), x1);
    if (b->st == FR_OK) b->st = fr_node_set_attr_int(last(b), "axis", -1);
    return node2(b, "Add", node2(b, "Mul", x, cosv), node2(b, "Mul", rot, sinv));
}

fr_status fr_llama_check(const fr_llama_config *c)
{
    const struct {
        const char *name;
        int64_t v;
    } f[] = {{"dim", c->d},       {"layers", c->layers}, {"heads", c->heads},    {"kv_heads", c->kv_heads},
             {"ffn", c->ffn},     {"vocab", c->vocab},   {"max_seq", c->max_seq}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1 || f[i].v > ((int64_t)1 << 31))
            return fr_error(FR_ERR_INVALID_ARG, "llama config: %s is %lld; must be in 1..2^31", f[i].name,
                            (long long)f[i].v);
    if (c->d % c->heads || c->heads % c->kv_heads || (c->d / c->heads) % 2)
        return fr_error(FR_ERR_INVALID_ARG,
                        "llama config: dim %lld must split into %lld heads of even size, and the heads into %lld "
                        "kv_heads groups",
                        (long long)c->d, (long long)c->heads, (long long)c->kv_heads);
    /* bounds before anything is allocated: the graph grows with the layers (~40 nodes each)
     * and the weights with the product of the sizes (the largest Llama has 126 layers, 405e9
     * parameters) */
    if (c->layers > FR_LLAMA_MAX_LAYERS)
        return fr_error(FR_ERR_INVALID_ARG, "llama config: %lld layers; at most %d", (long long)c->layers,
                        FR_LLAMA_MAX_LAYERS);
    double kv = (double)c->d / (double)c->heads * (double)c->kv_heads;
    double per_layer = (double)c->d * (2.0 * (double)c->d + 2.0 * kv + 3.0 * (double)c->ffn + 2.0);
    double params = (double)c->layers * per_layer + 2.0 * (double)c->vocab * (double)c->d + (double)c->d;
    if (params > FR_LLAMA_MAX_PARAMS)
        return fr_error(FR_ERR_INVALID_ARG,
                        "llama config: %.3g parameters (%.3g GB in float32); at most %.3g are generated", params,
                        params * 4e-9, FR_LLAMA_MAX_PARAMS);
    /* the weights are made in host memory: more than this process may take cannot work
     * (runtime/exec/host_memory.h: available memory, cgroup and ulimits, FP8RUN_MEMORY_LIMIT) */
    fr_host_memory hm;
    FR_TRY(fr_host_memory_available(&hm));
    if (!fr_host_memory_check_off() && params * 4.0 > (double)hm.available)
        return fr_error(FR_ERR_INVALID_ARG,
                        "llama config: %.3g parameters need %.3g GB in float32, more than the %.3g GB of memory this "
                        "process may take (%s)", params, params * 4e-9, (double)hm.available * 1e-9, hm.source);
    return FR_OK;
}

/* The graph's header: opset 23, names, the input. */
static fr_status header(gb *b, int *ids)
{
    fr_graph *g = b->g;
    g->opsets = fr_calloc(1, sizeof *g->opsets, "opsets");
    if (!g->opsets) return FR_ERR_OOM;
    g->opsets[0].domain = fr_strdup("", "opsets");
    if (!g->opsets[0].domain) return FR_ERR_OOM;
    g->opsets[0].version = 23;
    g->n_opsets = 1;
    g->ir_version = 10;
    g->name = fr_strdup("llama", "graph name");
    g->producer_name = fr_strdup("fp8run generate", "producer");
    if (!g->name || !g->producer_name) return FR_ERR_OOM;
    FR_TRY(fr_graph_add_value(g, "input_ids", ids));
    fr_value *iv = &g->values[*ids];
    int64_t dims[2] = {-1, -1};
    fr_value_set_shape(iv, FR_I64, 2, dims);
    FR_TRY(symbolic(iv));
    return fr_graph_mark_input(g, *ids);
}

fr_status fr_llama_generate(const fr_llama_config *c, fr_graph **out)
{
    *out = NULL;
    FR_TRY(fr_llama_check(c));
    gb b = {0};
    b.st = fr_graph_new(&b.g);
    if (b.st != FR_OK) return b.st;
    fr_graph *g = b.g;
    fr_prng_seed(&b.rng, c->seed);
    const int64_t d = c->d, H = c->heads, KV = c->kv_heads, G = c->heads / c->kv_heads, hd = c->d / c->heads;
    b.scope = "";
    int ids = -1;
    b.st = header(&b, &ids);
    /* rotary tables [max_seq, hd] (halves repeated, as rotate_half expects), sliced to seq */
    b.scope = "/rotary";
    fr_tensor *ct = NULL, *st = NULL;
    int64_t tdims[2] = {c->max_seq, hd};
    if (b.st == FR_OK) b.st = fr_tensor_new(FR_F32, 2, tdims, "cos", &ct);
    if (b.st == FR_OK) b.st = fr_tensor_new(FR_F32, 2, tdims, "sin", &st);
    if (b.st != FR_OK) {
        fr_tensor_free(ct);
        fr_tensor_free(st);
        fr_graph_free(g);
        return b.st;
    }
    for (int64_t p = 0; p < c->max_seq; p++)
        for (int64_t i = 0; i < hd / 2; i++) {
            double inv = pow(10000.0, -2.0 * (double)i / (double)hd), a = (double)p * inv;
            float cv = (float)cos(a), sv = (float)sin(a);
            ((float *)ct->data)[p * hd + i] = ((float *)ct->data)[p * hd + i + hd / 2] = cv;
            ((float *)st->data)[p * hd + i] = ((float *)st->data)[p * hd + i + hd / 2] = sv;
        }
    int seq = node1(&b, "Shape", ids);
    if (b.st == FR_OK) b.st = fr_node_set_attr_int(last(&b), "start", 1);
    if (b.st == FR_OK) b.st = fr_node_set_attr_int(last(&b), "end", 2);
    int zero = const_i64(&b, 1, (int64_t[]){0}), axis0 = const_i64(&b, 1, (int64_t[]){0});
    int cosv = node(&b, "Slice", 4, (int[]){constant(&b, ct), zero, seq, axis0});
    int sinv = node(&b, "Slice", 4, (int[]){constant(&b, st), zero, seq, axis0});
    /* causal mask [seq, seq]: -inf above the diagonal */
    b.scope = "/mask";
    int tt = node2(&b, "Concat", seq, seq);
    if (b.st == FR_OK) b.st = fr_node_set_attr_int(last(&b), "axis", 0);
    int full = node1(&b, "ConstantOfShape", tt);
    if (b.st == FR_OK) {
        fr_tensor *mv = NULL;
        int64_t one = 1;
        b.st = fr_tensor_new(FR_F32, 1, &one, "value", &mv);
        if (b.st == FR_OK) {
            ((float *)mv->data)[0] = -INFINITY;
            b.st = fr_node_set_attr_tensor(last(&b), "value", mv);
        }
        fr_tensor_free(mv);
    }
    int mask = node2(&b, "Trilu", full, const_i64(&b, 1, (int64_t[]){1}));
    if (b.st == FR_OK) b.st = fr_node_set_attr_int(last(&b), "upper", 1);

    b.scope = "/embed_tokens";
    int64_t edims[2] = {c->vocab, d};
    int x = node2(&b, "Gather", weight(&b, "embed_tokens.weight", 2, edims, 0.02f), ids);
    const float std = 0.02f, out_std = (float)(0.02 / sqrt(2.0 * (double)c->layers));
    int scale = const_f32_scalar(&b, (float)(1.0 / sqrt((double)hd)));
    for (int64_t l = 0; l < c->layers && b.st == FR_OK; l++) {
        char scope[64], nm[128];
        snprintf(scope, sizeof scope, "/layers.%lld", (long long)l);
        b.scope = scope;
#define W(name, r, cdim, s) (snprintf(nm, sizeof nm, "layers.%lld.%s", (long long)l, name), weight(&b, nm, 2, (int64_t[]){r, cdim}, s))
        snprintf(nm, sizeof nm, "layers.%lld.input_layernorm.weight", (long long)l);
        int h = rmsnorm(&b, x, nm, d);
        int q = node2(&b, "MatMul", h, W("self_attn.q_proj.weight", d, H * hd, std));
        int k = node2(&b, "MatMul", h, W("self_attn.k_proj.weight", d, KV * hd, std));
        int v = node2(&b, "MatMul", h, W("self_attn.v_proj.weight", d, KV * hd, std));
        q = transpose(&b, reshape(&b, q, 5, (int64_t[]){0, 0, KV, G, hd}), 5, (int64_t[]){0, 2, 3, 1, 4});
        k = transpose(&b, reshape(&b, k, 5, (int64_t[]){0, 0, KV, 1, hd}), 5, (int64_t[]){0, 2, 3, 1, 4});
        v = transpose(&b, reshape(&b, v, 5, (int64_t[]){0, 0, KV, 1, hd}), 5, (int64_t[]){0, 2, 3, 1, 4});
        q = rope(&b, q, cosv, sinv, hd);
        k = transpose(&b, rope(&b, k, cosv, sinv, hd), 5, (int64_t[]){0, 1, 2, 4, 3});
        int s = node2(&b, "Add", node2(&b, "Mul", node2(&b, "MatMul", q, k), scale), mask);
        int p = node1(&b, "Softmax", s);
        if (b.st == FR_OK) b.st = fr_node_set_attr_int(last(&b), "axis", -1);
        int a = transpose(&b, node2(&b, "MatMul", p, v), 5, (int64_t[]){0, 3, 1, 2, 4});
        a = reshape(&b, a, 3, (int64_t[]){0, 0, H * hd});
        x = node2(&b, "Add", x, node2(&b, "MatMul", a, W("self_attn.o_proj.weight", H * hd, d, out_std)));
        snprintf(nm, sizeof nm, "layers.%lld.post_attention_layernorm.weight", (long long)l);
        h = rmsnorm(&b, x, nm, d);
        int gate = node2(&b, "MatMul", h, W("mlp.gate_proj.weight", d, c->ffn, std));
        int up = node2(&b, "MatMul", h, W("mlp.up_proj.weight", d, c->ffn, std));
        int act = node2(&b, "Mul", node2(&b, "Mul", gate, node1(&b, "Sigmoid", gate)), up);
        x = node2(&b, "Add", x, node2(&b, "MatMul", act, W("mlp.down_proj.weight", c->ffn, d, out_std)));
#undef W
    }
    b.scope = "/norm";
    x = rmsnorm(&b, x, "norm.weight", d);
    b.scope = "/lm_head";
    int64_t ldims[2] = {d, c->vocab};
    /* the graph output is called "logits", as exporters name it (the counter still advances as
     * for an unnamed output, so node names do not depend on it) */
    int lm_in[2] = {x, weight(&b, "lm_head.weight", 2, ldims, std)}, logits = -1, nid;
    char lm_name[256];
    b.n++;
    snprintf(lm_name, sizeof lm_name, "%s/MatMul_%d", b.scope, b.n++);
    if (b.st == FR_OK) b.st = fr_graph_add_value(g, "logits", &logits);
    if (b.st == FR_OK) b.st = fr_graph_add_node(g, "MatMul", "", lm_name, 2, lm_in, 1, &logits, &nid);
    if (b.st == FR_OK) b.st = fr_graph_mark_output(g, logits);
    if (b.st == FR_OK) {
        fr_value *lv = &g->values[logits];
        int64_t dims[3] = {-1, -1, c->vocab};
        fr_value_set_shape(lv, FR_F32, 3, dims);
        b.st = symbolic(lv);
    }
    if (b.st == FR_OK) b.st = fr_graph_toposort(g);
    if (b.st != FR_OK) {
        fr_graph_free(g);
        return b.st;
    }
    *out = g;
    return FR_OK;
}
