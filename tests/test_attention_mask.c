/* The attention masks the dynamo exports compute from attention_mask, read symbolically
 * (passes/attention_mask.h), on the dynamic fixtures of tests/fixtures/hf (Llama: GQA; GPT-2; Mistral: sliding
 * window 6; opsets 18 and 23):
 *  - at the fixtures' [2, 11] and at sizes no fold reaches ([8, 2048], [1, 4096]): every layer
 *    fuses with causal = 1 (Mistral: window 6), no mask input M, and the key padding as the
 *    segment input Sk = attention_mask; with attention_mask marked all ones (FR_VAL_ONES, as the
 *    trainer marks what it feeds ones) no Sk either; no node of the mask chain is left, nor the
 *    exporter's GQA Expand;
 *  - the training pipeline gives each dynamic export the fusions of its static twin: as many
 *    Attention (AttentionQKV) and Rotary nodes, and the report says how they mask;
 *  - chains that are no causal / window / padding mask stay dense masks and say why: k < q (the
 *    diagonal masked too), attention_mask read at (key, batch);
 *  - hand-built chains (not folded) of the other ops the reading takes: Not, Equal, Sub, Mul,
 *    Unsqueeze of the input, Cast, Where, Less, and what it refuses (a window without causal,
 *    the input read at (batch, query), a mask over the heads), the reason named;
 *  - fused with Sk against the unfused graph on the CPU (exact semantics: 1e-5), attention_mask
 *    padded on the right and on the left, over the rows of queries that see a key (the fully
 *    masked ones give 0 fused and a uniform average unfused: no token's output). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/harness.h"
#include "graph/onnx_io.h"
#include "ops/grad.h"
#include "passes/attention_fuse.h"
#include "passes/attention_mask.h"
#include "passes/passes.h"
#include "runtime/io/npy.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static const char *const DYN[] = {"llama_op18_dynamic", "llama_op23_dynamic", "gpt2_op18_dynamic",
                                  "gpt2_op23_dynamic",  "mistral_op18_dynamic", "mistral_op23_dynamic"};
#define N_DYN ((int)(sizeof DYN / sizeof DYN[0]))

static int count_op(const fr_graph *g, const char *op, const char *domain)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0 && strcmp(g->nodes[i].domain, domain) == 0;
    return n;
}

/* dir imported, attention_mask marked all ones or not, prepared at [B, T], attention fused. */
static fr_graph *fused(const char *dir, int ones, int64_t B, int64_t T)
{
    fr_graph *g = fr_ft_open_hf(dir);
    fr_ft_freeze_constants(g);
    const int am = fr_graph_find_value(g, "attention_mask");
    CU_ASSERT_FATAL(am >= 0);
    if (ones) g->values[am].flags |= FR_VAL_ONES;
    fr_status st = fr_ft_prepare(g, B, T); /* opset 23: the Attention import reads the mask here */
    int n = 0;
    if (st == FR_OK) st = fr_fuse_attention(g, &n);
    if (st != FR_OK) printf("\n  %s [%lld, %lld]: %s", dir, (long long)B, (long long)T, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    return g;
}

/* Every layer fused, causal (window), no M, Sk = attention_mask unless marked ones; nothing of
 * the mask chain or of GQA's Expand left. */
static void check_fused(const char *dir, int ones, int64_t B, int64_t T)
{
    fr_graph *g = fused(dir, ones, B, T);
    const int am = fr_graph_find_value(g, "attention_mask");
    const int64_t want_window = strstr(dir, "mistral") && T > 6 ? 6 : 0;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *a = &g->nodes[i];
        if (a->dead || strcmp(a->op_type, "Attention") != 0 || strcmp(a->domain, FR_DOMAIN_FP8RUN) != 0) continue;
        n++;
        int64_t causal = -1, window = -1;
        FR_ASSERT_OK(fr_node_attr_int(a, "causal", 0, &causal));
        FR_ASSERT_OK(fr_node_attr_int(a, "window", 0, &window));
        CU_ASSERT_EQUAL(causal, 1);
        CU_ASSERT_EQUAL(window, want_window);
        CU_ASSERT(a->n_inputs < 4 || a->inputs[3] < 0); /* no dense mask */
        const int sk = a->n_inputs > 4 ? a->inputs[4] : -1;
        if (sk != (ones ? -1 : am))
            printf("\n  %s [%lld, %lld] ones %d: Sk %d, want %d", dir, (long long)B, (long long)T, ones, sk, ones ? -1 : am);
        CU_ASSERT_EQUAL(sk, ones ? -1 : am);
        CU_ASSERT(a->doc_string && strncmp(a->doc_string, FR_ATTN_MASK_NOTE "causal", strlen(FR_ATTN_MASK_NOTE) + 6) == 0);
    }
    if (n != 2) printf("\n  %s [%lld, %lld]: %d fused", dir, (long long)B, (long long)T, n);
    CU_ASSERT_EQUAL(n, 2);
    static const char *const gone[] = {"Softmax", "GatherND", "Where", "And", "LessOrEqual", "Greater", "Expand"};
    for (size_t k = 0; k < sizeof gone / sizeof gone[0]; k++) {
        if (count_op(g, gone[k], "")) printf("\n  %s: %d %s left", dir, count_op(g, gone[k], ""), gone[k]);
        CU_ASSERT_EQUAL(count_op(g, gone[k], ""), 0);
    }
    fr_graph_free(g);
}

