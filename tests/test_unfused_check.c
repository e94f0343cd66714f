/* passes/unfused_check.c, the pipeline's last report on the prepared graph:
 *  - the generated Llama with every fusion on: nothing left, the graph unchanged;
 *  - with --no-fuse-attention: one Softmax per layer, the first one named; with
 *    --no-fuse-swiglu: one Sigmoid per layer (SiLU written out);
 *  - the HF fixtures of the dynamo exporter (opset 18) leave nothing: every attention, norm
 *    and activation their export writes out is fused;
 *  - the summary fits a small buffer without overrunning it. */
#include <stdio.h>
#include <string.h>

#include "tests/fuse_test_util.h"
#include "tests/harness.h"
#include "graph/onnx_io.h"
#include "passes/unfused_check.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 7};

static const fr_pass_result *unfused(const fr_trainer *t)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, "unfused") == 0) return &t->passes.pass[i];
    return NULL;
}

/* The trainer's report with attention / SwiGLU fusion on or off. */
static void check_llama(int fuse_attention, int fuse_swiglu, const char *want)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.fuse_attention = fuse_attention;
    o.fuse_swiglu = fuse_swiglu;
    o.eval_only = 1;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    const fr_pass_result *r = unfused(t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL(r->ran, 1);
    CU_ASSERT_EQUAL(r->changed, 0); /* a report: nothing rewritten */
    if (!strstr(r->detail, want)) printf("\n  got '%s', want '%s'", r->detail, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(r->detail, want));
    int left = -1;
    char buf[200];
    FR_ASSERT_OK(fr_unfused_check(t->g, &left, buf, sizeof buf));
    CU_ASSERT_STRING_EQUAL(buf, r->detail); /* the same graph: the same words */
    CU_ASSERT_EQUAL(left, (fuse_attention ? 0 : (int)k_llama.layers) + (fuse_swiglu ? 0 : (int)k_llama.layers));
    fr_trainer_free(t);
    fr_graph_free(model);
}

static void test_generated(void)
{
    check_llama(1, 1, "nothing left unfused");
    check_llama(0, 1, "3 left unfused: Softmax 3 (first '");
    check_llama(1, 0, "3 left unfused: Sigmoid 3 (first '");
    check_llama(0, 0, "6 left unfused: Softmax 3 (first '");
}

static void test_hf_fixtures(void)
{
    static const char *const dirs[] = {"llama_op18_static", "qwen2_op18_static", "gemma_op18_static",
                                       "gpt2_op18_static", "phi3_op18_static", "mistral_op18_static"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_graph *g = fr_ft_open_hf(dirs[i]);
        fr_train_options o;
        fr_ft_hf_train_options(&o);
        o.eval_only = 1;
        fr_trainer *t = NULL;
        fr_status st = fr_trainer_new(g, &o, &t);
        if (st != FR_OK) printf("\n  %s: %s", dirs[i], fr_last_error());
        CU_ASSERT_EQUAL_FATAL(st, FR_OK);
        const fr_pass_result *r = unfused(t);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        if (strcmp(r->detail, "nothing left unfused") != 0) printf("\n  %s: %s", dirs[i], r->detail);
        CU_ASSERT_STRING_EQUAL(r->detail, "nothing left unfused");
        fr_trainer_free(t);
        fr_graph_free(g);
    }
}

static void test_small_buffer(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o);
    o.fuse_attention = 0;
    o.eval_only = 1;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    char buf[24];
    memset(buf, 'x', sizeof buf);
    int left = 0;
    FR_ASSERT_OK(fr_unfused_check(t->g, &left, buf, 12));
    CU_ASSERT_EQUAL(left, 3);
    CU_ASSERT_EQUAL(strlen(buf), 11); /* cut to the buffer, terminated */
    CU_ASSERT_EQUAL(buf[12], 'x');    /* nothing written past it */
    fr_trainer_free(t);
    fr_graph_free(model);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"generated Llama: nothing left when fused, Softmax/Sigmoid per layer when not", test_generated},
        {"dynamo HF fixtures (opset 18): nothing left unfused", test_hf_fixtures},
        {"the summary is cut to the buffer", test_small_buffer},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"unfused_check", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
