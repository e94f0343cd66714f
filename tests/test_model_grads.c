/* Whole-model gradients of the fixture models (GPT-2, GPT-2 at opset 13 unfolded, Llama,
 * Llama at opset 14 with dims that are not multiples of 16, BERT) against PyTorch autograd.
 *
 * tools/gen_grad_reference.py rebuilt each exported module, ran it in float64 on fixed token
 * windows and stored d(mean next-token cross-entropy)/d(initializer) for every float
 * initializer of the ONNX file (tests/fixtures/grads/<model>/). Here the trainer builds its
 * backward graph (fp32, every float initializer trained) and takes one step with SGD at
 * learning rate 0 and no clipping, so the optimizer's gradient buffers hold the raw gradient.
 * Every parameter's gradient must match within 1e-4 relative L2, and the loss within 1e-5. The
 * relative error's denominator is at least 1e-4 of the norm of all gradients: a gradient that is
 * zero in exact arithmetic (BERT's key bias: softmax ignores a shift of a whole row) is float32
 * rounding noise in fp8run and ~1e-17 in the float64 reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "runtime/io/npy.h"
#include "runtime/train/trainer.h"

#define GRAD_TOL 1e-4
#define LOSS_TOL 1e-5

static void check_model(const char *name)
{
    char p[600], rel[128];
    snprintf(rel, sizeof rel, "%s/model.onnx", name);
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, rel), &g));
    fr_tensor *win = NULL, *ref = NULL;
    snprintf(rel, sizeof rel, "grads/%s/windows.npy", name);
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &win));
    snprintf(rel, sizeof rel, "grads/%s/grads.npy", name);
    FR_ASSERT_OK(fr_npy_load(fr_fixture(p, sizeof p, rel), &ref));
    CU_ASSERT_FATAL(win->dtype == FR_I64 && win->rank == 2 && ref->dtype == FR_F32);

    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = win->dims[0];
    o.seq_len = win->dims[1] - 1;
    o.opt = fr_opt_config_sgd();
    o.lr.max_lr = 0.0;
    o.grad_clip = 0; /* the raw gradient stays in the optimizer's buffers */
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_train_stats st;
    FR_ASSERT_OK(fr_trainer_step(t, win->data, 1, &st));
    CU_ASSERT_FALSE(st.skipped);

    snprintf(rel, sizeof rel, "grads/%s/manifest.txt", name);
    FILE *f = fopen(fr_fixture(p, sizeof p, rel), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    double ref_loss = NAN;
    CU_ASSERT_EQUAL(fscanf(f, "loss %lf\n", &ref_loss), 1);
    double loss_err = fabs(st.loss - ref_loss) / fabs(ref_loss);
    CU_ASSERT(loss_err <= LOSS_TOL);

    fr_optimizer *opt = fr_trainer_optimizer(t);
    const float *ref_at = ref->data;
    int64_t left = fr_tensor_numel(ref);
    double all2 = 0;
    for (int64_t e = 0; e < left; e++) all2 += (double)ref_at[e] * ref_at[e];
    const double floor = 1e-4 * sqrt(all2);
    double worst = 0;
    const char *worst_name = "";
    char pname[256];
    long long numel;
    int n_checked = 0;
    static char worst_buf[256];
    while (fscanf(f, "%255s %lld\n", pname, &numel) == 2) {
        CU_ASSERT_FATAL(numel <= left);
        int i = fr_optimizer_find_param(opt, pname);
        if (i < 0) printf("\n  %s: parameter %s is not trained", name, pname);
        CU_ASSERT_FATAL(i >= 0);
        CU_ASSERT_EQUAL_FATAL(fr_optimizer_param_numel(opt, i), numel);
        const float *got = fr_optimizer_param(opt, i)->grad;
        double d2 = 0, r2 = 0;
        for (int64_t e = 0; e < numel; e++) {
            double d = (double)got[e] - ref_at[e];
            d2 += d * d;
            r2 += (double)ref_at[e] * ref_at[e];
        }
        double err = isfinite(d2) ? sqrt(d2) / fmax(sqrt(r2), floor) : INFINITY;
        if (err > GRAD_TOL) printf("\n  %s: gradient of %s: rel err %.3g", name, pname, err);
        CU_ASSERT(err <= GRAD_TOL);
        if (err > worst) {
            worst = err;
            snprintf(worst_buf, sizeof worst_buf, "%s", pname);
            worst_name = worst_buf;
        }
        ref_at += numel;
        left -= numel;
        n_checked++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(left, 0);
    CU_ASSERT_EQUAL(n_checked, fr_trainer_param_count(t));
    printf(" (%s: loss rel %.1e, %d gradients, worst rel L2 %.2e at %s)", name, loss_err, n_checked,
           worst, worst_name);
    fr_trainer_free(t);
    fr_tensor_free(win);
    fr_tensor_free(ref);
    fr_graph_free(g);
}

static void test_gpt2(void) { check_model("gpt2_tiny"); }
static void test_gpt2_op13(void) { check_model("gpt2_tiny_op13"); }
static void test_llama(void) { check_model("llama_tiny"); }
static void test_llama_op14(void) { check_model("llama_tiny_op14"); }
static void test_bert(void) { check_model("bert_tiny"); }

static CU_TestInfo tests[] = {
    {"gpt2_tiny gradients == PyTorch autograd (1e-4)", test_gpt2},
    {"gpt2_tiny_op13 gradients == PyTorch autograd (1e-4)", test_gpt2_op13},
    {"llama_tiny gradients == PyTorch autograd (1e-4)", test_llama},
    {"llama_tiny_op14 gradients == PyTorch autograd (1e-4)", test_llama_op14},
    {"bert_tiny gradients == PyTorch autograd (1e-4)", test_bert},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"model_gradients", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
