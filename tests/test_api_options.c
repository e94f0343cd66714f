/* The options' table of fp8run_train_config (runtime/train/train_config.def through the API):
 *  - it covers the struct: every field once, in order, with its offset and size, and nothing
 *    but alignment padding between them (a field added to the header without its line fails);
 *  - defaults as fp8run_train_config_init gives them; choices with their default among them;
 *  - fp8run_train_config_set / _get: values by field and by flag, ranges and choices refused
 *    with the flag named, booleans by flag, dims refused;
 *  - a config out of range is refused by the library naming the field;
 *  - the trainer's own defaults (fr_train_options_default, used by internal callers) agree
 *    with the table's, as the API translates them;
 *  - every command's --help lists every flag the table gives it, and its usage errors exit 2;
 *    a flag of the table is refused by the commands it is not marked for. */
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"
#include "fp8run.h"
#include "runtime/api/api_internal.h"

#define SET_ERR(cfg, name, value, needle)                                                          \
    do {                                                                                           \
        CU_ASSERT_EQUAL(fp8run_train_config_set((cfg), (name), (value)), FP8RUN_ERR_INVALID_ARG); \
        if (!strstr(fp8run_last_error(), (needle)))                                                \
            fprintf(stderr, "\n  '%s' lacks '%s'\n", fp8run_last_error(), (needle));               \
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), (needle)));                             \
    } while (0)

static void test_table_covers_struct(void)
{
    int n = fp8run_train_config_option_count();
    CU_ASSERT_FATAL(n > 40);
    size_t end = sizeof(size_t); /* struct_size */
    for (int i = 0; i < n; i++) {
        fp8run_option_info e = {.struct_size = sizeof e};
        CU_ASSERT_EQUAL_FATAL(fp8run_train_config_option(i, &e), FP8RUN_OK);
        CU_ASSERT_FATAL(e.name && e.help);
        /* the next field starts at the first offset its alignment (= its size here) allows */
        size_t want = (end + e.size - 1) / e.size * e.size;
        if (e.offset != want) fprintf(stderr, "\n  %s at %zu, expected %zu\n", e.name, e.offset, want);
        CU_ASSERT_EQUAL(e.offset, want);
        end = e.offset + e.size;
        CU_ASSERT_EQUAL(fp8run_train_config_find(e.name), i);
        if (e.flag) CU_ASSERT_EQUAL(fp8run_train_config_find(e.flag), i);
        CU_ASSERT_EQUAL(e.choices != NULL, e.type == FP8RUN_OPTION_CHOICE);
        if (e.flag) CU_ASSERT_NOT_EQUAL(e.commands & 0xffu, 0u);
    }
    CU_ASSERT_EQUAL((end + alignof(fp8run_train_config) - 1) / alignof(fp8run_train_config) *
                        alignof(fp8run_train_config),
                    sizeof(fp8run_train_config));
    fp8run_option_info e = {.struct_size = sizeof e};
    CU_ASSERT_EQUAL(fp8run_train_config_option(n, &e), FP8RUN_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fp8run_train_config_option(-1, &e), FP8RUN_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fp8run_train_config_find("no_such_option"), -1);
    /* the options appended after 0.1.0, in their order (a new one goes at the end) */
    static const char *const tail[] = {"recompute", "world_size", "rank", "local_rank", "nccl_comm",
                                       "shard_optimizer", "optimizer_state", "master_weights", "lora_rank",
                                       "lora_alpha", "lora_targets", "lora_dropout", "attention", "shard_gradients",
                                       "fuse_attention_io", "fp8_fast_accum", "fuse_rmsnorm", "narrow_activations",
                                       "deterministic", "fuse_residual_norm", "shard_parameters", "packing",
                                       "sft", "chunked_lm_head", "sft_max_examples"};
    const int n_tail = (int)(sizeof tail / sizeof tail[0]);
    for (int i = 0; i < n_tail; i++) {
        if (fp8run_train_config_find(tail[i]) != n - n_tail + i) printf("\n  option '%s' is not at %d", tail[i], n - n_tail + i);
        CU_ASSERT_EQUAL(fp8run_train_config_find(tail[i]), n - n_tail + i);
    }
    /* the opaque pointer has its own type, the size of a pointer */
    int k = fp8run_train_config_find("nccl_comm");
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_option(k, &e), FP8RUN_OK);
    CU_ASSERT_EQUAL(e.type, FP8RUN_OPTION_POINTER);
    CU_ASSERT_EQUAL(e.size, sizeof(void *));
    CU_ASSERT_PTR_NULL(e.flag);
}

