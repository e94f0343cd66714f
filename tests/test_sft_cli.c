/* Supervised fine-tuning from the command line, with the byte-level tokenizer (no Python):
 * prepare --sft, train on the SFT file (target-token loss, logged with the target count),
 * eval packed and unpacked (the same loss), sample from the result; a Hugging Face Llama on chat
 * data of a real tokenizer against transformers; usage errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fp8run.h>

#include "tests/cli_runner.h"

/* Examples a tiny model learns in a hundred steps: echo two digits back. */
static void write_examples(void)
{
    char *text = malloc(200 * 96), *p = text;
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    for (int i = 0; i < 200; i++) {
        int a = i % 10, b = i / 10 % 10; /* every pair, as a prompt (i even) and in a chat (odd) */
        if (i % 2)
            p += sprintf(p, "{\"messages\": [{\"role\": \"user\", \"content\": \"echo %d%d\"}, {\"role\": "
                            "\"assistant\", \"content\": \"%d%d\"}]}\n", a, b, a, b);
        else
            p += sprintf(p, "{\"prompt\": \"echo %d%d: \", \"completion\": \"%d%d\"}\n", a, b, a, b);
    }
    cli_write("chat.jsonl", text);
    free(text);
}

static double log_number(const char *line, const char *key)
{
    const char *k = strstr(line, key);
    return k ? strtod(k + strlen(key), NULL) : -1;
}

static void test_prepare_train_eval_sample(void)
{
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    write_examples();
    CLI_EXPECT(cli_run("prepare --sft --tokenizer bytes chat.jsonl -o sft.bin --val-fraction 0.1 --seq 31"), 0,
               cli_out, "200 examples: ");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "--seq 31: packed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "wrote sft_val.bin (20 examples)"));
    CLI_EXPECT(cli_run("train '%s' --data sft.bin --val sft_val.bin --steps 150 --batch 8 --seq 31 --lr 3e-3 "
                       "--device cpu --log log.jsonl --export trained.onnx", model),
               0, cli_out, "trained");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "target tokens"));
    /* every step record carries the step's target-token count, and the loss fell */
    char *log = cli_slurp_tmp("log.jsonl", NULL);
    const char *first = strstr(log, "{\"step\": 1,"), *last = strstr(log, "{\"step\": 150,");
    CU_ASSERT_PTR_NOT_NULL_FATAL(first);
    CU_ASSERT_PTR_NOT_NULL_FATAL(last);
    double t1 = log_number(first, "\"target_tokens\": "), l1 = log_number(first, "\"loss\": ");
    double l150 = log_number(last, "\"loss\": ");
    printf(" (loss %.3f -> %.3f; %g target tokens in step 1) ", l1, l150, t1);
    CU_ASSERT(t1 > 8 && t1 < 8 * 32);
    CU_ASSERT(l150 < l1 / 3);
    free(log);
    /* the same examples, packed or one per window: the same loss over the same target tokens */
    CLI_EXPECT(cli_run("eval trained.onnx --data sft_val.bin --batch 2 --seq 31 --device cpu"), 0, cli_out, "loss ");
    char packed[256];
    snprintf(packed, sizeof packed, "%s", cli_out);
    CLI_EXPECT(cli_run("eval trained.onnx --data sft_val.bin --batch 2 --seq 31 --device cpu --packing off"), 0,
               cli_out, "loss ");
    double lp = log_number(packed, "loss "), lu = log_number(cli_out, "loss ");
    CU_ASSERT(lp > 0 && fabs(lp - lu) <= 1e-5);
    CU_ASSERT(strstr(packed, "target tokens") && strstr(cli_out, "target tokens"));
    /* the fine-tuned model echoes */
    CLI_EXPECT(cli_run("sample trained.onnx --prompt 'echo 42: ' --max-new-tokens 4 --device cpu"), 0, cli_out,
               "echo 42: 42");
    CLI_EXPECT(cli_run("sample trained.onnx --chat 'echo 17' --max-new-tokens 4 --device cpu"), 0, cli_out, "17");
    CLI_EXPECT(cli_run("sample trained.onnx --prompt 'echo 9' --max-new-tokens 4 --temperature 0.7 --top-p 0.9 "
                       "--seed 3 --device cpu"), 0, cli_out, "echo 9");
}

/* A Hugging Face Llama (the hf/llama_op18_dynamic export, attention_mask input and all) on chat
 * data prepared with a real tokenizer and chat template: 20 fp32 steps follow transformers'
 * LlamaForCausalLM trained with labels -100 off the assistant turns (tools/gen_sft_reference.py
 * hf), within 1e-4. */
