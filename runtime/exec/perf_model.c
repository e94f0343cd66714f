/* FLOPs and bytes per node, device peaks, and the profile table (see perf_model.h). */
#include "runtime/exec/perf_model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "graph/tensor.h"
#include "ops/op.h"
#include "passes/fast_path.h"

/* ---- cost of a node ---- */

static const fr_value *val(const fr_graph *g, const fr_node *n, int i, int output)
{
    int id = output ? (i < n->n_outputs ? n->outputs[i] : -1) : (i < n->n_inputs ? n->inputs[i] : -1);
    return id >= 0 && id < g->n_values ? &g->values[id] : NULL;
}

static double numel(const fr_value *v)
{
    if (!v || v->rank < 0) return 0;
    double m = 1;
    for (int d = 0; d < v->rank; d++) {
        if (v->dims[d] < 0) return 0;
        m *= (double)v->dims[d];
    }
    return m;
}

static double dim_from_end(const fr_value *v, int k) /* k = 1: the last dim */
{
    return v && v->rank >= k && v->dims[v->rank - k] >= 0 ? (double)v->dims[v->rank - k] : 0;
}

static double value_bytes(const fr_value *v)
{
    if (!v || v->dtype == FR_UNDEFINED) return 0;
    return numel(v) * (double)fr_dtype_size(v->dtype);
}

static fr_math math_of_dtype(fr_dtype t)
{
    switch (t) {
    case FR_F64: return FR_MATH_FP64;
    case FR_BF16:
    case FR_F16: return FR_MATH_BF16;
    case FR_F8E4M3:
    case FR_F8E5M2: return FR_MATH_FP8;
    default: return FR_MATH_FP32;
    }
}

/* the node's "precision" attribute (fp8 / bf16 / fp32), else its first input's dtype */
static fr_math math_of(const fr_graph *g, const fr_node *n)
{
    const char *prec = NULL;
    if (fr_node_attr_string(n, "precision", NULL, &prec) == FR_OK && prec) {
        if (strcmp(prec, "fp8") == 0) return FR_MATH_FP8;
        if (strcmp(prec, "bf16") == 0) return FR_MATH_BF16;
    }
    const fr_value *a = val(g, n, 0, 0);
    fr_math m = a ? math_of_dtype(a->dtype) : FR_MATH_FP32;
    if (prec && strcmp(prec, "fp32") == 0 && m != FR_MATH_FP64) m = FR_MATH_FP32;
    return m;
}

/* unmasked (query, key) pairs of one attention head */
static double attention_pairs(const fr_node *n, double tq, double tk)
{
    int64_t causal = 0, window = 0;
    if (fr_node_attr_int(n, "causal", 0, &causal) != FR_OK) causal = 0;
    if (fr_node_attr_int(n, "window", 0, &window) != FR_OK) window = 0;
    if (!causal) return tq * tk;
    if (window <= 0 || (double)window >= tq) return tq * (tq + 1) / 2;
    double w = (double)window; /* rows i < w keep i + 1 keys, the rest w */
    return w * (w + 1) / 2 + (tq - w) * w;
}

