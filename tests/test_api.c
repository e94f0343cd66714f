/* The public C API (include/fp8run.h):
 *  - every call's error paths (NULL handles, wrong struct sizes, wrong names and sizes, bad
 *    files, unknown options, token ids out of range) return a status and a message, never crash;
 *  - a session whose step fails inside the trainer refuses later work with FP8RUN_ERR_STATE;
 *  - models: inspection (symbolic dims), parameters, compile reports (fusion, boundaries);
 *  - sessions: int32 == int64 windows, parameters round-trip (fused ones too), checkpoint
 *    save/load resumes bit-exactly with the data loader, export;
 *  - the data loader, checkpoint info, the log callback.
 * Tiny models are built here with the IR and handed to the API as ONNX bytes, so the suite
 * does not depend on the fixture models' gradient rules; one test also trains llama_tiny. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "graph/onnx_io.h"
#include "tests/harness.h"

/* ---- helpers ---- */

#define API_OK(expr)                                                                                 \
    do {                                                                                             \
        fp8run_status s__ = (expr);                                                                  \
        if (s__ != FP8RUN_OK) fprintf(stderr, "\n  %s -> %d: %s\n", #expr, (int)s__, fp8run_last_error()); \
        CU_ASSERT_EQUAL_FATAL(s__, FP8RUN_OK);                                                       \
    } while (0)

/* expr fails with `want`, and both this thread's message and `handle_msg` (when non-NULL,
 * evaluated after the call) hold text containing `needle`. */
#define API_ERR(expr, want, needle) api_err_check((expr), (want), (needle), #expr, __LINE__)
#define API_ERR_H(expr, want, needle, handle_msg)                                                    \
    do {                                                                                             \
        api_err_check((expr), (want), (needle), #expr, __LINE__);                                    \
        api_msg_check((handle_msg), (needle), #expr, __LINE__);                                      \
    } while (0)

static void api_msg_check(const char *msg, const char *needle, const char *what, int line)
{
    int ok = msg && msg[0] && (!needle || strstr(msg, needle));
    if (!ok) fprintf(stderr, "\n  line %d: %s: message '%s' lacks '%s'\n", line, what, msg ? msg : "(null)", needle);
    CU_ASSERT(ok);
}

static void api_err_check(fp8run_status got, fp8run_status want, const char *needle, const char *what, int line)
{
    if (got != want)
        fprintf(stderr, "\n  line %d: %s -> %d (%s), wanted %d: %s\n", line, what, (int)got, fp8run_status_name(got),
                (int)want, fp8run_last_error());
    CU_ASSERT_EQUAL(got, want);
    api_msg_check(fp8run_last_error(), needle, what, line);
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static const char *tmp_path(char *buf, size_t n, const char *dir, const char *name)
{
    if (snprintf(buf, n, "%s/%s", dir, name) >= (int)n) buf[0] = '\0';
    return buf;
}

/* ---- tiny models (IR -> ONNX bytes) ---- */

static fr_graph *new_graph(void)
{
    fr_graph *g = NULL;
    if (fr_graph_new(&g) != FR_OK) return NULL;
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    g->name = strdup("tiny_api");
    return g;
}

static int add_init(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims)
{
    int vid;
    fr_tensor *t;
    if (fr_graph_add_value(g, name, &vid) != FR_OK) return -1;
    if (fr_tensor_new(dt, rank, dims, name, &t) != FR_OK) return -1;
    if (fr_graph_set_initializer(g, vid, t) != FR_OK) return -1;
    return vid;
}

static float *fdata(fr_graph *g, int vid) { return g->values[vid].constant->data; }

static int node(fr_graph *g, const char *op, const char *out_name, int n_in, const int *in)
{
    int out, nid;
    if (fr_graph_add_value(g, out_name, &out) != FR_OK) return -1;
    if (fr_graph_add_node(g, op, "", out_name, n_in, in, 1, &out, &nid) != FR_OK) return -1;
    return out;
}

static void fill_normal(fr_rng *r, fr_graph *g, int vid, float sd)
{
    fr_rng_fill_normal(r, fdata(g, vid), fr_tensor_numel(g->values[vid].constant), sd);
}

#define TINY_V 11
#define TINY_D 8

/* logits = tanh(tanh(h Wq + h Wk) W1 + h) Wh + b, h = onehot(ids') E, ids' = ids, or
 * Gather(remap, ids) with a remap table of TINY_V - 2 entries when `oob_gather` (ids >= V-2
 * then fail inside the step, after the API's vocabulary check). q/k share h: fused in bf16/fp8. */
static fr_graph *build_tiny(fr_rng *r, int oob_gather)
{
    const int64_t V = TINY_V, D = TINY_D;
    fr_graph *g = new_graph();
    int ids;
    FR_ASSERT_OK(fr_graph_add_value(g, "input_ids", &ids));
    int64_t bt[2] = {-1, -1};
    fr_value_set_shape(&g->values[ids], FR_I64, 2, bt);
    g->values[ids].dim_params[0] = strdup("batch");
    g->values[ids].dim_params[1] = strdup("seq");
    g->values[ids].flags |= FR_VAL_INPUT;
    FR_ASSERT_OK(fr_graph_mark_input(g, ids));
    if (oob_gather) {
        int64_t n = V - 2;
        int remap = add_init(g, "remap", FR_I64, 1, &n);
        for (int64_t i = 0; i < n; i++) ((int64_t *)g->values[remap].constant->data)[i] = (i * 3) % V;
        int in[2] = {remap, ids};
        ids = node(g, "Gather", "ids_remapped", 2, in);
        FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->values[ids].producer], "axis", 0));
    }
    int64_t dv = V, one = 1, de[2] = {V, D}, dd[2] = {D, D}, dh[2] = {D, V};
    int range = add_init(g, "vocab_range", FR_I64, 1, &dv);
    int axes = add_init(g, "unsq_axes", FR_I64, 1, &one);
    for (int64_t i = 0; i < V; i++) ((int64_t *)g->values[range].constant->data)[i] = i;
    ((int64_t *)g->values[axes].constant->data)[0] = 2;
    int E = add_init(g, "embed.weight", FR_F32, 2, de);
    int wq = add_init(g, "q.weight", FR_F32, 2, dd), wk = add_init(g, "k.weight", FR_F32, 2, dd);
    int w1 = add_init(g, "mid.weight", FR_F32, 2, dd), wh = add_init(g, "lm_head.weight", FR_F32, 2, dh);
    int b = add_init(g, "lm_head.bias", FR_F32, 1, &dv);
    fill_normal(r, g, E, 0.8f);
    fill_normal(r, g, wq, 0.35f);
    fill_normal(r, g, wk, 0.35f);
    fill_normal(r, g, w1, 0.35f);
    fill_normal(r, g, wh, 0.35f);
    fill_normal(r, g, b, 0.1f);
    int i0[2] = {ids, axes};
    int u = node(g, "Unsqueeze", "ids3", 2, i0);
    int i1[2] = {u, range};
    int eq = node(g, "Equal", "onehot_b", 2, i1);
    int oh = node(g, "Cast", "onehot", 1, &eq);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->values[oh].producer], "to", FR_F32));
    int i2[2] = {oh, E};
    int h = node(g, "Einsum", "h", 2, i2);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[g->values[h].producer], "equation", "btv,vd->btd"));
    int i3[2] = {h, wq}, i4[2] = {h, wk};
    int q = node(g, "MatMul", "q", 2, i3), k = node(g, "MatMul", "k", 2, i4);
    int i5[2] = {q, k};
    int a = node(g, "Tanh", "a", 1, (int[]){node(g, "Add", "qk", 2, i5)});
    int i6[2] = {a, w1};
    int m = node(g, "MatMul", "m", 2, i6);
    int i7[2] = {m, h};
    int a2 = node(g, "Tanh", "a2", 1, (int[]){node(g, "Add", "res", 2, i7)});
    int i8[2] = {a2, wh};
    int z = node(g, "MatMul", "z", 2, i8);
    int i9[2] = {z, b};
    int logits = node(g, "Add", "logits", 2, i9);
    g->values[logits].flags |= FR_VAL_OUTPUT;
    FR_ASSERT_OK(fr_graph_mark_output(g, logits));
    return g;
}

