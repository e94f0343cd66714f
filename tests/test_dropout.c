/* Training-mode dropout (ops/dropout.h, ops/dropout_mask.h, passes/dropout.h):
 *  - statistics: the kept fraction of 2^18 elements within 5 binomial standard deviations of
 *    1 - p for p = 0.1, 0.5, 0.9, fresh seeds; two steps' masks agree as independent ones do;
 *  - exact values: kept elements are x * fl(1 / (1 - p)) bit for bit (within 1 ulp of
 *    x / (1 - p)), dropped ones 0, the kept set the header's hash, float32/64/16 and bfloat16;
 *    p = 0 is the identity;
 *  - the gradient against central differences (float64, the key fixed: the mask is), and the
 *    backward node is the same op with the same key and attributes;
 *  - determinism: the same key gives the same bytes; another step, micro-batch, seed or node
 *    stream another mask;
 *  - refusals: a bad key, ratio outside [0, 1), an integer input;
 *  - the `dropout` pass: ONNX Dropout in training mode (initializers, Constant nodes, opset 6
 *    is_test 0) becomes KeyedDropout reading the key input; inference mode, opset 7..11, ratio
 *    0 and a ratio fed at run time stay; a read mask output is refused; the eval strip;
 *  - the trainer: an ONNX training-mode Dropout in a generated Llama trains with dropout (the
 *    training loss is not the eval loss of the same weights and batch, same seed same losses,
 *    another seed other losses; the compiled .fbs of it the same losses) and the key counts the
 *    micro-batches of a step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/dropout.h"
#include "ops/dropout_mask.h"
#include "ops/grad.h"
#include "passes/dropout.h"
#include "graph/onnx_io.h"
#include "passes/passes.h"
#include "runtime/exec/executor.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"
#include "tests/op_harness.h"

static uint64_t fresh_u64(fr_rng *r)
{
    uint64_t hi = (uint64_t)(fr_rng_uniform(r) * 4294967296.0), lo = (uint64_t)(fr_rng_uniform(r) * 4294967296.0);
    return hi << 32 | lo;
}

static fr_tensor *key_tensor(uint64_t seed, int64_t step, int64_t micro)
{
    int64_t v[3] = {(int64_t)seed, step, micro};
    return tt_ints(FR_I64, 3, v);
}

/* KeyedDropout(x, key) with ratio p and stream on the CPU; the output (caller frees). */
static fr_tensor *run_keyed(fr_tensor *x, fr_tensor *key, float p, uint64_t stream)
{
    fr_tensor *ins[2] = {x, key};
    tnode t;
    tn_init_domain(&t, "ai.fp8run", "KeyedDropout", 1, 2, ins, 0u, 1);
    TN_ATTR(&t, float, "ratio", p);
    TN_ATTR(&t, int, "seed", (int64_t)stream);
    FR_ASSERT_OK(tn_run(&t));
    fr_tensor *y = t.out[0];
    t.out[0] = NULL;
    tn_free(&t);
    return y;
}

/* ---- the op ---- */

static void test_kept_fraction(void)
{
    fr_rng r = fr_test_rng("dropout_stats");
    const int64_t n = (int64_t)1 << 18;
    int64_t d[2] = {512, n / 512};
    fr_tensor *x = tt_new(FR_F32, 2, d);
    for (int64_t i = 0; i < n; i++) ((float *)x->data)[i] = 1.0f;
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        uint64_t seed = fresh_u64(&r), stream = fresh_u64(&r);
        int64_t step = tt_rand_int(&r, 0, 100000);
        fr_tensor *k0 = key_tensor(seed, step, 0), *k1 = key_tensor(seed, step + 1, 0);
        fr_tensor *y0 = run_keyed(x, k0, ps[k], stream), *y1 = run_keyed(x, k1, ps[k], stream);
        int64_t kept = 0, both = 0;
        for (int64_t i = 0; i < n; i++) {
            int a = ((float *)y0->data)[i] != 0.0f, b = ((float *)y1->data)[i] != 0.0f;
            kept += a;
            both += a && b;
        }
        const double q = 1.0 - ps[k], sd = sqrt(n * q * (1 - q));
        const double sd2 = sqrt(n * q * q * (1 - q * q));
        printf("\n  p %.1f: kept %lld of %lld (expected %.0f +- %.0f), both steps %lld (expected %.0f) ", ps[k],
               (long long)kept, (long long)n, n * q, sd, (long long)both, n * q * q);
        CU_ASSERT(fabs((double)kept - n * q) <= 5 * sd);
        CU_ASSERT(fabs((double)both - n * q * q) <= 5 * sd2); /* the two steps' masks independent */
        fr_tensor_free(y0);
        fr_tensor_free(y1);
        fr_tensor_free(k0);
        fr_tensor_free(k1);
    }
    fr_tensor_free(x);
}

