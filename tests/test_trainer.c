/* The trainer (runtime/train/trainer.h) on small graphs built here and on the llama_tiny fixture:
 *  - tiny fp32 model: gradients equal a double-precision reference written here;
 *  - llama_tiny FP32 training follows PyTorch's losses (tests/fixtures/train, written by
 *    tools/gen_train_reference.py) within 1e-4 relative at each of 20 steps;
 *  - resume exactness: 10 steps with a checkpoint at 5 == 5 steps resumed, bit for bit;
 *  - gradient accumulation: K=2 x B/2 == K=1 x B (~1e-6);
 *  - checkpoints across precisions (fp8 <-> bf16, fused <-> unfused), FP8 scaling state;
 *  - export round trip (fp8run and, where installed, onnxruntime);
 *  - skipped non-finite steps, frozen parameters, errors (token id >= vocab, file too short,
 *    unknown extra input). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "passes/attention_fuse.h"
#include "passes/gelu_fuse.h"
#include "passes/rmsnorm_fuse.h"
#include "passes/rotary_fuse.h"
#include "passes/swiglu_fuse.h"
#include "passes/passes.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/data.h"
#include "runtime/exec/executor.h"
#include "runtime/io/npy.h"
#include "runtime/train/trainer.h"

/* ---- tiny models ---- */

static fr_graph *new_graph(void)
{
    fr_graph *g = NULL;
    if (fr_graph_new(&g) != FR_OK) return NULL;
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
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

static int add_input_bt(fr_graph *g, const char *name, fr_dtype dt)
{
    int vid;
    if (fr_graph_add_value(g, name, &vid) != FR_OK) return -1;
    int64_t dims[2] = {-1, -1};
    fr_value_set_shape(&g->values[vid], dt, 2, dims);
    g->values[vid].dim_params[0] = strdup("batch");
    g->values[vid].dim_params[1] = strdup("seq");
    g->values[vid].flags |= FR_VAL_INPUT;
    FR_ASSERT_OK(fr_graph_mark_input(g, vid));
    return vid;
}

/* out = op(inputs); returns the output id */
static int node(fr_graph *g, const char *op, const char *out_name, int n_in, const int *in)
{
    int out, nid;
    if (fr_graph_add_value(g, out_name, &out) != FR_OK) return -1;
    if (fr_graph_add_node(g, op, "", out_name, n_in, in, 1, &out, &nid) != FR_OK) return -1;
    return out;
}

static void set_attr_str(fr_graph *g, int out_vid, const char *name, const char *v)
{
    FR_ASSERT_OK(fr_node_set_attr_string(&g->nodes[g->values[out_vid].producer], name, v));
}

/* One-hot embedding: onehot(ids) @ E, as Equal(Unsqueeze(ids), 0..V-1) -> Cast -> Einsum, so
 * only ops with gradient rules lie between E and the loss. Returns h [B, T, D]. */
static int onehot_embed(fr_graph *g, int ids, int64_t V, int64_t D, int *E)
{
    int64_t dv = V, one = 1, de[2] = {V, D};
    int range = add_init(g, "vocab_range", FR_I64, 1, &dv);
    int axes = add_init(g, "unsq_axes", FR_I64, 1, &one);
    for (int64_t i = 0; i < V; i++) ((int64_t *)g->values[range].constant->data)[i] = i;
    ((int64_t *)g->values[axes].constant->data)[0] = 2;
    *E = add_init(g, "embed.weight", FR_F32, 2, de);
    int in[2] = {ids, axes};
    int u = node(g, "Unsqueeze", "ids3", 2, in);
    int in2[2] = {u, range};
    int eq = node(g, "Equal", "onehot_b", 2, in2);
    int oh = node(g, "Cast", "onehot", 1, &eq);
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->values[oh].producer], "to", FR_F32));
    int in3[2] = {oh, *E};
    int h = node(g, "Einsum", "h", 2, in3);
    set_attr_str(g, h, "equation", "btv,vd->btd");
    return h;
}

static void mark_logits(fr_graph *g, int logits)
{
    g->values[logits].dim_params[0] = strdup("batch");
    g->values[logits].dim_params[1] = strdup("seq");
    g->values[logits].flags |= FR_VAL_OUTPUT;
    FR_ASSERT_OK(fr_graph_mark_output(g, logits));
}

typedef struct tiny_a {
    int64_t V, D;
    int E, gain, W, b;
} tiny_a;

/* logits = tanh(onehot(ids) @ E * gain) @ W + b */
static fr_graph *build_tiny_a(fr_rng *r, int64_t V, int64_t D, tiny_a *m, const char *extra_input)
{
    fr_graph *g = new_graph();
    int ids = add_input_bt(g, "input_ids", FR_I64);
    if (extra_input) add_input_bt(g, extra_input, FR_I64);
    m->V = V;
    m->D = D;
    int h = onehot_embed(g, ids, V, D, &m->E);
    int64_t dd = D, dw[2] = {D, V}, dvv = V;
    m->gain = add_init(g, "gain", FR_F32, 1, &dd);
    m->W = add_init(g, "head.weight", FR_F32, 2, dw);
    m->b = add_init(g, "head.bias", FR_F32, 1, &dvv);
    fr_rng_fill_normal(r, fdata(g, m->E), V * D, 0.8f);
    fr_rng_fill(r, fdata(g, m->gain), D, 0.5f, 1.5f);
    fr_rng_fill_normal(r, fdata(g, m->W), D * V, 1.0f / sqrtf((float)D));
    fr_rng_fill_normal(r, fdata(g, m->b), V, 0.1f);
    int in[2] = {h, m->gain};
    int hg = node(g, "Mul", "hg", 2, in);
    int a = node(g, "Tanh", "a", 1, &hg);
    int in2[2] = {a, m->W};
    int z = node(g, "Einsum", "z", 2, in2);
    set_attr_str(g, z, "equation", "btd,dv->btv");
    int in3[2] = {z, m->b};
    int logits = node(g, "Add", "logits", 2, in3);
    mark_logits(g, logits);
    return g;
}

/* Linears for the precision tests: q/k share h (fused), a middle layer, an LM head.
 * logits = tanh(tanh(h Wq + h Wk) W1 + h) Wh */
static fr_graph *build_tiny_b(fr_rng *r, int64_t V, int64_t D)
{
    fr_graph *g = new_graph();
    int ids = add_input_bt(g, "input_ids", FR_I64), E;
    int h = onehot_embed(g, ids, V, D, &E);
    fr_rng_fill_normal(r, fdata(g, E), V * D, 0.8f);
    int64_t dd[2] = {D, D}, dh[2] = {D, V};
    int wq = add_init(g, "q.weight", FR_F32, 2, dd), wk = add_init(g, "k.weight", FR_F32, 2, dd);
    int w1 = add_init(g, "mid.weight", FR_F32, 2, dd), wh = add_init(g, "lm_head.weight", FR_F32, 2, dh);
    int ws[4] = {wq, wk, w1, wh};
    for (int i = 0; i < 4; i++)
        fr_rng_fill_normal(r, fdata(g, ws[i]), fr_tensor_numel(g->values[ws[i]].constant), 1.0f / sqrtf((float)D));
    int i1[2] = {h, wq}, i2[2] = {h, wk};
    int q = node(g, "MatMul", "q", 2, i1), k = node(g, "MatMul", "k", 2, i2);
    int i3[2] = {q, k};
    int s = node(g, "Add", "qk", 2, i3);
    int a = node(g, "Tanh", "a", 1, &s);
    int i4[2] = {a, w1};
    int m = node(g, "MatMul", "m", 2, i4);
    int i5[2] = {m, h};
    int res = node(g, "Add", "res", 2, i5);
    int a2 = node(g, "Tanh", "a2", 1, &res);
    int i6[2] = {a2, wh};
    int logits = node(g, "MatMul", "logits", 2, i6);
    mark_logits(g, logits);
    return g;
}

