/* Memory bounds before work: requests no memory holds are refused before anything
 * is allocated, naming the file, node or option at fault and what would fit.
 *  - the budgets (graph/limits.h): sizes parsed from the environment, tensor shapes checked
 *    for overflow and FP8RUN_MAX_TENSOR_BYTES, protobuf decoding under FP8RUN_MAX_DECODE_BYTES,
 *    safetensors headers under FP8RUN_MAX_HEADER_BYTES;
 *  - plan time: Expand, ConstantOfShape, Tile, Range, MatMul outputs and graph inputs of 2^40
 *    elements are refused by shape inference, by `info` as by `run`;
 *  - run time: a CPU plan, training configuration, step of token windows or generated model
 *    larger than the memory this process may take (FP8RUN_MEMORY_LIMIT stands in for a small
 *    machine, so the cases do not depend on the host's memory) fails before allocating, with
 *    the predicted and available bytes and the options that would fit.
 * Every CLI case must end with exit 1 or 2 and the names in the message; no sanitizer report;
 * each command runs under timeout(1). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fp8run.h>

#include "graph/limits.h"
#include "graph/onnx_io.h"
#include "runtime/io/checkpoint.h"
#include "runtime/exec/host_memory.h"
#include "tests/cli_runner.h"
#include "tests/onnx_test_util.h"

#define P cli_path

/* A refusal: exit 1 or 2, "error" and both needles (NULL: none) in stderr, no sanitizer report. */
static void refused(int rc, const char *n1, const char *n2)
{
    int ok = (rc == 1 || rc == 2) && strstr(cli_err, "error") && (!n1 || strstr(cli_err, n1)) &&
             (!n2 || strstr(cli_err, n2)) && !strstr(cli_err, "Sanitizer") && !strstr(cli_err, "runtime error");
    if (!ok) cli_show(rc);
    CU_ASSERT(ok);
}

static void expect_error(fr_status st, fr_status want, const char *n1, const char *n2)
{
    const char *m = fr_last_error();
    int ok = st == want && (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2));
    if (!ok)
        fprintf(stderr, "\n  expected %s naming [%s] [%s]\n  got %s: %s\n", fr_status_name(want), n1 ? n1 : "",
                n2 ? n2 : "", fr_status_name(st), m);
    CU_ASSERT(ok);
}

static int write_tokens(const char *path, int n, unsigned vocab)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)((unsigned)(i * 7) % vocab);
        fwrite(&t, sizeof t, 1, f);
    }
    return fclose(f) != 0;
}

static int suite_init(void)
{
    if (cli_suite_init()) return 1;
    cli_wrap = "timeout -k 2 60";
    char model[600], cmd[1400];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", model, P("m.onnx"));
    if (system(cmd) != 0 || write_tokens(P("tok.bin"), 70000, 128)) return 1;
    return cli_run("train m.onnx --data tok.bin --batch 1 --seq 8 --lr 1e-3 --steps 1 --ckpt-dir base") != 0;
}

static int suite_clean(void)
{
    cli_wrap = "";
    unsetenv("FP8RUN_MEMORY_LIMIT");
    return cli_suite_clean();
}

/* ---- the budgets ---- */