static double elem(const fr_tensor *t, int64_t i) { return fr_tensor_get_f64(t, i); }

static void test_exact_values(void)
{
    fr_rng r = fr_test_rng("dropout_exact");
    const fr_dtype dts[4] = {FR_F32, FR_F64, FR_F16, FR_BF16};
    int64_t d[3] = {3, 7, 29};
    const int64_t n = 3 * 7 * 29;
    for (int di = 0; di < 4; di++) {
        const float p = (float)(0.05 + 0.9 * fr_rng_uniform(&r));
        const uint64_t seed = fresh_u64(&r), stream = fresh_u64(&r);
        const int64_t step = tt_rand_int(&r, 0, 1000), micro = tt_rand_int(&r, 0, 4);
        fr_tensor *x = tt_new(dts[di], 3, d), *key = key_tensor(seed, step, micro);
        for (int64_t i = 0; i < n; i++) {
            const double v = 2.0 * fr_rng_normal(&r);
            switch (dts[di]) {
            case FR_F32: ((float *)x->data)[i] = (float)v; break;
            case FR_F64: ((double *)x->data)[i] = v; break;
            case FR_F16: ((uint16_t *)x->data)[i] = fr_f32_to_f16((float)v); break;
            default: ((uint16_t *)x->data)[i] = fr_f32_to_bf16((float)v); break;
            }
        }
        fr_tensor *y = run_keyed(x, key, p, stream);
        CU_ASSERT_EQUAL_FATAL(y->dtype, dts[di]);
        const uint64_t nk = fr_dropout_node_key(seed, step, micro, stream);
        const uint32_t thr = fr_dropout_threshold(p);
        const float s = (float)(1.0 / (1.0 - (double)p));
        int64_t bad = 0, kept = 0;
        for (int64_t i = 0; i < n; i++) {
            const int keep = fr_dropout_keep(nk, i, thr);
            double xv = elem(x, i), yv = elem(y, i), want;
            switch (dts[di]) {
            case FR_F32: want = (float)xv * s; break;
            case FR_F64: want = xv * (1.0 / (1.0 - (double)p)); break;
            case FR_F16: want = fr_f16_to_f32(fr_f32_to_f16((float)xv * s)); break;
            default: want = fr_bf16_to_f32(fr_f32_to_bf16((float)xv * s)); break;
            }
            kept += keep;
            if (keep ? yv != want : yv != 0.0) bad++;
            /* the kept value is x / (1 - p) up to the rounding of the scale and the product */
            const double ulp = dts[di] == FR_F64   ? 1e-15
                               : dts[di] == FR_F32 ? 2.4e-7
                               : dts[di] == FR_F16 ? 2e-3
                                                   : 1.6e-2;
            const double tiny = dts[di] == FR_F16 ? 6e-8 : 0.0; /* float16 subnormals: absolute */
            if (keep && fabs(yv - xv / (1.0 - (double)p)) > ulp * fabs(xv / (1.0 - (double)p)) + tiny) bad++;
        }
        if (bad) printf("\n  %s p %g: %lld elements wrong", fr_dtype_name(dts[di]), (double)p, (long long)bad);
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(kept > 0 && kept < n);
        fr_tensor_free(y);
        /* p = 0: the identity, bit for bit */
        y = run_keyed(x, key, 0.0f, stream);
        CU_ASSERT_EQUAL(memcmp(y->data, x->data, x->nbytes), 0);
        fr_tensor_free(y);
        fr_tensor_free(x);
        fr_tensor_free(key);
    }
}

