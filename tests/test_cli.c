/* The fp8run CLI, run as a program (FR_CLI): help and version, usage errors (exit 2 with a
 * message), failures (exit 1), `info` on a model written here (inputs with symbolic dims,
 * parameter count, op histogram sorted by count, the prepared summary with --dim) and on the
 * gpt2_tiny fixture, `run` writing every output as .npy (names sanitized, folder created,
 * dims from the input arrays) matching a double-precision reference and the fixture's
 * PyTorch outputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cli_runner.h"
#include "graph/onnx_io.h"
#include "runtime/io/npy.h"

static void test_help_and_version(void)
{
    CLI_EXPECT(cli_run("--help"), 0, cli_out, "usage: fp8run");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "info"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "run"));
    CU_ASSERT_STRING_EQUAL(cli_err, "");
    CLI_EXPECT(cli_run("--version"), 0, cli_out, "fp8run 0.");
    CLI_EXPECT(cli_run("%s", ""), 2, cli_err, "usage: fp8run"); /* no arguments */
    CU_ASSERT_STRING_EQUAL(cli_out, "");
    CLI_EXPECT(cli_run("info --help"), 0, cli_out, "--dim NAME=VALUE");
    CLI_EXPECT(cli_run("run --help"), 0, cli_out, "taken from the shapes");
    CLI_EXPECT(cli_run("run x.onnx --help"), 0, cli_out, "--output-dir");
    CLI_EXPECT(cli_run("help run"), 0, cli_out, "--input NAME=FILE.npy");
}

static void test_usage_errors(void)
{
    CLI_EXPECT(cli_run("frobnicate"), 2, cli_err, "fp8run: error: unknown command 'frobnicate'");
    CLI_EXPECT(cli_run("--frob"), 2, cli_err, "unknown option '--frob'");
    CLI_EXPECT(cli_run("info"), 2, cli_err, "no MODEL");
    CLI_EXPECT(cli_run("info a.onnx b.onnx"), 2, cli_err, "only one MODEL");
    CLI_EXPECT(cli_run("info a.onnx --dim batch"), 2, cli_err, "NAME=VALUE");
    CLI_EXPECT(cli_run("info a.onnx --dim batch=-1"), 2, cli_err, "non-negative");
    CLI_EXPECT(cli_run("info a.onnx --dim batch=2x"), 2, cli_err, "non-negative");
    CLI_EXPECT(cli_run("info a.onnx --dim"), 2, cli_err, "--dim needs a value");
    CLI_EXPECT(cli_run("info a.onnx --bogus"), 2, cli_err, "unknown option '--bogus'");
    CLI_EXPECT(cli_run("run a.onnx --input x=x.npy"), 2, cli_err, "--output-dir DIR is required");
    CLI_EXPECT(cli_run("run a.onnx --input x --output-dir o"), 2, cli_err, "NAME=FILE.npy");
    CLI_EXPECT(cli_run("run a.onnx --input x=a.npy --input x=b.npy --output-dir o"), 2, cli_err, "twice");
    CU_ASSERT_STRING_EQUAL(cli_out, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "fp8run run --help"));
    /* failures of the work itself are exit code 1 */
    CLI_EXPECT(cli_run("info /nonexistent/model.onnx"), 1, cli_err, "fp8run: error: ");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "/nonexistent/model.onnx"));
}

/* x[batch, seq, 4] -> MatMul(W[4,3]) -> Relu x3 -> Identity -> "out/relu:0";
 * Shape(x) -> Cast(float) -> "shape:f" */
static const float W[12] = {0.5f, -1.f, 0.25f, 1.5f, 0.75f, -0.5f, -0.25f, 1.f, 2.f, 0.1f, -0.3f, 0.6f};

