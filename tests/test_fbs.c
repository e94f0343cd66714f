/* Compiled graph files (.fbs, runtime/io/fbs.h) on llama_tiny (batch 2, seq 13) and a small model
 * built here (q/k fused, a middle layer, an LM head, biases):
 *  - base64 codec: round trips of every length mod 3, strict refusal of bad text;
 *  - the loaded graph's forward equals the on-the-fly compiled one bit for bit;
 *  - N training steps from the .fbs equal N steps from the .onnx with fp8, bit for bit (losses),
 *    for the delayed and current recipes and bf16;
 *  - export from a .fbs run equals export from the .onnx run (initializer names, order, bytes);
 *  - checkpoints interchange (.fbs run -> .onnx run and back), resumes bit-exact;
 *  - the scaling state written into a .fbs comes back;
 *  - malformed metadata (bad numbers, missing keys, duplicate keys, truncated or corrupted
 *    base64, wrong format version, inconsistent slices), wrong batch/seq: clear errors naming
 *    the file and the key;
 *  - onnx.checker on the .fbs (custom domain aside), where python3-onnx is installed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/base64.h"
#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "runtime/exec/executor.h"
#include "runtime/io/fbs.h"
#include "runtime/train/trainer.h"

/* ---- models ---- */

static fr_graph *new_graph(void)
{
    fr_graph *g = NULL;
    if (fr_graph_new(&g) != FR_OK) return NULL;
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    g->ir_version = 8;
    g->name = strdup("tiny");
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

static void bt_dims(fr_graph *g, int vid)
{
    g->values[vid].dim_params[0] = strdup("batch");
    g->values[vid].dim_params[1] = strdup("seq");
}

/* logits = tanh(tanh(h Wq^T + bq + h Wk^T + bk) W1 + h) Wh, h = onehot(ids) E (Einsum); q and
 * k are torch-layout Linears with biases (fused into one), W1 the middle (fp8) layer, Wh the
 * LM head. Written and re-imported so it is a model "as imported". */
static fr_graph *build_tiny(uint64_t seed, int64_t V, int64_t D, const char *path)
{
    fr_rng r = fr_test_rng("fbs tiny model");
    r.s ^= seed;
    fr_graph *g = new_graph();
    int ids, E;
    FR_ASSERT_OK(fr_graph_add_value(g, "input_ids", &ids));
    int64_t bt[2] = {-1, -1};
    fr_value_set_shape(&g->values[ids], FR_I64, 2, bt);
    bt_dims(g, ids);
    FR_ASSERT_OK(fr_graph_mark_input(g, ids));
    int64_t dv = V, one = 1, de[2] = {V, D}, dd[2] = {D, D}, dh[2] = {D, V}, d1 = D;
    int range = add_init(g, "vocab_range", FR_I64, 1, &dv), axes = add_init(g, "unsq_axes", FR_I64, 1, &one);
    for (int64_t i = 0; i < V; i++) ((int64_t *)g->values[range].constant->data)[i] = i;
    ((int64_t *)g->values[axes].constant->data)[0] = 2;
    E = add_init(g, "embed.weight", FR_F32, 2, de);
    fr_rng_fill_normal(&r, fdata(g, E), V * D, 0.8f);
    int in[2] = {ids, axes};
    int u = node(g, "Unsqueeze", "ids3", 2, in);
    int in2[2] = {u, range};
    int eq = node(g, "Equal", "onehot_b", 2, in2);
    int oh = node(g, "Cast", "onehot", 1, &eq);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->values[oh].producer], "to", FR_F32));
    int in3[2] = {oh, E};
    int h = node(g, "Einsum", "h", 2, in3);
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[g->values[h].producer], "equation", "btv,vd->btd"));
    int wq = add_init(g, "q.weight", FR_F32, 2, dd), wk = add_init(g, "k.weight", FR_F32, 2, dd);
    int bq = add_init(g, "q.bias", FR_F32, 1, &d1), bk = add_init(g, "k.bias", FR_F32, 1, &d1);
    int w1 = add_init(g, "mid.weight", FR_F32, 2, dd), wh = add_init(g, "lm_head.weight", FR_F32, 2, dh);
    int ws[4] = {wq, wk, w1, wh};
    for (int i = 0; i < 4; i++)
        fr_rng_fill_normal(&r, fdata(g, ws[i]), fr_tensor_numel(g->values[ws[i]].constant), 1.0f / sqrtf((float)D));
    fr_rng_fill_normal(&r, fdata(g, bq), D, 0.1f);
    fr_rng_fill_normal(&r, fdata(g, bk), D, 0.1f);
    int tq = node(g, "Transpose", "q.wT", 1, &wq), tk = node(g, "Transpose", "k.wT", 1, &wk);
    int i1[2] = {h, tq}, i2[2] = {h, tk};
    int q = node(g, "MatMul", "q", 2, i1), k = node(g, "MatMul", "k", 2, i2);
    int i1b[2] = {q, bq}, i2b[2] = {k, bk};
    int qb = node(g, "Add", "q_b", 2, i1b), kb = node(g, "Add", "k_b", 2, i2b);
    int i3[2] = {qb, kb};
    int s = node(g, "Add", "qk", 2, i3);
    int a = node(g, "Tanh", "a", 1, &s);
    int i4[2] = {a, w1};
    int m = node(g, "MatMul", "m", 2, i4);
    int i5[2] = {m, h};
    int res = node(g, "Add", "res", 2, i5);
    int a2 = node(g, "Tanh", "a2", 1, &res);
    int i6[2] = {a2, wh};
    int logits = node(g, "MatMul", "logits", 2, i6);
    g->values[logits].dim_params[0] = strdup("batch");
    g->values[logits].dim_params[1] = strdup("seq");
    FR_ASSERT_OK(fr_graph_mark_output(g, logits));
    fr_graph *back = NULL;
    if (fr_onnx_save_file(g, path, NULL) != FR_OK || fr_onnx_load_file(path, &back) != FR_OK)
        printf("\n  %s\n", fr_last_error());
    fr_graph_free(g);
    return back;
}