typedef struct blob {
    void *data;
    size_t len;
} blob;

static blob tiny_bytes(const char *seed_name, int oob_gather)
{
    fr_rng r = fr_test_rng(seed_name);
    fr_graph *g = build_tiny(&r, oob_gather);
    blob b = {NULL, 0};
    if (g && fr_onnx_save_buffer(g, &b.data, &b.len) != FR_OK) fprintf(stderr, "save: %s\n", fr_last_error());
    fr_graph_free(g);
    return b;
}

static fp8run_model *tiny_model(const char *seed_name, int oob_gather)
{
    blob b = tiny_bytes(seed_name, oob_gather);
    fp8run_model *m = NULL;
    if (!b.data || fp8run_model_load_buffer(b.data, b.len, "tiny.onnx", &m) != FP8RUN_OK)
        fprintf(stderr, "tiny model: %s\n", fp8run_last_error());
    free(b.data);
    return m;
}

static fp8run_train_config tiny_config(int64_t B, int64_t T)
{
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = B;
    c.seq_len = T;
    c.lr = 1e-2;
    c.grad_clip = 1.0;
    c.weight_decay = 0.1;
    c.beta2 = 0.95;
    return c;
}

static void random_windows(fr_rng *r, int64_t *w, size_t n, int64_t V)
{
    for (size_t i = 0; i < n; i++) w[i] = (int64_t)(fr_rng_uniform(r) * (double)V) % V;
}

/* ---- version, names ---- */

static void test_version(void)
{
    CU_ASSERT_STRING_EQUAL(fp8run_version(), "0.1.0");
    CU_ASSERT_EQUAL(fp8run_abi_version(), FP8RUN_ABI_VERSION);
    CU_ASSERT_STRING_EQUAL(fp8run_status_name(FP8RUN_OK), "ok");
    CU_ASSERT_STRING_EQUAL(fp8run_status_name(FP8RUN_ERR_UNAVAILABLE), "unavailable");
    CU_ASSERT_STRING_EQUAL(fp8run_status_name(FP8RUN_ERR_STATE), "invalid state");
    CU_ASSERT_STRING_EQUAL(fp8run_status_name((fp8run_status)999), "unknown status");
    CU_ASSERT_STRING_EQUAL(fp8run_dtype_name(FP8RUN_DTYPE_INT64), "int64");
    CU_ASSERT_PTR_NOT_NULL(fp8run_last_error());
}

/* ---- models ---- */