static void test_limit_values(void)
{
    uint64_t v;
    int set;
    unsetenv("FP8RUN_MAX_TENSOR_BYTES");
    FR_ASSERT_OK(fr_limit_get(FR_LIMIT_TENSOR_BYTES, &v, &set));
    CU_ASSERT(v == (uint64_t)256 << 30 && !set);
    const struct {
        const char *text;
        uint64_t want; /* 0: refused */
    } cases[] = {{"4096", 4096}, {"64K", 65536}, {"1.5G", (uint64_t)3 << 29}, {"2TB", (uint64_t)2 << 40},
                 {"1e3", 1000},  {"0", 0},       {"-5", 0},                   {"12x", 0},
                 {"abc", 0},     {"nan", 0},     {"99999999999999999999999", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        setenv("FP8RUN_MAX_HEADER_BYTES", cases[i].text, 1);
        fr_status st = fr_limit_get(FR_LIMIT_HEADER_BYTES, &v, &set);
        if (cases[i].want) {
            FR_ASSERT_OK(st);
            CU_ASSERT(v == cases[i].want && set);
        } else {
            expect_error(st, FR_ERR_INVALID_ARG, "FP8RUN_MAX_HEADER_BYTES", cases[i].text);
        }
    }
    unsetenv("FP8RUN_MAX_HEADER_BYTES");
    FR_ASSERT_OK(fr_limit_get(FR_LIMIT_HEADER_BYTES, &v, &set));
    CU_ASSERT(v == FR_LIMIT_HEADER_DEFAULT && !set);
}

static void test_shape_bytes(void)
{
    size_t b;
    const int64_t fine[3] = {3, 5, 7}, empty[3] = {(int64_t)1 << 62, 0, 5}, neg[2] = {4, -1};
    FR_ASSERT_OK(fr_shape_bytes(FR_F32, 3, fine, "x", &b));
    CU_ASSERT_EQUAL(b, 420);
    FR_ASSERT_OK(fr_shape_bytes(FR_F32, 3, empty, "x", &b)); /* empty wins over a huge dim */
    CU_ASSERT_EQUAL(b, 0);
    FR_ASSERT_OK(fr_shape_bytes(FR_F32, 0, fine, "x", &b)); /* a scalar */
    CU_ASSERT_EQUAL(b, 4);
    expect_error(fr_shape_bytes(FR_F32, 2, neg, "x", &b), FR_ERR_SHAPE, "x", "negative");
    /* element count past int64, byte count past size_t, more than the limit */
    const int64_t wrap[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 3}, wide[1] = {(int64_t)1 << 62};
    expect_error(fr_shape_bytes(FR_F32, 3, wrap, "wrap", &b), FR_ERR_OOM, "wrap", "more elements than memory");
    expect_error(fr_shape_bytes(FR_F64, 1, wide, "wide", &b), FR_ERR_OOM, "wide", "more elements than memory");
    const int64_t big[2] = {(int64_t)1 << 20, (int64_t)1 << 20};
    expect_error(fr_shape_bytes(FR_F32, 2, big, "big", &b), FR_ERR_OOM, "[1048576, 1048576] is 4.0 TiB",
                 "FP8RUN_MAX_TENSOR_BYTES=4398046511104");
    setenv("FP8RUN_MAX_TENSOR_BYTES", "5T", 1);
    FR_ASSERT_OK(fr_shape_bytes(FR_F32, 2, big, "big", &b));
    CU_ASSERT_EQUAL(b, (size_t)4 << 40);
    /* fr_tensor_new refuses before allocating */
    setenv("FP8RUN_MAX_TENSOR_BYTES", "100", 1);
    fr_tensor *t = NULL;
    expect_error(fr_tensor_new(FR_F32, 3, fine, "tensor 'w'", &t), FR_ERR_OOM, "tensor 'w'", "more than the 100 bytes");
    CU_ASSERT_PTR_NULL(t);
    unsetenv("FP8RUN_MAX_TENSOR_BYTES");
}

/* The decode budget (protobuf) and the header budget (safetensors), on files that load with
 * the defaults. */
static void test_decode_budgets(void)
{
    fr_graph *g = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(P("m.onnx"), &g));
    fr_graph_free(g);
    setenv("FP8RUN_MAX_DECODE_BYTES", "1K", 1);
    g = NULL;
    expect_error(fr_onnx_load_file(P("m.onnx"), &g), FR_ERR_PARSE, "m.onnx", "FP8RUN_MAX_DECODE_BYTES raises");
    CU_ASSERT_PTR_NULL(g);
    refused(cli_run("info m.onnx"), "m.onnx", "more than 1024 bytes of memory");
    /* a checkpoint's index decodes under the same budget */
    fr_ckpt *c = NULL;
    expect_error(fr_ckpt_open(P("base/step_00000001.ckpt"), &c), FR_ERR_PARSE, "step_00000001.ckpt",
                 "decoding its index needs more than 1024 bytes");
    refused(cli_run("export base/step_00000001.ckpt --safetensors st_out"), "step_00000001.ckpt",
            "FP8RUN_MAX_DECODE_BYTES raises");
    setenv("FP8RUN_MAX_DECODE_BYTES", "lots", 1);
    refused(cli_run("info m.onnx"), "FP8RUN_MAX_DECODE_BYTES='lots' is not a size", NULL);
    unsetenv("FP8RUN_MAX_DECODE_BYTES");
    FR_ASSERT_OK(fr_ckpt_open(P("base/step_00000001.ckpt"), &c));
    fr_ckpt_close(c);

    /* one tensor over FP8RUN_MAX_TENSOR_BYTES: the embedding (128 x 64 float32) */
    setenv("FP8RUN_MAX_TENSOR_BYTES", "16K", 1);
    refused(cli_run("info m.onnx"), "m.onnx", "is 32.0 KiB, more than the 16.0 KiB of one tensor");
    unsetenv("FP8RUN_MAX_TENSOR_BYTES");

    /* a safetensors header over FP8RUN_MAX_HEADER_BYTES */
    CLI_EXPECT(cli_run("export base/step_00000001.ckpt --safetensors st"), 0, cli_out, "exported");
    setenv("FP8RUN_MAX_HEADER_BYTES", "64", 1);
    refused(cli_run("train m.onnx --data tok.bin --batch 1 --seq 8 --lr 1e-3 --steps 1 --init-from st"),
            "st/model.safetensors", "over the limit (64 bytes) (FP8RUN_MAX_HEADER_BYTES raises it)");
    unsetenv("FP8RUN_MAX_HEADER_BYTES");
    CLI_EXPECT(cli_run("train m.onnx --data tok.bin --batch 1 --seq 8 --lr 1e-3 --steps 1 --init-from st"), 0, cli_err,
               "parameters loaded");
}

