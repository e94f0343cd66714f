/* LinearCrossEntropy (ops/linear_ce.h, ops/cuda/linear_ce.cu) on the GPU (label gpu: skips
 * without a device):
 *  - against the CPU op on fresh random inputs: fp32 and bf16 precision, both weight layouts,
 *    float32 / bfloat16 X, y_dtype and dx_dtype float32 / bfloat16, int64 / int32 labels,
 *    ignored rows (some, all), a dloss other than 1, chunk sizes that do and do not divide the
 *    rows, vocabularies on the warp path (<= 2048) and the block path, vector and scalar loads
 *    (odd V). Tolerances (relative L2 of every output): fp32 2e-5 (cuBLASLt's float32 sums in
 *    another order than the CPU's, exp in float: the kernels' 1e-5 contract, twice for the
 *    chained GEMMs), bf16 1e-2 (a logit or dlogit whose bf16 rounding flips: the bf16 Linear's
 *    GPU tolerance);
 *  - against the unfused chain on the GPU (Linear, SoftmaxCrossEntropy(+Grad), LinearGradData,
 *    LinearGradWeight run as their own nodes, the same inputs): fp32 2e-5, bf16 2e-3;
 *  - a short training run (bf16, generated Llama): 10 steps with --chunked-lm-head on against
 *    the CPU with it on (losses within 1e-3 relative: test_gpu_train's tolerance) and against
 *    the GPU with it off (1e-3), and with a 131072 vocabulary and 1024 tokens a micro-batch
 *    (chunks of 512 rows: two chunks a step, the weight gradient accumulated across them) on
 *    against off on the GPU (1e-3); no step skipped;
 *  - SFT on llama_tiny (packing off, two micro-batches a step: dloss is each micro-batch's loss
 *    weight): the GPU against the CPU with it on, 6 steps within 1e-3. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "ops/linear_ce.h"
#include "runtime/io/data.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"
#include "tests/gpu_harness.h"

typedef struct gcase {
    int64_t M, K, V;
    int transB, bf16, x_bf16, y_bf16, dx_bf16, i32;
    int64_t chunk;
    double p_ignore;
    float dloss;
} gcase;

typedef struct gdata {
    fr_tensor *x, *w, *lb, *dl;
} gdata;

static void make(const gcase *c, fr_rng *r, gdata *d)
{
    int64_t xd[2] = {c->M, c->K}, wd[2] = {c->transB ? c->V : c->K, c->transB ? c->K : c->V};
    d->x = tt_randn(r, FR_F32, 2, xd, 0, 1);
    if (c->x_bf16) {
        fr_tensor *b = tt_new(FR_BF16, 2, xd);
        for (int64_t i = 0; i < c->M * c->K; i++) ((uint16_t *)b->data)[i] = fr_f32_to_bf16(((float *)d->x->data)[i]);
        fr_tensor_free(d->x);
        d->x = b;
    }
    d->w = tt_randn(r, FR_F32, 2, wd, 0, 1.0 / sqrt((double)c->K));
    d->lb = tt_new(c->i32 ? FR_I32 : FR_I64, 1, &c->M);
    for (int64_t i = 0; i < c->M; i++)
        tt_set(d->lb, i, fr_rng_uniform(r) < c->p_ignore ? -100.0 : (double)tt_rand_int(r, 0, c->V - 1));
    d->dl = tt_scalar(FR_F32, c->dloss);
}

static void unmake(gdata *d)
{
    fr_tensor_free(d->x);
    fr_tensor_free(d->w);
    fr_tensor_free(d->lb);
    fr_tensor_free(d->dl);
}

static void attrs(tnode *t, const gcase *c)
{
    TN_ATTR(t, int, "transB", c->transB);
    TN_ATTR(t, string, "precision", c->bf16 ? "bf16" : "fp32");
}

/* transB = 1 cases give W as a constant (a parameter: its bf16 copy kept in the node's persistent
   memory), transB = 0 ones as a graph input (converted into scratch every run) */
static void fused_node(tnode *t, const gcase *c, const gdata *d)
{
    fr_tensor *ins[4] = {d->x, d->w, d->lb, d->dl};
    tn_init_domain(t, FR_DOMAIN_FP8RUN, "LinearCrossEntropy", 1, 4, ins, c->transB ? 2u : 0u, 3);
    attrs(t, c);
    if (c->y_bf16) TN_ATTR(t, string, "y_dtype", "bfloat16");
    if (c->dx_bf16) TN_ATTR(t, string, "dx_dtype", "bfloat16");
    TN_ATTR(t, int, "chunk_rows", c->chunk);
}