static void test_model_errors(void)
{
    char p[4096];
    fp8run_model *m = (fp8run_model *)&m;
    API_ERR(fp8run_model_load(NULL, &m), FP8RUN_ERR_INVALID_ARG, "no path");
    CU_ASSERT_PTR_NULL(m);
    API_ERR(fp8run_model_load("x.onnx", NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    API_ERR(fp8run_model_load("/nonexistent/model.onnx", &m), FP8RUN_ERR_IO, "/nonexistent/model.onnx");
    API_ERR(fp8run_model_load(fr_fixture(p, sizeof p, "bad/garbage.onnx"), &m), FP8RUN_ERR_PARSE, "garbage.onnx");
    API_ERR(fp8run_model_load(fr_fixture(p, sizeof p, "bad/truncated.onnx"), &m), FP8RUN_ERR_PARSE, "truncated.onnx");
    /* hostile external data: refused, the message names the location */
    CU_ASSERT_NOT_EQUAL(fp8run_model_load(fr_fixture(p, sizeof p, "bad/extdata_dotdot.onnx"), &m), FP8RUN_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "secret.bin"));
    CU_ASSERT_PTR_NULL(m);
    API_ERR(fp8run_model_load_buffer(NULL, 10, NULL, &m), FP8RUN_ERR_INVALID_ARG, "empty buffer");
    API_ERR(fp8run_model_load_buffer("\xff\xff\xff\xff", 4, "junk", &m), FP8RUN_ERR_PARSE, "junk");
    CU_ASSERT_PTR_NULL(m);

    /* NULL handles are safe everywhere */
    fp8run_model_destroy(NULL);
    CU_ASSERT_EQUAL(fp8run_model_input_count(NULL), 0);
    CU_ASSERT_EQUAL(fp8run_model_param_count(NULL), 0);
    CU_ASSERT_EQUAL(fp8run_model_param_elements(NULL), 0);
    CU_ASSERT_PTR_NULL(fp8run_model_path(NULL));
    CU_ASSERT_PTR_NOT_NULL(fp8run_model_error(NULL));
    fp8run_value_info v = {.struct_size = sizeof v};
    float f[4];
    API_ERR(fp8run_model_input(NULL, 0, &v), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_get_param(NULL, "x", f, 4), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_set_param(NULL, "x", f, 4), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_apply_checkpoint(NULL, "x", NULL), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_save(NULL, "x"), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    fp8run_report *r;
    API_ERR(fp8run_model_compile(NULL, NULL, &r), FP8RUN_ERR_INVALID_ARG, "model is NULL");
}

static void test_model_inspect(void)
{
    char p[4096];
    fp8run_model *m;
    API_OK(fp8run_model_load(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &m));
    CU_ASSERT_STRING_EQUAL(fp8run_model_path(m), p);
    CU_ASSERT_EQUAL(fp8run_model_input_count(m), 1);
    CU_ASSERT_EQUAL(fp8run_model_output_count(m), 1);
    fp8run_value_info v = {.struct_size = sizeof v};
    API_OK(fp8run_model_input(m, 0, &v));
    CU_ASSERT_STRING_EQUAL(v.name, "input_ids");
    CU_ASSERT_EQUAL(v.dtype, FP8RUN_DTYPE_INT64);
    CU_ASSERT_EQUAL(v.rank, 2);
    CU_ASSERT_EQUAL(v.dims[0], -1);
    CU_ASSERT_EQUAL(v.numel, -1);
    CU_ASSERT_STRING_EQUAL(v.dim_names[0], "batch");
    CU_ASSERT_STRING_EQUAL(v.dim_names[1], "seq");
    API_OK(fp8run_model_output(m, 0, &v));
    CU_ASSERT_STRING_EQUAL(v.name, "logits");
    CU_ASSERT_EQUAL(v.dtype, FP8RUN_DTYPE_FLOAT32);
    CU_ASSERT_EQUAL(v.rank, 3);
    CU_ASSERT_EQUAL(v.dims[2], 128);
    CU_ASSERT_PTR_NULL(v.dim_names[2]);
    /* 21 trained tensors, 108864 elements (tests/fixtures/train/SOURCE.txt) */
    CU_ASSERT_EQUAL(fp8run_model_param_count(m), 21);
    CU_ASSERT_EQUAL(fp8run_model_param_elements(m), 108864);
    int64_t sum = 0;
    for (int i = 0; i < fp8run_model_param_count(m); i++) {
        API_OK(fp8run_model_param(m, i, &v));
        CU_ASSERT_EQUAL(v.dtype, FP8RUN_DTYPE_FLOAT32);
        sum += v.numel;
    }
    CU_ASSERT_EQUAL(sum, 108864);

    /* errors: index, info struct */
    API_ERR_H(fp8run_model_input(m, 1, &v), FP8RUN_ERR_RANGE, "outside [0, 1)", fp8run_model_error(m));
    API_ERR(fp8run_model_output(m, -1, &v), FP8RUN_ERR_RANGE, "outside");
    API_ERR(fp8run_model_param(m, 21, &v), FP8RUN_ERR_RANGE, "outside [0, 21)");
    API_ERR(fp8run_model_input(m, 0, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    fp8run_value_info small = {.struct_size = 4};
    API_ERR(fp8run_model_input(m, 0, &small), FP8RUN_ERR_INVALID_ARG, "struct_size is 4");
    /* a newer caller's bigger struct: the tail is left alone */
    struct {
        fp8run_value_info v;
        uint64_t later;
    } big;
    memset(&big, 0, sizeof big);
    big.v.struct_size = sizeof big;
    big.later = 0xdeadbeef;
    API_OK(fp8run_model_input(m, 0, &big.v));
    CU_ASSERT_EQUAL(big.later, 0xdeadbeef);
    CU_ASSERT_STRING_EQUAL(big.v.name, "input_ids");
    fp8run_model_destroy(m);
}

static void test_model_params(void)
{
    fp8run_model *m = tiny_model("model_params", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NULL(fp8run_model_path(m)); /* from memory */
    CU_ASSERT_EQUAL(fp8run_model_param_count(m), 6);
    float e[TINY_V * TINY_D], e2[TINY_V * TINY_D];
    API_OK(fp8run_model_get_param(m, "embed.weight", e, TINY_V * TINY_D));
    for (int i = 0; i < TINY_V * TINY_D; i++) e[i] += 1.0f;
    API_OK(fp8run_model_set_param(m, "embed.weight", e, TINY_V * TINY_D));
    API_OK(fp8run_model_get_param(m, "embed.weight", e2, TINY_V * TINY_D));
    CU_ASSERT_EQUAL(memcmp(e, e2, sizeof e), 0);
    API_ERR_H(fp8run_model_get_param(m, "nope", e, 4), FP8RUN_ERR_INVALID_ARG, "'nope'", fp8run_model_error(m));
    API_ERR_H(fp8run_model_get_param(m, "embed.weight", e, 5), FP8RUN_ERR_SHAPE, "88 elements, the buffer 5",
              fp8run_model_error(m));
    API_ERR(fp8run_model_set_param(m, "embed.weight", NULL, 88), FP8RUN_ERR_INVALID_ARG, "buffer is NULL");
    API_ERR(fp8run_model_get_param(m, NULL, e, 88), FP8RUN_ERR_INVALID_ARG, "name is NULL");
    /* int64 initializers are no parameters */
    API_ERR(fp8run_model_get_param(m, "vocab_range", e, 11), FP8RUN_ERR_INVALID_ARG, "vocab_range");
    API_ERR(fp8run_model_apply_checkpoint(m, "/nonexistent.ckpt", NULL), FP8RUN_ERR_IO, "/nonexistent.ckpt");
    API_ERR(fp8run_model_save(m, ""), FP8RUN_ERR_INVALID_ARG, "no path");
    API_ERR(fp8run_model_save(m, "/nonexistent/dir/x.onnx"), FP8RUN_ERR_IO, "/nonexistent/dir");

    /* save + load again: same parameters */
    char dir[4096], p[4096];
    fr_test_tmpdir(dir, sizeof dir);
    API_OK(fp8run_model_save(m, tmp_path(p, sizeof p, dir, "tiny.onnx")));
    fp8run_model *m2;
    API_OK(fp8run_model_load(p, &m2));
    CU_ASSERT_STRING_EQUAL(fp8run_model_path(m2), p);
    API_OK(fp8run_model_get_param(m2, "embed.weight", e2, TINY_V * TINY_D));
    CU_ASSERT_EQUAL(memcmp(e, e2, sizeof e), 0);
    fp8run_model_destroy(m2);
    fp8run_model_destroy(m);
}

/* ---- configuration and compile reports ---- */

static void test_config(void)
{
    fp8run_train_config c;
    API_ERR(fp8run_train_config_init(NULL, sizeof c), FP8RUN_ERR_INVALID_ARG, "cfg is NULL");
    API_ERR(fp8run_train_config_init(&c, 8), FP8RUN_ERR_INVALID_ARG, "size 8");
    API_OK(fp8run_train_config_init(&c, sizeof c));
    CU_ASSERT_EQUAL(c.struct_size, sizeof c);
    CU_ASSERT_STRING_EQUAL(c.precision, "fp32");
    CU_ASSERT_EQUAL(c.batch, 1);
    CU_ASSERT_EQUAL(c.pad_multiple, 16);
    CU_ASSERT(isnan(c.weight_decay));

    fp8run_model *m = tiny_model("config", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_report *r = NULL;
    struct {
        const char *field, *needle;
    } bad[] = {{"precision", "'fp16'"}, {"recipe", "'tensor'"}, {"optimizer", "'lamb'"}, {"lr_schedule", "'step'"},
               {"fp8_format", "'e5m2'"}, {"amax_algo", "'mean'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fp8run_train_config b = c;
        const char *v = bad[i].needle + 1;
        char val[32];
        snprintf(val, sizeof val, "%.*s", (int)strlen(v) - 1, v);
        if (strcmp(bad[i].field, "precision") == 0) b.precision = val;
        if (strcmp(bad[i].field, "recipe") == 0) b.recipe = val;
        if (strcmp(bad[i].field, "optimizer") == 0) b.optimizer = val;
        if (strcmp(bad[i].field, "lr_schedule") == 0) b.lr_schedule = val;
        if (strcmp(bad[i].field, "fp8_format") == 0) b.fp8_format = val;
        if (strcmp(bad[i].field, "amax_algo") == 0) b.amax_algo = val;
        API_ERR_H(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, bad[i].needle, fp8run_model_error(m));
        CU_ASSERT_PTR_NULL(r);
    }
    fp8run_train_config b = c;
    b.precision = NULL;
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "precision is NULL");
    b = c;
    b.batch = 0;
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "batch (0)");
    b = c;
    b.n_dims = 1;
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "n_dims");
    b = c;
    b.lr_schedule = "cosine";
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, NULL);
    b = c;
    b.struct_size = 16;
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "struct_size is 16");
    b = c;
    b.fp8_exclude = "([unclosed";
    b.precision = "fp8";
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "([unclosed");
    b = c;
    b.tokens_input = "no_such_input";
    API_ERR(fp8run_model_compile(m, &b, &r), FP8RUN_ERR_INVALID_ARG, "no_such_input");

    /* a newer header's struct: zero tail accepted, a set unknown field refused */
    struct {
        fp8run_train_config c;
        int64_t later;
    } big;
    API_OK(fp8run_train_config_init(&big.c, sizeof big));
    CU_ASSERT_EQUAL(big.later, 0);
    API_OK(fp8run_model_compile(m, &big.c, &r));
    fp8run_report_destroy(r);
    big.later = 7;
    API_ERR(fp8run_model_compile(m, &big.c, &r), FP8RUN_ERR_UNSUPPORTED, "byte offset");
    fp8run_model_destroy(m);
}

static void test_compile_report(void)
{
    fp8run_model *m = tiny_model("report", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_train_config c = tiny_config(2, 5);
    fp8run_report *r;

    API_OK(fp8run_model_compile(m, &c, &r)); /* fp32: no layers */
    CU_ASSERT_STRING_EQUAL(fp8run_report_precision(r), "fp32");
    CU_ASSERT_EQUAL(fp8run_report_layer_count(r), 0);
    CU_ASSERT_PTR_NOT_NULL(fp8run_report_text(r));
    fp8run_report_destroy(r);

    c.precision = "fp8";
    c.bf16_boundary = 1;
    API_OK(fp8run_model_compile(m, &c, &r));
    CU_ASSERT_STRING_EQUAL(fp8run_report_precision(r), "fp8");
    /* q+k fused (first group: bf16 boundary), mid (fp8), lm_head (last: bf16) */
    CU_ASSERT_EQUAL_FATAL(fp8run_report_layer_count(r), 3);
    CU_ASSERT_EQUAL(fp8run_report_linears(r, "fp8"), 1);
    CU_ASSERT_EQUAL(fp8run_report_linears(r, "bf16"), 3);
    CU_ASSERT_EQUAL(fp8run_report_linears(r, "fp32"), 0);
    CU_ASSERT_EQUAL(fp8run_report_linears(r, "int4"), 0);
    fp8run_layer_info l = {.struct_size = sizeof l};
    API_OK(fp8run_report_layer(r, 0, &l));
    CU_ASSERT_EQUAL(l.n_fused, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(l.weights, "q.weight"));
    CU_ASSERT_PTR_NOT_NULL(strstr(l.weights, "k.weight"));
    CU_ASSERT_STRING_EQUAL(l.precision, "bf16");
    CU_ASSERT_PTR_NOT_NULL(l.why);
    CU_ASSERT_PTR_NULL(l.recipe);
    CU_ASSERT_EQUAL(l.k, TINY_D);
    CU_ASSERT_EQUAL(l.n, 2 * TINY_D);
    API_OK(fp8run_report_layer(r, 1, &l));
    CU_ASSERT_STRING_EQUAL(l.precision, "fp8");
    CU_ASSERT_STRING_EQUAL(l.recipe, "delayed");
    CU_ASSERT_STRING_EQUAL(l.weights, "mid.weight");
    CU_ASSERT_EQUAL(l.pad_multiple, 16);
    CU_ASSERT_EQUAL(l.pad_k, 8);
    CU_ASSERT_EQUAL(l.pad_n, 8);
    API_OK(fp8run_report_layer(r, 2, &l));
    CU_ASSERT_STRING_EQUAL(l.weights, "lm_head.weight");
    CU_ASSERT_EQUAL(l.has_bias, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_report_text(r), "mid.weight"));
    API_ERR(fp8run_report_layer(r, 3, &l), FP8RUN_ERR_RANGE, "outside [0, 3)");
    API_ERR(fp8run_report_layer(NULL, 0, &l), FP8RUN_ERR_INVALID_ARG, "report is NULL");
    API_ERR(fp8run_report_layer(r, 0, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    CU_ASSERT_EQUAL(fp8run_report_skipped_count(r), 0);
    fp8run_skipped_info si = {.struct_size = sizeof si};
    API_ERR(fp8run_report_skipped(r, 0, &si), FP8RUN_ERR_RANGE, "outside");
    fp8run_report_destroy(r);

    /* no fusion, exclude regex, no boundary */
    c.fuse = 0;
    c.bf16_boundary = 0;
    c.fp8_exclude = "^mid";
    c.recipe = "current";
    API_OK(fp8run_model_compile(m, &c, &r));
    CU_ASSERT_EQUAL_FATAL(fp8run_report_layer_count(r), 4);
    CU_ASSERT_EQUAL(fp8run_report_linears(r, "fp8"), 3);
    for (int i = 0; i < 4; i++) {
        API_OK(fp8run_report_layer(r, i, &l));
        CU_ASSERT_EQUAL(l.n_fused, 1);
        if (strcmp(l.weights, "mid.weight") == 0) {
            CU_ASSERT_STRING_EQUAL(l.precision, "bf16");
        } else {
            CU_ASSERT_STRING_EQUAL(l.recipe, "current");
        }
    }
    fp8run_report_destroy(r);
    fp8run_report_destroy(NULL);
    CU_ASSERT_EQUAL(fp8run_report_layer_count(NULL), 0);
    CU_ASSERT_PTR_NULL(fp8run_report_text(NULL));
    fp8run_model_destroy(m);
}

/* ---- sessions ---- */

typedef struct log_rec {
    pthread_mutex_t lock;
    int n;
    char last[512];
    int saw_cpu, saw_cuda;
} log_rec;

static void on_log(void *user, fp8run_log_level level, const char *msg)
{
    log_rec *r = user;
    pthread_mutex_lock(&r->lock);
    r->n++;
    snprintf(r->last, sizeof r->last, "%d %s", (int)level, msg);
    if (strstr(msg, "backend auto: using cpu")) r->saw_cpu = 1;
    if (strstr(msg, "backend auto: using cuda")) r->saw_cuda = 1;
    pthread_mutex_unlock(&r->lock);
}

static void test_session_create(void)
{
    fp8run_model *m = tiny_model("session_create", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_train_config c = tiny_config(2, 4);
    fp8run_session *s = (fp8run_session *)&s;
    API_ERR(fp8run_session_create(NULL, "cpu", &c, &s), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    CU_ASSERT_PTR_NULL(s);
    API_ERR(fp8run_session_create(m, "cpu", &c, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    /* "cuda" works where this build has the backend and a device is present, and says why
     * not everywhere else */
    int have_cuda = 0;
    if (fp8run_session_create(m, "cuda", &c, &s) == FP8RUN_OK) {
        have_cuda = 1;
        CU_ASSERT_STRING_EQUAL(fp8run_session_backend(s), "cuda");
        fp8run_session_destroy(s);
    } else {
        API_ERR(fp8run_session_create(m, "cuda", &c, &s), FP8RUN_ERR_UNAVAILABLE, "'cuda'");
    }
    API_ERR(fp8run_session_create(m, "tpu", &c, &s), FP8RUN_ERR_INVALID_ARG, "'tpu'");
    fp8run_train_config b = c;
    b.seq_len = -3;
    API_ERR(fp8run_session_create(m, "cpu", &b, &s), FP8RUN_ERR_INVALID_ARG, "seq_len (-3)");
    b = c;
    b.logits_output = "nothing";
    API_ERR(fp8run_session_create(m, "cpu", &b, &s), FP8RUN_ERR_INVALID_ARG, "'nothing'");
    b = c;
    const char *dn[1] = {"no_such_dim"};
    int64_t dv[1] = {3};
    b.dim_names = dn;
    b.dim_values = dv;
    b.n_dims = 1;
    API_ERR(fp8run_session_create(m, "cpu", &b, &s), FP8RUN_ERR_INVALID_ARG, "no_such_dim");
    CU_ASSERT_PTR_NULL(s);

    /* auto: cpu, said through the log callback; NULL cfg = defaults */
    log_rec lr = {PTHREAD_MUTEX_INITIALIZER, 0, "", 0, 0};
    fp8run_set_log_callback(on_log, &lr, FP8RUN_LOG_INFO);
    API_OK(fp8run_session_create(m, NULL, NULL, &s));
    CU_ASSERT(have_cuda ? lr.saw_cuda : lr.saw_cpu);
    CU_ASSERT_STRING_EQUAL(fp8run_session_backend(s), have_cuda ? "cuda" : "cpu");
    CU_ASSERT_EQUAL(fp8run_session_batch(s), 1);
    CU_ASSERT_EQUAL(fp8run_session_seq_len(s), 1);
    fp8run_session_destroy(s);
    fp8run_set_log_callback(NULL, NULL, FP8RUN_LOG_DEBUG);
    int n = lr.n;
    API_OK(fp8run_session_create(m, "auto", &c, &s));
    CU_ASSERT_EQUAL(lr.n, n); /* no callback: nothing delivered */
    CU_ASSERT_EQUAL(fp8run_session_vocab(s), TINY_V);
    CU_ASSERT_EQUAL(fp8run_session_grad_accum(s), 1);
    CU_ASSERT_EQUAL(fp8run_session_param_count(s), 6);
    const char *json = fp8run_session_config_json(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(json);
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"model\": null")); /* loaded from memory */
    fp8run_session_destroy(s);

    /* the model may go away: the session has its own copy */
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    fp8run_model_destroy(m);
    int64_t w[2 * 5] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    double loss;
    API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &loss));
    CU_ASSERT(isfinite(loss));
    fp8run_session_destroy(s);

    /* NULL sessions */
    fp8run_session_destroy(NULL);
    CU_ASSERT_EQUAL(fp8run_session_batch(NULL), 0);
    CU_ASSERT_EQUAL(fp8run_session_param_count(NULL), 0);
    CU_ASSERT_PTR_NULL(fp8run_session_backend(NULL));
    CU_ASSERT_PTR_NOT_NULL(fp8run_session_error(NULL));
    CU_ASSERT_PTR_NULL(fp8run_session_config_json(NULL));
    fp8run_step_stats st = {.struct_size = sizeof st};
    float f[4];
    fp8run_report *r;
    fp8run_value_info v = {.struct_size = sizeof v};
    API_ERR(fp8run_session_train_step(NULL, w, FP8RUN_DTYPE_INT64, 10, &st), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_eval(NULL, w, FP8RUN_DTYPE_INT64, 10, &loss), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_eval_output(NULL, NULL, &v, NULL, 0), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_get_param(NULL, "x", f, 4), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_set_param(NULL, "x", f, 4), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_param(NULL, 0, &v), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_save(NULL, "x", NULL), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_load(NULL, "x", NULL), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_export(NULL, "x"), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_report(NULL, &r), FP8RUN_ERR_INVALID_ARG, "session is NULL");
}

static void test_session_step_errors(void)
{
    fp8run_model *m = tiny_model("step_errors", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_train_config c = tiny_config(2, 4);
    fp8run_session *s;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    int64_t w[10];
    for (int i = 0; i < 10; i++) w[i] = i;
    fp8run_step_stats st = {.struct_size = sizeof st};
    const char *se = NULL;
#define SE fp8run_session_error(s)
    API_ERR_H(fp8run_session_train_step(s, NULL, FP8RUN_DTYPE_INT64, 10, &st), FP8RUN_ERR_INVALID_ARG, "windows is NULL", SE);
    API_ERR_H(fp8run_session_train_step(s, w, FP8RUN_DTYPE_FLOAT32, 10, &st), FP8RUN_ERR_INVALID_ARG, "float32", SE);
    API_ERR_H(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 9, &st), FP8RUN_ERR_SHAPE, "got 9 token ids", SE);
    fp8run_step_stats small = {.struct_size = 3};
    API_ERR_H(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 10, &small), FP8RUN_ERR_INVALID_ARG, "struct_size is 3", SE);
    w[7] = TINY_V; /* micro-batch 0, window 1, position 2 */
    API_ERR_H(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 10, &st), FP8RUN_ERR_RANGE,
              "token id 11 (micro-batch 0, window 1, position 2)", SE);
    w[7] = -1;
    double loss;
    API_ERR(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &loss), FP8RUN_ERR_RANGE, "token id -1");
    w[7] = 7;
    API_ERR(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, NULL), FP8RUN_ERR_INVALID_ARG, "loss is NULL");
    /* none of that changed anything: the session trains */
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 0);
    API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 10, &st));
    CU_ASSERT_EQUAL(st.step, 0);
    CU_ASSERT(isfinite(st.loss) && st.loss > 0);
    CU_ASSERT(st.grad_norm > 0);
    CU_ASSERT(st.lr == 1e-2);
    CU_ASSERT_EQUAL(st.skipped, 0);
    CU_ASSERT_STRING_EQUAL(st.reason, "");
    API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 10, NULL));
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 2);

    /* eval outputs */
    fp8run_value_info v = {.struct_size = sizeof v};
    API_ERR_H(fp8run_session_eval_output(s, NULL, &v, NULL, 0), FP8RUN_ERR_STATE, "no evaluation", SE);
    API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &loss));
    API_OK(fp8run_session_eval_output(s, NULL, &v, NULL, 0));
    CU_ASSERT_STRING_EQUAL(v.name, "logits");
    CU_ASSERT_EQUAL(v.rank, 3);
    CU_ASSERT_EQUAL(v.numel, 2 * 4 * TINY_V);
    float logits[2 * 4 * TINY_V];
    API_OK(fp8run_session_eval_output(s, "logits", NULL, logits, 2 * 4 * TINY_V));
    CU_ASSERT(isfinite(logits[0]));
    API_ERR(fp8run_session_eval_output(s, NULL, NULL, logits, 5), FP8RUN_ERR_SHAPE, "88 elements");
    API_ERR(fp8run_session_eval_output(s, "nope", NULL, logits, 88), FP8RUN_ERR_INVALID_ARG, "'nope'");

    fp8run_report *r;
    API_OK(fp8run_session_report(s, &r));
    CU_ASSERT_STRING_EQUAL(fp8run_report_precision(r), "fp32");
    fp8run_report_destroy(r);
    API_ERR(fp8run_session_report(s, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    (void)se;
    fp8run_session_destroy(s);

    /* an evaluation-only session refuses steps and saves */
    c.eval_only = 1;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    API_ERR_H(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 10, &st), FP8RUN_ERR_STATE, "evaluation only", SE);
    API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &loss));
    char dir[4096], p[4096];
    fr_test_tmpdir(dir, sizeof dir);
    API_ERR(fp8run_session_save(s, tmp_path(p, sizeof p, dir, "e.ckpt"), NULL), FP8RUN_ERR_INVALID_ARG, "evaluation only");
    fp8run_session_destroy(s);