static void test_fixture_size(void)
{
    for (int i = 0; i < N_DYN; i++)
        for (int ones = 0; ones < 2; ones++) check_fused(DYN[i], ones, 2, 11);
    /* the mask as the Add's first operand, the scores second: read all the same */
    fr_graph *g = fr_ft_open_hf("gpt2_op18_dynamic");
    fr_ft_freeze_constants(g);
    int swapped = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        const int p = strcmp(n->op_type, "Softmax") == 0 ? g->values[n->inputs[0]].producer : -1;
        if (p < 0 || strcmp(g->nodes[p].op_type, "Add") != 0) continue;
        const int x = g->nodes[p].inputs[0];
        g->nodes[p].inputs[0] = g->nodes[p].inputs[1];
        g->nodes[p].inputs[1] = x;
        swapped++;
    }
    CU_ASSERT_EQUAL(swapped, 2);
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 11));
    int n = 0;
    FR_ASSERT_OK(fr_fuse_attention(g, &n));
    CU_ASSERT_EQUAL(n, 2);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, "Attention") == 0) {
            int64_t causal = 0;
            FR_ASSERT_OK(fr_node_attr_int(&g->nodes[i], "causal", 0, &causal));
            CU_ASSERT_EQUAL(causal, 1);
            CU_ASSERT(g->nodes[i].n_inputs == 5 && g->nodes[i].inputs[3] < 0);
        }
    fr_graph_free(g);
}

/* Sizes past every fold cap: [8, 2048] is a [8, 1, 2048, 2048] mask (32M elements); the reading
 * builds nothing of it. GPT-2's learned positions stop at 64 (preparation folds their Gather):
 * it takes the sizes up to that. */
static void test_any_size(void)
{
    static const int64_t shapes[][2] = {{8, 2048}, {1, 4096}, {3, 64}, {1, 1}};
    for (int i = 0; i < N_DYN; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (shapes[s][1] > 1 && (shapes[s][1] <= 64 || !strstr(DYN[i], "gpt2")))
                check_fused(DYN[i], s & 1, shapes[s][0], shapes[s][1]);
    /* one token: causal keeps everything, nothing to mask but the padding */
    fr_graph *g = fused("llama_op18_dynamic", 0, 1, 1);
    CU_ASSERT_EQUAL(count_op(g, "Attention", FR_DOMAIN_FP8RUN), 2);
    fr_graph_free(g);
}

/* The trainer's pipeline (bf16: Linears fused, so AttentionQKV can form) on dir. */
static fr_trainer *pipeline(const char *dir)
{
    fr_graph *g = fr_ft_open_hf(dir);
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.precision = "bf16";
    o.eval_only = 1;
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, &o, &t);
    if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    fr_graph_free(g);
    return t;
}

