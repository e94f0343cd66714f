/* runtime/exec/perf_model.c on the CPU: FLOPs and bytes of hand-built nodes against values worked
 * out by hand, the device peak table and its FP8RUN_DEVICE_PEAKS override, the ceiling, and the
 * profile table's columns for given times. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "graph/ir.h"
#include "runtime/exec/perf_model.h"

static int value(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims)
{
    int id = -1;
    FR_ASSERT_OK(fr_graph_add_value(g, name, &id));
    fr_value_set_shape(&g->values[id], dt, rank, dims);
    return id;
}

static int node(fr_graph *g, const char *op, const char *domain, const char *name, int n_in, const int *in, int n_out,
                const int *out)
{
    int nid = -1;
    FR_ASSERT_OK(fr_graph_add_node(g, op, domain, name, n_in, in, n_out, out, &nid));
    return nid;
}

/* the graph of the tests: ids of its nodes */
typedef struct tgraph {
    fr_graph *g;
    int lin, view, add, wgrad, wgrad_t, attn, attn_grad, attn_win, matmul, gemm;
} tgraph;

static void build(tgraph *t)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_graph_new(&g));
    t->g = g;
    /* Linear fp8: X [4,16,64] (M = 64 tokens, K = 64), W [64][96] -> Y [4,16,96], Xq [64][64], sinv [1] */
    int x = value(g, "x", FR_F32, 3, (int64_t[]){4, 16, 64});
    int w = value(g, "w", FR_F32, 2, (int64_t[]){64, 96});
    int y = value(g, "y", FR_F32, 3, (int64_t[]){4, 16, 96});
    int xq = value(g, "xq", FR_F8E4M3, 2, (int64_t[]){64, 64});
    int xs = value(g, "xs", FR_F32, 1, (int64_t[]){1});
    t->lin = node(g, "Linear", "ai.fp8run", "lin", 2, (int[]){x, w}, 3, (int[]){y, xq, xs});
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[t->lin], "precision", "fp8"));
    int y2 = value(g, "y2", FR_F32, 2, (int64_t[]){64, 96});
    int shp = value(g, "shp", FR_I64, 1, (int64_t[]){2});
    t->view = node(g, "Reshape", "", "view", 2, (int[]){y, shp}, 1, (int[]){y2});
    int s = value(g, "s", FR_F32, 2, (int64_t[]){64, 96});
    t->add = node(g, "Add", "", "add", 2, (int[]){y2, y2}, 1, (int[]){s}); /* y2 read once */
    /* LinearGradWeight from the saved codes [64][64] and dY [64][96]: dW [64][96] over 64 tokens */
    int dw = value(g, "dw", FR_F32, 2, (int64_t[]){64, 96});
    t->wgrad = node(g, "LinearGradWeight", "ai.fp8run", "wgrad", 3, (int[]){xq, s, xs}, 1, (int[]){dw});
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[t->wgrad], "precision", "fp8"));
    /* the same from saved codes of K = 32 ([K, M] = [32][64]): dW [32][96] over 64 tokens */
    int xq2 = value(g, "xq2", FR_F8E4M3, 2, (int64_t[]){32, 64}), dw2 = value(g, "dw2", FR_F32, 2, (int64_t[]){32, 96});
    t->wgrad_t = node(g, "LinearGradWeight", "ai.fp8run", "wgrad_t", 3, (int[]){xq2, s, xs}, 1, (int[]){dw2});
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[t->wgrad_t], "precision", "fp8"));
    /* causal attention: Q, K [2,3,8,16], V [2,3,8,32]: 6 heads, T = 8, D = 16, Dv = 32 */
    int q = value(g, "q", FR_BF16, 4, (int64_t[]){2, 3, 8, 16});
    int k = value(g, "k", FR_BF16, 4, (int64_t[]){2, 3, 8, 16});
    int v = value(g, "v", FR_BF16, 4, (int64_t[]){2, 3, 8, 32});
    int o = value(g, "o", FR_BF16, 4, (int64_t[]){2, 3, 8, 32});
    int lse = value(g, "lse", FR_F32, 3, (int64_t[]){2, 3, 8});
    t->attn = node(g, "Attention", "ai.fp8run", "attn", 3, (int[]){q, k, v}, 2, (int[]){o, lse});
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[t->attn], "causal", 1));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[t->attn], "precision", "bf16"));
    int dq = value(g, "dq", FR_BF16, 4, (int64_t[]){2, 3, 8, 16});
    t->attn_grad = node(g, "AttentionGrad", "ai.fp8run", "attn_grad", 6, (int[]){q, k, v, o, lse, o}, 1, (int[]){dq});
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[t->attn_grad], "causal", 1));
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[t->attn_grad], "precision", "bf16"));
    int o3 = value(g, "o3", FR_BF16, 4, (int64_t[]){2, 3, 8, 32}), l3 = value(g, "l3", FR_F32, 3, (int64_t[]){2, 3, 8});
    t->attn_win = node(g, "Attention", "ai.fp8run", "attn_win", 3, (int[]){q, k, v}, 2, (int[]){o3, l3});
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[t->attn_win], "causal", 1));
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[t->attn_win], "window", 3));
    /* MatMul [5][7] x [7][3]; Gemm with transA: A [7][5] */
    int a = value(g, "a", FR_F32, 2, (int64_t[]){5, 7}), b = value(g, "b", FR_F32, 2, (int64_t[]){7, 3});
    int c = value(g, "c", FR_F32, 2, (int64_t[]){5, 3});
    t->matmul = node(g, "MatMul", "", "mm", 2, (int[]){a, b}, 1, (int[]){c});
    int at = value(g, "at", FR_F32, 2, (int64_t[]){7, 5}), c2 = value(g, "c2", FR_F32, 2, (int64_t[]){5, 3});
    t->gemm = node(g, "Gemm", "", "gemm", 2, (int[]){at, b}, 1, (int[]){c2});
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[t->gemm], "transA", 1));
}