static void random_windows(fr_rng *r, int64_t *w, int64_t n, int64_t V)
{
    for (int64_t i = 0; i < n; i++) w[i] = (int64_t)(fr_rng_uniform(r) * (double)V) % V;
}

static fr_train_options tiny_options(int64_t B, int64_t T)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.opt = fr_opt_config_adamw();
    o.opt.weight_decay = 0.1;
    o.opt.beta2 = 0.95;
    o.lr.max_lr = 1e-2;
    o.grad_clip = 1.0;
    return o;
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---- tiny fp32: gradients against a double reference ---- */

static void test_tiny_gradients(void)
{
    fr_rng r = fr_test_rng("tiny_gradients");
    tiny_a m;
    const int64_t V = 11, D = 6, B = 3, T = 5;
    fr_graph *g = build_tiny_a(&r, V, D, &m, NULL);
    fr_train_options o = tiny_options(B, T);
    o.grad_clip = 0; /* the raw gradient stays in the optimizer's buffers */
    o.opt = fr_opt_config_sgd();
    o.lr.max_lr = 0.0;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_vocab(t), V);
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 4);
    int64_t w[3 * 6];
    random_windows(&r, w, B * (T + 1), V);
    fr_train_stats st;
    FR_ASSERT_OK(fr_trainer_step(t, w, 1, &st));
    CU_ASSERT_FALSE(st.skipped);

    /* reference forward/backward in double */
    const float *E = fdata(g, m.E), *gain = fdata(g, m.gain), *W = fdata(g, m.W), *bias = fdata(g, m.b);
    double dE[11 * 6] = {0}, dgain[6] = {0}, dW[6 * 11] = {0}, db[11] = {0}, loss = 0;
    const double N = (double)(B * T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++) {
            int64_t x = w[b * (T + 1) + j], y = w[b * (T + 1) + j + 1];
            double h[6], a[6], z[11], mx = -INFINITY, s = 0;
            for (int d = 0; d < D; d++) {
                h[d] = E[x * D + d];
                a[d] = tanh(h[d] * gain[d]);
            }
            for (int v = 0; v < V; v++) {
                z[v] = bias[v];
                for (int d = 0; d < D; d++) z[v] += a[d] * W[d * V + v];
                mx = fmax(mx, z[v]);
            }
            for (int v = 0; v < V; v++) s += exp(z[v] - mx);
            loss += (mx + log(s) - z[y]) / N;
            double dz[11], da[6] = {0};
            for (int v = 0; v < V; v++) dz[v] = (exp(z[v] - mx) / s - (v == y)) / N;
            for (int v = 0; v < V; v++) {
                db[v] += dz[v];
                for (int d = 0; d < D; d++) {
                    dW[d * V + v] += a[d] * dz[v];
                    da[d] += W[d * V + v] * dz[v];
                }
            }
            for (int d = 0; d < D; d++) {
                double dhg = da[d] * (1 - a[d] * a[d]);
                dgain[d] += dhg * h[d];
                dE[x * D + d] += dhg * gain[d];
            }
        }
    CU_ASSERT(fabs(st.loss - loss) <= 1e-6 * fabs(loss));
    fr_optimizer *opt = fr_trainer_optimizer(t);
    const struct {
        const char *name;
        const double *ref;
    } want[4] = {{"embed.weight", dE}, {"gain", dgain}, {"head.weight", dW}, {"head.bias", db}};
    double norm2 = 0;
    for (int k = 0; k < 4; k++) {
        int i = fr_optimizer_find_param(opt, want[k].name);
        CU_ASSERT_FATAL(i >= 0);
        int64_t n = fr_optimizer_param_numel(opt, i);
        double err = fr_rel_l2_d(fr_optimizer_param(opt, i)->grad, want[k].ref, n);
        if (err > 1e-5) printf("\n  gradient of %s: rel err %g\n", want[k].name, err);
        CU_ASSERT(err <= 1e-5);
        for (int64_t e = 0; e < n; e++) norm2 += want[k].ref[e] * want[k].ref[e];
    }
    CU_ASSERT(fabs(st.grad_norm - sqrt(norm2)) <= 1e-5 * sqrt(norm2));
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* ---- helpers for runs over a token file ---- */

static const char *tmp_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

/* Train `steps` steps from `first` (already restored), sequential batches from `dl`; losses
 * into out[first..first+steps); a checkpoint after step `ckpt_at` (1-based count) if > 0. */
static fr_status train_run(fr_trainer *t, fr_data_loader *dl, int first, int steps, double *out, int ckpt_at,
                           const char *ckpt)
{
    int64_t B = fr_trainer_batch(t), T = fr_trainer_seq_len(t);
    int K = fr_trainer_grad_accum(t);
    int64_t *w = malloc((size_t)(K * B * (T + 1)) * sizeof *w);
    fr_status st = FR_OK;
    for (int s = first; s < first + steps && st == FR_OK; s++) {
        for (int k = 0; k < K && st == FR_OK; k++) st = fr_data_next(dl, FR_I64, w + k * B * (T + 1));
        fr_train_stats ts;
        if (st == FR_OK) st = fr_trainer_step(t, w, K, &ts);
        if (st == FR_OK) out[s] = ts.loss;
        if (st == FR_OK && ckpt && s + 1 == ckpt_at) {
            uint8_t ds[FR_DATA_STATE_BYTES];
            fr_data_get_state(dl, ds);
            st = fr_trainer_save(t, ckpt, ds, sizeof ds);
        }
    }
    free(w);
    return st;
}

static fr_data_loader *open_tokens(const char *path, int64_t B, int64_t T, int64_t vocab)
{
    fr_data_opts d = fr_data_opts_default();
    d.batch = B;
    d.seq_len = T;
    d.order = FR_DATA_SEQUENTIAL;
    d.vocab_size = vocab;
    fr_data_loader *dl = NULL;
    fr_status st = fr_data_open(path, &d, &dl);
    if (st != FR_OK) printf("\n  %s\n", fr_last_error());
    return dl;
}

/* Resume exactness on any model: 10 steps with a checkpoint after 5 vs 5 steps resumed. */
static void check_resume(const fr_graph *g, const fr_train_options *o, const char *tokens)
{
    char dir[512], ck[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(ck, sizeof ck, dir, "step5.ckpt");
    double full[10], resumed[10];
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, o, &t));
    fr_data_loader *dl = open_tokens(tokens, o->batch, o->seq_len, fr_trainer_vocab(t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    FR_ASSERT_OK(train_run(t, dl, 0, 10, full, 5, ck));
    fr_trainer_free(t);
    fr_data_close(dl);

    FR_ASSERT_OK(fr_trainer_new(g, o, &t));
    dl = open_tokens(tokens, o->batch, o->seq_len, fr_trainer_vocab(t));
    void *ds;
    size_t dlen;
    FR_ASSERT_OK(fr_trainer_load(t, ck, &ds, &dlen));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ds);
    FR_ASSERT_OK(fr_data_set_state(dl, ds, dlen));
    free(ds);
    CU_ASSERT_EQUAL(fr_trainer_steps_done(t), 5);
    FR_ASSERT_OK(train_run(t, dl, 5, 5, resumed, 0, NULL));
    for (int s = 5; s < 10; s++) {
        if (!bits_equal(full[s], resumed[s]))
            printf("\n  step %d: uninterrupted %.17g, resumed %.17g\n", s + 1, full[s], resumed[s]);
        CU_ASSERT(bits_equal(full[s], resumed[s]));
    }
    fr_trainer_free(t);
    fr_data_close(dl);
    unlink(ck);
    rmdir(dir);
}

/* A token file of n random ids below V in a fresh temporary folder. */
static void write_token_file(fr_rng *r, const char *path, int64_t n, int64_t V)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int64_t i = 0; i < n; i++) {
        uint16_t x = (uint16_t)((int64_t)(fr_rng_uniform(r) * (double)V) % V);
        fwrite(&x, 2, 1, f);
    }
    fclose(f);
}