void fr_node_cost_of(const fr_graph *g, const fr_node *n, fr_node_cost *c)
{
    memset(c, 0, sizeof *c);
    if (n->dead || fr_node_is_view(n)) return;
    /* bytes: each distinct value once */
    for (int i = 0; i < n->n_inputs + n->n_outputs; i++) {
        int out = i >= n->n_inputs, k = out ? i - n->n_inputs : i;
        int id = out ? n->outputs[k] : n->inputs[k];
        if (id < 0) continue;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) {
            int o2 = j >= n->n_inputs;
            seen = (o2 ? n->outputs[j - n->n_inputs] : n->inputs[j]) == id;
        }
        if (!seen) c->bytes += value_bytes(val(g, n, k, out));
    }
    const char *op = n->op_type;
    int ours = strcmp(n->domain, "ai.fp8run") == 0;
    const fr_value *in0 = val(g, n, 0, 0), *out0 = val(g, n, 0, 1);
    if (ours && strcmp(op, "Linear") == 0) { /* Y [M][N] from X [M][K] */
        c->flops = 2 * numel(out0) * dim_from_end(in0, 1);
    } else if (ours && strcmp(op, "LinearGradData") == 0) { /* dX [M][K] from dY [M][N] */
        c->flops = 2 * numel(out0) * dim_from_end(in0, 1);
    } else if (ours && strcmp(op, "LinearGradWeight") == 0) {
        /* dW [N x K] over M tokens, read off the output gradient: dY [..., N] (M = numel / N), or
         * the data gradient's dYq [N, M] (Xs may be the saved codes [K, M] or X [..., K]) */
        const fr_value *in1 = val(g, n, 1, 0);
        int q = in1 && (in1->dtype == FR_F8E4M3 || in1->dtype == FR_F8E5M2);
        double nl = dim_from_end(in1, 1), m = q ? nl : nl > 0 ? numel(in1) / nl : 0;
        c->flops = 2 * numel(out0) * m;
    } else if (strcmp(op, "MatMul") == 0) {
        c->flops = 2 * numel(out0) * dim_from_end(in0, 1);
    } else if (!n->domain[0] && strcmp(op, "Gemm") == 0) {
        int64_t ta = 0;
        if (fr_node_attr_int(n, "transA", 0, &ta) != FR_OK) ta = 0;
        c->flops = 2 * numel(out0) * dim_from_end(in0, ta ? 2 : 1);
    } else if (ours && (strcmp(op, "Attention") == 0 || strcmp(op, "AttentionGrad") == 0)) {
        const fr_value *k = val(g, n, 1, 0), *v = val(g, n, 2, 0);
        double tq = dim_from_end(in0, 2), d = dim_from_end(in0, 1), tk = dim_from_end(k, 2), dv = dim_from_end(v, 1);
        double batch = tq * d > 0 ? numel(in0) / (tq * d) : 0, pairs = attention_pairs(n, tq, tk);
        int grad = strcmp(op, "AttentionGrad") == 0;
        c->flops = 2 * batch * pairs * (grad ? 3 * d + 2 * dv : d + dv);
    } else if (ours && (strcmp(op, "AttentionQKV") == 0 || strcmp(op, "AttentionQKVGrad") == 0)) {
        /* X [B, T, W] packed; LSE [B, Hq, T] gives the heads and T, O [.., Hq Dv] gives Dv */
        int grad = strcmp(op, "AttentionQKVGrad") == 0;
        const fr_value *o = grad ? val(g, n, 1, 0) : out0, *lse = grad ? val(g, n, 2, 0) : val(g, n, 1, 1);
        int64_t d = 0;
        if (fr_node_attr_int(n, "head_dim", 0, &d) != FR_OK) d = 0;
        double t = dim_from_end(lse, 1), rows = numel(lse); /* B Hq T */
        double dv = rows > 0 ? numel(o) / rows : 0, heads_b = t > 0 ? rows / t : 0;
        c->flops = 2 * heads_b * attention_pairs(n, t, t) * (grad ? 3 * (double)d + 2 * dv : (double)d + dv);
    }
    c->math = c->flops > 0 ? math_of(g, n) : FR_MATH_NONE;
}

/* ---- peaks ---- */

typedef struct peak_row {
    const char *match, *also; /* substrings of the device name (also: NULL or a second one) */
    double bf16, fp8, fp32, fp64, tbs;
} peak_row;