#undef SE
    fp8run_model_destroy(m);
}

/* A step that fails inside the trainer (a Gather index the API cannot check) breaks the
 * session: later calls say why; accessors and destroy still work. */
static void test_session_broken(void)
{
    fp8run_model *m = tiny_model("broken", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_train_config c = tiny_config(1, 3);
    fp8run_session *s;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    int64_t ok[4] = {0, 1, 2, 3}, bad[4] = {0, 1, TINY_V - 1, 3};
    fp8run_step_stats st = {.struct_size = sizeof st};
    API_OK(fp8run_session_train_step(s, ok, FP8RUN_DTYPE_INT64, 4, &st));
    double loss;
    /* evaluation failing changes nothing */
    API_ERR(fp8run_session_eval(s, bad, FP8RUN_DTYPE_INT64, 4, &loss), FP8RUN_ERR_RANGE, "ids_remapped");
    API_OK(fp8run_session_eval(s, ok, FP8RUN_DTYPE_INT64, 4, &loss));
    API_ERR_H(fp8run_session_train_step(s, bad, FP8RUN_DTYPE_INT64, 4, &st), FP8RUN_ERR_RANGE, "ids_remapped",
              fp8run_session_error(s));
    API_ERR_H(fp8run_session_train_step(s, ok, FP8RUN_DTYPE_INT64, 4, &st), FP8RUN_ERR_STATE, "unusable",
              fp8run_session_error(s));
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_session_error(s), "ids_remapped")); /* the first failure */
    API_ERR(fp8run_session_eval(s, ok, FP8RUN_DTYPE_INT64, 4, &loss), FP8RUN_ERR_STATE, "unusable");
    float f[TINY_V * TINY_D];
    API_ERR(fp8run_session_get_param(s, "embed.weight", f, TINY_V * TINY_D), FP8RUN_ERR_STATE, "unusable");
    API_ERR(fp8run_session_save(s, "/tmp/never.ckpt", NULL), FP8RUN_ERR_STATE, "unusable");
    API_ERR(fp8run_session_export(s, "/tmp/never.onnx"), FP8RUN_ERR_STATE, "unusable");
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 1);
    CU_ASSERT_EQUAL(fp8run_session_param_count(s), 6);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