static void write_model(const char *path)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    g->producer_name = strdup("test_cli");
    g->producer_version = strdup("1.2");
    int x, w, mm, r1, r2, r3, out, s, sf;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    int64_t xd[3] = {-1, -1, 4};
    fr_value_set_shape(&g->values[x], FR_F32, 3, xd);
    g->values[x].dim_params[0] = strdup("batch");
    g->values[x].dim_params[1] = strdup("seq");
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    FR_ASSERT_OK(fr_graph_add_value(g, "W", &w));
    fr_tensor *wt;
    int64_t wd[2] = {4, 3};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, wd, "W", &wt));
    memcpy(wt->data, W, sizeof W);
    FR_ASSERT_OK(fr_graph_set_initializer(g, w, wt));
    FR_ASSERT_OK(fr_graph_add_value(g, "mm", &mm));
    FR_ASSERT_OK(fr_graph_add_value(g, "r1", &r1));
    FR_ASSERT_OK(fr_graph_add_value(g, "r2", &r2));
    FR_ASSERT_OK(fr_graph_add_value(g, "r3", &r3));
    FR_ASSERT_OK(fr_graph_add_value(g, "out/relu:0", &out));
    FR_ASSERT_OK(fr_graph_add_value(g, "s", &s));
    FR_ASSERT_OK(fr_graph_add_value(g, "shape:f", &sf));
    int in_mm[2] = {x, w};
    FR_ASSERT_OK(fr_graph_add_node(g, "MatMul", "", "/layer/MatMul", 2, in_mm, 1, &mm, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Relu", "", "relu1", 1, &mm, 1, &r1, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Relu", "", "relu2", 1, &r1, 1, &r2, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Relu", "", "relu3", 1, &r2, 1, &r3, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Identity", "", "id", 1, &r3, 1, &out, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Shape", "", "shape", 1, &x, 1, &s, NULL));
    int cast;
    FR_ASSERT_OK(fr_graph_add_node(g, "Cast", "", "cast", 1, &s, 1, &sf, &cast));
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[cast], "to", FR_F32));
    int64_t od[3] = {-1, -1, 3}, sd[1] = {3};
    fr_value_set_shape(&g->values[out], FR_F32, 3, od);
    g->values[out].dim_params[0] = strdup("batch");
    g->values[out].dim_params[1] = strdup("seq");
    fr_value_set_shape(&g->values[sf], FR_F32, 1, sd);
    FR_ASSERT_OK(fr_graph_mark_output(g, out));
    FR_ASSERT_OK(fr_graph_mark_output(g, sf));
    FR_ASSERT_OK(fr_onnx_save_file(g, path, NULL));
    fr_graph_free(g);
}

static void test_info(void)
{
    char model[600];
    snprintf(model, sizeof model, "%s/m.onnx", cli_tmp);
    write_model(model);
    CLI_EXPECT(cli_run("info '%s'", model), 0, cli_out, "op histogram");
    CU_ASSERT_STRING_EQUAL(cli_err, "");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "producer       test_cli 1.2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "ai.onnx 17"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "[batch, seq, 4]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "out/relu:0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "parameters     12 (12 elements in 1 tensor)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "48 bytes"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "give --dim NAME=VALUE for batch, seq"));
    /* sorted by count: Relu (3) before the ops seen once, which are alphabetical */
    const char *relu = strstr(cli_out, "  Relu "), *cast = strstr(cli_out, "  Cast ");
    const char *matmul = strstr(cli_out, "  MatMul ");
    CU_ASSERT(relu && cast && matmul && relu < cast && cast < matmul);
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "Relu                         3"));

    CLI_EXPECT(cli_run("info '%s' --dim batch=2 --dim=seq=5", model), 0, cli_out, "prepared       4 nodes (2 folded");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "[batch=2, seq=5, 3]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "1 Identity removed"));
    /* a dim left open, and a dim the model does not have: exit 1 naming them */
    CLI_EXPECT(cli_run("info '%s' --dim batch=2", model), 1, cli_err, "--dim seq=VALUE");
    CLI_EXPECT(cli_run("info '%s' --dim batch=2 --dim sequence=5", model), 1, cli_err, "'sequence'");
    /* an export at fixed shapes: its tokens input's dims are the batch and seq the Linear report
     * and the fast-path report compile at, with no --batch/--seq given */
    char hf[600];
    fr_fixture(hf, sizeof hf, "hf/llama_op18_static/model.onnx");
    CLI_EXPECT(cli_run("info '%s'", hf), 0, cli_out, "off the fast path: nothing");
    CU_ASSERT_PTR_NULL(strstr(cli_out, "not available"));
}