static const char *pass_detail(const fr_trainer *t, const char *name)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, name) == 0) return t->passes.pass[i].detail;
    return "";
}

static void test_like_static(void)
{
    for (int i = 0; i < N_DYN; i++) {
        char twin[64];
        snprintf(twin, sizeof twin, "%.*s_static", (int)(strstr(DYN[i], "_dynamic") - DYN[i]), DYN[i]);
        fr_trainer *d = pipeline(DYN[i]), *s = pipeline(twin);
        static const char *const ops[] = {"AttentionQKV", "Attention", "Rotary", "RMSNormalization", "AddRMSNorm"};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            const int nd = count_op(d->g, ops[k], FR_DOMAIN_FP8RUN), ns = count_op(s->g, ops[k], FR_DOMAIN_FP8RUN);
            if (nd != ns) printf("\n  %s: %d %s, %s: %d", DYN[i], nd, ops[k], twin, ns);

            CU_ASSERT_EQUAL(nd, ns);
        }
        CU_ASSERT_EQUAL(count_op(d->g, "AttentionQKV", FR_DOMAIN_FP8RUN), 2);
        CU_ASSERT_EQUAL(count_op(d->g, "Softmax", ""), 0);
        CU_ASSERT_EQUAL(count_op(d->g, "Expand", ""), 0);
        const char *rep = pass_detail(d, "attention_masks");
        const char *want = strstr(DYN[i], "mistral") ? "2 attentions: 2 causal, window 6, key padding 'attention_mask' "
                                                       "dropped (fed all ones)"
                                                     : "2 attentions: 2 causal, key padding 'attention_mask' dropped "
                                                       "(fed all ones)";
        if (strcmp(rep, want) != 0) printf("\n  %s: attention_masks '%s'", DYN[i], rep);
        CU_ASSERT_STRING_EQUAL(rep, want);
        fr_trainer_free(d);
        fr_trainer_free(s);
    }
}

/* A chain edited so that it is no causal / window / padding mask: fused with the dense mask
 * (the opset-18 exports' guard allows it), the report naming why. */
static void expect_dense(fr_graph *g, const char *why)
{
    fr_ft_freeze_constants(g);
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 11));
    int n = 0;
    FR_ASSERT_OK(fr_fuse_attention(g, &n));
    CU_ASSERT_EQUAL(n, 2);
    int dense = -1;
    char rep[512];
    FR_ASSERT_OK(fr_attn_mask_report(g, &dense, rep, sizeof rep));
    CU_ASSERT_EQUAL(dense, 2);
    if (!strstr(rep, why) || !strstr(rep, "dense additive mask")) printf("\n  report '%s' lacks '%s'", rep, why);
    CU_ASSERT_PTR_NOT_NULL(strstr(rep, why));
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && strcmp(g->nodes[i].op_type, "Attention") == 0) {
            CU_ASSERT(g->nodes[i].n_inputs == 4 && g->nodes[i].inputs[3] >= 0);
        }
    fr_graph_free(g);
}

static fr_node *node_of(fr_graph *g, const char *op)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, op) == 0) return &g->nodes[i];
    CU_FAIL_FATAL("no such node");
    return NULL;
}

