/* What runs off the fast path (passes/fast_path.h), on the trainers' bf16 graphs (forward and
 * backward) of the HF fixtures:
 *  - every fixture of tests/fixtures/hf (16 architectures, opsets 18 and 23, static and
 *    dynamic with attention_mask), trained as the CLI trains them: nothing. Among them Llama,
 *    Qwen3, OLMo2 and Gemma3 (q/k norms fused into AttentionQKV), GPT-2, BERT, OPT and
 *    Starcoder2 (the residual sums' LayerNorms fused: AddLayerNorm);
 *  - Llama with fuse_attention_io off: each Attention and AttentionGrad named with the reason
 *    ("staging"), the head Transposes and RoPE around them;
 *  - GPT-NeoX: nothing either (its attention and Phi-3's fuse with their staging:
 *    tests/test_attention_qkv_layout.c), its norms of residual sums fused (the parallel block's
 *    two in one AddLayerNorm);
 *  - attention the executor ran on fp8run's own kernels: each node marked with the reason;
 *  - the text: one line per kind, a warning line exactly when the share of the time passes 5%;
 *  - fp8run_model_compile's report carries the text (the C API `fp8run info` prints). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "passes/fast_path.h"
#include "runtime/train/train_internal.h"
#include "tests/fuse_test_util.h"
#include "tests/harness.h"

/* The trainer's bf16 graph of a fixture (fuse_attention_io on or off), classified into r; *t the
 * trainer (its graph: (*t)->g). Returns the nodes off the fast path. */
static int check(const char *dir, int io, fr_slow_report *r, fr_trainer **t)
{
    fr_graph *model = fr_ft_open_hf(dir);
    fr_train_options o;
    fr_ft_hf_train_options(&o);
    o.precision = "bf16";
    o.fp8.precision = "bf16";
    o.fuse_attention_io = io;
    fr_status st = fr_trainer_new(model, &o, t);
    if (st != FR_OK) printf("\n  %s: %s", dir, fr_last_error());
    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
    FR_ASSERT_OK(fr_fast_path_check((*t)->g, r));
    if (getenv("FR_FAST_PATH_SHOW")) { /* (the reports, to read) */
        char *text = NULL;
        FR_ASSERT_OK(fr_slow_report_text(r, (*t)->g, NULL, 0, 0, &text));
        printf("\n%s: %d nodes in the graph\n%s", dir, (*t)->g->n_nodes, text);
        free(text);
    }
    fr_graph_free(model);
    return r->n_slow;
}

static int count_kind(const fr_slow_report *r, const char *op, const char *why_part)
{
    int n = 0;
    for (int k = 0; k < r->n_kinds; k++)
        if (strcmp(r->kinds[k].op, op) == 0 && strstr(r->kinds[k].why, why_part)) n += r->kinds[k].count;
    return n;
}

/* strcmp for qsort over an array of names */
static int by_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Every export under tests/fixtures/hf (ARCH_opNN_static / _dynamic), read from the folder so a
 * fixture added later is checked too; *n of them, sorted. */
static char **hf_fixture_dirs(int *n)
{
    char p[600];
    DIR *d = opendir(fr_fixture(p, sizeof p, "hf"));
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    char **names = NULL;
    int cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *op = strstr(e->d_name, "_op");
        if (!op || (!strstr(op, "_static") && !strstr(op, "_dynamic"))) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            CU_ASSERT_PTR_NOT_NULL_FATAL(grown);
            names = grown;
        }
        names[*n] = strdup(e->d_name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(names[*n]);
        (*n)++;
    }
    closedir(d);
    qsort(names, (size_t)*n, sizeof *names, by_name);
    return names;
}

static void test_fast(void)
{
    int n_dirs = 0;
    char **dirs = hf_fixture_dirs(&n_dirs);
    printf("\n  %d HF fixtures", n_dirs);
    CU_ASSERT(n_dirs >= 58); /* 16 architectures, op18 / op23, static / dynamic: none lost */
    for (int i = 0; i < n_dirs; i++) {
        fr_slow_report r;
        fr_trainer *t = NULL;
        const int n = check(dirs[i], 1, &r, &t);
        if (n)
            printf("\n  %s: %d nodes off the fast path, first kind %s: %s", dirs[i], n, r.kinds[0].op, r.kinds[0].why);
        CU_ASSERT_EQUAL(n, 0);
        CU_ASSERT(r.n_nodes > 40); /* forward and backward */
        fr_slow_report_free(&r);
        fr_trainer_free(t);
        free(dirs[i]);
    }
    free(dirs);
}

