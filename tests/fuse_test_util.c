/* Fusion pass test support (see fuse_test_util.h). */
#include <math.h>
#include <stdlib.h>

#include "fuse_test_util.h"
#include "gradcheck.h"
#include "passes/passes.h"

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
