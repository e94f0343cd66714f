/* Supervised fine-tuning in the trainer (runtime/train/train_sft.c) on llama_tiny:
 *  - 20 fp32 steps on tests/fixtures/sft/llama_sft.bin with packing off follow PyTorch trained
 *    with labels -100 off the targets (tools/gen_sft_reference.py), with one micro-batch per step
 *    and with two (the loss and gradient token-weighted over both), within 1e-4;
 *  - packed and unpacked evaluation of the same examples give the same target-token loss;
 *  - examples packed into one window do not see each other: an example whose target copies a
 *    token of the example before it has the same loss packed as alone, which it does not when the
 *    two are one segment (then attention crosses and the loss changes);
 *  - malformed segment ids and SFT calls on a plain trainer are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "runtime/io/data.h"
#include "runtime/train/trainer.h"
#include "tests/harness.h"

#define B 2
#define T 13
#define W (T + 1)

static fr_train_options options(int64_t batch, int k)
{
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = batch;
    o.seq_len = T;
    o.opt = fr_opt_config_adamw();
    o.opt.weight_decay = 0.1;
    o.opt.beta1 = 0.9;
    o.opt.beta2 = 0.95;
    o.opt.eps = 1e-8;
    o.lr.kind = FR_LR_CONSTANT;
    o.lr.max_lr = 1e-3;
    o.grad_clip = 1.0;
    o.grad_accum = k;
    o.sft = 1;
    return o;
}

static fr_graph *load_llama(void)
{
    char p[600];
    fr_graph *g = NULL;
    if (fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g) != FR_OK)
        printf("\n  %s\n", fr_last_error());
    return g;
}

static fr_data_loader *open_sft(int64_t batch, int packing)
{
    char p[600];
    fr_data_opts d = fr_data_opts_default();
    d.batch = batch;
    d.seq_len = T;
    d.order = FR_DATA_SEQUENTIAL;
    d.vocab_size = 128;
    d.packing = packing;
    fr_data_loader *dl = NULL;
    if (fr_data_open(fr_fixture(p, sizeof p, "sft/llama_sft.bin"), &d, &dl) != FR_OK)
        printf("\n  %s\n", fr_last_error());
    return dl;
}

static int read_losses(const char *rel, double *out, int max)
{
    char p[600], line[256];
    FILE *f = fopen(fr_fixture(p, sizeof p, rel), "r");
    if (!f) return 0;
    int n = 0;
    while (n < max && fgets(line, sizeof line, f))
        if (line[0] != '#') out[n++] = strtod(line, NULL);
    fclose(f);
    return n;
}

static void follows_pytorch(int k, const char *ref_file)
{
    double ref[20];
    CU_ASSERT_EQUAL_FATAL(read_losses(ref_file, ref, 20), 20);
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(B, k);
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_data_loader *dl = open_sft(B, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    int64_t w[2 * B * W];
    int32_t seg[2 * B * W];
    uint8_t tgt[2 * B * W];
    double worst = 0;
    for (int s = 0; s < 20; s++) {
        for (int m = 0; m < k; m++)
            FR_ASSERT_OK(fr_data_next_sft(dl, w + m * B * W, seg + m * B * W, tgt + m * B * W, NULL));
        fr_train_stats st;
        FR_ASSERT_OK(fr_trainer_step_sft(t, w, seg, tgt, k, &st));
        double rel = fabs(st.loss - ref[s]) / fabs(ref[s]);
        if (rel > 1e-4) printf("\n  K=%d step %d: fp8run %.9g, PyTorch %.9g (rel %.2e)", k, s + 1, st.loss, ref[s], rel);
        CU_ASSERT(rel <= 1e-4);
        worst = fmax(worst, rel);
    }
    printf(" (K=%d: worst rel diff to PyTorch over 20 steps %.2e) ", k, worst);
    fr_data_close(dl);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* all_targets: a rank's micro-batches weighed by their share of every rank's labels. Alone (world
 * size 1) with twice its own count given, the step's loss is half its own mean. */
