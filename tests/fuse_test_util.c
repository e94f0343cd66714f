/* Fusion pass test support (see fuse_test_util.h). */
#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "runtime/io/npy.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/gradcheck.h"

fr_status fr_ft_prepare(fr_graph *g, int64_t batch, int64_t seq)
{
    fr_input_shape sh[8];
    int n = 0;
    for (int i = 0; i < g->n_inputs && n < 8; i++, n++) {
        sh[n].name = g->values[g->inputs[i]].name;
        sh[n].rank = 2;
        sh[n].dims[0] = batch;
        sh[n].dims[1] = seq;
    }
    fr_prepare_options po;
    fr_prepare_options_default(&po);
    po.input_shapes = sh;
    po.n_input_shapes = n;
    return fr_prepare_forward(g, &po, NULL);
}

fr_tensor *fr_ft_run(fr_graph *g, int n_in, const int *vids, const fr_tensor *const *ins, int out)
{
    for (int i = 0; i < n_in; i++) {
        fr_tensor *c;
        FR_ASSERT_OK(fr_tensor_clone(ins[i], "input", &c));
        g->values[vids[i]].constant = c;
    }
    fr_tensor **t = calloc((size_t)g->n_values, sizeof *t), *result = NULL;
    CU_ASSERT_FATAL(t != NULL);
    FR_ASSERT_OK(fr_gc_run(g, t));
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, out), "output", &result));
    fr_gc_free_tensors(g, t);
    free(t);
    for (int i = 0; i < n_in; i++) {
        fr_tensor_free(g->values[vids[i]].constant);
        g->values[vids[i]].constant = NULL;
    }
    return result;
}

void fr_ft_train_options(fr_train_options *o)
{
    fr_train_options_default(o);
    o->batch = 2;
    o->seq_len = 16;
    o->lr.max_lr = 3e-3;
}

void fr_ft_train_losses(const fr_graph *g, const fr_train_options *o, double *loss, int *n_attention)
{
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(g, o, &t);
    if (st != FR_OK) printf("\n  %s: %s", o->precision ? o->precision : "fp32", fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    if (n_attention) {
        const fr_fp8_report *rep = fr_trainer_fp8_report(t);
        *n_attention = rep ? rep->n_attention : -1;
    }
    const int64_t row = o->seq_len + 1, n = o->batch * row;
    int64_t *w = malloc(sizeof(int64_t) * (size_t)n);
    CU_ASSERT_FATAL(w != NULL);
    uint64_t s = 12345;
    for (int k = 0; k < FR_FT_STEPS; k++) {
        for (int64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull; /* a learnable stream: */
            w[i] = i % row == 0 ? (int64_t)((s >> 33) % 64) : (w[i - 1] * 5 + 3) % 64; /* x' = 5x + 3 */
        }
        fr_train_stats stats;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &stats));
        loss[k] = stats.loss;
    }
    free(w);
    fr_trainer_free(t);
}

double fr_ft_expect_same_losses(const char *what, const double *fused, const double *plain, double tol)
{
    double worst = 0;
    for (int k = 0; k < FR_FT_STEPS; k++) worst = fmax(worst, fabs(fused[k] - plain[k]) / fabs(plain[k]));
    if (worst > tol) printf("\n  %s: fused vs unfused losses differ by %g relative", what, worst);
    CU_ASSERT(worst <= tol);
    CU_ASSERT(plain[FR_FT_STEPS - 1] < plain[0]); /* it trains */
    return worst;
}

/* What `--train FR_FT_HF_TRAIN` does: the exporter's constants (exponent, eps, tables) untrained. */
void fr_ft_freeze_constants(fr_graph *g)
{
    regex_t re;
    CU_ASSERT_FATAL(regcomp(&re, FR_FT_HF_TRAIN, REG_EXTENDED | REG_NOSUB) == 0);
    for (int i = 0; i < g->n_values; i++)
        if ((g->values[i].flags & FR_VAL_PARAM) && regexec(&re, g->values[i].name, 0, NULL, 0) != 0)
            g->values[i].flags &= ~FR_VAL_PARAM;
    regfree(&re);
}