static void test_gradient(void)
{
    fr_rng r = fr_test_rng("dropout_grad");
    fr_graph *g = fr_gc_new_graph(18);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
    const int64_t xd[2] = {6, 9}, kd[1] = {3};
    const int64_t kv[3] = {(int64_t)fresh_u64(&r), tt_rand_int(&r, 0, 500), 1};
    int x = fr_gc_add_input(g, &r, "x", FR_F64, 2, xd, NULL);
    int key = fr_gc_add_input(g, &r, "key", FR_I64, 1, kd, kv);
    int in[2] = {x, key}, y;
    int nid = fr_gc_node(g, "KeyedDropout", "ai.fp8run", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "ratio", 0.4f));
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "seed", 12345));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    fr_gc_check(g, &r, y, 1, &x, "KeyedDropout (x)", 1e-7);
    fr_graph_free(g);

    /* the backward is KeyedDropout(dy, key) with the forward's attributes: dx = dy * mask * s */
    g = fr_gc_new_graph(18);
    FR_ASSERT_OK(fr_graph_import_opset(g, "ai.fp8run", 1));
    x = fr_gc_add_input(g, &r, "x", FR_F32, 2, xd, NULL);
    key = fr_gc_add_input(g, &r, "key", FR_I64, 1, kd, kv);
    in[0] = x;
    in[1] = key;
    nid = fr_gc_node(g, "KeyedDropout", "ai.fp8run", 2, in, 1, &y);
    FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "ratio", 0.4f));
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[nid], "seed", 777));
    FR_ASSERT_OK(fr_node_infer(g, nid));
    double dy[54];
    for (int i = 0; i < 54; i++) dy[i] = fr_rng_normal(&r);
    int gx = -1;
    fr_tensor **tv = fr_gc_backprop(g, y, dy, 1, &x, &gx);
    CU_ASSERT_FATAL(tv != NULL && gx >= 0);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "KeyedDropout"), 2);
    const fr_node *bn = &g->nodes[g->values[gx].producer];
    float ratio;
    uint64_t stream;
    FR_ASSERT_OK(fr_keyed_dropout_params(bn, &ratio, &stream));
    CU_ASSERT(strcmp(bn->op_type, "KeyedDropout") == 0 && bn->inputs[1] == key && ratio == 0.4f && stream == 777);
    const fr_tensor *dx = fr_gc_value(g, tv, gx), *yt = fr_gc_value(g, tv, y);
    const uint64_t nk = fr_dropout_node_key((uint64_t)kv[0], kv[1], kv[2], 777);
    const float s = fr_dropout_scale(0.4f);
    int bad = 0;
    for (int i = 0; i < 54; i++) {
        const int keep = fr_dropout_keep(nk, i, fr_dropout_threshold(0.4f));
        float want = (float)((float)dy[i] * (keep ? s : 0.0f));
        bad += ((const float *)dx->data)[i] != want;
        bad += (((const float *)yt->data)[i] != 0.0f) != keep; /* the forward's mask (x is never 0) */
    }
    CU_ASSERT_EQUAL(bad, 0);
    fr_gc_free_tensors(g, tv);
    free(tv);
    fr_graph_free(g);
}