static void test_all_ranks_weight(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(B, 1);
    fr_trainer *t1, *t2;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t1));
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t2));
    fr_data_loader *dl = open_sft(B, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    int64_t w[B * W], n;
    int32_t seg[B * W];
    uint8_t tgt[B * W];
    FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, &n));
    fr_train_stats a, b;
    FR_ASSERT_OK(fr_trainer_step_sft(t1, w, seg, tgt, 1, &a));
    FR_ASSERT_OK(fr_trainer_step_sft_async(t2, w, seg, tgt, 1, 2 * n, NULL));
    int got;
    FR_ASSERT_OK(fr_trainer_poll(t2, 1, &b, &got));
    CU_ASSERT(fabs(b.loss - a.loss / 2) <= 1e-6 * a.loss);
    CU_ASSERT_EQUAL(fr_trainer_step_sft_async(t2, w, seg, tgt, 1, n - 1, NULL), FR_ERR_INVALID_ARG);
    fr_clear_error();
    fr_data_close(dl);
    fr_trainer_free(t1);
    fr_trainer_free(t2);
    fr_graph_free(g);
}

static void test_follows_pytorch(void) { follows_pytorch(1, "sft/llama_sft_losses_k1.txt"); }
static void test_follows_pytorch_accum(void) { follows_pytorch(2, "sft/llama_sft_losses_k2.txt"); }

/* The target-token mean over every window of the file, as fp8run eval computes it. */
static double eval_all(fr_trainer *t, int packing, int64_t *windows_out, int64_t *targets_out)
{
    fr_data_loader *dl = open_sft(1, packing);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
    int64_t n = fr_data_batches_per_epoch(dl), total = 0;
    double sum = 0;
    for (int64_t b = 0; b < n; b++) {
        int64_t w[W], cnt;
        int32_t seg[W];
        uint8_t tgt[W];
        double loss;
        FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, NULL));
        FR_ASSERT_OK(fr_trainer_eval_sft(t, w, seg, tgt, &loss, &cnt));
        sum += loss * (double)cnt;
        total += cnt;
    }
    fr_data_close(dl);
    *windows_out = n;
    *targets_out = total;
    return sum / (double)total;
}