static void test_tiny_resume(void)
{
    fr_rng r = fr_test_rng("tiny_resume");
    tiny_a m;
    fr_graph *g = build_tiny_a(&r, 13, 8, &m, NULL);
    char dir[512], tok[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(tok, sizeof tok, dir, "tokens.bin");
    write_token_file(&r, tok, 600, 13);
    fr_train_options o = tiny_options(2, 7);
    o.lr.kind = FR_LR_COSINE;
    o.lr.warmup_steps = 3;
    o.lr.total_steps = 10;
    o.lr.min_lr = 1e-3;
    check_resume(g, &o, tok);
    o.opt = fr_opt_config_sgd();
    o.opt.momentum = 0.9;
    check_resume(g, &o, tok);
    unlink(tok);
    rmdir(dir);
    fr_graph_free(g);
}

/* ---- gradient accumulation ---- */

static void test_grad_accumulation(void)
{
    fr_rng r = fr_test_rng("grad_accumulation");
    tiny_a m;
    const int64_t V = 13, T = 6, B = 4, steps = 6;
    fr_graph *g = build_tiny_a(&r, V, 8, &m, NULL);
    fr_train_options o1 = tiny_options(B, T), o2 = tiny_options(B / 2, T);
    o2.grad_accum = 2;
    fr_trainer *t1, *t2;
    FR_ASSERT_OK(fr_trainer_new(g, &o1, &t1));
    FR_ASSERT_OK(fr_trainer_new(g, &o2, &t2));
    int64_t w[4 * 7];
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        random_windows(&r, w, B * (T + 1), V);
        fr_train_stats a, b;
        FR_ASSERT_OK(fr_trainer_step(t1, w, 1, &a));
        FR_ASSERT_OK(fr_trainer_step(t2, w, 2, &b)); /* the same windows as two halves */
        worst = fmax(worst, fabs(a.loss - b.loss) / fabs(a.loss));
        worst = fmax(worst, fabs(a.grad_norm - b.grad_norm) / a.grad_norm);
    }
    float p1[13 * 8], p2[13 * 8];
    FR_ASSERT_OK(fr_trainer_get_param(t1, "embed.weight", p1));
    FR_ASSERT_OK(fr_trainer_get_param(t2, "embed.weight", p2));
    double perr = fr_rel_l2(p2, p1, V * 8);
    printf(" (K=2 vs K=1: worst loss/norm rel diff %.2e, embedding rel diff %.2e) ", worst, perr);
    CU_ASSERT(worst <= 2e-6);
    CU_ASSERT(perr <= 2e-6);
    fr_trainer_free(t1);
    fr_trainer_free(t2);
    fr_graph_free(g);
}

/* ---- checkpoints across precisions ---- */

static fr_train_options precision_options(const char *precision, int fuse)
{
    fr_train_options o = tiny_options(2, 9);
    o.precision = precision;
    o.fp8.amax_history_len = 8;
    o.fp8.fuse = fuse;
    return o;
}

/* every (name, kind) tensor of a equals b's, bit for bit; returns the count compared */
static int ckpt_tensors_equal(const char *pa, const char *pb, const char *kind)
{
    fr_ckpt *a, *b;
    if (fr_ckpt_open(pa, &a) != FR_OK || fr_ckpt_open(pb, &b) != FR_OK) {
        printf("\n  %s\n", fr_last_error());
        return -1;
    }
    int n = 0, bad = 0;
    for (int i = 0; i < fr_ckpt_tensor_count(a); i++) {
        const fr_ckpt_tensor *x = fr_ckpt_tensor_at(a, i);
        if (strcmp(x->kind, kind) != 0) continue;
        const fr_ckpt_tensor *y = fr_ckpt_find(b, x->name, kind);
        if (!y || y->nbytes != x->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
            printf("\n  %s %s differs\n", kind, x->name);
            bad = 1;
        }
        n++;
    }
    fr_ckpt_close(a);
    fr_ckpt_close(b);
    return bad ? -1 : n;
}

static void test_ckpt_across_precisions(void)
{
    fr_rng r = fr_test_rng("ckpt_across_precisions");
    const int64_t V = 40, D = 32;
    fr_graph *g = build_tiny_b(&r, V, D);
    char dir[512], c8[600], cb[600], c8b[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(c8, sizeof c8, dir, "fp8.ckpt");
    tmp_path(cb, sizeof cb, dir, "bf16.ckpt");
    tmp_path(c8b, sizeof c8b, dir, "fp8_again.ckpt");
    fr_train_options o8 = precision_options("fp8", 1), ob = precision_options("bf16", 0);
    fr_trainer *t8, *tb, *t8b;
    FR_ASSERT_OK(fr_trainer_new(g, &o8, &t8));
    const fr_fp8_report *rep = fr_trainer_fp8_report(t8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(rep);
    CU_ASSERT(rep->n_fused >= 1); /* q and k read the same input */
    CU_ASSERT(rep->n_fp8 >= 1);   /* the middle layer */
    CU_ASSERT(rep->n_states >= 3);
    CU_ASSERT_EQUAL(fr_trainer_param_count(t8), 5); /* original names: embed, q, k, mid, head */
    int64_t w[2 * 10];
    for (int s = 0; s < 4; s++) {
        random_windows(&r, w, 2 * 10, V);
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t8, w, 1, &st));
        CU_ASSERT_FALSE(st.skipped);
    }
    FR_ASSERT_OK(fr_trainer_save(t8, c8, NULL, 0));

    /* fp8 (fused) -> bf16 (unfused): same weights and optimizer state under original names */
    FR_ASSERT_OK(fr_trainer_new(g, &ob, &tb));
    CU_ASSERT_EQUAL(fr_trainer_fp8_report(tb)->n_fused, 0);
    FR_ASSERT_OK(fr_trainer_load(tb, c8, NULL, NULL));
    CU_ASSERT_EQUAL(fr_trainer_steps_done(tb), 4);
    for (int i = 0; i < fr_trainer_param_count(t8); i++) {
        const char *nm = fr_trainer_param_name(t8, i);
        int64_t n = fr_trainer_param_numel(t8, i);
        float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
        FR_ASSERT_OK(fr_trainer_get_param(t8, nm, a));
        FR_ASSERT_OK(fr_trainer_get_param(tb, nm, b));
        CU_ASSERT_EQUAL(memcmp(a, b, (size_t)n * sizeof(float)), 0);
        free(a);
        free(b);
    }
    FR_ASSERT_OK(fr_trainer_save(tb, cb, NULL, 0));
    CU_ASSERT_EQUAL(ckpt_tensors_equal(c8, cb, "param"), 5);
    CU_ASSERT_EQUAL(ckpt_tensors_equal(c8, cb, "exp_avg"), 5);
    CU_ASSERT_EQUAL(ckpt_tensors_equal(c8, cb, "exp_avg_sq"), 5);
    fr_ckpt *ck;
    FR_ASSERT_OK(fr_ckpt_open(cb, &ck));
    int hist = 0;
    for (int i = 0; i < fr_ckpt_tensor_count(ck); i++) hist += strcmp(fr_ckpt_tensor_at(ck, i)->kind, "amax_history") == 0;
    CU_ASSERT_EQUAL(hist, 0); /* bf16 has no scaling state */
    fr_ckpt_close(ck);

    /* bf16 -> fp8: loads (fresh scaling), trains on */
    FR_ASSERT_OK(fr_trainer_new(g, &o8, &t8b));
    FR_ASSERT_OK(fr_trainer_load(t8b, cb, NULL, NULL));
    FR_ASSERT_OK(fr_trainer_save(t8b, c8b, NULL, 0));
    CU_ASSERT_EQUAL(ckpt_tensors_equal(cb, c8b, "param"), 5);
    CU_ASSERT_EQUAL(ckpt_tensors_equal(cb, c8b, "exp_avg_sq"), 5);
    fr_train_stats st;
    FR_ASSERT_OK(fr_trainer_step(t8b, w, 1, &st));
    CU_ASSERT(isfinite(st.loss) && !st.skipped);
    FR_ASSERT_OK(fr_trainer_step(tb, w, 1, &st));
    CU_ASSERT(isfinite(st.loss) && !st.skipped);

    /* the fp8 scaling state survives an fp8 -> fp8 round trip */
    fr_trainer *t8c;
    FR_ASSERT_OK(fr_trainer_new(g, &o8, &t8c));
    FR_ASSERT_OK(fr_trainer_load(t8c, c8, NULL, NULL));
    double l1, l2;
    random_windows(&r, w, 2 * 10, V);
    FR_ASSERT_OK(fr_trainer_eval(t8, w, &l1));
    FR_ASSERT_OK(fr_trainer_eval(t8c, w, &l2));
    CU_ASSERT(bits_equal(l1, l2));

    fr_trainer_free(t8);
    fr_trainer_free(tb);
    fr_trainer_free(t8b);
    fr_trainer_free(t8c);
    unlink(c8);
    unlink(cb);
    unlink(c8b);
    rmdir(dir);
    fr_graph_free(g);
}