static void test_int32_windows(void)
{
    fp8run_model *m = tiny_model("int32", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_train_config c = tiny_config(3, 5);
    c.grad_accum = 2;
    fp8run_session *a, *b;
    API_OK(fp8run_session_create(m, "cpu", &c, &a));
    API_OK(fp8run_session_create(m, "cpu", &c, &b));
    fr_rng r = fr_test_rng("int32 windows");
    enum { N = 2 * 3 * 6 };
    int64_t w64[N];
    int32_t w32[N];
    for (int step = 0; step < 3; step++) {
        random_windows(&r, w64, N, TINY_V);
        for (int i = 0; i < N; i++) w32[i] = (int32_t)w64[i];
        fp8run_step_stats sa = {.struct_size = sizeof sa}, sb = {.struct_size = sizeof sb};
        API_ERR(fp8run_session_train_step(a, w64, FP8RUN_DTYPE_INT64, N / 2, &sa), FP8RUN_ERR_SHAPE,
                "2 micro-batch(es) of 3 windows of 5+1 ids = 36");
        API_OK(fp8run_session_train_step(a, w64, FP8RUN_DTYPE_INT64, N, &sa));
        API_OK(fp8run_session_train_step(b, w32, FP8RUN_DTYPE_INT32, N, &sb));
        CU_ASSERT(bits_equal(sa.loss, sb.loss));
        CU_ASSERT(bits_equal(sa.grad_norm, sb.grad_norm));
    }
    fp8run_session_destroy(a);
    fp8run_session_destroy(b);
    fp8run_model_destroy(m);
}

static void test_session_params(void)
{
    fp8run_model *m = tiny_model("session_params", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const char *precisions[] = {"fp32", "fp8"}; /* fp8 fuses q/k: their values live in a slice */
    for (int pi = 0; pi < 2; pi++) {
        fp8run_train_config c = tiny_config(2, 4);
        c.precision = precisions[pi];
        fp8run_session *s;
        API_OK(fp8run_session_create(m, "cpu", &c, &s));
        CU_ASSERT_EQUAL_FATAL(fp8run_session_param_count(s), 6);
        fp8run_value_info v = {.struct_size = sizeof v};
        int found_k = 0;
        for (int i = 0; i < 6; i++) {
            API_OK(fp8run_session_param(s, i, &v));
            found_k |= strcmp(v.name, "k.weight") == 0 && v.numel == TINY_D * TINY_D && v.rank == 2;
        }
        CU_ASSERT(found_k);
        API_ERR(fp8run_session_param(s, 6, &v), FP8RUN_ERR_RANGE, "outside [0, 6)");
        float k0[TINY_D * TINY_D], k1[TINY_D * TINY_D], mk[TINY_D * TINY_D];
        API_OK(fp8run_session_get_param(s, "k.weight", k0, TINY_D * TINY_D));
        API_OK(fp8run_model_get_param(m, "k.weight", mk, TINY_D * TINY_D));
        CU_ASSERT_EQUAL(memcmp(k0, mk, sizeof k0), 0);
        int64_t w[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        double l0, l1, l2;
        API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &l0));
        for (int i = 0; i < TINY_D * TINY_D; i++) k1[i] = k0[i] * 2.0f + 0.25f;
        API_OK(fp8run_session_set_param(s, "k.weight", k1, TINY_D * TINY_D));
        API_OK(fp8run_session_get_param(s, "k.weight", mk, TINY_D * TINY_D));
        CU_ASSERT_EQUAL(memcmp(k1, mk, sizeof k1), 0);
        API_OK(fp8run_session_get_param(s, "q.weight", mk, TINY_D * TINY_D)); /* the neighbour slice */
        API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &l1));
        CU_ASSERT(l1 != l0);
        API_OK(fp8run_session_set_param(s, "k.weight", k0, TINY_D * TINY_D));
        API_OK(fp8run_session_eval(s, w, FP8RUN_DTYPE_INT64, 10, &l2));
        CU_ASSERT(bits_equal(l0, l2));
        /* export carries the set values */
        char dir[4096], p[4096];
        fr_test_tmpdir(dir, sizeof dir);
        API_OK(fp8run_session_set_param(s, "k.weight", k1, TINY_D * TINY_D));
        API_OK(fp8run_session_export(s, tmp_path(p, sizeof p, dir, "out.onnx")));
        fp8run_model *e;
        API_OK(fp8run_model_load(p, &e));
        API_OK(fp8run_model_get_param(e, "k.weight", mk, TINY_D * TINY_D));
        CU_ASSERT_EQUAL(memcmp(k1, mk, sizeof k1), 0);
        fp8run_model_destroy(e);
        API_ERR(fp8run_session_export(s, ""), FP8RUN_ERR_INVALID_ARG, "no path");
        /* errors */
        API_ERR_H(fp8run_session_get_param(s, "vocab_range", k0, 11), FP8RUN_ERR_INVALID_ARG, "'vocab_range'",
                  fp8run_session_error(s));
        API_ERR(fp8run_session_set_param(s, "k.weight", k0, 63), FP8RUN_ERR_SHAPE, "64 elements, the buffer 63");
        API_ERR(fp8run_session_set_param(s, "k.weight", NULL, 64), FP8RUN_ERR_INVALID_ARG, "buffer is NULL");
        API_ERR(fp8run_session_get_param(s, NULL, k0, 64), FP8RUN_ERR_INVALID_ARG, "name is NULL");
        fp8run_session_destroy(s);
    }
    fp8run_model_destroy(m);
}

