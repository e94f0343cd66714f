/* The chunked LM head (passes/lm_head_fuse.h, --chunked-lm-head) in the trainer, on the CPU:
 *  - on a generated Llama in fp32, bf16 and fp8 (whose head stays bf16), the training graph
 *    holds one LinearCrossEntropy and no loss head, Linear of the head or their backward; the
 *    evaluation graph keeps the Linear and SoftmaxCrossEntropy (its logits); off (the default)
 *    changes nothing;
 *  - 20 steps with it on and off give the same losses and gradient norms BIT FOR BIT (the op
 *    equals the unfused chain bit for bit: test_linear_ce), also with two micro-batches a step,
 *    under --recompute full, with float32 logits (narrowing off) and under LoRA (a frozen
 *    head: dX alone), and evaluation gives the same loss;
 *  - SFT (target tokens only, token-weighted micro-batches: dloss is the loss weight, moved
 *    before the head) on llama_tiny: the same losses bit for bit with one and two micro-batches;
 *  - the plan without the logits: info --memory's figure (fr_lm_head_saved_bytes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "passes/lm_head_fuse.h"
#include "runtime/io/data.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/train_memory.h"
#include "runtime/train/trainer.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"

static const fr_llama_config k_llama = {.d = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 48, .vocab = 64, .max_seq = 32, .seed = 7};

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static int pass_changed(const fr_trainer *t, const char *name)
{
    for (int k = 0; k < t->passes.n; k++)
        if (strcmp(t->passes.pass[k].name, name) == 0) return t->passes.pass[k].ran ? t->passes.pass[k].changed : -1;
    return -2;
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_graphs(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    const char *precs[3] = {"fp32", "bf16", "fp8"};
    for (int p = 0; p < 3; p++)
        for (int on = 0; on < 2; on++) {
            fr_train_options o;
            fr_ft_train_options(&o);
            o.precision = precs[p];
            o.chunked_lm_head = on;
            fr_trainer *t = NULL;
            FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
            const int lce = count_op(t->g, "LinearCrossEntropy");
            printf("\n  %s %s: LinearCrossEntropy %d, SoftmaxCrossEntropy %d / Grad %d, Linear %d (eval: %d, %d)",
                   precs[p], on ? "on" : "off", lce, count_op(t->g, "SoftmaxCrossEntropy"),
                   count_op(t->g, "SoftmaxCrossEntropyGrad"), count_op(t->g, "Linear"),
                   count_op(t->eval_g, "SoftmaxCrossEntropy"), count_op(t->eval_g, "LinearCrossEntropy"));
            CU_ASSERT_EQUAL(lce, on && p > 0); /* fp32 precision keeps the MatMul head: not fused */
            if (p == 0) {
                fr_trainer_free(t);
                continue;
            }
            CU_ASSERT_EQUAL(count_op(t->g, "SoftmaxCrossEntropy"), !on);
            CU_ASSERT_EQUAL(count_op(t->g, "SoftmaxCrossEntropyGrad"), !on);
            CU_ASSERT_EQUAL(pass_changed(t, "chunked_lm_head"), on ? 1 : -1);
            /* evaluation keeps its logits */
            CU_ASSERT_EQUAL(count_op(t->eval_g, "SoftmaxCrossEntropy"), 1);
            CU_ASSERT_EQUAL(count_op(t->eval_g, "LinearCrossEntropy"), 0);
            /* the model's logits stay an output of the evaluation graph, [batch, seq, vocab] */
            CU_ASSERT_EQUAL_FATAL(t->n_model_outputs, 1);
            const int lv = fr_graph_find_value(t->eval_g, t->model_outputs[0]);
            CU_ASSERT_FATAL(lv >= 0);
            CU_ASSERT(t->eval_g->values[lv].flags & FR_VAL_OUTPUT);
            CU_ASSERT(t->eval_g->values[lv].rank == 3 && t->eval_g->values[lv].dims[2] == k_llama.vocab);
            /* what info --memory says is saved: logits and dlogits (bf16: narrowed) less one float32
               chunk; a chunk of every row (these few tokens) saves nothing */
            CU_ASSERT_EQUAL(fr_lm_head_saved_bytes(t->g), 0);
            for (int i = 0; on && i < t->g->n_nodes; i++)
                if (strcmp(t->g->nodes[i].op_type, "LinearCrossEntropy") == 0)
                    FR_ASSERT_OK(fr_node_set_attr_int(&t->g->nodes[i], "chunk_rows", 4));
            const size_t M = (size_t)(o.batch * o.seq_len), V = (size_t)k_llama.vocab;
            CU_ASSERT_EQUAL(fr_lm_head_saved_bytes(t->g), on ? M * V * 2 * 2 - 4 * V * 4 : 0);
            fr_trainer_free(t);
        }
    fr_graph_free(model);
}