static void test_determinism(void)
{
    fr_rng r = fr_test_rng("dropout_determinism");
    int64_t d[2] = {16, 64};
    fr_tensor *x = tt_rand_uniform(&r, FR_F32, 2, d, 0.5, 1.5); /* no zeros: y == 0 means dropped */
    const uint64_t seed = fresh_u64(&r), stream = fresh_u64(&r);
    const int64_t step = tt_rand_int(&r, 0, 1 << 20);
    fr_tensor *k = key_tensor(seed, step, 0);
    fr_tensor *a = run_keyed(x, k, 0.3f, stream), *b = run_keyed(x, k, 0.3f, stream);
    CU_ASSERT_EQUAL(memcmp(a->data, b->data, a->nbytes), 0);
    fr_tensor_free(b);
    /* another step, micro-batch, run seed, node stream: another mask */
    fr_tensor *keys[3] = {key_tensor(seed, step + 1, 0), key_tensor(seed, step, 1), key_tensor(seed ^ 1, step, 0)};
    for (int v = 0; v < 4; v++) {
        fr_tensor *o = v < 3 ? run_keyed(x, keys[v], 0.3f, stream) : run_keyed(x, k, 0.3f, stream + 1);
        int differ = 0;
        for (int64_t i = 0; i < 16 * 64; i++)
            differ += (((float *)a->data)[i] == 0.0f) != (((float *)o->data)[i] == 0.0f);
        CU_ASSERT(differ > 100); /* independent masks at p 0.3 differ in 42% of 1024 places */
        fr_tensor_free(o);
        if (v < 3) fr_tensor_free(keys[v]);
    }
    fr_tensor_free(a);
    fr_tensor_free(k);
    fr_tensor_free(x);
}