static void test_defaults_and_choices(void)
{
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    char buf[64];
    static const struct {
        const char *name, *text;
    } want[] = {{"batch", "1"},         {"precision", "fp32"},   {"recipe", "delayed"},  {"pad_multiple", "16"},
                {"amax_history_len", "1024"}, {"ignore_index", "-100"}, {"weight_decay", "nan"}, {"eps", "1e-08"},
                {"fuse_swiglu", "1"},   {"fp8_exclude", ""},      {"max_bad_steps", "10"}, {"seed", "0"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int k = fp8run_train_config_find(want[i].name);
        CU_ASSERT_FATAL(k >= 0);
        CU_ASSERT_EQUAL(fp8run_train_config_get(&c, k, buf, sizeof buf), FP8RUN_OK);
        CU_ASSERT_STRING_EQUAL(buf, want[i].text);
    }
    /* every choice's default is one of its choices, and fp8run_choices gives the same list */
    for (int i = 0; i < fp8run_train_config_option_count(); i++) {
        fp8run_option_info e = {.struct_size = sizeof e};
        CU_ASSERT_EQUAL_FATAL(fp8run_train_config_option(i, &e), FP8RUN_OK);
        if (e.type != FP8RUN_OPTION_CHOICE) continue;
        CU_ASSERT_PTR_EQUAL(fp8run_choices(e.name), e.choices);
        CU_ASSERT_EQUAL(fp8run_train_config_get(&c, i, buf, sizeof buf), FP8RUN_OK);
        int found = 0;
        for (int j = 0; e.choices[j]; j++) found |= strcmp(e.choices[j], buf) == 0;
        CU_ASSERT(found);
    }
    const char *const *dev = fp8run_choices("device");
    CU_ASSERT_FATAL(dev != NULL);
    CU_ASSERT_STRING_EQUAL(dev[0], "auto");
    CU_ASSERT_PTR_NULL(fp8run_choices("batch"));
    CU_ASSERT_PTR_NULL(fp8run_choices("nonsense"));
}

static void test_set_from_text(void)
{
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--pad-multiple", "64"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.pad_multiple, 64);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "pad_multiple", "4096"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.pad_multiple, 4096);
    SET_ERR(&c, "--pad-multiple", "5000", "--pad-multiple: '5000' is not an integer in 1..4096");
    SET_ERR(&c, "pad_multiple", "0", "pad_multiple: '0' is not an integer in 1..4096");
    SET_ERR(&c, "--pad-multiple", "12x", "'12x' is not an integer");
    CU_ASSERT_EQUAL(c.pad_multiple, 4096); /* a refused value changes nothing */
    SET_ERR(&c, "--fp8-margin", "65", "in -64..64");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--fp8-margin", "-64"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.fp8_margin, -64);
    SET_ERR(&c, "--recipe", "fast", "--recipe: 'fast' is not one of delayed, current, block");
    const char *text = "current";
    char copy[16];
    strcpy(copy, text);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "recipe", copy), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(c.recipe, "current");
    CU_ASSERT_PTR_NOT_EQUAL(c.recipe, copy); /* the library's own string */
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--lr", "3e-4"), FP8RUN_OK);
    CU_ASSERT_DOUBLE_EQUAL(c.lr, 3e-4, 0);
    SET_ERR(&c, "--lr", "-1", "--lr: '-1' is not a number >= 0");
    SET_ERR(&c, "--lr", "inf", "is not a number");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--seed", "18446744073709551615"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.seed, UINT64_MAX);
    SET_ERR(&c, "--seed", "-1", "--seed: '-1' is not an integer >= 0");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--ignore-index", "-7"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.ignore_index, -7);
    /* booleans: the flag sets the opposite of the default, the field takes 0 or 1 */
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--no-fuse-swiglu", NULL), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.fuse_swiglu, 0);
    SET_ERR(&c, "--no-fuse", "1", "takes no value");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "fuse_swiglu", "1"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.fuse_swiglu, 1);
    SET_ERR(&c, "nesterov", "yes", "'yes' is not 0 or 1");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--train", "layers\\.0\\."), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(c.train_regex, "layers\\.0\\.");
    SET_ERR(&c, "dim_names", "x", "not set from text");
    SET_ERR(&c, "nccl_comm", "0x1234", "not set from text");
    CU_ASSERT_PTR_NULL(c.nccl_comm);
    char pbuf[8];
    CU_ASSERT_EQUAL(fp8run_train_config_get(&c, fp8run_train_config_find("nccl_comm"), pbuf, sizeof pbuf), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(pbuf, "");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--shard-optimizer", NULL), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.shard_optimizer, 1);
    SET_ERR(&c, "world_size", "-1", "world_size: '-1' is not an integer in 0..");
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "local_rank", "3"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.local_rank, 3);
    CU_ASSERT_STRING_EQUAL(c.attention, "auto"); /* cuDNN where it takes the node */
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--attention", "auto"), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(c.attention, "auto");
    SET_ERR(&c, "--attention", "flash", "--attention: 'flash' is not one of fp8run, cudnn, auto");
    CU_ASSERT_STRING_EQUAL(c.attention, "auto");
    SET_ERR(&c, "--recipe", NULL, "needs a value");
    SET_ERR(&c, "--no-such-flag", "1", "no option of that name");
    char buf[64];
    CU_ASSERT_EQUAL(fp8run_train_config_get(&c, fp8run_train_config_find("lr"), buf, sizeof buf), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(buf, "0.0003");
}