static void test_llama_io_off(void)
{
    fr_slow_report r;
    fr_trainer *t = NULL;
    check("llama_op18_static", 0, &r, &t);
    CU_ASSERT_EQUAL(count_kind(&r, "Attention", "not fused with its Q/K/V staging"), 2);
    CU_ASSERT_EQUAL(count_kind(&r, "AttentionGrad", "not fused with its staging"), 2);
    CU_ASSERT(count_kind(&r, "Transpose", "head layout around an attention") >= 4);
    CU_ASSERT(count_kind(&r, "Rotary", "RoPE around") == 4);
    fr_slow_report_free(&r);
    fr_trainer_free(t);
}

static void test_neox_phi3(void)
{
    fr_slow_report r;
    fr_trainer *t = NULL;
    check("gpt_neox_op18_static", 1, &r, &t);
    /* every norm of a residual sum fused, the parallel block's two in one AddLayerNorm */
    CU_ASSERT_EQUAL(count_kind(&r, "LayerNormalization", ""), 0);
    CU_ASSERT_EQUAL(count_kind(&r, "LayerNormGrad", ""), 0);
    if (r.n_slow) printf("\n  gpt_neox_op18_static: %d nodes off the fast path, first kind %s: %s", r.n_slow,
                         r.kinds[0].op, r.kinds[0].why);
    CU_ASSERT_EQUAL(r.n_slow, 0);
    fr_slow_report_free(&r);
    fr_trainer_free(t);
}

/* Gemma 2: the scores' softcap c * tanh(s / c) and HF's eager repeat_kv fuse into the staged
 * attention (softcap 5 on each), and the final logits' softcap (3) becomes one Softcap node:
 * nothing is left off the fast path. */
static void test_gemma2_softcap(void)
{
    static const char *const dirs[] = {"gemma2_op18_static", "gemma2_op23_static"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        fr_slow_report r;
        fr_trainer *t = NULL;
        check(dirs[i], 1, &r, &t);
        int capped = 0, logit_caps = 0;
        for (int n = 0; n < t->g->n_nodes; n++) {
            const fr_node *nd = &t->g->nodes[n];
            float cap = 0;
            if (!nd->dead && strcmp(nd->op_type, "AttentionQKV") == 0 &&
                fr_node_attr_float(nd, "softcap", 0.0f, &cap) == FR_OK && cap == 5.0f)
                capped++;
            if (!nd->dead && strcmp(nd->op_type, "Softcap") == 0 &&
                fr_node_attr_float(nd, "alpha", 0.0f, &cap) == FR_OK && cap == 3.0f)
                logit_caps++;
        }
        CU_ASSERT_EQUAL(capped, 2);
        CU_ASSERT_EQUAL(logit_caps, 1);
        CU_ASSERT_EQUAL(r.n_slow, 0);
        if (r.n_slow || capped != 2) printf("\n  %s: %d capped, first kind %s", dirs[i], capped,
                                            r.n_kinds ? r.kinds[0].op : "-");
        fr_slow_report_free(&r);
        fr_trainer_free(t);
    }
}

/* OPT scales q_proj's output before the head split: the scale moves into the attention, which
 * then stages Q/K/V from the fused projection like any other. */
static void test_opt_scaled_q(void)
{
    for (int op = 18; op <= 23; op += 5) { /* the unfused attention (18) and ONNX Attention (23) */
        fr_slow_report r;
        fr_trainer *t = NULL;
        check(op == 18 ? "opt_op18_static" : "opt_op23_static", 1, &r, &t);
        int staged = 0;
        for (int n = 0; n < t->g->n_nodes; n++)
            staged += !t->g->nodes[n].dead && strcmp(t->g->nodes[n].op_type, "AttentionQKV") == 0;
        CU_ASSERT_EQUAL(staged, 2);
        CU_ASSERT_EQUAL(count_kind(&r, "Attention", ""), 0);
        CU_ASSERT_EQUAL(count_kind(&r, "Transpose", ""), 0);
        CU_ASSERT_EQUAL(count_kind(&r, "Mul", ""), 0);
        CU_ASSERT_EQUAL(r.n_slow, 0);
        fr_slow_report_free(&r);
        fr_trainer_free(t);
    }
}

