/* `fp8run plot`: training logs (hand-written ones with known values, and a real fp8 run with
 * --log-fp8) become a well-formed SVG with the charts, series, legend entries, log scale and
 * skipped-step marks they call for; bad logs and command lines fail with clear messages. */
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"

/* A minimal XML well-formedness check: every tag closes in order, attributes are quoted, text
 * has no raw '<' and only known entities. Returns NULL or what is wrong. */
static const char *xml_problem(const char *s)
{
    static char why[160];
    char stack[64][32];
    int depth = 0, root_closed = 0;
    if (strncmp(s, "<?xml", 5) == 0) s = strstr(s, "?>") + 2;
    while (*s) {
        if (*s == '&') {
            if (strncmp(s, "&lt;", 4) && strncmp(s, "&gt;", 4) && strncmp(s, "&amp;", 5) && strncmp(s, "&quot;", 6))
                return "an unknown entity";
            s++;
            continue;
        }
        if (*s != '<') {
            if (depth == 0 && !strchr(" \t\r\n", *s)) return "text outside the root element";
            s++;
            continue;
        }
        int closing = s[1] == '/';
        const char *name = s + 1 + closing;
        size_t n = strcspn(name, " \t\n/>");
        if (n == 0 || n >= 32) return "a bad tag name";
        const char *p = name + n;
        int quote = 0;
        for (; *p && (quote || *p != '>'); p++) {
            if (*p == '"') quote = !quote;
            if (!quote && *p == '<') return "'<' inside a tag";
        }
        if (!*p) return "an unterminated tag";
        int self = p[-1] == '/';
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, n) || stack[depth - 1][n]) {
                snprintf(why, sizeof why, "</%.*s> closes <%s>", (int)n, name, depth ? stack[depth - 1] : "");
                return why;
            }
            if (--depth == 0) root_closed = 1;
        } else if (!self) {
            if (root_closed) return "a second root element";
            if (depth == 64) return "too deep";
            snprintf(stack[depth++], 32, "%.*s", (int)n, name);
        }
        s = p + 1;
    }
    return depth ? "unclosed elements" : root_closed ? NULL : "no root element";
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* Run `fp8run plot ARGS -o name`, and return the SVG after checking that it is well-formed. */
static char *plot_svg(const char *args, const char *name)
{
    char cmd[600], want[200];
    snprintf(cmd, sizeof cmd, "plot %s -o %s", args, name);
    snprintf(want, sizeof want, "wrote %s", name);
    CLI_EXPECT(cli_run("%s", cmd), 0, cli_out, want);
    char *svg = cli_slurp_tmp(name, NULL);
    const char *why = xml_problem(svg);
    if (why) printf("\n  %s: %s", name, why);
    CU_ASSERT_PTR_NULL(why);
    return svg;
}

/* Two hand-written runs: every scalar chart, a val line, a skipped step, a null (non-finite)
 * loss, a gradient norm spanning four decades (log scale), a name that needs escaping. */