fr_graph *fr_ft_open_hf(const char *dir)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/model.onnx", dir);
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g));
    return g;
}

void fr_ft_hf_train_options(fr_train_options *o)
{
    fr_train_options_default(o);
    o->batch = 2;
    o->seq_len = 11;
    /* what the CLI trains with no --train: the exporter's parameter record (FR_FT_HF_TRAIN would
       also train a dynamic export's RoPE inv_freq buffer, and the RoPE would stay unfused) */
    o->train_regex = NULL;
}

/* Loads fixture dir, prepared for its [2, 11] inputs, constants frozen. */
fr_graph *fr_ft_load_hf(const char *dir)
{
    fr_graph *g = fr_ft_open_hf(dir);
    FR_ASSERT_OK(fr_ft_prepare(g, 2, 11));
    fr_ft_freeze_constants(g);
    return g;
}

fr_tensor *fr_ft_hf_logits(fr_graph *g, const char *dir)
{
    char rel[300], p[600];
    int vids[8] = {0}, n = 0;
    fr_tensor *ins[8] = {0};
    for (int i = 0; i < g->n_inputs && n < 8; i++, n++) {
        vids[n] = g->inputs[i];
        snprintf(rel, sizeof rel, "hf/%s/input_%s.npy", dir, g->values[vids[n]].name);
        FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &ins[n]));
    }
    fr_tensor *y = fr_ft_run(g, n, vids, (const fr_tensor *const *)ins, g->outputs[0]);
    for (int i = 0; i < n; i++) fr_tensor_free(ins[i]);
    return y;
}

/* Runs g on the fixture's inputs; asserts logits within 1e-4 of PyTorch's. */
void fr_ft_expect_hf_logits(fr_graph *g, const char *dir)
{
    char rel[300], p[600];
    snprintf(rel, sizeof rel, "hf/%s/output_logits.npy", dir);
    fr_tensor *want;
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &want));
    fr_tensor *got = fr_ft_hf_logits(g, dir);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(got), fr_tensor_numel(want));
    double e = fr_rel_l2(got->data, want->data, fr_tensor_numel(want));
    if (!(e <= 1e-4)) printf("\n  %s: logits differ from PyTorch's by %g", dir, e);
    CU_ASSERT(e <= 1e-4);
    fr_tensor_free(got);
    fr_tensor_free(want);
}


/* The output and the gradients of the inputs named wrt[] (res[0], res[1..n_wrt]) of pattern
 * `kind`, after the pass when `pass` is given (its count in *n_fused). */
static void pattern_run(fr_ft_build_fn build, int kind, int64_t opset, uint64_t seed, const double *dy, fr_ft_pass_fn pass,
                        int *n_fused, int n_wrt, const char *const *names, fr_tensor **res)
{
    fr_graph *g = fr_gc_new_graph(opset);
    CU_ASSERT_FATAL(g != NULL);
    build(g, seed, kind);
    FR_ASSERT_OK(fr_graph_resolve_ops(g));
    if (pass) FR_ASSERT_OK(pass(g, n_fused));
    int wrt[8], grads[8];
    for (int i = 0; i < n_wrt; i++) wrt[i] = fr_graph_find_value(g, names[i]); /* ids move when a pass compacts */
    const int yv = g->outputs[g->n_outputs - 1];
    fr_tensor **t = fr_gc_backprop(g, yv, dy, n_wrt, wrt, grads);
    CU_ASSERT_FATAL(t != NULL);
    FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, yv), "y", &res[0]));
    for (int i = 0; i < n_wrt; i++) FR_ASSERT_OK(fr_tensor_clone(fr_gc_value(g, t, grads[i]), "grad", &res[1 + i]));
    fr_gc_free_tensors(g, t);
    free(t);
    fr_graph_free(g);
}

