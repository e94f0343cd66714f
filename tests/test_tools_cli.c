/* `fp8run generate` and `fp8run bench` on the CPU: the generated Llama loads, prepares, trains
 * (loss falls on a learnable stream) and exports a model onnxruntime-style tools can read; bench
 * reports its figures as a table and as JSON with the FLOP count of the formula; usage errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"
#include "graph/onnx_io.h"
#include "graph/rng.h"
#include "runtime/train/llama_gen.h"

static double json_num(const char *json, const char *key)
{
    char k[128];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

static void test_generate(void)
{
    CLI_EXPECT(cli_run("generate llama --preset tiny --layers 3 --dim 48 --heads 6 --kv-heads 3 --ffn 96 -o g.onnx"),
               0, cli_out, "wrote g.onnx");
    char p[700];
    snprintf(p, sizeof p, "%s/g.onnx", cli_tmp);
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(p, &g));
    /* 3 layers x (2 norms + 7 matrices) + embedding + final norm + LM head */
    int n_init = g->n_initializers;
    CU_ASSERT_EQUAL(n_init, 3 * 9 + 3);
    int64_t want = 128 * 48 + 3 * (2 * 48 + 48 * 48 + 2 * 48 * 24 + 48 * 48 + 3 * 48 * 96) + 48 + 48 * 128;
    CU_ASSERT_EQUAL(fr_graph_param_count(g), want);
    fr_graph_free(g);
    /* it trains: a repeating pattern is learned in a few steps */
    FILE *f = fopen(strcat(strcpy(p, cli_tmp), "/pattern.txt"), "w");
    for (int i = 0; i < 4000; i++) fputs("abcdefgh", f);
    fclose(f);
    CLI_EXPECT(cli_run("train g.onnx --data pattern.txt --data-dtype uint8 --steps 40 --batch 4 --seq 32 --lr 1e-2 "
                       "--device cpu --log g.jsonl --export g_trained.onnx"),
               0, cli_out, "exported g_trained.onnx");
    char lp[700];
    snprintf(lp, sizeof lp, "%s/g.jsonl", cli_tmp);
    char *log = cli_slurp(lp, NULL);
    double first = json_num(log, "loss"), last = NAN;
    for (const char *q = log; (q = strstr(q, "\"loss\": ")); q++) last = strtod(q + 8, NULL);
    CU_ASSERT(first > 4.0 && last < 0.5 * first);
    if (!(last < 0.5 * first)) printf("\n  loss %g -> %g", first, last);
    free(log);
    CLI_EXPECT(cli_run("generate llama --preset huge -o x.onnx"), 2, cli_err, "--preset");
    CLI_EXPECT(cli_run("generate llama --dim 50 --heads 4 -o x.onnx"), 2, cli_err, "--heads");
    CLI_EXPECT(cli_run("generate gpt -o x.onnx"), 2, cli_err, "llama");
    CLI_EXPECT(cli_run("generate llama"), 2, cli_err, "-o");
}