static void test_fp8_resume(void)
{
    fr_rng r = fr_test_rng("fp8_resume");
    fr_graph *g = build_tiny_b(&r, 40, 32);
    char dir[512], tok[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(tok, sizeof tok, dir, "tokens.bin");
    write_token_file(&r, tok, 1000, 40);
    fr_train_options o = precision_options("fp8", 1);
    check_resume(g, &o, tok);
    o.fp8.recipe = "current";
    check_resume(g, &o, tok);
    o = precision_options("bf16", 1);
    check_resume(g, &o, tok);
    unlink(tok);
    rmdir(dir);
    fr_graph_free(g);
}

/* ---- export ---- */

static int have_onnxruntime(void)
{
    return system("python3 -c 'import onnxruntime' >/dev/null 2>&1") == 0;
}

/* onnxruntime's output 0 for input 0 = x (int64 npy), as a tensor; NULL on failure. */
static fr_tensor *run_onnxruntime(const char *dir, const char *model, const fr_tensor *x)
{
    static const char *script =
        "import sys\n"
        "import numpy as np\n"
        "import onnxruntime as ort\n"
        "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
        "y = s.run(None, {s.get_inputs()[0].name: np.load(sys.argv[2])})[0]\n"
        "np.save(sys.argv[3], np.asarray(y, dtype=np.float32))\n";
    char sp[700], xp[700], yp[700], cmd[3000];
    tmp_path(sp, sizeof sp, dir, "ort_run.py");
    tmp_path(xp, sizeof xp, dir, "ort_x.npy");
    tmp_path(yp, sizeof yp, dir, "ort_y.npy");
    FILE *f = fopen(sp, "w");
    if (!f) return NULL;
    fputs(script, f);
    fclose(f);
    if (fr_npy_save(xp, x) != FR_OK) return NULL;
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' '%s'", sp, model, xp, yp);
    fr_tensor *y = NULL;
    if (system(cmd) == 0 && fr_npy_load(yp, &y) != FR_OK) y = NULL;
    unlink(sp);
    unlink(xp);
    unlink(yp);
    return y;
}

/* Train a few steps, export, and run the exported model: fp8run gives the trainer's outputs
 * and onnxruntime (where installed) agrees within 1e-4. */
static void check_export(const fr_graph *g, const fr_train_options *o, fr_rng *r, const char *tag)
{
    char dir[512], out[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(out, sizeof out, dir, "trained.onnx");
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, o, &t));
    const int64_t B = o->batch, T = o->seq_len, V = fr_trainer_vocab(t);
    int64_t *w = malloc((size_t)(B * (T + 1)) * sizeof *w);
    for (int s = 0; s < 3; s++) {
        random_windows(r, w, B * (T + 1), V);
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, NULL));
    }
    double loss;
    random_windows(r, w, B * (T + 1), V);
    /* the reference: the trainer's own forward in fp32; for bf16/fp8 runs an fp32 evaluation
     * trainer loaded from the run's checkpoint (the exported model is the fp32 original) */
    fr_trainer *ev = t;
    if (strcmp(o->precision, "fp32") != 0) {
        char ck[600];
        tmp_path(ck, sizeof ck, dir, "run.ckpt");
        FR_ASSERT_OK(fr_trainer_save(t, ck, NULL, 0));
        fr_train_options e = *o;
        e.precision = "fp32";
        e.eval_only = 1;
        FR_ASSERT_OK(fr_trainer_new(g, &e, &ev));
        FR_ASSERT_OK(fr_trainer_load(ev, ck, NULL, NULL));
        unlink(ck);
        CU_ASSERT_EQUAL(fr_trainer_step(ev, w, 1, NULL), FR_ERR_INVALID_ARG);
    }
    FR_ASSERT_OK(fr_trainer_eval(ev, w, &loss));
    const fr_tensor *ref = fr_trainer_eval_output(ev, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    FR_ASSERT_OK(fr_trainer_export(t, out));

    /* reload: trained values by original name, the rest untouched */
    fr_graph *eg;
    FR_ASSERT_OK(fr_onnx_load_file(out, &eg));
    CU_ASSERT_EQUAL(eg->n_initializers, g->n_initializers);
    for (int i = 0; i < fr_trainer_param_count(t); i++) {
        const char *nm = fr_trainer_param_name(t, i);
        int64_t n = fr_trainer_param_numel(t, i);
        float *p = malloc((size_t)n * sizeof(float));
        FR_ASSERT_OK(fr_trainer_get_param(t, nm, p));
        int vid = fr_graph_find_value(eg, nm);
        CU_ASSERT_FATAL(vid >= 0 && eg->values[vid].constant);
        CU_ASSERT_EQUAL(memcmp(eg->values[vid].constant->data, p, (size_t)n * sizeof(float)), 0);
        free(p);
    }
    /* fp8run forward on the exported file */
    fr_tensor *x;
    int64_t dims[2] = {B, T};
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 2, dims, "x", &x));
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < T; j++) ((int64_t *)x->data)[b * T + j] = w[b * (T + 1) + j];
    fr_input_shape is = {eg->values[eg->inputs[0]].name, 2, {B, T}};
    fr_prepare_options po;
    fr_prepare_options_default(&po);
    po.input_shapes = &is;
    po.n_input_shapes = 1;
    FR_ASSERT_OK(fr_prepare_forward(eg, &po, NULL));
    fr_exec *ex;
    FR_ASSERT_OK(fr_exec_new(eg, &ex));
    FR_ASSERT_OK(fr_exec_set_input(ex, is.name, x));
    FR_ASSERT_OK(fr_exec_run(ex));
    const fr_tensor *y = fr_exec_output_at(ex, 0);
    int64_t n = fr_tensor_numel(ref);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(y), n);
    double err = fr_rel_l2(y->data, ref->data, n);
    printf(" (%s: exported vs trainer rel %.1e", tag, err);
    CU_ASSERT(err <= 1e-6);
    if (have_onnxruntime()) {
        fr_tensor *oy = run_onnxruntime(dir, out, x);
        CU_ASSERT_PTR_NOT_NULL(oy);
        if (oy) {
            CU_ASSERT_EQUAL(fr_tensor_numel(oy), n);
            double e2 = fr_tensor_numel(oy) == n ? fr_rel_l2(oy->data, y->data, n) : INFINITY;
            printf(", onnxruntime vs fp8run rel %.1e", e2);
            CU_ASSERT(e2 <= 1e-4);
            fr_tensor_free(oy);
        }
    } else {
        printf(", SKIP onnxruntime: not installed");
    }
    printf(") ");
    fr_exec_free(ex);
    fr_tensor_free(x);
    fr_graph_free(eg);
    if (ev != t) fr_trainer_free(ev);
    fr_trainer_free(t);
    free(w);
    unlink(out);
    rmdir(dir);
}