static void test_not_taken(void)
{
    /* k < q instead of k <= q: the diagonal masked */
    fr_graph *g = fr_ft_open_hf("llama_op18_dynamic");
    fr_node *le = node_of(g, "LessOrEqual");
    free(le->op_type);
    le->op_type = fr_strdup("Less", "test");
    CU_ASSERT_FATAL(le->op_type != NULL);
    expect_dense(g, "neither causal nor a sliding window");
    /* attention_mask read at (key, batch): the index tuple's components swapped */
    g = fr_ft_open_hf("gpt2_op18_dynamic");
    fr_node *cat = &g->nodes[g->values[node_of(g, "GatherND")->inputs[1]].producer];
    CU_ASSERT_FATAL(strcmp(cat->op_type, "Concat") == 0 && cat->n_inputs == 2);
    const int x = cat->inputs[0];
    cat->inputs[0] = cat->inputs[1];
    cat->inputs[1] = x;
    expect_dense(g, "is read at other than (batch, key)");
}

/* ---- hand-built chains against scores [2, 3, 16, 16] ---- */

enum { HB = 2, HH = 3, HT = 16 };

typedef struct hand {
    fr_graph *g;
    int am, q, k, h; /* the input [2, 16]; positions q [16, 1], k [1, 16]; head index [3, 1, 1] */
} hand;

static int i64s(fr_graph *g, const char *name, int n, const int64_t *v)
{
    return fr_gc_add_input(g, NULL, name, FR_I64, 1, (int64_t[]){n}, v);
}

static int scalar(fr_graph *g, const char *name, fr_dtype dt, double x)
{
    if (dt == FR_F32) return fr_gc_add_values(g, name, dt, 0, NULL, &x);
    return fr_gc_add_input(g, NULL, name, dt, 0, NULL, (int64_t[]){(int64_t)x});
}

static int unsq(fr_graph *g, int x, int n, const int64_t *axes)
{
    char nm[32];
    snprintf(nm, sizeof nm, "axes%d", g->n_values);
    return fr_gc_op1(g, "Unsqueeze", 2, (int[]){x, i64s(g, nm, n, axes)});
}

static int cast(fr_graph *g, int x, fr_dtype to)
{
    int out, nid = fr_gc_node(g, "Cast", "", 1, &x, 1, &out);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "to", to));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    return out;
}

static hand hand_new(void)
{
    hand h;
    h.g = fr_gc_new_graph(18);
    CU_ASSERT_FATAL(h.g != NULL);
    FR_ASSERT_OK(fr_graph_add_value(h.g, "attention_mask", &h.am));
    fr_value_set_shape(&h.g->values[h.am], FR_I64, 2, (int64_t[]){HB, HT});
    FR_ASSERT_OK(fr_graph_mark_input(h.g, h.am));
    const int r = fr_gc_op1(h.g, "Range", 3,
                            (int[]){scalar(h.g, "r0", FR_I64, 0), scalar(h.g, "rT", FR_I64, HT), scalar(h.g, "r1", FR_I64, 1)});
    h.q = unsq(h.g, r, 1, (int64_t[]){1});
    h.k = unsq(h.g, r, 1, (int64_t[]){0});
    const int rh = fr_gc_op1(h.g, "Range", 3,
                             (int[]){scalar(h.g, "h0", FR_I64, 0), scalar(h.g, "hH", FR_I64, HH), scalar(h.g, "h1", FR_I64, 1)});
    h.h = unsq(h.g, rh, 2, (int64_t[]){1, 2});
    return h;
}

/* attention_mask[:, None, None, :] != 0 */
static int padding(hand *h) { return cast(h->g, unsq(h->g, h->am, 2, (int64_t[]){1, 2}), FR_BOOL); }

static int and2(hand *h, int a, int b) { return fr_gc_op1(h->g, "And", 2, (int[]){a, b}); }

