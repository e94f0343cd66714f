/* Activation recomputation (passes/recompute.h, --recompute): training with each mode gives the
 * same bits as without (losses, gradient norms, every gradient, the weights after 5 steps) on the
 * generated tiny Llama, the Hugging Face Llama fixture (dynamo) and llama_tiny (TorchScript), in
 * fp32, bf16 and fp8 (delayed, current and block scaling); the executor's planned peak of live
 * activations goes down (generated Llama at 4 x 32 tokens, where activations outweigh the
 * gradients) or at least not up (the fixtures' few tokens: their peak is at the backward's end,
 * where every gradient is alive); the regions are the ones expected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io.h"
#include "passes/recompute.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64,
                                        .max_seq = 32, .seed = 11};
static const char *const k_modes[] = {"none", "attention", "mlp", "full"};
#define N_MODES 4
#define STEPS 5

typedef struct model_case {
    fr_graph *g;
    int64_t batch, seq, vocab;
    int strict; /* every mode must lower the planned peak (else: not raise it) */
    int unfused; /* no attention, RoPE, SwiGLU or Linear fusion; 2 micro-batches per step */
} model_case;

static void load_generated(model_case *m)
{
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &m->g));
    m->batch = 4; /* activations outweigh the gradients: the peak is at the backward's start */
    m->seq = 32;
    m->strict = 1;
    m->vocab = k_llama.vocab;
}

/* A TorchScript export (llama_tiny: RMSNorm written out, unfused attention fused by the passes) */
static void load_torchscript(model_case *m, const char *name, int64_t batch, int64_t seq)
{
    char path[1024], rel[256];
    snprintf(rel, sizeof rel, "%s/model.onnx", name);
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, rel), &m->g));
    m->batch = batch;
    m->seq = seq;
    m->vocab = 0; /* from the trainer */
    m->strict = 0;
}

static void load_fixture(model_case *m)
{
    char path[1024];
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "hf/llama_op18_static/model.onnx"), &m->g));
    m->batch = 2; /* its shapes are static: meta.json */
    m->seq = 11;
    m->vocab = 211;
    m->strict = 0; /* 22 tokens: the gradients, kept to the end, make the peak at the backward's end */
}

static const fr_pass_result *recompute_result(const fr_trainer *t)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, "recompute") == 0) return &t->passes.pass[i];
    return NULL;
}

/* Train the four modes side by side for STEPS steps on the same windows; every step's loss,
 * norm and gradients, then the weights, must be the same bits as mode none's. */