/* one unfused node on the GPU; its outputs (host copies) into out */
static void gpu_node(const char *op, int n_in, fr_tensor **ins, const gcase *c, int which, fr_tensor **out)
{
    tnode t;
    tn_init_domain(&t, FR_DOMAIN_FP8RUN, op, 1, n_in, ins, 0u, 1);
    if (which == 0 || which == 3 || which == 4) attrs(&t, c);
    if (which == 0 && c->y_bf16) TN_ATTR(&t, string, "y_dtype", "bfloat16");
    if (which == 3 && c->dx_bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16");
    if (which == 2 && c->bf16) TN_ATTR(&t, string, "dx_dtype", "bfloat16"); /* the narrowed chain's dlogits */
    FR_ASSERT_OK(tn_run(&t)); /* shapes (and the CPU values, unused) */
    FR_ASSERT_OK(tn_run_gpu(&t, out));
    tn_free(&t);
}

static void check_case(const gcase *c, const char *label)
{
    fr_rng r = fr_test_rng(label);
    gdata d;
    make(c, &r, &d);
    const double tol = c->bf16 ? 1e-2 : 2e-5;
    tnode t;
    fused_node(&t, c, &d);
    FR_ASSERT_OK(tn_run(&t));
    char what[300];
    snprintf(what, sizeof what, "LinearCrossEntropy vs CPU: %s", label);
    gpu_check(&t, tol, what);
    /* against the unfused chain on the GPU */
    fr_tensor *fused[TN_MAX] = {0}, *y[1], *loss[1], *dy[1], *dx[1], *dw[1];
    FR_ASSERT_OK(tn_run_gpu(&t, fused));
    gpu_node("Linear", 2, (fr_tensor *[]){d.x, d.w}, c, 0, y);
    gpu_node("SoftmaxCrossEntropy", 2, (fr_tensor *[]){y[0], d.lb}, c, 1, loss);
    gpu_node("SoftmaxCrossEntropyGrad", 3, (fr_tensor *[]){d.dl, y[0], d.lb}, c, 2, dy);
    gpu_node("LinearGradData", 2, (fr_tensor *[]){dy[0], d.w}, c, 3, dx);
    gpu_node("LinearGradWeight", 2, (fr_tensor *[]){d.x, dy[0]}, c, 4, dw);
    const double tu = c->bf16 ? 2e-3 : 2e-5;
    const fr_tensor *un[3] = {loss[0], dx[0], dw[0]};
    const char *names[3] = {"loss", "dX", "dW"};
    for (int o = 0; o < 3; o++) {
        const double e = gpu_rel_err(fused[o], un[o]);
        if (e > tu) {
            fprintf(stderr, "\n  %s: fused vs unfused GPU %s: rel err %.3g > %.1g", label, names[o], e, tu);
            gpu_print_mismatch(names[o], fused[o], un[o], e, tu);
        }
        CU_ASSERT(e <= tu);
    }
    for (int o = 0; o < 3; o++) fr_tensor_free(fused[o]);
    fr_tensor_free(y[0]);
    fr_tensor_free(loss[0]);
    fr_tensor_free(dy[0]);
    fr_tensor_free(dx[0]);
    fr_tensor_free(dw[0]);
    tn_free(&t);
    unmake(&d);
}

static void test_op(void)
{
    static const struct {
        int64_t M, K, V, chunk;
    } sh[] = {{37, 24, 53, 7}, {64, 64, 1000, 64}, {300, 128, 32000, 128}, {257, 96, 50257, 100}, {130, 64, 131072, 64}};
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
        for (int prec = 0; prec < 2; prec++)
            for (int tb = 0; tb < 2; tb++) {
                gcase c = {sh[s].M, sh[s].K, sh[s].V, tb, prec, prec && (s & 1), prec && tb, prec && (s & 1), (int)(s & 1),
                           sh[s].chunk, s == 2 ? 0.3 : 0.05, tb ? 0.37f : 1.0f};
                char label[200];
                snprintf(label, sizeof label, "M%lld K%lld V%lld chunk %lld %s transB=%d x%d y%d dx%d", (long long)c.M,
                         (long long)c.K, (long long)c.V, (long long)c.chunk, prec ? "bf16" : "fp32", tb, c.x_bf16,
                         c.y_bf16, c.dx_bf16);
                check_case(&c, label);
            }
    gcase all = {20, 16, 300, 1, 1, 0, 1, 0, 0, 6, 1.0, 1.0f}; /* every row ignored */
    check_case(&all, "every row ignored");
    printf(" (outputs: %d bit for bit with the CPU, %d within the tolerance) ", gpu_n_exact, gpu_n_close);
}

/* ---- training ---- */

static void train(const fr_llama_config *lc, const char *device, int on, int64_t B, int64_t T, int steps, double *loss)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(lc, &model));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.precision = "bf16";
    o.device = device;
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.chunked_lm_head = on;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    int n = 0;
    for (int i = 0; i < t->g->n_nodes; i++) n += strcmp(t->g->nodes[i].op_type, "LinearCrossEntropy") == 0;
    CU_ASSERT_EQUAL(n, on);
    const int64_t row = T + 1, V = lc->vocab;
    int64_t *w = malloc(sizeof(int64_t) * (size_t)(B * row));
    CU_ASSERT_FATAL(w != NULL);
    uint64_t s = 4242;
    for (int k = 0; k < steps; k++) {
        for (int64_t i = 0; i < B * row; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            w[i] = i % row == 0 ? (int64_t)((s >> 33) % (uint64_t)V) : (w[i - 1] * 5 + 3) % V;
        }
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step(t, w, 1, &st));
        CU_ASSERT_EQUAL(st.skipped, 0);
        loss[k] = st.loss;
    }
    free(w);
    fr_trainer_free(t);
    fr_graph_free(model);
}