static void test_run(void)
{
    char model[600], xin[600], outdir[600], path[700];
    snprintf(model, sizeof model, "%s/m.onnx", cli_tmp);
    write_model(model);
    fr_rng r = fr_test_rng("cli_run");
    int64_t xd[3] = {2, 5, 4};
    fr_tensor *x;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 3, xd, "x", &x));
    fr_rng_fill(&r, x->data, 40, -2, 2);
    snprintf(xin, sizeof xin, "%s/x.npy", cli_tmp);
    FR_ASSERT_OK(fr_npy_save(xin, x));
    snprintf(outdir, sizeof outdir, "%s/new/out dir", cli_tmp);
    /* dims come from x.npy's shape */
    CLI_EXPECT(cli_run("run '%s' --input x='%s' --output-dir '%s'", model, xin, outdir), 0, cli_out, "out_relu_0.npy");
    CU_ASSERT_STRING_EQUAL(cli_err, "");
    snprintf(path, sizeof path, "%s/out_relu_0.npy", outdir);
    fr_tensor *y = NULL, *sf = NULL;
    FR_ASSERT_OK(fr_npy_load(path, &y));
    CU_ASSERT_EQUAL_FATAL(y->dtype, FR_F32);
    CU_ASSERT_EQUAL_FATAL(y->rank, 3);
    CU_ASSERT_EQUAL(y->dims[0] * 100 + y->dims[1] * 10 + y->dims[2], 253);
    double ref[30];
    for (int m = 0; m < 10; m++)
        for (int n = 0; n < 3; n++) {
            double acc = 0;
            for (int k = 0; k < 4; k++) acc += (double)((float *)x->data)[m * 4 + k] * W[k * 3 + n];
            ref[m * 3 + n] = acc > 0 ? acc : 0;
        }
    CU_ASSERT(fr_rel_l2_d(y->data, ref, 30) < 1e-6);
    snprintf(path, sizeof path, "%s/shape_f.npy", outdir);
    FR_ASSERT_OK(fr_npy_load(path, &sf));
    CU_ASSERT_EQUAL(fr_tensor_numel(sf), 3);
    CU_ASSERT(sf->dtype == FR_F32 && ((float *)sf->data)[0] == 2 && ((float *)sf->data)[1] == 5 &&
              ((float *)sf->data)[2] == 4);
    fr_tensor_free(y);
    fr_tensor_free(sf);

    /* --dim disagreeing with the array, a missing input, an unknown input, a bad file */
    CLI_EXPECT(cli_run("run '%s' --input x='%s' --dim seq=6 --output-dir '%s'", model, xin, outdir), 1, cli_err,
               "input 'x'");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "[2, 5, 4]"));
    CLI_EXPECT(cli_run("run '%s' --output-dir '%s'", model, outdir), 1, cli_err, "--input x=FILE.npy");
    CLI_EXPECT(cli_run("run '%s' --input x='%s' --input y='%s' --output-dir '%s'", model, xin, xin, outdir), 1, cli_err,
               "no input named 'y'");
    CLI_EXPECT(cli_run("run '%s' --input x='%s' --output-dir '%s'", model, model, outdir), 1, cli_err,
               "not a .npy file");
    /* the output folder is a file */
    CLI_EXPECT(cli_run("run '%s' --input x='%s' --output-dir '%s'", model, xin, xin), 1, cli_err, "fp8run: error:");
    fr_tensor_free(x);
}

/* The fixture model through the CLI: info shows its histogram, run matches PyTorch. */
static void test_fixture_gpt2(void)
{
    char dir[600], path[1200];
    fr_fixture(dir, sizeof dir, "gpt2_tiny");
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "\n  fixture %s missing\n", path);
        CU_FAIL("gpt2_tiny fixture missing");
        return;
    }
    CLI_EXPECT(cli_run("info '%s'", path), 0, cli_out, "op histogram");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "  MatMul"));
    /* every input_<name>.npy becomes --input name=... */
    char cmd[1400], inputs[1600] = "";
    snprintf(cmd, sizeof cmd, "ls '%s' | sed -n 's/^input_\\(.*\\)\\.npy$/\\1/p' > '%s/names'", dir, cli_tmp);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/names", cli_tmp);
    char *names = cli_slurp(cmd, NULL);
    for (char *tok = strtok(names, "\n"); tok; tok = strtok(NULL, "\n")) {
        size_t off = strlen(inputs);
        snprintf(inputs + off, sizeof inputs - off, " --input '%s=%s/input_%s.npy'", tok, dir, tok);
    }
    free(names);
    CLI_EXPECT(cli_run("run '%s'%s --output-dir '%s/gpt2'", path, inputs, cli_tmp), 0, cli_out, ".npy");
    /* compare each written output with the fixture's output_<name>.npy */
    snprintf(cmd, sizeof cmd, "ls '%s' | sed -n 's/^output_\\(.*\\)\\.npy$/\\1/p' > '%s/names'", dir, cli_tmp);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/names", cli_tmp);
    names = cli_slurp(cmd, NULL);
    int compared = 0;
    for (char *tok = strtok(names, "\n"); tok; tok = strtok(NULL, "\n")) {
        fr_tensor *got = NULL, *want = NULL;
        snprintf(path, sizeof path, "%s/gpt2/%s.npy", cli_tmp, tok);
        FR_ASSERT_OK(fr_npy_load(path, &got));
        snprintf(path, sizeof path, "%s/output_%s.npy", dir, tok);
        FR_ASSERT_OK(fr_npy_load(path, &want));
        CU_ASSERT_EQUAL_FATAL(got->dtype, want->dtype);
        CU_ASSERT_EQUAL_FATAL(got->nbytes, want->nbytes);
        if (got->dtype == FR_F32) {
            double rel = fr_rel_l2(got->data, want->data, fr_tensor_numel(want));
            if (!(rel <= 1e-4)) fprintf(stderr, "\n  gpt2_tiny output %s: relative L2 %.3g\n", tok, rel);
            CU_ASSERT(rel <= 1e-4);
        } else {
            CU_ASSERT(memcmp(got->data, want->data, got->nbytes) == 0);
        }
        compared++;
        fr_tensor_free(got);
        fr_tensor_free(want);
    }
    free(names);
    CU_ASSERT(compared > 0);
}