void fr_ft_check_pattern(fr_ft_build_fn build, int kind, int64_t opset, fr_ft_pass_fn pass, int want, int n_wrt,
                         const char *const *wrt, double tol)
{
    fr_rng r = fr_test_rng("fuse_pattern");
    const uint64_t seed = r.s | 1;
    fr_graph *probe = fr_gc_new_graph(opset); /* the output's size, for dy */
    CU_ASSERT_FATAL(probe != NULL && n_wrt <= 8);
    build(probe, seed, kind);
    const fr_value *yv = &probe->values[probe->outputs[probe->n_outputs - 1]];
    int64_t cnt = 1;
    for (int k = 0; k < yv->rank; k++) cnt *= yv->dims[k];
    fr_graph_free(probe);
    double *dy = malloc(sizeof(double) * (size_t)(cnt ? cnt : 1));
    CU_ASSERT_FATAL(dy != NULL);
    for (int64_t i = 0; i < cnt; i++) dy[i] = fr_rng_normal(&r);
    fr_tensor *plain[9], *fused[9];
    int got = -1;
    pattern_run(build, kind, opset, seed, dy, NULL, NULL, n_wrt, wrt, plain);
    pattern_run(build, kind, opset, seed, dy, pass, &got, n_wrt, wrt, fused);
    if (got != want) printf("\n  kind %d: %d fused, expected %d", kind, got, want);
    CU_ASSERT_EQUAL(got, want);
    for (int i = 0; i <= n_wrt; i++) {
        double e = fr_gc_rel_l2(fused[i], plain[i]);
        if (!(e <= tol)) printf("\n  kind %d: fused %s%s differs by %g", kind, i ? "d" : "y", i ? wrt[i - 1] : "", e);
        CU_ASSERT(e <= tol);
        fr_tensor_free(plain[i]);
        fr_tensor_free(fused[i]);
    }
    free(dy);
}

int fr_ft_same_training(fr_trainer *const *t, int n, int64_t batch, int64_t seq, int64_t vocab, int k, int steps,
                        const char *rng_name)
{
    fr_rng rng = fr_test_rng(rng_name);
    const int64_t nw = (int64_t)k * batch * (seq + 1);
    int64_t *w = malloc((size_t)nw * sizeof *w);
    fr_train_stats *st = malloc((size_t)n * sizeof *st);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w && st);
    int same = 1;
    for (int s = 0; s < steps; s++) {
        for (int64_t i = 0; i < nw; i++) w[i] = (int64_t)(fr_rng_uniform(&rng) * (double)vocab);
        for (int j = 0; j < n; j++) FR_ASSERT_OK(fr_trainer_step(t[j], w, k, &st[j]));
        for (int j = 1; j < n; j++) {
            CU_ASSERT_EQUAL(st[j].skipped, st[0].skipped);
            same &= memcmp(&st[j].loss, &st[0].loss, sizeof(double)) == 0;
            same &= memcmp(&st[j].grad_norm, &st[0].grad_norm, sizeof(double)) == 0;
            CU_ASSERT_EQUAL_FATAL(t[j]->n_params, t[0]->n_params);
            for (int i = 0; i < t[0]->n_params; i++)
                same &= memcmp(t[j]->params[i].acc, t[0]->params[i].acc,
                               (size_t)t[0]->params[i].numel * sizeof(float)) == 0;
        }
    }
    for (int i = 0; i < fr_trainer_param_count(t[0]); i++) {
        const int64_t m = fr_trainer_param_numel(t[0], i);
        float *a = malloc((size_t)m * sizeof *a), *b = malloc((size_t)m * sizeof *b);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a && b);
        FR_ASSERT_OK(fr_trainer_get_param(t[0], fr_trainer_param_name(t[0], i), a));
        for (int j = 1; j < n; j++) {
            FR_ASSERT_OK(fr_trainer_get_param(t[j], fr_trainer_param_name(t[0], i), b));
            same &= memcmp(a, b, (size_t)m * sizeof *a) == 0;
        }
        free(a);
        free(b);
    }
    free(w);
    free(st);
    return same;
}