/* The library refuses a config out of the table's ranges, naming the field. */
static void test_config_checked(void)
{
    fp8run_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(FR_FIXTURES "/llama_tiny/model.onnx", &m), FP8RUN_OK);
    static const struct {
        const char *name, *value, *needle;
    } bad[] = {{"pad_multiple", NULL, "config.pad_multiple (0) must be an integer in 1..4096"},
               {"amax_history_len", NULL, "config.amax_history_len (0)"},
               {"lr", NULL, "config.lr (-1) must be >= 0"},
               {"recipe", NULL, "config.recipe is 'fast'; use one of delayed, current, block"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fp8run_train_config c;
        CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
        c.precision = "fp8";
        c.seq_len = 8;
        if (i == 0) c.pad_multiple = 0;
        if (i == 1) c.amax_history_len = 0;
        if (i == 2) c.lr = -1;
        if (i == 3) c.recipe = "fast";
        fp8run_report *r = NULL;
        CU_ASSERT_EQUAL(fp8run_model_compile(m, &c, &r), FP8RUN_ERR_INVALID_ARG);
        if (!strstr(fp8run_last_error(), bad[i].needle))
            fprintf(stderr, "\n  '%s' lacks '%s'\n", fp8run_last_error(), bad[i].needle);
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), bad[i].needle));
        CU_ASSERT_PTR_NULL(r);
    }
    fp8run_model_destroy(m);
}