/* dense TFLOP/s (no sparsity) and TB/s from the vendors' data sheets; the first match wins */
static const peak_row k_peaks[] = {
    {"GH200", NULL, 989, 1979, 67, 67, 4.0},
    {"H200", NULL, 989, 1979, 67, 67, 4.8},
    {"H100", "NVL", 835, 1671, 60, 60, 3.9},
    {"H100", "PCIe", 756, 1513, 51, 51, 2.0},
    {"H100", NULL, 989, 1979, 67, 67, 3.35}, /* SXM */
    {"H800", NULL, 989, 1979, 67, 67, 3.35},
    {"A100", "80GB", 312, 312, 19.5, 19.5, 2.039}, /* no fp8: the bf16 rate */
    {"A100", NULL, 312, 312, 19.5, 19.5, 1.555},
    {"L40S", NULL, 362, 733, 91.6, 1.4, 0.864},
};

static void set_row(fr_device_peaks *p, double bf16, double fp8, double fp32, double fp64, double tbs)
{
    p->flops[FR_MATH_BF16] = bf16 * 1e12;
    p->flops[FR_MATH_FP8] = fp8 * 1e12;
    p->flops[FR_MATH_FP32] = fp32 * 1e12;
    p->flops[FR_MATH_FP64] = fp64 * 1e12;
    p->bytes_per_s = tbs * 1e12;
}

fr_status fr_device_peaks_for(const char *device, fr_device_peaks *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->source, sizeof p->source, "unknown device");
    for (size_t i = 0; device && i < sizeof k_peaks / sizeof k_peaks[0]; i++) {
        const peak_row *r = &k_peaks[i];
        if (!strstr(device, r->match) || (r->also && !strstr(device, r->also))) continue;
        set_row(p, r->bf16, r->fp8, r->fp32, r->fp64, r->tbs);
        snprintf(p->source, sizeof p->source, "table: %s%s%s", r->match, r->also ? " " : "", r->also ? r->also : "");
        break;
    }
    const char *env = fr_env_get(FR_ENV_DEVICE_PEAKS);
    if (!env || !env[0]) return FR_OK;
    const char *s = env;
    while (*s) {
        static const struct {
            const char *key;
            int math; /* -1: bandwidth */
        } keys[] = {{"bf16", FR_MATH_BF16}, {"fp8", FR_MATH_FP8}, {"fp32", FR_MATH_FP32}, {"fp64", FR_MATH_FP64},
                    {"tbs", -1}};
        size_t len = strcspn(s, "=");
        int k = -1;
        for (int j = 0; j < 5 && k < 0; j++)
            if (strlen(keys[j].key) == len && strncmp(s, keys[j].key, len) == 0) k = j;
        char *end = NULL;
        double v = k >= 0 && s[len] == '=' ? strtod(s + len + 1, &end) : NAN;
        if (k < 0 || !end || end == s + len + 1 || !(v >= 0) || !isfinite(v) || (*end && *end != ',') ||
            (*end == ',' && !end[1]))
            return fr_error(FR_ERR_INVALID_ARG, "FP8RUN_DEVICE_PEAKS='%s': want key=value pairs separated by commas, "
                            "keys bf16, fp8, fp32, fp64 (TFLOP/s) and tbs (TB/s), values >= 0", env);
        if (keys[k].math < 0) p->bytes_per_s = v * 1e12;
        else p->flops[keys[k].math] = v * 1e12;
        s = *end ? end + 1 : end;
    }
    snprintf(p->source, sizeof p->source, "FP8RUN_DEVICE_PEAKS");
    return FR_OK;
}

double fr_ceiling_ms(const fr_node_cost *c, const fr_device_peaks *p, fr_math *bound)
{
    double tf = c->flops > 0 && p->flops[c->math] > 0 ? c->flops / p->flops[c->math] : 0;
    double tb = c->bytes > 0 && p->bytes_per_s > 0 ? c->bytes / p->bytes_per_s : 0;
    if (bound) *bound = tf > tb ? c->math : FR_MATH_NONE;
    return 1e3 * (tf > tb ? tf : tb);
}

/* ---- the profile table ---- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if ((size_t)k < b->cap - b->len) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

typedef struct prow {
    char key[96];
    int nodes;
    double ms, gemm_ms, ceil_ms;
    fr_node_cost cost; /* flops and bytes summed; math: the first node's with FLOPs */
    int node;          /* per-node rows: the node index */
} prow;