static fr_graph *load_llama(void)
{
    char p[600];
    fr_graph *g = NULL;
    if (fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g) != FR_OK) printf("\n  %s\n", fr_last_error());
    return g;
}

static fr_train_options options(int64_t B, int64_t T, const char *precision)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.precision = precision;
    o.fp8.amax_history_len = 16;
    o.opt = fr_opt_config_adamw();
    o.opt.weight_decay = 0.1;
    o.opt.beta2 = 0.95;
    o.lr.max_lr = 1e-2;
    o.grad_clip = 1.0;
    return o;
}

static const char *path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

static void random_windows(fr_rng *r, int64_t *w, int64_t n, int64_t V)
{
    for (int64_t i = 0; i < n; i++) w[i] = (int64_t)(fr_rng_uniform(r) * (double)V) % V;
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static fr_graph *load(const char *path)
{
    fr_graph *g = NULL;
    if (fr_onnx_load_file(path, &g) != FR_OK) printf("\n  %s\n", fr_last_error());
    return g;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)len + 1);
    *n = fread(s, 1, (size_t)len, f);
    fclose(f);
    return s;
}

/* ---- base64 ---- */

static void test_base64(void)
{
    fr_rng r = fr_test_rng("base64");
    for (size_t n = 0; n < 40; n++) {
        unsigned char buf[40];
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(fr_rng_uniform(&r) * 256);
        char *text;
        size_t len, m;
        void *back;
        FR_ASSERT_OK(fr_base64_encode(buf, n, &text, &len));
        CU_ASSERT_EQUAL(len, (n + 2) / 3 * 4);
        CU_ASSERT_EQUAL(strlen(text), len);
        FR_ASSERT_OK(fr_base64_decode(text, len, "t", &back, &m));
        CU_ASSERT(m == n && memcmp(back, buf, n) == 0);
        free(back);
        free(text);
    }
    char *text;
    FR_ASSERT_OK(fr_base64_encode("foobar", 6, &text, NULL));
    CU_ASSERT_STRING_EQUAL(text, "Zm9vYmFy");
    free(text);
    FR_ASSERT_OK(fr_base64_encode("fo", 2, &text, NULL));
    CU_ASSERT_STRING_EQUAL(text, "Zm8=");
    free(text);
    static const char *bad[] = {"Zm9", "Zm9vY", "Zm=v", "Z===", "Zm9v!mFy", "Zm9=", "Zm8=Zm8=", "Zm9\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *d;
        size_t m;
        fr_status st = fr_base64_decode(bad[i], strlen(bad[i]), "key 'x'", &d, &m);
        CU_ASSERT_EQUAL(st, FR_ERR_PARSE);
        CU_ASSERT(strstr(fr_last_error(), "key 'x'") != NULL);
        if (st == FR_OK) free(d);
    }
}

/* ---- forward equality ---- */

static fr_status run_forward(fr_graph *g, const char *input, const fr_tensor *ids, fr_exec **ex)
{
    FR_TRY(fr_exec_new(g, ex));
    FR_TRY(fr_exec_set_input(*ex, input, ids));
    return fr_exec_run(*ex);
}