/* ---- plan time ---- */

/* y = op(inputs) with int64 / float initializers given as raw data. */
static void save_model(const char *file, const char *op, const char *ins, int n_init, const char *const *names,
                       const int *dts, const int64_t *const *vals, const int *lens)
{
    mbuild b;
    mb_init(&b, 17);
    for (int i = 0; i < n_init; i++) {
        int64_t d[1] = {lens[i]};
        Onnx__TensorProto *t = mk_tensor(names[i], dts[i], lens[i] < 0 ? 0 : 1, d);
        if (dts[i] == FR_I64) {
            set_raw(t, vals[i], (size_t)(lens[i] < 0 ? 1 : lens[i]) * 8);
        } else { /* float: the values as floats */
            float f[4];
            int n = lens[i] < 0 ? 1 : lens[i];
            for (int k = 0; k < n; k++) f[k] = (float)vals[i][k];
            set_raw(t, f, (size_t)n * 4);
        }
        b.init[b.g.n_initializer++] = t;
    }
    mb_node(&b, op, NULL, ins, "y");
    b.out[b.g.n_output++] = mk_vi("y", FR_F32, NULL);
    mb_save(&b, P(file));
    free_kept();
}

static void test_plan_time(void)
{
    const int64_t one[1] = {1}, four[4] = {1, 2, 3, 4}, shape2[2] = {(int64_t)1 << 20, (int64_t)1 << 20},
                  shape1[1] = {(int64_t)1 << 40}, reps[1] = {(int64_t)1 << 38}, zero[1] = {0},
                  limit[1] = {(int64_t)1 << 40}, step[1] = {1}, small[2] = {64, 64};
    {
        const char *n[2] = {"x", "s"};
        const int dt[2] = {FR_F32, FR_I64}, len[2] = {1, 2};
        const int64_t *v[2] = {one, shape2};
        save_model("expand.onnx", "Expand", "x,s", 2, n, dt, v, len);
        const int64_t *v2[2] = {one, small};
        save_model("expand_small.onnx", "Expand", "x,s", 2, n, dt, v2, len);
    }
    {
        const char *n[1] = {"s"};
        const int dt[1] = {FR_I64}, len[1] = {1};
        const int64_t *v[1] = {shape1};
        save_model("cos.onnx", "ConstantOfShape", "s", 1, n, dt, v, len);
    }
    {
        const char *n[2] = {"x", "r"};
        const int dt[2] = {FR_F32, FR_I64}, len[2] = {4, 1};
        const int64_t *v[2] = {four, reps};
        save_model("tile.onnx", "Tile", "x,r", 2, n, dt, v, len);
    }
    {
        const char *n[3] = {"a", "b", "c"};
        const int dt[3] = {FR_F32, FR_F32, FR_F32}, len[3] = {-1, -1, -1};
        const int64_t *v[3] = {zero, limit, step};
        save_model("range.onnx", "Range", "a,b,c", 3, n, dt, v, len);
    }
    /* MatMul of two modest inputs whose product is 4 TiB */
    mbuild b;
    mb_init(&b, 17);
    int64_t da[2] = {(int64_t)1 << 20, 1}, db[2] = {1, (int64_t)1 << 20};
    b.in[b.g.n_input++] = mk_vi_dims("a", FR_F32, 2, da);
    b.in[b.g.n_input++] = mk_vi_dims("b", FR_F32, 2, db);
    mb_node(&b, "MatMul", "mm", "a,b", "y");
    b.out[b.g.n_output++] = mk_vi("y", FR_F32, NULL);
    mb_save(&b, P("matmul.onnx"));
    free_kept();
    /* a graph input of 2^40 elements */
    mb_init(&b, 17);
    int64_t dh[2] = {(int64_t)1 << 20, (int64_t)1 << 20};
    b.in[b.g.n_input++] = mk_vi_dims("h", FR_F32, 2, dh);
    mb_node(&b, "Relu", "r", "h", "y");
    b.out[b.g.n_output++] = mk_vi("y", FR_F32, NULL);
    mb_save(&b, P("input.onnx"));
    free_kept();

    const struct {
        const char *file, *node, *shape;
    } cases[] = {
        {"expand.onnx", "(Expand) output 'y'", "float32 [1048576, 1048576] is 4.0 TiB"},
        {"cos.onnx", "(ConstantOfShape) output 'y'", "float32 [1099511627776] is 4.0 TiB"},
        {"tile.onnx", "(Tile) output 'y'", "float32 [1099511627776] is 4.0 TiB"},
        {"range.onnx", "(Range) output 'y'", "float32 [1099511627776] is 4.0 TiB"},
        {"matmul.onnx", "node 'mm' (MatMul) output 'y'", "float32 [1048576, 1048576] is 4.0 TiB"},
        {"input.onnx", "graph input 'h'", "float32 [1048576, 1048576] is 4.0 TiB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        refused(cli_run("info %s", cases[i].file), cases[i].file, cases[i].node);
        CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, cases[i].shape));
        CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "FP8RUN_MAX_TENSOR_BYTES"));
        if (i < 4) /* the others need input arrays first */
            refused(cli_run("run %s --output-dir o", cases[i].file), cases[i].file, cases[i].node);
    }
    /* the bound is the variable's: a 16 KiB Expand runs, and is refused under a 1 KiB bound */
    CLI_EXPECT(cli_run("run expand_small.onnx --output-dir o"), 0, cli_out, "[64, 64]");
    setenv("FP8RUN_MAX_TENSOR_BYTES", "1K", 1);
    refused(cli_run("run expand_small.onnx --output-dir o"), "expand_small.onnx", "16.0 KiB, more than the 1.0 KiB");
    unsetenv("FP8RUN_MAX_TENSOR_BYTES");
    /* training: --batch x --seq whose activations no memory holds, refused while planning */
    refused(cli_run("train m.onnx --data tok.bin --batch 65536 --seq 65536 --lr 1e-3 --steps 1"), "m.onnx",
            "[65536, 65536, 64] is 1.0 TiB");
}