static void test_export_roundtrip(void)
{
    fr_rng r = fr_test_rng("export_roundtrip");
    tiny_a m;
    fr_graph *g = build_tiny_a(&r, 17, 8, &m, NULL);
    fr_train_options o = tiny_options(2, 5);
    check_export(g, &o, &r, "tiny fp32");
    fr_graph_free(g);
    g = build_tiny_b(&r, 40, 32);
    o = precision_options("fp8", 1);
    check_export(g, &o, &r, "tiny fp8 fused");
    fr_graph_free(g);
}

/* ---- non-finite steps ---- */

/* logits = onehot(ids) @ E + b; E's row 0 and b are 3e38, so any window holding token 0 makes
 * inf logits and a NaN loss, the others stay finite. */
static void test_skip_nonfinite(void)
{
    fr_rng r = fr_test_rng("skip_nonfinite");
    const int64_t V = 9, B = 2, T = 4;
    fr_graph *g = new_graph();
    int ids = add_input_bt(g, "input_ids", FR_I64), E;
    int h = onehot_embed(g, ids, V, V, &E);
    int64_t dv = V;
    int b = add_init(g, "bias", FR_F32, 1, &dv);
    fr_rng_fill_normal(&r, fdata(g, E), V * V, 1.0f);
    for (int64_t v = 0; v < V; v++) {
        fdata(g, E)[v] = 3e38f;
        fdata(g, b)[v] = 3e38f;
    }
    int in[2] = {h, b};
    mark_logits(g, node(g, "Add", "logits", 2, in));
    fr_train_options o = tiny_options(B, T);
    o.max_bad_steps = 1;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    int64_t bad[10], good[10];
    for (int i = 0; i < 10; i++) {
        good[i] = 1 + i % (V - 1);
        bad[i] = good[i];
    }
    bad[3] = 0;
    float before[81], after[81];
    fr_train_stats st;
    FR_ASSERT_OK(fr_trainer_step(t, good, 1, &st));
    CU_ASSERT_FALSE(st.skipped);
    FR_ASSERT_OK(fr_trainer_get_param(t, "embed.weight", before));
    int64_t osteps = fr_optimizer_step_count(fr_trainer_optimizer(t));
    FR_ASSERT_OK(fr_trainer_step(t, bad, 1, &st));
    CU_ASSERT_TRUE(st.skipped);
    CU_ASSERT_EQUAL(st.bad_in_a_row, 1);
    CU_ASSERT(strlen(st.reason) > 0);
    FR_ASSERT_OK(fr_trainer_get_param(t, "embed.weight", after));
    CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
    CU_ASSERT_EQUAL(fr_optimizer_step_count(fr_trainer_optimizer(t)), osteps);
    FR_ASSERT_OK(fr_trainer_step(t, good, 1, &st)); /* a good step resets the count */
    CU_ASSERT_FALSE(st.skipped);
    FR_ASSERT_OK(fr_trainer_step(t, bad, 1, &st));
    CU_ASSERT_EQUAL(fr_trainer_step(t, bad, 1, &st), FR_ERR_NUMERIC); /* 2 > max_bad_steps 1 */
    CU_ASSERT_TRUE(st.skipped);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "in a row"));
    CU_ASSERT_EQUAL(fr_trainer_skipped_total(t), 3);
    CU_ASSERT_EQUAL(fr_trainer_steps_done(t), 5);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* FP8: a NaN reaching an FP8 Linear is a NaN amax; delayed scaling reports it through the amax
 * outputs, current scaling fails the kernel with FR_ERR_NUMERIC: both skip the step, weights
 * and scales untouched. */
static void test_skip_fp8_nan(void)
{
    fr_rng r = fr_test_rng("skip_fp8_nan");
    const char *recipes[2] = {"delayed", "current"};
    for (int k = 0; k < 2; k++) {
        fr_graph *g = build_tiny_b(&r, 40, 32);
        fr_train_options o = precision_options("fp8", 0);
        o.fp8.recipe = recipes[k];
        o.max_bad_steps = 3;
        fr_trainer *t;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        int64_t w[20];
        random_windows(&r, w, 20, 40);
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &st));
        CU_ASSERT_FALSE(st.skipped);
        /* a second trainer starts from t's weights (through a checkpoint) with one NaN in its
         * embedding table, which the one-hot product spreads to every position */
        float before[32 * 32], after[32 * 32], *E;
        FR_ASSERT_OK(fr_trainer_get_param(t, "mid.weight", before));
        char dir[512], ck[600];
        fr_test_tmpdir(dir, sizeof dir);
        tmp_path(ck, sizeof ck, dir, "nan.ckpt");
        FR_ASSERT_OK(fr_trainer_save(t, ck, NULL, 0));
        fr_trainer *t2;
        int ev = fr_graph_find_value(g, "embed.weight");
        E = fdata(g, ev);
        FR_ASSERT_OK(fr_train_apply_weights(g, ck, NULL));
        E[5] = NAN;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t2));
        E[5] = 0.0f;
        fr_status s2 = fr_trainer_step(t2, w, 1, &st);
        CU_ASSERT_EQUAL(s2, FR_OK);
        CU_ASSERT_TRUE(st.skipped);
        if (st.skipped) printf(" (%s: %.80s) ", recipes[k], st.reason);
        FR_ASSERT_OK(fr_trainer_get_param(t2, "mid.weight", after));
        CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
        CU_ASSERT_EQUAL(fr_optimizer_step_count(fr_trainer_optimizer(t2)), 0);
        unlink(ck);
        rmdir(dir);
        fr_trainer_free(t);
        fr_trainer_free(t2);
        fr_graph_free(g);
    }
}

/* ---- parameter selection ---- */

static void test_freeze_and_train_regex(void)
{
    fr_rng r = fr_test_rng("freeze_and_train_regex");
    tiny_a m;
    const int64_t V = 11, D = 6;
    fr_graph *g = build_tiny_a(&r, V, D, &m, NULL);
    fr_train_options o = tiny_options(2, 5);
    o.freeze_regex = "^head\\.";
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 2);
    float w[66];
    CU_ASSERT_EQUAL(fr_trainer_get_param(t, "head.weight", w), FR_ERR_INVALID_ARG);
    int64_t win[12];
    random_windows(&r, win, 12, V);
    FR_ASSERT_OK(fr_trainer_step(t, win, 1, NULL));
    char dir[512], out[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(out, sizeof out, dir, "frozen.onnx");
    FR_ASSERT_OK(fr_trainer_export(t, out));
    fr_graph *eg;
    FR_ASSERT_OK(fr_onnx_load_file(out, &eg));
    int hv = fr_graph_find_value(eg, "head.weight"), gv = fr_graph_find_value(eg, "gain");
    CU_ASSERT_EQUAL(memcmp(eg->values[hv].constant->data, fdata(g, m.W), sizeof(float) * (size_t)(D * V)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(eg->values[gv].constant->data, fdata(g, m.gain), sizeof(float) * (size_t)D), 0);
    fr_graph_free(eg);
    fr_trainer_free(t);
    unlink(out);
    rmdir(dir);

    o.freeze_regex = NULL;
    o.train_regex = "^gain$";
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 1);
    CU_ASSERT_STRING_EQUAL(fr_trainer_param_name(t, 0), "gain");
    fr_trainer_free(t);
    o.train_regex = "nothing_matches";
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "no parameter to train"));
    o.train_regex = "([unbalanced";
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "([unbalanced"));
    fr_graph_free(g);
}

/* ---- a model that computes its own loss ---- */

/* tiny A with a labels input and an ai.fp8run SoftmaxCrossEntropy node writing "loss": trained
 * with --loss-output it must behave exactly like tiny A with the trainer's own loss head. */