/* Compile model (in memory and to a file), load the file, and run both forwards. */
static void check_forward(const fr_graph *model, const fr_train_options *o, const char *dir, const char *what,
                          int64_t V)
{
    char fbs[600];
    path_in(fbs, sizeof fbs, dir, "fwd.fbs");
    fr_graph *cg;
    fr_fp8_report rep;
    FR_ASSERT_OK(fr_train_compile_graph(model, o, &cg, &rep));
    FR_ASSERT_OK(fr_train_compile(model, o, fbs));
    fr_fbs f;
    FR_ASSERT_OK(fr_fbs_load(fbs, &f));
    CU_ASSERT_EQUAL(f.spec.batch, o->batch);
    CU_ASSERT_EQUAL(f.spec.seq, o->seq_len);
    CU_ASSERT_EQUAL(f.report.n_layers, rep.n_layers);
    CU_ASSERT_EQUAL(f.report.n_fused, rep.n_fused);
    CU_ASSERT_EQUAL(f.report.n_states, rep.n_states);
    CU_ASSERT_EQUAL(f.report.n_fp8, rep.n_fp8);
    for (int i = 0; i < rep.n_layers && i < f.report.n_layers; i++) {
        CU_ASSERT_STRING_EQUAL(f.report.layers[i].name, rep.layers[i].name);
        CU_ASSERT_STRING_EQUAL(f.report.layers[i].why, rep.layers[i].why);
        CU_ASSERT_EQUAL(f.report.layers[i].precision, rep.layers[i].precision);
        CU_ASSERT_EQUAL(f.report.layers[i].pad_k, rep.layers[i].pad_k);
    }
    char *t1, *t2;
    FR_ASSERT_OK(fr_fp8_report_format(&rep, &t1));
    FR_ASSERT_OK(fr_fp8_report_format(&f.report, &t2));
    CU_ASSERT_STRING_EQUAL(t1, t2);
    free(t1);
    free(t2);

    fr_rng r = fr_test_rng(what);
    int64_t dims[2] = {o->batch, o->seq_len};
    fr_tensor *ids;
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 2, dims, "ids", &ids));
    random_windows(&r, ids->data, o->batch * o->seq_len, V);
    const char *input = cg->values[cg->inputs[0]].name;
    fr_exec *e1, *e2;
    FR_ASSERT_OK(run_forward(cg, input, ids, &e1));
    FR_ASSERT_OK(run_forward(f.graph, input, ids, &e2));
    CU_ASSERT_EQUAL(cg->n_outputs, f.graph->n_outputs);
    int same = 1;
    for (int i = 0; i < cg->n_outputs; i++) {
        const fr_tensor *a = fr_exec_output_at(e1, i), *b = fr_exec_output(e2, cg->values[cg->outputs[i]].name);
        same = same && b && a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
    }
    printf(" (%s: %d Linear nodes, %d fused, %d states, forward %s) ", what, rep.n_layers, rep.n_fused, rep.n_states,
           same ? "bit-identical" : "DIFFERS");
    CU_ASSERT(same);
    fr_exec_free(e1);
    fr_exec_free(e2);
    fr_tensor_free(ids);
    fr_fbs_free(&f);
    fr_fp8_report_free(&rep);
    fr_graph_free(cg);
    unlink(fbs);
}