/* ---- run time: against the memory this process may take ---- */

static void test_host_memory(void)
{
    fr_host_memory m;
    unsetenv("FP8RUN_MEMORY_LIMIT");
    FR_ASSERT_OK(fr_host_memory_available(&m));
    CU_ASSERT(m.available > 0);
    setenv("FP8RUN_MEMORY_LIMIT", "3M", 1);
    FR_ASSERT_OK(fr_host_memory_available(&m));
    CU_ASSERT_EQUAL(m.available, (uint64_t)3 << 20);
    CU_ASSERT_STRING_EQUAL(m.source, "FP8RUN_MEMORY_LIMIT");
    setenv("FP8RUN_MEMORY_LIMIT", "3Q", 1);
    expect_error(fr_host_memory_available(&m), FR_ERR_INVALID_ARG, "FP8RUN_MEMORY_LIMIT='3Q'", NULL);
    unsetenv("FP8RUN_MEMORY_LIMIT");

    /* a 128 MiB Expand under a 32 MiB cap: refused before its pool is allocated */
    const char *n[2] = {"x", "s"};
    const int dt[2] = {FR_F32, FR_I64}, len[2] = {1, 2};
    const int64_t one[1] = {1}, shp[2] = {8192, 4096};
    const int64_t *v[2] = {one, shp};
    save_model("expand128m.onnx", "Expand", "x,s", 2, n, dt, v, len);
    setenv("FP8RUN_MEMORY_LIMIT", "32M", 1);
    refused(cli_run("run expand128m.onnx --output-dir o128"), "the CPU plan of 'expand128m.onnx' needs 128.0 MiB",
            "may take 32.0 MiB more (FP8RUN_MEMORY_LIMIT): nothing was allocated");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "'y' float32 [8192, 4096], 128.0 MiB of node 'Expand_0' (Expand)"));
    struct stat sb;
    CU_ASSERT_NOT_EQUAL(stat(P("o128/y.npy"), &sb), 0);

    /* training on the CPU, whose memory the limit caps: the prediction, the memory and the options
       that fit */
    setenv("FP8RUN_MEMORY_LIMIT", "100M", 1);
    refused(cli_run("train m.onnx --device cpu --data tok.bin --batch 64 --seq 256 --lr 1e-3 --steps 1"), "m.onnx",
            "this configuration needs 193.");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "may take 100.0 MiB more (FP8RUN_MEMORY_LIMIT)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "nothing was allocated"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "--batch 32 (with --grad-accum"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "--recompute"));
    /* the suggested batch fits */
    CLI_EXPECT(cli_run("train m.onnx --device cpu --data tok.bin --batch 32 --seq 256 --lr 1e-3 --steps 1"), 0, cli_err, "step 1");
    /* 10^8 micro-batches of token windows (7 GB) under 1 GiB */
    setenv("FP8RUN_MEMORY_LIMIT", "1G", 1);
    refused(cli_run("train m.onnx --device cpu --data tok.bin --batch 1 --seq 8 --lr 1e-3 --steps 1 --grad-accum 100000000"),
            "m.onnx", "--grad-accum ");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "keeps fewer token windows"));
    /* evaluation: its forward plan */
    setenv("FP8RUN_MEMORY_LIMIT", "100M", 1);
    refused(cli_run("eval m.onnx --device cpu --data tok.bin --batch 128 --seq 512"), "the CPU plan of 'm.onnx' needs",
            "nothing was allocated");
    /* a generated model's weights */
    setenv("FP8RUN_MEMORY_LIMIT", "10M", 1);
    refused(cli_run("generate llama --preset 125m -o g.onnx"), "0.503 GB in float32",
            "memory this process may take (FP8RUN_MEMORY_LIMIT)");
    CU_ASSERT_NOT_EQUAL(stat(P("g.onnx"), &sb), 0);
    /* FP8RUN_MEMORY_CHECK=0 turns the check off: the same training runs */
    setenv("FP8RUN_MEMORY_LIMIT", "100M", 1);
    setenv("FP8RUN_MEMORY_CHECK", "0", 1);
    CLI_EXPECT(cli_run("train m.onnx --device cpu --data tok.bin --batch 64 --seq 256 --lr 1e-3 --steps 1"), 0, cli_err, "step 1");
    unsetenv("FP8RUN_MEMORY_CHECK");
    unsetenv("FP8RUN_MEMORY_LIMIT");
}