static void test_refusals(void)
{
    int64_t d[1] = {8}, two[2] = {1, 2};
    fr_tensor *x = tt_new(FR_F32, 1, d), *xi = tt_new(FR_I32, 1, d), *k = key_tensor(1, 2, 3);
    fr_tensor *k2 = tt_ints(FR_I64, 2, two), *ki = tt_new(FR_I32, 1, (int64_t[]){3});
    struct {
        fr_tensor *x, *key;
        float ratio;
        fr_status want;
        const char *msg;
    } cases[] = {
        {x, k2, 0.5f, FR_ERR_SHAPE, "key"},     {x, ki, 0.5f, FR_ERR_SHAPE, "key"},
        {x, k, 1.0f, FR_ERR_GRAPH, "ratio"},    {x, k, -0.1f, FR_ERR_GRAPH, "ratio"},
        {xi, k, 0.5f, FR_ERR_UNSUPPORTED, "int32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fr_tensor *ins[2] = {cases[i].x, cases[i].key};
        tnode t;
        tn_init_domain(&t, "ai.fp8run", "KeyedDropout", 1, 2, ins, 0u, 1);
        TN_ATTR(&t, float, "ratio", cases[i].ratio);
        CU_ASSERT_EQUAL(tn_run(&t), cases[i].want);
        tn_assert_error(cases[i].msg);
        tn_free(&t);
    }
    fr_tensor_free(x);
    fr_tensor_free(xi);
    fr_tensor_free(k);
    fr_tensor_free(k2);
    fr_tensor_free(ki);
}

/* ---- the dropout pass ---- */

enum { M_INIT, M_CONST_NODE, M_FALSE, M_OPSET6, M_OPSET10, M_RATIO0, M_RATIO_INPUT, M_MASK_READ, M_DEFAULT_RATIO };

/* y = Dropout(x [4, 8]) in the form `mode`; the graph input x and output y. */
static fr_graph *dropout_graph(int mode)
{
    const int64_t opset = mode == M_OPSET6 ? 6 : mode == M_OPSET10 ? 10 : 13;
    fr_graph *g = fr_gc_new_graph(opset);
    int64_t d[2] = {4, 8};
    int x, y, m, ratio = -1, tm = -1, nid;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    fr_value_set_shape(&g->values[x], FR_F32, 2, d);
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    FR_ASSERT_OK(fr_graph_add_value(g, "y", &y));
    FR_ASSERT_OK(fr_graph_add_value(g, "mask", &m));
    if (opset >= 12) {
        FR_ASSERT_OK(fr_graph_add_value(g, "ratio", &ratio));
        FR_ASSERT_OK(fr_graph_add_value(g, "training_mode", &tm));
        fr_tensor *rt = tt_scalar(FR_F32, mode == M_RATIO0 ? 0.0 : 0.25), *tt = tt_new(FR_BOOL, 0, NULL);
        *(uint8_t *)tt->data = mode != M_FALSE;
        if (mode == M_CONST_NODE) { /* as torch.onnx writes them: Constant nodes */
            int c;
            FR_ASSERT_OK(fr_graph_add_node(g, "Constant", "", "c_ratio", 0, NULL, 1, &ratio, &c));
            FR_ASSERT_OK(fr_node_set_attr_tensor(&g->nodes[c], "value", rt));
            FR_ASSERT_OK(fr_graph_add_node(g, "Constant", "", "c_tm", 0, NULL, 1, &tm, &c));
            FR_ASSERT_OK(fr_node_set_attr_tensor(&g->nodes[c], "value", tt));
            fr_tensor_free(rt);
            fr_tensor_free(tt);
        } else {
            if (mode == M_RATIO_INPUT) {
                fr_value_set_shape(&g->values[ratio], FR_F32, 0, NULL);
                FR_ASSERT_OK(fr_graph_mark_input(g, ratio));
                fr_tensor_free(rt);
            } else {
                FR_ASSERT_OK(fr_graph_set_initializer(g, ratio, rt));
                g->values[ratio].flags &= ~FR_VAL_PARAM; /* as import marks Dropout's inputs */
            }
            FR_ASSERT_OK(fr_graph_set_initializer(g, tm, tt));
        }
        if (mode == M_DEFAULT_RATIO) ratio = -1;
    }
    int ins[3] = {x, ratio, tm}, outs[2] = {y, m};
    FR_ASSERT_OK(fr_graph_add_node(g, "Dropout", "", "drop", opset >= 12 ? 3 : 1, ins, 2, outs, &nid));
    if (opset < 12) FR_ASSERT_OK(fr_node_set_attr_float(&g->nodes[nid], "ratio", 0.25f));
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    if (mode == M_MASK_READ) FR_ASSERT_OK(fr_graph_mark_output(g, m));
    return g;
}

static void test_pass(void)
{
    fr_rng r = fr_test_rng("dropout_pass");
    const struct {
        int mode, want;
        float ratio;
    } cases[] = {
        {M_INIT, 1, 0.25f},  {M_CONST_NODE, 1, 0.25f}, {M_OPSET6, 1, 0.25f},      {M_DEFAULT_RATIO, 1, 0.5f},
        {M_FALSE, 0, 0},     {M_OPSET10, 0, 0},         {M_RATIO0, 0, 0},          {M_RATIO_INPUT, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fr_graph *g = dropout_graph(cases[c].mode);
        int n = -1;
        FR_ASSERT_OK(fr_dropout_train(g, &n));
        CU_ASSERT_EQUAL(n, cases[c].want);
        CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "KeyedDropout"), cases[c].want);
        if (cases[c].want == 0) {
            CU_ASSERT_EQUAL(fr_graph_find_value(g, FR_DROPOUT_KEY_INPUT), -1);
            fr_graph_free(g);
            continue;
        }
        /* prepared and run: y = x * mask / (1 - p), the mask the key's (named after the node) */
        int key = fr_graph_find_value(g, FR_DROPOUT_KEY_INPUT);
        CU_ASSERT_FATAL(key >= 0 && (g->values[key].flags & FR_VAL_INPUT));
        FR_ASSERT_OK(fr_prepare_forward(g, NULL, NULL));
        const fr_node *kn = NULL;
        for (int i = 0; i < g->n_nodes; i++)
            if (strcmp(g->nodes[i].op_type, "KeyedDropout") == 0) kn = &g->nodes[i];
        CU_ASSERT_FATAL(kn != NULL);
        float ratio;
        uint64_t stream;
        FR_ASSERT_OK(fr_keyed_dropout_params(kn, &ratio, &stream));
        CU_ASSERT_EQUAL(ratio, cases[c].ratio);
        CU_ASSERT_STRING_EQUAL(kn->name, "drop");
        int64_t d[2] = {4, 8};
        fr_tensor *x = tt_rand_uniform(&r, FR_F32, 2, d, 0.5, 1.5);
        const uint64_t seed = fresh_u64(&r);
        fr_tensor *k = key_tensor(seed, 3, 0);
        fr_exec *e = NULL;
        FR_ASSERT_OK(fr_exec_new(g, &e));
        FR_ASSERT_OK(fr_exec_set_input(e, "x", x));
        FR_ASSERT_OK(fr_exec_set_input(e, FR_DROPOUT_KEY_INPUT, k));
        FR_ASSERT_OK(fr_exec_run(e));
        const fr_tensor *y = fr_exec_output(e, "y");
        CU_ASSERT_FATAL(y != NULL);
        const uint64_t nk = fr_dropout_node_key(seed, 3, 0, stream);
        const float s = fr_dropout_scale(ratio);
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            float xv = ((float *)x->data)[i];
            bad += ((const float *)y->data)[i] != xv * (fr_dropout_keep(nk, i, fr_dropout_threshold(ratio)) ? s : 0.0f);
        }
        CU_ASSERT_EQUAL(bad, 0);
        fr_exec_free(e);
        /* the eval strip: y is a graph output, so its node stays with ratio 0 (the identity) */
        int ns = -1;
        FR_ASSERT_OK(fr_dropout_strip(g, &ns));
        CU_ASSERT_EQUAL(ns, 1);
        FR_ASSERT_OK(fr_exec_new(g, &e));
        FR_ASSERT_OK(fr_exec_set_input(e, "x", x));
        FR_ASSERT_OK(fr_exec_set_input(e, FR_DROPOUT_KEY_INPUT, k));
        FR_ASSERT_OK(fr_exec_run(e));
        CU_ASSERT_EQUAL(memcmp(fr_exec_output(e, "y")->data, x->data, x->nbytes), 0);
        fr_exec_free(e);
        fr_tensor_free(x);
        fr_tensor_free(k);
        fr_graph_free(g);
    }
    /* a read mask output is refused, naming the node */
    fr_graph *g = dropout_graph(M_MASK_READ);
    int n;
    CU_ASSERT_EQUAL(fr_dropout_train(g, &n), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'drop'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "mask"));
    fr_graph_free(g);
    /* inference keeps refusing training mode (fp8run run), with a message saying where it trains */
    g = dropout_graph(M_INIT);
    CU_ASSERT_EQUAL(fr_prepare_forward(g, NULL, NULL), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fp8run train"));
    fr_graph_free(g);
}