static void test_bench(void)
{
    CLI_EXPECT(cli_run("generate llama --preset tiny -o t.onnx"), 0, cli_out, "wrote");
    CLI_EXPECT(cli_run("bench t.onnx --batch 2 --seq 32 --warmup 1 --steps 3 --device cpu --json b.json"), 0, cli_out,
               "tokens/s");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "step time"));
    char p[700];
    snprintf(p, sizeof p, "%s/b.json", cli_tmp);
    char *j = cli_slurp(p, NULL);
    CU_ASSERT(json_num(j, "step_ms_median") > 0);
    CU_ASSERT(json_num(j, "tokens_per_s") > 0);
    CU_ASSERT_EQUAL(json_num(j, "batch"), 2);
    /* FLOPs: 6 x (matrix parameters) x tokens + 12 x layers x d x seq x tokens */
    double n_mm = json_num(j, "matmul_parameters"), tokens = 64;
    CU_ASSERT_EQUAL(n_mm, 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176) + 64 * 128);
    double want = 6 * n_mm * tokens + 12.0 * 2 * 64 * 32 * tokens;
    CU_ASSERT(fabs(json_num(j, "flops_per_step") - want) <= 1e-5 * want);
    CU_ASSERT_PTR_NOT_NULL(strstr(j, "\"precision\": \"fp32\""));
    double fused_loss = json_num(j, "loss_first");
    /* the file names the build it was measured with, as --version does */
    char commit[64] = "";
    const char *c = strstr(j, "\"commit\": \"");
    CU_ASSERT_PTR_NOT_NULL(c);
    if (c) sscanf(c + 11, "%63[^\"]", commit);
    CU_ASSERT(strlen(commit) > 0);
    free(j);
    char want_version[96];
    snprintf(want_version, sizeof want_version, "(commit %s)", commit);
    CLI_EXPECT(cli_run("--version"), 0, cli_out, want_version);
    /* the unfused graph (attention, RoPE, SwiGLU) gives the same first loss */
    CLI_EXPECT(cli_run("bench t.onnx --batch 2 --seq 32 --warmup 1 --steps 3 --device cpu --no-fuse-attention "
                       "--no-fuse-swiglu --json u.json"),
               0, cli_out, "tokens/s");
    snprintf(p, sizeof p, "%s/u.json", cli_tmp);
    j = cli_slurp(p, NULL);
    CU_ASSERT(fabs(json_num(j, "loss_first") - fused_loss) <= 1e-5 * fabs(fused_loss));
    free(j);
    /* llama:tiny is generate's tiny model, made in memory: the same first loss */
    CLI_EXPECT(cli_run("bench llama:tiny --batch 2 --seq 32 --warmup 1 --steps 3 --device cpu --json l.json"), 0, cli_out,
               "tokens/s");
    snprintf(p, sizeof p, "%s/l.json", cli_tmp);
    j = cli_slurp(p, NULL);
    CU_ASSERT_EQUAL(json_num(j, "loss_first"), fused_loss);
    free(j);
    CLI_EXPECT(cli_run("bench llama:huge --batch 2 --seq 16"), 2, cli_err, "'huge' is not one of");
    CLI_EXPECT(cli_run("bench t.onnx --batch 2 --seq 16 --steps 2 --warmup 0 --precision fp8 --device cpu"), 0, cli_out,
               "fp8");
    /* --grad-accum: a step is K micro-batches, its tokens and FLOPs K times one's */
    CLI_EXPECT(cli_run("bench t.onnx --batch 2 --seq 32 --grad-accum 3 --warmup 0 --steps 2 --device cpu --json a.json"), 0,
               cli_out, "2 x 32 x 3 micro-batches (192 tokens per step)");
    snprintf(p, sizeof p, "%s/a.json", cli_tmp);
    j = cli_slurp(p, NULL);
    CU_ASSERT_EQUAL(json_num(j, "grad_accum"), 3);
    CU_ASSERT(fabs(json_num(j, "flops_per_step") - 3 * want) <= 1e-5 * 3 * want);
    CU_ASSERT_EQUAL(json_num(j, "skipped"), 0);
    free(j);
    CLI_EXPECT(cli_run("bench t.onnx --seq 16"), 2, cli_err, "--batch");
    CLI_EXPECT(cli_run("bench t.onnx --batch 2 --seq 16 --precision fp16"), 2, cli_err, "--precision");
    CLI_EXPECT(cli_run("bench missing.onnx --batch 2 --seq 16"), 1, cli_err, "missing.onnx");
}

/* Large weights are made by threads (runtime/train/llama_gen.c): the same values as one loop of
 * Box-Muller pairs over the seeded stream, across chunk boundaries and for the weights after. */
static void serial_normal(fr_prng *r, float *x, int64_t n, float std)
{
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = fr_prng_double(r), u2 = fr_prng_double(r);
        double rr = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)), a = 2 * M_PI * u2;
        if (x) x[i] = (float)(std * rr * cos(a));
        if (x && i + 1 < n) x[i + 1] = (float)(std * rr * sin(a));
    }
}

static void test_generate_threads_same_values(void)
{
    /* embedding 70001 x 64 = 4480064 values: above the threaded size, two chunks, the second partial */
    fr_llama_config c = {.d = 64, .layers = 1, .heads = 4, .kv_heads = 2, .ffn = 96, .vocab = 70001, .max_seq = 16,
                         .seed = 5};
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_llama_generate(&c, &g));
    int e = fr_graph_find_value(g, "embed_tokens.weight"), q = fr_graph_find_value(g, "layers.0.self_attn.q_proj.weight");
    CU_ASSERT_FATAL(e >= 0 && q >= 0);
    const int64_t ne = c.vocab * c.d, nq = c.d * c.d;
    float *we = malloc((size_t)ne * sizeof *we), *wq = malloc((size_t)nq * sizeof *wq);
    fr_prng r;
    fr_prng_seed(&r, c.seed);
    serial_normal(&r, we, ne, 0.02f);
    serial_normal(&r, NULL, c.d, 0); /* the input norm's gains (ones) draw too */
    serial_normal(&r, wq, nq, 0.02f);
    CU_ASSERT_EQUAL(memcmp(g->values[e].constant->data, we, (size_t)ne * sizeof *we), 0);
    CU_ASSERT_EQUAL(memcmp(g->values[q].constant->data, wq, (size_t)nq * sizeof *wq), 0);
    free(we);
    free(wq);
    fr_graph_free(g);
}

static CU_TestInfo tests[] = {
    {"generate llama: shapes, parameter count, trains, exports; usage errors", test_generate},
    {"bench: table, JSON, FLOP formula; usage errors", test_bench},
    {"generate: threaded weights equal the serial stream", test_generate_threads_same_values},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"tools_cli", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