static void test_forward_equal(void)
{
    char dir[512], mp[600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 13, "fp8");
    check_forward(g, &o, dir, "llama_tiny fp8 delayed", 128);
    o.fp8.recipe = "current";
    check_forward(g, &o, dir, "llama_tiny fp8 current", 128);
    fr_graph_free(g);
    g = build_tiny(1, 40, 32, path_in(mp, sizeof mp, dir, "tiny.onnx"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    o = options(2, 9, "fp8");
    check_forward(g, &o, dir, "tiny fp8 delayed", 40);
    o.fp8.recipe = "block";
    check_forward(g, &o, dir, "tiny fp8 block", 40);
    o = options(2, 9, "bf16");
    check_forward(g, &o, dir, "tiny bf16", 40);
    fr_graph_free(g);
    unlink(mp);
    rmdir(dir);
}

/* ---- training, export, checkpoints ---- */

/* n steps on the same windows; losses into out */
static fr_status steps(fr_trainer *t, fr_rng *r, int64_t V, int n, double *out)
{
    int64_t B = fr_trainer_batch(t), T = fr_trainer_seq_len(t);
    int64_t *w = malloc((size_t)(B * (T + 1)) * sizeof *w);
    fr_status st = FR_OK;
    for (int s = 0; s < n && st == FR_OK; s++) {
        random_windows(r, w, B * (T + 1), V);
        fr_train_stats ts;
        st = fr_trainer_step(t, w, 1, &ts);
        if (st == FR_OK) out[s] = ts.loss;
        if (st == FR_OK && ts.skipped) st = fr_error(FR_ERR_NUMERIC, "step skipped: %s", ts.reason);
    }
    free(w);
    return st;
}

/* initializers of two model files: same names, order, dtypes, shapes and bytes */
static int same_initializers(const char *pa, const char *pb)
{
    fr_graph *a = load(pa), *b = load(pb);
    int same = a && b && a->n_initializers == b->n_initializers;
    for (int i = 0; same && i < a->n_initializers; i++) {
        const fr_value *x = &a->values[a->initializers[i]], *y = &b->values[b->initializers[i]];
        same = strcmp(x->name, y->name) == 0 && x->constant->dtype == y->constant->dtype &&
               x->constant->nbytes == y->constant->nbytes &&
               memcmp(x->constant->data, y->constant->data, x->constant->nbytes) == 0;
        if (!same) printf("\n  initializer %d: '%s' vs '%s' differs\n", i, x->name, y->name);
    }
    fr_graph_free(a);
    fr_graph_free(b);
    return same;
}

static void check_training(const fr_graph *model, const fr_train_options *o, const char *dir, const char *what,
                           int64_t V)
{
    enum { N = 6 };
    char fbs[600], e1[600], e2[600], c1[600], c2[600];
    path_in(fbs, sizeof fbs, dir, "train.fbs");
    path_in(e1, sizeof e1, dir, "from_onnx.onnx");
    path_in(e2, sizeof e2, dir, "from_fbs.onnx");
    path_in(c1, sizeof c1, dir, "from_onnx.ckpt");
    path_in(c2, sizeof c2, dir, "from_fbs.ckpt");
    FR_ASSERT_OK(fr_train_compile(model, o, fbs));
    fr_graph *fg = load(fbs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fg);
    fr_trainer *ta, *tb;
    FR_ASSERT_OK(fr_trainer_new(model, o, &ta));
    fr_train_options ob = *o;
    ob.precision = "fp32"; /* the default: the file's precision applies */
    ob.fp8.recipe = "delayed";
    FR_ASSERT_OK(fr_trainer_new(fg, &ob, &tb));
    CU_ASSERT_STRING_EQUAL(fr_trainer_fp8_report(tb)->layers[0].name, fr_trainer_fp8_report(ta)->layers[0].name);
    CU_ASSERT_EQUAL(fr_trainer_param_count(ta), fr_trainer_param_count(tb));
    for (int i = 0; i < fr_trainer_param_count(ta); i++)
        CU_ASSERT_STRING_EQUAL(fr_trainer_param_name(ta, i), fr_trainer_param_name(tb, i));
    double la[2 * N], lb[2 * N];
    fr_rng ra = fr_test_rng(what), rb = ra;
    FR_ASSERT_OK(steps(ta, &ra, V, N, la));
    FR_ASSERT_OK(steps(tb, &rb, V, N, lb));
    int same = 1;
    for (int s = 0; s < N; s++) same = same && bits_equal(la[s], lb[s]);
    printf(" (%s: %d steps from .onnx and .fbs: loss %.6f -> %.6f, %s) ", what, N, la[0], la[N - 1],
           same ? "bit-identical" : "DIFFERENT");
    CU_ASSERT(same);

    /* fp8 statistics agree too */
    int ns = fr_trainer_fp8_stats(ta, NULL, 0);
    CU_ASSERT_EQUAL(ns, fr_trainer_fp8_stats(tb, NULL, 0));
    if (ns > 0) {
        fr_fp8_stat *sa = calloc((size_t)ns, sizeof *sa), *sb = calloc((size_t)ns, sizeof *sb);
        fr_trainer_fp8_stats(ta, sa, ns);
        fr_trainer_fp8_stats(tb, sb, ns);
        for (int i = 0; i < ns; i++) {
            CU_ASSERT_STRING_EQUAL(sa[i].layer, sb[i].layer);
            CU_ASSERT(sa[i].has_amax == sb[i].has_amax && (!sa[i].has_amax || bits_equal(sa[i].amax, sb[i].amax)));
        }
        free(sa);
        free(sb);
    }

    /* export: the original graph, names and trained values */
    FR_ASSERT_OK(fr_trainer_export(ta, e1));
    FR_ASSERT_OK(fr_trainer_export(tb, e2));
    CU_ASSERT(same_initializers(e1, e2));
    size_t n1 = 0, n2 = 0;
    char *b1 = slurp(e1, &n1), *b2 = slurp(e2, &n2);
    int identical = b1 && b2 && n1 == n2 && memcmp(b1, b2, n1) == 0;
    printf("(export %s) ", identical ? "byte-identical" : "initializers identical");
    free(b1);
    free(b2);

    /* checkpoints: .fbs run -> .onnx run and .onnx run -> .fbs run, both continue exactly */
    FR_ASSERT_OK(fr_trainer_save(ta, c1, NULL, 0));
    FR_ASSERT_OK(fr_trainer_save(tb, c2, NULL, 0));
    fr_trainer *tc, *td;
    FR_ASSERT_OK(fr_trainer_new(model, o, &tc));
    FR_ASSERT_OK(fr_trainer_load(tc, c2, NULL, NULL)); /* .fbs checkpoint into the .onnx run */
    FR_ASSERT_OK(fr_trainer_new(fg, &ob, &td));
    FR_ASSERT_OK(fr_trainer_load(td, c1, NULL, NULL)); /* .onnx checkpoint into the .fbs run */
    double lc[N], ld[N];
    fr_rng rc = ra, rd = ra;
    FR_ASSERT_OK(steps(ta, &ra, V, N, la + N));
    FR_ASSERT_OK(steps(tc, &rc, V, N, lc));
    FR_ASSERT_OK(steps(td, &rd, V, N, ld));
    int resumed = 1;
    for (int s = 0; s < N; s++) resumed = resumed && bits_equal(la[N + s], lc[s]) && bits_equal(la[N + s], ld[s]);
    printf("(checkpoints interchange: %s) ", resumed ? "resumed runs bit-identical" : "DIFFERENT");
    CU_ASSERT(resumed);

    /* fp8run export CKPT --model x.fbs: the checkpoint's weights into the original model */
    fr_graph *fg2 = load(fbs), *orig = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(fg2);
    FR_ASSERT_OK(fr_train_apply_weights(fg2, c2, NULL));
    FR_ASSERT_OK(fr_fbs_original(fg2, &orig));
    char e3[600];
    path_in(e3, sizeof e3, dir, "from_ckpt.onnx");
    FR_ASSERT_OK(fr_train_save_model(orig, e3));
    CU_ASSERT(same_initializers(e2, e3));
    fr_graph_free(orig);
    fr_graph_free(fg2);

    fr_trainer_free(ta);
    fr_trainer_free(tb);
    fr_trainer_free(tc);
    fr_trainer_free(td);
    fr_graph_free(fg);
    const char *files[] = {fbs, e1, e2, e3, c1, c2};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(files[i]);
}

static void test_training_equal(void)
{
    char dir[512], mp[600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = build_tiny(2, 40, 32, path_in(mp, sizeof mp, dir, "tiny.onnx"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 9, "fp8");
    check_training(g, &o, dir, "tiny fp8 delayed", 40);
    o.fp8.recipe = "current";
    check_training(g, &o, dir, "tiny fp8 current", 40);
    o = options(2, 9, "bf16");
    check_training(g, &o, dir, "tiny bf16", 40);
    fr_graph_free(g);
    unlink(mp);
    rmdir(dir);
}

static void test_llama_training_equal(void)
{
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 13, "fp8");
    o.lr.max_lr = 1e-3;
    fr_trainer *probe = NULL;
    fr_status st = fr_trainer_new(g, &o, &probe);
    if (st != FR_OK && strstr(fr_last_error(), "has no gradient rule")) {
        printf(" (SKIP: %s) ", fr_last_error());
        fr_graph_free(g);
        rmdir(dir);
        return;
    }
    FR_ASSERT_OK(st);
    fr_trainer_free(probe);
    check_training(g, &o, dir, "llama_tiny fp8 delayed", 128);
    fr_graph_free(g);
    /* GPT-2: a tied LM head (re-tied by the trainer), Gemm layers with biases */
    char p[600];
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "gpt2_tiny/model.onnx"), &g));
    o = options(2, 11, "fp8");
    o.lr.max_lr = 1e-3;
    check_training(g, &o, dir, "gpt2_tiny fp8 delayed", 96);
    fr_graph_free(g);
    rmdir(dir);
}