static void test_loss_output(void)
{
    fr_rng r = fr_test_rng("loss_output");
    tiny_a m;
    const int64_t V = 13, B = 2, T = 6;
    fr_graph *g = build_tiny_a(&r, V, 8, &m, NULL);
    fr_graph *gl;
    FR_ASSERT_OK(fr_train_clone_graph(g, 0, &gl));
    fr_opset *ops = realloc(gl->opsets, 2 * sizeof *ops);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ops);
    gl->opsets = ops;
    gl->opsets[1].domain = strdup("ai.fp8run");
    gl->opsets[1].version = 1;
    gl->n_opsets = 2;
    int labels = add_input_bt(gl, "labels", FR_I64), loss, nid;
    int in[2] = {fr_graph_find_value(gl, "logits"), labels};
    FR_ASSERT_OK(fr_graph_add_value(gl, "model_loss", &loss));
    FR_ASSERT_OK(fr_graph_add_node(gl, "SoftmaxCrossEntropy", "ai.fp8run", "ce", 2, in, 1, &loss, &nid));
    gl->values[loss].flags |= FR_VAL_OUTPUT;
    FR_ASSERT_OK(fr_graph_mark_output(gl, loss));
    fr_train_options o = tiny_options(B, T), ol = o;
    ol.loss_output = "model_loss";
    fr_trainer *t, *tl;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    FR_ASSERT_OK(fr_trainer_new(gl, &ol, &tl));
    CU_ASSERT_EQUAL(fr_trainer_vocab(tl), 0); /* no Gather embedding to read it from */
    int64_t w[2 * 7];
    for (int s = 0; s < 4; s++) {
        random_windows(&r, w, B * (T + 1), V);
        fr_train_stats a, b;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &a));
        FR_ASSERT_OK(fr_trainer_step(tl, w, 1, &b));
        CU_ASSERT(bits_equal(a.loss, b.loss));
        CU_ASSERT(bits_equal(a.grad_norm, b.grad_norm));
    }
    double la, lb;
    FR_ASSERT_OK(fr_trainer_eval(t, w, &la));
    FR_ASSERT_OK(fr_trainer_eval(tl, w, &lb));
    CU_ASSERT(bits_equal(la, lb));
    CU_ASSERT_PTR_NOT_NULL(fr_trainer_eval_output(tl, "logits"));
    fr_trainer_free(t);
    fr_trainer_free(tl);
    fr_graph_free(gl);
    fr_graph_free(g);
}

/* ---- errors ---- */

static void test_errors(void)
{
    fr_rng r = fr_test_rng("trainer_errors");
    tiny_a m;
    const int64_t V = 11, B = 2, T = 13;
    fr_graph *g = build_tiny_a(&r, V, 4, &m, NULL);
    fr_train_options o = tiny_options(B, T);
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    /* a token id >= vocab: refused, nothing changes */
    int64_t w[28];
    random_windows(&r, w, 28, V);
    w[17] = V;
    CU_ASSERT_EQUAL(fr_trainer_step(t, w, 1, NULL), FR_ERR_RANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "vocabulary"));
    CU_ASSERT_EQUAL(fr_trainer_steps_done(t), 0);
    CU_ASSERT_EQUAL(fr_trainer_eval(t, w, NULL), FR_ERR_RANGE);
    /* ... and from a token file, through the loader's vocabulary check */
    char dir[512], p[600], ck[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(p, sizeof p, dir, "big_ids.bin");
    write_token_file(&r, p, 200, V + 5);
    fr_data_loader *dl = open_tokens(p, B, T, fr_trainer_vocab(t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    fr_status st = FR_OK;
    for (int i = 0; i < 5 && st == FR_OK; i++) st = fr_data_next(dl, FR_I64, w);
    CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
    fr_data_close(dl);
    unlink(p);
    /* a file too short for one batch */
    write_token_file(&r, p, B * (T + 1) - 1, V);
    fr_data_opts d = fr_data_opts_default();
    d.batch = B;
    d.seq_len = T;
    CU_ASSERT_NOT_EQUAL(fr_data_open(p, &d, &dl), FR_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "big_ids.bin"));
    unlink(p);
    /* a checkpoint of another model: the parameter and both shapes are named */
    tmp_path(ck, sizeof ck, dir, "other.ckpt");
    tiny_a m2;
    fr_graph *g2 = build_tiny_a(&r, V, 5, &m2, NULL);
    fr_trainer *t2;
    FR_ASSERT_OK(fr_trainer_new(g2, &o, &t2));
    FR_ASSERT_OK(fr_trainer_save(t2, ck, NULL, 0));
    CU_ASSERT_EQUAL(fr_trainer_load(t, ck, NULL, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "embed.weight"));
    fr_trainer_free(t2);
    fr_graph_free(g2);
    /* a corrupted checkpoint: byte 100 flipped (writing a constant changes nothing when the
       random weights put that very value there) */
    FILE *f = fopen(ck, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 100, SEEK_SET);
    const int byte = fgetc(f);
    CU_ASSERT_FATAL(byte != EOF);
    fseek(f, 100, SEEK_SET);
    fputc(byte ^ 0xff, f);
    fclose(f);
    CU_ASSERT_EQUAL(fr_trainer_load(t, ck, NULL, NULL), FR_ERR_PARSE);
    unlink(ck);
    rmdir(dir);
    fr_trainer_free(t);
    fr_graph_free(g);

    /* an input the trainer cannot feed */
    g = build_tiny_a(&r, V, 4, &m, "mystery_input");
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "mystery_input"));
    fr_graph_free(g);
    /* ... while the known ones are fed */
    g = build_tiny_a(&r, V, 4, &m, "attention_mask");
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_trainer_free(t);
    fr_graph_free(g);
    /* options */
    g = build_tiny_a(&r, V, 4, &m, NULL);
    o.precision = "fp16";
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    o = tiny_options(0, T);
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    o = tiny_options(B, T);
    o.loss_output = "no_such_value";
    CU_ASSERT_EQUAL(fr_trainer_new(g, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "no_such_value"));
    fr_graph_free(g);
}

/* ---- llama_tiny ---- */

static fr_train_options llama_options(void)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = 2;
    o.seq_len = 13;
    o.opt = fr_opt_config_adamw();
    o.opt.weight_decay = 0.1;
    o.opt.beta1 = 0.9;
    o.opt.beta2 = 0.95;
    o.opt.eps = 1e-8;
    o.lr.kind = FR_LR_CONSTANT;
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    return o;
}

static fr_graph *load_llama(void)
{
    char p[600];
    fr_graph *g = NULL;
    fr_status st = fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g);
    if (st != FR_OK) printf("\n  %s\n", fr_last_error());
    return g;
}

static int read_losses(double *out, int max)
{
    char p[600], line[256];
    FILE *f = fopen(fr_fixture(p, sizeof p, "train/llama_tiny_adamw_losses.txt"), "r");
    if (!f) return 0;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f))
        if (line[0] != '#') out[n++] = strtod(line, NULL);
    fclose(f);
    return n;
}

static void test_llama_follows_pytorch(void)
{
    double ref[20], got[20];
    CU_ASSERT_EQUAL_FATAL(read_losses(ref, 20), 20);
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = llama_options();
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    CU_ASSERT_EQUAL(fr_trainer_vocab(t), 128);
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 21);
    char p[600];
    fr_data_loader *dl = open_tokens(fr_fixture(p, sizeof p, "train/tokens.bin"), 2, 13, 128);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    FR_ASSERT_OK(train_run(t, dl, 0, 20, got, 0, NULL));
    double worst = 0;
    for (int s = 0; s < 20; s++) {
        double rel = fabs(got[s] - ref[s]) / fabs(ref[s]);
        if (rel > 1e-4) printf("\n  step %d: fp8run %.9g, PyTorch %.9g (rel %.2e)", s + 1, got[s], ref[s], rel);
        CU_ASSERT(rel <= 1e-4);
        worst = fmax(worst, rel);
    }
    printf(" (worst rel diff to PyTorch over 20 steps: %.2e; loss %.4f -> %.4f) ", worst, got[0], got[19]);
    fr_data_close(dl);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* Before any update the loss is the model's forward loss: an evaluation-only trainer (no
 * backward graph) on the first batch gives PyTorch's first loss. */