/* The strip of a KeyedDropout read by another node: its reader reads x, the key stops being an input. */
static void test_strip(void)
{
    fr_graph *g = fr_gc_new_graph(18);
    int64_t d[1] = {5};
    int x, y, z, nid;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    fr_value_set_shape(&g->values[x], FR_F32, 1, d);
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    FR_ASSERT_OK(fr_dropout_add(g, x, 0.5, "d", "xd", &y));
    FR_ASSERT_OK(fr_graph_add_value(g, "z", &z));
    int in[1] = {y};
    FR_ASSERT_OK(fr_graph_add_node(g, "Neg", "", "neg", 1, in, 1, &z, &nid));
    FR_ASSERT_OK(fr_graph_mark_output(g, z));
    CU_ASSERT_EQUAL(g->n_inputs, 2);
    CU_ASSERT_NOT_EQUAL(fr_dropout_add(g, x, 1.0, "d2", "xd2", &y), FR_OK); /* p must be in (0, 1) */
    int n = 0;
    FR_ASSERT_OK(fr_dropout_strip(g, &n));
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(fr_gc_count_nodes(g, "KeyedDropout"), 0);
    CU_ASSERT_EQUAL(g->n_inputs, 1);
    CU_ASSERT_EQUAL(g->nodes[0].inputs[0], x);
    fr_graph_free(g);
}