/* ---- checkpoints ---- */

static int write_tokens(const char *path, int n, int V, fr_rng *r)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)((int)(fr_rng_uniform(r) * V) % V);
        fwrite(&t, sizeof t, 1, f);
    }
    return fclose(f);
}

/* 6 steps straight == 3 steps, checkpoint (with the loader), a new model + session + loader
 * restored from it, 3 steps: the same losses bit for bit. */
static void test_checkpoint_resume(void)
{
    char dir[4096], tok[4096], ck[4096];
    fr_test_tmpdir(dir, sizeof dir);
    fr_rng r = fr_test_rng("checkpoint resume");
    CU_ASSERT_EQUAL_FATAL(write_tokens(tmp_path(tok, sizeof tok, dir, "tokens.bin"), 500, TINY_V, &r), 0);
    tmp_path(ck, sizeof ck, dir, "step3.ckpt");
    blob b = tiny_bytes("checkpoint resume", 0);
    const char *precisions[] = {"fp32", "fp8"};
    for (int pi = 0; pi < 2; pi++) {
        fp8run_train_config c = tiny_config(2, 6);
        c.precision = precisions[pi];
        c.grad_accum = 2;
        c.lr_schedule = "cosine";
        c.warmup_steps = 2;
        c.total_steps = 6;
        c.min_lr = 1e-3;
        fp8run_data_config dc;
        API_OK(fp8run_data_config_init(&dc, sizeof dc));
        dc.batch = 2;
        dc.seq_len = 6;
        dc.seed = 42;
        dc.vocab_size = TINY_V;
        enum { N = 2 * 2 * 7 };
        int64_t w[N];
        double straight[6], resumed[6];
        fp8run_step_stats st = {.struct_size = sizeof st};

        fp8run_model *m;
        fp8run_session *s;
        fp8run_data_loader *d;
        API_OK(fp8run_model_load_buffer(b.data, b.len, "tiny.onnx", &m));
        API_OK(fp8run_session_create(m, "cpu", &c, &s));
        API_OK(fp8run_data_open(tok, &dc, &d));
        for (int i = 0; i < 6; i++) {
            API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, N));
            API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, N, &st));
            straight[i] = st.loss;
            if (i == 2) API_OK(fp8run_session_save(s, ck, d));
        }
        float final_a[TINY_D * TINY_V], final_b[TINY_D * TINY_V];
        API_OK(fp8run_session_get_param(s, "lm_head.weight", final_a, TINY_D * TINY_V));
        fp8run_session_destroy(s);
        fp8run_data_close(d);
        fp8run_model_destroy(m);

        /* the checkpoint describes itself */
        CU_ASSERT(fp8run_is_checkpoint(ck));
        fp8run_checkpoint *info;
        API_OK(fp8run_checkpoint_open(ck, &info));
        CU_ASSERT_EQUAL(fp8run_checkpoint_step(info), 3);
        CU_ASSERT_PTR_NULL(fp8run_checkpoint_model_path(info)); /* a model from memory has no path */
        CU_ASSERT(fp8run_checkpoint_has_data_state(info));
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_checkpoint_config_json(info), precisions[pi]));
        CU_ASSERT_EQUAL(fp8run_checkpoint_param_count(info), 6);
        fp8run_value_info v = {.struct_size = sizeof v};
        API_OK(fp8run_checkpoint_param(info, 0, &v));
        CU_ASSERT_EQUAL(v.dtype, FP8RUN_DTYPE_FLOAT32);
        API_ERR(fp8run_checkpoint_param(info, 6, &v), FP8RUN_ERR_RANGE, "outside [0, 6)");
        fp8run_checkpoint_close(info);

        /* resume: weights into the model, a session, the loader restored by the load */
        API_OK(fp8run_model_load_buffer(b.data, b.len, "tiny.onnx", &m));
        int applied = 0;
        API_OK(fp8run_model_apply_checkpoint(m, ck, &applied));
        CU_ASSERT_EQUAL(applied, 6);
        API_OK(fp8run_session_create(m, "cpu", &c, &s));
        API_OK(fp8run_data_open(tok, &dc, &d));
        API_OK(fp8run_session_load(s, ck, d));
        CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 3);
        CU_ASSERT_EQUAL(fp8run_data_batches_done(d), 6);
        for (int i = 3; i < 6; i++) {
            API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, N));
            API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, N, &st));
            resumed[i] = st.loss;
            CU_ASSERT_EQUAL(st.step, i);
            CU_ASSERT(bits_equal(resumed[i], straight[i]));
        }
        API_OK(fp8run_session_get_param(s, "lm_head.weight", final_b, TINY_D * TINY_V));
        CU_ASSERT_EQUAL(memcmp(final_a, final_b, sizeof final_a), 0);
        fp8run_session_destroy(s);
        fp8run_data_close(d);
        fp8run_model_destroy(m);
    }
    free(b.data);
}