static void test_internal_defaults_agree(void)
{
    fp8run_train_config c;
    CU_ASSERT_EQUAL_FATAL(fp8run_train_config_init(&c, sizeof c), FP8RUN_OK);
    api_options a;
    CU_ASSERT_EQUAL_FATAL(fr_api_options(NULL, "test", &c, &a), FP8RUN_OK);
    fr_train_options d;
    fr_train_options_default(&d);
    const fr_train_options *o = &a.o;
    CU_ASSERT_EQUAL(o->batch, d.batch);
    CU_ASSERT_EQUAL(o->seq_len, d.seq_len);
    CU_ASSERT_EQUAL(o->grad_accum, d.grad_accum);
    CU_ASSERT_STRING_EQUAL(o->precision, d.precision);
    CU_ASSERT_STRING_EQUAL(o->fp8.recipe, d.fp8.recipe);
    CU_ASSERT_STRING_EQUAL(o->fp8.fp8_format, d.fp8.fp8_format);
    CU_ASSERT_EQUAL(o->fp8.bf16_boundary, d.fp8.bf16_boundary);
    CU_ASSERT_EQUAL(o->fp8.fuse, d.fp8.fuse);
    CU_ASSERT_EQUAL(o->fp8.pad_multiple, d.fp8.pad_multiple);
    CU_ASSERT_EQUAL(o->fp8.margin, d.fp8.margin);
    CU_ASSERT_EQUAL(o->fp8.amax_history_len, d.fp8.amax_history_len);
    CU_ASSERT_EQUAL(o->fp8.amax_algo, d.fp8.amax_algo);
    CU_ASSERT_EQUAL(o->fp8.interval, d.fp8.interval);
    CU_ASSERT_PTR_NULL(d.fp8.fp8_exclude);
    CU_ASSERT_EQUAL(o->ignore_index, d.ignore_index);
    CU_ASSERT_EQUAL(memcmp(&o->opt, &d.opt, sizeof d.opt), 0);
    CU_ASSERT_EQUAL(o->lr.kind, d.lr.kind);
    CU_ASSERT_DOUBLE_EQUAL(o->lr.max_lr, d.lr.max_lr, 0);
    CU_ASSERT_DOUBLE_EQUAL(o->lr.min_lr, d.lr.min_lr, 0);
    CU_ASSERT_DOUBLE_EQUAL(o->grad_clip, d.grad_clip, 0);
    CU_ASSERT_EQUAL(o->seed, d.seed);
    CU_ASSERT_EQUAL(o->max_bad_steps, d.max_bad_steps);
    CU_ASSERT_EQUAL(o->fuse_attention, d.fuse_attention);
    CU_ASSERT_EQUAL(o->fuse_swiglu, d.fuse_swiglu);
    CU_ASSERT_EQUAL(o->eval_only, d.eval_only);
    CU_ASSERT_EQUAL(o->world_size, d.world_size);
    CU_ASSERT_EQUAL(o->rank, d.rank);
    CU_ASSERT_EQUAL(o->local_rank, d.local_rank);
    CU_ASSERT_PTR_EQUAL(o->nccl_comm, d.nccl_comm);
    CU_ASSERT_EQUAL(o->shard_optimizer, d.shard_optimizer);
    CU_ASSERT_EQUAL(o->fp8_fast_accum, 1); /* the config's default and the trainer's agree */
    CU_ASSERT_EQUAL(d.fp8_fast_accum, 1);
    /* the trainer's NULL is the config's "auto" */
    CU_ASSERT_PTR_NULL(d.attention);
    CU_ASSERT_STRING_EQUAL(o->attention, "auto");
    fr_api_options_free(&a);
    char mine[8];
    strcpy(mine, "cudnn");
    c.attention = mine;
    CU_ASSERT_EQUAL_FATAL(fr_api_options(NULL, "test", &c, &a), FP8RUN_OK);
    CU_ASSERT_STRING_EQUAL(a.o.attention, "cudnn");
    CU_ASSERT_PTR_NOT_EQUAL(a.o.attention, mine); /* the library's own string */
    fr_api_options_free(&a);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--no-fp8-fast-accum", NULL), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.fp8_fast_accum, 0);
    CU_ASSERT_EQUAL_FATAL(fr_api_options(NULL, "test", &c, &a), FP8RUN_OK);
    CU_ASSERT_EQUAL(a.o.fp8_fast_accum, 0);
    fr_api_options_free(&a);
    /* --deterministic: off by default, the flag turns it on, the trainer's option follows */
    CU_ASSERT_EQUAL(d.deterministic, 0);
    CU_ASSERT_EQUAL(c.deterministic, 0);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "--deterministic", NULL), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.deterministic, 1);
    CU_ASSERT_EQUAL_FATAL(fr_api_options(NULL, "test", &c, &a), FP8RUN_OK);
    CU_ASSERT_EQUAL(a.o.deterministic, 1);
    fr_api_options_free(&a);
    CU_ASSERT_EQUAL(fp8run_train_config_set(&c, "deterministic", "0"), FP8RUN_OK);
    CU_ASSERT_EQUAL(c.deterministic, 0);
    SET_ERR(&c, "deterministic", "2", "'2' is not 0 or 1");
}