static int cmp_ms(const void *a, const void *b)
{
    double x = ((const prow *)a)->ms, y = ((const prow *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

static const char *math_name(fr_math m)
{
    static const char *const names[] = {"memory", "fp32", "fp64", "bf16", "fp8"};
    return m >= 0 && m < FR_MATH_COUNT ? names[m] : "?";
}

#define KEY_W 40

/* bound < 0: no "bound" word (the total) */
static void put_row(sbuf *b, const char *key, int nodes, double ms, double total, double gemm_ms, int has_gemm,
                    const fr_node_cost *c, double ceil_ms, int bound)
{
    char gm[16] = "        -", pc[16] = "     -";
    if (has_gemm && gemm_ms > 0) snprintf(gm, sizeof gm, "%9.3f", gemm_ms);
    if (ceil_ms > 0 && ms > 0) snprintf(pc, sizeof pc, "%5.1f%%", 100 * ceil_ms / ms);
    put(b, "  %-*.*s %5d %9.3f %5.1f%% %s %9.3f %8.3f %9.3f %s  %s\n", KEY_W, KEY_W, key, nodes, ms,
        total > 0 ? 100 * ms / total : 0, gm, c->flops / 1e12, c->bytes / 1e9, ceil_ms, pc,
        ceil_ms > 0 && bound >= 0 ? math_name((fr_math)bound) : "");
}

fr_status fr_profile_text(const fr_profile_input *in, char **text)
{
    *text = NULL;
    const fr_graph *g = in->g;
    int runs = in->runs > 0 ? in->runs : 1;
    fr_device_peaks pk;
    FR_TRY(fr_device_peaks_for(in->device, &pk));
    prow *rows = fr_calloc((size_t)g->n_nodes + 1, sizeof *rows, "profile rows");
    prow *nodes = fr_calloc((size_t)g->n_nodes + 1, sizeof *nodes, "profile nodes");
    if (!rows || !nodes) {
        free(rows);
        free(nodes);
        return FR_ERR_OOM;
    }
    int n = 0;
    prow all;
    memset(&all, 0, sizeof all);
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        char key[96];
        const char *prec = NULL;
        if (strcmp(nd->domain, "ai.fp8run") == 0 && strncmp(nd->op_type, "Linear", 6) == 0)
            fr_ignore_status(fr_node_attr_string(nd, "precision", "fp32", &prec)); /* a label only */
        snprintf(key, sizeof key, "%s%s%s", nd->op_type, prec ? " " : "", prec ? prec : "");
        int k = 0;
        while (k < n && strcmp(rows[k].key, key) != 0) k++;
        if (k == n) snprintf(rows[n++].key, sizeof rows[0].key, "%s", key);
        fr_node_cost c;
        fr_node_cost_of(g, nd, &c);
        double ms = in->node_ms[i] / runs, gms = in->gemm_ms ? in->gemm_ms[i] / runs : 0;
        double cm = fr_ceiling_ms(&c, &pk, NULL);
        prow *r = &rows[k];
        r->nodes++;
        r->ms += ms;
        r->gemm_ms += gms;
        r->ceil_ms += cm;
        r->cost.flops += c.flops;
        r->cost.bytes += c.bytes;
        if (r->cost.math == FR_MATH_NONE) r->cost.math = c.math;
        all.nodes++;
        all.ms += ms;
        all.gemm_ms += gms;
        all.ceil_ms += cm;
        all.cost.flops += c.flops;
        all.cost.bytes += c.bytes;
        prow *p = &nodes[i]; /* "op: the name's end" (names are long paths; their end says most) */
        size_t kl = strlen(key), nl = strlen(nd->name), room = kl + 6 < KEY_W ? KEY_W - kl - 2 : 4;
        const char *tail = nl > room ? nd->name + nl - (room - 1) : nd->name;
        snprintf(p->key, sizeof p->key, "%.50s: %s%.40s", key, nl > room ? "~" : "", tail);
        p->nodes = 1;
        p->ms = ms;
        p->gemm_ms = gms;
        p->ceil_ms = cm;
        p->cost = c;
        p->node = i;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_ms);
    sbuf b = {0};
    int known = pk.bytes_per_s > 0 || pk.flops[FR_MATH_BF16] > 0;
    put(&b, "GPU time per run by op (%d runs, %.2f ms per run)\n", in->runs, all.ms);
    if (known)
        put(&b, "ceiling: max(FLOPs / peak, bytes / bandwidth) at %s's peaks (%s): %.0f bf16, %.0f fp8, %.0f fp32 "
            "TFLOP/s dense, %.2f TB/s\n  (FLOPs of GEMMs and attention only; bytes: each input and output once; "
            "%% ceil = ceiling / time; FP8RUN_DEVICE_PEAKS overrides)\n",
            in->device ? in->device : "the device", pk.source, pk.flops[FR_MATH_BF16] / 1e12,
            pk.flops[FR_MATH_FP8] / 1e12, pk.flops[FR_MATH_FP32] / 1e12, pk.bytes_per_s / 1e12);
    else
        put(&b, "ceiling: no peaks known for %s (set FP8RUN_DEVICE_PEAKS=\"bf16=..,fp8=..,fp32=..,tbs=..\")\n",
            in->device ? in->device : "this device");
    put(&b, "  %-*s %5s %9s %6s %9s %9s %8s %9s %6s  %s\n", KEY_W, "op", "nodes", "ms", "share", "in GEMM", "TFLOP",
        "GB", "ceil ms", "%ceil", "bound");
    for (int k = 0; k < n; k++) {
        fr_math bound; /* which term dominates the op's summed cost */
        fr_node_cost c = rows[k].cost;
        (void)fr_ceiling_ms(&c, &pk, &bound);
        put_row(&b, rows[k].key, rows[k].nodes, rows[k].ms, all.ms, rows[k].gemm_ms, in->gemm_ms != NULL, &c,
                rows[k].ceil_ms, (int)bound);
    }
    put_row(&b, "all ops", all.nodes, all.ms, all.ms, all.gemm_ms, in->gemm_ms != NULL, &all.cost, all.ceil_ms, -1);
    if (in->per_node) {
        qsort(nodes, (size_t)g->n_nodes, sizeof *nodes, cmp_ms);
        int show = g->n_nodes < 40 ? g->n_nodes : 40;
        put(&b, "the %d slowest nodes (FP8RUN_PROFILE=2):\n", show);
        for (int k = 0; k < show; k++) {
            fr_math bound;
            (void)fr_ceiling_ms(&nodes[k].cost, &pk, &bound);
            put_row(&b, nodes[k].key, 1, nodes[k].ms, all.ms, nodes[k].gemm_ms, in->gemm_ms != NULL, &nodes[k].cost,
                    nodes[k].ceil_ms, (int)bound);
        }
    }
    /* the nodes off the fast path (passes/fast_path.h) with their measured share */
    fr_slow_report sr;
    if (fr_fast_path_check(g, &sr) == FR_OK) {
        char *st = NULL;
        if (in->generic_attention) fr_fast_path_generic_attention(&sr, g, in->generic_attention);
        if (fr_slow_report_text(&sr, g, in->node_ms, all.ms * runs, 0, &st) == FR_OK) put(&b, "%s", st);
        free(st);
        fr_slow_report_free(&sr);
    }
    fr_clear_error(); /* (a report that could not be made leaves the profile as it was) */
    if (in->memory) put(&b, "Memory: %s\n", in->memory);
    free(rows);
    free(nodes);
    if (b.oom || !b.s) {
        free(b.s);
        return fr_error(FR_ERR_OOM, "out of memory for the profile text");
    }
    *text = b.s;
    return FR_OK;
}