static void test_llama_eval_first_loss(void)
{
    double ref[20], loss;
    CU_ASSERT_EQUAL_FATAL(read_losses(ref, 20), 20);
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = llama_options();
    o.eval_only = 1;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    char p[600];
    fr_data_loader *dl = open_tokens(fr_fixture(p, sizeof p, "train/tokens.bin"), 2, 13, 128);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    int64_t w[28];
    FR_ASSERT_OK(fr_data_next(dl, FR_I64, w));
    FR_ASSERT_OK(fr_trainer_eval(t, w, &loss));
    printf(" (fp8run %.9g, PyTorch %.9g) ", loss, ref[0]);
    CU_ASSERT(fabs(loss - ref[0]) <= 1e-5 * ref[0]);
    const fr_tensor *logits = fr_trainer_eval_output(t, "logits");
    CU_ASSERT_PTR_NOT_NULL(logits);
    if (logits) CU_ASSERT_EQUAL(fr_tensor_numel(logits), 2 * 13 * 128);
    fr_data_close(dl);
    fr_trainer_free(t);
    fr_graph_free(g);
}

static void test_llama_resume(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = llama_options();
    char p[600];
    check_resume(g, &o, fr_fixture(p, sizeof p, "train/tokens.bin"));
    fr_graph_free(g);
}

static void test_llama_export(void)
{
    fr_rng r = fr_test_rng("llama_export");
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = llama_options();
    check_export(g, &o, &r, "llama_tiny");
    fr_graph_free(g);
}

static void test_llama_fp8_to_bf16(void)
{
    fr_rng r = fr_test_rng("llama_fp8_to_bf16");
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o8 = llama_options(), ob = llama_options(), o32 = llama_options();
    o8.precision = "fp8";
    o8.fp8.amax_history_len = 16;
    ob.precision = "bf16";
    fr_trainer *t8, *tb, *t32;
    FR_ASSERT_OK(fr_trainer_new(g, &o8, &t8));
    int64_t w[2 * 14];
    for (int s = 0; s < 3; s++) {
        random_windows(&r, w, 28, 128);
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t8, w, 1, &st));
        CU_ASSERT(!st.skipped && isfinite(st.loss));
    }
    char dir[512], ck[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(ck, sizeof ck, dir, "fp8.ckpt");
    FR_ASSERT_OK(fr_trainer_save(t8, ck, NULL, 0));
    FR_ASSERT_OK(fr_trainer_new(g, &ob, &tb));
    FR_ASSERT_OK(fr_trainer_load(tb, ck, NULL, NULL));
    FR_ASSERT_OK(fr_trainer_new(g, &o32, &t32));
    FR_ASSERT_OK(fr_trainer_load(t32, ck, NULL, NULL));
    double lb, l32;
    FR_ASSERT_OK(fr_trainer_eval(tb, w, &lb));
    FR_ASSERT_OK(fr_trainer_eval(t32, w, &l32));
    CU_ASSERT(fabs(lb - l32) <= 0.02 * fabs(l32)); /* bf16 rounding vs fp32 */
    fr_trainer_free(t8);
    fr_trainer_free(tb);
    fr_trainer_free(t32);
    unlink(ck);
    rmdir(dir);
    fr_graph_free(g);
}

/* Every fixture model builds an evaluation trainer; the inputs it feeds itself (BERT's
 * attention_mask = ones, token_type_ids = zeros) give the same logits as the executor run on
 * the prepared model with those arrays, and the loss is the cross-entropy of those logits. */
static void test_fixture_models_eval(void)
{
    static const struct {
        const char *dir;
        int64_t V, B, T;
    } fx[] = {{"gpt2_tiny", 96, 2, 11}, {"gpt2_tiny_op13", 96, 1, 5}, {"llama_tiny_op14", 128, 2, 7}, {"bert_tiny", 80, 2, 9}};
    fr_rng r = fr_test_rng("fixture_models_eval");
    for (size_t m = 0; m < sizeof fx / sizeof fx[0]; m++) {
        char p[600], rel[128];
        snprintf(rel, sizeof rel, "%s/model.onnx", fx[m].dir);
        fr_graph *g, *pg;
        FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g));
        FR_ASSERT_OK(fr_onnx_load_file(p, &pg));
        const int64_t B = fx[m].B, T = fx[m].T, V = fx[m].V;
        fr_train_options o = llama_options();
        o.batch = B;
        o.seq_len = T;
        o.eval_only = 1;
        fr_trainer *t;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        CU_ASSERT_EQUAL(fr_trainer_vocab(t), V);
        int64_t *w = malloc((size_t)(B * (T + 1)) * sizeof *w);
        random_windows(&r, w, B * (T + 1), V);
        double loss;
        FR_ASSERT_OK(fr_trainer_eval(t, w, &loss));
        const fr_tensor *lg = fr_trainer_eval_output(t, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
        /* the same forward by hand */
        fr_input_shape shapes[3];
        fr_tensor *ins[3] = {NULL, NULL, NULL};
        int n_in = pg->n_inputs;
        CU_ASSERT_FATAL(n_in <= 3);
        int64_t dims[2] = {B, T};
        for (int i = 0; i < n_in; i++) {
            const char *nm = pg->values[pg->inputs[i]].name;
            shapes[i].name = nm;
            shapes[i].rank = 2;
            shapes[i].dims[0] = B;
            shapes[i].dims[1] = T;
            FR_ASSERT_OK(fr_tensor_new(FR_I64, 2, dims, nm, &ins[i]));
            for (int64_t e = 0; e < B * T; e++)
                ((int64_t *)ins[i]->data)[e] = strcmp(nm, "input_ids") == 0       ? w[e / T * (T + 1) + e % T]
                                               : strcmp(nm, "attention_mask") == 0 ? 1
                                                                                   : 0;
        }
        fr_prepare_options po;
        fr_prepare_options_default(&po);
        po.input_shapes = shapes;
        po.n_input_shapes = n_in;
        FR_ASSERT_OK(fr_prepare_forward(pg, &po, NULL));
        int n_attn, n_rotary, n_swiglu, n_norm, n_gelu; /* the trainer's fusions: so does the forward by hand */
        FR_ASSERT_OK(fr_fuse_rmsnorm(pg, &n_norm));
        FR_ASSERT_OK(fr_fuse_gelu(pg, &n_gelu));
        FR_ASSERT_OK(fr_fuse_attention(pg, &n_attn));
        FR_ASSERT_OK(fr_fuse_rotary(pg, &n_rotary));
        FR_ASSERT_OK(fr_fuse_swiglu(pg, &n_swiglu, NULL));
        fr_exec *ex;
        FR_ASSERT_OK(fr_exec_new(pg, &ex));
        for (int i = 0; i < n_in; i++) FR_ASSERT_OK(fr_exec_set_input(ex, shapes[i].name, ins[i]));
        FR_ASSERT_OK(fr_exec_run(ex));
        const fr_tensor *y = fr_exec_output(ex, "logits");
        CU_ASSERT_PTR_NOT_NULL_FATAL(y);
        CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(y), fr_tensor_numel(lg));
        CU_ASSERT_EQUAL(memcmp(y->data, lg->data, y->nbytes), 0);
        double ref = 0;
        const float *z = y->data;
        for (int64_t row = 0; row < B * T; row++) {
            int64_t lab = w[row / T * (T + 1) + row % T + 1];
            double mx = -INFINITY, s = 0;
            for (int64_t v = 0; v < V; v++) mx = fmax(mx, z[row * V + v]);
            for (int64_t v = 0; v < V; v++) s += exp(z[row * V + v] - mx);
            ref += (mx + log(s) - z[row * V + lab]) / (double)(B * T);
        }
        CU_ASSERT(fabs(loss - ref) <= 1e-6 * fabs(ref));
        printf(" (%s: loss %.4f) ", fx[m].dir, loss);
        for (int i = 0; i < n_in; i++) fr_tensor_free(ins[i]);
        fr_exec_free(ex);
        free(w);
        fr_trainer_free(t);
        fr_graph_free(g);
        fr_graph_free(pg);
    }
}