static fr_node_cost cost(const tgraph *t, int nid)
{
    fr_node_cost c;
    fr_node_cost_of(t->g, &t->g->nodes[nid], &c);
    return c;
}

static void test_costs(void)
{
    tgraph t;
    build(&t);
    fr_node_cost c = cost(&t, t.lin);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 64 * 96 * 64, 0);
    /* X 64*64*4 + W 64*96*4 + Y 64*96*4 + Xq 64*64 + sinv 4 */
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, 16384 + 24576 + 24576 + 4096 + 4, 0);
    CU_ASSERT_EQUAL(c.math, FR_MATH_FP8);
    c = cost(&t, t.view);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 0, 0);
    c = cost(&t, t.add);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, 2 * 24576, 0); /* the input used twice counts once */
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 0, 0);
    CU_ASSERT_EQUAL(c.math, FR_MATH_NONE);
    c = cost(&t, t.wgrad);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 64 * 96 * 64, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, 4096 + 24576 + 4 + 24576, 0);
    c = cost(&t, t.wgrad_t); /* tokens from dY, not from the codes' layout */
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 32 * 96 * 64, 0);
    /* causal T = 8: 36 pairs per head, 6 heads; forward 2 (D + Dv), backward 2 (3 D + 2 Dv) per pair */
    c = cost(&t, t.attn);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 6 * 36 * (16 + 32), 0);
    CU_ASSERT_EQUAL(c.math, FR_MATH_BF16);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, 2 * 1536 + 3072 + 3072 + 48 * 4, 0); /* q, k, v, o (bf16), lse */
    c = cost(&t, t.attn_grad);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 6 * 36 * (3 * 16 + 2 * 32), 0);
    /* window 3: rows 0..2 keep 1, 2, 3 keys, rows 3..7 keep 3: 21 pairs; no precision: the dtype's (bf16) */
    c = cost(&t, t.attn_win);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 6 * 21 * 48, 0);
    CU_ASSERT_EQUAL(c.math, FR_MATH_BF16);
    c = cost(&t, t.matmul);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 5 * 3 * 7, 0);
    CU_ASSERT_EQUAL(c.math, FR_MATH_FP32);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, (35 + 21 + 15) * 4, 0);
    c = cost(&t, t.gemm);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 5 * 3 * 7, 0); /* K from A's first dim (transA) */
    /* an unknown dim counts nothing */
    fr_value_set_shape(&t.g->values[t.g->nodes[t.matmul].inputs[0]], FR_F32, 2, (int64_t[]){-1, 7});
    c = cost(&t, t.matmul);
    CU_ASSERT_DOUBLE_EQUAL(c.bytes, (21 + 15) * 4, 0);
    fr_graph_free(t.g);
}

