/* The training pipeline (passes/pipeline.c):
 *  - the list: names unique, stages in order and contiguous, select_params first and prepare
 *    last on the imported graph, the fusions that free MatMuls before the FP8 compiler and SwiGLU after it, every
 *    option a trainer option (tr_pass_option), reload entries without options;
 *  - the runner: an entry whose option is off does not run (graph untouched, "off (...)"; one
 *    without an option runs), an
 *    unknown option is an error naming it, results are appended in list order;
 *  - the trainer: one result per entry in list order (an evaluation-only trainer and a compile
 *    stop before the differentiated graph: the entries before it; a training one: all), the counts equal to what the graph holds
 *    (Attention, Rotary, SwiGLU nodes; the FP8 report's Linears), and --no-fuse-attention /
 *    fp32 reported as off;
 *  - the report line: "pass fuse_attention: 2 fused";
 *  - the C API (fp8run_report_pass) on llama_tiny: one record per entry of the forward's
 *    stages, in order, fp8 and fp32; out-of-range index and a short struct refused. */
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"
#include "passes/pipeline.h"
#include "runtime/train/llama_gen.h"
#include "runtime/train/train_internal.h"
#include "runtime/train/trainer.h"

static const fr_llama_config k_llama = {.d = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 64, .max_seq = 32, .seed = 5};

static int index_of(const char *name)
{
    int n;
    const fr_pass *p = fr_pipeline_passes(&n);
    for (int i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0) return i;
    return -1;
}

/* Entries a forward-only build reaches: those before the differentiated stage. */
static int forward_entries(void)
{
    int n, k = 0;
    const fr_pass *p = fr_pipeline_passes(&n);
    while (k < n && p[k].stage < FR_STAGE_DIFFERENTIATED) k++;
    return k;
}

static int count_op(const fr_graph *g, const char *op)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && strcmp(g->nodes[i].op_type, op) == 0;
    return n;
}

static void test_list(void)
{
    int n;
    const fr_pass *p = fr_pipeline_passes(&n);
    CU_ASSERT_FATAL(n > 0 && n <= FR_PIPELINE_MAX_PASSES);
    fr_train_options o;
    fr_train_options_default(&o);
    for (int i = 0; i < n; i++) {
        CU_ASSERT(p[i].name && p[i].name[0] && p[i].what && p[i].what[0] && p[i].run);
        CU_ASSERT(p[i].stage >= 0 && p[i].stage < FR_STAGE_COUNT);
        if (i) CU_ASSERT(p[i].stage >= p[i - 1].stage); /* stages in order, each contiguous */
        for (int j = 0; j < i; j++) CU_ASSERT(strcmp(p[i].name, p[j].name) != 0);
        CU_ASSERT_PTR_EQUAL(fr_pipeline_find(p[i].name), &p[i]);
        if (p[i].reload) CU_ASSERT_PTR_NULL(p[i].option);
        if (p[i].option) {
            int on = -1;
            fr_status st = tr_pass_option(&o, p[i].option, &on);
            if (st != FR_OK) printf("\n  %s: %s", p[i].name, fr_last_error());
            CU_ASSERT_EQUAL(st, FR_OK);
            CU_ASSERT(on == 0 || on == 1);
        }
    }
    CU_ASSERT_PTR_NULL(fr_pipeline_find("no_such_pass"));
    /* the orders the passes rely on */
    int prep = index_of("prepare"), attn = index_of("fuse_attention"), rot = index_of("fuse_rotary");
    int fp8 = index_of("fp8_compile"), swi = index_of("fuse_swiglu"), ret = index_of("retie");
    int sel = index_of("select_params");
    CU_ASSERT_FATAL(prep >= 0 && attn >= 0 && rot >= 0 && fp8 >= 0 && swi >= 0 && ret >= 0 && sel > 0);
    CU_ASSERT(p[prep].reload);
    CU_ASSERT(sel < ret && ret < prep && prep < attn && attn < rot && rot < fp8 && fp8 < swi);
    CU_ASSERT(p[sel].stage == FR_STAGE_IMPORTED && p[sel - 1].stage == FR_STAGE_MODEL); /* first on the copy */
    CU_ASSERT_EQUAL(p[prep].stage, FR_STAGE_IMPORTED);
    CU_ASSERT(prep == n - 1 || p[prep + 1].stage == FR_STAGE_PREPARED); /* the last on the imported graph */
    CU_ASSERT_EQUAL(p[index_of("unshare")].stage, FR_STAGE_MODEL);
    int rc = index_of("recompute"); /* on the backward autodiff built */
    CU_ASSERT(rc > swi && p[rc].stage == FR_STAGE_DIFFERENTIATED);
}

