/* `fp8run prepare --tokenizer bytes` (no Python): documents joined with the EOS id, the
 * train/val split, raw and llm.c formats that the data loader reads back token for token;
 * usage errors. (A tokenizer.json goes through Python: python/tests/test_prepare.py.) */
#include <stdlib.h>
#include <string.h>

#include <fp8run.h>

#include "tests/cli_runner.h"

/* Every token of a token file, read through the public data loader (one window of the whole
 * file): proves the loader accepts the format. Returns the count, -1 on failure. */
static int64_t read_tokens(const char *name, int64_t *out, int64_t cap)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", cli_tmp, name);
    fp8run_data_config c;
    if (fp8run_data_config_init(&c, sizeof c) != FP8RUN_OK) return -1;
    c.order = FP8RUN_DATA_SEQUENTIAL;
    fp8run_data_loader *d = NULL;
    int64_t n = -1;
    if (fp8run_data_open(p, &c, &d) == FP8RUN_OK) { /* the count first, then one window of all */
        n = fp8run_data_num_tokens(d);
        fp8run_data_close(d);
        c.seq_len = n - 1;
        if (n > cap || fp8run_data_open(p, &c, &d) != FP8RUN_OK) return -1;
        if (fp8run_data_next(d, FP8RUN_DTYPE_INT64, out, (size_t)n) != FP8RUN_OK) n = -1;
        fp8run_data_close(d);
    }
    if (n < 0) printf("\n  %s: %s", name, fp8run_last_error());
    return n;
}

static size_t file_size(const char *name)
{
    size_t len = 0;
    free(cli_slurp_tmp(name, &len));
    return len;
}

static void test_prepare_bytes(void)
{
    const char *docs[] = {"hello, world\n", "two \xc3\xa9"}; /* UTF-8 bytes are tokens */
    cli_write("a.txt", docs[0]);
    cli_write("b.txt", docs[1]);
    int64_t want[64], n = 0;
    for (int d = 0; d < 2; d++) {
        for (const unsigned char *c = (const unsigned char *)docs[d]; *c; c++) want[n++] = *c;
        want[n++] = 0; /* EOS after each document */
    }
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt b.txt -o t.bin"), 0, cli_out, "2 documents, 21 tokens");
    int64_t got[64];
    CU_ASSERT_EQUAL(file_size("t.bin"), (size_t)n * 2);
    CU_ASSERT_EQUAL_FATAL(read_tokens("t.bin", got, 64), n);
    CU_ASSERT_EQUAL(memcmp(got, want, (size_t)n * sizeof *got), 0);

    /* the split: the last round(0.25 * 21) = 5 tokens to validation, named after -o */
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt b.txt -o s.bin --val-fraction 0.25 --eos 300"), 0, cli_out,
               "wrote s_val.bin (5 tokens)");
    want[13] = want[20] = 300;
    CU_ASSERT_EQUAL_FATAL(read_tokens("s.bin", got, 64), 16);
    CU_ASSERT_EQUAL(memcmp(got, want, 16 * sizeof *got), 0);
    CU_ASSERT_EQUAL_FATAL(read_tokens("s_val.bin", got, 64), 5);
    CU_ASSERT_EQUAL(memcmp(got, want + 16, 5 * sizeof *got), 0);

    /* llm.c: the 1 KiB header (magic, version 1, count) the loader recognizes; nanoGPT: raw */
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt b.txt -o l.bin --format llmc --val-fraction 0.25 "
                       "--val-out lv.bin --eos 300"),
               0, cli_out, "wrote lv.bin");
    CU_ASSERT_EQUAL(file_size("l.bin"), 1024 + 16 * 2);
    CU_ASSERT_EQUAL_FATAL(read_tokens("l.bin", got, 64), 16);
    CU_ASSERT_EQUAL(memcmp(got, want, 16 * sizeof *got), 0);
    CU_ASSERT_EQUAL_FATAL(read_tokens("lv.bin", got, 64), 5);
    CU_ASSERT_EQUAL(memcmp(got, want + 16, 5 * sizeof *got), 0);
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o n.bin --format nanogpt"), 0, cli_out, "wrote n.bin");
    CU_ASSERT_EQUAL(file_size("n.bin"), 14 * 2);
}

/* The prepared bytes train a model: fp8run train reads the file as uint16 tokens. */
static void test_prepare_trains(void)
{
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    FILE *f = fopen(strcat(strcpy((char[700]){0}, cli_tmp), "/corpus.txt"), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 300; i++) fputs("the quick brown fox jumps over the lazy dog. ", f);
    fclose(f);
    CLI_EXPECT(cli_run("prepare --tokenizer bytes corpus.txt -o c.bin --val-fraction 0.1"), 0, cli_out, "c_val.bin");
    CLI_EXPECT(cli_run("train '%s' --data c.bin --val c_val.bin --val-batches 2 --steps 3 --batch 2 --seq 16 "
                       "--lr 1e-3 --device cpu",
                       model),
               0, cli_out, "trained");
}

static void test_prepare_errors(void)
{
    cli_write("a.txt", "x");
    cli_write("d.jsonl", "{\"text\": \"x\"}\n");
    CLI_EXPECT(cli_run("prepare a.txt -o t.bin"), 2, cli_err, "--tokenizer");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt"), 2, cli_err, "-o TOKENS.bin is required");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes -o t.bin"), 2, cli_err, "at least one text file");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o t.bin --format npy"), 2, cli_err, "--format npy");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o t.bin --val-fraction 1.5"), 2, cli_err, "[0, 1)");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes a.txt -o t.bin --val-fraction 0.1"), 1, cli_err, "too few");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes missing.txt -o t.bin"), 1, cli_err, "cannot open text file 'missing.txt'");
    /* .jsonl with bytes: each record's "text" a document (python/tests/test_prepare.py checks both sides agree) */
    CLI_EXPECT(cli_run("prepare --tokenizer bytes d.jsonl -o t.bin"), 0, cli_out, "1 documents, 2 tokens");
    /* a tokenizer.json without a Python to run it: a clear message */
    setenv("FP8RUN_PYTHON", "/nonexistent/python3", 1);
    CLI_EXPECT(cli_run("prepare --tokenizer tok.json a.txt -o t.bin"), 1, cli_err, "--tokenizer bytes needs no Python");
    unsetenv("FP8RUN_PYTHON");
}

static CU_TestInfo tests[] = {
    {"bytes: EOS joins, split, raw/llm.c/nanoGPT read back by the loader", test_prepare_bytes},
    {"prepared bytes train a model", test_prepare_trains},
    {"usage errors, a missing Python", test_prepare_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"prepare_cli", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