static void test_peaks(void)
{
    unsetenv("FP8RUN_DEVICE_PEAKS");
    fr_device_peaks p;
    FR_ASSERT_OK(fr_device_peaks_for("NVIDIA H100 80GB HBM3", &p));
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_BF16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_FP8], 1979e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(p.bytes_per_s, 3.35e12, 1);
    FR_ASSERT_OK(fr_device_peaks_for("NVIDIA H200", &p));
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_FP8], 1979e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(p.bytes_per_s, 4.8e12, 1);
    FR_ASSERT_OK(fr_device_peaks_for("NVIDIA H100 PCIe", &p));
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_BF16], 756e12, 1);
    FR_ASSERT_OK(fr_device_peaks_for("Some GPU", &p));
    CU_ASSERT_DOUBLE_EQUAL(p.bytes_per_s, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_BF16], 0, 0);
    /* the override: the keys given replace the table's */
    setenv("FP8RUN_DEVICE_PEAKS", "fp8=1000,tbs=2.5", 1);
    FR_ASSERT_OK(fr_device_peaks_for("NVIDIA H200", &p));
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_FP8], 1000e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(p.flops[FR_MATH_BF16], 989e12, 1);
    CU_ASSERT_DOUBLE_EQUAL(p.bytes_per_s, 2.5e12, 1);
    static const char *const bad[] = {"fp8", "fp9=1", "fp8=x", "fp8=-1", "fp8=1;tbs=2", "tbs=1,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("FP8RUN_DEVICE_PEAKS", bad[i], 1);
        CU_ASSERT_EQUAL(fr_device_peaks_for("NVIDIA H200", &p), FR_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "FP8RUN_DEVICE_PEAKS"));
    }
    unsetenv("FP8RUN_DEVICE_PEAKS");
}

static void test_ceiling(void)
{
    fr_device_peaks p;
    memset(&p, 0, sizeof p);
    p.flops[FR_MATH_FP8] = 2e12; /* 2 TFLOP/s, 1 GB/s */
    p.bytes_per_s = 1e9;
    fr_node_cost c = {4e9, 1e6, FR_MATH_FP8}; /* 2 ms of math, 1 ms of bytes */
    fr_math b = FR_MATH_NONE;
    CU_ASSERT_DOUBLE_EQUAL(fr_ceiling_ms(&c, &p, &b), 2.0, 1e-12);
    CU_ASSERT_EQUAL(b, FR_MATH_FP8);
    c.bytes = 3e6;
    CU_ASSERT_DOUBLE_EQUAL(fr_ceiling_ms(&c, &p, &b), 3.0, 1e-12);
    CU_ASSERT_EQUAL(b, FR_MATH_NONE);
    c.math = FR_MATH_BF16; /* no bf16 peak known: only the bytes */
    CU_ASSERT_DOUBLE_EQUAL(fr_ceiling_ms(&c, &p, &b), 3.0, 1e-12);
}

/* The row of `op` in the table: nodes, ms, share, GEMM ms (-1 for "-"), TFLOP, GB, ceiling, %. */
static int row(const char *text, const char *op, double *v)
{
    char key[64];
    snprintf(key, sizeof key, "\n  %s ", op);
    const char *s = strstr(text, key);
    if (!s) return 0;
    s += strlen(key);
    while (*s == ' ') s++;
    char gemm[32];
    int n = sscanf(s, "%lf %lf %lf%% %31s %lf %lf %lf %lf%%", &v[0], &v[1], &v[2], gemm, &v[4], &v[5], &v[6], &v[7]);
    v[3] = strcmp(gemm, "-") == 0 ? -1 : atof(gemm);
    return n == 8;
}