/* The same through the C API: a session that cannot fit is FP8RUN_ERR_OOM at creation. */
static void test_api_session(void)
{
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(P("m.onnx"), &m), FP8RUN_OK);
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    c.batch = 64;
    c.seq_len = 256;
    c.lr = 1e-3;
    fp8run_session *s = (fp8run_session *)&s;
    setenv("FP8RUN_MEMORY_LIMIT", "100M", 1);
    CU_ASSERT_EQUAL(fp8run_session_create(m, "cpu", &c, &s), FP8RUN_ERR_OOM);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "nothing was allocated"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "--batch 32"));
    c.batch = 4;
    CU_ASSERT_EQUAL(fp8run_session_create(m, "cpu", &c, &s), FP8RUN_OK);
    fp8run_session_destroy(s);
    unsetenv("FP8RUN_MEMORY_LIMIT");
    fp8run_model_destroy(m);
}

static CU_TestInfo tests[] = {
    {"budgets: sizes from the environment", test_limit_values},
    {"budgets: shape bytes, overflow and the tensor bound", test_shape_bytes},
    {"budgets: protobuf decode, checkpoint index, safetensors header", test_decode_budgets},
    {"plan time: Expand, ConstantOfShape, Tile, Range, MatMul, inputs of 2^40", test_plan_time},
    {"run time: plans, training, windows, eval, generate vs memory", test_host_memory},
    {"run time: a session that cannot fit (C API)", test_api_session},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"hostile_limits", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