/* 20 steps (FR_FT_STEPS) with grad_accum k; losses and norms of on and off, bit for bit */
static void same_training(const char *prec, int k, const char *recompute, int narrow, int lora)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    double loss[2][FR_FT_STEPS], norm[2][FR_FT_STEPS], ev[2];
    const int64_t B = 4, T = 12, row = T + 1;
    int64_t w[4 * 13];
    for (int on = 0; on < 2; on++) {
        fr_train_options o;
        fr_ft_train_options(&o);
        o.precision = prec;
        o.batch = B / k;
        o.seq_len = T;
        o.grad_accum = k;
        o.chunked_lm_head = on;
        o.recompute = recompute;
        o.narrow_activations = narrow;
        if (lora) { /* the head frozen: the fused node makes dX alone */
            o.lora.rank = 4;
            o.lora.alpha = 8;
            o.lora.targets = "q_proj|v_proj";
        }
        fr_trainer *t = NULL;
        FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
        CU_ASSERT_EQUAL(count_op(t->g, "LinearCrossEntropy"), on);
        uint64_t s = 99;
        for (int step = 0; step < FR_FT_STEPS; step++) {
            for (int64_t i = 0; i < B * row; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                w[i] = i % row == 0 ? (int64_t)((s >> 33) % 64) : (w[i - 1] * 5 + 3) % 64;
            }
            fr_train_stats st;
            FR_ASSERT_OK(fr_trainer_step(t, w, k, &st));
            loss[on][step] = st.loss;
            norm[on][step] = st.grad_norm;
        }
        FR_ASSERT_OK(fr_trainer_eval(t, w, &ev[on]));
        fr_trainer_free(t);
    }
    int same = bits_equal(ev[0], ev[1]);
    for (int step = 0; step < FR_FT_STEPS; step++)
        same &= bits_equal(loss[0][step], loss[1][step]) && bits_equal(norm[0][step], norm[1][step]);
    printf("\n  %s K=%d recompute %s narrow %d lora %d: loss 0 %.9g / %.9g, loss %d %.9g / %.9g, eval %.9g / %.9g", prec, k,
           recompute, narrow, lora, loss[0][0], loss[1][0], FR_FT_STEPS - 1, loss[0][FR_FT_STEPS - 1], loss[1][FR_FT_STEPS - 1], ev[0], ev[1]);
    CU_ASSERT(same);
    CU_ASSERT(loss[1][FR_FT_STEPS - 1] < (lora ? 1.0 : 0.9) * loss[1][0]); /* it trains (LoRA: slowly) */
    fr_graph_free(model);
}

static void test_same_losses(void)
{
    same_training("bf16", 1, "none", 1, 0);
    same_training("fp8", 1, "none", 1, 0);
    same_training("bf16", 2, "none", 1, 0);
    same_training("fp8", 1, "full", 1, 0); /* the head's input recomputed in the backward */
    same_training("bf16", 1, "none", 0, 0); /* float32 logits and dlogits */
    same_training("bf16", 1, "none", 1, 1); /* LoRA: a frozen head */
}