static void test_packed_equals_unpacked(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(1, 1);
    o.eval_only = 1;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    int64_t wp, wu, np, nu;
    double packed = eval_all(t, 1, &wp, &np), unpacked = eval_all(t, 0, &wu, &nu);
    CU_ASSERT_EQUAL(np, nu);
    CU_ASSERT(wp < wu); /* packing did fill windows with several examples */
    printf(" (packed %.9f in %lld windows, unpacked %.9f in %lld, %lld targets) ", packed, (long long)wp, unpacked,
           (long long)wu, (long long)np);
    CU_ASSERT(fabs(packed - unpacked) <= 1e-5);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* Example A = a0 a1 k, example B = b0 k: B's one target copies A's last token. Packed as
 * A B in one window, B's loss must be what it is alone; as one segment A B (attention across),
 * it is not. */
static void test_packed_examples_do_not_see_each_other(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(1, 1);
    o.eval_only = 1;
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    fr_rng r = fr_test_rng(__func__);
    int64_t k = 1 + (int64_t)(fr_rng_uniform(&r) * 127);
    int64_t w[W] = {0};
    int32_t seg[W] = {0};
    uint8_t tgt[W] = {0};
    /* packed: A (3 tokens, no target) then B (2 tokens, its second the target) */
    int64_t a0 = 1 + (int64_t)(fr_rng_uniform(&r) * 127), a1 = 1 + (int64_t)(fr_rng_uniform(&r) * 127);
    int64_t b0 = 1 + (int64_t)(fr_rng_uniform(&r) * 127);
    const int64_t packed[5] = {a0, a1, k, b0, k};
    for (int j = 0; j < 5; j++) {
        w[j] = packed[j];
        seg[j] = j < 3 ? 1 : 2;
    }
    tgt[4] = 1;
    double l_packed, l_alone, l_crossing;
    int64_t n;
    FR_ASSERT_OK(fr_trainer_eval_sft(t, w, seg, tgt, &l_packed, &n));
    CU_ASSERT_EQUAL(n, 1);
    /* alone: B at the start of its window */
    int64_t w2[W] = {b0, k};
    int32_t seg2[W] = {1, 1};
    uint8_t tgt2[W] = {0, 1};
    FR_ASSERT_OK(fr_trainer_eval_sft(t, w2, seg2, tgt2, &l_alone, &n));
    /* one segment: B's query sees A's tokens */
    for (int j = 0; j < 5; j++) seg[j] = 1;
    FR_ASSERT_OK(fr_trainer_eval_sft(t, w, seg, tgt, &l_crossing, &n));
    printf(" (B's loss packed %.7f, alone %.7f, attending across %.7f) ", l_packed, l_alone, l_crossing);
    CU_ASSERT(fabs(l_packed - l_alone) <= 1e-5);
    CU_ASSERT(fabs(l_crossing - l_alone) > 1e-3);
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* The loader's state (checkpoints, --resume) restores an SFT file's position exactly, random
 * and sequential; the last sequential batch of a pass is filled up with an empty window. */
static void test_loader_state(void)
{
    for (int order = 0; order < 2; order++) {
        char p[600];
        fr_data_opts d = fr_data_opts_default();
        d.batch = 3;
        d.seq_len = T;
        d.order = order ? FR_DATA_SEQUENTIAL : FR_DATA_RANDOM;
        d.seed = 11;
        fr_data_loader *dl = NULL;
        FR_ASSERT_OK(fr_data_open(fr_fixture(p, sizeof p, "sft/llama_sft.bin"), &d, &dl));
        int64_t w[3 * W], w2[3 * W], n1, n2;
        int32_t seg[3 * W], seg2[3 * W];
        uint8_t tgt[3 * W], tgt2[3 * W];
        for (int i = 0; i < 4; i++) FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, NULL));
        uint8_t state[FR_DATA_STATE_BYTES];
        fr_data_get_state(dl, state);
        FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, &n1));
        FR_ASSERT_OK(fr_data_set_state(dl, state, sizeof state));
        FR_ASSERT_OK(fr_data_next_sft(dl, w2, seg2, tgt2, &n2));
        CU_ASSERT_EQUAL(n1, n2);
        CU_ASSERT(memcmp(w, w2, sizeof w) == 0 && memcmp(seg, seg2, sizeof seg) == 0 && memcmp(tgt, tgt2, sizeof tgt) == 0);
        if (order) { /* 40 windows (packing on: fewer) in batches of 3: the last batch's tail is empty */
            fr_data_sft_stats st;
            fr_data_sft_info(dl, &st);
            int64_t per = fr_data_batches_per_epoch(dl), labels = 0, last_empty = 0;
            CU_ASSERT_EQUAL(per, (st.windows + 2) / 3);
            fr_data_reset(dl);
            for (int64_t b = 0; b < per; b++) {
                FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, &n1));
                labels += n1;
                last_empty = seg[2 * W] == 0 && st.windows % 3 != 0;
            }
            CU_ASSERT_EQUAL(labels, st.target_labels); /* every example once */
            CU_ASSERT(st.windows % 3 == 0 || last_empty);
        }
        fr_data_close(dl);
    }
}