/* ---- the trainer ---- */

static const fr_llama_config k_llama = {
    .d = 32, .layers = 1, .heads = 2, .kv_heads = 2, .ffn = 48, .vocab = 64, .max_seq = 16, .seed = 3};

/* The generated Llama with logits = Dropout(logits', 0.2, training_mode) (opset 13 initializers). */
static fr_graph *llama_with_dropout(int training)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &g));
    if (!g) return NULL;
    int out = g->outputs[0], pre, ratio, tm, nid;
    FR_ASSERT_OK(fr_graph_add_value(g, "logits_before_dropout", &pre));
    g->values[pre].dtype = g->values[out].dtype;
    int p = g->values[out].producer;
    for (int o = 0; o < g->nodes[p].n_outputs; o++)
        if (g->nodes[p].outputs[o] == out) g->nodes[p].outputs[o] = pre;
    g->values[pre].producer = p;
    FR_ASSERT_OK(fr_graph_add_value(g, "dropout_ratio", &ratio));
    FR_ASSERT_OK(fr_graph_set_initializer(g, ratio, tt_scalar(FR_F32, 0.2)));
    g->values[ratio].flags &= ~FR_VAL_PARAM;
    fr_tensor *tt = tt_new(FR_BOOL, 0, NULL);
    *(uint8_t *)tt->data = (uint8_t)training;
    FR_ASSERT_OK(fr_graph_add_value(g, "dropout_training", &tm));
    FR_ASSERT_OK(fr_graph_set_initializer(g, tm, tt));
    int ins[3] = {pre, ratio, tm};
    FR_ASSERT_OK(fr_graph_add_node(g, "Dropout", "", "logits_dropout", 3, ins, 1, &out, &nid));
    FR_ASSERT_OK(fr_graph_toposort(g));
    return g;
}

static void windows(fr_rng *r, int64_t *w, int n)
{
    for (int i = 0; i < n; i++) w[i] = tt_rand_int(r, 0, k_llama.vocab - 1);
}

/* Losses of 4 steps, and (first) the eval loss before the first step, the train loss of it.
 * compiled: train the graph `fp8run compile` writes (reloaded) instead. */
static void train4c(fr_graph *g, uint64_t seed, const int64_t *w, double *loss, double *eval0, int compiled,
                    const char *precision)
{
    fr_train_options o;
    fr_ft_train_options(&o); /* batch 2 x seq 16 */
    o.seed = seed;
    o.precision = precision;
    fr_trainer *t = NULL;
    fr_graph *cg = NULL;
    if (compiled) {
        char dir[512], path[600];
        snprintf(path, sizeof path, "%s/dropout.fbs", fr_test_tmpdir(dir, sizeof dir));
        FR_ASSERT_OK(fr_train_compile(g, &o, path));
        FR_ASSERT_OK(fr_onnx_load_file(path, &cg));
        CU_ASSERT_PTR_NOT_NULL_FATAL(cg);
        remove(path);
        remove(dir);
        g = cg;
    }
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    FR_ASSERT_OK(fr_trainer_eval(t, w, eval0));
    for (int s = 0; s < 4; s++) {
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &st));
        loss[s] = st.loss;
    }
    fr_trainer_free(t);
    fr_graph_free(cg);
}

static void train4(fr_graph *g, uint64_t seed, const int64_t *w, double *loss, double *eval0)
{
    train4c(g, seed, w, loss, eval0, 0, "fp32");
}