/* ---- low-precision optimizer state and bf16 master weights (runtime/train/optim_lowp.h) ---- */

static const struct {
    fr_opt_state_dtype sd;
    int master;
} k_lowp[] = {{FR_OPT_STATE_F32, 1}, {FR_OPT_STATE_BF16, 0}, {FR_OPT_STATE_BF16, 1}, {FR_OPT_STATE_FP8, 0},
              {FR_OPT_STATE_FP8, 1}};

/* Every state dtype and master choice resumes bit-exact: llama_tiny (FP32), and the tiny model
 * compiled for fp8 with fused parameters (the state of a fused parameter is stored fused). */
static void test_lowp_resume(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_rng r = fr_test_rng("lowp_resume");
    fr_graph *gb = build_tiny_b(&r, 40, 32);
    char p[600], dir[512], tok[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(tok, sizeof tok, dir, "tokens.bin");
    write_token_file(&r, tok, 1000, 40);
    for (size_t i = 0; i < sizeof k_lowp / sizeof k_lowp[0]; i++) {
        fr_train_options o = llama_options();
        o.opt.state_dtype = k_lowp[i].sd;
        o.opt.master_bf16 = k_lowp[i].master;
        o.seed = 11;
        check_resume(g, &o, fr_fixture(p, sizeof p, "train/tokens.bin"));
        o = precision_options("fp8", 1);
        o.opt.state_dtype = k_lowp[i].sd;
        o.opt.master_bf16 = k_lowp[i].master;
        check_resume(gb, &o, tok);
    }
    unlink(tok);
    rmdir(dir);
    fr_graph_free(gb);
    fr_graph_free(g);
}

/* A checkpoint of one state dtype (or master choice) refuses a run of another, naming the flag. */
static void test_lowp_mismatch(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    char p[600], dir[512], ck[600];
    fr_test_tmpdir(dir, sizeof dir);
    tmp_path(ck, sizeof ck, dir, "fp8.ckpt");
    fr_train_options o = llama_options();
    o.opt.state_dtype = FR_OPT_STATE_FP8;
    fr_trainer *t, *u;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_data_loader *dl = open_tokens(fr_fixture(p, sizeof p, "train/tokens.bin"), 2, 13, 128);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    double loss[2];
    FR_ASSERT_OK(train_run(t, dl, 0, 2, loss, 2, ck));
    fr_train_options o2 = llama_options();
    FR_ASSERT_OK(fr_trainer_new(g, &o2, &u));
    CU_ASSERT_EQUAL(fr_trainer_load(u, ck, NULL, NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--optimizer-state fp8"));
    fr_trainer_free(u);
    o2.opt.state_dtype = FR_OPT_STATE_FP8;
    o2.opt.master_bf16 = 1;
    FR_ASSERT_OK(fr_trainer_new(g, &o2, &u));
    CU_ASSERT_EQUAL(fr_trainer_load(u, ck, NULL, NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--master-weights fp32"));
    fr_trainer_free(u);
    o2.opt.master_bf16 = 0;
    FR_ASSERT_OK(fr_trainer_new(g, &o2, &u));
    FR_ASSERT_OK(fr_trainer_load(u, ck, NULL, NULL));
    fr_trainer_free(u);
    fr_trainer_free(t);
    fr_data_close(dl);
    unlink(ck);
    rmdir(dir);
    fr_graph_free(g);
}

/* 200 steps of llama_tiny: the losses of every state dtype / master choice track FP32's. The
 * mean loss of the last 20 steps is within 1% of FP32's, and every step within 3%. */
static void test_lowp_tracks_fp32(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    enum { STEPS = 200 };
    static double ref[STEPS], got[STEPS];
    char p[600];
    for (int v = -1; v < (int)(sizeof k_lowp / sizeof k_lowp[0]); v++) {
        fr_train_options o = llama_options();
        if (v >= 0) {
            o.opt.state_dtype = k_lowp[v].sd;
            o.opt.master_bf16 = k_lowp[v].master;
        }
        fr_trainer *t;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        fr_data_loader *dl = open_tokens(fr_fixture(p, sizeof p, "train/tokens.bin"), 2, 13, 128);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        FR_ASSERT_OK(train_run(t, dl, 0, STEPS, v < 0 ? ref : got, 0, NULL));
        fr_trainer_free(t);
        fr_data_close(dl);
        if (v < 0) continue;
        double worst = 0, mr = 0, mg = 0;
        for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(got[s] - ref[s]) / ref[s]);
        for (int s = STEPS - 20; s < STEPS; s++) {
            mr += ref[s] / 20;
            mg += got[s] / 20;
        }
        printf("\n    %s state, %s master: last-20 mean loss %.5f vs FP32 %.5f (rel %.2e), worst step rel %.2e",
               fr_lowp_state_name(k_lowp[v].sd), k_lowp[v].master ? "bf16" : "fp32", mg, mr, fabs(mg - mr) / mr,
               worst);
        CU_ASSERT(fabs(mg - mr) <= 0.01 * mr);
        CU_ASSERT(worst <= 0.03);
    }
    printf(" (FP32 loss %.4f -> %.4f) ", ref[0], ref[STEPS - 1]);
    fr_graph_free(g);
}

static CU_TestInfo tiny_tests[] = {
    {"tiny model: gradients equal a double reference", test_tiny_gradients},
    {"tiny model: resume is bit-exact (AdamW cosine, SGD momentum)", test_tiny_resume},
    {"gradient accumulation K=2 x B/2 == K=1 x B", test_grad_accumulation},
    {"checkpoints across precisions (fp8 fused <-> bf16 unfused)", test_ckpt_across_precisions},
    {"fp8 / current / bf16 resume is bit-exact", test_fp8_resume},
    {"export round trip (fp8run, onnxruntime)", test_export_roundtrip},
    {"non-finite steps are skipped, then stop", test_skip_nonfinite},
    {"fp8: a NaN amax skips the step (delayed, current)", test_skip_fp8_nan},
    {"--freeze / --train regexes", test_freeze_and_train_regex},
    {"a model's own loss output (labels input fed)", test_loss_output},
    {"errors: token ids, short file, checkpoints, inputs, options", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo llama_tests[] = {
    {"llama_tiny evaluation-only loss == PyTorch's first loss", test_llama_eval_first_loss},
    {"fixture models: evaluation trainers feed their inputs", test_fixture_models_eval},
    {"llama_tiny FP32 follows PyTorch for 20 steps (1e-4)", test_llama_follows_pytorch},
    {"llama_tiny resume is bit-exact", test_llama_resume},
    {"llama_tiny export round trip", test_llama_export},
    {"llama_tiny checkpoint fp8 -> bf16 / fp32", test_llama_fp8_to_bf16},
    {"bf16/fp8 optimizer state, bf16 master: resume is bit-exact", test_lowp_resume},
    {"optimizer state dtype mismatch on resume is refused", test_lowp_mismatch},
    {"bf16/fp8 optimizer state tracks FP32 over 200 steps", test_lowp_tracks_fp32},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"trainer_tiny", NULL, NULL, NULL, NULL, tiny_tests},
    {"trainer_llama_tiny", NULL, NULL, NULL, NULL, llama_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