/* Each command's help lists every flag the table gives it; a value out of range is exit 2. */
static void test_cli_from_table(void)
{
    static const struct {
        const char *cmd;
        unsigned bit;
    } cmds[] = {{"train", FP8RUN_OPTION_TRAIN},
                {"eval", FP8RUN_OPTION_EVAL},
                {"compile", FP8RUN_OPTION_COMPILE},
                {"info", FP8RUN_OPTION_INFO},
                {"bench", FP8RUN_OPTION_BENCH}};
    for (size_t k = 0; k < sizeof cmds / sizeof cmds[0]; k++) {
        CLI_EXPECT(cli_run("%s --help", cmds[k].cmd), 0, cli_out, "usage: fp8run");
        int listed = 0;
        for (int i = 0; i < fp8run_train_config_option_count(); i++) {
            fp8run_option_info e = {.struct_size = sizeof e};
            CU_ASSERT_EQUAL_FATAL(fp8run_train_config_option(i, &e), FP8RUN_OK);
            if (!e.flag) continue;
            char line[96];
            snprintf(line, sizeof line, "\n  %s ", e.flag);
            const char *hit = strstr(cli_out, line);
            if (!hit) { /* a BOOL's flag is followed by spaces and its help */
                snprintf(line, sizeof line, "\n  %s", e.flag);
                hit = strstr(cli_out, line);
                if (hit && hit[strlen(line)] != ' ') hit = NULL;
            }
            /* (a flag not marked may still be the command's own: bench --warmup, --steps) */
            if (!(e.commands & cmds[k].bit)) continue;
            if (!hit) fprintf(stderr, "\n  fp8run %s --help lacks %s\n", cmds[k].cmd, e.flag);
            CU_ASSERT_PTR_NOT_NULL(hit);
            listed++;
        }
        CU_ASSERT(listed >= 2);
    }
    static const struct {
        const char *args, *needle;
    } usage[] = {
        {"compile m.onnx -o m.fbs --batch 2 --seq 4 --pad-multiple 0",
         "--pad-multiple: '0' is not an integer in 1..4096"},
        {"bench m.onnx --batch 2 --seq 4 --recipe fast", "--recipe: 'fast' is not one of delayed, current, block"},
        {"eval m.onnx --data t.bin --batch 2 --seq 4 --recipe delayed", "unknown option '--recipe'"},
        {"train m.onnx --data t.bin --steps 2 --lr 1e-3 --no-fuse=0", "unknown option '--no-fuse=0'"},
        {"train m.onnx --data t.bin --steps 2 --lr=-1", "--lr: '-1' is not a number >= 0"},
        {"info m.onnx --amax-history", "--amax-history needs a value"},
    };
    for (size_t k = 0; k < sizeof usage / sizeof usage[0]; k++)
        CLI_EXPECT(cli_run("%s", usage[k].args), 2, cli_err, usage[k].needle);
    /* `info` says what --deterministic does to the GEMMs (no device needed) */
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx --deterministic", FR_FIXTURES), 0, cli_out,
               "gemm           cuBLASLt, the heuristic's first algorithm (--deterministic)");
    CLI_EXPECT(cli_run("info %s/llama_tiny/model.onnx", FR_FIXTURES), 0, cli_out, "timed per shape");
    CU_ASSERT_PTR_NULL(strstr(cli_out, "--deterministic"));
}

static CU_TestInfo tests[] = {
    {"table covers fp8run_train_config", test_table_covers_struct},
    {"defaults and choices", test_defaults_and_choices},
    {"set and get from text", test_set_from_text},
    {"a config out of range is refused", test_config_checked},
    {"the trainer's defaults agree with the table", test_internal_defaults_agree},
    {"CLI parsers and help from the table", test_cli_from_table},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api_options", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