static void test_profile_table(void)
{
    tgraph t;
    build(&t);
    /* 1 TB/s and 1000 TFLOP/s for every math: the Linear's ceiling is its bytes, 69636 B = 69.636 ns
     * (its 786432 FLOPs take 0.8 ns) */
    setenv("FP8RUN_DEVICE_PEAKS", "bf16=1000,fp8=1000,fp32=1000,fp64=1000,tbs=1", 1);
    int nn = t.g->n_nodes;
    double *ms = calloc((size_t)nn, sizeof *ms), *gm = calloc((size_t)nn, sizeof *gm);
    CU_ASSERT_FATAL(ms && gm);
    for (int i = 0; i < nn; i++) ms[i] = 2 * 1e-3; /* 2 runs of 1 us each */
    ms[t.lin] = 2 * 69.636e-6 * 4; /* 4x its ceiling per run: 25% */
    gm[t.lin] = 2 * 0.1e-3;
    char *text = NULL;
    const fr_profile_input in = {t.g, ms, gm, 2, "Test GPU", "peak at node 3: 1 KiB", 1, NULL};
    FR_ASSERT_OK(fr_profile_text(&in, &text));
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    if (getenv("PERF_MODEL_SHOW")) fputs(text, stdout);
    double v[8];
    CU_ASSERT_FATAL(row(text, "Linear fp8", v));
    CU_ASSERT_DOUBLE_EQUAL(v[0], 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(v[1], 69.636e-6 * 4, 1e-3); /* ms per run (3 decimals printed) */
    CU_ASSERT_DOUBLE_EQUAL(v[3], 0.0, 1e-3);           /* 0.1 us in cuBLASLt: 0.000 ms */
    CU_ASSERT_DOUBLE_EQUAL(v[4], 786432e-12, 1e-3);
    CU_ASSERT_DOUBLE_EQUAL(v[7], 25.0, 0.051);
    CU_ASSERT_PTR_NOT_NULL(strstr(strstr(text, "\n  Linear fp8 "), "%  memory\n"));
    /* Attention: two nodes (one causal, one windowed), FLOPs summed; no GEMM time */
    CU_ASSERT_FATAL(row(text, "Attention", v));
    CU_ASSERT_DOUBLE_EQUAL(v[0], 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(v[3], -1, 0);
    /* Add: 49152 B at 1 TB/s = 49.152 ns of 1 us: 4.9% */
    CU_ASSERT_FATAL(row(text, "Add", v));
    CU_ASSERT_DOUBLE_EQUAL(v[7], 4.9, 0.051);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "FP8RUN_DEVICE_PEAKS"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "slowest nodes"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "Linear fp8: lin"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "Memory: peak at node 3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  all ops "));
    free(text);
    /* an unknown device without the variable: no ceilings, said so */
    unsetenv("FP8RUN_DEVICE_PEAKS");
    FR_ASSERT_OK(fr_profile_text(&in, &text));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "no peaks known for Test GPU"));
    free(text);
    free(ms);
    free(gm);
    fr_graph_free(t.g);
}

/* AttentionQKV (X packed [B, T, W]): heads and T from LSE [B, Hq, T], Dv from O; causal */
static void test_attention_qkv_cost(void)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_graph_new(&g));
    /* B 2, T 8, Hq 4, Hk 2, D 8, Dv 8: W = 4*8 + 2*8 + 2*8 = 64 */
    int x = value(g, "x", FR_F32, 3, (int64_t[]){2, 8, 64});
    int o = value(g, "o", FR_F32, 3, (int64_t[]){2, 8, 32}), lse = value(g, "lse", FR_F32, 3, (int64_t[]){2, 4, 8});
    int fwd = node(g, "AttentionQKV", "ai.fp8run", "aq", 1, (int[]){x}, 2, (int[]){o, lse});
    int dx = value(g, "dx", FR_F32, 3, (int64_t[]){2, 8, 64});
    int bwd = node(g, "AttentionQKVGrad", "ai.fp8run", "aqg", 4, (int[]){x, o, lse, o}, 1, (int[]){dx});
    for (int i = 0; i < 2; i++) {
        fr_node *n = &g->nodes[i ? bwd : fwd];
        FR_ASSERT_OK(fr_node_set_attr_int(n, "heads", 4));
        FR_ASSERT_OK(fr_node_set_attr_int(n, "kv_heads", 2));
        FR_ASSERT_OK(fr_node_set_attr_int(n, "head_dim", 8));
        FR_ASSERT_OK(fr_node_set_attr_int(n, "causal", 1));
    }
    fr_node_cost c;
    fr_node_cost_of(g, &g->nodes[fwd], &c);
    /* 8 query heads of 36 causal pairs each, (D + Dv) x 2 FLOPs a pair */
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 8 * 36 * (8 + 8), 0);
    fr_node_cost_of(g, &g->nodes[bwd], &c);
    CU_ASSERT_DOUBLE_EQUAL(c.flops, 2.0 * 8 * 36 * (3 * 8 + 2 * 8), 0);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"AttentionQKV FLOPs from its packed shapes", test_attention_qkv_cost},
    {"node FLOPs and bytes match hand-computed values", test_costs},
    {"device peaks: table by name, FP8RUN_DEVICE_PEAKS override and errors", test_peaks},
    {"ceiling = max(FLOPs / peak, bytes / bandwidth)", test_ceiling},
    {"profile table: times, GEMM share, ceilings", test_profile_table},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"perf_model", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