static void run_case(const model_case *m, const char *precision, const char *recipe)
{
    size_t peak[N_MODES], pool[N_MODES];
    fr_trainer *t[N_MODES] = {0};
    for (int k = 0; k < N_MODES; k++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = m->batch;
        o.seq_len = m->seq;
        o.precision = precision;
        o.fp8.recipe = recipe;
        o.recompute = k_modes[k];
        /* --recompute turns the residual-norm fusion off (its regions start at the residual
           Adds); mode none too, so that all modes narrow the same activations (its AddRMSNorm
           would write bf16 for the Linears) and the comparison is recompute's alone */
        o.fuse_residual_norm = 0;
        if (m->unfused) {
            o.fuse_attention = o.fuse_swiglu = o.fp8.fuse = 0;
            o.grad_accum = 2;
        }
        FR_ASSERT_OK(fr_trainer_new(m->g, &o, &t[k]));
        peak[k] = fr_exec_peak_bytes(tr_cpu_exec(t[k]));
        pool[k] = fr_exec_pool_bytes(tr_cpu_exec(t[k]));
        const fr_pass_result *r = recompute_result(t[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(r->ran, k != 0);
        int n_entries;
        fr_pipeline_passes(&n_entries);
        CU_ASSERT_EQUAL(t[k]->passes.n, n_entries); /* a training build reaches every entry */
        if (!k) CU_ASSERT_STRING_EQUAL(r->detail, "off (recompute)");
        if (k) CU_ASSERT(r->changed > 0); /* forward nodes copied */
        if (k) printf("\n    %s %s: pass %s: %s", precision, recipe, r->name, r->detail);
    }
    const int64_t vocab = m->vocab ? m->vocab : fr_trainer_vocab(t[0]);
    const int same = fr_ft_same_training(t, N_MODES, m->batch, m->seq, vocab, m->unfused ? 2 : 1, STEPS, "recompute");
    CU_ASSERT(same);
    printf("\n    %s %s: planned peak bytes none %zu, attention %zu, mlp %zu, full %zu (pool with fragmentation "
           "%zu, %zu, %zu, %zu); bit-identical %s", precision, recipe, peak[0], peak[1], peak[2], peak[3], pool[0],
           pool[1], pool[2], pool[3], same ? "yes" : "NO");
    /* the liveness plan keeps fewer activations alive */
    for (int k = 1; k < N_MODES; k++) CU_ASSERT(m->strict ? peak[k] < peak[0] : peak[k] <= peak[0]);
    for (int k = 0; k < N_MODES; k++) fr_trainer_free(t[k]);
}

static void run_precisions(model_case *m)
{
    static const char *const cases[][2] = {{"fp32", "delayed"}, {"bf16", "delayed"}, {"fp8", "delayed"}, {"fp8", "current"},
                                             {"fp8", "block"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) run_case(m, cases[c][0], cases[c][1]);
    fr_graph_free(m->g);
}

static void test_generated_llama(void)
{
    model_case m = {0};
    load_generated(&m);
    run_precisions(&m);
}

/* unfused attention (Softmax), RoPE, SwiGLU and Q/K/V, gate/up Linears; grad accumulation */
static void test_generated_unfused(void)
{
    model_case m = {0};
    load_generated(&m);
    m.unfused = 1;
    run_precisions(&m);
}

static void test_torchscript_llama(void)
{
    model_case m = {0};
    load_torchscript(&m, "llama_tiny", 2, 16);
    run_precisions(&m);
}

/* GPT-2 (LayerNorm, GELU, biases) and BERT (post-LN, attention mask, token types) */
static void test_gpt2_bert(void)
{
    model_case m = {0};
    load_torchscript(&m, "gpt2_tiny", 2, 11);
    run_precisions(&m);
    model_case b = {0};
    load_torchscript(&b, "bert_tiny", 2, 9);
    run_precisions(&b);
}

static void test_hf_llama(void)
{
    model_case m = {0};
    load_fixture(&m);
    run_precisions(&m);
}

/* The regions of the generated Llama: 2 layers give 2 attention and 2 MLP regions, 2 blocks. */
static void test_regions(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &g));
    static const int want[N_MODES] = {0, 2, 2, 2};
    for (int k = 0; k < N_MODES; k++) {
        fr_train_options o;
        fr_train_options_default(&o);
        o.batch = 1;
        o.seq_len = 8;
        o.precision = "fp8";
        o.recompute = k_modes[k];
        fr_trainer *t;
        FR_ASSERT_OK(fr_trainer_new(g, &o, &t));
        const fr_pass_result *r = recompute_result(t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        int regions = -1;
        if (k) CU_ASSERT_EQUAL(sscanf(r->detail + strlen(k_modes[k]) + 2, "%d", &regions), 1);
        if (k) CU_ASSERT_EQUAL(regions, want[k]);
        /* no copied Linear reports an amax: each amax output has one producer, an original */
        for (int i = 0; i < t->g->n_nodes; i++) {
            const fr_node *n = &t->g->nodes[i];
            if (!strstr(n->name, "/recompute") || strcmp(n->op_type, "Linear") != 0) continue;
            for (int o = 3; o < n->n_outputs; o++) CU_ASSERT_EQUAL(n->outputs[o], -1);
        }
        fr_trainer_free(t);
    }
    fr_recompute_mode m;
    CU_ASSERT_EQUAL(fr_recompute_parse("selective", &m), FR_ERR_INVALID_ARG);
    FR_ASSERT_OK(fr_recompute_parse("full", &m));
    CU_ASSERT_EQUAL(m, FR_RECOMPUTE_FULL);
    fr_graph_free(g);
}

static CU_TestInfo k_tests[] = {
    {"regions of the generated Llama", test_regions},
    {"generated Llama: every mode bit-identical, lower planned peak", test_generated_llama},
    {"generated Llama unfused, 2 micro-batches: every mode bit-identical, lower planned peak", test_generated_unfused},
    {"HF Llama fixture (dynamo): every mode bit-identical, peak not higher", test_hf_llama},
    {"llama_tiny (TorchScript): every mode bit-identical, peak not higher", test_torchscript_llama},
    {"gpt2_tiny, bert_tiny: every mode bit-identical, peak not higher", test_gpt2_bert},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo k_suites[] = {
    {"recompute", NULL, NULL, NULL, NULL, k_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(k_suites); }