static void test_refusals(void)
{
    fr_graph *g = load_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fr_train_options o = options(1, 1);
    fr_trainer *t;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    int64_t w[W] = {1, 2, 3};
    int32_t seg[W] = {1, 1, 3}; /* 3 after 1 */
    uint8_t tgt[W] = {0, 1, 1};
    fr_train_stats st;
    CU_ASSERT_EQUAL(fr_trainer_step_sft(t, w, seg, tgt, 1, &st), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "position 2"));
    seg[2] = 0;
    seg[3] = 1; /* an example after padding */
    CU_ASSERT_EQUAL(fr_trainer_step_sft(t, w, seg, tgt, 1, &st), FR_ERR_INVALID_ARG);
    double loss;
    CU_ASSERT_EQUAL(fr_trainer_eval(t, w, &loss), FR_ERR_INVALID_ARG); /* plain windows: no targets */
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "SFT"));
    CU_ASSERT_EQUAL(fr_trainer_steps_done(t), 0);
    fr_trainer_free(t);
    o.sft = 0;
    FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
    seg[3] = 0;
    CU_ASSERT_EQUAL(fr_trainer_eval_sft(t, w, seg, tgt, &loss, NULL), FR_ERR_INVALID_ARG);
    fr_clear_error();
    fr_trainer_free(t);
    fr_graph_free(g);
}

/* The loader's max_examples is the most examples any window holds (the largest segment id of
 * its windows); a trainer sized below what a batch holds refuses it, naming the window. */
static void test_max_examples(void)
{
    for (int packing = 0; packing < 2; packing++) {
        fr_data_loader *dl = open_sft(1, packing);
        CU_ASSERT_PTR_NOT_NULL_FATAL(dl);
        fr_data_sft_stats st;
        fr_data_sft_info(dl, &st);
        int64_t w[W], most = 0, at = -1;
        int32_t seg[W];
        uint8_t tgt[W];
        for (int64_t b = 0; b < st.windows; b++) {
            FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, NULL));
            for (int j = 0; j < W; j++)
                if (seg[j] > most) most = seg[j], at = b;
        }
        CU_ASSERT_EQUAL(st.max_examples, most);
        CU_ASSERT(packing ? most > 1 : most == 1);
        if (packing && most > 1) { /* the fullest window again, to a trainer made for one fewer */
            fr_data_reset(dl);
            for (int64_t b = 0; b <= at; b++) FR_ASSERT_OK(fr_data_next_sft(dl, w, seg, tgt, NULL));
            fr_graph *g = load_llama();
            CU_ASSERT_PTR_NOT_NULL_FATAL(g);
            fr_train_options o = options(1, 1);
            o.sft_max_examples = (int)most - 1;
            fr_trainer *t;
            FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
            fr_train_stats ts;
            CU_ASSERT_EQUAL(fr_trainer_step_sft(t, w, seg, tgt, 1, &ts), FR_ERR_INVALID_ARG);
            CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "more than the"));
            CU_ASSERT_EQUAL(fr_trainer_steps_done(t), 0);
            fr_trainer_free(t);
            o.sft_max_examples = (int)most; /* exactly enough */
            FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
            FR_ASSERT_OK(fr_trainer_step_sft(t, w, seg, tgt, 1, &ts));
            fr_trainer_free(t);
            fr_graph_free(g);
        }
        fr_data_close(dl);
    }
}

static CU_TestInfo tests[] = {
    {"max_examples of a file; a trainer sized below a batch refuses it", test_max_examples},
    {"20 fp32 steps follow PyTorch (labels -100, packing off)", test_follows_pytorch},
    {"the same with 2 micro-batches, token-weighted", test_follows_pytorch_accum},
    {"weights over all ranks' target tokens", test_all_ranks_weight},
    {"packed and unpacked eval agree", test_packed_equals_unpacked},
    {"packed examples do not see each other", test_packed_examples_do_not_see_each_other},
    {"loader state and the last batch of a pass", test_loader_state},
    {"bad segment ids, SFT calls on a plain trainer", test_refusals},
    CU_TEST_INFO_NULL};

static CU_SuiteInfo suites[] = {{"sft training", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};

int main(void) { return fr_test_main(suites); }