static void test_trainer_onnx_dropout(void)
{
    fr_rng r = fr_test_rng("dropout_trainer");
    int64_t w[2 * 17];
    windows(&r, w, 2 * 17);
    fr_graph *on = llama_with_dropout(1), *off = llama_with_dropout(0);
    CU_ASSERT_FATAL(on && off);
    const uint64_t seed = fresh_u64(&r);
    double a[4], b[4], c[4], p[4], ea, eb, ec, ep;
    train4(on, seed, w, a, &ea);
    train4(on, seed, w, b, &eb);
    train4(on, seed + 1, w, c, &ec);
    train4(off, seed, w, p, &ep);
    /* the eval graph has no dropout: the same loss with training_mode on and off */
    CU_ASSERT_EQUAL(ea, ep);
    CU_ASSERT_EQUAL(ea, ec);
    /* inference mode: the first step's loss is the eval loss; training mode: not */
    CU_ASSERT_EQUAL(p[0], ep);
    CU_ASSERT(a[0] != ea && isfinite(a[0]));
    printf("\n  eval %.6f, first step with dropout %.6f (without %.6f) ", ea, a[0], p[0]);
    /* the same seed, the same masks; another seed, other masks */
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT(a[0] != c[0]);
    /* the compiled graph (.fbs, bf16) keeps the dropout and its key input: the same losses */
    train4c(on, seed, w, a, &ea, 0, "bf16");
    train4c(on, seed, w, b, &eb, 1, "bf16");
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT_EQUAL(ea, eb);
    CU_ASSERT(a[0] != ea);
    fr_graph_free(on);
    fr_graph_free(off);
}

/* The key the trainer feeds: {seed, step, micro-batch}, the micro-batch counting up within a
 * step (gradient accumulation) and from 0 in the next. */
static void test_trainer_key(void)
{
    fr_graph *g = llama_with_dropout(1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o;
    fr_ft_train_options(&o);
    o.seed = 99;
    o.grad_accum = 2;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int k = -1;
    for (int i = 0; i < t->n_inputs; i++)
        if (t->inputs[i].feed == TR_FEED_DROPOUT_KEY) k = i;
    CU_ASSERT_FATAL(k >= 0);
    /* the eval graph: the dropout writes the graph output logits, so it stays with ratio 0 */
    int n_eval = 0;
    for (int i = 0; i < t->eval_g->n_nodes; i++) {
        const fr_node *n = &t->eval_g->nodes[i];
        float ratio = -1;
        uint64_t stream;
        if (strcmp(n->op_type, "KeyedDropout") != 0) continue;
        n_eval++;
        FR_ASSERT_OK(fr_keyed_dropout_params(n, &ratio, &stream));
        CU_ASSERT_EQUAL(ratio, 0.0f);
    }
    CU_ASSERT_EQUAL(n_eval, 1);
    fr_rng r = fr_test_rng("dropout_key");
    int64_t w[2 * 2 * 17];
    windows(&r, w, 2 * 2 * 17);
    const int64_t *key = t->inputs[k].t->data;
    FR_ASSERT_OK(tr_fill_inputs(t, t->inputs, t->n_inputs, w));
    CU_ASSERT(key[0] == 99 && key[1] == 0 && key[2] == 0);
    FR_ASSERT_OK(tr_fill_inputs(t, t->inputs, t->n_inputs, w));
    CU_ASSERT(key[1] == 0 && key[2] == 1);
    fr_train_stats st;
    FR_ASSERT_OK(fr_trainer_step(t, w, 2, &st)); /* step 0 again: micro-batches 2 and 3 */
    CU_ASSERT(key[1] == 0 && key[2] == 3);
    FR_ASSERT_OK(fr_trainer_step(t, w, 2, &st));
    CU_ASSERT(key[1] == 1 && key[2] == 1);
    fr_trainer_free(t);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"kept fraction within the binomial bound", test_kept_fraction},
    {"exact values, every float dtype", test_exact_values},
    {"gradient: central differences, the backward's mask", test_gradient},
    {"determinism", test_determinism},
    {"refusals", test_refusals},
    {"the dropout pass on ONNX Dropout", test_pass},
    {"the eval strip", test_strip},
    {"an ONNX training-mode Dropout trains", test_trainer_onnx_dropout},
    {"the trainer's key", test_trainer_key},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"dropout", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