/* info --memory=cuda (a plan: no device needed, only the CUDA backend built in) says where the
 * weights' fp8 codes are: made at every use with one micro-batch a step, kept with two. */
static void test_info_memory_codes(void)
{
#ifndef FP8RUN_HAVE_CUDA
    printf(" (skipped: built without the CUDA backend)");
#else
    char path[600];
    fr_fixture(path, sizeof path, "llama_tiny/model.onnx");
    const char *shape = "--memory=cuda --precision fp8 --batch 2 --seq 16";
    CLI_EXPECT(cli_run("info '%s' %s", path, shape), 0, cli_out, "FP8 weight codes");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "0.0 MiB (made in each Linear's scratch at every use"));
    CLI_EXPECT(cli_run("info '%s' %s --grad-accum 2", path, shape), 0, cli_out, "FP8 weight codes");
    CU_ASSERT_PTR_NULL(strstr(cli_out, "made in each Linear's scratch"));
    const char *row = strstr(cli_out, "FP8 weight codes");
    double mib = 0;
    CU_ASSERT(row && sscanf(row + strlen("FP8 weight codes"), "%lf", &mib) == 1 && mib > 0);
#endif
}

/* info --memory lists what the passes on the backward did, one a line under "after autodiff",
 * with the options that steer them (here --recompute mlp) */
static void test_info_memory_backward(void)
{
    char path[600];
    fr_fixture(path, sizeof path, "llama_tiny/model.onnx");
    CLI_EXPECT(cli_run("info '%s' --memory=cpu --precision fp8 --batch 2 --seq 16 --recompute mlp", path), 0, cli_out,
               "after autodiff");
    const char *a = strstr(cli_out, "after autodiff");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL(strstr(a, "narrow_gradients: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(a, "recompute: ") && !strstr(a, "recompute: off"));
    CU_ASSERT_PTR_NOT_NULL(strstr(a, "fp8_producers: "));
    CLI_EXPECT(cli_run("info '%s' --memory=cpu --precision fp32 --batch 2 --seq 16", path), 0, cli_out,
               "after autodiff");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "recompute: off"));
}

/* Broken fixtures through the CLI: exit code 1 and the library's message. */
static void test_fixture_errors(void)
{
    char model[600], input[600];
    fr_fixture(model, sizeof model, "bad/gather_oob.onnx");
    fr_fixture(input, sizeof input, "bad/gather_oob_input.npy");
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(model, &g));
    CU_ASSERT_EQUAL_FATAL(g->n_inputs, 1);
    CLI_EXPECT(
        cli_run("run '%s' --input '%s=%s' --output-dir '%s/oob'", model, g->values[g->inputs[0]].name, input, cli_tmp),
        1, cli_err, "fp8run: error: node '");
    fr_graph_free(g);
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "(Gather)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "out of range"));
    CU_ASSERT_STRING_EQUAL(cli_out, "");
    fr_fixture(model, sizeof model, "bad/unsupported_op.onnx");
    CLI_EXPECT(cli_run("info '%s'", model), 1, cli_err, "is not supported");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "op histogram")); /* what could be read is shown */
}

static CU_TestInfo cli_tests[] = {
    {"help_and_version", test_help_and_version},
    {"usage_errors", test_usage_errors},
    {"info", test_info},
    {"info --memory=cuda: where the weights' codes are", test_info_memory_codes},
    {"info --memory: the passes after autodiff", test_info_memory_backward},
    {"run", test_run},
    {"fixture_gpt2", test_fixture_gpt2},
    {"fixture_errors", test_fixture_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"cli", cli_suite_init, cli_suite_clean, NULL, NULL, cli_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