static double worst_rel(const double *a, const double *b, int n)
{
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]) / fabs(b[i]));
    return w;
}

static void test_training(void)
{
    enum { STEPS = 10 };
    const fr_llama_config small = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 64, .seed = 3};
    double cpu_on[STEPS], gpu_on[STEPS], gpu_off[STEPS];
    train(&small, "cpu", 1, 4, 32, STEPS, cpu_on);
    train(&small, "cuda", 1, 4, 32, STEPS, gpu_on);
    train(&small, "cuda", 0, 4, 32, STEPS, gpu_off);
    const double e_cpu = worst_rel(gpu_on, cpu_on, STEPS), e_off = worst_rel(gpu_on, gpu_off, STEPS);
    printf("\n  small: GPU on vs CPU on %.2e, GPU on vs off %.2e (loss %d: %.6f)", e_cpu, e_off, STEPS - 1, gpu_on[STEPS - 1]);
    CU_ASSERT(e_cpu <= 1e-3);
    CU_ASSERT(e_off <= 1e-3);
    /* a vocabulary big enough for two chunks of 512 rows in a micro-batch of 1024 tokens */
    const fr_llama_config big = {.d = 64, .layers = 1, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 131072, .max_seq = 256, .seed = 5};
    CU_ASSERT_EQUAL(fr_lce_chunk_rows(1024, big.vocab), 512);
    double on[STEPS], off[STEPS];
    train(&big, "cuda", 1, 4, 256, STEPS, on);
    train(&big, "cuda", 0, 4, 256, STEPS, off);
    const double e_big = worst_rel(on, off, STEPS);
    printf("\n  vocab 131072, 2 chunks: GPU on vs off %.2e (loss 0 %.6f, loss %d %.6f)", e_big, on[0], STEPS - 1, on[STEPS - 1]);
    CU_ASSERT(e_big <= 1e-3);
}

/* SFT (the loss weight as dloss, moved before the head) on llama_tiny's SFT fixture, two
 * micro-batches a step: the GPU with the option on against the CPU with it on, 6 steps */
static void sft_losses(const char *device, double *loss)
{
    enum { B = 2, T = 13, W = T + 1, K = 2, STEPS = 6 };
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = B;
    o.seq_len = T;
    o.grad_accum = K;
    o.precision = "bf16";
    o.device = device;
    o.lr.max_lr = 1e-3;
    o.sft = 1;
    o.sft_padded = 1;
    o.chunked_lm_head = 1;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_data_opts d = fr_data_opts_default();
    d.batch = B;
    d.seq_len = T;
    d.order = FR_DATA_SEQUENTIAL;
    d.vocab_size = 128;
    d.packing = 0;
    fr_data_loader *dl = NULL;
    FR_ASSERT_OK(fr_data_open(fr_fixture(p, sizeof p, "sft/llama_sft.bin"), &d, &dl));
    int64_t w[K * B * W];
    int32_t seg[K * B * W];
    uint8_t tgt[K * B * W];
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < K; m++)
            FR_ASSERT_OK(fr_data_next_sft(dl, w + m * B * W, seg + m * B * W, tgt + m * B * W, NULL));
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step_sft(t, w, seg, tgt, K, &st));
        loss[s] = st.loss;
    }
    fr_data_close(dl);
    fr_trainer_free(t);
    fr_graph_free(g);
}

static void test_sft(void)
{
    double cpu[6], gpu[6];
    sft_losses("cpu", cpu);
    sft_losses("cuda", gpu);
    const double e = worst_rel(gpu, cpu, 6);
    printf("\n  SFT, 2 micro-batches: GPU vs CPU %.2e (loss 5: %.6f / %.6f)", e, gpu[5], cpu[5]);
    CU_ASSERT(e <= 1e-3);
}

static CU_TestInfo tests[] = {
    {"SFT with --chunked-lm-head on vs the CPU", test_sft},
    {"LinearCrossEntropy vs the CPU op and the unfused GPU chain", test_op},
    {"training with --chunked-lm-head on vs the CPU and vs off", test_training},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {{"gpu_linear_ce", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return gpu_test_main(suites); }