/* Fails for the option named by opts, on for the others. */
static fr_status fail_one(const void *opts, const char *name, int *on)
{
    *on = 1;
    if (strcmp(name, (const char *)opts) == 0) return fr_error(FR_ERR_INTERNAL, "no option '%s' here", name);
    return FR_OK;
}

static fr_status all_off(const void *opts, const char *name, int *on)
{
    (void)opts;
    (void)name;
    *on = 0;
    return FR_OK;
}

/* A context over a fresh generated Llama with the given resolver, results into rep. */
static fr_pass_ctx fresh_ctx(fr_pass_option_fn option, const void *opts, fr_pipeline_report *rep)
{
    fr_pass_ctx c;
    memset(&c, 0, sizeof c);
    memset(rep, 0, sizeof *rep);
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &c.g));
    c.option = option;
    c.opts = opts;
    c.results = rep;
    return c;
}

static void test_runner_off(void)
{
    fr_pipeline_report rep;
    fr_pass_ctx c = fresh_ctx(all_off, NULL, &rep);
    fr_graph *g = c.g;
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int nodes = g->n_nodes, values = g->n_values;
    FR_ASSERT_OK(fr_pipeline_run(&c, FR_STAGE_PREPARED));
    /* nothing ran: the graph is the one generated */
    CU_ASSERT_EQUAL(g->n_nodes, nodes);
    CU_ASSERT_EQUAL(g->n_values, values);
    int n, k = 0;
    const fr_pass *p = fr_pipeline_passes(&n);
    const char *first_opt = NULL;
    for (int i = 0; i < n; i++) {
        if (p[i].stage != FR_STAGE_PREPARED) continue;
        CU_ASSERT_FATAL(k < rep.n);
        CU_ASSERT_STRING_EQUAL(rep.pass[k].name, p[i].name);
        /* an entry without an option always runs (the RMSNorm fusion: nothing to fuse here) */
        CU_ASSERT_EQUAL(rep.pass[k].ran, p[i].option == NULL);
        CU_ASSERT_EQUAL(rep.pass[k].changed, 0);
        if (p[i].option) {
            char want[160], line[200];
            snprintf(want, sizeof want, "pass %s: off (%s)", p[i].name, p[i].option);
            CU_ASSERT_STRING_EQUAL(fr_pass_result_line(&rep.pass[k], line, sizeof line), want);
            if (!first_opt) first_opt = p[i].name;
        }
        k++;
    }
    CU_ASSERT_EQUAL(rep.n, k);
    /* an entry with an option and no resolver is the runtime's bug, said as such */
    c.option = NULL;
    CU_ASSERT_EQUAL(fr_pipeline_run(&c, FR_STAGE_PREPARED), FR_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(first_opt);
    CU_ASSERT(strstr(fr_last_error(), first_opt) != NULL);
    fr_clear_error();
    fr_graph_free(g);
}

static void test_unknown_option(void)
{
    fr_train_options o;
    fr_train_options_default(&o);
    int on = -1;
    CU_ASSERT_EQUAL(tr_pass_option(&o, "fuse_everything", &on), FR_ERR_INTERNAL);
    CU_ASSERT(strstr(fr_last_error(), "fuse_everything") != NULL);
    fr_clear_error();
    /* precision: fp32 is not rewritten, bf16 and fp8 are */
    o.precision = "fp32";
    FR_ASSERT_OK(tr_pass_option(&o, "precision", &on));
    CU_ASSERT_EQUAL(on, 0);
    o.precision = "bf16";
    FR_ASSERT_OK(tr_pass_option(&o, "precision", &on));
    CU_ASSERT_EQUAL(on, 1);
    o.fuse_swiglu = 0;
    FR_ASSERT_OK(tr_pass_option(&o, "fuse_swiglu", &on));
    CU_ASSERT_EQUAL(on, 0);
    o.fuse_swiglu = 1;
    FR_ASSERT_OK(tr_pass_option(&o, "fuse_swiglu", &on));
    CU_ASSERT_EQUAL(on, 1);
    /* a resolver's error stops the stage there: lora's option fails, prepare never runs */
    fr_pipeline_report rep;
    fr_pass_ctx c = fresh_ctx(fail_one, "lora", &rep);
    fr_graph *g = c.g;
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int nodes = g->n_nodes;
    CU_ASSERT_EQUAL(fr_pipeline_run(&c, FR_STAGE_IMPORTED), FR_ERR_INTERNAL);
    CU_ASSERT(strstr(fr_last_error(), "no option 'lora'") != NULL);
    fr_clear_error();
    CU_ASSERT_EQUAL_FATAL(rep.n, 2); /* select_params (no option), then lora */
    CU_ASSERT_STRING_EQUAL(rep.pass[0].name, "select_params");
    CU_ASSERT_EQUAL(rep.pass[0].ran, 1);
    CU_ASSERT_STRING_EQUAL(rep.pass[1].name, "lora");
    CU_ASSERT_EQUAL(rep.pass[1].ran, 0);
    CU_ASSERT_EQUAL(g->n_nodes, nodes); /* prepare (which removes nodes here) did not run */
    fr_graph_free(g);
}

static const fr_pass_result *result(const fr_trainer *t, const char *name)
{
    for (int i = 0; i < t->passes.n; i++)
        if (strcmp(t->passes.pass[i].name, name) == 0) return &t->passes.pass[i];
    return NULL;
}

/* A trainer's results: every entry once, in list order, counts matching its graph. */
static void check_trainer(const char *precision, int fuse_attention)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    fr_train_options o;
    fr_ft_train_options(&o); /* batch 2 x seq 16 */
    o.precision = precision;
    o.fuse_attention = fuse_attention;
    o.eval_only = 1; /* the forward graph is what the pipeline builds */
    fr_trainer *t = NULL;
    fr_status st = fr_trainer_new(model, &o, &t);
    if (st != FR_OK) printf("\n  %s: %s", precision, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    int n;
    const fr_pass *p = fr_pipeline_passes(&n);
    n = forward_entries(); /* evaluation only: no backward */
    CU_ASSERT_EQUAL_FATAL(t->passes.n, n);
    for (int i = 0; i < n; i++) CU_ASSERT_STRING_EQUAL(t->passes.pass[i].name, p[i].name);
    const int L = k_llama.layers, fp8 = strcmp(precision, "fp32") != 0;
    const fr_pass_result *attn = result(t, "fuse_attention"), *rot = result(t, "fuse_rotary");
    const fr_pass_result *comp = result(t, "fp8_compile"), *swi = result(t, "fuse_swiglu");
    CU_ASSERT_EQUAL(attn->ran, fuse_attention);
    CU_ASSERT_EQUAL(rot->ran, fuse_attention);
    const fr_pass_result *io = result(t, "fuse_attention_io"); /* absorbs Attention and both Rotary */
    CU_ASSERT_EQUAL(io->changed, count_op(t->g, "AttentionQKV"));
    CU_ASSERT_EQUAL(io->changed, fuse_attention && fp8 ? L : 0); /* on by default: reads the fused Q/K/V Linear */
    CU_ASSERT_EQUAL(attn->changed, count_op(t->g, "Attention") + io->changed);
    CU_ASSERT_EQUAL(attn->changed, fuse_attention ? L : 0);
    CU_ASSERT_EQUAL(rot->changed, count_op(t->g, "Rotary") + 2 * io->changed);
    CU_ASSERT_EQUAL(rot->changed, fuse_attention ? 2 * L : 0); /* Q and K of each layer */
    CU_ASSERT_EQUAL(swi->changed, count_op(t->g, "SwiGLU"));
    CU_ASSERT_EQUAL(swi->changed, L);
    CU_ASSERT_EQUAL(comp->ran, fp8);
    CU_ASSERT_EQUAL(t->has_report, fp8);
    if (fp8) {
        CU_ASSERT_EQUAL(comp->changed, t->report.n_linears);
        CU_ASSERT(comp->changed > 0);
        CU_ASSERT_EQUAL(t->report.n_swiglu, swi->changed);
    }
    char line[200];
    fr_pass_result_line(attn, line, sizeof line);
    if (fuse_attention) {
        char want[64];
        snprintf(want, sizeof want, "pass fuse_attention: %d fused", L);
        CU_ASSERT_STRING_EQUAL(line, want);
    } else {
        CU_ASSERT_STRING_EQUAL(line, "pass fuse_attention: off (fuse_attention)");
    }
    fr_pass_result_line(comp, line, sizeof line);
    CU_ASSERT(fp8 ? strstr(line, " Linear") != NULL : strcmp(line, "pass fp8_compile: off (precision)") == 0);
    /* every parameter of the generated model is float32 and trained: none made constant */
    const fr_pass_result *sel = result(t, "select_params");
    CU_ASSERT(sel->ran && sel->changed == 0 && strstr(sel->detail, " trained, 0 made constants"));
    /* prepare ran and folded the shape computations of the generated model */
    const fr_pass_result *prep = result(t, "prepare");
    CU_ASSERT(prep->ran && prep->changed > 0);
    fr_trainer_free(t);
    fr_graph_free(model);
}

static void test_trainer_fp8(void) { check_trainer("fp8", 1); }
static void test_trainer_fp32(void) { check_trainer("fp32", 1); }
static void test_trainer_no_attention(void) { check_trainer("bf16", 0); }

/* --train / --freeze: select_params keeps exactly the parameters that match. */
static void test_select_params(void)
{
    fr_graph *model = NULL;
    FR_ASSERT_OK(fr_llama_generate(&k_llama, &model));
    int all = 0;
    for (int i = 0; i < model->n_values; i++) all += (model->values[i].flags & FR_VAL_PARAM) != 0;
    fr_train_options o;
    fr_ft_train_options(&o);
    o.train_regex = "^layers\\.1\\.";
    o.freeze_regex = "layernorm";
    o.eval_only = 1;
    fr_trainer *t = NULL;
    FR_ASSERT_OK(fr_trainer_new(model, &o, &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    /* layer 1: q, k, v, o, gate, up, down; its two norms frozen */
    const fr_pass_result *sel = result(t, "select_params");
    char want[64];
    snprintf(want, sizeof want, "7 trained, %d made constants", all - 7);
    CU_ASSERT_STRING_EQUAL(sel->detail, want);
    CU_ASSERT_EQUAL(sel->changed, all - 7);
    CU_ASSERT_EQUAL(fr_trainer_param_count(t), 7);
    fr_trainer_free(t);
    /* a bad regex is the user's error, named as the flag */
    o.train_regex = "(unclosed";
    CU_ASSERT_EQUAL(fr_trainer_new(model, &o, &t), FR_ERR_INVALID_ARG);
    CU_ASSERT(strstr(fr_last_error(), "--train regex '(unclosed'") != NULL);
    fr_clear_error();
    fr_graph_free(model);
    /* a --train that also selects an exporter's buffer (the dynamic Qwen3 export's RoPE
       inv_freq): counted as trained and named, never as a negative number of constants */
    fr_graph *hf = fr_ft_open_hf("qwen3_op18_dynamic");
    fr_ft_hf_train_options(&o);
    o.train_regex = FR_FT_HF_TRAIN;
    o.eval_only = 1;
    FR_ASSERT_OK(fr_trainer_new(hf, &o, &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    sel = result(t, "select_params");
    CU_ASSERT_PTR_NOT_NULL_FATAL(sel);
    const char *detail = sel ? sel->detail : "";
    printf("\n  qwen3_op18_dynamic, --train %s: %s", o.train_regex, detail);
    CU_ASSERT(strstr(detail, "(1 not recorded as parameters), 0 made constants") != NULL);
    CU_ASSERT(sel && sel->changed == 1);
    fr_trainer_free(t);
    fr_graph_free(hf);
}

/* fp8run_model_compile's report lists every pass of the list, in order. */
static void check_api(const char *precision)
{
    char path[600];
    fr_fixture(path, sizeof path, "llama_tiny/model.onnx");
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(path, &m), FP8RUN_OK);
    fp8run_train_config cfg;
    CU_ASSERT_EQUAL(fp8run_train_config_init(&cfg, sizeof cfg), FP8RUN_OK);
    cfg.batch = 2;
    cfg.seq_len = 13;
    cfg.precision = precision;
    fp8run_report *r = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_compile(m, &cfg, &r), FP8RUN_OK);
    int n;
    const fr_pass *p = fr_pipeline_passes(&n);
    n = forward_entries(); /* a compile and an evaluation-only trainer build no backward */
    CU_ASSERT_EQUAL_FATAL(fp8run_report_pass_count(r), n);
    const int fp8 = strcmp(precision, "fp32") != 0;
    for (int i = 0; i < n; i++) {
        fp8run_pass_info info = {.struct_size = sizeof info};
        CU_ASSERT_EQUAL_FATAL(fp8run_report_pass(r, i, &info), FP8RUN_OK);
        CU_ASSERT_STRING_EQUAL(info.name, p[i].name);
        CU_ASSERT_STRING_EQUAL(info.what, p[i].what);
        if (strcmp(info.name, "fp8_compile") == 0) {
            CU_ASSERT_EQUAL(info.ran, fp8);
            CU_ASSERT_EQUAL(info.changed, fp8 ? 15 : 0); /* llama_tiny's Linears */
        }
        if (strcmp(info.name, "fuse_attention") == 0) CU_ASSERT_STRING_EQUAL(info.detail, "2 fused");
    }
    fp8run_pass_info info = {.struct_size = sizeof info};
    CU_ASSERT_EQUAL(fp8run_report_pass(r, n, &info), FP8RUN_ERR_RANGE);
    CU_ASSERT_EQUAL(fp8run_report_pass(r, -1, &info), FP8RUN_ERR_RANGE);
    info.struct_size = sizeof(size_t);
    CU_ASSERT_NOT_EQUAL(fp8run_report_pass(r, 0, &info), FP8RUN_OK);
    CU_ASSERT_NOT_EQUAL(fp8run_report_pass(NULL, 0, &info), FP8RUN_OK);
    CU_ASSERT_EQUAL(fp8run_report_pass_count(NULL), 0);
    fp8run_report_destroy(r);
    fp8run_model_destroy(m);
}

static void test_api_fp8(void) { check_api("fp8"); }
static void test_api_fp32(void) { check_api("fp32"); }

int main(void)
{
    CU_TestInfo tests[] = {
        {"the list: unique names, stages in order, the orders passes rely on, options known", test_list},
        {"runner: options off run nothing, results in list order, no resolver is an error", test_runner_off},
        {"trainer options by name: unknown is an error, precision, flags", test_unknown_option},
        {"trainer fp8: one result per entry, counts match the graph", test_trainer_fp8},
        {"trainer fp32: fp8_compile off", test_trainer_fp32},
        {"trainer bf16 --no-fuse-attention: attention and rotary off", test_trainer_no_attention},
        {"select_params: --train / --freeze keep exactly the matches; a bad regex named", test_select_params},
        {"C API: fp8run_model_compile fp8 reports every pass in order", test_api_fp8},
        {"C API: fp32 (an evaluation-only trainer) too, fp8_compile off", test_api_fp32},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"pipeline", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