/* Attention that ran on fp8run's own kernels (what the executor reports) is marked, once. */
static void test_generic_attention(void)
{
    fr_slow_report r;
    fr_trainer *t = NULL;
    CU_ASSERT_EQUAL(check("llama_op18_static", 1, &r, &t), 0);
    fr_fast_path_generic_attention(&r, t->g, "head dim 256 over cuDNN's limit");
    CU_ASSERT_EQUAL(count_kind(&r, "AttentionQKV", "own attention kernels, not cuDNN's flash attention: head dim 256"),
                    2);
    CU_ASSERT_EQUAL(count_kind(&r, "AttentionQKVGrad", "own attention kernels"), 2);
    CU_ASSERT_EQUAL(r.n_slow, 4);
    fr_fast_path_generic_attention(&r, t->g, "again");
    CU_ASSERT_EQUAL(r.n_slow, 4);
    fr_slow_report_free(&r);
    fr_trainer_free(t);
}

/* The text with times: a line per kind, the warning line only past 5%. */
static void test_text(void)
{
    fr_slow_report r;
    fr_trainer *t = NULL;
    check("llama_op18_static", 0, &r, &t);
    const fr_graph *g = t->g;
    double *ms = calloc((size_t)g->n_nodes, sizeof(double));
    CU_ASSERT_FATAL(ms != NULL);
    double slow = 0, total = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        ms[i] = g->nodes[i].dead ? 0 : 1.0;
        total += ms[i];
        slow += r.kind_of[i] >= 0 ? ms[i] : 0;
    }
    CU_ASSERT(fabs(fr_slow_share(&r, g, ms, total) - slow / total) < 1e-12);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the slow nodes' share as counted (> 5% here); pass 1: the rest made 100x slower */
        double tot = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            if (pass && r.kind_of[i] < 0) ms[i] *= 100;
            tot += ms[i];
        }
        const double share = fr_slow_share(&r, g, ms, tot);
        char *text = NULL;
        FR_ASSERT_OK(fr_slow_report_text(&r, g, ms, tot, 0, &text));
        int lines = 0;
        for (const char *p = text; *p; p++) lines += *p == '\n';
        const int warn = strstr(text, "warning: ") != NULL;
        CU_ASSERT_EQUAL(warn, share > 0.05);
        CU_ASSERT_EQUAL(lines, 1 + r.n_kinds + warn);
        CU_ASSERT(pass == 1 || share > 0.05);
        CU_ASSERT(pass == 0 || share <= 0.05);
        free(text);
    }
    free(ms);
    fr_slow_report_free(&r);
    fr_trainer_free(t);
}

/* The C API: the compile report's text. */
static void test_api(void)
{
    char p[600];
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(fr_fixture(p, sizeof p, "hf/gpt_neox_op18_static/model.onnx"), &m),
                          FP8RUN_OK);
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.precision = "bf16";
    c.batch = 2;
    c.seq_len = 11;
    fp8run_report *rep = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_compile(m, &c, &rep), FP8RUN_OK);
    const char *s = fp8run_report_slow_path(rep);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT(strstr(s, "off the fast path: ") == s);
    CU_ASSERT(strstr(s, "Attention") == NULL); /* (fused with its staging: no line) */
    fp8run_report_destroy(rep);
    fp8run_model_destroy(m);
}

int main(void)
{
    CU_TestInfo tests[] = {
        {"every HF fixture, opsets 18 and 23, static and dynamic + attention_mask: nothing off the fast path",
         test_fast},
        {"Llama without the staging fusion: attention, Transposes, RoPE named", test_llama_io_off},
        {"GPT-NeoX: nothing off the fast path, its parallel block's LayerNorms in one AddLayerNorm", test_neox_phi3},
        {"Gemma 2: softcapped attention and eager GQA fused; the logits' softcap one node", test_gemma2_softcap},
        {"OPT: the query scaled before the head split, fused and staged", test_opt_scaled_q},
        {"attention on fp8run's own kernels: marked with the reason", test_generic_attention},
        {"text: a line per kind, the warning past 5% only", test_text},
        {"C API: the compile report's text", test_api},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"fast_path", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return fr_test_main(suites);
}