static void test_checkpoint_errors(void)
{
    char dir[4096], ck[4096], other[4096], p[4096];
    fr_test_tmpdir(dir, sizeof dir);
    fp8run_checkpoint *info = (fp8run_checkpoint *)&info;
    API_ERR(fp8run_checkpoint_open(NULL, &info), FP8RUN_ERR_INVALID_ARG, "no path");
    CU_ASSERT_PTR_NULL(info);
    API_ERR(fp8run_checkpoint_open("x", NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    API_ERR(fp8run_checkpoint_open("/nonexistent.ckpt", &info), FP8RUN_ERR_IO, "/nonexistent.ckpt");
    API_ERR(fp8run_checkpoint_open(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &info), FP8RUN_ERR_PARSE,
            "model.onnx");
    CU_ASSERT(!fp8run_is_checkpoint(p));
    CU_ASSERT(!fp8run_is_checkpoint(NULL));
    CU_ASSERT(!fp8run_is_checkpoint("/nonexistent"));
    fp8run_checkpoint_close(NULL);
    CU_ASSERT_EQUAL(fp8run_checkpoint_step(NULL), -1);
    CU_ASSERT_PTR_NULL(fp8run_checkpoint_model_path(NULL));

    fp8run_model *m = tiny_model("ckpt errors", 0), *m2 = tiny_model("ckpt errors other", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m2);
    fp8run_train_config c = tiny_config(1, 3);
    fp8run_session *s, *s2;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    API_ERR(fp8run_session_save(s, "", NULL), FP8RUN_ERR_INVALID_ARG, "no path");
    API_ERR(fp8run_session_save(s, "/nonexistent/dir/x.ckpt", NULL), FP8RUN_ERR_IO, "/nonexistent/dir");
    API_OK(fp8run_session_save(s, tmp_path(ck, sizeof ck, dir, "a.ckpt"), NULL));

    /* a truncated checkpoint: refused on open */
    FILE *f = fopen(ck, "rb");
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(tmp_path(other, sizeof other, dir, "cut.ckpt"), "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    API_ERR(fp8run_checkpoint_open(other, &info), FP8RUN_ERR_PARSE, "cut.ckpt");

    /* missing file, not a checkpoint: nothing changes, the session stays usable */
    API_ERR_H(fp8run_session_load(s, "/nonexistent.ckpt", NULL), FP8RUN_ERR_IO, "/nonexistent.ckpt",
              fp8run_session_error(s));
    API_ERR(fp8run_session_load(s, fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), NULL), FP8RUN_ERR_PARSE,
            "not an fp8run checkpoint");
    int64_t w[4] = {0, 1, 2, 3};
    API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 4, NULL));
    /* a loader asked for but none saved: the session is restored, the loader is not */
    fp8run_data_config dc;
    API_OK(fp8run_data_config_init(&dc, sizeof dc));
    dc.seq_len = 3;
    fr_rng r = fr_test_rng("ckpt errors tokens");
    write_tokens(tmp_path(p, sizeof p, dir, "t.bin"), 100, TINY_V, &r);
    fp8run_data_loader *d;
    API_OK(fp8run_data_open(p, &dc, &d));
    API_ERR(fp8run_session_load(s, ck, d), FP8RUN_ERR_INVALID_ARG, "no data loader state");
    CU_ASSERT_EQUAL(fp8run_session_steps_done(s), 0);
    API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 4, NULL));
    fp8run_data_close(d);

    /* a checkpoint whose frozen parameter differs from this model's (written for a model with
     * other values): the restore fails midway and the session is broken */
    API_OK(fp8run_session_create(m2, "cpu", &c, &s2));
    API_OK(fp8run_session_save(s2, tmp_path(other, sizeof other, dir, "other.ckpt"), NULL));
    fp8run_session_destroy(s2);
    fp8run_train_config c2 = tiny_config(1, 3);
    c2.freeze_regex = "^embed";
    API_OK(fp8run_session_create(m, "cpu", &c2, &s2));
    API_ERR_H(fp8run_session_load(s2, other, NULL), FP8RUN_ERR_INVALID_ARG, "embed.weight", fp8run_session_error(s2));
    API_ERR(fp8run_session_train_step(s2, w, FP8RUN_DTYPE_INT64, 4, NULL), FP8RUN_ERR_STATE, "checkpoint restore");
    fp8run_session_destroy(s2);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
    fp8run_model_destroy(m2);
}

/* ---- data loader ---- */