/* Reads x (boolean, or additive when `additive`: Where(x, 0, lowest) first); frees h. */
static void expect_read(hand *h, int x, int additive, int kind, int64_t window, int seg, const char *why)
{
    if (additive)
        x = fr_gc_op1(h->g, "Where", 3,
                      (int[]){x, scalar(h->g, "zero", FR_F32, 0), scalar(h->g, "lowest", FR_F32, -3.4028234663852886e38)});
    const fr_value s = {.rank = 4, .dims = {HB, HH, HT, HT}};
    fr_attn_mask_info mi;
    const int got = fr_attn_mask_symbolic(h->g, x, !additive, &s, &mi);
    char d[300];
    fr_attn_mask_describe(&mi, h->g, d, sizeof d);
    if (got != kind || (kind == FR_ATTN_MASK_BAD && !strstr(mi.why, why)) ||
        (kind != FR_ATTN_MASK_BAD && (mi.window != window || mi.seg != (seg ? h->am : -1))))
        printf("\n  read as '%s' (want kind %d, window %lld, seg %d, why '%s')", d, kind, (long long)window, seg, why);
    CU_ASSERT_EQUAL(got, kind);
    if (kind == FR_ATTN_MASK_BAD) {
        CU_ASSERT_PTR_NOT_NULL(strstr(mi.why, why));
    } else {
        CU_ASSERT_EQUAL(mi.window, window);
        CU_ASSERT_EQUAL(mi.seg, seg ? h->am : -1);
    }
    fr_graph_free(h->g);
}

static void test_hand_built(void)
{
    hand h = hand_new(); /* Not(k > q) and padding, additive: causal + Sk */
    int c = fr_gc_op1(h.g, "Not", 1, (int[]){fr_gc_op1(h.g, "Greater", 2, (int[]){h.k, h.q})});
    expect_read(&h, and2(&h, c, padding(&h)), 1, FR_ATTN_MASK_CAUSAL, 0, 1, NULL);
    h = hand_new(); /* (q - k) < 5 and k <= q: window 5 */
    int w = fr_gc_op1(h.g, "Less", 2, (int[]){fr_gc_op1(h.g, "Sub", 2, (int[]){h.q, h.k}), scalar(h.g, "w", FR_I64, 5)});
    expect_read(&h, and2(&h, w, fr_gc_op1(h.g, "LessOrEqual", 2, (int[]){h.k, h.q})), 0, FR_ATTN_MASK_CAUSAL, 5, 0, NULL);
    h = hand_new(); /* k == q: the diagonal, a window of 1 */
    expect_read(&h, fr_gc_op1(h.g, "Equal", 2, (int[]){h.k, h.q}), 0, FR_ATTN_MASK_CAUSAL, 1, 0, NULL);
    h = hand_new(); /* 2k <= 2q: causal; and k < 16 + q: true everywhere, dropped */
    const int two = scalar(h.g, "two", FR_I64, 2);
    c = fr_gc_op1(h.g, "LessOrEqual", 2,
                  (int[]){fr_gc_op1(h.g, "Mul", 2, (int[]){h.k, two}), fr_gc_op1(h.g, "Mul", 2, (int[]){two, h.q})});
    const int t = fr_gc_op1(h.g, "Less", 2, (int[]){h.k, fr_gc_op1(h.g, "Add", 2, (int[]){h.q, scalar(h.g, "T", FR_I64, HT)})});
    expect_read(&h, and2(&h, c, t), 0, FR_ATTN_MASK_CAUSAL, 0, 0, NULL);
    h = hand_new(); /* padding alone: no causal mask, Sk */
    expect_read(&h, padding(&h), 1, FR_ATTN_MASK_NONE, 0, 1, NULL);
    h = hand_new(); /* a window without causal */
    w = fr_gc_op1(h.g, "Less", 2, (int[]){fr_gc_op1(h.g, "Sub", 2, (int[]){h.q, h.k}), scalar(h.g, "w", FR_I64, 5)});
    expect_read(&h, w, 0, FR_ATTN_MASK_BAD, 0, 0, "a sliding window without the causal mask");
    h = hand_new(); /* attention_mask[:, None, :, None]: read at (batch, query) */
    expect_read(&h, cast(h.g, unsq(h.g, h.am, 2, (int64_t[]){1, 3}), FR_BOOL), 0, FR_ATTN_MASK_BAD, 0, 0,
                "read at other than (batch, key)");
    h = hand_new(); /* k <= q + head: a mask that differs per head */
    c = fr_gc_op1(h.g, "LessOrEqual", 2, (int[]){h.k, fr_gc_op1(h.g, "Add", 2, (int[]){h.q, h.h})});
    expect_read(&h, c, 0, FR_ATTN_MASK_BAD, 0, 0, "along a batch or head axis");
    h = hand_new(); /* a float mask cast to bool: an op outside the list */
    c = fr_gc_op1(h.g, "Sqrt", 1, (int[]){cast(h.g, h.am, FR_F32)});
    expect_read(&h, cast(h.g, c, FR_BOOL), 0, FR_ATTN_MASK_BAD, 0, 0, "an op the symbolic reading does not take");
}