static void test_plot_runs(void)
{
    cli_write("a.jsonl",
              "{\"step\": 1, \"loss\": 5.5, \"lr\": 0.001, \"grad_norm\": 100, \"tokens_per_s\": 1000, \"skipped\": false}\n"
              "{\"step\": 2, \"loss\": null, \"lr\": 0.002, \"grad_norm\": null, \"tokens_per_s\": 1100, \"skipped\": true}\n"
              "\n"
              "{\"step\": 3, \"loss\": 4.0, \"lr\": 0.003, \"grad_norm\": 1, \"tokens_per_s\": 1200, \"skipped\": false}\n"
              "{\"step\": 4, \"loss\": 3.0, \"lr\": 0.003, \"grad_norm\": 0.01, \"tokens_per_s\": 1250, \"skipped\": false}\n"
              "{\"step\": 4, \"val_loss\": 3.5}\n");
    cli_write("b<&>.jsonl",
              "{\"step\": 1, \"loss\": 6.0, \"lr\": 0.001, \"grad_norm\": 2, \"tokens_per_s\": 900, \"skipped\": false}\n"
              "{\"step\": 8, \"loss\": 2.0, \"lr\": 0.0005, \"grad_norm\": 1, \"tokens_per_s\": 950, \"skipped\": false}\n");
    char *svg = plot_svg("a.jsonl 'b<&>.jsonl'", "ab.svg");
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    /* four charts, no FP8 charts without --log-fp8 records */
    CU_ASSERT_EQUAL(count(svg, ">learning rate<"), 1);
    CU_ASSERT_EQUAL(count(svg, ">tokens/s<"), 1);
    CU_ASSERT_EQUAL(count(svg, ">gradient norm<"), 1);
    CU_ASSERT_EQUAL(count(svg, "FP8"), 0);
    /* legend entries name the runs (escaped) */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">a train<"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">a val<"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">b&lt;&amp;&gt; train<"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">a skipped<"));
    /* one skipped-step mark in the chart and one in the legend */
    CU_ASSERT_EQUAL(count(svg, "<polygon"), 2);
    /* the gradient norm spans 1e-2..1e2: the one log-scale chart; its ticks are powers of ten */
    CU_ASSERT_EQUAL(count(svg, ">log scale<"), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">0.01<"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">100<"));
    /* the step axis is shared and nice: 0..8 */
    CU_ASSERT(count(svg, ">8<") >= 4);
    /* run a's loss breaks at the null: two pieces (the lone first point drawn as a dot) */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "<circle"));
    free(svg);
}

/* A real fp8 run with --log-fp8: amax and range-use charts for x, w and dy, a saturation line. */
static void test_plot_fp8(void)
{
    char model[600], tokens[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(tokens, sizeof tokens, "train/tokens.bin");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --val '%s' --val-batches 2 --val-every 3 --precision fp8 --device cpu "
                       "--steps 6 --batch 2 --seq 16 --lr 1e-3 --log r.jsonl --log-fp8 2",
                       model, tokens, tokens),
               0, cli_out, "trained");
    char *svg = plot_svg("r.jsonl --title 'tiny & fp8'", "r.svg");
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">tiny &amp; fp8<"));
    const char *ops[] = {"x", "w", "dy"};
    for (int i = 0; i < 3; i++) {
        char t[80];
        snprintf(t, sizeof t, ">FP8 amax of %s, per Linear<", ops[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(svg, t));
        snprintf(t, sizeof t, ">FP8 range use of %s (amax*scale/max)<", ops[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(svg, t));
    }
    CU_ASSERT_EQUAL(count(svg, ">saturates above 1<"), 3);
    /* Linear names shortened in the legend, fused groups joined */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "o_proj<"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "mlp/gate_proj+up_proj<"));
    CU_ASSERT_PTR_NULL(strstr(svg, "MatMul"));
    free(svg);
}

static void test_plot_errors(void)
{
    cli_write("bad.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\n");
    cli_write("empty.jsonl", "\n");
    CLI_EXPECT(cli_run("plot bad.jsonl -o x.svg"), 1, cli_err, "bad.jsonl:2: not a JSON record");
    CLI_EXPECT(cli_run("plot empty.jsonl -o x.svg"), 1, cli_err, "has no records");
    CLI_EXPECT(cli_run("plot missing.jsonl -o x.svg"), 1, cli_err, "cannot open training log 'missing.jsonl'");
    CLI_EXPECT(cli_run("plot bad.jsonl"), 2, cli_err, "-o OUT.svg is required");
    CLI_EXPECT(cli_run("plot -o x.svg"), 2, cli_err, "at least one log");
    CLI_EXPECT(cli_run("plot a.jsonl --width 3 -o x.svg"), 2, cli_err, "unknown option '--width'");
    CLI_EXPECT(cli_run("plot --help"), 0, cli_out, "usage: fp8run plot");
}

static CU_TestInfo tests[] = {
    {"two runs: charts, legend, log scale, skipped marks, gaps", test_plot_runs},
    {"an fp8 run with --log-fp8: amax and range use per operand", test_plot_fp8},
    {"bad logs and command lines", test_plot_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"plot_cli", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