static void test_data_loader(void)
{
    char dir[4096], tok[4096], p[4096];
    fr_test_tmpdir(dir, sizeof dir);
    fr_rng r = fr_test_rng("data loader");
    CU_ASSERT_EQUAL_FATAL(write_tokens(tmp_path(tok, sizeof tok, dir, "tokens.bin"), 300, 50, &r), 0);
    fp8run_data_config dc;
    API_ERR(fp8run_data_config_init(&dc, 4), FP8RUN_ERR_INVALID_ARG, "size 4");
    API_ERR(fp8run_data_config_init(NULL, sizeof dc), FP8RUN_ERR_INVALID_ARG, "cfg is NULL");
    API_OK(fp8run_data_config_init(&dc, sizeof dc));
    CU_ASSERT_EQUAL(dc.token_dtype, FP8RUN_DTYPE_UINT16);
    dc.batch = 3;
    dc.seq_len = 4;
    dc.order = FP8RUN_DATA_SEQUENTIAL;
    fp8run_data_loader *d = (fp8run_data_loader *)&d;
    API_ERR(fp8run_data_open("/nonexistent.bin", &dc, &d), FP8RUN_ERR_IO, "/nonexistent.bin");
    CU_ASSERT_PTR_NULL(d);
    API_ERR(fp8run_data_open(NULL, &dc, &d), FP8RUN_ERR_INVALID_ARG, "no path");
    API_ERR(fp8run_data_open(tok, &dc, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    fp8run_data_config b = dc;
    b.token_dtype = FP8RUN_DTYPE_INT64;
    API_ERR(fp8run_data_open(tok, &b, &d), FP8RUN_ERR_INVALID_ARG, "uint16 or uint32");
    b = dc;
    b.order = (fp8run_data_order)5;
    API_ERR(fp8run_data_open(tok, &b, &d), FP8RUN_ERR_INVALID_ARG, "order 5");
    b = dc;
    b.batch = 0;
    API_ERR(fp8run_data_open(tok, &b, &d), FP8RUN_ERR_INVALID_ARG, "batch (0)");
    b = dc;
    b.struct_size = 0;
    API_ERR(fp8run_data_open(tok, &b, &d), FP8RUN_ERR_INVALID_ARG, "struct_size is 0");
    b = dc;
    b.seq_len = 200; /* 3 windows of 201 > 300 tokens */
    API_ERR(fp8run_data_open(tok, &b, &d), FP8RUN_ERR_SHAPE, "tokens.bin");
    API_ERR(fp8run_data_open_val(tok, &dc, -1, &d), FP8RUN_ERR_INVALID_ARG, "num_batches");

    API_OK(fp8run_data_open(tok, &dc, &d));
    CU_ASSERT_EQUAL(fp8run_data_num_tokens(d), 300);
    CU_ASSERT_EQUAL(fp8run_data_token_dtype(d), FP8RUN_DTYPE_UINT16);
    CU_ASSERT_EQUAL(fp8run_data_batches_per_epoch(d), 24); /* (300-1) / 12 */
    int64_t w[2 * 15], w2[2 * 15];
    int32_t w32[15];
    API_ERR_H(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 14), FP8RUN_ERR_SHAPE, "multiple", fp8run_data_error(d));
    API_ERR(fp8run_data_next(d, FP8RUN_DTYPE_FLOAT32, w, 15), FP8RUN_ERR_INVALID_ARG, "float32");
    API_ERR(fp8run_data_next(d, FP8RUN_DTYPE_INT64, NULL, 15), FP8RUN_ERR_INVALID_ARG, "windows is NULL");
    CU_ASSERT_EQUAL(fp8run_data_batches_done(d), 0);
    size_t ss = fp8run_data_state_size();
    unsigned char state[256];
    CU_ASSERT_FATAL(ss <= sizeof state);
    API_ERR(fp8run_data_get_state(d, state, ss - 1), FP8RUN_ERR_INVALID_ARG, "bytes");
    API_OK(fp8run_data_get_state(d, state, ss));
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 30)); /* two batches at once */
    CU_ASSERT_EQUAL(fp8run_data_batches_done(d), 2);
    /* sequential: window 1 starts where window 0's inputs end (p + 1*T) */
    CU_ASSERT_EQUAL(w[5], w[4]);
    API_OK(fp8run_data_set_state(d, state, ss));
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w2, 15));
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT32, w32, 15));
    for (int i = 0; i < 15; i++) CU_ASSERT_EQUAL(w2[i], w[i]);
    for (int i = 0; i < 15; i++) CU_ASSERT_EQUAL(w32[i], w[15 + i]);
    API_ERR(fp8run_data_set_state(d, state, ss - 2), FP8RUN_ERR_PARSE, NULL);
    API_ERR(fp8run_data_set_state(d, NULL, ss), FP8RUN_ERR_INVALID_ARG, "buf is NULL");
    fp8run_data_reset(d);
    CU_ASSERT_EQUAL(fp8run_data_batches_done(d), 0);
    CU_ASSERT_EQUAL(fp8run_data_epoch(d), 0);
    API_OK(fp8run_data_check_tokens(d, 50));
    API_ERR(fp8run_data_check_tokens(d, 0), FP8RUN_ERR_INVALID_ARG, "vocab_size");
    fp8run_data_close(d);

    /* vocabulary check per batch: a failing multi-batch call leaves the state as it was */
    dc.vocab_size = 2;
    API_OK(fp8run_data_open(tok, &dc, &d));
    API_ERR(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 15), FP8RUN_ERR_RANGE, "tokens.bin");
    CU_ASSERT_EQUAL(fp8run_data_batches_done(d), 0);
    API_ERR(fp8run_data_check_tokens(d, 2), FP8RUN_ERR_RANGE, "tokens.bin");
    fp8run_data_close(d);

    /* a validation loader wraps after its batches */
    dc.vocab_size = 0;
    API_OK(fp8run_data_open_val(tok, &dc, 2, &d));
    CU_ASSERT_EQUAL(fp8run_data_batches_per_epoch(d), 2);
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 15));
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w2, 30));
    CU_ASSERT_EQUAL(memcmp(w, w2 + 15, 15 * sizeof *w), 0);
    fp8run_data_close(d);

    /* NULL loaders */
    fp8run_data_close(NULL);
    fp8run_data_reset(NULL);
    CU_ASSERT_EQUAL(fp8run_data_num_tokens(NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(fp8run_data_error(NULL));
    API_ERR(fp8run_data_next(NULL, FP8RUN_DTYPE_INT64, w, 15), FP8RUN_ERR_INVALID_ARG, "data loader is NULL");
    API_ERR(fp8run_data_get_state(NULL, state, ss), FP8RUN_ERR_INVALID_ARG, "data loader is NULL");
    API_ERR(fp8run_data_set_state(NULL, state, ss), FP8RUN_ERR_INVALID_ARG, "data loader is NULL");
    (void)p;
}

/* ---- llama_tiny through the API: the C side of python/tests' comparison ---- */

static void test_llama_train(void)
{
    char p[4096], tok[4096];
    fp8run_model *m;
    API_OK(fp8run_model_load(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &m));
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = 2;
    c.seq_len = 8;
    c.precision = "fp8";
    fp8run_report *r;
    API_OK(fp8run_model_compile(m, &c, &r));
    CU_ASSERT(fp8run_report_layer_count(r) > 0);
    CU_ASSERT(fp8run_report_linears(r, "fp8") > 0);
    fp8run_report_destroy(r);
    c.precision = "fp32";
    fp8run_session *s;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    CU_ASSERT_EQUAL(fp8run_session_vocab(s), 128);
    fp8run_data_config dc;
    API_OK(fp8run_data_config_init(&dc, sizeof dc));
    dc.batch = 2;
    dc.seq_len = 8;
    dc.order = FP8RUN_DATA_SEQUENTIAL;
    dc.vocab_size = 128;
    fp8run_data_loader *d;
    API_OK(fp8run_data_open(fr_fixture(tok, sizeof tok, "train/tokens.bin"), &dc, &d));
    int64_t w[18];
    double first = 0, last = 0;
    for (int i = 0; i < 4; i++) {
        fp8run_step_stats st = {.struct_size = sizeof st};
        API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 18));
        API_OK(fp8run_session_train_step(s, w, FP8RUN_DTYPE_INT64, 18, &st));
        if (i == 0) first = st.loss;
        last = st.loss;
        CU_ASSERT(isfinite(st.loss));
    }
    CU_ASSERT(first > 4.0 && first < 5.5); /* about log(128) = 4.85 */
    CU_ASSERT(isfinite(last));
    fp8run_data_close(d);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

static CU_TestInfo api_tests[] = {
    {"version, ABI, names", test_version},
    {"model: load errors and NULL handles", test_model_errors},
    {"model: inputs, outputs, symbolic dims, parameters", test_model_inspect},
    {"model: get/set parameters, save", test_model_params},
    {"config: defaults, bad choices, struct sizes", test_config},
    {"compile report: fusion, boundaries, exclude, padding", test_compile_report},
    {"session: create errors, backends, log callback", test_session_create},
    {"session: step/eval errors change nothing", test_session_step_errors},
    {"session: unusable after a failed step", test_session_broken},
    {"session: int32 windows == int64", test_int32_windows},
    {"session: parameters round-trip (fp32, fp8 fused), export", test_session_params},
    {"checkpoint: save/load resumes bit-exactly with the loader", test_checkpoint_resume},
    {"checkpoint: errors", test_checkpoint_errors},
    {"data loader", test_data_loader},
    {"llama_tiny: compile report and 4 steps", test_llama_train},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api", NULL, NULL, NULL, NULL, api_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