/* ---- state, errors ---- */

static void test_state_roundtrip(void)
{
    char dir[512], mp[600], fbs[600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = build_tiny(3, 40, 32, path_in(mp, sizeof mp, dir, "tiny.onnx"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 9, "fp8");
    fr_graph *cg;
    fr_fp8_report rep;
    FR_ASSERT_OK(fr_train_compile_graph(g, &o, &cg, &rep));
    CU_ASSERT_FATAL(rep.n_states > 0);
    fr_fp8_scaling *sc = calloc((size_t)rep.n_states, sizeof *sc);
    for (int i = 0; i < rep.n_states; i++) {
        fr_fp8_scaling_params p = {16, FR_AMAX_MAX, 0, 1, rep.states[i].fmt};
        FR_ASSERT_OK(fr_fp8_scaling_init(&sc[i], &p));
        for (int k = 0; k < 5 + i; k++) FR_ASSERT_OK(fr_fp8_scaling_update(&sc[i], 0.5f + (float)k * 0.25f + (float)i, "t"));
    }
    fr_fbs_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.batch = 2;
    spec.seq = 9;
    spec.tokens_input = "input_ids";
    spec.fp8 = o.fp8;
    spec.fp8.precision = "fp8";
    FR_ASSERT_OK(fr_fbs_save(cg, &rep, g, &spec, sc, path_in(fbs, sizeof fbs, dir, "state.fbs")));
    fr_fbs f;
    FR_ASSERT_OK(fr_fbs_load(fbs, &f));
    CU_ASSERT_EQUAL_FATAL(f.n_states, rep.n_states);
    int same = 1;
    for (int i = 0; i < rep.n_states; i++) {
        same = same && f.states[i].pos == sc[i].pos && f.states[i].updates == sc[i].updates &&
               f.states[i].scale == sc[i].scale && f.states[i].scale_inv == sc[i].scale_inv &&
               memcmp(f.states[i].history, sc[i].history, 16 * sizeof(float)) == 0 &&
               strcmp(f.report.states[i].amax_name, rep.states[i].amax_name) == 0;
    }
    CU_ASSERT(same);
    /* and a trainer built on it starts from that state */
    fr_graph *fg = load(fbs);
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(fg, &o, &t));
    int ns = fr_trainer_fp8_stats(t, NULL, 0);
    CU_ASSERT(ns == 3 * rep.n_fp8 / 1 || ns > 0);
    fr_fp8_stat *st = calloc((size_t)ns, sizeof *st);
    fr_trainer_fp8_stats(t, st, ns);
    CU_ASSERT_STRING_EQUAL(st[0].note, "no step taken yet");
    fr_rng r = fr_test_rng("state");
    double l[1];
    FR_ASSERT_OK(steps(t, &r, 40, 1, l));
    fr_trainer_fp8_stats(t, st, ns);
    for (int i = 0; i < ns; i++) {
        const fr_fp8_state *s = NULL;
        for (int k = 0; k < rep.n_states; k++)
            if (strcmp(rep.layers[rep.states[k].layer].name, st[i].layer) == 0 &&
                strcmp(st[i].operand, rep.states[k].operand == FR_FP8_OPERAND_X ? "x" : rep.states[k].operand == FR_FP8_OPERAND_W ? "w" : "dy") == 0)
                s = &rep.states[k];
        CU_ASSERT_FATAL(s != NULL);
        CU_ASSERT_EQUAL(st[i].step, 0);
        CU_ASSERT(st[i].has_amax && st[i].amax > 0 && isfinite(st[i].amax));
        CU_ASSERT_EQUAL(st[i].scale, sc[s - rep.states].scale); /* quantized with the recorded scale */
        CU_ASSERT_EQUAL(st[i].updates, sc[s - rep.states].updates + 1);
    }
    free(st);
    fr_trainer_free(t);
    fr_graph_free(fg);
    for (int i = 0; i < rep.n_states; i++) fr_fp8_scaling_free(&sc[i]);
    free(sc);
    fr_fbs_free(&f);
    fr_fp8_report_free(&rep);
    fr_graph_free(cg);
    fr_graph_free(g);
    unlink(fbs);
    unlink(mp);
    rmdir(dir);
}

/* Set (or with value NULL, remove) a metadata entry; returns 0 when the key is absent. */
static int set_meta(fr_graph *g, const char *key, const char *value)
{
    for (int i = 0; i < g->n_metadata; i++)
        if (strcmp(g->metadata[i].key, key) == 0) {
            free(g->metadata[i].value);
            if (value) {
                g->metadata[i].value = strdup(value);
            } else {
                free(g->metadata[i].key);
                g->metadata[i] = g->metadata[--g->n_metadata];
            }
            return 1;
        }
    return 0;
}

static const char *get_meta(const fr_graph *g, const char *key)
{
    for (int i = 0; i < g->n_metadata; i++)
        if (strcmp(g->metadata[i].key, key) == 0) return g->metadata[i].value;
    return NULL;
}

/* decode must fail with FR_ERR_PARSE/UNSUPPORTED and a message naming the file and `needle` */
static void expect_bad(const fr_graph *g, const char *needle, const char *what)
{
    fr_fbs f;
    fr_clear_error();
    fr_status st = fr_fbs_decode(g, "bad.fbs", &f);
    int ok = st != FR_OK && strstr(fr_last_error(), "bad.fbs") && strstr(fr_last_error(), needle);
    if (!ok) printf("\n  %s: status %d, message: %s\n", what, (int)st, fr_last_error());
    CU_ASSERT(ok);
    if (st == FR_OK) fr_fbs_free(&f);
}

static void test_malformed(void)
{
    char dir[512], mp[600], fbs[600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = build_tiny(4, 40, 32, path_in(mp, sizeof mp, dir, "tiny.onnx"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 9, "fp8");
    FR_ASSERT_OK(fr_train_compile(g, &o, path_in(fbs, sizeof fbs, dir, "ok.fbs")));
    static const struct {
        const char *key, *value, *needle;
    } cases[] = {
        {"fp8run.format", "2", "fp8run.format"},
        {"fp8run.batch", "two", "fp8run.batch"},
        {"fp8run.batch", NULL, "fp8run.batch"},
        {"fp8run.seq", "0", "fp8run.seq"},
        {"fp8run.option.recipe", "sometimes", "fp8run.option.recipe"},
        {"fp8run.option.amax_history", "-3", "fp8run.option.amax_history"},
        {"fp8run.layers", "999999999", "fp8run.layers"},
        {"fp8run.layer.1.K", "12abc", "fp8run.layer.1.K"},
        {"fp8run.layer.1.K", "31", "fp8run.layer.1.name"},
        {"fp8run.layer.0.name", "nonexistent", "fp8run.layer.0.name"},
        {"fp8run.layer.1.why", NULL, "fp8run.layer.1.why"},
        {"fp8run.fused.0.slice.1.offset", "3", "fp8run.fused.0.slice.1"},
        {"fp8run.fused.0.slice.0.dims", "32;32", "fp8run.fused.0.slice.0.dims"},
        {"fp8run.fused.0.name", "fused(nothing)", "fp8run.fused.0.name"},
        {"fp8run.state.0.scale", "q.bias", "fp8run.state.0.scale"},
        {"fp8run.state.0.layer", "77", "fp8run.state.0.layer"},
        {"fp8run.states", "2", "fp8run.states"},
        {"fp8run.state.1.scale", "fp8_state/m/scale_x", "fp8run.state.1.scale"},
        {"fp8run.state.1.operand", "x", "fp8run.state.1"},
        {"fp8run.param.0", "no_such_param", "fp8run.param.0"},
        {"fp8run.tokens_input", "labels", "fp8run.tokens_input"},
        {"fp8run.original_initializers", "3", "fp8run.original_initializers"},
        {"fp8run.original_init.0.source", "inline", "fp8run.original_init.0"},
        {"fp8run.original_init.2.name", "q.weight", "fp8run.original_init.2"},
        {"fp8run.original_inputs", "2", "fp8run.original_inputs"},
        {"fp8run.original_model", NULL, "fp8run.original_model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fr_graph *b = load(fbs);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        int present = set_meta(b, cases[i].key, cases[i].value);
        if (!present) printf("\n  key %s is not in the file\n", cases[i].key);
        CU_ASSERT(present);
        expect_bad(b, cases[i].needle, cases[i].key);
        fr_graph_free(b);
    }
    /* base64: truncated, a bad character, valid base64 of a broken protobuf */
    {
        fr_graph *b = load(fbs);
        CU_ASSERT_PTR_NOT_NULL_FATAL(get_meta(b, "fp8run.original_model"));
        char *text = strdup(get_meta(b, "fp8run.original_model")), *cut = strdup(text);
        cut[strlen(cut) - 3] = '\0';
        set_meta(b, "fp8run.original_model", cut);
        expect_bad(b, "fp8run.original_model", "truncated base64");
        strcpy(cut, text);
        cut[10] = '*';
        set_meta(b, "fp8run.original_model", cut);
        expect_bad(b, "not base64", "bad base64 character");
        strcpy(cut, text);
        cut[strlen(cut) / 2 / 4 * 4] = '\0'; /* valid base64, half a protobuf */
        set_meta(b, "fp8run.original_model", cut);
        expect_bad(b, "fp8run.original_model", "half a protobuf");
        free(cut);
        free(text);
        fr_graph_free(b);
    }
    /* a duplicate key */
    {
        fr_graph *b = load(fbs);
        fr_kv *nk = realloc(b->metadata, (size_t)(b->n_metadata + 1) * sizeof *nk);
        b->metadata = nk;
        nk[b->n_metadata].key = strdup("fp8run.batch");
        nk[b->n_metadata++].value = strdup("2");
        expect_bad(b, "appears twice", "duplicate key");
        fr_graph_free(b);
    }
    /* history initializer gone */
    {
        fr_graph *b = load(fbs);
        char hn[600];
        snprintf(hn, sizeof hn, "%s/history", get_meta(b, "fp8run.state.0.amax"));
        int vid = fr_graph_find_value(b, hn);
        CU_ASSERT_FATAL(vid >= 0);
        fr_tensor_free(b->values[vid].constant);
        int64_t three = 3;
        FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, &three, hn, &b->values[vid].constant));
        expect_bad(b, "fp8run.state.0.amax", "history of the wrong length");
        fr_graph_free(b);
    }
    /* through the file and the trainer: the file is named */
    {
        fr_graph *b = load(fbs);
        set_meta(b, "fp8run.layer.2.pad_n", "x");
        char bad_path[600];
        FR_ASSERT_OK(fr_onnx_save_file(b, path_in(bad_path, sizeof bad_path, dir, "broken.fbs"), NULL));
        fr_graph_free(b);
        b = load(bad_path);
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(b, &o, &t);
        CU_ASSERT(st == FR_ERR_PARSE && strstr(fr_last_error(), "broken.fbs") &&
                  strstr(fr_last_error(), "fp8run.layer.2.pad_n"));
        printf(" (e.g. %s) ", fr_last_error());
        fr_trainer_free(t);
        fr_graph_free(b);
        unlink(bad_path);
    }
    /* a model that is not compiled */
    {
        fr_fbs f;
        CU_ASSERT_EQUAL(fr_fbs_load(mp, &f), FR_ERR_PARSE);
        CU_ASSERT(strstr(fr_last_error(), "not a compiled graph") != NULL);
    }
    fr_graph_free(g);
    unlink(fbs);
    unlink(mp);
    rmdir(dir);
}

static void test_wrong_shape(void)
{
    char dir[512], mp[600], fbs[600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = build_tiny(5, 40, 32, path_in(mp, sizeof mp, dir, "tiny.onnx"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(2, 9, "fp8");
    FR_ASSERT_OK(fr_train_compile(g, &o, path_in(fbs, sizeof fbs, dir, "b2s9.fbs")));
    fr_graph *fg = load(fbs);
    int64_t b, s;
    FR_ASSERT_OK(fr_fbs_shape(fg, &b, &s));
    CU_ASSERT(b == 2 && s == 9);
    fr_trainer *t = NULL;
    o.batch = 3;
    CU_ASSERT_EQUAL(fr_trainer_new(fg, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT(strstr(fr_last_error(), "compiled for batch 2 x seq 9") && strstr(fr_last_error(), "recompile"));
    printf(" (%s) ", fr_last_error());
    o.batch = 2;
    o.seq_len = 10;
    CU_ASSERT_EQUAL(fr_trainer_new(fg, &o, &t), FR_ERR_INVALID_ARG);
    o.seq_len = 9;
    o.precision = "bf16";
    CU_ASSERT_EQUAL(fr_trainer_new(fg, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT(strstr(fr_last_error(), "compiled for precision fp8") != NULL);
    /* compiling a compiled graph, or for fp32 */
    o.precision = "fp8";
    char again[600];
    CU_ASSERT_EQUAL(fr_train_compile(fg, &o, path_in(again, sizeof again, dir, "again.fbs")), FR_ERR_INVALID_ARG);
    o.precision = "fp32";
    CU_ASSERT_EQUAL(fr_train_compile(g, &o, again), FR_ERR_INVALID_ARG);
    /* --train/--freeze splitting a fused group */
    o.precision = "fp8";
    o.freeze_regex = "^q\\.weight$";
    CU_ASSERT_EQUAL(fr_trainer_new(fg, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT(strstr(fr_last_error(), "fused") != NULL);
    o.freeze_regex = "lm_head";
    FR_ASSERT_OK(fr_trainer_new(fg, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 6); /* embed, q/k weights and biases, mid */
    fr_trainer_free(t);
    fr_graph_free(fg);
    fr_graph_free(g);
    unlink(fbs);
    unlink(mp);
    rmdir(dir);
}

/* onnx.checker accepts the .fbs (ai.fp8run ops are custom: not checked against a schema) and
 * the original model embedded in it. onnx < 1.14 knows IR version 8 only (float8 types came
 * with IR 9): there the check runs on a copy with IR 8 and the float8 value_info dropped. */
static void test_onnx_checker(void)
{
    const char *py = NULL;
    if (system("python3 -c 'import onnx' >/dev/null 2>&1") == 0)
        py = "python3";
    else if (system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0)
        py = "/usr/bin/python3";
    if (!py) {
        printf(" (SKIP onnx.checker: python3 onnx not installed) ");
        return;
    }
    char dir[512], fbs[600], script[600], cmd[1600];
    fr_test_tmpdir(dir, sizeof dir);
    fr_graph *g = load_llama();
    fr_train_options o = options(2, 13, "fp8");
    FR_ASSERT_OK(fr_train_compile(g, &o, path_in(fbs, sizeof fbs, dir, "llama.fbs")));
    FILE *f = fopen(path_in(script, sizeof script, dir, "check.py"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("import base64, sys, onnx\n"
          "m = onnx.load(sys.argv[1])\n"
          "assert any(o.domain == 'ai.fp8run' and o.version == 1 for o in m.opset_import)\n"
          "meta = {p.key: p.value for p in m.metadata_props}\n"
          "assert meta['fp8run.format'] == '1'\n"
          "if m.ir_version > onnx.IR_VERSION:\n"
          "    m.ir_version = onnx.IR_VERSION\n"
          "    keep = [v for v in m.graph.value_info if v.type.tensor_type.elem_type < 17]\n"
          "    del m.graph.value_info[:]\n"
          "    m.graph.value_info.extend(keep)\n"
          "onnx.checker.check_model(m)\n"
          "orig = onnx.ModelProto()\n"
          "orig.ParseFromString(base64.b64decode(meta['fp8run.original_model']))\n"
          "onnx.checker.check_model(orig)\n"
          "print('onnx', onnx.__version__, 'checker: ok')\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, script, fbs);
    int rc = system(cmd);
    CU_ASSERT_EQUAL(rc, 0);
    fr_graph_free(g);
    unlink(fbs);
    unlink(script);
    rmdir(dir);
}

static CU_TestInfo tests[] = {
    {"base64 codec", test_base64},
    {"loaded .fbs forward == on-the-fly compile, bit for bit", test_forward_equal},
    {"training, export, checkpoints: .fbs == .onnx (tiny)", test_training_equal},
    {"training, export, checkpoints: .fbs == .onnx (llama_tiny)", test_llama_training_equal},
    {"scaling state written into a .fbs comes back", test_state_roundtrip},
    {"malformed metadata: clear errors naming file and key", test_malformed},
    {"wrong batch/seq/precision, recompile, --freeze on fused", test_wrong_shape},
    {"onnx.checker accepts the .fbs", test_onnx_checker},
    CU_TEST_INFO_NULL,
};

int main(void)
{
    CU_SuiteInfo suites[] = {{"fbs", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