/* SFT on llama_tiny's SFT fixture: packing off, k micro-batches a step */
static void test_sft(void)
{
    enum { B = 2, T = 13, W = T + 1 };
    char p[600];
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "llama_tiny/model.onnx"), &g));
    for (int k = 1; k <= 2; k++) {
        double loss[2][8];
        for (int on = 0; on < 2; on++) {
            fr_train_options o;
            fr_train_options_default(&o);
            o.batch = B;
            o.seq_len = T;
            o.opt = fr_opt_config_adamw();
            o.lr.kind = FR_LR_CONSTANT;
            o.lr.max_lr = 1e-3;
            o.grad_accum = k;
            o.sft = 1;
            o.precision = "bf16"; /* fp32 keeps MatMul: the pass fuses Linear heads */
            o.chunked_lm_head = on;
            fr_trainer *t;
            FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
            CU_ASSERT_EQUAL(count_op(t->g, "LinearCrossEntropy"), on);
            fr_data_opts d = fr_data_opts_default();
            d.batch = B;
            d.seq_len = T;
            d.order = FR_DATA_SEQUENTIAL;
            d.vocab_size = 128;
            d.packing = 0;
            fr_data_loader *dl = NULL;
            FR_ASSERT_OK(fr_data_open(fr_fixture(p, sizeof p, "sft/llama_sft.bin"), &d, &dl));
            int64_t w[2 * B * W];
            int32_t seg[2 * B * W];
            uint8_t tgt[2 * B * W];
            for (int s = 0; s < 8; s++) {
                for (int m = 0; m < k; m++)
                    FR_ASSERT_OK(fr_data_next_sft(dl, w + m * B * W, seg + m * B * W, tgt + m * B * W, NULL));
                fr_train_stats st;
                FR_ASSERT_OK(fr_trainer_step_sft(t, w, seg, tgt, k, &st));
                loss[on][s] = st.loss;
            }
            fr_data_close(dl);
            fr_trainer_free(t);
        }
        int same = 1;
        for (int s = 0; s < 8; s++) same &= bits_equal(loss[0][s], loss[1][s]);
        printf("\n  SFT K=%d: loss 0 %.9g / %.9g, loss 7 %.9g / %.9g", k, loss[0][0], loss[1][0], loss[0][7], loss[1][7]);
        CU_ASSERT(same);
    }
    fr_graph_free(g);
}

/* the memory plan's options: bf16, 4 x 128 tokens, chunked_lm_head as given (-1: auto) */
static fr_train_options plan_options(int chunked)
{
    fr_train_options o;
    fr_ft_train_options(&o);
    o.precision = "bf16";
    o.batch = 4;
    o.seq_len = 128;
    o.chunked_lm_head = chunked;
    return o;
}

/* info --memory's plan (fr_train_predict_memory, CPU): the head counted as fused, and the logits
 * and dlogits gone from the activations (a micro-batch of 512 tokens and a 4096 vocabulary:
 * 2 x 4 MiB of bf16 logits and dlogits, the op's chunk being the kernel's own buffer) */
static void test_memory_plan(void)
{
    fr_llama_config lc = k_llama;
    lc.vocab = 4096;
    lc.max_seq = 128;
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&lc, &model));
    fr_train_memory m[2];
    for (int on = 0; on < 2; on++) {
        const fr_train_options o = plan_options(on);
        FR_ASSERT_OK(fr_train_predict_memory(model, &o, 0, &m[on]));
    }
    const double MiB = 1024.0 * 1024.0;
    printf("\n  activations off %.2f MiB, on %.2f MiB; %d fused, %.2f MiB saved", m[0].activations / MiB,
           m[1].activations / MiB, m[1].lm_heads_fused, m[1].lm_head_saved / MiB);
    CU_ASSERT_EQUAL(m[0].lm_heads_fused, 0);
    CU_ASSERT_EQUAL(m[1].lm_heads_fused, 1);
    CU_ASSERT_EQUAL(m[0].lm_head_saved, 0);
    CU_ASSERT_EQUAL(m[1].lm_head_saved, 0); /* 512 rows: one chunk holds them all */
    CU_ASSERT(m[1].activations + (size_t)4 * 1024 * 1024 <= m[0].activations);
    /* auto (-1, the C API's default): fused in a GPU's plan, not in the CPU's; a CPU trainer
       keeps the head as it is */
    fr_train_memory ma[2] = {0};
#ifdef FP8RUN_HAVE_CUDA
    const int plans = 2; /* a GPU's plan needs the CUDA backend built in (not a GPU) */
#else
    const int plans = 1;
#endif
    for (int gpu = 0; gpu < plans; gpu++) {
        const fr_train_options o = plan_options(-1);
        FR_ASSERT_OK(fr_train_predict_memory(model, &o, gpu, &ma[gpu]));
    }
    CU_ASSERT_EQUAL(ma[0].lm_heads_fused, 0);
    if (plans == 2) CU_ASSERT_EQUAL(ma[1].lm_heads_fused, 1);
    fr_train_options o = plan_options(-1);
    o.device = "cpu";
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    CU_ASSERT_EQUAL(pass_changed(t, "chunked_lm_head"), -1);
    fr_trainer_free(t);
    fr_graph_free(model);
}

static CU_TestInfo tests[] = {
    {"info --memory's plan", test_memory_plan},
    {"training graph fused, evaluation graph keeps its logits", test_graphs},
    {"on and off: the same losses, bit for bit", test_same_losses},
    {"SFT: the same losses, bit for bit", test_sft},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"lm_head_fuse", NULL, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