static void test_hf_chat_follows_transformers(void)
{
    char hf[600], data[600], ref[600], line[256];
    fr_fixture(hf, sizeof hf, "hf/llama_op18_dynamic/model.onnx");
    fr_fixture(data, sizeof data, "sft/hf_chat.bin");
    double want[20], got[20];
    int n = 0, vals;
    FILE *f = fopen(fr_fixture(ref, sizeof ref, "sft/hf_chat_losses.txt"), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    while (n < 20 && fgets(line, sizeof line, f))
        if (line[0] != '#') want[n++] = strtod(line, NULL);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(n, 20);
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 20 --batch 2 --seq 31 --lr 1e-3 --data-order sequential "
                       "--packing off --device cpu --log hf.jsonl", hf, data),
               0, cli_out, "trained");
    CU_ASSERT_EQUAL_FATAL(cli_read_log(cli_path("hf.jsonl"), got, 20, &vals, NULL), 20);
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        double r = fabs(got[i] - want[i]) / fabs(want[i]);
        if (!(r <= worst)) worst = r;
    }
    printf(" (loss %.4f -> %.4f, transformers %.4f -> %.4f, worst rel %.2e) ", got[0], got[19], want[0], want[19], worst);
    CU_ASSERT(worst <= 1e-4);
    /* packed, its RoPE sees only distances: no warning; GPT-2's learned positions run on across
       a packed window, which it says */
    CLI_EXPECT(cli_run("eval '%s' --data '%s' --batch 2 --seq 63 --device cpu", hf, data), 0, cli_out, "loss ");
    CU_ASSERT_PTR_NULL(strstr(cli_err, "warning"));
    fr_fixture(hf, sizeof hf, "hf/gpt2_op18_dynamic/model.onnx");
    CLI_EXPECT(cli_run("eval '%s' --data '%s' --batch 2 --seq 63 --device cpu", hf, data), 0, cli_err,
               "computes absolute positions inside its graph");
    CLI_EXPECT(cli_run("eval '%s' --data '%s' --batch 2 --seq 63 --device cpu --packing off", hf, data), 0, cli_out,
               "loss ");
    CU_ASSERT_PTR_NULL(strstr(cli_err, "warning"));
}

static void test_errors(void)
{
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    cli_write("bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": 1}\n");
    CLI_EXPECT(cli_run("prepare --sft --tokenizer bytes bad.jsonl -o b.bin"), 1, cli_err, "bad.jsonl:2:");
    CLI_EXPECT(cli_run("prepare --sft --tokenizer bytes bad.jsonl -o b.bin --skip-bad-lines"), 0, cli_out,
               "skipped: 1 bad lines");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes bad.jsonl -o b.bin --seq 8"), 2, cli_err, "go with --sft");
    CLI_EXPECT(cli_run("prepare --sft --tokenizer bytes bad.jsonl -o b.bin --long cut"), 2, cli_err, "--long cut");
    CLI_EXPECT(cli_run("prepare --sft --tokenizer bytes bad.jsonl -o b.bin --chat-template t.jinja"), 2, cli_err,
               "needs a tokenizer.json");
    cli_write("plain.txt", "just some text, not examples");
    CLI_EXPECT(cli_run("prepare --tokenizer bytes plain.txt -o p.bin"), 0, cli_out, "wrote");
    CLI_EXPECT(cli_run("eval '%s' --data p.bin --batch 1 --seq 8 --packing off --device cpu", model), 2, cli_err,
               "--packing applies to SFT token files");
    CLI_EXPECT(cli_run("sample '%s' --device cpu", model), 2, cli_err, "--prompt TEXT and --chat TEXT");
    CLI_EXPECT(cli_run("sample '%s' --prompt 'h\xc3\xa9' --device cpu", model), 1, cli_err, "ASCII only");
    CLI_EXPECT(cli_run("sample '%s' --prompt a --top-p 0 --device cpu", model), 2, cli_err, "--top-p");
    CLI_EXPECT(cli_run("sample --help"), 0, cli_out, "no key/value cache");
}

static CU_TestInfo tests[] = {
    {"prepare --sft, train, eval packed and unpacked, sample", test_prepare_train_eval_sample},
    {"a Hugging Face Llama on real chat data follows transformers", test_hf_chat_follows_transformers},
    {"usage errors", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"sft_cli", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