/* Logits of dir at [2, 11] with attention_mask = mask, fused (Sk) or not. */
static fr_tensor *logits(const char *dir, int fuse, const fr_tensor *mask)
{
    fr_graph *g = fr_ft_open_hf(dir);
    fr_ft_freeze_constants(g);
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 11));
    int n = 0;
    if (fuse) FR_ASSERT_OK(fr_fuse_attention(g, &n));
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/input_input_ids.npy", dir);
    fr_tensor *ids = NULL;
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &ids));
    const int vids[2] = {fr_graph_find_value(g, "input_ids"), fr_graph_find_value(g, "attention_mask")};
    const fr_tensor *ins[2] = {ids, mask};
    fr_tensor *out = fr_ft_run(g, 2, vids, ins, fr_graph_find_value(g, "logits"));
    fr_tensor_free(ids);
    fr_graph_free(g);
    return out;
}

static void test_padded_exact(void)
{
    const int64_t B = 2, T = 11, PAD = 4;
    for (int i = 0; i < N_DYN; i++)
        for (int left = 0; left < 2; left++) {
            fr_tensor *mask = NULL;
            FR_ASSERT_OK(fr_tensor_new(FR_I64, 2, (int64_t[]){B, T}, "mask", &mask));
            int64_t *m = mask->data;
            for (int64_t e = 0; e < B * T; e++) m[e] = 1;
            for (int64_t j = 0; j < PAD; j++) m[T + (left ? j : T - 1 - j)] = 0;
            if (i == 0 && left) m[3] = 0; /* and a hole in row 0 (Sk is any 0/1 pattern) */
            fr_tensor *a = logits(DYN[i], 0, mask), *b = logits(DYN[i], 1, mask);
            const int64_t V = a->dims[2];
            double num = 0, den = 0;
            for (int64_t r = 0; r < B; r++) {
                int seen = 0;
                for (int64_t q = 0; q < T; q++) {
                    seen |= m[r * T + q] != 0;
                    for (int64_t e = (r * T + q) * V; seen && e < (r * T + q + 1) * V; e++) {
                        const double x = ((float *)a->data)[e], y = ((float *)b->data)[e];
                        num += (x - y) * (x - y);
                        den += x * x;
                    }
                }
            }
            const double rel = sqrt(num / den);
            if (!(rel <= 1e-5)) printf("\n  %s %s-padded: fused vs unfused %.2e", DYN[i], left ? "left" : "right", rel);
            CU_ASSERT(rel <= 1e-5);
            fr_tensor_free(a);
            fr_tensor_free(b);
            fr_tensor_free(mask);
        }
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"dynamic exports at [2, 11]: causal (window), Sk = attention_mask or none when fed ones", test_fixture_size},
        {"dynamic exports at [8, 2048], [1, 4096], [3, 64], [1, 1]: the same, nothing folded", test_any_size},
        {"the training pipeline fuses the dynamic exports as their static twins", test_like_static},
        {"chains that are no causal/window/padding mask stay dense, saying why", test_not_taken},
        {"hand-built chains: the other ops read, what is refused and why", test_hand_built},
        {"padded attention_mask (right, left): fused with Sk == unfused (1e-5)", test_padded_exact},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"attention_mask", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
